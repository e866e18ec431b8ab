"""Targets: anything the hunt can call on a case, with the contract checked on every call.

A target is one of our registered kernels (``KernelSpec``) or a user's Python function named as
``MODULE:FUNC``. Either way it is called with the op's user signature (softmax ``fn(x)``, layernorm
``fn(x, gamma, beta, eps)``, rmsnorm ``fn(x, gamma, eps)``) on private copies of the inputs, and what
comes back must be a float32 numpy array of ``x``'s shape.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from normprops.specs import FOREIGN_ERROR_MODEL, ErrorModel, KernelSpec, get_op
from normprops.strategies import Case

__all__ = ["Target", "ContractError", "ImplError", "FatalTargetError", "GPU_BACKENDS",
           "target_from_spec", "target_from_impl", "target_from_cuda_source"]


class ContractError(Exception):
    """The target broke the calling contract (wrong output type, shape, dtype; mutated input)."""


class FatalTargetError(RuntimeError):
    """The target cannot be called again in this process (a GPU fault poisons the CUDA context):
    the hunt stops at the case that caused it and reports it."""


class ImplError(ValueError):
    """``MODULE:FUNC`` could not be resolved to a callable (a usage error, not a finding)."""


@dataclass(frozen=True)
class Target:
    name: str
    op: str
    backend: str
    fn: Callable[..., object]
    error_model: ErrorModel
    claims: frozenset[str] | None = None  # None: a foreign target claims nothing in advance
    # GPU targets: determinism and row isolation are also checked on the case's rows tiled into a
    # batch this large, launched twice, so a race has thousands of blocks to show itself in.
    stress_rows: int = 0
    exempt: frozenset[str] = frozenset()  # properties not judged (see KernelSpec.exempt)
    timeout_s: float | None = None  # a call that does not return in time stops the hunt
    dtype: str = "float32"  # storage type: the hunt's cases hold values exact in it

    @property
    def label(self) -> str:
        return f"{self.op}[{self.name}]"

    def run(self, case: Case) -> np.ndarray:
        """Call the target on copies of ``case``'s inputs and check what comes back."""
        if case.op != self.op:
            raise ValueError(f"case is for op {case.op!r} but target {self.label} computes {self.op!r}")
        if case.dtype != self.dtype:
            raise ValueError(f"case holds {case.dtype} values but target {self.label} stores {self.dtype}")
        args = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in case.args())
        out = _call_with_timeout(self.fn, args, self.timeout_s)
        if not isinstance(out, np.ndarray):
            raise ContractError(f"returned {type(out).__module__}.{type(out).__qualname__}; "
                                f"expected a numpy float32 array of shape {case.x.shape}")
        if out.shape != case.x.shape:
            raise ContractError(f"returned shape {out.shape}; expected {case.x.shape}")
        if out.dtype != np.float32:
            raise ContractError(f"returned dtype {out.dtype}; expected float32")
        for name, before, after in zip(get_op(self.op).params, case.args(), args):
            if isinstance(before, np.ndarray) and not np.array_equal(before, after, equal_nan=True):
                raise ContractError(f"modified its input {name} in place")
        return out


GPU_BACKENDS = frozenset({"cuda", "cuda-prod", "torch-cuda", "cuda-user"})
GPU_STRESS_ROWS = 2048


class _CallTimeout(BaseException):
    """Raised by SIGALRM inside a user's function; a BaseException so ``except Exception`` in the
    user's code cannot swallow it."""


def _call_with_timeout(fn: Callable[..., object], args: tuple[object, ...],
                       seconds: float | None) -> object:
    """``fn(*args)``, interrupted after ``seconds`` (a Python-level loop stops at once; a long C
    call, when it returns). Only where SIGALRM is usable: the main thread of a Unix process."""
    if seconds is None or not hasattr(signal, "setitimer") or (
            threading.current_thread() is not threading.main_thread()):
        return fn(*args)

    def expire(signum: int, frame: object) -> None:
        raise _CallTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args)
    except _CallTimeout:
        raise FatalTargetError(f"did not return within {seconds:g} s (--call-timeout)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def target_from_spec(spec: KernelSpec) -> Target:
    stress = GPU_STRESS_ROWS if spec.backend in GPU_BACKENDS else 0
    return Target(spec.name, spec.op, spec.backend, spec.load(), spec.error_model, spec.claims,
                  stress_rows=stress, exempt=spec.exempt, dtype=spec.dtype)


def target_from_impl(impl: str, *, op: str, threads: int | None = None,
                     timeout_s: float | None = None) -> Target:
    """Resolve ``MODULE:FUNC`` (importable from the current directory or PYTHONPATH)."""
    get_op(op)
    module_name, sep, attr = impl.partition(":")
    if not sep or not module_name or not attr:
        raise ImplError(f"--impl must look like MODULE:FUNC (e.g. mykernels:softmax) but was {impl!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of the user's module is a usage error
        raise ImplError(f"cannot import module {module_name!r} for --impl {impl}: "
                        f"{type(exc).__name__}: {exc}") from exc
    fn: object = module
    for part in attr.split("."):
        try:
            fn = getattr(fn, part)
        except AttributeError:
            raise ImplError(f"module {module_name!r} has no attribute {attr!r} (--impl {impl})") from None
    if not callable(fn):
        raise ImplError(f"--impl {impl} names a {type(fn).__name__}, not a function")
    model = FOREIGN_ERROR_MODEL if threads is None else replace(FOREIGN_ERROR_MODEL, threads=threads)
    return Target(attr, op, "python", fn, model, timeout_s=timeout_s)


def target_from_cuda_source(path: str, *, op: str, kernel: str, threads: int = 256) -> Target:
    """A user's CUDA kernel (standard signature for ``op``, one block of ``threads`` per row)."""
    get_op(op)
    from normprops._cuda import KernelCompileError, cuda_status

    ok, why = cuda_status()
    if not ok:
        raise ImplError(f"--cuda-source needs a usable CUDA GPU: {why}")
    from normprops.backends.cuda_kernels import KernelFault, user_kernel

    try:
        fn = user_kernel(Path(path), name=kernel, op=op, threads=threads)
    except (FileNotFoundError, LookupError, KernelCompileError) as exc:
        raise ImplError(str(exc)) from exc

    def guarded(*args: object) -> object:
        try:
            return fn(*args)
        except KernelFault as exc:
            raise FatalTargetError(str(exc)) from exc

    return Target(kernel, op, "cuda-user", guarded, replace(FOREIGN_ERROR_MODEL, threads=threads),
                  stress_rows=GPU_STRESS_ROWS)
