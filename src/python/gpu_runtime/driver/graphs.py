"""CUDA graphs of gpu_runtime launches: capture a stream's work once, replay it cheaply.

    stream = cache.create_stream()
    with gpu_runtime.capture(stream) as graph:        # or cache.capture(stream)
        blur.launch(grid, block, src, dst, stream=stream)
        sobel.launch(grid, block, dst, edges, w, h, w, stream=stream)
    graph.launch()           # replays every captured launch on `stream` (asynchronous)
    stream.synchronize()

Kernel launches in the block are recorded, not run (the driver copies each launch's
parameters into the graph, so the arrays' pointers are fixed and their contents are read at
replay time). The stream must be a created one: the legacy default stream cannot be captured.
Capture is thread-local: a synchronous call on this thread inside the block (a `to_numpy`)
fails, other threads are unaffected.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator, Optional

from gpu_runtime.errors import DeviceError

if TYPE_CHECKING:  # typing only: the runtime imports no more than it uses
    from gpu_runtime.driver.backend import Backend


class Graph:
    """An instantiated graph; usable once its `capture` block has ended."""

    def __init__(self, backend: Backend, stream: int) -> None:
        self._backend = backend
        self._stream = stream
        self._graph: Any = None
        self._exec: Any = None

    def _set(self, graph: Any, graph_exec: Any) -> None:
        self._graph, self._exec = graph, graph_exec

    @property
    def ready(self) -> bool:
        return self._exec is not None

    def launch(self, stream: Any = None) -> None:
        """Replay on `stream` (default: the stream it was captured on); asynchronous."""
        if self._exec is None:
            raise DeviceError(
                "the graph is not ready: launch it after its `with capture(...)` block has ended"
            )
        handle = self._stream if stream is None else self._backend.stream_handle(stream)
        self._backend.graph_launch(self._exec, handle)

    replay = launch

    def close(self) -> None:
        """Destroy the graph now (it must not be running)."""
        if self._graph is not None or self._exec is not None:
            graph, graph_exec, self._graph, self._exec = self._graph, self._exec, None, None
            self._backend.destroy_graph(graph, graph_exec)

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def capture(stream: Any, backend: Optional[Any] = None) -> Iterator[Graph]:
    """Capture the work queued on `stream` inside the block into a `Graph` (see above)."""
    if backend is None:
        from gpu_runtime.driver.device import CudaBackend

        backend = CudaBackend()
    handle = backend.stream_handle(stream)
    if not handle:
        raise DeviceError(
            "capture needs a created stream, not the legacy default stream (None or 0): "
            "use cache.create_stream() or a cuda.core/CuPy stream"
        )
    backend.begin_capture(handle)
    graph = Graph(backend, handle)
    try:
        yield graph
    except BaseException:
        try:
            raw = backend.end_capture(handle)
            backend.destroy_graph(raw, None)
        except Exception:  # the capture was already invalidated: the first error matters
            pass
        raise
    raw = backend.end_capture(handle)
    try:
        graph._set(raw, backend.instantiate(raw))
    except BaseException:
        backend.destroy_graph(raw, None)
        raise
