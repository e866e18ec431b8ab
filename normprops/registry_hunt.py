"""Hunting the registry: what each entry declares, turned into hunts and judged against it.

One policy, called by the CLI (``normprops hunt`` without ``--impl``), the test suite
(``pytest -m numerics``) and scripts alike:

- a **claimed** family is hunted at the widths the entry's claims are hunted at, with the
  properties the entry does not promise (``KernelSpec.exempt``) left unjudged, and must come
  back clean;
- a family with a **known bug** is hunted for that bug: at the widths the bug is hunted at
  (``KernelSpec.bug_constraints``), with its own property judged even where the entry exempts it
  on its claims (PyTorch's CUDA softmax promises no batch invariance, and its known bug *is* a
  batch-invariance bug), and must be caught on that property;
- an **unclaimed** family is hunted for the matrix only: whatever it finds is information.

:func:`as_declared` is the verdict on one cell, :func:`registry_cell_text` its matrix cell, and
:func:`hunt_registry` runs a whole plan of (kernel, family) cells, in a fixed order that
``--shard K/N`` slices.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Collection, Sequence

from normprops.case import Case
from normprops.engine import hunt_families
from normprops.hunt import HuntConfig, HuntResult
from normprops.kernelspec import KernelSpec
from normprops.launch import Target, target_from_spec
from normprops.ops import get_op
from normprops.regressions import load_fixture
from normprops.report import cell_text, declared
from normprops.strategies import families_for

__all__ = ["registry_target", "known_example", "caught", "as_declared", "registry_cell_text", "plan_cells",
           "draws", "RegistryRun", "hunt_registry"]


def registry_target(spec: KernelSpec, family: str, *, base: Target | None = None) -> Target:
    """The target a registry hunt runs ``spec`` as on ``family`` (see the module docstring);
    ``base``: ``spec``'s own target, when the caller already made it."""
    target = target_from_spec(spec) if base is None else base
    bug = spec.bug_in(family)
    if bug is None:
        return target
    ignore = target.ignore - {bug.property} if bug.property is not None else target.ignore
    examples = () if bug.example is None else (known_example(bug.example),)
    return replace(target.declared(ignore=ignore, constraints=spec.bug_constraints), examples=examples)


def known_example(name: str) -> Case:
    """The minimal input of the fixture ``name`` in ``normprops/known/`` (a known bug's finding)."""
    return load_fixture(Path(str(importlib.resources.files("normprops") / "known" / name))).minimal


def caught(spec: KernelSpec, result: HuntResult) -> bool:
    """Whether ``result`` shows the known bug of ``spec`` in its family: a failure of the bug's own
    property (of any property, for a bug that names none)."""
    bug = spec.bug_in(result.family)
    if bug is None or result.passed or spec.expectation(result.family) != "bug":
        return False
    return bug.property is None or bug.property in result.properties


def as_declared(spec: KernelSpec, result: HuntResult) -> bool:
    """Whether one hunted cell behaved as the registry declares: a claim clean, a known bug caught
    on its own property (:func:`normprops.report.declared`, which merged reports apply too)."""
    bug = spec.bug_in(result.family)
    return declared(passed=result.passed, properties=result.properties,
                    stopped=result.interrupted or result.cut_short,
                    expected=spec.expectation(result.family),
                    bug_property=None if bug is None else bug.property)


def registry_cell_text(spec: KernelSpec, result: HuntResult) -> str:
    """The matrix cell of one registry hunt: a known bug reads ``caught`` only when its own
    property failed (a bug cell that failed something else reads ``MISSED(...)``)."""
    bug = spec.bug_in(result.family)
    return cell_text(result, expected=spec.expectation(result.family),
                     bug_property=None if bug is None else bug.property)


