"""Fixtures as data: a case's arrays, mask and scalars written exactly (hex floats, base64 of
float32 bytes, rows of 0s and 1s) and read back with every part checked against its op.

Arrays of up to :data:`INLINE_LIMIT` elements are lists of hex floats (``float.hex``: readable and
exact), larger ones base64 of little-endian float32 bytes, or of the top two bytes of each where
every value is a bfloat16 (the low two are then 0: half the size, as exact); a masked softmax's
mask is rows of 0s and 1s (or base64 of its packed bits), its scale and additive fill hex floats.
Reading raises ValueError naming the part that is malformed; :mod:`normprops.regressions` adds the
file's name.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Any

import numpy as np

from normprops.case import Case
from normprops.dtypes import DTYPES, to_dtype
from normprops.ops import OPS

__all__ = ["encode_array", "decode_array", "encode_mask", "decode_mask", "encode_case", "decode_case",
           "INLINE_LIMIT", "MAX_ELEMENTS"]

INLINE_LIMIT = 256
MAX_ELEMENTS = 1 << 26  # a fixture's array never needs more (the hunt draws at most ~80k elements)


def encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.size <= INLINE_LIMIT:
        return {"shape": list(a.shape), "hex": [float(v).hex() for v in a.ravel()]}
    bits = a.astype("<f4").view("<u4")
    if not (bits & 0xFFFF).any():  # every value a bfloat16: its float32 bits' top half
        top = (bits >> 16).astype("<u2")
        return {"shape": list(a.shape), "bf16le_base64": base64.b64encode(top.tobytes()).decode()}
    return {"shape": list(a.shape), "f32le_base64": base64.b64encode(bits.tobytes()).decode()}


def _checked_shape(shape: list[Any], *, what: str) -> tuple[list[int], int]:
    """A blob's shape and element count; ValueError naming ``what`` if it is no list of
    non-negative integers or holds more than a fixture can."""
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"{what}: shape {shape!r} is not a list of non-negative integers")
    size = math.prod(shape)
    if size > MAX_ELEMENTS:
        raise ValueError(f"{what}: shape {shape!r} holds {size} elements, more than the {MAX_ELEMENTS} "
                         f"elements a fixture may hold; the file is damaged or was not written by normprops")
    return shape, size


def _base64_bytes(blob: dict[str, Any], key: str, nbytes: int, shape: list[int], *, what: str) -> bytes:
    """The bytes of ``blob[key]``; ValueError naming ``what`` unless it is base64 of ``nbytes``."""
    try:
        raw = base64.b64decode(blob[key], validate=True)
    except (TypeError, ValueError, binascii.Error) as exc:
        raise ValueError(f"{what}: {key!r} is not base64 ({exc})") from None
    if len(raw) != nbytes:
        raise ValueError(f"{what}: {key!r} holds {len(raw)} bytes; shape {shape!r} needs {nbytes}")
    return raw


def decode_array(blob: Any, *, what: str = "array") -> np.ndarray:
    """The float32 array a blob of :func:`encode_array` holds; ValueError naming ``what`` if the
    blob is malformed (wrong shape, wrong length, not hex, not base64)."""
    if not isinstance(blob, dict) or not isinstance(blob.get("shape"), list):
        raise ValueError(f"{what}: expected an object with a 'shape' list")
    shape, size = _checked_shape(blob["shape"], what=what)
    if "hex" in blob:
        values = blob["hex"]
        if not isinstance(values, list) or len(values) != size:
            raise ValueError(f"{what}: 'hex' must list {size} values for shape {shape!r}")
        floats = []
        for i, v in enumerate(values):
            value = _from_hex(v)
            if value is None:
                raise ValueError(f"{what}: value {i} ({v!r}) is not a hex float such as "
                                 f"'0x1.8p+1', 'inf' or 'nan'")
            floats.append(value)
        with np.errstate(all="ignore"):
            wide = np.array(floats, dtype=np.float64)
            array = wide.astype(np.float32)
        inexact = ~((array == wide) | np.isnan(wide))
        if inexact.any():
            i = int(np.argmax(inexact))
            raise ValueError(f"{what}: value {i} ({values[i]!r}) is not a float32 value (it would be "
                             f"read as {float(array[i])!r})")
        return array.reshape(shape)
    if "f32le_base64" in blob:
        raw = _base64_bytes(blob, "f32le_base64", 4 * size, shape, what=what)
        return np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape).copy()
    if "bf16le_base64" in blob:  # each value's top two bytes (its low two are 0)
        top = np.frombuffer(_base64_bytes(blob, "bf16le_base64", 2 * size, shape, what=what), dtype="<u2")
        return (top.astype(np.uint32) << 16).view(np.float32).reshape(shape).copy()
    raise ValueError(f"{what}: none of 'hex', 'f32le_base64' or 'bf16le_base64' present")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (np.floating, np.integer)):
        return _jsonable(value.item())
    return value


def _encode_fields(case: Any) -> dict[str, Any]:
    """A named-arrays case (attention) by its fields: float arrays of any shape, boolean masks as
    rows of 0s and 1s over the last axis with their full ``dims``, floats as hex, None as null."""
    out: dict[str, Any] = {"shape": list(case.shape)}
    for name, value in case.fields().items():
        if isinstance(value, np.ndarray) and value.dtype == bool:
            out[name] = {"dims": list(value.shape), **encode_mask(value.reshape(-1, value.shape[-1]))}
        elif isinstance(value, np.ndarray):
            out[name] = encode_array(value)
        elif isinstance(value, float):
            out[name] = float(value).hex()
        else:
            out[name] = value
    if case.dtype != "float32":
        out["dtype"] = case.dtype
    out["params"] = _jsonable(case.params)
    return out


def _decode_fields(blob: dict[str, Any], *, op: str, family: str, what: str) -> Any:
    """A named-arrays case from :func:`_encode_fields`' JSON, built and checked by its op."""
    spec = OPS[op]
    fields: dict[str, Any] = {}
    for name in spec.params:
        value = blob.get(name)
        if isinstance(value, dict) and "dims" in value:
            dims, _ = _checked_shape(value["dims"], what=f"{what}.{name}")
            fields[name] = decode_mask(value, what=f"{what}.{name}").reshape(dims)
        elif isinstance(value, dict):
            fields[name] = decode_array(value, what=f"{what}.{name}")
        elif isinstance(value, str):
            fields[name] = _hex_float(blob, name, what=what, op=op)
        elif isinstance(value, int) and not isinstance(value, bool):
            fields[name] = value  # an index (cross-entropy's ignore_index)
        elif value is not None:
            raise ValueError(f"{what}.{name}: {value!r} is neither an array, a mask, an integer nor a "
                             f"hex float")
    dtype = blob.get("dtype", "float32")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"{what}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    params = blob.get("params", {})
    try:
        return spec.named.build(family, dtype, fields, params if isinstance(params, dict) else {})
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def encode_case(case: Case) -> dict[str, Any]:
    if OPS[case.op].named is not None:
        return _encode_fields(case)
    out: dict[str, Any] = {"shape": list(case.x.shape), "x": encode_array(case.x)}
    if case.dy is not None:
        out["dy"] = encode_array(case.dy)
    if case.gamma is not None:
        out["gamma"] = encode_array(case.gamma)
    if case.beta is not None:
        out["beta"] = encode_array(case.beta)
    if case.eps is not None:
        out["eps"] = float(case.eps).hex()
    if case.dtype != "float32":
        out["dtype"] = case.dtype  # the values are float32, exact in this storage type
    if case.mask is not None:
        out["mask"] = encode_mask(case.mask)
        out["scale"] = float(case.scale).hex()
        if case.mask_fill is not None:
            out["mask_fill"] = float(case.mask_fill).hex()
    out["params"] = _jsonable(case.params)
    return out


