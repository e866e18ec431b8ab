"""Correct user-style normalization kernels that the hunter must never flag.

Each function follows the ``normprops hunt`` calling contract:

* ``softmax(x)``
* ``layernorm(x, gamma, beta, eps)``
* ``rmsnorm(x, gamma, eps)``

``x`` is a C-contiguous float32 array of shape ``(rows, cols)``; ``gamma`` and
``beta`` are float32 of shape ``(cols,)``; ``eps`` is a Python float holding a
float32 value.  Every function returns float32 of the shape of ``x`` and works
row by row, so one row never influences another.

The ``*_f64`` versions compute in float64 and round once at the end.  The
``*_f32`` versions never touch float64 but are range-safe for every finite
float32 row: reductions run on the row scaled by a power of two (exact), and
``eps`` is carried into and out of the scaled domain without overflow.  The
private helpers are shared with :mod:`normprops.examples.planted`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CORRECT",
    "Impl",
    "layernorm_f32",
    "layernorm_f64",
    "rmsnorm_f32",
    "rmsnorm_f64",
    "softmax_f32",
    "softmax_f64",
]

_F32 = np.float32
# Once eps (in the scaled domain) exceeds this, the scaled mean square (<= 1)
# or variance (<= 4) is below float32 resolution next to it.
_EPS_DOMINATES = _F32(2.0**64)


@dataclass(frozen=True)
class Impl:
    """One example implementation: ``normprops hunt --op OP --impl MODULE:FUNC``."""

    op: str
    func: str
    description: str


# --------------------------------------------------------------------------
# float64 reference-style kernels
# --------------------------------------------------------------------------


def softmax_f64(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float64, shifted by the row max."""
    with np.errstate(all="ignore"):
        x64 = np.asarray(x, dtype=np.float64)
        e = np.exp(x64 - np.max(x64, axis=-1, keepdims=True))
        return (e / np.sum(e, axis=-1, keepdims=True)).astype(np.float32)


