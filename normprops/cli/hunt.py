"""``normprops hunt``: a function, a CUDA source, or the registry's kernels, family by family."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence, TextIO

from normprops import __version__
from normprops.api import replay_flags, target_json
from normprops.cli.common import (
    BACKEND_PREFERENCE,
    EXIT_FOUND,
    EXIT_NOTHING,
    EXIT_OK,
    _check_output_dir,
    _check_output_file,
    _config,
    _count,
    _flag_names,
    _guarded,
    _parse_families,
    _Run,
    _user_only_flags,
    _user_target,
)
from normprops.engine import HuntRun, check_families_drawable, deadline_after, hunt_families
from normprops.errors import UsageError
from normprops.hints import hints
from normprops.hunt import HuntConfig, HuntResult
from normprops.information import WORDS, information_of
from normprops.kernelspec import KernelSpec
from normprops.launch import Target
from normprops.merge import Carried, ReportError, carried_cells, load_report, resume_problems
from normprops.ops import OPS, is_backward
from normprops.registry_hunt import RegistryRun, caught, hunt_registry, plan_cells, registry_cell_text
from normprops.regressions import list_fixtures
from normprops.report import (
    Cell,
    Report,
    cell_from_json,
    cell_text,
    declared_json,
    format_finding,
    matrix_legend,
    render_matrix,
)
from normprops.specs import KERNELS, backend_status, unusable_kernels
from normprops.strategies import families_for


def _nothing_judged(budget: float) -> str:
    """What a hunt cut short before its first example says (exit status 5)."""
    return f"nothing judged: the time budget of {budget:g} s was spent before the first example"


def _family_line(result: HuntResult, note: str | None) -> str:
    status = "pass" if result.passed else "FAIL " + ",".join(result.properties)
    if (result.interrupted or result.cut_short) and result.passed:
        status = "stopped"
    words = ", ".join(dict.fromkeys(WORDS[f.property] for f in information_of(result)))
    if words:
        status += f" ({words})"
    examples = "example" if result.examples == 1 else "examples"
    if result.findings:  # each finding was shrunk, and the family hunted again for the others
        examples += " (incl. shrinking)"
    elif result.examples == 1:
        examples += " "  # in line with "examples"
    if result.examples:
        judged = f"worst err/tol {result.worst_ratio:.3g}"
    else:  # cut short before its first example: no ratio, not even 0
        judged = "nothing judged"
    line = (f"  {result.family:16s} {status:30s} {result.examples:6d} {examples}  {judged}  "
            f"{result.elapsed_s:.1f}s")
    if note:
        line += f"  ({note})"
    return line


def _warnings_line(result: HuntResult) -> str | None:
    if not result.warnings:
        return None
    return (f"    {result.warnings} warning{'s' * (result.warnings != 1)} from the kernel's own code "
            f"(first: {result.first_warning})")


def _fixtures_line(results: list[HuntResult], directory: Path | None,
                   replay: str | None = None) -> str | None:
    """Where the findings were saved, and the command that replays them (``replay``: the whole
    command, where one kernel and its declarations are known; a registry hunt's fixtures are
    replayed by the tests, against every kernel that claims their family)."""
    saved = {f.fixture for r in results for f in r.findings if f.fixture is not None}
    if directory is None or not saved:
        return None
    line = (f"fixtures: {len(saved)} saved under {directory}/ (--fixtures-dir DIR to change, "
            f"--no-fixtures to skip)")
    return line if replay is None else f"{line}; replay with: {replay}"


def _hunt_impl(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    target, source = _user_target(args)
    chosen = _parse_families(args.families, allowed=families_for(args.op), op=args.op)
    families = chosen
    if args.shard is not None:
        families = chosen[args.shard[0] - 1::args.shard[1]]
    config = _config(args)
    check_families_drawable(target, families=families, config=config,
                            fix=lambda why, family: f"{_flag_names(why)}: widen --min-cols or "
                                                    f"--max-cols, or leave {family} out (--families)")
    fixtures = None if args.no_fixtures else args.fixtures_dir
    # The families asked for, not this shard's: the shards of one hunt must agree on them.
    report = Report("hunt", settings={"op": args.op, "impl": source, "policy": config.policy,
                                      "oracle": config.oracle, "max_examples": config.max_examples,
                                      "seed": config.seed, "families": list(chosen),
                                      "shard": None if args.shard is None else "%d/%d" % args.shard,
                                      "time_budget": args.time_budget}, targets=[target_json(target)])
    hunt = _KernelHunt(args, out, target=target, source=source, chosen=chosen, families=families,
                       config=config, fixtures=fixtures, report=report)
    return _guarded(_Run(report, args.json, out, err, summary=hunt.summary), hunt.body)


@dataclass
class _KernelHunt:
    """A hunt of one kernel (``--impl``, ``--cuda-source``) as the CLI runs it: what it prints as
    each family finishes, and what it records in the report."""

    args: argparse.Namespace
    out: TextIO
    target: Target
    source: str  # the --impl or --cuda-source that named it
    chosen: tuple[str, ...]  # the families asked for
    families: tuple[str, ...]  # this shard's part of them (all of them without --shard)
    config: HuntConfig
    fixtures: Path | None
    report: Report

    def body(self) -> int:
        """The hunt, from its header to its verdict; the exit status."""
        args = self.args
        if not self.families:  # more shards than families: this one's part of the whole is empty
            print(f"normprops hunt: shard {args.shard[0]}/{args.shard[1]} holds none of the "
                  f"{_count(len(self.chosen), 'family', 'families')} asked for: nothing to hunt here "
                  f"(its report merges with the other shards').", file=self.out)
            return EXIT_OK
        self.header()
        try:
            hunted = hunt_families(self.target, families=self.families, fixtures_dir=self.fixtures,
                                   on_result=self.show,
                                   config=replace(self.config, deadline=deadline_after(args.time_budget)))
        except KeyboardInterrupt:  # between two hunts, e.g. while a fixture was being saved
            self.report.extra["not_reached"] = self.not_reached()
            raise
        if hunted.interrupted:
            self.report.extra["not_reached"] = self.not_reached()
            raise KeyboardInterrupt
        not_hunted = self.record_early_end(hunted)
        self.summary()
        return self.verdict(hunted, not_hunted)

    def header(self) -> None:
        """The line that opens the hunt (the target, its declaration, the families and the seed),
        and the saved fixtures that cannot be tried first."""
        target, args, config, fixtures = self.target, self.args, self.config, self.fixtures
        ignored = f"; not judged: {', '.join(sorted(target.ignore))}" if target.ignore else ""
        if target.opt_in:
            ignored += f"; also judged: {', '.join(sorted(target.opt_in))}"
        if target.information:
            ignored += (f"; hunted as information only: {', '.join(sorted(target.information))} "
                        f"(--check to judge)")
        if target.error_model.arithmetic != "float32":
            ignored += f"; computes in {target.error_model.arithmetic}"
        if target.error_model.variance == "one_pass":
            ignored += "; variance as E[x^2] - E[x]^2 (--variance one_pass)"
        if is_backward(target.op) and OPS[target.op].has_gamma:
            ignored += f"; rows summed: {target.row_reduction} (--row-reduction)"
        if pool := getattr(target.declaration.op_declaration, "shape_pool", 0):
            ignored += f"; {pool} shapes a family (a shape pool)"
        arithmetic = "flush-to-zero allowed (--ftz)" if target.error_model.ftz else "judged as IEEE"
        shard = ("" if args.shard is None else
                 f" (shard {args.shard[0]}/{args.shard[1]} of the {len(self.chosen)} asked for)")
        print(f"normprops hunt: {target.label} from {self.source} ({target.adapter.description}), "
              f"{_count(len(self.families), 'family', 'families')}{shard}, {config.max_examples} "
              f"examples each (more where a family fails: its shrinking, and a round per further "
              f"property); widths: {target.constraints.describe()}; {arithmetic}{ignored}; seed "
              f"{config.seed}", file=self.out)
        unreadable = [] if fixtures is None else list_fixtures(fixtures, op=target.op).unreadable
        if unreadable:  # passed over by the saved examples a hunt tries first
            note = (f"{_count(len(unreadable), 'fixture', 'fixtures')} under {fixtures / target.op} "
                    f"could not be read and {'is' if len(unreadable) == 1 else 'are'} not tried first "
                    f"(normprops fixtures list --fixtures-dir {fixtures} names them)")
            self.report.notes.append(note)
            print(f"  {note}", file=self.out)

    def show(self, result: HuntResult, note: str | None) -> None:
        """A family as it finishes: its line, its findings and what it found as information."""
        out = self.out
        self.report.results.append((result, None))
        print(_family_line(result, note), file=out, flush=True)
        warned = _warnings_line(result)
        if warned:
            print(warned, file=out)
        if note is None:
            for finding in result.findings:
                print(format_finding(finding), file=out)
        for finding in information_of(result):
            print(f"    {WORDS[finding.property]}: information, not a failure ({finding.property} "
                  f"is not judged; --check {finding.property} judges it)", file=out)
            print(format_finding(finding, indent="      "), file=out)

    def not_reached(self) -> list[str]:
        done = {r.family for r, _ in self.report.results}
        return [f for f in self.families if f not in done]

    def record_early_end(self, hunted: HuntRun) -> str:
        """A hunt cut short by its time budget, or stopped before its last family: said, and noted
        in the report. Returns what was not hunted, in words."""
        report, families, budget = self.report, self.families, self.args.time_budget
        report.cut_short = hunted.cut_short
        reached = len(report.results)
        not_hunted = (f"{len(families) - reached} of {len(families)} families not hunted"
                      if reached < len(families) else "every family hunted")
        if hunted.cut_short:
            report.extra["not_reached"] = self.not_reached()
            report.notes.append(f"cut short: the time budget of {budget:g} s was spent; {not_hunted}")
            examples = _count(sum(r.examples for r, _ in report.results), "example", "examples")
            print(f"  cut short: the time budget of {budget:g} s was spent after {reached} "
                  f"of {len(families)} families ({examples}); not hunted: "
                  f"{', '.join(report.extra['not_reached']) or 'none'}.", file=self.out)
        elif hunted.stopped:
            report.extra["not_reached"] = self.not_reached()
            if any(r.fatal for r in hunted.results):
                # The kernel cannot be called again (it hung, or faulted the GPU): the report is
                # not whole, as a replay that stops is not. (A hunt that stopped because every
                # family broke the same contract chose to: it is whole.)
                report.error = f"hunt stopped: {hunted.stopped}; {not_hunted}"
            report.notes.append(f"stopped: {hunted.stopped}")
            print(f"  stopped: {hunted.stopped}; {not_hunted}.", file=self.out)
        return not_hunted

    def summary(self) -> None:
        """The matrix of the families hunted so far, and where their fixtures went (also on Ctrl-C)."""
        args, target, out = self.args, self.target, self.out
        results = [r for r, _ in self.report.results]
        if not results:
            return
        cells = [Cell(target.label, target.name, r.family, cell_text(r)) for r in results]
        print("\n" + render_matrix(cells), file=out)
        print(matrix_legend(cells), file=out)
        replay = None
        if args.impl and self.fixtures is not None:
            replay = (f"normprops replay --op {args.op} --impl {args.impl} --fixtures-dir {self.fixtures}"
                      f"{replay_flags(target_json(target), policy=args.policy)}")
        line = _fixtures_line(results, self.fixtures, replay)
        if line:
            print(line, file=out)

    def verdict(self, hunted: HuntRun, not_hunted: str) -> int:
        """The hints and the closing line; the exit status."""
        report, out, families, budget = self.report, self.out, self.families, self.args.time_budget
        reached = len(report.results)
        failed = [r for r, _ in report.results if not r.passed]
        findings = sum(len(r.findings) for r in failed)
        if not any(r.fatal for r in hunted.results):  # a target that hung is not run again
            report.hints = hints(report.failures, target=self.target, policy=self.config.policy,
                                 oracle=self.config.oracle)
        for line in report.hints:
            print(line, file=out)
        if failed:
            stop = ("cut short" if hunted.cut_short else "stopped" if hunted.stopped else None)
            print(f"{len(failed)} of {reached} families failed ({findings} finding"
                  f"{'s' * (findings != 1)})" + (f"; {stop}: {not_hunted}." if stop and
                                                 reached < len(families) else "."), file=out)
        elif hunted.cut_short and not any(r.examples for r, _ in report.results):
            # A gate that judged nothing is not a clean one (as a replay with nothing to replay).
            report.notes.append(_nothing_judged(budget))
            print(f"{_nothing_judged(budget)}; give it more time.", file=out)
            return EXIT_NOTHING
        elif hunted.cut_short:
            whole = [r.family for r, _ in report.results if not r.cut_short]
            partial = "".join(f", {r.family} cut short after {_count(r.examples, 'example', 'examples')}"
                              for r, _ in report.results if r.cut_short)
            print(f"clean as far as it got: {len(whole)} of {len(families)} families hunted to the end"
                  f"{partial}; no counterexample.", file=out)
        else:
            print(f"clean: {_count(reached, 'family', 'families')}, no counterexample.", file=out)
        return EXIT_FOUND if failed else EXIT_OK


def _best_backend(requested: str | None) -> str:
    if requested is not None:
        ok, why = backend_status(requested)
        if not ok:
            raise UsageError(f"--backend {requested}: not usable here ({why})")
        return requested
    for backend in BACKEND_PREFERENCE:
        if backend_status(backend)[0] and any(k.backend == backend for k in KERNELS):
            return backend
    raise UsageError("no usable backend")


def _earlier_cells(path: Path, *, settings: dict[str, Any],
                   planned: Sequence[tuple[KernelSpec, str]]) -> Carried:
    """What ``--resume path`` takes over for this hunt (:func:`normprops.merge.carried_cells`);
    UsageError, one line, when ``path`` is not a readable report of this same registry hunt."""
    try:
        doc = load_report(path)
        if doc.get("command") != "hunt" or doc.get("impl"):
            raise UsageError(f"--resume {path}: not the --json report of a registry hunt ('normprops "
                             f"hunt' without --impl or --cuda-source)")
        if doc.get("normprops") != __version__:
            raise UsageError(f"--resume {path}: written by normprops {doc.get('normprops')}, and this "
                             f"is {__version__}; hunt afresh")
        differ = resume_problems(doc, settings)
        if differ:
            raise UsageError(f"--resume {path}: another hunt ({'; '.join(differ)}); resume with the "
                             f"same settings and --seed (only --time-budget may differ)")
        return carried_cells(doc, path=path, cells={(s.backend, s.name, f) for s, f in planned})
    except ReportError as exc:
        raise UsageError(f"--resume {exc}") from None


def _registry_backends(requested: str | None) -> tuple[list[str], list[str]]:
    """The backends a registry hunt covers (``--backend``, or the best usable here), and those named
    but not usable here, each with why."""
    if requested is None:
        return [_best_backend(None)], []
    named = [b.strip() for b in requested.split(",") if b.strip()]
    if len(named) == 1:
        return [_best_backend(named[0])], []
    # Several: hunt those usable here, say why the others are not.
    known = list(dict.fromkeys(k.backend for k in KERNELS))
    unknown = [b for b in named if b not in known]
    if unknown:  # a typo is the user's to fix, not a backend this machine lacks
        raise UsageError(f"--backend: unknown backend {', '.join(unknown)}; known: "
                         f"{', '.join(known)}")
    usable = {b: backend_status(b) for b in named}
    backends = [b for b in named if usable[b][0]]
    skipped = [f"{b} ({usable[b][1]})" for b in named if not usable[b][0]]
    if not backends:
        raise UsageError(f"--backend: none of {', '.join(named)} is usable here: "
                         f"{'; '.join(skipped)}")
    return backends, skipped


def _registry_specs(args: argparse.Namespace, backends: list[str]) -> list[KernelSpec]:
    """The registry entries on ``backends`` that ``--op`` and ``--kernel`` select; UsageError for
    none."""
    backend = ",".join(backends)
    specs = [k for k in KERNELS if k.backend in backends and (args.op is None or k.op == args.op)
             and (args.kernel is None or k.name == args.kernel)]
    if not specs and args.kernel is None:
        ops = sorted({k.op for k in KERNELS if k.backend in backends})
        raise UsageError(f"--op {args.op}: no registered {backend} kernel computes it (the "
                         f"registry's {backend} ops: {', '.join(ops)}); hunt your own with "
                         f"--impl MODULE:FUNC")
    if not specs:
        # an entry of that name on another backend: name the backend rather than list this one's
        elsewhere = sorted({k.backend for k in KERNELS if k.name == args.kernel
                            and (args.op is None or k.op == args.op)})
        if elsewhere:
            raise UsageError(f"--kernel {args.kernel}: no {backend} kernel of that name; it is "
                             f"registered under --backend {' and --backend '.join(elsewhere)}")
        names = sorted({k.name for k in KERNELS if k.backend in backends})
        raise UsageError(f"--kernel {args.kernel}: no {backend} kernel of that name"
                         f"{'' if args.op is None else ' for ' + args.op}; choose from {', '.join(names)}")
    return specs


def _usable_specs(args: argparse.Namespace, specs: list[KernelSpec]) -> tuple[list[KernelSpec], list[str]]:
    """The entries of ``specs`` that can run here, and a note for those that cannot (an entry that
    needs a CUDA GPU its framework does not see: JAX's cuDNN attention on a CPU); UsageError when
    none can."""
    unusable = unusable_kernels(specs)
    skipped = {name for names in unusable.values() for name in names}
    usable = [k for k in specs if k.name not in skipped]
    notes = [f"{', '.join(names)} ({why})" for why, names in unusable.items()]
    if not usable:
        if args.kernel is not None:
            raise UsageError(f"--kernel {args.kernel}: not usable here ({next(iter(unusable))}); "
                             f"hunt it on a machine that has what it needs")
        raise UsageError(f"--op {args.op}: no kernel of it is usable here: {'; '.join(notes)}")
    return usable, notes


def _hunt_registry(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    flags = _user_only_flags(args)
    if flags:
        raise UsageError(f"{', '.join(flags)} appl{'y' if len(flags) > 1 else 'ies'} to --impl and "
                         f"--cuda-source; a registered kernel declares its own")
    backends, skipped = _registry_backends(args.backend)
    backend = ",".join(backends)
    config = _config(args)
    specs, unusable = _usable_specs(args, _registry_specs(args, backends))
    every_family = tuple(dict.fromkeys(f for op in OPS for f in families_for(op)))
    chosen = _parse_families(args.families, allowed=every_family, op=None)
    # Without --families, each entry's own first-hunt families (KernelSpec.default_families).
    planned = plan_cells(specs, families=None if args.families is None else chosen, shard=args.shard)
    report = Report("hunt", settings={"backend": backend, "op": args.op, "kernel": args.kernel,
                                      "families": list(chosen), "policy": config.policy,
                                      "oracle": config.oracle, "max_examples": config.max_examples,
                                      "seed": config.seed, "time_budget": args.time_budget,
                                      "shard": None if args.shard is None else "%d/%d" % args.shard})
    report.notes += [f"not usable here, not hunted: {b}" for b in skipped + unusable]
    earlier = (None if args.resume is None
               else _earlier_cells(args.resume, settings=report.settings, planned=planned))
    hunt = _RegistryHunt(args, out, err, kernels=len(specs), backend=backend, config=config,
                         planned=planned, report=report, earlier=earlier)
    return _guarded(_Run(report, args.json, out, err, summary=hunt.summary), hunt.body)


@dataclass
class _RegistryHunt:
    """A hunt of the registry's cells (entry x family) as the CLI runs it: the cells an earlier
    report carries over (``--resume``), the progress line of each cell hunted, the report rewritten
    after every cell, and what did not behave as declared."""

    args: argparse.Namespace
    out: TextIO
    err: TextIO  # where the progress goes
    kernels: int  # the registry entries hunted
    backend: str  # their backends, joined by commas
    config: HuntConfig
    planned: list[tuple[KernelSpec, str]]  # every cell, in the plan's order
    report: Report
    earlier: Carried | None  # the report resumed from
    hunted: list[tuple[KernelSpec, HuntResult]] = field(default_factory=list)
    carried: dict[Any, dict[str, Any]] = field(init=False)  # (backend, kernel, family) -> its cell
    cells_left: list[tuple[KernelSpec, str]] = field(init=False)
    carried_surprises: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        earlier, report = self.earlier, self.report
        self.carried = {} if earlier is None else earlier.results
        self.cells_left = [(s, f) for s, f in self.planned if (s.backend, s.name, f) not in self.carried]
        if earlier is not None:
            report.carried = {"results": list(self.carried.values()), "failures": earlier.failures,
                              "information": earlier.information}
            report.targets += earlier.targets
            report.extra["resumed_from"] = str(earlier.path)
            report.notes.append(f"resumed from {earlier.path}: "
                                f"{_count(len(self.carried), 'cell', 'cells')} carried over as it found them")
        self.carried_surprises = [r for r in self.carried.values() if not declared_json(r)]

    @property
    def fixtures(self) -> Path | None:
        return None if self.args.no_fixtures else self.args.fixtures_dir

    def body(self) -> int:
        """The hunt, from its header to its verdict; the exit status."""
        self.header()
        self.checkpoint()
        try:
            outcome = hunt_registry(
                self.cells_left, config=replace(self.config, deadline=deadline_after(self.args.time_budget)),
                fixtures_dir=self.fixtures, on_result=self.show, on_target=self.on_target)
        except KeyboardInterrupt:  # between two hunts, e.g. while a fixture was being saved
            self.report.extra["not_reached"] = self.not_reached()
            raise
        if outcome.interrupted:
            self.report.extra["not_reached"] = self.not_reached()
            raise KeyboardInterrupt
        self.report.notes += outcome.notes
        self.summary()
        self.print_declared(outcome)
        return self.verdict(outcome)

    def header(self) -> None:
        args, config, out = self.args, self.config, self.out
        print(f"normprops hunt: {self.kernels} {self.backend} kernels, {len(self.planned)} hunts of "
              f"{config.max_examples} examples, policy {config.policy}, seed {config.seed}"
              + ("" if args.shard is None else f", shard {args.shard[0]}/{args.shard[1]}")
              + ("" if args.time_budget is None else f", time budget {args.time_budget:g} s"), file=out)
        for note in self.report.notes:
            print(f"  {note}", file=out)
        if self.carried_surprises:
            print(f"  of them not as declared: "
                  f"{', '.join(r['target'] + ' x ' + r['family'] for r in self.carried_surprises)}",
                  file=out)

    def show(self, spec: KernelSpec, result: HuntResult) -> None:
        """A cell as it finishes: recorded, its progress line on stderr, the report rewritten."""
        report = self.report
        self.hunted.append((spec, result))
        bug = spec.bug_in(result.family)
        if spec.expectation(result.family) == "bug" and bug.property is not None:
            report.bug_properties[len(report.results)] = bug.property
        report.results.append((result, spec.expectation(result.family)))
        print(f"  [{len(self.carried) + len(self.hunted)}/{len(self.planned)}] {spec.name} x "
              f"{result.family}: {registry_cell_text(spec, result)} ({result.examples} examples, "
              f"{result.elapsed_s:.1f}s)", file=self.err, flush=True)
        self.checkpoint()

    def not_reached(self) -> list[str]:
        done = {(id(s), r.family) for s, r in self.hunted}
        return [f"{s.label} x {f}" for s, f in self.cells_left if (id(s), f) not in done]

    def checkpoint(self) -> None:
        """The report as it stands, rewritten after every cell: a hunt killed outright (SIGKILL, a
        CI runner's hard timeout, a machine taken away) leaves its finished cells to --resume.
        Until the hunt ends it says it did not finish, so a merge does not take it as whole."""
        if self.args.json is None:
            return
        report = self.report
        report.error = (f"in progress: {len(self.carried) + len(self.hunted)} of {len(self.planned)} "
                        f"cells hunted when written, and the hunt did not end; --resume takes over the "
                        f"cells it finished")
        report.extra["not_reached"] = self.not_reached()
        try:
            report.write(self.args.json)
        finally:
            report.error = None
            del report.extra["not_reached"]

    def on_target(self, spec: KernelSpec, target: Any) -> None:
        if not any((t.get("label"), t.get("backend")) == (target.label, target.backend)
                   for t in self.report.targets):  # not carried over
            self.report.targets.append(target_json(target))

    def summary(self) -> None:
        """The matrix of the cells hunted so far, carried cells in their places (also on Ctrl-C)."""
        mine = {(spec.backend, spec.name, r.family): (spec, r) for spec, r in self.hunted}
        cells = []
        for spec, family in self.planned:  # the plan's order, carried cells in their places
            key = (spec.backend, spec.name, family)
            if key in self.carried:
                cells.append(cell_from_json(self.carried[key]))
            elif key in mine:
                cells.append(Cell(f"{spec.op} ({spec.backend})", spec.name, family,
                                  registry_cell_text(*mine[key])))
        if not cells:
            return
        print("\n" + render_matrix(cells), file=self.out)
        print(matrix_legend(cells), file=self.out)

    def print_declared(self, outcome: RegistryRun) -> None:
        """The cells not as declared and the known bugs caught, carried ones first, with their
        findings; where the fixtures went."""
        out, path = self.out, None if self.earlier is None else self.earlier.path
        for r in self.carried_surprises:
            why = "claimed" if r.get("expected") == "claim" else "known bug, not caught"
            print(f"\nnot as declared: {r['target']} x {r['family']} ({why}; carried over, its "
                  f"findings are in {path})", file=out)
        for spec, result in outcome.surprises:
            expected = spec.expectation(result.family)
            why = ("claimed" if expected == "claim" else
                   f"known bug, in {spec.bug_in(result.family).property or 'any property'}: not caught")
            print(f"\nnot as declared: {spec.label} x {result.family} ({why})", file=out)
            for finding in result.findings:
                print(format_finding(finding), file=out)
        for r in self.carried.values():
            if r.get("expected") == "bug" and declared_json(r):
                print(f"\nknown bug of {r['target']} x {r['family']}: caught (carried over; its findings "
                      f"are in {path})", file=out)
        for spec, result in self.hunted:
            if caught(spec, result):
                print(f"\nknown bug of {spec.label} ({spec.bug_in(result.family).summary}):", file=out)
                for finding in result.findings:
                    print(format_finding(finding), file=out)
        line = _fixtures_line([r for _, r in self.hunted], self.fixtures)
        if line:
            print("\n" + line, file=out)

    def verdict(self, outcome: RegistryRun) -> int:
        """The cut-short note, the closing line and the report's cells not as declared; the exit
        status."""
        report, out, budget, total = self.report, self.out, self.args.time_budget, len(self.planned)
        surprises, carried_surprises = outcome.surprises, self.carried_surprises
        if outcome.cut_short:
            report.cut_short = True
            report.extra["not_reached"] = [f"{spec.label} x {family}" for spec, family in outcome.not_reached]
            report.notes.append(f"cut short: the time budget of {budget:g} s was spent; "
                                f"{len(outcome.not_reached)} of {total} cells not hunted")
            print(f"\ncut short: the time budget of {budget:g} s was spent after "
                  f"{total - len(outcome.not_reached)} of {total} cells "
                  f"({sum(r.examples for _, r in self.hunted)} examples).", file=out)
        report.extra["not_as_declared"] = ([f"{r['target']} x {r['family']}" for r in carried_surprises]
                                           + [f"{s.label} x {r.family}" for s, r in surprises])
        if surprises or carried_surprises:
            print(f"\n{len(surprises) + len(carried_surprises)} hunt(s) not as declared.", file=out)
        elif outcome.cut_short and not self.carried and not any(r.examples for _, r in self.hunted):
            # A gate that judged nothing is not a clean one (as a replay with nothing to replay).
            report.notes.append(_nothing_judged(budget))
            print(f"{_nothing_judged(budget)}; give it more time.", file=out)
            return EXIT_NOTHING
        elif outcome.cut_short:
            print("every kernel hunted behaved as its registry entry declares, as far as it got.", file=out)
        else:
            print("\nevery kernel behaved as its registry entry declares.", file=out)
        return EXIT_FOUND if surprises or carried_surprises else EXIT_OK


def _hunt(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_output_file(args.json, "--json")
    if not args.no_fixtures:
        _check_output_dir(args.fixtures_dir, "--fixtures-dir")
    if args.resume is not None and (args.impl or args.cuda_source):
        raise UsageError(f"--resume applies to registry hunts; {'--impl' if args.impl else '--cuda-source'} "
                         f"hunts start afresh")
    return (_hunt_impl if args.impl or args.cuda_source else _hunt_registry)(args, out, err)
