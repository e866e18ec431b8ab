"""The ``normprops`` command: ``hunt``, ``replay``, ``fixtures``, ``kernels``, ``bench``, ``census``,
``report``.

Exit status (scripts rely on it):

- 0: nothing found (registry hunts: every kernel behaved as its registry entry declares);
  ``fixtures list`` and ``fixtures prune``: done;
- 1: counterexample(s) found, or (replay) a fixture still fails; ``fixtures prune``: the function
  stopped the replay (a hang, a fault): what passed before it is removed, the rest kept;
- 2: a usage error: a bad flag, path, module or value, named in one line;
- 3: replay, ``fixtures list`` and ``fixtures prune``: some fixtures could not be read (each is
  named; prune keeps them), and none that could be read failed; report merge: the reports are not
  one whole (a file given twice, a run that did not finish, another normprops version; among the
  shards of one hunt, a shard missing or given twice, another seed or setting): one line each,
  nothing merged unless ``--allow-incomplete``;
- 4: an internal error of normprops (please report it; the JSON report holds the traceback), or
  an output that could not be written after all (one line naming it; the results are printed);
- 5: replay: there was no fixture to replay (none saved, or every one of another storage type or
  width); ``fixtures prune``: no fixture matched (none of ``--kernel NAME``, or none to replay);
- 130: interrupted (Ctrl-C): what was found so far is printed and written to the report.

Once the arguments are accepted, the ``--json`` report is written on every one of these paths
(atomically), with an ``error`` field when the run did not finish. A usage error (2) stops before
anything runs and writes no report. Output files (``--json``, ``--png``, ``--csv``, ...) go into a
directory that exists, where a file is created and removed before anything runs; a missing or
unwritable one is a usage error. ``--fixtures-dir`` is created with its parents.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import secrets
import signal
import sys
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence, TextIO

from normprops import __version__, interrupt
from normprops.api import deadline_after, hunt_families, target_json
from normprops.case import ShapeConstraints
from normprops.dtypes import DTYPES
from normprops.errormodel import REDUCTIONS
from normprops.errors import (
    ImplError,
    UsageError,
    WriteError,
    a_or_an,
    describe_exit,
)
from normprops.frameworks import FRAMEWORKS
from normprops.hints import hints
from normprops.hunt import HuntConfig, HuntResult
from normprops.information import WORDS, information_of
from normprops.kernelspec import KernelSpec
from normprops.launch import Target, target_from_callable, target_from_cuda_source
from normprops.masking import MASK_KINDS
from normprops.ops import IGNORABLE, OPS, OPTIONAL, ROW_REDUCTIONS, check_ignore, check_opt_in, is_backward
from normprops.oracles import ORACLES, POLICIES
from normprops.registry_hunt import caught, hunt_registry, plan_cells, registry_cell_text
from normprops.regressions import (
    OTHER_DTYPE,
    OTHER_WIDTH,
    Fixture,
    FixtureListing,
    Replayed,
    Selection,
    list_fixtures,
    replay_selection,
    select_fixtures,
)
from normprops.report import (
    Cell,
    Report,
    cell_text,
    check_can_create_in,
    format_finding,
    matrix_legend,
    render_matrix,
)
from normprops.specs import KERNELS, backend_status
from normprops.strategies import families_for

__all__ = ["main", "EXIT_OK", "EXIT_FOUND", "EXIT_USAGE", "EXIT_UNREADABLE", "EXIT_INTERNAL",
           "EXIT_INTERRUPTED", "DEFAULT_FIXTURES"]

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_UNREADABLE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_NOTHING = 5  # replay: no fixture to replay (as pytest's 5: nothing collected)
#: Where findings are saved unless --fixtures-dir says otherwise: beside the user's work, never
#: inside a package (the suite's own committed fixtures live in tests/regressions).
DEFAULT_FIXTURES = Path("normprops-fixtures")
BACKEND_PREFERENCE = ("cuda", "numpy")


class _ParseError(UsageError):
    """A usage error argparse found, with the (sub)command whose arguments were wrong."""

    def __init__(self, message: str, *, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (the usage itself is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        raise _ParseError(f"{message} (see {self.prog} --help)", prog=self.prog)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer but got {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds but got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds but got {text}")
    return value


def _shard(text: str) -> tuple[int, int]:
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N (e.g. 2/8) but got {text!r}")
    return int(k), int(n)


def _opt_in_list(text: str) -> frozenset[str]:
    try:
        return check_opt_in(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ignore_list(text: str) -> frozenset[str]:
    try:
        return check_ignore(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_width_flags(p: argparse.ArgumentParser, *, replay: bool = False) -> None:
    shape = p.add_argument_group(
        "the widths your kernel accepts" + (" (fixtures of other widths are skipped)" if replay else ""))
    shape.add_argument("--cols-multiple-of", type=_positive_int, default=1, metavar="K",
                       help="widths that are a multiple of K (e.g. 4 for 16-byte float32 vectors)"
                            + ("" if replay else "; the ragged edges are counted in vectors of K"))
    shape.add_argument("--min-cols", type=_positive_int, metavar="N", help="narrowest row it takes")
    shape.add_argument("--max-cols", type=_positive_int, metavar="N", help="widest row it takes")


def _add_kernel_flags(p: argparse.ArgumentParser, *, replay: bool = False) -> None:
    """What a user's kernel takes and promises: shared by hunt and replay."""
    g = p.add_argument_group("your kernel (with --impl)")
    g.add_argument("--dtype", choices=tuple(DTYPES),
                   help="storage type it reads and writes (default float32)"
                        + ("; only the fixtures saved in it are replayed" if replay else ""))
    g.add_argument("--framework", choices=FRAMEWORKS, default="numpy",
                   help="the arrays it takes and returns (default numpy)")
    g.add_argument("--device", metavar="DEV",
                   help="where its arrays live: torch 'cuda' (default when available) or 'cpu'; "
                        "jax 'gpu' or 'cpu'; cupy 'cuda:N'")
    g.add_argument("--ignore", type=_ignore_list, default=frozenset(), metavar="P1,P2",
                   help="properties it does not promise, not judged (nor hunted): "
                        + ", ".join(sorted(IGNORABLE)))
    g.add_argument("--ftz", action="store_true",
                   help="it flushes subnormals to zero (FTZ/DAZ); without this it is judged as IEEE")
    g.add_argument("--threads", type=_positive_int, metavar="T",
                   help="threads cooperating on a row: the depth of the error bound (default 32); "
                        "with --cuda-source also the block size (default 256)")
    g.add_argument("--reduction", choices=REDUCTIONS, default="sequential",
                   help="how its sums run: each of T threads adds its share in turn, then they "
                        "meet in a tree (sequential, the default), or a pairwise tree over the row")
    g.add_argument("--row-reduction", choices=ROW_REDUCTIONS, default="blocks",
                   help="gradient ops: how it combines rows into dgamma and dbeta, the depth of "
                        "their bound: per-block partials over --threads blocks joined in a tree "
                        "(blocks, the default), one running sum over the rows (sequential), or a "
                        "pairwise tree (tree)")
    g.add_argument("--arithmetic", choices=("float32", "bfloat16"), default="float32",
                   help="the type it computes in (default float32); bfloat16 when every operation "
                        "rounds to bfloat16 (bounds 65536 times wider; needs --dtype bfloat16: "
                        "with float32 storage it is a usage error)")
    g.add_argument("--check", type=_opt_in_list, default=frozenset(), metavar="P1,P2",
                   help="optional properties it promises too: " + ", ".join(sorted(OPTIONAL))
                        + " (exact_constant: a constant layer-norm row gives beta exactly, a zero "
                          "RMS-norm row 0; range_safety: right for rows of any finite magnitude, "
                          "always judged for softmax; a norm that does not check it has its huge "
                          "findings shown as information, not failures)")
    g.add_argument("--mask", choices=MASK_KINDS, default=None,
                   help="masked_softmax: how it takes its mask: bool (default; True where the entry "
                        "takes part) or additive (a float array of 0 and --mask-fill, for "
                        "softmax(scale * x + mask))")
    g.add_argument("--mask-fill", metavar="V",
                   help="with --mask additive: the value at masked entries, -inf (default), lowest "
                        "(the storage type's lowest finite value) or a negative number")
    g.add_argument("--call-timeout", type=_positive_seconds, default=60.0, metavar="SECONDS",
                   help="a call that does not return within SECONDS stops the run and is reported "
                        "(default 60)")


