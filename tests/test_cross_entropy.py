"""The cross-entropy ops: the exact reference against mpmath and PyTorch, the bounds against the
correct kernels (tight enough to catch the planted ones), the planted bugs caught with readable
counterexamples, PyTorch's CPU entries clean, the declaration's errors, and a fixture replayed
through the CLI."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from quack_stand_in import quack_cross_entropy, stand_in_quack

import normprops
from normprops.errors import UsageError
from normprops.examples import cross_entropy_kernels as kernels
from normprops.ops.cross_entropy import as_declared
from normprops.ops.cross_entropy_families import (
    CROSS_ENTROPY_FAMILIES,
    VOCABULARIES,
    cross_entropy_cases,
    with_dloss,
)
from normprops.ops.cross_entropy_math import (
    CrossEntropyCase,
    CrossEntropyDeclaration,
    cross_entropy_reference,
    exact_grad_rows,
    exact_loss_rows,
    grad_tolerance,
    loss_tolerance,
)

IMPL = "normprops.examples.cross_entropy_kernels"
_NUMPY = kernels.CORRECT["ce"].declaration


def _case(logits, target, **kw) -> CrossEntropyCase:
    return CrossEntropyCase(np.asarray(logits, np.float32), np.asarray(target, np.int64), **kw)


# --- the reference ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    pytest.param({}, id="plain"),
    pytest.param({"label_smoothing": 0.1}, id="smoothing"),
    pytest.param({"label_smoothing": 1.0}, id="smoothing-1"),
    pytest.param({"softcap": 30.0}, id="softcap"),
    pytest.param({"z_loss": 1e-4, "label_smoothing": 0.1}, id="z_loss"),
])
def test_reference_matches_mpmath_per_row_and_per_element(kw) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 37)) * 4
    x[0, 7] += 45.0  # target 7 dominant: the loss is ~1e-14, matched to 1e-12 of itself
    x[1] += 1e6  # an offset
    target = np.array([7, 3, -100, 36, 0])
    dloss = np.array([1.0, -2.5, 3.0, 0.125, 1e-3], np.float32)
    case = _case(x, target, dloss=dloss, **kw)
    ref = cross_entropy_reference(case)
    exact = exact_loss_rows(case, np.array([0, 1, 3, 4]))
    for r, value in exact.items():
        assert ref.row_loss[r] == pytest.approx(value, rel=1e-12, abs=1e-300), (r, ref.row_loss[r], value)
    assert ref.row_loss[2] == 0.0
    assert 0 < ref.row_loss[0] < 1e-10 or kw.get("label_smoothing") or kw.get("z_loss") or kw.get("softcap")
    grads = exact_grad_rows(case, np.array([0, 1, 3, 4]))
    for r, row in grads.items():
        # per element, relative to the element, the target column's p_t - 1 included
        np.testing.assert_allclose(ref.dlogits[r], row, rtol=1e-11, atol=1e-300)
    assert not ref.dlogits[2].any()


def test_reference_matches_pytorch_in_float64() -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 50)).astype(np.float32) * 3
    target = np.array([1, -100, 49, 0, 7, 7])
    for eps in (0.0, 0.1, 1.0):
        for reduction in ("none", "sum", "mean"):
            case = _case(x, target, label_smoothing=eps, reduction=reduction)
            want = F.cross_entropy(torch.from_numpy(x).double(), torch.from_numpy(target),
                                   label_smoothing=eps, reduction=reduction).numpy()
            np.testing.assert_allclose(cross_entropy_reference(case).loss, want, rtol=1e-13)


def test_a_mean_over_no_row_is_not_judged() -> None:
    case = _case(np.zeros((2, 3)), [-100, -100], reduction="mean")
    ref = cross_entropy_reference(case)
    assert np.isnan(ref.loss) and np.isnan(loss_tolerance(ref, case, declaration=_NUMPY))


# --- the bounds --------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", CROSS_ENTROPY_FAMILIES)
def test_correct_kernels_stay_within_the_bound_and_not_far_below_it(family: str) -> None:
    """The numpy kernels' worst err/tol over 30 drawn cases is at most 1, and above 0.01 (a bound
    that a correct kernel never came near would hide bugs)."""
    worst = {"loss": 0.0, "dlogits": 0.0}

    @settings(max_examples=30, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=cross_entropy_cases(family, dtypes=("float32", "bfloat16"), gradient=True))
    def check(case: CrossEntropyCase) -> None:
        ref = cross_entropy_reference(case)
        loss = kernels.ce(*case.inputs()[1:])
        tol = loss_tolerance(ref, case, declaration=_NUMPY)
        ratio = np.abs(loss.astype(np.float64) - ref.loss) / tol
        assert np.all(ratio <= 1), (case, ratio.max())
        worst["loss"] = max(worst["loss"], float(ratio.max()))
        grad = kernels.ce_backward(*case.inputs()).astype(np.float64)
        gt = grad_tolerance(ref, case, declaration=_NUMPY)
        gratio = np.abs(grad - ref.dlogits) / gt
        assert np.all(gratio <= 1), (case, gratio.max())
        worst["dlogits"] = max(worst["dlogits"], float(gratio.max()))

    check()
    assert worst["loss"] > 0.01 or family == "ignored"
    assert worst["dlogits"] > 0.01


def test_bfloat16_dlogits_get_half_an_ulp_of_bfloat16() -> None:
    case = _case(np.array([[0.0, 1.0, 2.0]]), [0], dloss=np.ones(1, np.float32), dtype="bfloat16")
    ref = cross_entropy_reference(case)
    wide = grad_tolerance(ref, case, declaration=_NUMPY)
    narrow = grad_tolerance(ref, case.replace(dtype="float32"), declaration=_NUMPY)
    half_ulp = 2.0**-8 * np.abs(ref.dlogits) + 2.0**-133 - 2.0**-149  # and bfloat16's least subnormal
    np.testing.assert_allclose(wide - narrow, half_ulp, rtol=1e-9)


def test_the_loss_bound_grows_with_the_offset_it_must_allow() -> None:
    x = np.array([[0.5, -1.0, 2.0, 0.0]])
    tol = [float(loss_tolerance(cross_entropy_reference(c), c, declaration=_NUMPY)[0])
           for c in (_case(x, [1]), _case(x + 1e6, [1]))]
    assert tol[1] > 1e5 * tol[0] / 10  # u (|lse| + ...) with |lse| ~ 1e6


# --- hunts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(kernels.PLANTED))
def test_planted_bug_is_caught_with_a_readable_counterexample(name: str) -> None:
    k = kernels.PLANTED[name]
    d = k.declaration
    report = normprops.hunt_kernel(k.func, op=k.op, families=[k.family], max_examples=100, seed=0,
                                   dtype=k.dtype, softcap=d.softcap, loss_reduction=d.reduction,
                                   threads=1, reduction="tree")
    assert not report.passed
    message = report.failures[0].message
    assert ("loss[" if k.op == "cross_entropy" else "dlogits[row ") in message, message
    text = str(report)
    assert "input: N=" in text and "rows not ignored" in text, text


@pytest.mark.parametrize("name", ["ce", "ce_backward", "ce_softcap30"])
def test_correct_kernels_pass_every_family(name: str) -> None:
    k = kernels.CORRECT[name]
    d = k.declaration
    normprops.assert_robust(k.func, op=k.op, max_examples=15, seed=0, softcap=d.softcap,
                            threads=1, reduction="tree")


def test_a_bfloat16_user_kernel_returns_dlogits_in_bfloat16() -> None:
    normprops.assert_robust(kernels.ce_backward, op="cross_entropy_backward", dtype="bfloat16",
                            families=["dominant", "ordinary"], max_examples=20, seed=0, threads=1,
                            reduction="tree")


def test_pytorch_cpu_entries_are_clean() -> None:
    pytest.importorskip("torch")
    from normprops.hunt import HuntConfig, hunt
    from normprops.launch import target_from_spec
    from normprops.specs import KERNELS

    specs = [k for k in KERNELS if k.backend == "torch-cpu" and k.op.startswith("cross_entropy")]
    assert len(specs) == 8
    for spec in specs:
        target = target_from_spec(spec)
        for family in ("dominant", "ignored", "offset"):
            result = hunt(target, family=family, config=HuntConfig(max_examples=10, seed=0))
            assert result.passed, (spec.label, family, result.failures[0].message())


def test_the_vocab_family_draws_released_vocabularies() -> None:
    @settings(max_examples=10, deadline=None, database=None, derandomize=True)
    @given(case=cross_entropy_cases("vocab"))
    def check(case: CrossEntropyCase) -> None:
        assert case.logits.shape[1] in VOCABULARIES and case.logits.shape[0] <= 2

    check()
    assert {32000, 50257, 128256, 151936, 256000, 256001, 31999} <= set(VOCABULARIES)


@pytest.mark.parametrize("family", ["vocab", "ragged"])
def test_a_kernel_of_even_vocabularies_is_drawn_the_next_even_one(family: str) -> None:
    """QuACK's bfloat16 loss takes even vocabularies only: each drawn one is raised to the next
    even width, so 50257 is hunted as 50258 and 33 as 34."""
    widths = []

    @settings(max_examples=40, deadline=None, database=None, derandomize=True)
    @given(case=cross_entropy_cases(family, vocab_multiple_of=2))
    def check(case: CrossEntropyCase) -> None:
        widths.append(case.logits.shape[1])

    check()
    assert widths and all(v % 2 == 0 for v in widths)
    drawn = set(VOCABULARIES) if family == "vocab" else {2, 3, 5, 7, 31, 33, 63, 65, 127, 129}
    assert any(v - 1 in drawn for v in widths)
    with pytest.raises(ValueError, match="vocab_multiple_of must be a positive int but was 0"):
        CrossEntropyDeclaration(vocab_multiple_of=0)


def test_a_gradient_case_of_a_mean_carries_one_dloss() -> None:
    from normprops.ops.cross_entropy_families import cross_entropy_case

    case = cross_entropy_case("ordinary", N=3, V=5, seed=1, spread=1.0, dtype="float32", smoothing=0.0)
    grad = with_dloss(case, "mean", reduction="mean")
    assert grad.dloss.shape == () and grad.op == "cross_entropy_backward" and grad.reduction == "mean"
    again = as_declared(grad, declaration=CrossEntropyDeclaration(softcap=30.0, reduction="mean"))
    assert again.softcap == 30.0 and again.params["softcap"] == 30.0


# --- the declaration ------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, match", [
    pytest.param({"softcap": 0}, r"--softcap \(softcap=\) must be positive", id="softcap-0"),
    pytest.param({"softcap": "x"}, r"--softcap \(softcap=\) must be a number", id="softcap-text"),
    pytest.param({"loss_reduction": "avg"},
                 r"--loss-reduction \(loss_reduction=\) must be one of none, mean, sum", id="reduction"),
    pytest.param({"z_loss": 2.0}, r"--z-loss \(z_loss=\) must be a number in \[0, 1\)", id="z_loss"),
])
def test_a_bad_declaration_is_named(kw, match) -> None:
    with pytest.raises(UsageError, match=match):
        normprops.hunt_kernel(kernels.ce, op="cross_entropy", max_examples=1, **kw)


def test_a_cross_entropy_keyword_on_another_op_is_refused() -> None:
    with pytest.raises(UsageError, match="applies to --op cross_entropy"):
        normprops.hunt_kernel(lambda x: x, op="softmax", softcap=30.0, max_examples=1)


def test_the_cli_catches_the_shift_unsafe_loss_and_replays_its_fixture(tmp_path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "normprops", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)

    run = cli("hunt", "--op", "cross_entropy", "--impl", f"{IMPL}:ce_no_max", "--families", "offset",
              "--seed", "0", "--max-examples", "50", "--fixtures-dir", "fx")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "offset" in run.stdout and "loss[row 0]" in run.stdout
    assert sorted((tmp_path / "fx" / "cross_entropy").glob("*.json"))
    bad = cli("replay", "--op", "cross_entropy", "--impl", f"{IMPL}:ce_no_max", "--fixtures-dir", "fx")
    good = cli("replay", "--op", "cross_entropy", "--impl", f"{IMPL}:ce", "--fixtures-dir", "fx")
    assert bad.returncode == 1 and "FAIL" in bad.stdout, bad.stdout + bad.stderr
    assert good.returncode == 0, good.stdout + good.stderr


def test_a_kernel_that_writes_into_its_target_breaks_the_contract() -> None:
    def writes_target(logits, target, ignore_index, label_smoothing):
        out = kernels.ce(logits, target, ignore_index, label_smoothing)
        target[...] = 0
        return out

    report = normprops.hunt_kernel(writes_target, op="cross_entropy", families=["ordinary"],
                                   max_examples=5, seed=0)
    assert not report.passed and "modified its input target" in report.failures[0].message


# --- the case strategy both loss ops share -----------------------------------------------------


def _fingerprints(strategy, count: int = 4) -> list[str]:
    """The first ``count`` draws of ``strategy`` at seed 0, each as its arrays' bytes and its repr."""
    from hypothesis import seed

    found: list[str] = []

    @seed(0)
    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def draw(case) -> None:
        parts = [repr(case), repr((case.softcap, case.z_loss, case.reduction))]
        parts += [f"{k}:{np.asarray(v).shape}:{np.asarray(v).tobytes().hex()}"
                  for k, v in sorted(case.fields().items())]
        found.append("|".join(parts))

    draw()
    return found


