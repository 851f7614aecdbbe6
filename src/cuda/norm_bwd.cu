/*
 * RMSNorm / LayerNorm backward on CUDA, with the fused residual gradient.
 *
 * Per row (x = what was normalized, x_hat = (x-mean)*rstd, g = dy*(w+w_off)):
 *   RMSNorm   dx = rstd*(g - x_hat*mean(x_hat*g))
 *   LayerNorm dx = rstd*(g - mean(g) - x_hat*mean(x_hat*g))
 *   dx += dresidual_out;  dresidual = dx (its own dtype)          ('=' on both)
 *   dweight partial += dy*x_hat;  dbias partial += dy            (fp32)
 * rstd/mean come from the forward or are recomputed from x and eps.
 *
 * Deterministic dweight/dbias: a persistent grid; each cluster (or CTA) walks
 * a fixed set of rows, keeps fp32 partial sums for the columns its threads own
 * in registers, and at the end writes one partial row of the workspace
 * [partials][cols]. dweight_finalize.cu sums the partial rows in fixed order.
 * With ATOMIC_DWEIGHT the same partials are atomically added into one fp32 row
 * (or straight into an fp32 dweight).
 *
 * The activation dtype TX is dx's; x (the residual stream when a residual was
 * fused) may be TX or fp32, like dy, dresidual_out and dresidual.
 *
 * Kernels: norm_bwd_rows_in_registers (row slices in registers, clusters on
 * sm_90 whose row sums meet by the cluster exchange of common.cuh; for rows off a 16-byte boundary its ODD form where every activation
 * shares x's offset within 16 bytes in each row, else a SHIFT variant
 * realigned in shared memory, as in the forward), norm_bwd_two_pass (any N, any alignment, rows
 * peeled to their 16-byte boundary; re-reads the row; partial sums in shared
 * memory when they fit), and for rows whose partials do not fit, the column
 * split: norm_bwd_two_pass writes each row's statistics, then
 * norm_bwd_columns computes dx and the partial rows by column ranges.
 */
#include "common.cuh"
#include "launch.cuh"
#include "plan.h"

namespace fn {

template <int VEC, int EPT>
__device__ __forceinline__ void write_partial_row(float (&acc)[EPT / VEC][VEC], float *dst, const fn_bwd_params &p,
                                                  float *subrow_partials, int sub, int lane, int64_t slice,
                                                  int64_t cid, const bool (&col_ok)[EPT / VEC])
{
    constexpr int K = EPT / VEC;
    const int tpr = p.tpr, rpb = p.rows_per_block;
    if (rpb > 1) {
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < K; k++)
            #pragma unroll
            for (int j = 0; j < VEC; j++)
                subrow_partials[(int64_t)sub * tpr * EPT + ((int64_t)k * tpr + lane) * VEC + j] = acc[k][j];
        __syncthreads();
        if (sub == 0) {
            #pragma unroll
            for (int k = 0; k < K; k++)
                #pragma unroll
                for (int j = 0; j < VEC; j++) {
                    float t = 0.0f;
                    for (int r = 0; r < rpb; r++)
                        t += subrow_partials[(int64_t)r * tpr * EPT + ((int64_t)k * tpr + lane) * VEC + j];
                    acc[k][j] = t;
                }
        }
    }
    if (sub != 0) return;
    #pragma unroll
    for (int k = 0; k < K; k++) {
        if (!col_ok[k]) continue;
        const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
        /* A vector past the row's end or off a 16-byte boundary (the SHIFT
         * kernels: N need not be a multiple of VEC) goes element by element. */
        const bool whole = col + VEC <= p.cols && (cid * p.cols + col) % 4 == 0;
        if (p.atomic) {
            #pragma unroll
            for (int j = 0; j < VEC; j++)
                if (col + j < p.cols) atomicAdd(dst + col + j, acc[k][j]);
        } else if (whole) {
            store_vec<float, VEC>(dst, cid * p.cols + col, acc[k]);
        } else {
            #pragma unroll
            for (int j = 0; j < VEC; j++)
                if (col + j < p.cols) dst[cid * p.cols + col + j] = acc[k][j];
        }
    }
}

/* PIPE (16-byte vectors, stages within FN_MAX_STAGE_BYTES): the next row
 * groups' x and dy stream into shared memory (cp.async) while this one is
 * reduced and written, and each pass over the row reads its x and dy back
 * from the stage. Otherwise x and dy are loaded once into registers and held.
 *
 * The kernel is bound by instruction issue more than by memory (ncu at
 * N = 4096 bf16: 0.70 warps issued per scheduler cycle at 38% of DRAM
 * bandwidth), so the per-element work is kept small: (w + w_off) comes from
 * a shared-memory fp32 cache (p.wcache), LayerNorm's extra terms and the
 * dbias accumulation are skipped when not asked for (uniform branches, the
 * row body specialized on LN), and the arithmetic is folded into FMAs. */
/* Launch bounds: 512 threads, one CTA per SM at most the PLAIN and SHIFT
 * kernels' 128 registers; the PLAIN kernel compiled for 192 threads a row
 * (16-bit rows of 2561..3072 columns at 16 elements a thread, which no CTA of
 * 256 holds whole) three CTAs of 192 (96 registers, no spills): bf16 3000
 * RMSNorm 3183 -> 3379 GB/s, LayerNorm 2809 -> 3010 (docs/perf.md step 65). */
__host__ __device__ constexpr bool bwd_lb_three(int tpr, bool shift) { return !shift && tpr == 192; }
/* LayerNorm's exact 16-bit tiles of 16 and 32 threads a row (N = 256 and
 * 512, 16 and 8 rows in a CTA of 256) in three CTAs per SM (80 registers, no
 * spills, x and dy held packed: PACK below): bf16 LayerNorm 256 1289 -> 1540
 * GB/s, 512 2020 -> 2212. Not RMSNorm's (0.95-0.99x at 256..4096), nor wider
 * rows (LayerNorm 1024 0.97x, 2048 0.99x, f16 2048 0.94x): docs/perf.md step 84. */
__host__ __device__ constexpr bool bwd_lb_three256(int tpr, bool shift, bool exact, int plain)
{
    return !shift && exact && plain == 2 && (tpr == 16 || tpr == 32);
}
/* The fp32 32-element tile (16 x 512 x 32 at 262144, the exact form only:
 * launch_rows): its x and dy are 128 KiB a stage at 512 threads, so one stage
 * beside the 64 KiB weight cache, refilled as it drains (ROLL in the
 * kernel: each thread stages its own vectors, and the next row's vector k
 * goes out as soon as this row's dx of vector k is written). Every other
 * tile: FN_STAGES, the next rows in flight while one is reduced. */
/* ROLL's common call (fp32 262144 in 16 x 512 x 32): vectors of x and dy a
 * thread keeps in registers from the sum pass to the dx pass, whose slots
 * take the next row's before the exchange (the kernel's HEAD). H200, % of
 * copy, none -> 1 vector: RMSNorm 78.5 -> 81.0, LayerNorm 75.1 -> 77.5; the
 * residual call (not HEAD's) and 196608 (not this tile) unmoved (docs/perf.md
 * session 38). 0: none, the kernel before; a macro, so that a lab build can
 * set it (-DCMAKE_CUDA_FLAGS=-DFN_BWD_ROLL_HEAD=0). ptxas (sm_90, 512
 * threads, 128 registers at most): 1 vector, 128 registers without spills
 * (the dbias form: 4 bytes); 2, spills of 16 and 20 bytes. */
#ifndef FN_BWD_ROLL_HEAD
#define FN_BWD_ROLL_HEAD 1
#endif
/* FOLD: rstd factored out of the per-element work. The sum pass adds
 * (x - mean) * g (x * g for RMSNorm) and scales the row's sum by rstd once;
 * the dx pass takes dyr = dy * rstd, so that
 *   dx = dyr * w - (x - mean) * (c1 * rstd^2) - c2 * rstd,  dweight += dyr * (x - mean),
 * and a row held in registers (HOLD's unpacked x) keeps x - mean from the sum
 * pass. Per element (fp32 instructions, both passes): LayerNorm 12 -> 9,
 * RMSNorm 8 -> 6. The same roundings in another order: no cancellation is
 * added (x - mean is still formed before any product). Not in the
 * 512-thread 32-element tiles (LayerNorm bf16 262144 lost a point) nor the
 * general 32-element kernel (bit for bit against DROLL's tile). H100, % of
 * copy, the two rounds' mean (docs/perf.md session 40): LayerNorm bf16 256
 * 46.1 -> 46.5, 4096 88.0 -> 88.5, 8192 93.0 -> 93.4, 262144 95.6 -> 95.7,
 * RMSNorm and fp32 even; no H200 run yet. 0: the form before (a lab build:
 * -DCMAKE_CUDA_FLAGS=-DFN_BWD_FOLD=0). */
#ifndef FN_BWD_FOLD
#define FN_BWD_FOLD 1
#endif
template <typename TX, int EPT> __host__ __device__ constexpr int bwd_stages()
{
    return sizeof(TX) == 4 && EPT == 32 ? 1 : FN_STAGES;
}
template <typename TX, int VEC, int EPT, bool PIPE, int PLAIN, int TPR = 0, bool EXACT = true, bool SHIFT = false,
          bool ODD = false, bool DROLL = false> /* see the forward */
