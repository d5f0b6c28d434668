"""CudaBackend's new driver calls take the argument types cuda.bindings expects, with no GPU.

cuda.bindings converts every argument before it loads libcuda, so on a machine without a
driver a call with a wrong argument type raises TypeError, and one with the right types gets
as far as the driver's absence. With a GPU, the calls reach the driver and may fail there
(DeviceError): either way, never a TypeError.
"""

from __future__ import annotations

import pytest

from gpu_runtime.driver import device
from gpu_runtime.driver.device import CudaBackend
from gpu_runtime.errors import DeviceError
from gpu_runtime.launch.param_buffer import ParamBuffer


def _reached_the_driver(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, DeviceError) or "libcuda" in text or "NVIDIA driver" in text


@pytest.fixture
def backend(monkeypatch):
    monkeypatch.setattr(device, "ensure_context", lambda ordinal=None: 0)
    return CudaBackend(0)


def func():
    return device.driver_api().CUfunction()


CALLS = {
    "load_linked": lambda b: b.load_linked(
        b".version 9.0\n.target sm_90\n",
        [
            ("CU_JIT_INPUT_LIBRARY", b"!<arch>\n", "libcudadevrt.a"),
            ("CU_JIT_INPUT_PTX", b"", "f.ptx"),
        ],
        "lib/module",
    ),
    "launch_cooperative_raw": lambda b: b.launch_cooperative_raw(
        func(), 4, 1, 1, 256, 1, 1, 0, 0, ParamBuffer((0, 8), (8, 8), 16)
    ),
    "max_active_blocks_per_sm": lambda b: b.max_active_blocks_per_sm(func(), 256, 0),
    "multiprocessor_count": lambda b: b.multiprocessor_count(),
    "max_potential_block_size": lambda b: b.max_potential_block_size(func(), 0, 1024),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_arguments_are_accepted(backend, name):
    try:
        CALLS[name](backend)
    except (TypeError, ValueError, AttributeError):
        raise
    except Exception as e:  # the driver is absent here, or refused a null function there
        assert _reached_the_driver(e), repr(e)
