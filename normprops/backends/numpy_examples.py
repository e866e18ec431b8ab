"""The example kernels of :mod:`normprops.examples` as the numpy registry calls them.

A registered numpy kernel takes float32 arrays holding values exact in its storage type and returns
float32 (:class:`normprops.kernelspec.KernelSpec`, ``framework="numpy"``). The examples are user
kernels: they take and return numpy arrays of the storage type itself (``ml_dtypes.bfloat16`` for
bfloat16), as ``normprops hunt --impl ... --dtype bfloat16`` hands them over. A float32 example is
registered as it is; one whose bug lives in its storage type is wrapped here, once, by
:func:`in_storage_type`, so that it computes on the arrays it was written for.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from normprops.dtypes import from_numpy_storage, to_numpy_storage

__all__ = ["in_storage_type", "rmsnorm_backward_bf16_dgamma"]


def in_storage_type(kernel: Callable[..., Any], *, dtype: str) -> Callable[..., Any]:
    """``kernel``, which takes and returns numpy arrays of ``dtype``, called as a registered numpy
    kernel is: each float32 array argument converted to ``dtype`` exactly (a value it cannot hold is
    a ValueError naming the argument), each returned array widened back to float32."""

    names = list(inspect.signature(kernel).parameters)

    def called_with_float32(*args: Any) -> Any:
        native = [to_numpy_storage(a, dtype, name=name) if isinstance(a, np.ndarray) else a
                  for name, a in zip(names, args, strict=True)]
        out = kernel(*native)
        if isinstance(out, tuple):
            return tuple(from_numpy_storage(o) for o in out)
        return from_numpy_storage(out)

    called_with_float32.__doc__ = f"{kernel.__name__} on {dtype} arrays: {kernel.__doc__}"
    return called_with_float32


def rmsnorm_backward_bf16_dgamma(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray,
                                 eps: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`normprops.examples.backward_planted.rmsnorm_backward_bf16_dgamma` on bfloat16 arrays:
    dgamma summed over the rows in bfloat16, its planted bug."""
    from normprops.examples.backward_planted import rmsnorm_backward_bf16_dgamma as kernel

    return in_storage_type(kernel, dtype="bfloat16")(dy, x, gamma, eps)
