"""Reading `cache/manifest.json`: every field checked against the shared rules.

A manifest that breaks any rule is refused with one `ManifestError` that lists every problem,
so that a hand-edited or truncated bundle is explained in one go. The library entries are read by
`gpu_spec.manifest.entries`.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from gpu_spec.capabilities import sort_capabilities
from gpu_spec.errors import ManifestError
from gpu_spec.manifest.checker import SHA256_RE, Checker, short
from gpu_spec.manifest.entries import parse_capability_field, parse_library
from gpu_spec.manifest.model import MANIFEST_NAME, SCHEMA_VERSION, Library, Manifest
from gpu_spec.manifest.paths import check_relpath
from gpu_spec.safe_read import MAX_MANIFEST_BYTES, FileReadError, loads_json, read_regular_file
from gpu_spec.versions import is_version


def parse_manifest(data: Any, origin: str = "manifest") -> Manifest:
    """Validate a decoded manifest.json and return its `Manifest`.

    Raises `ManifestError` listing every problem found (not just the first), in one line.
    """
    if not isinstance(data, dict):
        raise ManifestError(
            f"{origin}: expected a JSON object at the top level, got {type(data).__name__}"
        )
    _check_schema(data.get("schema"), origin)
    c = Checker()
    bundle = c.string(data, "bundle", "")
    driver = c.string(data, "driver", "")
    if driver and not is_version(driver):
        c.err("driver", f'{short(driver)} is not a CUDA version like "13.0"')
    caps = _parse_capabilities(c, c.get(data, "capabilities", list, "", default=[]))
    tcs = _parse_toolchains(c, c.get(data, "toolchains", dict, "", default={}))
    files = _parse_files(c, c.get(data, "files", dict, "", default={}))
    libraries = _parse_libraries(c, c.get(data, "libraries", list, "", default=[]), files, tcs)
    bundle_files = _parse_files(
        c, c.get(data, "bundle_files", dict, "", optional=True, default={}), "bundle_files"
    )
    if c.errors:
        # One line (errors are one line each): the problems, separated by "; ".
        raise ManifestError(f"{origin} is invalid: " + "; ".join(_listed(c.errors)))
    return Manifest(
        bundle=bundle or "",
        driver=driver or "",
        capabilities=caps,
        toolchains=tcs,
        libraries=libraries,
        files=files,
        bundle_files=bundle_files,
    )


# Problems listed in one error: a hand-edited manifest has a few; a generated or corrupted one
# can have millions (a 28 MB manifest once gave a 17 MB error), which helps nobody.
MAX_LISTED_PROBLEMS = 20


def _listed(errors: List[str]) -> List[str]:
    if len(errors) <= MAX_LISTED_PROBLEMS:
        return errors
    more = len(errors) - MAX_LISTED_PROBLEMS
    return [*errors[:MAX_LISTED_PROBLEMS], f"... and {more} more problem(s) like these"]


def _check_schema(schema: Any, origin: str) -> None:
    # `true == 1` in Python: a bool is no schema number, whatever its value
    if schema == SCHEMA_VERSION and type(schema) is int:
        return
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise ManifestError(
            f"{origin}: manifest schema {schema} is newer than this gpu_runtime understands "
            f"(schema {SCHEMA_VERSION}); rebuild the bundle with a matching gpu_runtime"
        )
    raise ManifestError(
        f"{origin}: unsupported manifest schema {short(schema)} (expected {SCHEMA_VERSION})"
    )


def _parse_capabilities(c: Checker, raw: List[Any]) -> Tuple[str, ...]:
    caps = [
        cap
        for i, v in enumerate(raw)
        if (cap := parse_capability_field(c, v, f"capabilities[{i}]")) is not None
    ]
    if len(caps) == len(raw) and caps != sort_capabilities(caps):
        c.err("capabilities", f"{short(caps)} are not unique and oldest first")
    return tuple(caps)


def _parse_toolchains(c: Checker, raw: Mapping[str, Any]) -> Dict[str, Dict[str, Optional[str]]]:
    toolchains = {}
    for name, versions in raw.items():
        if not isinstance(versions, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in versions.items()
        ):
            c.err(f"toolchains.{name}", "expected an object of string (or null) versions")
            continue
        if not is_version(versions.get("cuda")):
            c.err(
                f"toolchains.{name}.cuda",
                f"{short(versions.get('cuda'))} is not a CUDA " f'version like "13.0"',
            )
            continue
        toolchains[name] = dict(versions)
    return toolchains


def _parse_files(c: Checker, raw: Mapping[str, Any], key: str = "files") -> Dict[str, str]:
    files: Dict[str, str] = {}
    for path, digest in raw.items():
        why = check_relpath(path)
        if why:
            c.err(f"{key}[{short(path)}]", why)
        elif not isinstance(digest, str) or not SHA256_RE.match(digest):
            c.err(f"{key}[{short(path)}]", f"{short(digest)} is not a lowercase sha256 hex digest")
        else:
            files[path] = digest
    return files


def _parse_libraries(
    c: Checker, raw: List[Any], files: Mapping[str, str], toolchains: Mapping[str, Any]
) -> Tuple[Library, ...]:
    libraries = [
        lib
        for i, r in enumerate(raw)
        if (lib := parse_library(c, r, f"libraries[{i}]", files, toolchains)) is not None
    ]
    names = [lib.name for lib in libraries]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        c.err("libraries", f"duplicate library names: {', '.join(dups)}")
    used = {
        path
        for lib in libraries
        for v in lib.variants
        for m in v.modules
        for path in (m.ptx, m.cubin, *m.ptx_link)
        if path
    }
    for path in sorted(set(files) - used):
        c.err(f"files[{short(path)}]", "is not used by any module")
    return tuple(libraries)


def load_manifest(path: Union[str, "os.PathLike[str]"]) -> Manifest:
    """Read and validate a manifest.json file (or the manifest.json inside a cache directory)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, MANIFEST_NAME)
    try:
        raw = read_regular_file(path, MAX_MANIFEST_BYTES, "bundle manifest")
    except FileReadError as e:
        raise ManifestError(str(e)) from e
    except OSError as e:
        raise ManifestError(f"cannot read {path}: {e.strerror or e}") from e
    return loads_manifest(raw, origin=path)


def loads_manifest(raw: bytes, origin: str = "manifest") -> Manifest:
    """Validate the bytes of a manifest.json (those a signature was checked on)."""
    try:
        data = loads_json(raw, origin)
    except FileReadError as e:  # nested too deeply: already one line naming the file
        raise ManifestError(str(e)) from e
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestError(f"{origin} is not valid JSON: {e}") from e
    return parse_manifest(data, origin=origin)
