"""Compare a kernel's output with the reference and say, in one format, what is wrong.

Every check is vectorized first (one boolean array over the whole batch); only when something fails
is the worst element located and described. A non-finite output where the exact result is finite
fails outright, naming row and column.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from normprops.case import Case
from normprops.ops import PROPERTIES, SOFTMAX_OPS
from normprops.oracles import Reference, Tolerance

__all__ = [
    "Verdict",
    "PROPERTIES",
    "judge_output",
    "judge_bitwise",
    "judge_close",
    "judge_exact_constant",
    "range_rows",
    "bits_equal",
    "ratio_fit",
    "softmax_ratios",
    "RatioFit",
]


def _num(value: float | None, digits: int = 5) -> str:
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return repr(float(value))
    return f"{value:.{digits}g}"


def _distinct(got: float | None, expected: float | None) -> tuple[str, str]:
    """``got`` and ``expected`` with the fewest significant digits (at least 5) that tell them
    apart: ``got 0.99999988 expected 1``, never ``got 1 expected 1``."""
    digits = 5
    while (digits < 17 and got is not None and expected is not None and got != expected
           and _num(got, digits) == _num(expected, digits)):
        digits += 1
    return _num(got, digits), _num(expected, digits)


def _compact(value: float) -> str:
    """3.9e4 rather than 3.9e+04: the ratio in a verdict line. A ratio just past 1 keeps the digits
    that show it past 1 (1.004, not 1)."""
    digits = 2
    text = f"{value:.{digits}g}"
    while value > 1 and float(text) <= 1 and digits < 9:
        digits += 1
        text = f"{value:.{digits}g}"
    mantissa, sep, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if sep else text


def nonfinite_reason(got: float, exact: float) -> str:
    """A non-finite output, and what it is, where the exact result is finite: "non-finite output
    nan where the exact result is 1"."""
    return f"non-finite output {float(got)} where the exact result is {float(exact):.5g}"


#: Properties judged by comparing the kernel's output on a transformed copy of the case with its
#: output on the case (judge_close).
_AGAINST_ITSELF = frozenset({"shift_invariance", "scale_invariance"})


@dataclass(frozen=True)
class Verdict:
    """One failed property on one example, located at its worst element."""

    label: str  # op[impl]
    property: str
    family: str
    row: int | None
    col: int | None
    got: float | None
    expected: float | None
    error: float | None
    tolerance: float | None
    ratio: float  # error / tolerance; inf for outright failures
    reason: str
    # When the failing output came from another input than the case itself (the case's rows tiled
    # into a stress batch, reversed, alone): that input, in words. ``row`` is still the case's row
    # whose copy failed, so the case describes the values.
    batch: str | None = None
    # Gradient ops: the output the verdict is about ("dx", "dgamma", "dbeta"); dgamma and dbeta
    # have no row.
    output: str | None = None

    @classmethod
    def contract(cls, label: str, family: str, reason: str) -> Verdict:
        """The kernel broke its calling contract (raised, returned the wrong thing, hung)."""
        return cls(label, "contract", family, None, None, None, None, None, None, math.inf, reason)

    def message(self) -> str:
        head = f"{self.label} {self.family} {self.property}"
        where = ("" if self.row is None
                 else f" row {self.row}" + ("" if self.col is None else f" col {self.col}"))
        if self.output is not None:
            parts = [f"{name} {value}" for name, value in (("row", self.row), ("col", self.col))
                     if value is not None]
            where = f" {self.output}[{' '.join(parts)}]:" if parts else f" {self.output}:"
        if self.error is not None and self.tolerance is not None:
            ratio = f" (x{_compact(self.ratio)})" if math.isfinite(self.ratio) else ""
            got, expected = _distinct(self.got, self.expected)
            # A metamorphic property compares the kernel with itself: no value is "expected".
            names = ("copy", "original") if self.property in _AGAINST_ITSELF else ("got", "expected")
            error, tolerance = _distinct(self.error, self.tolerance)
            detail = (f" {names[0]} {got} {names[1]} {expected} "
                      f"|err| {error} > tol {tolerance}{ratio}")
            return f"{head}:{where}{detail}" + (f"; {self.reason}" if self.reason else "")
        return f"{head}:{where} {self.reason}"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("got", "expected", "error", "tolerance", "ratio"):
            v = out[key]
            out[key] = None if v is None else (v if math.isfinite(v) else repr(float(v)))
        out["message"] = self.message()
        return out


def bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise bitwise equality of float32 arrays, any NaN equal to any NaN."""
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def _worst(score: np.ndarray, mask: np.ndarray) -> tuple[int, int]:
    masked = np.where(mask, score, -np.inf)
    r, c = np.unravel_index(int(np.argmax(masked)), masked.shape)
    return int(r), int(c)


class _Verdicts:
    """Collects at most one verdict per property: the worst element of the first failure."""

    def __init__(self, label: str, family: str) -> None:
        self.label = label
        self.family = family
        self.found: dict[str, Verdict] = {}

    def add(self, prop: str, *, row: int | None = None, col: int | None = None,
            got: float | None = None, expected: float | None = None, error: float | None = None,
            tolerance: float | None = None, ratio: float = math.inf, reason: str = "") -> None:
        if prop in self.found:
            return
        self.found[prop] = Verdict(self.label, prop, self.family, row, col,
                                   None if got is None else float(got),
                                   None if expected is None else float(expected),
                                   None if error is None else float(error),
                                   None if tolerance is None else float(tolerance),
                                   float(ratio), reason)


def range_rows(ref: Reference, tol: Tolerance) -> np.ndarray:
    """Per row: judged by ``range_safety`` rather than ``accuracy`` / ``finite``: the rows outside
    the accuracy domain, where the arithmetic the kernel declares must overflow
    (:func:`normprops.oracles.declared_out_of_domain`). Which family drew a row does not matter:
    an in-domain row of ``huge`` is judged as any other."""
    return ~ref.in_domain if tol.ranged is None else tol.ranged


def judge_output(case: Case, out: np.ndarray, ref: Reference, tol: Tolerance, *,
                 label: str, skip: frozenset[str] = frozenset()) -> tuple[list[Verdict], float]:
    """Judge one output against its reference. Returns the failures and the worst err/tol ratio
    over judged elements (the quantity ``hypothesis.target`` maximizes), leaving out the elements
    of a property in ``skip``: a hunt neither reports nor steers toward what it does not judge."""
    v = _Verdicts(label, case.family)
    got = out.astype(np.float64)
    with np.errstate(all="ignore"):
        err = np.abs(got - ref.z)
        ratio = err / tol.tol

    judged = ref.judged_rows[:, None] & np.isfinite(ref.z)
    accurate_rows = (~tol.finite_only)[:, None]
    range_row = range_rows(ref, tol)[:, None]
    finite_prop = "finite"

    # Non-finite output where the exact result is finite: an outright failure.
    got_finite = np.isfinite(got)
    bad = judged & ~got_finite
    if bad.any():
        r, c = _worst(np.ones_like(err), bad)
        prop = "range_safety" if range_row[r, 0] else finite_prop
        v.add(prop, row=r, col=c, got=got[r, c], expected=ref.z[r, c],
              reason=nonfinite_reason(got[r, c], ref.z[r, c]))

    check = judged & accurate_rows & got_finite
    failing = check & ~(err <= tol.tol)
    if failing.any():
        for prop, rows_mask in (("range_safety", range_row), ("accuracy", ~range_row)):
            sel = failing & rows_mask
            if sel.any():
                r, c = _worst(ratio, sel)
                v.add(prop, row=r, col=c, got=got[r, c], expected=ref.z[r, c], error=err[r, c],
                      tolerance=tol.tol[r, c], ratio=ratio[r, c])
    counted = check
    if "range_safety" in skip:
        counted = counted & ~range_row
    if "accuracy" in skip:
        counted = counted & range_row
    worst_ratio = float(np.max(np.where(counted, ratio, 0.0))) if counted.any() else 0.0
    if tol.ratio_tol is not None:
        _judge_ratios(got, ref, tol.ratio_tol, range_row[:, 0], v)

    # Rows with NaN/inf input: NaN, or the IEEE limit where one exists.
    if ref.nonfinite_rows.any():
        nf = ref.nonfinite_rows[:, None] & np.ones_like(judged)
        allowed = np.isnan(got) | (~np.isnan(ref.limit) & (got == ref.limit))
        bad = nf & ~allowed
        if bad.any():
            r, c = _worst(np.ones_like(err), bad)
            expected = "NaN" if np.isnan(ref.limit[r, c]) else f"NaN or {ref.limit[r, c]:.5g}"
            v.add("nan_propagation", row=r, col=c, got=got[r, c],
                  reason=f"got {got[r, c]:.5g} in a row with a non-finite input; expected {expected}")

    if ref.masked_rows.any():
        for r in np.nonzero(ref.masked_rows)[0]:
            row = got[r]
            if not (np.isnan(row).all() or (row == 0).all()):
                c = int(np.argmax(~np.isnan(row) & (row != 0))) if not np.isnan(row).all() else 0
                v.add("masked_rows", row=int(r), col=c, got=row[c],
                      reason="a fully masked row must be all NaN or all zeros, not a mixture")
                break

    if case.op in SOFTMAX_OPS:
        _judge_softmax_shape(case, got, ref, tol, v)
    return list(v.found.values()), worst_ratio


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
                  v: _Verdicts) -> None:
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


def judge_exact_constant(case: Case, out: np.ndarray, *, label: str) -> Verdict | None:
    """The opt-in ``exact_constant`` property: every exactly constant finite row of a layer norm
    gives ``beta`` exactly (``x - mean`` is exactly 0 when the mean is), every all-zero row of an
    RMS norm gives exactly 0. A constant nonzero RMS norm row has no exact answer
    (``sign(c) gamma |c| / sqrt(c^2 + eps)`` is rounded), and softmax has no such row; both pass."""
    x = case.x
    if case.op == "layernorm":
        rows = np.isfinite(x).all(axis=1) & (x == x[:, :1]).all(axis=1)
        want = np.broadcast_to(case.beta[None, :], x.shape)
        what = "an exactly constant row must give beta exactly (x - mean is exactly 0)"
    elif case.op == "rmsnorm":
        rows = (x == 0).all(axis=1)
        want = np.zeros_like(x)
        what = "an all-zero row must give exactly 0"
    else:
        return None
    with np.errstate(all="ignore"):
        bad = rows[:, None] & ~(out == want)
    if not bad.any():
        return None
    r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
    v = _Verdicts(label, case.family)
    v.add("exact_constant", row=int(r), col=int(c), got=out[r, c], expected=want[r, c],
          reason=f"{what}; got {float(out[r, c])!r}, expected {float(want[r, c])!r} "
                 f"({int(bad[r].sum())} of {case.cols} columns differ)")
    return v.found["exact_constant"]


def _judge_softmax_shape(case: Case, got: np.ndarray, ref: Reference, tol: Tolerance,
                         v: _Verdicts) -> None:
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
            r, c = _worst(np.abs(got - 0.5), out_of_range)
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


def judge_bitwise(prop: str, first: np.ndarray, second: np.ndarray, *, case: Case, label: str,
                  rows: np.ndarray | None = None, origin: np.ndarray | None = None,
                  batch: str | None = None, what: str) -> Verdict | None:
    """Bitwise equality of two outputs that must be identical: ``first[rows]`` (``first`` when
    ``rows`` is None) against ``second``.

    The verdict names the case's row: ``origin`` maps a row of ``second`` to it (default ``rows``,
    or the same row). When ``second`` came from another input than the case (``batch`` says which,
    e.g. "a stress batch of 2048 rows"), the verdict says which of its rows failed."""
    expected = first if rows is None else first[rows]
    same = bits_equal(expected, second)
    if same.all():
        return None
    r, c = np.unravel_index(int(np.argmax(~same)), same.shape)
    mapping = origin if origin is not None else rows
    src = int(r) if mapping is None else int(mapping[r])
    v = _Verdicts(label, case.family)
    diff = abs(float(second[r, c]) - float(expected[r, c]))
    v.add(prop, row=src, col=int(c), got=second[r, c], expected=expected[r, c],
          reason=f"{what}: {float(second[r, c])!r} vs {float(expected[r, c])!r} "
                 f"(differs by {diff:.3g}; must be bitwise equal)")
    found = v.found[prop]
    if batch is not None:
        found = replace(found, batch=f"row {int(r)} of {batch}, a copy of the case's row {src}")
    return found


def judge_close(prop: str, base: np.ndarray, other: np.ndarray, tol: np.ndarray, *, case: Case,
                label: str, rows: np.ndarray, what: str) -> Verdict | None:
    """Two outputs that must agree within the sum of their tolerances (metamorphic properties)."""
    with np.errstate(all="ignore"):
        a = base.astype(np.float64)
        b = other.astype(np.float64)
        err = np.abs(a - b)
        ok = (err <= tol) | (np.isnan(a) & np.isnan(b)) | (a == b)
    sel = rows[:, None] & ~ok
    if not sel.any():
        return None
    with np.errstate(all="ignore"):
        ratio = np.where(np.isfinite(err), err / tol, np.inf)
    r, c = _worst(ratio, sel)
    v = _Verdicts(label, case.family)
    v.add(prop, row=r, col=c, got=b[r, c], expected=a[r, c], error=err[r, c],
          tolerance=tol[r, c], ratio=ratio[r, c], reason=what)
    return v.found[prop]
