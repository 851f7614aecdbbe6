/*
 * RMSNorm / LayerNorm forward on CUDA, with the fused residual add.
 *
 * Per row:  h = x (+ residual);  residual_out = h (its own dtype)
 *           mean = sum(h)/N (LayerNorm) or 0;  rstd = 1/sqrt(sum((h-mean)^2)/N + eps)
 *           y = (h-mean)*rstd * (weight + weight_offset) + bias       ('=' on y)
 *           rstd[row], mean[row] stored in fp32 when asked.
 *
 * Kernels:
 *  - norm_fwd_rows_in_registers: a row is split into slices, one slice per CTA
 *    of a cluster (cluster = 1 off sm_90 or for rows that fit one CTA); a slice
 *    is held in registers by `tpr` threads, EPT elements each, loaded with
 *    VEC-wide (16-byte) accesses when alignment allows, else one element at a
 *    time. Several rows per CTA when rows are short. Covers N up to
 *    cluster * tpr * EPT (262144 on sm_90); over a cluster (one row a CTA)
 *    its 16-bit vector instances and its fp32 vector ones of 16 and 32
 *    elements meet by the cluster exchange, the others at a cluster
 *    barrier. RMSNorm's rows past 64 KiB take it, and its residual call's
 *    from 32 KiB (16-bit, and fp32 with a weight: the planner's rule,
 *    plan.h). Its SHIFT variant takes 16-bit
 *    rows that start off a 16-byte boundary (odd N, odd pitches), realigned
 *    in shared memory (common.cuh), up to FN_PLAN_SHIFT_MAX_COLS. Its ODD
 *    variant takes the common call's rows off a 16-byte boundary past 64 KiB
 *    on the tile of their aligned body, the few edge elements one per lane
 *    (fn_plan_fwd_odd; every activation at one offset within 16 bytes).
 *  - norm_fwd_held: rows of the streaming kernel's calls (x, y, weight,
 *    bias and any residual stream of one dtype, 16-byte vectors) of 128
 *    vectors and more, held whole in registers by small CTAs, many resident
 *    per SM; past 64 KiB (sm_90) by a cluster of CTAs, a slice each, the
 *    row sums exchanged in distributed shared memory. Its ODD form takes the
 *    same calls on rows off a 16-byte boundary (odd N, odd pitches, offset
 *    pointers; every activation at one offset within 16 bytes per row): the
 *    body in aligned vectors, the few head and tail elements one per lane.
 *  - norm_fwd_stream: long rows of the common call (x, y, weight, bias and
 *    the residual stream of one dtype, 16-byte vectors) that no cluster
 *    holds, or off sm_90: one CTA per row, the row read
 *    once for its statistics and once for the output, the re-read from L1.
 *  - norm_fwd_two_pass: any N and any alignment. One CTA per row
 *    (grid-stride), re-reading the row from global memory for each statistic
 *    and for the output; rows peeled to their 16-byte boundary.
 * Launchers at the bottom; the choice between them and their shapes is the
 * planner's (src/plan.c).
 */
#include "common.cuh"
#include "launch.cuh"
#include "plan.h"

