"""What the ``normprops`` subcommands share: exit statuses, argument types, checks of output
paths, the user's kernel as a target, and the run whose report is written on every exit path.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, NoReturn, TextIO

from normprops import interrupt
from normprops.case import ShapeConstraints
from normprops.declaration import Declaration
from normprops.engine import choose_seed, parse_families
from normprops.errors import ImplError, UsageError, WriteError, a_or_an, describe_exit
from normprops.hunt import HuntConfig
from normprops.jsonio import check_can_create_in, output_dir_problem
from normprops.launch import Target, kernel_source, target_from_callable, target_from_cuda_source
from normprops.ops import OPS, check_ignore, check_opt_in, is_backward
from normprops.report import Report

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_UNREADABLE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_TERMINATED = 143  # SIGTERM, as a shell reports a process it ended (128 + 15)


def stopped_by() -> tuple[str, int]:
    """What stopped the run, as the report and the exit status say it: Ctrl-C or SIGTERM."""
    if interrupt.last_signal() == signal.SIGTERM:
        return "terminated", EXIT_TERMINATED
    return "interrupted", EXIT_INTERRUPTED


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


def _path(example: str, *, flag: bool = True) -> Callable[[str], Path]:
    """An argparse type for a path: ``Path(text)``, where an empty one (``--json ''``, which Path
    reads as ".") is refused with the fix, ``example`` a path of the kind the argument takes
    (``flag``: an option, which may also be left out)."""

    def path(text: str) -> Path:
        if not text:
            raise argparse.ArgumentTypeError(f"the path is empty (''): name one, e.g. {example}"
                                             + (", or leave the flag out" if flag else ""))
        return Path(text)

    return path


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


# --- checks made before any hunting ----------------------------------------------------------


def _can_create_in(directory: Path, flag: str, path: Path) -> None:
    try:
        check_can_create_in(directory)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create a file in {directory} "
                         f"({exc.strerror or exc})") from None


def _check_plot_file(path: Path | None, flag: str) -> None:
    """A picture to draw: a file as :func:`_check_output_file` says, and matplotlib to draw it,
    both before anything runs."""
    _check_output_file(path, flag)
    if path is not None and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{flag} needs matplotlib, which is not installed: pip install 'normprops[plot]'")


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
    problem = None if path is None else output_dir_problem(path)
    if problem:
        raise UsageError(f"{flag} {path}{problem}")


def resolve_impl(impl: str) -> Callable[..., Any]:
    """``MODULE:FUNC`` (importable from the current directory or PYTHONPATH) -> the callable."""
    module_name, sep, attr = impl.partition(":")
    if not sep or not module_name or not attr:
        raise ImplError(f"--impl must look like MODULE:FUNC (e.g. mykernels:softmax) but was {impl!r}")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        path = Path(module_name)
        where = "this directory" if path.parent == Path(".") else path.parent
        raise ImplError(f"--impl {impl}: MODULE is a module's name, not a file's path; write "
                        f"--impl {path.stem}:{attr} and run from {where} or add it to PYTHONPATH")
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
        except Exception as exc:  # a module's __getattr__ of its own
            raise ImplError(f"cannot get {attr!r} from module {module_name!r} for --impl {impl}: "
                            f"{type(exc).__name__}: {exc}") from None
    if not callable(fn):
        raise ImplError(f"--impl {impl} names {a_or_an(type(fn).__name__)}, not a function")
    return fn


def _parse_families(text: str | None, *, allowed: tuple[str, ...], op: str | None) -> tuple[str, ...]:
    """--families A,B,... (:func:`normprops.engine.parse_families`), its mistakes a usage error."""
    try:
        return parse_families(text, allowed=allowed, argument="--families", op=op)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _constraints(args: argparse.Namespace) -> ShapeConstraints:
    try:
        return ShapeConstraints(cols_multiple_of=args.cols_multiple_of,
                                min_cols=args.min_cols or 1, max_cols=args.max_cols)
    except ValueError as exc:
        raise UsageError(_flag_names(str(exc))) from None


def _flag_names(message: str) -> str:
    """A message of the library's, with its width arguments named as the flags that set them."""
    return (message.replace("cols_multiple_of", "--cols-multiple-of").replace("min_cols", "--min-cols")
            .replace("max_cols", "--max-cols"))


