"""The single registry: ops, their semantics, and every kernel normprops knows how to hunt.

Tests, the CLI and the benchmark iterate over ``OPS`` and ``KERNELS``; nothing else keeps a
list of kernels. A kernel entry says what it computes (``op``), where it runs (``backend``), how many
times it touches the row, how its reduction is shaped (which sets its error bound), which input
families it claims to survive, and, for kept-bad kernels, the bug it demonstrates.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from normprops.case import ShapeConstraints
from normprops.cuda.shape import (
    CLUSTER_TREE_DEPTH,
    MAX_ROW_THREADS,
    PORTABLE_CLUSTER,
    Shape,
    cluster_shape,
    elements_per_thread,
    shape_for,
)
from normprops.dtypes import get_dtype
from normprops.ops import FLOAT32_EPS, OPS, OpSpec, get_op

__all__ = [
    "OPS",
    "KERNELS",
    "OpSpec",
    "ErrorModel",
    "KnownBug",
    "KernelSpec",
    "FOREIGN_ERROR_MODEL",
    "REDUCTIONS",
    "TREE_LEAF_DEPTH",
    "get_op",
    "backend_status",
    "FLOAT32_EPS",
]

#: What a reduction may look like (``ErrorModel.reduction``; docs/tolerances.md, "Reduction depth").
REDUCTIONS = ("sequential", "tree")
#: Additions on a tree reduction's longest path beyond ceil(log2 C): short sequential leaves and
#: an unrolled fold. numpy's np.sum (blocks of 128 summed by 8 accumulators of 16 values, folded
#: in 3 steps, then a tail of up to 7) reaches ceil(log2 C) + 18.
TREE_LEAF_DEPTH = 18


@dataclass(frozen=True)
class ErrorModel:
    """The shape of a kernel's reduction, which sets the depth ``k`` in the error bounds.

    ``reduction="sequential"``: ``k = ceil(C / threads) - 1 + tree_depth``, each thread adds its
    strided share sequentially, then the partials meet in a tree (or a fold) ``tree_depth``
    additions deep. ``reduction="tree"``: a pairwise tree over the whole row,
    ``k = ceil(log2 C) + TREE_LEAF_DEPTH`` whatever ``threads`` says. ``rho`` and ``c_x`` are the
    softmax constants: ``rho`` 2 for two-pass, 6 for online (rescaling) softmax; ``c_x`` 1 for a
    faithful ``expf``, 3.5 for ``__expf`` / fast math.
    """

    threads: int = 32
    tree_depth: int | None = None
    # Threads that grow with the row (normprops/cuda/prod.cu): the register path's launch shape for
    # at most ``per_thread`` elements per thread in 16-byte vectors of ``vector_width`` elements
    # (normprops.cuda.shape), the streaming path's ``threads`` beyond it. None: always ``threads``.
    per_thread: int | None = None
    vector_width: int = 4
    # Rows past one block's registers may instead take the cluster path (prod.cu's softmax on sm_90
    # and later, decided by the GPU): the depth is then the larger of the two paths'.
    cluster: bool = False
    rho: float = 6.0
    c_x: float = 3.5
    # Flush-to-zero arithmetic: subnormal operands and results may become 0. A kernel declares it
    # (--ftz); our CUDA builds are IEEE (normprops.cuda.build.build_flushes measures it) except where a
    # kernel asks for a flushing instruction itself.
    ftz: bool = False
    reduction: str = "sequential"
    # The type the kernel computes in: float32 (the default, whatever the storage type), or
    # bfloat16 for a kernel whose every operation rounds to bfloat16 (JAX's and Flax's defaults on
    # bfloat16 arrays). The bounds keep their shape with u = 2^-8 in place of 2^-24; bfloat16 has
    # float32's exponent range, so nothing else changes (docs/tolerances.md).
    arithmetic: str = "float32"

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1 but was {self.threads}")
        if self.arithmetic not in ("float32", "bfloat16"):
            raise ValueError(f"arithmetic must be 'float32' or 'bfloat16' but was {self.arithmetic!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS} but was {self.reduction!r}; "
                             f"'sequential' with threads=T for T threads that each add their share "
                             f"in turn, 'tree' for a pairwise reduction")

    @property
    def unit_roundoff(self) -> float:
        """u of the arithmetic: 2^-24 for float32, 2^-8 for bfloat16."""
        return 2.0**-24 if self.arithmetic == "float32" else 2.0**-8

    def _shape(self, cols: int) -> Shape:
        shape = shape_for(max(cols, 1), vector_width=self.vector_width, per_thread=self.per_thread)
        return shape if shape.vpt else Shape(0, self.threads, 1)

    def threads_for(self, cols: int) -> int:
        if self.per_thread is None:
            return self.threads
        return self._shape(cols).tpr

    def per_thread_for(self, cols: int) -> int:
        """The most elements one thread adds in turn."""
        if self.per_thread is None:
            return math.ceil(cols / self.threads)
        return elements_per_thread(max(cols, 1), self._shape(cols), vector_width=self.vector_width)

    def depth_of_tree(self, threads: int) -> int:
        if self.tree_depth is not None:
            return self.tree_depth
        return math.ceil(math.log2(threads)) if threads > 1 else 0

    def k(self, cols: int) -> int:
        if self.reduction == "tree":
            return max(1, math.ceil(math.log2(max(cols, 1))) + TREE_LEAF_DEPTH)
        k = max(1, self.per_thread_for(cols) - 1 + self.depth_of_tree(self.threads_for(cols)))
        if self.cluster and self.per_thread is not None and self._shape(cols).vpt == 0:
            shape = cluster_shape(cols, vector_width=self.vector_width)
            if shape is not None:  # a block's tree, then ceil(log2(blocks)) levels across the cluster
                held = elements_per_thread(cols, shape, vector_width=self.vector_width)
                k = max(k, held - 1 + self.depth_of_tree(shape.tpr) + self.depth_of_tree(shape.cluster))
        return k


#: A kernel we did not write (a user's function, PyTorch's): T = 32 and the looser softmax
#: constants, so any correct algorithm (online softmax, fast-math exp) passes; IEEE arithmetic
#: (subnormals kept) unless the kernel declares flushing: ``replace(model, ftz=True)``.
FOREIGN_ERROR_MODEL = ErrorModel(threads=32, rho=6.0, c_x=3.5, ftz=False)

#: The textbook kernels' block reduction: 256 threads stride over the row, five shuffle steps collapse each
#: warp, and every thread folds the eight warp totals sequentially (seven more additions).
TEXTBOOK_BLOCK = ErrorModel(threads=256, tree_depth=5 + 7, rho=2.0, c_x=1.0)


@dataclass(frozen=True)
class KnownBug:
    """The bug a kept-bad kernel demonstrates, the family that must catch it, and (when one property
    shows it) that property."""

    family: str
    summary: str
    property: str | None = None
    # "hunt": a hunt of the family catches it within the ci profile's 100 examples, whatever the
    # seed (docs/known-bugs.md measures it; ``example`` makes sure of it where draws need luck);
    # "racecheck": a race the hunt may never see on a given GPU, caught by compute-sanitizer
    # --tool racecheck (tests/test_gpu.py).
    detector: str = "hunt"
    # The narrowest rows that show it: a shrunk counterexample is expected within twice this (or
    # 64 columns), on at most three rows.
    shows_from_cols: int = 1
    # A fixture in normprops/known/ whose minimal input shows the bug: a registry hunt of the
    # family tries it first (a Hypothesis explicit example), so a bug that random draws reach only
    # with luck (a wide row of one shape, an error just past the bound) is met by every hunt.
    example: str | None = None


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
    # Known bugs, each in the family that shows it: our kept-bad kernels', and what the hunt found
    # in other projects' kernels (docs/ecosystem.md). A family with a known bug is hunted for it
    # (it must still be caught), not as a claim.
    bugs: tuple[KnownBug, ...] = ()
    # Properties the kernel does not promise on its claimed families (a known bug in them is
    # hunted separately, as a bug): e.g. PyTorch's CUDA softmax is not batch-invariant.
    exempt: frozenset[str] = frozenset()
    bench: bool = True  # a row of the bandwidth table (normprops bench) on the GPU
    dtype: str = "float32"  # storage type it reads and writes (arithmetic is float32 throughout)
    # The arrays the entry point takes: "numpy" (float32 values exact in ``dtype``, whatever the
    # storage type: our launchers convert) or a framework's own ("torch", "jax") in ``dtype``.
    framework: str = "numpy"
    device: str | None = None  # for a framework's arrays: where they live (None: its default)
    constraints: ShapeConstraints = ShapeConstraints()  # the widths its claims are hunted at
    # The widths its known bugs are hunted at, where a bug of its own takes some widths away from
    # the claims (QuACK's bfloat16 norms at odd widths); None: the same as ``constraints``.
    bug_widths: ShapeConstraints | None = None

    @property
    def bug_constraints(self) -> ShapeConstraints:
        return self.constraints if self.bug_widths is None else self.bug_widths

    @property
    def label(self) -> str:
        return f"{self.op}[{self.name}]"

    @property
    def bug(self) -> KnownBug | None:
        """The first known bug (our kept-bad kernels have one)."""
        return self.bugs[0] if self.bugs else None

    def bug_in(self, family: str) -> KnownBug | None:
        return next((b for b in self.bugs if b.family == family), None)

    def expectation(self, family: str) -> str:
        """What the registry declares on ``family``: "bug" (a known bug lives there, and every hunt
        of the family must catch it), "claim", or "unclaimed". A race found by compute-sanitizer
        (``detector="racecheck"``) is no hunt's to catch: its family is hunted as unclaimed."""
        bug = self.bug_in(family)
        if bug is not None and bug.detector == "hunt":
            return "bug"
        return "claim" if family in self.claims and bug is None else "unclaimed"

    @property
    def known_bad(self) -> bool:
        return bool(self.bugs)

    def load(self) -> Callable[..., np.ndarray]:
        module_name, _, attr = self.entry.partition(":")
        return getattr(importlib.import_module(module_name), attr)


