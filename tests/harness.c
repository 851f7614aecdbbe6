/*
 * Test harness implementation: counters, RNG, backend tensors with host
 * shadows, padding sentinels, poisoning and reference comparison. See
 * harness.h for the contract.
 */
#include "harness.h"

#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if FUSEDNORM_WITH_CUDA
#include <cuda_runtime.h>
#endif

long th_passed, th_failed;
char th_context[512];

int th_record(int ok, const char *file, int line, const char *fmt, ...)
{
    if (ok) {
        th_passed++;
        return 1;
    }
    th_failed++;
    if (th_failed <= 200) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "FAIL %s:%d [%s]: ", file, line, th_context);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    }
    return 0;
}

int th_finish(void)
{
    printf("%ld passed, %ld failed\n", th_passed, th_failed);
    fflush(stdout);
    return th_failed ? 1 : 0;
}

/* ---- RNG: splitmix64, reproducible from the printed seed ---------------------- */

static uint64_t th_state;

void th_init(const char *test_name)
{
    const char *env = getenv("FUSEDNORM_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    th_state = seed;
    printf("%s: seed %llu (set FUSEDNORM_TEST_SEED to reproduce)\n", test_name, (unsigned long long)seed);
    fflush(stdout);
}

uint64_t th_rng_get(void) { return th_state; }
void th_rng_set(uint64_t state) { th_state = state; }

uint64_t th_rand_u64(void)
{
    uint64_t z = (th_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double th_uniform(double lo, double hi) { return lo + (hi - lo) * ((double)(th_rand_u64() >> 11) * 0x1p-53); }

/* ---- backend memory ------------------------------------------------------------- */

int th_backend_available(fusednorm_backend be) { return be == FUSEDNORM_CPU ? 1 : fusednorm_cuda_available(); }
const char *th_backend_name(fusednorm_backend be) { return be == FUSEDNORM_CPU ? "cpu" : "cuda"; }

#if FUSEDNORM_WITH_CUDA
#define TH_CUDA_CHECK(call)                                                                                          \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess) {                                                                                     \
            th_record(0, __FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(e_));                               \
        }                                                                                                            \
    } while (0)
#endif

void *th_backend_malloc(fusednorm_backend be, size_t bytes)
{
    if (bytes == 0) bytes = 1;
#if FUSEDNORM_WITH_CUDA
    if (be == FUSEDNORM_CUDA) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
        return p;
    }
#endif
    (void)be;
    return malloc(bytes);
}

void th_backend_free(fusednorm_backend be, void *p)
{
#if FUSEDNORM_WITH_CUDA
    if (be == FUSEDNORM_CUDA) {
        cudaFree(p);
        return;
    }
#endif
    (void)be;
    free(p);
}

void th_backend_memcpy_to(fusednorm_backend be, void *dst, const void *src, size_t bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (be == FUSEDNORM_CUDA) {
        TH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
        return;
    }
#endif
    (void)be;
    memcpy(dst, src, bytes);
}

void th_backend_memcpy_from(fusednorm_backend be, void *dst, const void *src, size_t bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (be == FUSEDNORM_CUDA) {
        TH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
        return;
    }
#endif
    (void)be;
    memcpy(dst, src, bytes);
}

void th_backend_memset(fusednorm_backend be, void *dst, int byte, size_t bytes)
{
#if FUSEDNORM_WITH_CUDA
    if (be == FUSEDNORM_CUDA) {
        TH_CUDA_CHECK(cudaMemset(dst, byte, bytes));
        return;
    }
#endif
    (void)be;
    memset(dst, byte, bytes);
}

void th_backend_sync(fusednorm_backend be)
{
#if FUSEDNORM_WITH_CUDA
    if (be == FUSEDNORM_CUDA) TH_CUDA_CHECK(cudaDeviceSynchronize());
#endif
    (void)be;
}

/* ---- tensors ------------------------------------------------------------------------ */

#define TH_SENTINEL 0xA5

