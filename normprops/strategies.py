"""Hypothesis strategies: one named family of adversarial rows per bug class.

Drawing thousands of floats one by one is slow and shrinks badly, so every family draws a handful of
parameters (column count, a scale, a spread, a seed, zero to three exact spike values) and builds the
rows with numpy. Shrinking then acts on those parameters, which keeps counterexamples readable: "cols
3, mean 1e4, ratio 1e5" rather than three thousand floats.

Every family draws ragged column counts and several rows per case (so a bug that leaks between rows
shows), and draws gamma, beta and eps for the norms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from normprops.case import Case
from normprops.dtypes import DTYPES, StorageType, get_dtype, to_dtype
from normprops.masking import SCALES
from normprops.ops import FLOAT32_EPS, get_op

__all__ = [
    "Case",
    "DTYPES",
    "StorageType",
    "get_dtype",
    "to_dtype",
    "Family",
    "FAMILIES",
    "EDGE_COLS",
    "edge_cols",
    "families_for",
    "get_family",
    "cases",
    "make_case",
]

F32 = np.float32
FLT_MAX = float(np.finfo(F32).max)
MAX_COLS = 16385

# Column counts where kernels break: tails of 4-wide vector loads, warp (32) and block (256) edges,
# powers of two and their neighbours, primes. Smallest first, so shrinking walks towards 1.
EDGE_COLS: tuple[int, ...] = (
    1, 2, 3, 4, 5, 7, 8, 9, 13, 31, 32, 33, 63, 64, 65, 97, 127, 128, 129, 251, 255, 256, 257, 509,
    511, 512, 513, 1021, 1023, 1024, 1025, 2039, 2047, 2048, 2049, 4093, 4095, 4096, 4097, 8191,
    8192, 8193, 16383, 16384, 16385,
)

EPS_CHOICES: tuple[float, ...] = (1e-5, 1e-6, FLOAT32_EPS, 1e-12, 1e-3)

#: The widths ``long_rows`` draws: rows too long for one block's registers or shared memory, which
#: kernels stream, split over several blocks (clusters) or hand to another code path.
LONG_COLS: tuple[int, int] = (2**15 - 1, 2**18 + 1)
#: Its edge widths: around each power of two, and model vocabularies (GPT-2, Llama 3, Qwen 2, Gemma).
LONG_EDGE_COLS: tuple[int, ...] = (
    32767, 32768, 32769, 50257, 65535, 65536, 65537, 128256, 131071, 131072, 131073, 151936,
    256000, 262143, 262144, 262145,
)


@dataclass(frozen=True)
class Shape:
    """What a family's builder needs to know besides its parameters."""

    rows: int
    cols: int
    op: str
    eps: float | None


@dataclass(frozen=True)
class Family:
    """A named generator of adversarial rows, and the promise its name makes (for meta tests)."""

    name: str
    summary: str
    ops: frozenset[str]
    params: Callable[[str], st.SearchStrategy[dict[str, Any]]]
    build: Callable[[np.random.Generator, Shape, dict[str, Any]], np.ndarray]
    promise: Callable[[Case], bool]
    edge_cols_only: bool = False
    min_rows: int = 1
    # What the parameters drew (and built), in words, shown beside them in reports (e.g. each
    # row's mask).
    describe: Callable[[Shape, dict[str, Any], np.ndarray], dict[str, Any]] | None = None
    # Its own widths, drawn when the caller names no max_cols (None: up to MAX_COLS), their edge
    # widths besides EDGE_COLS, and the most rows it draws (None: as many as the caller allows).
    cols: tuple[int, int] | None = None
    edges: tuple[int, ...] = ()
    max_rows: int | None = None
    # The rows' values and what they mask (True: masked), for an op that takes a mask; the other
    # families hand it a mask that keeps every entry.
    layout: Callable[[np.random.Generator, Shape, dict[str, Any]],
                     tuple[np.ndarray, np.ndarray]] | None = None


