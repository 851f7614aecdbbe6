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
    FN_PATH_COLUMN_SPLIT = 2,      /* backward only, chosen by the backend where two-pass partials would not
                                    * fit shared memory: row statistics first (two-pass kernel), then CTAs
                                    * that own a column range over a group of rows */
    FN_PATH_HELD = 3               /* forward only, the streaming kernel's calls (see stream below) on rows
                                    * of FN_PLAN_HELD_MIN_VECTORS vectors up to the streamed ones (and their
                                    * rows off a 16-byte boundary: odd_held below): each row
                                    * held whole in registers, ept / vec raw vectors per thread (of x, and
                                    * of the residual), one CTA per group of rows_per_block rows (no
                                    * persistent grid, no staging) */
} fn_path;

typedef struct fn_plan_problem {
    int is_bwd;
    int64_t cols;
    int x_bytes;          /* 4 or 2 */
    int vec_ok;           /* every pointer/stride allows VEC-wide 16-byte access and cols % VEC == 0 */
    int cc_major;         /* device compute capability */
    int max_cluster;      /* largest cluster the device launches (1 without cluster support) */
    int wide_bwd;         /* backward: the 32-element tile is launchable (x and dy of the activation dtype,
                           * staged: the backend checks shared memory; fp32 the common call only, one
                           * stage, at FN_PLAN_F32_BWD_WIDE_COLS); 0 leaves it out */
    int max_tpr;          /* threads per row at most (0: 512). The SHIFT kernels take 256: with their
                           * 128 registers a CTA of more than 256 threads is alone on its SM */
    int stream;           /* forward: the streaming kernel can run this call (FN_STREAM_*: x, y, weight
                           * and bias of one dtype, vector access; with a residual stream of that dtype
                           * or without one); the planner takes it for rows in its range
                           * (FN_PLAN_STREAM_FWD_*) as the two-pass path, which then streams.
                           * Backward: FN_STREAM_RESIDUAL for the call with dresidual_out (its fp32
                           * rows keep clusters of at most 8), else FN_STREAM_NONE */
    int w32;              /* forward, with stream set: the weight and bias are fp32 with 16-bit x, which
                           * the held kernel reads and the streaming kernel does not (never streamed) */
    int odd_held;         /* forward, rows off a 16-byte boundary (vec_ok 0) that the held kernel's ODD
                           * form can run (FN_STREAM_COMMON or FN_STREAM_RESIDUAL, as stream: one dtype,
                           * every activation at the same offset within 16 bytes in each row, the weight
                           * and bias aligned; the backend checks): held as FN_PATH_HELD with vec 16 /
                           * x_bytes (fn_plan_use_held_odd) from FN_PLAN_HELD_ODD_MIN_VECTORS whole
                           * vectors to FN_PLAN_HELD_MAX_VECTORS */
    int is_ln;            /* LayerNorm. Backward: its fp32 rows take 16 elements a thread where RMSNorm's
                           * take 8 in CTAs of more than 256 threads (see plan.c); forward: its residual
                           * call stays off the register tile (fn_plan_fwd_rows_cluster_call) */
    int64_t rows;         /* backward: the row count (0: not known). Small problems (FN_PLAN_SMALL_BWD_*)
                           * take at most 8 elements a thread, spread over more threads and CTAs */
    int no_tile;          /* forward: not the register tile over a cluster (fn_plan_fwd_rows_cluster_call),
                           * held or streamed as before step 90 (the lab's FUSEDNORM_FWD_ROWS_CLUSTER=0) */
} fn_plan_problem;

/* The backward of a small problem (rows * cols up to FN_PLAN_SMALL_BWD_ELEMENTS,
 * 16-bit rows of up to FN_PLAN_SMALL_BWD_MAX_COLS columns, fp32 rows of up to
 * FN_PLAN_SMALL_BWD_MAX_COLS_F32; rows of 16-byte vectors, not the SHIFT
 * kernels' nor the residual call's: the ones measured) fills less than one wave of its planned grid
 * and is latency-bound: it takes at most 8 elements a thread, twice the
 * threads or CTAs a row, and CTAs of 512 threads cost nothing extra (H200, M *
 * N = 2^20, lab plans, us, RMSNorm / LayerNorm: bf16 64 x 16384 in 8 x 512 x 4
 * 23.4 -> 18.5 / 28.1 -> 20.6; 256 x 4096 in 8 x 512 16.1 -> 14.3 / 18.5 ->
 * 16.5; 1024 x 1024 in 8 x 128 13.1 -> 12.8 / 17.8 -> 15.4; 4096 x 256 in 8 x
 * 32 13.0 -> 11.3 / 18.2 -> 15.5; fp32 256 x 4096 in 8 x 256 x 2 16.1 -> 14.9
 * / 17.3 -> 16.1; docs/perf.md step 86). */
