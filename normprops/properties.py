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

from normprops.backward_properties import evaluate_grad
from normprops.case import Case
from normprops.dtypes import get_dtype, to_dtype
from normprops.errors import ContractError, FatalTargetError, describe_exit, is_test_outcome
from normprops.judge import (
    Verdict,
    judge_bitwise,
    judge_close,
    judge_exact_constant,
    judge_output,
    range_rows,
)
from normprops.launch import Target
from normprops.ops import PROPERTIES, check_opt_in, is_backward
from normprops.oracles import FLT_MAX, Reference, Tolerance, reference, tolerance

__all__ = ["Evaluation", "evaluate", "exact_shift", "exact_scale", "stress_order"]

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
    return Verdict.contract(target.label, case.family, f"{reason} (input shape {case.x.shape})")


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


def _is_float32(values: np.ndarray, dtype: str = "float32") -> bool:
    """Every value finite and exactly representable in ``dtype`` (float32 or a narrower type)."""
    with np.errstate(all="ignore"):
        as32 = values.astype(np.float32)
    if not (np.all(np.isfinite(as32)) and np.all(as32 == values)):
        return False
    return dtype == "float32" or bool(np.all(to_dtype(as32, dtype) == as32))


#: Entries a shift is tried on before all of them.
_HEAD = 64


def exact_shift(x: np.ndarray, dtype: str = "float32") -> float | None:
    """A power of two ``c`` such that ``x + c`` is exact in ``dtype`` for every finite entry, chosen
    near the row magnitude so the shift is not trivial; None when no such ``c`` is found."""
    finite = x[np.isfinite(x)].astype(np.float64)
    if finite.size == 0:
        return None
    top = float(np.max(np.abs(finite)))
    exponent = math.floor(math.log2(top)) if top > 0 else 0
    head = finite[:_HEAD]
    for e in range(exponent, exponent - 12, -1):
        c = 2.0**e
        if c < 2.0**-149:
            break
        # The first few entries reject most shifts (x + c is seldom exact) before the whole row is
        # tried: the same answer, for a fraction of the work.
        if _shifts_exactly(head, c, dtype) and _shifts_exactly(finite, c, dtype):
            return c
    return None


def _shifts_exactly(finite: np.ndarray, c: float, dtype: str) -> bool:
    """``finite + c`` exact in float64 (undoing the shift gives ``finite`` back) and representable
    in ``dtype``."""
    shifted = finite + c
    return bool(np.all(shifted - c == finite)) and _is_float32(shifted, dtype)


def exact_scale(case: Case) -> int | None:
    """A power ``k`` such that ``2^k x`` is exact and normal-range in the case's dtype and
    ``4^k eps`` in float32."""
    finite = case.x[np.isfinite(case.x)].astype(np.float64)
    normal = get_dtype(case.dtype).min_normal
    for k in (3, -3, 1, -1):
        eps = case.eps * 4.0**k
        if not (2.0**-126 <= eps <= FLT_MAX) or not _is_float32(np.array([eps])):
            continue
        scaled = finite * 2.0**k
        if _is_float32(scaled, case.dtype) and (
                scaled.size == 0 or np.all((scaled == 0) | (np.abs(scaled) >= normal))):
            return k
    return None


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
    if case.op in ("softmax", "masked_softmax", "layernorm") and "shift_invariance" not in skip:
        c = exact_shift(case.x, case.dtype)
        if c is not None:
            with np.errstate(all="ignore"):
                shifted = (case.x.astype(np.float64) + c).astype(np.float32)
            transformed.append(("shift_invariance", case.replace(x=shifted), f"x + {c:g} (exact)"))
    if case.op in ("layernorm", "rmsnorm") and "scale_invariance" not in skip:
        k = exact_scale(case)
        if k is not None:
            scaled = (case.x.astype(np.float64) * 2.0**k).astype(np.float32)
            transformed.append(("scale_invariance", case.replace(x=scaled, eps=case.eps * 4.0**k),
                                f"x * 2^{k}, eps * 4^{k}"))
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
    if is_backward(target.op):
        failures, worst = evaluate_grad(target, case, call=_call, policy=policy, oracle=oracle,
                                        metamorphic=metamorphic, skip=skip)
        failures.sort(key=lambda v: _ORDER[v.property])
        return Evaluation(tuple(failures), worst)
    out = _call(target, case)
    if isinstance(out, Verdict):  # a contract failure: nothing else can be judged
        return Evaluation(() if out.property in skip else (out,), math.inf)
    if skip >= _ALL_BUT_CONTRACT:  # only the call was asked about (a width hint's probe): no oracle
        return Evaluation((), 0.0)
    ref = reference(case, oracle=oracle)
    tol = tolerance(case, ref, model=target.error_model, policy=policy)
    failures, worst = judge_output(case, out, ref, tol, label=target.label, skip=skip)
    if "exact_constant" not in skip:
        found = judge_exact_constant(case, out, label=target.label)
        if found:
            failures.append(found)
    failures = [v for v in failures if v.property not in skip]
    if not failures and metamorphic:
        found = _metamorphic(target, case, out, ref, tol, policy=policy, oracle=oracle, skip=skip)
        if found and found.property not in skip:
            failures = [found]
    failures.sort(key=lambda v: _ORDER[v.property])
    return Evaluation(tuple(failures), worst)
