/*
 * Device helpers shared by the forward, backward and finalize kernels:
 * dtype conversion (fp32 math, round-to-nearest-even stores), vector loads and
 * stores of VEC elements of a tensor whose dtype is known at compile time
 * (the activation dtype TX) or only at run time (the weight, residual and
 * y/dy groups, which may be TX or fp32), and the row all-reduce (warp
 * shuffles, shared memory across warps, distributed shared memory across the
 * CTAs of a cluster on sm_90).
 *
 * Every reduction here is deterministic: the same inputs give the same bits,
 * and every thread of a row ends with the identical value.
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <stdint.h>
#include <type_traits>

#include "kernel_params.h"

namespace fn {

namespace cg = cooperative_groups;

/* Input pipeline depth: rows in flight while one is reduced and written
 * (FN_STAGES - 1 of them), and its largest size per CTA in shared memory.
 * Two stages measured as fast as three or faster (bf16 bwd N=1024 +4%,
 * LayerNorm fwd N=2048 +3%, H200, tuning step 15) and leave shared memory
 * for the weight cache and more CTAs. */
constexpr int FN_STAGES = 2;
/* The forward's PLAIN tiles over a cluster stage one more row where that
 * measured faster (launch_rows in norm_fwd.cu says where): each row there
 * waits on the cluster's slowest CTA in the exchange, which one row in
 * flight per CTA did not always cover. */
constexpr int FN_DEEP_STAGES = 3;
/* The backward's ODD tile (norm_bwd.cu): staged 16-byte chunks per input
 * and stage for the edge elements of a row off a 16-byte boundary, one per
 * lane that holds one (at most 2 * (VEC - 1): 14 for 16-bit rows). */
constexpr int FN_ODD_EDGE_SLOTS = 16;
constexpr size_t FN_MAX_STAGE_BYTES = 96 * 1024;
/* The stages' cap for a CTA of `threads` over a cluster of `cluster`:
 * FN_MAX_STAGE_BYTES keeps CTAs that share an SM resident. Stages past it at
 * 512 threads are over 96 bytes a thread a stage, which the tiles also hold
 * or unpack in registers (16 fp32 values a thread and more, up to 128
 * registers): such a CTA is alone on its SM by its registers, and its stages
 * may take the shared memory it would leave idle (the backward's fp32 16 x
 * 512 x 16 and the forward's fp32 16 x 512 x 32 tiles, 128 KiB of stages;
 * docs/perf.md step 99). */
__host__ __device__ constexpr size_t stage_cap(int threads, int cluster, int smem_max)
{
    return threads >= 512 && cluster > 1 ? (size_t)smem_max : FN_MAX_STAGE_BYTES;
}
/* The SHIFT kernels (rows off a 16-byte boundary) wait for a whole stage
 * and then a barrier before a row starts (a vector spans two threads'
 * chunks): one more stage keeps two rows in flight during that wait. */
constexpr int FN_SHIFT_STAGES = 3;

/* Vectors per thread that the two-pass forward loads ahead of their use
 * (for_each_column_batched). Measured (H200, against one): 2 vectors +16% at
 * N = 4097 bf16 and up to +14% for fp32, within 3% elsewhere, at the same
 * two 512-thread CTAs per SM; 4 vectors needed one CTA per SM (112
 * registers) and lost 20-40%. The backward lost 4-9% with 2 and keeps one. */
constexpr int TWO_PASS_FWD_BATCH = 2;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* The fusednorm_dtype that a C++ type stands for. */
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int value = FN_DT_F32; };
template <> struct dtype_of<__half> { static constexpr int value = FN_DT_F16; };
template <> struct dtype_of<__nv_bfloat16> { static constexpr int value = FN_DT_BF16; };

/* The elements of a 16-byte (or 8-byte) raw vector of T as fp32. bf16 is the
 * top half of an fp32, so each element is one instruction: the word shifted
 * left (element 2j, the low half) or masked (element 2j+1). Through
 * __bfloat162float nvcc spent two per high element (PRMT, then a shift:
 * ncu counted 8 such instructions per element in the bf16 backward). */
template <typename T, int N, typename Raw>
__device__ __forceinline__ void unpack_raw(const Raw &raw, float *out)
{
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        const unsigned *w = reinterpret_cast<const unsigned *>(&raw);
        #pragma unroll
        for (int j = 0; j < N / 2; j++) {
            out[2 * j] = __uint_as_float(w[j] << 16);
            out[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        }
    } else {
        const T *e = reinterpret_cast<const T *>(&raw);
        #pragma unroll
        for (int j = 0; j < N; j++) out[j] = to_f32(e[j]);
    }
}

/* A 16-byte global load with an L1 policy: FN_L1_KEEP (evict_last) for a row
 * that will be read again soon, FN_L1_DROP (evict_first) for its last read,
 * FN_L1_NONE (no_allocate) for data that should not take L1 from them (plain
 * loads measured the same as evict_last).
 * The streaming forward (norm_fwd.cu) reads each row once per statistic and
 * once for the output; with these policies the re-reads hit L1. */
enum { FN_L1_KEEP = 1, FN_L1_DROP = 2, FN_L1_NONE = 3 };
template <int L1>
__device__ __forceinline__ uint4 ld_global16(const void *a)
{
    uint4 r;
    if constexpr (L1 == FN_L1_KEEP)
        asm volatile("ld.global.L1::evict_last.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(a));
    else if constexpr (L1 == FN_L1_NONE)
        asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(a));
    else
        asm volatile("ld.global.L1::evict_first.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(a));
    return r;
}

/* The L2 policy evict_last (createpolicy, sm_80+) for loads that take it
 * (ld_global16_l2): lines so read leave L2 after the others. The held
 * forward reads x (once) and the weight (every row) so: the same DRAM bytes
 * (ncu: 537 MB read at N = 8192 bf16 with or without it) in 5-8% less time
 * (docs/perf.md, step 57). */
__device__ __forceinline__ uint64_t l2_evict_last_policy()
{
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
/* ld_global16 with an L2 cache-hint policy (l2_evict_last_policy). */
template <int L1>
__device__ __forceinline__ uint4 ld_global16_l2(const void *a, uint64_t pol)
{
    uint4 r;
    if constexpr (L1 == FN_L1_KEEP)
        asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(a), "l"(pol));
    else if constexpr (L1 == FN_L1_NONE)
        asm volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(a), "l"(pol));
    else
        asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(a), "l"(pol));
    return r;
}

/* Load VEC consecutive elements of type T starting at element i (i a multiple of
 * VEC; base and row stride aligned when the planner chose VEC > 1). */
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T *__restrict__ p, int64_t i, float (&out)[VEC])
{
    constexpr int BYTES = VEC * (int)sizeof(T);
    if constexpr (VEC == 1) {
        out[0] = to_f32(p[i]);
    } else if constexpr (BYTES % 16 == 0) {
        #pragma unroll
        for (int c = 0; c < BYTES / 16; c++) {
            const uint4 raw = *reinterpret_cast<const uint4 *>(p + i + c * (16 / sizeof(T)));
            unpack_raw<T, 16 / (int)sizeof(T)>(raw, out + c * (16 / sizeof(T)));
        }
    } else {
        static_assert(BYTES % 8 == 0, "vector of 8 or 16 bytes expected");
        const uint2 raw = *reinterpret_cast<const uint2 *>(p + i);
        unpack_raw<T, VEC>(raw, out);
    }
}

