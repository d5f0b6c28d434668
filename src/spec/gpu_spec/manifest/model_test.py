from __future__ import annotations

import copy
import hashlib
import json
import os

import pytest

from gpu_spec.conftest import SAXPY, file_bytes, library_specs, make_metadata, write_bundle
from gpu_spec.errors import ManifestError
from gpu_spec.manifest.build import build_manifest
from gpu_spec.manifest.model import SCHEMA_VERSION, dumps_manifest
from gpu_spec.manifest.parse import load_manifest, parse_manifest
from gpu_spec.manifest.paths import check_relpath, variant_dir
from gpu_spec.metadata import REQUIRED_KEYS


def built():
    return build_manifest("imaging_h200", "13.0", library_specs(), capabilities=["sm_90", "sm_80"])


def test_build_parse_round_trip():
    data = built()
    m = parse_manifest(json.loads(dumps_manifest(data)))
    assert m.to_dict() == data
    assert dumps_manifest(m) == dumps_manifest(data)
    assert m.schema == SCHEMA_VERSION
    assert m.capabilities == ("sm_80", "sm_90")
    assert [lib.name for lib in m.libraries] == ["histogram", "matmul", "saxpy", "sobel"]
    assert m.toolchains == {
        "cuda13": {
            "cuda": "13.0",
            "numba-cuda": "0.30.4",
            "nvrtc": "13.0.88",
            "nvjitlink": "13.0.88",
        }
    }
    saxpy = m.library("saxpy")
    assert [v.capability for v in saxpy.variants] == ["sm_80", "sm_90"]
    v = saxpy.variants[1]
    assert (v.toolchain, v.ptx_isa, v.min_driver, v.has_cubin, v.has_ptx) == (
        "cuda13",
        "9.0",
        "13.0",
        True,
        True,
    )
    mod = v.modules[0]
    assert mod.ptx == "saxpy/cuda13/sm_90/saxpy__0.ptx"
    assert mod.cubin == "saxpy/cuda13/sm_90/saxpy__0.cubin"
    k = mod.kernels[0]
    assert k.describe() == "saxpy(float32[::1], float32, float32[::1], float32[::1])"
    assert [a.kind for a in k.args or ()] == ["array", "scalar", "array", "array"]
    assert (
        m.files[mod.ptx]
        == hashlib.sha256(file_bytes("saxpy", "saxpy__0", "sm_90", "ptx")).hexdigest()
    )
    assert set(m.files) == {
        p
        for lib in m.libraries
        for v in lib.variants
        for mo in v.modules
        for p in (mo.ptx, mo.cubin)
    }
    assert m.library("histogram").kernel_names() == ["histogram_256", "sum_f32"]


def test_dumps_is_deterministic_and_sorted():
    a = dumps_manifest(built())
    specs = library_specs()
    specs.reverse()
    for s in specs:
        s["outputs"].reverse()
    b = dumps_manifest(
        build_manifest("imaging_h200", "13.0", specs, capabilities=["sm_80", "sm_90"])
    )
    assert a == b
    assert a.endswith("}\n")


def test_load_manifest_from_dir_and_file(tmp_path):
    cache = write_bundle(str(tmp_path), library_specs(["saxpy"]))
    assert load_manifest(cache).bundle == "imaging_h200"
    assert load_manifest(os.path.join(cache, "manifest.json")).library("saxpy").name == "saxpy"


def test_load_manifest_bad_json(tmp_path):
    p = tmp_path / "manifest.json"
    p.write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(str(p))
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(str(tmp_path / "nope.json"))


def _matmul_float(d):
    """The kernel dict of matmul<float, 16> (it records its declared C types)."""
    (lib,) = (x for x in d["libraries"] if x["name"] == "matmul")
    kernel = lib["variants"][0]["modules"][0]["kernels"][0]
    assert kernel["name"] == "matmul<float, 16>"
    return kernel


def test_declared_c_types_are_read_and_optional():
    """Manifests record c_types where the compiler wrote them; older kernels lack them."""
    m = parse_manifest(json.loads(dumps_manifest(built())))
    kernels = {k.name: k for k in m.library("matmul").variants[0].modules[0].kernels}
    assert kernels["matmul<float, 16>"].c_types == (
        "const float*",
        "const float*",
        "float*",
        "int",
        "int",
        "int",
    )
    assert kernels["matmul<double, 16>"].c_types is None
    assert "c_types" not in kernels["matmul<double, 16>"].to_dict()


