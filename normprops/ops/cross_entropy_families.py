"""The cross-entropy ops' adversarial families (:mod:`normprops.ops.cross_entropy` is the ops
themselves): each draws a handful of parameters (rows, vocabulary, storage type, a level, a seed)
and builds its arrays with numpy from them, so a shrunk counterexample reads as a few numbers.
docs/tolerances.md, "Cross-entropy", says what each aims at.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from normprops.dtypes import DTYPES, get_dtype, to_dtype
from normprops.ops.cross_entropy_math import CrossEntropyCase

__all__ = ["CROSS_ENTROPY_FAMILIES", "DLOSS_KINDS", "VOCABULARIES", "cross_entropy_case",
           "cross_entropy_cases"]

F32 = np.float32
#: The vocabularies of released models (GPT-2 50257, Llama 2 32000, Llama 3 128256, Qwen 2
#: 151936, Gemma 256000) and their neighbours: the ``vocab`` family's, a few rows each.
VOCABULARIES = tuple(sorted({v + d for v in (32000, 50257, 128256, 151936, 256000) for d in (-1, 0, 1)}))
#: Edge vocabularies: a power of two either side, odd counts, the smallest.
_RAGGED = (2, 3, 5, 7, 31, 33, 63, 65, 127, 129, 255, 257, 1023, 1025, 4095, 4097)
#: The gradient's upstream dloss: all ones, scaled per row (1e-3 to 1e3), zero on some rows, and
#: the 1/n a mean reduction's autograd hands each row.
DLOSS_KINDS = ("ones", "scaled", "zeros", "mean")


def _base(n: tuple[int, int] = (1, 8), v: st.SearchStrategy[int] | None = None) -> dict[str, Any]:
    return {"N": st.integers(*n), "V": st.integers(2, 4096) if v is None else v,
            "seed": st.integers(0, 2**16 - 1)}


_SHAPE_KEYS = frozenset({"N", "V", "dtype", "ignore_index"})


def _targets(rng: np.random.Generator, n: int, v: int) -> np.ndarray:
    return rng.integers(0, v, size=n).astype(np.int64)


def _make(family: str, p: dict[str, Any], x: np.ndarray, target: np.ndarray,
          ignore_index: int = -100) -> CrossEntropyCase:
    dtype = p["dtype"]
    kind = get_dtype(dtype)
    with np.errstate(all="ignore"):
        logits = to_dtype(np.clip(x, -kind.max, kind.max).astype(F32, copy=False), dtype)
    shown = {key: value for key, value in sorted(p.items()) if key not in _SHAPE_KEYS}
    return CrossEntropyCase(logits, target.astype(np.int64), ignore_index=ignore_index,
                            label_smoothing=p.get("smoothing", 0.0), dtype=dtype, family=family,
                            params=shown)


def _ignore_some(rng: np.random.Generator, target: np.ndarray, share: float,
                 ignore_index: int = -100) -> np.ndarray:
    return np.where(rng.random(target.shape) < share, ignore_index, target)


def _ordinary(p: dict[str, Any]) -> CrossEntropyCase:
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.standard_normal((n, v)) * p["spread"]
    return _make("ordinary", p, x, _ignore_some(rng, _targets(rng, n, v), 0.2))


def _offset(p: dict[str, Any]) -> CrossEntropyCase:
    """A common offset (1e2 to 1e8, either sign) on every logit: the loss and gradient do not change
    (shift invariance), but lse and x_t grow; ``exp(x)`` without the max overflows past 88.7."""
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = p["offset"] + rng.standard_normal((n, v)) * p["spread"]
    return _make("offset", p, x, _targets(rng, n, v))


def _large_logits(p: dict[str, Any]) -> CrossEntropyCase:
    """Logits spread over [-top, top] (top 1e2 to 1e3): exp under- and overflows, losses up to 2e3."""
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.uniform(-p["top"], p["top"], size=(n, v))
    return _make("large_logits", p, x, _targets(rng, n, v))


def _target_extremes(p: dict[str, Any]) -> CrossEntropyCase:
    """The target is the row's max (the loss is ln S alone, near 0), its min, or ``gap`` (89 to
    300) below the max (the loss exceeds 88.7: exp(-loss) underflows float32)."""
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.standard_normal((n, v)) * p["spread"]
    if p["where"] == "max":
        t = np.argmax(x, axis=1)
    elif p["where"] == "min":
        t = np.argmin(x, axis=1)
    else:
        t = _targets(rng, n, v)
        x[np.arange(n), t] = x.max(axis=1) - p["gap"]
    return _make("target_extremes", p, x, t)


def _dominant(p: dict[str, Any]) -> CrossEntropyCase:
    """One logit ``gap`` (4 to 60) above the rest: p of it is 1 - ~exp(-gap) V, and the target's
    gradient p_t - 1 cancels when the target is that logit."""
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.standard_normal((n, v))
    top = rng.integers(0, v, size=n)
    x[np.arange(n), top] = x.max(axis=1) + p["gap"]
    t = top if p["target_top"] else _targets(rng, n, v)
    return _make("dominant", p, x, t)


def _ignored(p: dict[str, Any]) -> CrossEntropyCase:
    """Ignored rows (their target equals ``ignore_index``: -100, or a class such as 0): some, or all
    of them (a mean over no row is NaN, the per-row losses and gradients are 0)."""
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.standard_normal((n, v)) * 2.0
    ignore = p["ignore_index"]
    t = _targets(rng, n, v)
    if ignore >= 0:
        t = np.where(t == ignore, (ignore + 1) % v, t)
    share = 1.0 if p["all"] else 0.5
    return _make("ignored", p, x, _ignore_some(rng, t, share, ignore), ignore_index=ignore)


def _softcap(p: dict[str, Any]) -> CrossEntropyCase:
    """Logits up to ``reach`` times 30 (Gemma 2's final cap): where a cap is declared, tanh
    saturates (c' = 1 - tanh^2 near 0); without one, logits in the hundreds."""
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.standard_normal((n, v)) * 30.0 * p["reach"]
    return _make("softcap", p, x, _targets(rng, n, v))


def _vocab(p: dict[str, Any]) -> CrossEntropyCase:
    """Released models' vocabularies (32000 to 256001), one or two rows, ordinary logits."""
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.standard_normal((n, v)).astype(F32) * F32(p["spread"])
    return _make("vocab", p, x, _ignore_some(rng, _targets(rng, n, v), 0.2))


def _ragged(p: dict[str, Any]) -> CrossEntropyCase:
    rng = np.random.default_rng(p["seed"])
    n, v = p["N"], p["V"]
    x = rng.standard_normal((n, v)) * 2.0
    return _make("ragged", p, x, _targets(rng, n, v))


_SPREAD = st.sampled_from([1.0, 0.1, 3.0, 10.0])
_FAMILIES: dict[str, tuple[Callable[[], dict[str, st.SearchStrategy[Any]]],
                           Callable[[dict[str, Any]], CrossEntropyCase]]] = {
    "ordinary": (lambda: {**_base(), "spread": _SPREAD}, _ordinary),
    "offset": (lambda: {**_base(), "spread": _SPREAD,
                        "offset": st.tuples(st.sampled_from([1.0, -1.0]), st.integers(2, 8)).map(
                            lambda se: se[0] * 10.0 ** se[1])}, _offset),
    "large_logits": (lambda: {**_base(), "top": st.sampled_from([100.0, 300.0, 1000.0])}, _large_logits),
    "target_extremes": (lambda: {**_base(), "spread": _SPREAD,
                                 "where": st.sampled_from(["max", "min", "far"]),
                                 "gap": st.floats(89.0, 300.0).map(lambda g: float(round(g)))},
                        _target_extremes),
    "dominant": (lambda: {**_base(), "gap": st.sampled_from([4.0, 12.0, 20.0, 40.0, 60.0]),
                          "target_top": st.booleans()}, _dominant),
    "ignored": (lambda: {**_base(), "ignore_index": st.sampled_from([-100, 0, -1]), "all": st.booleans()},
                _ignored),
    "softcap": (lambda: {**_base(), "reach": st.sampled_from([0.1, 1.0, 2.0, 5.0])}, _softcap),
    "vocab": (lambda: {**_base(n=(1, 2), v=st.sampled_from(VOCABULARIES)),
                       "spread": st.sampled_from([1.0, 10.0])}, _vocab),
    "ragged": (lambda: {**_base(n=(1, 5), v=st.sampled_from(_RAGGED))}, _ragged),
}

#: The families' names, in the order of docs/tolerances.md, "Cross-entropy".
CROSS_ENTROPY_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)


def _params(family: str, dtypes: tuple[str, ...], smoothing: tuple[float, ...],
            gradient: bool, vocab_multiple_of: int = 1) -> dict[str, st.SearchStrategy[Any]]:
    params = {**_FAMILIES[family][0](), "dtype": st.sampled_from(dtypes),
              "smoothing": st.sampled_from(smoothing)}
    if vocab_multiple_of > 1:  # raised to the next multiple: an edge width stays beside its edge
        params["V"] = params["V"].map(lambda v: v + -v % vocab_multiple_of)
    if gradient:
        params["dloss"] = st.sampled_from(DLOSS_KINDS)
    return params


def with_dloss(case: CrossEntropyCase, kind: str, *, reduction: str) -> CrossEntropyCase:
    """``case`` as a gradient case: its ``dloss`` of ``kind`` (:data:`DLOSS_KINDS`), float32, one per
    row for ``reduction="none"``, one scalar for ``sum`` and ``mean``."""
    n = case.logits.shape[0]
    rng = np.random.default_rng(case.params.get("seed", 0) + 1)
    count = max(int(case.valid.sum()), 1)
    if kind == "ones":
        g = np.ones(n)
    elif kind == "scaled":
        g = 10.0 ** rng.uniform(-3, 3, size=n) * rng.choice([-1.0, 1.0], size=n)
    elif kind == "zeros":
        g = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0.5, 2.0, size=n))
    elif kind == "mean":
        g = np.full(n, 1.0 / count)
    else:
        raise ValueError(f"dloss kind must be one of {', '.join(DLOSS_KINDS)} but was {kind!r}")
    dloss = g.astype(F32) if reduction == "none" else np.array(g[-1], dtype=F32)
    return case.replace(dloss=dloss, reduction=reduction)


