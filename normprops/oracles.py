"""References, condition numbers and tolerances: the generic part, which asks the op.

Each op's module (:mod:`normprops.ops`) holds its own float64 reference (two-pass, every signed row
sum either exact, ``math.fsum``, or pairwise where float64's pairwise sum is provably accurate to far
better than float32 needs: :func:`row_sum`), its mpmath row reference and its bound under the
default policy (docs/tolerances.md). Here: the dispatch, the mpmath cross-check that takes over for
any row where float64's own error bound is not negligible against the tolerance, the flat table
gate ``atol + rtol*|ref|`` (the selectable ``"table"`` policy), the range-safety domain a kernel's
declared arithmetic has, and the rounding a narrow storage type adds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Union

import mpmath
import numpy as np

from normprops.case import Case
from normprops.dtypes import get_dtype
from normprops.errormodel import ErrorModel
from normprops.ops import get_op
from normprops.ops.common import (
    FLT_MAX,
    FLT_MIN,
    ORACLES,
    POLICIES,
    TABLE_ATOL,
    TABLE_RTOL,
    U64,
    GradReference,
    GradTolerance,
    Reference,
    Tolerance,
    U,
    row_depth,
    row_sum,
    table_rtol,
)

__all__ = [
    "U",
    "U64",
    "FLT_MIN",
    "FLT_MAX",
    "POLICIES",
    "ORACLES",
    "TABLE_ATOL",
    "TABLE_RTOL",
    "Reference",
    "Tolerance",
    "GradReference",
    "GradTolerance",
    "reference",
    "tolerance",
    "declared_out_of_domain",
    "row_sum",
    "row_depth",
    "mp_reference",
    "grad_reference",
    "grad_tolerance",
    "exact_element",
]

AnyReference = Union[Reference, GradReference]
AnyTolerance = Union[Tolerance, GradTolerance]


# --- forward ops: mpmath -------------------------------------------------------------------------


def mp_reference(case: Case, *, rows: np.ndarray | None = None, prec: int = 200) -> np.ndarray:
    """The exact result of ``case`` at ``prec`` bits, rounded to float64 (NaN for rows with NaN or
    infinities, except softmax rows that are only partly masked with -inf)."""
    if prec < 64:
        raise ValueError(f"prec must be at least 64 bits (float64 has 53) but was {prec}")
    op = get_op(case.op)
    selected = range(case.rows) if rows is None else np.nonzero(rows)[0]
    out = np.full(case.x.shape, np.nan)
    with mpmath.workprec(prec):
        for r in selected:
            values = op.exact_row(case, int(r))
            if values is not None:
                out[r] = values
    return out


def reference(case: Case, *, oracle: str = "float64") -> AnyReference:
    """The exact result of ``case``: float64 (escalating rows to mpmath if needed) or all mpmath. A
    gradient op's is a :class:`GradReference` (:func:`grad_reference`)."""
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES} but was {oracle!r}")
    op = get_op(case.op)
    if op.forward is not None:
        return grad_reference(case, oracle=oracle)
    ref = op.reference(case)
    if oracle == "mpmath":
        redo = ref.judged_rows
    elif op.needs_mpmath is not None:
        redo = op.needs_mpmath(case, ref)
    else:
        redo = np.zeros(case.rows, dtype=bool)
    if redo.any():
        exact = mp_reference(case, rows=redo)
        z = np.where(redo[:, None], exact, ref.z)
        return Reference(**{**ref.__dict__, "z": z, "oracle": "mpmath" if oracle == "mpmath"
                            else "float64+mpmath"})
    return ref


# --- forward ops: tolerances ---------------------------------------------------------------------


def _table_policy(case: Case, ref: Reference) -> Tolerance:
    """The flat table gate: atol + max(1e-5, 4 * 2^-23 * sqrt(C)) * |ref|, condition-blind; a row
    sum bound for the ops judged on theirs."""
    rtol = table_rtol(case.cols)
    with np.errstate(all="ignore"):
        tol = TABLE_ATOL + rtol * np.abs(ref.z)
    sums = "sum_to_one" in get_op(case.op).properties
    sum_tol = TABLE_ATOL * case.cols + rtol if sums else None
    return Tolerance(tol, np.zeros(case.rows, bool), sum_tol)


def declared_out_of_domain(case: Case, ref: Reference, model: ErrorModel) -> np.ndarray:
    """Per row: outside the accuracy domain of the arithmetic ``model`` declares, where some
    intermediate must leave float32's range (docs/tolerances.md, "Range safety"): the op's own
    domain (``Reference.in_domain``, False for a non-finite row too), and what the op adds for the
    declared arithmetic (``OpSpec.out_of_domain``: a one-pass layer norm's x*x past
    sqrt(FLT_MAX / cols))."""
    out = ~ref.in_domain
    extra = get_op(case.op).out_of_domain
    if extra is not None:
        out = out | extra(case, ref, model)
    return out


