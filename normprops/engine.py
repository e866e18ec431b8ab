"""The hunt engine: one target hunted family by family, and what every front shares around it.

The CLI (``normprops hunt``), the Python API (:func:`normprops.hunt_kernel`), the pytest plugin
and the registry hunt (:mod:`normprops.registry_hunt`) all hunt through here: the loop
(:func:`hunt_families`), the seed a hunt runs under (:func:`choose_seed`), its configuration from
the active Hypothesis profile (:func:`profile_config`), its deadline (:func:`deadline_after`) and
the check that every family can draw a row the target takes (:func:`check_families_drawable`),
and the families a caller asked for (:func:`parse_families`), read alike from ``--families`` and
``families=``.

:func:`hunt_families` hunts one target family by family, saves fixtures, and stops early (with the
reason) when the target cannot be called again, when Ctrl-C arrives, or when a second family fails
the calling contract for the same cause (one message, not one per family).
"""

from __future__ import annotations

import difflib
import math
import secrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from normprops.errors import UsageError
from normprops.hunt import HuntConfig, HuntResult, check_drawable, hunt
from normprops.information import hunt_information
from normprops.launch import Target
from normprops.ops import get_op
from normprops.regressions import save_findings
from normprops.replay import with_saved_examples

__all__ = ["HuntRun", "hunt_families", "choose_seed", "profile_config", "deadline_after",
           "check_families_drawable", "parse_families", "gate_config", "GATE_PROFILE"]


@dataclass
class HuntRun:
    """The families hunted so far, and why the loop ended early (None: it did not)."""

    results: list[HuntResult] = field(default_factory=list)
    stopped: str | None = None
    interrupted: bool = False
    cut_short: bool = False  # the time budget ran out (``HuntConfig.deadline``)


def _cause(reason: str) -> str:
    """A contract failure's cause, without the input shape it happened on."""
    return reason.rsplit(" (input shape", 1)[0]


def hunt_families(target: Target, *, families: Sequence[str], config: HuntConfig,
                  fixtures_dir: Path | None = None, save: Callable[[str], bool] = lambda f: True,
                  on_result: Callable[[HuntResult, str | None], None] | None = None,
                  stop_on_repeated_contract: bool = True) -> HuntRun:
    """Hunt ``target`` on each of ``families`` in turn; fixtures under ``fixtures_dir`` for the
    families ``save`` accepts, and the newest the target's kernel saved there before tried first
    (:func:`~normprops.replay.with_saved_examples`). What the target does not promise but is
    worth knowing (range safety for a norm that does not ask for it) is hunted too and comes back
    as information (:class:`~normprops.information.InformedResult`), never as a failure or a
    fixture.
    ``on_result(result, note)`` sees each family as it finishes (note: a one-line remark, e.g. that
    its contract failure repeats an earlier one). A matrix of many kernels wants every cell:
    ``stop_on_repeated_contract=False`` hunts on (each family still hunts its other properties
    past a contract failure)."""
    run = HuntRun()
    if fixtures_dir is not None:
        target = with_saved_examples(target, fixtures_dir)
    contract_causes: dict[str, str] = {}  # cause -> the family that first showed it
    for position, family in enumerate(families, start=1):
        result = hunt_information(target, hunt(target, family=family, config=config), config=config)
        repeat = None
        contract = next((f for f in result.findings if f.property == "contract"), None)
        if contract is not None:
            cause = _cause(contract.verdict.reason)
            repeat = contract_causes.get(cause)
            contract_causes.setdefault(cause, family)
        if fixtures_dir is not None and save(family) and result.findings and repeat is None:
            result = save_findings(result, target=target, directory=fixtures_dir)
        run.results.append(result)
        note = None
        if repeat is not None and stop_on_repeated_contract:
            note = f"the same contract failure as in {repeat}"
            if position < len(families):  # families are left, which would fail it again
                run.stopped = (f"{repeat} and {family} failed the calling contract the same way: "
                               f"fix that first")
        elif result.fatal:
            run.stopped = "the target cannot be called again in this process"
        elif result.interrupted:
            run.stopped = "interrupted"
            run.interrupted = True
        elif result.cut_short:
            run.stopped = "the time budget was spent"
            run.cut_short = True
        if on_result is not None:
            on_result(result, note)
        if run.stopped:
            break
    return run


def choose_seed(seed: int | None, *, derandomized_seed: int | None) -> int | None:
    """The seed a hunt runs under: ``seed`` where one was given; where the active Hypothesis
    profile derandomizes (a CI service loads its ``ci`` profile by itself), ``derandomized_seed``
    (the CLI's fixed seed, so that a gate gives the same verdict on the same code; None for the
    API, whose profile repeats by itself); else one forced by pytest's ``--hypothesis-seed``, else
    a fresh one, kept in the report so that any run can be repeated."""
    from hypothesis import core as hypothesis_core
    from hypothesis import settings as hypothesis_settings

    if seed is not None:
        return seed
    if hypothesis_settings().derandomize:
        return derandomized_seed
    forced = getattr(hypothesis_core, "global_force_seed", None)
    return forced if isinstance(forced, int) else secrets.randbelow(2**31)


