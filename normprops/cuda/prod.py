"""Launchers for ``prod.cu``: the production softmax, layer norm, RMS norm and fused add + RMS norm.

Two levels:

- :class:`ProdKernel` launches on device arrays already in the storage type (CuPy ``float32``, or
  ``uint16`` holding bfloat16 / float16 bits): what ``normprops bench`` times.
- the module-level functions (``softmaxFast``, ``layerNormFastBf16``, ...) have the op's user
  signature on float32 arrays, like every other hunted kernel. For bfloat16 / float16 the values
  must already be exactly representable in the storage type (the strategies make them so; anything
  else raises ValueError naming the argument); the output is widened back to float32 exactly.

The fused kernel ``addrmsnorm`` reads x and residual, writes out = rmsnorm(x + residual) * gamma and
residual <- x + residual. It is hunted as an RMS norm: x is split exactly into a + b (a keeps the
top bits of each value, b = x - a is exact), the kernel runs on (a, b), its updated residual must
be x bit for bit (else ContractError) and its output is judged as rmsnorm(x).

Launch shape: see :func:`launch_shape` and the header of ``prod.cu``. A decode batch (too few rows
to fill the GPU, :meth:`Shape.decode`) of a norm runs the same arithmetic from ``prod_decode.cu``'s
entry points, which read gamma and beta with the row and spread each thread's vectors over up to
eight threads (:func:`decode_split`; see that file).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from normprops.cuda.build import module
from normprops.cuda.layout import (
    CLUSTER_OPS,
    EPS_OPS,
    PROD_PER_THREAD,
    PROD_VARIANTS,
    prod_layout,
)
from normprops.cuda.shape import (
    CLUSTER_SIZES,
    CLUSTER_THREADS,
    CLUSTER_VPT,
    MAX_ROW_THREADS,
    PORTABLE_CLUSTER,
    VPTS,
    Shape,
    cluster_shape,
    shape_for,
)
from normprops.cuda.textbook import KernelFault, validate
from normprops.dtypes import get_dtype, not_representable, split_exact
from normprops.errors import ContractError
from normprops.ops import get_op

__all__ = ["DTYPE_CODES", "entry_point", "decode_entry_points", "dense_decode", "DECODE_OPS", "PER_THREAD",
           "OFF_GRID_OPS", "off_grid_entry_points",
           "VPTS", "PACKED_VPTS", "SPLITS", "Shape", "decode_split", "launch_shape",
           "ProdKernel",
           "clusters_supported", "multiprocessors", "largest_cluster", "split_exact", "split_on_device",
           "to_storage", "from_storage"]

DTYPE_CODES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
PROD_OPS = ("softmax", "layernorm", "rmsnorm", "addrmsnorm", "rmsnormbf16acc")
PER_THREAD = PROD_PER_THREAD  # register path: at most this many elements per thread
PACKED_VPTS = (4, 8)  # entry points with packed 16-bit register storage
SOURCE = "prod.cu"
KEPT_BAD_SOURCE = "prod_kept_bad.cu"  # rmsnormbf16acc's entry points
DECODE_SOURCE = "prod_decode.cu"  # the norms' decode entry points
#: The ops with decode entry points (the norms: gamma, and beta, read with the row).
DECODE_OPS = ("layernorm", "rmsnorm", "addrmsnorm")
#: The ops with off-grid prefill entry points (``_sh``: 16-bit rows off the 16-byte grid).
OFF_GRID_OPS = ("layernorm", "rmsnorm")


def entry_point(op: str, dtype: str, vpt: int, *, packed: bool, cluster: int = 1,
                decode: bool = False, split: int = 1, dense: bool = False, shifted: bool = False) -> str:
    """The name of prod.cu's kernel for ``op`` on ``dtype`` with ``vpt`` vectors per thread (0: the
    streaming path), e.g. ``softmax_bf16_p8``, or on the cluster path (``cluster`` blocks per row),
    e.g. ``softmax_bf16_c8p8``, or prod_decode.cu's (``decode``), e.g. ``rmsnorm_bf16_p8_d``, with
    each thread's vectors spread over ``split`` threads, e.g. ``rmsnorm_bf16_p8_s8_d``, and its
    twin for rows that fill the threads' vectors exactly (``dense``), e.g. ``rmsnorm_bf16_p8_s8_da``,
    or the packed prefill kernel of rows off the 16-byte grid (``shifted``), e.g.
    ``layernorm_bf16_p8_sh``; each is spelled out in its file."""
    tag = "p" if packed and vpt in PACKED_VPTS else "v"
    blocks = f"c{cluster}" if cluster > 1 else ""
    suffix = (f"_s{split}" if split > 1 else "") + ("_da" if dense else "_d") if decode else ""
    suffix += "_sh" if shifted else ""
    return f"{op}_{DTYPE_CODES[dtype]}_{blocks}{tag}{vpt}{suffix}"


#: The threads a decode kernel may spread one prefill thread's vectors over (prod.cu's Split).
SPLITS = (8, 4, 2)


def decode_split(shape: Shape, *, dense: bool = False) -> int:
    """How many threads share each prefill thread's vectors in a decode launch of ``shape`` (on the
    ``dense`` kernel or the general one): one of :data:`SPLITS` at most its vectors per thread (powers
    of two both, so it divides them), 1 where none fits. A lone row's time is mostly its warps issuing
    their arithmetic: the split gives it that many times the warps, with the prefill kernel's sums and
    bits, at the price of an exchange through shared memory. The general kernel takes the most that
    keeps the block within 512 threads; the dense kernel the most that keeps a row of one warp within
    256 threads (its reductions need no barrier, though the exchange does), and 2 for a row of several
    warps (on an H100, one bfloat16 row, RMS norm: 2880 columns 3.03 us in 384 threads, 3.29
    unsplit; 8192 columns, dense, 3.27 split 2, 3.45 unsplit)."""
    if dense and shape.tpr > 32:
        return 2 if shape.vpt >= 2 and 2 * shape.tpr <= MAX_ROW_THREADS else 1
    cap = MAX_ROW_THREADS // 2 if dense else MAX_ROW_THREADS
    return next((n for n in SPLITS if n <= shape.vpt and n * shape.tpr <= cap), 1)


def decode_entry_points() -> set[str]:
    """prod_decode.cu's kernels: each norm on each storage type, at every vectors per thread its
    default register layout (:func:`prod_layout`) launches."""
    names = set()
    for op in DECODE_OPS:
        for dtype in DTYPE_CODES:
            per_thread, packed = prod_layout(op, dtype)
            for vpt in VPTS:
                if vpt * vector_width(dtype) <= per_thread:
                    for split in (1, *(n for n in SPLITS if n <= vpt)):
                        for dense in (False, True):
                            names.add(entry_point(op, dtype, vpt, packed=packed, decode=True, split=split,
                                                  dense=dense))
    return names


def off_grid_entry_points() -> set[str]:
    """prod.cu's off-grid kernels: the packed 16-bit layer and RMS norms at 4 and 8 vectors a thread."""
    return {entry_point(op, dtype, vpt, packed=True, shifted=True)
            for op in OFF_GRID_OPS for dtype in ("bfloat16", "float16") for vpt in PACKED_VPTS}


