"""Planted bugs that range safety decides: each is caught by default, on the property that shows
it, and nothing is excused as range safety (tests/test_range_safety.py holds the policy itself)."""

from __future__ import annotations

import numpy as np

import normprops
from normprops.case import Case
from normprops.examples.backward_correct import rmsnorm_backward_f32
from normprops.examples.backward_planted import rmsnorm_backward_rstd_cubed
from normprops.examples.planted import softmax_no_shift
from normprops.launch import target_from_callable
from normprops.properties import evaluate

F32 = np.float32


def test_a_softmax_that_overflows_fails_by_default() -> None:
    """A softmax subtracts the row max, so every finite row is inside its accuracy domain: one that
    does not fails ``finite`` there, with nothing excused as range safety."""
    report = normprops.hunt_kernel(softmax_no_shift, op="softmax", families=["huge"],
                                   max_examples=30, seed=0)
    assert "finite" in [f.property for f in report.failures] and report.information == []
    assert "range_safety" not in [f.property for f in report.failures]


def _rms_backward_case(magnitude: float) -> Case:
    rng = np.random.default_rng(0)
    x = (magnitude * rng.standard_normal((3, 256))).astype(F32)
    dy = rng.standard_normal((3, 256)).astype(F32)
    return Case("rmsnorm_backward", "huge", x, np.ones(256, F32), None, float(np.finfo(F32).eps), dy=dy)


def test_rstd_cubed_is_caught_where_the_squares_still_fit() -> None:
    """|x| = 1e14: x*x is far inside float32, so the row is judged on accuracy whatever the family;
    the textbook backward passes it, the one that forms rstd**3 (subnormal there) does not."""
    case = _rms_backward_case(1e14)
    good = target_from_callable(rmsnorm_backward_f32, op="rmsnorm_backward")
    bad = target_from_callable(rmsnorm_backward_rstd_cubed, op="rmsnorm_backward")
    assert evaluate(good, case).failures == ()
    assert [f.property for f in evaluate(bad, case).failures] == ["accuracy"]
    report = normprops.hunt_kernel(rmsnorm_backward_rstd_cubed, op="rmsnorm_backward",
                                   families=["huge"], max_examples=100, seed=0)
    assert [f.property for f in report.failures] == ["accuracy"]
