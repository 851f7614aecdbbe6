/*
 * Row kernels of the CPU backend: move one row of a tensor of any dtype into
 * or out of a contiguous fp32 scratch row, and the per-row statistics.
 *
 * Every tensor is addressed through `unsigned char *` and memcpy, so any
 * pointer alignment (even an fp32 tensor at an odd address) is correct; GCC
 * turns each memcpy into an unaligned load/store and still vectorizes. The
 * dtype switch sits outside each loop so that every loop is a plain
 * vectorizable stream. Conversions are bit-identical to fn_load/fn_store of
 * src/internal.h (tests/test_cpu_convert.c checks every bit pattern): bf16 and
 * fp16 use branch-free forms of its functions, which the vectorizer turns into
 * blends.
 */
#ifndef FUSEDNORM_CPU_ROWS_H
#define FUSEDNORM_CPU_ROWS_H

#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Forced inline: the row kernels are cloned per ISA (norm_cpu.c), and only
 * code inlined into a clone is compiled for that clone's ISA. */
#if defined(__GNUC__)
#define CPU_INLINE static inline __attribute__((always_inline))
#else
#define CPU_INLINE static inline
#endif

CPU_INLINE float cpu_ld_f32(const unsigned char *p, int64_t i)
{
    float v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}
CPU_INLINE void cpu_st_f32(unsigned char *p, int64_t i, float v) { memcpy(p + 4 * i, &v, 4); }

CPU_INLINE float cpu_ld_bf16(const unsigned char *p, int64_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return fn_bits_to_f32((uint32_t)h << 16);
}
/* fn_f16_to_f32 without branches. Normal halves: the exponent rebased by
 * 127 - 15 = 112; Inf and NaN (exponent 31) by 224 more, to 255, with the
 * mantissa (NaN payload) kept; zero and subnormals, man * 2^-24, as
 * (2^-14 + man * 2^-24) - 2^-14, both exact floats, so the difference is
 * exact in every rounding mode (and under flush-to-zero: it is 0 or at least
 * 2^-24). */
CPU_INLINE float cpu_f16_to_f32(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t bits = (em << 13) + (em >= 0x7c00u ? 0x70000000u : 0x38000000u);
    float sub = fn_bits_to_f32((em << 13) + 0x38800000u) - fn_bits_to_f32(0x38800000u);
    bits = em < 0x400u ? fn_f32_to_bits(sub) : bits;
    return fn_bits_to_f32(sign | bits);
}
CPU_INLINE float cpu_ld_f16(const unsigned char *p, int64_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return cpu_f16_to_f32(h);
}

/* fn_f32_to_bf16 without the branch: the NaN test becomes a select on the
 * 32-bit value before the one shift, which the vectorizer turns into a blend.
 * ((u | 0x400000) >> 16 == (u >> 16) | 0x40.) The magnitude fits in int32, so
 * a signed compare (which SSE has) is exact. */
CPU_INLINE uint16_t cpu_f32_to_bf16(float f)
{
    uint32_t u = fn_f32_to_bits(f);
    int32_t magnitude = (int32_t)(u & 0x7fffffffu);
    uint32_t r = magnitude > 0x7f800000 ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(r >> 16);
}
CPU_INLINE void cpu_st_bf16(unsigned char *p, int64_t i, float v)
{
    uint16_t h = cpu_f32_to_bf16(v);
    memcpy(p + 2 * i, &h, 2);
}
/* fn_f32_to_f16 without branches: every case computed, one selected. The
 * magnitude fits in int32, so signed compares (which SSE has) are exact.
 * Subnormal halves (magnitude below 2^-14) are the magnitude rounded to a
 * multiple of 2^-24: adding 0.5 does it (the float unit of [0.5, 1) is 2^-24,
 * and the sum rounds to nearest even as every float operation of the row
 * kernels does, in the default rounding mode), and the sum's low mantissa
 * bits are the half's. The sum is at least 0.5, never flushed; a denormal
 * input treated as zero (DAZ) gives 0, as it rounds to 0 anyway. */