namespace fn {

/* Register budget: the general kernel (PLAIN = 0) leaves it to ptxas under
 * 512 threads; the PLAIN variants ask for one resident 512-thread CTA (up to
 * 128 registers), since under the bare bound ptxas squeezed some of them into
 * 64 registers with spills (ncu: local-memory traffic in the forward). Those
 * compiled for rows of fewer than 32 threads (TPR 8: 16-bit rows of 256
 * columns, 32 rows a CTA of 256 threads) ask for 4 CTAs per SM instead: 64
 * registers without spills, twice the rows in flight of the run-time tpr's
 * 104 (docs/perf.md step 75). */
__host__ __device__ constexpr bool fwd_lb_four(int tpr) { return tpr > 0 && tpr < 32; }
/* The PLAIN value of the general kernel for fp32 rows over a cluster (see PLAIN in the kernel). */
constexpr int FWD_CLUSTER_GENERAL = 3;
/* Added to PLAIN 1 or 2: the residual call's promise (see PRES in the kernel). */
constexpr int PLAIN_RES = 4;
/* LayerNorm's rows over a cluster take the variance as E[h^2] - mean^2, the
 * sum and the squares met in one exchange, where mean^2 <= FN_LN_ONE_EXCHANGE
 * * var: there E[h^2] <= 5 var, so the subtraction grows the sums' rounding
 * error at most about fivefold, far inside rstd's tolerance (fp32 u(4 + 4
 * sqrt(N)): the reduction's own error). Other rows (a mean far from zero
 * against the spread, constant rows, non-finite values) take the centred
 * squares in a second exchange, as rows in one CTA always do. */
constexpr float FN_LN_ONE_EXCHANGE = 4.0f;
template <typename TX, int VEC, int EPT, int PLAIN, int TPR = 0, bool EXACT = true, bool SHIFT = false,
          bool DEEP = false, bool ONE = false, bool LAG = false, bool ODD = false>
__global__ void __launch_bounds__(fwd_lb_four(TPR) ? 256 : 512, fwd_lb_four(TPR) ? 4 : PLAIN || SHIFT ? 1 : 0)
    norm_fwd_rows_in_registers(const fn_fwd_params p)
{
    /* ODD: rows off a 16-byte boundary (odd N, odd pitches, offset pointers)
     * whose every activation sits at x's offset within 16 bytes in each row,
     * in a grid whose clusters each meet one such offset in all their rows
     * (one row a CTA, the clusters a multiple of the rows' period: the
     * backend sizes the grid), as the backward's ODD tile (norm_bwd.cu). A
     * CTA's rows then split alike: hd head elements before the first 16-byte
     * boundary, nb aligned body vectors, tl tail elements. The body is the
     * aligned tile shifted by hd columns (staged, cached and stored as
     * such, its vectors split among the cluster's CTAs as an aligned row's);
     * the hd + tl edge elements go one per lane on the cluster's first CTA
     * (lanes below 2 * (VEC - 1)), each loaded into a register a row ahead
     * (not staged: slots for them in each stage cost LayerNorm's 16-bit
     * tile its second CTA an SM, 93.3 -> 73.9% of copy on an H100, session
     * 43). It carries an odd row past 64 KiB on the tile its aligned
     * body would take, not on the held kernel over a cluster (LayerNorm bf16
     * 65537 ran at 0.73x of 65536 there: docs/perf.md, session 42). The PLAIN
     * common call only (no residual). */
    static_assert(!ODD || ((PLAIN == 1 || PLAIN == 2) && !EXACT && !SHIFT && !ONE && VEC > 1 &&
                           (TPR == 0 || TPR >= 256)),
                  "ODD: the PLAIN staged tile of the common call, one row a CTA");
    /* SHIFT: rows off a 16-byte boundary (odd N, odd pitches), realigned
     * (see "rows that start off a 16-byte boundary" in common.cuh): x and
     * residual staged as aligned chunks and realigned through shuffles, y and
     * residual_out written back through shared runs. Every activation of
     * dtype TX (16-bit), the weight and bias cached; PLAIN variants too (with
     * EXACT = false). */
    static_assert(!SHIFT || (VEC > 1 && sizeof(TX) == 2 && !EXACT), "SHIFT: staged 16-bit rows, column checks");
    /* TPR > 0: threads per row known at compile time (PLAIN variants of the
     * planner's usual shapes, see launch_plain): every shared-memory and
     * global offset of a vector becomes an immediate, and the reductions'
     * loops unroll. The CTA is then max(TPR, 256) threads (the planner's
     * rule, checked by the launcher). */
    /* PLAIN (1, or 2 with a bias) is the launcher's promise for the common call
     * (fwd_is_plain): x is staged, the weight (and bias) is in the cache, no
     * residual, y of dtype TX; with EXACT the row fills the tile exactly
     * (N == cluster * tpr * EPT, no column checks). PLAIN = 0 is the general
     * kernel. Every branch
     * on those then folds at compile time: ncu counted about a quarter of the
     * forward's instructions in branches and their bookkeeping. PLAIN = 3
     * (FWD_CLUSTER_GENERAL) is the general kernel compiled for fp32 rows
     * over a cluster: every feature at run time, staged and cached as the
     * launcher sets p.pipe and p.wcache, the row sums met by the exchange. */
    /* PLAIN 5 and 6 (PLAIN_RES + 1 or 2) are the same promises for the
     * residual call (fwd_is_plain): the residual staged beside x, both of
     * dtype TX, and residual_out (if given) of dtype TX too. */
    constexpr int PBASE = PLAIN & 3;
    constexpr bool PRES = (PLAIN & PLAIN_RES) != 0;
    static_assert(!PRES || PBASE == 1 || PBASE == 2, "PLAIN_RES: with 1 or 2");
    constexpr bool PROMISE = PBASE == 1 || PBASE == 2;
    static_assert(TPR == 0 || PROMISE, "TPR: PLAIN variants only");
    constexpr int K = EPT / VEC;
    static_assert(!PLAIN || VEC > 1, "PLAIN: staged vector rows only");
    const bool has_res = PRES || (!PROMISE && p.res != nullptr),
               has_res_out = (PRES || !PROMISE) && p.res_out != nullptr;
    const bool has_w = PROMISE || p.w != nullptr, has_b = PBASE == 2 || (!PROMISE && p.b != nullptr);
    __shared__ RowReduceSmem sm;
    int buf = 0;
    const int tpr = TPR ? TPR : p.tpr, sub = threadIdx.x / tpr, lane = threadIdx.x - sub * tpr;
    const int C = p.cluster;
    /* ODD: the CTA's rank in its cluster (the edge elements are rank 0's) */
    [[maybe_unused]] const int rank = ODD && C > 1 ? (int)cluster_rank() : 0;
    const int64_t N = p.cols, groups = (p.rows + p.rows_per_block - 1) / p.rows_per_block;
    /* ODD: this CTA's split of its rows (see above), from its first row. */
    [[maybe_unused]] int hd = 0, nb = 0;
    [[maybe_unused]] int64_t ecol = -1; /* the column of this lane's edge element, -1: none */
    if constexpr (ODD) {
        const uintptr_t a = (uintptr_t)((const TX *)p.x + (int64_t)(blockIdx.x / C) * p.sx);
        hd = (int)(((16u - (unsigned)(a & 15u)) & 15u) / sizeof(TX));
        nb = (int)((N - hd) / VEC);
        const int ne = (int)(N - (int64_t)nb * VEC); /* hd + tl */
        if (rank > 0) {
            /* the edge elements are the first CTA's */
        } else if (lane < hd) {
            ecol = lane;
        } else if (lane < ne) {
            ecol = hd + (int64_t)nb * VEC + (lane - hd);
        }
    }
    const int64_t slice = ODD ? (int64_t)hd + (int64_t)rank * tpr * EPT : (int64_t)(C > 1 ? cluster_rank() : 0) * tpr * EPT;
    /* the cluster's first CTA */
    auto first_cta = [&] { return ODD ? rank == 0 : slice == 0; };
    /* the statistics' 1/N, once: a multiply a row instead of an IEEE
     * division (the same bits for N a power of two, within an ulp otherwise) */
    const float inv_n = 1.0f / (float)N;
    /* A persistent grid: each CTA (or cluster) walks row groups with a fixed
     * stride. With vector access the next group's x (and residual) stream into
     * shared memory (cp.async) while this one is reduced and written. */
    const bool pipe = PROMISE || SHIFT || (VEC > 1 && p.pipe);
    /* DEEP: FN_DEEP_STAGES, for the PLAIN tiles over a cluster (launch_rows). */
    static_assert(!DEEP || (PROMISE && !SHIFT), "DEEP: the PLAIN tiles");
    /* ONE: a single stage, where two and the weight and bias cache do not
     * fit (launch_rows): x is unstaged into registers (h) at the row's start,
     * so the next row's x goes into the stage as soon as this thread has
     * read its chunks (its own: no barrier), and streams in while the row's
     * sums cross the cluster and y is written; the residual's likewise
     * (FWD_CLUSTER_GENERAL: fp32 RMSNorm + residual, where x and the
     * residual take 128 KiB a stage). */
    static_assert(!ONE || ((PROMISE || PLAIN == FWD_CLUSTER_GENERAL) && !SHIFT && !DEEP),
                  "ONE: the PLAIN tiles and fp32's general tile over a cluster");
    constexpr int STAGES = SHIFT ? FN_SHIFT_STAGES : DEEP ? FN_DEEP_STAGES : ONE ? 1 : FN_STAGES;
    extern __shared__ __align__(16) unsigned char dyn_smem[];
    uint4 *stage = reinterpret_cast<uint4 *>(dyn_smem);
    /* x is of dtype TX: one 16-byte chunk per vector; the residual may be fp32. */
    constexpr int chx = VEC * (int)sizeof(TX) / 16;
    const int nthr = TPR ? static_tpr_threads(TPR) : (int)blockDim.x,
              chr = PRES ? chx : has_res ? chunks_of<TX, VEC>(p.dt_res) : 0;
    /* the residual's dtype (fixed by PRES) */
    const int dt_res = PRES ? (int)dtype_of<TX>::value : p.dt_res;
    /* SHIFT: per stage, x's chunks (shift_stage_chunks), then the residual's;
     * after the stages two sets of output runs of y (and residual_out), used
     * by even and odd rows in turn: a row's runs are written before the
     * row's output barrier and read after it, so the next row's writes (to
     * the other set) need no barrier of their own. */
    const int run = shift_run_chunks(K * tpr), rpb = p.rows_per_block;
    const int xst_chunks = SHIFT ? shift_stage_chunks(K, nthr, tpr) : 0;
    const int per_stage = SHIFT ? xst_chunks * (1 + (has_res ? 1 : 0)) : K * (chx + chr) * nthr;
    const int out_set = rpb * run * (1 + (has_res_out ? 1 : 0));
    const int rb = PRES ? (int)sizeof(TX) : has_res ? dtype_bytes(p.dt_res) : 0;
    /* The stages' shared-memory address, converted once (cp.async takes it). */
    const unsigned stage_s = smem_addr(stage);
    /* This thread's chunk of stage 0 as a plain register, which ptxas cannot
     * split into a uniform base and a per-thread offset (the shuffle from
     * its own lane returns it as it was). ptxas 13.0 encoded cp.async's with
     * the split address (LDGSTS [R + UR + imm]) with registers it never
     * wrote, an illegal instruction on the device (docs/perf.md, session 33:
     * the LAG tiles, 16-bit RMSNorm + residual and three stages). Not the
     * 64-register tiles of 8 and 16 threads a row (fwd_lb_four), where the
     * shuffle's register doubled a spill (8 -> 16 bytes). bench/sass_check.sh
     * looks for that form in a build. */
    const unsigned my_stage = fwd_lb_four(TPR) ? stage_s + threadIdx.x * 16u
                                               : __shfl_sync(0xffffffffu, stage_s + threadIdx.x * 16u, (int)(threadIdx.x & 31u));
    const int64_t first = blockIdx.x / C, stride = gridDim.x / C;
    /* (w + w_off) and b of this CTA's columns as fp32 in shared memory (see
     * fill_column_cache): the forward is bound by instruction issue as much as
     * by memory (ncu at N = 4096 bf16: 0.68 warps issued per scheduler cycle). */
    float *wc = reinterpret_cast<float *>(dyn_smem + p.wcache_off), *bc = wc + (has_w ? tpr * EPT : 0);
    /* fp32 rows go without it but over a cluster: their loads are not the
     * bottleneck (88% of copy at N = 4096), and the cache path doubled their
     * registers (64 -> 128). */
    const bool wcache = PROMISE || ((sizeof(TX) == 2 || PLAIN == FWD_CLUSTER_GENERAL) && p.wcache);
    /* Whether column col of this CTA's slice lies in the row. */
    auto in_row = [&](int64_t col) { return ODD ? col - hd < (int64_t)nb * VEC : (PROMISE && EXACT) || col < N; };
    /* x (and the residual) staged with the L2 policy evict_last (step 57). */
    const uint64_t l2_last = l2_evict_last_policy();
    auto issue = [&](int64_t g, int st) {
        const int64_t row = g * p.rows_per_block + sub;
        if (SHIFT && g < groups && row < p.rows) {
            const unsigned sx = stage_s + (unsigned)(st * per_stage) * 16u;
            issue_shifted<K>(sx, nthr, shifted_row(p.x, row, p.sx, slice, N - slice, 2), lane, tpr, row == p.rows - 1);
            if (has_res)
                issue_shifted<K>(sx + (unsigned)xst_chunks * 16u, nthr,
                                 shifted_row(p.res, row, p.sres, slice, N - slice, 2), lane, tpr, row == p.rows - 1);
        } else if (g < groups && row < p.rows) {
            const unsigned sx = my_stage + (unsigned)(st * per_stage) * 16u,
                           sr = sx + (unsigned)(K * chx * nthr) * 16u;
            const TX *xrow = (const TX *)p.x + row * p.sx + slice + lane * VEC;
            const char *rrow = has_res ? (const char *)p.res + (row * p.sres + slice + lane * VEC) * rb : nullptr;
            #pragma unroll
            for (int k = 0; k < K; k++) {
                if (!in_row(slice + ((int64_t)k * tpr + lane) * VEC)) continue;
                cp_async16_s_l2(sx + (unsigned)(k * chx * nthr) * 16u, xrow + k * tpr * VEC, l2_last);
                if (has_res) {
                    const char *g = rrow + (int64_t)k * tpr * VEC * rb;
                    for (int c = 0; c < chr; c++)
                        cp_async16_s_l2(sr + (unsigned)((k * chr + c) * nthr) * 16u, g + 16 * c, l2_last);
                }
            }
        }
        cp_async_commit();
    };
    /* The first rows' loads go out before the weight cache is filled, so
     * that the two global-memory latencies of a CTA's start overlap. */
    if constexpr (ONE)
        issue(first, 0);
    else if (pipe)
        #pragma unroll
        for (int st = 0; st < STAGES - 1; st++) issue(first + st * stride, st);
    /* Over a cluster (one row a CTA of whole warps: fn_plan_cluster_xchg_ok),
     * the row sums of the 16-bit vector tiles and of the fp32 PLAIN tiles
     * (1, 2 and 3, which only clusters launch, see launch_rows) meet by the
     * exchange (common.cuh): a cluster barrier per reduction waits for the
     * last row's y stores (step 90). The others (the general fp32 kernel of
     * rows in one CTA, the scalar and SHIFT tiles, which the planner gives no
     * cluster but for unusual calls) keep the barrier: the exchange compiled
     * in cost them registers (general fp32 EPT 16: 60 -> 102) or spills
     * (SHIFT EPT 32: 116 bytes). */
    constexpr bool XCHG = (sizeof(TX) == 2 || PLAIN) && VEC > 1 && !SHIFT;
    /* LAG: the PLAIN exact tiles over a cluster (launch_plain) meet by the
     * exchange in two halves (see XchgLagSmem in common.cuh). */
    static_assert(!LAG || (PROMISE && (EXACT || ODD) && XCHG && !ONE && TPR >= 64 && TPR == static_tpr_threads(TPR)),
                  "LAG: the PLAIN exact tiles (and ODD's) of one row a CTA, over a cluster");
    if constexpr (XCHG && !LAG) cluster_xchg_init(sm, C);
    if (wcache) {
        if (has_w) fill_column_cache<VEC>(wc, p.w, p.dt_w, p.w_off, slice, tpr, tpr * EPT, N);
        if (has_b) fill_column_cache<VEC>(bc, p.b, p.dt_w, 0.0f, slice, tpr, tpr * EPT, N);
        __syncthreads();
    }
    /* ODD: the edge element's (w + w_off) (1 for the PLAIN call without a
     * weight, as the cache) and bias. */
    [[maybe_unused]] float ew = 1.0f, eb = 0.0f;
    if constexpr (ODD)
        if (ecol >= 0) {
            if (p.w) ew = load_any(p.w, p.dt_w, ecol) + p.w_off;
            if (has_b) eb = load_any(p.b, p.dt_w, ecol);
        }
    /* ODD: this lane's edge element of the row to come, as loaded (its
     * conversion waits for it: at its use, a row later) */
    [[maybe_unused]] TX enext = from_f32<TX>(0.0f);
    if constexpr (ODD)
        if (ecol >= 0 && first < groups) enext = ((const TX *)p.x)[first * p.sx + ecol];
    /* LAG: the rows' loop with the exchange in two halves. Row i + 1 is
     * taken from its stage and its sums posted before row i's are waited
     * for; row i is then normalized, so two rows are held: packed as staged
     * (16-bit, 16 registers a row here; as fp32 the two took 128 registers
     * and spilled), unpacked again for the output. The two arrays swap roles
     * each row (the loop is unrolled by two). All CTAs of a cluster walk the
     * same rows, so they post and wait in the same sequence (one reduction a
     * row, numbered by `it`). PRES: the residual is not held in registers
     * (x and the residual of two rows: 64, and 128 registers spilled 44
     * bytes); row i's stays in its stage until row i + 1 is taken, which
     * first copies it into `hold` (one row of chunks after the weight cache,
     * each thread its own slots: no barrier), since that stage is refilled
     * then; row i's output reads it there. */
    [[maybe_unused]] auto lag_rows = [&](auto ln_t, XchgLagSmem &lx) {
        constexpr bool LN = decltype(ln_t)::value;
        constexpr int NV = LN ? 2 : 1;
        static_assert(!LAG || (sizeof(TX) == 2 && chx == 1), "LAG: 16-bit rows, one chunk a vector");
        [[maybe_unused]] uint4 *hold = reinterpret_cast<uint4 *>(bc + (has_b ? tpr * EPT : 0)) + threadIdx.x;
        /* the residual of the itc-th row taken, in its stage */
        [[maybe_unused]] auto staged_res = [&](int itc) {
            return stage + (itc % STAGES) * per_stage + K * chx * nthr + threadIdx.x;
        };
        /* h of vector k: x from the held row, plus the residual from res
         * (PRES: the same FADD as the other tiles, so the same bits). */
        auto held_h = [&](const uint4 (&hp)[K], const uint4 *res, int k, float (&h)[VEC]) {
            unpack_raw<TX, VEC>(hp[k], h);
            if constexpr (PRES) {
                float r[VEC];
                unpack_raw<TX, VEC>(res[k * nthr], r);
                #pragma unroll
                for (int j = 0; j < VEC; j++) h[j] += r[j];
            }
        };
        /* Row group g (its stage: the itc-th taken) into hp, its CTA sums
         * posted as reduction itc; PRES writes residual_out here, before
         * the wait for the row before, and first keeps the residual of the
         * row taken before (whose stage the issue refills) in hold. */
        /* ODD: ex is the row's edge element (zero where the lane has none) */
        auto take = [&](int64_t g, int itc, uint4 (&hp)[K], [[maybe_unused]] float &ex) {
            if constexpr (PRES)
                if (itc > 0) {
                    const uint4 *prev = staged_res(itc - 1);
                    #pragma unroll
                    for (int k = 0; k < K; k++) hold[k * nthr] = prev[k * nthr];
                }
            issue(g + (STAGES - 1) * stride, (itc + STAGES - 1) % STAGES);
            cp_async_wait<STAGES - 1>();
            const int64_t row = g * rpb + sub;
            const bool ok = row < p.rows;
            const uint4 *sx = stage + (itc % STAGES) * per_stage + threadIdx.x;
            float s[NV];
            #pragma unroll
            for (int i = 0; i < NV; i++) s[i] = 0.0f;
            #pragma unroll
            for (int k = 0; k < K; k++) {
                hp[k] = ok && in_row(slice + ((int64_t)k * tpr + lane) * VEC) ? sx[k * nthr] : make_uint4(0, 0, 0, 0);
                float h[VEC];
                held_h(hp, staged_res(itc), k, h);
                if (PRES && ok && has_res_out)
                    store_vec<TX, VEC>((TX *)p.res_out, row * p.sres_out + slice + ((int64_t)k * tpr + lane) * VEC, h);
                if (PRES && !ok) /* x is zeros, the residual's stage not */
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) h[j] = 0.0f;
                #pragma unroll
                for (int j = 0; j < VEC; j++) {
                    if constexpr (LN) s[0] += h[j];
                    s[NV - 1] = fmaf(h[j], h[j], s[NV - 1]);
                }
            }
            if constexpr (ODD) {
                ex = ok && ecol >= 0 ? to_f32(enext) : 0.0f;
                if (ecol >= 0 && g + stride < groups) enext = ((const TX *)p.x)[(g + stride) * p.sx + ecol];
                if constexpr (LN) s[0] += ex;
                s[NV - 1] = fmaf(ex, ex, s[NV - 1]);
            }
            row_allreduce<NV>(s, sm, buf, tpr, sub, 1); /* over the CTA */
            xchg_lag_post<NV>(s, lx, itc, C);
        };
        /* Row group g's statistics (reduction it) and output, from hp. */
        /* kept: a row was taken since (PRES: the residual is in hold) */
        auto finish = [&](int64_t g, int it, const uint4 (&hp)[K], bool kept, [[maybe_unused]] float ex) {
            const int64_t row = g * rpb + sub;
            [[maybe_unused]] const uint4 *res = kept ? hold : staged_res(it);
            float t[NV];
            xchg_lag_wait<NV>(t, lx, it, C);
            float mean = 0.0f, rstd, shift = 0.0f;
            bool centre = false;
            if constexpr (LN) {
                mean = t[0] * inv_n;
                const float var = t[1] * inv_n - mean * mean;
                if (mean * mean <= FN_LN_ONE_EXCHANGE * var) { /* the same choice in every CTA */
                    rstd = rstd_of_var(var, p.eps);
                    shift = -mean * rstd;
                } else { /* the centred squares (see FN_LN_ONE_EXCHANGE), at cluster barriers;
                            * the exchange's buffers (sm.x) are not LAG's, so sm.cluster is free */
                    float q[1] = {0.0f};
                    #pragma unroll
                    for (int k = 0; k < K; k++) {
                        if (ODD && !in_row(slice + ((int64_t)k * tpr + lane) * VEC)) continue;
                        float h[VEC];
                        held_h(hp, res, k, h);
                        #pragma unroll
                        for (int j = 0; j < VEC; j++) q[0] = fmaf(h[j] - mean, h[j] - mean, q[0]);
                    }
                    if constexpr (ODD)
                        if (ecol >= 0) q[0] = fmaf(ex - mean, ex - mean, q[0]);
                    if (row >= p.rows) q[0] = 0.0f;
                    row_allreduce<1>(q, sm, buf, tpr, sub, 1); /* over the CTA */
                    q[0] = cluster_sum_in_rank_order(q[0], sm.cluster[0][0], C);
                    rstd = rstd_of_var(q[0] * inv_n, p.eps);
                    centre = true;
                }
            } else {
                rstd = rstd_of_var(t[0] * inv_n, p.eps);
            }
            if (row >= p.rows) return;
            if (lane == 0 && first_cta()) {
                if (p.rstd) p.rstd[row] = rstd;
                if (p.mean) p.mean[row] = mean;
            }
            if constexpr (ODD)
                if (ecol >= 0) { /* as an element of the body below */
                    const float v = LN && centre ? (ex - mean) * rstd : fmaf(ex, rstd, shift);
                    ((TX *)p.y)[row * p.sy + ecol] = from_f32<TX>(has_b ? fmaf(v, ew, eb) : v * ew);
                }
            #pragma unroll
            for (int k = 0; k < K; k++) {
                const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
                if (ODD && !in_row(col)) continue;
                float h[VEC], w[VEC], b[VEC], y[VEC];
                held_h(hp, res, k, h);
                read_cache<VEC>(wc, k, lane, tpr, w);
                if (has_b) read_cache<VEC>(bc, k, lane, tpr, b);
                #pragma unroll
                for (int j = 0; j < VEC; j++) {
                    /* LayerNorm's centred rows: (h - mean) * rstd, shift 0 */
                    float v = LN && centre ? (h[j] - mean) * rstd : fmaf(h[j], rstd, shift);
                    y[j] = has_b ? fmaf(v, w[j], b[j]) : v * w[j]; /* as the other tiles (below) */
                }
                store_vec<TX, VEC>((TX *)p.y, row * p.sy + col, y);
            }
        };
        if (first >= groups) return;
        uint4 ha[K], hb[K];
        float ea = 0.0f, eb2 = 0.0f; /* ODD: the rows' edge elements, as ha and hb */
        take(first, 0, ha, ea);
        int64_t g = first;
        for (int it = 0;; it += 2, g += 2 * stride) {
            const bool more = g + stride < groups, more2 = g + 2 * stride < groups;
            if (more) take(g + stride, it + 1, hb, eb2);
            finish(g, it, ha, more, ea);
            if (!more) break;
            if (more2) take(g + 2 * stride, it + 2, ha, ea);
            finish(g + stride, it + 1, hb, more2, eb2);
            if (!more2) break;
        }
    };
    if constexpr (LAG) {
        __shared__ XchgLagSmem lx;
        xchg_lag_init(lx, C);
        if (p.is_ln) lag_rows(std::true_type{}, lx);
        else lag_rows(std::false_type{}, lx);
        cp_async_wait<0>();
        cluster_exit_barrier(C);
        return;
    }
    int it = 0;
    for (int64_t group = first; group < groups; group += stride, it++) {
        const int64_t row = group * p.rows_per_block + sub;
        const bool row_ok = row < p.rows;

        float h[K][VEC];
        bool ok[K];
        if constexpr (ONE) {
            cp_async_wait<0>(); /* this row, issued as the last one was read */
        } else if (pipe) {
            issue(group + (STAGES - 1) * stride, (it + STAGES - 1) % STAGES);
            cp_async_wait<STAGES - 1>();
        }
        const uint4 *sx = stage + (it % STAGES) * per_stage + threadIdx.x, *sr = sx + K * chx * nthr;
        [[maybe_unused]] const uint4 *xst = stage + (it % STAGES) * per_stage, *rst = xst + xst_chunks;
        [[maybe_unused]] uint4 *yrun = stage + STAGES * per_stage + (it & 1) * out_set + sub * run,
                               *rorun = yrun + rpb * run;
        [[maybe_unused]] ShiftedRow xs, rs;
        if constexpr (SHIFT) {
            xs = shifted_row(p.x, row, p.sx, slice, N - slice, 2);
            if (has_res) rs = shifted_row(p.res, row, p.sres, slice, N - slice, 2);
        }
        /* SHIFT: zeros for the columns of vector k past the row's end. */
        [[maybe_unused]] auto clip = [&](int k, float (&v)[VEC]) {
            clip_past<VEC>(slice + ((int64_t)k * tpr + lane) * VEC, N, v);
        };
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
            ok[k] = row_ok && in_row(col);
            if constexpr (SHIFT) { /* every lane (a shuffle), then masked */
                unstage_shifted<TX, VEC, K>(xst, k, nthr, tpr, xs.s, h[k]);
                if (!ok[k])
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) h[k][j] = 0.0f;
            } else if (ok[k]) {
                if (pipe) unstage_vector<TX, VEC>(sx + k * chx * nthr, nthr, dtype_of<TX>::value, h[k]);
                else load_vec<TX, VEC>((const TX *)p.x, row * p.sx + col, h[k]);
            } else {
                #pragma unroll
                for (int j = 0; j < VEC; j++) h[k][j] = 0.0f;
            }
        }
        if (has_res) {
            #pragma unroll
            for (int k = 0; k < K; k++) {
                float r[VEC];
                if constexpr (SHIFT) unstage_shifted<TX, VEC, K>(rst, k, nthr, tpr, rs.s, r); /* every lane */
                if (!ok[k]) continue;
                const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
                if (!SHIFT && pipe) unstage_vector<TX, VEC>(sr + k * chr * nthr, nthr, dt_res, r);
                else if (!SHIFT) load_dyn<TX, VEC>(p.res, p.dt_res, row * p.sres + col, r);
                #pragma unroll
                for (int j = 0; j < VEC; j++) h[k][j] += r[j];
            }
        }
        /* ODD: this lane's edge element of x (zero where it has none), and
         * the next row's loaded (one row a CTA: the group is the row). */
        [[maybe_unused]] float ex = 0.0f;
        [[maybe_unused]] const bool eok = ODD && row_ok && ecol >= 0;
        if constexpr (ODD) {
            if (eok) ex = to_f32(enext);
            if (ecol >= 0 && group + stride < groups) enext = ((const TX *)p.x)[(group + stride) * p.sx + ecol];
        }
        if constexpr (ONE) issue(group + stride, 0); /* h holds this row: the stage is free */
        if constexpr (SHIFT) {
            #pragma unroll
            for (int k = 0; k < K; k++) {
                if (!ok[k]) continue;
                clip(k, h[k]);
                if (has_res_out) put_shifted<TX, VEC>(rorun, k * tpr + lane, h[k]);
            }
        } else if (has_res_out) {
            #pragma unroll
            for (int k = 0; k < K; k++) {
                if (!ok[k]) continue;
                const int64_t i = row * p.sres_out + slice + ((int64_t)k * tpr + lane) * VEC;
                if constexpr (PRES) store_vec<TX, VEC>((TX *)p.res_out, i, h[k]);
                else store_dyn<TX, VEC>(p.res_out, p.dt_res_out, i, h[k]);
            }
        }

        float mean = 0.0f, rstd = 0.0f;
        bool have_rstd = false;
        if (p.is_ln && XCHG && C > 1) {
            /* Over a cluster the sum and the squares about zero cross it in
             * one exchange (see FN_LN_ONE_EXCHANGE): each exchange is a wait
             * on the cluster's slowest CTA, and the second one cost LayerNorm
             * a third of the tile's bandwidth (docs/perf.md step 96). */
            float s[2] = {0.0f, 0.0f};
            #pragma unroll
            for (int k = 0; k < K; k++)
                #pragma unroll
                for (int j = 0; j < VEC; j++) {
                    s[0] += h[k][j];
                    s[1] = fmaf(h[k][j], h[k][j], s[1]);
                }
            if constexpr (ODD) { /* ex is zero where the lane has none */
                s[0] += ex;
                s[1] = fmaf(ex, ex, s[1]);
            }
            row_allreduce<2, XCHG>(s, sm, buf, tpr, sub, C);
            mean = s[0] * inv_n;
            const float var = s[1] * inv_n - mean * mean;
            /* the same bits in every CTA of the cluster: the same choice */
            have_rstd = mean * mean <= FN_LN_ONE_EXCHANGE * var;
            if (have_rstd) rstd = rstd_of_var(var, p.eps);
        } else if (p.is_ln) {
            float s[1] = {0.0f};
            #pragma unroll
            for (int k = 0; k < K; k++)
                #pragma unroll
                for (int j = 0; j < VEC; j++) s[0] += h[k][j];
            if constexpr (ODD) s[0] += ex;
            row_allreduce<1, XCHG>(s, sm, buf, tpr, sub, C);
            mean = s[0] * inv_n;
        }
        /* The output takes x_hat = h * rstd + shift (shift = -mean * rstd):
         * one FFMA an element. Rows whose squares cross the CTA (or cluster)
         * a second time are centred first, their shift then zero; rows of
         * the one exchange are not centred at all (an FADD an element
         * fewer: LayerNorm's forward over 8 CTAs is bound by instruction
         * issue, docs/perf.md step 100). There mean^2 <= 4 var bounds the
         * cancellation of h * rstd against mean * rstd to a few units of
         * x_hat's rounding. */
        bool centre = p.is_ln && !have_rstd;
        if constexpr (SHIFT) centre = p.is_ln;
        if (centre) {
            /* h - mean from here on (RMSNorm skips it: one FADD per element) */
            #pragma unroll
            for (int k = 0; k < K; k++) {
                #pragma unroll
                for (int j = 0; j < VEC; j++) h[k][j] -= mean;
                if constexpr (SHIFT)
                    if (ok[k]) clip(k, h[k]);
            }
        }
        if (!have_rstd) {
            float q[1] = {0.0f};
            #pragma unroll
            for (int k = 0; k < K; k++)
                if (ok[k])
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) q[0] += h[k][j] * h[k][j];
            if constexpr (ODD)
                if (eok) {
                    const float e = centre ? ex - mean : ex;
                    q[0] += e * e;
                }
            row_allreduce<1, XCHG>(q, sm, buf, tpr, sub, C);
            rstd = rstd_of_var(q[0] * inv_n, p.eps);
        }
        const float shift = centre ? 0.0f : -mean * rstd;

        if (row_ok && lane == 0 && first_cta()) {
            if (p.rstd) p.rstd[row] = rstd;
            if (p.mean) p.mean[row] = mean;
        }
        if constexpr (ODD)
            if (eok) { /* as an element of the body below */
                float v = fmaf(centre ? ex - mean : ex, rstd, shift);
                v = has_b ? fmaf(v, ew, eb) : v * ew;
                ((TX *)p.y)[row * p.sy + ecol] = from_f32<TX>(v);
            }
        #pragma unroll
        for (int k = 0; k < K; k++) {
            if (!ok[k]) continue;
            const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
            float w[VEC], b[VEC], y[VEC];
            if (has_w) {
                if (wcache) {
                    read_cache<VEC>(wc, k, lane, tpr, w);
                } else {
                    load_dyn<TX, VEC>(p.w, p.dt_w, col, w);
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) w[j] += p.w_off;
                }
            }
            if (has_b) {
                if (wcache) read_cache<VEC>(bc, k, lane, tpr, b);
                else load_dyn<TX, VEC>(p.b, p.dt_w, col, b);
            }
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                float v = fmaf(h[k][j], rstd, shift);
                /* x_hat * w + b in one FMA, as the PLAIN tiles contract it
                 * (at compile time), so that a call gets the same bits from
                 * the general kernel and from a PLAIN one */
                if (has_w && has_b) v = fmaf(v, w[j], b[j]);
                else if (has_w) v *= w[j];
                else if (has_b) v += b[j];
                y[j] = v;
            }
            if constexpr (SHIFT) put_shifted<TX, VEC>(yrun, k * tpr + lane, y);
            else if (PROMISE) store_vec<TX, VEC>((TX *)p.y, row * p.sy + col, y);
            else store_dyn<TX, VEC>(p.y, p.dt_y, row * p.sy + col, y);
        }
        if constexpr (SHIFT) {
            /* The output runs are complete: store their aligned chunks. */
            __syncthreads();
            if (row_ok) {
                const int64_t len = N - slice < tpr * EPT ? N - slice : tpr * EPT;
                store_shifted_run<TX, K>(yrun, shifted_row(p.y, row, p.sy, slice, len, 2), lane, tpr);
                if (has_res_out)
                    store_shifted_run<TX, K>(rorun, shifted_row(p.res_out, row, p.sres_out, slice, len, 2), lane, tpr);
            }
        }
    }
    if (pipe) cp_async_wait<0>();
    cluster_exit_barrier(C);
}

