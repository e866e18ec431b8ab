"""Cross-entropy's mathematics, ``fn(logits, target, ignore_index, label_smoothing) -> loss`` and
``fn(dloss, logits, target, ignore_index, label_smoothing) -> dlogits``: the case, what a kernel
declares, the exact reference and the error bound (docs/tolerances.md, "Cross-entropy");
:mod:`normprops.ops.cross_entropy` registers the ops, :mod:`normprops.ops.cross_entropy_families`
draws their cases.

The contract (PyTorch's ``F.cross_entropy(logits.float(), target, ignore_index=...,
label_smoothing=..., reduction=...)``). ``logits`` is (N, V) in the storage type, ``target`` int64
(N,); a row whose target equals ``ignore_index`` is ignored (loss 0, gradient 0). Per row, with
``x`` the logits (``c tanh(x / c)`` for a kernel that declares a softcap ``c``, Gemma 2) and
``lse = ln sum_j exp(x_j)``::

    loss = (1 - eps) (lse - x_t) + eps (lse - mean_j x_j) + z lse^2

(``eps`` the label smoothing, ``z`` a declared z-loss coefficient). ``loss`` is float32: (N,) for
``reduction="none"``, a 0-d array for ``sum`` and ``mean`` (the mean over the rows not ignored).
The gradient's ``dloss`` is float32 of the loss's shape; ``dlogits`` is (N, V) in the storage type::

    dlogits_j = g (p_j - (1 - eps) [j = t] - eps / V + 2 z lse p_j) c'_j

with ``p = softmax(x)``, ``g`` the row's dloss (``dloss / n`` for a mean over ``n`` rows) and
``c'_j = 1 - tanh^2(x_j / c)`` under a softcap (1 without).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import mpmath
import numpy as np

from normprops.dtypes import check_representable, get_dtype, numpy_dtype
from normprops.errormodel import ErrorModel
from normprops.errors import UsageError
from normprops.flags import spelled

__all__ = ["LOSS_REDUCTIONS", "FOREIGN_CROSS_ENTROPY", "CrossEntropyCase", "CrossEntropyDeclaration",
           "LossScalars", "CrossEntropyReference", "cross_entropy_reference", "loss_tolerance",
           "grad_tolerance", "exact_loss_rows", "exact_grad_rows"]

F32 = np.float32
U = 2.0**-24
FLT_MIN = 2.0**-126
#: How the per-row losses are combined, as PyTorch's ``reduction``.
LOSS_REDUCTIONS = ("none", "mean", "sum")
#: The error of ``c tanh(x / c)`` in float32, in units of ``u |c tanh(x / c)|``: tanhf's (about 2
#: ulp), the division and the multiplication.
_CAP_ROUNDINGS = 4.0


# --- the case ----------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False, kw_only=True)
class LossScalars:
    """What a loss case holds beside its arrays of the storage type and its ``target`` (the
    subclasses' positional fields): the scalars handed over (``ignore_index``, ``label_smoothing``),
    what the kernel declared to compute on top (``softcap``, ``z_loss``, ``reduction``: recorded
    with the case so that it is judged the same when replayed), the gradient's float32 ``dloss``
    (None for the loss itself), the storage type, the family and the drawn parameters. Keyword-only,
    so that a subclass's arrays come first in its constructor."""

    ignore_index: int = -100
    label_smoothing: float = 0.0
    softcap: float | None = None
    z_loss: float = 0.0
    reduction: str = "none"
    dloss: np.ndarray | None = None
    dtype: str = "float32"
    family: str = "explicit"
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def mask_fill(self) -> None:
        return None

    @property
    def valid(self) -> np.ndarray:
        """The rows not ignored."""
        return self.target != self.ignore_index  # type: ignore[attr-defined]  # the subclass's


@dataclass(frozen=True, repr=False)
class CrossEntropyCase(LossScalars):
    """One call: float32 ``logits`` exact in ``dtype``, int64 ``target``, and the loss's scalars
    (:class:`LossScalars`)."""

    logits: np.ndarray
    target: np.ndarray

    def __post_init__(self) -> None:
        x, t = self.logits, self.target
        get_dtype(self.dtype)
        if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
            raise ValueError(f"logits must be 2-d (N, V) with N, V >= 1 but had shape {x.shape}")
        if t.shape != (x.shape[0],) or not np.issubdtype(t.dtype, np.integer):
            raise ValueError(f"target must be an integer array of shape ({x.shape[0]},) but was "
                             f"{t.dtype} {t.shape}")
        valid = t != self.ignore_index
        if np.any(valid & ((t < 0) | (t >= x.shape[1]))):
            bad = int(t[valid & ((t < 0) | (t >= x.shape[1]))][0])
            raise ValueError(f"target {bad} is outside [0, {x.shape[1]}) and is not ignore_index "
                             f"{self.ignore_index}")
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1] but was {self.label_smoothing!r}")
        if self.softcap is not None and not self.softcap > 0:
            raise ValueError(f"softcap must be positive or None but was {self.softcap!r}")
        if self.reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"reduction must be one of {LOSS_REDUCTIONS} but was {self.reduction!r}")
        if self.dloss is not None:
            want = (x.shape[0],) if self.reduction == "none" else ()
            if self.dloss.shape != want or self.dloss.dtype != F32:
                raise ValueError(f"dloss must be float32 of shape {want} but was {self.dloss.dtype} "
                                 f"{self.dloss.shape}")
        check_representable(x, self.dtype, name="logits")

    @property
    def op(self) -> str:
        return "cross_entropy" if self.dloss is None else "cross_entropy_backward"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.logits.shape)

    def args(self) -> tuple[Any, ...]:
        head = () if self.dloss is None else (self.dloss,)
        return (*head, self.logits, self.target, self.ignore_index, self.label_smoothing)

    def fields(self) -> dict[str, Any]:
        found: dict[str, Any] = {"logits": self.logits, "target": self.target.astype(F32),
                                 "ignore_index": int(self.ignore_index),
                                 "label_smoothing": float(self.label_smoothing)}
        if self.dloss is not None:
            found["dloss"] = self.dloss
        return found

    def float_arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays of the storage type (dloss is float32 whatever it is)."""
        return (self.logits,)

    def replace(self, **changes: Any) -> CrossEntropyCase:
        return replace(self, **changes)

    def rows(self, index: np.ndarray) -> CrossEntropyCase:
        """The case made of the rows ``index``: the same per-row outputs there."""
        dloss = self.dloss if self.dloss is None or self.reduction != "none" else self.dloss[index]
        return replace(self, logits=np.ascontiguousarray(self.logits[index]),
                       target=np.ascontiguousarray(self.target[index]), dloss=dloss)

    def inputs(self) -> tuple[Any, ...]:
        """The kernel's arguments with logits in the storage type's numpy dtype."""
        logits = self.logits.astype(numpy_dtype(self.dtype))
        head = () if self.dloss is None else (self.dloss.copy(),)
        return (*head, logits, self.target.copy(), self.ignore_index, self.label_smoothing)

    def __repr__(self) -> str:
        n, v = self.logits.shape
        extra = "".join(f", {k}={val!r}" for k, val in (("softcap", self.softcap), ("z_loss", self.z_loss))
                        if val)
        shown = ", ".join(f"{key}={value!r}" for key, value in self.params.items())
        return (f"CrossEntropyCase({self.family}: N={n}, V={v}, {self.dtype}, ignore_index="
                f"{self.ignore_index}, label_smoothing={self.label_smoothing!r}, reduction="
                f"{self.reduction}{extra}{', ' if shown else ''}{shown})")


# --- what a kernel declares --------------------------------------------------------------------


@dataclass(frozen=True)
class CrossEntropyDeclaration:
    """What a kernel computes beyond PyTorch's plain loss, and the shape of its arithmetic.

    ``model``: the depth ``k(V)`` of its row sums and the softmax constants ``rho`` and ``c_x``
    (:class:`normprops.errormodel.ErrorModel`). ``softcap``: logits pass through ``c tanh(x / c)``
    first (None: no cap). ``z_loss``: the coefficient of ``lse^2`` added to each row's loss.
    ``reduction``: none, mean or sum (what ``loss`` is, and what ``dloss`` is the gradient of).
    ``smoothing``: it takes a label smoothing other than 0 (False: the hunt draws 0 only).
    ``vocab_multiple_of``: the vocabularies it takes are multiples of this (QuACK's bfloat16 loss
    copies a row in 4-byte pieces: even ones); a drawn vocabulary is raised to the next multiple,
    so the families' edges stay next to where they were (50257 is hunted as 50258).
    """

    model: ErrorModel = field(default_factory=lambda: ErrorModel(threads=1, rho=6.0, c_x=3.5))
    softcap: float | None = None
    z_loss: float = 0.0
    reduction: str = "none"
    smoothing: bool = True
    vocab_multiple_of: int = 1

    def __post_init__(self) -> None:
        if type(self.vocab_multiple_of) is not int or self.vocab_multiple_of < 1:
            raise ValueError(f"vocab_multiple_of must be a positive int but was {self.vocab_multiple_of!r}")
        if self.softcap is not None and not (isinstance(self.softcap, float) and self.softcap > 0
                                             and math.isfinite(self.softcap)):
            raise ValueError(f"softcap must be a positive finite float or None but was {self.softcap!r}")
        if not (isinstance(self.z_loss, float) and 0 <= self.z_loss < 1):
            raise ValueError(f"z_loss must be a float in [0, 1) but was {self.z_loss!r}")
        if self.reduction not in LOSS_REDUCTIONS:
            raise ValueError(f"reduction must be one of {LOSS_REDUCTIONS} but was {self.reduction!r}")

    @classmethod
    def declare(cls, model: ErrorModel, *, dtype: str, softcap: object = None, z_loss: object = None,
                loss_reduction: object = None, smoothing: object = None) -> CrossEntropyDeclaration:
        """A user's declaration from keywords (None: the default), each checked: UsageError naming
        the argument, its value and the fix."""
        get_dtype(dtype)

        def number(name: str, value: object, low: float, high: float) -> float | None:
            if value is None:
                return None
            try:
                got = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                got = math.nan
            if not (low <= got < high):
                raise UsageError(f"{spelled(name)} must be a number in [{low:g}, {high:g}) but was "
                                 f"{value!r}")
            return got

        cap = number("softcap", softcap, 0.0, math.inf)
        if cap == 0.0:
            raise UsageError(f"{spelled('softcap')} must be positive (the c of c tanh(x / c), 30 in "
                             f"Gemma 2) but was {softcap!r}; leave it out for no cap")
        z = number("z_loss", z_loss, 0.0, 1.0)
        if loss_reduction is not None and loss_reduction not in LOSS_REDUCTIONS:
            raise UsageError(f"{spelled('loss_reduction')} must be one of {', '.join(LOSS_REDUCTIONS)} "
                             f"but was {loss_reduction!r}: what the loss is (reduction= of PyTorch)")
        if smoothing not in (None, True, False):
            raise UsageError(f"{spelled('smoothing')} must be True or False but was {smoothing!r}: "
                             f"whether the kernel takes a label smoothing other than 0")
        return cls(model, softcap=cap, z_loss=0.0 if z is None else z,
                   reduction="none" if loss_reduction is None else str(loss_reduction),
                   smoothing=True if smoothing is None else bool(smoothing))

    def to_json(self) -> dict[str, Any]:
        return {"softcap": self.softcap, "z_loss": self.z_loss, "loss_reduction": self.reduction,
                "smoothing": self.smoothing, "threads": self.model.threads}

    @classmethod
    def from_json(cls, doc: Any, model: ErrorModel) -> CrossEntropyDeclaration:
        doc = doc if isinstance(doc, dict) else {}
        if isinstance(doc.get("threads"), int):
            model = replace(model, threads=doc["threads"])
        cap = doc.get("softcap")
        return cls(model, softcap=None if cap is None else float(cap), z_loss=float(doc.get("z_loss") or 0.0),
                   reduction=doc.get("loss_reduction", "none"), smoothing=bool(doc.get("smoothing", True)))

    def flag_pairs(self) -> list[tuple[str, object]]:
        """The fields that differ from a user kernel's default, as (field, value) for a command."""
        return [("softcap", self.softcap), ("z_loss", self.z_loss or None),
                ("loss_reduction", None if self.reduction == "none" else self.reduction),
                ("smoothing", None if self.smoothing else "no")]