def clusters_supported() -> bool:
    """Whether the current GPU runs thread-block clusters (compute capability 9.0 or later), which
    the cluster path needs."""
    import cupy

    return _clusters_on(cupy.cuda.Device().id)


@functools.cache
def _clusters_on(device: int) -> bool:
    import cupy

    return int(cupy.cuda.Device(device).compute_capability) >= 90


# CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: a kernel may launch clusters of more than the
# portable 8 blocks (Hopper runs up to 16) only once this is set on it.
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


def _allow_non_portable(fn: Any) -> None:
    import cupy

    function = getattr(fn, "kernel", fn)  # a RawKernel holds the driver's Function
    cupy.cuda.driver.funcSetAttribute(function.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)


def largest_cluster() -> int:
    """The most blocks per row the auto softmax's cluster path takes on the current GPU: 0 without
    clusters, else the largest of CLUSTER_SIZES that a launch there accepts (16 on an H200, 8 where
    the larger, non-portable, sizes are refused)."""
    import cupy

    return _largest_cluster_on(cupy.cuda.Device().id)


@functools.cache
def _largest_cluster_on(device: int) -> int:
    if not _clusters_on(device):
        return 0
    import cupy

    # One launch of the largest cluster on a 1 x 1 row. CUDA documents sizes past 8 as allowed on
    # some GPUs only; a device that cannot place the cluster refuses the launch itself (a launch
    # configuration error, CUDA_ERROR_INVALID_CLUSTER_SIZE: the context stays usable), and rows
    # then take 8 blocks at most (an H200 runs 16). Only the refusal is caught:
    # a fault while the kernel runs, or a wrong softmax, is an error and raises.
    largest = CLUSTER_SIZES[-1]
    with cupy.cuda.Device(device):
        fn = module("default", source=SOURCE).get_function(
            entry_point("softmax", "float32", 8, packed=False, cluster=largest))
        x, out = cupy.zeros(1, dtype=np.float32), cupy.zeros(1, dtype=np.float32)
        try:
            _allow_non_portable(fn)
            fn((largest, 1, 1), (512, 1, 1), (x, out, np.uint64(1), np.uint64(1)))
        except (cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError):
            return PORTABLE_CLUSTER
        got = float(out[0])  # synchronizes: a fault in the kernel raises here
    if got != 1.0:
        raise KernelFault(f"the {largest}-block cluster softmax of one element gave {got!r}, not 1.0")
    return largest


