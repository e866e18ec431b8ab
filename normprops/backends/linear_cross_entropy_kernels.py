"""Other projects' fused linear cross-entropy as the ops' kernels: ``fn(h, w, target,
ignore_index, label_smoothing) -> loss`` and ``fn(dloss, h, w, target, ignore_index,
label_smoothing) -> (dh, dw)`` on torch tensors (h and w in the storage type, target int64,
dloss float32).

PyTorch's ``F.cross_entropy(F.linear(h, w).float(), ...)`` (the logits materialized, in the storage
type), its gradient through autograd; Liger-Kernel's ``LigerFusedLinearCrossEntropyFunction``
(Triton; the logits in chunks of rows, each chunk's logits in the storage type); QuACK's
``linear_cross_entropy_func`` (``F.linear``, then QuACK's CuTe DSL cross-entropy on the logits in
the storage type; no label smoothing); Cut
Cross-Entropy's ``linear_cross_entropy`` (``impl="cce"``: Triton kernels that keep the logits in
float32 registers; ``impl="torch_compile"``: ``e @ c.T`` under ``torch.compile``), called with
``filter_eps=None`` (its default skips gradient blocks below a threshold, an approximation the
bound does not allow) and no label smoothing (it takes none). Each module is imported only when
its kernel is called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["torch_lce", "torch_lce_backward", "torch_lce_mean", "torch_lce_mean_backward",
           "liger_flce", "liger_flce_backward", "liger_flce_mean", "liger_flce_mean_backward",
           "liger_flce_acc32", "liger_flce_acc32_backward", "liger_flce_softcap30",
           "liger_flce_softcap30_backward", "quack_lce", "quack_lce_backward",
           "quack_lce_mean", "quack_lce_mean_backward", "cce_lce", "cce_lce_backward",
           "cce_lce_mean", "cce_lce_mean_backward", "cce_compile_lce", "cce_compile_lce_backward"]

GEMMA_SOFTCAP = 30.0


def _autograd(loss_fn: Any, dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
              label_smoothing: float) -> tuple[Any, Any]:
    """(dh, dw) of ``loss_fn`` through autograd, on copies of h and w."""
    hh = h.detach().clone().requires_grad_(True)
    ww = w.detach().clone().requires_grad_(True)
    loss = loss_fn(hh, ww, target, ignore_index, label_smoothing)
    loss.backward(dloss.to(loss.dtype))
    return hh.grad, ww.grad


# --- PyTorch -------------------------------------------------------------------------------------


def _torch_loss(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float,
                reduction: str) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(F.linear(h, w).float(), target, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


def torch_lce(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """F.cross_entropy(F.linear(h, w).float(), target, reduction='none')."""
    return _torch_loss(h, w, target, ignore_index, label_smoothing, "none")


def torch_lce_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                       label_smoothing: float) -> tuple[Any, Any]:
    """(dh, dw) of F.cross_entropy(F.linear(h, w).float(), reduction='none') through autograd."""
    return _autograd(torch_lce, dloss, h, w, target, ignore_index, label_smoothing)


def torch_lce_mean(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """F.cross_entropy(F.linear(h, w).float(), target, reduction='mean')."""
    return _torch_loss(h, w, target, ignore_index, label_smoothing, "mean")


def torch_lce_mean_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                            label_smoothing: float) -> tuple[Any, Any]:
    """(dh, dw) of the mean loss through autograd."""
    return _autograd(torch_lce_mean, dloss, h, w, target, ignore_index, label_smoothing)


# --- Liger-Kernel --------------------------------------------------------------------------------


def _liger(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float, reduction: str,
           softcap: float | None, accum_float32: bool = False) -> Any:
    import torch
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

    # (input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing,
    # reduction, softcap, return_z_loss, accum_dtype)
    loss, *_ = LigerFusedLinearCrossEntropyFunction.apply(h, w, target, None, None, ignore_index, 0.0,
                                                          label_smoothing, reduction, softcap, False,
                                                          torch.float32 if accum_float32 else None)
    return loss


def liger_flce(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerFusedLinearCrossEntropyFunction, reduction='none'."""
    return _liger(h, w, target, ignore_index, label_smoothing, "none", None)


