"""Launch one production kernel twice on a 1 GiB batch, for a profiler to catch (the second launch
is the warm one). Usage on a GPU machine:
    ncu --clock-control none --launch-skip 1 --launch-count 1 -k regex:layernorm \\
        python3 tools/launch_once.py --op layernorm --dtype bfloat16 --cols 16384 [--per-thread 64]
        [--rows 1 [--spread]] [--define MACRO] [--peer liger]
--spread launches a small batch as the product does (a row per block; the norms' decode kernels);
--peer launches that library's kernel for the op instead (PyTorch's: --peer torch), on the same
sizes, as normprops bench binds it."""

from __future__ import annotations

import argparse
import sys

from sweep_prod import SweepKernel  # tools/ is on sys.path when this runs as a script

from normprops.bench.launchers import random_storage
from normprops.cuda.prod import PROD_OPS
from normprops.dtypes import get_dtype


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", choices=PROD_OPS, required=True)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--per-thread", type=int)
    ap.add_argument("--rows", type=int, help="rows (default: 1 GiB of them)")
    ap.add_argument("--define", action="append", default=[], metavar="MACRO",
                    help="build prod.cu with -DMACRO")
    ap.add_argument("--spread", action="store_true",
                    help="a small batch as the product launches it (the norms' decode kernels)")
    ap.add_argument("--peer", help="launch this library's kernel for the op instead: torch, liger, quack")
    args = ap.parse_args()
    import cupy  # after parsing: --help needs no GPU
    rows = args.rows or (1 << 30) // get_dtype(args.dtype).itemsize // args.cols
    rng = cupy.random.default_rng(0)
    x = random_storage(rng, (rows, args.cols), args.dtype)
    res = random_storage(rng, (rows, args.cols), args.dtype)
    g = random_storage(rng, (args.cols,), args.dtype)
    b = random_storage(rng, (args.cols,), args.dtype)
    out = cupy.empty_like(x)
    if args.peer:
        from sweep_prod import peer_launches

        launches, _ = peer_launches(rows=rows, cols=args.cols, dtype=args.dtype, ops=(args.op,),
                                    peers=(args.peer,))
        if not launches:
            print(f"{args.peer} has no kernel for {args.op} {args.dtype} x {args.cols} here")
            return 1
        for name, launch in launches.items():  # each twice, one after another
            for _ in range(2):
                launch()
            cupy.cuda.get_current_stream().synchronize()
            print(f"{name} {args.dtype} {rows}x{args.cols}")
        return 0
    k = SweepKernel(args.op, dtype=args.dtype, per_thread=args.per_thread, defines=tuple(args.define))
    launch = k.launcher(*k.operands(x=x, out=out, residual=res, gamma=g, beta=b), rows=rows, cols=args.cols,
                        eps=1e-5, spread=args.spread)
    for _ in range(2):
        launch()
    cupy.cuda.get_current_stream().synchronize()
    print(f"{args.op} {args.dtype} {rows}x{args.cols}: shape {k.shape(args.cols)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
