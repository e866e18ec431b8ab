"""Attention kernels written like float32 GPU kernels, in numpy: four correct ones and nine with
one planted bug each.

Each follows the op's contract (:mod:`normprops.ops.attention`): ``fn(q, k, v, mask, scale) -> (out,
lse)`` with ``q``, ``k``, ``v`` in a storage type (float32, ``ml_dtypes.bfloat16`` or float16),
``out`` in that type and ``lse`` float32. They compute in float32. Their matrix products sum 16
products at a time in a wide accumulator, rounded once, and add those partials one after another in
float32, as a tensor core's MMA chain does; so do their softmax sums. That is the depth their
:data:`DECLARATIONS` state (``ErrorModel(threads=16)``: at least ``ceil(n / 16) + 3``). The
scores-first kernel is a scalar loop instead (depth ``n - 1``: ``ErrorModel(threads=1)``, what a
kernel hunted without flags is held to).
:data:`PLANTED` names, for each planted kernel, the family expected to expose it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

from normprops.errormodel import ErrorModel
from normprops.ops.attention_math import SENTINEL, AttentionDeclaration

__all__ = [
    "CORRECT",
    "DECLARATIONS",
    "PLANTED",
    "AttentionKernel",
    "attention_dropped_tail_keys",
    "attention_finite_sentinel",
    "attention_first_key_max",
    "attention_fp16_accumulate",
    "attention_gqa_wrong_head",
    "attention_ignores_strides",
    "attention_lse_plus_inf",
    "attention_masked_row_nan_mixture",
    "attention_no_max_subtraction",
    "attention_online",
    "attention_online_p_bf16",
    "attention_scores_first",
    "attention_two_pass",
]

F32 = np.float32
CHUNK = 16  # products summed at once in a wide accumulator (one MMA's k)
TILE = 32  # keys per tile of the online kernels


def _mma(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float32: each run of ``CHUNK`` products summed in float64 (each product of two
    float32 values exact there) and rounded once, the partials added in turn. The sums run along
    one axis of an elementwise product, never through BLAS, whose blocking follows the matrices'
    shapes: a query row gives the same bits alone and in a batch."""
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], F32)
    with np.errstate(all="ignore"):  # inf and NaN propagate as on a GPU
        for start in range(0, a.shape[-1], CHUNK):
            chunk = slice(start, start + CHUNK)
            terms = a[..., chunk, None].astype(np.float64) * b[..., None, chunk, :].astype(np.float64)
            acc = acc + terms.sum(axis=-2).astype(F32)
    return acc


def _chunk_sum(x: np.ndarray) -> np.ndarray:
    """Sum over the last axis, shaped like :func:`_mma`."""
    acc = np.zeros(x.shape[:-1], F32)
    with np.errstate(all="ignore"):
        for start in range(0, x.shape[-1], CHUNK):
            acc = acc + x[..., start:start + CHUNK].astype(np.float64).sum(axis=-1).astype(F32)
    return acc


def _operands(q, k, v, group_of=None):
    """float32 copies of the inputs with the kv heads expanded to the query heads."""
    qf, kf, vf = (np.asarray(a).astype(F32) for a in (q, k, v))
    hq, hkv = qf.shape[1], kf.shape[1]
    heads = np.arange(hq) // (hq // hkv) if group_of is None else group_of(np.arange(hq), hq, hkv)
    return qf, kf[:, heads], vf[:, heads]


def _scores(qf, ke, mask, scale, fill=-np.inf):
    s = _mma(qf, ke.swapaxes(-1, -2)) * F32(scale)
    if mask is not None:
        s = np.where(mask, s, F32(fill))
    return s.astype(F32)


def _finish(acc, l_sum, m, dtype, *, empty_out=0.0, empty_lse=-np.inf):
    empty = l_sum == 0
    with np.errstate(all="ignore"):
        out = np.where(empty[..., None], F32(empty_out), acc / np.where(empty, F32(1), l_sum)[..., None])
        lse = np.where(empty, F32(empty_lse), m + np.log(np.where(empty, F32(1), l_sum)))
    return out.astype(F32).astype(dtype), lse.astype(F32)


# --- correct ---------------------------------------------------------------------------------------


