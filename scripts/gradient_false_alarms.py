"""False alarms and catches of the example gradient kernels over many seeds, hunted as a user's
kernels are (their own declarations, the defaults otherwise): every correct design of
``normprops.examples.backward_correct`` (and the torch CPU ones of ``normprops.examples.frameworks``
where torch imports) on every family of its op, every planted bug of ``backward_planted`` in its
family, each at seeds 0 to SEEDS - 1 (docs/tolerances.md, "Gradients" quotes the counts):

    python scripts/gradient_false_alarms.py --seeds 20 --examples 100 --jobs 2

Exit 0 when no correct design was flagged and every planted bug was caught in every seed, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from normprops.cli.common import resolve_impl
from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_callable
from normprops.ops import get_op
from normprops.strategies import families_for

_TORCH_GRADS = (("softmax_backward", "torch_softmax_backward"),
                ("layernorm_backward", "torch_layer_norm_backward"),
                ("rmsnorm_backward", "torch_rms_norm_backward"))


@dataclass(frozen=True)
class Job:
    kind: str  # "correct" or "planted"
    op: str
    impl: str  # MODULE:FUNC
    family: str
    seed: int
    keywords: dict[str, Any] = field(default_factory=dict)  # target_from_callable's, as declared


def jobs(*, seeds: int, torch: bool) -> list[Job]:
    from normprops.examples.backward_correct import CORRECT
    from normprops.examples.backward_planted import PLANTED

    designs = [(i.op, f"normprops.examples.backward_correct:{i.func}", i.declared) for i in CORRECT]
    if torch:
        designs += [(op, f"normprops.examples.frameworks:{func}",
                     {"framework": "torch", "device": "cpu"}) for op, func in _TORCH_GRADS]
    out = [Job("correct", op, impl, family, seed, keywords)
           for op, impl, keywords in designs for family in families_for(op) for seed in range(seeds)]
    out += [Job("planted", p.op, f"normprops.examples.backward_planted:{p.func}", p.family, seed,
                {"dtype": p.dtype}) for p in PLANTED for seed in range(seeds)]
    return out


def run(job: Job, examples: int) -> dict[str, Any]:
    target = target_from_callable(resolve_impl(job.impl), op=job.op, **job.keywords)
    start = time.perf_counter()
    result = hunt(target, family=job.family, config=HuntConfig(max_examples=examples, seed=job.seed))
    row = {"kind": job.kind, "impl": job.impl.partition(":")[2], "family": job.family,
           "seed": job.seed, "passed": result.passed,
           "row_reduction": target.row_reduction if get_op(job.op).has_gamma else "-",
           "max_ratio": result.max_ratio, "seconds": round(time.perf_counter() - start, 2)}
    if result.failure is not None:
        row["worst_ratio"] = result.worst_verdict.ratio
        row["message"] = result.failure.message()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0 to SEEDS - 1 (default 20)")
    parser.add_argument("--examples", type=int, default=100,
                        help="examples per hunt (default 100, the ci profile's)")
    parser.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--no-torch", action="store_true", help="leave out the torch CPU designs")
    parser.add_argument("--jsonl", help="write each hunt's row to this file as it ends")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        with_torch = not args.no_torch
    except ImportError:
        with_torch = False
    todo = jobs(seeds=args.seeds, torch=with_torch)
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool, open(args.jsonl or "/dev/null", "w") as log:
        for row in pool.map(run, todo, [args.examples] * len(todo)):
            rows.append(row)
            print(json.dumps(row), file=log, flush=True)
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["kind"], r["impl"], r["row_reduction"])].append(r)
    print(f"{args.seeds} seeds, {args.examples} examples a hunt"
          f"{'' if with_torch else ' (torch not imported: no torch designs)'}")
    print("| kind | design | rows summed | hunts | flagged / missed "
          "| worst err/tol (planted: weakest catch) |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for (kind, impl, reduction), group in by.items():
        if kind == "correct":
            wrong = [r for r in group if not r["passed"]]
            worst = max(r["max_ratio"] for r in group)
        else:
            wrong = [r for r in group if r["passed"]]
            worst = min(r.get("worst_ratio", 0.0) for r in group)  # the weakest catch
        bad += len(wrong)
        print(f"| {kind} | `{impl}` | {reduction} | {len(group)} | {len(wrong)} | {worst:.3g} |")
        for r in wrong:
            print(f"    seed {r['seed']} {r['family']}: {r.get('message', 'not caught')}")
    print(f"\ncorrect hunts flagged or planted hunts missed: {bad} of {len(rows)}; "
          f"{sum(r['seconds'] for r in rows):.0f} s of hunting")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
