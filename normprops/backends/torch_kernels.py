"""PyTorch's own kernels as hunted targets: ``torch.softmax``, ``F.layer_norm``, ``F.rms_norm``, and
the masked softmaxes of :mod:`normprops.backends.torch_masked`.

On CUDA the numpy input goes to the device through CuPy and reaches torch zero-copy through DLPack;
on the CPU ``torch.from_numpy`` shares the numpy buffer. Outputs come back as float32 numpy. The
masked softmaxes take torch tensors instead (their entries' framework is torch, whose adapter puts
the tensors on the entry's device), so each device's name is the same function.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from normprops.backends.torch_masked import masked_fill_softmax, torch_masked_softmax

__all__ = ["torch_status", "softmax_cuda", "softmax_cpu", "layer_norm_cuda", "layer_norm_cpu",
           "rms_norm_cuda", "rms_norm_cpu", "masked_fill_softmax_cuda", "masked_fill_softmax_cpu",
           "masked_softmax_cuda", "masked_softmax_cpu"]


@functools.cache
def torch_status(*, device: str) -> tuple[bool, str]:
    try:
        import torch
    except Exception as exc:
        return False, f"torch is not importable ({type(exc).__name__}: {exc})"
    if device == "cuda":
        if not torch.cuda.is_available():
            return False, f"torch {torch.__version__} sees no CUDA device"
        from normprops.cuda.build import cuda_status

        ok, why = cuda_status()
        if not ok:
            return False, f"torch sees a GPU but CuPy (for DLPack transfer) does not: {why}"
        return True, f"torch {torch.__version__} on {torch.cuda.get_device_name()}"
    return True, f"torch {torch.__version__} on the CPU"


def _tensor(a: np.ndarray, device: str) -> Any:
    import torch

    if device == "cuda":
        import cupy

        return torch.from_dlpack(cupy.asarray(a))
    return torch.from_numpy(np.ascontiguousarray(a))


def _numpy(t: Any) -> np.ndarray:
    return t.detach().cpu().numpy()


def _softmax(x: np.ndarray, *, device: str) -> np.ndarray:
    import torch

    return _numpy(torch.softmax(_tensor(x, device), dim=-1))


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, *,
                device: str) -> np.ndarray:
    import torch.nn.functional as F

    return _numpy(F.layer_norm(_tensor(x, device), (x.shape[1],), _tensor(gamma, device),
                               _tensor(beta, device), eps))


def _rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float, *, device: str) -> np.ndarray:
    import torch.nn.functional as F

    return _numpy(F.rms_norm(_tensor(x, device), (x.shape[1],), _tensor(gamma, device), eps))


softmax_cuda = functools.partial(_softmax, device="cuda")
softmax_cpu = functools.partial(_softmax, device="cpu")
layer_norm_cuda = functools.partial(_layer_norm, device="cuda")
layer_norm_cpu = functools.partial(_layer_norm, device="cpu")
rms_norm_cuda = functools.partial(_rms_norm, device="cuda")
rms_norm_cpu = functools.partial(_rms_norm, device="cpu")
masked_fill_softmax_cuda = masked_fill_softmax_cpu = masked_fill_softmax
masked_softmax_cuda = masked_softmax_cpu = torch_masked_softmax