CPU_INLINE uint16_t cpu_f32_to_f16(float f)
{
    uint32_t u = fn_f32_to_bits(f), sign = (u >> 16) & 0x8000u, ua = u & 0x7fffffffu;
    int32_t a = (int32_t)ua;
    uint32_t sub = fn_f32_to_bits(fn_bits_to_f32(ua) + 0.5f) - 0x3f000000u;
    uint32_t normal = (ua + 0xfffu + ((ua >> 13) & 1u) - 0x38000000u) >> 13; /* mantissa rounded to 10 bits, even */
    uint32_t r = a > 0x7f800000 ? 0x7e00u | ((ua >> 13) & 0x3ffu) /* NaN, kept quiet */
                 : a >= 0x477ff000 ? 0x7c00u                        /* rounds to >= 65520: Inf */
                 : a < 0x38800000  ? sub
                                   : normal;
    return (uint16_t)(sign | r);
}
CPU_INLINE void cpu_st_f16(unsigned char *p, int64_t i, float v)
{
    uint16_t h = cpu_f32_to_f16(v);
    memcpy(p + 2 * i, &h, 2);
}

/* Row sums. Each is accumulated in fp32 (the contract) over CPU_LANES
 * independent partial sums, element i going to lane i % CPU_LANES, and the
 * lanes are added in a fixed tree: the vectorizer maps lanes to registers
 * without reassociating anything, so the result is the same at every vector
 * width (SSE or AVX2 clone) and thread count, and the add chains are short
 * enough to hide latency. Double sums were measured here and cost about 3x the
 * arithmetic of this loop (conversions plus half-width vectors), which made
 * the row kernels compute-bound, so fp32 it is. The per-element work
 * (h - mean) is fp32 as in every backend. LayerNorm's variance is two-pass
 * around the mean (accurate when |mean| >> std).
 *
 * The sums run over the fp32 scratch row (in L1/L2) after a plain load loop:
 * fused into the load, the dtype conversion and the lanes did not vectorize.
 * While they run, they prefetch the next row's inputs: the hardware
 * prefetcher stops at every 4 KiB page, so one thread streaming rows
 * otherwise waits a full memory latency each page. (Prefetches never fault,
 * so the address past the last row is harmless.) */
#define CPU_LANES 16

