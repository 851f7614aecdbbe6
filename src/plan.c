/*
 * The CUDA launch planner (see plan.h). Launch heuristics live here, apart
 * from the kernels: which path for which N, vector width, elements per
 * thread, threads per row and cluster size.
 *
 * The rows-in-registers path covers cluster * tpr * ept columns per row. We
 * enumerate every instantiated shape that covers cols and take the cheapest
 * by a small cost model:
 *   - idle lanes (coverage beyond cols) cost their fraction of the work;
 *   - each doubling of the cluster costs a little (a DSMEM exchange per
 *     reduction: a cluster barrier in the forward, the st.async exchange of
 *     common.cuh in the backward; the weights predate the exchange);
 *   - 512-thread CTAs cost a little (one CTA per SM at high register counts
 *     leaves the SM idle during the row reductions);
 *   - the largest register tile costs a little (fewer CTAs resident per SM);
 *   - too few bytes per thread cost more: each thread issues all its loads
 *     before the first reduction, so bytes in flight per SM, which must cover
 *     HBM latency, scale with them (measured: bf16 with 16 bytes per thread
 *     reached 35% of copy bandwidth where fp32 with 32 bytes reached 55-70%).
 *     The target is 64 bytes per thread in the forward and 32 per input
 *     (x and dy) in the backward.
 * Past the largest coverage (on sm_90 with vector access: 131072 fwd, 65536
 * bwd, 262144 bwd for 16-bit rows with the wide tile; without clusters 16384
 * fwd, 8192 bwd, 16384 bwd with the wide tile) the two-pass path takes over (the
 * backend turns a two-pass backward whose partial rows do not fit shared
 * memory into the column split).
 *
 * Forward rows the streaming kernel can run (the backend's `stream`: x, y,
 * weight, bias and any residual stream of one dtype, 16-byte vectors) past
 * FN_PLAN_STREAM_FWD_BYTES bytes, or from FN_PLAN_STREAM_FWD_RES_BYTES bytes
 * with a residual stream, take the two-pass path in its streaming form
 * (fn_plan_streams); shorter ones of FN_PLAN_HELD_MIN_VECTORS vectors or
 * more take FN_PATH_HELD (fn_plan_use_held): whole rows in registers, many
 * small CTAs resident per SM. On sm_90 the streamed rows past 64 KiB are
 * held too, over a cluster of CTAs (fn_plan_use_held_cluster), where a
 * cluster of up to 16 (the backend's max_cluster) holds them.
 *
 * Without vector access (odd N, misaligned pointers or row pitches), rows of
 * FN_PLAN_SCALAR_TWO_PASS_COLS or more also take the two-pass path: held in
 * registers one element at a time, a long row needs so many registers
 * (addresses and dtype branches per element) that an SM kept one CTA of 9
 * warps resident (measured 14% of copy bandwidth forward and 5% backward at
 * N = 4097), while the two-pass kernels stay small and re-read the row from L2.
 */
#include "plan.h"

#include <math.h>

int fn_plan_ept_allowed(int is_bwd, int vec, int ept)
{
    if (ept < vec) return 0;
    if (vec == 1) return is_bwd ? (ept == 4 || ept == 8) : (ept == 4 || ept == 8 || ept == 16);
    return ept == 4 || ept == 8 || ept == 16 || (ept == 32 && (!is_bwd || vec == 8 || vec == 4));
}

static double log2i(int v) { return log((double)v) / log(2.0); }

