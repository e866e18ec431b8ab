"""Hints are checked before they are given: a declaration is hinted only when every finding it is
about passes under it (the kernel run again on each minimal and worst case), and the hint says what
the declaration means. ``--arithmetic bfloat16`` with float32 storage is a usage error."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cli_harness import run

import normprops
from normprops.case import Case
from normprops.hints import hints
from normprops.hunt import Finding
from normprops.launch import Target, target_from_callable
from normprops.properties import evaluate

BF16 = ml_dtypes.bfloat16
F32 = np.float32
MODULE = "test_hints"


# --- kernels as users write them ----------------------------------------------------------------


def rms_norm_bf16_reciprocal_root(x, gamma, eps):
    """Buggy: float32 (here float64) throughout, but the reciprocal root is rounded to bfloat16,
    so every row is off by one factor of up to 2^-9: just past the bounds of a float32 kernel."""
    x32 = x.astype(F32)
    ms = np.mean(x32.astype(np.float64) ** 2, axis=1, keepdims=True)
    r = (1 / np.sqrt(ms + eps)).astype(BF16).astype(F32)
    return (x32 * r * gamma.astype(F32)).astype(BF16)


def rms_norm_eps_outside_bf16(x, gamma, eps):
    """Buggy: x / (sqrt(ms) + eps), eps in the wrong place, in bfloat16 storage."""
    x32 = x.astype(F32)
    ms = np.mean(x32.astype(np.float64) ** 2, axis=1, keepdims=True)
    return (x32 / (np.sqrt(ms) + eps) * gamma.astype(F32)).astype(BF16)


def rms_norm_sequential(x, gamma, eps):
    """Correct for a kernel whose one thread adds the whole row in order (float32 throughout)."""
    with np.errstate(all="ignore"):
        sq = x * x
        acc = np.zeros((x.shape[0], 1), F32)
        for c in range(x.shape[1]):
            acc += sq[:, c:c + 1]
        return (x / np.sqrt(acc / F32(x.shape[1]) + F32(eps)) * gamma).astype(F32)


def layer_norm_sequential(x, gamma, beta, eps):
    """Correct for one thread per row: the mean and the variance are sums taken in column order."""
    with np.errstate(all="ignore"):
        n = F32(x.shape[1])
        mean = np.cumsum(x, axis=1, dtype=F32)[:, -1:] / n
        d = x - mean
        var = np.cumsum(d * d, axis=1, dtype=F32)[:, -1:] / n
        return (d / np.sqrt(var + F32(eps)) * gamma + beta).astype(F32)


def rms_norm_flushing(x, gamma, eps):
    """Correct for a flush-to-zero machine: subnormal inputs are read as 0."""
    x = np.where(np.abs(x) < np.finfo(F32).tiny, F32(0), x).astype(F32)
    x64 = x.astype(np.float64)
    r = np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + eps)
    return (x64 / r * gamma).astype(F32)


def softmax_up_to_64_columns(x):
    """Correct, but refuses rows wider than 64 columns."""
    if x.shape[1] > 64:
        raise ValueError(f"at most 64 columns, got {x.shape[1]}")
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(F32)


# --- helpers -------------------------------------------------------------------------------------



@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    return tmp_path


def _finding(target: Target, case: Case) -> Finding:
    """What a hunt would report for ``case``: its first failure, the case minimal and worst."""
    (verdict, *_) = evaluate(target, case).failures
    return Finding(target.label, case.family, verdict.property, verdict, case, case, verdict)


def _sequential_case() -> Case:
    """4096 columns: 1, then 4095 values whose squares (2^-26) each vanish against a running sum
    of 1. The exact mean square is larger by 6.1e-5 relative: about 7 times a 32-thread bound,
    a quarter of a one-thread bound."""
    x = np.full((2, 4096), 2.0**-13, F32)
    x[:, 0] = 1.0
    return Case("rmsnorm", "ordinary", x, np.ones(4096, F32), None, float(F32(1e-5)))


# --- declarations of how a kernel computes ---------------------------------------------------------


def test_the_bfloat16_hint_says_what_the_declaration_means() -> None:
    """A bfloat16 reciprocal root passes under --arithmetic bfloat16 (so the hint is given), but is
    a bug in a float32 kernel: the hint says that declaring it would hide it."""
    kwargs = dict(op="rmsnorm", dtype="bfloat16", families=["ordinary"], max_examples=50, seed=0)
    report = normprops.hunt_kernel(rms_norm_bf16_reciprocal_root, **kwargs)
    assert [f.property for f in report.failures] == ["accuracy"]
    (hint,) = [h for h in report.hints if "--arithmetic" in h]
    assert hint.startswith('hint: --arithmetic bfloat16 (arithmetic="bfloat16") explains every')
    assert "every operation of the kernel rounds to bfloat16" in hint
    assert "one step rounded to bfloat16 (a bfloat16 reciprocal root" in hint
    assert normprops.hunt_kernel(rms_norm_bf16_reciprocal_root, arithmetic="bfloat16", **kwargs).passed


def test_no_hint_for_a_declaration_that_does_not_explain_the_findings(here: Path) -> None:
    """eps outside the root: the finding in constant is just past the bound (where --arithmetic
    bfloat16 was hinted), the one in eps_scale far past it whatever the arithmetic: no
    declaration explains both, none is hinted."""
    code, out, _ = run("hunt", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_norm_eps_outside_bf16",
                       "--dtype", "bfloat16", "--families", "constant,eps_scale", "--seed", "0",
                       "--no-fixtures")
    assert code == 1 and "accuracy" in out
    assert "hint:" not in out


def test_a_row_summed_in_order_gets_the_one_thread_hint() -> None:
    target = target_from_callable(rms_norm_sequential, op="rmsnorm")
    finding = _finding(target, _sequential_case())
    assert finding.property == "accuracy" and 2 < finding.verdict.ratio < 16
    (hint,) = hints([finding], target=target)
    # A pairwise tree is tighter than 32 threads at 4096 columns: it explains nothing here.
    assert hint.startswith("hint: --threads 1 (threads=1) explains every accuracy finding here")
    assert "one thread adds each whole row in order" in hint and "cols - 1 additions" in hint
    assert "--reduction" not in hint


def test_the_one_thread_hint_through_the_cli(here: Path) -> None:
    code, out, _ = run("hunt", "--op", "layernorm", "--impl", f"{MODULE}:layer_norm_sequential",
                       "--families", "constant", "--seed", "0", "--no-fixtures")
    assert code == 1
    assert "hint: --threads 1 (threads=1) explains every" in out
    code, out, _ = run("hunt", "--op", "layernorm", "--impl", f"{MODULE}:layer_norm_sequential",
                       "--families", "constant", "--seed", "0", "--no-fixtures", "--threads", "1")
    assert code == 0, out


def test_a_flushing_kernel_gets_the_ftz_hint() -> None:
    report = normprops.hunt_kernel(rms_norm_flushing, op="rmsnorm", families=["tiny"],
                                   max_examples=50, seed=0)
    assert "accuracy" in {f.property for f in report.failures}
    (hint,) = report.hints
    assert hint.startswith("hint: --ftz (ftz=True) explains every accuracy")
    assert "flushes subnormal inputs and results to zero" in hint


# --- the widths a kernel takes ------------------------------------------------------------------------


def test_a_kernel_that_refuses_wide_rows_gets_a_checked_width_hint() -> None:
    report = normprops.hunt_kernel(softmax_up_to_64_columns, op="softmax", families=["ordinary"],
                                   max_examples=50, seed=0)
    assert report.failures[0].property == "contract"
    (hint,) = report.hints
    assert hint.startswith("hint: --max-cols ") and "no wider row is hunted" in hint
    n = int(hint.split()[2])
    assert n >= 64 and all(f.minimal.cols > n for f in report.failures)


def _softmax_taking(lo: int, hi: int, multiple: int = 1):
    def softmax(x):
        if not lo <= x.shape[1] <= hi or x.shape[1] % multiple:
            raise ValueError(f"{lo} to {hi} columns, got {x.shape[1]}")
        z = x.astype(np.float64)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(F32)
    return softmax


@pytest.mark.parametrize("lo, hi, multiple, wide, flag", [
    (1, 100, 1, 300, "--max-cols 100"),
    (40, 16385, 1, 3, "--min-cols 40"),
    (1, 16385, 4, 5, "--cols-multiple-of 4"),  # takes 4 but not 3: no limit explains it
])
def test_a_width_limit_away_from_the_counterexample_is_found(lo, hi, multiple, wide, flag) -> None:
    # As after a shrink cut short: the counterexample is far from the limit, not one past it.
    fn = _softmax_taking(lo, hi, multiple)
    target = target_from_callable(fn, op="softmax")
    report = normprops.hunt_kernel(fn, op="softmax", families=["ordinary"], max_examples=50, seed=0)
    (finding,) = [f for f in report.failures if f.property == "contract"]
    case = finding.minimal.replace(x=np.resize(finding.minimal.x, (finding.minimal.rows, wide)))
    far = Finding(label=finding.label, family=finding.family, property="contract",
                  verdict=finding.verdict, minimal=case, worst=case, worst_verdict=finding.verdict)
    (hint,) = hints([far], target=target)
    assert hint.startswith(f"hint: {flag} (")


# --- --arithmetic bfloat16 on float32 storage -------------------------------------------------------


def test_bfloat16_arithmetic_on_float32_storage_is_a_usage_error(here: Path) -> None:
    code, out, err = run("hunt", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_norm_sequential",
                         "--arithmetic", "bfloat16")
    assert code == 2 and out == ""
    assert "--arithmetic bfloat16" in err and "--dtype bfloat16" in err and len(err.splitlines()) == 1
    with pytest.raises(normprops.UsageError, match='dtype="bfloat16"'):
        normprops.hunt_kernel(rms_norm_sequential, op="rmsnorm", arithmetic="bfloat16")


def test_a_raise_that_does_not_repeat_gets_no_width_hint() -> None:
    calls = []

    def raises_once(x):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a passing fault")
        z = x.astype(np.float64)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(F32)

    report = normprops.hunt_kernel(raises_once, op="softmax", families=["ordinary"], max_examples=30,
                                   seed=0)
    assert any(f.property == "contract" for f in report.failures)
    assert not any("cols" in hint for hint in report.hints), report.hints


def square_batches_only(x):
    """Runs only when the batch has as many rows as columns (``x @ x`` in disguise): its raises
    follow the row count, so no width explains them."""
    if x.shape[0] != x.shape[1]:
        raise ValueError(f"shapes {x.shape} and {x.shape} cannot be multiplied")
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(F32)


def test_a_raise_that_follows_the_row_count_gets_no_width_hint() -> None:
    report = normprops.hunt_kernel(square_batches_only, op="softmax", families=["ordinary"],
                                   max_examples=30, seed=1)
    assert any(f.property == "contract" for f in report.failures)
    assert not any("cols" in hint for hint in report.hints), report.hints


def test_a_kernel_that_takes_no_width_a_hunt_draws_gets_no_width_hint() -> None:
    # Its narrowest row is past the widest a hunt may be limited to (--min-cols at most 262145):
    # no width declaration explains its raises, and looking for one must not fail.
    fn = _softmax_taking(300_000, 10**6)
    target = target_from_callable(fn, op="softmax")
    report = normprops.hunt_kernel(fn, op="softmax", families=["ordinary"], max_examples=5, seed=0)
    (finding,) = [f for f in report.failures if f.property == "contract"]
    case = finding.minimal.replace(x=np.resize(finding.minimal.x, (finding.minimal.rows, 200_000)))
    far = Finding(label=finding.label, family=finding.family, property="contract",
                  verdict=finding.verdict, minimal=case, worst=case, worst_verdict=finding.verdict)
    assert hints([far], target=target) == []
