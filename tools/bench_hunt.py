"""How fast the hunt itself is: examples per second per op at 4096 columns, and where the time goes.

A benchmark, not a test: it hunts each op's first correct registered kernel on the ``ordinary``
family with every case fixed at 4096 columns (2 to 5 rows), then times the pieces of one example
(drawing and building the case, the kernel, the oracle and judge, the metamorphic re-runs).

    python tools/bench_hunt.py --examples 200
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from normprops.hunt import HuntConfig, hunt
from normprops.judge import judge_output
from normprops.launch import target_from_spec
from normprops.ops import OPS, is_backward
from normprops.oracles import reference, tolerance
from normprops.properties import evaluate
from normprops.specs import KERNELS
from normprops.strategies import make_case

COLS = 4096


def _median_ms(fn, repeat: int = 30) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--backend", default="numpy")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, "
          f"{platform.processor() or platform.machine()}")
    print(f"| op | kernel | examples/s (hunt, {COLS} cols) | case ms | kernel ms | oracle+judge ms "
          "| full evaluate ms |")
    print("|---|---|---|---|---|---|---|")
    skipped = []
    for op in OPS:
        spec = next((k for k in KERNELS if k.op == op and k.backend == args.backend and k.bug is None
                     and not is_backward(op)), None)
        if spec is None:  # no clean forward kernel of this op on the backend
            skipped.append(op)
            continue
        target = target_from_spec(spec)
        config = HuntConfig(max_examples=args.examples, seed=0, min_cols=COLS, max_cols=COLS)
        result = hunt(target, family="ordinary", config=config)
        assert result.passed, result.failure.message()
        rate = result.examples / result.elapsed_s
        params = {"loc": 0.5, "scale": 1.0, "spikes": []}
        build = lambda: make_case(op=op, family="ordinary", rows=4, cols=COLS, seed=1, params=params)
        case = build()
        model = target.error_model

        def oracle_and_judge() -> None:
            ref = reference(case)
            judge_output(case, out, ref, tolerance(case, ref, model=model), label=target.label)

        out = target.run(case)
        print(f"| {op} | {spec.name} | {rate:.0f} | {_median_ms(build):.2f} | "
              f"{_median_ms(lambda: target.run(case)):.2f} | {_median_ms(oracle_and_judge):.2f} | "
              f"{_median_ms(lambda: evaluate(target, case), repeat=10):.2f} |")
    if skipped:
        print(f"\nnot timed (no clean forward kernel on {args.backend}): {', '.join(skipped)}")


if __name__ == "__main__":
    main()
