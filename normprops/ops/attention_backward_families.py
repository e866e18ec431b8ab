"""The attention backward op's families (:mod:`normprops.ops.attention_backward` is the op): each
pairs the forward's cases (:mod:`normprops.ops.attention_families`: its masks, score ranges, GQA
and ragged shapes) with an upstream gradient ``dout`` of one kind, as the row gradients pair a
forward family with a kind of dy (:mod:`normprops.dy_kinds`); two build their own forward case.
A counterexample reads as a few numbers: the forward's parameters, the kind's and a seed.
docs/tolerances.md, "Attention backward", says what each aims at.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from normprops.dtypes import DTYPES, get_dtype, to_dtype
from normprops.ops.attention_backward_math import AttentionBackwardCase
from normprops.ops.attention_families import FAMILY_LAYOUTS as FORWARD_LAYOUTS
from normprops.ops.attention_families import Dim, ShapePool, attention_cases, pool_pick, pool_slot, shape_dim
from normprops.ops.attention_math import AttentionCase, attention_reference

__all__ = ["ATTENTION_BACKWARD_FAMILIES", "FAMILY_LAYOUTS", "attention_backward_cases", "with_dout"]

F32 = np.float32


def _signed_power(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.tuples(st.sampled_from([1.0, -1.0]), st.floats(lo, hi)).map(lambda t: t[0] * 10.0**t[1])


#: The kinds of dout and the parameters each draws (besides ``dout_seed``).
DOUT_PARAMS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "ordinary": {"loc": st.sampled_from([0.0, 0.5, -2.0]), "size": st.sampled_from([1.0, 0.1, 10.0])},
    "one_hot": {"position": st.integers(0, 2**16), "value": _signed_power(-3, 3)},
    # float16 storage: the exponent clipped to [-6, 2], so that the gradients stay finite.
    "scaled": {"exponent": st.floats(-30, 30).map(lambda e: float(round(e, 2))),
               "pattern": st.sampled_from(["normal", "positive"])},
    "orthogonal": {"size": st.sampled_from([1.0, 0.1, 10.0])},
    "cancelling": {"level": _signed_power(-1, 1), "noise": st.floats(-7, -1).map(lambda e: 10.0**e)},
}


def _draw_dout(kind: str, p: dict[str, Any], case: AttentionCase) -> np.ndarray:
    """dout (B, Hq, Lq, Dv) of ``kind`` in float64, before its rounding to the storage type."""
    rng = np.random.default_rng(p["dout_seed"])
    b, hq, lq, _ = case.q.shape
    dv = case.v.shape[3]
    shape = (b, hq, lq, dv)
    if kind == "ordinary":
        return p["loc"] + p["size"] * rng.standard_normal(shape)
    if kind == "one_hot":
        dout = np.zeros(shape)
        rows = np.arange(b * hq * lq).reshape(b, hq, lq)
        np.put_along_axis(dout, ((p["position"] + 7919 * rows) % dv)[..., None], p["value"], axis=-1)
        return dout
    if kind == "scaled":
        e = p["exponent"] if case.dtype != "float16" else min(max(p["exponent"], -6.0), 2.0)
        z = rng.standard_normal(shape) if p["pattern"] == "normal" else 0.5 + 0.5 * rng.random(shape)
        return 10.0**e * z
    if kind == "orthogonal":
        # dout orthogonal to the exact out, row by row: the row term sum(dout * out) vanishes.
        out = np.nan_to_num(attention_reference(case.q, case.k, case.v, case.mask, case.scale).out)
        dout = p["size"] * rng.standard_normal(shape)
        norm = np.sum(out * out, axis=-1, keepdims=True)
        along = np.sum(dout * out, axis=-1, keepdims=True) / np.where(norm > 0, norm, 1.0)
        return dout - along * out
    # cancelling: dout orthogonal to every v_j - mean(v) of its kv head, so dP_j = dout . v_j is the
    # same for every key and dP - rowsum(dout * out) is nearly 0 (up to ``noise``), while each of
    # its terms is not.
    group = hq // case.k.shape[1]
    v = np.repeat(case.v.astype(np.float64), group, axis=1)
    dout = rng.standard_normal(shape)
    for bi in range(b):
        for h in range(hq):
            spread = v[bi, h] - v[bi, h].mean(axis=0)
            basis, sv, _ = np.linalg.svd(spread.T, full_matrices=False)
            basis = basis[:, sv > 1e-9 * max(float(sv.max(initial=0.0)), 1e-300)]
            dout[bi, h] -= (dout[bi, h] @ basis) @ basis.T
    return p["level"] * (dout + p["noise"] * rng.standard_normal(shape))


def with_dout(case: AttentionCase, kind: str, p: dict[str, Any]) -> AttentionBackwardCase:
    """``case`` with a dout of ``kind`` (its parameters ``p``), rounded to the case's storage type."""
    kind_of = get_dtype(case.dtype)
    with np.errstate(all="ignore"):
        dout = to_dtype(np.clip(_draw_dout(kind, p, case), -kind_of.max, kind_of.max).astype(F32),
                        case.dtype)
    params = {**case.params, **{f"dout_{key}": value for key, value in p.items() if key != "dout_seed"},
              "dout_seed": p["dout_seed"]}
    return AttentionBackwardCase(case.q, case.k, case.v, case.mask, case.scale, dtype=case.dtype,
                                 family=case.family, params=params, dout=dout)