CPU_INLINE float cpu_lanes_total(const float *acc)
{
    float s8[8], s4[4];
    for (int k = 0; k < 8; k++) s8[k] = acc[k] + acc[k + 8];
    for (int k = 0; k < 4; k++) s4[k] = s8[k] + s8[k + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* Next-row inputs to prefetch while a row is in scratch: up to two streams,
 * each a base pointer (NULL: none) and its element size. */
typedef struct cpu_prefetch {
    const unsigned char *a, *b;
    int64_t a_es, b_es;
} cpu_prefetch;

CPU_INLINE void cpu_prefetch_block(const cpu_prefetch *pf, int64_t i)
{
    /* One line per stream per CPU_LANES block covers a 4-byte stream fully
     * (16 floats = 64 bytes) and a 2-byte one twice over. */
    if (pf->a) __builtin_prefetch(pf->a + i * pf->a_es, 0, 3);
    if (pf->b) __builtin_prefetch(pf->b + i * pf->b_es, 0, 3);
}

/* The CPU_LANES fp32 lanes as four GCC 4-float vectors (lanes 4q..4q+3 in
 * vector q): the vectorizer left the equivalent array loops scalar, and one
 * 16-float vector went through the stack. 4-float vectors are native to SSE
 * and AVX2 alike; they are only ever locals. */
typedef float cpu_v4 __attribute__((vector_size(16)));

CPU_INLINE cpu_v4 cpu_v4_load(const float *p)
{
    cpu_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
CPU_INLINE void cpu_v4_store(float *p, cpu_v4 v) { memcpy(p, &v, sizeof v); }

/* 8-float GCC vectors for the fused row passes: one AVX2 register in the
 * AVX2 clone, two SSE registers in the baseline one (GCC splits them), the
 * same arithmetic either way. A CPU_LANES block is two of them, lanes 0-7 and
 * 8-15, so the lane of element i stays i % CPU_LANES. */
/* They are passed by value only between always-inline functions, so the
 * 32-byte-vector ABI warning GCC gives for the baseline build does not apply
 * (vectors go in by pointer, which avoids its parameter note). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float cpu_v8 __attribute__((vector_size(32)));
typedef uint32_t cpu_u8 __attribute__((vector_size(32)));
typedef int32_t cpu_i8 __attribute__((vector_size(32)));
typedef uint16_t cpu_h8 __attribute__((vector_size(16)));

CPU_INLINE cpu_v8 cpu_v8_load(const float *p)
{
    cpu_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
CPU_INLINE void cpu_v8_store(float *p, const cpu_v8 *v) { memcpy(p, v, sizeof *v); }

/* ---- fp16 in 8 lanes --------------------------------------------------
 * cpu_f16_to_f32 and cpu_f32_to_f16 written out on 8 lanes: the vectorizer
 * leaves the scalar forms' loops scalar (it sinks the float subtraction into
 * its select and then sees control flow), so the fp16 loops use these. Same
 * operations lane by lane, bitwise the same results (test_cpu_convert). The
 * compares are signed, on values that fit in int31. */
#define CPU_U8_SELECT(mask, a, b) (((mask) & (a)) | (~(mask) & (b)))

/* The fp16 in the low half of each word of *hp, as fp32. */
CPU_INLINE cpu_v8 cpu_v8_from_f16(const cpu_u8 *hp)
{
    cpu_u8 h = *hp, sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    cpu_u8 inf_nan = (cpu_u8)((cpu_i8)em >= 0x7c00), small = (cpu_u8)((cpu_i8)em < 0x400);
    cpu_u8 bits = (em << 13) + 0x38000000u + (inf_nan & 0x38000000u);
    cpu_v8 sub = (cpu_v8)((em << 13) + 0x38800000u) - fn_bits_to_f32(0x38800000u);
    return (cpu_v8)(sign | CPU_U8_SELECT(small, (cpu_u8)sub, bits));
}

/* Each lane of v rounded to fp16, in the low half of its word (high half 0). */
CPU_INLINE cpu_u8 cpu_v8_to_f16(const cpu_v8 *v)
{
    cpu_u8 u = (cpu_u8)*v, sign = (u >> 16) & 0x8000u, ua = u & 0x7fffffffu;
    cpu_i8 a = (cpu_i8)ua;
    cpu_u8 sub = (cpu_u8)((cpu_v8)ua + 0.5f) - 0x3f000000u;
    cpu_u8 r = (ua + 0xfffu + ((ua >> 13) & 1u) - 0x38000000u) >> 13;
    r = CPU_U8_SELECT((cpu_u8)(a < 0x38800000), sub, r);
    r = CPU_U8_SELECT((cpu_u8)(a >= 0x477ff000), ua * 0u + 0x7c00u, r);
    r = CPU_U8_SELECT((cpu_u8)(a > 0x7f800000), 0x7e00u | ((ua >> 13) & 0x3ffu), r);
    return sign | r;
}

/* 8 fp16 at element i of p, as fp32; 8 fp32 rounded into fp16 there. */
CPU_INLINE cpu_v8 cpu_v8_ld_f16(const unsigned char *p, int64_t i)
{
    cpu_h8 h;
    memcpy(&h, p + 2 * i, sizeof h);
    cpu_u8 w = __builtin_convertvector(h, cpu_u8);
    return cpu_v8_from_f16(&w);
}
CPU_INLINE void cpu_v8_st_f16(unsigned char *p, int64_t i, const cpu_v8 *v)
{
    cpu_h8 h = __builtin_convertvector(cpu_v8_to_f16(v), cpu_h8);
    memcpy(p + 2 * i, &h, sizeof h);
}

/* fp16 rows with the F16C instructions, where the CPU has them and AVX2 (so
 * that the baseline clone of the row kernels, which runs where AVX2 is
 * missing, never mixes them in): one instruction for 8 lanes against the
 * 8-lane forms' 10-14. Each a function of its own (target attribute), called
 * once per row; GCC only (clang builds take the 8-lane forms). Bitwise the
 * same as internal.h on every pattern (test_cpu_convert):
 *  - fp32 -> fp16: vcvtps2ph, its immediate asking for round to nearest even
 *    whatever MXCSR says;
 *  - fp16 -> fp32: vcvtph2ps quiets signaling NaNs, which fn_f16_to_f32
 *    keeps, so a block of 16 with any exponent-31 lane (Inf, NaN: never in
 *    ordinary data) takes cpu_v8_from_f16 instead. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FN_CPU_NO_ISA_CLONES)
#include <immintrin.h>
#define CPU_HAVE_F16C 1
static inline int cpu_f16c(void) { return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2"); }
#define CPU_F16C __attribute__((target("avx2,f16c"), unused)) static
/* The two conversions every F16C form uses, inlined only into functions
 * built for AVX2 + F16C (those below, and norm_cpu_f16c.c's pipelines). */
#define CPU_F16C_INLINE __attribute__((target("avx2,f16c"), always_inline, unused)) static inline
/* 8 lanes rounded into fp16 (round to nearest even by the immediate). */
CPU_F16C_INLINE __m128i cpu_f16c_cvt8(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
CPU_F16C_INLINE void cpu_f16c_st8(unsigned char *p, __m256 v) { _mm_storeu_si128((__m128i *)(void *)p, cpu_f16c_cvt8(v)); }
/* The 16 fp16 at p as fp32 (lo: the first 8): one Inf / NaN test, two
 * vcvtph2ps; a block with an exponent-31 lane takes the 8-lane form. */
CPU_F16C_INLINE void cpu_f16c_ld16(const unsigned char *p, cpu_v8 *lo, cpu_v8 *hi)
{
    const __m256i exp_mask = _mm256_set1_epi16(0x7c00);
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_and_si256(h, exp_mask), exp_mask))) {
        *lo = cpu_v8_ld_f16(p, 0);
        *hi = cpu_v8_ld_f16(p, 8);
        return;
    }
    __m256 a = _mm256_cvtph_ps(_mm256_castsi256_si128(h)), b = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    memcpy(lo, &a, sizeof *lo);
    memcpy(hi, &b, sizeof *hi);
}
CPU_F16C void cpu_store_row_f16c(unsigned char *p, const float *restrict src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) cpu_f16c_st8(p + 2 * i, _mm256_loadu_ps(src + i));
    for (; i < n; i++) cpu_st_f16(p, i, src[i]);
}
/* The forward's y row, y = ((h - mean) * rstd) * wf (+ bf), rounded into
 * fp16: the same operations in the same order as the 8-lane loop
 * (fwd_normalize_v8), so the same bits. */
