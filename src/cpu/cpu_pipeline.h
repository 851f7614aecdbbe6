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
 * With x and y (and the residual stream, residual_out) of one dtype: while one row
 * is normalized and written out, the next row the thread takes is loaded and
 * summed in the same pass. Every pass then reads and writes memory at once,
 * as a copy does; one row at a time (a read-only pass, then a write-only one)
 * left half of each thread's memory traffic idle and bf16 at ~45% of copy.
 * No scratch rows: the row being written re-reads its x from cache (it was
 * read one pass earlier), which costs fewer cache-side stores and loads than
 * an fp32 copy would (with the residual call, its residual row too: h = x +
 * residual is formed again). y may only be exactly x, residual_out exactly x
 * or the residual, and each block is read before its outputs' blocks are
 * written, so aliasing stays correct. Rows are taken from a
 * shared counter in grabs, so the pipeline runs on across grabs. Same
 * arithmetic in the same order as fwd_row: bitwise the same outputs. bf16
 * blocks, weight and bias are in split order (cpu_rows.h); fp16 in natural
 * order. */

/* The 32 variants of a pipeline pass as the cases of a switch, CASE(C)
 * each (the last one the default: a variant is 0..31). */
#define CPU_PIPE_VARIANTS(CASE)                                                                                       \
    CASE(0) CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)      \
    CASE(13) CASE(14) CASE(15) CASE(16) CASE(17) CASE(18) CASE(19) CASE(20) CASE(21) CASE(22) CASE(23) CASE(24)    \
    CASE(25) CASE(26) CASE(27) CASE(28) CASE(29) CASE(30) default: CASE(31)

/* A row's input: x, and with the residual call its residual row r, added
 * to x in fp32 (h = x + r, in that order, as fwd_row's cpu_add_row). */
typedef struct fwd_row_in {
    const unsigned char *x, *r;
} fwd_row_in;

/* h of block i (res: with the residual); h of element i. */
CPU_INLINE void fwd_blk_h(fwd_row_in in, int half, int res, int64_t i, cpu_v8 *a, cpu_v8 *b)
{
    cpu_blk_ld(in.x, half, i, a, b);
    if (res) {
        cpu_v8 c, d;
        cpu_blk_ld(in.r, half, i, &c, &d);
        *a = *a + c;
        *b = *b + d;
    }
}
CPU_INLINE float fwd_h(fwd_row_in in, int half, int res, int64_t i)
{
    float h = cpu_ld_half(in.x, half, i);
    if (res) h = h + cpu_ld_half(in.r, half, i);
    return h;
}

/* A row's outputs: y (non-temporal when stream), and with the residual call
 * residual_out = h (ro; NULL: not asked for; non-temporal when stream_ro). */
typedef struct fwd_row_out {
    unsigned char *y, *ro;
    int stream, stream_ro;
} fwd_row_out;

/* Block i of the current row (h = q) into its outputs (stream: y's
 * out.stream, as a constant where the caller has it). */
CPU_INLINE void fwd_blk_out(fwd_row_out out, int half, int res, int with_bias, int stream, const cpu_v8 h[2],
                            const float *restrict wf, const float *restrict bf, float mean, float rstd, int64_t i)
{
    cpu_v8 v[2];
    for (int q = 0; q < 2; q++) {
        v[q] = ((h[q] - mean) * rstd) * cpu_v8_load(wf + i + 8 * q);
        if (with_bias) v[q] += cpu_v8_load(bf + i + 8 * q);
    }
    if (res && out.ro) cpu_blk_st(out.ro, half, i, &h[0], &h[1], out.stream_ro);
    cpu_blk_st(out.y, half, i, &v[0], &v[1], stream);
}
CPU_INLINE void fwd_elem_out(fwd_row_out out, int half, int res, int with_bias, float h, const float *restrict wf,
                             const float *restrict bf, float mean, float rstd, int64_t i)
{
    float v = ((h - mean) * rstd) * wf[i];
    if (with_bias) v += bf[i];
    if (res && out.ro) cpu_st_half(out.ro, half, i, h);
    cpu_st_half(out.y, half, i, v);
}

/* The outputs of the current row q (its h re-read from cache) and, in the
 * same pass, the next row p's first sum, returned. */