#define FN_PLAN_SMALL_BWD_ELEMENTS (1 << 20)
#define FN_PLAN_SMALL_BWD_MAX_COLS 16384
#define FN_PLAN_SMALL_BWD_MAX_COLS_F32 4096

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
/* The backward's limit (for the calls the ODD tile does not take, see
 * fn_plan_bwd_odd: activations at different offsets or of other dtypes),
 * with the PLAIN SHIFT variants at tpr 160/192/224
 * (session 8, tuning step 47; bf16, M = 32768, two-pass -> SHIFT): RMSNorm
 * N = 3001 1.35x, 4097 1.13x, 8191 1.24x, 12289 1.07x; LayerNorm 1.42x,
 * 1.18x, 1.46x, 0.98x. The forward lost past 2048 (0.57-1.02x). */
#define FN_PLAN_SHIFT_MAX_COLS_BWD 8192

/* fn_plan_problem.stream */
enum { FN_STREAM_NONE = 0, FN_STREAM_COMMON = 1, FN_STREAM_RESIDUAL = 2 };

/* Forward rows the streaming kernel can run (see stream in fn_plan_problem)
 * are streamed past FN_PLAN_STREAM_FWD_BYTES bytes of x per row (the common
 * call: past what the held path holds) or from FN_PLAN_STREAM_FWD_RES_BYTES
 * (with a residual stream): one 512-thread CTA per row reads it twice
 * (LayerNorm's statistics in one read), the re-read from L1 or L2, instead
 * of holding it in registers or a cluster. Measured (H200, M = 32768 or
 * M * N = 2^30, GB/s, planner before -> streamed; docs/perf.md, sessions 7
 * and 8):
 *  - RMSNorm bf16 N = 65536 2562 -> 2944, 131072 2286 -> 2371; LayerNorm
 *    bf16 65536 2140 -> 2209, 131072 1697 -> 2008, 262144 1651 -> 2049;
 *    fp32 LayerNorm 65536 2142 -> 2376, 131072 2061 -> 2397; RMSNorm fp32
 *    32768 +10%;
 *  - shorter rows are held (bf16 32768: streamed 3827, held 3965; LayerNorm
 *    3034 / 3972; session 9);
 *  - with a residual stream (bf16 / fp32 rows of 32 KiB and more): RMSNorm
 *    bf16 16384 2297 -> 3811, 32768 2134 -> 3238, 65536 1932 -> 2657,
 *    262144 2310 -> 2645, LayerNorm bf16 16384 2103 -> 3320; fp32 8192 3292
 *    -> 3837, 16384 3177 -> 3240, 65536 2461 -> 2688; shorter rows are held
 *    (the register tiles lost to streaming there: bf16 8192 0.98x, fp32
 *    4096 0.87x). */
#define FN_PLAN_STREAM_FWD_BYTES (64 * 1024)
#define FN_PLAN_STREAM_FWD_RES_BYTES (32 * 1024)

