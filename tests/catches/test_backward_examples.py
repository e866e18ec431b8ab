"""The example gradient kernels: every planted bug caught at the ci profile (100 derandomized
examples) in the family that shows it, every correct design clean.

The calibration test (deselected unless ``--calibration`` is given: ``python -m pytest --calibration
-m calibration -n 2``) hunts every float32 design on every family at 1000 examples; the normal
suite hunts each at 200 examples per family on rows of up to 1024 columns."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import normprops
from normprops.examples import backward_correct, backward_planted
from normprops.examples.backward_correct import CORRECT, GradImpl
from normprops.examples.backward_planted import PLANTED, GradPlanted
from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_callable
from normprops.ops import USER_ROW_REDUCTION
from normprops.strategies import families_for

pytestmark = pytest.mark.numerics

CI = HuntConfig(max_examples=100, derandomize=True)
FLOAT32_DESIGNS = [i for i in CORRECT if not i.func.endswith("_f64")]


def test_every_example_is_listed_once() -> None:
    ops = ("softmax_backward", "rmsnorm_backward", "layernorm_backward")
    for module, table in ((backward_planted, PLANTED), (backward_correct, CORRECT)):
        kernels = {name for name, fn in inspect.getmembers(module, inspect.isfunction)
                   if fn.__module__ == module.__name__ and name.startswith(ops)}
        listed = [entry.func for entry in table]
        assert sorted(listed) == sorted(kernels), set(listed) ^ kernels
    assert {p.op for p in PLANTED} == {i.op for i in CORRECT} == set(ops)
    for p in PLANTED:
        assert p.family in families_for(p.op), p.func


@pytest.mark.parametrize("planted", PLANTED, ids=lambda p: p.func)
def test_planted_bug_is_caught_at_the_ci_profile(planted: GradPlanted) -> None:
    target = target_from_callable(getattr(backward_planted, planted.func), op=planted.op,
                                  dtype=planted.dtype)
    result = hunt(target, family=planted.family, config=CI)
    assert not result.passed, f"{planted.func} ({planted.bug}) not caught in {result.examples} examples"
    assert result.failure.property == planted.property, result.failure.message()


def test_the_bfloat16_planted_bug_has_a_clean_twin() -> None:
    """Summing dgamma in float32 and rounding once, as the correct design does, passes where
    summing in bfloat16 fails: the bound is not merely tight for bfloat16."""
    target = target_from_callable(backward_correct.rmsnorm_backward_f32, op="rmsnorm_backward",
                                  dtype="bfloat16")
    result = hunt(target, family="tall", config=CI)
    assert result.passed, result.failure.message()


def test_numpys_column_sum_adds_the_rows_in_turn() -> None:
    """What the default row reduction rests on: on a C-contiguous float32 array of two or more
    columns, np.sum(axis=0) is one running sum down the rows (depth R - 1), bit for bit."""
    rng = np.random.default_rng(0)
    for rows, cols in ((64, 2), (137, 46), (1024, 64)):
        a = (rng.standard_normal((rows, cols)) * rng.uniform(0.5, 2.0, cols)).astype(np.float32)
        assert np.array_equal(np.sum(a, axis=0), backward_correct._running_sum(a)), (rows, cols)


def test_the_numpy_column_sum_passes_tall_by_default() -> None:
    """np.sum(axis=0)'s dbeta is a running sum down the rows: within the default's bound, which
    holds for every order of the rows (it once erred just past the ``blocks`` bound, err/tol 1.003,
    at seed 2 of an earlier draw)."""
    fn = backward_correct.layernorm_backward_numpy
    report = normprops.hunt_kernel(fn, op="layernorm_backward", families=["tall"], seed=2,
                                   max_examples=100)
    assert report.passed, "\n".join(f.message for f in report.failures)
    assert report.targets[0]["row_reduction"] == USER_ROW_REDUCTION == "sequential"


def test_the_bfloat16_dgamma_sum_is_caught_by_default() -> None:
    """The default row reduction's wider dgamma bound still catches dgamma summed in bfloat16: the
    bfloat16 roundings of the running sum exceed it several times over."""
    fn = backward_planted.rmsnorm_backward_bf16_dgamma
    for seed in (0, 1, 2):
        report = normprops.hunt_kernel(fn, op="rmsnorm_backward", dtype="bfloat16",
                                       families=["tall"], seed=seed, max_examples=100)
        assert report.targets[0]["row_reduction"] == "sequential"
        assert [(f.family, f.property) for f in report.failures] == [("tall", "accuracy")], seed
        assert "dgamma" in report.failures[0].message, seed


def _clean(impl: GradImpl, family: str, config: HuntConfig) -> None:
    target = target_from_callable(getattr(backward_correct, impl.func), op=impl.op, **impl.declared)
    result = hunt(target, family=family, config=config)
    assert result.passed, result.failure.message()
    assert result.max_ratio < 1


@pytest.mark.parametrize(("impl", "family"), [pytest.param(i, f, id=f"{i.func}-{f}")
                                             for i in FLOAT32_DESIGNS for f in families_for(i.op)])
def test_correct_design_is_clean(impl: GradImpl, family: str) -> None:
    _clean(impl, family, HuntConfig(max_examples=200, seed=0, max_cols=1024))


@pytest.mark.calibration
@pytest.mark.parametrize("impl", [i for i in CORRECT if i.func.endswith("_f64")],
                         ids=lambda i: i.func)
def test_float64_design_is_clean(impl: GradImpl) -> None:
    for family in families_for(impl.op):
        _clean(impl, family, CI)


@pytest.mark.calibration
@pytest.mark.parametrize("impl", FLOAT32_DESIGNS, ids=lambda i: i.func)
def test_correct_design_stays_clean_at_depth(impl: GradImpl, record_property) -> None:
    worst = {}
    for family in families_for(impl.op):
        target = target_from_callable(getattr(backward_correct, impl.func), op=impl.op,
                                      **impl.declared)
        result = hunt(target, family=family, config=HuntConfig(max_examples=1000, seed=0))
        assert result.passed, result.failure.message()
        worst[family] = round(result.max_ratio, 3)
    record_property("worst_accuracy_ratio", worst)
