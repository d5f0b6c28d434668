"""A child forked after CUDA started gets an error that says so and what to do, not a bare
CUDA_ERROR_NOT_INITIALIZED; one forked before CUDA started gets the plain error.

A fake driver stands in for cuda.bindings: it succeeds in the parent and, in a forked child,
answers CUDA_ERROR_NOT_INITIALIZED (3) as the real driver does there. The children are real
`os.fork()` children, so the at-fork hooks `gpu_runtime.driver.device` registers are what runs.
"""

from __future__ import annotations

import os

import pytest

from gpu_runtime.driver import device
from gpu_runtime.errors import DeviceError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")


class FakeDriver:
    """The driver calls `ensure_context` makes; every call fails with `status` once set."""

    def __init__(self) -> None:
        self.status = 0

    def _answer(self, *value):
        return (self.status, *value) if value else (self.status,)

    def cuInit(self, flags):
        return self._answer()

    def cuCtxGetCurrent(self):
        return self._answer(None)

    def cuDeviceGet(self, ordinal):
        return self._answer(ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        return self._answer(0xC0)

    def cuCtxSetCurrent(self, ctx):
        return self._answer()

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_NOT_INITIALIZED" if int(err) == 3 else b"CUDA_ERROR_UNKNOWN")


@pytest.fixture
def fake(monkeypatch):
    driver = FakeDriver()
    monkeypatch.setattr(device, "driver_api", lambda: driver)
    monkeypatch.setattr(device, "_primary", {})
    monkeypatch.setattr(device, "_current", device.threading.local())
    monkeypatch.setattr(device, "_fork_parent", None)
    monkeypatch.setattr(device, "_early_start", None)
    monkeypatch.delenv(device.INIT_CUDA_PID_ENV, raising=False)
    monkeypatch.delenv(device.INIT_CUDA_ENV, raising=False)
    return driver


def error_in_forked_child(driver: FakeDriver) -> str:
    """Fork; in the child, the driver fails as it does after a fork and `ensure_context` is
    called: return the child's error message ("" if it raised none)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's teardown
        try:
            os.close(read)
            driver.status = 3
            try:
                device.ensure_context(0)
                text = ""
            except DeviceError as e:
                text = str(e)
            os.write(write, text.encode() or b"-")
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        text = f.read().decode()
    os.waitpid(pid, 0)
    return "" if text == "-" else text


def test_a_child_forked_after_gpu_runtime_started_cuda_is_told_why_and_what_to_do(fake) -> None:
    assert device.ensure_context(0) == 0  # CUDA started in this (the parent) process
    text = error_in_forked_child(fake)
    assert "CUDA_ERROR_NOT_INITIALIZED (3)" in text
    assert f"forked from process {os.getpid()}" in text
    assert "'spawn'" in text and "init_cuda_at_start=False" in text
    assert "Is the NVIDIA driver installed" not in text  # the cause is known: no guessing


def test_a_child_forked_after_the_launcher_started_cuda_is_told_too(fake, monkeypatch) -> None:
    monkeypatch.setenv(device.INIT_CUDA_PID_ENV, str(os.getpid()))  # as the launcher sets
    text = error_in_forked_child(fake)  # gpu_runtime itself had not touched CUDA here
    assert f"forked from process {os.getpid()}" in text and "GPU_BUNDLE_INIT_CUDA=0" in text


def test_a_child_forked_before_cuda_started_gets_the_plain_error(fake) -> None:
    text = error_in_forked_child(fake)
    assert "CUDA_ERROR_NOT_INITIALIZED (3)" in text and "forked" not in text
    assert "Is the NVIDIA driver installed" in text


def test_the_launchers_pid_names_the_parent_when_gpu_runtime_was_not_imported_there(
    fake, monkeypatch
) -> None:
    # No at-fork hook ran (gpu_runtime was first imported in the child): the variable the
    # launcher set in the parent, equal to our parent's pid, is the evidence.
    monkeypatch.setenv(device.INIT_CUDA_PID_ENV, str(os.getppid()))
    assert f"forked from process {os.getppid()}" in device._fork_hint(3)
    assert device._fork_hint(201) == ""  # only CUDA_ERROR_NOT_INITIALIZED means that
    monkeypatch.setenv(device.INIT_CUDA_PID_ENV, str(os.getpid() + 1 + os.getppid()))
    assert device._fork_hint(3) == ""  # another process's launcher: not our cause


def test_the_early_start_runs_once_in_a_thread_and_a_forked_child_is_told(
    fake, monkeypatch
) -> None:
    """`start_cuda_in_background` (what the first GPU name of the package calls): the driver is
    started off the caller's thread, once; a child forked after it is told why."""
    started = []
    monkeypatch.setattr(
        device, "_start_driver", lambda: started.append(device.threading.current_thread().name)
    )
    device.start_cuda_in_background()
    thread = device._early_start
    assert thread is not None
    thread.join(10)
    assert started == ["gpu_runtime: CUDA start"]
    device.start_cuda_in_background()
    assert started == ["gpu_runtime: CUDA start"]
    assert device._early_start is thread  # not a second time
    text = error_in_forked_child(fake)
    assert f"forked from process {os.getpid()}" in text and "GPU_BUNDLE_INIT_CUDA=0" in text


@pytest.mark.parametrize("why", ["switched off", "the launcher started it"])
def test_no_early_start_when_switched_off_or_the_launcher_did(fake, monkeypatch, why) -> None:
    if why == "switched off":
        monkeypatch.setenv(device.INIT_CUDA_ENV, "0")
    else:
        monkeypatch.setenv(device.INIT_CUDA_PID_ENV, str(os.getpid()))
    monkeypatch.setattr(device, "_start_driver", lambda: pytest.fail("started"))
    device.start_cuda_in_background()
    assert device._early_start is None


def test_the_first_gpu_name_of_the_package_starts_cuda_and_an_error_class_does_not(
    monkeypatch,
) -> None:
    import gpu_runtime

    calls = []
    monkeypatch.setattr(device, "start_cuda_in_background", lambda: calls.append(1))
    for name in ("DeviceArray", "GpuRuntimeError", "open_cache"):
        monkeypatch.delitem(gpu_runtime.__dict__, name, raising=False)  # as before first use
    assert gpu_runtime.GpuRuntimeError.__name__ == "GpuRuntimeError" and calls == []
    assert gpu_runtime.DeviceArray.__name__ == "DeviceArray" and calls == [1]
    assert gpu_runtime.open_cache.__name__ == "open_cache" and calls == [1, 1]


class _FakeLibcuda:
    """libcuda.so.1 as ctypes loads it: each entry point records its call, returns `status`."""

    def __init__(self, failing: str = "") -> None:
        self.calls: list = []
        self.failing = failing

    def __getattr__(self, name: str):
        def call(*_args) -> int:
            self.calls.append(name)
            return 100 if name == self.failing else 0  # 100: CUDA_ERROR_NO_DEVICE

        return call


@pytest.mark.parametrize(
    "failing, want",
    [
        ("", ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain"]),
        ("cuInit", ["cuInit"]),  # no device: nothing after it, no error here
        ("cuDeviceGet", ["cuInit", "cuDeviceGet"]),
    ],
)
def test_the_early_start_stops_at_the_first_failure(fake, monkeypatch, failing, want) -> None:
    import ctypes

    lib = _FakeLibcuda(failing)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib if name == "libcuda.so.1" else None)
    device._start_driver()
    assert lib.calls == want


def test_the_early_start_without_a_driver_leaves_the_error_to_the_first_use(
    fake, monkeypatch
) -> None:
    """No libcuda (CI, a machine without a GPU): the thread ends quietly; the error is the
    first use's, with its cause and fix."""
    import ctypes

    def no_library(name: str):
        raise OSError("libcuda.so.1: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    device._start_driver()  # an OSError escaping would fail here


def test_a_fork_waits_for_a_cuda_start_in_flight(fake, monkeypatch) -> None:
    """Forked while the start thread is inside cuInit, the child would inherit the driver's
    locks held by a thread it does not have and hang on its first CUDA call: the at-fork hook
    lets the start finish first."""
    import time

    done = []

    def slow_start() -> None:
        time.sleep(0.5)
        done.append(True)

    monkeypatch.setattr(device, "_start_driver", slow_start)
    device.start_cuda_in_background()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, b"finished" if done else b"in flight")
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        seen = f.read()
    os.waitpid(pid, 0)
    assert seen == b"finished"
