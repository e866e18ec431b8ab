"""The registry's entries for other projects' fused linear cross-entropy
(:mod:`normprops.backends.linear_cross_entropy_kernels`): PyTorch's ``F.linear`` then
``F.cross_entropy`` on the CPU and on CUDA, Liger-Kernel's fused linear cross-entropy, QuACK's
``F.linear`` then CuTe DSL cross-entropy, Cut Cross-Entropy's Triton kernels and its
``torch.compile`` path.

Each declares what it computes (``LinearCrossEntropyDeclaration``: its reduction, a softcap,
whether it takes a label smoothing, and whether its logits are rounded to the storage type
before the loss) on the foreign model (every sum as deep as a plain loop, fast-math exp, dw
summed row after row). ``F.linear`` on bfloat16 operands returns bfloat16 logits, and Liger's
chunks hold their logits in the input's type: declared rounded. Cut Cross-Entropy's Triton
kernels keep them in float32. Triton's exp and PyTorch's CPU bfloat16 matmul flush subnormal
results: declared flushing. PyTorch's per-row entries claim every family; the others are
hunted without claims until a hunt has measured them on a GPU (their findings reported, none
gated on). Cut Cross-Entropy and QuACK take no label smoothing (declared: the hunt draws 0).
"""

from __future__ import annotations

from dataclasses import replace

from normprops.errormodel import ErrorModel
from normprops.kernelspec import KernelSpec, KnownBug
from normprops.ops.linear_cross_entropy_math import FAMILIES, LinearCrossEntropyDeclaration

__all__ = ["LINEAR_CROSS_ENTROPY_KERNELS"]

_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
_MODULE = "normprops.backends.linear_cross_entropy_kernels"
# A row's loss alone and in a batch: not promised by any of them (PyTorch's matmul and log-softmax
# pick their blocking by the batch's shape; the fused kernels chunk the batch).
_NOT_PROMISED = frozenset({"batch_invariance"})
#: The foreign model: plain loops' depth, dw summed in any order over the rows.
_FOREIGN = ErrorModel(threads=1, rho=6.0, c_x=3.5, row_reduction="sequential")

# (backend, device, attr, name, dtypes, reduction, softcap, smoothing, claims, logits rounded)
_ENTRIES = (
    ("torch-cpu", "cpu", "torch_lce", "F.lce", ("float32", "bfloat16"), "none", None, True, True, True),
    ("torch-cpu", "cpu", "torch_lce_mean", "F.lce.mean", ("float32", "bfloat16"), "mean", None, True,
     True, True),
    ("torch-cuda", "cuda", "torch_lce", "F.lce", ("float32", "bfloat16"), "none", None, True, True, True),
    ("torch-cuda", "cuda", "torch_lce_mean", "F.lce.mean", ("float32", "bfloat16"), "mean", None, True,
     True, True),
    ("liger", "cuda", "liger_flce", "liger.flce", ("float32", "bfloat16"), "none", None, True, False, True),
    ("liger", "cuda", "liger_flce_mean", "liger.flce.mean", ("float32", "bfloat16"), "mean", None, True,
     False, True),
    # Its float32 accumulator (accum_dtype=torch.float32): the gradient alone, the loss is the same.
    ("liger", "cuda", "liger_flce_acc32", "liger.flce.acc32", ("bfloat16",), "none", None, True, False, True),
    ("liger", "cuda", "liger_flce_softcap30", "liger.flce.cap30", ("float32", "bfloat16"), "none", 30.0,
     True, False, True),
    # QuACK 0.6.5's linear_cross_entropy_func (what its LinearCrossEntropy module runs unless given a
    # chunk_size): F.linear, the logits in the storage type, then quack.cross_entropy on them. No
    # label smoothing, no softcap. Its fused chunked_linear_cross_entropy is not entered: it takes a
    # mean or a sum only, and asserts N, H and V multiples of 8 (its GEMMs' TMA alignment), widths
    # the op's families do not restrict themselves to.
    ("quack", "cuda", "quack_lce", "quack.lce", ("float32", "bfloat16"), "none", None, False, False, True),
    ("quack", "cuda", "quack_lce_mean", "quack.lce.mean", ("float32", "bfloat16"), "mean", None, False,
     False, True),
    ("cce", "cuda", "cce_lce", "cce.lce", ("float32", "bfloat16"), "none", None, False, False, False),
    ("cce", "cuda", "cce_lce_mean", "cce.lce.mean", ("float32", "bfloat16"), "mean", None, False, False,
     False),
    ("cce", "cuda", "cce_compile_lce", "cce.compile.lce", ("float32", "bfloat16"), "none", None, False,
     False, True),
)