CPU_INLINE float fwd_pipe_pass(fwd_row_out out, int half, int res, int stream, int with_bias, int squares, fwd_row_in q,
                               const float *restrict wf, const float *restrict bf, float mean, float rstd,
                               fwd_row_in p, int64_t n, const cpu_prefetch *pf)
{
    cpu_v8 lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_prefetch_block(pf, i);
        cpu_v8 a, b, h[2];
        fwd_blk_h(p, half, res, i, &a, &b);
        lo += squares ? a * a : a;
        hi += squares ? b * b : b;
        fwd_blk_h(q, half, res, i, &h[0], &h[1]);
        fwd_blk_out(out, half, res, with_bias, stream, h, wf, bf, mean, rstd, i);
    }
    float acc[CPU_LANES];
    cpu_lanes_spill(acc, lo, hi, half == 1);
    for (int k = 0; i + k < n; k++) {
        float x = fwd_h(p, half, res, i + k);
        acc[k] += squares ? x * x : x;
        fwd_elem_out(out, half, res, with_bias, fwd_h(q, half, res, i + k), wf, bf, mean, rstd, i + k);
    }
    return cpu_lanes_total(acc);
}

/* The outputs of row q alone (a thread's last row). */
CPU_INLINE void fwd_pipe_store(fwd_row_out out, int half, int res, int with_bias, fwd_row_in q,
                               const float *restrict wf, const float *restrict bf, float mean, float rstd, int64_t n)
{
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_v8 h[2];
        fwd_blk_h(q, half, res, i, &h[0], &h[1]);
        fwd_blk_out(out, half, res, with_bias, out.stream, h, wf, bf, mean, rstd, i);
    }
    for (; i < n; i++) fwd_elem_out(out, half, res, with_bias, fwd_h(q, half, res, i), wf, bf, mean, rstd, i);
}

/* The first sum of row p alone (a thread's first row). */
CPU_INLINE float fwd_pipe_sum(int half, int res, int squares, fwd_row_in p, int64_t n, const cpu_prefetch *pf)
{
    cpu_v8 lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_prefetch_block(pf, i);
        cpu_v8 a, b;
        fwd_blk_h(p, half, res, i, &a, &b);
        lo += squares ? a * a : a;
        hi += squares ? b * b : b;
    }
    float acc[CPU_LANES];
    cpu_lanes_spill(acc, lo, hi, half == 1);
    for (int k = 0; i + k < n; k++) {
        float x = fwd_h(p, half, res, i + k);
        acc[k] += squares ? x * x : x;
    }
    return cpu_lanes_total(acc);
}

/* LayerNorm's variance sum of row p around `mean`, as cpu_sum_row. */
CPU_INLINE float fwd_pipe_var_sum(int half, int res, fwd_row_in p, float mean, int64_t n, const cpu_prefetch *pf)
{
    cpu_v8 lo = {0}, hi = {0};
    int64_t i = 0;
    for (; i + CPU_LANES <= n; i += CPU_LANES) {
        cpu_prefetch_block(pf, i);
        cpu_v8 a, b;
        fwd_blk_h(p, half, res, i, &a, &b);
        a -= mean;
        b -= mean;
        lo += a * a;
        hi += b * b;
    }
    float acc[CPU_LANES];
    cpu_lanes_spill(acc, lo, hi, half == 1);
    for (int k = 0; i + k < n; k++) {
        float d = fwd_h(p, half, res, i + k) - mean;
        acc[k] += d * d;
    }
    return cpu_lanes_total(acc);
}

/* The variants with their switches as constants: bit 0 16-bit rows
 * (CPU_PIPE_HALF16), 1 the residual call, 2 stream (y), 3 bias, 4 squares
 * (RMSNorm). */
#define FWD_PIPE_CASE(C)                                                                                              \
    case C:                                                                                                           \
        return fwd_pipe_pass(out, ((C)&1) * CPU_PIPE_HALF16, ((C) >> 1) & 1, ((C) >> 2) & 1, ((C) >> 3) & 1,          \
                             ((C) >> 4) & 1, q, wf, bf, mean, rstd, p, n, pf);
CPU_INLINE float fwd_pipe_dispatch(int variant, fwd_row_out out, fwd_row_in q, const float *restrict wf,
                                   const float *restrict bf, float mean, float rstd, fwd_row_in p, int64_t n,
                                   const cpu_prefetch *pf)
{
    switch (variant) {
        CPU_PIPE_VARIANTS(FWD_PIPE_CASE)
    }
}

/* The first sum of a thread's first row, and the outputs of its last one,
 * with their switches as constants (half16, res: as the variants' bits). */
