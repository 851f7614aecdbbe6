/*
 * The CPU backend's conversions (src/cpu/cpu_rows.h) against the scalar
 * ones of src/internal.h, which define the library's rounding: every fp16
 * bit pattern to fp32, and every one of the 2^32 fp32 bit patterns to fp16
 * and to bf16, compared bit for bit (NaN payloads and signed zeros
 * included). Each form the row kernels use is checked on its own:
 *  - the 8-lane fp16 forms (cpu_v8_from_f16, cpu_v8_to_f16) and the scalar
 *    ones of the loops' tails, built for the baseline ISA and for AVX2 (the
 *    library's two clones of its row kernels);
 *  - the bf16 row loop (the scalar form, vectorized);
 *  - where the CPU has F16C and AVX2, the F16C row functions (loads with
 *    their fallback for Inf / NaN blocks, plain and adding; stores), and
 *    the forward's and backward's fused fp16 outputs against their scalar
 *    arithmetic on random rows.
 *
 * Usage: test_cpu_convert [STRIDE]  (default 1: every pattern; a larger stride
 * checks every STRIDE-th block of 2^16 fp32 patterns, for slow builds).
 */
#include "cpu/cpu_rows.h"

#include <stdio.h>
#include <stdlib.h>

#define BLOCK 65536
/* the loops' length, not a constant to them (their tails are then not
 * folded away, as in the library) */
static volatile int64_t block_len = BLOCK;

/* One block of fp32 patterns: h (8 lanes), hs (scalar), b (bf16 row loop). */
#define CONVERT_LOOPS(SUFFIX, ATTR)                                                                                  \
    ATTR static void f32_block_##SUFFIX(const float *in, uint16_t *h, uint16_t *hs, uint16_t *b)                     \
    {                                                                                                                 \
        const int64_t n = block_len;                                                                                  \
        for (int64_t i = 0; i + 8 <= n; i += 8) {                                                                     \
            cpu_v8 v = cpu_v8_load(in + i);                                                                           \
            cpu_v8_st_f16((unsigned char *)h, i, &v);                                                                 \
        }                                                                                                             \
        for (int64_t i = 0; i < n; i++) hs[i] = cpu_f32_to_f16(in[i]);                                                \
        cpu_store_row(b, FUSEDNORM_BF16, in, n);                                                                      \
    }                                                                                                                 \
    ATTR static void f16_block_##SUFFIX(const uint16_t *in, float *out, float *outs)                                  \
    {                                                                                                                 \
        const int64_t n = block_len;                                                                                  \
        for (int64_t i = 0; i + 8 <= n; i += 8) {                                                                     \
            cpu_v8 v = cpu_v8_ld_f16((const unsigned char *)in, i);                                                   \
            cpu_v8_store(out + i, &v);                                                                                \
        }                                                                                                             \
        for (int64_t i = 0; i < n; i++) outs[i] = cpu_f16_to_f32(in[i]);                                             \
    }

CONVERT_LOOPS(base, )
/* as the library's clones (norm_cpu.c, CPU_ROW_KERNEL): GCC on x86-64 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_AVX2_LOOPS 1
CONVERT_LOOPS(avx2, __attribute__((target("avx2"))))
#endif

static long failures = 0, checked = 0;

static void report(const char *what, const char *isa, uint32_t in, uint32_t got, uint32_t want)
{
    long k;
    #pragma omp atomic capture
    k = ++failures;
    if (k <= 20)
        #pragma omp critical
        printf("FAIL %s (%s): input 0x%08x -> 0x%08x, internal.h gives 0x%08x\n", what, isa, in, got, want);
}

static void expect16(const char *what, const char *isa, uint32_t in, uint16_t got, uint16_t want)
{
    if (got != want) report(what, isa, in, got, want);
}
static void expect32(const char *what, const char *isa, uint32_t in, float got, uint32_t want)
{
    if (fn_f32_to_bits(got) != want) report(what, isa, in, fn_f32_to_bits(got), want);
}

static void check_f16_to_f32(const char *isa, void (*block)(const uint16_t *, float *, float *))
{
    static uint16_t in[BLOCK];
    static float out[BLOCK], outs[BLOCK];
    for (int i = 0; i < BLOCK; i++) in[i] = (uint16_t)i;
    block(in, out, outs);
    for (uint32_t i = 0; i < BLOCK; i++) {
        uint32_t want = fn_f32_to_bits(fn_f16_to_f32((uint16_t)i));
        expect32("f16 -> f32, 8 lanes", isa, i, out[i], want);
        expect32("f16 -> f32, scalar", isa, i, outs[i], want);
    }
    checked += 2 * BLOCK;
}

/* The F16C loads: every fp16 pattern in order (blocks of 8 with and
 * without Inf / NaN lanes), then each block of 8 also holding one NaN or
 * Inf lane at every position (the fallback over ordinary lanes), plain and
 * added to 1.5 (the residual stream's add). */