@pytest.mark.parametrize("op", ["cross_entropy", "cross_entropy_backward", "linear_cross_entropy",
                                "linear_cross_entropy_backward"])
@pytest.mark.parametrize("declared", [
    pytest.param({}, id="default"),
    pytest.param({"smoothing": False, "reduction": "mean"}, id="no-smoothing-mean"),
    pytest.param({"softcap": 30.0, "z_loss": 1e-4, "reduction": "sum"}, id="softcap-z-sum"),
])
def test_each_loss_op_draws_its_families_cases_as_declared(op: str, declared: dict) -> None:
    """The shared case strategy draws, seed for seed, what the op's families module draws with the
    declaration's smoothings, reduction and (for a gradient) dloss, each case then as declared."""
    from dataclasses import replace

    from normprops.ops import get_op
    from normprops.ops.cross_entropy import SMOOTHINGS
    from normprops.ops.linear_cross_entropy import as_declared as linear_as_declared
    from normprops.ops.linear_cross_entropy_families import linear_cross_entropy_cases

    spec = get_op(op)
    declaration = replace(spec.named.default_declaration, **declared)
    linear = op.startswith("linear_")
    draw, declare = ((linear_cross_entropy_cases, linear_as_declared) if linear
                     else (cross_entropy_cases, as_declared))
    smoothing = SMOOTHINGS if declaration.smoothing else (0.0,)
    for family, dtype in (("ordinary", "float32"), ("ignored", "bfloat16"), ("offset", "float32")):
        direct = draw(family, dtypes=(dtype,), smoothing=smoothing, gradient=op.endswith("_backward"),
                      reduction=declaration.reduction).map(lambda c: declare(c, declaration=declaration))
        got = _fingerprints(spec.named.cases(family, dtype, declaration))
        assert got == _fingerprints(direct), (op, family, dtype)
        assert all(f"reduction={declaration.reduction}" in g for g in got)
        if not declaration.smoothing:
            assert all("label_smoothing=0.0," in g for g in got), got
    with pytest.raises(ValueError, match="family must be one of .* but was 'huge'"):
        spec.named.cases("huge", "float32", declaration)


