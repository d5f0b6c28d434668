"""On a GPU: the build-time resource figures of every kernel of some bundles, against the driver.

    PYTHONPATH=src/spec python3 tests/gpu/resources_check.py dist/imaging_h200/cache \\
        dist/numba_docs_h200/cache dist/tests.gpu.kernels/occupancy_probe/sm_90 \\
        [--block-sizes 32,64,128,256,512,1024] [--json OUT]

Each argument is a bundle's cache/ (its manifest.json) or one compile's output directory (its
metadata.json, as `pants package` of a gpu_kernel writes it: the probe kernels of
tests/gpu/kernels). For each kernel of each manifest's variant for this GPU's capability, or of
the compile if it is for this capability (the cubin, loaded with
`cuModuleLoadData` through cuda.bindings; no gpu_runtime, no numba), compares:

- `cuFuncGetAttribute` NUM_REGS, LOCAL_SIZE_BYTES, SHARED_SIZE_BYTES, CONST_SIZE_BYTES and
  MAX_THREADS_PER_BLOCK with the manifest's `resources` (registers, local_bytes, shared_bytes,
  const_bytes) and `gpu_spec.resources.occupancy.max_threads_per_block` (with the recorded
  `launch_bound_threads`);
  where LOCAL_SIZE_BYTES differs, the cubin's own frame and its stack (frame plus the deepest
  callee's, what the build records) are printed beside it (`gpu_spec.resources.cubin`);
- `cuOccupancyMaxActiveBlocksPerMultiprocessor` at each block size (no dynamic shared memory)
  with `gpu_spec.resources.occupancy.occupancy(...).active_blocks`.

Prints one line per kernel (`ok` or each figure that differs, build vs driver) and a summary;
exits 1 if any figure differs. Reads the manifest with gpu_spec and nothing of the runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Tuple

from cuda.bindings import driver as cu

from gpu_spec.manifest.parse import load_manifest
from gpu_spec.resources import occupancy
from gpu_spec.resources.cubin import kernel_resources

ATTRIBUTES = {
    "registers": cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS,
    "local_bytes": cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
    "shared_bytes": cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
    "const_bytes": cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
    "max_threads_per_block": cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
}


def check(result: Any) -> Any:
    err, *rest = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err}")
    return rest[0] if len(rest) == 1 else rest


def capability_of_device() -> str:
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    attr = cu.CUdevice_attribute
    major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    return f"sm_{major}{minor}"


def driver_figures(function: Any, block_sizes: List[int]) -> Dict[str, Any]:
    got = {name: check(cu.cuFuncGetAttribute(a, function)) for name, a in ATTRIBUTES.items()}
    got["active_blocks"] = {
        b: check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, b, 0))
        for b in block_sizes
    }
    return got


def build_figures(capability: str, resources: Dict[str, Any], blocks: List[int]) -> Dict:
    registers, shared = int(resources["registers"]), int(resources["shared_bytes"])
    return {
        "registers": registers,
        "local_bytes": int(resources["local_bytes"]),
        "shared_bytes": shared,
        "const_bytes": int(resources.get("const_bytes", 0)),
        "max_threads_per_block": occupancy.max_threads_per_block(
            capability,
            registers=registers,
            launch_bound_threads=int(resources.get("launch_bound_threads", 0)),
        ),
        "active_blocks": {
            b: occupancy.occupancy(
                capability, registers=registers, shared_bytes=shared, block_size=b
            ).active_blocks
            for b in blocks
        },
    }


def cubins(directory: str, capability: str) -> List[Tuple[str, str, List[Dict]]]:
    """(name, cubin path, kernels as {name, entry, resources}) of a cache or a compile."""
    if os.path.exists(os.path.join(directory, "manifest.json")):
        manifest = load_manifest(os.path.join(directory, "manifest.json"))
        return [
            (
                f"{manifest.bundle} {lib.name}",
                # The manifest's paths are relative to cache/ and hold the variant's directory.
                os.path.join(directory, *module.cubin.split("/")),
                [
                    {"name": k.name, "entry": k.entry, "resources": dict(k.resources)}
                    for k in module.kernels
                ],
            )
            for lib in manifest.libraries
            for v in lib.variants
            if v.capability == capability
            for module in v.modules
            if module.cubin
        ]
    with open(os.path.join(directory, "metadata.json")) as f:
        metadata = json.load(f)
    if metadata["capability"] != capability:
        return []
    return [
        (os.path.basename(metadata["source"]), os.path.join(directory, m["cubin"]), m["kernels"])
        for m in metadata["modules"]
    ]


def check_dir(directory: str, capability: str, blocks: List[int], rows: List[Dict]) -> int:
    differing = 0
    for owner, path, kernels in cubins(directory, capability):
        with open(path, "rb") as f:
            data = f.read()
        mod = check(cu.cuModuleLoadData(data))
        in_cubin = kernel_resources(data)
        for kernel in kernels:
            function = check(cu.cuModuleGetFunction(mod, kernel["entry"].encode()))
            driver = driver_figures(function, blocks)
            build = build_figures(capability, kernel["resources"], blocks)
            diff = {k: (build[k], driver[k]) for k in build if build[k] != driver[k]}
            differing += bool(diff)
            own = in_cubin.get(kernel["entry"])
            if "local_bytes" in diff and own is not None:
                # Which of the cubin's two figures the driver's LOCAL_SIZE_BYTES is.
                diff["cubin frame, stack"] = (own.frame_bytes, own.local_bytes)
            name = f"{owner}.{kernel['name']}"
            print(
                f"{name:<48} {'ok' if not diff else 'DIFFERS ' + repr(diff)}  "
                f"regs {driver['registers']} local {driver['local_bytes']} shared "
                f"{driver['shared_bytes']} const {driver['const_bytes']} maxthr "
                f"{driver['max_threads_per_block']} blocks {driver['active_blocks']}"
            )
            rows.append({"kernel": name, "build": build, "driver": driver, "diff": diff})
        check(cu.cuModuleUnload(mod))
    return differing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dirs", nargs="+", help="bundle cache/ directories or compile outputs")
    p.add_argument("--block-sizes", default="32,64,96,128,192,256,384,512,768,1024")
    p.add_argument("--json", help="write every kernel's build and driver figures here")
    args = p.parse_args()
    blocks = [int(b) for b in args.block_sizes.split(",")]
    capability = capability_of_device()
    rows: List[Dict] = []
    differing = sum(check_dir(d, capability, blocks, rows) for d in args.dirs)
    print(
        f"\n{len(rows)} kernels on {capability}: {len(rows) - differing} equal to the driver's "
        f"figures (registers, local, shared, const, max threads, active blocks at "
        f"{len(blocks)} block sizes), {differing} differ"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 1 if differing or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
