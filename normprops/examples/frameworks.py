"""Kernels written in other frameworks, with the op signatures ``normprops hunt --impl`` expects.

    normprops hunt --op rmsnorm --impl normprops.examples.frameworks:torch_rms_norm \\
        --framework torch --dtype bfloat16
    normprops hunt --op softmax --impl normprops.examples.frameworks:jax_softmax --framework jax

Each receives its framework's arrays in the hunt's storage type and returns the same kind.
"""

from __future__ import annotations

from typing import Any

__all__ = ["torch_softmax", "torch_layer_norm", "torch_rms_norm", "jax_softmax", "jax_layer_norm"]


def torch_softmax(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=-1)


def torch_layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def torch_rms_norm(x: Any, gamma: Any, eps: float) -> Any:
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), gamma, eps)


def jax_softmax(x: Any) -> Any:
    import jax

    return jax.nn.softmax(x, axis=-1)


def jax_layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
    import jax

    return jax.nn.standardize(x, axis=-1, epsilon=eps) * gamma + beta
