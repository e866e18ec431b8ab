"""Correct user-style gradient kernels that the hunter must never flag.

Each function follows the ``normprops hunt`` calling contract of its gradient op:

* ``softmax_backward(dy, y) -> dx``
* ``rmsnorm_backward(dy, x, gamma, eps) -> (dx, dgamma)``
* ``layernorm_backward(dy, x, gamma, beta, eps) -> (dx, dgamma, dbeta)``

``dy``, ``x`` (``y``) are C-contiguous arrays of shape ``(rows, cols)`` in the storage type
(float32, bfloat16 or float16 numpy); ``gamma`` and ``beta`` have shape ``(cols,)``. Every function
computes in float32 (the ``*_f64`` ones in float64), rounds once to the storage type, and returns
``dx`` of ``x``'s shape and ``dgamma``, ``dbeta`` of ``gamma``'s.

The float32 designs differ where real kernels do: row sums over 32 lanes (a warp per row, the
hunt's default ``threads=32``); the statistics recomputed two-pass, or the forward's mean and
rstd reused (computed in float32 beforehand, as PyTorch saves them); dgamma and dbeta as partials
of 32 blocks of rows joined in a tree (declaring the sharper ``row_reduction="blocks"``), or one
running sum over the rows, as ``np.sum(axis=0)`` adds them (the default ``row_reduction``,
"sequential"). :data:`CORRECT` lists each with what it declares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "CORRECT",
    "GradImpl",
    "layernorm_backward_f32",
    "layernorm_backward_f64",
    "layernorm_backward_numpy",
    "layernorm_backward_saved_stats",
    "layernorm_saved_stats",
    "rmsnorm_backward_f32",
    "rmsnorm_backward_f64",
    "rmsnorm_backward_saved_rstd",
    "rmsnorm_saved_rstd",
    "softmax_backward_f32",
    "softmax_backward_f64",
    "softmax_backward_fused",
]

_F32 = np.float32
LANES = 32  # threads per row, and blocks of rows for dgamma and dbeta


@dataclass(frozen=True)
class GradImpl:
    """One example: ``normprops hunt --op OP --impl MODULE:FUNC`` with ``declared`` as keywords of
    :func:`normprops.hunt_kernel` (``row_reduction="blocks"`` becomes ``--row-reduction
    blocks``)."""

    op: str
    func: str
    description: str
    declared: dict[str, Any] = field(default_factory=dict)


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=_F32)


def _lane_sum(v: np.ndarray) -> np.ndarray:
    """Sum over the last axis (kept) as 32 lanes do: lane j adds columns j, j + 32, ... in turn,
    then the 32 partials meet in a 5-level tree; in ``v``'s own type."""
    rows, cols = v.shape
    steps = -(-cols // LANES)
    lanes = np.zeros((rows, steps * LANES), dtype=v.dtype)
    lanes[:, :cols] = v
    lanes = lanes.reshape(rows, steps, LANES)
    acc = lanes[:, 0, :].copy()
    for i in range(1, steps):
        acc = acc + lanes[:, i, :]
    while acc.shape[-1] > 1:
        acc = acc[:, 0::2] + acc[:, 1::2]
    return acc


def _block_sum(v: np.ndarray) -> np.ndarray:
    """Sum over the rows as 32 blocks do: block j adds rows j, j + 32, ... in turn, then a tree."""
    return _lane_sum(np.ascontiguousarray(v.T))[:, 0]


def _running_sum(v: np.ndarray) -> np.ndarray:
    """Sum over the rows, one after another."""
    acc = v[0].copy()
    for row in v[1:]:
        acc = acc + row
    return acc


# --- softmax_backward ------------------------------------------------------------------------


def softmax_backward_f64(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """float64 ``y * (dy - sum(dy * y))``, rounded once."""
    d, w = dy.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        return (w * (d - np.sum(d * w, axis=1, keepdims=True))).astype(dy.dtype)


def softmax_backward_f32(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """float32: the dot product over 32 lanes, then ``y * (dy - s)``."""
    d, w = _f32(dy), _f32(y)
    with np.errstate(all="ignore"):
        return (w * (d - _lane_sum(d * w))).astype(dy.dtype)


def softmax_backward_fused(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """float32 ``dy * y - y * s`` (PyTorch's CUDA form), the dot product a pairwise sum."""
    d, w = _f32(dy), _f32(y)
    with np.errstate(all="ignore"):
        p = d * w
        return (p - w * np.sum(p, axis=1, keepdims=True, dtype=_F32)).astype(dy.dtype)


# --- rmsnorm_backward ------------------------------------------------------------------------


def rmsnorm_backward_f64(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                         eps: float) -> tuple[np.ndarray, np.ndarray]:
    """float64 throughout, rounded once."""
    d, v, g = dy.astype(np.float64), x.astype(np.float64), gamma.astype(np.float64)
    with np.errstate(all="ignore"):
        r = 1 / np.sqrt(np.mean(v * v, axis=1, keepdims=True) + eps)
        xhat = v * r
        gd = d * g
        dx = r * (gd - xhat * np.mean(gd * xhat, axis=1, keepdims=True))
        return dx.astype(dy.dtype), np.sum(d * xhat, axis=0).astype(gamma.dtype)


def rmsnorm_saved_rstd(x: np.ndarray, eps: float) -> np.ndarray:
    """The rstd an RMS norm forward saves: float32, a pairwise mean square, shape (rows, 1)."""
    v = _f32(x)
    with np.errstate(all="ignore"):
        return _F32(1) / np.sqrt(np.mean(v * v, axis=1, keepdims=True, dtype=_F32) + _F32(eps))


def _rms_dx(d: np.ndarray, v: np.ndarray, g: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, ...]:
    xhat = v * r
    gd = d * g[None, :]
    b = _lane_sum(gd * xhat) / _F32(v.shape[1])
    return r * (gd - xhat * b), xhat


def rmsnorm_backward_f32(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                         eps: float) -> tuple[np.ndarray, np.ndarray]:
    """float32, the mean square recomputed over 32 lanes; dgamma over 32 blocks of rows."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    with np.errstate(all="ignore"):
        r = _F32(1) / np.sqrt(_lane_sum(v * v) / _F32(v.shape[1]) + _F32(eps))
        dx, xhat = _rms_dx(d, v, g, r)
        return dx.astype(dy.dtype), _block_sum(d * xhat).astype(gamma.dtype)


def rmsnorm_backward_saved_rstd(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                eps: float) -> tuple[np.ndarray, np.ndarray]:
    """float32 with the forward's saved rstd (:func:`rmsnorm_saved_rstd`); dgamma one running sum
    over the rows (the default ``row_reduction``, "sequential")."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    r = rmsnorm_saved_rstd(x, eps)
    with np.errstate(all="ignore"):
        dx, xhat = _rms_dx(d, v, g, r)
        return dx.astype(dy.dtype), _running_sum(d * xhat).astype(gamma.dtype)


# --- layernorm_backward ----------------------------------------------------------------------


def layernorm_backward_f64(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray,
                           eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 throughout, rounded once."""
    d, v, g = dy.astype(np.float64), x.astype(np.float64), gamma.astype(np.float64)
    with np.errstate(all="ignore"):
        c = v - np.mean(v, axis=1, keepdims=True)
        r = 1 / np.sqrt(np.mean(c * c, axis=1, keepdims=True) + eps)
        xhat = c * r
        gd = d * g
        dx = r * (gd - np.mean(gd, axis=1, keepdims=True)
                  - xhat * np.mean(gd * xhat, axis=1, keepdims=True))
        return (dx.astype(dy.dtype), np.sum(d * xhat, axis=0).astype(gamma.dtype),
                np.sum(d, axis=0).astype(beta.dtype))


def layernorm_saved_stats(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The mean and rstd a layer norm forward saves: float32, two-pass, pairwise sums."""
    v = _f32(x)
    with np.errstate(all="ignore"):
        mean = np.mean(v, axis=1, keepdims=True, dtype=_F32)
        c = v - mean
        var = np.mean(c * c, axis=1, keepdims=True, dtype=_F32)
        return mean, _F32(1) / np.sqrt(var + _F32(eps))


def _ln_dx(d: np.ndarray, v: np.ndarray, g: np.ndarray, mean: np.ndarray,
           r: np.ndarray) -> tuple[np.ndarray, ...]:
    n = _F32(v.shape[1])
    xhat = (v - mean) * r
    gd = d * g[None, :]
    a = _lane_sum(gd) / n
    b = _lane_sum(gd * xhat) / n
    return r * (gd - a - xhat * b), xhat


def layernorm_backward_f32(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray,
                           eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32, mean and variance recomputed two-pass over 32 lanes; dgamma and dbeta over 32
    blocks of rows."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    n = _F32(v.shape[1])
    with np.errstate(all="ignore"):
        mean = _lane_sum(v) / n
        c = v - mean
        r = _F32(1) / np.sqrt(_lane_sum(c * c) / n + _F32(eps))
        dx, xhat = _ln_dx(d, v, g, mean, r)
        return (dx.astype(dy.dtype), _block_sum(d * xhat).astype(gamma.dtype),
                _block_sum(d).astype(beta.dtype))


def layernorm_backward_saved_stats(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                   beta: np.ndarray,
                                   eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 with the forward's saved mean and rstd (:func:`layernorm_saved_stats`); dgamma and
    dbeta one running sum over the rows (the default ``row_reduction``, "sequential")."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    mean, r = layernorm_saved_stats(x, eps)
    with np.errstate(all="ignore"):
        dx, xhat = _ln_dx(d, v, g, mean, r)
        return (dx.astype(dy.dtype), _running_sum(d * xhat).astype(gamma.dtype),
                _running_sum(d).astype(beta.dtype))


def layernorm_backward_numpy(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray,
                             eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 as numpy writes it: pairwise row means, dgamma and dbeta ``np.sum(axis=0)``, which
    on these C-contiguous arrays adds the rows in turn (the default ``row_reduction``)."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    with np.errstate(all="ignore"):
        c = v - v.mean(axis=1, keepdims=True)
        r = _F32(1) / np.sqrt((c * c).mean(axis=1, keepdims=True) + _F32(eps))
        xhat = c * r
        gd = d * g
        dx = r * (gd - gd.mean(axis=1, keepdims=True)
                  - xhat * (gd * xhat).mean(axis=1, keepdims=True))
        return (dx.astype(dy.dtype), np.sum(d * xhat, axis=0).astype(gamma.dtype),
                np.sum(d, axis=0).astype(beta.dtype))


_BLOCKS = {"row_reduction": "blocks"}

CORRECT: tuple[GradImpl, ...] = (
    GradImpl("softmax_backward", "softmax_backward_f64", "float64, rounded once"),
    GradImpl("softmax_backward", "softmax_backward_f32", "float32, dot product over 32 lanes"),
    GradImpl("softmax_backward", "softmax_backward_fused",
             "float32 dy*y - y*s, pairwise dot product", {"reduction": "tree"}),
    GradImpl("rmsnorm_backward", "rmsnorm_backward_f64", "float64, rounded once"),
    GradImpl("rmsnorm_backward", "rmsnorm_backward_f32",
             "float32, mean square recomputed over 32 lanes, dgamma over 32 blocks of rows", _BLOCKS),
    GradImpl("rmsnorm_backward", "rmsnorm_backward_saved_rstd",
             "float32, the forward's saved rstd, dgamma a running sum over the rows"),
    GradImpl("layernorm_backward", "layernorm_backward_f64", "float64, rounded once"),
    GradImpl("layernorm_backward", "layernorm_backward_f32",
             "float32, two-pass statistics recomputed over 32 lanes, dgamma and dbeta over 32 "
             "blocks of rows", _BLOCKS),
    GradImpl("layernorm_backward", "layernorm_backward_saved_stats",
             "float32, the forward's saved mean and rstd, dgamma and dbeta running sums over the "
             "rows"),
    GradImpl("layernorm_backward", "layernorm_backward_numpy",
             "float32 as numpy writes it: pairwise row means, dgamma and dbeta np.sum(axis=0)"),
)
