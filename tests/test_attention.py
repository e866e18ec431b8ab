"""Attention, fn(q, k, v, mask, scale) -> out or (out, lse): the exact reference against mpmath and
closed forms, the judge's separate findings, the families' promises, the correct example kernels
clean across every family, each planted bug caught on a small explicit case and by a seeded search
of its family, and PyTorch's scaled_dot_product_attention on the CPU."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

from normprops.examples.attention_kernels import CORRECT, PLANTED
from normprops.ops.attention import (
    FOREIGN_ATTENTION,
    SENTINEL,
    AttentionCase,
    AttentionDeclaration,
    attention_reference,
    attention_tolerance,
    check_attention,
    judge_attention,
)
from normprops.ops.attention_families import ATTENTION_FAMILIES, attention_case, attention_cases

F32 = np.float32
SEARCH = settings(max_examples=100, derandomize=True, database=None, deadline=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))


def _assert_ok(verdict, what: str) -> None:
    __tracebackhide__ = True
    assert verdict.ok, f"{verdict.reason} [{what}]"


def _small(seed: int = 0, *, b=1, hq=2, hkv=1, lq=3, lk=20, d=16, dv=16, mask=None) -> AttentionCase:
    rng = np.random.default_rng(seed)
    return AttentionCase(rng.standard_normal((b, hq, lq, d)).astype(F32),
                         rng.standard_normal((b, hkv, lk, d)).astype(F32),
                         rng.standard_normal((b, hkv, lk, dv)).astype(F32), mask,
                         float(F32(1 / math.sqrt(d))))


# --- the reference -----------------------------------------------------------------------------


def test_one_key_gives_its_value_and_its_score():
    case = _small(lk=1)
    ref = attention_reference(case.q, case.k, case.v, None, case.scale)
    np.testing.assert_array_equal(ref.out, np.broadcast_to(case.v.astype(np.float64), ref.out.shape))
    s = case.scale * np.einsum("bhid,bjd->bhi", case.q.astype(np.float64), case.k[:, 0].astype(np.float64))
    np.testing.assert_allclose(ref.lse, s, rtol=1e-15)


def test_equal_scores_average_the_values():
    case = _small(lk=7)
    q = np.zeros_like(case.q)
    ref = attention_reference(q, case.k, case.v, None, case.scale)
    np.testing.assert_allclose(ref.out[0, 0, 0], case.v[0, 0].astype(np.float64).mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(ref.lse, math.log(7), rtol=1e-15)


@pytest.mark.parametrize("family", ["ordinary", "sentinel", "cancelling_v", "fully_masked"])
def test_float64_agrees_with_mpmath(family):
    case = find(attention_cases(family, dtypes=("float32",)),
                lambda c: (8 <= c.k.shape[2] and c.q.shape[2] * c.k.shape[2] * c.q.shape[3] <= 4096
                           and c.q.shape[1] <= 4 and (c.mask is None or c.mask.any())),
                settings=settings(SEARCH, max_examples=200))
    fast = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    exact = attention_reference(case.q, case.k, case.v, case.mask, case.scale, oracle="mpmath")
    tol = attention_tolerance(fast, dtype="float32")
    full = ~fast.empty
    assert exact.oracle == "mpmath" and fast.oracle == "float64"
    assert np.all(np.abs(fast.out[full] - exact.out[full]) <= 1e-3 * tol.out[full]), case
    assert np.all(np.abs(fast.lse[full] - exact.lse[full]) <= 1e-3 * tol.lse[full]), case
    np.testing.assert_array_equal(np.isneginf(exact.lse), fast.empty)


# --- the judge ---------------------------------------------------------------------------------


def _judged(out, lse, case, empty_row=None):
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    tol = attention_tolerance(ref, declaration=replace(FOREIGN_ATTENTION, empty_row=empty_row))
    return judge_attention(out, lse, ref, tol, empty_row=empty_row), ref


def _with_empty_row() -> AttentionCase:
    mask = np.ones((1, 1, 3, 20), bool)
    mask[0, 0, 1] = False  # query row 1 keeps no key
    return _small(mask=mask)


def test_the_exact_answer_passes_and_a_nudge_past_the_bound_fails():
    case = _with_empty_row()
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    tol = attention_tolerance(ref)
    out = np.where(ref.empty[..., None], 0.0, ref.out)
    _assert_ok(judge_attention(out, ref.lse, ref, tol), "exact")
    nudged = out.copy()
    nudged[0, 1, 2, 5] += 2 * tol.out[0, 1, 2, 5]
    verdict = judge_attention(nudged, ref.lse, ref, tol)
    assert not verdict.ok and verdict.where == "out[0, 1, 2, 5]" and 1.9 < verdict.ratio < 2.1


@pytest.mark.parametrize("fill, empty_row, ok", [
    pytest.param(0.0, None, True, id="zeros"),
    pytest.param(np.nan, None, True, id="nans"),
    pytest.param(np.nan, "zero", False, id="nans-declared-zero"),
    pytest.param(0.0, "nan", False, id="zeros-declared-nan"),
    pytest.param(1.0, None, False, id="nonzero-finite"),
    pytest.param("mixture", None, False, id="mixture"),
])
def test_an_empty_row_is_all_zeros_or_all_nan_as_declared(fill, empty_row, ok):
    case = _with_empty_row()
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    out = ref.out.copy()
    if fill == "mixture":
        out[:, :, 1, ::2], out[:, :, 1, 1::2] = np.nan, 0.0
    else:
        out[:, :, 1] = fill
    verdict, _ = _judged(out, ref.lse, case, empty_row)
    assert verdict.ok is ok and (verdict.empty_mixture is None) is ok, verdict.reason


@pytest.mark.parametrize("value", [np.inf, 0.0, -1e30])
def test_an_empty_rows_lse_must_be_minus_inf(value):
    case = _with_empty_row()
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    lse = ref.lse.copy()
    lse[:, :, 1] = value
    verdict, _ = _judged(np.nan_to_num(ref.out), lse, case)
    assert not verdict.ok and verdict.empty_lse == (0, 0, 1), verdict.reason


def test_a_nonfinite_output_where_the_exact_one_is_finite_is_named():
    case = _small()
    ref = attention_reference(case.q, case.k, case.v, None, case.scale)
    out = ref.out.copy()
    out[0, 1, 2, 3] = np.inf
    verdict, _ = _judged(out, None, case)
    assert verdict.nonfinite == ("out", (0, 1, 2, 3)), verdict.reason


# --- the families --------------------------------------------------------------------------------


FEW = settings(SEARCH, max_examples=12)


@FEW
@given(attention_cases("sentinel"))
def test_sentinel_rows_keep_only_scores_below_the_sentinel(case):
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    rows = ref.row_max < SENTINEL
    assert rows.any()
    assert np.all(np.where(ref.p > 0, ref.scores, -np.inf).max(axis=-1)[rows] < SENTINEL)


@FEW
@given(attention_cases("fully_masked"))
def test_fully_masked_has_an_empty_query_row(case):
    assert (~case.mask.any(axis=-1)).any()


@FEW
@given(attention_cases("cancelling_v", dtypes=("float32",)))
def test_cancelling_v_cancels(case):
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    if case.params["residual"] == 0.0:
        assert np.max(np.abs(ref.out) / ref.abs_pv) < 1e-6


@FEW
@given(attention_cases("large_scores"))
def test_large_scores_reach_past_exp_overflow_before_the_shift(case):
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    assert np.max(np.abs(ref.scores)) >= 0.5 * case.params["top"]


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: attention_cases("nope"), "family must be one of", id="family"),
    pytest.param(lambda: attention_cases("ordinary", dtypes=("float64",)), "dtypes must name", id="dtype"),
    pytest.param(lambda: attention_case("gqa", seed=0), "missing", id="params"),
    pytest.param(lambda: replace(_small(), scale=0.1), "scale must hold a float32", id="scale"),
    pytest.param(lambda: _small(hq=3, hkv=2), "multiple of Hkv", id="heads"),
    pytest.param(lambda: _small(mask=np.ones((1, 1, 3, 20), np.int8)), "mask must be bool", id="mask"),
    pytest.param(lambda: AttentionDeclaration(empty_row="inf"), "empty_row must be", id="empty_row"),
])
def test_invalid_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- the example kernels -------------------------------------------------------------------------


@pytest.mark.parametrize("family", ATTENTION_FAMILIES)
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_kernels_pass_every_family(name, family):
    kernel = CORRECT[name]

    @settings(SEARCH, max_examples=15)
    @given(attention_cases(family))
    def run(case):
        verdict = check_attention(kernel.func, case, declaration=kernel.declaration)
        _assert_ok(verdict, f"{name} on {case!r}")
        if case.dtype == "float32" and kernel.declaration.p_dtype is None:
            assert verdict.ratio < 0.5, f"{name}: ratio {verdict.ratio:.3g} on {case!r}"

    run()


def _explicit(name: str) -> AttentionCase:
    """A small case per planted kernel, in its family's words."""
    shape = dict(B=1, Hkv=1, group=1, Lq=2, D=16, seed=3, dtype="float32")
    if name == "attention_finite_sentinel":  # flashinfer#4267's shape
        return attention_case("sentinel", **dict(shape, group=16, Lq=1, Lk=64, D=128, dtype="bfloat16"),
                              level=60000.0, rows="all", jitter=2, offset=1.0, padded=0)
    if name == "attention_no_max_subtraction":
        return attention_case("large_scores", **dict(shape, Lk=8), top=1000.0)
    if name in ("attention_masked_row_nan_mixture", "attention_lse_plus_inf"):
        return attention_case("fully_masked", **dict(shape, Lk=33), layout="dead_rows")
    if name == "attention_gqa_wrong_head":
        return attention_case("gqa", **dict(shape, Hkv=2, group=4, Lk=8))
    if name == "attention_dropped_tail_keys":
        return attention_case("ragged", **dict(shape, Lk=65, D=17), Dv=3, masked=False)
    return attention_case("ordinary", **dict(shape, Lk=40), masked=False, spread=1.0, offset=1.0)