_OUTPUT_FILES = ("Output files (--json, --png, --csv, ...) go into a directory that exists: a file is "
                 "created and removed there before anything runs, and a missing or unwritable "
                 "directory is a usage error. --fixtures-dir is created with its parents. Reports "
                 "and fixtures are written atomically, with the mode the umask gives.")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="normprops",
                     description="Hunt numerical bugs in softmax, masked softmax, layer norm and RMS norm "
                                 "kernels.",
                     epilog=f"exit status: {EXIT_OK} nothing found; {EXIT_FOUND} counterexample(s) found; "
                            f"{EXIT_USAGE} usage error; {EXIT_UNREADABLE} replay: unreadable fixtures, "
                            f"report merge: the reports are not one whole; "
                            f"{EXIT_INTERNAL} internal error or an output not written; "
                            f"{EXIT_NOTHING} replay: nothing to replay; "
                            f"{EXIT_INTERRUPTED} interrupted. " + _OUTPUT_FILES)
    parser.add_argument("--version", action="version", version=f"normprops {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    h = sub.add_parser("hunt", help="hunt a kernel (or every registered kernel) for counterexamples")
    h.add_argument("--op", choices=sorted(OPS), help="the op (required with --impl)")
    what = h.add_mutually_exclusive_group()
    what.add_argument("--impl", metavar="MODULE:FUNC",
                      help="a Python function with the op's signature: softmax fn(x), masked_softmax "
                           "fn(x, mask, scale), layernorm fn(x, gamma, beta, eps), rmsnorm fn(x, gamma, "
                           "eps); gradients: softmax_backward fn(dy, y) -> dx, rmsnorm_backward fn(dy, x, "
                           "gamma, eps) -> (dx, dgamma), layernorm_backward fn(dy, x, gamma, beta, eps) "
                           "-> (dx, dgamma, dbeta)")
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
                   help="examples per family and property (default 100)")
    h.add_argument("--seed", type=int, metavar="N",
                   help="Hypothesis seed, for a repeatable hunt (default: a fresh one, shown in the header)")
    h.add_argument("--json", type=Path, metavar="PATH",
                   help="write a JSON report here (written on every exit but a usage error, Ctrl-C included)")
    fx = h.add_mutually_exclusive_group()
    fx.add_argument("--fixtures-dir", type=Path, default=DEFAULT_FIXTURES, metavar="DIR",
                    help=f"where findings are saved, as DIR/<op>/*.json (default ./{DEFAULT_FIXTURES})")
    fx.add_argument("--no-fixtures", action="store_true", help="do not save findings")
    h.add_argument("--policy", choices=POLICIES, default="default",
                   help="tolerance policy: condition-aware default, or the flat rtol table gate")
    h.add_argument("--oracle", choices=ORACLES, default="float64", help="reference precision")
    h.add_argument("--backend", metavar="NAME[,NAME...]",
                   help="registry mode: hunt these backends' kernels (default: the best available; "
                        "normprops kernels lists them)")
    h.add_argument("--time-budget", type=_positive_seconds, metavar="SECONDS",
                   help="end the hunt cleanly once SECONDS have passed: what was found is reported, "
                        "each cell says how many examples it reached, the report is marked cut "
                        "short; the exit status still says whether anything was found")
    h.add_argument("--shard", type=_shard, metavar="K/N",
                   help="hunt only the K-th of N deterministic slices of the (kernel, family) cells; "
                        "merge the N reports with normprops report merge")
    _add_kernel_flags(h)
    _add_width_flags(h)

    r = sub.add_parser("replay", help="run stored regression fixtures against a function",
                       description="Replay the fixtures of --op saved in the kernel's storage type "
                                   "(--dtype, default float32) at the widths it accepts; the others "
                                   "are counted as skipped.")
    r.add_argument("--op", choices=sorted(OPS), required=True)
    r.add_argument("--impl", metavar="MODULE:FUNC", required=True)
    r.add_argument("--fixtures-dir", type=Path, default=DEFAULT_FIXTURES, metavar="DIR",
                   help=f"the directory the hunt saved into (default ./{DEFAULT_FIXTURES})")
    r.add_argument("--all-dtypes", action="store_true",
                   help="replay the fixtures of every storage type, each in its own (not with --dtype)")
    r.add_argument("--policy", choices=POLICIES, default="default")
    r.add_argument("--json", type=Path, metavar="PATH", help="write a JSON report here")
    _add_kernel_flags(r, replay=True)
    _add_width_flags(r, replay=True)

    fx = sub.add_parser("fixtures", help="list the saved fixtures, or prune them")
    fx_sub = fx.add_subparsers(dest="fixtures_command", required=True, parser_class=_Parser)
    ls = fx_sub.add_parser("list", help="one line per fixture: kernel, op, storage type, family, "
                                        "property, rows x cols, when saved, path (exit 3 if some "
                                        "cannot be read)")
    ls.add_argument("--fixtures-dir", type=Path, default=DEFAULT_FIXTURES, metavar="DIR",
                    help=f"the directory the hunts saved into (default ./{DEFAULT_FIXTURES})")
    ls.add_argument("--op", choices=sorted(OPS), help="only this op's fixtures")
    pr = fx_sub.add_parser(
        "prune", help="remove the fixtures of a kernel, or those a kernel no longer fails",
        description="Remove the fixtures saved by --kernel NAME, or, with --op and --impl, those "
                    "the function passes when replayed (as normprops replay selects and judges "
                    "them); with both, only NAME's fixtures that the function passes. Exit 0 "
                    "when done, 1 when the function stopped the replay (what passed before it "
                    "is removed, the rest kept), 3 when some fixtures cannot be read (kept), 5 "
                    "when no fixture matched.")
    pr.add_argument("--fixtures-dir", type=Path, default=DEFAULT_FIXTURES, metavar="DIR",
                    help=f"the directory the hunts saved into (default ./{DEFAULT_FIXTURES})")
    pr.add_argument("--kernel", metavar="NAME",
                    help="the fixtures of this kernel: its name, or backend:name as fixtures list shows it")
    pr.add_argument("--op", choices=sorted(OPS), help="only this op's fixtures (required with --impl)")
    pr.add_argument("--impl", metavar="MODULE:FUNC",
                    help="replay the fixtures on this function and remove those it passes")
    pr.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    pr.add_argument("--all-dtypes", action="store_true",
                    help="with --impl: replay the fixtures of every storage type, each in its own")
    pr.add_argument("--policy", choices=POLICIES, default="default")
    _add_kernel_flags(pr, replay=True)
    _add_width_flags(pr, replay=True)

    sub.add_parser("kernels", help="list the registry and each backend's availability")

    rep = sub.add_parser("report", help="work with JSON reports")
    rep_sub = rep.add_subparsers(dest="report_command", required=True, parser_class=_Parser)
    m = rep_sub.add_parser(
        "merge", help="merge reports (e.g. the shards of one hunt) into one matrix",
        description="Merge JSON reports into one matrix: the shards of one hunt, or hunts of other "
                    "kernels. Each file must be given once, every run must have finished, and all "
                    "must come from the same normprops version. Reports of the same kernels (the "
                    "same --backend, --op, --kernel or --impl) of which any is a shard (hunt --shard "
                    "K/N) must be the shards of one hunt: each of 1/N..N/N once, with the same seed "
                    "and settings. Otherwise each problem is one line and "
                    f"nothing is merged (exit {EXIT_UNREADABLE}); with --allow-incomplete the "
                    "merge goes on, its status is the cells' (0 or 1), and the merged report says "
                    "\"complete\": false and why. A hunt cut short by its --time-budget finished: "
                    "it merges, and the merged report says \"cut_short\": true and names it.")
    m.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    m.add_argument("--json", type=Path, metavar="PATH",
                   help="write the merged report here (into a directory that exists)")
    m.add_argument("--png", type=Path, metavar="PATH", help="draw the matrix (needs [plot])")
    m.add_argument("--allow-incomplete", action="store_true",
                   help="merge even when shards are missing or differ, or a run did not finish; "
                        "the merged report is marked \"complete\": false, with the reasons")

    b = sub.add_parser("bench", help="the bandwidth table on the GPU: ours against PyTorch, Liger-Kernel and "
                                     "QuACK, the textbook kernels' predictions, the gates and the targets "
                                     "(exit 1 when a gate of the textbook kernels fails)")
    b.add_argument("--cases", default="textbook,l2,l2-bf16,decode", metavar="SETS",
                   help="comma-separated: textbook (the two 64 MiB cases), l2 / l2-bf16 / l2-f16 (16x "
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

    for writer in (h, r, m, b):
        writer.epilog = _OUTPUT_FILES
    c = sub.add_parser("census", help="worked numbers from the kernels: the eight values, the wide "
                                      "softmax row, the overflow row")
    c.add_argument("--backend", choices=("cuda", "numpy"),
                   help="default: the GPU when usable, else the numpy emulation")
    return parser


# --- checks made before any hunting ----------------------------------------------------------


def _can_create_in(directory: Path, flag: str, path: Path) -> None:
    try:
        check_can_create_in(directory)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create a file in {directory} "
                         f"({exc.strerror or exc})") from None


