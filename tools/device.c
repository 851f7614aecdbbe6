/*
 * The backend-neutral device layer of the CLI: memory, copies, timing and
 * copy bandwidth for the CPU (here) and CUDA (device_cuda.c, compiled only in
 * CUDA builds). On the CPU "device memory" is 64-byte aligned host memory and
 * timing is the OpenMP wall clock around each (synchronous) launch.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#include <omp.h>

const char *dev_backend_name(fusednorm_backend b) { return b == FUSEDNORM_CUDA ? "cuda" : "cpu"; }

int dev_backend_usable(fusednorm_backend b, char *why, size_t why_len)
{
    if (b == FUSEDNORM_CPU) return 1;
#if FUSEDNORM_WITH_CUDA
    if (!cuda_usable(why, why_len)) return 0;
    if (!fusednorm_cuda_available()) {
        snprintf(why, why_len, "the library reports no usable CUDA device (fusednorm_cuda_available() == 0)");
        return 0;
    }
    return 1;
#else
    snprintf(why, why_len, "this build has no CUDA backend (built without nvcc or with FUSEDNORM_CUDA=OFF)");
    return 0;
#endif
}

fusednorm_backend dev_best_backend(void)
{
    return fusednorm_cuda_available() ? FUSEDNORM_CUDA : FUSEDNORM_CPU;
}

int dev_alloc(fusednorm_backend b, void **p, size_t bytes)
{
    *p = NULL;
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_alloc(p, bytes);
#endif
    (void)b;
    size_t rounded = (bytes + 63) / 64 * 64;
    *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!*p) {
        fprintf(stderr, "fusednorm: out of host memory allocating %zu bytes\n", bytes);
        return -1;
    }
    return 0;
}

void dev_free(fusednorm_backend b, void *p)
{
    if (!p) return;
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) {
        cuda_free(p);
        return;
    }
#endif
    (void)b;
    free(p);
}

/* memcpy split over threads: one thread cannot saturate memory bandwidth. */
static void parallel_memcpy(void *dst, const void *src, size_t bytes)
{
    const size_t chunk = 1 << 20;
    const int64_t nchunks = (int64_t)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (int64_t c = 0; c < nchunks; c++) {
        size_t off = (size_t)c * chunk, len = bytes - off < chunk ? bytes - off : chunk;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

static void parallel_memset(void *dst, int byte, size_t bytes)
{
    const size_t chunk = 1 << 20;
    const int64_t nchunks = (int64_t)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (int64_t c = 0; c < nchunks; c++) {
        size_t off = (size_t)c * chunk, len = bytes - off < chunk ? bytes - off : chunk;
        memset((char *)dst + off, byte, len);
    }
}

int dev_upload(fusednorm_backend b, void *dst, const void *src, size_t bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_upload(dst, src, bytes);
#endif
    (void)b;
    parallel_memcpy(dst, src, bytes);
    return 0;
}

int dev_download(fusednorm_backend b, void *dst, const void *src, size_t bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_download(dst, src, bytes);
#endif
    (void)b;
    parallel_memcpy(dst, src, bytes);
    return 0;
}

int dev_fill_bytes(fusednorm_backend b, void *p, int byte, size_t bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_fill_bytes(p, byte, bytes);
#endif
    (void)b;
    parallel_memset(p, byte, bytes);
    return 0;
}

int dev_copy(fusednorm_backend b, void *dst, const void *src, size_t bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_copy(dst, src, bytes);
#endif
    (void)b;
    parallel_memcpy(dst, src, bytes);
    return 0;
}

int dev_synchronize(fusednorm_backend b)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_synchronize();
#endif
    (void)b;
    return 0;
}

int dev_time_median(fusednorm_backend b, dev_launch_fn launch, void *ctx, int warmup, int iters,
                    double *median_seconds)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_time_median(launch, ctx, warmup, iters, median_seconds);
#endif
    (void)b;
    for (int i = 0; i < warmup; i++)
        if (launch(ctx)) return -1;
    double *times = malloc((size_t)iters * sizeof *times);
    if (!times) return -1;
    for (int i = 0; i < iters; i++) {
        double t0 = omp_get_wtime();
        if (launch(ctx)) {
            free(times);
            return -1;
        }
        times[i] = omp_get_wtime() - t0;
    }
    *median_seconds = cli_median(times, iters);
    free(times);
    return 0;
}

/* Large enough to leave every CPU cache far behind, small enough for a
 * laptop: 256 MiB read and 256 MiB written per copy. */
#define CPU_COPY_BYTES ((size_t)256 << 20)

static int cpu_copy_bandwidth(double *bytes_per_second, size_t *copy_bytes)
{
    void *src = NULL, *dst = NULL;
    if (dev_alloc(FUSEDNORM_CPU, &src, CPU_COPY_BYTES) || dev_alloc(FUSEDNORM_CPU, &dst, CPU_COPY_BYTES)) {
        free(src);
        return -1;
    }
    /* Touch both from the threads that will copy them (first-touch pages). */
    parallel_memset(src, 0x5a, CPU_COPY_BYTES);
    parallel_memset(dst, 0, CPU_COPY_BYTES);
    enum { RUNS = 7 };
    double times[RUNS];
    parallel_memcpy(dst, src, CPU_COPY_BYTES); /* warm-up */
    for (int r = 0; r < RUNS; r++) {
        double t0 = omp_get_wtime();
        parallel_memcpy(dst, src, CPU_COPY_BYTES);
        times[r] = omp_get_wtime() - t0;
    }
    free(src);
    free(dst);
    *copy_bytes = CPU_COPY_BYTES;
    *bytes_per_second = 2.0 * (double)CPU_COPY_BYTES / cli_median(times, RUNS);
    return 0;
}

int dev_copy_bandwidth(fusednorm_backend b, double *bytes_per_second, size_t *copy_bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) return cuda_copy_bandwidth(bytes_per_second, copy_bytes);
#endif
    (void)b;
    return cpu_copy_bandwidth(bytes_per_second, copy_bytes);
}

void dev_print_info(FILE *out)
{
#if FUSEDNORM_WITH_CUDA
    cuda_print_devices(out);
#else
    fprintf(out, "CUDA devices:     none (this build has no CUDA backend)\n");
#endif
}

void dev_describe(fusednorm_backend b, char *buf, size_t len)
{
#if FUSEDNORM_WITH_CUDA
    if (b == FUSEDNORM_CUDA) {
        cuda_describe(buf, len);
        return;
    }
#endif
    (void)b;
    snprintf(buf, len, "CPU, %d OpenMP threads", omp_get_max_threads());
}
