"""Other libraries' gradient kernels behind the gradient ops' signatures, on torch tensors.

``softmax_backward(dy, y) -> dx``, ``rmsnorm_backward(dy, x, gamma, eps) -> (dx, dgamma)``,
``layernorm_backward(dy, x, gamma, beta, eps) -> (dx, dgamma, dbeta)``: each takes and returns
tensors of the storage type on the tensors' device, as ``normprops hunt --framework torch`` hands
them, so any of these can be hunted as ``--impl normprops.backends.grads:NAME --framework torch``.
PyTorch's run its autograd (``aten._softmax_backward_data``, the backward of ``F.rms_norm`` and
``F.layer_norm``); the compiled ones the backward of ``torch.compile(dynamic=True)`` of ``F.rms_norm``
and ``F.layer_norm`` (the registry's compiled forwards, :mod:`normprops.backends.ecosystem`: the
kernels Inductor generates for the backward graph); Liger-Kernel's run the backward of its Triton
autograd Functions (CUDA only). torch and liger_kernel are imported on the first call. The registry's
gradient entries (:mod:`normprops.backends.torch_entries`, :mod:`normprops.backends.ecosystem_entries`)
point here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["torch_softmax_backward", "torch_rmsnorm_backward", "torch_layernorm_backward",
           "compiled_rmsnorm_backward", "compiled_layernorm_backward", "liger_rmsnorm_backward",
           "liger_layernorm_backward"]

#: Liger's RMS norm casting mode, as the forward adapters use it (normprops.backends.peers).
LIGER_CASTING_MODE = "gemma"
#: Liger's RMS norm backward overwrites dy with dx unless told not to; hunted as not (a hunt judges a
#: kernel that changes its inputs as a contract failure).
LIGER_IN_PLACE = False


def _leaf(t: Any) -> Any:
    return t.detach().clone().requires_grad_(True)


def _backward(out: Any, dy: Any, *leaves: Any) -> tuple[Any, ...]:
    import torch

    grads = torch.autograd.grad(out, leaves, grad_outputs=dy)
    return tuple(g.detach() for g in grads)


def torch_softmax_backward(dy: Any, y: Any) -> Any:
    """PyTorch's softmax gradient over the last axis, given the forward's output ``y``."""
    import torch

    return torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype)


def torch_rmsnorm_backward(dy: Any, x: Any, gamma: Any, eps: float) -> tuple[Any, Any]:
    """The gradient of ``F.rms_norm(x, (cols,), gamma, eps)`` by autograd."""
    import torch.nn.functional as F

    x, gamma = _leaf(x), _leaf(gamma)
    out = F.rms_norm(x, (x.shape[-1],), gamma, eps)
    return _backward(out, dy, x, gamma)


def torch_layernorm_backward(dy: Any, x: Any, gamma: Any, beta: Any,
                             eps: float) -> tuple[Any, Any, Any]:
    """The gradient of ``F.layer_norm(x, (cols,), gamma, beta, eps)`` by autograd."""
    import torch.nn.functional as F

    x, gamma, beta = _leaf(x), _leaf(gamma), _leaf(beta)
    out = F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return _backward(out, dy, x, gamma, beta)


def compiled_rmsnorm_backward(dy: Any, x: Any, gamma: Any, eps: float) -> tuple[Any, Any]:
    """The gradient of ``torch.compile(dynamic=True)`` of ``F.rms_norm`` by autograd."""
    from normprops.backends.ecosystem import entry

    x, gamma = _leaf(x), _leaf(gamma)
    out = entry("torch-compile", "rmsnorm")(x, gamma, eps)
    return _backward(out, dy, x, gamma)


def compiled_layernorm_backward(dy: Any, x: Any, gamma: Any, beta: Any,
                                eps: float) -> tuple[Any, Any, Any]:
    """The gradient of ``torch.compile(dynamic=True)`` of ``F.layer_norm`` by autograd."""
    from normprops.backends.ecosystem import entry

    x, gamma, beta = _leaf(x), _leaf(gamma), _leaf(beta)
    out = entry("torch-compile", "layernorm")(x, gamma, beta, eps)
    return _backward(out, dy, x, gamma, beta)


def liger_rmsnorm_backward(dy: Any, x: Any, gamma: Any, eps: float) -> tuple[Any, Any]:
    """The backward of Liger's ``LigerRMSNormFunction`` (offset 0, casting mode "gemma"), with
    ``in_place=False``: by default it writes dx over dy to save memory, which its docstring warns
    can corrupt a dy that something else still reads (Liger's Gemma 2 patch turns it off too)."""
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    x, gamma = _leaf(x), _leaf(gamma)
    out = LigerRMSNormFunction.apply(x, gamma, eps, 0.0, LIGER_CASTING_MODE, LIGER_IN_PLACE)
    return _backward(out, dy, x, gamma)


def liger_layernorm_backward(dy: Any, x: Any, gamma: Any, beta: Any,
                             eps: float) -> tuple[Any, Any, Any]:
    """The backward of Liger's ``LigerLayerNormFunction``."""
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    x, gamma, beta = _leaf(x), _leaf(gamma), _leaf(beta)
    out = LigerLayerNormFunction.apply(x, gamma, beta, eps)
    return _backward(out, dy, x, gamma, beta)
