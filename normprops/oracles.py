"""References, condition numbers and tolerances.

Each reference is computed from the exact float32 inputs: float64, two-pass, with every signed row sum
either exact (``math.fsum``) or, when float64's pairwise sum is provably accurate to far better than
float32 needs, pairwise (``row_sum``). An mpmath reference at a chosen precision cross-checks float64
and takes over for any row where float64's own error bound is not negligible against the tolerance.

Tolerances follow the error analysis in ``docs/tolerances.md`` (condition-aware: layer norm's error
grows with ``kappa = mean|x| / sqrt(var + eps)``, softmax's with ``|x_j - max|``). A flat table
gate ``atol + rtol*|ref|`` is kept as the selectable ``"table"`` policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import mpmath
import numpy as np

from normprops.case import Case
from normprops.dtypes import get_dtype
from normprops.errormodel import ErrorModel
from normprops.masking import argument_rounding, logits, scaled_in_range
from normprops.ops import SOFTMAX_OPS

__all__ = [
    "U",
    "FLT_MIN",
    "FLT_MAX",
    "POLICIES",
    "ORACLES",
    "Reference",
    "Tolerance",
    "reference",
    "tolerance",
    "row_sum",
    "mp_reference",
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


@dataclass(frozen=True)
class Reference:
    """The exact result of one case and what the judge needs to know about each row.

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


def _softmax64(x32: np.ndarray) -> Reference:
    return _softmax_of(x32.astype(np.float64), op="softmax")


def _masked_softmax64(case: Case) -> Reference:
    """The softmax of the exact logits (``scale * x`` with the mask applied). Rows where some
    ``scale * x`` lies past float32's range are outside the accuracy domain."""
    t = logits(case.x, case.mask, case.scale, case.mask_fill)
    ref = _softmax_of(t, op="masked_softmax")
    return Reference(**{**ref.__dict__, "in_domain": ref.in_domain & scaled_in_range(case.x, case.scale)})


def _softmax_of(x: np.ndarray, *, op: str) -> Reference:
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


