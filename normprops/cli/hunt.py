"""``normprops hunt`` (a function, a CUDA source, or the registry) and ``normprops kernels``: the
commands that read the registry.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from dataclasses import replace
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
from normprops.engine import check_families_drawable, deadline_after, hunt_families
from normprops.errors import UsageError
from normprops.hints import hints
from normprops.hunt import HuntResult
from normprops.information import WORDS, information_of
from normprops.kernelspec import KernelSpec
from normprops.merge import Carried, ReportError, carried_cells, load_report, resume_problems
from normprops.ops import OPS, get_op, is_backward
from normprops.registry_hunt import caught, hunt_registry, plan_cells, registry_cell_text
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
from normprops.specs import KERNELS, backend_status
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
    chosen = _parse_families(args.families, allowed=families_for(args.op),
                             what=f"a family of {args.op}")
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
                                      "time_budget": args.time_budget},
                    targets=[target_json(target)])
    run = _Run(report, args.json, out, err)

    def summary() -> None:
        results = [r for r, _ in report.results]
        if not results:
            return
        cells = [Cell(target.label, target.name, r.family, cell_text(r)) for r in results]
        print("\n" + render_matrix(cells), file=out)
        print(matrix_legend(cells), file=out)
        replay = None
        if args.impl and fixtures is not None:
            replay = (f"normprops replay --op {args.op} --impl {args.impl} --fixtures-dir {fixtures}"
                      f"{replay_flags(target_json(target), policy=args.policy)}")
        line = _fixtures_line(results, fixtures, replay)
        if line:
            print(line, file=out)

    run.summary = summary

    def body() -> int:
        if not families:  # more shards than families: this one's part of the whole is empty
            print(f"normprops hunt: shard {args.shard[0]}/{args.shard[1]} holds none of the "
                  f"{_count(len(chosen), 'family', 'families')} asked for: nothing to hunt here "
                  f"(its report merges with the other shards').", file=out)
            return EXIT_OK
        adapter = target.adapter
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
        arithmetic = "flush-to-zero allowed (--ftz)" if target.error_model.ftz else "judged as IEEE"
        shard = ("" if args.shard is None else
                 f" (shard {args.shard[0]}/{args.shard[1]} of the {len(chosen)} asked for)")
        print(f"normprops hunt: {target.label} from {source} ({adapter.description}), "
              f"{_count(len(families), 'family', 'families')}{shard}, {config.max_examples} examples each "
              f"(more where a family fails: its shrinking, and a round per further property); widths: "
              f"{target.constraints.describe()}; {arithmetic}{ignored}; seed {config.seed}", file=out)
        unreadable = [] if fixtures is None else list_fixtures(fixtures, op=target.op).unreadable
        if unreadable:  # passed over by the saved examples a hunt tries first
            note = (f"{_count(len(unreadable), 'fixture', 'fixtures')} under {fixtures / target.op} "
                    f"could not be read and {'is' if len(unreadable) == 1 else 'are'} not tried first "
                    f"(normprops fixtures list --fixtures-dir {fixtures} names them)")
            report.notes.append(note)
            print(f"  {note}", file=out)

        def show(result: HuntResult, note: str | None) -> None:
            report.results.append((result, None))
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

        def not_reached() -> list[str]:
            done = {r.family for r, _ in report.results}
            return [f for f in families if f not in done]

        try:
            hunted = hunt_families(target, families=families, fixtures_dir=fixtures, on_result=show,
                                   config=replace(config, deadline=deadline_after(args.time_budget)))
        except KeyboardInterrupt:  # between two hunts, e.g. while a fixture was being saved
            report.extra["not_reached"] = not_reached()
            raise
        if hunted.interrupted:
            report.extra["not_reached"] = not_reached()
            raise KeyboardInterrupt
        report.cut_short = hunted.cut_short
        reached = len(report.results)
        not_hunted = (f"{len(families) - reached} of {len(families)} families not hunted"
                      if reached < len(families) else "every family hunted")
        if hunted.cut_short:
            report.extra["not_reached"] = not_reached()
            report.notes.append(f"cut short: the time budget of {args.time_budget:g} s was spent; "
                                f"{not_hunted}")
            examples = _count(sum(r.examples for r, _ in report.results), "example", "examples")
            print(f"  cut short: the time budget of {args.time_budget:g} s was spent after {reached} "
                  f"of {len(families)} families ({examples}); not hunted: "
                  f"{', '.join(report.extra['not_reached']) or 'none'}.", file=out)
        elif hunted.stopped:
            report.extra["not_reached"] = not_reached()
            if any(r.fatal for r in hunted.results):
                # The kernel cannot be called again (it hung, or faulted the GPU): the report is
                # not whole, as a replay that stops is not. (A hunt that stopped because every
                # family broke the same contract chose to: it is whole.)
                report.error = f"hunt stopped: {hunted.stopped}; {not_hunted}"
            report.notes.append(f"stopped: {hunted.stopped}")
            print(f"  stopped: {hunted.stopped}; {not_hunted}.", file=out)
        summary()
        failed = [r for r, _ in report.results if not r.passed]
        findings = sum(len(r.findings) for r in failed)
        if not any(r.fatal for r in hunted.results):  # a target that hung is not run again
            report.hints = hints(report.failures, target=target, policy=config.policy,
                                 oracle=config.oracle)
        for line in report.hints:
            print(line, file=out)
        if failed:
            stop = ("cut short" if hunted.cut_short else "stopped" if hunted.stopped else None)
            print(f"{len(failed)} of {len(report.results)} families failed ({findings} finding"
                  f"{'s' * (findings != 1)})" + (f"; {stop}: {not_hunted}." if stop and
                                                 reached < len(families) else "."), file=out)
        elif hunted.cut_short and not any(r.examples for r, _ in report.results):
            # A gate that judged nothing is not a clean one (as a replay with nothing to replay).
            report.notes.append(_nothing_judged(args.time_budget))
            print(f"{_nothing_judged(args.time_budget)}; give it more time.", file=out)
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

    return _guarded(run, body)


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


def _hunt_registry(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    flags = _user_only_flags(args)
    if flags:
        raise UsageError(f"{', '.join(flags)} appl{'y' if len(flags) > 1 else 'ies'} to --impl and "
                         f"--cuda-source; a registered kernel declares its own")
    skipped: list[str] = []
    if args.backend is None:
        backends = [_best_backend(None)]
    else:
        named = [b.strip() for b in args.backend.split(",") if b.strip()]
        if len(named) == 1:
            backends = [_best_backend(named[0])]
        else:  # several: hunt those usable here, say why the others are not
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
    backend = ",".join(backends)
    config = _config(args)
    specs = [k for k in KERNELS if k.backend in backends and (args.op is None or k.op == args.op)
             and (args.kernel is None or k.name == args.kernel)]
    if not specs and args.kernel is None:
        ops = sorted({k.op for k in KERNELS if k.backend in backends})
        raise UsageError(f"--op {args.op}: no registered {backend} kernel computes it (the "
                         f"registry's {backend} ops: {', '.join(ops)}); hunt your own with "
                         f"--impl MODULE:FUNC")
    if not specs:
        names = sorted({k.name for k in KERNELS if k.backend in backends})
        raise UsageError(f"--kernel {args.kernel}: no {backend} kernel of that name"
                         f"{'' if args.op is None else ' for ' + args.op}; choose from {', '.join(names)}")
    every_family = tuple(dict.fromkeys(f for op in OPS for f in families_for(op)))
    chosen = _parse_families(args.families, allowed=every_family, what="a family")
    # Without --families, each entry's own first-hunt families (KernelSpec.default_families).
    cells_planned = plan_cells(specs, families=None if args.families is None else chosen,
                               shard=args.shard)
    total = len(cells_planned)
    fixtures = None if args.no_fixtures else args.fixtures_dir
    report = Report("hunt", settings={"backend": backend, "op": args.op, "kernel": args.kernel,
                                      "families": list(chosen), "policy": config.policy,
                                      "oracle": config.oracle, "max_examples": config.max_examples,
                                      "seed": config.seed, "time_budget": args.time_budget,
                                      "shard": None if args.shard is None else "%d/%d" % args.shard})
    report.notes += [f"not usable here, not hunted: {b}" for b in skipped]
    earlier = (None if args.resume is None
               else _earlier_cells(args.resume, settings=report.settings, planned=cells_planned))
    carried = {} if earlier is None else earlier.results
    cells_left = [(s, f) for s, f in cells_planned if (s.backend, s.name, f) not in carried]
    if earlier is not None:
        report.carried = {"results": list(carried.values()), "failures": earlier.failures,
                          "information": earlier.information}
        report.targets += earlier.targets
        report.extra["resumed_from"] = str(earlier.path)
        report.notes.append(f"resumed from {earlier.path}: {_count(len(carried), 'cell', 'cells')} "
                            f"carried over as it found them")
    carried_surprises = [r for r in carried.values() if not declared_json(r)]
    run = _Run(report, args.json, out, err)
    hunted: list[tuple[KernelSpec, HuntResult]] = []

    def summary() -> None:
        mine = {(spec.backend, spec.name, r.family): (spec, r) for spec, r in hunted}
        cells = []
        for spec, family in cells_planned:  # the plan's order, carried cells in their places
            key = (spec.backend, spec.name, family)
            if key in carried:
                cells.append(cell_from_json(carried[key]))
            elif key in mine:
                cells.append(Cell(f"{spec.op} ({spec.backend})", spec.name, family,
                                  registry_cell_text(*mine[key])))
        if not cells:
            return
        print("\n" + render_matrix(cells), file=out)
        print(matrix_legend(cells), file=out)

    run.summary = summary

    def body() -> int:
        print(f"normprops hunt: {len(specs)} {backend} kernels, {total} hunts of "
              f"{config.max_examples} examples, policy {config.policy}, seed {config.seed}"
              + ("" if args.shard is None else f", shard {args.shard[0]}/{args.shard[1]}")
              + ("" if args.time_budget is None else f", time budget {args.time_budget:g} s"), file=out)
        for note in report.notes:
            print(f"  {note}", file=out)
        if carried_surprises:
            print(f"  of them not as declared: "
                  f"{', '.join(r['target'] + ' x ' + r['family'] for r in carried_surprises)}", file=out)

        def show(spec: KernelSpec, result: HuntResult) -> None:
            hunted.append((spec, result))
            bug = spec.bug_in(result.family)
            if spec.expectation(result.family) == "bug" and bug.property is not None:
                report.bug_properties[len(report.results)] = bug.property
            report.results.append((result, spec.expectation(result.family)))
            print(f"  [{len(carried) + len(hunted)}/{total}] {spec.name} x {result.family}: "
                  f"{registry_cell_text(spec, result)} ({result.examples} examples, "
                  f"{result.elapsed_s:.1f}s)", file=err, flush=True)
            checkpoint()

        def not_reached() -> list[str]:
            done = {(id(s), r.family) for s, r in hunted}
            return [f"{s.label} x {f}" for s, f in cells_left if (id(s), f) not in done]

        def checkpoint() -> None:
            # The report as it stands, rewritten after every cell: a hunt killed outright (SIGKILL, a
            # CI runner's hard timeout, a machine taken away) leaves its finished cells to --resume.
            # Until the hunt ends it says it did not finish, so a merge does not take it as whole.
            if args.json is None:
                return
            report.error = (f"in progress: {len(carried) + len(hunted)} of {total} cells hunted when "
                            f"written, and the hunt did not end; --resume takes over the cells it finished")
            report.extra["not_reached"] = not_reached()
            try:
                report.write(args.json)
            finally:
                report.error = None
                del report.extra["not_reached"]

        def on_target(spec: KernelSpec, target: Any) -> None:
            if not any((t.get("label"), t.get("backend")) == (target.label, target.backend)
                       for t in report.targets):  # not carried over
                report.targets.append(target_json(target))

        checkpoint()
        try:
            outcome = hunt_registry(
                cells_left, config=replace(config, deadline=deadline_after(args.time_budget)),
                fixtures_dir=fixtures, on_result=show, on_target=on_target)
        except KeyboardInterrupt:  # between two hunts, e.g. while a fixture was being saved
            report.extra["not_reached"] = not_reached()
            raise
        if outcome.interrupted:
            report.extra["not_reached"] = not_reached()
            raise KeyboardInterrupt
        report.notes += outcome.notes
        summary()
        surprises = outcome.surprises
        for r in carried_surprises:
            why = "claimed" if r.get("expected") == "claim" else "known bug, not caught"
            print(f"\nnot as declared: {r['target']} x {r['family']} ({why}; carried over, its "
                  f"findings are in {earlier.path})", file=out)
        for spec, result in surprises:
            expected = spec.expectation(result.family)
            why = ("claimed" if expected == "claim" else
                   f"known bug, in {spec.bug_in(result.family).property or 'any property'}: not caught")
            print(f"\nnot as declared: {spec.label} x {result.family} ({why})", file=out)
            for finding in result.findings:
                print(format_finding(finding), file=out)
        for r in carried.values():
            if r.get("expected") == "bug" and declared_json(r):
                print(f"\nknown bug of {r['target']} x {r['family']}: caught (carried over; its findings "
                      f"are in {earlier.path})", file=out)
        for spec, result in hunted:
            if caught(spec, result):
                print(f"\nknown bug of {spec.label} ({spec.bug_in(result.family).summary}):",
                      file=out)
                for finding in result.findings:
                    print(format_finding(finding), file=out)
        line = _fixtures_line([r for _, r in hunted], fixtures)
        if line:
            print("\n" + line, file=out)
        if outcome.cut_short:
            report.cut_short = True
            report.extra["not_reached"] = [f"{spec.label} x {family}" for spec, family in outcome.not_reached]
            report.notes.append(f"cut short: the time budget of {args.time_budget:g} s was spent; "
                                f"{len(outcome.not_reached)} of {total} cells not hunted")
            print(f"\ncut short: the time budget of {args.time_budget:g} s was spent after "
                  f"{total - len(outcome.not_reached)} of {total} cells "
                  f"({sum(r.examples for _, r in hunted)} examples).", file=out)
        report.extra["not_as_declared"] = ([f"{r['target']} x {r['family']}" for r in carried_surprises]
                                           + [f"{s.label} x {r.family}" for s, r in surprises])
        if surprises or carried_surprises:
            print(f"\n{len(surprises) + len(carried_surprises)} hunt(s) not as declared.", file=out)
        elif outcome.cut_short and not carried and not any(r.examples for _, r in hunted):
            # A gate that judged nothing is not a clean one (as a replay with nothing to replay).
            report.notes.append(_nothing_judged(args.time_budget))
            print(f"{_nothing_judged(args.time_budget)}; give it more time.", file=out)
            return EXIT_NOTHING
        elif outcome.cut_short:
            print("every kernel hunted behaved as its registry entry declares, as far as it got.", file=out)
        else:
            print("\nevery kernel behaved as its registry entry declares.", file=out)
        return EXIT_FOUND if surprises or carried_surprises else EXIT_OK

    return _guarded(run, body)


def _hunt(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_output_file(args.json, "--json")
    if not args.no_fixtures:
        _check_output_dir(args.fixtures_dir, "--fixtures-dir")
    if args.resume is not None and (args.impl or args.cuda_source):
        raise UsageError(f"--resume applies to registry hunts; {'--impl' if args.impl else '--cuda-source'} "
                         f"hunts start afresh")
    return (_hunt_impl if args.impl or args.cuda_source else _hunt_registry)(args, out, err)


def _kernels(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    backends = list(dict.fromkeys([*BACKEND_PREFERENCE, *(k.backend for k in KERNELS)]))
    for backend in backends:
        ok, why = backend_status(backend)
        print(f"backend {backend}: {'available' if ok else 'unavailable'} ({why})", file=out)
    print(file=out)
    width = max(60, shutil.get_terminal_size(fallback=(100, 24)).columns)
    columns = ["kernel", "op", "backend", "dtype", "arrays"]
    columns += ["T"] if args.wide else ["claims", "bugs"]
    table = [columns]
    for k in KERNELS:
        row = [k.name, k.op, k.backend, k.dtype, k.framework]
        if args.wide:
            row.append(str(k.error_model.threads))
        else:
            claimed = sum(f in k.claims for f in families_for(k.op))
            row += [f"{claimed}/{len(families_for(k.op))}", str(len(k.bugs))]
        table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    right = {"T", "claims", "bugs"}  # numbers
    for row, k in zip(table, [None, *KERNELS]):
        print("  ".join(cell.rjust(w) if name in right else cell.ljust(w)
                        for cell, w, name in zip(row, widths, columns)).rstrip(), file=out)
        if args.wide and k is not None:
            for part in _kernel_details(k):
                print(textwrap.fill(part, width, initial_indent="    ", subsequent_indent="      ",
                                    break_on_hyphens=False), file=out)
    if not args.wide:
        print("\n" + textwrap.fill("claims: the families the kernel claims, of its op's; bugs: the "
                                   "known bugs it carries. --wide lists them, with what each kernel "
                                   "does not promise, the widths it takes, how it sums rows and "
                                   "its threads per row (T).", width), file=out)
    return 0


def _kernel_details(k: KernelSpec) -> list[str]:
    """What ``normprops kernels --wide`` says under a kernel's row, one entry a paragraph."""
    parts = ["claims: " + (", ".join(f for f in families_for(k.op) if f in k.claims) or "nothing")]
    if k.default_families is not None:
        parts.append("first hunt: " + ", ".join(f for f in families_for(k.op) if f in k.default_families)
                     + " (the others with --families)")
    if k.exempt:
        parts.append("not promised: " + ", ".join(sorted(k.exempt)))
    if not k.constraints.unconstrained:
        parts.append("widths: " + k.constraints.describe())
    if len(get_op(k.op).outputs) > 1:  # dgamma (and dbeta) sum the rows
        parts.append(f"rows summed: {k.row_reduction}")
    if k.error_model.variance != "two_pass":
        parts.append(f"variance: {k.error_model.variance}")
    return parts + [f"BUG in {b.family}: {b.summary}" for b in k.bugs]