/* The forward's rows the streaming kernel can run (stream != FN_STREAM_NONE)
 * and does not take, of FN_PLAN_HELD_MIN_VECTORS 16-byte vectors or more,
 * take FN_PATH_HELD (up to 4096 vectors: 64 KiB, FN_PLAN_STREAM_FWD_BYTES;
 * with fp32 weights and 16-bit x, w32, likewise, and never streamed).
 * The common call holds U = 8 vectors per thread where that leaves more
 * than a warp per row, else U = 4; the residual call (x and the residual
 * stream) U = 4 of each. ceil(vectors / U) threads per row (a power of two
 * up to 32, else whole warps), rows of up to 256 threads sharing a CTA.
 * Small register budgets (40 registers at U = 4, 64 at U = 8 or with the
 * residual) let the SM keep 1024-2048 threads resident, whose CTAs cover
 * each other's reductions, where the register tiles keep a persistent grid
 * and a pipeline. Measured (H200, M = 32768, % of copy, register tile ->
 * held at U = 4 / 8, docs/perf.md session 9, step 48):
 *  - RMSNorm bf16 1024 75.8 -> 77.7 / 76.0, 2048 82.4 -> 85.5 / 83.1, 3000
 *    76.7 -> 86.1 / 86.1, 4096 83.3 -> 90.1 / 89.7, 8192 85.6 -> 92.0 / 91.7,
 *    12000 84.1 -> 92.0 / 91.9, 16384 89.4 -> 92.1 / 92.1;
 *  - LayerNorm bf16 1024 71.3 -> 71.7 / 66.9, 2048 78.4 -> 80.7 / 79.4, 3000
 *    72.2 -> 72.9 / 83.6, 4096 78.4 -> 85.5 / 86.9, 8192 83.3 -> 87.4 /
 *    89.8, 12000 67.6 -> 91.6 / 92.2, 16384 85.3 -> 91.4 / 91.1;
 *  - RMSNorm fp32 1024 85.1 -> 85.2 / 83.7, 2048 87.1 -> 89.7 / 90.0, 4096
 *    89.4 -> 91.7 / 91.9, 8192 90.8 -> 92.4 / 92.3, 12000 82.3 -> - / 93.3,
 *    16384 91.9 -> - / 93.3;
 *  - the residual call (register tile -> held, U = 4): RMSNorm bf16 1024
 *    79.4 -> 85.5, 4096 86.7 -> 92.4, 8192 87.2 -> 93.0; LayerNorm bf16
 *    1024 75.3 -> 81.9, 8192 57.6 -> 92.4; fp32 1024 89.6 -> 91.2;
 *  - N = 256 (32 vectors) lost: LayerNorm bf16 51.2 -> 43.6 at U = 4. */
#define FN_PLAN_HELD_MIN_VECTORS 128
#define FN_PLAN_HELD_MAX_VECTORS (FN_PLAN_STREAM_FWD_BYTES / 16)
/* fp32 rows are held from 32 vectors (N = 128; U = 4, 8 to 32 threads a
 * row, several rows a CTA): register tile -> held, GB/s, RMSNorm / LayerNorm
 * 128 2157 -> 2390 / 2087 -> 2202, 192 2531 -> 2700 / 2453 -> 2524, 256 2767
 * -> 2945 / 2717 -> 2789, 384 2103 -> 3293 / 1737 -> 3040, 448 3126 -> 3397
 * / 3049 -> 3207; with the residual 256 3288 -> 3569, 384 3058 -> 3774
 * (docs/perf.md step 70). 16-bit rows of 32..64 vectors lost for LayerNorm
 * (bf16 256 52.7 -> 47.4% of copy, 448 59.3 -> 54.7%) and keep the tiles. */
#define FN_PLAN_HELD_F32_MIN_VECTORS 32
/* The common call with fp32 weight and bias (w32) is held from 512 vectors:
 * four 16-byte parameter loads per vector of x (LayerNorm) outweighed the
 * held layout on short rows (register tile -> held, bf16/w32, % of copy:
 * LayerNorm 1024 70.7 -> 67.3, 2048 77.9 -> 74.1, 4096 78.7 -> 85.9, 8192
 * 83.1 -> 90.1, 32768 50.9 -> 75.3; RMSNorm 1024 75.2 -> 76.1, 2048 82.6 ->
 * 84.4, 4096 83.5 -> 89.4, 8192 85.9 -> 91.7, 32768 68.9 -> 93.4). */
#define FN_PLAN_HELD_W32_MIN_VECTORS 512
/* Rows off a 16-byte boundary (odd_held) are held from this many whole
 * vectors where a row's threads number at least 2 * (VEC - 1), one for each
 * head and tail element (bf16 from 33 whole vectors, fp32 from 32): the
 * SHIFT tile and two-pass kernels they took ran at 17-56% of copy there.
 * Measured (H200, M = 32768, % of copy, before -> held; docs/perf.md,
 * step 59): RMSNorm bf16 513 16.6 -> 62.4, 1001 39.6 -> 76.0, 2047 55.8 ->
 * 84.6, 4097 45.9 -> 84.1, 8191 54.5 -> 87.2, 16383 52.7 -> 88.9; fp32 4097
 * 70.0 -> 92.9; LayerNorm bf16 4097 34.3 -> 70.7; RMSNorm + residual bf16
 * 4097 54.2 -> 92.6. U as for an aligned row, and 4 where that makes rows
 * of 128 or 256 threads (step 60: bf16 4097 84.2 -> 90.5, 8191 87.4 -> 94.0). */