# What the GPU hunts measured (an H100, torch 2.11, liger-kernel 0.8.5, cut-cross-entropy 25.1.1, 300
# examples a family, seeds 0 and 1; docs/ecosystem.md, "Cross-entropy on the GPU"): the families
# Liger's fused loss came back clean on at both seeds, which it claims (vocab, at V up to 256001,
# reached a few dozen examples in the time). Cut Cross-Entropy's loss is not bitwise the same from
# one call to the next (its log-sum-exp is summed over blocks of the vocabulary in whatever order
# they finish: 1-8 ulp in every family), and its backward takes 16-bit embeddings only ("Backwards
# requires embeddings to be bf16 or fp16", an assert of its own): no float32 gradient entry.
_MEASURED = {
    "liger.flce-f32": frozenset(FAMILIES),
    "liger.flce-bf16": frozenset(FAMILIES) - {"vocab", "ragged"},
    "liger.flce.backward-f32": frozenset(FAMILIES) - {"vocab", "ragged"},
    # A second run: the softcapped fused loss (float32 and bfloat16) and its float32 gradient, and
    # Cut Cross-Entropy's torch.compile path in float32, clean on every family at both seeds.
    "liger.flce.cap30-f32": frozenset(FAMILIES), "liger.flce.cap30-bf16": frozenset(FAMILIES),
    "liger.flce.cap30.backward-f32": frozenset(FAMILIES), "cce.compile.lce-f32": frozenset(FAMILIES),
}


# Cut Cross-Entropy's bfloat16 loss takes the target's logit as tl.sum((e * c).to(tl.float32)) in
# indexed_dot.py: each product of two bfloat16 values is rounded to bfloat16 before the float32 sum,
# where its log-sum-exp keeps float32 dots (docs/reproducers/cce_bf16_target_logit.py: on an H100
# its loss matched an emulation of exactly that, and a cancelling pair gives 0.695102 where the
# loss is 0.691196).
_CCE_TARGET_LOGIT = (KnownBug("ordinary", "the target's logit summed from products already rounded to "
                              "bfloat16", property="accuracy"),)


def _entry(row: tuple, *, gradient: bool, dtype: str) -> KernelSpec:
    backend, device, attr, name, _, reduction, softcap, smoothing, claims, rounded = row
    # Triton's exp flushes a subnormal result (measured for Liger's cross-entropy on an H100,
    # docs/ecosystem.md): Liger's fused kernel runs the same cross-entropy kernel on each chunk,
    # and Cut Cross-Entropy's kernels call tl.exp; judged as flushing.
    # PyTorch's CPU matmul on bfloat16 operands flushes too (measured: F.lce.backward-bf16 gave a
    # dw of 0 where the exact one is 1.02e-38, in softcap).
    # QuACK's cross-entropy takes its exponentials with ex2.approx (cute.math.exp2, fastmath), which
    # flushes too.
    flushing = (backend in ("liger", "quack") or attr in ("cce_lce", "cce_lce_mean")
                or (backend == "torch-cpu" and dtype == "bfloat16"))
    model = replace(_FOREIGN, ftz=flushing)
    # QuACK's bfloat16 logits go through its cross-entropy, which takes even vocabularies only.
    even = backend == "quack" and dtype == "bfloat16"
    declared = LinearCrossEntropyDeclaration(model, softcap=softcap, reduction=reduction,
                                             smoothing=smoothing, logits_rounded=rounded,
                                             vocab_multiple_of=2 if even else 1)
    op = "linear_cross_entropy_backward" if gradient else "linear_cross_entropy"
    full = f"{name}{'.backward' if gradient else ''}-{_SHORT[dtype]}"
    claimed = frozenset(FAMILIES) if claims and reduction == "none" else _MEASURED.get(full, frozenset())
    return KernelSpec(full, op, backend,
                      f"{_MODULE}:{attr}{'_backward' if gradient else ''}", 3, declared.model,
                      claimed,
                      f"{name}{' backward' if gradient else ''} ({attr}), {dtype} on {device.upper()}",
                      bench=False, dtype=dtype, framework="torch", device=device, op_declaration=declared,
                      exempt=_NOT_PROMISED | ({"determinism"} if backend == "cce" else set()),
                      row_reduction="sequential" if gradient else "blocks",
                      bugs=_CCE_TARGET_LOGIT if attr in ("cce_lce", "cce_lce_mean") and dtype == "bfloat16"
                      and not gradient else ())


LINEAR_CROSS_ENTROPY_KERNELS: tuple[KernelSpec, ...] = tuple(
    _entry(row, gradient=gradient, dtype=dtype)
    for row in _ENTRIES for gradient in (False, True) for dtype in row[4]
    if not (gradient and row[0] == "cce" and dtype == "float32")
    and not (row[2] == "liger_flce_acc32" and not gradient))
