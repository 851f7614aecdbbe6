/*
 * What the C side of the CUDA backend (backend.c) hands to the launchers
 * (*.cu, extern "C"): plain C structs, no CUDA types, so that backend.c and
 * the planner stay C. Pointers are device pointers; strides are in elements.
 */
#ifndef FUSEDNORM_CUDA_KERNEL_PARAMS_H
#define FUSEDNORM_CUDA_KERNEL_PARAMS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { FN_DT_F32 = 0, FN_DT_F16 = 1, FN_DT_BF16 = 2 }; /* = fusednorm_dtype */

typedef struct fn_fwd_params {
    const void *x, *res, *w, *b;
    void *y, *res_out;
    float *rstd, *mean;
    int64_t rows, cols;
    int64_t sx, sres, sy, sres_out;  /* row strides */
    float eps, w_off;
    int is_ln;
    int dt_x, dt_res, dt_w, dt_y, dt_res_out;
    int tpr, rows_per_block, cluster; /* from the plan */
    int pipe;                         /* set by the launcher: stage the next rows in shared memory */
    int wcache, wcache_off;           /* set by the launcher: (w + w_off) and b of the CTA's columns held in
                                       * shared memory as fp32, at this byte offset of the dynamic area */
    int smem_max;                     /* dynamic shared memory a rows CTA may take (the device's opt-in
                                       * limit less the kernels' static part): bounds stages + cache */
    int shift;                        /* rows off a 16-byte boundary, realigned in shared memory (the
                                       * SHIFT kernel; the backend checks fn_fwd_shift_fits) */
    int stream;                       /* two-pass path: the streaming kernel (the backend checked
                                       * the call: see stream in fn_plan_problem), with the weight
                                       * and bias kept in L1 or not (FN_STREAM_WEIGHT_L1_*) */
    int odd;                          /* held path: rows off a 16-byte boundary (every activation at the
                                       * same offset within 16 bytes in each row; the backend checked);
                                       * rows path: the register tile's ODD form (the common call, each
                                       * cluster's rows at one offset: the backend checked
                                       * fn_fwd_odd_fits and sized the grid); 2 the same with LAG where
                                       * the aligned tile takes it (lab knob FUSEDNORM_FWD_ODD=2) */
    int deep;                         /* rows path: the PLAIN tiles over a cluster stage FN_DEEP_STAGES
                                       * rows: 1 where they won (launch_rows' rule), 0 never, 2 on
                                       * every cluster (0 and 2: lab knob FUSEDNORM_FWD_DEEP) */
    int lag;                          /* rows path: the PLAIN exact 16-bit tiles of 512 threads over a cluster
                                       * post row i + 1's sums before they wait for row i's (LAG): 1 (the
                                       * default; and LayerNorm's 256-thread tiles with a bias over 8 and 16
                                       * CTAs, launch_rows' rule), 0 never, 2 every 256-thread tile too (lab
                                       * knob FUSEDNORM_FWD_LAG) */
    int plain_res;                    /* rows path: the residual call of 16-bit rows over a cluster (x, the
                                       * residual, residual_out and y of one dtype) takes the PLAIN tiles
                                       * (PLAIN_RES): 1 (the default), 0 the general kernel (lab knob
                                       * FUSEDNORM_FWD_PLAIN_RES) */
    int lean;                         /* held path: the SMW rows that fill their slots exactly run the LEAN
                                       * form (norm_fwd.cu): 1 on, 0 off (the default until an H200 A/B;
                                       * lab knob FUSEDNORM_FWD_LEAN) */
} fn_fwd_params;

enum { FN_STREAM_WEIGHT_L1_KEEP = 1, FN_STREAM_WEIGHT_L1_NONE = 2 };

typedef struct fn_bwd_params {
    const void *dy, *x, *w, *dres_out;
    const float *rstd, *mean;         /* NULL: recompute from x and eps */
    void *dx, *dres, *dw, *db;
    float *ws_dw, *ws_db;             /* fp32 partial rows [partials][cols] or atomic accumulators */
    int64_t rows, cols;
    int64_t sdy, sx, sdres_out, sdx, sdres;
    float eps, w_off;
    int is_ln, atomic, accumulate;
    int dt_dx, dt_x, dt_dy, dt_w, dt_dres_out, dt_dres, dt_dw, dt_db; /* dt_dx: the kernels' TX */
    int tpr, rows_per_block, cluster;
    int pipe;                         /* set by the launcher: stage the next rows in shared memory */
    int wcache, wcache_off;           /* as in fn_fwd_params: (w + w_off) of the CTA's columns in shared memory */
    int smem_max;                     /* as in fn_fwd_params */
    int partials;                     /* number of fp32 partial rows in the workspace */
    int smem_acc;                     /* two-pass: partial sums in shared memory, each partial row written once */
    float *row_stats;                 /* column split: [rows][4] = rstd, mean, c1, c2 (two-pass writes them, no dx) */
    int64_t rows_per_group;           /* column split: rows summed into one partial row */
    int shift;                        /* as in fn_fwd_params (fn_bwd_shift_fits) */
    int droll;                        /* 1: the residual call's one-stage tile where two stages do not fit
                                       * (DROLL, norm_bwd.cu); 0: the general kernel (lab knob
                                       * FUSEDNORM_BWD_DROLL=0) */
    int odd;                          /* rows path: rows off a 16-byte boundary, every activation at x's
                                       * offset within 16 bytes in each row and each CTA's rows at one
                                       * offset (the backend checked fn_bwd_odd_fits and sized the grid) */
} fn_bwd_params;