int th_alloc(th_tensor *t, fusednorm_backend be, fusednorm_dtype dt, int64_t rows, int64_t cols, int64_t stride,
             int misalign)
{
    memset(t, 0, sizeof *t);
    t->backend = be;
    t->dtype = dt;
    t->rows = rows;
    t->cols = cols;
    t->arg_stride = stride;
    t->stride = stride ? stride : cols;
    t->offset = misalign ? 1 : 0;
    t->esize = fn_dtype_size(dt);
    int64_t elems = rows > 0 ? (rows - 1) * t->stride + cols : 0;
    /* Trailing padding past the last row too: a write past the end shows. */
    elems += t->offset + (t->stride - cols) + 8;
    t->bytes = (size_t)elems * t->esize;
    t->shadow = malloc(t->bytes);
    t->mem = th_backend_malloc(be, t->bytes);
    if (!t->shadow || !t->mem) {
        th_record(0, __FILE__, __LINE__, "allocation of %zu bytes on %s failed", t->bytes, th_backend_name(be));
        free(t->shadow);
        if (t->mem) th_backend_free(be, t->mem);
        t->shadow = t->mem = NULL;
        return 0;
    }
    memset(t->shadow, TH_SENTINEL, t->bytes);
    return 1;
}

void th_free(th_tensor *t)
{
    free(t->shadow);
    if (t->mem) th_backend_free(t->backend, t->mem);
    t->shadow = t->mem = NULL;
}

void *th_data(const th_tensor *t) { return t->mem + t->offset * t->esize; }
void *th_host(const th_tensor *t) { return t->shadow + t->offset * t->esize; }

fusednorm_tensor th_arg(const th_tensor *t)
{
    fusednorm_tensor a = {th_data(t), t->dtype, t->arg_stride};
    return a;
}

fusednorm_tensor th_host_arg(const th_tensor *t)
{
    fusednorm_tensor a = {th_host(t), t->dtype, t->arg_stride};
    return a;
}

double th_get(const th_tensor *t, int64_t r, int64_t c) { return fn_load(th_host(t), t->dtype, r * t->stride + c); }

void th_upload(th_tensor *t) { th_backend_memcpy_to(t->backend, t->mem, t->shadow, t->bytes); }
void th_download(th_tensor *t) { th_backend_memcpy_from(t->backend, t->shadow, t->mem, t->bytes); }

void th_fill(th_tensor *t, double lo, double hi)
{
    memset(t->shadow, TH_SENTINEL, t->bytes);
    void *h = th_host(t);
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->cols; c++) fn_store(h, t->dtype, r * t->stride + c, (float)th_uniform(lo, hi));
    th_upload(t);
}

void th_poison(th_tensor *t)
{
    memset(t->shadow, TH_SENTINEL, t->bytes);
    unsigned char *h = th_host(t);
    for (int64_t r = 0; r < t->rows; r++) memset(h + (size_t)(r * t->stride) * t->esize, 0xFF, (size_t)t->cols * t->esize);
    th_upload(t);
}

/* Is byte b of the allocation inside a logical element? */
static int th_is_logical(const th_tensor *t, size_t b)
{
    size_t first = (size_t)t->offset * t->esize;
    if (b < first || t->rows == 0) return 0;
    int64_t e = (int64_t)((b - first) / t->esize);
    int64_t r = e / t->stride, c = e % t->stride;
    return r < t->rows && c < t->cols;
}

int th_check_padding(th_tensor *t, const char *name)
{
    th_download(t);
    long bad = 0;
    size_t first_bad = 0;
    for (size_t b = 0; b < t->bytes; b++) {
        if (t->shadow[b] != TH_SENTINEL && !th_is_logical(t, b)) {
            if (!bad) first_bad = b;
            bad++;
        }
    }
    th_record(bad == 0, __FILE__, __LINE__,
              "%s: %ld padding bytes overwritten (first at byte %zu; rows %lld cols %lld stride %lld offset %lld)",
              name, bad, first_bad, (long long)t->rows, (long long)t->cols, (long long)t->stride,
              (long long)t->offset);
    return (int)bad;
}

int th_check_unchanged(th_tensor *t, const char *name)
{
    unsigned char *before = malloc(t->bytes);
    if (!before) return 0;
    memcpy(before, t->shadow, t->bytes);
    th_download(t);
    int same = memcmp(before, t->shadow, t->bytes) == 0;
    free(before);
    th_record(same, __FILE__, __LINE__, "%s: input modified by the call", name);
    return same;
}

