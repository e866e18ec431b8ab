"""The families' rows: each family's parameters (a Hypothesis strategy) and the rows it builds
from them, and the promise its name makes; the ``masked`` family's masks are in
:mod:`normprops.mask_layouts`. The table of families is :data:`normprops.strategies.FAMILIES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from normprops.case import WIDEST_COLS, Case
from normprops.ops import get_op

F32 = np.float32
FLT_MAX = float(np.finfo(F32).max)

#: The widths ``long_rows`` draws: rows too long for one block's registers or shared memory, which
#: kernels stream, split over several blocks (clusters) or hand to another code path.
LONG_COLS: tuple[int, int] = (2**15 - 1, WIDEST_COLS)
#: Its edge widths: around each power of two, and model vocabularies (GPT-2, Llama 3, Qwen 2, Gemma).
LONG_EDGE_COLS: tuple[int, ...] = (
    32767, 32768, 32769, 50257, 65535, 65536, 65537, 128256, 131071, 131072, 131073, 151936,
    256000, 262143, 262144, 262145,
)


@dataclass(frozen=True)
class CaseShape:
    """What a family's builder needs to know besides its parameters: the case's rows, columns, op and
    eps (not a kernel's launch shape, which is :class:`normprops.cuda.shape.Shape`)."""

    rows: int
    cols: int
    op: str
    eps: float | None



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


def _ordinary_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
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


def _overflow_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
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


def _wide_span_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
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


def _large_mean_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    mean = p["sign"] * p["mean"]
    std = p["mean"] / p["ratio"]
    z = rng.standard_normal((rows, cols))
    # The ratio is drawn from 100 up and the family promises |mean| >= 50 std of each row, but a
    # row of a few columns can spread past twice its scale (three normal draws do about one time
    # in 400); such a row is scaled back to 1.9 times. Wider rows are left as drawn.
    spread = z.std(axis=1, keepdims=True)
    return _f32(mean + std * (z / np.maximum(1.0, spread / 1.9)))


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


def _huge_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
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


def _tiny_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
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


def _eps_scale_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
    rows, cols, eps, centred = shape.rows, shape.cols, shape.eps, get_op(shape.op).centred
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
    centred = get_op(case.op).centred
    stat = x.var(axis=1) if centred else np.mean(x**2, axis=1)
    if centred and case.cols == 1:
        return True
    return bool(np.all((stat >= 2e-4 * case.eps) & (stat <= 5e3 * case.eps)))


def _constant_params(op: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "pattern": st.sampled_from(["zeros", "constant", "one_hot", "spike"]),
        "value": st.floats(-1e4, 1e4, width=32),
        "spike": st.floats(-1e3, 1e3, width=32),
        "position": st.integers(0, 2**20),
    })


def _constant_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
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


def _ragged_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    return _f32(p["scale"] * rng.standard_normal((rows, cols)))



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


def _nonfinite_build(rng: np.random.Generator, shape: CaseShape, p: dict[str, Any]) -> np.ndarray:
    rows, cols = shape.rows, shape.cols
    x = _f32(p["scale"] * rng.standard_normal((rows, cols)))
    r = p["poisoned_row"] % rows
    for pos, value in p["values"]:
        x[r, pos % cols] = value
    return x


def _nonfinite_promise(case: Case) -> bool:
    finite_rows = np.all(np.isfinite(case.x), axis=1)
    return bool(finite_rows.any() and not finite_rows.all())


