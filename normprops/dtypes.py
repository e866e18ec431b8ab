"""Storage types: the formats kernels read and write (their arithmetic is float32 throughout).

Every stage below the strategies shares this table: the strategies draw values exact in a type, the
oracle adds the type's output rounding to the tolerance, the framework adapters convert exactly, and
fixtures record the type. Rounding into bfloat16 and float16 is ``ml_dtypes``' (round to nearest,
ties to even), the same package JAX uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["StorageType", "DTYPES", "get_dtype", "to_dtype", "numpy_dtype", "to_numpy_storage",
           "check_representable", "from_numpy_storage", "split_exact", "rounding_floor"]

F32 = np.float32


@dataclass(frozen=True)
class StorageType:
    """A storage type kernels may read and write."""

    name: str
    bits: int  # significand bits, the implicit one included
    max: float  # largest finite value
    tiny: float  # smallest positive subnormal
    min_normal: float
    itemsize: int  # bytes per value in memory
    large_weight: float  # scale of the "large" gamma / beta kinds: outputs stay in range

    @property
    def u(self) -> float:
        """Unit roundoff of round-to-nearest into this type."""
        return 2.0 ** -self.bits

    @property
    def overflow(self) -> float:
        """The least magnitude that rounds to an infinity: the largest finite value plus half its
        ulp (65520 in float16). Round to nearest takes a value there or beyond to the infinity of
        its sign (at exactly the midpoint, ties to even: the largest value's significand is odd)."""
        exponent = math.frexp(self.max)[1] - 1  # max = 1.f * 2^exponent
        return self.max + 2.0 ** (exponent - self.bits)


DTYPES: dict[str, StorageType] = {
    t.name: t
    for t in (
        StorageType("float32", 24, float(np.finfo(F32).max), 2.0**-149, 2.0**-126, 4, 1e4),
        StorageType("bfloat16", 8, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), 2.0**-133,
                    2.0**-126, 2, 1e4),
        StorageType("float16", 11, 65504.0, 2.0**-24, 2.0**-14, 2, 10.0),
    )
}

_NUMPY = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16),
          "float16": np.dtype(np.float16)}


def rounding_floor(dtype: str | None) -> float:
    """The absolute error of rounding a float32 value below ``dtype``'s least normal to it, where it
    exceeds float32's own floor FLT_MIN (which the bounds charge already): half the subnormal step,
    2^-25 in float16 (``|fl(x) - x| <= max(u |x|, 2^-25)``). 0 for None (no rounding), float32 and
    bfloat16, whose half step 2^-134 lies below FLT_MIN."""
    if dtype is None:
        return 0.0
    half_step = get_dtype(dtype).tiny / 2
    return half_step if half_step > DTYPES["float32"].min_normal else 0.0


def get_dtype(name: str) -> StorageType:
    try:
        return DTYPES[name]
    except (KeyError, TypeError):
        hint = ""
        try:  # np.float16, torch.bfloat16, ml_dtypes.bfloat16: their names
            named = str(np.dtype(name)) if not isinstance(name, str) else None
        except Exception:  # not a dtype numpy knows (torch's): its name after the module's
            named = str(name).rpartition(".")[2] if not isinstance(name, str) else None
        if named in DTYPES:
            hint = f' (pass its name: dtype="{named}")'
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} but was {name!r}{hint}") from None


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a storage type (``ml_dtypes.bfloat16`` for bfloat16)."""
    get_dtype(name)
    return _NUMPY[name]


def to_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded (to nearest, ties to even) to ``dtype``, returned as float32. Finite
    values beyond the type's range saturate to its largest finite value; NaN and infinities stay."""
    kind = get_dtype(dtype)
    a = np.ascontiguousarray(a, dtype=F32)
    if dtype == "float32":
        return a.copy()
    with np.errstate(all="ignore"):
        out = a.astype(_NUMPY[dtype]).astype(F32)
        # A finite value that rounds past the largest one saturates (a kernel's inputs are finite
        # numbers of the type, never an infinity made up by the conversion).
        over = np.isfinite(a) & ~np.isfinite(out)
        out = np.where(over, np.copysign(F32(kind.max), a), out)
    return np.ascontiguousarray(out, dtype=F32)


