"""Where a numerics suite run's time went: its junit XML (``pytest -m numerics --junitxml=FILE``)
summed by backend (the first part of each hunt's test id) and by test function.

    python tools/suite_by_backend.py run.xml [other.xml ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

from normprops.specs import KERNELS

# The registry's backends, longest first: "cuda-prod" is matched before "cuda".
BACKENDS = sorted({k.backend for k in KERNELS}, key=len, reverse=True)
_ID = re.compile(r"\[(" + "|".join(map(re.escape, BACKENDS)) + r")-")


def summarize(path: str) -> str:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SystemExit(f"{path}: not a readable junit XML file ({exc})") from None
    times: dict[str, list[float]] = defaultdict(list)
    skipped = failed = 0
    for case in root.iter("testcase"):
        if case.find("skipped") is not None:
            skipped += 1
            continue
        failed += case.find("failure") is not None or case.find("error") is not None
        match = _ID.search(case.get("name") or "")
        times[match.group(1) if match else "other"].append(float(case.get("time") or 0))
    ran = sum(len(v) for v in times.values())
    total = sum(sum(v) for v in times.values())
    lines = [f"{path}: {ran} tests run ({failed} failed), {skipped} skipped, {total:.0f} test-seconds"]
    lines.append(f"  {'backend':14s} {'tests':>5s} {'seconds':>8s} {'mean':>6s} {'max':>6s}")
    for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"  {name:14s} {len(v):5d} {sum(v):8.0f} {sum(v) / len(v):6.2f} {max(v):6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="FILE.xml")
    for path in parser.parse_args(argv).files:
        print(summarize(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
