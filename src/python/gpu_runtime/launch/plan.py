"""The launch fast path: argument patterns, and one `LaunchPlan` per pattern of a kernel.

The first launch with a new *pattern* of arguments runs every check (dispatch over the
signatures, dtype/ndim/layout, argument count and types, value ranges) through the ABI modules,
and builds a plan from what they packed: which bytes of the parameter image come from which
argument, as one `struct` format. Later launches with the same pattern compute the pattern
(`pattern_key`), find the plan, and write only the values that may change (data pointers,
shapes, strides, scalars) into a reused per-thread `ParamBuffer` with a single `pack_into`.

A pattern is what dispatch and packing depend on beyond values: for a device array its Python
type, typestr (with "descr" for records), ndim and (C, F) contiguity; for a Python int its sign
and bit length (the integer types it fits); for any other argument its exact type. Types whose
instances differ in ways the type does not tell (datetime units, 0-d host arrays, int
subclasses) are never cached: they take the checked path on every launch. A value the fast
packing cannot take (out of range for its type, a signedness the C ABI reinterprets, a float32
overflow) makes `pack` raise, and the caller falls back to the checked path for that launch,
which either packs it exactly as before or raises the same DispatchError.
"""

from __future__ import annotations

import math
import struct
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from gpu_runtime.driver.devarray import DeviceArray
from gpu_runtime.launch.arrays import CAI_VERSIONS, array_view, c_strides, contiguity
from gpu_runtime.launch.numba_abi import (
    numba_array_values,
    numba_pointer_value,
    numba_scalar_values,
)
from gpu_runtime.launch.param_buffer import ParamBuffer
from gpu_runtime.launch.params import PackedArgs, PackedValue, build_image, parse_param_type
from gpu_runtime.launch.repack import DEVARRAY, OTHER, SCALAR, Step, compile_repack
from gpu_runtime.launch.scalars import scalar_dtype
from gpu_spec.c_types import c_scalar_dtype
from gpu_spec.manifest.model import KernelSpec

Extractor = Callable[[Any, Any], Tuple[Any, ...]]

# Types whose instances all dispatch and pack alike (up to a value `struct` range-checks).
_SCALAR_TYPES = frozenset(
    [float, bool, complex, np.bool_, np.float16, np.float32, np.float64, np.complex64]
    + [np.complex128, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32]
    + [np.uint64, np.longlong, np.ulonglong, np.intc, np.uintc]
)
# Instances of one type that may dispatch or pack differently: never cached.
_UNCACHED_TYPES = (np.ndarray, np.datetime64, np.timedelta64, np.void, bytes, bytearray)
_ITEMSIZE: dict = {}


def _itemsize(typestr: str) -> int:
    n = _ITEMSIZE.get(typestr)
    if n is None:
        n = _ITEMSIZE[typestr] = np.dtype(typestr).itemsize  # "|V16": a record's itemsize
    return n


def _array_key(t: type, cai: Any) -> Optional[Tuple[Any, ...]]:
    typestr, shape = cai["typestr"], cai["shape"]
    if cai.get("mask") is not None:
        return None  # masks: the checked path refuses them
    if cai.get("version", 3) not in CAI_VERSIONS or not (cai["data"][0] or 0 in shape):
        return None  # an unknown version, a null array: the checked path refuses them
    strides = cai.get("strides")
    ndim = len(shape)
    if strides is None:  # C order: F-contiguous too when at most one extent is not 1
        flags = _BOTH if ndim < 2 else (True, 0 in shape or sum(n != 1 for n in shape) < 2)
    else:
        flags = contiguity(shape, strides, _itemsize(typestr))
    if typestr[1:2] == "V":  # records are told apart only by "descr" (numba's have none)
        return (t, (typestr, _freeze(cai.get("descr"))), ndim, flags)
    return (t, typestr, ndim, flags)


_BOTH = (True, True)


def _freeze(descr: Any) -> Any:
    """A `descr` list (of tuples, lists for nested records) as nested tuples: hashable."""
    if isinstance(descr, (list, tuple)):
        return tuple(_freeze(d) for d in descr)
    return descr


