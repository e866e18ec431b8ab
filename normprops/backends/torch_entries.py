"""The registry's entries for PyTorch's own kernels, on the GPU and the CPU."""

from __future__ import annotations

from dataclasses import replace

from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.kernelspec import BACKEND_MODULES, NORM_FAMILIES, SOFTMAX_FAMILIES, KernelSpec, KnownBug

__all__ = ["TORCH_KERNELS"]

# PyTorch's kernels, hunted as foreign code (the T = 32 error model of docs/tolerances.md).
# F.rms_norm is known not to be range-safe (a float32 row of 3e19 gives 0); nothing here claims
# 'huge' for the norms.
_TORCH = (
    ("torch.softmax", "softmax", "softmax", SOFTMAX_FAMILIES),
    ("F.layer_norm", "layernorm", "layer_norm", NORM_FAMILIES - {"huge"}),
    ("F.rms_norm", "rmsnorm", "rms_norm", NORM_FAMILIES - {"huge"}),
)
TORCH_KERNELS: tuple[KernelSpec, ...] = tuple(
    KernelSpec(name, op, f"torch-{device}", f"{BACKEND_MODULES['torch-' + device]}:{attr}_{device}",
               2, FOREIGN_ERROR_MODEL, claims, f"PyTorch's {name} on the {device.upper()}")
    for device in ("cuda", "cpu")
    for name, op, attr, claims in _TORCH
)
# Found by the hunt on CUDA: torch.softmax on CUDA picks its reduction by
# shape, so a row's result changes with the number of rows beside it (2 rows vs 3, at 16383 cols).
TORCH_KERNELS = tuple(
    replace(k, exempt=frozenset({"batch_invariance"}),
            bugs=(KnownBug("ragged", "batch-variant: a row's bits depend on the batch size",
                         property="batch_invariance", shows_from_cols=16383,
                         example="torch.softmax-ragged.json"),))
    if (k.name, k.backend) == ("torch.softmax", "torch-cuda") else k
    for k in TORCH_KERNELS
)
