"""Judge a gradient kernel's outputs, each against its own exact value and bound, by name.

The checks are the forward's (:mod:`normprops.judge`) applied to each output: a non-finite value
where the exact one is finite fails ``finite`` outright; an element past its bound fails
``accuracy``; rows outside the accuracy domain (where the declared arithmetic must overflow) are
judged under ``range_safety`` instead. A row of x (softmax: of y) holding a NaN or an infinity must give a
non-finite dx everywhere (``nan_propagation``); the other rows are judged as usual. Every verdict
names its output: ``dx[row 1 col 3]``, ``dgamma[col 17]``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from normprops.backward import GradReference, GradTolerance
from normprops.case import Case
from normprops.dtypes import get_dtype
from normprops.judge import Verdict, judge_bitwise, nonfinite_reason

__all__ = ["judge_grads", "judge_grads_bitwise", "with_exact"]


def _as_rows(a: np.ndarray) -> np.ndarray:
    return a if a.ndim == 2 else a[None, :]


def _verdict(label: str, case: Case, prop: str, output: str, row: int | None, col: int,
             got: float, expected: float | None = None, error: float | None = None,
             tolerance: float | None = None, ratio: float = math.inf, reason: str = "") -> Verdict:
    return Verdict(label, prop, case.family, row, col, float(got),
                   None if expected is None else float(expected),
                   None if error is None else float(error),
                   None if tolerance is None else float(tolerance), float(ratio), reason,
                   output=output)


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


def _worst(score: np.ndarray, mask: np.ndarray) -> tuple[int, int]:
    r, c = np.unravel_index(int(np.argmax(np.where(mask, score, -np.inf))), mask.shape)
    return int(r), int(c)


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
    # value, of the same sign, is the right output whatever the bound.
    kind = get_dtype(case.dtype)
    rounds_to_inf = kind.max * (1 + 2.0 ** -(kind.bits + 1))
    worst = 0.0
    for name, out in outs.items():
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
            r, c = _worst(np.ones_like(err), bad)
            add(_verdict(label, case, "range_safety" if ranged[r, c] else "accuracy", name, row(r),
                         c, got[r, c], z[r, c],
                         reason=_past_range(z[r, c], case.dtype)))
        bad = judged & ~np.isfinite(got)
        if bad.any():
            r, c = _worst(np.ones_like(err), bad)
            add(_verdict(label, case, "range_safety" if ranged[r, c] else "finite", name, row(r), c,
                         got[r, c], z[r, c],
                         reason=nonfinite_reason(got[r, c], z[r, c])))
        failing = accurate & np.isfinite(got) & ~(err <= t)
        for prop, mask in (("range_safety", ranged), ("accuracy", ~ranged)):
            sel = failing & mask
            if sel.any():
                r, c = _worst(ratio, sel)
                add(_verdict(label, case, prop, name, row(r), c, got[r, c], z[r, c], err[r, c],
                             t[r, c], ratio[r, c]))
        counted = accurate & np.isfinite(got)
        if "range_safety" in skip:
            counted = counted & ~ranged
        if "accuracy" in skip:
            counted = counted & ranged
        if counted.any():
            worst = max(worst, float(np.max(np.where(counted, ratio, 0.0))))
        if per_row and ref.poisoned.any():
            bad = ref.poisoned[:, None] & np.isfinite(got)
            if bad.any():
                r, c = _worst(np.ones_like(err), bad)
                add(_verdict(label, case, "nan_propagation", name, r, c, got[r, c],
                             reason=f"got {got[r, c]:.5g} in a row with a non-finite input; "
                                    f"expected NaN or an infinity"))
    return list(found.values()), worst


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