static void check_f16c_loads(void)
{
    static uint16_t in[BLOCK];
    static float out[BLOCK];
    const uint16_t specials[] = {0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xfdff, 0x7fff};
    for (int pass = 0; pass < 1 + 6 * 8; pass++) {
        for (int i = 0; i < BLOCK; i++) in[i] = (uint16_t)i;
        if (pass > 0) /* mostly ordinary lanes: fold exponent-31 patterns down, then plant one special per 8 */
            for (int i = 0; i < BLOCK; i++) {
                if ((in[i] & 0x7c00) == 0x7c00) in[i] ^= 0x4000;
                if (i % 8 == (pass - 1) % 8) in[i] = specials[(pass - 1) / 8];
            }
        for (int add = 0; add < 2; add++) {
            for (int i = 0; i < BLOCK; i++) out[i] = 1.5f;
            cpu_load_row_f16c(out, (const unsigned char *)in, block_len, add);
            for (int i = 0; i < BLOCK; i++) {
                float v = fn_f16_to_f32(in[i]);
                expect32(add ? "f16 -> f32, F16C row, added" : "f16 -> f32, F16C row", "f16c", in[i], out[i],
                         fn_f32_to_bits(add ? 1.5f + v : v));
            }
            checked += BLOCK;
        }
    }
}

/* The fused fp16 outputs against their scalar arithmetic, on random rows of
 * every length 1..67 (the tails) and 256 of 4099, inputs spread over the
 * range where fp16 rounds normally and into its subnormals and overflow (an
 * fp32 result one ulp off changes its fp16 rounding about once in 4000). */
static uint32_t rng = 12345u;
static float rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    float u = (float)(rng >> 8) / 16777216.0f;                  /* [0, 1) */
    float e = (float)((int)(rng & 31u) - 18);                   /* 2^-18 .. 2^13 */
    return (u - 0.5f) * 2.0f * ldexpf(1.0f, (int)e);
}
static void check_f16c_fused(void)
{
    enum { MAXN = 4099 };
    static float h[MAXN], wf[MAXN], bf[MAXN];
    static uint16_t y[MAXN];
    for (int row = 0; row < 67 + 256; row++) {
        const int64_t n = row < 67 ? row + 1 : MAXN;
        for (int64_t i = 0; i < n; i++) h[i] = rnd(), wf[i] = rnd(), bf[i] = rnd();
        const float mean = rnd(), rstd = fabsf(rnd()) + 0.5f, mean_g = rnd(), mean_xg = rnd();
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            cpu_fwd_normalize_f16c((unsigned char *)y, h, wf, with_bias ? bf : NULL, mean, rstd, n);
            for (int64_t i = 0; i < n; i++) {
                float v = ((h[i] - mean) * rstd) * wf[i];
                if (with_bias) v += bf[i];
                expect16("forward y, F16C", "f16c", fn_f32_to_bits(h[i]), y[i], fn_f32_to_f16(v));
            }
            checked += n;
        }
        cpu_bwd_dh_f16c((unsigned char *)y, h, bf, wf, rstd, mean_g, mean_xg, n);
        for (int64_t i = 0; i < n; i++)
            expect16("backward dx, F16C", "f16c", fn_f32_to_bits(h[i]), y[i],
                     fn_f32_to_f16(rstd * ((bf[i] * wf[i] - mean_g) - h[i] * mean_xg)));
        checked += n;
    }
}