__global__ void __launch_bounds__(bwd_lb_three(TPR, SHIFT) ? 192 : bwd_lb_three256(TPR, SHIFT, EXACT, PLAIN) ? 256 : 512,
                                  bwd_lb_three(TPR, SHIFT) || bwd_lb_three256(TPR, SHIFT, EXACT, PLAIN) ? 3
                                  : PLAIN || SHIFT                                                      ? 1
                                                                                                        : 0)
    norm_bwd_rows_in_registers(const fn_bwd_params p)
{
    /* ODD: rows off a 16-byte boundary (odd N, odd pitches, offset pointers)
     * whose every activation sits at x's offset within 16 bytes in each row
     * (the backend's same_phase), in a grid whose CTAs each meet one such
     * offset in all their rows (one row per CTA, the grid a multiple of the
     * rows' period: bwd_prepare). The CTA's rows then split alike: hd head
     * elements before the first 16-byte boundary, nb aligned body vectors
     * and tl tail elements. The body is the aligned kernel's tile shifted by
     * hd columns (staged, cached and accumulated as such: a thread's columns
     * stay fixed for the kernel); the hd + tl edge elements go one per lane
     * (lanes below 2 * (VEC - 1)), each staged from the 16-byte chunk that
     * holds it, with its own dweight and dbias sums. Over a cluster the body
     * vectors split among its CTAs as an aligned row's do, the edge elements
     * all on its first CTA (whose rows all sit at one offset: the grid's
     * clusters a multiple of the period). The PLAIN variants. */
    static_assert(!ODD || (PIPE && PLAIN && !SHIFT && !EXACT && (TPR == 0 || TPR >= 256)),
                  "ODD: the PLAIN staged tile, one row per CTA");
    /* SHIFT: rows off a 16-byte boundary, realigned through shared memory as
     * in the forward (common.cuh): x, dy and dresidual_out staged as runs,
     * dx and dresidual written back through one run (they hold the same
     * values). The general kernel only, every activation of dtype TX
     * (16-bit), the weight cached. */
    static_assert(!SHIFT || (PIPE && sizeof(TX) == 2 && (!PLAIN || !EXACT)), "SHIFT: staged 16-bit rows");
    /* TPR > 0: tpr known at compile time, in a CTA of max(TPR, 256) threads
     * (PLAIN only; see the forward's kernel and launch_plain below). */
    static_assert(TPR == 0 || PLAIN, "TPR: PLAIN variants only");
    constexpr int K = EPT / VEC;
    static_assert(!PIPE || VEC > 1, "the pipeline moves 16-byte vectors");
    static_assert(!PLAIN || PIPE, "PLAIN: staged rows only");
    /* PLAIN (1, or 2 with dbias) is the launcher's promise for the common call
     * (bwd_is_plain): the weight is in the cache, no dresidual_out, no
     * dresidual; with EXACT the row fills the tile exactly (no column
     * checks). Those branches then fold at
     * compile time. PLAIN = 3 is the pre-norm residual's call (RES): the same
     * with dresidual_out staged as a third input and dresidual written when
     * asked for, of dtype TX, and no dbias (bwd_is_plain_residual). PLAIN = 0 is the
     * general kernel. */
    constexpr bool RES = PLAIN == 3;
    const bool has_dres_out = RES || (!PLAIN && p.dres_out != nullptr);
    const bool has_dres = (RES || !PLAIN) && p.dres != nullptr; /* RES: dx alone when dresidual is dx itself */
    /* HOLD: the staged x and dy are unpacked into registers once per row and
     * both passes read them there (the PLAIN variants, whose registers allow
     * it: bf16 at EPT 16 takes 120, 128 with dbias, without spills). As fp32
     * the 32-element tile's x and dy would take 64 registers: it reads them
     * back from the stage on each pass. (Held packed in 32 registers and
     * unpacked on each pass instead, they measured no faster: docs/perf.md,
     * tuning step 22.) */
    constexpr bool HOLD = PIPE && PLAIN >= 1 && EPT <= 16;
    /* In three CTAs per SM (80 registers) LayerNorm's tile holds x and dy as
     * the staged 16-bit vectors and unpacks them on each pass (unpacked, it
     * spilled 84-108 bytes). */
    /* DROLL's 16-bit 32-element tile (below) holds them packed too: 32
     * registers for a row of x and dy, where unpacked they would take 128. */
    constexpr bool PACK = (HOLD && sizeof(TX) == 2 && PLAIN == 2 && bwd_lb_three256(TPR, SHIFT, EXACT, PLAIN)) ||
                          (DROLL && EPT == 32);
    __shared__ RowReduceSmem sm;
    /* Dynamic shared memory: the pipeline stages during the row loop, then
     * [rows_per_block][tpr*EPT] fp32 partials when rows_per_block > 1; the
     * weight cache after both, at p.wcache_off. */
    extern __shared__ __align__(16) unsigned char dyn_smem[];
    float *subrow_partials = reinterpret_cast<float *>(dyn_smem);
    int buf = 0;
    const int tpr = TPR ? TPR : p.tpr, rpb = TPR ? static_tpr_threads(TPR) / TPR : p.rows_per_block;
    const int sub = threadIdx.x / tpr, lane = threadIdx.x - sub * tpr;
    const int C = p.cluster, rank = C > 1 ? (int)cluster_rank() : 0;
    /* Tiles compiled for TPR <= 128 run only in CTAs of several rows
     * (static_tpr_threads; the dispatch checks rows_per_block), never over a
     * cluster: the exchange's sum stays a loop there (row_allreduce). */
    constexpr bool XCHG_SUM = !(TPR && TPR <= 128);
    const int64_t nclusters = gridDim.x / C, cid = blockIdx.x / C;
    const int64_t N = p.cols, groups = (p.rows + rpb - 1) / rpb;
    /* ODD: this CTA's split of its rows (see above); its first row is cid. */
    [[maybe_unused]] int hd = 0, nb = 0, ne = 0, epos = 0;
    [[maybe_unused]] int64_t ecol = -1; /* the column of this lane's edge element, -1: none */
    if constexpr (ODD) {
        const uintptr_t a = (uintptr_t)((const TX *)p.x + cid * p.sx);
        hd = (int)(((16u - (unsigned)(a & 15u)) & 15u) / sizeof(TX));
        nb = (int)((N - hd) / VEC);
        ne = (int)(N - (int64_t)nb * VEC); /* hd + tl */
        if (rank > 0) {
            /* the edge elements are the first CTA's */
        } else if (lane < hd) {
            ecol = lane;
            epos = VEC - hd + lane; /* in the chunk before the body */
        } else if (lane < ne) {
            ecol = hd + (int64_t)nb * VEC + (lane - hd);
            epos = lane - hd; /* in the chunk after the body */
        }
    }
    const int64_t slice = (ODD ? (int64_t)hd : 0) + (int64_t)rank * tpr * EPT;
    const float inv_n = 1.0f / (float)N;
    const bool want_w = p.dw != nullptr, want_b = PLAIN == 2 || (!PLAIN && p.db != nullptr);
    /* DROLL: the residual call's held tile (RES, HOLD) where two stages of
     * its three inputs do not fit beside the weight cache (fp32 131072 in 16
     * x 512 x 16: 192 KiB of stages). One stage: x and dy (and the
     * statistics) are unstaged into registers at the row's start, and the
     * next row's go into the stage right then; dresidual_out, read only in
     * the dx pass, is refilled there vector by vector, as ROLL does. Two
     * commit groups a row: x and dy at its start, dresidual_out at its end.
     * The 16-bit 32-element tile too (262144 in 16 x 512 x 32: two stages of
     * the three inputs, 192 KiB, and the 64 KiB weight cache do not fit),
     * its x and dy held packed (PACK). */
    static_assert(!DROLL || (PLAIN == 3 && (EPT <= 16 || (EPT == 32 && sizeof(TX) == 2)) && !SHIFT && !ODD),
                  "DROLL: the residual call's held tile");
    constexpr int STAGES = SHIFT ? FN_SHIFT_STAGES : DROLL ? 1 : bwd_stages<TX, EPT>();
    /* ROLL: one stage, refilled vector by vector in the dx pass (bwd_stages) */
    constexpr bool ROLL = PIPE && STAGES == 1 && !DROLL;
    static_assert(!ROLL || (PLAIN >= 1 && PLAIN <= 3 && !SHIFT && !ODD), "ROLL: the PLAIN staged tiles");
    /* ROLL with RES (the fp32 residual call at 262144 in 16 x 512 x 32): one
     * stage of the three inputs is 192 KiB, which leaves no room for the 64
     * KiB weight cache: (w + w_off) is read from global memory (L2: 1 MiB
     * for the whole row) on each pass, and dresidual_out is refilled with x
     * and dy. */
    constexpr bool WGLOBAL = ROLL && RES;
    /* HEAD's vectors held in registers (ROLL's common call; see the sum pass) */
    constexpr int KH = ROLL && !RES ? FN_BWD_ROLL_HEAD : 0;
    const bool wcache = (PLAIN && !WGLOBAL) || (!PLAIN && p.wcache);
    /* FOLD (FN_BWD_FOLD) but in the ODD tiles (fp16 LayerNorm's spilled 4
     * bytes with it), the 32-element tiles of 512 threads (H100: LayerNorm
     * bf16 262144 94.5 -> 93.4% of copy; the residual call's DROLL form
     * spilled 48 bytes in fp16) and the general 32-element kernel, which
     * tests hold bit for bit against DROLL's (bwd_res_droll_wide) */
    constexpr bool FOLD = FN_BWD_FOLD && !ODD && !(EPT == 32 && (TPR == 512 || !PLAIN));

    float *wc = reinterpret_cast<float *>(dyn_smem + p.wcache_off);

    bool col_ok[K];
    #pragma unroll
    for (int k = 0; k < K; k++)
        col_ok[k] = ODD ? rank * tpr * K + k * tpr + lane < nb /* body vectors */
                        : (PLAIN && EXACT) || slice + ((int64_t)k * tpr + lane) * VEC < N;

    float dw[K][VEC], db[K][VEC];
    #pragma unroll
    for (int k = 0; k < K; k++)
        #pragma unroll
        for (int j = 0; j < VEC; j++) dw[k][j] = db[k][j] = 0.0f;

    uint4 *stage = reinterpret_cast<uint4 *>(dyn_smem);
    /* The pipeline runs only where x and dy are of dtype TX (the launcher
     * sends other mixes to PIPE = false): one 16-byte chunk per vector each. */
    constexpr int chx = PIPE ? VEC * (int)sizeof(TX) / 16 : 0, chy = chx, chr = RES ? chx : 0;
    const int nthr = TPR ? static_tpr_threads(TPR) : (int)blockDim.x;
    /* SHIFT: per stage, the chunks of x, then dy, then dresidual_out
     * (shift_stage_chunks each); dx's output runs after the statistics, two
     * sets used by even and odd rows in turn (as in the forward). */
    const int run = shift_run_chunks(K * tpr), xst_chunks = SHIFT ? shift_stage_chunks(K, nthr, tpr) : 0;
    /* ODD: after the body's chunks, FN_ODD_EDGE_SLOTS per input (x, dy, and
     * dresidual_out with RES), one per edge lane. */
    const int edge_off = K * (chx + chy + chr) * nthr;
    const int per_stage = SHIFT ? xst_chunks * (2 + (has_dres_out ? 1 : 0))
                                : edge_off + (ODD ? FN_ODD_EDGE_SLOTS * (RES ? 3 : 2) : 0); /* uint4 */
    /* Shared-memory addresses for cp.async, converted once. */
    [[maybe_unused]] const unsigned stage_s = smem_addr(stage);
    /* After the stages: each thread's copy of its row's (rstd, mean) per stage,
     * fetched with the row so that the row's first use does not wait on a
     * dependent global load. */
    float2 *stat_slot = reinterpret_cast<float2 *>(stage + STAGES * per_stage);
    [[maybe_unused]] uint4 *out_runs = reinterpret_cast<uint4 *>(stat_slot + STAGES * nthr);
    /* x and dy (and dresidual_out) are staged with the L2 policy evict_last:
     * the same DRAM bytes in less time (RMSNorm bf16 4096 90.4 -> 93.5% of
     * copy; docs/perf.md, step 57). */
    const uint64_t l2_last = l2_evict_last_policy();
    /* ODD: whether this lane's edge element of row is staged (issue) or read
     * in row_body: the last row's tail is not staged, its chunk would pass
     * the tensor's end (see cp_async16_upto_s). */
    [[maybe_unused]] auto edge_staged = [&](int64_t row) { return lane < hd || row != p.rows - 1; };
    /* dresidual_out's vector k of row into stage st's slot (no commit): the
     * residual tiles' issue below, and DROLL's refill in the dx pass. */
    /* This thread's first stage slot. DROLL's tiles take it through a
     * shuffle (its own lane: the same value) so that ptxas 13.0 cannot split
     * their cp.async addresses into a uniform part and encode them as LDGSTS
     * [R + UR + imm] with registers it never writes, an illegal instruction
     * on the device (as in the forward, norm_fwd.cu; bench/sass_check.sh
     * finds that form): the 16-bit 32-element tile had it on dresidual_out's
     * refill, the fp32 form with idle columns (126000 in 16 x 512 x 16, the
     * "illegal instruction" of step 104) at its stage's first slot. Not the other tiles: the
     * same shuffle there brought the form into the fp32 ODD residual tile. */
    [[maybe_unused]] unsigned my_slot = 0;
    if constexpr (DROLL) my_slot = __shfl_sync(0xffffffffu, stage_s + threadIdx.x * 16u, (int)(threadIdx.x & 31u));
    [[maybe_unused]] auto dres_vec = [&](int64_t row, int st, int k) {
        unsigned sr;
        if constexpr (DROLL) sr = my_slot + (unsigned)(st * per_stage + (K * (chx + chy) + k) * nthr) * 16u;
        else sr = stage_s + (unsigned)(st * per_stage + (K * (chx + chy) + k) * nthr + (int)threadIdx.x) * 16u;
        cp_async16_s_l2(sr, (const TX *)p.dres_out + row * p.sdres_out + slice + ((int64_t)k * tpr + lane) * VEC, l2_last);
    };
    auto issue = [&](int64_t g, int st) {
        const int64_t row = g * rpb + sub;
        if (g < groups && row < p.rows) {
            if (p.rstd) {
                const unsigned ss = smem_addr(&stat_slot[st * nthr + threadIdx.x]);
                cp_async4_s(ss, p.rstd + row);
                if (p.is_ln) cp_async4_s(ss + 4, p.mean + row);
            }
            if constexpr (SHIFT) {
                const unsigned sx = stage_s + (unsigned)(st * per_stage) * 16u, sn = (unsigned)xst_chunks * 16u;
                issue_shifted<K>(sx, nthr, shifted_row(p.x, row, p.sx, slice, N - slice, 2), lane, tpr, row == p.rows - 1);
                issue_shifted<K>(sx + sn, nthr, shifted_row(p.dy, row, p.sdy, slice, N - slice, 2), lane, tpr, row == p.rows - 1);
                if (has_dres_out)
                    issue_shifted<K>(sx + 2 * sn, nthr, shifted_row(p.dres_out, row, p.sdres_out, slice, N - slice, 2),
                                     lane, tpr, row == p.rows - 1);
                cp_async_commit();
                return;
            }
            const unsigned sx = DROLL ? my_slot + (unsigned)(st * per_stage) * 16u
                                      : stage_s + (unsigned)(st * per_stage + (int)threadIdx.x) * 16u,
                           sy = sx + (unsigned)(K * chx * nthr) * 16u;
            const TX *xrow = (const TX *)p.x + row * p.sx + slice + lane * VEC;
            const TX *dyrow = (const TX *)p.dy + row * p.sdy + slice + lane * VEC;
            #pragma unroll
            for (int k = 0; k < K; k++) {
                if (!col_ok[k]) continue;
                cp_async16_s_l2(sx + (unsigned)(k * nthr) * 16u, xrow + k * tpr * VEC, l2_last);
                cp_async16_s_l2(sy + (unsigned)(k * nthr) * 16u, dyrow + k * tpr * VEC, l2_last);
            }
            if constexpr (RES && !DROLL) /* DROLL: droll_vec below */
                #pragma unroll
                for (int k = 0; k < K; k++)
                    if (col_ok[k]) dres_vec(row, st, k);
            if constexpr (ODD)
                if (ecol >= 0) { /* the 16-byte chunk that holds this lane's edge element, of each input */
                    const unsigned se = stage_s + (unsigned)(st * per_stage + edge_off + lane) * 16u;
                    auto edge = [&](unsigned s, const void *t, int64_t pitch) {
                        const char *r = (const char *)((const TX *)t + row * pitch);
                        if (lane < hd) cp_async16_s(s, r + (hd - VEC) * (int)sizeof(TX));
                        else cp_async16_s(s, r + (hd + (int64_t)nb * VEC) * sizeof(TX));
                    };
                    if (edge_staged(row)) {
                        edge(se, p.x, p.sx);
                        edge(se + FN_ODD_EDGE_SLOTS * 16u, p.dy, p.sdy);
                        if constexpr (RES) edge(se + 2 * FN_ODD_EDGE_SLOTS * 16u, p.dres_out, p.sdres_out);
                    }
                }
        }
        cp_async_commit();
    };
    /* DROLL: dresidual_out's vector k of row group g into its slot of the
     * one stage (no commit). */
    [[maybe_unused]] auto droll_vec = [&](int64_t g, int k) {
        const int64_t row = g * rpb + sub;
        if (g < groups && row < p.rows && col_ok[k]) dres_vec(row, 0, k);
    };
    [[maybe_unused]] auto droll_row = [&](int64_t g) {
        #pragma unroll
        for (int k = 0; k < K; k++) droll_vec(g, k);
    };
    /* The first rows' loads go out before the weight cache is filled (their
     * latencies overlap). */
    if constexpr (ROLL) {
        issue(cid, 0);
    } else if constexpr (DROLL) {
        issue(cid, 0);
        droll_row(cid);
        cp_async_commit();
    } else if constexpr (PIPE)
        #pragma unroll
        for (int st = 0; st < STAGES - 1; st++) issue(cid + st * nclusters, st);
    /* Over a cluster (one row a CTA of whole warps: the backend plans no
     * other), the row sums meet by the exchange (common.cuh). */
    cluster_xchg_init(sm, C);
    if (wcache) {
        fill_column_cache<VEC>(wc, p.w, p.dt_w, p.w_off, slice, tpr, tpr * EPT, N);
        __syncthreads();
    }
    /* ODD: the edge element's (w + w_off) (PLAIN: the weight is there), and
     * its dweight and dbias sums. */
    [[maybe_unused]] float ew = 0.0f, edw = 0.0f, edb = 0.0f;
    if constexpr (ODD)
        if (ecol >= 0) ew = load_any(p.w, p.dt_w, ecol) + p.w_off;

    /* g = dy * (w + w_off) for vector k (dy alone without a weight). */
    auto weight_of = [&](int k, float (&w)[VEC]) {
        const int c = (k * tpr + lane) * VEC;
        if (wcache) {
            read_cache<VEC>(wc, k, lane, tpr, w);
        } else if (p.w && col_ok[k]) {
            load_dyn<TX, VEC>(p.w, p.dt_w, slice + c, w);
            #pragma unroll
            for (int j = 0; j < VEC; j++) w[j] += p.w_off;
        } else {
            #pragma unroll
            for (int j = 0; j < VEC; j++) w[j] = 1.0f;
        }
    };

    /* One row group; LN is a compile-time tag so that RMSNorm carries none of
     * LayerNorm's mean terms. */
    auto row_body = [&](auto ln_tag, int64_t g, int it) {
        constexpr bool LN = decltype(ln_tag)::value;
        const int64_t row = g * rpb + sub;
        const bool row_ok = row < p.rows;
        /* x and dy held in registers for the whole row: loaded there without
         * the pipeline; with it, unstaged once (HOLD) instead of once per pass. */
        [[maybe_unused]] float xr[(PIPE && !HOLD) || PACK ? 1 : K][VEC], dyr[(PIPE && !HOLD) || PACK ? 1 : K][VEC];
        [[maybe_unused]] uint4 xpk[PACK ? K : 1], dypk[PACK ? K : 1];
        const int cur = it % STAGES;
        [[maybe_unused]] const uint4 *sx = stage + cur * per_stage + threadIdx.x;
        [[maybe_unused]] const uint4 *sy = sx + K * chx * nthr;
        [[maybe_unused]] const uint4 *sr = sy + K * chy * nthr; /* RES: dresidual_out */
        /* SHIFT: the row's stages, output run and byte offsets. */
        [[maybe_unused]] const uint4 *xst = stage + cur * per_stage, *dyst = xst + xst_chunks,
                                     *drst = dyst + xst_chunks;
        [[maybe_unused]] uint4 *dxrun = out_runs + ((it & 1) * rpb + sub) * run;
        [[maybe_unused]] int xs = 0, dys = 0, drs = 0;
        if constexpr (SHIFT) {
            xs = shifted_row(p.x, row, p.sx, slice, 0, 2).s;
            dys = shifted_row(p.dy, row, p.sdy, slice, 0, 2).s;
            if (has_dres_out) drs = shifted_row(p.dres_out, row, p.sdres_out, slice, 0, 2).s;
        }
        /* SHIFT: zeros for the columns of vector k past the row's end. */
        [[maybe_unused]] auto clip = [&](int k, float (&v)[VEC]) {
            clip_past<VEC>(slice + ((int64_t)k * tpr + lane) * VEC, N, v);
        };
        /* x and dy of staged vector k (zeros where the row or column is out of
         * range). SHIFT: every lane of the warp must call it (a shuffle). */
        [[maybe_unused]] auto unstage = [&](int k, float (&x)[VEC], float (&dy)[VEC]) {
            if constexpr (SHIFT) {
                unstage_shifted<TX, VEC, K>(xst, k, nthr, tpr, xs, x);
                unstage_shifted<TX, VEC, K>(dyst, k, nthr, tpr, dys, dy);
                if (row_ok && col_ok[k]) {
                    clip(k, x);
                    clip(k, dy);
                    return;
                }
            } else if (row_ok && col_ok[k]) {
                unstage_vector<TX, VEC>(sx + k * chx * nthr, nthr, dtype_of<TX>::value, x);
                unstage_vector<TX, VEC>(sy + k * chy * nthr, nthr, dtype_of<TX>::value, dy);
                return;
            }
            #pragma unroll
            for (int j = 0; j < VEC; j++) x[j] = dy[j] = 0.0f;
        };
        /* ODD: this lane's edge element of x, dy (and dresidual_out); zeros where it has none. */
        [[maybe_unused]] float ex = 0.0f, edy = 0.0f, edr = 0.0f;
        [[maybe_unused]] const bool eok = ODD && row_ok && ecol >= 0;
        if constexpr (PIPE) {
            if constexpr (ROLL) {
                cp_async_wait<0>(); /* this row, issued as the last one drained */
            } else if constexpr (DROLL) {
                cp_async_wait<1>(); /* this row's x and dy; its dresidual_out (the last group) may be in flight */
            } else {
                issue(g + (STAGES - 1) * nclusters, (it + STAGES - 1) % STAGES);
                cp_async_wait<STAGES - 1>();
            }
            if constexpr (PACK) {
                #pragma unroll
                for (int k = 0; k < K; k++) {
                    const bool ok = row_ok && col_ok[k];
                    xpk[k] = ok ? sx[k * chx * nthr] : make_uint4(0, 0, 0, 0);
                    dypk[k] = ok ? sy[k * chy * nthr] : make_uint4(0, 0, 0, 0);
                }
            } else if constexpr (HOLD) {
                #pragma unroll
                for (int k = 0; k < K; k++) unstage(k, xr[k], dyr[k]);
            }
            if constexpr (ODD)
                if (eok) {
                    if (!edge_staged(row)) { /* read here */
                        ex = to_f32(((const TX *)p.x)[row * p.sx + ecol]);
                        edy = to_f32(((const TX *)p.dy)[row * p.sdy + ecol]);
                        if constexpr (RES) edr = to_f32(((const TX *)p.dres_out)[row * p.sdres_out + ecol]);
                    } else {
                        const TX *es = reinterpret_cast<const TX *>(stage + cur * per_stage + edge_off + lane) + epos;
                        constexpr int slot = FN_ODD_EDGE_SLOTS * 16 / (int)sizeof(TX); /* elements */
                        ex = to_f32(es[0]);
                        edy = to_f32(es[slot]);
                        if constexpr (RES) edr = to_f32(es[2 * slot]);
                    }
                }
        } else {
            #pragma unroll
            for (int k = 0; k < K; k++) {
                const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
                if (row_ok && col_ok[k]) {
                    load_dyn<TX, VEC>(p.x, p.dt_x, row * p.sx + col, xr[k]);
                    load_dyn<TX, VEC>(p.dy, p.dt_dy, row * p.sdy + col, dyr[k]);
                } else {
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) xr[k][j] = dyr[k][j] = 0.0f;
                }
            }
        }
        /* x and dy of vector k of this row (zeros where the row or column is out of range). */
        auto fetch = [&](int k, float (&x)[VEC], float (&dy)[VEC]) {
            if constexpr (PACK) {
                unpack_raw<TX, VEC>(xpk[k < K ? k : 0], x);
                unpack_raw<TX, VEC>(dypk[k < K ? k : 0], dy);
            } else if constexpr (PIPE && !HOLD) {
                unstage(k, x, dy);
            } else {
                #pragma unroll
                for (int j = 0; j < VEC; j++) {
                    x[j] = xr[k < K ? k : 0][j];
                    dy[j] = dyr[k < K ? k : 0][j];
                }
            }
        };

        /* DROLL: this row's statistics out of the stage, then the next row's
         * x, dy and statistics in (each thread its own chunks and slot, read
         * into registers above: no barrier). */
        [[maybe_unused]] float2 sv_held = make_float2(0.0f, 0.0f);
        if constexpr (DROLL) {
            if (p.rstd && row_ok) sv_held = stat_slot[threadIdx.x];
            issue(g + nclusters, 0);
        }
        float mean = 0.0f, rstd = 0.0f;
        if (p.rstd) {
            if (row_ok) {
                if constexpr (PIPE) {
                    const float2 sv = DROLL ? sv_held : stat_slot[cur * nthr + threadIdx.x];
                    rstd = sv.x;
                    if constexpr (LN) mean = sv.y;
                } else {
                    rstd = p.rstd[row];
                    if constexpr (LN) mean = p.mean[row];
                }
            }
        } else {
            if constexpr (LN) {
                float s[1] = {0.0f};
                #pragma unroll
                for (int k = 0; k < K; k++) {
                    float x[VEC], dy[VEC];
                    fetch(k, x, dy);
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) s[0] += x[j];
                }
                if constexpr (ODD) s[0] += ex;
                row_allreduce<1, true, XCHG_SUM>(s, sm, buf, tpr, sub, C);
                mean = s[0] / (float)N;
            }
            float q[1] = {0.0f};
            #pragma unroll
            for (int k = 0; k < K; k++) {
                float x[VEC], dy[VEC];
                if constexpr (SHIFT) fetch(k, x, dy); /* every lane */
                if (!(row_ok && col_ok[k])) continue;
                if constexpr (!SHIFT) fetch(k, x, dy);
                #pragma unroll
                for (int j = 0; j < VEC; j++) x[j] -= mean;
                if constexpr (SHIFT) clip(k, x);
                #pragma unroll
                for (int j = 0; j < VEC; j++) q[0] += x[j] * x[j];
            }
            if constexpr (ODD)
                if (eok) q[0] += (ex - mean) * (ex - mean);
            row_allreduce<1, true, XCHG_SUM>(q, sm, buf, tpr, sub, C);
            rstd = rstd_of(q[0], (float)N, p.eps);
        }
        /* x_hat = (x - mean) * rstd; for RMSNorm x * rstd. */
        auto xhat = [&](float x) { return LN ? (x - mean) * rstd : x * rstd; };
        /* FOLD: x centred (LayerNorm; RMSNorm's x as it is) */
        auto xcen = [&](float x) { return LN ? x - mean : x; };
        /* One element's share of the row sums: xs * g and g, g = dy * w, with
         * xs its x_hat (FOLD: x - mean, the sum scaled by rstd after the
         * reduction) */
        auto sum_g = [&](float (&acc)[2], float xs, float gv) {
            acc[0] = fmaf(xs, gv, acc[0]);
            if constexpr (LN) acc[1] += gv;
        };
        auto sum_into = [&](float (&acc)[2], float x, float dy, float w) {
            const float gv = dy * w;
            sum_g(acc, FOLD ? xcen(x) : xhat(x), gv);
        };
        /* FOLD: x and dy read from registers (HOLD's unpacked row, or loaded
         * without the pipeline): the sum pass leaves x - mean there for the
         * dx pass. */
        constexpr bool XREG = FOLD && !PACK && !(PIPE && !HOLD);

        /* ROLL: the next row's vector k (with k = 0 its statistics) into the
         * stage once this thread has read and written vector k of this row:
         * each thread stages and reads its own chunks, and its store of dx
         * used what it read, so no barrier guards the slot. */
        [[maybe_unused]] auto roll = [&](int k) {
            const int64_t gn = g + nclusters, rn = gn * rpb + sub;
            if (gn >= groups || rn >= p.rows) return;
            if (k == 0 && p.rstd) {
                const unsigned ss = smem_addr(&stat_slot[threadIdx.x]);
                cp_async4_s(ss, p.rstd + rn);
                if (p.is_ln) cp_async4_s(ss + 4, p.mean + rn);
            }
            if (!col_ok[k]) return;
            const unsigned so = stage_s + (unsigned)(k * nthr + (int)threadIdx.x) * 16u;
            const int64_t c = slice + ((int64_t)k * tpr + lane) * VEC;
            cp_async16_s_l2(so, (const TX *)p.x + rn * p.sx + c, l2_last);
            cp_async16_s_l2(so + (unsigned)(K * chx * nthr) * 16u, (const TX *)p.dy + rn * p.sdy + c, l2_last);
            if constexpr (RES) dres_vec(rn, 0, k);
        };

        /* HEAD (ROLL's common call): the first KH vectors of x and dy stay in
         * registers from the sum pass, and the next row's go into their
         * slots before the exchange, so that some loads are in flight while
         * the row's sums cross the cluster (ncu, session 36: each row waited
         * on its whole stage, 27% of the stall samples). */
        [[maybe_unused]] float xhd[KH > 0 ? KH : 1][VEC], dyhd[KH > 0 ? KH : 1][VEC];
        float s[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int k = 0; k < K; k++) {
            float x[VEC], dy[VEC], w[VEC];
            fetch(k, x, dy);
            if constexpr (XREG && LN)
                #pragma unroll
                for (int j = 0; j < VEC; j++) xr[k][j] = x[j] = xcen(x[j]); /* centred once, for both passes */
            if (k < KH)
                #pragma unroll
                for (int j = 0; j < VEC; j++) {
                    xhd[k < KH ? k : 0][j] = x[j];
                    dyhd[k < KH ? k : 0][j] = dy[j];
                }
            weight_of(k, w);
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                if constexpr (XREG && LN) sum_g(s, x[j], dy[j] * w[j]); /* x centred above */
                else sum_into(s, x[j], dy[j], w[j]);
            }
        }
        if constexpr (KH > 0)
            #pragma unroll
            for (int k = 0; k < KH; k++) roll(k);
        if constexpr (ODD)
            if (eok) sum_into(s, ex, edy, ew);
        row_allreduce<LN ? 2 : 1, true, XCHG_SUM>(*reinterpret_cast<float(*)[LN ? 2 : 1]>(s), sm, buf, tpr, sub, C);
        /* dx = rstd * (g - c2 - x_hat * c1) = g * rstd - x_hat * (c1 * rstd) - c2 * rstd
         * (FOLD: s[0] is sum((x - mean) * g), c1 = s[0] * rstd / N; the
         * element's (x - mean) takes c1 * rstd^2 = c1rr) */
        const float c1r = s[0] * inv_n * rstd, c2r = LN ? s[1] * inv_n * rstd : 0.0f;
        const float c1rr = c1r * rstd * rstd;
        auto dx_of = [&](float xh, float dy, float w) { return fmaf(-xh, c1r, fmaf(dy * w, rstd, -c2r)); };
        /* FOLD: dx and dweight's term of one element from x - mean (xc) and dy */
        auto fold_of = [&](float xc, float dy, float w, float &dwacc) {
            const float dyr = dy * rstd;
            dwacc = fmaf(dyr, xc, dwacc);
            return fmaf(dyr, w, fmaf(-xc, c1rr, -c2r));
        };
        /* DROLL: this row's dresidual_out (the group before the next row's x and dy) */
        if constexpr (DROLL) cp_async_wait<1>();
        #pragma unroll
        for (int k = 0; k < K; k++) {
            float x[VEC], dy[VEC], w[VEC], dres[VEC], dx[VEC];
            if constexpr (SHIFT) { /* every lane (shuffles), then masked */
                fetch(k, x, dy);
                if (has_dres_out) unstage_shifted<TX, VEC, K>(drst, k, nthr, tpr, drs, dres);
            }
            if (!(row_ok && col_ok[k])) {
                if constexpr (ROLL)
                    if (k >= KH) roll(k);
                if constexpr (DROLL) droll_vec(g + nclusters, k);
                continue;
            }
            const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
            if (k < KH) {
                #pragma unroll
                for (int j = 0; j < VEC; j++) {
                    x[j] = xhd[k < KH ? k : 0][j];
                    dy[j] = dyhd[k < KH ? k : 0][j];
                }
            } else if constexpr (!SHIFT) {
                fetch(k, x, dy);
            }
            weight_of(k, w);
            if constexpr (!SHIFT && RES) unstage_vector<TX, VEC>(sr + k * chr * nthr, nthr, dtype_of<TX>::value, dres);
            else if (!SHIFT && has_dres_out) load_dyn<TX, VEC>(p.dres_out, p.dt_dres_out, row * p.sdres_out + col, dres);
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                float v;
                [[maybe_unused]] float xh = 0.0f; /* !FOLD: dweight's term below */
                if constexpr (FOLD) {
                    v = fold_of(XREG ? x[j] : xcen(x[j]), dy[j], w[j], dw[k][j]); /* XREG: centred above */
                } else {
                    xh = xhat(x[j]);
                    v = dx_of(xh, dy[j], w[j]);
                }
                if (has_dres_out) v += dres[j];
                dx[j] = v;
                if constexpr (!FOLD) dw[k][j] = fmaf(dy[j], xh, dw[k][j]);
            }
            if (want_b)
                #pragma unroll
                for (int j = 0; j < VEC; j++) db[k][j] += dy[j];
            if constexpr (SHIFT) {
                put_shifted<TX, VEC>(dxrun, k * tpr + lane, dx);
                continue;
            }
            store_vec<TX, VEC>((TX *)p.dx, row * p.sdx + col, dx);
            if constexpr (RES) {
                if (has_dres) store_vec<TX, VEC>((TX *)p.dres, row * p.sdres + col, dx);
            } else if (has_dres) store_dyn<TX, VEC>(p.dres, p.dt_dres, row * p.sdres + col, dx);
            if constexpr (ROLL)
                if (k >= KH) roll(k);
            if constexpr (DROLL) droll_vec(g + nclusters, k); /* its slot read into dres above */
        }
        if constexpr (ROLL || DROLL) cp_async_commit();
        if constexpr (ODD)
            if (eok) {
                const float xh = xhat(ex);
                float v = dx_of(xh, edy, ew);
                if constexpr (RES) v += edr;
                const TX o = from_f32<TX>(v);
                ((TX *)p.dx)[row * p.sdx + ecol] = o;
                if constexpr (RES)
                    if (has_dres) ((TX *)p.dres)[row * p.sdres + ecol] = o;
                edw = fmaf(edy, xh, edw);
                if (want_b) edb += edy;
            }
        if constexpr (SHIFT) {
            /* The output run is complete: store its aligned chunks to dx (and dresidual). */
            __syncthreads();
            if (row_ok) {
                const int64_t len = N - slice < tpr * EPT ? N - slice : tpr * EPT;
                store_shifted_run<TX, K>(dxrun, shifted_row(p.dx, row, p.sdx, slice, len, 2), lane, tpr);
                if (has_dres)
                    store_shifted_run<TX, K>(dxrun, shifted_row(p.dres, row, p.sdres, slice, len, 2), lane, tpr);
            }
        }
    };

    int it = 0;
    if (p.is_ln)
        for (int64_t g = cid; g < groups; g += nclusters, it++) row_body(std::true_type{}, g, it);
    else
        for (int64_t g = cid; g < groups; g += nclusters, it++) row_body(std::false_type{}, g, it);

    if constexpr (PIPE) cp_async_wait<0>();
    /* The rows are done: the dweight finalize may launch (it waits for this
     * grid's end before it reads the partial rows). */
    launch_dependents();
    /* One partial row per cluster: first the rows of this CTA are summed in
     * fixed order (sub 0, 1, ...) through shared memory. */
    if (want_w) write_partial_row<VEC, EPT>(dw, p.ws_dw, p, subrow_partials, sub, lane, slice, cid, col_ok);
    if (want_b) write_partial_row<VEC, EPT>(db, p.ws_db, p, subrow_partials, sub, lane, slice, cid, col_ok);
    if constexpr (ODD)
        if (ecol >= 0) { /* the edge columns' sums (one row per CTA: no subrows) */
            if (p.atomic) {
                if (want_w) atomicAdd(p.ws_dw + ecol, edw);
                if (want_b) atomicAdd(p.ws_db + ecol, edb);
            } else {
                if (want_w) p.ws_dw[cid * N + ecol] = edw;
                if (want_b) p.ws_db[cid * N + ecol] = edb;
            }
        }
    cluster_exit_barrier(C);
}

