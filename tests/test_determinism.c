/*
 * Determinism of the CPU backend: without FUSEDNORM_ATOMIC_DWEIGHT, dweight
 * and dbias are bitwise identical across repeated runs and across OpenMP
 * thread counts (1, 2, 3, 4 and the default), for fp32 and 16-bit outputs
 * and with ACCUMULATE; forward y and backward dx are bitwise identical across
 * repeated runs; the row pipelines give the scratch rows' bits, and fp16 rows
 * the same bits with the F16C forms as without them (a CPU with F16C and one
 * without agree). Values are checked against
 * the reference by test_cpu_ops; here only the bits matter.
 */
#include "harness.h"
#include "cpu/cpu_rows.h" /* cpu_f16c */
#include "internal.h"   /* fn_cpu_f16c_off, fn_cpu_pipeline_off, fn_store */

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

/* The CPU backend's paths agree bit for bit: the row pipelines against the
 * scratch rows (fn_cpu_pipeline_off), and for fp16 the F16C forms against
 * the 8-lane ones (fn_cpu_f16c_off); y, residual_out, rstd, mean, dx,
 * dresidual, dweight and dbias, every dtype, with and without the residual
 * call (its backward with dresidual_out and dresidual). Inf and NaN planted
 * in a few rows of x and dy take the F16C loads' fallback; a NaN then
 * compares equal to any NaN (which of two NaN operands' payloads an
 * addition keeps depends on the operand order, which the compiler may
 * swap). Where the CPU has no F16C the fp16 runs take one path: said, and
 * the bits still compared. */
enum { PATH_OUTPUTS = 8 }; /* y, residual_out, dx, dresidual, dweight, dbias, rstd, mean */
typedef struct path_out {
    unsigned char *p[PATH_OUTPUTS];
    size_t n[PATH_OUTPUTS], es[PATH_OUTPUTS];
} path_out;

static int is_nan_bits(const unsigned char *p, size_t es)
{
    if (es == 2) { /* fp16 or bf16: NaN in either reading of the bits */
        uint16_t h;
        memcpy(&h, p, 2);
        return ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) || ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu));
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

static void special(th_tensor *t, int64_t r, int64_t c, double v)
{
    /* through the shadow: fp32 as is, 16-bit by internal.h's rounding */
    unsigned char *p = t->shadow + ((size_t)r * (size_t)t->stride + (size_t)c) * t->esize;
    fn_store(p, t->dtype, 0, (float)v);
}

static path_out run_paths(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype dt, fusednorm_dtype wdt,
                          int residual, th_tensor *x, th_tensor *dy, th_tensor *res, th_tensor *dro, th_tensor *w,
                          th_tensor *b)
{
    th_tensor t[6]; /* y, residual_out, dx, dresidual, dweight, dbias */
    for (int k = 0; k < 6; k++) {
        th_alloc(&t[k], FUSEDNORM_CPU, k < 4 ? dt : wdt, k < 4 ? rows : 1, cols, 0, 0);
        th_poison(&t[k]);
    }
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
        f.residual_out = th_arg(&t[1]);
    }
    f.y = th_arg(&t[0]);
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
    g.x = residual ? th_arg(&t[1]) : th_arg(x);
    g.weight = th_arg(w);
    g.rstd = rstd;
    g.mean = f.mean;
    g.dx = th_arg(&t[2]);
    if (residual) {
        g.dresidual_out = th_arg(dro);
        g.dresidual = th_arg(&t[3]);
    }
    g.dweight = th_arg(&t[4]);
    if (norm == FUSEDNORM_LAYERNORM) g.dbias = th_arg(&t[5]);
    size_t ws = 0;
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&g, &ws), FUSEDNORM_OK);
    g.workspace = ws ? malloc(ws) : NULL;
    if (g.workspace) memset(g.workspace, 0xFF, ws);
    g.workspace_bytes = ws;
    ASSERT_STATUS(fusednorm_bwd(&g), FUSEDNORM_OK);
    path_out o;
    for (int k = 0; k < 6; k++) {
        th_download(&t[k]);
        o.p[k] = dup_bytes(t[k].shadow, t[k].bytes);
        o.n[k] = t[k].bytes;
        o.es[k] = t[k].esize;
        th_free(&t[k]);
    }
    o.p[6] = dup_bytes(rstd, (size_t)rows * 4);
    o.p[7] = dup_bytes(f.mean ? mean : rstd, (size_t)rows * 4);
    o.n[6] = o.n[7] = (size_t)rows * 4;
    o.es[6] = o.es[7] = 4;
    free(g.workspace);
    free(rstd);
    free(mean);
    return o;
}

