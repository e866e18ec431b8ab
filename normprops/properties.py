"""One example, every property: strategy output -> target -> oracle -> judge -> verdicts.

``evaluate`` runs the target once and judges the output against the reference; only when that passes
does it spend further calls on the metamorphic properties (determinism, batch invariance, shift and
scale invariance), each of which needs the target again on a transformed input.
"""

from __future__ import annotations

import math
import os
import sysconfig
import traceback
from dataclasses import dataclass

import numpy as np

from normprops.case import Case
from normprops.errors import ContractError, FatalTargetError, describe_exit, is_test_outcome
from normprops.judge import (
    Verdict,
    judge,
    judge_bitwise,
    judge_close,
    judge_exact_constant,
    judge_grads_bitwise,
    judge_named,
    judge_named_bitwise,
    judge_named_close,
    range_rows,
    with_exact,
)
from normprops.launch import Target
from normprops.ops import PROPERTIES, check_opt_in, get_op
from normprops.ops.spec import NamedExact
from normprops.ops.transforms import exact_scale, exact_shift
from normprops.oracles import (
    GradReference,
    Reference,
    Tolerance,
    exact_element,
    reference,
    tolerance,
)

__all__ = ["Evaluation", "evaluate", "exact_shift", "exact_scale", "stress_order", "named_outputs",
           "quoting_exact"]

_ORDER = {name: i for i, name in enumerate(PROPERTIES)}
_ALL_BUT_CONTRACT = frozenset(PROPERTIES) - {"contract"}
#: Elements of a stress batch at most (the case's rows tiled): 2048 rows up to 128 columns, 256
#: rows of 1024, 16 of 16385. Every example launches it twice, so it sets the hunt's pace on a GPU:
#: at 1 << 20 a 300-example hunt took 1.6-2.5x as long (9.1 s against 3.7 s for torch's layer norm
#: on CUDA); the batches keep their 2048 rows up to 128 columns and have a quarter of the rows
#: from 512 columns on.
STRESS_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class Evaluation:
    failures: tuple[Verdict, ...]
    worst_ratio: float  # worst err/tol among judged elements (0 when nothing was judged)

    @property
    def passed(self) -> bool:
        return not self.failures


def _call(target: Target, case: Case, *, check_inputs: bool = True) -> np.ndarray | Verdict:
    try:
        return target.run(case, check_inputs=check_inputs)
    except FatalTargetError:
        raise
    except ContractError as exc:
        reason = str(exc)
    except SystemExit as exc:  # sys.exit() in a kernel would end the hunt with the kernel's status
        reason = f"{describe_exit(exc)}{_where(exc)}"
    except KeyboardInterrupt:  # Ctrl-C is the user's
        raise
    except BaseException as exc:  # a user's kernel may raise anything; that is a finding, not a crash
        if is_test_outcome(exc):  # pytest.skip, importorskip, xfail, fail: the test's, not ours
            raise
        message = _message(exc)
        reason = f"raised {type(exc).__name__}{': ' if message else ''}{message}{_where(exc)}"
    return Verdict.contract(target.label, case.family, f"{reason} (input shape {case.shape})")


def _message(exc: BaseException) -> str:
    """``str(exc)``, or what it is when the kernel's exception cannot say (its ``__str__`` raises)."""
    try:
        return str(exc)
    except Exception as inner:
        return f"(its message could not be read: {type(inner).__name__} in its __str__)"


