/*
 * CPU backend: RMSNorm / LayerNorm forward and backward over OpenMP threads.
 *
 * Forward, per row: h = x (+ residual) into an fp32 scratch row; residual_out
 * = h; mean/rstd from h; y = ((h - mean) * rstd) * (weight + weight_offset)
 * (+ bias). rstd[r] / mean[r] are written when given.
 * Backward, per row: x_hat = (x - mean) * rstd, g = dy * (weight + offset),
 *   dh = rstd * (g - mean(g) [LayerNorm only] - x_hat * mean(x_hat * g))
 *        (+ dresidual_out); dx = dh, dresidual = dh (its own dtype);
 *   dweight  = sum_rows dy * x_hat, dbias = sum_rows dy: '=' by default,
 *   '+=' (existing value read in its dtype, added in fp32) with ACCUMULATE.
 *
 * The common cases (no residual, one dtype, fp32 or bf16; rstd given in the
 * backward) run as a row pipeline: one pass writes a row's output while it
 * reads the thread's next row (see "forward, pipelined" / "backward,
 * pipelined"); each output block is written after the same row's input block
 * was read. The other cases read each row's inputs into fp32 scratch before
 * writing any output. Either way the exact aliasing the API allows (y == x,
 * residual_out == residual or x, dx == dy, dx or dresidual == dresidual_out)
 * is correct. Scratch is allocated before anything is written, so an
 * allocation failure leaves every output untouched.
 *
 * Determinism: rows are split into a fixed number of chunks that depends only
 * on (rows, cols), never on the thread count. Each chunk sums its rows, in
 * order, into its own fp32 partial row of the caller's workspace; the partials
 * are then added in chunk order per column. dweight/dbias are therefore
 * bitwise identical across runs and OMP_NUM_THREADS. ATOMIC_DWEIGHT is
 * ignored here (no atomics are needed on the CPU).
 */
#include "internal.h"

/* The F16C forms of the fp16 rows, unless a test turned them off
 * (fn_cpu_f16c_off, internal.h). */
#define CPU_F16C_ENABLED() (!fn_cpu_f16c_off && cpu_f16c())
#include "cpu/cpu_rows.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

int fn_cpu_f16c_off = 0, fn_cpu_pipeline_off = 0;

/* Below this many elements a parallel region costs more than it saves. */
#define CPU_PARALLEL_MIN_ELEMENTS (1 << 15)
/* Bounds on the dweight partials: at most this many chunks, at least this many
 * rows per chunk, and at most this many workspace floats per partial set
 * unless that would leave fewer than CPU_MIN_CHUNKS chunks. */
#define CPU_MAX_CHUNKS 64
#define CPU_ROWS_PER_CHUNK 16
#define CPU_MIN_CHUNKS 8
#define CPU_PARTIAL_FLOATS_BUDGET ((int64_t)1 << 22)
/* Scratch rows are padded to whole cache lines; the workspace is realigned
 * inside, which costs this many extra bytes. */
#define CPU_ALIGN 64
/* Outputs at least this large are written with streaming stores (see
 * cpu_rows.h): far beyond the caches, where their lines would not survive
 * until the next op reads them anyway. */
#ifndef CPU_STREAM_MIN_BYTES /* overridable for experiments */
#define CPU_STREAM_MIN_BYTES ((int64_t)32 << 20)
#endif

/* The row kernels are built twice, for x86-64-v2 (the library's baseline)
 * and for AVX2 (8-lane vectors: the bf16 conversions and row sums are
 * arithmetic-bound at 4 lanes), picked at load time by the CPU. Results are
 * identical: no contraction into FMA (ISO C mode), and the row sums use fixed
 * lanes (cpu_rows.h). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FN_CPU_NO_ISA_CLONES)
#define CPU_ROW_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define CPU_ROW_KERNEL
#endif

/* The row pipelines (cpu_pipeline.h) for fp32 and bf16 rows, in the same
 * clones; norm_cpu_f16c.c builds them for fp16. */
#define CPU_PIPE_KERNEL CPU_ROW_KERNEL static
#define CPU_PIPE_NAME(n) n
#define CPU_PIPE_HALF16 1
#include "cpu/cpu_pipeline.h"

static int stream_output(const fusednorm_tensor *t, int64_t rows, int64_t cols)
{
    return CPU_HAVE_STREAM && t->data && rows * cols * (int64_t)fn_dtype_size(t->dtype) >= CPU_STREAM_MIN_BYTES;
}