/* Elements 2j and 2j+1 of v as one 32-bit word (element 2j in the low half),
 * rounded to nearest even. Vector stores are built from such words: a uint4
 * filled through a punned array of 16-bit elements made nvcc split each
 * 16-byte store into four 4-byte ones (seen in the PTX: st.global.v2.u16). */
template <typename T> __device__ __forceinline__ unsigned pack_word(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack_word<__half>(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return (unsigned)__half_as_ushort(h.x) | ((unsigned)__half_as_ushort(h.y) << 16);
}
template <> __device__ __forceinline__ unsigned pack_word<__nv_bfloat16>(float lo, float hi)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return (unsigned)__bfloat16_as_ushort(h.x) | ((unsigned)__bfloat16_as_ushort(h.y) << 16);
}
/* Word w of the 16-byte (or 8-byte) vector holding v[0..]: fp32 one element
 * per word, 16-bit types two. */
template <typename T, int VEC> __device__ __forceinline__ unsigned vec_word(const float (&v)[VEC], int w)
{
    if constexpr (sizeof(T) == 4) return __float_as_uint(v[w]);
    else return pack_word<T>(v[2 * w], v[2 * w + 1]);
}

/* A 16-byte (8-byte) global store that the optimizer keeps whole: where the
 * two branches of store_dyn (fp32 or 16-bit) stored to the same address,
 * nvcc sank the common first 16 bytes below the branch as four 4-byte
 * stores. The asm cannot be merged; "memory" keeps it ordered with the
 * kernel's other accesses (y may alias x). */
__device__ __forceinline__ void st_global16(void *p, uint4 v)
{
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ void st_global8(void *p, uint2 v)
{
    asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T *__restrict__ p, int64_t i, const float (&v)[VEC])
{
    constexpr int BYTES = VEC * (int)sizeof(T);
    constexpr int PER_WORD = 4 / (int)sizeof(T); /* elements per 32-bit word */
    if constexpr (VEC == 1) {
        p[i] = from_f32<T>(v[0]);
    } else if constexpr (BYTES % 16 == 0) {
        #pragma unroll
        for (int c = 0; c < BYTES / 16; c++) {
            constexpr int W = 4; /* words per 16 bytes */
            const int w0 = c * W;
            const uint4 raw = make_uint4(vec_word<T, VEC>(v, w0), vec_word<T, VEC>(v, w0 + 1),
                                         vec_word<T, VEC>(v, w0 + 2), vec_word<T, VEC>(v, w0 + 3));
            st_global16(p + i + c * W * PER_WORD, raw);
        }
    } else {
        static_assert(BYTES == 8, "vector of 8 or 16 bytes expected");
        st_global8(p + i, make_uint2(vec_word<T, VEC>(v, 0), vec_word<T, VEC>(v, 1)));
    }
}

/* A tensor whose dtype is either the activation dtype TX or fp32, decided at
 * run time (uniform across the grid, so the branch costs no divergence). When
 * TX is fp32 the choice collapses at compile time. */
template <typename TX, int VEC>
__device__ __forceinline__ void load_dyn(const void *p, int dt, int64_t i, float (&out)[VEC])
{
    if (sizeof(TX) == 4 || dt == FN_DT_F32) load_vec<float, VEC>((const float *)p, i, out);
    else load_vec<TX, VEC>((const TX *)p, i, out);
}

template <typename TX, int VEC>
__device__ __forceinline__ void store_dyn(void *p, int dt, int64_t i, const float (&v)[VEC])
{
    if (sizeof(TX) == 4 || dt == FN_DT_F32) store_vec<float, VEC>((float *)p, i, v);
    else store_vec<TX, VEC>((TX *)p, i, v);
}

/* Scalar load/store for any dtype (finalize kernel, fallbacks). */
__device__ __forceinline__ float load_any(const void *p, int dt, int64_t i)
{
    if (dt == FN_DT_F32) return ((const float *)p)[i];
    if (dt == FN_DT_F16) return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}
__device__ __forceinline__ void store_any(void *p, int dt, int64_t i, float v)
{
    if (dt == FN_DT_F32) ((float *)p)[i] = v;
    else if (dt == FN_DT_F16) ((__half *)p)[i] = __float2half_rn(v);
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
}

/* rstd exactly as the contract says: IEEE sqrt and division (no rsqrtf). */
__device__ __forceinline__ float rstd_of_var(float var, float eps) { return 1.0f / sqrtf(var + eps); }
__device__ __forceinline__ float rstd_of(float sumsq, float n, float eps) { return rstd_of_var(sumsq / n, eps); }

/* Shared scratch for row reductions: two buffers used alternately, so each
 * reduction needs one barrier (a thread can only write buffer b again after
 * every thread passed the barrier of the reduction in between). */
struct RowReduceSmem {
    float warp[2][32][2]; /* [buffer][warp in block][value] */
    union {
        float cluster[2][32][2]; /* [buffer][row in block][value]: read by the cluster's CTAs */
        struct {                 /* the backward's cluster exchange (see below) */
            float slot[2][16][2];      /* [buffer][source CTA's rank][value] */
            unsigned long long bar[2]; /* the mbarrier of each buffer (cluster_xchg_init) */
        } x;
    };
};

/* ---- the cluster exchange (sm_90) -----------------------------------------
 * A row over a cluster of C CTAs needs each reduction's C CTA sums in every
 * CTA. Read from the others' shared memory, that takes a cluster barrier per
 * reduction, and its arrive (release semantics) waits until every global
 * store the CTA issued before it is acknowledged: in the persistent backward
 * that is the last row's dx, each row (ncu, docs/perf.md step 89: ERRBAR the
 * kernel's first stall). The exchange pushes instead: each CTA stores its sum
 * into every other CTA's slot [buffer][its rank] with st.async, which counts
 * its bytes on the receiver's mbarrier of that buffer; a CTA waits on its own
 * mbarrier alone, and no global store is waited for. One row per CTA of whole
 * warps (tpr == blockDim.x >= 32; the backend plans no other cluster for the
 * backward, and fn_launch_bwd_rows refuses one), at most 16 CTAs (the slots;
 * the senders are lanes 1..C-1 of warp 0). The two buffers alternate as in row_allreduce: a CTA stores
 * into buffer b for reduction k + 2 only after it received every CTA's sum
 * of reduction k + 1, which each CTA sends after the CTA barrier of k + 1,
 * that is after all its threads read their buffer b of reduction k. The
 * mbarrier of buffer b completes one phase every other reduction; its
 * parity is kept in bits 1 and 2 of row_allreduce's buf. */
/* a shared-memory address as the 32-bit shared::cta address that PTX's
 * shared-memory instructions take (cp.async, mbarrier, mapa) */
__device__ __forceinline__ unsigned smem_addr(const void *smem) { return (unsigned)__cvta_generic_to_shared(smem); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* a shared::cta address of this CTA mapped to the same offset in CTA `rank` */
__device__ __forceinline__ unsigned xchg_remote(unsigned a, int rank)
{
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
#endif

/* Sets up the exchange's mbarriers; every thread of every CTA of the cluster
 * calls it once, before the first row_allreduce (a cluster barrier: no CTA
 * may store into another's mbarrier before it is initialized). */
__device__ __forceinline__ void cluster_xchg_init(RowReduceSmem &sm, int cluster_size)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster_size > 1) {
        /* Slots past the cluster's ranks stay zero: row_allreduce adds a
         * fixed count of them (adding +0.0f leaves every sum's bits as they were). */
        if (threadIdx.x < 2 * 16 * 2) (&sm.x.slot[0][0][0])[threadIdx.x] = 0.0f;
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&sm.x.bar[0])) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&sm.x.bar[1])) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        cg::this_cluster().sync();
    }
