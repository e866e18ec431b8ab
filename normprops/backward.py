"""Gradients: exact references and condition-aware bounds of the three backward ops.

``softmax_backward(dy, y) -> dx``, ``rmsnorm_backward(dy, x, gamma, eps) -> (dx, dgamma)`` and
``layernorm_backward(dy, x, gamma, beta, eps) -> (dx, dgamma, dbeta)`` (``normprops.ops``). The
references are computed from the exact inputs as the forward ones are: float64 with every signed sum
exact where it cancels (:func:`normprops.oracles.row_sum`), the statistics of x recomputed exactly,
softmax's ``y`` taken as it is given; ``oracle="mpmath"`` recomputes every row at 200 bits. The
bounds follow docs/tolerances.md, "Gradients": a norm's ``dx = rstd (g - mean(g) - xhat mean(g
xhat))`` and softmax's ``dx = y (dy - <dy, y>)`` cancel, so their bounds scale with the magnitudes
of the terms that cancel, not with the result; dgamma and dbeta grow with the rows summed and the
depth of the row reduction (``ops.ROW_REDUCTIONS``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import mpmath
import numpy as np

from normprops.case import Case
from normprops.dtypes import get_dtype
from normprops.errormodel import ErrorModel
from normprops.ops import ROW_REDUCTIONS, get_op
from normprops.oracles import FLT_MAX, FLT_MIN, ORACLES, TABLE_ATOL, TABLE_RTOL, row_sum

__all__ = ["GradReference", "GradTolerance", "grad_reference", "grad_tolerance", "row_depth"]


def _tiny(model: ErrorModel) -> float:
    """What one rounding below FLT_MIN may lose, counted whole: the arithmetic's smallest subnormal
    (2^-149 in float32, 2^-133 in bfloat16 arithmetic), or FLT_MIN on a flushing machine."""
    return FLT_MIN if model.ftz else model.smallest_subnormal


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


def _col_sum(a: np.ndarray) -> np.ndarray:
    """Sum over the rows, exact to float64 rounding where it cancels, as one row."""
    return row_sum(np.ascontiguousarray(a.T))[None, :]


# --- float64 references ------------------------------------------------------------------------


def _softmax64(case: Case) -> GradReference:
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


def _norm64(case: Case) -> GradReference:
    layer = case.op == "layernorm_backward"
    x = case.x.astype(np.float64)
    dy = case.dy.astype(np.float64)
    gamma = case.gamma.astype(np.float64)[None, :]
    eps = float(case.eps)
    cols = case.cols
    with np.errstate(all="ignore"):
        poisoned = ~np.isfinite(x).all(axis=1)
        xr = np.where(poisoned[:, None], 0.0, x)
        d = xr - row_sum(xr)[:, None] / cols if layer else xr
        stat = np.sum(d * d, axis=1, keepdims=True) / cols  # positive terms
        rstd = 1.0 / np.sqrt(stat + eps)
        xhat = d * rstd
        g = dy * gamma  # exact in float64
        a = row_sum(g)[:, None] / cols if layer else 0.0
        b = row_sum(g * xhat)[:, None] / cols
        dx = np.where(poisoned[:, None], np.nan, rstd * (g - a - xhat * b))
        z = {"dx": dx, "dgamma": _col_sum(dy * xhat)}
        if layer:
            z["dbeta"] = _col_sum(dy)
        kappa = (np.mean(np.abs(xr), axis=1, keepdims=True) * rstd if layer
                 else np.ones((case.rows, 1)))
        spread = np.max(np.abs(d), axis=1)
        size = rstd[:, 0] * np.sum(np.abs(g) * (1 + np.abs(xhat)), axis=1)
        # The forward's arithmetic recomputed (a layer norm's sum of x, the squares of x - mean),
        # and the terms of dx within range.
        in_domain = (~poisoned & (spread <= math.sqrt(FLT_MAX / cols))
                     & (size <= FLT_MAX / 4) & (np.max(np.abs(dy), axis=1) <= FLT_MAX / 4))
        if layer:
            in_domain &= np.max(np.abs(xr), axis=1) <= FLT_MAX / cols
    return GradReference(case.op, z, poisoned, in_domain, xhat, rstd, kappa, stat)


# --- mpmath ------------------------------------------------------------------------------------


def _mp_rows(case: Case, rows: np.ndarray, ref: GradReference, prec: int,
             columns: bool = True) -> dict[str, np.ndarray]:
    """dx of ``rows`` and, with ``columns``, every column sum at ``prec`` bits (the column sums from
    every finite row)."""
    z = {name: value.copy() for name, value in ref.z.items()}
    layer = case.op == "layernorm_backward"
    with mpmath.workprec(prec):
        sums = {name: [mpmath.mpf(0)] * case.cols for name in z if name != "dx"}
        for r in range(case.rows):
            if ref.poisoned[r] or not (columns or rows[r]):
                continue
            dy = [mpmath.mpf(float(v)) for v in case.dy[r]]
            xs = [mpmath.mpf(float(v)) for v in case.x[r]]
            n = len(xs)
            if case.op == "softmax_backward":
                s = mpmath.fsum(a * b for a, b in zip(dy, xs))
                if rows[r]:
                    z["dx"][r] = [float(b * (a - s)) for a, b in zip(dy, xs)]
                continue
            mu = mpmath.fsum(xs) / n if layer else mpmath.mpf(0)
            d = [v - mu for v in xs]
            rstd = 1 / mpmath.sqrt(mpmath.fsum(v * v for v in d) / n + mpmath.mpf(float(case.eps)))
            xhat = [v * rstd for v in d]
            g = [a * mpmath.mpf(float(c)) for a, c in zip(dy, case.gamma)]
            mean_g = mpmath.fsum(g) / n if layer else mpmath.mpf(0)
            mean_gx = mpmath.fsum(a * b for a, b in zip(g, xhat)) / n
            if rows[r]:
                z["dx"][r] = [float(rstd * (a - mean_g - b * mean_gx)) for a, b in zip(g, xhat)]
            sums["dgamma"] = [t + a * b for t, a, b in zip(sums["dgamma"], dy, xhat)]
            if layer:
                sums["dbeta"] = [t + a for t, a in zip(sums["dbeta"], dy)]
        for name, total in sums.items() if columns else ():
            if name == "dbeta" or not ref.poisoned.any():
                z[name] = np.array([[float(t) for t in total]])
    return z


def grad_reference(case: Case, *, oracle: str = "float64", prec: int = 200) -> GradReference:
    """The exact gradients of ``case``: float64, or every row at ``prec`` bits with ``oracle``
    "mpmath". float64 suffices for the float32 bounds: its own error, relative to the magnitudes the
    bounds scale with, is below 2^-26 of them (docs/tolerances.md, "Gradients")."""
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES} but was {oracle!r}")
    spec = get_op(case.op)
    if spec.forward is None or case.dy is None:
        raise ValueError(f"case is for op {case.op!r}, not a gradient op with its dy")
    ref = _softmax64(case) if case.op == "softmax_backward" else _norm64(case)
    if oracle == "mpmath":
        z = _mp_rows(case, ~ref.poisoned, ref, prec)
        return replace(ref, z=z, oracle="mpmath")
    return ref


def exact_element(case: Case, *, output: str, row: int | None, col: int, prec: int = 200) -> float:
    """One output element of ``case`` at ``prec`` bits (``row`` None for a column sum): the value a
    verdict names as the exact result. float64 is enough to judge by, not always to quote: where dx
    cancels below float64's resolution (one column of x ~ 1e6, eps 1e-7: 1 - xhat^2 is 1e-19) its
    value may be off by orders of magnitude, all of them far inside the bound."""
    ref = _softmax64(case) if case.op == "softmax_backward" else _norm64(case)
    rows = np.zeros(case.rows, bool)
    if row is not None:
        rows[row] = True
    with np.errstate(all="ignore"):
        z = _mp_rows(case, rows, ref, prec, columns=row is None)[output]
    return float(z[0 if row is None else row, col])


# --- bounds ------------------------------------------------------------------------------------


def _softmax_bound(case: Case, ref: GradReference, model: ErrorModel) -> GradTolerance:
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


def _xhat_error(case: Case, ref: GradReference, model: ErrorModel) -> tuple[np.ndarray, np.ndarray]:
    """The forward's error in each normalized value (its bound with gamma = 1, without the final
    affine rounding), and layer norm's ``e1`` per row (zeros for RMS norm)."""
    k = model.k(case.cols)
    u = model.unit_roundoff
    ax = np.abs(ref.xhat)
    tiny = _tiny(model)
    with np.errstate(all="ignore"):
        s = np.sqrt(ref.stat + case.eps)
        # Roundings below FLT_MIN are absolute: up to ``tiny`` on each of the k + 2 steps of the
        # mean, scaled by rstd; and xhat itself, where it is subnormal, rounds absolutely whatever
        # rstd is: by tiny / 2 correctly rounded, by about 2 tiny through an approximate division
        # (PTX div.full.f32 errs by up to 2 ulp). Inductor's compiled RMS norm backward on an H200
        # was 1-1.2 tiny off there; the bound allows 4.
        floor = 4 * tiny * (ref.rstd * (k + 2) * (1 + ax) + 1)
        if case.op == "layernorm_backward":
            e1 = model.layernorm_e1(case.cols, ref.kappa)
            err = e1 * (1 + ax) + e1 * e1 * ax + (k / 2 + 8) * u * ax + floor
            if model.ftz:
                moved = 1 / s + 0.5 / (s * s)
                if model.variance == "one_pass":  # as the forward's (oracles._default_layernorm)
                    moved = (1 + (k + 3) * ref.kappa) / s + 1 / (s * s)
                err = err + FLT_MIN * ((k + 2) / s + ax * moved)
        else:
            e1 = np.zeros((case.rows, 1))
            err = (k / 2 + 8) * u * ax + ax * FLT_MIN / (ref.stat + case.eps) + floor
            if model.ftz:
                err = err + FLT_MIN * ((1 + ax) / s + 2 * math.sqrt(case.cols))
    return err, e1


