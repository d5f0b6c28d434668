"""CI's closing lines, from the JUnit reports of `./pants test --report` (standard library only).

Prints the seams probe table (each row a `probe` property of a tests/probes test), the `timing`
properties tests record (the aarch64 bundle's start times under qemu-user), then one line
counting test cases passed, failed and skipped, and a line per skip reason: a GPU test that skips
on a machine without one says so here instead of hiding inside "succeeded".

    python3 .ci/test_summary.py dist/test/reports
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import xml.etree.ElementTree as ET


def main(report_dir: str) -> int:
    counts: collections.Counter = collections.Counter()
    skipped: collections.Counter = collections.Counter()
    probes = []
    timings = []
    for path in sorted(glob.glob(os.path.join(report_dir, "*.xml"))):
        for case in ET.parse(path).getroot().iter("testcase"):
            for prop in case.iter("property"):
                if prop.get("name") == "probe":
                    probes.append(prop.get("value", ""))
                elif prop.get("name") == "timing":
                    timings.append(prop.get("value", ""))
            if case.find("skipped") is not None:
                counts["skipped"] += 1
                reason = case.find("skipped").get("message", "").strip() or "(no reason given)"
                skipped[reason.replace("\n", " ")[:160]] += 1
            elif case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
            else:
                counts["passed"] += 1
    if probes:
        rows = [p.split(" | ", 2) for p in probes]
        width = max(len(r[0]) for r in rows)
        print(f"\nseams probes ({len(rows)}):")
        print(f"{'probe'.ljust(width)} | class | result")
        for row in sorted(rows, key=lambda r: (r[1], r[0])):
            print(" | ".join([row[0].ljust(width), *row[1:]]))
    if timings:
        print("\ntimings:")
        for line in timings:
            print(f"  {line}")
    print(
        f"\ntest cases: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped"
    )
    for reason, n in skipped.most_common():
        print(f"  skipped {n}x: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "dist/test/reports"))