#else
    (void)sm, (void)cluster_size;
#endif
}

/* bar.sync on barrier id (1..15; 0 is __syncthreads') for nthreads threads,
 * a multiple of 32: the warps of one row slice. */
__device__ __forceinline__ void row_barrier(int id, int nthreads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

/* Adds NV values over aligned groups of `width` lanes (a power of two up to
 * 32) by a butterfly: every lane of a group ends with the same bits (each
 * step adds the same two operands on both lanes of a pair). */
template <int NV>
__device__ __forceinline__ void lanes_sum(float (&v)[NV], int width)
{
    for (int off = width >> 1; off > 0; off >>= 1)
        #pragma unroll
        for (int i = 0; i < NV; i++) v[i] += __shfl_xor_sync(0xffffffffu, v[i], off);
}

/* The exchange's sum (row_allreduce): the first R slots of one buffer added
 * in rank order, unrolled, two values a load. Slots of ranks past the
 * cluster hold +0.0f (cluster_xchg_init), so R may exceed the cluster: a
 * loop over the run-time cluster size cost LayerNorm's forward over 8 CTAs
 * about 40 instructions a row and thread (two loops, their branches). */
template <int NV, int R>
__device__ __forceinline__ void xchg_add(float (&v)[NV], const float (*slot)[2])
{
    float s[NV];
    #pragma unroll
    for (int i = 0; i < NV; i++) s[i] = 0.0f;
    #pragma unroll
    for (int r = 0; r < R; r++) {
        if constexpr (NV == 2) {
            const float2 t = *reinterpret_cast<const float2 *>(slot[r]);
            s[0] += t.x;
            s[1] += t.y;
        } else {
            s[0] += slot[r][0];
        }
    }
    #pragma unroll
    for (int i = 0; i < NV; i++) v[i] = s[i];
}

/* xchg_add with R the cluster size rounded up to 4, 8 or 16. */
template <int NV>
__device__ __forceinline__ void xchg_add_cluster(float (&v)[NV], const float (*slot)[2], int cluster_size)
{
    if (cluster_size <= 4) xchg_add<NV, 4>(v, slot);
    else if (cluster_size <= 8) xchg_add<NV, 8>(v, slot);
    else xchg_add<NV, 16>(v, slot);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* The exchange's send: v is the CTA's sum in every thread; thread 0 keeps
 * it in its own slot `mine` (of the buffer whose mbarrier is at bar) and
 * arrives there expecting the others' bytes, threads 1..C-1 store it into
 * CTA (rank + thread) mod C's slot, counted on that CTA's mbarrier. */
template <int NV>
__device__ __forceinline__ void xchg_send(const float (&v)[NV], float *mine, unsigned bar, int me, int cluster_size)
{
    if (threadIdx.x == 0) {
        #pragma unroll
        for (int i = 0; i < NV; i++) mine[i] = v[i];
        asm volatile("{\n\t.reg .b64 st;\n\t"
                     "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(bar),
                     "r"((unsigned)((cluster_size - 1) * NV * 4))
                     : "memory");
    } else if (threadIdx.x < (unsigned)cluster_size) {
        int to = me + (int)threadIdx.x;
        if (to >= cluster_size) to -= cluster_size;
        const unsigned slot = xchg_remote(smem_addr(mine), to), rbar = xchg_remote(bar, to);
        #pragma unroll
        for (int i = 0; i < NV; i++)
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(slot + 4u * i),
                         "r"(__float_as_uint(v[i])), "r"(rbar)
                         : "memory");
    }
}

/* The exchange's wait for the phase of parity `parity` of the mbarrier at
 * bar. It acquires at CTA scope: what it waits for is the others' st.async
 * into this CTA's own shared memory, complete when the mbarrier's phase is
 * (as a TMA load's). A cluster-scope acquire also invalidated the SM's L1
 * (CCTL.IVALL) on every reduction: the forward's most stalled instruction
 * (ncu, docs/perf.md step 100), for global data that no reader here takes
 * from L1. */
__device__ __forceinline__ void xchg_wait(unsigned bar, unsigned parity)
{
    asm volatile("{\n\t.reg .pred done;\n\t"
                 "XCHG_WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra XCHG_WAIT_%=;\n\t}" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
#endif

/* Sum NV values over the threads of one row slice (tpr threads: sub-warp
 * groups aligned to powers of two, or whole warps), then over the cluster's
 * CTAs. Every thread of the block must call it (barriers inside: the row's
 * own warps, or the whole cluster). XCHG: over the cluster by the exchange
 * (the kernel called cluster_xchg_init), else through the others' shared
 * memory and a cluster barrier. buf: bit 0 the buffer; with XCHG, bits 1
 * and 2 the phases of the exchange's mbarriers. XCHG_UNROLLED = false: the
 * exchange's sum as a loop, for kernels compiled with the exchange that never
 * launch over a cluster, where the unrolled sum's code alone cost spills (the
 * backward's 80-register LayerNorm tiles of several rows a CTA: 68 bytes). */
template <int NV, bool XCHG = false, bool XCHG_UNROLLED = true, bool WARP32 = false>
__device__ __forceinline__ void row_allreduce(float (&v)[NV], RowReduceSmem &sm, int &buf, int tpr, int sub,
                                              int cluster_size)
{
    static_assert(!XCHG || NV <= 2, "the exchange's slots hold 2 values");
    const int b = buf & 1;
    if (WARP32 && tpr == 32) {
        lanes_sum(v, 32); /* WARP32: a warp a row's tree unrolled (the same adds in the same order) */
    } else if (tpr <= 32) {
        lanes_sum(v, tpr);
    } else {
        lanes_sum(v, 32);
        const int warp = threadIdx.x >> 5, wpr = tpr >> 5;
        if ((threadIdx.x & 31) == 0)
            #pragma unroll
            for (int i = 0; i < NV; i++) sm.warp[b][warp][i] = v[i];
        /* Only this row's warps meet: with several rows per CTA, each row
         * waits for its own warps (named barrier 1 + sub), not the CTA's. */
        if (tpr == (int)blockDim.x) __syncthreads();
        else row_barrier(1 + sub, tpr);
        /* The row's wpr warp sums (wpr <= 16), added by a butterfly: lane l
         * reads slot l mod P (P: wpr rounded up to a power of two; zero past
         * wpr), so every group of P lanes of every warp of the row adds the
         * same values in the same order and ends with the same bits. One
         * shared load and log2(P) shuffles instead of a loop of wpr loads. */
        int P = 1;
        while (P < wpr) P <<= 1;
        const int l = threadIdx.x & (P - 1);
        #pragma unroll
        for (int i = 0; i < NV; i++) v[i] = l < wpr ? sm.warp[b][sub * wpr + l][i] : 0.0f;
        lanes_sum(v, P);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (XCHG && cluster_size > 1) {
        /* the exchange (see cluster_xchg_init) */
        const int me = (int)cg::this_cluster().block_rank();
        const unsigned bar = smem_addr(&sm.x.bar[b]);
        __syncwarp(); /* tpr == 32: this warp's reads of the last reduction precede the stores */
        xchg_send<NV>(v, sm.x.slot[b][me], bar, me, cluster_size);
        xchg_wait(bar, ((unsigned)buf >> (1 + b)) & 1u);
        buf ^= 2 << b; /* the next phase of buffer b */
        /* every CTA adds the C sums in rank order: the same bits everywhere */
        if constexpr (XCHG_UNROLLED) {
            xchg_add_cluster<NV>(v, sm.x.slot[b], cluster_size);
        } else { /* a kernel that compiles the exchange but never runs it (see XCHG_UNROLLED) */
            #pragma unroll
            for (int i = 0; i < NV; i++) {
                float s = 0.0f;
                for (int r = 0; r < cluster_size; r++) s += sm.x.slot[b][r][i];
                v[i] = s;
            }
        }
    } else if (!XCHG && cluster_size > 1) {
        cg::cluster_group cl = cg::this_cluster();
        if ((threadIdx.x % tpr) == 0)
            #pragma unroll
            for (int i = 0; i < NV; i++) sm.cluster[b][sub][i] = v[i];
        cl.sync();
        if (tpr >= 32 && (cluster_size & (cluster_size - 1)) == 0) {
            /* Whole warps per row: lane l reads CTA l mod P's sum (P: the
             * cluster size, a power of two up to 16), and a butterfly adds
             * them: one distributed-shared load per thread instead of one
             * per CTA, the same bits in every warp (as above). */
            const int l = threadIdx.x & (cluster_size - 1);
            #pragma unroll
            for (int i = 0; i < NV; i++) v[i] = *cl.map_shared_rank(&sm.cluster[b][sub][i], l);
            lanes_sum(v, cluster_size);
        } else {
            #pragma unroll
            for (int i = 0; i < NV; i++) {
                float s = 0.0f;
                for (int r = 0; r < cluster_size; r++) s += *cl.map_shared_rank(&sm.cluster[b][sub][i], r);
                v[i] = s;
            }
        }
    }
#else
    (void)cluster_size;
#endif
    buf ^= 1;
}

/* ---- the exchange in two halves (the forward's LAG tiles) -----------------
 * row_allreduce's exchange posts a row's sums and waits for the cluster's at
 * once, so each row waits out the cluster's slowest CTA with nothing to do.
 * Split, a CTA posts row i + 1's sums before it waits for row i's, and
 * normalizes row i while row i + 1's cross the cluster. Reduction `seq`
 * (one a row, posted in order, each CTA alternating post(seq + 1) and
 * wait(seq)) goes into buffer seq % 4, whose mbarrier completes one phase
 * every fourth reduction (parity (seq / 4) % 2). Four buffers suffice: a CTA
 * posts seq after its wait for seq - 2, so every CTA had posted seq - 2,
 * which it does after its wait for seq - 4 and the read of that buffer.
 * The CTA's own slot is written by thread 0 after the CTA barrier of seq's
 * CTA sum, which every thread reaches after its read of seq - 4 (row slices
 * of whole CTAs, tpr >= 64: the kernel checks). One row per CTA, at most 16
 * CTAs (the slots). */
struct XchgLagSmem {
    float slot[4][16][2];      /* [buffer][source CTA's rank][value] */
    unsigned long long bar[4]; /* the mbarrier of each buffer */
};

/* Every thread of every CTA of the cluster, once, before the first post (a
 * cluster barrier: no CTA may store into another's mbarrier before it is
 * initialized). Slots past the cluster's ranks stay +0.0f (see xchg_add). */
__device__ __forceinline__ void xchg_lag_init(XchgLagSmem &x, int cluster_size)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x < 4 * 16 * 2) (&x.slot[0][0][0])[threadIdx.x] = 0.0f;
    if (threadIdx.x == 0) {
        #pragma unroll
        for (int b = 0; b < 4; b++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&x.bar[b])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cg::this_cluster().sync();
#else
    (void)x, (void)cluster_size;
#endif
}

/* Posts this CTA's sums v of reduction seq (the same bits in every thread:
 * row_allreduce over the CTA) to every CTA of the cluster, as
 * row_allreduce's exchange does; returns at once. */
template <int NV>
__device__ __forceinline__ void xchg_lag_post(const float (&v)[NV], XchgLagSmem &x, int seq, int cluster_size)
{
    static_assert(NV <= 2, "the slots hold 2 values");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int b = seq & 3, me = (int)cg::this_cluster().block_rank();
    xchg_send<NV>(v, x.slot[b][me], smem_addr(&x.bar[b]), me, cluster_size);
#else
    (void)v, (void)x, (void)seq, (void)cluster_size;
#endif
}

/* Waits for every CTA's sums of reduction seq and adds them in rank order
 * into v (the same bits in every CTA, and the bits row_allreduce's exchange
 * gives). */
template <int NV>
__device__ __forceinline__ void xchg_lag_wait(float (&v)[NV], XchgLagSmem &x, int seq, int cluster_size)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int b = seq & 3;
    xchg_wait(smem_addr(&x.bar[b]), ((unsigned)seq >> 2) & 1u);
    xchg_add_cluster<NV>(v, x.slot[b], cluster_size);
#else
    (void)x, (void)seq, (void)cluster_size;
    #pragma unroll
    for (int i = 0; i < NV; i++) v[i] = 0.0f;
#endif
}

/* The sum over the cluster of each CTA's v (the same value in every thread
 * of a CTA), added in rank order from +0.0f as the exchange adds (xchg_add):
 * the same bits. Between two cluster barriers, through the CTAs' slot (a
 * float of shared memory that no other code uses meanwhile); every thread of
 * every CTA calls it. The LAG forward's rare second reduction. */
__device__ __forceinline__ float cluster_sum_in_rank_order(float v, float *slot, int cluster_size)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster_size > 1) {
        cg::cluster_group cl = cg::this_cluster();
        if (threadIdx.x == 0) *slot = v;
        cl.sync();
        float s = 0.0f;
        for (int r = 0; r < cluster_size; r++) s += *cl.map_shared_rank(slot, r);
        cl.sync(); /* every CTA has read the others' slots before any writes its own again */
        return s;
    }
#else
    (void)slot, (void)cluster_size;
#endif
    return v;
}

