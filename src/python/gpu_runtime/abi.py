"""Kernel arguments: matching them to a signature and packing them, as pure functions.

Two ABIs:

* "numba" (kernels compiled by numba-cuda), as numba-cuda 0.30.4's `_Kernel._prepare_args`:
  each array argument becomes 5 + 2*ndim 8-byte parameters
      meminfo (=0), parent (=0), nitems, itemsize, data pointer, shape[ndim], strides[ndim]
  (strides in bytes; C-order strides computed when the array interface gives none);
  scalars are passed by value in the signature's type: int8..uint64 and float32/float64 as
  such, float16 as its 16 bits, bool as one byte, complex64/complex128 as two parameters
  (real, imag) of float32/float64, datetime64/timedelta64 as int64.
* "c" (CUDA C++ through NVRTC): one value per PTX `.param`, converted by the parameter's PTX
  type: 64-bit integer parameters take device pointers (anything with
  `__cuda_array_interface__`, or an object with an integer `.handle`/`.ptr`, e.g. a cuda.core
  Buffer) or integers; narrower integer parameters take integers (either signedness: NVRTC
  declares `int` as `.u32`); floating parameters take numbers; byte-array parameters
  (`.align A .b8 name[N]`, e.g. a struct by value) take a numpy scalar or `bytes` of N bytes.

`pack_numba_args` / `pack_c_args` return a `PackedArgs`: the typed values, one per PTX parameter,
and the `bytes` image of the parameter buffer (each value at its natural alignment,
little-endian), which is what the tests compare. `PackedArgs.launch_args()` turns the values into
numpy scalars for `cuda.core.launch`, which copies each by its exact C type.
"""

from __future__ import annotations

import functools

import math
import re
import struct
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from gpu_runtime.errors import DispatchError
from gpu_spec.manifest import ArgSpec, KernelSpec

# --------------------------------------------------------------------------------------------
# PTX parameter types

_PTX_RE = re.compile(r"^(?:\.?align\s+(\d+)\s+)?\.?([busf])(8|16|32|64)(?:\s*\[\s*(\d+)\s*\])?$")
_STRUCT_CODES = {("u", 8): "<B", ("u", 16): "<H", ("u", 32): "<I", ("u", 64): "<Q",
                 ("b", 8): "<B", ("b", 16): "<H", ("b", 32): "<I", ("b", 64): "<Q",
                 ("s", 8): "<b", ("s", 16): "<h", ("s", 32): "<i", ("s", 64): "<q",
                 ("f", 16): "<H", ("f", 32): "<f", ("f", 64): "<d"}
_NP_TYPES = {("u", 8): np.uint8, ("u", 16): np.uint16, ("u", 32): np.uint32, ("u", 64): np.uint64,
             ("b", 8): np.uint8, ("b", 16): np.uint16, ("b", 32): np.uint32, ("b", 64): np.uint64,
             ("s", 8): np.int8, ("s", 16): np.int16, ("s", 32): np.int32, ("s", 64): np.int64,
             ("f", 16): np.uint16, ("f", 32): np.float32, ("f", 64): np.float64}


@dataclass(frozen=True)
class ParamType:
    """A PTX `.param` type: "u64", "f32", "b8[16]", "align 8 b8[16]" (leading dots optional)."""

    kind: str  # "u" | "s" | "b" | "f"
    bits: int
    count: int  # 1 for a scalar, N for `.b8 name[N]`
    align: int
    is_array: bool

    @property
    def size(self) -> int:
        return self.bits // 8 * self.count

    @property
    def name(self) -> str:
        base = f"{self.kind}{self.bits}"
        return f"align {self.align} {base}[{self.count}]" if self.is_array else base


