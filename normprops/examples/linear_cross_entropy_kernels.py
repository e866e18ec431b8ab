"""Example fused linear cross-entropy kernels in numpy, correct and with planted bugs, for
``normprops hunt --op linear_cross_entropy`` (and ``linear_cross_entropy_backward``).

Each follows the ops' contract (:mod:`normprops.ops.linear_cross_entropy`): ``fn(h, w, target,
ignore_index, label_smoothing) -> loss`` and ``fn(dloss, h, w, target, ignore_index,
label_smoothing) -> (dh, dw)``, in float32 arithmetic. Like the fused GPU kernels they never
hold the (N, V) logits: they walk the vocabulary in chunks of ``CHUNK`` classes, a running max and
a rescaled running sum of exp (the online log-sum-exp) in the first pass, and the gradient's
second pass recomputes each chunk's logits to add its share into dh and write its rows of dw::

    normprops hunt --op linear_cross_entropy --impl normprops.examples.linear_cross_entropy_kernels:lce
    normprops hunt --op linear_cross_entropy_backward \\
        --impl normprops.examples.linear_cross_entropy_kernels:lce_backward_dloss_first --families ignored
"""

from __future__ import annotations

from typing import Any

import numpy as np

from normprops.errormodel import ErrorModel
from normprops.examples.cross_entropy_kernels import CrossEntropyKernel
from normprops.ops.linear_cross_entropy_math import LinearCrossEntropyDeclaration

__all__ = ["CHUNK", "CORRECT", "PLANTED", "lce", "lce_mean", "lce_softcap30", "lce_backward",
           "lce_backward_softcap30", "lce_softcap_dropped", "lce_backward_dloss_first"]

F32 = np.float32
GEMMA_SOFTCAP = 30.0
#: Classes per chunk: a Gemma vocabulary (256000) in 63 chunks, a ragged last one.
CHUNK = 4096


def _chunks(v: int) -> list[slice]:
    return [slice(s, min(s + CHUNK, v)) for s in range(0, v, CHUNK)]


def _chunk_logits(h: np.ndarray, w: np.ndarray, part: slice, cap: float | None) -> tuple[np.ndarray, Any]:
    """One chunk's logits ``h @ w[part]^T`` accumulated in float32, each a pairwise sum over H of
    its own (a row's logits the same alone or in a batch, which a BLAS call does not promise),
    and, under a cap ``c``, ``c tanh(x / c)`` with its ``tanh``."""
    x = (h[:, None, :] * w[None, part, :]).sum(axis=2)
    if cap is None:
        return x, None
    t = np.tanh(x / F32(cap))
    return F32(cap) * t, t


