"""A launch plan's `repack` and `fire` as straight-line Python functions, generated for its
pattern.

Why generated: a launch's own Python work is what stands between `Kernel.launch` and the bare
`cuLaunchKernel`, and a loop over the arguments that asks each one's kind costs about three
times the same checks written out for one fixed pattern (no loop, no per-argument dispatch, one
`pack_into` call with the values spread in place). The source is built only from this module's
templates and argument positions; everything else reaches it through its namespace, as
`collections.namedtuple` and `dataclasses` build their methods.

The generated function takes the launch's argument tuple and returns None, having written
nothing, when an argument does not have the plan's pattern (the caller then finds the right
plan by the pattern key), else this thread's buffer with the launch's values written. It raises
(struct.error, OverflowError, ...) on a value only the checked path can take, as `pack` does.
`fire` is the same function ending in the `cuLaunchKernel` call instead of returning the buffer:
it returns the call's status. Both first look whether the buffer already holds these very
arrays and scalar objects, and then write nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

SCALAR, DEVARRAY, OTHER = 0, 1, 2  # the kinds of one step: (kind, pattern part, reader)

Step = Tuple[int, Any, Any]


class _Exits(NamedTuple):
    """How the generated body leaves: `miss` where the arguments do not have the pattern,
    `done` once the buffer holds their values (a statement each, written in place)."""

    miss: str
    done: str


# repack: None, or the buffer. fire: None, or the launch's status (the dims unpacked, then one
# positional call, cheaper than spreading a tuple into it). The entry (`_ENTRY`): its loop is
# left for the checked path, or after the launch with its status.
_REPACK = _Exits("return None", "return buf")
_FIRE = _Exits(
    "return None",
    "gx, gy, gz, bx, by, bz = dims; "
    "return cu(func, gx, gy, gz, bx, by, bz, shared_mem, hstream, buf.address, 0)[0]",
)
_ENTRY_EXITS = _Exits(
    "break",
    "status = cu(func, gx, gy, gz, bx, by, bz, shared_mem, hstream, buf.address, 0)[0]; break",
)


def _lines(i: int, step: Step, miss: str) -> Tuple[List[str], str]:
    """(checks, the values' expression) of argument `i`."""
    kind, _, how = step
    a = f"a{i}"
    if kind == SCALAR:  # exactly the scalar type of the pattern: the value is packed as it is
        return [f"if {a}.__class__ is not w{i}: {miss}"], a
    if kind == DEVARRAY:  # the array's pattern part and values are kept on it (interned part)
        return [
            f"if {a}.__class__ is not DeviceArray: {miss}",
            f"e{i} = {a}._launch or device_array_entry({a})",
            f"if e{i}[1] is not w{i}: {miss}",
        ], f"*e{i}[{int(how)}]"
    return [f"v{i} = other_values(w{i}, h{i}, {a})", f"if v{i} is None: {miss}"], f"*v{i}"


def _kept(steps: Sequence[Step], writes: Sequence[Any]) -> Optional[Tuple[List[int], List[int]]]:
    """(array positions, scalar positions) when a buffer can keep values between launches: the
    arguments are `DeviceArray`s and scalars of one parameter each, at least one array; else
    None (every launch writes the whole image)."""
    arrays = [i for i, (kind, _, _) in enumerate(steps) if kind == DEVARRAY]
    scalars = [i for i, (kind, _, _) in enumerate(steps) if kind != DEVARRAY]
    if not arrays or any(steps[i][0] != SCALAR or writes[i] is None for i in scalars):
        return None
    return arrays, scalars


def _unchanged(steps: Sequence[Step], writes: Sequence[Any], done: str) -> List[str]:
    """Lines that return the buffer at once when it holds exactly these arguments' values: each
    scalar the very object it holds (numpy and Python scalars are immutable, so the same object
    has the same value), each array's entry (`_launch`) the very one it holds (only a live
    `DeviceArray` has it, so no type check is needed first; an object without one goes on to
    the checks, which refuse it). Empty where nothing is kept."""
    kept = _kept(steps, writes)
    if kept is None:
        return []
    arrays, scalars = kept
    same = [f"last[{j}] is a{i}" for j, i in enumerate(scalars)]
    same += [f"a{i}._launch is held[{j}]" for j, i in enumerate(arrays)]
    last = ["last = buf.scalars", "if last is not None:"] if scalars else ["if True:"]
    return [
        "held = buf.arrays",
        "if held is not None:",
        *[f"    {line}" for line in last],
        "        try:",  # free unless it raises (Python >= 3.11)
        f"            same = {' and '.join(same)}",
        "        except AttributeError:",
        "            same = False",
        "        if same:",
        f"            {done}",
    ]


def _tail(steps: Sequence[Step], writes: Sequence[Any], values: List[str], done: str) -> List[str]:
    """The lines that write the values, after `_unchanged` found something new. When this
    thread's buffer holds exactly these arrays' entries (`buf.arrays`, same objects, so the same
    values) only the scalars are written, each at its offset; otherwise the whole image, and then
    the entries and scalars (`buf.scalars`) it now holds."""
    full = f"pack_into(buf.data, 0{''.join(', ' + v for v in values)})"
    kept = _kept(steps, writes)
    if kept is None:
        return [full, done]
    arrays, scalars = kept
    entries = f"({''.join(f'e{i}, ' for i in arrays)})"
    objects = f"({''.join(f'a{i}, ' for i in scalars)})"
    lines = []
    if scalars:  # with no scalars, the same arrays were launched by `_unchanged`'s lines
        held = " and ".join(f"held[{j}] is e{i}" for j, i in enumerate(arrays))
        lines += [
            "held = buf.arrays",
            f"if held is not None and {held}:",
            "    buf.scalars = None",  # until every scalar is written (one may fail)
            *[f"    s{i}(buf.data, o{i}, a{i})" for i in scalars],
            f"    buf.scalars = {objects}",
            f"    {done}",
        ]
    return lines + [
        "buf.arrays = buf.scalars = None",  # until the whole image is written
        full,
        f"buf.arrays = {entries}",
        f"buf.scalars = {objects}",
        done,
    ]


def compile_repack(
    steps: Sequence[Step],
    pack_into: Any,
    writes: Sequence[Any],
    local: Any,
    buffer: Any,
    names: Dict[str, Any],
    launch: Optional[Tuple[Any, Any]] = None,
    entry: Optional[Dict[str, Any]] = None,
) -> Callable[..., Any]:
    """The repack function of a plan: `steps` per argument, `pack_into` its struct's, `writes`
    per argument (pack_into, offset) of it alone or None, `local` its thread-local (`.buf`),
    `buffer` what makes a thread's first buffer; `names` gives DeviceArray, device_array_entry
    and other_values(pattern part, reader, argument) -> values or None.

    With `launch` = (cu, func), the plan's `fire(args, dims, shared_mem, hstream)` instead:
    the same checks and writes, then `cu(func, *dims, shared_mem, hstream, void**, 0)` (the
    signature of cuda.bindings' `cuLaunchKernel`) in the same function, returning its status;
    None, having launched nothing, when `args` have another pattern.

    With `launch` and `entry` as well, the kernel's whole `launch(grid, block, *args,
    stream=None, shared_mem=0)` for this pattern (see `_ENTRY`): `entry` gives `kernel` (its
    `_last_dims` are the shape this function launches as it is), `ok` (the success status),
    `cu_stream`, `slow` (the `Kernel.launch` method, for another shape) and `checked` (the
    kernel's checked launch, for another pattern or a status other than `ok`)."""
    if launch is None:
        src = "def repack(args):\n" + _indented(_body(steps, writes, _REPACK), 4)
    elif entry is None:
        src = "def repack(args, dims, shared_mem, hstream):\n"
        src += _indented(_body(steps, writes, _FIRE), 4)
    else:
        src = _ENTRY.format(body=_indented(_body(steps, writes, _ENTRY_EXITS), 12))
    namespace = dict(names, pack_into=pack_into, local=local, buffer=buffer, **(entry or {}))
    if launch is not None:
        namespace["cu"], namespace["func"] = launch
    for i, (_, want, how) in enumerate(steps):
        namespace[f"w{i}"], namespace[f"h{i}"] = want, how
        if writes[i] is not None:
            namespace[f"s{i}"], namespace[f"o{i}"] = writes[i]
    exec(compile(src, "<gpu_runtime launch plan repack>", "exec"), namespace)
    made = namespace["repack"]
    if entry is not None:  # what help(kernel.launch) shows once it is this entry
        made.__name__ = made.__qualname__ = "launch"
        made.__doc__ = _ENTRY_DOC
    return made


def _body(steps: Sequence[Step], writes: Sequence[Any], exits: _Exits) -> List[str]:
    """The lines that check `args` against the pattern and write this thread's buffer,
    leaving by `exits`."""
    n = len(steps)
    body = [f"if len(args) != {n}: {exits.miss}"]
    if n:
        body.append(", ".join(f"a{i}" for i in range(n)) + ", = args")
    body += ["try:", "    buf = local.buf", "except AttributeError:", "    buf = buffer()"]
    body += _unchanged(steps, writes, exits.done)
    values = []
    for i, step in enumerate(steps):
        checks, expr = _lines(i, step, exits.miss)
        body += checks
        values.append(expr)
    return body + _tail(steps, writes, values, exits.done)


def _indented(lines: List[str], spaces: int) -> str:
    return "".join(f"{' ' * spaces}{line}\n" for line in lines)


# A plan's whole launch entry: one Python frame from the caller to `cuLaunchKernel`. The repack
# body runs in a `while True` that it leaves by `break`, so that every way out of it (another
# pattern, a value only the checked path takes, an exception, a status other than `ok`) ends
# in the one checked launch after the loop, outside the `try`: an error the checked path raises
# is the user's, not chained to one of ours. The launch shape is the kernel's last (the very
# grid and block objects, read like `Kernel.launch` reads them); any other goes to `slow`.
_ENTRY = """def repack(grid, block, *args, stream=None, shared_mem=0):
    last = kernel._last_dims
    if last[0] is not grid or last[1] is not block or shared_mem.__class__ is not int:
        return slow(kernel, grid, block, *args, stream=stream, shared_mem=shared_mem)
    if shared_mem < 0:
        return slow(kernel, grid, block, *args, stream=stream, shared_mem=shared_mem)
    dims = last[2]
    gx, gy, gz, bx, by, bz = dims
    hstream = None if stream is None else cu_stream(stream)
    status = None
    try:
        while True:
{body}    except Exception:
        pass
    if status is not ok:
        checked(args, dims, shared_mem, stream)
"""
_ENTRY_DOC = """Launch on `stream` (default: the legacy default stream); asynchronous like CUDA.

This kernel's launch for the argument pattern it saw last, generated for it by
gpu_runtime.launch.repack; another pattern or launch shape takes the checked path."""
