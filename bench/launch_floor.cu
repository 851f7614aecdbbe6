/*
 * The launch latency floor, as fusednorm bench times a launch: CUDA events
 * around one launch of an empty kernel (one CTA of 32 threads), after the
 * same 256 MiB cudaMemsetAsync that flushes the L2 before each timed launch,
 * median of 100 after 10 untimed. perf-targets.md asks small problems (M * N
 * <= 2^20 elements) to finish within 2 us of it (bench/targets.py
 * --launch-floor). The backward's deterministic call is two launches (the
 * rows, then the dweight finalize): the floor of two launches in a row is
 * printed too.
 *
 *   launch_floor [device]   -> "launch_floor_us <one launch> <two launches>"
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "launch_floor: %s: %s\n", #call, cudaGetErrorString(e_));        \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

__global__ void empty_kernel(int *never)
{
    if (never) *never = threadIdx.x; /* launched with nullptr: nothing written */
}

static int by_value(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median time in us of `launches` back-to-back empty launches. */
static int floor_us(int launches, char *flush, size_t flush_bytes, double *us)
{
    enum { RUNS = 100, SKIP = 10 };
    float ms[RUNS];
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int r = 0; r < RUNS + SKIP; r++) {
        CHECK(cudaMemsetAsync(flush, r, flush_bytes));
        CHECK(cudaEventRecord(e0));
        for (int l = 0; l < launches; l++) empty_kernel<<<1, 32>>>(nullptr);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        if (r >= SKIP) CHECK(cudaEventElapsedTime(&ms[r - SKIP], e0, e1));
    }
    qsort(ms, RUNS, sizeof ms[0], by_value);
    *us = 0.5 * (ms[RUNS / 2 - 1] + ms[RUNS / 2]) * 1e3;
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    return 0;
}

int main(int argc, char **argv)
{
    const size_t flush_bytes = (size_t)256 << 20;
    char *flush;
    double one, two;
    if (argc > 1) CHECK(cudaSetDevice(atoi(argv[1])));
    CHECK(cudaMalloc((void **)&flush, flush_bytes));
    if (floor_us(1, flush, flush_bytes, &one) || floor_us(2, flush, flush_bytes, &two)) return 1;
    printf("launch_floor_us %.2f %.2f\n", one, two);
    return 0;
}
