"""The JIT cache's probes: it never serves the wrong entry, survives pruning, and fails in one line.

Each probe runs the runtime's JitKernelCache with a fake GPU and the stand-in compiler process
(`gpu_runtime_testutil.stand_in_compiler`, whose bytes depend on its inputs and on the codegen
environment variables), in this process or in worker processes where processes are the point
(a live holder, concurrency, a read-only filesystem, an injected disk fault). Each also checks
the other side of its guarantee where that can fail (the fault really happened, the control
case compiles), so that a probe cannot pass by testing nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from gpu_runtime.conftest import FakeBackend
from gpu_runtime.errors import GpuRuntimeError
from gpu_runtime.jit.cache import JitKernelCache
from gpu_runtime.jit.compiler import Compiler, find_compiler
from gpu_runtime.jit.sources import find_jit_sources
from gpu_runtime.jit.store import JitStore
from gpu_runtime_testutil.jit_index import write_index as write_entry
from probe_table import findings, held, refused, run_probes

K = "src/python/imaging/kernels"
KERNELS = {
    "saxpy": (f"{K}/saxpy.py", {f"{K}/saxpy.py": b"saxpy v1", f"{K}/pkg/helpers/h.py": b"h v1"}),
    "sobel": (
        f"{K}/sobel.cu",
        {f"{K}/sobel.cu": b"sobel_magnitude v1", f"{K}/sub/val.cuh": b"val v1"},
    ),
}
PYTHONPATH = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
STAND_IN = (sys.executable, "-m", "gpu_runtime_testutil.stand_in_compiler")


def write_index(base: str, files_of: Optional[Dict[str, Dict[str, bytes]]] = None) -> str:
    """What `pants export-codegen` (or a sandbox) holds under sys.path entry `base`."""
    for library, (source, default) in KERNELS.items():
        write_entry(base, library, source, (files_of or {}).get(library, default))
    return base


def stand_in(env: Optional[Dict[str, str]] = None) -> Compiler:
    return Compiler(STAND_IN, dict(env or os.environ, PYTHONPATH=PYTHONPATH), "stand-in")


def jit_cache(index: str, store: str, compiler: Callable[[], Any] = stand_in) -> JitKernelCache:
    return JitKernelCache(
        find_jit_sources([index]), FakeBackend(), store=JitStore(store), compiler=compiler
    )


def entry_bytes(store: str) -> Dict[str, Dict[str, bytes]]:
    """{library: {file: bytes}} of every entry (entry.json, which names the key, left out)."""
    out = {}
    for e in JitStore(store).entries():
        names = sorted(n for n in os.listdir(e.path) if n != "entry.json")
        out[e.info["library"]] = {n: open(os.path.join(e.path, n), "rb").read() for n in names}
    return out


def compiles(log: str) -> int:
    return len(open(log).read().splitlines()) if os.path.exists(log) else 0


@contextlib.contextmanager
def environ(**values: Optional[str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def one_line_error(call: Callable[[], Any]) -> str:
    """The GpuRuntimeError `call` raised (its text), or a FINDING line if it raised none."""
    try:
        call()
    except GpuRuntimeError as e:
        return str(e)
    return "FINDING: no error"


# -- worker processes ---------------------------------------------------------------------------
WORKER = textwrap.dedent(
    """
    import errno, json, os, sys
    from gpu_runtime.driver.device import DeviceInfo
    from gpu_runtime.errors import GpuRuntimeError
    from gpu_runtime.jit.cache import JitKernelCache
    from gpu_runtime.jit.compiler import Compiler
    from gpu_runtime.jit.sources import find_jit_sources
    from gpu_runtime.jit.store import JitStore

    class Backend:  # the least a kernel load needs
        def device_info(self):
            return DeviceInfo(ordinal=0, name="fake", capability=(9, 0), driver_version=(13, 0))
        def load(self, kind, data, name):
            return name
        def get_function(self, obj, entry):
            return entry
        def __getattr__(self, name):
            return lambda *args: None

    cfg = json.loads(sys.argv[1])
    compiler = Compiler(
        (sys.executable, "-m", "gpu_runtime_testutil.stand_in_compiler"), dict(os.environ), "fake"
    )
    try:
        store = JitStore(cfg["store"])
        cache = JitKernelCache(
            find_jit_sources([cfg["index"]]), Backend(), store=store, compiler=lambda: compiler
        )
        fault = cfg.get("fault")
        if fault:  # ENOSPC from one step of the store's write path, as a full disk gives it
            tmp = os.path.join(store.root, ".tmp")
            def full(*args, **kwargs):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real = {"write": os.write, "rename": os.rename, "makedirs": os.makedirs}[fault[0]]
            def faulty(*args, **kwargs):
                paths = [a for a in args if isinstance(a, str)]
                hit = fault[0] == "write" or any(p.startswith(tmp) for p in paths)
                if fault[0] == "rename" and fault[1] == "publish":
                    hit = hit and not paths[1].startswith(tmp)
                if fault[0] == "rename" and fault[1] == "move":
                    hit = hit and paths[1].startswith(tmp)
                return full() if hit else real(*args, **kwargs)
            setattr(os, fault[0], faulty)
        kernels = [cache.kernel(name) for name in cfg["kernels"]]  # compiled, not yet loaded
        if cfg.get("wait"):
            print("READY", flush=True)
            sys.stdin.readline()
        for k in kernels:
            k.load()
        print("OK")
    except GpuRuntimeError as e:
        print("ERR: " + str(e))
    """
)


def worker(cfg: Dict[str, Any], env: Optional[Dict[str, str]] = None, **popen: Any) -> Any:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(cfg)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=dict(os.environ, PYTHONPATH=PYTHONPATH, **(env or {})),
        **popen,
    )


def outcome(proc: Any, stdin: str = "") -> str:
    """ "OK", "ERR: <one line>", or a FINDING with the end of what the worker wrote."""
    out, err = proc.communicate(stdin, timeout=300)
    lines = out.strip().splitlines()
    if proc.returncode == 0 and lines and lines[-1].startswith(("OK", "ERR: ")):
        if lines[-1].startswith("ERR: ") and len(lines) > 1 and lines[-2] != "READY":
            return f"FINDING: error of several lines: {out.strip()!r}"
        return lines[-1]
    return f"FINDING: worker exit {proc.returncode}: {(out + err).strip()[-600:]!r}"


# -- the probes ---------------------------------------------------------------------------------
CODEGEN_VARS = {  # every spelling of the environment a compile must not see
    "NUMBA_OPT": "0",
    "NUMBA_CUDA_DEFAULT_PTX_CC": "7.5",
    "NUMBA_DEBUGINFO": "1",
    "numba_opt": "0",
    "CUDA_HOME": "/opt/other-cuda",
    "CUDA_PATH": "/opt/other-cuda",
    "NVRTC_OPTIONS": "-G",
    "LD_LIBRARY_PATH": "/opt/other-cuda/lib64",
    "PEX_PATH": "/tmp/other.pex",
    "PEX_INHERIT_PATH": "prefer",
}


def probe_env_leak(tmp: str) -> str:
    """An entry compiled with NUMBA_OPT=0 (or any codegen variable) set in the app's
    environment must hold the bytes of a clean compile: the compiler's environment is fixed."""
    index = write_index(os.path.join(tmp, "site"))
    pkg = os.path.join(tmp, "compiler", "gpu_compiler")  # `-m gpu_compiler`: the stand-in
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "__main__.py"), "w") as f:
        f.write(
            "from gpu_runtime_testutil.stand_in_compiler import main\nraise SystemExit(main())\n"
        )
    base = {k: v for k, v in os.environ.items() if k not in CODEGEN_VARS}
    base.update(
        GPU_RUNTIME_TOOLCHAIN=sys.executable,
        PYTHONPATH=os.pathsep.join([os.path.dirname(pkg), PYTHONPATH]),
    )

    def compile_with(env: Dict[str, str], store: str) -> Dict[str, Dict[str, bytes]]:
        compiler = find_compiler(env)
        jit_cache(index, store, compiler=lambda: compiler).kernel("saxpy").load()
        return entry_bytes(store)

    clean = compile_with(base, os.path.join(tmp, "clean"))
    # The probe can fail: given the variable, the stand-in's bytes change.
    leaked = os.path.join(tmp, "leaked")
    jit_cache(index, leaked, compiler=lambda: stand_in(dict(base, NUMBA_OPT="0"))).kernel(
        "saxpy"
    ).load()
    if entry_bytes(leaked) == clean:
        return "FINDING: the stand-in compiler ignores NUMBA_OPT: this probe tests nothing"
    for n, (var, value) in enumerate(CODEGEN_VARS.items()):
        env = dict(base, **{var: value})
        if var in find_compiler(env).env:  # type: ignore[union-attr]
            return f"FINDING: {var} reaches the compiler process"
        if compile_with(env, os.path.join(tmp, f"s{n}")) != clean:
            return f"FINDING: {var}={value} in the environment changed the compiled bytes"
    # The reported bug: compiled under NUMBA_OPT=0, then served to a normal run.
    shared = os.path.join(tmp, "shared")
    compile_with(dict(base, NUMBA_OPT="0"), shared)
    if compile_with(base, shared) != clean:
        return "FINDING: a normal run was served an entry compiled under NUMBA_OPT=0"
    return held(
        f"the compiler runs in an allowlisted environment: with each of {len(CODEGEN_VARS)} "
        "codegen variables set (NUMBA_OPT=0, numba_opt, CUDA_HOME, NVRTC_OPTIONS, "
        "LD_LIBRARY_PATH, PEX_PATH...) the entry is byte-identical to a clean compile"
    )


