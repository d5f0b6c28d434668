"""Fixtures of the runtime's tests: fake device arrays and a fake GPU; bundles from gpu_spec's."""

from __future__ import annotations

import ctypes
import json
import os
import threading
from typing import Any, Dict, List, Tuple

import pytest

from gpu_runtime.driver.device import DeviceInfo
from gpu_spec.conftest import (  # noqa: F401 (re-exported for the runtime's tests)
    HISTOGRAM,
    MATMUL,
    SAXPY,
    SAXPY2,
    SOBEL,
    bundle,
    file_bytes,
    library_specs,
    make_metadata,
    numba_array_params,
    write_bundle,
)

# --------------------------------------------------------------------------------------------
# Fake device arrays and a fake GPU


class FakeDeviceArray:
    """Anything exposing __cuda_array_interface__ (what CuPy/numba/torch arrays look like)."""

    def __init__(self, shape, dtype, ptr=0x7F0000000000, strides=None, version=3):
        import numpy as np

        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ptr = ptr
        self.strides = strides
        self.version = version

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": self.strides,
            "version": self.version,
        }


FAKE_SUCCESS = object()  # the fake's bare launch status, compared by identity as CUDA_SUCCESS


class ParamsAt:
    """A `void**` at an address read as the driver reads it (`ParamBuffer.param_bytes`)."""

    def __init__(self, address: int, sizes: Tuple[int, ...]) -> None:
        self.address, self.sizes = address, sizes

    def param_bytes(self) -> Tuple[bytes, ...]:
        pointers = (ctypes.c_void_p * len(self.sizes)).from_address(self.address)
        return tuple(ctypes.string_at(p or 0, n) for p, n in zip(pointers, self.sizes))


class FakeBackend:
    """Records loads and launches instead of touching a GPU."""

    def __init__(
        self,
        capability=(9, 0),
        driver=(13, 0),
        name="NVIDIA H200",
        load_delay=0.0,
        fail_load: bool = False,
    ):
        self.info = DeviceInfo(ordinal=0, name=name, capability=capability, driver_version=driver)
        self.loads: List[Tuple[str, bytes, str]] = []
        self.functions: List[Tuple[str, str]] = []
        # (func, (gx, gy, gz), (bx, by, bz), stream, shared_mem, [bytes of each parameter])
        self.launches: List[Tuple[Any, Any, Any, Any, int, list]] = []
        self.param_sizes: Dict[Any, Tuple[int, ...]] = {}  # func -> its parameters' sizes
        self.bare_launches = 0  # of the launches, those a plan's fire made (not launch_raw)
        self.captures: List[tuple] = []
        self.load_delay = load_delay
        self.fail_load = fail_load
        self.lock = threading.Lock()
        # entry -> [(offset, size)] that param_info reports; None (driver too old) otherwise
        self.param_layouts: Dict[str, List[Tuple[int, int]]] = {}
        # occupancy: blocks per SM for (entry, block threads, shared) (default 2), SMs, and
        # the block size max_potential_block_size suggests
        self.active_blocks: Dict[Tuple[str, int, int], int] = {}
        self.sms = 132
        self.potential_block = 768
        self.occupancy_queries: List[tuple] = []
        # (func, grid, block, stream, shared_mem, [bytes of each parameter]) of cooperative ones
        self.cooperative_launches: List[Tuple[Any, Any, Any, Any, int, list]] = []
        # cuLinkCreate/AddData/Complete: (name, [(input type, bytes)]) per linked load
        self.links: List[Tuple[str, List[Tuple[str, bytes]]]] = []

    def device_info(self):
        return self.info

    def load(self, kind, data, name):
        if self.fail_load:
            raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")
        if self.load_delay:
            import time

            time.sleep(self.load_delay)
        with self.lock:
            self.loads.append((kind, data, name))
        return ("obj", kind, name)

    def get_function(self, obj, entry):
        with self.lock:
            self.functions.append((obj[2], entry))
        return ("func", obj[2], entry)

    def param_info(self, func):
        return self.param_layouts.get(func[2])

    def stream_handle(self, stream):
        return stream  # kept as given, so tests see what was passed

    def create_stream(self):
        return object()

    def launch_raw(self, func, gx, gy, gz, bx, by, bz, shared_mem, stream, params):
        """Reads each parameter through the `void**`, as the driver does at launch time."""
        self.param_sizes[func] = params.sizes  # what the bare launch call reads it with
        self.launches.append(
            ((func, (gx, gy, gz), (bx, by, bz), stream, shared_mem, list(params.param_bytes())))
        )
        self.launch(func, (gx, gy, gz), (bx, by, bz), stream, shared_mem, params)

    def launch_function(self):
        """The bare launch call a plan's `fire` makes (`CudaBackend.launch_function`)."""
        return self.bare_launch, FAKE_SUCCESS, self.stream_handle

    def bare_launch(self, func, gx, gy, gz, bx, by, bz, shared_mem, hstream, address, extra):
        """cuLaunchKernel's signature: reads the `void**` at `address` as the driver does, with
        the sizes of `func`'s parameters (its first launch went through `launch_raw`)."""
        params = ParamsAt(address, self.param_sizes[func])
        stream = 0 if hstream is None else hstream
        self.bare_launches += 1
        self.launches.append(
            ((func, (gx, gy, gz), (bx, by, bz), stream, shared_mem, list(params.param_bytes())))
        )
        self.launch(func, (gx, gy, gz), (bx, by, bz), stream, shared_mem, params)
        return (FAKE_SUCCESS,)

    def launch(self, func, grid, block, stream, shared_mem, params):
        """Hook for fakes that also run the kernel (`params`: has `param_bytes()`)."""

    def launch_cooperative_raw(self, func, gx, gy, gz, bx, by, bz, shared_mem, stream, params):
        self.cooperative_launches.append(
            ((func, (gx, gy, gz), (bx, by, bz), stream, shared_mem, list(params.param_bytes())))
        )

    def max_active_blocks_per_sm(self, func, block_threads, shared_mem):
        self.occupancy_queries.append(("active", func[2], block_threads, shared_mem))
        return self.active_blocks.get((func[2], block_threads, shared_mem), 2)

    def multiprocessor_count(self):
        return self.sms

    def max_potential_block_size(self, func, shared_mem, limit):
        self.occupancy_queries.append(("potential", func[2], shared_mem, limit))
        return self.potential_block

    def load_linked(self, ptx, inputs, name):
        """The driver linker: `inputs` are (CUjitInputType name, bytes, path)."""
        self.links.append((name, [("CU_JIT_INPUT_PTX", ptx)] + [(k, d) for k, d, _ in inputs]))
        return self.load("ptx", ptx, name)

    # graphs: recorded as calls
    def begin_capture(self, stream):
        self.captures.append(("begin", stream))

    def end_capture(self, stream):
        self.captures.append(("end", stream))
        return ("graph", len(self.captures))

    def instantiate(self, graph):
        self.captures.append(("instantiate", graph))
        return ("exec", graph)

    def graph_launch(self, graph_exec, stream):
        self.captures.append(("launch", graph_exec, stream))

    def destroy_graph(self, graph, graph_exec):
        self.captures.append(("destroy", graph, graph_exec))

    def synchronize(self):
        pass


@pytest.fixture
def fake_backend() -> FakeBackend:
    return FakeBackend()


def manifest_json(cache: str) -> Dict[str, Any]:
    with open(os.path.join(cache, "manifest.json")) as f:
        return json.load(f)
