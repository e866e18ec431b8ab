"""The gradient ops: contracts, exact references, bounds, families, verdicts by output, fixtures,
the CLI and the API."""

from __future__ import annotations

import io
import json
import math
import runpy
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import normprops
from normprops.case import Case
from normprops.dy_kinds import GRAD_FAMILIES
from normprops.errormodel import FOREIGN_ERROR_MODEL, ErrorModel
from normprops.errors import ContractError, FixtureError, UsageError
from normprops.examples import backward_correct as correct
from normprops.hunt import HuntConfig, hunt
from normprops.judge import Verdict
from normprops.launch import target_from_callable
from normprops.ops import BACKWARD_FAMILIES, OPS, is_backward
from normprops.oracles import grad_reference, grad_tolerance, row_depth
from normprops.properties import evaluate
from normprops.regressions import load_fixture, replay, save_fixture
from normprops.specs import KERNELS
from normprops.strategies import (
    Drawn,
    Extras,
    families_for,
    grad_case_from_fields,
    grad_cases,
    make_grad_case,
)
from tests.cli_harness import run

# The row ops' gradients (the fused loss's, a gradient of named arrays, has tests of its own).
GRADS = [op for op in OPS if is_backward(op) and OPS[op].named is None]
F32 = np.float32


def _case(op: str, family: str = "ordinary", *, rows: int = 3, cols: int = 7, seed: int = 1,
          dy_kind: str = "ordinary", dy_params: dict | None = None, x_family: str = "ordinary",
          x_params: dict | None = None, **kw) -> Case:
    x_params = x_params if x_params is not None else {"loc": 0.5, "scale": 1.0, "spikes": []}
    dy_params = dy_params if dy_params is not None else {"loc": 0.1, "scale": 1.0}
    extras = Extras(gamma_kind=kw.pop("gamma_kind", "random"), beta_kind=kw.pop("beta_kind", "random"),
                    eps=kw.pop("eps", None))
    return make_grad_case(op=op, family=family, rows=rows, cols=cols, seed=seed,
                          x=Drawn(x_family, x_params), dy=Drawn(dy_kind, dy_params), extras=extras, **kw)


# --- the ops and their families ---------------------------------------------------------------


def test_every_gradient_family_is_drawn_and_described() -> None:
    assert set(GRAD_FAMILIES) == set(BACKWARD_FAMILIES)
    for op in GRADS:
        assert set(families_for(op)) <= set(GRAD_FAMILIES), op
    assert "eps_scale" not in families_for("softmax_backward")
    assert "huge" in families_for("rmsnorm_backward")