#: The seed of a hunt without --seed where Hypothesis derandomizes (on a CI service it loads its
#: ``ci`` profile by itself): a gate gives the same verdict on the same code.
CI_SEED = 0


def _config(args: argparse.Namespace) -> HuntConfig:
    # Without --seed, a fresh seed each run, printed in the header and kept in the report, so any
    # run can be repeated (`--seed N`), as Hypothesis prints @seed for a failure; in CI, CI_SEED.
    # Not engine.profile_config: the command's settings are its flags alone (--max-examples 100
    # unless given), not the active Hypothesis profile's, so a hunt reads the same on every machine.
    seed = choose_seed(args.seed, derandomized_seed=CI_SEED)
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
    # A second Ctrl-C or SIGTERM must not lose the report.
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run.report.write(run.json_path)
    except WriteError as exc:  # checked before the run: the disk filled, the folder went away
        print(f"normprops {run.report.command}: error: {exc}; the results above are not saved",
              file=run.err)
        return EXIT_INTERNAL
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code


#: Cells not reached that a Ctrl-C names on the screen when a JSON report names them all (more than
#: any op's families: a hunt of one kernel always lists every one).
_NAMED_ON_SCREEN = 12


def _guarded(run: _Run, body: Callable[[], int]) -> int:
    """``body()``, with the report written and a documented exit status on every path."""
    try:
        code = body()
    except KeyboardInterrupt:
        run.report.error, code = stopped_by()
        print(f"\n{run.report.error}: what was found so far follows", file=run.out)
        run.summary()
        names = run.report.extra.get("not_reached")
        if names:
            # A registry hunt stopped early can leave dozens of cells: with a report to name them
            # all, the screen names the first few.
            if run.json_path is not None and len(names) > _NAMED_ON_SCREEN:
                names = [*names[:_NAMED_ON_SCREEN], f"and {len(names) - _NAMED_ON_SCREEN} more "
                                                     f"({run.json_path} names them under \"not_reached\")"]
            print(f"not hunted: {', '.join(names)}", file=run.out)
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


def _user_target(args: argparse.Namespace) -> tuple[Target, str]:
    flag = "--impl" if args.impl else "--cuda-source"
    if args.op is None:
        raise UsageError(f"{flag} needs --op {{{','.join(OPS)}}}")
    if args.backend is not None:
        raise UsageError(f"--backend picks registry kernels and does not go with {flag} (drop "
                         f"--backend to hunt your kernel, or {flag} to hunt the registry)")
    constraints = _constraints(args)
    if args.impl:
        if args.kernel:
            raise UsageError("--kernel goes with --cuda-source, not --impl")
        fn = resolve_impl(args.impl)
        declaration = declaration_from_args(args, dtype=args.dtype or "float32", constraints=constraints)
        return _as_found(target_from_callable(fn, declaration=declaration), fn, args.impl), args.impl
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
    declaration = Declaration.declare(op=args.op, threads=args.threads or 256, ignore=args.ignore,
                                      constraints=constraints, ftz=args.ftz, reduction=args.reduction,
                                      opt_in=args.check, variance=args.variance)
    target = target_from_cuda_source(args.cuda_source, kernel=args.kernel, declaration=declaration)
    return target, f"{args.cuda_source}:{args.kernel}"


def declaration_from_args(args: argparse.Namespace, *, dtype: str,
                          constraints: ShapeConstraints = ShapeConstraints()) -> Declaration:
    """What ``--impl``'s flags declare, for its fixtures' storage type ``dtype`` (replay takes each
    fixture's own) and the widths ``constraints``: :meth:`Declaration.declare`, which checks every
    field. --mask and --mask-fill for an op without a mask are named as the user gave them."""
    given = [flag for flag, value in (("--mask", args.mask), ("--mask-fill", args.mask_fill))
             if value is not None]
    if given and not OPS[args.op].has_mask:
        raise UsageError(f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to --op "
                         f"masked_softmax only; op {args.op} takes no mask")
    return Declaration.declare(
        op=args.op, dtype=dtype, framework=args.framework, device=args.device, ignore=args.ignore,
        constraints=constraints, threads=args.threads, ftz=args.ftz, reduction=args.reduction,
        arithmetic=args.arithmetic, opt_in=args.check, call_timeout=args.call_timeout,
        row_reduction=args.row_reduction, variance=args.variance, mask=args.mask or "bool",
        mask_fill=args.mask_fill, **_attention_args(args))


