/*
 * Determinism of the CPU backend: without FUSEDNORM_ATOMIC_DWEIGHT, dweight
 * and dbias are bitwise identical across repeated runs and across OpenMP
 * thread counts (1, 2, 3, 4 and the default), for fp32 and 16-bit outputs
 * and with ACCUMULATE; forward y and backward dx are bitwise identical across
 * repeated runs; fp16 rows give the same bits with the F16C forms as without
 * them (a CPU with F16C and one without agree). Values are checked against
 * the reference by test_cpu_ops; here only the bits matter.
 */
#include "harness.h"
#include "cpu/cpu_rows.h" /* cpu_f16c */
#include "internal.h"   /* fn_cpu_f16c_off */

#include <omp.h>
#include <stdlib.h>
#include <string.h>

typedef struct bits {
    unsigned char *dw, *db, *dx;
    size_t dw_n, db_n, dx_n;
} bits;

static void bits_free(bits *b)
{
    free(b->dw);
    free(b->db);
    free(b->dx);
}

static unsigned char *dup_bytes(const void *p, size_t n)
{
    unsigned char *q = malloc(n ? n : 1);
    memcpy(q, p, n);
    return q;
}

/* One backward on fixed inputs; dweight/dbias start from the same contents. */
static bits run_bwd(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype dt, fusednorm_dtype wdt,
                    unsigned flags, th_tensor *x, th_tensor *dy, th_tensor *w, const unsigned char *dw_init,
                    const unsigned char *db_init)
{
    th_tensor dx, dw, db;
    th_alloc(&dx, FUSEDNORM_CPU, dt, rows, cols, 0, 0);
    th_alloc(&dw, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_alloc(&db, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_poison(&dx);
    memcpy(dw.shadow, dw_init, dw.bytes);
    memcpy(db.shadow, db_init, db.bytes);
    th_upload(&dw);
    th_upload(&db);
    fusednorm_bwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = norm;
    a.rows = rows;
    a.cols = cols;
    a.eps = 1e-5f;
    a.flags = flags;
    a.dy = th_arg(dy);
    a.x = th_arg(x);
    a.weight = th_arg(w);
    a.dx = th_arg(&dx);
    a.dweight = th_arg(&dw);
    a.dbias = th_arg(&db);
    a.backend = FUSEDNORM_CPU;
    size_t need = 0;
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&a, &need), FUSEDNORM_OK);
    void *ws = need ? malloc(need) : NULL;
    if (ws) memset(ws, 0xFF, need);
    a.workspace = ws;
    a.workspace_bytes = need;
    ASSERT_STATUS(fusednorm_bwd(&a), FUSEDNORM_OK);
    th_download(&dx);
    th_download(&dw);
    th_download(&db);
    bits b;
    b.dw_n = (size_t)cols * dw.esize;
    b.db_n = (size_t)cols * db.esize;
    b.dx_n = dx.bytes;
    b.dw = dup_bytes(th_host(&dw), b.dw_n);
    b.db = dup_bytes(th_host(&db), b.db_n);
    b.dx = dup_bytes(dx.shadow, b.dx_n);
    free(ws);
    th_free(&dx);
    th_free(&dw);
    th_free(&db);
    return b;
}

