"""The registry's entries for the CUDA kernels: the textbook kernels (on the GPU, and their numpy
emulation), the kept-bad race, and the production kernels of prod.cu."""

from __future__ import annotations

from dataclasses import replace

from normprops.case import ShapeConstraints
from normprops.cuda.layout import CLUSTER_OPS, FAST_EXP_OPS, PROD_PER_THREAD, PROD_VARIANTS, prod_layout
from normprops.cuda.shape import (
    CLUSTER_THREADS,
    CLUSTER_TREE_DEPTH,
    CLUSTER_VPT,
    MAX_ROW_THREADS,
    PORTABLE_CLUSTER,
)
from normprops.dtypes import get_dtype
from normprops.errormodel import ErrorModel
from normprops.kernelspec import BACKEND_MODULES, NORM_FAMILIES, SOFTMAX_FAMILIES, KernelSpec, KnownBug

__all__ = ["TEXTBOOK_BLOCK", "TEXTBOOK_KERNELS", "CUDA_ONLY_KERNELS", "PROD_KERNELS", "PROD_BLOCK",
           "PROD_STREAM", "FAST_EXP_C_X"]

#: The textbook kernels' block reduction: 256 threads stride over the row, five shuffle steps collapse each
#: warp, and every thread folds the eight warp totals sequentially (seven more additions).
TEXTBOOK_BLOCK = ErrorModel(threads=256, tree_depth=5 + 7, rho=2.0, c_x=1.0)


# The textbook kernels, identical on the numpy emulation and on the GPU (kernels.cu).
TEXTBOOK_KERNELS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "softmaxRowNaive", "softmax", "", "", 3, TEXTBOOK_BLOCK,
        frozenset({"ordinary", "tiny", "ragged", "masked"}),
        "sum of expf(x) then expf(x)/sum; no max shift",
        bugs=(KnownBug("overflow_logits", "expf(x) overflows above 88.7: inf/inf gives NaN"),),
    ),
    KernelSpec(
        "softmaxRowSafe", "softmax", "", "", 4, TEXTBOOK_BLOCK,
        SOFTMAX_FAMILIES, "max pass, sum of expf(x - max), write expf(x - max)/sum",
    ),
    KernelSpec(
        "layerNormRowTwoPass", "layernorm", "", "", 4, TEXTBOOK_BLOCK,
        NORM_FAMILIES - {"huge"}, "mean pass, centred sum of squares pass, write",
    ),
    KernelSpec(
        "layerNormRowWelford", "layernorm", "", "", 3, TEXTBOOK_BLOCK,
        NORM_FAMILIES - {"huge"}, "per-thread Welford, shuffle and block merges (Chan et al.), write",
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
        NORM_FAMILIES - {"huge"}, "sum of squares pass, write x * rsqrtf(ms + eps) * gamma",
    ),
)

#: Kept-bad kernels that only exist on the GPU (a race has no numpy emulation).
CUDA_ONLY_KERNELS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "softmaxRowNoBarrier", "softmax", "cuda", f"{BACKEND_MODULES['cuda']}:softmaxRowNoBarrier",
        4, TEXTBOOK_BLOCK, frozenset(),
        "softmaxRowSafe without the barrier between the max and the sum reductions", bench=False,
        bugs=(KnownBug("ordinary", "shared-memory race: the sum reduction overwrites maxima still "
                                 "being read", property="determinism", detector="racecheck"),),
    ),
)