def attention_two_pass(q, k, v, mask, scale):
    """Scores, their row max, exp(s - max), the row sum and P.V; an empty row gives zeros."""
    qf, ke, ve = _operands(q, k, v)
    s = _scores(qf, ke, mask, scale)
    m = s.max(axis=-1, initial=-np.inf)  # Lk = 0: every row empty
    m0 = np.where(np.isneginf(m), F32(0), m)
    e = np.exp(s - m0[..., None])
    return _finish(_mma(e, ve), _chunk_sum(e), m0, np.asarray(q).dtype)


def _online(q, k, v, mask, scale, *, p_dtype=None, fill=-np.inf, start=-np.inf, group_of=None,
            pv=_mma):
    """FlashAttention's loop: tiles of keys, a running max ``m``, sum ``l`` and output ``acc``
    rescaled by ``exp(m_old - m_new)`` whenever the max grows."""
    qf, ke, ve = _operands(q, k, v, group_of)
    lk = ke.shape[2]
    m = np.full(qf.shape[:3], F32(start))
    l_sum = np.zeros(qf.shape[:3], F32)
    acc = np.zeros(qf.shape[:3] + ve.shape[-1:], F32)
    with np.errstate(all="ignore"):
        for t in range(0, lk, TILE):
            tile = slice(t, t + TILE)
            s = _scores(qf, ke[:, :, tile], None if mask is None else mask[..., tile], scale, fill)
            m_new = np.maximum(m, s.max(axis=-1))
            m_safe = np.where(np.isneginf(m_new), F32(0), m_new)
            alpha = np.exp(m - m_safe)
            e = np.exp(s - m_safe[..., None])
            l_sum = l_sum * alpha + _chunk_sum(e)
            pe = e if p_dtype is None else e.astype(p_dtype).astype(F32)
            acc = acc * alpha[..., None] + pv(pe, ve[:, :, tile])
            m = m_new
    return acc, l_sum, np.where(np.isneginf(m), F32(0), m)


def attention_online(q, k, v, mask, scale):
    """FlashAttention-style online kernel, P kept in float32."""
    acc, l_sum, m = _online(q, k, v, mask, scale)
    return _finish(acc, l_sum, m, np.asarray(q).dtype)


def attention_online_p_bf16(q, k, v, mask, scale):
    """The online kernel with P rounded to bfloat16 before P.V (as FlashAttention feeds its tensor
    cores), the row sum taken from the unrounded P; declared (``p_dtype="bfloat16"``)."""
    acc, l_sum, m = _online(q, k, v, mask, scale, p_dtype=ml_dtypes.bfloat16)
    return _finish(acc, l_sum, m, np.asarray(q).dtype)


def attention_online_p_f16(q, k, v, mask, scale):
    """The online kernel with P rounded to float16 before P.V (FlashAttention's float16 path), the
    row sum taken from the unrounded P; declared (``p_dtype="float16"``). A weight below float16's
    least normal (6.1e-5) is rounded to a multiple of its subnormal step 2^-24, off by up to 2^-25."""
    acc, l_sum, m = _online(q, k, v, mask, scale, p_dtype=np.float16)
    return _finish(acc, l_sum, m, np.asarray(q).dtype)


