"""The numpy backend: the emulations follow the textbook kernels' order of operations and show their
bugs, and its registry reaches every op, a first hunt included."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from normprops.backends import numpy_kernels as nk
from normprops.backends.numpy_examples import in_storage_type
from normprops.examples.backward_correct import rmsnorm_backward_f32
from normprops.ops import OPS, get_op, is_backward
from normprops.registry_hunt import plan_cells
from normprops.specs import KERNELS

F32 = np.float32


def _scalar_block_sum(row: np.ndarray) -> np.float32:
    """kernels.cu's blockReduceSum written out one thread at a time, in float32 scalars."""
    partial = [F32(0)] * 256
    for c, v in enumerate(row):
        partial[c % 256] = F32(partial[c % 256] + F32(v))
    warp_totals = []
    for w in range(8):
        lanes = partial[32 * w : 32 * w + 32]
        offset = 16
        while offset:
            lanes = [F32(lanes[i] + lanes[i + offset]) if i + offset < 32 else lanes[i]
                     for i in range(32)]
            offset //= 2
        warp_totals.append(lanes[0])
    total = warp_totals[0]
    for t in warp_totals[1:]:
        total = F32(total + t)
    return total


@pytest.mark.parametrize("cols", [1, 3, 255, 257, 1000, 4097])
def test_block_sum_matches_thread_by_thread_emulation(cols: int) -> None:
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((2, cols)) * 1e3).astype(F32)
    got = nk._block_sum(x)[:, 0]
    expected = [_scalar_block_sum(row) for row in x]
    assert got.view(np.uint32).tolist() == np.array(expected, F32).view(np.uint32).tolist()


@pytest.mark.parametrize("cols", [1, 2, 31, 256, 300, 2049])
def test_welford_matches_two_pass_on_ordinary_rows(cols: int) -> None:
    rng = np.random.default_rng(cols)
    x = (rng.standard_normal((3, cols)) * 2 + 5).astype(F32)
    g, b = np.ones(cols, F32), np.zeros(cols, F32)
    w = nk.layerNormRowWelford(x, g, b, 1e-5)
    t = nk.layerNormRowTwoPass(x, g, b, 1e-5)
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, t, atol=2e-5)


def test_naive_softmax_overflows_above_88_7() -> None:
    x = np.array([[88.0, 0.0], [89.0, 0.0]], F32)
    out = nk.softmaxRowNaive(x)
    assert np.isfinite(out[0]).all() and np.isnan(out[1, 0])  # inf / inf
    assert np.isfinite(nk.softmaxRowSafe(x)).all()


def test_one_pass_variance_cancels_on_large_mean() -> None:
    rng = np.random.default_rng(0)
    x = (1e4 + rng.standard_normal((1, 1024))).astype(F32)
    g, b = np.ones(1024, F32), np.zeros(1024, F32)
    bad = nk.layerNormRowOnePass(x, g, b, 1e-5)
    good = nk.layerNormRowWelford(x, g, b, 1e-5)
    x64 = x.astype(np.float64)
    exact = (x64 - x64.mean()) / np.sqrt(x64.var() + float(F32(1e-5)))
    assert np.max(np.abs(good - exact)) < 1e-2
    assert not np.max(np.abs(bad - exact)) < 1e-2


def test_rms_norm_of_3e19_row_underflows_like_torch() -> None:
    # x*x overflows to inf, rsqrt(inf) = 0: the textbook kernel is not range-safe (claims no 'huge').
    x = np.full((1, 1024), 3e19, F32)
    assert (nk.rmsNormRow(x, np.ones(1024, F32), 1e-5) == 0).all()


def test_fmaxf_semantics_ignore_nan_in_the_max() -> None:
    x = np.array([[np.nan, 1.0, 2.0]], F32)
    assert nk._block_max(x)[0, 0] == 2.0
    assert np.isnan(nk.softmaxRowSafe(x)).all()


def test_wrong_dtype_is_rejected() -> None:
    with pytest.raises(TypeError, match="x must be a 2-D float32 array but was float64"):
        nk.softmaxRowSafe(np.zeros((2, 3)))


NUMPY = [k for k in KERNELS if k.backend == "numpy"]


FIRST_HUNT = plan_cells(NUMPY, families=None)  # ``normprops hunt`` on a machine without a GPU


@pytest.mark.parametrize("op", list(OPS))
def test_a_first_numpy_hunt_judges_a_claim_of_every_op(op: str) -> None:
    claimed = [f"{spec.name} x {family}" for spec, family in FIRST_HUNT
               if spec.op == op and spec.expectation(family) == "claim"]
    assert claimed, f"a first numpy hunt judges no claim of {op}"
    assert all(callable(spec.load()) for spec in NUMPY if spec.op == op)


def test_a_first_numpy_hunt_hunts_every_known_bug_of_the_numpy_registry() -> None:
    bugs = {(spec.name, bug.family) for spec in NUMPY for bug in spec.bugs}
    hunted = {(spec.name, family) for spec, family in FIRST_HUNT}
    assert bugs - hunted == set()
    # The ops the textbook kernels do not compute have a planted bug each, as the forwards do.
    planted = {op for op in OPS if is_backward(op) or get_op(op).has_mask}
    assert planted - {spec.op for spec in NUMPY if spec.bugs} == set()


def test_a_storage_typed_example_computes_on_its_own_arrays() -> None:
    """Wrapped by ``in_storage_type``, a kernel receives bfloat16 arrays and its float32 results come
    back exact in bfloat16; a float32 argument that bfloat16 cannot hold is refused by name."""
    seen: list[str] = []

    def kernel(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float):
        seen.extend(str(a.dtype) for a in (dy, x, gamma))
        return rmsnorm_backward_f32(dy, x, gamma, eps)

    rng = np.random.default_rng(0)
    dy, x = (rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16).astype(F32) for _ in range(2))
    gamma = np.ones(5, F32)
    dx, dgamma = in_storage_type(kernel, dtype="bfloat16")(dy, x, gamma, 1e-5)
    assert seen == ["bfloat16"] * 3
    assert dx.dtype == dgamma.dtype == F32
    assert np.array_equal(dx, dx.astype(ml_dtypes.bfloat16).astype(F32))
    with pytest.raises(ValueError, match="gamma"):
        in_storage_type(kernel, dtype="bfloat16")(dy, x, gamma + F32(2.0**-20), 1e-5)
