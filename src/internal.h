/*
 * Internal interfaces shared by the API layer, validation and the backends.
 *
 * Data flows one way: fusednorm_fwd/bwd (api.c) copy the caller's args,
 * resolve row_stride 0 to cols, validate them (validate.c; nothing runs
 * before that passes), then call the backend named in args. Backends receive
 * the resolved copy: every present 2-D tensor has row_stride >= cols.
 */
#ifndef FUSEDNORM_INTERNAL_H
#define FUSEDNORM_INTERNAL_H

#include "fusednorm.h"

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

/* Sets this thread's message (printf-style) and returns `status`, so that
 * callers can write `return fn_error(FUSEDNORM_ERROR_..., "...", ...)`. */
fusednorm_status fn_error(fusednorm_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- validation (validate.c) ------------------------------------------- */

/* `fn` is the public function name used as the message prefix. Both expect
 * strides already resolved (0 -> cols) by the caller. */
fusednorm_status fn_validate_fwd(const fusednorm_fwd_args *a, const char *fn);
fusednorm_status fn_validate_bwd(const fusednorm_bwd_args *a, const char *fn);

/* Returns the copy with row_stride 0 replaced by cols on every 2-D tensor. */
fusednorm_fwd_args fn_resolve_fwd(const fusednorm_fwd_args *a);
fusednorm_bwd_args fn_resolve_bwd(const fusednorm_bwd_args *a);

const char *fn_dtype_name(fusednorm_dtype t);   /* "f32", "f16", "bf16", "?" */
const char *fn_norm_name(fusednorm_norm n);     /* "rmsnorm", "layernorm"     */
size_t fn_dtype_size(fusednorm_dtype t);        /* 4 or 2 (0 if out of range) */

/* ---- scalar conversions (round to nearest even on store) --------------- */

static inline float fn_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t fn_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float fn_bf16_to_f32(uint16_t h) { return fn_bits_to_f32((uint32_t)h << 16); }

static inline uint16_t fn_f32_to_bf16(float f)
{
    uint32_t u = fn_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep it quiet and a NaN */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);              /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float fn_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return fn_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {                                /* zero or subnormal: man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return fn_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fn_f32_to_f16(float f)
{
    uint32_t u = fn_f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* rounds to >= 65520: Inf */
    if (a < 0x38800000u) {                         /* below 2^-14: subnormal half or zero */
        /* value = a_float; half subnormal unit is 2^-24. Round m * 2^e to units. */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        if (e < 102) return sign;                  /* < 2^-25: rounds to zero */
        uint32_t shift = 126u - e;                 /* m * 2^(e-150) / 2^-24 = m >> (126-e) */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);    /* round mantissa to 10 bits, even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* Load element i of a tensor of dtype t as fp32 / store fp32 into it. */
static inline float fn_load(const void *p, fusednorm_dtype t, int64_t i)
{
    switch (t) {
    case FUSEDNORM_F16: return fn_f16_to_f32(((const uint16_t *)p)[i]);
    case FUSEDNORM_BF16: return fn_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
static inline void fn_store(void *p, fusednorm_dtype t, int64_t i, float v)
{
    switch (t) {
    case FUSEDNORM_F16: ((uint16_t *)p)[i] = fn_f32_to_f16(v); break;
    case FUSEDNORM_BF16: ((uint16_t *)p)[i] = fn_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* ---- backends ------------------------------------------------------------ */
/* Each takes validated, resolved args. */

fusednorm_status fn_cpu_fwd(const fusednorm_fwd_args *a);
fusednorm_status fn_cpu_bwd_workspace_size(const fusednorm_bwd_args *a, size_t *bytes);
fusednorm_status fn_cpu_bwd(const fusednorm_bwd_args *a);
/* Tests only (set between calls), so that a test can compare the CPU
 * backend's paths: nonzero skips the F16C forms of the fp16 rows
 * (fn_cpu_f16c_off), or the row pipelines (fn_cpu_pipeline_off: every call
 * on scratch rows). */
extern int fn_cpu_f16c_off, fn_cpu_pipeline_off;

/* CUDA backend (src/cuda/backend.c; src/cuda_stub.c when built without CUDA,
 * whose functions return FUSEDNORM_ERROR_UNSUPPORTED / 0). */
fusednorm_status fn_cuda_fwd(const fusednorm_fwd_args *a);
fusednorm_status fn_cuda_bwd_workspace_size(const fusednorm_bwd_args *a, size_t *bytes);
fusednorm_status fn_cuda_bwd(const fusednorm_bwd_args *a);
int fn_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif
