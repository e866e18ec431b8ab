"""The attention op, ``fn(q, k, v, mask, scale) -> out`` or ``-> (out, lse)``, registered as
``attention``: what the pipeline asks it (:class:`~normprops.ops.spec.NamedArrays`). Its
mathematics (the case, the declaration, the exact reference, the bound) is in
:mod:`normprops.ops.attention_math`, its families in :mod:`normprops.ops.attention_families`.

Properties judged: ``contract`` (the outputs' type, shape and storage type, lse float32),
``finite`` and ``accuracy`` on every element of ``out`` and ``lse`` of a query row with a kept
key, ``masked_rows`` (a query row with no kept key: all zeros or all NaN as declared, never a
mixture, lse -inf), ``determinism`` (two calls bitwise equal) and ``batch_invariance`` (a query
row's outputs bitwise the same computed alone, and a batch element's computed alone),
``shift_invariance`` (a vector u added to every key of a kv head adds q.u to every score of a query
row: the output must not change) and ``permutation_invariance`` (the keys reordered with their
values and mask columns), each judged on the kernel's output for a copy of the case against its
output for the case, within both bounds and the exact values' difference. Not judged:
``nan_propagation`` (no family draws a non-finite input), ``range_safety`` (no declared arithmetic
leaves float32's range on a finite case: the exact scores of the drawn inputs stay below 1e5),
and softmax's own properties (the weights P are not an output).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from normprops.dtypes import get_dtype, to_dtype
from normprops.errormodel import ErrorModel
from normprops.frameworks import laid_like
from normprops.ops.attention_math import (
    EMPTY_ROWS,
    FOREIGN_ATTENTION,
    MASK_LAYOUTS,
    MEMORY_LAYOUTS,
    SENTINEL,
    AttentionCase,
    AttentionDeclaration,
    AttentionReference,
    AttentionTolerance,
    AttentionVerdict,
    attention_reference,
    attention_tolerance,
    check_attention,
    judge_attention,
    laid_out,
    mask_layouts_of,
)
from normprops.ops.spec import NamedArrays, NamedExact, OpSpec, Transform
from normprops.verdict import Verdict

__all__ = ["ATTENTION", "ATTENTION_PROPERTIES", "EMPTY_ROWS", "FOREIGN_ATTENTION", "MASK_LAYOUTS",
           "SENTINEL", "AttentionCase", "AttentionDeclaration", "AttentionReference",
           "AttentionTolerance", "AttentionVerdict", "as_taken", "attention_reference", "attention_tolerance",
           "cases_taken", "check_attention", "judge_attention", "mask_layouts_of", "undrawable_layouts",
           "user_attention_declaration"]

#: The properties an attention kernel is judged on (the module's docstring says why not the others).
ATTENTION_PROPERTIES = frozenset({"contract", "finite", "masked_rows", "accuracy", "determinism",
                                  "batch_invariance", "shift_invariance", "permutation_invariance"})

#: The families in report order, as :mod:`normprops.ops.attention_families` defines them (that
#: module imports Hypothesis, which the op's registration must not).
_FAMILIES = ("ordinary", "large_scores", "sentinel", "fully_masked", "causal", "gqa", "cancelling_v",
             "ragged", "sliding_window", "decode", "extreme_lse", "head_dims", "outlier_key", "strided")


def user_attention_declaration(model: ErrorModel, *, dtype: str, **keywords: Any) -> AttentionDeclaration:
    """A user's declaration (:meth:`AttentionDeclaration.declare`) on a depth model whose softmax
    constants are the online softmax's; a reduction deeper than a plain loop is never assumed
    unless declared (``threads``)."""
    return AttentionDeclaration.declare(model, dtype=dtype, **keywords)


def _cases(family: str, dtype: str, declaration: AttentionDeclaration) -> Any:
    from normprops.ops.attention_families import FAMILY_LAYOUTS, attention_cases

    why = _undrawable(family, declaration)
    if why is not None:
        raise ValueError(why)
    return cases_taken(attention_cases(family, dtypes=(dtype,), shape_pool=declaration.shape_pool,
                                       min_keys=declaration.min_keys),
                       layouts=FAMILY_LAYOUTS[family],
                       declaration=declaration, taken=functools.partial(as_taken, declaration=declaration))


def cases_taken(strategy: Any, *, layouts: frozenset[str], declaration: AttentionDeclaration,
                taken: Any) -> Any:
    """``strategy``'s cases (of a family drawing masks of ``layouts``) that a kernel of
    ``declaration`` takes: masks of its layouts, key lengths from its ``min_keys``, and each case
    in the shapes it takes (``taken``, as :func:`as_taken`)."""
    if not layouts <= declaration.mask_layouts:
        strategy = strategy.filter(lambda case: bool(mask_layouts_of(case.mask) & declaration.mask_layouts))
    if declaration.min_keys > 0:
        strategy = strategy.filter(lambda case: case.k.shape[2] >= declaration.min_keys)
    if (declaration.head_dims_multiple_of > 1 or declaration.min_head_dim > 1 or not declaration.gqa
            or declaration.equal_head_dims or declaration.lengths_multiple_of > 1):
        strategy = strategy.map(taken)
    return strategy


def as_taken(case: AttentionCase, *, declaration: AttentionDeclaration) -> AttentionCase:
    """``case`` in the shapes a kernel declared it takes, the same attention: head dimensions
    widened to at least ``min_head_dim`` and to a multiple of ``head_dims_multiple_of`` (and q's
    and v's to the wider of the two, ``equal_head_dims``) with zero columns (of q and k: every
    score unchanged; of v: output columns that are exactly zero), and, for a kernel without GQA,
    each kv head repeated for the query heads that read it; query and key lengths lengthened to a
    multiple of ``lengths_multiple_of`` (:func:`lengthened`)."""
    m = declaration.head_dims_multiple_of
    q, k, v = case.q, case.k, case.v
    d, dv = q.shape[3], v.shape[3]
    if declaration.equal_head_dims:
        d = dv = max(d, dv)
    d, dv = max(d, declaration.min_head_dim), max(dv, declaration.min_head_dim)
    d, dv = d + -d % m, dv + -dv % m

    q, k, v = (_zero_padded(a, 3, width - a.shape[3]) for a, width in ((q, d), (k, d), (v, dv)))
    if not declaration.gqa and k.shape[1] != q.shape[1]:
        group = q.shape[1] // k.shape[1]
        k, v = laid_like(np.repeat(k, group, axis=1), k), laid_like(np.repeat(v, group, axis=1), v)
    q, k, v, mask = lengthened(q, k, v, case.mask, declaration.lengths_multiple_of)
    if q is case.q and k is case.k and v is case.v and mask is case.mask:
        return case
    params = case.params
    if (q.shape[2], k.shape[2]) != (case.q.shape[2], case.k.shape[2]):  # shown beside the drawn ones
        params = {**params, "lengthened_from": f"Lq={case.q.shape[2]} Lk={case.k.shape[2]}"}
    return dataclasses.replace(case, q=q, k=k, v=v, mask=mask, params=params)


def lengthened(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, m: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """q's query length and k's and v's key length raised to multiples of ``m``: the extra queries
    are zeros that keep every drawn key (a uniform softmax over them: an ordinary row, judged as
    any), the extra keys and values zeros that no query keeps (every drawn row's attention is
    unchanged). A mask is made where keys are added to a case without one. (A kernel that fills
    masked scores with a finite value, as JAX does, spreads a drawn row with no kept key over the
    extra keys too; such a row is judged on its own contract, not on its values.)"""
    lq, lk = q.shape[2], k.shape[2]
    extra_q, extra_k = -lq % m, -lk % m
    if not extra_q and not extra_k:
        return q, k, v, mask

    if mask is not None or extra_k:
        longer = np.zeros((q.shape[0], 1, lq + extra_q, lk + extra_k), bool)  # extra keys: kept by none
        longer[:, :, :lq, :lk] = True if mask is None else mask
        longer[:, :, lq:, :lk] = True  # extra queries: every drawn key
        mask = longer
    return (_zero_padded(q, 2, extra_q), _zero_padded(k, 2, extra_k), _zero_padded(v, 2, extra_k),
            mask)


def _zero_padded(a: np.ndarray, axis: int, extra: int) -> np.ndarray:
    """``a`` with ``extra`` zeros appended along ``axis``, in ``a``'s memory order (itself if none)."""
    if not extra:
        return a
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, extra)
    return laid_like(np.pad(a, pad), a)


