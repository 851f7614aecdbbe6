/*
 * One process, two CUDA devices, through the C API: RMSNorm and LayerNorm
 * forward + backward in bf16 with the residual fused, on devices 0 and 1.
 *
 * What it establishes, per shape and norm:
 *   1. interleaved calls (fwd dev1, fwd dev0, bwd dev1, bwd dev0, no host
 *      synchronization in between, each on its own non-blocking stream created
 *      under cudaSetDevice of its device) with the caller's current device set
 *      to the OTHER device before each call: every call still runs on
 *      args->device, and the caller's current device is the same afterwards;
 *   2. the outputs of both devices (y, residual_out, rstd, mean, dx,
 *      dresidual, dweight, dbias) are bitwise equal to a run of the same inputs
 *      on device 0 alone (the reference run), which itself agrees with the
 *      CPU backend within bf16's rounding (so poisoned, never-written outputs
 *      cannot pass by being equally wrong on both devices);
 *   3. the same again from two host threads, one per device, at the same time,
 *      on each device's legacy default stream (stream NULL).
 * The first fusednorm call of the process is made on device 1 while the
 * current device is 0, so a per-process cache filled from the wrong device
 * (SM count, occupancy, plan, workspace size) would show as a difference.
 * Workspaces are sized per device with fusednorm_bwd_workspace_size(device=d).
 *
 * Outputs are filled with 0xFF bytes (a NaN pattern) before every run.
 * Devices that differ (SM count, compute capability) may pick different
 * plans, so there the cross-device comparison uses the CPU tolerance instead
 * of bit equality, and says so. Prints "N passed, N failed"; exits 77 when
 * fewer than two CUDA devices are usable.
 */
#include <fusednorm.h>

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP_EXIT 77

static int g_passed, g_failed;

#define CUDA_OK(call)                                                                                  \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static void check(int ok, const char *what, const char *detail)
{
    if (ok) {
        g_passed++;
    } else {
        g_failed++;
        printf("FAIL %s%s%s\n", what, detail && *detail ? ": " : "", detail ? detail : "");
    }
}

/* ---- bf16 on the host (round to nearest even; NaN stays NaN) -------------- */

