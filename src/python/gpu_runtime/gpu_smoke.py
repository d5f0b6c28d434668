"""GPU smoke test of a device bundle: launch every kernel in its manifest, compare with numpy.

Run on the GPU machine (cuda-core, cuda-bindings, numpy; no numba needed)::

    python -m gpu_runtime.gpu_smoke --cache dist/<bundle>/cache
    python src/python/gpu_runtime/gpu_smoke.py --cache DIR [--modes auto,ptx] [--json out.json]

For every library, kernel and signature of the manifest it builds inputs from the reference
table below, launches through gpu_runtime (in each mode: "auto" = normal selection, usually the
cubin; "ptx" = forced PTX, i.e. the driver JIT path; "cubin"), reads the outputs back and
compares them with numpy. It also checks:

* that dispatch picks the signature the case was built for (contiguous vs strided views);
* that the packed parameter offsets/sizes equal what the driver reports for the loaded kernel
  (`cuFuncGetParamInfo` through cuda.core's `Kernel.arguments_info`, driver >= 12.4);
* the sha256 of every file in the cache; a launch on a non-default stream; concurrent first
  use from several threads (one load).

Output: one line per check, then "N passed, N failed, N skipped"; exit status 1 if anything
failed (or, with --strict, if a kernel has no reference). `--dry-run` runs the same plumbing on
the CPU (host memory, no launches, no comparisons) to check the script and the cache.

The kernel-specific part is the REFERENCES table; add an entry when a kernel is added.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Run as a file: put src/python (not this package's directory, whose module names could
    # shadow the standard library's) on sys.path.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, os.path.dirname(_here))

import argparse
import json
import logging
import re
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import gpu_runtime
from gpu_runtime.abi import parse_param_type
from gpu_runtime.device import DeviceInfo
from gpu_spec.manifest import KernelSpec

log = logging.getLogger("gpu_runtime.smoke")


# =============================================================================================
# Memory: real device arrays, or host memory for --dry-run
# =============================================================================================


class StridedView:
    """A non-contiguous view of a device array (element offsets/strides), via the CUDA array
    interface: what a CuPy/numba slice like `a[::3]` hands to a kernel."""

    def __init__(self, base: Any, shape: Tuple[int, ...], strides_elems: Tuple[int, ...], offset: int = 0):
        self.base = base
        cai = base.__cuda_array_interface__
        self.dtype = np.dtype(cai["typestr"])
        self.shape = tuple(shape)
        self.strides = tuple(s * self.dtype.itemsize for s in strides_elems)
        self.ptr = cai["data"][0] + offset * self.dtype.itemsize
        self._elems = (tuple(strides_elems), offset)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": self.strides, "version": 3}


class HostArray:
    """--dry-run stand-in for DeviceArray: host memory exposed as a CUDA array interface."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = np.ascontiguousarray(a)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.a.shape, "typestr": self.a.dtype.str,
                "data": (self.a.ctypes.data, False), "strides": None, "version": 3}

    def to_numpy(self, stream: Any = None) -> np.ndarray:
        return self.a.copy()


class Memory:
    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run

    def array(self, host: np.ndarray) -> Any:
        return HostArray(host) if self.dry_run else gpu_runtime.DeviceArray.from_numpy(host)

    def zeros(self, shape: Any, dtype: Any) -> Any:
        return self.array(np.zeros(shape, dtype))

    def strided(self, base: Any, shape: Tuple[int, ...], strides: Tuple[int, ...], offset: int = 0) -> StridedView:
        return StridedView(base, shape, strides, offset)

    def to_host(self, arr: Any, stream: Any = None) -> np.ndarray:
        if isinstance(arr, StridedView):
            base = arr.base.to_numpy(stream=stream)
            (st, off) = arr._elems
            return np.lib.stride_tricks.as_strided(
                base.reshape(-1)[off:], arr.shape, tuple(s * base.itemsize for s in st)).copy()
        return arr.to_numpy(stream=stream)


# =============================================================================================
# REFERENCES: the kernel-specific part. One builder per kernel name (src/python/imaging/kernels)
# =============================================================================================