# Families each op's correct kernels claim; a kernel drops the ones its algorithm cannot honour.
_SOFTMAX_ALL = frozenset(
    {"ordinary", "overflow_logits", "wide_span", "large_mean", "huge", "tiny", "constant", "ragged",
     "masked", "nonfinite"}
)
_NORM_ALL = frozenset(
    {"ordinary", "wide_span", "large_mean", "huge", "tiny", "eps_scale", "constant", "ragged",
     "nonfinite"}
)

#: Where each backend's callables live; a kernel's entry is ``<module>:<name>``.
BACKEND_MODULES = {
    "numpy": "normprops.backends.numpy_kernels",
    "cuda": "normprops.cuda.textbook",
    "cuda-prod": "normprops.cuda.prod",
    # prod.cu's cluster path, forced at every width (it needs thread-block clusters: sm_90 and later)
    "cuda-cluster": "normprops.cuda.prod",
    "torch-cuda": "normprops.backends.torch_kernels",
    "torch-cpu": "normprops.backends.torch_kernels",
}

# The textbook kernels, identical on the numpy emulation and on the GPU (kernels.cu).
_TEXTBOOK_KERNELS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "softmaxRowNaive", "softmax", "", "", 3, TEXTBOOK_BLOCK,
        frozenset({"ordinary", "tiny", "ragged", "masked"}),
        "sum of expf(x) then expf(x)/sum; no max shift",
        bugs=(KnownBug("overflow_logits", "expf(x) overflows above 88.7: inf/inf gives NaN"),),
    ),
    KernelSpec(
        "softmaxRowSafe", "softmax", "", "", 4, TEXTBOOK_BLOCK,
        _SOFTMAX_ALL, "max pass, sum of expf(x - max), write expf(x - max)/sum",
    ),
    KernelSpec(
        "layerNormRowTwoPass", "layernorm", "", "", 4, TEXTBOOK_BLOCK,
        _NORM_ALL - {"huge"}, "mean pass, centred sum of squares pass, write",
    ),
    KernelSpec(
        "layerNormRowWelford", "layernorm", "", "", 3, TEXTBOOK_BLOCK,
        _NORM_ALL - {"huge"}, "per-thread Welford, shuffle and block merges (Chan et al.), write",
    ),
    KernelSpec(
        "layerNormRowOnePass", "layernorm", "", "", 3, TEXTBOOK_BLOCK,
        # Its error grows like kappa^2 u: ordinary rows with mean/std ~ 10 show it, and a single
        # column with eps 1e-12 gets a negative variance (NaN). Only underflowing rows are safe.
        frozenset({"tiny"}),
        "sum and sum of squares in one pass, var = E[x^2] - E[x]^2",
        bugs=(KnownBug("large_mean", "E[x^2] - E[x]^2 cancels when |mean| >> std"),), bench=False,
    ),
    KernelSpec(
        "rmsNormRow", "rmsnorm", "", "", 3, TEXTBOOK_BLOCK,
        _NORM_ALL - {"huge"}, "sum of squares pass, write x * rsqrtf(ms + eps) * gamma",
    ),
)

