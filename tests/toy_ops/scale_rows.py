"""A toy op defined outside the package: ``scale_rows(x) = 2 * x``, row by row.

Everything normprops needs to hunt it is here, in one module, as for a built-in op: its signature
and output, its float64 and mpmath references, its bound, the families it is hunted on (drawn from
the existing ones), the properties that apply, and its range-safety domain.
``normprops.ops.register(SCALE_ROWS)`` makes it known to the hunt, the API and the reports.
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np

from normprops.ops import EVERY_OP, OpSpec
from normprops.ops.common import FLT_MAX, FLT_MIN, Reference, Tolerance, U

__all__ = ["SCALE_ROWS", "correct", "planted_tail", "planted_overflow"]


def _reference(case: Any) -> Reference:
    """2 x in float64 (exact: a float32 doubled fits float64). A row with a NaN or an infinity is
    non-finite: its outputs may be NaN or the IEEE limit 2 x. A row past FLT_MAX / 2 is outside
    the accuracy domain: 2 x overflows float32 there."""
    x = case.x.astype(np.float64)
    rows = case.rows
    with np.errstate(all="ignore"):
        nonfinite = ~np.isfinite(x).all(axis=1)
        z = np.where(nonfinite[:, None], np.nan, 2 * x)
        row_max = np.max(np.abs(np.where(nonfinite[:, None], 0.0, x)), axis=1, keepdims=True)
        in_domain = ~nonfinite & (row_max[:, 0] <= FLT_MAX / 2)
    ones = np.ones((rows, 1))
    return Reference(case.op, z, 2 * x, nonfinite, np.zeros(rows, bool), in_domain, 2 * x, ones,
                     ones, row_max)


def _exact_row(case: Any, r: int) -> list[float] | None:
    row = case.x[r]
    if not np.isfinite(row).all():
        return None
    return [float(2 * mpmath.mpf(float(v))) for v in row]


def _bound(case: Any, ref: Reference, model: Any, row_reduction: str = "blocks") -> Tolerance:
    """Doubling is exact in binary floating point: one rounding of room, and FLT_MIN below."""
    with np.errstate(all="ignore"):
        tol = U * np.abs(ref.z) + FLT_MIN
    return Tolerance(tol, np.zeros(case.rows, bool))


SCALE_ROWS = OpSpec(
    "scale_rows", ("x",), None, "2 * x, elementwise, row by row",
    families=("ordinary", "ragged", "huge", "nonfinite"), range_families=("huge",),
    range_hint="2 * x overflows float32 past FLT_MAX / 2: no kernel can help it",
    properties=EVERY_OP, reference=_reference, exact_row=_exact_row, bound=_bound)


# --- kernels -------------------------------------------------------------------------------------


def correct(x: np.ndarray) -> np.ndarray:
    return (2 * x).astype(np.float32)


def planted_tail(x: np.ndarray) -> np.ndarray:
    """Doubles whole vectors of 4 and forgets the ragged tail of a row (cols % 4 columns)."""
    out = x.copy()
    whole = x.shape[1] - x.shape[1] % 4
    out[:, :whole] = 2 * x[:, :whole]
    return out


def planted_overflow(x: np.ndarray) -> np.ndarray:
    """Computes 4 x / 2: overflows float32 for |x| past FLT_MAX / 4, where 2 x is still finite."""
    with np.errstate(over="ignore"):
        return (np.float32(4) * x / np.float32(2)).astype(np.float32)
