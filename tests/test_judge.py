"""Meta tests of the judge: hand-made outputs that must pass, and ones that must fail, with the
property, row, column and message the failure must carry."""

from __future__ import annotations

import re

import numpy as np
import pytest

from normprops.case import Case
from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.judge import Verdict, bits_equal, judge_close, judge_output
from normprops.oracles import reference, tolerance

F32 = np.float32


def _case(op: str, x, *, family: str = "ordinary", eps: float = 1e-5) -> Case:
    x = np.ascontiguousarray(np.array(x, dtype=F32))
    cols = x.shape[1]
    gamma = np.ones(cols, F32) if op != "softmax" else None
    beta = np.zeros(cols, F32) if op == "layernorm" else None
    return Case(op, family, x, gamma, beta, None if op == "softmax" else float(F32(eps)))


def _judge(case: Case, out: np.ndarray) -> tuple[list[Verdict], float]:
    ref = reference(case)
    tol = tolerance(case, ref, model=FOREIGN_ERROR_MODEL)
    return judge_output(case, out, ref, tol, label=f"{case.op}[hand]")


def _exact(case: Case) -> np.ndarray:
    return reference(case).z.astype(F32)


@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm"])
def test_correctly_rounded_output_passes(op: str) -> None:
    rng = np.random.default_rng(1)
    case = _case(op, rng.standard_normal((3, 37)))
    failures, worst = _judge(case, _exact(case))
    assert failures == []
    assert 0 <= worst < 0.1