def probe_prune_under_live_process(tmp: str) -> str:
    """A process holds an entry it has looked up but not loaded yet; another compiles with a
    bound of 1 byte and `cache prune --max-size 1` runs: the holder still loads it. After it
    exits, a prune evicts it and the next run, a miss, compiles it again."""
    index = write_index(os.path.join(tmp, "site"))
    store = os.path.join(tmp, "jit")
    log = os.path.join(tmp, "compiles.log")
    env = {"FAKE_COMPILER_LOG": log, "GPU_RUNTIME_JIT_CACHE_SIZE": "1"}
    holder = worker({"index": index, "store": store, "kernels": ["saxpy"], "wait": True}, env)
    if holder.stdout.readline().strip() != "READY":
        return outcome(holder)
    other = outcome(worker({"index": index, "store": store, "kernels": ["sobel_magnitude"]}, env))
    evicted = JitStore(store).prune(1)
    got = outcome(holder, "go\n")
    if other != "OK" or got != "OK" or len(evicted) != 1:
        return f"FINDING: holder {got!r}, other {other!r}, evicted {len(evicted)} (want 1)"
    # The reported bug in one process: the second compile's prune evicted the first's entry,
    # on every run. Twice, to see it heal rather than repeat.
    for _ in range(2):
        got = outcome(
            worker({"index": index, "store": store, "kernels": ["saxpy", "sobel_magnitude"]}, env)
        )
        if got != "OK":
            return f"FINDING: one process, two kernels, bound 1 byte: {got}"
    JitStore(store).prune(1)  # nobody holds anything now
    before = compiles(log)
    got = outcome(worker({"index": index, "store": store, "kernels": ["saxpy"]}, env))
    if got != "OK" or compiles(log) != before + 1:
        return f"FINDING: a miss after a prune: {got}, {compiles(log) - before} compiles"
    return held(
        "a held entry survived a 1-byte bound and `cache prune`; once released it was evicted "
        "and the next miss recompiled it"
    )


