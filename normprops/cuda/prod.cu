// normprops production kernels: softmax, layer norm, RMS norm and fused add + RMS norm, meant to run
// at the memory-bandwidth floor and to be right for any finite row. Storage is float32, bfloat16 or
// float16; all arithmetic is float32. The textbook kernels are in kernels.cu, the kept-bad RMS norm
// built on these templates in prod_kept_bad.cu.
//
// Launch shape (normprops/cuda/shape.py picks it from cols and the storage type alone):
//   block = (tpr, rpb): tpr threads per row (a multiple of 32: up to 512 on the register path, 1024
//   on the streaming path), rpb = max(1, 256 / tpr) rows per block, or 1 for a batch too small to
//   fill the GPU (Shape.for_batch: only how rows share blocks changes); grid.x = ceil(rows / rpb).
//   Row r = blockIdx.x * rpb + threadIdx.y; the threads of a row are whole warps, so warp shuffles
//   never mix rows. The decode kernels of prod_decode.cu that spread a thread's vectors (Split) run
//   block (tpr, S) on row blockIdx.x, threadIdx.y their group.
//
// Register path (template kVecs = 1, 2, 4 or 8; cols <= tpr * kVecs * W): the row is read once into
// registers and written once. W = 16 / sizeof(storage) elements make one 16-byte vector; thread t
// holds vectors j * tpr + t for j < kVecs, i.e. elements (j * tpr + t) * W + w. When every pointer is
// 16-byte aligned and cols % W == 0 the vectors are loaded and stored with 16-byte accesses; packed
// 16-bit rows off that grid (odd widths, views) move each vector with the widest accesses its own
// alignment allows (Regs::loadShifted); other rows there go element by element. The
// same element -> thread map and the same arithmetic order every way (see Copy), so a row's bits
// depend on neither its address nor its position in the batch.
//
// Template parameters: Storage is the element type (F32, BF16, F16: its C type T, vector width W and
// conversions); kVecs the 16-byte vectors per thread; kPacked whether 16-bit values stay packed in
// registers; Share a Regs, one thread's share of a row; kPow 1 for sums of x, 2 for sums of x^2;
// kPass which pass over a packed row widens an element (see WidenBf16).
//
// Streaming path (kVecs = 0, rows too wide for registers; tpr = 1024, rpb = 1): thread t walks
// elements t, t + tpr, ...; pass 1 keeps online statistics, pass 2 reads the row again and writes.
//
// Range safety: the norms keep sum(x) and sum(x^2) from overflowing or underflowing by scaling the
// row by 2^-e, e the exponent of its largest |x| (clamped to [-126, 126] so 2^-e is a normal float),
// wherever the row needs it; no extra pass over memory is needed. On the register path the sums are
// first formed unscaled, and only rows whose sum of squares falls outside the range where that is
// exact enough take a second, scaled pass over the registers (see rangeVerdict). The streaming path
// keeps per-thread exponents and merges them exactly by powers of two (ScaledSum).
// Softmax subtracts the row maximum (register path) or keeps a running maximum (streaming path).
//
// Reductions: on the register path each thread adds each of its vectors' W elements in order and
// then its vectors' partials in order (the streaming and cluster paths fold element by element); a
// warp folds its 32 partials with a __shfl_xor_sync butterfly (every merge below is commutative bit
// for bit, so all lanes agree); the warp totals of a row go through shared memory and a
// ceil(log2(warps))-step butterfly. Error depth: at most the elements a thread holds - 1 +
// ceil(log2(tpr)) additions (W - 1 + vectors - 1 + ceil(log2(tpr)) on the register path).
//
// Size_t offsets: rows x cols beyond 2^31 elements work; grid.x allows 2^31 - 1 blocks.
// NVRTC has no <math.h> macros and no cuda_fp16.h here: infinities are spelled as bit patterns, and
// the 16-bit types are converted by hand (bfloat16) or with PTX cvt (float16).

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float negInf() { return __int_as_float(0xff800000); }

// --- storage types -----------------------------------------------------------------------------

struct F32 {
    using T = float;
    using V = float4;  // one 16-byte vector as loaded
    static constexpr int W = 4;
    static constexpr bool kFastExp = false;
    __device__ static float get(const T* p) { return *p; }
    __device__ static void put(T* p, float v) { *p = v; }
    __device__ static float round(float v) { return v; }
    __device__ static V loadV(const T* p) { return *reinterpret_cast<const float4*>(p); }
    __device__ static V ldgV(const T* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
    __device__ static void unpackV(const V& q, float* v) { v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w; }
    __device__ static void putVec(T* p, const float* v) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
};

// bfloat16: the top 16 bits of a float32. Widening is exact; narrowing rounds to nearest even.
__device__ __forceinline__ float bf16ToFloat(unsigned short h) {
    return __uint_as_float(static_cast<unsigned>(h) << 16);
}
__device__ __forceinline__ unsigned short floatToBf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<unsigned short>(u >> 16);
}
__device__ __forceinline__ float f16ToFloat(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short floatToF16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Two floats -> two 16-bit values in one word (a in the low half), rounded to nearest even: one
// cvt.rn.{bf16,f16}x2.f32 on sm_80 and later, the scalar conversions elsewhere.
__device__ __forceinline__ unsigned packBf16(float a, float b) {
#if __CUDA_ARCH__ >= 800
    unsigned w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));
    return w;
#else
    return floatToBf16(a) | (static_cast<unsigned>(floatToBf16(b)) << 16);
#endif
}
__device__ __forceinline__ unsigned packF16(float a, float b) {
#if __CUDA_ARCH__ >= 800
    unsigned w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));
    return w;
#else
    return floatToF16(a) | (static_cast<unsigned>(floatToF16(b)) << 16);