CPU_F16C void cpu_fwd_normalize_f16c(unsigned char *p, const float *restrict h, const float *restrict wf,
                                     const float *restrict bf, float mean, float rstd, int64_t n)
{
    const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(h + i), vm), vr), _mm256_loadu_ps(wf + i));
        if (bf) v = _mm256_add_ps(v, _mm256_loadu_ps(bf + i));
        cpu_f16c_st8(p + 2 * i, v);
    }
    for (; i < n; i++) {
        float v = ((h[i] - mean) * rstd) * wf[i];
        if (bf) v += bf[i];
        cpu_st_f16(p, i, v);
    }
}
/* The backward's dx row, rstd * ((g * wf - mean_g) - x_hat * mean_xg),
 * rounded into fp16: the same operations in the same order as its scalar
 * loop (norm_cpu.c, BWD_DH). */
CPU_F16C void cpu_bwd_dh_f16c(unsigned char *p, const float *restrict xhat, const float *restrict g,
                              const float *restrict wf, float rstd, float mean_g, float mean_xg, int64_t n)
{
    const __m256 vr = _mm256_set1_ps(rstd), vg = _mm256_set1_ps(mean_g), vxg = _mm256_set1_ps(mean_xg);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(wf + i)), vg);
        __m256 v = _mm256_mul_ps(vr, _mm256_sub_ps(a, _mm256_mul_ps(_mm256_loadu_ps(xhat + i), vxg)));
        cpu_f16c_st8(p + 2 * i, v);
    }
    for (; i < n; i++) cpu_st_f16(p, i, rstd * ((g[i] * wf[i] - mean_g) - xhat[i] * mean_xg));
}
/* dst[i] = src[i] (add: dst[i] += src[i]) of an fp16 row. */
CPU_F16C void cpu_load_row_f16c(float *restrict dst, const unsigned char *p, int64_t n, int add)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        cpu_v8 v[2];
        cpu_f16c_ld16(p + 2 * i, &v[0], &v[1]);
        for (int q = 0; q < 2; q++) {
            if (add) v[q] = cpu_v8_load(dst + i + 8 * q) + v[q];
            cpu_v8_store(dst + i + 8 * q, &v[q]);
        }
    }
    for (; i < n; i++) dst[i] = add ? dst[i] + cpu_ld_f16(p, i) : cpu_ld_f16(p, i);
}
#else
#define CPU_HAVE_F16C 0
static inline int cpu_f16c(void) { return 0; }
static inline void cpu_store_row_f16c(unsigned char *p, const float *restrict src, int64_t n)
{
    (void)p, (void)src, (void)n;
}
static inline void cpu_load_row_f16c(float *restrict dst, const unsigned char *p, int64_t n, int add)
{
    (void)dst, (void)p, (void)n, (void)add;
}
static inline void cpu_fwd_normalize_f16c(unsigned char *p, const float *restrict h, const float *restrict wf,
                                          const float *restrict bf, float mean, float rstd, int64_t n)
{
    (void)p, (void)h, (void)wf, (void)bf, (void)mean, (void)rstd, (void)n;
}
static inline void cpu_bwd_dh_f16c(unsigned char *p, const float *restrict xhat, const float *restrict g,
                                   const float *restrict wf, float rstd, float mean_g, float mean_xg, int64_t n)
{
    (void)p, (void)xhat, (void)g, (void)wf, (void)rstd, (void)mean_g, (void)mean_xg, (void)n;
}
#endif

