// normprops decode entry points: prod.cu's norms for batches too small to fill the GPU (decode: one
// to a few hundred rows). normprops/cuda/build.py compiles this file after prod.cu's device code
// (with NP_NO_ENTRY_POINTS, so prod.cu's own kernels are not compiled again), and
// normprops/cuda/prod.py launches these kernels where Shape.decode says so.
//
// Each is its prefill kernel's template with kEarly = true: gamma (and beta) are read into
// registers right after the row, so that their round trip to memory overlaps the row's instead of
// following the reductions; at one row per block that second trip is most of what a kernel waits
// for. <name>_d keeps the prefill kernel's threads: its extra registers (up to 32 words for gamma,
// 64 with beta) are why it is a second kernel (the prefill kernels keep 64 registers a thread for
// two 512-thread blocks per SM; these take up to 128, one block of at most 512 threads per SM).
// <name>_s<S>_d spreads each prefill thread's vectors over S threads (prod.cu's Split: block (tpr,
// S), the launcher's choice where S tpr <= 512): S times the warps on a lone row. The row -> thread
// map of the sums, their order and every expression are the prefill kernel's, so the bits are too
// (tests/test_prod.py checks them bit for bit). Compiled for the default register layouts
// (normprops.cuda.layout.prod_layout) only.
#ifndef NP_BOUNDS
#error "prod_decode.cu is compiled after prod.cu, as one unit (normprops.cuda.build.unit_text)"
#endif

#define NP_DECODE_BOUNDS(S) __launch_bounds__(512, (S) <= 2 ? 1 : 2)

// A/B candidate, off unless -DNP_DECODE_HELD (tools/sweep_prod.py --spread --variants
// base,NP_DECODE_HELD): the 16-bit kernels hold their elements as floats, widened once at the load,
// where the packed layout widens each again at every pass over the registers (up to four): a lone
// row's time is its one SM issuing those instructions. Regs gives the same arithmetic either way,
// so the same bits (tests/test_prod.py checks decode against prefill bit for bit; layer norm keeps
// its packed prefill kernel's exact division, kExactDiv). Only where the floats fit the registers
// (ptxas, sm_90: no spill but 4 bytes in float16's dense layer norm at 4 vectors): at most 4 vectors
// a thread in a dense kernel of up to 2 groups (128 registers), 2 in a general one, 1 where 4 or 8
// groups leave 64.
template <bool kPacked, int kVecs, int kS, bool kDense>
struct DecodePacked {
#ifdef NP_DECODE_HELD
    static constexpr bool value = kPacked && !(kS <= 2 ? kVecs <= (kDense ? 4 : 2) : kVecs <= 1);
#else
    static constexpr bool value = kPacked;
#endif
};
#define NP_DECODE_PACKED(PACKED, VECS, S, DENSE) (DecodePacked<PACKED, (VECS) / (S), S, DENSE>::value)

// VECS: the prefill thread's vectors, VECS / S of them in each of its S threads here. Each kernel
// comes twice: <name>_d for any row, and <name>_da (DENSE) for the launches whose pointers are 16-byte
// aligned and whose rows fill every thread's vectors exactly (cols = tpr x VECS x W: the model
// widths). A dense kernel holds only that copy of each loop (prod.cu's Regs, kOnly = kAll): a
// fifth to a ninth of the general kernel's code, with the same arithmetic and bits.
#define NP_LAYERNORM_DECODE(NAME, STORAGE, VECS, PACKED, S, DENSE)                                 \
    extern "C" __global__ void NP_DECODE_BOUNDS(S)                                                  \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, const STORAGE::T* __restrict__ beta, size_t rows, \
             size_t cols, float eps) {                                                              \
        layerNormRegs<STORAGE, (VECS) / (S), NP_DECODE_PACKED(PACKED, VECS, S, DENSE), true, S, DENSE, kAny, \
                      PACKED>(in, out, gamma, beta, rows, cols, eps);                                \
    }
#define NP_RMSNORM_DECODE(NAME, STORAGE, VECS, PACKED, S, DENSE)                                   \
    extern "C" __global__ void NP_DECODE_BOUNDS(S)                                                  \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, size_t rows, size_t cols, float eps) {           \
        rmsNormRegs<STORAGE, (VECS) / (S), NP_DECODE_PACKED(PACKED, VECS, S, DENSE), true, S, DENSE>(in, out, gamma, rows, cols, eps); \
    }
#define NP_ADDRMSNORM_DECODE(NAME, STORAGE, VECS, PACKED, S, DENSE)                                \
    extern "C" __global__ void NP_DECODE_BOUNDS(S)                                                  \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* residual, STORAGE::T* __restrict__ out, \
             const STORAGE::T* __restrict__ gamma, size_t rows, size_t cols, float eps) {           \
        addRmsNormRegs<STORAGE, (VECS) / (S), NP_DECODE_PACKED(PACKED, VECS, S, DENSE), true, S, DENSE>(in, residual, out, gamma, \
                                                                                rows, cols, eps);        \
    }