def liger_flce_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                        label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw), reduction='none' (recomputed in its backward with each row's dloss)."""
    return _autograd(liger_flce, dloss, h, w, target, ignore_index, label_smoothing)


def liger_flce_mean(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerFusedLinearCrossEntropyFunction, reduction='mean' (Liger's default)."""
    return _liger(h, w, target, ignore_index, label_smoothing, "mean", None)


def liger_flce_mean_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                             label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw), reduction='mean' (computed in the forward pass, times dloss)."""
    return _autograd(liger_flce_mean, dloss, h, w, target, ignore_index, label_smoothing)


def liger_flce_acc32(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerFusedLinearCrossEntropyFunction with accum_dtype=torch.float32 (dw and the bias's
    gradient summed in float32 across chunks, as its docstring recommends), reduction='none'."""
    return _liger(h, w, target, ignore_index, label_smoothing, "none", None, accum_float32=True)


def liger_flce_acc32_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                              label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw) with accum_dtype=torch.float32, reduction='none'."""
    return _autograd(liger_flce_acc32, dloss, h, w, target, ignore_index, label_smoothing)


def liger_flce_softcap30(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerFusedLinearCrossEntropyFunction with softcap=30 (Gemma 2), reduction='none'."""
    return _liger(h, w, target, ignore_index, label_smoothing, "none", GEMMA_SOFTCAP)


def liger_flce_softcap30_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                                  label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw) with softcap=30, reduction='none'."""
    return _autograd(liger_flce_softcap30, dloss, h, w, target, ignore_index, label_smoothing)


# --- QuACK ---------------------------------------------------------------------------------------


def _quack(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float, reduction: str) -> Any:
    from quack.linear_cross_entropy import linear_cross_entropy_func

    if label_smoothing:
        raise ValueError("QuACK's linear cross-entropy takes no label smoothing")
    # (x, weight, bias, target, ignore_index, reduction): F.linear, then QuACK's cross_entropy.
    return linear_cross_entropy_func(h, w, None, target, ignore_index=ignore_index, reduction=reduction)


def quack_lce(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """quack.linear_cross_entropy.linear_cross_entropy_func (F.linear, then quack.cross_entropy on
    the logits in the storage type), reduction='none'."""
    return _quack(h, w, target, ignore_index, label_smoothing, "none")


def quack_lce_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                       label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw) through autograd (QuACK's cross-entropy backward, then F.linear's)."""
    return _autograd(quack_lce, dloss, h, w, target, ignore_index, label_smoothing)


def quack_lce_mean(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """linear_cross_entropy_func, reduction='mean' (QuACK's default)."""
    return _quack(h, w, target, ignore_index, label_smoothing, "mean")


def quack_lce_mean_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                            label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw) through autograd, reduction='mean'."""
    return _autograd(quack_lce_mean, dloss, h, w, target, ignore_index, label_smoothing)


# --- Cut Cross-Entropy ---------------------------------------------------------------------------


def _cce(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float, reduction: str,
         impl: str) -> Any:
    from cut_cross_entropy import linear_cross_entropy

    if label_smoothing:
        raise ValueError("cut-cross-entropy's linear_cross_entropy takes no label smoothing")
    kwargs: dict[str, Any] = {"filter_eps": None} if impl == "cce" else {}
    return linear_cross_entropy(h, w, target, ignore_index=ignore_index, reduction=reduction, impl=impl,
                                **kwargs)


def cce_lce(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """cut_cross_entropy.linear_cross_entropy(impl='cce', filter_eps=None), reduction='none'."""
    return _cce(h, w, target, ignore_index, label_smoothing, "none", "cce")


def cce_lce_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                     label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw) through autograd, reduction='none'."""
    return _autograd(cce_lce, dloss, h, w, target, ignore_index, label_smoothing)


def cce_lce_mean(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """cut_cross_entropy.linear_cross_entropy(impl='cce', filter_eps=None), reduction='mean'."""
    return _cce(h, w, target, ignore_index, label_smoothing, "mean", "cce")


def cce_lce_mean_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                          label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw) through autograd, reduction='mean'."""
    return _autograd(cce_lce_mean, dloss, h, w, target, ignore_index, label_smoothing)


def cce_compile_lce(h: Any, w: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """cut_cross_entropy.linear_cross_entropy(impl='torch_compile'), reduction='none'."""
    return _cce(h, w, target, ignore_index, label_smoothing, "none", "torch_compile")


def cce_compile_lce_backward(dloss: Any, h: Any, w: Any, target: Any, ignore_index: int,
                             label_smoothing: float) -> tuple[Any, Any]:
    """Its (dh, dw) through autograd, reduction='none'."""
    return _autograd(cce_compile_lce, dloss, h, w, target, ignore_index, label_smoothing)