/* cols rounded up to 16 floats; saturates instead of overflowing (rows == 0
 * is valid with any cols, and the workspace size check catches the rest). */
static int64_t padded_cols(int64_t cols) { return cols > INT64_MAX - 15 ? cols : (cols + 15) & ~(int64_t)15; }

/* fp32 scratch: `shared_rows` rows used by every thread plus `per_thread`
 * rows for each of `threads`. NULL when it cannot be had. */
static float *alloc_rows(int64_t cols, int64_t shared_rows, int64_t per_thread, int threads)
{
    int64_t stride = padded_cols(cols);
    int64_t nrows = shared_rows + per_thread * (int64_t)threads;
    if (stride > (int64_t)(SIZE_MAX / sizeof(float)) / nrows) return NULL;
    size_t bytes = (size_t)stride * (size_t)nrows * sizeof(float);
    return (float *)aligned_alloc(CPU_ALIGN, bytes);
}

/* Rows a thread takes at a time when rows are handed out dynamically: about
 * 64K elements, so that a thread the OS preempts (a busy machine) holds up
 * only that much work instead of its whole static share. */
static int64_t rows_per_grab(int64_t cols)
{
    int64_t g = ((int64_t)1 << 16) / cols;
    return g < 1 ? 1 : g;
}

static int thread_count(int64_t rows, int64_t cols)
{
    if (rows < 2 || rows * cols < CPU_PARALLEL_MIN_ELEMENTS) return 1;
    int t = omp_get_max_threads();
    if ((int64_t)t > rows) t = (int)rows;
    return t < 1 ? 1 : t;
}

/* weight + weight_offset in fp32, or 1 (not 1 + offset) when weight is absent. */
static void prepare_weight(float *wf, const fusednorm_tensor *w, float offset, int64_t n)
{
    if (w->data) {
        cpu_load_row(wf, w->data, w->dtype, n);
        for (int64_t i = 0; i < n; i++) wf[i] += offset;
    } else {
        for (int64_t i = 0; i < n; i++) wf[i] = 1.0f;
    }
}

/* ---- forward ----------------------------------------------------------- */

/* y = ((h - mean) * rstd) * wf (+ bf), rounded into y's dtype: fp32 (half
 * 0), bf16 (1) or fp16 (2), 8 lanes at a time (each lane the scalar
 * arithmetic in the same order: the tail's results, bitwise). */
CPU_INLINE void fwd_normalize_v8(unsigned char *p, int half, int with_bias, const float *restrict h,
                                 const float *restrict wf, const float *restrict bf, float mean, float rstd, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        cpu_v8 v = ((cpu_v8_load(h + i) - mean) * rstd) * cpu_v8_load(wf + i);
        if (with_bias) v += cpu_v8_load(bf + i);
        cpu_v8_st(p, half, i, &v);
    }
    for (; i < n; i++) {
        float v = ((h[i] - mean) * rstd) * wf[i];
        if (with_bias) v += bf[i];
        cpu_st_half(p, half, i, v);
    }
}

CPU_INLINE void fwd_normalize_store(void *y, fusednorm_dtype t, const float *restrict h, const float *restrict wf,
                                const float *restrict bf, float mean, float rstd, int64_t n)
{
    unsigned char *p = (unsigned char *)y;
    /* each (dtype, bias) pair its own loop, the switches constant in it */
    switch (t) {
    case FUSEDNORM_BF16:
        if (bf) fwd_normalize_v8(p, 1, 1, h, wf, bf, mean, rstd, n);
        else fwd_normalize_v8(p, 1, 0, h, wf, bf, mean, rstd, n);
        break;
    case FUSEDNORM_F16:
        if (bf) fwd_normalize_v8(p, 2, 1, h, wf, bf, mean, rstd, n);
        else fwd_normalize_v8(p, 2, 0, h, wf, bf, mean, rstd, n);
        break;
    default:
        if (bf) fwd_normalize_v8(p, 0, 1, h, wf, bf, mean, rstd, n);
        else fwd_normalize_v8(p, 0, 0, h, wf, bf, mean, rstd, n);
        break;
    }
}

