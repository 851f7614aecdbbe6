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
 * sm_90, as in the forward) and norm_bwd_two_pass (any N; re-reads the row,
 * partial rows read-modify-written in the workspace, which the launcher zeroes).
 */
#include "common.cuh"

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
        if (p.atomic) {
            #pragma unroll
            for (int j = 0; j < VEC; j++) atomicAdd(dst + col + j, acc[k][j]);
        } else {
            store_vec<float, VEC>(dst, cid * p.cols + col, acc[k]);
        }
    }
}

template <typename TX, int VEC, int EPT>
__global__ void __launch_bounds__(512) norm_bwd_rows_in_registers(const fn_bwd_params p)
{
    constexpr int K = EPT / VEC;
    __shared__ RowReduceSmem sm;
    /* Dynamic shared memory: the two pipeline stages during the row loop, then
     * [rows_per_block][tpr*EPT] fp32 partials when rows_per_block > 1. */
    extern __shared__ __align__(16) unsigned char dyn_smem[];
    float *subrow_partials = reinterpret_cast<float *>(dyn_smem);
    int buf = 0;
    const int tpr = p.tpr, rpb = p.rows_per_block, sub = threadIdx.x / tpr, lane = threadIdx.x - sub * tpr;
    const int C = p.cluster;
    const int64_t nclusters = gridDim.x / C, cid = blockIdx.x / C;
    const int64_t N = p.cols, groups = (p.rows + rpb - 1) / rpb;
    const int64_t slice = (int64_t)(C > 1 ? cluster_rank() : 0) * tpr * EPT;
    const float inv_n = 1.0f / (float)N;
    const bool want_w = p.dw != nullptr, want_b = p.db != nullptr;

    bool col_ok[K];
    #pragma unroll
    for (int k = 0; k < K; k++) col_ok[k] = slice + ((int64_t)k * tpr + lane) * VEC < N;

    float dw[K][VEC], db[K][VEC];
    #pragma unroll
    for (int k = 0; k < K; k++)
        #pragma unroll
        for (int j = 0; j < VEC; j++) dw[k][j] = db[k][j] = 0.0f;

    /* With vector access, the next row group's x and dy stream into shared
     * memory (cp.async) while this one is reduced and written. */
    const bool pipe = VEC > 1 && p.pipe;
    uint4 *stage = reinterpret_cast<uint4 *>(dyn_smem);
    const int nthr = blockDim.x, chx = chunks_of<TX, VEC>(p.dt_x), chy = chunks_of<TX, VEC>(p.dt_dy);
    const int per_stage = K * (chx + chy) * nthr; /* uint4 per stage */
    auto issue = [&](int64_t g, int st) {
        const int64_t row = g * rpb + sub;
        if (g < groups && row < p.rows) {
            uint4 *sx = stage + st * per_stage + threadIdx.x, *sy = sx + K * chx * nthr;
            #pragma unroll
            for (int k = 0; k < K; k++) {
                if (!col_ok[k]) continue;
                const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
                stage_vector(sx + k * chx * nthr, chx, nthr, p.x, row * p.sx + col, dtype_bytes(p.dt_x));
                stage_vector(sy + k * chy * nthr, chy, nthr, p.dy, row * p.sdy + col, dtype_bytes(p.dt_dy));
            }
        }
        cp_async_commit();
    };
    if (pipe) issue(cid, 0);

    int it = 0;
    for (int64_t g = cid; g < groups; g += nclusters, it++) {
        const int64_t row = g * rpb + sub;
        const bool row_ok = row < p.rows;
        float x[K][VEC], dy[K][VEC];
        if (pipe) {
            issue(g + nclusters, (it + 1) & 1);
            cp_async_wait<1>();
        }
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
            if (row_ok && col_ok[k]) {
                if (pipe) {
                    const uint4 *sx = stage + (it & 1) * per_stage + threadIdx.x, *sy = sx + K * chx * nthr;
                    unstage_vector<TX, VEC>(sx + k * chx * nthr, nthr, p.dt_x, x[k]);
                    unstage_vector<TX, VEC>(sy + k * chy * nthr, nthr, p.dt_dy, dy[k]);
                } else {
                    load_dyn<TX, VEC>(p.x, p.dt_x, row * p.sx + col, x[k]);
                    load_dyn<TX, VEC>(p.dy, p.dt_dy, row * p.sdy + col, dy[k]);
                }
            } else {
                #pragma unroll
                for (int j = 0; j < VEC; j++) x[k][j] = dy[k][j] = 0.0f;
            }
        }

        float mean = 0.0f, rstd = 0.0f;
        if (p.rstd) {
            if (row_ok) {
                rstd = p.rstd[row];
                if (p.is_ln) mean = p.mean[row];
            }
        } else {
            if (p.is_ln) {
                float s[1] = {0.0f};
                #pragma unroll
                for (int k = 0; k < K; k++)
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) s[0] += x[k][j];
                row_allreduce<1>(s, sm, buf, tpr, sub, C);
                mean = s[0] / (float)N;
            }
            float q[1] = {0.0f};
            #pragma unroll
            for (int k = 0; k < K; k++)
                if (row_ok && col_ok[k])
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) q[0] += (x[k][j] - mean) * (x[k][j] - mean);
            row_allreduce<1>(q, sm, buf, tpr, sub, C);
            rstd = rstd_of(q[0], (float)N, p.eps);
        }

        /* x becomes x_hat in place; the sums need g = dy*(w+w_off). */
        float s[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
            float w[VEC];
            if (p.w && col_ok[k]) load_dyn<TX, VEC>(p.w, p.dt_w, col, w);
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                x[k][j] = (x[k][j] - mean) * rstd;
                const float gv = p.w ? dy[k][j] * (w[j] + p.w_off) : dy[k][j];
                s[0] += x[k][j] * gv;
                s[1] += gv;
            }
        }
        if (p.is_ln) {
            row_allreduce<2>(s, sm, buf, tpr, sub, C);
        } else {
            float s1[1] = {s[0]};
            row_allreduce<1>(s1, sm, buf, tpr, sub, C);
            s[0] = s1[0];
            s[1] = 0.0f;
        }
        const float c1 = s[0] * inv_n, c2 = s[1] * inv_n;

        #pragma unroll
        for (int k = 0; k < K; k++) {
            if (!(row_ok && col_ok[k])) continue;
            const int64_t col = slice + ((int64_t)k * tpr + lane) * VEC;
            float w[VEC], dres[VEC], dx[VEC];
            if (p.w) load_dyn<TX, VEC>(p.w, p.dt_w, col, w);
            if (p.dres_out) load_dyn<TX, VEC>(p.dres_out, p.dt_dres_out, row * p.sdres_out + col, dres);
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float gv = p.w ? dy[k][j] * (w[j] + p.w_off) : dy[k][j];
                float v = rstd * (gv - c2 - x[k][j] * c1);
                if (p.dres_out) v += dres[j];
                dx[j] = v;
                dw[k][j] += dy[k][j] * x[k][j];
                db[k][j] += dy[k][j];
            }
            store_vec<TX, VEC>((TX *)p.dx, row * p.sdx + col, dx);
            if (p.dres) store_dyn<TX, VEC>(p.dres, p.dt_dres, row * p.sdres + col, dx);
        }
    }

    if (pipe) cp_async_wait<0>();
    /* One partial row per cluster: first the rows of this CTA are summed in
     * fixed order (sub 0, 1, ...) through shared memory. */
    if (want_w) write_partial_row<VEC, EPT>(dw, p.ws_dw, p, subrow_partials, sub, lane, slice, cid, col_ok);
    if (want_b) write_partial_row<VEC, EPT>(db, p.ws_db, p, subrow_partials, sub, lane, slice, cid, col_ok);
    cluster_exit_barrier(C);
}

