// normprops kernels: six textbook normalization kernels and two kept-bad ones.
//
// Launch shape (all kernels): one block of kThreads = 256 threads per row, grid.x = rows. Thread t
// walks columns t, t + 256, t + 512, ... (a warp reads 32 consecutive floats: coalesced), keeps its
// own partial, then blockReduce* folds the 256 partials: five __shfl_down_sync steps per warp, the
// eight warp totals through shared memory, every thread folding them in order s[0] + ... + s[7].
// normprops/backends/numpy_kernels.py emulates exactly this order; where the emulation rounds
// through float64 to mimic a fused multiply-add, this file writes fmaf explicitly, so the compiler's
// contraction choices cannot make the two drift apart.
//
// Row offsets are size_t: rows x cols beyond 2^31 elements work. Touches count reads and writes of
// the row (the bandwidth table prices every kernel at one read and one write: 8 bytes per element).
//
// NVRTC has no <math.h> macros: -inf is spelled __int_as_float(0xff800000).

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float negativeInfinity() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float warpReduceSum(float v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(kFullMask, v, offset);
    }
    return v;
}

__device__ __forceinline__ float warpReduceMax(float v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        v = fmaxf(v, __shfl_down_sync(kFullMask, v, offset));
    }
    return v;
}

// Lane 0 of each warp writes its total; after the barrier every thread folds all eight. The
// trailing barrier makes the slots safe to reuse for the next reduction: without it a fast warp can
// overwrite slot w while a slow warp is still reading it (softmaxRowNoBarrier keeps that bug).
template <bool kReuseBarrier>
__device__ __forceinline__ float blockReduceSum(float v, float* smem) {
    v = warpReduceSum(v);
    if (threadIdx.x % kWarpSize == 0) smem[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    float total = smem[0];
    for (int w = 1; w < kWarps; ++w) total += smem[w];
    if (kReuseBarrier) __syncthreads();
    return total;
}

template <bool kReuseBarrier>
__device__ __forceinline__ float blockReduceMax(float v, float* smem) {
    v = warpReduceMax(v);
    if (threadIdx.x % kWarpSize == 0) smem[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    float best = smem[0];
    for (int w = 1; w < kWarps; ++w) best = fmaxf(best, smem[w]);
    if (kReuseBarrier) __syncthreads();
    return best;
}

// Chan, Golub & LeVeque's merge of two (count, mean, M2) summaries.
__device__ __forceinline__ void welfordMerge(float& n, float& mean, float& m2, float nb, float meanb,
                                             float m2b) {
    if (nb == 0.0f) return;
    if (n == 0.0f) {
        n = nb;
        mean = meanb;
        m2 = m2b;
        return;
    }
    const float total = n + nb;
    const float delta = meanb - mean;
    const float w = nb / total;
    const float nab = n * w;  // na * nb / n
    mean = fmaf(delta, w, mean);
    m2 = fmaf(delta * delta, nab, m2 + m2b);
    n = total;
}

// copyFloor: out = in, with the kernels' launch shape. Touches 2. The floor the textbook table is
// priced against (the device-to-device memcpy is the true one; bench measures both).
extern "C" __global__ void copyFloor(const float* __restrict__ in, float* __restrict__ out,
                                     size_t cols) {
    const size_t base = static_cast<size_t>(blockIdx.x) * cols;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) out[base + c] = in[base + c];
}

// softmaxRowNaive: out = expf(x) / sum expf(x). Touches 3 (sum pass, write pass reads again, write).
// KEPT BAD: no max shift, so a logit above 88.72 makes expf overflow and the row becomes inf/inf.
extern "C" __global__ void softmaxRowNaive(const float* __restrict__ in, float* __restrict__ out,
                                           size_t cols) {
    __shared__ float smem[kWarps];
    const float* row = in + static_cast<size_t>(blockIdx.x) * cols;
    float* outRow = out + static_cast<size_t>(blockIdx.x) * cols;
    float partial = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) partial += expf(row[c]);
    const float total = blockReduceSum<true>(partial, smem);
    for (size_t c = threadIdx.x; c < cols; c += kThreads) outRow[c] = expf(row[c]) / total;
}