#define FN_PLAN_HELD_ODD_MIN_VECTORS 32

/* Rows of more than 64 KiB that the planner would stream (fn_plan_streams,
 * not w32) are held instead over a cluster of CTAs on sm_90 (FN_PATH_HELD
 * with cluster > 1): U = 8 raw vectors per thread (4 with the residual),
 * each CTA a contiguous slice of the row, the row sums exchanged in
 * distributed shared memory. The smallest power-of-two cluster (2 or more)
 * of CTAs of up to FN_PLAN_HELD_SMALL_CTA_THREADS threads, if that is at
 * most FN_PLAN_HELD_SMALL_CTA_MAX_CLUSTER CTAs; else of up to
 * FN_PLAN_HELD_CLUSTER_CTA_THREADS threads, at most FN_PLAN_HELD_MAX_CLUSTER;
 * else the row streams. Measured (H200, % of copy, M * N = 2^30, streamed
 * -> clustered, docs/perf.md session 10, step 53): RMSNorm bf16 65536 73.9
 * -> 81.3 (C = 4 of 256 threads), 131072 63.0 -> 79.3 (8 of 256), 262144
 * 59.1 -> 73.9 (8 of 512), 524288 57.7 -> 62.9 (16 of 512); LayerNorm bf16
 * 65536 53.9 -> 70.0, 131072 49.3 -> 64.8, 262144 49.2 -> 59.0; fp32
 * RMSNorm 32768 76.8 -> 81.6, 65536 65.3 -> 80.0, 131072 61.8 -> 74.4; the
 * residual call bf16 65536 67.2 -> 81.8, fp32 32768 68.2 -> 83.4. CTAs of
 * 256 threads beat 512 where both make clusters of 8 or fewer (bf16 131072
 * 75.1 -> 79.0, fp32 65536 75.7 -> 79.6). The backend caps LayerNorm's
 * clusters at FN_FWD_LN_MAX_CLUSTER: in clusters of 16 it lost to streaming
 * (bf16 524288 49.5 -> 41.9, fp32 262144 58.0 -> 46.3, residual bf16 262144
 * 56.9 -> 48.7), where RMSNorm gained (57.7 -> 62.9, 60.6 -> 64.4, 62.2 ->
 * 70.9). The launch asks for load-balancing cluster scheduling (step 56:
 * bf16 RMSNorm 1.02-1.12x, LayerNorm 1.00-1.06x). */
#define FN_PLAN_HELD_SMALL_CTA_THREADS 256
#define FN_PLAN_HELD_SMALL_CTA_MAX_CLUSTER 8
#define FN_PLAN_HELD_CLUSTER_CTA_THREADS 512
#define FN_PLAN_HELD_MAX_CLUSTER 16
#define FN_FWD_LN_MAX_CLUSTER 8
/* LayerNorm's forward call of the register tile (fn_plan_fwd_rows_cluster_call)
 * takes clusters of 16 on the rows that fill one exactly, where the lab
 * measured them faster after step 100 (docs/perf.md step 101, % of copy,
 * planner before -> 16 CTAs at three stages): fp32 131072 in 16 x 256 x 32
 * 68.1 (held) -> 88.0, 16-bit 131072 in 16 x 256 80.2 (8 x 512) -> 83.2,
 * 262144 in 16 x 512 57.7 (streamed) -> 77.0; fp32 262144 in 16 x 512 x 32
 * with one stage beside its weight and bias cache (norm_fwd.cu, ONE; step
 * 102). Other rows and calls: FN_FWD_LN_MAX_CLUSTER. The backend's
 * max_cluster for such a call (every dtype alike). */
int fn_plan_fwd_ln_max_cluster(int64_t cols);