/* Count, mean and sum of squared deviations of a set of values, merged as in
 * Chan et al.'s parallel variance: LayerNorm's statistics in one read of the
 * row. The merge is exact algebra but not commutative in its rounding, so
 * every merge below takes its operands in a fixed order (the lower lane or
 * warp first) and every thread ends with the same bits. */
struct MeanM2 {
    float n, mean, m2;
};

/* The weight b.n / n is taken with the fast division (2 ulp, the same bits
 * on every thread). Session 8's first form, an IEEE division merging every
 * vector and a serial merge over the warps, cost the streaming forward 8% at
 * N = 32768; this form (ShiftedSums, butterflies) gained 3%. */
__device__ __forceinline__ MeanM2 merge_mean_m2(const MeanM2 &a, const MeanM2 &b)
{
    if (b.n == 0.0f) return a;
    if (a.n == 0.0f) return b;
    const float n = a.n + b.n, d = b.mean - a.mean, fb = __fdividef(b.n, n);
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

/* One thread's running statistics over its values: sums of (h - k) and
 * (h - k)^2 with k the mean of the thread's first vector, so the loop over
 * the row has no division. With k the mean of VEC of the n values,
 * (mean - k)^2 <= M2 / VEC, so s2 <= (1 + n / VEC) * M2: the cancellation in
 * M2 = s2 - s1^2 / n multiplies the sums' rounding error by at most
 * 1 + n / VEC (the vectors per thread: 8 at N = 32768, 64 at 262144 bf16);
 * for values spread like the rest of their row, by about 2. With k the
 * thread's first value the bound was n (VEC times larger), and one large
 * value first in a thread's share (2^17 among values in [-2, 2]) put rstd
 * past its tolerance at 131072 and 262144 columns (an fp32 emulation of the
 * kernel; tests/opcase.c, th_case.outliers). */
struct ShiftedSums {
    float k, s1, s2;
    int n;
    template <int VEC> __device__ __forceinline__ void add(const float (&h)[VEC])
    {
        if (n == 0) {
            float s = 0.0f;
            #pragma unroll
            for (int j = 0; j < VEC; j++) s += h[j];
            k = s * (1.0f / VEC);
        }
        #pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float d = h[j] - k;
            s1 += d;
            s2 = fmaf(d, d, s2);
        }
        n += VEC;
    }
    __device__ __forceinline__ MeanM2 mean_m2() const
    {
        if (n == 0) return {0.0f, 0.0f, 0.0f};
        const float inv = 1.0f / (float)n;
        return {(float)n, k + s1 * inv, fmaxf(s2 - s1 * s1 * inv, 0.0f)};
    }
};