def _undrawable(family: str, declaration: AttentionDeclaration) -> str | None:
    from normprops.ops.attention_families import FAMILY_LAYOUTS

    return undrawable_layouts(family, declaration, family_layouts=FAMILY_LAYOUTS, families=_FAMILIES)


def undrawable_layouts(family: str, declaration: AttentionDeclaration, *,
                       family_layouts: dict[str, frozenset[str]], families: tuple[str, ...]) -> str | None:
    """Why ``family`` (whose masks are of ``family_layouts[family]``) draws nothing a kernel of
    ``declaration`` takes, or None."""
    if family not in family_layouts:
        return f"family must be one of {', '.join(families)} but was {family!r}"
    if family_layouts[family] & declaration.mask_layouts:
        return None
    return (f"family {family} draws masks of the layouts {', '.join(sorted(family_layouts[family]))}, "
            f"none of which the kernel takes (mask layouts: "
            f"{', '.join(n for n in MASK_LAYOUTS if n in declaration.mask_layouts)}); leave the "
            f"family out or declare one of its layouts")


def _outputs(case: AttentionCase, declaration: AttentionDeclaration,
             returned: int) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    b, hq, lq, _ = case.q.shape
    out = ("out", (b, hq, lq, case.v.shape[3]), case.dtype)
    lse = ("lse", (b, hq, lq), "float32")
    want = {True: 2, False: 1, None: returned if returned in (1, 2) else 2}[declaration.returns_lse]
    if returned != want:
        says = {True: "declared to return (out, lse)", False: "declared to return out alone",
                None: "returns out or (out, lse)"}[declaration.returns_lse]
        raise ValueError(f"returned {returned} array{'' if returned == 1 else 's'}; attention "
                         f"{says}")
    return (out, lse) if want == 2 else (out,)


