"""Examples-to-catch of every known bug in the registry, over many seeds.

For each known bug of the chosen backends' entries, and each seed, the registry hunt's own target
(:func:`normprops.registry_hunt.registry_target`: the bug's widths, its property judged) is hunted
on the bug's family without shrinking and without its explicit example, and the example at which
the bug's property first fails is recorded (:func:`normprops.hunt.examples_to_catch`). The table
says, per bug, in how many seeds it was caught within the ci profile's 100 examples, and the median
and worst examples-to-catch.

    python scripts/catch_table.py --backend numpy --seeds 20 --json catch.json
    python scripts/catch_table.py --backend cuda,cuda-prod,torch-cuda --seeds 20
    python scripts/catch_table.py --backend quack --kernel quack.softmax-f32 --families huge,masked
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from normprops.errors import WriteError
from normprops.hunt import HuntConfig, examples_to_catch
from normprops.jsonio import write_json_atomically
from normprops.kernelspec import KernelSpec, KnownBug
from normprops.registry_hunt import registry_target
from normprops.specs import KERNELS, backend_status

CI_EXAMPLES = 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True, help="comma-separated backends")
    parser.add_argument("--kernel", help="only the entries of this name")
    parser.add_argument("--families", help="comma-separated: only the known bugs in these families")
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (default 20)")
    parser.add_argument("--max-examples", type=int, default=300,
                        help="give up on a seed after this many examples (default 300)")
    parser.add_argument("--json", type=Path,
                        help="write every measurement here (again after each bug, so a stopped run keeps "
                             "the bugs it finished)")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    families = None if args.families is None else {f.strip() for f in args.families.split(",") if f.strip()}
    for b in backends:
        ok, why = backend_status(b)
        if not ok:
            print(f"backend {b}: not usable here ({why})", file=sys.stderr)
    chosen = [(spec, bug) for spec in KERNELS
              if spec.backend in backends and (not args.kernel or spec.name == args.kernel)
              for bug in spec.bugs
              if bug.detector != "racecheck"]  # a race is compute-sanitizer's to find (tests/test_gpu.py)
    if families is not None:
        unknown = families - {bug.family for _, bug in chosen}
        if unknown:
            have = ", ".join(sorted({bug.family for _, bug in chosen})) or "none"
            print(f"--families: no known bug of the chosen entries in {', '.join(sorted(unknown))}; "
                  f"their known bugs are in: {have}", file=sys.stderr)
            return 2
        chosen = [(spec, bug) for spec, bug in chosen if bug.family in families]
    try:
        measure(chosen, seeds=args.seeds, max_examples=args.max_examples, json_path=args.json)
    except WriteError as exc:
        print(f"--json: {exc}", file=sys.stderr)
        return 2
    return 0


def measure(chosen: list[tuple[KernelSpec, KnownBug]], *, seeds: int, max_examples: int,
            json_path: Path | None) -> None:
    """Measure each chosen bug over ``seeds`` seeds, printing its row, and write every row so far to
    ``json_path`` (first with none, then after each bug)."""
    rows: list[dict] = []
    if json_path is not None:
        write_json_atomically(json_path, {"max_examples": max_examples, "rows": rows})
    for spec, bug in chosen:
        if not backend_status(spec.backend)[0]:
            continue
        # Random draws only: a bug's explicit example (tried first by every registry hunt) would
        # read 1 whatever the draws do.
        target = replace(registry_target(spec, bug.family), examples=())
        counts: list[int | None] = []
        start = time.perf_counter()
        for seed in range(seeds):
            config = HuntConfig(max_examples=max_examples, seed=seed)
            counts.append(examples_to_catch(target, family=bug.family, config=config,
                                            property=bug.property))
        found = [c for c in counts if c is not None]
        row = {"backend": spec.backend, "kernel": spec.name, "family": bug.family,
               "property": bug.property, "detector": bug.detector, "counts": counts,
               "within_ci": sum(c is not None and c <= CI_EXAMPLES for c in counts),
               "seeds": seeds, "median": statistics.median(found) if found else None,
               "worst": max(found) if len(found) == len(counts) else None,
               "elapsed_s": round(time.perf_counter() - start, 1)}
        rows.append(row)
        worst = row["worst"] if row["worst"] is not None else f">{max_examples}"
        print(f"{spec.backend:13s} {spec.name:24s} {bug.family:16s} {bug.property or 'any':17s} "
              f"within {CI_EXAMPLES}: {row['within_ci']:2d}/{seeds}  median "
              f"{row['median']}  worst {worst}  ({row['elapsed_s']} s)  {counts}", flush=True)
        if json_path is not None:
            write_json_atomically(json_path, {"max_examples": max_examples, "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
