"""Derive a Pex complete platform for a device from an interpreter of the same Python minor.

Pex's `pex3 interpreter inspect --markers --tags` describes the interpreter it runs on. We have no
Jetson to run it on, so its platform is derived from a local CPython 3.10 inspection: the machine
becomes aarch64 and the manylinux tags stop at the device's glibc (JetPack 6 = Ubuntu 22.04,
glibc 2.35). The H200 box's is derived the same way from CPython 3.12 (x86_64).

    PEX_SCRIPT=pex3 python3.11 pex interpreter inspect --markers --tags --python python3.10 > in.json
    python3 derive_platform.py in.json aarch64 2.35 3.10.12 > jetson_orin_cp310.json

With the device at hand, prefer its own: `python3 -m gpu_runtime platform -o FILE` on it (or
`PEX_MODULE=gpu_runtime python3 app.pex platform -o FILE`; see docs/deploy_bundle.md). Derived
files keep x86's manylinux_2_5..2_16 tags for other machines, which the device's own file does
not list. Without pex, `python3.10 -m gpu_runtime platform --machine aarch64 --glibc 2.35`
derives the same tags as the device lists them (what docs/getting-started.md has users run).
"""

from __future__ import annotations

import json
import re
import sys


def derive(inspected: dict, machine: str, glibc: str, python: str) -> dict:
    glibc_major, glibc_minor = (int(p) for p in glibc.split("."))
    source_machine = inspected["marker_environment"]["platform_machine"]
    tags = []
    for tag in inspected["compatible_tags"]:
        tag = tag.replace(source_machine, machine)
        m = re.search(r"manylinux_(\d+)_(\d+)_", tag)
        if m and (int(m.group(1)), int(m.group(2))) > (glibc_major, glibc_minor):
            continue
        if tag not in tags:
            tags.append(tag)
    markers = dict(inspected["marker_environment"])
    markers.update(
        platform_machine=machine,
        implementation_version=python,
        python_full_version=python,
        platform_release="",
        platform_version="",
    )
    return {"compatible_tags": tags, "marker_environment": markers}


if __name__ == "__main__":
    path, machine, glibc, python = sys.argv[1:5]
    with open(path) as f:
        print(json.dumps(derive(json.load(f), machine, glibc, python), indent=1, sort_keys=True))