#: Kept-bad kernels that only exist on the GPU (a race has no numpy emulation).
_CUDA_ONLY: tuple[KernelSpec, ...] = (
    KernelSpec(
        "softmaxRowNoBarrier", "softmax", "cuda", f"{BACKEND_MODULES['cuda']}:softmaxRowNoBarrier",
        4, TEXTBOOK_BLOCK, frozenset(),
        "softmaxRowSafe without the barrier between the max and the sum reductions", bench=False,
        bugs=(KnownBug("ordinary", "shared-memory race: the sum reduction overwrites maxima still "
                                 "being read", property="determinism", detector="racecheck"),),
    ),
)


def _on(backend: str, spec: KernelSpec) -> KernelSpec:
    return replace(spec, backend=backend, entry=f"{BACKEND_MODULES[backend]}:{spec.name}")


# PyTorch's kernels, hunted as foreign code (the T = 32 error model of docs/tolerances.md).
# F.rms_norm is known not to be range-safe (a float32 row of 3e19 gives 0); nothing here claims
# 'huge' for the norms.
_TORCH = (
    ("torch.softmax", "softmax", "softmax", _SOFTMAX_ALL),
    ("F.layer_norm", "layernorm", "layer_norm", _NORM_ALL - {"huge"}),
    ("F.rms_norm", "rmsnorm", "rms_norm", _NORM_ALL - {"huge"}),
)
_TORCH_KERNELS: tuple[KernelSpec, ...] = tuple(
    KernelSpec(name, op, f"torch-{device}", f"{BACKEND_MODULES['torch-' + device]}:{attr}_{device}",
               2, FOREIGN_ERROR_MODEL, claims, f"PyTorch's {name} on the {device.upper()}")
    for device in ("cuda", "cpu")
    for name, op, attr, claims in _TORCH
)
# Found by the hunt on CUDA: torch.softmax on CUDA picks its reduction by
# shape, so a row's result changes with the number of rows beside it (2 rows vs 3, at 16383 cols).
_TORCH_KERNELS = tuple(
    replace(k, exempt=frozenset({"batch_invariance"}),
            bugs=(KnownBug("ragged", "batch-variant: a row's bits depend on the batch size",
                         property="batch_invariance", shows_from_cols=16383,
                         example="torch.softmax-ragged.json"),))
    if (k.name, k.backend) == ("torch.softmax", "torch-cuda") else k
    for k in _TORCH_KERNELS
)

