"""``normprops replay`` and ``normprops fixtures list | prune``: the saved fixtures, replayed and
printed.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any, TextIO

from normprops.api import target_json
from normprops.case import ShapeConstraints
from normprops.cli.common import (
    EXIT_FOUND,
    EXIT_NOTHING,
    EXIT_OK,
    EXIT_UNREADABLE,
    _check_all_dtypes,
    _check_output_file,
    _constraints,
    _count,
    _fixtures_dir,
    _guarded,
    _no_fixtures_dir,
    _ReplayTargets,
    _Run,
    _user_only_flags,
    resolve_impl,
)
from normprops.errors import UsageError
from normprops.ops import OPS, OPTIONAL
from normprops.regressions import (
    OTHER_DTYPE,
    OTHER_REDUCTION,
    OTHER_WIDTH,
    Replayed,
    Selection,
    dloss_reduction,
    list_fixtures,
)
from normprops.replay import PruneProgress, Pruning, ReplayRun, prune_fixtures, replay_fixtures
from normprops.report import Report


def _skipped_lines(selection: Selection, *, dtype: str, widths: ShapeConstraints,
                   left: str = "skipped") -> list[str]:
    """One line per reason fixtures were left out (``left``: the word for it), with how to replay
    them."""
    lines = []
    other = selection.skipped_for(OTHER_DTYPE)
    if other:
        kinds = Counter(f.dtype for f in other)
        how = (f"--dtype {next(iter(kinds))} replays {'it' if len(other) == 1 else 'them'}"
               if len(kinds) == 1 else "--dtype TYPE replays those of TYPE")
        lines.append(f"{_count(len(other), 'fixture', 'fixtures')} of other storage types {left} "
                     f"({', '.join(f'{k}: {n}' for k, n in sorted(kinds.items()))}; replaying "
                     f"{dtype}): {how}, --all-dtypes every fixture in its own type")
    narrow = selection.skipped_for(OTHER_WIDTH)
    if narrow:
        cols = sorted({c.cols for f in narrow for c in f.cases() if not widths.allows(c.cols)})
        shown = ", ".join(map(str, cols[:6])) + (", ..." if len(cols) > 6 else "")
        lines.append(f"{_count(len(narrow), 'fixture', 'fixtures')} of other widths {left}: rows "
                     f"{shown} wide, outside the widths given ({widths.describe()})")
    reduced = selection.skipped_for(OTHER_REDUCTION)
    if reduced:
        kinds = sorted({str(dloss_reduction(f)) for f in reduced})
        named = {"none": "per-row (none)"}
        lines.append(f"{_count(len(reduced), 'fixture', 'fixtures')} of another loss reduction {left}: "
                     f"{'its' if len(reduced) == 1 else 'their'} dloss is for a "
                     f"{' or '.join(named.get(k, k) for k in kinds)} loss; --loss-reduction {kinds[0]} "
                     f"replays {'it' if len(reduced) == 1 else 'them'} on a kernel that reduces so")
    return lines


def _not_judged(prop: str) -> str:
    """Why a fixture of ``prop`` that replayed clean says nothing, and how to judge it."""
    how = f"--check {prop}" if prop in OPTIONAL else f"without --ignore {prop}"
    return f"its property {prop} is not judged for this kernel ({how} judges it)"


def _replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_output_file(args.json, "--json")
    _check_all_dtypes(args)
    directory = _fixtures_dir(args.fixtures_dir)
    targets = _ReplayTargets(args, resolve_impl(args.impl))
    dtype = args.dtype or "float32"
    targets(dtype)  # a bad --framework or --device is a usage error now
    widths = _constraints(args)
    report = Report("replay", settings={"op": args.op, "impl": args.impl,
                                        "fixtures_dir": str(directory), "policy": args.policy,
                                        "dtype": None if args.all_dtypes else dtype,
                                        "all_dtypes": args.all_dtypes, "widths": widths.to_json()})
    rows: list[dict[str, Any]] = []
    report.extra["fixtures"] = rows
    run = _Run(report, args.json, out, err)
    replay: ReplayRun | None = None

    def summary() -> None:
        """The last line, and the report's rows of the fixtures never run."""
        if replay is None:
            return
        report.targets = [target_json(t) for t in targets.made.values()]
        total = len(replay.listing.paths)
        passed, failed, unjudged = len(replay.passed), len(replay.failed), len(replay.not_judged)
        never = replay.not_run
        rows.extend({"path": str(f.path), "outcome": "not_run"} for f, _ in never)
        if passed == total:
            print("the fixture passes." if passed == 1 else f"all {passed} fixtures pass.", file=out)
            return
        parts = [f"{passed} passed", f"{failed} failed"]
        if unjudged:
            parts.append(f"{unjudged} not judged")
        if replay.listing.unreadable:
            parts.append(f"{len(replay.listing.unreadable)} could not be read")
        if replay.selection.skipped:
            parts.append(f"{len(replay.selection.skipped)} skipped")
        if never:
            stopped = "the kernel cannot be called again" if replay.stopped else "interrupted"
            parts.append(f"{len(never)} not run ({stopped})")
        print(f"{_count(total, 'fixture', 'fixtures')}: {', '.join(parts)}.", file=out)

    run.summary = summary

    def selected(started: ReplayRun) -> None:
        nonlocal replay
        replay = started
        for bad in started.listing.unreadable:
            rows.append({"path": str(bad.path), "outcome": "unreadable", "reason": bad.reason})
            print(f"unreadable {bad.reason}", file=out)
        for skip in started.selection.skipped:
            rows.append({"path": str(skip.fixture.path), "outcome": "skipped", "reason": skip.reason})
        for line in _skipped_lines(started.selection, dtype=dtype, widths=widths):
            print(line, file=out)

    def replayed(result: Replayed) -> None:
        fixture = result.fixture
        finding = result.finding()
        row: dict[str, Any] = {"path": str(fixture.path),
                               "outcome": "pass" if finding is None else "fail",
                               "dtype": result.dtype, "property": fixture.property,
                               "messages": [v.message() for v in result.failures]}
        rows.append(row)
        if finding is None and result.unjudged:
            row["outcome"] = "not_judged"
            print(f"not judged {fixture.path.name}: {_not_judged(fixture.property)}", file=out)
            return
        if finding is None:
            print(f"pass {fixture.path.name}", file=out)
            return
        report.fixture_failures.append(finding)
        print(f"FAIL {fixture.path.name}: {finding.message}", file=out)
        if result.stopped is not None:
            assert replay is not None
            row["reason"] = result.stopped
            never = len(replay.not_run)
            report.error = (f"replay stopped at {fixture.path}: {result.stopped}; "
                            f"{_count(never, 'fixture', 'fixtures')} not run")

    def body() -> int:
        done = replay_fixtures(directory, op=args.op, target=targets, dtype=dtype,
                               all_dtypes=args.all_dtypes, widths=widths, policy=args.policy,
                               reduction=getattr(args, "loss_reduction", None) or "none",
                               on_selected=selected, on_result=replayed)
        if not done.listing.paths:
            here = sorted(p.name for p in directory.glob("*.json"))
            hint = (f"; {directory} itself holds {len(here)} .json file(s): pass the directory "
                    f"above it (fixtures live in DIR/{args.op}/)" if here else
                    _no_fixtures_dir(directory))
            print(f"no {args.op} fixtures under {directory}/{args.op}{hint}", file=out)
            report.error = "nothing to replay"
            return EXIT_NOTHING
        if not done.selection.replays and not done.listing.unreadable:
            print(f"nothing to replay: {_count(len(done.listing.paths), 'fixture', 'fixtures')} under "
                  f"{directory}/{args.op}, all skipped.", file=out)
            report.error = "nothing to replay"
            return EXIT_NOTHING
        summary()
        if done.failed:
            return EXIT_FOUND
        if done.listing.unreadable:
            return EXIT_UNREADABLE
        if done.not_judged and not done.passed and not done.not_run:
            # Every fixture holds a property this kernel is not judged on: a green replay would
            # say its bugs are fixed when none was looked at.
            report.error = "nothing judged"
            props = sorted({r.fixture.property for r in done.not_judged})
            print(f"nothing judged: this kernel is judged on none of the fixtures' properties "
                  f"({', '.join(props)}; see each line above).", file=out)
            return EXIT_NOTHING
        return EXIT_OK

    return _guarded(run, body)


