"""Runtime input probes: the values, files and arguments a running app hands the runtime.

A launch argument the kernel's ABI cannot take is refused in one line (a DispatchError) and a
value it can take launches (a NaN scalar); a bundle file, signature or JIT index that is not a
regular file of sane size and nesting is refused in one line naming it, never read forever or
parsed into a RecursionError. Bundles are written with gpu_spec's fixtures and a fake GPU
(`FakeBackend`), which records each launch's parameter bytes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import tempfile
import threading
from typing import Any, Callable, Iterator, List, Tuple

import numpy as np
import pytest

import gpu_runtime
from gpu_runtime.cli.commands import main
from gpu_runtime.conftest import FakeBackend, FakeDeviceArray, library_specs, write_bundle
from gpu_runtime.errors import DispatchError, GpuRuntimeError
from gpu_runtime.launch.abi import pack_args
from gpu_runtime.launch.plan import build_plan, pattern_key
from gpu_runtime_testutil import jit_index as jit
from gpu_runtime_testutil.signing import sign
from gpu_spec.bundle_files import SIGNATURE_NAME
from gpu_spec.jit_index import entry_paths
from gpu_spec.manifest.model import MANIFEST_NAME, ArgSpec, KernelSpec
from gpu_spec.signature import PINNED_KEYS_ENV, TRUSTED_KEYS_ENV
from probe_table import findings, held, refused, run_probes

PTR = 0x7F00_0000_0000


@contextlib.contextmanager
def bundle(libraries=("saxpy",)) -> Iterator[Tuple[str, FakeBackend]]:
    """A fresh unsigned bundle (no key trusted) of `libraries` for sm_90, and a fake GPU."""
    tmp = tempfile.mkdtemp(prefix="input_probe_")
    try:
        with pytest.MonkeyPatch.context() as mp:
            for var in (PINNED_KEYS_ENV, TRUSTED_KEYS_ENV, "GPU_RUNTIME_STRICT"):
                mp.delenv(var, raising=False)
            mp.setenv("GPU_RUNTIME_JIT_CACHE", os.path.join(tmp, "jit"))
            yield write_bundle(
                os.path.join(tmp, "b"), library_specs(list(libraries), ("sm_90",))
            ), (FakeBackend())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def vec(n: int, dtype: str = "float32", ptr: int = PTR) -> FakeDeviceArray:
    return FakeDeviceArray((n,), dtype, ptr, None)


# -- launch values -----------------------------------------------------------------------------
def nan_scalar(value: object) -> Callable[[], str]:
    """saxpy(out, a: float32, x, y) launched first with a NaN `a`, then again (the plan's path)."""

    def probe() -> str:
        with bundle() as (cache_dir, backend):
            k = gpu_runtime.open_cache(cache_dir, backend=backend).kernel("saxpy")
            out, x = vec(8), vec(8, ptr=PTR + 64)
            try:
                for _ in range(2):
                    k.launch(1, 32, out, value, x, x)
            except GpuRuntimeError as e:
                return f"FINDING: a NaN scalar was refused: {e}"
            params = backend.launches[-1][5]
            floats = [p for p in params if len(p) == 4]
            if (
                len(backend.launches) != 2
                or not floats
                or not np.isnan(struct.unpack("<f", floats[0])[0])
            ):
                return f"FINDING: launched {len(backend.launches)} times, a = {floats[:1]}"
            return held("a NaN scalar launches, first and later launches, as NaN bits")

    return probe


# -- launch arguments the ABI cannot take ----------------------------------------------------------
def refused_at_launch(
    library: str, kernel: str, good: List[Any], bad: List[Any], expect: str
) -> str:
    """`bad` launched first, then again after `good` cached its pattern's plan (the fast path):
    a DispatchError in one line both times, nothing launched."""
    with bundle((library,)) as (cache_dir, backend):
        k = gpu_runtime.open_cache(cache_dir, backend=backend).kernel(kernel)
        errors = []
        for first in (True, False):
            if not first:
                k.launch(1, 32, *good)
            n = len(backend.launches)
            try:
                k.launch(1, 32, *bad)
            except DispatchError as e:
                errors.append(str(e))
            else:
                return f"FINDING: accepted ({'first launch' if first else 'fast path'})"
            if len(backend.launches) != n:
                return "FINDING: launched before refusing"
        if any("\n" in e for e in errors):
            return f"FINDING: not one line: {errors[0]!r}"
        return refused(errors[0], expect)


def refused_when_packed(kernel: KernelSpec, good: List[Any], bad: List[Any], expect: str) -> str:
    """As `refused_at_launch`, for a kernel no fixture bundle has: the checked packing, then a
    plan built on `good` asked to pack `bad` (it must raise, sending it to the checked path)."""
    try:
        pack_args(kernel, bad)
    except DispatchError as e:
        error = str(e)
    else:
        return "FINDING: the checked packing accepted it"
    plan = build_plan("f", kernel, good, pack_args(kernel, good))
    key, cais = pattern_key(bad)
    if plan.fast and key == pattern_key(good)[0]:
        try:
            plan.pack(bad, cais)
        except Exception:
            pass
        else:
            return "FINDING: the fast path packed it"
    return refused(error, expect)


def c_bool_kernel() -> KernelSpec:
    return KernelSpec(
        name="flag", entry="flag", abi="c", signature=None, args=None,
        params=("u64", "u8"), c_types=("float*", "bool"),
    )  # fmt: skip


def numba_bool_kernel() -> KernelSpec:
    return KernelSpec(
        name="flag", entry="_Zflag", abi="numba", signature=None,
        args=(ArgSpec(kind="scalar", dtype="bool"),), params=("u8",),
    )  # fmt: skip


# -- the driver ---------------------------------------------------------------------------------
def driver_older_than_toolchain(signed: bool) -> str:
    """A CUDA 13 bundle (sm_90 cubin + PTX ISA 9.0) on an sm_90 GPU whose driver is CUDA 12.4:
    the error must say the driver is too old (needed, present), not "incomplete or edited"."""
    with bundle() as (cache_dir, _):
        if signed:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            sign(cache_dir, Ed25519PrivateKey.generate())
        old = FakeBackend(capability=(9, 0), driver=(12, 4))
        try:
            gpu_runtime.open_cache(cache_dir, backend=old).kernel("saxpy").load()
        except GpuRuntimeError as e:
            text = str(e)
            if "incomplete" in text or "edited" in text or "add sm_90" in text:
                return f"FINDING: wrong advice for an old driver: {text[:200]}"
            if "13.0" not in text or "12.4" not in text or "\n" in text:
                return f"FINDING: does not name the driver needed and present: {text[:200]}"
            return refused(e, "but it needs a driver for CUDA >= 13.0")
        return "FINDING: a CUDA 13 bundle loaded on a CUDA 12.4 driver"


# -- files: FIFOs and deep nesting ---------------------------------------------------------------
DEEP = 100_000  # levels of nesting in a hostile JSON file
HANG_S = 10.0  # a read that takes longer is a hang


def within(call: Callable[[], Any], fifo: str = "") -> Tuple[bool, Any]:
    """(finished, what `call` returned or raised) within HANG_S; a reader blocked on `fifo` is
    then released (its writer opened and closed: it reads EOF), so the probe ends either way."""
    box: List[Any] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as e:  # a crash is the probe's finding
            box.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    if t.is_alive() and fifo:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(HANG_S)
        return False, box[0] if box else None
    return not t.is_alive(), box[0] if box else None


def runtime_verdict(cache_dir: str, backend: FakeBackend) -> Callable[[], str]:
    def call() -> str:
        try:
            gpu_runtime.open_cache(cache_dir, backend=backend).kernel("saxpy").load()
        except GpuRuntimeError as e:
            return "ERR " + str(e)
        return "OK"

    return call


def verify_verdict(cache_dir: str) -> Callable[[], str]:
    def call() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["verify", os.path.dirname(cache_dir)])
        return f"{rc} " + (out.getvalue().strip().splitlines() or [""])[-1]

    return call