/* Any N, any alignment: one CTA per row at a time (grid-stride), the row
 * re-read from global memory (L2 when the rows in flight fit) for each
 * statistic and for the output. Each row is split at x's 16-byte boundary
 * (split_row): vectors for the body of every tensor aligned there, single
 * elements elsewhere, so odd N and odd pitches keep vector loads on x. */
template <typename TX, int VEC>
__global__ void __launch_bounds__(512, 2) norm_fwd_two_pass(const fn_fwd_params p)
{
    __shared__ RowReduceSmem sm;
    int buf = 0;
    const int64_t N = p.cols;
    const int xb = (int)sizeof(TX), rb = dtype_bytes(p.dt_res), yb = dtype_bytes(p.dt_y),
              rob = dtype_bytes(p.dt_res_out), wb = dtype_bytes(p.dt_w);
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        const TX *xrow = (const TX *)p.x + row * p.sx;
        const RowSplit rs = split_row<VEC>(xrow, xb, N);
        const int64_t hd = rs.head;
        /* Per tensor: are its body vectors aligned in this row? */
        const bool vr = p.res && vec_at((const char *)p.res + row * p.sres * rb, hd, rb);
        const bool vy = vec_at((const char *)p.y + row * p.sy * yb, hd, yb);
        const bool vro = p.res_out && vec_at((const char *)p.res_out + row * p.sres_out * rob, hd, rob);
        const bool vw = p.w && vec_at(p.w, hd, wb), vb = p.b && vec_at(p.b, hd, wb);
        auto load_h = [&](int64_t col, auto width, float (&h)[decltype(width)::value]) {
            constexpr int V = decltype(width)::value;
            load_flex<TX, V>(xrow, (int)dtype_of<TX>::value, col, true, h);
            if (p.res) {
                float r[V];
                load_flex<TX, V>(p.res, p.dt_res, row * p.sres + col, vr, r);
                #pragma unroll
                for (int j = 0; j < V; j++) h[j] += r[j];
            }
        };
        /* Each pass loads B vectors per thread ahead of their use (for_each_column_batched). */
        float hb[TWO_PASS_FWD_BATCH][VEC];
        auto load_slot = [&](int64_t col, auto width, int u) {
            load_h(col, width, first<decltype(width)::value>(hb[u]));
        };
        float mean = 0.0f;
        if (p.is_ln) {
            float s[1] = {0.0f};
            for_each_column_batched<VEC, TWO_PASS_FWD_BATCH>(rs, N, load_slot, [&](int64_t, auto width, int u) {
                #pragma unroll
                for (int j = 0; j < decltype(width)::value; j++) s[0] += hb[u][j];
            });
            row_allreduce<1>(s, sm, buf, blockDim.x, 0, 1);
            mean = s[0] / (float)N;
        }
        float q[1] = {0.0f};
        for_each_column_batched<VEC, TWO_PASS_FWD_BATCH>(rs, N, load_slot, [&](int64_t, auto width, int u) {
            #pragma unroll
            for (int j = 0; j < decltype(width)::value; j++) q[0] += (hb[u][j] - mean) * (hb[u][j] - mean);
        });
        row_allreduce<1>(q, sm, buf, blockDim.x, 0, 1);
        const float rstd = rstd_of(q[0], (float)N, p.eps);
        if (threadIdx.x == 0) {
            if (p.rstd) p.rstd[row] = rstd;
            if (p.mean) p.mean[row] = mean;
        }
        for_each_column_batched<VEC, TWO_PASS_FWD_BATCH>(rs, N, load_slot, [&](int64_t col, auto width, int u) {
            constexpr int V = decltype(width)::value;
            float (&h)[V] = first<V>(hb[u]);
            float w[V], b[V], y[V];
            if (p.res_out) store_flex<TX, V>(p.res_out, p.dt_res_out, row * p.sres_out + col, vro, h);
            if (p.w) load_flex<TX, V>(p.w, p.dt_w, col, vw, w);
            if (p.b) load_flex<TX, V>(p.b, p.dt_w, col, vb, b);
            #pragma unroll
            for (int j = 0; j < V; j++) {
                float v = (h[j] - mean) * rstd;
                if (p.w) v *= w[j] + p.w_off;
                if (p.b) v += b[j];
                y[j] = v;
            }
            store_flex<TX, V>(p.y, p.dt_y, row * p.sy + col, vy, y);
        });
    }
}

