"""The attention op hunted end to end: the CLI, the API, a saved fixture replayed, and the
declarations a user gets wrong, each named in one line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from cli_harness import run as run_in_process

import normprops
from normprops.errors import UsageError
from normprops.examples import attention_kernels as kernels
from normprops.ops.attention import AttentionCase

IMPL = "normprops.examples.attention_kernels"


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "normprops", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_the_cli_catches_a_finite_sentinel_and_replays_its_fixture(tmp_path):
    run = _cli("hunt", "--op", "attention", "--impl", f"{IMPL}:finite_sentinel", "--families",
               "sentinel", "--seed", "0", "--max-examples", "50", "--fixtures-dir", "fx", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "sentinel accuracy: out[b 0 h 0 q 0 col 0]" in run.stdout
    assert "input: B=1 Hq=1 Hkv=1 Lq=1 Lk=1" in run.stdout
    saved = sorted((tmp_path / "fx" / "attention").glob("*.json"))
    assert saved
    bad = _cli("replay", "--op", "attention", "--impl", f"{IMPL}:finite_sentinel", "--fixtures-dir",
               "fx", cwd=tmp_path)
    good = _cli("replay", "--op", "attention", "--impl", f"{IMPL}:online", "--fixtures-dir", "fx",
                cwd=tmp_path)
    assert bad.returncode == 1 and "FAIL" in bad.stdout, bad.stdout + bad.stderr
    assert good.returncode == 0, good.stdout + good.stderr


def test_the_cli_passes_the_online_kernel_on_every_family(tmp_path):
    run = _cli("hunt", "--op", "attention", "--impl", f"{IMPL}:online", "--seed", "0",
               "--max-examples", "25", "--no-fixtures", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "clean: 14 families" in run.stdout


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_scores_first_kernel_is_clean_without_declaring_anything(dtype, tmp_path, monkeypatch):
    """``scale * (q k^T)`` with the product in float32 first, in plain float32 loops, hunted with no
    declaration at all: the default (a plain loop's depth, online allowed) holds it."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process("hunt", "--op", "attention", "--impl", f"{IMPL}:scores_first",
                                    "--framework", "numpy", "--dtype", dtype, "--seed", "0",
                                    "--max-examples", "30", "--no-fixtures", "--json", "r.json")
    assert code == 0, out + err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["failures"] == [], doc["failures"]
    assert len(doc["results"]) == 14 and all(r["passed"] for r in doc["results"]), doc["results"]
    assert all(r["max_ratio"] <= 1 for r in doc["results"]), [r["max_ratio"] for r in doc["results"]]


def test_the_api_and_assert_robust():
    report = normprops.hunt_kernel(kernels.gqa_wrong_head, op="attention", families=["gqa"],
                                   max_examples=60, seed=0)
    assert not report.passed
    assert "out[b 0 h" in report.failures[0].message
    normprops.assert_robust(kernels.two_pass, op="attention", families=["ordinary", "causal"],
                            max_examples=20, seed=0)
    with pytest.raises(AssertionError, match="masked_rows"):
        normprops.assert_robust(kernels.lse_plus_inf, op="attention", families=["fully_masked"],
                                max_examples=60, seed=0)


def test_a_declared_empty_row_is_held_to_it():
    # The two-pass kernel writes zeros on an empty row: declared NaN, that is a finding.
    report = normprops.hunt_kernel(kernels.two_pass, op="attention", families=["fully_masked"],
                                   max_examples=40, seed=0, empty_rows="nan")
    assert not report.passed and report.failures[0].property == "masked_rows"


@pytest.mark.parametrize("keywords, message", [
    pytest.param(dict(mask_layouts="diagonal"), "'diagonal' is not a mask layout", id="layout"),
    pytest.param(dict(empty_rows="ones"), "must be zero, nan or either but was 'ones'", id="empty"),
    pytest.param(dict(mask_layouts="none", families=["causal"]), "family causal draws masks",
                 id="undrawable"),
])
def test_a_bad_declaration_is_named(keywords, message):
    with pytest.raises(UsageError, match=message):
        normprops.hunt_kernel(kernels.online, op="attention", max_examples=5, **keywords)


def test_an_attention_keyword_for_another_op_is_named():
    with pytest.raises(UsageError, match="applies to --op attention only"):
        normprops.hunt_kernel(lambda x: x, op="softmax", max_examples=5, empty_rows="zero")


def test_hq_not_a_multiple_of_hkv_is_named():
    q, k = np.zeros((1, 3, 2, 8), np.float32), np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(ValueError, match="Hq must be a multiple of Hkv but Hq was 3 and Hkv 2"):
        AttentionCase(q, k, k, None, 0.25)


