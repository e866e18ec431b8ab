"""The attention backward op, ``fn(dout, q, k, v, mask, scale) -> (dq, dk, dv)``, registered as
``attention_backward``: the gradients of :mod:`normprops.ops.attention`'s ``out`` against an
upstream gradient ``dout``, on the same named-arrays path (its case, declaration, mask layouts and
reshaping for a kernel's shapes are the forward's). Its families are in
:mod:`normprops.ops.attention_backward_families`; the bound is derived in docs/tolerances.md,
"Gradients", "Attention backward".

The contract. ``q``, ``k``, ``v``, ``mask`` and ``scale`` as the forward takes them; ``dout``
(B, Hq, Lq, Dv) in the storage type. ``dq`` has q's shape; ``dk`` and ``dv`` have k's and v's, each
summed over the query heads that read that kv head (query head ``h`` reads kv head
``h // (Hq // Hkv)``); all three in the storage type. A query row with no kept key has ``dq`` 0
and adds nothing to ``dk`` or ``dv``. A kernel that needs the forward's ``out`` or ``lse``
computes them itself.

Properties judged: ``contract``, ``finite`` and ``accuracy`` on every element of the three
outputs, ``masked_rows`` (a query row with no kept key: its dq exactly zero), ``determinism`` and
``batch_invariance`` (a batch element's outputs computed alone, bitwise the same; a query row
alone is no piece of the case, since dk and dv sum over every query row).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from normprops.dtypes import get_dtype
from normprops.errormodel import ErrorModel
from normprops.ops.attention import _describe as _describe_forward
from normprops.ops.attention import cases_taken, undrawable_layouts
from normprops.ops.attention_backward_math import (
    FOREIGN_ATTENTION_BACKWARD,
    AttentionBackwardCase,
    AttentionBackwardDeclaration,
    AttentionBackwardReference,
    AttentionBackwardTolerance,
    attention_backward_reference,
    attention_backward_tolerance,
    backward_as_taken,
    backward_declaration,
)
from normprops.ops.attention_math import (
    AttentionDeclaration,
)
from normprops.ops.spec import NamedArrays, NamedExact, OpSpec
from normprops.verdict import Verdict

__all__ = ["ATTENTION_BACKWARD", "AttentionBackwardCase", "AttentionBackwardDeclaration",
           "backward_declaration", "AttentionBackwardReference",
           "AttentionBackwardTolerance", "attention_backward_reference", "attention_backward_tolerance",
           "backward_as_taken"]

#: The properties an attention backward kernel is judged on (the module's docstring says which).
ATTENTION_BACKWARD_PROPERTIES = frozenset({"contract", "finite", "masked_rows", "accuracy",
                                           "determinism", "batch_invariance"})

#: The families in report order (:mod:`normprops.ops.attention_backward_families` defines them;
#: that module imports Hypothesis, which the op's registration must not).
_FAMILIES = ("ordinary", "cancelling_dout", "orthogonal_dout", "one_hot_dout", "dout_scale",
             "fully_masked", "low_lse", "gqa")


# --- the op's hooks ------------------------------------------------------------------------------


def _cases(family: str, dtype: str, declaration: AttentionDeclaration) -> Any:
    from normprops.ops.attention_backward_families import FAMILY_LAYOUTS, attention_backward_cases

    why = _undrawable(family, declaration)
    if why is not None:
        raise ValueError(why)
    return cases_taken(attention_backward_cases(family, dtypes=(dtype,), shape_pool=declaration.shape_pool,
                                                min_keys=declaration.min_keys),
                       layouts=FAMILY_LAYOUTS[family],
                       declaration=declaration,
                       taken=lambda case: backward_as_taken(case, declaration=declaration))


def _undrawable(family: str, declaration: AttentionDeclaration) -> str | None:
    from normprops.ops.attention_backward_families import FAMILY_LAYOUTS

    return undrawable_layouts(family, declaration, family_layouts=FAMILY_LAYOUTS, families=_FAMILIES)


def _outputs(case: AttentionBackwardCase, declaration: AttentionDeclaration,
             returned: int) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    if returned != 3:
        raise ValueError(f"returned {returned} array{'' if returned == 1 else 's'}; "
                         f"attention_backward returns (dq, dk, dv)")
    return (("dq", tuple(case.q.shape), case.dtype), ("dk", tuple(case.k.shape), case.dtype),
            ("dv", tuple(case.v.shape), case.dtype))


def _exact(case: AttentionBackwardCase, declaration: AttentionDeclaration, oracle: str) -> NamedExact:
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, case.mask, case.scale)  # type: ignore[arg-type]
    tol = attention_backward_tolerance(ref, dtype=case.dtype, declaration=declaration)
    exact = {"dq": ref.dq, "dk": ref.dk, "dv": ref.dv}
    return NamedExact(exact, {"dq": tol.dq, "dk": tol.dk, "dv": tol.dv},
                      {name: np.ones(a.shape, bool) for name, a in exact.items()}, ref)


def _element(name: str, index: tuple[int, ...]) -> str:
    words = ("b", "h", "q", "col") if name == "dq" else ("b", "kv head", "key", "col")
    return " ".join(f"{w} {int(i)}" for w, i in zip(words, index))


def _check(case: AttentionBackwardCase, outs: dict[str, np.ndarray], exact: NamedExact,
           declaration: AttentionDeclaration, label: str) -> list[Verdict]:
    """``masked_rows``: a query row with no kept key has dq exactly zero."""
    empty = exact.reference.forward.empty
    if not empty.any():
        return []
    got = np.asarray(outs["dq"]).astype(np.float64)
    bad = empty[..., None] & (got != 0)
    if not bad.any():
        return []
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return [Verdict(label, "masked_rows", case.family, None, None, float(got[index]), 0.0, None, None,
                    float("inf"), f"query row with no kept key must have dq 0; got {float(got[index])!r}",
                    output="dq", element=_element("dq", index))]


def _pieces(case: AttentionBackwardCase) -> tuple[tuple[AttentionBackwardCase, tuple[slice, ...], str], ...]:
    b = case.q.shape[0]
    if b < 2:
        return ()
    n = b // 2
    return ((case.queries(slice(n, n + 1), slice(None)), (slice(n, n + 1),),
             f"batch element {n} alone (B = 1)"),)


def _build(family: str, dtype: str, fields: dict[str, Any], params: dict[str, Any]) -> AttentionBackwardCase:
    missing = sorted({"dout", "q", "k", "v", "scale"} - set(fields))
    if missing:
        raise ValueError(f"attention_backward needs {', '.join(missing)}")
    return AttentionBackwardCase(fields["q"], fields["k"], fields["v"], fields.get("mask"), fields["scale"],
                                 dtype=dtype, family=family, params=params, dout=fields["dout"])


def _describe(case: AttentionBackwardCase, verdict: Any = None) -> str:
    do = np.asarray(case.dout, dtype=np.float64)
    line = (f"|dout| from {float(np.min(np.abs(do))):.6g} to {float(np.max(np.abs(do))):.6g}"
            if do.size else "dout empty")
    return _describe_forward(case, verdict) + "\n" + line


def _declare(model: ErrorModel, *, dtype: str, mask_layouts: object = None,
             p_dtype: object = None, shape_pool: object = None) -> AttentionDeclaration:
    """A user's declaration: the masks the kernel takes, the type it rounds P and dS to before
    their matrix products and the shapes a family draws (the forward's keywords; an empty row's
    dq is always 0)."""
    return AttentionBackwardDeclaration.declare(model, dtype=dtype, mask_layouts=mask_layouts,
                                                p_dtype=p_dtype, shape_pool=shape_pool)


def _from_json(doc: Any, model: ErrorModel) -> AttentionDeclaration:
    return AttentionBackwardDeclaration.from_json(doc, model)


def _storage(dtype: str) -> str:
    get_dtype(dtype)
    return dtype


ATTENTION_BACKWARD = OpSpec(
    "attention_backward", ("dout", "q", "k", "v", "mask", "scale"), None,
    "the gradients of attention's out against dout: dq = scale dS k, dk = scale dS^T q, "
    "dv = P^T dout, dS = P (dout v^T - rowsum(dout * out)); dk and dv summed over a kv head's "
    "query heads",
    outputs=("dq", "dk", "dv"), returns="(dq, dk, dv)", families=_FAMILIES,
    properties=ATTENTION_BACKWARD_PROPERTIES,
    reference=lambda case, oracle="float64": attention_backward_reference(
        case.dout, case.q, case.k, case.v, case.mask, case.scale),
    bound=lambda case, ref, declaration=FOREIGN_ATTENTION_BACKWARD: attention_backward_tolerance(
        ref, dtype=_storage(case.dtype), declaration=declaration),
    named=NamedArrays(
        cases=_cases, outputs=_outputs, exact=_exact, check=_check, element=_element,
        pieces=_pieces, build=_build, describe=_describe, default_declaration=FOREIGN_ATTENTION_BACKWARD,
        declare=_declare, from_json=_from_json, keywords=("mask_layouts", "p_dtype", "shape_pool"),
        undrawable=_undrawable),
    # Planted bugs caught at worst at example 5 of 20 seeds (unscaled_dk, gqa_one_head): 3 x 5 = 15.
    gate_examples=30,
)