def pattern_key(args: Sequence[Any]) -> Tuple[Optional[tuple], List[Any]]:
    """(the pattern of `args`, their `__cuda_array_interface__` dicts or None each).

    The key is None when some argument must always take the checked path.
    """
    key: List[Any] = []
    cais: List[Any] = []
    for a in args:
        t = type(a)
        cai = None
        if t is int:
            key.append((int, a < 0, (~a if a < 0 else a).bit_length()))
        elif t in _SCALAR_TYPES:
            key.append(t)
        elif t is DeviceArray:
            try:
                entry = a._launch or device_array_entry(a)
            except Exception:
                return None, cais  # freed: the checked path reports it
            cai = entry[0]
            if entry[1] is None:
                return None, cais  # a mask: the checked path refuses it
            key.append(entry[1])
        else:
            try:
                part, cai = _other_part(t, a)
            except _Uncached:
                return None, cais
            key.append(part)
        cais.append(cai)
    return tuple(key), cais


class _Uncached(Exception):
    """An argument no pattern covers: the checked path takes it (and reports what is wrong)."""


def _other_part(t: type, a: Any) -> Tuple[Any, Any]:
    """(pattern part, interface dict or None) of an argument that is neither a Python int, a
    scalar of `_SCALAR_TYPES` nor a `DeviceArray`; raises _Uncached."""
    if isinstance(a, (int, _UNCACHED_TYPES)):
        raise _Uncached
    try:
        cai = a.__cuda_array_interface__
    except AttributeError:
        return t, None
    except Exception:
        raise _Uncached from None  # the checked path reports it
    try:
        k = _array_key(t, cai)
    except Exception:
        raise _Uncached from None  # malformed: the checked path reports it
    if k is None:
        raise _Uncached
    return k, cai


_PARTS: dict = {}  # one object per distinct DeviceArray pattern part: later compared by identity


def device_array_entry(a: DeviceArray) -> Tuple[Any, ...]:
    """(interface dict, pattern part, numba-ABI values, (data pointer,)) of a `DeviceArray`,
    computed once and kept on the array (`DeviceArray._launch`; `free()` drops it): its
    interface dict is built once and never changes, so neither does anything read from it.
    Raises ValueError for a freed array."""
    cai = a.__cuda_array_interface__
    part = _array_key(DeviceArray, cai)
    part = _PARTS.setdefault(part, part)
    values = _numba_array(_itemsize(cai["typestr"]))(a, cai)
    entry = a._launch = (cai, part, values, (cai["data"][0] or 0,))
    return entry


# -- extractors: the changing values of one argument, in parameter order ---------------------


def _numba_array(itemsize: int) -> Extractor:
    def values(a: Any, cai: Any) -> Tuple[Any, ...]:
        shape = cai["shape"]
        strides = cai.get("strides")
        if strides is None:
            if len(shape) == 1:
                return (shape[0], itemsize, cai["data"][0] or 0, shape[0], itemsize)
            strides = c_strides(shape, itemsize)
        return (math.prod(shape), itemsize, cai["data"][0] or 0, *shape, *strides)

    return values


def _cai_pointer(a: Any, cai: Any) -> Tuple[Any, ...]:
    return (cai["data"][0] or 0,)


def _attr_pointer(attr: str) -> Extractor:
    def values(a: Any, cai: Any) -> Tuple[Any, ...]:
        return (int(getattr(a, attr)),)

    return values


def _scalar(a: Any, cai: Any) -> Tuple[Any, ...]:
    return (a,)


# -- building a plan ---------------------------------------------------------------------------

_INT_CODES = {8: "b", 16: "h", 32: "i", 64: "q"}
_ZEROS = "zeros"  # a numba array's meminfo and parent: two 8-byte parameters, always 0


def _int_code(kind: str, bits: int) -> str:
    code = _INT_CODES[bits]
    return code if kind == "s" else code.upper()


