"""Through the CLI, exactly as a user would: every planted bug is caught by `normprops hunt --impl`
in the family that shows it, and the correct float64 and float32 implementations are never flagged."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from normprops.cli import main
from normprops.examples import correct as correct_module
from normprops.examples import planted as planted_module
from normprops.examples.correct import CORRECT
from normprops.examples.planted_catalog import PLANTED
from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_callable
from normprops.ops import OPS, PROPERTIES, get_op, is_backward
from normprops.strategies import families_for

pytestmark = pytest.mark.numerics


def _hunt(tmp_path: Path, *argv: str) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    out = io.StringIO()
    code = main(["hunt", *argv, "--seed", "0", "--no-fixtures", "--json", str(report)],
                out=out, err=io.StringIO())
    return code, json.loads(report.read_text()), out.getvalue()


def test_every_planted_bug_is_a_hunt_it_can_run() -> None:
    """The table is what the tests below hunt: every planted function of the module is in it once,
    for an op with a family the hunt draws for that op and a property the suite judges; and every op
    has planted bugs (a table that lost a function or an op would otherwise pass unnoticed)."""
    import inspect

    defined = {name for name, fn in inspect.getmembers(planted_module, inspect.isfunction)
               if fn.__module__ == planted_module.__name__ and not name.startswith("_")}
    listed = [p.func for p in PLANTED]
    assert sorted(listed) == sorted(defined), set(listed) ^ defined
    assert len(set(listed)) == len(listed)
    for p in PLANTED:
        assert p.family in families_for(p.op), f"{p.func}: family {p.family!r} is not drawn for {p.op}"
        assert p.property is None or p.property in PROPERTIES, f"{p.func}: unknown property {p.property!r}"
        assert p.opt_in <= set(PROPERTIES), f"{p.func}: unknown opt-in {sorted(p.opt_in)}"
    # every forward row op has a planted bug here (the gradients' are in examples/backward_planted.py;
    # the named-arrays ops' in their own example modules: attention_kernels.py,
    # attention_backward_kernels.py, cross_entropy_kernels.py, hunted by their own tests)
    assert {p.op for p in PLANTED} == {op for op in OPS
                                       if not is_backward(op) and get_op(op).named is None}


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
    asked = hunt(target.declared(opt_in=planted.opt_in), family=planted.family, config=config)
    assert not asked.passed, f"{planted.func} ({planted.bug}) not caught in {asked.examples} examples"
    assert asked.failure.property == planted.property, asked.failure.message()
    assert hunt(target, family=planted.family, config=config).passed


@pytest.mark.parametrize("impl", CORRECT, ids=lambda i: i.func)
def test_correct_implementation_is_never_flagged(impl, tmp_path: Path) -> None:
    code, report, out = _hunt(tmp_path, "--op", impl.op, "--impl",
                              f"normprops.examples.correct:{impl.func}", "--max-examples", "60")
    assert code == 0, out
    assert report["failures"] == []


def _seeds_caught(func: str, *, family: str, seeds: range, examples: int, op: str = "softmax") -> int:
    """Of ``seeds``, how many a hunt of ``examples`` examples catches the planted ``func`` with (the
    hunt's own phases but shrinking, which comes after a catch), in a fresh interpreter: Hypothesis
    mixes the literals of every local module imported so far into its draws, so in this process
    the count would depend on which tests ran before."""
    script = textwrap.dedent(f"""
        from hypothesis import Phase, settings
        from normprops.examples import planted
        from normprops.hunt import HuntConfig, hunt
        from normprops.launch import target_from_callable
        target = target_from_callable(planted.{func}, op={op!r})
        unshrunk = settings(database=None, phases=(Phase.explicit, Phase.generate, Phase.target))
        print(sum(not hunt(target, family={family!r}, config=HuntConfig(
            max_examples={examples}, seed=s, parent=unshrunk)).passed for s in {seeds!r}))
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_masked_leading_block_is_caught_within_the_ci_profiles_examples() -> None:
    """A split-row softmax that fails only when a whole leading block of 1024 columns is -inf, at
    100 examples (the ci profile's): the masked family's thread shares, chunks and random masks
    caught it with 2 of these 20 seeds, its attention layouts catch it with all 20 (and 294 of
    seeds 20 to 319)."""
    assert _seeds_caught("softmax_leading_block_nan", family="masked", seeds=range(20),
                         examples=100) >= 19


def test_a_masked_softmax_with_a_leading_chunk_masked_is_caught_within_the_ci_profiles_examples() -> None:
    """The same bug in a masked softmax's online merge (fn(x, mask, scale), chunks of 1024): only
    left padding of a whole chunk or more shows it, which the attention layouts draw."""
    assert _seeds_caught("masked_softmax_leading_chunk_nan", family="masked", seeds=range(20),
                         examples=100, op="masked_softmax") >= 19


@pytest.mark.parametrize("func, op", [("softmax_blocks", "softmax"), ("softmax_online", "softmax"),
                                      ("masked_softmax_online", "masked_softmax")])
def test_chunked_softmax_stays_clean_on_every_mask_layout(func: str, op: str) -> None:
    target = target_from_callable(getattr(correct_module, func), op=op)
    result = hunt(target, family="masked", config=HuntConfig(max_examples=300, seed=0))
    assert result.passed, result.failure.message()
    assert result.examples == 300