def _f32(values: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.clip(values, -FLT_MAX, FLT_MAX).astype(F32)


def _place(x: np.ndarray, position: int, value: float, rows: slice | None = None) -> None:
    cols = x.shape[1]
    for r in range(x.shape[0]) if rows is None else range(x.shape[0])[rows]:
        x[r, (position + 7919 * r) % cols] = value  # a different column in each row


def _log_uniform(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi).map(lambda e: 10.0**e)


def _up_to(element: st.SearchStrategy[Any], *, min_size: int = 0,
           max_size: int = 3) -> st.SearchStrategy[list[Any]]:
    """A list of ``min_size`` to ``max_size`` elements drawn as a count and a fixed tuple.

    ``st.lists`` draws a variable number of choices. Hypothesis's target phase splices spans of one
    example into another; when a list's length changes the splice leaves later draws (the shuffle
    of ``fixed_dictionaries``) short, the attempt overruns, and overruns of a misaligned splice are
    never served from Hypothesis's cache, so the phase repeats them until its invalid-example limit
    (about 100 per valid example). A fixed number of choices per example cannot overrun that way;
    shrinking still walks the count down to ``min_size``.
    """
    return st.tuples(st.integers(min_size, max_size), st.tuples(*[element] * max_size)).map(
        lambda t: list(t[1][: t[0]]))


def _spikes(lo: float, hi: float, max_size: int = 3) -> st.SearchStrategy[list[tuple[int, float]]]:
    return _up_to(st.tuples(st.integers(0, 2**20), st.floats(lo, hi, width=32, allow_subnormal=False)),
                  max_size=max_size)


# --- the families ------------------------------------------------------------------------------


def _ordinary_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "loc": st.floats(-3, 3, width=32),
        "scale": st.sampled_from([1.0, 0.1, 3.0, 10.0]),
        "spikes": _spikes(-50, 50),
    })


def _ordinary_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    x = _f32(p["loc"] + p["scale"] * rng.standard_normal((rows, cols)))
    for pos, value in p["spikes"]:
        _place(x, pos, value)
    return x


def _all_finite_moderate(case: Case) -> bool:
    return bool(np.all(np.isfinite(case.x)) and np.max(np.abs(case.x)) < 1e3)


def _overflow_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "peak": st.one_of(st.floats(88.75, 1e4, width=32), st.floats(1e4, FLT_MAX, width=32)),
        "position": st.integers(0, 2**20),
        "offset": st.sampled_from([0.0, 50.0, 100.0, 1000.0]),
        "scale": st.sampled_from([1.0, 10.0, 0.1]),
    })


def _overflow_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    x = _f32(p["offset"] + p["scale"] * rng.standard_normal((rows, cols)))
    x = np.minimum(x, F32(p["peak"]))
    _place(x, p["position"], p["peak"])
    return x


def _wide_span_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "top": st.floats(-50, 50, width=32),
        "span": st.floats(100, 1e4, width=32),
        "position": st.integers(0, 2**20),
    })


def _wide_span_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    # Uniform over [top - span, top]: with span >= 100 a shifted softmax meets normal, subnormal
    # (below -87.3) and zero (below -103.3) exponentials in one row.
    x = _f32(p["top"] - p["span"] * rng.random((rows, cols)))
    _place(x, p["position"], p["top"])
    if cols > 1:
        _place(x, p["position"] + 1, F32(p["top"] - p["span"]))
    return x


def _wide_span_promise(case: Case) -> bool:
    if case.cols < 2:
        return True
    spread = np.max(case.x, axis=1) - np.min(case.x, axis=1)
    return bool(np.all((spread >= 99.0) & (spread <= 1.001e4)))


def _large_mean_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "mean": st.floats(0, 7).map(lambda e: float(F32(10.0**e))),
        "sign": st.sampled_from([1.0, -1.0]),
        "ratio": _log_uniform(2, 7),  # |mean| / std
    })


def _large_mean_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    mean = p["sign"] * p["mean"]
    std = p["mean"] / p["ratio"]
    return _f32(mean + std * rng.standard_normal((rows, cols)))


def _large_mean_promise(case: Case) -> bool:
    x = case.x.astype(np.float64)
    std = x.std(axis=1)
    mean = np.abs(x.mean(axis=1))
    return bool(np.all((std == 0) | (mean >= 50 * std)))


def _huge_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "magnitude": st.floats(17, math.log10(FLT_MAX)).map(lambda e: float(_f32(np.array(10.0**e)))),
        "pattern": st.sampled_from(["constant", "normal", "positive", "one_big"]),
        "sign": st.sampled_from([1.0, -1.0]),
    })


def _huge_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    m = p["sign"] * p["magnitude"]
    shape = (rows, cols)
    if p["pattern"] == "constant":
        return _f32(np.full(shape, m))  # e.g. a row of 3e19: x*x overflows, the answer is 1
    if p["pattern"] == "normal":
        # Normal values, scaled so each row's largest is |m| (the family promises >= 1e16).
        z = rng.standard_normal(shape)
        return _f32(m * z / np.max(np.abs(z), axis=1, keepdims=True))
    if p["pattern"] == "positive":
        return _f32(m * (0.5 + 0.5 * rng.random(shape)))
    x = _f32(rng.standard_normal(shape))
    x[:, 0] = F32(m)
    return x


def _huge_promise(case: Case) -> bool:
    return bool(np.all(np.isfinite(case.x)) and np.all(np.max(np.abs(case.x), axis=1) >= 1e16))


