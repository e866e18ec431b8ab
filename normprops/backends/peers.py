"""Other libraries' kernels for the same ops, behind one signature: Liger-Kernel (Triton) and QuACK
(CuTe DSL).

``normprops bench`` times them beside ours and PyTorch's, and the hunt can take them as targets. Every
adapter takes and returns torch CUDA tensors of shape (rows, cols) with PyTorch's semantics:

- ``softmax(x)`` over the last dim;
- ``layer_norm(x, gamma, beta, eps)``;
- ``rms_norm(x, gamma, eps)``;
- ``add_rms_norm(x, residual, gamma, eps) -> (out, new_residual)``: ``h = x + residual``, ``out =
  rms_norm(h) * gamma``, ``new_residual = h`` in the storage type (a new tensor for both libraries;
  ours updates the residual in place).

What each library's kernel supports (storage types, widths, alignment) and how it computes, as read
in its source, is data on :class:`PeerOp`; :meth:`PeerOp.unsupported` says why a case is out of its
reach. :func:`peer_status` says whether a library can run here and why not. Nothing heavy is imported
with this module: torch and the libraries load in :func:`peer_status`, :func:`adapter` and
:func:`bind`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from typing import Any, Callable

__all__ = [
    "LIBRARIES",
    "PEER_OP_NAMES",
    "SIGNATURES",
    "Library",
    "PeerOp",
    "PeerUnavailable",
    "PEER_OPS",
    "get_library",
    "peer_ops",
    "get_peer_op",
    "peer_status",
    "adapter",
    "bind",
]

#: The ops an adapter can have, with the signature it takes (PyTorch's semantics throughout).
SIGNATURES = {
    "softmax": "softmax(x)",
    "layernorm": "layer_norm(x, gamma, beta, eps)",
    "rmsnorm": "rms_norm(x, gamma, eps)",
    "addrmsnorm": "add_rms_norm(x, residual, gamma, eps) -> (out, new_residual)",
}
PEER_OP_NAMES = tuple(SIGNATURES)
_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
_ALL_DTYPES = ("float32", "bfloat16", "float16")

#: Liger's RMS norms take a casting mode. "gemma" computes in float32 and rounds once at the store,
#: which is PyTorch's F.rms_norm; the library's default "llama" rounds x * rstd to the storage type
#: before multiplying by gamma in that type (two roundings in bfloat16). Same memory traffic.
LIGER_CASTING_MODE = "gemma"


class PeerUnavailable(RuntimeError):
    """The library cannot run here; the message says why (not installed, version, import error)."""


@dataclass(frozen=True)
class Library:
    name: str  # how normprops names it: "liger", "quack"
    distribution: str  # the package on PyPI
    module: str  # its top-level import
    min_version: str  # the version whose source the adapters were written against
    entry_modules: tuple[str, ...]  # what the adapters import; the status probe imports these
    implementation: str  # which of the library's kernels the adapters call


LIBRARIES: dict[str, Library] = {
    lib.name: lib
    for lib in (
        Library("liger", "liger-kernel", "liger_kernel", "0.8.5",
                ("liger_kernel.ops.softmax", "liger_kernel.ops.layer_norm", "liger_kernel.ops.rms_norm",
                 "liger_kernel.ops.fused_add_rms_norm"),
                # The submodules' autograd Functions are the Triton kernels; liger_kernel.ops itself
                # may swap in another implementation chosen by device and LIGER_KERNEL_IMPL.
                "Triton (liger_kernel.ops.<op> Functions, forward only)"),
        Library("quack", "quack-kernels", "quack", "0.6.5",
                ("quack.softmax", "quack.rmsnorm", "quack.cross_entropy"),
                "CuTe DSL through TVM FFI (compiled on first use per dtype and width)"),
    )
}


def get_library(name: str) -> Library:
    try:
        return LIBRARIES[name]
    except KeyError:
        raise ValueError(f"library must be one of {sorted(LIBRARIES)} but was {name!r}") from None


@dataclass(frozen=True)
class PeerOp:
    """One library's kernel for one op: what it accepts and how it computes."""

    library: str
    op: str  # one of PEER_OP_NAMES
    name: str  # its row in the bench table
    call: str  # the library call the adapter makes
    dtypes: tuple[str, ...]  # storage types (x, out, residual); arithmetic notes in ``math``
    math: str  # how it computes, as read in the library's source
    max_cols: int | None = None  # the widest row it accepts; None: no limit documented or found
    col_align_bytes: int = 1  # cols * itemsize must be a multiple of this
    weight_dtype: str | None = None  # gamma and beta must be this type (bind converts them once)

    @property
    def signature(self) -> str:
        return SIGNATURES[self.op]

    def unsupported(self, *, dtype: str, cols: int) -> str | None:
        """Why a (rows, ``cols``) ``dtype`` input is outside what the kernel accepts, or None."""
        if dtype not in _ITEMSIZE:
            raise ValueError(f"dtype must be one of {sorted(_ITEMSIZE)} but was {dtype!r}")
        if cols < 1:
            raise ValueError(f"cols must be at least 1 but was {cols}")
        if dtype not in self.dtypes:
            return f"{self.name} takes {', '.join(self.dtypes)}, not {dtype}"
        if self.max_cols is not None and cols > self.max_cols:
            return f"{self.name} takes at most {self.max_cols} columns; {cols} is wider"
        if (cols * _ITEMSIZE[dtype]) % self.col_align_bytes:
            return (f"{self.name} needs rows of a multiple of {self.col_align_bytes} bytes "
                    f"({self.col_align_bytes // _ITEMSIZE[dtype]} {dtype} columns); {cols} is not")
        return None


