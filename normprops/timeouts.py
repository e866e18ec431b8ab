"""A call of a user's kernel that does not return in time: stopped with SIGALRM, which only the
main thread of a Unix process receives, without disturbing an alarm someone else set."""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable

from normprops.errors import FatalTargetError
from normprops.flags import flag

__all__ = ["call_with_timeout", "call_timeout_problem"]


class _CallTimeout(BaseException):
    """Raised by SIGALRM inside a user's function; a BaseException so ``except Exception`` in the
    user's code cannot swallow it."""


def call_timeout_problem() -> str | None:
    """Why a call timeout cannot be kept in this thread (None: it can): it is kept with SIGALRM,
    which only the main thread of a Unix process receives."""
    if not hasattr(signal, "setitimer"):
        return "this platform has no SIGALRM"
    if threading.current_thread() is not threading.main_thread():
        return f"the hunt runs in thread {threading.current_thread().name!r}, not the main thread"
    return None


def call_with_timeout(fn: Callable[..., object], args: tuple[object, ...],
                       seconds: float | None) -> object:
    """``fn(*args)``, interrupted after ``seconds`` (a Python-level loop stops at once; a long C
    call, when it returns). Only where SIGALRM is usable: the main thread of a Unix process.

    An alarm someone else set (pytest-timeout's, a watchdog's) is kept: where it is due first it
    bounds the call with its own handler, and otherwise what was left of it is set again after the
    call, with its handler."""
    if seconds is None or call_timeout_problem() is not None:
        return fn(*args)
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    previous = signal.getsignal(signal.SIGALRM)
    if previous is None or (outer_left > 0 and not callable(previous)) or 0 < outer_left <= seconds:
        # A handler set outside Python (None) cannot be put back, and an alarm pending under the
        # default or ignored disposition must not be re-armed under ours: left alone, as is an
        # alarm due first, which bounds the call with its own handler.
        return fn(*args)
    start = time.monotonic()

    def expire(signum: int, frame: object) -> None:
        raise _CallTimeout

    signal.signal(signal.SIGALRM, expire)
    try:
        # The alarm can fire anywhere from its setting to its clearing, the clearing included (a
        # timeout as long as the call itself): every place it can land is inside the handler's try.
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _CallTimeout:
        raise FatalTargetError(f"did not return within {seconds:g} s (call timeout; raise "
                               f"{flag('call_timeout')} / call_timeout= for a slow first call)") from None
    finally:
        signal.signal(signal.SIGALRM, previous)
        if outer_left > 0:  # due later than ours: what is left of it (an overdue one fires now)
            left = outer_left - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), outer_interval)
