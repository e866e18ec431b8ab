"""Through the CLI, exactly as a user would: every planted bug is caught by `normprops hunt --impl`
in the family that shows it, and the correct float64 and float32 implementations are never flagged."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from normprops.cli import main
from normprops.examples import planted as planted_module
from normprops.examples.correct import CORRECT
from normprops.examples.planted import PLANTED
from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_callable

pytestmark = pytest.mark.numerics


def _hunt(tmp_path: Path, *argv: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    out = io.StringIO()
    code = main(["hunt", *argv, "--seed", "0", "--no-fixtures", "--json", str(report)],
                out=out, err=io.StringIO())
    return code, json.loads(report.read_text()), out.getvalue()


def test_at_least_twelve_planted_bugs() -> None:
    assert len(PLANTED) >= 12
    assert len({p.func for p in PLANTED}) == len(PLANTED)


@pytest.mark.parametrize("planted", [p for p in PLANTED if not p.opt_in], ids=lambda p: p.func)
def test_planted_bug_is_caught(planted, tmp_path: Path) -> None:
    code, report, out = _hunt(tmp_path, "--op", planted.op, "--impl",
                              f"normprops.examples.planted:{planted.func}",
                              "--families", planted.family, "--max-examples", "300")
    assert code == 1, f"{planted.func} ({planted.bug}) not caught:\n{out}"
    assert {f["family"] for f in report["failures"]} == {planted.family}
    if planted.property is not None:
        # The bug's own property is the most severe finding: the headline names it.
        assert report["failures"][0]["property"] == planted.property, report["failures"][0]["message"]


@pytest.mark.parametrize("planted", [p for p in PLANTED if p.opt_in], ids=lambda p: p.func)
def test_opt_in_planted_bug_is_caught_only_when_asked(planted) -> None:
    """Bugs that only an optional property shows: caught with the target's opt_in, not without."""
    target = target_from_callable(getattr(planted_module, planted.func), op=planted.op)
    config = HuntConfig(max_examples=300, seed=0)
    asked = hunt(replace(target, opt_in=planted.opt_in), family=planted.family, config=config)
    assert not asked.passed, f"{planted.func} ({planted.bug}) not caught in {asked.examples} examples"
    assert asked.failure.property == planted.property, asked.failure.message()
    assert hunt(target, family=planted.family, config=config).passed


@pytest.mark.parametrize("impl", CORRECT, ids=lambda i: i.func)
def test_correct_implementation_is_never_flagged(impl, tmp_path: Path) -> None:
    code, report, out = _hunt(tmp_path, "--op", impl.op, "--impl",
                              f"normprops.examples.correct:{impl.func}", "--max-examples", "60")
    assert code == 0, out
    assert report["failures"] == []