# Liger's launchers size the block as the next power of two of the width and refuse above 65536
# (liger_kernel.ops.utils.calculate_settings); the whole row is held in registers, one program per
# row. Its softmax has a looped path for wider rows, but the same check refuses them first.
_LIGER_MAX = 65536
# QuACK loads 16-byte vectors: its softmax asserts cols % (16 / itemsize) == 0; the norms pick
# gcd(cols, 16 / itemsize) elements per load instead, so any width works (slowly when odd).
_QUACK_VECTOR_BYTES = 16

PEER_OPS: tuple[PeerOp, ...] = (
    PeerOp("liger", "softmax", "liger.softmax", "LigerSoftmaxFunction.apply(x)", _ALL_DTYPES,
           "float32 throughout: tl.max promotes 16-bit rows to float32, so x - max, exp (Triton's: "
           "ex2.approx after a multiply by log2 e), the sum and the division are float32; one "
           "rounding at the store", max_cols=_LIGER_MAX),
    PeerOp("liger", "layernorm", "liger.layer_norm", "LigerLayerNormFunction.apply(x, gamma, beta, eps)",
           _ALL_DTYPES,
           "float32 statistics for every storage type: mean, then the sum of centred squares "
           "(two reductions over the row in registers), rsqrt; one rounding at the store",
           max_cols=_LIGER_MAX),
    PeerOp("liger", "rmsnorm", "liger.rms_norm",
           f"LigerRMSNormFunction.apply(x, gamma, eps, 0.0, {LIGER_CASTING_MODE!r})", _ALL_DTYPES,
           "casting mode 'gemma': float32 sum of squares, rsqrt, x * rstd * gamma in float32, one "
           "rounding (the default 'llama' rounds x * rstd to the storage type first)",
           max_cols=_LIGER_MAX),
    PeerOp("liger", "addrmsnorm", "liger.fused_add_rms_norm",
           f"LigerFusedAddRMSNormFunction.apply(x, residual, gamma, eps, 0.0, {LIGER_CASTING_MODE!r})",
           _ALL_DTYPES,
           "h = x + residual rounded to the storage type and returned as a new tensor; the norm is of "
           "that rounded h, in float32 (casting mode 'gemma')", max_cols=_LIGER_MAX),
    PeerOp("quack", "softmax", "quack.softmax", "quack.softmax(x)", _ALL_DTYPES,
           "online softmax in float32 (max and rescaled sum in one pass), the row kept in shared "
           "memory, split over a thread-block cluster of up to 16 CTAs for wide rows (sm_90)",
           col_align_bytes=_QUACK_VECTOR_BYTES),
    PeerOp("quack", "layernorm", "quack.layernorm", "quack.rmsnorm.layernorm_fwd(x, gamma, beta, eps)",
           _ALL_DTYPES,
           "float32: mean, then the sum of centred squares, rsqrt with fastmath; one rounding; gamma "
           "and beta must be float32 (the adapter converts them, exactly)", weight_dtype="float32"),
    PeerOp("quack", "rmsnorm", "quack.rmsnorm", "quack.rmsnorm(x, gamma, eps=eps)", _ALL_DTYPES,
           "float32 sum of squares, rsqrt with fastmath, one rounding"),
    PeerOp("quack", "addrmsnorm", "quack.rmsnorm+residual",
           "quack.rmsnorm(x, gamma, residual=residual, eps=eps, prenorm=True)", _ALL_DTYPES,
           "h = x + residual in float32; the new residual is h rounded to the residual's type (a new "
           "tensor), the norm is of the unrounded float32 h"),
)