CPU_ROW_KERNEL static void fwd_row(const fusednorm_fwd_args *a, int64_t r, float *restrict h, float *restrict out,
                    const float *restrict wf, const float *restrict bf, int stream_y, int stream_residual_out)
{
    int64_t n = a->cols;
    int layernorm = a->norm == FUSEDNORM_LAYERNORM;
    cpu_prefetch pf = {row_next(&a->x, r, a->rows), a->residual.data ? row_next(&a->residual, r, a->rows) : NULL,
                       (int64_t)fn_dtype_size(a->x.dtype), (int64_t)fn_dtype_size(a->residual.dtype)};
    cpu_load_row(h, row_in(&a->x, r), a->x.dtype, n);
    if (a->residual.data) cpu_add_row(h, row_in(&a->residual, r), a->residual.dtype, n);
    if (stream_residual_out) {
        cpu_store_row(out, a->residual_out.dtype, h, n);
        cpu_stream_copy(row_out(&a->residual_out, r), out, (size_t)n * fn_dtype_size(a->residual_out.dtype));
    }
    else if (a->residual_out.data) cpu_store_row(row_out(&a->residual_out, r), a->residual_out.dtype, h, n);
    float mean, rstd;
    cpu_row_stats(h, n, layernorm, a->eps, &pf, &mean, &rstd);
    if (a->rstd) a->rstd[r] = rstd;
    if (a->mean) a->mean[r] = mean;
    if (a->y.dtype == FUSEDNORM_F16 && CPU_F16C_ENABLED()) {
        unsigned char *py = stream_y ? (unsigned char *)out : row_out(&a->y, r);
        cpu_fwd_normalize_f16c(py, h, wf, bf, mean, rstd, n);
        if (stream_y) cpu_stream_copy(row_out(&a->y, r), out, (size_t)n * 2);
    } else if (stream_y) {
        fwd_normalize_store(out, a->y.dtype, h, wf, bf, mean, rstd, n);
        cpu_stream_copy(row_out(&a->y, r), out, (size_t)n * fn_dtype_size(a->y.dtype));
    } else {
        fwd_normalize_store(row_out(&a->y, r), a->y.dtype, h, wf, bf, mean, rstd, n);
    }
}

fusednorm_status fn_cpu_fwd(const fusednorm_fwd_args *a)
{
    int64_t rows = a->rows, cols = a->cols, stride = padded_cols(cols);
    int threads = thread_count(rows, cols);
    int have_bias = a->bias.data != NULL;
    /* Shared rows: weight (+ offset) and bias in fp32; one h row per thread. */
    float *scratch = alloc_rows(cols, 1 + have_bias, 2, threads);
    if (!scratch)
        return fn_error(FUSEDNORM_ERROR_OUT_OF_MEMORY, "fusednorm_fwd: cannot allocate CPU scratch for %d rows of %lld",
                        2 * threads + 1 + have_bias, (long long)cols);
    float *wf = scratch, *bf = have_bias ? scratch + stride : NULL;
    float *thread_rows = scratch + (1 + have_bias) * stride;
    prepare_weight(wf, &a->weight, a->weight_offset, cols);
    if (bf) cpu_load_row(bf, a->bias.data, a->bias.dtype, cols);
    /* One dtype for x, y and any residual stream; fp16 in the pipeline only
     * built for F16C (norm_cpu_f16c.c). */
    int one_dtype = a->x.dtype == a->y.dtype && (!a->residual.data || a->residual.dtype == a->x.dtype) &&
                    (!a->residual_out.data || a->residual_out.dtype == a->x.dtype);
    int pipelined = !fn_cpu_pipeline_off && one_dtype && (a->residual.data || !a->residual_out.data) &&
                    (a->x.dtype != FUSEDNORM_F16 || CPU_F16C_ENABLED());
    if (pipelined && a->x.dtype == FUSEDNORM_BF16) {
        cpu_split_row(wf, cols);
        if (bf) cpu_split_row(bf, cols);
    }

    int stream_y = stream_output(&a->y, rows, cols);
    int64_t grab = rows_per_grab(cols);
    int stream_residual_out = stream_output(&a->residual_out, rows, cols);
    int64_t shared_next = 0;
#pragma omp parallel num_threads(threads) if (threads > 1)
    if (pipelined) {
        float *stage = thread_rows + 2 * (int64_t)omp_get_thread_num() * stride;
        if (a->x.dtype == FUSEDNORM_F16)
            fn_cpu_fwd_pipeline_thread_f16c(a, wf, bf, stream_y, stream_residual_out, &shared_next, grab, stage);
        else fwd_pipeline_thread(a, wf, bf, stream_y, stream_residual_out, &shared_next, grab, stage);
        cpu_stream_fence();
    } else {
        float *h = thread_rows + 2 * (int64_t)omp_get_thread_num() * stride, *out = h + stride;
#pragma omp for schedule(dynamic, grab)
        for (int64_t r = 0; r < rows; r++) fwd_row(a, r, h, out, wf, bf, stream_y, stream_residual_out);
        cpu_stream_fence();
    }
    free(scratch);
    return FUSEDNORM_OK;
}

