"""The fused loss ops (linear_cross_entropy and its backward): the exact reference against mpmath and
PyTorch in float64, the families' exact construction of their logits through h and w, the bounds
against the correct chunked kernels (tight enough to catch the planted ones and a kernel that rounds
its logits undeclared), the planted bugs caught with readable counterexamples, PyTorch's CPU entries
clean, the declaration, and a fixture replayed through the CLI."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from quack_stand_in import quack_linear_cross_entropy_func, stand_in_quack

import normprops
from normprops.declaration import Declaration
from normprops.dtypes import to_dtype
from normprops.examples import linear_cross_entropy_kernels as kernels
from normprops.ops import get_op
from normprops.ops.cross_entropy_families import cross_entropy_case, with_dloss
from normprops.ops.linear_cross_entropy_families import linear_case, linear_cross_entropy_cases
from normprops.ops.linear_cross_entropy_math import (
    FAMILIES,
    LinearCrossEntropyCase,
    LinearCrossEntropyDeclaration,
)

IMPL = "normprops.examples.linear_cross_entropy_kernels"
_PLAIN = kernels.CORRECT["lce"].declaration
LOSS = get_op("linear_cross_entropy").named
GRAD = get_op("linear_cross_entropy_backward").named


def _case(seed: int = 3, **kw) -> LinearCrossEntropyCase:
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((4, 6)).astype(np.float32)
    w = (rng.standard_normal((13, 6)) * 2).astype(np.float32)
    w[7, 0] = 40.0  # class 7 dominant in row 0 where h[0, 0] > 0
    h[0, 0] = 1.0
    target = np.array([7, 3, -100, 12])
    dloss = np.array([1.0, -2.5, 3.0, 0.125], np.float32)
    return LinearCrossEntropyCase(h, w, target, dloss=dloss, **kw)


# --- the reference ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    pytest.param({}, id="plain"),
    pytest.param({"label_smoothing": 0.1}, id="smoothing"),
    pytest.param({"softcap": 30.0}, id="softcap"),
    pytest.param({"z_loss": 1e-4}, id="z_loss"),
])
def test_reference_matches_mpmath(kw) -> None:
    case = _case(**kw)
    for named, which in ((LOSS, ("loss",)), (GRAD, ("dh", "dw"))):
        subject = case.replace(dloss=None) if named is LOSS else case
        fast = named.exact(subject, _PLAIN, "float64")
        slow = named.exact(subject, _PLAIN, "mpmath")
        for name in which:
            np.testing.assert_allclose(fast.exact[name], slow.exact[name], rtol=1e-11, atol=1e-300,
                                       err_msg=name)
    assert fast.exact["dh"][2].tolist() == [0.0] * 6  # the ignored row


def test_reference_matches_pytorch_in_float64() -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    case = _case()
    for eps in (0.0, 0.1):
        h = torch.from_numpy(case.h).double().requires_grad_(True)
        w = torch.from_numpy(case.w).double().requires_grad_(True)
        loss = F.cross_entropy(F.linear(h, w), torch.from_numpy(case.target), label_smoothing=eps,
                               reduction="none")
        loss.backward(torch.from_numpy(case.dloss).double())
        subject = case.replace(label_smoothing=eps)
        np.testing.assert_allclose(LOSS.exact(subject.replace(dloss=None), _PLAIN, "float64").exact["loss"],
                                   loss.detach().numpy(), rtol=1e-12, atol=1e-15)
        # (row 0's loss is 9e-11: PyTorch's lse - x_t cancels to 1e-16 absolutely; mpmath agrees
        # with ours to 1e-11 relatively, test_reference_matches_mpmath)
        grads = GRAD.exact(subject, _PLAIN, "float64").exact
        np.testing.assert_allclose(grads["dh"], h.grad.numpy(), rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(grads["dw"], w.grad.numpy(), rtol=1e-11, atol=1e-14)


def test_the_families_build_their_logits_exactly_through_h_and_w() -> None:
    ce = cross_entropy_case("dominant", N=3, V=50, seed=4, gap=20.0, target_top=True, dtype="bfloat16",
                            smoothing=0.0)
    case = linear_case(ce, mix_cols=0, mix_scale=0.1)
    assert case.h.shape == (3, 3) and case.w.shape == (50, 3)
    np.testing.assert_array_equal(case.logits(), ce.logits.astype(np.float64))
    offset = cross_entropy_case("offset", N=2, V=9, seed=1, spread=1.0, offset=-1e6, dtype="float32",
                                smoothing=0.0)
    shifted = linear_case(offset, mix_cols=7, mix_scale=0.01)
    assert shifted.h.shape[1] == 2 + 1 + 7 and np.all(shifted.h[:, 2] == 1.0)
    assert np.all(shifted.w[:, 2] == -1e6)  # the bias-like column
    assert np.all(np.abs(shifted.logits() + 1e6) < 10)


def test_the_logits_error_enters_the_bound() -> None:
    """The matmul's error H u sum |h_k w_k| widens the loss bound with |h| |w| at fixed logits."""
    case = _case().replace(dloss=None)
    scaled = case.replace(h=case.h * 1024, w=case.w / 1024)  # the same products, exactly
    np.testing.assert_array_equal(case.logits(), scaled.logits())
    wide = case.replace(h=np.concatenate([case.h, np.full((4, 1), 1e4, np.float32)], axis=1),
                        w=np.concatenate([case.w, np.zeros((13, 1), np.float32)], axis=1))
    np.testing.assert_array_equal(case.logits(), wide.logits())  # a column of h against zeros in w
    base = LOSS.exact(case, _PLAIN, "float64").tol["loss"]
    np.testing.assert_allclose(LOSS.exact(scaled, _PLAIN, "float64").tol["loss"], base, rtol=1e-12)
    # |h_k w_k| is 0 for the new column: only the depth H grows, by one of six.
    grown = LOSS.exact(wide, _PLAIN, "float64").tol["loss"]
    assert np.all(grown[[0, 1, 3]] > base[[0, 1, 3]]) and np.all(grown < 2 * base)


