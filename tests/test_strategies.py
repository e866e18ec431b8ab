"""Each family produces what its name promises, and strategy arguments are validated up front."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings

from normprops.case import Case
from normprops.dtypes import to_dtype
from normprops.family_rows import LONG_COLS, LONG_EDGE_COLS
from normprops.mask_layouts import MASK_PATTERNS
from normprops.oracles import reference
from normprops.strategies import (
    EDGE_COLS,
    FAMILIES,
    MAX_COLS,
    Extras,
    cases,
    families_for,
    make_case,
)

FAMILY_OPS = [
    pytest.param(family, op, id=f"{family}-{op}")
    for family, spec in FAMILIES.items()
    for op in ("softmax", "layernorm", "rmsnorm")
    if op in spec.ops
]


@pytest.mark.parametrize("family, op", FAMILY_OPS)
def test_family_keeps_its_promise(family: str, op: str) -> None:
    @settings(max_examples=40, deadline=None, database=None)
    @given(cases(op=op, family=family))
    def check(case: Case) -> None:
        assert case.x.dtype == np.float32 and case.x.flags.c_contiguous and case.x.ndim == 2
        assert case.family == family and case.op == op
        assert case.rows >= FAMILIES[family].min_rows
        assert FAMILIES[family].promise(case), f"{family} broke its promise: {case!r}"
        if op != "softmax":
            assert case.gamma.shape == (case.cols,) and case.gamma.dtype == np.float32
            assert case.eps > 0 and np.float32(case.eps) == case.eps
        if op == "layernorm":
            assert case.beta.shape == (case.cols,)

    check()


def test_overflow_logits_really_exceed_expf_range() -> None:
    case = make_case(op="softmax", family="overflow_logits", rows=3, cols=1025, seed=7,
                     params={"peak": 120.0, "position": 1000, "offset": 0.0, "scale": 1.0})
    assert (case.x.max(axis=1) == np.float32(120.0)).all()
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(case.x.max(axis=1))).all()
    # the peak sits at a different column in each row
    assert len(set(np.argmax(case.x, axis=1).tolist())) == 3


def test_masked_family_masks_one_threads_share() -> None:
    case = make_case(op="softmax", family="masked", rows=2, cols=1000, seed=1,
                     params={"patterns": ["thread_share"], "thread": 5, "fraction": 0.5, "scale": 1.0})
    masked = np.isneginf(case.x[0])
    assert np.array_equal(np.nonzero(masked)[0], np.arange(5, 1000, 256))


def _masked(patterns: list[str], *, cols: int, rows: int = 5, dtype: str = "float32",
            **params) -> Case:
    drawn = {"patterns": patterns, "thread": 0, "fraction": 0.5, "scale": 1.0, "pad": [(18, 0)],
             "window": (0, 0), "offset": 0, "block": 13, "period": 2, **params}
    return make_case(op="softmax", family="masked", rows=rows, cols=cols, seed=3, params=drawn,
                     dtype=dtype)


def _kept(case: Case, r: int) -> list[int]:
    return np.nonzero(~np.isneginf(case.x[r]))[0].tolist()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("layout", MASK_PATTERNS[:-1])
def test_every_mask_layout_masks_the_first_row_at_any_width(layout: str, dtype: str) -> None:
    for cols in (1, 2, 3, 5, 1023, 1024, 1025, 4097):
        for offset, thread in ((-4, 0), (0, 0), (1, 7), (70001, 255)):
            case = _masked([layout], cols=cols, dtype=dtype, offset=offset, thread=thread)
            where = f"{layout} at {cols} columns, offset {offset}: {case.params['masks']}"
            assert np.isneginf(case.x[0]).any(), where
            assert FAMILIES["masked"].promise(case), where
            assert np.array_equal(to_dtype(case.x, dtype), case.x), where  # -inf is exact anywhere
            assert len(case.params["masks"]) == case.rows


@pytest.mark.parametrize("pad, length", [
    pytest.param((10, -1), 1023, id="2^10-1"),
    pytest.param((10, 0), 1024, id="2^10"),
    pytest.param((10, 1), 1025, id="2^10+1"),
    pytest.param((12, 0), 4096, id="2^12"),
    pytest.param((13, 0), 4999, id="all-but-one"),  # 2^13 is past the row
    pytest.param((0, -1), 1, id="at-least-one"),
])
def test_paddings_land_around_powers_of_two(pad: tuple[int, int], length: int) -> None:
    left = _masked(["left_pad"], cols=5000, pad=[pad])
    assert _kept(left, 0) == list(range(length, 5000))
    assert left.params["masks"][0] == f"left_pad masks [0, {length})"
    right = _masked(["right_pad"], cols=5000, pad=[pad])
    assert _kept(right, 0) == list(range(5000 - length))


def test_each_row_of_a_padded_batch_has_a_padding_of_its_own() -> None:
    case = _masked(["left_pad"], cols=5000, pad=[(10, 0), (12, -1), (0, 0), (18, 0)])
    assert [_kept(case, r)[0] for r in range(5)] == [1024, 4095, 1, 4999, 1024]


def test_left_padded_causal_rows_keep_a_column_more_each_after_their_padding() -> None:
    case = _masked(["padded_causal"], cols=2048, rows=3, pad=[(10, 0)], offset=0)
    assert [_kept(case, r) for r in range(3)] == [list(range(1024, 1025 + r)) for r in range(3)]
    assert case.params["masks"][1] == "padded_causal keeps [1024, 1026)"
    above = _masked(["padded_causal"], cols=2048, rows=3, pad=[(10, 0)], offset=-1)
    assert [len(_kept(above, r)) for r in range(3)] == [0, 0, 1]


def test_causal_rows_keep_one_column_more_each_and_rows_above_keep_none() -> None:
    case = _masked(["causal"], cols=64, offset=1)
    assert [_kept(case, r) for r in range(5)] == [list(range(k)) for k in (1, 2, 3, 4, 5)]
    above = _masked(["causal"], cols=64, offset=-2)
    assert [len(_kept(above, r)) for r in range(5)] == [0, 0, 0, 1, 2]
    assert reference(above).masked_rows.tolist() == [True, True, True, False, False]


def test_sliding_windows_end_at_the_row_end_one_column_apart() -> None:
    case = _masked(["sliding_window"], cols=4096, rows=3, window=(4, 0))
    assert [_kept(case, r) for r in range(3)] == [list(range(4078 + r, 4094 + r)) for r in range(3)]
    assert case.params["masks"][2] == "sliding_window keeps [4080, 4096)"


def test_block_sparse_masks_whole_blocks_and_keeps_one() -> None:
    case = _masked(["block_sparse"], cols=5000, block=10, period=3)
    assert _kept(case, 0) == list(range(2048, 3072))  # blocks of 1024: j % 3 == 2 kept
    capped = _masked(["block_sparse"], cols=100, block=13, period=2)  # blocks of 64: two in the row
    assert _kept(capped, 0) == list(range(64, 100))
    one = _masked(["block_sparse"], cols=100, block=5, period=8)  # no block 7: the last is kept
    assert _kept(one, 0) == list(range(96, 100))


def test_a_row_takes_the_union_of_its_layouts() -> None:
    case = _masked(["left_pad+causal", "none"], cols=40, pad=[(3, 0)], offset=20)
    assert _kept(case, 0) == list(range(8, 20))
    assert case.params["masks"][:2] == ["left_pad masks [0, 8) + causal keeps [0, 20)", "none"]
    assert _kept(case, 1) == list(range(40))


def test_two_layouts_never_mask_a_row_whole_that_neither_masks_alone() -> None:
    # All but one column twice, from either end: the attention layout alone stays.
    case = _masked(["all_but_one+right_pad"], cols=4096, rows=2, thread=7)
    assert _kept(case, 0) == [0]
    assert case.params["masks"][0] == "right_pad masks [1, 4096)"
    full = _masked(["full+left_pad"], cols=4096, rows=2)  # one of them masks it whole: so be it
    assert not _kept(full, 0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_masked_keeps_its_promise_in_narrow_types(dtype: str) -> None:
    @settings(max_examples=30, deadline=None, database=None)
    @given(cases(op="softmax", family="masked", dtype=dtype))
    def check(case: Case) -> None:
        assert FAMILIES["masked"].promise(case), case
        assert np.array_equal(to_dtype(case.x, dtype), case.x)

    check()


def test_ragged_draws_edge_column_counts_only() -> None:
    @settings(max_examples=30, deadline=None, database=None)
    @given(cases(op="rmsnorm", family="ragged"))
    def check(case: Case) -> None:
        assert case.cols in EDGE_COLS

    check()


def _widths_drawn(max_cols: int, *, edges: tuple[int, ...] | None = None) -> set[int]:
    """The widths of 300 derandomized ``ordinary`` cases (drawn from ``edges`` in place of the
    module's list when given), in a fresh interpreter: Hypothesis mixes the literals of every local
    module imported so far into its draws, so in this process the sample would depend on which
    tests ran before this one."""
    script = textwrap.dedent(f"""
        import json
        from hypothesis import given, settings
        import normprops.strategies as strategies
        if {edges!r} is not None:
            strategies.EDGE_COLS = {edges!r}
        seen = set()

        @settings(max_examples=300, deadline=None, database=None, derandomize=True)
        @given(strategies.cases(op="softmax", family="ordinary", max_cols={max_cols}))
        def check(case):
            seen.add(case.cols)

        check()
        print(json.dumps(sorted(seen)))
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


def _covers_the_edges(seen: set[int], max_cols: int) -> bool:
    """At least half of the edge widths up to ``max_cols`` (tails of 4-wide vectors, warp and block
    edges, powers of two and their neighbours, primes) were drawn, 1 among them. (300
    derandomized draws in a fresh interpreter reach 15 of the 23 below 300, Hypothesis repeating
    widths it liked; a list cut to (1,) reaches 3, by drawing anywhere in the range.)"""
    wanted = {c for c in EDGE_COLS if c <= max_cols}  # the list as the module defines it
    return 1 in seen and len(wanted & seen) >= len(wanted) / 2


def test_column_counts_cover_the_edges() -> None:
    seen = _widths_drawn(300)
    assert _covers_the_edges(seen, 300), sorted(seen)
    assert max(seen) <= 300
    assert len(seen - set(EDGE_COLS)) >= 10  # and widths anywhere else in the range


def test_every_edge_width_is_on_the_list_drawn_from() -> None:
    from normprops.strategies import edge_cols

    assert edge_cols() == EDGE_COLS
    vec4 = set(edge_cols(multiple_of=4))
    assert {4, 28, 36, 124, 132, 1020, 1028, 4 * 4093} <= vec4 and all(c % 4 == 0 for c in vec4)


def test_the_edge_coverage_check_fails_on_a_cut_edge_list() -> None:
    assert not _covers_the_edges(_widths_drawn(300, edges=(1,)), 300)


def _drawn(examples: int = 40, **kwargs) -> list[Case]:
    seen: list[Case] = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True)
    @given(cases(**kwargs))
    def check(case: Case) -> None:
        seen.append(case)

    check()
    return seen


