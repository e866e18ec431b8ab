"""Float16's range at both ends (docs/tolerances.md, "Attention backward", "Float16's range"):

- past its largest value, an infinity of the exact value's sign is a correct output where the exact
  magnitude, widened by its tolerance, reaches the overflow threshold (65520 = 65504 + half an
  ulp), by accuracy and by ``finite``, for every op; NaN, an infinity of the other sign, and an
  infinity where the exact value is far inside the range are still caught;
- below its least normal, P and dS rounded to float16 lose up to 2^-25 each absolutely (the
  bound's ``p_floor``): a flash backward that rounds them passes, and fails without the term.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import normprops
from normprops.dtypes import DTYPES
from normprops.examples.attention_backward_kernels import ROUNDED, flash_rounded
from normprops.judge import judge_named, judge_named_close, rounded_past_range
from normprops.launch import target_from_callable
from normprops.ops import NamedExact
from normprops.ops.attention_backward_math import (
    AttentionBackwardCase,
    attention_backward_reference,
    attention_backward_tolerance,
)
from normprops.properties import evaluate

F32 = np.float32
F16_MAX = 65504.0


# --- the overflow threshold ------------------------------------------------------------------------


@pytest.mark.parametrize("name, kind", [("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16),
                                        ("float32", np.float32)])
def test_the_overflow_threshold_is_where_rounding_gives_an_infinity(name, kind):
    threshold = DTYPES[name].overflow
    wide = np.float64 if name == "float32" else np.float32  # a type that holds the threshold
    below = np.nextafter(wide(threshold), wide(0))
    with np.errstate(over="ignore"):
        at = np.array([threshold], wide).astype(kind)
        under = np.array([below], wide).astype(kind)
    assert np.isinf(at[0]), f"{name}: {threshold!r} rounds to {at[0]!r}, not inf"
    assert float(under[0]) == DTYPES[name].max, f"{name}: {below!r} rounds to {under[0]!r}"
    if name == "float16":
        assert threshold == 65520.0


@pytest.mark.parametrize("got, exact, tol, ok", [
    pytest.param(math.inf, 65520.0, 0.0, True, id="at-threshold"),
    pytest.param(-math.inf, -68722.0, 40.0, True, id="past-range-negative"),
    pytest.param(math.inf, 65500.0, 32.0, True, id="within-tol-of-threshold"),
    pytest.param(math.inf, 65500.0, 8.0, False, id="tol-short-of-threshold"),
    pytest.param(math.inf, 32768.0, 16.0, False, id="in-range"),
    pytest.param(-math.inf, 68722.0, 40.0, False, id="wrong-sign"),
    pytest.param(math.nan, 68722.0, 40.0, False, id="nan"),
    pytest.param(math.inf, 0.0, math.inf, False, id="zero-exact"),
    # an infinite bound asks for a finite result: it widens nothing
    pytest.param(math.inf, 1.0, math.inf, False, id="infinite-tol"),
    pytest.param(-math.inf, -1.0, math.inf, False, id="infinite-tol-negative"),
])
def test_an_infinity_is_accepted_only_where_rounding_may_give_it(got, exact, tol, ok):
    found = rounded_past_range(np.array([got]), np.array([exact]), np.array([tol]), dtype="float16")
    assert bool(found[0]) is ok, f"got {got} for exact {exact} tol {tol}: accepted={bool(found[0])}"


def test_the_named_judge_accepts_inf_near_the_threshold_and_flags_nan():
    exact = NamedExact({"y": np.array([65510.0, -65510.0, 1.0])}, {"y": np.array([40.0, 40.0, 1e-3])},
                       {"y": np.ones(3, bool)})

    class _Case:
        family, dtype = "explicit", "float16"

    def judged(got):
        failures, _ = judge_named(_Case(), {"y": np.array(got)}, exact, label="k",
                                  element=lambda name, i: str(i))
        return sorted(v.property for v in failures)

    assert judged([math.inf, -math.inf, 1.0]) == []
    assert judged([math.nan, -math.inf, 1.0]) == ["finite"]
    assert judged([math.inf, math.inf, 1.0]) == ["finite"]
    # The output's own type decides: a float32 output holds 65510 easily.
    failures, _ = judge_named(_Case(), {"y": np.array([math.inf, -math.inf, 1.0])}, exact, label="k",
                              element=lambda name, i: str(i), dtypes={"y": "float32"})
    assert [v.property for v in failures] == ["finite"]


def test_a_metamorphic_copy_beside_an_accepted_infinity_is_not_flagged():
    """One call rounds a value at 65510 (+- 40) past float16's range, the copy gives 65504: both
    are correct, so the copy's comparison leaves that element out; elsewhere it still compares."""
    exact = NamedExact({"y": np.array([65510.0, 1.0])}, {"y": np.array([40.0, 1e-3])},
                       {"y": np.ones(2, bool)})

    class _Case:
        family, dtype = "explicit", "float16"

    def compared(first, second):
        return judge_named_close("shift_invariance", {"y": np.array(first)}, {"y": np.array(second)},
                                 exact, exact, case=_Case(), label="k", element=lambda name, i: str(i),
                                 what="the copy")

    assert compared([math.inf, 1.0], [65504.0, 1.0]) is None
    assert compared([math.inf, 1.0], [65504.0, 1.5]) is not None
    # an infinity its exact value does not allow is still compared (and judged on its own)
    found = compared([32768.0, math.inf], [32768.0, 1.0])
    assert found is not None and found.output == "y"


