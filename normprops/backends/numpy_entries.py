"""The numpy registry's entries for the ops the textbook kernels do not compute: the masked softmax
and the three gradients, each as a pair of the examples in :mod:`normprops.examples`, one correct
and one with a planted bug, so that a hunt on a machine without a GPU reaches every op.

Each entry is the example as ``normprops hunt --impl`` hunts it (the T = 32 error model, float32
arithmetic), and takes what the example's catalog says of it: the description of a correct one,
the family, property, storage type and summary of a planted one's bug. A pair's first-hunt family
(``KernelSpec.default_families``) is the one that shows the planted bug, so a hunt without
``--families`` sees the correct kernel pass where the planted one is caught.
"""

from __future__ import annotations

import importlib

from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.examples.backward_correct import CORRECT as GRAD_CORRECT
from normprops.examples.backward_planted import PLANTED as GRAD_PLANTED
from normprops.examples.correct import CORRECT
from normprops.examples.planted_catalog import PLANTED
from normprops.kernelspec import SOFTMAX_FAMILIES, KernelSpec, KnownBug
from normprops.ops import get_op

__all__ = ["NUMPY_EXAMPLE_KERNELS"]

#: Where an example that the registry calls through :func:`~normprops.backends.numpy_examples.
#: in_storage_type` is found (one whose planted bug lives in a 16-bit storage type).
_WRAPPED = "normprops.backends.numpy_examples"
# Row touches (reads and writes of a row, re-reads counted): each example reads its rows twice and
# writes once. No example is benched (bench=False): the number is descriptive only.
_TOUCHES = 3

# (op, correct example, planted example, narrowest rows that show the planted bug). The masked
# softmax's bug needs a whole leading chunk of 1024 columns masked and one column kept after it.
_PAIRS = (
    ("masked_softmax", "masked_softmax_online", "masked_softmax_leading_chunk_nan", 1025),
    ("softmax_backward", "softmax_backward_f32", "softmax_backward_fp16_dot", 1),
    ("rmsnorm_backward", "rmsnorm_backward_f32", "rmsnorm_backward_bf16_dgamma", 1),
    ("layernorm_backward", "layernorm_backward_f32", "layernorm_backward_one_pass", 1),
)

# What the correct examples claim: the masked softmax scales x - max, never x, so it is range-safe
# and claims what a correct softmax claims (SOFTMAX_FAMILIES); the gradients scale no rows, so they
# claim all but 'huge' (range safety), as PyTorch's do.
_CORRECT_CLAIMS = {
    "masked_softmax": SOFTMAX_FAMILIES,
    **{op: frozenset(get_op(op).families) - {"huge"}
       for op, *_ in _PAIRS if get_op(op).forward is not None},
}
# What the planted ones claim. The masked softmax's bug needs a leading chunk that keeps nothing:
# the families other than 'masked' keep every entry, and only 'nonfinite' can fill a chunk with
# -inf. A planted gradient's bug is in arithmetic that every family exercises: it claims nothing.
_PLANTED_CLAIMS = {"masked_softmax": SOFTMAX_FAMILIES - {"masked", "nonfinite"}}


def _correct(op: str, func: str, family: str) -> KernelSpec:
    impl = next(i for i in (*CORRECT, *GRAD_CORRECT) if (i.op, i.func) == (op, func))
    module = "correct" if get_op(op).forward is None else "backward_correct"
    return KernelSpec(func, op, "numpy", f"normprops.examples.{module}:{func}", _TOUCHES,
                      FOREIGN_ERROR_MODEL,
                      _CORRECT_CLAIMS[op], impl.description, bench=False,
                      default_families=frozenset({family}))


def _planted(op: str, func: str, shows_from_cols: int) -> KernelSpec:
    bug = next(p for p in (*PLANTED, *GRAD_PLANTED) if (p.op, p.func) == (op, func))
    dtype = getattr(bug, "dtype", "float32")  # the forward catalog's are all float32
    module = "planted" if get_op(op).forward is None else "backward_planted"
    entry = f"normprops.examples.{module}:{func}" if dtype == "float32" else f"{_WRAPPED}:{func}"
    return KernelSpec(func, op, "numpy", entry, _TOUCHES, FOREIGN_ERROR_MODEL,
                      _PLANTED_CLAIMS.get(op, frozenset()), f"planted: {bug.bug}", bench=False,
                      dtype=dtype, default_families=frozenset({bug.family}),
                      bugs=(KnownBug(bug.family, bug.bug, property=bug.property,
                                     shows_from_cols=shows_from_cols),))


def _pair(op: str, correct: str, planted: str, shows_from_cols: int) -> tuple[KernelSpec, KernelSpec]:
    bad = _planted(op, planted, shows_from_cols)
    return _correct(op, correct, bad.bug.family), bad


NUMPY_EXAMPLE_KERNELS: tuple[KernelSpec, ...] = tuple(spec for pair in _PAIRS for spec in _pair(*pair))


# --- attention: the example kernels of normprops.examples.attention_kernels ----------------------
# float32 storage (the registry's numpy arrays), each with its own declaration (the depth of its
# chunked sums, online or two-pass, P's type, an empty row's zeros, (out, lse) returned). The
# correct ones claim every family; each planted one is a known bug of the family that shows it.


