"""Fixtures shared by the CLI tests (``run()``, the CLI as they call it, is in ``cli_harness.py``).

They reach the subfolders too (``tests/catches/``), and so does ``from cli_harness import run``:
pytest's default import mode puts this file's folder on ``sys.path`` when it loads it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def user_module(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The requesting test module's ``USER_MODULE`` source, written as ``USER_MODULE_NAME``.py into
    the test's folder, which becomes the working directory and importable; returns the module name
    (what ``--impl NAME:FUNC`` takes)."""
    name = request.module.USER_MODULE_NAME
    (tmp_path / f"{name}.py").write_text(request.module.USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def dev_profile():
    """The random `dev` profile, whatever profile this run loaded (Hypothesis loads `ci`, which
    derandomizes, when it sees a CI environment)."""
    from hypothesis import settings

    before = settings.get_current_profile_name()
    settings.load_profile("dev")
    yield
    settings.load_profile(before)


@pytest.fixture
def ci_profile():
    from hypothesis import settings

    before = settings.get_current_profile_name()
    settings.load_profile("ci")
    yield
    settings.load_profile(before)