NP_LAYERNORM_DECODE(layernorm_f32_v1_d, F32, 1, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_f32_v1_da, F32, 1, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_f32_v2_d, F32, 2, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_f32_v2_da, F32, 2, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_f32_v2_s2_d, F32, 2, false, 2, false)
NP_LAYERNORM_DECODE(layernorm_f32_v2_s2_da, F32, 2, false, 2, true)
NP_LAYERNORM_DECODE(layernorm_f32_v4_d, F32, 4, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_f32_v4_da, F32, 4, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_f32_v4_s2_d, F32, 4, false, 2, false)
NP_LAYERNORM_DECODE(layernorm_f32_v4_s2_da, F32, 4, false, 2, true)
NP_LAYERNORM_DECODE(layernorm_f32_v4_s4_d, F32, 4, false, 4, false)
NP_LAYERNORM_DECODE(layernorm_f32_v4_s4_da, F32, 4, false, 4, true)
NP_LAYERNORM_DECODE(layernorm_f32_v8_d, F32, 8, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_f32_v8_da, F32, 8, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_f32_v8_s2_d, F32, 8, false, 2, false)
NP_LAYERNORM_DECODE(layernorm_f32_v8_s2_da, F32, 8, false, 2, true)
NP_LAYERNORM_DECODE(layernorm_f32_v8_s4_d, F32, 8, false, 4, false)
NP_LAYERNORM_DECODE(layernorm_f32_v8_s4_da, F32, 8, false, 4, true)
NP_LAYERNORM_DECODE(layernorm_f32_v8_s8_d, F32, 8, false, 8, false)
NP_LAYERNORM_DECODE(layernorm_f32_v8_s8_da, F32, 8, false, 8, true)
NP_LAYERNORM_DECODE(layernorm_bf16_v1_d, BF16, 1, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_bf16_v1_da, BF16, 1, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_bf16_v2_d, BF16, 2, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_bf16_v2_da, BF16, 2, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_bf16_v2_s2_d, BF16, 2, false, 2, false)
NP_LAYERNORM_DECODE(layernorm_bf16_v2_s2_da, BF16, 2, false, 2, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p4_d, BF16, 4, true, 1, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p4_da, BF16, 4, true, 1, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p4_s2_d, BF16, 4, true, 2, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p4_s2_da, BF16, 4, true, 2, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p4_s4_d, BF16, 4, true, 4, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p4_s4_da, BF16, 4, true, 4, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_d, BF16, 8, true, 1, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_da, BF16, 8, true, 1, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_s2_d, BF16, 8, true, 2, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_s2_da, BF16, 8, true, 2, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_s4_d, BF16, 8, true, 4, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_s4_da, BF16, 8, true, 4, true)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_s8_d, BF16, 8, true, 8, false)
NP_LAYERNORM_DECODE(layernorm_bf16_p8_s8_da, BF16, 8, true, 8, true)
NP_LAYERNORM_DECODE(layernorm_f16_v1_d, F16, 1, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_f16_v1_da, F16, 1, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_f16_v2_d, F16, 2, false, 1, false)
NP_LAYERNORM_DECODE(layernorm_f16_v2_da, F16, 2, false, 1, true)
NP_LAYERNORM_DECODE(layernorm_f16_v2_s2_d, F16, 2, false, 2, false)
NP_LAYERNORM_DECODE(layernorm_f16_v2_s2_da, F16, 2, false, 2, true)
NP_LAYERNORM_DECODE(layernorm_f16_p4_d, F16, 4, true, 1, false)
NP_LAYERNORM_DECODE(layernorm_f16_p4_da, F16, 4, true, 1, true)
NP_LAYERNORM_DECODE(layernorm_f16_p4_s2_d, F16, 4, true, 2, false)
NP_LAYERNORM_DECODE(layernorm_f16_p4_s2_da, F16, 4, true, 2, true)
NP_LAYERNORM_DECODE(layernorm_f16_p4_s4_d, F16, 4, true, 4, false)
NP_LAYERNORM_DECODE(layernorm_f16_p4_s4_da, F16, 4, true, 4, true)
NP_LAYERNORM_DECODE(layernorm_f16_p8_d, F16, 8, true, 1, false)
NP_LAYERNORM_DECODE(layernorm_f16_p8_da, F16, 8, true, 1, true)
NP_LAYERNORM_DECODE(layernorm_f16_p8_s2_d, F16, 8, true, 2, false)
NP_LAYERNORM_DECODE(layernorm_f16_p8_s2_da, F16, 8, true, 2, true)
NP_LAYERNORM_DECODE(layernorm_f16_p8_s4_d, F16, 8, true, 4, false)
NP_LAYERNORM_DECODE(layernorm_f16_p8_s4_da, F16, 8, true, 4, true)
NP_LAYERNORM_DECODE(layernorm_f16_p8_s8_d, F16, 8, true, 8, false)
NP_LAYERNORM_DECODE(layernorm_f16_p8_s8_da, F16, 8, true, 8, true)

