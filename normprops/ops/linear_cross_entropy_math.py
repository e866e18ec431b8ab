"""The fused loss's case, declaration, exact reference and the logits' error bound
(docs/tolerances.md, "Cross-entropy", "Fused with the classifier"):
:mod:`normprops.ops.linear_cross_entropy` registers the ops, :mod:`normprops.ops.
linear_cross_entropy_backward` the gradient, :mod:`normprops.ops.linear_cross_entropy_families`
draws their cases.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import mpmath
import numpy as np

from normprops.dtypes import check_representable, get_dtype, numpy_dtype
from normprops.errormodel import ErrorModel
from normprops.ops.common import tiny
from normprops.ops.cross_entropy_math import (
    CrossEntropyCase,
    CrossEntropyDeclaration,
    CrossEntropyReference,
    LossScalars,
    cross_entropy_reference,
)

__all__ = ["FAMILIES", "FOREIGN_LINEAR_CROSS_ENTROPY", "LinearCrossEntropyCase",
           "LinearCrossEntropyDeclaration", "judged_as", "linear_declaration", "linear_reference",
           "logits_error"]

F32 = np.float32

#: The families in report order: cross-entropy's, each built through h and w
#: (:mod:`normprops.ops.linear_cross_entropy_families`).
FAMILIES = ("ordinary", "offset", "large_logits", "target_extremes", "dominant", "ignored", "softcap",
            "vocab", "ragged")

@dataclass(frozen=True, repr=False)
class LinearCrossEntropyCase(LossScalars):
    """One call: ``h`` (N, H) and ``w`` (V, H), float32 holding values exact in ``dtype``; int64
    ``target``; and the loss's scalars (:class:`~normprops.ops.cross_entropy_math.LossScalars`)."""

    h: np.ndarray
    w: np.ndarray
    target: np.ndarray

    def __post_init__(self) -> None:
        h, w = self.h, self.w
        get_dtype(self.dtype)
        if h.ndim != 2 or w.ndim != 2 or min(*h.shape, *w.shape) < 1 or h.shape[1] != w.shape[1]:
            raise ValueError(f"h must be (N, H) and w (V, H) with N, V, H >= 1 but had shapes {h.shape} "
                             f"and {w.shape}")
        # The rest (target, smoothing, reduction, dloss) is checked as cross-entropy checks it.
        self.as_cross_entropy(np.zeros((h.shape[0], w.shape[0])))
        check_representable(h, self.dtype, name="h")
        check_representable(w, self.dtype, name="w")

    @property
    def op(self) -> str:
        return "linear_cross_entropy" if self.dloss is None else "linear_cross_entropy_backward"

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.h.shape[0], self.w.shape[0], self.h.shape[1])

    def logits(self) -> np.ndarray:
        """``h @ w^T`` in float64: each product of two float32 values is exact there, and the H-term
        sums round to within ``H 2^-53 sum_k |h_k w_jk|``, 2^-29 of the float32 bound's matmul term."""
        return self.h.astype(np.float64) @ self.w.astype(np.float64).T

    def exact_logits(self, r: int) -> list[Any]:
        """Row ``r``'s logits at the working precision: sums of exact products (mpmath.fsum)."""
        hr = [mpmath.mpf(float(a)) for a in self.h[r]]
        return [mpmath.fsum(a * mpmath.mpf(float(b)) for a, b in zip(hr, row)) for row in self.w]

    def as_cross_entropy(self, logits: np.ndarray | None = None) -> CrossEntropyCase:
        """The cross-entropy case of these logits (``logits``, default the float64 product, rounded
        to float32 there; the references replace them by the float64 ones) in float32 storage:
        the target, the scalars, the reduction and dloss as they are."""
        x = self.logits() if logits is None else logits
        with np.errstate(over="ignore"):
            rounded = np.clip(x, -np.finfo(F32).max, np.finfo(F32).max).astype(F32)
        return CrossEntropyCase(rounded, self.target, ignore_index=self.ignore_index,
                                label_smoothing=self.label_smoothing, softcap=self.softcap,
                                z_loss=self.z_loss, reduction=self.reduction, dloss=self.dloss,
                                dtype="float32", family=self.family, params=self.params)

    def args(self) -> tuple[Any, ...]:
        head = () if self.dloss is None else (self.dloss,)
        return (*head, self.h, self.w, self.target, self.ignore_index, self.label_smoothing)

    def fields(self) -> dict[str, Any]:
        found: dict[str, Any] = {"h": self.h, "w": self.w, "target": self.target.astype(F32),
                                 "ignore_index": int(self.ignore_index),
                                 "label_smoothing": float(self.label_smoothing)}
        if self.dloss is not None:
            found["dloss"] = self.dloss
        return found

    def float_arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays of the storage type (dloss is float32 whatever it is)."""
        return (self.h, self.w)

    def replace(self, **changes: Any) -> LinearCrossEntropyCase:
        return replace(self, **changes)

    def rows(self, index: np.ndarray) -> LinearCrossEntropyCase:
        """The case made of the rows ``index`` of h: the same per-row losses there."""
        dloss = self.dloss if self.dloss is None or self.reduction != "none" else self.dloss[index]
        return replace(self, h=np.ascontiguousarray(self.h[index]),
                       target=np.ascontiguousarray(self.target[index]), dloss=dloss)

    def inputs(self) -> tuple[Any, ...]:
        """The kernel's arguments with h and w in the storage type's numpy dtype."""
        kind = numpy_dtype(self.dtype)
        head = () if self.dloss is None else (self.dloss.copy(),)
        return (*head, self.h.astype(kind), self.w.astype(kind), self.target.copy(), self.ignore_index,
                self.label_smoothing)

    def __repr__(self) -> str:
        n, v, hidden = self.shape
        extra = "".join(f", {k}={val!r}" for k, val in (("softcap", self.softcap), ("z_loss", self.z_loss))
                        if val)
        shown = ", ".join(f"{key}={value!r}" for key, value in self.params.items())
        return (f"LinearCrossEntropyCase({self.family}: N={n}, V={v}, H={hidden}, {self.dtype}, "
                f"ignore_index={self.ignore_index}, label_smoothing={self.label_smoothing!r}, "
                f"reduction={self.reduction}{extra}{', ' if shown else ''}{shown})")


@dataclass(frozen=True)
class LinearCrossEntropyDeclaration(CrossEntropyDeclaration):
    """Cross-entropy's declaration, and ``logits_rounded``: the kernel rounds its logits (and
    their gradient) to the storage type before the loss, as ``F.linear`` on bfloat16 operands
    does and Liger's chunks do (half an ulp of the storage type on each logit). ``model``'s
    ``row_reduction`` is how the gradient sums dw over the rows."""

    logits_rounded: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "logits_rounded": self.logits_rounded, "row_reduction":
                self.model.row_reduction}

    @classmethod
    def from_json(cls, doc: Any, model: ErrorModel) -> LinearCrossEntropyDeclaration:
        base = CrossEntropyDeclaration.from_json(doc, model)
        doc = doc if isinstance(doc, dict) else {}
        rows = doc.get("row_reduction")
        found = base.model if rows is None else replace(base.model, row_reduction=rows)
        return cls(found, softcap=base.softcap, z_loss=base.z_loss, reduction=base.reduction,
                   smoothing=base.smoothing, logits_rounded=bool(doc.get("logits_rounded", False)))


#: A kernel we did not write: cross-entropy's foreign model (every sum as deep as a plain loop),
#: dw summed row after row, logits kept in float32.
FOREIGN_LINEAR_CROSS_ENTROPY = LinearCrossEntropyDeclaration(
    ErrorModel(threads=1, rho=6.0, c_x=3.5, row_reduction="sequential"))


def logits_error(case: LinearCrossEntropyCase, x: np.ndarray, *,
                 declaration: LinearCrossEntropyDeclaration, a: np.ndarray | None = None) -> np.ndarray:
    """The bound on a kernel's error in each logit, (N, V) (docs/tolerances.md, "Fused with the
    classifier")::

        mu_j = H u sum_k |h_k w_jk| + H tiny_a            (H products, H - 1 additions, any order)
        rounded to the storage type: + u_s (|x_j| + mu_j) + tiny_s

    ``tiny_a`` is what a product below FLT_MIN loses (the arithmetic's least subnormal, FLT_MIN
    where the kernel flushes). ``a``: ``|h| @ |w|^T`` where already formed."""
    model = declaration.model
    u = model.unit_roundoff
    hidden = case.h.shape[1]
    if a is None:
        a = np.abs(case.h.astype(np.float64)) @ np.abs(case.w.astype(np.float64)).T
    mu = hidden * u * a + hidden * tiny(model)
    if declaration.logits_rounded and case.dtype != "float32":
        kind = get_dtype(case.dtype)
        mu = mu + kind.u * (np.abs(x) + mu) + kind.tiny
    return mu


def linear_reference(case: LinearCrossEntropyCase, *, declaration: LinearCrossEntropyDeclaration,
                     oracle: str = "float64") -> tuple[CrossEntropyCase, CrossEntropyReference]:
    """Cross-entropy's reference on the case's float64 logits, carrying their error bound, and the
    cross-entropy case it is of (storage type ``case.dtype``: a gradient's dlogits may be rounded
    to it before the matmuls)."""
    h, w = case.h.astype(np.float64), case.w.astype(np.float64)
    x = h @ w.T
    a = np.abs(h) @ np.abs(w).T
    ce = case.as_cross_entropy(x)
    ref = cross_entropy_reference(ce, oracle=oracle, logits=x,
                                  logit_err=logits_error(case, x, declaration=declaration, a=a),
                                  exact_logits=case.exact_logits)
    return ce, ref


def linear_declaration(declaration: Any) -> LinearCrossEntropyDeclaration:
    if isinstance(declaration, LinearCrossEntropyDeclaration):
        return declaration
    return LinearCrossEntropyDeclaration(declaration.model, softcap=declaration.softcap,
                                         z_loss=declaration.z_loss, reduction=declaration.reduction,
                                         smoothing=declaration.smoothing)


def judged_as(case: LinearCrossEntropyCase, declaration: CrossEntropyDeclaration) -> LinearCrossEntropyCase:
    """The case as the kernel declared to compute it (its softcap, z-loss and, for a loss, its
    reduction; a gradient keeps the case's reduction, which its dloss's shape is)."""
    reduction = declaration.reduction if case.dloss is None else case.reduction
    if (case.softcap, case.z_loss, case.reduction) == (declaration.softcap, declaration.z_loss, reduction):
        return case
    return case.replace(softcap=declaration.softcap, z_loss=declaration.z_loss, reduction=reduction)