@functools.lru_cache(maxsize=None)
def parse_param_type(text: str) -> ParamType:
    """Memoized: every launch parses its kernel's parameter types (a handful of distinct names)."""
    m = _PTX_RE.match(text.strip())
    if not m:
        raise DispatchError(f"unknown PTX parameter type {text!r}")
    align, kind, bits, count = m.group(1), m.group(2), int(m.group(3)), m.group(4)
    if kind == "f" and bits == 8:
        raise DispatchError(f"unknown PTX parameter type {text!r}")
    n = int(count) if count is not None else 1
    return ParamType(kind=kind, bits=bits, count=n,
                     align=int(align) if align else bits // 8, is_array=count is not None)


# --------------------------------------------------------------------------------------------
# Packed result


@dataclass(frozen=True)
class PackedArgs:
    values: Tuple[Tuple[str, Any], ...]  # (PTX type name, int | float | bytes), one per .param

    # The byte image is for tests and debugging only: a launch passes `launch_args()`, so the
    # hot path never lays the buffer out.
    @property
    def image(self) -> bytes:
        """The parameter buffer, each value at its natural alignment."""
        return _layout(self.values)[0]

    @property
    def offsets(self) -> Tuple[int, ...]:
        return _layout(self.values)[1]

    def launch_args(self) -> List[Any]:
        """numpy scalars for cuda.core.launch, each of the exact width of its parameter."""
        out = []
        for tname, value in self.values:
            pt = parse_param_type(tname)
            if pt.is_array:
                out.append(_bytes_as_scalar(value, tname))
            else:
                out.append(_NP_TYPES[(pt.kind, pt.bits)](value))
        return out


def _bytes_as_scalar(data: bytes, tname: str) -> Any:
    n = len(data)
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}.get(n)
    if dt is None:
        raise DispatchError(
            f"a {n}-byte by-value parameter ({tname}) cannot be passed through cuda.core's launcher "
            f"(it takes scalars of 1, 2, 4, 8 or 16 bytes); pass the struct through device memory")
    return np.frombuffer(data, dtype=dt)[0]


def _encode(pt: ParamType, value: Any) -> bytes:
    if pt.is_array:
        return bytes(value)
    return struct.pack(_STRUCT_CODES[(pt.kind, pt.bits)], value)


def build_image(values: Sequence[Tuple[str, Any]]) -> PackedArgs:
    return PackedArgs(values=tuple(values))