/* Long rows of the common call, streamed: one 512-thread CTA per row at a
 * time (grid-stride), the row read once for its statistics (LayerNorm's
 * mean and squared deviations together: ShiftedSums, MeanM2) and once for the output,
 * U 16-byte vectors of each input per thread in flight on each read. The
 * first read asks L1 to keep the row and the output's read lets it go, so
 * the re-read hits L1 (rows of up to tens of KiB) or L2. The weight and bias,
 * read by every row, are kept in L1 (WL1 = FN_L1_KEEP) where that leaves room
 * for the rows, else not allocated there (FN_L1_NONE; the planner decides:
 * fn_plan_stream_keeps_weight). Registers stay low
 * (raw vectors, no feature branches in the loops), two CTAs per SM.
 * The call (the backend's `streamable`): x, y, residual and residual_out of
 * dtype TX (RES: residual and/or residual_out present), weight and bias
 * absent or of dtype TX, every row 16-byte aligned with N % VEC == 0 and
 * N <= 2^30 (vector indexes in 32 bits). h = x + residual is formed in fp32
 * on both reads; residual_out is written on the second, after the same
 * thread has read that vector of residual (in place works). Where the
 * planner takes it, and what it measured: plan.h, FN_PLAN_STREAM_FWD_*. */
template <typename TX, int VEC, bool LN, bool RES, int WL1>
__global__ void __launch_bounds__(512, 2) norm_fwd_stream(const fn_fwd_params p)
{
    /* vectors of each input in flight per thread (one CTA of two per SM;
     * docs/perf.md step 42 measured one vector at four CTAs per SM on rows of
     * 2048..16384: RMSNorm +2..4%, LayerNorm behind the register tile) */
    constexpr int U = RES ? 2 : 4;
    static_assert(VEC * sizeof(TX) == 16, "one 16-byte vector");
    __shared__ RowReduceSmem sm;
    __shared__ MeanM2 msm[2][32]; /* LayerNorm's statistics (cta_allmerge) */
    int buf = 0, mbuf = 0;
    const int64_t N = p.cols;
    const int nv = (int)(N / VEC), T = blockDim.x;
    const uint4 *wv = (const uint4 *)p.w, *bv = (const uint4 *)p.b;
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        const uint4 *xv = (const uint4 *)((const TX *)p.x + row * p.sx);
        [[maybe_unused]] const uint4 *rv = RES && p.res ? (const uint4 *)((const TX *)p.res + row * p.sres) : nullptr;
        uint4 *yv = (uint4 *)((TX *)p.y + row * p.sy);
        /* One read of the row: f(v, h) for each of this thread's vectors v in
         * order, h = x (+ residual) as fp32; L1: the loads' L1 policy. */
        auto read_row = [&](auto l1, auto f) {
            constexpr int L1 = decltype(l1)::value;
            for (int v0 = threadIdx.x; v0 < nv; v0 += U * T) {
                uint4 raw[U];
                [[maybe_unused]] uint4 rres[RES ? U : 1];
                #pragma unroll
                for (int u = 0; u < U; u++)
                    if (v0 + u * T < nv) {
                        raw[u] = ld_global16<L1>(xv + v0 + u * T);
                        if constexpr (RES)
                            if (rv) rres[u] = ld_global16<L1>(rv + v0 + u * T);
                    }
                #pragma unroll
                for (int u = 0; u < U; u++)
                    if (v0 + u * T < nv) {
                        float h[VEC];
                        unpack_raw<TX, VEC>(raw[u], h);
                        if constexpr (RES)
                            if (rv) {
                                float r[VEC];
                                unpack_raw<TX, VEC>(rres[u], r);
                                #pragma unroll
                                for (int j = 0; j < VEC; j++) h[j] += r[j];
                            }
                        f(v0 + u * T, h);
                    }
            }
        };
        using keep = std::integral_constant<int, FN_L1_KEEP>;
        using drop = std::integral_constant<int, FN_L1_DROP>;
        float mean = 0.0f, rstd;
        if constexpr (LN) {
            /* the thread's shifted sums, then merged over the CTA */
            ShiftedSums ts = {0.0f, 0.0f, 0.0f, 0};
            read_row(keep{}, [&](int, const float (&h)[VEC]) { ts.add(h); });
            const MeanM2 st = cta_allmerge(ts.mean_m2(), msm, mbuf);
            mean = st.mean;
            rstd = rstd_of(st.m2, (float)N, p.eps);
        } else {
            float q[1] = {0.0f};
            read_row(keep{}, [&](int, const float (&h)[VEC]) {
                #pragma unroll
                for (int j = 0; j < VEC; j++) q[0] += h[j] * h[j];
            });
            row_allreduce<1>(q, sm, buf, T, 0, 1);
            rstd = rstd_of(q[0], (float)N, p.eps);
        }
        if (threadIdx.x == 0) {
            if (p.rstd) p.rstd[row] = rstd;
            if (p.mean) p.mean[row] = mean;
        }
        read_row(drop{}, [&](int v, const float (&h)[VEC]) {
            if constexpr (RES)
                if (p.res_out) store_vec<TX, VEC>((TX *)p.res_out + row * p.sres_out + (int64_t)v * VEC, 0, h);
            float y[VEC];
            #pragma unroll
            for (int j = 0; j < VEC; j++) y[j] = (h[j] - mean) * rstd;
            if (wv) {
                float w[VEC];
                unpack_raw<TX, VEC>(ld_global16<WL1>(wv + v), w);
                #pragma unroll
                for (int j = 0; j < VEC; j++) y[j] *= w[j] + p.w_off;
            }
            if (bv) {
                float b[VEC];
                unpack_raw<TX, VEC>(ld_global16<WL1>(bv + v), b);
                #pragma unroll
                for (int j = 0; j < VEC; j++) y[j] += b[j];
            }
            store_vec<TX, VEC>((TX *)(yv + v), 0, y);
        });
    }
}

/* The held kernel's LayerNorm y as (h - mean) * fma(w, rstd, w_off * rstd)
 * + b: one FADD an element fewer than ((h - mean) * rstd) * (w + w_off) + b,
 * one rounding fewer too. The kernel is issue bound on short rows (ncu,
 * LayerNorm bf16 1024: 75% of issue slots busy, 24.6 thread instructions an
 * element against RMSNorm's 16.1; docs/perf.md session 38). Measured only
 * together with a change not kept (H200: LayerNorm bf16 1024 fwd 72.7 ->
 * 73.9% of copy, 2048 81.0 -> 80.3); alone on an H100 (session 39, its
 * tests passed): 256 68.2 -> 68.5, 1024 82.7 -> 82.3, 2048 91.4 -> 91.2, no
 * gain: off (0: the kernel's SASS as before), for a lab build
 * (-DCMAKE_CUDA_FLAGS=-DFN_FWD_HELD_LN_FMA=1). RMSNorm keeps its form: the
 * extra register (w_off * rstd) spilled its 32-register forms (ptxas). */
#ifndef FN_FWD_HELD_LN_FMA
#define FN_FWD_HELD_LN_FMA 0
#endif
/* Rows held whole in registers (FN_PATH_HELD): the calls of norm_fwd_stream
 * (x, y, weight, bias and any residual stream of one dtype, 16-byte vectors)
 * on rows of 128 vectors up to the streamed ones (64 KiB; 32 KiB with the
 * residual: plan.h). Each of a row's tpr threads holds U raw vectors (columns
 * lane + u * tpr, the same for every row it walks), rows_per_block rows per
 * CTA, one CTA per row group (a grid-stride loop only past the grid's limit).
 * No staging and no persistent grid: with 40 (U = 4) or 64 (U = 8) registers
 * an SM keeps 1024-2048 threads resident, and its other CTAs cover one CTA's
 * reductions (docs/perf.md, step 48). LayerNorm reduces the held values twice
 * (the mean, then the centred squares: exact two-pass statistics). The weight
 * and bias (of x's dtype, or fp32 with 16-bit x) are re-read for each row,
 * from L1 (evict_last; x is read once, evict_first), but where SMW (below)
 * puts them in shared memory once a CTA (16-bit x, U = 4: 1024 and 2048
 * columns, whose h KEEP holds in fp32, 56-64 registers). Rows of one CTA read x
 * and the weight with the L2 policy evict_last (5-8% faster from N = 2048,
 * step 57); a cluster's rows read them without it (2-4% slower with it). */
/* A 16-byte vector of x (or the residual, the weight, the bias) with L1
 * policy L1, and with the L2 policy pol unless the row is held over a
 * cluster (CL). */
template <int L1, bool CL>
__device__ __forceinline__ uint4 held_load(const uint4 *a, uint64_t pol)
{
    if constexpr (CL) return ld_global16<L1>(a);
    else return ld_global16_l2<L1>(a, pol);
}
/* Vector v of the weight (or bias) as fp32, read through L1 (evict_last:
 * every row reads it): of dtype TX, or fp32 with 16-bit TX (W32: two
 * 16-byte loads). */
template <typename TX, int VEC, bool W32, bool CL>
__device__ __forceinline__ void held_param(const uint4 *wv, int v, float (&w)[VEC], uint64_t pol)
{
    if constexpr (W32) {
        #pragma unroll
        for (int c = 0; c < VEC / 4; c++)
            unpack_raw<float, 4>(held_load<FN_L1_KEEP, CL>(wv + (VEC / 4) * v + c, pol), w + 4 * c);
    } else {
        unpack_raw<TX, VEC>(held_load<FN_L1_KEEP, CL>(wv + v, pol), w);
    }
}

/* The 16 bytes that start sb bytes (0 < sb < 16, even) into the 32 of a
 * and b: a barrel shift by 8, 4 and 2 bytes on the eight words, selects on a
 * row-uniform sb. */
