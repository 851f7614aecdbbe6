/*
 * The CPU backend's row pipelines, forward and backward (see their sections
 * below), included by two translation units:
 *   norm_cpu.c       fp32 and bf16 rows, in the row kernels' baseline and
 *                    AVX2 clones;
 *   norm_cpu_f16c.c  fp16 rows, built for AVX2 + F16C (the conversions one
 *                    instruction per 8 lanes), called where the CPU has both.
 * The includer defines, before including it:
 *   CPU_PIPE_KERNEL   storage class and attributes of the two entry points
 *   CPU_PIPE_NAME(n)  their names
 *   CPU_PIPE_HALF16   the kind of its 16-bit rows (cpu_rows.h's `half`):
 *                     1 bf16 (split order), 2 fp16 (natural order)
 * Also the row addressing both translation units use.
 */
#ifndef FUSEDNORM_CPU_PIPELINE_H
#define FUSEDNORM_CPU_PIPELINE_H

#include "cpu/cpu_rows.h"

#include <stdint.h>

static inline const unsigned char *row_in(const fusednorm_tensor *t, int64_t r)
{
    return (const unsigned char *)t->data + (size_t)r * (size_t)t->row_stride * fn_dtype_size(t->dtype);
}
/* The row after r, for prefetching; NULL past the last row (its address may
 * not exist: a single row may have any stride). */
static inline const unsigned char *row_next(const fusednorm_tensor *t, int64_t r, int64_t rows)
{
    return r + 1 < rows ? row_in(t, r + 1) : NULL;
}
static inline unsigned char *row_out(const fusednorm_tensor *t, int64_t r)
{
    return (unsigned char *)t->data + (size_t)r * (size_t)t->row_stride * fn_dtype_size(t->dtype);
}

/* ---- forward, pipelined ------------------------------------------------
 * Without a residual and with x and y of one dtype: while one row
 * is normalized and written out, the next row the thread takes is loaded and
 * summed in the same pass. Every pass then reads and writes memory at once,
 * as a copy does; one row at a time (a read-only pass, then a write-only one)
 * left half of each thread's memory traffic idle and bf16 at ~45% of copy.
 * No scratch rows: the row being written re-reads its x from cache (it was
 * read one pass earlier), which costs fewer cache-side stores and loads than
 * an fp32 copy would. y may only be exactly x, and each block is read before
 * its y block is written, so aliasing stays correct. Rows are taken from a
 * shared counter in grabs, so the pipeline runs on across grabs. Same
 * arithmetic in the same order as fwd_row: bitwise the same outputs. bf16
 * blocks, weight and bias are in split order (cpu_rows.h); fp16 in natural
 * order. */

/* y row of x row qx (stored non-temporally when `stream`) and, in the same
 * pass, the next x row px summed; returns the next row's first sum. */
CPU_INLINE float fwd_pipe_pass(unsigned char *py, int half, int stream, int with_bias, int squares,
                               const unsigned char *qx, const float *restrict wf, const float *restrict bf,
                               float mean, float rstd, const unsigned char *px, int64_t n, const cpu_prefetch *pf)
{
    cpu_v8 lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_prefetch_block(pf, i);
        cpu_v8 a, b, h[2], v[2];
        cpu_blk_ld(px, half, i, &a, &b);
        lo += squares ? a * a : a;
        hi += squares ? b * b : b;
        cpu_blk_ld(qx, half, i, &h[0], &h[1]);
        for (int q = 0; q < 2; q++) {
            v[q] = ((h[q] - mean) * rstd) * cpu_v8_load(wf + i + 8 * q);
            if (with_bias) v[q] += cpu_v8_load(bf + i + 8 * q);
        }
        cpu_blk_st(py, half, i, &v[0], &v[1], stream);
    }
    float acc[CPU_LANES];
    cpu_lanes_spill(acc, lo, hi, half == 1);
    for (int k = 0; i + k < n; k++) {
        float x = cpu_ld_half(px, half, i + k);
        acc[k] += squares ? x * x : x;
        float h = cpu_ld_half(qx, half, i + k);
        float v = ((h - mean) * rstd) * wf[i + k];
        if (with_bias) v += bf[i + k];
        cpu_st_half(py, half, i + k, v);
    }
    return cpu_lanes_total(acc);
}