# The production kernels of prod.cu: range-safe, so the norms claim 'huge' too. Threads
# per row grow with the row (prod_layout's 32 or 64 elements per thread at most, 512 threads at
# most on the register path, 1024 streaming, normprops.cuda.shape); the forced streaming variants
# always use 1024 threads, the forced cluster ones 8 blocks of 512. Their softmax constants allow the
# online rescaling of the streaming path (rho 6); expf is CUDA's faithful one (c_x 1) in float32,
# while the 16-bit softmax takes ex2.approx (fast-math c_x 3.5; prod.cu's expOf says why that is
# still far below the output's rounding).
#: Register path: at most this many elements per thread (normprops.cuda.prod.launch_shape reads it too).
PROD_PER_THREAD = 32


def prod_layout(op: str, dtype: str) -> tuple[int, bool]:
    """(elements per thread, packed 16-bit register storage) of a production kernel, from the
    launch-shape sweeps (tools/sweep_prod.py, docs/performance.md): 16-bit values stay packed two per register, 64 of them per
    thread (twice the bytes in flight of 32, which 16-bit rows need to reach the copy floor); the
    fused kernel holds its two inputs at once while loading, so 32."""
    if dtype == "float32" or op == "rmsnormbf16acc":
        return PROD_PER_THREAD, False
    return (32 if op == "addrmsnorm" else 64), True