fn_plan fn_plan_make(const fn_plan_problem *pb)
{
    fn_plan best = {FN_PATH_TWO_PASS, 1, 0, 512, 1, 1, 512};
    const int vec = pb->vec_ok ? 16 / pb->x_bytes : 1;
    best.vec = vec;
    /* Clusters stop at 8. Forward: at N = 262144 bf16 the two-pass kernel
     * (49% of copy) beat a cluster of 16 (38%); at 131072 a cluster of 8 and
     * two-pass were even (47% / 49%). Backward with 16 elements per thread: at
     * N = 131072 bf16 the column split (39%) beat a cluster of 16 (34%). The
     * backward's wide tile (32 elements) goes to 16 (non-portable, sm_90):
     * at 131072 its cluster of 8 ran at 77.6% of copy and at 262144 its
     * cluster of 16 at 59.5%, against the column split's 39-40%. fp32
     * backward rows in CTAs of 256 threads or fewer go to 16 as well (N =
     * 65536: 16 x 256 at 83.9% of copy against 8 x 512 at 67.1%), and so
     * do the residual call's since the cluster exchange (step 99, % of copy,
     * planner before -> 16 CTAs: RMSNorm 49152 70.3 -> 97.3 in 16 x 192,
     * 65536 80.7 -> 98.0 in 16 x 256, 131072 67.5 -> 76.3 in 16 x 512; in
     * step 69, before the exchange, 8 x 512 had won at 65536), as do
     * RMSNorm's 16-bit residual rows in the 16-element tile (res16 below). */
    const int cap = 8, wide_cap = 16;
    const int f32_bwd = pb->is_bwd && pb->x_bytes == 4;
    /* RMSNorm's 16-bit residual call, whose rows of FN_PLAN_RES_BWD_NARROW_*
     * columns take the 16-element tile (see below): over up to 16 CTAs
     * (131072 in 16 x 512: 73.0 -> 94.6% of copy against the 32-element tile
     * over 8, step 99). */
    const int res16 = pb->is_bwd && pb->x_bytes == 2 && pb->stream == FN_STREAM_RESIDUAL && !pb->is_ln;
    const int narrow_cap = f32_bwd || res16 ? wide_cap : cap; /* the 16-element (and smaller) tiles' clusters */
    const int cap_here = pb->is_bwd && pb->wide_bwd ? wide_cap : narrow_cap;
    int max_cluster = pb->cc_major >= 9 ? (pb->max_cluster < cap_here ? pb->max_cluster : cap_here) : 1;
    if (!pb->vec_ok && pb->cols >= FN_PLAN_SCALAR_TWO_PASS_COLS) max_cluster = 0; /* no register plan */
    const int max_ept = pb->is_bwd ? (vec == 1 ? 8 : 16) : (vec == 1 ? 16 : 32);
    /* plan.h: FN_PLAN_SMALL_BWD_*. As measured: rows of 16-byte vectors (not
     * the SHIFT kernels, which cap max_tpr), not the residual call. */
    const int small_bwd = pb->is_bwd && pb->rows > 0 && pb->vec_ok && pb->max_tpr == 0 &&
                          pb->stream != FN_STREAM_RESIDUAL &&
                          pb->cols <= (pb->x_bytes == 2 ? FN_PLAN_SMALL_BWD_MAX_COLS : FN_PLAN_SMALL_BWD_MAX_COLS_F32) &&
                          pb->rows * pb->cols <= FN_PLAN_SMALL_BWD_ELEMENTS;
    /* Rows off a 16-byte boundary held (the held kernel's ODD form): U and
     * the shape of an aligned row of their whole vectors. Measured: docs/perf.md
     * step 59. */
    if (!pb->is_bwd && pb->odd_held != FN_STREAM_NONE) {
        const int v = 16 / pb->x_bytes;
        const int64_t nv = pb->cols / v;
        /* past 64 KiB, over a cluster (sm_90) as an aligned row of nv vectors */
        if (nv > FN_PLAN_HELD_MAX_VECTORS && pb->cc_major >= 9) {
            const int uc = pb->odd_held == FN_STREAM_RESIDUAL ? 4 : 8;
            const int most = pb->max_cluster < FN_PLAN_HELD_MAX_CLUSTER ? pb->max_cluster : FN_PLAN_HELD_MAX_CLUSTER;
            const int small = most < FN_PLAN_HELD_SMALL_CTA_MAX_CLUSTER ? most : FN_PLAN_HELD_SMALL_CTA_MAX_CLUSTER;
            fn_plan held = best;
            if (fn_plan_use_held_cluster(&held, nv * v, pb->x_bytes, uc, FN_PLAN_HELD_SMALL_CTA_THREADS, small) ||
                fn_plan_use_held_cluster(&held, nv * v, pb->x_bytes, uc, FN_PLAN_HELD_CLUSTER_CTA_THREADS, most))
                return held;
        }
        /* U = 4 also where it makes rows of a power of two of threads up to
         * 256 (step 60: bf16 RMSNorm 4097 84.2 -> 90.5, 8191 87.4 -> 94.0;
         * CTAs of 96 or 384 threads lost 5-12%) */
        const int64_t t4 = (nv + 3) / 4 <= 32 ? 32 : ((nv + 3) / 4 + 31) / 32 * 32;
        const int u = pb->odd_held == FN_STREAM_RESIDUAL || (nv + 7) / 8 <= 32 || (t4 <= 256 && !(t4 & (t4 - 1))) ? 4 : 8;
        if (nv >= FN_PLAN_HELD_ODD_MIN_VECTORS && nv <= FN_PLAN_HELD_MAX_VECTORS &&
            fn_plan_use_held_odd(&best, pb->cols, pb->x_bytes, u))
            return best;
    }
    /* fn_plan_streams: a forward of the streaming kernel's call, not w32.
     * The residual call's streamed rows are held over a cluster past 32 KiB
     * (FN_PLAN_STREAM_FWD_RES_BYTES): streamed, 64 KiB ran at 76% of copy
     * against 84% for the clustered rows past it. Held over a cluster
     * (GB/s, RMSNorm / LayerNorm): bf16 32768 +11.1 / +12.3%, fp32 16384
     * +12.1 / +13.4%; 48 KiB bf16 +2.9 / -1.1%, fp32 +2.6 / +3.4%; 32 KiB
     * (bf16 16384, fp32 8192) -2 / -3%, which stay streamed (docs/perf.md
     * step 79). */
    /* The common call past 64 KiB and RMSNorm's residual call from 32 KiB:
     * the register tile over a cluster, whose row sums meet by the exchange
     * (plan.h, FN_PLAN_FWD_ROWS_CLUSTER_*; LayerNorm's clusters stop at the
     * backend's FN_FWD_LN_MAX_CLUSTER); the rest are held. */
    if (fn_plan_fwd_rows_cluster_call(pb) &&
        fn_plan_use_fwd_rows_cluster(&best, pb->cols, pb->x_bytes, pb->max_cluster, pb->stream == FN_STREAM_RESIDUAL))
        return best;
    if (pb->vec_ok && pb->cc_major >= 9 && fn_plan_streams(pb) &&
        (pb->cols * pb->x_bytes > FN_PLAN_STREAM_FWD_BYTES ||
         (pb->stream == FN_STREAM_RESIDUAL && pb->cols * pb->x_bytes > FN_PLAN_STREAM_FWD_RES_BYTES))) {
        const int u = pb->stream == FN_STREAM_RESIDUAL ? 4 : 8;
        const int most = pb->max_cluster < FN_PLAN_HELD_MAX_CLUSTER ? pb->max_cluster : FN_PLAN_HELD_MAX_CLUSTER;
        const int small = most < FN_PLAN_HELD_SMALL_CTA_MAX_CLUSTER ? most : FN_PLAN_HELD_SMALL_CTA_MAX_CLUSTER;
        if (fn_plan_use_held_cluster(&best, pb->cols, pb->x_bytes, u, FN_PLAN_HELD_SMALL_CTA_THREADS, small) ||
            fn_plan_use_held_cluster(&best, pb->cols, pb->x_bytes, u, FN_PLAN_HELD_CLUSTER_CTA_THREADS, most))
            return best;
    }
    if (fn_plan_streams(pb)) max_cluster = 0; /* streamed (two-pass) */
    if (!pb->is_bwd && pb->stream != FN_STREAM_NONE && pb->vec_ok && !fn_plan_streams(pb)) {
        const int64_t nv = pb->cols / vec;
        const int u = pb->stream == FN_STREAM_RESIDUAL || (nv + 7) / 8 <= 32 ? 4 : 8;
        const int64_t min_nv = pb->w32 && pb->stream == FN_STREAM_COMMON ? FN_PLAN_HELD_W32_MIN_VECTORS
                               : pb->x_bytes == 4                          ? FN_PLAN_HELD_F32_MIN_VECTORS
                                                                           : FN_PLAN_HELD_MIN_VECTORS;
        if (nv >= min_nv && nv <= FN_PLAN_HELD_MAX_VECTORS &&
            fn_plan_use_held(&best, pb->cols, pb->x_bytes, u))
            return best;
    }
    /* The 16-bit backward's rows in one CTA (FN_PLAN_BWD_WIDE_ONE_CTA_MIN_COLS
     * up; past 8192 columns the wide tile wins anyway, saving a cluster):
     * the 16-element tile in CTAs of 288..480 threads, one resident per SM,
     * measured far below the wide tile's CTAs of half the threads, and
     * LayerNorm's below it at 256 and 512 too (H200, % of copy, RMSNorm
     * 16 x tpr -> 32 x tpr / 2: 3072 80.0 -> 86.2, 5000 68.2 -> 76.1, 5120
     * 71.6 -> 88.5, 6144 80.8 -> 92.1 (fp16 too), 7168 83.9 -> 92.1;
     * LayerNorm 3072 71.8 -> 75.4, 4096 84.0 -> 85.2, 5000 59.9 -> 79.0, 6144
     * 69.1 -> 84.3, 7168 70.8 -> 84.3, 8192 82.5 -> 89.7 (fp16 82.5 ->
     * 90.6); docs/perf.md step 98). RMSNorm keeps 16 x 256 at 4096 (94.5,
     * wide 86.7) and 16 x 512 at 8192 (97.7 against 92.2); 2304 and 2560
     * measured even (LayerNorm). Not the residual call, whose wide tile
     * reads dresidual_out unstaged (see below). */
    const int64_t t16 = ((pb->cols + 15) / 16 + 31) / 32 * 32; /* the 16-element tile's threads a row */
    const int wide_one_cta = pb->is_bwd && pb->x_bytes == 2 && pb->wide_bwd && pb->stream != FN_STREAM_RESIDUAL &&
                             !small_bwd && pb->cols >= FN_PLAN_BWD_WIDE_ONE_CTA_MIN_COLS &&
                             (pb->is_ln || (t16 != 256 && t16 != 512));
    double best_cost = 1e30;
    for (int cluster = 1; cluster <= max_cluster; cluster *= 2) {
        for (int ept = 4; ept <= 32; ept *= 2) {
            if (!fn_plan_ept_allowed(pb->is_bwd, vec, ept)) continue;
            if (small_bwd && ept > 8) continue;
            const int wide = pb->is_bwd && ept == 32; /* see below */
            if (wide ? !pb->wide_bwd : cluster > narrow_cap) continue;
            if (wide && pb->x_bytes == 4 && pb->cols != FN_PLAN_F32_BWD_WIDE_COLS) continue;
            /* Powers of two below a warp (the shuffle reduction needs aligned
             * groups), then any whole number of warps up to 512. */
            const int max_tpr = pb->max_tpr > 0 && pb->max_tpr < 512 ? pb->max_tpr : 512;
            for (int tpr = 1; tpr <= max_tpr; tpr = tpr < 32 ? tpr * 2 : tpr + 32) {
                if (tpr * ept < vec) continue; /* a thread holds at least one vector */
                const int64_t coverage = (int64_t)cluster * tpr * ept;
                if (coverage < pb->cols) continue;
                /* fp32 backward (see cap_here): 512 threads in a cluster of
                 * 16 only past what 16 x 256 covers (65536 columns). With the
                 * cluster exchange (step 89) 16 x 512 ran at 68.5 / 64.1% of
                 * copy at 131072 (RMSNorm / LayerNorm), the column split at
                 * 55.0 / 55.1. */
                if (!wide && cluster > cap && tpr > 256 && pb->cols <= (int64_t)cluster * 256 * ept) continue;
                double cost = (double)(coverage - pb->cols) / (double)coverage;
                cost += 0.15 * log2i(cluster);
                if (tpr == 512 && !small_bwd) cost += 0.05;
                /* The fp32 backward's 512-thread CTA (16 elements a thread,
                 * one CTA per SM) lost to twice the CTAs of 256 threads over a
                 * cluster twice as large (H200, GB/s, RMSNorm / LayerNorm:
                 * 8192 3834 -> 4180 / 3803 -> 4144, 16384 3300 -> 4113 / 3274
                 * -> 4017, 32768 3057 -> 4061 / 3017 -> 3813; docs/perf.md
                 * step 69); a cluster doubling costs 0.15. */
                if (f32_bwd && tpr == 512) cost += 0.20;
                /* The fp32 residual call stages its three inputs in CTAs of up
                 * to 256 threads (96 KiB, FN_MAX_STAGE_BYTES); in more, two,
                 * dresidual_out read unstaged (step 99, % of copy: 49152 in 8
                 * x 384 69.6, in 16 x 256 86.8, in 16 x 192 97.3). */
                if (f32_bwd && pb->stream == FN_STREAM_RESIDUAL && tpr > 256) cost += 0.20;
                if (ept == max_ept) cost += 0.03;
                /* The backward's 32-element tile reads x and dy back from
                 * its stage on each pass: taken where it saves a cluster
                 * (N = 16384 bf16 in one CTA instead of a cluster of 2), not
                 * where 16 elements fill the row (0.10 < 0.15). */
                if (wide) cost += 0.10;
                if (wide && cluster == 1 && wide_one_cta) cost -= 0.25;
                /* The residual call's third staged input (dresidual_out) does
                 * not fit beside the 32-element tile's two stages: there it runs
                 * the general kernel, dresidual_out read unstaged, but for exact
                 * tiles of 512 threads over a cluster (262144 in 16 x 512), which
                 * take one stage (DROLL, norm_bwd.cu, step 107). Its 16-bit
                 * RMSNorm rows of 16384..65536 take the 16-element tile over
                 * clusters instead (H200, bf16 RMSNorm + residual, GB/s, wide
                 * -> 16 x 512 x C: 16384 3349 -> 3641, 32768 3124 -> 3401,
                 * 65536 2912 -> 3090; without dresidual 1.15x). Not shorter
                 * rows (8448 0.65x, 12288 0.82x), nor LayerNorm's (0.69-0.79x
                 * at 8448..65536): docs/perf.md steps 81 and 83. */
                if (wide && pb->stream == FN_STREAM_RESIDUAL && !pb->is_ln &&
                    pb->cols >= FN_PLAN_RES_BWD_NARROW_MIN_COLS && pb->cols <= FN_PLAN_RES_BWD_NARROW_MAX_COLS)
                    cost += 0.50;
                if (ept == 4 && vec < 4) cost += 0.01;
                const int bytes = ept * pb->x_bytes, target = pb->is_bwd ? 32 : 64;
                if (bytes < target) cost += 0.04 * log2i(target / bytes);
                /* The backward's 16-bit tile of one vector a thread in CTAs
                 * of more than 256 threads (one resident per SM): measured
                 * far below the 16-element tile with its idle lanes (H200,
                 * bf16, GB/s, EPT 8 -> 16: RMSNorm 2304 2690 -> 3345, 2600
                 * 2003 -> 3440, 2800 2161 -> 3699, 3600 2353 -> 3437;
                 * LayerNorm 2600 1583 -> 2718; docs/perf.md step 64). fp32
                 * (32 bytes at EPT 8) likewise for LayerNorm (2600 2953 ->
                 * 3389, 3300 3095 -> 3443, 3600 3318 -> 3739); RMSNorm's fp32
                 * measured mixed (2304 -3%, 2600 +9%, 3600 -3%) and keeps its
                 * plans (step 67). */
                if (pb->is_bwd && (pb->x_bytes == 2 || pb->is_ln) && ept == 8 && tpr > 256 && !small_bwd) cost += 0.25;
                if (cost < best_cost) {
                    best_cost = cost;
                    best.path = FN_PATH_ROWS_IN_REGISTERS;
                    best.ept = ept;
                    best.tpr = tpr;
                    best.cluster = cluster;
                }
            }
        }
    }
    /* The fp32 backward's rows of 9216..12288 columns (not the residual
     * call), which the search above puts in 2 CTAs of 288..384 threads: at
     * about 128 registers a thread an SM keeps one such CTA (9-12 warps),
     * where it keeps three of 160 threads (15 warps) or two of 256 (16).
     * H200, GB/s, RMSNorm / LayerNorm, 2 x 288..384 -> this: 9216 3294 / 2846
     * -> 3860 / 3632 (4 x 160), 10240 3477 / 3200 -> 4033 / 3976 (4 x 160),
     * 11008 3560 / 3261 -> 3795 / 3206 (3 x 256: LayerNorm keeps 2 x 352 to
     * 11264), 12000 3643 / 3344 -> 3961 / 3445 (3 x 256), 12288 3715 / 3546 ->
     * 4013 / 3583 (3 x 256); docs/perf.md step 80. A cluster of 3 CTAs is
     * taken nowhere else; other lengths were not measured this way. */
    if (best.path == FN_PATH_ROWS_IN_REGISTERS && f32_bwd && pb->stream != FN_STREAM_RESIDUAL && vec == 4 &&
        max_cluster >= 4 &&
        pb->cols >= FN_PLAN_F32_BWD_RESIDENT_MIN_COLS && pb->cols <= FN_PLAN_F32_BWD_RESIDENT_MAX_COLS) {
        if (pb->cols <= 4 * 160 * 16) { /* what 4 x 160 covers */
            best.ept = 16, best.tpr = 160, best.cluster = 4;
        } else if (!pb->is_ln || pb->cols > 2 * 352 * 16) { /* LayerNorm keeps 2 x 352 where it covers */
            best.ept = 16, best.tpr = 256, best.cluster = 3;
        }
    }
    if (best.path == FN_PATH_ROWS_IN_REGISTERS) {
        /* Short rows share a CTA of 256 threads (several rows per CTA). */
        best.rows_per_block = best.tpr >= 256 ? 1 : 256 / best.tpr;
        best.threads = best.rows_per_block * best.tpr;
    } else {
        fn_plan_use_two_pass(&best, pb->cols, pb->x_bytes);
    }
    return best;
}