/* The y row alone (a thread's last row). */
CPU_INLINE void fwd_pipe_store(unsigned char *py, int half, int stream, int with_bias, const unsigned char *qx,
                               const float *restrict wf, const float *restrict bf, float mean, float rstd, int64_t n)
{
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_v8 h[2], v[2];
        cpu_blk_ld(qx, half, i, &h[0], &h[1]);
        for (int q = 0; q < 2; q++) {
            v[q] = ((h[q] - mean) * rstd) * cpu_v8_load(wf + i + 8 * q);
            if (with_bias) v[q] += cpu_v8_load(bf + i + 8 * q);
        }
        cpu_blk_st(py, half, i, &v[0], &v[1], stream);
    }
    for (; i < n; i++) {
        float h = cpu_ld_half(qx, half, i);
        float v = ((h - mean) * rstd) * wf[i];
        if (with_bias) v += bf[i];
        cpu_st_half(py, half, i, v);
    }
}

/* The first sum of x row px alone (a thread's first row). */
CPU_INLINE float fwd_pipe_sum(int half, int squares, const unsigned char *px, int64_t n, const cpu_prefetch *pf)
{
    cpu_v8 lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_prefetch_block(pf, i);
        cpu_v8 a, b;
        cpu_blk_ld(px, half, i, &a, &b);
        lo += squares ? a * a : a;
        hi += squares ? b * b : b;
    }
    float acc[CPU_LANES];
    cpu_lanes_spill(acc, lo, hi, half == 1);
    for (int k = 0; i + k < n; k++) {
        float x = cpu_ld_half(px, half, i + k);
        acc[k] += squares ? x * x : x;
    }
    return cpu_lanes_total(acc);
}

/* LayerNorm's variance sum of x row px around `mean`, as cpu_sum_row. */
CPU_INLINE float fwd_pipe_var_sum(int half, const unsigned char *px, float mean, int64_t n, const cpu_prefetch *pf)
{
    cpu_v8 lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_prefetch_block(pf, i);
        cpu_v8 a, b;
        cpu_blk_ld(px, half, i, &a, &b);
        a -= mean;
        b -= mean;
        lo += a * a;
        hi += b * b;
    }
    float acc[CPU_LANES];
    cpu_lanes_spill(acc, lo, hi, half == 1);
    for (int k = 0; i + k < n; k++) {
        float d = cpu_ld_half(px, half, i + k) - mean;
        acc[k] += d * d;
    }
    return cpu_lanes_total(acc);
}

/* The variants with their switches as constants: bit 0 16-bit rows
 * (CPU_PIPE_HALF16), 1 stream, 2 bias, 3 squares (RMSNorm). */
#define FWD_PIPE_CASE(C)                                                                                              \
    case C:                                                                                                           \
        return fwd_pipe_pass(py, ((C)&1) * CPU_PIPE_HALF16, ((C) >> 1) & 1, ((C) >> 2) & 1, ((C) >> 3) & 1, qx, wf, bf, mean, rstd, px, n, \
                             pf);