def _norm_bound(case: Case, ref: GradReference, model: ErrorModel, row_reduction: str) -> GradTolerance:
    """dx: ``rstd [(3k/2 + 12) u (|g_i| + G1 + |xhat_i| G2) + E_i G2 + |xhat_i| mean(|g| E)
    + (e1 + e1^2) (|g_i| + G1 + |xhat_i| G2)]`` with ``g = dy gamma``, ``G1 = mean|g|`` (layer norm; 0 for
    RMS norm), ``G2 = mean|g xhat|`` and ``E`` the forward's error in xhat. dgamma:
    ``(k_R + 2) u sum_r |dy xhat| + sum_r |dy| E + 4 tiny sum_r (1 + rstd)``; dbeta:
    ``(k_R + 2) u sum_r |dy|``, ``k_R`` the depth of the row reduction (docs/tolerances.md, "Gradients")."""
    layer = case.op == "layernorm_backward"
    k = model.k(case.cols)
    k_rows = row_depth(model, case.rows, row_reduction)
    u = model.unit_roundoff
    tiny = _tiny(model)
    dy = np.abs(case.dy.astype(np.float64))
    g = dy * np.abs(case.gamma.astype(np.float64))[None, :]
    ax = np.abs(ref.xhat)
    err, e1 = _xhat_error(case, ref, model)
    with np.errstate(all="ignore"):
        g1 = np.mean(g, axis=1, keepdims=True) if layer else 0.0
        g2 = np.mean(g * ax, axis=1, keepdims=True)
        cancelling = g + g1 + ax * g2
        # The kernel's rstd multiplies every term: off by what the forward's bound accepts of it,
        # e1 relative (a Welford variance, PyTorch's, loses O(k u kappa); a two-pass one e1^2).
        dx = ref.rstd * (((1.5 * k + 12) * u + e1 + e1 * e1) * cancelling + err * g2
                         + ax * np.mean(g * err, axis=1, keepdims=True))
        # Products and sums below FLT_MIN: each of the C terms of a mean may lose ``tiny``. The
        # projection's mean may be taken of g (x - mean) rather than of g xhat, then scaled by
        # (x - mean) rstd^3 = xhat rstd^2 (PyTorch's CUDA and Liger's RMS norm backward): its
        # terms lie rstd below g xhat's, and a loss below FLT_MIN there grows by xhat rstd^2.
        dx = dx + 4 * tiny * (ref.rstd * (case.cols + 2) * (1 + ax) + 1 + ax * ref.rstd**2)
        # The projection's per-row scalar may be formed first and then multiplied by x_j - mean =
        # xhat_j / rstd (autograd's RMS norm: rstd^3 sum(g x) times -0.5, divided by C, then
        # times 2 x_j). Where the scalar lies below FLT_MIN, its roundings after rstd^3 lose up to
        # min(tiny, |scalar|) / 2 each, absolutely, and 2 x_j / C and 2 x_j multiply them: at most
        # (1 + 1/C) min(tiny, scalar) |x_j|, and the bound allows 4. That is allowed only where the
        # projection's term in dx_j is itself below FLT_MIN: where it is not, losing it is the
        # underflow bug of such kernels (docs/ecosystem.md, finding 17), which stays caught.
        scalar = ref.rstd**2 * g2
        own = ax * ref.rstd * g2
        below = own < FLT_MIN
        dx = dx + np.where((scalar < FLT_MIN) & below,
                           4 * np.minimum(tiny, scalar) * ax / ref.rstd, 0.0)
        # Or xhat_j is divided by C first and the quotient multiplied by the row's sum(g xhat)
        # (PyTorch's decomposition of _fused_rms_norm_backward, which Inductor compiles:
        # (g - (xhat / C) sum(g xhat)) rstd). Where xhat_j / C lies below FLT_MIN it rounds by up
        # to min(tiny, xhat_j / C) / 2, absolutely, and C G2 rstd multiplies that; the bound allows
        # 4. Under the same condition: the term itself below FLT_MIN, so it may be lost, no more.
        share = ax / case.cols
        dx = dx + np.where((share < FLT_MIN) & below,
                           4 * np.minimum(tiny, share) * case.cols * g2 * ref.rstd, 0.0)
        tol = {"dx": dx}
        sums = ~ref.poisoned[:, None]
        # Each term dy (x - mean) rstd may round dy (x - mean) below FLT_MIN before rstd scales it
        # (PyTorch's CUDA kernels and Apex multiply in that order): that rounding's ``tiny`` grows
        # by the row's rstd.
        underflow = 4 * tiny * (np.sum(np.where(sums, 1 + ref.rstd, 0.0), axis=0) + 1)
        tol["dgamma"] = (np.sum(np.where(sums, (k_rows + 2) * u * dy * ax + dy * err, 0.0), axis=0)
                         + underflow)[None, :]
        # A row past e1 = 0.25 adds a term with no digits left (its xhat may be off by any factor:
        # a Welford variance of two values an ulp apart is 0): such a column is asked to be finite.
        lost = np.any(sums & (e1 > 0.25) & (dy != 0), axis=0)[None, :]
        tol["dgamma"] = np.where(lost, np.inf, tol["dgamma"])
        if ref.poisoned.any():
            tol["dgamma"] = np.full_like(tol["dgamma"], np.nan)
        if layer:
            # k_R u sum|dy| is reached (err/tol 0.99999 on two rows summed in turn): two more
            # roundings of room, as dgamma has, for a kernel that stores or converts its partials.
            tol["dbeta"] = ((k_rows + 2) * u * np.sum(dy, axis=0) + 4 * tiny)[None, :]
    # Past e1 = 0.25 the forward has no digits left to ask for, and nor has dx (nor dgamma, above).
    return GradTolerance(tol, e1[:, 0] > 0.25)