/* Any N, any alignment. One CTA per row at a time (grid-stride), the row read
 * again for each pass (from L2 when the rows in flight fit it), split at x's
 * 16-byte boundary as in the forward's two-pass kernel (split_row). The
 * dweight/dbias partials of the block accumulate in shared memory (p.smem_acc;
 * the partial row is written once at the end). Rows whose partials do not fit
 * there take the column split instead, whose first pass is this kernel with
 * p.row_stats set: it writes each row's statistics and accumulates nothing.
 * Which thread owns a column changes with each row's alignment; the barriers
 * of the row reductions order one row's updates before the next row's. */
/* The two-pass backward's dweight/dbias partials in shared memory hold
 * column c at (c % VEC) * stride + c / VEC, stride = ceil(N / VEC) made odd:
 * a warp accumulating element j of its vectors (columns VEC apart) then
 * touches consecutive words, where column order put them VEC words apart
 * (VEC-way bank conflicts on every read-modify-write, two per element with
 * dbias). Each array takes VEC * stride floats, at most 2 * VEC - 1 more than N. */
template <int VEC> __host__ __device__ inline int64_t two_pass_acc_stride(int64_t n) { return ((n + VEC - 1) / VEC) | 1; }

template <typename TX, int VEC>
__global__ void __launch_bounds__(512, 2) norm_bwd_two_pass(const fn_bwd_params p)
{
    __shared__ RowReduceSmem sm;
    extern __shared__ __align__(16) unsigned char dyn_smem[];
    int buf = 0;
    const int64_t N = p.cols;
    const float inv_n = 1.0f / (float)N;
    const int xb = dtype_bytes(p.dt_x), yb = dtype_bytes(p.dt_dy), wb = dtype_bytes(p.dt_w),
              rb = dtype_bytes(p.dt_dres_out), db_ = dtype_bytes(p.dt_dres), dxb = (int)sizeof(TX);
    float *acc_w = nullptr, *acc_b = nullptr;
    const int64_t acc_stride = two_pass_acc_stride<VEC>(N), acc_len = VEC * acc_stride;
    auto at = [&](int64_t col) { return (col % VEC) * acc_stride + col / VEC; }; /* see two_pass_acc_stride */
    if (p.smem_acc) {
        acc_w = p.dw ? reinterpret_cast<float *>(dyn_smem) : nullptr;
        acc_b = p.db ? reinterpret_cast<float *>(dyn_smem) + (p.dw ? acc_len : 0) : nullptr;
        for (int64_t i = threadIdx.x; i < acc_len; i += blockDim.x) {
            if (acc_w) acc_w[i] = 0.0f;
            if (acc_b) acc_b[i] = 0.0f;
        }
        __syncthreads();
    }
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        const char *xrow = (const char *)p.x + row * p.sx * xb;
        const RowSplit rs = split_row<VEC>(xrow, xb, N);
        const int64_t hd = rs.head;
        const bool vdy = vec_at((const char *)p.dy + row * p.sdy * yb, hd, yb);
        const bool vw = p.w && vec_at(p.w, hd, wb);
        const bool vr = p.dres_out && vec_at((const char *)p.dres_out + row * p.sdres_out * rb, hd, rb);
        const bool vdx = vec_at((const char *)p.dx + row * p.sdx * dxb, hd, dxb);
        const bool vdr = p.dres && vec_at((const char *)p.dres + row * p.sdres * db_, hd, db_);
        float mean = 0.0f, rstd;
        if (p.rstd) {
            rstd = p.rstd[row];
            if (p.is_ln) mean = p.mean[row];
        } else {
            if (p.is_ln) {
                float s[1] = {0.0f};
                for_each_column<VEC>(rs, N, [&](int64_t col, auto width) {
                    constexpr int V = decltype(width)::value;
                    float v[V];
                    load_flex<TX, V>(p.x, p.dt_x, row * p.sx + col, true, v);
                    #pragma unroll
                    for (int j = 0; j < V; j++) s[0] += v[j];
                });
                row_allreduce<1>(s, sm, buf, blockDim.x, 0, 1);
                mean = s[0] / (float)N;
            }
            float q[1] = {0.0f};
            for_each_column<VEC>(rs, N, [&](int64_t col, auto width) {
                constexpr int V = decltype(width)::value;
                float v[V];
                load_flex<TX, V>(p.x, p.dt_x, row * p.sx + col, true, v);
                #pragma unroll
                for (int j = 0; j < V; j++) q[0] += (v[j] - mean) * (v[j] - mean);
            });
            row_allreduce<1>(q, sm, buf, blockDim.x, 0, 1);
            rstd = rstd_of(q[0], (float)N, p.eps);
        }
        /* x, dy and g = dy * (w + w_off) of a column group. */
        auto load_xg = [&](int64_t col, auto width, float (&v)[decltype(width)::value],
                           float (&dy)[decltype(width)::value], float (&g)[decltype(width)::value]) {
            constexpr int V = decltype(width)::value;
            load_flex<TX, V>(p.x, p.dt_x, row * p.sx + col, true, v);
            load_flex<TX, V>(p.dy, p.dt_dy, row * p.sdy + col, vdy, dy);
            if (p.w) {
                float w[V];
                load_flex<TX, V>(p.w, p.dt_w, col, vw, w);
                #pragma unroll
                for (int j = 0; j < V; j++) g[j] = dy[j] * (w[j] + p.w_off);
            } else {
                #pragma unroll
                for (int j = 0; j < V; j++) g[j] = dy[j];
            }
        };
        float s[2] = {0.0f, 0.0f};
        for_each_column<VEC>(rs, N, [&](int64_t col, auto width) {
            constexpr int V = decltype(width)::value;
            float v[V], dy[V], g[V];
            load_xg(col, width, v, dy, g);
            #pragma unroll
            for (int j = 0; j < V; j++) {
                s[0] += (v[j] - mean) * rstd * g[j];
                s[1] += g[j];
            }
        });
        row_allreduce<2>(s, sm, buf, blockDim.x, 0, 1);
        const float c1 = s[0] * inv_n, c2 = p.is_ln ? s[1] * inv_n : 0.0f;
        if (p.row_stats) { /* column split, pass 1: the row's statistics only */
            if (threadIdx.x == 0)
                reinterpret_cast<float4 *>(p.row_stats)[row] = make_float4(rstd, mean, c1, c2);
            continue;
        }
        for_each_column<VEC>(rs, N, [&](int64_t col, auto width) {
            constexpr int V = decltype(width)::value;
            float v[V], dy[V], g[V], dres[V], dx[V];
            load_xg(col, width, v, dy, g);
            if (p.dres_out) load_flex<TX, V>(p.dres_out, p.dt_dres_out, row * p.sdres_out + col, vr, dres);
            #pragma unroll
            for (int j = 0; j < V; j++) {
                const float xh = (v[j] - mean) * rstd;
                float d = rstd * (g[j] - c2 - xh * c1);
                if (p.dres_out) d += dres[j];
                dx[j] = d;
                if (acc_w) acc_w[at(col + j)] += dy[j] * xh;
                if (acc_b) acc_b[at(col + j)] += dy[j];
            }
            store_flex<TX, V>(p.dx, (int)dtype_of<TX>::value, row * p.sdx + col, vdx, dx);
            if (p.dres) store_flex<TX, V>(p.dres, p.dt_dres, row * p.sdres + col, vdr, dx);
        });
    }
    if (p.smem_acc) { /* the block's partial row, or its atomic contribution */
        __syncthreads();
        for (int64_t col = threadIdx.x; col < N; col += blockDim.x) {
            if (p.atomic) {
                if (acc_w) atomicAdd(p.ws_dw + col, acc_w[at(col)]);
                if (acc_b) atomicAdd(p.ws_db + col, acc_b[at(col)]);
            } else {
                if (acc_w) p.ws_dw[(int64_t)blockIdx.x * N + col] = acc_w[at(col)];
                if (acc_b) p.ws_db[(int64_t)blockIdx.x * N + col] = acc_b[at(col)];
            }
        }
    }
}

