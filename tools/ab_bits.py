"""Bit-for-bit A/B of prod.cu against another copy of it (an older commit's) on the GPU: every op,
storage type and path, ragged / aligned / misaligned / streaming widths, and rows that are normal,
huge, tiny, offset by a large mean, or hold a NaN and an infinity. A change meant to leave the
arithmetic alone (memory access, launch details) must give 0 differing outputs; then the older
code's deep-run results still describe the new one. Usage on a GPU machine:
    git show COMMIT:normprops/cuda/prod.cu > old_prod.cu
    python3 tools/ab_bits.py --against old_prod.cu
or, for a variant behind a macro of prod.cu:
    python3 tools/ab_bits.py --define NP_SOME_VARIANT [--spread]
(--spread: the variant's decode kernels, as the product launches a few rows, against the packaged
prefill kernels)
Both copies launch with today's shapes (normprops.cuda.shape); an older copy (--against) is given
the cluster path only with --src-clusters (it may predate it): without, softmax rows that now take
it stream there and differ, as expected."""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import TYPE_CHECKING

from sweep_prod import SweepKernel  # tools/ is on sys.path when this runs as a script

from normprops.bench.launchers import device_storage
from normprops.cuda.prod import DTYPE_CODES, ProdKernel

if TYPE_CHECKING:
    import cupy

OPS = ("softmax", "layernorm", "rmsnorm", "addrmsnorm")
WIDTHS = (1, 3, 33, 255, 257, 1000, 1024, 1025, 2048, 2880, 4096, 4097, 4100, 5121, 8192, 16384, 32768, 70001)
ROWS = 9  # a partly empty last block for every narrow layout
# float32 values per row family; float16 cannot hold the huge / tiny ones (they become inf / 0).
FAMILIES = {"normal": (1.0, 0.0), "huge": (1e30, 0.0), "tiny": (1e-30, 0.0), "large_mean": (1.0, 3000.0),
            "nonfinite": (1.0, 0.0)}


def _bits(a: cupy.ndarray) -> cupy.ndarray:
    import cupy

    return a.view(cupy.uint32) if a.dtype == cupy.float32 else a


# The largest non-NaN magnitude's bits per storage type: NaNs lie above it.
_INF_BITS = {"float32": 0x7F800000, "bfloat16": 0x7F80, "float16": 0x7C00}


def _nan(a: cupy.ndarray, dtype: str) -> cupy.ndarray:
    bits = _bits(a)
    return (bits & (0x7FFFFFFF if dtype == "float32" else 0x7FFF)) > _INF_BITS[dtype]


def _buffer(a: cupy.ndarray, shift: int) -> cupy.ndarray:
    """A copy of a, starting `shift` elements past an aligned allocation (misaligned when shift > 0)."""
    import cupy

    flat = cupy.zeros(a.size + shift, dtype=a.dtype)
    view = flat[shift:]
    view[...] = a.ravel()
    return view.reshape(a.shape)


def _run(k: ProdKernel, x, res, g, b, shift: int, spread: bool = False):
    import cupy

    xs, gs, bs = _buffer(x, shift), _buffer(g, shift), _buffer(b, shift)
    rs = None if res is None else _buffer(res, shift)
    out = _buffer(cupy.zeros_like(x), shift)
    # the prefill kernels at the width's rows per block (a few rows would otherwise take the decode
    # entry points, which an older prod.cu cannot build), unless spread: as the product launches them
    k.launch(*k.operands(x=xs, out=out, residual=rs, gamma=gs, beta=bs), rows=x.shape[0], cols=x.shape[1],
             eps=1e-5, spread=spread)
    return [out] if rs is None else [out, rs]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", help="path of the other prod.cu")
    ap.add_argument("--define", action="append", default=[], metavar="MACRO",
                    help="compare the packaged prod.cu with itself compiled with -DMACRO (repeatable)")
    ap.add_argument("--src-clusters", action="store_true",
                    help="the other prod.cu has the cluster path too: give it the same cluster shapes")
    ap.add_argument("--spread", action="store_true",
                    help="launch the other copy as the product launches a few rows (the norms' decode "
                         "kernels, built on it) against the packaged prefill kernels: a decode candidate "
                         "(-DNP_DECODE_HELD) must give the prefill kernels' bits")
    args = ap.parse_args()
    import cupy  # after parsing: --help needs no GPU
    SweepKernel.src_clusters = args.src_clusters
    if bool(args.against) == bool(args.define):
        ap.error("give --against PATH or --define MACRO")
    other = (f"src={args.against}",) if args.against else tuple(args.define)
    rng = cupy.random.default_rng(0)
    cases = differing = payloads = 0
    for op, dtype, path in itertools.product(OPS, DTYPE_CODES, ("auto", "stream")):
        new = ProdKernel(op, dtype=dtype, path=path)
        old = SweepKernel(op, dtype=dtype, path=path, defines=other)
        for cols, (family, (scale, offset)), shift in itertools.product(WIDTHS, FAMILIES.items(), (0, 1)):
            if path == "stream" and cols > 4100:
                continue
            x = rng.standard_normal((ROWS, cols), dtype=cupy.float32) * scale + offset
            if family == "nonfinite":  # one NaN row, one row with an infinity
                x[ROWS - 1, cols // 2] = cupy.nan
                x[ROWS - 2, cols // 3] = cupy.inf
            res = rng.standard_normal((ROWS, cols), dtype=cupy.float32) if op == "addrmsnorm" else None
            g = rng.standard_normal(cols, dtype=cupy.float32)
            b = rng.standard_normal(cols, dtype=cupy.float32)
            arrays = [device_storage(a, dtype) if a is not None else None for a in (x, res, g, b)]
            got = _run(new, *arrays, shift)
            want = _run(old, *arrays, shift, spread=args.spread)
            cases += 1
            for a, w in zip(got, want):
                diff = _bits(a) != _bits(w)
                # NaN for NaN with another payload (e.g. a scalar conversion's against a paired one)
                payload = diff & _nan(a, dtype) & _nan(w, dtype)
                bad = int(cupy.count_nonzero(diff & ~payload))
                if bad:
                    differing += 1
                    print(f"DIFFER {op} {dtype} {path} cols={cols} {family} shift={shift}: {bad} elements")
                elif bool(payload.any()):
                    payloads += 1
                    print(f"NaN payload only {op} {dtype} {path} cols={cols} {family} shift={shift}: "
                          f"{int(cupy.count_nonzero(payload))} elements")
    print(f"{cases} cases, {differing} with differing bits, {payloads} more differing only in NaN payloads")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
