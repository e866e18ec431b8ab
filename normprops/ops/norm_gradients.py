"""The gradients of the two norms, ``rmsnorm_backward`` (about zero) and ``layernorm_backward``
(about the row mean, ``centred``): exact float64 and mpmath references and their bounds
(docs/tolerances.md, "Gradients"). :mod:`normprops.ops.rmsnorm` and :mod:`normprops.ops.layernorm`
declare the ops; the math they share is here, once.

A norm's ``dx = rstd (g - mean(g) - xhat mean(g xhat))`` cancels, so its bound scales with the
magnitudes of the terms that cancel, not with the result; dgamma and dbeta grow with the rows summed
and the depth of the row reduction (``ops.ROW_REDUCTIONS``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import mpmath
import numpy as np

from normprops.errormodel import ErrorModel
from normprops.ops.common import (
    FLT_MAX,
    FLT_MIN,
    GradReference,
    GradTolerance,
    col_sum,
    row_depth,
    row_sum,
)
from normprops.ops.common import (
    tiny as _tiny,
)

if TYPE_CHECKING:
    from normprops.case import Case

__all__ = ["norm_gradients64", "norm_gradients_exact", "norm_gradients_bound", "xhat64"]


def norm_gradients64(case: Case, *, centred: bool) -> GradReference:
    """The exact dx, dgamma (and, ``centred``, dbeta) of a norm's case in float64."""
    layer = centred
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
        z = {"dx": dx, "dgamma": col_sum(dy * xhat)}
        if layer:
            z["dbeta"] = col_sum(dy)
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


def norm_gradients_exact(case: Case, rows: np.ndarray, ref: GradReference, prec: int,
                         columns: bool = True, *, centred: bool) -> dict[str, np.ndarray]:
    """dx of ``rows`` and, with ``columns``, every column sum at ``prec`` bits (the column sums from
    every finite row)."""
    z = {name: value.copy() for name, value in ref.z.items()}
    layer = centred
    with mpmath.workprec(prec):
        sums = {name: [mpmath.mpf(0)] * case.cols for name in z if name != "dx"}
        for r in range(case.rows):
            if ref.poisoned[r] or not (columns or rows[r]):
                continue
            dy = [mpmath.mpf(float(v)) for v in case.dy[r]]
            xs = [mpmath.mpf(float(v)) for v in case.x[r]]
            n = len(xs)
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


def _xhat_error(case: Case, ref: GradReference, model: ErrorModel, *,
                centred: bool) -> tuple[np.ndarray, np.ndarray]:
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
        if centred:
            e1 = model.layernorm_e1(case.cols, ref.kappa)
            err = e1 * (1 + ax) + e1 * e1 * ax + (k / 2 + 8) * u * ax + floor
            if model.ftz:
                moved = 1 / s + 0.5 / (s * s)
                if model.variance == "one_pass":  # as the forward's (ops.layernorm)
                    moved = (1 + (k + 3) * ref.kappa) / s + 1 / (s * s)
                err = err + FLT_MIN * ((k + 2) / s + ax * moved)
        else:
            e1 = np.zeros((case.rows, 1))
            err = (k / 2 + 8) * u * ax + ax * FLT_MIN / (ref.stat + case.eps) + floor
            if model.ftz:
                err = err + FLT_MIN * ((1 + ax) / s + 2 * math.sqrt(case.cols))
    return err, e1


def norm_gradients_bound(case: Case, ref: GradReference, model: ErrorModel,
                         row_reduction: str = "blocks", *, centred: bool) -> GradTolerance:
    """dx: ``rstd [(3k/2 + 12) u (|g_i| + G1 + |xhat_i| G2) + E_i G2 + |xhat_i| mean(|g| E)
    + (e1 + e1^2) (|g_i| + G1 + |xhat_i| G2)]`` with ``g = dy gamma``, ``G1 = mean|g|`` (layer norm; 0 for
    RMS norm), ``G2 = mean|g xhat|`` and ``E`` the forward's error in xhat. dgamma:
    ``(k_R + 2) u sum_r |dy xhat| + sum_r |dy| E + 4 tiny sum_r (1 + rstd)``; dbeta:
    ``(k_R + 2) u sum_r |dy|``, ``k_R`` the depth of the row reduction (docs/tolerances.md, "Gradients")."""
    layer = centred
    k = model.k(case.cols)
    k_rows = row_depth(model, case.rows, row_reduction)
    u = model.unit_roundoff
    tiny = _tiny(model)
    dy = np.abs(case.dy.astype(np.float64))
    g = dy * np.abs(case.gamma.astype(np.float64))[None, :]
    ax = np.abs(ref.xhat)
    err, e1 = _xhat_error(case, ref, model, centred=centred)
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


def xhat64(x: np.ndarray, eps: float, *, centred: bool) -> np.ndarray:
    """The exact normalized rows of ``x`` (non-finite entries taken as 0): what a norm gradient's
    dy is drawn against."""
    with np.errstate(all="ignore"):
        x = np.where(np.isfinite(x), x, 0.0).astype(np.float64)
        d = x - x.mean(axis=1, keepdims=True) if centred else x
        return d / np.sqrt(np.mean(d * d, axis=1, keepdims=True) + eps)