#: A kernel we did not write: every row sum as deep as a plain loop, fast-math exp.
FOREIGN_CROSS_ENTROPY = CrossEntropyDeclaration(ErrorModel(threads=1, rho=6.0, c_x=3.5))


# --- the exact reference -----------------------------------------------------------------------


@dataclass(frozen=True)
class CrossEntropyReference:
    """The exact loss and gradient factors of a case, and the row quantities the bounds read.

    Per row (N,): ``row_loss`` (0 on ignored rows), ``lse``, ``log_s`` (``ln sum exp(x - m)``),
    ``row_max`` m, ``spread`` W (``sum p |x - m|``), ``nll`` (``lse - x_t``), ``smooth``
    (``lse - mean x``), ``mean_abs`` (``mean |x|``), ``cap_err`` (``sum p eta``, the capped logits'
    error, 0 without a cap); per element (N, V): ``x`` (the capped logits), ``p``, ``d`` (the
    gradient before ``g`` and the cap's derivative), ``cap_d`` (``c'``). ``loss`` is the output:
    ``row_loss`` or its sum or mean (NaN for a mean over no row)."""

    loss: np.ndarray
    row_loss: np.ndarray
    lse: np.ndarray
    log_s: np.ndarray
    row_max: np.ndarray
    spread: np.ndarray
    nll: np.ndarray
    smooth: np.ndarray
    mean_abs: np.ndarray
    cap_err: np.ndarray
    x: np.ndarray
    p: np.ndarray
    d: np.ndarray
    cap_d: np.ndarray
    valid: np.ndarray
    dlogits: np.ndarray | None
    scale: np.ndarray  # per row, the g multiplying d (0 on ignored rows)
    oracle: str = "float64"
    # The logits' own error per element (N, V), carried through the cap's derivative: a fused
    # kernel's logits come out of a matmul (linear_cross_entropy). None: the logits are inputs.
    eta_in: np.ndarray | None = None