/* Whether the row functions below take their F16C forms: the CPU's answer,
 * unless the includer says otherwise (norm_cpu.c: its test hook). */
#ifndef CPU_F16C_ENABLED
#define CPU_F16C_ENABLED() cpu_f16c()
#endif

/* The row pipelines built for fp16 (norm_cpu_f16c.c, from cpu_pipeline.h);
 * called only where cpu_f16c() (where it is 0 they are stubs). */
void fn_cpu_fwd_pipeline_thread_f16c(const fusednorm_fwd_args *a, const float *wf, const float *bf, int stream_y,
                                     int stream_ro, int64_t *shared_next, int64_t grab, float *stage);
void fn_cpu_bwd_pipeline_rows_f16c(const fusednorm_bwd_args *a, int64_t r0, int64_t r1, const float *wf,
                                   float *dw_partial, float *db_partial, int stream_dx, int stream_dr, float *stage);

/* dst[i] = src[i] (add: dst[i] += src[i]) of an fp16 row, 8 lanes at a time. */
CPU_INLINE void cpu_load_row_f16(float *restrict dst, const unsigned char *p, int64_t n, int add)
{
    if (CPU_F16C_ENABLED()) {
        cpu_load_row_f16c(dst, p, n, add);
        return;
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        cpu_v8 v = cpu_v8_ld_f16(p, i);
        if (add) v = cpu_v8_load(dst + i) + v;
        cpu_v8_store(dst + i, &v);
    }
    for (; i < n; i++) dst[i] = add ? dst[i] + cpu_ld_f16(p, i) : cpu_ld_f16(p, i);
}

/* dst[i] = src[i] (as fp32). */
CPU_INLINE void cpu_load_row(float *restrict dst, const void *src, fusednorm_dtype t, int64_t n)
{
    const unsigned char *p = (const unsigned char *)src;
    switch (t) {
    case FUSEDNORM_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_ld_bf16(p, i);
        break;
    case FUSEDNORM_F16:
        cpu_load_row_f16(dst, p, n, 0);
        break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_ld_f32(p, i);
        break;
    }
}

/* dst[i] += src[i] (as fp32). */
CPU_INLINE void cpu_add_row(float *restrict dst, const void *src, fusednorm_dtype t, int64_t n)
{
    const unsigned char *p = (const unsigned char *)src;
    switch (t) {
    case FUSEDNORM_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] += cpu_ld_bf16(p, i);
        break;
    case FUSEDNORM_F16:
        cpu_load_row_f16(dst, p, n, 1);
        break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] += cpu_ld_f32(p, i);
        break;
    }
}

/* dst[i] = round(src[i]) in dtype t. */
CPU_INLINE void cpu_store_row(void *dst, fusednorm_dtype t, const float *restrict src, int64_t n)
{
    unsigned char *p = (unsigned char *)dst;
    switch (t) {
    case FUSEDNORM_BF16:
        for (int64_t i = 0; i < n; i++) cpu_st_bf16(p, i, src[i]);
        break;
    case FUSEDNORM_F16: {
        if (CPU_F16C_ENABLED()) {
            cpu_store_row_f16c(p, src, n);
            break;
        }
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            cpu_v8 v = cpu_v8_load(src + i);
            cpu_v8_st_f16(p, i, &v);
        }
        for (; i < n; i++) cpu_st_f16(p, i, src[i]);
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) cpu_st_f32(p, i, src[i]);
        break;
    }
}