/* One butterfly step of statistics over the lanes of a warp: the lower lane's
 * operand first, so both lanes of a pair compute the same bits. */
__device__ __forceinline__ MeanM2 shfl_merge(MeanM2 v, int off)
{
    const MeanM2 o = {__shfl_xor_sync(0xffffffffu, v.n, off), __shfl_xor_sync(0xffffffffu, v.mean, off),
                      __shfl_xor_sync(0xffffffffu, v.m2, off)};
    return (threadIdx.x & off) ? merge_mean_m2(o, v) : merge_mean_m2(v, o);
}

/* Merges every thread's statistics over a CTA that holds one row (blockDim.x a
 * multiple of 32): a butterfly over the lanes, then every warp merges the
 * warps' results from shared memory by a butterfly of its own (two buffers
 * used in turn, so one barrier a call). Every thread returns the same bits. */
__device__ __forceinline__ MeanM2 cta_allmerge(MeanM2 v, MeanM2 (&sm)[2][32], int &buf)
{
    const int lane = threadIdx.x & 31;
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = shfl_merge(v, off);
    if (lane == 0) sm[buf][threadIdx.x >> 5] = v;
    __syncthreads();
    MeanM2 r = lane < (int)(blockDim.x >> 5) ? sm[buf][lane] : MeanM2{0.0f, 0.0f, 0.0f};
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) r = shfl_merge(r, off);
    buf ^= 1;
    return r;
}

/* Programmatic dependent launch (sm_90; no-ops elsewhere). A kernel launched
 * with programmatic stream serialization (launch_dependent below) may start
 * while the kernel before it in the stream still runs: grid_dependency_wait()
 * blocks until that kernel has completed and its writes are visible, so it
 * comes before the first read of what the kernel before wrote. The kernel
 * before calls launch_dependents() once its CTAs no longer need to keep the
 * next kernel's CTAs off their SMs (the backward: after its row loop), or
 * the dependents launch as its CTAs exit. */
__device__ __forceinline__ void grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ unsigned cluster_rank()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cg::this_cluster().block_rank();
#else
    return 0;
#endif
}

/* The cluster barrier in its two halves (sm_90; no-ops elsewhere): a CTA
 * arrives once it is done reading the others' shared memory and waits only
 * where it must, so the wait costs nothing when the others arrived long ago
 * (the held forward: arrive after the row sums, wait after the row's
 * writes, before the CTA may exit or reuse its slots). Every thread of the
 * CTA calls both, in turn. */
__device__ __forceinline__ void cluster_arrive()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

/* Statistics of each CTA of a cluster (a power of two of CTAs) merged over
 * the cluster in a fixed order (every thread returns the same bits): each
 * CTA's (count, mean, M2) of its slice, written to slot[b] of its own shared
 * memory, one cluster barrier, then read from every CTA. Two slot sets used in turn (b), as in
 * RowReduceSmem: reuse waits for the next barrier. */
__device__ __forceinline__ MeanM2 cluster_merge(const MeanM2 &v, MeanM2 (&slot)[2], int &b, int cluster_size)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) slot[b] = v;
    cl.sync();
    /* lane l reads CTA l mod cluster_size's statistics (a power of two up to
     * 16), then a butterfly merges them, lower lanes first (shfl_merge) */
    MeanM2 r = *cl.map_shared_rank(&slot[b], (int)(threadIdx.x & (cluster_size - 1)));
    for (int off = cluster_size >> 1; off > 0; off >>= 1) r = shfl_merge(r, off);
    b ^= 1;
    return r;
#else
    (void)slot, (void)b, (void)cluster_size;
    return v;
#endif
}

/* Keeps a CTA's shared memory alive until every CTA of its cluster is done
 * reading it through distributed shared memory. */
__device__ __forceinline__ void cluster_exit_barrier(int cluster_size)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster_size > 1) cg::this_cluster().sync();
#else
    (void)cluster_size;
#endif
}

/* ---- software pipeline: the next row's inputs stream into shared memory --
 * Each thread copies its own 16-byte chunks with cp.async (sm_80+) and later
 * reads back only what it copied, so a thread waits on its own copy groups and
 * no barrier is needed. Per-thread chunk layout [stage][k][chunk][thread]
 * (uint4 units) keeps the read-back free of bank conflicts. The copies take
 * shared-memory addresses (smem_addr, above), converted once per kernel rather
 * than once per copy. The library builds for sm_80 and newer only; the empty
 * branches are the host compiler's view. */