#endif
}
// bfloat16 pairs widen with one instruction each: the low element shifted up, the high one masked.
__device__ __forceinline__ void unpackBf16(unsigned w, float& a, float& b) {
    a = __uint_as_float(w << 16);
    b = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpackF16(unsigned w, float& a, float& b) {
    a = f16ToFloat(static_cast<unsigned short>(w & 0xffffu));
    b = f16ToFloat(static_cast<unsigned short>(w >> 16));
}

// Widening one element of a packed word, for Regs<..., true>. Each pass over a row calls them with
// its own kPass, which changes only the encoding: ptxas merges identical instructions across passes and
// would then keep every widened value live from one pass to the next (two registers for each packed
// one: the packing undone, and spills). bfloat16: a PRMT whose zero bytes come from the zero operand,
// byte 4 + kPass of it (selectors 4-7) or, from pass 4 on, the sign of byte kPass (selectors 12-15):
// eight encodings of the same instruction. float16: a cvt, whose kPass-copies ptxas does not merge in
// practice.
struct WidenBf16 {
    template <int kPass>
    static constexpr int kZero = (kPass < 4 ? 4 + kPass : 8 + kPass) * 0x11;
    template <int kPass>
    __device__ static float lo(unsigned w) {
        static_assert(kPass >= 0 && kPass < 8, "eight passes");
        unsigned r;
        asm volatile("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(w), "n"(0x1000 | kZero<kPass>));
        return __uint_as_float(r);
    }
    template <int kPass>
    __device__ static float hi(unsigned w) {
        static_assert(kPass >= 0 && kPass < 8, "eight passes");
        unsigned r;
        asm volatile("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(w), "n"(0x3200 | kZero<kPass>));
        return __uint_as_float(r);
    }
};
struct WidenF16 {
    template <int kPass>
    __device__ static float lo(unsigned w) {
        float f;
        asm volatile("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, l; }" : "=f"(f) : "r"(w));
        return f;
    }
    template <int kPass>
    __device__ static float hi(unsigned w) {
        float f;
        asm volatile("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "r"(w));
        return f;
    }
};

template <float (*ToFloat)(unsigned short), unsigned short (*FromFloat)(float),
          unsigned (*Pack)(float, float), void (*Unpack)(unsigned, float&, float&), class Widen>
struct Half16 {
    using T = unsigned short;
    using V = uint4;
    static constexpr int W = 8;
    // softmax's exp: ex2.approx (see expOf), whose error is far below a 16-bit output rounding.
    static constexpr bool kFastExp = true;
    __device__ static float get(const T* p) { return ToFloat(*p); }
    __device__ static void put(T* p, float v) { *p = FromFloat(v); }
    __device__ static float round(float v) { return ToFloat(FromFloat(v)); }
    __device__ static V loadV(const T* p) { return *reinterpret_cast<const uint4*>(p); }
    __device__ static V ldgV(const T* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
    __device__ static void unpackV(const V& q, float* v) {
        const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) Unpack(w[i], v[2 * i], v[2 * i + 1]);  // little endian: low = earlier
    }
    __device__ static void putVec(T* p, const float* v) {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = Pack(v[2 * i], v[2 * i + 1]);
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    // Packed register storage (Regs<..., true>): two elements per 32-bit word, the earlier low,
    // widened again at each use by pass kPass (WidenBf16 says why).
    template <int kPass>
    __device__ static float lo(unsigned w) { return Widen::template lo<kPass>(w); }
    template <int kPass>
    __device__ static float hi(unsigned w) { return Widen::template hi<kPass>(w); }
    __device__ static unsigned pack(float a, float b) { return Pack(a, b); }
    __device__ static unsigned short bits(float v) { return FromFloat(v); }
    // The shifted copy (Regs::loadShifted): W floats packed as one vector, an element's bits.
    __device__ static uint4 packRaw(const float* v) {
        return make_uint4(Pack(v[0], v[1]), Pack(v[2], v[3]), Pack(v[4], v[5]), Pack(v[6], v[7]));
    }
    __device__ static void putRaw(T* p, unsigned bits) { *p = static_cast<unsigned short>(bits); }
};
using BF16 = Half16<bf16ToFloat, floatToBf16, packBf16, unpackBf16, WidenBf16>;
using F16 = Half16<f16ToFloat, floatToF16, packF16, unpackF16, WidenF16>;

// --- rows off the 16-byte grid ---------------------------------------------------------------------

// The shifted copy is compiled for 16-bit storage only (Regs::kShifts): a 16-byte vector is four
// 32-bit words of two elements each, the earlier low.

// How many elements p lies past a 16-byte boundary (0 <= s < W).
template <class Storage>
__device__ __forceinline__ int shiftOf(const typename Storage::T* p) {
    return static_cast<int>((reinterpret_cast<size_t>(p) & 15u) / sizeof(typename Storage::T));
}

// --- exact power-of-two scaling ------------------------------------------------------------------

// The exponent e with 2^e <= |m| < 2^(e+1), clamped to [-126, 126] (zero and subnormals give -126,
// infinities and NaN 126): 2^-e and 2^e are then normal floats.
__device__ __forceinline__ int scaleExponent(float m) {
    const int e = ((__float_as_int(m) >> 23) & 0xff) - 127;
    return min(max(e, -126), 126);
}
__device__ __forceinline__ float pow2(int e) { return __int_as_float((e + 127) << 23); }  // |e| <= 126, pow2(-127) = 0

// s 2^d for d <= 0, what ldexpf gives but in three instructions (ldexpf's special cases cost dozens,
// and the reductions below merge ten times per row): exact while s 2^d is normal; d <= -127 gives 0
// (ldexpf: at most a subnormal, below 2^-126 of the unit the caller's sums are kept in).
__device__ __forceinline__ float scaleDown(float s, int d) { return s * pow2(max(d, -127)); }

// Layer norm's s / n for a count n in [1, 2^24]. kFast: the fast path of the correctly rounded
// division (an approximate reciprocal, one Newton step and one correction of the quotient, each an
// fma: the instructions and bits of `/` wherever its operands need no slow path, which for these
// sums means s normal and finite) without the slow path's call. The call's register convention
// made ptxas spill the float32 layer norm's row (95% of memcpy against 99.6% on an H100), while the
// float16 kernels spill without the call (ptxas then schedules their conversions differently): each
// storage type takes the one that compiles without spills. With kFast a subnormal s can come out an
// ulp (of a subnormal) off, and an infinite s gives NaN where `/` gives inf, as does the row's
// output either way (its centred values are then -inf and NaN).
template <bool kFast>
__device__ __forceinline__ float divByCount(float s, float n) {
    if constexpr (!kFast) return s / n;
    float r;  // the approximate reciprocal (MUFU.RCP; n >= 1 needs no subnormal guard)
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(n));
    r = fmaf(fmaf(-n, r, 1.0f), r, r);
    const float q = s * r;
    return fmaf(fmaf(-n, q, s), r, q);
}

// --- row reductions ------------------------------------------------------------------------------

struct Sum {
    using T = float;
    __device__ static T identity() { return 0.0f; }
    __device__ static T merge(T a, T b) { return a + b; }
    __device__ static T shfl(T v, int o) { return __shfl_xor_sync(kFull, v, o); }
};
struct Max {
    using T = float;
    __device__ static T identity() { return negInf(); }
    __device__ static T merge(T a, T b) { return fmaxf(a, b); }
    __device__ static T shfl(T v, int o) { return __shfl_xor_sync(kFull, v, o); }
};
// A row's largest |x| as float bits (non-negative floats order as their bits do, NaN above +inf).
struct MaxBits {
    using T = unsigned;
    __device__ static T identity() { return 0u; }
    __device__ static T merge(T a, T b) { return max(a, b); }
    __device__ static T shfl(T v, int o) { return __shfl_xor_sync(kFull, v, o); }
};
// Whether Op::merge(a, b) has the bits of Op::merge(b, a) (NP_DECODE_FLAT's Split::foldFlat).
template <class Op>
struct OrderFree {
    static constexpr bool value = false;
};
template <>
struct OrderFree<Sum> {
    static constexpr bool value = true;
};
template <>
struct OrderFree<MaxBits> {
    static constexpr bool value = true;
};
// A sum kept in units of 2^(kPow * e): kPow = 1 for sum(x), kPow = 2 for sum(x^2). Merging rescales the
// smaller-exponent side by an exact power of two. What scaleDown drops is below cols 2^-125 units of
// 2^(kPow e), while the row's largest |x|^kPow is at least one unit: relatively below 2^-90 for any row
// (as ldexpf, which also rounds what turns subnormal), far inside every error bound of the hunt.
template <int kPow>
struct ScaledSum {
    struct T { int e; float s; };
    __device__ static T identity() { return {-126, 0.0f}; }
    __device__ static T merge(T a, T b) {
        const int e = max(a.e, b.e);
        return {e, scaleDown(a.s, kPow * (a.e - e)) + scaleDown(b.s, kPow * (b.e - e))};
    }
    __device__ static T shfl(T v, int o) {
        return {__shfl_xor_sync(kFull, v.e, o), __shfl_xor_sync(kFull, v.s, o)};
    }
};
// Online softmax statistics: the running maximum m and sum s of exp(x - m).
struct Online {
    struct T { float m; float s; };
    __device__ static T identity() { return {negInf(), 0.0f}; }
    // A side that saw only -inf (or NaN: s is then NaN and must survive) has m = -inf: s * 0.
    __device__ static float part(T a, float m) { return a.m == negInf() ? a.s * 0.0f : a.s * expf(a.m - m); }
    __device__ static T merge(T a, T b) {
        const float m = fmaxf(a.m, b.m);
        return {m, part(a, m) + part(b, m)};
    }
    __device__ static T shfl(T v, int o) {
        return {__shfl_xor_sync(kFull, v.m, o), __shfl_xor_sync(kFull, v.s, o)};
    }
};

// Shared scratch for the second reduction level: one 16-byte slot per warp of the block (at most
// 1024 threads). No barrier follows the reads of a reduction's slots, so the next reduction takes
// another Scratch; one may take a Scratch again once a later barrier (another reduction's) has
// followed every read of it.
struct Scratch {
    float4 slot[32];
};

// The reduction of v over the tpr threads of this row, returned to all of them. Every thread of the
// block must call it (it may hold __syncthreads).
template <class Op>
__device__ __forceinline__ typename Op::T rowReduce(typename Op::T v, Scratch& scratch) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v = Op::merge(v, Op::shfl(v, o));
    const int tpr = blockDim.x;
    if (tpr == 32) return v;
    // The block's warps in order: row y owns warps y * tpr / 32 ... (y + 1) * tpr / 32 - 1.
    auto* slots = reinterpret_cast<typename Op::T*>(scratch.slot);
    const int warps = tpr >> 5;
    const int lane = threadIdx.x & 31;
    if (lane == 0) slots[threadIdx.y * warps + (threadIdx.x >> 5)] = v;
    __syncthreads();
    // Every aligned group of p lanes (p: warps rounded up to a power of two) reads the row's warp
    // totals in order, the identity past the last, and folds them with the same log2(p)-step
    // butterfly, so every lane ends with the same total. Rows of a power-of-two number of warps have
    // no padding.
    const int p = warps & (warps - 1) ? 1 << (32 - __clz(warps)) : warps;
    const int i = lane & (p - 1);
    typename Op::T t = i < warps ? slots[threadIdx.y * warps + i] : Op::identity();
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        if (o < p) t = Op::merge(t, Op::shfl(t, o));
    }
    return t;
}

// --- decode: a thread's vectors spread over warps -------------------------------------------------
//
// A register-path thread sums per vector and then over its vectors (see Reductions at the top). At one row per
// block (decode, prod_decode.cu) a kernel of block (tpr, kS) spreads the kS kVecs vectors of the
// prefill kernel's thread t over threads (t, 0) ... (t, kS - 1), kVecs each (SplitTeam). They compute
// their vectors' partials, exchange them through shared memory, and each adds thread t's kS kVecs
// partials in the prefill kernel's order: every group then holds the prefill thread's sums, runs the
// same reductions (rowReduce's row slot is threadIdx.y) and writes its own vectors. The bits are the
// prefill kernel's; a row's loads, arithmetic and stores are spread over kS times the warps, which is
// what a lone row's latency is made of (one warp's arithmetic on 64 elements a thread is issue-bound).
// kS = 1 is the prefill kernel: no exchange, no barrier.
template <int kS>
struct Split {
    static constexpr int S = kS;
    static_assert(kS == 2 || kS == 4 || kS == 8, "a thread's 8 vectors at most, over 2, 4 or 8 threads");
    // What the groups exchange: a partial per (thread, vector): kS tpr <= 512 threads of kVecs
    // vectors each. Two buffers, which a kernel's successive reductions alternate between: a buffer
    // is written again only after the next reduction's barrier, which follows every read of it.
    template <int kVecs>
    struct Exchange {
        float slot[2][512 * kVecs];
    };
    // Thread t's partials of a reduction Op in vector order, folded from Op's identity: this group's
    // kVecs of them in p, the others' through buffer k of ex.
    template <class Op, int kVecs>
    __device__ static typename Op::T fold(const typename Op::T (&p)[kVecs], Exchange<kVecs>& ex, int k) {
        static_assert(kS * kVecs <= 8, "8 vectors a prefill thread over kS threads");
        static_assert(sizeof(typename Op::T) == sizeof(float), "one word a partial");
        auto* slots = reinterpret_cast<typename Op::T*>(ex.slot[k]);
        const int tpr = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
#pragma unroll
        for (int j = 0; j < kVecs; ++j) slots[(static_cast<int>(threadIdx.y) * kVecs + j) * tpr + t] = p[j];
        __syncthreads();
        typename Op::T all = Op::identity();
#pragma unroll
        for (int j = 0; j < kS * kVecs; ++j) all = Op::merge(all, slots[j * tpr + t]);
        return all;
    }
#ifdef NP_DECODE_FLAT
    // A/B candidate, off unless -DNP_DECODE_FLAT (tools/sweep_prod.py --spread --variants
    // base,NP_DECODE_FLAT; tools/ab_bits.py --define NP_DECODE_FLAT --spread must find the prefill
    // bits): fold and rowReduce in one barrier. After the exchange, lane l of every warp folds the
    // partials of prefill thread 32 w + l for each of the row's warps w (kS kVecs partials each, in
    // order) and reduces each over its warp with rowReduce's butterfly: every warp then holds every
    // warp total W_w, and the second level is rowReduce's butterfly on W_(l mod p) in registers, the
    // same merges in the same order, so the same bits, without rowReduce's store, barrier and load.
    // *laneTotal: W_l for lanes l < warps (what rangeVerdict reads from scratch otherwise). The
    // exchange buffers stay safe with one barrier a reduction: they alternate, and a buffer is
    // written again only after the next reduction's barrier.
    // Lane l's own butterfly result stands for the lane-0 total rowReduce stores: the same bits only
    // for merges whose result does not depend on the order of their operands (Sum, MaxBits).
    template <class Op, int kVecs>
    __device__ static typename Op::T foldFlat(const typename Op::T (&p)[kVecs], Exchange<kVecs>& ex, int k,
                                              typename Op::T* laneTotal) {
        static_assert(kS * kVecs <= 8, "8 vectors a prefill thread over kS threads");
        static_assert(sizeof(typename Op::T) == sizeof(float), "one word a partial");
        static_assert(OrderFree<Op>::value, "a merge whose bits do not depend on its operands' order");
        auto* slots = reinterpret_cast<typename Op::T*>(ex.slot[k]);
        const int tpr = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
#pragma unroll
        for (int j = 0; j < kVecs; ++j) slots[(static_cast<int>(threadIdx.y) * kVecs + j) * tpr + t] = p[j];
        __syncthreads();
        const int warps = tpr >> 5, lane = t & 31;
        const int pw = warps & (warps - 1) ? 1 << (32 - __clz(warps)) : warps;
        typename Op::T mine = Op::identity(), first = Op::identity();
#pragma unroll 1
        for (int w = 0; w < warps; ++w) {  // the same trip count in every lane
            typename Op::T all = Op::identity();
#pragma unroll
            for (int j = 0; j < kS * kVecs; ++j) all = Op::merge(all, slots[j * tpr + 32 * w + lane]);
#pragma unroll
            for (int o = 16; o > 0; o /= 2) all = Op::merge(all, Op::shfl(all, o));
            if (w == 0) first = all;
            if (w == (lane & (pw - 1))) mine = all;
        }
        if (laneTotal != nullptr) *laneTotal = mine;
        if (warps == 1) return first;  // rowReduce returns a one-warp row's butterfly
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            if (o < pw) mine = Op::merge(mine, Op::shfl(mine, o));
        }
        return mine;
    }
#endif
};
template <>
struct Split<1> {
    static constexpr int S = 1;
    template <int kVecs>
    struct Exchange {};
    template <class Op, int kVecs>
    __device__ static typename Op::T fold(const typename Op::T (&p)[kVecs], Exchange<kVecs>&, int) {
        typename Op::T all = Op::identity();
#pragma unroll
        for (int j = 0; j < kVecs; ++j) all = Op::merge(all, p[j]);
        return all;
    }
};
// --- the row in registers ------------------------------------------------------------------------

// How a thread moves its vectors between memory and registers, chosen once per thread (Regs::copy).
// Every loop over memory has a copy per mode: a test inside the loop would be if-converted into
// predicated copies of every path, and predicated-off instructions still take issue slots.
enum Copy : int {
    kElementwise = 0,  // element by element where a vector is not whole (misaligned or ragged rows)
    kWhole = 1,        // 16-byte accesses; the thread's vectors past the row's end are skipped
    kAll = 2,          // 16-byte accesses, every vector of the thread in the row
    kShifted = 3,      // rows off the 16-byte grid: the widest accesses each vector's alignment allows
};
// Regs' kOnly for a copy chosen at run time (kAny), or chosen at run time among all but kShifted
// (kOnGrid: a kernel whose launcher sends the rows off the grid to another, which leaves it smaller).
constexpr int kAny = -1, kOnGrid = -2;

// The threads that share a row: the tpr threads of this block's row (the register path), or, on the
// cluster path, the kCtas x tpr threads of a thread-block cluster (thread rank * tpr + t).
struct BlockTeam {
    __device__ static int size() { return static_cast<int>(blockDim.x); }
    __device__ static int rank() { return static_cast<int>(threadIdx.x); }
};
__device__ __forceinline__ unsigned clusterRank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
template <int kCtas>
struct ClusterTeam {
    __device__ static int size() { return kCtas * static_cast<int>(blockDim.x); }
    __device__ static int rank() {
        return static_cast<int>(clusterRank()) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
    }
};
// A decode kernel's thread (t, y) of block (tpr, kS) (see Split): vectors (y kVecs + j) tpr + t for
// j < kVecs, the share of the prefill kernel's thread t that group y holds.
template <int kVecs>
struct SplitTeam {
    __device__ static int size() { return static_cast<int>(blockDim.x); }
    __device__ static int rank() {
        return static_cast<int>(threadIdx.y) * kVecs * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
    }
};
// The Regs team of a kS-way split: the prefill kernel's (BlockTeam) for kS = 1.
template <int kS, int kVecs>
struct TeamOf {
    using T = SplitTeam<kVecs>;
};
template <int kVecs>
struct TeamOf<1, kVecs> {
    using T = BlockTeam;
};

// One thread's share of a row: kVecs vectors of W elements, element (j * T + t) * W + w for the
// team's T threads (Team: BlockTeam, T = tpr, or ClusterTeam). Column indices are int: a team holds
// at most 16 x 512 x 64 columns.
//
// Storage: kPacked = false keeps every element as a float (converted once, at load, and writable);
// kPacked = true keeps the loaded 16-bit values as they came, two per register, and widens an
// element each time it is read (half the registers for bfloat16 / float16, so twice the row fits at
// the same occupancy). Both give the same bits: the arithmetic on each element is the same.
// kOnly: a copy mode (see Copy) every thread of every launch takes, fixed at compile time (kAny: chosen
// at run time; kOnGrid: chosen at run time, kShifted excluded). kAll is a decode kernel's dense entry
// (prod_decode.cu): the launcher has checked that the pointers are 16-byte aligned and that the row
// fills every thread's vectors exactly, so the other modes' code is not compiled at all. kShifted is
// an off-grid prefill kernel's (the launcher's off_grid).
template <class Storage, int kVecs, bool kPacked = false, class Team = BlockTeam, int kOnly = kAny>
struct Regs {
    static constexpr int V = kVecs;
    static constexpr int N = kVecs * Storage::W;
    static constexpr bool kMutable = !kPacked;
    static constexpr int kWords = kPacked ? N / 2 : N;
    unsigned w[kWords];  // float bits, or two 16-bit values

    // Element i as a float; kPass: the pass (see WidenBf16), 0 to 7.
    template <int kPass = 0>
    __device__ float at(int i) const {
        if constexpr (kPacked) {
            return (i & 1) ? Storage::template hi<kPass>(w[i >> 1]) : Storage::template lo<kPass>(w[i >> 1]);
        } else {
            return __uint_as_float(w[i]);
        }
    }
    __device__ void set(int i, float v) {
        static_assert(!kPacked, "packed storage is read-only");
        w[i] = __float_as_uint(v);
    }
    // Vector j from W floats (for packed storage they must already be exact in the type).
    __device__ void setVec(int j, const float* src) {
        if constexpr (kPacked) {
#pragma unroll
            for (int q = 0; q < Storage::W / 2; ++q)
                w[j * Storage::W / 2 + q] = Storage::pack(src[2 * q], src[2 * q + 1]);
        } else {
#pragma unroll
            for (int q = 0; q < Storage::W; ++q) w[j * Storage::W + q] = __float_as_uint(src[q]);
        }
    }

    __device__ static int first(int j) { return (j * Team::size() + Team::rank()) * Storage::W; }
    // Whether every element this thread holds is in the row (all threads but the ragged edge's).
    __device__ static bool full(int cols) { return kOnly == kAll || first(kVecs - 1) + Storage::W <= cols; }
    // How this thread moves its vectors (see Copy). vec (aligned pointers, cols % W == 0): each
    // vector lies wholly in the row or wholly past its end. Otherwise a packed 16-bit row (4 or 8
    // vectors a thread) takes kShifted, whose accesses follow the row's shift: the mode is then the
    // same for every thread of the row. The others keep the element-wise copy there: float32 rows (4-byte
    // accesses, 73-81% of memcpy at 4097 columns against 53-61% shifted) and
    // narrow 16-bit rows (fewer copies of the loops to compile: prod.cu's build took 3.4x longer).
    static constexpr bool kShifts = Storage::W == 8 && kPacked && kOnly != kOnGrid;
    __device__ static int copy(int cols, bool vec) {
        if constexpr (kOnly >= 0) return kOnly;
        return vec ? (full(cols) ? kAll : kWhole) : (kShifts ? kShifted : kElementwise);
    }

    // kShifted: vector j of a row that starts s = shiftOf(row) elements past a 16-byte boundary (every
    // row of 4097 columns but one in eight) is moved with the accesses its own alignment allows: one
    // 16-byte access (s = 0: gamma and beta, and one row in W), four 4-byte words (s even), or an
    // element, three words and an element (s odd: the words start one element in), the words
    // realigned by byte permutes. Every access lies inside the vector, so a lane touches only its
    // own elements and never memory past the row (NP_SHIFTED_WIDE, below, reads its neighbours' and
    // drops them, and writes the previous lane's last elements). The vector that crosses cols goes
    // element by element, the fill bits from cols on.
    template <bool kReadOnly>
    __device__ static unsigned word(const typename Storage::T* p) {  // p 4-byte aligned
        const unsigned* q = reinterpret_cast<const unsigned*>(p);
        return kReadOnly ? __ldg(q) : *q;
    }
    template <bool kReadOnly>
    __device__ static unsigned element(const typename Storage::T* p) {
        return kReadOnly ? static_cast<unsigned>(__ldg(p)) : static_cast<unsigned>(*p);
    }
#ifdef NP_SHIFTED_WIDE
    // A/B candidate, off unless -DNP_SHIFTED_WIDE (tools/sweep_prod.py --variants base,NP_SHIFTED_WIDE;
    // tools/ab_bits.py --define NP_SHIFTED_WIDE must find the same bits): a shifted vector loaded as
    // the two aligned 16-byte chunks around it (neighbouring lanes share a chunk: L1 serves the
    // second) and cut out with selects and funnel shifts, where the current copy takes four or five
    // narrower accesses; stored as one aligned chunk per lane, the previous lane's tail (a
    // shuffle) with this lane's head. Only bytes of the row are written; the bytes read around it
    // (the previous row's, at most 14) are dropped.
    //
    // The 8 elements that start s (1 to 7) elements into the 16 elements of a, b.
    __device__ static uint4 window(const uint4& a, const uint4& b, int s) {
        const unsigned w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        const int h = s >> 1;  // whole words, then a half word where s is odd
        unsigned v1[6], v2[5];
#pragma unroll
        for (int i = 0; i < 6; ++i) v1[i] = (h & 2) ? w[i + 2] : w[i];
#pragma unroll
        for (int i = 0; i < 5; ++i) v2[i] = (h & 1) ? v1[i + 1] : v1[i];
        const unsigned half = (s & 1) * 16;
        return make_uint4(__funnelshift_r(v2[0], v2[1], half), __funnelshift_r(v2[1], v2[2], half),
                          __funnelshift_r(v2[2], v2[3], half), __funnelshift_r(v2[3], v2[4], half));
    }
    __device__ static unsigned short elementOf(const uint4& v, int e) {
        const unsigned w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
        return static_cast<unsigned short>(w >> (16 * (e & 1)));
    }
#endif
    template <bool kReadOnly>
    __device__ static uint4 loadShifted(const typename Storage::T* row, int j, int cols, unsigned fill) {
        constexpr int W = Storage::W;
        const int c0 = first(j);
        const int s = shiftOf<Storage>(row);  // the same for the whole row: the branches do not diverge
        const typename Storage::T* p = row + c0;
        if (c0 + W <= cols) {
            if (s == 0) return kReadOnly ? Storage::ldgV(p) : Storage::loadV(p);
#ifdef NP_SHIFTED_WIDE
            if (c0 - s + 2 * W <= cols) {  // the second chunk ends inside the row
                const typename Storage::T* a = p - s;  // 16-byte aligned
                const uint4 lo = kReadOnly ? Storage::ldgV(a) : Storage::loadV(a);
                const uint4 hi = kReadOnly ? Storage::ldgV(a + W) : Storage::loadV(a + W);
                return window(lo, hi, s);
            }
#endif
            if (s % 2 == 0)
                return make_uint4(word<kReadOnly>(p), word<kReadOnly>(p + 2), word<kReadOnly>(p + 4),
                                  word<kReadOnly>(p + 6));
            // elements 0 and 7 alone, 1-6 as three words: word k of the vector is the high half of
            // one and the low half of the next (byte selector 0x5432)
            const unsigned e0 = element<kReadOnly>(p), e7 = element<kReadOnly>(p + 7);
            const unsigned m0 = word<kReadOnly>(p + 1), m1 = word<kReadOnly>(p + 3), m2 = word<kReadOnly>(p + 5);
            return make_uint4(__byte_perm(e0, m0, 0x5410), __byte_perm(m0, m1, 0x5432),
                              __byte_perm(m1, m2, 0x5432), __byte_perm(m2, e7, 0x5432));
        }
        unsigned w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned lo = c0 + 2 * k < cols ? element<kReadOnly>(p + 2 * k) : fill;
            const unsigned hi = c0 + 2 * k + 1 < cols ? element<kReadOnly>(p + 2 * k + 1) : fill;
            w[k] = lo | (hi << 16);
        }
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
    __device__ static void storeShifted(typename Storage::T* row, int j, int cols, const uint4& v) {
        constexpr int W = Storage::W;
        const int c0 = first(j);
        const int s = shiftOf<Storage>(row);
        typename Storage::T* p = row + c0;
#ifdef NP_SHIFTED_WIDE
        // The contract of this path: every lane of the warp calls storeShifted for the same j of the
        // same row (a warp's lanes are one row's consecutive vectors, and s is the row's): lane l - 1
        // holds the vector before lane l's.
        if (s != 0) {
            const int lane = static_cast<int>(threadIdx.x) & 31;
            const uint4 prev = make_uint4(__shfl_up_sync(kFull, v.x, 1), __shfl_up_sync(kFull, v.y, 1),
                                          __shfl_up_sync(kFull, v.z, 1), __shfl_up_sync(kFull, v.w, 1));
            if (c0 >= cols) return;
            const int head = W - s;  // this vector's elements before the next 16-byte boundary
            // [c0 - s, c0 + head): the previous lane's last s elements and this one's first head
            if (lane > 0 && c0 + head <= cols) {
                *reinterpret_cast<uint4*>(p - s) = window(prev, v, head);
            } else {
#pragma unroll
                for (int e = 0; e < W; ++e) if (e < head && c0 + e < cols) Storage::putRaw(p + e, elementOf(v, e));
            }
            // the last s, unless the next lane's chunk takes them
            if (!(lane < 31 && c0 + W + head <= cols)) {
#pragma unroll
                for (int e = 1; e < W; ++e) if (e >= head && c0 + e < cols) Storage::putRaw(p + e, elementOf(v, e));
            }
            return;
        }
#endif
        if (c0 + W <= cols) {
            if (s == 0) {
                *reinterpret_cast<uint4*>(p) = v;
            } else if (s % 2 == 0) {
                unsigned* q = reinterpret_cast<unsigned*>(p);
                q[0] = v.x;
                q[1] = v.y;
                q[2] = v.z;
                q[3] = v.w;
            } else {
                Storage::putRaw(p, v.x);
                unsigned* q = reinterpret_cast<unsigned*>(p + 1);
                q[0] = __byte_perm(v.x, v.y, 0x5432);
                q[1] = __byte_perm(v.y, v.z, 0x5432);
                q[2] = __byte_perm(v.z, v.w, 0x5432);
                Storage::putRaw(p + 7, v.w >> 16);
            }
            return;
        }
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < W; ++e) {
            if (c0 + e < cols) Storage::putRaw(p + e, w[e / 2] >> (16 * (e % 2)));
        }
    }
    // Vector j of a row (or of gamma / beta) into dst[0..W); fill past the end. kCopy: see Copy.
    // kReadOnly: memory no thread writes during the kernel, read through the non-coherent path with
    // an explicit ldgV. Left to infer it from __restrict__, the compiler made most loads coherent
    // once the loops moved into helpers, and then issued gamma's loads only after the previous
    // vector's store to out (seen in the SASS).
    template <int kCopy, bool kReadOnly = true>
    __device__ static void loadVec(const typename Storage::T* __restrict__ row, int j, int cols, bool vec,
                                   float fill, float* dst) {
        const int c0 = first(j);
        if constexpr (kCopy == kShifted) {
            Storage::unpackV(loadShifted<kReadOnly>(row, j, cols, Storage::bits(fill)), dst);
        } else if constexpr (kCopy == kElementwise) {
            if (vec && c0 + Storage::W <= cols) {
                Storage::unpackV(kReadOnly ? Storage::ldgV(row + c0) : Storage::loadV(row + c0), dst);
            } else {
#pragma unroll
                for (int w = 0; w < Storage::W; ++w) dst[w] = c0 + w < cols ? Storage::get(row + c0 + w) : fill;
            }
        } else {
            // kWhole: a predicated load, no branch: the compiler still issues the thread's loads
            // together (a branch around each made a round trip per vector: 2880 bfloat16 columns,
            // where a quarter of the threads have a vector past the end, ran at 70-92% of memcpy).
            typename Storage::V q{};  // all bits 0: +0.0f
            if (kCopy == kAll || c0 < cols) q = kReadOnly ? Storage::ldgV(row + c0) : Storage::loadV(row + c0);
            Storage::unpackV(q, dst);
            if (kCopy == kWhole && c0 >= cols) {
#pragma unroll
                for (int w = 0; w < Storage::W; ++w) dst[w] = fill;  // nothing to do for fill +0.0f
            }
        }
    }
    template <int kCopy>
    __device__ static void storeVec(typename Storage::T* __restrict__ row, int j, int cols, bool vec,
                                    const float* src) {
        const int c0 = first(j);
        if constexpr (kCopy == kShifted) {
            storeShifted(row, j, cols, Storage::packRaw(src));
            return;
        }
        if (kCopy == kAll || (kCopy == kWhole && c0 < cols) ||
            (kCopy == kElementwise && vec && c0 + Storage::W <= cols)) {
            Storage::putVec(row + c0, src);
        } else if (kCopy == kElementwise) {
#pragma unroll
            for (int w = 0; w < Storage::W; ++w) if (c0 + w < cols) Storage::put(row + c0 + w, src[w]);
        }
    }
    // The row into registers (fill past its end), with this thread's copy(); kEveryMode = false:
    // kElementwise where copy() says kWhole or kShifted (fewer copies of the loop, for register
    // pressure).
    template <bool kEveryMode = true>
    __device__ void load(const typename Storage::T* __restrict__ row, int cols, bool vec, float fill) {
        const int mode = copy(cols, vec);
        if (mode == kAll) loadAs<kAll>(row, cols, vec, fill);
        else if (kEveryMode && mode == kWhole) loadAs<kWhole>(row, cols, vec, fill);
        else if constexpr (kEveryMode && kShifts) {
            if (mode == kShifted) loadAs<kShifted>(row, cols, vec, fill);
            else loadAs<kElementwise>(row, cols, vec, fill);
        }
        else loadAs<kElementwise>(row, cols, vec, fill);
    }
    template <int kCopy>
    __device__ void loadAs(const typename Storage::T* __restrict__ row, int cols, bool vec, float fill) {
        if constexpr (kPacked && kCopy == kShifted) {
#pragma unroll
            for (int j = 0; j < kVecs; ++j) {
                const uint4 v = loadShifted<true>(row, j, cols, Storage::bits(fill));
                w[j * 4] = v.x; w[j * 4 + 1] = v.y; w[j * 4 + 2] = v.z; w[j * 4 + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < kVecs; ++j) {
                const int c0 = first(j);
                if constexpr (kPacked) {
                    const unsigned short pad = Storage::bits(fill);
                    if (kCopy != kElementwise || (vec && c0 + Storage::W <= cols)) {  // the 16 bytes as they are
                        const unsigned pads = pad | (static_cast<unsigned>(pad) << 16);
                        uint4 q = make_uint4(pads, pads, pads, pads);
                        if (kCopy == kAll || c0 < cols) q = Storage::ldgV(row + c0);  // predicated (loadVec)
                        w[j * 4] = q.x; w[j * 4 + 1] = q.y; w[j * 4 + 2] = q.z; w[j * 4 + 3] = q.w;
                    } else {
#pragma unroll
                        for (int q = 0; q < Storage::W / 2; ++q) {
                            const unsigned a = c0 + 2 * q < cols ? row[c0 + 2 * q] : pad;
                            const unsigned b = c0 + 2 * q + 1 < cols ? row[c0 + 2 * q + 1] : pad;
                            w[j * Storage::W / 2 + q] = a | (b << 16);
                        }
                    }
                } else {
                    float v[Storage::W];
                    loadVec<kCopy>(row, j, cols, vec, fill, v);
                    setVec(j, v);
                }
            }
        }
    }
    __device__ void zero() {
#pragma unroll
        for (int i = 0; i < kWords; ++i) w[i] = 0u;
    }
    __device__ static bool valid(int i, int cols) { return first(i / Storage::W) + i % Storage::W < cols; }
    // f(i, in) for every element i, in: element i is in the row. Two copies of the loop: threads
    // whose elements are all in the row (full) run the one without the column test.
    template <class F>
    __device__ static void each(bool full, int cols, F&& f) {
        if (full) {
#pragma unroll
            for (int i = 0; i < N; ++i) f(i, true);
        } else {
#pragma unroll
            for (int i = 0; i < N; ++i) f(i, valid(i, cols));
        }
    }
};

// A norm kernel's share of a row: the prefill kernel's Regs (kS = 1) or a decode kernel's split
// group's (SplitTeam). kOnly narrows the copies compiled (see Regs): a dense decode kernel has only
// the whole-vector copy (kDense, kAll), an off-grid prefill kernel only the shifted one (kShifted),
// and the layer and RMS norms' other prefill kernels every copy but that one (kOnGrid).
template <class Storage, int kVecs, bool kPacked, int kS, bool kDense, int kOnly = kAny>
using SplitRegs = Regs<Storage, kVecs, kPacked, typename TeamOf<kS, kVecs>::T, kDense ? kAll : kOnly>;

// A compile-time int passed to a generic lambda (no <type_traits> under NVRTC).
template <int V>
struct Tag {
    static constexpr int value = V;
};
// f(Tag<mode>{}): one compiled copy of f per Copy mode that Share::copy can choose, the thread's
// chosen at run time.
template <class Share, class F>
__device__ __forceinline__ void withCopy(int mode, F&& f) {
    if (mode == kAll) f(Tag<kAll>{});
    else if (mode == kWhole) f(Tag<kWhole>{});
    else if constexpr (Share::kShifts) {
        if (mode == kShifted) f(Tag<kShifted>{});
        else f(Tag<kElementwise>{});
    } else {
        f(Tag<kElementwise>{});
    }
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<size_t>(p) & 15u) == 0;
}