def plan_cells(specs: Sequence[KernelSpec], *, families: Sequence[str] | None,
               shard: tuple[int, int] | None = None) -> list[tuple[KernelSpec, str]]:
    """Every (kernel, family) cell of ``specs`` in a fixed order (kernels as given, families in the
    op's order, those in ``families`` only; None: each entry's ``default_families``, every family
    of its op where it names none); ``shard=(k, n)`` keeps every n-th from the k-th."""

    def wanted(spec: KernelSpec) -> Collection[str]:
        if families is not None:
            return families
        return families_for(spec.op) if spec.default_families is None else spec.default_families

    cells = [(spec, f) for spec in specs for f in families_for(spec.op)
             if f in wanted(spec) and draws(spec, f)]
    if shard is not None:
        k, n = shard
        cells = cells[k - 1::n]
    return cells


def draws(spec: KernelSpec, family: str) -> bool:
    """Whether ``family`` draws any case the entry takes: a kernel that takes no mask is not hunted
    on a family of masked cases only (the op's ``undrawable`` says which)."""
    op = get_op(spec.op)
    if op.named is None or op.named.undrawable is None:
        return True
    declaration = op.named.default_declaration if spec.op_declaration is None else spec.op_declaration
    return op.named.undrawable(family, declaration) is None


@dataclass
class RegistryRun:
    """What a registry hunt did: each hunted cell with its entry, in the order hunted."""

    hunted: list[tuple[KernelSpec, HuntResult]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # entries stopped early, and why
    interrupted: bool = False
    cut_short: bool = False  # the time budget ran out before every cell was hunted
    not_reached: list[tuple[KernelSpec, str]] = field(default_factory=list)

    @property
    def surprises(self) -> list[tuple[KernelSpec, HuntResult]]:
        return [(s, r) for s, r in self.hunted if not as_declared(s, r)]


def hunt_registry(cells: Sequence[tuple[KernelSpec, str]], *, config: HuntConfig,
                  fixtures_dir: Path | None = None,
                  on_target: Callable[[KernelSpec, Target], None] | None = None,
                  on_result: Callable[[KernelSpec, HuntResult], None] | None = None) -> RegistryRun:
    """Hunt each planned cell (:func:`plan_cells`) as the registry declares it.

    Fixtures are saved under ``fixtures_dir`` for claims and known bugs (regressions worth
    keeping), not for unclaimed families. ``on_target(spec, target)`` sees each kernel's target
    before its first cell, ``on_result(spec, result)`` each cell as it finishes. Ctrl-C ends the run
    with ``interrupted`` set; the time budget of ``config`` with ``cut_short`` set and the cells it
    did not reach in ``not_reached``."""
    run = RegistryRun()
    for spec in dict.fromkeys(spec for spec, _ in cells):
        base = target_from_spec(spec)
        if on_target is not None:
            on_target(spec, base)

        def record(result: HuntResult, note: str | None, spec: KernelSpec = spec) -> None:
            run.hunted.append((spec, result))
            if on_result is not None:
                on_result(spec, result)

        # The claims and the unclaimed families share the entry's own target; each known bug has
        # its own (its widths, its property judged, its explicit example).
        groups: dict[str | None, tuple[Target, list[str]]] = {}
        for family in (f for s, f in cells if s is spec):
            key = family if spec.bug_in(family) is not None else None
            groups.setdefault(key, (registry_target(spec, family, base=base), []))[1].append(family)
        for target, group in groups.values():
            outcome = hunt_families(
                target, families=group, config=config, fixtures_dir=fixtures_dir,
                save=lambda f, spec=spec: spec.expectation(f) != "unclaimed",
                on_result=record, stop_on_repeated_contract=False)
            if outcome.interrupted:
                run.interrupted = True
                return run
            if outcome.cut_short:
                run.cut_short = True
                done = {(id(s), r.family) for s, r in run.hunted}
                run.not_reached = [(s, f) for s, f in cells if (id(s), f) not in done]
                return run
            if outcome.stopped:
                run.notes.append(f"{spec.label} stopped: {outcome.stopped}")
    return run
