"""Hints: the declarations that would explain a hunt's findings, each checked before it is said.

A finding may be a choice rather than a bug: a kernel that computes in bfloat16, flushes subnormals,
sums a row in one thread or pairwise, or takes only some widths. The hint naming the declaration
(``--arithmetic bfloat16``, ``--ftz``, ``--threads 1``, ``--reduction tree``, the width flags) is
given only when every finding it is about, re-judged on its minimal and its worst case under that
declaration (the target run again, the output judged with the changed error model or at an allowed
width), passes; and it says what the declaration means, so that a bug it would hide reads as one.
The CLI and :func:`normprops.hunt_kernel` both call :func:`hints`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Iterable

import numpy as np

from normprops.case import WIDEST_COLS, Case, ShapeConstraints
from normprops.errormodel import TREE_LEAF_DEPTH, ErrorModel
from normprops.errors import FatalTargetError
from normprops.flags import flag
from normprops.hunt import Finding
from normprops.launch import Target
from normprops.ops import PROPERTIES, get_op, is_backward
from normprops.properties import evaluate

__all__ = ["hints", "TOLERANCE_PROPERTIES"]

#: The properties an error model's bounds decide: the findings a declaration of how the kernel
#: computes (its arithmetic, flushing, reduction) can explain.
TOLERANCE_PROPERTIES = frozenset({"accuracy", "ratios", "sum_to_one", "shift_invariance",
                                  "scale_invariance", "permutation_invariance"})
_THROUGH_COPIES = frozenset({"shift_invariance", "scale_invariance", "permutation_invariance"})
#: Vector widths tried for --cols-multiple-of.
_MULTIPLES = (2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class _Declaration:
    field: str  # the declaration's field (normprops.flags names its flag)
    value: str | int | bool  # what the hint sets it to
    meaning: str  # what it declares, and what it loosens

    @property
    def flag(self) -> str:
        """On the command line: ``--threads 1``, ``--ftz``."""
        return flag(self.field) if self.value is True else f"{flag(self.field)} {self.value}"

    @property
    def keyword(self) -> str:
        """To hunt_kernel: ``threads=1``, ``arithmetic="bfloat16"``."""
        return f'{self.field}="{self.value}"' if isinstance(self.value, str) else f"{self.field}={self.value}"


def _depth(model: ErrorModel) -> str:
    """The depth of a user kernel's error bound, in words (errormodel.ErrorModel.k)."""
    if model.reduction == "tree":
        return f"ceil(log2 cols) + {TREE_LEAF_DEPTH} additions (a pairwise sum)"
    if model.threads == 1:
        return "cols - 1 additions (one thread)"
    tree = math.ceil(math.log2(model.threads)) - 1
    return f"ceil(cols/{model.threads}) + {tree} additions ({model.threads} threads)"


def _model_groups(target: Target) -> list[list[tuple[_Declaration, ErrorModel]]]:
    """Candidate error models, by kind: one hint at most per kind."""
    model = target.error_model
    groups: list[list[tuple[_Declaration, ErrorModel]]] = []
    if target.dtype == "bfloat16" and model.arithmetic == "float32":
        groups.append([(_Declaration(
            "arithmetic", "bfloat16",
            "It declares that every operation of the kernel rounds to bfloat16, and judges it with "
            "bfloat16's unit roundoff 2^-8 instead of float32's 2^-24 (bounds 65536 times wider): "
            "right for a kernel that computes in bfloat16 throughout (JAX's ops on bfloat16 arrays); "
            "in a kernel meant to compute in float32, one step rounded to bfloat16 (a bfloat16 "
            "reciprocal root, a bfloat16 sum) is a bug this would hide"),
            replace(model, arithmetic="bfloat16"))])
    if not model.ftz:
        groups.append([(_Declaration(
            "ftz", True,
            "It declares that the kernel flushes subnormal inputs and results to zero (FTZ/DAZ, as "
            "fast-math builds do) and allows what that loses, about 1.2e-38 wherever a subnormal is "
            "read or made; without it the kernel is judged as IEEE arithmetic"),
            replace(model, ftz=True))])
    depth = []
    if model.reduction != "tree":
        depth.append((_Declaration(
            "reduction", "tree",
            f"It declares a pairwise (tree) sum over the whole row, as numpy's np.sum does: the "
            f"bounds' depth becomes {_depth(replace(model, reduction='tree'))} instead of "
            f"{_depth(model)}"), replace(model, reduction="tree")))
    if model.reduction != "sequential" or model.threads != 1:
        one = replace(model, reduction="sequential", threads=1)
        depth.append((_Declaration(
            "threads", 1,
            f"It declares that one thread adds each whole row in order (a loop, a cumulative sum): "
            f"the bounds' depth becomes {_depth(one)} instead of {_depth(model)}"), one))
    # A gradient's bounds take their depth from the threads twice: over the columns (dx) and over
    # the blocks of rows summed into dgamma and dbeta (backward.row_depth). A depth hint there would
    # loosen one while its words explain the other, so none is offered.
    if depth and not is_backward(target.op):
        groups.append(depth)
    return groups