// The safe softmax body: m = max x, out = expf(x - m) / sum expf(x - m). kReuseBarrier = false
// drops the barrier between the max reduction's last read of the shared slots and the sum
// reduction's first write (softmaxRowNoBarrier).
template <bool kReuseBarrier>
__device__ __forceinline__ void softmaxRowShifted(const float* __restrict__ in,
                                                  float* __restrict__ out, size_t cols) {
    __shared__ float smem[kWarps];
    const float* row = in + static_cast<size_t>(blockIdx.x) * cols;
    float* outRow = out + static_cast<size_t>(blockIdx.x) * cols;
    float best = negativeInfinity();
    for (size_t c = threadIdx.x; c < cols; c += kThreads) best = fmaxf(best, row[c]);
    const float rowMax = blockReduceMax<kReuseBarrier>(best, smem);
    float partial = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) partial += expf(row[c] - rowMax);
    const float total = blockReduceSum<true>(partial, smem);
    for (size_t c = threadIdx.x; c < cols; c += kThreads) outRow[c] = expf(row[c] - rowMax) / total;
}

// softmaxRowSafe: touches 4 (max, sum, write pass read, write). Every exponent is <= 0: no overflow
// for any finite row; the tail may underflow (CUDA's expf flushes subnormal results to zero).
extern "C" __global__ void softmaxRowSafe(const float* __restrict__ in, float* __restrict__ out,
                                          size_t cols) {
    softmaxRowShifted<true>(in, out, cols);
}

// softmaxRowNoBarrier: softmaxRowSafe without the barrier between the two reductions. Touches 4.
// KEPT BAD (the textbook pitfall): a race. A warp that finishes its sum partial early overwrites its
// slot while slower warps are still reading maxima from it, and the row is shifted by a "max" that
// never existed. compute-sanitizer --tool racecheck names it; a hunt may never see it (the loads of
// the eight slots issue back to back, so the window is short even in 2048-row launches).
extern "C" __global__ void softmaxRowNoBarrier(const float* __restrict__ in, float* __restrict__ out,
                                               size_t cols) {
    softmaxRowShifted<false>(in, out, cols);
}

// layerNormRowTwoPass: mean = sum x / C; var = sum (x - mean)^2 / C; out = (x - mean) *
// rsqrtf(var + eps) * gamma + beta. Touches 4 (mean, variance, write pass read, write).
// Accurate to ~kappa*u; not range-safe: (x - mean)^2 overflows past sqrt(FLT_MAX / C).
extern "C" __global__ void layerNormRowTwoPass(const float* __restrict__ in, float* __restrict__ out,
                                               const float* __restrict__ gamma,
                                               const float* __restrict__ beta, size_t cols,
                                               float eps) {
    __shared__ float smem[kWarps];
    const float* row = in + static_cast<size_t>(blockIdx.x) * cols;
    float* outRow = out + static_cast<size_t>(blockIdx.x) * cols;
    const float n = static_cast<float>(cols);
    float partial = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) partial += row[c];
    const float mean = blockReduceSum<true>(partial, smem) / n;
    partial = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) {
        const float d = row[c] - mean;
        partial = fmaf(d, d, partial);
    }
    const float var = blockReduceSum<true>(partial, smem) / n;
    const float rstd = rsqrtf(var + eps);
    for (size_t c = threadIdx.x; c < cols; c += kThreads) {
        outRow[c] = fmaf((row[c] - mean) * rstd, gamma[c], beta[c]);
    }
}