def _device() -> int:
    """The current CUDA device (0 where CuPy is absent: nothing launches there, and the shapes of
    rows that need no GPU to decide, such as a width too wide for a kernel, still resolve)."""
    try:
        import cupy
    except ImportError:
        return 0
    return cupy.cuda.Device().id


@functools.cache
def multiprocessors(device: int) -> int:
    """The number of multiprocessors of CUDA device ``device``."""
    import cupy

    return int(cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"])


def vector_width(dtype: str) -> int:
    """Elements of ``dtype`` in one 16-byte vector (prod.cu's W)."""
    return 16 // get_dtype(dtype).itemsize


def launch_shape(cols: int, *, dtype: str, per_thread: int = PER_THREAD) -> Shape:
    """The register path's shape for a row of ``cols`` elements of ``dtype`` (see
    :mod:`normprops.cuda.shape`), or the streaming path's (vpt 0, 1024 threads) beyond it."""
    return shape_for(cols, vector_width=vector_width(dtype), per_thread=per_thread)


# float32 -> 16-bit storage bits on the device, with a flag per value that does not survive: a stress
# batch's values convert in microseconds there and in milliseconds in numpy, launch after launch.
# Exactness is read from the bits (no float compare, which flush-to-zero builds would blur), and a
# NaN stays a quiet NaN of the same sign.
_TO_STORAGE = {
    "bfloat16": ("uint32 u", "uint16 bits, bool bad", """
        const bool nan = (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0u;
        bits = (unsigned short)(u >> 16) | (nan ? 0x0040 : 0);  // bfloat16 is a float32's top half
        bad = !nan && (u & 0xFFFFu) != 0u;
    """),
    "float16": ("uint32 u", "uint16 bits, bool bad", """
        const bool nan = (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0u;
        const __half h = __float2half_rn(__uint_as_float(u));  // to nearest even; too big: inf
        bits = nan ? (unsigned short)(((u >> 16) & 0x8000u) | 0x7E00u) : __half_as_ushort(h);
        bad = !nan && __float_as_uint(__half2float(h)) != u;
    """),
}


@functools.cache
def _to_storage_kernel(dtype: str) -> Any:
    import cupy

    params, outputs, body = _TO_STORAGE[dtype]
    return cupy.ElementwiseKernel(params, outputs, body, f"normprops_to_{dtype}",
                                  preamble="#include <cuda_fp16.h>")


def _split_body(dtype: str) -> str:
    """:func:`normprops.dtypes.split_exact` on float32 bits: a keeps the top half of each
    significand, b = x - a (exact in float32 wherever it is normal; a flushed b fails ``au == u``
    and falls back to x + 0); both must be exact in ``dtype``, else a = x, b = +0."""
    info = get_dtype(dtype)
    drop = 24 - info.bits + info.bits // 2
    exact = {"float32": "((void)v, true)", "bfloat16": "((__float_as_uint(v) & 0xFFFFu) == 0u)",
             "float16": "(__float_as_uint(__half2float(__float2half_rn(v))) == __float_as_uint(v))"}[dtype]
    return f"""
        const unsigned int au = u & {(0xFFFFFFFF << drop) & 0xFFFFFFFF:#x}u;
        const float x = __uint_as_float(u), af = __uint_as_float(au), bf = x - af;
        const bool finite = (u & 0x7F800000u) != 0x7F800000u;
        float v = af; const bool a_exact = {exact};
        v = bf; const bool b_exact = {exact};
        const bool ok = finite && (au == u || fabsf(bf) >= {info.min_normal!r}f) && a_exact && b_exact;
        const bool zero = (u & 0x7FFFFFFFu) == 0u;  // -0 splits into -0 + -0
        a = (zero || !ok) ? u : au;
        b = zero ? u : (ok ? __float_as_uint(bf) : 0u);
    """


@functools.cache
def _split_kernel(dtype: str) -> Any:
    import cupy

    return cupy.ElementwiseKernel("uint32 u", "uint32 a, uint32 b", _split_body(dtype),
                                  f"normprops_split_{dtype}", preamble="#include <cuda_fp16.h>")


def split_on_device(bits: Any, dtype: str) -> tuple[Any, Any]:
    """:func:`split_exact` of a CuPy array of float32 bits (uint32), on the device: (a, b) as
    uint32 float32 bits, bit for bit what the host split gives."""
    return _split_kernel(dtype)(bits)


@functools.cache
def _residual_check_kernel() -> Any:
    """The fused kernel's updated residual (widened to float32 bits) against x's bits: a
    mismatch, unless both are NaN or x + residual is a float32 subnormal the GPU flushed to 0."""
    import cupy

    return cupy.ElementwiseKernel("uint32 got, uint32 want", "bool bad", """
        const bool nan_got = (got & 0x7FFFFFFFu) > 0x7F800000u, nan_want = (want & 0x7FFFFFFFu) > 0x7F800000u;
        const bool flushed = (want & 0x7FFFFFFFu) < 0x00800000u && (got & 0x7FFFFFFFu) == 0u;
        bad = !(got == want || (nan_got && nan_want) || flushed);
    """, "normprops_residual_check")


def _widen(dev: Any, dtype: str) -> Any:
    """A CuPy array of the storage type widened (exactly) to float32 on the device."""
    import cupy

    if dtype == "bfloat16":
        return (dev.astype(cupy.uint32) << 16).view(cupy.float32)
    if dtype == "float16":
        return dev.view(cupy.float16).astype(cupy.float32)
    return dev


def to_storage(a: np.ndarray, dtype: str, *, name: str) -> Any:
    """float32 values (exact in ``dtype``) -> a CuPy array of the storage type (uint16 bits for the
    16-bit types). Raises ValueError naming ``name`` and the first value ``dtype`` cannot hold."""
    import cupy

    a = np.ascontiguousarray(a, dtype=np.float32)
    dev = cupy.asarray(a)
    if dtype == "float32":
        return dev
    bits, bad = _to_storage_kernel(dtype)(dev.view(cupy.uint32))
    if bool(bad.any()):
        raise not_representable(a, int(cupy.argmax(bad)), dtype=dtype, name=name)
    return bits


def from_storage(dev: Any, dtype: str) -> np.ndarray:
    """A CuPy array of the storage type -> float32 numpy (exact: every value widens on the device)."""
    import cupy

    return cupy.asnumpy(_widen(dev, dtype))


class ProdKernel:
    """One op of ``prod.cu`` for one storage type. ``path``: "auto" (registers when the row fits a
    block; for softmax on sm_90 and later, a cluster of blocks when it fits one; else streaming),
    "stream" or "cluster" (always that path: how the hunt reaches it at small widths)."""

    def __init__(self, op: str, *, dtype: str, path: str = "auto", build: str = "default",
                 per_thread: int | None = None, packed: bool | None = None) -> None:
        if op not in PROD_OPS:
            raise ValueError(f"op must be one of {PROD_OPS} but was {op!r}")
        if dtype not in DTYPE_CODES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_CODES)} but was {dtype!r}")
        if path not in ("auto", "stream", "cluster"):
            raise ValueError(f"path must be 'auto', 'stream' or 'cluster' but was {path!r}")
        if path == "cluster" and op != "softmax":
            raise ValueError(f"the cluster path exists for softmax only, not {op!r}")
        if op == "rmsnormbf16acc" and (dtype != "bfloat16" or path != "auto"):
            raise ValueError("rmsnormbf16acc exists for dtype bfloat16 on the register path only")
        self.op, self.dtype, self.path, self.build = op, dtype, path, build
        # Defaults from the registry (specs.prod_layout); other values are for launch-shape sweeps
        # (tools/sweep_prod.py) only: the registry's error bounds assume the defaults.
        default_per_thread, default_packed = prod_layout(op, dtype)
        per_thread = default_per_thread if per_thread is None else per_thread
        packed = default_packed if packed is None else packed
        self.per_thread = per_thread
        if packed and (dtype == "float32" or op == "rmsnormbf16acc"):
            raise ValueError("packed register storage exists for bfloat16 / float16 prod kernels only")
        self.packed = packed  # 16-bit values kept packed in registers (entry points _p4, _p8)
        # Both per device: CuPy loads a function once per device, the non-portable cluster attribute
        # is set on each, and the largest cluster may differ between devices.
        self._functions: dict[tuple[int, int, bool, int, bool, bool, int], Any] = {}
        # prod_decode.cu has the default register layouts only
        self._decodes = op in DECODE_OPS and (per_thread, packed) == (default_per_thread, default_packed)
        self._shifts = op in OFF_GRID_OPS and packed
        self._shapes: dict[tuple[int, int], Shape] = {}

    def _module(self) -> Any:
        """The compiled prod.cu, or prod_kept_bad.cu for the kept-bad op (the sweep's variants
        override this)."""
        return module(self.build, source=KEPT_BAD_SOURCE if self.op == "rmsnormbf16acc" else SOURCE)

    def _decode_module(self) -> Any:
        """The compiled prod_decode.cu (compiled on the first decode launch)."""
        return module(self.build, source=DECODE_SOURCE)

    def _function(self, vpt: int, cluster: int = 1, decode: bool = False, split: int = 1,
                  dense: bool = False, shifted: bool = False) -> Any:
        """The compiled entry point for ``vpt`` (looked up once: the hunt launches per example)."""
        key = (vpt, cluster, decode, split, dense, shifted, _device())
        if key not in self._functions:
            packed = self.packed or (cluster > 1 and self.dtype != "float32")
            name = entry_point(self.op, self.dtype, vpt, packed=packed, cluster=cluster, decode=decode,
                               split=split, dense=dense, shifted=shifted)
            fn = (self._decode_module() if decode else self._module()).get_function(name)
            if cluster > PORTABLE_CLUSTER:
                _allow_non_portable(fn)
            self._functions[key] = fn
        return self._functions[key]

    def _cluster_shape(self, cols: int, blocks: int | None = None) -> Shape | None:
        largest = largest_cluster() if blocks is None else blocks
        return cluster_shape(cols, vector_width=vector_width(self.dtype), blocks=blocks, largest=largest)

    def shape(self, cols: int) -> Shape:
        if self.path == "stream":
            return Shape(0, 1024, 1)
        key = (cols, _device())
        if key in self._shapes:
            return self._shapes[key]
        if self.path == "cluster":  # the largest portable cluster: the hunt covers its whole tree
            shape = self._cluster_shape(cols, blocks=PORTABLE_CLUSTER)
            if shape is None or not clusters_supported():
                threads = CLUSTER_THREADS[vector_width(self.dtype)]
                raise ValueError(f"the cluster path cannot take {cols} columns here (at most "
                                 f"{PORTABLE_CLUSTER} blocks x {threads} threads x {CLUSTER_VPT} vectors, "
                                 f"on a GPU of compute capability 9.0 or later)")
            self._shapes[key] = shape
            return shape
        shape = launch_shape(cols, dtype=self.dtype, per_thread=self.per_thread)
        # A thread count the compiled kernel's registers cannot launch goes to the streaming path.
        if shape.vpt and shape.tpr > self._function(shape.vpt).max_threads_per_block:
            shape = Shape(0, 1024, 1)
        if shape.vpt == 0 and self.op in CLUSTER_OPS and clusters_supported():
            shape = self._cluster_shape(cols) or shape
        if shape.vpt == 0 and self.op == "rmsnormbf16acc":  # it has no streaming entry point
            raise ValueError(f"rmsnormbf16acc: {cols} columns do not fit in registers "
                             f"(at most {self.per_thread} per thread, 512 threads)")
        self._shapes[key] = shape
        return shape

    #: Each op's device arrays, in the kernel's argument order.
    OPERANDS = {"softmax": ("x", "out"), "layernorm": ("x", "out", "gamma", "beta"),
                "rmsnorm": ("x", "out", "gamma"), "rmsnormbf16acc": ("x", "out", "gamma"),
                "addrmsnorm": ("x", "residual", "out", "gamma")}

    def operands(self, **arrays: Any) -> tuple[Any, ...]:
        """The arrays this op takes, picked by name (x, out, residual, gamma, beta) and put in the
        kernel's order; the others are ignored."""
        return tuple(arrays[name] for name in self.OPERANDS[self.op])

    def _check(self, arrays: tuple[Any, ...], rows: int, cols: int, eps: float | None) -> None:
        """Device arrays in the storage type, C-contiguous, of the op's sizes (in, [residual,] out
        take rows x cols elements; gamma and beta cols)."""
        import cupy

        names = self.OPERANDS[self.op]
        if len(arrays) != len(names):
            raise TypeError(f"{self.op} takes the arrays {', '.join(names)}; got {len(arrays)}")
        storage = np.float32 if self.dtype == "float32" else np.uint16
        if rows < 0 or cols < 1:
            raise ValueError(f"rows must be >= 0 and cols >= 1 but were rows={rows}, cols={cols}")
        for name, a in zip(names, arrays):
            size = cols if name in ("gamma", "beta") else rows * cols
            if (not isinstance(a, cupy.ndarray) or a.dtype != storage or a.size != size
                    or not a.flags.c_contiguous):
                what = (f"{type(a).__name__} {getattr(a, 'dtype', '')} of size {getattr(a, 'size', '?')}")
                raise ValueError(f"{name} must be a C-contiguous CuPy {np.dtype(storage)} array of {size} "
                                 f"elements ({self.dtype} storage) but was {what}")
        if self.op in EPS_OPS and (eps is None or not np.isfinite(eps) or eps < 0):
            raise ValueError(f"eps must be a finite non-negative float but was {eps!r}")

    def shifted(self, arrays: tuple[Any, ...], *, shape: Shape, cols: int) -> bool:
        """Whether a prefill launch of ``shape`` takes the off-grid kernel (``_sh``): its rows leave the
        16-byte grid (a width the vectors do not divide, or an array off it)."""
        return (self._shifts and shape.cluster == 1 and shape.vpt in PACKED_VPTS
                and (cols % vector_width(self.dtype) != 0 or any(a.data.ptr % 16 for a in arrays)))

    def launcher(self, *arrays: Any, rows: int, cols: int, eps: float | None = None,
                 spread: bool = True) -> Callable[[], None]:
        """A zero-argument launch on fixed device arrays (in, [residual,] out, [gamma, [beta]]), on
        the current stream; the arrays are checked and the function and shape resolved once.
        ``spread``: a batch too small to fill the GPU takes one row per block (Shape.for_batch) and, for
        a norm, its decode entry point (prod_decode.cu); False keeps the width's rows per block and
        the prefill kernel, few rows then sharing partly empty blocks (what the hunt launches: the
        harder case for the blocks' shared scratch; the bits are the same)."""
        self._check(arrays, rows, cols, eps)
        if rows == 0:
            return lambda: None
        shape = self.shape(cols)
        sms = multiprocessors(_device()) if spread else 0
        decode = spread and self._decodes and shape.decode(rows, sms=sms)
        dense = decode and dense_decode(arrays, shape=shape, cols=cols, width=vector_width(self.dtype))
        split = decode_split(shape, dense=dense) if decode else 1
        shifted = not decode and self.shifted(arrays, shape=shape, cols=cols)
        fn = self._function(shape.vpt, shape.cluster, decode, split, dense, shifted)
        args = (*arrays, np.uint64(rows), np.uint64(cols),
                *((np.float32(eps),) if self.op in EPS_OPS else ()))
        if spread:
            shape = shape.for_batch(rows, sms=sms)
        grid, block = shape.grid(rows), shape.block()
        if split > 1:  # a row per block (decode): its split groups are the block's y
            block = (shape.tpr, split, 1)
        return lambda: fn(grid, block, args)

    def launch(self, *arrays: Any, rows: int, cols: int, eps: float | None = None,
               spread: bool = True) -> None:
        """Check and launch once (see :meth:`launcher`)."""
        self.launcher(*arrays, rows=rows, cols=cols, eps=eps, spread=spread)()