def _yes_no(value: str | None) -> bool | None:
    return None if value is None else value == "yes"


def _attention_args(args: argparse.Namespace) -> dict[str, object]:
    """The declaration flags of the ops of named arrays (attention's, cross-entropy's) given, as
    declare()'s keywords (an op that takes none of them names the flag in its error)."""
    given = {"mask_layouts": args.mask_layouts, "empty_rows": args.empty_rows,
             "returns_lse": _yes_no(args.returns_lse), "p_dtype": args.p_dtype,
             "online": _yes_no(args.online), "shape_pool": args.shape_pool,
             "softcap": args.softcap, "z_loss": args.z_loss,
             "loss_reduction": args.loss_reduction, "smoothing": _yes_no(args.smoothing)}
    return {key: value for key, value in given.items() if value is not None}


def _user_only_flags(args: argparse.Namespace) -> list[str]:
    given = [("--threads", args.threads is not None), ("--dtype", args.dtype is not None),
             ("--framework", args.framework != "numpy"), ("--device", args.device is not None),
             ("--ignore", bool(args.ignore)), ("--ftz", args.ftz), ("--check", bool(args.check)),
             ("--reduction", args.reduction != "sequential"),
             ("--arithmetic", args.arithmetic != "float32"),
             ("--row-reduction", args.row_reduction is not None),
             ("--variance", args.variance != "two_pass"),
             ("--cols-multiple-of", args.cols_multiple_of != 1),
             ("--min-cols", args.min_cols is not None), ("--max-cols", args.max_cols is not None),
             ("--mask", args.mask is not None), ("--mask-fill", args.mask_fill is not None),
             *((f"--{key.replace('_', '-')}", True) for key in _attention_args(args))]
    return [flag for flag, used in given if used]


def _fixtures_dir(directory: Path) -> Path:
    """``--fixtures-dir`` of replay and the fixtures commands: a directory, or a path that does not
    exist yet (no fixture saved there: git keeps no empty folder), which they answer with exit 5,
    nothing to do (:func:`_no_fixtures_dir`); a file there is a usage error."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--fixtures-dir {directory}: not a directory (the directory a hunt saved "
                         f"its fixtures into)")
    return directory


def _no_fixtures_dir(directory: Path) -> str:
    """What replay, ``fixtures list`` and ``fixtures prune`` add where ``directory`` does not exist."""
    return (f" ({directory} does not exist: a hunt creates it when it saves its first fixture; "
            f"check --fixtures-dir)" if not directory.exists() else "")


def _as_found(target: Target, fn: Callable[..., Any], impl: str) -> Target:
    """``target`` of ``--impl`` named where its kernel lives and by its name there, as a hunt from
    Python finds them; by ``impl`` as typed only where nothing else names it (a bound method)."""
    source = kernel_source(fn, named=impl)
    assert source is not None  # named is its last resort
    return replace(target, name=source.rpartition(":")[2], source=source)


@dataclass
class _ReplayTargets:
    """``--impl`` as a target per storage type, each made when first asked for."""

    args: argparse.Namespace
    fn: Callable[..., Any]
    made: dict[str, Target] = field(default_factory=dict)

    def __call__(self, dtype: str) -> Target:
        if dtype not in self.made:
            declaration = declaration_from_args(self.args, dtype=dtype)
            self.made[dtype] = _as_found(target_from_callable(self.fn, declaration=declaration),
                                         self.fn, self.args.impl)
        return self.made[dtype]


def _check_all_dtypes(args: argparse.Namespace) -> None:
    if args.all_dtypes and args.dtype:
        raise UsageError(f"--all-dtypes replays each fixture in its own storage type and --dtype "
                         f"{args.dtype} only those of {args.dtype}: give one of them")

