"""One example: a batch of rows and the op's parameters, exactly as a kernel receives them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from normprops.masking import describe_fill, mask_argument

__all__ = ["WIDEST_COLS", "Case", "ShapeConstraints", "SIGNATURES"]

#: Each op's user signature (its argument names, in order), filled by
#: :func:`normprops.ops.register`: what :meth:`Case.args` hands a kernel, without this module
#: depending on the ops (which build on it).
SIGNATURES: dict[str, tuple[str, ...]] = {}


@dataclass(frozen=True, eq=False)
class Case:
    """A batch of rows plus gamma, beta and eps where the op has them, or a mask and a scale.

    ``x``, ``gamma`` and ``beta`` are float32 arrays whose values are exactly representable in
    ``dtype`` (the storage type the kernel reads and writes; see :mod:`normprops.dtypes`). A
    gradient op's case also holds ``dy``, of ``x``'s shape; for ``softmax_backward`` ``x`` holds
    the softmax output ``y`` the kernel receives. ``mask`` (masked softmax) is boolean, True where
    an entry takes part; ``mask_fill`` None hands it to the kernel as it is, a number as an additive
    mask of 0 and that fill (:mod:`normprops.masking`).
    """

    op: str
    family: str
    x: np.ndarray  # float32, (rows, cols), C-contiguous
    gamma: np.ndarray | None = None  # float32, (cols,)
    beta: np.ndarray | None = None  # float32, (cols,)
    eps: float | None = None  # the exact value of a float32
    params: dict[str, Any] = field(default_factory=dict)  # the drawn parameters, for reports
    dtype: str = "float32"
    dy: np.ndarray | None = None  # gradient ops: the upstream gradient, float32, x's shape
    mask: np.ndarray | None = None  # bool, x's shape
    scale: float | None = None  # the exact value of a float32
    mask_fill: float | None = None  # None: a boolean mask; else an additive one with this fill

    @property
    def rows(self) -> int:
        return int(self.x.shape[0])

    @property
    def cols(self) -> int:
        return int(self.x.shape[1])

    @property
    def shape(self) -> tuple[int, ...]:
        """x's shape: what a message quotes as the input's shape."""
        return tuple(self.x.shape)

    def float_arrays(self) -> tuple[np.ndarray, ...]:
        """The float arrays the kernel receives (x or y, gamma, beta, dy where the op has them)."""
        return tuple(a for a in (self.x, self.gamma, self.beta, self.dy) if a is not None)

    def args(self) -> tuple[Any, ...]:
        """The positional arguments of the op's user signature."""
        try:
            params = SIGNATURES[self.op]
        except KeyError:
            raise ValueError(f"op {self.op!r} is not registered (normprops.ops registers the "
                             f"built-in ones; normprops.ops.register an op of your own)") from None
        values = {"x": self.x, "y": self.x, "dy": self.dy, "gamma": self.gamma, "beta": self.beta,
                  "eps": self.eps, "scale": self.scale}
        if "mask" in params:
            values["mask"] = mask_argument(self.mask, self.mask_fill)
        return tuple(values[p] for p in params)

    def replace(self, **changes: Any) -> Case:
        fields = {"op": self.op, "family": self.family, "x": self.x, "gamma": self.gamma,
                  "beta": self.beta, "eps": self.eps, "params": self.params, "dtype": self.dtype,
                  "dy": self.dy, "mask": self.mask, "scale": self.scale, "mask_fill": self.mask_fill}
        fields.update(changes)
        return Case(**fields)

    def take(self, rows: np.ndarray) -> Case:
        """The case made of ``rows`` of this one (repeated, reordered, alone), each with its mask
        and its upstream gradient."""

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.ascontiguousarray(a[rows])

        return self.replace(x=pick(self.x), mask=pick(self.mask), dy=pick(self.dy))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        eps = "" if self.eps is None else f", eps={self.eps!r}"
        if self.scale is not None:
            eps += f", scale={self.scale!r}, mask={describe_fill(self.mask_fill)}"
        return f"Case({self.op}, {self.family}, shape={self.x.shape}{eps}; {shown})"


# The widest rows a hunt draws: ``long_rows``' widest, 2^18 + 1 columns (a 256k vocabulary's
# softmax and one more). A kernel's least width, or its vector, may not pass it.
WIDEST_COLS = 2**18 + 1


@dataclass(frozen=True)
class ShapeConstraints:
    """The row widths a kernel accepts: every drawn width is a multiple of ``cols_multiple_of``
    between ``min_cols`` and ``max_cols`` (None: the hunt's own limit)."""

    cols_multiple_of: int = 1
    min_cols: int = 1
    max_cols: int | None = None

    def __post_init__(self) -> None:
        for name in ("cols_multiple_of", "min_cols"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer of at least 1 but was {value!r}")
            if value > WIDEST_COLS:
                raise ValueError(f"{name} must be at most {WIDEST_COLS} (the widest rows "
                                 f"long_rows draws) but was {value!r}")
        if self.max_cols is not None:
            if not isinstance(self.max_cols, int) or isinstance(self.max_cols, bool):
                raise ValueError(f"max_cols must be an integer but was {self.max_cols!r}")
            lowest = -(-self.min_cols // self.cols_multiple_of) * self.cols_multiple_of
            if self.max_cols < lowest:
                raise ValueError(
                    f"max_cols must be at least {lowest} (the smallest multiple of "
                    f"cols_multiple_of={self.cols_multiple_of} from min_cols={self.min_cols}) but was "
                    f"{self.max_cols}")

    @property
    def unconstrained(self) -> bool:
        return self.cols_multiple_of == 1 and self.min_cols == 1 and self.max_cols is None

    def allows(self, cols: int) -> bool:
        return (cols % self.cols_multiple_of == 0 and cols >= self.min_cols
                and (self.max_cols is None or cols <= self.max_cols))

    def describe(self) -> str:
        parts = []
        if self.cols_multiple_of > 1:
            parts.append(f"cols a multiple of {self.cols_multiple_of}")
        if self.min_cols > 1:
            parts.append(f"cols >= {self.min_cols}")
        if self.max_cols is not None:
            parts.append(f"cols <= {self.max_cols}")
        return ", ".join(parts) or "any width"

    def to_json(self) -> dict[str, int | None]:
        return {"cols_multiple_of": self.cols_multiple_of, "min_cols": self.min_cols,
                "max_cols": self.max_cols}