def dense_decode(arrays: tuple[Any, ...], *, shape: Shape, cols: int, width: int) -> bool:
    """Whether a decode launch may take the dense kernel (prod_decode.cu): every array 16-byte aligned
    and the row exactly the threads' vectors of ``width`` elements, so that every 16-byte access is
    whole and in the row."""
    return cols == shape.tpr * shape.vpt * width and all(a.data.ptr % 16 == 0 for a in arrays)


def _user_function(op: str, dtype: str, path: str, name: str) -> Callable[..., np.ndarray]:
    """The op's user signature on float32 arrays (fused: hunted as rmsnorm, see the module doc)."""
    kernel = ProdKernel(op, dtype=dtype, path=path)
    user_op = "rmsnorm" if op in ("addrmsnorm", "rmsnormbf16acc") else op
    spec = get_op(user_op)

    def run(x: Any, *args: Any) -> np.ndarray:
        if len(args) != len(spec.params) - 1:
            raise TypeError(f"{name} takes the {user_op} signature")
        gamma = args[0] if spec.has_gamma else None
        beta = args[1] if spec.has_beta else None
        eps = args[-1] if spec.has_eps else None
        rows, cols = validate(user_op, x, gamma, beta, eps)
        if rows == 0:
            return np.empty((0, cols), dtype=np.float32)
        import cupy

        try:
            return _run_once(kernel, op, dtype, x, gamma, beta, eps, rows=rows, cols=cols)
        except (cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError) as exc:
            raise KernelFault(f"kernel faulted: {exc}") from exc

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"prod.cu {op} ({dtype}, path {path}) with the {user_op} user signature."
    return run