// The row this thread works on, and whether it exists (threads of missing rows still join every
// reduction: the block's barriers need them).
struct RowIndex {
    size_t row;
    bool live;
    // decode: a decode kernel (prod_decode.cu), launched with one block per row (grid.x = rows): row
    // blockIdx.x, always live, so that no test of it stands between the launch and the row's loads.
    // kS > 1 is one (its kS groups all on the row; see Split).
    __device__ RowIndex(size_t rows, int kS = 1, bool decode = false)
        : row(kS > 1 || decode ? static_cast<size_t>(blockIdx.x)
                               : static_cast<size_t>(blockIdx.x) * blockDim.y + threadIdx.y),
          live(decode || row < rows) {}
};

// --- the norms' sums: unscaled while their range allows, else scaled by the row's largest |x| --------
//
// A norm adds the row's unscaled values (per vector, then over the vectors: Split::fold, then
// rowReduce) and finally a sum of squares: sum(x^2) for RMS norm, sum((x - mean)^2) for layer norm.
// That sum's own range says whether the unscaled arithmetic was exact enough (rangeVerdict): while
// every warp total of it is at most 2^120 and one is at least 2^-60, no term or partial sum overflowed
// (the terms are not negative, so a partial sum is at most its total, and the row's total is below
// 16 x 2^120), what squares below 2^-126 lose (at most 2^-149 each, 2^15 elements at most) is below
// 2^-74 of the sum, and an overflowing sum(x) would have made it inf or NaN. An eps above 2^126
// could overflow the unscaled ms + eps: every row then takes the scaled pass (eps 4^-E).
// Those rows are the plain arithmetic the error model bounds, with E = 0. Other rows (huge, tiny,
// constant, zero, nonfinite) take a second pass over the registers: E, the exponent of the row's
// largest |x| (scaleExponent), and the same sums of x 2^-E, exact power-of-two scalings that
// neither overflow nor underflow. Every thread of a row reaches the same verdict from the same warp
// totals, whatever the row's batch, so the bits are a row's own.

