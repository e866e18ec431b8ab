"""Replaying the saved fixtures of one op on a kernel, pruning those it no longer fails, and
handing a hunt the failures its kernel saved, to try first.

:func:`replay_fixtures` loads the fixtures under a directory, selects those that belong to the
kernel (its storage type, the widths it accepts), replays them in order and returns a
:class:`ReplayRun`: per fixture passed, failed (with its finding), not judged, unreadable, skipped
or not run, and whether the set was complete. :func:`prune_fixtures` chooses the fixtures to
remove (a kernel's, or those of a kernel that a function passes) and removes them. Neither prints:
the ``on_*`` callbacks see each step as it happens, so a caller can report progress, and the
objects they receive are filled in as the run goes (a Ctrl-C leaves what was done so far).
:func:`with_saved_examples` gives a target the newest failure its kernel saved of each family and
property, which a hunt tries before it draws anything (a re-run meets the last failure first).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from normprops.case import Case, ShapeConstraints
from normprops.errors import UsageError
from normprops.flags import flag
from normprops.launch import Target, same_source
from normprops.regressions import (
    Fixture,
    FixtureListing,
    Replayed,
    Selection,
    list_fixtures,
    replay_selection,
    select_fixtures,
)

__all__ = ["ReplayRun", "replay_fixtures", "Pruning", "PruneProgress", "prune_fixtures", "saved_examples",
           "with_saved_examples"]


def _target_for(target: Target | Callable[[str], Target]) -> Callable[[str], Target]:
    """A target per storage type: ``target`` itself when it is one (a fixture of another storage
    type is then not selected unless ``all_dtypes``), else the factory."""
    if isinstance(target, Target):
        return lambda dtype: target
    return target


@dataclass
class ReplayRun:
    """The fixtures of one op under a directory replayed on a kernel, filled in as it runs."""

    listing: FixtureListing  # every fixture file: those that load, and those that do not
    selection: Selection  # those replayed, each in its storage type, and those left out
    replayed: list[Replayed] = field(default_factory=list)  # in order, as they ran
    stopped: str | None = None  # why the replay ended early: the kernel cannot be called again

    @property
    def failed(self) -> list[Replayed]:
        return [r for r in self.replayed if not r.passed]

    @property
    def not_judged(self) -> list[Replayed]:
        """Replayed clean, but their property is not judged for this kernel."""
        return [r for r in self.replayed if r.passed and r.unjudged]

    @property
    def passed(self) -> list[Replayed]:
        return [r for r in self.replayed if r.passed and not r.unjudged]

    @property
    def not_run(self) -> tuple[tuple[Fixture, str], ...]:
        """Selected but never replayed (the kernel stopped the replay, or it was interrupted)."""
        return self.selection.replays[len(self.replayed):]

    @property
    def complete(self) -> bool:
        """Every fixture file was read and every selected fixture replayed."""
        return not self.listing.unreadable and not self.not_run


def replay_fixtures(directory: Path, *, op: str, target: Target | Callable[[str], Target],
                    dtype: str = "float32", all_dtypes: bool = False,
                    widths: ShapeConstraints = ShapeConstraints(), reduction: str | None = None,
                    policy: str = "default",
                    on_selected: Callable[[ReplayRun], None] | None = None,
                    on_result: Callable[[Replayed], None] | None = None) -> ReplayRun:
    """Replay the ``op`` fixtures under ``directory`` that a kernel of storage type ``dtype``
    taking rows of ``widths`` owns (with ``all_dtypes``, every fixture in its own storage type; a
    loss gradient's of its ``reduction`` only, see :func:`select_fixtures`) on
    ``target`` (a target, or a function from a storage type to one). ``on_selected`` is called
    once the fixtures are loaded and selected, before any runs (with the run it returns, empty);
    ``on_result`` after each fixture. The replay ends after a fixture on which the target stopped
    (``ReplayRun.stopped``)."""
    listing = list_fixtures(directory, op=op)
    selection = select_fixtures(listing.fixtures, dtype=dtype, all_dtypes=all_dtypes, widths=widths,
                                reduction=reduction)
    run = ReplayRun(listing, selection)
    if on_selected is not None:
        on_selected(run)
    for result in replay_selection(selection, _target_for(target), policy=policy):
        run.replayed.append(result)
        run.stopped = result.stopped
        if on_result is not None:
            on_result(result)
    return run


@dataclass
class Pruning:
    """The fixtures chosen for removal under a directory, filled in as the choice is made."""

    listing: FixtureListing  # every fixture file: those that load, and those that do not
    mine: list[Fixture]  # those of the kernel asked for (the function's own when none was)
    selection: Selection | None = None  # with a function: those replayed on it, and those left out
    chosen: list[Fixture] = field(default_factory=list)  # to remove
    failing: list[Replayed] = field(default_factory=list)  # replayed, and still failing: kept
    not_judged: list[Fixture] = field(default_factory=list)  # passed, their property not judged
    replayed: int = 0
    stopped: str | None = None  # why the replay ended early: the function cannot be called again
    removed: list[Fixture] = field(default_factory=list)  # removed (or, dry, to be removed) so far

    @property
    def not_run(self) -> int:
        return 0 if self.selection is None else len(self.selection.replays) - self.replayed


@dataclass(frozen=True)
class PruneProgress:
    """What :func:`prune_fixtures` reports as it goes: ``selected`` once the fixtures are loaded
    and (with a target) selected, ``replayed`` after each replayed fixture, ``removed`` after each
    removal (or, dry, each fixture that would be removed)."""

    selected: Callable[[Pruning], None] | None = None
    replayed: Callable[[Replayed], None] | None = None
    removed: Callable[[Fixture], None] | None = None


def prune_fixtures(directory: Path, *, op: str | None = None, kernel: str | None = None,
                   target: Target | Callable[[str], Target] | None = None, dtype: str = "float32",
                   all_dtypes: bool = False, widths: ShapeConstraints = ShapeConstraints(),
                   policy: str = "default", dry_run: bool = False,
                   progress: PruneProgress | None = None) -> Pruning:
    """Remove the fixtures under ``directory`` (of ``op``, or of every op) saved by ``kernel``,
    or, with ``target``, those of its own kernel (as a hunt of it saves them) that it passes when
    replayed (as :func:`replay_fixtures` selects and judges them); with both, the fixtures of
    ``kernel`` that ``target`` passes (a kernel fixed under a new name). Another kernel's
    fixtures are never removed for ``target`` passing them: each holds that kernel's finding, and
    in a committed folder a regression every kernel of its op is replayed on. Nothing is removed
    when none of the kernel's fixtures is selected for the replay, nor with ``dry_run``.
    ``progress`` (:class:`PruneProgress`) sees the selection, each replayed fixture and each
    removal as they happen."""
    progress = PruneProgress() if progress is None else progress
    on_selected, on_result, on_removed = progress.selected, progress.replayed, progress.removed
    if kernel is None and target is None:
        raise ValueError("prune_fixtures needs kernel, target or both")
    listing = list_fixtures(directory, op=op)
    if kernel is None:
        assert target is not None
        pruning = Pruning(listing, _own(listing.fixtures, _target_for(target)(dtype)))
    else:
        pruning = Pruning(listing, [f for f in listing.fixtures if f.of_kernel(kernel)])
    if kernel is not None and not pruning.mine:  # a package's name for a kernel it re-exports
        pruning.mine = [f for f in listing.fixtures if f.of_package(kernel)]
    sources = _sources(pruning.mine) if kernel is not None else []
    if len(sources) > 1:
        raise UsageError(f"kernel {kernel!r} ({flag('kernel')}) is the name of {len(sources)} kernels "
                         f"defined in different places ({', '.join(sources)}); name one by where it is "
                         f"defined, e.g. {sources[0]}")
    if not pruning.mine:
        if on_selected is not None:
            on_selected(pruning)
        return pruning
    if target is None:
        pruning.chosen = list(pruning.mine)
    else:
        pruning.selection = select_fixtures(pruning.mine, dtype=dtype, all_dtypes=all_dtypes,
                                            widths=widths)
    if on_selected is not None:
        on_selected(pruning)
    if pruning.selection is not None:
        if not pruning.selection.replays:
            return pruning
        for result in replay_selection(pruning.selection, _target_for(target), policy=policy):
            pruning.replayed += 1
            if result.passed and result.unjudged:
                pruning.not_judged.append(result.fixture)
            elif result.passed:
                pruning.chosen.append(result.fixture)
            else:
                pruning.failing.append(result)
                pruning.stopped = result.stopped
            if on_result is not None:
                on_result(result)
    for fixture in pruning.chosen:
        if not dry_run:
            fixture.path.unlink()
        pruning.removed.append(fixture)
        if on_removed is not None:
            on_removed(fixture)
    return pruning


def _sources(fixtures: list[Fixture]) -> list[str]:
    """The places the kernels of ``fixtures`` are defined in, where recorded; more than one only
    where two of them name different kernels."""
    out = sorted({f.source for f in fixtures if f.source is not None})
    apart = any(not same_source(a, b) for i, a in enumerate(out) for b in out[i + 1:])
    return out if apart else out[:1]


def _own(fixtures: list[Fixture], target: Target) -> list[Fixture]:
    """The fixtures a hunt of ``target`` saved: its kernel's name, and where it is defined where
    both record that."""
    return [f for f in fixtures if f.kernel == target.kernel
            and (f.source is None or target.source is None or same_source(f.source, target.source))]


def saved_examples(directory: Path, *, target: Target) -> tuple[tuple[str, Case], ...]:
    """The failures ``target``'s kernel saved under ``directory`` that a hunt tries first, as
    (property, minimal input): the newest fixture of each family and property, of those the kernel
    can be handed (its storage type, widths it accepts; as :func:`select_fixtures` chooses for a
    replay). A file that cannot be read is passed over (``normprops replay`` names it)."""
    mine = _own(list_fixtures(directory, op=target.op).fixtures, target)
    reduction = getattr(target.declaration.op_promises, "reduction", None)  # a loss's; None for others
    chosen = [f for f, _ in select_fixtures(mine, dtype=target.dtype, widths=target.constraints,
                                            reduction=reduction).replays]
    newest: dict[tuple[str, str], Fixture] = {}
    for fixture in sorted(chosen, key=lambda f: f.saved_at()[0], reverse=True):
        newest.setdefault((fixture.family, fixture.property), fixture)
    return tuple((f.property, f.minimal if f.minimal.mask_fill == target.mask_fill
                  else f.minimal.replace(mask_fill=target.mask_fill)) for f in newest.values())


def with_saved_examples(target: Target, directory: Path) -> Target:
    """``target`` with the failures its kernel saved under ``directory`` (:func:`saved_examples`)
    tried first by each hunt round that still judges their property: a re-run meets the last
    failure on its first example, as Hypothesis' example database would have it, but keyed by
    kernel, family and property."""
    return replace(target, saved=saved_examples(directory, target=target))
