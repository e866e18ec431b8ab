"""User-style normalization kernels with one planted numerical bug each.

Every function follows the ``normprops hunt`` calling contract (see
:mod:`normprops.examples.correct`) and is written like a float32 kernel.
Except where the planted bug is itself the lack of range safety, each one
reuses the range-safe float32 building blocks of the correct kernels, so the
planted bug is, as far as possible, its only defect.  :data:`PLANTED`
records, for each function, the input family expected to expose it and, when
one property shows it, that property; other families may catch the same bug.

Families: ``ordinary``, ``overflow_logits``, ``wide_span``, ``large_mean``,
``huge``, ``tiny``, ``eps_scale``, ``constant``, ``ragged``, ``masked``,
``nonfinite``, ``long_rows``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .correct import (
    _EPS_DOMINATES,
    BLOCK,
    _ln_apply,
    _masked_chunk,
    _masked_exp,
    _masked_logits,
    _rms_apply,
    _row_exponent,
    _row_sum,
    _row_sum_compensated,
    _rsqrt,
    _shifted_exp,
)

__all__ = [
    "PLANTED",
    "Planted",
    "layernorm_flush_inputs",
    "layernorm_no_eps",
    "layernorm_nondeterministic",
    "layernorm_one_pass",
    "layernorm_textbook",
    "layernorm_unbiased",
    "masked_softmax_leading_chunk_nan",
    "rmsnorm_batch_scale",
    "rmsnorm_coarse_rsqrt",
    "rmsnorm_dropped_tail",
    "rmsnorm_eps_outside",
    "rmsnorm_flush_inputs",
    "rmsnorm_fp16_accum",
    "rmsnorm_reciprocal_scale",
    "rmsnorm_square_overflow",
    "rmsnorm_unscaled_eps",
    "softmax_batch_dependent",
    "softmax_coarse_exp",
    "softmax_exp_error",
    "softmax_leading_block_nan",
    "softmax_masked_chunk_nan",
    "softmax_mean_shift",
    "softmax_no_shift",
    "softmax_partial_max",
    "softmax_wide_exp_error",
]

_F32 = np.float32


@dataclass(frozen=True)
class Planted:
    """One planted-bug implementation and the family expected to catch it; ``opt_in`` names the
    optional properties (``Target.opt_in``) the catch needs."""

    op: str
    func: str
    family: str
    bug: str
    property: str | None = None
    opt_in: frozenset[str] = frozenset()


def _prescale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row exponent k and the row scaled by 2**-k, as in the correct float32 kernels."""
    k = _row_exponent(x)
    return k, np.ldexp(x, -k)


def _mean_square(xs: np.ndarray) -> np.ndarray:
    """Pairwise float32 mean of squares over the last axis."""
    return _row_sum(xs * xs) / _F32(xs.shape[-1])