__device__ __forceinline__ void cp_async16_s(unsigned s, const void *gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#else
    (void)s;
    (void)gmem;
#endif
}
/* cp_async16_s with an L2 cache-hint policy (l2_evict_last_policy): the
 * register tiles stage x and dy (and the residual streams) with evict_last
 * (docs/perf.md, step 57). */
__device__ __forceinline__ void cp_async16_s_l2(unsigned s, const void *gmem, uint64_t pol)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "l"(pol) : "memory");
#else
    (void)s;
    (void)gmem;
    (void)pol;
#endif
}
__device__ __forceinline__ void cp_async4_s(unsigned s, const void *gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
#else
    (void)s;
    (void)gmem;
#endif
}
__device__ __forceinline__ void cp_async_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* The CTA of a kernel compiled for TPR threads per row (the planner's rule):
 * short slices share a CTA of 256 threads as floor(256 / tpr) rows (256 for
 * powers of two, tpr itself for 160, 192, 224), longer ones take a CTA each.
 * The kernels derive their CTA size and rows per CTA from it; the launchers
 * check a plan against it before they pick such a kernel. */
__host__ __device__ constexpr int static_tpr_threads(int tpr) { return tpr >= 256 ? tpr : 256 / tpr * tpr; }

/* Both also size the launchers' pipeline stages (host side). */
__host__ __device__ __forceinline__ int dtype_bytes(int dt) { return dt == FN_DT_F32 ? 4 : 2; }

/* 16-byte chunks per VEC-element vector of a tensor of dtype dt (1 or 2). */
template <typename TX, int VEC> __host__ __device__ __forceinline__ int chunks_of(int dt)
{
    return (int)(VEC * (sizeof(TX) == 4 ? 4 : dtype_bytes(dt)) / 16);
}


/* Reads a staged vector back as fp32 (dtype TX or fp32, as load_dyn). */
template <typename TX, int VEC>
__device__ __forceinline__ void unstage_vector(const uint4 *slot, int stride, int dt, float (&out)[VEC])
{
    if (sizeof(TX) == 4 || dt == FN_DT_F32) {
        #pragma unroll
        for (int c = 0; c < VEC / 4; c++) unpack_raw<float, 4>(slot[c * stride], out + 4 * c);
    } else {
        const uint4 u = slot[0];
        unpack_raw<TX, VEC>(u, out);
    }
}

/* The weight (and bias) cache: (w + w_off) and b of a CTA's tpr*EPT columns
 * as fp32 in shared memory, filled once per kernel (then a barrier), so that
 * each row reads them with 16-byte shared loads instead of a global load, a
 * conversion and an add per column.
 *
 * Layout: a thread's vector k covers columns (k*tpr + lane)*VEC + j. Stored
 * in column order, a warp's 16-byte reads of 8-wide vectors would stride by
 * 32 bytes and take 8 shared wavefronts instead of 4 (ncu counted half of
 * the forward's shared wavefronts as bank conflicts). So each vector's
 * float4 q is stored at float4 slot (k*VEC/4 + q)*tpr + lane: a warp reads
 * 512 consecutive bytes. For VEC <= 4 this is the column order.
 *
 * src == nullptr: a weight of ones (the forward's PLAIN kernels run a call
 * without a weight so, see launch_rows). */
template <int VEC> __device__ __forceinline__ int cache_pos(int c, int tpr)
{
    if constexpr (VEC % 4 == 0 && VEC > 4) {
        const int v = c / VEC, j = c - v * VEC, k = v / tpr, lane = v - k * tpr;
        return ((k * (VEC / 4) + j / 4) * tpr + lane) * 4 + (j & 3);
    } else {
        return c;
    }
}

template <int VEC>
__device__ __forceinline__ void fill_column_cache(float *cache, const void *src, int dt, float add, int64_t slice,
                                                  int tpr, int cols, int64_t N)
{
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int64_t col = slice + c;
        cache[cache_pos<VEC>(c, tpr)] = col >= N ? 0.0f : src ? load_any(src, dt, col) + add : 1.0f;
    }
}

/* The cached values of this thread's vector k (see cache_pos). */
template <int VEC>
__device__ __forceinline__ void read_cache(const float *cache, int k, int lane, int tpr, float (&v)[VEC])
{
    if constexpr (VEC % 4 == 0) {
        #pragma unroll
        for (int q = 0; q < VEC / 4; q++) {
            const float4 f = *reinterpret_cast<const float4 *>(cache + ((k * (VEC / 4) + q) * tpr + lane) * 4);
            v[4 * q] = f.x;
            v[4 * q + 1] = f.y;
            v[4 * q + 2] = f.z;
            v[4 * q + 3] = f.w;
        }
    } else {
        const int c = (k * tpr + lane) * VEC;
        #pragma unroll
        for (int j = 0; j < VEC; j++) v[j] = cache[c + j];
    }
}

/* ---- rows that start off a 16-byte boundary (the SHIFT kernels) ----------
 * Odd N (or an odd row pitch, or an offset pointer) puts most rows of a
 * 16-bit tensor at a byte offset s = address % 16 that is not 0, so no
 * column-aligned 16-byte vector can be loaded from global memory. The SHIFT
 * variants of the register kernels keep their column-aligned vectors (the
 * weight cache, the dweight partials and the reductions stay as they are)
 * and move the realignment into shared memory:
 *  - inputs: the row's aligned 16-byte chunks base + 16 m (base = address - s)
 *    are staged with cp.async (a source size, so that nothing past the row's
 *    last byte is read; the first chunk starts at most 15 bytes before the
 *    row, in the same allocation since allocations are 256-byte aligned),
 *    chunk m = k * tpr + lane by the thread that owns column vector m, in
 *    its own slot. Column vector m is bytes [s, s + 16) of chunks m and
 *    m + 1 (realign16): the thread reads its own chunk and takes the next
 *    one from its neighbour lane by shuffle; the last thread of each warp
 *    (or of each row slice shorter than a warp), whose next chunk is not in
 *    its neighbour's slot, stages its own copy of it ("edge" slots). So each
 *    thread reads only what it staged, and no barrier is needed after the
 *    pipeline wait.
 *  - outputs: each thread writes its column vector v into a run at chunk
 *    v + 1 (chunk 0 is padding); after a barrier, the output's aligned chunk m
 *    is bytes [16 + 16 m - s, ...) of that run, stored whole with one 16-byte
 *    store, or element by element where it holds bytes outside the row
 *    (the row's first and last chunk).
 * s is uniform per row (per warp when a row spans whole warps). */

/* Output run length in chunks: K * tpr vectors, a padding chunk in front and
 * one behind. */
__host__ __device__ constexpr int shift_run_chunks(int vectors) { return vectors + 2; }

/* Input stages: the threads of a group of min(32, tpr) (a warp, or a row
 * slice shorter than one) share chunks by shuffle; the last of each group is
 * an edge. Per tensor and stage: K * nthr own chunks ([k][thread]), then
 * K * nedges edge copies ([k][edge]). */