def _capped(x: np.ndarray, softcap: float | None) -> tuple[np.ndarray, np.ndarray]:
    if softcap is None:  # c' = 1 everywhere: one value read as the (N, V) array, never written
        return x, np.broadcast_to(np.float64(1.0), x.shape)
    t = np.tanh(x / softcap)
    return softcap * t, (1.0 - t) * (1.0 + t)  # 1 - t^2 without cancelling where |t| ~ 1


def _row_scale(case: CrossEntropyCase, valid: np.ndarray) -> np.ndarray:
    """g per row: dloss (none), or the one dloss (sum) or dloss / n (mean); 0 on ignored rows."""
    if case.dloss is None:
        return np.where(valid, 1.0, 0.0)
    g = case.dloss.astype(np.float64)
    if case.reduction == "mean":
        n = int(valid.sum())
        g = g / n if n else np.float64(np.nan)
    return np.where(valid, np.broadcast_to(g, valid.shape), 0.0)


def cross_entropy_reference(case: CrossEntropyCase, *, oracle: str = "float64",
                            logits: np.ndarray | None = None, logit_err: np.ndarray | None = None,
                            exact_logits: Callable[[int], list[Any]] | None = None
                            ) -> CrossEntropyReference:
    """The exact loss (and, for a gradient case, dlogits) of ``case``, vectorised in float64.

    ``logits`` (float64, (N, V)) replaces ``case.logits`` where the logits are not the kernel's
    input but a product it forms (linear_cross_entropy), ``logit_err`` bounds the kernel's error
    on each of them, and ``exact_logits(r)`` gives row ``r``'s at the working precision for
    ``oracle="mpmath"``.

    Every quantity is formed from non-negative terms, so float64 is enough (docs/tolerances.md,
    "Cross-entropy"): ``lse - x_t = (m - x_t) + ln S`` and ``lse - mean x = mean(m - x) + ln S``
    with ``m - x_j`` exact, and ``ln S = log1p(T)`` with ``T`` the sum over the row but its first
    maximum (S - 1 without the cancellation). The target column's ``p_t - 1 = -(S - e_t) / S``
    is formed from the sum of the other columns. ``oracle="mpmath"`` recomputes each valid row at
    200 bits."""
    x, cap_d = _capped(case.logits.astype(np.float64) if logits is None else logits, case.softcap)
    n, v = x.shape
    valid = case.valid
    rows = np.arange(n)
    t = np.where(valid, case.target, 0).astype(np.int64)
    eps, z = float(case.label_smoothing), float(case.z_loss)
    first = np.argmax(x, axis=1)
    m = x[rows, first]
    gap = m[:, None] - x  # exact: both are float32 values (or float64 tanh values, rounded once)
    e = np.exp(-gap)
    # Positive terms, so a plain float64 sum is enough: even summed one after another its relative
    # error is at most (V - 1) u64 (u64 = 2^-53; 2.8e-11 at V = 256001), with exp's own 1 ulp on
    # each term, where the smallest bound on a float32 kernel is u (rho + k(V)) >= 6 * 2^-24 = 3.6e-7
    # relative: four orders of magnitude below it before numpy's pairwise summation (log2 V
    # levels, 18 at that V) shrinks it further. No compensated or exact sum is needed.
    total = e.sum(axis=1)
    others = total - 1.0
    small = others < 0.5  # T = S - 1 formed directly where S - 1 would cancel
    if small.any():
        e_rest = e[small].copy()
        e_rest[np.arange(e_rest.shape[0]), first[small]] = 0.0
        others[small] = e_rest.sum(axis=1)
    log_s = np.log1p(others)
    lse = m + log_s
    p = e / total[:, None]
    nll = gap[rows, t] + log_s
    smooth = gap.mean(axis=1) + log_s
    row_loss = np.where(valid, (1 - eps) * nll + eps * smooth + z * lse * lse, 0.0)
    spread = (p * gap).sum(axis=1)
    mean_abs = np.abs(x).mean(axis=1)
    # Without a cap eta is 0 and so is its p-weighted sum; without a z-loss p's factor is 1, and
    # without smoothing nothing is subtracted: each skipped operation would return its operand
    # bit for bit, at the cost of a pass over N x V float64s.
    eta_in = None if logit_err is None else cap_d * logit_err  # |c'| <= 1: the cap shrinks it
    if case.softcap is not None or eta_in is not None:
        eta = _CAP_ROUNDINGS * U * np.abs(x) if case.softcap is not None else 0.0
        cap_err = (p * (eta if eta_in is None else eta + eta_in)).sum(axis=1)
    else:
        cap_err = np.zeros(n)
    if eta_in is not None:
        # lse(x + delta) - lse(x) = p.delta + (1/2) Var_p'(delta) at some p' on the way: the
        # second-order term is at most (1/2) max |delta|^2, which logits' errors near 1 reach.
        cap_err = cap_err + 0.5 * eta_in.max(axis=1) ** 2
    d = p * (1 + 2 * z * lse[:, None]) if z else p.copy()
    if eps:
        d -= eps / v
    # The target column: p_t - (1 - eps) = eps - (S - e_t) / S, with S - e_t the sum of the other
    # columns (no cancellation where p_t ~ 1): e_t set to 0 for the sum, then put back.
    e_t = e[rows, t]
    e[rows, t] = 0.0
    not_t = e.sum(axis=1)
    e[rows, t] = e_t
    d[rows, t] = (eps - not_t / total) + 2 * z * lse * p[rows, t] - eps / v
    if oracle == "mpmath":
        exact = exact_loss_rows(case, np.nonzero(valid)[0], exact_logits=exact_logits)
        row_loss = row_loss.copy()
        for r, value in exact.items():
            row_loss[r] = value
    loss = _reduced(row_loss, valid, case.reduction)
    scale = _row_scale(case, valid) if case.dloss is not None else np.where(valid, 1.0, 0.0)
    dlogits = None
    if case.dloss is not None:
        dlogits = scale[:, None] * d
        if case.softcap is not None:
            dlogits *= cap_d
        if oracle == "mpmath":
            for r, row in exact_grad_rows(case, np.nonzero(valid)[0], exact_logits=exact_logits).items():
                dlogits[r] = row
        if not valid.all():
            dlogits = np.where(valid[:, None], dlogits, 0.0)
    return CrossEntropyReference(loss, row_loss, lse, log_s, m, spread, nll, smooth, mean_abs, cap_err,
                                 x, p, d, cap_d, valid, dlogits, scale,
                                 "mpmath" if oracle == "mpmath" else "float64", eta_in)


