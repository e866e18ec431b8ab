"""Masked softmax: ``softmax(scale * x)`` over the entries a boolean mask keeps (PyTorch's
scaled_dot_product_attention convention: True takes part), 0 elsewhere. Its reference is the softmax
of the exact logits (:func:`normprops.masking.logits`); its bound is the softmax's plus the rounding
of ``scale * x`` (docs/tolerances.md, "Masked softmax"); rows where some ``scale * x`` lies past
float32's range are outside its accuracy domain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mpmath
import numpy as np

from normprops.errormodel import ErrorModel
from normprops.masking import argument_rounding, logits, scaled_in_range
from normprops.ops.common import Reference, Tolerance
from normprops.ops.softmax import (
    SOFTMAX_PROPERTIES,
    check_softmax_output,
    mp_softmax,
    softmax_bound,
    softmax_needs_mpmath,
    softmax_of,
)
from normprops.ops.spec import EVERY_OP, OpSpec
from normprops.ops.transforms import SHIFT

if TYPE_CHECKING:
    from normprops.case import Case

__all__ = ["MASKED_SOFTMAX"]


def _masked_softmax64(case: Case) -> Reference:
    """The softmax of the exact logits (``scale * x`` with the mask applied). Rows where some
    ``scale * x`` lies past float32's range are outside the accuracy domain."""
    t = logits(case.x, case.mask, case.scale, case.mask_fill)
    ref = softmax_of(t, op=case.op)
    return Reference(**{**ref.__dict__, "in_domain": ref.in_domain & scaled_in_range(case.x, case.scale)})


def _mp_logits(case: Case, r: int) -> list[mpmath.mpf]:
    """Row ``r``'s logits exactly: ``scale * x`` (exact at 64 bits or more), the mask applied."""
    scale = mpmath.mpf(case.scale)
    out = []
    for v, kept in zip(case.x[r].tolist(), case.mask[r].tolist()):
        s = scale * mpmath.mpf(v)
        if kept:
            out.append(s)
        else:
            out.append(mpmath.mpf("-inf") if case.mask_fill is None else s + mpmath.mpf(case.mask_fill))
    return out


def _exact_row(case: Case, r: int) -> list[float] | None:
    """Row ``r`` exactly (inside mpmath.workprec); None for a row whose logits hold a NaN or +inf,
    or are all -inf (decided on the float64 logits, whose non-finite entries are the exact ones')."""
    row = logits(case.x[r:r + 1], case.mask[r:r + 1], case.scale, case.mask_fill)[0]
    if np.isnan(row).any() or np.isposinf(row).any() or np.isneginf(row).all():
        return None
    return mp_softmax(_mp_logits(case, r))


def _rounding(case: Case, model: ErrorModel) -> np.ndarray:
    return argument_rounding(case.x, case.mask, case.scale, case.mask_fill,
                             unit_roundoff=model.unit_roundoff, arithmetic=model.arithmetic)


def _bound(case: Case, ref: Reference, model: ErrorModel, row_reduction: str = "blocks") -> Tolerance:
    return softmax_bound(case, ref, model, rounding=_rounding)


MASKED_SOFTMAX = OpSpec(
    "masked_softmax", ("x", "mask", "scale"), None,
    "softmax(scale * x) over the entries where mask is True, 0 elsewhere, over the last axis",
    families=("ordinary", "overflow_logits", "wide_span", "large_mean", "huge", "tiny", "constant",
              "ragged", "masked", "nonfinite", "long_rows"),
    range_families=("overflow_logits", "huge"),
    range_hint="scale * x overflows float32 past FLT_MAX, so a masked softmax is range-safe only "
               "when it subtracts the row max before it scales (scale * (x - max x), the min for a "
               "negative scale)",
    properties=EVERY_OP | SOFTMAX_PROPERTIES, reference=_masked_softmax64, exact_row=_exact_row,
    needs_mpmath=softmax_needs_mpmath, bound=_bound, check_output=check_softmax_output,
    transforms=(SHIFT,))