__host__ __device__ constexpr int shift_group(int tpr) { return tpr < 32 ? tpr : 32; }
__host__ __device__ constexpr int shift_edges(int nthr, int tpr) { return nthr / shift_group(tpr); }
__host__ __device__ constexpr int shift_stage_chunks(int k, int nthr, int tpr) { return k * (nthr + shift_edges(nthr, tpr)); }

/* Bytes [s, s + 16) of the 32 bytes a, b (s in 0..15). */
__device__ __forceinline__ uint4 realign16(const uint4 &a, const uint4 &b, int s)
{
    const unsigned o = (unsigned)(s & 3) * 8u;
    auto f = [o](unsigned lo, unsigned hi) { return __funnelshift_r(lo, hi, o); };
    switch (s >> 2) {
    case 0: return make_uint4(f(a.x, a.y), f(a.y, a.z), f(a.z, a.w), f(a.w, b.x));
    case 1: return make_uint4(f(a.y, a.z), f(a.z, a.w), f(a.w, b.x), f(b.x, b.y));
    case 2: return make_uint4(f(a.z, a.w), f(a.w, b.x), f(b.x, b.y), f(b.y, b.z));
    default: return make_uint4(f(a.w, b.x), f(b.x, b.y), f(b.y, b.z), f(b.z, b.w));
    }
}

/* cp.async of the part of a 16-byte chunk that lies before `end` (the
 * rest of the destination is zero-filled); nothing when none does.
 * The source size keeps the copy from reading past `end`, but
 * compute-sanitizer memcheck counts the whole 16-byte window (session 8: a
 * report past the end of an allocation whose size is not a multiple of 16,
 * on the tensor's last row). So on the last row (`last`) a chunk cut short
 * by `end` is read with 2-byte loads (the SHIFT kernels' 16-bit elements)
 * and stored to shared memory by this thread, which is the one that reads
 * that slot: once per tensor and launch. The other rows keep the plain
 * cp.async loop (issue_shifted instantiates both); measured cost: -0.6..-3%
 * at N = 1001 and 2047 (register allocation of the SHIFT kernels moved). */
static __device__ __noinline__ void stage_chunk_exact(unsigned s, const char *gmem, int rem)
{
    unsigned w[4] = {0u, 0u, 0u, 0u};
    for (int b = 0; b + 2 <= rem; b += 2)
        w[b >> 2] |= (unsigned)*reinterpret_cast<const unsigned short *>(gmem + b) << ((b & 2) * 8);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(s), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
}
__device__ __forceinline__ void cp_async16_upto_s(unsigned s, const char *gmem, const char *end, bool last)
{
    const long long rem = end - gmem;
    if (rem <= 0) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (last && rem < 16) { /* out of line: rare, and kept out of the kernels' registers */
        stage_chunk_exact(s, gmem, (int)rem);
        return;
    }
    const unsigned n = rem >= 16 ? 16u : (unsigned)rem;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
#else
    (void)s;
    (void)last;
#endif
}

/* One row of a shifted tensor as this CTA sees it: the slice's first byte,
 * its aligned base, and the end of what may be read (the row's end) or
 * written (the slice's end). */
struct ShiftedRow {
    const char *start, *base, *end;
    int s;
};
__device__ __forceinline__ ShiftedRow shifted_row(const void *t, int64_t row, int64_t stride, int64_t slice,
                                                  int64_t len, int elem_bytes)
{
    ShiftedRow r;
    r.start = (const char *)t + (row * stride + slice) * elem_bytes;
    r.s = (int)((uintptr_t)r.start & 15u);
    r.base = r.start - r.s;
    r.end = r.start + len * elem_bytes;
    return r;
}

/* Stages this thread's chunks m = k * tpr + lane (k < K) of the row into
 * its own slots of a tensor's stage (shared address st, see
 * shift_stage_chunks), and an edge thread also chunk m + 1 into its edge
 * slots. last: the tensor's last row (cp_async16_upto_s). */
template <int K, bool LAST>
__device__ __forceinline__ void issue_shifted_k(unsigned st, int nthr, const ShiftedRow &r, int lane, int tpr)
{
    const int g = shift_group(tpr), e = (int)threadIdx.x / g;
    const bool edge = (int)threadIdx.x - e * g == g - 1;
    const unsigned ex = st + (unsigned)(K * nthr) * 16u, nedges = (unsigned)(nthr / g);
    #pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t m = (int64_t)k * tpr + lane;
        cp_async16_upto_s(st + (unsigned)(k * nthr + (int)threadIdx.x) * 16u, r.base + 16 * m, r.end, LAST);
        if (edge)
            cp_async16_upto_s(ex + ((unsigned)k * nedges + (unsigned)e) * 16u, r.base + 16 * (m + 1), r.end, LAST);
    }
}

template <int K>
__device__ __forceinline__ void issue_shifted(unsigned st, int nthr, const ShiftedRow &r, int lane, int tpr, bool last)
{
    if (last) issue_shifted_k<K, true>(st, nthr, r, lane, tpr);
    else issue_shifted_k<K, false>(st, nthr, r, lane, tpr);
}

/* Zeros for the columns of a vector at col past the row's end (N): the SHIFT
 * kernels' last vector may hold bytes of the next row, or stale ones. */
template <int VEC> __device__ __forceinline__ void clip_past(int64_t col, int64_t N, float (&v)[VEC])
{
    if (col + VEC > N)
        #pragma unroll
        for (int j = 0; j < VEC; j++)
            if (col + j >= N) v[j] = 0.0f;
}

/* This thread's column vector k of a tensor's stage (st: the stage's first
 * chunk) as fp32: its own chunk and the next, from the neighbour lane or
 * the edge slot. Every lane of the warp must call it (the shuffle): callers
 * mask the result, not the call. */
template <typename TX, int VEC, int K>
__device__ __forceinline__ void unstage_shifted(const uint4 *st, int k, int nthr, int tpr, int s, float (&out)[VEC])
{
    static_assert(VEC * sizeof(TX) == 16, "one 16-byte chunk per vector");
    const int g = shift_group(tpr), e = (int)threadIdx.x / g;
    const uint4 a = st[k * nthr + (int)threadIdx.x];
    uint4 b;
    b.x = __shfl_down_sync(0xffffffffu, a.x, 1);
    b.y = __shfl_down_sync(0xffffffffu, a.y, 1);
    b.z = __shfl_down_sync(0xffffffffu, a.z, 1);
    b.w = __shfl_down_sync(0xffffffffu, a.w, 1);
    if ((int)threadIdx.x - e * g == g - 1) b = st[K * nthr + k * (nthr / g) + e];
    unpack_raw<TX, VEC>(realign16(a, b, s), out);
}

/* Column vector v of an output row into its run (see above). */
template <typename TX, int VEC>
__device__ __forceinline__ void put_shifted(uint4 *run, int v, const float (&y)[VEC])
{
    static_assert(VEC * sizeof(TX) == 16, "one 16-byte chunk per vector");
    run[v + 1] = make_uint4(vec_word<TX, VEC>(y, 0), vec_word<TX, VEC>(y, 1), vec_word<TX, VEC>(y, 2),
                            vec_word<TX, VEC>(y, 3));
}