/* Column split, pass 2 (any N, any alignment): CTA (i, j) owns columns
 * [i*256*VEC, (i+1)*256*VEC) of the rows of group j, a thread VEC columns.
 * With the row statistics of pass 1, each row is one read of x and dy and
 * one write of dx; the thread's (w + w_off) and its dweight/dbias sums stay in
 * registers over the whole group, and one partial row per group goes to the
 * workspace (or is atomically added). Vectors where each row's tensor is
 * 16-byte aligned at the thread's column, single elements otherwise. */
template <typename TX, int VEC>
__global__ void __launch_bounds__(FN_COLUMNS_THREADS, sizeof(TX) == 2 ? 3 : 4) norm_bwd_columns(const fn_bwd_params p)
{
    const int64_t N = p.cols;
    const int64_t col = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (col >= N) return; /* no barrier below: idle threads may leave */
    const int valid = N - col < VEC ? (int)(N - col) : VEC;
    const int64_t r0 = (int64_t)blockIdx.y * p.rows_per_group;
    const int64_t r1 = r0 + p.rows_per_group < p.rows ? r0 + p.rows_per_group : p.rows;
    const int xb = dtype_bytes(p.dt_x), yb = dtype_bytes(p.dt_dy), rb = dtype_bytes(p.dt_dres_out),
              drb = dtype_bytes(p.dt_dres), dxb = (int)sizeof(TX);
    /* V elements from element i: a vector when whole and aligned, else one at a time. */
    auto load = [&](const void *base, int dt, int bytes, int64_t i, float (&v)[VEC]) {
        if (valid == VEC) {
            load_flex<TX, VEC>(base, dt, i, vec_at(base, i, bytes), v);
        } else {
            #pragma unroll
            for (int j = 0; j < VEC; j++) v[j] = j < valid ? load_any(base, dt, i + j) : 0.0f;
        }
    };
    auto store = [&](void *base, int dt, int bytes, int64_t i, const float (&v)[VEC]) {
        if (valid == VEC) {
            store_flex<TX, VEC>(base, dt, i, vec_at(base, i, bytes), v);
        } else {
            #pragma unroll
            for (int j = 0; j < VEC; j++)
                if (j < valid) store_any(base, dt, i + j, v[j]);
        }
    };
    float w[VEC], dw[VEC], db[VEC];
    #pragma unroll
    for (int j = 0; j < VEC; j++) {
        w[j] = p.w && j < valid ? load_any(p.w, p.dt_w, col + j) + p.w_off : 1.0f;
        dw[j] = db[j] = 0.0f;
    }
    const float4 *stats = reinterpret_cast<const float4 *>(p.row_stats);
    #pragma unroll 2
    for (int64_t row = r0; row < r1; row++) {
        const float4 st = stats[row]; /* rstd, mean, c1, c2 */
        float x[VEC], dy[VEC], dres[VEC], dx[VEC];
        load(p.x, p.dt_x, xb, row * p.sx + col, x);
        load(p.dy, p.dt_dy, yb, row * p.sdy + col, dy);
        if (p.dres_out) load(p.dres_out, p.dt_dres_out, rb, row * p.sdres_out + col, dres);
        #pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float xh = (x[j] - st.y) * st.x;
            float d = st.x * (dy[j] * w[j] - st.w - xh * st.z);
            if (p.dres_out) d += dres[j];
            dx[j] = d;
            dw[j] = fmaf(dy[j], xh, dw[j]);
            db[j] += dy[j];
        }
        store(p.dx, (int)dtype_of<TX>::value, dxb, row * p.sdx + col, dx);
        if (p.dres) store(p.dres, p.dt_dres, drb, row * p.sdres + col, dx);
    }
    #pragma unroll
    for (int j = 0; j < VEC; j++) {
        if (j >= valid) break;
        if (p.atomic) {
            if (p.dw) atomicAdd(p.ws_dw + col + j, dw[j]);
            if (p.db) atomicAdd(p.ws_db + col + j, db[j]);
        } else {
            if (p.dw) p.ws_dw[(int64_t)blockIdx.y * N + col + j] = dw[j];
            if (p.db) p.ws_db[(int64_t)blockIdx.y * N + col + j] = db[j];
        }
    }
}

