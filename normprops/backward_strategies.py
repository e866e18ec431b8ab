"""Hypothesis strategies for the gradient ops: a forward family's x with an upstream gradient dy.

Every gradient family (``ops.BACKWARD_FAMILIES``) pairs some of the forward families (the x of the
norms; for ``softmax_backward`` the logits, whose exact softmax rounded to the storage type is the y
the kernel receives) with some kinds of dy. As in :mod:`normprops.strategies`, only parameters are
drawn (the forward family's own, a dy kind and a few numbers of its own) and numpy builds the rows,
so shrinking acts on the parameters and a counterexample reads as what it is.

The dy kinds: ``ordinary``; ``one_hot`` (one nonzero per row); ``scaled`` (magnitudes from 1e-38 to
1e30); ``orthogonal`` (dy orthogonal to y, or dy*gamma orthogonal to xhat, in float64 before dy's
rounding: the projection term vanishes); ``cancelling`` (dy nearly constant along y, or dy*gamma
nearly ``a + b xhat``: the exact dx nearly vanishes while its terms do not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from normprops.case import Case
from normprops.dtypes import get_dtype, to_dtype
from normprops.ops import get_op
from normprops.strategies import (
    BETA_KINDS,
    EPS_CHOICES,
    GAMMA_KINDS,
    edge_cols,
    families_for,
    get_family,
    make_case,
    widest_cols,
)

__all__ = ["GradFamily", "GRAD_FAMILIES", "DY_KINDS", "grad_cases", "make_grad_case"]

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


_DY_PARAMS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
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


def _softmax64(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        x = x.astype(np.float64)
        e = np.exp(x - np.max(x, axis=1, keepdims=True))
        return e / np.sum(e, axis=1, keepdims=True)  # NaN rows where x holds NaN or +inf


def _xhat64(x: np.ndarray, eps: float, centred: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        x = np.where(np.isfinite(x), x, 0.0).astype(np.float64)
        d = x - x.mean(axis=1, keepdims=True) if centred else x
        return d / np.sqrt(np.mean(d * d, axis=1, keepdims=True) + eps)


def _dy(rng: np.random.Generator, kind: str, p: dict[str, Any], shape: tuple[int, int],
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


def make_grad_case(*, op: str, family: str, rows: int, cols: int, seed: int, x_family: str,
                   x_params: dict[str, Any], dy_kind: str, dy_params: dict[str, Any],
                   gamma_kind: str = "ones", beta_kind: str = "zeros", eps: float | None = None,
                   dtype: str = "float32") -> Case:
    """A gradient case, built deterministically from drawn parameters: the forward family's case
    (:func:`normprops.strategies.make_case`), softmax's y from its logits, and dy of ``dy_kind``;
    every array exact in ``dtype``."""
    spec = get_op(op)
    if spec.forward is None:
        raise ValueError(f"op must be a gradient op but was {op!r}")
    if family not in GRAD_FAMILIES or family not in spec.families:
        raise ValueError(f"family must be one of {', '.join(spec.families)} but was {family!r}")
    if dy_kind not in DY_KINDS:
        raise ValueError(f"dy_kind must be one of {', '.join(DY_KINDS)} but was {dy_kind!r}")
    forward = make_case(op=spec.forward, family=x_family, rows=rows, cols=cols, seed=seed,
                        params=x_params, gamma_kind=gamma_kind, beta_kind=beta_kind,
                        eps=eps if spec.default_eps is not None else None, dtype=dtype)
    if op == "softmax_backward":
        with np.errstate(all="ignore"):
            x = to_dtype(_softmax64(forward.x).astype(np.float32), dtype)
        direction = x.astype(np.float64)
    else:
        x = forward.x
        direction = _xhat64(x, forward.eps, centred=op == "layernorm_backward")
    rng = np.random.default_rng([seed, 1])  # its own stream: the forward case stays as drawn
    dy = _dy(rng, dy_kind, dy_params, (rows, cols), direction, forward.gamma,
             centred=op == "layernorm_backward")
    with np.errstate(all="ignore"):
        dy = to_dtype(np.clip(dy, -FLT_MAX, FLT_MAX).astype(np.float32), dtype)
    params = {"x": x_family, **{k: v for k, v in forward.params.items() if k != "dtype"},
              "dy": dy_kind, **{f"dy_{k}": v for k, v in dy_params.items()}}
    if dtype != "float32":
        params["dtype"] = dtype
    return Case(op=op, family=family, x=x, gamma=forward.gamma, beta=forward.beta, eps=forward.eps,
                params=params, dtype=dtype, dy=dy)


def _check_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer of at least 1 but was {value!r}")


def grad_cases(*, op: str, family: str, min_rows: int = 2, max_rows: int = 5, min_cols: int = 1,
               max_cols: int | None = None, cols_multiple_of: int = 1,
               dtype: str = "float32") -> st.SearchStrategy[Case]:
    """Cases of the gradient ``family`` for ``op``; the widths as :func:`normprops.strategies.cases`
    draws them (multiples of ``cols_multiple_of`` in ``[min_cols, max_cols]``, edge widths or
    anywhere). ``tall`` draws its own 64 to 1024 rows of at most 64 columns (at least ``min_cols``)."""
    spec = get_op(op)
    get_dtype(dtype)
    if spec.forward is None:
        raise ValueError(f"op must be a gradient op but was {op!r}")
    if family not in spec.families:
        raise ValueError(f"family {family!r} does not apply to op {op!r}; families for {op}: "
                         f"{', '.join(spec.families)}")
    for name, value in (("min_rows", min_rows), ("max_rows", max_rows), ("min_cols", min_cols),
                        ("cols_multiple_of", cols_multiple_of)):
        _check_positive(name, value)
    fam = GRAD_FAMILIES[family]
    k = cols_multiple_of
    high = max_cols if max_cols is not None else widest_cols(None, min_cols=min_cols, cols_multiple_of=k)
    if fam.max_cols is not None:
        high = min(high, max(fam.max_cols, -(-min_cols // k) * k))
    if high // k < -(-min_cols // k):
        raise ValueError(f"no multiple of cols_multiple_of={k} lies in [min_cols={min_cols}, "
                         f"max_cols={high}]; widen the range")
    edges = edge_cols(min_cols=min_cols, max_cols=high, multiple_of=k)
    anywhere = st.integers(-(-min_cols // k), high // k).map(lambda n: n * k)
    if fam.edge_cols_only and edges:
        cols_strategy = st.sampled_from(edges)
    else:
        cols_strategy = st.one_of(st.sampled_from(edges), anywhere) if edges else anywhere
    if max_rows < min_rows:
        raise ValueError(f"max_rows must be at least min_rows={min_rows} but was {max_rows}")
    low_rows = max(min_rows, fam.min_rows)
    low_rows, high_rows = fam.rows if fam.rows is not None else (low_rows, max(low_rows, max_rows))
    forward_families = set(families_for(spec.forward))
    x_families = [f for f in fam.x_families if f in forward_families] or ["ordinary"]
    # Every strategy built once, here: building and validating them on each draw (a flatmap
    # builds its strategy anew from the value drawn) cost more than judging the case.
    x_params = {f: st.tuples(st.just(f), get_family(f).params(spec.forward)) for f in x_families}
    x_strategy = st.sampled_from(x_families).flatmap(lambda f: x_params[f])
    dy_params = {kind: st.tuples(st.just(kind), _DY_PARAMS[kind]) for kind in fam.dy_kinds}
    dy_strategy = st.sampled_from(fam.dy_kinds).flatmap(lambda kind: dy_params[kind])
    eps_strategy = (st.sampled_from((spec.default_eps,) + EPS_CHOICES) if "eps" in spec.params
                    else st.none())
    rows_strategy = st.integers(low_rows, high_rows)
    seed_strategy = st.integers(0, 2**32 - 1)
    gamma_strategy = st.sampled_from(GAMMA_KINDS)
    beta_strategy = st.sampled_from(BETA_KINDS)
    has_gamma, has_beta = "gamma" in spec.params, "beta" in spec.params

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        x_family, x_drawn = draw(x_strategy, label="x")
        dy_kind, dy_drawn = draw(dy_strategy, label="dy")
        return make_grad_case(
            op=op, family=family, rows=draw(rows_strategy, label="rows"),
            cols=draw(cols_strategy, label="cols"), seed=draw(seed_strategy, label="seed"),
            x_family=x_family, x_params=x_drawn, dy_kind=dy_kind, dy_params=dy_drawn,
            gamma_kind=draw(gamma_strategy, label="gamma") if has_gamma else "ones",
            beta_kind=draw(beta_strategy, label="beta") if has_beta else "zeros",
            eps=draw(eps_strategy, label="eps"), dtype=dtype)

    return draw_case()
