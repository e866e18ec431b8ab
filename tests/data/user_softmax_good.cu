// A user's correct softmax: one block per row, blockDim.x threads, shared-memory tree reductions.
extern "C" __global__ void softmax_good(const float* in, float* out, size_t cols) {
    __shared__ float red[1024];
    const float* row = in + (size_t)blockIdx.x * cols;
    float* o = out + (size_t)blockIdx.x * cols;
    float m = __int_as_float(0xff800000);
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(row[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = expf(row[c] - m) / sum;
}

// The same, buggy: vectorized by four with the ragged tail dropped from the sum.
extern "C" __global__ void softmax_dropped_tail(const float* in, float* out, size_t cols) {
    __shared__ float red[1024];
    const float* row = in + (size_t)blockIdx.x * cols;
    float* o = out + (size_t)blockIdx.x * cols;
    float m = __int_as_float(0xff800000);
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    const size_t vec = cols / 4 * 4;
    for (size_t c = threadIdx.x; c < vec; c += blockDim.x) sum += expf(row[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = expf(row[c] - m) / sum;
}

// Faults: writes far past the end of the output.
extern "C" __global__ void softmax_faults(const float* in, float* out, size_t cols) {
    out[(size_t)blockIdx.x * cols + threadIdx.x + (size_t)1 << 40] = in[0];
}