FAST_EXP_C_X = 3.5  # docs/tolerances.md's constant for a fast-math exp
PROD_BLOCK = ErrorModel(threads=1024, per_thread=PROD_PER_THREAD, rho=6.0, c_x=1.0)
PROD_STREAM = ErrorModel(threads=1024, rho=6.0, c_x=1.0)
_PROD_FAMILIES = {"softmax": _SOFTMAX_ALL, "layernorm": _NORM_ALL, "rmsnorm": _NORM_ALL}
_PROD_SUMMARY = {
    "softmax": "row in registers: max, sum of expf(x - max), divide; 16-byte vectors",
    "layernorm": "row in registers, scaled by 2^-e of its max: mean, centred squares, write",
    "rmsnorm": "row in registers, scaled by 2^-e of its max: sum of squares, write",
    "addrmsnorm": "h = x + residual in registers, residual <- h, RMS norm of h (hunted via an exact split)",
}


#: Every production kernel: name -> (prod.cu op, storage type, path). "stream" forces the
#: streaming path at any width, so the hunt reaches it with small rows.
PROD_VARIANTS: dict[str, tuple[str, str, str]] = {
    **{f"{base}{suffix}": (op, dtype, "auto")
       for base, op in (("softmaxFast", "softmax"), ("layerNormFast", "layernorm"),
                        ("rmsNormFast", "rmsnorm"), ("addRmsNormFast", "addrmsnorm"))
       for suffix, dtype in (("", "float32"), ("Bf16", "bfloat16"), ("F16", "float16"))},
    **{f"{base}Stream": (op, "float32", "stream")
       for base, op in (("softmax", "softmax"), ("layerNorm", "layernorm"), ("rmsNorm", "rmsnorm"),
                        ("addRmsNorm", "addrmsnorm"))},
    "softmaxCluster": ("softmax", "float32", "cluster"),
    "softmaxClusterBf16": ("softmax", "bfloat16", "cluster"),
    "rmsNormBf16Acc": ("rmsnormbf16acc", "bfloat16", "auto"),
}


def _prod(name: str) -> KernelSpec:
    op, dtype, path = PROD_VARIANTS[name]
    user_op = "rmsnorm" if op in ("addrmsnorm", "rmsnormbf16acc") else op
    claims = _PROD_FAMILIES[user_op]
    if dtype == "float16":
        # float16 cannot hold the 'huge' rows (they saturate at 65504): nothing to claim there.
        claims = claims - {"huge"}
    touches = 4 if op == "addrmsnorm" else 2
    summary = _PROD_SUMMARY.get(op, "")
    width = 16 // get_dtype(dtype).itemsize
    if path == "stream":
        summary = "streaming path forced: online statistics in pass 1, read again and write in pass 2"
        model = PROD_STREAM
    elif path == "cluster":
        summary = ("cluster path forced: the row in the registers of 8 blocks of 512 threads, "
                   "online statistics per block merged through distributed shared memory")
        # A thread adds at most ceil(cols / 4096) + W - 1 elements (whole vectors of W), then a
        # tree 9 levels deep in its block and 3 across the cluster.
        model = ErrorModel(threads=PORTABLE_CLUSTER * MAX_ROW_THREADS,
                           tree_depth=CLUSTER_TREE_DEPTH + width - 1, rho=6.0, c_x=1.0)
    else:
        model = replace(PROD_BLOCK, per_thread=prod_layout(op, dtype)[0], vector_width=width,
                        cluster=op == "softmax")
    if op == "softmax" and dtype != "float32":
        # ex2.approx.ftz.f32 (prod.cu's expOf): a fast exp that flushes subnormal results.
        model = replace(model, c_x=FAST_EXP_C_X, ftz=True)
    backend = "cuda-cluster" if path == "cluster" else "cuda-prod"
    return KernelSpec(name, user_op, backend, f"{BACKEND_MODULES[backend]}:{name}", touches,
                      model, claims,
                      f"{summary} ({dtype})", dtype=dtype, bench=path == "auto")


