"""What each distribution adds to a bundle's app PEX, and what bundle signatures cost in it.

    python3 tests/bench/pex_size_bench.py dist/imaging_h200/app.pex dist/imaging_orin/app.pex

Reads the PEX (a zipapp, or a packed directory: deploy_bundle's default) and prints one table
per PEX: per top-level entry (each `.deps/<wheel>`, the bootstrap, first-party packages) its
compressed and unpacked size, then the total of the signature check's dependencies (cryptography
and what it pulls in: cffi, pycparser). Sizes are exact byte counts of the file, not timings:
one run suffices."""

from __future__ import annotations

import argparse
import collections
import os
import zipfile

# typing_extensions: cryptography needs it on CPython < 3.11 (the Jetson PEX).
SIGNING_DISTS = ("cryptography-", "cffi-", "pycparser-", "typing_extensions-")
MIB = 1024 * 1024


def entry_sizes(pex: str) -> "dict[str, tuple[int, int]]":
    compressed: collections.Counter = collections.Counter()
    unpacked: collections.Counter = collections.Counter()
    if os.path.isdir(pex):  # packed: loose files, and each wheel one zip under .deps/
        for here, _, names in os.walk(pex):
            for name in names:
                path = os.path.join(here, name)
                rel = os.path.relpath(path, pex).split(os.sep)
                key = rel[1] if rel[0] == ".deps" and len(rel) > 1 else rel[0]
                compressed[key] += os.path.getsize(path)
                if rel[0] == ".deps" or rel[0] == ".bootstrap":
                    with zipfile.ZipFile(path) as zf:
                        unpacked[key] += sum(i.file_size for i in zf.infolist())
                else:
                    unpacked[key] += os.path.getsize(path)
        return {k: (compressed[k], unpacked[k]) for k in compressed}
    with zipfile.ZipFile(pex) as zf:
        for info in zf.infolist():
            parts = info.filename.split("/")
            key = parts[1] if parts[0] == ".deps" and len(parts) > 1 else parts[0]
            compressed[key] += info.compress_size
            unpacked[key] += info.file_size
    return {k: (compressed[k], unpacked[k]) for k in compressed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pex", nargs="+")
    for pex in parser.parse_args().pex:
        sizes = entry_sizes(pex)
        print(f"\n{pex}\n")
        print("| entry | in the PEX MiB | unpacked MiB |\n|---|---|---|")
        for name, (c, u) in sorted(sizes.items(), key=lambda kv: -kv[1][0]):
            if c >= MIB // 100:
                print(f"| {name} | {c / MIB:.2f} | {u / MIB:.2f} |")
        total_c = sum(c for c, _ in sizes.values())
        total_u = sum(u for _, u in sizes.values())
        sign_c = sum(c for n, (c, _) in sizes.items() if n.startswith(SIGNING_DISTS))
        sign_u = sum(u for n, (_, u) in sizes.items() if n.startswith(SIGNING_DISTS))
        print(f"| **whole PEX** | {total_c / MIB:.2f} | {total_u / MIB:.2f} |")
        print(
            "| **signature check (cryptography and its dependencies)** | "
            f"{sign_c / MIB:.2f} ({100 * sign_c / total_c:.0f}%) | {sign_u / MIB:.2f} |"
        )


if __name__ == "__main__":
    main()
