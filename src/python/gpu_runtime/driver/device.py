"""The only module that talks to CUDA, through cuda.bindings' driver API, imported lazily.

`CudaBackend` is what `KernelCache` uses to query the device, load code and launch; tests
substitute a fake with the same methods, so everything above it runs without a GPU.

Why the driver API and not cuda.core: importing cuda.core costs more than the rest of a first
launch (it pulls in its Cython modules, NVRTC and nvJitLink bindings and cuda.pathfinder), and
its generic `launch` converts every argument on every call. A launch here is one
`cuLaunchKernel` on a parameter buffer packed in place (`gpu_runtime.launch.plan`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gpu_runtime.driver.streams import Stream, stream_handle
from gpu_runtime.errors import DeviceError
from gpu_spec.launcher_env import INIT_CUDA_ENV, INIT_CUDA_PID_ENV, INIT_CUDA_THREAD


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    capability: Tuple[int, int]
    driver_version: Tuple[int, int]  # CUDA version the driver supports (cuDriverGetVersion)

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def describe(self) -> str:
        return (
            f"{self.name} ({self.sm}), driver supports CUDA "
            f"{self.driver_version[0]}.{self.driver_version[1]}"
        )


def driver_api():
    """`cuda.bindings.driver`, imported on first use (cuda-bindings 12.9 and 13.x have it)."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise DeviceError(
            f"cuda.bindings is not importable ({e}); the device app needs cuda-bindings in its PEX"
        ) from e
    return driver


def check(result: Any, what: str) -> Any:
    """Unwrap a cuda.bindings (err, value...) tuple, raising DeviceError on failure."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        raise DeviceError(f"{what} failed: {error_name(err)} ({int(err)}){_fork_hint(err)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def error_name(err: Any) -> str:
    try:
        _, name = driver_api().cuGetErrorName(err)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # pragma: no cover - best effort
        return str(err)


def driver_version() -> Tuple[int, int]:
    """(major, minor) CUDA version the installed driver supports, from cuDriverGetVersion."""
    try:
        result = driver_api().cuDriverGetVersion()
    except DeviceError:
        raise
    except Exception as e:  # e.g. libcuda.so.1 missing
        raise DeviceError(f"cannot query the CUDA driver version: {type(e).__name__}: {e}") from e
    v = check(result, "cuDriverGetVersion")
    return (int(v) // 1000, (int(v) % 1000) // 10)


def _nul_terminated(data: bytes) -> bytes:
    return data if data.endswith(b"\0") else data + b"\0"


def _link_failure(what: str, err: Any, log: bytearray) -> str:
    text = bytes(log).split(b"\0", 1)[0].decode(errors="replace").strip()
    return f"{what} failed: {error_name(err)} ({int(err)})" + (f": {text}" if text else "")


_NOT_INITIALIZED = 3  # CUDA_ERROR_NOT_INITIALIZED: what CUDA answers in a child forked after it
_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT
_MAX_STREAMS = 64  # CUstream objects launch_raw keeps; more: it starts over
_ctx_lock = threading.Lock()
_primary: Dict[int, Any] = {}  # ordinal -> retained primary context (kept for the process)
_current = threading.local()


def _cuda_started_here() -> bool:
    """Whether CUDA was started in this process: by gpu_runtime, or by the bundle's launcher."""
    return (
        bool(_primary)
        or _early_start is not None
        or os.environ.get(INIT_CUDA_PID_ENV) == str(os.getpid())
    )


_fork_parent: Optional[int] = None  # in a child forked after CUDA started: the parent's pid
_parent_at_fork: Optional[int] = None


# The threads that start CUDA ahead of the app: gpu_runtime's (`start_cuda_in_background`) and
# the bundle launcher's.
_EARLY_START_THREAD = "gpu_runtime: CUDA start"
_STARTER_THREADS = (_EARLY_START_THREAD, INIT_CUDA_THREAD)


