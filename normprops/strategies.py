"""Hypothesis strategies: one named family of adversarial rows per bug class.

Drawing thousands of floats one by one is slow and shrinks badly, so every family draws a handful of
parameters (column count, a scale, a spread, a seed, zero to three exact spike values) and builds the
rows with numpy. Shrinking then acts on those parameters, which keeps counterexamples readable: "cols
3, mean 1e4, ratio 1e5" rather than three thousand floats.

Every family draws ragged column counts and several rows per case (so a bug that leaks between rows
shows), and draws gamma, beta and eps for the norms.

Here are the table of families and the strategies over it; each family's parameters and rows are in
:mod:`normprops.family_rows` (the ``masked`` family's in :mod:`normprops.mask_layouts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from normprops.case import Case
from normprops.dtypes import get_dtype, to_dtype
from normprops.dy_kinds import DY_KINDS, DY_PARAMS, GRAD_FAMILIES, draw_dy
from normprops.family_rows import (
    F32,
    FLT_MAX,
    LONG_COLS,
    LONG_EDGE_COLS,
    CaseShape,
    _all_finite_moderate,
    _constant_build,
    _constant_params,
    _constant_promise,
    _eps_scale_build,
    _eps_scale_params,
    _eps_scale_promise,
    _f32,
    _huge_build,
    _huge_params,
    _huge_promise,
    _large_mean_build,
    _large_mean_params,
    _large_mean_promise,
    _long_rows_promise,
    _nonfinite_build,
    _nonfinite_params,
    _nonfinite_promise,
    _ordinary_build,
    _ordinary_params,
    _overflow_build,
    _overflow_params,
    _ragged_build,
    _ragged_params,
    _tiny_build,
    _tiny_params,
    _tiny_promise,
    _wide_span_build,
    _wide_span_params,
    _wide_span_promise,
)
from normprops.mask_layouts import (
    _masked_build,
    _masked_describe,
    _masked_layout,
    _masked_params,
    _masked_promise,
)
from normprops.masking import OVERFLOWING_SCALES, SCALES
from normprops.ops import FLOAT32_EPS, OPS, get_op

__all__ = [
    "Family",
    "FAMILIES",
    "EDGE_COLS",
    "edge_cols",
    "families_for",
    "get_family",
    "widest_cols",
    "cases",
    "make_case",
    "Extras",
    "Drawn",
    "grad_cases",
    "make_grad_case",
    "grad_case_from_fields",
]

MAX_COLS = 16385

# Column counts where kernels break: tails of 4-wide vector loads, warp (32) and block (256) edges,
# powers of two and their neighbours, primes. Smallest first, so shrinking walks towards 1.
EDGE_COLS: tuple[int, ...] = (
    1, 2, 3, 4, 5, 7, 8, 9, 13, 31, 32, 33, 63, 64, 65, 97, 127, 128, 129, 251, 255, 256, 257, 509,
    511, 512, 513, 1021, 1023, 1024, 1025, 2039, 2047, 2048, 2049, 4093, 4095, 4096, 4097, 8191,
    8192, 8193, 16383, 16384, 16385,
)

EPS_CHOICES: tuple[float, ...] = (1e-5, 1e-6, FLOAT32_EPS, 1e-12, 1e-3)


@dataclass(frozen=True)
class Family:
    """A named generator of adversarial rows, and the promise its name makes (for meta tests)."""

    name: str
    summary: str
    params: Callable[[str], st.SearchStrategy[dict[str, Any]]]
    build: Callable[[np.random.Generator, CaseShape, dict[str, Any]], np.ndarray]
    promise: Callable[[Case], bool]
    edge_cols_only: bool = False
    min_rows: int = 1
    # What the parameters drew (and built), in words, shown beside them in reports (e.g. each
    # row's mask).
    describe: Callable[[CaseShape, dict[str, Any], np.ndarray], dict[str, Any]] | None = None
    # The shown parameters that list one entry per row (kept in step with the rows when a
    # counterexample is cut to the rows its failure needs).
    row_params: tuple[str, ...] = ()
    # Its own widths, drawn when the caller names no max_cols (None: up to MAX_COLS), their edge
    # widths besides EDGE_COLS, and the most rows it draws (None: as many as the caller allows).
    cols: tuple[int, int] | None = None
    edges: tuple[int, ...] = ()
    max_rows: int | None = None
    # The rows' values and what they mask (True: masked), for an op that takes a mask; the other
    # families hand it a mask that keeps every entry.
    layout: Callable[[np.random.Generator, CaseShape, dict[str, Any]],
                     tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def ops(self) -> frozenset[str]:
        """The forward ops hunted on this family (each op declares its families)."""
        return frozenset(name for name, op in OPS.items()
                         if op.forward is None and self.name in op.families)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("ordinary", "activations as models produce them", _ordinary_params, _ordinary_build,
               _all_finite_moderate),
        Family("overflow_logits", "row max above 88.7 (expf overflows), anywhere in the row",
               _overflow_params, _overflow_build,
               lambda c: bool(np.all(np.max(c.x, axis=1) > 88.7))),
        Family("wide_span", "spreads of 100 to 1e4 inside a row", _wide_span_params,
               _wide_span_build, _wide_span_promise),
        Family("large_mean", "|mean|/std from 1e2 to 1e7 (variance cancellation)",
               _large_mean_params, _large_mean_build, _large_mean_promise),
        Family("huge", "magnitudes up to float32 max (squares and sums overflow)",
               _huge_params, _huge_build, _huge_promise),
        Family("tiny", "magnitudes down to subnormals (squares underflow)", _tiny_params,
               _tiny_build, _tiny_promise),
        Family("eps_scale", "mean square or variance near eps", _eps_scale_params,
               _eps_scale_build, _eps_scale_promise),
        Family("constant", "zero-variance rows, one-hot rows, single spikes",
               _constant_params, _constant_build, _constant_promise),
        Family("ragged", "shape edge cases with ordinary values", _ragged_params,
               _ragged_build, lambda c: c.cols in EDGE_COLS, edge_cols_only=True),
        Family("masked", "-inf entries: attention masks, thread shares, fully masked rows",
               _masked_params, _masked_build, _masked_promise, min_rows=2,
               describe=_masked_describe, row_params=("masks",), layout=_masked_layout),
        Family("nonfinite", "NaN and +-inf in some rows (propagation and row isolation)",
               _nonfinite_params, _nonfinite_build, _nonfinite_promise, min_rows=2),
        Family("long_rows", "1 or 2 rows of 2^15 - 1 to 2^18 + 1 columns, ordinary values",
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
    """The families ``op`` is hunted on, in report order (``OpSpec.families``)."""
    return get_op(op).families


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


@dataclass(frozen=True)
class Extras:
    """The op's drawn inputs besides x: the kinds of gamma and beta (:data:`GAMMA_KINDS`,
    :data:`BETA_KINDS`; used where the op has them), eps (None: the op's default) and a masked
    softmax's scale (a float32 value)."""

    gamma_kind: str = "ones"
    beta_kind: str = "zeros"
    eps: float | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class Drawn:
    """A kind and the parameters drawn for it: a gradient case's forward family and its x's
    parameters, or its kind of dy and dy's (:mod:`normprops.dy_kinds`)."""

    kind: str
    params: dict[str, Any]


def make_case(*, op: str, family: str, rows: int, cols: int, seed: int, params: dict[str, Any],
              extras: Extras = Extras(), dtype: str = "float32",
              mask_fill: float | None = None) -> Case:
    """Build a case deterministically from drawn parameters (what the strategies call); for a
    narrow ``dtype`` x, gamma and beta are rounded to it (:func:`to_dtype`). A masked softmax
    takes ``extras.scale`` (a float32 value) and its mask from the family's layout (every entry
    kept in a family without one), handed over as ``mask_fill`` says
    (:class:`~normprops.case.Case`)."""
    gamma_kind, beta_kind, eps, scale = extras.gamma_kind, extras.beta_kind, extras.eps, extras.scale
    spec = get_op(op)
    kind = get_dtype(dtype)
    fam = get_family(family)
    if family not in spec.families or spec.forward is not None:
        raise ValueError(f"family {family!r} does not apply to op {op!r}; it applies to "
                         f"{sorted(fam.ops)}")
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be at least 1 but were rows={rows}, cols={cols}")
    eps_value = None
    if spec.has_eps:
        eps_value = float(F32(spec.default_eps if eps is None else eps))
        if not eps_value > 0:
            raise ValueError(f"eps must be a positive float32 but was {eps!r}")
    rng = np.random.default_rng(seed)
    shape = CaseShape(rows, cols, op, eps_value)
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
    # Powers of two and a vector either side: for vector widths, and past MAX_COLS, where the
    # listed counts end (a kernel of rows wider than that still has edges).
    p = 1
    while p <= max_cols + k:
        if k > 1 or p > MAX_COLS:
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


def widest_cols(family: str | None, *, min_cols: int = 1, cols_multiple_of: int = 1) -> int:
    """The widest rows :func:`cases` draws for ``family`` when given no ``max_cols``: the family's
    own widest (:data:`MAX_COLS`, ``long_rows`` 2^18 + 1; None: a family without widths of its
    own, as the gradients' are), or more: twice ``min_cols``, and one multiple of
    ``cols_multiple_of`` at least."""
    cols = None if family is None else get_family(family).cols
    own = MAX_COLS if cols is None else cols[1]
    return max(own, 2 * min_cols, -(-min_cols // cols_multiple_of) * cols_multiple_of)


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
    if spec.forward is not None:
        # A gradient's case is a forward family's x with a dy (``mask_fill``: no mask to hand over).
        return grad_cases(op=op, family=family, min_rows=min_rows, max_rows=max_rows,
                          min_cols=min_cols, max_cols=max_cols, cols_multiple_of=cols_multiple_of,
                          dtype=dtype)
    get_dtype(dtype)
    fam = get_family(family)
    if family not in spec.families:
        raise ValueError(f"family {family!r} does not apply to op {op!r}; families for {op}: "
                         f"{', '.join(families_for(op))}")
    _check_positive("min_rows", min_rows)
    _check_positive("max_rows", max_rows)
    _check_positive("min_cols", min_cols)
    _check_positive("cols_multiple_of", cols_multiple_of)
    if max_cols is None:
        max_cols = widest_cols(family, min_cols=min_cols, cols_multiple_of=cols_multiple_of)
    _check_positive("max_cols", max_cols)
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
    if spec.has_eps:
        eps_strategy = st.sampled_from((spec.default_eps,) + EPS_CHOICES)
    # Built once: constructing and validating strategies on every draw cost more than judging.
    high_rows = max_rows if fam.max_rows is None else max(low_rows, min(max_rows, fam.max_rows))
    rows_strategy = st.integers(low_rows, high_rows)
    seed_strategy = st.integers(0, 2**32 - 1)
    params_strategy = fam.params(op)
    gamma_strategy = st.sampled_from(GAMMA_KINDS)
    beta_strategy = st.sampled_from(BETA_KINDS)
    scale_strategy = st.sampled_from(SCALES) if spec.has_mask else st.just(1.0)
    if spec.has_mask and family in spec.range_families:
        # Where range safety is hunted, half the draws take a scale that carries large logits past
        # FLT_MAX (1e3, 1e20): drawn from all 13 alike, a kernel that scales before it subtracts
        # the max was caught at 4 of 8 seeds in 100 examples of overflow_logits.
        scale_strategy = st.one_of(scale_strategy, st.sampled_from(OVERFLOWING_SCALES))

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        # Drawn in this order (arguments are evaluated left to right): rows, cols, seed, params,
        # gamma, beta, eps, scale; a new order would change every counterexample.
        return make_case(
            op=op,
            family=family,
            rows=draw(rows_strategy, label="rows"),
            cols=draw(cols_strategy, label="cols"),
            seed=draw(seed_strategy, label="seed"),
            params=draw(params_strategy, label="params"),
            extras=Extras(
                gamma_kind=draw(gamma_strategy, label="gamma") if spec.has_gamma else "ones",
                beta_kind=draw(beta_strategy, label="beta") if spec.has_beta else "zeros",
                eps=draw(eps_strategy, label="eps"),
                scale=draw(scale_strategy, label="scale") if spec.has_mask else 1.0,
            ),
            dtype=dtype,
            mask_fill=mask_fill,
        )

    return draw_case()


# --- the gradient ops: a forward family's x with an upstream gradient dy ------------------------
# Every gradient family (``ops.BACKWARD_FAMILIES``, drawn as normprops.dy_kinds.GRAD_FAMILIES says)
# pairs some of the forward families (the x of the norms; for ``softmax_backward`` the logits, whose
# exact softmax rounded to the storage type is the y the kernel receives) with some kinds of dy. As
# for the forward families, only parameters are drawn and numpy builds the rows.


def make_grad_case(*, op: str, family: str, rows: int, cols: int, seed: int, x: Drawn, dy: Drawn,
                   extras: Extras = Extras(), dtype: str = "float32") -> Case:
    """A gradient case, built deterministically from drawn parameters: the case of the forward
    family ``x.kind`` with ``x.params`` (:func:`make_case`, with ``extras``' gamma, beta and eps),
    the op's inputs from it (``OpSpec.gradient_inputs``: softmax's y from its logits), and dy of
    the kind ``dy.kind`` with ``dy.params`` (:mod:`normprops.dy_kinds`); every array exact in
    ``dtype``."""
    x_family, x_params, dy_kind, dy_params = x.kind, x.params, dy.kind, dy.params
    spec = get_op(op)
    if spec.forward is None:
        raise ValueError(f"op must be a gradient op but was {op!r}")
    if family not in GRAD_FAMILIES or family not in spec.families:
        raise ValueError(f"family must be one of {', '.join(spec.families)} but was {family!r}")
    if dy_kind not in DY_KINDS:
        raise ValueError(f"dy_kind must be one of {', '.join(DY_KINDS)} but was {dy_kind!r}")
    forward = make_case(op=spec.forward, family=x_family, rows=rows, cols=cols, seed=seed,
                        params=x_params,
                        extras=Extras(gamma_kind=extras.gamma_kind, beta_kind=extras.beta_kind,
                                      eps=extras.eps if spec.default_eps is not None else None),
                        dtype=dtype)
    x_in, direction = spec.gradient_inputs(forward)
    rng = np.random.default_rng([seed, 1])  # its own stream: the forward case stays as drawn
    dy_values = draw_dy(rng, dy_kind, dy_params, (rows, cols), direction, forward.gamma,
                        centred=spec.centred)
    with np.errstate(all="ignore"):
        dy_values = to_dtype(np.clip(dy_values, -FLT_MAX, FLT_MAX).astype(np.float32), dtype)
    params = {"x": x_family, **{k: v for k, v in forward.params.items() if k != "dtype"},
              "dy": dy_kind, **{f"dy_{k}": v for k, v in dy_params.items()}}
    if dtype != "float32":
        params["dtype"] = dtype
    return Case(op=op, family=family, x=x_in, gamma=forward.gamma, beta=forward.beta,
                eps=forward.eps, params=params, dtype=dtype, dy=dy_values)


def grad_case_from_fields(fields: dict[str, Any]) -> Case:
    """:func:`make_grad_case` from its fields given flat, as a JSON object of a drawn case holds
    them (tools/cases/): ``op``, ``family``, ``rows``, ``cols``, ``seed``, ``x_family``,
    ``x_params``, ``dy_kind``, ``dy_params``, and optionally ``gamma_kind``, ``beta_kind``,
    ``eps`` and ``dtype``."""
    rest = dict(fields)
    x = Drawn(rest.pop("x_family"), rest.pop("x_params"))
    dy = Drawn(rest.pop("dy_kind"), rest.pop("dy_params"))
    extras = Extras(**{k: rest.pop(k) for k in ("gamma_kind", "beta_kind", "eps") if k in rest})
    return make_grad_case(**rest, x=x, dy=dy, extras=extras)


def grad_cases(*, op: str, family: str, min_rows: int = 2, max_rows: int = 5, min_cols: int = 1,
               max_cols: int | None = None, cols_multiple_of: int = 1,
               dtype: str = "float32") -> st.SearchStrategy[Case]:
    """Cases of the gradient ``family`` for ``op``; the widths as :func:`cases`
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
    dy_params = {kind: st.tuples(st.just(kind), DY_PARAMS[kind]) for kind in fam.dy_kinds}
    dy_strategy = st.sampled_from(fam.dy_kinds).flatmap(lambda kind: dy_params[kind])
    eps_strategy = (st.sampled_from((spec.default_eps,) + EPS_CHOICES) if spec.has_eps
                    else st.none())
    rows_strategy = st.integers(low_rows, high_rows)
    seed_strategy = st.integers(0, 2**32 - 1)
    gamma_strategy = st.sampled_from(GAMMA_KINDS)
    beta_strategy = st.sampled_from(BETA_KINDS)
    has_gamma, has_beta = spec.has_gamma, spec.has_beta

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        # Drawn in this order: x, dy, rows, cols, seed, gamma, beta, eps.
        x = Drawn(*draw(x_strategy, label="x"))
        dy = Drawn(*draw(dy_strategy, label="dy"))
        return make_grad_case(
            op=op, family=family, rows=draw(rows_strategy, label="rows"),
            cols=draw(cols_strategy, label="cols"), seed=draw(seed_strategy, label="seed"),
            x=x, dy=dy,
            extras=Extras(gamma_kind=draw(gamma_strategy, label="gamma") if has_gamma else "ones",
                          beta_kind=draw(beta_strategy, label="beta") if has_beta else "zeros",
                          eps=draw(eps_strategy, label="eps")),
            dtype=dtype)

    return draw_case()
