"""Range safety: the rows outside the accuracy domain of the arithmetic a kernel declares (a norm's
x*x past 1.8e19, a masked softmax's ``scale * x`` past FLT_MAX) are judged only where it is asked
for (``--check range_safety``, ``opt_in=["range_safety"]``); otherwise a finding there is
information ("not range-safe"), not a failure, and those rows are not judged through the scaled or
shifted copies of the metamorphic properties either. Every other row is judged, in every family."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_harness import run

import normprops
from normprops.case import Case
from normprops.launch import target_from_callable, target_from_spec
from normprops.properties import evaluate
from normprops.specs import KERNELS

F32 = np.float32
MODULE = "test_range_safety"


# --- kernels as users write them ----------------------------------------------------------------


def layer_norm_two_pass(x, gamma, beta, eps):
    """The textbook two-pass float32 layer norm: right on ordinary rows, not range-safe (the sum
    and the squares of a row of 1e20 overflow)."""
    with np.errstate(all="ignore"):
        n = F32(x.shape[1])
        mean = x.sum(axis=1, keepdims=True, dtype=F32) / n
        d = x - mean
        var = (d * d).sum(axis=1, keepdims=True, dtype=F32) / n
        return (d / np.sqrt(var + F32(eps)) * gamma + beta).astype(F32)


def layer_norm_float32_squares(x, gamma, beta, eps):
    """E[x^2] - E[x]^2 with float64 sums but x * x in float32: right while the squares fit, which
    a row scaled by 8 can leave behind."""
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=1, keepdims=True)
        var = np.maximum((x * x).astype(np.float64).mean(axis=1, keepdims=True) - mean * mean, 0)
        return ((x64 - mean) / np.sqrt(var + eps) * gamma + beta).astype(F32)


# --- helpers -------------------------------------------------------------------------------------



@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This file importable as a module of kernels, the current directory a scratch one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    return tmp_path


def _hunt(*flags: str) -> list[str]:
    return ["hunt", "--op", "layernorm", "--impl", f"{MODULE}:layer_norm_two_pass", "--families",
            "ordinary,huge", "--max-examples", "30", "--seed", "0", *flags]


# --- a norm that does not promise it --------------------------------------------------------------


def test_a_norm_that_is_not_range_safe_passes_and_says_so(here: Path) -> None:
    code, out, _ = run(*_hunt("--no-fixtures", "--json", "r.json"))
    assert code == 0, out
    doc = json.loads((here / "r.json").read_text())
    assert doc["failures"] == []
    assert [(f["family"], f["property"]) for f in doc["information"]] == [("huge", "range_safety")]
    huge = next(r for r in doc["results"] if r["family"] == "huge")
    assert huge["passed"] and huge["information"] == ["range_safety"]
    assert doc["targets"][0]["information"] == ["range_safety"]
    assert "pass (not range-safe)" in out and "information, not a failure" in out
    assert "clean: 2 families" in out
    # The merged matrix reads the same, and a merge of it is no failure either.
    code, merged, _ = run("report", "merge", "r.json")
    assert code == 0 and "not range-safe" in merged


def test_range_safety_is_judged_when_asked(here: Path) -> None:
    code, out, _ = run(*_hunt("--check", "range_safety", "--json", "r.json"))
    assert code == 1, out
    doc = json.loads((here / "r.json").read_text())
    assert [(f["family"], f["property"]) for f in doc["failures"]] == [("huge", "range_safety")]
    assert doc["information"] == [] and "squares overflow" in out
    # The saved fixture fails replay only where range safety is asked for there too; elsewhere it
    # is said to be not judged (not "pass"; a replay that judged nothing is no green: exit 5, as
    # for nothing to replay), and prune keeps it.
    replay = ["replay", "--op", "layernorm", "--impl", f"{MODULE}:layer_norm_two_pass"]
    code, out, _ = run(*replay, "--json", "replay.json")
    assert code == 5 and "not judged huge-" in out and "--check range_safety judges it" in out
    assert "pass huge-" not in out and "1 not judged" in out
    assert "nothing judged: this kernel is judged on none of the fixtures' properties (range_safety" in out
    assert json.loads((here / "replay.json").read_text())["error"] == "nothing judged"
    assert run(*replay, "--check", "range_safety")[0] == 1
    code, out, _ = run("fixtures", "prune", "--op", "layernorm", "--impl", f"{MODULE}:layer_norm_two_pass")
    assert code == 0 and "kept: 1 not judged" in out, out
    assert list((here / "normprops-fixtures" / "layernorm").glob("huge-*.json"))


def test_the_python_api_takes_the_promise() -> None:
    kwargs = dict(op="layernorm", families=["huge"], max_examples=30, seed=0)
    report = normprops.assert_robust(layer_norm_two_pass, **kwargs)
    assert report.passed and [f.property for f in report.information] == ["range_safety"]
    with pytest.raises(AssertionError, match="huge range_safety"):
        normprops.assert_robust(layer_norm_two_pass, opt_in=["range_safety"], **kwargs)
    # Declined outright, it is not hunted at all.
    assert normprops.hunt_kernel(layer_norm_two_pass, ignore=["range_safety"], **kwargs).information == []


def test_ignoring_and_checking_it_at_once_is_a_usage_error(here: Path) -> None:
    code, _, err = run(*_hunt("--ignore", "range_safety", "--check", "range_safety"))
    assert code == 2 and "range_safety both ignored and checked" in err
    with pytest.raises(normprops.UsageError, match="both ignored and checked"):
        normprops.hunt_kernel(layer_norm_two_pass, op="layernorm", ignore=["range_safety"],
                              opt_in=["range_safety"])


# --- not judged through the copies either ---------------------------------------------------------


def _row_near_the_squares_limit() -> Case:
    """Rows of 3.6e18 to 4e18: x * x fits float32, (8 x) * (8 x) does not; x - mean stays small
    enough for the scaled copy to be inside the accuracy domain, and the mean is 30 times the
    spread (a well-conditioned row)."""
    cols = 8
    x = (4e18 * (0.9 + 0.1 * np.random.default_rng(0).random((2, cols)))).astype(F32)
    return Case("layernorm", "huge", x, np.ones(cols, F32), np.zeros(cols, F32), float(F32(1e-5)))


@pytest.mark.parametrize("ignore", [(), ("range_safety",)], ids=["not-asked", "ignored"])
def test_a_scaled_copy_past_the_range_is_not_compared(ignore: tuple[str, ...]) -> None:
    """Declared one-pass, the kernel forms x*x: the copy (x * 8, past 1.8e19) is outside the domain
    of that arithmetic, so it is not compared unless range safety is asked for."""
    case = _row_near_the_squares_limit()
    target = target_from_callable(layer_norm_float32_squares, op="layernorm", ignore=ignore,
                                  variance="one_pass")
    assert evaluate(target, case).failures == ()


def test_a_copy_inside_the_declared_domain_is_compared() -> None:
    """Declared two-pass (the default), the kernel squares only x - mean, which the copy keeps far
    below float32's range: its overflowing x*x is a failure, not a range-safety excuse."""
    case = _row_near_the_squares_limit()
    target = target_from_callable(layer_norm_float32_squares, op="layernorm")
    (failure,) = evaluate(target, case).failures
    assert failure.property == "scale_invariance" and "x * 2^3" in failure.reason