def _own_shape(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, ...]:
    b, hkv, hq, lq, lk, d = p["B"], p["Hkv"], p["Hkv"] * p["group"], p["Lq"], p["Lk"], p["D"]
    return (rng.standard_normal((b, hq, lq, d)), rng.standard_normal((b, hkv, lk, d)),
            rng.standard_normal((b, hkv, lk, d)))


def _forward(family: str, dtype: str, p: dict[str, Any], q: np.ndarray, k: np.ndarray, v: np.ndarray,
             mask: np.ndarray | None, scale: float) -> AttentionCase:
    kind = get_dtype(dtype)
    with np.errstate(all="ignore"):
        arrays = [to_dtype(np.clip(a, -kind.max, kind.max).astype(F32), dtype) for a in (q, k, v)]
    shown = {key: value for key, value in sorted(p.items())
             if key not in {"B", "Hkv", "group", "Lq", "Lk", "D", "dtype", "seed"}}
    return AttentionCase(*arrays, mask=mask, scale=scale, dtype=dtype, family=family,
                         params={**shown, "seed": p["seed"]})


def _cancelling(p: dict[str, Any]) -> AttentionCase:
    """Fewer keys than head dimensions, no mask: room for a dout orthogonal to every difference of
    values."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _own_shape(rng, p)
    return _forward("cancelling_dout", p["dtype"], p, q, k, v + p["offset"], None,
                    float(F32(1 / math.sqrt(p["D"]))))


def _low_lse(p: dict[str, Any]) -> AttentionCase:
    """Every score shifted by about ``shift`` (-100 to -1000), so every row's log-sum-exp lies below
    -88.7 (exp(lse) underflows float32) while P is the unshifted softmax: coordinate 0 of q is
    ``a`` and of k ``-a`` (the others' coordinate 0 zero), adding ``-scale a^2`` to every score.
    A mask always (every key kept, left padding of the keys, or random), key lengths 64 mod 128,
    head dimensions 64 to 256: where cuDNN's backward returned NaN dq (pytorch#196678)."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _own_shape(rng, p)
    b, lq, lk, d = p["B"], p["Lq"], p["Lk"], p["D"]
    scale = float(F32(1 / math.sqrt(d)))
    a = round(math.sqrt(-p["shift"] / scale))
    q[..., 0], k[..., 0] = a, -a
    mask = np.ones((b, 1, lq, lk), bool)
    if p["layout"] == "left_pad":
        for batch in range(b):
            mask[batch, :, :, :int(rng.integers(0, lk))] = False
    elif p["layout"] == "random":
        mask = rng.random(mask.shape) < 0.8
        mask[..., int(rng.integers(0, lk))] = True
    return _forward("low_lse", p["dtype"], p, q, k, v, mask, scale)


def _shape(*, b: Dim = (1, 2), hkv: Dim = (1, 2), group: Dim = (1, 2, 4), lq: Dim = range(1, 7),
           lk: Dim = range(1, 17), d: Dim = (32, 64), pool: ShapePool | None = None
           ) -> dict[str, st.SearchStrategy[Any]]:
    dims = {"B": b, "Hkv": hkv, "group": group, "Lq": lq, "Lk": lk, "D": d}
    return {**{key: shape_dim(key, choices, pool=pool) for key, choices in dims.items()},
            "seed": st.integers(0, 2**16 - 1)}


# (forward families the case is drawn from, or a builder of its own with its parameters;
#  the dout kinds)
_FAMILIES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "ordinary": (("ordinary", "causal", "ragged"), ("ordinary",)),
    "cancelling_dout": ((lambda dt, pool=None: {**_shape(pool=pool), "dtype": st.sampled_from(dt),
                                     "offset": st.sampled_from([0.0, 1.0, -4.0])}, _cancelling),
                        ("cancelling",)),
    "orthogonal_dout": (("ordinary", "large_scores", "cancelling_v"), ("orthogonal",)),
    "one_hot_dout": (("ordinary", "causal", "sentinel"), ("one_hot",)),
    "dout_scale": (("ordinary", "large_scores"), ("scaled",)),
    "fully_masked": (("fully_masked", "causal"), ("ordinary",)),
    # One or two query heads: the widest case (Lq 64, Lk 320, D 256) stays a few 10M flops.
    "low_lse": ((lambda dt, pool=None: {**_shape(b=(1,), hkv=(1,), group=(1, 2), lq=(1, 3, 16, 64),
                                             lk=(64, 192, 320), d=(64, 128, 256), pool=pool),
                             "dtype": st.sampled_from(dt),
                             "shift": st.sampled_from([-128.0, -100.0, -200.0, -1000.0]),
                             "layout": st.sampled_from(["all_kept", "left_pad", "random"])}, _low_lse),
                ("ordinary",)),
    "gqa": (("gqa",), ("ordinary", "one_hot")),
}