/* ---- backward ---------------------------------------------------------- */

typedef struct bwd_plan {
    int64_t chunks;            /* row chunks, each with its own dweight/dbias partial rows */
    int64_t partial_sets;      /* 0, 1 (dweight or dbias) or 2 (both)                     */
} bwd_plan;

static bwd_plan plan_bwd(const fusednorm_bwd_args *a)
{
    bwd_plan p = {0, (a->dweight.data != NULL) + (a->dbias.data != NULL)};
    int64_t rows = a->rows, cols = a->cols;
    if (rows == 0 || p.partial_sets == 0) return p;
    int64_t by_rows = (rows + CPU_ROWS_PER_CHUNK - 1) / CPU_ROWS_PER_CHUNK;
    int64_t by_memory = CPU_PARTIAL_FLOATS_BUDGET / cols;
    if (by_memory < CPU_MIN_CHUNKS) by_memory = CPU_MIN_CHUNKS;
    int64_t chunks = CPU_MAX_CHUNKS;
    if (chunks > by_rows) chunks = by_rows;
    if (chunks > by_memory) chunks = by_memory;
    p.chunks = chunks;
    return p;
}

fusednorm_status fn_cpu_bwd_workspace_size(const fusednorm_bwd_args *a, size_t *bytes)
{
    bwd_plan p = plan_bwd(a);
    if (p.chunks == 0) {
        *bytes = 0;
        return FUSEDNORM_OK;
    }
    int64_t floats_per_set = p.chunks * padded_cols(a->cols);
    if (floats_per_set / p.chunks != padded_cols(a->cols) ||
        floats_per_set > (int64_t)((SIZE_MAX - CPU_ALIGN) / sizeof(float) / (size_t)p.partial_sets))
        return fn_error(FUSEDNORM_ERROR_OUT_OF_MEMORY, "fusednorm_bwd_workspace_size: cols (%lld) is too large",
                        (long long)a->cols);
    *bytes = (size_t)floats_per_set * (size_t)p.partial_sets * sizeof(float) + CPU_ALIGN;
    return FUSEDNORM_OK;
}

/* One pass over the row in scratch: x_hat replaces x, g = dy * wf, the row
 * sums of x_hat*g (and g for LayerNorm) over CPU_LANES fp32 lanes (see
 * cpu_rows.h), and the chunk's dweight/dbias terms. Written out per feature
 * so that each variant is one vectorizable loop. */
#define BWD_SUM_BODY(LAYERNORM, WITH_DW, WITH_DB, I, K)                                                            \
    {                                                                                                                 \
        float xhat = (xs[I] - mean) * rstd;                                                                           \
        float dyv = gs[I];                                                                                            \
        float g = dyv * wf[I];                                                                                        \
        xs[I] = xhat;                                                                                                 \
        acc_xg[K] += xhat * g;                                                                                        \
        if (LAYERNORM) acc_g[K] += g;                                                                                 \
        if (WITH_DW) dw_partial[I] += dyv * xhat;                                                                     \
        if (WITH_DB) db_partial[I] += dyv;                                                                            \
    }
