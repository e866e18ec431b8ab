"""The metamorphic copies of a case that ops declare (``OpSpec.transforms``): an exact shift of
every row (softmax, layer norm: the output must not change) and an exact scaling of x by 2^k with
eps by 4^k (the norms)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from normprops.dtypes import get_dtype, to_dtype
from normprops.ops.common import FLT_MAX
from normprops.ops.spec import Transform

if TYPE_CHECKING:
    from normprops.case import Case

__all__ = ["SHIFT", "SCALE", "exact_shift", "exact_scale"]


def _is_float32(values: np.ndarray, dtype: str = "float32") -> bool:
    """Every value finite and exactly representable in ``dtype`` (float32 or a narrower type)."""
    with np.errstate(all="ignore"):
        as32 = values.astype(np.float32)
    if not (np.all(np.isfinite(as32)) and np.all(as32 == values)):
        return False
    return dtype == "float32" or bool(np.all(to_dtype(as32, dtype) == as32))


#: Entries a shift is tried on before all of them.
_HEAD = 64


def exact_shift(x: np.ndarray, dtype: str = "float32") -> float | None:
    """A power of two ``c`` such that ``x + c`` is exact in ``dtype`` for every finite entry, chosen
    near the row magnitude so the shift is not trivial; None when no such ``c`` is found."""
    finite = x[np.isfinite(x)].astype(np.float64)
    if finite.size == 0:
        return None
    top = float(np.max(np.abs(finite)))
    exponent = math.floor(math.log2(top)) if top > 0 else 0
    head = finite[:_HEAD]
    for e in range(exponent, exponent - 12, -1):
        c = 2.0**e
        if c < 2.0**-149:
            break
        # The first few entries reject most shifts (x + c is seldom exact) before the whole row is
        # tried: the same answer, for a fraction of the work.
        if _shifts_exactly(head, c, dtype) and _shifts_exactly(finite, c, dtype):
            return c
    return None


def _shifts_exactly(finite: np.ndarray, c: float, dtype: str) -> bool:
    """``finite + c`` exact in float64 (undoing the shift gives ``finite`` back) and representable
    in ``dtype``."""
    shifted = finite + c
    return bool(np.all(shifted - c == finite)) and _is_float32(shifted, dtype)


def exact_scale(case: Case) -> int | None:
    """A power ``k`` such that ``2^k x`` is exact and normal-range in the case's dtype and
    ``4^k eps`` in float32."""
    finite = case.x[np.isfinite(case.x)].astype(np.float64)
    normal = get_dtype(case.dtype).min_normal
    for k in (3, -3, 1, -1):
        eps = case.eps * 4.0**k
        if not (2.0**-126 <= eps <= FLT_MAX) or not _is_float32(np.array([eps])):
            continue
        scaled = finite * 2.0**k
        if _is_float32(scaled, case.dtype) and (
                scaled.size == 0 or np.all((scaled == 0) | (np.abs(scaled) >= normal))):
            return k
    return None


def _shift(case: Case) -> tuple[Case, str] | None:
    c = exact_shift(case.x, case.dtype)
    if c is None:
        return None
    with np.errstate(all="ignore"):
        shifted = (case.x.astype(np.float64) + c).astype(np.float32)
    return case.replace(x=shifted), f"x + {c:g} (exact)"


def _scale(case: Case) -> tuple[Case, str] | None:
    k = exact_scale(case)
    if k is None:
        return None
    scaled = (case.x.astype(np.float64) * 2.0**k).astype(np.float32)
    return case.replace(x=scaled, eps=case.eps * 4.0**k), f"x * 2^{k}, eps * 4^{k}"


#: Adding an exact constant to every row changes nothing (softmax, layer norm).
SHIFT = Transform("shift_invariance", _shift)
#: Scaling x by 2^k and eps by 4^k changes nothing (the norms).
SCALE = Transform("scale_invariance", _scale)
