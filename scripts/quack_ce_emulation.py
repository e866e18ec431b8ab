"""QuACK's cross-entropy (quack-kernels 0.6.5, ``quack/cross_entropy.py``) emulated in numpy, float32,
and hunted as the registry declares ``quack.ce`` (no label smoothing, flushing exponentials, batch
invariance not promised): what a GPU hunt of the real kernel may meet, on a machine without one.

What it emulates, as QuACK's source computes it (``L`` = log2 e rounded to float32):

- forward (its online softmax): ``m`` the row max, ``e_j = exp2(fma(x_j, L, -rn(m L)))``, ``S``
  their float32 sum, ``lse = rn(m + rn(ln S))``, ``loss = rn(lse - x_t)``, 0 on an ignored row;
- backward (its own kernel, from the forward's float32 lse): ``p_j = exp2(fma(x_j, L, -rn(lse L)))``,
  ``(p_j - [j = t]) dloss`` rounded once to the logits' type, 0 on an ignored row.

``rn(m L)`` and ``rn(lse L)`` are rounded at the magnitude of the logits, not of their spread:
every exponential of a row shares an error of up to half an ulp of ``|lse| L``. Not emulated:
ex2.approx's and lg2.approx's own error (a few ulp), and QuACK's per-thread maxima, each thread's
partial sum rescaled by ``exp(m_i - m)``; the kernel can only be further off than this::

    python scripts/quack_ce_emulation.py --examples 100 --seed 0

Prints one line per (op, storage type): each family's examples, worst err/tol and failed
properties. Exit 0 always: it predicts, it does not gate.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import normprops
from normprops.dtypes import numpy_dtype

F32 = np.float32
L = F32(np.log2(np.e))


def _exp2_fma(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """exp2(fma(x, L, -c)) in float32: the product is exact in float64, the sum rounded once."""
    arg = (x.astype(np.float64) * float(L) - c.astype(np.float64)).astype(F32)
    with np.errstate(under="ignore", over="ignore"):
        return np.exp2(arg)


def _lse(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1, keepdims=True)
    s = _exp2_fma(x, (m * L).astype(F32)).sum(axis=1, dtype=F32)
    return (m[:, 0] + np.log(s).astype(F32)).astype(F32)


def quack_ce(logits, target, ignore_index, label_smoothing):
    """The forward: float32 (N,), 0 on ignored rows."""
    x = np.asarray(logits, F32)
    t = np.asarray(target)
    valid = t != ignore_index
    picked = x[np.arange(x.shape[0]), np.where(valid, t, 0)]
    return np.where(valid, (_lse(x) - picked).astype(F32), F32(0)).astype(F32)


def quack_ce_backward(dtype: str):
    """The backward, returning dlogits in ``dtype``."""
    def backward(dloss, logits, target, ignore_index, label_smoothing):
        x = np.asarray(logits, F32)
        t = np.asarray(target)
        p = _exp2_fma(x, (_lse(x) * L).astype(F32)[:, None])
        g = np.where(np.arange(x.shape[1])[None, :] == t[:, None], (p - F32(1)).astype(F32), p)
        d = np.where(t != ignore_index, np.asarray(dloss, F32), F32(0))[:, None]
        return (g * d).astype(F32).astype(numpy_dtype(dtype))
    return backward


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="examples per family (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default 0)")
    args = parser.parse_args()
    for dtype in ("float32", "bfloat16"):
        for op, fn in (("cross_entropy", quack_ce), ("cross_entropy_backward", quack_ce_backward(dtype))):
            report = normprops.hunt_kernel(fn, op=op, dtype=dtype, smoothing=False, ftz=True,
                                           ignore=["batch_invariance"], max_examples=args.examples,
                                           seed=args.seed)
            cells = [f"{r.family} {r.examples} {r.max_ratio:.3g}"
                     + "".join(f" {p}" for p in sorted({f.property for f in r.findings}))
                     for r, _ in report.results]
            print(f"{op} {dtype}: {'clean' if report.passed else 'FAILED'}; " + "; ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