def test_a_wrong_output_shape_is_a_contract_finding():
    def transposed(q, k, v, mask, scale):
        out, lse = kernels.online(q, k, v, mask, scale)
        return out.swapaxes(1, 2).copy(), lse

    report = normprops.hunt_kernel(transposed, op="attention", families=["gqa"], max_examples=10,
                                   seed=0)
    finding = report.failures[0]
    assert finding.property == "contract"
    assert "out is numpy.ndarray" in finding.message and "expected a numpy float32 array" in finding.message


def test_a_case_widened_and_without_gqa_is_the_same_attention() -> None:
    """A kernel declaring head dimensions of multiples of 8 and no GQA (PyTorch's memory-efficient
    SDPA) is handed the drawn case with zero columns added and its kv heads repeated: the exact
    output is the drawn one's, with zero columns beside it."""
    from normprops.ops.attention import AttentionDeclaration, as_taken, attention_reference

    rng = np.random.default_rng(0)
    f32 = np.float32
    q, k, v = (rng.standard_normal(s).astype(f32) for s in ((1, 4, 3, 5), (1, 2, 6, 5), (1, 2, 6, 3)))
    mask = rng.random((1, 1, 3, 6)) < 0.7
    case = AttentionCase(q, k, v, mask, 0.5)
    taken = as_taken(case, declaration=AttentionDeclaration(head_dims_multiple_of=8, gqa=False))
    assert taken.q.shape == (1, 4, 3, 8) and taken.k.shape == (1, 4, 6, 8)
    assert taken.v.shape == (1, 4, 6, 8)
    drawn = attention_reference(q, k, v, mask, 0.5)
    widened = attention_reference(taken.q, taken.k, taken.v, mask, 0.5)
    assert np.array_equal(widened.out[..., :3], drawn.out, equal_nan=True)
    assert np.array_equal(widened.lse, drawn.lse, equal_nan=True)
    kept = ~np.isnan(widened.out[..., 3:])
    assert kept.any() and not widened.out[..., 3:][kept].any()
    assert as_taken(case, declaration=AttentionDeclaration()) is case


@pytest.mark.parametrize("masked", [False, True])
def test_a_case_lengthened_to_even_lengths_is_the_same_attention(masked: bool) -> None:
    """JAX's cuDNN backward takes only even lengths: 3 queries and 5 keys are handed over as 4 and
    6, the extra query zeros keeping every drawn key, the extra key kept by none. Each drawn row's
    output and lse are the drawn ones; a row with no kept key stays empty; the extra row is the
    mean of v over the drawn keys."""
    from normprops.ops.attention import AttentionDeclaration, as_taken, attention_reference

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 2, 3, 8), (2, 1, 5, 8), (2, 1, 5, 4)))
    mask = None
    if masked:
        mask = rng.random((2, 1, 3, 5)) < 0.6
        mask[1, 0, 2] = False  # an empty row
    declared = AttentionDeclaration(lengths_multiple_of=2)
    taken = as_taken(AttentionCase(q, k, v, mask, 0.25), declaration=declared)
    assert taken.q.shape == (2, 2, 4, 8) and taken.k.shape == (2, 1, 6, 8) and taken.v.shape == (2, 1, 6, 4)
    assert taken.mask.shape == (2, 1, 4, 6) and not taken.mask[..., 5].any() and taken.mask[:, :, 3, :5].all()
    drawn = attention_reference(q, k, v, mask, 0.25)
    longer = attention_reference(taken.q, taken.k, taken.v, taken.mask, 0.25)
    # out is a float64 matrix product whose BLAS kernel may differ with the number of keys (5 or 6,
    # the extra weight exactly 0): the same up to float64's rounding, not always bit for bit.
    np.testing.assert_allclose(longer.out[:, :, :3], drawn.out, rtol=1e-14, atol=1e-15)
    assert np.array_equal(np.isnan(longer.out[:, :, :3]), np.isnan(drawn.out))
    assert np.array_equal(longer.lse[:, :, :3], drawn.lse, equal_nan=True)
    np.testing.assert_allclose(longer.out[:, :, 3], np.broadcast_to(v.mean(axis=2), (2, 2, 4)), rtol=1e-6)
    even = AttentionCase(q[:, :, :2], k[:, :, :4], v[:, :, :4], None, 0.25)
    assert as_taken(even, declaration=declared) is even