int fn_plan_streams(const fn_plan_problem *pb)
{
    if (pb->is_bwd || pb->w32) return 0;
    if (pb->stream == FN_STREAM_COMMON) return pb->cols * pb->x_bytes > FN_PLAN_STREAM_FWD_BYTES;
    if (pb->stream == FN_STREAM_RESIDUAL) return pb->cols * pb->x_bytes >= FN_PLAN_STREAM_FWD_RES_BYTES;
    return 0;
}

int fn_plan_stream_keeps_weight(const fn_plan_problem *pb)
{
    const int64_t row = pb->cols * pb->x_bytes * (pb->stream == FN_STREAM_RESIDUAL ? 2 : 1);
    return row < FN_PLAN_STREAM_WEIGHT_L1_ROW_BYTES || row > FN_PLAN_STREAM_WEIGHT_L1_MAX_ROW_BYTES;
}

int fn_plan_use_held(fn_plan *pl, int64_t cols, int x_bytes, int u)
{
    const int vec = 16 / x_bytes;
    int64_t tpr = (cols / vec + u - 1) / u;
    if (u < 2 || u > 8 || (u & (u - 1)) || cols % vec || tpr > 512) return 0;
    if (tpr <= 32) {
        int t = 1;
        while (t < tpr) t <<= 1;
        tpr = t;
    } else {
        tpr = (tpr + 31) / 32 * 32;
    }
    pl->path = FN_PATH_HELD;
    pl->vec = vec;
    pl->ept = u * vec;
    pl->tpr = (int)tpr;
    pl->rows_per_block = tpr >= 256 ? 1 : 256 / (int)tpr;
    pl->threads = pl->rows_per_block * pl->tpr;
    pl->cluster = 1;
    return 1;
}