template <typename TX, int VEC>
__global__ void __launch_bounds__(512) norm_bwd_two_pass(const fn_bwd_params p)
{
    __shared__ RowReduceSmem sm;
    int buf = 0;
    const int64_t N = p.cols, step = (int64_t)blockDim.x * VEC, first = (int64_t)threadIdx.x * VEC;
    const float inv_n = 1.0f / (float)N;
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
        float mean = 0.0f, rstd;
        if (p.rstd) {
            rstd = p.rstd[row];
            if (p.is_ln) mean = p.mean[row];
        } else {
            if (p.is_ln) {
                float s[1] = {0.0f};
                for (int64_t col = first; col < N; col += step) {
                    float v[VEC];
                    load_dyn<TX, VEC>(p.x, p.dt_x, row * p.sx + col, v);
                    #pragma unroll
                    for (int j = 0; j < VEC; j++) s[0] += v[j];
                }
                row_allreduce<1>(s, sm, buf, blockDim.x, 0, 1);
                mean = s[0] / (float)N;
            }
            float q[1] = {0.0f};
            for (int64_t col = first; col < N; col += step) {
                float v[VEC];
                load_dyn<TX, VEC>(p.x, p.dt_x, row * p.sx + col, v);
                #pragma unroll
                for (int j = 0; j < VEC; j++) q[0] += (v[j] - mean) * (v[j] - mean);
            }
            row_allreduce<1>(q, sm, buf, blockDim.x, 0, 1);
            rstd = rstd_of(q[0], (float)N, p.eps);
        }
        float s[2] = {0.0f, 0.0f};
        for (int64_t col = first; col < N; col += step) {
            float v[VEC], dy[VEC], w[VEC];
            load_dyn<TX, VEC>(p.x, p.dt_x, row * p.sx + col, v);
            load_dyn<TX, VEC>(p.dy, p.dt_dy, row * p.sdy + col, dy);
            if (p.w) load_dyn<TX, VEC>(p.w, p.dt_w, col, w);
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float gv = p.w ? dy[j] * (w[j] + p.w_off) : dy[j];
                s[0] += (v[j] - mean) * rstd * gv;
                s[1] += gv;
            }
        }
        row_allreduce<2>(s, sm, buf, blockDim.x, 0, 1);
        const float c1 = s[0] * inv_n, c2 = p.is_ln ? s[1] * inv_n : 0.0f;
        for (int64_t col = first; col < N; col += step) {
            float v[VEC], dy[VEC], w[VEC], dres[VEC], dx[VEC];
            load_dyn<TX, VEC>(p.x, p.dt_x, row * p.sx + col, v);
            load_dyn<TX, VEC>(p.dy, p.dt_dy, row * p.sdy + col, dy);
            if (p.w) load_dyn<TX, VEC>(p.w, p.dt_w, col, w);
            if (p.dres_out) load_dyn<TX, VEC>(p.dres_out, p.dt_dres_out, row * p.sdres_out + col, dres);
            #pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float xh = (v[j] - mean) * rstd;
                const float gv = p.w ? dy[j] * (w[j] + p.w_off) : dy[j];
                float d = rstd * (gv - c2 - xh * c1);
                if (p.dres_out) d += dres[j];
                dx[j] = d;
                /* Each column of this block's partial row belongs to one thread. */
                const int64_t at = (p.atomic ? 0 : (int64_t)blockIdx.x * N) + col + j;
                if (p.dw) {
                    if (p.atomic) atomicAdd(p.ws_dw + at, dy[j] * xh);
                    else p.ws_dw[at] += dy[j] * xh;
                }
                if (p.db) {
                    if (p.atomic) atomicAdd(p.ws_db + at, dy[j]);
                    else p.ws_db[at] += dy[j];
                }
            }
            store_vec<TX, VEC>((TX *)p.dx, row * p.sdx + col, dx);
            if (p.dres) store_dyn<TX, VEC>(p.dres, p.dt_dres, row * p.sdres + col, dx);
        }
    }
}