/* ---- launchers ------------------------------------------------------------ */

/* One stage of x and dy (and dresidual_out: inputs = 3), 16-byte chunks
 * per thread (see the kernel). */
template <int VEC, int EPT> static size_t bwd_stage_chunk_bytes(int threads, int inputs)
{
    return (size_t)(EPT / VEC) * inputs * threads * 16;
}

/* bwd_stages such stages. */
template <typename TX, int VEC, int EPT> static size_t bwd_stage_bytes(int threads, int inputs)
{
    return bwd_stages<TX, EPT>() * bwd_stage_chunk_bytes<VEC, EPT>(threads, inputs);
}

/* After the stages: each thread's (rstd, mean) per stage (fn_bwd_wide_fits sizes the wide tile with it too). */
static size_t bwd_stat_bytes(int threads, int stages = FN_STAGES) { return stages * (size_t)threads * 8; }

/* One stage (ROLL, DROLL) of `inputs` inputs and its statistics: the tile's
 * shared memory before any weight cache, which launch_rows launches with and
 * fn_bwd_wide_fits plans by (one formula for both). */
template <int VEC, int EPT> static size_t bwd_one_stage_bytes(int threads, int inputs)
{
    return bwd_stage_chunk_bytes<VEC, EPT>(threads, inputs) + bwd_stat_bytes(threads, 1);
}