def _before_fork() -> None:
    """Lets a CUDA start in flight finish first: forked while another thread is inside cuInit,
    the child would inherit the driver's locks held by a thread it does not have, and its own
    first CUDA call would hang instead of failing with the fork hint."""
    global _parent_at_fork
    for thread in threading.enumerate():
        if thread.name in _STARTER_THREADS and thread is not threading.current_thread():
            thread.join(60)
    _parent_at_fork = os.getpid() if _cuda_started_here() else None


def _after_fork_in_child() -> None:
    """The parent's contexts mean nothing here: forget them (the next use calls cuInit, which
    fails, with `_fork_hint` saying why), and remember whose child this is."""
    global _fork_parent, _current, _early_start
    if _parent_at_fork is not None:
        _fork_parent = _parent_at_fork
    _primary.clear()
    _current = threading.local()
    _early_start = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _fork_hint(err: Any) -> str:
    """Why CUDA answers CUDA_ERROR_NOT_INITIALIZED in a forked child, and what to do instead."""
    if int(err) != _NOT_INITIALIZED:
        return ""
    parent = _fork_parent
    started = os.environ.get(INIT_CUDA_PID_ENV)
    if parent is None and started and started == str(os.getppid()):
        parent = int(started)  # gpu_runtime was not imported there; the launcher started CUDA
    if parent is None:
        return ""
    return (
        f". This process was forked from process {parent}, which had started CUDA (gpu_runtime "
        f"used the GPU there, JIT mode's open_cache() started it, or the bundle's launcher did "
        f"at start-up), and a forked child cannot use CUDA. Start processes that use the GPU "
        f"with multiprocessing's 'spawn' or 'forkserver' method, or fork before CUDA starts: "
        f"GPU_BUNDLE_INIT_CUDA=0 (for a bundle also `deploy_bundle(init_cuda_at_start=False)`)"
    )


def _choose_ordinal(drv: Any, ordinal: Optional[int]) -> int:
    """`ordinal`, else the device of the context current on this thread, else 0 (as cuda.core's
    `Device()` picks)."""
    if ordinal is not None:
        return int(ordinal)
    ctx = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is not None and int(ctx) != 0:
        return int(check(drv.cuCtxGetDevice(), "cuCtxGetDevice"))
    return 0


def ensure_context(ordinal: Optional[int] = None) -> int:
    """Make the primary context of device `ordinal` current on this thread; return the ordinal.

    Per thread, the first call initialises the driver and retains the primary context (once per
    process); later calls are a dictionary lookup.
    """
    key = -1 if ordinal is None else int(ordinal)
    done = getattr(_current, "devices", None)
    if done is None:
        done = _current.devices = {}
    found = done.get(key)
    if found is not None:
        return found
    drv = driver_api()
    try:
        check(drv.cuInit(0), "cuInit")
        chosen = _choose_ordinal(drv, ordinal)
        with _ctx_lock:
            ctx = _primary.get(chosen)
            if ctx is None:
                dev = check(drv.cuDeviceGet(chosen), f"cuDeviceGet({chosen})")
                ctx = _primary[chosen] = check(
                    drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain"
                )
        check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    except Exception as e:
        if isinstance(e, DeviceError) and "forked from process" in str(e):
            raise  # _fork_hint said the cause and the fix; "is a GPU visible?" would mislead
        if "libcuda" in str(e):  # cuda.bindings could not dlopen the driver library
            raise DeviceError(
                f"no CUDA driver: libcuda.so.1 cannot be loaded ({e}). This machine has no "
                f"NVIDIA driver (or it is not on the loader path): run on a machine with a GPU"
            ) from e
        raise DeviceError(
            f"no usable CUDA device (device {ordinal if ordinal is not None else 0}): "
            f"{type(e).__name__}: {e}. Is the NVIDIA driver installed and a GPU visible "
            f"(nvidia-smi, CUDA_VISIBLE_DEVICES)?"
        ) from e
    done[key] = chosen
    return chosen


_early_start: Optional[threading.Thread] = None


