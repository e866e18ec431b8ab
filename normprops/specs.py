"""The single registry: ops, their semantics, and every kernel normprops knows how to hunt.

Tests, the CLI and (later) the benchmark iterate over ``OPS`` and ``KERNELS``; nothing else keeps a
list of kernels. A kernel entry says what it computes (``op``), where it runs (``backend``), how many
times it touches the row, how its reduction is shaped (which sets its error bound), which input
families it claims to survive, and, for kept-bad kernels, the bug it demonstrates.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = [
    "OPS",
    "KERNELS",
    "OpSpec",
    "ErrorModel",
    "KnownBug",
    "KernelSpec",
    "FOREIGN_ERROR_MODEL",
    "get_op",
    "kernels_for",
    "backend_status",
    "FLOAT32_EPS",
]

#: ``torch.nn.RMSNorm(eps=None)`` uses the machine epsilon of the compute type: float32's.
FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 1.1920929e-07


@dataclass(frozen=True)
class OpSpec:
    """What an op computes (PyTorch semantics) and how a user function for it is called."""

    name: str
    params: tuple[str, ...]
    default_eps: float | None
    formula: str

    @property
    def signature(self) -> str:
        return f"fn({', '.join(self.params)})"

    @property
    def has_gamma(self) -> bool:
        return "gamma" in self.params

    @property
    def has_beta(self) -> bool:
        return "beta" in self.params


OPS: dict[str, OpSpec] = {
    op.name: op
    for op in (
        OpSpec("softmax", ("x",), None, "exp(x - max x) / sum exp(x - max x), over the last axis"),
        OpSpec(
            "layernorm",
            ("x", "gamma", "beta", "eps"),
            1e-5,
            "(x - mean) / sqrt(var + eps) * gamma + beta, population variance",
        ),
        OpSpec("rmsnorm", ("x", "gamma", "eps"), FLOAT32_EPS, "x / sqrt(mean(x^2) + eps) * gamma"),
    )
}


def get_op(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"op must be one of {sorted(OPS)} but was {name!r}") from None


@dataclass(frozen=True)
class ErrorModel:
    """The shape of a kernel's reduction, which sets the depth ``k`` in the error bounds.

    ``k = ceil(C / threads) - 1 + tree_depth``: each thread adds its strided share sequentially,
    then the partials meet in a tree (or a fold) ``tree_depth`` additions deep. ``rho`` and ``c_x``
    are the softmax constants of NUMERICS.md: ``rho`` 2 for two-pass, 6 for online (rescaling)
    softmax; ``c_x`` 1 for a faithful ``expf``, 3.5 for ``__expf`` / fast math.
    """

    threads: int = 32
    tree_depth: int | None = None
    rho: float = 6.0
    c_x: float = 3.5

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1 but was {self.threads}")

    @property
    def depth_of_tree(self) -> int:
        if self.tree_depth is not None:
            return self.tree_depth
        return math.ceil(math.log2(self.threads)) if self.threads > 1 else 0

    def k(self, cols: int) -> int:
        return max(1, math.ceil(cols / self.threads) - 1 + self.depth_of_tree)


#: A kernel we did not write (a user's function, PyTorch's): NUMERICS.md's T = 32 and the looser
#: softmax constants, so any correct algorithm (online softmax, fast-math exp) passes.
FOREIGN_ERROR_MODEL = ErrorModel(threads=32, rho=6.0, c_x=3.5)

#: The seed's block reduction: 256 threads stride over the row, five shuffle steps collapse each
#: warp, and every thread folds the eight warp totals sequentially (seven more additions).
SEED_BLOCK = ErrorModel(threads=256, tree_depth=5 + 7, rho=2.0, c_x=1.0)


@dataclass(frozen=True)
class KnownBug:
    """The bug a kept-bad kernel demonstrates, and the family that must catch it."""

    family: str
    summary: str


@dataclass(frozen=True)
class KernelSpec:
    name: str
    op: str
    backend: str
    entry: str  # "module:attribute", imported only when the kernel is run
    touches: int  # row touches: reads + writes of the row, counting re-reads
    error_model: ErrorModel
    claims: frozenset[str]
    summary: str
    bug: KnownBug | None = None
    range_safe: bool = field(default=False)

    @property
    def label(self) -> str:
        return f"{self.op}[{self.name}]"

    @property
    def known_bad(self) -> bool:
        return self.bug is not None

    def load(self) -> Callable[..., np.ndarray]:
        module_name, _, attr = self.entry.partition(":")
        return getattr(importlib.import_module(module_name), attr)


_NP = "normprops.backends.numpy_kernels"

# Families each op's correct kernels claim; a kernel drops the ones its algorithm cannot honour.
_SOFTMAX_ALL = frozenset(
    {"ordinary", "overflow_logits", "wide_span", "large_mean", "huge", "tiny", "constant", "ragged",
     "masked", "nonfinite"}
)
_NORM_ALL = frozenset(
    {"ordinary", "wide_span", "large_mean", "huge", "tiny", "eps_scale", "constant", "ragged",
     "nonfinite"}
)

KERNELS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "softmaxRowNaive", "softmax", "numpy", f"{_NP}:softmaxRowNaive", 3, SEED_BLOCK,
        frozenset({"ordinary", "tiny", "ragged", "masked"}),
        "sum of expf(x) then expf(x)/sum; no max shift",
        bug=KnownBug("overflow_logits", "expf(x) overflows above 88.7: inf/inf gives NaN"),
    ),
    KernelSpec(
        "softmaxRowSafe", "softmax", "numpy", f"{_NP}:softmaxRowSafe", 4, SEED_BLOCK,
        _SOFTMAX_ALL, "max pass, sum of expf(x - max), write expf(x - max)/sum", range_safe=True,
    ),
    KernelSpec(
        "layerNormRowTwoPass", "layernorm", "numpy", f"{_NP}:layerNormRowTwoPass", 4, SEED_BLOCK,
        _NORM_ALL - {"huge"}, "mean pass, centred sum of squares pass, write",
    ),
    KernelSpec(
        "layerNormRowWelford", "layernorm", "numpy", f"{_NP}:layerNormRowWelford", 3, SEED_BLOCK,
        _NORM_ALL - {"huge"}, "per-thread Welford, shuffle and block merges (Chan et al.), write",
    ),
    KernelSpec(
        "layerNormRowOnePass", "layernorm", "numpy", f"{_NP}:layerNormRowOnePass", 3, SEED_BLOCK,
        # Its error grows like kappa^2 u: even ordinary rows with mean/std ~ 10 can show it.
        frozenset({"ragged", "tiny", "nonfinite"}),
        "sum and sum of squares in one pass, var = E[x^2] - E[x]^2",
        bug=KnownBug("large_mean", "E[x^2] - E[x]^2 cancels when |mean| >> std"),
    ),
    KernelSpec(
        "rmsNormRow", "rmsnorm", "numpy", f"{_NP}:rmsNormRow", 3, SEED_BLOCK,
        _NORM_ALL - {"huge"}, "sum of squares pass, write x * rsqrtf(ms + eps) * gamma",
    ),
)


def kernels_for(*, op: str | None = None, backend: str | None = None) -> tuple[KernelSpec, ...]:
    if op is not None:
        get_op(op)
    return tuple(
        k for k in KERNELS if (op is None or k.op == op) and (backend is None or k.backend == backend)
    )


def backend_status(backend: str) -> tuple[bool, str]:
    """Whether ``backend`` can run here, and why not when it cannot."""
    if backend == "numpy":
        return True, f"numpy {np.__version__}"
    return False, f"unknown backend {backend!r}"
