/*
 * The CUDA launch planner (src/plan.c) is pure C, so CI checks it without a
 * GPU: for every cols up to past the largest register coverage, both
 * directions, vector access on or off, sm_80 and sm_90, the plan must be a
 * shape the kernels are instantiated for and must cover the row:
 *   - rows path: ept allowed for (direction, vec); cluster * tpr * ept >= cols;
 *     tpr a power of two below a warp or a whole number of warps <= 512;
 *     threads = rows_per_block * tpr <= 512; clusters only on sm_90, <= 8;
 *     vec = 16/x_bytes with vector access, else 1;
 *   - two-pass only where no register plan can cover the row (or for rows of
 *     1024+ columns without vector access), one row per CTA of
 *     fn_plan_two_pass_threads threads; and always for a forward the
 *     backend marks `stream` (the streaming kernel's call, long rows).
 * It also pins the choices docs/perf.md reports for the benchmark shapes.
 */
#include "harness.h"
#include "plan.h"

#include <stdio.h>

static int64_t max_coverage(int is_bwd, int vec, int cc_major, int wide)
{
    if (is_bwd && vec == 8 && wide) /* the wide tile, in clusters of up to 16 */
        return (int64_t)(cc_major >= 9 ? 16 : 1) * 512 * 32;
    const int max_ept = is_bwd ? (vec == 1 ? 8 : 16) : (vec == 1 ? 16 : 32);
    return (int64_t)(cc_major >= 9 ? 8 : 1) * 512 * max_ept;
}

/* The clustered held plan's rule (plan.h): CTAs of up to 256 threads in a
 * cluster of up to 8, else of up to 512 in a cluster of up to 16; returns
 * the cluster size (0: none holds the row) and the CTA bound in *cta. */
static int expect_cluster(int64_t nv, int u, int *cta)
{
    for (int t = FN_PLAN_HELD_SMALL_CTA_THREADS; t <= FN_PLAN_HELD_CLUSTER_CTA_THREADS; t *= 2) {
        const int most = t == FN_PLAN_HELD_SMALL_CTA_THREADS ? FN_PLAN_HELD_SMALL_CTA_MAX_CLUSTER
                                                             : FN_PLAN_HELD_MAX_CLUSTER;
        int c = 2;
        while ((int64_t)c * u * t < nv) c *= 2;
        if (c <= most) {
            *cta = t;
            return c;
        }
    }
    return 0;
}

/* RMSNorm's forward of the common call past 64 KiB on sm_90 (plan.h,
 * FN_PLAN_FWD_ROWS_CLUSTER_*), or of the residual call from 32 KiB:
 * the register tile over a cluster. 16-bit rows: 32 elements a thread over
 * the fewest CTAs of 256 threads (at most 8), each the fewest whole warps
 * that cover its slice, else (not the residual call) 8 x 512 that the row
 * fills exactly (131072). fp32: 32 elements over 3, 4, 8 or 16 CTAs of 256
 * threads that the row fills exactly, else 16 elements by the 16-bit rule
 * (to 32768 columns), 8 x 384 (49152) or 16 x 384 (98304); the fp32
 * residual call 16 elements by the 16-bit rule where the row fills the
 * tile exactly, or 16 x 256 (65536). Clusters of 16 (step 99, a device
 * that launches them, as check_one's): 16-bit 131072 in 16 x 256 (the
 * residual call too) in place of 8 x 512, 16-bit 262144 and the fp32
 * residual call's 131072 in 16 x 512, fp32 262144 in 16 x 512 x 32 (the
 * residual call's too since step 103). Returns the
 * cluster (0: none), the threads a row in *tpr, the elements a thread in *ept. */
static int expect_rows_cluster(int64_t cols, int x_bytes, int residual, int *tpr, int *ept)
{
    if (x_bytes == 4 && !residual) {
        for (int c = 3; c <= 16; c++)
            if ((c == 3 || c == 4 || c == 8 || c == 16) && cols == (int64_t)c * 256 * 32) {
                *tpr = 256;
                *ept = 32;
                return c;
            }
    }
    *ept = x_bytes == 2 ? 32 : 16;
    int c = 1;
    while ((int64_t)c * 256 * *ept < cols) c++;
    if (c >= 2 && c <= 8) {
        *tpr = (int)(((cols + (int64_t)*ept * c - 1) / ((int64_t)*ept * c) + 31) / 32 * 32);
        if (residual && x_bytes == 4 && (int64_t)c * *tpr * *ept != cols) return 0;
        return c;
    }
    if ((residual || x_bytes == 2) && cols == 16 * 256 * (int64_t)*ept) { /* fp32 65536, 16-bit 131072 */
        *tpr = 256;
        return 16;
    }
    if ((residual || x_bytes == 2) && cols == 16 * 512 * (int64_t)*ept) { /* 16-bit 262144, fp32 131072 */
        *tpr = 512;
        return 16;
    }
    if (x_bytes == 4 && cols == 16 * 512 * 32) { /* the residual call's too (step 103) */
        *tpr = 512;
        *ept = 32;
        return 16;
    }
    if (residual) return 0;
    if (x_bytes == 4 && (cols == 8 * 384 * 16 || cols == 16 * 384 * 16)) {
        *tpr = 384;
        return cols == 8 * 384 * 16 ? 8 : 16;
    }
    return 0;
}

/* A forward plan of the register tile over a cluster, one row a CTA of tpr
 * threads, as expected, and one the cluster exchange takes. */
static void expect_tile(const fn_plan *p, int cluster, int tpr, int ept, int vec)
{
    ASSERT_EQ_INT(p->path, FN_PATH_ROWS_IN_REGISTERS);
    ASSERT_EQ_INT(p->cluster, cluster);
    ASSERT_EQ_INT(p->tpr, tpr);
    ASSERT_EQ_INT(p->threads, tpr);
    ASSERT_EQ_INT(p->ept, ept);
    ASSERT_EQ_INT(p->vec, vec);
    ASSERT_TRUE(fn_plan_cluster_xchg_ok(p->cluster, p->rows_per_block, p->tpr, p->threads));
}