__device__ __forceinline__ uint4 shift_bytes(uint4 a, uint4 b, int sb)
{
    unsigned w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    if (sb & 8) {
        #pragma unroll
        for (int i = 0; i < 6; i++) w[i] = w[i + 2];
    }
    if (sb & 4) {
        #pragma unroll
        for (int i = 0; i < 5; i++) w[i] = w[i + 1];
    }
    if (sb & 2)
        return make_uint4(__byte_perm(w[0], w[1], 0x5432), __byte_perm(w[1], w[2], 0x5432),
                          __byte_perm(w[2], w[3], 0x5432), __byte_perm(w[3], w[4], 0x5432));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* ODD rows: elements k * VEC + sh .. + VEC - 1 (0 < sh < VEC) of a 16-byte
 * aligned parameter vector of n elements, as one raw vector: aligned vectors
 * k and k + 1, shifted. Vector k + 1 is read whole only where it lies within
 * the n elements; else its first sh elements (all that is needed, and all
 * within n) one by one. */
template <typename TX, int VEC, bool CL>
__device__ __forceinline__ uint4 held_param_shifted(const TX *w, int k, int sh, int64_t n, uint64_t pol)
{
    const uint4 *wv = (const uint4 *)w;
    const uint4 a = held_load<FN_L1_KEEP, CL>(wv + k, pol);
    uint4 b;
    if ((int64_t)(k + 2) * VEC <= n) {
        b = held_load<FN_L1_KEEP, CL>(wv + k + 1, pol);
    } else {
        union {
            uint4 v;
            TX e[VEC];
        } u;
        u.v = make_uint4(0, 0, 0, 0);
        #pragma unroll
        for (int j = 0; j < VEC; j++)
            if (j < sh) u.e[j] = w[(int64_t)(k + 1) * VEC + j];
        b = u.v;
    }
    return shift_bytes(a, b, sh * (int)sizeof(TX));
}

/* The held kernel's h unpacked once and kept in fp32 (KEEP in the kernel):
 * 16-bit x, U = 4, rows of one CTA (1024 and 2048 columns): 32 registers
 * of floats for the 16 of raw vectors (ptxas, sm_90, bf16: LayerNorm 40 ->
 * 60 registers, 1024 resident threads where 1536 were; RMSNorm 40; the
 * residual's 60-64 as before; with SMW below LayerNorm 64, RMSNorm 56).
 * 0: the kernel before (a lab build: -DCMAKE_CUDA_FLAGS=-DFN_FWD_HELD_KEEP=0). */
#ifndef FN_FWD_HELD_KEEP
#define FN_FWD_HELD_KEEP 1
#endif
template <typename TX, int U, bool CL, bool ODD>
__host__ __device__ constexpr bool held_keeps()
{
    return FN_FWD_HELD_KEEP && sizeof(TX) == 2 && U == 4 && !CL && !ODD;
}

/* SMW (FN_FWD_HELD_SMEM_W, with KEEP): the weight (plus weight_offset) and
 * the bias as fp32 in shared memory, filled once a CTA, instead of read
 * from L1 and unpacked for each of its rows (the same bits: w + w_off is
 * the sum the row formed). Component c of vector v of the weight at float4
 * c * nv + v, the bias after it (a warp's lanes read consecutive float4s).
 * Rows of one CTA whose parameters fit FN_FWD_HELD_SMEM_W_MAX bytes.
 * KEEP and SMW together, H100, % of copy, two rounds' mean (docs/perf.md
 * session 40): LayerNorm bf16 1024 fwd 81.9 -> 84.7, 2048 91.1 -> 92.6,
 * fp16 1024 82.1 -> 84.7, + residual 1024 91.7 -> 93.4, RMSNorm bf16 1024
 * 86.0 -> 87.9, 2048 93.0 -> 94.3; KEEP alone 0 to +0.6. ncu (LayerNorm
 * bf16 1024): 24.6 -> 22.4 thread instructions an element (the unpack's
 * LOP3 and SHF halved, two FADDs an element fewer). 0: off. */
#ifndef FN_FWD_HELD_SMEM_W
#define FN_FWD_HELD_SMEM_W 1
#endif
/* LEAN (FN_FWD_HELD_LEAN), SMW's rows that fill the CTA's slots exactly
 * (tpr * U == nv: 16-bit 1024 and 2048 columns): the same row with fewer
 * instructions, from the SASS of the SMW form (LayerNorm bf16 1024, a warp
 * a row, about 620 instructions a row and thread, 20 an element):
 *  - no bounds check per vector in any pass (each cost a compare, a branch
 *    and a convergence barrier: about 1.2 an element);
 *  - the shared weight always there (1.0f without a weight, w + w_off with
 *    one) and the bias present or not by the launch (LEAN 2 or 1), so y is
 *    t * w or fmaf(t, w, b) (t = (h - mean) * rstd) with no branch per
 *    vector; read through 32-bit shared addresses, formed in each row from
 *    one base and one stride (the generic form rebuilt the shared window's
 *    base at every vector; formed once ahead of the row loop, the 16 were
 *    kept and spilled): the y pass from about 57 to 27 instructions per 8
 *    elements;
 *  - a warp a row's two trees unrolled (row_allreduce's WARP32: the loop
 *    over a run-time width, about 30 instructions a row and thread).
 * y = fmaf(t, w, b) rounds once where t * w + b rounded twice. Taken where
 * p.lean (the backend's FN_FWD_LEAN_DEFAULT, or the lab knob
 * FUSEDNORM_FWD_LEAN). H100 (session 42, ncu, bf16 1024): LayerNorm 22.4 ->
 * 18.7 thread instructions an element, issue slots 64.7 -> 54.7% busy,
 * RMSNorm 15.3 -> 12.9; the kernels' time unchanged (the H100 is not issue
 * bound there; the H200 was, session 38). 0: not compiled (the SMW form only). */
#ifndef FN_FWD_HELD_LEAN
#define FN_FWD_HELD_LEAN 1
#endif
#define FN_FWD_HELD_SMEM_W_MAX (32 * 1024)

template <typename TX, int VEC, bool LN, bool RES, bool W32, int U, int MINB, bool CL = false, bool ODD = false,
          bool SMW = false, int LEAN = 0>
__global__ void __launch_bounds__(512, MINB) norm_fwd_held(const fn_fwd_params p)
{
    static_assert(VEC * sizeof(TX) == 16, "one 16-byte vector");
    /* RES: the residual call, x and the residual held raw, h = x + residual
     * formed in fp32 at each use, residual_out written with y (every load of
     * the row precedes the reductions' barriers, and a thread writes only
     * its own columns: in place works).
     * CL: rows longer than one CTA holds, split over a cluster of p.cluster
     * CTAs (sm_90), one slice of tpr * U vectors each (rows_per_block 1);
     * the row sums meet in distributed shared memory (row_allreduce).
     * ODD: rows off a 16-byte boundary (p.odd; x, y, the residual and
     * residual_out of dtype TX at one offset within 16 bytes in each row,
     * the weight and bias aligned): the row's body, from its first 16-byte
     * boundary, in aligned vectors as above; its head (before it) and tail
     * (after the last whole vector), at most 2 * (VEC - 1) elements, one
     * element each on lanes 0.. (tpr >= 16; over a cluster, of its first
     * CTA); the weight and bias of a body vector from two aligned vectors,
     * shifted (held_param_shifted). */
    static_assert(!(ODD && W32), "ODD rows: weights of dtype TX");
    /* KEEP (FN_FWD_HELD_KEEP): the row's h in fp32 registers from the loads
     * on (unpacked once, not at each of the two or three passes); CENTRE:
     * LayerNorm keeps h - mean from its second pass for y (not with the
     * residual: residual_out is h) */
    constexpr bool KEEP = held_keeps<TX, U, CL, ODD>();
    constexpr bool CENTRE = KEEP && LN && !RES;
    static_assert(!SMW || (KEEP && !(LN && FN_FWD_HELD_LN_FMA)), "SMW: with KEEP, not the FMA form");
    /* LEAN (see FN_FWD_HELD_LEAN): 1 without a bias, 2 with one; rows of
     * exactly tpr * U vectors (the launcher checks) */
    static_assert(!LEAN || (SMW && !CL && !ODD && !RES && U == 4), "LEAN: a form of SMW (U = 4), without the residual");
    __shared__ RowReduceSmem sm;
    extern __shared__ __align__(16) unsigned char dyn_smem[]; /* SMW's parameters */
    [[maybe_unused]] bool filled = false;
    [[maybe_unused]] __shared__ MeanM2 cl_slot[2];
    int buf = 0;
    [[maybe_unused]] int cl_buf = 0;
    const int tpr = p.tpr, rpb = p.rows_per_block, sub = threadIdx.x / tpr, lane = threadIdx.x - sub * tpr;
    const int C = CL ? p.cluster : 1;
    const int nv = (int)(p.cols / VEC), first = CL ? (int)cluster_rank() * tpr * U : 0;
    const float n = (float)p.cols;
    const uint4 *wv = (const uint4 *)p.w, *bv = (const uint4 *)p.b;
    const uint64_t l2_last = CL ? 0 : l2_evict_last_policy();
    [[maybe_unused]] const unsigned lean_base = LEAN ? smem_addr(dyn_smem) + 16u * (unsigned)lane : 0u;
    for (int64_t g = blockIdx.x / C; g * rpb < p.rows; g += gridDim.x / C) {
        const int64_t row = g * rpb + sub;
        const bool row_ok = CL || row < p.rows; /* CL: one row per cluster, g < rows */
        const TX *xrow = (const TX *)p.x + row * p.sx;
        /* ODD: hd head elements, nb body vectors, ne head and tail elements */
        int hd = 0, nb = nv, ne = 0;
        if constexpr (ODD) {
            hd = (int)(((16u - ((unsigned)(uintptr_t)xrow & 15u)) & 15u) / sizeof(TX));
            nb = (int)((p.cols - hd) / VEC);
            ne = (int)(p.cols - (int64_t)nb * VEC);
        }
        const uint4 *xv = (const uint4 *)(xrow + hd);
        [[maybe_unused]] const uint4 *rv =
            RES && p.res ? (const uint4 *)((const TX *)p.res + row * p.sres + hd) : nullptr;
        uint4 raw[U];
        [[maybe_unused]] uint4 rraw[RES ? U : 1];
        #pragma unroll
        for (int u = 0; u < U; u++) {
            const int v = first + lane + u * tpr;
            raw[u] = row_ok && (LEAN || v < nb) ? held_load<FN_L1_DROP, CL>(xv + v, l2_last) : make_uint4(0, 0, 0, 0);
            if constexpr (RES)
                rraw[u] = rv && row_ok && (LEAN || v < nb) ? held_load<FN_L1_DROP, CL>(rv + v, l2_last) : make_uint4(0, 0, 0, 0);
        }
        if (SMW && !filled) { /* the CTA's parameters, once (x of its first rows in flight) */
            float4 *psm = (float4 *)dyn_smem;
            const int boff = wv || LEAN ? VEC / 4 : 0;
            for (int i = threadIdx.x; i < nv; i += blockDim.x) {
                float t[VEC];
                if (LEAN && !wv) { /* LEAN: y = t * 1.0f without a weight */
                    #pragma unroll
                    for (int c = 0; c < VEC / 4; c++) psm[c * nv + i] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                }
                if (wv) {
                    held_param<TX, VEC, W32, CL>(wv, i, t, l2_last);
                    #pragma unroll
                    for (int c = 0; c < VEC / 4; c++)
                        psm[c * nv + i] = make_float4(t[4 * c] + p.w_off, t[4 * c + 1] + p.w_off,
                                                      t[4 * c + 2] + p.w_off, t[4 * c + 3] + p.w_off);
                }
                if (bv && LEAN != 1) {
                    held_param<TX, VEC, W32, CL>(bv, i, t, l2_last);
                    #pragma unroll
                    for (int c = 0; c < VEC / 4; c++)
                        psm[(boff + c) * nv + i] = make_float4(t[4 * c], t[4 * c + 1], t[4 * c + 2], t[4 * c + 3]);
                }
            }
            __syncthreads();
            filled = true;
        }
        /* vector v of the shared weight (k 0) or bias (k 1) */
        [[maybe_unused]] auto smem_param = [&](int k, int v, float (&t)[VEC]) {
            const float4 *psm = (const float4 *)dyn_smem + (k && wv ? VEC / 4 : 0) * nv;
            #pragma unroll
            for (int c = 0; c < VEC / 4; c++) {
                const float4 f = psm[c * nv + v];
                t[4 * c] = f.x, t[4 * c + 1] = f.y, t[4 * c + 2] = f.z, t[4 * c + 3] = f.w;
            }
        };
        /* LEAN: vector u of this lane's shared weight (k 0) or bias (k 1),
         * by its 32-bit shared address */
        [[maybe_unused]] unsigned lean_b = 0, lean_s = 0;
        [[maybe_unused]] auto lean_param = [&](int k, int u, float (&t)[VEC]) {
            #pragma unroll
            for (int c = 0; c < VEC / 4; c++) {
                /* nv = 4 * tpr: slot (k * VEC / 4 + c) * 4 + u, lean_s bytes apart */
                const unsigned a = lean_b + lean_s * (unsigned)((k * (VEC / 4) + c) * 4 + u);
                asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                    : "=f"(t[4 * c]), "=f"(t[4 * c + 1]), "=f"(t[4 * c + 2]), "=f"(t[4 * c + 3])
                    : "r"(a));
            }
        };
        /* ODD: this lane's head or tail element (column ec), h in fp32 */
        [[maybe_unused]] int64_t ec = 0;
        [[maybe_unused]] float he = 0.0f;
        const bool edge = ODD && row_ok && first == 0 && lane < ne; /* CL: on the cluster's first CTA */
        if constexpr (ODD) {
            ec = lane < hd ? lane : hd + (int64_t)nb * VEC + (lane - hd);
            if (edge) {
                he = to_f32(xrow[ec]);
                if (RES && p.res) he += to_f32(((const TX *)p.res)[row * p.sres + ec]);
            }
        }
        /* h of vector u in fp32, from the raw vectors */
        auto held_raw = [&](int u, float (&h)[VEC]) {
            unpack_raw<TX, VEC>(raw[u], h);
            if constexpr (RES) {
                float r[VEC];
                unpack_raw<TX, VEC>(rraw[u], r);
                #pragma unroll
                for (int j = 0; j < VEC; j++) h[j] += r[j];
            }
        };
        /* KEEP: h formed once, the raw vectors dead after it; LayerNorm's
         * centring pass leaves h - mean there */
        [[maybe_unused]] float hk[KEEP ? U : 1][VEC];
        if constexpr (KEEP) {
            #pragma unroll
            for (int u = 0; u < U; u++) held_raw(u, hk[u]);
        }
        auto held = [&](int u, float (&h)[VEC]) {
            if constexpr (KEEP) {
                #pragma unroll
                for (int j = 0; j < VEC; j++) h[j] = hk[u][j];
            } else {
                held_raw(u, h);
            }
        };
        /* LayerNorm over a cluster: each CTA's exact two-pass statistics of
         * its slice (its own barriers), merged over the cluster in one
         * exchange (cluster_merge) instead of a cluster barrier per pass. */
        /* the slice's element count; 0 for a CTA past the row's end (the
         * last of a cluster whose slices, tpr rounded up to whole warps,
         * overshoot the row: bf16 65544 in 8 CTAs of 160 threads holds 10240
         * vectors, the eighth CTA none of the 8193) */
        const float n_here =
            LN && CL ? (float)(max(0, min(nb - first, tpr * U)) * VEC + (ODD && first == 0 ? ne : 0)) : n;
        float mean = 0.0f;
        if constexpr (LN) {
            float s[1] = {0.0f};
            #pragma unroll
            for (int u = 0; u < U; u++) {
                float h[VEC];
                held(u, h);
                #pragma unroll
                for (int j = 0; j < VEC; j++) s[0] += h[j];
            }
            if constexpr (ODD) s[0] += he;
            row_allreduce<1, false, true, (LEAN > 0)>(s, sm, buf, tpr, sub, 1);
            mean = s[0] / n_here;
        }
        float q[1] = {0.0f};
        #pragma unroll
        for (int u = 0; u < U; u++) {
            if (LN && !LEAN && first + lane + u * tpr >= nb) continue; /* zeros there, not -mean */
            float h[VEC];
            held(u, h);
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float d = h[j] - mean;
                q[0] += d * d;
                if constexpr (CENTRE) hk[u][j] = d;
            }
        }
        if (edge) q[0] += (he - mean) * (he - mean);
        row_allreduce<1, false, true, (LEAN > 0)>(q, sm, buf, tpr, sub, LN ? 1 : C);
        if constexpr (LN && CL) {
            const MeanM2 m = cluster_merge({n_here, mean, q[0]}, cl_slot, cl_buf, C);
            mean = m.mean;
            q[0] = m.m2;
        }
        /* Done reading the other CTAs' shared memory: arrive now, wait
         * after the writes (the exit barrier, off the critical path). */
        if constexpr (CL) cluster_arrive();
        const float rstd = rstd_of(q[0], n, p.eps);
        if (!row_ok) continue; /* after the reductions: every thread takes part */
        if (lane == 0 && first == 0) {
            if (p.rstd) p.rstd[row] = rstd;
            if (p.mean) p.mean[row] = mean;
        }
        TX *yrow = (TX *)p.y + row * p.sy;
        uint4 *yv = (uint4 *)(yrow + hd);
        /* FMA (see FN_FWD_HELD_LN_FMA): LayerNorm's scale as one fma */
        constexpr bool FMA = LN && FN_FWD_HELD_LN_FMA;
        [[maybe_unused]] const float rstd_off = rstd * p.w_off;
        if constexpr (LEAN) {
            /* the shared addresses formed here, in each row: formed once
             * ahead of the loop, the 16 of them were kept there and spilled
             * (4-36 bytes; ptxas) */
            asm volatile("mov.u32 %0, %1;" : "=r"(lean_b) : "r"(lean_base));
            asm volatile("mov.u32 %0, %1;" : "=r"(lean_s) : "r"(16u * (unsigned)tpr));
        }
        #pragma unroll
        for (int u = 0; u < U; u++) {
            const int v = first + lane + u * tpr;
            if (!LEAN && v >= nb) continue;
            float h[VEC], y[VEC];
            held(u, h);
            if constexpr (RES)
                if (p.res_out) store_vec<TX, VEC>((TX *)p.res_out + row * p.sres_out + hd + (int64_t)v * VEC, 0, h);
            if constexpr (LEAN) {
                float w[VEC];
                lean_param(0, u, w); /* w + w_off, or 1 */
                if constexpr (LEAN == 2) {
                    float b[VEC];
                    lean_param(1, u, b);
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) y[j] = fmaf((CENTRE ? h[j] : h[j] - mean) * rstd, w[j], b[j]);
                } else {
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) y[j] = (CENTRE ? h[j] : h[j] - mean) * rstd * w[j];
                }
            } else if (FMA && wv) {
                float w[VEC];
                if (ODD && hd) unpack_raw<TX, VEC>(held_param_shifted<TX, VEC, CL>((const TX *)p.w, v, hd, p.cols, l2_last), w);
                else held_param<TX, VEC, W32, CL>(wv, v, w, l2_last);
                #pragma unroll
                for (int j = 0; j < VEC; j++) y[j] = (CENTRE ? h[j] : h[j] - mean) * fmaf(w[j], rstd, rstd_off);
            } else {
                #pragma unroll
                for (int j = 0; j < VEC; j++) y[j] = (CENTRE ? h[j] : h[j] - mean) * rstd;
                if (wv) {
                    float w[VEC];
                    if constexpr (SMW) {
                        smem_param(0, v, w); /* w + w_off */
                        #pragma unroll
                        for (int j = 0; j < VEC; j++) y[j] *= w[j];
                    } else {
                        if (ODD && hd) unpack_raw<TX, VEC>(held_param_shifted<TX, VEC, CL>((const TX *)p.w, v, hd, p.cols, l2_last), w);
                        else held_param<TX, VEC, W32, CL>(wv, v, w, l2_last);
                        #pragma unroll
                        for (int j = 0; j < VEC; j++) y[j] *= w[j] + p.w_off;
                    }
                }
            }
            if (!LEAN && bv) {
                float b[VEC];
                if (SMW) smem_param(1, v, b);
                else if (ODD && hd) unpack_raw<TX, VEC>(held_param_shifted<TX, VEC, CL>((const TX *)p.b, v, hd, p.cols, l2_last), b);
                else held_param<TX, VEC, W32, CL>(bv, v, b, l2_last);
                #pragma unroll
                for (int j = 0; j < VEC; j++) y[j] += b[j];
            }
            store_vec<TX, VEC>((TX *)(yv + v), 0, y);
        }
        if (edge) {
            if constexpr (RES)
                if (p.res_out) ((TX *)p.res_out)[row * p.sres_out + ec] = from_f32<TX>(he);
            float ye = (he - mean) * rstd;
            if (FMA && wv) ye = (he - mean) * fmaf(to_f32(((const TX *)p.w)[ec]), rstd, rstd_off);
            else if (wv) ye *= to_f32(((const TX *)p.w)[ec]) + p.w_off;
            if (bv) ye += to_f32(((const TX *)p.b)[ec]);
            yrow[ec] = from_f32<TX>(ye);
        }
        if constexpr (CL) cluster_wait(); /* every CTA read our row sums: we may exit, or reuse them */
    }
}

