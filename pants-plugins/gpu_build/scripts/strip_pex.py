"""Leaves build-only files out of the wheels in a PEX, zipapp or packed (stdlib only; runs in a
Process).

    strip_pex <in.pex> <out.pex> [--max-install-jobs N] <pattern>...

A zipapp PEX is one zip whose wheels are the directories `.deps/<wheel>/`; a packed PEX is a
directory whose wheels are the zips `.deps/<wheel>` (one file each, so a deploy that sends files
by hash skips the wheels that did not change). Both are stripped by the same rule.

Why: the wheels an app needs carry files only a build reads. cuda-bindings ships its Cython
sources and the C++ generated from them (about 90 MB unpacked of its 106 MB); a device never
compiles them. A PEX's first run writes every file of every wheel under PEX_ROOT, so those bytes
cost the device disk, the first run's time and the bundle's transfer.

A file of `.deps/<wheel>/` whose path inside the wheel matches a pattern (fnmatch, `*` crossing
`/`) is left out; nothing else changes but each stripped wheel's fingerprint (in its
`.layout.json` and PEX-INFO's `distributions`: the name of its directory under
PEX_ROOT/installed_wheels), which becomes a new value derived from the old and the files left
out, so the stripped wheel never fills the directory of the whole one, nor the reverse. The
PEX's `pex_hash` (the name of its venv under PEX_ROOT) stays: pex bakes it into its boot code,
which looks for the venv there before anything else (a changed hash in PEX-INFO alone made every
run miss that venv and boot the slow way: 0.55 s instead of 0.12 s). Entries keep their order,
names, dates and modes; the output is the same bytes for the same input. Prints one JSON line:
{wheel: number of files left out}.

Two things of a wheel depend on the build machine's state, not on the wheel, and are always
normalised: bytecode (`__pycache__/`, `*.pyc`) that an earlier run of Python wrote into pex's
installed copy of the wheel under PEX_ROOT (pex's `PEXBuilder._add_dist` copies every file of it,
so the same lockfile gave a PEX with or without them), left out without a new fingerprint (pex's
own fingerprint of an installed wheel already ignores bytecode); and modes, which came from the
umask of whichever run installed the wheel or wrote the file (`.bootstrap` was 0644 in one build
and 0755 in another): every file and zip entry becomes 0755 if its owner could execute it, else
0644, and `.bootstrap`, the wheels and PEX-INFO (data, never executed) 0644.

`--max-install-jobs N` also sets PEX-INFO's `max_install_jobs` (what pex's own
`--max-install-jobs` sets, which Pants' `pex_binary` does not offer): how many processes the
PEX's first run uses to install its wheels under PEX_ROOT (-1: pex's heuristic, in parallel
when the wheels average over 1 MB; 1: one at a time, pex's default).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import sys
import zipfile
from typing import Dict, List, Optional, Sequence

DEPS = ".deps/"
LAYOUT = ".layout.json"


def wheel_and_path(name: str):
    """(wheel, path inside it) of a `.deps/<wheel>/<path>` entry, else None."""
    if not name.startswith(DEPS) or name.endswith("/"):
        return None
    parts = name[len(DEPS) :].split("/", 1)
    return (parts[0], parts[1]) if len(parts) == 2 else None


def left_out(names: Sequence[str], patterns: Sequence[str]) -> Dict[str, List[str]]:
    """{wheel: [paths inside it to leave out]}; pex's own `.layout.json` is always kept."""
    out: Dict[str, List[str]] = {}
    for name in names:
        found = wheel_and_path(name)
        if found and found[1] != LAYOUT and any(fnmatch.fnmatch(found[1], p) for p in patterns):
            out.setdefault(found[0], []).append(found[1])
    return out


def is_bytecode(path: str) -> bool:
    """A compiled-Python file or directory entry: written by a run, never part of a wheel's
    content as pex fingerprints it."""
    return "__pycache__" in path.split("/") or path.endswith((".pyc", ".pyo"))


def normal_mode(mode: int) -> int:
    """0755 for what its owner could execute, else 0644: the same for every umask."""
    return 0o755 if mode & 0o100 else 0o644