#define BWD_SUM_LOOP(LAYERNORM, WITH_DW, WITH_DB)                                                                     \
    {                                                                                                                 \
        cpu_v4 v_xg[4] = {{0}, {0}, {0}, {0}}, v_g[4] = {{0}, {0}, {0}, {0}};                                         \
        int64_t i = 0;                                                                                                \
        for (; i + CPU_LANES <= n; i += CPU_LANES) {                                                                  \
            cpu_prefetch_block(&pf, i);                                                                               \
            for (int q = 0; q < 4; q++) {                                                                             \
                int64_t j = i + 4 * q;                                                                                \
                cpu_v4 xhat = (cpu_v4_load(xs + j) - mean) * rstd;                                                    \
                cpu_v4 dyv = cpu_v4_load(gs + j);                                                                     \
                cpu_v4 g = dyv * cpu_v4_load(wf + j);                                                                 \
                cpu_v4_store(xs + j, xhat);                                                                           \
                v_xg[q] += xhat * g;                                                                                  \
                if (LAYERNORM) v_g[q] += g;                                                                           \
                if (WITH_DW) cpu_v4_store(dw_partial + j, cpu_v4_load(dw_partial + j) + dyv * xhat);                  \
                if (WITH_DB) cpu_v4_store(db_partial + j, cpu_v4_load(db_partial + j) + dyv);                         \
            }                                                                                                         \
        }                                                                                                             \
        for (int q = 0; q < 4; q++) {                                                                                 \
            cpu_v4_store(acc_xg + 4 * q, v_xg[q]);                                                                    \
            cpu_v4_store(acc_g + 4 * q, v_g[q]);                                                                      \
        }                                                                                                             \
        for (int k = 0; i + k < n; k++) BWD_SUM_BODY(LAYERNORM, WITH_DW, WITH_DB, i + k, k)                           \
    }

/* dh = rstd * (g - mean(g) - x_hat * mean(x_hat * g)), mean(g) = 0 for RMSNorm. */
#define BWD_DH(i) (rstd * ((gs[i] * wf[i] - mean_g) - xs[i] * mean_xg))
#define BWD_DH_STORE_LOOP(STORE)                                                                                      \
    for (int64_t i = 0; i < n; i++) STORE(p, i, BWD_DH(i));

/* One row. xs, gs, out: the thread's fp32 scratch rows. dw_partial / db_partial:
 * this chunk's partial rows (NULL when not wanted). */
CPU_ROW_KERNEL static void bwd_row(const fusednorm_bwd_args *a, int64_t r, float *restrict xs, float *restrict gs,
                                   float *restrict out,
                    const float *restrict wf, float *restrict dw_partial, float *restrict db_partial, int stream)
{
    int64_t n = a->cols;
    int layernorm = a->norm == FUSEDNORM_LAYERNORM;
    float mean, rstd;
    cpu_load_row(xs, row_in(&a->x, r), a->x.dtype, n);
    cpu_load_row(gs, row_in(&a->dy, r), a->dy.dtype, n);
    cpu_prefetch pf = {row_next(&a->x, r, a->rows), row_next(&a->dy, r, a->rows), (int64_t)fn_dtype_size(a->x.dtype),
                       (int64_t)fn_dtype_size(a->dy.dtype)};
    if (a->rstd) {
        rstd = a->rstd[r];
        mean = a->mean ? a->mean[r] : 0.0f;
    } else {
        static const cpu_prefetch none = {0, 0, 0, 0};
        cpu_row_stats(xs, n, layernorm, a->eps, &none, &mean, &rstd);
    }

    /* x_hat in place of x; the row sums; this row's dweight/dbias terms. */
    float acc_xg[CPU_LANES], acc_g[CPU_LANES];
    if (layernorm) {
        if (dw_partial && db_partial) BWD_SUM_LOOP(1, 1, 1)
        else if (dw_partial) BWD_SUM_LOOP(1, 1, 0)
        else if (db_partial) BWD_SUM_LOOP(1, 0, 1)
        else BWD_SUM_LOOP(1, 0, 0)
    } else {
        if (dw_partial && db_partial) BWD_SUM_LOOP(0, 1, 1)
        else if (dw_partial) BWD_SUM_LOOP(0, 1, 0)
        else if (db_partial) BWD_SUM_LOOP(0, 0, 1)
        else BWD_SUM_LOOP(0, 0, 0)
    }
    float mean_xg = cpu_lanes_total(acc_xg) / (float)n;
    float mean_g = layernorm ? cpu_lanes_total(acc_g) / (float)n : 0.0f;

    if (!a->dresidual_out.data && !a->dresidual.data) {
        /* dh converted straight into dx, or into `out` to be streamed out. */
        unsigned char *p = stream ? (unsigned char *)out : row_out(&a->dx, r);
        switch (a->dx.dtype) {
        case FUSEDNORM_BF16: BWD_DH_STORE_LOOP(cpu_st_bf16) break;
        case FUSEDNORM_F16:
            if (CPU_F16C_ENABLED()) {
                cpu_bwd_dh_f16c(p, xs, gs, wf, rstd, mean_g, mean_xg, n);
                break;
            }
            /* dh in place of g, then converted 8 lanes at a time */
            for (int64_t i = 0; i < n; i++) gs[i] = BWD_DH(i);
            cpu_store_row(p, FUSEDNORM_F16, gs, n);
            break;
        default: BWD_DH_STORE_LOOP(cpu_st_f32) break;
        }
        if (stream) cpu_stream_copy(row_out(&a->dx, r), out, (size_t)n * fn_dtype_size(a->dx.dtype));
        return;
    }
    for (int64_t i = 0; i < n; i++) gs[i] = BWD_DH(i);
    if (a->dresidual_out.data) cpu_add_row(gs, row_in(&a->dresidual_out, r), a->dresidual_out.dtype, n);
    if (stream) {
        cpu_store_row(out, a->dx.dtype, gs, n);
        cpu_stream_copy(row_out(&a->dx, r), out, (size_t)n * fn_dtype_size(a->dx.dtype));
        if (a->dresidual.data) {
            cpu_store_row(out, a->dresidual.dtype, gs, n);
            cpu_stream_copy(row_out(&a->dresidual, r), out, (size_t)n * fn_dtype_size(a->dresidual.dtype));
        }
    } else {
        cpu_store_row(row_out(&a->dx, r), a->dx.dtype, gs, n);
        if (a->dresidual.data) cpu_store_row(row_out(&a->dresidual, r), a->dresidual.dtype, gs, n);
    }
}

