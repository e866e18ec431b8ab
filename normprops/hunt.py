"""The hunt: Hypothesis drives one family of cases at one target, property by property.

A round runs Hypothesis until some property fails, then shrinks that failure while holding on to
the property it failed (a shrink never trades a NaN for a rounding error). The property is then
set aside and the family is hunted again for the others, each round with the full example budget,
until a round comes back clean. :func:`hunt` returns a :class:`HuntResult` with one
:class:`Finding` per failed property, most severe first; it writes nothing (the caller saves
fixtures, :mod:`normprops.regressions`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, example, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis import target as hypothesis_target
from hypothesis.errors import Flaky

from normprops import interrupt
from normprops.case import Case
from normprops.errors import FatalTargetError, is_test_outcome
from normprops.judge import Verdict
from normprops.launch import Target
from normprops.ops import PROPERTIES, get_op, is_backward
from normprops.oracles import ORACLES, POLICIES
from normprops.properties import evaluate, quoting_exact
from normprops.strategies import FAMILIES, cases, families_for, widest_cols

__all__ = ["HuntConfig", "HuntResult", "Finding", "hunt", "with_fixtures", "Counterexample",
           "examples_to_catch", "check_drawable", "case_strategy"]

_ORDER = {name: i for i, name in enumerate(PROPERTIES)}


class _StopHunt(BaseException):
    """Raised from the test body to end the hunt at once: Hypothesis catches Exceptions as failures
    to shrink, but lets BaseExceptions through. Used when the target cannot run again."""


class _BudgetSpent(BaseException):
    """Raised from the test body when the hunt's time budget is spent (``HuntConfig.deadline``)."""


class _EndsTheTest(BaseException):
    """Carries pytest's way of ending a test (``pytest.fail``, ``skip``; pytest-timeout's alarm),
    raised inside a call of the kernel, past Hypothesis, which takes ``Failed`` for a failing
    example and would call the kernel again to shrink it: the test ends at once instead."""

    def __init__(self, outcome: BaseException) -> None:
        super().__init__(outcome)
        self.outcome = outcome


