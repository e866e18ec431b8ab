"""A user's own attention kernel in Triton, the way a kernel author writes one, hunted with
``--impl``: a FlashAttention-style forward (one program per block of query rows of one head; the
keys streamed in blocks with a running max and sum), GQA, a boolean mask, ``(out, lse)`` returned.

``attention`` is correct. ``attention_finite_sentinel`` is the same kernel with the masked scores
set to a finite ``-5e4`` instead of -inf, the sentinel FlashInfer's prefill used
(flashinfer#4267): a query row whose kept scores all lie below it, or that keeps no key, averages
the masked values instead. On a machine without a GPU both run under Triton's interpreter::

    TRITON_INTERPRET=1 normprops hunt --op attention --framework torch --device cpu \\
        --impl normprops.examples.triton_attention:attention_finite_sentinel --families sentinel

The scores and ``P @ V`` are float32 products (``input_precision="ieee"``: a float32 ``tl.dot``
would otherwise run in TF32 on the GPU, which the default declaration does not allow), P stays
float32, the output is rounded once to the storage type.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

__all__ = ["attention", "attention_finite_sentinel"]


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, lse_ptr, scale,
             sq_b, sq_h, sq_m, sq_d, sk_b, sk_h, sk_n, sk_d, sv_b, sv_h, sv_n, sv_d,
             sm_b, sm_m, sm_n, so_b, so_h, so_m, so_d, sl_b, sl_h, sl_m,
             heads, group, lq, lk, d, dv, HAS_MASK: tl.constexpr, MASKED: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
             BLOCK_DV: tl.constexpr):
    # Grid: (query blocks, batch * query heads); query head h reads kv head h // group.
    block = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads
    h = bh % heads
    kvh = h // group
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    vdims = tl.arange(0, BLOCK_DV)
    q = tl.load(q_ptr + b * sq_b + h * sq_h + rows[:, None] * sq_m + dims[None, :] * sq_d,
                mask=(rows[:, None] < lq) & (dims[None, :] < d), other=0.0).to(tl.float32)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    for start in range(0, lk, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + b * sk_b + kvh * sk_h + keys[None, :] * sk_n + dims[:, None] * sk_d,
                     mask=(keys[None, :] < lk) & (dims[:, None] < d), other=0.0).to(tl.float32)
        s = tl.dot(q, kt, input_precision="ieee") * scale
        keep = keys[None, :] < lk
        if HAS_MASK:
            kept = tl.load(mask_ptr + b * sm_b + rows[:, None] * sm_m + keys[None, :] * sm_n,
                           mask=(rows[:, None] < lq) & (keys[None, :] < lk), other=0)
            keep = keep & (kept != 0)
        # Keys past the end are always -inf; MASKED is what a masked key's score becomes.
        s = tl.where(keys[None, :] < lk, tl.where(keep, s, MASKED), float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        # A row with no kept key so far has m_new = -inf: exponentiate against 0 instead, so that
        # exp(-inf - 0) = 0 rather than exp(-inf + inf) = NaN.
        base = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - base)
        p = tl.exp(s - base[:, None])
        v = tl.load(v_ptr + b * sv_b + kvh * sv_h + keys[:, None] * sv_n + vdims[None, :] * sv_d,
                    mask=(keys[:, None] < lk) & (vdims[None, :] < dv), other=0.0).to(tl.float32)
        total = total * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    some = total > 0
    out = tl.where(some[:, None], acc / tl.where(some, total, 1.0)[:, None], 0.0)
    lse = tl.where(some, m + tl.log(tl.where(some, total, 1.0)), float("-inf"))
    tl.store(out_ptr + b * so_b + h * so_h + rows[:, None] * so_m + vdims[None, :] * so_d,
             out.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < lq) & (vdims[None, :] < dv))
    tl.store(lse_ptr + b * sl_b + h * sl_h + rows * sl_m, lse, mask=rows < lq)


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
            scale: float, masked: float) -> tuple[torch.Tensor, torch.Tensor]:
    b, hq, lq, d = q.shape
    hkv, lk, dv = k.shape[1], k.shape[2], v.shape[3]
    out = torch.empty((b, hq, lq, dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, lq), dtype=torch.float32, device=q.device)
    if lq == 0 or b * hq == 0:
        return out, lse
    # tl.dot needs every block dimension of 16 or more.
    block_d, block_dv = (max(16, triton.next_power_of_2(n)) for n in (d, dv))
    # Small blocks under the interpreter (each program is numpy work); on a GPU 64 query rows and
    # keys, 32 for head dimensions past 64 (the float32 tiles must fit the registers).
    block_m = block_n = 16 if q.device.type == "cpu" else 64 if max(block_d, block_dv) <= 64 else 32
    if mask is None:
        mask_arg, mask_strides = torch.zeros(1, dtype=torch.int8, device=q.device), (0, 0, 0)
    else:  # (B, 1, Lq, Lk): the head stride is never read
        mask_arg = mask.to(torch.int8)
        mask_strides = (mask_arg.stride(0), mask_arg.stride(2), mask_arg.stride(3))
    grid = (triton.cdiv(lq, block_m), b * hq)
    _forward[grid](q, k, v, mask_arg, out, lse, float(scale), *q.stride(), *k.stride(), *v.stride(),
                   *mask_strides, *out.stride(), *lse.stride(), hq, hq // hkv, lq, lk, d, dv,
                   HAS_MASK=mask is not None, MASKED=masked, BLOCK_M=block_m, BLOCK_N=block_n,
                   BLOCK_D=block_d, BLOCK_DV=block_dv)
    return out, lse


def attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> tuple[Any, Any]:
    """Correct: a masked key's score is -inf, a row with no kept key gives zeros and lse -inf."""
    return _launch(q, k, v, mask, scale, float("-inf"))


def attention_finite_sentinel(q: Any, k: Any, v: Any, mask: Any, scale: float) -> tuple[Any, Any]:
    """Planted (flashinfer#4267): a masked key's score is -5e4, a finite stand-in for -inf."""
    return _launch(q, k, v, mask, scale, -5e4)
