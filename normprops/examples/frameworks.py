"""Kernels written in other frameworks, with the op signatures ``normprops hunt --impl`` expects.

    normprops hunt --op rmsnorm --impl normprops.examples.frameworks:torch_rms_norm \\
        --framework torch --dtype bfloat16
    normprops hunt --op softmax --impl normprops.examples.frameworks:jax_softmax --framework jax

Each receives its framework's arrays in the hunt's storage type and returns the same kind.
"""

from __future__ import annotations

from typing import Any

__all__ = ["torch_softmax", "torch_layer_norm", "torch_rms_norm", "torch_softmax_backward",
           "torch_layer_norm_backward", "torch_rms_norm_backward", "jax_softmax", "jax_layer_norm"]


def torch_softmax(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=-1)


def torch_layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def torch_rms_norm(x: Any, gamma: Any, eps: float) -> Any:
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), gamma, eps)


# Gradients written out in torch float32, as a user writes them (``--framework torch --device
# cpu``): row means by torch's reductions, dgamma and dbeta by ``sum(dim=0)`` (on the CPU a
# cascade of partial sums, within the default row reduction's bound, which holds for every order).


def torch_softmax_backward(dy: Any, y: Any) -> Any:
    d, w = dy.float(), y.float()
    return (w * (d - (d * w).sum(dim=-1, keepdim=True))).to(dy.dtype)


def torch_layer_norm_backward(dy: Any, x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    import torch

    d, v, g = dy.float(), x.float(), gamma.float()
    c = v - v.mean(dim=-1, keepdim=True)
    rstd = 1 / torch.sqrt((c * c).mean(dim=-1, keepdim=True) + eps)
    xhat = c * rstd
    gd = d * g
    dx = rstd * (gd - gd.mean(dim=-1, keepdim=True) - xhat * (gd * xhat).mean(dim=-1, keepdim=True))
    return dx.to(dy.dtype), (d * xhat).sum(dim=0).to(gamma.dtype), d.sum(dim=0).to(beta.dtype)


def torch_rms_norm_backward(dy: Any, x: Any, gamma: Any, eps: float) -> Any:
    import torch

    d, v, g = dy.float(), x.float(), gamma.float()
    rstd = 1 / torch.sqrt((v * v).mean(dim=-1, keepdim=True) + eps)
    xhat = v * rstd
    gd = d * g
    dx = rstd * (gd - xhat * (gd * xhat).mean(dim=-1, keepdim=True))
    return dx.to(dy.dtype), (d * xhat).sum(dim=0).to(gamma.dtype)


def jax_softmax(x: Any) -> Any:
    import jax

    return jax.nn.softmax(x, axis=-1)


def jax_layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    import jax

    return jax.nn.standardize(x, axis=-1, epsilon=eps) * gamma + beta
