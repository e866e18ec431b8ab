"""The masked softmax's own arguments: the mask, how it is handed over, and the scale.

``masked_softmax`` is ``fn(x, mask, scale)``: ``mask`` a boolean array of x's shape (True: the
entry takes part, as in PyTorch's ``scaled_dot_product_attention``), ``scale`` a Python float
holding a float32 value. A kernel that takes an additive mask instead (``mask_fill``) gets a float
array of the storage type holding 0 where the entry takes part and the fill elsewhere, and
computes ``softmax(scale * x + mask)``; it is judged against the exact result of that same sum, so
a finite fill that leaves masked entries a tiny weight is judged as it is, not forgiven.

Everything here is data and exact arithmetic shared by the stages: the strategies draw the scale
from :data:`SCALES`, the oracle computes the exact logits (:func:`logits`) and the rounding a
float32 kernel makes in forming them (:func:`argument_rounding`), fixtures record the mask.
"""

from __future__ import annotations

import math

import numpy as np

from normprops.dtypes import get_dtype, to_dtype

__all__ = ["HEAD_DIMS", "SCALES", "OVERFLOWING_SCALES", "MASK_KINDS", "mask_fill_value",
           "describe_fill", "mask_argument", "scaled", "logits", "argument_rounding", "scaled_in_range"]

F32 = np.float32
FLT_MAX = float(np.finfo(F32).max)

#: Attention head dimensions: the scale ``1/sqrt(d)`` of scaled dot-product attention.
HEAD_DIMS: tuple[int, ...] = (32, 64, 80, 96, 128, 160, 192, 256)

#: The scales drawn, each a float32 value, the plain 1.0 first (shrinking walks towards it): the
#: head-dimension scales, then adversarial ones. 1e3 and 1e20 overflow float32 when they multiply
#: large logits (a kernel that forms ``scale * x`` before subtracting the max); 1e-30 makes
#: ``scale * x`` subnormal or zero; a negative scale turns the row's minimum into its maximum (a
#: kernel that takes ``max x`` before scaling exponentiates positive numbers).
SCALES: tuple[float, ...] = (1.0, *(float(F32(1 / math.sqrt(d))) for d in HEAD_DIMS),
                             float(F32(1e3)), float(F32(1e20)), float(F32(1e-30)), -0.125)
#: The scales above that carry large logits past FLT_MAX.
OVERFLOWING_SCALES: tuple[float, ...] = (float(F32(1e3)), float(F32(1e20)))

#: How a masked softmax receives its mask: a boolean array, or an additive float one.
MASK_KINDS = ("bool", "additive")


def mask_fill_value(fill: float | str, *, dtype: str = "float32") -> float:
    """The fill of an additive mask as the storage type ``dtype`` holds it: ``"-inf"``,
    ``"lowest"`` (the type's lowest finite value) or a negative number (rounded to the nearest
    value of the type, which is what the kernel receives; a number past the type's range is taken
    as its lowest finite value, a finite fill as asked, not -inf). ValueError naming the value
    otherwise."""
    kind = get_dtype(dtype)
    wrong = f"mask fill must be -inf, lowest or a negative number but was {fill!r}"
    if isinstance(fill, str):
        text = fill.strip().lower()
        if text == "lowest":
            return -kind.max
        try:
            value = float(text)
        except ValueError:
            raise ValueError(wrong) from None
    elif isinstance(fill, (int, float)) and not isinstance(fill, bool):
        value = float(fill)
    else:
        raise ValueError(wrong)
    if not value < 0:  # NaN, +inf, zero and positive fills mask nothing
        raise ValueError(wrong)
    if value == -math.inf:
        return value
    stored = float(to_dtype(np.array([value], dtype=np.float64).clip(-FLT_MAX, None).astype(F32),
                            dtype)[0])
    if not stored < 0:  # a fill too small for the storage type rounds to -0, which masks nothing
        raise ValueError(f"{wrong}; {value!r} rounds to {stored!r} in {dtype}")
    return stored


def describe_fill(fill: float | None) -> str:
    """The mask convention in words: ``bool`` or ``additive -inf`` / ``additive -10000``."""
    if fill is None:
        return "bool"
    return f"additive {fill!r}" if math.isinf(fill) else f"additive {fill:.9g}"


def mask_argument(mask: np.ndarray, fill: float | None) -> np.ndarray:
    """What the kernel receives: a copy of the boolean mask, or the additive float32 mask of 0
    where it is True and ``fill`` elsewhere."""
    if fill is None:
        return np.array(mask, dtype=bool, copy=True)
    return np.where(mask, F32(0), F32(fill)).astype(F32)


def scaled(x: np.ndarray, scale: float) -> np.ndarray:
    """``scale * x`` in float64: exact, since both are float32 values (24 + 24 significant bits,
    and float32's exponent range squared lies well inside float64's)."""
    with np.errstate(all="ignore"):
        return float(scale) * x.astype(np.float64)


def logits(x: np.ndarray, mask: np.ndarray, scale: float, fill: float | None) -> np.ndarray:
    """The exact logits the softmax is taken of, in float64: ``scale * x`` where the mask keeps an
    entry and -inf elsewhere (a boolean mask: what it masks is never read, NaN included), or
    ``scale * x + mask`` for an additive one (a sum float64 may round, by 2^-53 of itself)."""
    s = scaled(x, scale)
    if fill is None:
        return np.where(mask, s, -np.inf)
    with np.errstate(all="ignore"):
        return np.where(mask, s, s + fill)


def _inexact(values: np.ndarray, arithmetic: str) -> np.ndarray:
    """Where rounding ``values`` (float64) to the arithmetic's type changes them."""
    with np.errstate(all="ignore"):
        as32 = values.astype(F32)
        rounded = as32 if arithmetic == "float32" else to_dtype(as32, "bfloat16")
        return np.isfinite(values) & (rounded.astype(np.float64) != values)


def argument_rounding(x: np.ndarray, mask: np.ndarray, scale: float, fill: float | None, *,
                      unit_roundoff: float, arithmetic: str = "float32") -> np.ndarray:
    """Per element, the absolute error a kernel makes in the exponent's argument by rounding
    ``s = scale * x`` (and, for an additive mask, ``s + mask``) to its arithmetic: ``u |s|`` where
    the product is not exact there, plus ``u |s + mask|`` where the sum is not (docs/tolerances.md,
    "Masked softmax"). Zero where nothing rounds: a scale that is a power of two, a kept entry of
    an additive mask (it adds 0)."""
    s = scaled(x, scale)
    with np.errstate(all="ignore"):
        p = np.where(_inexact(s, arithmetic), unit_roundoff * np.abs(s), 0.0)
        if fill is not None and math.isfinite(fill):
            t = np.where(mask, s, s.astype(F32).astype(np.float64) + fill)
            p = p + np.where(~mask & _inexact(t, arithmetic), unit_roundoff * np.abs(t), 0.0)
    return np.where(np.isfinite(p), p, np.inf)


def scaled_in_range(x: np.ndarray, scale: float) -> np.ndarray:
    """Per row: every finite ``scale * x`` lies within float32's range (the accuracy domain; a row
    past it is judged on range safety)."""
    s = scaled(x, scale)
    return np.all(~np.isfinite(s) | (np.abs(s) <= FLT_MAX), axis=-1)