# --- QuACK's entries, without QuACK ------------------------------------------------------------


def test_quacks_entries_declare_what_it_computes() -> None:
    from normprops.specs import KERNELS

    entries = {k.name: k for k in KERNELS if k.backend == "quack" and k.op.startswith("cross_entropy")}
    assert sorted(entries) == sorted(f"quack.ce{r}{b}-{d}" for r in ("", ".mean") for b in ("", ".backward")
                                     for d in ("f32", "bf16"))
    for name, k in entries.items():
        d = k.op_declaration
        assert not d.smoothing and d.softcap is None and d.z_loss == 0.0, name
        assert d.reduction == ("mean" if ".mean" in name else "none"), name
        assert k.claims == frozenset(), name  # hunted on a GPU before it claims
        # the NaN of a bfloat16 row of 151936 logits, met by every bfloat16 hunt of vocab
        assert [(b.family, b.property) for b in k.bugs] == ([("vocab", "finite")] if k.dtype == "bfloat16"
                                                            else []), name
        # bfloat16 rows are copied in 4-byte pieces: even vocabularies only
        assert d.vocab_multiple_of == (2 if k.dtype == "bfloat16" else 1), name
        assert k.error_model.ftz and k.device == "cuda" and k.framework == "torch", name
        assert "batch_invariance" in k.exempt, name


