/*
 * The CLI's only CUDA code (compiled only when FUSEDNORM_WITH_CUDA): device
 * discovery and description, device memory, and timing. Everything runs on
 * device 0 and the legacy default stream, the stream the library uses when
 * args->stream is NULL.
 *
 * Timing: a launch is bracketed by two CUDA events; before each launch (and
 * outside the events) a buffer of twice the L2 size is written with
 * cudaMemsetAsync so that no input is served from L2; the median of the
 * per-launch times is reported. Copy bandwidth: a large device-to-device
 * cudaMemcpyAsync, bytes read + bytes written over the median time.
 */
#include "cli.h"

#include <stdlib.h>

#include <cuda_runtime_api.h>

static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "fusednorm: %s failed: %s (%s)\n", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return 0;
}

int cuda_usable(char *why, size_t why_len)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "no usable CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* not sticky: clear it so later calls start clean */
        return 0;
    }
    if (count == 0) {
        snprintf(why, why_len, "no CUDA device found");
        return 0;
    }
    return 1;
}

void cuda_print_devices(FILE *out)
{
    int count = 0, runtime = 0, driver = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    if (driver)
        fprintf(out, "CUDA runtime:     %d.%d (driver supports %d.%d)\n", runtime / 1000, runtime % 1000 / 10,
                driver / 1000, driver % 1000 / 10);
    else
        fprintf(out, "CUDA runtime:     %d.%d (no CUDA driver found)\n", runtime / 1000, runtime % 1000 / 10);
    if (e != cudaSuccess) {
        fprintf(out, "CUDA devices:     none usable (cudaGetDeviceCount: %s)\n", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return;
    }
    fprintf(out, "CUDA devices:     %d\n", count);
    for (int d = 0; d < count; d++) {
        struct cudaDeviceProp p;
        if (!cuda_ok(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties")) continue;
        fprintf(out, "  [%d] %s: %d SMs, compute capability %d.%d, %.1f GiB memory, %.1f MiB L2\n", d, p.name,
                p.multiProcessorCount, p.major, p.minor, (double)p.totalGlobalMem / (1 << 30),
                (double)p.l2CacheSize / (1 << 20));
    }
}

int cuda_alloc(void **p, size_t bytes)
{
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fprintf(stderr, "fusednorm: cudaMalloc(%zu bytes) failed: %s\n", bytes, cudaGetErrorString(e));
        *p = NULL;
        return -1;
    }
    return 0;
}

void cuda_free(void *p) { (void)cuda_ok(cudaFree(p), "cudaFree"); }

int cuda_upload(void *dst, const void *src, size_t bytes)
{
    return cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (host to device)") ? 0 : -1;
}

int cuda_download(void *dst, const void *src, size_t bytes)
{
    return cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)") ? 0 : -1;
}

int cuda_fill_bytes(void *p, int byte, size_t bytes)
{
    if (!cuda_ok(cudaMemsetAsync(p, byte, bytes, 0), "cudaMemsetAsync")) return -1;
    return cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize") ? 0 : -1;
}

int cuda_copy(void *dst, const void *src, size_t bytes)
{
    /* the default stream, as cuda_time_median's events and the library's calls */
    return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync") ? 0 : -1;
}

int cuda_synchronize(void) { return cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize") ? 0 : -1; }

/* The L2 flush buffer, made once per process for the current device. */
static void *flush_buffer;
static size_t flush_bytes;

static int ensure_flush_buffer(void)
{
    if (flush_buffer) return 0;
    int device = 0, l2 = 0;
    if (!cuda_ok(cudaGetDevice(&device), "cudaGetDevice")) return -1;
    if (!cuda_ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute(L2 size)"))
        return -1;
    flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    return cuda_alloc(&flush_buffer, flush_bytes);
}

int cuda_time_median(dev_launch_fn launch, void *ctx, int warmup, int iters, double *median_seconds)
{
    if (ensure_flush_buffer()) return -1;
    int rc = -1, made = 0;
    cudaEvent_t *events = calloc(2 * (size_t)iters, sizeof *events);
    double *times = malloc((size_t)iters * sizeof *times);
    if (!events || !times) goto done;
    for (; made < 2 * iters; made++)
        if (!cuda_ok(cudaEventCreate(&events[made]), "cudaEventCreate")) goto done;
    for (int i = 0; i < warmup; i++) {
        if (!cuda_ok(cudaMemsetAsync(flush_buffer, i & 0xff, flush_bytes, 0), "cudaMemsetAsync (L2 flush)")) goto done;
        if (launch(ctx)) goto done;
    }
    /* All launches are queued back to back and read once at the end: no
     * host synchronization between them to skew the events. */
    for (int i = 0; i < iters; i++) {
        if (!cuda_ok(cudaMemsetAsync(flush_buffer, i & 0xff, flush_bytes, 0), "cudaMemsetAsync (L2 flush)")) goto done;
        if (!cuda_ok(cudaEventRecord(events[2 * i], 0), "cudaEventRecord")) goto done;
        if (launch(ctx)) goto done;
        if (!cuda_ok(cudaEventRecord(events[2 * i + 1], 0), "cudaEventRecord")) goto done;
    }
    if (!cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after timed launches)")) goto done;
    for (int i = 0; i < iters; i++) {
        float ms = 0;
        if (!cuda_ok(cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]), "cudaEventElapsedTime")) goto done;
        times[i] = ms * 1e-3;
    }
    *median_seconds = cli_median(times, iters);
    rc = 0;
done:
    for (int i = 0; i < made; i++) (void)cudaEventDestroy(events[i]);
    free(events);
    free(times);
    return rc;
}

int cuda_copy_bandwidth(double *bytes_per_second, size_t *copy_bytes)
{
    size_t free_bytes = 0, total_bytes = 0;
    if (!cuda_ok(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo")) return -1;
    size_t bytes = (size_t)1 << 30; /* 1 GiB each way: far beyond L2, as a real kernel sees HBM */
    while (bytes > ((size_t)64 << 20) && 2 * bytes > free_bytes / 2) bytes /= 2;
    void *src = NULL, *dst = NULL;
    int rc = -1;
    enum { WARMUP = 2, RUNS = 20 };
    cudaEvent_t ev[2 * RUNS];
    int made = 0;
    double times[RUNS];
    if (cuda_alloc(&src, bytes) || cuda_alloc(&dst, bytes)) goto done;
    if (!cuda_ok(cudaMemsetAsync(src, 0x5a, bytes, 0), "cudaMemsetAsync")) goto done;
    for (; made < 2 * RUNS; made++)
        if (!cuda_ok(cudaEventCreate(&ev[made]), "cudaEventCreate")) goto done;
    for (int i = 0; i < WARMUP; i++)
        if (!cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync")) goto done;
    for (int i = 0; i < RUNS; i++) {
        if (!cuda_ok(cudaEventRecord(ev[2 * i], 0), "cudaEventRecord")) goto done;
        if (!cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync")) goto done;
        if (!cuda_ok(cudaEventRecord(ev[2 * i + 1], 0), "cudaEventRecord")) goto done;
    }
    if (!cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after copies)")) goto done;
    for (int i = 0; i < RUNS; i++) {
        float ms = 0;
        if (!cuda_ok(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime")) goto done;
        times[i] = ms * 1e-3;
    }
    *copy_bytes = bytes;
    *bytes_per_second = 2.0 * (double)bytes / cli_median(times, RUNS);
    rc = 0;
done:
    for (int i = 0; i < made; i++) (void)cudaEventDestroy(ev[i]);
    if (src) cuda_free(src);
    if (dst) cuda_free(dst);
    return rc;
}

void cuda_describe(char *buf, size_t len)
{
    int device = 0;
    struct cudaDeviceProp p;
    if (!cuda_ok(cudaGetDevice(&device), "cudaGetDevice") ||
        !cuda_ok(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties")) {
        snprintf(buf, len, "CUDA device (properties unavailable)");
        return;
    }
    snprintf(buf, len, "%s, %d SMs, sm_%d%d", p.name, p.multiProcessorCount, p.major, p.minor);
}
