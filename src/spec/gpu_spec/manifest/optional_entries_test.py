"""The manifest's optional entries: cooperative kernels, "ptx_link" files, record
dtypes, raw pointers and 0-d arrays."""

from __future__ import annotations

import copy
import json

import pytest

from gpu_spec.conftest import XOROSHIRO128P, library_specs, write_bundle
from gpu_spec.errors import ManifestError
from gpu_spec.manifest.build import build_manifest
from gpu_spec.manifest.model import dumps_manifest, ptx_link_kind
from gpu_spec.manifest.parse import load_manifest, parse_manifest


def built():
    return build_manifest(
        "docs", "13.0", library_specs(["saxpy", "optional_entries"], caps=["sm_90"]), ["sm_90"]
    )


def _optional_entries_lib(data):
    return next(lib for lib in data["libraries"] if lib["name"] == "optional_entries")


def test_round_trip_of_the_new_entries():
    data = built()
    m = parse_manifest(json.loads(dumps_manifest(data)))
    assert m.to_dict() == data
    laplace, rng, cptr = m.library("optional_entries").variants[0].modules
    assert laplace.ptx_link == (
        "optional_entries/cuda13/sm_90/libcudadevrt.a",
        "optional_entries/cuda13/sm_90/functions.ptx",
    )
    assert all(p in m.files for p in laplace.ptx_link)
    assert laplace.kernels[0].cooperative is True
    assert rng.kernels[0].cooperative is False and rng.ptx_link == ()
    assert (rng.kernels[0].args or ())[0].dtype == XOROSHIRO128P
    assert [(a.kind, a.dtype, a.ndim) for a in cptr.kernels[0].args or ()] == [
        ("pointer", "float32", None),
        ("pointer", "void", None),
        ("array", "float32", 0),
    ]
    hash(cptr.kernels[0])  # still hashable with a record dtype beside
    hash(rng.kernels[0])


def test_old_entries_are_written_as_before():
    saxpy = next(lib for lib in built()["libraries"] if lib["name"] == "saxpy")
    module = saxpy["variants"][0]["modules"][0]
    assert "ptx_link" not in module and "cooperative" not in module["kernels"][0]


def test_bundle_on_disk_holds_the_link_files(tmp_path):
    cache = write_bundle(str(tmp_path), library_specs(["optional_entries"], caps=["sm_90"]))
    m = load_manifest(cache)
    assert (
        tmp_path / "cache" / m.library("optional_entries").variants[0].modules[0].ptx_link[0]
    ).is_file()


def test_link_file_kinds():
    assert ptx_link_kind("a/libcudadevrt.a") == "CU_JIT_INPUT_LIBRARY"
    assert ptx_link_kind("a/functions.ptx") == "CU_JIT_INPUT_PTX"
    assert ptx_link_kind("a/x.o") is None


def _mutated(fn):
    data = copy.deepcopy(built())
    fn(_optional_entries_lib(data)["variants"][0]["modules"])
    return data


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda ms: ms[0]["ptx_link"].append("optional_entries/cuda13/sm_90/nope.ptx"),
            "not listed in",
        ),
        (lambda ms: ms[0].update(ptx_link=["../x.a"]), ".."),
        (lambda ms: ms[0].update(ptx=None), 'ptx_link: given for a module without "ptx"'),
        (lambda ms: ms[0]["kernels"][0].update(cooperative="yes"), "cooperative: expected boolean"),
        (lambda ms: ms[2]["kernels"][0]["args"][0].pop("dtype"), "missing for a pointer argument"),
        (
            lambda ms: ms[1]["kernels"][0]["args"][0].update(dtype={"fields": [], "itemsize": 1}),
            "non-empty array of fields",
        ),
        (
            lambda ms: ms[1]["kernels"][0]["args"][0].update(dtype=5),
            "dtype: expected string or object",
        ),
    ],
)
def test_validation_of_the_new_entries(mutate, expected):
    with pytest.raises(ManifestError) as e:
        parse_manifest(_mutated(mutate))
    assert expected in str(e.value)


def test_unused_link_file_is_refused():
    data = _mutated(lambda ms: ms[0].pop("ptx_link"))
    with pytest.raises(ManifestError, match="libcudadevrt.a.*is not used by any module"):
        parse_manifest(data)


def test_kind_must_be_one_the_driver_linker_takes():
    def rename(ms):
        ms[0]["ptx_link"] = ["optional_entries/cuda13/sm_90/x.o"]

    data = _mutated(rename)
    data["files"]["optional_entries/cuda13/sm_90/x.o"] = "ab" * 32
    with pytest.raises(ManifestError, match="does not end in one of .ptx, .a"):
        parse_manifest(data)