def _numba_arg(spec: Any, value: Any, what: str) -> Tuple[List[PackedValue], Optional[tuple]]:
    """(packed values, (codes, extractor) or None if not fast-packable) of one numba argument."""
    if spec.kind == "array":
        vals = numba_array_values(spec, value, what)
        view = array_view(value)
        assert view is not None
        codes = [_ZEROS, "q", "q", "Q"] + ["q"] * (2 * view.ndim)
        return vals, (codes, _numba_array(view.itemsize))
    if spec.kind == "pointer":
        return [numba_pointer_value(spec, value, what)], _pointer_part(value)
    vals = numba_scalar_values(str(spec.dtype), value, what)
    dt = scalar_dtype(str(spec.dtype))
    if len(vals) != 1:
        return vals, None
    if dt.kind == "b":  # a bool-typed pattern only: struct's "?" would take 2 as True
        return vals, ((["?"], _scalar) if isinstance(value, (bool, np.bool_)) else None)
    if dt.kind in "iu":
        return vals, ([_int_code(vals[0][0][0], dt.itemsize * 8)], _scalar)
    if dt.kind == "f" and dt.itemsize in (4, 8):
        return vals, (["f" if dt.itemsize == 4 else "d"], _scalar)
    return vals, None  # float16 bits, datetimes: the checked path packs them


def _pointer_part(value: Any) -> Optional[tuple]:
    """(codes, extractor) of a numba pointer argument (one u64), as `numba_pointer_value`
    reads it: an integer, a device array's data pointer, or a buffer's `.handle`/`.ptr`."""
    if isinstance(value, (int, np.integer)):
        return (["Q"], _scalar)
    if array_view(value) is not None:
        return (["Q"], _cai_pointer)
    for attr in ("handle", "ptr"):
        if getattr(value, attr, None) is not None:
            return (["Q"], _attr_pointer(attr))
    return None


def _c_arg(ptext: str, value: Any, ctype: Optional[str] = None) -> Optional[tuple]:
    """(codes, extractor) of one C parameter, or None if not fast-packable. A declared signed
    integer (`int`, PTX `.u32`) packs signed, so that `struct` range-checks it as C declares it;
    a declared pointer's arrays keep to the checked path's dtype through the pattern key."""
    pt = parse_param_type(ptext)
    if pt.is_array or (pt.kind == "f" and pt.bits == 16):
        return None
    if pt.kind == "f":
        return (["f" if pt.bits == 32 else "d"], _scalar)
    declared = c_scalar_dtype(ctype) if ctype is not None else None
    if declared == "bool" and not isinstance(value, (bool, np.bool_)):
        return None  # an int for a bool: only the checked path refuses 2 (np.int64 patterns)
    signed = pt.kind == "s" or (declared is not None and declared.startswith("int"))
    code = _int_code("s" if signed else "u", pt.bits)
    if pt.bits == 64 and not isinstance(value, (int, np.integer)):
        if array_view(value) is not None:
            return ([code], _cai_pointer)
        for attr in ("handle", "ptr"):  # as c_abi.device_pointer looks for them
            h = getattr(value, attr, None)
            if h is None:
                continue
            try:
                int(h)
            except (TypeError, ValueError):
                continue
            return ([code], _attr_pointer(attr))
        return None
    return ([code], _scalar)


def _per_arg(kernel: KernelSpec, args: Sequence[Any]) -> Tuple[List[PackedValue], List[Any]]:
    values: List[PackedValue] = []
    parts: List[Any] = []
    if kernel.abi == "numba":
        for i, (spec, value) in enumerate(zip(kernel.args or (), args)):
            vals, part = _numba_arg(spec, value, f"argument {i} of {kernel.name}")
            values.extend(vals)
            parts.append(part)
    else:
        params = kernel.params or ()
        for ptext, ctype, value in zip(params, kernel.c_types or (None,) * len(params), args):
            parts.append(_c_arg(ptext, value, ctype))
    return values, parts