@dataclass
class Case:
    """Inputs of one launch and the expected contents of some arguments afterwards."""

    args: List[Any]
    grid: Any
    block: Any
    expected: Dict[int, np.ndarray]  # argument index -> expected full contents
    rtol: float = 1e-6
    atol: float = 0.0
    note: str = ""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def ref_saxpy(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # saxpy.py: out[i] = a * x[i] + y[i]; n not a multiple of the block
    n = 10_007
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = np.float32(2.5)
    out = mem.zeros(n, np.float32)
    return Case([out, a, mem.array(x), mem.array(y)], cdiv(n, 256), 256,
                {0: (a * x + y).astype(np.float32)}, rtol=1e-6, atol=1e-6)


def _box_blur_ref(src: np.ndarray) -> np.ndarray:
    p = np.pad(src, 1, mode="edge")
    h, w = src.shape
    acc = np.zeros((h, w), np.float32)
    for dy in range(3):
        for dx in range(3):
            acc += p[dy:dy + h, dx:dx + w]
    return acc * np.float32(1.0 / 9.0)


def ref_box_blur_3x3(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # blur.py: 3x3 mean with clamp-to-edge, 16x16 blocks + shared tile; sizes not multiples of 16
    h, w = 37, 53
    src = rng.random((h, w), dtype=np.float32)
    dst = mem.zeros((h, w), np.float32)
    return Case([mem.array(src), dst], (cdiv(w, 16), cdiv(h, 16)), (16, 16),
                {1: _box_blur_ref(src)}, rtol=1e-5, atol=1e-6)


def ref_histogram_256(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # histogram.py: 256 bins of a uint8 image; bins zeroed first; blockDim.x must be 256.
    # Signature "uint8[::1]": contiguous; "uint8[:]": a strided view (every 3rd pixel).
    n = 100_003
    layout = spec.args[0].layout if spec.args else "C"
    if layout == "C":
        img = rng.integers(0, 256, n, dtype=np.uint8)
        image, expected = mem.array(img), np.bincount(img, minlength=256)
        note = "contiguous image"
    else:
        base = rng.integers(0, 256, 3 * n, dtype=np.uint8)
        image = mem.strided(mem.array(base), (n,), (3,), offset=1)
        expected = np.bincount(base[1::3], minlength=256)
        note = "strided view image[1::3]"
    bins = mem.zeros(256, np.uint32)
    return Case([image, bins], 64, 256, {1: expected.astype(np.uint32)}, note=note)


def ref_sum_f32(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # histogram.py: float32 sum with one atomic per block into out[0] (zeroed); blockDim.x 256
    n = 1 << 20
    v = rng.random(n, dtype=np.float32)
    out = mem.zeros(1, np.float32)
    expected = np.array([v.astype(np.float64).sum()], np.float32)
    return Case([mem.array(v), out], 120, 256, {1: expected}, rtol=1e-4)


def _sobel_ref(img: np.ndarray) -> np.ndarray:
    p = np.pad(img, 1, mode="edge").astype(np.float32)
    h, w = img.shape
    s = lambda dy, dx: p[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]  # noqa: E731
    two = np.float32(2.0)
    gx = (s(-1, 1) + two * s(0, 1) + s(1, 1)) - (s(-1, -1) + two * s(0, -1) + s(1, -1))
    gy = (s(1, -1) + two * s(1, 0) + s(1, 1)) - (s(-1, -1) + two * s(-1, 0) + s(-1, 1))
    return np.sqrt(gx * gx + gy * gy).astype(np.float32)


def ref_sobel_magnitude(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # sobel.cu: (src, dst, width, height, pitch), rows `pitch` elements apart, clamp borders
    h, w, pitch = 29, 45, 48
    img = rng.random((h, w), dtype=np.float32)
    src = np.zeros((h, pitch), np.float32)
    src[:, :w] = img
    expected = np.zeros((h, pitch), np.float32)
    expected[:, :w] = _sobel_ref(img)
    dst = mem.zeros((h, pitch), np.float32)
    return Case([mem.array(src), dst, w, h, pitch], (cdiv(w, 16), cdiv(h, 16)), (16, 16),
                {1: expected}, rtol=1e-5, atol=1e-5, note=f"pitch {pitch} > width {w}")


def ref_matmul(spec: KernelSpec, mem: Memory, rng: np.random.Generator) -> Case:
    # matmul.cu: matmul<T, TILE>(a, b, c, m, n, k), row-major; block (TILE, TILE)
    m_ = re.match(r"matmul<\s*(float|double)\s*,\s*(\d+)\s*>", spec.name)
    if m_ is None:
        raise LookupError(spec.name)
    dtype = np.float32 if m_.group(1) == "float" else np.float64
    tile = int(m_.group(2))
    m, n, k = 70, 33, 45
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = mem.zeros((m, n), dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    return Case([mem.array(a), mem.array(b), c, m, n, k], (cdiv(n, tile), cdiv(m, tile)), (tile, tile),
                {2: (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)}, rtol=tol, atol=tol)


REFERENCES: Dict[str, Callable[[KernelSpec, Memory, np.random.Generator], Case]] = {
    "saxpy": ref_saxpy,
    "box_blur_3x3": ref_box_blur_3x3,
    "histogram_256": ref_histogram_256,
    "sum_f32": ref_sum_f32,
    "sobel_magnitude": ref_sobel_magnitude,
    "matmul<float, 16>": ref_matmul,
    "matmul<double, 16>": ref_matmul,
}


def reference_for(name: str) -> Optional[Callable[..., Case]]:
    if name in REFERENCES:
        return REFERENCES[name]
    if re.match(r"matmul<\s*(float|double)\s*,\s*\d+\s*>$", name):
        return ref_matmul
    return None


# =============================================================================================
# Runner (kernel-independent)
# =============================================================================================


class DryBackend:
    """--dry-run: a pretend device; loads and launches do nothing."""

    def __init__(self, cc: Tuple[int, int], driver: Tuple[int, int]) -> None:
        self.info = DeviceInfo(0, "dry-run", cc, driver)

    def device_info(self) -> DeviceInfo:
        return self.info

    def load(self, kind: str, data: bytes, name: str) -> Any:
        return name

    def get_function(self, obj: Any, entry: str) -> Any:
        return (obj, entry)

    def param_info(self, func: Any) -> None:
        return None

    def launch(self, *a: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass


@dataclass
class Results:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    records: List[Dict[str, Any]] = field(default_factory=list)

    def add(self, status: str, what: str, **info: Any) -> None:
        setattr(self, status, getattr(self, status) + 1)
        self.records.append(dict(status=status, what=what, **info))
        detail = " ".join(f"{k}={v}" for k, v in info.items() if k != "traceback")
        print(f"{status.upper()[:4]:4} {what}  {detail}", flush=True)
        if status == "failed" and info.get("traceback"):
            print(info["traceback"], file=sys.stderr, flush=True)


def _compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> Tuple[bool, str]:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False, f"got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    if np.issubdtype(want.dtype, np.integer):
        bad = int(np.count_nonzero(got != want))
        return bad == 0, f"{bad} elements differ"
    ok = np.allclose(got, want, rtol=rtol, atol=atol)
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
    return ok, f"max abs err {err:.3g}"


def check_param_layout(cache: Any, kernel: Any, args: List[Any]) -> Optional[str]:
    """None if our packed layout equals the driver's, else a description of the difference."""
    module, spec = kernel.resolve(*args)
    packed = kernel.pack(*args)
    func = cache.load_function(kernel.library, module, spec)
    theirs = cache.backend.param_info(func)
    if theirs is None:
        return "unavailable"
    ours = [(off, parse_param_type(t).size) for off, (t, _) in zip(packed.offsets, packed.values)]
    return "ok" if ours == list(theirs) else f"MISMATCH ours={ours} driver={list(theirs)}"


def run_mode(path: Optional[str], mode: str, results: Results, mem: Memory, backend: Any,
             strict: bool, seed: int) -> None:
    cache = gpu_runtime.open_cache(path, prefer=mode, backend=backend)
    if mode == "auto":
        print(cache.describe(), flush=True)
        try:
            checked = cache.verify(all_variants=True)
            results.add("passed", f"[{mode}] sha256 of all {len(checked)} cache files")
        except Exception as e:
            results.add("failed", f"[{mode}] sha256 of cache files", error=str(e))
    info = cache.device
    for lib_name in cache.libraries():
        try:
            choice = cache.choice(lib_name)
        except Exception as e:
            results.add("failed", f"[{mode}] {lib_name}: variant selection", error=str(e).splitlines()[0],
                        traceback=str(e))
            continue
        for kname in cache.library(lib_name).kernel_names():
            kernel = cache.kernel(kname, library=lib_name)
            specs = [s for _, s in kernel.overloads()]
            for spec in specs:
                what = f"[{mode}] {choice.kind} {choice.capability} {lib_name}.{spec.describe()}"
                builder = reference_for(kname)
                if builder is None:
                    results.add("failed" if strict else "skipped", what, reason="no reference in REFERENCES")
                    continue
                try:
                    case = builder(spec, mem, np.random.default_rng(seed))
                    _, picked = kernel.resolve(*case.args)
                    if picked.entry != spec.entry:
                        results.add("failed", what, error=f"dispatch picked {picked.describe()}")
                        continue
                    t0 = time.perf_counter()
                    kernel.load()
                    t_load = (time.perf_counter() - t0) * 1e3
                    layout = check_param_layout(cache, kernel, case.args)
                    kernel.launch(case.grid, case.block, *case.args)
                    backend.synchronize()
                    if mem.dry_run:
                        results.add("skipped" if layout in ("ok", "unavailable") else "failed", what,
                                    reason="dry run (no launch)", params=layout)
                        continue
                    problems = []
                    for idx, want in case.expected.items():
                        ok, detail = _compare(mem.to_host(case.args[idx]), want, case.rtol, case.atol)
                        if not ok:
                            problems.append(f"arg {idx}: {detail}")
                        last = detail
                    if layout not in ("ok", "unavailable"):
                        problems.append(f"param layout {layout}")
                    status = "failed" if problems else "passed"
                    results.add(status, what, result="; ".join(problems) or last, params=layout,
                                load_ms=f"{t_load:.1f}", note=case.note, device=info.sm)
                except Exception as e:
                    results.add("failed", what, error=f"{type(e).__name__}: {str(e).splitlines()[0]}",
                                traceback=traceback.format_exc())


def run_extras(path: Optional[str], results: Results, mem: Memory, backend_factory: Callable[[], Any],
               seed: int) -> None:
    """Stream and thread checks on saxpy, if the bundle has it."""
    cache = gpu_runtime.open_cache(path, backend=backend_factory())
    if "saxpy.saxpy" not in cache.kernel_names() or mem.dry_run:
        results.add("skipped", "non-default stream / concurrent first use", reason="no saxpy or dry run")
        return
    # concurrent first use: one load, every thread's launch correct
    k = cache.kernel("saxpy")
    n = 4096
    x = np.arange(n, dtype=np.float32)
    ys = [mem.array(np.full(n, i, np.float32)) for i in range(8)]
    outs = [mem.zeros(n, np.float32) for _ in range(8)]
    dx = mem.array(x)
    errors: List[BaseException] = []

    def go(i: int) -> None:
        try:
            k.launch(cdiv(n, 256), 256, outs[i], np.float32(1.0), dx, ys[i])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cache.backend.synchronize()
    loads = len(cache.loaded_modules())
    good = not errors and all(np.array_equal(mem.to_host(outs[i]), x + i) for i in range(8))
    results.add("passed" if good and loads == 1 else "failed", "concurrent first use from 8 threads",
                modules_loaded=loads, errors=len(errors))
    # a launch on a non-default (non-blocking) cuda.core stream
    try:
        stream = cache.backend.device().create_stream()
        out = mem.zeros(n, np.float32)
        k.launch(cdiv(n, 256), 256, out, np.float32(3.0), dx, ys[0], stream=stream)
        got = out.to_numpy(stream=stream)
        results.add("passed" if np.array_equal(got, 3 * x) else "failed", "launch on a created cuda.core stream")
    except Exception as e:
        results.add("failed", "launch on a created cuda.core stream", error=f"{type(e).__name__}: {e}",
                    traceback=traceback.format_exc())


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cache", default=None, help="the bundle's cache/ directory (default: the usual search)")
    p.add_argument("--modes", default="auto,ptx", help="comma-separated: auto, cubin, ptx (default auto,ptx)")
    p.add_argument("--device", type=int, default=None, help="CUDA device ordinal")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--strict", action="store_true", help="a kernel without a reference is a failure")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--dry-run", action="store_true", help="no GPU: check the plumbing on the CPU")
    p.add_argument("--dry-run-device", default="9.0,13.0", help="CC,DRIVER for --dry-run (default 9.0,13.0)")
    p.add_argument("-q", "--quiet", action="store_true", help="no gpu_runtime INFO logs")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if a.quiet else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    mem = Memory(a.dry_run)
    if a.dry_run:
        cc_s, drv_s = a.dry_run_device.split(",")
        cc = tuple(int(x) for x in cc_s.split("."))
        drv = tuple(int(x) for x in drv_s.split("."))
        factory: Callable[[], Any] = lambda: DryBackend(cc, drv)  # noqa: E731
    else:
        from gpu_runtime.device import CudaBackend

        shared = CudaBackend(a.device)
        factory = lambda: shared  # noqa: E731
        info = shared.device_info()
        print(f"device: {info.describe()}; cuda.core {_version('cuda-core')}, cuda-bindings "
              f"{_version('cuda-bindings')}, numpy {np.__version__}, python {sys.version.split()[0]}",
              flush=True)
    results = Results()
    for mode in [m.strip() for m in a.modes.split(",") if m.strip()]:
        try:
            run_mode(a.cache, mode, results, mem, factory() if a.dry_run else shared, a.strict, a.seed)
        except Exception as e:
            results.add("failed", f"[{mode}] opening the cache", error=f"{type(e).__name__}: {e}",
                        traceback=traceback.format_exc())
    try:
        run_extras(a.cache, results, mem, factory, a.seed)
    except Exception as e:
        results.add("failed", "extras", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
    print(f"{results.passed} passed, {results.failed} failed, {results.skipped} skipped", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"passed": results.passed, "failed": results.failed, "skipped": results.skipped,
                       "records": results.records}, f, indent=2, default=str)
    return 1 if results.failed else 0


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
