"""Correct user-style normalization kernels that the hunter must never flag.

Each function follows the ``normprops hunt`` calling contract:

* ``softmax(x)``
* ``masked_softmax(x, mask, scale)``
* ``layernorm(x, gamma, beta, eps)``
* ``rmsnorm(x, gamma, eps)``

``x`` is a C-contiguous float32 array of shape ``(rows, cols)``; ``gamma`` and
``beta`` are float32 of shape ``(cols,)``; ``eps`` is a Python float holding a
float32 value; ``mask`` is a boolean array of ``x``'s shape (True: the entry
takes part) and ``scale`` a Python float holding a float32 value.  Every
function returns float32 of the shape of ``x`` and works
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
    "layernorm_kahan",
    "layernorm_welford",
    "masked_softmax_online",
    "rmsnorm_f32",
    "rmsnorm_f64",
    "rmsnorm_pairwise",
    "softmax_exp2",
    "softmax_f32",
    "softmax_blocks",
    "softmax_f64",
    "softmax_logsumexp",
    "softmax_online",
    "softmax_reciprocal",
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


# --------------------------------------------------------------------------
# more float32 designs, each a common way of writing the kernel
# --------------------------------------------------------------------------

_LOG2E = _F32(1.4426950408889634)
#: Lanes of a warp-per-row kernel: lane j owns columns j, j + 32, j + 64, ...
LANES = 32
#: Columns per chunk of the online softmax (one block's tile).
CHUNK = 256
#: Columns per block of the split-row softmax (one thread block's share of a long row).
BLOCK = 1024


def _lanes(v: np.ndarray, lanes: int, fill: float) -> np.ndarray:
    """(rows, cols) -> (rows, steps, lanes): step i of lane j holds column i * lanes + j; the
    ragged tail is padded with ``fill``."""
    rows, cols = v.shape
    steps = -(-cols // lanes)
    padded = np.full((rows, steps * lanes), fill, dtype=v.dtype)
    padded[:, :cols] = v
    return padded.reshape(rows, steps, lanes)


def softmax_exp2(x: np.ndarray) -> np.ndarray:
    """Float32 softmax computing ``exp(x - max)`` as ``exp2((x - max) * log2(e))``, as GPU code
    does (``ex2`` is the hardware instruction). The product rounds once more than ``expf``'s
    argument: a relative error of about ``u |x - max|`` more per probability."""
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = np.exp2((x - m) * _LOG2E)
        return (e / _row_sum(e)).astype(np.float32)


def softmax_reciprocal(x: np.ndarray) -> np.ndarray:
    """Float32 softmax that multiplies by ``1 / sum`` (one division per row, not per element)."""
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        e = np.exp(x - m)
        return (e * (_F32(1) / _row_sum(e))).astype(np.float32)


def softmax_online(x: np.ndarray) -> np.ndarray:
    """Chunked online softmax: one pass keeps a running (max, sum) over chunks of 256 columns,
    rescaling the sum by ``exp(m_old - m_new)`` whenever the max grows; a second pass writes
    ``exp(x - max) / sum``. A chunk that is entirely -inf leaves the running state alone."""
    with np.errstate(all="ignore"):
        rows, cols = x.shape
        m = np.full((rows, 1), -np.inf, dtype=_F32)
        s = np.zeros((rows, 1), dtype=_F32)
        for start in range(0, cols, CHUNK):
            chunk = x[:, start : start + CHUNK]
            m_c = np.max(chunk, axis=-1, keepdims=True)
            # A fully masked chunk adds nothing (exp(-inf - -inf) would be NaN).
            s_c = np.where(m_c > -np.inf, _row_sum(np.exp(chunk - m_c)), _F32(0))
            m_new = np.maximum(m, m_c)
            live = m_new > -np.inf  # some finite (or +inf) entry seen so far
            merged = s * np.exp(m - m_new) + s_c * np.exp(m_c - m_new)
            s = np.where(live, merged, s).astype(_F32)
            m = np.where(live | np.isnan(m_new), m_new, m).astype(_F32)
        return (np.exp(x - m) / s).astype(np.float32)


def _block_stats(x: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block of ``block`` columns: its max and its sum of ``exp(x - max)``, each (rows, blocks).
    A block that is entirely -inf has max -inf and sum 0 (``exp(-inf - -inf)`` would be NaN)."""
    starts = range(0, x.shape[-1], block)
    m = np.concatenate([np.max(x[:, s : s + block], axis=-1, keepdims=True) for s in starts], axis=-1)
    sums = [_row_sum(np.exp(x[:, s : s + block] - m[:, j : j + 1])) for j, s in enumerate(starts)]
    s = np.concatenate(sums, axis=-1)
    return m, np.where(m > -np.inf, s, _F32(0))


