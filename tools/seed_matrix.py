"""The same verdicts whatever the seed? Registry-hunt reports of several seeds (``normprops hunt
--backend B --seed S --shard K/N --json ...``), read back into one row of docs/registry.md's table
per backend: its cells, whether every report said the registry held, whether each claimed and
known-bug cell gave one verdict in every seed, and which unclaimed cells differed.

    python tools/seed_matrix.py --examples 100 B-s*.json

A cell is compared where every seed hunted it to ``--examples`` (a failing cell counts at any
depth: the hunt stops at its failure); a cell cut short by a time budget, or named among a report's
cells not reached, in any seed is listed as not compared. A cell's verdict is whether it passed and
what the registry declared of it (claim, known bug, unclaimed), so a declaration that changed
between the runs shows as a difference too.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

Cell = tuple[str, str, str]  # backend, kernel, family
_NOT_REACHED = re.compile(r"^\w+\[(?P<kernel>.+)\] x (?P<family>\w+)$")


def _not_reached(rep: dict) -> list[Cell]:
    """The cells a report names as not reached ("op[kernel] x family"), with their backends: a
    kernel's backend as its target recorded it or, for a kernel never built (a hunt of several
    backends cut short before it), as the registry declares it among the hunt's backends."""
    from normprops.specs import KERNELS

    hunted = set((rep.get("backend") or "").split(","))
    backends = defaultdict(set)
    for t in rep.get("targets", []):
        backends[t.get("name")].add(t.get("backend"))
    declared = defaultdict(set)
    for k in KERNELS:
        if k.backend in hunted:
            declared[k.name].add(k.backend)
    cells = []
    for text in rep.get("not_reached") or []:
        m = _NOT_REACHED.match(text)
        if m:
            known = backends.get(m["kernel"]) or declared.get(m["kernel"], set())
            backend = next(iter(known)) if len(known) == 1 else rep.get("backend") or "?"
            cells.append((backend, m["kernel"], m["family"]))
    return cells


def summarize(reports: list[dict], *, examples: int) -> list[str]:
    """One line per backend, then its cells that differed between seeds and those not compared.
    Every report must carry its seed (:class:`ValueError` otherwise)."""
    verdicts: dict[Cell, dict[int, set[tuple[bool, str]]]] = defaultdict(lambda: defaultdict(set))
    ratios: dict[Cell, float] = defaultdict(float)
    short: dict[Cell, set[int]] = defaultdict(set)
    seeds: dict[str, set[int]] = defaultdict(set)
    held = defaultdict(lambda: [0, 0, 0])  # reports, as declared, cut short
    for rep in reports:
        seed = rep.get("seed")
        if seed is None:
            raise ValueError("a report of an unseeded hunt: the table compares seeds (hunt --seed S)")
        for r in rep.get("results", []):
            cell = (r.get("backend") or rep.get("backend") or "?", r["kernel"], r["family"])
            seeds[cell[0]].add(seed)
            if r["passed"] and r["examples"] < examples:
                short[cell].add(seed)
                continue
            verdicts[cell][seed].add((bool(r["passed"]), r["expected"]))
            if r["passed"]:
                ratios[cell] = max(ratios[cell], float(r["max_ratio"]))
        mine = {r.get("backend") or rep.get("backend") or "?" for r in rep.get("results", [])}
        for cell in _not_reached(rep):
            seeds[cell[0]].add(seed)
            short[cell].add(seed)
            mine.add(cell[0])
        for backend in mine:
            count = held[backend]
            count[0] += 1
            count[1] += not rep.get("not_as_declared")
            count[2] += bool(rep.get("cut_short"))
    lines = []
    for backend in sorted(seeds):
        mine = sorted(c for c in set(verdicts) | set(short) if c[0] == backend)
        every = [c for c in mine if c not in short and len(verdicts[c]) == len(seeds[backend])]
        seen = {c: set().union(*verdicts[c].values()) for c in every}
        differ = [c for c in every if len(seen[c]) > 1]
        kinds = defaultdict(int)
        for c in every:
            kinds[min(seen[c])[1]] += 1
        bad = [c for c in differ if any(kind != "unclaimed" for _, kind in seen[c])]
        worst = max((ratios[c] for c in every if seen[c] == {(True, "claim")}), default=0.0)
        n, ok, cut = held[backend]
        lines.append(
            f"{backend}: {len(every)} cells in all {len(seeds[backend])} seeds at {examples} examples or "
            f"more ({kinds['claim']} claimed, {kinds['bug']} known bugs, {kinds['unclaimed']} unclaimed); "
            f"{ok} of {n} reports as declared, {cut} cut short; claimed and known-bug cells identical: "
            f"{'yes' if not bad else 'no'}; worst claimed err/tol {worst:.3g}")
        for c in differ:
            runs = ", ".join(f"seed {s} " + "/".join(f"{'pass' if p else 'fail'} ({k})" for p, k in sorted(v))
                             for s, v in sorted(verdicts[c].items()))
            lines.append(f"  differs: {c[1]} x {c[2]}: {runs}")
        for c in mine:
            if c not in every:
                full = sorted(s for s in verdicts[c] if s not in short[c])
                lines.append(f"  not compared: {c[1]} x {c[2]} (full depth in seeds {full or 'none'})")
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
        if reports[-1].get("seed") is None:
            print(f"{path}: a report of an unseeded hunt; the table compares seeds (hunt --seed S)",
                  file=sys.stderr)
            return 2
    print("\n".join(summarize(reports, examples=args.examples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
