"""The numpy emulations follow the textbook kernels' order of operations, and show their bugs."""

from __future__ import annotations

import numpy as np
import pytest

from normprops.backends import numpy_kernels as nk

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
