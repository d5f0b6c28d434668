"""The self-test's checks, kernel-independent: each takes its inputs from a `ReferenceTable`.

Every check records one line in `Results` and never raises: an exception in a check is that
check's failure (with its traceback on stderr), and the next check runs.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from gpu_runtime.errors import KernelNotFoundError
from gpu_runtime.kernel import Kernel
from gpu_runtime.runtime import KernelCache
from gpu_runtime.selftest.inputs import Builder, Case, Memory, ReferenceTable
from gpu_spec.manifest.model import KernelSpec

PROBE_THREADS = 8


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

    def error(self, what: str, e: BaseException) -> None:
        """`what` failed by raising `e`."""
        self.add(
            "failed",
            what,
            error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            traceback=traceback.format_exc(),
        )

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"

    def to_json(self) -> Dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "records": self.records,
        }


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> Tuple[bool, str]:
    """Exact for integers, allclose for floats; the dtype and shape must match exactly."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False, f"got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    if np.issubdtype(want.dtype, np.integer):
        bad = int(np.count_nonzero(got != want))
        return bad == 0, f"{bad} elements differ"
    # in float64: also for dtypes numpy has no arithmetic of its own for (ml_dtypes' bfloat16)
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    ok = np.allclose(wide_got, wide_want, rtol=rtol, atol=atol)
    diff = np.abs(wide_got - wide_want)
    err = float(np.max(diff)) if want.size else 0.0
    return ok, f"max abs err {err:.3g}"


def param_layout(kernel: Kernel, args: List[Any]) -> str:
    """ "ok" if the packed layout equals the driver's, "unavailable", or the difference."""
    theirs = kernel.param_info(*args)
    if theirs is None:
        return "unavailable"
    packed = kernel.pack(*args)
    ours = list(zip(packed.offsets, packed.sizes))
    return "ok" if ours == list(theirs) else f"MISMATCH ours={ours} driver={list(theirs)}"