def probe_concurrent_tiny_bound(tmp: str) -> str:
    """8 processes at once, each using two kernels, with a bound of 1.5 entries: all succeed."""
    index = write_index(os.path.join(tmp, "site"))
    scratch = os.path.join(tmp, "scratch")
    jit_cache(index, scratch).kernel("saxpy").load()
    one = max(e.size for e in JitStore(scratch).entries())
    store = os.path.join(tmp, "jit")
    env = {"GPU_RUNTIME_JIT_CACHE_SIZE": str(one * 3 // 2), "FAKE_COMPILER_SLEEP": "0.1"}
    cfg = {"index": index, "store": store, "kernels": ["saxpy", "sobel_magnitude"]}
    procs = [
        worker(dict(cfg, kernels=cfg["kernels"][:: 1 if n % 2 else -1]), env) for n in range(8)
    ]
    results = [outcome(p) for p in procs]
    bad = [r for r in results if r != "OK"]
    left = os.listdir(os.path.join(store, "v1", ".tmp"))
    if bad or left:
        return f"FINDING: {len(bad)} of 8 failed ({bad[:1]}); staging dirs left: {left}"
    return held(f"8 of 8 processes ran with a bound of 1.5 entries ({one * 3 // 2} bytes)")


def _stale_everywhere(
    jit_cache_at: Callable[[Sequence[str], int], JitKernelCache],
    spellings: List[Sequence[str]],
    repo: str,
    live: Dict[str, Dict[str, bytes]],
    cases: List[Tuple[str, str, str]],
    how: str,
) -> Tuple[str, str]:
    """Each (library, file, kernel) of `cases` edited or deleted in the checkout in turn: its
    load is refused as stale under every sys.path spelling, then the file is put back.
    Returns (a finding, or "", the first refusal)."""
    first = ""
    for lib, path, name in cases:
        if how == "edited":
            with open(os.path.join(repo, path), "wb") as f:
                f.write(b"edited after export-codegen")
        else:
            os.remove(os.path.join(repo, path))
        for n, sp in enumerate(spellings, start=1):
            e = one_line_error(
                lambda sp=sp, n=n, name=name, lib=lib: jit_cache_at(sp, n)  # type: ignore
                .kernel(name, lib)
                .load()
            )
            said = "is stale" if how == "edited" else "no longer in"
            if "is stale" not in e or said not in e or path not in e or "\n" in e:
                return f"FINDING: {path} {how}, sys.path {sp}: {e!r}", first
            first = first or e
        with open(os.path.join(repo, path), "wb") as f:
            f.write(live[lib][path])
    return "", first


def probe_stale_codegen(tmp: str) -> str:
    """An index that `export-codegen` wrote into dist/codegen before the checkout changed (the
    source, a helper in a subpackage, a header edited; a header or helper deleted) is refused
    before anything is compiled, however the checkout's sys.path entry is spelled; an up-to-date
    one compiles."""
    repo = os.path.join(tmp, "repo")
    live = {lib: dict(files) for lib, (_, files) in KERNELS.items()}
    for files in live.values():
        for path, content in files.items():
            os.makedirs(os.path.dirname(os.path.join(repo, path)), exist_ok=True)
            with open(os.path.join(repo, path), "wb") as f:
                f.write(content)
    exported = os.path.join(repo, "dist", "codegen", "src", "python")
    log = os.path.join(tmp, "compiles.log")
    cwd = os.getcwd()
    spellings: List[Sequence[str]] = [
        [os.path.join(repo, "src", "python"), exported],
        [os.path.join(repo, "src", "python") + "/", exported],
        ["src/python", "dist/codegen/src/python"],  # relative, from the checkout
        ["./src/./python", exported],
        [exported, os.path.join(repo, "src", "python")],  # the stale index first
    ]
    with environ(FAKE_COMPILER_LOG=log):
        write_index(exported)
        jit_cache_at = lambda path, n: JitKernelCache(  # noqa: E731
            find_jit_sources(path),
            FakeBackend(),
            store=JitStore(f"{tmp}/jit{n}"),
            compiler=stand_in,
        )
        try:
            os.chdir(repo)
            jit_cache_at(spellings[0], 0).kernel("saxpy", "saxpy").load()  # control: up to date
            if compiles(log) != 1:
                return "FINDING: an up-to-date export did not compile"
            edited = [
                ("saxpy", f"{K}/saxpy.py", "saxpy"),
                ("saxpy", f"{K}/pkg/helpers/h.py", "saxpy"),
                ("sobel", f"{K}/sub/val.cuh", "sobel_magnitude"),
            ]
            found, first = _stale_everywhere(jit_cache_at, spellings, repo, live, edited, "edited")
            if found:
                return found
            # deleted from the checkout but left in dist/codegen (last round's item 9)
            deleted = [
                ("sobel", f"{K}/sub/val.cuh", "sobel_magnitude"),
                ("saxpy", f"{K}/pkg/helpers/h.py", "saxpy"),
            ]
            found, _ = _stale_everywhere(jit_cache_at, spellings, repo, live, deleted, "deleted")
            if found:
                return found
        finally:
            os.chdir(cwd)
    if compiles(log) != 1:
        return f"FINDING: {compiles(log) - 1} stale compiles"
    return refused(first, "is stale")


def _drop_dac() -> None:
    """In the worker, as root: drop the capabilities that let root write a read-only
    directory (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so its permission bits hold."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def probe_read_only_cache(tmp: str) -> str:
    """A read-only cache directory (holding an entry, or not yet created under a read-only
    parent) is one line when the cache opens, before any compile. Real permissions: the worker
    runs without root's override capabilities."""
    index = write_index(os.path.join(tmp, "site"))
    log = os.path.join(tmp, "compiles.log")
    with_entry = os.path.join(tmp, "ro1")
    jit_cache(index, with_entry).kernel("saxpy").load()
    gc.collect()
    parent = os.path.join(tmp, "ro2")
    os.makedirs(parent)
    targets = [with_entry, parent]
    for top in targets:
        for dirpath, _, _ in os.walk(top):
            os.chmod(dirpath, 0o555)
    first = ""
    try:
        for n, store in enumerate([with_entry, os.path.join(parent, "jit")]):
            cfg = {"index": index, "store": store, "kernels": ["sobel_magnitude"]}
            drop = _drop_dac if os.geteuid() == 0 else None
            got = outcome(worker(cfg, {"FAKE_COMPILER_LOG": log}, preexec_fn=drop))
            if not got.startswith("ERR: ") or "GPU_RUNTIME_JIT_CACHE" not in got:
                return f"FINDING: read-only cache {n}: {got}"
            first = first or got[len("ERR: ") :]
    finally:
        for top in targets:
            for dirpath, _, _ in os.walk(top):
                os.chmod(dirpath, stat.S_IRWXU)
    if compiles(log):
        return "FINDING: it compiled before refusing the read-only cache"
    return refused(first, "cannot write the JIT cache")


def probe_read_only_cache_hit(tmp: str) -> str:
    """A shared read-only cache (every directory 0555, the worker without root's override)
    holding saxpy's entry: a hit loads from it, compiling nothing; a miss is one line."""
    index = write_index(os.path.join(tmp, "site"))
    log = os.path.join(tmp, "compiles.log")
    store = os.path.join(tmp, "shared")
    jit_cache(index, store).kernel("saxpy").load()
    gc.collect()
    for dirpath, _, _ in os.walk(store):
        os.chmod(dirpath, 0o555)
    drop = _drop_dac if os.geteuid() == 0 else None
    try:
        hit = outcome(
            worker({"index": index, "store": store, "kernels": ["saxpy"]},
                   {"FAKE_COMPILER_LOG": log}, preexec_fn=drop)  # fmt: skip
        )
        miss = outcome(
            worker({"index": index, "store": store, "kernels": ["sobel_magnitude"]},
                   {"FAKE_COMPILER_LOG": log}, preexec_fn=drop)  # fmt: skip
        )
    finally:
        for dirpath, _, _ in os.walk(store):
            os.chmod(dirpath, stat.S_IRWXU)
    if hit != "OK":
        return f"FINDING: a hit in a read-only cache failed: {hit}"
    if compiles(log):
        return f"FINDING: {compiles(log)} compiles in a read-only cache"
    if not miss.startswith("ERR: ") or "GPU_RUNTIME_JIT_CACHE" not in miss:
        return f"FINDING: a miss in a read-only cache: {miss}"
    return held("a hit loads from a read-only cache, compiling nothing; a miss is one line")


def probe_write_locks_left(tmp: str) -> str:
    """`.locks/<key>.lock` (the writers' lock) is gone once its compile is published, and a
    prune sweeps one a crash left; the entries' `.use` files are a held entry's own."""
    index = write_index(os.path.join(tmp, "site"))
    store = os.path.join(tmp, "jit")
    cache = jit_cache(index, store)
    cache.kernel("saxpy").load()
    cache.kernel("sobel_magnitude").load()
    locks = os.path.join(store, "v1", ".locks")
    left = sorted(n for n in os.listdir(locks) if n.endswith(".lock"))
    if left:
        return f"FINDING: {len(left)} write-lock files left after 2 compiles: {left[:2]}"
    open(os.path.join(locks, "0" * 64 + ".lock"), "w").close()  # a crashed writer's
    JitStore(store).prune(1 << 30)
    left = sorted(n for n in os.listdir(locks) if n.endswith(".lock"))
    if left:
        return f"FINDING: prune left an unheld write lock: {left}"
    return held("no .lock file left after 2 compiles; prune swept a crashed writer's")


def probe_unreadable_entry_kept(tmp: str) -> str:
    """A valid entry that this process cannot read now (EMFILE injected; EACCES by its mode,
    in a worker without root's override) is kept, with one line saying why; once readable
    it is a hit, compiling nothing."""
    import errno

    index = write_index(os.path.join(tmp, "site"))
    log = os.path.join(tmp, "compiles.log")
    store = os.path.join(tmp, "jit")
    with environ(FAKE_COMPILER_LOG=log):
        jit_cache(index, store).kernel("saxpy").load()
    gc.collect()
    (entry,) = JitStore(store).entries()
    first = ""
    import gpu_runtime.jit.store as store_module

    real = store_module.regular_file_sha256

    def emfile(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    store_module.regular_file_sha256 = emfile
    try:
        e = one_line_error(lambda: jit_cache(index, store).kernel("saxpy").load())
    finally:
        store_module.regular_file_sha256 = real
    gc.collect()
    if not os.path.isdir(entry.path):
        return f"FINDING: EMFILE deleted a valid entry ({e})"
    if "\n" in e or "kept" not in e:
        return f"FINDING: EMFILE: {e!r}"
    first = e
    info = os.path.join(entry.path, "entry.json")
    os.chmod(info, 0)
    drop = _drop_dac if os.geteuid() == 0 else None
    try:
        got = outcome(
            worker({"index": index, "store": store, "kernels": ["saxpy"]},
                   {"FAKE_COMPILER_LOG": log}, preexec_fn=drop)  # fmt: skip
        )
    finally:
        os.chmod(info, 0o644)
    if not os.path.isdir(entry.path):
        return f"FINDING: EACCES deleted a valid entry ({got})"
    if not got.startswith("ERR: ") or "kept" not in got:
        return f"FINDING: EACCES: {got}"
    got = outcome(worker({"index": index, "store": store, "kernels": ["saxpy"]}))
    if got != "OK" or compiles(log) != 1:
        return f"FINDING: readable again: {got}, {compiles(log)} compiles"
    return refused(first, "cannot read the JIT cache entry")


def probe_full_disk(tmp: str) -> str:
    """ENOSPC, injected in a worker into each step of the store's write path (the staging
    directory, moving the compiler's outputs, writing entry.json, the publishing rename): one
    line, no staging directory left, nothing published; the next run, with room, compiles."""
    index = write_index(os.path.join(tmp, "site"))
    store = os.path.join(tmp, "jit")
    first = ""
    faults = [
        ("makedirs", "staging"),
        ("rename", "move"),
        ("write", "entry"),
        ("rename", "publish"),
    ]
    for fault in faults:
        got = outcome(
            worker({"index": index, "store": store, "kernels": ["saxpy"], "fault": fault})
        )
        left = os.listdir(os.path.join(store, "v1", ".tmp"))
        if not got.startswith("ERR: ") or "No space left" not in got or "free space" not in got:
            return f"FINDING: ENOSPC at {fault}: {got}"
        if left or JitStore(store).entries():
            return f"FINDING: ENOSPC at {fault} left {left} in .tmp or published an entry"
        first = first or got[len("ERR: ") :]
    got = outcome(worker({"index": index, "store": store, "kernels": ["saxpy"]}))
    if got != "OK" or len(JitStore(store).entries()) != 1:
        return f"FINDING: with room again: {got}"
    return refused(first, "No space left on device): free space there")


def probe_full_disk_in_the_compile(tmp: str) -> str:
    """The disk fills while the compile process writes its outputs (into the store's working
    directory): the compiler dies with a traceback; the app must say it in one line (the
    cache's directory, the cause, the fix), leave nothing staged, and compile once there is
    room."""
    index = write_index(os.path.join(tmp, "site"))
    store = os.path.join(tmp, "jit")
    with environ(FAKE_COMPILER_ENOSPC="1"):
        e = one_line_error(lambda: jit_cache(index, store).kernel("saxpy").load())
    if "\n" in e or "No space left" not in e or "free space" not in e:
        return f"FINDING: {len(e.splitlines())} lines: {e.splitlines()[-1:]!r}"
    left = os.listdir(os.path.join(store, "v1", ".tmp"))
    if left or JitStore(store).entries():
        return f"FINDING: left {left} in .tmp or published an entry"
    gc.collect()
    got = one_line_error(lambda: jit_cache(index, store).kernel("saxpy").load())
    if got != "FINDING: no error" or len(JitStore(store).entries()) != 1:
        return f"FINDING: with room again: {got}"
    return refused(e, "No space left on device): free space there")


BAD_SIZES = ["abc", " ", "-1", "1e9", "0x10", "1.2.3", "10 XB", "9" * 400, "nan", "1G;rm"]


def probe_bad_size_setting(tmp: str) -> str:
    """GPU_RUNTIME_JIT_CACHE_SIZE that is no size: one line naming it when the cache opens,
    before any compile; the CLI's prune says the same."""
    index = write_index(os.path.join(tmp, "site"))
    log = os.path.join(tmp, "compiles.log")
    first = ""
    for bad in BAD_SIZES:
        with environ(GPU_RUNTIME_JIT_CACHE_SIZE=bad, FAKE_COMPILER_LOG=log):
            e = one_line_error(lambda: jit_cache(index, os.path.join(tmp, "jit")))
        if "GPU_RUNTIME_JIT_CACHE_SIZE" not in e or "\n" in e or "500M" not in e:
            return f"FINDING: GPU_RUNTIME_JIT_CACHE_SIZE={bad[:20]!r}: {e!r}"
        first = first or e
    if compiles(log):
        return "FINDING: it compiled before refusing the size"
    cli = subprocess.run(
        [sys.executable, "-m", "gpu_runtime", "cache", "prune", "--cache-dir", tmp],
        env=dict(os.environ, PYTHONPATH=PYTHONPATH, GPU_RUNTIME_JIT_CACHE_SIZE="abc"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )
    if cli.returncode != 2 or len(cli.stderr.strip().splitlines()) != 1:
        return f"FINDING: `cache prune` with a bad size: exit {cli.returncode}: {cli.stderr!r}"
    return refused(first, "is not a size: set it to a size such as 500M")


def in_tmp(probe: Callable[[str], str]) -> Callable[[], str]:
    def run() -> str:
        tmp = tempfile.mkdtemp(prefix="jit-probe-")
        try:
            return probe(tmp)
        finally:
            gc.collect()
            shutil.rmtree(tmp, ignore_errors=True)

    return run


def test_jit_cache_probes() -> None:
    rows = run_probes(
        "jit cache",
        [
            ("codegen env var leaks into the compile", in_tmp(probe_env_leak)),
            ("prune under a live process", in_tmp(probe_prune_under_live_process)),
            ("8 processes, bound of 1.5 entries", in_tmp(probe_concurrent_tiny_bound)),
            ("stale dist/codegen index", in_tmp(probe_stale_codegen)),
            ("read-only cache dir", in_tmp(probe_read_only_cache)),
            ("read-only shared cache: a hit", in_tmp(probe_read_only_cache_hit)),
            ("write-lock files after compiles", in_tmp(probe_write_locks_left)),
            ("valid entry unreadable (EMFILE, EACCES)", in_tmp(probe_unreadable_entry_kept)),
            ("full disk (ENOSPC injected)", in_tmp(probe_full_disk)),
            ("full disk in the compile process", in_tmp(probe_full_disk_in_the_compile)),
            ("bad GPU_RUNTIME_JIT_CACHE_SIZE", in_tmp(probe_bad_size_setting)),
        ],
    )
    assert findings(rows) == []
