"""Attention backward kernels written like float32 GPU kernels, in numpy: two correct ones and four
with one planted bug each.

Each follows the op's contract (:mod:`normprops.ops.attention_backward`): ``fn(dout, q, k, v, mask,
scale) -> (dq, dk, dv)`` in the storage type of its inputs, computing in float32 with the matrix
products of :mod:`normprops.examples.attention_kernels` (16 products summed at once in a wide
accumulator, the partials added in turn: ``ErrorModel(threads=16)``). dk and dv are summed over the
query heads of a kv head one head after another. :data:`PLANTED` names, for each planted kernel,
the family expected to expose it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from normprops.examples.attention_kernels import (
    EXAMPLE_MODEL,
    _chunk_sum,
    _mma,
    _operands,
    _scores,
    attention_online,
)
from normprops.ops.attention_backward_math import AttentionBackwardDeclaration

__all__ = [
    "CORRECT",
    "PLANTED",
    "AttentionBackwardKernel",
    "attention_backward_flash",
    "attention_backward_flash_rounded",
    "attention_backward_gqa_one_head",
    "attention_backward_empty_row_nan",
    "attention_backward_no_row_term",
    "attention_backward_plain",
    "attention_backward_unscaled_dk",
]

F32 = np.float32


def _group_sum(a: np.ndarray, hkv: int, *, first_only: bool = False) -> np.ndarray:
    """(B, Hq, ...) float32 summed over each kv head's query heads, one head after another (or, a
    planted bug, the group's first head alone)."""
    b, hq = a.shape[:2]
    heads = a.reshape((b, hkv, hq // hkv) + a.shape[2:])
    acc = heads[:, :, 0].copy()
    if not first_only:
        with np.errstate(all="ignore"):
            for g in range(1, hq // hkv):
                acc = (acc + heads[:, :, g]).astype(F32)
    return acc


def _gradients(p: np.ndarray, dout: np.ndarray, row: np.ndarray,
               operands: tuple[np.ndarray, np.ndarray, np.ndarray], scale: float, hkv: int,
               dtype: np.dtype, bug: str | None = None, rounded: np.dtype | None = None
               ) -> tuple[np.ndarray, ...]:
    """dS = P (dP - row), dq = scale dS k, dk = scale dS^T q, dv = P^T dout, from float32 P (B, Hq,
    Lq, Lk), the row term (B, Hq, Lq) and the float32 q and expanded k and v; ``bug`` names a
    planted one: "no_row_term", "unscaled_dk", "first_head" (dk and dv from a group's first head).
    ``rounded``: the type P and dS are rounded to before their products (FlashAttention-2 feeds
    its tensor cores P and dS in the storage type), None: kept in float32."""
    qf, ke, ve = operands

    def fed(a: np.ndarray) -> np.ndarray:
        return a if rounded is None else a.astype(rounded).astype(F32)

    with np.errstate(all="ignore"):
        dp = _mma(dout, ve.swapaxes(-1, -2))
        ds = fed((p * dp if bug == "no_row_term" else p * (dp - row[..., None])).astype(F32))
        dq = _mma(ds, ke) * F32(scale)
        dk_heads = _mma(ds.swapaxes(-1, -2), qf)
        if bug != "unscaled_dk":
            dk_heads = dk_heads * F32(scale)
        dv_heads = _mma(fed(p).swapaxes(-1, -2), dout)
    first = bug == "first_head"
    dk = _group_sum(dk_heads.astype(F32), hkv, first_only=first)
    dv = _group_sum(dv_heads.astype(F32), hkv, first_only=first)
    return tuple(a.astype(F32).astype(dtype) for a in (dq, dk, dv))


def _flash(dout, q, k, v, mask, scale, *, guard=True, bug=None, rounded=None):
    """FlashAttention-2's backward: the forward's out and lse (its own online kernel), P recomputed
    as exp(s - lse), the row term rowsum(dout * out) from out in the storage type."""
    out, lse = attention_online(q, k, v, mask, scale)
    qf, ke, ve = _operands(q, k, v)
    dof = np.asarray(dout).astype(F32)
    row = _chunk_sum(dof * np.asarray(out).astype(F32))
    s = _scores(qf, ke, mask, scale)
    with np.errstate(all="ignore"):
        if guard:  # a row with no kept key: lse -inf, and exp(-inf - -inf) would be NaN
            p = np.where(np.isneginf(lse)[..., None], F32(0), np.exp(s - lse[..., None]))
        else:
            p = np.exp(s - lse[..., None])
    return _gradients(p.astype(F32), dof, row, (qf, ke, ve), scale, np.asarray(k).shape[1],
                      np.asarray(q).dtype, bug, rounded)


# --- correct ---------------------------------------------------------------------------------------


def attention_backward_flash(dout, q, k, v, mask, scale):
    """FlashAttention-style: P recomputed from the saved lse, the row term from rowsum(dout * out);
    an empty row's P is 0."""
    return _flash(dout, q, k, v, mask, scale)


def attention_backward_flash_rounded(dout, q, k, v, mask, scale):
    """:func:`attention_backward_flash` with P and dS rounded to the storage type before their
    products (dv = P^T dout, dq = dS k, dk = dS^T q), as FlashAttention-2 does in 16-bit storage;
    declared ``p_dtype`` the storage type (:data:`ROUNDED`). In float16 its gradients below the
    normal range carry each P's and dS's rounding there: up to 2^-25 each, absolutely."""
    return _flash(dout, q, k, v, mask, scale, rounded=np.asarray(q).dtype)


def attention_backward_plain(dout, q, k, v, mask, scale):
    """Straightforward: P normalised by its row sum, the row term rowsum(P * dP)."""
    qf, ke, ve = _operands(q, k, v)
    dof = np.asarray(dout).astype(F32)
    s = _scores(qf, ke, mask, scale)
    m = s.max(axis=-1)
    m0 = np.where(np.isneginf(m), F32(0), m)
    with np.errstate(all="ignore"):
        e = np.exp(s - m0[..., None])
        total = _chunk_sum(e)
        p = np.where(total[..., None] > 0, e / np.where(total > 0, total, F32(1))[..., None], F32(0))
        p = p.astype(F32)
        dp = _mma(dof, ve.swapaxes(-1, -2))
        row = _chunk_sum(p * dp)
    return _gradients(p, dof, row, (qf, ke, ve), scale, np.asarray(k).shape[1], np.asarray(q).dtype)


# --- planted ---------------------------------------------------------------------------------------


def attention_backward_no_row_term(dout, q, k, v, mask, scale):
    """dS = P dP: the row term rowsum(dout * out) dropped."""
    return _flash(dout, q, k, v, mask, scale, bug="no_row_term")


def attention_backward_unscaled_dk(dout, q, k, v, mask, scale):
    """dk = dS^T q, the softmax scale forgotten."""
    return _flash(dout, q, k, v, mask, scale, bug="unscaled_dk")


def attention_backward_gqa_one_head(dout, q, k, v, mask, scale):
    """dk and dv of each kv head taken from the first query head of its group alone."""
    return _flash(dout, q, k, v, mask, scale, bug="first_head")


def attention_backward_empty_row_nan(dout, q, k, v, mask, scale):
    """P = exp(s - lse) unguarded: a query row with no kept key has lse -inf and P NaN, which its
    dq and every dk and dv it is summed into inherit."""
    return _flash(dout, q, k, v, mask, scale, guard=False)


# --- the catalog -----------------------------------------------------------------------------------

#: The examples' declaration: the depth of their chunked sums (EXAMPLE_MODEL), P kept in float32.
DECLARATION = AttentionBackwardDeclaration(EXAMPLE_MODEL, online=True, empty_row="zero")


@dataclass(frozen=True)
class AttentionBackwardKernel:
    """One example kernel, and for a planted one the family that exposes it and its bug."""

    func: Callable
    family: str | None = None
    bug: str | None = None
    declaration: AttentionBackwardDeclaration = DECLARATION


#: attention_backward_flash_rounded's declaration in float16 storage: P (and dS) rounded to float16.
ROUNDED = AttentionBackwardDeclaration(EXAMPLE_MODEL, online=True, empty_row="zero", p_dtype="float16")

CORRECT: dict[str, AttentionBackwardKernel] = {
    "attention_backward_flash": AttentionBackwardKernel(attention_backward_flash),
    "attention_backward_plain": AttentionBackwardKernel(attention_backward_plain),
}

PLANTED: dict[str, AttentionBackwardKernel] = {
    "attention_backward_no_row_term": AttentionBackwardKernel(
        attention_backward_no_row_term, "ordinary", "the row term rowsum(dout * out) dropped from dS"),
    "attention_backward_unscaled_dk": AttentionBackwardKernel(
        attention_backward_unscaled_dk, "ordinary", "dk without the softmax scale"),
    "attention_backward_gqa_one_head": AttentionBackwardKernel(
        attention_backward_gqa_one_head, "gqa", "dk and dv from the first query head of a group only"),
    "attention_backward_empty_row_nan": AttentionBackwardKernel(
        attention_backward_empty_row_nan, "fully_masked",
        "P = exp(s - lse) is NaN on a row with no kept key"),
}

# The examples by their short names, as ``--impl normprops.examples.attention_backward_kernels:flash``
# names them.
flash = attention_backward_flash
flash_rounded = attention_backward_flash_rounded
plain = attention_backward_plain
no_row_term = attention_backward_no_row_term
unscaled_dk = attention_backward_unscaled_dk
gqa_first_head = attention_backward_gqa_one_head
masked_row_nan = attention_backward_empty_row_nan
