"""Attention's mathematics, ``fn(q, k, v, mask, scale) -> out`` or ``-> (out, lse)``: the case, what
a kernel declares, the exact reference, the error bound (docs/tolerances.md, "Attention") and a
judge of one call; :mod:`normprops.ops.attention` registers the op, and its adversarial families
are in :mod:`normprops.ops.attention_families`.

The contract. ``q`` is (B, Hq, Lq, D), ``k`` (B, Hkv, Lk, D), ``v`` (B, Hkv, Lk, Dv), all of one
storage type (float32, bfloat16 or float16); ``Hq`` is a multiple of ``Hkv`` and query head ``h``
reads kv head ``h // (Hq // Hkv)`` (MHA, GQA, MQA). ``mask`` is bool (B, 1, Lq, Lk), True where the
key takes part (PyTorch's ``scaled_dot_product_attention`` convention), or None. ``scale`` is a
Python float holding a float32 value. ``out`` is (B, Hq, Lq, Dv) in the storage type; ``lse`` is
(B, Hq, Lq) float32, ``ln sum_j exp(scale q.k_j)`` over the kept keys, -inf where none is kept. A
query row with no kept key gives all zeros or all NaN in ``out`` (a kernel declares which), never a
mixture.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import mpmath
import numpy as np

from normprops.dtypes import get_dtype, rounding_floor
from normprops.errormodel import ErrorModel
from normprops.errors import UsageError
from normprops.flags import spelled
from normprops.ops.attention_case import (
    MASK_LAYOUTS,
    MEMORY_LAYOUTS,
    AttentionCase,
    laid_out,
    mask_layouts_of,
)

__all__ = [
    "EMPTY_ROWS", "FOREIGN_ATTENTION", "MASK_LAYOUTS", "mask_layouts_of", "MEMORY_LAYOUTS",
    "laid_out", "SENTINEL", "BOUND_TERMS", "AttentionCase", "AttentionDeclaration",
    "AttentionReference", "AttentionTolerance", "AttentionVerdict", "attention_reference",
    "attention_tolerance", "check_attention", "judge_attention",
]

F32 = np.float32
U = 2.0**-24
U64 = 2.0**-53
FLT_MIN = 2.0**-126
FLT_MAX = float(np.finfo(F32).max)
ORACLES = ("float64", "mpmath")
#: What a kernel writes on a query row with no kept key.
EMPTY_ROWS = ("zero", "nan")
#: The finite stand-in for -inf that fp16-era kernels use (FlashInfer, flashinfer#4267): the
#: ``sentinel`` family puts every kept score of some rows below it.
SENTINEL = -5e4
# --- what a kernel declares ----------------------------------------------------------------------


#: The shapes a family draws for a kernel that compiles for every new shape (``shape_pool``): 300
#: examples over 8 shapes is 8 compiles (16 with and without a mask) rather than 200-300.
COMPILED_SHAPE_POOL = 8


@dataclass(frozen=True)
class AttentionDeclaration:
    """What a kernel promises about its arithmetic and its calls, which the bound and the hunt
    follow.

    ``model`` sets the depth ``k(n)`` of each of its three reductions (the D-long score dot
    product, the Lk-long softmax sum and the Lk-long P.V sum) and the softmax constants ``rho`` and
    ``c_x`` (:class:`normprops.errormodel.ErrorModel`). ``online``: a running max rescales the
    partial sums (FlashAttention); ``p_dtype``: the type P is rounded to before P.V (FlashAttention
    rounds it to the storage type), None if it stays float32; ``empty_row``: what a query row with
    no kept key gives, "zero" or "nan", None if either; ``mask_layouts``: the masks it takes
    (:data:`MASK_LAYOUTS`; the hunt draws only those); ``returns_lse``: True, it returns
    ``(out, lse)``; False, ``out`` alone; None, either (what comes back is judged).
    ``head_dims_multiple_of``: the head dimensions it takes are multiples of this (a drawn case is
    widened with zero columns of q, k and v: the scores do not change, the extra output columns are
    zero); ``gqa``: False, it takes only as many kv heads as query heads (a drawn case's kv heads
    are repeated for it: the same attention); ``equal_head_dims``: it takes v's head dimension only
    equal to q's and k's (the narrower widened with zero columns); ``min_head_dim``: the narrowest
    head dimension it takes, of q and k and of v (a narrower drawn one is widened with zero columns,
    as for ``head_dims_multiple_of``: Triton's ``tl.dot`` takes no dimension under 16);
    ``min_keys``: no shorter key length is drawn (SDPA's fused backends take no zero keys, cuDNN's
    no single key); ``lengths_multiple_of``: the query and key lengths it takes are multiples of
    this (a drawn case is lengthened with zero queries that keep every key, whose outputs are judged
    as any row's, and zero keys that no query keeps: every drawn row's attention unchanged; a
    backward's declaration, since the forward's batch invariance hands a query row alone);
    ``shape_pool``: it compiles for every new shape (``jax.jit``,
    ``torch.compile``), so each family draws its cases in at most this many shapes (0: in any), and
    a hunt spends its examples on values rather than compiles.
    """

    model: ErrorModel = field(default_factory=lambda: ErrorModel(threads=1, rho=6.0, c_x=3.5))
    online: bool = False
    p_dtype: str | None = None
    empty_row: str | None = None
    mask_layouts: frozenset[str] = frozenset(MASK_LAYOUTS)
    returns_lse: bool | None = None
    head_dims_multiple_of: int = 1
    gqa: bool = True
    equal_head_dims: bool = False
    min_head_dim: int = 1
    min_keys: int = 0
    lengths_multiple_of: int = 1
    shape_pool: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.min_keys, int) or self.min_keys < 0:
            raise ValueError(f"min_keys must be a non-negative int but was {self.min_keys!r}")
        if type(self.shape_pool) is not int or self.shape_pool < 0:
            raise ValueError(f"shape_pool must be a non-negative int but was {self.shape_pool!r}")
        if not isinstance(self.min_head_dim, int) or self.min_head_dim < 1:
            raise ValueError(f"min_head_dim must be a positive int but was {self.min_head_dim!r}")
        if type(self.lengths_multiple_of) is not int or self.lengths_multiple_of < 1:
            raise ValueError(f"lengths_multiple_of must be a positive int but was "
                             f"{self.lengths_multiple_of!r}")
        if not isinstance(self.head_dims_multiple_of, int) or self.head_dims_multiple_of < 1:
            raise ValueError(f"head_dims_multiple_of must be a positive int but was "
                             f"{self.head_dims_multiple_of!r}")
        if self.p_dtype is not None:
            get_dtype(self.p_dtype)
        if self.empty_row is not None and self.empty_row not in EMPTY_ROWS:
            raise ValueError(f"empty_row must be one of {EMPTY_ROWS} or None but was {self.empty_row!r}")
        if not isinstance(self.mask_layouts, frozenset):
            object.__setattr__(self, "mask_layouts", frozenset(self.mask_layouts))
        unknown = sorted(self.mask_layouts - set(MASK_LAYOUTS))
        if unknown or not self.mask_layouts:
            raise ValueError(f"mask_layouts must name some of {', '.join(MASK_LAYOUTS)} but was "
                             f"{sorted(self.mask_layouts)!r}")
        if self.lengths_multiple_of > 1 and "arbitrary" not in self.mask_layouts:
            raise ValueError("lengths_multiple_of needs a kernel that takes arbitrary masks (a "
                             "lengthened case's mask keeps no extra key), but mask_layouts were "
                             f"{sorted(self.mask_layouts)!r}")

    @classmethod
    def declare(cls, model: ErrorModel, *, dtype: str, mask_layouts: object = None,
                empty_rows: object = None, returns_lse: object = None, p_dtype: object = None,
                online: object = None, shape_pool: object = None) -> AttentionDeclaration:
        """A user's declaration from keywords (None: the default), each checked: UsageError naming
        the argument, its value and the fix."""
        layouts = frozenset(MASK_LAYOUTS)
        if mask_layouts is not None:
            names = ([n.strip() for n in mask_layouts.split(",") if n.strip()]
                     if isinstance(mask_layouts, str) else mask_layouts)
            try:
                layouts = frozenset(names)  # type: ignore[arg-type]
            except TypeError:
                layouts = frozenset({repr(mask_layouts)})
            unknown = sorted(layouts - set(MASK_LAYOUTS))
            if unknown or not layouts:
                raise UsageError(f"{spelled('mask_layouts')}: {', '.join(map(repr, unknown)) or 'nothing'} "
                                 f"{'is' if len(unknown) == 1 else 'are'} not a mask layout; choose "
                                 f"some of {', '.join(MASK_LAYOUTS)}")
        if empty_rows is not None and empty_rows not in (*EMPTY_ROWS, "either"):
            raise UsageError(f"{spelled('empty_rows')} must be zero, nan or either but was "
                             f"{empty_rows!r}: what the kernel writes on a query row with no kept key")
        if returns_lse not in (None, True, False):
            raise UsageError(f"{spelled('returns_lse')} must be True (fn returns (out, lse)), False "
                             f"(out alone) or None (either) but was {returns_lse!r}")
        if p_dtype is not None:
            try:
                get_dtype(p_dtype)  # type: ignore[arg-type]
            except ValueError:
                raise UsageError(f"{spelled('p_dtype')} must be float32, bfloat16 or float16 but was "
                                 f"{p_dtype!r}: the type P is rounded to before P.V") from None
            if get_dtype(p_dtype).u < get_dtype(dtype).u:  # type: ignore[arg-type]
                raise UsageError(f"{spelled('p_dtype', str(p_dtype))} is wider than the storage type "
                                 f"{dtype}: P is rounded to the storage type at most; drop it")
        if online not in (None, True, False):
            raise UsageError(f"{spelled('online')} must be True or False but was {online!r}")
        pool = 0
        if shape_pool is not None:
            try:
                pool = -1 if isinstance(shape_pool, bool) else operator.index(shape_pool)  # type: ignore[arg-type]
            except TypeError:
                pool = -1
        if pool < 0:
            raise UsageError(f"{spelled('shape_pool')} must be a whole number, 0 or more, but was "
                             f"{shape_pool!r}: how many shapes each family draws for a kernel that "
                             f"compiles for every new shape (0: any shape)")
        rounded = None if p_dtype in (None, "float32") else str(p_dtype)
        return cls(model, online=True if online is None else bool(online), p_dtype=rounded,
                   empty_row=None if empty_rows in (None, "either") else str(empty_rows),
                   mask_layouts=layouts, returns_lse=returns_lse,  # type: ignore[arg-type]
                   shape_pool=pool)

    def to_json(self) -> dict[str, Any]:
        return {"online": self.online, "p_dtype": self.p_dtype, "empty_rows": self.empty_row or "either",
                "mask_layouts": [n for n in MASK_LAYOUTS if n in self.mask_layouts],
                "returns_lse": self.returns_lse, "threads": self.model.threads,
                **({"shape_pool": self.shape_pool} if self.shape_pool else {})}

    @classmethod
    def from_json(cls, doc: Any, model: ErrorModel) -> AttentionDeclaration:
        doc = doc if isinstance(doc, dict) else {}
        empty = doc.get("empty_rows")
        if isinstance(doc.get("threads"), int):
            model = replace(model, threads=doc["threads"])
        return cls(model, online=bool(doc.get("online", True)), p_dtype=doc.get("p_dtype"),
                   empty_row=None if empty in (None, "either") else empty,
                   mask_layouts=frozenset(doc.get("mask_layouts") or MASK_LAYOUTS),
                   returns_lse=doc.get("returns_lse"),
                   shape_pool=doc["shape_pool"] if type(doc.get("shape_pool")) is int else 0)

    def flag_pairs(self) -> list[tuple[str, object]]:
        """The fields that differ from a user kernel's default, as (field, value) for a command."""
        return [
            ("mask_layouts", None if self.mask_layouts == frozenset(MASK_LAYOUTS)
             else ",".join(n for n in MASK_LAYOUTS if n in self.mask_layouts)),
            ("empty_rows", self.empty_row),
            ("returns_lse", None if self.returns_lse is None else ("yes" if self.returns_lse else "no")),
            ("p_dtype", self.p_dtype),
            ("online", None if self.online else "no"),
            ("shape_pool", self.shape_pool or None),
        ]


#: A kernel we did not write (PyTorch's): every reduction as deep as a plain loop (BLAS sums a dot
#: product one term after another), online rescaling allowed, fast-math exp.
FOREIGN_ATTENTION = AttentionDeclaration(ErrorModel(threads=1, rho=6.0, c_x=3.5), online=True)


# --- the exact reference -----------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionReference:
    """The exact result of one case and the condition quantities its bound reads.

    Shapes: ``out`` (B, Hq, Lq, Dv), NaN on empty rows; ``lse``, ``row_max``, ``spread``, ``kept``
    and ``empty`` (B, Hq, Lq); ``p``, ``scores`` and ``score_size`` (B, Hq, Lq, Lk), the weights
    (0 at masked keys), the exact ``scale q.k`` (-inf at masked keys) and ``|scale| sum_d |q_d k_d|``.
    ``abs_pv`` is ``sum_j p_j |v_j|`` per output element, ``abs_v`` ``sum_j |v_j|`` over kept keys.
    """

    out: np.ndarray
    lse: np.ndarray
    row_max: np.ndarray
    spread: np.ndarray  # W = sum_j p_j |s_j - m|
    kept: np.ndarray
    empty: np.ndarray
    p: np.ndarray
    scores: np.ndarray
    score_size: np.ndarray
    abs_pv: np.ndarray
    abs_v: np.ndarray
    v_abs: np.ndarray  # |v| with kv heads expanded to the query heads, (B, Hq, Lk, Dv)
    head_dim: int
    keys: int
    oracle: str = "float64"


def _per_head(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (B, Hq, L, n) times b (B, Hkv, 1, n, m), query head h by kv head h // group, uncopied."""
    grouped = a.reshape(a.shape[0], b.shape[1], a.shape[1] // b.shape[1], *a.shape[2:])
    return (grouped @ b).reshape(*a.shape[:3], b.shape[-1])


def _kept(mask: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    return np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                        scale: float, *, oracle: str = "float64") -> AttentionReference:
    """The exact attention of the inputs (float32, bfloat16 or float16 values, read exactly).

    float64 suffices: the products ``q_d k_d`` of two float32 values are exact in float64, and
    float64's matrix products err by at most ``(n + 1) 2^-53`` of the same absolute sums
    (``|scale| sum |q||k|``, ``sum p|v|``) that the float32 bound charges ``(k + 3) 2^-24`` for:
    ``2^-29 n`` of the bound at most. That is checked per row (docs/tolerances.md, "Attention"), and
    any row where float64's own bound reaches 1e-3 of the tolerance is recomputed with mpmath;
    ``oracle="mpmath"`` recomputes every row.
    """
    if oracle not in ORACLES:
        raise ValueError(f"oracle must be one of {ORACLES} but was {oracle!r}")
    qd, kd, vd = (np.asarray(a).astype(np.float64) for a in (q, k, v))
    group = qd.shape[1] // kd.shape[1]
    kt, v_abs = kd[:, :, None].swapaxes(-1, -2), np.repeat(np.abs(vd), group, axis=1)
    scale = float(scale)
    with np.errstate(all="ignore"):
        dot = _per_head(qd, kt)
        size = abs(scale) * _per_head(np.abs(qd), np.abs(kt))
        keep = _kept(mask, dot.shape)
        s = np.where(keep, scale * dot, -np.inf)
        kept = keep.sum(axis=-1)
        empty = kept == 0
        m = np.max(s, axis=-1, initial=-np.inf)  # Lk = 0: every row empty
        m0 = np.where(empty, 0.0, m)
        e = np.where(keep, np.exp(s - m0[..., None]), 0.0)
        total = e.sum(axis=-1)  # positive terms: float64's pairwise sum is accurate
        p = np.where(empty[..., None], 0.0, e / np.where(empty, 1.0, total)[..., None])
        out = np.where(empty[..., None], np.nan, _per_head(p, vd[:, :, None]))
        lse = np.where(empty, -np.inf, m0 + np.log(np.where(empty, 1.0, total)))
        spread = np.sum(np.where(keep, p * np.abs(s - m0[..., None]), 0.0), axis=-1)
        abs_pv = p @ v_abs
        abs_v = keep.astype(np.float64) @ v_abs
    ref = AttentionReference(out, lse, m, spread, kept, empty, p, s, size, abs_pv, abs_v, v_abs,
                             qd.shape[-1], kd.shape[2])
    redo = ~empty if oracle == "mpmath" else _float64_not_enough(ref)
    if redo.any():
        out, lse = out.copy(), lse.copy()
        for index in zip(*np.nonzero(redo)):
            b, h, i = index
            out[index], lse[index] = _mp_row(qd[b, h, i], kd[b, h // group], vd[b, h // group],
                                             keep[b, h, i], scale)
        ref = AttentionReference(**{**ref.__dict__, "out": out, "lse": lse, "oracle": "float64+mpmath"})
    return replace(ref, oracle="mpmath") if oracle == "mpmath" else ref


def _mp_row(q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: np.ndarray, scale: float,
            prec: int = 200) -> tuple[np.ndarray, float]:
    """One query row at ``prec`` bits: its out (Dv,) and lse, rounded to float64."""
    with mpmath.workprec(prec):
        sc = mpmath.mpf(scale)
        # Each product of two float32 values is exact in float64, hence in mpmath.
        s = [sc * mpmath.fsum(mpmath.mpf(float(x)) for x in q * k[j]) for j in np.nonzero(keep)[0]]
        m = max(s)
        e = [mpmath.exp(x - m) for x in s]
        total = mpmath.fsum(e)
        rows = v[np.nonzero(keep)[0]]
        out = np.array([float(mpmath.fsum(w * mpmath.mpf(float(x)) for w, x in zip(e, rows[:, c])) / total)
                        for c in range(v.shape[1])])
        return out, float(m + mpmath.log(total))


def _float64_not_enough(ref: AttentionReference) -> np.ndarray:
    """Query rows where float64's own error could reach 1e-3 of the float32 bound: the bound with
    ``u = 2^-53`` and full-length reductions in place of ``u = 2^-24`` and the kernel's depths."""
    d, n = ref.head_dim, ref.keys
    with np.errstate(all="ignore"):
        delta = (d + 3) * U64 * ref.score_size
        eps = np.expm1(delta + np.log(np.sum(ref.p * np.exp(delta), axis=-1, keepdims=True)))
        eps = eps + U64 * (n + 10 + np.abs(np.nan_to_num(ref.scores - ref.row_max[..., None],
                                                          neginf=0.0)) + ref.spread[..., None])
        err64 = (ref.p * eps) @ ref.v_abs + (n + 2) * U64 * ref.abs_pv
        # The float32 bound's least terms: 3 u a_j for the score, u |s_j - m| for exp's argument,
        # u for the P.V sum.
        dist = np.abs(np.nan_to_num(ref.scores - ref.row_max[..., None], neginf=0.0))
        floor = U * ((ref.p * (1 + 3 * ref.score_size + dist)) @ ref.v_abs)
        worst = np.max(np.where(floor > 0, err64 / floor, 0.0), axis=-1)
    return ~ref.empty & (worst > 1e-3)


# --- the bound -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionTolerance:
    """Per-element bounds: ``out`` (B, Hq, Lq, Dv) and ``lse`` (B, Hq, Lq); NaN on empty rows."""

    out: np.ndarray
    lse: np.ndarray
    weights: np.ndarray | None = None  # eps_j, P's relative error (B, Hq, Lq, Lk), the backward's


#: The bound's terms, as :func:`attention_tolerance`'s ``drop`` names them (docs/tolerances.md, "Attention").
BOUND_TERMS = ("scores", "softmax", "p_rounding", "p_floor", "pv_sum", "online", "output", "tiny",
               "underflow", "flt_min", "lse_scores", "lse_rounding")


def attention_tolerance(ref: AttentionReference, *, dtype: str = "float32",
                        declaration: AttentionDeclaration = FOREIGN_ATTENTION,
                        drop: frozenset[str] = frozenset()) -> AttentionTolerance:
    """The bound of docs/tolerances.md, "Attention", for a kernel computing in float32 on inputs
    and outputs of storage type ``dtype``.

    Per kept key ``j`` of a query row: the score's absolute error ``delta_j = (k(D) + 3) u a_j``
    (``a_j = |scale| sum_d |q_d k_jd|``), which the exp turns into a relative error of the weight
    ``E_j = exp(delta_j + ln sum_i p_i exp(delta_i)) - 1``; the softmax's own relative error
    ``r_j = u (rho k(Lk) + 10 + c_x (|s_j - m| + W))`` (plus ``u_P`` where P is rounded before
    P.V); together ``eps_j = (1 + E_j)(1 + r_j) - 1``. Then

        tol_out[c] = sum_j p_j eps_j |v_jc| + k_PV u sum_j p_j (1 + eps_j) |v_jc|
                     + u_out |out_c| + (2 FLT_MIN + f_P) sum_j |v_jc| + tiny_out

    with ``k_PV = k(Lk) + 1``, or ``2 k(Lk) + 1`` for an online kernel (a rescaling multiplication
    at every step of the chain at worst), ``f_P`` half a subnormal step of P's type (2^-25, float16), and

        tol_lse = ln sum_j p_j exp(delta_j) + u (rho k(Lk) + 10 + c_x W + 3 |ln S| + 2 |lse|).

    ``drop``: terms of :data:`BOUND_TERMS` left out, for the tests that each is needed; never to judge.
    """
    if not isinstance(drop, frozenset) or not drop <= set(BOUND_TERMS):
        raise ValueError(f"drop must be a frozenset of {', '.join(BOUND_TERMS)} but was {drop!r}")
    on = {term: float(term not in drop) for term in BOUND_TERMS}
    kind, floor_p = get_dtype(dtype), on["p_floor"] * rounding_floor(declaration.p_dtype)  # 2^-25: float16
    model = declaration.model
    u = model.unit_roundoff
    k_d, k_l = model.k(ref.head_dim), model.k(ref.keys)
    kept = ref.p > 0
    with np.errstate(all="ignore"):
        delta = np.where(kept, (k_d + 3) * u * ref.score_size, 0.0)
        log_q = np.log(np.sum(ref.p * np.exp(delta), axis=-1))
        log_q = np.where(ref.empty, 0.0, log_q)
        big_e = on["scores"] * np.expm1(delta + log_q[..., None])
        dist = np.where(kept, np.abs(ref.scores - ref.row_max[..., None]), 0.0)
        r = on["softmax"] * u * (model.rho * k_l + 10 + model.c_x * (dist + ref.spread[..., None]))
        if declaration.p_dtype is not None:
            r = r + on["p_rounding"] * get_dtype(declaration.p_dtype).u
        eps = np.where(kept, (1 + big_e) * (1 + r) - 1, 0.0)
        k_pv = (on["online"] * 2 * k_l if declaration.online else k_l) + 1
        pe = np.nan_to_num(ref.p * eps, nan=np.inf)
        out_abs = np.abs(np.nan_to_num(ref.out, nan=0.0))
        tol_out = (pe @ ref.v_abs + on["pv_sum"] * k_pv * u * ((ref.p + pe) @ ref.v_abs)
                   + (on["underflow"] * 2 * FLT_MIN + floor_p) * ref.abs_v + on["flt_min"] * FLT_MIN)
        if dtype == "float32":
            tol_out = tol_out + on["output"] * u * out_abs
        else:
            tol_out = tol_out + on["output"] * kind.u * out_abs + on["tiny"] * kind.tiny
        log_s = np.where(ref.empty, 0.0, ref.lse - np.where(ref.empty, 0.0, ref.row_max))
        tol_lse = on["lse_scores"] * log_q + on["lse_rounding"] * u * (
            model.rho * k_l + 10 + model.c_x * ref.spread + 3 * np.abs(log_s)
            + 2 * np.abs(np.where(ref.empty, 0.0, ref.lse)))
    return AttentionTolerance(np.where(ref.empty[..., None], np.nan, tol_out),
                              np.where(ref.empty, np.nan, tol_lse), eps)


# --- the judge -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionVerdict:
    """The worst judged element and the contract's separate findings.

    ``ratio`` is the largest ``|got - exact| / tol`` over the judged elements of ``out`` and
    ``lse``; ``where`` names it (``"out[b, h, i, c]"`` or ``"lse[b, h, i]"``). ``nonfinite``: a
    non-finite output (or lse) where the exact one is finite; ``empty_mixture``: a query row with no
    kept key that is neither all zeros nor all NaN (or not what the kernel declared);
    ``empty_lse``: such a row's lse is not -inf. Each holds the first index found, or None.
    """

    ratio: float
    where: str | None
    got: float
    expected: float
    bound: float
    nonfinite: tuple[str, tuple[int, ...]] | None = None
    empty_mixture: tuple[int, ...] | None = None
    empty_lse: tuple[int, ...] | None = None

    @property
    def ok(self) -> bool:
        return (self.ratio <= 1.0 and self.nonfinite is None and self.empty_mixture is None
                and self.empty_lse is None)

    @property
    def reason(self) -> str:
        if self.nonfinite is not None:
            name, index = self.nonfinite
            return f"{name}[{', '.join(map(str, index))}] is not finite where the exact value is"
        if self.empty_mixture is not None:
            return (f"query row {list(self.empty_mixture)} has no kept key and its out is neither all "
                    f"zeros nor all NaN as declared")
        if self.empty_lse is not None:
            return f"query row {list(self.empty_lse)} has no kept key and its lse is not -inf"
        if self.ratio > 1.0:
            return (f"{self.where} = {self.got!r}, exact {self.expected!r}, error "
                    f"{abs(self.got - self.expected):.3g} over the bound {self.bound:.3g} "
                    f"(ratio {self.ratio:.3g})")
        return f"within the bound (worst ratio {self.ratio:.3g} at {self.where})"


def judge_attention(out: np.ndarray, lse: np.ndarray | None, ref: AttentionReference,
                    tol: AttentionTolerance, *, empty_row: str | None = None) -> AttentionVerdict:
    """Judge a kernel's ``out`` (and ``lse``, if it returns one) against ``ref`` under ``tol``."""
    if empty_row is not None and empty_row not in EMPTY_ROWS:
        raise ValueError(f"empty_row must be one of {EMPTY_ROWS} or None but was {empty_row!r}")
    got = np.asarray(out).astype(np.float64)
    if got.shape != ref.out.shape:
        raise ValueError(f"out must have shape {ref.out.shape} but had {got.shape}")
    full = ~ref.empty
    nonfinite = None
    bad = full[..., None] & ~np.isfinite(got)
    if bad.any():
        nonfinite = ("out", tuple(int(i) for i in np.argwhere(bad)[0]))
    # Empty rows: all zeros or all NaN, never a mixture, and what the kernel declared.
    zeros = np.all(got == 0, axis=-1)
    nans = np.all(np.isnan(got), axis=-1)
    allowed = {"zero": zeros, "nan": nans, None: zeros | nans}[empty_row]
    mixed = ref.empty & ~allowed
    empty_mixture = tuple(int(i) for i in np.argwhere(mixed)[0]) if mixed.any() else None
    with np.errstate(all="ignore"):
        ratio = np.where(full[..., None], np.abs(got - ref.out) / tol.out, 0.0)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    worst = ("out", i, float(ratio[i]), float(got[i]), float(ref.out[i]), float(tol.out[i]))
    empty_lse = None
    if lse is not None:
        gl = np.asarray(lse).astype(np.float64)
        if gl.shape != ref.lse.shape:
            raise ValueError(f"lse must have shape {ref.lse.shape} but had {gl.shape}")
        bad = full & ~np.isfinite(gl)
        if nonfinite is None and bad.any():
            nonfinite = ("lse", tuple(int(j) for j in np.argwhere(bad)[0]))
        wrong = ref.empty & ~np.isneginf(gl)
        empty_lse = tuple(int(j) for j in np.argwhere(wrong)[0]) if wrong.any() else None
        with np.errstate(all="ignore"):
            lr = np.where(full, np.abs(gl - ref.lse) / tol.lse, 0.0)
        lr = np.where(np.isnan(lr), np.inf, lr)
        j = np.unravel_index(int(np.argmax(lr)), lr.shape) if lr.size else ()
        if lr.size and lr[j] > worst[2]:
            worst = ("lse", j, float(lr[j]), float(gl[j]), float(ref.lse[j]), float(tol.lse[j]))
    name, index, r, g, x, t = worst
    where = f"{name}[{', '.join(str(int(n)) for n in index)}]" if full.any() else None
    return AttentionVerdict(r if full.any() else 0.0, where, g, x, t, nonfinite, empty_mixture,
                            empty_lse)


def check_attention(kernel: Callable[..., Any], case: AttentionCase, *,
                    declaration: AttentionDeclaration = FOREIGN_ATTENTION,
                    oracle: str = "float64") -> AttentionVerdict:
    """Run ``kernel`` on ``case`` and judge what it returns (``out`` or ``(out, lse)``)."""
    result = kernel(*case.inputs())
    out, lse = result if isinstance(result, tuple) else (result, None)
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale, oracle=oracle)
    tol = attention_tolerance(ref, dtype=case.dtype, declaration=declaration)
    return judge_attention(np.asarray(out), None if lse is None else np.asarray(lse), ref, tol,
                           empty_row=declaration.empty_row)
