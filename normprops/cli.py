"""The ``normprops`` command: ``hunt``, ``replay``, ``kernels``.

Exit codes (scripts rely on them): 0 nothing found (or every registered kernel behaved as declared),
1 counterexample(s) found, 2 usage or import error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence, TextIO

import numpy as np

from normprops import __version__
from normprops.hunt import HuntConfig, HuntResult, hunt
from normprops.launch import (ImplError, Target, target_from_cuda_source, target_from_impl,
                              target_from_spec)
from normprops.oracles import ORACLES, POLICIES
from normprops.regressions import iter_fixtures, load_fixture, replay
from normprops.specs import KERNELS, OPS, KernelSpec, backend_status
from normprops.strategies import Case, families_for

__all__ = ["main", "describe_case"]

DEFAULT_FIXTURES = Path("tests/regressions")
BACKEND_PREFERENCE = ("cuda", "numpy")


class UsageError(Exception):
    """A problem with the command line; printed and exits 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normprops",
        description="Hunt numerical bugs in softmax, layer norm and RMS norm kernels.",
    )
    parser.add_argument("--version", action="version", version=f"normprops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    h = sub.add_parser("hunt", help="hunt a kernel (or every registered kernel) for counterexamples")
    h.add_argument("--op", choices=sorted(OPS), help="the op (required with --impl)")
    what = h.add_mutually_exclusive_group()
    what.add_argument("--impl", metavar="MODULE:FUNC",
                      help="a Python function with the op's signature: softmax fn(x), layernorm "
                           "fn(x, gamma, beta, eps), rmsnorm fn(x, gamma, eps)")
    what.add_argument("--cuda-source", type=Path, metavar="FILE",
                      help="a CUDA file holding an extern \"C\" kernel with the standard signature "
                           "(softmax (const float* in, float* out, size_t cols); layernorm adds "
                           "const float* gamma, const float* beta before cols and float eps after; "
                           "rmsnorm adds gamma and eps), launched one block per row")
    h.add_argument("--kernel", metavar="NAME",
                   help="with --cuda-source: the kernel's name in the file; without: hunt only "
                        "the registered kernel(s) of this name")
    h.add_argument("--families", metavar="A,B,...", help="comma-separated families (default: all)")
    h.add_argument("--max-examples", type=_positive_int, default=100, metavar="N",
                   help="examples per family (default 100)")
    h.add_argument("--seed", type=int, metavar="N", help="Hypothesis seed, for a repeatable hunt")
    h.add_argument("--json", type=Path, metavar="PATH", help="write a JSON report here")
    fx = h.add_mutually_exclusive_group()
    fx.add_argument("--fixtures-dir", type=Path, default=DEFAULT_FIXTURES, metavar="DIR",
                    help=f"where failures are saved, as DIR/<op>/*.json (default {DEFAULT_FIXTURES})")
    fx.add_argument("--no-fixtures", action="store_true", help="do not save failures")
    h.add_argument("--policy", choices=POLICIES, default="default",
                   help="tolerance policy: condition-aware default, or the seed's rtol gate")
    h.add_argument("--oracle", choices=ORACLES, default="float64", help="reference precision")
    h.add_argument("--threads", type=_positive_int, metavar="T",
                   help="threads cooperating on a row: sets the error bound's depth for --impl "
                        "(default 32) and the block size for --cuda-source (default 256)")
    h.add_argument("--backend", help="registry mode: hunt this backend's kernels (default: the "
                                     "best available)")
    h.add_argument("--call-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="--impl: a call that does not return within SECONDS stops the hunt and is "
                        "reported (default 60)")

    r = sub.add_parser("replay", help="run stored regression fixtures against a function")
    r.add_argument("--op", choices=sorted(OPS), required=True)
    r.add_argument("--impl", metavar="MODULE:FUNC", required=True)
    r.add_argument("--fixtures-dir", type=Path, default=DEFAULT_FIXTURES, metavar="DIR")
    r.add_argument("--policy", choices=POLICIES, default="default")
    r.add_argument("--threads", type=_positive_int, metavar="T")

    sub.add_parser("kernels", help="list the registry and each backend's availability")

    b = sub.add_parser("bench", help="the bandwidth table on the GPU: ours against PyTorch, Liger-Kernel and "
                                     "QuACK, the seed's predictions, the gates and the targets (exit 1 when "
                                     "a seed gate fails)")
    b.add_argument("--cases", default="seed,l2,l2-bf16,decode", metavar="SETS",
                   help="comma-separated: seed (the two 64 MiB cases), l2 / l2-bf16 / l2-f16 (16x "
                        "the L2, 1024/4096/16384 columns), decode (64 x 8192), model (hidden sizes "
                        "2048-8192 and 4097, 5121 in bf16 for the norms, vocabularies 32000, 128256, "
                        "151936 for softmax; 1, 8, 64, 256 rows and prefill of >= 16x the L2)")
    b.add_argument("--only", metavar="REGEX",
                   help="keep only the cases whose name matches REGEX (re.search), e.g. 'x(2048|4096) ' "
                        "or 'x151936' (see --list-cases): to split a long run")
    b.add_argument("--list-cases", action="store_true",
                   help="list the cases of --cases and exit (no GPU needed: without one the L2 is "
                        "taken as the H200's 60 MiB)")
    b.add_argument("--peers", default="liger,quack", metavar="LIBS",
                   help="peer libraries timed beside ours and PyTorch's when importable: comma-separated "
                        "among liger, quack, or none (default liger,quack)")
    b.add_argument("--graphs", action="store_true",
                   help="also time every contender at the decode cases host-paced and as CUDA graph "
                        "replays (the launch-cost notes under the lead table)")
    b.add_argument("--rounds", type=_positive_int, default=7, help="interleaved rounds (median)")
    b.add_argument("--reps", type=_positive_int, default=10, help="launches per timed round")
    b.add_argument("--json", type=Path, metavar="PATH")
    b.add_argument("--csv", type=Path, metavar="PATH")
    b.add_argument("--png", type=Path, metavar="PATH", help="bar chart of %% of memcpy (needs [plot])")
    b.add_argument("--lead-csv", type=Path, metavar="PATH",
                   help="the lead table: per case and op, ours against the fastest peer, with the targets' "
                        "verdicts")
    b.add_argument("--lead-png", type=Path, metavar="PATH",
                   help="chart of the lead table: peer time / ours per case, one panel per op (needs [plot])")

    c = sub.add_parser("census", help="the seed's worked numbers: part 0, part 1, the overflow row")
    c.add_argument("--backend", choices=("cuda", "numpy"),
                   help="default: the GPU when usable, else the numpy emulation")
    return parser


def _parse_families(text: str | None, *, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    """--families A,B,...: every name must be in ``allowed``; None means all of them."""
    if text is None:
        return allowed
    chosen = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in chosen if f not in allowed]
    if unknown or not chosen:
        raise UsageError(f"--families: {', '.join(unknown) or '(empty)'} not {what}; choose from "
                         f"{', '.join(allowed)}")
    return chosen


def _expectation(spec: KernelSpec, family: str) -> str:
    """What the registry declares for ``spec`` on ``family``: its known bug, a claim, or nothing."""
    if spec.bug is not None and spec.bug.family == family:
        return "bug"
    return "claim" if family in spec.claims else "unclaimed"


def describe_case(case: Case, row: int | None = None, col: int | None = None) -> str:
    """A few lines a person can read: shape, parameters, and the failing row."""
    lines = [f"input: {case.rows} x {case.cols} float32"
             + ("" if case.eps is None else
                f", eps={np.format_float_positional(np.float32(case.eps), unique=True, trim='-')}")
             + f"; drawn with {', '.join(f'{k}={v!r}' for k, v in case.params.items())}"]
    r = 0 if row is None else row
    values = case.x[r]
    if case.cols <= 12:
        shown = ", ".join(repr(float(v)) for v in values)
        lines.append(f"x[{r}] = [{shown}]")
    else:
        finite = values[np.isfinite(values)].astype(np.float64)
        stats = (f"min {finite.min():.6g}, max {finite.max():.6g}, mean {finite.mean():.6g}, "
                 f"std {finite.std():.6g}" if finite.size else "no finite values")
        lines.append(f"x[{r}]: {stats}; {np.count_nonzero(~np.isfinite(values))} non-finite")
        if col is not None:
            lines.append(f"x[{r}, {col}] = {float(values[col])!r}")
    for name in ("gamma", "beta"):
        arr = getattr(case, name)
        if arr is not None and col is not None:
            lines.append(f"{name}[{col}] = {float(arr[col])!r}")
    return "\n".join(lines)


def _result_json(result: HuntResult, *, expected: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "target": result.label,
        "family": result.family,
        "passed": result.passed,
        "examples": result.examples,
        "elapsed_s": round(result.elapsed_s, 4),
        "max_ratio": result.max_ratio if math.isfinite(result.max_ratio) else repr(result.max_ratio),
        "fixture": None if result.fixture is None else str(result.fixture),
    }
    if expected is not None:
        out["expected"] = expected
    if result.failure is not None:
        out["failure"] = result.failure.to_json()
    return out


def _failure_json(result: HuntResult) -> dict[str, Any]:
    assert result.failure is not None and result.minimal is not None
    doc = result.failure.to_json()
    doc["fixture"] = None if result.fixture is None else str(result.fixture)
    doc["minimal_shape"] = list(result.minimal.x.shape)
    doc["flaky"] = result.flaky
    if result.worst_verdict is not None:
        doc["worst"] = result.worst_verdict.to_json()
    return doc


def _print_failure(result: HuntResult, out: TextIO, indent: str = "    ") -> None:
    assert result.failure is not None and result.minimal is not None
    print(f"{indent}{result.failure.message()}", file=out)
    for line in describe_case(result.minimal, result.failure.row, result.failure.col).splitlines():
        print(f"{indent}  {line}", file=out)
    if result.worst_verdict is not None and result.worst is not result.minimal:
        print(f"{indent}  worst seen: {result.worst_verdict.message()}", file=out)
    if result.flaky:
        print(f"{indent}  (flaky: the failure did not reproduce on replay; nondeterminism?)", file=out)
    if result.fixture is not None:
        print(f"{indent}  fixture: {result.fixture}", file=out)


def _write_json(path: Path | None, doc: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def _config(args: argparse.Namespace) -> HuntConfig:
    return HuntConfig(max_examples=args.max_examples, seed=args.seed, policy=args.policy,
                      oracle=args.oracle,
                      fixtures_dir=None if args.no_fixtures else args.fixtures_dir)


def _hunt_impl(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    flag = "--impl" if args.impl else "--cuda-source"
    if args.op is None:
        raise UsageError(f"{flag} needs --op {{softmax,layernorm,rmsnorm}}")
    if args.impl:
        if args.kernel:
            raise UsageError("--kernel goes with --cuda-source, not --impl")
        if not args.call_timeout > 0:
            raise UsageError(f"--call-timeout must be a positive number of seconds but was {args.call_timeout}")
        target = target_from_impl(args.impl, op=args.op, threads=args.threads,
                                  timeout_s=args.call_timeout)
        source = args.impl
    else:
        if not args.kernel:
            raise UsageError("--cuda-source needs --kernel NAME")
        target = target_from_cuda_source(str(args.cuda_source), op=args.op, kernel=args.kernel,
                                         threads=args.threads or 256)
        source = f"{args.cuda_source}:{args.kernel}"
    families = _parse_families(args.families, allowed=families_for(args.op),
                               what=f"a family of {args.op}")
    config = _config(args)
    print(f"normprops hunt: {target.label} from {source}, {len(families)} families, "
          f"{config.max_examples} examples each, policy {config.policy}", file=out)
    results = []
    for family in families:
        result = hunt(target, family=family, config=config)
        results.append(result)
        status = "pass" if result.passed else "FAIL"
        print(f"  {family:16s} {status}  {result.examples:5d} examples  worst err/tol "
              f"{result.max_ratio:.3g}  {result.elapsed_s:.1f}s", file=out)
        if not result.passed:
            _print_failure(result, out)
        if result.fatal:
            print("  stopped: the target cannot be called again in this process", file=out)
            break
    failed = [r for r in results if not r.passed]
    print(f"{len(failed)} of {len(results)} families failed." if failed
          else f"clean: {len(results)} families, no counterexample.", file=out)
    _write_json(args.json, {
        "normprops": __version__, "command": "hunt", "op": args.op, "impl": source,
        "policy": config.policy, "oracle": config.oracle, "max_examples": config.max_examples,
        "seed": config.seed,
        "results": [_result_json(r) for r in results],
        "failures": [_failure_json(r) for r in failed],
    })
    return 1 if failed else 0


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


@dataclass(frozen=True)
class _Cell:
    spec: KernelSpec
    result: HuntResult

    @property
    def expectation(self) -> str:
        return _expectation(self.spec, self.result.family)

    @property
    def as_declared(self) -> bool:
        if self.expectation == "bug":
            return not self.result.passed
        if self.expectation == "claim":
            return self.result.passed
        return True

    def text(self) -> str:
        fid = "" if self.result.fixture is None else " " + self.result.fixture.stem.rsplit("-", 1)[-1]
        if self.expectation == "bug":
            return ("caught" + fid) if not self.result.passed else "MISSED"
        if self.expectation == "claim":
            return "pass" if self.result.passed else "FAIL" + fid
        return "(pass)" if self.result.passed else "(fail" + fid + ")"


def _hunt_registry(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.threads is not None:
        raise UsageError("--threads applies to --impl only")
    backend = _best_backend(args.backend)
    config = _config(args)
    specs = [k for k in KERNELS if k.backend == backend and (args.op is None or k.op == args.op)
             and (args.kernel is None or k.name == args.kernel)]
    if not specs:
        names = sorted({k.name for k in KERNELS if k.backend == backend})
        raise UsageError(f"--kernel {args.kernel}: no {backend} kernel of that name"
                         f"{'' if args.op is None else ' for ' + args.op}; choose from {', '.join(names)}")
    every_family = tuple(dict.fromkeys(f for op in OPS for f in families_for(op)))
    chosen = _parse_families(args.families, allowed=every_family, what="a family")
    plan = [(spec, family) for spec in specs for family in families_for(spec.op) if family in chosen]
    print(f"normprops hunt: {len(specs)} {backend} kernels, {len(plan)} hunts of "
          f"{config.max_examples} examples, policy {config.policy}", file=out)
    cells: list[_Cell] = []
    for i, (spec, family) in enumerate(plan, 1):
        # Only claims and known bugs are regressions worth a fixture; a family a kernel does not
        # claim is hunted for the matrix, not saved.
        declared = _expectation(spec, family) != "unclaimed"
        run_config = config if declared else replace(config, fixtures_dir=None)
        result = hunt(target_from_spec(spec), family=family, config=run_config)
        cell = _Cell(spec, result)
        cells.append(cell)
        print(f"  [{i}/{len(plan)}] {spec.name} x {family}: {cell.text()} "
              f"({result.examples} examples, {result.elapsed_s:.1f}s)", file=err, flush=True)
    _print_matrix(cells, out)
    surprises = [c for c in cells if not c.as_declared]
    for c in surprises:
        print(f"\nnot as declared: {c.spec.label} x {c.result.family} "
              f"({'claimed' if c.expectation == 'claim' else 'known bug'})", file=out)
        if c.result.failure is not None:
            _print_failure(c.result, out)
    caught = [c for c in cells if c.expectation == "bug" and not c.result.passed]
    for c in caught:
        print(f"\nknown bug of {c.spec.label} ({c.spec.bug.summary}):", file=out)
        _print_failure(c.result, out)
    print("\nevery kernel behaved as its registry entry declares." if not surprises
          else f"\n{len(surprises)} hunt(s) not as declared.", file=out)
    failures = [c for c in cells if not c.result.passed]
    _write_json(args.json, {
        "normprops": __version__, "command": "hunt", "backend": backend, "policy": config.policy,
        "max_examples": config.max_examples, "seed": config.seed,
        "results": [_result_json(c.result, expected=c.expectation) for c in cells],
        "failures": [dict(_failure_json(c.result), expected=c.expectation) for c in failures],
        "not_as_declared": [f"{c.spec.label} x {c.result.family}" for c in surprises],
    })
    return 1 if surprises else 0


def _print_matrix(cells: list[_Cell], out: TextIO) -> None:
    """kernel x family, one table per op: pass / FAIL id for claims, caught id / MISSED for known
    bugs, and (pass) / (fail id) for families a kernel does not claim."""
    for op in OPS:
        op_cells = [c for c in cells if c.spec.op == op]
        if not op_cells:
            continue
        families = list(dict.fromkeys(c.result.family for c in op_cells))
        kernels = list(dict.fromkeys(c.spec.name for c in op_cells))
        grid = {(c.spec.name, c.result.family): c.text() for c in op_cells}
        width = {f: max(len(f), *(len(grid.get((k, f), "")) for k in kernels)) for f in families}
        name_w = max(len(k) for k in kernels)
        print(f"\n{op}", file=out)
        print("  " + " " * name_w + "  " + "  ".join(f"{f:{width[f]}s}" for f in families), file=out)
        for k in kernels:
            print("  " + f"{k:{name_w}s}" + "  "
                  + "  ".join(f"{grid.get((k, f), '-'):{width[f]}s}" for f in families), file=out)


def _replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    target: Target = target_from_impl(args.impl, op=args.op, threads=args.threads)
    paths = iter_fixtures(args.fixtures_dir, op=args.op)
    if not paths:
        print(f"no fixtures for {args.op} under {args.fixtures_dir}", file=out)
        return 0
    failed = 0
    for path in paths:
        fixture = load_fixture(path)
        found = replay(target, fixture, policy=args.policy)
        if found:
            failed += 1
            print(f"FAIL {path.name}: {found[0].message()}", file=out)
        else:
            print(f"pass {path.name}", file=out)
    print(f"{failed} of {len(paths)} fixtures failed." if failed
          else f"all {len(paths)} fixtures pass.", file=out)
    return 1 if failed else 0


def _bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import re

    from normprops import bench
    from normprops.backends import peers

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
        print(f"L2 {l2_bytes / 2**20:.0f} MiB ({source}); {len(cases)} cases; regime dram: at least "
              f"{bench.L2_MULTIPLE}x the L2 each way", file=out)
        print(bench.format_cases(cases, l2_bytes=l2_bytes), file=out)
        return 0
    ok, why = backend_status("cuda")
    if not ok:
        raise UsageError(f"bench needs a usable CUDA GPU: {why}")
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    cases = chosen(bench.bench_cases(l2_bytes=int(props["l2CacheSize"]), sets=sets))
    status = {lib: peers.peer_status(lib) for lib in wanted}
    print(f"normprops bench on {why}; L2 {props['l2CacheSize'] / 2**20:.0f} MiB; "
          f"{args.rounds} interleaved rounds of {args.reps} launches, CUDA events", file=out)
    for lib, (lib_ok, lib_why) in status.items():
        print(f"peer {lib}: {'available' if lib_ok else 'unavailable'} ({lib_why})", file=out)
    try:
        result = bench.run_bench(cases, rounds=args.rounds, reps=args.reps, peers=wanted, graphs=args.graphs,
                                 progress=err)
    except bench.BenchError as exc:
        print(f"normprops bench: error: {exc}", file=err)
        return 2
    rows = result.rows
    print(bench.format_table(rows), file=out)
    results = bench.gates(rows)
    if any(r.set == "seed" for r in rows):
        print("\npredictions (seed cases):", file=out)
        for p in bench.predictions(rows):
            print(f"  {'held' if p.held else 'refuted'}: {p.text} ({p.numbers})", file=out)
    if results:
        print("\ngates:", file=out)
        for g in results:
            print(f"  {g.text()}", file=out)
    for title, found in (("production kernels' targets (90% of memcpy at the L2 cases, no slower than "
                          "PyTorch)", bench.targets(rows)),
                         (f"the lead ({bench.LEAD_MEMCPY_TARGET:g}% of memcpy where DRAM-bound, no slower "
                          "than the fastest peer)", bench.lead_targets(rows))):
        if found:
            missed = [t for t in found if not t.passed]
            print(f"\n{title}: {len(found) - len(missed)} of {len(found)} met", file=out)
            for t in found:
                print(f"  {'met   ' if t.passed else 'MISSED'} {t.case}: {t.name} {t.value:.3f} "
                      f"(limit {t.limit:g})", file=out)
    lead = bench.lead_table(rows)
    if lead or result.notes or result.launch:
        print("\nlead table (us; ratio: ours / the fastest peer):", file=out)
        print(bench.format_lead_table(lead, notes=result.notes, launch=result.launch), file=out)
    meta = {"device": why, "rounds": args.rounds, "reps": args.reps, "graphs": args.graphs,
            "peers": {lib: {"available": lib_ok, "status": lib_why} for lib, (lib_ok, lib_why) in status.items()}}
    try:
        bench.write_outputs(rows, json_path=args.json, csv_path=args.csv, png_path=args.png,
                            lead_csv_path=args.lead_csv, lead_png_path=args.lead_png, notes=result.notes,
                            launch=result.launch, meta=meta)
    except (RuntimeError, ValueError) as exc:  # matplotlib missing, or no lead table to write
        print(f"normprops bench: error: {exc}", file=err)
        return 2
    return 0 if all(g.passed for g in results) else 1


def _kernels(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    backends = list(dict.fromkeys([*BACKEND_PREFERENCE, *(k.backend for k in KERNELS)]))
    for backend in backends:
        ok, why = backend_status(backend)
        print(f"backend {backend}: {'available' if ok else 'unavailable'} ({why})", file=out)
    print(file=out)
    header = (f"{'kernel':20s} {'op':10s} {'backend':10s} {'dtype':9s} {'touches':>7s} {'T':>4s}  "
              f"claims / known bug")
    print(header, file=out)
    for k in KERNELS:
        claims = ",".join(f for f in families_for(k.op) if f in k.claims)
        bug = f"; BUG in {k.bug.family}: {k.bug.summary}" if k.bug else ""
        print(f"{k.name:20s} {k.op:10s} {k.backend:10s} {k.dtype:9s} {k.touches:7d} "
              f"{k.error_model.threads:4d}  {claims}{bug}", file=out)
    return 0


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        if args.command == "hunt":
            return (_hunt_impl if args.impl or args.cuda_source else _hunt_registry)(args, out, err)
        if args.command == "replay":
            return _replay(args, out, err)
        if args.command == "bench":
            return _bench(args, out, err)
        if args.command == "census":
            from normprops.census import census

            census(backend=_best_backend(args.backend), out=out)
            return 0
        return _kernels(args, out, err)
    except (UsageError, ImplError) as exc:
        print(f"normprops {args.command}: error: {exc}", file=err)
        return 2