// A norm's slot for the lane's warp total of its range-checked sum: NP_DECODE_FLAT's decode kernels
// leave it there (Split::foldFlat) for rangeVerdict; otherwise none (nullptr, a constant).
struct LaneTotal {
#ifdef NP_DECODE_FLAT
    float value = 0.0f;
    __device__ float* slot() { return &value; }
#else
    __device__ static constexpr float* slot() { return nullptr; }
#endif
};

// The row's reduction Op of acc: acc(t, i) folds element i into its vector's partial t, from Op's
// identity; the vectors' partials fold in order (Split, through buffer k of ex), then rowReduce in
// scratch.
// laneTotal: where NP_DECODE_FLAT's decode kernels leave the lane's warp total (Split::foldFlat).
template <class Op, class Sp, class Share, class Acc>
__device__ __forceinline__ typename Op::T rowTotal(Acc acc, typename Sp::template Exchange<Share::V>& ex, int k,
                                                   Scratch& scratch, typename Op::T* laneTotal = nullptr) {
    constexpr int W = Share::N / Share::V;
    typename Op::T part[Share::V];
#pragma unroll
    for (int j = 0; j < Share::V; ++j) {
        typename Op::T t = Op::identity();
#pragma unroll
        for (int w = 0; w < W; ++w) t = acc(t, j * W + w);
        part[j] = t;
    }
#ifdef NP_DECODE_FLAT
    if constexpr (Sp::S > 1) return Sp::template foldFlat<Op>(part, ex, k, laneTotal);
#endif
    return rowReduce<Op>(Sp::template fold<Op>(part, ex, k), scratch);
}

// Whether a row's sum of squares q, just reduced in scratch (rowReduce<Sum>), needs the scaled second
// pass (self): a warp total of it above 2^120 (or NaN), or none as large as 2^-60 (for a row of one
// warp, its total), or an eps above 2^126. The rows of a
// block share its barriers: a block whose rows span several warps takes the second pass if any of its
// rows needs it (block; each row's warp totals are in scratch, read before the next barrier), and
// rows that do not keep their one-pass sums. Rows of one warp (no barrier) and a decode block (one
// row) decide alone. Every thread of the block must call it.
struct Verdict {
    bool self;
    bool block;
};
template <int kS>
__device__ __forceinline__ Verdict rangeVerdict(float q, const Scratch& scratch, float eps,
                                                const float* laneTotal = nullptr) {
    const bool huge = eps > 0x1p126f;  // (every row of the launch)
    constexpr float kLo = 0x1p-60f, kHi = 0x1p120f;
    if (blockDim.x == 32) {
        const bool out = huge || !(q >= kLo && q <= kHi);  // NaN: out
        return {out, out};
    }
    const auto* slots = reinterpret_cast<const float*>(scratch.slot);
    const int warps = static_cast<int>(blockDim.x) >> 5;
    if constexpr (kS > 1) {
        // A decode block's one row (each of its kS groups wrote the same totals; group y's are at
        // y * warps): at most 16 totals, one a lane, voted on by the warp at once. The same verdict
        // as reading them one after another, without that chain of shared loads on the lone row's
        // critical path. (The prefill kernels keep the loop: there the vote made ptxas spill.)
        const int lane = static_cast<int>(threadIdx.x) & 31;
#ifdef NP_DECODE_FLAT
        const float t = lane < warps ? *laneTotal : 1.0f;  // (Split::foldFlat, no scratch)
#else
        const float t = lane < warps ? slots[static_cast<int>(threadIdx.y) * warps + lane] : 1.0f;
#endif
        const bool high = __any_sync(kFull, !(t <= kHi));  // NaN: high
        const bool low = __all_sync(kFull, lane >= warps || t < kLo);
        const bool out = huge || high || low;
        return {out, out};
    }
    const auto outside = [&](int y) {
        bool high = false, low = true;
        for (int w = 0; w < warps; ++w) {
            const float t = slots[y * warps + w];
            high = high || !(t <= kHi);
            low = low && t < kLo;
        }
        return high || low;
    };
    Verdict v;
    v.self = v.block = huge || outside(static_cast<int>(threadIdx.y));
    if (kS == 1 && blockDim.y > 1) {
        for (int y = 0; y < static_cast<int>(blockDim.y); ++y) v.block = v.block || outside(y);
    }
    return v;
}

// E, the exponent of the row's largest |x| (pass kPass of packed storage).
template <int kPass, class Sp, class Share>
__device__ __forceinline__ int rowExponent(const Share& r, typename Sp::template Exchange<Share::V>& ex, int k,
                                           Scratch& scratch) {
    const unsigned m = rowTotal<MaxBits, Sp, Share>(
        [&](unsigned t, int i) { return max(t, __float_as_uint(fabsf(r.template at<kPass>(i)))); }, ex, k, scratch);
    return scaleExponent(__uint_as_float(m));
}

// A/B candidate, off unless -DNP_DECODE_COLD (tools/sweep_prod.py --spread --variants
// base,NP_DECODE_COLD; tools/ab_bits.py --define NP_DECODE_COLD --spread must find the same bits):
// the norms' scaled pass (a row whose sum of squares is out of range, which no ordinary row takes)
// compiled out of line, as a call. A lone decode row runs on an SM whose instruction cache has not
// seen the kernel: every jump past code not yet fetched waits a round trip to L2, and inline, the
// ordinary row jumps over the scaled pass's two reductions. The callee gets its own copy of the
// row (f is a lambda capturing it by value: passing the registers' address would put the row in
// local memory for the whole kernel); the arithmetic is the same expressions, so the same bits.
// The call is made by exactly the threads that would run the pass inline, so its barriers (if
// any: a one-warp row reduces without one) meet the same threads.
#ifdef NP_DECODE_COLD
template <class F>
__device__ __noinline__ auto coldPath(F f) {
    return f();
}
#endif

// RMS norm's (E, sum of (x 2^-E)^2). Passes 0, 1 and 3 of packed storage; scratch[0] and [1].
template <class Sp, class Share>
__device__ __forceinline__ ScaledSum<2>::T rowSquareSum(const Share& r, typename Sp::template Exchange<Share::V>& ex,
                                                       Scratch* scratch, float eps) {
    static_assert(Share::N * Sp::S <= 64, "warp totals of at most 64 elements x 32 threads");
    LaneTotal lane;  // this lane's warp total of s (NP_DECODE_FLAT)
    float* const laneTotal = lane.slot();
    const float s = rowTotal<Sum, Sp, Share>(
        [&](float t, int i) { const float x = r.template at<0>(i); return fmaf(x, x, t); }, ex, 0, scratch[0],
        laneTotal);
    const Verdict v = rangeVerdict<Sp::S>(s, scratch[0], eps, laneTotal);
    if (!v.block) return {0, s};
#ifdef NP_DECODE_COLD
    return coldPath([=, &ex]() -> ScaledSum<2>::T {
        const int e = rowExponent<1, Sp>(r, ex, 1, scratch[1]);
        const float sc = pow2(-e);
        const float q = rowTotal<Sum, Sp, Share>(  // scratch[0]'s slots were read before scratch[1]'s barrier
            [&](float t, int i) { const float y = r.template at<3>(i) * sc; return fmaf(y, y, t); }, ex, 0,
            scratch[0]);
        return v.self ? ScaledSum<2>::T{e, q} : ScaledSum<2>::T{0, s};
    });
#else  // the product's copy of the same pass, inline (the candidate's replaces it if it is promoted)
    const int e = rowExponent<1, Sp>(r, ex, 1, scratch[1]);
    const float sc = pow2(-e);
    const float q = rowTotal<Sum, Sp, Share>(  // scratch[0]'s slots were read before scratch[1]'s barrier
        [&](float t, int i) { const float y = r.template at<3>(i) * sc; return fmaf(y, y, t); }, ex, 0, scratch[0]);
    return v.self ? ScaledSum<2>::T{e, q} : ScaledSum<2>::T{0, s};
#endif
}

// The row's 1 / sqrt(ms + eps), given ms in units of 4^E (E = 0, or for a row that takes the scaled
// pass the exponent of its largest |x|), applied as
// out = (x * a) * b: the true factor 2^-E f (f = 1 / sqrt(ms_scaled + eps 4^-E)) is split so that
// neither part nor the intermediate x * a can overflow, or underflow where the output would not:
// |E| <= 64: a = 2^-E f, b = 1; beyond, 2^-+64 goes into a and the rest into b. When eps 4^-E
// overflows, ms is below 2^-250 of eps and drops out: a = 1, b = 1 / sqrt(eps).
// eps 4^-E as two exact power-of-two products (ldexpf's cost avoided): it differs from ldexpf only
// where it underflows, where es is below 2^-126 and the sum it is added to is at least 1 / cols.
__device__ __forceinline__ float epsScaled(float eps, int E) { return eps * pow2(-E) * pow2(-E); }