def _fixtures_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    directory = _fixtures_dir(args.fixtures_dir)
    listing = list_fixtures(directory, op=args.op)
    where = f"{directory}/{args.op}" if args.op else str(directory)
    if not listing.paths:
        print(f"no fixtures under {where}{_no_fixtures_dir(directory)}", file=out)
        return EXIT_OK if directory.exists() else EXIT_NOTHING
    table = [("kernel", "op", "dtype", "family", "property", "rows x cols", "saved (UTC)", "path")]
    guessed = False
    for f in listing.fixtures:
        when, recorded = f.saved_at()
        guessed |= not recorded
        shapes = "/".join(dict.fromkeys("x".join(map(str, c.shape)) for c in f.cases()))
        table.append((f.kernel, f.op, f.dtype, f.family, f.property, shapes,
                      when.strftime("%Y-%m-%d %H:%M") + ("" if recorded else "*"), str(f.path)))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
    for bad in listing.unreadable:
        print(f"unreadable {bad.reason}", file=out)
    lines = [f"{_count(len(listing.paths), 'fixture', 'fixtures')} under {where}"
             + (f", {len(listing.unreadable)} of them unreadable" if listing.unreadable else "")
             + "; rows x cols: the minimal input/the worst"]
    if guessed:
        lines.append("*: the file's modification time; the fixture does not record when it was saved")
    print("\n".join(lines), file=out)
    return EXIT_UNREADABLE if listing.unreadable else EXIT_OK