# --- the bounds --------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_correct_kernels_stay_within_the_bound_and_not_far_below_it(family: str) -> None:
    """The chunked numpy kernels' worst err/tol over 15 drawn cases is at most 1 for the loss, dh and
    dw, and not far below it (a bound no correct kernel comes near would hide bugs)."""
    worst = {"loss": 0.0, "dh": 0.0, "dw": 0.0}

    @settings(max_examples=15, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=linear_cross_entropy_cases(family, gradient=True))
    def check(case: LinearCrossEntropyCase) -> None:
        got = {"loss": kernels.lce(*case.inputs()[1:])}
        got["dh"], got["dw"] = kernels.lce_backward(*case.inputs())
        loss = LOSS.exact(case.replace(dloss=None), _PLAIN, "float64")
        grads = GRAD.exact(case, _PLAIN, "float64")
        exact, tols = {**loss.exact, **grads.exact}, {**loss.tol, **grads.tol}
        for name, value in got.items():
            ratio = np.abs(np.asarray(value, np.float64) - exact[name]) / tols[name]
            assert np.all(ratio <= 1), (name, case, float(np.nanmax(ratio)))
            worst[name] = max(worst[name], float(np.nanmax(ratio)))

    check()
    # The loss at a released vocabulary: the declared plain loop's depth V - 1 (256000) is some
    # 3000 times the chunked sums' (62 chunks after a pairwise sum of 4096), so its bound sits far
    # above the kernel's error there; the gradients' stay near theirs.
    assert worst["loss"] > (3e-4 if family == "vocab" else 0.01) or family == "ignored", worst
    assert worst["dh"] > 0.05 and worst["dw"] > 0.05, worst


def _rounding_logits(h, w, target, ignore_index, label_smoothing):
    """The chunked loss with each logit rounded to bfloat16 first (F.linear on bfloat16 operands)."""
    x = to_dtype(np.asarray(h, np.float32) @ np.asarray(w, np.float32).T, "bfloat16")
    eye = np.eye(x.shape[0], dtype=np.float32)
    return kernels.lce(eye, x.T.copy(), target, ignore_index, label_smoothing)


