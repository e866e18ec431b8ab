"""``normprops bench``: the bandwidth table on the GPU.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from normprops.cli.common import EXIT_INTERNAL, _check_output_file, _check_plot_file
from normprops.errors import UsageError
from normprops.specs import backend_status


def _bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import re

    from normprops import bench
    from normprops.backends import peers

    for flag in ("json", "csv", "lead_csv"):
        _check_output_file(getattr(args, flag), f"--{flag.replace('_', '-')}")
    for flag in ("png", "lead_png"):
        _check_plot_file(getattr(args, flag), f"--{flag.replace('_', '-')}")
    sets = tuple(s.strip() for s in args.cases.split(","))
    if not sets or not set(sets) <= set(bench.SETS):
        raise UsageError(f"--cases: expected a comma-separated subset of {','.join(bench.SETS)} but "
                         f"got {args.cases!r}")
    wanted = tuple(p.strip() for p in args.peers.split(",") if p.strip() and p.strip() != "none")
    if not set(wanted) <= set(bench.PEER_LIBRARIES):
        raise UsageError(f"--peers: expected none or a comma-separated subset of "
                         f"{','.join(bench.PEER_LIBRARIES)} but got {args.peers!r}")
    try:
        only = None if args.only is None else re.compile(args.only)
    except re.error as exc:
        raise UsageError(f"--only: {args.only!r} is not a regular expression ({exc})") from None

    def chosen(cases: list[bench.BenchCase]) -> list[bench.BenchCase]:
        kept = [c for c in cases if only is None or only.search(c.name)]
        if not kept:
            raise UsageError(f"--only: {args.only!r} matches none of the {len(cases)} cases of --cases "
                             f"{args.cases} (normprops bench --list-cases --cases {args.cases})")
        return kept

    if args.list_cases:
        l2_bytes, source = bench.l2_bytes_here()
        cases = chosen(bench.bench_cases(l2_bytes=l2_bytes, sets=sets))
        print(bench.format_case_list(cases, l2_bytes=l2_bytes, source=source), file=out)
        return 0
    ok, why = backend_status("cuda")
    if not ok:
        raise UsageError(f"bench needs a usable CUDA GPU: {why}")
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    cases = chosen(bench.bench_cases(l2_bytes=int(props["l2CacheSize"]), sets=sets))
    status = {lib: peers.peer_status(lib) for lib in wanted}
    print(bench.format_run_header(device=why, l2_bytes=props["l2CacheSize"], rounds=args.rounds,
                                  reps=args.reps, peers=status), file=out)
    try:
        result = bench.run_bench(cases, rounds=args.rounds, reps=args.reps, peers=wanted, graphs=args.graphs,
                                 progress=err)
    except bench.BenchError as exc:
        print(f"normprops bench: error: {exc}", file=err)
        return 2
    rows = result.rows
    print(bench.format_report(result), file=out)
    meta = {"device": why, "rounds": args.rounds, "reps": args.reps, "graphs": args.graphs,
            "peers": {lib: {"available": lib_ok, "status": lib_why}
                      for lib, (lib_ok, lib_why) in status.items()}}
    try:
        bench.write_outputs(rows, json_path=args.json, csv_path=args.csv, png_path=args.png,
                            lead_csv_path=args.lead_csv, lead_png_path=args.lead_png, notes=result.notes,
                            launch=result.launch, meta=meta)
    except (RuntimeError, ValueError) as exc:  # matplotlib missing, or no lead table to write
        print(f"normprops bench: error: {exc}", file=err)
        return 2
    except OSError as exc:  # checked before the run: the disk filled, the folder went away
        print(f"normprops bench: error: cannot write {exc.filename}: {exc.strerror or exc}; the "
              f"table above is not saved", file=err)
        return EXIT_INTERNAL
    return 0 if all(g.passed for g in bench.gates(rows)) else 1