/* The fp32 backward's 32-element tile (one stage refilled as it drains:
 * norm_bwd.cu, bwd_stages) only on the rows it fills exactly, 16 x 512 x 32
 * = 262144 columns (the column split's before; 2405 -> 3325 GB/s RMSNorm,
 * 2403 -> 3182 LayerNorm, docs/perf.md step 102). Its form with idle
 * columns (a run-time tpr) hit an illegal instruction at 200000 and is not
 * launched (norm_bwd.cu launch_plain); 131072 in 8 x 512 x 32 lost to 16 x
 * 512 x 16 (87.9 against 98.4% of copy). */
#define FN_PLAN_F32_BWD_WIDE_COLS 262144

/* The fp32 backward's rows that take 16 x 160 x 4 (to 10240 columns) or
 * 16 x 256 x 3 (a cluster of 3), more CTAs resident per SM than the
 * search's 2 x 288..384 (plan.c, docs/perf.md step 80). */
#define FN_PLAN_F32_BWD_RESIDENT_MIN_COLS 9216
#define FN_PLAN_F32_BWD_RESIDENT_MAX_COLS 12288

/* RMSNorm's forward of the common call (fn_plan_fwd_rows_cluster_call:
 * x, y, weight and bias of one dtype, 16-byte vectors, no residual, sm_90;
 * fp32 only with a weight) on rows past 64 KiB takes the register tile over a
 * cluster (fn_plan_use_fwd_rows_cluster): the fewest CTAs of up to
 * FN_PLAN_FWD_ROWS_CLUSTER_SMALL_CTA threads where at most
 * FN_PLAN_FWD_ROWS_CLUSTER of them hold the row (to 65536 columns), each the
 * fewest whole warps that cover its slice; past that, FN_PLAN_FWD_ROWS_CLUSTER
 * CTAs of 512 threads that the row fills exactly (131072 columns: the one
 * such plan run on the GPU); one row a CTA. A persistent grid, the next row staged (cp.async)
 * while this one is reduced, the row sums met by the cluster exchange
 * (common.cuh), where the held kernel launches a cluster per row and meets at
 * a cluster barrier. Measured (H200, M * N = 2^30 or M = 32768, bf16, % of
 * copy, held -> register tile, docs/perf.md step 90): 40000 70.4 -> 84.9 (5
 * x 256), 49152 74.3 -> 90.0 (6 x 256), 65536 82.0 -> 91.5 (8 x 256; 4 x
 * 512 88.4), 131072 81.3 -> 87.7 (8 x 512),
 * fp16 65536 82.3 -> 92.7, 131072 81.2 -> 89.8. Left held: clusters past 8
 * (196608 69.2 -> 62.1 in 12 x 512, 67.3 in 16 x 384; 163840 76.5 -> 61.7
 * in 16 x 320; 262144 75.7 -> 76.4 in 16 x 512), and the inexact rows past
 * 65536, which measured mixed (65544 63.5 -> 77.1 in 8 x 288, 64.2 in 5 x
 * 416; 100000 74.5 -> 67.9 in 8 x 416, 67.6 in 7 x 448), and the 16-bit exact
 * tiles of fewer than 512 threads past 65536 (98304 72.7 -> 74.6 in 8 x 384,
 * 75.6 in 6 x 512; 67.7 in 16 x 384 at 16 elements). LayerNorm lost
 * with two exchanges a row (65536 72.2 -> 67.1; step 92's merged exchange:
 * 56.8) and takes the same tiles since its sum and squares meet in one
 * (step 96: 72.1 -> 78.3; fp32 32768 77.9 -> 88.3), within the backend's
 * FN_FWD_LN_MAX_CLUSTER.
 *
 * fp32 with a weight (steps 91, 93): staged and met by the exchange in its
 * PLAIN kernels (norm_fwd.cu). Rows that fill 3, 4, 8 or 16 CTAs of 256
 * threads at 32 elements exactly take those (held -> tile, session 22:
 * 24576 75.2 -> 92.4, 32768 83.4 -> 93.8, 65536 82.0 -> 94.2, 131072 76.1 ->
 * 93.7; at 16 elements 90.1, 92.1, 93.5, 92.6); the others the 16-element
 * tile: the rule above to 32768 columns (20000 72.0 -> 90.8 in 5 x 256), 8
 * x 384 (49152 73.8 -> 94.8; 6 x 256 at 32 elements 93.7) and 16 x 384
 * (98304 71.3 -> 95.0). 262144 in 16 x 512 at 32 elements, staged since
 * step 99 (common.cuh, stage_cap): held 72.7 -> 96.9 (unstaged it ran at
 * 60.1). Without a weight the same tiles (step 95: a weight of ones in the
 * cache; 49152 83.9 -> 94.7, 98304 76.4 -> 95.6; 262144 77.2 -> 97.6).
 *
 * Clusters of 16 where the device launches them (RMSNorm: the backend's
 * max_cluster; LayerNorm stops at FN_FWD_LN_MAX_CLUSTER), step 99, % of copy,
 * planner before -> 16 CTAs: 16-bit 131072 in 16 x 256 at three stages
 * (norm_fwd.cu) 89.7 -> 92.0 (8 x 512 before; two stages 85.6), 16-bit
 * 262144 in 16 x 512 75.7 -> 78.7 (fp16 79.2); the residual call: bf16
 * 131072 in 16 x 256 81.0 -> 86.2, 262144 in 16 x 512 76.1 -> 80.8, fp32
 * 131072 in 16 x 512 x 16 77.3 -> 95.0 (two staged inputs in 128 KiB, which
 * stage_cap lets a 512-thread CTA over a cluster take). fp32 262144 in 16 x
 * 512 x 32 with one stage refilled at each row's start (norm_fwd.cu, ONE;
 * step 103, H100, streamed -> tile: 1905 -> 2946 GB/s, 1.546x).
 *
 * The residual call (steps 93, 94) from FN_PLAN_STREAM_FWD_RES_BYTES (32
 * KiB) takes the fewest CTAs of up to 256 threads, at most 8 (its general
 * kernel: x and the residual staged, the exchange), 32 elements a thread
 * (fp32: 16, only rows that fill the tile exactly, and 65536 in 16 x 256),
 * and no CTA of 512 (two staged inputs pass FN_MAX_STAGE_BYTES: unstaged,
 * 131072 80.9 -> 46.5). fp32 (step 94, the general kernel over a cluster,
 * held -> tile, session 22): 8192 90.1 -> 94.0 (2 x 256), 16384 85.5 ->
 * 92.1, 32768 84.9 -> 94.2, 65536 82.5 -> 93.8 (16 x 256; 8 x 256 at 32
 * elements, unstaged: 70.6); 12292 82.3 -> 80.2 in 4 x 224 stays held.
 * bf16, streamed or held -> tile (session 22): 16384 86.2 / 90.1 -> 91.2 (2
 * x 256; 93.3 in 2 x 512 at 16 elements), 24576 80.9 -> 90.1, 32768 84.1
 * -> 90.8, 40000 74.7 -> 92.9, 49152 79.5 -> 93.8, 65536 83.3 -> 92.4, fp16
 * 65536 82.6 -> 92.2; past 65536 held (98304 76.0 against 62.9 in 16 x 384,
 * 131072 80.9 against 75.5 in 16 x 512). */