def encode_mask(mask: np.ndarray) -> dict[str, Any]:
    """A boolean mask as data: a string of 0s and 1s per row (1: the entry takes part) for small
    masks, base64 of ``np.packbits`` (row-major, most significant bit first) for large ones."""
    mask = np.ascontiguousarray(mask, dtype=bool)
    if mask.size <= 16 * INLINE_LIMIT:
        return {"shape": list(mask.shape), "rows": ["".join("1" if v else "0" for v in row)
                                                    for row in mask.reshape(mask.shape[0], -1)]}
    return {"shape": list(mask.shape), "packbits_base64": base64.b64encode(np.packbits(mask)).decode()}


def decode_mask(blob: Any, *, what: str = "mask") -> np.ndarray:
    """The boolean mask a blob of :func:`encode_mask` holds; ValueError naming ``what`` if the blob
    is malformed."""
    if not isinstance(blob, dict) or not isinstance(blob.get("shape"), list) or len(blob["shape"]) != 2:
        raise ValueError(f"{what}: expected an object with a 'shape' of two integers")
    shape, size = _checked_shape(blob["shape"], what=what)
    if "rows" in blob:
        rows = blob["rows"]
        if (not isinstance(rows, list) or len(rows) != shape[0]
                or not all(isinstance(r, str) and len(r) == shape[1] and set(r) <= {"0", "1"}
                           for r in rows)):
            raise ValueError(f"{what}: 'rows' must be {shape[0]} strings of {shape[1]} 0s and 1s")
        return np.array([[c == "1" for c in r] for r in rows], dtype=bool).reshape(shape)
    if "packbits_base64" in blob:
        try:
            raw = base64.b64decode(blob["packbits_base64"], validate=True)
        except (TypeError, ValueError, binascii.Error) as exc:
            raise ValueError(f"{what}: 'packbits_base64' is not base64 ({exc})") from None
        if len(raw) != -(-size // 8):
            raise ValueError(f"{what}: 'packbits_base64' holds {len(raw)} bytes; shape {shape!r} "
                             f"needs {-(-size // 8)}")
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), count=size)
        return bits.astype(bool).reshape(shape)
    raise ValueError(f"{what}: neither 'rows' nor 'packbits_base64' present")