static void test_bwd_case(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype dt, fusednorm_dtype wdt,
                          unsigned flags)
{
    snprintf(th_context, sizeof th_context, "determinism %s rows %lld cols %lld dtype %d wdtype %d flags %u",
             norm == FUSEDNORM_RMSNORM ? "rms" : "ln", (long long)rows, (long long)cols, (int)dt, (int)wdt, flags);
    th_tensor x, dy, w, init;
    th_alloc(&x, FUSEDNORM_CPU, dt, rows, cols, 0, 0);
    th_alloc(&dy, FUSEDNORM_CPU, dt, rows, cols, 0, 0);
    th_alloc(&w, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_alloc(&init, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_fill(&x, -2, 2);
    th_fill(&dy, -1, 1);
    th_fill(&w, 0.5, 1.5);
    th_fill(&init, -1, 1);

    const int default_threads = omp_get_max_threads();
    bits first = run_bwd(norm, rows, cols, dt, wdt, flags, &x, &dy, &w, init.shadow, init.shadow);
    bits again = run_bwd(norm, rows, cols, dt, wdt, flags, &x, &dy, &w, init.shadow, init.shadow);
    ASSERT_TRUE(memcmp(first.dw, again.dw, first.dw_n) == 0);
    ASSERT_TRUE(memcmp(first.db, again.db, first.db_n) == 0);
    ASSERT_TRUE(memcmp(first.dx, again.dx, first.dx_n) == 0);
    bits_free(&again);
    static const int threads[] = {1, 2, 3, 4, 7};
    for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++) {
        omp_set_num_threads(threads[i]);
        bits b = run_bwd(norm, rows, cols, dt, wdt, flags, &x, &dy, &w, init.shadow, init.shadow);
        th_record(memcmp(first.dw, b.dw, first.dw_n) == 0, __FILE__, __LINE__,
                  "dweight differs bitwise between %d threads and the default (%d)", threads[i], default_threads);
        th_record(memcmp(first.db, b.db, first.db_n) == 0, __FILE__, __LINE__,
                  "dbias differs bitwise between %d threads and the default (%d)", threads[i], default_threads);
        bits_free(&b);
    }
    omp_set_num_threads(default_threads);
    bits_free(&first);
    th_free(&x);
    th_free(&dy);
    th_free(&w);
    th_free(&init);
}

/* Forward y twice on the same inputs: bitwise equal. */
static void test_fwd_repeat(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype dt)
{
    snprintf(th_context, sizeof th_context, "fwd repeat %d rows %lld cols %lld dtype %d", (int)norm,
             (long long)rows, (long long)cols, (int)dt);
    th_tensor x, y1, y2;
    th_alloc(&x, FUSEDNORM_CPU, dt, rows, cols, 0, 0);
    th_alloc(&y1, FUSEDNORM_CPU, dt, rows, cols, 0, 0);
    th_alloc(&y2, FUSEDNORM_CPU, dt, rows, cols, 0, 0);
    th_fill(&x, -2, 2);
    th_poison(&y1);
    th_poison(&y2);
    fusednorm_fwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = norm;
    a.rows = rows;
    a.cols = cols;
    a.eps = 1e-6f;
    a.x = th_arg(&x);
    a.y = th_arg(&y1);
    ASSERT_STATUS(fusednorm_fwd(&a), FUSEDNORM_OK);
    omp_set_num_threads(3);
    a.y = th_arg(&y2);
    ASSERT_STATUS(fusednorm_fwd(&a), FUSEDNORM_OK);
    th_download(&y1);
    th_download(&y2);
    ASSERT_TRUE(memcmp(y1.shadow, y2.shadow, y1.bytes) == 0);
    th_free(&x);
    th_free(&y1);
    th_free(&y2);
}

/* fp16 rows: the F16C forms (the row pipelines of norm_cpu_f16c.c, the
 * scratch rows' F16C loads and stores) against the same calls without them
 * (fn_cpu_f16c_off): y, rstd, mean, dx, dweight and dbias bit for bit, the
 * residual call's residual_out too. Inf and NaN planted in a few rows of x
 * and dy take the F16C loads' fallback; a NaN then compares equal to any
 * NaN (which of two NaN operands' payloads an addition keeps depends on
 * the operand order, which the compiler may swap). Where the CPU has no
 * F16C both runs take the same path: said, and the bits still compared. */
#define F16_OUTPUTS 7 /* y, residual_out, dx, dweight, dbias, rstd, mean */

static int is_nan_bits(const unsigned char *p, size_t es)
{
    if (es == 2) {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    }
    uint32_t u;
    memcpy(&u, p, 4);
    return (u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu);
}

/* Elements of size es equal bit for bit, or both NaN. */
static int same_bits(const unsigned char *a, const unsigned char *b, size_t bytes, size_t es)
{
    for (size_t i = 0; i < bytes; i += es)
        if (memcmp(a + i, b + i, es) && !(is_nan_bits(a + i, es) && is_nan_bits(b + i, es))) return 0;
    return 1;
}
static void f16_special(th_tensor *t, int64_t r, int64_t c, uint16_t bits)
{
    memcpy((unsigned char *)t->shadow + ((size_t)r * (size_t)t->stride + (size_t)c) * 2, &bits, 2);
}

static void run_f16_pair(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype wdt, int residual,
                         th_tensor *x, th_tensor *dy, th_tensor *res, th_tensor *w, th_tensor *b,
                         unsigned char *out[F16_OUTPUTS], size_t out_n[F16_OUTPUTS], size_t out_es[F16_OUTPUTS])
{
    th_tensor y, ro, dx, dw, db;
    th_alloc(&y, FUSEDNORM_CPU, FUSEDNORM_F16, rows, cols, 0, 0);
    th_alloc(&ro, FUSEDNORM_CPU, FUSEDNORM_F16, rows, cols, 0, 0);
    th_alloc(&dx, FUSEDNORM_CPU, FUSEDNORM_F16, rows, cols, 0, 0);
    th_alloc(&dw, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_alloc(&db, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_poison(&y);
    th_poison(&ro);
    th_poison(&dx);
    th_poison(&dw);
    th_poison(&db);
    float *rstd = malloc((size_t)rows * 4), *mean = malloc((size_t)rows * 4);
    fusednorm_fwd_args f;
    memset(&f, 0, sizeof f);
    f.norm = norm;
    f.rows = rows;
    f.cols = cols;
    f.eps = 1e-5f;
    f.x = th_arg(x);
    f.weight = th_arg(w);
    if (norm == FUSEDNORM_LAYERNORM) f.bias = th_arg(b);
    if (residual) {
        f.residual = th_arg(res);
        f.residual_out = th_arg(&ro);
    }
    f.y = th_arg(&y);
    f.rstd = rstd;
    f.mean = norm == FUSEDNORM_LAYERNORM ? mean : NULL;
    ASSERT_STATUS(fusednorm_fwd(&f), FUSEDNORM_OK);
    fusednorm_bwd_args g;
    memset(&g, 0, sizeof g);
    g.norm = norm;
    g.rows = rows;
    g.cols = cols;
    g.eps = 1e-5f;
    g.dy = th_arg(dy);
    g.x = residual ? th_arg(&ro) : th_arg(x);
    g.weight = th_arg(w);
    g.rstd = rstd;
    g.mean = f.mean;
    g.dx = th_arg(&dx);
    g.dweight = th_arg(&dw);
    if (norm == FUSEDNORM_LAYERNORM) g.dbias = th_arg(&db);
    size_t ws = 0;
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&g, &ws), FUSEDNORM_OK);
    g.workspace = malloc(ws + 64);
    g.workspace_bytes = ws + 64;
    ASSERT_STATUS(fusednorm_bwd(&g), FUSEDNORM_OK);
    th_download(&y);
    th_download(&ro);
    th_download(&dx);
    th_download(&dw);
    th_download(&db);
    const th_tensor *ts[] = {&y, &ro, &dx, &dw, &db};
    for (int k = 0; k < 5; k++) {
        out[k] = dup_bytes(ts[k]->shadow, ts[k]->bytes);
        out_n[k] = ts[k]->bytes;
        out_es[k] = ts[k]->esize;
    }
    out[5] = dup_bytes(rstd, (size_t)rows * 4);
    out[6] = dup_bytes(f.mean ? mean : rstd, (size_t)rows * 4);
    out_n[5] = out_n[6] = (size_t)rows * 4;
    out_es[5] = out_es[6] = 4;
    free(g.workspace);
    free(rstd);
    free(mean);
    th_free(&y);
    th_free(&ro);
    th_free(&dx);
    th_free(&dw);
    th_free(&db);
}

static void test_f16_paths(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype wdt, int residual,
                           int specials)
{
    snprintf(th_context, sizeof th_context, "f16 F16C against without, norm %d rows %lld cols %lld w %d residual %d "
             "specials %d", (int)norm, (long long)rows, (long long)cols, (int)wdt, residual, specials);
    th_tensor x, dy, res, w, b;
    th_alloc(&x, FUSEDNORM_CPU, FUSEDNORM_F16, rows, cols, 0, 0);
    th_alloc(&dy, FUSEDNORM_CPU, FUSEDNORM_F16, rows, cols, 0, 0);
    th_alloc(&res, FUSEDNORM_CPU, FUSEDNORM_F16, rows, cols, 0, 0);
    th_alloc(&w, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_alloc(&b, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_fill(&x, -3, 3);
    th_fill(&dy, -1, 1);
    th_fill(&res, -1, 1);
    th_fill(&w, 0.5, 1.5);
    th_fill(&b, -0.5, 0.5);
    if (specials) { /* rows 1 and 2: Inf, -Inf, a quiet and a signaling NaN (in x), a NaN in dy */
        const uint16_t sp[] = {0x7c00, 0xfc00, 0x7e01, 0x7c05};
        for (int k = 0; k < 4; k++) f16_special(&x, 1 + k / 2, (cols - 1) * k / 3, sp[k]);
        f16_special(&dy, rows - 1, cols / 2, 0x7d00);
        th_upload(&x);
        th_upload(&dy);
    }
    unsigned char *with[F16_OUTPUTS], *without[F16_OUTPUTS];
    size_t n_with[F16_OUTPUTS], n_without[F16_OUTPUTS], es[F16_OUTPUTS];
    run_f16_pair(norm, rows, cols, wdt, residual, &x, &dy, &res, &w, &b, with, n_with, es);
    fn_cpu_f16c_off = 1;
    run_f16_pair(norm, rows, cols, wdt, residual, &x, &dy, &res, &w, &b, without, n_without, es);
    fn_cpu_f16c_off = 0;
    static const char *const names[F16_OUTPUTS] = {"y", "residual_out", "dx", "dweight", "dbias", "rstd", "mean"};
    for (int k = 0; k < F16_OUTPUTS; k++) {
        ASSERT_TRUE(n_with[k] == n_without[k] && same_bits(with[k], without[k], n_with[k], es[k]));
        if (n_with[k] != n_without[k] || !same_bits(with[k], without[k], n_with[k], es[k]))
            printf("  (%s differs)\n", names[k]);
        free(with[k]);
        free(without[k]);
    }
    th_free(&x);
    th_free(&dy);
    th_free(&res);
    th_free(&w);
    th_free(&b);
}

int main(void)
{
    th_init("test_determinism");
    const int default_threads = omp_get_max_threads();
    test_bwd_case(FUSEDNORM_RMSNORM, 4096, 256, FUSEDNORM_BF16, FUSEDNORM_BF16, 0);
    test_bwd_case(FUSEDNORM_LAYERNORM, 4096, 256, FUSEDNORM_F32, FUSEDNORM_F32, 0);
    test_bwd_case(FUSEDNORM_RMSNORM, 1037, 1000, FUSEDNORM_F16, FUSEDNORM_F32, FUSEDNORM_ACCUMULATE);
    test_bwd_case(FUSEDNORM_LAYERNORM, 199, 4097, FUSEDNORM_BF16, FUSEDNORM_F32, 0);
    test_bwd_case(FUSEDNORM_RMSNORM, 3, 65537, FUSEDNORM_F32, FUSEDNORM_F32, 0);
    test_bwd_case(FUSEDNORM_LAYERNORM, 1, 7, FUSEDNORM_F32, FUSEDNORM_F32, 0);
    omp_set_num_threads(default_threads);
    test_fwd_repeat(FUSEDNORM_LAYERNORM, 1000, 1000, FUSEDNORM_BF16);
    omp_set_num_threads(default_threads);
    test_fwd_repeat(FUSEDNORM_RMSNORM, 7, 65537, FUSEDNORM_F32);
    omp_set_num_threads(default_threads);
    if (!cpu_f16c()) printf("test_determinism: this CPU has no F16C + AVX2: the fp16 cases compare one path with itself\n");
    test_f16_paths(FUSEDNORM_RMSNORM, 67, 4096, FUSEDNORM_F16, 0, 0);
    test_f16_paths(FUSEDNORM_LAYERNORM, 67, 4096, FUSEDNORM_F16, 0, 1);
    test_f16_paths(FUSEDNORM_RMSNORM, 35, 4097, FUSEDNORM_F32, 0, 1);
    test_f16_paths(FUSEDNORM_LAYERNORM, 300, 1000, FUSEDNORM_F32, 0, 0);
    test_f16_paths(FUSEDNORM_RMSNORM, 33, 1031, FUSEDNORM_F16, 1, 1);
    test_f16_paths(FUSEDNORM_LAYERNORM, 5, 7, FUSEDNORM_F16, 0, 0);
    return th_finish();
}