def peer_ops(*, library: str | None = None, op: str | None = None) -> tuple[PeerOp, ...]:
    """The registered peer kernels, optionally of one ``library`` and/or one ``op``."""
    if library is not None:
        get_library(library)
    if op is not None and op not in PEER_OP_NAMES:
        raise ValueError(f"op must be one of {PEER_OP_NAMES} but was {op!r}")
    return tuple(p for p in PEER_OPS if library in (None, p.library) and op in (None, p.op))


def get_peer_op(library: str, op: str) -> PeerOp:
    found = peer_ops(library=library, op=op)
    if not found:
        raise ValueError(f"{library} has no {op} kernel here; it has "
                         f"{', '.join(p.op for p in peer_ops(library=library))}")
    return found[0]


def _version_key(version: str) -> tuple[int, ...]:
    """The leading release numbers: "0.8.5.dev1" -> (0, 8, 5)."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@functools.cache
def peer_status(library: str) -> tuple[bool, str]:
    """(usable, reason): whether ``library`` imports here with a CUDA device, or why not, checked in
    order: installed, version, torch with a GPU, the adapters' modules importing."""
    lib = get_library(library)
    try:
        found = importlib.util.find_spec(lib.module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return False, (f"{lib.distribution} is not installed (pip install {lib.distribution}; with no "
                       f"package index: docs/peers.md)")
    try:
        version = importlib.metadata.version(lib.distribution)
    except importlib.metadata.PackageNotFoundError:
        return False, (f"a module {lib.module!r} is importable but the distribution {lib.distribution} is "
                       f"not installed (another package of that name?)")
    if _version_key(version) < _version_key(lib.min_version):
        return False, (f"{lib.distribution} {version} is older than {lib.min_version}, the version these "
                       f"adapters were written against; upgrade it")
    try:
        import torch
    except Exception as exc:
        return False, (f"{lib.distribution} {version} needs torch, which is not importable "
                       f"({_first_line(exc)})")
    if not torch.cuda.is_available():
        return False, f"{lib.distribution} {version} needs a CUDA device; torch {torch.__version__} sees none"
    for name in lib.entry_modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # ImportError, or a library failing at import (a CUDA or ABI mismatch)
            return False, f"{lib.distribution} {version}: import {name} failed ({_first_line(exc)})"
    return True, f"{lib.distribution} {version}, {lib.implementation}, torch {torch.__version__}"


def _liger_softmax() -> Callable[..., Any]:
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    return lambda x: LigerSoftmaxFunction.apply(x)


def _liger_layernorm() -> Callable[..., Any]:
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return lambda x, gamma, beta, eps: LigerLayerNormFunction.apply(x, gamma, beta, eps)


def _liger_rmsnorm() -> Callable[..., Any]:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    return lambda x, gamma, eps: LigerRMSNormFunction.apply(x, gamma, eps, 0.0, LIGER_CASTING_MODE)


def _liger_addrmsnorm() -> Callable[..., Any]:
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    def add_rms_norm(x: Any, residual: Any, gamma: Any, eps: float) -> tuple[Any, Any]:
        out, new_residual = LigerFusedAddRMSNormFunction.apply(x, residual, gamma, eps, 0.0,
                                                               LIGER_CASTING_MODE)
        return out, new_residual

    return add_rms_norm


# `from quack.softmax import ...` rather than `import quack.softmax`: the package re-exports the
# function softmax under the module's own name.
def _quack_softmax() -> Callable[..., Any]:
    from quack.softmax import softmax

    return lambda x: softmax(x)


def _quack_layernorm() -> Callable[..., Any]:
    import torch
    from quack.rmsnorm import layernorm_fwd

    def layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
        # QuACK's layer norm takes float32 gamma and beta only; the conversion is exact.
        return layernorm_fwd(x, gamma.to(torch.float32), beta.to(torch.float32), eps)

    return layer_norm


def _quack_rmsnorm() -> Callable[..., Any]:
    from quack.rmsnorm import rmsnorm

    return lambda x, gamma, eps: rmsnorm(x, gamma, eps=eps)


def _quack_addrmsnorm() -> Callable[..., Any]:
    from quack.rmsnorm import rmsnorm

    def add_rms_norm(x: Any, residual: Any, gamma: Any, eps: float) -> tuple[Any, Any]:
        out, new_residual = rmsnorm(x, gamma, residual=residual, eps=eps, prenorm=True)
        return out, new_residual

    return add_rms_norm


#: Each library's kernel for each op, built on first use (the library imported then).
_FACTORIES: dict[str, dict[str, Callable[[], Callable[..., Any]]]] = {
    "liger": {"softmax": _liger_softmax, "layernorm": _liger_layernorm, "rmsnorm": _liger_rmsnorm,
              "addrmsnorm": _liger_addrmsnorm},
    "quack": {"softmax": _quack_softmax, "layernorm": _quack_layernorm, "rmsnorm": _quack_rmsnorm,
              "addrmsnorm": _quack_addrmsnorm},
}

#: The arguments each op's kernel takes after x, in order (the op's signature: :data:`SIGNATURES`).
_OPERANDS: dict[str, tuple[str, ...]] = {"softmax": (), "layernorm": ("gamma", "beta", "eps"),
                                         "rmsnorm": ("gamma", "eps"),
                                         "addrmsnorm": ("residual", "gamma", "eps")}


@functools.cache
def adapter(library: str, op: str) -> Callable[..., Any]:
    """``library``'s kernel for ``op`` with the op's signature (:data:`SIGNATURES`) on torch CUDA
    tensors. Raises :class:`PeerUnavailable` when the library cannot run here."""
    peer = get_peer_op(library, op)
    ok, why = peer_status(library)
    if not ok:
        raise PeerUnavailable(f"{library}: {why}")
    fn = _FACTORIES[library][op]()
    fn.__name__ = fn.__qualname__ = peer.name.replace(".", "_").replace("+", "_")
    fn.__doc__ = f"{peer.call}: {peer.signature}. {peer.math}."
    return fn


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def bind(peer: PeerOp, *, x: Any, gamma: Any = None, beta: Any = None, residual: Any = None,
         eps: float | None = None) -> Callable[[], Any]:
    """A zero-argument call of ``peer`` on fixed tensors (what the bench times): the shape and types
    are checked, and gamma / beta converted to the kernel's weight type, once, here."""
    import torch

    if x.dim() != 2 or not x.is_cuda:
        raise ValueError(f"x must be a 2-D CUDA tensor but was {x.dim()}-D on {x.device}")
    why = peer.unsupported(dtype=_dtype_name(x), cols=x.shape[1])
    if why is not None:
        raise ValueError(why)
    needs = _OPERANDS[peer.op]
    given = {"gamma": gamma, "beta": beta, "residual": residual, "eps": eps}
    missing = [n for n in needs if given[n] is None]
    if missing:
        raise ValueError(f"{peer.name} ({peer.signature}) needs {', '.join(missing)}")
    if peer.weight_dtype is not None:
        kind = getattr(torch, peer.weight_dtype)
        gamma = None if gamma is None else gamma.to(kind)
        beta = None if beta is None else beta.to(kind)
    fn = adapter(peer.library, peer.op)
    operands = {"gamma": gamma, "beta": beta, "residual": residual, "eps": eps}  # converted
    args = (x, *(operands[n] for n in needs))
    return lambda: fn(*args)