int fn_plan_use_held_odd(fn_plan *pl, int64_t cols, int x_bytes, int u)
{
    const int vec = 16 / x_bytes;
    fn_plan held = *pl;
    if (!fn_plan_use_held(&held, cols / vec * vec, x_bytes, u) || held.tpr < 2 * (vec - 1)) return 0;
    *pl = held;
    return 1;
}

/* The ODD tile's plan for at most max_cluster CTAs a row (wide: the
 * 32-element tile allowed), 0 where none. */
static int bwd_odd_plan(fn_plan *pl, int64_t cols, int x_bytes, int cc_major, int max_cluster, int wide, int is_ln)
{
    const int vec = 16 / x_bytes;
    const fn_plan_problem pb = {1, cols / vec * vec, x_bytes, 1, cc_major, max_cluster, wide, 0, 0, 0, 0, is_ln, 0, 0};
    fn_plan o = fn_plan_make(&pb);
    /* a lane for each head and tail element (at most 2 * (vec - 1) = 14) */
    _Static_assert(FN_PLAN_BWD_ODD_MIN_TPR >= 2 * (16 / 2 - 1), "the ODD tile's edge lanes");
    if (o.path != FN_PATH_ROWS_IN_REGISTERS || o.tpr < FN_PLAN_BWD_ODD_MIN_TPR) return 0;
    o.rows_per_block = 1;
    o.threads = o.tpr;
    *pl = o;
    return 1;
}