@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm"])
def test_long_rows_draws_one_or_two_rows_wider_than_any_other_family(op: str) -> None:
    drawn = _drawn(op=op, family="long_rows", min_rows=1)
    assert all(LONG_COLS[0] <= c.cols <= LONG_COLS[1] for c in drawn)
    assert {c.rows for c in drawn} == {1, 2}
    assert max(c.cols for c in drawn) > 2**17
    assert {c.cols for c in drawn} & set(LONG_EDGE_COLS)  # edges around powers of two
    assert all(FAMILIES["long_rows"].promise(c) for c in drawn)
    # The hunt asks for at least 2 rows: it gets 2.
    assert {c.rows for c in _drawn(10, op=op, family="long_rows")} == {2}


def test_long_rows_stays_inside_a_kernels_widths() -> None:
    vec8 = _drawn(op="softmax", family="long_rows", max_cols=65536, cols_multiple_of=8)
    assert all(32768 <= c.cols <= 65536 and c.cols % 8 == 0 for c in vec8)
    # A kernel that takes no row of 2^15 - 1 columns or more gets the widest rows it takes.
    narrow = _drawn(op="rmsnorm", family="long_rows", max_cols=16385)
    assert all(8192 <= c.cols <= 16385 for c in narrow)
    assert {c.cols for c in _drawn(op="softmax", family="long_rows", max_cols=2)} <= {1, 2}


