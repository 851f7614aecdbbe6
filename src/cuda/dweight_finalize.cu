/*
 * dweight / dbias from the backward's fp32 partial rows.
 *
 *   dweight[c] (=, or += with ACCUMULATE) sum_{i=0}^{partials-1} ws_dw[i][c]
 *   dbias[c]   likewise from ws_db
 *
 * The order of the sum is fixed (it depends only on `partials` and the block
 * shape, never on scheduling), so results are bitwise reproducible. A block
 * is 32 columns x 32 lanes of partial rows: lane t sums rows t, t+32, ... in
 * order, then lane 0 adds the 32 lane sums in order. partials == 0 (rows == 0)
 * writes zeros, or leaves the values under ACCUMULATE.
 *
 * Short rows give few blocks (N = 256: 8), each summing hundreds of partial
 * rows (one per CTA of the backward's persistent grid): the sum is a chain of
 * L2 latencies, so a lane keeps 8 loads in flight per output, dweight's and
 * dbias's in the same loop. Launched as a programmatic dependent of the
 * backward (sm_90): its CTAs start while the backward's last CTAs write their
 * partial rows and wait there (grid_dependency_wait) for them.
 */
#include "common.cuh"
#include "launch.cuh"

namespace fn {

constexpr int FIN_COLS = 32, FIN_LANES = 32, FIN_INFLIGHT = 8;

__global__ void __launch_bounds__(FIN_COLS *FIN_LANES) dweight_finalize(const fn_bwd_params p)
{
    __shared__ float part[2][FIN_LANES][FIN_COLS + 1];
    const int tx = threadIdx.x % FIN_COLS, ty = threadIdx.x / FIN_COLS;
    const int64_t col = (int64_t)blockIdx.x * FIN_COLS + tx;
    const float *ws_w = p.dw ? p.ws_dw : nullptr, *ws_b = p.db ? p.ws_db : nullptr;
    grid_dependency_wait(); /* the partial rows are the backward's */
    float sw = 0.0f, sb = 0.0f;
    if (col < p.cols) {
        /* FIN_INFLIGHT rows' loads in flight; the additions stay in row order. */
        int i = ty;
        for (; i + (FIN_INFLIGHT - 1) * FIN_LANES < p.partials; i += FIN_INFLIGHT * FIN_LANES) {
            float a[FIN_INFLIGHT], b[FIN_INFLIGHT];
            #pragma unroll
            for (int j = 0; j < FIN_INFLIGHT; j++) {
                const int64_t at = (int64_t)(i + j * FIN_LANES) * p.cols + col;
                a[j] = ws_w ? ws_w[at] : 0.0f;
                b[j] = ws_b ? ws_b[at] : 0.0f;
            }
            #pragma unroll
            for (int j = 0; j < FIN_INFLIGHT; j++) {
                sw += a[j];
                sb += b[j];
            }
        }
        for (; i < p.partials; i += FIN_LANES) {
            const int64_t at = (int64_t)i * p.cols + col;
            if (ws_w) sw += ws_w[at];
            if (ws_b) sb += ws_b[at];
        }
    }
    part[0][ty][tx] = sw;
    part[1][ty][tx] = sb;
    __syncthreads();
    if (ty < 2 && col < p.cols) {
        void *out = ty == 0 ? p.dw : p.db;
        const int dt = ty == 0 ? p.dt_dw : p.dt_db;
        if (out) {
            float t = 0.0f;
            #pragma unroll
            for (int l = 0; l < FIN_LANES; l++) t += part[ty][l][tx];
            if (p.accumulate) t = load_any(out, dt, col) + t;
            store_any(out, dt, col, t);
        }
    }
}

} // namespace fn

extern "C" int fn_launch_dweight_finalize(const fn_bwd_params *p, int dependent, void *stream)
{
    const int64_t blocks = (p->cols + fn::FIN_COLS - 1) / fn::FIN_COLS;
    return (int)fn::launch_or_query(fn::dweight_finalize, *p, (int)blocks, fn::FIN_COLS * fn::FIN_LANES, 0, 1,
                                    (cudaStream_t)stream, nullptr, dependent ? fn::LAUNCH_DEPENDENT : 0u);
}