int fn_plan_bwd_odd(fn_plan *pl, int64_t cols, int x_bytes, int cc_major, int max_cluster, int wide, int is_ln)
{
    /* One CTA a row wherever one holds it: fp32 8193 in 2 x 256 measured
     * 0.93-0.94x of 1 x 512 (session 15). Past that a cluster, of at most 4
     * CTAs for 16-bit rows: bf16 65537 in 8 x 512 measured 0.73-0.88x of
     * two-pass, 12289 (2 x 384) 1.43-1.49x, 32769 (4 x 512) 1.24-1.36x;
     * fp32 12289..65537 (3..16 CTAs) 1.04-1.52x (docs/perf.md step 82).
     * 16-bit rows that 4 CTAs of the 16-element tile cannot hold take the
     * 32-element tile over up to 4 (65537 as 65536 in 4 x 512 x 32: sm_90,
     * step 87); not without clusters, where it would start at 8193 columns
     * in one CTA, unmeasured. */
    if (bwd_odd_plan(pl, cols, x_bytes, cc_major, 1, 0, is_ln)) return 1;
    const int most = x_bytes == 2 ? FN_PLAN_BWD_ODD_MAX_CLUSTER_16 : max_cluster;
    const int c = most < max_cluster ? most : max_cluster;
    if (bwd_odd_plan(pl, cols, x_bytes, cc_major, c, 0, is_ln)) return 1;
    return wide && x_bytes == 2 && cc_major >= 9 && bwd_odd_plan(pl, cols, x_bytes, cc_major, c, 1, is_ln);
}