def bad_bundle_file(
    name: str, how: str, signed: bool, expect: str, deep: int = DEEP
) -> Callable[[], str]:
    """`name` (manifest.json or its .sig) replaced by a FIFO or by JSON nested DEEP levels: the
    runtime and `verify` each refuse it in one line naming it, without hanging or crashing."""

    def probe() -> str:
        with bundle() as (cache_dir, backend):
            if signed:
                from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

                sign(cache_dir, Ed25519PrivateKey.generate())
            path = os.path.join(cache_dir, name)
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            if how == "fifo":
                os.mkfifo(path)
            else:
                with open(path, "w") as f:
                    f.write("[" * deep + "]" * deep)
            seen = []
            for who, call in (
                ("runtime", runtime_verdict(cache_dir, backend)),
                ("verify", verify_verdict(cache_dir)),
            ):
                done, got = within(call, path if how == "fifo" else "")
                if not done:
                    return f"FINDING: {who} hung reading {name} ({how})"
                if isinstance(got, BaseException):
                    return f"FINDING: {who} crashed: {type(got).__name__}: {str(got)[:120]}"
                if got == "OK" or got.startswith("0 "):
                    return f"FINDING: {who} accepted it: {got}"
                if name not in got:
                    return f"FINDING: {who}'s error does not name {name}: {got[:160]}"
                seen.append(got)
            if not seen[1].startswith("1 REFUSED: "):
                return f"FINDING: verify: {seen[1]}"
            return refused(seen[0][len("ERR ") :], expect)

    return probe