def build_plan(func: Any, kernel: KernelSpec, args: Sequence[Any], packed: PackedArgs) -> Any:
    """The plan for launching `func` with arguments of the pattern of `args`, which the checked
    path packed into `packed` (so every argument is known to fit)."""
    values, parts = _per_arg(kernel, args)
    if kernel.abi == "numba" and not _same_packing(values, packed):
        raise AssertionError(f"{kernel.describe()}: the plan disagrees with the ABI's packing")
    coop = kernel.cooperative
    if any(p is None for p in parts):
        return LaunchPlan(func, packed, None, (), coop)
    codes = [c for p in parts for c in p[0]]
    extractors = tuple(p[1] for p in parts)
    plan = LaunchPlan(func, packed, _struct_format(codes, packed), extractors, coop)
    key = pattern_key(args)[0]
    if key is not None:
        steps = tuple(_step(part, ex) for part, ex in zip(key, extractors))
        plan.set_steps(steps, _single_writes(parts, packed))
    return plan


def _same_packing(values: Sequence[PackedValue], packed: PackedArgs) -> bool:
    """Whether `values` pack to the bytes of `packed`: the types alike and the byte images equal.

    Compared as bytes, not as values: a NaN scalar is unequal to itself (so comparing values
    refused every NaN launch), and -0.0 equals 0.0 though their bits differ."""
    if [t for t, _ in values] != [t for t, _ in packed.values]:
        return False
    return build_image(values).image == packed.image


def _single_writes(parts: Sequence[Any], packed: PackedArgs) -> Tuple[Any, ...]:
    """Per argument, (struct format, offset) when it is one parameter, else None: how a repack
    that leaves the arrays' bytes as they are rewrites a scalar alone."""
    out = []
    index = 0  # the argument's first parameter
    for codes, _ in parts:
        one = len(codes) == 1 and codes[0] != _ZEROS
        out.append(("<" + codes[0], packed.offsets[index]) if one else None)
        index += sum(2 if c == _ZEROS else 1 for c in codes)
    return tuple(out)


def _step(part: Any, extractor: Extractor) -> Step:
    """(kind, pattern part the argument must have, how to read its values) of one position."""
    if extractor is _scalar and part in _SCALAR_TYPES:
        return (SCALAR, part, None)
    if isinstance(part, tuple) and part[0] is DeviceArray:
        return (DEVARRAY, part, 3 if extractor is _cai_pointer else 2)  # device_array_entry
    return (OTHER, part, extractor)


def _other_values(want: Any, how: Extractor, a: Any) -> Optional[Tuple[Any, ...]]:
    """The values of an argument of neither a scalar type nor DeviceArray, None if its pattern
    part is not `want`; raises _Uncached."""
    t = type(a)
    if t is int:
        part, cai = (int, a < 0, (~a if a < 0 else a).bit_length()), None
    else:
        part, cai = _other_part(t, a)
    return how(a, cai) if part == want else None


def _no_repack(args: Sequence[Any]) -> None:
    return None


def no_fire(args: Sequence[Any], dims: Any, shared_mem: int, hstream: Any) -> None:
    """The fire of a plan that fits nothing (and of a kernel before its first launch)."""
    return None


def _struct_format(codes: Sequence[str], packed: PackedArgs) -> str:
    """One little-endian struct format for the whole image, padding as `PackedArgs` lays it
    out; a numba array's two leading zero parameters are written as 16 pad bytes."""
    fmt = ["<"]
    pos = 0
    offsets = iter(zip(packed.offsets, packed.sizes))
    for code in codes:
        if code == _ZEROS:
            for _ in range(2):
                off, size = next(offsets)
                fmt.append("x" * (off - pos + size))
                pos = off + size
            continue
        off, size = next(offsets)
        fmt.append("x" * (off - pos) + code)
        pos = off + size
    assert next(offsets, None) is None and struct.calcsize("".join(fmt)) == len(packed.image)
    return "".join(fmt)