CPU_INLINE float fwd_pipe_first(int half16, int res, int squares, fwd_row_in p, int64_t n, const cpu_prefetch *pf)
{
    switch (half16 | res << 1 | squares << 2) {
    case 0: return fwd_pipe_sum(0, 0, 0, p, n, pf);
    case 1: return fwd_pipe_sum(CPU_PIPE_HALF16, 0, 0, p, n, pf);
    case 2: return fwd_pipe_sum(0, 1, 0, p, n, pf);
    case 3: return fwd_pipe_sum(CPU_PIPE_HALF16, 1, 0, p, n, pf);
    case 4: return fwd_pipe_sum(0, 0, 1, p, n, pf);
    case 5: return fwd_pipe_sum(CPU_PIPE_HALF16, 0, 1, p, n, pf);
    case 6: return fwd_pipe_sum(0, 1, 1, p, n, pf);
    default: return fwd_pipe_sum(CPU_PIPE_HALF16, 1, 1, p, n, pf);
    }
}
CPU_INLINE void fwd_pipe_last(int half16, int res, fwd_row_out out, fwd_row_in q, const float *restrict wf,
                              const float *restrict bf, float mean, float rstd, int64_t n)
{
    switch (half16 | res << 1 | (bf != NULL) << 2) {
    case 0: fwd_pipe_store(out, 0, 0, 0, q, wf, bf, mean, rstd, n); break;
    case 1: fwd_pipe_store(out, CPU_PIPE_HALF16, 0, 0, q, wf, bf, mean, rstd, n); break;
    case 2: fwd_pipe_store(out, 0, 1, 0, q, wf, bf, mean, rstd, n); break;
    case 3: fwd_pipe_store(out, CPU_PIPE_HALF16, 1, 0, q, wf, bf, mean, rstd, n); break;
    case 4: fwd_pipe_store(out, 0, 0, 1, q, wf, bf, mean, rstd, n); break;
    case 5: fwd_pipe_store(out, CPU_PIPE_HALF16, 0, 1, q, wf, bf, mean, rstd, n); break;
    case 6: fwd_pipe_store(out, 0, 1, 1, q, wf, bf, mean, rstd, n); break;
    default: fwd_pipe_store(out, CPU_PIPE_HALF16, 1, 1, q, wf, bf, mean, rstd, n); break;
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

/* mean/rstd of row p from its first sum, as cpu_row_stats; stored.
 * LayerNorm's variance pass runs in cache, so it prefetches (pf) the row
 * after: the thread's memory traffic would otherwise pause during it. */
CPU_INLINE void fwd_pipe_stats(const fusednorm_fwd_args *a, int64_t r, fwd_row_in p, float first_sum, int layernorm,
                               int half16, int res, const cpu_prefetch *pf, float *mean, float *rstd)
{
    float count = (float)a->cols, sum_sq = first_sum;
    *mean = 0.0f;
    if (layernorm) {
        *mean = first_sum / count;
        switch (half16 | res << 1) {
        case 0: sum_sq = fwd_pipe_var_sum(0, 0, p, *mean, a->cols, pf); break;
        case 1: sum_sq = fwd_pipe_var_sum(CPU_PIPE_HALF16, 0, p, *mean, a->cols, pf); break;
        case 2: sum_sq = fwd_pipe_var_sum(0, 1, p, *mean, a->cols, pf); break;
        default: sum_sq = fwd_pipe_var_sum(CPU_PIPE_HALF16, 1, p, *mean, a->cols, pf); break;
        }
    }
    *rstd = 1.0f / sqrtf(sum_sq / count + a->eps);
    if (a->rstd) a->rstd[r] = *rstd;
    if (a->mean) a->mean[r] = *mean;
}

/* The rows a thread takes, through the pipeline. stream_y / stream_ro: y /
 * residual_out are large enough to be written non-temporally (stage: the
 * thread's scratch row, for a y row off 16 bytes; a residual_out row off 16
 * bytes is written with ordinary stores). */
CPU_PIPE_KERNEL void CPU_PIPE_NAME(fwd_pipeline_thread)(const fusednorm_fwd_args *a, const float *wf, const float *bf,
                                                        int stream_y, int stream_ro, int64_t *shared_next, int64_t grab,
                                                        float *stage)
{
    int64_t n = a->cols, rows = a->rows, cursor = 0, end = 0;
    /* the fp16 build takes fp16 rows only: its fp32 variants fold away */
    int layernorm = a->norm == FUSEDNORM_LAYERNORM, half16 = CPU_PIPE_HALF16 == 2 || a->x.dtype != FUSEDNORM_F32;
    int res = a->residual.data != NULL;
    int64_t es = (int64_t)fn_dtype_size(a->x.dtype);
    float mean = 0.0f, rstd = 0.0f;
    int64_t cur = take_row(shared_next, &cursor, &end, grab, rows);
    if (cur < 0) return;
    fwd_row_in q = {row_in(&a->x, cur), res ? row_in(&a->residual, cur) : NULL};
    cpu_prefetch pf = {row_next(&a->x, cur, a->rows), res ? row_next(&a->residual, cur, a->rows) : NULL, es, es};
    float first = fwd_pipe_first(half16, res, !layernorm, q, n, &pf);
    fwd_pipe_stats(a, cur, q, first, layernorm, half16, res, &pf, &mean, &rstd);
    for (;;) {
        unsigned char *y_row = row_out(&a->y, cur);
        /* Non-temporal stores need 16-byte alignment; a misaligned y row is
         * staged in the thread's scratch row and streamed out from there
         * (ordinary stores would cost a read-for-ownership). */
        int stream = stream_y && ((uintptr_t)y_row & 15) == 0, staged = stream_y && !stream;
        fwd_row_out out = {staged ? (unsigned char *)stage : y_row, NULL, stream, 0};
        if (res && a->residual_out.data) {
            out.ro = row_out(&a->residual_out, cur);
            out.stream_ro = stream_ro && ((uintptr_t)out.ro & 15) == 0;
        }
        size_t row_bytes = (size_t)n * (size_t)es;
        int64_t next = take_row(shared_next, &cursor, &end, grab, rows);
        if (next < 0) {
            fwd_pipe_last(half16, res, out, q, wf, bf, mean, rstd, n);
            if (staged) cpu_stream_copy(y_row, stage, row_bytes);
            return;
        }
        fwd_row_in p = {row_in(&a->x, next), res ? row_in(&a->residual, next) : NULL};
        cpu_prefetch next_pf = {row_next(&a->x, next, a->rows), res ? row_next(&a->residual, next, a->rows) : NULL,
                                es, es};
        int variant = half16 | (res << 1) | (stream << 2) | ((bf != NULL) << 3) | (!layernorm << 4);
        first = fwd_pipe_dispatch(variant, out, q, wf, bf, mean, rstd, p, n, &next_pf);
        if (staged) cpu_stream_copy(y_row, stage, row_bytes);
        cur = next;
        q = p;
        fwd_pipe_stats(a, cur, q, first, layernorm, half16, res, &next_pf, &mean, &rstd);
    }
}

/* ---- backward, pipelined ------------------------------------------------
 * With rstd (and mean) given, x, dy, dx and any residual gradients
 * (dresidual_out added to dh, dresidual written with dx) of one dtype, a thread runs its rows (one dweight chunk,
 * or one grab) as a pipeline: one pass loads row r's x and dy from memory,
 * forms x_hat and g with their row sums and the chunk's dweight/dbias terms,
 * and writes dx of the previous row, whose x and dy it reads again (from
 * cache: they were read one pass earlier). No scratch rows: every pass reads
 * and writes memory at once, as a copy does, with as few cache-side stores as
 * possible. Aliasing stays correct: dx may only be exactly x, dy or
 * dresidual_out, dresidual exactly dresidual_out, and each block of the
 * previous row is read before its output blocks are written.
 * Same arithmetic in the same order as bwd_row: bitwise the same dx and
 * partials. bf16 blocks, the weight and the dweight/dbias partials are in
 * split order (cpu_rows.h); reduce_partials puts the partials' sums back in
 * natural order. fp16 stays in natural order. */

/* A row's given statistics and its row sums' means. */
typedef struct bwd_row_state {
    float mean, rstd, mean_xg, mean_g;
} bwd_row_state;

/* The previous row's outputs, beside dx (py): with the residual call its
 * dresidual_out (qdr: res), added to dh, and dresidual (pdr, NULL when not
 * asked for: the same values; non-temporal when stream_dr). */
typedef struct bwd_res_rows {
    const unsigned char *qdr;
    unsigned char *pdr;
    int stream_dr;
} bwd_res_rows;

/* dh of a block (the previous row's) with its dresidual_out added (res),
 * into dx and dresidual; of an element, the same. */
CPU_INLINE void bwd_blk_out(unsigned char *py, int half, int res, int stream, bwd_res_rows rr, cpu_v8 dh[2], int64_t i)
{
    if (res) {
        cpu_v8 c, d;
        cpu_blk_ld(rr.qdr, half, i, &c, &d);
        dh[0] = dh[0] + c;
        dh[1] = dh[1] + d;
    }
    cpu_blk_st(py, half, i, &dh[0], &dh[1], stream);
    if (rr.pdr) cpu_blk_st(rr.pdr, half, i, &dh[0], &dh[1], rr.stream_dr);
}
CPU_INLINE void bwd_elem_out(unsigned char *py, int half, int res, bwd_res_rows rr, float dh, int64_t j)
{
    if (res) dh = dh + cpu_ld_half(rr.qdr, half, j);
    cpu_st_half(py, half, j, dh);
    if (rr.pdr) cpu_st_half(rr.pdr, half, j, dh);
}

/* Row r (at px, pdy) into the row sums and partials; when py, also dx of the
 * previous row (at qx, qdy; statistics in prev) stored at py, with its
 * residual rows rr (res: the residual call). */
CPU_INLINE void bwd_pipe_pass(int layernorm, int with_dw, int with_db, int half, int res, const unsigned char *px,
                              const unsigned char *pdy, float mean, float rstd, const float *restrict wf,
                              float *restrict dw_partial, float *restrict db_partial, float *acc_xg, float *acc_g,
                              unsigned char *py, int stream, const unsigned char *qx, const unsigned char *qdy,
                              bwd_res_rows rr, bwd_row_state prev, int64_t n, const cpu_prefetch *pf)
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
        if (py) bwd_blk_out(py, half, res, stream, rr, dh, i);
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
            bwd_elem_out(py, half, res, rr, dhv, j);
        }
    }
}