def test_a_scaled_copy_is_compared_where_range_safety_is_promised() -> None:
    case = _row_near_the_squares_limit()
    target = target_from_callable(layer_norm_float32_squares, op="layernorm",
                                  opt_in=("range_safety",))
    (failure,) = evaluate(target, case).failures
    assert failure.property == "scale_invariance" and "x * 2^3" in failure.reason


# --- the registry ----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [s for s in KERNELS if s.backend in ("numpy", "cuda", "cuda-prod")],
                         ids=lambda s: f"{s.backend}-{s.name}")
def test_registered_kernels_are_judged_on_range_safety(spec) -> None:
    """Their claims say where they promise it: cuda-prod's norms claim huge, and are judged there."""
    target = target_from_spec(spec)
    assert "range_safety" not in target.unjudged and target.information == frozenset()


# --- what overflows, not which family ------------------------------------------------------------


def masked_softmax_scale_first(x, mask, scale):
    """PyTorch's order: ``scale * x`` in float32 first, then a max-subtracted softmax over the kept
    entries. Right wherever ``scale * x`` fits float32; past FLT_MAX the product is inf."""
    with np.errstate(all="ignore"):
        t = np.where(mask, F32(scale) * x, F32(-np.inf))
        m = np.max(t, axis=1, keepdims=True)
        e = np.where(mask, np.exp(t - np.where(np.isfinite(m), m, F32(0))), F32(0))
        s = e.sum(axis=1, keepdims=True, dtype=F32)
        return np.where(s > 0, e / np.where(s > 0, s, F32(1)), F32(0)).astype(F32)


@pytest.mark.parametrize("seed", range(3))
def test_a_masked_softmax_that_scales_first_passes_by_default(seed: int) -> None:
    """Only the rows whose ``scale * x`` leaves float32 are excused, and shown as information."""
    kwargs = dict(op="masked_softmax", families=["overflow_logits", "huge"], max_examples=100, seed=seed)
    report = normprops.hunt_kernel(masked_softmax_scale_first, **kwargs)
    assert report.passed, report
    assert {f.property for f in report.information} <= {"range_safety"}


@pytest.mark.parametrize("seed", range(4))
def test_a_masked_softmax_that_scales_first_is_not_range_safe_when_asked(seed: int) -> None:
    with pytest.raises(AssertionError, match="range_safety"):
        normprops.assert_robust(masked_softmax_scale_first, op="masked_softmax",
                                families=["overflow_logits"], max_examples=100, seed=seed,
                                opt_in=["range_safety"])
