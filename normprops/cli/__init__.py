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
- 130: interrupted (Ctrl-C): what was found so far is printed and written to the report;
- 143: terminated (SIGTERM, as a scheduler or a CI timeout sends it): the same, the report's
  ``error`` reading ``terminated``.

Once the arguments are accepted, the ``--json`` report is written on every one of these paths
(atomically), with an ``error`` field when the run did not finish. A usage error (2) stops before
anything runs and writes no report. Output files (``--json``, ``--png``, ``--csv``, ...) go into a
directory that exists, where a file is created and removed before anything runs; a missing or
unwritable one is a usage error. ``--fixtures-dir`` is created with its parents.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence, TextIO

from normprops import interrupt
from normprops.cli.bench import _bench
from normprops.cli.common import (
    DEFAULT_FIXTURES,
    EXIT_FOUND,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    _ParseError,
    stopped_by,
)
from normprops.cli.fixtures import _fixtures_list, _fixtures_prune, _replay
from normprops.cli.hunt import _best_backend, _hunt
from normprops.cli.kernels import _kernels
from normprops.cli.merge import _report_merge
from normprops.cli.parser import _parser
from normprops.errors import UsageError

__all__ = ["main", "EXIT_OK", "EXIT_FOUND", "EXIT_USAGE", "EXIT_UNREADABLE", "EXIT_INTERNAL",
           "EXIT_INTERRUPTED", "EXIT_TERMINATED", "DEFAULT_FIXTURES"]


def _joined_fill(argv: Sequence[str] | None) -> list[str] | None:
    """``--mask-fill -inf`` as ``--mask-fill=-inf``: argparse takes a value that starts with a dash
    and is not a plain negative number (``-inf``, ``-1e4``) for an option of its own."""
    if argv is None:
        argv = sys.argv[1:]
    out: list[str] = []
    for token in argv:
        if out and out[-1] == "--mask-fill" and _is_negative_number(token):
            out[-1] = f"--mask-fill={token}"
        else:
            out.append(token)
    return out


def _is_negative_number(token: str) -> bool:
    """``-inf``, ``-1e4``, ``-10000``: a fill, not the next option (``--max-examples``)."""
    if not token.startswith("-") or token.startswith("--"):
        return False
    try:
        float(token)
    except ValueError:
        return False
    return True


class _ReaderMayLeave:
    """A standard stream that goes quiet once its reader has gone (``normprops kernels | head``):
    the command runs on, and its report and exit status are what they would have been. The
    stream's file descriptor then points at /dev/null, so Python's own flush at exit stays quiet
    too."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self._gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # a stream without a descriptor: nothing to silence
            pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = _ReaderMayLeave(sys.stdout) if out is None else out
    err = _ReaderMayLeave(sys.stderr) if err is None else err
    parser = _parser()
    command = "hunt"
    try:
        with interrupt.catching():
            try:
                args, extra = parser.parse_known_args(_joined_fill(argv))
            except SystemExit as exc:  # --help and --version
                return int(exc.code or 0)
            command = args.command if args.command != "report" else f"report {args.report_command}"
            if command == "fixtures":
                command = f"fixtures {args.fixtures_command}"
            if extra:  # argparse would name the top-level parser; the subcommand's help is the one
                tokens = list(_joined_fill(argv) or [])
                before = tokens.index(args.command) if args.command in tokens else len(tokens)
                prog = ("normprops" if any(t in tokens[:before] for t in extra)
                        else f"normprops {command}")
                raise _ParseError(f"unrecognized arguments: {' '.join(extra)} (see {prog} --help)",
                                  prog=prog)
            if command.startswith("fixtures "):
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
        what, code = stopped_by()
        print(f"normprops: {what}", file=err)
        return code