class LaunchPlan:
    """How to launch one kernel signature with one argument pattern.

    `fast` is False when some argument needs the checked path every time (float16, complex,
    structs by value); the plan then only saves the dispatch. Buffers are per thread: two
    threads launching the same kernel never write into each other's parameters.
    """

    __slots__ = (
        "func",
        "cooperative",
        "fast",
        "steps",
        "repack",
        "fire",
        "entry",
        "_struct",
        "_extractors",
        "_layout",
        "_local",
        "_writes",
    )

    def __init__(
        self,
        func: Any,
        packed: PackedArgs,
        fmt: Optional[str],
        extractors: Tuple[Any, ...],
        cooperative: bool = False,
    ) -> None:
        self.func = func
        self.cooperative = cooperative  # grid sync: launched with cuLaunchCooperativeKernel
        self.fast = fmt is not None
        # per argument (kind, pattern part, reader), set by build_plan; None: the plan is
        # only found through its pattern key, and `repack` fits nothing
        self.steps: Optional[Tuple[Step, ...]] = None
        self._writes: Sequence[Any] = ()
        self.repack: Callable[[Sequence[Any]], Optional[ParamBuffer]] = _no_repack
        # repack and launch in one call, made by `set_launcher`; None: another pattern
        self.fire: Callable[..., Any] = no_fire
        # the kernel's whole launch for this pattern, made by `set_launcher` given `entry`
        self.entry: Optional[Callable[..., Any]] = None
        self._struct = struct.Struct(fmt) if fmt is not None else None
        self._extractors = extractors
        self._layout = (packed.offsets, packed.sizes, len(packed.image))
        self._local = threading.local()

    def buffer(self) -> ParamBuffer:
        """This thread's buffer (allocated on its first launch of the plan)."""
        try:
            return self._local.buf
        except AttributeError:
            buf = self._local.buf = ParamBuffer(*self._layout)
            return buf

    def pack(self, args: Sequence[Any], cais: Sequence[Any]) -> ParamBuffer:
        """Write this launch's values into this thread's buffer; raises (struct.error,
        OverflowError, TypeError, ...) on a value only the checked path can take."""
        try:
            buf = self._local.buf
        except AttributeError:
            buf = self.buffer()
        vals: List[Any] = []
        for extract, a, cai in zip(self._extractors, args, cais):
            vals += extract(a, cai)
        buf.arrays = buf.scalars = None  # rewritten whole: no repack may keep its bytes
        self._struct.pack_into(buf.data, 0, *vals)  # type: ignore[union-attr]
        return buf

    def set_steps(self, steps: Tuple[Step, ...], singles: Sequence[Any]) -> None:
        """Make `repack(args)`: `pack` for arguments of this plan's pattern, checked as they are
        read, in one generated function (`gpu_runtime.launch.repack`): None, with nothing
        written, if `args` have another pattern; raises like `pack` on a value only the checked
        path can take. What `Kernel.launch` tries first, with the plan of its previous launch.
        `singles`: per argument, (struct format, offset) if it is one parameter, else None."""
        self.steps = steps
        writes = [None if w is None else (struct.Struct(w[0]).pack_into, w[1]) for w in singles]
        self.repack = compile_repack(
            steps,
            self._struct.pack_into,  # type: ignore[union-attr]
            writes,
            self._local,
            self.buffer,
            _REPACK_NAMES,
        )
        self._writes = writes

    def set_launcher(self, cu: Any, entry: Optional[Dict[str, Any]] = None) -> None:
        """Make `fire(args, dims, shared_mem, hstream)`: `repack` and then
        `cu(func, *dims, shared_mem, hstream, void**, 0)` (cuLaunchKernel's signature) in one
        generated function, returning cu's status, or None with nothing launched when `args`
        have another pattern. With `entry` (the kernel's names, see `compile_repack`), also
        `self.entry`: the kernel's whole `launch` for this pattern, in one function. A plan
        with no repack, or a cooperative one (its grid is checked first, on the path that
        launches it), keeps the fire that fits nothing and no entry."""
        if self.steps is None or self.cooperative:
            return
        pack_into = self._struct.pack_into  # type: ignore[union-attr]
        common = (self.steps, pack_into, self._writes, self._local, self.buffer, _REPACK_NAMES)
        self.fire = compile_repack(*common, (cu, self.func))
        if entry is not None:
            self.entry = compile_repack(*common, (cu, self.func), entry)


_REPACK_NAMES = {
    "DeviceArray": DeviceArray,
    "device_array_entry": device_array_entry,
    "other_values": _other_values,
}