def test_lengths_multiple_of_is_checked() -> None:
    from normprops.ops.attention import AttentionDeclaration

    with pytest.raises(ValueError, match="lengths_multiple_of must be a positive int but was 0"):
        AttentionDeclaration(lengths_multiple_of=0)
    with pytest.raises(ValueError, match="lengths_multiple_of needs a kernel that takes arbitrary masks"):
        AttentionDeclaration(lengths_multiple_of=2, mask_layouts=frozenset({"none", "key_padding"}))


def test_a_case_with_equal_head_dims_widens_the_narrower() -> None:
    """Flash attention takes v's head dimension only equal to q's: the narrower is widened with
    zero columns, the same attention."""
    from normprops.ops.attention import AttentionDeclaration, as_taken, attention_reference

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 2, 8), (1, 1, 3, 8), (1, 1, 3, 24)))
    case = AttentionCase(q, k, v, None, 0.25)
    taken = as_taken(case, declaration=AttentionDeclaration(equal_head_dims=True))
    assert taken.q.shape == (1, 2, 2, 24) and taken.k.shape == (1, 1, 3, 24) and taken.v is v
    widened = attention_reference(taken.q, taken.k, taken.v, None, 0.25)
    assert np.array_equal(widened.out, attention_reference(q, k, v, None, 0.25).out)


def test_a_case_under_the_least_head_dim_is_widened_to_it() -> None:
    """Compiled FlexAttention on CUDA takes no head dimension under 16 (Triton's tl.dot): q, k and v
    of 8 and 3 columns are handed over with 16, the same attention; wider ones are left alone."""
    from normprops.ops.attention import AttentionDeclaration, as_taken, attention_reference

    rng = np.random.default_rng(2)
    shapes = ((1, 2, 2, 8), (1, 1, 3, 8), (1, 1, 3, 3))
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    case = AttentionCase(q, k, v, None, 0.25)
    declared = AttentionDeclaration(min_head_dim=16)
    taken = as_taken(case, declaration=declared)
    assert (taken.q.shape, taken.k.shape, taken.v.shape) == ((1, 2, 2, 16), (1, 1, 3, 16), (1, 1, 3, 16))
    widened = attention_reference(taken.q, taken.k, taken.v, None, 0.25)
    assert np.array_equal(widened.out[..., :3], attention_reference(q, k, v, None, 0.25).out)
    assert not widened.out[..., 3:].any()
    wide = AttentionCase(*(rng.standard_normal((1, 1, 2, 24)).astype(np.float32) for _ in range(3)),
                         None, 0.25)
    assert as_taken(wide, declaration=declared) is wide
    with pytest.raises(ValueError, match="min_head_dim must be a positive int but was 0"):
        AttentionDeclaration(min_head_dim=0)


def test_a_kernel_with_a_least_key_length_is_never_handed_a_shorter_case() -> None:
    # cuDNN's SDPA has no kernel for a single key: declared, such cases are not drawn (and without
    # the declaration they are, so the filter is what keeps them out).
    from hypothesis import find, settings
    from hypothesis.errors import NoSuchExample

    from normprops.ops import get_op
    from normprops.ops.attention import AttentionDeclaration

    named = get_op("attention").named
    plain = AttentionDeclaration()
    quick = settings(max_examples=100, database=None)
    assert find(named.cases("ordinary", "float32", plain), lambda c: c.k.shape[2] == 1, settings=quick)
    with pytest.raises(NoSuchExample):
        find(named.cases("ordinary", "float32", dataclasses.replace(plain, min_keys=2)),
             lambda c: c.k.shape[2] == 1, settings=quick)
    with pytest.raises(ValueError, match="min_keys"):
        AttentionDeclaration(min_keys=-1)


