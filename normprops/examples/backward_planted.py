"""User-style gradient kernels with one planted numerical bug each.

Every function follows the calling contract of its gradient op (see
:mod:`normprops.examples.backward_correct`) and is the correct float32 design with one thing
changed. :data:`PLANTED` records, for each, the family and storage type expected to expose it and
the property that shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .backward_correct import _block_sum, _f32, _lane_sum, _rms_dx

__all__ = [
    "PLANTED",
    "GradPlanted",
    "layernorm_backward_eps_outside",
    "layernorm_backward_no_projection",
    "layernorm_backward_one_pass",
    "rmsnorm_backward_bf16_dgamma",
    "rmsnorm_backward_eps_outside",
    "rmsnorm_backward_no_projection",
    "rmsnorm_backward_rstd_cubed",
    "softmax_backward_fp16_dot",
]

_F32 = np.float32


@dataclass(frozen=True)
class GradPlanted:
    op: str
    func: str
    family: str  # the family expected to expose it
    property: str  # the property that shows it
    bug: str
    dtype: str = "float32"


def softmax_backward_fp16_dot(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """BUG: the row dot product ``sum(dy * y)`` accumulated in float16 (11 bits)."""
    d, w = _f32(dy), _f32(y)
    with np.errstate(all="ignore"):
        s = _lane_sum((d * w).astype(np.float16)).astype(_F32)
        return (w * (d - s)).astype(dy.dtype)


def rmsnorm_backward_no_projection(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                   eps: float) -> tuple[np.ndarray, np.ndarray]:
    """BUG: dx = rstd * g, without the term ``- xhat * mean(g * xhat)`` that the normalization's
    own dependence on x contributes."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    with np.errstate(all="ignore"):
        r = _F32(1) / np.sqrt(_lane_sum(v * v) / _F32(v.shape[1]) + _F32(eps))
        xhat = v * r
        return (r * d * g[None, :]).astype(dy.dtype), _block_sum(d * xhat).astype(gamma.dtype)


def rmsnorm_backward_eps_outside(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                 eps: float) -> tuple[np.ndarray, np.ndarray]:
    """BUG: rstd = 1 / (sqrt(mean(x^2)) + eps), eps outside the root."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    with np.errstate(all="ignore"):
        r = _F32(1) / (np.sqrt(_lane_sum(v * v) / _F32(v.shape[1])) + _F32(eps))
        dx, xhat = _rms_dx(d, v, g, r)
        return dx.astype(dy.dtype), _block_sum(d * xhat).astype(gamma.dtype)


def rmsnorm_backward_bf16_dgamma(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                 eps: float) -> tuple[np.ndarray, np.ndarray]:
    """BUG: dgamma summed over the rows in the storage type (bfloat16 storage: 8 bits), not in
    float32."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    with np.errstate(all="ignore"):
        r = _F32(1) / np.sqrt(_lane_sum(v * v) / _F32(v.shape[1]) + _F32(eps))
        dx, xhat = _rms_dx(d, v, g, r)
        terms = (d * xhat).astype(gamma.dtype)
        acc = terms[0]
        for row in terms[1:]:
            acc = (acc + row).astype(gamma.dtype)
        return dx.astype(dy.dtype), acc


def rmsnorm_backward_rstd_cubed(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                eps: float) -> tuple[np.ndarray, np.ndarray]:
    """BUG: the projection term as ``x * rstd**3 * mean(g * x)``, the textbook expansion of
    ``xhat * mean(g * xhat)``. rstd^3 leaves float32's normal range once |x| passes about 1e13
    (rstd ~ 1e-13), long before x*x overflows: the term loses bits to the subnormal grid from
    there, and vanishes past about 1e15."""
    d, v, g = _f32(dy), _f32(x), _f32(gamma)
    with np.errstate(all="ignore"):
        n = _F32(v.shape[1])
        r = _F32(1) / np.sqrt(_lane_sum(v * v) / n + _F32(eps))
        gd = d * g[None, :]
        dx = r * gd - v * (r * r * r) * (_lane_sum(gd * v) / n)
        return dx.astype(dy.dtype), _block_sum(d * (v * r)).astype(gamma.dtype)


