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

# PyTorch's masked softmaxes (normprops/backends/torch_masked.py), called with torch tensors of the
# storage type. Both widen x and form scale * x in float32, so the arithmetic is float32 throughout
# and a bfloat16 entry rounds only its output: the T = 32 model, plus the rounding of scale * x
# that the masked softmax's bound adds (docs/tolerances.md, "Masked softmax"). Neither claims
# overflow_logits or huge: a peak up to float32's max times a scale of 1e3 or 1e20 overflows to
# +inf before the softmax subtracts the row max, and the row comes out NaN; a limit of scaling
# first, as attention code without a fused kernel does, not of torch's softmax (hunted unclaimed,
# the matrix shows it as range safety). On CUDA neither promises batch invariance: masked_fill is
# torch.softmax itself, and _masked_softmax falls back to it past 1024 columns.
_TORCH_MASKED = (
    ("masked_fill+softmax", "masked_fill_softmax",
     "torch.softmax of scale * x filled with -inf where masked"),
    ("torch._masked_softmax", "masked_softmax", "torch._masked_softmax of scale * x (mask type 2)"),
)
_MASKED_CLAIMS = SOFTMAX_FAMILIES - {"overflow_logits", "huge"}
_MASKED_DTYPES = {"cuda": ("float32", "bfloat16"), "cpu": ("float32",)}
_SHORT = {"float32": "f32", "bfloat16": "bf16"}
TORCH_KERNELS += tuple(
    KernelSpec(f"{name}-{_SHORT[dtype]}", "masked_softmax",
               f"torch-{device}", f"{BACKEND_MODULES['torch-' + device]}:{attr}_{device}", 2,
               FOREIGN_ERROR_MODEL, _MASKED_CLAIMS, f"{summary}, {dtype} on the {device.upper()}",
               exempt=frozenset({"batch_invariance"}) if device == "cuda" else frozenset(),
               bench=False, dtype=dtype, framework="torch", device=device)
    for device, dtypes in _MASKED_DTYPES.items()
    for dtype in dtypes
    for name, attr, summary in _TORCH_MASKED
)
