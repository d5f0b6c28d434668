"""`Kernel`: one kernel name of one library, dispatching over its signatures and launching.

A launch first tries the plan of the kernel's previous launch: its `repack`, generated for
that pattern (`gpu_runtime.launch.repack`), checks each argument's pattern as it reads it and
writes the values into a reused per-thread buffer with one `struct.pack_into`; then one
`cuLaunchKernel`. Another pattern goes through its key to its plan (`gpu_runtime.launch.plan`);
the first launch of a pattern runs every check and builds that plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from gpu_runtime.errors import DispatchError, KernelNotFoundError
from gpu_runtime.launch import abi
from gpu_runtime.launch.dims import launch_dims
from gpu_runtime.launch.occupancy import check_cooperative_grid, cooperative_limit, forall_config
from gpu_runtime.launch.param_buffer import ParamBuffer
from gpu_runtime.launch.plan import LaunchPlan, build_plan, no_fire, pattern_key
from gpu_spec.manifest.model import KernelSpec, Library, ModuleSpec

if TYPE_CHECKING:  # runtime imports this module
    from gpu_runtime.driver.backend import Backend
    from gpu_runtime.runtime import KernelCache


class Kernel:
    """One kernel name of one library; dispatches over its signatures.

    `kernel.launch(grid, block, *args, stream=None, shared_mem=0)` or numba style
    `kernel[grid, block](*args)` / `kernel[grid, block, stream, shared_mem](*args)`.
    """

    def __init__(self, cache: "KernelCache", library: Library, name: str) -> None:
        self._cache = cache
        self._library = library
        self.name = name
        self._overloads: Optional[List[Tuple[ModuleSpec, KernelSpec]]] = None
        self._plans: Dict[Any, LaunchPlan] = {}
        self._dims: Dict[Any, Tuple[int, ...]] = {}
        self._last: Any = _NO_PLAN
        self._fire: Any = no_fire  # the last plan's repack and launch in one call
        self._cu: Any = None  # the backend's bare cuLaunchKernel, False if it has none
        self._ok: Any = _NO_PLAN  # its success status, once known (never a fire's None)
        self._cu_stream: Any = _no_stream
        self._last_dims: Tuple[Any, Any, Tuple[int, ...]] = (None, None, ())
        self._last_config: Tuple[Any, Any] = (None, None)
        self._occupancy: Dict[Tuple[Any, ...], Any] = {}  # see gpu_runtime.launch.occupancy
        backend = cache.backend
        self._backend: Backend = backend
        self._launch_raw = backend.launch_raw
        self._stream_handle = backend.stream_handle

    @property
    def library(self) -> str:
        return self._library.name

    @property
    def qualified_name(self) -> str:
        return f"{self._library.name}.{self.name}"

    def __repr__(self) -> str:
        return f"<Kernel {self.qualified_name}>"

    @property
    def signatures(self) -> List[str]:
        """The signatures known for this kernel (from the manifest; no GPU needed)."""
        seen: Dict[str, None] = {}
        for v in self._library.variants:
            for m in v.modules:
                for k in m.kernels:
                    if k.name == self.name:
                        seen.setdefault(k.describe(), None)
        return list(seen)

    def overloads(self) -> List[Tuple[ModuleSpec, KernelSpec]]:
        """(module, kernel) pairs of the variant chosen for this device."""
        if self._overloads is None:
            ch = self._cache.choice(self._library.name)
            found = [(m, k) for m in ch.variant.modules for k in m.kernels if k.name == self.name]
            if not found:
                raise KernelNotFoundError(
                    f"kernel {self.qualified_name} is missing from the chosen variant "
                    f"{ch.capability}/{ch.variant.toolchain} of library {self.library}"
                )
            self._overloads = found
        return self._overloads

    def load(self) -> None:
        """Load every signature now (otherwise each loads on its first launch)."""
        for module, spec in self.overloads():
            self._cache.load_function(self._library.name, module, spec)

    def resolve(self, *args: Any) -> Tuple[ModuleSpec, KernelSpec]:
        """The (module, signature) these arguments would launch; DispatchError if none fits."""
        ovl = self.overloads()
        spec = abi.select_overload([k for _, k in ovl], args, self.qualified_name)
        for m, k in ovl:
            if k is spec:
                return m, k
        raise AssertionError("unreachable")  # pragma: no cover

    def pack(self, *args: Any) -> abi.PackedArgs:
        """The packed parameters a launch with these arguments would pass (for debugging)."""
        _, spec = self.resolve(*args)
        return abi.pack_args(spec, args)

    def param_info(self, *args: Any) -> Optional[List[Tuple[int, int]]]:
        """[(offset, size)] of the parameters, as the driver reports them for the signature these
        arguments select (loaded if need be): the check that `pack` lays the buffer out as the
        driver expects. None if the backend or driver cannot tell."""
        module, spec = self.resolve(*args)
        func = self._cache.load_function(self._library.name, module, spec)
        return self._backend.param_info(func)

    def launch(
        self, grid: Any, block: Any, *args: Any, stream: Any = None, shared_mem: int = 0
    ) -> None:
        """Launch on `stream` (default: the legacy default stream); asynchronous like CUDA."""
        last = self._last_dims  # (grid, block, dims): the same objects launch the same shape
        if last[0] is grid and last[1] is block:
            dims = last[2]
        else:
            dims = self._launch_dims(grid, block)
        if shared_mem.__class__ is not int or shared_mem < 0:
            shared_mem = _shared_mem(shared_mem)
        self._launch_with(args, dims, shared_mem, stream)

    def _launch_with(
        self, args: Tuple[Any, ...], dims: Tuple[int, ...], shared_mem: int, stream: Any
    ) -> None:
        """A launch of a known shape: the last plan's fire, else the checked path. (The
        pattern's generated entry, `LaunchPlan.entry`, is this and `launch` in one frame.)"""
        hstream = None if stream is None else self._cu_stream(stream)
        try:  # the previous launch's plan, which checks its pattern as it reads and launches
            status = self._fire(args, dims, shared_mem, hstream)
        except Exception:  # a value only the checked path takes (or refuses): see below
            status = None
        if status is not self._ok:  # another pattern, or the driver refused: the checked path
            self._launch_checked(args, dims, shared_mem, stream)

    def _launch_checked(
        self, args: Tuple[Any, ...], dims: Tuple[int, ...], shared_mem: int, stream: Any
    ) -> None:
        """A launch through the plan of `args`' pattern (made on its first launch) and the
        backend's `launch_raw`, which retries on a thread with no context and raises on errors."""
        plan = self._last
        try:
            buf = plan.repack(args)
        except Exception:
            buf = None
        if buf is None:
            plan, buf = self._plan_and_pack(args)
        handle = 0 if stream is None else self._stream_handle(stream)
        if plan.cooperative:
            self._launch_cooperative(plan.func, dims, shared_mem, handle, buf)
        else:
            gx, gy, gz, bx, by, bz = dims
            self._launch_raw(plan.func, gx, gy, gz, bx, by, bz, shared_mem, handle, buf)

    def _launch_cooperative(
        self, func: Any, dims: Tuple[int, ...], shared_mem: int, stream: int, buf: ParamBuffer
    ) -> None:
        """cuLaunchCooperativeKernel, after checking that the grid can be co-resident."""
        check_cooperative_grid(
            self._backend, self._occupancy, func, self.qualified_name, dims, shared_mem
        )
        gx, gy, gz, bx, by, bz = dims
        self._backend.launch_cooperative_raw(func, gx, gy, gz, bx, by, bz, shared_mem, stream, buf)

    def max_cooperative_grid_blocks(self, block: Any, shared_mem: int = 0, *args: Any) -> int:
        """The most blocks of `block` threads a cooperative launch of this kernel can have
        (numba's `max_cooperative_grid_blocks`); `args` pick the signature if there are several."""
        module, spec = self.resolve(*args) if args else self.overloads()[0]
        func = self._cache.load_function(self._library.name, module, spec)
        dims = launch_dims(1, block)
        per_sm, sms = cooperative_limit(
            self._backend, self._occupancy, func, dims[3] * dims[4] * dims[5], shared_mem
        )
        return per_sm * sms

    def forall(
        self, ntasks: int, tpb: int = 0, stream: Any = None, sharedmem: int = 0
    ) -> "_ForAll":
        """`kernel.forall(n)(*args)`: n threads, in blocks of the size the driver's occupancy
        calculator suggests (cuOccupancyMaxPotentialBlockSize) unless `tpb` is given."""
        if ntasks < 0:
            raise ValueError(f"Can't create ForAll with negative task count: {ntasks}")
        return _ForAll(self, int(ntasks), int(tpb), stream, _shared_mem(sharedmem))

    def forall_config(self, ntasks: int, args: Tuple[Any, ...], tpb: int = 0, sharedmem: int = 0):
        """(grid, block) `forall(ntasks, tpb, sharedmem)` launches with for these arguments."""
        module, spec = self.resolve(*args)
        func = self._cache.load_function(self._library.name, module, spec)
        return forall_config(self._backend, self._occupancy, func, ntasks, tpb, sharedmem)

    def _plan_and_pack(self, args: Tuple[Any, ...]) -> Tuple[Any, ParamBuffer]:
        """(plan, packed buffer) through the plan of `args`' pattern (made on its first
        launch), which later launches then try first; the checked path for what it refuses."""
        key, cais = pattern_key(args)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._new_plan(key, args)
        self._last = plan
        self._fire = plan.fire
        if plan.entry is not None:  # `kernel.launch` is now this pattern's own, one frame
            vars(self)["launch"] = plan.entry
        else:
            vars(self).pop("launch", None)
        try:
            buf = plan.pack(args, cais) if plan.fast else None
        except Exception:  # a value only the checked path takes (or refuses)
            buf = None
        if buf is None:
            return self._checked_pack(args)
        return plan, buf

    def _new_plan(self, key: Any, args: Tuple[Any, ...]) -> LaunchPlan:
        """The checked path: dispatch, pack with every check, load; then remember the plan."""
        module, spec = self.resolve(*args)
        packed = abi.pack_args(spec, args)
        func = self._cache.load_function(self._library.name, module, spec)
        plan = build_plan(func, spec, args, packed)
        if self._cu is None:  # the first plan: the driver is loaded by now
            self._bind_launcher()
        if self._cu:
            plan.set_launcher(self._cu, self._entry_names())
        if key is not None and len(self._plans) < _MAX_PLANS:
            self._plans[key] = plan
        return plan

    def _bind_launcher(self) -> None:
        """The backend's bare launch call, its success status and its stream reader, if it has
        them (`Backend.launch_function`); a backend without keeps every launch checked."""
        found = self._backend.launch_function()
        if found is None:
            self._cu = False
        else:
            self._cu, self._ok, self._cu_stream = found

    def _entry_names(self) -> Dict[str, Any]:
        """What a plan's launch entry (`gpu_runtime.launch.repack._ENTRY`) reads of this
        kernel."""
        return {
            "kernel": self,
            "ok": self._ok,
            "cu_stream": self._cu_stream,
            "slow": Kernel.launch,
            "checked": self._launch_checked,
        }

    def _checked_pack(self, args: Tuple[Any, ...]) -> Tuple[Any, ParamBuffer]:
        module, spec = self.resolve(*args)
        packed = abi.pack_args(spec, args)
        func = self._cache.load_function(self._library.name, module, spec)
        return _Checked(func, spec.cooperative), ParamBuffer.from_packed(packed)

    def _launch_dims(self, grid: Any, block: Any) -> Tuple[int, ...]:
        try:
            dims = self._dims[(grid, block)]
        except (KeyError, TypeError):
            dims = launch_dims(grid, block)
            try:
                if len(self._dims) < _MAX_PLANS:
                    self._dims[(grid, block)] = dims
            except TypeError:  # a list: checked every time
                return dims
        if grid.__class__ in _IMMUTABLE and block.__class__ in _IMMUTABLE:
            self._last_dims = (grid, block, dims)  # one assignment: threads see a whole triple
        return dims

    def __getitem__(self, config: Any) -> "_Configured":
        last = self._last_config  # kernel[grid, block] in a loop: one constant tuple each time
        if last[0] is config:
            return last[1]
        if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
            raise DispatchError(
                "use kernel[grid, block], kernel[grid, block, stream] or "
                "kernel[grid, block, stream, shared_mem]"
            )
        grid, block = config[0], config[1]
        stream = config[2] if len(config) > 2 else None
        shared = config[3] if len(config) > 3 else 0
        configured = _Configured(self, grid, block, stream, shared)
        if len(config) == 2:  # not with a stream: that would keep the stream object alive
            self._last_config = (config, configured)
        return configured


