"""Each backend implements every method of the `Backend` Protocol: no caller asks."""

from __future__ import annotations

import inspect

import pytest

from gpu_runtime.conftest import FakeBackend
from gpu_runtime.driver.backend import Backend
from gpu_runtime.driver.device import CudaBackend
from gpu_runtime.selftest.inputs import DryBackend

METHODS = sorted(
    name for name, value in vars(Backend).items() if inspect.isfunction(value) and name[0] != "_"
)


def test_the_protocol_names_what_the_runtime_calls() -> None:
    assert {"launch_function", "param_info", "launch_raw", "device_info"} <= set(METHODS)


@pytest.mark.parametrize("backend", [CudaBackend, FakeBackend, DryBackend])
def test_each_backend_has_every_method(backend: type) -> None:
    missing = [name for name in METHODS if not callable(getattr(backend, name, None))]
    assert not missing, f"{backend.__name__} lacks {missing}"
    for name in METHODS:  # the same positional parameters, so a call fits each
        want = [p for p in inspect.signature(getattr(Backend, name)).parameters][1:]
        got = inspect.signature(getattr(backend, name)).parameters
        if not any(p.kind is p.VAR_POSITIONAL for p in got.values()):
            assert len(got) - 1 == len(want), (backend.__name__, name)
