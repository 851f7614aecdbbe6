/*
 * The CUDA launch planner: a pure C function from the problem (direction,
 * cols, activation element size, whether 16-byte vector access is possible)
 * and the device (compute capability) to a launch shape. No CUDA calls, so CI
 * tests it without a GPU; the CUDA backend completes the plan with the grid
 * size (an occupancy query) and the workspace size follows from that.
 */
#ifndef FUSEDNORM_PLAN_H
#define FUSEDNORM_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fn_path {
    FN_PATH_ROWS_IN_REGISTERS = 0, /* row slices in registers; clusters of CTAs on sm_90 */
    FN_PATH_TWO_PASS = 1,          /* any N, any alignment: one CTA per row, the row re-read from memory */
    FN_PATH_COLUMN_SPLIT = 2       /* backward only, chosen by the backend where two-pass partials would not
                                    * fit shared memory: row statistics first (two-pass kernel), then CTAs
                                    * that own a column range over a group of rows */
} fn_path;

typedef struct fn_plan_problem {
    int is_bwd;
    int64_t cols;
    int x_bytes;          /* 4 or 2 */
    int vec_ok;           /* every pointer/stride allows VEC-wide 16-byte access and cols % VEC == 0 */
    int cc_major;         /* device compute capability */
    int max_cluster;      /* largest cluster the device launches (1 without cluster support) */
    int wide_bwd;         /* backward: the 32-element tile is launchable (16-bit x and dy of the activation
                           * dtype, staged: the backend checks shared memory); 0 leaves it out */
    int max_tpr;          /* threads per row at most (0: 512). The SHIFT kernels take 256: with their
                           * 128 registers a CTA of more than 256 threads is alone on its SM */
    int stream;           /* forward: the streaming kernel can run this call (x, y, weight and bias of
                           * one dtype, no residual, vector access); the planner takes it for rows in
                           * its range (FN_PLAN_STREAM_FWD_*) as the two-pass path, which then streams */
} fn_plan_problem;

typedef struct fn_plan {
    fn_path path;
    int vec;              /* elements per vector access: 16/x_bytes, or 1 */
    int ept;              /* elements per thread (rows path) */
    int tpr;              /* threads per row slice */
    int rows_per_block;
    int cluster;          /* CTAs per row (1: no cluster) */
    int threads;          /* threads per CTA */
} fn_plan;

/* Rows this long without vector access take the two-pass path (plan.c). */
#define FN_PLAN_SCALAR_TWO_PASS_COLS 1024

/* Rows off a 16-byte boundary take the SHIFT kernels (realigned in shared
 * memory; the backend checks dtypes and alignment) up to this many columns,
 * and the two-pass kernels past it. Measured (H200, bf16, M = 32768, GB/s,
 * two-pass -> SHIFT): N = 1001 RMSNorm fwd 970 -> 1726, bwd 573 -> 1392,
 * LayerNorm 833 -> 1436, 566 -> 1210; N = 2047 RMSNorm 1994 -> 1898,
 * 1435 -> 1528, LayerNorm 1452 -> 1547, 1236 -> 1375; N = 4097 and more
 * 0.45-0.91x (the general kernel's per-row costs, three barriers per row). */
#define FN_PLAN_SHIFT_MAX_COLS 2048

/* Forward rows of the common call (see stream in fn_plan_problem) of at
 * least FN_PLAN_STREAM_FWD_COLS columns and at most FN_PLAN_STREAM_FWD_MAX_BYTES
 * bytes are streamed: one 512-thread CTA per row reads it twice (LayerNorm:
 * three times), the re-reads from L1, instead of holding it in a cluster of
 * CTAs. Measured (H200, % of copy, clusters -> streamed; docs/perf.md,
 * session 7): RMSNorm bf16 N = 32768 68.8 -> 89.1, 65536 60.2 -> 69.2;
 * LayerNorm bf16 32768 50.8 -> 70.8, 65536 44.4 -> 51.0; fp32 32768 RMSNorm
 * 64.5 -> 70.9, LayerNorm 55.9 -> 63.0. Longer rows no longer fit L1 twice
 * per SM: fp32 LayerNorm at 65536 lost 11%, bf16 LayerNorm at 131072 5%, so
 * the clusters keep them (past the clusters' coverage, two-pass rows of this
 * call stream anyway: RMSNorm bf16 262144 48.4 -> 56.3). At 8192 and 16384
 * the register tile is as fast or faster. */
#define FN_PLAN_STREAM_FWD_COLS 32768
#define FN_PLAN_STREAM_FWD_MAX_BYTES (128 * 1024)

/* The element-per-thread values the kernels are instantiated for (the
 * backward's 32 only for 16-bit rows with vector access; see wide_bwd). */
int fn_plan_ept_allowed(int is_bwd, int vec, int ept);

/* Threads per CTA of the two-pass kernels (one row per CTA) for this row. */
int fn_plan_two_pass_threads(int64_t cols, int x_bytes);

/* Turns pl into the two-pass plan for this row: one row per CTA of
 * fn_plan_two_pass_threads threads, no cluster. The planner's fallback, the
 * lab override and the backend's fallbacks all go through it. */
void fn_plan_use_two_pass(fn_plan *pl, int64_t cols, int x_bytes);

/* The column-split backward's second pass (FN_PATH_COLUMN_SPLIT): CTAs of
 * `threads` threads, each thread vec_w columns, so chunks = ceil(cols /
 * (threads * vec_w)) column ranges; rows cut into groups of per_group rows
 * (groups <= 65535, none empty), about 4 waves of CTAs with blocks_per_sm
 * resident per SM. One partial row per group. */
typedef struct fn_column_split {
    int64_t chunks, groups, per_group;
} fn_column_split;
fn_column_split fn_plan_column_split(int64_t rows, int64_t cols, int x_bytes, int threads, int sm_count,
                                     int blocks_per_sm);

/* Always succeeds: falls back to FN_PATH_TWO_PASS when no register plan fits. */
fn_plan fn_plan_make(const fn_plan_problem *pb);

#ifdef __cplusplus
}
#endif

#endif
