"""What the self-test's references provide, and the memory they build their inputs in.

A caller (an app that ships kernels) describes how to check each of its kernels with a
`ReferenceTable`: kernel name -> builder, where a builder gets the signature being checked, a
`Memory` and a seeded random generator and returns a `Case` (the launch's arguments and
configuration, and what some arguments must hold afterwards, computed with numpy). The runner
in `gpu_runtime.selftest.main` does everything that is not kernel-specific.

`Memory` hands out device arrays, or, for a dry run without a GPU, host arrays behind the same
`__cuda_array_interface__`, so that the builders and the dispatch and packing they exercise are
the same code either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from gpu_runtime.driver.devarray import DeviceArray
from gpu_runtime.driver.device import DeviceInfo
from gpu_spec.manifest.model import KernelSpec


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


Builder = Callable[[KernelSpec, "Memory", np.random.Generator], Case]


class ReferenceTable:
    """Which builder checks which kernel: exact kernel names first, then regular expressions
    (for template instantiations: "matmul<double, 32>" as well as the bundle's own).

    `probe` names a kernel whose case also runs from several threads at once on a fresh cache
    (one load, every launch right) and on a non-default stream.
    """

    def __init__(
        self,
        exact: Mapping[str, Builder],
        patterns: Sequence[Tuple[str, Builder]] = (),
        probe: Optional[str] = None,
    ) -> None:
        self._exact = dict(exact)
        self._patterns = [(re.compile(p), b) for p, b in patterns]
        self.probe = probe

    def lookup(self, name: str) -> Optional[Builder]:
        if name in self._exact:
            return self._exact[name]
        for pattern, builder in self._patterns:
            if pattern.fullmatch(name):
                return builder
        return None


class StridedView:
    """A non-contiguous view of a device array (element offsets/strides), via the CUDA array
    interface: what a CuPy/numba slice like `a[::3]` hands to a kernel."""

    def __init__(
        self, base: Any, shape: Tuple[int, ...], strides_elems: Tuple[int, ...], offset: int = 0
    ) -> None:
        self.base = base
        cai = base.__cuda_array_interface__
        self.dtype = np.dtype(cai["typestr"])
        self.shape = tuple(shape)
        self.strides = tuple(s * self.dtype.itemsize for s in strides_elems)
        self.ptr = cai["data"][0] + offset * self.dtype.itemsize
        self.strides_elems = tuple(strides_elems)
        self.offset = offset

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": self.strides,
            "version": 3,
        }


class HostArray:
    """Dry-run stand-in for DeviceArray: host memory exposed as a CUDA array interface."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = np.ascontiguousarray(a)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.a.shape,
            "typestr": self.a.dtype.str,
            "data": (self.a.ctypes.data, False),
            "strides": None,
            "version": 3,
        }

    def to_numpy(self, stream: Any = None) -> np.ndarray:
        return self.a.copy()


class Memory:
    """Arrays for the cases: `DeviceArray`s, or `HostArray`s when `host` (a dry run)."""

    def __init__(self, host: bool) -> None:
        self.host = host

    def array(self, data: np.ndarray) -> Any:
        return HostArray(data) if self.host else DeviceArray.from_numpy(data)

    def zeros(self, shape: Any, dtype: Any) -> Any:
        return self.array(np.zeros(shape, dtype))

    def strided(
        self, base: Any, shape: Tuple[int, ...], strides: Tuple[int, ...], offset: int = 0
    ) -> StridedView:
        return StridedView(base, shape, strides, offset)

    def to_host(self, arr: Any, stream: Any = None) -> np.ndarray:
        """The contents of `arr` (what a kernel saw of it, for a strided view)."""
        if isinstance(arr, StridedView):
            base = arr.base.to_numpy(stream=stream)
            return np.lib.stride_tricks.as_strided(
                base.reshape(-1)[arr.offset :],
                arr.shape,
                tuple(s * base.itemsize for s in arr.strides_elems),
            ).copy()
        return arr.to_numpy(stream=stream)


class DryBackend:
    """A pretend device for a dry run: loads and launches do nothing."""

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

    def stream_handle(self, stream: Any) -> Any:
        return stream

    def create_stream(self) -> Any:
        return object()

    def load_linked(self, ptx: bytes, inputs: List[Tuple[str, bytes, str]], name: str) -> Any:
        return name

    def launch_function(self) -> None:
        return None  # every launch goes to launch_raw, which does nothing

    def launch_raw(self, *a: Any) -> None:
        pass

    def launch_cooperative_raw(self, *a: Any) -> None:
        pass

    # Occupancy as generous as no device can be: a dry run refuses no grid.
    def max_active_blocks_per_sm(self, func: Any, block_threads: int, shared_mem: int) -> int:
        return 1 << 16

    def multiprocessor_count(self) -> int:
        return 1 << 16

    def max_potential_block_size(self, func: Any, shared_mem: int, limit: int) -> int:
        return min(limit, 1024) if limit > 0 else 1024

    def begin_capture(self, stream: Any) -> None:
        pass

    def end_capture(self, stream: Any) -> Any:
        return "graph"

    def instantiate(self, graph: Any) -> Any:
        return graph

    def graph_launch(self, graph_exec: Any, stream: Any) -> None:
        pass

    def destroy_graph(self, graph: Any, graph_exec: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass
