"""Self-test of a device bundle: launch every kernel signature of its manifest, compare with numpy.

The kernel-specific part comes from the caller: a `ReferenceTable` (`gpu_runtime.selftest.inputs`)
saying how to build inputs and expected outputs for each kernel name. An app hands its table to
`main`, e.g. `app.pex --self-test`; `python -m gpu_runtime.selftest.main --references MOD:NAME` does
the same with a table importable as MOD.NAME.

For every library, kernel and signature of the manifest, in each mode ("auto" = normal
selection, usually the cubin; "ptx" = forced PTX, i.e. the driver JIT path; "cubin"), it checks:

* that dispatch picks the signature the case was built for (contiguous vs strided views);
* that the packed parameter offsets/sizes equal what the driver reports for the loaded kernel
  (`cuFuncGetParamInfo`, driver >= 12.4);
* the outputs against the reference's numpy results;

and, once: the sha256 of every file in the cache; with the table's probe kernel, concurrent
first use from several threads (one load) and a launch on a non-default stream.

Output: one line per check, then "N passed, N failed, N skipped"; exit status 1 if anything
failed (or, with --strict, if a kernel has no reference). `--dry-run` runs the same plumbing on
the CPU (host memory, no launches, no comparisons) to check the references and the cache.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from typing import Any, Callable, List, Optional

import numpy as np

import gpu_runtime
from gpu_runtime.selftest.checks import Results, SelfTest
from gpu_runtime.selftest.inputs import DryBackend, Memory, ReferenceTable

__all__ = ["main", "Results", "SelfTest"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cache", default=None, help="the bundle's cache/ (default: the usual search)")
    p.add_argument("--modes", default="auto,ptx", help="comma-separated: auto, cubin, ptx")
    p.add_argument("--device", type=int, default=None, help="CUDA device ordinal")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--strict", action="store_true", help="a kernel without a reference fails")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--dry-run", action="store_true", help="no GPU: check the plumbing on the CPU")
    p.add_argument("--dry-run-device", default="9.0,13.0", help="CC,DRIVER for --dry-run")
    p.add_argument("--references", default=None, help="MODULE:NAME of a ReferenceTable")
    p.add_argument("-q", "--quiet", action="store_true", help="no gpu_runtime INFO logs")
    return p


def _load_references(spec: str) -> ReferenceTable:
    module, _, name = spec.partition(":")
    table = getattr(importlib.import_module(module), name or "REFERENCES")
    if not isinstance(table, ReferenceTable):
        raise TypeError(f"{spec} is a {type(table).__name__}, not a ReferenceTable")
    return table


def _backend_factory(a: argparse.Namespace) -> Callable[[], Any]:
    """A fresh dry backend per cache, or the one CUDA backend (one context) for all of them."""
    if a.dry_run:
        cc_s, drv_s = a.dry_run_device.split(",")
        cc = tuple(int(x) for x in cc_s.split("."))
        drv = tuple(int(x) for x in drv_s.split("."))
        return lambda: DryBackend(cc, drv)  # type: ignore[arg-type]
    from gpu_runtime.driver.device import CudaBackend

    shared = CudaBackend(a.device)
    info = shared.device_info()
    print(
        f"device: {info.describe()}; cuda-bindings "
        f"{_version('cuda-bindings')}, numpy {np.__version__}, python {sys.version.split()[0]}",
        flush=True,
    )
    return lambda: shared


def main(argv: Optional[List[str]] = None, references: Optional[ReferenceTable] = None) -> int:
    """Run the self-test with `references` (or --references); 1 if any check failed."""
    a = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if a.quiet else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if a.references:
        references = _load_references(a.references)
    factory = _backend_factory(a)

    def open_cache(prefer: Optional[str]) -> gpu_runtime.KernelCache:
        return gpu_runtime.open_cache(a.cache, prefer=prefer, backend=factory())

    test = SelfTest(
        references or ReferenceTable({}),
        Memory(host=a.dry_run),
        open_cache,
        seed=a.seed,
        strict=a.strict,
        dry_run=a.dry_run,
    )
    results = test.run([m.strip() for m in a.modes.split(",") if m.strip()])
    print(results.summary(), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results.to_json(), f, indent=2, default=str)
    return 1 if results.failed else 0


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