def fifo_as_jit_input() -> str:
    """JIT mode (no bundle): an input file of a kernel index entry replaced by a FIFO."""
    tmp = tempfile.mkdtemp(prefix="input_probe_")
    try:
        with pytest.MonkeyPatch.context() as mp:
            for var in (
                PINNED_KEYS_ENV,
                TRUSTED_KEYS_ENV,
                "GPU_RUNTIME_STRICT",
                "GPU_RUNTIME_CACHE",
            ):
                mp.delenv(var, raising=False)
            mp.setenv("GPU_RUNTIME_JIT_CACHE", os.path.join(tmp, "jit"))
            mp.setenv("FAKE_COMPILER_LOG", os.path.join(tmp, "compiles.log"))
            index = os.path.join(tmp, "site")
            root = jit.write_index(
                index, "saxpy", jit.SAXPY_SRC, {jit.SAXPY_SRC: b"saxpy v1", jit.HELPER: b"h v1"}
            )
            fifo = os.path.join(root, *jit.HELPER.split("/"))
            os.remove(fifo)
            os.mkfifo(fifo)
            backend = FakeBackend()

            def call() -> str:
                try:
                    gpu_runtime.open_cache(
                        kernels_path=[index], backend=backend, compiler=jit.fake_compiler
                    ).kernel("saxpy").load()
                except GpuRuntimeError as e:
                    return "ERR " + str(e)
                return "OK"

            done, got = within(call, fifo)
            if not done:
                return "FINDING: the app hung reading a FIFO among a kernel's inputs"
            if isinstance(got, BaseException):
                return f"FINDING: crashed: {type(got).__name__}: {str(got)[:120]}"
            return refused(got[len("ERR ") :], "FIFO")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def deep_jit_index_entry() -> str:
    """JIT mode (no bundle): a kernel index entry (`__gpu_kernels__/<slug>.json`) nested DEEP."""
    tmp = tempfile.mkdtemp(prefix="input_probe_")
    try:
        with pytest.MonkeyPatch.context() as mp:
            for var in (
                PINNED_KEYS_ENV,
                TRUSTED_KEYS_ENV,
                "GPU_RUNTIME_STRICT",
                "GPU_RUNTIME_CACHE",
            ):
                mp.delenv(var, raising=False)
            mp.setenv("GPU_RUNTIME_JIT_CACHE", os.path.join(tmp, "jit"))
            index = os.path.join(tmp, "site")
            jit.write_index(index, "saxpy", jit.SAXPY_SRC, {jit.SAXPY_SRC: b"saxpy v1"})
            entry, _ = entry_paths("", "src.python.imaging.kernels.saxpy")
            with open(os.path.join(index, entry), "w") as f:
                f.write("[" * DEEP + "]" * DEEP)

            def call() -> str:
                try:
                    gpu_runtime.open_cache(kernels_path=[index], backend=FakeBackend())
                except GpuRuntimeError as e:
                    return "ERR " + str(e)
                return "OK"

            done, got = within(call)
            if not done or isinstance(got, BaseException):
                return f"FINDING: {'hung' if not done else type(got).__name__}: {got}"
            return refused(got[len("ERR ") :], "nested deeper than")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- `python -m gpu_runtime platform` on a device's old python3 ---------------------------------
PYENV_ROOT = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
OLD_PYTHONS = {
    v: os.path.join(PYENV_ROOT, "versions", v, "bin", "python3") for v in ("3.6.15", "3.7.16")
}