# --- end to end: the attention backward with a gradient past float16's range -----------------------


def _overflow_case(c: float) -> AttentionBackwardCase:
    """Two keys of equal score (P = 1/2 each), q = 32768, v = (0, c), dout = 1: dS = (-c/4, c/4)
    and dk = scale dS q = (-8192 c, 8192 c), past float16's range for c = 8 (65536), inside it
    for c = 4 (32768)."""
    q = np.full((1, 1, 1, 1), 32768.0, F32)
    k = np.zeros((1, 1, 2, 1), F32)
    v = np.array([0.0, c], F32).reshape(1, 1, 2, 1)
    dout = np.ones((1, 1, 1, 1), F32)
    return AttentionBackwardCase(q, k, v, None, 1.0, dtype="float16", family="explicit", dout=dout)


def _rounded_exact(dout, q, k, v, mask, scale):
    """The exact gradients rounded to float16 as IEEE rounding does: past 65520, an infinity."""
    f = (np.asarray(a, np.float32) for a in (dout, q, k, v))
    ref = attention_backward_reference(*f, mask, scale)
    with np.errstate(over="ignore"):
        return tuple(a.astype(np.float16) for a in (ref.dq, ref.dk, ref.dv))


def _dk_through_float16(dout, q, k, v, mask, scale):
    """dk as scale (q (dout v)) / 4 in float16: the product q dout v overflows first, an infinity
    where the exact dk is in range (a bug); the other gradients exact."""
    dq, _, dv = _rounded_exact(dout, q, k, v, mask, scale)
    with np.errstate(over="ignore"):
        prod = (q[..., 0, 0] * dout[..., 0, 0] * v[..., 1, 0]).astype(np.float16)  # 32768 c
        dk1 = (prod / np.float16(4)).astype(np.float16)
    dk = np.stack([-dk1, dk1], axis=-1)[..., None].astype(np.float16)
    return dq, dk, dv


def _negated_dk(dout, q, k, v, mask, scale):
    dq, dk, dv = _rounded_exact(dout, q, k, v, mask, scale)
    return dq, -dk, dv


def _failures(fn, case) -> list[str]:
    target = target_from_callable(fn, op="attention_backward", dtype="float16")
    return sorted(v.property for v in evaluate(target, case).failures)


def test_a_gradient_rounded_past_float16s_range_to_inf_passes():
    case = _overflow_case(8.0)
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, None, case.scale)
    assert abs(ref.dk).max() == 65536.0
    assert np.isinf(_rounded_exact(*case.inputs())[1]).all()
    assert _failures(_rounded_exact, case) == []


def test_an_infinity_of_the_other_sign_is_caught():
    assert _failures(_negated_dk, _overflow_case(8.0)) == ["finite"]


def test_an_infinity_where_the_exact_gradient_is_in_range_is_caught():
    case = _overflow_case(4.0)
    _, dk, _ = _dk_through_float16(*case.inputs())
    assert np.isinf(dk).all()
    assert _failures(_dk_through_float16, case) == ["finite"]
    assert _failures(_rounded_exact, case) == []


# --- below float16's normal range: P's and dS's rounding there ----------------------------------