@pytest.mark.parametrize(("op", "family"), [(op, f) for op in GRADS for f in families_for(op)])
def test_families_draw_cases_of_the_op(op: str, family: str) -> None:
    @settings(max_examples=8, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(grad_cases(op=op, family=family, max_cols=300))
    def check(case: Case) -> None:
        assert case.op == op and case.family == family
        assert case.dy.shape == case.x.shape and case.dy.dtype == np.float32
        assert np.isfinite(case.dy).all()
        if family == "tall":
            assert case.rows >= 64 and case.cols <= 64
        if family == "one_hot_dy":
            assert ((case.dy != 0).sum(axis=1) <= 1).all()
        if family == "nonfinite":
            assert not np.isfinite(case.x).all()
        if op == "softmax_backward" and family != "nonfinite":
            assert ((case.x >= 0) & (case.x <= 1)).all()  # x holds y, a softmax output

    check()


def test_orthogonal_dy_makes_the_projection_vanish() -> None:
    case = _case("rmsnorm_backward", "orthogonal_dy", cols=257, dy_kind="orthogonal",
                 dy_params={"scale": 1.0})
    ref = grad_reference(case)
    g = case.dy.astype(np.float64) * case.gamma.astype(np.float64)
    projection = np.abs(np.sum(g * ref.xhat, axis=1))
    assert (projection <= 1e-6 * np.sum(np.abs(g * ref.xhat), axis=1)).all()
    case = _case("softmax_backward", "orthogonal_dy", cols=257, dy_kind="orthogonal",
                 dy_params={"scale": 1.0})
    s = np.sum(case.dy.astype(np.float64) * case.x, axis=1)
    assert (np.abs(s) <= 1e-6 * np.sum(np.abs(case.dy * case.x), axis=1)).all()


# --- exact references --------------------------------------------------------------------------


def _forward(op: str, x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    if op == "rmsnorm_backward":
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma
    c = x - np.mean(x, axis=-1, keepdims=True)
    return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps) * gamma + beta


@pytest.mark.parametrize("op", ["rmsnorm_backward", "layernorm_backward"])
def test_norm_gradients_are_those_of_the_forward(op: str) -> None:
    """Central differences of the float64 forward: dx, dgamma and dbeta as the chain rule gives
    them (a missing projection term or eps in the wrong place would differ by far more)."""
    case = _case(op, cols=6, eps=1e-3)
    ref = grad_reference(case)
    x, dy = case.x.astype(np.float64), case.dy.astype(np.float64)
    gamma = case.gamma.astype(np.float64)
    beta = np.zeros_like(gamma) if case.beta is None else case.beta.astype(np.float64)
    h = 1e-6
    for r in range(case.rows):
        for c in range(case.cols):
            up, down = x[r].copy(), x[r].copy()
            up[c] += h
            down[c] -= h
            slope = (_forward(op, up, gamma, beta, case.eps) - _forward(op, down, gamma, beta,
                                                                          case.eps)) / (2 * h)
            assert np.dot(dy[r], slope) == pytest.approx(ref.z["dx"][r, c], rel=1e-6, abs=1e-8)
    y_hat = _forward(op, x, np.ones_like(gamma), np.zeros_like(beta), case.eps)
    np.testing.assert_allclose(ref.z["dgamma"][0], np.sum(dy * y_hat, axis=0), rtol=1e-12)
    if op == "layernorm_backward":
        np.testing.assert_allclose(ref.z["dbeta"][0], np.sum(dy, axis=0), rtol=1e-12)


def test_softmax_gradient_is_the_jacobian_product() -> None:
    case = _case("softmax_backward", cols=5)
    ref = grad_reference(case)
    y, dy = case.x.astype(np.float64), case.dy.astype(np.float64)
    for r in range(case.rows):
        jacobian = np.diag(y[r]) - np.outer(y[r], y[r])
        np.testing.assert_allclose(ref.z["dx"][r], jacobian @ dy[r], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("op", "family"), [(op, f) for op in GRADS for f in families_for(op)
                                             if f in ("cancelling_dy", "large_mean", "tiny", "tall")])
def test_float64_agrees_with_mpmath(op: str, family: str) -> None:
    @settings(max_examples=5, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(grad_cases(op=op, family=family, max_cols=40))
    def check(case: Case) -> None:
        fast, exact = grad_reference(case), grad_reference(case, oracle="mpmath")
        tol = grad_tolerance(case, exact, model=FOREIGN_ERROR_MODEL)
        for name, z in exact.z.items():
            judged = np.isfinite(z) & np.isfinite(tol.tol[name])
            assert (np.abs(fast.z[name] - z)[judged] <= 1e-6 * tol.tol[name][judged]).all(), name

    check()


# --- bounds ------------------------------------------------------------------------------------


def test_row_depth_follows_the_declared_reduction() -> None:
    model = ErrorModel(threads=32)
    assert row_depth(model, 1024, "blocks") == 32 - 1 + 5
    assert row_depth(model, 1024, "sequential") == 1023
    assert row_depth(model, 1024, "tree") == 10 + 18
    with pytest.raises(ValueError, match="row_reduction must be one of"):
        row_depth(model, 4, "pairwise")


def test_the_bound_scales_with_the_terms_that_cancel() -> None:
    """Nearly constant dy: dx is tiny, the bound stays on the scale of |dy| (what a correct float32
    kernel loses), far above |dx| times u."""
    case = _case("softmax_backward", "cancelling_dy", cols=64, dy_kind="cancelling",
                 dy_params={"level": 10.0, "slope": 0.0, "noise": 1e-6})
    ref = grad_reference(case)
    tol = grad_tolerance(case, ref, model=FOREIGN_ERROR_MODEL).tol["dx"]
    y = case.x.astype(np.float64)
    assert (tol >= 10 * 2.0**-24 * y * 10).all()
    assert (tol > 2.0**-24 * np.abs(ref.z["dx"]) * 1e3).any()


def test_a_sequential_row_sum_needs_its_declaration() -> None:
    """dgamma summed row after row is judged with k_R = R - 1 when declared, tighter otherwise."""
    case = _case("rmsnorm_backward", "tall", rows=1000, cols=4, x_family="constant",
                 x_params={"pattern": "constant", "value": 3.0, "spike": 0.0, "position": 0},
                 dy_kind="ordinary", dy_params={"loc": 1.0, "scale": 0.0})
    ref = grad_reference(case)
    blocks = grad_tolerance(case, ref, model=FOREIGN_ERROR_MODEL).tol["dgamma"]
    running = grad_tolerance(case, ref, model=FOREIGN_ERROR_MODEL,
                             row_reduction="sequential").tol["dgamma"]
    assert (running > 10 * blocks).all()


def test_an_rstd_the_forward_accepts_is_accepted_in_dx() -> None:
    """A Welford variance (PyTorch's layer norms, CPU and CUDA) leaves rstd off by O(k u kappa)
    relative, which the forward's bound accepts (its e1 |y| term); dx is that rstd times its
    terms, so its bound accepts the same rstd. The row is from a tall hunt of torch's CPU layer norm
    backward (kappa 144, one-hot dy), whose saved rstd was 52 u off."""
    from normprops.oracles import reference, tolerance

    x = np.array([[1.0016100406646729, 0.9941447377204895, 0.9865878224372864]], dtype=F32)
    dy = np.array([[0.0, 1.0, 0.0]], dtype=F32)
    case = _case("layernorm_backward", rows=1, cols=3).replace(
        x=x, dy=dy, gamma=np.ones(3, F32), beta=np.zeros(3, F32), eps=float(F32(1e-5)))
    ref = grad_reference(case)
    k = FOREIGN_ERROR_MODEL.k(case.cols)
    e1 = (k + 4) * 2.0**-24 * ref.kappa[0, 0]
    rstd = ref.rstd[0, 0] * (1 + e1 / 2)
    xd = x[0].astype(np.float64) - np.mean(x[0].astype(np.float64))
    xhat = xd * rstd
    forward = case.replace(op="layernorm", dy=None)
    forward_tol = tolerance(forward, reference(forward), model=FOREIGN_ERROR_MODEL).tol[0]
    assert (np.abs(xhat - reference(forward).z[0]) <= forward_tol).all()
    g = dy[0].astype(np.float64)
    dx = rstd * (g - np.mean(g) - xhat * np.mean(g * xhat))
    tol = grad_tolerance(case, ref, model=FOREIGN_ERROR_MODEL).tol["dx"][0]
    assert (np.abs(dx - ref.z["dx"][0]) <= tol).all()


def _welford_f32(row: np.ndarray) -> tuple[np.float32, np.float32]:
    mean, m2 = row[0], F32(0)
    for i, v in enumerate(row[1:], start=2):
        delta = v - mean
        mean = mean + delta / F32(i)
        m2 = m2 + delta * (v - mean)
    return mean, m2 / F32(len(row))


def _layernorm_backward_welford(dy, x, gamma, beta, eps):
    """float32 throughout, statistics by Welford's update (as PyTorch's are), dgamma and dbeta
    running sums."""
    stats = [_welford_f32(row) for row in x]
    mean = np.array([[m] for m, _ in stats], F32)
    r = F32(1) / np.sqrt(np.array([[v] for _, v in stats], F32) + F32(eps))
    with np.errstate(all="ignore"):
        xhat = (x - mean) * r
        g = dy * gamma
        n = F32(x.shape[1])
        dx = r * (g - g.sum(axis=1, keepdims=True, dtype=F32) / n
                  - xhat * (g * xhat).sum(axis=1, keepdims=True, dtype=F32) / n)
        return dx, (dy * xhat).sum(axis=0, dtype=F32), dy.sum(axis=0, dtype=F32)


def test_a_row_past_the_forwards_digits_leaves_dgamma_finite_only() -> None:
    """Two values an ulp apart at 4.9e6 (kappa 2e7, e1 = 10): their float32 Welford variance is 0,
    so the row's xhat is 79 times too large, and no bound on its dgamma term holds. As for dx past
    e1 = 0.25, dgamma is then asked to be finite, and a non-finite one still fails. A tall hunt of
    PyTorch's CPU layer norm backward failed on such rows (err/tol 1.1 to 1.5)."""
    x = np.array([[4869675.5, 4869675.0], [4869675.0, 4869672.5]], F32)
    dy = np.array([[-0.9008724, -0.9008724], [1.4275078, 1.4275078]], F32)
    case = _case("layernorm_backward", rows=2, cols=2).replace(
        x=x, dy=dy, gamma=np.ones(2, F32), beta=np.zeros(2, F32), eps=float(F32(1e-5)))
    assert _welford_f32(x[0])[1] == 0
    target = target_from_callable(_layernorm_backward_welford, op="layernorm_backward",
                                  row_reduction="sequential")
    assert evaluate(target, case).passed

    def infinite_dgamma(dy, x, gamma, beta, eps):
        dx, dgamma, dbeta = _layernorm_backward_welford(dy, x, gamma, beta, eps)
        return dx, np.full_like(dgamma, np.inf), dbeta

    found = evaluate(target_from_callable(infinite_dgamma, op="layernorm_backward"), case).failures
    assert [(v.property, v.output) for v in found] == [("finite", "dgamma")]

    def signed_infinite_dgamma(dy, x, gamma, beta, eps):
        # the infinities of the exact values' signs: where the bound has no digits left (an
        # infinite tolerance) only a finite dgamma is accepted, whatever the infinity's sign
        dx, dgamma, dbeta = _layernorm_backward_welford(dy, x, gamma, beta, eps)
        x64 = x.astype(np.float64)
        xhat = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + eps)
        exact = (dy.astype(np.float64) * xhat).sum(0)
        return dx, np.copysign(np.inf, exact).astype(dgamma.dtype), dbeta

    found = evaluate(target_from_callable(signed_infinite_dgamma, op="layernorm_backward"), case).failures
    assert [(v.property, v.output) for v in found] == [("finite", "dgamma")]


# --- the contract ------------------------------------------------------------------------------


def test_a_wrong_number_of_outputs_is_one_clear_line() -> None:
    target = target_from_callable(lambda dy, x, gamma, eps: dy.copy(), op="rmsnorm_backward")
    with pytest.raises(ContractError, match=r"^returned 1 array; rmsnorm_backward returns \(dx, dgamma\)$"):
        target.run(_case("rmsnorm_backward"))
    target = target_from_callable(lambda dy, y: (dy, dy), op="softmax_backward")
    with pytest.raises(ContractError, match=r"^returned 2 arrays; softmax_backward returns dx$"):
        target.run(_case("softmax_backward"))


def test_a_dgamma_of_the_wrong_shape_is_named() -> None:
    target = target_from_callable(lambda dy, x, gamma, eps: (dy.copy(), dy.copy()),
                                  op="rmsnorm_backward")
    with pytest.raises(ContractError, match=r"^dgamma is numpy.ndarray, dtype float32, shape \(3, 7\), "
                                            r"device cpu; expected a numpy float32 array of shape \(7,\)$"):
        target.run(_case("rmsnorm_backward"))


def test_a_verdict_names_its_output() -> None:
    verdict = Verdict("rmsnorm_backward[k]", "accuracy", "tall", None, 17, 1.5, 1.25, 0.25, 0.01,
                      25.0, "", output="dgamma")
    assert verdict.message().startswith("rmsnorm_backward[k] tall accuracy: dgamma[col 17]: got 1.5")
    verdict = replace(verdict, output="dx", row=2)
    assert "accuracy: dx[row 2 col 17]: got" in verdict.message()


# --- properties --------------------------------------------------------------------------------


def _rms_with_f64_dgamma(dy, x, gamma, eps):
    dx, _ = correct.rmsnorm_backward_f32(dy, x, gamma, eps)
    return dx, correct.rmsnorm_backward_f64(dy, x, gamma, eps)[1]


def test_a_dgamma_error_is_reported_by_name() -> None:
    def off_by_a_percent(dy, x, gamma, eps):
        dx, dgamma = correct.rmsnorm_backward_f32(dy, x, gamma, eps)
        return dx, dgamma * F32(1.01)

    target = target_from_callable(off_by_a_percent, op="rmsnorm_backward")
    result = hunt(target, family="ordinary", config=HuntConfig(max_examples=50, seed=0))
    assert result.properties == ("accuracy",)
    assert " accuracy: dgamma[col " in result.failure.message()


def test_a_poisoned_row_must_stay_non_finite_and_others_untouched() -> None:
    def zeroes_nan(dy, y):
        return np.nan_to_num(correct.softmax_backward_f32(dy, y), nan=0.0)

    target = target_from_callable(zeroes_nan, op="softmax_backward")
    result = hunt(target, family="nonfinite", config=HuntConfig(max_examples=50, seed=0))
    assert result.properties == ("nan_propagation",)
    assert target_from_callable(correct.softmax_backward_f32, op="softmax_backward") is not None
    clean = hunt(target_from_callable(correct.softmax_backward_f32, op="softmax_backward"),
                 family="nonfinite", config=HuntConfig(max_examples=50, seed=0))
    assert clean.passed, clean.failure.message()


def test_batch_invariance_of_dx() -> None:
    def batch_dependent(dy, y):
        dx = correct.softmax_backward_f32(dy, y)
        return correct.softmax_backward_f64(dy, y) if dy.shape[0] == 1 else dx

    target = target_from_callable(batch_dependent, op="softmax_backward")
    result = hunt(target, family="ordinary", config=HuntConfig(max_examples=50, seed=0))
    assert result.properties == ("batch_invariance",)
    assert "dx[row" in result.failure.message()


def test_row_order_is_judged_only_when_promised() -> None:
    target = target_from_callable(correct.rmsnorm_backward_f32, op="rmsnorm_backward")
    config = HuntConfig(max_examples=60, seed=0)
    assert hunt(target, family="tall", config=config).passed
    promised = hunt(target.declared(opt_in=frozenset({"row_order"})), family="tall", config=config)
    assert promised.properties == ("row_order",)
    assert "row_order: dgamma[col" in promised.failure.message()
    # A column sum in float64, rounded once, does not depend on the order of the rows.
    exact = target_from_callable(_rms_with_f64_dgamma, op="rmsnorm_backward", opt_in=("row_order",))
    assert hunt(exact, family="tall", config=config).passed


def test_a_gradient_evaluation_needs_no_forward_machinery() -> None:
    target = target_from_callable(correct.layernorm_backward_f32, op="layernorm_backward")
    evaluation = evaluate(target, _case("layernorm_backward", rows=4, cols=33))
    assert evaluation.passed and 0 < evaluation.worst_ratio < 1


# --- fixtures ----------------------------------------------------------------------------------


def test_a_gradient_fixture_round_trips_and_replays(tmp_path: Path) -> None:
    target = target_from_callable(
        lambda dy, x, gamma, eps: (correct.rmsnorm_backward_f32(dy, x, gamma, eps)[0] * F32(2),
                                   correct.rmsnorm_backward_f32(dy, x, gamma, eps)[1]),
        op="rmsnorm_backward", name="doubled")
    result = hunt(target, family="ordinary", config=HuntConfig(max_examples=20, seed=0))
    finding = result.findings[0]
    path = save_fixture(finding, target=target, directory=tmp_path)
    fixture = load_fixture(path)
    assert np.array_equal(fixture.minimal.dy, finding.minimal.dy)
    assert np.array_equal(fixture.minimal.x, finding.minimal.x)
    assert np.array_equal(fixture.minimal.gamma, finding.minimal.gamma)
    assert replay(target, fixture)[0].property == "accuracy"
    good = target_from_callable(correct.rmsnorm_backward_f32, op="rmsnorm_backward")
    assert replay(good, fixture) == []
    doc = json.loads(path.read_text())
    del doc["minimal"]["dy"]
    path.write_text(json.dumps(doc))
    with pytest.raises(FixtureError, match="rmsnorm_backward needs dy"):
        load_fixture(path)


# --- CLI and API -------------------------------------------------------------------------------

USER_MODULE_NAME = "mygrads"
USER_MODULE = textwrap.dedent("""
    from normprops.examples.backward_correct import rmsnorm_backward_f32, softmax_backward_f32

    def rms_grad(dy, x, gamma, eps):
        return rmsnorm_backward_f32(dy, x, gamma, eps)

    def rms_dx_only(dy, x, gamma, eps):
        return rmsnorm_backward_f32(dy, x, gamma, eps)[0]

    def softmax_grad(dy, y):
        return softmax_backward_f32(dy, y)
""")


def test_cli_hunts_a_gradient(user_module: str) -> None:
    code, out, err = run("hunt", "--op", "rmsnorm_backward", "--impl", f"{user_module}:rms_grad",
                         "--families", "ordinary,tall", "--max-examples", "20", "--seed", "0",
                         "--no-fixtures")
    assert code == 0, out + err
    code, out, err = run("hunt", "--op", "rmsnorm_backward", "--impl", f"{user_module}:rms_dx_only",
                         "--families", "ordinary", "--max-examples", "20", "--seed", "0",
                         "--fixtures-dir", "fx")
    assert code == 1
    assert "contract: returned 1 array; rmsnorm_backward returns (dx, dgamma)" in out
    code, out, err = run("replay", "--op", "rmsnorm_backward", "--impl", f"{user_module}:rms_grad",
                         "--fixtures-dir", "fx")
    assert code == 0, out + err


def test_cli_takes_the_row_reduction(user_module: str) -> None:
    code, out, err = run("hunt", "--op", "softmax_backward", "--impl", f"{user_module}:softmax_grad",
                         "--families", "tall", "--max-examples", "10", "--seed", "0",
                         "--row-reduction", "sequential", "--no-fixtures")
    assert code == 0, out + err
    code, out, err = run("hunt", "--op", "softmax_backward", "--impl", f"{user_module}:softmax_grad",
                         "--row-reduction", "pairwise")
    assert code == 2 and "--row-reduction" in err


def test_help_shows_the_gradient_signatures_and_the_row_reduction(capsys: pytest.CaptureFixture) -> None:
    assert run("hunt", "--help")[0] == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "--row-reduction {blocks,sequential,tree}" in shown
    assert "rmsnorm_backward fn(dy, x, gamma, eps) -> (dx, dgamma)" in shown


def test_the_api_hunts_a_gradient(tmp_path: Path) -> None:
    report = normprops.hunt_kernel(correct.layernorm_backward_saved_stats, op="layernorm_backward",
                                   families=["ordinary", "tall"], max_examples=20, seed=0,
                                   row_reduction="sequential")
    assert report.passed
    assert report.targets[0]["row_reduction"] == "sequential"
    with pytest.raises(AssertionError, match=r"contract: returned 1 array; layernorm_backward "
                                             r"returns \(dx, dgamma, dbeta\)"):
        normprops.assert_robust(lambda dy, x, gamma, beta, eps: dy, op="layernorm_backward",
                                families="ordinary", max_examples=5, seed=0)
    with pytest.raises(ValueError, match="row_reduction must be one of blocks, sequential, tree"):
        normprops.hunt_kernel(correct.layernorm_backward_f32, op="layernorm_backward",
                              row_reduction="pairwise")


def test_torch_gradients_take_tensors() -> None:
    pytest.importorskip("torch", reason="torch is not installed here")
    from normprops.backends import grads

    # Families where none of the three has a known bug on the CPU (the registry's entries), and
    # the row sums declared as the entries declare them: PyTorch's CPU norms add each thread's
    # rows in turn, then the threads' buffers, so the order changes with the thread count.
    for op, fn in (("softmax_backward", grads.torch_softmax_backward),
                   ("rmsnorm_backward", grads.torch_rmsnorm_backward),
                   ("layernorm_backward", grads.torch_layernorm_backward)):
        report = normprops.hunt_kernel(fn, op=op, framework="torch", device="cpu",
                                       families="ordinary,orthogonal_dy,one_hot_dy", max_examples=30,
                                       seed=0, ignore=["batch_invariance"],
                                       row_reduction="blocks" if op == "softmax_backward" else "sequential")
        assert report.passed, [f.message for f in report.failures]


def test_a_width_hint_moves_dy_with_the_rows() -> None:
    def even_only(dy, y):
        if y.shape[1] % 2 or dy.shape != y.shape:
            raise ValueError(f"odd widths are not taken: dy {dy.shape}, y {y.shape}")
        return correct.softmax_backward_f32(dy, y)

    report = normprops.hunt_kernel(even_only, op="softmax_backward", families="ragged",
                                   max_examples=30, seed=0)
    assert [f.property for f in report.failures] == ["contract"]
    assert any("--cols-multiple-of 2" in hint for hint in report.hints), report.hints


def test_dbeta_keeps_room_at_the_worst_rounding_of_a_row_sum() -> None:
    """1 + 2^-24 summed in float32 rounds by exactly u times the sum: the first-order bound
    k_R u sum|dy| would sit at err/tol 1; the bound keeps two roundings of room."""
    case = _case("layernorm_backward", rows=2, cols=3)
    dy = np.array([[1.0, 1.0, 1.0], [2.0**-24, 2.0**-24, 2.0**-24]], dtype=F32)
    case = case.replace(dy=dy)
    ref = grad_reference(case)
    tol = grad_tolerance(case, ref, model=FOREIGN_ERROR_MODEL, row_reduction="sequential")
    err = np.abs((dy[0] + dy[1]).astype(np.float64) - ref.z["dbeta"][0])
    assert (err == 2.0**-24).all()
    assert (err / tol.tol["dbeta"][0] <= 0.5).all()


def test_dgamma_accepts_dy_times_x_rounded_below_flt_min_before_rstd() -> None:
    """PyTorch's CUDA RMS norm backward forms dy x before scaling by rstd: with x and dy tiny the
    product is subnormal, and its absolute rounding grows by rstd (2896 here). The case is the
    shrunk one of its ``tiny`` hunt on an H200, where the GPU gave 4.126615e-37 (err/tol 1.2
    before the floor took rstd in); the same order in numpy gives 4.126616e-37."""
    x = np.array([[1.2573022122287061e-21], [-1.3210486357190995e-21]], F32)
    dy = np.array([[1.029676769107353e-20], [-9.805271672937439e-20]], F32)
    case = _case("rmsnorm_backward", rows=2, cols=1).replace(
        x=x, dy=dy, gamma=np.ones(1, F32), eps=float(F32(2.0**-23)))
    ref = grad_reference(case)
    rstd = F32(1) / np.sqrt(np.mean(x * x, axis=1, keepdims=True, dtype=F32) + F32(case.eps))
    tol = grad_tolerance(case, ref, model=FOREIGN_ERROR_MODEL, row_reduction="sequential")
    for dgamma in (np.sum((dy * x) * rstd, axis=0, dtype=F32), np.sum(dy * (x * rstd), axis=0, dtype=F32)):
        assert (np.abs(dgamma - ref.z["dgamma"][0]) <= tol.tol["dgamma"][0]).all()
    # Both GPU results of the hunt: the shrunk case's and the worst seen's share of the floor.
    assert np.abs(4.126615e-37 - ref.z["dgamma"][0]) <= tol.tol["dgamma"][0]


def test_dx_accepts_a_subnormal_xhat_rounded_by_tiny() -> None:
    """A normalized value below FLT_MIN rounds absolutely whatever rstd is (tiny / 2 correctly
    rounded, about 2 tiny through an approximate division), and the projection multiplies that by
    ``rstd mean(g xhat)``. ``torch.compile``'s RMS norm backward on
    an H200 (its ``tall`` hunt): rows of FLT_MIN with one larger entry, rstd 0.011 and 0.0029,
    where the GPU's dx is about one ``tiny`` of xhat off (err/tol 2.1 and 9.4 before the floor took
    xhat's own rounding in)."""
    spec = next(k for k in KERNELS if k.name == "compiled.rms_norm.backward-f32")
    least = float(np.finfo(F32).tiny)  # FLT_MIN
    rows = (  # x (FLT_MIN but the last), dy (one-hot at the last), gamma, the GPU's dx[0]
        ([least, least, 153.0], 1.0, [1257.30224609375, -1321.048583984375, 6404.2265625],
         -5.570182415168113e-39),
        ([least] * 6 + [926.4866943359375], 63.095733642578125,
         [1257.30224609375, -1321.048583984375, 6404.2265625, 1049.001220703125,
          -5356.69384765625, 3615.950439453125, 13040.0], -2.980897864990631e-38),
    )
    for x, last_dy, gamma, gpu in rows:
        cols = len(x)
        dy = np.zeros((1, cols), F32)
        dy[0, -1] = last_dy
        case = _case("rmsnorm_backward", rows=1, cols=cols).replace(
            x=np.array([x], F32), dy=dy, gamma=np.array(gamma, F32), eps=float(F32(2.0**-23)))
        ref = grad_reference(case)
        tol = grad_tolerance(case, ref, model=spec.error_model, row_reduction=spec.row_reduction)
        exact, bound = ref.z["dx"][0, 0], tol.tol["dx"][0, 0]
        assert abs(gpu - exact) <= bound, (gpu, exact, bound)
        assert _decomposed_rms_norm_dx(case)[0, 0] == pytest.approx(gpu, rel=1e-6)
        # The room is about 4 (C + 1) tiny of xhat (xhat's own rounding and that of xhat / C,
        # which the row's sum multiplies), no more: xhat_0 off by 8 (C + 1) tiny is caught.
        per_tiny_of_xhat = 2.0**-149 * abs(exact / (x[0] * ref.rstd[0, 0]))
        assert 8 * (cols + 1) * per_tiny_of_xhat > bound


def _decomposed_rms_norm_dx(case: Case) -> np.ndarray:
    """dx in float32 in the order of PyTorch's decomposition of ``_fused_rms_norm_backward``,
    which Inductor compiles: ``(g - (xhat / C) sum(xhat g)) rstd`` with ``g = dy gamma``."""
    x, cols = case.x, F32(case.cols)
    rstd = F32(1) / np.sqrt(np.mean(x * x, axis=1, keepdims=True, dtype=F32) + F32(case.eps))
    g = case.dy * case.gamma[None, :]
    xhat = x * rstd
    return (g - (xhat / cols) * np.sum(xhat * g, axis=1, keepdims=True, dtype=F32)) * rstd


def test_dx_accepts_xhat_over_c_rounded_below_flt_min_then_scaled_by_the_rows_sum() -> None:
    """Inductor's RMS norm backward divides xhat by C before multiplying by the row's
    ``sum(g xhat)``. Where ``xhat_j / C`` lies below FLT_MIN its rounding is absolute, and
    ``rstd sum(g xhat)`` multiplies it. The case is the one ``torch.compile``'s RMS norm backward
    failed in ``cancelling_dy`` on an H200 (err/tol 1.02 before the floor took C in): x_0 = FLT_MIN
    in a row reaching -100, dy_0 = 3.9e-39, where the GPU gave 1.1995e-42 for 1.2166e-42, as the
    same order does in numpy. Where the projection's term is not below FLT_MIN, losing it to an
    underflowing ``xhat / C`` is still an error."""
    spec = next(k for k in KERNELS if k.name == "compiled.rms_norm.backward-f32")

    def judged(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ref = grad_reference(case)
        tol = grad_tolerance(case, ref, model=spec.error_model, row_reduction=spec.row_reduction)
        return _decomposed_rms_norm_dx(case), ref.z["dx"], tol.tol["dx"]

    case = make_grad_case(
        op="rmsnorm_backward", family="cancelling_dy", rows=2, cols=75, seed=0,
        x=Drawn("wide_span", {"top": float(np.finfo(F32).tiny), "span": 100.0, "position": 0}),
        dy=Drawn("cancelling", {"level": 9.646616199111993, "slope": 2.0, "noise": 0.1}),
        extras=Extras(eps=float(F32(2.0**-23))))
    replica, exact, bound = judged(case)
    assert float(replica[0, 0]) == pytest.approx(1.1995e-42, rel=1e-4)
    error = abs(float(replica[0, 0]) - exact[0, 0])
    assert error > 12 * 2.0**-149  # past the room the bound had before
    assert (np.abs(replica - exact) <= bound).all()
    # A row of 4096 at +-1000 with dy = 1e6 sign(x), and x_0 = 3.6e-38: xhat_0 / C is 6.3 tiny
    # and x_0's projection term is -3.6e-38, in the normal range. This order rounds xhat_0 / C to
    # 6 tiny, 4 % of the term (err/tol 56), and that is caught.
    x = np.where(np.arange(4096) % 2 == 0, 1000.0, -1000.0).astype(F32)[None, :]
    dy = (1e6 * np.sign(x)).astype(F32)
    x[0, 0], dy[0, 0] = 3.6e-38, 0.0
    case = _case("rmsnorm_backward", rows=1, cols=4096).replace(
        x=x, dy=dy, gamma=np.ones(4096, F32), eps=1e-6)
    replica, exact, bound = judged(case)
    assert abs(exact[0, 0]) > np.finfo(F32).tiny
    assert abs(float(replica[0, 0]) - exact[0, 0]) > 10 * bound[0, 0]


def test_inductors_order_loses_a_normal_dx_to_xhat_over_c_below_flt_min() -> None:
    """torch.compile's RMS norm backward, ``one_hot_dy`` (docs/ecosystem.md, finding 35): x_32 =
    FLT_MIN in a row of rms 10.7, dy one-hot at column 0, gamma_0 1.58e4. ``xhat_32 / C`` is 3.3e-41, below
    FLT_MIN, and its absolute rounding (up to tiny / 2) is multiplied by ``rstd sum(g xhat)`` = 3210
    into dx_32 = -1.0733e-37, which is in float32's normal range: Inductor's order is off by 2e-5
    of it (the H200 gave -1.07327176e-37 for -1.07329308e-37, err/tol 1.07). Multiplying by the
    row's sum before dividing by C, or dividing the sum by C first, keeps the digits (err/tol below
    0.1), so the bound is met by the same arithmetic in another order: the entry's known bug."""
    spec = next(k for k in KERNELS if k.name == "compiled.rms_norm.backward-f32")
    assert spec.expectation("one_hot_dy") == "bug"
    case = load_fixture(Path(normprops.__file__).parent / "known"
                        / "compiled.rms_norm.backward-f32-one_hot_dy.json").minimal
    ref = grad_reference(case)
    bound = grad_tolerance(case, ref, model=spec.error_model, row_reduction=spec.row_reduction).tol["dx"]
    x, cols = case.x, F32(case.cols)
    rstd = F32(1) / np.sqrt(np.mean(x * x, axis=1, keepdims=True, dtype=F32) + F32(case.eps))
    g = case.dy * case.gamma[None, :]
    xhat = x * rstd
    row_sum = np.sum(xhat * g, axis=1, keepdims=True, dtype=F32)
    inductor = _decomposed_rms_norm_dx(case)
    assert float(inductor[1, 32]) == pytest.approx(-1.07327176e-37, rel=1e-6)
    assert abs(ref.z["dx"][1, 32]) > np.finfo(F32).tiny
    assert np.max(np.abs(inductor - ref.z["dx"]) / bound) > 1
    for other in ((g - (xhat * row_sum) / cols) * rstd, (g - xhat * (row_sum / cols)) * rstd):
        assert np.max(np.abs(other - ref.z["dx"]) / bound) < 0.1

def _autograd_rms_norm_dx(x: np.ndarray, dy: np.ndarray, eps: float) -> np.ndarray:
    """dx of ``x * rsqrt(mean(x^2) + eps)`` (gamma = 1) in float32, in autograd's order: rsqrt's
    derivative ``-0.5 rstd^3`` scales ``sum(dy x)``, the mean's divides it by C, and x^2's
    multiplies it by ``2 x``."""
    cols = F32(x.shape[1])
    rstd = F32(1) / np.sqrt(np.mean(x * x, axis=1, keepdims=True, dtype=F32) + F32(eps))
    scalar = ((np.sum(dy * x, axis=1, keepdims=True, dtype=F32) * F32(-0.5)) * rstd**3) / cols
    return dy * rstd + (scalar * F32(2)) * x


def test_dx_accepts_the_projections_subnormal_scalar_scaled_by_x() -> None:
    """autograd's RMS norm forms the projection's scalar ``rstd^3 mean(g x)`` and multiplies it by
    x_j. Here the scalar is -5.9e-42, below FLT_MIN, so its roundings are absolute and x_j = 14
    multiplies them: dx[0, 0] is 8.3181e-41 where 8.3165e-41 is exact, about 12 tiny off, and the
    term is itself below FLT_MIN. The case is the shrunk one of PyTorch's CPU RMS norm backward in
    ``orthogonal_dy`` on an H200 (err/tol 1.4 before the floor took x_j in). Where the term is not
    below FLT_MIN, losing it is a bug (docs/ecosystem.md, finding 17), and it stays caught."""
    spec = next(k for k in KERNELS if (k.backend, k.name) == ("torch-cpu", "F.rms_norm.backward"))

    def exact_and_bound(x: np.ndarray, dy: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
        rows, cols = x.shape
        case = _case("rmsnorm_backward", rows=rows, cols=cols).replace(
            x=x, dy=dy, gamma=np.ones(cols, F32), eps=eps)
        ref = grad_reference(case)
        tol = grad_tolerance(case, ref, model=spec.error_model, row_reduction=spec.row_reduction)
        return ref.z["dx"], tol.tol["dx"]

    least = float(np.finfo(F32).tiny)  # FLT_MIN
    eps = float(F32(2.0**-23))
    x = np.array([[14.0, least], [least, 14.0]], F32)
    dy = np.array([[0.0, -0.9805271625518799], [-0.8174782991409302, 2.220446049250313e-16]], F32)
    exact, bound = exact_and_bound(x, dy, eps)
    replica = _autograd_rms_norm_dx(x, dy, eps)
    for got in (replica[0, 0], 8.318107684232114e-41):  # the replica's; PyTorch's on the CPU
        error = abs(float(got) - exact[0, 0])
        assert error > 8 * 2.0**-149  # past the floor the bound had before
        assert error <= bound[0, 0], (got, exact[0, 0], bound[0, 0])
    # finding 17 (docs/reproducers/torch_rms_norm_backward_underflow.py): a row of 8 near 1e15,
    # where rstd^3 underflows; the projection's term is 1e-16, and losing it is still an error.
    x = np.full((1, 8), 1e15, F32)
    x[0, 0] = 2e15
    dy = np.linspace(-1, 1, 8, dtype=F32)[None, :]
    exact, bound = exact_and_bound(x, dy, 1e-6)
    assert (np.abs(_autograd_rms_norm_dx(x, dy, 1e-6) - exact) > 100 * bound).any()
    # The room shrinks with the scalar: on x = [1e18, 1e14], dy = [0, 7e-15] the scalar is 3.5e-55,
    # far below tiny, and dx_1 (9.9e-33, in the normal range) set to 0 is still an error.
    exact, bound = exact_and_bound(np.array([[1e18, 1e14]], F32), np.array([[0.0, 7e-15]], F32), 1e-6)
    assert abs(exact[0, 1]) > bound[0, 1]


def test_an_exact_gradient_past_float32s_range_asks_for_its_infinity() -> None:
    """dy of 1e29, gamma 6404 and rstd 1e6 (x of 1e-21, eps 1e-12): the exact dx of row 1 is
    -6.28e38, past FLT_MAX, so float32's answer is -inf (PyTorch's CPU gives it). The shrunk case
    of a 1000-example ``tiny`` hunt, which took -inf for a non-finite failure."""
    from normprops.judge import judge_grads

    case = _case("rmsnorm_backward", rows=2, cols=1).replace(
        x=np.array([[1.2573022122287061e-21], [-1.3210486357190995e-21]], F32),
        dy=np.array([[1.0296768299594288e+28], [-9.80527147960694e+28]], F32),
        gamma=np.array([6404.2265625], F32), eps=float(F32(1e-12)))
    ref = grad_reference(case)
    assert ref.z["dx"][1, 0] < -np.finfo(F32).max
    tol = grad_tolerance(case, ref, model=FOREIGN_ERROR_MODEL, row_reduction="sequential")
    with np.errstate(over="ignore"):
        right = {"dx": ref.z["dx"].astype(F32), "dgamma": ref.z["dgamma"].astype(F32)}
    assert right["dx"][1, 0] == -np.inf
    failures, _ = judge_grads(case, right, ref, tol, label="k")
    assert not failures, [v.message() for v in failures]
    for wrong in (np.inf, np.nan, 0.0):
        outs = dict(right, dx=right["dx"].copy())
        outs["dx"][1, 0] = wrong
        failures, _ = judge_grads(case, outs, ref, tol, label="k")
        assert [(v.output, v.row) for v in failures] == [("dx", 1)], wrong
        assert "past float32's range" in failures[0].message()


@pytest.mark.parametrize("flags, named", [(("--row-reduction", "sequential"), "--row-reduction"),
                                          (("--row-reduction", "blocks"), "--row-reduction"),
                                          (("--check", "row_order"), "--check row_order")])
def test_a_gradient_declaration_for_a_forward_op_is_a_usage_error(flags: tuple[str, ...],
                                                                  named: str) -> None:
    from normprops.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(["hunt", "--op", "rmsnorm", "--impl", "normprops.examples.correct:rmsnorm_f32",
                 "--max-examples", "5", "--no-fixtures", *flags], out=out, err=err)
    assert code == 2 and named in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
    with pytest.raises(UsageError, match="gradient ops only"):
        normprops.hunt_kernel(lambda x, g, e: x, op="rmsnorm", row_reduction="tree")


def test_no_depth_hint_explains_a_dgamma_bug_away() -> None:
    """A gradient's depth comes from the threads twice, over the columns (dx) and over the blocks of
    rows summed into dgamma: --threads 1 would deepen dgamma's row sum under words about the
    columns (it hid the bfloat16 dgamma sum of backward_planted), so no depth hint is offered; a
    forward op still gets one."""
    from normprops import hints

    def flags(op: str, fn) -> set[str]:
        target = target_from_callable(fn, op=op)
        return {d.flag for group in hints._model_groups(target) for d, _ in group}

    assert not {"--threads 1", "--reduction tree"} & flags("rmsnorm_backward", correct.rmsnorm_backward_f32)
    assert {"--threads 1", "--reduction tree"} <= flags("rmsnorm", lambda x, g, e: x)


def test_taking_rows_of_a_gradient_case_takes_their_dy() -> None:
    case = _case("rmsnorm_backward", rows=3, cols=4)
    one = case.take(np.array([2]))
    assert one.x.shape == one.dy.shape == (1, 4) and np.array_equal(one.dy[0], case.dy[2])


def _replica(op: str):
    """tools/replica_catch.py's float32 replica of PyTorch's CUDA norm backward (compute_gI), whose
    ``N dy gamma`` form torch.compile's layer norm decomposition shares."""
    tool = Path(__file__).parents[1] / "tools" / "replica_catch.py"
    return runpy.run_path(str(tool), run_name="replica")[op]


def test_the_compiled_layer_norm_backwards_known_case_overflows_n_dy_gamma() -> None:
    """docs/ecosystem.md, finding 34: torch.compile's layer norm backward (Inductor's decomposition,
    which forms ``dy gamma N``) is inf where N |dy gamma| passes FLT_MAX. Its registry entry declares
    the bug in ``dy_scale`` with the case judged on an H200 as the explicit example; the case is the
    one tools/cases/ names, and the decomposition overflows on it where the exact dx is 1.08e35."""
    from normprops.registry_hunt import known_example

    spec = next(k for k in KERNELS if k.name == "compiled.layer_norm.backward-f32")
    bug = spec.bug_in("dy_scale")
    assert bug is not None and bug.property == "finite" and bug.example
    example = known_example(bug.example)
    cases = Path(__file__).parents[1] / "tools" / "cases"
    path = cases / "layernorm_backward-dy_scale-n-dy-gamma-overflow.json"
    case = grad_case_from_fields(json.loads(path.read_text()))
    assert all(np.array_equal(getattr(case, a), getattr(example, a)) for a in ("x", "dy", "gamma", "beta"))
    assert np.max(np.abs(case.dy.astype(np.float64) * case.gamma)) * case.cols > np.finfo(np.float32).max
    target = replace(target_from_callable(_replica("layernorm_backward"), op="layernorm_backward",
                                          name="decomposed", row_reduction="sequential"),
                     examples=(case,))
    result = hunt(target, family="dy_scale", config=HuntConfig(max_examples=1, seed=0))
    finding = next(f for f in result.findings if f.property == "finite")
    assert (finding.verdict.row, finding.verdict.col) == (1, 2287)
    assert finding.verdict.expected == pytest.approx(1.0834e35, rel=1e-4)


@pytest.mark.parametrize("op, entries, exact", [
    ("layernorm_backward", (("torch-cuda", "F.layer_norm.backward"),
                            ("torch-compile", "compiled.layer_norm.backward-f32")), -3.0837e37),
    ("rmsnorm_backward", (("torch-cuda", "F.rms_norm.backward"),), -3.0766e37),
])
def test_the_n_dy_gamma_overflow_is_declared_in_tiny_with_its_case(op, entries, exact) -> None:
    """docs/ecosystem.md, finding 38: x of 1e-20 holds rstd near 1 / sqrt(eps), so dx stays finite
    where N |dy gamma| does not. Each entry that forms ``N dy gamma`` declares the bug in ``tiny``
    with the case tools/cases/ names as its explicit example, and tools/replica_catch.py's float32
    replica of that form gives -inf on it where the exact dx is about -3.08e37."""
    from normprops.registry_hunt import known_example

    tools = Path(__file__).parents[1] / "tools"
    replica = _replica(op)
    path = tools / "cases" / f"{op}-tiny-n-dy-gamma-overflow.json"
    case = grad_case_from_fields(json.loads(path.read_text()))
    arrays = ("x", "dy", "gamma", "beta") if op == "layernorm_backward" else ("x", "dy", "gamma")
    for backend, name in entries:
        bug = next(k for k in KERNELS if (k.backend, k.name) == (backend, name)).bug_in("tiny")
        assert bug is not None and bug.property == "range_safety" and bug.example, name
        example = known_example(bug.example)
        assert all(np.array_equal(getattr(case, a), getattr(example, a)) for a in arrays), name
    assert np.max(np.abs(case.dy.astype(np.float64) * case.gamma)) * case.cols > np.finfo(np.float32).max
    target = replace(target_from_callable(replica, op=op, name="n_dy_gamma", row_reduction="sequential",
                                          opt_in=("range_safety",)), examples=(case,))
    result = hunt(target, family="tiny", config=HuntConfig(max_examples=1, seed=0))
    finding = next(f for f in result.findings if f.property == "range_safety")
    assert (finding.verdict.row, finding.verdict.col) == (1, 114)
    assert finding.verdict.got == -np.inf
    assert finding.verdict.expected == pytest.approx(exact, rel=1e-4)


def test_a_finding_quotes_the_exact_value_where_float64_cannot_resolve_it() -> None:
    """The shrunk case of PyTorch's CUDA RMS norm backward in ``tall`` (docs/ecosystem.md,
    finding 33): one column of x ~ 1e6 with eps 2^-23, where dx's projection cancels to
    1 - xhat^2 = 1.2e-19, below float64's resolution. float64 says 1.436e11 and judges by it (the
    bound, 2.3e21, allows that); the finding quotes the 200-bit value, 7.6468e7."""
    cases = Path(__file__).parents[1] / "tools" / "cases"
    path = cases / "rmsnorm_backward-tall-product-overflow.json"
    case = grad_case_from_fields(json.loads(path.read_text()))
    target = replace(target_from_callable(_replica("rmsnorm_backward"), op="rmsnorm_backward",
                                          name="compute_gI", row_reduction="sequential"),
                     examples=(case,))
    result = hunt(target, family="tall", config=HuntConfig(max_examples=1, seed=0))
    finding = next(f for f in result.findings if f.property == "finite")
    assert finding.verdict.expected == pytest.approx(7.6467777709e7, rel=1e-9)
    assert finding.message.endswith(
        "dx[row 5 col 0]: non-finite output -inf where the exact result is 7.6468e+07")
    assert grad_reference(case).z["dx"][5, 0] == pytest.approx(1.436e11, rel=1e-3)  # float64's


def test_a_quoted_exact_value_restates_the_error_but_never_clears_a_verdict() -> None:
    from normprops.judge import with_exact

    judged = Verdict("rmsnorm_backward[k]", "accuracy", "tall", 0, 0, 10.0, 2.0, 8.0, 4.0, 2.0, "",
                     output="dx")
    sharper = with_exact(judged, 1.0, dtype="float32")
    assert (sharper.expected, sharper.error, sharper.ratio) == (1.0, 9.0, 2.25)
    assert with_exact(judged, 7.0, dtype="float32") == judged  # |10 - 7| < 4: left as judged
    assert with_exact(judged, math.nan, dtype="float32") == judged
    # A metamorphic verdict's "expected" is the kernel's other output, not the exact value.
    from normprops.properties import quoting_exact
    case = _case("rmsnorm_backward")
    other_run = replace(judged, property="determinism", error=None, tolerance=None,
                        reason="second launch: 10.0 vs 2.0")
    assert quoting_exact(case, other_run, oracle="float64") == other_run


def test_keep_case_keeps_a_registry_kernels_failure_on_a_printed_case(tmp_path: Path) -> None:
    """tools/keep_case.py on the committed case of finding 33 with PyTorch's CPU RMS norm backward,
    which overflows there too (autograd's sum(dy gamma x)): one fixture of the finding, quoting the
    exact value."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    root = Path(__file__).parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "tools" / "keep_case.py"),
         "--case", str(root / "tools" / "cases" / "rmsnorm_backward-tall-product-overflow.json"),
         "--kernel", "torch-cpu:F.rms_norm.backward", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (tmp_path / "rmsnorm_backward").glob("tall-*.json")
    fixture = load_fixture(path)
    assert (fixture.impl, fixture.property) == ("F.rms_norm.backward", "finite")
    assert "exact result is 7.6468e+07" in fixture.message