/* Rows r0..r1-1 through the pipeline of their dtype. */
static void bwd_pipeline(const fusednorm_bwd_args *a, int64_t r0, int64_t r1, const float *wf, float *dw_partial,
                         float *db_partial, int stream_dx, int stream_dr, float *stage)
{
    if (a->x.dtype == FUSEDNORM_F16)
        fn_cpu_bwd_pipeline_rows_f16c(a, r0, r1, wf, dw_partial, db_partial, stream_dx, stream_dr, stage);
    else bwd_pipeline_rows(a, r0, r1, wf, dw_partial, db_partial, stream_dx, stream_dr, stage);
}

/* out[j] (+)= sum over chunks, in chunk order, of partials[c * stride + j]. */
static void reduce_partials(const fusednorm_tensor *out, const float *partials, int64_t chunks, int64_t stride,
                            int64_t cols, int accumulate, int split, int threads)
{
    enum { BLOCK = 512 };
    int64_t blocks = (cols + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t b = 0; b < blocks; b++) {
        float sum[BLOCK];
        int64_t j0 = b * BLOCK, len = cols - j0 < BLOCK ? cols - j0 : BLOCK;
        for (int64_t j = 0; j < len; j++) sum[j] = 0.0f;
        for (int64_t c = 0; c < chunks; c++) {
            const float *src = partials + c * stride + j0;
            for (int64_t j = 0; j < len; j++) sum[j] += src[j];
        }
        /* BLOCK is a multiple of CPU_LANES, so split blocks never straddle. */
        if (split) {
            int64_t full = (cols / CPU_LANES) * CPU_LANES - j0;
            cpu_unsplit_row(sum, full < len ? full : len);
        }
        unsigned char *dst = (unsigned char *)out->data + (size_t)j0 * fn_dtype_size(out->dtype);
        if (accumulate) {
            float prev[BLOCK];
            cpu_load_row(prev, dst, out->dtype, len);
            for (int64_t j = 0; j < len; j++) sum[j] = prev[j] + sum[j];
        }
        cpu_store_row(dst, out->dtype, sum, len);
    }
}