struct NormFactor {
    float a;
    float b;
};
__device__ __forceinline__ NormFactor normFactor(float msScaled, int E, float eps) {
    const float es = epsScaled(eps, E);
    if (es == __int_as_float(0x7f800000)) return {1.0f, rsqrtf(eps)};  // +inf
    const float f = rsqrtf(msScaled + es);
    const int s = E > 64 ? 64 : (E < -64 ? -64 : 0);
    if (s == 0) return {pow2(-E) * f, 1.0f};
    return {pow2(-s), pow2(s - E) * f};
}

// Layer norm's f for the scaled centred values d = x 2^-E - mean: out = d * f. A zero denominator
// (the variance is 0 and eps 4^-E underflowed) with eps > 0 means every d is 0: f = 0, out = beta.
__device__ __forceinline__ float layerNormFactor(float varScaled, int E, float eps) {
    const float es = epsScaled(eps, E);
    if (es == __int_as_float(0x7f800000)) return pow2(E) * rsqrtf(eps);  // var drops out
    const float denom = varScaled + es;
    return denom == 0.0f && eps > 0.0f ? 0.0f : rsqrtf(denom);
}

// softmax's exp. float32 storage: expf (faithful). bfloat16 / float16 storage: ex2.approx of
// x log2(e), two instructions instead of expf's eight. Its relative error is about 2 ulp of float32
// plus |x| u from rounding the product, at most ~2^-16 where the result is not flushed to zero
// (|x| < 88): the fast-math c_x = 3.5 of docs/tolerances.md, and at least 2^5 times below the output's rounding
// in either 16-bit type. -inf gives +0, NaN stays NaN.
template <bool kFast>
__device__ __forceinline__ float expOf(float x) {
    if constexpr (kFast) {
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
        return y;
    } else {
        return expf(x);
    }
}

// Vector j of the output, exp(x - m) * inv. kHeld: the registers already hold exp(x - m) (the
// register path's writable storage); otherwise it is computed again from x.
template <bool kHeld, class Storage, class Share>
__device__ __forceinline__ void softmaxVec(const Share& r, int j, float m, float inv, float (&v)[Storage::W]) {
#pragma unroll
    for (int w = 0; w < Storage::W; ++w) {
        const int i = j * Storage::W + w;
        v[w] = (kHeld ? r.at(i) : expOf<Storage::kFastExp>(r.template at<2>(i) - m)) * inv;
    }
}

// The row's output with one copy for every vector (the register path).
template <int kCopy, bool kHeld, class Storage, class Share>
__device__ __forceinline__ void softmaxWrite(const Share& r, typename Storage::T* __restrict__ o, float m,
                                             float inv, int cols, bool vec) {
#pragma unroll
    for (int j = 0; j < Share::N / Storage::W; ++j) {
        float v[Storage::W];
        softmaxVec<kHeld, Storage>(r, j, m, inv, v);
        Share::template storeVec<kCopy>(o, j, cols, vec, v);
    }
}

// No column test anywhere: padding is -inf, whose exp(-inf - m) is 0 for every m but -inf and NaN,
// and m is -inf or NaN only when the row's own elements already make the sum NaN.
template <class Storage, int kVecs, bool kPacked>
__device__ void softmaxRegs(const typename Storage::T* __restrict__ in, typename Storage::T* __restrict__ out,
                            size_t rows, size_t cols) {
    using Share = Regs<Storage, kVecs, kPacked>;
    __shared__ Scratch scratch[2];
    const RowIndex ri(rows);
    const bool vec = cols % Storage::W == 0 && aligned16(in) && aligned16(out);
    Share r;
    if (ri.live) r.load(in + ri.row * cols, cols, vec, negInf());
    else r.zero();
    float m = negInf();
#pragma unroll
    for (int i = 0; i < r.N; ++i) m = fmaxf(m, r.template at<0>(i));
    m = rowReduce<Max>(m, scratch[0]);
    Split<1>::Exchange<Share::V> none;
    const float s = rowTotal<Sum, Split<1>, Share>([&](float t, int i) {  // per vector, then over the vectors
        const float e = expOf<Storage::kFastExp>(r.template at<1>(i) - m);
        if constexpr (Share::kMutable) r.set(i, e);  // packed storage recomputes it below
        return t + e;
    }, none, 0, scratch[1]);
    const float inv = 1.0f / s;  // one division per row; a second rounding per element
    if (!ri.live) return;
    typename Storage::T* o = out + ri.row * cols;
    const int c = static_cast<int>(cols);
    withCopy<Share>(Share::copy(c, vec), [&](auto copy) {
        softmaxWrite<decltype(copy)::value, Share::kMutable, Storage>(r, o, m, inv, c, vec);
    });
}

// gamma or beta, as the epilogue of a norm reads it: vector j into W floats, 0 past the row's end.
// kEarly = false: read from memory vector by vector as the row is written (the registers hold the
// row, and two blocks share an SM). kEarly = true (the decode entry points, prod_decode.cu): read
// into registers right after the row's loads, so both round trips to memory overlap and a decode
// row waits for one, not two. The values, and so the arithmetic, are the same either way.
template <class Storage, class Share, bool kEarly>
struct Param {
    const typename Storage::T* __restrict__ p;
    Share held;  // kEarly only (unused, and compiled away, otherwise)
    __device__ explicit Param(const typename Storage::T* __restrict__ p) : p(p) {}
    __device__ void fetch(int cols, bool vec) {
        if constexpr (kEarly) held.load(p, cols, vec, 0.0f);
    }
    template <int kCopy>
    __device__ void get(int j, int cols, bool vec, float* dst) const {
        if constexpr (kEarly) {
#pragma unroll
            for (int w = 0; w < Storage::W; ++w) dst[w] = held.template at<1>(j * Storage::W + w);
        } else {
            Share::template loadVec<kCopy>(p, j, cols, vec, 0.0f, dst);
        }
    }
};

// Layer norm's sum of (x sc - mean)^2 over the row's valid elements (the padding's d = -mean is left
// out), per vector, then over the vectors (Split, through buffer k of ex), then rowReduce in scratch.
template <int kPass, class Sp, class Share>
__device__ __forceinline__ float centredSquares(const Share& r, bool full, int cols, float sc, float mean,
                                                typename Sp::template Exchange<Share::V>& ex, int k,
                                                Scratch& scratch, float* laneTotal = nullptr) {
    float part[Share::V];
#pragma unroll
    for (int j = 0; j < Share::V; ++j) part[j] = 0.0f;
    Share::each(full, cols, [&](int i, bool in) {
        const float d = fmaf(r.template at<kPass>(i), sc, -mean);
        if (in) part[i / (Share::N / Share::V)] = fmaf(d, d, part[i / (Share::N / Share::V)]);
    });
#ifdef NP_DECODE_FLAT
    if constexpr (Sp::S > 1) return Sp::template foldFlat<Sum>(part, ex, k, laneTotal);
#endif
    return rowReduce<Sum>(Sp::template fold<Sum>(part, ex, k), scratch);
}

// out = (x 2^-E - mean) f gamma + beta, gamma and beta one vector at a time.
template <int kCopy, class Storage, class Share, class P>
__device__ __forceinline__ void layerNormWrite(const Share& r, typename Storage::T* __restrict__ o,
                                               const P& gamma, const P& beta, float sc,
                                               float mean, float f, int cols, bool vec) {
#pragma unroll
    for (int j = 0; j < Share::N / Storage::W; ++j) {
        float g[Storage::W], b[Storage::W];
        gamma.template get<kCopy>(j, cols, vec, g);
        beta.template get<kCopy>(j, cols, vec, b);
#pragma unroll
        for (int w = 0; w < Storage::W; ++w) {
            const int i = j * Storage::W + w;
            const float d = fmaf(r.template at<2>(i), sc, -mean);
            g[w] = fmaf(d * f, g[w], b[w]);
        }
        Share::template storeVec<kCopy>(o, j, cols, vec, g);
    }
}

// kExactDiv: `/` for the mean and variance whatever the storage (a decode kernel holding as floats
// the rows its prefill kernel keeps packed, prod_decode.cu's NP_DECODE_HELD: the prefill kernel's
// bits, which divByCount's fast path gives only for normal sums).
template <class Storage, int kVecs, bool kPacked, bool kEarly = false, int kS = 1, bool kDense = false,
          int kOnly = kAny, bool kExactDiv = false>
__device__ void layerNormRegs(const typename Storage::T* __restrict__ in,
                              typename Storage::T* __restrict__ out,
                              const typename Storage::T* __restrict__ gamma,
                              const typename Storage::T* __restrict__ beta, size_t rows, size_t cols,
                              float eps) {
    using Sp = Split<kS>;
    using Share = SplitRegs<Storage, kVecs, kPacked, kS, kDense, kOnly>;
    __shared__ Scratch scratch[3];
    __shared__ typename Sp::template Exchange<kVecs> ex;
    const RowIndex ri(rows, kS, kEarly);
    const bool vec = kDense ||
        (cols % Storage::W == 0 && aligned16(in) && aligned16(out) && aligned16(gamma) && aligned16(beta));
    const bool full = Share::full(static_cast<int>(cols));
    Share r;
    Param<Storage, Share, kEarly> g(gamma), b(beta);
    if (ri.live) {
        r.template load<!Share::kMutable>(in + ri.row * cols, cols, vec, 0.0f);
        g.fetch(static_cast<int>(cols), vec);
        b.fetch(static_cast<int>(cols), vec);
    } else {
        r.zero();
    }
    // The norms' sums (see rowSquareSum): mean and variance of the unscaled row, and for rows whose
    // variance sum is out of range, of x 2^-E. Passes 0, 1 (and 3, 4, 5) of packed storage; each
    // reduction alternates exchange buffers and scratch slots (see Split::Exchange, Scratch).
    const float n = static_cast<float>(cols);
    const int c = static_cast<int>(cols);
    constexpr bool kFastDiv = Share::kMutable && !kExactDiv;
    float mean = divByCount<kFastDiv>(  // kMutable: float rows
        rowTotal<Sum, Sp, Share>([&](float t, int i) { return t + r.template at<0>(i); }, ex, 0, scratch[0]), n);
    LaneTotal lane;  // this lane's warp total of q (NP_DECODE_FLAT)
    float* const laneTotal = lane.slot();
    float q = centredSquares<1, Sp>(r, full, c, 1.0f, mean, ex, 1, scratch[2], laneTotal);
    int e = 0;
    float sc = 1.0f;
    const Verdict v = rangeVerdict<kS>(q, scratch[2], eps, laneTotal);
    if (v.block) {
#ifdef NP_DECODE_COLD
        struct Scaled {
            int e;
            float sc, mean, q;
        };
        const Scaled s2 = coldPath([=]() -> Scaled {  // (ex and scratch: __shared__, named, not captured)
            const int e2 = rowExponent<3, Sp>(r, ex, 0, scratch[1]);
            const float sc2 = pow2(-e2);
            const float mean2 = divByCount<kFastDiv>(rowTotal<Sum, Sp, Share>(
                [&](float t, int i) { return fmaf(r.template at<4>(i), sc2, t); }, ex, 1, scratch[0]), n);
            return {e2, sc2, mean2, centredSquares<5, Sp>(r, full, c, sc2, mean2, ex, 0, scratch[2])};
        });
        if (v.self) {
            e = s2.e;
            sc = s2.sc;
            mean = s2.mean;
            q = s2.q;
        }
#else
        const int e2 = rowExponent<3, Sp>(r, ex, 0, scratch[1]);
        const float sc2 = pow2(-e2);
        const float mean2 = divByCount<kFastDiv>(rowTotal<Sum, Sp, Share>(
            [&](float t, int i) { return fmaf(r.template at<4>(i), sc2, t); }, ex, 1, scratch[0]), n);
        const float q2 = centredSquares<5, Sp>(r, full, c, sc2, mean2, ex, 0, scratch[2]);
        if (v.self) {
            e = e2;
            sc = sc2;
            mean = mean2;
            q = q2;
        }
#endif
    }
    const float f = layerNormFactor(divByCount<kFastDiv>(q, n), e, eps);
    if (!ri.live) return;
    typename Storage::T* o = out + ri.row * cols;
    // Float storage (the row as 32 floats) keeps the element-wise copy: in the others the compiler
    // issues all 16 gamma and beta loads at once and spills (91-92% of memcpy against 97%). Rows
    // off the 16-byte grid take the shifted copy (gamma, beta and out a 16-byte access a vector):
    // on an H100, 1 GiB of bfloat16 rows of 4097 columns (4 vectors a thread) ran at 38.7% of
    // memcpy against 23.9% element by element. A kernel that also takes aligned rows (a decode
    // kernel) does so only where a thread holds at most 4 vectors: with 8, ptxas spilled 24-52
    // bytes, which aligned rows then paid too (8192 columns 98.3% against 99.8%). The off-grid
    // prefill kernel (kOnly = kShifted), which aligned rows never take, stores shifted at 8 as well
    // (5121 columns: 38.4% against 22.7%).
    const int mode = Share::copy(c, vec);
    withCopy<Share>(Share::kMutable || (mode == kShifted && kVecs > 4 && kOnly != kShifted) ? kElementwise : mode,
                    [&](auto copy) {
        layerNormWrite<decltype(copy)::value, Storage>(r, o, g, b, sc, mean, f, c, vec);
    });
}

