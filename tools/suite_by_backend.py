"""Where a numerics suite run's time went: its junit XML (``pytest -m numerics --junitxml=FILE``)
summed by backend (the first part of each hunt's test id), or with ``--by-kernel`` by registry
entry, with its fastest, median and slowest test: an entry whose fastest test is slow pays a fixed
cost in every test (a compile, an autotune), whatever the profile's examples. Under xdist, the
``workers`` column counts the workers that ran the tests (this repository's conftest records each
test's worker): each of them paid the backend's start once.

    python tools/suite_by_backend.py [--by-kernel] run.xml [other.xml ...]

With ``--test-seconds``, instead: each claimed family's hunt (``test_claimed_family_is_clean``) and
its seconds, the median over the files that ran it, as JSON, the order ``tests/test_numerics.py``
collects them in (the longest first, within each backend's rank)::

    python tools/suite_by_backend.py --test-seconds cold.xml warm.xml > tests/numerics_seconds.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

from normprops.specs import KERNELS

# The registry's backends, longest first: "cuda-prod" is matched before "cuda".
BACKENDS = sorted({k.backend for k in KERNELS}, key=len, reverse=True)
_ID = re.compile(r"\[(" + "|".join(map(re.escape, BACKENDS)) + r")-")
# A hunt's id is [backend-kernel-family]; families have no "-", kernel names may ("softmax-bf16").
_KERNEL = re.compile(r"\[(" + "|".join(map(re.escape, BACKENDS)) + r")-(.+)-[a-z0-9_]+\]")


def _group(name: str, *, by_kernel: bool) -> str:
    match = (_KERNEL if by_kernel else _ID).search(name)
    if match is None:
        return "other"
    return " ".join(match.groups()) if by_kernel else match.group(1)


def summarize(path: str, *, by_kernel: bool = False) -> str:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SystemExit(f"{path}: not a readable junit XML file ({exc})") from None
    times: dict[str, list[float]] = defaultdict(list)
    workers: dict[str, set[str]] = defaultdict(set)
    skipped = failed = 0
    for case in root.iter("testcase"):
        if case.find("skipped") is not None:
            skipped += 1
            continue
        failed += case.find("failure") is not None or case.find("error") is not None
        group = _group(case.get("name") or "", by_kernel=by_kernel)
        times[group].append(float(case.get("time") or 0))
        workers[group].update(p.get("value") for p in case.iter("property")
                              if p.get("name") == "xdist_worker")
    ran = sum(len(v) for v in times.values())
    total = sum(sum(v) for v in times.values())
    lines = [f"{path}: {ran} tests run ({failed} failed), {skipped} skipped, {total:.0f} test-seconds"]
    width = max(14, *(len(name) for name in times)) if times else 14
    head = f"  {'kernel' if by_kernel else 'backend':{width}s} {'tests':>5s} {'seconds':>8s} {'mean':>6s}"
    recorded = any(workers.values())  # a run without xdist, or without the conftest, records none
    lines.append(head + (f" {'min':>6s} {'median':>6s}" if by_kernel else "") + f" {'max':>6s}"
                 + (f" {'workers':>7s}" if recorded else ""))
    for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        row = f"  {name:{width}s} {len(v):5d} {sum(v):8.0f} {sum(v) / len(v):6.2f}"
        if by_kernel:
            row += f" {min(v):6.1f} {statistics.median(v):6.1f}"
        lines.append(row + f" {max(v):6.1f}" + (f" {len(workers[name]):7d}" if recorded else ""))
    return "\n".join(lines)


def test_seconds(paths: list[str]) -> dict[str, float]:
    """``{hunt id: seconds}`` of the claimed families' hunts that ran (not skipped) in ``paths``,
    the median over the files that ran each, to a tenth of a second; sorted by id."""
    times: dict[str, list[float]] = defaultdict(list)
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as exc:
            raise SystemExit(f"{path}: not a readable junit XML file ({exc})") from None
        for case in root.iter("testcase"):
            name = case.get("name") or ""
            if case.find("skipped") is None and name.startswith("test_claimed_family_is_clean["):
                times[name[name.index("[") + 1:-1]].append(float(case.get("time") or 0))
    return {test: round(statistics.median(v), 1) for test, v in sorted(times.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by-kernel", action="store_true",
                        help="one row per registry entry, with its fastest and median test")
    parser.add_argument("--test-seconds", action="store_true",
                        help="each claimed family's hunt and its median seconds, as JSON")
    parser.add_argument("files", nargs="+", metavar="FILE.xml")
    args = parser.parse_args(argv)
    if args.test_seconds:
        print(json.dumps(test_seconds(args.files), indent=0))
        return 0
    for path in args.files:
        print(summarize(path, by_kernel=args.by_kernel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