// layerNormRowWelford: per-thread Welford (count, mean, M2), merged across each warp by shuffles and
// across warps in shared memory; out as layerNormRowTwoPass. Touches 3 (one statistics pass, write
// pass read, write). A divide per element, no cancellation.
extern "C" __global__ void layerNormRowWelford(const float* __restrict__ in, float* __restrict__ out,
                                               const float* __restrict__ gamma,
                                               const float* __restrict__ beta, size_t cols,
                                               float eps) {
    __shared__ float sCount[kWarps];
    __shared__ float sMean[kWarps];
    __shared__ float sM2[kWarps];
    const float* row = in + static_cast<size_t>(blockIdx.x) * cols;
    float* outRow = out + static_cast<size_t>(blockIdx.x) * cols;
    float count = 0.0f;
    float mean = 0.0f;
    float m2 = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) {
        const float x = row[c];
        count += 1.0f;
        const float delta = x - mean;
        mean += delta / count;
        m2 = fmaf(delta, x - mean, m2);
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        welfordMerge(count, mean, m2, __shfl_down_sync(kFullMask, count, offset),
                     __shfl_down_sync(kFullMask, mean, offset),
                     __shfl_down_sync(kFullMask, m2, offset));
    }
    if (threadIdx.x % kWarpSize == 0) {
        sCount[threadIdx.x / kWarpSize] = count;
        sMean[threadIdx.x / kWarpSize] = mean;
        sM2[threadIdx.x / kWarpSize] = m2;
    }
    __syncthreads();
    float n = sCount[0];
    float rowMean = sMean[0];
    float rowM2 = sM2[0];
    for (int w = 1; w < kWarps; ++w) welfordMerge(n, rowMean, rowM2, sCount[w], sMean[w], sM2[w]);
    const float rstd = rsqrtf(rowM2 / n + eps);
    for (size_t c = threadIdx.x; c < cols; c += kThreads) {
        outRow[c] = fmaf((row[c] - rowMean) * rstd, gamma[c], beta[c]);
    }
}

// layerNormRowOnePass: var = E[x^2] - E[x]^2 from one pass of sums. Touches 3.
// KEPT BAD: when |mean| >> std the two terms nearly cancel; the error grows like kappa^2 * u and
// the variance can come out negative (rsqrtf -> NaN).
extern "C" __global__ void layerNormRowOnePass(const float* __restrict__ in, float* __restrict__ out,
                                               const float* __restrict__ gamma,
                                               const float* __restrict__ beta, size_t cols,
                                               float eps) {
    __shared__ float smem[kWarps];
    const float* row = in + static_cast<size_t>(blockIdx.x) * cols;
    float* outRow = out + static_cast<size_t>(blockIdx.x) * cols;
    const float n = static_cast<float>(cols);
    float sum = 0.0f;
    float sumSq = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) {
        const float x = row[c];
        sum += x;
        sumSq = fmaf(x, x, sumSq);
    }
    const float mean = blockReduceSum<true>(sum, smem) / n;
    const float meanSq = blockReduceSum<true>(sumSq, smem) / n;
    const float var = fmaf(-mean, mean, meanSq);
    const float rstd = rsqrtf(var + eps);
    for (size_t c = threadIdx.x; c < cols; c += kThreads) {
        outRow[c] = fmaf((row[c] - mean) * rstd, gamma[c], beta[c]);
    }
}

// rmsNormRow: out = x * rsqrtf(sum x^2 / C + eps) * gamma. Touches 3 (sum of squares, write pass
// read, write): no mean, no beta. Not range-safe: x*x overflows past sqrt(FLT_MAX / C).
extern "C" __global__ void rmsNormRow(const float* __restrict__ in, float* __restrict__ out,
                                      const float* __restrict__ gamma, size_t cols, float eps) {
    __shared__ float smem[kWarps];
    const float* row = in + static_cast<size_t>(blockIdx.x) * cols;
    float* outRow = out + static_cast<size_t>(blockIdx.x) * cols;
    float partial = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += kThreads) partial = fmaf(row[c], row[c], partial);
    const float meanSq = blockReduceSum<true>(partial, smem) / static_cast<float>(cols);
    const float rstd = rsqrtf(meanSq + eps);
    for (size_t c = threadIdx.x; c < cols; c += kThreads) outRow[c] = row[c] * rstd * gamma[c];
}