int fn_plan_use_held_cluster(fn_plan *pl, int64_t cols, int x_bytes, int u, int cta_threads, int max_cluster)
{
    const int vec = 16 / x_bytes;
    if (cols % vec || cta_threads < 32 || cta_threads > 512 || cta_threads % 32) return 0;
    const int64_t nv = cols / vec, per_cta = (int64_t)u * cta_threads;
    int c = 2;
    while ((int64_t)c * per_cta < nv) c *= 2;
    if (c > max_cluster) return 0;
    const int64_t slice = (nv + c - 1) / c;
    const int64_t tpr = ((slice + u - 1) / u + 31) / 32 * 32;
    pl->path = FN_PATH_HELD;
    pl->vec = vec;
    pl->ept = u * vec;
    pl->tpr = (int)tpr;
    pl->rows_per_block = 1;
    pl->threads = (int)tpr;
    pl->cluster = c;
    return 1;
}

int fn_plan_fwd_rows_cluster_call(const fn_plan_problem *pb)
{
    /* The common call past 64 KiB; RMSNorm's residual call from
     * FN_PLAN_STREAM_FWD_RES_BYTES, where it streams or is held; LayerNorm's
     * past 64 KiB, short of FN_PLAN_LN_RES_TILE_END_BYTES (step 111, plan.h).
     * A call without a weight runs the PLAIN
     * kernel with a weight of ones (step 95); LayerNorm's statistics cross
     * the cluster in one exchange (step 96: bf16 65536 72.1 -> 78.3% of
     * copy, fp32 32768 77.9 -> 88.3). */
    const int64_t bytes = pb->cols * pb->x_bytes;
    const int rows = (pb->stream == FN_STREAM_COMMON && bytes > FN_PLAN_STREAM_FWD_BYTES) ||
                     (pb->stream == FN_STREAM_RESIDUAL &&
                      (pb->is_ln ? bytes > FN_PLAN_STREAM_FWD_BYTES && bytes < FN_PLAN_LN_RES_TILE_END_BYTES
                                 : bytes >= FN_PLAN_STREAM_FWD_RES_BYTES));
    return !pb->is_bwd && !pb->no_tile && pb->vec_ok && pb->cc_major >= 9 && !pb->w32 && rows;
}