/* The common call, for which the kernel drops its feature branches (PLAIN):
 * a weight, no dresidual_out, no dresidual; 2 when dbias is wanted (a
 * variant of its own: a run-time dbias test kept the general kernel's
 * registers), 1 when not, 0 for any other call. The ODD tile takes it as
 * it is (it caches the weight itself, bwd_odd_plain). */
static int bwd_plain_call(const fn_bwd_params &q)
{
    if (!(q.w && !q.dres_out && !q.dres)) return 0;
    return q.db ? 2 : 1;
}

/* The common call with the weight cached (the pipeline is checked by the
 * caller, the exact tile by launch_plain). The backend's occupancy cache
 * keys on the same features (occ_variant). */
static int bwd_is_plain(const fn_bwd_params &q) { return q.wcache ? bwd_plain_call(q) : 0; }

/* A PLAIN variant (pipelined, PLAIN = 1..3): with column checks (EXACT =
 * false) where the row does not fill the tile; else with EPT 16 (the planner's choice for 16-bit
 * rows from N = 1024 up) and tpr in {64, 128, 256, 512} in a CTA of
 * max(tpr, 256) threads, or EPT 32 (from N = 8193) and tpr 512 (N = 16384,
 * and 32768 and 65536 in clusters), the one compiled for that tpr. */
template <typename TX, int VEC, int EPT, int PLAIN>
static cudaError_t launch_plain(const fn_bwd_params &q, int grid, int threads, size_t smem, cudaStream_t stream,
                                int *active)
{
    if (q.cols != (int64_t)q.cluster * q.tpr * EPT) { /* the tile has idle columns: the column checks stay */
        auto checked = [&](auto tpr) {
            return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, PLAIN, decltype(tpr)::value, false>, q,
                                   grid, threads, smem, q.cluster, stream, active);
        };
        auto run_time_tpr = [&] { return checked(std::integral_constant<int, 0>{}); };
        /* Rows of 2561..3072 16-bit columns: compiled for tpr 192, three
         * CTAs per SM (bwd_lb_three); the residual's call lost there. */
        if constexpr (EPT == 16 && sizeof(TX) == 2 && PLAIN != 3)
            if (q.cluster == 1 && threads == q.tpr) return with_static_tpr<192>(q.tpr, checked, run_time_tpr);
        return run_time_tpr();
    }
    auto launch = [&](auto tpr) { /* TPR = 0: the run-time tpr */
        return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, PLAIN, decltype(tpr)::value>, q, grid,
                               threads, smem, q.cluster, stream, active);
    };
    auto run_time_tpr = [&] { return launch(std::integral_constant<int, 0>{}); };
    if constexpr ((EPT == 16 || EPT == 32) && sizeof(TX) == 2)
        if (threads == static_tpr_threads(q.tpr) && q.rows_per_block == threads / q.tpr) {
            /* tpr 16 and 32 compiled for LayerNorm only (bwd_lb_three256) */
            if constexpr (EPT == 16 && PLAIN == 2)
                return with_static_tpr<16, 32, 64, 128, 256, 512>(q.tpr, launch, run_time_tpr);
            else if constexpr (EPT == 16) return with_static_tpr<64, 128, 256, 512>(q.tpr, launch, run_time_tpr);
            else return with_static_tpr<512>(q.tpr, launch, run_time_tpr);
        }
    return run_time_tpr();
}

/* The pre-norm residual's backward (PLAIN = 3): dresidual_out in, and
 * dresidual out or not (the Python package asks for none when dresidual would
 * be dx itself), both of the activation dtype, with the weight, no dbias; the
 * weight cache is checked by the caller. */
static bool bwd_is_plain_residual(const fn_bwd_params &q, int dt)
{
    return q.w && !q.db && q.dres_out && q.dt_x == dt && q.dt_dy == dt && q.dt_dres_out == dt &&
           (!q.dres || q.dt_dres == dt);
}

/* Shared memory of the SHIFT kernel (16-bit rows, 8-element vectors):
 * FN_SHIFT_STAGES stages of the chunks of x, dy (and dresidual_out) and of
 * the statistics, two sets of dx's output runs (the partial rows of a
 * multi-row CTA reuse the space after the row loop), then the weight cache,
 * at *cache_off. */