static void expect_same(const path_out *a, const path_out *b, const char *what)
{
    static const char *const names[PATH_OUTPUTS] = {"y", "residual_out", "dx", "dresidual", "dweight", "dbias",
                                                   "rstd", "mean"};
    for (int k = 0; k < PATH_OUTPUTS; k++) {
        int same = a->n[k] == b->n[k] && same_bits(a->p[k], b->p[k], a->n[k], a->es[k]);
        ASSERT_TRUE(same);
        if (!same) printf("  (%s: %s differs)\n", what, names[k]);
    }
}

static void path_free(path_out *o)
{
    for (int k = 0; k < PATH_OUTPUTS; k++) free(o->p[k]);
}

static void test_paths(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype dt, fusednorm_dtype wdt,
                       int residual, int specials)
{
    snprintf(th_context, sizeof th_context, "paths: norm %d rows %lld cols %lld dtype %d w %d residual %d specials %d",
             (int)norm, (long long)rows, (long long)cols, (int)dt, (int)wdt, residual, specials);
    th_tensor x, dy, res, dro, w, b;
    th_tensor *acts[] = {&x, &dy, &res, &dro};
    for (int k = 0; k < 4; k++) {
        th_alloc(acts[k], FUSEDNORM_CPU, dt, rows, cols, 0, 0);
        th_fill(acts[k], k == 0 ? -3 : -1, k == 0 ? 3 : 1);
    }
    th_alloc(&w, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_alloc(&b, FUSEDNORM_CPU, wdt, 1, cols, 0, 0);
    th_fill(&w, 0.5, 1.5);
    th_fill(&b, -0.5, 0.5);
    if (specials) { /* rows 1 and 2: Inf, -Inf and NaN in x; a NaN in dy */
        special(&x, 1, 0, 1.0 / 0.0);
        special(&x, 1, cols / 3, -1.0 / 0.0);
        special(&x, 2, cols - 1, 0.0 / 0.0);
        special(&dy, rows - 1, cols / 2, 0.0 / 0.0);
        th_upload(&x);
        th_upload(&dy);
    }
    path_out def = run_paths(norm, rows, cols, dt, wdt, residual, &x, &dy, &res, &dro, &w, &b);
    fn_cpu_pipeline_off = 1;
    path_out rows_only = run_paths(norm, rows, cols, dt, wdt, residual, &x, &dy, &res, &dro, &w, &b);
    fn_cpu_pipeline_off = 0;
    expect_same(&def, &rows_only, "pipeline against scratch rows");
    if (dt == FUSEDNORM_F16) {
        fn_cpu_f16c_off = 1;
        path_out no_f16c = run_paths(norm, rows, cols, dt, wdt, residual, &x, &dy, &res, &dro, &w, &b);
        fn_cpu_f16c_off = 0;
        expect_same(&def, &no_f16c, "F16C against without");
        path_free(&no_f16c);
    }
    path_free(&def);
    path_free(&rows_only);
    for (int k = 0; k < 4; k++) th_free(acts[k]);
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
    const fusednorm_dtype dts[] = {FUSEDNORM_F32, FUSEDNORM_BF16, FUSEDNORM_F16};
    for (int d = 0; d < 3; d++) {
        const fusednorm_dtype dt = dts[d];
        test_paths(FUSEDNORM_RMSNORM, 67, 4096, dt, dt, 0, 0);
        test_paths(FUSEDNORM_LAYERNORM, 67, 4096, dt, dt, 0, 1);
        test_paths(FUSEDNORM_RMSNORM, 35, 4097, dt, FUSEDNORM_F32, 0, 1);
        test_paths(FUSEDNORM_LAYERNORM, 300, 1000, dt, FUSEDNORM_F32, 0, 0);
        test_paths(FUSEDNORM_RMSNORM, 33, 1031, dt, dt, 1, 1);
        test_paths(FUSEDNORM_LAYERNORM, 40, 2048, dt, dt, 1, 0);
        test_paths(FUSEDNORM_LAYERNORM, 5, 7, dt, dt, 1, 0);
    }
    return th_finish();
}