def _fixtures_prune(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.kernel is None and args.impl is None:
        raise UsageError("say which fixtures to remove: --kernel NAME (those of a kernel), --op OP "
                         "--impl MODULE:FUNC (those the function passes), or both")
    if args.impl is not None and args.op is None:
        raise UsageError(f"--impl needs --op {{{','.join(OPS)}}}")
    if args.impl is None:
        flags = _user_only_flags(args) + ["--all-dtypes"] * args.all_dtypes
        if flags:
            raise UsageError(f"{', '.join(flags)} describe{'s' * (len(flags) == 1)} the function "
                             f"of --impl; without it nothing is replayed")
    _check_all_dtypes(args)
    directory = _fixtures_dir(args.fixtures_dir)
    targets = None
    dtype = args.dtype or "float32"
    if args.impl is not None:
        targets = _ReplayTargets(args, resolve_impl(args.impl))
        targets(dtype)  # a bad --framework or --device is a usage error now
    widths = _constraints(args)
    where = f"{directory}/{args.op}" if args.op else str(directory)
    verb = "would remove" if args.dry_run else "removed"
    report = Report("fixtures prune")
    run = _Run(report, None, out, err)
    pruning: Pruning | None = None

    def summary() -> None:
        removed = len(pruning.removed) if pruning is not None else 0
        print(f"{verb} {_count(removed, 'fixture', 'fixtures')}.", file=out)

    run.summary = summary

    def selected(started: Pruning) -> None:
        nonlocal pruning
        pruning = started
        for bad in started.listing.unreadable:
            print(f"unreadable {bad.reason} (kept)", file=out)
        if started.selection is not None:
            for line in _skipped_lines(started.selection, dtype=dtype, widths=widths,
                                       left="kept, not replayed"):
                print(line, file=out)

    def replayed(result: Replayed) -> None:
        if result.passed and result.unjudged:
            print(f"keep {result.fixture.path}: {_not_judged(result.fixture.property)}", file=out)
        elif not result.passed:
            print(f"keep {result.fixture.path}: {result.failures[0].message()}", file=out)
            if result.stopped is not None:
                assert pruning is not None
                print(f"the replay stopped ({result.stopped}): "
                      f"{_count(pruning.not_run, 'fixture', 'fixtures')} not run, kept", file=out)

    def body() -> int:
        done = prune_fixtures(directory, op=args.op, kernel=args.kernel, target=targets, dtype=dtype,
                              all_dtypes=args.all_dtypes, widths=widths, policy=args.policy,
                              dry_run=args.dry_run, progress=PruneProgress(
                                  selected=selected, replayed=replayed,
                                  removed=lambda f: print(f"{verb} {f.path}", file=out)))
        listing, mine = done.listing, done.mine
        if not mine:
            kernels = sorted({f.kernel if f.source is None else f"{f.kernel} ({f.source})"
                              for f in listing.fixtures})
            own = targets(dtype) if args.kernel is None and targets is not None else None
            what = args.kernel if own is None else own.kernel
            print(f"no fixture of kernel {what} under {where}{_no_fixtures_dir(directory)}"
                  + (f" (kernels there: {', '.join(kernels)})" if kernels else "")
                  + ("; to remove another kernel's fixtures this function passes (one fixed under "
                     "a new name), name it with --kernel NAME" if own is not None and kernels else ""),
                  file=out)
            return EXIT_UNREADABLE if listing.unreadable else EXIT_NOTHING
        if done.selection is not None and not done.selection.replays:
            print(f"nothing to replay: {_count(len(mine), 'fixture', 'fixtures')} under {where}, "
                  f"all of other storage types or widths; nothing removed.", file=out)
            return EXIT_UNREADABLE if listing.unreadable else EXIT_NOTHING
        others = len(listing.fixtures) - len(mine)
        kept, unjudged = len(done.failing), len(done.not_judged)
        kept_for = [(kept, "still failing"), (unjudged, "not judged"),
                    (len(mine) - len(done.chosen) - kept - unjudged, "not replayed or not run"),
                    (others, "of other kernels"), (len(listing.unreadable), "unreadable")]
        why = ", ".join(f"{n} {what}" for n, what in kept_for if n)
        print(f"{verb} {len(done.removed)} of {_count(len(listing.paths), 'fixture', 'fixtures')} under "
              f"{where}" + (f"; kept: {why}" if why else "") + ".", file=out)
        if done.stopped is not None:
            return EXIT_FOUND
        return EXIT_UNREADABLE if listing.unreadable else EXIT_OK

    return _guarded(run, body)