def tolerance(case: Case, ref: AnyReference, *, model: ErrorModel, policy: str = "default",
              row_reduction: str = "blocks") -> AnyTolerance:
    """The bound of ``case`` under ``model`` and ``policy``, with the output's rounding to a narrow
    storage type added. A gradient op's is a :class:`GradTolerance` (:func:`grad_tolerance`;
    ``row_reduction``: how dgamma and dbeta combine rows)."""
    if isinstance(ref, GradReference):
        return grad_tolerance(case, ref, model=model, policy=policy, row_reduction=row_reduction)
    if policy == "default":
        tol = get_op(case.op).bound(case, ref, model)
    elif policy == "table":
        tol = _table_policy(case, ref)
    else:
        raise ValueError(f"policy must be one of {POLICIES} but was {policy!r}")
    tol = replace(tol, ranged=declared_out_of_domain(case, ref, model))
    if case.dtype == "float32":
        return tol
    # A narrow storage type rounds every output once more (docs/tolerances.md): u_d |z| per element plus
    # the type's smallest subnormal; a softmax row sum gains at most u_d, as the outputs sum to 1.
    kind = get_dtype(case.dtype)
    with np.errstate(all="ignore"):
        extra = kind.u * np.abs(np.nan_to_num(ref.z, nan=0.0, posinf=0.0, neginf=0.0)) + kind.tiny
    sum_tol = None if tol.sum_tol is None else tol.sum_tol + kind.u + case.cols * kind.tiny
    return Tolerance(tol.tol + extra, tol.finite_only, sum_tol, tol.ratio_tol, tol.ranged)


# --- gradient ops --------------------------------------------------------------------------------


def grad_reference(case: Case, *, oracle: str = "float64", prec: int = 200) -> GradReference:
    """The exact gradients of ``case``: float64, or every row at ``prec`` bits with ``oracle``
    "mpmath". float64 suffices for the float32 bounds: its own error, relative to the magnitudes the
    bounds scale with, is below 2^-26 of them (docs/tolerances.md, "Gradients")."""
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES} but was {oracle!r}")
    spec = get_op(case.op)
    if spec.forward is None or case.dy is None:
        raise ValueError(f"case is for op {case.op!r}, not a gradient op with its dy")
    ref = spec.reference(case)
    if oracle == "mpmath":
        z = spec.exact_outputs(case, ~ref.poisoned, ref, prec)
        return replace(ref, z=z, oracle="mpmath")
    return ref


def exact_element(case: Case, *, output: str, row: int | None, col: int, prec: int = 200) -> float:
    """One output element of ``case`` at ``prec`` bits (``row`` None for a column sum): the value a
    verdict names as the exact result. float64 is enough to judge by, not always to quote: where dx
    cancels below float64's resolution (one column of x ~ 1e6, eps 1e-7: 1 - xhat^2 is 1e-19) its
    value may be off by orders of magnitude, all of them far inside the bound."""
    spec = get_op(case.op)
    ref = spec.reference(case)
    rows = np.zeros(case.rows, bool)
    if row is not None:
        rows[row] = True
    with np.errstate(all="ignore"):
        z = spec.exact_outputs(case, rows, ref, prec, columns=row is None)[output]
    return float(z[0 if row is None else row, col])


def _grad_table(case: Case, ref: GradReference) -> GradTolerance:
    rtol = table_rtol(case.cols)
    with np.errstate(all="ignore"):
        tol = {name: TABLE_ATOL + rtol * np.abs(z) for name, z in ref.z.items()}
    return GradTolerance(tol, np.zeros(case.rows, bool))


def grad_tolerance(case: Case, ref: GradReference, *, model: ErrorModel, policy: str = "default",
                   row_reduction: str = "blocks") -> GradTolerance:
    """The bound of each output of ``case`` under ``model`` (``row_reduction``: how dgamma and
    dbeta combine rows), with the output's rounding to a narrow storage type added."""
    if policy == "table":
        tol = _grad_table(case, ref)
    elif policy != "default":
        raise ValueError(f"policy must be 'default' or 'table' but was {policy!r}")
    else:
        tol = get_op(case.op).bound(case, ref, model, row_reduction)
    if case.dtype == "float32":
        return tol
    kind = get_dtype(case.dtype)
    with np.errstate(all="ignore"):
        wider = {name: t + kind.u * np.abs(np.nan_to_num(ref.z[name], nan=0.0, posinf=0.0,
                                                         neginf=0.0)) + kind.tiny
                 for name, t in tol.tol.items()}
    return GradTolerance(wider, tol.finite_only)
