"""The production kernels (prod.cu): launch-shape policy, narrow storage types, the exact split that
hunts the fused kernel, and (on a GPU) what the hunt cannot see: alignment, huge grids and offsets,
the streaming path, the in-place residual."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normprops.cuda.entries import FAST_EXP_C_X, PROD_BLOCK
from normprops.cuda.layout import PROD_VARIANTS, prod_layout
from normprops.cuda.prod import (
    PACKED_VPTS,
    VPTS,
    Shape,
    decode_entry_points,
    entry_point,
    launch_shape,
    off_grid_entry_points,
    split_exact,
)
from normprops.cuda.shape import (
    CLUSTER_SIZES,
    CLUSTER_VPT,
    PORTABLE_CLUSTER,
    cluster_shape,
    elements_per_thread,
    shape_for,
)
from normprops.dtypes import DTYPES, get_dtype, to_dtype
from normprops.oracles import reference, tolerance
from normprops.specs import KERNELS
from normprops.strategies import Extras, make_case

F32 = np.float32


@pytest.mark.parametrize("cols, dtype, shape", [
    (1, "float32", Shape(1, 32, 8)),
    (1024, "float32", Shape(8, 32, 8)),      # a warp per row, 32 floats per thread
    (1025, "float32", Shape(2, 160, 1)),     # 257 vectors: 320 slots, where 64 x 8 would leave half empty
    (4096, "float32", Shape(8, 128, 2)),
    (8192, "float32", Shape(8, 256, 1)),     # the decode shape: one 256-thread block per row
    (16384, "float32", Shape(8, 512, 1)),
    (16385, "float32", Shape(0, 1024, 1)),   # beyond 512 threads of 32: streaming
    (1024, "bfloat16", Shape(4, 32, 8)),
    (16384, "bfloat16", Shape(4, 512, 1)),
    (2880, "bfloat16", Shape(4, 96, 2)),     # hidden sizes that are not a power of two: whole warps,
    (5120, "bfloat16", Shape(4, 160, 1)),    # not a power of two of them, every vector slot used
    (7168, "bfloat16", Shape(4, 224, 1)),
    (3, "float16", Shape(1, 32, 8)),
])
def test_launch_shape(cols: int, dtype: str, shape: Shape) -> None:
    got = launch_shape(cols, dtype=dtype)
    assert got == shape
    if got.vpt:  # the register path covers the row, at most 32 elements per thread
        width = 16 // (4 if dtype == "float32" else 2)
        assert got.vpt * got.tpr * width >= cols and got.vpt * width <= 32
        assert PROD_BLOCK.threads_for(cols) == got.tpr  # the error bound knows the shape


@pytest.mark.parametrize("name, per_thread, c_x", [
    ("softmaxFast", 32, 1.0), ("softmaxFastBf16", 64, FAST_EXP_C_X), ("softmaxFastF16", 64, FAST_EXP_C_X),
    ("layerNormFastBf16", 64, 1.0), ("rmsNormFastF16", 64, 1.0), ("addRmsNormFastBf16", 32, 1.0),
    ("rmsNormBf16Acc", 32, 1.0),
])
def test_error_models_follow_the_layout_and_the_exp(name: str, per_thread: int, c_x: float) -> None:
    """Each production kernel's bound uses the layout its launcher picks (specs.prod_layout) and,
    for the 16-bit softmax, the fast-math constant of its ex2.approx."""
    spec = next(k for k in KERNELS if k.name == name)
    op, dtype, _ = PROD_VARIANTS[name]
    assert spec.error_model.per_thread == per_thread == prod_layout(op, dtype)[0]
    assert spec.error_model.c_x == c_x
    for cols in (1024, 4096, 16384):
        shape = launch_shape(cols, dtype=dtype, per_thread=per_thread)
        assert spec.error_model.threads_for(cols) == shape.tpr


@given(cols=st.integers(1, 40000), width=st.sampled_from([4, 8]),
       per_thread=st.sampled_from([4, 16, 32, 48, 64]))
def test_every_shape_covers_its_row_in_whole_warps(cols: int, width: int, per_thread: int) -> None:
    """Any width: the register path's threads are whole warps (at most 512), hold at most
    per_thread elements each and cover the row, and the error bound's depth follows the shape;
    a row one warp can hold gets one warp."""
    shape = shape_for(cols, vector_width=width, per_thread=per_thread)
    vecs = -(-cols // width)
    vpt_max = max(v for v in VPTS if v <= max(1, per_thread // width))  # at least one whole vector
    if shape.vpt == 0:
        assert vecs > 512 * vpt_max  # nothing on the register path could hold it
        return
    assert shape.tpr % 32 == 0 and shape.tpr <= 512 and shape.vpt <= vpt_max
    assert shape.vpt * shape.tpr >= vecs
    assert shape.rpb == max(1, 256 // shape.tpr)
    if vecs <= 32 * vpt_max:
        assert shape.tpr == 32
    held = elements_per_thread(cols, shape, vector_width=width)
    assert held <= max(per_thread, width) and held * shape.tpr >= cols


@given(cols=st.integers(1, 600000), width=st.sampled_from([4, 8]), largest=st.sampled_from([8, 16]))
def test_cluster_shape_takes_the_fewest_blocks_that_hold_the_row(cols: int, width: int, largest: int) -> None:
    """Blocks of 512 threads for float32, of 256 for 16-bit storage unless only 512 hold the row; the
    fewest blocks of those that do."""
    shape = cluster_shape(cols, vector_width=width, largest=largest)
    if shape is None:
        assert cols > largest * 512 * CLUSTER_VPT * width
        return
    small = 256 if width == 8 else 512
    assert shape.tpr == (small if cols <= largest * small * CLUSTER_VPT * width else 512)
    capacity = shape.tpr * CLUSTER_VPT * width  # columns one block holds
    assert shape.cluster in CLUSTER_SIZES and shape.grid(3) == (3 * shape.cluster, 1, 1)
    assert shape.cluster * capacity >= cols and shape.cluster <= largest
    smaller = CLUSTER_SIZES[: CLUSTER_SIZES.index(shape.cluster)]
    assert all(n * capacity < cols for n in smaller)  # the fewest blocks that hold the row


@given(cols=st.integers(1, 262144), name=st.sampled_from(["softmaxCluster", "softmaxClusterBf16"]))
def test_cluster_error_model_covers_the_forced_cluster_shape(cols: int, name: str) -> None:
    """The forced cluster path's bound counts at least what a thread adds (whole vectors) and the
    tree's depth (log2 of the block's threads, 3 across 8 blocks)."""
    spec = next(k for k in KERNELS if k.name == name)
    width = 16 // get_dtype(spec.dtype).itemsize
    shape = cluster_shape(cols, vector_width=width, blocks=PORTABLE_CLUSTER)
    if shape is None or cols > shape.cluster * shape.tpr * shape.vpt * width:
        return
    held = elements_per_thread(cols, shape, vector_width=width)
    assert spec.error_model.k(cols) >= held - 1 + (shape.tpr - 1).bit_length() + 3


@given(cols=st.integers(16385, 600000), largest=st.sampled_from([8, 16]),
       name=st.sampled_from(["softmaxFast", "softmaxFastBf16", "softmaxFastF16"]))
def test_auto_softmax_bound_covers_the_cluster_path_too(cols: int, largest: int, name: str) -> None:
    """Past one block, the auto softmax streams or (sm_90+) takes the fewest cluster blocks, up to
    8 or 16 as the GPU allows: its bound covers each, the cluster's whole vectors per thread
    included (16388 float32 columns: thread 0 adds 5 vectors, 20 elements)."""
    spec = next(k for k in KERNELS if k.name == name)
    width = 16 // get_dtype(spec.dtype).itemsize
    if launch_shape(cols, dtype=spec.dtype, per_thread=spec.error_model.per_thread).vpt:
        return  # still the register path
    shape = cluster_shape(cols, vector_width=width, largest=largest)
    if shape is not None:
        held = elements_per_thread(cols, shape, vector_width=width)
        tree = (shape.tpr - 1).bit_length() + (shape.cluster - 1).bit_length()
        assert spec.error_model.k(cols) >= held - 1 + tree
    assert spec.error_model.k(cols) >= -(-cols // 1024) - 1 + 10  # the streaming path


def test_auto_softmax_bound_at_a_width_a_cluster_of_two_holds() -> None:
    spec = next(k for k in KERNELS if k.name == "softmaxFast")
    assert spec.error_model.k(16388) == 5 * 4 - 1 + 9 + 1


@settings(max_examples=300, deadline=None)
@given(cols=st.integers(1, 70_000), width=st.sampled_from((4, 8)), rows=st.integers(1, 5000),
       sms=st.sampled_from((1, 8, 132)))
def test_a_small_batch_takes_one_row_per_block_and_nothing_else_changes(cols: int, width: int, rows: int,
                                                                       sms: int) -> None:
    shape = shape_for(cols, vector_width=width, per_thread=64)
    got = shape.for_batch(rows, sms=sms)
    assert (got.vpt, got.tpr, got.cluster) == (shape.vpt, shape.tpr, shape.cluster)  # the arithmetic
    assert shape.decode(rows, sms=sms) == bool(shape.vpt and rows < sms * shape.rpb)
    if shape.decode(rows, sms=sms):  # fewer full blocks than multiprocessors: a block a row
        assert got.grid(rows) == (rows, 1, 1) and got.block() == (shape.tpr, 1, 1)
    else:  # a batch that fills the GPU, or the streaming path: as the width says
        assert got == shape


def test_the_cluster_path_keeps_its_shape_at_any_batch() -> None:
    held = cluster_shape(100_000, vector_width=4)
    assert held is not None and held.cluster > 1
    assert held.for_batch(1, sms=132) == held and held.grid(1) == (held.cluster, 1, 1)
    assert not held.decode(1, sms=132)  # (no decode entry point: the cluster path is softmax's)


def test_launch_shape_rejects_empty_rows() -> None:
    with pytest.raises(ValueError, match="cols must be at least 1"):
        launch_shape(0, dtype="float32")


def test_kept_bad_kernel_rejects_rows_wider_than_its_registers() -> None:
    """rmsnormbf16acc has no streaming entry point: a row past 512 x 32 columns is a clear
    ValueError (it was a driver error, 'named symbol not found', found by compute-sanitizer)."""
    from normprops.cuda.prod import ProdKernel

    with pytest.raises(ValueError, match="70001 columns do not fit in registers"):
        ProdKernel("rmsnormbf16acc", dtype="bfloat16").shape(70_001)


def test_error_model_depth_follows_threads_per_row() -> None:
    assert PROD_BLOCK.k(1024) == 1024 // 32 - 1 + 5
    assert PROD_BLOCK.k(16384) == 16384 // 512 - 1 + 9
    assert PROD_BLOCK.k(100_000) == -(-100_000 // 1024) - 1 + 10
    bf16 = next(k for k in KERNELS if k.name == "softmaxFastBf16").error_model
    assert bf16.k(2880) == 4 * 8 - 1 + 7  # 96 threads of 4 vectors: 3 warps, a 2-step tree over them
    assert bf16.k(33) == 8 - 1 + 5  # thread 0 adds a whole vector of 8 before the warp's tree


def test_to_dtype_rounds_to_nearest_even_and_saturates() -> None:
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, -1e20, np.inf, np.nan, 70000.0], F32)
    bf = to_dtype(x, "bfloat16")
    assert bf[0] == 1.0 and bf[1] == 1.0 and bf[2] == 1 + 4 * 2**-8  # ties to even
    assert bf[3] == get_dtype("bfloat16").max and np.isinf(bf[5]) and np.isnan(bf[6])
    h = to_dtype(x, "float16")
    assert h[3] == 65504.0 and h[4] == -65504.0 and h[7] == 65504.0
    assert np.array_equal(to_dtype(x, "float32"), x, equal_nan=True)
    with pytest.raises(ValueError, match="dtype must be one of"):
        to_dtype(x, "int8")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_narrow_cases_hold_exact_values(dtype: str) -> None:
    case = make_case(op="layernorm", family="ordinary", rows=3, cols=100, seed=1,
                     params={"loc": 0.5, "scale": 3.0, "spikes": []},
                     extras=Extras(gamma_kind="large", beta_kind="large"), dtype=dtype)
    assert case.dtype == dtype
    for a in (case.x, case.gamma, case.beta):
        assert np.array_equal(to_dtype(a, dtype), a)
    assert np.max(np.abs(case.gamma)) < DTYPES[dtype].max


def test_narrow_tolerance_adds_one_output_rounding() -> None:
    base = make_case(op="rmsnorm", family="ordinary", rows=2, cols=64, seed=3,
                     params={"loc": 0.0, "scale": 1.0, "spikes": []})
    narrow = base.replace(dtype="bfloat16", x=to_dtype(base.x, "bfloat16"))
    wide = base.replace(x=narrow.x)
    ref = reference(wide)
    t32 = tolerance(wide, ref, model=PROD_BLOCK).tol
    t16 = tolerance(narrow, ref, model=PROD_BLOCK).tol
    extra = t16 - t32
    assert np.allclose(extra, 2.0**-8 * np.abs(ref.z) + DTYPES["bfloat16"].tiny)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_split_is_exact(dtype: str) -> None:
    rng = np.random.default_rng(0)
    x = to_dtype(np.concatenate([rng.standard_normal(1000) * 10.0 ** rng.integers(-30, 30, 1000),
                                 [0.0, -0.0, 1e-39, np.nan, np.inf, 3e38]]).astype(F32), dtype)
    a, b = split_exact(x, dtype)
    finite = np.isfinite(x)
    assert np.array_equal((a.astype(np.float64) + b)[finite], x[finite].astype(np.float64))
    assert np.array_equal(to_dtype(a, dtype), a, equal_nan=True)
    assert np.array_equal(to_dtype(b, dtype), b)
    assert np.count_nonzero(b) > 500  # the split is not the trivial x + 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_device_split_is_the_host_split(dtype: str) -> None:
    """The fused kernel's operands are split on the device; bit for bit as split_exact does it,
    flush-to-zero or not (a b that would be subnormal falls back to x + 0)."""
    import cupy

    from normprops.cuda.prod import split_on_device

    rng = np.random.default_rng(1)
    x = to_dtype(np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-45, 38, 4000),
                                 [0.0, -0.0, 1e-39, -1e-40, np.nan, np.inf, -np.inf, 3e38, 65504.0,
                                  2.0**-24, 2.0**-14, 2.0**-126, 2.0**-149]]).astype(F32), dtype)
    a, b = split_on_device(cupy.asarray(x).view(cupy.uint32), dtype)
    want_a, want_b = split_exact(x, dtype)
    assert np.array_equal(cupy.asnumpy(a), want_a.view(np.uint32))
    assert np.array_equal(cupy.asnumpy(b), want_b.view(np.uint32))


def test_registry_has_every_variant_and_the_kept_bad_one() -> None:
    prod = {k.name: k for k in KERNELS if k.backend in ("cuda-prod", "cuda-cluster")}
    assert set(prod) == set(PROD_VARIANTS)
    assert {k.name for k in KERNELS if k.backend == "cuda-cluster"} == {
        name for name, (_, _, path) in PROD_VARIANTS.items() if path == "cluster"}
    assert prod["rmsNormBf16Acc"].bug is not None and prod["rmsNormBf16Acc"].dtype == "bfloat16"
    assert "huge" in prod["rmsNormFast"].claims and "huge" in prod["layerNormFastBf16"].claims
    assert "huge" not in prod["rmsNormFastF16"].claims
    assert prod["addRmsNormFast"].op == "rmsnorm" and prod["addRmsNormFast"].touches == 4


def test_the_kept_bad_kernel_declares_its_register_only_width_limit() -> None:
    """rmsNormBf16Acc has no streaming path: its launcher refuses rows wider than the register path
    holds. The entry declares that limit, so no hunt meets the refusal as a contract finding (a
    hunt on the H200 drew 16385 columns and reported it ahead of the bug it hunted)."""
    spec = next(k for k in KERNELS if k.name == "rmsNormBf16Acc")
    per_thread = prod_layout("rmsnormbf16acc", "bfloat16")[0]
    widest = spec.constraints.max_cols
    assert launch_shape(widest, dtype="bfloat16", per_thread=per_thread).vpt > 0
    assert launch_shape(widest + 1, dtype="bfloat16", per_thread=per_thread).vpt == 0


@pytest.mark.parametrize("name", ["softmaxCluster", "softmaxClusterBf16"])
def test_the_forced_cluster_entries_declare_the_widest_row_they_take(name: str) -> None:
    """The forced cluster path holds a row in 8 blocks, of 512 threads for float32 and 256 for
    bfloat16, 8 vectors each: 131072 columns either way, and its launcher refuses wider rows. The
    entries declare that width, so `long_rows` (up to 2^18 + 1 columns) draws the widest rows they
    take rather than meeting the refusal as a contract failure only in the seeds that draw wider ones."""
    spec = next(k for k in KERNELS if k.name == name)
    width = 16 // get_dtype(spec.dtype).itemsize
    widest = spec.constraints.max_cols
    assert widest == PORTABLE_CLUSTER * (512 if width == 4 else 256) * 8 * width == 131072
    assert cluster_shape(widest, vector_width=width, blocks=PORTABLE_CLUSTER) is not None
    assert cluster_shape(widest + 1, vector_width=width, blocks=PORTABLE_CLUSTER) is None


# --- on the GPU --------------------------------------------------------------------------------


def _reference_rows(op: str, x: np.ndarray, gamma=None, beta=None, eps=1e-5) -> np.ndarray:
    x = x.astype(np.float64)
    if op == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if op == "layernorm":
        m = x.mean(axis=1, keepdims=True)
        return (x - m) / np.sqrt(((x - m) ** 2).mean(axis=1, keepdims=True) + eps) * gamma + beta
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * gamma


def _device_args(op: str, cupy, rows: int, cols: int, seed: int = 0):
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal((rows, cols), dtype=cupy.float32)
    g = rng.standard_normal(cols, dtype=cupy.float32)
    b = rng.standard_normal(cols, dtype=cupy.float32)
    return x, g, b


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("cols", [5, 1024, 1027])
def test_misaligned_rows_give_the_same_bits(op: str, cols: int) -> None:
    """A row starting off a 16-byte boundary takes the scalar path: same element -> thread map,
    same arithmetic, so bit-for-bit the aligned result."""
    import cupy

    from normprops.cuda.prod import ProdKernel

    rows = 33
    x, g, b = _device_args(op, cupy, rows, cols)
    kernel = ProdKernel(op, dtype="float32")
    extra = {"softmax": (), "layernorm": (g, b), "rmsnorm": (g,)}[op]
    out = cupy.empty_like(x)
    kernel.launch(x, out, *extra, rows=rows, cols=cols, eps=1e-5)
    base = cupy.empty(rows * cols + 1, dtype=cupy.float32)
    shifted = base[1:].reshape(rows, cols)  # 4 bytes past an aligned allocation
    shifted[...] = x
    out2 = cupy.empty(rows * cols + 1, dtype=cupy.float32)[1:].reshape(rows, cols)
    kernel.launch(shifted, out2, *extra, rows=rows, cols=cols, eps=1e-5)
    assert shifted.data.ptr % 16 == 4
    assert cupy.array_equal(out.view(cupy.uint32), out2.view(cupy.uint32))
    want = _reference_rows(op, cupy.asnumpy(x), cupy.asnumpy(g), cupy.asnumpy(b))
    assert np.max(np.abs(cupy.asnumpy(out) - want)) < 1e-4 * max(1.0, np.max(np.abs(want)))


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm", "addrmsnorm"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("cols, offset", [(5, 0), (1027, 0), (2880, 1), (4097, 0), (5121, 3)])
def test_rows_off_the_16_byte_grid_keep_their_bits(op: str, dtype: str, cols: int, offset: int) -> None:
    """16-bit rows of an odd width start at every offset in their 16-byte block (and offset > 0 puts
    the whole batch off the grid): the shifted copy must give each row, and the fused kernel's
    updated residual, the bits that row gets alone at an aligned address."""
    arrays = ("x", "out", "residual", "gamma", "beta")
    _check_rows_alone(op, dtype, cols, offsets=dict.fromkeys(arrays, offset))


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["layernorm", "addrmsnorm"])
@pytest.mark.parametrize("cols", [1027, 2880, 4097])
def test_arrays_at_different_offsets_keep_the_bits(op: str, cols: int) -> None:
    """Each array of a launch off the grid at its own offset (each computes its own shift): x 1,
    out 0, residual 5, gamma 3, beta 6 elements past a 16-byte boundary."""
    _check_rows_alone(op, "bfloat16", cols, offsets={"x": 1, "out": 0, "residual": 5, "gamma": 3, "beta": 6})


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm", "addrmsnorm"])
@pytest.mark.parametrize("dtype, cols", [("bfloat16", 2048), ("bfloat16", 1019), ("float32", 1000),
                                         ("bfloat16", 8192), ("float32", 8192), ("bfloat16", 4097),
                                         ("bfloat16", 2880), ("bfloat16", 5121), ("float32", 2048),
                                         ("float16", 4096)])
@pytest.mark.parametrize("params_at", [0, 3], ids=["aligned", "gamma-off-grid"])
def test_a_decode_batch_keeps_the_bits_of_a_full_one(op: str, dtype: str, cols: int, params_at: int) -> None:
    """A batch too small to fill the GPU takes one row per block (Shape.for_batch) and, for a norm,
    its decode entry point (prod_decode.cu, each thread's vectors spread over several: decode_split),
    a large one several rows per block and the prefill kernel: its first rows must get the same bits
    either way. The rows: ordinary, huge and tiny (the norms' scaled second pass, which the split
    groups take together), a large mean, one holding inf, one holding NaN, and one whose only huge
    element is its last (in the last split group's vector). 4097 and 5121: rows off the 16-byte
    grid; params_at: gamma and beta that many elements past a 16-byte boundary, beta one more."""
    import cupy

    from normprops.bench.launchers import device_storage
    from normprops.cuda.prod import ProdKernel, decode_split, multiprocessors

    kernel = ProdKernel(op, dtype=dtype)
    shape = kernel.shape(cols)
    sms = multiprocessors(cupy.cuda.Device().id)
    rows = sms * shape.rpb + 3
    few = 7
    assert not shape.decode(rows, sms=sms) and shape.decode(few, sms=sms)
    assert shape.for_batch(few, sms=sms).rpb == 1
    if op != "softmax" and shape.vpt > 1 and shape.tpr <= 256:
        assert decode_split(shape) > 1  # the decode kernel spreads the vectors
    rng = cupy.random.default_rng(cols)
    top = 10 if dtype == "float16" else 110  # 2^top: past the norms' one-pass range, in the type's
    data = rng.standard_normal((rows, cols), dtype=cupy.float32)
    data[1] *= 2.0**top
    data[2] *= 2.0**-top
    data[3] += 1000.0
    data[4, 7] = np.inf
    data[5, cols // 3] = np.nan
    data[6, -1] = 2.0**top
    others = (rng.standard_normal(n, dtype=cupy.float32) for n in ((rows, cols), cols, cols))
    x, res, g, b = (device_storage(a, dtype) for a in (data, *others))
    if params_at:
        g = cupy.concatenate([cupy.zeros(params_at, dtype=g.dtype), g])[params_at:]
        b = cupy.concatenate([cupy.zeros(params_at + 1, dtype=b.dtype), b])[params_at + 1:]

    def run(n: int, spread: bool = True):
        out, r = cupy.zeros_like(x[:n]), res[:n].copy()
        kernel.launch(*kernel.operands(x=x[:n], out=out, residual=r, gamma=g, beta=b), rows=n, cols=cols,
                      eps=1e-5, spread=spread)
        return cupy.concatenate([out, r]).ravel().view(cupy.uint8)

    row = cols * x.itemsize  # bytes of a row
    full, small, packed = run(rows), run(few), run(few, spread=False)  # packed: the rows in one block
    for other in (small, packed):
        assert cupy.array_equal(full[:few * row], other[:few * row])
        if op == "addrmsnorm":
            assert cupy.array_equal(full[rows * row:(rows + few) * row], other[few * row:])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cols", [2048, 8192, 4097])
def test_rms_norm_does_not_depend_on_the_rows_scale(dtype: str, cols: int) -> None:
    """RMS norm adds the unscaled squares while the row's warp totals lie in [2^-60, 2^120] and
    scales the row otherwise (prod.cu's rowSquareSum): the same row scaled by 2^k across both ends of
    that range (and to the ends of the type's), as a decode batch and as a prefill one, must give the
    output of the row itself, to the output's rounding (eps 0: the norm is scale-free)."""
    import cupy

    from normprops.bench.launchers import device_storage
    from normprops.cuda.prod import ProdKernel, from_storage

    kernel = ProdKernel("rmsnorm", dtype=dtype)
    scales = [*range(-70, -25, 3), *range(45, 66, 2), -120, 120]  # warp totals ~ 2^(2k + 12) at 2048
    rng = cupy.random.default_rng(cols)
    # |x| in [1, 2): every scaled copy stays a normal number (subnormal inputs lose bits of their own)
    base = rng.uniform(1.0, 2.0, cols, dtype=cupy.float32) * (rng.integers(0, 2, cols) * 2 - 1)
    rows = cupy.stack([base * cupy.float32(2.0**k) for k in (0, *scales)]).astype(cupy.float32)
    x = device_storage(rows, dtype)
    g = device_storage(cupy.ones(cols, dtype=cupy.float32), dtype)
    # a few float32 ulps (rsqrt's approximation), one rounding of each 16-bit output either way
    tol = 8 * 2.0**-23 if dtype == "float32" else 2 * 2.0**-7
    for spread in (True, False):
        out = cupy.zeros_like(x)
        kernel.launch(x, out, g, rows=len(rows), cols=cols, eps=0.0, spread=spread)
        y = from_storage(out, dtype).astype(np.float64)
        assert np.isfinite(y).all(), f"spread={spread}: nonfinite outputs at scales {scales}"
        err = np.abs(y[1:] - y[0]).max(axis=1) / np.abs(y[0]).max()
        bad = [(k, e) for k, e in zip(scales, err) if e > tol]
        assert not bad, f"spread={spread}: (2^k, error / max |out|) off the unscaled row: {bad}"


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("cols", [2048, 8192])
def test_norms_take_an_eps_near_the_float_max(op: str, cols: int) -> None:
    """eps = 3e38 beside a mean square of 2^118-2^120: ms + eps unscaled would overflow to inf and
    every output to 0 (or beta). Such an eps sends every row through the scaled pass (prod.cu's
    rangeVerdict); the outputs must match float64."""
    import cupy

    from normprops.cuda.prod import ProdKernel

    rows, eps = 3, 3.0e38
    x = np.tile(np.where(np.arange(cols) % 2, -1.0, 1.0), (rows, 1)) * 2.0**59
    x[1] *= 2.0  # mean square 2^120 for RMS norm
    x[2] *= np.linspace(0.5, 1.5, cols)
    g = np.linspace(0.5, 2.0, cols)
    b = np.linspace(-1.0, 1.0, cols)
    if op == "rmsnorm":
        want = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * g
    else:
        d = x - x.mean(axis=1, keepdims=True)
        want = d / np.sqrt(np.mean(d * d, axis=1, keepdims=True) + eps) * g + b
    kernel = ProdKernel(op, dtype="float32")
    for spread in (True, False):
        out = cupy.zeros((rows, cols), dtype=cupy.float32)
        args = (cupy.asarray(x, dtype=cupy.float32), out, cupy.asarray(g, dtype=cupy.float32),
                *((cupy.asarray(b, dtype=cupy.float32),) if op == "layernorm" else ()))
        kernel.launch(*args, rows=rows, cols=cols, eps=eps, spread=spread)
        err = np.max(np.abs(cupy.asnumpy(out) - want)) / np.max(np.abs(want))
        assert err < 1e-5, f"spread={spread}: max error {err:.3g} of max |out|"


def _nine_rows(rng, cols: int, top: int):
    """Nine float32 rows of every kind a norm meets: ordinary, huge (2^top), tiny (2^-top), a large
    mean, an inf, a NaN, a lone huge last element, zeros, every third element tiny."""
    import cupy

    x = rng.standard_normal((9, cols), dtype=cupy.float32)
    x[1] *= 2.0**top
    x[2] *= 2.0**-top
    x[3] += 1000.0
    x[4, cols // 2] = np.inf
    x[5, cols - 1] = np.nan
    x[6, cols - 1] = 2.0**top
    x[7] = 0.0
    x[8, ::3] *= 2.0**-top
    return x


def _placed(a, at: int):
    """A copy of device array a that starts ``at`` elements past an aligned allocation."""
    import cupy

    flat = cupy.zeros(a.size + at, dtype=a.dtype)[at:]
    flat[...] = a.ravel()
    return flat.reshape(a.shape)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm", "addrmsnorm"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_decode_shape_keeps_the_prefill_bits(op: str, dtype: str) -> None:
    """Every register-path launch shape (vectors, threads per row) of the norm at widths up to 65535,
    at its narrowest and widest widths and an odd one between: nine rows (ordinary, huge, tiny, a
    large mean, inf, NaN, a lone huge last element, zeros, every third element tiny) launched as a
    decode batch (the split kernels) and in the prefill kernel give the same bytes: every array
    aligned (the dense kernels at the widest width of each shape), or gamma / beta 3 off the 16-byte
    grid with x and the residual aligned or 1 element off it."""
    import cupy

    from normprops.bench.launchers import device_storage
    from normprops.cuda.prod import ProdKernel

    per_thread = prod_layout(op, dtype)[0]
    widths: dict[tuple[int, int], list[int]] = {}
    for cols in range(1, 65536):
        shape = launch_shape(cols, dtype=dtype, per_thread=per_thread)
        if shape.vpt:
            widths.setdefault((shape.vpt, shape.tpr), []).append(cols)
    kernel = ProdKernel(op, dtype=dtype)
    top = 10 if dtype == "float16" else 110

    differ = []
    for shape, cs in sorted(widths.items()):
        odd = [c for c in cs if c % 2] or cs
        for cols in sorted({cs[0], odd[len(odd) // 2], cs[-1]}):
            rng = cupy.random.default_rng(cols)
            x = _nine_rows(rng, cols, top)
            res, g, b = (device_storage(rng.standard_normal(n, dtype=cupy.float32), dtype)
                         for n in ((9, cols), cols, cols))
            for at, params_at in ((0, 0), (0, 3), (1, 3)):
                xs, rs = _placed(device_storage(x, dtype), at), _placed(res, at)
                gs, bs = _placed(g, params_at), _placed(b, params_at + params_at // 3)
                got = []
                for spread in (True, False):
                    out, r = _placed(cupy.zeros_like(xs), at), _placed(rs.copy(), at)
                    kernel.launch(*kernel.operands(x=xs, out=out, residual=r, gamma=gs, beta=bs), rows=9,
                                  cols=cols, eps=1e-5, spread=spread)
                    got.append(cupy.concatenate([out.ravel(), r.ravel()]).view(cupy.uint8))
                if not cupy.array_equal(*got):
                    differ.append((shape, cols, at, params_at))
    assert not differ


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_off_grid_kernel_keeps_the_general_kernels_bits(op: str, dtype: str) -> None:
    """The off-grid prefill kernel (``_sh``, only the shifted copy compiled) and the general one give
    the same bytes for rows off the 16-byte grid: nine rows of every kind (as above) at odd widths of
    4 and 8 vectors a thread (777: a row of one warp), x and out 0 or 1 element off the grid, gamma
    and beta 0 or 3."""
    import cupy

    from normprops.bench.launchers import device_storage
    from normprops.cuda.prod import ProdKernel

    kernel = ProdKernel(op, dtype=dtype)
    top = 10 if dtype == "float16" else 110

    differ, launched = [], 0
    for cols in (777, 1031, 2881, 4097, 5121, 7169, 8191):
        shape = kernel.shape(cols)
        assert shape.vpt in (4, 8), (cols, shape)
        rng = cupy.random.default_rng(cols)
        x = _nine_rows(rng, cols, top)
        g, b = (device_storage(rng.standard_normal(cols, dtype=cupy.float32), dtype) for _ in range(2))
        for at, params_at in ((0, 0), (1, 0), (0, 3), (1, 3)):
            xs, gs, bs = _placed(device_storage(x, dtype), at), _placed(g, params_at), _placed(b, params_at)
            got = []
            for shifted in (False, True):
                out = _placed(cupy.zeros_like(xs), at)
                arrays = kernel.operands(x=xs, out=out, gamma=gs, beta=bs)
                assert kernel.shifted(arrays, shape=shape, cols=cols)
                args = (*arrays, np.uint64(9), np.uint64(cols), np.float32(1e-5))
                kernel._function(shape.vpt, shifted=shifted)(shape.grid(9), shape.block(), args)
                got.append(out.view(cupy.uint16).copy())
            launched += 1
            if not cupy.array_equal(*got):
                differ.append((cols, at, params_at))
    assert launched == 28 and not differ


def _check_rows_alone(op: str, dtype: str, cols: int, *, offsets: dict[str, int]) -> None:
    """19 rows (every shift of a row of odd width, twice, and a partly empty last block), each array
    placed offsets[name] elements past an aligned allocation: each row's output (and the fused
    kernel's updated residual) must have the bits of that row launched alone, every array aligned."""
    import cupy

    from normprops.bench.launchers import device_storage
    from normprops.cuda.prod import ProdKernel

    rows = 19
    kernel = ProdKernel(op, dtype=dtype)
    rng = cupy.random.default_rng(cols)
    x, res, g, b = (device_storage(rng.standard_normal(n, dtype=cupy.float32), dtype)
                    for n in ((rows, cols), (rows, cols), cols, cols))

    def run(xs, rs, at: dict[str, int]):
        xs, out = _placed(xs, at["x"]), _placed(cupy.zeros_like(xs), at["out"])
        rs = None if rs is None else _placed(rs, at["residual"])
        gs, bs = _placed(g, at["gamma"]), _placed(b, at["beta"])
        # the width's rows per block, whatever the batch: the last block partly empty
        kernel.launch(*kernel.operands(x=xs, out=out, residual=rs, gamma=gs, beta=bs),
                      rows=xs.shape[0], cols=cols, eps=1e-5, spread=False)
        return out if rs is None else cupy.concatenate([out, rs])

    batch = run(x, res if op == "addrmsnorm" else None, offsets)
    aligned = dict.fromkeys(offsets, 0)
    for r in range(rows):
        alone = run(x[r:r + 1], res[r:r + 1] if op == "addrmsnorm" else None, aligned)
        got = batch[r::rows] if op == "addrmsnorm" else batch[r:r + 1]
        assert cupy.array_equal(got, alone), f"row {r} (x shift {(r * cols + offsets['x']) % 8})"


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm", "addrmsnorm"])
@pytest.mark.parametrize("cols, blocks", [(20_000, 2), (40_000, 3), (70_001, 5), (100_000, 8), (140_000, 10)])
def test_streaming_or_cluster_path_for_wide_rows(op: str, cols: int, blocks: int) -> None:
    """Rows past one block's registers: the norms stream; softmax takes the fewest cluster blocks
    that hold the row on sm_90 and later, past 8 blocks only where the GPU runs non-portable
    clusters (else it streams)."""
    import cupy

    from normprops.cuda import prod

    name = {"softmax": "softmaxFast", "layernorm": "layerNormFast", "rmsnorm": "rmsNormFast",
            "addrmsnorm": "addRmsNormFast"}[op]
    shape = prod.ProdKernel(op, dtype="float32").shape(cols)
    if op == "softmax" and blocks and prod.clusters_supported() and blocks <= prod.largest_cluster():
        assert shape.cluster == blocks and shape.vpt == 8
    else:
        assert shape.vpt == 0 and shape.cluster == 1
    x, g, b = (cupy.asnumpy(a) for a in _device_args(op, cupy, 3, cols))
    args = {"softmax": (), "layernorm": (g, b, 1e-5)}.get(op, (g, 1e-5))
    got = getattr(prod, name)(x, *args)
    want = _reference_rows("rmsnorm" if op == "addrmsnorm" else op, x, g, b)
    assert np.max(np.abs(got - want)) < 1e-4 * max(1.0, np.max(np.abs(want)))


def _one_blocks_share(cols: int, *, blocks: int, width: int, block: int, threads: int) -> np.ndarray:
    """The columns that cluster block ``block`` of ``threads`` threads holds (its threads t hold
    vectors j * T + block * threads + t, T = blocks * threads, j < 8): masked with -inf, that block
    sees nothing else."""
    share = np.zeros(cols, dtype=bool)
    for j in range(8):
        start = (j * blocks * threads + block * threads) * width
        share[start:start + threads * width] = True
    return share


def _masked_rows(x: np.ndarray, *, blocks: int, width: int, threads: int = 512) -> np.ndarray:
    """Row 1: its first half -inf. Row 2, on a cluster: the share of block 1 -inf, so that block's
    statistics are (-inf, 0) and must drop out of the merge."""
    x[1, : x.shape[1] // 2] = -np.inf
    if blocks:
        x[2, _one_blocks_share(x.shape[1], blocks=blocks, width=width, block=1, threads=threads)] = -np.inf
    return x


@pytest.mark.gpu
def test_hopper_runs_clusters_of_16() -> None:
    """A full Hopper GPU (compute capability 9.0, 100 SMs or more: H100, H200) accepts the
    non-portable clusters of 16 blocks, so the vocabulary rows below reach the larger clusters."""
    import cupy

    from normprops.cuda import prod

    device = cupy.cuda.Device()
    if device.compute_capability != "90" or device.attributes["MultiProcessorCount"] < 100:
        pytest.skip("clusters of 16 blocks are checked on a full Hopper GPU (H100, H200)")
    assert prod.largest_cluster() == 16


@pytest.mark.gpu
@pytest.mark.parametrize("cols, blocks", [(151_936, 10), (190_000, 12), (262_144, 16), (262_145, 0)])
def test_float32_vocabulary_rows_on_the_largest_clusters(cols: int, blocks: int) -> None:
    """float32 softmax past 8 blocks' registers (131072 columns): 10, 12 or 16 blocks where the GPU
    runs non-portable clusters, else (and past 16 blocks: 0) the streaming path; every element
    within 2^-16 of the float64 softmax relative to it, masked rows included, and each row's bits
    independent of the batch. The bound: x - m rounds with |x - m| < 48 (4 sigma-wide rows), 2.9e-6
    in the exponent; the sum of at most 32 elements a thread, a 9-level tree in the block and 4
    levels across the cluster with their rescaling, about 55 u = 3.3e-6; expf (the element's and
    its block's factor), the division and the factor's product a few u more: 7e-6 < 2^-16."""
    from normprops.cuda import prod

    if not prod.clusters_supported():
        pytest.skip("thread-block clusters need compute capability 9.0 or later")
    shape = prod.ProdKernel("softmax", dtype="float32").shape(cols)
    on_cluster = bool(blocks) and blocks <= prod.largest_cluster()
    assert (shape.cluster, shape.vpt) == ((blocks, 8) if on_cluster else (1, 0))
    rng = np.random.default_rng(cols)
    x = _masked_rows((rng.standard_normal((4, cols)) * 4).astype(np.float32),
                     blocks=blocks if on_cluster else 0, width=4)
    got = prod.softmaxFast(x)
    want = _reference_rows("softmax", x)
    assert np.all(np.abs(got - want) <= 2.0**-16 * want + 2.0**-40)
    assert np.array_equal(prod.softmaxFast(x[2:]).view(np.uint32), got[2:].view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("cols, blocks, threads", [(40_000, 3, 256), (70_001, 5, 256), (128_256, 8, 256),
                                                   (151_936, 10, 256), (262_144, 16, 256), (262_145, 10, 512),
                                                   (524_288, 16, 512)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cluster_path_for_vocabulary_rows(cols: int, blocks: int, threads: int, dtype: str) -> None:
    """16-bit softmax over vocabulary-wide rows on 3 to 16 cluster blocks of 256 threads, or of 512
    past what 16 of 256 hold (past 8 blocks where the GPU runs non-portable clusters, else fewer,
    larger blocks or streaming): every element within its storage rounding of the float64 softmax
    (float16's subnormal spacing below), masked rows included, and each row's bits independent of
    the batch."""
    from normprops.cuda import prod

    if not prod.clusters_supported():
        pytest.skip("thread-block clusters need compute capability 9.0 or later")
    shape = prod.ProdKernel("softmax", dtype=dtype).shape(cols)
    if prod.largest_cluster() == 16:
        assert (shape.cluster, shape.tpr, shape.vpt) == (blocks, threads, 8)
    else:  # the same rule with at most 8 blocks
        held = cluster_shape(cols, vector_width=8, largest=prod.largest_cluster())
        assert shape == (held or Shape(0, 1024, 1))
    rng = np.random.default_rng(cols)
    x = _masked_rows(to_dtype((rng.standard_normal((4, cols)) * 4).astype(np.float32), dtype),
                     blocks=shape.cluster if shape.cluster > 1 else 0, width=8, threads=shape.tpr)
    fn = getattr(prod, "softmaxFastBf16" if dtype == "bfloat16" else "softmaxFastF16")
    got = fn(x)
    want = _reference_rows("softmax", x)
    unit = 2.0**-8 if dtype == "bfloat16" else 2.0**-11
    assert np.all(np.abs(got - want) <= 2 * unit * want + 2.0**-24)
    assert np.array_equal(fn(x[2:]).view(np.uint32), got[2:].view(np.uint32))


@pytest.mark.gpu
def test_many_rows_and_offsets_beyond_2_to_the_31() -> None:
    """rows > 65535 (grid.x) and element offsets past 2^31 (size_t indexing): the last rows of a
    2^31 + 2 x 16384-element batch are right."""
    import cupy

    from normprops.cuda.prod import ProdKernel

    cols = 16384
    rows = 2**31 // cols + 2
    x = cupy.empty((rows, cols), dtype=cupy.float32)
    x[-4:] = cupy.random.default_rng(1).standard_normal((4, cols), dtype=cupy.float32)
    x[:-4] = 1.0
    g = cupy.ones(cols, dtype=cupy.float32)
    for op, extra in (("rmsnorm", (g,)), ("softmax", ())):
        out = cupy.empty_like(x)
        ProdKernel(op, dtype="float32").launch(x, out, *extra, rows=rows, cols=cols, eps=1e-5)
        tail = cupy.asnumpy(out[-4:])
        want = _reference_rows(op, cupy.asnumpy(x[-4:]), np.ones(cols), None)
        assert np.max(np.abs(tail - want)) < 1e-5 * max(1.0, np.max(np.abs(want))), op
        del out
    small = cupy.asarray(np.random.default_rng(2).standard_normal((70_000, 8)).astype(F32))
    out = cupy.empty_like(small)
    ProdKernel("rmsnorm", dtype="float32").launch(small, out, g[:8], rows=70_000, cols=8, eps=1e-5)
    want = _reference_rows("rmsnorm", cupy.asnumpy(small), np.ones(8), None)
    assert np.max(np.abs(cupy.asnumpy(out) - want)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_fused_kernel_updates_the_residual_in_place(dtype: str) -> None:
    import cupy

    from normprops.cuda.prod import ProdKernel, from_storage, to_storage

    rng = np.random.default_rng(5)
    rows, cols = 7, 3000
    x = to_dtype(rng.standard_normal((rows, cols)).astype(F32), dtype)
    r = to_dtype(rng.standard_normal((rows, cols)).astype(F32), dtype)
    g = to_dtype(rng.standard_normal(cols).astype(F32), dtype)
    xs, rs, gs = (to_storage(a, dtype, name=n) for a, n in ((x, "x"), (r, "residual"), (g, "gamma")))
    out = cupy.empty_like(xs)
    ProdKernel("addrmsnorm", dtype=dtype).launch(xs, rs, out, gs, rows=rows, cols=cols, eps=1e-5)
    h = to_dtype((x.astype(np.float64) + r).astype(F32), dtype)  # x + r rounded once
    assert np.array_equal(from_storage(rs, dtype), h)
    want = _reference_rows("rmsnorm", h, g, None)
    tol = 2 * DTYPES[dtype].u + 1e-5
    assert np.max(np.abs(from_storage(out, dtype) - want) / (np.abs(want) + 1e-3)) < tol


@pytest.mark.gpu
def test_narrow_input_that_is_not_exact_is_refused() -> None:
    from normprops.cuda import prod

    with pytest.raises(ValueError, match=r"x\[0, 0\] = .* is not exactly representable in bfloat16"):
        prod.softmaxFastBf16(np.array([[1.0 + 2**-10, 2.0]], F32))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm", "addrmsnorm"])
@pytest.mark.parametrize("cols, per_thread", [(1000, 32), (4096, 32), (4096, 64), (4101, 64)])
def test_packed_storage_gives_the_same_bits(dtype: str, op: str, cols: int, per_thread: int) -> None:
    """The packed 16-bit register storage (not the default yet) must change nothing but speed."""
    import cupy

    from normprops.cuda.prod import ProdKernel, to_storage

    rng = np.random.default_rng(7)
    rows = 9
    x, r = (to_storage(to_dtype(rng.standard_normal((rows, cols)).astype(F32), dtype), dtype, name=n)
            for n in ("x", "residual"))
    g, b = (to_storage(to_dtype(rng.standard_normal(cols).astype(F32), dtype), dtype, name=n)
            for n in ("gamma", "beta"))
    outs = []
    for packed in (False, True):
        kernel = ProdKernel(op, dtype=dtype, per_thread=per_thread, packed=packed)
        out, res = cupy.empty_like(x), r.copy()
        kernel.launch(*kernel.operands(x=x, out=out, residual=res, gamma=g, beta=b), rows=rows,
                      cols=cols, eps=1e-5)
        outs.append((out, res))
    assert cupy.array_equal(outs[0][0], outs[1][0]) and cupy.array_equal(outs[0][1], outs[1][1])


@pytest.mark.gpu
def test_device_launch_checks_its_arrays() -> None:
    import cupy

    from normprops.cuda.prod import ProdKernel

    x = cupy.zeros((4, 64), dtype=cupy.float32)
    kernel = ProdKernel("rmsnorm", dtype="bfloat16")
    with pytest.raises(ValueError,
                       match=r"x must be a C-contiguous CuPy uint16 array of 256 elements \(bfloat16"):
        kernel.launch(x, x, x[0], rows=4, cols=64, eps=1e-5)
    f32 = ProdKernel("rmsnorm", dtype="float32")
    with pytest.raises(ValueError, match="gamma must be"):
        f32.launch(x, cupy.empty_like(x), x[0, :10], rows=4, cols=64, eps=1e-5)
    with pytest.raises(TypeError, match="takes the arrays x, out, gamma"):
        f32.launch(x, x, rows=4, cols=64, eps=1e-5)
    with pytest.raises(ValueError, match="eps must be"):
        f32.launch(x, cupy.empty_like(x), x[0], rows=4, cols=64, eps=float("nan"))
    f32.launch(x[:0], x[:0], x[0], rows=0, cols=64, eps=1e-5)  # no rows: nothing launched


def test_a_decode_launch_takes_the_dense_kernel_only_where_every_access_is_whole() -> None:
    """prod_decode.cu's dense kernels compile only the whole-vector copy: the launcher picks one only
    for a row of exactly the threads' vectors with every array 16-byte aligned."""
    from types import SimpleNamespace

    from normprops.cuda.prod import dense_decode

    def arrays(*ptrs: int):
        return tuple(SimpleNamespace(data=SimpleNamespace(ptr=p)) for p in ptrs)

    shape = launch_shape(2048, dtype="bfloat16")
    assert shape.tpr * shape.vpt * 8 == 2048
    assert dense_decode(arrays(256, 4096, 512), shape=shape, cols=2048, width=8)
    assert not dense_decode(arrays(256, 4096, 512 + 6), shape=shape, cols=2048, width=8)  # gamma off the grid
    assert not dense_decode(arrays(258, 4096, 512), shape=shape, cols=2048, width=8)  # x off the grid
    ragged = launch_shape(2880, dtype="bfloat16")
    # the last threads' vectors lie past the row's end
    assert not dense_decode(arrays(256, 4096, 512), shape=ragged, cols=2880, width=8)
    assert entry_point("rmsnorm", "bfloat16", 8, packed=True, decode=True, split=8, dense=True) == \
        "rmsnorm_bf16_p8_s8_da"


def test_a_prefill_launch_off_the_grid_takes_the_off_grid_kernel() -> None:
    """A width the 16-byte vectors do not divide, or any array off the 16-byte grid, puts a launch's
    rows off the grid: there the packed layer norm and RMS norm at 4 or 8 vectors a thread take
    their ``_sh`` kernel."""
    from types import SimpleNamespace

    from normprops.cuda.prod import ProdKernel

    def arrays(*ptrs: int):
        return tuple(SimpleNamespace(data=SimpleNamespace(ptr=p)) for p in ptrs)

    rms = ProdKernel("rmsnorm", dtype="bfloat16")
    shape = launch_shape(4096, dtype="bfloat16")
    assert not rms.shifted(arrays(256, 4096, 512), shape=shape, cols=4096)
    assert rms.shifted(arrays(256, 4096, 512), shape=shape, cols=4097)
    assert rms.shifted(arrays(258, 4096, 512), shape=shape, cols=4096)  # x off the grid
    assert rms.shifted(arrays(256, 4096, 512 + 6), shape=shape, cols=4096)  # gamma off the grid
    # no off-grid kernel: float32, the softmax, the fused kernel, or 1-2 vectors a thread
    assert not ProdKernel("rmsnorm", dtype="float32").shifted(arrays(256, 4096, 512), shape=shape, cols=4097)
    assert not ProdKernel("softmax", dtype="bfloat16").shifted(arrays(256, 4096), shape=shape, cols=4097)
    assert not ProdKernel("addrmsnorm", dtype="bfloat16").shifted(arrays(256, 258, 4096, 512), shape=shape,
                                                                  cols=4097)
    assert not rms.shifted(arrays(256, 4096, 512), shape=launch_shape(255, dtype="bfloat16"), cols=255)
    assert entry_point("layernorm", "bfloat16", 8, packed=True, shifted=True) == "layernorm_bf16_p8_sh"
    assert off_grid_entry_points() == {f"{op}_{d}_p{v}_sh" for op in ("layernorm", "rmsnorm")
                                       for d in ("bf16", "f16") for v in (4, 8)}


@pytest.mark.parametrize("cols, dense, split", [
    (2048, True, 8), (2048, False, 8),     # one warp of 8 vectors: 256 threads either way
    (4096, True, 2), (4096, False, 8),     # 64 threads: the dense kernel in two, the general one to 512
    (8192, True, 2), (8192, False, 4),     # 128 threads of 8 vectors
    (5120, True, 2), (7168, True, 2),      # 160 and 224 threads of 4 vectors: 320 and 448
    (2880, False, 4),                      # 96 threads of 4 vectors: 384
    (16384, True, 2), (32768, True, 1),    # 256 threads: 512 in two groups; 512: none
])
def test_decode_split_follows_the_kernel(cols: int, dense: bool, split: int) -> None:
    """The decode split of a bfloat16 RMS norm row (prod.py's decode_split): the dense kernel splits a
    row of one warp 8 ways and others 2 ways, the general kernel as far as 512 threads allow."""
    from normprops.cuda.prod import decode_split

    shape = launch_shape(cols, dtype="bfloat16", per_thread=prod_layout("rmsnorm", "bfloat16")[0])
    assert decode_split(shape, dense=dense) == split


def test_every_entry_point_is_spelled_out_in_prod_cu() -> None:
    """The launcher asks for exactly the kernels prod.cu and prod_kept_bad.cu define, each name
    greppable there."""
    cuda = Path(__file__).parents[1] / "normprops" / "cuda"
    source = (cuda / "prod.cu").read_text() + (cuda / "prod_kept_bad.cu").read_text()
    defined = set(re.findall(r"^NP_[A-Z0-9_]+\((\w+),", source, flags=re.M))
    wanted = {entry_point(op, dtype, vpt, packed=packed)
              for op in ("softmax", "layernorm", "rmsnorm", "addrmsnorm")
              for dtype in ("float32", "bfloat16", "float16")
              for vpt in (0, *VPTS)
              for packed in ((False, True) if dtype != "float32" and vpt in PACKED_VPTS else (False,))}
    wanted |= {entry_point("rmsnormbf16acc", "bfloat16", vpt, packed=False) for vpt in VPTS}
    wanted |= off_grid_entry_points()
    wanted |= {entry_point("softmax", dtype, CLUSTER_VPT, packed=dtype != "float32", cluster=n)
               for dtype in ("float32", "bfloat16", "float16") for n in CLUSTER_SIZES}
    assert defined == wanted, (sorted(wanted - defined), sorted(defined - wanted))
    assert "##" not in source  # no token pasting: every name appears as it is looked up
    decode = (cuda / "prod_decode.cu").read_text()
    defined = set(re.findall(r"^NP_[A-Z0-9_]+\((\w+),", decode, flags=re.M))
    assert defined == decode_entry_points(), sorted(defined ^ decode_entry_points())
    assert "##" not in decode