/* LayerNorm's residual call (step 111, session 36) takes the same tiles past
 * 64 KiB, its clusters capped as its common call's (fn_plan_fwd_ln_max_cluster),
 * and fp32 65536 in 8 x 512 x 16 where clusters stop at 8 (RMSNorm's 16 x
 * 256 needs 16). Measured (H200, % of copy, held or streamed -> tile, two
 * rounds alike to 0.7): bf16 40000 63.9 -> 81.0 (5 x 256), 65536 77.9 ->
 * 90.9 (8 x 256), 131072 69.4 -> 86.1 (16 x 256), 262144 56.9 -> 62.2 (16 x
 * 512); fp32 32768 82.8 -> 94.3 (8 x 256 x 16), 65536 76.2 -> 95.4 (8 x 512
 * x 16), 131072 61.4 -> 94.4 (16 x 512 x 16). Not from rows of
 * FN_PLAN_LN_RES_TILE_END_BYTES (fp32 262144: x's and the residual's one
 * stage and the weight and bias cache, 128 KiB each, pass shared memory, and
 * the tile unstaged lost, 62.5 -> 58.6). */
#define FN_PLAN_LN_RES_TILE_END_BYTES (1024 * 1024)
#define FN_PLAN_FWD_ROWS_CLUSTER_SMALL_CTA 256
#define FN_PLAN_FWD_ROWS_CLUSTER 8
int fn_plan_fwd_rows_cluster_call(const fn_plan_problem *pb);
/* Turns pl into that plan for a row of cols columns of x_bytes each (the
 * 32-element tile for 16-bit rows; for fp32 the 32- or 16-element one as
 * above), residual: the residual call's rule: 0 when no cluster of at most
 * max_cluster CTAs (and the limits above) holds it. */
