"""The kinds of upstream gradient dy a gradient family draws, and the gradient families' table.

``ordinary``; ``one_hot`` (one nonzero per row); ``scaled`` (magnitudes from 1e-38 to 1e30);
``orthogonal`` (dy orthogonal to y, or dy*gamma orthogonal to xhat, in float64 before dy's rounding:
the projection term vanishes); ``cancelling`` (dy nearly constant along y, or dy*gamma nearly
``a + b xhat``: the exact dx nearly vanishes while its terms do not). Each draws a few parameters
(a Hypothesis strategy) and numpy builds the rows, against the direction the op names
(``OpSpec.gradient_inputs``: y for softmax, xhat for the norms).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

__all__ = ["GradFamily", "GRAD_FAMILIES", "DY_KINDS", "DY_PARAMS", "draw_dy"]

FLT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class GradFamily:
    """The forward families a gradient family takes x from, the dy kinds it pairs them with, and
    its own rows and widths where it has them."""

    name: str
    x_families: tuple[str, ...]
    dy_kinds: tuple[str, ...]
    rows: tuple[int, int] | None = None
    max_cols: int | None = None
    edge_cols_only: bool = False
    min_rows: int = 1  # nonfinite: a poisoned row beside a clean one


GRAD_FAMILIES: dict[str, GradFamily] = {
    f.name: f
    for f in (
        GradFamily("ordinary", ("ordinary",), ("ordinary",)),
        GradFamily("large_mean", ("large_mean",), ("ordinary", "orthogonal", "one_hot", "cancelling")),
        GradFamily("wide_span", ("wide_span",), ("ordinary", "cancelling")),
        GradFamily("constant", ("constant",), ("ordinary", "one_hot", "cancelling")),
        GradFamily("tiny", ("tiny",), ("ordinary", "scaled")),
        GradFamily("eps_scale", ("eps_scale",), ("ordinary", "orthogonal", "cancelling")),
        GradFamily("huge", ("huge",), ("ordinary",)),
        GradFamily("ragged", ("ragged",), ("ordinary",), edge_cols_only=True),
        GradFamily("nonfinite", ("nonfinite",), ("ordinary",), min_rows=2),
        GradFamily("cancelling_dy", ("ordinary", "large_mean", "wide_span", "constant"), ("cancelling",)),
        GradFamily("orthogonal_dy", ("ordinary", "large_mean", "wide_span", "eps_scale"), ("orthogonal",)),
        GradFamily("one_hot_dy", ("ordinary", "large_mean", "constant"), ("one_hot",)),
        GradFamily("dy_scale", ("ordinary", "large_mean", "wide_span"), ("scaled",)),
        GradFamily("tall", ("ordinary", "large_mean", "constant"), ("ordinary", "one_hot", "scaled"),
                   rows=(64, 1024), max_cols=64),
    )
}

DY_KINDS = ("ordinary", "one_hot", "scaled", "orthogonal", "cancelling")


def _signed_power(lo: float, hi: float) -> st.SearchStrategy[float]:
    """``+-10^e`` for e in [lo, hi]: never zero, shrinking towards +10^lo."""
    return st.tuples(st.sampled_from([1.0, -1.0]), st.floats(lo, hi)).map(lambda t: t[0] * 10.0**t[1])


DY_PARAMS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "ordinary": st.fixed_dictionaries({"loc": st.floats(-1, 1, width=32),
                                       "scale": st.sampled_from([1.0, 0.1, 10.0])}),
    "one_hot": st.fixed_dictionaries({"position": st.integers(0, 2**20),
                                      "value": _signed_power(-3, 3)}),
    "scaled": st.fixed_dictionaries({"exponent": st.floats(-38, 30),
                                     "pattern": st.sampled_from(["normal", "positive"])}),
    "orthogonal": st.fixed_dictionaries({"scale": st.sampled_from([1.0, 0.1, 10.0])}),
    "cancelling": st.fixed_dictionaries({"level": _signed_power(-1, 1), "slope": st.floats(-3, 3),
                                         "noise": st.floats(-7, -1).map(lambda e: 10.0**e)}),
}


def draw_dy(rng: np.random.Generator, kind: str, p: dict[str, Any], shape: tuple[int, int],
        direction: np.ndarray, gamma: np.ndarray | None, centred: bool) -> np.ndarray:
    """dy of ``kind``; ``direction`` is what it is taken against: y (softmax) or xhat (norms)."""
    rows, cols = shape
    if kind == "ordinary":
        return p["loc"] + p["scale"] * rng.standard_normal(shape)
    if kind == "one_hot":
        dy = np.zeros(shape)
        dy[np.arange(rows), (p["position"] + 7919 * np.arange(rows)) % cols] = p["value"]
        return dy
    if kind == "scaled":
        z = rng.standard_normal(shape) if p["pattern"] == "normal" else 0.5 + 0.5 * rng.random(shape)
        return 10.0 ** p["exponent"] * z
    g = np.ones(cols) if gamma is None else gamma.astype(np.float64)
    with np.errstate(all="ignore"):
        if kind == "orthogonal":
            dy = p["scale"] * rng.standard_normal(shape)
            w = np.where(np.isfinite(direction), direction, 0.0) * g[None, :]
            norm = np.sum(w * w, axis=1, keepdims=True)
            along = np.where(norm > 0, np.sum(dy * w, axis=1, keepdims=True) / norm, 0.0)
            return dy - along * w
        # cancelling: dy * gamma nearly a + b xhat (softmax: dy nearly constant), so dx nearly 0.
        noise = 1 + p["noise"] * rng.standard_normal(shape)
        if gamma is None:
            return p["level"] * noise
        a = p["level"] if centred else 0.0
        target = (a + p["slope"] * abs(p["level"]) * np.where(np.isfinite(direction), direction, 0.0))
        dy = np.where(g[None, :] != 0, target / g[None, :], 0.0) * noise
        return np.where(np.isfinite(dy), dy, 0.0)