/* The variants with their switches as constants: bit 0 16-bit rows
 * (CPU_PIPE_HALF16), 1 dweight, 2 dbias, 3 LayerNorm, 4 the residual call. */
#define BWD_PIPE_CASE(C)                                                                                              \
    case C:                                                                                                           \
        bwd_pipe_pass(((C) >> 3) & 1, ((C) >> 1) & 1, ((C) >> 2) & 1, ((C)&1) * CPU_PIPE_HALF16, ((C) >> 4) & 1, px,  \
                      pdy, mean, rstd, wf, dw_partial, db_partial, acc_xg, acc_g, py, stream, qx, qdy, rr, prev, n,  \
                      pf);                                                                                            \
        break;

/* dx of one row alone (the pipeline's last row). */
CPU_INLINE void bwd_pipe_store(int half, int res, unsigned char *py, int stream, const unsigned char *qx,
                               const unsigned char *qdy, bwd_res_rows rr, const float *restrict wf, bwd_row_state st,
                               int64_t n)
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
        bwd_blk_out(py, half, res, stream, rr, dh, j);
    }
    for (; j < n; j++) {
        float xhat = (cpu_ld_half(qx, half, j) - st.mean) * st.rstd;
        float dyv = cpu_ld_half(qdy, half, j);
        float dh = st.rstd * ((dyv * wf[j] - st.mean_g) - xhat * st.mean_xg);
        bwd_elem_out(py, half, res, rr, dh, j);
    }
}