/* ---- bf16 blocks in split order --------------------------------------
 * 32 bytes of bf16 are 8 uint32 words, word k holding element 2k (low half)
 * and 2k+1 (high half). Shifted or masked in place they give the even and the
 * odd elements as fp32 in one op each, with no widening or cross-lane
 * shuffle; a store merges them back the same way. So the pipelined paths keep
 * bf16 rows (scratch, weight, bias, dweight partials) in split order: per full
 * CPU_LANES block, the 8 even elements, then the 8 odd ones; the tail past
 * the last full block stays in natural order. The arithmetic per element is
 * unchanged, and sum lanes are put back in natural order (cpu_lanes_unsplit)
 * before the tail and the fixed tree, so results are bitwise the same. fp32
 * blocks are always in natural order, and so are fp16 blocks: the pipelines
 * take fp16 only built for F16C (norm_cpu_f16c.c), whose instructions
 * convert 8 consecutive elements. With the 8-lane forms (about 10-14
 * operations per 8 lanes) the pipeline, which converts each element more
 * often than the scratch rows do (per 16-element block, forward 6
 * conversions of 8 lanes against 4, backward 10 against 6), measured 1.2x
 * (forward) and 1.9x (backward) slower than the scratch rows. */

/* Element i of a row of fp32 (half 0), bf16 (1) or fp16 (2) as fp32; v
 * rounded into it. */
CPU_INLINE float cpu_ld_half(const unsigned char *p, int half, int64_t i)
{
    return half == 2 ? cpu_ld_f16(p, i) : half ? cpu_ld_bf16(p, i) : cpu_ld_f32(p, i);
}
CPU_INLINE void cpu_st_half(unsigned char *p, int half, int64_t i, float v)
{
    if (half == 2) cpu_st_f16(p, i, v);
    else if (half) cpu_st_bf16(p, i, v);
    else cpu_st_f32(p, i, v);
}

/* fp16 in the pipelines (norm_cpu_f16c.c), in natural order: by the F16C
 * instructions in a translation unit built for them (cpu_blk_ld:
 * vcvtph2ps unless the block holds an Inf or NaN, as cpu_load_row_f16c),
 * else by the 8-lane forms. */
CPU_INLINE cpu_h8 cpu_v8_to_f16_any(const cpu_v8 *v)
{
#if defined(__F16C__) && defined(__AVX2__)
    __m256 f;
    memcpy(&f, v, sizeof f);
    __m128i h = cpu_f16c_cvt8(f);
    cpu_h8 r;
    memcpy(&r, &h, sizeof r);
    return r;
#else
    return __builtin_convertvector(cpu_v8_to_f16(v), cpu_h8);
#endif
}

/* 16 elements at i: fp32, bf16 in split order, fp16 in natural order. */
CPU_INLINE void cpu_blk_ld(const unsigned char *p, int half, int64_t i, cpu_v8 *a, cpu_v8 *b)
{
    if (half == 2) {
#if defined(__F16C__) && defined(__AVX2__)
        cpu_f16c_ld16(p + 2 * i, a, b);
#else
        *a = cpu_v8_ld_f16(p, i);
        *b = cpu_v8_ld_f16(p, i + 8);
#endif
        return;
    }
    if (half) {
        cpu_u8 u;
        memcpy(&u, p + 2 * i, sizeof u);
        *a = (cpu_v8)(u << 16);
        *b = (cpu_v8)(u & 0xffff0000u);
        return;
    }
    memcpy(a, p + 4 * i, sizeof *a);
    memcpy(b, p + 4 * i + 32, sizeof *b);
}

/* cpu_f32_to_bf16 lane-wise before its final shift: the bf16 is the high half.
 * NaN is found by v != v (one compare, no constants: the loops that use this
 * are short of registers) instead of the magnitude compare, same lanes. */
CPU_INLINE cpu_u8 cpu_v8_bf16_rounded(const cpu_v8 *v)
{
    cpu_u8 u = (cpu_u8)*v;
    cpu_u8 is_nan = (cpu_u8)(*v != *v);
    return (is_nan & (u | 0x00400000u)) | (~is_nan & (u + 0x7fffu + ((u >> 16) & 1u)));
}