def _exact(case: AttentionCase, declaration: AttentionDeclaration, oracle: str) -> NamedExact:
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale, oracle=oracle)
    tol = attention_tolerance(ref, dtype=case.dtype, declaration=declaration)
    full = ~ref.empty
    return NamedExact({"out": ref.out, "lse": ref.lse}, {"out": tol.out, "lse": tol.lse},
                      {"out": np.broadcast_to(full[..., None], ref.out.shape), "lse": full}, ref)


def _element(name: str, index: tuple[int, ...]) -> str:
    words = ("b", "h", "q", "col")
    return " ".join(f"{w} {int(i)}" for w, i in zip(words, index))


def _check(case: AttentionCase, outs: dict[str, np.ndarray], exact: NamedExact,
           declaration: AttentionDeclaration, label: str) -> list[Verdict]:
    """``masked_rows``: a query row with no kept key gives all zeros or all NaN (only what the
    kernel declares, where it does), never a mixture, and its lse is -inf."""
    empty = exact.reference.empty
    if not empty.any():
        return []
    got = outs["out"].astype(np.float64)
    zeros, nans = np.all(got == 0, axis=-1), np.all(np.isnan(got), axis=-1)
    allowed = {"zero": zeros, "nan": nans, None: zeros | nans}[declaration.empty_row]
    said = {"zero": "all zeros, as declared", "nan": "all NaN, as declared",
            None: "all zeros or all NaN, not a mixture"}[declaration.empty_row]
    bad = empty & ~allowed
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        row = got[index]
        c = int(np.argmax(~np.isnan(row) & (row != 0))) if declaration.empty_row != "nan" else int(
            np.argmax(~np.isnan(row)))
        return [Verdict(label, "masked_rows", case.family, None, None, float(row[c]), None, None,
                        None, float("inf"), f"query row with no kept key must be {said}; got "
                        f"{float(row[c])!r} in its column {c}", output="out",
                        element=_element("out", index + (c,)))]
    if "lse" in outs:
        lse = outs["lse"].astype(np.float64)
        wrong = empty & ~np.isneginf(lse)
        if wrong.any():
            index = tuple(int(i) for i in np.argwhere(wrong)[0])
            return [Verdict(label, "masked_rows", case.family, None, None, float(lse[index]),
                            float("-inf"), None, None, float("inf"),
                            f"query row with no kept key must have lse -inf; got {float(lse[index])!r}",
                            output="lse", element=_element("lse", index))]
    return []