_ALIGN = 64  # float32 elements: 256 bytes


def _run_once(kernel: ProdKernel, op: str, dtype: str, x: Any, gamma: Any, beta: Any,
              eps: float | None, *, rows: int, cols: int) -> np.ndarray:
    """One call of a user function in two round trips to the device: every input up in one copy,
    converted and checked there; the output, the check flags and (fused) the residual check down
    in one copy. Under many processes sharing one GPU each round trip waits its turn, so the count
    of round trips, not the kernel, sets a hunt's pace."""
    import cupy

    named = {n: np.ascontiguousarray(v, dtype=np.float32)
             for n, v in (("x", x), ("gamma", gamma), ("beta", beta)) if v is not None}
    # Each array starts 256 bytes into the buffer past the one before, as its own allocation would
    # (CuPy's pool aligns to 256 bytes or more): the kernels see the alignment they would in use.
    starts = np.cumsum([0] + [-(-v.size // _ALIGN) * _ALIGN for v in named.values()])
    host = np.zeros(int(starts[-1]), np.float32)
    for at, v in zip(starts, named.values()):
        host[at:at + v.size] = v.ravel()
    up = cupy.asarray(host)
    dev = {n: up[at:at + v.size].reshape(v.shape) for (n, v), at in zip(named.items(), starts)}
    flags: list[tuple[str, Any]] = []  # (input name, per-value "not exact in dtype" flags)

    def stored(a32: Any, name: str) -> Any:
        if dtype == "float32":
            return a32
        bits, bad = _to_storage_kernel(dtype)(a32.view(cupy.uint32))
        flags.append((name, bad))
        return bits

    residual = None
    if op == "addrmsnorm":
        a, b = split_on_device(dev["x"].view(cupy.uint32), dtype)
        xs, residual = stored(a.view(cupy.float32), "x"), stored(b.view(cupy.float32), "x")
    else:
        xs = stored(dev["x"], "x")
    gs, bs = (None if n not in dev else stored(dev[n], n) for n in ("gamma", "beta"))
    out = cupy.empty_like(xs)
    arrays = kernel.operands(x=xs, out=out, residual=residual, gamma=gs, beta=bs)
    kernel.launch(*arrays, rows=rows, cols=cols, eps=eps, spread=False)
    if residual is not None:
        flags.append(("residual", _residual_check_kernel()(_widen(residual, dtype).view(cupy.uint32),
                                                            dev["x"].view(cupy.uint32))))
    tail = [f.any().astype(cupy.uint32).reshape(1) for _, f in flags]
    down = cupy.asnumpy(cupy.concatenate([_widen(out, dtype).view(cupy.uint32).ravel(), *tail]))
    result = down[:out.size].view(np.float32).reshape(rows, cols)
    for (name, bad), hit in zip(flags, down[out.size:]):
        if not hit:
            continue
        if name == "residual":
            _raise_residual(cupy.asnumpy(bad), from_storage(residual, dtype), named["x"],
                            cupy.asnumpy(a).view(np.float32), cupy.asnumpy(b).view(np.float32))
        raise not_representable(named[name], int(np.argmax(cupy.asnumpy(bad))), dtype=dtype, name=name)
    return result


def _raise_residual(bad: np.ndarray, updated: np.ndarray, want: np.ndarray, a: np.ndarray,
                    b: np.ndarray) -> None:
    r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
    raise ContractError(f"the updated residual at row {r} col {c} is {updated[r, c]!r}; "
                        f"x + residual is {want[r, c]!r} ({a[r, c]!r} + {b[r, c]!r})")


@functools.cache
def _function_for(name: str) -> Callable[..., np.ndarray]:
    op, dtype, path = PROD_VARIANTS[name]
    return _user_function(op, dtype, path, name)


def __getattr__(name: str) -> Callable[..., np.ndarray]:
    """``prod.softmaxFastBf16`` etc.: the registry's entry points, built on first use."""
    if name in PROD_VARIANTS:
        return _function_for(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
