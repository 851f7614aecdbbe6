/*
 * The backward's cluster exchange on its own (src/cuda/common.cuh:
 * cluster_xchg_init and row_allreduce with XCHG = true), on sm_90.
 *
 * A persistent kernel walks ROWS rows per cluster, as the backward does, and
 * reduces 1, 2 or 3 times a row (the last reduction carries two values, as
 * LayerNorm's pair does), over clusters of 2..16 CTAs (powers of two and
 * not) of 1..16 warps. Optionally one thread a CTA sleeps a random while
 * before a reduction, so that the CTAs drift apart and each buffer's reuse
 * (a CTA storing into a buffer the others may still read) is tried. The
 * values are small integers, so every sum is exact: each row's result in
 * every CTA must equal the sum computed here, and (with `check_all`) every
 * thread of a CTA must hold the same value.
 *
 * Prints its cases' summary ("N passed, N failed"); exits 77 (skipped by
 * ctest) without a CUDA device of compute capability 9 or more.
 */
#include "cuda/common.cuh"

#include <cstdio>
#include <vector>

using namespace fn;

static const int ROWS = 200;

/* a small integer of (row, reduction, value, CTA rank, thread) */
__host__ __device__ static unsigned mix(unsigned x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
__host__ __device__ static float value_of(int row, int red, int i, int rank, int t)
{
    return (float)(mix((unsigned)(row * 131 + red * 17 + i * 7 + rank * 1009 + t * 65537)) & 15u);
}

__device__ int g_disagree; /* threads whose sums differ from thread 0's */

/* reductions: 1..3 a row, or 0 for 1, 2, 3, 1, ... by row. sleep: one thread
 * a CTA sleeps before each reduction. out[cta][row][4]: the sums of
 * reductions 0..2 and the second value of the last. */
__global__ void exchange_kernel(float *out, int cluster, int reductions, int sleep, int check_all)
{
    __shared__ RowReduceSmem sm;
    __shared__ float thread0[4];
    int buf = 0;
    const int rank = (int)cluster_rank(), T = (int)blockDim.x, t = (int)threadIdx.x;
    cluster_xchg_init(sm, cluster);
    for (int row = 0; row < ROWS; row++) {
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int n = reductions ? reductions : row % 3 + 1;
        for (int red = 0; red < n; red++) {
            if (sleep && t == (int)(mix((unsigned)(row * 7 + red + rank * 3)) % (unsigned)T))
                __nanosleep(mix((unsigned)(row + red * 5 + rank)) % 3000u);
            if (red == n - 1) {
                float v[2] = {value_of(row, red, 0, rank, t), value_of(row, red, 1, rank, t)};
                row_allreduce<2, true>(v, sm, buf, T, 0, cluster);
                s[red] = v[0];
                s[3] = v[1];
            } else {
                float v[1] = {value_of(row, red, 0, rank, t)};
                row_allreduce<1, true>(v, sm, buf, T, 0, cluster);
                s[red] = v[0];
            }
        }
        if (check_all) {
            if (t == 0)
                for (int i = 0; i < 4; i++) thread0[i] = s[i];
            __syncthreads();
            for (int i = 0; i < 4; i++)
                if (thread0[i] != s[i]) atomicAdd(&g_disagree, 1);
            __syncthreads();
        }
        if (t == row % T)
            for (int i = 0; i < 4; i++) out[((size_t)blockIdx.x * ROWS + row) * 4 + i] = s[i];
    }
    cluster_exit_barrier(cluster);
}

int main()
{
    int dev = 0, major = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
        major < 9) {
        printf("SKIP: no CUDA device of compute capability 9 (clusters); the cluster exchange not tested\n");
        return 77;
    }
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (cudaFuncSetAttribute(exchange_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        printf("FAIL: cudaFuncSetAttribute(NonPortableClusterSizeAllowed)\n0 passed, 1 failed\n");
        return 1;
    }
    int passed = 0, failed = 0;
    for (int cluster : {2, 3, 4, 5, 8, 16})
        for (int threads : {32, 64, 96, 256, 512})
            for (int reductions = 0; reductions <= 3; reductions++)
                for (int mode = 0; mode < 3; mode++) { /* plain, sleeps, sleeps and every thread checked */
                    const int grid = sms * cluster;  /* more clusters than are resident: several waves */
                    float *d = nullptr;
                    const size_t count = (size_t)grid * ROWS * 4;
                    cudaMalloc(&d, count * sizeof(float));
                    cudaMemset(d, 0xff, count * sizeof(float)); /* NaN: rows not written show */
                    cudaLaunchConfig_t cfg = {};
                    cudaLaunchAttribute attr[1];
                    attr[0].id = cudaLaunchAttributeClusterDimension;
                    attr[0].val.clusterDim.x = (unsigned)cluster;
                    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
                    cfg.gridDim = dim3((unsigned)grid);
                    cfg.blockDim = dim3((unsigned)threads);
                    cfg.attrs = attr;
                    cfg.numAttrs = 1;
                    int zero = 0;
                    cudaMemcpyToSymbol(g_disagree, &zero, sizeof zero);
                    cudaError_t e = cudaLaunchKernelEx(&cfg, exchange_kernel, d, cluster, reductions, mode > 0, mode == 2);
                    if (e == cudaSuccess) e = cudaDeviceSynchronize();
                    if (e != cudaSuccess) {
                        printf("FAIL cluster %d threads %d: %s\n", cluster, threads, cudaGetErrorString(e));
                        return 1; /* the context may be lost: stop here */
                    }
                    std::vector<float> h(count);
                    cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost);
                    cudaFree(d);
                    int disagree = 0, bad = 0;
                    cudaMemcpyFromSymbol(&disagree, g_disagree, sizeof disagree);
                    for (int row = 0; row < ROWS; row++) {
                        const int n = reductions ? reductions : row % 3 + 1;
                        float want[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        for (int red = 0; red < n; red++) {
                            double s0 = 0.0, s1 = 0.0;
                            for (int r = 0; r < cluster; r++)
                                for (int t = 0; t < threads; t++) {
                                    s0 += value_of(row, red, 0, r, t);
                                    s1 += value_of(row, red, 1, r, t);
                                }
                            want[red] = (float)s0;
                            if (red == n - 1) want[3] = (float)s1;
                        }
                        for (int b = 0; b < grid; b++)
                            for (int i = 0; i < 4; i++) {
                                const float got = h[((size_t)b * ROWS + row) * 4 + i];
                                if (got != want[i]) {
                                    if (bad < 3)
                                        printf("  cluster %d threads %d reductions %d mode %d: CTA %d row %d sum %d: "
                                               "%g, want %g\n",
                                               cluster, threads, reductions, mode, b, row, i, got, want[i]);
                                    bad++;
                                }
                            }
                    }
                    if (bad || disagree) {
                        printf("FAIL cluster %d threads %d reductions %d mode %d: %d wrong sums, %d threads disagree\n",
                               cluster, threads, reductions, mode, bad, disagree);
                        failed++;
                    } else {
                        passed++;
                    }
                }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