// out = (x * a) * b * gamma, gamma one vector at a time. b is 1 for every row whose largest |x| is
// within 2^+-64 (see normFactor): that copy of the loop skips the product, which would be exact.
template <int kCopy, bool kUnitB, class Storage, class Share, class P>
__device__ __forceinline__ void rmsWrite(const Share& r, typename Storage::T* __restrict__ o, const P& gamma,
                                         NormFactor nf, int cols, bool vec) {
#pragma unroll
    for (int j = 0; j < Share::N / Storage::W; ++j) {
        float g[Storage::W];
        gamma.template get<kCopy>(j, cols, vec, g);
#pragma unroll
        for (int w = 0; w < Storage::W; ++w) {
            const float y = r.template at<2>(j * Storage::W + w) * nf.a;
            g[w] = (kUnitB ? y : y * nf.b) * g[w];
        }
        Share::template storeVec<kCopy>(o, j, cols, vec, g);
    }
}
template <class Share, class Storage, class P>
__device__ __forceinline__ void rmsEpilogue(const Share& r, typename Storage::T* __restrict__ o, const P& gamma,
                                            int cols, NormFactor nf, bool vec) {
    withCopy<Share>(Share::copy(cols, vec), [&](auto copy) {
        constexpr int kCopy = decltype(copy)::value;
        if (nf.b == 1.0f) rmsWrite<kCopy, true, Storage>(r, o, gamma, nf, cols, vec);
        else rmsWrite<kCopy, false, Storage>(r, o, gamma, nf, cols, vec);
    });
}

// RMS norm of the row held in r (fused: r already holds x + residual), written to out.
template <class Storage, class Sp = Split<1>, class Share, class P>
__device__ __forceinline__ void rmsNormHeld(const Share& r, const RowIndex& ri, typename Storage::T* out,
                                            const P& gamma, size_t cols, float eps, bool vec,
                                            Scratch* scratch, typename Sp::template Exchange<Share::V>& ex) {
    const auto total = rowSquareSum<Sp>(r, ex, scratch, eps);
    // The mean square: the division's fast path (divByCount) is exact for the finite sums here
    // (normal, or 0); an infinite one (a row holding inf) stays inf, as with `/`.
    const float n = static_cast<float>(static_cast<int>(cols));
    const float ms = total.s == __int_as_float(0x7f800000) ? total.s : divByCount<true>(total.s, n);
    const NormFactor nf = normFactor(ms, total.e, eps);
    if (!ri.live) return;
    rmsEpilogue<Share, Storage>(r, out + ri.row * cols, gamma, cols, nf, vec);
}

template <class Storage, int kVecs, bool kPacked, bool kEarly = false, int kS = 1, bool kDense = false,
          int kOnly = kAny>
__device__ void rmsNormRegs(const typename Storage::T* __restrict__ in, typename Storage::T* __restrict__ out,
                            const typename Storage::T* __restrict__ gamma, size_t rows, size_t cols,
                            float eps) {
    using Sp = Split<kS>;
    using Share = SplitRegs<Storage, kVecs, kPacked, kS, kDense, kOnly>;
    __shared__ Scratch scratch[2];
    __shared__ typename Sp::template Exchange<kVecs> ex;
    const RowIndex ri(rows, kS, kEarly);
    const bool vec = kDense || (cols % Storage::W == 0 && aligned16(in) && aligned16(out) && aligned16(gamma));
    Share r;
    Param<Storage, Share, kEarly> g(gamma);
    if (ri.live) {
        r.load(in + ri.row * cols, cols, vec, 0.0f);
        g.fetch(static_cast<int>(cols), vec);
    } else {
        r.zero();
    }
    rmsNormHeld<Storage, Sp>(r, ri, out, g, cols, eps, vec, scratch, ex);
}

// Fused add + RMS norm: h = x + residual (rounded to the storage type), residual <- h,
// out = rmsnorm(h) * gamma. residual is read and written in place by the same thread.
template <class Storage, int kVecs, bool kPacked, bool kEarly = false, int kS = 1, bool kDense = false>
__device__ void addRmsNormRegs(const typename Storage::T* __restrict__ in, typename Storage::T* residual,
                               typename Storage::T* __restrict__ out,
                               const typename Storage::T* __restrict__ gamma, size_t rows, size_t cols,
                               float eps) {
    using Sp = Split<kS>;
    using Share = SplitRegs<Storage, kVecs, kPacked, kS, kDense>;
    __shared__ Scratch scratch[2];
    __shared__ typename Sp::template Exchange<kVecs> ex;
    const RowIndex ri(rows, kS, kEarly);
    const bool vec = kDense ||
        (cols % Storage::W == 0 && aligned16(in) && aligned16(out) && aligned16(gamma) && aligned16(residual));
    Share r;
    Param<Storage, Share, kEarly> g(gamma);
    if (ri.live) {
        const typename Storage::T* x = in + ri.row * cols;
        typename Storage::T* res = residual + ri.row * cols;
        // h_j = x_j + res_j, res_j <- h_j, vector by vector. The compiler cannot move a load of res
        // above the store before it (same pointer), so the loads are issued kChunk vectors of x and
        // res at a time first: 2 kChunk 16-byte loads in flight per thread instead of two.
        constexpr int kChunk = kVecs < 4 ? kVecs : 4;
        // kTail: a thread of an aligned row some of whose vectors lie wholly past its end (cols % W
        // == 0, so none lies across it): those are skipped, and hold 0 as the padding does. Without
        // it such threads took the copy below, one round trip per vector, and 2880 bfloat16 columns
        // (a quarter of the threads) ran at 66% of memcpy.
        const auto chunks = [&](auto tail) {
            constexpr bool kTail = decltype(tail)::value;
#pragma unroll
            for (int j0 = 0; j0 < kVecs; j0 += kChunk) {
                typename Storage::V xq[kChunk], rq[kChunk];
#pragma unroll
                for (int k = 0; k < kChunk; ++k) {
                    const int c0 = Share::first(j0 + k);
                    if (!kTail || c0 < static_cast<int>(cols)) {
                        xq[k] = Storage::ldgV(x + c0);
                        rq[k] = Storage::loadV(res + c0);
                    } else {
                        xq[k] = rq[k] = typename Storage::V{};
                    }
                }
#pragma unroll
                for (int k = 0; k < kChunk; ++k) {
                    const int c0 = Share::first(j0 + k);
                    float h[Storage::W], xv[Storage::W];
                    Storage::unpackV(xq[k], xv);
                    Storage::unpackV(rq[k], h);
#pragma unroll
                    for (int w = 0; w < Storage::W; ++w) h[w] = Storage::round(xv[w] + h[w]);
                    if (!kTail || c0 < static_cast<int>(cols)) Storage::putVec(res + c0, h);
                    r.setVec(j0 + k, h);
                }
            }
        };
        if (Share::copy(static_cast<int>(cols), vec) == kAll) {
            chunks(Tag<0>{});
        } else if (kPacked && vec) {  // (unpacked float rows: this copy made ptxas spill)
            chunks(Tag<1>{});
        } else if constexpr (kPacked) {  // off the 16-byte grid (Regs::loadShifted), kChunk vectors at a time again
            // (each lane reads and writes only its own vectors' bytes: see loadShifted; under
            // NP_SHIFTED_WIDE a lane also reads bytes that neighbours may be writing, and drops them)
            const int c = static_cast<int>(cols);
            constexpr int kPair = kChunk < 2 ? kChunk : 2;  // (4 at a time spilled)
#pragma unroll
            for (int j0 = 0; j0 < kVecs; j0 += kPair) {
                uint4 xq[kPair], rq[kPair];
#pragma unroll
                for (int k = 0; k < kPair; ++k) {
                    xq[k] = Share::template loadShifted<true>(x, j0 + k, c, 0u);
                    rq[k] = Share::template loadShifted<false>(res, j0 + k, c, 0u);
                }
#pragma unroll
                for (int k = 0; k < kPair; ++k) {
                    float h[Storage::W], xv[Storage::W];
                    Storage::unpackV(xq[k], xv);
                    Storage::unpackV(rq[k], h);
#pragma unroll
                    for (int w = 0; w < Storage::W; ++w) h[w] = Storage::round(xv[w] + h[w]);
                    Share::storeShifted(res, j0 + k, c, Storage::packRaw(h));
                    r.setVec(j0 + k, h);
                }
            }
        } else {  // unpacked float rows, threads at the ragged edge: element by element where needed
#pragma unroll
            for (int j = 0; j < kVecs; ++j) {
                float h[Storage::W], xv[Storage::W];
                Share::template loadVec<kElementwise>(x, j, cols, vec, 0.0f, xv);
                Share::template loadVec<kElementwise, false>(res, j, cols, vec, 0.0f, h);  // res is written
#pragma unroll
                for (int w = 0; w < Storage::W; ++w) h[w] = Storage::round(xv[w] + h[w]);
                Share::template storeVec<kElementwise>(res, j, cols, vec, h);
                r.setVec(j, h);
            }
        }
        g.fetch(static_cast<int>(cols), vec);  // after the row's loads, which it would delay
    } else {
        r.zero();
    }
    rmsNormHeld<Storage, Sp>(r, ri, out, g, cols, eps, vec, scratch, ex);
}

// --- streaming path (rows wider than the registers hold) ----------------------------------------

template <class Storage>
__device__ void softmaxStream(const typename Storage::T* __restrict__ in,
                              typename Storage::T* __restrict__ out,
                              size_t rows, size_t cols) {
    __shared__ Scratch scratch;
    const RowIndex ri(rows);
    const typename Storage::T* row = in + ri.row * cols;
    Online::T st = Online::identity();
    if (ri.live) {
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const float x = Storage::get(row + c);
            if (x > st.m) {  // a new maximum: rescale what was summed so far (expf(x - x) is 1, or
                             // NaN for x = +inf, as in the register path)
                st.s = (st.m == negInf() ? st.s * 0.0f : st.s * expf(st.m - x)) + expf(x - x);  // keeps a NaN
                st.m = x;
            } else if (x != negInf() || st.m != negInf()) {
                st.s += expf(x - st.m);  // NaN propagates from here
            }
        }
    }
    st = rowReduce<Online>(st, scratch);
    if (!ri.live) return;
    typename Storage::T* o = out + ri.row * cols;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x)
        Storage::put(o + c, expf(Storage::get(row + c) - st.m) / st.s);
}

// Running (e, sum (x 2^-e)^kPow) over this thread's strided elements, e growing with the largest |x|.
template <int kPow>
__device__ __forceinline__ void scaledAccumulate(typename ScaledSum<kPow>::T& st, float x) {
    const int e = scaleExponent(fabsf(x));
    if (e > st.e) {
        st.s = scaleDown(st.s, kPow * (st.e - e));
        st.e = e;
    }
    const float y = x * pow2(-st.e);
    st.s = kPow == 1 ? st.s + y : fmaf(y, y, st.s);
}

template <class Storage>
__device__ void layerNormStream(const typename Storage::T* __restrict__ in,
                                typename Storage::T* __restrict__ out,
                                const typename Storage::T* __restrict__ gamma,
                                const typename Storage::T* __restrict__ beta, size_t rows, size_t cols,
                                float eps) {
    __shared__ Scratch scratch[2];
    const RowIndex ri(rows);
    const typename Storage::T* row = in + ri.row * cols;
    // Pass 1: the scaled sum and its exponent; pass 2: the centred sum of squares (the row is read
    // again, from L2 when it fits there); pass 3 writes. Three reads, one write: the fallback.
    ScaledSum<1>::T st = ScaledSum<1>::identity();
    if (ri.live) {
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x) scaledAccumulate<1>(st, Storage::get(row + c));
    }
    st = rowReduce<ScaledSum<1>>(st, scratch[0]);
    const float n = static_cast<float>(cols);
    const float sc = pow2(-st.e);
    const float mean = st.s / n;
    float q = 0.0f;
    if (ri.live) {
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const float d = fmaf(Storage::get(row + c), sc, -mean);
            q = fmaf(d, d, q);
        }
    }
    q = rowReduce<Sum>(q, scratch[1]);
    const float f = layerNormFactor(q / n, st.e, eps);
    if (!ri.live) return;
    typename Storage::T* o = out + ri.row * cols;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = fmaf(Storage::get(row + c), sc, -mean);
        Storage::put(o + c, fmaf(d * f, Storage::get(gamma + c), Storage::get(beta + c)));
    }
}

template <class Storage, bool kAdd>
__device__ void rmsNormStream(const typename Storage::T* __restrict__ in, typename Storage::T* residual,
                              typename Storage::T* __restrict__ out,
                              const typename Storage::T* __restrict__ gamma, size_t rows, size_t cols,
                              float eps) {
    __shared__ Scratch scratch;
    const RowIndex ri(rows);
    // Fused: pass 1 writes h = x + residual into residual, pass 2 reads h back from there.
    const typename Storage::T* row = (kAdd ? residual : in) + ri.row * cols;
    ScaledSum<2>::T st = ScaledSum<2>::identity();
    if (ri.live) {
        for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float x = Storage::get(in + ri.row * cols + c);
            if (kAdd) {
                x = Storage::round(x + Storage::get(residual + ri.row * cols + c));
                Storage::put(residual + ri.row * cols + c, x);
            }
            scaledAccumulate<2>(st, x);
        }
    }
    st = rowReduce<ScaledSum<2>>(st, scratch);
    const NormFactor nf = normFactor(st.s / static_cast<float>(cols), st.e, eps);
    if (!ri.live) return;
    typename Storage::T* o = out + ri.row * cols;
    for (size_t c = threadIdx.x; c < cols; c += blockDim.x) {
        Storage::put(o + c, Storage::get(row + c) * nf.a * nf.b * Storage::get(gamma + c));
    }
}