fusednorm_status fn_cpu_bwd(const fusednorm_bwd_args *a)
{
    int64_t rows = a->rows, cols = a->cols, stride = padded_cols(cols);
    int accumulate = (a->flags & FUSEDNORM_ACCUMULATE) != 0;
    bwd_plan plan = plan_bwd(a);

    if (rows == 0) {
        if (accumulate) return FUSEDNORM_OK;
        const fusednorm_tensor *outs[2] = {&a->dweight, &a->dbias};
        for (int k = 0; k < 2; k++)
            if (outs[k]->data) memset(outs[k]->data, 0, (size_t)cols * fn_dtype_size(outs[k]->dtype));
        return FUSEDNORM_OK;
    }

    float *partials = NULL;
    if (plan.chunks > 0) {
        size_t need = 0;
        fusednorm_status s = fn_cpu_bwd_workspace_size(a, &need);
        if (s != FUSEDNORM_OK) return s;
        if (!a->workspace || a->workspace_bytes < need)
            return fn_error(FUSEDNORM_ERROR_WORKSPACE, "fusednorm_bwd: workspace (%zu bytes) is smaller than %zu",
                            a->workspace ? a->workspace_bytes : (size_t)0, need);
        uintptr_t base = (uintptr_t)a->workspace;
        partials = (float *)((base + CPU_ALIGN - 1) & ~(uintptr_t)(CPU_ALIGN - 1));
    }
    float *dw_partials = a->dweight.data ? partials : NULL;
    float *db_partials = a->dbias.data ? partials + (dw_partials ? plan.chunks * stride : 0) : NULL;

    int threads = thread_count(rows, cols);
    float *scratch = alloc_rows(cols, 1, 3, threads);
    if (!scratch)
        return fn_error(FUSEDNORM_ERROR_OUT_OF_MEMORY, "fusednorm_bwd: cannot allocate CPU scratch for %d rows of %lld",
                        3 * threads + 1, (long long)cols);
    float *wf = scratch, *thread_rows = scratch + stride;
    prepare_weight(wf, &a->weight, a->weight_offset, cols);
    /* x, dy, dx and any residual gradients of one dtype; fp16 in the
     * pipeline only built for F16C (norm_cpu_f16c.c). */
    int pipelined = !fn_cpu_pipeline_off && a->rstd && a->x.dtype == a->dy.dtype && a->dx.dtype == a->x.dtype &&
                    (!a->dresidual_out.data || a->dresidual_out.dtype == a->x.dtype) &&
                    (!a->dresidual.data || a->dresidual.dtype == a->x.dtype) &&
                    (a->x.dtype != FUSEDNORM_F16 || CPU_F16C_ENABLED());
    int split = pipelined && a->x.dtype == FUSEDNORM_BF16;
    if (split) cpu_split_row(wf, cols);

    /* Without dweight/dbias any split of rows is fine; with them, the split is
     * the plan's chunks, whatever thread runs each one. */
    int64_t chunks = plan.chunks > 0 ? plan.chunks : 1;
    int stream = stream_output(&a->dx, rows, cols), stream_dr = stream_output(&a->dresidual, rows, cols);
    int64_t grab = rows_per_grab(cols);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *xs = thread_rows + 3 * (int64_t)omp_get_thread_num() * stride;
        float *gs = xs + stride, *out = gs + stride;
        if (pipelined && plan.chunks == 0) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t g = 0; g < (rows + grab - 1) / grab; g++) {
                int64_t r0 = g * grab, r1 = r0 + grab < rows ? r0 + grab : rows;
                bwd_pipeline(a, r0, r1, wf, NULL, NULL, stream, stream_dr, out);
            }
        } else if (plan.chunks == 0) {
#pragma omp for schedule(dynamic, grab)
            for (int64_t r = 0; r < rows; r++) bwd_row(a, r, xs, gs, out, wf, NULL, NULL, stream);
        } else {
#pragma omp for schedule(dynamic, 1)
            for (int64_t c = 0; c < chunks; c++) {
                int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
                float *dwp = dw_partials ? dw_partials + c * stride : NULL;
                float *dbp = db_partials ? db_partials + c * stride : NULL;
                if (dwp) memset(dwp, 0, (size_t)cols * sizeof(float));
                if (dbp) memset(dbp, 0, (size_t)cols * sizeof(float));
                if (pipelined) bwd_pipeline(a, r0, r1, wf, dwp, dbp, stream, stream_dr, out);
                else
                    for (int64_t r = r0; r < r1; r++) bwd_row(a, r, xs, gs, out, wf, dwp, dbp, stream);
            }
        }
        cpu_stream_fence();
    }
    free(scratch);

    if (dw_partials) reduce_partials(&a->dweight, dw_partials, chunks, stride, cols, accumulate, split, threads);
    if (db_partials) reduce_partials(&a->dbias, db_partials, chunks, stride, cols, accumulate, split, threads);
    return FUSEDNORM_OK;
}