def softmax_blocks(x: np.ndarray) -> np.ndarray:
    """Split-row softmax, as a kernel that gives each block of 1024 columns of a long row to its own
    thread block: every block's max and sum, then one merge ``sum_b s_b exp(m_b - max_b m_b)``.
    Blocks that are entirely -inf add nothing; a fully masked row gives NaN."""
    with np.errstate(all="ignore"):
        m_b, s_b = _block_stats(x, BLOCK)
        m = np.max(m_b, axis=-1, keepdims=True)
        s = _row_sum(np.where(m_b > -np.inf, s_b * np.exp(m_b - m), _F32(0)))
        return (_shifted_exp(x, m) / s).astype(np.float32)


def softmax_logsumexp(x: np.ndarray) -> np.ndarray:
    """Float32 softmax as ``exp(x - max - log(sum exp(x - max)))``: no division. The argument of
    the last exp carries the rounding of ``log(sum)`` and of one more subtraction (docs/tolerances.md,
    the ``ln S`` term of the ratio bound)."""
    with np.errstate(all="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        d = x - m
        lse = np.log(_row_sum(np.exp(d)))
        return np.exp(d - lse).astype(np.float32)


def _masked_logits(x: np.ndarray, mask: np.ndarray, scale: float) -> tuple[np.ndarray, np.float32]:
    """The kept entries of ``x`` (-inf elsewhere) and ``|scale|``, the row negated for a negative
    scale (exactly), so that the largest logit ``scale * x`` is always the largest kept entry."""
    x = np.asarray(x, dtype=_F32)
    return np.where(mask, x if scale >= 0 else -x, _F32(-np.inf)), _F32(abs(scale))


def _masked_exp(kept: np.ndarray, m: np.ndarray, a: np.float32) -> np.ndarray:
    """``exp(a (x - m))`` at kept entries, 0 at masked ones. The scale multiplies ``x - m``, never
    ``x``: no product overflows however large the scale and the row."""
    return np.where(kept > -np.inf, np.exp(a * (kept - m)), _F32(0))


def _masked_chunk(kept: np.ndarray, a: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's max and sum of ``exp(a (x - max))``: -inf and 0 when it keeps nothing (its sum
    would be ``exp(-inf - -inf)``, NaN)."""
    m_c = np.max(kept, axis=-1, keepdims=True)
    s_c = _row_sum(_masked_exp(kept, m_c, a))
    return m_c, np.where(m_c > -np.inf, s_c, _F32(0))


def _merge_chunk(m: np.ndarray, s: np.ndarray, m_c: np.ndarray, s_c: np.ndarray,
                 a: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The running (max, sum) with one chunk's merged in, each side rescaled to the larger max; a
    side that has kept nothing yet (max -inf) adds nothing."""
    m_new = np.maximum(m, m_c)
    s_new = (np.where(m > -np.inf, s * np.exp(a * (m - m_new)), _F32(0))
             + np.where(m_c > -np.inf, s_c * np.exp(a * (m_c - m_new)), _F32(0)))
    return m_new, s_new.astype(_F32)


def masked_softmax_online(x: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    """Chunked online masked softmax: each chunk of 1024 columns gives the max of its kept entries
    and its sum, merged into a running (max, sum); a second pass writes ``exp(a (x - max)) / sum``.
    A chunk that keeps nothing adds nothing, a fully masked row gives zeros (a NaN kept gives NaN),
    and the scale multiplies
    ``x - max`` rather than ``x`` (a negative scale negates the row first), so ``scale * x`` past
    float32's range never overflows."""
    with np.errstate(all="ignore"):
        kept, a = _masked_logits(x, mask, scale)
        rows, cols = kept.shape
        m = np.full((rows, 1), -np.inf, dtype=_F32)
        s = np.zeros((rows, 1), dtype=_F32)
        for start in range(0, cols, BLOCK):
            m, s = _merge_chunk(m, s, *_masked_chunk(kept[:, start : start + BLOCK], a), a)
        return np.where(m == -np.inf, _F32(0), _masked_exp(kept, m, a) / s).astype(np.float32)


def _chan_merge(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Chan, Golub & LeVeque's merge of two (count, mean, M2) states; an empty side is the other."""
    na, ma, qa = a
    nb, mb, qb = b
    n = na + nb
    safe_n = np.where(n > 0, n, _F32(1))
    delta = mb - ma
    mean = ma + delta * (nb / safe_n)
    m2 = qa + qb + delta * delta * (na * nb / safe_n)
    mean = np.where(nb == 0, ma, np.where(na == 0, mb, mean))
    m2 = np.where(nb == 0, qa, np.where(na == 0, qb, m2))
    return n, mean.astype(_F32), m2.astype(_F32)


def layernorm_welford(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Warp-per-row layer norm: each of 32 lanes runs Welford's update sequentially over its
    strided columns, then the lanes meet in five Chan merges (offsets 16, 8, 4, 2, 1). The row is
    prescaled by a power of two so nothing overflows; a constant row centres to exactly 0."""
    with np.errstate(all="ignore"):
        rows, cols = x.shape
        k = _row_exponent(x)
        xs = np.ldexp(x, -k)
        strided = _lanes(xs, LANES, 0.0)
        count = np.zeros((rows, LANES), dtype=_F32)
        mean = np.zeros((rows, LANES), dtype=_F32)
        m2 = np.zeros((rows, LANES), dtype=_F32)
        lane = np.arange(LANES)
        for i in range(strided.shape[1]):
            valid = i * LANES + lane < cols
            v = strided[:, i, :]
            n = count + _F32(1)
            delta = v - mean
            new_mean = mean + delta / n
            new_m2 = m2 + delta * (v - new_mean)
            count = np.where(valid, n, count)
            mean = np.where(valid, new_mean, mean)
            m2 = np.where(valid, new_m2, m2)
        state = (count, mean, m2)
        offset = LANES // 2
        while offset >= 1:
            state = _chan_merge(tuple(a[:, :offset] for a in state),
                                tuple(a[:, offset : 2 * offset] for a in state))
            offset //= 2
        n, row_mean, row_m2 = (a[:, :1] for a in state)
        d = xs - row_mean
        return (_ln_apply(d, k, row_m2 / n, eps) * np.asarray(gamma, dtype=_F32)
                + np.asarray(beta, dtype=_F32)).astype(np.float32)


def _kahan_sum(v: np.ndarray) -> np.ndarray:
    """Kahan-compensated float32 sum over the last axis (kept), 32 strided lanes each compensated,
    then the lanes' sums and compensations folded with compensation too."""
    strided = _lanes(v, LANES, 0.0)
    s = np.zeros(strided.shape[::2], dtype=_F32)
    c = np.zeros_like(s)
    for i in range(strided.shape[1]):
        y = strided[:, i, :] - c
        t = s + y
        c = (t - s) - y
        s = t
    total = np.zeros((v.shape[0], 1), dtype=_F32)
    comp = np.zeros_like(total)
    for term in (s, -c):
        for j in range(LANES):
            y = term[:, j : j + 1] - comp
            t = total + y
            comp = (t - total) - y
            total = t
    return total


def layernorm_kahan(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Two-pass float32 layer norm whose two sums (x, then (x - mean)^2) are Kahan-compensated,
    on the row prescaled by a power of two."""
    with np.errstate(all="ignore"):
        n = _F32(x.shape[-1])
        k = _row_exponent(x)
        xs = np.ldexp(x, -k)
        d = xs - _kahan_sum(xs) / n
        var_s = _kahan_sum(d * d) / n
        return (_ln_apply(d, k, var_s, eps) * np.asarray(gamma, dtype=_F32)
                + np.asarray(beta, dtype=_F32)).astype(np.float32)


def _tree_sum(v: np.ndarray) -> np.ndarray:
    """Float32 sum over the last axis (kept) by a balanced binary tree: ceil(log2 C) levels."""
    while v.shape[-1] > 1:
        if v.shape[-1] % 2:
            v = np.concatenate([v, np.zeros(v.shape[:-1] + (1,), dtype=v.dtype)], axis=-1)
        v = v[..., 0::2] + v[..., 1::2]
    return v


def rmsnorm_pairwise(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """RMS norm whose sum of squares is a balanced pairwise tree (a block reduction's shape) on the
    row prescaled by a power of two."""
    with np.errstate(all="ignore"):
        n = _F32(x.shape[-1])
        k = _row_exponent(x)
        xs = np.ldexp(x, -k)
        ms_s = _tree_sum(xs * xs) / n
        return (_rms_apply(x, k, ms_s, eps) * np.asarray(gamma, dtype=_F32)).astype(np.float32)


CORRECT: tuple[Impl, ...] = (
    Impl("softmax", "softmax_f64", "float64 softmax shifted by the row max"),
    Impl("layernorm", "layernorm_f64", "float64 two-pass layer norm"),
    Impl("rmsnorm", "rmsnorm_f64", "float64 RMS norm"),
    Impl("softmax", "softmax_f32", "float32 softmax, max shift with TwoSum-compensated exp argument"),
    Impl("layernorm", "layernorm_f32", "float32 layer norm, power-of-two prescale, corrected two-pass"),
    Impl("rmsnorm", "rmsnorm_f32", "float32 RMS norm, power-of-two prescale, range-safe eps handling"),
    Impl("softmax", "softmax_exp2", "float32 softmax, exp as exp2((x - max) * log2 e)"),
    Impl("softmax", "softmax_reciprocal", "float32 softmax, multiply by 1 / sum"),
    Impl("softmax", "softmax_online", "float32 chunked online softmax (running max and rescaled sum)"),
    Impl("softmax", "softmax_blocks", "float32 split-row softmax, per-block max and sum merged once"),
    Impl("softmax", "softmax_logsumexp", "float32 softmax as exp(x - max - log sum)"),
    Impl("layernorm", "layernorm_welford", "float32 layer norm, 32-lane Welford with Chan merges"),
    Impl("layernorm", "layernorm_kahan", "float32 two-pass layer norm with Kahan sums"),
    Impl("rmsnorm", "rmsnorm_pairwise", "float32 RMS norm, pairwise-tree sum of squares"),
    Impl("masked_softmax", "masked_softmax_online",
         "float32 chunked online masked softmax, per-chunk max merged, scale applied after the max"),
)