/* bf16: the block merged back from split order into 16 bf16 (32 bytes). */
CPU_INLINE cpu_u8 cpu_blk_bf16(const cpu_v8 *a, const cpu_v8 *b)
{
    return (cpu_v8_bf16_rounded(a) >> 16) | (cpu_v8_bf16_rounded(b) & 0xffff0000u);
}

/* Elements i..i+7 rounded into a row (natural order) of fp32 (half 0), bf16
 * (1) or fp16 (2). */
CPU_INLINE void cpu_v8_st(unsigned char *p, int half, int64_t i, const cpu_v8 *v)
{
    if (half == 2) {
        cpu_v8_st_f16(p, i, v);
        return;
    }
    if (half) {
        cpu_h8 h = __builtin_convertvector(cpu_v8_bf16_rounded(v) >> 16, cpu_h8);
        memcpy(p + 2 * i, &h, sizeof h);
        return;
    }
    memcpy(p + 4 * i, v, sizeof *v);
}

CPU_INLINE void cpu_lanes_unsplit(float *acc)
{
    float t[CPU_LANES];
    memcpy(t, acc, sizeof t);
    for (int k = 0; k < CPU_LANES / 2; k++) {
        acc[2 * k] = t[k];
        acc[2 * k + 1] = t[CPU_LANES / 2 + k];
    }
}

/* The two 8-lane accumulators into acc[CPU_LANES] in natural lane order
 * (split: the lanes were accumulated in a row's split order). */
CPU_INLINE void cpu_lanes_spill(float acc[CPU_LANES], cpu_v8 lo, cpu_v8 hi, int split)
{
    cpu_v8_store(acc, &lo);
    cpu_v8_store(acc + 8, &hi);
    if (split) cpu_lanes_unsplit(acc);
}

/* A natural-order fp32 row into split order, and back. */
CPU_INLINE void cpu_split_row(float *row, int64_t n)
{
    for (int64_t i = 0; i + CPU_LANES <= n; i += CPU_LANES) {
        float t[CPU_LANES];
        memcpy(t, row + i, sizeof t);
        for (int k = 0; k < CPU_LANES / 2; k++) {
            row[i + k] = t[2 * k];
            row[i + CPU_LANES / 2 + k] = t[2 * k + 1];
        }
    }
}
CPU_INLINE void cpu_unsplit_row(float *row, int64_t n)
{
    for (int64_t i = 0; i + CPU_LANES <= n; i += CPU_LANES) cpu_lanes_unsplit(row + i);
}

/* sum of h[i] (squares: of (h[i] - shift)^2). Lanes 0-7 and 8-15 as two
 * 8-float vectors (one AVX2 register each in that clone). */
CPU_INLINE float cpu_sum_row_order(const float *restrict h, int64_t n, int squares, float shift,
                                   const cpu_prefetch *pf, int split)
{
    cpu_v8 lo = {0}, hi = {0};
    float acc[CPU_LANES];
    int64_t i = 0;
    if (squares) {
        for (; i + CPU_LANES <= n; i += CPU_LANES) {
            cpu_prefetch_block(pf, i);
            cpu_v8 d = cpu_v8_load(h + i) - shift, e = cpu_v8_load(h + i + 8) - shift;
            lo += d * d;
            hi += e * e;
        }
    } else {
        for (; i + CPU_LANES <= n; i += CPU_LANES) {
            cpu_prefetch_block(pf, i);
            lo += cpu_v8_load(h + i);
            hi += cpu_v8_load(h + i + 8);
        }
    }
    cpu_lanes_spill(acc, lo, hi, split);
    for (int k = 0; i + k < n; k++) {
        float d = h[i + k] - shift;
        acc[k] += squares ? d * d : h[i + k];
    }
    return cpu_lanes_total(acc);
}

CPU_INLINE float cpu_sum_row(const float *restrict h, int64_t n, int squares, float shift, const cpu_prefetch *pf)
{
    return cpu_sum_row_order(h, n, squares, shift, pf, 0);
}