def platform_on(version: str, phrase: str) -> Callable[[], str]:
    """The command, as the docs' device steps run it: a copy of gpu_runtime on a bare python3 of
    `version` (pyenv's, when this machine has it). Too old: one line saying `phrase`, exit 2."""

    def probe() -> str:
        python = OLD_PYTHONS[version]
        if not os.path.exists(python):
            return held(f"skipped: no CPython {version} here ({python} is absent)")
        tmp = tempfile.mkdtemp(prefix="platform_probe_")
        try:
            shutil.copytree(
                os.path.dirname(gpu_runtime.__file__),
                os.path.join(tmp, "gpu_runtime"),
                ignore=shutil.ignore_patterns("*_test.py", "conftest.py", "__pycache__"),
            )
            run = subprocess.run(
                [python, "-S", "-m", "gpu_runtime", "platform"],
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": tmp},
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        err = run.stderr.strip()
        if phrase == "works":
            if run.returncode != 0:
                return f"FINDING: exit {run.returncode}: {err.splitlines()[-1:] or ''}"
            tags = json.loads(run.stdout)["compatible_tags"]
            return held(f"CPython {version} prints its complete platform ({tags[0]}, ...)")
        if run.returncode != 2:
            last = err.splitlines()[-1] if err else run.stdout[:80]
            return f"FINDING: exit {run.returncode}: {last}"
        return refused(err, phrase)

    return probe


BOOL_2 = "expected a bool, got the integer 2"
NESTED = "JSON nested deeper than 64 levels"

PROBES: List[Tuple[str, Callable[[], str]]] = [
    ("numba float32 scalar NaN (Python float)", nan_scalar(float("nan"))),
    ("numba float32 scalar NaN (np.float32)", nan_scalar(np.float32("nan"))),
    (
        "driver (12.4) older than the bundle's toolchain (13.0)",
        lambda: driver_older_than_toolchain(False),
    ),
    ("driver older than a signed bundle's toolchain", lambda: driver_older_than_toolchain(True)),
    (
        "C pointer arg: a negative int",
        lambda: refused_at_launch(
            "matmul",
            "matmul<float, 16>",
            [PTR, PTR, PTR, 4, 4, 4],
            [-1, PTR, PTR, 4, 4, 4],
            "is not a device address",
        ),
    ),
    (
        "C bool arg: the integer 2",
        lambda: refused_when_packed(
            c_bool_kernel(), [PTR, np.int64(1)], [PTR, np.int64(2)], BOOL_2
        ),
    ),
    (
        "numba bool arg: the integer 2",
        lambda: refused_when_packed(numba_bool_kernel(), [np.int64(1)], [np.int64(2)], BOOL_2),
    ),
    (
        "null device array (data pointer 0)",
        lambda: refused_at_launch(
            "saxpy",
            "saxpy",
            [vec(8), 1.0, vec(8), vec(8)],
            [vec(8, ptr=0), 1.0, vec(8), vec(8)],
            "is a null device array",
        ),
    ),
    (
        "__cuda_array_interface__ version 99",
        lambda: refused_at_launch(
            "saxpy",
            "saxpy",
            [vec(8), 1.0, vec(8), vec(8)],
            [FakeDeviceArray((8,), "float32", PTR, None, version=99), 1.0, vec(8), vec(8)],
            "version 99 of FakeDeviceArray is not one this runtime reads",
        ),
    ),
    ("manifest.json nested 100,000 deep", bad_bundle_file(MANIFEST_NAME, "deep", False, NESTED)),
    (
        "manifest.json.sig nested 100,000 deep",
        bad_bundle_file(SIGNATURE_NAME, "deep", True, "over the limit of 65536"),
    ),
    (
        "manifest.json.sig nested 20,000 deep (under its size limit)",
        bad_bundle_file(SIGNATURE_NAME, "deep", True, NESTED, 20_000),
    ),
    (
        "manifest.json a FIFO (verify)",
        bad_bundle_file(MANIFEST_NAME, "fifo", False, "no manifest.json in"),
    ),
    (
        "manifest.json.sig a FIFO",
        bad_bundle_file(
            SIGNATURE_NAME, "fifo", True, "the signature is a FIFO, not a regular file"
        ),
    ),
    ("JIT index input a FIFO (the app)", fifo_as_jit_input),
    ("JIT index entry nested 100,000 deep", deep_jit_index_entry),
    (
        "`python -m gpu_runtime platform` on CPython 3.6",
        platform_on("3.6.15", "needs Python 3.7 or newer"),
    ),
    ("`python -m gpu_runtime platform` on CPython 3.7 (control)", platform_on("3.7.16", "works")),
]


def test_runtime_input_probes() -> None:
    rows = run_probes("runtime-inputs", PROBES)
    assert findings(rows) == []