def _cases(findings: Iterable[Finding]) -> list[Case]:
    out: list[Case] = []
    for f in findings:
        out += [f.minimal] if f.worst is f.minimal else [f.minimal, f.worst]
    return out


def _passes(target: Target, cases: list[Case], properties: frozenset[str], *, policy: str,
            oracle: str) -> bool:
    """Whether ``target`` gives no failure of ``properties`` on any of ``cases``, the others not
    judged (a batch-variant kernel's copies are still compared)."""
    others = frozenset(PROPERTIES) - properties
    return not any(evaluate(target, case, policy=policy, oracle=oracle, skip=others,
                            metamorphic=bool(properties & _THROUGH_COPIES)).failures
                   for case in cases)


def _at_width(case: Case, cols: int) -> Case:
    """``case`` with its rows (and gamma, beta) repeated or cut to ``cols`` columns."""
    reps = -(-cols // case.cols)

    def fit(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.ascontiguousarray(np.tile(a, reps)[..., :cols])

    def rows(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.ascontiguousarray(np.tile(a, (1, reps))[:, :cols])

    return case.replace(x=rows(case.x), gamma=fit(case.gamma), beta=fit(case.beta), dy=rows(case.dy),
                        mask=rows(case.mask))


def _one_row_more(case: Case) -> Case:
    """``case`` with its first row repeated after the others: a raise a width explains repeats at
    any row count, and the rows at an allowed width run at any row count."""
    return case.take(np.r_[np.arange(case.rows), 0])


#: The widest row a --min-cols hint looks for the narrowest width taken at (or twice the widest
#: failing row, if wider).
_NARROW_LIMIT = 16385


def _width_candidates(widths: list[int], takes: Callable[[int], bool]
                      ) -> list[tuple[_Declaration, ShapeConstraints]]:
    """Width declarations that could explain raises at ``widths``; ``takes(w)``: whether the
    kernel runs the failing rows cut or repeated to ``w`` columns."""
    out = []
    # A limit is where the kernel stops taking rows, which a shrunk counterexample usually sits
    # right past but need not (a shrink cut short, a worst case far from it): it is looked for by
    # bisection, the kernel run at about log2(width) widths, taking the widths it runs as a range.
    # A limit also needs the width next to it on the taken side to run: a kernel that takes only
    # multiples of K never runs two widths in a row, and gets the multiple's hint instead. A limit
    # is offered first, as it leaves out fewer widths than a multiple does.
    below = _edge(takes, lo=1, hi=widths[0] - 1)
    if below is not None and (below == 1 or takes(below - 1)):
        out.append((_Declaration("max_cols", below,
                                 f"It declares that the kernel takes no row wider than {below} "
                                 f"columns: no wider row is hunted"), ShapeConstraints(max_cols=below)))
    above = _lowest(takes, lo=widths[-1] + 1,
                    hi=min(WIDEST_COLS, max(_NARROW_LIMIT, 2 * widths[-1])))
    if above is not None and takes(above + 1):
        out.append((_Declaration("min_cols", above,
                                 f"It declares that the kernel takes no row narrower than {above} "
                                 f"columns: no narrower row is hunted"), ShapeConstraints(min_cols=above)))
    for k in _MULTIPLES:
        if all(w % k for w in widths):
            out.append((_Declaration("cols_multiple_of", k,
                                     f"It declares that the kernel takes only widths that are "
                                     f"multiples of {k}: no other width is hunted"),
                        ShapeConstraints(cols_multiple_of=k)))
    return out


def _edge(takes: Callable[[int], bool], *, lo: int, hi: int) -> int | None:
    """The largest ``w`` in [lo, hi] with ``takes(w)``, taking it to hold on [lo, w] and not past
    it; None when it fails at ``lo``. ``hi`` is tried first: a limit right below is the usual case."""
    if hi < lo:
        return None
    if takes(hi):
        return hi
    if not takes(lo):
        return None
    while hi - lo > 1:  # takes(lo), not takes(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if takes(mid) else (lo, mid)
    return lo


def _lowest(takes: Callable[[int], bool], *, lo: int, hi: int) -> int | None:
    """The smallest ``w`` in [lo, hi] with ``takes(w)``, taking it to hold on [w, hi] and not
    below; None when it fails at ``hi``: :func:`_edge` on the range turned round (``lo`` first)."""
    top = _edge(lambda w: takes(lo + hi - w), lo=lo, hi=hi)
    return None if top is None else lo + hi - top


def _nearest_allowed(cols: int, widths: ShapeConstraints) -> list[int]:
    """The allowed widths next to ``cols``: for a multiple of K, the one below and the one above
    (a kernel that takes only some multiples of K is not explained by K)."""
    if widths.max_cols is not None:
        return [min(cols, widths.max_cols)]
    k = widths.cols_multiple_of
    below, above = max(k, cols - cols % k, widths.min_cols), max(-(-cols // k) * k, widths.min_cols)
    return list(dict.fromkeys([below, above]))


def _families(findings: list[Finding]) -> str:
    return ", ".join(dict.fromkeys(f.family for f in findings))


def hints(findings: Iterable[Finding], *, target: Target, policy: str = "default",
          oracle: str = "float64") -> list[str]:
    """One ``hint:`` line per kind of declaration that explains every finding of ``findings`` it
    is about, checked by running ``target`` again on each one's minimal and worst case; each line
    says what the declaration means. A norm's judged range-safety failure is explained too. Empty
    when nothing applies (or the target cannot run again)."""
    found = list(findings)
    out: list[str] = []
    if get_op(target.op).named is not None:
        return out  # the hints try row widths and reduction depths, which a named-arrays op has not
    why = get_op(target.op).range_hint
    if why is not None and any(f.property == "range_safety" for f in found):
        out.append(f"hint: {why}. Range safety is judged because it was asked for ({flag('opt_in')} "
                   "range_safety, opt_in=[\"range_safety\"]); without it, it is shown as "
                   "information, not a failure")
    try:
        accuracy = [f for f in found if f.property in TOLERANCE_PROPERTIES]
        if accuracy:
            cases = _cases(accuracy)
            kinds = " and ".join(dict.fromkeys(f.property for f in accuracy))
            for group in _model_groups(target):
                # The least loosening first: the smallest depth at the widest row that failed.
                widest = max(c.cols for c in cases)
                for declaration, model in sorted(group, key=lambda g: g[1].k(widest)):
                    if _passes(target.declared(error_model=model), cases, TOLERANCE_PROPERTIES,
                               policy=policy, oracle=oracle):
                        out.append(f"hint: {declaration.flag} ({declaration.keyword}) explains every "
                                   f"{kinds} finding here ({_families(accuracy)}): under it, each "
                                   f"one's minimal and worst case passes. {declaration.meaning}.")
                        break
        raised = [f for f in found if f.property == "contract" and "raised" in f.verdict.reason]
        # A width explains a raise only when the raise repeats at the width it happened at (a
        # kernel that raised once, by chance, on a narrow row has no width limit).
        if raised and target.constraints.unconstrained and not _passes(
                target, _cases(raised), frozenset({"contract"}), policy=policy, oracle=oracle):
            found_at = _cases(raised)
            widths = sorted({c.cols for c in found_at})
            cases = found_at + [_one_row_more(c) for c in found_at]

            def takes(cols: int) -> bool:
                return _passes(target, [_at_width(c, cols) for c in cases], frozenset({"contract"}),
                               policy=policy, oracle=oracle)

            for declaration, allowed in _width_candidates(widths, takes):
                moved = [_at_width(c, w) for c in cases for w in _nearest_allowed(c.cols, allowed)]
                if _passes(target.declared(constraints=allowed), moved, frozenset({"contract"}),
                           policy=policy, oracle=oracle):
                    out.append(f"hint: {declaration.flag} ({declaration.keyword}) explains every "
                               f"raise here (widths {', '.join(map(str, widths))}): the same rows "
                               f"at the allowed widths next to them run. {declaration.meaning}.")
                    break
    except FatalTargetError:  # the target cannot run again: no more checking, no more hints
        pass
    return out
