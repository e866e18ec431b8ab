"""The attention op's case: q, k, v, the mask and the scale of one call, as the families draw them
and a fixture stores them, with the masks and memory layouts a case can have
(:mod:`normprops.ops.attention_math` holds the declaration, the reference, the bound and the judge).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from normprops.dtypes import check_representable, get_dtype, numpy_dtype
from normprops.frameworks import laid_like

__all__ = ["MASK_LAYOUTS", "MEMORY_LAYOUTS", "AttentionCase", "laid_out", "mask_layouts_of"]

F32 = np.float32

#: The masks a kernel may take, as it declares them: none (``mask=None``), a causal mask aligned
#: to the top-left corner (key j kept for query i when j <= i) or to the bottom-right one
#: (j <= i + Lk - Lq), a key-padding mask (the same keys kept for every query of a batch element),
#: or any mask at all.
MASK_LAYOUTS = ("none", "causal_top_left", "causal_bottom_right", "key_padding", "arbitrary")


def mask_layouts_of(mask: np.ndarray | None) -> frozenset[str]:
    """The layouts ``mask`` (bool, (B, 1, Lq, Lk), or None) is an instance of: a kernel that takes
    any one of them can be handed it."""
    if mask is None:
        return frozenset({"none"})
    lq, lk = mask.shape[-2:]
    found = {"arbitrary"}
    for name, shift in (("causal_top_left", 0), ("causal_bottom_right", lk - lq)):
        if np.array_equal(mask, np.broadcast_to(np.tril(np.ones((lq, lk), bool), k=shift), mask.shape)):
            found.add(name)
    if (mask == mask[..., :1, :]).all():
        found.add("key_padding")
    return frozenset(found)


#: How q, k and v may lie in memory, each a permutation of (B, H, L, D) from the slowest axis to
#: the fastest: "bhsd", contiguous; "bshd", a (B, H, L, D) view of a (B, L, H, D) array, as a
#: model's projections leave them before the transpose.
MEMORY_LAYOUTS = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3)}


def laid_out(a: np.ndarray, layout: str) -> np.ndarray:
    """``a`` (B, H, L, D) as a view of an array in the memory order ``layout`` (:data:`MEMORY_LAYOUTS`):
    the same values, other strides."""
    if layout not in MEMORY_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(MEMORY_LAYOUTS)} but was {layout!r}")
    order = MEMORY_LAYOUTS[layout]
    return np.ascontiguousarray(a.transpose(order)).transpose(np.argsort(order))


# --- the case ----------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class AttentionCase:
    """One call of the op: float32 arrays holding values exact in ``dtype``, and what built them."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None
    scale: float
    dtype: str = "float32"
    family: str = "explicit"
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        q, k, v, mask = self.q, self.k, self.v, self.mask
        get_dtype(self.dtype)
        if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
            raise ValueError(f"q, k and v must be 4-d (B, H, L, D) but had shapes {q.shape}, {k.shape}, "
                             f"{v.shape}")
        b, hq, lq, d = q.shape
        if k.shape[0] != b or k.shape[3] != d or v.shape[:3] != k.shape[:3]:
            raise ValueError(f"k must be (B, Hkv, Lk, D) and v (B, Hkv, Lk, Dv) for q {q.shape}, but "
                             f"k was {k.shape} and v {v.shape}")
        if hq % k.shape[1]:
            raise ValueError(f"Hq must be a multiple of Hkv but Hq was {hq} and Hkv {k.shape[1]}")
        if mask is not None and (mask.dtype != np.bool_ or mask.shape != (b, 1, lq, k.shape[2])):
            raise ValueError(f"mask must be bool of shape {(b, 1, lq, k.shape[2])} or None but was "
                             f"{mask.dtype} {mask.shape}")
        if float(F32(self.scale)) != self.scale:
            raise ValueError(f"scale must hold a float32 value but was {self.scale!r}; pass "
                             f"float(np.float32({self.scale!r}))")
        for name, a in (("q", q), ("k", k), ("v", v)):
            check_representable(a, self.dtype, name=name)

    @property
    def group(self) -> int:
        return self.q.shape[1] // self.k.shape[1]

    @property
    def op(self) -> str:
        return "attention"

    @property
    def shape(self) -> tuple[int, ...]:
        """q's shape, (B, Hq, Lq, D): what a message quotes as the input's shape."""
        return tuple(self.q.shape)

    @property
    def mask_fill(self) -> None:
        """The mask is handed over as booleans (an additive mask is the masked softmax's)."""
        return None

    def args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, float]:
        """The positional arguments of ``fn(q, k, v, mask, scale)``, as float32 values exact in
        ``dtype`` (the target hands each over in its framework and storage type)."""
        return self.q, self.k, self.v, self.mask, self.scale

    def fields(self) -> dict[str, Any]:
        """The inputs by name, as a fixture records them."""
        return {"q": self.q, "k": self.k, "v": self.v, "mask": self.mask, "scale": self.scale}

    def float_arrays(self) -> tuple[np.ndarray, ...]:
        return self.q, self.k, self.v

    def replace(self, **changes: Any) -> AttentionCase:
        return replace(self, **changes)

    def queries(self, batch: slice, rows: slice) -> AttentionCase:
        """The case made of the query rows ``rows`` of the batch elements ``batch``, with their
        keys, values and mask rows: the same outputs there, in a smaller call."""
        mask = None if self.mask is None else np.ascontiguousarray(self.mask[batch, :, rows])
        return replace(self, q=laid_like(np.ascontiguousarray(self.q[batch, :, rows]), self.q),
                       k=laid_like(np.ascontiguousarray(self.k[batch]), self.k),
                       v=laid_like(np.ascontiguousarray(self.v[batch]), self.v), mask=mask)

    def inputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, float]:
        """The kernel's arguments: arrays of the storage type's numpy dtype (exact)."""
        t = numpy_dtype(self.dtype)
        return (self.q.astype(t), self.k.astype(t), self.v.astype(t),
                None if self.mask is None else self.mask.copy(), self.scale)

    def __repr__(self) -> str:
        b, hq, lq, d = self.q.shape
        hkv, lk, dv = self.k.shape[1], self.k.shape[2], self.v.shape[3]
        shown = ", ".join(f"{key}={value!r}" for key, value in self.params.items())
        layouts = sorted(mask_layouts_of(self.mask) - {"arbitrary"}) or ["arbitrary"]
        return (f"AttentionCase({self.family}: B={b}, Hq={hq}, Hkv={hkv}, Lq={lq}, Lk={lk}, D={d}, "
                f"Dv={dv}, {self.dtype}, scale={self.scale!r}, "
                f"mask={'/'.join(layouts)}{', ' if shown else ''}{shown})")
