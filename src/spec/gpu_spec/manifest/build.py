"""Writing a manifest from compile metadata: the plugin for a bundle, the runtime for its cache.

`build_manifest` takes, per library (gpu_kernel target), the `metadata.json` of each of its
compiles and returns the manifest dict, checked by `parse_manifest` before it is returned. The
caller places each compile's files at `variant_dir(name, toolchain, capability)` under `cache/`
(or the "dir" it gave) and writes `dumps_manifest(result)` to `cache/manifest.json`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from gpu_spec.capabilities import parse_capability, sort_capabilities
from gpu_spec.errors import ManifestError, SpecError
from gpu_spec.manifest.checker import NAME_RE, SHA256_RE
from gpu_spec.manifest.model import SCHEMA_VERSION
from gpu_spec.manifest.parse import parse_manifest
from gpu_spec.manifest.paths import check_relpath, variant_dir
from gpu_spec.metadata import METADATA_SCHEMA_VERSION, REQUIRED_KEYS

Versions = Dict[str, Optional[str]]


@dataclass
class _LibraryDraft:
    """One library's entry as its compile outputs are added, with every problem found."""

    name: str
    target: str
    errors: List[str] = field(default_factory=list)
    toolchains: Dict[str, Versions] = field(default_factory=dict)
    files: Dict[str, str] = field(default_factory=dict)
    variants: List[Dict[str, Any]] = field(default_factory=list)
    source: Optional[tuple] = None  # (source, source_sha256, language) of the first output

    def add_file(self, path: str, digest: str, where: str) -> None:
        if path in self.files and self.files[path] != digest:
            self.errors.append(f"{where}: two different files would be placed at {path}")
        self.files[path] = digest

    def to_dict(self) -> Dict[str, Any]:
        source, source_sha256, language = self.source or (None, None, None)
        self.variants.sort(key=lambda v: (parse_capability(v["capability"]), v["toolchain"]))
        return {
            "name": self.name,
            "target": self.target,
            "source": source,
            "source_sha256": source_sha256,
            "language": language,
            "variants": self.variants,
        }


def _metadata_problem(toolchain: Any, metadata: Any) -> Optional[str]:
    """Why one compile output cannot be used at all, or None."""
    if not isinstance(toolchain, str) or not toolchain:
        return 'missing "toolchain" name'
    if not isinstance(metadata, dict):
        return 'missing "metadata" object'
    if metadata.get("schema") != METADATA_SCHEMA_VERSION:
        return f"metadata schema {metadata.get('schema')!r} is not {METADATA_SCHEMA_VERSION}"
    missing = [k for k in REQUIRED_KEYS if k not in metadata]
    if missing:
        return f"metadata lacks {', '.join(missing)}"
    try:
        parse_capability(metadata["capability"])
    except SpecError as e:
        return str(e)
    return None


def _same_source(draft: _LibraryDraft, md: Mapping[str, Any], where: str) -> bool:
    """Every output of one library must come from the same source bytes."""
    source = (md["source"], md["source_sha256"], md["language"])
    if draft.source is None:
        draft.source = source
    elif source != draft.source:
        draft.errors.append(
            f"{where}: metadata for {md['capability']} was compiled from a different source "
            f"({md['source']} {md['source_sha256'][:12]}) than the other outputs "
            f"({draft.source[0]} {str(draft.source[1])[:12]}): stale compile output?"
        )
        return False
    return True


def _module_file(
    draft: _LibraryDraft,
    module: Mapping[str, Any],
    key: str,
    vdir: str,
    digests: Mapping[str, str],
    where: str,
) -> Optional[str]:
    """The cache path of a module's "ptx" or "cubin" file (its digest recorded), or None."""
    return _place_file(
        draft, module.get(key), module.get(f"{key}_sha256"), key, vdir, digests, where
    )


def _link_files(
    draft: _LibraryDraft,
    module: Mapping[str, Any],
    vdir: str,
    digests: Mapping[str, str],
    where: str,
) -> List[str]:
    """The cache paths of a module's "ptx_link" files; metadata gives their digests in
    "ptx_link_sha256" ({file name: sha256})."""
    names = module.get("ptx_link") or []
    recorded = module.get("ptx_link_sha256") or {}
    if not isinstance(names, list) or not isinstance(recorded, dict):
        draft.errors.append(f"{where}: ptx_link is not a list of file names with their digests")
        return []
    placed = [
        _place_file(draft, n, recorded.get(n), "ptx_link", vdir, digests, where) for n in names
    ]
    return [p for p in placed if p]


def _place_file(
    draft: _LibraryDraft,
    fname: Any,
    recorded: Any,
    key: str,
    vdir: str,
    digests: Mapping[str, str],
    where: str,
) -> Optional[str]:
    if not fname:
        return None
    if not isinstance(fname, str) or "/" in fname or check_relpath(fname):
        draft.errors.append(f"{where}: {key} file name {fname!r} is not a plain file name")
        return None
    measured = digests.get(fname)
    if measured is not None and recorded is not None and measured != recorded:
        draft.errors.append(
            f"{where}: {fname} has sha256 {measured} but its metadata says {recorded}"
        )
        return None
    digest = measured or recorded
    if not isinstance(digest, str) or not SHA256_RE.match(digest):
        draft.errors.append(f"{where}: no valid sha256 for {fname}")
        return None
    draft.add_file(f"{vdir}/{fname}", digest, where)
    return f"{vdir}/{fname}"


