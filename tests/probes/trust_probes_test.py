"""Trust probes: every byte a trusted bundle loads is covered by its signature, or refused.

Signed bundles are written on disk with gpu_spec's fixtures and a fake GPU (`FakeBackend`); the
app's pinned keys are the generated module the plugin puts into the app PEX, put on `sys.path`.
Each probe tries one way around the signature (a JIT fallback, the environment, `verify`
without a key, a path out of cache/) and reports what the runtime and `verify` did.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from typing import Callable, Iterator, List, Optional, Tuple

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import gpu_runtime
from gpu_runtime.cli.commands import main
from gpu_runtime.conftest import FakeBackend, library_specs, write_bundle
from gpu_runtime.errors import GpuRuntimeError
from gpu_runtime_testutil import jit_index as jit
from gpu_runtime_testutil.signing import pin_keys, public_hex, rehash_tampered_cubin, sign
from gpu_spec.manifest.model import MANIFEST_NAME
from gpu_spec.signature import PINNED_KEYS_ENV, TRUSTED_KEYS_ENV
from probe_table import findings, held, refused, run_probes

CUBIN = "saxpy/cuda13/sm_90/saxpy__0.cubin"
SM90 = "saxpy/cuda13/sm_90"


class Lab:
    """A fresh directory, environment and `sys.path` per probe; a bundle signed by `key`,
    which the app pins."""

    def __init__(self, tmp: str, mp: pytest.MonkeyPatch) -> None:
        self.tmp, self.mp = tmp, mp
        self.key = Ed25519PrivateKey.generate()
        self.attacker = Ed25519PrivateKey.generate()
        for var in (PINNED_KEYS_ENV, TRUSTED_KEYS_ENV, "GPU_RUNTIME_STRICT"):
            mp.delenv(var, raising=False)
        mp.setenv("GPU_RUNTIME_JIT_CACHE", os.path.join(tmp, "jit"))
        pin_keys(mp, os.path.join(tmp, "app_code"), public_hex(self.key))
        self.cache = write_bundle(os.path.join(tmp, "b"), library_specs(["saxpy"], ("sm_90",)))
        sign(self.cache, self.key)

    def outside(self, name: str, data: bytes) -> str:
        path = os.path.join(self.tmp, "elsewhere", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def read(self, rel: str) -> bytes:
        with open(os.path.join(self.cache, *rel.split("/")), "rb") as f:
            return f.read()

    def runtime(self, backend=None) -> Tuple[bool, str]:
        """(accepted, the error in one line): open, load every kernel, check every file."""
        try:
            cache = gpu_runtime.open_cache(self.cache, backend=backend or FakeBackend())
            cache.preload()
            cache.verify(all_variants=True)
        except GpuRuntimeError as e:
            return False, str(e)
        return True, ""

    def verify(self, *args: str) -> Tuple[int, str]:
        """(exit status, the summary line) of `python -m gpu_runtime verify`."""
        rc, lines = self.verify_lines(*args)
        return rc, (lines[-1] if lines else "")

    def verify_lines(self, *args: str) -> Tuple[int, List[str]]:
        """(exit status, every line) of `python -m gpu_runtime verify`."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["verify", os.path.dirname(self.cache), *args])
        return rc, out.getvalue().strip().splitlines()