def _attention_entries() -> tuple[KernelSpec, ...]:
    from dataclasses import replace

    from normprops.examples.attention_kernels import CORRECT as ATTN_CORRECT
    from normprops.examples.attention_kernels import PLANTED as ATTN_PLANTED

    families = frozenset(get_op("attention").families)
    entries = []
    for name, kernel in {**ATTN_CORRECT, **ATTN_PLANTED}.items():
        declared = replace(kernel.declaration, returns_lse=True)
        bugs = () if kernel.family is None else (KnownBug(kernel.family, kernel.bug),)
        entries.append(KernelSpec(
            name, "attention", "numpy", f"normprops.examples.attention_kernels:{name}", _TOUCHES,
            declared.model, families if not bugs else frozenset(),
            (kernel.func.__doc__ or "").split("\n")[0] if not bugs else f"planted: {kernel.bug}",
            bugs=bugs, bench=False, default_families=None if not bugs else frozenset({kernel.family}),
            op_declaration=declared))
    return tuple(entries)


NUMPY_EXAMPLE_KERNELS = NUMPY_EXAMPLE_KERNELS + _attention_entries()


# --- cross-entropy: the example kernels of normprops.examples.cross_entropy_kernels --------------
# Each with its own declaration (numpy's pairwise sums, a softcap or a mean where it computes one).
# The correct ones claim every family, but for a reduced loss: the committed fixtures are cases of
# losses per row, which a kernel that sums or averages them computes as another loss. Each planted
# one is a known bug of the family that shows it.


def _cross_entropy_entries(module: str = "cross_entropy_kernels",
                           ops: tuple[str, str] = ("cross_entropy", "cross_entropy_backward")
                           ) -> tuple[KernelSpec, ...]:
    examples = importlib.import_module(f"normprops.examples.{module}")
    CE_CORRECT, CE_PLANTED = examples.CORRECT, examples.PLANTED

    # A first hunt (no --families) runs each op's correct kernels where its planted ones are caught.
    shown = {op: frozenset(k.family for k in CE_PLANTED.values() if k.op == op) for op in ops}
    entries = []
    for name, kernel in {**CE_CORRECT, **CE_PLANTED}.items():
        bugs = () if kernel.family is None else (KnownBug(kernel.family, kernel.bug, example=kernel.example),)
        entries.append(KernelSpec(
            name, kernel.op, "numpy", f"normprops.examples.{module}:{name}", _TOUCHES,
            kernel.declaration.model,
            frozenset(get_op(kernel.op).families) if not bugs and kernel.declaration.reduction == "none"
            else frozenset(),
            (kernel.func.__doc__ or "").split("\n")[0] if not bugs else f"planted: {kernel.bug}",
            bugs=bugs, bench=False, dtype=kernel.dtype,
            default_families=shown[kernel.op] if not bugs else frozenset({kernel.family}),
            op_declaration=kernel.declaration,
            # dw's sum over the rows (the fused loss's gradient); a forward op sums none.
            row_reduction=kernel.declaration.model.row_reduction if get_op(kernel.op).forward else "blocks"))
    return tuple(entries)


# --- attention backward: the example kernels of normprops.examples.attention_backward_kernels -----
# float32 storage, the examples' declaration (the depth of their chunked sums, P in float32). The
# correct ones claim every family; each planted one is a known bug of the family that shows it.


def _attention_backward_entries() -> tuple[KernelSpec, ...]:
    from normprops.examples.attention_backward_kernels import CORRECT as BWD_CORRECT
    from normprops.examples.attention_backward_kernels import PLANTED as BWD_PLANTED

    families = frozenset(get_op("attention_backward").families)
    # Without --families, the correct ones are hunted where the planted ones are caught.
    shown = frozenset(kernel.family for kernel in BWD_PLANTED.values())
    entries = []
    for name, kernel in {**BWD_CORRECT, **BWD_PLANTED}.items():
        bugs = () if kernel.family is None else (KnownBug(kernel.family, kernel.bug),)
        entries.append(KernelSpec(
            name, "attention_backward", "numpy", f"normprops.examples.attention_backward_kernels:{name}",
            _TOUCHES, kernel.declaration.model, families if not bugs else frozenset(),
            (kernel.func.__doc__ or "").split("\n")[0] if not bugs else f"planted: {kernel.bug}",
            bugs=bugs, bench=False, default_families=shown if not bugs else frozenset({kernel.family}),
            op_declaration=kernel.declaration))
    return tuple(entries)


NUMPY_EXAMPLE_KERNELS = NUMPY_EXAMPLE_KERNELS + _attention_backward_entries() + _cross_entropy_entries()
# The fused loss's examples (normprops.examples.linear_cross_entropy_kernels), alike.
NUMPY_EXAMPLE_KERNELS = NUMPY_EXAMPLE_KERNELS + _cross_entropy_entries(
    "linear_cross_entropy_kernels", ("linear_cross_entropy", "linear_cross_entropy_backward"))