/* Launchers: return 0 or a cudaError_t value. `stream` is a cudaStream_t.
 * vec/ept/threads/grid come from the plan (src/plan.h). */
int fn_launch_fwd_rows(const fn_fwd_params *p, int vec, int ept, int grid, int threads, void *stream);
int fn_launch_fwd_two_pass(const fn_fwd_params *p, int grid, int threads, void *stream);
/* FN_PATH_HELD: u raw vectors per thread (2, 4, 8), p->tpr threads per row, p->rows_per_block rows per CTA;
 * p->cluster > 1: a row over that many CTAs (grid a multiple of it, sm_90; u 8, or 4 with the residual). */
int fn_launch_fwd_held(const fn_fwd_params *p, int u, int grid, int threads, void *stream);
/* Whether the forward's SHIFT kernel can run this call with the plan in p
 * (tpr, rows_per_block) and ept: 16-bit x, its shared memory within
 * p->smem_max. The backend checks dtypes and alignment. */
int fn_fwd_shift_fits(const fn_fwd_params *p, int ept);
/* Whether the forward's ODD register tile can run this call with the plan in
 * p (tpr, rows_per_block, cluster), vec, ept and threads: the common call (no
 * residual, y of x's dtype), one row a CTA, an instance for ept, its shared
 * memory within p->smem_max. The backend checks the offsets (odd_phase). */
int fn_fwd_odd_fits(const fn_fwd_params *p, int vec, int ept, int threads);
int fn_launch_bwd_rows(const fn_bwd_params *p, int vec, int ept, int grid, int threads, void *stream);
int fn_launch_bwd_two_pass(const fn_bwd_params *p, int grid, int threads, void *stream);
/* Sum `partials` fp32 rows of the workspace in fixed order into dweight/dbias
 * (their dtype; += when accumulate). partials == 0 writes zeros (or leaves the
 * values when accumulate). */
/* dependent: launched as a programmatic dependent of the kernel before it in
 * the stream (sm_90: it may start before that kernel ends, and waits for it). */
int fn_launch_dweight_finalize(const fn_bwd_params *p, int dependent, void *stream);
/* Active CTAs (C == 1) or clusters (C > 1) per device for a rows kernel. */
int fn_max_active_fwd_rows(const fn_fwd_params *p, int vec, int ept, int threads, int *count);
int fn_max_active_bwd_rows(const fn_bwd_params *p, int vec, int ept, int threads, int *count);
int fn_max_active_bwd_two_pass(const fn_bwd_params *p, int threads, int *count);
/* Whether the backward's 32-element tile can run this call (the planner's
 * wide_bwd): 16-bit dx with x and dy of the same dtype, and its pipeline
 * stages for 512 threads within p->smem_max. p needs dtypes and smem_max. */
int fn_bwd_wide_fits(const fn_bwd_params *p);
/* Whether the backward's SHIFT kernel can run this call with the plan in p
 * (tpr, rows_per_block), ept and threads: 16-bit dx, its shared memory
 * within p->smem_max. The backend checks dtypes and alignment. */
int fn_bwd_shift_fits(const fn_bwd_params *p, int ept, int threads);
/* Whether the backward's ODD tile can run this call with the plan in p (tpr,
 * rows_per_block 1, cluster 1), vec, ept and threads (= tpr): a PLAIN call
 * (the weight; no dresidual_out and dresidual, or the pre-norm residual's
 * call), x, dy and dx of one dtype, its shared memory within p->smem_max.
 * The backend checks the offsets (every activation at x's offset within 16
 * bytes in each row) and sizes the grid so that each CTA's rows share it. */
int fn_bwd_odd_fits(const fn_bwd_params *p, int vec, int ept, int threads);
/* Column split backward, pass 2: dx and the dweight/dbias partial rows from
 * p->row_stats; a grid of col_chunks x row_groups CTAs of FN_COLUMNS_THREADS. */
enum { FN_COLUMNS_THREADS = 256 };
int fn_launch_bwd_columns(const fn_bwd_params *p, int col_chunks, int row_groups, void *stream);

#ifdef __cplusplus
}
#endif

#endif
