from __future__ import annotations

import pytest

from gpu_runtime.bundle.selection import select_variant
from gpu_runtime.errors import NoCompatibleVariantError
from gpu_spec.manifest.model import ModuleSpec, Variant
from gpu_spec.ptx_isa import min_driver_for_ptx

ISA = {"13.0": "9.0", "12.8": "8.7", "12.6": "8.5", "12.2": "8.2"}


def V(
    cap: str,
    cuda: str = "13.0",
    cubin: bool = True,
    ptx: bool = True,
    toolchain: str = "",
    isa: str = "",
) -> Variant:
    """A variant compiled for `cap` by a CUDA `cuda` toolchain, as gpu_compiler records it."""
    tc = toolchain or f"cuda{cuda.split('.')[0]}"
    mod = ModuleSpec(
        name="m",
        ptx=f"{cap}/m.ptx" if ptx else None,
        cubin=f"{cap}/m.cubin" if cubin else None,
        kernels=(),
    )
    isa = isa or ISA[cuda]
    return Variant(
        capability=cap,
        toolchain=tc,
        toolchain_cuda=cuda,
        ptx_isa=isa,
        min_driver=min_driver_for_ptx(isa),
        modules=(mod,),
    )


def pick(variants, cc, driver):
    c = select_variant(variants, cc, driver)
    return (c.kind, c.variant.capability, c.variant.toolchain)


# (variants present, device capability, driver CUDA version) -> (kind, capability, toolchain)
TABLE = [
    # exact cubin wins over everything
    ([V("sm_80"), V("sm_90")], (9, 0), "13.0", ("cubin", "sm_90", "cuda13")),
    ([V("sm_90"), V("sm_80")], "sm_90", 13000, ("cubin", "sm_90", "cuda13")),
    (
        [V("sm_75"), V("sm_80"), V("sm_87"), V("sm_90")],
        (8, 7),
        "13.0",
        ("cubin", "sm_87", "cuda13"),
    ),
    # same major, lower minor: highest such cubin
    ([V("sm_80"), V("sm_75")], (8, 6), "13.0", ("cubin", "sm_80", "cuda13")),
    ([V("sm_80"), V("sm_86"), V("sm_90")], (8, 9), "13.0", ("cubin", "sm_86", "cuda13")),
    ([V("sm_86"), V("sm_80")], (8, 7), (13, 0), ("cubin", "sm_86", "cuda13")),
    # a higher minor cubin never runs on a lower minor device -> PTX of a lower capability
    ([V("sm_87"), V("sm_80", cubin=False)], (8, 6), "13.0", ("ptx", "sm_80", "cuda13")),
    # no cubin of the same major: PTX for the highest capability <= device
    ([V("sm_75"), V("sm_80")], (9, 0), "13.0", ("ptx", "sm_80", "cuda13")),
    ([V("sm_75"), V("sm_80"), V("sm_90")], (10, 0), "13.0", ("ptx", "sm_90", "cuda13")),
    ([V("sm_75"), V("sm_80"), V("sm_90")], (12, 0), "13.1", ("ptx", "sm_90", "cuda13")),
    # PTX only in the bundle
    (
        [V("sm_80", cubin=False), V("sm_90", cubin=False)],
        (9, 0),
        "13.0",
        ("ptx", "sm_90", "cuda13"),
    ),
    # cubin only, exact
    ([V("sm_90", ptx=False)], (9, 0), "13.0", ("cubin", "sm_90", "cuda13")),
    # a CUDA 13 cubin needs a CUDA 13 driver: on a 12.x driver fall back to CUDA 12 PTX
    ([V("sm_90", "13.0"), V("sm_80", "12.6")], (9, 0), "12.8", ("ptx", "sm_80", "cuda12")),
    # ...or to a CUDA 12 cubin of the same capability
    ([V("sm_87", "13.0"), V("sm_87", "12.6")], (8, 7), "12.6", ("cubin", "sm_87", "cuda12")),
    # two toolchains, both fine: the newer one
    ([V("sm_87", "12.6"), V("sm_87", "13.0")], (8, 7), "13.0", ("cubin", "sm_87", "cuda13")),
    (
        [V("sm_80", "12.6", cubin=False), V("sm_80", "13.0", cubin=False)],
        (9, 0),
        "13.0",
        ("ptx", "sm_80", "cuda13"),
    ),
    # driver too old for the newest PTX, fine for the older toolchain's PTX
    (
        [V("sm_80", "12.6", cubin=False), V("sm_80", "13.0", cubin=False)],
        (9, 0),
        "12.8",
        ("ptx", "sm_80", "cuda12"),
    ),
    # Jetson: sm_87 cubin of a CUDA 12.6 toolchain on a 12.6 driver
    ([V("sm_87", "12.6"), V("sm_90", "12.6")], (8, 7), "12.6", ("cubin", "sm_87", "cuda12")),
    # driver minor version compatibility: a 12.6 cubin on a 12.2 driver is fine...
    ([V("sm_87", "12.6")], (8, 7), "12.2", ("cubin", "sm_87", "cuda12")),
]