def _where(exc: BaseException) -> str:
    """Where ``exc`` was raised, outside normprops (the user's file and line), as " at FILE:LINE in
    FUNC"; empty when every frame is ours."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    libraries = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_path("stdlib"),
                                                            sysconfig.get_path("purelib"),
                                                            sysconfig.get_path("platlib")})
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(package)]
    # The user's own line: the last frame outside normprops and the installed libraries (numpy,
    # torch), else the last frame outside normprops.
    own = [f for f in frames if not os.path.abspath(f.filename).startswith(libraries)]
    last = (own or frames or [None])[-1]
    return "" if last is None else f" at {last.filename}:{last.lineno} in {last.name}"


def _comparable_rows(ref: Reference, tol: Tolerance) -> np.ndarray:
    return ref.judged_rows & ref.in_domain & ~tol.finite_only


def stress_order(rows: int, cols: int, stress_rows: int) -> np.ndarray:
    """The case rows a stress batch holds, in order: the case's rows tiled from position 0 (each
    row's first copy where the case has it), then the rows reversed and the middle row once more
    (other neighbours, other positions). Its length depends on the width alone unless the case has
    many rows (at most STRESS_ELEMENTS elements, at least two copies of every row plus one): a
    framework that compiles per shape compiles it once per width."""
    total = max(min(stress_rows, STRESS_ELEMENTS // cols), 2 * rows + 1)
    tail = _reversed_plus_middle(rows)
    return np.concatenate([np.resize(np.arange(rows), total - len(tail)), tail])


def _reversed_plus_middle(rows: int) -> np.ndarray:
    """The case's rows reversed, then its middle row again: other neighbours, other positions."""
    return np.concatenate([np.arange(rows)[::-1], [rows // 2]])


def _stress(target: Target, case: Case, out: np.ndarray, skip: frozenset[str]) -> Verdict | None:
    """The case's rows in a batch of up to ``target.stress_rows`` (:func:`stress_order`), launched
    twice: the two launches must agree bitwise (determinism: races), and every copy of row r must
    equal ``out[r]`` (batch invariance: leaks between blocks or rows, position dependence)."""
    order = stress_order(case.rows, case.cols, target.stress_rows)
    tiled = case.take(order)
    batch = f"a stress batch of {len(order)} rows (the case's {case.rows} rows, repeated)"
    first = _call(target, tiled, check_inputs=False)
    if isinstance(first, Verdict):
        return first
    second = _call(target, tiled, check_inputs=False)
    if isinstance(second, Verdict):
        return second
    # The same launch twice must agree bit for bit (a race shows here). Copies of one row at other
    # positions of one launch, and the batch against the case's own launch, must agree too unless
    # batch invariance is not judged: a kernel whose reduction order follows a row's address
    # alignment (PyTorch's softmax on odd widths) differs there without any race.
    found = None
    if "determinism" not in skip:
        found = judge_bitwise("determinism", first, second, case=case, label=target.label,
                              origin=order, batch=batch,
                              what=f"two launches of the same {len(order)} rows")
    if found or "batch_invariance" in skip:
        return found
    found = judge_bitwise("batch_invariance", first[: case.rows], first, case=case,
                          label=target.label, rows=order, batch=batch,
                          what=f"copies of a row in one launch of {len(order)} rows")
    return found or judge_bitwise("batch_invariance", out, first, case=case, label=target.label,
                                  rows=order, batch=batch,
                                  what=f"the case's rows repeated in a batch of {len(order)}")


def _batch_invariance(target: Target, case: Case, out: np.ndarray) -> Verdict | None:
    """The middle row alone, and the batch reversed plus one repeated row: two more batch sizes
    (a kernel may pick its reduction by the batch's shape, as PyTorch's CUDA softmax does: 2 rows
    of 16383 columns agree with a batch of 16 and not with one of 3). Each row's output must be
    bitwise the one it had in ``case``."""
    label = target.label
    r = case.rows // 2
    alone = _call(target, case.take(np.arange(r, r + 1)))
    if isinstance(alone, Verdict):
        return alone
    found = judge_bitwise("batch_invariance", out, alone, case=case, label=label,
                          rows=np.array([r]), batch=f"row {r} alone (a batch of 1 row)",
                          what=f"row {r} computed alone")
    if found:
        return found
    order = _reversed_plus_middle(case.rows)
    shuffled = _call(target, case.take(order))
    if isinstance(shuffled, Verdict):
        return shuffled
    return judge_bitwise("batch_invariance", out, shuffled, case=case, label=label, rows=order,
                         batch=f"the case's rows reversed, plus row {r} again ({len(order)} rows)",
                         what=f"rows reversed in a batch of {len(order)}")


def _metamorphic(target: Target, case: Case, out: np.ndarray, ref: Reference, tol: Tolerance, *,
                 policy: str, oracle: str, skip: frozenset[str]) -> Verdict | None:
    label = target.label
    # A GPU target's stress batch launches every row twice, so it judges determinism there rather
    # than on a second call of the case: each call costs a round trip to the device, and round
    # trips set a GPU hunt's pace.
    stressed = bool(target.stress_rows) and not {"determinism", "batch_invariance"} <= skip
    if "determinism" not in skip and not stressed:
        again = _call(target, case)
        if isinstance(again, Verdict):
            return again
        found = judge_bitwise("determinism", out, again, case=case, label=label,
                              what="second call on the same input")
        if found:
            return found
    if stressed:
        found = _stress(target, case, out, skip)
        if found:
            return found
    if "batch_invariance" not in skip:
        found = _batch_invariance(target, case, out)
        if found:
            return found

    transformed: list[tuple[str, Case, str]] = []
    for transform in get_op(case.op).transforms:
        if transform.property in skip:
            continue
        copy = transform.apply(case)
        if copy is not None:
            transformed.append((transform.property, *copy))
    # Range safety not judged is not judged through a copy either: a copy is compared only on rows
    # that are no range-safety rows, in the original and in the copy (a row of huge scaled by 8
    # overflows the squares of a norm that is right on the row itself).
    unranged = "range_safety" in skip
    if unranged and not (~range_rows(ref, tol)).any():
        transformed = []
    for prop, other_case, what in transformed:
        other = _call(target, other_case)
        if isinstance(other, Verdict):
            return other
        other_ref = reference(other_case, oracle=oracle)
        other_tol = tolerance(other_case, other_ref, model=target.error_model, policy=policy)
        rows = _comparable_rows(ref, tol) & _comparable_rows(other_ref, other_tol)
        if unranged:
            rows &= ~range_rows(ref, tol) & ~range_rows(other_ref, other_tol)
        found = judge_close(prop, out, other, tol.tol + other_tol.tol, case=case, label=label,
                            rows=rows, what=f"the copy is {what}")
        if found:
            return found
    return None


def evaluate(target: Target, case: Case, *, policy: str = "default", oracle: str = "float64",
             metamorphic: bool = True, skip: frozenset[str] = frozenset()) -> Evaluation:
    """Judge ``target`` on ``case``: every failure found, most severe first.

    Properties in ``skip`` or not judged for the target (``Target.unjudged``: those it ignores, the
    optional ones it did not ask for) are not judged (a hunt skips those that already failed, so it
    can go on hunting the others). The metamorphic properties cost further calls and run only when
    the output itself passed."""
    check_opt_in(target.opt_in)
    skip = frozenset(skip) | target.unjudged
    op = get_op(target.op)
    out = _call(target, case)
    if isinstance(out, Verdict):  # a contract failure: nothing else can be judged
        return Evaluation(() if out.property in skip else (out,), math.inf)
    if op.forward is None and skip >= _ALL_BUT_CONTRACT:
        return Evaluation((), 0.0)  # only the call was asked about (a width hint's probe): no oracle
    if op.named is not None:
        return _evaluate_named(target, case, out, oracle=oracle, skip=skip, metamorphic=metamorphic)
    outs = named_outputs(target.op, out)
    ref = reference(case, oracle=oracle)
    tol = tolerance(case, ref, model=target.error_model, policy=policy,
                    row_reduction=target.row_reduction)
    failures, worst = judge(case, outs, ref, tol, label=target.label, skip=skip)
    if "exact_constant" not in skip and op.exact_constant is not None:
        found = judge_exact_constant(case, out, label=target.label)
        if found:
            failures.append(found)
    failures = [v for v in failures if v.property not in skip]
    if not failures and metamorphic:
        if isinstance(ref, GradReference):
            found = _metamorphic_by_name(target, case, outs, skip=skip)
        else:
            found = _metamorphic(target, case, out, ref, tol, policy=policy, oracle=oracle,
                                 skip=skip)
        if found and found.property not in skip:
            failures = [found]
    failures.sort(key=lambda v: _ORDER[v.property])
    return Evaluation(tuple(failures), worst)


# --- ops of named arrays (attention) -----------------------------------------------------------


def _by_name(out: np.ndarray | tuple[np.ndarray, ...], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    return dict(zip(names, out if isinstance(out, tuple) else (out,)))


def _evaluate_named(target: Target, case: Case, out: np.ndarray | tuple[np.ndarray, ...], *,
                    oracle: str, skip: frozenset[str], metamorphic: bool) -> Evaluation:
    """Judge a named-arrays op's outputs (each against its exact values and bound, then the op's
    own checks); when they pass, ``determinism`` (a second call bitwise equal) and
    ``batch_invariance`` (the op's smaller calls, :attr:`NamedArrays.pieces`, bitwise equal where
    they overlap the case)."""
    named = get_op(target.op).named
    promises = target.declaration.op_promises
    outs = _by_name(out, get_op(target.op).outputs)
    exact = named.exact(case, promises, oracle)
    dtypes = {name: dtype for name, _, dtype in named.outputs(case, promises, len(outs))}
    failures, worst = judge_named(case, outs, exact, label=target.label, element=named.element,
                                  skip=skip, dtypes=dtypes)
    failures += named.check(case, outs, exact, promises, target.label)
    failures = [v for v in failures if v.property not in skip]
    if not failures and metamorphic:
        found = _named_metamorphic(target, case, outs, exact, skip, oracle, dtypes)
        if found is not None and found.property not in skip:
            failures = [found]
    failures.sort(key=lambda v: _ORDER[v.property])
    return Evaluation(tuple(failures), worst)


def _named_metamorphic(target: Target, case: Case, outs: dict[str, np.ndarray], exact: NamedExact,
                       skip: frozenset[str], oracle: str, dtypes: dict[str, str]) -> Verdict | None:
    """Determinism and batch invariance (bitwise), then the op's metamorphic copies
    (``OpSpec.transforms``), each judged element for element within both bounds."""
    named = get_op(target.op).named
    names = tuple(outs)
    calls: list[tuple[str, Case, tuple[slice, ...], str, str | None]] = []
    if "determinism" not in skip:
        calls.append(("determinism", case, (), "second call on the same input", None))
    if "batch_invariance" not in skip:
        calls += [("batch_invariance", piece, place, f"{what}, against the whole call", what)
                  for piece, place, what in named.pieces(case)]
    for prop, other_case, place, what, batch in calls:
        other = _call(target, other_case)
        if isinstance(other, Verdict):
            return other
        found = judge_named_bitwise(prop, outs, _by_name(other, names), case=case, label=target.label,
                                    element=named.element, what=what, place=place, batch=batch)
        if found:
            return found
    promises = target.declaration.op_promises
    for transform in get_op(target.op).transforms:
        made = None if transform.property in skip else transform.apply(case)
        if made is None:
            continue
        copy, what = made
        other = _call(target, copy)
        if isinstance(other, Verdict):
            return other
        copied = exact if transform.same_exact else named.exact(copy, promises, oracle)
        found = judge_named_close(transform.property, outs, _by_name(other, names), exact,
                                  copied, case=case, label=target.label,
                                  element=named.element, what=f"the copy is {what}", dtypes=dtypes)
        if found:
            return found
    return None


# --- outputs by name: the gradient ops ----------------------------------------------------------


def named_outputs(op: str, out: np.ndarray | tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
    """A target's outputs by name (``OpSpec.outputs``): a forward op's one ``y``, a gradient's
    ``dx`` and, where it has them, ``dgamma`` and ``dbeta``."""
    names = get_op(op).outputs
    return dict(zip(names, out if isinstance(out, tuple) else (out,)))


def _grad_rows(case: Case, order: np.ndarray) -> Case:
    return case.replace(x=np.ascontiguousarray(case.x[order]),
                        dy=np.ascontiguousarray(case.dy[order]))


def _metamorphic_by_name(target: Target, case: Case, outs: dict[str, np.ndarray], *,
                         skip: frozenset[str]) -> Verdict | None:
    """Further calls on an op of outputs by name (the gradients): ``determinism`` (every output
    bitwise the same on a second call), ``batch_invariance`` (a row's dx bitwise the same alone and
    in a reordered batch of another size; dgamma and dbeta sum the batch, so they are not compared)
    and, for a kernel that promises it (``row_order``, opt-in), dgamma and dbeta bitwise the same
    with the rows reversed."""
    call = _call
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
            other = call(target, _grad_rows(case, order))
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
        other = call(target, _grad_rows(case, reversed_rows))
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