/* ---- launchers ------------------------------------------------------------ */

/* The common call, for which the kernel drops every feature branch (see
 * PLAIN in the kernel): staged x, the weight (and bias) cached, no residual, y
 * of the activation dtype (launch_plain checks whether the row fills the
 * tile exactly). 0: not such
 * a call; 1: without bias; 2: with a bias (LayerNorm's usual case: a variant
 * of its own, since a run-time bias test kept the general kernel's registers).
 * With res_ok (the 16-bit tiles over a cluster), the residual call too:
 * PLAIN_RES + 1 or 2. The backend's occupancy cache keys on the same
 * features (occ_variant). */
static int fwd_is_plain(const fn_fwd_params &q, bool ones = false, bool res_ok = false)
{
    if (!(q.pipe && q.wcache && (q.w || ones) && q.dt_y == q.dt_x)) return 0;
    const int base = q.b ? 2 : 1;
    if (!q.res && !q.res_out) return base;
    /* res_ok: the residual call's promise (PLAIN_RES + 1 or 2, see PRES in
     * the kernel): x and the residual of one dtype, residual_out (if given)
     * of that dtype too, a weight */
    if (res_ok && q.plain_res && q.w && q.res && q.dt_res == q.dt_x && (!q.res_out || q.dt_res_out == q.dt_x))
        return PLAIN_RES + base;
    return 0;
}

/* f(std::integral_constant<int, PLAIN>) for plain = 1, 2 and, where RES,
 * PLAIN_RES + 1 or 2 (the instances the kernel has). */
template <bool RES, typename F>
static cudaError_t with_plain(int plain, F &&f)
{
    if constexpr (RES) {
        if (plain == PLAIN_RES + 1) return f(std::integral_constant<int, PLAIN_RES + 1>{});
        if (plain == PLAIN_RES + 2) return f(std::integral_constant<int, PLAIN_RES + 2>{});
    }
    if (plain == 1) return f(std::integral_constant<int, 1>{});
    return f(std::integral_constant<int, 2>{});
}

/* A PLAIN variant: with column checks (EXACT = false) where the row does not
 * fill the tile; else with EPT 32 (the planner's choice for 16-bit rows from
 * N = 1024 up) and a power-of-two tpr in a CTA of max(tpr, 256) threads, the
 * one compiled for that tpr. */
template <typename TX, int VEC, int EPT, int PLAIN, bool DEEP = false, bool ONE = false>
static cudaError_t launch_plain(const fn_fwd_params &q, int grid, int threads, size_t smem, cudaStream_t stream,
                                int *active)
{
    if (q.cols != (int64_t)q.cluster * q.tpr * EPT) /* the tile has idle columns: the column checks stay */
        return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, PLAIN, 0, false, false, DEEP, ONE>, q, grid,
                               threads, smem, q.cluster, stream, active);
    auto launch = [&](auto tpr) { /* TPR = 0: the run-time tpr */
        return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, PLAIN, decltype(tpr)::value, true, false, DEEP, ONE>,
                               q, grid, threads, smem, q.cluster, stream, active);
    };
    auto run_time_tpr = [&] { return launch(std::integral_constant<int, 0>{}); };
    if constexpr (EPT == 32 && sizeof(TX) == 2) { /* fp32 (over a cluster): the run-time tpr */
        if (threads == static_tpr_threads(q.tpr)) {
            /* over a cluster: the planner's CTAs of 256 and 512 threads */
            if constexpr (DEEP || (PLAIN & PLAIN_RES))
                return with_static_tpr<256, 512>(q.tpr, launch, run_time_tpr);
            else
                return with_static_tpr<8, 32, 64, 128, 256, 512>(q.tpr, launch, run_time_tpr);
        }
    }
    return run_time_tpr();
}

/* Step 113: LAG also on LayerNorm's 16-bit exact tiles of 256 threads with a
 * bias over 8 and 16 CTAs (65536, 131072; two stages: launch_rows's ln256),
 * what FUSEDNORM_FWD_LAG=2 gives every 256-thread tile. H200, % of copy,
 * three stages without LAG -> two with it: bf16 65536 89.4 -> 92.0, fp16
 * 65536 89.7 -> 91.3, bf16 131072 82.2 -> 87.5 (the residual call, PLAIN_RES,
 * unmoved: docs/perf.md session 38). 0: those tiles as before; a macro, so
 * that a lab build can set it (-DCMAKE_CUDA_FLAGS=-DFN_FWD_LAG_LN256=0). */
#ifndef FN_FWD_LAG_LN256
#define FN_FWD_LAG_LN256 1
#endif
/* A PLAIN variant with the exchange in two halves (LAG): the exact 16-bit
 * tiles of one row a CTA of 256 or 512 threads over a cluster (launch_rows
 * checks), compiled for that tpr. */
template <typename TX, int VEC, int EPT, int PLAIN, bool DEEP>
static cudaError_t launch_lag(const fn_fwd_params &q, int grid, int threads, size_t smem, cudaStream_t stream,
                              int *active)
{
    auto launch = [&](auto tpr) {
        return launch_or_query(
            norm_fwd_rows_in_registers<TX, VEC, EPT, PLAIN, decltype(tpr)::value, true, false, DEEP, false, true>, q,
            grid, threads, smem, q.cluster, stream, active);
    };
    return q.tpr == 512 ? launch(std::integral_constant<int, 512>{}) : launch(std::integral_constant<int, 256>{});
}

/* Shared memory of the SHIFT kernels (16-bit rows, 8-element vectors):
 * FN_SHIFT_STAGES stages of x's (and the residual's) chunks, two sets of
 * output runs of y (and residual_out), then the weight (and bias) cache, at
 * *cache_off. */
static size_t fwd_shift_smem(const fn_fwd_params &p, int ept, size_t *cache_off)
{
    const int nthr = p.rows_per_block * p.tpr;
    const size_t run = (size_t)shift_run_chunks(ept / 8 * p.tpr) * 16 * p.rows_per_block;
    const size_t stages = FN_SHIFT_STAGES * (size_t)shift_stage_chunks(ept / 8, nthr, p.tpr) * 16 * (1 + (p.res != nullptr));
    const size_t outs = 2 * run * (1 + (p.res_out != nullptr));
    *cache_off = stages + outs;
    return stages + outs + (size_t)((p.w != nullptr) + (p.b != nullptr)) * p.tpr * ept * sizeof(float);
}

/* A PLAIN SHIFT variant: with EPT 16 or 32 and tpr in {64, 128, 160, 192,
 * 224, 256} (CTAs of static_tpr_threads), the one compiled for that tpr. With EPT 32 and another
 * tpr, the general SHIFT kernel: the PLAIN one at a run-time tpr spilled
 * (128 registers, 100 bytes), the general one did not. */
template <typename TX, int VEC, int EPT, int PLAIN>
static cudaError_t launch_shift_plain(const fn_fwd_params &q, int grid, int threads, size_t smem,
                                      cudaStream_t stream, int *active)
{
    auto launch = [&](auto tpr) { /* TPR = 0: the run-time tpr */
        return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, PLAIN, decltype(tpr)::value, false, true>, q,
                               grid, threads, smem, q.cluster, stream, active);
    };
    auto run_time_tpr = [&] {
        if constexpr (EPT == 32)
            return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, 0, 0, false, true>, q, grid, threads, smem,
                                   q.cluster, stream, active);
        else
            return launch(std::integral_constant<int, 0>{});
    };
    if constexpr (EPT >= 16)
        if (threads == static_tpr_threads(q.tpr) && q.rows_per_block == threads / q.tpr)
            return with_static_tpr<64, 128, 160, 192, 224, 256>(q.tpr, launch, run_time_tpr);
    return run_time_tpr();
}

/* Where the PLAIN tiles over a cluster stage FN_DEEP_STAGES rows (the
 * measurements in launch_rows below): f32 for fp32 x, plain as fwd_is_plain,
 * exact: the row fills the tile, lag: the tile runs LAG (launch_lag). */
static bool fwd_deep_rule(bool f32, int plain, int cluster, int tpr, int ept, bool exact, bool lag)
{
    const bool ln_rule = plain == 2 && !lag && (f32 ? cluster <= 16 : cluster == 8 || cluster == 16);
    return exact && ((cluster <= 8 && ((f32 && plain == 2) || (cluster == 8 && (!f32 ? plain == 1 : ept == 32)))) ||
                     (!f32 && plain == 1 && cluster == 16 && tpr == 256) || ln_rule);
}

/* The ODD tile's instances (see the kernel), by elements a thread and vector
 * width: the planner's tiles over a cluster (16-bit at 32 elements, fp32 at
 * 16 and 32). fn_fwd_odd_fits asks the same, so that the backend never
 * plans a tile that has no instance. */