def cuda_start_wanted() -> bool:
    """Whether gpu_runtime may start CUDA before the first kernel: unless $GPU_BUNDLE_INIT_CUDA
    is 0 (the bundle launcher's switch, for the same trade)."""
    return os.environ.get(INIT_CUDA_ENV, "1").strip() != "0"


def start_cuda_in_background() -> None:
    """Starts CUDA (cuInit, device 0's primary context, as a bundle's launcher does) in a
    thread, once per process, unless $GPU_BUNDLE_INIT_CUDA is 0 or the launcher already did.

    Why: the driver's start (the GIL released) then overlaps the app's
    imports and its first lookups instead of following them; it is what the bundle's launcher
    does at process start, here for an app run without one (JIT mode: `pants run`, tests, a
    notebook). gpu_runtime calls it when the app first reaches for its GPU API (`open_cache`,
    `DeviceArray`, ...: the package's lazy names). A failure is ignored: the first use meets
    it again and reports it. The trade is the launcher's: a child forked before the first
    kernel cannot use CUDA (`_fork_hint` says so and names the switch)."""
    global _early_start
    if _early_start is not None or _primary or not cuda_start_wanted():
        return
    if os.environ.get(INIT_CUDA_PID_ENV) == str(os.getpid()):
        return  # the launcher's thread is at it

    _early_start = threading.Thread(target=_start_driver, name=_EARLY_START_THREAD, daemon=True)
    _early_start.start()


def _start_driver() -> None:
    """cuInit and device 0's primary context through ctypes: the thread then needs the GIL for
    almost nothing, while importing cuda.bindings' driver module (tens of ms of Python) would
    compete with the app's imports on the main thread. The process's one libcuda holds what
    this starts; gpu_runtime's own calls through cuda.bindings find it done (the primary
    context retained once more, never released, like the launcher's)."""
    try:
        import ctypes

        cuda = ctypes.CDLL("libcuda.so.1")
        if cuda.cuInit(0) != 0:
            return
        dev = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0:
            return
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctypes.c_void_p()), dev)
    except Exception:  # no driver, no GPU: reported by the first use
        pass