// --- cluster path (softmax over rows too wide for one block's registers; sm_90 and later) ---------

#if __CUDA_ARCH__ >= 900
// A thread-block cluster of kCtas blocks (2 to 16) of T threads (256 or 512) holds one row in registers
// (the register path's layout over kCtas x T threads, see ClusterTeam), so a vocabulary-wide row is read
// once and written once by kCtas SMs at a time instead of streamed twice by one. Each block reduces
// its share to online statistics (m_b, s_b = sum of exp(x - m_b)); the kCtas pairs meet through
// distributed shared memory: each block publishes its pair in its own shared memory, one cluster
// barrier makes them visible, and every thread reads them in rank order and merges them in the same
// log2(kCtas)-level tree (Online::merge), so every thread of the cluster holds the same (m, s).
// Not .aligned: the writes before clusterWait branch per thread, and .aligned would need every
// thread of a warp to reach the barrier together.
__device__ __forceinline__ void clusterSync() {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}
__device__ __forceinline__ void clusterArrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void clusterWait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
// *p in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ float loadFromBlock(const float* p, unsigned rank) {
    const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

// The pairs (m_b, s_b) that blocks kB ... kB + kSpan - 1 published, merged as a pairwise tree over
// the ranks (kSpan a power of two; ranks past kCtas are absent): the tree of Online::merge(t[b],
// t[b + step]) for step = 1, 2, 4, ... Depth first, so a thread holds at most log2(kSpan) + 1 pairs:
// 16 pairs loaded at once made ptxas spill.
template <int kCtas, int kB, int kSpan>
__device__ __forceinline__ Online::T clusterTree(const float* published) {
    if constexpr (kSpan == 1) {
        return {loadFromBlock(&published[0], kB), loadFromBlock(&published[1], kB)};
    } else if constexpr (kB + kSpan / 2 >= kCtas) {
        return clusterTree<kCtas, kB, kSpan / 2>(published);
    } else {
        const Online::T left = clusterTree<kCtas, kB, kSpan / 2>(published);
        return Online::merge(left, clusterTree<kCtas, kB + kSpan / 2, kSpan / 2>(published));
    }
}

__host__ __device__ constexpr int powerOfTwoAtLeast(int n) { return n <= 1 ? 1 : 2 * powerOfTwoAtLeast((n + 1) / 2); }

// The row's softmax over a cluster: grid.x = rows x kCtas, block (CLUSTER_THREADS, 1) (256 threads
// for 16-bit storage, 512 for float32: normprops/row_shape.py), cluster r of the grid is
// row r. Each block sums e = exp(x - m_b) with its own max m_b, and the row's s is merged from the
// blocks' sums (rescaled: the online constant rho of the error model). Float registers (kMutable)
// keep each e and write e (exp(m_b - m) / s): one exp per element, and the block's factor is the
// online softmax's rescaling (its exp and its multiplication are within the 10 u that
// docs/tolerances.md gives the ratio of two outputs). Packed 16-bit registers hold only x: they
// write exp(x - m) / s, the register path's expression, with a second exp.
template <class Storage, int kVecs, bool kPacked, int kCtas>
__device__ void softmaxCluster(const typename Storage::T* __restrict__ in, typename Storage::T* __restrict__ out,
                               size_t rows, size_t cols) {
    using Share = Regs<Storage, kVecs, kPacked, ClusterTeam<kCtas>>;
    __shared__ Scratch scratch[2];
    __shared__ float published[2];  // this block's (m_b, s_b), read by every block of the cluster
    const size_t row = blockIdx.x / kCtas;  // < rows: the grid has exactly rows clusters
    const bool vec = cols % Storage::W == 0 && aligned16(in) && aligned16(out);
    Share r;
    r.load(in + row * cols, cols, vec, negInf());
    float mb = negInf();
#pragma unroll
    for (int i = 0; i < r.N; ++i) mb = fmaxf(mb, r.template at<0>(i));
    mb = rowReduce<Max>(mb, scratch[0]);
    // A block that holds only -inf (padding, or a masked stretch) sums exp(x - 0) = 0, NaN kept.
    const float shift = mb == negInf() ? 0.0f : mb;
    float sb = 0.0f;
#pragma unroll
    for (int i = 0; i < r.N; ++i) {
        const float e = expOf<Storage::kFastExp>(r.template at<1>(i) - shift);
        if constexpr (Share::kMutable) r.set(i, e);
        sb += e;
    }
    sb = rowReduce<Sum>(sb, scratch[1]);
    if (threadIdx.x == 0) {
        published[0] = mb;
        published[1] = sb;
    }
    clusterSync();
    const Online::T all = clusterTree<kCtas, 0, powerOfTwoAtLeast(kCtas)>(published);
    clusterArrive();  // this block has read every pair; the writes below overlap the barrier
    // kMutable: the block's factor exp(m_b - m) / s; a block of only -inf holds e = 0 (or NaN from
    // a NaN row, whose s is NaN too), and its factor 0 (NaN where every block is -inf and s is 0).
    const float m = all.m, inv = 1.0f / all.s;
    const float scale = Share::kMutable ? (mb == negInf() ? 0.0f : expf(mb - m)) * inv : inv;
    typename Storage::T* o = out + row * cols;
    const int c = static_cast<int>(cols);
    // The copy is chosen per vector, not once around the loop as in softmaxWrite: the branch keeps each
    // vector's stores between its exps. With one loop per copy, ptxas moved every store after the
    // last exp, and the SM's warps, in step after the cluster barrier, computed and then wrote in
    // bursts: 67% of memcpy against 76% (float32, 65536 columns).
    const int mode = Share::copy(c, vec);
#pragma unroll
    for (int j = 0; j < Share::N / Storage::W; ++j) {
        float v[Storage::W];
        softmaxVec<Share::kMutable, Storage>(r, j, m, scale, v);
        withCopy<Share>(mode, [&](auto copy) { Share::template storeVec<decltype(copy)::value>(o, j, c, vec, v); });
    }
    clusterWait();  // no block leaves while another may still read its pair
}

// --- A/B candidate, off unless -DNP_CLUSTER_PUSH: the pairs pushed, not pulled --------------------
//
// softmaxCluster's row layout and expressions (the sums in another order: the outputs agree within the
// declared bound, not bit for bit), with QuACK's exchange (quack/reduce.py,
// online_softmax_reduce) in place of two block reductions, a cluster barrier, 2 kCtas remote loads a
// thread and a second cluster barrier. Each warp reduces its own pair (m_w, s_w) with two butterflies;
// lanes below kCtas store it with st.async into slot rank x warps + warp of every block of the
// cluster, where the block's transaction barrier counts its bytes (kCtas x warps x 8); each block
// waits on its own barrier only and reads only its own shared memory, so no barrier follows. The
// cluster barrier at the start (arrive before the row's loads, wait before the first store) orders
// every block's mbarrier.init before any st.async to it. Every warp folds the kCtas x warps pairs in
// the same order (lane-local, then butterflies; the merges are commutative bit for bit), so every
// thread of the cluster holds the same (m, s). The sum's tree: the thread's elements in order, a
// 5-level butterfly, a pairwise tree over a lane's ceil(kCtas warps / 32) slots and a 5-level
// butterfly (additions of the zero padding exact): log2(T) + ceil(log2(kCtas)) levels past the
// thread's own, as ErrorModel declares for the cluster path; each s_w is rescaled once (rho).
// tools/sweep_prod.py --variants base,NP_CLUSTER_PUSH times it against softmaxCluster; it has not
// replaced it yet: that waits for a GPU run of the sweep, tools/sanitize.py and the registry hunt.
__device__ __forceinline__ unsigned sharedAddress(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The address of shared location `local` (this block's) in the cluster's block `rank`.
__device__ __forceinline__ unsigned inBlock(unsigned local, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
}

template <class Storage, int kVecs, bool kPacked, int kCtas>
__device__ void softmaxClusterPush(const typename Storage::T* __restrict__ in,
                                   typename Storage::T* __restrict__ out, size_t rows, size_t cols) {
    static_assert(kCtas >= 2 && kCtas <= 16, "st.async needs another block; pairs holds 16 blocks' warps");
    using Share = Regs<Storage, kVecs, kPacked, ClusterTeam<kCtas>>;
    constexpr int kMaxWarps = 16;  // 512 threads (blocks of whole warps: the launcher's 256 or 512)
    constexpr int kPerLane = (kCtas * kMaxWarps + 31) / 32;  // slots a lane folds, at most
    __shared__ alignas(16) float2 pairs[kCtas * kMaxWarps];
    __shared__ alignas(8) unsigned long long landed;  // the transaction barrier of this block's pairs
    const int warps = static_cast<int>(blockDim.x) >> 5;
    const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
    const unsigned bar = sharedAddress(&landed);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kCtas * warps * 8)
                     : "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
    const size_t row = blockIdx.x / kCtas;  // < rows: the grid has exactly rows clusters
    const bool vec = cols % Storage::W == 0 && aligned16(in) && aligned16(out);
    Share r;
    r.load(in + row * cols, cols, vec, negInf());
    float mw = negInf();
#pragma unroll
    for (int i = 0; i < r.N; ++i) mw = fmaxf(mw, r.template at<0>(i));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mw = fmaxf(mw, __shfl_xor_sync(kFull, mw, o));
    // A warp that holds only -inf (padding, or a masked stretch) sums exp(x - 0) = 0, NaN kept.
    const float shift = mw == negInf() ? 0.0f : mw;
    float sw = 0.0f;
#pragma unroll
    for (int i = 0; i < r.N; ++i) {
        const float e = expOf<Storage::kFastExp>(r.template at<1>(i) - shift);
        if constexpr (Share::kMutable) r.set(i, e);
        sw += e;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sw += __shfl_xor_sync(kFull, sw, o);
    asm volatile("barrier.cluster.wait;" ::: "memory");  // every block's barrier is initialised
    if (lane < kCtas) {
        const unsigned slot = sharedAddress(&pairs[clusterRank() * warps + warp]);
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                     ::"r"(inBlock(slot, lane)), "f"(mw), "f"(sw), "r"(inBlock(bar, lane)) : "memory");
    }
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar) : "memory");
    } while (!done);
    const int n = kCtas * warps;
    float m = negInf();
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
        if (lane + 32 * k < n) m = fmaxf(m, pairs[lane + 32 * k].x);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
    float part[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
        const float2 p = lane + 32 * k < n ? pairs[lane + 32 * k] : make_float2(negInf(), 0.0f);
        part[k] = Online::part({p.x, p.y}, m);
    }
#pragma unroll
    for (int step = 1; step < kPerLane; step *= 2) {
#pragma unroll
        for (int k = 0; k + step < kPerLane; k += 2 * step) part[k] += part[k + step];
    }
    float s = part[0];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(kFull, s, o);
    // kMutable: the warp's factor exp(m_w - m) / s, as softmaxCluster's block factor.
    const float inv = 1.0f / s;
    const float scale = Share::kMutable ? (mw == negInf() ? 0.0f : expf(mw - m)) * inv : inv;
    typename Storage::T* o = out + row * cols;
    const int c = static_cast<int>(cols);
    const int mode = Share::copy(c, vec);
#pragma unroll
    for (int j = 0; j < Share::N / Storage::W; ++j) {
        float v[Storage::W];
        softmaxVec<Share::kMutable, Storage>(r, j, m, scale, v);
        withCopy<Share>(mode, [&](auto copy) { Share::template storeVec<decltype(copy)::value>(o, j, c, vec, v); });
    }
}
#endif

// --- entry points: <op>_<dtype>_v<vectors per thread> (v0: streaming), _p<...> for packed 16-bit ---

// Register path: at most 512 threads per block and two blocks per SM, which caps a thread at 64
// registers (32 for the row: 32 float32 values or 64 packed 16-bit ones, and the rest): rows of
// 4096+ columns then keep two blocks, and their loads, in flight on every SM. The streaming path
// runs 1024-thread blocks.
#define NP_BOUNDS(VECS) __launch_bounds__((VECS) == 0 ? 1024 : 512, (VECS) == 0 ? 1 : 2)

// NP_NO_ENTRY_POINTS: the device code above without the kernels below, for a source built on it
// (prod_kept_bad.cu, compiled after this file by normprops/cuda/build.py).
#ifndef NP_NO_ENTRY_POINTS

// One extern "C" kernel per (op, storage, vectors per thread, packing). Each NAME is spelled out
// below, and normprops/cuda/prod.py looks it up by that name.
#define NP_SOFTMAX(NAME, STORAGE, VECS, PACKED)                                                     \
    extern "C" __global__ void NP_BOUNDS(VECS)                                                      \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out, size_t rows,          \
             size_t cols) {                                                                         \
        if constexpr (VECS == 0) softmaxStream<STORAGE>(in, out, rows, cols);                       \
        else softmaxRegs<STORAGE, VECS, PACKED>(in, out, rows, cols);                               \
    }
#define NP_LAYERNORM(NAME, STORAGE, VECS, PACKED) NP_LAYERNORM_ONLY(NAME, STORAGE, VECS, PACKED, kOnGrid)
// ONLY: kOnGrid wherever the launcher sends off-grid rows elsewhere, but kAny for f16 at 8 packed
// vectors: there ptxas spills the kOnGrid build's prologue (8 bytes a thread, which cost every row of
// 65536x8192 1% of memcpy on the H100) and not the kAny build's.
#define NP_LAYERNORM_ONLY(NAME, STORAGE, VECS, PACKED, ONLY)                                        \
    extern "C" __global__ void NP_BOUNDS(VECS)                                                      \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, const STORAGE::T* __restrict__ beta, size_t rows, \
             size_t cols, float eps) {                                                              \
        if constexpr (VECS == 0) layerNormStream<STORAGE>(in, out, gamma, beta, rows, cols, eps);   \
        else layerNormRegs<STORAGE, VECS, PACKED, false, 1, false, ONLY>(in, out, gamma, beta, rows, cols, eps); \
    }