_PROD_KERNELS: tuple[KernelSpec, ...] = (
    *(_prod(name) for name in PROD_VARIANTS if name != "rmsNormBf16Acc"),
    replace(_prod("rmsNormBf16Acc"), claims=frozenset(), bench=False,
            summary="rmsNormFastBf16 with the sum of squares rounded to bfloat16 after every addition",
            bugs=(KnownBug("ordinary", "accumulates in bfloat16: 8 significant bits lose the sum",
                         property="accuracy"),)),
)

# Other projects' kernels (normprops/backends/ecosystem.py), present when the library imports. What
# each promises, as its documentation or source says: none promises batch invariance, so none is
# judged on it; none of the norms scales its rows, so none claims "huge" (range safety); Flax's
# LayerNorm defaults to use_fast_variance=True ("faster, but less numerically stable": E[x^2] -
# E[x]^2) and jax.nn.standardize computes E[x^2] - E[x]^2 (its source says so). Its error grows
# like kappa^2 u (kappa = |mean| / std), which every family that draws |mean| >> std shows:
# large_mean, the spiked rows of constant, and ordinary's rows of loc 1-3 and scale 0.1 (kappa up
# to ~80 over a few columns: err/tol 1.4-8.7 in deep hunts). Neither claims those three families.
# QuACK's softmax loads 16-byte vectors and asserts rows of a multiple of 16 bytes.
_NOT_PROMISED = frozenset({"batch_invariance"})
_ONE_PASS_VARIANCE_LIMITS = frozenset({"huge", "large_mean", "constant", "ordinary"})
_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
_ECOSYSTEM_OPS: tuple[tuple[str, str, str, str, frozenset[str], str], ...] = (
    # backend, entry op, user op, name, claims, how it computes
    ("torch-compile", "softmax", "softmax", "compiled.softmax", _SOFTMAX_ALL,
     "torch.compile(dynamic=True) of torch.softmax (Inductor's generated Triton kernel)"),
    ("torch-compile", "layernorm", "layernorm", "compiled.layer_norm", _NORM_ALL - {"huge"},
     "torch.compile(dynamic=True) of F.layer_norm"),
    ("torch-compile", "rmsnorm", "rmsnorm", "compiled.rms_norm", _NORM_ALL - {"huge"},
     "torch.compile(dynamic=True) of F.rms_norm"),
    ("liger", "softmax", "softmax", "liger.softmax", _SOFTMAX_ALL,
     "Liger-Kernel's Triton softmax (float32 inside)"),
    ("liger", "layernorm", "layernorm", "liger.layer_norm", _NORM_ALL - {"huge"},
     "Liger-Kernel's Triton layer norm (float32 statistics)"),
    ("liger", "rmsnorm", "rmsnorm", "liger.rms_norm", _NORM_ALL - {"huge"},
     "Liger-Kernel's Triton RMS norm, casting mode 'gemma' (float32 inside)"),
    ("liger", "addrmsnorm", "rmsnorm", "liger.fused_add_rms_norm", _NORM_ALL - {"huge"},
     "Liger-Kernel's fused add + RMS norm, hunted as rms_norm(x) on an exact split x = a + b"),
    ("quack", "softmax", "softmax", "quack.softmax", _SOFTMAX_ALL,
     "QuACK's CuTe DSL online softmax (float32 inside)"),
    ("quack", "layernorm", "layernorm", "quack.layernorm", _NORM_ALL - {"huge"},
     "QuACK's CuTe DSL layer norm (float32 gamma and beta)"),
    ("quack", "rmsnorm", "rmsnorm", "quack.rmsnorm", _NORM_ALL - {"huge"},
     "QuACK's CuTe DSL RMS norm"),
    ("quack", "addrmsnorm", "rmsnorm", "quack.rmsnorm+residual", _NORM_ALL - {"huge"},
     "QuACK's rmsnorm with a residual, hunted as rms_norm(x) on an exact split x = a + b"),
    ("jax", "softmax", "softmax", "jax.nn.softmax", _SOFTMAX_ALL, "jax.jit of jax.nn.softmax(x, axis=-1)"),
    ("jax", "layernorm", "layernorm", "jax.nn.standardize", _NORM_ALL - _ONE_PASS_VARIANCE_LIMITS,
     "jax.jit of jax.nn.standardize(x, epsilon=eps) * gamma + beta (variance as E[x^2] - E[x]^2)"),
    ("flax", "layernorm", "layernorm", "flax.LayerNorm", _NORM_ALL - _ONE_PASS_VARIANCE_LIMITS,
     "jax.jit of flax.linen.LayerNorm with its defaults (use_fast_variance=True)"),
    ("flax", "rmsnorm", "rmsnorm", "flax.RMSNorm", _NORM_ALL - {"huge"},
     "jax.jit of flax.linen.RMSNorm with its defaults"),
)


