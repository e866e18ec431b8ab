"""One gradient example, every property: call, exact gradients, bounds, verdicts by output.

:func:`normprops.properties.evaluate` hands gradient ops here. The kernel is called once and each
output judged (:mod:`normprops.backward_judge`); only when that passes are further calls spent on
``determinism`` (every output bitwise the same on a second call), ``batch_invariance`` (a row's dx
bitwise the same alone and in a reordered batch of another size; dgamma and dbeta sum the batch, so
they are not compared) and, for a kernel that promises it (``row_order``, opt-in), dgamma and dbeta
bitwise the same with the rows reversed.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from normprops.backward import exact_element, grad_reference, grad_tolerance
from normprops.backward_judge import judge_grads, judge_grads_bitwise, with_exact
from normprops.case import Case
from normprops.judge import Verdict
from normprops.launch import Target
from normprops.ops import get_op

__all__ = ["evaluate_grad", "named_outputs", "quoting_exact"]

Call = Callable[[Target, Case], "np.ndarray | tuple[np.ndarray, ...] | Verdict"]


def named_outputs(op: str, out: np.ndarray | tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
    """A gradient target's outputs by name (``OpSpec.outputs``)."""
    names = get_op(op).outputs
    return dict(zip(names, out if isinstance(out, tuple) else (out,)))


def _rows(case: Case, order: np.ndarray) -> Case:
    return case.replace(x=np.ascontiguousarray(case.x[order]),
                        dy=np.ascontiguousarray(case.dy[order]))


def _metamorphic(target: Target, case: Case, outs: dict[str, np.ndarray], *, call: Call,
                 skip: frozenset[str]) -> Verdict | None:
    label = target.label
    if "determinism" not in skip:
        again = call(target, case)
        if isinstance(again, Verdict):
            return again
        found = judge_grads_bitwise("determinism", outs, named_outputs(case.op, again), case=case,
                                    label=label, what="second call on the same input")
        if found:
            return found
    if "batch_invariance" not in skip:
        r = case.rows // 2
        for order, batch in (
                (np.array([r]), f"row {r} alone (a batch of 1 row)"),
                (np.concatenate([np.arange(case.rows)[::-1], [r]]),
                 f"the case's rows reversed, plus row {r} again ({case.rows + 1} rows)")):
            other = call(target, _rows(case, order))
            if isinstance(other, Verdict):
                return other
            dx = named_outputs(case.op, other)["dx"]
            found = judge_grads_bitwise("batch_invariance", outs, {"dx": dx}, case=case,
                                        label=label, rows=order, batch=batch,
                                        what=f"rows {'alone' if len(order) == 1 else 'reordered'}")
            if found:
                return found
    if "row_order" not in skip and case.rows > 1 and len(outs) > 1:
        reversed_rows = np.arange(case.rows)[::-1]
        other = call(target, _rows(case, reversed_rows))
        if isinstance(other, Verdict):
            return other
        sums = {name: a for name, a in named_outputs(case.op, other).items() if name != "dx"}
        found = judge_grads_bitwise("row_order", outs, sums, case=case, label=label,
                                    what="the rows summed in reverse order")
        if found:
            return found
    return None


# The properties whose verdicts compare an output with its exact value (the metamorphic ones
# compare two outputs of the kernel, and their "expected" is the other output).
_AGAINST_EXACT = frozenset({"accuracy", "range_safety", "finite"})


def quoting_exact(case: Case, verdict: Verdict, *, oracle: str) -> Verdict:
    """``verdict`` on the gradient ``case`` as a report quotes it: judged against float64, it
    quotes its element's value at 200 bits as the exact result (:func:`exact_element`). Called
    once per finding, not per example: the hunt judges by float64, which its bounds allow for."""
    if (oracle != "float64" or verdict.property not in _AGAINST_EXACT or verdict.expected is None
            or verdict.output is None or verdict.col is None or case.dy is None):
        return verdict
    exact = exact_element(case, output=verdict.output, row=verdict.row, col=verdict.col)
    return with_exact(verdict, exact, dtype=case.dtype)


def evaluate_grad(target: Target, case: Case, *, call: Call, policy: str = "default",
                  oracle: str = "float64", metamorphic: bool = True,
                  skip: frozenset[str] = frozenset()) -> tuple[list[Verdict], float]:
    """Judge the gradient ``target`` on ``case`` with ``call`` (which turns a kernel's exception
    into a contract verdict): the failures not in ``skip``, and the worst err/tol judged."""
    out = call(target, case)
    if isinstance(out, Verdict):  # a contract failure: nothing else can be judged
        return ([] if out.property in skip else [out]), math.inf
    outs = named_outputs(case.op, out)
    ref = grad_reference(case, oracle=oracle)
    tol = grad_tolerance(case, ref, model=target.error_model, policy=policy,
                         row_reduction=target.row_reduction)
    failures, worst = judge_grads(case, outs, ref, tol, label=target.label, skip=skip)
    failures = [v for v in failures if v.property not in skip]
    if not failures and metamorphic:
        found = _metamorphic(target, case, outs, call=call, skip=skip)
        if found and found.property not in skip:
            failures = [found]
    return failures, worst
