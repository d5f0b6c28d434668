"""`Backend`: everything the runtime asks of a device, as one Protocol.

Why a Protocol: the kernel cache, its kernels, launch plans, occupancy and graphs all reach the
device through one object, and tests and dry runs substitute their own (`FakeBackend` in
gpu_runtime's conftest, `selftest.inputs.DryBackend`). Each implements every method here, so no
caller asks whether one exists; a backend that cannot answer says so in the value it returns
(`param_info` and `launch_function` return None).
"""

from __future__ import annotations

from typing import Any, List, Optional, Protocol, Tuple

from gpu_runtime.driver.device import DeviceInfo


class Backend(Protocol):
    """One device: its description, loading code, launching, occupancy, graphs."""

    def device_info(self) -> DeviceInfo:
        """The device's name, capability and the CUDA version its driver supports."""

    def load(self, kind: str, data: bytes, name: str) -> Any:
        """A loaded module of `kind` "cubin" or "ptx"."""

    def load_linked(self, ptx: bytes, inputs: List[Tuple[str, bytes, str]], name: str) -> Any:
        """A module the driver links from `ptx` and `inputs` (CUjitInputType name, bytes,
        path)."""

    def get_function(self, module: Any, entry: str) -> Any:
        """The function of `entry` in a loaded module."""

    def param_info(self, func: Any) -> Optional[List[Tuple[int, int]]]:
        """[(offset, size)] of the function's parameters; None where the driver cannot tell."""

    def stream_handle(self, stream: Any) -> Any:
        """The raw handle of a stream object (0: the legacy default stream)."""

    def create_stream(self) -> Any:
        """A new stream on this device."""

    def launch_function(self) -> Optional[Tuple[Any, Any, Any]]:
        """(the bare cuLaunchKernel, its success status, the stream reader) that a launch
        plan's generated entry calls directly; None keeps every launch on `launch_raw`."""

    def launch_raw(
        self,
        func: Any,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared_mem: int,
        stream: Any,
        params: Any,
    ) -> None:
        """One launch with the packed `void**` at `params.address`; raises on an error."""

    def launch_cooperative_raw(
        self,
        func: Any,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared_mem: int,
        stream: Any,
        params: Any,
    ) -> None:
        """One cooperative launch (cuLaunchCooperativeKernel)."""

    def max_active_blocks_per_sm(self, func: Any, block_threads: int, shared_mem: int) -> int:
        """The occupancy calculator's blocks per multiprocessor."""

    def multiprocessor_count(self) -> int:
        """The device's multiprocessors."""

    def max_potential_block_size(self, func: Any, shared_mem: int, limit: int) -> int:
        """The block size the occupancy calculator suggests."""

    def synchronize(self) -> None:
        """Waits for the device's work."""

    def begin_capture(self, stream: Any) -> None:
        """Starts capturing `stream`'s work into a graph."""

    def end_capture(self, stream: Any) -> Any:
        """The graph captured since `begin_capture`."""

    def instantiate(self, graph: Any) -> Any:
        """An executable graph."""

    def graph_launch(self, graph_exec: Any, stream: Any) -> None:
        """Launches an executable graph on `stream`."""

    def destroy_graph(self, graph: Any, graph_exec: Any) -> None:
        """Frees a graph and its executable."""
