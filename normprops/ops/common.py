"""What every op module shares: the constants of float32, the exact row sum, and the value types a
reference and a bound are (per named output).

Nothing here asks which op it serves; each op module (:mod:`normprops.ops.softmax`, ...) builds its
own :class:`Reference` and :class:`Tolerance` (forward ops) or :class:`GradReference` and
:class:`GradTolerance` (gradient ops) from these pieces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from normprops.errormodel import ROW_REDUCTIONS, ErrorModel

if TYPE_CHECKING:
    pass

__all__ = [
    "U", "U64", "FLT_MIN", "FLT_MAX", "POLICIES", "ORACLES", "TABLE_RTOL", "TABLE_ATOL",
    "ROW_REDUCTIONS", "row_sum", "col_sum", "tiny", "row_depth", "Reference", "Tolerance",
    "GradReference", "GradTolerance", "table_rtol",
]

U = 2.0**-24  # unit roundoff of float32
FLT_MIN = 2.0**-126  # smallest normal float32
FLT_MAX = float(np.finfo(np.float32).max)
U64 = 2.0**-53

POLICIES = ("default", "table")
ORACLES = ("float64", "mpmath")
TABLE_RTOL = 1e-5
TABLE_ATOL = 1e-6  # a table gate names an atol without a value; this is ours



def row_sum(a: np.ndarray) -> np.ndarray:
    """Sum over the last axis, exact to float64 rounding for every row that needs it.

    numpy's pairwise float64 sum is within ``(log2 C + 1) * 2^-53 * sum|a|`` of the exact sum; a row
    whose bound is not below ``2^-40 * |sum|`` (cancellation) is summed exactly with ``math.fsum``.
    """
    with np.errstate(all="ignore"):
        s = a.sum(axis=-1)
        n = a.shape[-1]
        bound = (math.ceil(math.log2(max(n, 2))) + 1) * U64 * np.abs(a).sum(axis=-1)
        redo = np.isfinite(s) & (bound > 2.0**-40 * np.abs(s))
    for index in zip(*np.nonzero(redo)):
        s[index] = math.fsum(a[index].tolist())
    return s


def col_sum(a: np.ndarray) -> np.ndarray:
    """Sum over the rows, exact to float64 rounding where it cancels, as one row."""
    return row_sum(np.ascontiguousarray(a.T))[None, :]


def tiny(model: ErrorModel) -> float:
    """What one rounding below FLT_MIN may lose, counted whole: the arithmetic's smallest subnormal
    (2^-149 in float32, 2^-133 in bfloat16 arithmetic), or FLT_MIN on a flushing machine."""
    return FLT_MIN if model.ftz else model.smallest_subnormal


def row_depth(model: ErrorModel, rows: int, row_reduction: str) -> int:
    """The longest chain of additions a row's term passes through on its way into dgamma or dbeta:
    ``blocks``, per-block partials over ``model.threads`` blocks then a tree
    (``ceil(R / T) - 1 + log2 T``); ``sequential``, ``R - 1``; ``tree``, as a pairwise row sum."""
    if row_reduction not in ROW_REDUCTIONS:
        raise ValueError(f"row_reduction must be one of {ROW_REDUCTIONS} but was {row_reduction!r}")
    if row_reduction == "sequential":
        return max(1, rows - 1)
    if row_reduction == "tree":
        return replace(model, reduction="tree").k(rows)
    return ErrorModel(threads=model.threads).k(rows)


def table_rtol(cols: int) -> float:
    """The flat table gate's relative part: max(1e-5, 4 * 2^-23 * sqrt(C)), condition-blind."""
    return max(TABLE_RTOL, 4.0 * 2.0**-23 * math.sqrt(cols))


@dataclass(frozen=True)
class Reference:
    """The exact result of one case of a forward op (one output, ``y``) and what the judge needs to
    know about each row.

    ``z`` is the exact output (NaN where it is undefined). ``nonfinite_rows`` hold a NaN or an
    infinity (for softmax: a NaN or +inf) in the input: their outputs may be NaN, or must equal
    ``limit`` where ``limit`` is not NaN. ``masked_rows`` (softmax) are entirely -inf: an all-NaN or
    an all-zero output row is accepted. ``in_domain`` rows are the finite rows inside the accuracy
    domain of docs/tolerances.md (no intermediate of a float32 algorithm need overflow); the others are
    judged by the range-safety property.
    """

    op: str
    z: np.ndarray
    limit: np.ndarray
    nonfinite_rows: np.ndarray
    masked_rows: np.ndarray
    in_domain: np.ndarray
    y: np.ndarray  # softmax: g; norms: the normalized row before gamma/beta
    kappa: np.ndarray  # layer norm's conditioning per row (ones for the others)
    stat: np.ndarray  # softmax: W = sum g|x - m|; rmsnorm: ms; layernorm: var
    row_max: np.ndarray  # softmax: m; norms: max |x|
    oracle: str = "float64"
    # Softmax: the exact logits its rows are the softmax of, in float64 (masked softmax:
    # ``scale * x`` with the mask applied; docs/tolerances.md, "Masked softmax").
    logits: np.ndarray | None = None

    @property
    def judged_rows(self) -> np.ndarray:
        return ~self.nonfinite_rows & ~self.masked_rows


@dataclass(frozen=True)
class Tolerance:
    """Per-element tolerance, rows where only finiteness can be asked, and softmax's sum bound.

    ``ratio_tol`` (softmax, default policy) is the relative bound of the ``ratios`` property: one
    scale per row must bring every judged ``y_j`` within ``ratio_tol[j]`` of the exact ``g_j``; NaN
    marks elements it does not judge (docs/tolerances.md, "Softmax ratios").
    """

    tol: np.ndarray
    finite_only: np.ndarray  # bool per row
    sum_tol: float | None = None
    ratio_tol: np.ndarray | None = None
    # Per row: outside the accuracy domain of the arithmetic the kernel declares (judged by range
    # safety): the op's own (``Reference.in_domain``) and, for a one-pass layer norm, x*x.
    ranged: np.ndarray | None = None


@dataclass(frozen=True)
class GradReference:
    """The exact gradients of one case and what the bounds need.

    ``z`` maps each output name to its exact value, float64: ``dx`` of x's shape, ``dgamma`` and
    ``dbeta`` as one row of ``cols``. ``poisoned`` rows hold a NaN or an infinity in x (softmax:
    in y): their dx must be non-finite, and dgamma is not judged while there is one (dbeta is: dy is
    finite). ``in_domain`` rows are finite rows whose intermediates need not overflow; the others
    are judged by ``range_safety``."""

    op: str
    z: dict[str, np.ndarray]
    poisoned: np.ndarray
    in_domain: np.ndarray
    xhat: np.ndarray  # norms: the exact normalized rows; softmax: y
    rstd: np.ndarray  # (rows, 1): norms 1/sqrt(stat + eps); softmax ones
    kappa: np.ndarray  # (rows, 1): layer norm's conditioning, ones for the others
    stat: np.ndarray  # (rows, 1): mean square (RMS norm) or variance (layer norm); softmax zeros
    oracle: str = "float64"


@dataclass(frozen=True)
class GradTolerance:
    """Per output, the bound per element (NaN: not judged); ``finite_only`` rows of dx, where only a
    finite result can be asked (layer norm past ``e1 = 0.25``)."""

    tol: dict[str, np.ndarray]
    finite_only: np.ndarray


