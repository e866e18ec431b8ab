"""The fused loss's families (:mod:`normprops.ops.linear_cross_entropy`): cross-entropy's
(:mod:`normprops.ops.cross_entropy_families`), each built through ``h`` and ``w``.

A cross-entropy case's logits ``X`` (N, V), exact in the storage type, are reproduced exactly by
``h = [I_N | ...]`` and ``w = [X^T | ...]``: row ``r`` of ``h`` picks column ``r`` of ``w``, so the
family's structure (a dominant logit, a target far below the max, a released vocabulary) is the
logits'. Beside it, ``mix`` columns of random ``h`` and ``w`` (0 to 64 of them, logits moved by
about ``mix_scale``) make each logit a real sum of products, which the matmul must accumulate.
The ``offset`` family puts its offset in a column of ones in ``h`` and a bias-like column of the
offset in ``w``: every logit is ``noise + offset`` formed by the kernel's own accumulation.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from normprops.dtypes import to_dtype
from normprops.ops.cross_entropy_families import cross_entropy_cases
from normprops.ops.cross_entropy_math import CrossEntropyCase
from normprops.ops.linear_cross_entropy_math import FAMILIES, LinearCrossEntropyCase

__all__ = ["MIX_COLS", "MIX_SCALES", "VOCAB_MIX_COLS", "linear_case", "linear_cross_entropy_cases"]

F32 = np.float32
#: How many random columns of h and w join the exact ones: none (each logit one product), odd and
#: even counts, past a 32-wide tile.
MIX_COLS = (0, 1, 7, 16, 33, 64)
#: The ``vocab`` family's (up to 256001 classes): few, so that w stays small.
VOCAB_MIX_COLS = (0, 1, 7)
#: The standard deviation those columns add to each logit.
MIX_SCALES = (0.01, 0.1, 1.0)


def _storage(values: np.ndarray, dtype: str) -> np.ndarray:
    return to_dtype(np.asarray(values, dtype=F32), dtype)


def linear_case(ce: CrossEntropyCase, *, mix_cols: int, mix_scale: float) -> LinearCrossEntropyCase:
    """The fused case whose logits are ``ce``'s (its offset through a bias-like column in the
    ``offset`` family), with ``mix_cols`` random columns adding about ``mix_scale`` to each."""
    if mix_cols < 0 or not mix_scale > 0:
        raise ValueError(f"mix_cols must be >= 0 and mix_scale > 0 but were {mix_cols!r}, {mix_scale!r}")
    n, v = ce.logits.shape
    dtype = ce.dtype
    seed = int(ce.params.get("seed", 0))
    rng = np.random.default_rng(seed + 2)
    h_cols = [np.eye(n, dtype=F32)]
    if ce.family == "offset":
        # The noise alone in the exact block; the offset enters through h's column of ones.
        noise = _storage(rng.standard_normal((n, v)) * ce.params["spread"], dtype)
        offset = _storage(np.full((v, 1), ce.params["offset"]), dtype)
        h_cols.append(np.ones((n, 1), dtype=F32))
        w_cols = [noise.T, offset]
    else:
        w_cols = [ce.logits.T]
    if mix_cols:
        h_cols.append(_storage(rng.standard_normal((n, mix_cols)), dtype))
        w_cols.append(_storage(rng.standard_normal((v, mix_cols)) * (mix_scale / np.sqrt(mix_cols)), dtype))
    h = np.ascontiguousarray(np.concatenate(h_cols, axis=1), dtype=F32)
    w = np.ascontiguousarray(np.concatenate(w_cols, axis=1), dtype=F32)
    params = {**ce.params, "mix_cols": mix_cols, "mix_scale": mix_scale}
    return LinearCrossEntropyCase(h, w, ce.target, ignore_index=ce.ignore_index,
                                  label_smoothing=ce.label_smoothing, softcap=ce.softcap, z_loss=ce.z_loss,
                                  reduction=ce.reduction, dloss=ce.dloss, dtype=dtype, family=ce.family,
                                  params=params)


def linear_cross_entropy_cases(family: str, *, dtypes: tuple[str, ...] = ("float32", "bfloat16"),
                               smoothing: tuple[float, ...] = (0.0, 0.1, 1.0), gradient: bool = False,
                               reduction: str = "none", vocab_multiple_of: int = 1
                               ) -> st.SearchStrategy[LinearCrossEntropyCase]:
    """Cases of one family (cross-entropy's, through h and w) in the storage types ``dtypes``;
    gradient cases carry cross-entropy's kinds of dloss."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)} but was {family!r}")
    drawn = st.tuples(cross_entropy_cases(family, dtypes=dtypes, smoothing=smoothing, gradient=gradient,
                                          reduction=reduction, vocab_multiple_of=vocab_multiple_of),
                      st.sampled_from(VOCAB_MIX_COLS if family == "vocab" else MIX_COLS),
                      st.sampled_from(MIX_SCALES))
    return drawn.map(lambda t: linear_case(t[0], mix_cols=t[1], mix_scale=t[2]))
