"""Validated launchers for the kernels of ``kernels.cu`` (and for users' own CUDA kernels).

Each launcher takes the op's user signature and numpy or CuPy arrays. numpy input is copied to the
device and the result copied back; CuPy input stays on the device. Before launching it checks what
CuPy does not: float32, 2-D, gamma/beta of length ``cols``, a finite eps; a non-contiguous ``x`` is
copied to a contiguous one (documented semantics, not an error); ``rows == 0`` returns an empty
result without a launch. Scalars are cast to their exact C types (``size_t`` cols, ``float`` eps):
CuPy would pass a Python int as ``long long``.

Launch shape: grid = (rows,), block = (threads,) with threads = 256 for ``kernels.cu``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from normprops.cuda.build import BUILDS, compile_source, module
from normprops.flags import flag
from normprops.ops import get_op

__all__ = [
    "THREADS",
    "KernelFault",
    "launch",
    "validate",
    "user_kernel",
    "softmaxRowNaive",
    "softmaxRowSafe",
    "softmaxRowNoBarrier",
    "layerNormRowTwoPass",
    "layerNormRowWelford",
    "layerNormRowOnePass",
    "rmsNormRow",
]

THREADS = 256
MAX_GRID_X = 2**31 - 1
OP_PARAMS = {"softmax": 0, "layernorm": 2, "rmsnorm": 1}  # how many of gamma, beta it takes


class KernelFault(RuntimeError):
    """The GPU reported an error during or after a launch (illegal address, trap, ...). The CUDA
    context is unusable afterwards: the hunt stops and reports it."""


def _array_module(x: Any, name: str) -> Any:
    import cupy

    if isinstance(x, cupy.ndarray):
        return cupy
    if isinstance(x, np.ndarray):
        return np
    raise TypeError(f"{name} must be a numpy or CuPy array but was {type(x).__name__}")


def _check_vector(name: str, v: Any, cols: int) -> None:
    _array_module(v, name)
    if v.dtype != np.float32:
        raise TypeError(f"{name} must be float32 but was {v.dtype}; convert with .astype(float32)")
    if v.shape != (cols,):
        raise ValueError(f"{name} must have shape ({cols},) to match x's {cols} columns but had "
                         f"shape {v.shape}")


def validate(op: str, x: Any, gamma: Any = None, beta: Any = None,
             eps: float | None = None) -> tuple[int, int]:
    """Check what CuPy does not (dtype, rank, gamma/beta shapes, eps) and return (rows, cols)."""
    _array_module(x, "x")
    if x.dtype != np.float32:
        raise TypeError(f"x must be float32 but was {x.dtype}; convert with x.astype(np.float32)")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (rows, cols) but had shape {x.shape}")
    rows, cols = (int(s) for s in x.shape)
    if cols < 1:
        raise ValueError(f"x must have at least 1 column but had shape {x.shape}")
    if rows > MAX_GRID_X:
        raise ValueError(f"x has {rows} rows; one block per row allows at most {MAX_GRID_X}")
    if rows == 0:
        return rows, cols
    if OP_PARAMS[op] >= 1:
        _check_vector("gamma", gamma, cols)
    if OP_PARAMS[op] == 2:
        _check_vector("beta", beta, cols)
    if get_op(op).has_eps:
        if eps is None or not isinstance(eps, (int, float, np.floating)) or not math.isfinite(eps) or eps < 0:
            raise ValueError(f"eps must be a finite non-negative float but was {eps!r}")
    return rows, cols


def launch(kernel: Any, op: str, x: Any, gamma: Any = None, beta: Any = None,
           eps: float | None = None, *, threads: int = THREADS) -> Any:
    """Validate, launch ``kernel`` with one block of ``threads`` per row, return out like ``x``."""
    import cupy

    if not 1 <= threads <= 1024:
        raise ValueError(f"threads must be between 1 and 1024 but was {threads}")
    rows, cols = validate(op, x, gamma, beta, eps)
    xp = _array_module(x, "x")
    if rows == 0:
        return xp.empty((0, cols), dtype=np.float32)
    # gamma, beta (as many as the op takes), checked by validate, on the device and contiguous
    extra = [cupy.ascontiguousarray(cupy.asarray(v)) for v in (gamma, beta)[: OP_PARAMS[op]]]
    scalars: list[Any] = [np.uint64(cols)]
    if get_op(op).has_eps:
        scalars.append(np.float32(eps))
    try:
        x_dev = cupy.ascontiguousarray(cupy.asarray(x))  # non-contiguous input: a contiguous copy
        out = cupy.empty_like(x_dev)
        kernel((rows,), (threads,), (x_dev, out, *extra, *scalars))
        cupy.cuda.get_current_stream().synchronize()
        return out if xp is cupy else cupy.asnumpy(out)
    except (cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError) as exc:
        raise KernelFault(f"kernel faulted: {exc}") from exc


def _operands(op: str, name: str, args: tuple[Any, ...], *, strict: bool = True) -> dict[str, Any]:
    """The arguments after x by the op's signature (``OpSpec.params``): gamma, beta, eps where the op
    has them. ``strict``: a wrong count is a TypeError naming the signature."""
    params = get_op(op).params[1:]
    if strict and len(args) != len(params):
        raise TypeError(f"{name}(x{''.join(', ' + p for p in params)}) takes {len(params)} "
                        f"further arguments but was given {len(args)}")
    return dict(zip(params, args))


def _ours(name: str, op: str) -> Callable[..., Any]:
    def run(x: Any, *args: Any, build: str = "default") -> Any:
        given = _operands(op, name, args)
        return launch(module(build).get_function(name), op, x, given.get("gamma"), given.get("beta"),
                      given.get("eps"))

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"Launch ``{name}`` from kernels.cu (one block of {THREADS} threads per row)."
    return run


softmaxRowNaive = _ours("softmaxRowNaive", "softmax")
softmaxRowSafe = _ours("softmaxRowSafe", "softmax")
softmaxRowNoBarrier = _ours("softmaxRowNoBarrier", "softmax")
layerNormRowTwoPass = _ours("layerNormRowTwoPass", "layernorm")
layerNormRowWelford = _ours("layerNormRowWelford", "layernorm")
layerNormRowOnePass = _ours("layerNormRowOnePass", "layernorm")
rmsNormRow = _ours("rmsNormRow", "rmsnorm")

_KERNEL_NAME = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)')


def user_kernel(path: Path, *, name: str, op: str, threads: int = THREADS) -> Callable[..., Any]:
    """A user's ``extern "C"`` kernel with the standard signature for ``op``, as a function with the
    op's user signature. Raises FileNotFoundError, KernelCompileError, or LookupError (no such
    kernel), each naming the file."""
    import cupy

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{flag('cuda_source')} {path}: no such file")
    code = path.read_text()
    compiled = compile_source(code, filename=path.name, options=BUILDS["default"])
    try:
        kernel = compiled.get_function(name)
    except cupy.cuda.driver.CUDADriverError:
        found = _KERNEL_NAME.findall(code)
        raise LookupError(f"{flag('kernel')} {name}: not found in {path} (extern \"C\" __global__ kernels "
                          f"there: {', '.join(found) or 'none'})") from None

    def run(x: Any, *args: Any) -> Any:
        given = _operands(op, name, args, strict=False)
        return launch(kernel, op, x, given.get("gamma"), given.get("beta"), given.get("eps"),
                      threads=threads)

    run.__name__ = name
    return run
