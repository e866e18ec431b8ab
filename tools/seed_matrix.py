"""The same verdicts whatever the seed? Registry-hunt reports of several seeds (``normprops hunt
--backend B --seed S --shard K/N --json ...``), read back into one row of docs/registry.md's table
per backend: its cells, whether every report said the registry held, whether each claimed and
known-bug cell gave one verdict in every seed, and which unclaimed cells differed.

    python tools/seed_matrix.py --examples 100 B-s*.json

A cell counts only where it reached ``--examples``; one cut short by a time budget, or not reached,
is listed as not compared, and a report cut short is said to be.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def summarize(reports: list[dict], *, examples: int) -> list[str]:
    """One line per backend, then the cells compared short of all seeds and those that differed."""
    cells: dict[tuple[str, str, str], dict[int, tuple[bool, str]]] = defaultdict(dict)
    short: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    held = defaultdict(lambda: [0, 0, 0])  # reports, as declared, cut short
    worst: dict[str, float] = defaultdict(float)
    seeds: dict[str, set[int]] = defaultdict(set)
    for rep in reports:
        backend, seed = rep.get("backend") or "?", rep.get("seed")
        seeds[backend].add(seed)
        count = held[backend]
        count[0] += 1
        count[1] += not rep.get("not_as_declared")
        count[2] += bool(rep.get("cut_short"))
        for r in rep.get("results", []):
            key = (backend, r["kernel"], r["family"])
            if r["examples"] < examples and r["passed"]:
                short[key].add(seed)
                continue
            cells[key][seed] = (r["passed"], r["expected"])
            if r["expected"] == "claim" and r["passed"]:
                worst[backend] = max(worst[backend], float(r["max_ratio"]))
    lines = []
    for backend in sorted(held):
        mine = {k: v for k, v in cells.items() if k[0] == backend}
        every = {k: v for k, v in mine.items() if len(v) == len(seeds[backend])}
        differ = [k for k, v in every.items() if len({p for p, _ in v.values()}) > 1]
        kinds = defaultdict(int)
        for v in every.values():
            kinds[next(iter(v.values()))[1]] += 1
        bad = [k for k in differ if next(iter(every[k].values()))[1] != "unclaimed"]
        n, ok, cut = held[backend]
        lines.append(
            f"{backend}: {len(every)} cells in all {len(seeds[backend])} seeds at {examples} examples or "
            f"more ({kinds['claim']} claimed, {kinds['bug']} known bugs, {kinds['unclaimed']} unclaimed); "
            f"{ok} of {n} reports as declared, {cut} cut short; claimed and known-bug cells identical: "
            f"{'yes' if not bad else 'no'}; worst claimed err/tol {worst[backend]:.3g}")
        for k in sorted(differ):
            runs = ", ".join(f"seed {s} {'pass' if p else 'fail'}" for s, (p, _) in sorted(every[k].items()))
            lines.append(f"  differs: {k[1]} x {k[2]} ({next(iter(every[k].values()))[1]}): {runs}")
        partial = sorted(set(mine) - set(every))
        partial += sorted(k for k in short if k[0] == backend and k not in mine)
        for k in partial:
            got = sorted(mine.get(k, {}))
            lines.append(f"  not compared: {k[1]} x {k[2]} (full depth in seeds {got or 'none'})")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="hunt --json reports, any seeds and shards")
    parser.add_argument("--examples", type=int, default=100,
                        help="a cell is compared where it reached this many examples (default 100)")
    args = parser.parse_args()
    reports = []
    for path in args.reports:
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            print(f"{path}: not a readable report ({exc})", file=sys.stderr)
            return 2
    print("\n".join(summarize(reports, examples=args.examples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