# The production kernels of prod.cu: range-safe, so the norms claim 'huge' too. Threads
# per row grow with the row (prod_layout's 32 or 64 elements per thread at most, 512 threads at
# most on the register path, 1024 streaming, normprops.cuda.shape); the forced streaming variants
# always use 1024 threads, the forced cluster ones 8 blocks of 512. Their softmax constants allow the
# online rescaling of the streaming path (rho 6); expf is CUDA's faithful one (c_x 1) in float32,
# while the 16-bit softmax takes ex2.approx (fast-math c_x 3.5; prod.cu's expOf says why that is
# still far below the output's rounding).
FAST_EXP_C_X = 3.5  # docs/tolerances.md's constant for a fast-math exp
PROD_BLOCK = ErrorModel(threads=1024, per_thread=PROD_PER_THREAD, rho=6.0, c_x=1.0)
PROD_STREAM = ErrorModel(threads=1024, rho=6.0, c_x=1.0)
_PROD_FAMILIES = {"softmax": SOFTMAX_FAMILIES, "layernorm": NORM_FAMILIES, "rmsnorm": NORM_FAMILIES}
_PROD_SUMMARY = {
    "softmax": "row in registers: max, sum of expf(x - max), divide; 16-byte vectors",
    "layernorm": "row in registers, scaled by 2^-e of its max: mean, centred squares, write",
    "rmsnorm": "row in registers, scaled by 2^-e of its max: sum of squares, write",
    "addrmsnorm": "h = x + residual in registers, residual <- h, RMS norm of h (hunted via an exact split)",
}


def _prod(name: str) -> KernelSpec:
    op, dtype, path = PROD_VARIANTS[name]
    user_op = "rmsnorm" if op in ("addrmsnorm", "rmsnormbf16acc") else op
    claims = _PROD_FAMILIES[user_op]
    if dtype == "float16":
        # float16 cannot hold the 'huge' rows (they saturate at 65504): nothing to claim there.
        claims = claims - {"huge"}
    touches = 4 if op == "addrmsnorm" else 2
    constraints = ShapeConstraints()  # every width: the register path, else streaming or a cluster
    summary = _PROD_SUMMARY.get(op, "")
    width = 16 // get_dtype(dtype).itemsize
    if path == "stream":
        summary = "streaming path forced: online statistics in pass 1, read again and write in pass 2"
        model = PROD_STREAM
    elif path == "cluster":
        threads = CLUSTER_THREADS[width]
        summary = (f"cluster path forced: the row in the registers of {PORTABLE_CLUSTER} blocks of {threads} "
                   "threads, online statistics per block merged through distributed shared memory")
        # A thread adds at most ceil(cols / (8 x threads)) + W - 1 elements (whole vectors of W),
        # then a tree log2(threads) levels deep in its block and 3 across the cluster.
        model = ErrorModel(threads=PORTABLE_CLUSTER * threads,
                           tree_depth=CLUSTER_TREE_DEPTH + width - 1, rho=6.0, c_x=1.0)
        # Its launcher refuses a row wider than the cluster holds (CLUSTER_VPT vectors a thread):
        # `long_rows` draws up to 2^18 + 1 columns, so the entry declares the widest it takes.
        constraints = ShapeConstraints(max_cols=PORTABLE_CLUSTER * threads * CLUSTER_VPT * width)
    else:
        model = replace(PROD_BLOCK, per_thread=prod_layout(op, dtype)[0], vector_width=width,
                        cluster=op in CLUSTER_OPS)
    if op in FAST_EXP_OPS and dtype != "float32":
        # ex2.approx.ftz.f32 (prod.cu's expOf): a fast exp that flushes subnormal results.
        model = replace(model, c_x=FAST_EXP_C_X, ftz=True)
    backend = "cuda-cluster" if path == "cluster" else "cuda-prod"
    return KernelSpec(name, user_op, backend, f"{BACKEND_MODULES[backend]}:{name}", touches,
                      model, claims,
                      f"{summary} ({dtype})", dtype=dtype, bench=path == "auto",
                      constraints=constraints)


PROD_KERNELS: tuple[KernelSpec, ...] = (
    *(_prod(name) for name in PROD_VARIANTS if name != "rmsNormBf16Acc"),
    # Register path only (no streaming entry point): a row fits in 512 threads of 32 values.
    replace(_prod("rmsNormBf16Acc"), claims=frozenset(), bench=False,
            constraints=ShapeConstraints(
                max_cols=MAX_ROW_THREADS * prod_layout("rmsnormbf16acc", "bfloat16")[0]),
            summary="rmsNormFastBf16 with the sum of squares rounded to bfloat16 after every addition",
            bugs=(KnownBug("ordinary", "accumulates in bfloat16: 8 significant bits lose the sum",
                         property="accuracy"),)),
)
