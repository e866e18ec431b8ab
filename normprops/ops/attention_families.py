"""The attention op's adversarial families (:mod:`normprops.ops.attention` is the op itself): each
draws a handful of parameters (a shape, a storage type, a level, a seed) and builds its arrays with
numpy from them, so a shrunk counterexample reads as a few numbers, not thousands of floats.
docs/tolerances.md, "Attention", says what each aims at.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from normprops.dtypes import DTYPES, get_dtype, to_dtype
from normprops.ops.attention_math import AttentionCase, laid_out

__all__ = ["ATTENTION_FAMILIES", "FAMILY_LAYOUTS", "SLOT", "ShapePool", "attention_case", "attention_cases",
           "pool_pick", "pool_slot", "shape_dim"]

F32 = np.float32


#: A shape parameter's choices: a tuple of values, or a range of them.
Dim = tuple[int, ...] | range

#: The key of the slot every shape parameter of a pooled case reads (one draw an example).
SLOT = "normprops-attention-shape-slot"


@dataclass(frozen=True)
class ShapePool:
    """At most ``size`` shapes for ``family``'s cases (a kernel's ``shape_pool``): slot ``i`` of the
    pool is one shape, each of its parameters picked from that parameter's choices on its own. Key
    lengths under ``min_keys`` (the kernel's) are left out of the choices, so that no slot holds a
    shape the kernel refuses."""

    size: int
    family: str
    min_keys: int = 0


def _edges(values: range) -> tuple[int, ...]:
    """A range's ends and the tile edges inside it (2^k - 1, 2^k, 2^k + 1): what a pool keeps of it."""
    lo, hi = values.start, values.stop - 1
    edges = {lo, hi} | {2**k + e for k in range(1, hi.bit_length() + 1) for e in (-1, 0, 1)}
    return tuple(sorted(x for x in edges if lo <= x <= hi))


def pool_pick(pool: ShapePool, key: str, slot: int, count: int) -> int:
    """Which of ``count`` choices slot ``slot`` of ``pool`` takes for ``key``: a BLAKE2 hash of the
    three, the same in every run, process and version. (Not a CRC: CRC-32 is linear, and its low
    bits moved together for keys of one family, tying batch size to head count.)"""
    digest = hashlib.blake2b(f"{pool.family}/{key}/{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def pool_slot(pool: ShapePool) -> st.SearchStrategy[int]:
    """The example's slot in ``pool``: drawn once an example and shared by every shape parameter
    (Hypothesis's ``shared``), shrinking towards slot 0."""
    return st.shared(st.integers(0, pool.size - 1), key=SLOT)


def shape_dim(key: str, choices: Dim, *, pool: ShapePool | None) -> st.SearchStrategy[int]:
    """The strategy of one shape parameter ``key``: any of ``choices``, or, in a ``pool``, the value
    the example's slot takes (:func:`pool_pick`), so that a family's cases come in at most
    ``pool.size`` shapes. A kernel that compiles for every new shape (``jax.jit``,
    ``torch.compile``) spends its hunt on values, not compiles. A pooled range keeps its ends and
    its tile edges (:func:`_edges`)."""
    if pool is None:
        if isinstance(choices, range):
            return st.integers(choices.start, choices.stop - 1)
        return st.sampled_from(choices)
    values = _edges(choices) if isinstance(choices, range) else tuple(choices)
    if key == "Lk":
        values = tuple(v for v in values if v >= pool.min_keys) or values
    return pool_slot(pool).map(lambda slot: values[pool_pick(pool, key, slot, len(values))])


def _shape(*, b: Dim = (1, 2), hkv: Dim = (1, 2), group: Dim = (1, 2, 4), lq: Dim = range(1, 7),
           lk: Dim = range(1, 97), d: Dim = (8, 16, 32, 64, 128), dv: Dim | None = None,
           pool: ShapePool | None = None) -> dict[str, st.SearchStrategy[Any]]:
    dims = {"B": b, "Hkv": hkv, "group": group, "Lq": lq, "Lk": lk, "D": d}
    drawn = {**{key: shape_dim(key, choices, pool=pool) for key, choices in dims.items()},
             "seed": st.integers(0, 2**16 - 1)}
    if dv is not None:  # after the seed: the order a family's parameters are drawn in
        drawn["Dv"] = shape_dim("Dv", dv, pool=pool)
    return drawn


_SHAPE_KEYS = frozenset({"B", "Hkv", "group", "Lq", "Lk", "D", "Dv", "dtype"})


def _dtypes(dtypes: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(dtypes)


def _normal(rng: np.random.Generator, p: dict[str, Any], dv: int | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b, hkv, hq, lq, lk, d = p["B"], p["Hkv"], p["Hkv"] * p["group"], p["Lq"], p["Lk"], p["D"]
    q = rng.standard_normal((b, hq, lq, d))
    k = rng.standard_normal((b, hkv, lk, d))
    v = rng.standard_normal((b, hkv, lk, d if dv is None else dv))
    return q, k, v


def _scale_for(d: int) -> float:
    return float(F32(1.0 / math.sqrt(d)))


def _some_kept(rng: np.random.Generator, shape: tuple[int, ...], keep: float) -> np.ndarray:
    """A random mask that keeps each key with probability ``keep`` and at least one per row."""
    mask = rng.random(shape) < keep
    first = rng.integers(0, shape[-1], size=shape[:-1])
    np.put_along_axis(mask, first[..., None], True, axis=-1)
    return mask


def _make(family: str, p: dict[str, Any], q: np.ndarray, k: np.ndarray, v: np.ndarray,
          mask: np.ndarray | None, scale: float) -> AttentionCase:
    dtype = p["dtype"]
    kind = get_dtype(dtype)
    with np.errstate(all="ignore"):
        arrays = [to_dtype(np.clip(a, -kind.max, kind.max).astype(F32), dtype) for a in (q, k, v)]
    shown = {key: value for key, value in sorted(p.items()) if key not in _SHAPE_KEYS}
    if "memory" in p:
        arrays = [laid_out(a, p["memory"]) for a in arrays]
    return AttentionCase(*arrays, mask=mask, scale=scale, dtype=dtype, family=family, params=shown)


def _ordinary(p: dict[str, Any]) -> AttentionCase:
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p)
    shape = (p["B"], 1, p["Lq"], p["Lk"])
    mask = _some_kept(rng, shape, 0.7) if p["masked"] else None
    return _make("ordinary", p, q * p["spread"], k, v + p["offset"], mask, _scale_for(p["D"]))


def _large_scores(p: dict[str, Any]) -> AttentionCase:
    """Scaled scores up to ``top`` in magnitude (1e2 to 1e4): exp overflows past 88.7 unless the
    row max is subtracted first."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p)
    scale = _scale_for(p["D"])
    s = scale * (q @ np.repeat(k, p["group"], axis=1).swapaxes(-1, -2))
    c = math.sqrt(p["top"] / max(float(np.max(np.abs(s))), 1e-30))
    return _make("large_scores", p, q * c, k * c, v, None, scale)


def _sentinel(p: dict[str, Any]) -> AttentionCase:
    """Every kept score of the chosen query rows near ``level`` (below -5e4): q is a constant
    integer ``a`` and the keys ``-(a + n)`` with ``n`` in {-1, 0, 1} on ``jitter`` coordinates, so the
    scores are exact integers times ``scale`` that differ by a few units. Padded keys at the end
    are masked, and their values are garbage (100 times larger)."""
    rng = np.random.default_rng(p["seed"])
    b, hkv, group, lq, lk, d = p["B"], p["Hkv"], p["group"], p["Lq"], p["Lk"], p["D"]
    scale = _scale_for(d)
    a = round(math.sqrt(p["level"] / (scale * d)))
    q = rng.standard_normal((b, hkv * group, lq, d))
    rows = np.ones(lq, bool) if p["rows"] == "all" else (np.arange(lq) % 2 == 0)
    q[:, :, rows, :] = a
    k = np.full((b, hkv, lk, d), -float(a))
    jitter = min(p["jitter"], d)
    k[..., :jitter] -= rng.integers(-1, 2, size=(b, hkv, lk, jitter))
    v = p["offset"] + rng.standard_normal((b, hkv, lk, d))
    pad = min(p["padded"], lk - 1)
    mask = None
    if pad:
        mask = np.ones((b, 1, lq, lk), bool)
        mask[..., lk - pad:] = False
        v[:, :, lk - pad:, :] *= 100.0
    return _make("sentinel", p, q, k, v, mask, scale)


def _fully_masked(p: dict[str, Any]) -> AttentionCase:
    """Some query rows with no kept key: left padding of the keys per batch, the padded queries'
    rows fully masked, optionally a bottom-right causal mask on top."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p)
    b, lq, lk = p["B"], p["Lq"], p["Lk"]
    mask = np.ones((b, 1, lq, lk), bool)
    for batch in range(b):
        pad = int(rng.integers(0, lk + 1)) if p["layout"] != "dead_rows" else 0
        mask[batch, :, :, :pad] = False
        if p["layout"] == "left_pad_causal":
            mask[batch] &= np.tril(np.ones((lq, lk), bool), k=lk - lq)
        dead = rng.random(lq) < 0.4
        dead[int(rng.integers(0, lq))] = True
        mask[batch, :, dead, :] = False
    return _make("fully_masked", p, q, k, v, mask, _scale_for(p["D"]))


def _causal(p: dict[str, Any]) -> AttentionCase:
    """Causal masks with Lq != Lk: top-left (key j kept for query i when j <= i) or bottom-right
    (j <= i + Lk - Lq, whose first Lq - Lk query rows keep no key when Lq > Lk)."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p)
    lq, lk = p["Lq"], p["Lk"]
    shift = 0 if p["corner"] == "top_left" else lk - lq
    mask = np.broadcast_to(np.tril(np.ones((lq, lk), bool), k=shift), (p["B"], 1, lq, lk)).copy()
    return _make("causal", p, q, k, v, mask, _scale_for(p["D"]))


def _gqa(p: dict[str, Any]) -> AttentionCase:
    """Grouped queries: each kv head serves ``group`` query heads (1: MHA; Hkv = 1: MQA), with kv
    heads far apart so that reading the wrong one shows."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p)
    v = v + 3.0 * np.arange(p["Hkv"])[None, :, None, None]
    return _make("gqa", p, q, k, v, None, _scale_for(p["D"]))


def _cancelling_v(p: dict[str, Any]) -> AttentionCase:
    """Keys come in identical pairs whose values are opposite (``size`` large), plus a small
    ``residual``: out is near 0 while every term of P.V is large."""
    rng = np.random.default_rng(p["seed"])
    half = dict(p, Lk=p["Lk"])
    q, k0, v0 = _normal(rng, half)
    v0 = v0 * p["size"]
    k = np.concatenate([k0, k0], axis=2)
    v = np.concatenate([v0, -v0], axis=2) + p["residual"] * rng.standard_normal(
        (p["B"], p["Hkv"], 2 * p["Lk"], p["D"]))
    order = rng.permutation(2 * p["Lk"])
    return _make("cancelling_v", p, q, k[:, :, order], v[:, :, order], None, _scale_for(p["D"]))


def _ragged(p: dict[str, Any]) -> AttentionCase:
    """Odd head dims (D and Dv apart) and key lengths either side of a power of two."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p, dv=p["Dv"])
    mask = _some_kept(rng, (p["B"], 1, p["Lq"], p["Lk"]), 0.8) if p["masked"] else None
    return _make("ragged", p, q, k, v, mask, _scale_for(p["D"]))


def _sliding_window(p: dict[str, Any]) -> AttentionCase:
    """A sliding window of ``window`` keys aligned to the bottom-right corner (Mistral, FlashAttention's
    ``window_size=(w - 1, 0)``): key j kept for query i when ``i' - w < j <= i'``, ``i' = i + Lk - Lq``.
    With ``Lq > Lk`` the first ``Lq - Lk`` query rows keep no key; a window of 1 keeps one key."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p)
    lq, lk, w = p["Lq"], p["Lk"], p["window"]
    last = np.arange(lq)[:, None] + (lk - lq)  # the last key query i sees, bottom-right aligned
    j = np.arange(lk)[None, :]
    mask = np.broadcast_to((j <= last) & (j > last - w), (p["B"], 1, lq, lk)).copy()
    return _make("sliding_window", p, q, k, v, mask, _scale_for(p["D"]))


def _decode(p: dict[str, Any]) -> AttentionCase:
    """One query against a long kv cache (``Lk`` up to 4097, at tile edges: 1 mod 32, 64 mod 128,
    2^k +- 1, and 0: no key at all). ``cached``: the cache of each batch element is filled to a drawn
    length and padded after it (a key-padding mask; a length of 0 leaves the query row empty)."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p)
    mask = None
    if p["cached"] and p["Lk"]:
        # an empty cache (length 0) one time in four, else any length
        lengths = np.where(rng.random(p["B"]) < 0.25, 0, rng.integers(1, p["Lk"] + 1, size=p["B"]))
        lengths[int(rng.integers(0, p["B"]))] = p["Lk"] - int(rng.integers(0, 2))
        mask = np.broadcast_to(np.arange(p["Lk"])[None, :] < lengths[:, None],
                               (1, 1, p["B"], p["Lk"])).transpose(2, 0, 1, 3).copy()
    return _make("decode", p, q, k, v, mask, _scale_for(p["D"]))


def _grouped_direction(rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """q rows near one direction ``z`` per batch element and kv head (shared by the query heads
    that read it): ``q_i = z + n_i / 4`` with ``n_i`` orthogonal to ``z``. A key ``t z`` then scores
    ``scale t |z|^2`` against every query row of the group (up to q's and k's rounding)."""
    b, hkv, group, lq, d = p["B"], p["Hkv"], p["group"], p["Lq"], p["D"]
    z = rng.standard_normal((b, hkv, 1, 1, d))
    n = rng.standard_normal((b, hkv, group, lq, d))
    n -= np.sum(n * z, axis=-1, keepdims=True) / np.sum(z * z, axis=-1, keepdims=True) * z
    q = z + 0.25 * n
    return q.reshape(b, hkv * group, lq, d), z.reshape(b, hkv, 1, d)


def _extreme_lse(p: dict[str, Any]) -> AttentionCase:
    """Every score of a row near ``level`` (+-100 to +-1e4) and within a few units of the others: the
    row's lse is past +-88.7, where exp(s) overflows to inf or underflows to 0 in float32 unless the
    row max is subtracted first. Keys are ``t z + spread n_j`` with ``scale t |z|^2 = level``."""
    rng = np.random.default_rng(p["seed"])
    q, z = _grouped_direction(rng, p)
    scale = _scale_for(p["D"])
    t = p["level"] / (scale * np.sum(z * z, axis=-1, keepdims=True))
    k = t * z + p["spread"] * rng.standard_normal((p["B"], p["Hkv"], p["Lk"], p["D"]))
    v = rng.standard_normal((p["B"], p["Hkv"], p["Lk"], p["D"]))
    return _make("extreme_lse", p, q, k, v, None, scale)


def _head_dims(p: dict[str, Any]) -> AttentionCase:
    """The head dimensions models use (32 to 256, 72, 80, 104 and 192 among them), v's apart from
    q's and k's (``Dv != D``, as DeepSeek's MLA has 192 against 128)."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p, dv=p["Dv"])
    mask = _some_kept(rng, (p["B"], 1, p["Lq"], p["Lk"]), 0.8) if p["masked"] else None
    return _make("head_dims", p, q, k, v, mask, _scale_for(p["D"]))


def _outlier_key(p: dict[str, Any]) -> AttentionCase:
    """One key scores ``gap`` above the others against every query row (an attention sink at the
    first position, or a key elsewhere): past a gap of 88.7 the other weights are below float32's
    exp(-88.7) relative to it, past 104 below its subnormals. Its value is scaled by ``sink_value``
    (0: out is the tiny rest)."""
    rng = np.random.default_rng(p["seed"])
    q, z = _grouped_direction(rng, p)
    b, hkv, lk, d = p["B"], p["Hkv"], p["Lk"], p["D"]
    scale = _scale_for(d)
    k = rng.standard_normal((b, hkv, lk, d))
    v = rng.standard_normal((b, hkv, lk, d))
    at = {"first": 0, "last": lk - 1, "middle": lk // 2}[p["position"]]
    # the gap above the others' typical score (theirs are O(1) against z's direction)
    k[:, :, at] = p["gap"] / (scale * np.sum(z * z, axis=-1)) * z[:, :, 0]
    v[:, :, at] *= p["sink_value"]
    return _make("outlier_key", p, q, k, v, None, scale)


def _strided(p: dict[str, Any]) -> AttentionCase:
    """q, k and v handed over as (B, H, L, D) views of (B, L, H, D) arrays (``memory="bshd"``, as a
    model's projections leave them): a kernel that reads its inputs as contiguous reads heads and
    positions interleaved."""
    rng = np.random.default_rng(p["seed"])
    q, k, v = _normal(rng, p, dv=p["Dv"])
    mask = _some_kept(rng, (p["B"], 1, p["Lq"], p["Lk"]), 0.8) if p["masked"] else None
    return _make("strided", p, q, k, v, mask, _scale_for(p["D"]))


_ODD = (1, 3, 17, 63, 65, 127, 129, 255)
#: Key lengths a decode step meets at a tile's edge: 1 mod 32, 64 mod 128, 2^k +- 1; and none.
_DECODE_KEYS = (0, 1, 33, 64, 97, 127, 129, 192, 255, 257, 513, 1023, 1025, 1088, 2047, 2049, 4095, 4097)
#: The head dimensions of released models.
_MODEL_DIMS = (32, 64, 72, 80, 96, 104, 128, 192, 256)
_FAMILIES: dict[str, tuple[Callable[..., dict[str, st.SearchStrategy[Any]]],
                           Callable[[dict[str, Any]], AttentionCase]]] = {
    "ordinary": (lambda dt, pool=None: {
        **_shape(pool=pool), "dtype": _dtypes(dt), "masked": st.booleans(),
        "spread": st.sampled_from([1.0, 0.1, 3.0]), "offset": st.sampled_from([0.0, 1.0, -4.0])},
        _ordinary),
    "large_scores": (lambda dt, pool=None: {
        **_shape(pool=pool), "dtype": _dtypes(dt),
        "top": st.floats(2, 4).map(lambda e: float(10.0**e))},
        _large_scores),
    "sentinel": (lambda dt, pool=None: {
        **_shape(group=(1, 2, 4, 16), lq=range(1, 5), d=(16, 32, 64, 128), pool=pool),
        "dtype": _dtypes(dt), "level": st.floats(5.5e4, 1.2e5).map(lambda x: float(round(x))),
        "rows": st.sampled_from(["all", "even"]), "jitter": st.integers(0, 4),
        "offset": st.sampled_from([0.0, 1.0, 4.0]), "padded": st.integers(0, 4)},
        _sentinel),
    "fully_masked": (lambda dt, pool=None: {
        **_shape(lk=(1, 33, 65, 97, 64, 192), pool=pool), "dtype": _dtypes(dt),
        "layout": st.sampled_from(["left_pad", "left_pad_causal", "dead_rows"])},
        _fully_masked),
    "causal": (lambda dt, pool=None: {
        **_shape(lq=range(1, 13), lk=range(1, 41), pool=pool), "dtype": _dtypes(dt),
        "corner": st.sampled_from(["top_left", "bottom_right"])},
        _causal),
    "gqa": (lambda dt, pool=None: {
        **_shape(b=(1,), hkv=(1, 2, 3), group=(1, 2, 4, 8, 16), lq=range(1, 4), lk=range(1, 65),
                 d=(16, 32, 64), pool=pool),
        "dtype": _dtypes(dt)},
        _gqa),
    "cancelling_v": (lambda dt, pool=None: {
        **_shape(lk=range(1, 49), pool=pool), "dtype": _dtypes(dt),
        "size": st.sampled_from([1e2, 1e3, 3e4]), "residual": st.sampled_from([0.0, 1e-3, 1.0])},
        _cancelling_v),
    "ragged": (lambda dt, pool=None: {
        **_shape(b=(1,), hkv=(1, 2), group=(1, 2), lq=range(1, 4), lk=(1, 63, 65, 127, 129, 255, 257),
                 d=_ODD, dv=_ODD, pool=pool),
        "dtype": _dtypes(dt), "masked": st.booleans()},
        _ragged),
    "sliding_window": (lambda dt, pool=None: {
        **_shape(lq=range(1, 13), lk=range(1, 81), pool=pool), "dtype": _dtypes(dt),
        "window": st.sampled_from([1, 2, 3, 16, 31, 32, 33, 64])},
        _sliding_window),
    "decode": (lambda dt, pool=None: {
        **_shape(hkv=(1,), lq=range(1, 2), lk=_DECODE_KEYS, group=(1, 4), d=(64, 128), pool=pool),
        "dtype": _dtypes(dt), "cached": st.booleans()},
        _decode),
    "extreme_lse": (lambda dt, pool=None: {
        **_shape(lq=range(1, 5), lk=range(1, 49), pool=pool), "dtype": _dtypes(dt),
        "level": st.tuples(st.sampled_from([1.0, -1.0]), st.floats(2, 4)).map(
            lambda se: float(se[0] * round(10.0**se[1]))),
        "spread": st.sampled_from([0.0, 0.5, 2.0])},
        _extreme_lse),
    "head_dims": (lambda dt, pool=None: {
        **_shape(b=(1,), hkv=(1, 2), group=(1, 2), lq=range(1, 5), lk=range(1, 65), d=_MODEL_DIMS,
                 dv=_MODEL_DIMS, pool=pool),
        "dtype": _dtypes(dt), "masked": st.booleans()},
        _head_dims),
    "outlier_key": (lambda dt, pool=None: {
        **_shape(lq=range(1, 5), lk=range(2, 65), pool=pool), "dtype": _dtypes(dt),
        "gap": st.sampled_from([8.0, 30.0, 95.0, 200.0]),
        "position": st.sampled_from(["first", "last", "middle"]),
        "sink_value": st.sampled_from([1.0, 0.0, 100.0])},
        _outlier_key),
    "strided": (lambda dt, pool=None: {
        **_shape(hkv=(2, 3), group=(1, 2), lq=range(2, 7), lk=range(2, 49), d=(8, 16, 64), dv=(8, 16, 24),
                 pool=pool),
        "dtype": _dtypes(dt), "masked": st.booleans(), "memory": st.just("bshd")},
        _strided),
}

#: The mask layouts (normprops.ops.attention_math.MASK_LAYOUTS) each family's cases can have: a
#: kernel that takes none of them is not hunted on the family; one that takes some is handed only
#: those cases.
FAMILY_LAYOUTS: dict[str, frozenset[str]] = {
    "ordinary": frozenset({"none", "arbitrary"}),
    "large_scores": frozenset({"none"}),
    "sentinel": frozenset({"none", "key_padding", "arbitrary"}),
    "fully_masked": frozenset({"arbitrary"}),
    "causal": frozenset({"causal_top_left", "causal_bottom_right", "arbitrary"}),
    "gqa": frozenset({"none"}),
    "cancelling_v": frozenset({"none"}),
    "ragged": frozenset({"none", "arbitrary"}),
    "sliding_window": frozenset({"arbitrary"}),
    "decode": frozenset({"none", "key_padding", "arbitrary"}),
    "extreme_lse": frozenset({"none"}),
    "head_dims": frozenset({"none", "arbitrary"}),
    "outlier_key": frozenset({"none"}),
    "strided": frozenset({"none", "arbitrary"}),
}

#: The families' names, in the order of docs/tolerances.md, "Attention".
ATTENTION_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)


def attention_case(family: str, **params: Any) -> AttentionCase:
    """The case a family builds from ``params`` (every parameter its strategy draws, by name, as
    a counterexample's repr shows them plus the shape)."""
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {', '.join(ATTENTION_FAMILIES)} but was {family!r}")
    names = set(_FAMILIES[family][0](("float32",)))
    if set(params) != names:
        missing, extra = sorted(names - set(params)), sorted(set(params) - names)
        raise ValueError(f"{family} takes the parameters {sorted(names)}; missing {missing}, "
                         f"unknown {extra}")
    return _FAMILIES[family][1](dict(params))


def attention_cases(family: str | None = None, *,
                    dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16"),
                    shape_pool: int = 0, min_keys: int = 0) -> st.SearchStrategy[AttentionCase]:
    """Cases of one family (or of any, ``family=None``) in the storage types ``dtypes``; with
    ``shape_pool`` > 0, in at most that many shapes a family (:class:`ShapePool`), none of fewer
    than ``min_keys`` keys."""
    if family is None:
        return st.sampled_from(ATTENTION_FAMILIES).flatmap(
            lambda f: attention_cases(f, dtypes=dtypes, shape_pool=shape_pool, min_keys=min_keys))
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {', '.join(ATTENTION_FAMILIES)} but was {family!r}")
    if not dtypes or any(t not in DTYPES for t in dtypes):
        raise ValueError(f"dtypes must name some of {', '.join(DTYPES)} but was {dtypes!r}")
    if type(shape_pool) is not int or shape_pool < 0:
        raise ValueError(f"shape_pool must be a non-negative int but was {shape_pool!r}")
    params, build = _FAMILIES[family]
    pool = ShapePool(shape_pool, family, min_keys) if shape_pool else None
    return st.fixed_dictionaries(params(tuple(dtypes), pool)).map(build)
