"""RMS norm over the last axis, ``x / sqrt(mean(x^2) + eps) * gamma``, and its gradient
``rmsnorm_backward`` beside it: references, bounds (docs/tolerances.md), families, properties,
all-zero rows and scale invariance.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import mpmath
import numpy as np

from normprops.errormodel import ErrorModel
from normprops.ops.common import FLT_MAX, FLT_MIN, Reference, Tolerance
from normprops.ops.layernorm import NORM_BACKWARD_FAMILIES, NORM_FAMILIES, NORM_RANGE_HINT
from normprops.ops.norm_gradients import (
    norm_gradients64,
    norm_gradients_bound,
    norm_gradients_exact,
    xhat64,
)
from normprops.ops.spec import EVERY_OP, FLOAT32_EPS, OpSpec
from normprops.ops.transforms import SCALE

if TYPE_CHECKING:
    from normprops.case import Case

__all__ = ["RMSNORM", "RMSNORM_BACKWARD"]


def _rmsnorm64(case: Case) -> Reference:
    x = case.x.astype(np.float64)
    g = case.gamma.astype(np.float64)[None, :]
    eps = float(case.eps)
    rows, cols = x.shape
    with np.errstate(all="ignore"):
        nonfinite = ~np.isfinite(x).all(axis=1)
        # IEEE limit of a row with +-inf and no NaN: ms = inf, finite x -> 0, infinite x -> NaN.
        limit = (np.where(nonfinite[:, None], x / np.sqrt(np.mean(x * x, axis=1, keepdims=True)) * g,
                          np.nan) if nonfinite.any() else np.full(x.shape, np.nan))
        xr = np.where(nonfinite[:, None], 0.0, x)
        ms = np.sum(xr * xr, axis=1, keepdims=True) / cols  # squares of float32 fit in float64
        y = xr / np.sqrt(ms + eps)
        z = np.where(nonfinite[:, None], np.nan, g * y)
        in_domain = ~nonfinite & (np.max(np.abs(xr), axis=1) <= math.sqrt(FLT_MAX / cols))
    return Reference(case.op, z, limit, nonfinite, np.zeros(rows, bool), in_domain, y,
                     np.ones((rows, 1)), ms, np.max(np.abs(xr), axis=1, keepdims=True))


def _exact_row(case: Case, r: int) -> list[float] | None:
    """Row ``r`` exactly (inside mpmath.workprec); None for a row with a NaN or an infinity."""
    row = case.x[r]
    if not np.isfinite(row).all():
        return None
    xs = [mpmath.mpf(float(v)) for v in row]
    ms = mpmath.fsum(v * v for v in xs) / len(xs)
    r_ = mpmath.sqrt(ms + mpmath.mpf(float(case.eps)))
    return [float(v / r_ * mpmath.mpf(float(g))) for v, g in zip(xs, case.gamma)]


def _bound(case: Case, ref: Reference, model: ErrorModel, row_reduction: str = "blocks") -> Tolerance:
    k = model.k(case.cols)
    u = model.unit_roundoff
    g = np.abs(case.gamma.astype(np.float64))[None, :]
    ay = np.abs(ref.y)
    with np.errstate(all="ignore"):
        # Squares below FLT_MIN may be flushed: up to FLT_MIN lost per term, FLT_MIN in the mean.
        ftz = 0.0
        if model.ftz:
            # A flushing machine (docs/tolerances.md, "Flush to zero") loses up to FLT_MIN on each
            # subnormal x: FLT_MIN / r on its own output and FLT_MIN |y| / r through the mean
            # square; on a row prescaled by 2^-e (2^e <= 2 max|x|) a flushed scaled element is
            # worth 2^e FLT_MIN, i.e. at most 2 sqrt(C) FLT_MIN after division by r >= max|x| / sqrt(C).
            r = np.sqrt(ref.stat + case.eps)
            ftz = g * FLT_MIN * ((1 + ay) / r + 2 * math.sqrt(case.cols))
        tol = ((k / 2 + 8) * u * np.abs(ref.z) + g * ay * FLT_MIN / (ref.stat + case.eps)
               + 4 * FLT_MIN * (1 + g) * (1 + ay) + ftz)
    return Tolerance(tol, np.zeros(case.rows, bool))


def _exact_constant(case: Case) -> tuple[np.ndarray, np.ndarray, str]:
    """Every all-zero row gives exactly 0. A constant nonzero row has no exact answer
    (``sign(c) gamma |c| / sqrt(c^2 + eps)`` is rounded)."""
    x = case.x
    return (x == 0).all(axis=1), np.zeros_like(x), "an all-zero row must give exactly 0"


def _gradient_inputs(forward: Case) -> tuple[np.ndarray, np.ndarray]:
    return forward.x, xhat64(forward.x, forward.eps, centred=False)


RMSNORM = OpSpec(
    "rmsnorm", ("x", "gamma", "eps"), FLOAT32_EPS, "x / sqrt(mean(x^2) + eps) * gamma",
    families=NORM_FAMILIES, range_families=("huge",), range_hint=NORM_RANGE_HINT,
    properties=EVERY_OP | {"exact_constant", "scale_invariance"}, reference=_rmsnorm64,
    exact_row=_exact_row, bound=_bound, exact_constant=_exact_constant, transforms=(SCALE,))

RMSNORM_BACKWARD = OpSpec(
    "rmsnorm_backward", ("dy", "x", "gamma", "eps"), FLOAT32_EPS,
    "dx = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma, xhat = x * rstd; "
    "dgamma = sum over rows of dy * xhat",
    forward="rmsnorm", outputs=("dx", "dgamma"), families=NORM_BACKWARD_FAMILIES,
    range_families=("huge",), properties=EVERY_OP | {"row_order"},
    reference=functools.partial(norm_gradients64, centred=False),
    exact_outputs=functools.partial(norm_gradients_exact, centred=False),
    bound=functools.partial(norm_gradients_bound, centred=False),
    gradient_inputs=_gradient_inputs)