def to_numpy_storage(a: np.ndarray, dtype: str, *, name: str = "array") -> np.ndarray:
    """float32 values exact in ``dtype`` -> a numpy array of that type (exact; never rounds).

    Raises ValueError naming ``name`` and the first value that is not exactly representable. A
    0-d array (a reduced loss's gradient) stays 0-d."""
    a = np.asarray(a, dtype=F32) if np.ndim(a) == 0 else np.ascontiguousarray(a, dtype=F32)
    if dtype == "float32":
        return a.copy()
    with np.errstate(all="ignore"):
        out = a.astype(numpy_dtype(dtype))
        back = out.astype(F32)
    bad = ~((back == a) | (np.isnan(a) & np.isnan(back)))
    if bad.any():
        raise not_representable(a, int(np.argmax(bad)), dtype=dtype, name=name)
    return out


def check_representable(a: np.ndarray, dtype: str, *, name: str = "array") -> None:
    """Raise ValueError naming ``name`` and the first float32 value of ``a`` that ``dtype`` cannot
    hold exactly. bfloat16 is a float32's top half, so its test reads the bits: no conversion."""
    a = np.ascontiguousarray(a, dtype=F32)
    if dtype == "float32":
        return
    if dtype == "bfloat16":
        bad = ((a.view(np.uint32) & np.uint32(0xFFFF)) != 0) & ~np.isnan(a)
    else:
        with np.errstate(all="ignore"):
            back = a.astype(numpy_dtype(dtype)).astype(F32)
        bad = ~((back == a) | np.isnan(a))
    if bad.any():
        raise not_representable(a, int(np.argmax(bad)), dtype=dtype, name=name)


def not_representable(a: np.ndarray, flat_index: int, *, dtype: str, name: str) -> ValueError:
    """The error for ``a``'s element at ``flat_index``, which ``dtype`` cannot hold exactly."""
    i = np.unravel_index(flat_index, a.shape)
    return ValueError(f"{name}[{', '.join(map(str, i))}] = {float(a[i])!r} is not exactly representable "
                      f"in {dtype}; round it first (normprops.dtypes.to_dtype)")


def from_numpy_storage(a: np.ndarray) -> np.ndarray:
    """A numpy float32, bfloat16 or float16 array -> float32 (exact: every value widens); a 0-d
    array (a reduced loss) stays 0-d."""
    out = np.asarray(a).astype(F32)
    return out if out.ndim == 0 else np.ascontiguousarray(out)


def split_exact(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """x = a + b exactly, both exact in ``dtype``: a keeps the top half of each significand, b is
    the rest. Where b would be subnormal (flush-to-zero arithmetic could drop it), b = 0, a = x."""
    bits = get_dtype(dtype).bits
    x = np.ascontiguousarray(x, dtype=np.float32)
    drop = 24 - bits + bits // 2  # float32 significand bits cleared in a
    mask = np.uint32((0xFFFFFFFF << drop) & 0xFFFFFFFF)
    with np.errstate(all="ignore"):
        a = (x.view(np.uint32) & mask).view(np.float32)
        b = (x.astype(np.float64) - a).astype(np.float32)
        ok = np.isfinite(x) & ((b == 0) | (np.abs(b) >= get_dtype(dtype).min_normal))
        ok &= (to_dtype(a, dtype) == a) & (to_dtype(b, dtype) == b)
    a = np.where(ok, a, x)
    b = np.where(ok, b, np.float32(0))  # anything unsplittable: x + 0
    # A zero splits into two zeros of its own sign: -0 + -0 is -0, while -0 + +0 is +0 under
    # round-to-nearest (x - a above gives +0 for x = -0).
    zero = x == 0
    a, b = np.where(zero, x, a), np.where(zero, x, b)
    return np.ascontiguousarray(a), np.ascontiguousarray(b)