def cross_entropy_case(family: str, **params: Any) -> CrossEntropyCase:
    """The forward case a family builds from ``params`` (every parameter its strategy draws)."""
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {', '.join(CROSS_ENTROPY_FAMILIES)} but was {family!r}")
    return _FAMILIES[family][1](dict(params))


def cross_entropy_cases(family: str, *, dtypes: tuple[str, ...] = ("float32", "bfloat16"),
                        smoothing: tuple[float, ...] = (0.0, 0.1, 1.0), gradient: bool = False,
                        reduction: str = "none", vocab_multiple_of: int = 1
                        ) -> st.SearchStrategy[CrossEntropyCase]:
    """Cases of one family in the storage types ``dtypes``, with label smoothings drawn from
    ``smoothing``; gradient cases (``gradient``) carry a dloss of a kind of :data:`DLOSS_KINDS`;
    vocabularies raised to multiples of ``vocab_multiple_of``."""
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {', '.join(CROSS_ENTROPY_FAMILIES)} but was {family!r}")
    if not dtypes or any(t not in DTYPES for t in dtypes):
        raise ValueError(f"dtypes must name some of {', '.join(DTYPES)} but was {dtypes!r}")
    build = _FAMILIES[family][1]

    def built(p: dict[str, Any]) -> CrossEntropyCase:
        case = build(p)
        if gradient:
            case = with_dloss(case, p["dloss"], reduction=reduction)
        elif reduction != "none":
            case = case.replace(reduction=reduction)
        return case

    return st.fixed_dictionaries(_params(family, tuple(dtypes), tuple(smoothing), gradient,
                                         vocab_multiple_of)).map(built)
