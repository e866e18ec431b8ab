"""The fused loss ``linear_cross_entropy``, ``fn(h, w, target, ignore_index, label_smoothing) ->
loss``: cross-entropy of the logits ``h @ w^T`` that a fused kernel never materializes (Liger's
fused linear cross-entropy, Apple's Cut Cross-Entropy). ``h`` (N, H) and ``w`` (V, H) are in the
storage type, the logits accumulated in float32; ``loss`` is float32, (N,) with 0 on ignored rows,
or its sum or mean as declared, exactly as :mod:`normprops.ops.cross_entropy`'s.

The reference is cross-entropy's (:func:`~normprops.ops.cross_entropy_math.cross_entropy_reference`)
on the logits formed in float64; the bound is cross-entropy's with the matmul's error on each
logit carried into the log-sum-exp and the target logit (docs/tolerances.md, "Cross-entropy",
"Fused with the classifier"). Its gradient, ``linear_cross_entropy_backward``, is in
:mod:`normprops.ops.linear_cross_entropy_backward`; the families (cross-entropy's, built through
``h`` and ``w``) in :mod:`normprops.ops.linear_cross_entropy_families`.

Properties judged: those of cross-entropy (``contract``, ``finite``, ``accuracy``,
``determinism``, ``batch_invariance`` of a per-row loss), for the same reasons.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from normprops.errormodel import ErrorModel
from normprops.ops.cross_entropy import (
    CROSS_ENTROPY_PROPERTIES,
    loss_cases,
    loss_description,
    loss_fields,
    loss_outputs,
    loss_pieces,
)
from normprops.ops.cross_entropy_math import CrossEntropyDeclaration, loss_tolerance
from normprops.ops.linear_cross_entropy_math import (
    FAMILIES,
    FOREIGN_LINEAR_CROSS_ENTROPY,
    LinearCrossEntropyCase,
    LinearCrossEntropyDeclaration,
    judged_as,
    linear_declaration,
    linear_reference,
)
from normprops.ops.spec import NamedArrays, NamedExact, OpSpec
from normprops.verdict import Verdict

__all__ = ["LINEAR_CROSS_ENTROPY", "FOREIGN_LINEAR_CROSS_ENTROPY", "LinearCrossEntropyCase",
           "LinearCrossEntropyDeclaration", "as_declared", "named", "FAMILIES"]

F32 = np.float32


def as_declared(case: LinearCrossEntropyCase, *,
                declaration: CrossEntropyDeclaration) -> LinearCrossEntropyCase:
    """``case`` computing what the kernel declared, recorded in its params for a fixture's replay."""
    params = dict(case.params)
    params.update(softcap=declaration.softcap, z_loss=declaration.z_loss, reduction=declaration.reduction)
    return judged_as(case, declaration).replace(params=params)


def _loss_exact(case: LinearCrossEntropyCase, declaration: CrossEntropyDeclaration,
                oracle: str) -> NamedExact:
    case = judged_as(case, declaration)
    ce, ref = linear_reference(case, declaration=linear_declaration(declaration), oracle=oracle)
    tol = loss_tolerance(ref, ce, declaration=declaration)
    judged = np.isfinite(ref.loss) & np.isfinite(tol)
    return NamedExact({"loss": ref.loss}, {"loss": np.where(judged, tol, np.nan)}, {"loss": judged}, ref)


def _check(case: Any, outs: dict[str, np.ndarray], exact: NamedExact, declaration: Any,
           label: str) -> list[Verdict]:
    """Nothing beyond accuracy: an ignored row's loss (and gradient) is judged against 0."""
    return []


def element(name: str, index: tuple[int, ...]) -> str:
    """How a person names an element: ``row 3`` of the loss, ``row 1 col 7`` of dh, ``class 7
    col 2`` of dw."""
    if not index:
        return "the reduced loss"
    words = ("class", "col") if name == "dw" else ("row", "col")
    return " ".join(f"{w} {int(i)}" for w, i in zip(words, index))


def build(gradient: bool) -> Any:
    """A case from a fixture's fields (ValueError naming what is missing or wrong)."""
    def built(family: str, dtype: str, fields: dict[str, Any],
              params: dict[str, Any]) -> LinearCrossEntropyCase:
        op = "linear_cross_entropy" + ("_backward" if gradient else "")
        scalars = loss_fields(op, fields, params, arrays=("h", "w"), gradient=gradient)
        target = scalars.pop("target")
        return LinearCrossEntropyCase(np.asarray(fields["h"], dtype=F32), np.asarray(fields["w"], dtype=F32),
                                      target, **scalars, dtype=dtype, family=family, params=params)
    return built


def describe(case: LinearCrossEntropyCase, verdict: Any = None) -> str:
    """A few lines a person reads: the shapes, the drawn parameters, the logits' range."""
    n, v, hidden = case.shape
    return loss_description(case, shape=f"N={n} V={v} H={hidden}", logits=case.logits(),
                            span=f"|h| up to {np.abs(case.h).max():.6g}, |w| up to "
                                 f"{np.abs(case.w).max():.6g}; logits h @ w^T")


def from_json(doc: Any, model: ErrorModel) -> LinearCrossEntropyDeclaration:
    return LinearCrossEntropyDeclaration.from_json(doc, model)


def declare(model: ErrorModel, *, dtype: str, **keywords: Any) -> LinearCrossEntropyDeclaration:
    """Cross-entropy's keywords; dw summed row after row unless the model says otherwise."""
    return LinearCrossEntropyDeclaration.declare(model, dtype=dtype, **keywords)


def _reference(case: LinearCrossEntropyCase, oracle: str = "float64") -> Any:
    return linear_reference(case, declaration=FOREIGN_LINEAR_CROSS_ENTROPY, oracle=oracle)[1]


KEYWORDS = ("softcap", "z_loss", "loss_reduction", "smoothing")


def named(gradient: bool, *, outputs: Any, exact: Any) -> NamedArrays:
    """The hooks both ops share; the gradient's outputs and exact values are its own."""
    return NamedArrays(
        cases=loss_cases(gradient=gradient, families=FAMILIES, as_declared=as_declared,
                         strategy="normprops.ops.linear_cross_entropy_families:linear_cross_entropy_cases"),
        outputs=outputs, exact=exact, check=_check, element=element,
        pieces=loss_pieces if not gradient else (lambda case: ()),  # dw sums the batch
        build=build(gradient), describe=describe, default_declaration=FOREIGN_LINEAR_CROSS_ENTROPY,
        declare=declare, from_json=from_json, keywords=KEYWORDS, float32_inputs=("dloss",))


LINEAR_CROSS_ENTROPY = OpSpec(
    "linear_cross_entropy", ("h", "w", "target", "ignore_index", "label_smoothing"), None,
    "F.cross_entropy(F.linear(h, w).float(), target, ignore_index=, label_smoothing=, reduction=) "
    "with the logits accumulated in float32 and never materialized: float32 (N,) (0 on ignored "
    "rows), or its sum or mean as declared; optionally softcapped logits and a z-loss",
    outputs=("loss",), returns="loss (float32)", families=FAMILIES, properties=CROSS_ENTROPY_PROPERTIES,
    reference=_reference,
    bound=lambda case, ref, declaration=FOREIGN_LINEAR_CROSS_ENTROPY: _loss_exact(
        case, declaration, ref.oracle).tol["loss"],
    named=named(False, outputs=loss_outputs, exact=_loss_exact),
    # The planted bug caught at the first example in each of 20 seeds (lce_softcap_dropped).
    gate_examples=30,
)

