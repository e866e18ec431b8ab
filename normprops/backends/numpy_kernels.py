"""The six textbook kernels of kernels.cu, emulated in float32 numpy, faithful to each kernel's order of
operations.

Launch geometry being emulated (``kernels.cu``'s): one block of 256 threads per row.
Thread ``t`` accumulates columns ``t, t + 256, t + 512, ...`` sequentially into its own partial; five
``__shfl_down_sync`` steps (offsets 16, 8, 4, 2, 1) collapse each warp of 32 to lane 0; the eight warp
totals go through shared memory and every thread folds them in order, ``s[0] + s[1] + ... + s[7]``.
All rows are processed at once (the row is the leading axis of every array below).

Where the CUDA source writes ``fmaf`` the emulation rounds once through float64 (``_fma``): the
product of two float32 values is exact in float64, so only the final addition rounds (twice, which
differs from a true fma in rare ties; the GPU cross-check reports the ULP difference).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = [
    "THREADS",
    "softmaxRowNaive",
    "softmaxRowSafe",
    "layerNormRowTwoPass",
    "layerNormRowWelford",
    "layerNormRowOnePass",
    "rmsNormRow",
]

THREADS = 256
WARP = 32
WARPS = THREADS // WARP
F32 = np.float32

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def _rsqrt(v: np.ndarray) -> np.ndarray:
    return (1.0 / np.sqrt(v.astype(np.float64))).astype(F32)


def _strided(x: np.ndarray, fill: float) -> np.ndarray:
    """(rows, cols) -> (rows, chunks, 256): chunk ``i`` holds column ``i*256 + t`` for thread ``t``."""
    rows, cols = x.shape
    chunks = -(-cols // THREADS)
    padded = np.full((rows, chunks * THREADS), fill, dtype=F32)
    padded[:, :cols] = x
    return padded.reshape(rows, chunks, THREADS)


def _thread_sum(x: np.ndarray) -> np.ndarray:
    """Each thread's sequential partial ``acc = acc + x_c`` over its strided columns."""
    chunks = _strided(x, 0.0)  # padding is 0: acc + 0 leaves acc unchanged
    acc = np.zeros((x.shape[0], THREADS), dtype=F32)
    for i in range(chunks.shape[1]):
        acc = _add(acc, chunks[:, i, :])
    return acc


def _thread_sum_squares(x: np.ndarray) -> np.ndarray:
    """Each thread's sequential partial ``acc = fmaf(x_c, x_c, acc)`` over its strided columns.
    The squares of float32 values are exact in float64, so they are formed once for every chunk;
    each step then rounds ``square + acc`` once, as ``_fma`` does."""
    chunks = _strided(x, 0.0).astype(np.float64)  # padding is 0: fmaf(0, 0, acc) is acc
    squares = chunks * chunks
    acc = np.zeros((x.shape[0], THREADS), dtype=F32)
    for i in range(chunks.shape[1]):
        acc = (squares[:, i, :] + acc).astype(F32)
    return acc


def _block_reduce(partials: np.ndarray, combine: Combine) -> np.ndarray:
    """blockReduce: warp shuffle tree to lane 0, then every thread folds the 8 warp totals in order."""
    lanes = partials.reshape(partials.shape[0], WARPS, WARP)
    offset = WARP // 2
    while offset >= 1:
        # lane i < offset receives lane i + offset: val = combine(val, __shfl_down_sync(val, offset))
        lanes = combine(lanes[..., :offset], lanes[..., offset : 2 * offset])
        offset //= 2
    warp_totals = lanes[..., 0]
    total = warp_totals[:, 0]
    for w in range(1, WARPS):
        total = combine(total, warp_totals[:, w])
    return total[:, None]


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a + b).astype(F32, copy=False)


def _block_sum(x: np.ndarray) -> np.ndarray:
    return _block_reduce(_thread_sum(x), _add)


def _block_sum_squares(x: np.ndarray) -> np.ndarray:
    return _block_reduce(_thread_sum_squares(x), _add)


def _block_max(x: np.ndarray) -> np.ndarray:
    # fmaxf semantics: a NaN operand is ignored, like np.fmax.
    chunks = _strided(x, -np.inf)
    best = np.full((x.shape[0], THREADS), -np.inf, dtype=F32)
    for i in range(chunks.shape[1]):
        best = np.fmax(best, chunks[:, i, :])
    return _block_reduce(best, np.fmax)


def _check(x: np.ndarray) -> None:
    if x.dtype != F32 or x.ndim != 2:
        raise TypeError(f"x must be a 2-D float32 array but was {x.dtype} with shape {x.shape}")


def softmaxRowNaive(x: np.ndarray) -> np.ndarray:
    """sum expf(x), then expf(x) / sum. Overflows once any logit passes 88.7 (kept-bad)."""
    _check(x)
    with np.errstate(all="ignore"):
        e = np.exp(x)
        total = _block_sum(e)
        return (e / total).astype(F32)


