"""``python -m normprops`` is the ``normprops`` command (the console script calls :func:`main`)."""

from __future__ import annotations

import sys


def main() -> int:
    """Load the command and run it. Its modules (numpy, Hypothesis) take about a second to load: a
    Ctrl-C then ends the command as it would later, with one line and status 130."""
    try:
        from normprops.cli import main as run
    except KeyboardInterrupt:
        print("normprops: interrupted", file=sys.stderr)
        return 130
    return run()


if __name__ == "__main__":
    raise SystemExit(main())