def _ln_backward(d: np.ndarray, v: np.ndarray, g: np.ndarray, mean: np.ndarray, r: np.ndarray,
                 projection: bool = True) -> tuple[np.ndarray, np.ndarray]:
    n = _F32(v.shape[1])
    xhat = (v - mean) * r
    gd = d * g[None, :]
    dx = gd - _lane_sum(gd) / n
    if projection:
        dx = dx - xhat * (_lane_sum(gd * xhat) / n)
    return r * dx, xhat


def _ln_out(dy: np.ndarray, gamma: np.ndarray, beta: np.ndarray, dx: np.ndarray,
            xhat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = _f32(dy)
    return (dx.astype(dy.dtype), _block_sum(d * xhat).astype(gamma.dtype),
            _block_sum(d).astype(beta.dtype))


def _two_pass(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = _F32(v.shape[1])
    mean = _lane_sum(v) / n
    c = v - mean
    return mean, _lane_sum(c * c) / n


def layernorm_backward_no_projection(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                     beta: np.ndarray,
                                     eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BUG: dx = rstd * (g - mean(g)), without ``- xhat * mean(g * xhat)``."""
    v = _f32(x)
    with np.errstate(all="ignore"):
        mean, var = _two_pass(v)
        r = _F32(1) / np.sqrt(var + _F32(eps))
        dx, xhat = _ln_backward(_f32(dy), v, _f32(gamma), mean, r, projection=False)
        return _ln_out(dy, gamma, beta, dx, xhat)


def layernorm_backward_one_pass(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                beta: np.ndarray,
                                eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BUG: the variance recomputed one-pass, ``E[x^2] - E[x]^2``, which cancels when the mean is
    large against the spread."""
    v = _f32(x)
    n = _F32(v.shape[1])
    with np.errstate(all="ignore"):
        mean = _lane_sum(v) / n
        var = np.maximum(_lane_sum(v * v) / n - mean * mean, _F32(0))
        r = _F32(1) / np.sqrt(var + _F32(eps))
        dx, xhat = _ln_backward(_f32(dy), v, _f32(gamma), mean, r)
        return _ln_out(dy, gamma, beta, dx, xhat)


def layernorm_backward_eps_outside(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                   beta: np.ndarray,
                                   eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BUG: rstd = 1 / (sqrt(var) + eps), eps outside the root."""
    v = _f32(x)
    with np.errstate(all="ignore"):
        mean, var = _two_pass(v)
        r = _F32(1) / (np.sqrt(var) + _F32(eps))
        dx, xhat = _ln_backward(_f32(dy), v, _f32(gamma), mean, r)
        return _ln_out(dy, gamma, beta, dx, xhat)


PLANTED: tuple[GradPlanted, ...] = (
    GradPlanted("softmax_backward", "softmax_backward_fp16_dot", "ordinary", "accuracy",
                "row dot product accumulated in float16"),
    GradPlanted("rmsnorm_backward", "rmsnorm_backward_no_projection", "ordinary", "accuracy",
                "dx without the xhat * mean(g * xhat) term"),
    GradPlanted("rmsnorm_backward", "rmsnorm_backward_eps_outside", "eps_scale", "accuracy",
                "sqrt(mean(x^2)) + eps"),
    GradPlanted("rmsnorm_backward", "rmsnorm_backward_rstd_cubed", "huge", "accuracy",
                "rstd**3 underflows from |x| of about 1e13"),
    GradPlanted("rmsnorm_backward", "rmsnorm_backward_bf16_dgamma", "tall", "accuracy",
                "dgamma summed in bfloat16", dtype="bfloat16"),
    GradPlanted("layernorm_backward", "layernorm_backward_no_projection", "ordinary", "accuracy",
                "dx without the xhat * mean(g * xhat) term"),
    GradPlanted("layernorm_backward", "layernorm_backward_one_pass", "large_mean", "accuracy",
                "one-pass variance E[x^2] - E[x]^2 in the backward"),
    GradPlanted("layernorm_backward", "layernorm_backward_eps_outside", "eps_scale", "accuracy",
                "sqrt(var) + eps"),
)