static size_t bwd_shift_smem(const fn_bwd_params &p, int ept, int threads, size_t *cache_off)
{
    const size_t run = (size_t)shift_run_chunks(ept / 8 * p.tpr) * 16 * p.rows_per_block;
    const size_t chunks = (size_t)shift_stage_chunks(ept / 8, threads, p.tpr) * 16;
    size_t body = FN_SHIFT_STAGES * chunks * (2 + (p.dres_out != nullptr)) + bwd_stat_bytes(threads, FN_SHIFT_STAGES) + 2 * run;
    const size_t partial_bytes = p.rows_per_block > 1 ? (size_t)threads * ept * sizeof(float) : 0;
    if (partial_bytes > body) body = partial_bytes;
    *cache_off = body;
    return body + (p.w ? (size_t)p.tpr * ept * sizeof(float) : 0);
}

/* A PLAIN SHIFT variant (EXACT = false): with EPT 16 and tpr in {64, 128,
 * 160, 192, 224, 256} (CTAs of static_tpr_threads), the one compiled for that tpr; with EPT 16
 * and another tpr the general SHIFT kernel (the PLAIN ones at a run-time tpr
 * spilled 20-48 bytes at 128 registers); with EPT 8 the PLAIN one at a
 * run-time tpr. */
template <typename TX, int VEC, int EPT, int PLAIN>
static cudaError_t launch_shift_plain(const fn_bwd_params &q, int grid, int threads, size_t smem,
                                      cudaStream_t stream, int *active)
{
    auto launch = [&](auto tpr) { /* TPR = 0: the run-time tpr */
        return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, PLAIN, decltype(tpr)::value, false, true>,
                               q, grid, threads, smem, q.cluster, stream, active);
    };
    auto run_time_tpr = [&] {
        if constexpr (EPT == 16)
            return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, 0, 0, true, true>, q, grid, threads,
                                   smem, q.cluster, stream, active);
        else
            return launch(std::integral_constant<int, 0>{});
    };
    if constexpr (EPT == 16)
        if (threads == static_tpr_threads(q.tpr) && q.rows_per_block == threads / q.tpr)
            return with_static_tpr<64, 128, 160, 192, 224, 256>(q.tpr, launch, run_time_tpr);
    return run_time_tpr();
}

/* The ODD tile's PLAIN variant for a call (see the kernel): 1 or 2 as
 * bwd_is_plain (no dresidual_out, no dresidual), 3 the pre-norm residual's
 * call (bwd_is_plain_residual), 0 none (not run as ODD). x, dy and dx of one
 * dtype; the backend checked the offsets (same_phase). */
static int bwd_odd_plain(const fn_bwd_params &q)
{
    if (q.dt_x != q.dt_dx || q.dt_dy != q.dt_dx) return 0;
    return bwd_is_plain_residual(q, q.dt_dx) ? 3 : bwd_plain_call(q);
}

/* Shared memory of the ODD tile: FN_STAGES stages of the body's chunks and
 * the edge slots of x, dy (and dresidual_out), the statistics, then the
 * weight cache at *cache_off. */
static size_t bwd_odd_smem(const fn_bwd_params &q, int ept, int vec, int threads, size_t *cache_off)
{
    const int inputs = bwd_odd_plain(q) == 3 ? 3 : 2;
    const size_t stages = FN_STAGES * ((size_t)(ept / vec) * inputs * threads + (size_t)FN_ODD_EDGE_SLOTS * inputs) * 16;
    *cache_off = stages + bwd_stat_bytes(threads);
    return *cache_off + (size_t)q.tpr * ept * sizeof(float);
}

/* The ODD tile's instances (launch_rows), by elements a thread, vector width
 * and bwd_odd_plain: up to 16 elements for every call, the 32-element tile
 * for 16-bit rows without the residual call's third staged input.
 * fn_bwd_odd_fits asks the same, so that the backend never plans a tile
 * that has no instance. */
__host__ __device__ constexpr bool odd_instance(int ept, int vec, int plain)
{
    return vec > 1 && plain >= 1 && plain <= 3 && (ept <= 16 || (ept == 32 && vec == 8 && plain != 3));
}

template <typename TX, int VEC, int EPT>
static cudaError_t launch_rows(const fn_bwd_params &p, int grid, int threads, cudaStream_t stream, int *active)
{
    if constexpr (odd_instance(EPT, VEC, 1)) {
        if (p.odd) { /* the backend checked fn_bwd_odd_fits */
            fn_bwd_params q = p;
            size_t off;
            const size_t smem = bwd_odd_smem(q, EPT, VEC, threads, &off);
            q.pipe = 1;
            q.wcache = 1;
            q.wcache_off = (int)off;
            /* Compiled for tpr 256 and 512 (16 elements a thread: bf16 rows
             * of 2049..8192 columns, fp32 of 1025..8192) and the 32-element
             * tile's 512 (bf16 65537 in 4 x 512), else a run-time tpr. */
            auto launch = [&](auto plain) {
                auto at = [&](auto tpr) {
                    return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, decltype(plain)::value,
                                                                      decltype(tpr)::value, false, false, true>,
                                           q, grid, threads, smem, q.cluster, stream, active);
                };
                auto run_time_tpr = [&] { return at(std::integral_constant<int, 0>{}); };
                if constexpr (EPT == 16)
                    if (threads == q.tpr) return with_static_tpr<256, 512>(q.tpr, at, run_time_tpr);
                if constexpr (EPT == 32)
                    if (threads == q.tpr) return with_static_tpr<512>(q.tpr, at, run_time_tpr);
                return run_time_tpr();
            };
            switch (bwd_odd_plain(q)) {
            case 1: return launch(std::integral_constant<int, 1>{});
            case 2: return launch(std::integral_constant<int, 2>{});
            case 3:
                if constexpr (odd_instance(EPT, VEC, 3)) return launch(std::integral_constant<int, 3>{});
                break;
            }
            return cudaErrorInvalidValue;
        }
    }
    if constexpr (VEC == 8 && sizeof(TX) == 2 && EPT <= 16) {
        if (p.shift) { /* the backend checked fn_bwd_shift_fits */
            fn_bwd_params q = p;
            size_t off;
            const size_t smem = bwd_shift_smem(q, EPT, threads, &off);
            q.pipe = 1;
            q.wcache = q.w != nullptr;
            q.wcache_off = (int)off;
            const int plain = q.wcache && bwd_is_plain_residual(q, dtype_of<TX>::value) ? 3 : bwd_is_plain(q);
            switch (plain) {
            case 1: return launch_shift_plain<TX, VEC, EPT, 1>(q, grid, threads, smem, stream, active);
            case 2: return launch_shift_plain<TX, VEC, EPT, 2>(q, grid, threads, smem, stream, active);
            case 3: return launch_shift_plain<TX, VEC, EPT, 3>(q, grid, threads, smem, stream, active);
            }
            return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, 0, 0, true, true>, q, grid, threads,
                                   smem, p.cluster, stream, active);
        }
    }
    const size_t partial_bytes = p.rows_per_block > 1 ? (size_t)threads * EPT * sizeof(float) : 0;
    /* Staged only where x and dy are of the activation dtype (the kernel's
     * pipeline is specialized on it); other mixes load straight into registers. */
    const bool same_dtypes = p.dt_x == dtype_of<TX>::value && p.dt_dy == dtype_of<TX>::value;
    const size_t stat_bytes = bwd_stat_bytes(threads, bwd_stages<TX, EPT>());
    /* The 32-element tile is staged past FN_MAX_STAGE_BYTES (128 KiB at 512
     * threads): its registers keep one CTA per SM resident anyway. The
     * backend plans it only where x's and dy's stages fit (fn_bwd_wide_fits).
     * So are 512-thread CTAs over a cluster (common.cuh, stage_cap). */
    const size_t cap = EPT > 16 ? (size_t)p.smem_max : stage_cap(threads, p.cluster, p.smem_max);
    const size_t cache_bytes = p.w ? (size_t)p.tpr * EPT * sizeof(float) : 0;
    /* The pre-norm residual's call stages dresidual_out as well (PLAIN = 3)
     * where the three inputs' stages fit beside the weight cache. */
    const size_t res_stage_bytes = bwd_stage_bytes<TX, VEC, EPT>(threads, 3);
    const bool res_plain = VEC > 1 && bwd_is_plain_residual(p, dtype_of<TX>::value) &&
                           res_stage_bytes <= cap &&
                           res_stage_bytes + stat_bytes + cache_bytes <= (size_t)p.smem_max;
    size_t stage_bytes = VEC > 1 && same_dtypes ? bwd_stage_bytes<TX, VEC, EPT>(threads, res_plain ? 3 : 2) : 0;
    const bool pipe = stage_bytes > 0 && stage_bytes <= cap && /* see the forward's launcher */
                      stage_bytes + stat_bytes <= (size_t)p.smem_max;
    if (!pipe) stage_bytes = 0;
    else stage_bytes += stat_bytes;
    size_t smem = partial_bytes > stage_bytes ? partial_bytes : stage_bytes;
    /* The weight cache after the stages: the CTA's tpr*EPT columns in fp32. */
    fn_bwd_params q = p;
    q.wcache = cache_bytes > 0 && smem + cache_bytes <= (size_t)p.smem_max;
    q.wcache_off = (int)smem;
    if (q.wcache) smem += cache_bytes;
    if constexpr (VEC > 1 && (EPT <= 16 || (EPT == 32 && sizeof(TX) == 2))) {
        /* The residual call over a cluster where two stages of its three
         * inputs do not fit beside the weight cache and the statistics (fp32
         * 131072 in 16 x 512 x 16: 192 + 32 + 8 KiB; 16-bit 262144 in 16 x
         * 512 x 32: 192 + 64 + 8 KiB): one stage (DROLL in the kernel)
         * rather than dresidual_out read unstaged. The 32-element tile is
         * compiled for 512 threads only (the planner's tile for 16-bit rows
         * of the residual call past 131072 columns). FUSEDNORM_BWD_DROLL=0
         * (p.droll) keeps the general kernel, for A/B. */
        /* The form with idle columns (126000 in 16 x 512 x 16) hit an
         * illegal instruction in step 104: the ptxas 13.0 miscompile of
         * session 33 (sass_check found it in that form), which
         * the shuffled slot in the kernel avoids; the 32-element tile keeps
         * exact tiles of 512 threads. */
        const size_t droll = bwd_one_stage_bytes<VEC, EPT>(threads, 3);
        const bool exact = p.cols == (int64_t)p.cluster * p.tpr * EPT;
        if (!res_plain && p.droll && p.cluster > 1 && p.rows_per_block == 1 &&
            (EPT <= 16 || (exact && p.tpr == 512 && threads == 512)) && bwd_is_plain_residual(p, dtype_of<TX>::value) &&
            droll <= cap && droll + cache_bytes <= (size_t)p.smem_max) {
            fn_bwd_params d = p;
            d.wcache = 1;
            d.wcache_off = (int)droll;
            constexpr int TPR = EPT == 32 ? 512 : 0;
            if constexpr (EPT <= 16)
                if (!exact) /* idle columns: the column checks stay */
                    return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, 3, 0, false, false, false, true>,
                                           d, grid, threads, droll + cache_bytes, d.cluster, stream, active);
            return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, 3, TPR, true, false, false, true>, d,
                                   grid, threads, droll + cache_bytes, d.cluster, stream, active);
        }
    }
    if constexpr (sizeof(TX) == 4 && EPT == 32) {
        /* The fp32 32-element tile: staged, one stage (ROLL in the kernel):
         * the common call with the weight cached, and the pre-norm
         * residual's call (PLAIN 3) with dresidual_out staged too and the
         * weight read from global memory (fn_bwd_wide_fits). */
        /* Exact tiles of 512 threads only: the run-time-tpr form with idle
         * columns hit an illegal instruction (200000 in 16 x 416, step 102),
         * the ptxas 13.0 miscompile of session 33 (sass_check finds its
         * form there), and spills 20-48 bytes. */
        auto exact512 = [&](auto plain, const fn_bwd_params &r, size_t bytes) {
            return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, decltype(plain)::value, 512>, r, grid,
                                   threads, bytes, r.cluster, stream, active);
        };
        const bool exact = q.cols == (int64_t)q.cluster * 512 * EPT && q.tpr == 512 && threads == 512;
        if (exact && pipe && q.wcache && !res_plain) switch (bwd_is_plain(q)) {
            case 1: return exact512(std::integral_constant<int, 1>{}, q, smem);
            case 2: return exact512(std::integral_constant<int, 2>{}, q, smem);
            }
        const size_t roll3 = bwd_one_stage_bytes<VEC, EPT>(threads, 3);
        if (exact && p.droll && bwd_is_plain_residual(p, dtype_of<TX>::value) && roll3 <= (size_t)p.smem_max) {
            fn_bwd_params r = p;
            r.wcache = 0;
            r.wcache_off = 0;
            return exact512(std::integral_constant<int, 3>{}, r, roll3);
        }
        return cudaErrorInvalidConfiguration;
    } else if constexpr (VEC > 1) {
        if (pipe) {
            if (res_plain && q.wcache) return launch_plain<TX, VEC, EPT, 3>(q, grid, threads, smem, stream, active);
            switch (bwd_is_plain(q)) {
            case 1: return launch_plain<TX, VEC, EPT, 1>(q, grid, threads, smem, stream, active);
            case 2: return launch_plain<TX, VEC, EPT, 2>(q, grid, threads, smem, stream, active);
            }
            return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, true, 0>, q, grid, threads, smem,
                                   p.cluster, stream, active);
        }
    }
    if constexpr (EPT > 16) {
        return cudaErrorInvalidConfiguration; /* never planned unstaged: it would spill (fn_bwd_wide_fits) */
    } else {
        return launch_or_query(norm_bwd_rows_in_registers<TX, VEC, EPT, false, 0>, q, grid, threads, smem,
                               p.cluster, stream, active);
    }
}

