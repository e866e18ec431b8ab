"""Ctrl-C that is never lost.

Python's own SIGINT handler raises KeyboardInterrupt in whatever Python code runs when the signal is
noticed. When that code is a finalizer (``__del__``, a weakref callback, a garbage-collector
callback), the exception is printed as "Exception ignored" and the program carries on: the hunt
would then run to its end. :func:`catching` installs a handler that also records the request, and
:func:`check`, called between the examples of a hunt, raises KeyboardInterrupt again while one is
pending; the "Exception ignored" traceback of a KeyboardInterrupt swallowed that way is not
printed (it is not lost: it is pending). A process started with SIGINT ignored (a background job)
keeps ignoring it.

SIGTERM (what a batch scheduler, a CI runner's timeout or ``kill`` sends) stops a run the same way,
where it has its default action, a background job's too: the run writes its report and exits 143
rather than dying with nothing written. :func:`last_signal` says which of the two stopped it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["catching", "check", "last_signal", "requested"]

_pending = threading.Event()
_last: list[int] = []  # the signal that asked the run to stop, kept after the block ends
# The handlers a signal has when nobody else handles it: only those are replaced.
_DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


def _handler(signum: int, frame: object) -> None:
    _pending.set()
    _last[:] = [signum]
    raise KeyboardInterrupt


def last_signal() -> int | None:
    """The signal (SIGINT or SIGTERM) that stopped the last :func:`catching` block, or None."""
    return _last[0] if _last else None


def requested() -> bool:
    """Whether Ctrl-C was pressed since :func:`catching` began."""
    return _pending.is_set()


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed (and possibly swallowed) since
    :func:`catching` began."""
    if _pending.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def catching() -> Iterator[None]:
    """Within this block, Ctrl-C and SIGTERM, each where it has its default action, raise
    KeyboardInterrupt and stay pending for :func:`check`. A signal ignored (SIGINT in a background
    job) or handled by someone else is left alone; outside the main thread nothing changes."""
    _pending.clear()
    _last.clear()
    usable = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s, default in _DEFAULTS.items()
                if usable and signal.getsignal(s) is default}
    if not previous:
        yield
        return
    unraisable = sys.unraisablehook

    def quiet(info: object) -> None:
        if not (isinstance(getattr(info, "exc_value", None), KeyboardInterrupt) and _pending.is_set()):
            unraisable(info)  # type: ignore[arg-type]

    for signum in previous:
        signal.signal(signum, _handler)
    sys.unraisablehook = quiet
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = unraisable
        _pending.clear()