__host__ __device__ constexpr bool fwd_odd_instance(int ept, int vec, int x_bytes)
{
    return vec * x_bytes == 16 && (x_bytes == 2 ? ept == 32 : ept == 16 || ept == 32);
}

/* The ODD tile's PLAIN variant for a call: 1 or 2 (a bias) for the common
 * call (no residual, y of x's dtype; without a weight a weight of ones, as
 * launch_rows), 0 none. The backend checked the offsets (odd_phase). */
static int fwd_odd_plain(const fn_fwd_params &p)
{
    fn_fwd_params o = p;
    o.pipe = o.wcache = 1;
    return p.res || p.res_out ? 0 : fwd_is_plain(o, true);
}

/* Shared memory of the ODD tile, as the aligned tile's: `stages` stages of
 * the body's chunks, then the weight (or ones) and bias cache at *cache_off. */
static size_t fwd_odd_smem(const fn_fwd_params &p, int ept, int vec, int threads, int stages, size_t *cache_off)
{
    *cache_off = (size_t)stages * (size_t)(ept / vec) * threads * 16;
    return *cache_off + (size_t)(1 + (p.b != nullptr)) * p.tpr * ept * sizeof(float);
}

/* The ODD tile (the backend checked fn_fwd_odd_fits): FN_DEEP_STAGES where
 * the aligned tile of the body's columns takes them (fwd_deep_rule; never
 * LAG) and they fit, compiled for tpr 256 (the planner's CTAs up to 64 KiB
 * a row) or a run-time tpr. */
template <typename TX, int VEC, int EPT>
static cudaError_t launch_odd(const fn_fwd_params &p, int grid, int threads, cudaStream_t stream, int *active)
{
    const int plain = fwd_odd_plain(p);
    if (plain != 1 && plain != 2) return cudaErrorInvalidValue;
    fn_fwd_params q = p;
    q.pipe = q.wcache = 1;
    const bool body_exact = q.cols / VEC * VEC == (int64_t)q.cluster * q.tpr * EPT;
    /* p.odd == 2 (lab knob FUSEDNORM_FWD_ODD=2, unmeasured): LAG where the
     * aligned tile of the body's columns takes it (launch_rows' rule), on
     * the 16-bit 256-thread tiles */
    constexpr bool LAG_OK = sizeof(TX) == 2 && EPT == 32;
    const bool lag = LAG_OK && p.odd == 2 && p.lag > 0 && q.cluster > 1 && threads == q.tpr && q.tpr == 256 && body_exact &&
                     (p.lag == 2 || (FN_FWD_LAG_LN256 && plain == 2 && (q.cluster == 8 || q.cluster == 16)));
    bool deep = q.cluster > 1 && (p.deep == 2 || (p.deep == 1 && fwd_deep_rule(sizeof(TX) == 4, plain, q.cluster, q.tpr,
                                                                                EPT, body_exact, lag)));
    size_t off, smem = fwd_odd_smem(q, EPT, VEC, threads, deep ? FN_DEEP_STAGES : FN_STAGES, &off);
    if (deep && (off > FN_MAX_STAGE_BYTES || smem > (size_t)p.smem_max)) {
        deep = false;
        smem = fwd_odd_smem(q, EPT, VEC, threads, FN_STAGES, &off);
    }
    q.wcache_off = (int)off;
    auto go = [&](auto pl, auto dp) {
        if constexpr (LAG_OK)
            if (lag)
                return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, decltype(pl)::value, 256, false, false,
                                                                  decltype(dp)::value, false, true, true>,
                                       q, grid, threads, smem, q.cluster, stream, active);
        auto at = [&](auto tpr) {
            return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, decltype(pl)::value, decltype(tpr)::value,
                                                              false, false, decltype(dp)::value, false, false, true>,
                                   q, grid, threads, smem, q.cluster, stream, active);
        };
        auto run_time_tpr = [&] { return at(std::integral_constant<int, 0>{}); };
        if (threads == q.tpr) return with_static_tpr<256>(q.tpr, at, run_time_tpr);
        return run_time_tpr();
    };
    if (plain == 1) return deep ? go(std::integral_constant<int, 1>{}, std::true_type{})
                                : go(std::integral_constant<int, 1>{}, std::false_type{});
    return deep ? go(std::integral_constant<int, 2>{}, std::true_type{}) : go(std::integral_constant<int, 2>{}, std::false_type{});
}

template <typename TX, int VEC, int EPT>
static cudaError_t launch_rows(const fn_fwd_params &p, int grid, int threads, cudaStream_t stream, int *active)
{
    if constexpr (fwd_odd_instance(EPT, VEC, (int)sizeof(TX)))
        if (p.odd) return launch_odd<TX, VEC, EPT>(p, grid, threads, stream, active);
    if constexpr (VEC > 1 && sizeof(TX) == 2) {
        if (p.shift) { /* the backend checked fn_fwd_shift_fits */
            fn_fwd_params q = p;
            size_t off;
            const size_t smem = fwd_shift_smem(q, EPT, &off);
            q.pipe = 1;
            q.wcache = q.w != nullptr || q.b != nullptr;
            q.wcache_off = (int)off;
            switch (fwd_is_plain(q)) {
            case 1: return launch_shift_plain<TX, VEC, EPT, 1>(q, grid, threads, smem, stream, active);
            case 2: return launch_shift_plain<TX, VEC, EPT, 2>(q, grid, threads, smem, stream, active);
            }
            return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, 0, 0, false, true>, q, grid, threads, smem,
                                   p.cluster, stream, active);
        }
    }
    /* FN_STAGES stages of x (and residual), 16-byte chunks per thread. */
    const size_t chunks = (size_t)chunks_of<TX, VEC>(p.dt_x) + (p.res ? chunks_of<TX, VEC>(p.dt_res) : 0);
    size_t smem = VEC > 1 ? FN_STAGES * (size_t)(EPT / VEC) * chunks * threads * 16 : 0;
    /* Past FN_MAX_STAGE_BYTES, staging would cost the residency that hides
     * latency in the first place: the largest tiles load straight into
     * registers. fp32 activations do too: their 16-byte loads already keep
     * enough bytes in flight, and staging them cost the forward 92% -> 78% of
     * copy bandwidth at N=4096 (docs/perf.md). */
    fn_fwd_params q = p;
    /* Over a cluster fp32 is staged and cached as well: there the next row's
     * loads must be in flight while this row's sums cross the cluster, and
     * its PLAIN tiles meet by the exchange (fp32 RMSNorm 32768 in the
     * unstaged tile under the cluster barrier: 83.5 -> 74.3% of copy against
     * the held kernel, docs/perf.md step 90; step 91 for this form). PLAIN
     * fp32 tiles are compiled for EPT 16 and 32 only (the planner's); an
     * fp32 call over a cluster that is not the common one (no weight, a
     * residual, y of another dtype) takes FWD_CLUSTER_GENERAL (step 94). */
    constexpr bool F32_PLAIN_OK = sizeof(TX) == 4 && VEC > 1 && EPT >= 16;
    const bool staged_dtype = sizeof(TX) == 2 || (F32_PLAIN_OK && p.cluster > 1);
    /* smem_max: devices with less shared memory per block (99 KiB opt-in on
     * sm_86/sm_89, which run the sm_80 code) load straight into registers
     * rather than fail the launch. */
    q.pipe = staged_dtype && smem > 0 && smem <= stage_cap(threads, p.cluster, p.smem_max) && smem <= (size_t)p.smem_max;
    if (!q.pipe) smem = 0;
    /* The weight (and bias) cache after the stages: the CTA's tpr*EPT columns
     * in fp32. A call without a weight that is otherwise the common one
     * caches a weight of ones and takes the PLAIN kernel: one FMUL an element
     * instead of the general kernel's branches (bf16 65536 over 8 CTAs without
     * a weight: 72.0 -> 91.9% of copy; docs/perf.md step 95). */
    const bool ones = !p.w && !p.res && !p.res_out && p.dt_y == p.dt_x && q.pipe;
    const size_t cache_bytes = (size_t)((p.w != nullptr || ones) + (p.b != nullptr)) * p.tpr * EPT * sizeof(float);
    q.wcache = staged_dtype && cache_bytes > 0 && smem + cache_bytes <= (size_t)p.smem_max;
    q.wcache_off = (int)smem;
    if (q.wcache) smem += cache_bytes;
    if constexpr (VEC > 1 && (sizeof(TX) == 2 || F32_PLAIN_OK)) {
        /* The residual call (PLAIN_RES): the 16-bit tiles over a cluster,
         * where the planner gives that call this kernel (plan.h). H100, bf16
         * RMSNorm + residual, % of copy, general kernel -> PLAIN_RES: 32768
         * 94.9 -> 97.1, 65536 93.4 -> 95.8, 131072 95.5 -> 98.5, 262144 97.3
         * -> 98.6 (docs/perf.md step 106). */
        constexpr bool RES_EPT = sizeof(TX) == 2 && EPT == 32;
        const int plain = fwd_is_plain(q, ones, RES_EPT && q.cluster > 1);
        /* LAG (the exchange in two halves, see the kernel): the exact 16-bit
         * tiles of one row a CTA of 512 threads over a cluster, alone on
         * their SMs, where each row's wait for the cluster left the SM idle
         * (H200, % of copy: RMSNorm bf16 262144 84.9 -> 94.1, fp16 84.8 ->
         * 94.1, LayerNorm bf16 262144 77.5 -> 80.7; docs/perf.md step 105).
         * Not on the 256-thread tiles, two CTAs an SM: there the other CTA
         * hides the wait (RMSNorm bf16 131072 94.0 -> 91.3), and LayerNorm's
         * three stages and cache leave no shared memory for the exchange's
         * buffers (65536 91.9 -> 71.8: one CTA an SM). LayerNorm's 16-bit
         * 8 x 256 and 16 x 256 (65536, 131072) with LAG at two stages
         * instead (ln_rule below yields to lag): see FN_FWD_LAG_LN256.
         * launch_lag compiles 256 threads for them and the lab. */
        constexpr bool LAG_EPT = sizeof(TX) == 2 && EPT == 32;
        /* PRES under LAG: one row of the residual's chunks after the cache
         * (hold, see the kernel); 262144 in 16 x 512: 128 KiB of stages, 64
         * of weights and 32 held, within sm_90's 227 KiB */
        const size_t hold = (plain & PLAIN_RES) ? (size_t)(EPT / VEC) * threads * 16 : 0;
        const bool ln256 = FN_FWD_LAG_LN256 && plain == 2 && (q.cluster == 8 || q.cluster == 16);
        const bool lag = LAG_EPT && plain && p.lag > 0 && q.cluster > 1 && threads == q.tpr &&
                         (q.tpr == 512 || (q.tpr == 256 && (p.lag == 2 || ln256))) &&
                         q.cols == (int64_t)q.cluster * q.tpr * EPT;
        constexpr bool DEEP_EPT = sizeof(TX) == 2 ? EPT == 32 : EPT >= 16; /* the planner's over a cluster */
        if constexpr (DEEP_EPT) {
            const size_t deep_stages = (size_t)FN_DEEP_STAGES * (EPT / VEC) * chunks * threads * 16;
            const size_t deep_smem = deep_stages + (smem - q.wcache_off);
            const bool exact = q.cols == (int64_t)q.cluster * q.tpr * EPT;
            /* FN_DEEP_STAGES where they won (docs/perf.md step 97, % of copy):
             * exact tiles on 8 CTAs of 16-bit RMSNorm (bf16 65536 91.6 ->
             * 94.5, without a weight 92.3 -> 94.8, 131072 in 8 x 512 88.3 ->
             * 89.5) and of fp32 at 32 elements a thread (RMSNorm 65536 93.7
             * -> 96.4, LayerNorm 84.5 -> 86.9), and fp32 with a bias on up to
             * 8 (LayerNorm 24576 87.2 -> 91.4, 32768 86.6 -> 88.8, 49152 72.3
             * -> 73.5). Elsewhere they lost 0.4-3.3 points: 16-bit LayerNorm
             * (by its sizes still two CTAs an SM), fp32 RMSNorm on 3..5 CTAs
             * and in 8 x 384 (most of them a CTA an SM fewer), the inexact
             * tiles (40000, 20000), clusters of 16 (fp32 98304 95.4 -> 92.1)
             * but 16-bit RMSNorm's 16 x 256 (131072: 85.6 -> 92.0, step 99;
             * 262144 in 16 x 512 78.7 -> 79.2, within noise, keeps two).
             * After step 100 (fewer instructions a row) LayerNorm's exact
             * tiles gain too (ln_rule, step 101): bf16 65536 in 8 x 256 86.8
             * -> 91.3, 131072 in 16 x 256 81.0 -> 83.2, 262144 in 16 x 512
             * 74.4 -> 77.0, fp32 131072 in 16 x 256 x 32 86.3 -> 88.0. */
            /* Not with LAG (LayerNorm bf16 262144 in 16 x 512 on the H100, % of
             * copy: two stages 96.0, three 92.7; without LAG 94.6 / 94.5). */
            const bool rule = fwd_deep_rule(sizeof(TX) == 4, plain, q.cluster, q.tpr, EPT, exact, lag);
            if (plain && q.wcache && q.cluster > 1 && (p.deep == 2 || (p.deep == 1 && rule)) &&
                deep_stages <= FN_MAX_STAGE_BYTES && deep_smem + (lag ? hold : 0) <= (size_t)p.smem_max) {
                fn_fwd_params d = q;
                d.wcache_off = (int)deep_stages;
                return with_plain<RES_EPT>(plain, [&](auto pl) {
                    constexpr int PL = decltype(pl)::value;
                    if constexpr (LAG_EPT)
                        if (lag) return launch_lag<TX, VEC, EPT, PL, true>(d, grid, threads, deep_smem + hold, stream, active);
                    return launch_plain<TX, VEC, EPT, PL, true>(d, grid, threads, deep_smem, stream, active);
                });
            }
        }
        if constexpr (sizeof(TX) == 4 && EPT == 32) {
            /* fp32 LayerNorm's 16 x 512 x 32 (262144): two stages (128 KiB)
             * and the weight and bias cache (128 KiB) pass smem_max; one
             * stage refilled at each row's start (ONE) leaves room for the
             * cache. */
            const size_t one = (size_t)(EPT / VEC) * chunks * threads * 16;
            /* q with one stage, the cache (if any) after it */
            auto one_stage = [&](bool cache) {
                fn_fwd_params o = q;
                o.pipe = 1;
                o.wcache = cache;
                o.wcache_off = (int)one;
                return o;
            };
            const fn_fwd_params ln_one = one_stage(true);
            if (!q.wcache && q.cluster > 1 && one + cache_bytes <= (size_t)p.smem_max && fwd_is_plain(ln_one, ones) == 2)
                return launch_plain<TX, VEC, EPT, 2, false, true>(ln_one, grid, threads, one + cache_bytes, stream, active);
            /* RMSNorm + residual's 16 x 512 x 32 (262144, step 103): x and
             * the residual take 128 KiB a stage, two pass smem_max; one
             * stage refilled as each row is unstaged (ONE), beside the
             * weight cache (the planner streamed these rows before). */
            if (!plain && !q.pipe && q.cluster > 1 && one + cache_bytes <= (size_t)p.smem_max)
                return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, FWD_CLUSTER_GENERAL, 0, true, false, false, true>,
                                       one_stage(cache_bytes > 0), grid, threads, one + cache_bytes, p.cluster, stream, active);
        }
        if (plain)
            return with_plain<RES_EPT>(plain, [&](auto pl) {
                constexpr int PL = decltype(pl)::value;
                if constexpr (LAG_EPT)
                    if (lag && smem + hold <= (size_t)p.smem_max)
                        return launch_lag<TX, VEC, EPT, PL, false>(q, grid, threads, smem + hold, stream, active);
                return launch_plain<TX, VEC, EPT, PL>(q, grid, threads, smem, stream, active);
            });
    }
    if constexpr (F32_PLAIN_OK) /* fp32's other calls over a cluster: staged, the exchange */
        if (p.cluster > 1)
            return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, FWD_CLUSTER_GENERAL>, q, grid, threads,
                                   smem, p.cluster, stream, active);
    return launch_or_query(norm_fwd_rows_in_registers<TX, VEC, EPT, 0>, q, grid, threads, smem, p.cluster, stream,
                           active);
}

