"""Other projects' cross-entropy as the ops' kernels: ``fn(logits, target, ignore_index,
label_smoothing) -> loss`` and ``fn(dloss, logits, target, ignore_index, label_smoothing) ->
dlogits`` on the framework's arrays (logits in the storage type, target int64, dloss float32).

PyTorch's ``F.cross_entropy`` on ``logits.float()`` (its backward through autograd, the gradient
rounded once to the storage type by the cast's backward), eager or under ``torch.compile``;
Liger-Kernel's Triton ``LigerCrossEntropyFunction`` (its gradient is computed in the forward pass
and written over a copy of the logits here, never the caller's); QuACK's CuTe DSL
``quack.cross_entropy`` (its backward kernel through autograd; no label smoothing); optax's
``softmax_cross_entropy_with_integer_labels`` under ``jax.jit``, ignored rows zeroed around it
(optax has no ``ignore_index``). Each module is imported only when its kernel is called.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["torch_ce", "torch_ce_backward", "torch_ce_mean", "torch_ce_mean_backward",
           "compiled_ce", "compiled_ce_backward", "liger_ce", "liger_ce_backward", "liger_ce_mean",
           "liger_ce_mean_backward", "liger_ce_softcap30", "liger_ce_softcap30_backward", "quack_ce",
           "quack_ce_backward", "quack_ce_mean", "quack_ce_mean_backward", "optax_ce", "optax_ce_backward"]

GEMMA_SOFTCAP = 30.0


# --- PyTorch -------------------------------------------------------------------------------------


def _torch_loss(logits: Any, target: Any, ignore_index: int, label_smoothing: float, reduction: str) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(logits.float(), target, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


def _autograd(loss_fn: Any, dloss: Any, logits: Any, target: Any, ignore_index: int,
              label_smoothing: float) -> Any:
    x = logits.detach().clone().requires_grad_(True)
    loss = loss_fn(x, target, ignore_index, label_smoothing)
    loss.backward(dloss)
    return x.grad


def torch_ce(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """F.cross_entropy(logits.float(), target, reduction='none')."""
    return _torch_loss(logits, target, ignore_index, label_smoothing, "none")


def torch_ce_backward(dloss: Any, logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """The gradient of F.cross_entropy(logits.float(), reduction='none') through autograd."""
    return _autograd(torch_ce, dloss, logits, target, ignore_index, label_smoothing)


def torch_ce_mean(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """F.cross_entropy(logits.float(), target, reduction='mean')."""
    return _torch_loss(logits, target, ignore_index, label_smoothing, "mean")


def torch_ce_mean_backward(dloss: Any, logits: Any, target: Any, ignore_index: int,
                           label_smoothing: float) -> Any:
    """The gradient of F.cross_entropy(logits.float(), reduction='mean') through autograd."""
    return _autograd(torch_ce_mean, dloss, logits, target, ignore_index, label_smoothing)


@functools.lru_cache(maxsize=None)
def _compiled() -> Any:
    import torch

    return torch.compile(_torch_loss, dynamic=True)


def compiled_ce(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """torch.compile(dynamic=True) of F.cross_entropy(logits.float(), reduction='none')."""
    return _compiled()(logits, target, ignore_index, label_smoothing, "none")


def compiled_ce_backward(dloss: Any, logits: Any, target: Any, ignore_index: int,
                         label_smoothing: float) -> Any:
    """The gradient of the compiled F.cross_entropy (reduction='none') through autograd."""
    return _autograd(compiled_ce, dloss, logits, target, ignore_index, label_smoothing)


# --- Liger-Kernel --------------------------------------------------------------------------------


def _liger(logits: Any, target: Any, ignore_index: int, label_smoothing: float, reduction: str,
           softcap: float | None) -> Any:
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    loss, *_ = LigerCrossEntropyFunction.apply(logits, target, None, ignore_index, 0.0, label_smoothing,
                                               reduction, softcap, False, False, False)
    return loss


def _liger_backward(dloss: Any, logits: Any, target: Any, ignore_index: int, label_smoothing: float,
                    reduction: str, softcap: float | None) -> Any:
    # Liger writes the gradient over its input in the forward pass: a copy of the logits.
    x = logits.detach().clone().requires_grad_(True)
    loss = _liger(x, target, ignore_index, label_smoothing, reduction, softcap)
    loss.backward(dloss.to(loss.dtype))
    return x.grad


def liger_ce(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerCrossEntropyFunction, reduction='none' (the loss in the logits' type: float32 only)."""
    return _liger(logits, target, ignore_index, label_smoothing, "none", None)


