"""The fused loss's gradient ``linear_cross_entropy_backward``, ``fn(dloss, h, w, target,
ignore_index, label_smoothing) -> (dh, dw)``: with ``D`` cross-entropy's dlogits of the logits
``h @ w^T`` (:mod:`normprops.ops.linear_cross_entropy`), ``dh = D @ w`` (N, H) and ``dw = D^T @ h``
(V, H), both in the storage type. ``dw`` sums over the rows: the kernel declares how
(``row_reduction``, as the norms' gradients declare dgamma's; a plain loop's depth by default).

The reference is cross-entropy's dlogits on the float64 logits, multiplied out in float64; the
bound is cross-entropy's dlogits bound (the matmul's error on the logits included, and the
storage type's rounding of dlogits, which a fused kernel hands its second and third matmuls in
that type) carried through the two matmuls (docs/tolerances.md, "Cross-entropy", "Fused with the
classifier"). Properties judged: as the loss's, with ``batch_invariance`` left out (dw sums the
batch; dh is its rows' alone only for a per-row loss, and the fused kernels recompute per chunk).
"""

from __future__ import annotations

import numpy as np

from normprops.dtypes import get_dtype
from normprops.ops.common import row_depth, tiny
from normprops.ops.cross_entropy_math import CrossEntropyDeclaration, grad_tolerance
from normprops.ops.linear_cross_entropy import named
from normprops.ops.linear_cross_entropy_math import (
    FAMILIES,
    FOREIGN_LINEAR_CROSS_ENTROPY,
    LinearCrossEntropyCase,
    judged_as,
    linear_declaration,
    linear_reference,
)
from normprops.ops.spec import NamedExact, OpSpec

__all__ = ["LINEAR_CROSS_ENTROPY_BACKWARD", "linear_grad_exact"]

#: The gradient's properties: the loss's but batch invariance (dw sums the batch).
_PROPERTIES = frozenset({"contract", "finite", "accuracy", "determinism"})


def _outputs(case: LinearCrossEntropyCase, declaration: CrossEntropyDeclaration,
             returned: int) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    if returned != 2:
        raise ValueError(f"returned {returned} arrays; linear_cross_entropy_backward returns (dh, dw)")
    return (("dh", tuple(case.h.shape), case.dtype), ("dw", tuple(case.w.shape), case.dtype))


def _times(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``a @ w`` for a short wide ``a`` (N, V) and a tall ``w`` (V, H), as ``(w^T @ a^T)^T``: the
    BLAS path numpy picks for the first form is a hundred times slower at V = 256000."""
    return (w.T @ a.T).T


def linear_grad_exact(case: LinearCrossEntropyCase, declaration: CrossEntropyDeclaration,
                      oracle: str = "float64") -> NamedExact:
    """dh and dw exactly, with their bounds (docs/tolerances.md, "Fused with the classifier")::

        T = cross-entropy's dlogits bound (logits' error included) + u_s |D| + tiny_s
        dh:  T @ |w| + (k(V) + 1) u (|D| + T) @ |w| + V tiny_a     then + u_s (|dh| + that) + tiny_s
        dw:  T^T @ |h| + (k_rows(N) + 1) u (|D| + T)^T @ |h| + N tiny_a, likewise rounded

    ``k(V)`` the declared depth of the kernel's sums over the vocabulary, ``k_rows(N)`` that of
    its sum over the rows (``row_reduction``), ``u_s`` the storage type's unit roundoff (0 for
    float32), ``tiny_a`` what a product below FLT_MIN loses."""
    case = judged_as(case, declaration)
    declared = linear_declaration(declaration)
    model = declared.model
    u = model.unit_roundoff
    ce, ref = linear_reference(case, declaration=declared, oracle=oracle)
    kind = get_dtype(case.dtype)
    u_s = 0.0 if case.dtype == "float32" else kind.u
    d = ref.dlogits
    dlogits_tol = grad_tolerance(ref, ce, declaration=declared) + u_s * np.abs(d) + kind.tiny
    h = case.h.astype(np.float64)
    w = case.w.astype(np.float64)
    n, v, _ = case.shape
    lost = tiny(model)
    wide = np.abs(d) + dlogits_tol
    dh = _times(d, w)
    dw = d.T @ h
    # T @ |w| + c (|D| + T) @ |w| in one product (c a scalar); likewise for dw.
    dh_tol = _times(dlogits_tol + (model.k(v) + 1) * u * wide, np.abs(w)) + v * lost
    k_rows = row_depth(model, n, model.row_reduction)
    dw_tol = (dlogits_tol + (k_rows + 1) * u * wide).T @ np.abs(h) + n * lost
    dh_tol = dh_tol + u_s * (np.abs(dh) + dh_tol) + kind.tiny + lost
    dw_tol = dw_tol + u_s * (np.abs(dw) + dw_tol) + kind.tiny + lost
    exact = {"dh": dh, "dw": dw}
    tols = {"dh": dh_tol, "dw": dw_tol}
    judged = {name: np.isfinite(exact[name]) & np.isfinite(tols[name]) for name in exact}
    shown = {name: np.where(judged[name], tols[name], np.nan) for name in exact}
    return NamedExact(exact, shown, judged, ref)


LINEAR_CROSS_ENTROPY_BACKWARD = OpSpec(
    "linear_cross_entropy_backward", ("dloss", "h", "w", "target", "ignore_index", "label_smoothing"),
    None,
    "the gradient of linear_cross_entropy: with D = dloss (float32, the loss's shape) times "
    "softmax(h @ w^T) - onehot (smoothed) per row, 0 on ignored rows, dh = D @ w (N, H) and "
    "dw = D^T @ h (V, H, summed over the rows), both in the storage type",
    forward="linear_cross_entropy", outputs=("dh", "dw"), returns="(dh, dw)", families=FAMILIES,
    properties=_PROPERTIES,
    reference=lambda case, oracle="float64": linear_grad_exact(case, FOREIGN_LINEAR_CROSS_ENTROPY, oracle),
    bound=lambda case, ref, declaration=FOREIGN_LINEAR_CROSS_ENTROPY: linear_grad_exact(
        case, declaration).tol,
    named=named(True, outputs=_outputs, exact=linear_grad_exact),
    # No gate_examples: the planted bug is caught at worst at example 75 of 20 seeds
    # (lce_backward_dloss_first: only where two rows not ignored have different dloss), and
    # 3 x 75 = 225 is past the ci profile's 100, so its claimed families keep the profile's count.
)
