"""The compiler's failure report, as the CLI writes it and the plugin reads it."""

from __future__ import annotations

from gpu_spec.compile.report import failed_capabilities, failure_line

ALL = ("sm_75", "sm_80", "sm_87", "sm_90")


def test_failed_capabilities_from_the_compiler_report() -> None:
    report = "sm_80, sm_90: src/k.py:10: error: x\nmore\nsm_75: src/k.py: other\n"
    assert failed_capabilities(ALL, report) == ("sm_75", "sm_80", "sm_90")
    # A capability the process did not compile is not picked up from the text.
    assert failed_capabilities(("sm_87",), "sm_90: x") == ("sm_87",)
    # No capability named (the compiler crashed): all of them.
    assert failed_capabilities(ALL, "Traceback ...") == ALL


def test_what_the_compiler_writes_the_plugin_reads() -> None:
    report = failure_line(["sm_80", "sm_90"], "src/k.py:10: error: x") + "\n"
    assert report == "sm_80, sm_90: src/k.py:10: error: x\n"
    assert failed_capabilities(ALL, report) == ("sm_80", "sm_90")
