"""The attention backward's mathematics, ``fn(dout, q, k, v, mask, scale) -> (dq, dk, dv)``: the
case, the exact reference and the error bound (docs/tolerances.md, "Gradients", "Attention
backward"); :mod:`normprops.ops.attention_backward` registers the op, and its families are in
:mod:`normprops.ops.attention_backward_families`. The contract is the op module's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from normprops.dtypes import check_representable, get_dtype, numpy_dtype, rounding_floor
from normprops.ops.attention import as_taken
from normprops.ops.attention_math import (
    FOREIGN_ATTENTION,
    AttentionCase,
    AttentionDeclaration,
    AttentionReference,
    attention_reference,
    attention_tolerance,
)

__all__ = ["AttentionBackwardCase", "AttentionBackwardDeclaration", "AttentionBackwardReference",
           "AttentionBackwardTolerance", "FOREIGN_ATTENTION_BACKWARD", "attention_backward_reference",
           "attention_backward_tolerance", "backward_as_taken", "backward_declaration",
           "BACKWARD_BOUND_TERMS"]

FLT_MIN = 2.0**-126


# --- what a kernel declares ----------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionBackwardDeclaration(AttentionDeclaration):
    """The forward's declaration (:class:`AttentionDeclaration`: depth, P's type, masks, shapes)
    and ``group_sum_dtype``: the type each query head's dk and dv are rounded to and a kv head's
    group summed in (autograd's sum over an expanded kv head in the storage type), None: float32."""

    group_sum_dtype: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group_sum_dtype is not None:
            get_dtype(self.group_sum_dtype)

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        return {**doc, "group_sum_dtype": self.group_sum_dtype} if self.group_sum_dtype else doc

    @classmethod
    def from_json(cls, doc: Any, model: Any) -> AttentionBackwardDeclaration:
        base = super().from_json(doc, model)
        return dataclasses.replace(base, group_sum_dtype=doc.get("group_sum_dtype")
                                   if isinstance(doc, dict) else None)  # type: ignore[return-value]


def backward_declaration(forward: AttentionDeclaration, **changes: Any) -> AttentionBackwardDeclaration:
    """``forward`` (an attention declaration) as the backward's, with ``changes``."""
    fields = {f.name: getattr(forward, f.name) for f in dataclasses.fields(AttentionDeclaration)}
    return AttentionBackwardDeclaration(**{**fields, **changes})


#: A kernel we did not write, as the forward's FOREIGN_ATTENTION; its group sums in float32.
FOREIGN_ATTENTION_BACKWARD = backward_declaration(FOREIGN_ATTENTION)


# --- the case ----------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class AttentionBackwardCase(AttentionCase):
    """The forward's case and the upstream gradient ``dout`` (B, Hq, Lq, Dv), float32 values exact
    in ``dtype``."""

    dout: np.ndarray | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        b, hq, lq, _ = self.q.shape
        want = (b, hq, lq, self.v.shape[3])
        if self.dout is None or self.dout.ndim != 4 or self.dout.shape != want:
            got = None if self.dout is None else self.dout.shape
            raise ValueError(f"dout must have out's shape (B, Hq, Lq, Dv) = {want} but was {got}")
        check_representable(self.dout, self.dtype, name="dout")

    @property
    def op(self) -> str:
        return "attention_backward"

    def args(self) -> tuple[Any, ...]:  # type: ignore[override]
        """The positional arguments of ``fn(dout, q, k, v, mask, scale)``."""
        return self.dout, self.q, self.k, self.v, self.mask, self.scale

    def fields(self) -> dict[str, Any]:
        return {"dout": self.dout, **super().fields()}

    def float_arrays(self) -> tuple[np.ndarray, ...]:
        return self.dout, self.q, self.k, self.v  # type: ignore[return-value]

    def inputs(self) -> tuple[Any, ...]:  # type: ignore[override]
        t = numpy_dtype(self.dtype)
        return (self.dout.astype(t), *super().inputs())  # type: ignore[union-attr]

    def queries(self, batch: slice, rows: slice) -> AttentionBackwardCase:
        """The batch elements ``batch`` (every query row: dk and dv sum over them all)."""
        if rows != slice(None):
            raise ValueError("rows must be slice(None): dk and dv sum over every query row")
        return dataclasses.replace(self, q=np.ascontiguousarray(self.q[batch]),
                                   k=np.ascontiguousarray(self.k[batch]),
                                   v=np.ascontiguousarray(self.v[batch]),
                                   mask=None if self.mask is None else np.ascontiguousarray(self.mask[batch]),
                                   dout=np.ascontiguousarray(self.dout[batch]))  # type: ignore[index]

    def __repr__(self) -> str:
        return "AttentionBackward" + super().__repr__()


def backward_as_taken(case: AttentionBackwardCase, *, declaration: AttentionDeclaration
                      ) -> AttentionBackwardCase:
    """:func:`normprops.ops.attention.as_taken` for the backward: q, k, v widened and kv heads
    repeated as the forward's, and ``dout`` widened with zero columns as v is (``dout . v_j`` and
    ``dout . out`` unchanged; the extra columns of dq, dk and dv are exactly zero). With kv heads
    repeated, each dk and dv head is its own query head's gradient. Where the lengths are raised
    (``lengths_multiple_of``), the extra queries' dout is zero: their dq is zero and they add
    nothing to dk and dv, and the extra keys, kept by no query, get zero dk and dv."""
    forward = AttentionCase(case.q, case.k, case.v, case.mask, case.scale, dtype=case.dtype)
    taken = as_taken(forward, declaration=declaration)
    if taken is forward:
        return case
    extra = taken.v.shape[3] - case.v.shape[3]
    rows = taken.q.shape[2] - case.q.shape[2]
    dout = np.pad(case.dout, ((0, 0), (0, 0), (0, rows), (0, extra))) if extra or rows else case.dout
    return dataclasses.replace(case, q=taken.q, k=taken.k, v=taken.v, mask=taken.mask, dout=dout,
                               params={**case.params, **taken.params})


# --- the exact reference -----------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionBackwardReference:
    """The exact gradients of one case and the quantities the bound reads.

    ``dq`` (B, Hq, Lq, D), ``dk`` (B, Hkv, Lk, D), ``dv`` (B, Hkv, Lk, Dv), float64. ``forward``:
    the forward's exact reference (P, out, lse, the scores). ``dp`` (B, Hq, Lq, Lk): ``dout . v_j``;
    ``row`` (B, Hq, Lq): the row term ``sum_c dout_c out_c`` (0 on a row with no kept key);
    ``ds``: ``P (dP - row)``.
    """

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    forward: AttentionReference
    dp: np.ndarray
    row: np.ndarray
    ds: np.ndarray
    dout: np.ndarray
    q: np.ndarray
    k: np.ndarray  # kv heads expanded to the query heads
    scale: float
    group: int
    dk_heads: np.ndarray  # dk and dv of each query head, before the sum over a kv head's group
    dv_heads: np.ndarray


def _group_sum(a: np.ndarray, group: int) -> np.ndarray:
    """(B, Hq, ...) summed over the query heads of each kv head: (B, Hkv, ...)."""
    b, hq = a.shape[:2]
    return a.reshape((b, hq // group, group) + a.shape[2:]).sum(axis=2)


def attention_backward_reference(dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                 mask: np.ndarray | None, scale: float) -> AttentionBackwardReference:
    """The exact gradients in float64: P from the exact scores, ``dP = dout v^T``, the row term
    ``rowsum(dout * out)`` (= ``rowsum(P * dP)``), ``dS = P (dP - row)``, ``dq = scale dS k``,
    ``dk = scale dS^T q`` and ``dv = P^T dout``, dk and dv summed over each kv head's query heads.

    float64 suffices: every input is a float32 value, each product of two is exact, and float64's
    matrix products err by ``(n + 1) 2^-53`` of the same absolute sums (``sum |dout||v|``,
    ``sum |dout||out|``, ``sum |dS||k|``) that the float32 bound charges ``(k + 1) 2^-24`` for, the
    cancelling difference ``dP - row`` included (docs/tolerances.md, "Attention backward")."""
    fwd = attention_reference(q, k, v, mask, scale)
    qd, kd, vd = (np.asarray(a).astype(np.float64) for a in (q, k, v))
    do = np.asarray(dout).astype(np.float64)
    group = qd.shape[1] // kd.shape[1]
    ke, ve = np.repeat(kd, group, axis=1), np.repeat(vd, group, axis=1)
    scale = float(scale)
    with np.errstate(all="ignore"):
        p = fwd.p
        out = np.where(fwd.empty[..., None], 0.0, fwd.out)
        dp = do @ ve.swapaxes(-1, -2)
        row = np.sum(do * out, axis=-1)
        ds = p * (dp - row[..., None])
        dq = scale * (ds @ ke)
        dk_heads = scale * (ds.swapaxes(-1, -2) @ qd)
        dv_heads = p.swapaxes(-1, -2) @ do
    return AttentionBackwardReference(dq, _group_sum(dk_heads, group), _group_sum(dv_heads, group), fwd,
                                      dp, row, ds, do, qd, ke, scale, group, dk_heads, dv_heads)


# --- the bound -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionBackwardTolerance:
    """Per-element bounds of ``dq``, ``dk`` and ``dv``, shaped as they are."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray


#: The backward bound's terms that ``drop`` may leave out (docs/tolerances.md, "Attention
#: backward"), for the tests that each is needed; never to judge.
BACKWARD_BOUND_TERMS = ("p_floor",)


def attention_backward_tolerance(ref: AttentionBackwardReference, *, dtype: str = "float32",
                                 declaration: AttentionDeclaration = FOREIGN_ATTENTION_BACKWARD,
                                 drop: frozenset[str] = frozenset()) -> AttentionBackwardTolerance:
    """The bound of docs/tolerances.md, "Attention backward", for a kernel computing in float32
    on inputs and outputs of storage type ``dtype``, with the reductions of ``declaration.model``.

    Per query row and kept key ``j``: P's relative error ``eps_j``, the larger of the forward's
    (P normalised by its row sum) and that of P recomputed as ``exp(s_j - lse)`` from a saved lse
    (``delta_j + tol_lse + u (|s_j - lse| + 3)``), plus ``u_P`` where P is rounded (``p_dtype``);
    ``e_P = p_j eps_j + FLT_MIN``. ``dP_j``'s error ``(k(Dv) + 1) u b_j`` (``b_j = sum |dout||v_j|``),
    the row term's the larger of its two forms (from out: ``sum |dout| (tol_out + (k(Dv) + 1) u
    (|out| + tol_out))``; from P.dP: ``sum_j e_P (|dP_j| + e_dP_j) + p_j e_dP_j + (k(Lk) + 1) u
    (p_j + e_P)(|dP_j| + e_dP_j)``). ``g_j = |dP_j - row|`` and ``e_g`` its error, then

        e_dS_j = e_P (g_j + e_g_j) + p_j e_g_j + (u + u_P)(p_j + e_P)(g_j + e_g_j) + FLT_MIN / min(1, |scale|)
        tol_dq = |scale| (e_dS |k| + (k(Lk) + 2) u (|dS| + e_dS) |k|) + u_out |dq| + floor
        tol_dk = |scale| sum over the group's query rows of (e_dS |q| + k_Q u (|dS| + e_dS) |q|) + ...
        tol_dv = sum over the group's query rows of (e_P |dout| + k_Q u (p + e_P) |dout|) + ...

    with ``k_Q = max(k(G Lq), k(Lq) + G) + 2``: a sum over the ``G Lq`` query rows of a kv head,
    in one chain or per head and then across the ``G`` heads. A kernel declaring
    ``group_sum_dtype`` (each head's dk and dv rounded to that type and the heads summed in it) is
    allowed ``G u_G sum_h (|dk_h| + tol_dk_h)`` more (and so for dv).

    Where ``p_dtype`` is float16, P and dS are rounded to it below its normal range too, each off by
    up to ``f_P = 2^-25`` absolutely (:func:`normprops.dtypes.rounding_floor`): ``e_P``
    and dS's floor take ``max(FLT_MIN, f_P)`` in place of FLT_MIN (one rounding, flushed in float32
    or rounded in float16), which the products carry into ``dv`` (``f_P sum_q |dout|``), ``dq``
    (``f_P |scale| sum_k |k|``, the floor divided by ``min(1, |scale|)`` as FLT_MIN is) and ``dk``.
    ``drop``: terms of :data:`BACKWARD_BOUND_TERMS` left out, for the tests that each is needed."""
    if not isinstance(drop, frozenset) or not drop <= set(BACKWARD_BOUND_TERMS):
        raise ValueError(f"drop must be a frozenset of {', '.join(BACKWARD_BOUND_TERMS)} but was {drop!r}")
    kind = get_dtype(dtype)
    model = declaration.model
    u = model.unit_roundoff
    fwd = ref.forward
    lq, dv_cols = ref.dout.shape[2:]
    lk = fwd.keys
    group = ref.group
    k_dv, k_l = model.k(dv_cols), model.k(lk)
    k_q = max(model.k(group * lq), model.k(lq) + group) + 2
    u_p = 0.0 if declaration.p_dtype is None else get_dtype(declaration.p_dtype).u
    ftol = attention_tolerance(fwd, dtype=dtype, declaration=declaration,
                               drop=frozenset({"p_floor"}) & drop)
    # One rounding's absolute floor: FLT_MIN (a float32 flush), or half float16's subnormal step
    # where P and dS are rounded to it (a value flushed in float32 rounds exactly to float16 after).
    floor = max(FLT_MIN, 0.0 if "p_floor" in drop else rounding_floor(declaration.p_dtype))
    eps_fwd = ftol.weights
    kept = fwd.p > 0
    p = fwd.p
    with np.errstate(all="ignore"):
        delta = np.where(kept, (model.k(fwd.head_dim) + 3) * u * fwd.score_size, 0.0)  # the scores
        lse = np.where(fwd.empty, 0.0, fwd.lse)[..., None]
        tol_lse = np.where(fwd.empty, 0.0, ftol.lse)[..., None]
        gap = np.abs(np.where(kept, fwd.scores - lse, 0.0))
        eps_lse = (1 + np.expm1(delta + tol_lse + u * (gap + 3))) * (1 + u_p) - 1
        eps = np.where(kept, np.maximum(eps_fwd, eps_lse), 0.0)
        e_p = p * eps + floor * kept
        abs_do = np.abs(ref.dout)
        v_abs = fwd.v_abs  # (B, Hq, Lk, Dv)
        e_dp = (k_dv + 1) * u * (abs_do @ v_abs.swapaxes(-1, -2))
        dp_abs = np.abs(ref.dp) + e_dp
        out_abs = np.abs(np.where(fwd.empty[..., None], 0.0, fwd.out))
        tol_out = np.where(fwd.empty[..., None], 0.0, ftol.out)
        row_from_out = np.sum(abs_do * (tol_out + (k_dv + 1) * u * (out_abs + tol_out)), axis=-1)
        row_from_p = np.sum(e_p * dp_abs + p * e_dp + (k_l + 1) * u * (p + e_p) * dp_abs, axis=-1)
        e_row = np.maximum(row_from_out, row_from_p)[..., None]
        g = np.abs(ref.dp - ref.row[..., None])
        e_g = e_dp + e_row + u * (g + e_dp + e_row)
        sc = abs(ref.scale)
        # dS flushed to zero below FLT_MIN, or scale * dS where a kernel scales dS before its
        # products (JAX's autodiff, FlexAttention's eager backward): FLT_MIN in scale * dS is
        # FLT_MIN / |scale| in dS.
        floor_ds = floor / min(1.0, sc) if sc > 0 else floor
        e_ds = np.where(kept, e_p * (g + e_g) + p * e_g + (u + u_p) * (p + e_p) * (g + e_g) + floor_ds, 0.0)
        ds_abs = np.abs(ref.ds) + e_ds
        k_abs, q_abs = np.abs(ref.k), np.abs(ref.q)
        tol_dq = sc * (e_ds @ k_abs + (k_l + 2) * u * (ds_abs @ k_abs)) + FLT_MIN * (lk + 2)
        e_dst, ds_abst = e_ds.swapaxes(-1, -2), ds_abs.swapaxes(-1, -2)
        heads_dk = sc * (e_dst @ q_abs + k_q * u * (ds_abst @ q_abs))
        heads_dv = e_p.swapaxes(-1, -2) @ abs_do + k_q * u * ((p + e_p).swapaxes(-1, -2) @ abs_do)
        tol_dk = _group_sum(heads_dk, group) + FLT_MIN * (group * lq + 2)
        tol_dv = _group_sum(heads_dv, group) + FLT_MIN * (group * lq + 2)
        group_sum_dtype = getattr(declaration, "group_sum_dtype", None)
        if group_sum_dtype is not None and group > 1:
            # Each head's dk (dv) rounded to the declared type, then G - 1 additions in it: G
            # roundings of at most u_G times the sum of the heads' magnitudes.
            kind_g = get_dtype(group_sum_dtype)
            u_g, tiny_g = kind_g.u, kind_g.tiny
            tol_dk = tol_dk + group * u_g * _group_sum(np.abs(ref.dk_heads) + heads_dk, group) + tiny_g
            tol_dv = tol_dv + group * u_g * _group_sum(np.abs(ref.dv_heads) + heads_dv, group) + tiny_g
        # The output's rounding to the storage type (float32: the kernel's last rounding).
        u_out, tiny = (u, 0.0) if dtype == "float32" else (kind.u, kind.tiny)
        tols = [t + u_out * np.abs(exact) + tiny
                for t, exact in ((tol_dq, ref.dq), (tol_dk, ref.dk), (tol_dv, ref.dv))]
    return AttentionBackwardTolerance(*tols)