class Counterexample(Exception):
    """Raised inside the Hypothesis test body so Hypothesis shrinks the failing case."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message())
        self.verdict = verdict


@dataclass(frozen=True)
class HuntConfig:
    """Everything a hunt needs, read once from the CLI, the API or pytest's options."""

    max_examples: int = 100
    seed: int | None = None
    derandomize: bool = False
    policy: str = "default"
    oracle: str = "float64"
    min_rows: int = 2
    max_rows: int = 5
    min_cols: int = 1
    max_cols: int | None = None  # the widest rows drawn; None: each family's own (MAX_COLS, long_rows')
    parent: settings | None = None  # a Hypothesis profile to start from (pytest's current one)
    # time.monotonic() past which no further example is run (a time budget): the hunt in progress
    # ends as it is, with what it found, marked cut short. None: no budget.
    deadline: float | None = None

    def __post_init__(self) -> None:
        if (not isinstance(self.max_examples, int) or isinstance(self.max_examples, bool)
                or self.max_examples < 1):
            raise ValueError(f"max_examples must be an integer of at least 1 but was {self.max_examples!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ValueError(f"seed must be an integer (or None: a fresh one) but was {self.seed!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES} but was {self.policy!r}")
        if self.oracle not in ORACLES:
            raise ValueError(f"oracle must be one of {ORACLES} but was {self.oracle!r}")

    def hypothesis_settings(self) -> settings:
        return settings(
            self.parent,
            max_examples=self.max_examples,
            derandomize=self.derandomize or (self.parent.derandomize if self.parent else False),
            deadline=None,
            # No example database: it keys every hunt alike (one test body), so a re-run replayed
            # other kernels' failures, and its Pareto front cost a sixth of a hunt's host time.
            # The fixtures a caller saved are tried first instead (replay.with_saved_examples).
            database=None,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            print_blob=False,
            verbosity=Verbosity.quiet,
            # The parent's phases (a profile may leave shrinking out), never "explain": it reruns
            # the failing case many times over to annotate a traceback nobody sees here.
            phases=tuple(p for p in (self.parent.phases if self.parent is not None else Phase)
                         if p is not Phase.explain),
        )


@dataclass(frozen=True)
class Finding:
    """One property that failed in one family: the shrunk counterexample and the worst one seen."""

    label: str  # op[kernel]
    family: str
    property: str
    verdict: Verdict  # on the minimal case
    minimal: Case
    worst: Case
    worst_verdict: Verdict
    flaky: bool = False  # the failure did not reproduce when Hypothesis replayed it
    fixture: Path | None = None  # where the caller saved it

    @property
    def message(self) -> str:
        return self.verdict.message()


@dataclass(frozen=True)
class HuntResult:
    """One family hunted on one target."""

    label: str
    op: str
    family: str
    examples: int
    elapsed_s: float
    max_ratio: float  # the worst err/tol seen on any example
    findings: tuple[Finding, ...] = ()
    fatal: bool = False  # the target cannot run again in this process (a GPU fault, a hang)
    interrupted: bool = False  # Ctrl-C: what was found before it is kept
    cut_short: bool = False  # the time budget ran out: ``examples`` says how far it got
    warnings: int = 0  # warnings the target's own code raised
    first_warning: str | None = None
    kernel: str = ""  # the target's name and backend, for reports that gather many targets
    backend: str = ""

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def properties(self) -> tuple[str, ...]:
        return tuple(f.property for f in self.findings)

    @property
    def worst_ratio(self) -> float:
        """The worst err/tol of the family, its findings included (inf: an outright failure such
        as a non-finite output or a broken contract, which has no finite ratio)."""
        return max([self.max_ratio, *(r for f in self.findings
                                      for r in (f.verdict.ratio, f.worst_verdict.ratio)
                                      if r is not None and not math.isnan(r))])

    # The most severe finding, for callers that show one.
    @property
    def failure(self) -> Verdict | None:
        return self.findings[0].verdict if self.findings else None

    @property
    def minimal(self) -> Case | None:
        return self.findings[0].minimal if self.findings else None

    @property
    def worst(self) -> Case | None:
        return self.findings[0].worst if self.findings else None

    @property
    def worst_verdict(self) -> Verdict | None:
        return self.findings[0].worst_verdict if self.findings else None

    @property
    def fixture(self) -> Path | None:
        return self.findings[0].fixture if self.findings else None

    @property
    def flaky(self) -> bool:
        return bool(self.findings) and self.findings[0].flaky


@dataclass
class _Round:
    examples: int = 0
    max_ratio: float = 0.0
    focus: str | None = None  # the property this round shrinks (the first failure's worst one)
    last: tuple[Case, Verdict] | None = None
    worst: tuple[Case, Verdict] | None = None
    current: Case | None = None
    fatal: str | None = None
    fatal_case: Case | None = None  # where cutting a counterexample's rows made the target fatal
    flaky: bool = False
    interrupted: bool = False
    cut_short: bool = False
    skip: frozenset[str] = field(default_factory=frozenset)


def case_strategy(target: Target, *, family: str,
                  config: HuntConfig = HuntConfig()) -> st.SearchStrategy[Case]:
    """The cases a hunt of ``target`` draws in ``family`` (ValueError where it has none)."""
    # The family's own widths (or up to the hunt's max_cols, where set), narrowed to those the
    # kernel takes: its limit never widens a family, so a kernel that takes rows of up to 131072
    # columns is hunted at 16385 at most but in `long_rows`, which draws its long rows up to that
    # limit. A kernel that only takes rows wider than the range is hunted up to twice its minimum;
    # where the family has none of its widths there (`ragged`'s edges, counted in very wide
    # vectors), up to the kernel's own limit.
    named = get_op(target.op).named
    if named is not None:  # an op of named arrays draws its own shapes, only masks the kernel takes
        return named.cases(family, target.dtype, target.declaration.op_promises)
    c = target.constraints
    min_cols = max(config.min_cols, c.min_cols)
    max_cols = config.max_cols
    if max_cols is not None and max_cols < min_cols:  # the kernel only takes wider rows
        max_cols = 2 * min_cols
    if c.max_cols is not None:
        if max_cols is None:
            own = None if is_backward(target.op) else family  # the gradients' have no widths of their own
            max_cols = widest_cols(own, min_cols=min_cols, cols_multiple_of=c.cols_multiple_of)
        max_cols = min(max_cols, c.max_cols)

    def drawn(widest: int | None) -> st.SearchStrategy[Case]:
        widths = dict(op=target.op, family=family, min_rows=config.min_rows, max_rows=config.max_rows,
                      min_cols=min_cols, max_cols=widest, cols_multiple_of=c.cols_multiple_of,
                      dtype=target.dtype)
        return cases(**widths, mask_fill=target.mask_fill)

    try:
        return drawn(max_cols)
    except ValueError:
        if c.max_cols is None or max_cols == c.max_cols:
            raise
        return drawn(c.max_cols)


def check_drawable(target: Target, *, family: str, config: HuntConfig = HuntConfig()) -> None:
    """ValueError, naming the family and the widths, where ``family`` has no case of a width
    ``target`` takes (``ragged``'s edge widths all outside its range): said before a hunt starts
    rather than when it reaches the family."""
    case_strategy(target, family=family, config=config)


def _given(target: Target, family: str, config: HuntConfig, body: Callable[[Case], None],
           skip: frozenset[str] = frozenset()) -> Any:
    """``body`` under ``@given`` the family's strategy, with the target's own cases of this family
    tried first (explicit examples), then its saved failures of the properties not in ``skip``
    (one whose property is set aside could only fail a property found already), most severe
    first."""
    test = given(case_strategy(target, family=family, config=config))(body)
    saved = sorted(((prop, case) for prop, case in target.saved if prop not in skip),
                   key=lambda item: _ORDER[item[0]])
    first = [*target.examples, *(case for _, case in saved)]
    # Hypothesis runs explicit examples last-decorated first: decorated in reverse, they run in
    # the order above.
    for case in reversed(first):
        if case.family == family:
            test = example(case)(test)
    return test


def _round(target: Target, family: str, config: HuntConfig, skip: frozenset[str]) -> _Round:
    seen = _Round(skip=skip)

    def body(case: Case) -> None:
        interrupt.check()  # a Ctrl-C that a finalizer swallowed still stops the hunt here
        if config.deadline is not None and time.monotonic() >= config.deadline:
            raise _BudgetSpent
        seen.current = case
        try:
            evaluation = evaluate(target, case, policy=config.policy, oracle=config.oracle, skip=skip)
        except FatalTargetError as exc:
            seen.examples += 1  # judged: the call that cannot be repeated is its finding
            seen.fatal = str(exc)
            raise _StopHunt from exc
        except BaseException as exc:
            if is_test_outcome(exc):
                raise _EndsTheTest(exc) from None
            raise
        # Counted once judged: an example Ctrl-C stops inside the kernel's call judged nothing.
        seen.examples += 1
        if math.isfinite(evaluation.worst_ratio):
            seen.max_ratio = max(seen.max_ratio, evaluation.worst_ratio)
            hypothesis_target(min(evaluation.worst_ratio, 1e300), label="err/tol")
        if not evaluation.failures:
            return
        if seen.focus is None:
            seen.focus = evaluation.failures[0].property
        verdict = next((v for v in evaluation.failures if v.property == seen.focus), None)
        if verdict is None:  # another property: its own round will shrink it
            return
        seen.last = (case, verdict)
        if seen.worst is None or verdict.ratio >= seen.worst[1].ratio:
            seen.worst = (case, verdict)
        raise Counterexample(verdict)

    test = settings(config.hypothesis_settings())(_given(target, family, config, body, skip))
    if config.seed is not None:
        test = hypothesis_seed(config.seed)(test)
    try:
        test()
    except _EndsTheTest as ended:
        raise ended.outcome from None
    except Counterexample:
        pass
    except Flaky as exc:
        seen.flaky = True  # e.g. a nondeterministic kernel whose failure did not reproduce
        if seen.last is None:
            # No verdict was kept: the error came from outside the kernel's call (which turns
            # anything the kernel raises into a verdict), normprops' own or Hypothesis'. That is an
            # internal error whether or not it repeats, never a pass.
            inner = next(iter(getattr(exc, "exceptions", ())), None)
            raise (inner if inner is not None else exc) from None
    except _StopHunt:
        # The target cannot run again: the case that caused it is the counterexample.
        verdict = _stopped(target, family, seen.fatal, seen.current)
        seen.last = seen.worst = (seen.current, verdict)
    except _BudgetSpent:
        seen.cut_short = True  # a failure already seen is kept, shrunk as far as it got
    except KeyboardInterrupt:
        seen.interrupted = True
    return seen


def _stopped(target: Target, family: str, fatal: str, case: Case) -> Verdict:
    return Verdict.contract(target.label, family, f"{fatal} (input shape {case.shape}); hunt stopped")


def _fewer_rows(target: Target, family: str, config: HuntConfig, seen: _Round) -> None:
    """Drop the rows of the shrunk counterexample ``seen.last`` that its failure does not need,
    one at a time from the last, keeping a drop when the same property still fails.

    Hypothesis shrinks the number of rows, but a case's rows all come from one seed, so fewer rows
    are a prefix of the same rows: when only the last row fails (a rounding error that one row in
    five shows), no smaller draw keeps it. The rows a kernel receives are data, so the case made
    of the failing rows alone (:meth:`Case.take`) is a counterexample of its own, as many rows as
    the family and the hunt draw at least. Gradient cases keep their rows: their families choose
    them (``tall``)."""
    case, verdict = seen.last
    if (is_backward(target.op) or get_op(target.op).named is not None
            or Phase.shrink not in config.hypothesis_settings().phases):
        return
    fam = FAMILIES[family]
    floor = max(config.min_rows, fam.min_rows)
    if case.rows <= floor:
        return
    keep = list(range(case.rows))
    best = (case, verdict)
    try:
        for row in reversed(range(case.rows)):
            if len(keep) <= floor:
                break
            if config.deadline is not None and time.monotonic() >= config.deadline:
                break
            rows = [r for r in keep if r != row]
            candidate = case.take(np.array(rows))
            candidate = candidate.replace(params=_rows_kept(case, rows, fam.row_params))
            if not fam.promise(candidate):
                continue
            try:
                evaluation = evaluate(target, candidate, policy=config.policy, oracle=config.oracle,
                                      skip=seen.skip)
            except FatalTargetError as exc:  # the target cannot run again: the hunt stops here
                seen.examples += 1
                seen.fatal, seen.fatal_case = str(exc), candidate
                break
            seen.examples += 1  # counted once judged, as Hypothesis' shrinking is
            again = next((v for v in evaluation.failures if v.property == verdict.property), None)
            if again is not None:
                keep, best = rows, (candidate, again)
    except KeyboardInterrupt:
        seen.interrupted = True
    finally:
        if best[0] is not case:
            if seen.worst is not None and seen.worst[0] is case and best[1].ratio >= seen.worst[1].ratio:
                seen.worst = best
            seen.last = best


def _rows_kept(case: Case, rows: list[int], row_params: tuple[str, ...]) -> dict[str, Any]:
    """``case``'s parameters for its ``rows`` alone: which of the rows drawn are kept, and the
    parameters that describe one row each (``row_params``) for those rows only."""
    drawn = case.params.get("rows_drawn", case.rows)
    before = case.params.get("rows_kept", list(range(case.rows)))
    per_row = {name: [case.params[name][r] for r in rows] for name in row_params
               if isinstance(case.params.get(name), list) and len(case.params[name]) == case.rows}
    return {**case.params, **per_row, "rows_kept": [before[r] for r in rows], "rows_drawn": drawn}


def hunt(target: Target, *, family: str, config: HuntConfig = HuntConfig()) -> HuntResult:
    """Hunt ``target`` with cases of ``family`` under ``config``, one property at a time."""
    if family not in families_for(target.op):
        raise ValueError(f"family {family!r} does not apply to op {target.op!r}; families for "
                         f"{target.op}: {', '.join(families_for(target.op))}")
    start = time.perf_counter()
    findings: list[Finding] = []
    skip: frozenset[str] = frozenset()
    examples, max_ratio = 0, 0.0
    fatal = interrupted = cut_short = False
    target.warnings.take()
    while len(skip) < len(PROPERTIES):
        seen = _round(target, family, config, skip)
        examples += seen.examples
        max_ratio = max(max_ratio, seen.max_ratio)
        if seen.last is not None:
            if not (seen.fatal is not None or seen.interrupted or seen.cut_short):
                _fewer_rows(target, family, config, seen)
            (minimal, verdict), (worst, worst_verdict) = seen.last, seen.worst
            # A verdict on an output by name quotes its element at 200 bits (the others as judged).
            verdict = quoting_exact(minimal, verdict, oracle=config.oracle)
            worst_verdict = quoting_exact(worst, worst_verdict, oracle=config.oracle)
            findings.append(Finding(target.label, family, verdict.property, verdict, minimal, worst,
                                    worst_verdict, flaky=seen.flaky))
            skip = skip | {verdict.property}
            if seen.fatal_case is not None:
                stopped = _stopped(target, family, seen.fatal, seen.fatal_case)
                findings.append(Finding(target.label, family, stopped.property, stopped, seen.fatal_case,
                                        seen.fatal_case, stopped))
        fatal = seen.fatal is not None
        interrupted = seen.interrupted
        cut_short = seen.cut_short
        if seen.last is None or fatal or interrupted or cut_short:
            break
    findings.sort(key=lambda f: _ORDER[f.property])
    count, first = target.warnings.take()
    return HuntResult(target.label, target.op, family, examples, time.perf_counter() - start,
                      max_ratio, tuple(findings), fatal=fatal, interrupted=interrupted,
                      cut_short=cut_short, warnings=count, first_warning=first, kernel=target.name,
                      backend=target.backend)


def with_fixtures(result: HuntResult, paths: dict[str, Path]) -> HuntResult:
    """``result`` with the fixture paths its caller saved, by property."""
    return replace(result, findings=tuple(replace(f, fixture=paths.get(f.property, f.fixture))
                                          for f in result.findings))



def examples_to_catch(target: Target, *, family: str, config: HuntConfig,
                      property: str | None = None) -> int | None:
    """The number of examples of ``family`` a hunt under ``config`` draws up to and including the
    first that fails ``property`` (any property, when None), without shrinking; None when none of
    ``config.max_examples`` does. What the table of known bugs' examples-to-catch measures: the
    generate phase is the hunt's own, so a hunt with the same seed meets the bug at that example."""
    skip = frozenset(PROPERTIES) - {property} if property is not None else frozenset()
    first: list[int] = []
    count = 0

    def body(case: Case) -> None:
        nonlocal count
        interrupt.check()
        count += 1
        evaluation = evaluate(target, case, policy=config.policy, oracle=config.oracle, skip=skip)
        if evaluation.failures:
            if not first:
                first.append(count)
            raise Counterexample(evaluation.failures[0])

    base = config.hypothesis_settings()
    test = settings(base, phases=tuple(p for p in base.phases if p in (Phase.explicit, Phase.generate)))(
        _given(target, family, config, body, skip))
    if config.seed is not None:
        test = hypothesis_seed(config.seed)(test)
    try:
        test()
    except (Counterexample, Flaky):
        pass
    return first[0] if first else None