def test_logits_rounded_to_the_storage_type_must_be_declared() -> None:
    """A kernel that rounds its logits to bfloat16 is caught unless it declares it (the bound is
    tight enough to see half an ulp of bfloat16 on the logits), and passes once declared."""
    cases = [linear_case(cross_entropy_case("large_logits", N=4, V=64, seed=s, top=100.0,
                                            dtype="bfloat16", smoothing=0.0), mix_cols=16, mix_scale=1.0)
             for s in range(3)]
    rounded = LinearCrossEntropyDeclaration(_PLAIN.model, logits_rounded=True)
    for case in cases:
        got = _rounding_logits(*case.inputs())
        loose = LOSS.exact(case, rounded, "float64")
        assert np.all(np.abs(got - loose.exact["loss"]) <= loose.tol["loss"])
    strict = [LOSS.exact(c, _PLAIN, "float64") for c in cases]
    assert any(np.any(np.abs(_rounding_logits(*c.inputs()) - s.exact["loss"]) > s.tol["loss"])
               for c, s in zip(cases, strict))


# --- hunts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(kernels.PLANTED))
def test_planted_bug_is_caught_with_a_readable_counterexample(name: str) -> None:
    k = kernels.PLANTED[name]
    d = k.declaration
    report = normprops.hunt_kernel(k.func, op=k.op, families=[k.family], max_examples=100, seed=0,
                                   dtype=k.dtype, softcap=d.softcap, loss_reduction=d.reduction,
                                   threads=1)
    assert not report.passed
    message = report.failures[0].message
    shown = ("loss[row ",) if k.op == "linear_cross_entropy" else ("dh[row ", "dw[class ")
    assert any(s in message for s in shown), message
    text = str(report)
    assert "input: N=" in text and " H=" in text and "rows not ignored" in text, text


@pytest.mark.parametrize("name", ["lce", "lce_backward", "lce_softcap30"])
def test_correct_kernels_pass_every_family(name: str) -> None:
    k = kernels.CORRECT[name]
    normprops.assert_robust(k.func, op=k.op, max_examples=8, seed=0, softcap=k.declaration.softcap,
                            threads=1)


def test_a_bfloat16_user_kernel_returns_dh_and_dw_in_bfloat16() -> None:
    normprops.assert_robust(kernels.lce_backward, op="linear_cross_entropy_backward", dtype="bfloat16",
                            families=["dominant", "ordinary"], max_examples=10, seed=0, threads=1)


def test_a_gradient_that_returns_one_array_breaks_the_contract() -> None:
    def dh_only(dloss, h, w, target, ignore_index, label_smoothing):
        return kernels.lce_backward(dloss, h, w, target, ignore_index, label_smoothing)[0]

    report = normprops.hunt_kernel(dh_only, op="linear_cross_entropy_backward", families=["ordinary"],
                                   max_examples=3, seed=0)
    assert not report.passed and "returns (dh, dw)" in report.failures[0].message


def test_pytorch_cpu_entries_are_clean() -> None:
    pytest.importorskip("torch")
    from normprops.hunt import HuntConfig, hunt
    from normprops.launch import target_from_spec
    from normprops.specs import KERNELS

    specs = [k for k in KERNELS if k.backend == "torch-cpu" and k.op.startswith("linear_cross_entropy")]
    assert len(specs) == 8
    for spec in specs:
        target = target_from_spec(spec)
        for family in ("dominant", "ignored"):
            result = hunt(target, family=family, config=HuntConfig(max_examples=6, seed=0))
            assert result.passed, (spec.label, family, result.failure.message())
    # F.linear on bfloat16 operands rounds the logits to bfloat16: clean as declared, caught if not.
    spec = next(k for k in specs if k.name == "F.lce-bf16")
    strict = replace(spec, op_declaration=replace(spec.op_declaration, logits_rounded=False))
    assert not hunt(target_from_spec(strict), family="ordinary",
                    config=HuntConfig(max_examples=10, seed=0)).passed