CPU_INLINE float fwd_pipe_dispatch(int variant, unsigned char *py, const unsigned char *qx, const float *restrict wf,
                                   const float *restrict bf, float mean, float rstd, const unsigned char *px,
                                   int64_t n, const cpu_prefetch *pf)
{
    switch (variant) {
        FWD_PIPE_CASE(0) FWD_PIPE_CASE(1) FWD_PIPE_CASE(2) FWD_PIPE_CASE(3)
        FWD_PIPE_CASE(4) FWD_PIPE_CASE(5) FWD_PIPE_CASE(6) FWD_PIPE_CASE(7)
        FWD_PIPE_CASE(8) FWD_PIPE_CASE(9) FWD_PIPE_CASE(10) FWD_PIPE_CASE(11)
        FWD_PIPE_CASE(12) FWD_PIPE_CASE(13) FWD_PIPE_CASE(14) default: FWD_PIPE_CASE(15)
    }
}

/* The next row of this thread (-1: none left): from its grab, else a new grab
 * of `grab` rows from the shared counter. */
static inline int64_t take_row(int64_t *shared_next, int64_t *cursor, int64_t *end, int64_t grab, int64_t rows)
{
    if (*cursor < *end) return (*cursor)++;
    int64_t start;
#pragma omp atomic capture
    {
        start = *shared_next;
        *shared_next += grab;
    }
    if (start >= rows) return -1;
    *cursor = start + 1;
    *end = start + grab < rows ? start + grab : rows;
    return start;
}

/* mean/rstd of x row px from its first sum, as cpu_row_stats; stored.
 * LayerNorm's variance pass runs in cache, so it prefetches (pf) the row
 * after: the thread's memory traffic would otherwise pause during it. */
CPU_INLINE void fwd_pipe_stats(const fusednorm_fwd_args *a, int64_t r, const unsigned char *px, float first_sum,
                               int layernorm, int half16, const cpu_prefetch *pf, float *mean, float *rstd)
{
    float count = (float)a->cols, sum_sq = first_sum;
    *mean = 0.0f;
    if (layernorm) {
        *mean = first_sum / count;
        sum_sq = half16 ? fwd_pipe_var_sum(CPU_PIPE_HALF16, px, *mean, a->cols, pf)
                        : fwd_pipe_var_sum(0, px, *mean, a->cols, pf);
    }
    *rstd = 1.0f / sqrtf(sum_sq / count + a->eps);
    if (a->rstd) a->rstd[r] = *rstd;
    if (a->mean) a->mean[r] = *mean;
}

CPU_PIPE_KERNEL void CPU_PIPE_NAME(fwd_pipeline_thread)(const fusednorm_fwd_args *a, const float *wf, const float *bf,
                                                        int stream_y, int64_t *shared_next, int64_t grab, float *stage)
{
    int64_t n = a->cols, rows = a->rows, cursor = 0, end = 0;
    /* the fp16 build takes fp16 rows only: its fp32 variants fold away */
    int layernorm = a->norm == FUSEDNORM_LAYERNORM, half16 = CPU_PIPE_HALF16 == 2 || a->x.dtype != FUSEDNORM_F32;
    int64_t es = (int64_t)fn_dtype_size(a->x.dtype);
    float mean = 0.0f, rstd = 0.0f;
    int64_t cur = take_row(shared_next, &cursor, &end, grab, rows);
    if (cur < 0) return;
    const unsigned char *qx = row_in(&a->x, cur);
    cpu_prefetch pf = {row_next(&a->x, cur, a->rows), NULL, es, 0};
    float first = half16 ? (layernorm ? fwd_pipe_sum(CPU_PIPE_HALF16, 0, qx, n, &pf)
                                      : fwd_pipe_sum(CPU_PIPE_HALF16, 1, qx, n, &pf))
                         : (layernorm ? fwd_pipe_sum(0, 0, qx, n, &pf) : fwd_pipe_sum(0, 1, qx, n, &pf));
    fwd_pipe_stats(a, cur, qx, first, layernorm, half16, &pf, &mean, &rstd);
    for (;;) {
        unsigned char *y_row = row_out(&a->y, cur), *py = y_row;
        /* Non-temporal stores need 16-byte alignment; a misaligned y row is
         * staged in the thread's scratch row and streamed out from there
         * (ordinary stores would cost a read-for-ownership). */
        int stream = stream_y && ((uintptr_t)y_row & 15) == 0, staged = stream_y && !stream;
        if (staged) py = (unsigned char *)stage;
        size_t row_bytes = (size_t)n * (size_t)es;
        int64_t next = take_row(shared_next, &cursor, &end, grab, rows);
        if (next < 0) {
            if (half16 && bf) fwd_pipe_store(py, CPU_PIPE_HALF16, stream, 1, qx, wf, bf, mean, rstd, n);
            else if (half16) fwd_pipe_store(py, CPU_PIPE_HALF16, stream, 0, qx, wf, bf, mean, rstd, n);
            else if (bf) fwd_pipe_store(py, 0, stream, 1, qx, wf, bf, mean, rstd, n);
            else fwd_pipe_store(py, 0, stream, 0, qx, wf, bf, mean, rstd, n);
            if (staged) cpu_stream_copy(y_row, stage, row_bytes);
            return;
        }
        const unsigned char *px = row_in(&a->x, next);
        cpu_prefetch next_pf = {row_next(&a->x, next, a->rows), NULL, es, 0};
        int variant = half16 | (stream << 1) | ((bf != NULL) << 2) | (!layernorm << 3);
        first = fwd_pipe_dispatch(variant, py, qx, wf, bf, mean, rstd, px, n, &next_pf);
        if (staged) cpu_stream_copy(y_row, stage, row_bytes);
        cur = next;
        qx = px;
        fwd_pipe_stats(a, cur, qx, first, layernorm, half16, &next_pf, &mean, &rstd);
    }
}