def _reduced(row_loss: np.ndarray, valid: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        return row_loss
    total = math.fsum(row_loss.tolist())
    if reduction == "sum":
        return np.array(total)
    count = int(valid.sum())
    return np.array(total / count if count else math.nan)


def _mp_row(case: CrossEntropyCase, r: int,
            exact_logits: Callable[[int], list[Any]] | None = None) -> tuple[Any, list[Any]]:
    """Row ``r``'s loss and the gradient factors ``d_j c'_j`` at the working precision (its logits
    ``exact_logits(r)`` where given, else the case's)."""
    c = None if case.softcap is None else mpmath.mpf(case.softcap)
    raw = ([mpmath.mpf(float(a)) for a in case.logits[r]] if exact_logits is None
           else list(exact_logits(r)))
    x = raw if c is None else [c * mpmath.tanh(a / c) for a in raw]
    v = len(x)
    m = max(x)
    e = [mpmath.exp(a - m) for a in x]
    total = mpmath.fsum(e)
    lse = m + mpmath.log(total)
    t = int(case.target[r])
    eps, z = mpmath.mpf(case.label_smoothing), mpmath.mpf(case.z_loss)
    loss = (1 - eps) * (lse - x[t]) + eps * (lse - mpmath.fsum(x) / v) + z * lse * lse
    grads = []
    for j in range(v):
        pj = e[j] / total
        dj = pj * (1 + 2 * z * lse) - eps / v - ((1 - eps) if j == t else 0)
        grads.append(dj if c is None else dj * (1 - mpmath.tanh(raw[j] / c) ** 2))
    return loss, grads


def exact_loss_rows(case: CrossEntropyCase, rows: np.ndarray, prec: int = 200, *,
                    exact_logits: Callable[[int], list[Any]] | None = None) -> dict[int, float]:
    """The per-row loss of the rows ``rows`` at ``prec`` bits, rounded to float64."""
    with mpmath.workprec(prec):
        return {int(r): float(_mp_row(case, int(r), exact_logits)[0]) for r in rows}


def exact_grad_rows(case: CrossEntropyCase, rows: np.ndarray, prec: int = 200, *,
                    exact_logits: Callable[[int], list[Any]] | None = None) -> dict[int, np.ndarray]:
    """dlogits of the rows ``rows`` at ``prec`` bits, rounded to float64."""
    scale = _row_scale(case, case.valid)
    with mpmath.workprec(prec):
        return {int(r): np.array([float(scale[r] * g) for g in _mp_row(case, int(r), exact_logits)[1]])
                for r in rows}


# --- the bounds ----------------------------------------------------------------------------------


def _lse_error(ref: CrossEntropyReference, model: ErrorModel, cols: int) -> np.ndarray:
    """The absolute error of a float32 kernel's lse per row: the exp arguments' roundings weighted
    by p (``c_x W``), exp's own (``rho``), the sum's (``k(V)``), the log's and the addition of m
    (``|ln S| + |lse|``), and the capped logits' (``cap_err``)."""
    u = model.unit_roundoff
    return (u * (model.rho + model.k(cols) + model.c_x * ref.spread + np.abs(ref.log_s) + np.abs(ref.lse) + 2)
            + ref.cap_err)


def loss_tolerance(ref: CrossEntropyReference, case: CrossEntropyCase, *,
                   declaration: CrossEntropyDeclaration = FOREIGN_CROSS_ENTROPY) -> np.ndarray:
    """The bound on the loss (docs/tolerances.md, "Cross-entropy"), of the loss's shape.

    Per valid row, with ``d_lse`` from :func:`_lse_error`::

        nll:    d_lse + eta_t + u |lse - x_t|
        smooth: d_lse + (k(V) + 1) u mean|x| + mean eta + u |lse - mean x|
        tol = (1 - eps) nll + eps smooth + z (2 |lse| d_lse + 2 u lse^2) + 3 u |loss| + FLT_MIN

    and the least subnormal on ignored rows (the loss must be 0 there). A sum adds ``k(N) u sum |loss_r|``,
    a mean divides by n and adds ``u |mean|``."""
    model = declaration.model
    u = model.unit_roundoff
    n, v = case.logits.shape
    rows = np.arange(n)
    t = np.where(ref.valid, case.target, 0)
    d_lse = _lse_error(ref, model, v)
    cap = case.softcap is not None
    eta_t = _CAP_ROUNDINGS * u * np.abs(ref.x[rows, t]) if cap else 0.0
    eta_mean = _CAP_ROUNDINGS * u * ref.mean_abs if cap else 0.0
    if ref.eta_in is not None:  # the logits' own error (a matmul's) at the target and on average
        eta_t = eta_t + ref.eta_in[rows, t]
        eta_mean = eta_mean + ref.eta_in.mean(axis=1)
    eps, z = float(case.label_smoothing), float(case.z_loss)
    nll = d_lse + eta_t + u * np.abs(ref.nll)
    smooth = d_lse + (model.k(v) + 1) * u * ref.mean_abs + eta_mean + u * np.abs(ref.smooth)
    tol = ((1 - eps) * nll + eps * smooth + z * (2 * np.abs(ref.lse) * d_lse + 2 * u * ref.lse ** 2)
           + 3 * u * np.abs(ref.row_loss) + FLT_MIN)
    # An ignored row's loss is exactly 0: the least subnormal of room, so that 0 passes.
    tol = np.where(ref.valid, tol, 2.0**-149)
    if case.reduction == "none":
        return tol
    total = float(tol.sum()) + model.k(n) * u * float(np.abs(ref.row_loss).sum()) + FLT_MIN
    if case.reduction == "sum":
        return np.array(total)
    count = int(ref.valid.sum())
    return np.array(total / count + u * abs(float(ref.loss)) if count else math.nan)


def grad_tolerance(ref: CrossEntropyReference, case: CrossEntropyCase, *,
                   declaration: CrossEntropyDeclaration = FOREIGN_CROSS_ENTROPY) -> np.ndarray:
    """The bound on dlogits (docs/tolerances.md, "Cross-entropy"), (N, V)::

        r_j = u (rho + k(V) + c_x (|x_j - m| + W) + 2) + eta_j + sum p eta
        tol_j = |g| c'_j (r_j p_j (1 + 2 z |lse|) + 2 z p_j d_lse + u |d_j| + u eps / V)
                + |g d_j| u (3 + 2 (CAP + 1) t_j^2) [softcap] + (2 u + u_s) |dlogits_j|
                + |g| c'_j tiny_a + tiny

    where ``u_s`` is the storage type's unit roundoff (bfloat16 dlogits: half an ulp of bfloat16
    on each element; 0 for float32), ``tiny_a`` what p_j loses below FLT_MIN (the arithmetic's
    least subnormal, FLT_MIN for a flushing kernel) and ``tiny`` the storage type's smallest
    subnormal plus FLT_MIN of float32 underflow. On ignored rows the least subnormal (the gradient
    must be 0 there)."""
    model = declaration.model
    u = model.unit_roundoff
    n, v = case.logits.shape
    kind = get_dtype(case.dtype)
    u_s = 0.0 if case.dtype == "float32" else kind.u
    cap = case.softcap is not None
    # Evaluated in place, in the order the formula reads: a term that is 0 (no cap: eta and sum p
    # eta; no logits' error of their own; no z-loss; no smoothing) or a factor that is 1 (no cap:
    # c'; no z-loss) is skipped rather than applied over N x V float64s. The z-loss terms are kept
    # whenever d_lse is not finite, where 0 times it is NaN.
    z, eps = float(case.z_loss), float(case.label_smoothing)
    d_lse = _lse_error(ref, model, v)
    g = np.abs(ref.scale)[:, None]
    r = ref.row_max[:, None] - ref.x  # the gap x_j - m, then r_j
    r += ref.spread[:, None]
    r *= model.c_x
    r += model.rho + model.k(v)
    r += 2
    r *= u
    if cap:
        r += _CAP_ROUNDINGS * u * np.abs(ref.x)
    if ref.eta_in is not None:  # the logits' own error: p_j's relative error grows by it
        r += ref.eta_in
    if cap or ref.eta_in is not None:
        r += ref.cap_err[:, None]
    if ref.eta_in is None:
        inner = r
        inner *= ref.p
    else:
        # p_j's relative error is r_j to first order; exactly, p^_j / p_j = exp(delta_j - dlse), so
        # where the logits carry an error of their own (which may reach 1) expm1(r_j), and
        # |p^_j - p_j| <= 1 whatever it is.
        with np.errstate(over="ignore"):
            inner = np.minimum(np.expm1(r) * ref.p, 1.0)
    if z or not np.isfinite(d_lse).all():
        inner *= 1 + 2 * z * np.abs(ref.lse)[:, None]
        inner += 2 * z * ref.p * d_lse[:, None]
    inner += u * np.abs(ref.d)
    if eps:
        inner += u * eps / v
    if cap:
        tol = g * ref.cap_d * inner
        t2 = 1.0 - ref.cap_d
        tol += g * np.abs(ref.d) * u * (3 + 2 * (_CAP_ROUNDINGS + 1) * t2)
    else:
        tol = inner
        tol *= g
    grad = np.abs(ref.dlogits) if ref.dlogits is not None else g * np.abs(ref.d) * ref.cap_d
    # p_j below FLT_MIN loses up to the arithmetic's least subnormal (all of FLT_MIN where the
    # kernel flushes), which g then scales.
    lost = FLT_MIN if model.ftz else model.smallest_subnormal
    grad *= 2 * u + u_s
    tol += grad
    tol += g * ref.cap_d * lost if cap else g * lost
    tol += kind.tiny
    tol += FLT_MIN
    # An ignored row's gradient is exactly 0: the least subnormal of room, so that 0 passes.
    return tol if ref.valid.all() else np.where(ref.valid[:, None], tol, kind.tiny)