def test_quacks_adapters_call_its_cross_entropy(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from normprops.backends import cross_entropy_kernels as ce

    calls = stand_in_quack(monkeypatch, "cross_entropy", cross_entropy=quack_cross_entropy)
    logits = torch.tensor([[0.5, -1.0, 2.0, 0.25], [1.0, 2.0, 3.0, -1.0]], dtype=torch.bfloat16)
    kept = logits.clone()
    target = torch.tensor([-100, 2])
    loss = ce.quack_ce(logits, target, -100, 0.0)
    assert loss.dtype == torch.float32 and loss.shape == (2,) and loss[0] == 0
    mean = ce.quack_ce_mean(logits, target, -100, 0.0)
    assert mean.shape == () and torch.equal(mean, loss[1])
    dloss = torch.tensor([3.0, -2.0])
    grad = ce.quack_ce_backward(dloss, logits, target, -100, 0.0)
    want = -2.0 * (torch.softmax(logits.float()[1], 0) - torch.tensor([0.0, 0.0, 1.0, 0.0]))
    assert grad.dtype == torch.bfloat16 and torch.equal(grad[0], torch.zeros(4, dtype=torch.bfloat16))
    assert torch.equal(grad[1], want.to(torch.bfloat16))
    ce.quack_ce_mean_backward(torch.tensor(1.0), logits, target, -100, 0.0)
    assert torch.equal(logits, kept)  # the caller's logits untouched
    assert calls == [((2, 4), "torch.bfloat16", -100, "none"), ((2, 4), "torch.bfloat16", -100, "mean"),
                     ((2, 4), "torch.bfloat16", -100, "none"), ((2, 4), "torch.bfloat16", -100, "mean")]
    with pytest.raises(ValueError, match="QuACK's cross_entropy takes no label smoothing"):
        ce.quack_ce(logits, target, -100, 0.1)


@pytest.mark.parametrize("name", ["quack.ce.backward-bf16", "quack.ce.mean-f32"])
def test_quacks_entries_hunt_as_declared(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's entry, its declaration as it stands but on the CPU, hunted over a stand-in
    that computes QuACK's contract correctly: clean, never handed a label smoothing, and in
    bfloat16 never an odd vocabulary (which the stand-in refuses, as QuACK does)."""
    pytest.importorskip("torch")
    from dataclasses import replace

    from normprops.declaration import Declaration
    from normprops.hunt import HuntConfig, hunt
    from normprops.launch import target_from_callable
    from normprops.specs import KERNELS

    calls = stand_in_quack(monkeypatch, "cross_entropy", cross_entropy=quack_cross_entropy)
    spec = next(k for k in KERNELS if k.name == name)
    target = target_from_callable(spec.load(), declaration=replace(Declaration.from_spec(spec), device="cpu"))
    for family in ("ignored", "target_extremes", "ragged"):
        result = hunt(target, family=family, config=HuntConfig(max_examples=10, seed=0))
        assert result.passed, (name, family, result.failures[0].message())
    assert calls and {c[3] for c in calls} == {spec.op_declaration.reduction}
    assert any(c[0][1] % 2 for c in calls) == (spec.dtype == "float32")


def test_quacks_arithmetic_emulated_is_exact_on_small_logits_and_off_at_large_ones() -> None:
    """scripts/quack_ce_emulation.py: QuACK's exponentials take their argument as fma(x, L, -rn(c L)),
    c the row max or the lse, rounded at the logits' magnitude. Clean where the logits are small;
    past the bound on the gradient where they are offset far from 0."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "quack_ce_emulation.py"
    spec = importlib.util.spec_from_file_location("quack_ce_emulation", path)
    emulation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emulation)
    keywords = dict(dtype="float32", smoothing=False, ftz=True, ignore=["batch_invariance"], seed=0)
    for op, fn in (("cross_entropy", emulation.quack_ce),
                   ("cross_entropy_backward", emulation.quack_ce_backward("float32"))):
        clean = normprops.hunt_kernel(fn, op=op, families=["ignored", "ragged"], max_examples=20, **keywords)
        assert clean.passed, clean.failures[0].message
    off = normprops.hunt_kernel(emulation.quack_ce_backward("float32"), op="cross_entropy_backward",
                                families=["offset"], max_examples=50, **keywords)
    assert not off.passed and {f.property for f in off.failures} == {"accuracy"}


@pytest.mark.parametrize("present", [False, True], ids=["missing", "importable"])
def test_an_entry_whose_module_is_missing_is_skipped_not_failed(present: bool, monkeypatch) -> None:
    """optax's entries run on the jax backend but import optax too: where jax imports and optax
    does not, they are not usable (one reason, naming the module and the install), never hunted
    into contract failures."""
    import dataclasses
    import importlib.util

    from normprops import specs
    from normprops.specs import KERNELS, kernel_status

    spec = next(k for k in KERNELS if k.name == "optax.ce-f32")
    assert spec.imports == ("optax",)
    monkeypatch.setattr(specs, "backend_status", lambda backend: (True, "jax 0.0 on cpu"))
    real = importlib.util.find_spec

    def find_spec(name: str, *args):
        if name == "optax":
            return real("json") if present else None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    usable, why = kernel_status(spec)
    assert usable == present
    assert present or why == "needs optax, not importable here (pip install optax)"
    assert kernel_status(dataclasses.replace(spec, imports=()))[0]
