"""Attention backward, fn(dout, q, k, v, mask, scale) -> (dq, dk, dv): the exact reference against
PyTorch's float64 autograd and closed forms, the bound's sanity, the families' promises, the
correct example kernels clean, each planted bug caught with a readable counterexample, the op
hunted end to end (CLI, API, fixtures), and PyTorch's SDPA backward on the CPU."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

import normprops
from normprops.examples import attention_backward_kernels as kernels
from normprops.examples.attention_backward_kernels import CORRECT, DECLARATION, PLANTED
from normprops.ops import get_op
from normprops.ops.attention_backward import (
    ATTENTION_BACKWARD,
    AttentionBackwardCase,
    attention_backward_reference,
    attention_backward_tolerance,
    backward_as_taken,
    backward_declaration,
)
from normprops.ops.attention_backward_families import (
    ATTENTION_BACKWARD_FAMILIES,
    FAMILY_LAYOUTS,
    attention_backward_cases,
)
from normprops.ops.attention_math import FOREIGN_ATTENTION, AttentionDeclaration, mask_layouts_of

F32 = np.float32
IMPL = "normprops.examples.attention_backward_kernels"
SEARCH = settings(max_examples=12, derandomize=True, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def _case(seed: int = 0, *, b=1, hq=2, hkv=1, lq=3, lk=5, d=8, dv=8, mask=None,
          dtype="float32") -> AttentionBackwardCase:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(F32) for s in
              ((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, dv), (b, hq, lq, dv))]
    return AttentionBackwardCase(*arrays[:3], mask, float(F32(1 / math.sqrt(d))), dtype=dtype,
                                 dout=arrays[3])


def _torch_grads(case: AttentionBackwardCase) -> tuple[np.ndarray, ...]:
    """The gradients by PyTorch's autograd through the formula in float64 (kv heads expanded by
    repeat_interleave, whose gradient sums them back): an oracle that shares no code with ours."""
    torch = pytest.importorskip("torch")
    q, k, v, dout = (torch.tensor(a.astype(np.float64), requires_grad=True)
                     for a in (case.q, case.k, case.v, case.dout))
    group = q.shape[1] // k.shape[1]
    s = case.scale * q @ k.repeat_interleave(group, 1).transpose(-1, -2)
    if case.mask is not None:
        s = s.masked_fill(~torch.from_numpy(case.mask), -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)  # a row with no kept key: P 0, no gradient
    out = p @ v.repeat_interleave(group, 1)
    out.backward(dout)
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


def _ratios(outs, case, declaration=DECLARATION) -> dict[str, float]:
    exact = ATTENTION_BACKWARD.named.exact(case, declaration, "float64")
    found = {}
    for name, got in zip(("dq", "dk", "dv"), outs):
        with np.errstate(all="ignore"):
            r = np.abs(np.asarray(got).astype(np.float64) - exact.exact[name]) / exact.tol[name]
        found[name] = float(np.max(np.where(np.isnan(r), np.inf, r)))
    return found


# --- the reference -------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ATTENTION_BACKWARD_FAMILIES)
def test_the_reference_agrees_with_torch_autograd_in_float64(family):
    @settings(SEARCH, max_examples=6)
    @given(attention_backward_cases(family, dtypes=("float32", "bfloat16")))
    def run(case):
        ref = attention_backward_reference(case.dout, case.q, case.k, case.v, case.mask, case.scale)
        tol = attention_backward_tolerance(ref, dtype=case.dtype)
        for name, mine, theirs, t in zip(("dq", "dk", "dv"), (ref.dq, ref.dk, ref.dv),
                                         _torch_grads(case), (tol.dq, tol.dk, tol.dv)):
            assert np.all(np.abs(mine - theirs) <= 1e-6 * t), f"{name} [{case!r}]"

    run()


def test_one_key_has_no_dq_nor_dk_and_dv_sums_dout_over_the_group():
    # One key: P = 1 whatever the scores, so dS = 0 and dv is the sum of dout over the queries.
    case = _case(lk=1, hq=4, hkv=2)
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, None, case.scale)
    # dP - row is dout.v - dout.v: zero but for float64's rounding of two sums in different orders.
    assert np.all(np.abs(ref.dq) <= 1e-12) and np.all(np.abs(ref.dk) <= 1e-12)
    want = case.dout.astype(np.float64).reshape(1, 2, 2, 3, 8).sum(axis=(2, 3))[:, :, None, :]
    np.testing.assert_allclose(ref.dv, want, rtol=1e-14)


def test_a_row_with_no_kept_key_has_zero_dq_and_adds_nothing():
    mask = np.ones((1, 1, 3, 5), bool)
    mask[0, 0, 1] = False
    case = _case(mask=mask)
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, mask, case.scale)
    assert not ref.dq[:, :, 1].any()
    # The same gradients without that row (its dout zeroed changes nothing).
    dout = case.dout.copy()
    dout[:, :, 1] = 99.0
    other = attention_backward_reference(dout, case.q, case.k, case.v, mask, case.scale)
    np.testing.assert_array_equal(other.dk, ref.dk)
    np.testing.assert_array_equal(other.dv, ref.dv)


def test_dout_of_the_wrong_shape_is_named():
    case = _case()
    with pytest.raises(ValueError, match=r"dout must have out's shape \(B, Hq, Lq, Dv\) = \(1, 2, 3, 8\)"):
        replace(case, dout=case.dout[..., :4])


# --- the bound -------------------------------------------------------------------------------------


def test_the_bound_is_positive_finite_and_no_looser_than_the_terms_it_charges():
    case = _case(seed=3, hq=4, hkv=2, lq=4, lk=40, d=32, dv=16)
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, None, case.scale)
    tol = attention_backward_tolerance(ref)
    for t in (tol.dq, tol.dk, tol.dv):
        assert np.all(np.isfinite(t)) and np.all(t > 0)
    # dq's bound is a few hundred roundings of the terms that cancel in dS, p_j (|dP_j| + |row| +
    # sum |dout||v_j|), times |scale| |k_j| (a plain loop: 6 k(40) of the softmax, k(32) of the
    # scores), never a relative tolerance of order one.
    p = ref.forward.p
    b = np.abs(ref.dout) @ ref.forward.v_abs.swapaxes(-1, -2)
    row = np.sum(np.abs(ref.dout) * np.abs(ref.forward.out), axis=-1)[..., None]
    size = abs(case.scale) * ((p * (np.abs(ref.dp) + row + b)) @ np.abs(ref.k))
    assert np.all(tol.dq <= 1000 * 2.0**-24 * size)
    # and at least one rounding of the result itself.
    assert np.all(tol.dq >= 2.0**-24 * np.abs(ref.dq))


def test_a_bfloat16_group_sum_is_allowed_only_where_declared_and_only_with_groups():
    grouped, alone = _case(hq=4, hkv=1), _case(hq=1, hkv=1)
    declared = backward_declaration(FOREIGN_ATTENTION, group_sum_dtype="bfloat16")
    for case, widens in ((grouped, True), (alone, False)):
        ref = attention_backward_reference(case.dout, case.q, case.k, case.v, None, case.scale)
        plain = attention_backward_tolerance(ref)
        loose = attention_backward_tolerance(ref, declaration=declared)
        assert np.array_equal(plain.dq, loose.dq)
        assert bool(np.all(loose.dv > plain.dv)) is widens and bool(np.all(loose.dk > plain.dk)) is widens


@pytest.mark.parametrize("name", list(CORRECT))
def test_the_correct_kernels_stay_well_inside_the_bound(name):
    """The examples' float32 errors, against the bound at their declared depth: inside it with room
    (the measured worst over 1000 examples a family is 0.16; docs/tolerances.md)."""
    @settings(SEARCH, max_examples=5)
    @given(attention_backward_cases(dtypes=("float32",)))
    def run(case):
        ratios = _ratios(CORRECT[name].func(*case.inputs()), case)
        assert max(ratios.values()) <= 0.5, f"{ratios} [{case!r}]"

    run()


# --- the families ----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ATTENTION_BACKWARD_FAMILIES)
def test_each_family_draws_what_it_promises(family):
    @settings(SEARCH, max_examples=8)
    @given(attention_backward_cases(family, dtypes=("float32", "bfloat16")))
    def run(case):
        assert case.family == family and case.op == "attention_backward"
        assert mask_layouts_of(case.mask) & FAMILY_LAYOUTS[family]
        ref = attention_backward_reference(case.dout, case.q, case.k, case.v, case.mask, case.scale)
        fwd = ref.forward
        if family == "low_lse":
            assert case.mask is not None and case.k.shape[2] % 128 == 64
            assert np.all(fwd.lse[~fwd.empty] < -88.7)
        elif family == "orthogonal_dout":
            # The row term vanishes but for dout's rounding.
            size = np.sum(np.abs(ref.dout) * np.abs(np.nan_to_num(fwd.out)), axis=-1)
            assert np.all(np.abs(ref.row) <= 2.0**-7 * size + 1e-30)
        elif family == "cancelling_dout" and case.dtype == "float32":
            # dP_j - row is small beside the terms it is the difference of.
            spread = np.abs(ref.dp - ref.row[..., None])
            terms = np.abs(ref.dout) @ np.abs(np.repeat(case.v, case.group, axis=1)).swapaxes(-1, -2)
            assert np.all(spread <= 0.2 * terms + 1e-30)
        elif family == "one_hot_dout":
            assert np.all(np.count_nonzero(case.dout, axis=-1) == 1)
        elif family == "fully_masked":
            assert fwd.empty.any() or case.mask is not None

    run()


def test_a_low_lse_case_is_one_cudnn_backward_met():
    """pytorch#196678: a mask, Lk = 64 mod 128, every row's lse below -88.7, bfloat16; the family
    draws it in its first examples, at the head dimensions cuDNN takes (multiples of 8)."""
    seen = []

    @settings(SEARCH, max_examples=20)
    @given(attention_backward_cases("low_lse", dtypes=("bfloat16",)))
    def run(case):
        seen.append(case)

    run()
    assert any(c.mask is not None and c.k.shape[2] in (64, 192, 320) and c.q.shape[3] % 8 == 0
               for c in seen)


def test_a_case_widened_and_without_gqa_is_the_same_gradient():
    case = _case(seed=2, hq=4, hkv=2, d=5, dv=3)
    taken = backward_as_taken(case, declaration=AttentionDeclaration(head_dims_multiple_of=8, gqa=False))
    assert taken.q.shape == (1, 4, 3, 8) and taken.dout.shape == (1, 4, 3, 8)
    drawn = attention_backward_reference(case.dout, case.q, case.k, case.v, None, case.scale)
    wide = attention_backward_reference(taken.dout, taken.q, taken.k, taken.v, None, taken.scale)
    np.testing.assert_allclose(wide.dq[..., :5], drawn.dq, rtol=1e-12, atol=1e-15)
    assert not wide.dq[..., 5:].any() and not wide.dv[..., 3:].any()
    np.testing.assert_allclose(wide.dk[..., :5].reshape(1, 2, 2, 5, 5).sum(axis=2), drawn.dk,
                               rtol=1e-12, atol=1e-15)


def test_a_case_lengthened_to_even_lengths_is_the_same_gradient():
    """The extra query's dout is zero and the extra key is kept by none: the drawn dq, dk and dv
    are unchanged and the extra ones are zero."""
    mask = np.random.default_rng(4).random((1, 1, 3, 5)) < 0.7
    case = _case(seed=4, mask=mask)
    taken = backward_as_taken(case, declaration=AttentionDeclaration(lengths_multiple_of=2))
    assert taken.dout.shape == (1, 2, 4, 8) and not taken.dout[:, :, 3].any() and taken.k.shape[2] == 6
    drawn = attention_backward_reference(case.dout, case.q, case.k, case.v, mask, case.scale)
    longer = attention_backward_reference(taken.dout, taken.q, taken.k, taken.v, taken.mask, taken.scale)
    np.testing.assert_allclose(longer.dq[:, :, :3], drawn.dq, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(longer.dk[:, :, :5], drawn.dk, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(longer.dv[:, :, :5], drawn.dv, rtol=1e-12, atol=1e-15)
    assert not longer.dq[:, :, 3].any() and not longer.dk[:, :, 5].any() and not longer.dv[:, :, 5].any()


@pytest.mark.parametrize("family", ["ordinary", "low_lse", "fully_masked"])
def test_a_kernel_of_even_lengths_that_declares_them_meets_only_even_lengths(family):
    """A backward that raises on an odd query or key length (JAX's cuDNN backward with a mask)
    and declares ``lengths_multiple_of=2`` is hunted clean, every call of even lengths."""
    from normprops.declaration import Declaration
    from normprops.hunt import HuntConfig, hunt
    from normprops.launch import target_from_callable
    from normprops.specs import KERNELS

    spec = next(k for k in KERNELS if (k.backend, k.name) == ("numpy", "attention_backward_flash"))
    correct = spec.load()
    lengths = []

    def even_only(dout, q, k, v, mask, scale):
        lengths.append((q.shape[2], k.shape[2]))
        if q.shape[2] % 2 or k.shape[2] % 2:
            raise NotImplementedError(f"Unsupported sequence length Q {q.shape[2]}, KV {k.shape[2]}.")
        return correct(dout, q, k, v, mask, scale)

    declared = Declaration.from_spec(spec)
    declared = replace(declared, op_declaration=replace(declared.op_promises, lengths_multiple_of=2))
    result = hunt(target_from_callable(even_only, declaration=declared), family=family,
                  config=HuntConfig(max_examples=15, seed=0))
    assert result.passed, result.failures[0].message()
    assert lengths and all(lq % 2 == 0 and lk % 2 == 0 for lq, lk in lengths)


# --- the planted kernels ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PLANTED))
def test_each_planted_kernel_is_caught_in_its_family_with_a_readable_counterexample(name):
    kernel = PLANTED[name]
    report = normprops.hunt_kernel(kernel.func, op="attention_backward", families=[kernel.family],
                                   max_examples=60, seed=0, threads=16)
    assert not report.passed
    message = report.failures[0].message
    assert "attention_backward" in message and kernel.family in message
    assert any(f"{out}[b 0 " in message for out in ("dq", "dk", "dv")), message


@pytest.mark.parametrize("name", list(CORRECT))
def test_each_correct_kernel_passes_every_family(name):
    report = normprops.hunt_kernel(CORRECT[name].func, op="attention_backward", max_examples=8,
                                   seed=0, threads=16)
    assert report.passed, report.failures[0].message if report.failures else report


def test_a_planted_nan_on_an_empty_row_names_the_row():
    mask = np.ones((1, 1, 3, 5), bool)
    mask[0, 0, 2] = False
    case = _case(mask=mask)
    dq, dk, dv = kernels.masked_row_nan(*case.inputs())
    assert np.isnan(dq[:, :, 2]).all() and np.isnan(dk).any()
    assert not np.isnan(kernels.flash(*case.inputs())[0]).any()


def test_a_wrong_number_of_outputs_and_unsummed_heads_are_contract_findings():
    def two(dout, q, k, v, mask, scale):
        return kernels.flash(dout, q, k, v, mask, scale)[:2]

    def per_query_head(dout, q, k, v, mask, scale):
        dq, dk, dv = kernels.flash(dout, q, k, v, mask, scale)
        group = q.shape[1] // k.shape[1]
        return dq, np.repeat(dk, group, axis=1), np.repeat(dv, group, axis=1)

    report = normprops.hunt_kernel(two, op="attention_backward", families=["gqa"], max_examples=5, seed=0)
    assert report.failures[0].property == "contract"
    assert "returns (dq, dk, dv)" in report.failures[0].message
    report = normprops.hunt_kernel(per_query_head, op="attention_backward", families=["gqa"],
                                   max_examples=30, seed=0)
    assert not report.passed and report.failures[0].property == "contract"


def test_an_attention_only_keyword_is_named():
    with pytest.raises(normprops.errors.UsageError, match="applies to --op attention only"):
        normprops.hunt_kernel(kernels.flash, op="attention_backward", max_examples=5, empty_rows="zero")


# --- end to end ------------------------------------------------------------------------------------


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "normprops", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_the_cli_catches_a_dropped_row_term_and_replays_its_fixture(tmp_path):
    run = _cli("hunt", "--op", "attention_backward", "--impl", f"{IMPL}:no_row_term", "--families",
               "ordinary", "--seed", "0", "--max-examples", "30", "--fixtures-dir", "fx", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "ordinary accuracy: dq[b 0 h 0 q 0 col" in run.stdout
    assert "|dout| from" in run.stdout
    assert sorted((tmp_path / "fx" / "attention_backward").glob("*.json"))
    bad = _cli("replay", "--op", "attention_backward", "--impl", f"{IMPL}:no_row_term",
               "--fixtures-dir", "fx", cwd=tmp_path)
    good = _cli("replay", "--op", "attention_backward", "--impl", f"{IMPL}:plain", "--fixtures-dir",
                "fx", cwd=tmp_path)
    assert bad.returncode == 1 and "FAIL" in bad.stdout, bad.stdout + bad.stderr
    assert good.returncode == 0, good.stdout + good.stderr


def test_assert_robust_passes_the_flash_kernel_and_fails_the_unscaled_one():
    normprops.assert_robust(kernels.flash, op="attention_backward", families=["gqa", "low_lse"],
                            max_examples=6, seed=0)
    with pytest.raises(AssertionError, match="accuracy"):
        normprops.assert_robust(kernels.unscaled_dk, op="attention_backward", families=["ordinary"],
                                max_examples=30, seed=0)


def test_the_op_is_registered_with_its_families():
    op = get_op("attention_backward")
    assert op.outputs == ("dq", "dk", "dv") and op.params[0] == "dout"
    assert op.families == ATTENTION_BACKWARD_FAMILIES


# --- PyTorch ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("backend", ["math", "default"])
def test_torch_sdpa_backward_passes_every_family(backend, dtype):
    """PyTorch's CPU SDPA backward as its registry entry declares it: the default backend rounds P
    to bfloat16, and sums a GQA group's dk and dv in bfloat16."""
    pytest.importorskip("torch")
    from normprops.backends.torch_entries import TORCH_KERNELS
    from normprops.hunt import HuntConfig
    from normprops.registry_hunt import hunt_registry

    name = f"sdpa{'-math' if backend == 'math' else ''}.backward-{'f32' if dtype == 'float32' else 'bf16'}"
    spec = next(k for k in TORCH_KERNELS if k.name == name and k.backend == "torch-cpu")
    assert spec.claims == frozenset(ATTENTION_BACKWARD_FAMILIES)
    run = hunt_registry([(spec, family) for family in ATTENTION_BACKWARD_FAMILIES],
                        config=HuntConfig(max_examples=4, seed=0))
    assert len(run.hunted) == len(ATTENTION_BACKWARD_FAMILIES)
    assert not run.surprises, [r.findings[0] for _, r in run.surprises if r.findings]


def test_torch_default_backward_needs_its_bfloat16_group_sum_declared():
    """Judged as summing a group's heads in float32, the bfloat16 default backend is found on GQA."""
    torch = pytest.importorskip("torch")
    from normprops.backends.torch_attention import sdpa_default_backward

    declared = replace(FOREIGN_ATTENTION, p_dtype="bfloat16", empty_row="zero")

    def found(case) -> bool:
        args = [torch.from_numpy(a).to(torch.bfloat16) for a in (case.dout, case.q, case.k, case.v)]
        outs = [o.float().numpy() for o in sdpa_default_backward(*args, None, case.scale)]
        return max(_ratios(outs, case, declared).values()) > 1

    seen = []

    @settings(SEARCH, max_examples=40)
    @given(attention_backward_cases("gqa", dtypes=("bfloat16",)))
    def run(case):
        if case.group > 1:
            seen.append(found(case))

    run()
    assert any(seen)


def test_the_pytest_plugin_saves_a_users_attention_backward_finding(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="""
        import pytest
        import normprops
        from normprops.examples.attention_backward_kernels import masked_row_nan

        def test_masked_row_nan():
            with pytest.raises(AssertionError, match="replay: .* --fixtures-dir fx"):
                normprops.assert_robust(masked_row_nan, op="attention_backward",
                                        families=["fully_masked"], max_examples=40, seed=0)
    """)
    result = pytester.runpytest_subprocess("--normprops-fixtures-dir", "fx")
    result.assert_outcomes(passed=1)
    assert list((pytester.path / "fx" / "attention_backward").glob("fully_masked-*.json"))
