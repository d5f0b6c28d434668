"""manifest.schema.json describes what `build_manifest` writes: each fixture manifest (every
library kind, the optional entries, bundle_files) validates, and what the parser refuses for
its shape the schema refuses too. The built bundles' manifests are checked against it in
gpu_build's package_bundle_integration_test."""

from __future__ import annotations

import copy
import importlib
import json
import pathlib
from typing import Any, Callable, Dict

import pytest

from gpu_spec.conftest import LIBS, library_specs
from gpu_spec.errors import ManifestError
from gpu_spec.manifest.build import build_manifest
from gpu_spec.manifest.parse import parse_manifest

# a `file` of src/spec/gpu_spec/BUILD: at its path from the build root, the test's working directory
SCHEMA = pathlib.Path("src/spec/gpu_spec/manifest/manifest.schema.json")


def validator() -> Any:
    # jsonschema comes with the test runner (3rdparty/python/pytest-tool-requirements.txt):
    # gpu_spec itself is standard library only.
    jsonschema = importlib.import_module("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def built() -> Dict[str, Any]:
    manifest = build_manifest("imaging_h200", "13.0", library_specs(names=sorted(LIBS)))
    manifest["bundle_files"] = {"app.pex": "a" * 64}
    return manifest


def test_every_fixture_manifest_matches_the_schema() -> None:
    v = validator()
    for caps in (("sm_90",), ("sm_80", "sm_90")):
        manifest = build_manifest("b", "13.0", library_specs(names=sorted(LIBS), caps=caps))
        parse_manifest(manifest)
        assert not list(v.iter_errors(manifest))
    manifest = built()
    parse_manifest(manifest)
    errors = [e.message for e in v.iter_errors(manifest)]
    assert not errors, errors
    kernels = [
        k
        for lib in manifest["libraries"]
        for v_ in lib["variants"]
        for m in v_["modules"]
        for k in m["kernels"]
    ]
    # the optional entries are there to be checked
    assert any(k.get("cooperative") for k in kernels) and any("c_types" in k for k in kernels)


def _set(path: str, value: Any) -> Callable[[Dict[str, Any]], None]:
    def edit(manifest: Dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = manifest
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value

    return edit


KERNEL = "libraries.0.variants.0.modules.0.kernels.0"


@pytest.mark.parametrize(
    "edit",
    [
        _set("files", KeyError),
        _set("schema", 2),
        _set("driver", "13"),
        _set("capabilities", ["sm_9x"]),
        _set("libraries.0.source_sha256", "A" * 64),
        _set("libraries.0.language", "fortran"),
        _set("libraries.0.variants", []),
        _set("libraries.0.variants.0.modules.0.ptx", "/abs/saxpy.ptx"),
        _set("libraries.0.variants.0.modules.0.cubin", "a/../b.cubin"),
        _set(f"{KERNEL}.abi", "fortran"),
        _set(f"{KERNEL}.args", None),  # a numba kernel without its ABI
        _set(f"{KERNEL}.args", [{"kind": "array", "dtype": "float32"}]),  # no ndim
        _set("toolchains.cuda13", {"numba-cuda": "0.30"}),  # no cuda
    ],
    ids=lambda e: e.__closure__[0].cell_contents if e.__closure__ else "edit",
)
def test_what_the_parser_refuses_the_schema_refuses(edit: Callable[[Dict[str, Any]], None]) -> None:
    manifest = copy.deepcopy(built())
    assert manifest["libraries"][0]["language"] == "numba"  # histogram: KERNEL edits a numba one
    edit(manifest)
    with pytest.raises(ManifestError):
        parse_manifest(manifest)
    assert list(validator().iter_errors(manifest))