_MAX_PLANS = 64  # patterns (and grid/block pairs) remembered per kernel; more take the checked path
# grid/block types whose objects never change value (a tuple's items are checked to be ints)
_IMMUTABLE = (int, tuple)


class _Checked:
    """What `launch` reads of a plan, for a launch the checked path packed."""

    __slots__ = ("func", "cooperative")

    def __init__(self, func: Any, cooperative: bool) -> None:
        self.func, self.cooperative = func, cooperative


class _ForAll:
    """`kernel.forall(n, tpb, stream, sharedmem)`: call it with the kernel's arguments."""

    __slots__ = ("_k", "_n", "_tpb", "_stream", "_shared")

    def __init__(self, kernel: Kernel, n: int, tpb: int, stream: Any, shared: int) -> None:
        self._k, self._n, self._tpb, self._stream, self._shared = kernel, n, tpb, stream, shared

    def __call__(self, *args: Any) -> None:
        if self._n == 0:
            return
        grid, block = self._k.forall_config(self._n, args, self._tpb, self._shared)
        self._k.launch(grid, block, *args, stream=self._stream, shared_mem=self._shared)


class _NoPlan:
    """`Kernel._last` before the first launch: fits nothing."""

    @staticmethod
    def repack(args: Any) -> None:
        return None


_NO_PLAN = _NoPlan()


def _no_stream(stream: Any) -> None:
    """The stream reader before a bare launch call is bound (no launch uses its result)."""
    return None


def _shared_mem(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise DispatchError(f"shared_mem must be a non-negative integer, not {value!r}")
    return int(value)


class _Configured:
    """`kernel[grid, block, stream, shared_mem]`: its launch shape is read once, here, when grid
    and block cannot change (ints, tuples); a list is read again on every call."""

    __slots__ = ("_k", "_grid", "_block", "_stream", "_shared", "_dims")

    def __init__(self, kernel: Kernel, grid: Any, block: Any, stream: Any, shared: int) -> None:
        self._k, self._grid, self._block = kernel, grid, block
        self._stream, self._shared = stream, _shared_mem(shared)
        fixed = grid.__class__ in _IMMUTABLE and block.__class__ in _IMMUTABLE
        self._dims = kernel._launch_dims(grid, block) if fixed else None

    def __call__(self, *args: Any) -> None:
        dims = self._dims
        if dims is None:
            dims = self._k._launch_dims(self._grid, self._block)
        self._k._launch_with(args, dims, self._shared, self._stream)
