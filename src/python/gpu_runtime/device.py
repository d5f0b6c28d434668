"""The only module that talks to CUDA (through cuda.core and cuda.bindings), imported lazily.

`CudaBackend` is what `KernelCache` uses to query the device, load code and launch; tests
substitute a fake with the same methods, so everything above it runs without a GPU.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpu_runtime.errors import DeviceError


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


def cuda_core():
    """The `cuda.core` module, imported on first use (cuda-core >= 1.2: names at its top level).

    Lazy so that opening a cache, and everything the tests run through a fake backend, needs no
    CUDA installation.
    """
    try:
        import cuda.core as core
    except ImportError as e:
        raise DeviceError(
            f"cuda.core is not importable ({e}); the device app needs cuda-core and "
            f"cuda-bindings in its PEX"
        ) from e
    return core


def driver_api():
    """`cuda.bindings.driver`, imported on first use (cuda-bindings 12.9 and 13.x have it)."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise DeviceError(f"cuda.bindings is not importable: {e}") from e
    return driver


def check(result: Any, what: str) -> Any:
    """Unwrap a cuda.bindings (err, value...) tuple, raising DeviceError on failure."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        driver = driver_api()
        try:
            _, name = driver.cuGetErrorName(err)
            name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # pragma: no cover - best effort
            name = str(err)
        raise DeviceError(f"{what} failed: {name} ({int(err)})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


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


class CudaBackend:
    """cuda.core-based device access: one device, its primary context, current on each thread."""

    def __init__(self, ordinal: Optional[int] = None) -> None:
        self._ordinal = ordinal
        self._local = threading.local()
        self._info: Optional[DeviceInfo] = None
        self._lock = threading.Lock()
        self._configs: Dict[Any, Any] = {}

    # -- device -----------------------------------------------------------------------------
    def device(self):
        """The cuda.core Device, made current on the calling thread."""
        dev = getattr(self._local, "device", None)
        if dev is None:
            core = cuda_core()
            try:
                dev = core.Device(self._ordinal)
                dev.set_current()
            except DeviceError:
                raise
            except Exception as e:
                ordinal = self._ordinal if self._ordinal is not None else 0
                raise DeviceError(
                    f"no usable CUDA device (device {ordinal}):"
                    f" {type(e).__name__}: {e}. Is the NVIDIA driver installed and a GPU visible "
                    f"(nvidia-smi, CUDA_VISIBLE_DEVICES)?"
                ) from e
            if self._ordinal is None:  # other threads must use the same device
                self._ordinal = int(dev.device_id)
            self._local.device = dev
        return dev

    def device_info(self) -> DeviceInfo:
        if self._info is None:
            with self._lock:
                if self._info is None:
                    dev = self.device()
                    cc = dev.compute_capability
                    self._info = DeviceInfo(
                        ordinal=int(dev.device_id),
                        name=str(dev.name),
                        capability=(int(cc[0]), int(cc[1])),
                        driver_version=driver_version(),
                    )
        return self._info

    # -- code -------------------------------------------------------------------------------
    def load(self, kind: str, data: bytes, name: str) -> Any:
        self.device()
        core = cuda_core()
        factory = core.ObjectCode.from_cubin if kind == "cubin" else core.ObjectCode.from_ptx
        return factory(data, name=name)

    def get_function(self, obj: Any, entry: str) -> Any:
        self.device()
        return obj.get_kernel(entry)  # loads the library (and JITs PTX) on first use

    def param_info(self, func: Any) -> Optional[List[Tuple[int, int]]]:
        """[(offset, size)] of the kernel's parameters as the driver sees them.

        None where the driver cannot tell (cuFuncGetParamInfo needs a CUDA 12.4+ driver).
        """
        try:
            infos = list(func.arguments_info)
        except Exception:
            return None
        return [(int(p.offset), int(p.size)) for p in infos]

    # -- launch -----------------------------------------------------------------------------
    def stream(self, stream: Any) -> Any:
        core = cuda_core()
        dev = self.device()
        if stream is None:
            return dev.default_stream
        if isinstance(stream, core.Stream):
            return stream
        if hasattr(stream, "__cuda_stream__"):
            handle = stream.__cuda_stream__()[1]
        elif isinstance(stream, int):
            handle = stream
        else:
            handle = getattr(stream, "handle", None)
            if handle is None:
                handle = getattr(stream, "ptr", None)
            if handle is None:
                raise DeviceError(
                    f"cannot use {type(stream).__name__} as a CUDA stream (expected a "
                    f"cuda.core Stream, an object with __cuda_stream__, or a handle)"
                )
            handle = int(getattr(handle, "value", handle) or 0)
        if int(handle) == 0:
            return dev.default_stream
        return core.Stream.from_handle(int(handle))

    def launch(
        self, func: Any, grid: Any, block: Any, stream: Any, shared_mem: int, args: Sequence[Any]
    ) -> None:
        core = cuda_core()
        s = self.stream(stream)
        key: Optional[Tuple[Any, Any, int]] = (grid, block, shared_mem)
        try:
            config = self._configs.get(key)
        except TypeError:  # an unhashable grid or block (a list): build it every time
            key, config = None, None
        if config is None:
            config = core.LaunchConfig(grid=grid, block=block, shmem_size=int(shared_mem or 0))
            if key is not None and len(self._configs) < 256:
                # LaunchConfig validates its shape on construction: reuse it across launches.
                self._configs[key] = config
        core.launch(s, config, func, *args)

    def synchronize(self) -> None:
        self.device().sync()