@contextlib.contextmanager
def lab() -> Iterator[Lab]:
    tmp = tempfile.mkdtemp(prefix="trust_probe_")
    try:
        with pytest.MonkeyPatch.context() as mp:
            yield Lab(tmp, mp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def finding(what: str) -> str:
    return f"FINDING: {what}"


# -- JIT fallback ----------------------------------------------------------------------------
def jit_fallback_on_an_uncovered_gpu() -> str:
    """A compiler at hand, a kernel index in the app, a GPU (sm_80) the bundle lacks."""
    with lab() as lb:
        index = os.path.join(lb.tmp, "site")
        jit.write_index(index, "saxpy", jit.SAXPY_SRC, {jit.SAXPY_SRC: b"saxpy v1"})
        log = os.path.join(lb.tmp, "compiles.log")
        lb.mp.setenv("FAKE_COMPILER_LOG", log)
        a100 = FakeBackend(capability=(8, 0), name="NVIDIA A100")
        try:
            cache = gpu_runtime.open_cache(
                lb.cache, kernels_path=[index], backend=a100, compiler=jit.fake_compiler
            )
            cache.kernel("saxpy").load()
        except GpuRuntimeError as e:
            if os.path.exists(log) or a100.loads:
                return finding(f"compiled or loaded before refusing: {e}")
            return refused(e, "a bundle signed by a trusted key")
        return finding(f"a trusted bundle was JIT-compiled: {a100.loads[:1]}")


def jit_fallback_for_a_kernel_the_bundle_lacks() -> str:
    with lab() as lb:
        index = os.path.join(lb.tmp, "site")
        jit.write_index(index, "sobel", jit.SOBEL_SRC, {jit.SOBEL_SRC: b"sobel_magnitude v1"})
        log = os.path.join(lb.tmp, "compiles.log")
        lb.mp.setenv("FAKE_COMPILER_LOG", log)
        backend = FakeBackend()
        try:
            gpu_runtime.open_cache(
                lb.cache, kernels_path=[index], backend=backend, compiler=jit.fake_compiler
            ).kernel("sobel_magnitude").load()
        except GpuRuntimeError as e:
            if os.path.exists(log):
                return finding(f"compiled first: {e}")
            return refused(e, "is never JIT-compiled, since no signature covers")
        return finding("a kernel absent from a trusted bundle was JIT-compiled and loaded")


def manifest_deleted(what: str) -> Callable[[], str]:
    """A signed bundle's `cache/manifest.json` (or all of cache/) deleted, the app's kernel index
    at hand (a `jit_fallback=True` bundle), the app run from its bundle ($PEX beside cache/)."""

    def probe() -> str:
        with lab() as lb:
            index = os.path.join(lb.tmp, "site")
            jit.write_index(index, "saxpy", jit.SAXPY_SRC, {jit.SAXPY_SRC: b"saxpy v1"})
            log = os.path.join(lb.tmp, "compiles.log")
            lb.mp.setenv("FAKE_COMPILER_LOG", log)
            lb.mp.delenv("GPU_RUNTIME_CACHE", raising=False)
            lb.mp.setenv("PEX", os.path.join(os.path.dirname(lb.cache), "app.pex"))
            if what == "cache/":
                shutil.rmtree(lb.cache)
            else:
                os.remove(os.path.join(lb.cache, MANIFEST_NAME))
            backend = FakeBackend()
            try:
                cache = gpu_runtime.open_cache(
                    kernels_path=[index], backend=backend, compiler=jit.fake_compiler
                )
                cache.kernel("saxpy").load()
            except GpuRuntimeError as e:
                if os.path.exists(log) or backend.loads:
                    return finding(f"compiled or loaded before refusing: {e}")
                if "refusing" not in str(e):
                    return finding(f"refused without saying JIT mode is refused: {e}")
                return refused(e, "JIT mode")
            return finding(f"JIT mode loaded code no signature covers: {backend.loads[:1]}")

    return probe


def jit_fallback_signed_key_not_checked() -> str:
    """A signed `jit_fallback=True` bundle on a device that trusts no key (its signature is not
    checked), a kernel the bundle lacks, a compiler at hand."""
    with lab() as lb:
        lb.mp.setattr("gpu_runtime.bundle.trust.pinned_keys", lambda: ())
        index = os.path.join(lb.tmp, "site")
        jit.write_index(index, "sobel", jit.SOBEL_SRC, {jit.SOBEL_SRC: b"sobel_magnitude v1"})
        log = os.path.join(lb.tmp, "compiles.log")
        lb.mp.setenv("FAKE_COMPILER_LOG", log)
        backend = FakeBackend()
        try:
            gpu_runtime.open_cache(
                lb.cache, kernels_path=[index], backend=backend, compiler=jit.fake_compiler
            ).kernel("sobel_magnitude").load()
        except GpuRuntimeError as e:
            if os.path.exists(log) or backend.loads:
                return finding(f"compiled first: {e}")
            return refused(e, "never JIT-compiled")
        return finding("a signed bundle's missing kernel was JIT-compiled (unsigned code)")


# -- the environment and the pinned keys -----------------------------------------------------
# What the runtime says of each attack on the pinned keys.
PINNED_REFUSAL = {
    "resign": "which this app does not trust",
    "rehash": "does not match its manifest (the manifest was changed after it was signed)",
    "unsign": "is not signed, and this app trusts only bundles signed by key",
}
ESCAPE = "outside the cache directory"


def env_pinned_keys(value: Callable[[Lab], str], attack: str) -> Callable[[], str]:
    """$GPU_RUNTIME_PINNED_KEYS set to `value`, with the bundle tampered per `attack`."""

    def probe() -> str:
        with lab() as lb:
            if attack == "resign":  # the attacker's own key signs a tampered manifest
                rehash_tampered_cubin(lb.cache)
                sign(lb.cache, lb.attacker)
            elif attack == "rehash":
                rehash_tampered_cubin(lb.cache)
            elif attack == "unsign":
                rehash_tampered_cubin(lb.cache)
                os.remove(os.path.join(lb.cache, "manifest.json.sig"))
            lb.mp.setenv(PINNED_KEYS_ENV, value(lb))
            ok, err = lb.runtime()
            rc, line = lb.verify()
            if ok or rc != 1 or "signed by trusted key" in line:
                return finding(f"accepted (runtime {ok}, verify exit {rc}: {line})")
            return refused(err, PINNED_REFUSAL[attack])

    return probe


def env_adds_a_trusted_key() -> str:
    """The documented device-trusted keys: the environment adds keys beside the pinned one."""
    with lab() as lb:
        lb.mp.setenv(TRUSTED_KEYS_ENV, public_hex(lb.attacker))
        ok, err = lb.runtime()
        if not ok:
            return finding(f"the bundle signed by its pinned key no longer loads: {err}")
        rehash_tampered_cubin(lb.cache)  # the pinned key's signature no longer matches
        ok, err = lb.runtime()
        if ok:
            return finding("an extra trusted key let a re-hashed manifest through")
        return held(f"pinned key still required, extra key added; tampered: {err[:60]}...")


# -- verify without a key --------------------------------------------------------------------
def verify_without_key(attack: str) -> Callable[[], str]:
    def probe() -> str:
        with lab() as lb:
            # verify run outside the bundle's app: no pinned keys, none in the environment
            lb.mp.setattr("gpu_runtime.bundle.trust.pinned_keys", lambda: ())
            rehash_tampered_cubin(lb.cache)
            if attack == "resign":
                sign(lb.cache, lb.attacker)
            rc, line = lb.verify()
            if rc == 0 or line.startswith("OK"):
                return finding(f"exit {rc}: {line}")
            return refused(f"exit {rc}: {line}", "so the signature was not checked")

    return probe


# -- paths: verify and the runtime give the same verdict ---------------------------------------
def symlink_file_out(lb: Lab) -> None:
    target = lb.outside("saxpy__0.cubin", lb.read(CUBIN))  # the very bytes listed
    os.remove(os.path.join(lb.cache, CUBIN))
    os.symlink(target, os.path.join(lb.cache, CUBIN))


def symlink_file_out_relative(lb: Lab) -> None:
    lb.outside("saxpy__0.cubin", lb.read(CUBIN))
    os.remove(os.path.join(lb.cache, CUBIN))
    os.symlink("../../../../../elsewhere/saxpy__0.cubin", os.path.join(lb.cache, CUBIN))


def symlink_dir_out(lb: Lab) -> None:
    d = os.path.join(lb.cache, *SM90.split("/"))
    moved = os.path.join(lb.tmp, "elsewhere", "sm_90")
    os.makedirs(os.path.dirname(moved), exist_ok=True)
    shutil.move(d, moved)
    os.symlink(moved, d)


def symlink_inside(lb: Lab) -> None:  # control: a link that stays in cache/, same bytes
    twin = os.path.join(lb.cache, SM90, "twin.bin")
    shutil.copy(os.path.join(lb.cache, CUBIN), twin)
    os.remove(os.path.join(lb.cache, CUBIN))
    os.symlink("twin.bin", os.path.join(lb.cache, CUBIN))


def hard_link_same_bytes(lb: Lab) -> None:
    target = lb.outside("hard.cubin", lb.read(CUBIN))
    os.remove(os.path.join(lb.cache, CUBIN))
    os.link(target, os.path.join(lb.cache, CUBIN))


def hard_link_other_bytes(lb: Lab) -> None:
    target = lb.outside("hard.cubin", b"// a replaced cubin\n")
    os.remove(os.path.join(lb.cache, CUBIN))
    os.link(target, os.path.join(lb.cache, CUBIN))


def fifo_for_cubin(lb: Lab) -> None:
    os.remove(os.path.join(lb.cache, CUBIN))
    os.mkfifo(os.path.join(lb.cache, CUBIN))


def dotdot_in_manifest(lb: Lab) -> None:
    """A manifest (signed by the app's own key) naming a path with `..`."""
    path = os.path.join(lb.cache, MANIFEST_NAME)
    with open(path) as f:
        doc = json.load(f)
    doc["files"]["saxpy/../../outside.cubin"] = "0" * 64
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    sign(lb.cache, lb.key)


def cache_dir_is_a_symlink(lb: Lab) -> None:  # control: a deployment's `current` link
    real = os.path.join(lb.tmp, "releases", "r1")
    os.makedirs(os.path.dirname(real))
    shutil.move(lb.cache, real)
    os.symlink(real, lb.cache)


# -- the app beside cache/: a packed app.pex/ listed in "bundle_files", signed -------------------
APP_FILES = {
    "app.pex/__main__.py": b"import sys\n",
    "app.pex/PEX-INFO": b"{}\n",
    "app.pex/.deps/numpy-2.2.0-cp312-none-any.whl": b"PK wheel\n",
}


def with_packed_app(lb: Lab) -> str:
    """Adds a packed app.pex/ beside cache/, listed in the (re-signed) manifest; its path."""
    import hashlib

    bundle = os.path.dirname(lb.cache)
    for rel, data in APP_FILES.items():
        os.makedirs(os.path.dirname(os.path.join(bundle, rel)), exist_ok=True)
        with open(os.path.join(bundle, rel), "wb") as f:
            f.write(data)
    path = os.path.join(lb.cache, MANIFEST_NAME)
    with open(path) as f:
        doc = json.load(f)
    doc["bundle_files"] = {r: hashlib.sha256(d).hexdigest() for r, d in APP_FILES.items()}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
    sign(lb.cache, lb.key)
    return os.path.join(bundle, "app.pex")


def app_dir_symlinked_out(lb: Lab) -> None:
    app = with_packed_app(lb)
    moved = os.path.join(lb.tmp, "elsewhere", "app.pex")
    os.makedirs(os.path.dirname(moved), exist_ok=True)
    shutil.move(app, moved)  # the very files listed, moved out
    os.symlink(moved, app)


def app_file_symlinked_out(lb: Lab) -> None:
    app = with_packed_app(lb)
    target = lb.outside("__main__.py", APP_FILES["app.pex/__main__.py"])
    os.remove(os.path.join(app, "__main__.py"))
    os.symlink(target, os.path.join(app, "__main__.py"))


def unlisted_pth_in_app(lb: Lab) -> None:
    app = with_packed_app(lb)
    with open(os.path.join(app, "zzz.pth"), "w") as f:
        f.write("import os; os.system('echo pwned')\n")


def unlisted_file_in_app_pycache(lb: Lab) -> None:
    app = with_packed_app(lb)
    os.makedirs(os.path.join(app, "__pycache__"))
    with open(os.path.join(app, "__pycache__", "zzz.pth"), "w") as f:
        f.write("import os\n")


def app_bytecode_python_wrote(lb: Lab) -> None:  # control: what `python3 app.pex` writes
    app = with_packed_app(lb)
    os.makedirs(os.path.join(app, "__pycache__"))
    with open(os.path.join(app, "__pycache__", "__main__.cpython-312.pyc"), "wb") as f:
        f.write(b"bytecode")


def same_line(tamper: Callable[[Lab], None], phrase: str) -> Callable[[], str]:
    """The runtime and verify both refuse, in the same one line, which says `phrase`."""

    def probe() -> str:
        with lab() as lb:
            tamper(lb)
            ok, err = lb.runtime()
            rc, lines = lb.verify_lines("--key", public_hex(lb.key))
            if ok or rc != 1:
                return finding(
                    f"runtime {'accepts' if ok else 'refuses'}, verify exit {rc}: "
                    f"{lines[-1] if lines else ''}"
                )
            if f"refused: {err}" not in lines:
                return finding(f"verify's lines {lines[:-1]} do not include the runtime's: {err}")
            return refused(err, phrase)

    return probe


def same_verdict(tamper: Callable[[Lab], None], expect: Optional[str]) -> Callable[[], str]:
    """The runtime and `verify --key` agree: both accept, or both refuse saying `expect`
    (None: a control, which both must accept)."""

    def probe() -> str:
        with lab() as lb:
            tamper(lb)
            ok, err = lb.runtime()
            rc, line = lb.verify("--key", public_hex(lb.key))
            if ok != (rc == 0):
                return finding(
                    f"runtime {'accepts' if ok else 'refuses'}, verify exit {rc}: {line}"
                )
            if ok:
                return held("runtime and verify both accept it (bytes as signed, inside cache/)")
            if rc != 1:
                return finding(f"verify exit {rc}, not 1: {line}")
            if expect is None:
                return finding(f"a control was refused: {err}")
            return refused(err, expect)

    return probe


PROBES: List[Tuple[str, Callable[[], str]]] = [
    ("jit fallback: trusted bundle, sm_80 GPU, compiler present", jit_fallback_on_an_uncovered_gpu),
    ("jit fallback: kernel absent from trusted bundle", jit_fallback_for_a_kernel_the_bundle_lacks),
    ("signed bundle, manifest.json deleted, index at hand", manifest_deleted("manifest")),
    ("signed bundle, cache/ deleted, index at hand", manifest_deleted("cache/")),
    ("jit_fallback: signed bundle, key not checked here", jit_fallback_signed_key_not_checked),
    ("env PINNED_KEYS empty, unsigned bundle", env_pinned_keys(lambda lb: "", "unsign")),
    ("env PINNED_KEYS empty, re-hashed manifest", env_pinned_keys(lambda lb: "", "rehash")),
    (
        "env PINNED_KEYS = attacker key, re-signed by it",
        env_pinned_keys(lambda lb: public_hex(lb.attacker), "resign"),
    ),
    (
        "env PINNED_KEYS = ',' + attacker key (upper case)",
        env_pinned_keys(lambda lb: "," + public_hex(lb.attacker).upper(), "resign"),
    ),
    ("env TRUSTED_KEYS adds an extra key", env_adds_a_trusted_key),
    ("verify, no key: re-hashed manifest", verify_without_key("rehash")),
    ("verify, no key: re-signed by another key", verify_without_key("resign")),
    ("cubin symlinked out of cache/ (absolute)", same_verdict(symlink_file_out, ESCAPE)),
    (
        "cubin symlinked out of cache/ (relative ../)",
        same_verdict(symlink_file_out_relative, ESCAPE),
    ),
    ("variant directory symlinked out of cache/", same_verdict(symlink_dir_out, ESCAPE)),
    ("'..' in a signed manifest path", same_verdict(dotdot_in_manifest, "path contains '..'")),
    ("cubin replaced by a FIFO", same_verdict(fifo_for_cubin, "is not a regular file")),
    (
        "cubin hard-linked to other bytes outside",
        same_verdict(hard_link_other_bytes, "does not match the manifest"),
    ),
    (
        "cubin hard-linked to the same bytes outside",
        same_verdict(hard_link_same_bytes, None),
    ),  # a control
    ("cubin symlinked inside cache/ (control)", same_verdict(symlink_inside, None)),  # a control
    ("cache/ itself a symlink (control)", same_verdict(cache_dir_is_a_symlink, None)),  # a control
    (
        "packed app.pex/ symlinked out of the bundle",
        same_line(app_dir_symlinked_out, "outside the bundle directory"),
    ),
    (
        "app.pex/__main__.py symlinked out of the bundle",
        same_line(app_file_symlinked_out, "outside the bundle directory"),
    ),
    ("unlisted app.pex/zzz.pth", same_line(unlisted_pth_in_app, "is not one of the app's files")),
    (
        "unlisted app.pex/__pycache__/zzz.pth",
        same_line(unlisted_file_in_app_pycache, "is not one of the app's files"),
    ),
    (
        "app.pex/__pycache__ bytecode (control)",
        same_verdict(app_bytecode_python_wrote, None),
    ),  # a control
]


def test_trust_probes() -> None:
    rows = run_probes("trust", PROBES)
    assert findings(rows) == []