def _layernorm64(x32: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> Reference:
    x = x32.astype(np.float64)
    g = gamma.astype(np.float64)[None, :]
    b = beta.astype(np.float64)[None, :]
    eps = float(eps)  # NEP 50: a float32 eps would drag the reference down to float32
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
    return Reference("layernorm", z, limit, nonfinite, np.zeros(rows, bool), in_domain, y, kappa,
                     var, np.max(np.abs(xr), axis=1, keepdims=True))


def _rmsnorm64(x32: np.ndarray, gamma: np.ndarray, eps: float) -> Reference:
    x = x32.astype(np.float64)
    g = gamma.astype(np.float64)[None, :]
    eps = float(eps)
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
    return Reference("rmsnorm", z, limit, nonfinite, np.zeros(rows, bool), in_domain, y,
                     np.ones((rows, 1)), ms, np.max(np.abs(xr), axis=1, keepdims=True))


# --- mpmath ------------------------------------------------------------------------------------


def _mp_row(op: str, row: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None,
            eps: float | None) -> list[float]:
    xs = [mpmath.mpf(float(v)) for v in row]
    n = len(xs)
    if op == "softmax":
        return _mp_softmax(xs)
    if op == "layernorm":
        mu = mpmath.fsum(xs) / n
        var = mpmath.fsum((v - mu) ** 2 for v in xs) / n
        s = mpmath.sqrt(var + mpmath.mpf(float(eps)))
        return [float((v - mu) / s * mpmath.mpf(float(g)) + mpmath.mpf(float(b)))
                for v, g, b in zip(xs, gamma, beta)]
    ms = mpmath.fsum(v * v for v in xs) / n
    r = mpmath.sqrt(ms + mpmath.mpf(float(eps)))
    return [float(v / r * mpmath.mpf(float(g))) for v, g in zip(xs, gamma)]


def mp_reference(case: Case, *, rows: np.ndarray | None = None, prec: int = 200) -> np.ndarray:
    """The exact result of ``case`` at ``prec`` bits, rounded to float64 (NaN for rows with NaN or
    infinities, except softmax rows that are only partly masked with -inf)."""
    if prec < 64:
        raise ValueError(f"prec must be at least 64 bits (float64 has 53) but was {prec}")
    selected = range(case.rows) if rows is None else np.nonzero(rows)[0]
    out = np.full(case.x.shape, np.nan)
    softmax = case.op in SOFTMAX_OPS
    # The usable rows are decided on float64 logits, whose non-finite entries are the exact ones'.
    t = logits(case.x, case.mask, case.scale, case.mask_fill) if case.op == "masked_softmax" else case.x
    with mpmath.workprec(prec):
        for r in selected:
            row = t[r]
            usable = np.isfinite(row).all() or (
                softmax and not np.isnan(row).any() and not np.isposinf(row).any()
                and not np.isneginf(row).all())
            if not usable:
                continue
            if case.op == "masked_softmax":
                out[r] = _mp_softmax(_mp_logits(case, r))
            else:
                out[r] = _mp_row(case.op, row, case.gamma, case.beta, case.eps)
    return out


def _mp_softmax(xs: list[mpmath.mpf]) -> list[float]:
    m = max(xs)
    e = [mpmath.exp(v - m) for v in xs]
    total = mpmath.fsum(e)
    return [float(v / total) for v in e]


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


def _float64_not_enough(ref: Reference, case: Case) -> np.ndarray:
    """Rows where float64's own error could reach 1e-3 of the float32 tolerance.

    The float64 reference errs by at most about ``(log2 C + 6) * 2^-53`` relative to the quantities
    the float32 bound scales with (``kappa`` for layer norm, ``|x - m|`` for softmax), so float64
    suffices whenever that is far below ``u``; this is the a-posteriori check of that claim.
    """
    depth = math.log2(max(case.cols, 2)) + 6
    if ref.op == "layernorm":
        rel = depth * U64 * ref.kappa[:, 0]
        return ref.judged_rows & (rel > 1e-3 * U * np.maximum(ref.kappa[:, 0], 1.0))
    if ref.op in SOFTMAX_OPS:
        spread = np.where(ref.judged_rows, ref.stat[:, 0], 0.0)
        return ref.judged_rows & (depth * U64 * (1 + spread) > 1e-3 * U * 10)
    return np.zeros(case.rows, dtype=bool)


def reference(case: Case, *, oracle: str = "float64") -> Reference:
    """The exact result of ``case``: float64 (escalating rows to mpmath if needed) or all mpmath."""
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES} but was {oracle!r}")
    if case.op == "softmax":
        ref = _softmax64(case.x)
    elif case.op == "masked_softmax":
        ref = _masked_softmax64(case)
    elif case.op == "layernorm":
        ref = _layernorm64(case.x, case.gamma, case.beta, case.eps)
    else:
        ref = _rmsnorm64(case.x, case.gamma, case.eps)
    redo = ref.judged_rows if oracle == "mpmath" else _float64_not_enough(ref, case)
    if redo.any():
        exact = mp_reference(case, rows=redo)
        z = np.where(redo[:, None], exact, ref.z)
        return Reference(**{**ref.__dict__, "z": z, "oracle": "mpmath" if oracle == "mpmath"
                            else "float64+mpmath"})
    return ref


# --- tolerances --------------------------------------------------------------------------------


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


