"""``normprops report merge``: the reports of one hunt (its shards) as one matrix.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from normprops.cli.common import (
    EXIT_FOUND,
    EXIT_INTERNAL,
    EXIT_NOTHING,
    EXIT_OK,
    EXIT_UNREADABLE,
    _check_output_file,
    _check_plot_file,
    _count,
)
from normprops.errors import UsageError, WriteError
from normprops.report import matrix_legend, render_matrix


def _report_merge(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from normprops.jsonio import write_json_atomically
    from normprops.merge import IncompleteMerge, ReportError, merge_reports, refused_merge
    from normprops.report import cell_from_json, declared_json, matrix_png

    _check_output_file(args.json, "--json")
    _check_plot_file(args.png, "--png")
    try:
        merged = merge_reports(args.reports, allow_incomplete=args.allow_incomplete)
    except IncompleteMerge as exc:
        for problem in exc.problems:
            print(f"normprops report merge: error: {problem}", file=err)
        print(f"normprops report merge: nothing merged ({_count(len(exc.problems), 'problem', 'problems')}; "
              f"--allow-incomplete merges anyway, marked incomplete)", file=err)
        # The report is written on this path too, saying why it holds nothing: a CI job that
        # uploads it finds it, and an older one in its place is not taken for this merge's. Not
        # over one of the reports given, though (`merge all.json new.json --json all.json`).
        given = {path.resolve() for path in args.reports}
        if args.json is not None and args.json.resolve() in given:
            print(f"normprops report merge: {args.json} not written: it is one of the reports given",
                  file=err)
            return EXIT_UNREADABLE
        try:
            if args.json is not None:
                write_json_atomically(args.json, refused_merge(args.reports, exc.problems))
        except OSError as write_error:
            print(f"normprops report merge: error: {write_error}", file=err)
            return EXIT_INTERNAL
        return EXIT_UNREADABLE
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    cells = [cell_from_json(r) for r in merged["results"]]
    if cells:
        print(render_matrix(cells, sort=True), file=out)
        print(matrix_legend(cells), file=out)
    for problem in merged["problems"]:
        print(f"incomplete: {problem}", file=out)
    for note in merged["notes"]:
        print(note, file=out)
    for hint in merged["hints"]:
        print(hint, file=out)
    # A registry's cells by its own rule; a user's kernel (which declares nothing) by what it found.
    surprising = [r for r in merged["results"]
                  if (not declared_json(r) if r.get("expected") is not None else not r["passed"])]
    # A registry's failures are its known bugs caught and its unclaimed families' information,
    # as declared, unless a cell says otherwise.
    registry = [r for r in merged["results"] if r.get("expected") is not None]
    bugs = [r for r in registry if r["expected"] == "bug"]
    caught = f"{sum(map(declared_json, bugs))} of {_count(len(bugs), 'known bug', 'known bugs')} caught, "
    verdict = (f" ({caught if bugs else ''}{len(surprising)} not as declared)" if registry else "")
    # A gate that judged nothing is not green (as a hunt's own budget spent before its first example).
    nothing = (merged["cut_short"] and not surprising
               and all(r.get("examples") == 0 for r in merged["results"]))
    if nothing:
        print("nothing judged: the time budgets were spent before the first example", file=out)
    print(f"{_count(len(merged['merged_from']), 'report', 'reports')}, "
          f"{_count(len(cells), 'cell', 'cells')}{verdict}, "
          f"{_count(len(merged['failures']), 'failure', 'failures')}"
          + ("" if merged["complete"] else "; incomplete (--allow-incomplete)")
          + ("; cut short" if merged["cut_short"] else ""), file=out)
    try:
        if args.json is not None:
            write_json_atomically(args.json, merged)
        if args.png is not None:
            matrix_png(cells, args.png, title=f"normprops robustness matrix ({len(cells)} cells)")
    except OSError as exc:  # checked before: the disk filled, the folder went away
        reason = exc if isinstance(exc, WriteError) else f"cannot write {args.png}: {exc.strerror or exc}"
        print(f"normprops report merge: error: {reason}", file=err)
        return EXIT_INTERNAL
    return EXIT_FOUND if surprising else EXIT_NOTHING if nothing else EXIT_OK