def test_the_other_families_keep_their_widths() -> None:
    assert max(c.cols for c in _drawn(100, op="softmax", family="ordinary")) <= MAX_COLS
    # Rows wider than MAX_COLS only: up to twice the narrowest, as the hunt draws them.
    wide = _drawn(op="rmsnorm", family="ordinary", min_cols=20000)
    assert all(20000 <= c.cols <= 40000 for c in wide)


def test_families_for_each_op() -> None:
    assert "long_rows" in families_for("softmax") and "long_rows" in families_for("rmsnorm")
    assert "overflow_logits" in families_for("softmax")
    assert "eps_scale" not in families_for("softmax")
    assert "masked" not in families_for("rmsnorm")
    assert families_for("layernorm") == families_for("rmsnorm")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        pytest.param(dict(op="gelu", family="ordinary"), "op must be one of", id="unknown-op"),
        pytest.param(dict(op="softmax", family="bogus"), "family must be one of", id="unknown-family"),
        pytest.param(dict(op="softmax", family="eps_scale"), "does not apply to op 'softmax'",
                     id="family-not-for-op"),
        pytest.param(dict(op="softmax", family="ordinary", min_rows=0),
                     "min_rows must be an integer of at least 1 but was 0", id="min-rows-0"),
        pytest.param(dict(op="softmax", family="ordinary", max_rows=1, min_rows=2),
                     "max_rows must be at least min_rows=2 but was 1", id="rows-inverted"),
        pytest.param(dict(op="softmax", family="nonfinite", min_rows=1, max_rows=1),
                     "needs at least 2 rows", id="nonfinite-one-row"),
        pytest.param(dict(op="softmax", family="ordinary", max_cols=0),
                     "max_cols must be an integer of at least 1 but was 0", id="max-cols-0"),
        pytest.param(dict(op="softmax", family="ordinary", max_cols=2.5),
                     "max_cols must be an integer", id="max-cols-float"),
    ],
)
def test_invalid_arguments_name_the_problem(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cases(**kwargs)


def test_make_case_rejects_bad_eps() -> None:
    with pytest.raises(ValueError, match="eps must be a positive float32 but was 0.0"):
        make_case(op="rmsnorm", family="ordinary", rows=2, cols=3, seed=0,
                  params={"loc": 0.0, "scale": 1.0, "spikes": []}, extras=Extras(eps=0.0))


def test_cases_are_deterministic_in_their_parameters() -> None:
    kw = dict(op="layernorm", family="large_mean", rows=3, cols=100, seed=42,
              params={"mean": 1e4, "sign": -1.0, "ratio": 1e5},
              extras=Extras(gamma_kind="random", beta_kind="large", eps=1e-6))
    a, b = make_case(**kw), make_case(**kw)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.gamma, b.gamma)
    assert a.eps == float(np.float32(1e-6))


def test_rows_wider_than_the_listed_widths_still_have_edges() -> None:
    """A kernel that only takes rows of 20,000 columns or more: its ragged family draws the powers
    of two and their neighbours there, not nothing."""
    from normprops.strategies import edge_cols

    assert edge_cols(min_cols=20000, max_cols=70000) == (32767, 32768, 32769, 65535, 65536, 65537)
    assert edge_cols() == EDGE_COLS  # the listed widths, unchanged, up to MAX_COLS


@settings(max_examples=10, deadline=None)
@given(case=cases(op="softmax", family="ordinary", cols_multiple_of=17000))
def test_a_vector_wider_than_the_default_range_still_gets_a_width(case: Case) -> None:
    assert case.cols % 17000 == 0 and case.cols >= 17000