def softmaxRowSafe(x: np.ndarray) -> np.ndarray:
    """max pass, sum of expf(x - max), write expf(x - max) / sum."""
    _check(x)
    with np.errstate(all="ignore"):
        row_max = _block_max(x)
        e = np.exp((x - row_max).astype(F32))
        total = _block_sum(e)
        return (e / total).astype(F32)


def _affine(x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, gamma: np.ndarray,
            beta: np.ndarray) -> np.ndarray:
    # out = fmaf((x - mean) * rstd, gamma, beta)
    return _fma(((x - mean).astype(F32) * rstd).astype(F32), gamma[None, :], beta[None, :])


def layerNormRowTwoPass(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """mean pass, centred sum-of-squares pass, write."""
    _check(x)
    cols = F32(x.shape[1])
    with np.errstate(all="ignore"):
        mean = (_block_sum(x) / cols).astype(F32)
        centred = (x - mean).astype(F32)
        var = (_block_sum_squares(centred) / cols).astype(F32)
        rstd = _rsqrt((var + F32(eps)).astype(F32))
        return _affine(x, mean, rstd, gamma, beta)


def _welford_merge(a: tuple[np.ndarray, np.ndarray, np.ndarray],
                   b: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Chan et al.'s merge: n = na + nb, mean += delta*nb/n, m2 += m2b + delta^2*na*nb/n."""
    na, ma, qa = a
    nb, mb, qb = b
    n = (na + nb).astype(F32)
    delta = (mb - ma).astype(F32)
    w = np.where(n > 0, nb / np.where(n > 0, n, F32(1)), F32(0)).astype(F32)
    nab = (na * w).astype(F32)
    merged_mean = _fma(delta, w, ma)
    merged_m2 = _fma((delta * delta).astype(F32), nab, (qa + qb).astype(F32))
    # Empty operands: an empty b changes nothing, an empty a takes b as it is.
    mean = np.where(nb == 0, ma, np.where(na == 0, mb, merged_mean))
    m2 = np.where(nb == 0, qa, np.where(na == 0, qb, merged_m2))
    return n, mean.astype(F32), m2.astype(F32)


def layerNormRowWelford(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Per-thread Welford, merged across the warp by shuffles and across warps in shared memory."""
    _check(x)
    rows, cols = x.shape
    with np.errstate(all="ignore"):
        chunks = _strided(x, 0.0)
        count = np.zeros((rows, THREADS), dtype=F32)
        mean = np.zeros((rows, THREADS), dtype=F32)
        m2 = np.zeros((rows, THREADS), dtype=F32)
        thread = np.arange(THREADS)
        for i in range(chunks.shape[1]):
            valid = (i * THREADS + thread < cols)[None, :]
            v = chunks[:, i, :]
            new_count = (count + F32(1)).astype(F32)
            delta = (v - mean).astype(F32)
            new_mean = (mean + (delta / new_count).astype(F32)).astype(F32)
            new_m2 = _fma(delta, (v - new_mean).astype(F32), m2)
            if i + 1 < chunks.shape[1]:  # every thread has a column in all but the last chunk
                count, mean, m2 = new_count, new_mean, new_m2
                continue
            count = np.where(valid, new_count, count)
            mean = np.where(valid, new_mean, mean)
            m2 = np.where(valid, new_m2, m2)

        lanes = [a.reshape(rows, WARPS, WARP) for a in (count, mean, m2)]
        offset = WARP // 2
        while offset >= 1:
            lanes = list(_welford_merge(tuple(a[..., :offset] for a in lanes),
                                        tuple(a[..., offset : 2 * offset] for a in lanes)))
            offset //= 2
        warp = [a[..., 0] for a in lanes]
        state = tuple(a[:, 0] for a in warp)
        for w in range(1, WARPS):
            state = _welford_merge(state, tuple(a[:, w] for a in warp))
        n, row_mean, row_m2 = (a[:, None] for a in state)
        var = (row_m2 / n).astype(F32)
        rstd = _rsqrt((var + F32(eps)).astype(F32))
        return _affine(x, row_mean, rstd, gamma, beta)


def layerNormRowOnePass(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """var = E[x^2] - E[x]^2 from one pass (kept-bad: cancels when |mean| >> std)."""
    _check(x)
    cols = F32(x.shape[1])
    with np.errstate(all="ignore"):
        mean = (_block_sum(x) / cols).astype(F32)
        mean_sq = (_block_sum_squares(x) / cols).astype(F32)
        var = _fma(-mean, mean, mean_sq)
        rstd = _rsqrt((var + F32(eps)).astype(F32))
        return _affine(x, mean, rstd, gamma, beta)


def rmsNormRow(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """sum of squares pass, write x * rsqrtf(ms + eps) * gamma."""
    _check(x)
    cols = F32(x.shape[1])
    with np.errstate(all="ignore"):
        ms = (_block_sum_squares(x) / cols).astype(F32)
        rstd = _rsqrt((ms + F32(eps)).astype(F32))
        return ((x * rstd).astype(F32) * gamma[None, :]).astype(F32)