def _check_output_file(path: Path | None, flag: str) -> None:
    """An output file goes into a directory that exists, where a file can be created now."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory; name a file, e.g. {path / 'report.json'}")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path} is not writable")
    parent = path.absolute().parent
    ancestor = parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"{flag} {path}: {ancestor} is a file, not a directory")
    if ancestor != parent:  # a typo in a folder must not cost a whole hunt, nor make folders
        raise UsageError(f"{flag} {path}: no directory {path.parent}; create it first "
                         f"(mkdir -p {path.parent})")
    _can_create_in(parent, flag, path)


def _check_output_dir(path: Path | None, flag: str) -> None:
    """An output directory is created (with its parents) where a file can be created now."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} is a file; name a directory")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"{flag} {path}: {ancestor} is a file, not a directory")
    _can_create_in(ancestor, flag, path)


def resolve_impl(impl: str) -> Callable[..., Any]:
    """``MODULE:FUNC`` (importable from the current directory or PYTHONPATH) -> the callable."""
    module_name, sep, attr = impl.partition(":")
    if not sep or not module_name or not attr:
        raise ImplError(f"--impl must look like MODULE:FUNC (e.g. mykernels:softmax) but was {impl!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of the user's module is a usage error
        raise ImplError(f"cannot import module {module_name!r} for --impl {impl}: "
                        f"{type(exc).__name__}: {exc}") from None
    except SystemExit as exc:  # its status is not ours to exit with
        raise ImplError(f"cannot import module {module_name!r} for --impl {impl}: it "
                        f"{describe_exit(exc)} while being imported") from None
    fn: object = module
    for part in attr.split("."):
        try:
            fn = getattr(fn, part)
        except AttributeError:
            raise ImplError(f"module {module_name!r} has no attribute {attr!r} (--impl {impl})") from None
    if not callable(fn):
        raise ImplError(f"--impl {impl} names {a_or_an(type(fn).__name__)}, not a function")
    return fn


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


def _constraints(args: argparse.Namespace) -> ShapeConstraints:
    try:
        return ShapeConstraints(cols_multiple_of=args.cols_multiple_of,
                                min_cols=args.min_cols or 1, max_cols=args.max_cols)
    except ValueError as exc:
        raise UsageError(str(exc).replace("cols_multiple_of", "--cols-multiple-of")
                         .replace("min_cols", "--min-cols").replace("max_cols", "--max-cols")) from None


def _config(args: argparse.Namespace) -> HuntConfig:
    # Without --seed, a fresh seed each run, printed in the header and kept in the report, so any
    # run can be repeated (`--seed N`), as Hypothesis prints @seed for a failure.
    seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    return HuntConfig(max_examples=args.max_examples, seed=seed, policy=args.policy,
                      oracle=args.oracle)


# --- running, with the report written whatever happens ---------------------------------------


@dataclass
class _Run:
    """The report of the run in progress: written on every exit path."""

    report: Report
    json_path: Path | None
    out: TextIO
    err: TextIO
    summary: Callable[[], None] = lambda: None  # prints what was found so far (on Ctrl-C)


def _finish(run: _Run, code: int) -> int:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not lose it
    try:
        run.report.write(run.json_path)
    except WriteError as exc:  # checked before the run: the disk filled, the folder went away
        print(f"normprops {run.report.command}: error: {exc}; the results above are not saved",
              file=run.err)
        return EXIT_INTERNAL
    finally:
        signal.signal(signal.SIGINT, previous)
    return code


def _guarded(run: _Run, body: Callable[[], int]) -> int:
    """``body()``, with the report written and a documented exit status on every path."""
    try:
        code = body()
    except KeyboardInterrupt:
        run.report.error = "interrupted"
        print("\ninterrupted: what was found so far follows", file=run.out)
        run.summary()
        code = EXIT_INTERRUPTED
    except UsageError:
        raise
    except WriteError as exc:  # a fixture: the hunt stops, and says so, with what it found so far
        run.report.error = str(exc)
        run.summary()
        print(f"normprops {run.report.command}: error: {exc}", file=run.err)
        code = EXIT_INTERNAL
    except Exception as exc:  # a bug of ours: one line, the traceback kept in the report
        run.report.error = f"internal error: {type(exc).__name__}: {exc}"
        run.report.extra["traceback"] = traceback.format_exc()
        where = f"; the traceback is in {run.json_path}" if run.json_path else ""
        print(f"normprops {run.report.command}: internal error: {type(exc).__name__}: {exc} "
              f"(a bug in normprops, please report it{where})", file=run.err)
        code = EXIT_INTERNAL
    return _finish(run, code)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _family_line(result: HuntResult, note: str | None) -> str:
    status = "pass" if result.passed else "FAIL " + ",".join(result.properties)
    if (result.interrupted or result.cut_short) and result.passed:
        status = "stopped"
    words = ", ".join(dict.fromkeys(WORDS[f.property] for f in information_of(result)))
    if words:
        status += f" ({words})"
    # A failing family's worst includes its findings (inf: an outright failure such as a
    # non-finite output or a broken contract, which has no finite ratio).
    worst = max([result.max_ratio, *(r for f in result.findings
                                     for r in (f.verdict.ratio, f.worst_verdict.ratio)
                                     if r is not None and not math.isnan(r))])
    line = (f"  {result.family:16s} {status:30s} {result.examples:6d} examples  worst err/tol "
            f"{worst:.3g}  {result.elapsed_s:.1f}s")
    if note:
        line += f"  ({note})"
    return line


def _warnings_line(result: HuntResult) -> str | None:
    if not result.warnings:
        return None
    return (f"    {result.warnings} warning{'s' * (result.warnings != 1)} from the kernel's own code "
            f"(first: {result.first_warning})")


def _fixtures_line(results: list[HuntResult], directory: Path | None) -> str | None:
    saved = {f.fixture for r in results for f in r.findings if f.fixture is not None}
    if directory is None or not saved:
        return None
    return (f"fixtures: {len(saved)} saved under {directory}/ (--fixtures-dir DIR to change, "
            f"--no-fixtures to skip; replay with normprops replay)")


def _user_target(args: argparse.Namespace) -> tuple[Target, str]:
    flag = "--impl" if args.impl else "--cuda-source"
    if args.op is None:
        raise UsageError(f"{flag} needs --op {{{','.join(OPS)}}}")
    constraints = _constraints(args)
    if args.impl:
        if args.kernel:
            raise UsageError("--kernel goes with --cuda-source, not --impl")
        fn = resolve_impl(args.impl)
        target = target_from_callable(fn, op=args.op, name=args.impl.partition(":")[2],
                                      dtype=args.dtype or "float32", framework=args.framework,
                                      device=args.device, ignore=args.ignore,
                                      constraints=constraints, threads=args.threads, ftz=args.ftz,
                                      reduction=args.reduction, arithmetic=args.arithmetic,
                                      opt_in=args.check, timeout_s=args.call_timeout,
                                      row_reduction=args.row_reduction, **_mask_keywords(args))
        return target, args.impl
    if is_backward(args.op):
        raise UsageError(f"--op {args.op}: gradient ops are hunted through --impl; --cuda-source "
                         f"takes the forward ops' standard signatures")
    if not args.kernel:
        raise UsageError("--cuda-source needs --kernel NAME")
    if args.mask is not None or args.mask_fill is not None:
        raise UsageError("--mask and --mask-fill go with --impl: a --cuda-source kernel takes the "
                         "standard signature, which has no mask")
    if ((args.dtype or "float32") != "float32" or args.framework != "numpy" or args.device
            or args.arithmetic != "float32"):
        raise UsageError("--cuda-source kernels take float32 device pointers and compute in float32: "
                         "--dtype, --framework, --device and --arithmetic go with --impl")
    target = target_from_cuda_source(args.cuda_source, op=args.op, kernel=args.kernel,
                                     threads=args.threads or 256, ignore=args.ignore,
                                     constraints=constraints, ftz=args.ftz,
                                     reduction=args.reduction, opt_in=args.check)
    return target, f"{args.cuda_source}:{args.kernel}"


def _mask_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """--mask and --mask-fill as target_from_callable's keywords (which check the fill); either
    flag given for an op without a mask is a usage error."""
    given = [flag for flag, value in (("--mask", args.mask), ("--mask-fill", args.mask_fill))
             if value is not None]
    if given and not OPS[args.op].has_mask:
        raise UsageError(f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to --op "
                         f"masked_softmax only; op {args.op} takes no mask")
    return {"mask": args.mask or "bool", "mask_fill": args.mask_fill}


def _hunt_impl(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    target, source = _user_target(args)
    chosen = _parse_families(args.families, allowed=families_for(args.op),
                             what=f"a family of {args.op}")
    families = chosen
    if args.shard is not None:
        families = chosen[args.shard[0] - 1::args.shard[1]]
        if not families:
            raise UsageError(f"--shard {args.shard[0]}/{args.shard[1]}: no family falls in this "
                             f"shard of {args.op}'s families")
    config = _config(args)
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
        line = _fixtures_line(results, fixtures)
        if line:
            print(line, file=out)

    run.summary = summary

    def body() -> int:
        adapter = target.adapter
        ignored = f"; not judged: {', '.join(sorted(target.ignore))}" if target.ignore else ""
        if target.opt_in:
            ignored += f"; also judged: {', '.join(sorted(target.opt_in))}"
        if target.information:
            ignored += (f"; hunted as information only: {', '.join(sorted(target.information))} "
                        f"(--check to judge)")
        if target.error_model.arithmetic != "float32":
            ignored += f"; computes in {target.error_model.arithmetic}"
        arithmetic = "flush-to-zero allowed (--ftz)" if target.error_model.ftz else "judged as IEEE"
        print(f"normprops hunt: {target.label} from {source} ({adapter.description}), "
              f"{_count(len(families), 'family', 'families')}, {config.max_examples} examples each; widths: "
              f"{target.constraints.describe()}; {arithmetic}{ignored}; seed {config.seed}", file=out)

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

        hunted = hunt_families(target, families=families, fixtures_dir=fixtures, on_result=show,
                               config=replace(config, deadline=deadline_after(args.time_budget)))
        if hunted.interrupted:
            raise KeyboardInterrupt
        report.cut_short = hunted.cut_short
        reached = len(report.results)
        not_hunted = f"{len(families) - reached} of {len(families)} families not hunted"
        if hunted.cut_short:
            done = {r.family for r, _ in report.results}
            report.extra["not_reached"] = [f for f in families if f not in done]
            report.notes.append(f"cut short: the time budget of {args.time_budget:g} s was spent; "
                                f"{not_hunted}")
            print(f"  cut short: the time budget of {args.time_budget:g} s was spent after {reached} "
                  f"of {len(families)} families ({sum(r.examples for r, _ in report.results)} "
                  f"examples); not hunted: {', '.join(report.extra['not_reached']) or 'none'}.",
                  file=out)
        elif hunted.stopped:
            report.notes.append(f"stopped: {hunted.stopped}")
            print(f"  stopped: {hunted.stopped}", file=out)
        summary()
        failed = [r for r, _ in report.results if not r.passed]
        findings = sum(len(r.findings) for r in failed)
        if not any(r.fatal for r in hunted.results):  # a target that hung is not run again
            report.hints = hints(report.failures, target=target, policy=config.policy,
                                 oracle=config.oracle)
        for line in report.hints:
            print(line, file=out)
        if failed:
            print(f"{len(failed)} of {len(report.results)} families failed ({findings} finding"
                  f"{'s' * (findings != 1)})" + (f"; cut short: {not_hunted}." if hunted.cut_short
                                                 else "."), file=out)
        elif hunted.cut_short:
            print(f"clean as far as it got: {reached} of {len(families)} families, no counterexample.",
                  file=out)
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


def _user_only_flags(args: argparse.Namespace) -> list[str]:
    given = [("--threads", args.threads is not None), ("--dtype", args.dtype is not None),
             ("--framework", args.framework != "numpy"), ("--device", args.device is not None),
             ("--ignore", bool(args.ignore)), ("--ftz", args.ftz), ("--check", bool(args.check)),
             ("--reduction", args.reduction != "sequential"),
             ("--arithmetic", args.arithmetic != "float32"),
             ("--row-reduction", args.row_reduction != "blocks"),
             ("--cols-multiple-of", args.cols_multiple_of != 1),
             ("--min-cols", args.min_cols is not None), ("--max-cols", args.max_cols is not None),
             ("--mask", args.mask is not None), ("--mask-fill", args.mask_fill is not None)]
    return [flag for flag, used in given if used]


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
    cells_planned = plan_cells(specs, families=chosen, shard=args.shard)
    total = len(cells_planned)
    fixtures = None if args.no_fixtures else args.fixtures_dir
    report = Report("hunt", settings={"backend": backend, "op": args.op, "kernel": args.kernel,
                                      "families": list(chosen), "policy": config.policy,
                                      "oracle": config.oracle, "max_examples": config.max_examples,
                                      "seed": config.seed, "time_budget": args.time_budget,
                                      "shard": None if args.shard is None else "%d/%d" % args.shard})
    report.notes += [f"not usable here, not hunted: {b}" for b in skipped]
    run = _Run(report, args.json, out, err)
    hunted: list[tuple[KernelSpec, HuntResult]] = []

    def summary() -> None:
        cells = [Cell(f"{spec.op} ({spec.backend})", spec.name, r.family, registry_cell_text(spec, r))
                 for spec, r in hunted]
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

        def show(spec: KernelSpec, result: HuntResult) -> None:
            hunted.append((spec, result))
            bug = spec.bug_in(result.family)
            if spec.expectation(result.family) == "bug" and bug.property is not None:
                report.bug_properties[len(report.results)] = bug.property
            report.results.append((result, spec.expectation(result.family)))
            print(f"  [{len(hunted)}/{total}] {spec.name} x {result.family}: "
                  f"{registry_cell_text(spec, result)} ({result.examples} examples, "
                  f"{result.elapsed_s:.1f}s)", file=err, flush=True)

        outcome = hunt_registry(
            cells_planned, config=replace(config, deadline=deadline_after(args.time_budget)),
            fixtures_dir=fixtures, on_result=show,
            on_target=lambda spec, target: report.targets.append(target_json(target)))
        if outcome.interrupted:
            raise KeyboardInterrupt
        report.notes += outcome.notes
        summary()
        surprises = outcome.surprises
        for spec, result in surprises:
            expected = spec.expectation(result.family)
            why = ("claimed" if expected == "claim" else
                   f"known bug, in {spec.bug_in(result.family).property or 'any property'}: not caught")
            print(f"\nnot as declared: {spec.label} x {result.family} ({why})", file=out)
            for finding in result.findings:
                print(format_finding(finding), file=out)
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
        if surprises:
            print(f"\n{len(surprises)} hunt(s) not as declared.", file=out)
        elif outcome.cut_short:
            print("every kernel hunted behaved as its registry entry declares, as far as it got.", file=out)
        else:
            print("\nevery kernel behaved as its registry entry declares.", file=out)
        report.extra["not_as_declared"] = [f"{s.label} x {r.family}" for s, r in surprises]
        return EXIT_FOUND if surprises else EXIT_OK

    return _guarded(run, body)


def _hunt(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _check_output_file(args.json, "--json")
    if not args.no_fixtures:
        _check_output_dir(args.fixtures_dir, "--fixtures-dir")
    return (_hunt_impl if args.impl or args.cuda_source else _hunt_registry)(args, out, err)


def _fixtures_dir(directory: Path) -> Path:
    if not directory.is_dir():
        raise UsageError(f"--fixtures-dir {directory}: "
                         f"{'not a directory' if directory.exists() else 'no such directory'} "
                         f"(the directory a hunt saved its fixtures into)")
    return directory


@dataclass
class _ReplayTargets:
    """``--impl`` as a target per storage type, each made when first asked for."""

    args: argparse.Namespace
    fn: Callable[..., Any]
    made: dict[str, Target] = field(default_factory=dict)

    def __call__(self, dtype: str) -> Target:
        if dtype not in self.made:
            a = self.args
            self.made[dtype] = target_from_callable(
                self.fn, op=a.op, name=a.impl.partition(":")[2], dtype=dtype,
                framework=a.framework, device=a.device, ignore=a.ignore, threads=a.threads,
                ftz=a.ftz, reduction=a.reduction, arithmetic=a.arithmetic, opt_in=a.check,
                timeout_s=a.call_timeout, row_reduction=a.row_reduction, **_mask_keywords(a))
        return self.made[dtype]


def _check_all_dtypes(args: argparse.Namespace) -> None:
    if args.all_dtypes and args.dtype:
        raise UsageError(f"--all-dtypes replays each fixture in its own storage type and --dtype "
                         f"{args.dtype} only those of {args.dtype}: give one of them")


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
    listing: FixtureListing | None = None
    selection: Selection | None = None
    replayed: list[Replayed] = []

    def summary(stopped: str | None = None) -> None:
        """The last line, and the report's rows of the fixtures never run."""
        if listing is None or selection is None:
            return
        report.targets = [target_json(t) for t in targets.made.values()]
        total = len(listing.paths)
        failed = sum(not r.passed for r in replayed)
        unjudged = sum(r.passed and r.unjudged for r in replayed)
        passed = len(replayed) - failed - unjudged
        never = selection.replays[len(replayed):]
        rows.extend({"path": str(f.path), "outcome": "not_run"} for f, _ in never)
        if passed == total:
            print("the fixture passes." if passed == 1 else f"all {passed} fixtures pass.", file=out)
            return
        parts = [f"{passed} passed", f"{failed} failed"]
        if unjudged:
            parts.append(f"{unjudged} not judged")
        if listing.unreadable:
            parts.append(f"{len(listing.unreadable)} could not be read")
        if selection.skipped:
            parts.append(f"{len(selection.skipped)} skipped")
        if never:
            parts.append(f"{len(never)} not run ({stopped or 'interrupted'})")
        print(f"{_count(total, 'fixture', 'fixtures')}: {', '.join(parts)}.", file=out)

    run.summary = summary

    def body() -> int:
        nonlocal listing, selection
        listing = list_fixtures(directory, op=args.op)
        if not listing.paths:
            here = sorted(p.name for p in directory.glob("*.json"))
            hint = (f"; {directory} itself holds {len(here)} .json file(s): pass the directory "
                    f"above it (fixtures live in DIR/{args.op}/)" if here else "")
            print(f"no {args.op} fixtures under {directory}/{args.op}{hint}", file=out)
            report.error = "nothing to replay"
            return EXIT_NOTHING
        selection = select_fixtures(listing.fixtures, dtype=dtype, all_dtypes=args.all_dtypes,
                                    widths=widths)
        for bad in listing.unreadable:
            rows.append({"path": str(bad.path), "outcome": "unreadable", "reason": bad.reason})
            print(f"unreadable {bad.reason}", file=out)
        for skip in selection.skipped:
            rows.append({"path": str(skip.fixture.path), "outcome": "skipped", "reason": skip.reason})
        for line in _skipped_lines(selection, dtype=dtype, widths=widths):
            print(line, file=out)
        if not selection.replays and not listing.unreadable:
            print(f"nothing to replay: {_count(len(listing.paths), 'fixture', 'fixtures')} under "
                  f"{directory}/{args.op}, all skipped.", file=out)
            report.error = "nothing to replay"
            return EXIT_NOTHING
        stopped = None
        for result in replay_selection(selection, targets, policy=args.policy):
            replayed.append(result)
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
                continue
            if finding is None:
                print(f"pass {fixture.path.name}", file=out)
                continue
            report.fixture_failures.append(finding)
            print(f"FAIL {fixture.path.name}: {finding.message}", file=out)
            if result.stopped is not None:
                row["reason"] = result.stopped
                stopped = "the kernel cannot be called again"
                never = len(selection.replays) - len(replayed)
                report.error = (f"replay stopped at {fixture.path}: {result.stopped}; "
                                f"{_count(never, 'fixture', 'fixtures')} not run")
        summary(stopped)
        if any(not r.passed for r in replayed):
            return EXIT_FOUND
        return EXIT_UNREADABLE if listing.unreadable else EXIT_OK

    return _guarded(run, body)


def _fixtures_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    directory = _fixtures_dir(args.fixtures_dir)
    listing = list_fixtures(directory, op=args.op)
    where = f"{directory}/{args.op}" if args.op else str(directory)
    if not listing.paths:
        print(f"no fixtures under {where}", file=out)
        return EXIT_OK
    table = [("kernel", "op", "dtype", "family", "property", "rows x cols", "saved (UTC)", "path")]
    guessed = False
    for f in listing.fixtures:
        when, recorded = f.saved_at()
        guessed |= not recorded
        shapes = "/".join(dict.fromkeys(f"{c.rows}x{c.cols}" for c in f.cases()))
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
    gone: list[Fixture] = []  # removed (or, with --dry-run, to be removed) so far
    run.summary = lambda: print(f"{verb} {_count(len(gone), 'fixture', 'fixtures')}.", file=out)

    def body() -> int:
        listing = list_fixtures(directory, op=args.op)
        for bad in listing.unreadable:
            print(f"unreadable {bad.reason} (kept)", file=out)
        mine = [f for f in listing.fixtures if args.kernel is None or f.of_kernel(args.kernel)]
        if not mine:
            kernels = sorted({f.kernel for f in listing.fixtures})
            what = f"of kernel {args.kernel} " if args.kernel else ""
            print(f"no fixture {what}under {where}"
                  + (f" (kernels there: {', '.join(kernels)})" if kernels else ""), file=out)
            return EXIT_UNREADABLE if listing.unreadable else EXIT_NOTHING
        chosen = mine  # the fixtures to remove
        kept: list[Fixture] = []  # replayed, and still failing
        unjudged: list[Fixture] = []  # replayed clean, but their property is not judged here
        stopped = None
        if targets is not None:
            selection = select_fixtures(mine, dtype=dtype, all_dtypes=args.all_dtypes, widths=widths)
            for line in _skipped_lines(selection, dtype=dtype, widths=widths, left="kept, not replayed"):
                print(line, file=out)
            if not selection.replays:
                print(f"nothing to replay: {_count(len(mine), 'fixture', 'fixtures')} under {where}, "
                      f"all of other storage types or widths; nothing removed.", file=out)
                return EXIT_UNREADABLE if listing.unreadable else EXIT_NOTHING
            chosen = []
            replayed = 0
            for result in replay_selection(selection, targets, policy=args.policy):
                replayed += 1
                if result.passed and result.unjudged:
                    unjudged.append(result.fixture)
                    print(f"keep {result.fixture.path}: {_not_judged(result.fixture.property)}",
                          file=out)
                elif result.passed:
                    chosen.append(result.fixture)
                else:
                    kept.append(result.fixture)
                    print(f"keep {result.fixture.path}: {result.failures[0].message()}", file=out)
                    stopped = result.stopped
            if stopped is not None:
                never = len(selection.replays) - replayed
                print(f"the replay stopped ({stopped}): {_count(never, 'fixture', 'fixtures')} "
                      f"not run, kept", file=out)
        for fixture in chosen:
            if not args.dry_run:
                fixture.path.unlink()
            gone.append(fixture)
            print(f"{verb} {fixture.path}", file=out)
        others = len(listing.fixtures) - len(mine)
        kept_for = [(len(kept), "still failing"), (len(unjudged), "not judged"),
                    (len(mine) - len(chosen) - len(kept) - len(unjudged), "not replayed or not run"),
                    (others, "of other kernels"), (len(listing.unreadable), "unreadable")]
        why = ", ".join(f"{n} {what}" for n, what in kept_for if n)
        print(f"{verb} {len(gone)} of {_count(len(listing.paths), 'fixture', 'fixtures')} under "
              f"{where}" + (f"; kept: {why}" if why else "") + ".", file=out)
        if stopped is not None:
            return EXIT_FOUND
        return EXIT_UNREADABLE if listing.unreadable else EXIT_OK

    return _guarded(run, body)


def _report_merge(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from normprops.report import (
        IncompleteMerge,
        ReportError,
        cell_from_json,
        declared_json,
        matrix_png,
        merge_reports,
        write_json_atomically,
    )

    _check_output_file(args.json, "--json")
    _check_output_file(args.png, "--png")
    try:
        merged = merge_reports(args.reports, allow_incomplete=args.allow_incomplete)
    except IncompleteMerge as exc:
        for problem in exc.problems:
            print(f"normprops report merge: error: {problem}", file=err)
        print(f"normprops report merge: nothing merged ({_count(len(exc.problems), 'problem', 'problems')}; "
              f"--allow-incomplete merges anyway, marked incomplete)", file=err)
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
    # A registry's cells by its own rule; a user's kernel (which declares nothing) by what it found.
    surprising = [r for r in merged["results"]
                  if (not declared_json(r) if r.get("expected") is not None else not r["passed"])]
    print(f"{_count(len(merged['merged_from']), 'report', 'reports')}, "
          f"{_count(len(cells), 'cell', 'cells')}, {_count(len(merged['failures']), 'failure', 'failures')}"
          + ("" if merged["complete"] else "; incomplete (--allow-incomplete)")
          + ("; cut short" if merged["cut_short"] else ""), file=out)
    try:
        if args.json is not None:
            write_json_atomically(args.json, merged)
        if args.png is not None:
            matrix_png(cells, args.png, title=f"normprops robustness matrix ({len(cells)} cells)")
    except ImportError:
        raise UsageError("--png needs matplotlib: pip install 'normprops[plot]'") from None
    except OSError as exc:  # checked before: the disk filled, the folder went away
        reason = exc if isinstance(exc, WriteError) else f"cannot write {args.png}: {exc.strerror or exc}"
        print(f"normprops report merge: error: {reason}", file=err)
        return EXIT_INTERNAL
    return EXIT_FOUND if surprising else EXIT_OK


def _bench(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import re

    from normprops import bench
    from normprops.backends import peers

    for flag in ("json", "csv", "png", "lead_csv", "lead_png"):
        _check_output_file(getattr(args, flag), f"--{flag.replace('_', '-')}")
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


def _kernels(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    backends = list(dict.fromkeys([*BACKEND_PREFERENCE, *(k.backend for k in KERNELS)]))
    for backend in backends:
        ok, why = backend_status(backend)
        print(f"backend {backend}: {'available' if ok else 'unavailable'} ({why})", file=out)
    print(file=out)
    name_w = max(len(k.name) for k in KERNELS)
    backend_w = max(len(k.backend) for k in KERNELS)
    print(f"{'kernel':{name_w}s} {'op':9s} {'backend':{backend_w}s} {'dtype':8s} {'arrays':6s} "
          f"{'T':>4s}  claims; not promised; width limits; known bug", file=out)
    for k in KERNELS:
        parts = [",".join(f for f in families_for(k.op) if f in k.claims) or "nothing"]
        if k.exempt:
            parts.append("not promised: " + ",".join(sorted(k.exempt)))
        if not k.constraints.unconstrained:
            parts.append(k.constraints.describe())
        parts += [f"BUG in {b.family}: {b.summary}" for b in k.bugs]
        print(f"{k.name:{name_w}s} {k.op:9s} {k.backend:{backend_w}s} {k.dtype:8s} {k.framework:6s} "
              f"{k.error_model.threads:4d}  {'; '.join(parts)}", file=out)
    return 0


def _joined_fill(argv: Sequence[str] | None) -> list[str] | None:
    """``--mask-fill -inf`` as ``--mask-fill=-inf``: argparse takes a value that starts with a dash
    and is not a plain negative number (``-inf``, ``-1e4``) for an option of its own."""
    if argv is None:
        argv = sys.argv[1:]
    out: list[str] = []
    for token in argv:
        if out and out[-1] == "--mask-fill" and token.startswith("-"):
            out[-1] = f"--mask-fill={token}"
        else:
            out.append(token)
    return out


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    parser = _parser()
    command = "hunt"
    try:
        with interrupt.catching():
            try:
                args = parser.parse_args(_joined_fill(argv))
            except SystemExit as exc:  # --help and --version
                return int(exc.code or 0)
            command = args.command if args.command != "report" else f"report {args.report_command}"
            if command == "fixtures":
                command = f"fixtures {args.fixtures_command}"
                return (_fixtures_list if args.fixtures_command == "list" else _fixtures_prune)(
                    args, out, err)
            if command == "hunt":
                return _hunt(args, out, err)
            if command == "replay":
                return _replay(args, out, err)
            if command == "bench":
                return _bench(args, out, err)
            if command == "report merge":
                return _report_merge(args, out, err)
            if command == "census":
                from normprops.census import census

                census(backend=_best_backend(args.backend), out=out)
                return EXIT_OK
            return _kernels(args, out, err)
    except UsageError as exc:
        if isinstance(exc, _ParseError):  # before the command was known: argparse names it
            prefix = exc.prog
        else:
            prefix = "normprops" if argv is not None and not list(argv) else f"normprops {command}"
        print(f"{prefix}: error: {exc}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("normprops: interrupted", file=err)
        return EXIT_INTERRUPTED
