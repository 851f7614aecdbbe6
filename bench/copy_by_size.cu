/*
 * Device-to-device copy bandwidth by size: what cudaMemcpyAsync reaches when
 * it moves as many bytes as one normalization call, so that a short
 * problem's % of the (1 GiB) copy bandwidth can be read against the copy of
 * its own size (bench/targets.py). GB/s counts bytes read + written; a
 * 256 MiB buffer is written between runs (the L2 holds none of the source),
 * median of 30 runs after 3 untimed ones.
 *
 *   copy_by_size [device]        -> lines "MiB us GB/s" (MiB: bytes copied,
 *                                   half the bytes moved)
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "copy_by_size: %s: %s\n", #call, cudaGetErrorString(e_));        \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

static int by_value(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    enum { RUNS = 30, SKIP = 3 };
    const size_t most = (size_t)1 << 30, flush_bytes = (size_t)256 << 20;
    const size_t mib[] = {4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024};
    if (argc > 1) CHECK(cudaSetDevice(atoi(argv[1])));
    char *src, *dst, *flush;
    CHECK(cudaMalloc((void **)&src, most));
    CHECK(cudaMalloc((void **)&dst, most));
    CHECK(cudaMalloc((void **)&flush, flush_bytes));
    CHECK(cudaMemset(src, 1, most));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    printf("%8s %10s %10s\n", "MiB", "us", "GB/s");
    for (size_t i = 0; i < sizeof mib / sizeof mib[0]; i++) {
        const size_t bytes = mib[i] << 20;
        float ms[RUNS];
        for (int r = 0; r < RUNS + SKIP; r++) {
            CHECK(cudaMemsetAsync(flush, r, flush_bytes));
            CHECK(cudaEventRecord(e0));
            CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            if (r >= SKIP) CHECK(cudaEventElapsedTime(&ms[r - SKIP], e0, e1));
        }
        qsort(ms, RUNS, sizeof ms[0], by_value);
        const double t = 0.5 * (ms[RUNS / 2 - 1] + ms[RUNS / 2]) * 1e-3;
        printf("%8zu %10.2f %10.1f\n", mib[i], t * 1e6, 2.0 * (double)bytes / t / 1e9);
    }
    return 0;
}
