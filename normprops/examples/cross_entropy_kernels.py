"""Example cross-entropy kernels in numpy, correct and with planted bugs, for
``normprops hunt --op cross_entropy`` (and ``cross_entropy_backward``).

Each follows the ops' contract (:mod:`normprops.ops.cross_entropy`): ``fn(logits, target,
ignore_index, label_smoothing) -> loss`` (float32, (N,) or the reduced 0-d loss) and ``fn(dloss,
logits, target, ignore_index, label_smoothing) -> dlogits`` (the logits' shape and storage type),
computing in float32. ``CORRECT`` and ``PLANTED`` map each name to its function, the declaration
it is hunted under and, for a planted one, the family that shows its bug and the bug in words::

    normprops hunt --op cross_entropy --impl normprops.examples.cross_entropy_kernels:ce
    normprops hunt --op cross_entropy --impl normprops.examples.cross_entropy_kernels:ce_no_max \\
        --families offset
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from normprops.dtypes import to_dtype
from normprops.errormodel import ErrorModel
from normprops.ops.cross_entropy_math import CrossEntropyDeclaration

__all__ = ["CORRECT", "PLANTED", "CrossEntropyKernel", "ce", "ce_backward",
           "ce_mean", "ce_softcap30", "ce_backward_softcap30",
           "ce_no_max", "ce_mean_over_all_rows", "ce_softcap_dropped",
           "ce_backward_bf16_softmax", "ce_backward_ignored_rows"]

F32 = np.float32
GEMMA_SOFTCAP = 30.0


def _logits(logits: Any, cap: float | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The logits in float32 and, under a cap ``c``, ``c tanh(x / c)`` with its ``tanh``."""
    x = np.asarray(logits, dtype=F32)
    if cap is None:
        return x, None
    t = np.tanh(x / F32(cap))
    return F32(cap) * t, t


def _loss_rows(x: np.ndarray, target: np.ndarray, ignore_index: int, eps: float) -> np.ndarray:
    """Per-row loss in float32 from the max-subtracted logits: ln S - (x_t - m), smoothed."""
    rows = np.arange(x.shape[0])
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    shifted = x - x.max(axis=1, keepdims=True)
    log_s = np.log(np.exp(shifted).sum(axis=1))
    nll = log_s - shifted[rows, t]
    smooth = log_s - shifted.mean(axis=1)
    loss = F32(1.0 - eps) * nll + F32(eps) * smooth
    return np.where(valid, loss, F32(0)).astype(F32)


def _grad(dloss: np.ndarray, x: np.ndarray, target: np.ndarray, ignore_index: int,
          eps: float) -> np.ndarray:
    """dloss (N,) times softmax(x) - (1 - eps) onehot - eps / V, in float32, 0 on ignored rows."""
    n, v = x.shape
    rows = np.arange(n)
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    d = e / e.sum(axis=1, keepdims=True) - F32(eps / v)
    d[rows, t] -= F32(1.0 - eps)
    return np.where(valid[:, None], np.asarray(dloss, F32)[:, None] * d, F32(0)).astype(F32)


# --- correct -------------------------------------------------------------------------------------


def ce(logits, target, ignore_index, label_smoothing):
    """Row max subtracted, exp summed pairwise (numpy), ln S - (x_t - m); the loss per row."""
    x, _ = _logits(logits)
    return _loss_rows(x, np.asarray(target), ignore_index, label_smoothing)


def ce_backward(dloss, logits, target, ignore_index, label_smoothing):
    """softmax(x) from the max-subtracted exp, the label subtracted in float32, times dloss."""
    x, _ = _logits(logits)
    out = _grad(dloss, x, np.asarray(target), ignore_index, label_smoothing)
    return out.astype(np.asarray(logits).dtype)  # rounded once to the storage type


def ce_mean(logits, target, ignore_index, label_smoothing):
    """The per-row loss averaged over the rows not ignored (PyTorch's reduction='mean')."""
    target = np.asarray(target)
    rows = _loss_rows(np.asarray(logits, F32), target, ignore_index, label_smoothing)
    count = int((target != ignore_index).sum())
    return np.array(rows.sum(dtype=F32) / F32(count) if count else F32(np.nan), dtype=F32)


def ce_softcap30(logits, target, ignore_index, label_smoothing):
    """Logits capped by 30 tanh(x / 30) first (Gemma 2's final softcap), then the loss per row."""
    x, _ = _logits(logits, GEMMA_SOFTCAP)
    return _loss_rows(x, np.asarray(target), ignore_index, label_smoothing)


def ce_backward_softcap30(dloss, logits, target, ignore_index, label_smoothing):
    """The gradient through the cap: the capped logits' gradient times 1 - tanh^2(x / 30)."""
    x, t = _logits(logits, GEMMA_SOFTCAP)
    g = _grad(dloss, x, np.asarray(target), ignore_index, label_smoothing)
    return (g * ((F32(1) - t) * (F32(1) + t))).astype(np.asarray(logits).dtype)


# --- planted ---------------------------------------------------------------------------------------


