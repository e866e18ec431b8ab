// normprops kept-bad production-style kernel: an RMS norm on prod.cu's register path whose sum of
// squares is kept in bfloat16, a bug the hunt must catch. It is no production kernel and is built
// apart from them: normprops/cuda/build.py compiles this file after prod.cu's device code (with
// NP_NO_ENTRY_POINTS, so prod.cu's own kernels are not compiled again), whose templates it uses.
#ifndef NP_BOUNDS
#error "prod_kept_bad.cu is compiled after prod.cu, as one unit (normprops.cuda.build.unit_text)"
#endif

// rmsNormBf16Acc: rmsNormRegs<BF16, kVecs> except that each thread's sum of squares is one running
// sum over its elements, rounded to bfloat16 after every addition (a "bf16 accumulator"). KEPT BAD: with 8 significant bits, once
// the partial sum is 2^8 times a square, adding it changes nothing; ordinary rows of a few hundred
// columns are already off by percents.
template <int kVecs>
__device__ void rmsNormBf16AccRegs(const unsigned short* __restrict__ in, unsigned short* __restrict__ out,
                                   const unsigned short* __restrict__ gamma, size_t rows, size_t cols,
                                   float eps) {
    using Storage = BF16;
    __shared__ Scratch scratch;
    const RowIndex ri(rows);
    const bool vec = cols % Storage::W == 0 && aligned16(in) && aligned16(out) && aligned16(gamma);
    Regs<Storage, kVecs> r;
    if (ri.live) r.load(in + ri.row * cols, cols, vec, 0.0f);
    else r.zero();
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < r.N; ++i) amax = fmaxf(amax, fabsf(r.at(i)));
    ScaledSum<2>::T st{scaleExponent(amax), 0.0f};
    const float sct = pow2(-st.e);
#pragma unroll
    for (int i = 0; i < r.N; ++i) {
        const float y = r.at(i) * sct;
        st.s = Storage::round(fmaf(y, y, st.s));
    }
    st = rowReduce<ScaledSum<2>>(st, scratch);
    const NormFactor nf = normFactor(st.s / static_cast<float>(cols), st.e, eps);
    if (!ri.live) return;
    rmsEpilogue<Regs<Storage, kVecs>, Storage>(r, out + ri.row * cols,
                                              Param<Storage, Regs<Storage, kVecs>, false>(gamma), cols, nf, vec);
}

// The kept-bad RMS norm (register path only).
#define NP_BF16ACC(NAME, VECS)                                                                      \
    extern "C" __global__ void NP_BOUNDS(VECS)                                                      \
        NAME(const unsigned short* __restrict__ in, unsigned short* __restrict__ out,               \
             const unsigned short* __restrict__ gamma, size_t rows, size_t cols, float eps) {       \
        rmsNormBf16AccRegs<VECS>(in, out, gamma, rows, cols, eps);                                  \
    }
NP_BF16ACC(rmsnormbf16acc_bf16_v1, 1)
NP_BF16ACC(rmsnormbf16acc_bf16_v2, 2)
NP_BF16ACC(rmsnormbf16acc_bf16_v4, 4)
NP_BF16ACC(rmsnormbf16acc_bf16_v8, 8)