/* ---- backward, pipelined ------------------------------------------------
 * With rstd (and mean) given, x, dy and dx of one dtype and no residual
 * gradients, a thread runs its rows (one dweight chunk,
 * or one grab) as a pipeline: one pass loads row r's x and dy from memory,
 * forms x_hat and g with their row sums and the chunk's dweight/dbias terms,
 * and writes dx of the previous row, whose x and dy it reads again (from
 * cache: they were read one pass earlier). No scratch rows: every pass reads
 * and writes memory at once, as a copy does, with as few cache-side stores as
 * possible. Aliasing stays correct: dx may only be exactly x or dy, and each
 * block of the previous row is read before its dx block is written.
 * Same arithmetic in the same order as bwd_row: bitwise the same dx and
 * partials. bf16 blocks, the weight and the dweight/dbias partials are in
 * split order (cpu_rows.h); reduce_partials puts the partials' sums back in
 * natural order. fp16 stays in natural order. */

/* A row's given statistics and its row sums' means. */
typedef struct bwd_row_state {
    float mean, rstd, mean_xg, mean_g;
} bwd_row_state;

/* Row r (at px, pdy) into the row sums and partials; when py, also dx of the
 * previous row (at qx, qdy; statistics in prev) stored at py. */
CPU_INLINE void bwd_pipe_pass(int layernorm, int with_dw, int with_db, int half, const unsigned char *px,
                              const unsigned char *pdy, float mean, float rstd, const float *restrict wf,
                              float *restrict dw_partial, float *restrict db_partial, float *acc_xg, float *acc_g,
                              unsigned char *py, int stream, const unsigned char *qx, const unsigned char *qdy,
                              bwd_row_state prev, int64_t n, const cpu_prefetch *pf)
{
    cpu_v8 v_xg[2] = {{0}, {0}}, v_g[2] = {{0}, {0}};
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_prefetch_block(pf, i);
        cpu_v8 xv[2], dyb[2], qxv[2], qdyb[2], dh[2];
        cpu_blk_ld(px, half, i, &xv[0], &xv[1]);
        cpu_blk_ld(pdy, half, i, &dyb[0], &dyb[1]);
        if (py) {
            cpu_blk_ld(qx, half, i, &qxv[0], &qxv[1]);
            cpu_blk_ld(qdy, half, i, &qdyb[0], &qdyb[1]);
        }
        for (int q = 0; q < 2; q++) {
            int64_t j = i + 8 * q;
            cpu_v8 w = cpu_v8_load(wf + j);
            cpu_v8 xhat = (xv[q] - mean) * rstd;
            cpu_v8 dyv = dyb[q];
            cpu_v8 g = dyv * w;
            v_xg[q] += xhat * g;
            if (layernorm) v_g[q] += g;
            if (with_dw) {
                cpu_v8 d = cpu_v8_load(dw_partial + j) + dyv * xhat;
                cpu_v8_store(dw_partial + j, &d);
            }
            if (with_db) {
                cpu_v8 d = cpu_v8_load(db_partial + j) + dyv;
                cpu_v8_store(db_partial + j, &d);
            }
            if (py) {
                cpu_v8 qxhat = (qxv[q] - prev.mean) * prev.rstd;
                dh[q] = prev.rstd * ((qdyb[q] * w - prev.mean_g) - qxhat * prev.mean_xg);
            }
        }
        if (py) cpu_blk_st(py, half, i, &dh[0], &dh[1], stream);
    }
    cpu_v8_store(acc_xg, &v_xg[0]);
    cpu_v8_store(acc_xg + 8, &v_xg[1]);
    cpu_v8_store(acc_g, &v_g[0]);
    cpu_v8_store(acc_g + 8, &v_g[1]);
    if (half == 1) {
        cpu_lanes_unsplit(acc_xg);
        cpu_lanes_unsplit(acc_g);
    }
    for (int k = 0; i + k < n; k++) {
        int64_t j = i + k;
        float xhat = (cpu_ld_half(px, half, j) - mean) * rstd;
        float dyv = cpu_ld_half(pdy, half, j);
        float g = dyv * wf[j];
        acc_xg[k] += xhat * g;
        if (layernorm) acc_g[k] += g;
        if (with_dw) dw_partial[j] += dyv * xhat;
        if (with_db) db_partial[j] += dyv;
        if (py) {
            float qxhat = (cpu_ld_half(qx, half, j) - prev.mean) * prev.rstd;
            float qdyv = cpu_ld_half(qdy, half, j);
            float dhv = prev.rstd * ((qdyv * wf[j] - prev.mean_g) - qxhat * prev.mean_xg);
            cpu_st_half(py, half, j, dhv);
        }
    }
}