def _broken(mutate):
    data = copy.deepcopy(built())
    mutate(data)
    with pytest.raises(ManifestError) as e:
        parse_manifest(data)
    return str(e.value)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d.update(schema=2), "schema 2 is newer than this gpu_runtime"),
        (lambda d: d.update(schema="1"), "unsupported manifest schema"),
        (lambda d: d.update(schema=True), "unsupported manifest schema true"),
        (lambda d: d.update(schema=1.0), "unsupported manifest schema 1.0"),
        (lambda d: d.pop("bundle"), "bundle: missing"),
        (lambda d: d.update(driver="13"), 'driver: "13" is not a CUDA version'),
        (lambda d: d.update(capabilities=["90"]), "capabilities[0]"),
        (lambda d: d["libraries"][0].update(name="../evil"), "libraries[0].name"),
        (lambda d: d["libraries"][0].update(language="fortran"), "is not one of numba, cuda_cpp"),
        (lambda d: d["libraries"][0].update(source_sha256="XYZ"), "sha256"),
        (
            lambda d: d["libraries"][0]["variants"][0].update(toolchain="cuda99"),
            'is not a key of "toolchains"',
        ),
        (
            lambda d: d["libraries"][0]["variants"][0].update(capability="compute_90"),
            "invalid GPU capability 'compute_90'",
        ),
        # Arch-specific targets are refused here as in BUILD files and compile options.
        (
            lambda d: d["libraries"][0]["variants"][0].update(capability="sm_90a"),
            "invalid GPU capability 'sm_90a'",
        ),
        (lambda d: d.update(capabilities=["sm_90", "sm_80"]), "are not unique and oldest first"),
        (
            lambda d: d["libraries"][0]["variants"][0].update(min_driver="11.8"),
            'min_driver: "11.8" is not 13.0, the oldest driver that loads PTX ISA 9.0',
        ),
        (
            lambda d: d["libraries"][0]["variants"][0].update(ptx_isa="9.9"),
            "unknown PTX ISA version",
        ),
        (
            lambda d: d["toolchains"]["cuda13"].pop("cuda"),
            "toolchains.cuda13.cuda: null is not a CUDA",
        ),
        (lambda d: d["libraries"][0]["variants"][0].update(modules=[]), "modules: is empty"),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0].update(ptx=None, cubin=None),
            'has neither "ptx" nor "cubin"',
        ),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0].update(ptx="../outside.ptx"),
            "contains '..'",
        ),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0].update(ptx="/etc/passwd"),
            "is absolute",
        ),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0].update(ptx="not/listed.ptx"),
            'is not listed in "files"',
        ),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0]["kernels"][0].update(
                abi="cdecl"
            ),
            "abi",
        ),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0]["kernels"][0].pop("entry"),
            "entry: missing",
        ),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0]["kernels"][0].update(
                args=None
            ),
            'required for abi "numba"',
        ),
        (
            lambda d: d["libraries"][0]["variants"][0]["modules"][0]["kernels"][0]["args"][
                0
            ].update(layout="K"),
            "layout",
        ),
        (
            lambda d: _matmul_float(d).update(c_types=["int"]),
            "kernels[0].c_types: 1 declared types for 6 PTX parameters",
        ),
        (
            lambda d: _matmul_float(d).update(c_types=["int", 4, "", "x", "y", "z"]),
            "kernels[0].c_types: expected a C type string, got 4",
        ),
        (lambda d: _matmul_float(d).update(c_types="int"), "c_types: expected array"),
        (lambda d: d["files"].update({"x/../../y": "0" * 64}), "contains '..'"),
        (lambda d: d["files"].update({"extra/file.ptx": "0" * 64}), "is not used by any module"),
        (lambda d: d["files"].update({next(iter(d["files"])): "BAD"}), "not a lowercase sha256"),
        (
            lambda d: d["libraries"].append(copy.deepcopy(d["libraries"][0])),
            "duplicate library names",
        ),
        (
            lambda d: d["libraries"][0]["variants"].append(
                copy.deepcopy(d["libraries"][0]["variants"][0])
            ),
            "more than one variant",
        ),
        (lambda d: d.update(libraries={}), "libraries: expected array"),
        (
            lambda d: d["libraries"][0]["variants"][0].update(min_driver=13.0),
            "expected string, got float",
        ),
        (lambda d: d["toolchains"].update(cuda13={"cuda": 13}), "toolchains.cuda13"),
    ],
)
def test_validation_errors(mutate, expected):
    assert expected in _broken(mutate)


def test_validation_lists_every_problem():
    def mutate(d):
        d.pop("bundle")
        d["libraries"][0]["variants"][0]["modules"][0].update(ptx="/abs.ptx")

    msg = _broken(mutate)
    assert "bundle: missing" in msg and "is absolute" in msg


