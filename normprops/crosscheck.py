"""GPU kernels against their numpy emulations: the largest difference in units in the last place.

Both sides run the same order of operations (see kernels.cu and backends/numpy_kernels.py), so the
differences come only from ``expf`` / ``rsqrtf`` (CUDA's are within 2 ULP, numpy's are nearly
correctly rounded) and the emulated fused multiply-adds. Elements far below their row's largest
output (|out| < 1e-3 * max|out|) are left out: near-zero outputs of a cancellation, and subnormal
softmax tails that CUDA's ``expf`` flushes, have no meaningful ULP distance.
"""

from __future__ import annotations

import numpy as np

from normprops.case import Case
from normprops.ops import get_op
from normprops.specs import KERNELS
from normprops.strategies import make_case

__all__ = ["ulp_distance", "crosscheck_cases", "max_ulp_difference"]

# (family, params) per op: ordinary, wide, badly conditioned, near-eps and ragged rows.
_SOFTMAX = [
    ("ordinary", {"loc": 0.5, "scale": 3.0, "spikes": [(17, 30.0)]}),
    ("wide_span", {"top": 10.0, "span": 150.0, "position": 5}),
    ("overflow_logits", {"peak": 1000.0, "position": 3, "offset": 100.0, "scale": 10.0}),
    ("large_mean", {"mean": 1e4, "sign": -1.0, "ratio": 1e3}),
    ("ragged", {"scale": 1.0}),
]
_NORM = [
    ("ordinary", {"loc": 1.0, "scale": 3.0, "spikes": [(17, 30.0)]}),
    ("large_mean", {"mean": 1e4, "sign": 1.0, "ratio": 1e3}),
    ("eps_scale", {"ratio": 0.3, "centre": 0.5}),
    ("ragged", {"scale": 1.0}),
]


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float32 ULPs, via the monotone integer ordering of float32 bit patterns."""
    def ordered(v: np.ndarray) -> np.ndarray:
        i = np.ascontiguousarray(v, dtype=np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return np.abs(ordered(a) - ordered(b))


def crosscheck_cases(op: str) -> list[Case]:
    out = []
    # The norms draw eps_scale; a softmax has no eps (its families say which list is its).
    for i, (family, params) in enumerate(_NORM if "eps_scale" in get_op(op).families else _SOFTMAX):
        for cols in (1, 33, 257, 1000, 4097):
            # gamma = 1, beta = 0: a random affine step would add cancellation (gamma*y + beta
            # near 0) that inflates ULP counts without saying anything about the kernel.
            out.append(make_case(op=op, family=family, rows=4, cols=cols, seed=100 * i + cols,
                                 params=params))
    return out


def max_ulp_difference(name: str) -> int:
    """The largest ULP difference between the GPU kernel ``name`` and its numpy emulation."""
    gpu = next(k for k in KERNELS if k.backend == "cuda" and k.name == name).load()
    emulated = next(k for k in KERNELS if k.backend == "numpy" and k.name == name).load()
    worst = 0
    for case in crosscheck_cases(next(k.op for k in KERNELS if k.name == name)):
        a, b = gpu(*case.args()), emulated(*case.args())
        with np.errstate(all="ignore"):
            scale = np.max(np.where(np.isfinite(b), np.abs(b), 0), axis=1, keepdims=True)
            judged = np.isfinite(a) & np.isfinite(b) & (np.abs(b) >= 1e-3 * scale)
        if judged.any():
            worst = max(worst, int(np.max(ulp_distance(a, b)[judged])))
    return worst
