"""JIT mode with a fake GPU and a fake compiler process (`jit_test_compiler`): what the key
covers, contention, corruption, eviction, strict mode and bundle fallback. The real compiler
runs on the H200 in tests/gpu/jit_mode_check.sh."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import textwrap

import pytest

import gpu_runtime

# noqa: F401 (run as a process: inference needs this)
from gpu_runtime.conftest import FakeBackend, library_specs, write_bundle
from gpu_runtime.errors import (
    AmbiguousKernelError,
    DeviceError,
    KernelNotFoundError,
    NoCompatibleVariantError,
)
from gpu_runtime.jit.cache import JitKernelCache
from gpu_runtime.jit.compiler import Compiler, CompilerNotFoundError, JitCompileError
from gpu_runtime.jit.sources import find_jit_sources
from gpu_runtime.jit.store import ENTRY_FILE, JitStore
from gpu_runtime_testutil.jit_index import (
    HEADER,
    HELPER,
    SAXPY_SRC,
    SOBEL_SRC,
    fake_compiler,
    write_index,
)
from gpu_spec.jit_index import entry_paths


@pytest.fixture
def index_dir(tmp_path):
    base = str(tmp_path / "site")
    write_index(base, "saxpy", SAXPY_SRC, {SAXPY_SRC: b"saxpy v1", HELPER: b"helper v1"})
    write_index(base, "sobel", SOBEL_SRC, {SOBEL_SRC: b"sobel_magnitude v1", HEADER: b"val v1"})
    return base


def _rewrite_input(base: str, library: str, path: str, content: bytes) -> None:
    """Changes one input file of a generated index entry, its recorded sha256 with it."""
    import hashlib
    import json

    index, files_dir = entry_paths("", f"src.python.imaging.kernels.{library}")
    with open(os.path.join(base, files_dir, path), "wb") as f:
        f.write(content)
    with open(os.path.join(base, index)) as f:
        entry = json.load(f)
    entry["files"][path] = hashlib.sha256(content).hexdigest()
    with open(os.path.join(base, index), "w") as f:
        json.dump(entry, f)


@pytest.fixture
def compile_log(tmp_path, monkeypatch):
    log = tmp_path / "compiles.log"
    monkeypatch.setenv("FAKE_COMPILER_LOG", str(log))
    return log


def jit_cache(index_dir, tmp_path, backend=None, compiler=fake_compiler) -> JitKernelCache:
    return JitKernelCache(
        find_jit_sources([index_dir]),
        backend or FakeBackend(),
        store=JitStore(str(tmp_path / "jit")),
        compiler=compiler,
    )


def compiles(log) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_compiles_on_first_use_then_hits(index_dir, tmp_path, compile_log):
    """A qualified name compiles its library alone; a bare one every library not compiled yet
    (a kernel of that name in two of them would make it ambiguous), each a hit from then on."""
    cache = jit_cache(index_dir, tmp_path)
    cache.kernel("saxpy.saxpy").load()
    assert compiles(compile_log) == 1
    assert "compiled now for sm_90" in cache.describe()
    again = jit_cache(index_dir, tmp_path)
    again.kernel("saxpy", library="saxpy").load()
    assert compiles(compile_log) == 1
    assert "JIT cache hit for sm_90" in again.describe()
    bare = jit_cache(index_dir, tmp_path)
    bare.kernel("saxpy").load()
    assert compiles(compile_log) == 1  # sobel's files do not say "saxpy": it cannot define it
    assert bare.kernel_names() == ["saxpy.saxpy", "sobel.sobel_magnitude"]  # compiles sobel
    assert compiles(compile_log) == 2
    hits = jit_cache(index_dir, tmp_path)
    hits.kernel("saxpy").load()
    assert compiles(compile_log) == 2
    assert "JIT cache hit for sm_90" in hits.describe()


def test_a_bare_name_compiles_each_library_whose_files_say_it(index_dir, tmp_path, compile_log):
    """`JitSource.may_define`: a library is compiled for a bare name only if the name is a word
    of one of its files (here sobel's header), never for a mere substring."""
    _rewrite_input(index_dir, "sobel", HEADER, b"// not saxpy_like, nor xsaxpy\n")
    jit_cache(index_dir, tmp_path).kernel("saxpy").load()
    assert compiles(compile_log) == 1
    _rewrite_input(index_dir, "sobel", HEADER, b"// calls saxpy(...)\n")
    jit_cache(index_dir, tmp_path).kernel("saxpy").load()
    assert compiles(compile_log) == 2  # sobel compiled to see whether it defines saxpy too


def test_an_ambiguous_bare_name_is_refused_with_the_qualified_names(
    index_dir, tmp_path, compile_log
):
    """As in a bundle (one rule, gpu_runtime.bundle.lookup): the library compiled first never
    wins; the qualified names work."""
    other = "src/python/other/saxpy.py"
    write_index(index_dir, "saxpy_f64", other, {other: b"saxpy f64"})
    cache = jit_cache(index_dir, tmp_path)
    with pytest.raises(AmbiguousKernelError) as e:
        cache.kernel("saxpy")
    assert str(e.value).startswith("kernel name 'saxpy' is ambiguous in JIT mode (3 kernel")
    assert str(e.value).endswith(": use one of saxpy.saxpy, saxpy_f64.saxpy")
    assert compiles(compile_log) == 2  # not sobel: its files do not say "saxpy"
    assert cache.kernel("saxpy_f64.saxpy").library == "saxpy_f64"
    assert cache.kernel("saxpy", library="saxpy").library == "saxpy"
    assert compiles(compile_log) == 2


def test_an_ambiguous_bundle_name_is_refused_without_compiling(
    index_dir, tmp_path, compile_log, monkeypatch
):
    """Two bundle libraries define saxpy: refused there; JIT mode's libraries (the same
    targets) would define it twice as well, so nothing is compiled."""
    from gpu_runtime.conftest import SAXPY2

    specs = library_specs(
        ["saxpy", "saxpy64"], caps=("sm_90",), extra={"saxpy64": ("k/saxpy64.py", "numba", SAXPY2)}
    )
    cache_dir = write_bundle(str(tmp_path / "dist" / "b"), specs)
    monkeypatch.setenv("GPU_RUNTIME_JIT_CACHE", str(tmp_path / "jit"))
    cache = gpu_runtime.open_cache(
        cache_dir, kernels_path=[index_dir], backend=FakeBackend(), compiler=fake_compiler
    )
    with pytest.raises(AmbiguousKernelError, match="use one of saxpy.saxpy, saxpy64.saxpy"):
        cache.kernel("saxpy")
    assert compiles(compile_log) == 0


def _key_after(index_dir, tmp_path, edit=None, capability=(9, 0), code=None, monkeypatch=None):
    if edit:
        path, content = edit
        root = os.path.join(index_dir, "__gpu_kernels__", f"src.python.imaging.kernels.{path[0]}")
        with open(os.path.join(root, path[1]), "wb") as f:
            f.write(content)
    if code:
        monkeypatch.setenv("FAKE_COMPILER_CODE", code)
    cache = jit_cache(index_dir, tmp_path, FakeBackend(capability=capability))
    sobel = edit and edit[0][0] == "sobel"
    cache.kernel("sobel.sobel_magnitude" if sobel else "saxpy.saxpy").load()
    return sorted(e.key for e in JitStore(str(tmp_path / "jit")).entries())


def test_key_covers_nested_helpers_headers_capability_and_compiler(
    index_dir, tmp_path, compile_log, monkeypatch
):
    store = JitStore(str(tmp_path / "jit"))
    jit_cache(index_dir, tmp_path).kernel("saxpy.saxpy").load()
    jit_cache(index_dir, tmp_path).kernel("sobel.sobel_magnitude").load()
    assert compiles(compile_log) == 2
    # A helper module in a subpackage and a header in a subdirectory are inputs.
    _key_after(index_dir, tmp_path, edit=(("saxpy", HELPER), b"helper v2"))
    _key_after(index_dir, tmp_path, edit=(("sobel", HEADER), b"val v2"))
    assert compiles(compile_log) == 4
    _key_after(index_dir, tmp_path, capability=(8, 0))
    _key_after(index_dir, tmp_path, code="c1", monkeypatch=monkeypatch)
    assert compiles(compile_log) == 6
    assert len(store.entries()) == 6
    # Old entries stay valid: going back to v1 of the helper is a hit again.
    monkeypatch.delenv("FAKE_COMPILER_CODE")
    _key_after(index_dir, tmp_path, edit=(("saxpy", HELPER), b"helper v1"))
    assert compiles(compile_log) == 6


def test_key_ignores_mtimes_and_where_the_index_is(index_dir, tmp_path, compile_log):
    jit_cache(index_dir, tmp_path).kernel("saxpy.saxpy").load()
    for dirpath, _, names in os.walk(index_dir):
        for n in names:
            os.utime(os.path.join(dirpath, n), (1, 1))
    moved = str(tmp_path / "elsewhere")
    os.rename(index_dir, moved)
    cache = jit_cache(moved, tmp_path)
    cache.kernel("saxpy.saxpy").load()
    assert compiles(compile_log) == 1


RACER = textwrap.dedent(
    """
    import os, sys
    from gpu_runtime.driver.device import DeviceInfo
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
        def __getattr__(self, name):  # launch_raw, param_info, ...: unused here
            return lambda *args: None

    compiler = Compiler(
        (sys.executable, "-m", "gpu_runtime_testutil.stand_in_compiler"), dict(os.environ), "fake"
    )
    cache = JitKernelCache(
        find_jit_sources([sys.argv[1]]), Backend(), store=JitStore(sys.argv[2]),
        compiler=lambda: compiler,
    )
    cache.kernel("saxpy.saxpy").load()
    """
)


def test_sixteen_processes_on_an_empty_cache(index_dir, tmp_path, compile_log, monkeypatch):
    monkeypatch.setenv("FAKE_COMPILER_SLEEP", "0.2")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    for round_ in range(2):
        store_dir = tmp_path / f"round{round_}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, index_dir, str(store_dir / "jit")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
            for _ in range(16)
        ]
        results = [p.communicate() + (p.returncode,) for p in procs]
        assert [r[2] for r in results] == [0] * 16, [r[1].decode()[-2000:] for r in results]
        store = JitStore(str(store_dir / "jit"))
        assert len(store.entries()) == 1
        assert not os.listdir(os.path.join(store.root, ".tmp"))
    assert compiles(compile_log) == 2  # one compile per round: the others waited and hit