int fn_plan_use_fwd_rows_cluster(fn_plan *pl, int64_t cols, int x_bytes, int max_cluster, int residual);

/* Turns pl into the clustered held plan (see above) with u vectors per
 * thread and CTAs of at most cta_threads threads (a multiple of 32, <= 512):
 * 0 when no cluster of at most max_cluster CTAs holds the row. */
int fn_plan_use_held_cluster(fn_plan *pl, int64_t cols, int x_bytes, int u, int cta_threads, int max_cluster);

/* Whether the planner streams a forward row (plan.c). */
int fn_plan_streams(const fn_plan_problem *pb);

/* Whether a streamed row keeps the weight and bias in L1 (evict_last) or
 * reads them past it (no_allocate): they are read by every row, but a row
 * (x, and the residual) of FN_PLAN_STREAM_WEIGHT_L1_ROW_BYTES or more no
 * longer fits L1 twice beside them, and its re-read is what L1 is for.
 * Measured (H200, GB/s, M = 32768 or M * N = 2^30, keep -> no_allocate):
 *  - rows of 128 to 512 KiB: RMSNorm bf16 65536 2906 -> 3107, 131072 2360 ->
 *    2646, 262144 2385 -> 2495; fp32 32768 3016 -> 3232, 65536 2515 -> 2757;
 *    LayerNorm fp32 32768 2701 -> 2956, 65536 2373 -> 2577, bf16 131072
 *    2008 -> 2083; residual bf16 65536 2673 -> 2860 (LayerNorm 2321 ->
 *    2597);
 *  - shorter rows lose without it: bf16 32768 RMSNorm 0.82x, LayerNorm
 *    0.71x, residual bf16 16384 0.94x / 0.82x;
 *  - past 512 KiB it no longer matters much: fp32 262144 RMSNorm 1.00x,
 *    LayerNorm 0.98x. */
#define FN_PLAN_STREAM_WEIGHT_L1_ROW_BYTES (128 * 1024)
#define FN_PLAN_STREAM_WEIGHT_L1_MAX_ROW_BYTES (512 * 1024)
int fn_plan_stream_keeps_weight(const fn_plan_problem *pb);

/* The element-per-thread values the kernels are instantiated for (the
 * backward's 32 only for rows of 16-byte vectors; see wide_bwd). */
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

/* Turns pl into the held plan for this row with u vectors per thread (2, 4
 * or 8; the planner's U, or the lab knob's): 0 when the row does not fit 512
 * threads (cols % vec != 0 included). */
int fn_plan_use_held(fn_plan *pl, int64_t cols, int x_bytes, int u);

/* The held plan for a row off a 16-byte boundary (the held kernel's ODD
 * form): that of an aligned row of its whole vectors, where the row's
 * threads number at least 2 * (vec - 1), a lane for each head and tail
 * element; 0 otherwise. The planner's odd_held rows and the lab knob. */
int fn_plan_use_held_odd(fn_plan *pl, int64_t cols, int x_bytes, int u);

/* The backward of rows off a 16-byte boundary (odd N, odd pitches, offset
 * pointers; the backend checks that every activation sits at x's offset
 * within 16 bytes in each row): the register tile's ODD form, planned as an
 * aligned row of the whole vectors (cols / vec), one row per CTA (threads =
 * tpr) of at least FN_PLAN_BWD_ODD_MIN_TPR threads: in one CTA where that
 * holds the row, otherwise over a cluster of up to max_cluster CTAs
 * (FN_PLAN_BWD_ODD_MAX_CLUSTER_16 for 16-bit rows; the edge elements on its
 * first CTA), with the 32-element tile (wide: the backend lets it, 16-bit,
 * sm_90) only where the 16-element one does not hold the row. 0 (pl untouched) where
 * that plan is not the rows path or its rows take fewer threads; the SHIFT
 * tile or two-pass then. */
