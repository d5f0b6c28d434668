"""The preprocessor's clock macros are refused at the line that uses them, in every spelling."""

from __future__ import annotations

import pytest

from gpu_compiler.cuda_cpp.includes import refuse_clock_macros
from gpu_compiler.errors import CompileError


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("const char* d = __DATE__;\n", 1, "__DATE__"),
        ("// a comment\n#define STAMP __TIME__\n", 2, "__TIME__"),
        ("int x;\n\n  __TIMESTAMP__\n", 3, "__TIMESTAMP__"),
        ("#define CAT(a, b) a##b\nconst char* d = CAT(__DA, TE__);\n", 2, "__DATE__ (pasted"),
        ("#define P(a, b) a ## b\nP(__TI, ME__)\n", 2, "__TIME__ (pasted"),
        ("#define D __DA\\\nTE__\n", 1, "__DATE__"),  # a backslash-newline inside the name
    ],
)
def test_refused_at_its_line(text, line, what):
    with pytest.raises(CompileError) as info:
        refuse_clock_macros("k/clock.cu", text)
    message = str(info.value)
    assert message.startswith("k/clock.cu:%d: error: refused %s" % (line, what)), message
    assert "fix: " in message and len(message.splitlines()) == 1


@pytest.mark.parametrize(
    "text",
    [
        '// built on __DATE__\nconst char* s = "__TIME__";\n',
        "/* __TIMESTAMP__\n */ int x;\n",
        "int MY__DATE__X = 1; char c = '_';\n",  # another identifier
        'const char* r = R"x(__DATE__ " )" )x";\n',  # a raw string with quotes in it
        "#define CAT(a, b) a##b\nint CAT(foo, bar);\n",  # pasting, no clock piece
    ],
)
def test_comments_literals_and_other_names_pass(text):
    refuse_clock_macros("k/clock.cu", text)
