"""The device side of `pants experimental-deploy`: run as `python3 -` over ssh, standard library.

The deploy tool sends this file with one request appended (`main({...})`). Commands:

- state:  which release `current` points at, and its manifest's text (None on a first deploy);
- stage:  a fresh `releases/<id>.partial/` with the directories the bundle needs, holding a copy
          of every unchanged file from the current release (so releases never share a file);
          stale `.partial` directories of cut-off deploys are removed first;
- finish: the sha256 of every file of the staged release checked against the new bundle's,
          nothing extra allowed; then `.partial` renamed to `releases/<id>`, `current` switched
          to it with one rename of a new symlink (atomic), `previous` pointed at the release it
          replaced (for rollback: `ln -sfn "$(readlink previous)" current`), older releases
          removed.

Until `finish` renames the link, `current` and what it points at are not touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

RELEASES = "releases"
PARTIAL = ".partial"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _link_target(path: str):
    return os.readlink(path) if os.path.islink(path) else None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def state(req: dict) -> dict:
    current = os.path.join(req["base"], "current")
    target = _link_target(current)
    manifest = None
    if target is not None:
        try:
            with open(os.path.join(current, *req["manifest"].split("/"))) as f:
                manifest = f.read()
        except OSError:
            manifest = None
    return {"current": target, "manifest": manifest}


def stage(req: dict) -> dict:
    releases = os.path.join(req["base"], RELEASES)
    os.makedirs(releases, exist_ok=True)
    for name in os.listdir(releases):
        if name.endswith(PARTIAL):
            shutil.rmtree(os.path.join(releases, name))
    partial = os.path.join(releases, req["release"] + PARTIAL)
    os.makedirs(partial)
    for d in req["dirs"]:
        os.makedirs(os.path.join(partial, *d.split("/")), exist_ok=True)
    current = os.path.realpath(os.path.join(req["base"], "current"))
    for dst, src in req["copies"].items():
        shutil.copy2(os.path.join(current, *src.split("/")), os.path.join(partial, *dst.split("/")))
    return {"partial": partial}


def _problems(root: str, expected: dict) -> list:
    found = set()
    for dirpath, _, names in os.walk(root):
        for name in names:
            found.add(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    out = [f"missing: {p}" for p in sorted(set(expected) - found)]
    out += [f"unexpected: {p}" for p in sorted(found - set(expected))]
    for path in sorted(found & set(expected)):
        if _sha256(os.path.join(root, *path.split("/"))) != expected[path]:
            out.append(f"changed: {path}")
    return out


def _point(base: str, name: str, target: str) -> None:
    tmp = os.path.join(base, f".{name}.new")
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, os.path.join(base, name))


def finish(req: dict) -> dict:
    base, release = req["base"], req["release"]
    releases = os.path.join(base, RELEASES)
    partial = os.path.join(releases, release + PARTIAL)
    problems = _problems(partial, req["files"])
    if problems:
        return {"problems": problems}
    os.rename(partial, os.path.join(releases, release))
    _fsync_dir(releases)
    old = _link_target(os.path.join(base, "current"))
    _point(base, "current", f"{RELEASES}/{release}")
    if old is not None and old != f"{RELEASES}/{release}":
        _point(base, "previous", old)
    _fsync_dir(base)
    keep = {release, os.path.basename(old or "")}
    prev = _link_target(os.path.join(base, "previous"))
    keep.add(os.path.basename(prev or ""))
    removed = []
    for name in sorted(os.listdir(releases)):
        if name not in keep and not name.endswith(PARTIAL):
            shutil.rmtree(os.path.join(releases, name))
            removed.append(name)
    return {"previous": old, "removed": removed}


def main(req: dict) -> int:
    result = {"state": state, "stage": stage, "finish": finish}[req["command"]](req)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0
