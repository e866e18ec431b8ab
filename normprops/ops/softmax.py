"""Softmax over the last axis, and its gradient ``softmax_backward`` beside it: signatures,
float64 and mpmath references, bounds under each policy, families, the properties that apply,
the softmax's own row checks (``ratios``, ``bounds``, ``sum_to_one``, ``argmax``) and its shift
invariance.

The references are computed from the exact float32 inputs (float64, with every signed row sum exact
where it cancels); the bounds follow docs/tolerances.md, "Softmax", "Softmax ratios" and
"Gradients". :mod:`normprops.ops.masked_softmax` builds on the pieces here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import mpmath
import numpy as np

from normprops.dtypes import get_dtype, to_dtype
from normprops.errormodel import ErrorModel
from normprops.ops.common import (
    FLT_MAX,
    FLT_MIN,
    U64,
    GradReference,
    GradTolerance,
    Reference,
    Tolerance,
    U,
    row_sum,
)
from normprops.ops.spec import EVERY_OP, OpSpec
from normprops.ops.transforms import SHIFT
from normprops.verdict import Verdicts, range_rows, worst

if TYPE_CHECKING:
    from normprops.case import Case

__all__ = ["SOFTMAX", "SOFTMAX_BACKWARD", "SOFTMAX_PROPERTIES", "softmax_of", "softmax_bound",
           "ratio_tolerance", "ratio_fit", "RatioFit", "softmax_ratios", "check_softmax_output",
           "mp_softmax", "softmax_needs_mpmath"]

#: The per-element error of the logits a kernel rounds itself (masked softmax's ``scale * x``).
Rounding = Callable[["Case", ErrorModel], np.ndarray]

#: The softmaxes' own properties (shift invariance a layer norm shares). A softmax row of -inf
#: only is masked: the masked family draws such rows for plain softmax too.
SOFTMAX_PROPERTIES = frozenset({"ratios", "sum_to_one", "bounds", "argmax", "shift_invariance",
                                "masked_rows"})


# --- forward: reference -------------------------------------------------------------------------


def softmax_of(x: np.ndarray, *, op: str) -> Reference:
    """Softmax over the last axis of the exact float64 logits ``x``."""
    rows, cols = x.shape
    with np.errstate(all="ignore"):
        has_nan = np.isnan(x).any(axis=1)
        has_posinf = np.isposinf(x).any(axis=1)
        masked = np.isneginf(x).all(axis=1) & ~has_nan
        nonfinite = (has_nan | has_posinf) & ~masked
        regular = ~nonfinite & ~masked
        xr = np.where(regular[:, None], x, 0.0)
        m = np.max(xr, axis=1, keepdims=True)
        d = xr - m  # -inf at masked entries
        e = np.exp(d)
        g = e / e.sum(axis=1, keepdims=True)  # positive terms: pairwise float64 is accurate
        w = np.sum(np.where(g > 0, g * np.abs(d), 0.0), axis=1, keepdims=True)
        # Limits of rows with +inf and no NaN: the +inf entries share the mass.
        infs = np.isposinf(x)
        limit = np.where(has_posinf[:, None] & ~has_nan[:, None],
                         infs / np.maximum(infs.sum(axis=1, keepdims=True), 1), np.nan)
        z = np.where(regular[:, None], g, np.nan)
    return Reference(op, z, limit, nonfinite, masked, regular.copy(),
                     np.where(regular[:, None], g, 0.0), np.ones((rows, 1)), w, m, logits=x)


def _softmax64(case: Case) -> Reference:
    return softmax_of(case.x.astype(np.float64), op=case.op)


def mp_softmax(xs: list[mpmath.mpf]) -> list[float]:
    m = max(xs)
    e = [mpmath.exp(v - m) for v in xs]
    total = mpmath.fsum(e)
    return [float(v / total) for v in e]


def _exact_row(case: Case, r: int) -> list[float] | None:
    """Row ``r`` exactly (inside mpmath.workprec); None for a row with a NaN or +inf, or all -inf."""
    row = case.x[r]
    if np.isnan(row).any() or np.isposinf(row).any() or np.isneginf(row).all():
        return None
    return mp_softmax([mpmath.mpf(float(v)) for v in row])


def softmax_needs_mpmath(case: Case, ref: Reference) -> np.ndarray:
    """Rows where float64's own error could reach 1e-3 of the float32 tolerance: it errs by at most
    about ``(log2 C + 6) * 2^-53`` relative to ``|x - m|``, so float64 suffices whenever that is far
    below ``u``; this is the a-posteriori check of that claim."""
    depth = math.log2(max(case.cols, 2)) + 6
    spread = np.where(ref.judged_rows, ref.stat[:, 0], 0.0)
    return ref.judged_rows & (depth * U64 * (1 + spread) > 1e-3 * U * 10)


# --- forward: bounds ----------------------------------------------------------------------------


def softmax_bound(case: Case, ref: Reference, model: ErrorModel, *,
                  rounding: Rounding | None = None) -> Tolerance:
    """The default policy's bound of a softmax (docs/tolerances.md, "Softmax"); ``rounding`` gives
    the per-element error of the logits a kernel rounds itself (masked softmax's ``scale * x``)."""
    k = model.k(case.cols)
    u = model.unit_roundoff
    with np.errstate(all="ignore"):
        dist = np.where(ref.y > 0, np.abs(ref.logits - ref.row_max), 0.0)
        rel = u * (model.rho * k + 10 + model.c_x * (dist + ref.stat))
        if rounding is not None:
            # Rounding the logits themselves: exp(p_j + ln sum_k g_k exp(p_k)) - 1 at most.
            p = rounding(case, model)
            q = np.log(np.sum(np.where(ref.y > 0, ref.y * np.exp(p), 0.0), axis=1, keepdims=True))
            extra = np.where(ref.y > 0, np.expm1(p + q), 0.0)
            rel = rel + extra * (1 + rel)
        tol = ref.y * rel + 2 * FLT_MIN
        if rounding is not None:
            # Where g_j underflows float64 its bound g_j exp(p_j + q) need not: a rounding of
            # scale * x_j wider than t_j's distance below the max can lift y_j to 1/2 (two
            # logits 7.8e17 apart that round to one float32). Taken in logs, ln g_j = t_j - m - ln S.
            log_g = ref.logits - ref.row_max + np.log(np.max(ref.y, axis=1, keepdims=True))
            lifted = ref.judged_rows[:, None] & (ref.y == 0) & np.isfinite(ref.logits)
            tol = tol + np.where(lifted, np.exp(log_g + p + q) * (1 + rel), 0.0)
    sum_tol = u * (model.rho * k + 10 + 7 * math.log(case.cols)) + 2 * case.cols * FLT_MIN
    ratio_tol = ratio_tolerance(case, ref, model, rounding=rounding)
    return Tolerance(tol, np.zeros(case.rows, bool), sum_tol, ratio_tol)


def ratio_tolerance(case: Case, ref: Reference, model: ErrorModel, *,
                    rounding: Rounding | None = None) -> np.ndarray:
    """Relative bound per element on ``y_j / (lambda g_j) - 1`` for one scale ``lambda`` per row.

    Whatever the kernel does to the row sum (its reduction order, depth, the division by it) scales
    every element of the row alike and is absorbed by ``lambda``. What is left is per element: the
    rounding of the exponent's argument, which the exp turns into a relative error
    ``c_x u |x_j - m|``, or ``c_x u (|x_j - m| + ln S)`` where the kernel subtracts ``ln S`` inside
    the exponent (log-sum-exp form; ``S = 1 / max g``, at most ``ln C``, zero when one logit
    dominates); the exp's own error and the division or multiplication (and an online softmax's
    rescaling exp and multiply): ``10 u``. None of it grows with the row length. Elements whose
    exact value is below twice the storage type's smallest normal are not judged: a correct kernel
    may flush or lose relative precision there.
    """
    kind = get_dtype(case.dtype)
    u = model.unit_roundoff
    with np.errstate(all="ignore"):
        dist = np.abs(ref.logits - ref.row_max)
        log_s = -np.log(np.max(ref.y, axis=1, keepdims=True))
        rel = u * (10 + model.c_x * (dist + log_s))
        if rounding is not None:
            rel = rel + rounding(case, model)  # its own element's; the rest is the row's
        if case.dtype != "float32":
            rel = rel + kind.u  # the output's rounding to the storage type
        judged = ref.judged_rows[:, None] & (ref.y >= 2 * kind.min_normal)
    return np.where(judged, rel, np.nan)


def _bound(case: Case, ref: Reference, model: ErrorModel, row_reduction: str = "blocks") -> Tolerance:
    return softmax_bound(case, ref, model)


# --- forward: the softmax's own checks ----------------------------------------------------------


def _dinkelbach(a_hi: np.ndarray, t_hi: np.ndarray, a_lo: np.ndarray,
                t_lo: np.ndarray) -> tuple[float, int, int]:
    """``max (a_hi[j] - a_lo[i]) / (t_hi[j] + t_lo[i])`` over all j, i, and the pair: Newton's
    method on the convex piecewise-linear ``max(a_hi - rho t_hi) - min(a_lo + rho t_lo)``, exact
    after a few steps."""
    rho, j, i = 0.0, int(np.argmax(a_hi)), int(np.argmin(a_lo))
    with np.errstate(all="ignore"):
        for _ in range(64):
            value = (a_hi[j] - a_lo[i]) / (t_hi[j] + t_lo[i])
            if math.isnan(value):  # -inf - -inf: two zeros where the exact values are normal
                value = math.inf
            if not value > rho * (1 + 1e-12):
                break
            rho, best = value, (j, i)
            if not math.isfinite(rho):
                break
            j = int(np.argmax(a_hi - rho * t_hi))
            i = int(np.argmin(a_lo + rho * t_lo))
        else:
            best = (j, i)
    if rho == 0.0:
        best = (j, i)
    return rho, best[0], best[1]


def ratio_fit(a: np.ndarray, t: np.ndarray, judged: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row, the smallest ``rho`` for which one value ``L`` has ``|a_j - L| <= rho t_j`` at every
    judged ``j``, and the pair of columns that sets it: ``rho = max (a_hi - a_lo) / (t_hi + t_lo)``
    over pairs. Rows with fewer than two judged elements get 0.

    A row passes (``rho <= 1``) exactly when ``max(a - t) <= min(a + t)``: one pass. For such a row
    the optimal pair lies among the few elements with ``a_j - rho1 t_j >= max(a - t)`` (high side)
    and ``a_i + rho1 t_i <= min(a + t)`` (low side), ``rho1 <= rho`` being the first pair's value,
    so the exact ``rho`` (for ``hypothesis.target``) costs little more than the check.
    """
    rows = a.shape[0]
    rho = np.zeros(rows)
    hi = np.zeros(rows, dtype=int)
    lo = np.zeros(rows, dtype=int)
    with np.errstate(all="ignore"):
        up = np.where(judged, a, -np.inf)
        down = np.where(judged, a, np.inf)
        top = np.max(up - t, axis=1)  # max(a - t) over judged elements
        bottom = np.min(down + t, axis=1)  # min(a + t)
        j0, i0 = np.argmax(up, axis=1), np.argmin(down, axis=1)
        idx = np.arange(rows)
        rho1 = np.nan_to_num((a[idx, j0] - a[idx, i0]) / (t[idx, j0] + t[idx, i0]), nan=0.0)
        for r in np.nonzero(judged.sum(axis=1) >= 2)[0]:
            cols = judged[r]
            if top[r] <= bottom[r]:
                slack = 1e-9 * float(np.max(t[r, cols]))
                high = np.nonzero(cols & (a[r] - rho1[r] * t[r] >= top[r] - slack))[0]
                low = np.nonzero(cols & (a[r] + rho1[r] * t[r] <= bottom[r] + slack))[0]
            else:
                high = low = np.nonzero(cols)[0]
            value, j, i = _dinkelbach(a[r, high], t[r, high], a[r, low], t[r, low])
            rho[r], hi[r], lo[r] = value, high[j], low[i]
    return rho, hi, lo


@dataclass(frozen=True)
class RatioFit:
    """The ``ratios`` property on one output: per row the excess ``rho`` (fails above 1) and the
    pair of columns that sets it; ``t`` the per-element bound in log form."""

    rho: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    t: np.ndarray


def softmax_ratios(got: np.ndarray, ref: Reference, ratio_tol: np.ndarray) -> RatioFit:
    """How far a softmax output is from being the exact one times a single factor per row, in units
    of the per-element bound ``ratio_tol`` (docs/tolerances.md, "Softmax ratios")."""
    judged = np.isfinite(ratio_tol) & np.isfinite(got)
    judged &= judged.sum(axis=1, keepdims=True) >= 2
    with np.errstate(all="ignore"):
        a = np.where(judged, np.where(got > 0, np.log(got / ref.y), -np.inf), 0.0)
        # The bound in log form: -ln(1 - t) <= t (1 + t) for t <= 1/2.
        t = np.where(judged, ratio_tol * (1 + ratio_tol), 1.0)
    if not judged.any():
        zeros = np.zeros(got.shape[0], dtype=int)
        return RatioFit(np.zeros(got.shape[0]), zeros, zeros, t)
    return RatioFit(*ratio_fit(a, t, judged), t)


def _judge_ratios(got: np.ndarray, ref: Reference, ratio_tol: np.ndarray, range_rows: np.ndarray,
                  v: Verdicts) -> None:
    """Softmax's width-independent property: the outputs of a row must be the exact ones times a
    single factor, up to ``ratio_tol`` per element.

    Its excess is not part of the hunt's ``hypothesis.target`` score: a bound that does not grow
    with the row makes the largest excess grow with the row, and steering by it drove every hunt to
    the widest rows (2.5 times slower, docs/tolerances.md); the property is judged on every example
    all the same."""
    fit = softmax_ratios(got, ref, ratio_tol)
    failing = fit.rho > 1
    for prop, rows_mask in (("range_safety", range_rows), ("ratios", ~range_rows)):
        sel = failing & rows_mask
        if sel.any():
            r = int(np.argmax(np.where(sel, fit.rho, -np.inf)))
            j, i = int(fit.hi[r]), int(fit.lo[r])
            if j == i:  # one element no scale fits at all (a 0, whose log is -inf): no pair to show
                v.add(prop, row=r, col=j, got=got[r, j], expected=ref.y[r, j], ratio=fit.rho[r],
                      reason=f"y[{j}] = {float(got[r, j]):.5g} where the exact result is "
                             f"{float(ref.y[r, j]):.5g}: no single scale of the row fits it")
                continue
            with np.errstate(all="ignore"):
                measured = got[r, j] / got[r, i]
                exact = ref.y[r, j] / ref.y[r, i]
                bound = exact * math.expm1(fit.t[r, j] + fit.t[r, i])
            v.add(prop, row=r, col=j, got=measured, expected=exact, error=abs(measured - exact),
                  tolerance=bound, ratio=fit.rho[r],
                  reason=f"y[{j}] / y[{i}] against exp(x[{j}] - x[{i}]): no single scale of the "
                         f"row fits both (their bounds do not grow with the row length)")


def check_softmax_output(case: Case, got: np.ndarray, ref: Reference, tol: Tolerance,
                         v: Verdicts) -> None:
    """A softmax's own properties of one output: ``ratios`` (under the default policy), ``bounds``,
    ``sum_to_one`` and ``argmax``."""
    if tol.ratio_tol is not None:
        _judge_ratios(got, ref, tol.ratio_tol, range_rows(ref, tol), v)
    # A row outside the accuracy domain is judged element by element, under range safety alone.
    rows = ref.judged_rows & ~range_rows(ref, tol) & np.isfinite(got).all(axis=1)
    if not rows.any():
        return
    with np.errstate(all="ignore"):
        # exp is never negative, so neither is a right output: 0 is a hard floor. The ceiling is 1
        # plus the element's accuracy bound: the largest logit's output is e * (1/S) with S >= e,
        # and a reciprocal or a division that is not correctly rounded (rcp.approx, div.full: 1
        # and 2 ulp) gives 1 + 2^-23 for a row one logit dominates (docs/tolerances.md).
        out_of_range = rows[:, None] & ((got < 0) | (got > 1 + tol.tol))
        if out_of_range.any():
            r, c = worst(np.abs(got - 0.5), out_of_range)
            above = bool(got[r, c] > 1)
            v.add("bounds", row=r, col=c, got=got[r, c], expected=ref.z[r, c],
                  error=got[r, c] - 1 if above else None,
                  tolerance=tol.tol[r, c] if above else None,
                  ratio=(got[r, c] - 1) / tol.tol[r, c] if above else math.inf,
                  reason="softmax output above 1 by more than its rounding" if above
                  else "negative softmax output")
        if tol.sum_tol is not None:
            dev = np.abs(np.sum(got, axis=1) - 1.0)
            bad = rows & ~(dev <= tol.sum_tol)
            if bad.any():
                r = int(np.argmax(np.where(bad, dev, -1)))
                v.add("sum_to_one", row=r, got=float(np.sum(got[r])), expected=1.0,
                      error=dev[r], tolerance=tol.sum_tol, ratio=dev[r] / tol.sum_tol,
                      reason="row sum")
        # The input's argmax must hold the largest output, up to that element's tolerance.
        top = np.argmax(ref.logits, axis=1)
        idx = np.arange(case.rows)
        held = got[idx, top]
        best = np.max(got, axis=1)
        bad = rows & (held < best - tol.tol[idx, top])
        if bad.any():
            r = int(np.argmax(bad))
            v.add("argmax", row=r, col=int(top[r]), got=held[r], expected=best[r],
                  reason=f"the largest logit (col {int(top[r])}) does not get the largest "
                         f"probability: {held[r]:.5g} < {best[r]:.5g} "
                         f"(col {int(np.argmax(got[r]))})")



# --- softmax_backward ---------------------------------------------------------------------------


def _backward64(case: Case) -> GradReference:
    y = case.x.astype(np.float64)
    dy = case.dy.astype(np.float64)
    with np.errstate(all="ignore"):
        poisoned = ~np.isfinite(y).all(axis=1)
        yr = np.where(poisoned[:, None], 0.0, y)
        s = row_sum(dy * yr)[:, None]  # products of two float32 are exact in float64
        dx = np.where(poisoned[:, None], np.nan, yr * (dy - s))
        scale = np.sum(np.abs(dy * yr), axis=1)
        in_domain = ~poisoned & (np.max(np.abs(dy), axis=1) <= FLT_MAX / 4) & (scale <= FLT_MAX / 4)
    ones = np.ones((case.rows, 1))
    return GradReference(case.op, {"dx": dx}, poisoned, in_domain, yr, ones, ones,
                         np.zeros((case.rows, 1)))


def _backward_exact(case: Case, rows: np.ndarray, ref: GradReference, prec: int,
                    columns: bool = True) -> dict[str, np.ndarray]:
    """dx of ``rows`` at ``prec`` bits (softmax_backward has no column sums)."""
    z = {name: value.copy() for name, value in ref.z.items()}
    with mpmath.workprec(prec):
        for r in range(case.rows):
            if ref.poisoned[r] or not rows[r]:
                continue
            dy = [mpmath.mpf(float(v)) for v in case.dy[r]]
            ys = [mpmath.mpf(float(v)) for v in case.x[r]]
            s = mpmath.fsum(a * b for a, b in zip(dy, ys))
            z["dx"][r] = [float(b * (a - s)) for a, b in zip(dy, ys)]
    return z


def _softmax_inputs(forward: Case) -> tuple[np.ndarray, np.ndarray]:
    """softmax_backward's y: the exact softmax of the forward case's logits, rounded to the
    storage type; dy is taken against y itself."""
    with np.errstate(all="ignore"):
        x = forward.x.astype(np.float64)
        e = np.exp(x - np.max(x, axis=1, keepdims=True))
        y = e / np.sum(e, axis=1, keepdims=True)  # NaN rows where x holds NaN or +inf
        y = to_dtype(y.astype(np.float32), forward.dtype)
    return y, y.astype(np.float64)


def _backward_bound(case: Case, ref: GradReference, model: ErrorModel,
                    row_reduction: str = "blocks") -> GradTolerance:
    """``|y_i| u ((k + 6) S + 4 |dy_i|)`` with ``S = sum |dy_j y_j|``: the dot product's error
    ``(k + 1) u S`` reaches every element through ``y_i``, the difference ``dy_i - s`` rounds on
    the scale of ``|dy_i| + S``, not of the result (docs/tolerances.md, "Gradients")."""
    k = model.k(case.cols)
    u = model.unit_roundoff
    y = np.abs(ref.xhat)
    dy = np.abs(case.dy.astype(np.float64))
    with np.errstate(all="ignore"):
        s_abs = np.sum(dy * y, axis=1, keepdims=True)
        floor = 4 * model.smallest_subnormal * (1 + y * (case.cols + 1))
        if model.ftz:
            # Flushed inputs: a y_j below FLT_MIN moves s by |dy_j| FLT_MIN, a flushed y_i or
            # product loses up to FLT_MIN on its own output.
            floor = floor + FLT_MIN * (y * (np.sum(dy, axis=1, keepdims=True) + case.cols + 1)
                                       + dy + s_abs + 2)
        tol = y * u * ((k + 6) * s_abs + 4 * dy) + floor
    return GradTolerance({"dx": tol}, np.zeros(case.rows, bool))



# --- the ops ------------------------------------------------------------------------------------

_FAMILIES = ("ordinary", "overflow_logits", "wide_span", "large_mean", "huge", "tiny", "constant",
             "ragged", "masked", "nonfinite", "long_rows")

#: Every finite softmax row is in its accuracy domain: x - max x never overflows.
SOFTMAX = OpSpec(
    "softmax", ("x",), None, "exp(x - max x) / sum exp(x - max x), over the last axis",
    families=_FAMILIES, properties=EVERY_OP | SOFTMAX_PROPERTIES, reference=_softmax64,
    exact_row=_exact_row, needs_mpmath=softmax_needs_mpmath, bound=_bound,
    check_output=check_softmax_output, transforms=(SHIFT,))

SOFTMAX_BACKWARD = OpSpec(
    "softmax_backward", ("dy", "y"), None,
    "dx = y * (dy - sum(dy * y)) per row, y the softmax output (PyTorch's _softmax_backward_data)",
    forward="softmax", outputs=("dx",),
    families=("ordinary", "wide_span", "constant", "tiny", "ragged", "nonfinite", "cancelling_dy",
              "orthogonal_dy", "one_hot_dy", "dy_scale", "tall"),
    properties=EVERY_OP, reference=_backward64, exact_outputs=_backward_exact,
    bound=_backward_bound, gradient_inputs=_softmax_inputs)
