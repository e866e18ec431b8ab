"""An op defined outside the package (tests/toy_ops/scale_rows.py), registered through
``normprops.ops.register`` and hunted end to end through the public API: the seam an op module
plugs into is the same for it as for the built-in ops."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest
from toy_ops.scale_rows import SCALE_ROWS, correct, planted_overflow, planted_tail

import normprops
from normprops.ops import OPS, OpSpec, get_op, register, unregister
from normprops.strategies import families_for, make_case


@pytest.fixture(autouse=True)
def scale_rows_registered() -> Iterator[None]:
    """Registered for each test and forgotten after it: the other tests' ops stay the built-in ones."""
    register(SCALE_ROWS)
    yield
    unregister("scale_rows")


def test_the_toy_op_is_known_everywhere_once_registered() -> None:
    assert get_op("scale_rows") is SCALE_ROWS
    assert families_for("scale_rows") == ("ordinary", "ragged", "huge", "nonfinite")
    case = make_case(op="scale_rows", family="ragged", rows=3, cols=5, seed=1, params={"scale": 1.0})
    assert len(case.args()) == 1 and case.args()[0] is case.x


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(SCALE_ROWS)
    assert OPS["scale_rows"] is SCALE_ROWS


def test_an_op_without_a_reference_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a reference"):
        register(OpSpec("no_reference", ("x",), None, "x", families=("ordinary",)))
    assert "no_reference" not in OPS


def test_a_correct_kernel_of_the_toy_op_passes() -> None:
    report = normprops.hunt_kernel(correct, op="scale_rows", max_examples=15, seed=0)
    assert report.passed, [f.message for f in report.failures]


def test_a_kernel_that_forgets_the_ragged_tail_is_caught() -> None:
    report = normprops.hunt_kernel(planted_tail, op="scale_rows", families=["ragged"],
                                   max_examples=30, seed=0)
    assert not report.passed
    finding = next(f for f in report.failures if f.property == "accuracy")
    # A readable counterexample: the row and column of the worst element, what it got and what
    # the exact result is (x itself where 2 x was due).
    message = finding.message
    assert "scale_rows" in message and "ragged accuracy" in message and " col " in message
    col = finding.verdict.col
    assert finding.minimal.cols % 4 != 0 and col >= finding.minimal.cols - finding.minimal.cols % 4
    assert finding.verdict.expected == 2 * finding.verdict.got


def test_a_kernel_that_overflows_before_the_exact_result_does_is_caught() -> None:
    report = normprops.hunt_kernel(planted_overflow, op="scale_rows", families=["huge"],
                                   max_examples=40, seed=0)
    assert not report.passed
    finding = report.failures[0]
    assert finding.property == "finite"
    assert "non-finite output inf where the exact result is" in finding.message
    assert np.isfinite(finding.verdict.expected)