def _ecosystem(backend: str, entry_op: str, op: str, name: str, claims: frozenset[str],
               summary: str, dtype: str) -> KernelSpec:
    framework = "jax" if backend in ("jax", "flax") else "torch"
    constraints = ShapeConstraints()
    if backend == "quack" and entry_op == "softmax":
        constraints = ShapeConstraints(cols_multiple_of=16 // {"float32": 4}.get(dtype, 2))
    # JAX computes jax.nn's ops in the arrays' own type (its type promotion rules): on bfloat16
    # arrays every exp, sum and division rounds to bfloat16. Flax's norms take their statistics
    # in float32, as torch and the CUDA libraries do.
    model = FOREIGN_ERROR_MODEL
    if backend == "jax" and dtype == "bfloat16":
        model = replace(model, arithmetic="bfloat16")
    if backend == "torch-compile":
        # Inductor's looped reduction: R0_BLOCK lanes each add every R0_BLOCK-th element in turn,
        # then tl.sum folds the lanes. With dynamic=True the block is tuned once, for the size hint
        # of the first shape compiled, and kept for every later width; a process whose first rows
        # are narrow (a hunt's always are) gets R0_BLOCK = 2, so a row of 16385 is two sequential
        # sums of 8193 (the compiled RMS norm's outputs on constant rows match that emulation to
        # 1 ulp at 257-16385 columns, 148-302 ulps from the exact result). T = 2 describes it.
        model = replace(model, threads=2)
    module = "normprops.backends.ecosystem"
    return KernelSpec(f"{name}-{_SHORT[dtype]}", op, backend,
                      f"{module}:{backend.replace('-', '_')}__{entry_op}", 2, model,
                      claims, summary, exempt=_NOT_PROMISED, bench=False, dtype=dtype,
                      framework=framework, device="cuda" if framework == "torch" else None,
                      constraints=constraints)


# What the hunt found in them on a GPU (docs/ecosystem.md, where each has a reproducer): kept
# here as known bugs, so every hunt checks they are still there, and the claims are hunted past them.
_QUACK_SOFTMAX_NAN = ("NaN for a finite row whose logits reach about 1e9: the exponent's argument is "
                      "x*log2(e) - max*log2(e), whose rounding grows with the logits")
_QUACK_SOFTMAX_MAGNITUDE = ("relative error grows with the logits' magnitude (1e-4 at 1e4, 2e-2 at "
                            "1e6) rather than with their spread")


def _quack_softmax_bugs(name: str) -> tuple[KnownBug, ...]:
    """QuACK's softmax bugs, each with its committed finding as an explicit example (a hunt at 40
    examples had missed the magnitude error in wide_span; the wide masked rows are one shape)."""
    return tuple(replace(bug, example=f"{name}-{bug.family}.json") for bug in (
        KnownBug("overflow_logits", _QUACK_SOFTMAX_NAN, property="finite"),
        KnownBug("huge", _QUACK_SOFTMAX_NAN, property="range_safety"),
        KnownBug("masked", "NaN for a row masked (-inf) everywhere but one column, once the row is "
                           "split over thread blocks (3076 columns and more)", property="finite",
                 shows_from_cols=3076),
        # In float32 the error that grows with the logits' magnitude shows through the output's
        # rounding, already at ordinary logits (|x| about 35, rows of 4000+): 2.2e-6 relative on
        # y[i] / y[j] where both logits sit within 0.15 of the maximum, 1.1-1.4 times the bound.
        *((KnownBug("large_mean", _QUACK_SOFTMAX_MAGNITUDE, shows_from_cols=2048),
           KnownBug("wide_span", _QUACK_SOFTMAX_MAGNITUDE, property="ratios", shows_from_cols=2048),
           # (its nonfinite finding, an explicit example and so never shrunk again, is 4452 wide)
           *(KnownBug(family, _QUACK_SOFTMAX_MAGNITUDE + "; already 1.1-1.4x the bound at |x| "
                      "near 35", property="ratios", shows_from_cols=shows)
             for family, shows in (("ordinary", 2048), ("nonfinite", 2226))))
          if name.endswith("-f32") else ())))


_FOUND: dict[str, tuple[KnownBug, ...]] = {
    "quack.softmax-bf16": _quack_softmax_bugs("quack.softmax-bf16"),
    "quack.softmax-f32": _quack_softmax_bugs("quack.softmax-f32"),
    **{f"quack.{op}-bf16": (
        KnownBug("ragged", "bfloat16 rows of odd width fail to compile (DSLRuntimeError: IR "
                           "verification failed, cp_size)", property="contract"),
    ) for op in ("layernorm", "rmsnorm", "rmsnorm+residual")},
}
#: The widths hunted for the claims where a known bug takes some away (each bug is still hunted
#: at every width).
_AROUND_BUGS = {f"quack.{op}-bf16": ShapeConstraints(cols_multiple_of=2)
                for op in ("layernorm", "rmsnorm", "rmsnorm+residual")}


def _with_findings(spec: KernelSpec) -> KernelSpec:
    if spec.name not in _FOUND:
        return spec
    if spec.name not in _AROUND_BUGS:
        return replace(spec, bugs=_FOUND[spec.name])
    return replace(spec, bugs=_FOUND[spec.name], constraints=_AROUND_BUGS[spec.name],
                   bug_widths=spec.constraints)


_ECOSYSTEM_KERNELS: tuple[KernelSpec, ...] = tuple(
    _with_findings(_ecosystem(*row, dtype=dtype))
    for row in _ECOSYSTEM_OPS for dtype in ("float32", "bfloat16"))

KERNELS: tuple[KernelSpec, ...] = (
    *(_on("numpy", k) for k in _TEXTBOOK_KERNELS),
    *(_on("cuda", k) for k in _TEXTBOOK_KERNELS),
    *_CUDA_ONLY,
    *_PROD_KERNELS,
    *_TORCH_KERNELS,
    *_ECOSYSTEM_KERNELS,
)


def backend_status(backend: str) -> tuple[bool, str]:
    """Whether ``backend`` can run here, and why not when it cannot."""
    if backend == "numpy":
        return True, f"numpy {np.__version__}"
    if backend in ("cuda", "cuda-prod", "cuda-cluster"):
        from normprops.cuda.build import cuda_status

        ok, why = cuda_status()
        if ok and backend == "cuda-cluster":
            from normprops.cuda.prod import clusters_supported

            if not clusters_supported():
                return False, f"{why}: thread-block clusters need compute capability 9.0 or later"
        return ok, why
    if backend in ("torch-cuda", "torch-cpu"):
        from normprops.backends.torch_kernels import torch_status

        return torch_status(device=backend.removeprefix("torch-"))
    from normprops.backends.ecosystem import ECOSYSTEM_BACKENDS, ecosystem_status

    if backend in ECOSYSTEM_BACKENDS:
        return ecosystem_status(backend)
    return False, (f"unknown backend {backend!r}; known: "
                   f"{', '.join([*BACKEND_MODULES, *ECOSYSTEM_BACKENDS])}")