def _default_softmax(case: Case, ref: Reference, model: ErrorModel) -> Tolerance:
    k = model.k(case.cols)
    u = model.unit_roundoff
    with np.errstate(all="ignore"):
        dist = np.where(ref.y > 0, np.abs(ref.logits - ref.row_max), 0.0)
        rel = u * (model.rho * k + 10 + model.c_x * (dist + ref.stat))
        if case.op == "masked_softmax":
            # Rounding the logits themselves: exp(p_j + ln sum_k g_k exp(p_k)) - 1 at most.
            p = _argument_rounding(case, model)
            q = np.log(np.sum(np.where(ref.y > 0, ref.y * np.exp(p), 0.0), axis=1, keepdims=True))
            extra = np.where(ref.y > 0, np.expm1(p + q), 0.0)
            rel = rel + extra * (1 + rel)
        tol = ref.y * rel + 2 * FLT_MIN
        if case.op == "masked_softmax":
            # Where g_j underflows float64 its bound g_j exp(p_j + q) need not: a rounding of
            # scale * x_j wider than t_j's distance below the max can lift y_j to 1/2 (two
            # logits 7.8e17 apart that round to one float32). Taken in logs, ln g_j = t_j - m - ln S.
            log_g = ref.logits - ref.row_max + np.log(np.max(ref.y, axis=1, keepdims=True))
            lifted = ref.judged_rows[:, None] & (ref.y == 0) & np.isfinite(ref.logits)
            tol = tol + np.where(lifted, np.exp(log_g + p + q) * (1 + rel), 0.0)
    sum_tol = u * (model.rho * k + 10 + 7 * math.log(case.cols)) + 2 * case.cols * FLT_MIN
    return Tolerance(tol, np.zeros(case.rows, bool), sum_tol, _ratio_tolerance(case, ref, model))


def _argument_rounding(case: Case, model: ErrorModel) -> np.ndarray:
    return argument_rounding(case.x, case.mask, case.scale, case.mask_fill,
                             unit_roundoff=model.unit_roundoff, arithmetic=model.arithmetic)


def _ratio_tolerance(case: Case, ref: Reference, model: ErrorModel) -> np.ndarray:
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
        if case.op == "masked_softmax":
            rel = rel + _argument_rounding(case, model)  # its own element's; the rest is the row's
        if case.dtype != "float32":
            rel = rel + kind.u  # the output's rounding to the storage type
        judged = ref.judged_rows[:, None] & (ref.y >= 2 * kind.min_normal)
    return np.where(judged, rel, np.nan)


def _default_layernorm(case: Case, ref: Reference, model: ErrorModel) -> Tolerance:
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


def _default_rmsnorm(case: Case, ref: Reference, model: ErrorModel) -> Tolerance:
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


def _table_policy(case: Case, ref: Reference, model: ErrorModel) -> Tolerance:
    """The flat table gate: atol + max(1e-5, 4 * 2^-23 * sqrt(C)) * |ref|, condition-blind."""
    rtol = max(TABLE_RTOL, 4.0 * 2.0**-23 * math.sqrt(case.cols))
    with np.errstate(all="ignore"):
        tol = TABLE_ATOL + rtol * np.abs(ref.z)
    sum_tol = TABLE_ATOL * case.cols + rtol if case.op in SOFTMAX_OPS else None
    return Tolerance(tol, np.zeros(case.rows, bool), sum_tol)


_DEFAULT: dict[str, Callable[[Case, Reference, ErrorModel], Tolerance]] = {
    "softmax": _default_softmax,
    "masked_softmax": _default_softmax,
    "layernorm": _default_layernorm,
    "rmsnorm": _default_rmsnorm,
}


def declared_out_of_domain(case: Case, ref: Reference, model: ErrorModel) -> np.ndarray:
    """Per row: outside the accuracy domain of the arithmetic ``model`` declares, where some
    intermediate must leave float32's range (docs/tolerances.md, "Range safety"): the op's own
    domain (``Reference.in_domain``, False for a non-finite row too), and a one-pass layer norm's
    x*x past sqrt(FLT_MAX / cols)."""
    out = ~ref.in_domain
    if case.op == "layernorm" and model.variance == "one_pass":
        out = out | (ref.row_max[:, 0] > math.sqrt(FLT_MAX / case.cols))
    return out


def tolerance(case: Case, ref: Reference, *, model: ErrorModel, policy: str = "default") -> Tolerance:
    if policy == "default":
        tol = _DEFAULT[case.op](case, ref, model)
    elif policy == "table":
        tol = _table_policy(case, ref, model)
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