def normal_zip_info(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """`info` with its Unix mode (the high 16 bits of external_attr) normalised; file type kept."""
    mode = info.external_attr >> 16
    if mode:
        kind = mode & 0o170000
        perms = 0o755 if info.is_dir() else normal_mode(mode)
        info.external_attr = ((kind | perms) << 16) | (info.external_attr & 0xFFFF)
    return info


# Files of a packed PEX that are read as data, never executed, whatever mode pex gave them.
_DATA_FILES = (".bootstrap", "PEX-INFO")


def new_fingerprint(old: str, removed: Sequence[str]) -> str:
    text = "\n".join(["gpu_build strip_pex 1", old, *sorted(removed)])
    return hashlib.sha256(text.encode()).hexdigest()


def strip(
    src: str, dst: str, patterns: Sequence[str], max_install_jobs: Optional[int] = None
) -> Dict[str, int]:
    """Writes `src` stripped to `dst`; {wheel: number of files left out}."""
    if os.path.isdir(src):
        return strip_packed(src, dst, patterns, max_install_jobs)
    with open(src, "rb") as f:
        zin = zipfile.ZipFile(f)
        infos = zin.infolist()
        removed = left_out([i.filename for i in infos], patterns)
        pex_info = json.loads(zin.read("PEX-INFO"))
        dists = pex_info.get("distributions", {})
        unlisted = sorted(set(removed) - set(dists))
        if unlisted:
            raise SystemExit(f"{src}: PEX-INFO lists no fingerprint for {unlisted}")
        renamed = {w: new_fingerprint(dists[w], paths) for w, paths in removed.items()}
        dists.update(renamed)
        if max_install_jobs is not None:
            pex_info["max_install_jobs"] = max_install_jobs
        f.seek(0)
        prefix = f.read(min((i.header_offset for i in infos), default=0))  # the shebang line
        drop = {f"{DEPS}{w}/{p}" for w, paths in removed.items() for p in paths}
        drop |= {
            i.filename
            for i in infos
            if i.filename.startswith(DEPS) and is_bytecode(i.filename.rstrip("/"))
        }
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        with open(dst, "wb") as out:
            out.write(prefix)
            with zipfile.ZipFile(out, "w") as zout:
                for info in infos:
                    if info.filename in drop:
                        continue
                    data = zin.read(info)
                    if info.filename == "PEX-INFO":
                        data = json.dumps(pex_info, sort_keys=True).encode()
                    found = wheel_and_path(info.filename)
                    if found and found[1] == LAYOUT and found[0] in renamed:
                        layout = json.loads(data)
                        layout["fingerprint"] = renamed[found[0]]
                        data = json.dumps(layout, sort_keys=True).encode()
                    zout.writestr(normal_zip_info(info), data, compress_type=info.compress_type)
    return {w: len(paths) for w, paths in sorted(removed.items())}


def strip_packed(
    src: str, dst: str, patterns: Sequence[str], max_install_jobs: Optional[int] = None
) -> Dict[str, int]:
    """The packed layout: each `.deps/<wheel>` zip rewritten without its build-only files (its
    `.layout.json` given the new fingerprint), PEX-INFO updated, every other file copied."""
    with open(os.path.join(src, "PEX-INFO"), "rb") as f:
        pex_info = json.loads(f.read())
    dists = pex_info.get("distributions", {})
    counts: Dict[str, int] = {}
    for rel in _files_under(src):
        out = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        wheel = rel[len(DEPS) :] if rel.startswith(DEPS) and "/" not in rel[len(DEPS) :] else None
        if wheel is None or rel == "PEX-INFO":
            if rel != "PEX-INFO":
                shutil.copyfile(os.path.join(src, rel), out)
                mode = os.stat(os.path.join(src, rel)).st_mode
                os.chmod(out, 0o644 if rel in _DATA_FILES else normal_mode(mode))
            continue
        if wheel not in dists:
            raise SystemExit(f"{src}: PEX-INFO lists no fingerprint for {wheel}")
        removed = _strip_wheel_zip(os.path.join(src, rel), out, patterns, dists[wheel])
        os.chmod(out, 0o644)
        if removed:
            dists[wheel] = new_fingerprint(dists[wheel], removed)
            counts[wheel] = len(removed)
    if max_install_jobs is not None:
        pex_info["max_install_jobs"] = max_install_jobs
    with open(os.path.join(dst, "PEX-INFO"), "wb") as f:
        f.write(json.dumps(pex_info, sort_keys=True).encode())
    os.chmod(os.path.join(dst, "PEX-INFO"), 0o644)
    return dict(sorted(counts.items()))


def _files_under(root: str) -> List[str]:
    found: List[str] = []
    for here, dirs, files in os.walk(root):
        dirs.sort()
        found.extend(os.path.relpath(os.path.join(here, n), root) for n in sorted(files))
    return [f.replace(os.sep, "/") for f in found]


def _strip_wheel_zip(src: str, dst: str, patterns: Sequence[str], fingerprint: str) -> List[str]:
    """Copies the wheel zip `src` to `dst` less the files `patterns` match and any bytecode, its
    entries' modes normalised; the paths `patterns` removed (bytecode is not counted: it changes
    no fingerprint)."""
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        removed = [
            i.filename
            for i in infos
            if not i.filename.endswith("/")
            and i.filename != LAYOUT
            and any(fnmatch.fnmatch(i.filename, p) for p in patterns)
        ]
        drop = set(removed) | {i.filename for i in infos if is_bytecode(i.filename)}
        modes_normal = all(_mode_is_normal(i) for i in infos)
        if not drop and modes_normal:
            shutil.copyfile(src, dst)
            return []
        renamed = new_fingerprint(fingerprint, removed) if removed else fingerprint
        with zipfile.ZipFile(dst, "w") as zout:
            for info in infos:
                if info.filename in drop:
                    continue
                data = zin.read(info)
                if info.filename == LAYOUT:  # packed wheels' layouts may not name it
                    layout = json.loads(data)
                    if "fingerprint" in layout:
                        layout["fingerprint"] = renamed
                        data = json.dumps(layout, sort_keys=True).encode()
                zout.writestr(normal_zip_info(info), data, compress_type=info.compress_type)
    return removed


def _mode_is_normal(info: zipfile.ZipInfo) -> bool:
    copy = zipfile.ZipInfo(info.filename)
    copy.external_attr = info.external_attr
    return normal_zip_info(copy).external_attr == info.external_attr


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst, rest = argv[0], argv[1], list(argv[2:])
    jobs = None
    if rest[:1] == ["--max-install-jobs"] and len(rest) >= 2:
        jobs, rest = int(rest[1]), rest[2:]
    print(json.dumps(strip(src, dst, rest, jobs), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