def _online_lse(h: np.ndarray, w: np.ndarray, target: np.ndarray, cap: float | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first pass: per row the running max m, the sum S of exp(x - m) rescaled whenever m
    grows, the target logit and the sum of the logits (for the smoothing term)."""
    n, v = h.shape[0], w.shape[0]
    m = np.full(n, -np.inf, F32)
    s = np.zeros(n, F32)
    x_t = np.zeros(n, F32)
    total = np.zeros(n, F32)
    for part in _chunks(v):
        x, _ = _chunk_logits(h, w, part, cap)
        new = np.maximum(m, x.max(axis=1))
        with np.errstate(invalid="ignore", over="ignore"):
            s = s * np.exp(m - new) + np.exp(x - new[:, None]).sum(axis=1)
        m = new
        total = total + x.sum(axis=1)
        inside = (target >= part.start) & (target < part.stop)
        if inside.any():
            rows = np.nonzero(inside)[0]
            x_t[rows] = x[rows, target[rows] - part.start]
    return m, s, x_t, total


def _loss(h: Any, w: Any, target: Any, ignore_index: int, eps: float, cap: float | None) -> np.ndarray:
    h, w, target = np.asarray(h, F32), np.asarray(w, F32), np.asarray(target)
    v = w.shape[0]
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    m, s, x_t, total = _online_lse(h, w, t, cap)
    log_s = np.log(s)
    nll = log_s - (x_t - m)
    smooth = log_s - (total / F32(v) - m)
    loss = F32(1.0 - eps) * nll + F32(eps) * smooth
    return np.where(valid, loss, F32(0)).astype(F32)


def _grad(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int, eps: float, cap: float | None,
          *, first_dloss: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The second pass: each chunk's softmax from the first pass's m and S, minus the (smoothed)
    label, times the row's dloss, through the cap's derivative; dh += D @ w[chunk], dw[chunk] =
    D^T @ h. ``first_dloss``: every row scaled by dloss[0] (a planted bug)."""
    storage = np.asarray(h).dtype
    h, w, target = np.asarray(h, F32), np.asarray(w, F32), np.asarray(target)
    n, v = h.shape[0], w.shape[0]
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    m, s, _, _ = _online_lse(h, w, t, cap)
    g = np.broadcast_to(np.asarray(dloss, F32), (n,)).astype(F32)
    if first_dloss:
        g = np.full(n, g[0], F32)
    g = np.where(valid, g, F32(0))
    dh = np.zeros_like(h)
    dw = np.zeros_like(w)
    for part in _chunks(v):
        x, tanh = _chunk_logits(h, w, part, cap)
        d = np.exp(x - m[:, None]) / s[:, None] - F32(eps / v)
        inside = valid & (t >= part.start) & (t < part.stop)
        rows = np.nonzero(inside)[0]
        d[rows, t[rows] - part.start] -= F32(1.0 - eps)
        d = g[:, None] * d
        if tanh is not None:
            d = d * ((F32(1) - tanh) * (F32(1) + tanh))
        dh += (d[:, :, None] * w[None, part, :]).sum(axis=1)
        dw[part] = d.T @ h
    return dh.astype(storage), dw.astype(storage)


def _mean_of(rows: np.ndarray, target: Any, ignore_index: int) -> np.ndarray:
    count = int((np.asarray(target) != ignore_index).sum())
    return np.array(rows.sum(dtype=F32) / F32(count) if count else F32(np.nan), dtype=F32)


# --- correct -------------------------------------------------------------------------------------


def lce(h, w, target, ignore_index, label_smoothing):
    """Chunks of the vocabulary, online log-sum-exp, ln S - (x_t - m); the loss per row."""
    return _loss(h, w, target, ignore_index, label_smoothing, None)


def lce_mean(h, w, target, ignore_index, label_smoothing):
    """The per-row loss averaged over the rows not ignored (PyTorch's reduction='mean')."""
    return _mean_of(_loss(h, w, target, ignore_index, label_smoothing, None), target, ignore_index)


def lce_softcap30(h, w, target, ignore_index, label_smoothing):
    """Each chunk's logits capped by 30 tanh(x / 30) (Gemma 2), then the loss per row."""
    return _loss(h, w, target, ignore_index, label_smoothing, GEMMA_SOFTCAP)


def lce_backward(dloss, h, w, target, ignore_index, label_smoothing):
    """Two passes over the chunks: the lse, then dh += D @ w and dw's rows D^T @ h per chunk."""
    return _grad(dloss, h, w, target, ignore_index, label_smoothing, None)


def lce_backward_softcap30(dloss, h, w, target, ignore_index, label_smoothing):
    """The gradient through the cap: each chunk's D times 1 - tanh^2(x / 30)."""
    return _grad(dloss, h, w, target, ignore_index, label_smoothing, GEMMA_SOFTCAP)


# --- planted ---------------------------------------------------------------------------------------


def lce_softcap_dropped(h, w, target, ignore_index, label_smoothing):
    """planted: declared with Gemma 2's softcap of 30, computes the uncapped loss."""
    return lce(h, w, target, ignore_index, label_smoothing)


def lce_backward_dloss_first(dloss, h, w, target, ignore_index, label_smoothing):
    """planted (Liger-Kernel#968): reduction='none', every row's gradient scaled by dloss[0] (one
    scalar read for the upstream gradient) instead of its own row's dloss."""
    return _grad(dloss, h, w, target, ignore_index, label_smoothing, None, first_dloss=True)


# --- the catalog ----------------------------------------------------------------------------------

#: The chunks' sums: numpy's pairwise sum within a chunk, then chunk after chunk, and matmuls in
#: any order: a plain loop's depth bounds them all; dw's rows are written, not summed, per chunk
#: (each a BLAS sum over the rows: any order).
_NUMPY = ErrorModel(threads=1, rho=6.0, c_x=3.5, row_reduction="sequential")
_PLAIN = LinearCrossEntropyDeclaration(_NUMPY)
_CAPPED = LinearCrossEntropyDeclaration(_NUMPY, softcap=GEMMA_SOFTCAP)
_MEAN = LinearCrossEntropyDeclaration(_NUMPY, reduction="mean")

CORRECT: dict[str, CrossEntropyKernel] = {
    "lce": CrossEntropyKernel(lce, "linear_cross_entropy", _PLAIN),
    "lce_mean": CrossEntropyKernel(lce_mean, "linear_cross_entropy", _MEAN),
    "lce_softcap30": CrossEntropyKernel(lce_softcap30, "linear_cross_entropy", _CAPPED),
    "lce_backward": CrossEntropyKernel(lce_backward, "linear_cross_entropy_backward", _PLAIN),
    "lce_backward_softcap30": CrossEntropyKernel(
        lce_backward_softcap30, "linear_cross_entropy_backward", _CAPPED),
}

PLANTED: dict[str, CrossEntropyKernel] = {
    "lce_softcap_dropped": CrossEntropyKernel(
        lce_softcap_dropped, "linear_cross_entropy", _CAPPED, family="softcap",
        bug="the declared softcap left out"),
    "lce_backward_dloss_first": CrossEntropyKernel(
        lce_backward_dloss_first, "linear_cross_entropy_backward", _PLAIN, family="ignored",
        bug="every row's gradient scaled by dloss[0], not its own dloss (Liger-Kernel#968)",
        # it shows only where two kept rows have different dloss: a draw reaches that in a median
        # of 9 examples but up to 75 (20 seeds), so every hunt tries this case first
        example="lce_backward_dloss_first-ignored.json"),
}
