"""Every file of a device bundle, with its sha256, as its manifest lists them.

A bundle directory holds `cache/manifest.json`, whose "files" (relative to `cache/`) and
"bundle_files" (relative to the bundle directory: the app PEX) together name every file but the
manifest and its signature. The runtime's `verify`, its check for an incomplete bundle and the
deploy tool all take the list from here, so "what a bundle is" is defined once.
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Tuple

from gpu_spec.manifest.model import MANIFEST_NAME

CACHE_DIR = "cache"
MANIFEST_PATH = f"{CACHE_DIR}/{MANIFEST_NAME}"  # relative to the bundle directory
SIGNATURE_NAME = f"{MANIFEST_NAME}.sig"  # beside the manifest
SIGNATURE_PATH = f"{CACHE_DIR}/{SIGNATURE_NAME}"


def bundle_file_digests(
    files: Mapping[str, str], bundle_files: Mapping[str, str]
) -> Dict[str, str]:
    """{path relative to the bundle directory: sha256} of every file the manifest lists."""
    out = {f"{CACHE_DIR}/{path}": digest for path, digest in files.items()}
    for path, digest in bundle_files.items():
        if path == CACHE_DIR or path.startswith(f"{CACHE_DIR}/"):
            raise ValueError(f'"bundle_files" may not name {path!r}: cache/ is "files"')
        out[path] = digest
    return dict(sorted(out.items()))


def missing_files(root: str, relpaths: Mapping[str, str]) -> List[str]:
    """The paths of `relpaths` (relative to `root`) that are not regular files there."""
    return [p for p in relpaths if not os.path.isfile(os.path.join(root, *p.split("/")))]


def incomplete_message(bundle: str, where: str, missing: int, total: int) -> str:
    """The one wording of "this bundle was not written (or copied) completely"."""
    return (
        f"bundle {bundle!r} ({where}) is incomplete: {missing} of {total} files missing: "
        f"re-run `pants package` (or copy the whole bundle directory again)"
    )


def split_cache_path(path: str) -> Tuple[str, str]:
    """("cache", rest) for a bundle path under cache/, else ("", path)."""
    head, _, rest = path.partition("/")
    return (CACHE_DIR, rest) if head == CACHE_DIR and rest else ("", path)


# -- the app's files beside cache/: one rule for `verify` and the runtime ------------------------
PYCACHE = "__pycache__"


def is_bytecode_of_listed(path: str, listed: Mapping[str, str]) -> bool:
    """Whether `path` is the bytecode Python writes for a listed source: `<d>/__pycache__/
    <stem>.<tag>.pyc` beside a listed `<d>/<stem>.py` (`python3 app.pex` writes
    `app.pex/__pycache__/__main__.cpython-312.pyc`). Python uses such a file only with its
    source; the launcher never reads it (it runs with `-X pycache_prefix`)."""
    head, _, name = path.rpartition("/")
    d, _, cache = head.rpartition("/")
    if cache != PYCACHE or not name.endswith(".pyc") or "." not in name[: -len(".pyc")]:
        return False
    source = name.split(".", 1)[0] + ".py"
    return (f"{d}/{source}" if d else source) in listed


def _inside(real: str, real_root: str) -> bool:
    return os.path.commonpath([real_root, real]) == real_root


def app_file_problems(bundle_dir: str, bundle_files: Mapping[str, str]) -> Dict[str, str]:
    """{bundle path: why it is refused, one line naming it and the fix} for the app files beside
    `cache/` (the manifest's "bundle_files", e.g. `app.pex` or a packed `app.pex/...`).

    The one rule of what may sit there, which `python -m gpu_runtime verify` and the runtime's
    opening of a bundle both apply (the sha256 of each file is verify's, and the launcher's):

    - no listed path may lead out of the bundle directory: a symlink on the way (`app.pex/`
      itself, or a file or directory inside it) that resolves outside is refused, named once
      (a link that stays inside, like a deployment's `current`, is followed);
    - a directory of the app (`app.pex/` of a packed PEX) holds only the files the manifest
      lists, and the bytecode Python writes for them (`is_bytecode_of_listed`): anything else,
      e.g. `app.pex/zzz.pth` (a .pth line runs code when Python starts) or a symlink, was put
      there after the build and is refused.

    Absent files are not this rule's (verify reports them missing); nothing is read, so this is
    cheap enough for every start of an app.
    """
    root = os.path.abspath(bundle_dir)
    real_root = os.path.realpath(root)
    fix = "copy the whole bundle directory again, or rebuild it with `pants package`"
    out: Dict[str, str] = {}
    escaped = set()
    for path in sorted(bundle_files):
        parts = path.split("/")
        for n in range(1, len(parts) + 1):
            prefix = "/".join(parts[:n])
            if prefix in escaped:
                break
            here = os.path.join(root, *parts[:n])
            if not os.path.islink(here):
                continue
            real = os.path.realpath(here)
            if not _inside(real, real_root):
                escaped.add(prefix)
                out[prefix] = (
                    f"{prefix} in bundle {root} is a symlink to {real}, outside the bundle "
                    f"directory: refusing to run an app from outside it; {fix}"
                )
                break
    dirs = sorted({path.split("/", 1)[0] for path in bundle_files if "/" in path} - escaped)
    for top in dirs:
        base = os.path.join(root, top)
        for here, dirnames, names in os.walk(base):
            rel_here = os.path.relpath(here, root).replace(os.sep, "/")
            links = [d for d in dirnames if os.path.islink(os.path.join(here, d))]
            for name in sorted(names + links):
                rel = f"{rel_here}/{name}"
                if rel in bundle_files or is_bytecode_of_listed(rel, bundle_files):
                    continue
                if any(rel == e or rel.startswith(f"{e}/") for e in escaped):
                    continue
                out[rel] = (
                    f"{rel} in bundle {root} is not one of the app's files (the manifest's "
                    f'"bundle_files" do not list it): refusing the app, since a file added to '
                    f"{top}/ runs with it (a .pth, a module); remove {rel}, or {fix}"
                )
            dirnames[:] = sorted(d for d in dirnames if d not in links)
    return dict(sorted(out.items()))
