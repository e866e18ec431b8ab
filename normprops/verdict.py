"""A verdict (one failed property on one example, at its worst element) and the small tools every
judge uses to reach one: the collector of verdicts, the worst element, bitwise equality.

Shared by the generic judge (:mod:`normprops.judge`) and the ops' own checks
(``OpSpec.check_output``), so it depends on neither.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from normprops.ops.common import Reference, Tolerance

__all__ = ["Verdict", "Verdicts", "bits_equal", "worst", "range_rows", "nonfinite_reason",
           "AGAINST_ITSELF"]


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
AGAINST_ITSELF = frozenset({"shift_invariance", "scale_invariance", "permutation_invariance"})


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
    # Outputs of any shape (attention): the element as a person names it, "b 0 h 3 q 5 col 17",
    # in place of ``row`` and ``col``.
    element: str | None = None

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
            if self.element is not None:
                where = f" {self.output}[{self.element}]:"
        if self.error is not None and self.tolerance is not None:
            ratio = f" (x{_compact(self.ratio)})" if math.isfinite(self.ratio) else ""
            got, expected = _distinct(self.got, self.expected)
            # A metamorphic property compares the kernel with itself: no value is "expected".
            names = ("copy", "original") if self.property in AGAINST_ITSELF else ("got", "expected")
            error, tolerance = _distinct(self.error, self.tolerance)
            detail = (f" {names[0]} {got} {names[1]} {expected} "
                      f"|err| {error} > tol {tolerance}{ratio}")
            return f"{head}:{where}{detail}" + (f"; {self.reason}" if self.reason else "")
        return f"{head}:{where} {self.reason}"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.element is None:
            del out["element"]
        for key in ("got", "expected", "error", "tolerance", "ratio"):
            v = out[key]
            out[key] = None if v is None else (v if math.isfinite(v) else repr(float(v)))
        out["message"] = self.message()
        return out


def bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise bitwise equality of float32 arrays, any NaN equal to any NaN."""
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def worst(score: np.ndarray, mask: np.ndarray) -> tuple[int, int]:
    masked = np.where(mask, score, -np.inf)
    r, c = np.unravel_index(int(np.argmax(masked)), masked.shape)
    return int(r), int(c)


class Verdicts:
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
