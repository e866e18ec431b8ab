"""Where a registry hunt's time goes, phase by phase: the kernel's calls (the case, the stress
batch, the row alone, the rows reversed; the first call of each kernel, which pays for imports
and compiles, apart), the oracle, the bound, the judge, and the rest (Hypothesis, building the
cases). Run it as the suite would hunt, e.g. on a GPU host beside a loaded suite or alone:

    python tools/hunt_phases.py --backend torch-cuda --kernel F.rms_norm.backward \\
        --families tall,dy_scale --max-examples 300 --seed 0

It wraps the hunt's internal calls (normprops.properties) for the time of the run; the verdicts
are the hunt's own."""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from typing import Any, Callable

import normprops.hunt as hunt_module
import normprops.properties as props
from normprops.hunt import HuntConfig, hunt
from normprops.registry_hunt import registry_target
from normprops.specs import KERNELS, backend_status
from normprops.strategies import families_for

PHASES = ("first call", "case", "stress batch", "row alone", "rows reversed", "oracle", "bound",
          "judge", "rest")


class Clock:
    """Seconds per phase for the kernel being hunted; the case being judged sets what a call is."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.rows = 0
        self.called: set[str] = set()
        self.label = ""

    def timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
        return run

    def call_phase(self, rows: int) -> str:
        if self.label not in self.called:
            self.called.add(self.label)
            return "first call"
        if rows == self.rows:
            return "case"
        if rows == 1:
            return "row alone"
        return "rows reversed" if rows == self.rows + 1 else "stress batch"


def install(clock: Clock) -> None:
    call, evaluate = props._call, hunt_module.evaluate

    def timed_call(target: Any, case: Any, **kwargs: Any) -> Any:
        return clock.timed(clock.call_phase(case.rows), call)(target, case, **kwargs)

    def timed_evaluate(target: Any, case: Any, **kwargs: Any) -> Any:
        clock.rows, clock.label = case.rows, target.label
        return evaluate(target, case, **kwargs)

    props._call = timed_call
    hunt_module.evaluate = timed_evaluate
    for name, phase in (("reference", "oracle"), ("tolerance", "bound"), ("judge", "judge")):
        setattr(props, name, clock.timed(phase, getattr(props, name)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", required=True)
    ap.add_argument("--kernel", help="comma-separated entry names (default: every entry of the backend)")
    ap.add_argument("--families", help="comma-separated, each hunted on the entries it applies to "
                                       "(default: each entry's claimed families)")
    ap.add_argument("--max-examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    usable, why = backend_status(args.backend)
    if not usable:
        print(f"backend {args.backend} is not usable here: {why}")
        return 2
    names = None if args.kernel is None else set(args.kernel.split(","))
    specs = [k for k in KERNELS if k.backend == args.backend and (names is None or k.name in names)]
    if not specs:
        ap.error(f"--kernel must name entries of backend {args.backend!r} but was {args.kernel!r}")
    clock = Clock()
    install(clock)
    print("| kernel | family | examples | s | " + " | ".join(PHASES) + " |")
    print("|---|---|---|---|" + "---|" * len(PHASES))
    for spec in specs:
        families = (args.families.split(",") if args.families else sorted(spec.claims))
        for family in (f for f in families if f in families_for(spec.op)):
            clock.seconds.clear()
            config = HuntConfig(max_examples=args.max_examples, seed=args.seed)
            result = hunt(registry_target(spec, family), family=family, config=config)
            measured = sum(clock.seconds.values())
            clock.seconds["rest"] = max(0.0, result.elapsed_s - measured)
            cells = " | ".join(f"{clock.seconds[p]:.3f}" for p in PHASES)
            print(f"| {spec.name} | {family} | {result.examples} | {result.elapsed_s:.2f} | {cells} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
