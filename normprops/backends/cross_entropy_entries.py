"""The registry's entries for other projects' cross-entropy (:mod:`normprops.backends.
cross_entropy_kernels`): PyTorch's ``F.cross_entropy`` on the CPU and on CUDA (eager, and under
``torch.compile`` on CUDA only), Liger-Kernel's Triton cross-entropy, optax's under ``jax.jit``.

Each declares what it computes (``CrossEntropyDeclaration``: its reduction, a softcap) on the
foreign model (every row sum as deep as a plain loop, fast-math exp). PyTorch's entries claim
every family; the others are hunted without claims until a hunt has measured them (their findings
reported, none gated on), and so are those of a summed or averaged loss (the committed fixtures
are cases of losses per row, another loss for them). Liger's loss comes back in the logits' type,
so its forward entries are float32 only; optax takes no label smoothing (declared: the hunt draws
0).
"""

from __future__ import annotations

from dataclasses import replace

from normprops.kernelspec import KernelSpec
from normprops.ops.cross_entropy_math import FOREIGN_CROSS_ENTROPY, CrossEntropyDeclaration

__all__ = ["CROSS_ENTROPY_KERNELS"]

_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
_FAMILIES = frozenset({"ordinary", "offset", "large_logits", "target_extremes", "dominant", "ignored",
                       "softcap", "vocab", "ragged"})
_MODULE = "normprops.backends.cross_entropy_kernels"
# Not promised bitwise the same for a row alone and in a batch: Liger's and optax's calls, and
# PyTorch's on the CPU (measured: F.cross_entropy, float32, V = 50256, label smoothing 1, a row's
# loss alone differs from the same row among two by 1 ulp, 11.323446 vs 11.323447; its row sums
# split by the batch's shape), and on CUDA (measured on an H100, torch 2.11: in every family hunted
# a row's float32 loss alone differs from the same row among two by 1-2 ulp, and its gradient
# likewise; its log-softmax picks its reduction by the batch's shape, as torch.softmax's CUDA kernel
# does, a known bug of that entry).
_NOT_PROMISED = frozenset({"batch_invariance"})

# (backend, device, attr, name, dtypes, reduction, softcap, smoothing, claims)
_ENTRIES = (
    ("torch-cpu", "cpu", "torch_ce", "F.ce", ("float32", "bfloat16"), "none", None, True, True),
    ("torch-cpu", "cpu", "torch_ce_mean", "F.ce.mean", ("float32", "bfloat16"), "mean", None,
     True, True),
    ("torch-cuda", "cuda", "torch_ce", "F.ce", ("float32", "bfloat16"), "none", None, True, True),
    ("torch-cuda", "cuda", "torch_ce_mean", "F.ce.mean", ("float32", "bfloat16"), "mean", None,
     True, True),
    ("torch-compile", "cuda", "compiled_ce", "compiled.ce", ("float32", "bfloat16"), "none",
     None, True, False),
    ("liger", "cuda", "liger_ce", "liger.ce", ("float32",), "none", None, True, False),
    ("liger", "cuda", "liger_ce_mean", "liger.ce.mean", ("float32",), "mean", None, True, False),
    ("liger", "cuda", "liger_ce_softcap30", "liger.ce.cap30", ("float32",), "none", 30.0,
     True, False),
    ("jax", None, "optax_ce", "optax.ce", ("float32", "bfloat16"), "none", None, False,
     False),
)
# The gradients: the same calls' backward, the logits in every type each takes.
_GRAD_DTYPES = {"liger": ("float32", "bfloat16")}


def _entry(row: tuple, *, gradient: bool, dtype: str) -> KernelSpec:
    backend, device, attr, name, _, reduction, softcap, smoothing, claims = row
    model = FOREIGN_CROSS_ENTROPY.model
    if backend == "liger":
        # Triton's exp flushes a subnormal result (measured on an H100: Liger's float32 gradient
        # gave 0 where dloss times a softmax entry below FLT_MIN is 2e-36, in large_logits, softcap
        # and vocab); judged as flushing.
        model = replace(model, ftz=True)
    if backend == "jax":
        # XLA flushes subnormals on the CPU (docs/ecosystem.md): measured here, optax's gradient
        # gave 0 for dloss 504 times a softmax entry of 5e-39.
        model = replace(model, ftz=True)
    declared = CrossEntropyDeclaration(model, softcap=softcap, reduction=reduction, smoothing=smoothing)
    op = "cross_entropy_backward" if gradient else "cross_entropy"
    framework = "jax" if backend == "jax" else "torch"
    where = "" if device is None else f" on {device.upper()}"
    return KernelSpec(f"{name}{'.backward' if gradient else ''}-{_SHORT[dtype]}", op, backend,
                      f"{_MODULE}:{attr}{'_backward' if gradient else ''}", 3, declared.model,
                      _FAMILIES if claims and reduction == "none" else frozenset(),
                      f"{name}{' backward' if gradient else ''} ({attr}), {dtype}{where}", bench=False,
                      dtype=dtype, framework=framework, device=device, op_declaration=declared,
                      exempt=_NOT_PROMISED)


CROSS_ENTROPY_KERNELS: tuple[KernelSpec, ...] = tuple(
    _entry(row, gradient=gradient, dtype=dtype)
    for row in _ENTRIES for gradient in (False, True)
    for dtype in (_GRAD_DTYPES.get(row[0], row[4]) if gradient else row[4]))