def _tiny_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "magnitude": st.floats(-45.5, -20).map(lambda e: 10.0**e),
        "pattern": st.sampled_from(["normal", "constant", "positive", "one_hot"]),
    })


def _tiny_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    m = p["magnitude"]
    shape = (rows, cols)
    if p["pattern"] == "constant":
        return _f32(np.full(shape, m))
    if p["pattern"] == "positive":
        return _f32(m * rng.random(shape))
    if p["pattern"] == "one_hot":
        x = np.zeros(shape, dtype=F32)
        x[:, 0] = F32(max(m, 2.0**-149))
        return x
    return _f32(m * np.clip(rng.standard_normal(shape), -4, 4))


def _tiny_promise(case: Case) -> bool:
    # Every square underflows below FLT_MIN = 2^-126.
    return bool(np.max(np.abs(case.x)) < 2.0**-63)


def _eps_scale_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "ratio": _log_uniform(-3, 3),  # mean square (RMS) or variance (LayerNorm) over eps
        "centre": st.floats(-3, 3),  # LayerNorm mean, in units of the target std
    })


def _eps_scale_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols, eps, centred = shape.rows, shape.cols, shape.eps, shape.op == "layernorm"
    z = rng.standard_normal((rows, cols))
    if centred:
        z = z - z.mean(axis=1, keepdims=True) if cols > 1 else z
        spread = np.sqrt(np.mean(z**2, axis=1, keepdims=True))
        spread[spread == 0] = 1.0
        target = math.sqrt(p["ratio"] * eps)
        return _f32(p["centre"] * target + z / spread * target)
    spread = np.sqrt(np.mean(z**2, axis=1, keepdims=True))
    return _f32(z / spread * math.sqrt(p["ratio"] * eps))


def _eps_scale_promise(case: Case) -> bool:
    x = case.x.astype(np.float64)
    stat = x.var(axis=1) if case.op == "layernorm" else np.mean(x**2, axis=1)
    if case.op == "layernorm" and case.cols == 1:
        return True
    return bool(np.all((stat >= 2e-4 * case.eps) & (stat <= 5e3 * case.eps)))


def _constant_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "pattern": st.sampled_from(["zeros", "constant", "one_hot", "spike"]),
        "value": st.floats(-1e4, 1e4, width=32),
        "spike": st.floats(-1e3, 1e3, width=32),
        "position": st.integers(0, 2**20),
    })


def _constant_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    shape = (rows, cols)
    if p["pattern"] == "zeros":
        return np.zeros(shape, dtype=F32)
    if p["pattern"] == "constant":
        return np.full(shape, p["value"], dtype=F32)
    if p["pattern"] == "one_hot":
        x = np.zeros(shape, dtype=F32)
        _place(x, p["position"], 1.0)
        return x
    x = np.full(shape, p["value"], dtype=F32)
    _place(x, p["position"], F32(p["value"] + p["spike"]))
    return x


def _constant_promise(case: Case) -> bool:
    # Each row takes at most two distinct values, one of them at most once.
    for row in case.x:
        values, counts = np.unique(row, return_counts=True)
        if len(values) > 2 or (len(values) == 2 and min(counts) > 1):
            return False
    return True


def _ragged_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"scale": st.sampled_from([1.0, 3.0, 0.3])})


def _ragged_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    return _f32(p["scale"] * rng.standard_normal((rows, cols)))


MASK_PATTERNS = ("random", "full", "thread_share", "lane_share", "chunk", "all_but_one", "left_pad",
                 "right_pad", "causal", "padded_causal", "sliding_window", "block_sparse", "none")


def _pad(r: int, cols: int, p: dict[str, Any]) -> int:
    """Columns row ``r``'s padding masks: each of the first four rows has a length of its own, as
    each sequence of a padded batch has."""
    return _edge_length(cols, p["pad"][r % len(p["pad"])])


def _edge_length(cols: int, edge: tuple[int, int]) -> int:
    """``2^power + delta`` (``edge`` = (power, delta), delta -1, 0 or 1), clamped to [1, cols - 1]
    (1 for a row of one column): lengths just around the block sizes kernels split rows into, and
    all of the row but one column once ``2^power`` reaches its width."""
    power, delta = edge
    return min(max(2**power + delta, 1), max(cols - 1, 1))


def _causal_keep(r: int, cols: int, p: dict[str, Any], *, least: int = 0) -> int:
    """Columns row ``r`` keeps under a causal mask: its first ``k + r`` (none when that is not
    positive), ``k = offset`` for a negative offset (fully masked rows on top), else ``least`` plus
    ``offset`` modulo the rest of the width, so row 0 masks at least one column."""
    k = p["offset"] if p["offset"] < 0 else least + p["offset"] % max(cols - least, 1)
    return min(max(k + r, 0), cols)


