"""A launch plan's `repack` as one straight-line Python function, generated for its pattern.

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
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

SCALAR, DEVARRAY, OTHER = 0, 1, 2  # the kinds of one step: (kind, pattern part, reader)

Step = Tuple[int, Any, Any]


def _lines(i: int, step: Step) -> Tuple[List[str], str]:
    """(checks, the values' expression) of argument `i`."""
    kind, _, how = step
    a = f"a{i}"
    if kind == SCALAR:  # exactly the scalar type of the pattern: the value is packed as it is
        return [f"if {a}.__class__ is not w{i}: return None"], a
    if kind == DEVARRAY:  # the array's pattern part and values are kept on it (interned part)
        return [
            f"if {a}.__class__ is not DeviceArray: return None",
            f"e{i} = {a}._launch or device_array_entry({a})",
            f"if e{i}[1] is not w{i}: return None",
        ], f"*e{i}[{int(how)}]"
    return [f"v{i} = other_values(w{i}, h{i}, {a})", f"if v{i} is None: return None"], f"*v{i}"


def _tail(steps: Sequence[Step], writes: Sequence[Any], values: List[str]) -> List[str]:
    """The lines that write the values. With arrays (`DeviceArray`s) and single scalars only,
    when this thread's buffer already holds exactly these arrays' entries (`buf.arrays`, same
    objects, so the same values) only the scalars are written, each at its offset; otherwise
    the whole image, and then the entries it now holds."""
    full = f"pack_into(buf.data, 0{''.join(', ' + v for v in values)})"
    arrays = [i for i, (kind, _, _) in enumerate(steps) if kind == DEVARRAY]
    scalars = [i for i, (kind, _, _) in enumerate(steps) if kind != DEVARRAY]
    if not arrays or any(steps[i][0] != SCALAR or writes[i] is None for i in scalars):
        return [full, "return buf"]
    held = " and ".join(f"held[{j}] is e{i}" for j, i in enumerate(arrays))
    return [
        "held = buf.arrays",
        f"if held is not None and {held}:",
        *[f"    s{i}(buf.data, o{i}, a{i})" for i in scalars],
        "    return buf",
        "buf.arrays = None",  # until the whole image is written (pack_into may fail midway)
        full,
        f"buf.arrays = ({''.join(f'e{i}, ' for i in arrays)})",
        "return buf",
    ]


def compile_repack(
    steps: Sequence[Step],
    pack_into: Any,
    writes: Sequence[Any],
    local: Any,
    buffer: Any,
    names: Dict[str, Any],
) -> Callable[[Sequence[Any]], Any]:
    """The repack function of a plan: `steps` per argument, `pack_into` its struct's, `writes`
    per argument (pack_into, offset) of it alone or None, `local` its thread-local (`.buf`),
    `buffer` what makes a thread's first buffer; `names` gives DeviceArray, device_array_entry
    and other_values(pattern part, reader, argument) -> values or None."""
    n = len(steps)
    body = [f"if len(args) != {n}: return None"]
    if n:
        body.append(", ".join(f"a{i}" for i in range(n)) + ", = args")
    values = []
    for i, step in enumerate(steps):
        checks, expr = _lines(i, step)
        body += checks
        values.append(expr)
    body += ["try:", "    buf = local.buf", "except AttributeError:", "    buf = buffer()"]
    body += _tail(steps, writes, values)
    src = "def repack(args):\n" + "".join(f"    {line}\n" for line in body)
    namespace = dict(names, pack_into=pack_into, local=local, buffer=buffer)
    for i, (_, want, how) in enumerate(steps):
        namespace[f"w{i}"], namespace[f"h{i}"] = want, how
        if writes[i] is not None:
            namespace[f"s{i}"], namespace[f"o{i}"] = writes[i]
    exec(compile(src, "<gpu_runtime launch plan repack>", "exec"), namespace)
    return namespace["repack"]