def _entry_files(tmp_path):
    (entry,) = JitStore(str(tmp_path / "jit")).entries()
    return entry.path, sorted(os.listdir(entry.path))


@pytest.mark.parametrize("how", ["truncate", "flip", "delete"])
def test_every_corrupt_file_of_an_entry_is_recompiled(
    index_dir, tmp_path, compile_log, caplog, how
):
    jit_cache(index_dir, tmp_path).kernel("saxpy.saxpy").load()
    path, names = _entry_files(tmp_path)
    assert ENTRY_FILE in names and "metadata.json" in names and len(names) >= 4
    for n, name in enumerate(names, start=2):
        full = os.path.join(_entry_files(tmp_path)[0], name)
        data = open(full, "rb").read()
        if how == "delete":
            os.remove(full)
        else:
            with open(full, "wb") as f:
                f.write(
                    data[: len(data) // 2] if how == "truncate" else bytes([data[0] ^ 1]) + data[1:]
                )
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gpu_runtime"):
            cache = jit_cache(index_dir, tmp_path)
            cache.kernel("saxpy.saxpy").load()
        assert compiles(compile_log) == n, name
        assert "is corrupt" in caplog.text and "compiling it again" in caplog.text
        assert "rebuild the bundle" not in caplog.text + cache.describe()


def test_lru_eviction_keeps_the_bound(index_dir, tmp_path, compile_log, monkeypatch):
    store = JitStore(str(tmp_path / "jit"))
    for cap in ((7, 5), (8, 0), (8, 6), (9, 0)):
        jit_cache(index_dir, tmp_path, FakeBackend(capability=cap)).kernel("saxpy.saxpy").load()
    entries = store.entries()
    assert len(entries) == 4
    one = max(e.size for e in entries)
    os.utime(entries[0].path, (10, 10))  # the sm_75 entry: least recently used
    jit_cache(index_dir, tmp_path, FakeBackend(capability=(7, 5))).kernel(
        "saxpy.saxpy"
    ).load()  # used again
    monkeypatch.setenv("GPU_RUNTIME_JIT_CACHE_SIZE", str(2 * one + one // 2))
    gc.collect()  # the caches above are gone, as if their processes had ended
    jit_cache(index_dir, tmp_path, FakeBackend(capability=(8, 9))).kernel("saxpy.saxpy").load()
    kept = {e.info["capability"] for e in store.entries()}
    assert kept == {"sm_75", "sm_89"}  # the two most recently used


def test_prune_skips_what_a_live_cache_holds(index_dir, tmp_path, compile_log, monkeypatch):
    store = JitStore(str(tmp_path / "jit"))
    live = jit_cache(index_dir, tmp_path, FakeBackend(capability=(8, 0)))
    live.kernel("saxpy.saxpy")  # compiled and held; its module is loaded on first launch only
    assert store.prune(0) == [] and len(store.entries()) == 1
    assert store.clear() == 0 and store.in_use() == [store.entries()[0].key]
    live.kernel("saxpy.saxpy").load()  # still there
    del live
    gc.collect()
    assert store.in_use() == [] and len(store.prune(0)) == 1 and store.entries() == []


def test_no_gpu_fails_before_looking_for_a_compiler(index_dir, tmp_path):
    class NoDriver(FakeBackend):
        def device_info(self):
            raise DeviceError("no usable CUDA device (device 0): no CUDA driver")

    cache = jit_cache(index_dir, tmp_path, NoDriver(), compiler=lambda: None)
    with pytest.raises(DeviceError, match="no CUDA driver"):
        cache.kernel("saxpy")


class CountingCompiler(Compiler):
    """The fake compiler, recording how each compile was run: "start" (the process started
    before the capability was known, JIT mode's early start) or "compile" (after)."""

    calls: list

    def start(self, argv, cwd, what):
        self.calls.append("start")
        started = super().start(argv, cwd, what)
        self.on_start()
        return started

    def compile(self, argv, cwd, what):
        self.calls.append("compile")
        return super().compile(argv, cwd, what)

    def on_start(self) -> None:
        pass


def counting_compiler(calls, on_start=None) -> CountingCompiler:
    base = fake_compiler()
    compiler = CountingCompiler(base.command, base.env, base.description)
    compiler.calls = calls
    if on_start is not None:
        setattr(compiler, "on_start", on_start)  # noqa: B010 (a method replaced on purpose)
    return compiler


def _tmp_left(tmp_path):
    return os.listdir(os.path.join(JitStore(str(tmp_path / "jit")).root, ".tmp"))


def test_a_never_compiled_library_starts_its_compile_before_the_driver_answers(
    index_dir, tmp_path, compile_log
):
    """Cold: the compile process loads its toolchain while the driver starts (the two used to
    add up); the capability reaches it on stdin. Warm for another GPU: compiled after the
    driver answers (no process started on speculation when the library was compiled before)."""
    import threading

    started = threading.Event()
    seen_before_driver = []

    class SlowDriver(FakeBackend):
        def device_info(self):
            seen_before_driver.append(started.wait(timeout=30))
            return self.info

    calls: list = []
    compiler = counting_compiler(calls, on_start=started.set)
    cache = jit_cache(index_dir, tmp_path, SlowDriver(), compiler=lambda: compiler)
    cache.kernel("saxpy.saxpy").load()
    assert calls == ["start"] and seen_before_driver[0] is True
    assert compiles(compile_log) == 1 and "compiled now for sm_90" in cache.describe()
    older = jit_cache(index_dir, tmp_path, FakeBackend(capability=(8, 0)), lambda: compiler)
    older.kernel("saxpy.saxpy").load()
    assert calls == ["start", "compile"] and compiles(compile_log) == 2
    again = jit_cache(index_dir, tmp_path, compiler=lambda: compiler)
    again.kernel("saxpy.saxpy").load()
    assert calls == ["start", "compile"] and "JIT cache hit" in again.describe()
    assert _tmp_left(tmp_path) == []  # the compile processes' working directories are gone


def test_an_early_compile_is_ended_when_the_entry_turns_up_or_the_driver_fails(
    index_dir, tmp_path, compile_log, monkeypatch
):
    """A process started early and not needed (another process published the entry first;
    no GPU) is killed before it reads a capability: it compiles nothing and leaves nothing."""
    calls: list = []
    compiler = counting_compiler(calls)
    jit_cache(index_dir, tmp_path, compiler=lambda: compiler).kernel("saxpy.saxpy").load()
    assert compiles(compile_log) == 1
    monkeypatch.setattr(JitKernelCache, "_compiled_before", lambda self, key_for: False)
    hit = jit_cache(index_dir, tmp_path, compiler=lambda: compiler)
    hit.kernel("saxpy.saxpy").load()
    assert calls == ["start", "start"] and compiles(compile_log) == 1
    assert "JIT cache hit" in hit.describe() and _tmp_left(tmp_path) == []

    class NoDriver(FakeBackend):
        def device_info(self):
            raise DeviceError("no usable CUDA device (device 0): no CUDA driver")

    cold = tmp_path / "cold"
    cold.mkdir()
    with pytest.raises(DeviceError, match="no CUDA driver"):
        jit_cache(index_dir, cold, NoDriver(), compiler=lambda: compiler).kernel("saxpy")
    assert calls == ["start", "start", "start"] and compiles(compile_log) == 1
    assert _tmp_left(cold) == []


def test_jit_mode_starts_cuda_when_the_cache_opens(index_dir, tmp_path, monkeypatch):
    """As a bundle's launcher does at process start: the driver's start (~0.3 s) overlaps the
    first lookup instead of following it (for an app that imported `gpu_runtime.api` itself;
    the package's first GPU name has begun it otherwise). Not with a backend of the caller's."""
    started = []
    monkeypatch.setattr("gpu_runtime.api.start_cuda_in_background", lambda: started.append(1))
    monkeypatch.setenv("GPU_RUNTIME_JIT_CACHE", str(tmp_path / "jit"))
    assert isinstance(gpu_runtime.open_cache(kernels_path=[index_dir]), JitKernelCache)
    assert started == [1]
    gpu_runtime.open_cache(kernels_path=[index_dir], backend=FakeBackend())
    assert started == [1]


def test_a_failed_early_cuda_start_is_reported_by_the_first_use(monkeypatch):
    from gpu_runtime.driver import device

    class NoDriver:
        def cuInit(self, flags):
            raise RuntimeError("Failed to dlopen libcuda.so.1")

    monkeypatch.setattr(device, "driver_api", NoDriver)
    monkeypatch.setattr(device, "_early_start", None)
    monkeypatch.setattr(device, "_start_driver", lambda: None)  # as without a driver
    device.start_cuda_in_background()
    thread = device._early_start
    assert thread is not None
    thread.join(10)
    with pytest.raises(DeviceError, match="no CUDA driver: libcuda.so.1 cannot be loaded"):
        device.CudaBackend().device_info()


def test_a_compiler_without_the_early_start_still_compiles(index_dir, tmp_path, compile_log):
    """A toolchain PEX built before `--capability-from-stdin`: the early process fails with
    `EarlyStartUnsupported` and the library is compiled the usual way, once."""
    from gpu_runtime.jit.compiler import EarlyStartUnsupported

    class Refusing:
        def finish(self, capability):
            raise EarlyStartUnsupported("JIT mode: ... is older than this gpu_runtime")

        def cancel(self):
            pass

    calls: list = []

    class Old(CountingCompiler):
        def start(self, argv, cwd, what):
            self.calls.append("start")
            return Refusing()

    base = fake_compiler()
    old = Old(base.command, base.env, base.description)
    old.calls = calls
    cache = jit_cache(index_dir, tmp_path, compiler=lambda: old)
    cache.kernel("saxpy.saxpy").load()
    assert calls == ["start", "compile"] and compiles(compile_log) == 1
    assert _tmp_left(tmp_path) == []


def test_no_compiler_says_how_to_get_one(index_dir, tmp_path):
    cache = jit_cache(index_dir, tmp_path, compiler=lambda: None)
    with pytest.raises(CompilerNotFoundError) as e:
        cache.kernel("saxpy")
    text = str(e.value)
    assert "src/python/imaging/kernels:saxpy" in text
    assert "GPU_RUNTIME_TOOLCHAIN" in text and "pants export --resolve=cuda13" in text


def test_compile_error_writes_nothing(index_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_COMPILER_FAIL", "name 'cuda' is not defined")
    with pytest.raises(JitCompileError, match=r"saxpy.py:3: error: name 'cuda'"):
        jit_cache(index_dir, tmp_path).kernel("saxpy")
    assert JitStore(str(tmp_path / "jit")).entries() == []
    assert _tmp_left(tmp_path) == []


def _bundle_and_index(tmp_path, index_dir, monkeypatch, caps=("sm_90",)):
    cache_dir = write_bundle(str(tmp_path / "dist" / "b"), library_specs(["saxpy"], caps=caps))
    monkeypatch.setenv("GPU_RUNTIME_JIT_CACHE", str(tmp_path / "jit"))
    return cache_dir


def test_strict_bundle_never_compiles(index_dir, tmp_path, compile_log, monkeypatch):
    cache_dir = _bundle_and_index(tmp_path, index_dir, monkeypatch)
    strict = gpu_runtime.open_cache(
        cache_dir,
        strict=True,
        kernels_path=[index_dir],
        backend=FakeBackend(),
        compiler=fake_compiler,
    )
    with pytest.raises(KernelNotFoundError, match="sobel_magnitude"):
        strict.kernel("sobel_magnitude")
    old_gpu = FakeBackend(capability=(8, 0))
    strict = gpu_runtime.open_cache(
        cache_dir, strict=True, kernels_path=[index_dir], backend=old_gpu, compiler=fake_compiler
    )
    with pytest.raises(NoCompatibleVariantError, match=r"saxpy[\s\S]*sm_80|sm_80[\s\S]*saxpy"):
        strict.kernel("saxpy").load()
    monkeypatch.setenv("GPU_RUNTIME_STRICT", "1")
    env_strict = gpu_runtime.open_cache(
        cache_dir, kernels_path=[index_dir], backend=FakeBackend(), compiler=fake_compiler
    )
    with pytest.raises(KernelNotFoundError):
        env_strict.kernel("sobel_magnitude")
    assert compiles(compile_log) == 0


def test_bundle_with_a_compiler_fills_its_gaps_when_not_strict(
    index_dir, tmp_path, compile_log, monkeypatch
):
    cache_dir = _bundle_and_index(tmp_path, index_dir, monkeypatch)
    cache = gpu_runtime.open_cache(
        cache_dir, kernels_path=[index_dir], backend=FakeBackend(), compiler=fake_compiler
    )
    cache.kernel("saxpy").load()  # in the bundle
    assert compiles(compile_log) == 0
    assert "from bundle cubin" in cache.describe()
    cache.kernel("sobel_magnitude").load()  # not in the bundle: compiled
    old = gpu_runtime.open_cache(
        cache_dir,
        kernels_path=[index_dir],
        backend=FakeBackend(capability=(8, 0)),
        compiler=fake_compiler,
    )
    old.kernel("saxpy").load()  # no variant for sm_80 in the bundle: compiled
    assert compiles(compile_log) == 2


def test_device_bundle_without_compiler_never_compiles(index_dir, tmp_path, monkeypatch):
    cache_dir = _bundle_and_index(tmp_path, index_dir, monkeypatch)
    cache = gpu_runtime.open_cache(
        cache_dir,
        kernels_path=[index_dir],
        backend=FakeBackend(capability=(8, 0)),
        compiler=lambda: None,
    )
    with pytest.raises(NoCompatibleVariantError):
        cache.kernel("saxpy").load()


def test_cli_lists_prunes_and_clears(index_dir, tmp_path, compile_log, capsys):
    from gpu_runtime.cli.commands import main

    for cap in ((8, 0), (9, 0)):
        jit_cache(index_dir, tmp_path, FakeBackend(capability=cap)).kernel("saxpy.saxpy").load()
    root = str(tmp_path / "jit")
    gc.collect()  # the caches above are gone, as if their processes had ended
    assert main(["cache", "list", "--cache-dir", root]) == 0
    out = capsys.readouterr().out
    assert "2 entries" in out and "saxpy" in out and "sm_80" in out and "sm_90" in out
    assert "src/python/imaging/kernels:saxpy" in out
    assert main(["cache", "prune", "--max-size", "1", "--cache-dir", root]) == 0
    assert "evicted 2 entries" in capsys.readouterr().out
    live = jit_cache(index_dir, tmp_path)
    live.kernel("saxpy.saxpy").load()
    assert main(["cache", "clear", "--cache-dir", root]) == 0
    assert "removed 0 entries" in capsys.readouterr().out  # a running process holds it
    del live
    gc.collect()
    assert main(["cache", "clear", "--cache-dir", root]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert JitStore(root).entries() == []
    assert main(["cache", "prune", "--max-size", "abc", "--cache-dir", root]) == 2
    assert capsys.readouterr().err == (
        "error: --max-size: 'abc' is not a size: use e.g. 500M or 2G\n"
    )


def test_a_trusted_signed_bundle_never_falls_back_to_jit(
    index_dir, tmp_path, compile_log, monkeypatch
):
    """No signature covers a compiler or a JIT-cache entry: a bundle signed by a trusted key
    refuses, in one line, what it lacks instead of compiling it (a replaced cached cubin would
    otherwise be loaded)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from gpu_runtime_testutil.signing import pin_keys, public_hex, sign

    cache_dir = _bundle_and_index(tmp_path, index_dir, monkeypatch)
    key = Ed25519PrivateKey.generate()
    sign(cache_dir, key)
    pin_keys(monkeypatch, str(tmp_path / "app_code"), public_hex(key))
    a100 = FakeBackend(capability=(8, 0), name="NVIDIA A100")
    cache = gpu_runtime.open_cache(
        cache_dir, kernels_path=[index_dir], backend=a100, compiler=fake_compiler
    )
    with pytest.raises(NoCompatibleVariantError) as e:
        cache.kernel("saxpy").load()
    text = str(e.value)
    assert "\n" not in text and "NVIDIA A100 (sm_80)" in text and "holds sm_90" in text
    assert "never JIT-compiled" in text and "add sm_80 to the deploy_bundle" in text
    with pytest.raises(KernelNotFoundError, match="never JIT-compiled"):
        cache.kernel("sobel_magnitude")
    assert compiles(compile_log) == 0 and a100.loads == []
    cache = gpu_runtime.open_cache(
        cache_dir, kernels_path=[index_dir], backend=FakeBackend(), compiler=fake_compiler
    )
    cache.kernel("saxpy").load()  # the GPU it covers: its own signed cubin
    assert compiles(compile_log) == 0