def _padded_causal(r: int, cols: int, p: dict[str, Any]) -> tuple[int, int]:
    """Columns ``[pad, hi)`` row ``r`` keeps under a left-padded causal mask: the causal mask of the
    columns after its padding, where row 0 keeps one column or more (unless the offset is
    negative)."""
    pad = _pad(r, cols, p)
    return pad, min(pad + _causal_keep(r, max(cols - pad, 1), p, least=1), cols)


def _window(r: int, rows: int, cols: int, p: dict[str, Any]) -> tuple[int, int]:
    """Columns ``[lo, hi)`` row ``r`` keeps under a sliding window aligned to the end of the row, as
    the last ``rows`` queries of a sequence see it: the last row's window ends ``|offset|`` columns
    (modulo the width) before the end, each row above it one column earlier."""
    hi = max(cols - abs(p["offset"]) % cols - (rows - 1 - r), 0)
    return max(hi - _edge_length(cols, p["window"]), 0), hi


def _blocks(cols: int, p: dict[str, Any]) -> tuple[int, int, int]:
    """Block size, period and phase of a block-sparse mask: block ``j`` is kept when
    ``j % period == phase`` (the last block when none is). The size is at most the largest power of
    two below the width, so a row has two blocks or more and one of them is masked. The phase counts
    back from the end of a period: ``thread`` 0 keeps the last block of each, so rows start with
    masked blocks."""
    size = 2 ** min(p["block"], max((cols - 1).bit_length() - 1, 0))
    period = p["period"]
    return size, period, period - 1 - p["thread"] % period


def _chunk(cols: int, p: dict[str, Any]) -> tuple[int, int]:
    length = max(1, int(p["fraction"] * cols))
    start = p["thread"] % max(1, cols - length + 1)
    return start, start + length


def _row_mask(pattern: str, r: int, shape: Shape, p: dict[str, Any],
              rng: np.random.Generator | None) -> np.ndarray:
    """The columns of row ``r`` that ``pattern`` masks; every pattern but ``none`` masks at least
    one column of row 0 (the whole row when it has one column). Only ``random`` draws from
    ``rng``."""
    cols = shape.cols
    col = np.arange(cols)
    if pattern == "random":
        mask = rng.random(cols) < p["fraction"]
        mask[rng.integers(cols)] = True
        return mask
    if pattern == "full":
        return np.ones(cols, dtype=bool)
    if pattern == "thread_share":  # all of one thread's columns in a 256-thread block
        return col % 256 == p["thread"] % min(cols, 256)
    if pattern == "lane_share":  # one lane's columns when a warp of 32 owns the row
        return col % 32 == p["thread"] % min(cols, 32)
    if pattern == "chunk":  # a contiguous chunk, for kernels that split rows into blocks
        start, stop = _chunk(cols, p)
        return (col >= start) & (col < stop)
    if pattern == "all_but_one":  # with one column: that column (a fully masked row)
        return (col != p["thread"] % cols) if cols > 1 else np.ones(cols, dtype=bool)
    if pattern == "left_pad":  # a masked prefix, often longer than a kernel's block
        return col < _pad(r, cols, p)
    if pattern == "right_pad":
        return col >= cols - _pad(r, cols, p)
    if pattern == "causal":  # row r attends to its first k + r columns
        return col >= _causal_keep(r, cols, p)
    if pattern == "padded_causal":  # a left-padded sequence's causal mask, as its prefill sees it
        lo, hi = _padded_causal(r, cols, p)
        return (col < lo) | (col >= hi)
    if pattern == "sliding_window":
        lo, hi = _window(r, shape.rows, cols, p)
        return (col < lo) | (col >= hi)
    if pattern == "block_sparse":
        if cols == 1:
            return np.ones(cols, dtype=bool)
        size, period, phase = _blocks(cols, p)
        block = col // size
        kept = block % period == phase
        return ~kept if kept.any() else block != block[-1]
    return np.zeros(cols, dtype=bool)


def _row_mask_text(pattern: str, r: int, shape: Shape, p: dict[str, Any]) -> str:
    """What :func:`_row_mask` masks, in words, for reports."""
    cols = shape.cols
    if pattern in ("none", "full") or (cols == 1 and pattern in ("all_but_one", "block_sparse")):
        return "full" if pattern != "none" else "none"
    if pattern == "random":
        return f"random masks {p['fraction']:.0%}"
    if pattern == "thread_share":
        return f"thread_share masks col % 256 == {p['thread'] % min(cols, 256)}"
    if pattern == "lane_share":
        return f"lane_share masks col % 32 == {p['thread'] % min(cols, 32)}"
    if pattern == "chunk":
        return "chunk masks [{}, {})".format(*_chunk(cols, p))
    if pattern == "all_but_one":
        return f"all_but_one keeps col {p['thread'] % cols}"
    if pattern == "left_pad":
        return f"left_pad masks [0, {_pad(r, cols, p)})"
    if pattern == "right_pad":
        return f"right_pad masks [{cols - _pad(r, cols, p)}, {cols})"
    if pattern == "causal":
        return f"causal keeps [0, {_causal_keep(r, cols, p)})"
    if pattern == "padded_causal":
        return "padded_causal keeps [{}, {})".format(*_padded_causal(r, cols, p))
    if pattern == "sliding_window":
        return "sliding_window keeps [{}, {})".format(*_window(r, shape.rows, cols, p))
    size, period, phase = _blocks(cols, p)
    return f"block_sparse of {size} keeps blocks j % {period} == {phase}"


