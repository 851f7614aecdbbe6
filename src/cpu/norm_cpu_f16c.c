/*
 * fp16 rows through the row pipelines (cpu_pipeline.h), this translation
 * unit built for AVX2 + F16C: the rows' conversions are then one
 * instruction per 8 elements (cpu_rows.h, cpu_blk_ld and
 * cpu_blk_st), where the 8-lane integer forms take 10-14 operations
 * and made the pipeline slower than the scratch rows. norm_cpu.c calls these
 * only where cpu_f16c() says the CPU has both; the arithmetic is the other
 * pipelines' and the conversions are bitwise internal.h's, so the results
 * are the scratch rows' bit for bit.
 *
 * Elsewhere (not GCC on x86-64) cpu_f16c() is 0 and the entry points are
 * stubs that are never called.
 */
/* The condition of cpu_rows.h's CPU_HAVE_F16C, tested before any include:
 * every function of this translation unit, the inline ones of cpu_rows.h
 * included, is built for the target. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FN_CPU_NO_ISA_CLONES)
#pragma GCC target("avx2,f16c")
#define CPU_PIPE_KERNEL
#define CPU_PIPE_NAME(n) fn_cpu_##n##_f16c
#define CPU_PIPE_HALF16 2
#include "cpu/cpu_pipeline.h"
_Static_assert(CPU_HAVE_F16C, "cpu_rows.h's F16C condition and this file's agree");
#else
#include "cpu/cpu_rows.h"
void fn_cpu_fwd_pipeline_thread_f16c(const fusednorm_fwd_args *a, const float *wf, const float *bf, int stream_y,
                                     int stream_ro, int64_t *shared_next, int64_t grab, float *stage)
{
    (void)a, (void)wf, (void)bf, (void)stream_y, (void)stream_ro, (void)shared_next, (void)grab, (void)stage;
}
void fn_cpu_bwd_pipeline_rows_f16c(const fusednorm_bwd_args *a, int64_t r0, int64_t r1, const float *wf,
                                   float *dw_partial, float *db_partial, int stream_dx, int stream_dr, float *stage)
{
    (void)a, (void)r0, (void)r1, (void)wf, (void)dw_partial, (void)db_partial, (void)stream_dx, (void)stream_dr,
        (void)stage;
}
#endif