#define NP_RMSNORM(NAME, STORAGE, VECS, PACKED)                                                     \
    extern "C" __global__ void NP_BOUNDS(VECS)                                                      \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, size_t rows, size_t cols, float eps) {           \
        if constexpr (VECS == 0)                                                                    \
            rmsNormStream<STORAGE, false>(in, nullptr, out, gamma, rows, cols, eps);                \
        else rmsNormRegs<STORAGE, VECS, PACKED, false, 1, false, kOnGrid>(in, out, gamma, rows, cols, eps); \
    }
#define NP_ADDRMSNORM(NAME, STORAGE, VECS, PACKED)                                                  \
    extern "C" __global__ void NP_BOUNDS(VECS)                                                      \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* residual, STORAGE::T* __restrict__ out, \
             const STORAGE::T* __restrict__ gamma, size_t rows, size_t cols, float eps) {           \
        if constexpr (VECS == 0)                                                                    \
            rmsNormStream<STORAGE, true>(in, residual, out, gamma, rows, cols, eps);                \
        else addRmsNormRegs<STORAGE, VECS, PACKED>(in, residual, out, gamma, rows, cols, eps);      \
    }

// Rows of 16-bit storage off the 16-byte grid (widths such as 4097, or a pointer off it): the
// packed prefill kernel compiled with only the shifted copy (kOnly = kShifted), launched wherever
// normprops/cuda/prod.py's off_grid says a row leaves the grid; the general prefill kernel of these
// two ops (kOnGrid) then compiles no shifted copy (a launch of another layout that sends it such rows
// gets the element-wise one). Same arithmetic, so the same bits.
#define NP_LAYERNORM_OFF_GRID(NAME, STORAGE, VECS)                                                  \
    extern "C" __global__ void NP_BOUNDS(VECS)                                                      \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, const STORAGE::T* __restrict__ beta, size_t rows, \
             size_t cols, float eps) {                                                              \
        layerNormRegs<STORAGE, VECS, true, false, 1, false, kShifted>(in, out, gamma, beta, rows, cols, eps); \
    }
#define NP_RMSNORM_OFF_GRID(NAME, STORAGE, VECS)                                                    \
    extern "C" __global__ void NP_BOUNDS(VECS)                                                      \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out,                       \
             const STORAGE::T* __restrict__ gamma, size_t rows, size_t cols, float eps) {           \
        rmsNormRegs<STORAGE, VECS, true, false, 1, false, kShifted>(in, out, gamma, rows, cols, eps); \
    }

NP_SOFTMAX(softmax_f32_v0, F32, 0, false)
NP_SOFTMAX(softmax_f32_v1, F32, 1, false)
NP_SOFTMAX(softmax_f32_v2, F32, 2, false)
NP_SOFTMAX(softmax_f32_v4, F32, 4, false)
NP_SOFTMAX(softmax_f32_v8, F32, 8, false)
NP_SOFTMAX(softmax_bf16_v0, BF16, 0, false)
NP_SOFTMAX(softmax_bf16_v1, BF16, 1, false)
NP_SOFTMAX(softmax_bf16_v2, BF16, 2, false)
NP_SOFTMAX(softmax_bf16_v4, BF16, 4, false)
NP_SOFTMAX(softmax_bf16_v8, BF16, 8, false)
NP_SOFTMAX(softmax_f16_v0, F16, 0, false)
NP_SOFTMAX(softmax_f16_v1, F16, 1, false)
NP_SOFTMAX(softmax_f16_v2, F16, 2, false)
NP_SOFTMAX(softmax_f16_v4, F16, 4, false)
NP_SOFTMAX(softmax_f16_v8, F16, 8, false)
NP_SOFTMAX(softmax_bf16_p4, BF16, 4, true)
NP_SOFTMAX(softmax_bf16_p8, BF16, 8, true)
NP_SOFTMAX(softmax_f16_p4, F16, 4, true)
NP_SOFTMAX(softmax_f16_p8, F16, 8, true)

NP_LAYERNORM(layernorm_f32_v0, F32, 0, false)
NP_LAYERNORM(layernorm_f32_v1, F32, 1, false)
NP_LAYERNORM(layernorm_f32_v2, F32, 2, false)
NP_LAYERNORM(layernorm_f32_v4, F32, 4, false)
NP_LAYERNORM(layernorm_f32_v8, F32, 8, false)
NP_LAYERNORM(layernorm_bf16_v0, BF16, 0, false)
NP_LAYERNORM(layernorm_bf16_v1, BF16, 1, false)
NP_LAYERNORM(layernorm_bf16_v2, BF16, 2, false)
NP_LAYERNORM(layernorm_bf16_v4, BF16, 4, false)
NP_LAYERNORM(layernorm_bf16_v8, BF16, 8, false)
NP_LAYERNORM(layernorm_f16_v0, F16, 0, false)
NP_LAYERNORM(layernorm_f16_v1, F16, 1, false)
NP_LAYERNORM(layernorm_f16_v2, F16, 2, false)
NP_LAYERNORM(layernorm_f16_v4, F16, 4, false)
NP_LAYERNORM(layernorm_f16_v8, F16, 8, false)
NP_LAYERNORM(layernorm_bf16_p4, BF16, 4, true)
NP_LAYERNORM(layernorm_bf16_p8, BF16, 8, true)
NP_LAYERNORM(layernorm_f16_p4, F16, 4, true)
NP_LAYERNORM_ONLY(layernorm_f16_p8, F16, 8, true, kAny)
NP_LAYERNORM_OFF_GRID(layernorm_bf16_p4_sh, BF16, 4)
NP_LAYERNORM_OFF_GRID(layernorm_bf16_p8_sh, BF16, 8)
NP_LAYERNORM_OFF_GRID(layernorm_f16_p4_sh, F16, 4)
NP_LAYERNORM_OFF_GRID(layernorm_f16_p8_sh, F16, 8)

NP_RMSNORM(rmsnorm_f32_v0, F32, 0, false)
NP_RMSNORM(rmsnorm_f32_v1, F32, 1, false)
NP_RMSNORM(rmsnorm_f32_v2, F32, 2, false)
NP_RMSNORM(rmsnorm_f32_v4, F32, 4, false)
NP_RMSNORM(rmsnorm_f32_v8, F32, 8, false)
NP_RMSNORM(rmsnorm_bf16_v0, BF16, 0, false)
NP_RMSNORM(rmsnorm_bf16_v1, BF16, 1, false)
NP_RMSNORM(rmsnorm_bf16_v2, BF16, 2, false)
NP_RMSNORM(rmsnorm_bf16_v4, BF16, 4, false)
NP_RMSNORM(rmsnorm_bf16_v8, BF16, 8, false)
NP_RMSNORM(rmsnorm_f16_v0, F16, 0, false)
NP_RMSNORM(rmsnorm_f16_v1, F16, 1, false)
NP_RMSNORM(rmsnorm_f16_v2, F16, 2, false)
NP_RMSNORM(rmsnorm_f16_v4, F16, 4, false)
NP_RMSNORM(rmsnorm_f16_v8, F16, 8, false)
NP_RMSNORM(rmsnorm_bf16_p4, BF16, 4, true)
NP_RMSNORM(rmsnorm_bf16_p8, BF16, 8, true)
NP_RMSNORM(rmsnorm_f16_p4, F16, 4, true)
NP_RMSNORM(rmsnorm_f16_p8, F16, 8, true)
NP_RMSNORM_OFF_GRID(rmsnorm_bf16_p4_sh, BF16, 4)
NP_RMSNORM_OFF_GRID(rmsnorm_bf16_p8_sh, BF16, 8)
NP_RMSNORM_OFF_GRID(rmsnorm_f16_p4_sh, F16, 4)
NP_RMSNORM_OFF_GRID(rmsnorm_f16_p8_sh, F16, 8)

NP_ADDRMSNORM(addrmsnorm_f32_v0, F32, 0, false)
NP_ADDRMSNORM(addrmsnorm_f32_v1, F32, 1, false)
NP_ADDRMSNORM(addrmsnorm_f32_v2, F32, 2, false)
NP_ADDRMSNORM(addrmsnorm_f32_v4, F32, 4, false)
NP_ADDRMSNORM(addrmsnorm_f32_v8, F32, 8, false)
NP_ADDRMSNORM(addrmsnorm_bf16_v0, BF16, 0, false)
NP_ADDRMSNORM(addrmsnorm_bf16_v1, BF16, 1, false)
NP_ADDRMSNORM(addrmsnorm_bf16_v2, BF16, 2, false)
NP_ADDRMSNORM(addrmsnorm_bf16_v4, BF16, 4, false)
NP_ADDRMSNORM(addrmsnorm_bf16_v8, BF16, 8, false)
NP_ADDRMSNORM(addrmsnorm_f16_v0, F16, 0, false)
NP_ADDRMSNORM(addrmsnorm_f16_v1, F16, 1, false)
NP_ADDRMSNORM(addrmsnorm_f16_v2, F16, 2, false)
NP_ADDRMSNORM(addrmsnorm_f16_v4, F16, 4, false)
NP_ADDRMSNORM(addrmsnorm_f16_v8, F16, 8, false)
NP_ADDRMSNORM(addrmsnorm_bf16_p4, BF16, 4, true)
NP_ADDRMSNORM(addrmsnorm_bf16_p8, BF16, 8, true)
NP_ADDRMSNORM(addrmsnorm_f16_p4, F16, 4, true)
NP_ADDRMSNORM(addrmsnorm_f16_p8, F16, 8, true)

// The cluster path: <op>_<dtype>_c<blocks per row><v|p>8, softmax only, compiled for sm_90 and
// later (normprops/cuda/prod.py launches it only there). Clusters of more than 8 blocks are
// non-portable: the launcher allows them per function (cuFuncSetAttribute) where the device runs them.
#if __CUDA_ARCH__ >= 900
// A/B candidates for tools/sweep_prod.py (--variants base,NP_CLUSTER_PUSH,NP_CLUSTER_HELD16): neither is
// defined in a product build. NP_CLUSTER_PUSH: softmaxClusterPush's exchange. NP_CLUSTER_HELD16: 16-bit
// rows held as floats (one exp an element, as float32's), at up to 128 registers a thread (one
// 512-thread block, or two of 256, per SM).
// The push exchange keeps both passes' packed float16 elements widened at once (no block barrier
// between them): 88-92 bytes a thread spilled at 64 registers, none at 128 (one block of 512 per SM).
template <class Storage, bool kPacked>
struct ClusterBlocksPerSm {
#ifdef NP_CLUSTER_HELD16
    static constexpr int value = Storage::W == 8 ? 1 : 2;
#else
    static constexpr int value = 2;
#endif
};
#if defined(NP_CLUSTER_PUSH) && !defined(NP_CLUSTER_HELD16)
template <>
struct ClusterBlocksPerSm<F16, true> {
    static constexpr int value = 1;
};
#endif
#ifdef NP_CLUSTER_PUSH
#define NP_CLUSTER_BODY softmaxClusterPush
#else
#define NP_CLUSTER_BODY softmaxCluster
#endif
#ifdef NP_CLUSTER_HELD16
#define NP_CLUSTER_PACKED(PACKED) false
#else
#define NP_CLUSTER_PACKED(PACKED) PACKED
#endif
#define NP_SOFTMAX_CLUSTER(NAME, STORAGE, CTAS, PACKED)                                             \
    extern "C" __global__ void __cluster_dims__(CTAS, 1, 1)                                         \
        __launch_bounds__(512, (ClusterBlocksPerSm<STORAGE, PACKED>::value))                        \
        NAME(const STORAGE::T* __restrict__ in, STORAGE::T* __restrict__ out, size_t rows,          \
             size_t cols) {                                                                         \
        NP_CLUSTER_BODY<STORAGE, 8, NP_CLUSTER_PACKED(PACKED), CTAS>(in, out, rows, cols);          \
    }
NP_SOFTMAX_CLUSTER(softmax_f32_c2v8, F32, 2, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c3v8, F32, 3, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c4v8, F32, 4, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c5v8, F32, 5, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c6v8, F32, 6, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c8v8, F32, 8, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c10v8, F32, 10, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c12v8, F32, 12, false)
NP_SOFTMAX_CLUSTER(softmax_f32_c16v8, F32, 16, false)
NP_SOFTMAX_CLUSTER(softmax_bf16_c2p8, BF16, 2, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c3p8, BF16, 3, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c4p8, BF16, 4, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c5p8, BF16, 5, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c6p8, BF16, 6, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c8p8, BF16, 8, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c10p8, BF16, 10, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c12p8, BF16, 12, true)
NP_SOFTMAX_CLUSTER(softmax_bf16_c16p8, BF16, 16, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c2p8, F16, 2, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c3p8, F16, 3, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c4p8, F16, 4, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c5p8, F16, 5, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c6p8, F16, 6, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c8p8, F16, 8, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c10p8, F16, 10, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c12p8, F16, 12, true)
NP_SOFTMAX_CLUSTER(softmax_f16_c16p8, F16, 16, true)
#endif
#endif  // NP_NO_ENTRY_POINTS