def test_a_huge_broken_manifest_gives_a_short_error():
    """A generated or corrupted manifest can break a rule millions of times: the error lists the
    first problems and counts the rest (a 28 MB manifest once gave a 17 MB error)."""

    def mutate(d):
        module = d["libraries"][0]["variants"][0]["modules"][0]
        d["libraries"][0]["variants"][0]["modules"] = [
            dict(module, ptx=f"/abs/{i}.ptx") for i in range(20_000)
        ]
        d["bundle"] = "x" * 5_000_000

    msg = _broken(mutate)
    assert len(msg) < 5_000, len(msg)
    assert "more problem(s) like these" in msg and "is absolute" in msg


def test_top_level_must_be_object():
    with pytest.raises(ManifestError, match="JSON object"):
        parse_manifest([])


@pytest.mark.parametrize(
    "path, ok",
    [
        ("a/b.ptx", True),
        ("a.ptx", True),
        ("a/./b", False),
        ("../a", False),
        ("a/../b", False),
        ("/a", False),
        ("", False),
        ("a//b", False),
        ("a\\b", False),
        ("C:/x", False),
        ("a/\x00", False),
        ("a/", False),
        (5, False),
    ],
)
def test_check_relpath(path, ok):
    assert (check_relpath(path) is None) == ok


def test_build_rejects_inconsistent_outputs():
    specs = library_specs(["saxpy"])
    specs[0]["outputs"][1]["metadata"]["source_sha256"] = "cd" * 32
    with pytest.raises(ManifestError, match="different source"):
        build_manifest("b", "13.0", specs)


def test_build_rejects_missing_capability():
    with pytest.raises(ManifestError, match="library 'saxpy' has no code for sm_87"):
        build_manifest("b", "13.0", library_specs(["saxpy"]), capabilities=["sm_87", "sm_90"])


def test_build_checks_measured_digests():
    specs = library_specs(["saxpy"], caps=["sm_90"])
    specs[0]["outputs"][0]["digests"] = {"saxpy__0.ptx": "0" * 64}
    with pytest.raises(ManifestError, match="has sha256 0000"):
        build_manifest("b", "13.0", specs)


def test_build_rejects_bad_names_and_metadata():
    specs = library_specs(["saxpy"], caps=["sm_90"])
    specs[0]["name"] = "a/b"
    with pytest.raises(ManifestError, match="not a plain name"):
        build_manifest("b", "13.0", specs)
    specs = library_specs(["saxpy"], caps=["sm_90"])
    specs[0]["outputs"][0]["metadata"]["schema"] = 7
    with pytest.raises(ManifestError, match="metadata schema 7"):
        build_manifest("b", "13.0", specs)
    specs = library_specs(["saxpy"], caps=["sm_90"])
    specs[0]["outputs"][0]["metadata"]["modules"][0]["ptx"] = "../x.ptx"
    with pytest.raises(ManifestError, match="not a plain file name"):
        build_manifest("b", "13.0", specs)


def test_build_two_toolchains_same_capability():
    a = library_specs(["saxpy"], caps=["sm_87"], toolchain="cuda12", cuda="12.6")[0]
    b = library_specs(["saxpy"], caps=["sm_87"], toolchain="cuda13", cuda="13.0")[0]
    a["outputs"] += b["outputs"]
    m = parse_manifest(build_manifest("jetson", "12.6", [a]))
    assert [(v.toolchain, v.ptx_isa) for v in m.library("saxpy").variants] == [
        ("cuda12", "8.5"),
        ("cuda13", "9.0"),
    ]
    assert sorted(m.toolchains) == ["cuda12", "cuda13"]
    assert variant_dir("saxpy", "cuda12", "sm_87") + "/saxpy__0.ptx" in m.files


def test_toolchain_versions_may_be_null():
    specs = library_specs(["sobel"], caps=["sm_90"])
    specs[0]["outputs"][0]["metadata"]["toolchain"]["numba-cuda"] = None
    m = parse_manifest(build_manifest("b", "13.0", specs))
    assert m.toolchains["cuda13"]["numba-cuda"] is None


def test_metadata_fixture_matches_gpu_compiler_contract():
    md = make_metadata("s.py", "numba", SAXPY, "sm_90")
    assert set(md) == {*REQUIRED_KEYS, "schema", "options"}


def test_capabilities_are_ordered_numerically_not_as_strings():
    specs = library_specs(["sobel"], caps=["sm_100", "sm_90"])
    data = build_manifest("b", "13.0", specs)
    assert data["capabilities"] == ["sm_90", "sm_100"]
    assert [v["capability"] for v in data["libraries"][0]["variants"]] == ["sm_90", "sm_100"]


def test_variants_carry_their_toolchain_cuda_version():
    m = parse_manifest(built())
    assert {v.toolchain_cuda for lib in m.libraries for v in lib.variants} == {"13.0"}
    assert "toolchain_cuda" not in dumps_manifest(m)
