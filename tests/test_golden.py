"""The CLI's output and JSON reports, held as golden files: what a user reads must not change by
accident. Each line of tests/golden/commands.txt is run in a fresh folder; the output (and the
report, where one is written) is compared, after taking out what differs from run to run (times,
the folder), with tests/golden/<name>.out and <name>.json.

Regenerate after a change meant to alter them: ``NORMPROPS_REGEN_GOLDEN=1 python -m pytest
tests/test_golden.py``, and read the diff.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("NORMPROPS_REGEN_GOLDEN") == "1"


def _commands() -> list[tuple[str, list[str]]]:
    rows = []
    for line in (GOLDEN / "commands.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, args = (part.strip() for part in line.split("|", 1))
            rows.append((name, shlex.split(args)))
    return rows


_SECONDS = re.compile(r"\b\d+(\.\d+)?s\b")


def _text(out: str, folder: Path) -> str:
    out = out.replace(str(folder), "<dir>")
    return _SECONDS.sub("<t>s", out)


def _report(path: Path, folder: Path) -> str:
    data = json.loads(path.read_text())

    def scrub(node: object) -> object:
        if isinstance(node, dict):
            return {k: ("<t>" if k in ("elapsed_s", "seconds", "wall_s") else scrub(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [scrub(v) for v in node]
        if isinstance(node, str):
            return node.replace(str(folder), "<dir>")
        return node

    return json.dumps(scrub(data), indent=1, sort_keys=True) + "\n"


def _check(name: str, suffix: str, got: str) -> None:
    path = GOLDEN / f"{name}{suffix}"
    if REGEN:
        path.write_text(got)
        return
    assert path.exists(), f"no golden file {path}: run with NORMPROPS_REGEN_GOLDEN=1"
    assert got == path.read_text(), f"{name}{suffix} differs from its golden file"


@pytest.mark.parametrize("name,args", _commands(), ids=[n for n, _ in _commands()])
def test_cli_output_is_golden(name: str, args: list[str], tmp_path: Path) -> None:
    # A command may read what an earlier one wrote (replay reads the fixtures a hunt saved), so
    # those pairs share a folder: every command of one op and name prefix runs in order.
    folder = tmp_path
    for earlier, earlier_args in _commands():
        if earlier == name:
            break
        if earlier.split("_")[0] == name.split("_")[0] and "--fixtures-dir" in earlier_args:
            _run(earlier_args, folder)
    proc = _run(args, folder)
    _check(name, ".out", f"exit {proc.returncode}\n" + _text(proc.stdout + proc.stderr, folder))
    report = folder / "report.json"
    if report.exists():
        _check(name, ".json", _report(report, folder))


def _run(args: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    env.pop("CI", None)
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "normprops", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