def _layout(values: Sequence[Tuple[str, Any]]) -> Tuple[bytes, Tuple[int, ...]]:
    image = bytearray()
    offsets = []
    for tname, value in values:
        pt = parse_param_type(tname)
        off = -(-len(image) // pt.align) * pt.align
        image.extend(b"\0" * (off - len(image)))
        offsets.append(off)
        data = _encode(pt, value)
        assert len(data) == pt.size, (tname, value)
        image.extend(data)
    return bytes(image), tuple(offsets)


# --------------------------------------------------------------------------------------------
# Device arrays


@dataclass(frozen=True)
class ArrayView:
    """What the kernel needs of a device array, from its `__cuda_array_interface__`."""

    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # bytes; C-order ones computed if the interface gives none
    dtype: np.dtype
    readonly: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def flags(self) -> Tuple[bool, bool]:
        """(C-contiguous, F-contiguous), by numba's rules (numpy's UpdateContiguousFlags)."""
        if not self.shape or self.size == 0:
            return (True, True)
        if any(s == 0 for s in self.strides):
            return (False, False)
        c = f = True
        sd = self.itemsize
        for n, st in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1:
                if st != sd:
                    c = False
                sd *= n
        sd = self.itemsize
        for n, st in zip(self.shape, self.strides):
            if n != 1:
                if st != sd:
                    f = False
                    break
                sd *= n
        return (c, f)

    @property
    def layout(self) -> str:
        c, f = self.flags
        return "C" if c else ("F" if f else "A")


def c_strides(shape: Sequence[int], itemsize: int) -> Tuple[int, ...]:
    out = []
    acc = itemsize
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def array_view(obj: Any) -> Optional[ArrayView]:
    """ArrayView of a device array (CuPy, numba, torch, DeviceArray...), None if `obj` is none."""
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception as e:  # e.g. torch raising for a tensor that requires grad
        raise DispatchError(f"cannot read __cuda_array_interface__ of {type(obj).__name__}: {e}") from e
    try:
        shape = tuple(int(n) for n in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        if dtype.fields is not None and "descr" in cai and cai["descr"]:
            dtype = np.dtype(cai["descr"])
        ptr, readonly = cai["data"]
        strides = cai.get("strides")
    except (KeyError, TypeError, ValueError) as e:
        raise DispatchError(f"malformed __cuda_array_interface__ on {type(obj).__name__}: {e}") from e
    if cai.get("mask") is not None:
        raise DispatchError(f"masked device arrays are not supported ({type(obj).__name__})")
    if not dtype.isnative and dtype.itemsize > 1:
        raise DispatchError(f"device array of non-native byte order {dtype.str} is not supported")
    strides = c_strides(shape, dtype.itemsize) if strides is None else tuple(int(s) for s in strides)
    if len(strides) != len(shape):
        raise DispatchError(f"__cuda_array_interface__ of {type(obj).__name__}: "
                            f"{len(shape)} dims but {len(strides)} strides")
    return ArrayView(ptr=int(ptr or 0), shape=shape, strides=strides, dtype=dtype,
                     readonly=bool(readonly))


def _is_host_array(obj: Any) -> bool:
    if isinstance(obj, np.generic):
        return False
    return isinstance(obj, np.ndarray) or (
        hasattr(obj, "__array_interface__") and not hasattr(obj, "__cuda_array_interface__"))


def numba_array_type(dtype: str, ndim: int, layout: str) -> str:
    """numba's spelling: float32[::1], float32[:, ::1], float32[::1, :], float32[:, :]."""
    if ndim == 0:
        return f"{dtype}[]"  # not a numba spelling; 0-d arrays are rare as kernel args
    dims = [":"] * ndim
    if layout == "C":
        dims[-1] = "::1"
    elif layout == "F":
        dims[0] = "::1"
    return f"{dtype}[{', '.join(dims)}]"


def describe_value(v: Any) -> str:
    view = array_view(v)
    if view is not None:
        return f"{numba_array_type(str(view.dtype), view.ndim, view.layout)} device array"
    if isinstance(v, np.ndarray):
        return f"{numba_array_type(str(v.dtype), v.ndim, 'C' if v.flags.c_contiguous else 'A')} HOST array"
    if isinstance(v, np.generic):
        return f"numpy {v.dtype}"
    return type(v).__name__


def describe_arg_spec(a: ArgSpec) -> str:
    if a.kind == "array":
        return numba_array_type(str(a.dtype), a.ndim or 0, a.layout or "A")
    if a.kind == "scalar":
        return str(a.dtype)
    return a.kind


# --------------------------------------------------------------------------------------------
# numba ABI

_INT_RANGES = {f"{p}{b}": ((-(1 << (b - 1)), (1 << (b - 1)) - 1) if p == "int" else (0, (1 << b) - 1))
               for p in ("int", "uint") for b in (8, 16, 32, 64)}


def _scalar_dtype(name: str) -> np.dtype:
    try:
        return np.dtype("bool" if name in ("bool", "boolean", "bool_") else name)
    except TypeError:
        raise DispatchError(f"unsupported scalar type {name!r} in kernel signature") from None


def _to_int(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise DispatchError(f"{what}: expected an integer, got {describe_value(value)} {value!r}")


def _to_float(value: Any, what: str) -> float:
    if isinstance(value, (bool, np.bool_, int, float, np.integer, np.floating)):
        return float(value)
    raise DispatchError(f"{what}: expected a real number, got {describe_value(value)} {value!r}")


def _to_complex(value: Any, what: str) -> complex:
    if isinstance(value, (bool, np.bool_, int, float, complex, np.integer, np.floating,
                          np.complexfloating)):
        return complex(value)
    raise DispatchError(f"{what}: expected a number, got {describe_value(value)} {value!r}")


def numba_scalar_values(dtype_name: str, value: Any, what: str) -> List[Tuple[str, Any]]:
    """The PTX-typed values numba passes for one scalar argument."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    dt = _scalar_dtype(dtype_name)
    if dt.kind == "b":
        if not isinstance(value, (bool, np.bool_, int, np.integer)):
            raise DispatchError(f"{what}: expected a bool, got {describe_value(value)} {value!r}")
        return [("u8", 1 if value else 0)]
    if dt.kind in "iu":
        v = _to_int(value, what)
        lo, hi = _INT_RANGES[dt.name]
        if not lo <= v <= hi:
            raise DispatchError(f"{what}: {v} does not fit in {dt.name}")
        return [(("s" if dt.kind == "i" else "u") + str(dt.itemsize * 8), v)]
    if dt.kind == "f":
        v = _to_float(value, what)
        if dt.itemsize == 2:
            return [("u16", int(np.array(v, dtype=np.float16).view(np.uint16)))]
        if dt.itemsize == 4:
            return [("f32", float(np.float32(v)))]
        if dt.itemsize == 8:
            return [("f64", v)]
    if dt.kind == "c":
        v = _to_complex(value, what)
        t = "f32" if dt.itemsize == 8 else "f64"
        if t == "f32":
            return [(t, float(np.float32(v.real))), (t, float(np.float32(v.imag)))]
        return [(t, v.real), (t, v.imag)]
    if dt.kind in "mM":
        if isinstance(value, (np.datetime64, np.timedelta64)):
            v = int(np.array(value, dtype=dt).view(np.int64))
        else:
            v = _to_int(value, what)
        return [("s64", v)]
    raise DispatchError(f"{what}: scalar type {dtype_name!r} is not supported by gpu_runtime")


def numba_array_values(spec: ArgSpec, value: Any, what: str) -> List[Tuple[str, Any]]:
    view = array_view(value)
    if view is None:
        if _is_host_array(value):
            raise DispatchError(
                f"{what}: got a host (numpy) array; kernels take device arrays: copy it with "
                f"gpu_runtime.DeviceArray.from_numpy(a) (or CuPy/numba/torch device arrays)")
        raise DispatchError(f"{what}: expected a device array ({describe_arg_spec(spec)}), "
                            f"got {describe_value(value)}")
    problem = _array_mismatch(spec, view)
    if problem:
        raise DispatchError(f"{what}: {problem}")
    vals: List[Tuple[str, Any]] = [("u64", 0), ("u64", 0), ("s64", view.size), ("s64", view.itemsize),
                                   ("u64", view.ptr)]
    vals.extend(("s64", n) for n in view.shape)
    vals.extend(("s64", s) for s in view.strides)
    return vals


def _array_mismatch(spec: ArgSpec, view: ArrayView) -> Optional[str]:
    try:
        want_dtype = _np_dtype(spec.dtype)
    except TypeError:
        return f"unsupported array dtype {spec.dtype!r} in kernel signature"
    why = None
    if view.dtype != want_dtype:
        why = f"dtype {view.dtype}, not {want_dtype}"
    elif view.ndim != spec.ndim:
        why = f"{view.ndim}-D, not {spec.ndim}-D"
    elif spec.layout in ("C", "F"):
        c, f = view.flags
        if spec.layout == "C" and not c:
            why = "not C-contiguous"
        elif spec.layout == "F" and not f:
            why = "not Fortran-contiguous"
    if why is None:
        return None
    # Described only on a mismatch: this check runs on every launch.
    got = numba_array_type(str(view.dtype), view.ndim, view.layout)
    return f"expected {describe_arg_spec(spec)}, got {got} ({why})"


@functools.lru_cache(maxsize=None)
def _np_dtype(name: str) -> np.dtype:
    return np.dtype(name)


def pack_numba_args(kernel: KernelSpec, args: Sequence[Any]) -> PackedArgs:
    """Pack `args` for a numba-compiled kernel; DispatchError if they do not fit its signature."""
    specs = kernel.args or ()
    if len(args) != len(specs):
        raise DispatchError(f"{kernel.describe()} takes {len(specs)} arguments, got {len(args)}")
    values: List[Tuple[str, Any]] = []
    for i, (spec, value) in enumerate(zip(specs, args)):
        what = f"argument {i} of {kernel.name}"
        if spec.kind == "array":
            values.extend(numba_array_values(spec, value, what))
        elif spec.kind == "scalar":
            values.extend(numba_scalar_values(str(spec.dtype), value, what))
        else:
            raise DispatchError(f"{what}: argument kind {spec.kind!r} is not supported by gpu_runtime")
    _check_params(kernel, values)
    return build_image(values)


def _check_params(kernel: KernelSpec, values: Sequence[Tuple[str, Any]]) -> None:
    if kernel.params is None:
        return
    if len(kernel.params) != len(values):
        raise DispatchError(
            f"{kernel.describe()}: the numba ABI gives {len(values)} parameters but the PTX entry "
            f"{kernel.entry} declares {len(kernel.params)}; the bundle and gpu_runtime disagree")
    for i, ((tname, _), ptext) in enumerate(zip(values, kernel.params)):
        if parse_param_type(tname).size != parse_param_type(ptext).size:
            raise DispatchError(
                f"{kernel.describe()}: parameter {i} is {ptext} in PTX but the numba ABI packs {tname}")


# --------------------------------------------------------------------------------------------
# C ABI (NVRTC kernels)


def device_pointer(value: Any) -> Optional[int]:
    """The device address of a device array / buffer, or None if `value` is not one."""
    view = array_view(value)
    if view is not None:
        return view.ptr
    for attr in ("handle", "ptr"):
        h = getattr(value, attr, None)
        if h is None or isinstance(value, (int, float, np.generic)):
            continue
        try:
            return int(h)  # int, or a cuda.bindings CUdeviceptr (whose int() is the address)
        except (TypeError, ValueError):
            continue
    return None


def c_param_value(ptext: str, value: Any, what: str) -> Tuple[str, Any]:
    pt = parse_param_type(ptext)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if pt.is_array:
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        elif isinstance(value, np.generic):
            data = value.tobytes()
        elif isinstance(value, float) and pt.size == 2:
            data = np.float16(value).tobytes()
        elif isinstance(value, complex) and pt.size in (8, 16):
            data = (np.complex64(value) if pt.size == 8 else np.complex128(value)).tobytes()
        else:
            raise DispatchError(f"{what}: {ptext} takes a numpy scalar or bytes of {pt.size} bytes, "
                                f"got {describe_value(value)}")
        if len(data) != pt.size:
            raise DispatchError(f"{what}: {ptext} takes {pt.size} bytes, got {len(data)}")
        return (pt.name, data)
    if pt.kind == "f":
        if pt.bits == 16:
            if isinstance(value, np.float16):
                return (pt.name, int(value.view(np.uint16)))
            return (pt.name, int(np.array(_to_float(value, what), dtype=np.float16).view(np.uint16)))
        v = _to_float(value, what)
        return (pt.name, float(np.float32(v)) if pt.bits == 32 else v)
    # integer-like: u/s/b
    if pt.bits == 64 and not isinstance(value, (int, np.integer)):
        ptr = device_pointer(value)
        if ptr is not None:
            return (pt.name, ptr)
        if _is_host_array(value):
            raise DispatchError(f"{what}: got a host (numpy) array where a device pointer is "
                                f"expected; use gpu_runtime.DeviceArray.from_numpy(a)")
    v = _to_int(value, what)
    lo, hi = -(1 << (pt.bits - 1)), (1 << pt.bits) - 1
    if not lo <= v <= hi:
        raise DispatchError(f"{what}: {v} does not fit in {pt.bits} bits ({ptext})")
    mask = (1 << pt.bits) - 1
    if pt.kind == "s":
        v &= mask
        if v >= 1 << (pt.bits - 1):
            v -= 1 << pt.bits
        return (pt.name, v)
    return (pt.name, v & mask)


def pack_c_args(kernel: KernelSpec, args: Sequence[Any]) -> PackedArgs:
    params = kernel.params
    if params is None:
        raise DispatchError(f"kernel {kernel.name} has no recorded PTX parameter types; cannot pack "
                            f"its arguments (rebuild the bundle with a current gpu_compiler)")
    if len(args) != len(params):
        raise DispatchError(f"{kernel.describe()} takes {len(params)} arguments, got {len(args)}")
    return build_image([c_param_value(p, v, f"argument {i} of {kernel.name} ({p})")
                        for i, (p, v) in enumerate(zip(params, args))])


def pack_args(kernel: KernelSpec, args: Sequence[Any]) -> PackedArgs:
    if kernel.abi == "numba":
        return pack_numba_args(kernel, args)
    if kernel.abi == "c":
        return pack_c_args(kernel, args)
    raise DispatchError(f"kernel {kernel.name}: unknown ABI {kernel.abi!r}")


# --------------------------------------------------------------------------------------------
# Dispatch among several signatures of one kernel name

_EXACT, _SAME_KIND, _CONVERT = 3, 2, 1


def _scalar_score(dtype_name: str, value: Any) -> Optional[int]:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    try:
        dt = _scalar_dtype(dtype_name)
    except DispatchError:
        return None
    if array_view(value) is not None or isinstance(value, np.ndarray):
        return None
    if isinstance(value, np.generic):
        vdt = value.dtype
        if vdt == dt:
            return _EXACT
        if vdt.kind == dt.kind:
            return _SAME_KIND if np.can_cast(vdt, dt, "safe") else None
        return _CONVERT if np.can_cast(vdt, dt, "safe") else None
    if isinstance(value, bool):
        return _EXACT if dt.kind == "b" else (_CONVERT if dt.kind in "iu" else None)
    if isinstance(value, int):
        if dt.kind in "iu":
            lo, hi = _INT_RANGES[dt.name]
            if not lo <= value <= hi:
                return None
            return _EXACT if dt.name == "int64" else _SAME_KIND
        return _CONVERT if dt.kind in "fc" else None
    if isinstance(value, float):
        if dt.kind == "f":
            return _EXACT if dt.itemsize == 8 else _SAME_KIND
        return _CONVERT if dt.kind == "c" else None
    if isinstance(value, complex):
        if dt.kind == "c":
            return _EXACT if dt.itemsize == 16 else _SAME_KIND
        return None
    return None


def _array_score(spec: ArgSpec, value: Any) -> Optional[int]:
    view = array_view(value)
    if view is None or _array_mismatch(spec, view):
        return None
    return _EXACT if spec.layout == view.layout else _CONVERT


def match_score(kernel: KernelSpec, args: Sequence[Any]) -> Tuple[Optional[int], str]:
    """(score, "") if `args` fit `kernel` (higher is a better fit), else (None, why not)."""
    if kernel.abi != "numba":
        n = len(kernel.params) if kernel.params is not None else None
        if n is None or n == len(args):
            return 1, ""
        return None, f"takes {n} arguments, got {len(args)}"
    specs = kernel.args or ()
    if len(specs) != len(args):
        return None, f"takes {len(specs)} arguments, got {len(args)}"
    total = 0
    for i, (spec, value) in enumerate(zip(specs, args)):
        if spec.kind == "array":
            s = _array_score(spec, value)
        elif spec.kind == "scalar":
            s = _scalar_score(str(spec.dtype), value)
        else:
            s = None
        if s is None:
            return None, f"argument {i} is {describe_value(value)}, not {describe_arg_spec(spec)}"
        total += s
    return total, ""


def select_overload(kernels: Sequence[KernelSpec], args: Sequence[Any], name: str = "") -> KernelSpec:
    """The signature that fits `args` best (ties: the first listed); DispatchError if none."""
    if len(kernels) == 1:
        # One signature: nothing to choose; packing checks every argument against it.
        return kernels[0]
    best: Optional[Tuple[int, int]] = None
    reasons = []
    for idx, k in enumerate(kernels):
        score, why = match_score(k, args)
        if score is None:
            reasons.append(f"    {k.describe()}: {why}")
        elif best is None or score > best[0]:
            best = (score, idx)
    if best is not None:
        return kernels[best[1]]
    given = ", ".join(describe_value(a) for a in args) or "no arguments"
    raise DispatchError(
        f"no signature of kernel {name or kernels[0].name!r} matches the arguments ({given});"
        f" its signatures:\n" + "\n".join(reasons))
