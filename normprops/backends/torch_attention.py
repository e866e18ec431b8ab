"""PyTorch's ``scaled_dot_product_attention`` as attention kernels ``fn(q, k, v, mask, scale) ->
out``: torch tensors of the storage type in and out, the mask a bool tensor (True: the key takes
part) or None, grouped queries through ``enable_gqa`` where Hq != Hkv, one backend chosen through
``torch.nn.attention.sdpa_kernel``; and its gradients through autograd as attention backward
kernels ``fn(dout, q, k, v, mask, scale) -> (dq, dk, dv)`` (``*_backward``)."""

from __future__ import annotations

from typing import Any

__all__ = ["sdpa_math", "sdpa_default", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn",
           "sdpa_math_backward", "sdpa_default_backward", "sdpa_flash_backward",
           "sdpa_efficient_backward", "sdpa_cudnn_backward"]


def _sdpa(q: Any, k: Any, v: Any, mask: Any, scale: float, backends: tuple[str, ...] | None) -> Any:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call() -> Any:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])

    if backends is None:  # PyTorch's own choice
        return call()
    with sdpa_kernel([getattr(SDPBackend, name) for name in backends]):
        return call()


def sdpa_math(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """The math backend: scores, softmax and P.V in float32 whatever the storage type."""
    return _sdpa(q, k, v, mask, scale, ("MATH",))


def sdpa_default(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """The backend PyTorch picks (on the CPU its flash kernel, which rounds P to the storage type)."""
    return _sdpa(q, k, v, mask, scale, None)


def sdpa_flash(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """FlashAttention-2 only (CUDA: no arbitrary mask, 16-bit storage)."""
    return _sdpa(q, k, v, mask, scale, ("FLASH_ATTENTION",))


def sdpa_efficient(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """The memory-efficient (xFormers) kernel only."""
    return _sdpa(q, k, v, mask, scale, ("EFFICIENT_ATTENTION",))


def sdpa_cudnn(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
    """cuDNN's attention only."""
    return _sdpa(q, k, v, mask, scale, ("CUDNN_ATTENTION",))


def _sdpa_backward(dout: Any, q: Any, k: Any, v: Any, mask: Any, scale: float,
                   backends: tuple[str, ...] | None) -> tuple[Any, Any, Any]:
    """The gradients of one backend's call against ``dout``, through autograd: leaf copies of q, k
    and v (the inputs stay untouched), dk and dv summed over a kv head's query heads by
    ``enable_gqa``."""
    import torch

    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    with torch.enable_grad():
        out = _sdpa(*leaves, mask, scale, backends)
        dq, dk, dv = torch.autograd.grad(out, leaves, grad_outputs=dout)
    return dq, dk, dv


def sdpa_math_backward(dout: Any, q: Any, k: Any, v: Any, mask: Any, scale: float) -> tuple[Any, Any, Any]:
    """The math backend's gradients (autograd through its float32 scores, softmax and P.V)."""
    return _sdpa_backward(dout, q, k, v, mask, scale, ("MATH",))


def sdpa_default_backward(dout: Any, q: Any, k: Any, v: Any, mask: Any, scale: float
                          ) -> tuple[Any, Any, Any]:
    """The gradients of the backend PyTorch picks (on the CPU its flash kernel's backward)."""
    return _sdpa_backward(dout, q, k, v, mask, scale, None)


def sdpa_flash_backward(dout: Any, q: Any, k: Any, v: Any, mask: Any, scale: float
                        ) -> tuple[Any, Any, Any]:
    """FlashAttention-2's backward only."""
    return _sdpa_backward(dout, q, k, v, mask, scale, ("FLASH_ATTENTION",))


def sdpa_efficient_backward(dout: Any, q: Any, k: Any, v: Any, mask: Any, scale: float
                            ) -> tuple[Any, Any, Any]:
    """The memory-efficient (xFormers) kernel's backward only."""
    return _sdpa_backward(dout, q, k, v, mask, scale, ("EFFICIENT_ATTENTION",))


def sdpa_cudnn_backward(dout: Any, q: Any, k: Any, v: Any, mask: Any, scale: float
                        ) -> tuple[Any, Any, Any]:
    """cuDNN's attention backward only."""
    return _sdpa_backward(dout, q, k, v, mask, scale, ("CUDNN_ATTENTION",))