/* The variants with their switches as constants: bit 0 16-bit rows
 * (CPU_PIPE_HALF16), 1 dweight, 2 dbias, 3 LayerNorm. */
#define BWD_PIPE_CASE(C)                                                                                              \
    case C:                                                                                                           \
        bwd_pipe_pass(((C) >> 3) & 1, ((C) >> 1) & 1, ((C) >> 2) & 1, ((C)&1) * CPU_PIPE_HALF16, px, pdy, mean, rstd, wf, dw_partial,      \
                      db_partial, acc_xg, acc_g, py, stream, qx, qdy, prev, n, pf);                                   \
        break;

/* dx of one row alone (the pipeline's last row). */
CPU_INLINE void bwd_pipe_store(int half, unsigned char *py, int stream, const unsigned char *qx,
                               const unsigned char *qdy, const float *restrict wf, bwd_row_state st, int64_t n)
{
    int64_t j = 0;
    for (; j + CPU_LANES <= n; j += CPU_LANES) {
        cpu_v8 xv[2], dyb[2], dh[2];
        cpu_blk_ld(qx, half, j, &xv[0], &xv[1]);
        cpu_blk_ld(qdy, half, j, &dyb[0], &dyb[1]);
        for (int q = 0; q < 2; q++) {
            cpu_v8 xhat = (xv[q] - st.mean) * st.rstd;
            dh[q] = st.rstd * ((dyb[q] * cpu_v8_load(wf + j + 8 * q) - st.mean_g) - xhat * st.mean_xg);
        }
        cpu_blk_st(py, half, j, &dh[0], &dh[1], stream);
    }
    for (; j < n; j++) {
        float xhat = (cpu_ld_half(qx, half, j) - st.mean) * st.rstd;
        float dyv = cpu_ld_half(qdy, half, j);
        float dh = st.rstd * ((dyv * wf[j] - st.mean_g) - xhat * st.mean_xg);
        cpu_st_half(py, half, j, dh);
    }
}