/* ---- launchers ------------------------------------------------------------ */

/* Two stages of x and dy, 16-byte chunks per thread (see the kernel). */
template <typename TX, int VEC, int EPT> static size_t bwd_stage_bytes(const fn_bwd_params &p, int threads)
{
    auto chunks = [](int dt) { return (size_t)VEC * (sizeof(TX) == 4 ? 4 : (dt == FN_DT_F32 ? 4 : 2)) / 16; };
    return 2 * (size_t)(EPT / VEC) * (chunks(p.dt_x) + chunks(p.dt_dy)) * threads * 16;
}

template <typename TX, int VEC, int EPT>
static cudaError_t launch_rows(const fn_bwd_params &p, int grid, int threads, cudaStream_t stream, int *active)
{
    auto kernel = norm_bwd_rows_in_registers<TX, VEC, EPT>;
    const size_t partial_bytes = p.rows_per_block > 1 ? (size_t)threads * EPT * sizeof(float) : 0;
    size_t stage_bytes = VEC > 1 ? bwd_stage_bytes<TX, VEC, EPT>(p, threads) : 0;
    fn_bwd_params q = p;
    q.pipe = stage_bytes > 0 && stage_bytes <= FN_MAX_STAGE_BYTES; /* see the forward's launcher */
    if (!q.pipe) stage_bytes = 0;
    const size_t smem = partial_bytes > stage_bytes ? partial_bytes : stage_bytes;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 0;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    if (p.cluster > 1) {
        if (p.cluster > 8) {
            cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            if (e != cudaSuccess) return e;
        }
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = p.cluster;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.numAttrs = 1;
    }
    if (active) {
        /* The query wants a grid that is a whole number of clusters. */
        cfg.gridDim = dim3(p.cluster);
        if (p.cluster > 1) return cudaOccupancyMaxActiveClusters(active, kernel, &cfg);
        int per_sm = 0, dev = 0, sms = 0;
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
        if (e == cudaSuccess) e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        *active = per_sm * sms;
        return e;
    }
    return cudaLaunchKernelEx(&cfg, kernel, q);
}