def test_the_gradient_case_of_a_mean_carries_one_dloss() -> None:
    ce = with_dloss(cross_entropy_case("ordinary", N=3, V=5, seed=1, spread=1.0, dtype="float32",
                                       smoothing=0.0), "mean", reduction="mean")
    case = linear_case(ce, mix_cols=1, mix_scale=0.1)
    assert case.dloss.shape == () and case.op == "linear_cross_entropy_backward"
    assert GRAD.outputs(case, _PLAIN, 2) == (("dh", (3, 4), "float32"), ("dw", (5, 4), "float32"))


# --- the declaration ------------------------------------------------------------------------------


def test_the_declaration_carries_the_row_reduction_and_the_rounded_logits() -> None:
    declared = Declaration.declare(op="linear_cross_entropy_backward", row_reduction="tree")
    assert declared.op_promises.model.row_reduction == "tree"
    assert Declaration.declare(op="linear_cross_entropy_backward").op_promises.model.row_reduction == \
        "sequential"
    again = Declaration.from_json(declared.to_json())
    assert again.op_promises.model.row_reduction == "tree"
    rounded = LinearCrossEntropyDeclaration(_PLAIN.model, softcap=30.0, logits_rounded=True)
    back = LinearCrossEntropyDeclaration.from_json(rounded.to_json(), _PLAIN.model)
    assert back.logits_rounded and back.softcap == 30.0


def test_the_entries_declare_dws_row_sum_on_the_gradient_only() -> None:
    from normprops.specs import KERNELS

    entries = [k for k in KERNELS if k.op.startswith("linear_cross_entropy")]
    assert {k.backend for k in entries} == {"numpy", "torch-cpu", "torch-cuda", "liger", "quack", "cce"}
    for k in entries:
        gradient = k.op.endswith("_backward")
        assert k.row_reduction == ("sequential" if gradient else "blocks"), k.label
        assert k.op_declaration.model.row_reduction == "sequential", k.label
    rounded = {k.name for k in entries if k.op_declaration.logits_rounded}
    assert "cce.lce-bf16" not in rounded and {"F.lce-bf16", "liger.flce-bf16", "quack.lce-bf16"} <= rounded


def test_ligers_float32_accumulator_entry_passes_accum_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import types

    from normprops.backends import linear_cross_entropy_kernels as lce
    from normprops.specs import KERNELS

    calls = []

    class Function:  # Liger's autograd Function, standing in: records its arguments
        @staticmethod
        def apply(h, w, target, *args):
            calls.append(args)
            return (torch.nn.functional.cross_entropy(h.float() @ w.float().T, target, reduction="none"),)

    module = types.ModuleType("liger_kernel.ops.fused_linear_cross_entropy")
    module.LigerFusedLinearCrossEntropyFunction = Function
    monkeypatch.setitem(sys.modules, "liger_kernel.ops.fused_linear_cross_entropy", module)
    h, w = torch.ones(2, 3), torch.ones(4, 3)
    lce.liger_flce_acc32(h, w, torch.tensor([0, 1]), -100, 0.0)
    lce.liger_flce(h, w, torch.tensor([0, 1]), -100, 0.0)
    # (bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
    # return_z_loss, accum_dtype)
    assert calls[0][-1] is torch.float32 and calls[1][-1] is None
    entries = [k.name for k in KERNELS if k.name.startswith("liger.flce.acc32")]
    assert entries == ["liger.flce.acc32.backward-bf16"]  # its loss is liger.flce's


def test_a_bad_case_is_named() -> None:
    with pytest.raises(ValueError, match=r"h must be \(N, H\) and w \(V, H\)"):
        LinearCrossEntropyCase(np.zeros((2, 3), np.float32), np.zeros((5, 4), np.float32),
                               np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="target 9 is outside"):
        LinearCrossEntropyCase(np.zeros((1, 3), np.float32), np.zeros((5, 3), np.float32), np.array([9]))