/* mean and rstd of one fp32 row (mean 0 for RMSNorm). */
CPU_INLINE void cpu_row_stats(const float *restrict h, int64_t n, int layernorm, float eps, const cpu_prefetch *pf,
                              float *mean_out, float *rstd_out)
{
    static const cpu_prefetch none = {0, 0, 0, 0};
    float count = (float)n, mean = 0.0f;
    if (layernorm) mean = cpu_sum_row(h, n, 0, 0.0f, pf) / count;
    float sum_sq = cpu_sum_row(h, n, 1, mean, layernorm ? &none : pf);
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(sum_sq / count + eps);
}

/* ---- streaming stores ----------------------------------------------------
 * Large outputs are written with non-temporal stores: a plain store first
 * reads the destination line (read-for-ownership), so a row written the
 * ordinary way costs its bytes twice; the copy bandwidth we are measured
 * against (memcpy) streams too. Only for outputs far larger than the caches
 * (the caller decides), since streamed lines are not left in cache. The row
 * is first converted into an fp32-sized scratch row by the ordinary
 * (vectorized, bit-exact) store loops, then copied out here; the copy is a
 * pass over L1 only. The caller issues cpu_stream_fence() before its threads
 * finish. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define CPU_HAVE_STREAM 1
CPU_INLINE void cpu_stream_copy(void *dst, const void *src, size_t bytes)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > bytes) head = bytes;
    memcpy(d, s, head);
    size_t i = head;
    for (; i + 16 <= bytes; i += 16) _mm_stream_si128((__m128i *)(void *)(d + i), _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
    memcpy(d + i, s + i, bytes - i);
}
CPU_INLINE void cpu_stream_fence(void) { _mm_sfence(); }
/* 32 bytes to d (16-byte aligned), non-temporally. The halves are taken
 * from the register: through a stack buffer, the 16-byte reloads of a 32-byte
 * store missed store forwarding and stalled the loop. */
CPU_INLINE void cpu_stream32(unsigned char *d, const void *v32)
{
    typedef long long cpu_q4 __attribute__((vector_size(32)));
    cpu_q4 q;
    memcpy(&q, v32, sizeof q);
    __m128i lo = {q[0], q[1]}, hi = {q[2], q[3]};
    _mm_stream_si128((__m128i *)(void *)d, lo);
    _mm_stream_si128((__m128i *)(void *)(d + 16), hi);
}
/* 16 bytes to d (16-byte aligned), non-temporally. */
CPU_INLINE void cpu_stream16(unsigned char *d, const void *v16)
{
    __m128i v;
    memcpy(&v, v16, sizeof v);
    _mm_stream_si128((__m128i *)(void *)d, v);
}
#else
#define CPU_HAVE_STREAM 0
CPU_INLINE void cpu_stream_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
CPU_INLINE void cpu_stream_fence(void) {}
CPU_INLINE void cpu_stream32(unsigned char *d, const void *v32) { memcpy(d, v32, 32); }
CPU_INLINE void cpu_stream16(unsigned char *d, const void *v16) { memcpy(d, v16, 16); }
#endif

/* A block (cpu_blk_ld's order) rounded into row p at element i; `stream`:
 * non-temporal, p + elem_size * i 16-byte aligned. */
CPU_INLINE void cpu_blk_st(unsigned char *p, int half, int64_t i, const cpu_v8 *a, const cpu_v8 *b, int stream)
{
    if (half == 2) { /* each 8-lane half stored as it is (joined into 32 bytes, they went through the stack) */
        cpu_h8 lo = cpu_v8_to_f16_any(a), hi = cpu_v8_to_f16_any(b);
        if (stream) {
            cpu_stream16(p + 2 * i, &lo);
            cpu_stream16(p + 2 * i + 16, &hi);
        } else {
            memcpy(p + 2 * i, &lo, sizeof lo);
            memcpy(p + 2 * i + 16, &hi, sizeof hi);
        }
        return;
    }
    if (half) {
        cpu_u8 w = cpu_blk_bf16(a, b);
        if (stream) cpu_stream32(p + 2 * i, &w);
        else memcpy(p + 2 * i, &w, sizeof w);
        return;
    }
    if (stream) {
        cpu_stream32(p + 4 * i, a);
        cpu_stream32(p + 4 * i + 32, b);
    } else {
        memcpy(p + 4 * i, a, sizeof *a);
        memcpy(p + 4 * i + 32, b, sizeof *b);
    }
}

#endif
