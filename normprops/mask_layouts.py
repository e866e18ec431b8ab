"""The ``masked`` family's layouts: padding, causal, sliding-window, block-sparse, chunk and thread-share
masks, alone or an attention layout on top of another, drawn per row; its parameters, rows, masks in
words and promise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from normprops.case import Case
from normprops.family_rows import F32, CaseShape, _f32
from normprops.ops import get_op

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


def _row_mask(pattern: str, r: int, shape: CaseShape, p: dict[str, Any],
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


def _row_mask_text(pattern: str, r: int, shape: CaseShape, p: dict[str, Any]) -> str:
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


def _masked_layout(rng: np.random.Generator, shape: CaseShape,
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


def _masked_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
    x, masked = _masked_layout(rng, shape, p)
    x[masked] = -np.inf
    return x


def _masked_describe(shape: CaseShape, p: dict[str, Any], x: np.ndarray) -> dict[str, Any]:
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


