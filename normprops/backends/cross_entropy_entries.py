"""The registry's entries for other projects' cross-entropy (:mod:`normprops.backends.
cross_entropy_kernels`): PyTorch's ``F.cross_entropy`` on the CPU and on CUDA (eager, and under
``torch.compile`` on CUDA only), Liger-Kernel's Triton cross-entropy, QuACK's CuTe DSL
cross-entropy, optax's under ``jax.jit``.

Each declares what it computes (``CrossEntropyDeclaration``: its reduction, a softcap) on the
foreign model (every row sum as deep as a plain loop, fast-math exp). PyTorch's entries claim
every family; the others are hunted without claims until a hunt has measured them (their findings
reported, none gated on), and so are those of a summed or averaged loss (the committed fixtures
are cases of losses per row, another loss for them). Liger's loss comes back in the logits' type,
so its forward entries are float32 only; optax and QuACK take no label smoothing (declared: the
hunt draws 0).
"""

from __future__ import annotations

from dataclasses import replace

from normprops.kernelspec import KernelSpec, KnownBug
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
    # QuACK 0.6.5 (quack/cross_entropy.py): ignore_index (any int32, negative included), reduction
    # none, mean or sum (mean and sum taken by torch over its float32 per-row losses), per-class
    # weights and a partial lse (neither hunted); no label smoothing, no softcap, no z-loss. Any
    # width (it loads gcd(V, 16 bytes / itemsize) elements at a time), float32, bfloat16 and float16
    # logits; the loss float32 whatever their type. Sum adds nothing of QuACK's to mean: not entered.
    ("quack", "cuda", "quack_ce", "quack.ce", ("float32", "bfloat16"), "none", None, False, False),
    ("quack", "cuda", "quack_ce_mean", "quack.ce.mean", ("float32", "bfloat16"), "mean", None, False,
     False),
)
# The gradients: the same calls' backward, the logits in every type each takes.
_GRAD_DTYPES = {"liger": ("float32", "bfloat16")}

# What the hunts of the entries that claim nothing by default measured (an H100, torch 2.11,
# liger-kernel 0.8.5, 300 examples a family, seeds 0 and 1; docs/ecosystem.md, "Cross-entropy on
# the GPU"): the families each came back clean on, which it claims.
# - Liger's float32 gradients: clean on every family.
# - Liger's forward: clean wherever no row is ignored. Its kernel zeroes an ignored row of the
#   logits in place even when they take no gradient (liger_kernel/ops/cross_entropy.py stores 0
#   over such a row before it looks at HAS_GRADIENTS; docs/reproducers/
#   liger_ce_ignored_rows_zeroed.py): a known bug, met in ignored, and in ordinary and vocab where
#   they draw an ignored row.
# - Liger's bfloat16 gradients are unclaimed: its forward rounds the gradient to the logits' type
#   and the backward multiplies that by dloss and rounds again, two roundings where the bound
#   allows one (err/tol up to 1.55 in every family); a choice of theirs (the gradient kept in the
#   input's buffer to save memory), not a bug, so it is neither claimed nor reported as one.
_LIGER_FORWARD = _FAMILIES - {"ordinary", "ignored", "vocab"}
# - torch.compile's loss and gradient, float32 and bfloat16, and optax's: clean on every family
#   (a second run of the same hunts; optax's on its XLA GPU kernels, where it claims the same
#   families it is hunted on by the CPU suite).
_MEASURED = {"liger.ce-f32": _LIGER_FORWARD, "liger.ce.cap30-f32": _LIGER_FORWARD,
             "liger.ce.backward-f32": _FAMILIES, "liger.ce.cap30.backward-f32": _FAMILIES,
             **{f"{name}-{dtype}": _FAMILIES for name in ("compiled.ce", "compiled.ce.backward",
                                                          "optax.ce", "optax.ce.backward")
                for dtype in ("f32", "bf16")}}
_LIGER_ZEROES_IGNORED = (KnownBug("ignored", "zeroes an ignored row's logits in place, even when they "
                                  "take no gradient", property="contract"),)
# QuACK's bfloat16 loss and gradient are NaN for an ordinary row of Qwen's vocabulary (151936
# columns of N(0, 1) logits; float32 logits of the same values are right): met by every bfloat16
# hunt of `vocab` on an H100, forward and backward, per row and averaged, each shrunk to that width
# (docs/reproducers/quack_ce_bf16_vocab_nan.py).
_QUACK_BF16_VOCAB_NAN = (KnownBug("vocab", "NaN loss and gradient for a bfloat16 row of 151936 ordinary "
                                  "logits", property="finite", shows_from_cols=151936),)


def _entry(row: tuple, *, gradient: bool, dtype: str) -> KernelSpec:
    backend, device, attr, name, _, reduction, softcap, smoothing, claims = row
    model = FOREIGN_CROSS_ENTROPY.model
    if backend == "liger":
        # Triton's exp flushes a subnormal result (measured on an H100: Liger's float32 gradient
        # gave 0 where dloss times a softmax entry below FLT_MIN is 2e-36, in large_logits, softcap
        # and vocab); judged as flushing.
        model = replace(model, ftz=True)
    if backend == "quack":
        # QuACK's exponentials are cute.math.exp2(..., fastmath=True) (the forward's online softmax
        # and the backward's exp(x - lse)): ex2.approx, which flushes a subnormal result, as
        # Triton's exp does. Judged as flushing.
        model = replace(model, ftz=True)
    if backend == "jax":
        # XLA flushes subnormals on the CPU (docs/ecosystem.md): measured here, optax's gradient
        # gave 0 for dloss 504 times a softmax entry of 5e-39.
        model = replace(model, ftz=True)
    # QuACK's bfloat16 rows are copied in 4-byte pieces: an odd vocabulary does not compile (CuTe
    # DSL's "'cp_size' only supports (32, 64, 128), but got 16"; at V = 3 and 31999 in every hunt).
    # Declared, so the hunt draws even ones only.
    even = backend == "quack" and dtype == "bfloat16"
    declared = CrossEntropyDeclaration(model, softcap=softcap, reduction=reduction, smoothing=smoothing,
                                       vocab_multiple_of=2 if even else 1)
    op = "cross_entropy_backward" if gradient else "cross_entropy"
    framework = "jax" if backend == "jax" else "torch"
    where = "" if device is None else f" on {device.upper()}"
    full = f"{name}{'.backward' if gradient else ''}-{_SHORT[dtype]}"
    claimed = _FAMILIES if claims and reduction == "none" else _MEASURED.get(full, frozenset())
    return KernelSpec(full, op, backend, f"{_MODULE}:{attr}{'_backward' if gradient else ''}", 3,
                      declared.model, claimed,
                      f"{name}{' backward' if gradient else ''} ({attr}), {dtype}{where}", bench=False,
                      dtype=dtype, framework=framework, device=device, op_declaration=declared,
                      imports=("optax",) if backend == "jax" else (),
                      exempt=_NOT_PROMISED,
                      bugs=(_LIGER_ZEROES_IGNORED if backend == "liger" and not gradient
                            else _QUACK_BF16_VOCAB_NAN if even else ()))


CROSS_ENTROPY_KERNELS: tuple[KernelSpec, ...] = tuple(
    _entry(row, gradient=gradient, dtype=dtype)
    for row in _ENTRIES for gradient in (False, True)
    for dtype in (_GRAD_DTYPES.get(row[0], row[4]) if gradient else row[4]))