def test_layernorm_error_is_located_and_formatted() -> None:
    case = _case("layernorm", [[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])
    out = _exact(case)
    out[1, 3] += F32(1e-3)
    failures, worst = _judge(case, out)
    (v,) = failures
    assert (v.property, v.row, v.col) == ("accuracy", 1, 3)
    assert v.ratio > 1 and worst == pytest.approx(v.ratio)
    assert re.fullmatch(
        r"layernorm\[hand\] ordinary accuracy: row 1 col 3 got -1\.3\d+ expected -1\.3416 \|err\| 0\.001\d* "
        r"> tol \S+ \(x\d\.?\d*e?\d*\)", v.message()), v.message()


def test_non_finite_output_fails_outright() -> None:
    case = _case("rmsnorm", [[1.0, 2.0, 3.0]])
    out = _exact(case)
    out[0, 2] = np.inf
    (v,) = _judge(case, out)[0]
    assert (v.property, v.row, v.col) == ("finite", 0, 2)
    assert "non-finite output inf where the exact result is 1.3887" in v.message()


def test_huge_family_failures_are_range_safety() -> None:
    case = _case("rmsnorm", [[3e19] * 1024], family="huge")
    out = np.zeros((1, 1024), F32)  # what F.rms_norm returns on the H200
    (v,) = _judge(case, out)[0]
    assert v.property == "range_safety"
    assert v.expected == pytest.approx(1.0)


def test_layernorm_past_accuracy_only_asks_for_finite() -> None:
    # kappa ~ 1e7 * sqrt(...): e1 > 0.25, so any finite output is accepted, a NaN is not.
    x = np.full((1, 4), 1e7, F32)
    x[0, 0] = F32(1e7 + 1)
    case = _case("layernorm", x, family="large_mean", eps=1e-12)
    ref = reference(case)
    tol = tolerance(case, ref, model=FOREIGN_ERROR_MODEL)
    assert tol.finite_only.all()
    assert judge_output(case, np.full_like(x, 5.0), ref, tol, label="ln")[0] == []
    out = np.full_like(x, np.nan)
    assert judge_output(case, out, ref, tol, label="ln")[0][0].property == "finite"


def test_nan_row_must_stay_nan_and_other_rows_are_judged() -> None:
    case = _case("softmax", [[0.0, np.nan, 1.0], [0.0, 1.0, 2.0]], family="nonfinite")
    good = _exact(case)
    good[0] = np.nan
    assert _judge(case, good)[0] == []
    leaked = good.copy()
    leaked[0, 0] = 0.25
    (v,) = _judge(case, leaked)[0]
    assert (v.property, v.row, v.col) == ("nan_propagation", 0, 0)


def test_rmsnorm_inf_row_accepts_ieee_limit() -> None:
    case = _case("rmsnorm", [[1.0, np.inf, -2.0], [1.0, 1.0, 1.0]], family="nonfinite")
    out = _exact(case)
    out[0] = [0.0, np.nan, -0.0]
    assert _judge(case, out)[0] == []
    out[0, 0] = 0.5
    assert _judge(case, out)[0][0].property == "nan_propagation"


@pytest.mark.parametrize("fill, ok", [(np.nan, True), (0.0, True), (0.5, False)])
def test_fully_masked_row_policy(fill: float, ok: bool) -> None:
    case = _case("softmax", [[-np.inf] * 4, [0.0, -np.inf, 1.0, 2.0]], family="masked")
    out = _exact(case)
    out[0] = fill
    if fill == 0.5:
        out[0, :2] = np.nan  # a mixture
    failures = _judge(case, out)[0]
    assert (failures == []) == ok
    if not ok:
        assert failures[0].property == "masked_rows"


def test_softmax_shape_properties() -> None:
    case = _case("softmax", [[0.0, 1.0, 2.0, 3.0]])
    out = _exact(case)
    swapped = out[:, ::-1].copy()
    props = {v.property for v in _judge(case, swapped)[0]}
    assert {"accuracy", "argmax"} <= props
    scaled = (out * F32(1.01)).astype(F32)
    assert "sum_to_one" in {v.property for v in _judge(case, scaled)[0]}
    negative = out.copy()
    negative[0, 0] = -1e-3
    assert "bounds" in {v.property for v in _judge(case, negative)[0]}


def test_softmax_bounds_allow_one_rounding_above_one() -> None:
    # QuACK's float32 softmax on a row one logit dominates (found at seed 2): y = e * rcp.approx(S)
    # with S = e gives 1 + 2^-23 at the largest logit. Rounding, not a bug; 1.01 is.
    x = [[9231.0166015625, 8231.1103515625, 8231.1103515625, 8231.1103515625],
         [8231.1103515625, 8231.1103515625, 8231.1103515625, 9231.0166015625]]
    case = _case("softmax", x, family="constant")
    out = _exact(case)
    assert out[0, 0] == 1
    out[0, 0] = out[1, 3] = np.nextafter(F32(1), F32(2))
    assert _judge(case, out)[0] == []
    out[0, 0] = F32(1.01)
    bounds = [v for v in _judge(case, out)[0] if v.property == "bounds"]
    assert bounds and "above 1 by more than its rounding" in bounds[0].reason


def test_subnormal_flush_is_accepted() -> None:
    # expf flushes results below FLT_MIN on the GPU: a zero where the exact value is subnormal passes.
    case = _case("softmax", [[0.0, -95.0, -200.0]])
    out = _exact(case)
    assert 0 < reference(case).z[0, 1] < 2.0**-126
    out[0, 1] = 0.0
    assert _judge(case, out)[0] == []


def test_bits_equal_treats_nans_alike_and_zeros_apart() -> None:
    a = np.array([np.nan, 0.0, 1.0], F32)
    b = np.array([np.float32(np.nan) * -1, -0.0, 1.0], F32)
    assert bits_equal(a, b).tolist() == [True, False, True]


def test_ignored_property_is_not_judged_but_others_are() -> None:

    from normprops.launch import target_from_callable
    from normprops.properties import evaluate

    calls = {"n": 0}

    def batch_dependent(x):
        # Correct values, but the last bit depends on the batch size; deterministic per shape.
        z = x.astype(np.float64)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        out = (e / e.sum(axis=1, keepdims=True)).astype(F32)
        calls["n"] += 1
        return np.nextafter(out, F32(2)) if x.shape[0] == 1 else out

    target = target_from_callable(batch_dependent, op="softmax")
    # Multiples of 1/8: an exact shift exists, so shift invariance runs too.
    case = _case("softmax", np.random.default_rng(0).integers(-16, 16, (3, 40)) / 8)
    assert evaluate(target, case).failures[0].property == "batch_invariance"
    exempt = target.declared(ignore=frozenset({"batch_invariance"}))
    assert evaluate(exempt, case).passed
    shifted_calls = calls["n"]
    evaluate(exempt, case)
    assert calls["n"] - shifted_calls >= 3  # determinism and shift invariance still ran


def _python_target(name: str, fn):
    from normprops.launch import target_from_callable

    return target_from_callable(fn, op="softmax", name=name)


def _softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(F32)


def test_stress_batch_tells_position_dependence_from_a_race() -> None:
    """In the tiled stress batch, copies of a row that differ within one launch are position
    dependence (batch_invariance, which a kernel may not promise); two launches of the same
    batch that differ are a race (determinism)."""
    from dataclasses import replace as dc_replace

    from normprops.properties import evaluate

    def by_position(x):  # odd positions of a big batch round differently; deterministic
        out = _softmax64(x)
        if x.shape[0] > 8:
            out[1::2] = np.nextafter(out[1::2], F32(2))
        return out

    launches = {"n": 0}

    def racy(x):  # every launch of a big batch differs from the one before
        out = _softmax64(x)
        launches["n"] += 1
        if x.shape[0] > 8 and launches["n"] % 2:
            out[-1] = np.nextafter(out[-1], F32(2))
        return out

    case = _case("softmax", np.random.default_rng(1).standard_normal((3, 40)))
    positional = dc_replace(_python_target("_np_positional", by_position), stress_rows=64)
    assert evaluate(positional, case).failures[0].property == "batch_invariance"
    assert evaluate(positional.declared(ignore=frozenset({"batch_invariance"})), case).passed
    race = dc_replace(_python_target("_np_racy", racy).declared(ignore=frozenset({"batch_invariance"})),
                      stress_rows=64)
    failures = evaluate(race, case).failures
    assert failures and failures[0].property == "determinism"


def test_a_stressed_target_is_called_five_times_an_example() -> None:
    """With a stress batch, determinism is judged inside it: the case, the batch twice, the middle
    row alone and the rows reversed plus one. Without one (a CPU target), the case is called
    again instead."""
    from dataclasses import replace as dc_replace

    from normprops.properties import evaluate

    shapes: list[tuple[int, int]] = []

    def counted(x):
        shapes.append(x.shape)
        return _softmax64(x)

    case = _case("softmax", np.random.default_rng(3).standard_normal((3, 40)))
    stressed = dc_replace(_python_target("_np_counted", counted), stress_rows=64)
    assert evaluate(stressed, case).passed
    # then the case shifted by a power of two (shift invariance), of the case's shape
    assert shapes[:5] == [(3, 40), (64, 40), (64, 40), (1, 40), (4, 40)] and shapes[5:] == [(3, 40)]
    shapes.clear()
    assert evaluate(dc_replace(stressed, stress_rows=0), case).passed
    assert shapes[:4] == [(3, 40), (3, 40), (1, 40), (4, 40)] and shapes[4:] == [(3, 40)]


def test_a_leak_from_the_next_row_is_caught_in_the_stress_batch() -> None:
    """A kernel whose row r reads a little of row r + 1 is right on the case only where the next
    row happens to match; the stress batch puts other rows next to each (the tiling wraps, the
    tail is reversed)."""
    from dataclasses import replace as dc_replace

    from normprops.properties import evaluate

    def leaky(x):
        out = _softmax64(x)
        nxt = np.vstack([x[1:], x[:1]])[:, :1].astype(F32)  # row r + 1's first entry, wrapping
        return np.where(nxt > 100, np.nextafter(out, F32(2)), out)

    x = np.random.default_rng(4).standard_normal((3, 40))
    x[:, 0] = [0.5, 200.0, 0.25]  # only row 0 sees a big neighbour (row 1) in the case itself
    case = _case("softmax", x)
    target = dc_replace(_python_target("_np_leaky", leaky), stress_rows=64)
    failures = evaluate(target, case).failures
    assert failures and failures[0].property == "batch_invariance"


def test_stress_order_starts_with_the_case_and_depends_on_the_width() -> None:
    from normprops.properties import STRESS_ELEMENTS, stress_order

    for rows in (1, 2, 3, 7, 20):
        order = stress_order(rows, 1000, 2048)
        assert len(order) == STRESS_ELEMENTS // 1000  # one shape per width: one compile
        assert order[:rows].tolist() == list(range(rows))
        assert order[-rows - 1:].tolist() == list(range(rows))[::-1] + [rows // 2]
        assert np.bincount(order, minlength=rows).min() >= 2
    wide = stress_order(40, 100_000, 2048)  # more rows than the elements allow: two copies each
    assert len(wide) == 81 and np.bincount(wide).min() == 2


def test_ratio_fit_is_the_worst_pair() -> None:
    from normprops.judge import ratio_fit

    rng = np.random.default_rng(7)
    a = rng.standard_normal((6, 40))
    t = rng.uniform(0.1, 2.0, (6, 40))
    judged = rng.random((6, 40)) < 0.8
    rho, hi, lo = ratio_fit(a, t, judged)
    for r in range(6):
        j = np.nonzero(judged[r])[0]
        pairs = (a[r, j][:, None] - a[r, j][None, :]) / (t[r, j][:, None] + t[r, j][None, :])
        assert rho[r] == pytest.approx(pairs.max(), rel=1e-12)
        assert (a[r, hi[r]] - a[r, lo[r]]) / (t[r, hi[r]] + t[r, lo[r]]) == pytest.approx(rho[r])


def _wide_softmax_case(cols: int = 16385) -> Case:
    # Two logits near the top and a long tail far below (the tail is judged too): ln S ~ 0.64.
    x = np.random.default_rng(5).standard_normal((2, cols)) - 20
    x[:, :2] = [0.0, -0.1]
    return _case("softmax", x)


def test_one_scale_per_row_passes_ratios_and_is_left_to_accuracy() -> None:
    # A row sum off by 1e-4 scales the whole row: ratios hold, accuracy and sum_to_one do not.
    case = _case("softmax", np.random.default_rng(6).standard_normal((2, 100)))
    out = (_exact(case) * F32(1 + 1e-4)).astype(F32)
    props = {v.property for v in _judge(case, out)[0]}
    assert "ratios" not in props and {"accuracy", "sum_to_one"} <= props


def test_per_element_exp_error_is_caught_by_ratios_at_any_width() -> None:
    case = _wide_softmax_case()
    ref = reference(case)
    out = _exact(case)
    top, near = 0, 1
    out[1, top] = F32(ref.z[1, top] * (1 + 1e-6))
    out[1, near] = F32(ref.z[1, near] * (1 - 1e-6))
    failures, worst = _judge(case, out)
    (v,) = failures
    assert (v.property, v.row) == ("ratios", 1) and {v.col} <= {top, near}
    assert v.ratio > 1 and worst < 0.1  # worst: the accuracy err/tol, the hunt's target
    assert f"y[{v.col}] / y[" in v.message() and "exp(x[" in v.message()
    # the same error is far inside the accuracy bound at this width
    tol = tolerance(case, ref, model=FOREIGN_ERROR_MODEL)
    assert np.abs(out[1, near] - ref.z[1, near]) < 0.1 * tol.tol[1, near]


def test_a_zero_where_the_exact_value_is_normal_breaks_ratios() -> None:
    case = _case("softmax", [[0.0, -1.0, -2.0, -3.0]])
    out = _exact(case)
    out[0, 3] = 0.0
    props = {v.property: v for v in _judge(case, out)[0]}
    assert props["ratios"].col in (0, 3) and props["ratios"].ratio == np.inf


@pytest.mark.parametrize("op, x, fill, ok", [
    pytest.param("layernorm", [[7.0, 7.0, 7.0]], "beta", True, id="ln-beta"),
    pytest.param("layernorm", [[7.0, 7.0, 7.0]], "beta+ulp", False, id="ln-off-by-an-ulp"),
    pytest.param("layernorm", [[7.0, 8.0, 7.0]], "garbage", True, id="ln-not-constant"),
    pytest.param("rmsnorm", [[0.0, 0.0]], "zeros", True, id="rms-zero-row"),
    pytest.param("rmsnorm", [[0.0, 0.0]], "tiny", False, id="rms-zero-row-not-zero"),
    pytest.param("rmsnorm", [[3.0, 3.0]], "garbage", True, id="rms-constant-not-asked"),
])
def test_exact_constant(op: str, x, fill: str, ok: bool) -> None:
    from normprops.judge import judge_exact_constant

    case = _case(op, x)
    beta = np.linspace(-1, 1, case.cols).astype(F32)
    case = case.replace(beta=beta) if op == "layernorm" else case
    out = {"beta": np.tile(beta, (case.rows, 1)),
           "beta+ulp": np.tile(np.nextafter(beta, F32(9)), (case.rows, 1)),
           "zeros": np.zeros_like(case.x), "tiny": np.full_like(case.x, 1e-30),
           "garbage": np.full_like(case.x, 0.5)}[fill]
    v = judge_exact_constant(case, out, label="ln[hand]")
    assert (v is None) == ok
    if not ok:
        assert v.property == "exact_constant" and v.row == 0 and "exactly" in v.reason


def test_unknown_opt_in_is_rejected_with_the_known_ones() -> None:

    from normprops.properties import evaluate

    target = _python_target("_np_opt_in", _softmax64).declared(opt_in=frozenset({"exact"}))
    with pytest.raises(ValueError,
                       match="opt_in: 'exact' is not a property; choose from range_safety, exact_constant"):
        evaluate(target, _case("softmax", [[0.0, 1.0]]))


def test_the_worst_ratio_leaves_out_what_is_not_judged() -> None:
    # A huge row's result judged under range safety: off by 1% (far past the bound).
    case = _case("rmsnorm", [[1e20, -1e20, 1e20, -1e20]], family="huge")
    ref = reference(case)
    tol = tolerance(case, ref, model=FOREIGN_ERROR_MODEL)
    out = (ref.z * 1.01).astype(F32)
    failures, worst = judge_output(case, out, ref, tol, label="rms")
    assert failures[0].property == "range_safety" and worst > 1e3
    # Not promised: neither reported (by evaluate) nor counted in the worst ratio the hunt steers by.
    assert judge_output(case, out, ref, tol, label="rms", skip=frozenset({"range_safety"}))[1] == 0.0
    assert judge_output(case, out, ref, tol, label="rms", skip=frozenset({"accuracy"}))[1] == worst


def test_a_ratio_just_past_one_reads_past_one() -> None:
    """A failing element at err/tol 1.004 read "(x1)", as if it had met its bound."""
    v = Verdict("softmax[k]", "accuracy", "ordinary", 0, 3, 0.25, 0.25, 1.004e-7, 1e-7, 1.004, "")
    assert v.message().endswith("> tol 1e-07 (x1.004)"), v.message()
    w = Verdict("softmax[k]", "accuracy", "ordinary", 0, 3, 0.25, 0.25, 3.9e-3, 1e-7, 3.9e4, "")
    assert w.message().endswith("(x3.9e4)"), w.message()


def test_a_copy_compared_with_the_original_is_not_called_expected() -> None:
    case = _case("softmax", [[1.0, 2.0, 3.0]])
    base = np.array([[0.25, 0.25, 0.5]], np.float32)
    other = base + np.float32(1e-3)
    v = judge_close("shift_invariance", base, other, np.full(base.shape, 1e-6), case=case, label="softmax[k]",
                    rows=np.array([True]), what="the copy is x + 3 (exact)")
    message = v.message()
    assert " copy 0.251 original 0.25 |err| " in message and "expected" not in message, message
    assert message.endswith("; the copy is x + 3 (exact)")


def test_a_softmax_output_of_zero_is_named_not_paired_with_itself() -> None:
    case = _case("softmax", [[0.0, 1.0, 2.0]])
    out = np.zeros((1, 3), F32)  # zeros where the exact results are not: no scale fits them
    failures, _ = _judge(case, out)
    (ratios,) = [v for v in failures if v.property == "ratios"]
    message = ratios.message()
    assert "] = 0 where the exact result is 0." in message and "no single scale of the row fits it" in message
    assert "got nan" not in message and " / y[" not in message, message