static uint16_t bf16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float uniform_pm1(void) /* xorshift64*: (-1, 1) */
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    uint64_t v = g_rng * 0x2545f4914f6cdd1dull;
    return (float)((double)(v >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static void fill_bf16(uint16_t *p, size_t n, float scale, float offset)
{
    for (size_t i = 0; i < n; i++) p[i] = bf16_from_float(offset + scale * uniform_pm1());
}

/* ---- one case's tensors ----------------------------------------------------- */

/* The tensors of one run; `elems` is rows*cols. Inputs are bf16 [rows,cols]
 * (x, residual, dy, dresidual_out) or [cols] (weight, bias); rstd/mean fp32. */
enum { IN_X, IN_RES, IN_W, IN_B, IN_DY, IN_DRES_OUT, N_IN };
enum { OUT_Y, OUT_RES_OUT, OUT_RSTD, OUT_MEAN, OUT_DX, OUT_DRES, OUT_DW, OUT_DB, N_OUT };
static const char *const OUT_NAME[N_OUT] = {"y", "residual_out", "rstd", "mean", "dx", "dresidual", "dweight", "dbias"};

typedef struct run_bufs {
    int device;             /* -1: host memory (the CPU backend) */
    void *stream;           /* cudaStream_t */
    void *in[N_IN];
    void *out[N_OUT];
    size_t out_bytes[N_OUT];
    void *ws;
    size_t ws_bytes;
} run_bufs;

typedef struct shape_case {
    fusednorm_norm norm;
    int64_t rows, cols;
} shape_case;

static size_t in_bytes(const shape_case *c, int i)
{
    const size_t n = (i == IN_W || i == IN_B) ? (size_t)c->cols : (size_t)(c->rows * c->cols);
    return n * 2;
}

static size_t out_bytes(const shape_case *c, int o)
{
    const size_t elems = (size_t)(c->rows * c->cols), rows = (size_t)c->rows, cols = (size_t)c->cols;
    switch (o) {
    case OUT_RSTD: return rows * 4;
    case OUT_MEAN: return c->norm == FUSEDNORM_LAYERNORM ? rows * 4 : 0;
    case OUT_DW: return cols * 2;
    case OUT_DB: return c->norm == FUSEDNORM_LAYERNORM ? cols * 2 : 0;
    default: return elems * 2;
    }
}

static int has_input(const shape_case *c, int i) { return i != IN_B || c->norm == FUSEDNORM_LAYERNORM; }

static fusednorm_tensor bf16_tensor(void *p) { return (fusednorm_tensor){p, FUSEDNORM_BF16, 0}; }

static fusednorm_fwd_args fwd_args(const shape_case *c, const run_bufs *b)
{
    fusednorm_fwd_args f;
    memset(&f, 0, sizeof f);
    f.norm = c->norm;
    f.rows = c->rows;
    f.cols = c->cols;
    f.eps = c->norm == FUSEDNORM_RMSNORM ? 1e-6f : 1e-5f;
    f.x = bf16_tensor(b->in[IN_X]);
    f.residual = bf16_tensor(b->in[IN_RES]);
    f.weight = bf16_tensor(b->in[IN_W]);
    if (c->norm == FUSEDNORM_LAYERNORM) f.bias = bf16_tensor(b->in[IN_B]);
    f.y = bf16_tensor(b->out[OUT_Y]);
    f.residual_out = bf16_tensor(b->out[OUT_RES_OUT]);
    f.rstd = b->out[OUT_RSTD];
    f.mean = c->norm == FUSEDNORM_LAYERNORM ? b->out[OUT_MEAN] : NULL;
    f.backend = b->device < 0 ? FUSEDNORM_CPU : FUSEDNORM_CUDA;
    f.device = b->device < 0 ? 0 : b->device;
    f.stream = b->stream;
    return f;
}

/* The backward normalizes residual_out, the forward's own output on that device. */
static fusednorm_bwd_args bwd_args(const shape_case *c, const run_bufs *b)
{
    fusednorm_bwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = c->norm;
    a.rows = c->rows;
    a.cols = c->cols;
    a.eps = c->norm == FUSEDNORM_RMSNORM ? 1e-6f : 1e-5f;
    a.dy = bf16_tensor(b->in[IN_DY]);
    a.x = bf16_tensor(b->out[OUT_RES_OUT]);
    a.weight = bf16_tensor(b->in[IN_W]);
    a.dresidual_out = bf16_tensor(b->in[IN_DRES_OUT]);
    a.rstd = b->out[OUT_RSTD];
    a.mean = c->norm == FUSEDNORM_LAYERNORM ? b->out[OUT_MEAN] : NULL;
    a.dx = bf16_tensor(b->out[OUT_DX]);
    a.dresidual = bf16_tensor(b->out[OUT_DRES]);
    a.dweight = bf16_tensor(b->out[OUT_DW]);
    if (c->norm == FUSEDNORM_LAYERNORM) a.dbias = bf16_tensor(b->out[OUT_DB]);
    a.workspace = b->ws;
    a.workspace_bytes = b->ws_bytes;
    a.backend = b->device < 0 ? FUSEDNORM_CPU : FUSEDNORM_CUDA;
    a.device = b->device < 0 ? 0 : b->device;
    a.stream = b->stream;
    return a;
}

/* Allocates a run's buffers on `device` (or the host for -1), copies the
 * inputs in, and sizes the workspace for that device, asking while the current
 * device is the other one. */
static void bufs_alloc(run_bufs *b, const shape_case *c, int device, void *stream, uint16_t *const host_in[N_IN],
                       int other_device)
{
    memset(b, 0, sizeof *b);
    b->device = device;
    b->stream = stream;
    if (device >= 0) CUDA_OK(cudaSetDevice(device));
    for (int i = 0; i < N_IN; i++) {
        if (!has_input(c, i)) continue;
        const size_t n = in_bytes(c, i);
        if (device < 0) {
            b->in[i] = malloc(n);
            memcpy(b->in[i], host_in[i], n);
        } else {
            CUDA_OK(cudaMalloc(&b->in[i], n));
            CUDA_OK(cudaMemcpy(b->in[i], host_in[i], n, cudaMemcpyHostToDevice));
        }
    }
    for (int o = 0; o < N_OUT; o++) {
        b->out_bytes[o] = out_bytes(c, o);
        if (!b->out_bytes[o]) continue;
        if (device < 0) b->out[o] = malloc(b->out_bytes[o]);
        else CUDA_OK(cudaMalloc(&b->out[o], b->out_bytes[o]));
    }
    if (device >= 0) CUDA_OK(cudaSetDevice(other_device));
    fusednorm_bwd_args a = bwd_args(c, b);
    size_t ws = 0;
    fusednorm_status s = fusednorm_bwd_workspace_size(&a, &ws);
    if (s != FUSEDNORM_OK) {
        fprintf(stderr, "fusednorm_bwd_workspace_size (device %d): %s\n", device, fusednorm_last_error());
        exit(1);
    }
    b->ws_bytes = ws;
    if (ws) {
        if (device < 0) {
            b->ws = malloc(ws);
        } else {
            CUDA_OK(cudaSetDevice(device));
            CUDA_OK(cudaMalloc(&b->ws, ws));
        }
    }
}

static void bufs_free(run_bufs *b)
{
    if (b->device >= 0) CUDA_OK(cudaSetDevice(b->device));
    for (int i = 0; i < N_IN; i++)
        if (b->in[i]) b->device < 0 ? free(b->in[i]) : (void)cudaFree(b->in[i]);
    for (int o = 0; o < N_OUT; o++)
        if (b->out[o]) b->device < 0 ? free(b->out[o]) : (void)cudaFree(b->out[o]);
    if (b->ws) b->device < 0 ? free(b->ws) : (void)cudaFree(b->ws);
}

/* 0xFF bytes in every output and the workspace, queued on the run's stream so
 * it is ordered before the run's kernels. */
static void bufs_poison(run_bufs *b)
{
    if (b->device < 0) {
        for (int o = 0; o < N_OUT; o++)
            if (b->out[o]) memset(b->out[o], 0xff, b->out_bytes[o]);
        if (b->ws) memset(b->ws, 0xff, b->ws_bytes);
        return;
    }
    CUDA_OK(cudaSetDevice(b->device));
    for (int o = 0; o < N_OUT; o++)
        if (b->out[o]) CUDA_OK(cudaMemsetAsync(b->out[o], 0xff, b->out_bytes[o], (cudaStream_t)b->stream));
    if (b->ws) CUDA_OK(cudaMemsetAsync(b->ws, 0xff, b->ws_bytes, (cudaStream_t)b->stream));
}

static void bufs_download(const run_bufs *b, void *host_out[N_OUT])
{
    if (b->device >= 0) {
        CUDA_OK(cudaSetDevice(b->device));
        CUDA_OK(cudaStreamSynchronize((cudaStream_t)b->stream));
    }
    for (int o = 0; o < N_OUT; o++) {
        if (!b->out[o]) continue;
        if (b->device < 0) memcpy(host_out[o], b->out[o], b->out_bytes[o]);
        else CUDA_OK(cudaMemcpy(host_out[o], b->out[o], b->out_bytes[o], cudaMemcpyDeviceToHost));
    }
}

/* ---- calls ------------------------------------------------------------------ */

/* One fwd or bwd call on b's device with the current device set to `current`
 * beforehand; checks the status and that `current` is still current after. */
static void call_on(const shape_case *c, const run_bufs *b, int is_bwd, int current, const char *label)
{
    char what[160], detail[256];
    snprintf(what, sizeof what, "%s %s on device %d (current %d)", label, is_bwd ? "bwd" : "fwd", b->device, current);
    CUDA_OK(cudaSetDevice(current));
    fusednorm_status s;
    if (is_bwd) {
        fusednorm_bwd_args a = bwd_args(c, b);
        s = fusednorm_bwd(&a);
    } else {
        fusednorm_fwd_args f = fwd_args(c, b);
        s = fusednorm_fwd(&f);
    }
    snprintf(detail, sizeof detail, "%s: %s", fusednorm_status_string(s), s ? fusednorm_last_error() : "");
    check(s == FUSEDNORM_OK, what, detail);
    int after = -1;
    CUDA_OK(cudaGetDevice(&after));
    snprintf(detail, sizeof detail, "current device is %d after the call, was %d before", after, current);
    char what2[200];
    snprintf(what2, sizeof what2, "%s: current device restored", what);
    check(after == current, what2, detail);
}

/* ---- comparisons --------------------------------------------------------------- */

static int is_bf16_output(int o) { return o != OUT_RSTD && o != OUT_MEAN; }

static int compare_bitwise(const shape_case *c, void *const got[N_OUT], void *const ref[N_OUT], const char *label)
{
    int all_ok = 1;
    for (int o = 0; o < N_OUT; o++) {
        const size_t n = out_bytes(c, o);
        if (!n) continue;
        const size_t esize = is_bf16_output(o) ? 2 : 4, elems = n / esize;
        size_t first = elems, count = 0;
        for (size_t i = 0; i < elems; i++)
            if (memcmp((const char *)got[o] + i * esize, (const char *)ref[o] + i * esize, esize)) {
                if (first == elems) first = i;
                count++;
            }
        char what[200], detail[200];
        snprintf(what, sizeof what, "%s: %s bitwise equal to device 0 alone", label, OUT_NAME[o]);
        if (count) {
            const float g = is_bf16_output(o) ? bf16_to_float(((const uint16_t *)got[o])[first])
                                              : ((const float *)got[o])[first];
            const float r = is_bf16_output(o) ? bf16_to_float(((const uint16_t *)ref[o])[first])
                                              : ((const float *)ref[o])[first];
            snprintf(detail, sizeof detail, "%zu of %zu elements differ, first at %zu: %.8g vs %.8g", count, elems,
                     first, g, r);
        } else {
            detail[0] = 0;
        }
        check(count == 0, what, detail);
        all_ok &= count == 0;
    }
    return all_ok;
}

static float out_value(void *const out[N_OUT], int o, size_t i)
{
    return is_bf16_output(o) ? bf16_to_float(((const uint16_t *)out[o])[i]) : ((const float *)out[o])[i];
}

/* Agreement within what two correct implementations may differ by: each side
 * rounds an fp32 result of a different summation order once, so a bf16 output
 * may differ by one unit in the last place (2^-7 of its magnitude, taken as the
 * larger side), plus, where terms cancel (dx, dweight, LayerNorm's y near 0),
 * half an ulp of the tensor's largest element. rstd/mean are fp32 from row
 * sums of up to 65536 terms: 2^-16 relative covers their rounding (about
 * sqrt(N) * 2^-24 in practice, N * 2^-24 = 2^-8 at worst, never reached by
 * the blocked sums both sides use) with the same cancellation term for mean. */
static int compare_close(const shape_case *c, void *const got[N_OUT], void *const ref[N_OUT], const char *label)
{
    int all_ok = 1;
    for (int o = 0; o < N_OUT; o++) {
        const size_t n = out_bytes(c, o);
        if (!n) continue;
        const size_t elems = n / (is_bf16_output(o) ? 2 : 4);
        const double rel = is_bf16_output(o) ? ldexp(1.0, -7) : ldexp(1.0, -16);
        double max_ref = 0;
        for (size_t i = 0; i < elems; i++) {
            const double r = fabs((double)out_value(ref, o, i));
            if (r > max_ref) max_ref = r; /* NaN compares false: a NaN reference fails below */
        }
        const double atol = rel * 0.5 * max_ref;
        size_t bad = 0, first = elems;
        for (size_t i = 0; i < elems; i++) {
            const double g = out_value(got, o, i), r = out_value(ref, o, i);
            const double mag = fabs(g) > fabs(r) ? fabs(g) : fabs(r);
            if (!(fabs(g - r) <= rel * mag + atol)) { /* NaN on either side fails */
                if (first == elems) first = i;
                bad++;
            }
        }
        char what[200], detail[200];
        snprintf(what, sizeof what, "%s: %s within bf16 tolerance", label, OUT_NAME[o]);
        if (bad)
            snprintf(detail, sizeof detail, "%zu of %zu elements off, first at %zu: %.8g vs %.8g", bad, elems, first,
                     out_value(got, o, first), out_value(ref, o, first));
        else
            detail[0] = 0;
        check(bad == 0, what, detail);
        all_ok &= bad == 0;
    }
    return all_ok;
}

/* ---- two host threads, one per device ------------------------------------------ */

typedef struct thread_job {
    const shape_case *c;
    run_bufs *b;
    int repeats;
    fusednorm_status status;
    char error[256];
    int device_after;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->status = FUSEDNORM_OK;
    if (cudaSetDevice(j->b->device) != cudaSuccess) {
        j->status = FUSEDNORM_ERROR_DEVICE;
        snprintf(j->error, sizeof j->error, "cudaSetDevice(%d) failed", j->b->device);
        return NULL;
    }
    for (int r = 0; r < j->repeats && j->status == FUSEDNORM_OK; r++) {
        fusednorm_fwd_args f = fwd_args(j->c, j->b);
        fusednorm_bwd_args a = bwd_args(j->c, j->b);
        j->status = fusednorm_fwd(&f);
        if (j->status == FUSEDNORM_OK) j->status = fusednorm_bwd(&a);
        if (j->status != FUSEDNORM_OK) snprintf(j->error, sizeof j->error, "%s", fusednorm_last_error());
    }
    cudaGetDevice(&j->device_after);
    if (cudaStreamSynchronize((cudaStream_t)j->b->stream) != cudaSuccess && j->status == FUSEDNORM_OK) {
        j->status = FUSEDNORM_ERROR_DEVICE;
        snprintf(j->error, sizeof j->error, "cudaStreamSynchronize failed");
    }
    return NULL;
}

/* ---- one case ----------------------------------------------------------------- */

static void run_case(const shape_case *c, cudaStream_t stream0, cudaStream_t stream1, cudaStream_t ref_stream,
                     int devices_alike)
{
    char label[160];
    const char *norm_name = c->norm == FUSEDNORM_RMSNORM ? "rmsnorm" : "layernorm";
    const size_t elems = (size_t)(c->rows * c->cols);

    uint16_t *host_in[N_IN] = {0};
    for (int i = 0; i < N_IN; i++) host_in[i] = malloc(in_bytes(c, i));
    fill_bf16(host_in[IN_X], elems, 2.0f, 0.1f);
    fill_bf16(host_in[IN_RES], elems, 1.0f, 0.0f);
    fill_bf16(host_in[IN_W], (size_t)c->cols, 0.5f, 1.0f);
    fill_bf16(host_in[IN_B], (size_t)c->cols, 0.2f, 0.0f);
    fill_bf16(host_in[IN_DY], elems, 1.0f, 0.0f);
    fill_bf16(host_in[IN_DRES_OUT], elems, 0.5f, 0.0f);

    void *ref_out[N_OUT], *got_out[N_OUT], *cpu_out[N_OUT];
    for (int o = 0; o < N_OUT; o++) {
        const size_t n = out_bytes(c, o) ? out_bytes(c, o) : 1;
        ref_out[o] = malloc(n);
        got_out[o] = malloc(n);
        cpu_out[o] = malloc(n);
    }

    run_bufs on0, on1, ref, cpu;
    bufs_alloc(&on1, c, 1, stream1, host_in, 0);
    bufs_alloc(&on0, c, 0, stream0, host_in, 1);
    bufs_alloc(&ref, c, 0, ref_stream, host_in, 1);
    bufs_alloc(&cpu, c, -1, NULL, host_in, 0);
    printf("%s %lldx%lld: workspace %zu bytes on device 0, %zu on device 1\n", norm_name, (long long)c->rows,
           (long long)c->cols, on0.ws_bytes, on1.ws_bytes);
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaDeviceSynchronize());

    /* 1. interleaved, current device always the other one, no sync in between */
    bufs_poison(&on0);
    bufs_poison(&on1);
    snprintf(label, sizeof label, "%s %lldx%lld interleaved", norm_name, (long long)c->rows, (long long)c->cols);
    call_on(c, &on1, 0, 0, label);
    call_on(c, &on0, 0, 1, label);
    call_on(c, &on1, 1, 0, label);
    call_on(c, &on0, 1, 1, label);

    /* 2. the reference: device 0 alone, current device 0 */
    bufs_poison(&ref);
    snprintf(label, sizeof label, "%s %lldx%lld device 0 alone", norm_name, (long long)c->rows, (long long)c->cols);
    call_on(c, &ref, 0, 0, label);
    call_on(c, &ref, 1, 0, label);
    bufs_download(&ref, ref_out);

    /* the reference against the CPU backend (catches outputs never written) */
    bufs_poison(&cpu);
    fusednorm_fwd_args cf = fwd_args(c, &cpu);
    fusednorm_bwd_args cb = bwd_args(c, &cpu);
    check(fusednorm_fwd(&cf) == FUSEDNORM_OK && fusednorm_bwd(&cb) == FUSEDNORM_OK, "CPU backend run",
          fusednorm_last_error());
    bufs_download(&cpu, cpu_out);
    snprintf(label, sizeof label, "%s %lldx%lld device 0 vs CPU backend", norm_name, (long long)c->rows,
             (long long)c->cols);
    compare_close(c, ref_out, cpu_out, label);

    for (int d = 0; d < 2; d++) {
        bufs_download(d ? &on1 : &on0, got_out);
        snprintf(label, sizeof label, "%s %lldx%lld interleaved, device %d", norm_name, (long long)c->rows,
                 (long long)c->cols, d);
        if (d == 0 || devices_alike) compare_bitwise(c, got_out, ref_out, label);
        else compare_close(c, got_out, ref_out, label);
    }

    /* 3. one host thread per device, concurrently, on the legacy default streams */
    on0.stream = NULL;
    on1.stream = NULL;
    bufs_poison(&on0);
    bufs_poison(&on1);
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaDeviceSynchronize());
    thread_job jobs[2] = {{c, &on0, 3, FUSEDNORM_OK, "", -1}, {c, &on1, 3, FUSEDNORM_OK, "", -1}};
    pthread_t threads[2];
    for (int d = 0; d < 2; d++)
        if (pthread_create(&threads[d], NULL, thread_main, &jobs[d]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    for (int d = 0; d < 2; d++) pthread_join(threads[d], NULL);
    for (int d = 0; d < 2; d++) {
        snprintf(label, sizeof label, "%s %lldx%lld thread on device %d", norm_name, (long long)c->rows,
                 (long long)c->cols, d);
        check(jobs[d].status == FUSEDNORM_OK, label, jobs[d].error);
        char what[200], detail[100];
        snprintf(what, sizeof what, "%s: current device unchanged", label);
        snprintf(detail, sizeof detail, "current device %d, expected %d", jobs[d].device_after, d);
        check(jobs[d].device_after == d, what, detail);
        bufs_download(d ? &on1 : &on0, got_out);
        if (d == 0 || devices_alike) compare_bitwise(c, got_out, ref_out, label);
        else compare_close(c, got_out, ref_out, label);
    }

    bufs_free(&on0);
    bufs_free(&on1);
    bufs_free(&ref);
    bufs_free(&cpu);
    for (int o = 0; o < N_OUT; o++) {
        free(ref_out[o]);
        free(got_out[o]);
        free(cpu_out[o]);
    }
    for (int i = 0; i < N_IN; i++) free(host_in[i]);
}

int main(void)
{
    int count = 0;
    if (!fusednorm_cuda_available() || cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
        printf("SKIP: needs 2 CUDA devices and a CUDA build of fusednorm (fusednorm_cuda_available() = %d, "
               "device count %d)\n",
               fusednorm_cuda_available(), count);
        return SKIP_EXIT;
    }
    struct cudaDeviceProp p0, p1;
    CUDA_OK(cudaGetDeviceProperties(&p0, 0));
    CUDA_OK(cudaGetDeviceProperties(&p1, 1));
    const int alike = p0.multiProcessorCount == p1.multiProcessorCount && p0.major == p1.major &&
                      p0.minor == p1.minor;
    printf("device 0: %s, %d SMs, sm_%d%d; device 1: %s, %d SMs, sm_%d%d (%d devices)\n", p0.name,
           p0.multiProcessorCount, p0.major, p0.minor, p1.name, p1.multiProcessorCount, p1.major, p1.minor, count);
    if (!alike) printf("note: the devices differ, so device 1 is held to the bf16 tolerance, not bit equality\n");

    /* One stream per device, each created while its device is current. */
    cudaStream_t stream0, stream1, ref_stream;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreateWithFlags(&stream0, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&ref_stream, cudaStreamNonBlocking));
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamCreateWithFlags(&stream1, cudaStreamNonBlocking));

    /* rows-in-registers at mid N, several CTAs' worth of long rows, and
     * 65536-wide rows (thread-block clusters on sm_90). */
    static const int64_t shapes[][2] = {{4096, 1024}, {512, 8192}, {64, 65536}, {37, 4097}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int norm = 0; norm < 2; norm++) {
            shape_case c = {(fusednorm_norm)norm, shapes[s][0], shapes[s][1]};
            run_case(&c, stream0, stream1, ref_stream, alike);
        }

    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamDestroy(stream0));
    CUDA_OK(cudaStreamDestroy(ref_stream));
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamDestroy(stream1));
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