int fn_plan_fwd_odd(fn_plan *pl, const fn_plan_problem *pb)
{
    if (pb->is_bwd || pb->odd_held != FN_STREAM_COMMON || pb->cols <= 0) return 0;
    const int vec = 16 / pb->x_bytes;
    fn_plan_problem body = *pb;
    body.cols = pb->cols / vec * vec;
    body.vec_ok = 1;
    body.stream = FN_STREAM_COMMON;
    body.odd_held = FN_STREAM_NONE;
    if (!fn_plan_fwd_rows_cluster_call(&body)) return 0;
    const int most = pb->is_ln ? fn_plan_fwd_ln_max_cluster(body.cols) : pb->max_cluster;
    fn_plan t = *pl;
    if (!fn_plan_use_fwd_rows_cluster(&t, body.cols, pb->x_bytes, most, 0)) return 0;
    *pl = t;
    return 1;
}

int fn_plan_fwd_ln_max_cluster(int64_t cols)
{
    const int sixteen = cols == 131072 || cols == 262144;
    return sixteen ? 16 : FN_FWD_LN_MAX_CLUSTER;
}

static int is_f32_wide_cluster(int64_t c) { return c == 3 || c == 4 || c == 8 || c == 16; }

int fn_plan_use_fwd_rows_cluster(fn_plan *pl, int64_t cols, int x_bytes, int max_cluster, int residual)
{
    const int vec = 16 / x_bytes, cl = FN_PLAN_FWD_ROWS_CLUSTER;
    int ept = x_bytes == 2 ? 32 : 16;
    const int64_t small = (int64_t)FN_PLAN_FWD_ROWS_CLUSTER_SMALL_CTA * ept;
    int64_t c = (cols + small - 1) / small, tpr;
    if (cols % vec || cl > max_cluster) return 0;
    const int64_t wide = (int64_t)FN_PLAN_FWD_ROWS_CLUSTER_SMALL_CTA * 32; /* fp32 at 32 elements a thread */
    if (x_bytes == 4 && !residual && cols % wide == 0 && is_f32_wide_cluster(cols / wide) && cols / wide <= max_cluster) {
        ept = 32; /* 24576, 32768, 65536, 131072: 3, 4, 8, 16 x 256 */
        c = cols / wide;
        tpr = FN_PLAN_FWD_ROWS_CLUSTER_SMALL_CTA;
    } else if (c >= 2 && c <= cl) { /* the fewest CTAs of up to 256 threads, the fewest whole warps each */
        tpr = ((cols + c * ept - 1) / (c * ept) + 31) / 32 * 32;
        if (residual && x_bytes == 4 && c * tpr * ept != cols) return 0; /* fp32 12292 in 4 x 224: 82.3 -> 80.2 */
    } else if ((residual || x_bytes == 2) && max_cluster >= 16 && cols == 16 * small) {
        c = 16; /* 16 x 256: the fp32 residual call's 65536, 16-bit 131072 (plan.h) */
        tpr = FN_PLAN_FWD_ROWS_CLUSTER_SMALL_CTA;
    } else if (max_cluster >= 16 && (x_bytes == 2 || residual) && cols == (int64_t)16 * 512 * ept) {
        c = 16; /* 16-bit 262144, the fp32 residual call's 131072: 16 x 512 (plan.h) */
        tpr = 512;
    } else if (x_bytes == 4 && max_cluster >= 16 && cols == (int64_t)16 * 512 * 32) {
        ept = 32; /* fp32 262144: 16 x 512 x 32, the residual call's too (plan.h) */
        c = 16;
        tpr = 512;
    } else if (residual && x_bytes == 4 && max_cluster < 16 && cols == (int64_t)cl * 512 * ept) {
        /* fp32 65536 where clusters stop at 8 (LayerNorm's; RMSNorm's only on a
         * device without clusters of 16, not measured there): 8 x 512 x 16,
         * 64 KiB of stages (plan.h) */
        c = cl;
        tpr = 512;
    } else if (residual) { /* its other rows: no 512-thread CTA over 8 (measured unstaged: 131072 46.5) */
        return 0;
    } else if (x_bytes == 2 && cols == (int64_t)cl * 512 * ept) { /* 16-bit 131072: 8 x 512, filled exactly */
        c = cl;
        tpr = 512;
    } else if (x_bytes == 4 && cols == (int64_t)cl * 384 * ept) { /* fp32 49152: 8 x 384 */
        c = cl;
        tpr = 384;
    } else if (x_bytes == 4 && max_cluster >= 16 && cols == (int64_t)16 * 384 * ept) { /* fp32 98304: 16 x 384 */
        c = 16;
        tpr = 384;
    } else {
        return 0;
    }
    pl->path = FN_PATH_ROWS_IN_REGISTERS;
    pl->vec = vec;
    pl->ept = ept;
    pl->tpr = (int)tpr;
    pl->rows_per_block = 1;
    pl->threads = (int)tpr;
    pl->cluster = (int)c;
    return 1;
}

