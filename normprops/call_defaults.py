"""What a pytest run's options ask of every :func:`normprops.hunt_kernel` and
:func:`normprops.assert_robust` call made during it. Kept apart from :mod:`normprops.api` so that
the pytest plugin sets them without importing the API (and with it the hunt, the strategies, the
oracles): a project that has normprops installed but never hunts pays nothing for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["SessionDefaults", "use_session_defaults", "current_defaults"]


@dataclass(frozen=True)
class SessionDefaults:
    """What a pytest run's options ask of every :func:`hunt_kernel` and :func:`assert_robust` call
    made during it, where the call does not say otherwise: ``--normprops-fixtures-dir``,
    ``--normprops-policy``, ``--normprops-oracle`` and ``--normprops-time-budget`` (its end, as a
    ``time.monotonic()`` deadline). Outside pytest, the defaults below."""

    fixtures_dir: Path | None = None
    policy: str = "default"
    oracle: str = "float64"
    deadline: float | None = None
    #: Called with a reason, instead of hunting, when ``deadline`` has passed before a hunt starts
    #: (the plugin passes ``pytest.skip``: a test whose hunt cannot run is not a pass).
    when_spent: Callable[[str], Any] | None = None


_CURRENT = [SessionDefaults()]


def use_session_defaults(defaults: SessionDefaults) -> None:
    """Set what the calls of this process take by default (the pytest plugin does, once a run)."""
    _CURRENT[0] = defaults


def current_defaults() -> SessionDefaults:
    """What the calls of this process take by default now."""
    return _CURRENT[0]