#: The layouts attention puts on a row: what a second layout of a row is drawn from.
ATTENTION_LAYOUTS = MASK_PATTERNS[MASK_PATTERNS.index("left_pad") : -1]
_any_layout = st.sampled_from(MASK_PATTERNS[-1:] + MASK_PATTERNS[:-1])  # shrinks to "none"
_attention_layout = st.sampled_from(("none", *ATTENTION_LAYOUTS))


def _union(*layouts: str) -> str:
    return "+".join(dict.fromkeys(n for n in layouts if n != "none")) or "none"


def _masked_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    delta = st.sampled_from((0, 1, -1))
    return st.fixed_dictionaries({
        # A pattern for each of the first four rows (row r takes pattern r % 4): a layout, or a
        # layout and an attention layout on top ("chunk+causal", "left_pad+sliding_window"), as
        # attention combines key padding with causal or window masks. The first row always masks;
        # the rest shrinks to "none".
        "patterns": st.tuples(st.tuples(st.sampled_from(MASK_PATTERNS[:-1]), _attention_layout),
                              *[st.tuples(_any_layout, _attention_layout)] * 3)
        .map(lambda rows: [_union(*layouts) for layouts in rows]),
        "thread": st.integers(0, 255),
        "fraction": st.floats(0.05, 0.95),
        "scale": st.sampled_from([1.0, 10.0]),
        # (power, delta): 2^power + delta columns (_edge_length), a padding for each of the first
        # four rows. Paddings shrink towards all of the row but one column, windows towards one
        # column, blocks towards the largest.
        "pad": st.tuples(*[st.tuples(st.integers(0, 18).map(lambda i: 18 - i), delta)] * 4),
        "window": st.tuples(st.integers(0, 18), delta),
        "offset": st.integers(-4, 2**18),
        "block": st.integers(0, 9).map(lambda i: 13 - i),  # blocks of 8192 down to 16 columns
        "period": st.integers(2, 64),
        # A boolean mask leaves values under it, which a kernel must never read: the drawn ones,
        # or ones far above the kept values.
        **({"masked_values": st.sampled_from(("drawn", "large"))} if get_op(op).has_mask else {}),
    })


def _masked_layout(rng: np.random.Generator, shape: Shape,
                   p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The rows' values and, separately, what the layouts mask (True: masked)."""
    x = _f32(p["scale"] * rng.standard_normal((shape.rows, shape.cols)))
    masked = np.zeros(x.shape, dtype=bool)
    for r in range(shape.rows):
        masks = [_row_mask(layout, r, shape, p, rng)
                 for layout in p["patterns"][r % len(p["patterns"])].split("+")]
        mask = np.logical_or.reduce(masks)
        # Two layouts that together mask a row whole, as neither does alone, would hide the partial
        # masks they were drawn for: the attention layout alone stays (fully masked rows are
        # drawn as such: "full", negative causal offsets).
        if mask.all() and not any(m.all() for m in masks):
            mask = masks[-1]
        masked[r] = mask
    if p.get("masked_values") == "large":
        # Far above every kept value: a kernel whose max sees masked entries underflows the row.
        x[masked] = F32(1e4)
    return x, masked


def _masked_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    x, masked = _masked_layout(rng, shape, p)
    x[masked] = -np.inf
    return x


def _masked_describe(shape: Shape, p: dict[str, Any], x: np.ndarray) -> dict[str, Any]:
    described = []
    for r in range(shape.rows):
        layouts = p["patterns"][r % len(p["patterns"])].split("+")
        if len(layouts) > 1 and np.array_equal(np.isneginf(x[r]),
                                               _row_mask(layouts[-1], r, shape, p, rng=None)):
            layouts = layouts[-1:]  # the row is its attention layout alone
        described.append(" + ".join(_row_mask_text(layout, r, shape, p) for layout in layouts))
    return {"masks": described}


def _masked_promise(case: Case) -> bool:
    if case.mask is not None:
        return bool(not case.mask.all() and np.all(np.isfinite(case.x)))
    return bool(np.any(np.isneginf(case.x)) and not np.any(np.isnan(case.x) | np.isposinf(case.x)))


def _long_rows_promise(case: Case) -> bool:
    return case.cols >= LONG_COLS[0] and _all_finite_moderate(case)


NONFINITE_VALUES = (float("nan"), float("inf"), float("-inf"))


def _nonfinite_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "poisoned_row": st.integers(0, 2**10),
        "values": _up_to(st.tuples(st.integers(0, 2**20), st.sampled_from(NONFINITE_VALUES)),
                         min_size=1),
        "scale": st.sampled_from([1.0, 10.0]),
    })


