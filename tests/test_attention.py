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


@FEW
@given(attention_cases("sliding_window"))
def test_sliding_window_keeps_the_last_w_keys_bottom_right(case):
    lq, lk, w = case.q.shape[2], case.k.shape[2], case.params["window"]
    kept = case.mask[0, 0]
    for i in range(lq):
        last = i + lk - lq
        assert kept[i].sum() == max(0, min(w, last + 1)) and (last < 0 or kept[i, min(last, lk - 1)])


@FEW
@given(attention_cases("decode"))
def test_decode_has_one_query_against_a_tile_edge(case):
    lk = case.k.shape[2]
    assert case.q.shape[2] == 1
    assert lk in (0, 1, 64, 192) or lk % 32 == 1 or lk % 128 == 64 or ((lk + 1) & lk == 0) or (
        (lk - 1) & (lk - 2) == 0)


def test_decode_reaches_zero_keys_and_an_empty_cache():
    none = attention_case("decode", B=1, Hkv=1, group=4, Lq=1, Lk=0, D=64, seed=0, dtype="float32",
                          cached=False)
    ref = attention_reference(none.q, none.k, none.v, none.mask, none.scale)
    assert ref.empty.all() and np.isneginf(ref.lse).all()
    for kernel in CORRECT.values():
        _assert_ok(check_attention(kernel.func, none, declaration=kernel.declaration), "Lk = 0")
    emptied = find(attention_cases("decode"), lambda c: c.mask is not None and not c.mask.all(axis=-1).all()
                   and (~c.mask.any(axis=-1)).any(), settings=SEARCH)
    assert (~emptied.mask.any(axis=-1)).any()


@FEW
@given(attention_cases("extreme_lse", dtypes=("float32",)))
def test_extreme_lse_rows_are_past_exp_range(case):
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    level = case.params["level"]
    assert np.all(np.sign(ref.lse) == np.sign(level))
    assert np.max(np.abs(ref.lse)) > 88.7
    assert np.all(ref.row_max - np.min(ref.scores, axis=-1) < 20 + 1e-3 * abs(level))


@FEW
@given(attention_cases("head_dims"))
def test_head_dims_are_models(case):
    assert {case.q.shape[3], case.v.shape[3]} <= {32, 64, 72, 80, 96, 104, 128, 192, 256}


def test_head_dims_draw_v_apart_from_q():
    find(attention_cases("head_dims"), lambda c: c.v.shape[3] != c.q.shape[3], settings=SEARCH)