def _pieces(case: AttentionCase) -> tuple[tuple[AttentionCase, tuple[slice, ...], str], ...]:
    b, _, lq, _ = case.q.shape
    i, n = lq // 2, b // 2
    # One query row (a decode step) alone is the case itself: determinism's second call judged it.
    row = (slice(None), slice(None), slice(i, i + 1))
    found = [] if lq == 1 else [(case.queries(slice(None), slice(i, i + 1)), row,
                                 f"query row {i} alone (Lq = 1)")]
    if b > 1:
        found.append((case.queries(slice(n, n + 1), slice(None)), (slice(n, n + 1),),
                      f"batch element {n} alone (B = 1)"))
    return tuple(found)


def _build(family: str, dtype: str, fields: dict[str, Any], params: dict[str, Any]) -> AttentionCase:
    missing = sorted({"q", "k", "v", "scale"} - set(fields))
    if missing:
        raise ValueError(f"attention needs {', '.join(missing)}")
    q, k, v = fields["q"], fields["k"], fields["v"]
    if params.get("memory") in MEMORY_LAYOUTS:  # a strided case keeps its strides when replayed
        q, k, v = (laid_out(np.asarray(a), params["memory"]) for a in (q, k, v))
    return AttentionCase(q, k, v, fields.get("mask"), fields["scale"], dtype=dtype, family=family,
                         params=params)


def _describe(case: AttentionCase, verdict: Any = None) -> str:
    b, hq, lq, d = case.q.shape
    hkv, lk, dv = case.k.shape[1], case.k.shape[2], case.v.shape[3]
    layouts = sorted(mask_layouts_of(case.mask) - {"arbitrary"}) or ["arbitrary"]
    lines = [f"input: B={b} Hq={hq} Hkv={hkv} Lq={lq} Lk={lk} D={d} Dv={dv} {case.dtype}, "
             f"scale={float(case.scale)!r}, mask {'/'.join(layouts)}; drawn with "
             + ", ".join(f"{k}={v!r}" for k, v in case.params.items())]
    if case.mask is not None:
        kept = case.mask.sum(axis=-1)
        lines.append(f"keys kept per query row: {int(kept.min())} to {int(kept.max())} of {lk}"
                     f"{'; some rows keep none' if (kept == 0).any() else ''}")
    if verdict is not None and getattr(verdict, "batch", None):
        lines.append(f"failing output: {verdict.batch}")
    qf, kf = case.q.astype(np.float64), np.repeat(case.k.astype(np.float64), case.group, axis=1)
    with np.errstate(all="ignore"):
        s = case.scale * (qf @ kf.swapaxes(-1, -2))
    if case.mask is not None:
        s = np.where(case.mask, s, np.nan)
    if np.isfinite(s).any():
        lines.append(f"scaled scores of kept keys: {np.nanmin(s):.6g} to {np.nanmax(s):.6g}; "
                     f"|v| up to {float(np.max(np.abs(case.v))):.6g}")
    return "\n".join(lines)


