"""Run the CUDA kernels (kernels.cu's, prod.cu's and prod_decode.cu's) under compute-sanitizer:
racecheck on every kernel, memcheck on ragged shapes. Expect racecheck to flag softmaxRowNoBarrier
and nothing else, memcheck to flag nothing.

    python tools/sanitize.py            # drives compute-sanitizer, prints a table
    python tools/sanitize.py --backend cuda-cluster   # only the cluster path's kernels
    python tools/sanitize.py --kernel softmaxFastBf16   # only these kernels (repeatable)
    python tools/sanitize.py --kernel softmaxFast --cols 151936   # only these widths (repeatable)
    python tools/sanitize.py --launch NAME   # (what compute-sanitizer runs) launch one kernel
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

import numpy as np

from normprops.cuda.layout import PROD_PER_THREAD, PROD_VARIANTS
from normprops.cuda.shape import MAX_ROW_THREADS
from normprops.dtypes import to_dtype
from normprops.specs import KERNELS

BACKENDS = ("cuda", "cuda-prod", "cuda-cluster")
# Ragged widths, and for prod.cu each register-path layout plus the streaming path (70001 columns;
# the cluster path's 8 blocks at every width).
RAGGED = (1, 3, 33, 255, 257, 1025, 2880, 4097)
PROD_EXTRA = (16384, 70001)


def launch(name: str, cols: tuple[int, ...] = ()) -> None:
    import cupy

    # Every array its own allocation (no memory pool): an access past an array's end is then one
    # past an allocation, which memcheck reports.
    cupy.cuda.set_allocator(None)
    spec = next(k for k in KERNELS if k.backend in BACKENDS and k.name == name)
    fn = spec.load()
    rng = np.random.default_rng(0)
    # 9 rows: prod.cu puts up to 8 narrow rows in a block, so the last block is partly empty.
    rows = 9 if spec.backend == "cuda-prod" else 3
    widths = cols or RAGGED + (PROD_EXTRA if spec.backend in ("cuda-prod", "cuda-cluster") else ())
    if PROD_VARIANTS.get(name, ("",))[0] == "rmsnormbf16acc":  # register path only
        widths = tuple(c for c in widths if c <= PROD_PER_THREAD * MAX_ROW_THREADS)
    for cols in widths:
        x = to_dtype(rng.standard_normal((rows, cols)).astype(np.float32), spec.dtype)
        g = to_dtype(rng.standard_normal(cols).astype(np.float32), spec.dtype)
        args = {"softmax": (x,), "layernorm": (x, g, g, 1e-5), "rmsnorm": (x, g, 1e-5)}[spec.op]
        fn(*args)
        if spec.backend == "cuda-prod":
            decode_launch(name, x, g)


def decode_launch(name: str, x: np.ndarray, g: np.ndarray) -> None:
    """The same rows launched as a decode batch: one row per block and, for a norm, its
    prod_decode.cu entry point (the registry's function launches the prefill kernel)."""
    import cupy

    from normprops.cuda.prod import ProdKernel, to_storage

    op, dtype, path = PROD_VARIANTS[name]
    if path != "auto":
        return
    kernel = ProdKernel(op, dtype=dtype)
    xs, gs = to_storage(x, dtype, name="x"), to_storage(g, dtype, name="gamma")
    out, residual = cupy.empty_like(xs), xs.copy()
    kernel.launch(*kernel.operands(x=xs, out=out, residual=residual, gamma=gs, beta=gs),
                  rows=x.shape[0], cols=x.shape[1], eps=1e-5)
    cupy.cuda.runtime.deviceSynchronize()


def drive(backends: tuple[str, ...], only: tuple[str, ...] = (), cols: tuple[int, ...] = ()) -> int:
    names = [k.name for k in KERNELS if k.backend in backends and (not only or k.name in only)]
    if only and len(names) != len(set(only)):
        print(f"no such kernel of {', '.join(backends)}: {', '.join(sorted(set(only) - set(names)))}")
        return 2
    tool_path = shutil.which("compute-sanitizer")
    if tool_path is None:
        print("compute-sanitizer not found on PATH")
        return 2
    print("| kernel | racecheck hazards | memcheck errors |")
    print("|---|---|---|")
    flagged = {}
    for name in names:
        counts = {}
        for tool in ("racecheck", "memcheck"):
            widths = [a for c in cols for a in ("--cols", str(c))]
            command = [tool_path, "--tool", tool, sys.executable, __file__, "--launch", name, *widths]
            proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
            text = proc.stdout + proc.stderr
            found = re.search(r"(\d+) hazards? displayed|ERROR SUMMARY: (\d+) errors?", text)
            counts[tool] = int(next(g for g in found.groups() if g is not None)) if found else -1
            if counts[tool] != 0:
                flagged.setdefault(name, []).append(tool)
                print(text[-2000:], file=sys.stderr)
        print(f"| {name} | {counts['racecheck']} | {counts['memcheck']} |")
    print(f"\nflagged: {flagged or 'nothing'}")
    planted = "softmaxRowNoBarrier" in names
    only_the_planted_race = (list(flagged) == ["softmaxRowNoBarrier"] * planted
                             and (not planted or flagged["softmaxRowNoBarrier"] == ["racecheck"]))
    return 0 if only_the_planted_race else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch", metavar="NAME")
    parser.add_argument("--backend", action="append", choices=BACKENDS,
                        help="only this backend's kernels (repeatable; default: all three)")
    parser.add_argument("--kernel", action="append", default=[], metavar="NAME",
                        help="only this kernel (repeatable)")
    parser.add_argument("--cols", action="append", type=int, default=[], metavar="N",
                        help="only this row width (repeatable; default: the ragged and path-changing widths)")
    args = parser.parse_args()
    if args.launch:
        launch(args.launch, tuple(args.cols))
        return 0
    return drive(tuple(args.backend or BACKENDS), tuple(args.kernel), tuple(args.cols))


if __name__ == "__main__":
    raise SystemExit(main())
