"""The CLI as the tests call it: ``main`` in this process, its output captured."""

from __future__ import annotations

import io

from normprops import cli

__all__ = ["run"]


def run(*argv: str) -> tuple[int, str, str]:
    """``normprops ARGV...``: (exit status, stdout, stderr). Reads ``normprops.cli.hunt.KERNELS`` at
    call time, so a test may patch the registry the CLI sees."""
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()