NP_RMSNORM_DECODE(rmsnorm_f32_v1_d, F32, 1, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v1_da, F32, 1, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v2_d, F32, 2, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v2_da, F32, 2, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v2_s2_d, F32, 2, false, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v2_s2_da, F32, 2, false, 2, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v4_d, F32, 4, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v4_da, F32, 4, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v4_s2_d, F32, 4, false, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v4_s2_da, F32, 4, false, 2, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v4_s4_d, F32, 4, false, 4, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v4_s4_da, F32, 4, false, 4, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_d, F32, 8, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_da, F32, 8, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_s2_d, F32, 8, false, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_s2_da, F32, 8, false, 2, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_s4_d, F32, 8, false, 4, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_s4_da, F32, 8, false, 4, true)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_s8_d, F32, 8, false, 8, false)
NP_RMSNORM_DECODE(rmsnorm_f32_v8_s8_da, F32, 8, false, 8, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_v1_d, BF16, 1, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_v1_da, BF16, 1, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_v2_d, BF16, 2, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_v2_da, BF16, 2, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_v2_s2_d, BF16, 2, false, 2, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_v2_s2_da, BF16, 2, false, 2, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p4_d, BF16, 4, true, 1, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p4_da, BF16, 4, true, 1, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p4_s2_d, BF16, 4, true, 2, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p4_s2_da, BF16, 4, true, 2, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p4_s4_d, BF16, 4, true, 4, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p4_s4_da, BF16, 4, true, 4, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_d, BF16, 8, true, 1, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_da, BF16, 8, true, 1, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_s2_d, BF16, 8, true, 2, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_s2_da, BF16, 8, true, 2, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_s4_d, BF16, 8, true, 4, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_s4_da, BF16, 8, true, 4, true)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_s8_d, BF16, 8, true, 8, false)
NP_RMSNORM_DECODE(rmsnorm_bf16_p8_s8_da, BF16, 8, true, 8, true)
NP_RMSNORM_DECODE(rmsnorm_f16_v1_d, F16, 1, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f16_v1_da, F16, 1, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f16_v2_d, F16, 2, false, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f16_v2_da, F16, 2, false, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f16_v2_s2_d, F16, 2, false, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f16_v2_s2_da, F16, 2, false, 2, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p4_d, F16, 4, true, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p4_da, F16, 4, true, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p4_s2_d, F16, 4, true, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p4_s2_da, F16, 4, true, 2, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p4_s4_d, F16, 4, true, 4, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p4_s4_da, F16, 4, true, 4, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_d, F16, 8, true, 1, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_da, F16, 8, true, 1, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_s2_d, F16, 8, true, 2, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_s2_da, F16, 8, true, 2, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_s4_d, F16, 8, true, 4, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_s4_da, F16, 8, true, 4, true)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_s8_d, F16, 8, true, 8, false)
NP_RMSNORM_DECODE(rmsnorm_f16_p8_s8_da, F16, 8, true, 8, true)

// (the fused kernel holds at most 32 elements a thread: no 8-vector packed layout)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v1_d, F32, 1, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v1_da, F32, 1, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v2_d, F32, 2, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v2_da, F32, 2, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v2_s2_d, F32, 2, false, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v2_s2_da, F32, 2, false, 2, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v4_d, F32, 4, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v4_da, F32, 4, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v4_s2_d, F32, 4, false, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v4_s2_da, F32, 4, false, 2, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v4_s4_d, F32, 4, false, 4, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v4_s4_da, F32, 4, false, 4, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_d, F32, 8, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_da, F32, 8, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_s2_d, F32, 8, false, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_s2_da, F32, 8, false, 2, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_s4_d, F32, 8, false, 4, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_s4_da, F32, 8, false, 4, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_s8_d, F32, 8, false, 8, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f32_v8_s8_da, F32, 8, false, 8, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v1_d, BF16, 1, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v1_da, BF16, 1, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v2_d, BF16, 2, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v2_da, BF16, 2, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v2_s2_d, BF16, 2, false, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_v2_s2_da, BF16, 2, false, 2, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_p4_d, BF16, 4, true, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_p4_da, BF16, 4, true, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_p4_s2_d, BF16, 4, true, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_p4_s2_da, BF16, 4, true, 2, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_p4_s4_d, BF16, 4, true, 4, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_bf16_p4_s4_da, BF16, 4, true, 4, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v1_d, F16, 1, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v1_da, F16, 1, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v2_d, F16, 2, false, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v2_da, F16, 2, false, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v2_s2_d, F16, 2, false, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_v2_s2_da, F16, 2, false, 2, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_p4_d, F16, 4, true, 1, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_p4_da, F16, 4, true, 1, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_p4_s2_d, F16, 4, true, 2, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_p4_s2_da, F16, 4, true, 2, true)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_p4_s4_d, F16, 4, true, 4, false)
NP_ADDRMSNORM_DECODE(addrmsnorm_f16_p4_s4_da, F16, 4, true, 4, true)
