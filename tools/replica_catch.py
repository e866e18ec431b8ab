"""Examples-to-catch, by random draws alone, of the `N |dy gamma|` overflow, in a float32 numpy
replica of the form PyTorch's CUDA norm backward (``compute_gI`` in ``layer_norm_kernel.cu``) and
``torch.compile``'s layer norm decomposition share: ``N * dy * gamma`` formed for every element,
the row sums subtracted, then multiplied by ``rstd / N``; the projection's sum adds
``dy gamma (x - mean) rstd`` multiplied left to right, as ``compute_gI`` does (docs/ecosystem.md,
finding 33; the decomposition adds ``dy gamma xhat``, which differs only where that product
overflows). The statistics are float32 means, not PyTorch's saved ones. The replica is
hunted as PyTorch's CUDA entry hunts the known bug (its family, its property, its widths), without
the bug's explicit example, for seeds 0 to SEEDS - 1, the way ``scripts/catch_table.py`` measures
a registry entry on the machine that runs it:

    python tools/replica_catch.py --op layernorm_backward --family tiny --seeds 20 --max-examples 300

It needs no GPU. Exit 0."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from normprops.hunt import HuntConfig, examples_to_catch
from normprops.launch import target_from_callable
from normprops.specs import KERNELS

F = np.float32
OVERFLOW = "where N |dy gamma| passes FLT_MAX"  # in the summary of that known bug, and no other
ENTRY = {"layernorm_backward": "F.layer_norm.backward", "rmsnorm_backward": "F.rms_norm.backward"}


def _dx_dgamma(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float,
                centred: bool) -> tuple[np.ndarray, np.ndarray]:
    d, v, g = dy.astype(F), x.astype(F), gamma.astype(F)
    n = F(v.shape[1])
    with np.errstate(all="ignore"):
        c = v - v.mean(axis=1, keepdims=True, dtype=F) if centred else v
        rstd = F(1) / np.sqrt((c * c).mean(axis=1, keepdims=True, dtype=F) + F(eps))
        xhat = c * rstd
        gd = d * g
        s1 = gd.sum(axis=1, keepdims=True, dtype=F) if centred else F(0)
        s2 = ((gd * c) * rstd).sum(axis=1, keepdims=True, dtype=F)  # compute_gI's order (finding 33)
        dx = (rstd / n) * (gd * n - s1 - xhat * s2)  # gd * n: inf once N |dy gamma| > FLT_MAX
        return dx, (d * xhat).sum(axis=0, dtype=F)


def layernorm_backward(dy, x, gamma, beta, eps):
    dx, dgamma = _dx_dgamma(dy, x, gamma, eps, centred=True)
    return dx, dgamma, dy.astype(F).sum(axis=0, dtype=F)


def rmsnorm_backward(dy, x, gamma, eps):
    return _dx_dgamma(dy, x, gamma, eps, centred=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", choices=sorted(ENTRY), required=True)
    ap.add_argument("--family", required=True, help="a family in which PyTorch's CUDA entry carries the bug")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--max-examples", type=int, default=300)
    args = ap.parse_args()
    spec = next(k for k in KERNELS if k.backend == "torch-cuda" and k.name == ENTRY[args.op])
    bugs = {b.family: b for b in spec.bugs if OVERFLOW in b.summary}
    if args.family not in bugs:
        ap.error(f"--family must be one in which {spec.name} carries the N |dy gamma| overflow "
                 f"({', '.join(bugs)}) but was {args.family!r}")
    bug = bugs[args.family]
    fn = layernorm_backward if args.op == "layernorm_backward" else rmsnorm_backward
    target = target_from_callable(fn, op=args.op, name=f"{spec.name}-replica",
                                  constraints=spec.bug_constraints,
                                  opt_in=(bug.property,) if bug.property == "range_safety" else (),
                                  row_reduction=spec.row_reduction)
    caught = []
    for seed in range(args.seeds):
        k = examples_to_catch(target, family=args.family, property=bug.property,
                              config=HuntConfig(max_examples=args.max_examples, seed=seed))
        print(f"seed {seed}: {f'not in {args.max_examples}' if k is None else k}", flush=True)
        if k is not None:
            caught.append(k)
    at = f": at {', '.join(map(str, sorted(caught)))}" if caught else ""
    print(f"{args.op} x {args.family} ({bug.property}): caught in {len(caught)} of {args.seeds} seeds "
          f"within {args.max_examples} examples{at}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
