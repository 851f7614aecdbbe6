/*
 * Row kernels of the CPU backend: move one row of a tensor of any dtype into
 * or out of a contiguous fp32 scratch row, and the per-row statistics.
 *
 * Every tensor is addressed through `unsigned char *` and memcpy, so any
 * pointer alignment (even an fp32 tensor at an odd address) is correct; GCC
 * turns each memcpy into an unaligned load/store and still vectorizes. The
 * dtype switch sits outside each loop so that every loop is a plain
 * vectorizable stream. Conversions are bit-identical to fn_load/fn_store of
 * src/internal.h: bf16 uses a branch-free form of fn_f32_to_bf16, fp16 calls
 * the internal.h functions themselves (fp16 is correct but not a fast path).
 */
#ifndef FUSEDNORM_CPU_ROWS_H
#define FUSEDNORM_CPU_ROWS_H

#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float cpu_ld_f32(const unsigned char *p, int64_t i)
{
    float v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}
static inline void cpu_st_f32(unsigned char *p, int64_t i, float v) { memcpy(p + 4 * i, &v, 4); }

static inline float cpu_ld_bf16(const unsigned char *p, int64_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return fn_bits_to_f32((uint32_t)h << 16);
}
static inline float cpu_ld_f16(const unsigned char *p, int64_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return fn_f16_to_f32(h);
}

/* fn_f32_to_bf16 without the branch: the NaN test becomes a select, which the
 * vectorizer handles. The magnitude fits in int32, so a signed compare (which
 * SSE has) is exact. */
static inline uint16_t cpu_f32_to_bf16(float f)
{
    uint32_t u = fn_f32_to_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x0040u;
    int32_t magnitude = (int32_t)(u & 0x7fffffffu);
    return (uint16_t)(magnitude > 0x7f800000 ? quiet_nan : rounded);
}
static inline void cpu_st_bf16(unsigned char *p, int64_t i, float v)
{
    uint16_t h = cpu_f32_to_bf16(v);
    memcpy(p + 2 * i, &h, 2);
}
static inline void cpu_st_f16(unsigned char *p, int64_t i, float v)
{
    uint16_t h = fn_f32_to_f16(v);
    memcpy(p + 2 * i, &h, 2);
}

/* dst[i] = src[i] (as fp32). */
static inline void cpu_load_row(float *restrict dst, const void *src, fusednorm_dtype t, int64_t n)
{
    const unsigned char *p = (const unsigned char *)src;
    switch (t) {
    case FUSEDNORM_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_ld_bf16(p, i);
        break;
    case FUSEDNORM_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_ld_f16(p, i);
        break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_ld_f32(p, i);
        break;
    }
}

/* dst[i] += src[i] (as fp32). */
static inline void cpu_add_row(float *restrict dst, const void *src, fusednorm_dtype t, int64_t n)
{
    const unsigned char *p = (const unsigned char *)src;
    switch (t) {
    case FUSEDNORM_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] += cpu_ld_bf16(p, i);
        break;
    case FUSEDNORM_F16:
        for (int64_t i = 0; i < n; i++) dst[i] += cpu_ld_f16(p, i);
        break;
    default:
        for (int64_t i = 0; i < n; i++) dst[i] += cpu_ld_f32(p, i);
        break;
    }
}

/* dst[i] = round(src[i]) in dtype t. */
static inline void cpu_store_row(void *dst, fusednorm_dtype t, const float *restrict src, int64_t n)
{
    unsigned char *p = (unsigned char *)dst;
    switch (t) {
    case FUSEDNORM_BF16:
        for (int64_t i = 0; i < n; i++) cpu_st_bf16(p, i, src[i]);
        break;
    case FUSEDNORM_F16:
        for (int64_t i = 0; i < n; i++) cpu_st_f16(p, i, src[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) cpu_st_f32(p, i, src[i]);
        break;
    }
}

/* mean and rstd of one fp32 row. Row sums are accumulated in double (the
 * contract allows fp32 or wider; measured no slower than fp32 here, since the
 * pass runs over a row already in L1/L2 while the next row streams in), the
 * per-element work (h - mean) stays fp32 as in every other backend. mean is 0
 * for RMSNorm. */
static inline void cpu_row_stats(const float *restrict h, int64_t n, int layernorm, float eps, float *mean_out,
                                 float *rstd_out)
{
    float mean = 0.0f;
    if (layernorm) {
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < n; i++) sum += (double)h[i];
        mean = (float)(sum / (double)n);
    }
    double sum_sq = 0.0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < n; i++) {
        float d = h[i] - mean;
        sum_sq += (double)d * (double)d;
    }
    *mean_out = mean;
    *rstd_out = (float)(1.0 / sqrt(sum_sq / (double)n + (double)eps));
}

#endif