def profile_config(*, max_examples: int | None = None, seed: int | None = None,
                   policy: str = "default", oracle: str = "float64",
                   deadline: float | None = None) -> HuntConfig:
    """A :class:`~normprops.hunt.HuntConfig` under the active Hypothesis profile: its
    ``max_examples`` where none is given, its derandomization, and the profile itself as the parent
    of every hunt's settings. ValueError for a bad setting."""
    from hypothesis import settings as hypothesis_settings

    current = hypothesis_settings()
    return HuntConfig(max_examples=current.max_examples if max_examples is None else max_examples,
                      seed=seed, derandomize=current.derandomize, parent=current, policy=policy,
                      oracle=oracle, deadline=deadline)


#: The Hypothesis profile under which an op's ``OpSpec.gate_examples`` applies: the one a CI service
#: loads by itself (``CI`` set) and the repository's gate runs under.
GATE_PROFILE = "ci"


def gate_config(config: HuntConfig, *, op: str, profile: str | None = None) -> HuntConfig:
    """``config`` for a gate's hunt of a claimed family of a kernel of ``op``: under the ``ci``
    profile (``profile``; None: the active Hypothesis profile), at most the op's ``gate_examples``
    (docs/ci.md, "Examples a claimed family hunts in the gate"); otherwise, or for an op that
    declares none, ``config`` as it is. Never more examples than ``config``'s."""
    from hypothesis import settings as hypothesis_settings

    depth = get_op(op).gate_examples
    active = hypothesis_settings.get_current_profile_name() if profile is None else profile
    if depth is None or active != GATE_PROFILE or depth >= config.max_examples:
        return config
    return replace(config, max_examples=depth)


def check_families_drawable(target: Target, *, families: Sequence[str], config: HuntConfig,
                            fix: Callable[[str, str], str]) -> None:
    """Before any family is hunted: each of ``families`` can draw a row of a width ``target``
    takes. UsageError otherwise, the reason followed by ``fix(reason, family)`` (how the caller's
    front names the widths and the families)."""
    for family in families:
        try:
            check_drawable(target, family=family, config=config)
        except ValueError as exc:
            # A named-arrays op's reason says its own fix: it draws no row widths.
            named = get_op(target.op).named is not None
            raise UsageError(str(exc) if named else fix(str(exc), family)) from None


def deadline_after(time_budget: float | None) -> float | None:
    """The ``HuntConfig.deadline`` of a hunt that may take ``time_budget`` seconds from now (None:
    no budget). Raises :class:`~normprops.errors.UsageError` for a budget that is not a positive
    number of seconds."""
    if time_budget is None:
        return None
    if isinstance(time_budget, bool) or not isinstance(time_budget, (int, float)) or not (
            0 < time_budget < math.inf):
        raise UsageError(f"time_budget must be a positive number of seconds but was {time_budget!r}")
    return time.monotonic() + float(time_budget)


def parse_families(families: Iterable[str] | str | None, *, allowed: Sequence[str], argument: str,
                   op: str | None = None) -> tuple[str, ...]:
    """The families asked for: a list of names, or one string split at commas; None and ``all``
    alone mean every one of ``allowed``. Each name once, in the order given. ValueError naming
    ``argument`` (``--families`` or ``families``), the bad value, the nearest family and the
    choices; ``op`` names the op whose families ``allowed`` are (None: any op's)."""
    if families is None or (isinstance(families, str) and families.strip() == "all"):
        return tuple(allowed)
    of = "a family" if op is None else f"a family of {op}"
    choices = f"choose from {', '.join(allowed)}, or all alone"
    if isinstance(families, str):
        names: tuple[object, ...] = tuple(f.strip() for f in families.split(","))
    else:
        names = tuple(families) if isinstance(families, Iterable) else (families,)
    if not all(isinstance(f, str) for f in names):
        raise ValueError(f"{argument} must be family names (a list, or one string split at commas) "
                         f"but was {families!r}; {choices}")
    chosen = tuple(dict.fromkeys(f for f in names if isinstance(f, str) and f))  # each once
    if not chosen:
        raise ValueError(f"{argument}: no family named in {families!r}; {choices}")
    unknown = [f for f in chosen if f not in allowed]
    if unknown:
        near = [m for f in unknown for m in difflib.get_close_matches(f, list(allowed), n=1)]
        hint = f" (did you mean {', '.join(map(repr, dict.fromkeys(near)))}?)" if near else ""
        raise ValueError(f"{argument}: {', '.join(map(repr, unknown))} not {of}{hint}; {choices}")
    return chosen