def ce_no_max(logits, target, ignore_index, label_smoothing):
    """planted: ln(sum exp(x)) - x_t without the row max: exp overflows past 88.7."""
    x = np.asarray(logits, F32)
    target = np.asarray(target)
    rows = np.arange(x.shape[0])
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    with np.errstate(over="ignore", invalid="ignore"):
        lse = np.log(np.exp(x).sum(axis=1))
        eps = F32(label_smoothing)
        loss = (F32(1) - eps) * (lse - x[rows, t]) + eps * (lse - x.mean(axis=1))
    return np.where(valid, loss, F32(0)).astype(F32)


def ce_mean_over_all_rows(logits, target, ignore_index, label_smoothing):
    """planted: the mean divides by N, the ignored rows counted (PyTorch divides by those kept)."""
    rows = _loss_rows(np.asarray(logits, F32), np.asarray(target), ignore_index, label_smoothing)
    return np.array(rows.sum(dtype=F32) / F32(rows.shape[0]), dtype=F32)


def ce_softcap_dropped(logits, target, ignore_index, label_smoothing):
    """planted: declared with Gemma 2's softcap of 30, computes the uncapped loss."""
    return ce(logits, target, ignore_index, label_smoothing)


def ce_backward_bf16_softmax(dloss, logits, target, ignore_index, label_smoothing):
    """planted: softmax rounded to bfloat16 before the label is subtracted (fla#1231): p_t - 1
    loses p_t's low bits where p_t is near 1."""
    x = np.asarray(logits, F32)
    target = np.asarray(target)
    n, v = x.shape
    rows = np.arange(n)
    valid = target != ignore_index
    t = np.where(valid, target, 0)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = to_dtype(e / e.sum(axis=1, keepdims=True), "bfloat16")
    d = p - F32(label_smoothing / v)
    d[rows, t] -= F32(1.0 - label_smoothing)
    out = np.where(valid[:, None], np.asarray(dloss, F32)[:, None] * d, F32(0)).astype(F32)
    # In the logits' own array type: bfloat16 handed over by --dtype bfloat16, float32 holding
    # bfloat16 values by the registry.
    return to_dtype(out, "bfloat16").astype(np.asarray(logits).dtype)


def ce_backward_ignored_rows(dloss, logits, target, ignore_index, label_smoothing):
    """planted: an ignored row's gradient is not zeroed (its target clamped to class 0)."""
    x = np.asarray(logits, F32)
    target = np.asarray(target)
    clamped = np.where(target == ignore_index, 0, target)
    return _grad(dloss, x, clamped, int(np.iinfo(np.int64).min), label_smoothing)


# --- the catalog ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossEntropyKernel:
    """An example, the op it computes, its declaration and, planted, the family that shows its bug."""

    func: Callable[..., Any]
    op: str
    declaration: CrossEntropyDeclaration
    dtype: str = "float32"
    family: str | None = None
    bug: str | None = None
    # A case in normprops/known/ that shows the bug, tried first by every hunt of its family.
    example: str | None = None


#: numpy's sums are pairwise (a tree over the row); numpy's expf is faithful.
_NUMPY = ErrorModel(threads=1, reduction="tree", rho=6.0, c_x=3.5)
_PLAIN = CrossEntropyDeclaration(_NUMPY)
_CAPPED = CrossEntropyDeclaration(_NUMPY, softcap=GEMMA_SOFTCAP)
_MEAN = CrossEntropyDeclaration(_NUMPY, reduction="mean")

CORRECT: dict[str, CrossEntropyKernel] = {
    "ce": CrossEntropyKernel(ce, "cross_entropy", _PLAIN),
    "ce_mean": CrossEntropyKernel(ce_mean, "cross_entropy", _MEAN),
    "ce_softcap30": CrossEntropyKernel(ce_softcap30, "cross_entropy", _CAPPED),
    "ce_backward": CrossEntropyKernel(ce_backward, "cross_entropy_backward", _PLAIN),
    "ce_backward_softcap30": CrossEntropyKernel(
        ce_backward_softcap30, "cross_entropy_backward", _CAPPED),
}

PLANTED: dict[str, CrossEntropyKernel] = {
    "ce_no_max": CrossEntropyKernel(
        ce_no_max, "cross_entropy", _PLAIN, family="offset",
        bug="ln sum exp(x) without the row max overflows"),
    "ce_mean_over_all_rows": CrossEntropyKernel(
        ce_mean_over_all_rows, "cross_entropy", _MEAN, family="ignored",
        bug="the mean divides by N, ignored rows counted"),
    "ce_softcap_dropped": CrossEntropyKernel(
        ce_softcap_dropped, "cross_entropy", _CAPPED, family="softcap",
        bug="the declared softcap left out"),
    "ce_backward_bf16_softmax": CrossEntropyKernel(
        ce_backward_bf16_softmax, "cross_entropy_backward", _PLAIN, dtype="bfloat16",
        family="dominant", bug="softmax rounded to bfloat16 before the label is subtracted"),
    "ce_backward_ignored_rows": CrossEntropyKernel(
        ce_backward_ignored_rows, "cross_entropy_backward", _PLAIN, family="ignored",
        bug="an ignored row's gradient is not zeroed"),
}