@pytest.mark.parametrize("name", list(PLANTED))
def test_planted_kernel_is_caught_on_a_small_case(name):
    kernel = PLANTED[name]
    case = _explicit(name)
    verdict = check_attention(kernel.func, case, declaration=kernel.declaration)
    assert not verdict.ok, f"{name} passed {case!r}: {verdict.reason}"
    for correct in CORRECT.values():  # the case itself is fair
        _assert_ok(check_attention(correct.func, case, declaration=correct.declaration), repr(case))


def test_a_finite_sentinel_is_caught_on_out_alone():
    """flashinfer#4267: every kept score below -5e4 and the running max starting at -5e4 give 0."""
    kernel = PLANTED["attention_finite_sentinel"]
    case = _explicit("attention_finite_sentinel")
    verdict = check_attention(lambda *a: kernel.func(*a)[0], case, declaration=kernel.declaration)
    assert not verdict.ok and verdict.where.startswith("out") and verdict.ratio > 3, verdict.reason


@pytest.mark.parametrize("name", list(PLANTED))
def test_planted_kernel_is_found_by_searching_its_family(name):
    kernel = PLANTED[name]
    find(attention_cases(kernel.family),
         lambda case: not check_attention(kernel.func, case, declaration=kernel.declaration).ok,
         settings=SEARCH)


