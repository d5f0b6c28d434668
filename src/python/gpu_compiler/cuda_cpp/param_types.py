"""The declared parameter types of CUDA C++ kernels (metadata "c_types", `gpu_spec.c_types`).

How they are found: from the compiler, not from the source text. Parsing the declaration in
the source would miss macros, typedefs and template arguments; instead NVRTC is asked. Every
kernel is named by a C++ expression (an `extern "C"` kernel by its name, a template by its name
expression) and a second NVRTC program, the source plus one helper template, is compiled with
`-fdevice-syntax-only` and the name expressions `__gpu_build_param_types<decltype(&K)>`: the
lowered name NVRTC returns for each encodes K's function type in the Itanium C++ ABI
(`_Z23__gpu_build_param_typesIPFvPKfiEEvv`: `void (*)(const float*, int)`), which
`demangle_params` reads. A kernel with C++ linkage and no name expression needs no helper: its
own mangled entry name encodes its parameters (`_ZN2ns1kEPfi`). Top-level qualifiers such as
`__restrict__` are not part of a function type, so they are not recorded.

The helper program is separate from the one that produces the PTX, which thus keeps its bytes.
Anything this cannot read (a parameter type the small demangler does not know, an overloaded
name, a probe NVRTC refuses) leaves that kernel without "c_types": the runtime then checks the
PTX types alone, as it did before they existed.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

PROBE = "__gpu_build_param_types"
PROBE_SOURCE = b"\ntemplate <typename F> __global__ void " + PROBE.encode() + b"() {}\n"

# Itanium builtin type codes -> C spelling (gpu_spec.c_types.C_TYPE_DTYPES keys, and void/char)
_BUILTINS = {
    "v": "void",
    "b": "bool",
    "c": "char",
    "a": "signed char",
    "h": "unsigned char",
    "s": "short",
    "t": "unsigned short",
    "i": "int",
    "j": "unsigned int",
    "l": "long",
    "m": "unsigned long",
    "x": "long long",
    "y": "unsigned long long",
    "n": "__int128",
    "o": "unsigned __int128",
    "f": "float",
    "d": "double",
    "e": "long double",
    "w": "wchar_t",
}
_D_BUILTINS = {"Dh": "__fp16", "Ds": "char16_t", "Di": "char32_t", "Dn": "decltype(nullptr)"}


class _Unknown(Exception):
    """A mangling this small demangler does not read."""


class _Reader:
    def __init__(self, text: str, subs: Optional[List[str]] = None) -> None:
        self.s, self.i = text, 0
        self.subs: List[str] = list(subs or [])

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def take(self, n: int = 1) -> str:
        out = self.s[self.i : self.i + n]
        if len(out) != n:
            raise _Unknown("truncated")
        self.i += n
        return out

    def number(self) -> int:
        j = self.i
        while j < len(self.s) and self.s[j].isdigit():
            j += 1
        if j == self.i:
            raise _Unknown("expected a length")
        n, self.i = int(self.s[self.i : j]), j
        return n

    def source_name(self) -> str:
        name = self.take(self.number())
        if name.startswith("_GLOBAL__N"):
            return "(anonymous namespace)"
        return name

    def substitution(self) -> str:
        self.take()  # "S"
        if self.peek() == "_":
            self.take()
            index = 0
        else:
            j = self.s.find("_", self.i)
            if j < 0:
                raise _Unknown("bad substitution")
            seq = self.s[self.i : j]
            if not seq or not all(c.isdigit() or c.isupper() for c in seq):
                raise _Unknown(f"substitution S{seq}_")  # St, Sa, ...: std:: names
            index = int(seq, 36) + 1
            self.i = j + 1
        if index >= len(self.subs):
            raise _Unknown("substitution out of range")
        return self.subs[index]

    def nested_name(self, add_last: bool) -> str:
        """N <prefix>* <name> E; every prefix is a substitution candidate, the whole name too
        when it names a type (`add_last`)."""
        self.take()  # "N"
        parts: List[str] = []
        if self.peek() in ("K", "V", "r"):
            raise _Unknown("a cv-qualified member function")
        fresh = False  # the prefix so far is not yet a candidate (it came from no substitution)
        while self.peek() != "E":
            c = self.peek()
            if c == "S" and not parts:
                parts, fresh = [self.substitution()], False
                continue
            if not c.isdigit():
                raise _Unknown(f"nested name component {c!r}")  # templates, operators, ...
            if fresh:
                self.subs.append("::".join(parts))
            parts.append(self.source_name())
            fresh = True
        self.take()
        name = "::".join(parts)
        if add_last:
            self.subs.append(name)
        return name

    def type(self) -> str:
        c = self.peek()
        if c in _BUILTINS:
            self.take()
            return _BUILTINS[c]
        if c == "D":
            code = self.peek(2)
            if code == "DF" and self.s.startswith("DF16_", self.i):
                self.take(5)
                return "_Float16"
            if code in _D_BUILTINS:
                self.take(2)
                return _D_BUILTINS[code]
            raise _Unknown(f"builtin {code}")
        if c == "P":
            self.take()
            inner = self.type()
            out = f"{inner}*"
            self.subs.append(out)
            return out
        if c in ("K", "V", "r"):
            quals = ""
            while self.peek() in ("r", "V", "K"):
                quals += self.take()
            inner = self.type()
            words = [w for q, w in (("K", "const"), ("V", "volatile")) if q in quals]
            out = inner
            for w in words:
                out = f"{out} {w}" if out.endswith("*") else f"{w} {out}"
            self.subs.append(out)
            return out
        if c.isdigit():
            out = self.source_name()
            self.subs.append(out)
            return out
        if c == "N":
            return self.nested_name(add_last=True)
        if c == "S":
            return self.substitution()
        raise _Unknown(f"type code {c!r}")

    def params_until(self, end: str) -> List[str]:
        out: List[str] = []
        while self.i < len(self.s) and self.peek() != end:
            out.append(self.type())
        if out == ["void"]:
            return []  # f(void)
        return out


def demangle_params(mangled: str) -> Optional[List[str]]:
    """The parameter types encoded in a mangled name: either a probe's lowered name
    (`__gpu_build_param_types<void (*)(T...)>`) or a non-template C++ function
    (`_Z1kPfi`, `_ZN2ns1kEPfi`); None for anything else."""
    try:
        return _demangle(mangled)
    except _Unknown:
        return None


def _demangle(mangled: str) -> List[str]:
    if not mangled.startswith("_Z"):
        raise _Unknown("not mangled")
    r = _Reader(mangled)
    r.i = 2
    if r.peek() == "N":
        r.nested_name(add_last=False)
    else:
        name = r.source_name()
        if name == PROBE and r.peek() == "I":
            r.subs.append(name)  # an unscoped template name is a candidate
            r.take()  # "I"
            if r.take(3) != "PFv":
                raise _Unknown("probe argument is not a void function pointer")
            params = r.params_until("E")
            if r.s[r.i :] != "EEvv":
                raise _Unknown("trailing text")
            return params
    if r.peek() == "I":
        raise _Unknown("a template instance without a name expression")
    params = r.params_until("\0")
    return params


def kernel_expression(entry: str, expression: Optional[str]) -> Optional[str]:
    """The C++ expression naming a kernel for the probe, None when its entry name alone tells
    its parameters (C++ linkage, no name expression)."""
    if expression is not None:
        return expression.strip().lstrip("&").strip()
    return None if entry.startswith("_Z") else entry


def probe_expression(expression: str) -> str:
    return f"{PROBE}<decltype(&{expression})>"


def declared_param_types(
    kernels: Sequence[Tuple[str, Optional[str], int]],
    run_probe: Callable[[List[str]], Optional[Dict[str, str]]],
) -> Dict[str, List[str]]:
    """entry -> declared parameter types, for each (entry, name expression or None, number of
    PTX parameters) whose types could be read and agree in number with the PTX.

    `run_probe(probe expressions)` compiles the probe program and returns expression -> lowered
    name, or None if NVRTC refused it; one probe covers every kernel, and if it fails each
    kernel is tried alone, so one unreadable kernel costs only its own types."""
    out: Dict[str, List[str]] = {}
    wanted: Dict[str, Tuple[str, int]] = {}
    for entry, expression, nparams in kernels:
        expr = kernel_expression(entry, expression)
        if expr is None:
            params = demangle_params(entry)
            if params is not None and len(params) == nparams:
                out[entry] = params
        else:
            wanted[probe_expression(expr)] = (entry, nparams)
    if not wanted:
        return out
    lowered = run_probe(list(wanted))
    if lowered is None:
        lowered = {}
        for e in wanted:
            lowered.update(run_probe([e]) or {})
    for e, (entry, nparams) in wanted.items():
        params = demangle_params(lowered[e]) if e in lowered else None
        if params is not None and len(params) == nparams:
            out[entry] = params
    return out