/* EPT instantiated (the planner's list): 4 (scalar and fp32 only), 8, and 16
 * for vector loads only (one element at a time, 16 would spill). */
template <typename TX, int VEC>
static cudaError_t dispatch_ept(const fn_bwd_params &p, int ept, int grid, int threads, cudaStream_t s, int *active)
{
    switch (ept) {
    case 4: if constexpr (VEC <= 4) return launch_rows<TX, VEC, 4>(p, grid, threads, s, active); break;
    case 8: return launch_rows<TX, VEC, 8>(p, grid, threads, s, active);
    case 16: if constexpr (VEC > 1) return launch_rows<TX, VEC, 16>(p, grid, threads, s, active); break;
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
static cudaError_t two_pass_entry(const fn_bwd_params &p, int vec, int grid, int threads, cudaStream_t s,
                                  int *active)
{
    constexpr int WIDE = 16 / sizeof(TX);
    if (active) {
        int per_sm = 0, dev = 0, sms = 0;
        cudaError_t e = vec == WIDE
                            ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_bwd_two_pass<TX, WIDE>, threads, 0)
                            : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_bwd_two_pass<TX, 1>, threads, 0);
        if (e == cudaSuccess) e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        *active = per_sm * sms;
        return e;
    }
    if (vec == WIDE) norm_bwd_two_pass<TX, WIDE><<<grid, threads, 0, s>>>(p);
    else norm_bwd_two_pass<TX, 1><<<grid, threads, 0, s>>>(p);
    return cudaGetLastError();
}

static cudaError_t two_pass_dispatch(const fn_bwd_params *p, int vec, int grid, int threads, void *stream, int *active)
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->dt_dx) {
    case FN_DT_F32: return two_pass_entry<float>(*p, vec, grid, threads, s, active);
    case FN_DT_F16: return two_pass_entry<__half>(*p, vec, grid, threads, s, active);
    case FN_DT_BF16: return two_pass_entry<__nv_bfloat16>(*p, vec, grid, threads, s, active);
    }
    return cudaErrorInvalidValue;
}

} // namespace fn

extern "C" int fn_launch_bwd_rows(const fn_bwd_params *p, int vec, int ept, int grid, int threads, void *stream)
{
    return (int)fn::rows_entry(p, vec, ept, grid, threads, stream, nullptr);
}

extern "C" int fn_max_active_bwd_rows(const fn_bwd_params *p, int vec, int ept, int threads, int *count)
{
    return (int)fn::rows_entry(p, vec, ept, 1, threads, nullptr, count);
}

extern "C" int fn_launch_bwd_two_pass(const fn_bwd_params *p, int vec, int grid, int threads, void *stream)
{
    return (int)fn::two_pass_dispatch(p, vec, grid, threads, stream, nullptr);
}

extern "C" int fn_max_active_bwd_two_pass(const fn_bwd_params *p, int vec, int threads, int *count)
{
    return (int)fn::two_pass_dispatch(p, vec, 1, threads, nullptr, count);
}