#define FN_PLAN_BWD_ODD_MIN_TPR 32
#define FN_PLAN_BWD_ODD_MAX_CLUSTER_16 4
int fn_plan_bwd_odd(fn_plan *pl, int64_t cols, int x_bytes, int cc_major, int max_cluster, int wide, int is_ln);

/* The forward of rows off a 16-byte boundary (pb->odd_held, the common call:
 * FN_STREAM_COMMON) whose aligned body, cols / vec whole vectors, the
 * register tile over a cluster would take as an aligned row
 * (fn_plan_fwd_rows_cluster_call, fn_plan_use_fwd_rows_cluster; LayerNorm's
 * clusters capped by fn_plan_fwd_ln_max_cluster of the body): that tile, its
 * ODD form (norm_fwd.cu), the edge elements on the first CTA. 0 (pl
 * untouched) otherwise: the held kernel's ODD form then. The backend checks
 * fn_fwd_odd_fits and sizes the grid as the ODD backward's
 * (fn_plan_odd_clusters). */
int fn_plan_fwd_odd(fn_plan *pl, const fn_plan_problem *pb);

/* The ODD backward's grid, in clusters. Each cluster walks rows cid, cid + G,
 * ..., all at one offset within 16 bytes, so G is a multiple of the rows'
 * period m (8 for 16-bit odd N). One wave of the `active` resident clusters
 * rounded down to m idles up to m - 1 of them (24 of 30 clusters of 4 at
 * bf16 40001..65537), so G may take several waves: over at most
 * FN_PLAN_ODD_MAX_WAVES, the G that keeps the resident clusters fullest,
 * G / (waves * active), the fewest waves on a tie; past one wave no more than
 * a quarter of the row groups (each cluster writes a partial row). Where no
 * grid qualifies (one wave holds no multiple of m, and those of more waves
 * pass a quarter of the groups), min(groups, m). Measured (docs/perf.md step 88,
 * 30 resident): 24 clusters (one wave, 80%) 60% of copy at RMSNorm bf16
 * 65537, 88 (three, 98%) 69.5%, 120 (four, 100%) 70.0%, 240 (eight) 66%.
 * Called only with more row groups than resident clusters. */
#define FN_PLAN_ODD_MAX_WAVES 4
int64_t fn_plan_odd_clusters(int64_t active, int m, int64_t groups);
/* One wave of at most n clusters for the ODD backward: n rounded down to the
 * period m; where that is none, min(groups, m). fn_plan_odd_clusters'
 * fallback, the lab knob's "down" and the grid cap's grids. */
int64_t fn_plan_odd_one_wave(int64_t n, int m, int64_t groups);

/* The register tiles' rows over a cluster, forward and backward, meet by the
 * cluster exchange (src/cuda/common.cuh), which takes one row a CTA of whole
 * warps and at most 16 CTAs: whether a rows plan (cluster, rows_per_block,
 * tpr, threads) is one it can take. The backend runs any other two-pass; the
 * launchers refuse it. */
static inline int fn_plan_cluster_xchg_ok(int cluster, int rows_per_block, int tpr, int threads)
{
    return cluster <= 1 || (cluster <= 16 && rows_per_block == 1 && threads == tpr && tpr >= 32);
}

/* The 16-bit RMSNorm + residual backward's rows of this many columns take the
 * 16-element tile over clusters, not the 32-element tile (see fn_plan_make;
 * past 65536 over 16 CTAs, step 99). */
#define FN_PLAN_RES_BWD_NARROW_MIN_COLS 16384
#define FN_PLAN_RES_BWD_NARROW_MAX_COLS 131072

/* The 16-bit backward's rows in one CTA from this many columns (not the
 * residual call) take the 32-element tile, but RMSNorm's rows that the
 * 16-element tile holds in 256 or 512 threads (see fn_plan_make). */
#define FN_PLAN_BWD_WIDE_ONE_CTA_MIN_COLS 3072

/* Always succeeds: falls back to FN_PATH_TWO_PASS when no register plan fits. */
fn_plan fn_plan_make(const fn_plan_problem *pb);

#ifdef __cplusplus
}
#endif

#endif