def _subnormal_gradients_case() -> AttentionBackwardCase:
    """Eight equal query rows, keys 0 and -13.71 (a weight of 1.1e-6, 18.6 units of float16's
    subnormal step 2^-24), v = (0, 1), dout = 1: dv, dk and dq of the small key are sums over the
    eight rows of P's and dS's float16 roundings there, 1e-5 to 1.5e-5, below the least normal."""
    q = np.ones((1, 1, 8, 1), F32)
    k = np.array([0.0, -13.7109375], F32).reshape(1, 1, 2, 1)
    v = np.array([0.0, 1.0], F32).reshape(1, 1, 2, 1)
    return AttentionBackwardCase(q, k, v, None, 1.0, dtype="float16", family="explicit",
                                 dout=np.ones((1, 1, 8, 1), F32))


def _ratios(case, drop) -> dict[str, float]:
    outs = flash_rounded(*case.inputs())
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, case.mask, case.scale)
    tol = attention_backward_tolerance(ref, dtype=case.dtype, declaration=ROUNDED, drop=drop)
    return {name: float(np.max(np.abs(got.astype(np.float64) - getattr(ref, name)) / getattr(tol, name)))
            for name, got in zip(("dq", "dk", "dv"), outs)}


def test_a_backward_rounding_p_and_ds_to_float16_needs_the_floor():
    case = _subnormal_gradients_case()
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, None, case.scale)
    assert 0 < abs(ref.dv[..., 1, 0]).max() < DTYPES["float16"].min_normal
    full, without = _ratios(case, frozenset()), _ratios(case, frozenset({"p_floor"}))
    assert max(full.values()) <= 1.0, f"the full bound: {full} [{case!r}]"
    # Each gradient needs it: dv through P's rounding, dq and dk through dS's.
    assert min(without.values()) > 1.0, f"without p_floor: {without} [{case!r}]"


def test_a_bad_backward_drop_is_named():
    case = _subnormal_gradients_case()
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, None, case.scale)
    with pytest.raises(ValueError, match="drop must be a frozenset of p_floor"):
        attention_backward_tolerance(ref, drop=frozenset({"scores"}))


@pytest.mark.parametrize("family", ["one_hot_dout", "dout_scale"])
def test_a_backward_rounding_p_and_ds_to_float16_passes_the_dout_families(family):
    """The families where the GPU's float16 backwards met float16's subnormal range (their
    gradients off by 1.05-3 of the bound without the floor; this kernel at seed 1 by 1.1-3.1).
    Not orthogonal_dout: see the next test."""
    report = normprops.hunt_kernel(flash_rounded, op="attention_backward", dtype="float16",
                                   families=[family], max_examples=30, seed=1, threads=16,
                                   p_dtype="float16")
    assert report.passed, report.failures[0].message if report.failures else report


def test_orthogonal_dout_takes_ds_past_float16s_range():
    """Why the float16 kernel that rounds dS to the storage type does not pass orthogonal_dout:
    that family's v may be near float16's largest values and dout the query row, and then the exact
    dS is past float16's overflow threshold, so the rounded dS is infinite and dq, whose exact value
    is 0 here, comes out 0 or NaN depending on how the matrix product adds inf - inf (the shrunk
    case of seed 1: NaN on a CPU without AVX-512, 0 in a direct call)."""
    row = np.array([-0.7036133, -1.265625, -0.6230469, 0.0413208, -2.3242188, -0.21875, -1.2460938,
                    -0.7324219], dtype=np.float16).astype(np.float32)
    key = np.array([0.9033203, 0.09399414, -0.74365234, -0.921875, -0.45776367, 0.22021484,
                    -1.0097656, -0.20922852], dtype=np.float16).astype(np.float32)
    value = np.array([37760, -45408, -40384, -23440, -7932, 9416, -43744, -58816], dtype=np.float32)
    q = dout = row.reshape(1, 1, 1, 8)
    k, v = np.stack([key, key]).reshape(1, 1, 2, 8), np.stack([value, -value]).reshape(1, 1, 2, 8)
    ref = attention_backward_reference(dout, q, k, v, None, 8 ** -0.5)
    assert not np.abs(ref.dq).any()  # the two keys' terms cancel exactly
    assert np.abs(ref.ds).max() > DTYPES["float16"].overflow  # 84528 > 65520
    with np.errstate(over="ignore"):
        assert np.isinf(ref.ds.astype(np.float16)).all()
