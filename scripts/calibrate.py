"""Calibrate the tolerance policy: how close correct algorithms come to it, how far bad ones pass it.

For every correct target (registered kernels on the families they claim, and the correct example
implementations on every family) it records the worst err/tol reached by a ``hypothesis.target``-
driven hunt; for every bad one (kept-bad kernels, planted bugs) the ratio of the worst and of the
shrunk example it found. Results go to JSON and a markdown table (docs/tolerances.md quotes them).

    python scripts/calibrate.py --examples 2000 --jobs 16 --json calibration.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from normprops.cli.common import resolve_impl
from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_callable, target_from_spec
from normprops.specs import KERNELS
from normprops.strategies import families_for


@dataclass(frozen=True)
class Job:
    kind: str  # "correct" or "bad"
    op: str
    name: str  # registry kernel name or MODULE:FUNC
    family: str
    registry: bool
    opt_in: frozenset[str] = frozenset()  # optional properties a planted bug needs to be caught


def jobs(backend: str) -> list[Job]:
    from normprops.examples.correct import CORRECT
    from normprops.examples.planted_catalog import PLANTED

    out: list[Job] = []
    for spec in KERNELS:
        if spec.backend != backend:
            continue
        for family in families_for(spec.op):
            if family in spec.claims:
                out.append(Job("correct", spec.op, spec.name, family, True))
        if spec.bug is not None:
            out.append(Job("bad", spec.op, spec.name, spec.bug.family, True))
    for impl in CORRECT:
        for family in families_for(impl.op):
            out.append(Job("correct", impl.op, f"normprops.examples.correct:{impl.func}", family, False))
    for bug in PLANTED:
        out.append(Job("bad", bug.op, f"normprops.examples.planted:{bug.func}", bug.family, False,
                       bug.opt_in))
    return out


def run(job: Job, examples: int, seed: int) -> dict:
    if job.registry:
        target = target_from_spec(next(k for k in KERNELS if k.name == job.name))
    else:
        target = target_from_callable(resolve_impl(job.name), op=job.op,
                                      name=job.name.partition(":")[2], opt_in=job.opt_in)
    # Bad targets are judged by how fast they are caught: 300 examples at most, as the tests ask.
    config = HuntConfig(max_examples=examples if job.kind == "correct" else min(examples, 300), seed=seed)
    start = time.perf_counter()
    result = hunt(target, family=job.family, config=config)
    row = {"kind": job.kind, "target": target.label, "family": job.family, "passed": result.passed,
           "examples": result.examples, "max_ratio": result.max_ratio,
           "seconds": round(time.perf_counter() - start, 2)}
    if result.failure is not None:
        row["property"] = result.failure.property
        row["minimal_ratio"] = result.failure.ratio
        row["worst_ratio"] = result.worst_verdict.ratio
        row["message"] = result.failure.message()
    return row


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return "inf (non-finite)" if not math.isfinite(v) else f"{v:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    todo = jobs(args.backend)
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run, todo, [args.examples] * len(todo), [args.seed] * len(todo)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"examples": args.examples, "seed": args.seed, "rows": rows}, f, indent=1)
    print("| kind | target | family | examples | verdict | worst err/tol | minimal err/tol |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        verdict = "pass" if r["passed"] else f"caught ({r['property']})"
        worst = r["max_ratio"] if r["passed"] else r.get("worst_ratio")
        print(f"| {r['kind']} | `{r['target']}` | {r['family']} | {r['examples']} | {verdict} | "
              f"{_fmt(worst)} | {_fmt(r.get('minimal_ratio'))} |")
    bad_correct = [r for r in rows if r["kind"] == "correct" and not r["passed"]]
    missed = [r for r in rows if r["kind"] == "bad" and r["passed"]]
    print(f"\ncorrect targets flagged: {len(bad_correct)}; bad targets missed: {len(missed)}")
    for r in bad_correct + missed:
        print("  ", r["target"], r["family"], r.get("message", "not caught"))


if __name__ == "__main__":
    main()