class CudaBackend:
    """Driver-API device access: one device, its primary context, current on each thread."""

    def __init__(self, ordinal: Optional[int] = None) -> None:
        self._ordinal = ordinal
        self._info: Optional[DeviceInfo] = None
        self._lock = threading.Lock()
        self._drv: Any = None
        self._ok: Any = None
        self._cu_launch: Any = None  # drv.cuLaunchKernel, bound on the first launch
        self._streams: Dict[int, Any] = {}  # raw handle -> CUstream (see launch_raw)

    def _driver(self) -> Any:
        if self._drv is None:
            drv = driver_api()
            self._ok = drv.CUresult.CUDA_SUCCESS
            self._drv = drv
        return self._drv

    # -- device -----------------------------------------------------------------------------
    def device(self) -> int:
        """The device ordinal, its primary context made current on the calling thread."""
        ordinal = ensure_context(self._ordinal)
        if self._ordinal is None:  # other threads must use the same device
            self._ordinal = ordinal
        return ordinal

    def device_info(self) -> DeviceInfo:
        if self._info is None:
            with self._lock:
                if self._info is None:
                    self._info = self._query_info()
        return self._info

    def _query_info(self) -> DeviceInfo:
        ordinal = self.device()
        drv = self._driver()
        dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = drv.CUdevice_attribute
        major = check(
            drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
            "cuDeviceGetAttribute",
        )
        minor = check(
            drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
            "cuDeviceGetAttribute",
        )
        raw = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
        return DeviceInfo(
            ordinal=ordinal,
            name=name,
            capability=(int(major), int(minor)),
            driver_version=driver_version(),
        )

    # -- code -------------------------------------------------------------------------------
    def load(self, kind: str, data: bytes, name: str) -> Any:
        """cuModuleLoadData of a cubin, or of PTX (JIT-compiled by the driver; NUL-terminated)."""
        self.device()
        if kind == "ptx" and not data.endswith(b"\0"):
            data = data + b"\0"
        return check(self._driver().cuModuleLoadData(data), f"cuModuleLoadData({name})")

    def load_linked(self, ptx: bytes, inputs: List[Tuple[str, bytes, str]], name: str) -> Any:
        """PTX linked by the driver (cuLinkCreate, cuLinkAddData, cuLinkComplete) with `inputs`,
        (CUjitInputType name, bytes, path) each, e.g. libcudadevrt.a and PTX of CUDA C++
        parts; the linked cubin is loaded with cuModuleLoadData. No compiler: the driver JITs."""
        import ctypes

        self.device()
        drv = self._driver()
        size = 1 << 16
        info, error = bytearray(size), bytearray(size)
        opt = drv.CUjit_option
        keys = [
            opt.CU_JIT_INFO_LOG_BUFFER,
            opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            opt.CU_JIT_ERROR_LOG_BUFFER,
            opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ]
        state = check(drv.cuLinkCreate(len(keys), keys, [info, size, error, size]), "cuLinkCreate")
        try:
            parts = [("CU_JIT_INPUT_PTX", _nul_terminated(ptx), f"{name}.ptx")] + [
                (k, _nul_terminated(d) if k == "CU_JIT_INPUT_PTX" else d, p) for k, d, p in inputs
            ]
            for kind, data, path in parts:
                err = drv.cuLinkAddData(
                    state,
                    getattr(drv.CUjitInputType, kind),
                    data,
                    len(data),
                    path.encode(),
                    0,
                    None,
                    None,
                )[0]
                if int(err) != 0:
                    raise DeviceError(_link_failure(f"cuLinkAddData({path})", err, error))
            err, cubin_ptr, cubin_size = drv.cuLinkComplete(state)
            if int(err) != 0:
                raise DeviceError(_link_failure(f"cuLinkComplete({name})", err, error))
            cubin = ctypes.string_at(int(cubin_ptr), int(cubin_size))  # freed with the state
        finally:
            drv.cuLinkDestroy(state)
        return check(drv.cuModuleLoadData(cubin), f"cuModuleLoadData({name}, linked)")

    def get_function(self, module: Any, entry: str) -> Any:
        self.device()
        return check(
            self._driver().cuModuleGetFunction(module, entry.encode()),
            f"cuModuleGetFunction({entry})",
        )

    def param_info(self, func: Any) -> Optional[List[Tuple[int, int]]]:
        """[(offset, size)] of the kernel's parameters as the driver sees them.

        None where the driver cannot tell (cuFuncGetParamInfo needs a CUDA 12.4+ driver).
        """
        drv = self._driver()
        out: List[Tuple[int, int]] = []
        try:
            for i in range(4096):
                err, offset, size = drv.cuFuncGetParamInfo(func, i)
                if int(err) != 0:  # past the last parameter, or a driver that cannot tell
                    past_end = int(err) == int(drv.CUresult.CUDA_ERROR_INVALID_VALUE)
                    return out if past_end else None
                out.append((int(offset), int(size)))
        except Exception:
            return None
        return out

    # -- launch -----------------------------------------------------------------------------
    def stream_handle(self, stream: Any) -> int:
        """The raw CUstream of `stream` (see `gpu_runtime.driver.streams.stream_handle`)."""
        return stream_handle(stream)

    def create_stream(self) -> Stream:
        """A new non-blocking stream on this device."""
        self.device()
        return Stream()

    def launch_function(self) -> Tuple[Any, Any, Any]:
        """(cuLaunchKernel, its success status, `cu_stream`): what a launch plan's `fire` calls
        directly, with `cu_stream`'s stream object. An error status it returns is handled by
        launching again through `launch_raw`, which retries without a context and raises."""
        self._driver()
        self.device()
        return self._drv.cuLaunchKernel, self._ok, self.cu_stream

    def cu_stream(self, stream: Any) -> Any:
        """The stream as cuda.bindings takes it fastest: None for the legacy default stream,
        else a `CUstream` remembered per handle."""
        handle = stream_handle(stream)
        if not handle:
            return None
        found = self._streams.get(handle)
        return found if found is not None else self._stream_object(handle)

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
        stream: int,
        params: Any,
    ) -> None:
        """One cuLaunchKernel with the prepacked `void**` at `params.address` (the driver copies
        the parameters before it returns, so the buffer may be reused right after).

        The legacy default stream goes to cuda.bindings as None and other handles as a cached
        `CUstream`: given a plain int it would build a `CUstream` on every call."""
        launch = self._cu_launch
        if launch is None:
            self._driver()
            self.device()
            launch = self._cu_launch = self._drv.cuLaunchKernel
        hstream = self._streams.get(stream) if stream else None
        if hstream is None and stream:
            hstream = self._stream_object(stream)
        (err,) = launch(func, gx, gy, gz, bx, by, bz, shared_mem, hstream, params.address, 0)
        if err is not self._ok and int(err) == _INVALID_CONTEXT:
            # A thread's first launch: no context current on it yet (loading happened on
            # another thread). Make it current and launch again, rather than asking every time.
            self.device()
            (err,) = launch(func, gx, gy, gz, bx, by, bz, shared_mem, hstream, params.address, 0)
        if err is not self._ok:
            check((err,), "cuLaunchKernel")

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
        stream: int,
        params: Any,
    ) -> None:
        """cuLaunchCooperativeKernel (grid sync); the caller has checked the grid fits."""
        drv = self._driver()
        self.device()
        hstream = self.cu_stream(stream)
        check(
            drv.cuLaunchCooperativeKernel(
                func, gx, gy, gz, bx, by, bz, shared_mem, hstream, params.address
            ),
            "cuLaunchCooperativeKernel",
        )

    # -- occupancy (gpu_runtime.launch.occupancy) -----------------------------------------------
    def max_active_blocks_per_sm(self, func: Any, block_threads: int, shared_mem: int) -> int:
        self.device()
        return int(
            check(
                self._driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    func, block_threads, shared_mem
                ),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )
        )

    def multiprocessor_count(self) -> int:
        drv = self._driver()
        dev = check(drv.cuDeviceGet(self.device()), "cuDeviceGet")
        attr = drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        return int(check(drv.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute"))

    def max_potential_block_size(self, func: Any, shared_mem: int, limit: int) -> int:
        """The block size of cuOccupancyMaxPotentialBlockSize (fixed dynamic shared memory)."""
        self.device()
        _, block = check(
            self._driver().cuOccupancyMaxPotentialBlockSize(func, None, shared_mem, limit),
            "cuOccupancyMaxPotentialBlockSize",
        )
        return int(block)

    def _stream_object(self, handle: int) -> Any:
        """cuda.bindings' `CUstream` of a raw handle, remembered (a few streams per process)."""
        obj = self._drv.CUstream(handle)
        if len(self._streams) >= _MAX_STREAMS:
            self._streams.clear()
        self._streams[handle] = obj
        return obj

    def synchronize(self) -> None:
        self.device()
        check(self._driver().cuCtxSynchronize(), "cuCtxSynchronize")

    # -- graphs -----------------------------------------------------------------------------
    def begin_capture(self, stream: int) -> None:
        """Start capturing `stream` (thread-local mode: only this thread's unsafe calls, e.g. a
        synchronous copy, are refused while it captures)."""
        self.device()
        drv = self._driver()
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(drv.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")

    def end_capture(self, stream: int) -> Any:
        return check(self._driver().cuStreamEndCapture(stream), "cuStreamEndCapture")

    def instantiate(self, graph: Any) -> Any:
        return check(self._driver().cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def graph_launch(self, graph_exec: Any, stream: int) -> None:
        check(self._driver().cuGraphLaunch(graph_exec, stream), "cuGraphLaunch")

    def destroy_graph(self, graph: Any, graph_exec: Any) -> None:
        drv = self._driver()
        if graph_exec is not None:
            check(drv.cuGraphExecDestroy(graph_exec), "cuGraphExecDestroy")
        if graph is not None:
            check(drv.cuGraphDestroy(graph), "cuGraphDestroy")