#: How far the key shift moves the scores of the query row it is aimed at: past exp's overflow at
#: 88.7, so that a kernel which exponentiates scores without subtracting the row max meets it.
KEY_SHIFT = 200.0


def _shift_keys(case: AttentionCase) -> tuple[AttentionCase, str] | None:
    """Every key of a kv head plus one vector ``u``: each score of a query row moves by
    ``scale q.u``, the same for all its keys, so the softmax and the output do not change. ``u`` is
    the first query row of the head's group scaled so its scores move by :data:`KEY_SHIFT` (the
    other rows' by their projection on it, of either sign). ``k + u`` is rounded to the storage
    type: the copy's exact output is computed, not assumed."""
    b, hq, lq, d = case.q.shape
    if case.k.shape[2] == 0 or lq == 0 or d == 0:
        return None
    row = case.q[:, ::case.group, 0, :].astype(np.float64)  # (B, Hkv, D)
    norm2 = np.sum(row * row, axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        u = np.where(norm2 > 0, KEY_SHIFT / (case.scale * norm2), 0.0) * row
        shifted = to_dtype((case.k.astype(np.float64) + u[:, :, None, :]).astype(np.float32), case.dtype)
    if not np.all(np.isfinite(shifted)) or not u.any():
        return None
    return (case.replace(k=laid_like(np.ascontiguousarray(shifted), case.k)),
            f"every key plus u = c q (q the group's first query row, scale q.u = {KEY_SHIFT:g})")


def _permute_keys(case: AttentionCase) -> tuple[AttentionCase, str] | None:
    """The keys in reverse order, with their values and mask columns: the same softmax over the
    same set, summed in another order (the first key last)."""
    lk = case.k.shape[2]
    if lk < 2:
        return None
    order = np.arange(lk)[::-1]
    mask = None if case.mask is None else np.ascontiguousarray(case.mask[..., order])
    return (case.replace(k=laid_like(np.ascontiguousarray(case.k[:, :, order]), case.k),
                         v=laid_like(np.ascontiguousarray(case.v[:, :, order]), case.v), mask=mask),
            "the keys, their values and mask columns in reverse order")


#: The two invariances of attention, judged on a copy of each case that passed.
KEY_TRANSFORMS = (Transform("shift_invariance", _shift_keys),
                  # The same softmax over the same set: the same exact output and bound (up to
                  # float64's rounding, 2^-29 of the bound), not computed again.
                  Transform("permutation_invariance", _permute_keys, same_exact=True))


def _from_json(doc: Any, model: ErrorModel) -> AttentionDeclaration:
    return AttentionDeclaration.from_json(doc, model)


def _storage(dtype: str) -> str:
    get_dtype(dtype)
    return dtype


ATTENTION = OpSpec(
    "attention", ("q", "k", "v", "mask", "scale"), None,
    "softmax(scale * q k^T, masked) v per query row; lse = ln sum exp(scale q.k) over kept keys",
    outputs=("out", "lse"), returns="out or (out, lse)", families=_FAMILIES, properties=ATTENTION_PROPERTIES,
    transforms=KEY_TRANSFORMS,
    reference=lambda case, oracle="float64": attention_reference(
        case.q, case.k, case.v, case.mask, case.scale, oracle=oracle),
    bound=lambda case, ref, declaration=FOREIGN_ATTENTION: attention_tolerance(
        ref, dtype=_storage(case.dtype), declaration=declaration),
    named=NamedArrays(
        cases=_cases, outputs=_outputs, exact=_exact, check=_check, element=_element,
        pieces=_pieces, build=_build, describe=_describe, default_declaration=FOREIGN_ATTENTION,
        declare=user_attention_declaration, from_json=_from_json,
        keywords=("mask_layouts", "empty_rows", "returns_lse", "p_dtype", "online", "shape_pool"),
        undrawable=_undrawable),
    # Planted bugs caught at worst at example 9 of 20 seeds (attention_first_key_max): 3 x 9 = 27.
    gate_examples=30,
)