@FEW
@given(attention_cases("outlier_key", dtypes=("float32",)))
def test_outlier_key_scores_its_gap_above_the_rest(case):
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    at = {"first": 0, "last": case.k.shape[2] - 1, "middle": case.k.shape[2] // 2}[case.params["position"]]
    others = np.delete(ref.scores, at, axis=-1).max(axis=-1)
    assert np.all(ref.scores[..., at] - others > 0.5 * case.params["gap"] - 10)


@FEW
@given(attention_cases("strided"))
def test_strided_inputs_are_transposed_views(case):
    for a in (case.q, case.k, case.v):
        assert not a.flags.c_contiguous
        assert np.ascontiguousarray(a.transpose(0, 2, 1, 3)).strides == a.transpose(0, 2, 1, 3).strides
    q = case.inputs()[0]
    assert not q.flags.c_contiguous  # the kernel receives the view as it is


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
    if name == "attention_first_key_max":  # the outlier last: key 0 scores 200 below the max
        return attention_case("outlier_key", **dict(shape, Lk=9), gap=200.0, position="last",
                              sink_value=1.0)
    if name == "attention_ignores_strides":
        return attention_case("strided", **dict(shape, Hkv=2, Lq=3, Lk=5, D=8), Dv=8, masked=False,
                              memory="bshd")
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


def test_no_max_subtraction_is_found_past_both_ends_of_exp():
    """Rows whose lse is above 88.7 (exp overflows) and below -88.7 (exp underflows to 0)."""
    kernel = PLANTED["attention_no_max_subtraction"]
    for sign in (1.0, -1.0):
        find(attention_cases("extreme_lse").filter(lambda c: np.sign(c.params["level"]) == sign),
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


@pytest.mark.parametrize("framework, dtype", [("numpy", "float32"), ("numpy", "bfloat16"),
                                              ("torch", "float32"), ("torch", "bfloat16")])
def test_a_transposed_view_reaches_the_kernel_with_its_strides(framework, dtype):
    """The adapters hand a (B, H, L, D) view of a (B, L, H, D) array over as such a view, values
    unchanged: a kernel that ignores strides meets it as it would in a model."""
    if framework == "torch":
        pytest.importorskip("torch")
    from normprops.frameworks import get_adapter, memory_order
    from normprops.ops.attention_math import laid_out

    base = np.arange(2 * 3 * 5 * 4, dtype=F32).reshape(2, 3, 5, 4)
    view = laid_out(base, "bshd")
    assert memory_order(view) == (0, 2, 1, 3) and memory_order(base) == (0, 1, 2, 3)
    adapter = get_adapter(framework, dtype=dtype, device="cpu")
    native = adapter.to_native(view, "q", True)
    strides = native.strides if framework == "numpy" else native.stride()
    itemsize = native.itemsize if framework == "numpy" else 1
    assert [s // itemsize for s in strides][1] < [s // itemsize for s in strides][2]
    np.testing.assert_array_equal(adapter.from_native(native, view.shape, "q"), view)


# --- the invariances ---------------------------------------------------------------------------


def _evaluate(func, case, *, skip=frozenset()):
    from normprops.launch import target_from_callable
    from normprops.properties import evaluate

    target = target_from_callable(func, op="attention", dtype=case.dtype, empty_rows="zero",
                                  threads=16)
    return [f.property for f in evaluate(target, case, skip=frozenset(skip)).failures]


def test_a_kernel_without_max_subtraction_fails_key_shift_alone():
    """Ordinary scores are small: exp(s) is safe and accurate; the keys shifted along q move the
    scores by 200 and it overflows."""
    from normprops.examples.attention_kernels import attention_no_max_subtraction

    case = _explicit("attention_fp16_accumulate")  # an ordinary case
    assert _evaluate(attention_no_max_subtraction, case) == ["shift_invariance"]
    assert _evaluate(attention_no_max_subtraction, case, skip={"shift_invariance"}) == []
    assert _evaluate(CORRECT["attention_online"].func, case) == []


def test_a_kernel_that_takes_key_0_for_the_max_fails_key_order_alone():
    """An attention sink at the first key holds the max: the kernel is exact there, and wrong once
    the keys are reversed."""
    from normprops.examples.attention_kernels import attention_first_key_max

    case = attention_case("outlier_key", B=1, Hkv=1, group=2, Lq=2, Lk=9, D=16, seed=3, dtype="float32",
                          gap=200.0, position="first", sink_value=1.0)
    _assert_ok(check_attention(attention_first_key_max, case, declaration=CORRECT["attention_two_pass"]
                               .declaration), "key 0 holds the max")
    assert _evaluate(attention_first_key_max, case) == ["permutation_invariance"]
    assert _evaluate(attention_first_key_max, case, skip={"permutation_invariance"}) == []
    assert _evaluate(CORRECT["attention_two_pass"].func, case) == []


def test_a_kernel_that_ignores_strides_is_right_on_contiguous_inputs():
    from normprops.examples.attention_kernels import attention_ignores_strides

    case = _explicit("attention_ignores_strides")
    contiguous = replace(case, q=np.ascontiguousarray(case.q), k=np.ascontiguousarray(case.k),
                         v=np.ascontiguousarray(case.v))
    assert _evaluate(attention_ignores_strides, contiguous) == []
    assert "accuracy" in _evaluate(attention_ignores_strides, case)


def test_torch_flash_backend_needs_its_p_rounding_declared():
    """Without the declaration, the bfloat16 default backend's rounding of P is found."""
    sdpa = _sdpa("default")
    declaration = replace(FOREIGN_ATTENTION, empty_row="zero")
    find(attention_cases("gqa", dtypes=("bfloat16",)),
         lambda case: not check_attention(sdpa, case, declaration=declaration).ok, settings=SEARCH)
