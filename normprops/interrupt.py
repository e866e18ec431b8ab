"""Ctrl-C that is never lost.

Python's own SIGINT handler raises KeyboardInterrupt in whatever Python code runs when the signal is
noticed. When that code is a finalizer (``__del__``, a weakref callback, a garbage-collector
callback), the exception is printed as "Exception ignored" and the program carries on: the hunt
would then run to its end. :func:`catching` installs a handler that also records the request, and
:func:`check`, called between the examples of a hunt, raises KeyboardInterrupt again while one is
pending; the "Exception ignored" traceback of a KeyboardInterrupt swallowed that way is not
printed (it is not lost: it is pending). A process started with SIGINT ignored (a background job)
keeps ignoring it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["catching", "check", "requested"]

_pending = threading.Event()


def _handler(signum: int, frame: object) -> None:
    _pending.set()
    raise KeyboardInterrupt


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
    """Within this block, Ctrl-C raises KeyboardInterrupt and stays pending for :func:`check`.
    Outside the main thread, or where SIGINT is ignored or handled by someone else, nothing
    changes."""
    _pending.clear()
    usable = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if usable else None
    if previous is not signal.default_int_handler:
        yield
        return
    unraisable = sys.unraisablehook

    def quiet(info: object) -> None:
        if not (isinstance(getattr(info, "exc_value", None), KeyboardInterrupt) and _pending.is_set()):
            unraisable(info)  # type: ignore[arg-type]

    signal.signal(signal.SIGINT, _handler)
    sys.unraisablehook = quiet
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = unraisable
        _pending.clear()