/* Rows r0..r1-1 through the pipeline. */
CPU_PIPE_KERNEL void CPU_PIPE_NAME(bwd_pipeline_rows)(const fusednorm_bwd_args *a, int64_t r0, int64_t r1,
                                                      const float *wf, float *dw_partial, float *db_partial,
                                                      int stream_dx, float *stage)
{
    int64_t n = a->cols, es = (int64_t)fn_dtype_size(a->x.dtype);
    /* the fp16 build takes fp16 rows only: its fp32 variants fold away */
    int layernorm = a->norm == FUSEDNORM_LAYERNORM, half16 = CPU_PIPE_HALF16 == 2 || a->x.dtype != FUSEDNORM_F32;
    int variant = half16 | ((dw_partial != NULL) << 1) | ((db_partial != NULL) << 2) | (layernorm << 3);
    bwd_row_state prev = {0, 0, 0, 0};
    unsigned char *py = NULL, *dx_row = NULL;
    const unsigned char *qx = NULL, *qdy = NULL;
    int stream = 0, staged = 0;
    size_t row_bytes = (size_t)n * (size_t)es;
    for (int64_t r = r0; r < r1; r++) {
        const unsigned char *px = row_in(&a->x, r), *pdy = row_in(&a->dy, r);
        float rstd = a->rstd[r], mean = a->mean ? a->mean[r] : 0.0f;
        cpu_prefetch next = {row_next(&a->x, r, a->rows), row_next(&a->dy, r, a->rows), es, es};
        const cpu_prefetch *pf = &next;
        float acc_xg[CPU_LANES], acc_g[CPU_LANES];
        switch (variant) {
            BWD_PIPE_CASE(0) BWD_PIPE_CASE(1) BWD_PIPE_CASE(2) BWD_PIPE_CASE(3)
            BWD_PIPE_CASE(4) BWD_PIPE_CASE(5) BWD_PIPE_CASE(6) BWD_PIPE_CASE(7)
            BWD_PIPE_CASE(8) BWD_PIPE_CASE(9) BWD_PIPE_CASE(10) BWD_PIPE_CASE(11)
            BWD_PIPE_CASE(12) BWD_PIPE_CASE(13) BWD_PIPE_CASE(14) default: BWD_PIPE_CASE(15)
        }
        if (staged) cpu_stream_copy(dx_row, stage, row_bytes);
        prev.mean = mean;
        prev.rstd = rstd;
        prev.mean_xg = cpu_lanes_total(acc_xg) / (float)n;
        prev.mean_g = layernorm ? cpu_lanes_total(acc_g) / (float)n : 0.0f;
        qx = px;
        qdy = pdy;
        dx_row = row_out(&a->dx, r);
        /* Non-temporal stores need 16-byte alignment: a misaligned dx row is
         * staged in scratch and streamed out from there. */
        stream = stream_dx && ((uintptr_t)dx_row & 15) == 0;
        staged = stream_dx && !stream;
        py = staged ? (unsigned char *)stage : dx_row;
    }
    if (py) {
        if (half16) bwd_pipe_store(CPU_PIPE_HALF16, py, stream, qx, qdy, wf, prev, n);
        else bwd_pipe_store(0, py, stream, qx, qdy, wf, prev, n);
        if (staged) cpu_stream_copy(dx_row, stage, row_bytes);
    }
}

#endif