def _table(case: Case, ref: GradReference) -> GradTolerance:
    rtol = max(TABLE_RTOL, 4.0 * 2.0**-23 * math.sqrt(case.cols))
    with np.errstate(all="ignore"):
        tol = {name: TABLE_ATOL + rtol * np.abs(z) for name, z in ref.z.items()}
    return GradTolerance(tol, np.zeros(case.rows, bool))


def grad_tolerance(case: Case, ref: GradReference, *, model: ErrorModel, policy: str = "default",
                   row_reduction: str = "blocks") -> GradTolerance:
    """The bound of each output of ``case`` under ``model`` (``row_reduction``: how dgamma and
    dbeta combine rows), with the output's rounding to a narrow storage type added."""
    if policy == "table":
        tol = _table(case, ref)
    elif policy != "default":
        raise ValueError(f"policy must be 'default' or 'table' but was {policy!r}")
    elif case.op == "softmax_backward":
        tol = _softmax_bound(case, ref, model)
    else:
        tol = _norm_bound(case, ref, model, row_reduction)
    if case.dtype == "float32":
        return tol
    kind = get_dtype(case.dtype)
    with np.errstate(all="ignore"):
        wider = {name: t + kind.u * np.abs(np.nan_to_num(ref.z[name], nan=0.0, posinf=0.0,
                                                         neginf=0.0)) + kind.tiny
                 for name, t in tol.tol.items()}
    return GradTolerance(wider, tol.finite_only)