class SelfTest:
    """Runs the checks. `open_cache(prefer)` opens a fresh cache of the bundle under test."""

    def __init__(
        self,
        references: ReferenceTable,
        mem: Memory,
        open_cache: Callable[[Optional[str]], KernelCache],
        *,
        seed: int = 1234,
        strict: bool = False,
        dry_run: bool = False,
    ) -> None:
        self.references = references
        self.mem = mem
        self.open_cache = open_cache
        self.seed = seed
        self.strict = strict
        self.dry_run = dry_run
        self.results = Results()

    def run(self, modes: List[str]) -> Results:
        for mode in modes:
            try:
                self.run_mode(mode)
            except Exception as e:
                self.results.add(
                    "failed",
                    f"[{mode}] opening the cache",
                    error=f"{type(e).__name__}: {e}",
                    traceback=traceback.format_exc(),
                )
        try:
            self.run_probe()
        except Exception as e:
            self.results.add(
                "failed",
                "extras",
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc(),
            )
        return self.results

    # -- every signature, in one mode -------------------------------------------------------
    def run_mode(self, mode: str) -> None:
        cache = self.open_cache(mode)
        if mode == "auto":
            print(cache.describe(), flush=True)
            self.check_files(cache, mode)
        sm = cache.device.sm
        for lib_name in cache.libraries():
            try:
                choice = cache.choice(lib_name)
            except Exception as e:
                self.results.add(
                    "failed",
                    f"[{mode}] {lib_name}: variant selection",
                    error=str(e).splitlines()[0],
                    traceback=str(e),
                )
                continue
            for kname in cache.library(lib_name).kernel_names():
                kernel = cache.kernel(kname, library=lib_name)
                for _, spec in kernel.overloads():
                    what = (
                        f"[{mode}] {choice.kind} {choice.capability} {lib_name}.{spec.describe()}"
                    )
                    try:
                        self.check_signature(cache, kernel, spec, what, sm)
                    except Exception as e:
                        self.results.error(what, e)

    def check_files(self, cache: KernelCache, mode: str) -> None:
        try:
            checked = cache.verify(all_variants=True)
            self.results.add("passed", f"[{mode}] sha256 of all {len(checked)} cache files")
        except Exception as e:
            self.results.add("failed", f"[{mode}] sha256 of cache files", error=str(e))

    def check_signature(
        self, cache: KernelCache, kernel: Kernel, spec: KernelSpec, what: str, sm: str
    ) -> None:
        """Dispatch, parameter layout and outputs of one signature, as one record."""
        builder = self.references.lookup(kernel.name)
        if builder is None:
            status = "failed" if self.strict else "skipped"
            self.results.add(status, what, reason="no reference in the reference table")
            return
        case = builder(spec, self.mem, np.random.default_rng(self.seed))
        _, picked = kernel.resolve(*case.args)
        if picked.entry != spec.entry:
            self.results.add("failed", what, error=f"dispatch picked {picked.describe()}")
            return
        t0 = time.perf_counter()
        kernel.load()
        t_load = (time.perf_counter() - t0) * 1e3
        layout = param_layout(kernel, case.args)
        kernel.launch(case.grid, case.block, *case.args)
        cache.backend.synchronize()
        if self.dry_run:
            status = "skipped" if layout in ("ok", "unavailable") else "failed"
            self.results.add(status, what, reason="dry run (no launch)", params=layout)
            return
        problems, last = self.compare_outputs(case)
        if layout not in ("ok", "unavailable"):
            problems.append(f"param layout {layout}")
        self.results.add(
            "failed" if problems else "passed",
            what,
            result="; ".join(problems) or last,
            params=layout,
            load_ms=f"{t_load:.1f}",
            note=case.note,
            device=sm,
        )

    def compare_outputs(self, case: Case, stream: Any = None) -> Tuple[List[str], str]:
        """(problems, the last comparison's detail) of `case`'s expected outputs."""
        problems, last = [], ""
        for idx, want in case.expected.items():
            ok, last = compare(self.mem.to_host(case.args[idx], stream), want, case.rtol, case.atol)
            if not ok:
                problems.append(f"arg {idx}: {last}")
        return problems, last

    # -- the probe kernel: threads and streams ----------------------------------------------
    def run_probe(self) -> None:
        probe = self.references.probe
        cache = self.open_cache(None)
        kernel = None
        if probe is not None and not self.dry_run:
            try:
                kernel = cache.kernel(probe)
            except KernelNotFoundError:
                pass
        if kernel is None:
            self.results.add(
                "skipped",
                "non-default stream / concurrent first use",
                reason=f"no probe kernel ({probe}) in the bundle, or dry run",
            )
            return
        spec = kernel.overloads()[0][1]
        builder = self.references.lookup(kernel.name)
        if builder is None:
            what = "non-default stream / concurrent first use"
            self.results.add("failed", what, error=f"no reference for the probe kernel {probe!r}")
            return
        self.check_concurrent_first_use(cache, kernel, spec, builder)
        self.check_stream(cache, kernel, spec, builder)

    def _case(self, builder: Builder, spec: KernelSpec, i: int) -> Case:
        return builder(spec, self.mem, np.random.default_rng(self.seed + i))

    def check_concurrent_first_use(
        self, cache: KernelCache, kernel: Kernel, spec: KernelSpec, builder: Builder
    ) -> None:
        """Threads launching a kernel nobody has loaded yet: one load, every launch right."""
        what = f"concurrent first use from {PROBE_THREADS} threads"
        cases = [self._case(builder, spec, i) for i in range(PROBE_THREADS)]
        errors: List[BaseException] = []

        def go(case: Case) -> None:
            try:
                kernel.launch(case.grid, case.block, *case.args)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=go, args=(c,)) for c in cases]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cache.backend.synchronize()
        loads = len(cache.loaded_modules())
        good = not errors and not any(self.compare_outputs(c)[0] for c in cases)
        status = "passed" if good and loads == 1 else "failed"
        self.results.add(status, what, modules_loaded=loads, errors=len(errors))

    def check_stream(
        self, cache: KernelCache, kernel: Kernel, spec: KernelSpec, builder: Builder
    ) -> None:
        """A launch on a created (non-blocking) stream, read back on that stream."""
        what = "launch on a created stream"
        try:
            stream = cache.create_stream()
            case = self._case(builder, spec, PROBE_THREADS)
            kernel.launch(case.grid, case.block, *case.args, stream=stream)
            problems, _ = self.compare_outputs(case, stream)
            info = {"result": "; ".join(problems)} if problems else {}
            self.results.add("failed" if problems else "passed", what, **info)
        except Exception as e:
            self.results.add(
                "failed", what, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()
            )