def _gain(y: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """``y * gamma`` in float32."""
    return (y * np.asarray(gamma, dtype=_F32)).astype(np.float32)


def _affine(y: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """``y * gamma + beta`` in float32."""
    return (y * np.asarray(gamma, dtype=_F32) + np.asarray(beta, dtype=_F32)).astype(np.float32)


# --------------------------------------------------------------------------
# softmax
# --------------------------------------------------------------------------


def softmax_no_shift(x: np.ndarray) -> np.ndarray:
    """Softmax without subtracting the row max.

    ``expf`` overflows to inf once a logit exceeds ~88.7, giving inf/inf = NaN.
    """
    with np.errstate(all="ignore"):
        # BUG: no max subtraction before exp (overflow above 88.7)
        e = np.exp(x)
        return (e / _row_sum(e)).astype(np.float32)


def softmax_partial_max(x: np.ndarray) -> np.ndarray:
    """Softmax whose max reduction only sees the first 1024 columns.

    Correct for cols <= 1024; beyond that a logit exceeding the partial max by
    more than ~88.7 overflows ``exp`` and the row becomes NaN.
    """
    with np.errstate(all="ignore"):
        # BUG: max reduction covers only the first 1024 columns (one block)
        m = np.max(x[:, :1024], axis=-1, keepdims=True)
        e = _shifted_exp(x, m)
        return (e / _row_sum(e)).astype(np.float32)


def softmax_mean_shift(x: np.ndarray) -> np.ndarray:
    """Softmax "stabilised" by subtracting the row mean instead of the row max.

    Fine while max - mean stays below ~88.7; a wider spread overflows ``exp``
    (and a -inf entry makes the mean -inf).
    """
    with np.errstate(all="ignore"):
        # BUG: shift by the mean, not the max (overflow once max - mean > 88.7)
        m = _row_sum(x) / _F32(x.shape[-1])
        e = _shifted_exp(x, m)
        return (e / _row_sum(e)).astype(np.float32)


# Degree-3 fit of 2**f on [0, 1), max relative error ~8.6e-5.
_EXP2_C1 = _F32(0.69511634)
_EXP2_C2 = _F32(0.227647)
_EXP2_C3 = _F32(0.0770652)
_LOG2E = _F32(1.4426950408889634)


def _fast_exp(d: np.ndarray) -> np.ndarray:
    """exp(d) via 2**t = 2**floor(t) * p(frac(t)) with a cubic p (relative error ~1e-4)."""
    t = np.maximum(d * _LOG2E, _F32(-150))  # clamp: -inf (masked) -> 0
    j = np.floor(t)
    f = t - j
    p = _F32(1) + f * (_EXP2_C1 + f * (_EXP2_C2 + f * _EXP2_C3))
    return np.ldexp(p, np.where(np.isfinite(j), j, _F32(0)).astype(np.int32))


def softmax_coarse_exp(x: np.ndarray) -> np.ndarray:
    """Softmax with a fast polynomial ``exp2`` approximation (relative error ~1e-4).

    Max-shifted and range-safe, but every probability carries ~1e-4 relative
    error, far above float32 rounding.
    """
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        # BUG: cubic 2**x approximation instead of an accurate exp (~1e-4 relative error)
        e = _fast_exp(x - m)
        return (e / _row_sum(e)).astype(np.float32)


def _exp_with_error(d: np.ndarray, rel: float) -> np.ndarray:
    """float32 exp(d) whose relative error swings between -rel and +rel three half-periods per
    binade of the result, as a truncated polynomial's equioscillating error does; exp(0) is off
    by +rel too."""
    d64 = d.astype(np.float64)
    t = d64 * math.log2(math.e)
    f = t - np.floor(np.where(np.isfinite(t), t, 0.0))
    return (np.exp(d64) * (1 + rel * np.cos(3 * math.pi * f))).astype(np.float32)


def softmax_exp_error(x: np.ndarray) -> np.ndarray:
    """Softmax with an exp that errs by up to 1e-6 relative (about 17 units of float32 rounding).

    Max-shifted, range-safe and otherwise exact to float32; only the exp is a little off, by less
    than a row-sum bound at 16k columns allows, so only a width-independent judge sees it.
    """
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        # BUG: exp accurate to 1e-6 relative, not to float32 rounding (~6e-8)
        e = _exp_with_error(x - m, 1e-6)
        return (e / _row_sum(e)).astype(np.float32)


def softmax_wide_exp_error(x: np.ndarray) -> np.ndarray:
    """Softmax that switches to a cheaper exp (1e-5 relative error) on rows wider than 2048.

    Exact to float32 below that width; above it, every probability errs by up to about 2e-5,
    inside the T = 32 row-sum bound at those widths (about 1.2e-5 at 2049 columns, 1.9e-4 at 16k).
    """
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        # BUG: a "fast path" for wide rows with an exp accurate to 1e-5 only
        rel = 1e-5 if x.shape[-1] > 2048 else 0.0
        e = _exp_with_error(x - m, rel)
        return (e / _row_sum(e)).astype(np.float32)


def softmax_batch_dependent(x: np.ndarray) -> np.ndarray:
    """Softmax whose denominator is summed differently for a single row.

    A "decode" fast path (rows == 1) splits the sum into 4 column chunks and
    adds the partials; batches use one pairwise sum.  Both are accurate, but a
    row's bits depend on the batch size.
    """
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = _shifted_exp(x, m)
        if x.shape[0] == 1:
            # BUG: single-row path uses a split-K sum, so results change with batch size
            s = _F32(0)
            for chunk in np.array_split(e, 4, axis=-1):
                if chunk.shape[-1]:
                    s = s + _row_sum(chunk)
        else:
            s = _row_sum(e)
        return (e / s).astype(np.float32)


_THREADS = 256


def softmax_masked_chunk_nan(x: np.ndarray) -> np.ndarray:
    """Online softmax over 256 strided per-thread partials merged with ``s_t * exp(m_t - M)``.

    Thread t owns columns t, t+256, ...; when all of them are -inf its running
    max is -inf and ``exp(-inf - (-inf))`` is NaN, which poisons the whole row.
    With cols <= 256 a single -inf entry triggers it; with cols > 512 only a
    mask covering a whole residue class mod 256 does.
    """
    with np.errstate(all="ignore"):
        rows, cols = x.shape
        nthreads = min(cols, _THREADS)  # only threads that own at least one column
        pad = (-cols) % _THREADS
        xp = np.pad(x, ((0, 0), (0, pad)), constant_values=-np.inf)
        xp = xp.reshape(rows, -1, _THREADS)[:, :, :nthreads]
        m_t = np.max(xp, axis=1, keepdims=True)  # per-thread running max
        # BUG: a fully masked thread has m_t = -inf and exp(-inf - (-inf)) = NaN
        s_t = np.sum(np.exp(xp - m_t), axis=1, dtype=_F32)
        m_t = m_t[:, 0, :]
        big_m = np.max(m_t, axis=-1, keepdims=True)
        s = _row_sum(s_t * np.exp(m_t - big_m))
        return (_shifted_exp(x, big_m) / s).astype(np.float32)


def softmax_leading_block_nan(x: np.ndarray) -> np.ndarray:
    """Split-row softmax over blocks of 1024 columns whose merge starts from block 0's statistics.

    The running (max, sum) starts as block 0's; each later block's max and sum are merged in with
    ``s exp(m - m') + s_b exp(m_b - m')``, and a later block that is entirely -inf is skipped.
    Block 0 is not checked: when it is entirely -inf (left padding of 1024 columns or more) its sum
    is ``exp(-inf - -inf)`` = NaN and the whole row is NaN. Masked blocks anywhere else are fine.
    """
    with np.errstate(all="ignore"):
        head = x[:, :BLOCK]
        m = np.max(head, axis=-1, keepdims=True)
        # BUG: block 0's sum is taken without the check the later blocks get
        s = _row_sum(np.exp(head - m))
        for start in range(BLOCK, x.shape[-1], BLOCK):
            block = x[:, start : start + BLOCK]
            m_b = np.max(block, axis=-1, keepdims=True)
            s_b = _row_sum(np.exp(block - m_b))
            live = m_b > -np.inf
            m_new = np.maximum(m, m_b)
            merged = s * np.exp(m - m_new) + s_b * np.exp(m_b - m_new)
            s = np.where(live, merged, s).astype(_F32)
            m = np.where(live, m_new, m).astype(_F32)
        return (_shifted_exp(x, m) / s).astype(np.float32)


def masked_softmax_leading_chunk_nan(x: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    """The chunked online masked softmax of :mod:`~normprops.examples.correct` whose running
    (max, sum) starts as chunk 0's, taken without the check the later chunks get: when chunk 0 keeps
    nothing (left padding of 1024 columns or more) its sum is ``exp(-inf - -inf)`` = NaN, and the
    whole row is NaN."""
    with np.errstate(all="ignore"):
        kept, a = _masked_logits(x, mask, scale)
        head = kept[:, :BLOCK]
        m = np.max(head, axis=-1, keepdims=True)
        # BUG: chunk 0's sum without the check that a chunk keeping nothing adds nothing
        s = _row_sum(np.exp(a * (head - m)))
        for start in range(BLOCK, kept.shape[-1], BLOCK):
            m_c, s_c = _masked_chunk(kept[:, start : start + BLOCK], a)
            live = m_c > -np.inf
            m_new = np.maximum(m, m_c)
            merged = s * np.exp(a * (m - m_new)) + s_c * np.exp(a * (m_c - m_new))
            s = np.where(live, merged, s).astype(_F32)
            m = np.where(live, m_new, m).astype(_F32)
        return np.where(m == -np.inf, _F32(0), _masked_exp(kept, m, a) / s).astype(np.float32)


# --------------------------------------------------------------------------
# layer norm
# --------------------------------------------------------------------------


def layernorm_one_pass(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm with the one-pass variance ``E[x^2] - E[x]^2`` in float32.

    Range-safe (power-of-two prescale), but the subtraction cancels
    catastrophically once |mean|/std exceeds ~1e2 (clamped at 0, so the
    output blows up to ``(x - mean)/sqrt(eps)``).
    """
    with np.errstate(all="ignore"):
        n = _F32(x.shape[-1])
        k, xs = _prescale(x)
        mean = _row_sum(xs) / n
        # BUG: one-pass variance E[x^2] - E[x]^2 (catastrophic cancellation)
        var_s = np.maximum(_mean_square(xs) - mean * mean, _F32(0))
        y = _ln_apply(xs - mean, k, var_s, eps)
        return _affine(y, gamma, beta)


def _centre(xs: np.ndarray, n: np.float32) -> np.ndarray:
    """Corrected two-pass centring of a prescaled row (as in ``layernorm_f32``)."""
    d = xs - _row_sum(xs) / n
    return d - _row_sum_compensated(d) / n


def layernorm_unbiased(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm with the unbiased (sample) variance, dividing by cols - 1.

    Outputs are too small by sqrt((n-1)/n): 5e-4 relative at 1000 columns,
    a factor sqrt(2) at 2 columns (cols == 1 is guarded and stays correct).
    """
    with np.errstate(all="ignore"):
        cols = x.shape[-1]
        k, xs = _prescale(x)
        d = _centre(xs, _F32(cols))
        # BUG: sample variance (divide by cols - 1) instead of population variance
        var_s = _row_sum(d * d) / _F32(max(cols - 1, 1))
        y = _ln_apply(d, k, var_s, eps)
        return _affine(y, gamma, beta)


def layernorm_no_eps(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm that forgets eps: ``(x - mean) * rsqrt(var)``.

    Nearly right when var >> eps, but a zero-variance (constant) row gives
    0 * inf = NaN instead of ``beta``.
    """
    with np.errstate(all="ignore"):
        n = _F32(x.shape[-1])
        k, xs = _prescale(x)
        d = _centre(xs, n)
        var_s = _row_sum(d * d) / n
        # BUG: eps never added; var == 0 gives 0 * inf = NaN (scale-invariant without eps)
        y = d * _rsqrt(var_s)
        return _affine(y, gamma, beta)


def layernorm_nondeterministic(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm whose reductions run in a fresh random order on every call.

    Emulates an atomicAdd reduction: each call permutes the columns before
    summing, so results differ in the last bits between two identical calls.
    """
    with np.errstate(all="ignore"):
        cols = x.shape[-1]
        n = _F32(cols)
        # BUG: unseeded random summation order (like atomicAdd), non-deterministic
        perm = np.random.default_rng().permutation(cols)
        k, xs = _prescale(x)
        d = xs - _row_sum(np.take(xs, perm, axis=-1)) / n
        d = d - _row_sum_compensated(np.take(d, perm, axis=-1)) / n
        var_s = _row_sum(np.take(d * d, perm, axis=-1)) / n
        y = _ln_apply(d, k, var_s, eps)
        return _affine(y, gamma, beta)


def _flush_subnormals(x: np.ndarray) -> np.ndarray:
    """x with every subnormal entry replaced by a zero of its sign (DAZ: denormals are zero)."""
    return np.where(np.abs(x) < _F32(2.0**-126), x * _F32(0), x).astype(_F32)


def layernorm_flush_inputs(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """The correct float32 layer norm on a machine that treats subnormal inputs as zero.

    A row of subnormals has a perfectly normal layer norm; flushed, it becomes a constant row and
    gives beta.
    """
    with np.errstate(all="ignore"):
        # BUG: subnormal inputs read as zero (a flush-to-zero / DAZ build)
        xf = _flush_subnormals(x)
        n = _F32(x.shape[-1])
        k, xs = _prescale(xf)
        d = _centre(xs, n)
        var_s = _row_sum(d * d) / n
        return _affine(_ln_apply(d, k, var_s, eps), gamma, beta)


def layernorm_textbook(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """The textbook float32 layer norm: mean, then the centred variance, then the affine map.

    Accurate wherever the accuracy bound asks for digits, but on an exactly constant row the
    rounded mean differs from the value by an ulp, and when that ulp is large against sqrt(eps) the
    row comes out as about +-gamma + beta instead of beta. Caught only by the opt-in
    ``exact_constant`` property (accuracy asks for no digits at that conditioning).
    """
    with np.errstate(all="ignore"):
        n = _F32(x.shape[-1])
        # BUG (for exact_constant): mean = sum / n rounds, so a constant row does not centre to 0
        mean = _row_sum(x) / n
        d = x - mean
        var = _row_sum(d * d) / n
        return _affine(d / np.sqrt(var + _F32(eps)), gamma, beta)


# --------------------------------------------------------------------------
# RMS norm
# --------------------------------------------------------------------------


def rmsnorm_flush_inputs(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """The correct float32 RMS norm on a machine that treats subnormal inputs as zero.

    Without eps, RMS norm of [1e-39, 2e-39] is about [0.63, 1.26]; with eps it is x / sqrt(eps),
    still far above float32's smallest normal. Flushed, it is 0.
    """
    with np.errstate(all="ignore"):
        # BUG: subnormal inputs read as zero (a flush-to-zero / DAZ build)
        xf = _flush_subnormals(x)
        k, xs = _prescale(xf)
        return _gain(_rms_apply(xf, k, _mean_square(xs), eps), gamma)


def rmsnorm_eps_outside(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMS norm with eps outside the square root: ``x / (sqrt(ms) + eps)``.

    Indistinguishable when ms >> eps; when the mean square is near eps (or
    below it) the denominator is wrong by up to a factor 1/sqrt(eps).
    """
    with np.errstate(all="ignore"):
        k, xs = _prescale(x)
        ms_s = _mean_square(xs)
        # BUG: eps added after the sqrt instead of inside it
        y = xs / (np.sqrt(ms_s) + np.ldexp(_F32(eps), -k))
        return _gain(y, gamma)


def rmsnorm_unscaled_eps(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """Range-safe RMS norm that prescales the row by 2**-k but forgets to rescale eps.

    Equivalent to using ``eps * 4**k``: rows with mean square near eps lose
    eps almost entirely, and subnormal rows come out O(1) instead of
    ``x / sqrt(eps)``.
    """
    with np.errstate(all="ignore"):
        k, xs = _prescale(x)
        ms_s = _mean_square(xs)
        # BUG: eps not scaled into the prescaled domain (should be eps * 4**-k)
        y = xs * _rsqrt(ms_s + _F32(eps))
        return _gain(y, gamma)


def rmsnorm_reciprocal_scale(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMS norm prescaled per row by multiplying with ``1 / max|x|`` instead of dividing.

    Fine for normal rows, but when max|x| < 1/FLT_MAX (~2.9e-39, i.e. subnormal
    rows) the reciprocal overflows to inf and the row comes out NaN.
    """
    with np.errstate(all="ignore"):
        amax = np.max(np.abs(x), axis=-1, keepdims=True)
        # BUG: reciprocal of a subnormal row max overflows to inf
        inv = _F32(1) / np.where(amax == 0, _F32(1), amax)
        xs = x * inv
        ms_s = _mean_square(xs)
        eps_s = _F32(eps) * inv * inv
        big = (eps_s >= _EPS_DOMINATES) & np.isfinite(ms_s)
        y = np.where(big, x * _rsqrt(_F32(eps)), xs * _rsqrt(ms_s + eps_s))
        return _gain(y, gamma)


def rmsnorm_dropped_tail(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMS norm whose "float4-vectorised" reduction skips the last cols % 4 columns.

    The sum of squares covers only the first cols//4*4 columns (but still
    divides by cols).  For cols < 4 the scalar path covers every column, so
    the bug needs cols >= 5 with cols % 4 != 0 and a non-zero tail.
    """
    with np.errstate(all="ignore"):
        cols = x.shape[-1]
        k, xs = _prescale(x)
        # BUG: vectorised loop drops the ragged tail (cols % 4 columns)
        nvec = cols - cols % 4 if cols >= 4 else cols
        ms_s = _row_sum(xs[:, :nvec] * xs[:, :nvec]) / _F32(cols)
        return _gain(_rms_apply(x, k, ms_s, eps), gamma)


def rmsnorm_fp16_accum(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMS norm accumulating the sum of squares sequentially in float16.

    The row is prescaled so the fp16 sum cannot overflow, but the 11-bit
    accumulator drops low bits of every addition (~1e-3 relative error at
    1000 columns, worse as cols grows).
    """
    with np.errstate(all="ignore"):
        k, xs = _prescale(x)
        # BUG: sequential float16 accumulator for the sum of squares
        acc = np.cumsum((xs * xs).astype(np.float16), axis=-1, dtype=np.float16)[:, -1:]
        ms_s = acc.astype(_F32) / _F32(x.shape[-1])
        return _gain(_rms_apply(x, k, ms_s, eps), gamma)


def _fast_rsqrt(v: np.ndarray) -> np.ndarray:
    """0x5F3759DF bit-hack inverse square root with one Newton step (relative error ~1.75e-3)."""
    v = np.ascontiguousarray(v, dtype=_F32)
    y = (np.int32(0x5F3759DF) - (v.view(np.int32) >> 1)).view(_F32)
    y = y * (_F32(1.5) - _F32(0.5) * v * y * y)
    return np.where(v == np.inf, _F32(0), y)


def rmsnorm_coarse_rsqrt(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """Range-safe RMS norm using the "fast inverse square root" with one Newton step.

    Every output carries up to ~1.75e-3 relative error.
    """
    with np.errstate(all="ignore"):
        k, xs = _prescale(x)
        ms_s = _mean_square(xs)
        # BUG: bit-hack rsqrt + one Newton iteration (relative error ~1.75e-3)
        y = _rms_apply(x, k, ms_s, eps, rsqrt=_fast_rsqrt)
        return _gain(y, gamma)


def rmsnorm_batch_scale(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMS norm prescaled by the max |x| of the whole batch instead of each row.

    Rows leak into each other: a NaN or inf anywhere poisons every row, and
    the (inexact) scale factor makes a row's bits depend on its neighbours.
    """
    with np.errstate(all="ignore"):
        # BUG: one range-safety scale for the whole batch, not per row
        amax = np.max(np.abs(x))
        scale = amax if amax != 0 else _F32(1)
        xs = x / scale
        ms_s = _mean_square(xs)
        eps_s = _F32(eps) / scale / scale
        big = (eps_s >= _EPS_DOMINATES) & np.isfinite(ms_s)
        y = np.where(big, x * _rsqrt(_F32(eps)), xs * _rsqrt(ms_s + eps_s))
        return _gain(y, gamma)


def rmsnorm_square_overflow(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """Textbook float32 RMS norm ``x * rsqrt(mean(x*x) + eps)`` with no prescaling.

    Accurate for ordinary inputs, but squares overflow once |x| > ~1.8e19 and
    the row comes out as 0 (or NaN).
    """
    with np.errstate(all="ignore"):
        # BUG: mean(x*x) in float32 without range scaling (x*x overflows)
        ms = _mean_square(x)
        y = x / np.sqrt(ms + _F32(eps))
        return _gain(y, gamma)


PLANTED: tuple[Planted, ...] = (
    Planted("softmax", "softmax_no_shift", "overflow_logits", "exp without max subtraction overflows"),
    Planted("layernorm", "layernorm_one_pass", "large_mean", "one-pass E[x^2]-E[x]^2 variance cancels"),
    Planted("rmsnorm", "rmsnorm_eps_outside", "eps_scale", "eps added outside the sqrt"),
    Planted("layernorm", "layernorm_unbiased", "ordinary", "variance divided by cols-1"),
    Planted("rmsnorm", "rmsnorm_dropped_tail", "ragged", "vectorised reduction drops cols % 4 tail"),
    Planted("softmax", "softmax_partial_max", "overflow_logits", "row max over first 1024 columns only"),
    Planted("rmsnorm", "rmsnorm_fp16_accum", "ordinary", "sum of squares accumulated in float16"),
    Planted("softmax", "softmax_coarse_exp", "ordinary", "cubic exp2 approximation, ~1e-4 error"),
    Planted("rmsnorm", "rmsnorm_coarse_rsqrt", "ordinary", "bit-hack rsqrt with one Newton step"),
    Planted("rmsnorm", "rmsnorm_batch_scale", "nonfinite", "prescale by whole-batch max leaks across rows"),
    Planted("softmax", "softmax_batch_dependent", "ordinary", "sum order depends on batch size",
            "batch_invariance"),
    # Random per call: shows as determinism or, by chance, as batch_invariance; no single property.
    Planted("layernorm", "layernorm_nondeterministic", "ordinary", "random reduction order per call"),
    Planted("softmax", "softmax_masked_chunk_nan", "masked", "fully masked thread share gives NaN merge"),
    Planted("softmax", "softmax_leading_block_nan", "masked",
            "split-row merge starts from block 0 unchecked: NaN when block 0 is all -inf", "finite"),
    Planted("masked_softmax", "masked_softmax_leading_chunk_nan", "masked",
            "online merge starts from chunk 0 unchecked: NaN when chunk 0 keeps nothing", "finite"),
    Planted("rmsnorm", "rmsnorm_square_overflow", "huge", "x*x overflows without prescaling",
            "range_safety", opt_in=frozenset({"range_safety"})),
    Planted("rmsnorm", "rmsnorm_unscaled_eps", "eps_scale", "eps not rescaled with the prescaled row"),
    Planted("rmsnorm", "rmsnorm_reciprocal_scale", "tiny", "1/max|x| overflows for subnormal rows"),
    Planted("layernorm", "layernorm_no_eps", "constant", "eps forgotten, zero variance gives NaN"),
    Planted("softmax", "softmax_mean_shift", "wide_span", "shift by row mean instead of max"),
    Planted("softmax", "softmax_exp_error", "ordinary", "exp with 1e-6 relative error", "ratios"),
    Planted("softmax", "softmax_wide_exp_error", "ordinary",
            "exp with 1e-5 relative error on rows wider than 2048", "ratios"),
    Planted("rmsnorm", "rmsnorm_flush_inputs", "tiny", "subnormal inputs flushed to zero", "accuracy"),
    Planted("layernorm", "layernorm_flush_inputs", "tiny", "subnormal inputs flushed to zero",
            "accuracy"),
    Planted("layernorm", "layernorm_textbook", "constant", "constant rows give +-gamma, not beta",
            "exact_constant", opt_in=frozenset({"exact_constant"})),
)