def _add_output(draft: _LibraryDraft, out: Mapping[str, Any], where: str) -> None:
    toolchain, md = out.get("toolchain"), out.get("metadata")
    problem = _metadata_problem(toolchain, md)
    if problem:
        draft.errors.append(f"{where}: {problem}")
        return
    assert isinstance(toolchain, str) and isinstance(md, dict)
    if not _same_source(draft, md, where):
        return
    versions = {str(k): (None if v is None else str(v)) for k, v in (md["toolchain"] or {}).items()}
    if draft.toolchains.setdefault(toolchain, versions) != versions:
        draft.errors.append(
            f"{where}: toolchain {toolchain!r} versions {versions} differ from "
            f"{draft.toolchains[toolchain]}"
        )
    vdir = out.get("dir") or variant_dir(draft.name, toolchain, md["capability"])
    why = check_relpath(vdir + "/x")
    if why:
        draft.errors.append(f"{where}: output dir {vdir!r}: {why}")
        return
    digests = out.get("digests") or {}
    modules = []
    for j, m in enumerate(md["modules"]):
        mw = f"{where} module {j}"
        module = {
            "name": m.get("name"),
            "ptx": _module_file(draft, m, "ptx", vdir, digests, mw),
            "cubin": _module_file(draft, m, "cubin", vdir, digests, mw),
            "kernels": m.get("kernels"),
        }
        link = _link_files(draft, m, vdir, digests, mw)
        if link:
            module["ptx_link"] = link
        modules.append(module)
    draft.variants.append(
        {
            "capability": md["capability"],
            "toolchain": toolchain,
            "ptx_isa": md["ptx_isa"],
            "min_driver": md["min_driver"],
            "options": md.get("options") or {},
            "modules": modules,
        }
    )


def library_from_metadata(
    name: str, target: str, outputs: Sequence[Mapping[str, Any]]
) -> _LibraryDraft:
    """One gpu_kernel target's compile outputs as a manifest library entry.

    `outputs`: one mapping per (toolchain, capability) compile, with keys
      * "toolchain": toolchain name (e.g. "cuda13"),
      * "metadata": the decoded metadata.json that gpu_compiler wrote,
      * "dir" (optional): where its files go, relative to cache/
        (default `variant_dir(name, toolchain, capability)`),
      * "digests" (optional): {file name in the compile output: sha256} as measured by the
        caller (the plugin has them from Pants' snapshot); they must agree with the metadata.
    Raises `ManifestError` on inconsistent or malformed metadata.
    """
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
        raise ManifestError(
            f"library name {name!r} is not a plain name ([A-Za-z0-9_.+-], no leading dot)"
        )
    if not outputs:
        raise ManifestError(f"library {name!r}: no compile outputs")
    draft = _LibraryDraft(name=name, target=target)
    for i, out in enumerate(outputs):
        _add_output(draft, out, f"library {name!r} output {i}")
    if draft.errors:
        raise ManifestError("cannot build the manifest:\n  " + "\n  ".join(draft.errors))
    return draft


def _merge(into: Dict[str, Any], new: Mapping[str, Any], what: str, errors: List[str]) -> None:
    for key, value in new.items():
        if key in into and into[key] != value:
            errors.append(what.format(key=key, new=value, old=into[key]))
        into.setdefault(key, value)


def build_manifest(
    bundle: str,
    driver: str,
    libraries: Iterable[Mapping[str, Any]],
    capabilities: Optional[Sequence[str]] = None,
    bundle_files: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """The manifest dict of a bundle (or a cache), checked by `parse_manifest`.

    `libraries`: one mapping per gpu_kernel target: {"name": target name, "target": address,
    "outputs": [...]}, "outputs" as `library_from_metadata` takes them. `capabilities`: what the
    deploy_bundle asked for; each library must have code for each. Default: all compiled.
    `bundle_files`: {path relative to the bundle directory: sha256} of its files outside cache/
    (the app PEX).
    """
    libs: List[Dict[str, Any]] = []
    toolchains: Dict[str, Any] = {}
    files: Dict[str, Any] = {}
    errors: List[str] = []
    for spec in libraries:
        try:
            draft = library_from_metadata(
                spec["name"], spec.get("target", spec["name"]), spec.get("outputs") or ()
            )
        except ManifestError as e:
            errors.append(str(e))
            continue
        _merge(
            toolchains,
            draft.toolchains,
            "toolchain {key!r}: library "
            + repr(draft.name)
            + " was compiled with {new}, another with {old}",
            errors,
        )
        _merge(files, draft.files, "two different files would be placed at {key}", errors)
        libs.append(draft.to_dict())
    compiled = {v["capability"] for lib in libs for v in lib["variants"]}
    caps = sort_capabilities(capabilities if capabilities is not None else compiled)
    for lib in libs if capabilities is not None else ():
        lacking = [c for c in caps if c not in {v["capability"] for v in lib["variants"]}]
        if lacking:
            errors.append(f"library {lib['name']!r} has no code for {', '.join(lacking)}")
    if errors:
        raise ManifestError("cannot build the manifest:\n  " + "\n  ".join(errors))
    data = {
        "schema": SCHEMA_VERSION,
        "bundle": bundle,
        "driver": driver,
        "capabilities": caps,
        "toolchains": toolchains,
        "libraries": sorted(libs, key=lambda lib: lib["name"]),
        "files": dict(sorted(files.items())),
        **({"bundle_files": dict(sorted(bundle_files.items()))} if bundle_files else {}),
    }
    parse_manifest(data, origin=f"manifest of bundle {bundle!r}")  # check what we wrote
    return data