def liger_ce_backward(dloss: Any, logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerCrossEntropyFunction's gradient, reduction='none' (computed in its forward pass, times dloss)."""
    return _liger_backward(dloss, logits, target, ignore_index, label_smoothing, "none", None)


def liger_ce_mean(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerCrossEntropyFunction, reduction='mean' (Liger's default)."""
    return _liger(logits, target, ignore_index, label_smoothing, "mean", None)


def liger_ce_mean_backward(dloss: Any, logits: Any, target: Any, ignore_index: int,
                           label_smoothing: float) -> Any:
    """LigerCrossEntropyFunction's gradient, reduction='mean'."""
    return _liger_backward(dloss, logits, target, ignore_index, label_smoothing, "mean", None)


def liger_ce_softcap30(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """LigerCrossEntropyFunction with softcap=30 (Gemma 2), reduction='none'."""
    return _liger(logits, target, ignore_index, label_smoothing, "none", GEMMA_SOFTCAP)


def liger_ce_softcap30_backward(dloss: Any, logits: Any, target: Any, ignore_index: int,
                                label_smoothing: float) -> Any:
    """LigerCrossEntropyFunction's gradient with softcap=30, reduction='none'."""
    return _liger_backward(dloss, logits, target, ignore_index, label_smoothing, "none", GEMMA_SOFTCAP)


# --- QuACK ---------------------------------------------------------------------------------------


def _quack(logits: Any, target: Any, ignore_index: int, label_smoothing: float, reduction: str) -> Any:
    # `from quack.cross_entropy import ...`: the package re-exports the function cross_entropy
    # under the module's own name.
    from quack.cross_entropy import cross_entropy

    if label_smoothing:
        raise ValueError("QuACK's cross_entropy takes no label smoothing")
    # No class weights, no partial lse (their defaults): keywords only, so a version whose
    # positional parameters differ fails by name rather than by position.
    return cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction)


def quack_ce(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """quack.cross_entropy(logits, target, reduction='none'): float32 (N,), 0 on ignored rows;
    no label smoothing."""
    return _quack(logits, target, ignore_index, label_smoothing, "none")


def quack_ce_backward(dloss: Any, logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """Its gradient through autograd (CrossEntropyFunction.backward: QuACK's backward kernel, exp(x -
    lse) from the forward's lse, in the logits' type), reduction='none'."""
    return _autograd(quack_ce, dloss, logits, target, ignore_index, label_smoothing)


def quack_ce_mean(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """quack.cross_entropy(logits, target, reduction='mean') (QuACK's default): the rows' losses
    summed by torch and divided by the count of rows not ignored."""
    return _quack(logits, target, ignore_index, label_smoothing, "mean")


def quack_ce_mean_backward(dloss: Any, logits: Any, target: Any, ignore_index: int,
                           label_smoothing: float) -> Any:
    """Its gradient through autograd, reduction='mean'."""
    return _autograd(quack_ce_mean, dloss, logits, target, ignore_index, label_smoothing)


# --- optax ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _optax_loss() -> Any:
    import jax
    import jax.numpy as jnp
    import optax

    def loss(logits: Any, target: Any, ignore_index: Any) -> Any:
        valid = target != ignore_index
        labels = jnp.where(valid, target, 0)
        rows = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
        return jnp.where(valid, rows, 0.0)

    def grad(dloss: Any, logits: Any, target: Any, ignore_index: Any) -> Any:
        _, pull = jax.vjp(lambda x: loss(x, target, ignore_index), logits)
        return pull(dloss)[0]

    return jax.jit(loss), jax.jit(grad)


def optax_ce(logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """jax.jit of optax.softmax_cross_entropy_with_integer_labels(logits.astype(float32)), ignored
    rows zeroed; no label smoothing."""
    if label_smoothing:
        raise ValueError("optax's integer-label cross-entropy takes no label smoothing")
    return _optax_loss()[0](logits, target, ignore_index)


def optax_ce_backward(dloss: Any, logits: Any, target: Any, ignore_index: int, label_smoothing: float) -> Any:
    """Its gradient through jax.vjp, in the logits' type."""
    if label_smoothing:
        raise ValueError("optax's integer-label cross-entropy takes no label smoothing")
    return _optax_loss()[1](dloss, logits, target, ignore_index)