int th_check_poisoned(th_tensor *t, const char *name)
{
    th_download(t);
    unsigned char *h = th_host(t);
    long bad = 0;
    for (int64_t r = 0; r < t->rows; r++)
        for (size_t b = 0; b < (size_t)t->cols * t->esize; b++)
            if (h[(size_t)(r * t->stride) * t->esize + b] != 0xFF) bad++;
    th_record(bad == 0, __FILE__, __LINE__, "%s: %ld bytes written although nothing should be", name, bad);
    return bad == 0;
}

double th_unit_roundoff(fusednorm_dtype dt)
{
    switch (dt) {
    case FUSEDNORM_F16: return 0x1p-11;
    case FUSEDNORM_BF16: return 0x1p-8;
    default: return 0x1p-24;
    }
}

double th_tiny(fusednorm_dtype dt)
{
    switch (dt) {
    case FUSEDNORM_F16: return 0x1p-24;
    case FUSEDNORM_BF16: return 0x1p-133;
    default: return 0x1p-149;
    }
}

/* abs_row: one absolute tolerance per row (i / cols), or with per_element one
 * per element i. */
static int th_compare_values(const char *what, int64_t n, int64_t cols, double (*get)(const void *, int64_t),
                             const void *ctx, const double *ref, double rel, const double *abs_row, int per_element,
                             double tiny)
{
    int64_t fails = 0, worst = -1;
    double worst_ratio = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double got = get(ctx, i), want = ref[i];
        /* A row holding NaN/Inf inputs has no finite scale: its finite outputs
         * (e.g. 0*w + b when rstd is 0) must then match to the rounding. */
        double abs_part = abs_row ? abs_row[per_element ? i : i / cols] : 0.0;
        if (!isfinite(abs_part)) abs_part = 0.0;
        double tol = rel * fabs(want) + abs_part + tiny;
        double err = fabs(got - want);
        int ok;
        if (isnan(want)) ok = isnan(got);
        else if (isinf(want)) ok = got == want;
        else ok = isfinite(got) && err <= tol;
        double ratio = ok ? err / tol : INFINITY;
        if (!ok) {
            if (fails < 5)
                fprintf(stderr, "  %s[%lld] (row %lld col %lld): got %.9g want %.9g err %.3g tol %.3g\n", what,
                        (long long)i, (long long)(i / cols), (long long)(i % cols), got, want, err, tol);
            fails++;
        }
        if (ratio > worst_ratio || worst < 0) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    th_record(fails == 0, __FILE__, __LINE__, "%s: %lld of %lld elements out of tolerance", what, (long long)fails,
              (long long)n);
    /* FUSEDNORM_TEST_VERBOSE=1 shows how much of its tolerance each check used. */
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUSEDNORM_TEST_VERBOSE") != NULL;
    if (verbose && worst >= 0)
        printf("  %-18s worst err/tol %.3f at %lld  [%s]\n", what, worst_ratio, (long long)worst, th_context);
    return (int)fails;
}

static double th_get_linear(const void *ctx, int64_t i)
{
    const th_tensor *t = ctx;
    return th_get(t, i / t->cols, i % t->cols);
}

int th_compare(th_tensor *t, const double *ref, double rel, const double *abs_row, const char *what)
{
    th_download(t);
    return th_compare_values(what, t->rows * t->cols, t->cols, th_get_linear, t, ref, rel, abs_row, 0,
                             th_tiny(t->dtype));
}

int th_compare_each(th_tensor *t, const double *ref, double rel, const double *abs_each, const char *what)
{
    th_download(t);
    return th_compare_values(what, t->rows * t->cols, t->cols, th_get_linear, t, ref, rel, abs_each, 1,
                             th_tiny(t->dtype));
}

static double th_get_f32(const void *ctx, int64_t i) { return ((const float *)ctx)[i]; }

int th_compare_f32(const float *got, const double *ref, int64_t n, double rel, const double *abs_each,
                   const char *what)
{
    return th_compare_values(what, n, 1, th_get_f32, got, ref, rel, abs_each, 1, th_tiny(FUSEDNORM_F32));
}