# --- PyTorch ---------------------------------------------------------------------------------------


def _sdpa(backend: str):
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    types = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    chosen = [SDPBackend.MATH] if backend == "math" else [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]

    def sdpa(q, k, v, mask, scale):
        t = [torch.from_numpy(np.asarray(a).astype(F32)).to(types[str(q.dtype)]) for a in (q, k, v)]
        with sdpa_kernel(chosen):
            out = torch.nn.functional.scaled_dot_product_attention(
                *t, attn_mask=None if mask is None else torch.from_numpy(mask), scale=scale,
                enable_gqa=t[0].shape[1] != t[1].shape[1])
        return out.float().numpy().astype(q.dtype)

    return sdpa


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("backend", ["default", "math"])
def test_torch_sdpa_passes_every_family(backend, dtype):
    """PyTorch's CPU attention: the math backend computes in float32 whatever the storage type; the
    default (flash) backend rounds P to the storage type before P.V, which it declares here. A
    fully masked row gives zeros (torch 2.5 and later)."""
    sdpa = _sdpa(backend)
    p_dtype = dtype if backend == "default" and dtype != "float32" else None
    declaration = replace(FOREIGN_ATTENTION, empty_row="zero", p_dtype=p_dtype)

    @settings(SEARCH, max_examples=10)
    @given(attention_cases(dtypes=(dtype,)))
    def run(case):
        _assert_ok(check_attention(sdpa, case, declaration=declaration), f"sdpa {backend} on {case!r}")

    run()


def test_torch_flash_backend_needs_its_p_rounding_declared():
    """Without the declaration, the bfloat16 default backend's rounding of P is found."""
    sdpa = _sdpa("default")
    declaration = replace(FOREIGN_ATTENTION, empty_row="zero")
    find(attention_cases("gqa", dtypes=("bfloat16",)),
         lambda case: not check_attention(sdpa, case, declaration=declaration).ok, settings=SEARCH)
