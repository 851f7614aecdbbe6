/*
 * Determinism of the CPU backend: without FUSEDNORM_ATOMIC_DWEIGHT, dweight
 * and dbias are bitwise identical across repeated runs and across OpenMP
 * thread counts (1, 2, 3, 4 and the default), for fp32 and 16-bit outputs
 * and with ACCUMULATE; forward y and backward dx are bitwise identical across
 * repeated runs. Values are checked against the reference by test_cpu_ops;
 * here only the bits matter.
 */
#include "harness.h"

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
    return th_finish();
}
