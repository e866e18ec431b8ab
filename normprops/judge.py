"""Compare a kernel's output with the reference and say, in one format, what is wrong.

Every check is vectorized first (one boolean array over the whole batch); only when something fails
is the worst element located and described. A non-finite output where the exact result is finite
fails outright, naming row and column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from normprops.case import Case
from normprops.dtypes import get_dtype
from normprops.ops import PROPERTIES, NamedExact, get_op
from normprops.ops.common import GradReference, GradTolerance, Reference, Tolerance
from normprops.ops.softmax import RatioFit, ratio_fit, softmax_ratios
from normprops.verdict import (
    Verdict,
    Verdicts,
    bits_equal,
    nonfinite_reason,
    range_rows,
    worst,
)

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
    "judge",
    "judge_grads",
    "judge_grads_bitwise",
    "with_exact",
    "judge_named",
    "judge_named_bitwise",
    "judge_named_close",
    "rounded_past_range",
]


def rounded_past_range(got: np.ndarray, exact: np.ndarray, tol: np.ndarray, *,
                       dtype: str) -> np.ndarray:
    """Where an infinity is a correct output: ``got`` is the infinity of the exact value's sign and
    the exact magnitude, widened by the element's tolerance, reaches the storage type's overflow
    threshold (its largest value plus half an ulp, :attr:`StorageType.overflow`: 65520 in float16).
    Round to nearest takes a value there to that infinity, and a value within the tolerance of it
    may be computed there. NaN is never such an output, nor an infinity of the other sign. Only a
    finite tolerance widens the exact value: an infinite one (a bound with no digits left, which
    asks for a finite result) does not, and neither should a caller's for an element it does not
    judge for accuracy (pass 0 there)."""
    threshold = get_dtype(dtype).overflow
    with np.errstate(all="ignore"):
        reach = np.abs(exact) + np.where(np.isfinite(tol), tol, 0.0) >= threshold
        return np.isinf(got) & (np.sign(got) == np.sign(exact)) & reach


def judge_output(case: Case, out: np.ndarray, ref: Reference, tol: Tolerance, *,
                 label: str, skip: frozenset[str] = frozenset()) -> tuple[list[Verdict], float]:
    """Judge one output against its reference. Returns the failures and the worst err/tol ratio
    over judged elements (the quantity ``hypothesis.target`` maximizes), leaving out the elements
    of a property in ``skip``: a hunt neither reports nor steers toward what it does not judge."""
    v = Verdicts(label, case.family)
    got = out.astype(np.float64)
    with np.errstate(all="ignore"):
        err = np.abs(got - ref.z)
        ratio = err / tol.tol

    judged = ref.judged_rows[:, None] & np.isfinite(ref.z)
    accurate_rows = (~tol.finite_only)[:, None]
    range_row = range_rows(ref, tol)[:, None]
    finite_prop = "finite"

    # Non-finite output where the exact result is finite: an outright failure, unless it is the
    # infinity the exact value may round to (rounded_past_range).
    got_finite = np.isfinite(got)
    bad = judged & ~got_finite & ~rounded_past_range(got, ref.z, np.where(accurate_rows, tol.tol, 0.0),
                                                     dtype=case.dtype)
    if bad.any():
        r, c = worst(np.ones_like(err), bad)
        prop = "range_safety" if range_row[r, 0] else finite_prop
        v.add(prop, row=r, col=c, got=got[r, c], expected=ref.z[r, c],
              reason=nonfinite_reason(got[r, c], ref.z[r, c]))

    check = judged & accurate_rows & got_finite
    failing = check & ~(err <= tol.tol)
    if failing.any():
        for prop, rows_mask in (("range_safety", range_row), ("accuracy", ~range_row)):
            sel = failing & rows_mask
            if sel.any():
                r, c = worst(ratio, sel)
                v.add(prop, row=r, col=c, got=got[r, c], expected=ref.z[r, c], error=err[r, c],
                      tolerance=tol.tol[r, c], ratio=ratio[r, c])
    counted = check
    if "range_safety" in skip:
        counted = counted & ~range_row
    if "accuracy" in skip:
        counted = counted & range_row
    worst_ratio = float(np.max(np.where(counted, ratio, 0.0))) if counted.any() else 0.0
    check = get_op(case.op).check_output
    if check is not None:  # the op's own properties (a softmax's ratios, bounds, sum, argmax)
        check(case, got, ref, tol, v)

    # Rows with NaN/inf input: NaN, or the IEEE limit where one exists.
    if ref.nonfinite_rows.any():
        nf = ref.nonfinite_rows[:, None] & np.ones_like(judged)
        allowed = np.isnan(got) | (~np.isnan(ref.limit) & (got == ref.limit))
        bad = nf & ~allowed
        if bad.any():
            r, c = worst(np.ones_like(err), bad)
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
    return list(v.found.values()), worst_ratio


def judge_exact_constant(case: Case, out: np.ndarray, *, label: str) -> Verdict | None:
    """The opt-in ``exact_constant`` property: the rows the op names (``OpSpec.exact_constant``)
    give their exact output bitwise: every exactly constant finite row of a layer norm gives
    ``beta`` (``x - mean`` is exactly 0 when the mean is), every all-zero row of an RMS norm gives 0.
    An op without such rows (softmax) passes."""
    exact = get_op(case.op).exact_constant
    if exact is None:
        return None
    rows, want, what = exact(case)
    with np.errstate(all="ignore"):
        bad = rows[:, None] & ~(out == want)
    if not bad.any():
        return None
    r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
    v = Verdicts(label, case.family)
    v.add("exact_constant", row=int(r), col=int(c), got=out[r, c], expected=want[r, c],
          reason=f"{what}; got {float(out[r, c])!r}, expected {float(want[r, c])!r} "
                 f"({int(bad[r].sum())} of {case.cols} columns differ)")
    return v.found["exact_constant"]


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
    v = Verdicts(label, case.family)
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
    r, c = worst(ratio, sel)
    v = Verdicts(label, case.family)
    v.add(prop, row=r, col=c, got=b[r, c], expected=a[r, c], error=err[r, c],
          tolerance=tol[r, c], ratio=ratio[r, c], reason=what)
    return v.found[prop]


# --- outputs by name: the gradient ops -----------------------------------------------------------
# The checks above applied to each named output: a non-finite value where the exact one is finite
# fails ``finite`` outright; an element past its bound fails ``accuracy``; rows outside the accuracy
# domain (where the declared arithmetic must overflow) are judged under ``range_safety`` instead. A
# row of x (softmax: of y) holding a NaN or an infinity must give a non-finite dx everywhere
# (``nan_propagation``); the other rows are judged as usual. Every verdict names its output:
# ``dx[row 1 col 3]``, ``dgamma[col 17]``.


def _as_rows(a: np.ndarray) -> np.ndarray:
    return a if a.ndim == 2 else a[None, :]


@dataclass(frozen=True)
class _Output:
    """Which kernel, case and named output a verdict is about."""

    label: str
    case: Case
    name: str


def _verdict(at: _Output, prop: str, row: int | None, col: int, got: float,
             expected: float | None = None, error: float | None = None,
             tolerance: float | None = None, ratio: float = math.inf, reason: str = "") -> Verdict:
    return Verdict(at.label, prop, at.case.family, row, col, float(got),
                   None if expected is None else float(expected),
                   None if error is None else float(error),
                   None if tolerance is None else float(tolerance), float(ratio), reason,
                   output=at.name)


def _past_range(z: float, dtype: str) -> str:
    return f"expected {'-' if z < 0 else ''}inf: the exact result {z:.5g} is past {dtype}'s range"


def with_exact(verdict: Verdict, exact: float, *, dtype: str) -> Verdict:
    """``verdict`` quoting ``exact`` (a sharper oracle's value of its element) as the exact result,
    with its error and err/tol from it. The verdict stands as judged: where the sharper value would
    clear the element (it cannot, while float64's error stays far inside the bound), or is not
    finite, the verdict is returned as it was."""
    if verdict.expected is None or not math.isfinite(exact) or exact == verdict.expected:
        return verdict
    # The reasons judge_grads wrote with the float64 value, written again with the sharper one.
    if verdict.reason == nonfinite_reason(verdict.got, verdict.expected):
        return replace(verdict, expected=exact, reason=nonfinite_reason(verdict.got, exact))
    if verdict.reason == _past_range(verdict.expected, dtype):
        return replace(verdict, expected=exact, reason=_past_range(exact, dtype))
    if verdict.error is None or not verdict.tolerance:
        return verdict
    error = abs(verdict.got - exact)
    if not error > verdict.tolerance:
        return verdict
    return replace(verdict, expected=exact, error=error, ratio=error / verdict.tolerance)


def judge_grads(case: Case, outs: dict[str, np.ndarray], ref: GradReference, tol: GradTolerance, *,
                label: str, skip: frozenset[str] = frozenset()) -> tuple[list[Verdict], float]:
    """Judge every output of one call. Returns the failures (per property the worst over outputs,
    dx first on ties) and the worst err/tol over the judged elements of the properties not in
    ``skip`` (what the hunt steers by)."""
    found: dict[str, Verdict] = {}

    def add(verdict: Verdict) -> None:
        held = found.get(verdict.property)
        if held is None or verdict.ratio > held.ratio:
            found[verdict.property] = verdict

    # An exact value past the storage type's largest finite one by half an ulp or more rounds to an
    # infinity (a gradient can: dy of 1e29 times rstd 1e6): that infinity, or the largest finite
    # value, of the same sign, is the right output whatever the bound. One within its bound of
    # there may give that infinity too (rounded_past_range).
    kind = get_dtype(case.dtype)
    rounds_to_inf = kind.overflow
    worst_ratio = 0.0
    for name, out in outs.items():
        at = _Output(label, case, name)
        got = _as_rows(out).astype(np.float64)
        z, t = ref.z[name], tol.tol[name]
        per_row = name == "dx"
        if per_row:
            judged = (~ref.poisoned)[:, None] & np.isfinite(z)
            ranged = np.broadcast_to((~ref.in_domain)[:, None], z.shape)
            accurate = judged & (~tol.finite_only)[:, None]
        else:
            # A NaN bound is not judged (dgamma beside a poisoned row); an infinite one asks for a
            # finite sum only.
            judged = ~np.isnan(t) & np.isfinite(z)
            summed = ~ref.poisoned if name == "dgamma" else np.ones(case.rows, bool)
            out_of_domain = bool((summed & ~ref.in_domain).any())
            ranged = np.full(z.shape, out_of_domain)
            accurate = judged
        beyond = judged & (np.abs(z) >= rounds_to_inf)
        judged = judged & ~beyond
        accurate = accurate & ~beyond
        with np.errstate(all="ignore"):
            err = np.abs(got - z)
            ratio = err / t
        row = (lambda r: r) if per_row else (lambda r: None)
        bad = beyond & ~((np.sign(got) == np.sign(z)) & (np.abs(got) >= kind.max))
        if bad.any():
            r, c = worst(np.ones_like(err), bad)
            add(_verdict(at, "range_safety" if ranged[r, c] else "accuracy", row(r),
                         c, got[r, c], z[r, c],
                         reason=_past_range(z[r, c], case.dtype)))
        bad = judged & ~np.isfinite(got) & ~rounded_past_range(got, z, np.where(accurate, t, 0.0),
                                                               dtype=case.dtype)
        if bad.any():
            r, c = worst(np.ones_like(err), bad)
            add(_verdict(at, "range_safety" if ranged[r, c] else "finite", row(r), c,
                         got[r, c], z[r, c],
                         reason=nonfinite_reason(got[r, c], z[r, c])))
        failing = accurate & np.isfinite(got) & ~(err <= t)
        for prop, mask in (("range_safety", ranged), ("accuracy", ~ranged)):
            sel = failing & mask
            if sel.any():
                r, c = worst(ratio, sel)
                add(_verdict(at, prop, row(r), c, got[r, c], z[r, c], err[r, c],
                             t[r, c], ratio[r, c]))
        counted = accurate & np.isfinite(got)
        if "range_safety" in skip:
            counted = counted & ~ranged
        if "accuracy" in skip:
            counted = counted & ranged
        if counted.any():
            worst_ratio = max(worst_ratio, float(np.max(np.where(counted, ratio, 0.0))))
        if per_row and ref.poisoned.any():
            bad = ref.poisoned[:, None] & np.isfinite(got)
            if bad.any():
                r, c = worst(np.ones_like(err), bad)
                add(_verdict(at, "nan_propagation", r, c, got[r, c],
                             reason=f"got {got[r, c]:.5g} in a row with a non-finite input; "
                                    f"expected NaN or an infinity"))
    return list(found.values()), worst_ratio


def judge_grads_bitwise(prop: str, first: dict[str, np.ndarray], second: dict[str, np.ndarray], *,
                        case: Case, label: str, what: str, rows: np.ndarray | None = None,
                        batch: str | None = None) -> Verdict | None:
    """Bitwise equality of the outputs ``second`` holds against ``first``: dx rows ``rows`` of
    ``first`` (all when None) against ``second``'s dx, and dgamma, dbeta whole where ``second``
    has them."""
    for name, other in second.items():
        mine = _as_rows(first[name])
        picked = rows if name == "dx" else None
        found = judge_bitwise(prop, mine, _as_rows(other), case=case, label=label, rows=picked,
                              batch=batch if name == "dx" else None, what=f"{name}: {what}")
        if found is not None:
            return replace(found, output=name, row=found.row if name == "dx" else None)
    return None


def judge(case: Case, outs: dict[str, np.ndarray], ref: Reference | GradReference,
          tol: Tolerance | GradTolerance, *, label: str,
          skip: frozenset[str] = frozenset()) -> tuple[list[Verdict], float]:
    """Judge every named output of one call (``OpSpec.outputs``) against its exact value and bound.
    Returns the failures and the worst err/tol over the judged elements of the properties not in
    ``skip`` (what a hunt steers by). An op of one output (``y``) is judged by row and column
    (:func:`judge_output`); an op of several, each output by name (:func:`judge_grads`)."""
    if isinstance(ref, GradReference):
        return judge_grads(case, outs, ref, tol, label=label, skip=skip)
    (out,) = outs.values()
    return judge_output(case, out, ref, tol, label=label, skip=skip)


# --- outputs of any shape: the ops of named arrays (attention) -----------------------------------
# Each named output judged against its exact values where the op says it is judged: a non-finite
# value where the exact one is finite fails ``finite`` outright, an element past its bound fails
# ``accuracy``. Every verdict names its element as the op words it: ``out[b 0 h 3 q 5 col 17]``.


def judge_named(case: Any, outs: dict[str, np.ndarray], exact: NamedExact, *, label: str,
                element: Callable[[str, tuple[int, ...]], str],
                skip: frozenset[str] = frozenset(),
                dtypes: dict[str, str] | None = None) -> tuple[list[Verdict], float]:
    """Judge every output of one call of a named-arrays op. Returns the failures (per property the
    worst over outputs, the first output on ties) and the worst err/tol over the elements judged
    by accuracy (what a hunt steers by; 0 when ``accuracy`` is in ``skip``). ``dtypes``: each
    output's storage type (the op's ``outputs``), the case's where not named: an infinity is
    accepted where the exact value rounds, or may within its bound round, past that type's range."""
    found: dict[str, Verdict] = {}
    worst_ratio = 0.0
    for name, out in outs.items():
        got = np.asarray(out).astype(np.float64)
        z, t, judged = exact.exact[name], exact.tol[name], exact.judged[name]
        judged = judged & np.isfinite(z)

        def verdict(prop: str, index: tuple[int, ...], **values: Any) -> Verdict:
            return Verdict(label, prop, case.family, None, None, float(got[index]),
                           float(z[index]), values.get("error"), values.get("tolerance"),
                           values.get("ratio", math.inf), values.get("reason", ""), output=name,
                           element=element(name, index))

        dtype = (dtypes or {}).get(name, case.dtype)
        bad = judged & ~np.isfinite(got) & ~rounded_past_range(got, z, t, dtype=dtype)
        if bad.any() and "finite" not in found:
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            found["finite"] = verdict("finite", index, reason=nonfinite_reason(got[index], z[index]))
        with np.errstate(all="ignore"):
            err = np.abs(got - z)
            ratio = np.where(judged & np.isfinite(got), err / t, 0.0)
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
        if ratio.size and "accuracy" not in skip:
            worst_ratio = max(worst_ratio, float(np.max(np.where(np.isfinite(ratio), ratio, 0.0))))
        failing = ratio > 1.0
        if failing.any():
            index = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
            held = found.get("accuracy")
            if held is None or ratio[index] > held.ratio:
                found["accuracy"] = verdict("accuracy", index, error=float(err[index]),
                                            tolerance=float(t[index]), ratio=float(ratio[index]))
    return list(found.values()), worst_ratio


def judge_named_bitwise(prop: str, first: dict[str, np.ndarray], second: dict[str, np.ndarray], *,
                        case: Any, label: str, element: Callable[[str, tuple[int, ...]], str],
                        what: str, place: tuple[slice, ...] = (), batch: str | None = None
                        ) -> Verdict | None:
    """Bitwise equality of each output of ``second`` with ``first`` at ``place`` (slices of its
    leading axes: the part of the case a smaller call computed). The verdict names the case's
    element."""
    for name, other in second.items():
        mine = np.asarray(first[name], dtype=np.float32)[place]
        other = np.asarray(other, dtype=np.float32)
        if mine.shape != other.shape:
            return Verdict(label, prop, case.family, None, None, None, None, None, None, math.inf,
                           f"{name}: {what}: shape {other.shape}, not {mine.shape}", output=name)
        same = bits_equal(mine, other)
        if same.all():
            continue
        index = tuple(int(i) for i in np.argwhere(~same)[0])
        starts = [s.start or 0 for s in place] + [0] * (len(index) - len(place))
        origin = tuple(i + s for i, s in zip(index, starts))
        a, b = float(mine[index]), float(other[index])
        return Verdict(label, prop, case.family, None, None, b, a, None, None, math.inf,
                       f"{what}: {b!r} vs {a!r} (differs by {abs(b - a):.3g}; must be bitwise "
                       f"equal)", batch=batch, output=name, element=element(name, origin))
    return None


def judge_named_close(prop: str, first: dict[str, np.ndarray], second: dict[str, np.ndarray],
                      exact: NamedExact, other: NamedExact, *, case: Any, label: str,
                      element: Callable[[str, tuple[int, ...]], str], what: str,
                      dtypes: dict[str, str] | None = None) -> Verdict | None:
    """A named-arrays op's outputs on a copy of the case (``second``, exact values ``other``) against
    its outputs on the case (``first``, ``exact``), element for element, where both are judged:
    within the two bounds plus the difference of the exact values (zero where the copy is exact).
    ``|a - b| <= |a - z| + |z - z'| + |z' - b|``, so a kernel within both bounds always passes. An
    element either call rounded past its type's range to the infinity its exact value allows
    (:func:`rounded_past_range`, ``dtypes`` naming each output's type, else the case's) was judged
    on its own and is not compared: a finite value beside it may be as correct."""
    worst_verdict: Verdict | None = None
    for name, b_out in second.items():
        a = np.asarray(first[name]).astype(np.float64)
        b = np.asarray(b_out).astype(np.float64)
        z, z2 = exact.exact[name], other.exact[name]
        judged = exact.judged[name] & other.judged[name] & np.isfinite(z) & np.isfinite(z2)
        dtype = (dtypes or {}).get(name, case.dtype)
        judged &= ~(rounded_past_range(a, z, exact.tol[name], dtype=dtype)
                    | rounded_past_range(b, z2, other.tol[name], dtype=dtype))
        with np.errstate(all="ignore"):
            err = np.abs(a - b)
            allowed = exact.tol[name] + other.tol[name] + np.abs(z - z2)
            ok = (err <= allowed) | (a == b) | (np.isnan(a) & np.isnan(b))
            ratio = np.where(np.isfinite(err), err / allowed, np.inf)
        bad = judged & ~ok
        if not bad.any():
            continue
        ratio = np.where(bad, np.where(np.isnan(ratio), np.inf, ratio), -1.0)
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
        if worst_verdict is None or ratio[index] > worst_verdict.ratio:
            worst_verdict = Verdict(label, prop, case.family, None, None, float(b[index]), float(a[index]),
                                    float(err[index]), float(allowed[index]), float(ratio[index]),
                                    what, output=name,
                                    element=element(name, index))
    return worst_verdict
