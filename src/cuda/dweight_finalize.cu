/*
 * dweight / dbias from the backward's fp32 partial rows.
 *
 *   dweight[c] (=, or += with ACCUMULATE) sum_{i=0}^{partials-1} ws_dw[i][c]
 *   dbias[c]   likewise from ws_db
 *
 * The order of the sum is fixed (it depends only on `partials` and the block
 * shape, never on scheduling), so results are bitwise reproducible. A block
 * is 32 columns x 8 lanes of partial rows: lane t sums rows t, t+8, ... in
 * order, then lane 0 adds the 8 lane sums in order. partials == 0 (rows == 0)
 * writes zeros, or leaves the values under ACCUMULATE.
 */
#include "common.cuh"

namespace fn {

constexpr int FIN_COLS = 32, FIN_LANES = 8;

__global__ void __launch_bounds__(FIN_COLS *FIN_LANES) dweight_finalize(const fn_bwd_params p)
{
    __shared__ float part[FIN_LANES][FIN_COLS + 1];
    const int tx = threadIdx.x % FIN_COLS, ty = threadIdx.x / FIN_COLS;
    const int64_t col = (int64_t)blockIdx.x * FIN_COLS + tx;
    for (int which = 0; which < 2; which++) {
        void *out = which == 0 ? p.dw : p.db;
        const float *ws = which == 0 ? p.ws_dw : p.ws_db;
        const int dt = which == 0 ? p.dt_dw : p.dt_db;
        if (!out) continue;
        float s = 0.0f;
        if (col < p.cols) {
            /* Four independent loads in flight; the additions stay in row order. */
            int i = ty;
            for (; i + 3 * FIN_LANES < p.partials; i += 4 * FIN_LANES) {
                const float a = ws[(int64_t)i * p.cols + col];
                const float b = ws[(int64_t)(i + FIN_LANES) * p.cols + col];
                const float c = ws[(int64_t)(i + 2 * FIN_LANES) * p.cols + col];
                const float d = ws[(int64_t)(i + 3 * FIN_LANES) * p.cols + col];
                s += a;
                s += b;
                s += c;
                s += d;
            }
            for (; i < p.partials; i += FIN_LANES) s += ws[(int64_t)i * p.cols + col];
        }
        part[ty][tx] = s;
        __syncthreads();
        if (ty == 0 && col < p.cols) {
            float t = 0.0f;
            #pragma unroll
            for (int l = 0; l < FIN_LANES; l++) t += part[l][tx];
            if (p.accumulate) t = load_any(out, dt, col) + t;
            store_any(out, dt, col, t);
        }
        __syncthreads();
    }
}

} // namespace fn

extern "C" int fn_launch_dweight_finalize(const fn_bwd_params *p, void *stream)
{
    const int64_t blocks = (p->cols + fn::FIN_COLS - 1) / fn::FIN_COLS;
    fn::dweight_finalize<<<(unsigned)blocks, fn::FIN_COLS * fn::FIN_LANES, 0, (cudaStream_t)stream>>>(*p);
    return (int)cudaGetLastError();
}