/* The EPT values instantiated for each vector width; the planner (plan.c)
 * picks among the same list: 4 (scalar and fp32 only), 8, 16, and 32 for
 * vector loads only (one element at a time, 32 would spill). */
template <typename TX, int VEC>
static cudaError_t dispatch_ept(const fn_fwd_params &p, int ept, int grid, int threads, cudaStream_t s, int *active)
{
    switch (ept) {
    case 4: if constexpr (VEC <= 4) return launch_rows<TX, VEC, 4>(p, grid, threads, s, active); break;
    case 8: return launch_rows<TX, VEC, 8>(p, grid, threads, s, active);
    case 16: return launch_rows<TX, VEC, 16>(p, grid, threads, s, active);
    case 32: if constexpr (VEC > 1) return launch_rows<TX, VEC, 32>(p, grid, threads, s, active); break;
    }
    return cudaErrorInvalidValue;
}

template <typename TX>
static cudaError_t dispatch_vec(const fn_fwd_params &p, int vec, int ept, int grid, int threads, cudaStream_t s,
                                int *active)
{
    constexpr int WIDE = 16 / sizeof(TX);
    if (vec == WIDE) return dispatch_ept<TX, WIDE>(p, ept, grid, threads, s, active);
    if (vec == 1) return dispatch_ept<TX, 1>(p, ept, grid, threads, s, active);
    return cudaErrorInvalidValue;
}

static cudaError_t rows_entry(const fn_fwd_params *p, int vec, int ept, int grid, int threads, void *stream,
                              int *active)
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->dt_x) {
    case FN_DT_F32: return dispatch_vec<float>(*p, vec, ept, grid, threads, s, active);
    case FN_DT_F16: return dispatch_vec<__half>(*p, vec, ept, grid, threads, s, active);
    case FN_DT_BF16: return dispatch_vec<__nv_bfloat16>(*p, vec, ept, grid, threads, s, active);
    }
    return cudaErrorInvalidValue;
}

template <typename TX, int WL1>
static cudaError_t stream_launch(const fn_fwd_params &p, int grid, int threads, cudaStream_t s)
{
    constexpr int VEC = 16 / sizeof(TX);
    const bool res = p.res || p.res_out;
    if (p.is_ln) {
        if (res) norm_fwd_stream<TX, VEC, true, true, WL1><<<grid, threads, 0, s>>>(p);
        else norm_fwd_stream<TX, VEC, true, false, WL1><<<grid, threads, 0, s>>>(p);
    } else {
        if (res) norm_fwd_stream<TX, VEC, false, true, WL1><<<grid, threads, 0, s>>>(p);
        else norm_fwd_stream<TX, VEC, false, false, WL1><<<grid, threads, 0, s>>>(p);
    }
    return cudaGetLastError();
}

template <typename TX>
static cudaError_t two_pass_entry(const fn_fwd_params &p, int grid, int threads, cudaStream_t s)
{
    constexpr int VEC = 16 / sizeof(TX);
    if (p.stream) {
        if (p.stream == FN_STREAM_WEIGHT_L1_KEEP) return stream_launch<TX, FN_L1_KEEP>(p, grid, threads, s);
        return stream_launch<TX, FN_L1_NONE>(p, grid, threads, s);
    }
    /* Always the vector kernel: it peels each row to its alignment itself. */
    norm_fwd_two_pass<TX, VEC><<<grid, threads, 0, s>>>(p);
    return cudaGetLastError();
}

/* U raw vectors per thread: 2 (lab only), 4 or 8 (the planner's; 4 with
 * the residual). Bounded for 2048 / 1536 / 1024 resident threads (32 / 40 /
 * 64 registers; with the residual 1536 / 1024: 40 / 54-64), no spills on
 * sm_90; KEEP's U = 4 (16-bit) for 1024 resident threads (56-64 registers),
 * with SMW's shared weight and bias where they fit FN_FWD_HELD_SMEM_W_MAX. */
template <typename TX, bool LN, bool RES, bool W32>
static cudaError_t held_launch(const fn_fwd_params &p, int u, int grid, int threads, cudaStream_t s)
{
    constexpr int VEC = 16 / sizeof(TX);
    if (p.cluster > 1) { /* a row over a cluster: U = 8, or 4 with the residual (never W32) */
        if constexpr (!W32) {
            if (u == (RES ? 4 : 8) && p.odd)
                return launch_or_query(norm_fwd_held<TX, VEC, LN, RES, W32, RES ? 4 : 8, 2, true, true>, p, grid,
                                       threads, 0, p.cluster, s, nullptr, LAUNCH_BALANCE);
            if (u == (RES ? 4 : 8))
                return launch_or_query(norm_fwd_held<TX, VEC, LN, RES, W32, RES ? 4 : 8, 2, true>, p, grid, threads,
                                       0, p.cluster, s, nullptr, LAUNCH_BALANCE);
        }
        return cudaErrorInvalidValue;
    }
    if (p.odd) { /* rows off a 16-byte boundary: U = 4 or 8, weights of dtype TX, a lane per edge element */
        if (p.tpr < 2 * (VEC - 1)) return cudaErrorInvalidValue;
        if constexpr (!W32) {
            if (u == 4) {
                norm_fwd_held<TX, VEC, LN, RES, W32, 4, 2, false, true><<<grid, threads, 0, s>>>(p);
                return cudaGetLastError();
            }
            if constexpr (!RES)
                if (u == 8) {
                    norm_fwd_held<TX, VEC, LN, RES, W32, 8, 2, false, true><<<grid, threads, 0, s>>>(p);
                    return cudaGetLastError();
                }
        }
        return cudaErrorInvalidValue;
    }
    switch (u) {
    case 2: norm_fwd_held<TX, VEC, LN, RES, W32, 2, RES ? 3 : 4><<<grid, threads, 0, s>>>(p); break;
    case 4:
        if constexpr (FN_FWD_HELD_SMEM_W && !(LN && FN_FWD_HELD_LN_FMA) && held_keeps<TX, 4, false, false>()) {
            /* LEAN: rows of exactly tpr * 4 vectors, the weight's slots always filled */
            const bool lean = FN_FWD_HELD_LEAN && p.lean && !RES && (int64_t)p.tpr * 4 * VEC == p.cols;
            const size_t smem = (size_t)p.cols * sizeof(float) * ((p.w || lean ? 1 : 0) + (p.b ? 1 : 0));
            if (smem && smem <= FN_FWD_HELD_SMEM_W_MAX) {
                if constexpr (!RES) /* the residual never LEAN (its forms spilled 28 bytes) */
                    if (lean) {
                        if (p.b) norm_fwd_held<TX, VEC, LN, RES, W32, 4, 2, false, false, true, 2><<<grid, threads, smem, s>>>(p);
                        else norm_fwd_held<TX, VEC, LN, RES, W32, 4, 2, false, false, true, 1><<<grid, threads, smem, s>>>(p);
                        break;
                    }
                norm_fwd_held<TX, VEC, LN, RES, W32, 4, 2, false, false, true><<<grid, threads, smem, s>>>(p);
                break;
            }
        }
        norm_fwd_held<TX, VEC, LN, RES, W32, 4, RES || held_keeps<TX, 4, false, false>() ? 2 : 3><<<grid, threads, 0, s>>>(p);
        break;
    case 8:
        if constexpr (RES) return cudaErrorInvalidValue; /* 128 registers of raw vectors */
        else norm_fwd_held<TX, VEC, LN, RES, W32, 8, 2><<<grid, threads, 0, s>>>(p);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename TX, bool W32>
static cudaError_t held_features(const fn_fwd_params &p, int u, int grid, int threads, cudaStream_t s)
{
    if (p.res || p.res_out)
        return p.is_ln ? held_launch<TX, true, true, W32>(p, u, grid, threads, s)
                       : held_launch<TX, false, true, W32>(p, u, grid, threads, s);
    return p.is_ln ? held_launch<TX, true, false, W32>(p, u, grid, threads, s)
                   : held_launch<TX, false, false, W32>(p, u, grid, threads, s);
}

/* W32: fp32 weight and bias with 16-bit x, a variant of its own (a run-time
 * test spilled 8-28 bytes in the 40-register variants; as variants, only
 * W32 LayerNorm at U = 2 and 4 spills, 4 bytes). */
template <typename TX>
static cudaError_t held_entry(const fn_fwd_params &p, int u, int grid, int threads, cudaStream_t s)
{
    if constexpr (sizeof(TX) == 2)
        if (p.dt_w == FN_DT_F32) return held_features<TX, true>(p, u, grid, threads, s);
    return held_features<TX, false>(p, u, grid, threads, s);
}

} // namespace fn

extern "C" int fn_launch_fwd_rows(const fn_fwd_params *p, int vec, int ept, int grid, int threads, void *stream)
{
    if (!fn_plan_cluster_xchg_ok(p->cluster, p->rows_per_block, p->tpr, threads)) /* a backstop (plan.h) */
        return (int)cudaErrorInvalidConfiguration;
    return (int)fn::rows_entry(p, vec, ept, grid, threads, stream, nullptr);
}

extern "C" int fn_max_active_fwd_rows(const fn_fwd_params *p, int vec, int ept, int threads, int *count)
{
    if (!fn_plan_cluster_xchg_ok(p->cluster, p->rows_per_block, p->tpr, threads)) /* a backstop (plan.h) */
        return (int)cudaErrorInvalidConfiguration;
    return (int)fn::rows_entry(p, vec, ept, 1, threads, nullptr, count);
}

extern "C" int fn_fwd_odd_fits(const fn_fwd_params *p, int vec, int ept, int threads)
{
    const int x_bytes = fn::dtype_bytes(p->dt_x);
    size_t off;
    return vec * x_bytes == 16 && fn::fwd_odd_instance(ept, vec, x_bytes) && fn::fwd_odd_plain(*p) != 0 &&
           threads == p->tpr && p->rows_per_block == 1 && p->tpr >= 2 * (vec - 1) &&
           fn::fwd_odd_smem(*p, ept, vec, threads, fn::FN_STAGES, &off) <= (size_t)p->smem_max;
}

extern "C" int fn_fwd_shift_fits(const fn_fwd_params *p, int ept)
{
    size_t off;
    return (p->dt_x == FN_DT_F16 || p->dt_x == FN_DT_BF16) && ept >= 8 &&
           fn::fwd_shift_smem(*p, ept, &off) <= (size_t)p->smem_max;
}

extern "C" int fn_launch_fwd_two_pass(const fn_fwd_params *p, int grid, int threads, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->dt_x) {
    case FN_DT_F32: return (int)fn::two_pass_entry<float>(*p, grid, threads, s);
    case FN_DT_F16: return (int)fn::two_pass_entry<__half>(*p, grid, threads, s);
    case FN_DT_BF16: return (int)fn::two_pass_entry<__nv_bfloat16>(*p, grid, threads, s);
    }
    return (int)cudaErrorInvalidValue;
}

extern "C" int fn_launch_fwd_held(const fn_fwd_params *p, int u, int grid, int threads, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->dt_x) {
    case FN_DT_F32: return (int)fn::held_entry<float>(*p, u, grid, threads, s);
    case FN_DT_F16: return (int)fn::held_entry<__half>(*p, u, grid, threads, s);
    case FN_DT_BF16: return (int)fn::held_entry<__nv_bfloat16>(*p, u, grid, threads, s);
    }
    return (int)cudaErrorInvalidValue;
}