def _nonfinite_build(rng: np.random.Generator, shape: Shape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    x = _f32(p["scale"] * rng.standard_normal((rows, cols)))
    r = p["poisoned_row"] % rows
    for pos, value in p["values"]:
        x[r, pos % cols] = value
    return x


def _nonfinite_promise(case: Case) -> bool:
    finite_rows = np.all(np.isfinite(case.x), axis=1)
    return bool(finite_rows.any() and not finite_rows.all())


_ALL = frozenset({"softmax", "layernorm", "rmsnorm", "masked_softmax"})
_NORMS = frozenset({"layernorm", "rmsnorm"})
_SOFTMAX = frozenset({"softmax", "masked_softmax"})

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("ordinary", "activations as models produce them", _ALL, _ordinary_params,
               _ordinary_build, _all_finite_moderate),
        Family("overflow_logits", "row max above 88.7 (expf overflows), anywhere in the row",
               _SOFTMAX, _overflow_params, _overflow_build,
               lambda c: bool(np.all(np.max(c.x, axis=1) > 88.7))),
        Family("wide_span", "spreads of 100 to 1e4 inside a row", _ALL, _wide_span_params,
               _wide_span_build, _wide_span_promise),
        Family("large_mean", "|mean|/std from 1e2 to 1e7 (variance cancellation)", _ALL,
               _large_mean_params, _large_mean_build, _large_mean_promise),
        Family("huge", "magnitudes up to float32 max (squares and sums overflow)", _ALL,
               _huge_params, _huge_build, _huge_promise),
        Family("tiny", "magnitudes down to subnormals (squares underflow)", _ALL, _tiny_params,
               _tiny_build, _tiny_promise),
        Family("eps_scale", "mean square or variance near eps", _NORMS, _eps_scale_params,
               _eps_scale_build, _eps_scale_promise),
        Family("constant", "zero-variance rows, one-hot rows, single spikes", _ALL,
               _constant_params, _constant_build, _constant_promise),
        Family("ragged", "shape edge cases with ordinary values", _ALL, _ragged_params,
               _ragged_build, lambda c: c.cols in EDGE_COLS, edge_cols_only=True),
        Family("masked", "-inf entries: attention masks, thread shares, fully masked rows",
               _SOFTMAX, _masked_params, _masked_build, _masked_promise, min_rows=2,
               describe=_masked_describe, layout=_masked_layout),
        Family("nonfinite", "NaN and +-inf in some rows (propagation and row isolation)", _ALL,
               _nonfinite_params, _nonfinite_build, _nonfinite_promise, min_rows=2),
        Family("long_rows", "1 or 2 rows of 2^15 - 1 to 2^18 + 1 columns, ordinary values", _ALL,
               _ordinary_params, _ordinary_build, _long_rows_promise, cols=LONG_COLS,
               edges=LONG_EDGE_COLS, max_rows=2),
    )
}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"family must be one of {', '.join(FAMILIES)} but was {name!r}"
        ) from None


def families_for(op: str) -> tuple[str, ...]:
    spec = get_op(op)
    if spec.families is not None:  # a gradient op: normprops.backward_strategies draws them
        return spec.families
    return tuple(name for name, f in FAMILIES.items() if op in f.ops)


GAMMA_KINDS = ("ones", "random", "negative", "zero", "large")
BETA_KINDS = ("zeros", "random", "large")


def _gamma(rng: np.random.Generator, kind: str, cols: int, large: float = 1e4) -> np.ndarray:
    if kind == "ones":
        return np.ones(cols, dtype=F32)
    if kind == "zero":
        return np.zeros(cols, dtype=F32)
    g = rng.standard_normal(cols)
    if kind == "negative":
        return _f32(-np.abs(g) - 0.1)
    if kind == "large":
        return _f32(large * g)
    return _f32(g)


def _beta(rng: np.random.Generator, kind: str, cols: int, large: float = 1e4) -> np.ndarray:
    if kind == "zeros":
        return np.zeros(cols, dtype=F32)
    scale = large if kind == "large" else 1.0
    return _f32(scale * rng.standard_normal(cols))