@pytest.mark.parametrize("variants, cc, driver, expected", TABLE)
def test_selection_table(variants, cc, driver, expected):
    assert pick(variants, cc, driver) == expected


# (variants, device, driver) -> fragments the error must contain
ERRORS = [
    # only newer capabilities
    (
        [V("sm_90")],
        (8, 7),
        "13.0",
        ["cubin sm_90: does not run on sm_87", "ptx sm_90: newer than sm_87"],
    ),
    # ...but the PTX ISA is too new for the driver, and the cubin is of another major
    (
        [V("sm_80")],
        (9, 0),
        "12.8",
        [
            "ptx sm_80: PTX ISA 9.0 needs driver >= 13.0 (have 12.8)",
            "upgrade the driver to CUDA >= 13.0",
        ],
    ),
    # a 12.6-only PTX on a 12.4 driver: the ISA 8.5 needs 12.5
    (
        [V("sm_80", "12.6", cubin=False)],
        (8, 6),
        "12.4",
        ["PTX ISA 8.5 needs driver >= 12.5 (have 12.4)"],
    ),
    # cubin of the right capability but a newer CUDA major than the driver, no PTX
    (
        [V("sm_90", "13.0", ptx=False)],
        (9, 0),
        "12.8",
        ["built with CUDA 13.x, needs a CUDA 13.x driver"],
    ),
    ([], (9, 0), "13.0", ["bundle holds: nothing"]),
]


@pytest.mark.parametrize("variants, cc, driver, fragments", ERRORS)
def test_selection_errors(variants, cc, driver, fragments):
    with pytest.raises(NoCompatibleVariantError) as e:
        select_variant(variants, cc, driver)
    msg = str(e.value)
    for f in fragments:
        assert f in msg, msg


def test_error_names_bundle_device_and_fix():
    with pytest.raises(NoCompatibleVariantError) as e:
        select_variant(
            [V("sm_90"), V("sm_80", cubin=False)],
            (7, 5),
            13000,
            device_name="Tesla T4",
            library="saxpy",
            bundle="imaging_h200",
        )
    msg = str(e.value)
    assert (
        msg.splitlines()[0]
        == "No GPU code in library 'saxpy' in bundle 'imaging_h200' can run on this device."
    )
    assert "device: Tesla T4 (sm_75), driver supports CUDA 13.0" in msg
    assert (
        "bundle holds: sm_90 [cubin+ptx; toolchain cuda13, PTX ISA 9.0 needs driver >= 13.0], "
        "sm_80 [ptx; toolchain cuda13, PTX ISA 9.0 needs driver >= 13.0]"
    ) in msg
    assert (
        "add \"sm_75\" to the capabilities of the deploy_bundle 'imaging_h200' and run "
        "`pants package`" in msg
    )


@pytest.mark.parametrize(
    "kinds, expected",
    [
        (("ptx",), ("ptx", "sm_90", "cuda13")),
        (("cubin",), ("cubin", "sm_90", "cuda13")),
    ],
)
def test_kinds_restriction(kinds, expected):
    c = select_variant([V("sm_80"), V("sm_90")], (9, 0), "13.0", kinds=kinds)
    assert (c.kind, c.capability, c.variant.toolchain) == expected


def test_kinds_restriction_error_mentions_it():
    with pytest.raises(NoCompatibleVariantError, match="only ptx allowed"):
        select_variant([V("sm_90", ptx=False)], (9, 0), "13.0", kinds=("ptx",))


def test_unknown_capability_is_skipped_not_fatal():
    odd = V("sm_90")
    odd = Variant(
        capability="sm_99",
        toolchain="cuda13",
        toolchain_cuda="13.0",
        ptx_isa="9.0",
        min_driver="13.0",
        modules=odd.modules,
    )
    assert pick([odd, V("sm_80")], (8, 0), "13.0") == ("cubin", "sm_80", "cuda13")


def test_relabelled_ptx_does_not_make_a_cubin_loadable():
    """A cuda13 variant whose PTX was relabelled ISA 7.8 (`ptx_version="7.8"`), on a 12.6 driver:
    its cubin needs a CUDA 13 driver whatever the PTX says; the relabelled PTX does load."""
    relabelled = V("sm_90", "13.0", isa="7.8")
    assert relabelled.min_driver == "11.8"
    choice = select_variant([relabelled], (9, 0), "12.6")
    assert (choice.kind, choice.capability) == ("ptx", "sm_90")
    with pytest.raises(NoCompatibleVariantError, match="built with CUDA 13.x, needs a CUDA 13.x"):
        select_variant([relabelled], (9, 0), "12.6", kinds=("cubin",))


def test_choice_reason_is_readable():
    c = select_variant([V("sm_80")], (9, 0), "13.0")
    assert "JIT-compiling PTX sm_80 (ISA 9.0) with driver 13.0" in c.reason
    c = select_variant([V("sm_80")], (8, 6), "13.0")
    assert c.reason == "cubin sm_80 is binary-compatible with sm_86"
