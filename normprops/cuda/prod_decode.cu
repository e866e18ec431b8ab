// normprops decode entry points: prod.cu's norms for batches too small to fill the GPU (decode: one
// to a few hundred rows). normprops/cuda/build.py compiles this file after prod.cu's device code
// (with NP_NO_ENTRY_POINTS, so prod.cu's own kernels are not compiled again), and
// normprops/cuda/prod.py launches these kernels where Shape.decode says so.
//
// Each is its prefill kernel's template with kEarly = true: gamma (and beta) are read into
// registers right after the row, so that their round trip to memory overlaps the row's instead of
// following the reductions; at one row per block that second trip is most of what a kernel waits
// for. The row -> thread map, the sums and every expression are the prefill kernel's, so the bits
// are too (tests/test_prod.py checks them bit for bit). The extra registers (up to 32 words for
// gamma, 64 with beta) are why this is a second kernel: the prefill kernels keep 64 registers a
// thread for two 512-thread blocks per SM; these take up to 128 (one block of at most 512 threads
// per SM, the most a decode batch places there), and are compiled for the default register layouts
// (normprops.cuda.layout.prod_layout) only.
#ifndef NP_BOUNDS
#error "prod_decode.cu is compiled after prod.cu, as one unit (normprops.cuda.build.unit_text)"
#endif

#define NP_DECODE_BOUNDS __launch_bounds__(512, 1)

#define NP_LAYERNORM_DECODE(NAME, STORAGE, VECS, PACKED)                                            \
    extern "C" __global__ void NP_DECODE_BOUNDS                                                     \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, const STORAGE::T* __restrict__ beta, size_t rows, \
             size_t cols, float eps) {                                                              \
        layerNormRegs<STORAGE, VECS, PACKED, true>(in, out, gamma, beta, rows, cols, eps);          \
    }
#define NP_RMSNORM_DECODE(NAME, STORAGE, VECS, PACKED)                                              \
    extern "C" __global__ void NP_DECODE_BOUNDS                                                     \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, size_t rows, size_t cols, float eps) {           \
        rmsNormRegs<STORAGE, VECS, PACKED, true>(in, out, gamma, rows, cols, eps);                  \
    }
#define NP_ADDRMSNORM_DECODE(NAME, STORAGE, VECS, PACKED)                                           \
    extern "C" __global__ void NP_DECODE_BOUNDS                                                     \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* residual, STORAGE::T* __restrict__ out, \
             const STORAGE::T* __restrict__ gamma, size_t rows, size_t cols, float eps) {           \
        addRmsNormRegs<STORAGE, VECS, PACKED, true>(in, residual, out, gamma, rows, cols, eps);     \
    }

NP_LAYERNORM_DECODE(layernorm_f32_v1_d, F32, 1, false)
NP_LAYERNORM_DECODE(layernorm_f32_v2_d, F32, 2, false)
NP_LAYERNORM_DECODE(layernorm_f32_v4_d, F32, 4, false)
NP_LAYERNORM_DECODE(layernorm_f32_v8_d, F32, 8, false)
NP_LAYERNORM_DECODE(layernorm_bf16_v1_d, BF16, 1, false)
NP_LAYERNORM_DECODE(layernorm_bf16_v2_d, BF16, 2, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p4_d, BF16, 4, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_d, BF16, 8, true)
NP_LAYERNORM_DECODE(layernorm_f16_v1_d, F16, 1, false)
NP_LAYERNORM_DECODE(layernorm_f16_v2_d, F16, 2, false)
NP_LAYERNORM_DECODE(layernorm_f16_p4_d, F16, 4, true)
NP_LAYERNORM_DECODE(layernorm_f16_p8_d, F16, 8, true)

NP_RMSNORM_DECODE(rmsnorm_f32_v1_d, F32, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v2_d, F32, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v4_d, F32, 4, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_d, F32, 8, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_v1_d, BF16, 1, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_v2_d, BF16, 2, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p4_d, BF16, 4, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_d, BF16, 8, true)
NP_RMSNORM_DECODE(rmsnorm_f16_v1_d, F16, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f16_v2_d, F16, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p4_d, F16, 4, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_d, F16, 8, true)

// (the fused kernel holds at most 32 elements a thread: no 8-vector packed layout)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v1_d, F32, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v2_d, F32, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v4_d, F32, 4, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_d, F32, 8, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v1_d, BF16, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v2_d, BF16, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_p4_d, BF16, 4, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v1_d, F16, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v2_d, F16, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_p4_d, F16, 4, true)