def make_case(*, op: str, family: str, rows: int, cols: int, seed: int, params: dict[str, Any],
              gamma_kind: str = "ones", beta_kind: str = "zeros", eps: float | None = None,
              dtype: str = "float32", scale: float = 1.0, mask_fill: float | None = None) -> Case:
    """Build a case deterministically from drawn parameters (what the strategies call); for a
    narrow ``dtype`` x, gamma and beta are rounded to it (:func:`to_dtype`). A masked softmax
    takes ``scale`` (a float32 value) and its mask from the family's layout (every entry kept in a
    family without one), handed over as ``mask_fill`` says (:class:`~normprops.case.Case`)."""
    spec = get_op(op)
    kind = get_dtype(dtype)
    fam = get_family(family)
    if op not in fam.ops:
        raise ValueError(f"family {family!r} does not apply to op {op!r}; it applies to "
                         f"{sorted(fam.ops)}")
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be at least 1 but were rows={rows}, cols={cols}")
    eps_value = None
    if "eps" in spec.params:
        eps_value = float(F32(spec.default_eps if eps is None else eps))
        if not eps_value > 0:
            raise ValueError(f"eps must be a positive float32 but was {eps!r}")
    rng = np.random.default_rng(seed)
    shape = Shape(rows, cols, op, eps_value)
    keep = None
    if spec.has_mask and fam.layout is not None:
        x, masked = fam.layout(rng, shape, params)
        keep = ~masked
    elif spec.has_mask:
        x = fam.build(rng, shape, params)
        keep = np.ones(x.shape, dtype=bool)
    else:
        x = fam.build(rng, shape, params)
    x = to_dtype(x, dtype)
    gamma = to_dtype(_gamma(rng, gamma_kind, cols, kind.large_weight), dtype) if spec.has_gamma else None
    beta = to_dtype(_beta(rng, beta_kind, cols, kind.large_weight), dtype) if spec.has_beta else None
    shown = dict(params)
    if fam.describe is not None:
        shown.update(fam.describe(shape, params, x if keep is None else np.where(keep, x, -np.inf)))
    elif keep is not None:
        shown["masks"] = "none"
    if spec.has_mask:
        scale = float(F32(scale))
        shown["softmax_scale"] = scale
    shown["seed"] = seed
    if spec.has_gamma:
        shown["gamma"] = gamma_kind
    if spec.has_beta:
        shown["beta"] = beta_kind
    if dtype != "float32":
        shown["dtype"] = dtype
    return Case(op=op, family=family, x=x, gamma=gamma, beta=beta, eps=eps_value, params=shown,
                dtype=dtype, mask=keep, scale=scale if spec.has_mask else None,
                mask_fill=mask_fill if spec.has_mask else None)


def _check_positive(name: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum} but was {value!r}")


def edge_cols(*, min_cols: int = 1, max_cols: int = MAX_COLS, multiple_of: int = 1) -> tuple[int, ...]:
    """The edge widths inside ``[min_cols, max_cols]`` that are multiples of ``multiple_of``,
    smallest first.

    Without a constraint these are :data:`EDGE_COLS`. A kernel that needs widths in multiples of K
    (K-element vectors) still has edges, counted in vectors: K times each edge count (one vector
    past a power of two, a last vector alone, a prime number of vectors), and a power of two plus
    or minus one vector."""
    return _edges(EDGE_COLS, min_cols=min_cols, max_cols=max_cols, multiple_of=multiple_of)


def _edges(counts: tuple[int, ...], *, min_cols: int, max_cols: int,
           multiple_of: int) -> tuple[int, ...]:
    _check_positive("multiple_of", multiple_of)
    k = multiple_of
    found = {k * c for c in counts}
    if k > 1:
        p = 1
        while p <= max_cols + k:
            found |= {q for q in (p - k, p, p + k) if q > 0 and q % k == 0}
            p *= 2
    return tuple(sorted(c for c in found if min_cols <= c <= max_cols))