#: The mask layouts each family's cases can have (as the forward's FAMILY_LAYOUTS).
FAMILY_LAYOUTS: dict[str, frozenset[str]] = {
    "cancelling_dout": frozenset({"none"}),
    "low_lse": frozenset({"key_padding", "arbitrary"}),
    **{name: frozenset().union(*(FORWARD_LAYOUTS[f] for f in forward))
       for name, (forward, _) in _FAMILIES.items() if isinstance(forward[0], str)},
}

#: The families' names, in the order of docs/tolerances.md, "Attention backward".
ATTENTION_BACKWARD_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)


def _kind_params(kind: str) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return st.tuples(st.just(kind), st.fixed_dictionaries(
        {**DOUT_PARAMS[kind], "dout_seed": st.integers(0, 2**16 - 1)}))


def attention_backward_cases(family: str | None = None, *,
                             dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16"),
                             shape_pool: int = 0, min_keys: int = 0
                             ) -> st.SearchStrategy[AttentionBackwardCase]:
    """Cases of one family (or of any, ``family=None``) in the storage types ``dtypes``; with
    ``shape_pool`` > 0, in at most that many shapes a family
    (:class:`normprops.ops.attention_families.ShapePool`: a slot picks the forward family too),
    none of fewer than ``min_keys`` keys."""
    if family is None:
        return st.sampled_from(ATTENTION_BACKWARD_FAMILIES).flatmap(
            lambda f: attention_backward_cases(f, dtypes=dtypes, shape_pool=shape_pool, min_keys=min_keys))
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {', '.join(ATTENTION_BACKWARD_FAMILIES)} but was "
                         f"{family!r}")
    if not dtypes or any(t not in DTYPES for t in dtypes):
        raise ValueError(f"dtypes must name some of {', '.join(DTYPES)} but was {dtypes!r}")
    forward, kinds = _FAMILIES[family]
    pool = ShapePool(shape_pool, family, min_keys) if shape_pool else None

    def forward_cases(name: str) -> Any:
        return attention_cases(name, dtypes=tuple(dtypes), shape_pool=shape_pool, min_keys=min_keys)

    if not isinstance(forward[0], str):
        params, build = forward
        cases = st.fixed_dictionaries(params(tuple(dtypes), pool)).map(build)
    elif pool is None:
        cases = st.sampled_from(forward).flatmap(forward_cases)
    else:  # the slot picks the forward family as well as its shape: pool.size (family, shape) pairs
        cases = pool_slot(pool).flatmap(
            lambda slot: forward_cases(forward[pool_pick(pool, "forward", slot, len(forward))]))
    douts = st.sampled_from(kinds).flatmap(_kind_params)

    def built(drawn: tuple[AttentionCase, tuple[str, dict[str, Any]]]) -> AttentionBackwardCase:
        case, (kind, p) = drawn
        made = with_dout(case, kind, p)
        params = {"x_family": case.family, **made.params} if case.family != family else made.params
        return AttentionBackwardCase(made.q, made.k, made.v, made.mask, made.scale, dtype=made.dtype,
                                     family=family, params=params, dout=made.dout)

    return st.tuples(cases, douts).map(built)