/* internal.h's conversions of a block, once for every form checked. */
static void reference_block(const float *in, uint16_t *h, uint16_t *b)
{
    for (int i = 0; i < BLOCK; i++) {
        h[i] = fn_f32_to_f16(in[i]);
        b[i] = fn_f32_to_bf16(in[i]);
    }
}

/* One thread's buffers for a block of fp32 patterns. */
typedef struct {
    float in[BLOCK];
    uint16_t wh[BLOCK], wb[BLOCK], h[BLOCK], hs[BLOCK], b[BLOCK];
} f32_buffers;

static void check_f32_block(const char *isa, void (*block)(const float *, uint16_t *, uint16_t *, uint16_t *),
                            uint32_t first, f32_buffers *t)
{
    block(t->in, t->h, t->hs, t->b);
    for (int i = 0; i < BLOCK; i++) {
        expect16("f32 -> f16, 8 lanes", isa, first + (uint32_t)i, t->h[i], t->wh[i]);
        expect16("f32 -> f16, scalar", isa, first + (uint32_t)i, t->hs[i], t->wh[i]);
        expect16("f32 -> bf16, row loop", isa, first + (uint32_t)i, t->b[i], t->wb[i]);
    }
}

static void check_f32_block_f16c(uint32_t first, f32_buffers *t)
{
    cpu_store_row_f16c((unsigned char *)t->h, t->in, block_len);
    for (int i = 0; i < BLOCK; i++) expect16("f32 -> f16, F16C row", "f16c", first + (uint32_t)i, t->h[i], t->wh[i]);
}

int main(int argc, char **argv)
{
    long stride = argc > 1 ? strtol(argv[1], NULL, 10) : 1;
    if (stride < 1 || stride > 65536) {
        fprintf(stderr, "usage: %s [STRIDE]  (1..65536: every STRIDE-th block of 2^16 fp32 patterns)\n", argv[0]);
        return 2;
    }
    int avx2 = 0;
#ifdef HAVE_AVX2_LOOPS
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2");
#endif
    const int f16c = cpu_f16c();
    check_f16_to_f32("baseline", f16_block_base);
#ifdef HAVE_AVX2_LOOPS
    if (avx2) check_f16_to_f32("avx2", f16_block_avx2);
#endif
    if (f16c) {
        check_f16c_loads();
        check_f16c_fused();
    }
    /* blocks of 2^16 patterns, split over the OpenMP threads (2^32 patterns
     * take about a minute on one core) */
    const long nblocks = (65536 + stride - 1) / stride;
    long blocks = 0;
    #pragma omp parallel reduction(+ : blocks)
    {
        f32_buffers *t = malloc(sizeof *t);
        if (!t) {
            fprintf(stderr, "test_cpu_convert: out of memory\n");
            exit(2);
        }
        #pragma omp for schedule(dynamic, 16)
        for (long k = 0; k < nblocks; k++) {
            const uint32_t first = (uint32_t)((uint64_t)k * (uint64_t)stride * BLOCK);
            for (int i = 0; i < BLOCK; i++) t->in[i] = fn_bits_to_f32(first + (uint32_t)i);
            reference_block(t->in, t->wh, t->wb);
            check_f32_block("baseline", f32_block_base, first, t);
#ifdef HAVE_AVX2_LOOPS
            if (avx2) check_f32_block("avx2", f32_block_avx2, first, t);
#endif
            if (f16c) check_f32_block_f16c(first, t);
            blocks++;
        }
        free(t);
    }
    checked += blocks * (long)BLOCK * (3 * (avx2 ? 2 : 1) + (f16c ? 1 : 0));
    printf("fp16 -> fp32: all 65536 patterns; fp32 -> fp16 / bf16: %ld blocks of %d patterns (stride %ld); "
           "8-lane and scalar forms: %s; F16C row functions: %s\n",
           blocks, BLOCK, stride, avx2 ? "baseline and AVX2 builds" : "baseline build (no AVX2 build or CPU)",
           f16c ? "checked" : CPU_HAVE_F16C ? "not checked (no F16C and AVX2 here)" : "not built (not GCC on x86-64)");
    printf("%ld passed, %ld failed\n", checked - failures, failures);
    return failures ? 1 : 0;
}