void fn_plan_use_two_pass(fn_plan *pl, int64_t cols, int x_bytes)
{
    pl->path = FN_PATH_TWO_PASS;
    pl->ept = 0;
    pl->threads = pl->tpr = fn_plan_two_pass_threads(cols, x_bytes);
    pl->rows_per_block = 1;
    pl->cluster = 1;
}

int fn_plan_two_pass_threads(int64_t cols, int x_bytes)
{
    /* About 4 vectors per thread per pass: a CTA spans the row in few steps,
     * and short rows get small CTAs, so that more rows are in flight per SM
     * (N = 4097 bf16 in one 512-thread CTA per row: one vector per thread,
     * 27% of copy). */
    const int64_t vectors = (cols + 16 / x_bytes - 1) / (16 / x_bytes);
    int64_t t = (vectors + 3) / 4;
    t = (t + 31) / 32 * 32;
    return t < 128 ? 128 : (t > 512 ? 512 : (int)t);
}

fn_column_split fn_plan_column_split(int64_t rows, int64_t cols, int x_bytes, int threads, int sm_count,
                                     int blocks_per_sm)
{
    fn_column_split cs;
    const int64_t chunk = (int64_t)threads * (16 / x_bytes);
    cs.chunks = (cols + chunk - 1) / chunk;
    /* About 4 waves: a partly filled last wave then costs at most a quarter
     * of one, while the partial rows (one per group) stay few. */
    const int64_t resident = (int64_t)sm_count * blocks_per_sm;
    int64_t wanted = (4 * resident + cs.chunks - 1) / cs.chunks;
    if (wanted > rows) wanted = rows;
    if (wanted > 65535) wanted = 65535; /* gridDim.y */
    if (wanted < 1) wanted = 1;
    cs.per_group = (rows + wanted - 1) / wanted;
    if (cs.per_group < 1) cs.per_group = 1;
    cs.groups = (rows + cs.per_group - 1) / cs.per_group;
    return cs;
}

int64_t fn_plan_odd_clusters(int64_t active, int m, int64_t groups)
{
    if (active < 1) active = 1;
    const int64_t lim = groups / 4; /* each cluster >= 4 row groups, as the other grids */
    /* w waves hold at most w * active clusters; the largest multiple of m in
     * them keeps g / (w * active) of the resident clusters busy. The fullest
     * so far as the fraction num / den. */
    int64_t best = 0, num = 0, den = 1;
    for (int64_t w = 1; w <= FN_PLAN_ODD_MAX_WAVES; w++) {
        const int64_t g = w * active / m * m;
        if (g == 0 || (w > 1 && g > lim)) continue;
        if (g * den > num * w * active) best = g, num = g, den = w * active;
    }
    return best ? best : fn_plan_odd_one_wave(active, m, groups);
}

int64_t fn_plan_odd_one_wave(int64_t n, int m, int64_t groups)
{
    const int64_t g = n / m * m;
    return g ? g : groups < m ? groups : m;
}