#: What float.hex writes: a signed hexadecimal significand with a binary exponent, inf or nan.
#: float.fromhex alone also takes "10" (16.0) or "abc" (2748.0), which a hand edit would mean as
#: decimals.
_HEX_FLOAT = re.compile(r"[+-]?(0x[0-9a-f]+(\.[0-9a-f]*)?p[+-]?[0-9]+|inf|infinity|nan)", re.IGNORECASE)


def _from_hex(value: Any) -> float | None:
    """A float as :meth:`float.hex` writes it; None for anything else."""
    if not isinstance(value, str) or not _HEX_FLOAT.fullmatch(value.strip()):
        return None
    try:
        return float.fromhex(value)
    except (ValueError, OverflowError):
        return None


def _hex_float(blob: dict[str, Any], key: str, *, what: str, op: str) -> float:
    value = _from_hex(blob.get(key))
    if value is None:
        raise ValueError(f"{what}: {op} needs {key} as a hex float such as '0x1.4f8b58p-17' "
                         f"(float.hex), not {blob.get(key)!r}")
    return value


def _decode_mask_args(blob: dict[str, Any], x: np.ndarray, *, op: str,
                      what: str) -> tuple[np.ndarray | None, float | None, float | None]:
    """A masked softmax's mask, scale and additive fill (None: a boolean mask), checked."""
    if not OPS[op].has_mask:
        extra = [k for k in ("mask", "scale", "mask_fill") if k in blob]
        if extra:
            raise ValueError(f"{what}: {op} takes no {extra[0]}")
        return None, None, None
    if "mask" not in blob:
        raise ValueError(f"{what}: {op} needs a mask")
    mask = decode_mask(blob["mask"], what=f"{what}.mask")
    if mask.shape != x.shape:
        raise ValueError(f"{what}.mask: shape {list(mask.shape)} does not match x's {list(x.shape)}")
    scale = _hex_float(blob, "scale", what=what, op=op)
    if not (math.isfinite(scale) and float(np.float32(scale)) == scale):
        raise ValueError(f"{what}: scale {scale!r} is not a finite float32 value")
    fill = None
    if "mask_fill" in blob:
        fill = _hex_float(blob, "mask_fill", what=what, op=op)
        if not fill < 0:
            raise ValueError(f"{what}: mask_fill {fill!r} is not -inf or a negative number")
    return mask, scale, fill


def decode_case(blob: Any, *, op: str, family: str, what: str) -> Case:
    """A case from its JSON, every part checked against the op (ValueError naming the part)."""
    if blob is None:
        raise ValueError(f"{what}: missing")
    if not isinstance(blob, dict):
        raise ValueError(f"{what}: expected an object")
    spec = OPS[op]
    if spec.named is not None:
        return _decode_fields(blob, op=op, family=family, what=what)
    x = decode_array(blob.get("x"), what=f"{what}.x")
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{what}.x: shape {list(x.shape)} is not (rows >= 1, cols >= 1)")
    vectors = {}
    for name in ("gamma", "beta"):
        if (name in spec.params) != (name in blob):
            raise ValueError(f"{what}: {op} {'needs' if name in spec.params else 'takes no'} {name}")
        if name in blob:
            vectors[name] = decode_array(blob[name], what=f"{what}.{name}")
            if vectors[name].shape != (x.shape[1],):
                raise ValueError(f"{what}.{name}: shape {list(vectors[name].shape)} does not match "
                                 f"x's {x.shape[1]} columns")
    eps = None
    if "eps" in spec.params:
        eps = _hex_float(blob, "eps", what=what, op=op)
        if not (math.isfinite(eps) and eps > 0 and float(np.float32(eps)) == eps):
            raise ValueError(f"{what}: eps {eps!r} is not a positive finite float32 value")
    dtype = blob.get("dtype", "float32")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"{what}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    dy = None
    if ("dy" in spec.params) != ("dy" in blob):
        raise ValueError(f"{what}: {op} {'needs' if 'dy' in spec.params else 'takes no'} dy")
    if "dy" in blob:
        dy = decode_array(blob["dy"], what=f"{what}.dy")
        if dy.shape != x.shape:
            raise ValueError(f"{what}.dy: shape {list(dy.shape)} does not match x's {list(x.shape)}")
        vectors["dy"] = dy
    for name, a in (("x", x), *vectors.items()):
        if not np.array_equal(to_dtype(a, dtype), a, equal_nan=True):
            raise ValueError(f"{what}.{name}: values are not exact in its dtype {dtype}")
    mask, scale, fill = _decode_mask_args(blob, x, op=op, what=what)
    params = blob.get("params", {})
    return Case(op=op, family=family, x=x, gamma=vectors.get("gamma"), beta=vectors.get("beta"),
                eps=eps, params=params if isinstance(params, dict) else {}, dtype=dtype, dy=dy,
                mask=mask, scale=scale, mask_fill=fill)