/* EPT instantiated (the planner's list): 4 (scalar and fp32 only), 8, 16 for
 * vector loads only (one element at a time, 16 would spill), and 32 for
 * 16-bit vectors, staged only (fn_bwd_wide_fits). */
template <typename TX, int VEC>
static cudaError_t dispatch_ept(const fn_bwd_params &p, int ept, int grid, int threads, cudaStream_t s, int *active)
{
    switch (ept) {
    case 4: if constexpr (VEC <= 4) return launch_rows<TX, VEC, 4>(p, grid, threads, s, active); break;
    case 8: return launch_rows<TX, VEC, 8>(p, grid, threads, s, active);
    case 16: if constexpr (VEC > 1) return launch_rows<TX, VEC, 16>(p, grid, threads, s, active); break;
    case 32:
        if constexpr (VEC == 8 || (VEC == 4 && sizeof(TX) == 4)) return launch_rows<TX, VEC, 32>(p, grid, threads, s, active);
        break;
    }
    return cudaErrorInvalidValue;
}

template <typename TX>
static cudaError_t dispatch_vec(const fn_bwd_params &p, int vec, int ept, int grid, int threads, cudaStream_t s,
                                int *active)
{
    constexpr int WIDE = 16 / sizeof(TX);
    if (vec == WIDE) return dispatch_ept<TX, WIDE>(p, ept, grid, threads, s, active);
    if (vec == 1) return dispatch_ept<TX, 1>(p, ept, grid, threads, s, active);
    return cudaErrorInvalidValue;
}

static cudaError_t rows_entry(const fn_bwd_params *p, int vec, int ept, int grid, int threads, void *stream,
                              int *active)
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->dt_dx) {
    case FN_DT_F32: return dispatch_vec<float>(*p, vec, ept, grid, threads, s, active);
    case FN_DT_F16: return dispatch_vec<__half>(*p, vec, ept, grid, threads, s, active);
    case FN_DT_BF16: return dispatch_vec<__nv_bfloat16>(*p, vec, ept, grid, threads, s, active);
    }
    return cudaErrorInvalidValue;
}

template <typename TX>
static cudaError_t two_pass_entry(const fn_bwd_params &p, int grid, int threads, cudaStream_t s, int *active)
{
    /* Always the vector kernel: it peels each row to its alignment itself. */
    constexpr int VEC = 16 / sizeof(TX);
    const size_t smem = p.smem_acc ? (size_t)((p.dw != nullptr) + (p.db != nullptr)) * VEC *
                                         (size_t)two_pass_acc_stride<VEC>(p.cols) * sizeof(float)
                                   : 0;
    return launch_or_query(norm_bwd_two_pass<TX, 16 / sizeof(TX)>, p, grid, threads, smem, 1, s, active);
}

static cudaError_t two_pass_dispatch(const fn_bwd_params *p, int grid, int threads, void *stream, int *active)
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->dt_dx) {
    case FN_DT_F32: return two_pass_entry<float>(*p, grid, threads, s, active);
    case FN_DT_F16: return two_pass_entry<__half>(*p, grid, threads, s, active);
    case FN_DT_BF16: return two_pass_entry<__nv_bfloat16>(*p, grid, threads, s, active);
    }
    return cudaErrorInvalidValue;
}

} // namespace fn

extern "C" int fn_launch_bwd_rows(const fn_bwd_params *p, int vec, int ept, int grid, int threads, void *stream)
{
    if (!fn_plan_cluster_xchg_ok(p->cluster, p->rows_per_block, p->tpr, threads)) /* a backstop (plan.h) */
        return (int)cudaErrorInvalidConfiguration;
    return (int)fn::rows_entry(p, vec, ept, grid, threads, stream, nullptr);
}

extern "C" int fn_max_active_bwd_rows(const fn_bwd_params *p, int vec, int ept, int threads, int *count)
{
    if (!fn_plan_cluster_xchg_ok(p->cluster, p->rows_per_block, p->tpr, threads)) /* a backstop (plan.h) */
        return (int)cudaErrorInvalidConfiguration;
    return (int)fn::rows_entry(p, vec, ept, 1, threads, nullptr, count);
}

extern "C" int fn_launch_bwd_two_pass(const fn_bwd_params *p, int grid, int threads, void *stream)
{
    return (int)fn::two_pass_dispatch(p, grid, threads, stream, nullptr);
}

extern "C" int fn_launch_bwd_columns(const fn_bwd_params *p, int col_chunks, int row_groups, void *stream)
{
    const dim3 grid((unsigned)col_chunks, (unsigned)row_groups);
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->dt_dx) {
    case FN_DT_F32: fn::norm_bwd_columns<float, 4><<<grid, FN_COLUMNS_THREADS, 0, s>>>(*p); break;
    case FN_DT_F16: fn::norm_bwd_columns<__half, 8><<<grid, FN_COLUMNS_THREADS, 0, s>>>(*p); break;
    case FN_DT_BF16: fn::norm_bwd_columns<__nv_bfloat16, 8><<<grid, FN_COLUMNS_THREADS, 0, s>>>(*p); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int fn_bwd_wide_fits(const fn_bwd_params *p)
{
    if (p->dt_x != p->dt_dx || p->dt_dy != p->dt_dx) return 0;
    if (p->dt_dx == FN_DT_F32) {
        /* one stage of x and dy, the statistics and the weight cache at 512
         * threads (196 KiB), for the common call; for the pre-norm
         * residual's call one stage of x, dy and dresidual_out and the
         * statistics (196 KiB), the weight read from global memory, unless
         * FUSEDNORM_BWD_DROLL=0 (launch_rows) */
        const size_t smem = fn::bwd_one_stage_bytes<4, 32>(512, 2) + 512 * 32 * sizeof(float);
        if (fn::bwd_plain_call(*p) != 0) return smem <= (size_t)p->smem_max;
        const size_t res = fn::bwd_one_stage_bytes<4, 32>(512, 3);
        return p->droll && fn::bwd_is_plain_residual(*p, FN_DT_F32) && res <= (size_t)p->smem_max;
    }
    const size_t stages = fn::bwd_stage_bytes<__half, 8, 32>(512, 2) + fn::bwd_stat_bytes(512);
    return stages <= (size_t)p->smem_max;
}

extern "C" int fn_bwd_shift_fits(const fn_bwd_params *p, int ept, int threads)
{
    size_t off;
    /* Not the 32-element tile: with the general kernel's dweight and dbias
     * accumulators it spills (328 bytes), and its stages leave no room for
     * the weight cache. */
    return (p->dt_dx == FN_DT_F16 || p->dt_dx == FN_DT_BF16) && ept >= 8 && ept <= 16 &&
           fn::bwd_shift_smem(*p, ept, threads, &off) <= (size_t)p->smem_max;
}

extern "C" int fn_bwd_odd_fits(const fn_bwd_params *p, int vec, int ept, int threads)
{
    size_t off;
    const int vec_wide = p->dt_dx == FN_DT_F32 ? 4 : 8;
    return vec == vec_wide && ept >= vec && fn::odd_instance(ept, vec, fn::bwd_odd_plain(*p)) && threads == p->tpr &&
           p->rows_per_block == 1 && p->tpr >= 2 * (vec - 1) && 2 * (vec - 1) <= fn::FN_ODD_EDGE_SLOTS &&
           fn::bwd_odd_smem(*p, ept, vec, threads, &off) <= (size_t)p->smem_max;
}

extern "C" int fn_max_active_bwd_two_pass(const fn_bwd_params *p, int threads, int *count)
{
    return (int)fn::two_pass_dispatch(p, 1, threads, nullptr, count);
}
