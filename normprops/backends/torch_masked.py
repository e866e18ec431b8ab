"""PyTorch's masked softmaxes with ``masked_softmax``'s signature, ``fn(x, mask, scale)`` on torch
tensors (``mask`` bool, True where the entry takes part), for registry entries of the op.

Both scale in float32 (``x.float() * scale``), so a 16-bit ``x`` is not rounded back to its storage
type before the softmax, and return the storage type of ``x``. torch is imported when one is called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["masked_fill_softmax", "torch_masked_softmax"]

# torch._masked_softmax's mask types: 0 a [T, T] source mask, 1 a [B, T] key padding mask, 2 a
# mask of the input's own shape.
_ELEMENTWISE = 2


def masked_fill_softmax(x: Any, mask: Any, scale: float) -> Any:
    """``torch.softmax`` over the last axis of ``scale * x`` filled with -inf where ``mask`` is
    False: what attention code without a fused kernel writes. A fully masked row is all NaN."""
    import torch

    logits = (x.float() * scale).masked_fill(~mask, float("-inf"))
    return torch.softmax(logits, dim=-1).to(x.dtype)


def torch_masked_softmax(x: Any, mask: Any, scale: float) -> Any:
    """``torch._masked_softmax`` of ``scale * x``, PyTorch's fused masked softmax (the fast path of
    ``nn.MultiheadAttention``). Its mask is True where an entry is masked out, the opposite of
    ``masked_softmax``'s, hence ``~mask``. Mask type 2 takes it elementwise: the CPU kernel assumes
    that type for a 2-D input, the CUDA kernel refuses a call that names none ("Mask Type should
    be defined"). On CUDA, rows wider than 1024 float32 columns fall back to ``torch.softmax`` of
    the row filled with -inf; narrower ones take a fused warp softmax. The CPU kernel gives a fully
    masked row all NaN (0 times 1/0)."""
    import torch

    return torch._masked_softmax(x.float() * scale, ~mask, x.dim() - 1, _ELEMENTWISE).to(x.dtype)