@pytest.mark.parametrize("op", ["attention", "attention_backward"])
def test_a_shape_pool_bounds_the_shapes_a_family_draws(op: str) -> None:
    """A kernel that compiles for every new shape (shape_pool=N) meets at most N shapes a forward
    family, the same N in every run (the pool is fixed, the slot drawn), while the values go on
    changing; without a pool the same family draws many more."""
    from hypothesis import HealthCheck, given, settings

    from normprops.ops.attention_backward_families import attention_backward_cases
    from normprops.ops.attention_families import attention_cases

    def shapes(pool: int, seed: int) -> tuple[set[tuple[tuple[int, ...], ...]], set[float]]:
        seen: set[tuple[tuple[int, ...], ...]] = set()
        values: set[float] = set()
        drawn = (attention_cases("ordinary", dtypes=("float32",), shape_pool=pool) if op == "attention"
                 else attention_backward_cases("dout_scale", dtypes=("float32",), shape_pool=pool))

        @settings(max_examples=120, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        @given(drawn)
        def collect(case: AttentionCase) -> None:
            seen.add((case.q.shape, case.k.shape, case.v.shape))
            values.add(float(case.q.flat[0]))

        collect._hypothesis_internal_use_seed = seed  # type: ignore[attr-defined]
        collect()
        return seen, values

    pooled, values = shapes(4, 0)
    # the backward's slot picks its forward family (ordinary or large_scores) as well as the shape
    assert 1 < len(pooled) <= 4 and len(values) > 15
    again, _ = shapes(4, 1)
    assert again <= set().union(pooled, *(shapes(4, s)[0] for s in (2, 3)))  # one fixed pool
    assert len(shapes(0, 0)[0]) > 20


def test_a_shape_pool_is_declared_by_flag_or_keyword() -> None:
    from normprops.errors import UsageError
    from normprops.ops.attention import FOREIGN_ATTENTION, AttentionDeclaration

    declared = AttentionDeclaration.declare(FOREIGN_ATTENTION.model, dtype="float32", shape_pool=np.int64(8))
    assert declared.shape_pool == 8 and ("shape_pool", 8) in declared.flag_pairs()
    assert AttentionDeclaration.from_json(declared.to_json(), FOREIGN_ATTENTION.model).shape_pool == 8
    for bad in (-1, 2.5, True, "8"):
        with pytest.raises(UsageError, match=r"--shape-pool \(shape_pool=\) must be a whole number"):
            AttentionDeclaration.declare(FOREIGN_ATTENTION.model, dtype="float32", shape_pool=bad)


def test_the_hunt_says_it_draws_a_pool_of_shapes_and_rejects_a_bad_one(tmp_path) -> None:
    run = _cli("hunt", "--op", "attention", "--impl", f"{IMPL}:two_pass", "--shape-pool", "4",
               "--families", "ordinary", "--seed", "0", "--max-examples", "10", "--no-fixtures",
               cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "; 4 shapes a family (a shape pool);" in run.stdout.splitlines()[0]
    bad = _cli("hunt", "--op", "softmax", "--impl", f"{IMPL}:two_pass", "--shape-pool", "4", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--shape-pool (shape_pool=) applies to --op attention" in bad.stderr


def test_the_compiled_entries_declare_their_pool_and_flex_its_least_head_dim() -> None:
    from normprops.ops.attention_math import COMPILED_SHAPE_POOL
    from normprops.specs import KERNELS

    pools = {(s.backend, s.name): (s.op_declaration.shape_pool, s.op_declaration.min_head_dim)
             for s in KERNELS if s.op in ("attention", "attention_backward")}
    for (backend, name), (pool, least) in pools.items():
        compiled = name.startswith(("flex-f32", "flex-bf16", "flex.backward", "jax."))
        assert pool == (COMPILED_SHAPE_POOL if compiled else 0), (backend, name)
        assert least == (16 if compiled and backend == "torch-cuda" else 1), (backend, name)


#: Which of ordinary's 18 pooled key lengths slots 0-7 take (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31,
#: 32, 33, 63, 64, 65, 96): Lk 4, 15, 32, 5, 5, 64, 33, 9.
PINNED_ORDINARY_LK = [3, 8, 12, 4, 4, 15, 13, 7]


def test_a_pool_is_the_same_shapes_in_every_version_and_each_dimension_varies_on_its_own() -> None:
    """The pool is a BLAKE2 hash of (family, key, slot): pinned here, so that a change of numpy or of
    Python's hashing cannot move the shapes a claim was hunted on without a test failing. Its slots
    do not tie one dimension to another: across a family's slots, batch sizes meet several head
    counts."""
    from normprops.ops.attention_families import ShapePool, pool_pick

    pool = ShapePool(8, "ordinary")
    assert [pool_pick(pool, "Lk", slot, 18) for slot in range(8)] == PINNED_ORDINARY_LK
    b = [(1, 2)[pool_pick(pool, "B", s, 2)] for s in range(8)]
    hkv = [(1, 2)[pool_pick(pool, "Hkv", s, 2)] for s in range(8)]
    assert len(set(zip(b, hkv))) > 2
    other = ShapePool(8, "large_scores")
    assert [pool_pick(other, "Lk", s, 18) for s in range(8)] != PINNED_ORDINARY_LK


def test_a_pool_leaves_out_key_lengths_a_kernel_refuses() -> None:
    from hypothesis import HealthCheck, given, settings

    from normprops.ops.attention_families import attention_cases

    seen: set[int] = set()

    @settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(attention_cases("decode", dtypes=("float32",), shape_pool=8, min_keys=1))
    def collect(case: AttentionCase) -> None:
        seen.add(case.k.shape[2])

    collect()
    assert seen and min(seen) >= 1
