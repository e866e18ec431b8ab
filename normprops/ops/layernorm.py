"""Layer norm over the last axis, ``(x - mean) / sqrt(var + eps) * gamma + beta`` (population
variance), and its gradient ``layernorm_backward`` beside it: references, bounds (condition-aware:
the error grows with ``kappa = mean|x| / sqrt(var + eps)``; docs/tolerances.md), families,
properties, exactly constant rows, shift and scale invariance, and the range-safety domain of a
one-pass variance.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import mpmath
import numpy as np

from normprops.errormodel import ErrorModel
from normprops.ops.common import FLT_MAX, FLT_MIN, U64, Reference, Tolerance, U, row_sum
from normprops.ops.norm_gradients import (
    norm_gradients64,
    norm_gradients_bound,
    norm_gradients_exact,
    xhat64,
)
from normprops.ops.spec import EVERY_OP, OpSpec
from normprops.ops.transforms import SCALE, SHIFT

if TYPE_CHECKING:
    from normprops.case import Case

__all__ = ["LAYERNORM", "LAYERNORM_BACKWARD", "NORM_FAMILIES", "NORM_BACKWARD_FAMILIES",
           "NORM_RANGE_HINT"]

NORM_FAMILIES = ("ordinary", "wide_span", "large_mean", "huge", "tiny", "eps_scale", "constant",
                 "ragged", "nonfinite", "long_rows")
NORM_BACKWARD_FAMILIES = ("ordinary", "large_mean", "wide_span", "constant", "tiny", "eps_scale",
                          "huge", "ragged", "nonfinite", "cancelling_dy", "orthogonal_dy",
                          "one_hot_dy", "dy_scale", "tall")
NORM_RANGE_HINT = ("squares overflow float32 past |x| of about 1.8e19 / sqrt(cols), so a norm is "
                   "range-safe only when it scales each row (by a power of two, say) before squaring")


def _layernorm64(case: Case) -> Reference:
    x = case.x.astype(np.float64)
    g = case.gamma.astype(np.float64)[None, :]
    b = case.beta.astype(np.float64)[None, :]
    eps = float(case.eps)  # NEP 50: a float32 eps would drag the reference down to float32
    rows, cols = x.shape
    with np.errstate(all="ignore"):
        nonfinite = ~np.isfinite(x).all(axis=1)
        xr = np.where(nonfinite[:, None], 0.0, x)
        mu = row_sum(xr)[:, None] / cols
        d = xr - mu
        var = np.sum(d * d, axis=1, keepdims=True) / cols  # positive terms
        s = np.sqrt(var + eps)
        y = d / s
        z = g * y + b
        kappa = np.mean(np.abs(xr), axis=1, keepdims=True) / s
        # The two-pass arithmetic sums x (the mean) and squares x - mean (the variance).
        in_domain = (~nonfinite & (np.max(np.abs(d), axis=1) <= math.sqrt(FLT_MAX / cols))
                     & (np.max(np.abs(xr), axis=1) <= FLT_MAX / cols))
        z = np.where(nonfinite[:, None], np.nan, z)
        limit = np.full_like(z, np.nan)  # mean and variance of a row with inf or NaN are NaN
    return Reference(case.op, z, limit, nonfinite, np.zeros(rows, bool), in_domain, y, kappa,
                     var, np.max(np.abs(xr), axis=1, keepdims=True))


def _exact_row(case: Case, r: int) -> list[float] | None:
    """Row ``r`` exactly (inside mpmath.workprec); None for a row with a NaN or an infinity."""
    row = case.x[r]
    if not np.isfinite(row).all():
        return None
    xs = [mpmath.mpf(float(v)) for v in row]
    n = len(xs)
    mu = mpmath.fsum(xs) / n
    var = mpmath.fsum((v - mu) ** 2 for v in xs) / n
    s = mpmath.sqrt(var + mpmath.mpf(float(case.eps)))
    return [float((v - mu) / s * mpmath.mpf(float(g)) + mpmath.mpf(float(b)))
            for v, g, b in zip(xs, case.gamma, case.beta)]


def _needs_mpmath(case: Case, ref: Reference) -> np.ndarray:
    """Rows where float64's own error could reach 1e-3 of the float32 tolerance: it errs by at most
    about ``(log2 C + 6) * 2^-53`` relative to ``kappa``, so float64 suffices whenever that is far
    below ``u``; this is the a-posteriori check of that claim."""
    depth = math.log2(max(case.cols, 2)) + 6
    rel = depth * U64 * ref.kappa[:, 0]
    return ref.judged_rows & (rel > 1e-3 * U * np.maximum(ref.kappa[:, 0], 1.0))


def _bound(case: Case, ref: Reference, model: ErrorModel, row_reduction: str = "blocks") -> Tolerance:
    k = model.k(case.cols)
    u = model.unit_roundoff
    g = np.abs(case.gamma.astype(np.float64))[None, :]
    ay = np.abs(ref.y)
    with np.errstate(all="ignore"):
        e1 = model.layernorm_e1(case.cols, ref.kappa)
        s = np.sqrt(ref.stat + case.eps)
        if model.ftz:
            # A flushing machine (docs/tolerances.md, "Flush to zero") loses up to FLT_MIN on each
            # subnormal x and at each of the k steps of the mean's dependency chain, which moves
            # x - mean by (k + 2) FLT_MIN; the variance moves by FLT_MIN (flushed squares) plus
            # 2 FLT_MIN s (flushed inputs), which scales y by FLT_MIN / s + FLT_MIN / (2 s^2).
            moved = 1 / s + 0.5 / (s * s)
            if model.variance == "one_pass":
                # E[x]^2 moves by 2 (k + 2) FLT_MIN |mean| and its own flushed square, E[x^2]
                # by 2 FLT_MIN sqrt(E[x^2]) <= 2 FLT_MIN (s + |mean|), |mean| <= kappa s.
                moved = (1 + (k + 3) * ref.kappa) / s + 1 / (s * s)
            under = g * FLT_MIN * ((k + 2) / s + ay * moved)
        else:
            # IEEE gradual underflow (docs/tolerances.md, "Gradual underflow"): the inputs are
            # exact, but each of the k steps of the mean's chain (a Welford update's delta / n, a
            # partial mean) that rounds to a subnormal loses up to eta, half the smallest subnormal
            # (the standard model's fl(a op b) = (a op b)(1 + d) + e, |e| <= eta). That moves
            # x - mean by (k + 2) eta, which division by s can lift far above the FLT_MIN floors: a
            # one-hot 1e-39 row of 8191 with eps 1e-12 has a mean of 87 subnormal units, and a
            # Welford chain that stalls on it is 56 units off. The variance moves by a few eta (its
            # squares, its division, a Welford merge's d * d): 4 eta allowed, y scaled by 2 eta / s^2.
            moved = 2 / (s * s)
            if model.variance == "one_pass":
                # E[x]^2 moves by 2 (k + 2) eta |mean| + eta, E[x^2] by 2 eta.
                moved = (k + 2) * ref.kappa / s + 1.5 / (s * s)
            eta = model.smallest_subnormal / 2
            under = g * eta * ((k + 2) / s + ay * moved)
        tol = (g * (e1 * (1 + ay) + e1 * e1 * ay + (k / 2 + 8) * u * ay) + 2 * u * np.abs(ref.z)
               + 4 * FLT_MIN * (1 + g) * (1 + ay) + under)
    # Past e1 = 0.25 the arithmetic has no accuracy left to ask for: only a finite output.
    return Tolerance(tol, e1[:, 0] > 0.25)


def _one_pass_out_of_domain(case: Case, ref: Reference, model: ErrorModel) -> np.ndarray:
    """A one-pass variance squares x itself: past sqrt(FLT_MAX / cols) that overflows."""
    if model.variance != "one_pass":
        return np.zeros(case.rows, bool)
    return ref.row_max[:, 0] > math.sqrt(FLT_MAX / case.cols)


def _exact_constant(case: Case) -> tuple[np.ndarray, np.ndarray, str]:
    """Every exactly constant finite row gives ``beta`` exactly (``x - mean`` is exactly 0 when the
    mean is)."""
    x = case.x
    rows = np.isfinite(x).all(axis=1) & (x == x[:, :1]).all(axis=1)
    want = np.broadcast_to(case.beta[None, :], x.shape)
    return rows, want, "an exactly constant row must give beta exactly (x - mean is exactly 0)"


def _gradient_inputs(forward: Case) -> tuple[np.ndarray, np.ndarray]:
    return forward.x, xhat64(forward.x, forward.eps, centred=True)


LAYERNORM = OpSpec(
    "layernorm", ("x", "gamma", "beta", "eps"), 1e-5,
    "(x - mean) / sqrt(var + eps) * gamma + beta, population variance",
    families=NORM_FAMILIES, range_families=("huge",), range_hint=NORM_RANGE_HINT,
    properties=EVERY_OP | {"exact_constant", "shift_invariance", "scale_invariance"}, centred=True,
    reference=_layernorm64, exact_row=_exact_row, needs_mpmath=_needs_mpmath, bound=_bound,
    out_of_domain=_one_pass_out_of_domain, exact_constant=_exact_constant,
    transforms=(SHIFT, SCALE))

LAYERNORM_BACKWARD = OpSpec(
    "layernorm_backward", ("dy", "x", "gamma", "beta", "eps"), 1e-5,
    "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, xhat = (x - mean) * rstd; "
    "dgamma = sum over rows of dy * xhat, dbeta = sum of dy",
    forward="layernorm", outputs=("dx", "dgamma", "dbeta"), families=NORM_BACKWARD_FAMILIES,
    range_families=("huge",), properties=EVERY_OP | {"row_order"}, centred=True,
    reference=functools.partial(norm_gradients64, centred=True),
    exact_outputs=functools.partial(norm_gradients_exact, centred=True),
    bound=functools.partial(norm_gradients_bound, centred=True),
    gradient_inputs=_gradient_inputs)
