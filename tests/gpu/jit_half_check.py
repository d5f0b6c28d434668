"""JIT mode with CUDA's own headers and half precision, on a GPU: the example's kernels that
include cuda_fp16.h / cuda_bf16.h / CUB / cooperative groups (half_stats.cu) and use numba's
fp16 / bf16 (haxpy.py, bf16_axpy.py), compiled on first use by the same gpu_compiler as the
bundle, launched and checked against the example's numpy references.

    PYTHONPATH=<numpy 2.4 dir>:src/python:src/spec:dist/codegen/src/python \\
        GPU_RUNTIME_JIT_CACHE=$(mktemp -d) python3 tests/gpu/jit_half_check.py

The interpreter's environment is JIT mode's toolchain: it needs NVIDIA's header wheels
(nvidia-cuda-runtime, nvidia-cuda-crt, nvidia-cuda-cccl) as the pinned toolchains have them;
without them the compile says which one is missing. Prints one line per kernel and exits 1 if
any fails.
"""

from __future__ import annotations

import sys

import numpy as np

import gpu_runtime
from gpu_runtime.selftest.checks import compare
from gpu_runtime.selftest.inputs import Memory
from imaging.references import REFERENCES

KERNELS = ("half_gain_stats", "bf16_offset_to_half", "haxpy", "bf16_axpy")


def main() -> int:
    cache = gpu_runtime.open_cache()
    mem = Memory(host=False)
    failed = 0
    for name in KERNELS:
        try:
            kernel = cache.kernel(name)
            spec = kernel.overloads()[0][1]
            builder = REFERENCES.lookup(name)
            assert builder is not None, name
            case = builder(spec, mem, np.random.default_rng(1234))
            kernel.launch(case.grid, case.block, *case.args)
            problems = []
            for index, want in case.expected.items():
                ok, detail = compare(mem.to_host(case.args[index]), want, case.rtol, case.atol)
                if not ok:
                    problems.append(f"argument {index}: {detail}")
            status = "FAIL" if problems else "ok"
            detail = "; ".join(problems) or spec.describe()
        except Exception as e:  # reported per kernel: the others still run
            status, detail = "FAIL", f"{type(e).__name__}: {e}"
        failed += status != "ok"
        print(f"{status:4} {name}: {detail}", flush=True)
    print(cache.describe())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
