"""The hunt: Hypothesis drives one family of cases at one target until a property fails, then shrinks.

``hunt`` returns a :class:`HuntResult` with the minimal counterexample (the last failing example
Hypothesis replays after shrinking) and the worst one seen (largest err/tol), and writes both to a
regression fixture when a fixtures directory is configured.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, given, seed as hypothesis_seed, settings
from hypothesis import target as hypothesis_target
from hypothesis.errors import Flaky

from normprops.judge import Verdict
from normprops.launch import FatalTargetError, Target
from normprops.oracles import ORACLES, POLICIES
from normprops.properties import evaluate
from normprops.regressions import save_fixture
from normprops.strategies import MAX_COLS, Case, cases, families_for

__all__ = ["HuntConfig", "HuntResult", "hunt", "Counterexample"]


class _StopHunt(BaseException):
    """Raised from the test body to end the hunt at once: Hypothesis catches Exceptions as failures
    to shrink, but lets BaseExceptions through. Used when the target cannot run again."""


class Counterexample(Exception):
    """Raised inside the Hypothesis test body so Hypothesis shrinks the failing case."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message())
        self.verdict = verdict


@dataclass(frozen=True)
class HuntConfig:
    """Everything a hunt needs, read once from the CLI or pytest options."""

    max_examples: int = 100
    seed: int | None = None
    derandomize: bool = False
    policy: str = "default"
    oracle: str = "float64"
    min_rows: int = 2
    max_rows: int = 5
    min_cols: int = 1
    max_cols: int = MAX_COLS
    fixtures_dir: Path | None = None
    parent: settings | None = None  # a Hypothesis profile to start from (pytest's current one)

    def __post_init__(self) -> None:
        if self.max_examples < 1:
            raise ValueError(f"max_examples must be at least 1 but was {self.max_examples}")
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
            database=self.parent.database if self.parent is not None else None,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            print_blob=False,
            verbosity=Verbosity.quiet,
            phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        )


@dataclass(frozen=True)
class HuntResult:
    label: str
    op: str
    family: str
    examples: int
    elapsed_s: float
    max_ratio: float  # the worst err/tol seen on any example
    failure: Verdict | None = None
    minimal: Case | None = None
    worst: Case | None = None
    worst_verdict: Verdict | None = None
    fixture: Path | None = None
    flaky: bool = False
    fatal: bool = False  # the target cannot run again in this process (a GPU fault)

    @property
    def passed(self) -> bool:
        return self.failure is None


@dataclass
class _Seen:
    examples: int = 0
    max_ratio: float = 0.0
    last: tuple[Case, Verdict] | None = None
    worst: tuple[Case, Verdict] | None = None
    current: Case | None = None
    fatal: str | None = None


def hunt(target: Target, *, family: str, config: HuntConfig = HuntConfig()) -> HuntResult:
    """Hunt ``target`` with cases of ``family`` under ``config``."""
    if family not in families_for(target.op):
        raise ValueError(f"family {family!r} does not apply to op {target.op!r}; families for "
                         f"{target.op}: {', '.join(families_for(target.op))}")
    seen = _Seen()

    def body(case: Case) -> None:
        seen.examples += 1
        seen.current = case
        try:
            evaluation = evaluate(target, case, policy=config.policy, oracle=config.oracle)
        except FatalTargetError as exc:
            seen.fatal = str(exc)
            raise _StopHunt from exc
        if math.isfinite(evaluation.worst_ratio):
            seen.max_ratio = max(seen.max_ratio, evaluation.worst_ratio)
            hypothesis_target(min(evaluation.worst_ratio, 1e300), label="err/tol")
        if evaluation.failures:
            verdict = evaluation.failures[0]
            seen.last = (case, verdict)
            if seen.worst is None or verdict.ratio >= seen.worst[1].ratio:
                seen.worst = (case, verdict)
            raise Counterexample(verdict)

    strategy = cases(op=target.op, family=family, min_rows=config.min_rows,
                     max_rows=config.max_rows, min_cols=config.min_cols, max_cols=config.max_cols,
                     dtype=target.dtype)
    test = settings(config.hypothesis_settings())(given(strategy)(body))
    if config.seed is not None:
        test = hypothesis_seed(config.seed)(test)
    start = time.perf_counter()
    flaky = fatal = False
    try:
        test()
    except Counterexample:
        pass
    except Flaky:
        flaky = True  # e.g. a nondeterministic kernel whose failure did not reproduce on replay
    except _StopHunt:
        # The target cannot run again (a GPU fault): the case that caused it is the counterexample.
        fatal = True
        verdict = Verdict(target.label, "contract", family, None, None, None, None, None, None,
                          math.inf, f"{seen.fatal} (input shape {seen.current.x.shape}); hunt stopped")
        seen.last = seen.worst = (seen.current, verdict)
    elapsed = time.perf_counter() - start
    if seen.last is None:
        return HuntResult(target.label, target.op, family, seen.examples, elapsed, seen.max_ratio)
    minimal, verdict = seen.last
    result = HuntResult(target.label, target.op, family, seen.examples, elapsed,
                        max(seen.max_ratio, 0.0), verdict, minimal, seen.worst[0], seen.worst[1],
                        flaky=flaky, fatal=fatal)
    if config.fixtures_dir is not None:
        result = replace(result, fixture=save_fixture(result, target=target,
                                                      directory=config.fixtures_dir))
    return result