def _f32_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` as a scalar float32 loop: each product rounded to float32, added in turn (depth
    n - 1, a plain loop's; each row's bits whatever the batch)."""
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], F32)
    with np.errstate(all="ignore"):
        for i in range(a.shape[-1]):
            acc = acc + (a[..., i, None] * b[..., i, None, :]).astype(F32)
    return acc


def attention_scores_first(q, k, v, mask, scale):
    """Two-pass in plain float32 loops, the scores formed as ``scale * (q k^T)``: the product in
    float32 first, then multiplied by the float32 scale; exp(s - max), the row sum, P.V."""
    qf, ke, ve = _operands(q, k, v)
    with np.errstate(all="ignore"):
        s = _f32_dot(qf, ke.swapaxes(-1, -2)) * F32(scale)
    s = s if mask is None else np.where(mask, s, F32(-np.inf))
    m = s.max(axis=-1, initial=-np.inf)  # Lk = 0: every row empty
    m0 = np.where(np.isneginf(m), F32(0), m)
    e = np.exp(s - m0[..., None])
    ones = np.ones(e.shape[-1:] + (1,), F32)
    return _finish(_f32_dot(e, ve), _f32_dot(e, ones)[..., 0], m0, np.asarray(q).dtype)


# --- planted ---------------------------------------------------------------------------------------


def attention_finite_sentinel(q, k, v, mask, scale):
    """Masked scores and the running max start at -5e4 in place of -inf (fp16-era code): a row whose
    kept scores all lie below -5e4 weights its masked keys by 1 and its kept keys by 0, or sums to 0
    and returns 0; a fully masked row averages v."""
    acc, l_sum, m = _online(q, k, v, mask, scale, fill=SENTINEL, start=SENTINEL)
    return _finish(acc, l_sum, m, np.asarray(q).dtype)


def attention_no_max_subtraction(q, k, v, mask, scale):
    """exp(s) straight from the scores: past 88.7 it overflows to inf and inf / inf is NaN."""
    qf, ke, ve = _operands(q, k, v)
    s = _scores(qf, ke, mask, scale)
    with np.errstate(all="ignore"):
        e = np.exp(s)
    return _finish(_mma(e, ve), _chunk_sum(e), np.zeros(s.shape[:3], F32), np.asarray(q).dtype)


def attention_masked_row_nan_mixture(q, k, v, mask, scale):
    """The guard against an empty row covers the second half of the head dim only: the first half
    stores 0 / 0 = NaN, the rest 0."""
    out, lse = attention_two_pass(q, k, v, mask, scale)
    out = out.astype(F32)
    empty = np.isneginf(lse)
    half = out.shape[-1] // 2
    out[..., :half] = np.where(empty[..., None], F32(np.nan), out[..., :half])
    return out.astype(np.asarray(q).dtype), lse


def attention_lse_plus_inf(q, k, v, mask, scale):
    """An empty row's lse written as +inf."""
    out, lse = attention_two_pass(q, k, v, mask, scale)
    return out, np.where(np.isneginf(lse), F32(np.inf), lse).astype(F32)


def attention_gqa_wrong_head(q, k, v, mask, scale):
    """Query head h reads kv head h % Hkv instead of h // (Hq // Hkv)."""
    acc, l_sum, m = _online(q, k, v, mask, scale, group_of=lambda h, hq, hkv: h % hkv)
    return _finish(acc, l_sum, m, np.asarray(q).dtype)


def attention_dropped_tail_keys(q, k, v, mask, scale):
    """The key loop runs over whole blocks of 16 and ignores the last Lk % 16 keys."""
    lk = np.asarray(k).shape[2]
    whole = lk - lk % 16
    sub_mask = None if mask is None else mask[..., :whole]
    if whole == 0:
        shape = np.asarray(q).shape[:3]
        return (np.zeros(shape + np.asarray(v).shape[-1:], np.asarray(q).dtype),
                np.full(shape, -np.inf, F32))
    return attention_two_pass(q, np.asarray(k)[:, :, :whole], np.asarray(v)[:, :, :whole], sub_mask, scale)


def attention_first_key_max(q, k, v, mask, scale):
    """Key 0's score stands in for the row max (an attention sink assumed at the first position;
    the true max where key 0 is masked): exact where key 0 holds the max, exp overflows where
    another key scores 88.7 above it."""
    qf, ke, ve = _operands(q, k, v)
    s = _scores(qf, ke, mask, scale)
    if s.shape[-1] == 0:
        return attention_two_pass(q, k, v, mask, scale)
    m = np.where(np.isfinite(s[..., 0]), s[..., 0], s.max(axis=-1))
    m0 = np.where(np.isneginf(m), F32(0), m)
    with np.errstate(all="ignore"):
        e = np.exp(s - m0[..., None])
    return _finish(_mma(e, ve), _chunk_sum(e), m0, np.asarray(q).dtype)


def attention_ignores_strides(q, k, v, mask, scale):
    """Reads q, k and v in their order in memory as if each were a contiguous (B, H, L, D) array, as
    a kernel handed a raw pointer without its strides does: right on contiguous inputs, heads and
    positions interleaved on a transposed view."""
    def as_contiguous(a):
        a = np.asarray(a)
        return np.ravel(a, order="K").reshape(a.shape)

    return attention_online(as_contiguous(q), as_contiguous(k), as_contiguous(v), mask, scale)


def _pv_fp16(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    acc = np.zeros(p.shape[:-1] + v.shape[-1:], np.float16)
    for j in range(p.shape[-1]):
        acc = (acc + (p[..., j, None] * v[..., j, None, :]).astype(np.float16)).astype(np.float16)
    return acc.astype(F32)


def attention_fp16_accumulate(q, k, v, mask, scale):
    """The online kernel with P.V accumulated in float16."""
    acc, l_sum, m = _online(q, k, v, mask, scale, pv=_pv_fp16)
    return _finish(acc, l_sum, m, np.asarray(q).dtype)


# --- the catalog -----------------------------------------------------------------------------------

#: The examples' reductions (see the module's docstring) and online softmax constants.
EXAMPLE_MODEL = ErrorModel(threads=16, rho=6.0, c_x=3.5)
_TWO_PASS = AttentionDeclaration(EXAMPLE_MODEL, online=False, empty_row="zero")
_ONLINE = replace(_TWO_PASS, online=True)
_PLAIN_LOOP = replace(_TWO_PASS, model=ErrorModel(threads=1, rho=6.0, c_x=3.5))


@dataclass(frozen=True)
class AttentionKernel:
    """One example kernel, what it declares, and for a planted one the family that exposes it."""

    func: Callable
    declaration: AttentionDeclaration
    family: str | None = None
    bug: str | None = None


CORRECT: dict[str, AttentionKernel] = {
    "attention_two_pass": AttentionKernel(attention_two_pass, _TWO_PASS),
    "attention_online": AttentionKernel(attention_online, _ONLINE),
    "attention_online_p_bf16": AttentionKernel(attention_online_p_bf16,
                                               replace(_ONLINE, p_dtype="bfloat16")),
    "attention_online_p_f16": AttentionKernel(attention_online_p_f16, replace(_ONLINE, p_dtype="float16")),
    "attention_scores_first": AttentionKernel(attention_scores_first, _PLAIN_LOOP),
}

PLANTED: dict[str, AttentionKernel] = {
    "attention_finite_sentinel": AttentionKernel(
        attention_finite_sentinel, _ONLINE, "sentinel",
        "-5e4 in place of -inf for masked scores and the max"),
    "attention_no_max_subtraction": AttentionKernel(
        attention_no_max_subtraction, _TWO_PASS, "large_scores", "exp without max subtraction overflows"),
    "attention_masked_row_nan_mixture": AttentionKernel(
        attention_masked_row_nan_mixture, replace(_TWO_PASS, empty_row=None), "fully_masked",
        "an empty row is NaN in half its columns, 0 in the others"),
    "attention_lse_plus_inf": AttentionKernel(
        attention_lse_plus_inf, _TWO_PASS, "fully_masked", "an empty row's lse is +inf"),
    "attention_gqa_wrong_head": AttentionKernel(
        attention_gqa_wrong_head, _ONLINE, "gqa", "query head h reads kv head h % Hkv"),
    "attention_dropped_tail_keys": AttentionKernel(
        attention_dropped_tail_keys, _TWO_PASS, "ragged", "the last Lk % 16 keys ignored"),
    "attention_fp16_accumulate": AttentionKernel(
        attention_fp16_accumulate, _ONLINE, "ordinary", "P.V accumulated in float16"),
    "attention_first_key_max": AttentionKernel(
        attention_first_key_max, _TWO_PASS, "outlier_key", "key 0's score in place of the row max"),
    "attention_ignores_strides": AttentionKernel(
        attention_ignores_strides, _ONLINE, "strided", "inputs read as contiguous, strides ignored"),
}

#: Every example's declaration, by name.
DECLARATIONS: dict[str, AttentionDeclaration] = {
    name: kernel.declaration for name, kernel in {**CORRECT, **PLANTED}.items()}


# The examples by their short names, as ``--impl normprops.examples.attention_kernels:online`` names
# them.
two_pass = attention_two_pass
online = attention_online
online_p_bf16 = attention_online_p_bf16
online_p_f16 = attention_online_p_f16
scores_first = attention_scores_first
finite_sentinel = attention_finite_sentinel
no_max_subtraction = attention_no_max_subtraction
masked_row_nan_mixture = attention_masked_row_nan_mixture
lse_plus_inf = attention_lse_plus_inf
gqa_wrong_head = attention_gqa_wrong_head
dropped_tail_keys = attention_dropped_tail_keys
fp16_accumulate = attention_fp16_accumulate
first_key_max = attention_first_key_max
ignores_strides = attention_ignores_strides
