// Kernels nobody here wrote the hunt for: one block per row, blockDim.x threads (a power of two).

// A shared-memory tree reduction of one float per thread (sum or max).
__device__ float block_reduce(float v, float* red, bool take_max) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) {
            const float other = red[threadIdx.x + s];
            red[threadIdx.x] = take_max ? fmaxf(red[threadIdx.x], other) : red[threadIdx.x] + other;
        }
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads();
    return total;
}

// A correct softmax, except that on rows of odd width thread 0 also writes out[cols]: one past its
// row, into the next row's first element (or past the buffer, for the last row). Which write lands
// last depends on block scheduling: a race between blocks.
extern "C" __global__ void softmax_writes_past_row(const float* in, float* out, size_t cols) {
    __shared__ float red[1024];
    const float* row = in + (size_t)blockIdx.x * cols;
    float* o = out + (size_t)blockIdx.x * cols;
    float m = __int_as_float(0xff800000);
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_reduce(m, red, true);
    float sum = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(row[c] - m);
    sum = block_reduce(sum, red, false);
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = expf(row[c] - m) / sum;
    if (threadIdx.x == 0 && cols % 2 == 1) o[cols] = 0.5f;
}

// A correct, range-safe RMS norm: the row is divided by its largest magnitude m before squaring
// (no square overflows), and eps is carried into that scale as eps / m^2. Its scaled values can be
// subnormal; IEEE arithmetic keeps them, flush-to-zero would not.
extern "C" __global__ void rmsnorm_max_scaled(const float* in, float* out, const float* gamma,
                                              size_t cols, float eps) {
    __shared__ float red[1024];
    const float* row = in + (size_t)blockIdx.x * cols;
    float* o = out + (size_t)blockIdx.x * cols;
    float m = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, fabsf(row[c]));
    m = block_reduce(m, red, true);
    if (m == 0.0f) {  // a zero row: x / sqrt(eps) is zero
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = 0.0f * gamma[c];
        return;
    }
    float ss = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float s = row[c] / m;
        ss = fmaf(s, s, ss);
    }
    ss = block_reduce(ss, red, false);
    // mean((x/m)^2) + eps/m^2 = (mean(x^2) + eps) / m^2; eps/m^2 in double: it can exceed float's range
    const float scaled_eps = (float)((double)eps / ((double)m * (double)m));
    const float r = rsqrtf(ss / (float)cols + scaled_eps);
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = (row[c] / m) * r * gamma[c];
}