static void check_one(int is_bwd, int64_t cols, int x_bytes, int vec_ok, int cc, int wide, int stream)
{
    fn_plan_problem pb = {is_bwd, cols, x_bytes, vec_ok, cc, 16, wide, 0, stream, 0, 0, 0, 0, 0};
    fn_plan p = fn_plan_make(&pb);
    snprintf(th_context, sizeof th_context, "plan %s cols %lld x_bytes %d vec_ok %d sm_%d0 wide %d",
             is_bwd ? "bwd" : "fwd", (long long)cols, x_bytes, vec_ok, cc, wide);
    const int vec = vec_ok ? 16 / x_bytes : 1;
    ASSERT_EQ_INT(p.vec, vec);
    if (!vec_ok && cols >= FN_PLAN_SCALAR_TWO_PASS_COLS) ASSERT_EQ_INT(p.path, FN_PATH_TWO_PASS);
    const int streamed = !is_bwd && ((stream == FN_STREAM_COMMON && cols * x_bytes > FN_PLAN_STREAM_FWD_BYTES) ||
                                     (stream == FN_STREAM_RESIDUAL && cols * x_bytes >= FN_PLAN_STREAM_FWD_RES_BYTES));
    ASSERT_EQ_INT(fn_plan_streams(&pb), streamed);
    const int64_t nv = vec_ok && cols % vec == 0 ? cols / vec : 0;
    /* Streamed rows past 64 KiB are held over a cluster on sm_90 where a
     * cluster of up to FN_PLAN_HELD_MAX_CLUSTER CTAs holds them. */
    const int u_cl = stream == FN_STREAM_RESIDUAL ? 4 : 8;
    int cta = 0;
    const int want_c = nv > 0 ? expect_cluster(nv, u_cl, &cta) : 0;
    const int clustered = streamed && cc >= 9 && want_c > 0 &&
                          (cols * x_bytes > FN_PLAN_STREAM_FWD_BYTES ||
                           (stream == FN_STREAM_RESIDUAL && cols * x_bytes > FN_PLAN_STREAM_FWD_RES_BYTES));
    int rc_tpr = 0, rc_ept = 0;
    const int rows_cl_call = !is_bwd && cc >= 9 && nv > 0 &&
                             ((stream == FN_STREAM_COMMON && cols * x_bytes > FN_PLAN_STREAM_FWD_BYTES) ||
                              (stream == FN_STREAM_RESIDUAL && cols * x_bytes >= FN_PLAN_STREAM_FWD_RES_BYTES));
    const int rows_cl =
        rows_cl_call ? expect_rows_cluster(cols, x_bytes, stream == FN_STREAM_RESIDUAL, &rc_tpr, &rc_ept) : 0;
    if (streamed) ASSERT_EQ_INT(p.path, rows_cl ? FN_PATH_ROWS_IN_REGISTERS : clustered ? FN_PATH_HELD : FN_PATH_TWO_PASS);
    const int64_t min_nv = x_bytes == 4 ? FN_PLAN_HELD_F32_MIN_VECTORS : FN_PLAN_HELD_MIN_VECTORS;
    const int held = (!is_bwd && stream != FN_STREAM_NONE && !streamed && nv >= min_nv &&
                      nv <= FN_PLAN_HELD_MAX_VECTORS) ||
                     (clustered && !rows_cl);
    ASSERT_EQ_INT(p.path == FN_PATH_HELD, held);
    if (p.path == FN_PATH_HELD && clustered) {
        /* U = 8 (4 with the residual), the smallest power-of-two cluster
         * of at least 2 that holds the row (expect_cluster), whole warps,
         * no warp idle on every CTA */
        const int u = p.ept / vec, c = p.cluster;
        ASSERT_EQ_INT(p.ept % vec, 0);
        ASSERT_EQ_INT(u, u_cl);
        ASSERT_EQ_INT(c, want_c);
        ASSERT_TRUE(p.tpr % 32 == 0 && p.tpr >= 32 && p.tpr <= cta);
        ASSERT_TRUE((int64_t)c * p.tpr * u >= nv);
        ASSERT_TRUE((int64_t)c * (p.tpr - 32) * u < nv);
        ASSERT_EQ_INT(p.rows_per_block, 1);
        ASSERT_EQ_INT(p.threads, p.tpr);
    } else if (p.path == FN_PATH_HELD) {
        /* U raw vectors per thread: 4 with a residual stream; else 8
         * where that leaves more than a warp per row, else 4; the row
         * covered, no thread beyond the rounding of tpr left idle */
        const int u = p.ept / vec;
        ASSERT_EQ_INT(p.ept % vec, 0);
        ASSERT_EQ_INT(u, stream == FN_STREAM_COMMON && (nv + 7) / 8 > 32 ? 8 : 4);
        ASSERT_TRUE((int64_t)p.tpr * u >= nv);
        ASSERT_TRUE(p.tpr < 32 ? (p.tpr & (p.tpr - 1)) == 0 : p.tpr % 32 == 0);
        ASSERT_TRUE(p.tpr <= 32 ? (int64_t)(p.tpr / 2) * u < nv : (int64_t)(p.tpr - 32) * u < nv);
        ASSERT_EQ_INT(p.rows_per_block, p.tpr >= 256 ? 1 : 256 / p.tpr);
        ASSERT_EQ_INT(p.threads, p.rows_per_block * p.tpr);
        ASSERT_TRUE(p.threads >= 32 && p.threads <= 512 && p.threads % 32 == 0);
        ASSERT_EQ_INT(p.cluster, 1);
    } else if (p.path == FN_PATH_ROWS_IN_REGISTERS) {
        ASSERT_TRUE(fn_plan_ept_allowed(is_bwd, vec, p.ept));
        ASSERT_TRUE((int64_t)p.cluster * p.tpr * p.ept >= cols);
        ASSERT_TRUE(p.tpr >= 1 && p.tpr <= 512);
        ASSERT_TRUE(p.tpr < 32 ? (p.tpr & (p.tpr - 1)) == 0 : p.tpr % 32 == 0);
        ASSERT_EQ_INT(p.threads, p.rows_per_block * p.tpr);
        ASSERT_TRUE(p.threads >= 32 && p.threads <= 512 && p.threads % 32 == 0);
        /* 16: the backward's 32-element and fp32 tiles, and the forward's fp32 98304 and 131072 */
        ASSERT_TRUE(p.cluster >= 1 &&
                    p.cluster <= (cc >= 9 ? ((is_bwd && (p.ept == 32 || x_bytes == 4)) || rows_cl == 16 ? 16 : 8) : 1));
        if (rows_cl) {
            ASSERT_EQ_INT(p.ept, rc_ept);
            ASSERT_EQ_INT(p.cluster, rows_cl);
            ASSERT_EQ_INT(p.tpr, rc_tpr);
            ASSERT_EQ_INT(p.rows_per_block, 1);
        }
        ASSERT_TRUE(p.tpr * p.ept >= vec);
        /* the wide tile: only when launchable, fp32's only past what 16 x 512 x 16 holds */
        if (is_bwd && p.ept == 32) ASSERT_TRUE(wide && (vec == 8 || (vec == 4 && cols == FN_PLAN_F32_BWD_WIDE_COLS)));
        if (is_bwd && vec == 4 && wide && cc >= 9 && cols == FN_PLAN_F32_BWD_WIDE_COLS)
            ASSERT_TRUE(p.ept == 32 && p.cluster == 16 && p.tpr == 512);
        ASSERT_TRUE(fn_plan_cluster_xchg_ok(p.cluster, p.rows_per_block, p.tpr, p.threads)); /* the exchange's */
    } else {
        ASSERT_EQ_INT(p.path, FN_PATH_TWO_PASS);
        ASSERT_TRUE(cols > max_coverage(is_bwd, vec, cc, wide) || (!vec_ok && cols >= FN_PLAN_SCALAR_TWO_PASS_COLS) ||
                    streamed);
        ASSERT_EQ_INT(p.threads, fn_plan_two_pass_threads(cols, x_bytes));
        ASSERT_TRUE(p.threads >= 128 && p.threads <= 512 && p.threads % 32 == 0);
        ASSERT_EQ_INT(p.tpr, p.threads);
        ASSERT_EQ_INT(p.rows_per_block, 1);
        ASSERT_EQ_INT(p.cluster, 1);
    }
}