/* Rows r0..r1-1 through the pipeline. */
CPU_PIPE_KERNEL void CPU_PIPE_NAME(bwd_pipeline_rows)(const fusednorm_bwd_args *a, int64_t r0, int64_t r1,
                                                      const float *wf, float *dw_partial, float *db_partial,
                                                      int stream_dx, int stream_dr, float *stage)
{
    int64_t n = a->cols, es = (int64_t)fn_dtype_size(a->x.dtype);
    /* the fp16 build takes fp16 rows only: its fp32 variants fold away */
    int layernorm = a->norm == FUSEDNORM_LAYERNORM, half16 = CPU_PIPE_HALF16 == 2 || a->x.dtype != FUSEDNORM_F32;
    int res = a->dresidual_out.data != NULL;
    int variant = half16 | ((dw_partial != NULL) << 1) | ((db_partial != NULL) << 2) | (layernorm << 3) | (res << 4);
    bwd_res_rows rr = {NULL, NULL, 0};
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
            CPU_PIPE_VARIANTS(BWD_PIPE_CASE)
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
        if (res) rr.qdr = row_in(&a->dresidual_out, r);
        if (a->dresidual.data) {
            rr.pdr = row_out(&a->dresidual, r);
            rr.stream_dr = stream_dr && ((uintptr_t)rr.pdr & 15) == 0;
        }
    }
    if (py) {
        switch (half16 | res << 1) {
        case 0: bwd_pipe_store(0, 0, py, stream, qx, qdy, rr, wf, prev, n); break;
        case 1: bwd_pipe_store(CPU_PIPE_HALF16, 0, py, stream, qx, qdy, rr, wf, prev, n); break;
        case 2: bwd_pipe_store(0, 1, py, stream, qx, qdy, rr, wf, prev, n); break;
        default: bwd_pipe_store(CPU_PIPE_HALF16, 1, py, stream, qx, qdy, rr, wf, prev, n); break;
        }
        if (staged) cpu_stream_copy(dx_row, stage, row_bytes);
    }
}

#endif