def layernorm_f64(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Two-pass layer norm in float64 (population variance); nothing overflows for finite input."""
    with np.errstate(all="ignore"):
        x64 = np.asarray(x, dtype=np.float64)
        g64 = np.asarray(gamma, dtype=np.float64)
        b64 = np.asarray(beta, dtype=np.float64)
        eps64 = np.float64(eps)
        d = x64 - np.mean(x64, axis=-1, keepdims=True)
        var = np.mean(d * d, axis=-1, keepdims=True)
        return (d / np.sqrt(var + eps64) * g64 + b64).astype(np.float32)


def rmsnorm_f64(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMS norm in float64; squares of float32 values neither overflow nor underflow there."""
    with np.errstate(all="ignore"):
        x64 = np.asarray(x, dtype=np.float64)
        g64 = np.asarray(gamma, dtype=np.float64)
        ms = np.mean(x64 * x64, axis=-1, keepdims=True)
        return (x64 / np.sqrt(ms + np.float64(eps)) * g64).astype(np.float32)


# --------------------------------------------------------------------------
# float32 building blocks (also used by the planted-bug kernels)
# --------------------------------------------------------------------------


def _rsqrt(v: np.ndarray) -> np.ndarray:
    """Reciprocal square root in float32."""
    return _F32(1) / np.sqrt(v)


def _row_exponent(x: np.ndarray) -> np.ndarray:
    """Per-row k (int32, shape (rows, 1)) with max|x| in [2**(k-1), 2**k); 0 for zero or non-finite rows.

    Scaling a row by ``2**-k`` is exact (barring underflow of entries far
    below the row max) and brings every entry into (-1, 1).
    """
    amax = np.max(np.abs(x), axis=-1, keepdims=True)
    _, k = np.frexp(amax)
    return np.where(np.isfinite(amax), k, 0).astype(np.int32)


def _rms_apply(
    x: np.ndarray,
    k: np.ndarray,
    ms_s: np.ndarray,
    eps: float,
    rsqrt: Callable[[np.ndarray], np.ndarray] = _rsqrt,
) -> np.ndarray:
    """Return ``x / sqrt(ms + eps)`` in float32, where ``ms = ms_s * 4**k``.

    ``ms_s`` is the mean square of the row scaled by ``2**-k`` (so it is at
    most 1).  With ``eps_s = eps * 4**-k`` the result is
    ``(x * 2**-k) / sqrt(ms_s + eps_s)``; once ``eps_s`` reaches 2**64 (or
    overflows), ``ms`` is negligible and the result is ``x / sqrt(eps)``.
    The power-of-two factor is applied on whichever side keeps every
    intermediate in the normal range, so only the final rounding is lost.
    """
    eps32 = _F32(eps)
    eps_s = np.ldexp(eps32, -2 * k)  # may overflow to inf or underflow to 0
    big = (eps_s >= _EPS_DOMINATES) & np.isfinite(ms_s)
    r_s = rsqrt(np.where(big, _F32(1), ms_s + eps_s))  # in [2**-32, ~2*sqrt(cols)]
    # k <= 0: scaling x up by 2**-k is exact.
    lo = np.ldexp(x, -k) * r_s
    # k > 0: scale r_s down instead (keep the multiplier normal, finish with an exact ldexp).
    h = np.maximum(k - 64, 0)
    hi = np.ldexp(x * np.ldexp(r_s, h - k), -h)
    out = np.where(k <= 0, lo, hi)
    return np.where(big, x * rsqrt(eps32), out)


def _ln_apply(
    d_s: np.ndarray,
    k: np.ndarray,
    var_s: np.ndarray,
    eps: float,
    rsqrt: Callable[[np.ndarray], np.ndarray] = _rsqrt,
) -> np.ndarray:
    """Return ``d / sqrt(var + eps)`` in float32 given ``d = d_s * 2**k`` and ``var = var_s * 4**k``.

    ``d_s`` (the centred, scaled row) is below 2 in magnitude and ``var_s`` at
    most 4.  Layer norm is scale invariant apart from eps, so the result is
    ``d_s / sqrt(var_s + eps_s)``; an exactly centred entry gives exactly 0
    even when ``var_s + eps_s`` underflows to 0 (constant rows near float32 max).
    """
    eps32 = _F32(eps)
    eps_s = np.ldexp(eps32, -2 * k)
    big = (eps_s >= _EPS_DOMINATES) & np.isfinite(var_s)
    r_s = rsqrt(np.where(big, _F32(1), var_s + eps_s))
    out = np.where(d_s == 0, _F32(0), d_s * r_s)
    return np.where(big, np.ldexp(d_s * rsqrt(eps32), k), out)


def _shifted_exp(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``exp(x - m)`` in float32, corrected for the rounding error of ``x - m``.

    The subtraction error is recovered exactly with TwoSum and applied to
    first order, ``exp(d + err) ~= exp(d) * (1 + err)``; -inf entries give
    exactly 0.
    """
    d = x - m
    t = d - x
    err = (x - (d - t)) - (m + t)
    err = np.where(np.isfinite(err), err, _F32(0))
    e = np.exp(d)
    return e + e * err


def _row_sum(v: np.ndarray) -> np.ndarray:
    """Pairwise float32 sum over the last axis, keeping it."""
    return np.sum(v, axis=-1, keepdims=True, dtype=_F32)


def _row_sum_compensated(v: np.ndarray) -> np.ndarray:
    """Float32 sum over the last axis (kept) with about twice float32 precision.

    A pairwise tree in which every addition's rounding error is recovered
    exactly with TwoSum and the errors are summed alongside, so heavy
    cancellation (a sum of deviations from the mean) stays accurate.
    """
    s = v
    e = np.zeros_like(v)
    while s.shape[-1] > 1:
        if s.shape[-1] % 2:
            pad = np.zeros(s.shape[:-1] + (1,), dtype=s.dtype)
            s = np.concatenate([s, pad], axis=-1)
            e = np.concatenate([e, pad], axis=-1)
        a, b = s[..., 0::2], s[..., 1::2]
        s = a + b
        t = s - a
        e = e[..., 0::2] + e[..., 1::2] + ((a - (s - t)) + (b - t))
    return s + e


# --------------------------------------------------------------------------
# float32 careful kernels
# --------------------------------------------------------------------------


def softmax_f32(x: np.ndarray) -> np.ndarray:
    """Float32 softmax shifted by the row max, with the shift's rounding error compensated.

    -inf entries give exactly 0; a row containing NaN or +inf gives NaN; a
    fully -inf row gives NaN.
    """
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = _shifted_exp(x, m)
        return (e / _row_sum(e)).astype(np.float32)


def layernorm_f32(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Float32 layer norm: power-of-two prescale, corrected two-pass mean/variance.

    The row is scaled by ``2**-k`` (max |x| below 1) so sums and squares
    cannot overflow; the mean gets a second-pass correction
    ``mean += sum(x - mean) / n``, summed with compensation, so that every
    row (large mean, one outlier) centres to float32 accuracy and constant
    rows centre to exactly 0.
    """
    with np.errstate(all="ignore"):
        g = np.asarray(gamma, dtype=_F32)
        b = np.asarray(beta, dtype=_F32)
        n = _F32(x.shape[-1])
        k = _row_exponent(x)
        xs = np.ldexp(x, -k)
        d = xs - _row_sum(xs) / n
        d = d - _row_sum_compensated(d) / n
        var_s = _row_sum(d * d) / n
        return (_ln_apply(d, k, var_s, eps) * g + b).astype(np.float32)


def rmsnorm_f32(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """Float32 RMS norm: mean square of the row scaled by a power of two, scale folded back exactly.

    Rows of 3e19 or 3.4e38 give 1.0 (no overflow of the squares), subnormal
    rows give ``x / sqrt(eps)`` (no underflow to 0), zero rows give 0.
    """
    with np.errstate(all="ignore"):
        g = np.asarray(gamma, dtype=_F32)
        n = _F32(x.shape[-1])
        k = _row_exponent(x)
        xs = np.ldexp(x, -k)
        ms_s = _row_sum(xs * xs) / n
        return (_rms_apply(x, k, ms_s, eps) * g).astype(np.float32)


CORRECT: tuple[Impl, ...] = (
    Impl("softmax", "softmax_f64", "float64 softmax shifted by the row max"),
    Impl("layernorm", "layernorm_f64", "float64 two-pass layer norm"),
    Impl("rmsnorm", "rmsnorm_f64", "float64 RMS norm"),
    Impl("softmax", "softmax_f32", "float32 softmax, max shift with TwoSum-compensated exp argument"),
    Impl("layernorm", "layernorm_f32", "float32 layer norm, power-of-two prescale, corrected two-pass"),
    Impl("rmsnorm", "rmsnorm_f32", "float32 RMS norm, power-of-two prescale, range-safe eps handling"),
)