int main(void)
{
    static const int64_t extra[] = {2000, 4097, 65537, 131072, 131073, 262144, 262145, 1048576, 1 << 24};
    for (int is_bwd = 0; is_bwd < 2; is_bwd++)
        for (int x_bytes = 2; x_bytes <= 4; x_bytes += 2)
            for (int cc = 8; cc <= 9; cc++)
                for (int vec_ok = 0; vec_ok < 2; vec_ok++)
                    for (int wide = 0; wide < 2; wide++)
                        for (int stream = FN_STREAM_NONE; stream <= FN_STREAM_RESIDUAL; stream++) {
                            /* stream: set by the backend only for forward calls with vector access */
                            if (stream != FN_STREAM_NONE && (is_bwd || !vec_ok)) continue;
                            for (int64_t cols = 1; cols <= 20000; cols += cols < 600 ? 1 : 37)
                                check_one(is_bwd, cols, x_bytes, vec_ok, cc, wide, stream);
                            for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
                                check_one(is_bwd, extra[i], x_bytes, vec_ok, cc, wide, stream);
                        }

    /* Where the forward streams (docs/perf.md, sessions 8 and 9): the
     * common call past rows of 64 KiB (bf16 32768, fp32 16384: held) with
     * no upper bound, the residual call from rows of 32 KiB (bf16 16384,
     * fp32 8192); shorter rows of those calls are held. A streamed row
     * keeps the weight in L1 unless the row (x, and the residual) takes 128
     * to 512 KiB of it (keeps: -1 where the row is not streamed). */
    /* cluster: on sm_90, the clustered held plan's CTAs per row (0: streamed
     * or held in one CTA; every row of 64 KiB or less, and those no cluster
     * of 16 holds: bf16 past 524288, fp32 past 262144); on sm_80 every
     * streamed row streams. */
    struct { int64_t cols; int x_bytes, stream, streams, keeps, cluster; } streamed[] = {
        {16384, 2, FN_STREAM_COMMON, 0, -1, 0},  {32768, 2, FN_STREAM_COMMON, 0, -1, 0},
        {65536, 2, FN_STREAM_COMMON, 1, 0, 4},   {131072, 2, FN_STREAM_COMMON, 1, 0, 8},
        {262144, 2, FN_STREAM_COMMON, 1, 0, 8},  {524288, 2, FN_STREAM_COMMON, 1, 1, 16},
        {1 << 20, 2, FN_STREAM_COMMON, 1, 1, 0}, {1 << 20, 4, FN_STREAM_COMMON, 1, 1, 0},
        {32768, 4, FN_STREAM_COMMON, 1, 0, 4},   {262144, 4, FN_STREAM_COMMON, 1, 1, 16},
        {8192, 2, FN_STREAM_RESIDUAL, 0, -1, 0}, {16384, 2, FN_STREAM_RESIDUAL, 1, 1, 0},
        {16392, 2, FN_STREAM_RESIDUAL, 1, 1, 4}, {24576, 2, FN_STREAM_RESIDUAL, 1, 1, 4},
        {32768, 2, FN_STREAM_RESIDUAL, 1, 0, 4}, {65536, 2, FN_STREAM_RESIDUAL, 1, 0, 8},
        {262144, 2, FN_STREAM_RESIDUAL, 1, 1, 16}, {4096, 4, FN_STREAM_RESIDUAL, 0, -1, 0},
        {8192, 4, FN_STREAM_RESIDUAL, 1, 1, 0},  {12288, 4, FN_STREAM_RESIDUAL, 1, 1, 4},
        {16384, 4, FN_STREAM_RESIDUAL, 1, 0, 4}, {32768, 4, FN_STREAM_RESIDUAL, 1, 0, 8},
        {65536, 2, FN_STREAM_NONE, 0, -1, 0},
    };
    for (size_t i = 0; i < sizeof streamed / sizeof streamed[0]; i++) {
        for (int cc = streamed[i].stream == FN_STREAM_NONE ? 9 : 8; cc <= 9; cc++) {
            /* LayerNorm: the held rule (the register tile's rows: below) */
            fn_plan_problem pb = {0, streamed[i].cols, streamed[i].x_bytes, 1, cc, 16, 0, 0, streamed[i].stream, 0, 0, 1, 0, 0};
            snprintf(th_context, sizeof th_context, "streams: cols %lld x_bytes %d stream %d sm_%d0",
                     (long long)streamed[i].cols, streamed[i].x_bytes, streamed[i].stream, cc);
            ASSERT_EQ_INT(fn_plan_streams(&pb), streamed[i].streams);
            const int held = streamed[i].stream != FN_STREAM_NONE && !streamed[i].streams;
            const int cluster = cc >= 9 ? streamed[i].cluster : 0;
            const fn_plan p = fn_plan_make(&pb);
            /* rows the register tile takes (step 96: LayerNorm's common call
             * past 64 KiB too; step 111: its residual call too) bypass the
             * held rule */
            fn_plan tile;
            if (fn_plan_fwd_rows_cluster_call(&pb) &&
                fn_plan_use_fwd_rows_cluster(&tile, pb.cols, pb.x_bytes, pb.max_cluster,
                                             pb.stream == FN_STREAM_RESIDUAL)) {
                ASSERT_EQ_INT(p.path, FN_PATH_ROWS_IN_REGISTERS);
                ASSERT_EQ_INT(p.cluster, tile.cluster);
                continue;
            }
            ASSERT_EQ_INT(p.path, cluster                ? FN_PATH_HELD
                                  : streamed[i].streams ? FN_PATH_TWO_PASS
                                  : held                ? FN_PATH_HELD
                                                        : FN_PATH_ROWS_IN_REGISTERS);
            if (p.path == FN_PATH_HELD) ASSERT_EQ_INT(p.cluster, cluster ? cluster : 1);
            if (streamed[i].keeps >= 0) ASSERT_EQ_INT(fn_plan_stream_keeps_weight(&pb), streamed[i].keeps);
        }
    }

    /* The held forward's plans for the shapes of docs/perf.md (session 9,
     * step 48): U = ept / vec vectors per thread, tpr threads per row,
     * rows_per_block rows per CTA; 256 columns (32 vectors) stay on the
     * register tile, 32768 bf16 streams, and so does any call but the
     * common one. */
    const int C = FN_STREAM_COMMON, R = FN_STREAM_RESIDUAL;
    struct { int64_t cols; int x_bytes, stream, u, tpr, rpb; } held[] = {
        {1024, 2, C, 4, 32, 8},   {2048, 2, C, 4, 64, 4},    {3000, 2, C, 8, 64, 4},    {4096, 2, C, 8, 64, 4},
        {8192, 2, C, 8, 128, 2},  {12000, 2, C, 8, 192, 1},  {16384, 2, C, 8, 256, 1},  {32768, 2, C, 8, 512, 1},
        {1024, 4, C, 4, 64, 4},   {2048, 4, C, 8, 64, 4},    {3000, 4, C, 8, 96, 2},    {12000, 4, C, 8, 384, 1},
        {16384, 4, C, 8, 512, 1}, {520, 4, C, 4, 64, 4},     {1024, 2, R, 4, 32, 8},    {8192, 2, R, 4, 256, 1},
        {16376, 2, R, 4, 512, 1}, {4096, 4, R, 4, 256, 1},   {8188, 4, R, 4, 512, 1},
    };
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) {
        fn_plan_problem pb = {0, held[i].cols, held[i].x_bytes, 1, 9, 16, 0, 0, held[i].stream, 0, 0, 0, 0, 0};
        const fn_plan p = fn_plan_make(&pb);
        snprintf(th_context, sizeof th_context, "held: cols %lld x_bytes %d stream %d", (long long)held[i].cols,
                 held[i].x_bytes, held[i].stream);
        ASSERT_EQ_INT(p.path, FN_PATH_HELD);
        ASSERT_EQ_INT(p.ept, held[i].u * (16 / held[i].x_bytes));
        ASSERT_EQ_INT(p.tpr, held[i].tpr);
        ASSERT_EQ_INT(p.rows_per_block, held[i].rpb);
        pb.stream = FN_STREAM_NONE; /* any other call: never held */
        ASSERT_TRUE(fn_plan_make(&pb).path != FN_PATH_HELD);
        pb.stream = held[i].stream;
        pb.is_bwd = 1;
        ASSERT_TRUE(fn_plan_make(&pb).path != FN_PATH_HELD);
    }
    /* fp32 weights with 16-bit x (w32): held as the common call from 512
     * vectors, with the residual from 128; never streamed (past 64 KiB:
     * the clusters) */
    fn_plan_problem w32 = {0, 4096, 2, 1, 9, 16, 0, 0, FN_STREAM_COMMON, 1, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&w32).path, FN_PATH_HELD);
    ASSERT_EQ_INT(fn_plan_make(&w32).ept, 64);
    w32.cols = 4088;
    ASSERT_EQ_INT(fn_plan_make(&w32).path, FN_PATH_ROWS_IN_REGISTERS);
    w32.stream = FN_STREAM_RESIDUAL;
    w32.cols = 1024;
    ASSERT_EQ_INT(fn_plan_make(&w32).path, FN_PATH_HELD);
    w32.cols = 4096;
    ASSERT_EQ_INT(fn_plan_make(&w32).ept, 32);
    w32.cols = 16384; /* 32 KiB with the residual: not streamed, still held */
    ASSERT_EQ_INT(fn_plan_streams(&w32), 0);
    ASSERT_EQ_INT(fn_plan_make(&w32).path, FN_PATH_HELD);
    ASSERT_EQ_INT(fn_plan_make(&w32).tpr, 512);
    w32.cols = 32768; /* 4096 vectors of each: more than 512 threads hold at U = 4 */
    ASSERT_EQ_INT(fn_plan_make(&w32).path, FN_PATH_ROWS_IN_REGISTERS);
    w32.stream = FN_STREAM_COMMON;
    w32.cols = 65536;
    ASSERT_EQ_INT(fn_plan_streams(&w32), 0);
    ASSERT_EQ_INT(fn_plan_make(&w32).path, FN_PATH_ROWS_IN_REGISTERS);
    ASSERT_EQ_INT(fn_plan_make(&w32).cluster, 4);
    fn_plan_problem short_row = {0, 256, 2, 1, 9, 16, 0, 0, FN_STREAM_COMMON, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&short_row).path, FN_PATH_ROWS_IN_REGISTERS);
    /* Rows off a 16-byte boundary (odd_held; vec_ok 0, the SHIFT kernels' 1
     * where they could run): held with the shape of an aligned row of their
     * whole vectors, from FN_PLAN_HELD_ODD_MIN_VECTORS vectors to 64 KiB
     * where a row has a lane for each head and tail element (bf16 from 56
     * whole vectors: 16 lanes), sm_80 as sm_90; else as before (two-pass,
     * the SHIFT tile, the scalar tile). */
    struct { int64_t cols; int x_bytes, call, vec_ok, u, tpr; } odd_rows[] = {
        {4097, 2, C, 0, 4, 128}, {2047, 2, C, 1, 4, 64}, {1031, 2, C, 1, 4, 32}, {32767, 2, C, 0, 8, 512},
        {4097, 4, C, 0, 4, 256}, {1025, 4, C, 0, 4, 64}, {4097, 2, R, 0, 4, 128}, {16383, 2, R, 0, 4, 512},
        {8191, 2, C, 0, 4, 256}, {12289, 2, C, 0, 8, 192}, {3001, 4, C, 0, 8, 96},  {8191, 4, C, 0, 8, 256},
        {8191, 4, R, 0, 4, 512}, {3001, 2, C, 1, 8, 64}, {16385, 2, R, 0, 4, 512}, {8193, 4, R, 0, 4, 512},
        {1001, 2, C, 1, 4, 32},  {513, 2, C, 1, 4, 16},  {131, 4, C, 0, 4, 8},     {455, 2, R, 1, 4, 16},
    };
    for (size_t i = 0; i < sizeof odd_rows / sizeof odd_rows[0]; i++) {
        for (int cc = 8; cc <= 9; cc++) {
            fn_plan_problem pb = {0, odd_rows[i].cols, odd_rows[i].x_bytes, odd_rows[i].vec_ok, cc, 16, 0, odd_rows[i].vec_ok ? 256 : 0,
                                  FN_STREAM_NONE, 0, odd_rows[i].call, 0, 0, 0};
            const fn_plan p = fn_plan_make(&pb);
            snprintf(th_context, sizeof th_context, "odd held: cols %lld x_bytes %d call %d sm_%d0",
                     (long long)odd_rows[i].cols, odd_rows[i].x_bytes, odd_rows[i].call, cc);
            ASSERT_EQ_INT(p.path, FN_PATH_HELD);
            ASSERT_EQ_INT(p.vec, 16 / odd_rows[i].x_bytes);
            ASSERT_EQ_INT(p.ept, odd_rows[i].u * (16 / odd_rows[i].x_bytes));
            ASSERT_EQ_INT(p.tpr, odd_rows[i].tpr);
            ASSERT_TRUE(p.tpr * odd_rows[i].u >= odd_rows[i].cols / (16 / odd_rows[i].x_bytes)); /* every whole vector */
            ASSERT_TRUE(p.tpr >= 2 * (16 / odd_rows[i].x_bytes - 1)); /* a lane for each head and tail element */
            pb.odd_held = FN_STREAM_NONE;
            ASSERT_TRUE(fn_plan_make(&pb).path != FN_PATH_HELD);
        }
    }
    /* Past 64 KiB, over a cluster on sm_90 (as an aligned row of their whole
     * vectors), two-pass on sm_80. */
    struct { int64_t cols; int x_bytes, call, max_cluster, cluster, tpr; } odd_cl[] = {
        {65537, 2, C, 16, 4, 256}, {131073, 2, C, 16, 8, 256}, {262145, 2, C, 8, 8, 512},
        {524289, 2, C, 8, 0, 0},   {32769, 4, C, 16, 4, 256},  {65537, 2, R, 16, 8, 256},
    };
    for (size_t i = 0; i < sizeof odd_cl / sizeof odd_cl[0]; i++) {
        fn_plan_problem pb = {0, odd_cl[i].cols, odd_cl[i].x_bytes, 0, 9, odd_cl[i].max_cluster, 0, 0,
                              FN_STREAM_NONE, 0, odd_cl[i].call, 0, 0, 0};
        snprintf(th_context, sizeof th_context, "odd held over a cluster: cols %lld x_bytes %d call %d",
                 (long long)odd_cl[i].cols, odd_cl[i].x_bytes, odd_cl[i].call);
        fn_plan p = fn_plan_make(&pb);
        if (odd_cl[i].cluster == 0) {
            ASSERT_TRUE(p.path != FN_PATH_HELD);
        } else {
            ASSERT_EQ_INT(p.path, FN_PATH_HELD);
            ASSERT_EQ_INT(p.cluster, odd_cl[i].cluster);
            ASSERT_EQ_INT(p.tpr, odd_cl[i].tpr);
            ASSERT_EQ_INT(p.vec, 16 / odd_cl[i].x_bytes);
        }
        pb.cc_major = 8;
        p = fn_plan_make(&pb);
        ASSERT_TRUE(p.path != FN_PATH_HELD);
    }
    /* The forward's ODD register tile (fn_plan_fwd_odd): rows off a 16-byte
     * boundary of the common call past 64 KiB take the tile of their aligned
     * body (cols / vec whole vectors), LayerNorm's clusters capped as that
     * body's; none for the residual call, rows whose body no tile takes
     * (bf16 32769: 64 KiB, held; 100001), sm_80, FUSEDNORM_FWD_ROWS_CLUSTER=0
     * (no_tile). cluster 0: none. */
    struct { int64_t cols; int x_bytes, call, is_ln, max_cluster, cluster, tpr, ept; } odd_tile[] = {
        {65537, 2, C, 0, 16, 8, 256, 32},  {65543, 2, C, 1, 8, 8, 256, 32},   {40001, 2, C, 0, 16, 5, 256, 32},
        {131073, 2, C, 0, 16, 16, 256, 32}, {131073, 2, C, 1, 8, 16, 256, 32}, {262145, 2, C, 0, 16, 16, 512, 32},
        {65537, 4, C, 0, 16, 8, 256, 32},  {65537, 4, C, 1, 8, 8, 256, 32},   {32769, 4, C, 0, 16, 4, 256, 32},
        {20001, 4, C, 1, 8, 5, 256, 16},   {32769, 2, C, 0, 16, 0, 0, 0},     {100001, 2, C, 0, 16, 0, 0, 0},
        {65537, 2, R, 0, 16, 0, 0, 0},     {16385, 4, C, 0, 16, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof odd_tile / sizeof odd_tile[0]; i++) {
        fn_plan_problem pb = {0, odd_tile[i].cols, odd_tile[i].x_bytes, 0, 9, odd_tile[i].max_cluster, 0, 0,
                              FN_STREAM_NONE, 0, odd_tile[i].call, odd_tile[i].is_ln, 0, 0};
        snprintf(th_context, sizeof th_context, "forward ODD tile: cols %lld x_bytes %d call %d ln %d",
                 (long long)odd_tile[i].cols, odd_tile[i].x_bytes, odd_tile[i].call, odd_tile[i].is_ln);
        fn_plan p = {0};
        const int vec = 16 / odd_tile[i].x_bytes;
        if (odd_tile[i].cluster == 0) {
            ASSERT_EQ_INT(fn_plan_fwd_odd(&p, &pb), 0);
            continue;
        }
        ASSERT_EQ_INT(fn_plan_fwd_odd(&p, &pb), 1);
        expect_tile(&p, odd_tile[i].cluster, odd_tile[i].tpr, odd_tile[i].ept, vec);
        ASSERT_TRUE((int64_t)p.cluster * p.tpr * p.ept >= odd_tile[i].cols / vec * vec); /* every whole vector */
        ASSERT_TRUE(p.tpr >= 2 * (vec - 1)); /* a lane for each head and tail element */
        pb.cc_major = 8;
        ASSERT_EQ_INT(fn_plan_fwd_odd(&p, &pb), 0);
        pb.cc_major = 9;
        pb.no_tile = 1;
        ASSERT_EQ_INT(fn_plan_fwd_odd(&p, &pb), 0);
        pb.no_tile = 0;
        pb.odd_held = FN_STREAM_NONE;
        ASSERT_EQ_INT(fn_plan_fwd_odd(&p, &pb), 0);
    }
    struct { int64_t cols; int x_bytes, call; } not_odd[] = {
        {255, 2, C}, {263, 2, C}, {127, 4, C}, {16400, 2, R}, {8200, 4, R},
    };
    for (size_t i = 0; i < sizeof not_odd / sizeof not_odd[0]; i++) {
        fn_plan_problem pb = {0, not_odd[i].cols, not_odd[i].x_bytes, 0, 9, 16, 0, 0, FN_STREAM_NONE, 0,
                              not_odd[i].call, 0, 0, 0};
        snprintf(th_context, sizeof th_context, "odd, not held: cols %lld x_bytes %d call %d",
                 (long long)not_odd[i].cols, not_odd[i].x_bytes, not_odd[i].call);
        ASSERT_TRUE(fn_plan_make(&pb).path != FN_PATH_HELD);
    }
    /* fn_plan_use_held refuses what 512 threads cannot hold, and odd U */
    fn_plan lab;
    ASSERT_EQ_INT(fn_plan_use_held(&lab, 16384, 2, 2), 0);
    ASSERT_EQ_INT(fn_plan_use_held(&lab, 4096, 2, 3), 0);
    ASSERT_EQ_INT(fn_plan_use_held(&lab, 4100, 2, 4), 0);
    ASSERT_EQ_INT(fn_plan_use_held(&lab, 16384, 2, 4), 1);
    ASSERT_EQ_INT(lab.tpr, 512);
    /* fn_plan_use_held_odd: an aligned row of the whole vectors, with a lane
     * per head and tail element (bf16: 14, so not 8 threads a row) */
    ASSERT_EQ_INT(fn_plan_use_held_odd(&lab, 263, 2, 4), 0);
    ASSERT_EQ_INT(lab.tpr, 512); /* left as it was */
    ASSERT_EQ_INT(fn_plan_use_held_odd(&lab, 4097, 2, 4), 1);
    ASSERT_EQ_INT(lab.tpr, 128);
    ASSERT_EQ_INT(lab.ept, 32);
    ASSERT_EQ_INT(fn_plan_use_held_odd(&lab, 131, 4, 4), 1); /* fp32: 6 edge elements, 8 threads */
    ASSERT_EQ_INT(lab.tpr, 8);
    /* fn_plan_bwd_odd: the backward's ODD tile, an aligned row of the whole
     * vectors (over a cluster where one is planned), one row per CTA of at
     * least 32 threads */
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 4097, 2, 9, 16, 1, 0), 1);
    ASSERT_TRUE(lab.path == FN_PATH_ROWS_IN_REGISTERS && lab.vec == 8 && lab.ept == 16 && lab.tpr == 256 &&
                lab.threads == 256 && lab.rows_per_block == 1 && lab.cluster == 1);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 2047, 2, 9, 16, 1, 0), 1); /* 255 vectors: 128 threads, alone in their CTA */
    ASSERT_TRUE(lab.ept == 16 && lab.tpr == 128 && lab.threads == 128 && lab.rows_per_block == 1);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 4097, 4, 9, 16, 0, 0), 1); /* fp32 */
    ASSERT_TRUE(lab.vec == 4 && lab.ept == 16 && lab.tpr == 256 && lab.threads == 256);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 100, 2, 9, 16, 1, 0), 0); /* 12 vectors: 8 threads */
    ASSERT_EQ_INT(lab.tpr, 256); /* left as it was */
    /* over a cluster where one CTA cannot hold the row: bf16 12289 as 12288
     * in 2 x 384, 32769 in 4 x 512 (not the wide tile); without clusters or the wide tile none */
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 12289, 2, 9, 16, 1, 0), 1);
    ASSERT_TRUE(lab.ept == 16 && lab.tpr == 384 && lab.cluster == 2 && lab.threads == 384 && lab.rows_per_block == 1);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 32769, 2, 9, 16, 1, 1), 1);
    ASSERT_TRUE(lab.ept == 16 && lab.tpr == 512 && lab.cluster == 4);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 12289, 2, 9, 1, 0, 0), 0);
    /* 16-bit clusters of at most 4 (8 x 512 at 65537 measured slower than
     * two-pass): there the 32-element tile, 4 x 512, where the backend lets it */
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 65537, 2, 9, 16, 0, 0), 0);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 65537, 2, 9, 16, 1, 0), 1);
    ASSERT_TRUE(lab.ept == 32 && lab.tpr == 512 && lab.cluster == 4 && lab.threads == 512 && lab.rows_per_block == 1);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 32769, 2, 9, 16, 1, 0), 1); /* the 16-element tile where it holds the row */
    ASSERT_TRUE(lab.ept == 16 && lab.cluster == 4);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 131073, 2, 9, 16, 1, 0), 0);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 12289, 2, 8, 16, 1, 0), 0); /* wide: sm_90 only (else 1 x 384 x 32) */
    /* fn_plan_odd_clusters: the ODD backward's clusters, a multiple of the
     * period, over at most 4 waves, the fullest. 30 resident, period 8: 24
     * is one wave at 80%, 88 three at 98%, 120 four at 100%. 31: 120 (97%).
     * 32: 32, one full wave. */
    ASSERT_EQ_INT(fn_plan_odd_clusters(30, 8, 16383), 120);
    ASSERT_EQ_INT(fn_plan_odd_clusters(31, 8, 16383), 120);
    ASSERT_EQ_INT(fn_plan_odd_clusters(32, 8, 16383), 32);
    ASSERT_EQ_INT(fn_plan_odd_clusters(33, 1, 16383), 33); /* no period: the one wave */
    ASSERT_EQ_INT(fn_plan_odd_clusters(30, 8, 360), 88);   /* four waves' 120 > 360 / 4 */
    ASSERT_EQ_INT(fn_plan_odd_clusters(30, 8, 200), 24);   /* past one wave > 200 / 4: the one wave */
    ASSERT_EQ_INT(fn_plan_odd_clusters(3, 8, 200), 8);     /* 3 clusters of 16: 8 in three waves */
    ASSERT_EQ_INT(fn_plan_odd_clusters(3, 8, 20), 8);      /* no wave holds 8 within 20 / 4: min(groups, 8) */
    ASSERT_EQ_INT(fn_plan_odd_clusters(3, 8, 6), 6);
    ASSERT_EQ_INT(fn_plan_odd_one_wave(30, 8, 1000), 24); /* one wave: rounded down to the period */
    ASSERT_EQ_INT(fn_plan_odd_one_wave(2, 8, 1000), 8);
    ASSERT_EQ_INT(fn_plan_odd_one_wave(2, 8, 5), 5);
    for (int64_t active = 1; active <= 140; active++)
        for (int m = 1; m <= 16; m *= 2)
            for (int64_t groups = active + 1; groups <= 100000; groups = groups * 3 + 1) {
                const int64_t g = fn_plan_odd_clusters(active, m, groups);
                snprintf(th_context, sizeof th_context, "odd clusters active %lld m %d groups %lld", (long long)active, m,
                         (long long)groups);
                ASSERT_TRUE(g >= 1 && g <= groups);
                const int fallback = g == (groups < m ? groups : m);
                ASSERT_TRUE(g % m == 0 || fallback); /* rows of one offset a cluster */
                const int64_t w = (g + active - 1) / active;
                ASSERT_TRUE(w <= FN_PLAN_ODD_MAX_WAVES || fallback);
                ASSERT_TRUE(w == 1 || g <= groups / 4 || fallback); /* past one wave, >= 4 groups a cluster */
                for (int64_t v = 1; v <= FN_PLAN_ODD_MAX_WAVES; v++) { /* no allowed grid fuller, none as full in fewer waves */
                    const int64_t h = v * active / m * m;
                    if (h == 0 || (v > 1 && h > groups / 4)) continue;
                    ASSERT_TRUE(h * w * active <= g * v * active);
                    if (v < w) ASSERT_TRUE(h * w * active < g * v * active);
                }
            }
    th_context[0] = '\0';
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 65537, 4, 9, 16, 1, 0), 1); /* wide: 16-bit only */
    ASSERT_TRUE(lab.ept == 16);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 12001, 4, 9, 16, 0, 0), 1); /* fp32: the resident rule's 3 x 256 */
    ASSERT_TRUE(lab.ept == 16 && lab.tpr == 256 && lab.cluster == 3);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 65537, 4, 9, 16, 0, 0), 1); /* fp32: 16 x 256 */
    ASSERT_TRUE(lab.tpr == 256 && lab.cluster == 16);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 8193, 4, 9, 16, 0, 0), 1); /* one CTA where it holds the row, not 2 x 256 */
    ASSERT_TRUE(lab.tpr == 512 && lab.cluster == 1);
    ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 8191, 2, 8, 16, 1, 0), 1);  /* sm_80 too */
    ASSERT_TRUE(lab.tpr == 512 && lab.threads == 512);
    /* fp32 rows of 2049..4095 columns: 8 elements a thread for RMSNorm,
     * 16 for LayerNorm (no CTA of more than 256 threads at one vector each) */
    {
        fn_plan_problem rms = {1, 2600, 4, 1, 9, 16, 0, 0, 0, 0, 0, 0, 0, 0}, ln = rms;
        ln.is_ln = 1;
        const fn_plan pr = fn_plan_make(&rms), pln = fn_plan_make(&ln);
        ASSERT_TRUE(pr.ept == 8 && pr.tpr == 352);
        ASSERT_TRUE(pln.ept == 16 && pln.tpr == 192);
        ASSERT_EQ_INT(fn_plan_bwd_odd(&lab, 3301, 4, 9, 16, 0, 1), 1);
        ASSERT_TRUE(lab.ept == 16 && lab.tpr == 224 && lab.threads == 224);
    }

    /* The shapes of docs/perf.md (bf16, 16-byte vectors, sm_90; the
     * backward's wide tile launchable, as on the H200). */
    struct { int is_bwd; int64_t cols; int ept, tpr, cluster; } pinned[] = {
        {0, 256, 32, 8, 1},    {0, 4096, 32, 128, 1},  {0, 131072, 32, 512, 8},
        {1, 1024, 16, 64, 1},  {1, 4096, 16, 256, 1},  {1, 8192, 16, 512, 1},
        {1, 2304, 16, 160, 1}, {1, 2600, 16, 192, 1},  {1, 3600, 16, 256, 1}, /* not one vector a thread in CTAs of > 256 */
        {1, 16384, 32, 512, 1}, {1, 32768, 32, 512, 2}, {1, 65536, 32, 512, 4},
        {1, 131072, 32, 512, 8}, {1, 262144, 32, 512, 16},
        /* the wide tile in one CTA where the 16-element one takes 288..480 threads (step 98) */
        {1, 3072, 32, 96, 1},  {1, 5000, 32, 160, 1},  {1, 6144, 32, 192, 1},  {1, 7168, 32, 224, 1},
    };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        fn_plan_problem pb = {pinned[i].is_bwd, pinned[i].cols, 2, 1, 9, 16, 1, 0, 0, 0, 0, 0, 0, 0};
        fn_plan p = fn_plan_make(&pb);
        snprintf(th_context, sizeof th_context, "pinned %s cols %lld", pinned[i].is_bwd ? "bwd" : "fwd",
                 (long long)pinned[i].cols);
        ASSERT_EQ_INT(p.path, FN_PATH_ROWS_IN_REGISTERS);
        ASSERT_EQ_INT(p.ept, pinned[i].ept);
        ASSERT_EQ_INT(p.tpr, pinned[i].tpr);
        ASSERT_EQ_INT(p.cluster, pinned[i].cluster);
    }
    /* The 16-bit backward in one CTA from FN_PLAN_BWD_WIDE_ONE_CTA_MIN_COLS
     * (step 98): LayerNorm's rows in the wide tile (4096 in 2 rows of 128,
     * 8192 in 256 threads), RMSNorm's 4096 and 8192 in the 16-element tile
     * (256, 512 threads); below it, and for the residual call (its wide tile
     * reads dresidual_out unstaged), the 16-element tile as before. */
    {
        static const struct { int64_t cols; int is_ln, stream, ept, tpr; } w1[] = {
            {2560, 1, 0, 16, 160}, {3072, 1, 0, 32, 96}, {4096, 1, 0, 32, 128}, {6144, 1, 0, 32, 192},
            {8192, 1, 0, 32, 256}, {4096, 0, 0, 16, 256}, {8192, 0, 0, 16, 512}, {2560, 0, 0, 16, 160},
            {6144, 0, FN_STREAM_RESIDUAL, 16, 384}, {8192, 1, FN_STREAM_RESIDUAL, 16, 512},
        };
        for (size_t i = 0; i < sizeof w1 / sizeof w1[0]; i++) {
            fn_plan_problem pb = {1, w1[i].cols, 2, 1, 9, 16, 1, 0, w1[i].stream, 0, 0, w1[i].is_ln, 32768, 0};
            const fn_plan p = fn_plan_make(&pb);
            snprintf(th_context, sizeof th_context, "16-bit bwd in one CTA cols %lld ln %d stream %d",
                     (long long)w1[i].cols, w1[i].is_ln, w1[i].stream);
            ASSERT_EQ_INT(p.path, FN_PATH_ROWS_IN_REGISTERS);
            ASSERT_EQ_INT(p.ept, w1[i].ept);
            ASSERT_EQ_INT(p.tpr, w1[i].tpr);
            ASSERT_EQ_INT(p.cluster, 1);
            pb.wide_bwd = 0; /* the wide tile not launchable: the 16-element one */
            ASSERT_EQ_INT(fn_plan_make(&pb).ept, 16);
        }
    }
    /* The forward's largest rows go two-pass (measured faster than a cluster
     * of 16), with 512 threads, and so does the backward past a cluster of 8
     * of the 16-element tile, or of 16 of the wide one (the backend makes it a
     * column split); a short row without vectors gets a small CTA. */
    fn_plan_problem fwd_huge = {0, 262144, 2, 1, 9, 16, 0, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&fwd_huge).path, FN_PATH_TWO_PASS);
    ASSERT_EQ_INT(fn_plan_make(&fwd_huge).threads, 512);
    /* The streaming forward's calls off sm_90 (no clusters): two-pass with
     * 512 threads for rows past 64 KiB (bf16 65536, fp32 32768 and more). */
    fn_plan_problem fwd_stream = {0, 65536, 2, 1, 8, 16, 0, 0, FN_STREAM_COMMON, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).path, FN_PATH_TWO_PASS);
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).threads, 512);
    fwd_stream.cols = 131072;
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).path, FN_PATH_TWO_PASS);
    fwd_stream.x_bytes = 4;
    fwd_stream.cols = 32768;
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).path, FN_PATH_TWO_PASS);
    fwd_stream.cols = 65536;
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).path, FN_PATH_TWO_PASS);
    fwd_stream.x_bytes = 2;
    fwd_stream.cols = 32768;
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).path, FN_PATH_HELD);
    fwd_stream.cols = 32768;
    fwd_stream.cc_major = 9;
    fwd_stream.stream = 0; /* any other call: a cluster of 2 */
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).path, FN_PATH_ROWS_IN_REGISTERS);
    ASSERT_EQ_INT(fn_plan_make(&fwd_stream).cluster, 2);
    /* LayerNorm's forward (the backend's max_cluster FN_FWD_LN_MAX_CLUSTER):
     * held over clusters of up to 8 CTAs, streamed past them */
    fn_plan_problem ln_fwd = {0, 262144, 2, 1, 9, FN_FWD_LN_MAX_CLUSTER, 0, 0, FN_STREAM_COMMON, 0, 0, 1, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&ln_fwd).path, FN_PATH_HELD);
    ASSERT_EQ_INT(fn_plan_make(&ln_fwd).cluster, 8);
    ASSERT_EQ_INT(fn_plan_make(&ln_fwd).threads, 512);
    ln_fwd.cols = 524288;
    ASSERT_EQ_INT(fn_plan_make(&ln_fwd).path, FN_PATH_TWO_PASS);
    ln_fwd.cols = 131072; /* the register tile (step 96): 8 x 512 */
    ASSERT_EQ_INT(fn_plan_make(&ln_fwd).path, FN_PATH_ROWS_IN_REGISTERS);
    ASSERT_EQ_INT(fn_plan_make(&ln_fwd).cluster, 8);
    ASSERT_EQ_INT(fn_plan_make(&ln_fwd).threads, 512);
    /* RMSNorm's forward of the common call past 64 KiB (steps 90, 91, 93,
     * 94): the register tile over a cluster, for the shapes docs/perf.md
     * measured, LayerNorm's of up to 8 CTAs too, and not for w32 or sm_80 */
    struct { int64_t cols; int x_bytes, cluster, tpr, ept; } rows_cl[] = {
        {32768, 2, 0, 0, 0},     {32776, 2, 5, 224, 32},  {40000, 2, 5, 256, 32},  {49152, 2, 6, 256, 32},
        {65536, 2, 8, 256, 32},  {65544, 2, 0, 0, 0},     {73728, 2, 0, 0, 0},     {98304, 2, 0, 0, 0},
        {100000, 2, 0, 0, 0},    {131072, 2, 16, 256, 32}, {131080, 2, 0, 0, 0},   {196608, 2, 0, 0, 0},
        {262144, 2, 16, 512, 32}, {524288, 2, 0, 0, 0},    {16384, 4, 0, 0, 0},     {16388, 4, 5, 224, 16},  {20000, 4, 5, 256, 16},
        {24576, 4, 3, 256, 32},  {32768, 4, 4, 256, 32},  {32772, 4, 0, 0, 0},     {40960, 4, 0, 0, 0},
        {49152, 4, 8, 384, 16},  {49156, 4, 0, 0, 0},     {65536, 4, 8, 256, 32},  {65540, 4, 0, 0, 0},
        {98304, 4, 16, 384, 16}, {131072, 4, 16, 256, 32}, {131076, 4, 0, 0, 0},   {262144, 4, 16, 512, 32},
        {262148, 4, 0, 0, 0},   {524288, 4, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof rows_cl / sizeof rows_cl[0]; i++) {
        const int xb = rows_cl[i].x_bytes;
        fn_plan_problem pb = {0, rows_cl[i].cols, xb, 1, 9, 16, 0, 0, FN_STREAM_COMMON, 0, 0, 0, 0, 0};
        snprintf(th_context, sizeof th_context, "rows cluster: cols %lld x_bytes %d", (long long)rows_cl[i].cols, xb);
        ASSERT_EQ_INT(fn_plan_fwd_rows_cluster_call(&pb), rows_cl[i].cols * xb > 65536);
        fn_plan p = fn_plan_make(&pb);
        ASSERT_EQ_INT(p.path == FN_PATH_ROWS_IN_REGISTERS, rows_cl[i].cluster > 0);
        if (rows_cl[i].cluster) expect_tile(&p, rows_cl[i].cluster, rows_cl[i].tpr, rows_cl[i].ept, 16 / xb);
        /* LayerNorm (step 96) at the backend's FN_FWD_LN_MAX_CLUSTER: the same
         * tile where it has at most 8 CTAs */
        fn_plan_problem ln = pb;
        ln.is_ln = 1;
        ln.max_cluster = FN_FWD_LN_MAX_CLUSTER;
        ASSERT_EQ_INT(fn_plan_fwd_rows_cluster_call(&ln), fn_plan_fwd_rows_cluster_call(&pb));
        p = fn_plan_make(&ln);
        if (rows_cl[i].cluster && rows_cl[i].cluster <= FN_FWD_LN_MAX_CLUSTER)
            expect_tile(&p, rows_cl[i].cluster, rows_cl[i].tpr, rows_cl[i].ept, 16 / xb);
        else
            ASSERT_TRUE(p.path != FN_PATH_ROWS_IN_REGISTERS || p.cluster <= FN_FWD_LN_MAX_CLUSTER);
        /* and at the backend's max_cluster for its tile call (steps 101,
         * 102): 16 CTAs at 131072 and 262144, RMSNorm's tiles */
        const int ln16 = rows_cl[i].cols == 131072 || rows_cl[i].cols == 262144;
        ASSERT_EQ_INT(fn_plan_fwd_ln_max_cluster(rows_cl[i].cols), ln16 ? 16 : FN_FWD_LN_MAX_CLUSTER);
        ln.max_cluster = fn_plan_fwd_ln_max_cluster(rows_cl[i].cols);
        p = fn_plan_make(&ln);
        if (rows_cl[i].cluster && (ln16 || rows_cl[i].cluster <= FN_FWD_LN_MAX_CLUSTER))
            expect_tile(&p, rows_cl[i].cluster, rows_cl[i].tpr, rows_cl[i].ept, 16 / xb);
        else
            ASSERT_TRUE(p.path != FN_PATH_ROWS_IN_REGISTERS || p.cluster <= FN_FWD_LN_MAX_CLUSTER);
        if (ln16) ASSERT_EQ_INT(p.cluster, 16);
        fn_plan_problem other[3] = {pb, pb, pb};
        other[0].w32 = 1;
        other[1].vec_ok = 0;
        other[2].cc_major = 8;
        for (int k = 0; k < 3; k++) {
            ASSERT_EQ_INT(fn_plan_fwd_rows_cluster_call(&other[k]), 0);
            p = fn_plan_make(&other[k]);
            ASSERT_TRUE(p.path != FN_PATH_ROWS_IN_REGISTERS || p.cluster <= 8);
        }
        pb.max_cluster = 8; /* a device without non-portable clusters: at most 8 */
        p = fn_plan_make(&pb);
        ASSERT_TRUE(p.path != FN_PATH_ROWS_IN_REGISTERS || p.cluster <= 8);
        if (rows_cl[i].cluster == 16 && !(xb == 2 && rows_cl[i].cols == 131072))
            ASSERT_TRUE(p.path != FN_PATH_ROWS_IN_REGISTERS);
        if (xb == 2 && rows_cl[i].cols == 131072) expect_tile(&p, 8, 512, 32, 8); /* as before step 99 */
        pb.max_cluster = 4; /* a device that launches no cluster of 8: held */
        ASSERT_TRUE(fn_plan_make(&pb).path != FN_PATH_ROWS_IN_REGISTERS || pb.cols * xb <= 65536);
    }
    /* The residual call from 32 KiB (steps 93, 94): the fewest CTAs of up
     * to 256 threads, at most 8, 32 elements a thread (16 for fp32, and fp32
     * 65536 in 16 x 256); clusters of 16 that the row fills exactly (step 99:
     * bf16 131072 in 16 x 256, 262144 in 16 x 512, fp32 131072 in 16 x 512);
     * held past. */
    struct { int64_t cols; int x_bytes, cluster, tpr; } res_cl[] = {
        {8192, 2, 0, 0},   {16384, 2, 2, 256}, {16392, 2, 3, 192}, {24576, 2, 3, 256}, {32768, 2, 4, 256},
        {40000, 2, 5, 256}, {49152, 2, 6, 256}, {65536, 2, 8, 256}, {65544, 2, 0, 0},  {131072, 2, 16, 256},
        {262144, 2, 16, 512}, {98304, 2, 0, 0}, {4096, 4, 0, 0},    {8192, 4, 2, 256},  {12292, 4, 0, 0},   {24576, 4, 6, 256}, {32768, 4, 8, 256},
        {32772, 4, 0, 0},  {49152, 4, 0, 0},   {65536, 4, 16, 256}, {131072, 4, 16, 512},
    };
    for (size_t i = 0; i < sizeof res_cl / sizeof res_cl[0]; i++) {
        const int xb = res_cl[i].x_bytes;
        fn_plan_problem pb = {0, res_cl[i].cols, xb, 1, 9, 16, 0, 0, FN_STREAM_RESIDUAL, 0, 0, 0, 0, 0};
        snprintf(th_context, sizeof th_context, "residual rows cluster: cols %lld x_bytes %d", (long long)res_cl[i].cols,
                 xb);
        ASSERT_EQ_INT(fn_plan_fwd_rows_cluster_call(&pb), res_cl[i].cols * xb >= 32768);
        fn_plan p = fn_plan_make(&pb);
        ASSERT_EQ_INT(p.path == FN_PATH_ROWS_IN_REGISTERS, res_cl[i].cluster > 0);
        if (res_cl[i].cluster) expect_tile(&p, res_cl[i].cluster, res_cl[i].tpr, xb == 2 ? 32 : 16, 16 / xb);
        else if (res_cl[i].cols * xb > 32768) {
            ASSERT_EQ_INT(p.path, FN_PATH_HELD); /* held over a cluster as before */
        }
        pb.is_ln = 1; /* LayerNorm's residual call: the tile only past 64 KiB (step 111) */
        ASSERT_EQ_INT(fn_plan_fwd_rows_cluster_call(&pb), res_cl[i].cols * xb > FN_PLAN_STREAM_FWD_BYTES &&
                                                              res_cl[i].cols * xb < FN_PLAN_LN_RES_TILE_END_BYTES);
        pb.is_ln = 0;
        pb.cc_major = 8;
        ASSERT_EQ_INT(fn_plan_fwd_rows_cluster_call(&pb), 0);
    }

    /* LayerNorm's residual call past 64 KiB (step 111), its clusters capped
     * as the backend caps them (fn_plan_fwd_ln_max_cluster: 16 at 131072 and
     * 262144, else 8): 16-bit 8 x 256, 16 x 256, 16 x 512; fp32 8 x 256 x 16,
     * 8 x 512 x 16 (65536, where the RMSNorm call takes 16 x 256), 16 x 512
     * x 16; not fp32 262144 (FN_PLAN_LN_RES_TILE_END_BYTES); the rows no such
     * tile fills held as before. */
    struct { int64_t cols; int x_bytes, cluster, tpr, ept; } ln_res[] = {
        {32768, 2, 0, 0, 0},      {40000, 2, 5, 256, 32},   {65536, 2, 8, 256, 32},   {98304, 2, 0, 0, 0},
        {131072, 2, 16, 256, 32}, {262144, 2, 16, 512, 32}, {16384, 4, 0, 0, 0},      {32768, 4, 8, 256, 16},
        {49152, 4, 0, 0, 0},      {65536, 4, 8, 512, 16},   {131072, 4, 16, 512, 16}, {262144, 4, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof ln_res / sizeof ln_res[0]; i++) {
        const int xb = ln_res[i].x_bytes;
        fn_plan_problem pb = {0, ln_res[i].cols, xb, 1, 9, 16, 0, 0, FN_STREAM_RESIDUAL, 0, 0, 1, 0, 0};
        pb.max_cluster = fn_plan_fwd_ln_max_cluster(ln_res[i].cols);
        snprintf(th_context, sizeof th_context, "layernorm residual rows cluster: cols %lld x_bytes %d",
                 (long long)ln_res[i].cols, xb);
        ASSERT_EQ_INT(fn_plan_fwd_rows_cluster_call(&pb), ln_res[i].cols * xb > FN_PLAN_STREAM_FWD_BYTES &&
                                                              ln_res[i].cols * xb < FN_PLAN_LN_RES_TILE_END_BYTES);
        fn_plan p = fn_plan_make(&pb);
        if (ln_res[i].cluster) expect_tile(&p, ln_res[i].cluster, ln_res[i].tpr, ln_res[i].ept, 16 / xb);
        else ASSERT_TRUE(p.path != FN_PATH_ROWS_IN_REGISTERS);
        if (xb == 4 && ln_res[i].cols == 65536) { /* with clusters of 16 (RMSNorm's bound): 16 x 256 as before */
            pb.max_cluster = 16;
            p = fn_plan_make(&pb);
            expect_tile(&p, 16, 256, 16, 4);
        }
    }
    th_context[0] = '\0';

    fn_plan_problem bwd_large = {1, 131072, 2, 1, 9, 16, 0, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&bwd_large).path, FN_PATH_TWO_PASS);
    fn_plan_problem bwd_huge = {1, 262145, 2, 1, 9, 16, 1, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&bwd_huge).path, FN_PATH_TWO_PASS);
    fn_plan_problem odd = {1, 4097, 2, 0, 9, 16, 1, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&odd).path, FN_PATH_TWO_PASS);
    ASSERT_EQ_INT(fn_plan_make(&odd).threads, 160);
    /* The backend's fallbacks turn a register plan into the planner's own
     * two-pass plan, keeping its vector width. */
    fn_plan_problem reg = {1, 4096, 2, 1, 9, 16, 1, 0, 0, 0, 0, 0, 0, 0};
    fn_plan fb = fn_plan_make(&reg);
    ASSERT_EQ_INT(fb.path, FN_PATH_ROWS_IN_REGISTERS);
    fn_plan_use_two_pass(&fb, 4096, 2);
    ASSERT_EQ_INT(fb.path, FN_PATH_TWO_PASS);
    ASSERT_EQ_INT(fb.vec, 8);
    ASSERT_EQ_INT(fb.threads, fn_plan_two_pass_threads(4096, 2));
    ASSERT_EQ_INT(fb.tpr, fb.threads);
    ASSERT_EQ_INT(fb.rows_per_block, 1);
    ASSERT_EQ_INT(fb.cluster, 1);
    /* The column split covers every row and column, no group empty. */
    static const int64_t cs_rows[] = {1, 2, 7, 37, 4096, 16383, 1 << 20, (int64_t)1 << 33};
    static const int64_t cs_cols[] = {1, 7, 2047, 2048, 4097, 65537, 262144, 1 << 22};
    for (size_t i = 0; i < sizeof cs_rows / sizeof cs_rows[0]; i++)
        for (size_t j = 0; j < sizeof cs_cols / sizeof cs_cols[0]; j++)
            for (int xb = 2; xb <= 4; xb += 2) {
                const fn_column_split cs = fn_plan_column_split(cs_rows[i], cs_cols[j], xb, 256, 132, 3);
                snprintf(th_context, sizeof th_context, "column split rows %lld cols %lld", (long long)cs_rows[i],
                         (long long)cs_cols[j]);
                ASSERT_TRUE(cs.chunks * 256 * (16 / xb) >= cs_cols[j]);
                ASSERT_TRUE((cs.chunks - 1) * 256 * (16 / xb) < cs_cols[j]);
                ASSERT_TRUE(cs.groups >= 1 && cs.groups <= 65535);
                ASSERT_TRUE(cs.groups * cs.per_group >= cs_rows[i]);
                ASSERT_TRUE((cs.groups - 1) * cs.per_group < cs_rows[i]);
            }
    /* The fp32 backward (docs/perf.md step 69): 256-thread CTAs in a cluster
     * twice as large rather than one 512-thread CTA (8192 .. 65536, LayerNorm
     * too, 65536 in a non-portable cluster of 16); 6144 keeps 384 threads in
     * 1; 9216..12288 in 4 x 160 to 10240, then 3 x 256 (LayerNorm from
     * 11265; step 80: more CTAs resident than 2 x 288..384, which 9152 and
     * 12352 keep); past a cluster of 16 of 256 threads 16 x 512 (step 89),
     * past that the column split (two-pass here). */
    struct { int64_t cols; int tpr, cluster; } f32_bwd[] = {
        {4096, 256, 1},  {6144, 384, 1},  {8192, 256, 2},  {9152, 288, 2},   {9216, 160, 4},   {10240, 160, 4},
        {10304, 256, 3}, {12000, 256, 3}, {12288, 256, 3}, {12352, 416, 2},  {16384, 256, 4},  {32768, 256, 8},
        {65536, 256, 16}, {65600, 288, 16}, {131072, 512, 16}, {131073, 0, 0},
    };
    for (int is_ln = 0; is_ln < 2; is_ln++)
        for (size_t i = 0; i < sizeof f32_bwd / sizeof f32_bwd[0]; i++) {
            fn_plan_problem pb = {1, f32_bwd[i].cols, 4, 1, 9, 16, 0, 0, 0, 0, 0, is_ln, 0, 0};
            const fn_plan p = fn_plan_make(&pb);
            if (is_ln && f32_bwd[i].cols == 10304) { /* LayerNorm keeps 2 x 352 to 11264 */
                ASSERT_EQ_INT(p.tpr, 352);
                ASSERT_EQ_INT(p.cluster, 2);
                continue;
            }
            snprintf(th_context, sizeof th_context, "fp32 bwd cols %lld ln %d", (long long)f32_bwd[i].cols, is_ln);
            if (!f32_bwd[i].tpr) {
                ASSERT_EQ_INT(p.path, FN_PATH_TWO_PASS);
                continue;
            }
            ASSERT_EQ_INT(p.path, FN_PATH_ROWS_IN_REGISTERS);
            ASSERT_EQ_INT(p.ept, 16);
            ASSERT_EQ_INT(p.tpr, f32_bwd[i].tpr);
            ASSERT_EQ_INT(p.cluster, f32_bwd[i].cluster);
        }
    /* The forward's fp32 rows from 128 columns (32 vectors) are held: 256 at
     * U = 4 in 16 threads (step 70); bf16 rows of 256 (32 vectors) are not. */
    fn_plan_problem f32_256 = {0, 256, 4, 1, 9, 16, 0, 0, FN_STREAM_COMMON, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&f32_256).path, FN_PATH_HELD);
    ASSERT_EQ_INT(fn_plan_make(&f32_256).ept, 16);
    ASSERT_EQ_INT(fn_plan_make(&f32_256).tpr, 16);
    f32_256.x_bytes = 2;
    ASSERT_EQ_INT(fn_plan_make(&f32_256).path, FN_PATH_ROWS_IN_REGISTERS);
    /* The fp32 residual call (step 99): CTAs of up to 256 threads (its three
     * staged inputs), over up to 16 of them (65536 in 16 x 256, 49152 in 16
     * x 192, 16384 in 4 x 256, as before), then 16 x 512 (131072); not the
     * rule of 9216..12288 (2 x 288 at 9216). */
    struct { int64_t cols; int tpr, cluster; } f32_res_plans[] = {
        {16384, 256, 4}, {32768, 256, 8}, {49152, 192, 16}, {65536, 256, 16}, {131072, 512, 16}, {9216, 288, 2},
    };
    for (size_t i = 0; i < sizeof f32_res_plans / sizeof f32_res_plans[0]; i++) {
        fn_plan_problem f32_res = {1, f32_res_plans[i].cols, 4, 1, 9, 16, 0, 0, FN_STREAM_RESIDUAL, 0, 0, 0, 0, 0};
        snprintf(th_context, sizeof th_context, "fp32 residual bwd cols %lld", (long long)f32_res_plans[i].cols);
        const fn_plan p = fn_plan_make(&f32_res);
        ASSERT_EQ_INT(p.path, FN_PATH_ROWS_IN_REGISTERS);
        ASSERT_EQ_INT(p.ept, 16);
        ASSERT_EQ_INT(p.tpr, f32_res_plans[i].tpr);
        ASSERT_EQ_INT(p.cluster, f32_res_plans[i].cluster);
    }
    /* The 16-bit RMSNorm + residual call keeps the 16-element tile over
     * clusters at 16384..131072 (steps 81, 83 and 99); the wide tile below and past it,
     * and for LayerNorm, as without the residual. */
    fn_plan_problem bf16_res = {1, 16384, 2, 1, 9, 16, 1, 0, FN_STREAM_RESIDUAL, 0, 0, 0, 0, 0};
    fn_plan_problem bf16_plain = bf16_res;
    bf16_plain.stream = FN_STREAM_NONE;
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).ept, 16);
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).cluster, 2);
    ASSERT_EQ_INT(fn_plan_make(&bf16_plain).ept, 32);
    bf16_res.cols = bf16_plain.cols = 65536;
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).ept, 16);
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).cluster, 8);
    ASSERT_EQ_INT(fn_plan_make(&bf16_plain).ept, 32);
    bf16_res.cols = bf16_plain.cols = 12288;
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).ept, fn_plan_make(&bf16_plain).ept);
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).cluster, fn_plan_make(&bf16_plain).cluster);
    bf16_res.cols = bf16_plain.cols = 131072; /* step 99: over 16 CTAs */
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).ept, 16);
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).cluster, 16);
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).tpr, 512);
    ASSERT_EQ_INT(fn_plan_make(&bf16_plain).ept, 32);
    ASSERT_EQ_INT(fn_plan_make(&bf16_plain).cluster, 8);
    bf16_res.cols = bf16_plain.cols = 262144; /* past it the wide tile */
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).ept, 32);
    ASSERT_EQ_INT(fn_plan_make(&bf16_res).cluster, 16);
    bf16_res.is_ln = bf16_plain.is_ln = 1;
    for (int64_t c = 8448; c <= 65536; c *= 2) {
        bf16_res.cols = bf16_plain.cols = c;
        ASSERT_EQ_INT(fn_plan_make(&bf16_res).ept, fn_plan_make(&bf16_plain).ept);
        ASSERT_EQ_INT(fn_plan_make(&bf16_res).cluster, fn_plan_make(&bf16_plain).cluster);
    }
    /* Small problems (rows * cols <= 2^20; plan.h, FN_PLAN_SMALL_BWD_*): at
     * most 8 elements a thread, CTAs of 512 threads at no extra cost. */
    {
        fn_plan_problem sm = {1, 16384, 2, 1, 9, 16, 1, 0, FN_STREAM_NONE, 0, 0, 0, 64, 0};
        fn_plan q = fn_plan_make(&sm);
        ASSERT_TRUE(q.ept == 8 && q.tpr == 512 && q.cluster == 4);
        sm.rows = 0; /* not known: as before */
        ASSERT_EQ_INT(fn_plan_make(&sm).ept, 32);
        sm.rows = 128; /* 2^21 elements: not small */
        ASSERT_EQ_INT(fn_plan_make(&sm).ept, 32);
        sm.cols = 4096, sm.rows = 256;
        q = fn_plan_make(&sm);
        ASSERT_TRUE(q.ept == 8 && q.tpr == 512 && q.cluster == 1);
        sm.cols = 256, sm.rows = 4096;
        q = fn_plan_make(&sm);
        ASSERT_TRUE(q.ept == 8 && q.tpr == 32 && q.cluster == 1 && q.rows_per_block == 8);
        /* as measured only: not the residual call, the SHIFT kernels (max_tpr
         * 256) or scalar rows; those plan as with the row count unknown */
        {
            fn_plan_problem other[3] = {sm, sm, sm};
            other[0].stream = FN_STREAM_RESIDUAL;
            other[1].max_tpr = 256, other[1].wide_bwd = 0;
            other[2].vec_ok = 0, other[2].wide_bwd = 0;
            for (int i = 0; i < 3; i++) {
                fn_plan_problem unknown = other[i];
                unknown.rows = 0;
                const fn_plan a = fn_plan_make(&other[i]), u = fn_plan_make(&unknown);
                ASSERT_TRUE(a.path == u.path && a.ept == u.ept && a.tpr == u.tpr && a.cluster == u.cluster);
            }
            ASSERT_EQ_INT(fn_plan_make(&other[0]).ept, 16); /* the residual call's 4096: not 8 */
        }
        sm.cols = 1024, sm.rows = 32768; /* the targets' M: as before */
        q = fn_plan_make(&sm);
        ASSERT_TRUE(q.ept == 16 && q.tpr == 64);
        fn_plan_problem f = {1, 4096, 4, 1, 9, 16, 0, 0, FN_STREAM_NONE, 0, 0, 0, 256, 0};
        q = fn_plan_make(&f);
        ASSERT_TRUE(q.ept == 8 && q.tpr == 256 && q.cluster == 2);
        f.cols = 16384, f.rows = 64; /* fp32 past 4096 columns: not measured, as before */
        fn_plan_problem f0 = f;
        f0.rows = 0;
        ASSERT_EQ_INT(fn_plan_make(&f).ept, fn_plan_make(&f0).ept);
        ASSERT_EQ_INT(fn_plan_make(&f).cluster, fn_plan_make(&f0).cluster);
    }
    /* A device without non-portable clusters (max 8): 65536 fp32 in 8 x 512. */
    fn_plan_problem f32_c8 = {1, 65536, 4, 1, 9, 8, 0, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&f32_c8).cluster, 8);
    ASSERT_EQ_INT(fn_plan_make(&f32_c8).tpr, 512);
    /* Without the wide tile, 16384 takes a cluster of 2. */
    fn_plan_problem narrow = {1, 16384, 2, 1, 9, 16, 0, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&narrow).ept, 16);
    ASSERT_EQ_INT(fn_plan_make(&narrow).cluster, 2);
    /* The SHIFT kernels' plans (max_tpr 256): CTAs of at most 256 threads
     * that still cover the row (N = 4097: 32 elements x 160 threads forward). */
    for (int is_bwd = 0; is_bwd < 2; is_bwd++) {
        const int64_t shift_cols[] = {7, 1001, 2047, 4097};
        for (size_t i = 0; i < sizeof shift_cols / sizeof shift_cols[0]; i++) {
            fn_plan_problem sp = {is_bwd, shift_cols[i], 2, 1, 9, 16, 0, 256, 0, 0, 0, 0, 0, 0};
            const fn_plan pl = fn_plan_make(&sp);
            ASSERT_EQ_INT(pl.path, FN_PATH_ROWS_IN_REGISTERS);
            ASSERT_TRUE(pl.tpr <= 256 && pl.threads <= 256);
            ASSERT_TRUE((int64_t)pl.cluster * pl.tpr * pl.ept >= shift_cols[i]);
        }
    }
    fn_plan_problem shift_4097 = {0, 4097, 2, 1, 9, 16, 0, 256, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&shift_4097).ept, 32);
    ASSERT_EQ_INT(fn_plan_make(&shift_4097).tpr, 160);
    /* Without clusters (sm_80) the register path ends at one CTA's coverage. */
    fn_plan_problem big = {1, 8193, 2, 1, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    ASSERT_EQ_INT(fn_plan_make(&big).path, FN_PATH_TWO_PASS);
    return th_finish();
}