/* Stores the output row's aligned chunk m from its run: whole when it lies
 * within [r.start, r.end), else the elements that do (store_shifted_run). */
template <typename TX>
__device__ __forceinline__ void store_shifted_chunk(const uint4 *run, int m, const ShiftedRow &r)
{
    char *dst = const_cast<char *>(r.base) + 16 * (int64_t)m;
    if (dst + 16 <= r.start || dst >= r.end) return; /* before or past the slice (run bounds too) */
    const int off = 16 + 16 * m - r.s;
    const uint4 u = realign16(run[off >> 4], run[(off >> 4) + 1], off & 15);
    if (dst >= r.start && dst + 16 <= r.end) {
        st_global16(dst, u);
    } else {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
        #pragma unroll
        for (int e = 0; e < 16 / (int)sizeof(TX); e++) {
            char *d = dst + e * (int)sizeof(TX);
            if (d < r.start || d >= r.end) continue;
            if constexpr (sizeof(TX) == 4) {
                *reinterpret_cast<unsigned *>(d) = w[e];
            } else {
                const unsigned short h = (unsigned short)(w[e >> 1] >> ((e & 1) * 16));
                *reinterpret_cast<unsigned short *>(d) = h;
            }
        }
    }
}

/* Stores a complete output run (after a barrier) to row r: chunks
 * m = k * tpr + lane (k < K), and lane 0 the last chunk m = K * tpr, as
 * issue_shifted stages them. */
template <typename TX, int K>
__device__ __forceinline__ void store_shifted_run(const uint4 *run, const ShiftedRow &r, int lane, int tpr)
{
    #pragma unroll
    for (int k = 0; k < K; k++) store_shifted_chunk<TX>(run, k * tpr + lane, r);
    if (lane == 0) store_shifted_chunk<TX>(run, K * tpr, r);
}

/* ---- rows of any alignment (the two-pass kernels) ---------------------------
 * A row is split at the 16-byte boundary of its activation tensor: a head of
 * up to VEC-1 columns before it and a tail of up to VEC-1 after the last whole
 * vector go one element at a time; the body goes in VEC-wide vectors. Another
 * tensor of the row (or the weight) reads its body columns with vectors too
 * when its own address at column `head` is 16-byte aligned (then every body
 * vector is), else one element at a time. So odd N, odd row pitches and
 * offset pointers keep vector access on the tensors that allow it. */
struct RowSplit {
    int64_t head, body_end; /* body: [head, body_end), a multiple of VEC long */
};

template <int VEC>
__device__ __forceinline__ RowSplit split_row(const void *row, int elem_bytes, int64_t n)
{
    int64_t head = VEC == 1 ? 0 : (int64_t)((16u - ((uintptr_t)row & 15u)) & 15u) / elem_bytes;
    if (head > n) head = n;
    return RowSplit{head, head + (n - head) / VEC * VEC};
}

/* Whether `base + col` (elements of elem_bytes) starts a 16-byte-aligned vector. */
__device__ __forceinline__ bool vec_at(const void *base, int64_t col, int elem_bytes)
{
    return (((uintptr_t)base + (uintptr_t)(col * elem_bytes)) & 15u) == 0;
}

/* V elements of a TX-or-fp32 tensor from element i: a vector when `vec`, else one at a time. */
template <typename TX, int V>
__device__ __forceinline__ void load_flex(const void *p, int dt, int64_t i, bool vec, float (&out)[V])
{
    if (V > 1 && vec) {
        load_dyn<TX, V>(p, dt, i, out);
    } else {
        #pragma unroll
        for (int j = 0; j < V; j++) {
            float one[1];
            load_dyn<TX, 1>(p, dt, i + j, one);
            out[j] = one[0];
        }
    }
}

template <typename TX, int V>
__device__ __forceinline__ void store_flex(void *p, int dt, int64_t i, bool vec, const float (&v)[V])
{
    if (V > 1 && vec) {
        store_dyn<TX, V>(p, dt, i, v);
    } else {
        #pragma unroll
        for (int j = 0; j < V; j++) {
            const float one[1] = {v[j]};
            store_dyn<TX, 1>(p, dt, i + j, one);
        }
    }
}

/* Calls f(col, width) for every column group of the row in this CTA's share:
 * body vectors (width VEC) strided over the threads, then the head and tail
 * columns (width 1) on the first threads. */
template <int VEC, typename F>
__device__ __forceinline__ void for_each_column(const RowSplit &rs, int64_t n, F &&f)
{
    const int64_t step = (int64_t)blockDim.x * VEC;
    for (int64_t c = rs.head + (int64_t)threadIdx.x * VEC; c < rs.body_end; c += step)
        f(c, std::integral_constant<int, VEC>{});
    if constexpr (VEC > 1) {
        const int64_t t = threadIdx.x, tail = n - rs.body_end;
        if (t < rs.head) f(t, std::integral_constant<int, 1>{});
        else if (t - rs.head < tail) f(rs.body_end + (t - rs.head), std::integral_constant<int, 1>{});
    }
}

/* for_each_column with the body's loads issued B vectors ahead: a thread
 * loads B of its body vectors (load(col, width, u), u < B, into its slot u)
 * and then uses them in order (use(col, width, u)), so that B 16-byte loads
 * per thread are in flight instead of one. Head and tail columns go through
 * slot 0 one at a time. */
template <int VEC, int B, typename L, typename U>
__device__ __forceinline__ void for_each_column_batched(const RowSplit &rs, int64_t n, L &&load, U &&use)
{
    const int64_t step = (int64_t)blockDim.x * VEC;
    for (int64_t c0 = rs.head + (int64_t)threadIdx.x * VEC; c0 < rs.body_end; c0 += B * step) {
        #pragma unroll
        for (int u = 0; u < B; u++)
            if (c0 + u * step < rs.body_end) load(c0 + u * step, std::integral_constant<int, VEC>{}, u);
        #pragma unroll
        for (int u = 0; u < B; u++)
            if (c0 + u * step < rs.body_end) use(c0 + u * step, std::integral_constant<int, VEC>{}, u);
    }
    if constexpr (VEC > 1) {
        const int64_t t = threadIdx.x, tail = n - rs.body_end;
        const int64_t c = t < rs.head ? t : (t - rs.head < tail ? rs.body_end + (t - rs.head) : -1);
        if (c >= 0) {
            load(c, std::integral_constant<int, 1>{}, 0);
            use(c, std::integral_constant<int, 1>{}, 0);
        }
    }
}

/* The first V elements of a slot of VEC as an array of V (the width-1 calls of for_each_column_batched). */
template <int V, int VEC> __device__ __forceinline__ float (&first(float (&slot)[VEC]))[V]
{
    static_assert(V <= VEC, "a slot holds VEC elements");
    return *reinterpret_cast<float(*)[V]>(slot);
}

} // namespace fn
