/*
 * What the device gives a normalization call to start from, for reading the
 * targets (bench/targets.py):
 *  - a device-to-device copy of 4 MiB .. 1 GiB: a short problem moves too few
 *    bytes to reach the large copy's rate, so its % of copy is read against
 *    a copy of its own bytes too (GB/s counts bytes read + written);
 *  - the launch latency floor: one launch of an empty kernel (one CTA of 32
 *    threads), and two in a row (the deterministic backward's rows and
 *    finalize); perf-targets.md asks small problems (M * N <= 2^20) to
 *    finish within 2 us of it.
 * Each is timed as `fusednorm bench` times a call: CUDA events around it,
 * after a 256 MiB cudaMemsetAsync that leaves none of its inputs in L2;
 * median after untimed runs.
 *
 *   device_floors [device]   -> lines "MiB us GB/s" (MiB copied: half the bytes
 *                               moved), then "launch_floor_us <one> <two>"
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "device_floors: %s: %s\n", #call, cudaGetErrorString(e_));       \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

enum { MAX_RUNS = 100 };
static char *flush;
static const size_t flush_bytes = (size_t)256 << 20;

static int by_value(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The median time in us of op(ctx) over runs timed runs after skip untimed
 * ones (runs even, <= MAX_RUNS), the L2 flushed before each. */
static int median_us(int (*op)(void *), void *ctx, int runs, int skip, double *us)
{
    float ms[MAX_RUNS];
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int r = 0; r < runs + skip; r++) {
        CHECK(cudaMemsetAsync(flush, r, flush_bytes));
        CHECK(cudaEventRecord(e0));
        if (op(ctx)) return 1;
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        if (r >= skip) CHECK(cudaEventElapsedTime(&ms[r - skip], e0, e1));
    }
    qsort(ms, (size_t)runs, sizeof ms[0], by_value);
    *us = 0.5 * (ms[runs / 2 - 1] + ms[runs / 2]) * 1e3;
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    return 0;
}

typedef struct copy_op {
    char *dst;
    const char *src;
    size_t bytes;
} copy_op;

static int run_copy(void *ctx)
{
    const copy_op *c = (const copy_op *)ctx;
    CHECK(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice));
    return 0;
}

__global__ void empty_kernel(int *never)
{
    if (never) *never = threadIdx.x; /* launched with nullptr: nothing written */
}

static int run_launches(void *ctx)
{
    for (int l = 0; l < *(const int *)ctx; l++) empty_kernel<<<1, 32>>>(nullptr);
    CHECK(cudaGetLastError());
    return 0;
}

int main(int argc, char **argv)
{
    const size_t most = (size_t)1 << 30;
    const size_t mib[] = {4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024};
    if (argc > 1) CHECK(cudaSetDevice(atoi(argv[1])));
    char *src, *dst;
    CHECK(cudaMalloc((void **)&src, most));
    CHECK(cudaMalloc((void **)&dst, most));
    CHECK(cudaMalloc((void **)&flush, flush_bytes));
    CHECK(cudaMemset(src, 1, most));
    printf("%8s %10s %10s\n", "MiB", "us", "GB/s");
    for (size_t i = 0; i < sizeof mib / sizeof mib[0]; i++) {
        copy_op c = {dst, src, mib[i] << 20};
        double us;
        if (median_us(run_copy, &c, 30, 3, &us)) return 1;
        printf("%8zu %10.2f %10.1f\n", mib[i], us, 2.0 * (double)c.bytes / (us * 1e-6) / 1e9);
    }
    int one = 1, two = 2;
    double one_us, two_us;
    if (median_us(run_launches, &one, 100, 10, &one_us) || median_us(run_launches, &two, 100, 10, &two_us)) return 1;
    printf("launch_floor_us %.2f %.2f\n", one_us, two_us);
    return 0;
}
