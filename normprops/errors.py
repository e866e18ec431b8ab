"""The exceptions every stage shares: what went wrong, and whose fault it is.

- :class:`ContractError`: the kernel broke its calling contract (a finding, reported as
  ``contract``).
- :class:`FatalTargetError`: the kernel cannot be called again in this process (a GPU fault, a call
  that never returned): the hunt stops at the case that caused it.
- :class:`UsageError`: the user asked for something impossible (a bad path, flag or value): one line,
  exit status 2.
- :class:`FixtureError`: a fixture file cannot be read (damaged, truncated, not a fixture).
- :class:`WriteError`: a report, fixture or picture could not be written (a full disk, a folder
  removed during the run): one line naming the file; exit status 4.

:func:`a_or_an` gives a type's name its article in these messages ("names an int");
:func:`describe_exit` says what a kernel's ``SystemExit`` was ("called sys.exit(3)").
"""

from __future__ import annotations

__all__ = ["ContractError", "FatalTargetError", "UsageError", "ImplError", "FixtureError", "WriteError",
           "a_or_an", "describe_exit", "is_test_outcome"]


class ContractError(Exception):
    """The target broke the calling contract (wrong output type, shape, dtype, device; mutated
    input)."""


class FatalTargetError(RuntimeError):
    """The target cannot be called again in this process (a GPU fault poisons the CUDA context; a
    call did not return in time): the hunt stops at the case that caused it and reports it."""


class UsageError(ValueError):
    """A problem with what the user asked for (command line or API arguments); a usage error, not a
    finding."""


class ImplError(UsageError):
    """A kernel named on the command line could not be resolved or built (``MODULE:FUNC``, a CUDA
    file that does not compile)."""


class FixtureError(ValueError):
    """A fixture file that cannot be read: the message names the file and what is wrong."""


class WriteError(OSError):
    """An output file that could not be written: the message names the file and the reason."""


#: Beginnings where a "u" sounds "you" (type names mostly): a uint8, a ufunc, a union, a user.
_U_AS_YOU = ("uint", "ufunc", "unicode", "union", "unique", "unit", "univ", "use", "usa", "usu", "uti")


def a_or_an(word: str) -> str:
    """``word`` with its indefinite article, by how it sounds: "an int", "a float", "a uint8"."""
    lower = word.lower()
    vowel = lower[:1] in ("a", "e", "i", "o", "u") and not lower.startswith(_U_AS_YOU)
    return f"{'an' if vowel else 'a'} {word}"



def describe_exit(exc: SystemExit) -> str:
    """What a kernel's ``SystemExit`` was, as a finding reads it: "called sys.exit(3)"."""
    return f"called sys.exit({'' if exc.code is None else repr(exc.code)})"


def is_test_outcome(exc: BaseException) -> bool:
    """``exc`` is pytest's way of ending a test (skip, xfail, fail, exit), which derives from
    BaseException: raised in a kernel, it ends the test that hunts it, as it would anywhere."""
    return any(cls.__module__ == "_pytest.outcomes" for cls in type(exc).__mro__)