def test_the_cli_catches_the_dropped_softcap_and_replays_its_fixture(tmp_path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "normprops", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)

    run = cli("hunt", "--op", "linear_cross_entropy", "--impl", f"{IMPL}:lce_softcap_dropped",
              "--families", "softcap", "--softcap", "30", "--seed", "0", "--max-examples", "50",
              "--fixtures-dir", "fx")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "softcap" in run.stdout and "loss[row " in run.stdout
    assert sorted((tmp_path / "fx" / "linear_cross_entropy").glob("*.json"))
    bad = cli("replay", "--op", "linear_cross_entropy", "--impl", f"{IMPL}:lce_softcap_dropped",
              "--softcap", "30", "--fixtures-dir", "fx")
    good = cli("replay", "--op", "linear_cross_entropy", "--impl", f"{IMPL}:lce_softcap30",
               "--softcap", "30", "--fixtures-dir", "fx")
    assert bad.returncode == 1 and "FAIL" in bad.stdout, bad.stdout + bad.stderr
    assert good.returncode == 0, good.stdout + good.stderr


# --- QuACK's entries, without QuACK ------------------------------------------------------------


def test_quacks_entries_declare_what_it_computes() -> None:
    from normprops.specs import KERNELS

    entries = {k.name: k for k in KERNELS if k.backend == "quack" and k.op.startswith("linear_")}
    assert sorted(entries) == sorted(f"quack.lce{r}{b}-{d}" for r in ("", ".mean") for b in ("", ".backward")
                                     for d in ("f32", "bf16"))
    for name, k in entries.items():
        d = k.op_declaration
        assert not d.smoothing and d.softcap is None and d.logits_rounded, name  # F.linear's logits
        assert d.reduction == ("mean" if ".mean" in name else "none"), name
        assert k.claims == frozenset() and k.error_model.ftz and k.device == "cuda", name


def test_quacks_adapters_call_its_linear_cross_entropy(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from normprops.backends import linear_cross_entropy_kernels as lce

    calls = stand_in_quack(monkeypatch, "linear_cross_entropy",
                           linear_cross_entropy_func=quack_linear_cross_entropy_func)
    h = torch.tensor([[1.0, 0.5], [-1.0, 2.0], [0.25, 0.0]], dtype=torch.bfloat16)
    w = torch.tensor([[0.5, -1.0], [2.0, 1.0], [1.0, 3.0], [0.0, 1.0]], dtype=torch.bfloat16)
    target = torch.tensor([3, 0, 0])
    loss = lce.quack_lce(h, w, target, 0, 0.0)  # ignore_index 0: rows 1 and 2 ignored
    assert loss.dtype == torch.float32 and loss.shape == (3,) and not loss[1:].any() and loss[0] > 0
    dh, dw = lce.quack_lce_mean_backward(torch.tensor(2.0), h, w, target, 0, 0.0)
    assert dh.dtype == dw.dtype == torch.bfloat16 and not dh[1:].any()
    assert calls == [((3, 4), "torch.bfloat16", 0, "none"), ((3, 4), "torch.bfloat16", 0, "mean")]
    with pytest.raises(ValueError, match="takes no label smoothing"):
        lce.quack_lce(h, w, target, -100, 0.1)


def test_quacks_entry_hunts_as_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's gradient entry, as declared but on the CPU, over a stand-in computing QuACK's
    contract correctly: clean in a family of ignored rows."""
    pytest.importorskip("torch")
    from normprops.hunt import HuntConfig, hunt
    from normprops.launch import target_from_callable
    from normprops.specs import KERNELS

    calls = stand_in_quack(monkeypatch, "linear_cross_entropy",
                           linear_cross_entropy_func=quack_linear_cross_entropy_func)
    spec = next(k for k in KERNELS if k.name == "quack.lce.backward-f32")
    target = target_from_callable(spec.load(), declaration=replace(Declaration.from_spec(spec), device="cpu"))
    result = hunt(target, family="ignored", config=HuntConfig(max_examples=10, seed=0))
    assert result.passed, result.failures[0].message()
    assert calls and {c[3] for c in calls} == {"none"}