def _family_cols(fam: Family, min_cols: int, max_cols: int, multiple_of: int) -> tuple[int, int]:
    """The part of ``[min_cols, max_cols]`` that ``fam`` draws from: all of it, or the family's own
    widths where some multiple of ``multiple_of`` lies in both, else the upper half (the widest
    rows the caller takes)."""
    if fam.cols is None:
        return min_cols, max_cols
    low, high = max(min_cols, fam.cols[0]), min(max_cols, max(fam.cols[1], 2 * min_cols))
    if -(-low // multiple_of) * multiple_of <= high:
        return low, high
    return max(min_cols, max_cols // 2), max_cols


def cases(*, op: str, family: str, min_rows: int = 2, max_rows: int = 5, min_cols: int = 1,
          max_cols: int | None = None, cols_multiple_of: int = 1, dtype: str = "float32",
          mask_fill: float | None = None) -> st.SearchStrategy[Case]:
    """Cases of ``family`` for ``op``: a batch of rows plus gamma, beta and eps where the op has them.

    ``min_rows`` is raised to the family's own minimum (``masked`` and ``nonfinite`` need a clean
    row beside a poisoned one); ``long_rows`` draws at most 2 rows (at least ``min_rows``). Column
    counts are multiples of ``cols_multiple_of`` in ``[min_cols, max_cols]``, drawn from the edge
    widths (:func:`edge_cols`) or anywhere in the range; ``ragged`` draws only edge widths.
    ``max_cols`` None is the family's own widest: :data:`MAX_COLS` (twice ``min_cols`` where that
    is more), for ``long_rows`` 2^18 + 1. ``long_rows`` draws from :data:`LONG_COLS` inside the
    range, or, when no width there lies in it, from its upper half. A masked softmax's cases draw
    their scale from :data:`~normprops.masking.SCALES` and hand their mask over as ``mask_fill``
    says (None: booleans).
    """
    spec = get_op(op)
    get_dtype(dtype)
    fam = get_family(family)
    if op not in fam.ops:
        raise ValueError(f"family {family!r} does not apply to op {op!r}; families for {op}: "
                         f"{', '.join(families_for(op))}")
    _check_positive("min_rows", min_rows)
    _check_positive("max_rows", max_rows)
    _check_positive("min_cols", min_cols)
    if max_cols is None:
        max_cols = max(MAX_COLS if fam.cols is None else fam.cols[1], 2 * min_cols)
    _check_positive("max_cols", max_cols)
    _check_positive("cols_multiple_of", cols_multiple_of)
    if max_cols < min_cols:
        raise ValueError(f"max_cols must be at least min_cols={min_cols} but was {max_cols}")
    lowest, highest = -(-min_cols // cols_multiple_of), max_cols // cols_multiple_of
    if highest < lowest:
        raise ValueError(f"no multiple of cols_multiple_of={cols_multiple_of} lies in "
                         f"[min_cols={min_cols}, max_cols={max_cols}]; widen the range")
    if max_rows < min_rows:
        raise ValueError(f"max_rows must be at least min_rows={min_rows} but was {max_rows}")
    low_rows = max(min_rows, fam.min_rows)
    if max_rows < low_rows:
        raise ValueError(f"family {family!r} needs at least {fam.min_rows} rows but max_rows was "
                         f"{max_rows}")
    min_cols, max_cols = _family_cols(fam, min_cols, max_cols, cols_multiple_of)
    lowest, highest = -(-min_cols // cols_multiple_of), max_cols // cols_multiple_of
    edges = sorted(set(edge_cols(min_cols=min_cols, max_cols=max_cols, multiple_of=cols_multiple_of))
                   | set(_edges(fam.edges, min_cols=min_cols, max_cols=max_cols,
                                multiple_of=cols_multiple_of)))
    if fam.edge_cols_only and not edges:
        raise ValueError(f"family {family!r} draws edge column counts only, and none lies in "
                         f"[{min_cols}, {max_cols}]")
    anywhere = st.integers(lowest, highest).map(lambda n: n * cols_multiple_of)
    if fam.edge_cols_only:
        cols_strategy = st.sampled_from(edges)
    else:
        cols_strategy = st.one_of(st.sampled_from(edges), anywhere) if edges else anywhere
    eps_strategy = st.none()
    if "eps" in spec.params:
        eps_strategy = st.sampled_from((spec.default_eps,) + EPS_CHOICES)
    # Built once: constructing and validating strategies on every draw cost more than judging.
    high_rows = max_rows if fam.max_rows is None else max(low_rows, min(max_rows, fam.max_rows))
    rows_strategy = st.integers(low_rows, high_rows)
    seed_strategy = st.integers(0, 2**32 - 1)
    params_strategy = fam.params(op)
    gamma_strategy = st.sampled_from(GAMMA_KINDS)
    beta_strategy = st.sampled_from(BETA_KINDS)
    scale_strategy = st.sampled_from(SCALES) if spec.has_mask else st.just(1.0)

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        return make_case(
            op=op,
            family=family,
            rows=draw(rows_strategy, label="rows"),
            cols=draw(cols_strategy, label="cols"),
            seed=draw(seed_strategy, label="seed"),
            params=draw(params_strategy, label="params"),
            gamma_kind=draw(gamma_strategy, label="gamma") if spec.has_gamma else "ones",
            beta_kind=draw(beta_strategy, label="beta") if spec.has_beta else "zeros",
            eps=draw(eps_strategy, label="eps"),
            dtype=dtype,
            scale=draw(scale_strategy, label="scale") if spec.has_mask else 1.0,
            mask_fill=mask_fill,
        )

    return draw_case()
