/*
 * The CUDA backend: the op suite against the fp64 reference (design's
 * required dtype mixes), GPU against the CPU backend on identical inputs,
 * an unsupported mix refused with nothing written, bitwise determinism of
 * dweight/dbias, fwd+bwd captured in a CUDA graph on a non-default stream
 * and replayed, one tensor over 2^31 elements (when memory allows), and the
 * lab's plan knobs on misaligned rows.
 * Exits 77 (ctest: skipped) when the build has no CUDA or no device is usable.
 */
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv (the knob tests) */
#include "opsuite.h"

#include "internal.h"
#include "plan.h"
#include "ref/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if FUSEDNORM_WITH_CUDA
#include <cuda_runtime.h>
#include <omp.h>

#define CUDA_OK(call)                                                                                                \
    th_record((call) == cudaSuccess, __FILE__, __LINE__, "%s failed: %s", #call, cudaGetErrorString(cudaGetLastError()))

/* Case c with the same inputs (RNG restored) on the CPU and on the GPU; each
 * run is checked against the reference, and the two against each other. */
static void gpu_vs_cpu(const th_case *c, const char *what)
{
    th_case_result cpu, gpu;
    uint64_t rng = th_rng_get();
    th_run_case(c, FUSEDNORM_CPU, &cpu);
    th_rng_set(rng);
    th_run_case(c, FUSEDNORM_CUDA, &gpu);
    th_compare_results(&cpu, &gpu, what);
    th_case_result_free(&cpu);
    th_case_result_free(&gpu);
}

/* Case c twice on the GPU with the same inputs (RNG restored): dweight (and
 * dbias), where the case asks for them, bitwise equal (no atomics). */
static void gpu_repeatable(const th_case *c, const char *what)
{
    th_case_result r1, r2;
    const uint64_t rng = th_rng_get();
    th_run_case(c, FUSEDNORM_CUDA, &r1);
    th_rng_set(rng);
    th_run_case(c, FUSEDNORM_CUDA, &r2);
    snprintf(th_context, sizeof th_context, "%s", what);
    if (c->dweight_on)
        ASSERT_TRUE(r1.dweight_bits && r2.dweight_bits && memcmp(r1.dweight_bits, r2.dweight_bits, r1.dweight_bytes) == 0);
    if (c->dbias_on)
        ASSERT_TRUE(r1.dbias_bits && r2.dbias_bits && memcmp(r1.dbias_bits, r2.dbias_bits, r1.dbias_bytes) == 0);
    th_context[0] = '\0';
    th_case_result_free(&r1);
    th_case_result_free(&r2);
}

/* Every feature on, 16-bit, at shapes of each path. */
static void test_gpu_vs_cpu(void)
{
    static const int64_t shapes[][2] = {{37, 1000}, {199, 4097}, {4, 65537}, {1024, 128}, {3, 65544}, {3, 32776}, {5, 40001}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int n = 0; n < 2; n++) {
            th_case c = th_case_default((fusednorm_norm)n, shapes[i][0], shapes[i][1],
                                        i % 2 ? FUSEDNORM_BF16 : FUSEDNORM_F16);
            c.residual_on = c.residual_out_on = c.bias_on = 1;
            c.store_rstd = 1;
            c.store_mean = n;
            c.bwd_stats_given = 1;
            c.dweight_on = c.dbias_on = c.dresidual_out_on = c.dresidual_on = 1;
            gpu_vs_cpu(&c, "gpu vs cpu");
        }
}

/* The backward's ODD tile (16-bit rows off 16 bytes) on the calls it plans
 * apart, against the CPU backend, with more rows than the grid has clusters
 * (each walks several rows of one offset): the plain call (1: no bias, 2:
 * LayerNorm's bias) in the 32-element tile at 40001 / 65537, and the
 * residual call (3: dresidual_out, no bias), which that tile has no instance
 * for (odd_instance) and must leave to two-pass; once planned onto it, it
 * failed with cudaErrorInvalidValue (session 17). 300 rows take two waves of
 * the resident clusters (56 of 30 on the H200, fn_plan_odd_clusters); the
 * 1000-row case takes the large calls' grid, four waves (120). */
static void test_odd_calls(void)
{
    static const int64_t cols[] = {40001, 65537};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        for (int n = 0; n < 2; n++)
            for (int res = 0; res < 2; res++) {
                th_case c = th_case_default((fusednorm_norm)n, 300, cols[i], i ? FUSEDNORM_BF16 : FUSEDNORM_F16);
                c.bias_on = c.dbias_on = n == 1 && !res;
                c.store_rstd = 1;
                c.store_mean = n;
                c.bwd_stats_given = 1;
                c.dweight_on = 1;
                c.residual_on = c.residual_out_on = c.dresidual_out_on = c.dresidual_on = res;
                gpu_vs_cpu(&c, "odd rows: gpu vs cpu");
            }
    th_case c = th_case_default(FUSEDNORM_RMSNORM, 1000, 65537, FUSEDNORM_BF16);
    c.store_rstd = 1;
    c.bwd_stats_given = 1;
    c.dweight_on = 1;
    gpu_vs_cpu(&c, "odd rows, four waves: gpu vs cpu");
}

/* The ODD backward's grid is the one fn_plan_odd_clusters plans (step 88),
 * read from the workspace: one fp32 partial row of dweight a cluster (RMSNorm
 * bf16, 1000 x 65537, period 8). FUSEDNORM_BWD_ODD_GRID=x8 asks for 8 times
 * the resident clusters, a multiple of 8, from which the planner's grid
 * follows; the same call once planned one wave rounded down to 8 (24 of 30
 * clusters on the H200) would fail here. */
static void test_odd_grid(void)
{
    const int64_t rows = 1000, cols = 65537;
    void *x = NULL, *dy = NULL, *dx = NULL, *w = NULL, *dw = NULL;
    CUDA_OK(cudaMalloc(&x, (size_t)(rows * cols * 2)));
    CUDA_OK(cudaMalloc(&dy, (size_t)(rows * cols * 2)));
    CUDA_OK(cudaMalloc(&dx, (size_t)(rows * cols * 2)));
    CUDA_OK(cudaMalloc(&w, (size_t)cols * 2));
    CUDA_OK(cudaMalloc(&dw, (size_t)cols * 2));
    fusednorm_bwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = FUSEDNORM_RMSNORM;
    a.rows = rows;
    a.cols = cols;
    a.eps = 1e-6f;
    a.x = (fusednorm_tensor){x, FUSEDNORM_BF16, 0};
    a.dy = (fusednorm_tensor){dy, FUSEDNORM_BF16, 0};
    a.dx = (fusednorm_tensor){dx, FUSEDNORM_BF16, 0};
    a.weight = (fusednorm_tensor){w, FUSEDNORM_BF16, 0};
    a.dweight = (fusednorm_tensor){dw, FUSEDNORM_BF16, 0};
    a.backend = FUSEDNORM_CUDA;
    size_t planned = 0, by8 = 0;
    unsetenv("FUSEDNORM_BWD_ODD_GRID");
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&a, &planned), FUSEDNORM_OK);
    setenv("FUSEDNORM_BWD_ODD_GRID", "x8", 1);
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&a, &by8), FUSEDNORM_OK);
    unsetenv("FUSEDNORM_BWD_ODD_GRID");
    const int64_t row_bytes = cols * (int64_t)sizeof(float); /* the workspace pads by under one row */
    const int64_t g = (int64_t)planned / row_bytes, g8 = (int64_t)by8 / row_bytes;
    snprintf(th_context, sizeof th_context, "odd grid: planned %lld clusters, x8 %lld", (long long)g, (long long)g8);
    ASSERT_TRUE(g >= 8 && g % 8 == 0 && g8 % 8 == 0);
    if (g8 < rows) /* else clamped to the rows: a GPU of over 125 resident clusters */
        ASSERT_EQ_INT(g, fn_plan_odd_clusters(g8 / 8, 8, rows));
    th_context[0] = '\0';
    cudaFree(x);
    cudaFree(dy);
    cudaFree(dx);
    cudaFree(w);
    cudaFree(dw);
}

/* RMSNorm's forward past 64 KiB in the register tile over a cluster (step
 * 90, 16-bit: 40000 in 5 x 256, 65536 in 8 x 256, 131072 in 8 x 512; step
 * 91, fp32: 20000 in 5 x 256, 32768 in 8 x 256, 65536 in 8 x 512), the row
 * sums met by the cluster exchange, against the CPU backend: the plain call
 * (the PLAIN variants, with and without a bias), weight_offset, and no
 * weight (PLAIN with a weight of ones, step 95), on 9 rows; the plain call
 * again on 300 rows, more than the resident clusters (33 and 16 on the
 * H200), so that each cluster walks several rows and the exchange's buffers
 * and mbarrier phases turn over (a wrong parity hangs or reads a stale sum). device.sh's check
 * with FUSEDNORM_GRID_CAP=2 walks them too (the cap is read once a process). */
static void test_fwd_rows_cluster(void)
{
    /* 16-bit: 5 x 256 (inexact), 8 x 256, 16 x 256 (three stages), 16 x 512;
     * fp32 (steps 91, 93, 99): 5 x 256 (inexact), 3 x 256 and 4 x 256 at 32
     * elements, 8 x 384, 8 x 256 at 32, 16 x 384, 16 x 256 at 32, 16 x 512 at
     * 32 (128 KiB of stages), and without a weight (a weight of ones in the
     * cache: step 95). Rows of 262144 walk the grid on 40 rows (8 clusters
     * of 16 resident on the H200), not 300. */
    static const int64_t cols[] = {40000, 65536, 131072, 262144, 20000, 24576, 32768, 49152, 65536, 98304, 131072, 262144};
    /* The planner's pipeline depth (FN_DEEP_STAGES on some tiles: launch_rows
     * in norm_fwd.cu), then through the lab knob FUSEDNORM_FWD_DEEP two
     * stages everywhere and three on every cluster (16 too), each on 100
     * rows (6 or more a cluster: the stages turn over) with a bias. */
    static const char *const deep[] = {"1", "0", "2"};
    for (int d = 0; d < 3; d++) {
        setenv("FUSEDNORM_FWD_DEEP", deep[d], 1);
        for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
            for (int f = 0; f < 5; f++) {
                if (d > 0 && f != 4) continue;
                const int64_t walk = cols[i] >= 262144 ? 40 : d ? 100 : 300;
                th_case c = th_case_default(FUSEDNORM_RMSNORM, f == 4 ? walk : 9, cols[i],
                                            i >= 4 ? FUSEDNORM_F32 : (i + f) % 2 ? FUSEDNORM_BF16 : FUSEDNORM_F16);
                c.bias_on = f == 1 || d > 0;
                c.weight_offset = f == 2 ? 1.0f : 0.0f;
                c.weight_on = f != 3;
                c.store_rstd = 1;
                c.skip_bwd = 1;
                gpu_vs_cpu(&c, "forward over a cluster: gpu vs cpu");
            }
    }
    unsetenv("FUSEDNORM_FWD_DEEP");
#if FUSEDNORM_WITH_CUDA
    /* fp32 without a weight over a cluster at EPT 16 (PLAIN with a weight of
     * ones, step 95), through the knob: 8 x 256 exact and 5 x 256 not. */
    static const struct { int64_t cols; const char *plan; } nw[] = {{32768, "16,256,8"}, {20000, "16,256,5"}};
    for (size_t i = 0; i < sizeof nw / sizeof nw[0]; i++) {
        setenv("FUSEDNORM_PLAN_FWD", nw[i].plan, 1);
        for (int f = 0; f < 3; f++) {
            th_case c = th_case_default(FUSEDNORM_RMSNORM, f == 2 ? 300 : 9, nw[i].cols, FUSEDNORM_F32);
            c.weight_on = 0;
            c.bias_on = f == 1;
            c.outliers = f == 0;
            c.store_rstd = 1;
            c.skip_bwd = 1;
            gpu_vs_cpu(&c, "fp32 forward without a weight over a cluster: gpu vs cpu");
        }
    }
    unsetenv("FUSEDNORM_PLAN_FWD");
#endif
    /* The residual call from 32 KiB (step 93): 16-bit 2 x 256, 3 x 192
     * (inexact), 5 x 256 (inexact), 8 x 256; residual_out kept, prenorm in
     * place (residual_out == residual, y == x), without residual_out, with
     * a bias and no weight, 300 rows walking the grid. */
    /* fp32 (step 94, the general kernel over a cluster with the exchange):
     * 2 x 256, 8 x 256, 16 x 256; 12292 held (4 x 224 inexact lost). Step
     * 99: 16-bit 16 x 256 (131072) and 16 x 512 (262144), fp32 16 x 512
     * (131072, 128 KiB of stages); those walk the grid on 40 rows. Step
     * 103: fp32 16 x 512 x 32 (262144, one stage of x and the residual,
     * refilled as each row is unstaged). */
    static const int64_t res_cols[] = {16384, 16392, 40000, 65536, 131072, 262144, 8192, 12292, 32768, 65536, 131072, 262144};
    for (size_t i = 0; i < sizeof res_cols / sizeof res_cols[0]; i++)
        for (int f = 0; f < 5; f++) {
            th_case c = th_case_default(FUSEDNORM_RMSNORM, f == 4 ? res_cols[i] >= 131072 ? 40 : 300 : 9, res_cols[i],
                                        i >= 6 ? FUSEDNORM_F32 : (i + f) % 2 ? FUSEDNORM_BF16 : FUSEDNORM_F16);
            c.residual_on = 1;
            c.residual_out_on = f != 2;
            c.alias_resout_res = c.alias_y_x = f == 1;
            c.bias_on = f == 3;
            c.weight_on = f != 3;
            c.outliers = f == 0 && c.x == FUSEDNORM_BF16;
            c.store_rstd = 1;
            c.skip_bwd = 1;
            gpu_vs_cpu(&c, "residual forward over a cluster: gpu vs cpu");
        }
}

#if FUSEDNORM_WITH_CUDA
/* LayerNorm's forward in the register tile over a cluster, the planner's
 * plans and others, through the lab knob (read on every call): the sum and
 * the squares in one exchange, or, where the mean is far from zero against
 * the spread, the centred squares in a second (step 96). Exact tiles (8 x 256 at the compiled tpr 256, 8 x 512,
 * fp32 8 x 256), inexact ones (5 x 256) and a cluster of 2; with a bias,
 * without one, without a weight, mean and rstd stored, the outlier rows, 300
 * rows walking the grid, and 300 rows of which the odd ones lie about 100
 * (x_offset): those take the second exchange, so that the exchange's buffers
 * and mbarrier phases turn over at one and two reductions a row in turn.
 * Clusters of 16 (step 101): fp32 16 x 256 x 32, 16-bit 16 x 256 and 16 x
 * 512, by the knob and by the planner; fp32 16 x 512 x 32 (step 102: one
 * stage, refilled at each row's start). */
static void test_fwd_ln_cluster(void)
{
    /* sixteen: a tile of 16 CTAs (fewer rows, below); the rest take 0 */
    static const struct { int64_t cols; fusednorm_dtype dt; const char *plan; int sixteen; } cases[] = {
        {65536, FUSEDNORM_BF16, "32,256,8", 0}, {131072, FUSEDNORM_F16, "32,512,8", 0},
        {40000, FUSEDNORM_BF16, "32,256,5", 0}, {16384, FUSEDNORM_BF16, "32,256,2", 0},
        {32768, FUSEDNORM_F32, "16,256,8", 0},  {20000, FUSEDNORM_F32, "16,256,5", 0},
        /* the planner's fp32 tiles (step 96): 32 elements in 3 / 4 / 8 x 256, 8 x 384 at 16 */
        {24576, FUSEDNORM_F32, "32,256,3", 0},  {32768, FUSEDNORM_F32, "32,256,4", 0},
        {65536, FUSEDNORM_F32, "32,256,8", 0},  {49152, FUSEDNORM_F32, "16,384,8", 0},
        /* the planner's tiles of 16 CTAs (step 101) */
        {131072, FUSEDNORM_F32, "32,256,16", 1}, {131072, FUSEDNORM_BF16, "32,256,16", 1},
        {262144, FUSEDNORM_BF16, "32,512,16", 1}, {262144, FUSEDNORM_F16, "32,512,16", 1},
        /* fp32 16 x 512 x 32: one stage beside the weight and bias cache (step 102) */
        {262144, FUSEDNORM_F32, "32,512,16", 1},
        /* and as the planner gives them (no knob) */
        {131072, FUSEDNORM_F32, NULL, 1}, {262144, FUSEDNORM_BF16, NULL, 1},
    };
    /* the planner's pipeline depth (three stages on its exact tiles of 8
     * and 16 CTAs since step 101), then two stages and three on every
     * cluster (FUSEDNORM_FWD_DEEP=0, 2), each on 100 rows with the offset
     * odd rows */
    static const char *const deep[] = {"1", "0", "2"};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (cases[i].plan) setenv("FUSEDNORM_PLAN_FWD", cases[i].plan, 1);
            else unsetenv("FUSEDNORM_PLAN_FWD");
            setenv("FUSEDNORM_FWD_DEEP", deep[d], 1);
            /* the rows of 16 CTAs (step 101) are 2-4x the others: 48 rows
             * (six turns of the 8 clusters resident), the planner's and
             * fp16's only with the offset odd rows at its own depth (at
             * 300 rows the group ran past 200 s of device time) */
            const int big = cases[i].sixteen, once = big && (!cases[i].plan || cases[i].dt == FUSEDNORM_F16);
            if (once && d) continue;
            for (int f = 0; f < 6; f++) {
                if (d && f != 5) continue;
                if (once && f != 5) continue;
                const int64_t rows = f < 4 ? 9 : big ? 48 : d ? 100 : 300;
                th_case c = th_case_default(FUSEDNORM_LAYERNORM, rows, cases[i].cols, cases[i].dt);
                c.bias_on = f != 1;
                c.weight_on = f != 2;
                c.outliers = f == 3 && cases[i].dt != FUSEDNORM_F16;
                c.x_offset = f == 5 ? 100.0f : 0.0f;
                c.store_rstd = c.store_mean = 1;
                c.skip_bwd = 1;
                gpu_vs_cpu(&c, "layernorm forward over a cluster: gpu vs cpu");
            }
        }
    unsetenv("FUSEDNORM_PLAN_FWD");
    unsetenv("FUSEDNORM_FWD_DEEP");
}
#endif

#if FUSEDNORM_WITH_CUDA
/* LayerNorm's residual forward past 64 KiB in the register tile over a
 * cluster (step 111: x and the residual staged, the sum and the squares met
 * by one exchange, or two where the mean is far from zero), as the planner
 * gives it: 16-bit 5 x 256 (inexact), 8 x 256, 16 x 256, 16 x 512; fp32 8 x
 * 256 x 16, 8 x 512 x 16 (65536: clusters stop at 8 for LayerNorm), 16 x
 * 512 x 16; fp32 262144 off the tile as before (plan.h's
 * FN_PLAN_LN_RES_TILE_END_BYTES). residual_out kept, prenorm in place
 * (residual_out == residual, y == x), without residual_out, with a bias and
 * no weight, the outlier rows; then rows walking the grid (300, 40 for the
 * tiles of 16 CTAs) whose odd rows lie about 100 (x_offset: the second
 * exchange), so that the stages and the exchange's phases turn over. */
static void test_fwd_ln_res_cluster(void)
{
    static const struct { int64_t cols; fusednorm_dtype dt; } cases[] = {
        {40000, FUSEDNORM_BF16},  {65536, FUSEDNORM_BF16}, {131072, FUSEDNORM_F16}, {262144, FUSEDNORM_BF16},
        {32768, FUSEDNORM_F32},   {65536, FUSEDNORM_F32},  {131072, FUSEDNORM_F32}, {262144, FUSEDNORM_F32},
    };
    unsetenv("FUSEDNORM_PLAN_FWD");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int f = 0; f < 6; f++) {
            const int big = cases[i].cols >= 131072;
            th_case c = th_case_default(FUSEDNORM_LAYERNORM, f == 5 ? big ? 40 : 300 : 9, cases[i].cols, cases[i].dt);
            c.residual_on = 1;
            c.residual_out_on = f != 2;
            c.alias_resout_res = c.alias_y_x = f == 1;
            c.bias_on = f != 4;
            c.weight_on = f != 3;
            c.outliers = f == 0 && cases[i].dt != FUSEDNORM_F16;
            c.x_offset = f == 5 ? 100.0f : 0.0f;
            c.store_rstd = c.store_mean = 1;
            c.skip_bwd = 1;
            gpu_vs_cpu(&c, "layernorm residual forward over a cluster: gpu vs cpu");
        }
}

/* Case c on the CUDA backend twice on the same inputs: the lab knob `knob`
 * at "0" for r[0], at `on` for r[1] (each run checked against the reference
 * in th_run_case). */
static void run_knob_off_at(const th_case *c, const char *knob, const char *on, th_case_result r[2])
{
    const uint64_t rng = th_rng_get();
    for (int i = 0; i < 2; i++) {
        setenv(knob, i ? on : "0", 1);
        th_rng_set(rng);
        th_run_case(c, FUSEDNORM_CUDA, &r[i]);
    }
}

/* The same with the knob at "1" (its default) for r[1]. */
static void run_knob_off_on(const th_case *c, const char *knob, th_case_result r[2])
{
    run_knob_off_at(c, knob, "1", r);
}

/* How many of the n elements of a and b differ (0 where either is missing:
 * the callers assert their presence apart). */
static int64_t count_differing(const double *a, const double *b, int64_t n)
{
    int64_t d = 0;
    if (a && b)
        for (int64_t e = 0; e < n; e++) d += a[e] != b[e];
    return d;
}

/* Case c on the CUDA backend with the backward lab knob `knob` off and on
 * (run_knob_off_on): dx equal element for element; dweight too when
 * same_dweight (not for atomic dweight, whose order of adds is the
 * hardware's). `what` names the pair in a failure. */
static void assert_bwd_knob_equal(const th_case *c, const char *knob, int same_dweight, const char *what)
{
    th_case_result r[2];
    run_knob_off_on(c, knob, r);
    snprintf(th_context, sizeof th_context, "%s: %s=0 against %s=1", what, knob, knob);
    const int64_t n = r[0].rows * r[0].cols;
    ASSERT_TRUE(r[0].dx && r[1].dx && r[0].dweight && r[1].dweight);
    ASSERT_EQ_INT(count_differing(r[0].dx, r[1].dx, n), 0);
    if (same_dweight) ASSERT_EQ_INT(count_differing(r[0].dweight, r[1].dweight, r[0].cols), 0);
    th_context[0] = '\0';
    th_case_result_free(&r[0]);
    th_case_result_free(&r[1]);
    unsetenv(knob);
}
#endif

#if FUSEDNORM_WITH_CUDA
/* The forward's exchange in two halves (LAG, norm_fwd.cu: the exact 16-bit
 * tiles of 512 threads over a cluster) against the one-call exchange
 * (FUSEDNORM_FWD_LAG=0) on the same inputs: y equal element for element (the
 * same sums in the same order), and each against the fp64 reference (in
 * th_run_case). 262144 in 16 x 512 on 40 rows (five turns of the 8 resident
 * clusters: every buffer and phase of the exchange reused), RMSNorm and
 * LayerNorm, the LayerNorm rows about 100 between rows about zero (the
 * centred squares at cluster barriers, then the exchange again), two and
 * three stages; fp16 LayerNorm 131072 in 8 x 512. LayerNorm's 256-thread
 * tiles with a bias, which take LAG at two stages by launch_rows's rule
 * (FN_FWD_LAG_LN256; the knob at its default "1"): 16-bit 65536 in 8 x 256
 * on 100 rows (12 turns of the 8-CTA clusters two an SM resident on the
 * H200), 16-bit 131072 in 16 x 256. */
static void test_fwd_lag(void)
{
    static const struct {
        fusednorm_norm norm;
        int64_t cols, rows;
        fusednorm_dtype dt;
        const char *plan, *deep, *on;
    } cases[] = {
        {FUSEDNORM_RMSNORM, 262144, 40, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_RMSNORM, 262144, 40, FUSEDNORM_F16, NULL, "2", "1"},
        {FUSEDNORM_LAYERNORM, 262144, 40, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_LAYERNORM, 262144, 40, FUSEDNORM_BF16, NULL, "0", "1"},
        {FUSEDNORM_LAYERNORM, 131072, 40, FUSEDNORM_F16, "32,512,8", "1", "1"},
        {FUSEDNORM_LAYERNORM, 65536, 100, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_LAYERNORM, 65536, 100, FUSEDNORM_F16, NULL, "1", "1"},
        {FUSEDNORM_LAYERNORM, 131072, 40, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_LAYERNORM, 131072, 40, FUSEDNORM_F16, NULL, "1", "1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].plan) setenv("FUSEDNORM_PLAN_FWD", cases[i].plan, 1);
        else unsetenv("FUSEDNORM_PLAN_FWD");
        setenv("FUSEDNORM_FWD_DEEP", cases[i].deep, 1);
        th_case c = th_case_default(cases[i].norm, cases[i].rows, cases[i].cols, cases[i].dt);
        c.bias_on = cases[i].norm == FUSEDNORM_LAYERNORM;
        c.weight_offset = cases[i].norm == FUSEDNORM_RMSNORM ? 1.0f : 0.0f;
        c.x_offset = cases[i].norm == FUSEDNORM_LAYERNORM ? 100.0f : 0.0f;
        c.store_rstd = 1;
        c.store_mean = cases[i].norm == FUSEDNORM_LAYERNORM;
        c.skip_bwd = 1;
        th_case_result r[2];
        run_knob_off_at(&c, "FUSEDNORM_FWD_LAG", cases[i].on, r);
        snprintf(th_context, sizeof th_context, "forward LAG against the one-call exchange, %s %lld %s (deep %s, lag %s)",
                 cases[i].norm == FUSEDNORM_RMSNORM ? "rms" : "ln", (long long)cases[i].cols,
                 cases[i].dt == FUSEDNORM_BF16 ? "bf16" : "f16", cases[i].deep, cases[i].on);
        ASSERT_TRUE(r[0].y && r[1].y);
        ASSERT_EQ_INT(count_differing(r[0].y, r[1].y, r[0].rows * r[0].cols), 0);
        th_context[0] = '\0';
        th_case_result_free(&r[0]);
        th_case_result_free(&r[1]);
    }
    unsetenv("FUSEDNORM_PLAN_FWD");
    unsetenv("FUSEDNORM_FWD_DEEP");
    unsetenv("FUSEDNORM_FWD_LAG");
}
#endif

#if FUSEDNORM_WITH_CUDA
/* The residual call's PLAIN tiles (PLAIN_RES, norm_fwd.cu: 16-bit x, residual,
 * residual_out and y of one dtype over a cluster) against the general kernel
 * (FUSEDNORM_FWD_PLAIN_RES=0) on the same inputs: y, residual_out and rstd
 * equal element for element (the same sums in the same order), each against
 * the fp64 reference too (th_run_case). The planner's RMSNorm tiles: 16384
 * in 2 x 256, 40000 in 5 x 256 (idle columns), 65536 in 8 x 256, 131072 in
 * 16 x 256 (two stages and three, FUSEDNORM_FWD_DEEP=2), 262144 in 16 x 512
 * (the exchange in two halves, LAG, and without it); LayerNorm through the
 * plan knob at 65536 and 262144 (rows about 100 between rows about zero: the
 * centred squares). residual_out kept, in place (residual_out == residual,
 * y == x), left out, and with a bias; 40 rows (262144) or 100, walking the
 * grid. */
static void test_fwd_plain_res(void)
{
    static const struct {
        fusednorm_norm norm; int64_t cols; fusednorm_dtype dt; const char *plan, *deep, *lag;
    } cases[] = {
        {FUSEDNORM_RMSNORM, 16384, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_RMSNORM, 40000, FUSEDNORM_F16, NULL, "1", "1"},
        {FUSEDNORM_RMSNORM, 65536, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_RMSNORM, 131072, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_RMSNORM, 131072, FUSEDNORM_F16, NULL, "2", "1"},
        {FUSEDNORM_RMSNORM, 262144, FUSEDNORM_BF16, NULL, "1", "1"},
        {FUSEDNORM_RMSNORM, 262144, FUSEDNORM_F16, NULL, "1", "0"},
        {FUSEDNORM_LAYERNORM, 65536, FUSEDNORM_BF16, "32,256,8", "1", "1"},
        {FUSEDNORM_LAYERNORM, 262144, FUSEDNORM_BF16, "32,512,16", "1", "1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].plan) setenv("FUSEDNORM_PLAN_FWD", cases[i].plan, 1);
        else unsetenv("FUSEDNORM_PLAN_FWD");
        setenv("FUSEDNORM_FWD_DEEP", cases[i].deep, 1);
        setenv("FUSEDNORM_FWD_LAG", cases[i].lag, 1);
        const int ln = cases[i].norm == FUSEDNORM_LAYERNORM;
        for (int f = 0; f < 4; f++) {
            th_case c = th_case_default(cases[i].norm, cases[i].cols >= 262144 ? 40 : 100, cases[i].cols, cases[i].dt);
            c.residual_on = 1;
            c.residual_out_on = f != 2;
            c.alias_resout_res = c.alias_y_x = f == 1;
            c.bias_on = f == 3 || (ln && f == 0);
            c.weight_offset = !ln && f == 0 ? 1.0f : 0.0f;
            c.x_offset = ln ? 100.0f : 0.0f;
            c.store_rstd = 1;
            c.store_mean = ln;
            c.skip_bwd = 1;
            th_case_result r[2];
            run_knob_off_on(&c, "FUSEDNORM_FWD_PLAIN_RES", r);
            snprintf(th_context, sizeof th_context,
                     "residual forward, PLAIN_RES against the general kernel, %s %lld %s (deep %s, lag %s, form %d)",
                     ln ? "ln" : "rms", (long long)cases[i].cols, cases[i].dt == FUSEDNORM_BF16 ? "bf16" : "f16",
                     cases[i].deep, cases[i].lag, f);
            const int64_t n = r[0].rows * r[0].cols;
            ASSERT_TRUE(r[0].y && r[1].y && r[0].rstd && r[1].rstd);
            ASSERT_TRUE(!c.residual_out_on || (r[0].residual_out && r[1].residual_out));
            ASSERT_EQ_INT(count_differing(r[0].y, r[1].y, n), 0);
            ASSERT_EQ_INT(count_differing(r[0].residual_out, r[1].residual_out, n), 0);
            ASSERT_EQ_INT(count_differing(r[0].rstd, r[1].rstd, r[0].rows), 0);
            th_context[0] = '\0';
            th_case_result_free(&r[0]);
            th_case_result_free(&r[1]);
        }
    }
    unsetenv("FUSEDNORM_PLAN_FWD");
    unsetenv("FUSEDNORM_FWD_DEEP");
    unsetenv("FUSEDNORM_FWD_LAG");
    unsetenv("FUSEDNORM_FWD_PLAIN_RES");
}
#endif

#if FUSEDNORM_WITH_CUDA
/* LayerNorm's forward of rows in one CTA: the held kernel (rows of
 * 1024..32768, several a CTA: 8 of 32 threads at 1024, 4 of 64 at 2048, 2
 * of 128 fp32 4096; each row's barriers its own), its ODD form (1004, 4100),
 * its fp32-weight form (w32), and the register tile at 256 (32 rows of 8
 * threads a CTA); with and without bias and weight, mean and rstd stored,
 * the outlier rows, and the odd rows about 100 (x_offset) between rows about
 * zero in one CTA: a variance from E[h^2] - mean^2 would lose those rows'
 * digits. Against the CPU backend. */
static void test_fwd_ln_one_cta(void)
{
    static const struct { int64_t cols; fusednorm_dtype dt; } cases[] = {
        {256, FUSEDNORM_BF16},  {1024, FUSEDNORM_BF16}, {1024, FUSEDNORM_F32},  {2048, FUSEDNORM_F16},
        {4096, FUSEDNORM_F32},  {8192, FUSEDNORM_BF16}, {32768, FUSEDNORM_BF16}, {1004, FUSEDNORM_BF16},
        {4100, FUSEDNORM_F16},  {256, FUSEDNORM_F32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int f = 0; f < 5; f++) {
            th_case c = th_case_default(FUSEDNORM_LAYERNORM, f == 4 ? 301 : 37, cases[i].cols, cases[i].dt);
            c.bias_on = f != 1;
            c.weight_on = f != 2;
            if (f == 3 && cases[i].dt != FUSEDNORM_F32) c.weight = c.bias = FUSEDNORM_F32; /* w32 */
            c.outliers = f == 0 && cases[i].dt != FUSEDNORM_F16;
            c.x_offset = f == 0 ? 0.0f : 100.0f;
            c.store_rstd = c.store_mean = 1;
            c.skip_bwd = 1;
            gpu_vs_cpu(&c, "layernorm forward in one CTA: gpu vs cpu");
        }
}
#endif

#if FUSEDNORM_WITH_CUDA
/* The held forward's LEAN form (norm_fwd.cu FN_FWD_HELD_LEAN): 16-bit rows
 * that fill a CTA's slots exactly (1024: a warp a row, 16 rows a CTA; 2048:
 * two warps a row), no bounds check per vector, the weight always in shared
 * memory (1.0f without one), y = fmaf(t, w, b) with a bias. RMSNorm and
 * LayerNorm, bf16 and fp16, on 37 rows (the last CTA's rows partly past the
 * end): weight and bias, weight alone, bias alone, neither, weight_offset,
 * fp32 weights, and the residual call (residual_out kept, never LEAN); 1536
 * (not exact: the checked SMW form) beside them; with the lab knob
 * FUSEDNORM_FWD_LEAN at 1, then at 0 (the SMW form). Against the CPU backend. */
static void fwd_held_lean_cases(const char *what)
{
    static const int64_t cols[] = {1024, 2048, 1536};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        for (int n = 0; n < 2; n++)
            for (int d = 0; d < 2; d++)
                for (int f = 0; f < 7; f++) {
                    th_case c = th_case_default((fusednorm_norm)n, 37, cols[i], d ? FUSEDNORM_F16 : FUSEDNORM_BF16);
                    c.bias_on = f == 0 || f == 2 || f == 6;
                    c.weight_on = f != 2 && f != 3;
                    if (f == 4) c.weight_offset = 1.0f;
                    if (f == 5) c.weight = c.bias = FUSEDNORM_F32;
                    if (f == 6) c.residual_on = c.residual_out_on = 1;
                    c.x_offset = n ? 4.0f : 0.0f;
                    c.store_rstd = 1;
                    c.store_mean = n;
                    c.skip_bwd = 1;
                    gpu_vs_cpu(&c, what);
                }
}

/* The forward's ODD register tile (norm_fwd.cu ODD, fn_plan_fwd_odd): rows
 * off a 16-byte boundary past 64 KiB on the tile of their aligned body, its
 * edge elements on the cluster's first CTA, each cluster's rows at one
 * offset (the grid a multiple of the period). 16-bit 65537 and 65543 in 8 x
 * 256 (tpr compiled), 40001 in 5 x 256 (idle columns), 131073 in 16 x 256,
 * 262145 in 16 x 512 (run-time tpr, two stages); fp32 65537 in 8 x 256 x 32,
 * 32769 in 4 x 256 x 32, 20001 in 5 x 256 x 16, 49153 in 8 x 384 (run-time
 * tpr). RMSNorm and LayerNorm, on 9 rows: weight alone (outliers), weight
 * and bias, weight_offset with every activation one element off its
 * pointer (misalign 2: the odd rows' offsets shift), bias without a weight
 * (a weight of ones); on 200 rows (40 at 262145) that walk the grid (each
 * cluster several rows of one offset; two waves of the resident clusters
 * at 131073), LayerNorm's odd rows far from zero (x_offset: the centred
 * second exchange); on 100 rows with padded pitches (the same offset in
 * every tensor). Against the CPU backend. lag_tiles: only the 16-bit
 * 256-thread tiles (65537, 65543, 131073), where FUSEDNORM_FWD_ODD=2 runs
 * LAG. */
static void fwd_odd_tile_cases(const char *what, int only_walk, int lag_tiles)
{
    static const struct { int64_t cols; fusednorm_dtype dt; } shapes[] = {
        {65537, FUSEDNORM_BF16}, {65543, FUSEDNORM_F16},  {40001, FUSEDNORM_BF16}, {131073, FUSEDNORM_BF16},
        {262145, FUSEDNORM_F16}, {65537, FUSEDNORM_F32},  {32769, FUSEDNORM_F32},  {20001, FUSEDNORM_F32},
        {49153, FUSEDNORM_F32},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int n = 0; n < 2; n++)
            for (int f = only_walk ? 4 : 0; f < (only_walk ? 5 : 6); f++) {
                if (lag_tiles && (shapes[i].dt == FUSEDNORM_F32 || (shapes[i].cols > 65543 && shapes[i].cols != 131073)))
                    continue;
                const int64_t rows = f == 4 ? shapes[i].cols > 200000 ? 40 : 200 : f == 5 ? 100 : 9;
                th_case c = th_case_default((fusednorm_norm)n, rows, shapes[i].cols, shapes[i].dt);
                c.bias_on = f == 1 || f == 3 || f == 4;
                c.weight_on = f != 3;
                c.weight_offset = f == 2 ? 1.0f : 0.0f;
                c.misalign = f == 2 ? 2 : 0;
                c.outliers = f == 0 && shapes[i].dt != FUSEDNORM_F16;
                c.x_offset = n && f == 4 ? 4.0f : 0.0f;
                c.pad = f == 5 ? 16 / (int64_t)fn_dtype_size(shapes[i].dt) : 0;
                c.store_rstd = 1;
                c.store_mean = n;
                c.skip_bwd = 1;
                gpu_vs_cpu(&c, what);
            }
}

/* The ODD tile's cases (above); its walks again with two stages and with
 * three on every cluster (FUSEDNORM_FWD_DEEP 0 and 2: the tile's other
 * instance at each shape); with FUSEDNORM_FWD_ODD=0, the held kernel's ODD
 * form the planner gave these rows before; and the 16-bit 256-thread tiles'
 * cases with FUSEDNORM_FWD_ODD=2 (LAG in the ODD tile, a lab form). */
static void test_fwd_odd_tile(void)
{
    fwd_odd_tile_cases("forward ODD tile: gpu vs cpu", 0, 0);
    setenv("FUSEDNORM_FWD_DEEP", "0", 1);
    fwd_odd_tile_cases("forward ODD tile, two stages: gpu vs cpu", 1, 0);
    setenv("FUSEDNORM_FWD_DEEP", "2", 1);
    fwd_odd_tile_cases("forward ODD tile, three stages: gpu vs cpu", 1, 0);
    unsetenv("FUSEDNORM_FWD_DEEP");
    setenv("FUSEDNORM_FWD_ODD", "0", 1);
    fwd_odd_tile_cases("forward odd rows held (FUSEDNORM_FWD_ODD=0): gpu vs cpu", 1, 0);
    /* LAG in the ODD tile on every 16-bit 256-thread tile (FUSEDNORM_FWD_LAG=2:
     * the calls without a bias too, which the default rule leaves out) */
    setenv("FUSEDNORM_FWD_ODD", "2", 1);
    setenv("FUSEDNORM_FWD_LAG", "2", 1);
    fwd_odd_tile_cases("forward ODD tile with LAG (FUSEDNORM_FWD_ODD=2, FUSEDNORM_FWD_LAG=2): gpu vs cpu", 0, 1);
    unsetenv("FUSEDNORM_FWD_LAG");
    unsetenv("FUSEDNORM_FWD_ODD");
}

static void test_fwd_held_lean(void)
{
    setenv("FUSEDNORM_FWD_LEAN", "1", 1);
    fwd_held_lean_cases("held forward, LEAN on: gpu vs cpu");
    setenv("FUSEDNORM_FWD_LEAN", "0", 1);
    fwd_held_lean_cases("held forward, LEAN off: gpu vs cpu");
    unsetenv("FUSEDNORM_FWD_LEAN");
}
#endif

/* The fp32 backward's 32-element tile (step 102): one stage of x and dy,
 * refilled vector by vector as the dx pass drains it (norm_bwd.cu, ROLL),
 * on the rows it fills exactly at 512 threads. Against the CPU backend:
 * the planner's 16 x 512 x 32 at 262144, the knob's 8 x 512 x 32 at 131072,
 * and 200000 and the knob's 16 x 256 x 32 (131072), which take the column
 * split and the 16-element tile (the tile's idle-column form is not run); RMSNorm and LayerNorm, dweight and dbias, statistics given and
 * recomputed, weight_offset, atomic dweight, on 20 rows (the grid's at most
 * 8 clusters of 16 walk two or three rows each, so that each refill lands
 * in a row that follows), and without a weight (not the common call: the
 * column split). Deterministic: dweight and dbias bitwise equal run to run. */
static void test_bwd_f32_wide(void)
{
    static const struct { int64_t cols; const char *plan; } cases[] = {
        {262144, NULL}, {200000, NULL}, {131072, "32,512,8"}, {131072, "32,256,16"}};
    /* 200000 and 16 x 256 x 32: not launched on the tile (the planner's column
     * split, the knob refused): the results must not change */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].plan) setenv("FUSEDNORM_PLAN_BWD", cases[i].plan, 1);
        else unsetenv("FUSEDNORM_PLAN_BWD");
        for (int n = 0; n < 2; n++)
            for (int f = 0; f < 4; f++) {
                if (i >= 2 && f >= 2) continue; /* the knob's tiles: the plain call only */
                th_case c = th_case_default((fusednorm_norm)n, 20, cases[i].cols, FUSEDNORM_F32);
                c.bias_on = c.dbias_on = n == 1;
                c.dweight_on = 1;
                c.store_rstd = c.bwd_stats_given = f != 1;
                c.store_mean = n && f != 1;
                if (f == 1) c.weight_offset = 1.0f;
                if (f == 2) c.flags = FUSEDNORM_ATOMIC_DWEIGHT;
                if (f == 3) c.weight_on = c.dweight_on = 0;
                c.x_offset = n ? 3.0f : 0.0f;
                gpu_vs_cpu(&c, "fp32 backward, 32-element tile: gpu vs cpu");
            }
    }
    unsetenv("FUSEDNORM_PLAN_BWD");
    for (int n = 0; n < 2; n++) {
        th_case c = th_case_default((fusednorm_norm)n, 20, 262144, FUSEDNORM_F32);
        c.skip_fwd = 1;
        c.dweight_on = 1;
        c.bias_on = c.dbias_on = n == 1;
        gpu_repeatable(&c, n ? "fp32 262144 backward determinism, layernorm" : "fp32 262144 backward determinism, rmsnorm");
    }
}

/* The fp32 residual backward where two stages of x, dy and dresidual_out do
 * not fit beside the weight cache (step 104, norm_bwd.cu DROLL: one stage,
 * x and dy refilled at each row's start, dresidual_out in the dx pass):
 * 131072 in 16 x 512 x 16, 98304 in 16 x 384 and 81920 in 16 x 320 (their
 * 96 KiB stage cap), and 126000 (idle columns: the form that hit the ptxas
 * miscompile's illegal instruction until the shuffled slot), on 24 rows
 * (three turns of the 8 resident clusters of 16). Statistics given with
 * dresidual; recomputed, without dresidual, weight_offset; atomic dweight;
 * in place (dx == dy, dresidual == dresidual_out); LayerNorm without a
 * bias (the same call). Against the CPU backend; dweight bitwise equal run
 * to run. */
static void test_bwd_res_droll(void)
{
    static const int64_t cols[] = {131072, 98304, 81920, 126000};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        for (int f = 0; f < 5; f++) {
            if (i && i < 3 && f && f < 4) continue; /* 16 x 384 and 16 x 320: two cases each */
            th_case c = th_case_default(f == 4 ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM, 24, cols[i], FUSEDNORM_F32);
            c.residual_on = c.residual_out_on = 1;
            c.dresidual_out_on = 1;
            c.dresidual_on = f != 1;
            c.dweight_on = 1;
            c.store_rstd = c.bwd_stats_given = f != 1;
            c.store_mean = f == 4;
            if (f == 1) c.weight_offset = 1.0f;
            if (f == 2) c.flags = FUSEDNORM_ATOMIC_DWEIGHT;
            if (f == 3) c.alias_dx_dy = c.alias_dres_dresout = 1;
            if (f == 4) c.x_offset = 3.0f;
            gpu_vs_cpu(&c, "fp32 residual backward, one stage (DROLL): gpu vs cpu");
        }
    th_case c = th_case_default(FUSEDNORM_RMSNORM, 24, 131072, FUSEDNORM_F32);
    c.residual_on = c.residual_out_on = c.dresidual_out_on = c.dresidual_on = 1;
    c.dweight_on = 1;
    gpu_repeatable(&c, "fp32 residual 131072 backward determinism");
#if FUSEDNORM_WITH_CUDA
    /* Against the general kernel (FUSEDNORM_BWD_DROLL=0): dx and dweight
     * equal element for element, the exact tile and the one with idle
     * columns (126000: the form that met the ptxas miscompile). */
    static const int64_t ab_cols[] = {131072, 126000};
    for (size_t i = 0; i < 2; i++) {
        th_case a = th_case_default(FUSEDNORM_RMSNORM, 24, ab_cols[i], FUSEDNORM_F32);
        a.residual_on = a.residual_out_on = a.dresidual_out_on = a.dresidual_on = 1;
        a.dweight_on = 1;
        a.store_rstd = a.bwd_stats_given = 1;
        char what[96];
        snprintf(what, sizeof what, "fp32 residual backward %lld, DROLL against the general kernel",
                 (long long)ab_cols[i]);
        assert_bwd_knob_equal(&a, "FUSEDNORM_BWD_DROLL", 1, what);
    }
#endif
}

/* The fp32 residual backward at 262144 in 16 x 512 x 32 (ROLL with RES,
 * norm_bwd.cu: one stage of x, dy and dresidual_out, the weight read from
 * global memory), on 24 rows (three turns of the 8 resident clusters):
 * statistics given with dresidual; recomputed, without dresidual,
 * weight_offset; atomic dweight; in place (dx == dy, dresidual ==
 * dresidual_out); LayerNorm without a bias (the same call); and with a bias
 * (not this tile: two-pass). Against the CPU backend; dweight bitwise equal
 * run to run. */
static void test_bwd_f32_res_wide(void)
{
    for (int f = 0; f < 6; f++) {
        const int ln = f >= 4;
        th_case c = th_case_default(ln ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM, 24, 262144, FUSEDNORM_F32);
        c.residual_on = c.residual_out_on = 1;
        c.dresidual_out_on = 1;
        c.dresidual_on = f != 1;
        c.dweight_on = 1;
        c.bias_on = c.dbias_on = f == 5;
        c.store_rstd = c.bwd_stats_given = f != 1;
        c.store_mean = ln;
        if (f == 1) c.weight_offset = 1.0f;
        if (f == 2) c.flags = FUSEDNORM_ATOMIC_DWEIGHT;
        if (f == 3) c.alias_dx_dy = c.alias_dres_dresout = 1;
        if (ln) c.x_offset = 3.0f;
        gpu_vs_cpu(&c, "fp32 residual backward 262144, one stage: gpu vs cpu");
    }
    th_case c = th_case_default(FUSEDNORM_RMSNORM, 24, 262144, FUSEDNORM_F32);
    c.residual_on = c.residual_out_on = c.dresidual_out_on = c.dresidual_on = 1;
    c.dweight_on = 1;
    gpu_repeatable(&c, "fp32 residual 262144 backward determinism");
}

#if FUSEDNORM_WITH_CUDA
/* The 16-bit residual backward's one-stage 32-element tile (DROLL at EPT 32,
 * norm_bwd.cu: 262144 in 16 x 512 x 32, x and dy held packed) against the
 * general kernel (FUSEDNORM_BWD_DROLL=0, dresidual_out read unstaged) on the
 * same inputs: dx and dweight equal element for element (the same sums in
 * the same order), each against the fp64 reference too (th_run_case). 40
 * rows: five turns of the 8 resident clusters, so the stage is refilled
 * across rows. dresidual asked for and not, weight_offset, statistics
 * recomputed, in place (dx == dy, dresidual == dresidual_out), atomic
 * dweight, LayerNorm (no bias), fp16. */
static void test_bwd_res_droll_wide(void)
{
    for (int f = 0; f < 7; f++) {
        th_case c = th_case_default(f == 5 ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM, 40, 262144,
                                    f == 6 ? FUSEDNORM_F16 : FUSEDNORM_BF16);
        c.residual_on = c.residual_out_on = 1;
        c.dresidual_out_on = 1;
        c.dresidual_on = f != 1;
        c.dweight_on = 1;
        c.store_rstd = c.bwd_stats_given = f != 2;
        c.store_mean = f == 5;
        if (f == 1) c.weight_offset = 1.0f;
        if (f == 3) c.alias_dx_dy = c.alias_dres_dresout = 1;
        if (f == 4) c.flags = FUSEDNORM_ATOMIC_DWEIGHT;
        if (f == 5) c.x_offset = 3.0f;
        char what[96];
        snprintf(what, sizeof what, "residual backward 262144, DROLL wide tile against the general kernel (form %d)", f);
        /* atomic dweight (form 4): the order of the adds is the hardware's */
        assert_bwd_knob_equal(&c, "FUSEDNORM_BWD_DROLL", f != 4, what);
    }
    th_case c = th_case_default(FUSEDNORM_RMSNORM, 40, 262144, FUSEDNORM_BF16);
    c.residual_on = c.residual_out_on = c.dresidual_out_on = c.dresidual_on = 1;
    c.dweight_on = 1;
    gpu_repeatable(&c, "bf16 residual 262144 backward determinism (DROLL wide)");
}
#endif

/* dweight/dbias bitwise equal across runs without ATOMIC_DWEIGHT. */
static void test_determinism(void)
{
    /* {1000, 65537}: the ODD tile's grid over four waves of the resident clusters. */
    static const int64_t shapes[][2] = {{4096, 1024}, {8192, 256}, {300, 8192}, {37, 65537}, {23, 40001}, {1000, 65537}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        th_case c = th_case_default((fusednorm_norm)(i & 1), shapes[i][0], shapes[i][1], FUSEDNORM_BF16);
        c.skip_fwd = 1;
        c.dweight_on = c.dbias_on = 1;
        gpu_repeatable(&c, "backward determinism");
    }
}

/* x f16 with weight bf16 is not in the required list: UNSUPPORTED, nothing written. */
static void test_unsupported_mix(void)
{
    const int64_t R = 8, N = 256;
    snprintf(th_context, sizeof th_context, "cuda unsupported mix x f16 weight bf16");
    th_tensor x, w, y, rstd, dy, dx, dw;
    th_alloc(&x, FUSEDNORM_CUDA, FUSEDNORM_F16, R, N, 0, 0);
    th_alloc(&w, FUSEDNORM_CUDA, FUSEDNORM_BF16, 1, N, 0, 0);
    th_alloc(&y, FUSEDNORM_CUDA, FUSEDNORM_F16, R, N, 0, 0);
    th_alloc(&rstd, FUSEDNORM_CUDA, FUSEDNORM_F32, R, 1, 0, 0);
    th_alloc(&dy, FUSEDNORM_CUDA, FUSEDNORM_F16, R, N, 0, 0);
    th_alloc(&dx, FUSEDNORM_CUDA, FUSEDNORM_F16, R, N, 0, 0);
    th_alloc(&dw, FUSEDNORM_CUDA, FUSEDNORM_BF16, 1, N, 0, 0);
    th_fill(&x, -1, 1);
    th_fill(&w, 0.5, 1.5);
    th_fill(&dy, -1, 1);
    th_poison(&y);
    th_poison(&rstd);
    th_poison(&dx);
    th_poison(&dw);
    fusednorm_fwd_args f;
    memset(&f, 0, sizeof f);
    f.norm = FUSEDNORM_RMSNORM;
    f.rows = R;
    f.cols = N;
    f.eps = 1e-6f;
    f.x = th_arg(&x);
    f.weight = th_arg(&w);
    f.y = th_arg(&y);
    f.rstd = th_data(&rstd);
    f.backend = FUSEDNORM_CUDA;
    ASSERT_STATUS(fusednorm_fwd(&f), FUSEDNORM_ERROR_UNSUPPORTED);
    ASSERT_TRUE(strlen(fusednorm_last_error()) > 0);
    fusednorm_bwd_args b;
    memset(&b, 0, sizeof b);
    b.norm = FUSEDNORM_RMSNORM;
    b.rows = R;
    b.cols = N;
    b.eps = 1e-6f;
    b.dy = th_arg(&dy);
    b.x = th_arg(&x);
    b.weight = th_arg(&w);
    b.dx = th_arg(&dx);
    b.dweight = th_arg(&dw);
    b.backend = FUSEDNORM_CUDA;
    size_t need = 0;
    fusednorm_status s = fusednorm_bwd_workspace_size(&b, &need);
    ASSERT_TRUE(s == FUSEDNORM_OK || s == FUSEDNORM_ERROR_UNSUPPORTED);
    void *ws = th_backend_malloc(FUSEDNORM_CUDA, need + (1 << 20));
    b.workspace = ws;
    b.workspace_bytes = need + (1 << 20);
    ASSERT_STATUS(fusednorm_bwd(&b), FUSEDNORM_ERROR_UNSUPPORTED);
    th_backend_sync(FUSEDNORM_CUDA);
    th_check_poisoned(&y, "y");
    th_check_poisoned(&rstd, "rstd");
    th_check_poisoned(&dx, "dx");
    th_check_poisoned(&dw, "dweight");
    th_backend_free(FUSEDNORM_CUDA, ws);
    th_tensor *all[] = {&x, &w, &y, &rstd, &dy, &dx, &dw};
    for (size_t i = 0; i < 7; i++) th_free(all[i]);
}

/* fwd + bwd captured on a non-default stream, replayed twice; the outputs
 * equal bitwise those of a direct (uncaptured) run on the same inputs. */
static void test_graph_capture(void)
{
    const int64_t R = 512, N = 2048;
    snprintf(th_context, sizeof th_context, "cuda graph capture layernorm bf16 rows %lld cols %lld", (long long)R,
             (long long)N);
    const fusednorm_dtype dt = FUSEDNORM_BF16;
    th_tensor x, res, w, b, y, ro, rstd, mean, dy, dx, dw, db;
    th_alloc(&x, FUSEDNORM_CUDA, dt, R, N, 0, 0);
    th_alloc(&res, FUSEDNORM_CUDA, FUSEDNORM_F32, R, N, 0, 0);
    th_alloc(&w, FUSEDNORM_CUDA, dt, 1, N, 0, 0);
    th_alloc(&b, FUSEDNORM_CUDA, dt, 1, N, 0, 0);
    th_alloc(&y, FUSEDNORM_CUDA, dt, R, N, 0, 0);
    th_alloc(&ro, FUSEDNORM_CUDA, FUSEDNORM_F32, R, N, 0, 0);
    th_alloc(&rstd, FUSEDNORM_CUDA, FUSEDNORM_F32, R, 1, 0, 0);
    th_alloc(&mean, FUSEDNORM_CUDA, FUSEDNORM_F32, R, 1, 0, 0);
    th_alloc(&dy, FUSEDNORM_CUDA, dt, R, N, 0, 0);
    th_alloc(&dx, FUSEDNORM_CUDA, dt, R, N, 0, 0);
    th_alloc(&dw, FUSEDNORM_CUDA, dt, 1, N, 0, 0);
    th_alloc(&db, FUSEDNORM_CUDA, dt, 1, N, 0, 0);
    th_fill(&x, -2, 2);
    th_fill(&res, -1, 1);
    th_fill(&w, 0.5, 1.5);
    th_fill(&b, -0.5, 0.5);
    th_fill(&dy, -1, 1);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    fusednorm_fwd_args f;
    memset(&f, 0, sizeof f);
    f.norm = FUSEDNORM_LAYERNORM;
    f.rows = R;
    f.cols = N;
    f.eps = 1e-5f;
    f.x = th_arg(&x);
    f.residual = th_arg(&res);
    f.weight = th_arg(&w);
    f.bias = th_arg(&b);
    f.y = th_arg(&y);
    f.residual_out = th_arg(&ro);
    f.rstd = th_data(&rstd);
    f.mean = th_data(&mean);
    f.backend = FUSEDNORM_CUDA;
    f.stream = stream;
    fusednorm_bwd_args g;
    memset(&g, 0, sizeof g);
    g.norm = FUSEDNORM_LAYERNORM;
    g.rows = R;
    g.cols = N;
    g.eps = 1e-5f;
    g.dy = th_arg(&dy);
    g.x = th_arg(&ro);
    g.weight = th_arg(&w);
    g.rstd = th_data(&rstd);
    g.mean = th_data(&mean);
    g.dx = th_arg(&dx);
    g.dweight = th_arg(&dw);
    g.dbias = th_arg(&db);
    g.backend = FUSEDNORM_CUDA;
    g.stream = stream;
    size_t need = 0;
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&g, &need), FUSEDNORM_OK);
    void *ws = th_backend_malloc(FUSEDNORM_CUDA, need);
    g.workspace = ws;
    g.workspace_bytes = need;

    /* Direct run: the expected bits. */
    th_tensor *outs[] = {&y, &ro, &rstd, &mean, &dx, &dw, &db};
    const size_t n_outs = sizeof outs / sizeof outs[0];
    for (size_t i = 0; i < n_outs; i++) th_poison(outs[i]);
    ASSERT_STATUS(fusednorm_fwd(&f), FUSEDNORM_OK);
    ASSERT_STATUS(fusednorm_bwd(&g), FUSEDNORM_OK);
    CUDA_OK(cudaStreamSynchronize(stream));
    unsigned char *expect[7];
    for (size_t i = 0; i < n_outs; i++) {
        th_download(outs[i]);
        expect[i] = malloc(outs[i]->bytes);
        memcpy(expect[i], outs[i]->shadow, outs[i]->bytes);
    }

    for (size_t i = 0; i < n_outs; i++) th_poison(outs[i]);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    fusednorm_status s1 = fusednorm_fwd(&f);
    fusednorm_status s2 = fusednorm_bwd(&g);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_STATUS(s1, FUSEDNORM_OK);
    ASSERT_STATUS(s2, FUSEDNORM_OK);
    /* Capture records, it does not run: the outputs are still poisoned. */
    CUDA_OK(cudaDeviceSynchronize());
    th_check_poisoned(&y, "y after capture, before replay");
    if (graph && CUDA_OK(cudaGraphInstantiate(&exec, graph, 0))) {
        for (int rep = 0; rep < 2; rep++) {
            for (size_t i = 0; i < n_outs; i++) th_poison(outs[i]);
            CUDA_OK(cudaGraphLaunch(exec, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            for (size_t i = 0; i < n_outs; i++) {
                th_download(outs[i]);
                th_record(memcmp(expect[i], outs[i]->shadow, outs[i]->bytes) == 0, __FILE__, __LINE__,
                          "graph replay %d: output %zu differs from the direct run", rep, i);
            }
        }
        cudaGraphExecDestroy(exec);
    }
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    for (size_t i = 0; i < n_outs; i++) free(expect[i]);
    th_backend_free(FUSEDNORM_CUDA, ws);
    th_tensor *all[] = {&x, &res, &w, &b, &y, &ro, &rstd, &mean, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) th_free(all[i]);
}

/* ---- over 2^31 elements ----------------------------------------------------------- */

static uint16_t hashed_bf16(uint64_t i, uint64_t salt)
{
    uint64_t z = i * 0x9e3779b97f4a7c15ull + salt;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    /* sign, exponent 126 or 127 (|v| in [0.5, 2)), 7 mantissa bits: distinct rows */
    return (uint16_t)(((z & 1u) << 15) | ((126u + ((z >> 1) & 1u)) << 7) | ((z >> 2) & 0x7fu));
}

static void test_over_2g_elements(void)
{
    const int64_t R = (1 << 21) + 3, N = 1024, E = R * N;
    const size_t bytes = (size_t)E * 2;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    if (free_b < 4 * bytes + (1ull << 30)) {
        printf("note: %zu MiB free on the device; the >2^31-element case needs %zu MiB and was not run\n",
               free_b >> 20, (size_t)((4 * bytes + (1ull << 30)) >> 20));
        return;
    }
    snprintf(th_context, sizeof th_context, "cuda rmsnorm bf16 rows %lld cols %lld (> 2^31 elements)", (long long)R,
             (long long)N);
    uint16_t *hx = malloc(bytes), *hdy = malloc(bytes), *hw = malloc(N * 2), *row = malloc(N * 2);
    float *hrstd = malloc(sizeof(float) * (size_t)R);
    void *dxp = NULL, *dyp = NULL, *dwp = NULL, *ddx = NULL, *dy_ = NULL, *drstd = NULL, *ddw = NULL;
    if (!hx || !hdy || !hw || !row || !hrstd) {
        th_record(0, __FILE__, __LINE__, "host allocation failed");
        goto out;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < E; i++) {
        hx[i] = hashed_bf16((uint64_t)i, 1);
        hdy[i] = hashed_bf16((uint64_t)i, 2);
    }
    for (int64_t j = 0; j < N; j++) hw[j] = fn_f32_to_bf16((float)th_uniform(0.5, 1.5));
    CUDA_OK(cudaMalloc(&dxp, bytes));
    CUDA_OK(cudaMalloc(&dyp, bytes));
    CUDA_OK(cudaMalloc(&ddx, bytes));
    CUDA_OK(cudaMalloc(&dy_, bytes));
    CUDA_OK(cudaMalloc(&drstd, sizeof(float) * (size_t)R));
    CUDA_OK(cudaMalloc(&dwp, N * 2));
    CUDA_OK(cudaMalloc(&ddw, N * 2));
    if (!dxp || !dyp || !ddx || !dy_ || !drstd || !dwp || !ddw) goto out;
    CUDA_OK(cudaMemcpy(dxp, hx, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dy_, hdy, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dwp, hw, N * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dyp, 0xFF, bytes));
    CUDA_OK(cudaMemset(ddx, 0xFF, bytes));
    CUDA_OK(cudaMemset(ddw, 0xFF, N * 2));

    fusednorm_fwd_args f;
    memset(&f, 0, sizeof f);
    f.norm = FUSEDNORM_RMSNORM;
    f.rows = R;
    f.cols = N;
    f.eps = 1e-6f;
    f.x = (fusednorm_tensor){dxp, FUSEDNORM_BF16, 0};
    f.weight = (fusednorm_tensor){dwp, FUSEDNORM_BF16, 0};
    f.y = (fusednorm_tensor){dyp, FUSEDNORM_BF16, 0};
    f.rstd = drstd;
    f.backend = FUSEDNORM_CUDA;
    ASSERT_STATUS(fusednorm_fwd(&f), FUSEDNORM_OK);
    fusednorm_bwd_args g;
    memset(&g, 0, sizeof g);
    g.norm = FUSEDNORM_RMSNORM;
    g.rows = R;
    g.cols = N;
    g.eps = 1e-6f;
    g.dy = (fusednorm_tensor){dy_, FUSEDNORM_BF16, 0};
    g.x = (fusednorm_tensor){dxp, FUSEDNORM_BF16, 0};
    g.weight = (fusednorm_tensor){dwp, FUSEDNORM_BF16, 0};
    g.rstd = drstd;
    g.dx = (fusednorm_tensor){ddx, FUSEDNORM_BF16, 0};
    g.dweight = (fusednorm_tensor){ddw, FUSEDNORM_BF16, 0};
    g.backend = FUSEDNORM_CUDA;
    size_t need = 0;
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&g, &need), FUSEDNORM_OK);
    void *ws = th_backend_malloc(FUSEDNORM_CUDA, need);
    g.workspace = ws;
    g.workspace_bytes = need;
    ASSERT_STATUS(fusednorm_bwd(&g), FUSEDNORM_OK);
    CUDA_OK(cudaDeviceSynchronize());
    th_backend_free(FUSEDNORM_CUDA, ws);
    CUDA_OK(cudaMemcpy(hrstd, drstd, sizeof(float) * (size_t)R, cudaMemcpyDeviceToHost));

    /* Sampled rows: both ends, around element 2^31 (row 2^21) and random ones. */
    int64_t samples[24] = {0, 1, (1 << 20), (1 << 21) - 2, (1 << 21) - 1, 1 << 21, (1 << 21) + 1, (1 << 21) + 2};
    for (int k = 8; k < 24; k++) samples[k] = (int64_t)(th_rand_u64() % (uint64_t)R);
    const double u32 = 0x1p-24, ubf = 0x1p-8, red = u32 * (4.0 + 4.0 * sqrt((double)N));
    int64_t bad = 0;
    for (int k = 0; k < 24; k++) {
        const int64_t r = samples[k];
        fusednorm_fwd_args hf = f;
        hf.rows = 1;
        hf.x.data = hx + r * N;
        hf.weight.data = hw;
        hf.rstd = NULL;
        double yref[1024], rs;
        fn_ref_fwd(&hf, yref, NULL, &rs, NULL);
        bad += !(fabs(hrstd[r] - rs) <= red * rs);
        CUDA_OK(cudaMemcpy(row, (uint16_t *)dyp + r * N, N * 2, cudaMemcpyDeviceToHost));
        double maxw = 0.0, maxxhat = 0.0;
        for (int64_t j = 0; j < N; j++) {
            maxw = fmax(maxw, fn_bf16_to_f32(hw[j]));
            maxxhat = fmax(maxxhat, fabs(fn_bf16_to_f32(hx[r * N + j]) * rs));
        }
        for (int64_t j = 0; j < N; j++) {
            double got = fn_bf16_to_f32(row[j]);
            double tol = 2 * ubf * fabs(yref[j]) + red * 2 * maxxhat * maxw;
            if (!(fabs(got - yref[j]) <= tol)) {
                if (bad < 5) fprintf(stderr, "  y row %lld col %lld: got %g want %g\n", (long long)r, (long long)j, got, yref[j]);
                bad++;
            }
        }
        fusednorm_bwd_args hb = g;
        hb.rows = 1;
        hb.dy.data = hdy + r * N;
        hb.x.data = hx + r * N;
        hb.weight.data = hw;
        float rsf = hrstd[r];
        hb.rstd = &rsf;
        hb.dweight.data = NULL;
        double dxref[1024];
        fn_ref_bwd(&hb, dxref, NULL, NULL);
        CUDA_OK(cudaMemcpy(row, (uint16_t *)ddx + r * N, N * 2, cudaMemcpyDeviceToHost));
        double maxg = 0.0, ssg = 0.0;
        for (int64_t j = 0; j < N; j++) {
            double gj = fn_bf16_to_f32(hdy[r * N + j]) * fn_bf16_to_f32(hw[j]);
            maxg = fmax(maxg, fabs(gj));
            ssg += gj * gj;
        }
        const double dx_abs = u32 * rsf * (1.0 + maxxhat) * (8.0 * maxg + 4.0 * sqrt((double)N) * sqrt(ssg / N));
        for (int64_t j = 0; j < N; j++) {
            double got = fn_bf16_to_f32(row[j]);
            if (!(fabs(got - dxref[j]) <= 2 * ubf * fabs(dxref[j]) + dx_abs)) {
                if (bad < 5) fprintf(stderr, "  dx row %lld col %lld: got %g want %g\n", (long long)r, (long long)j, got, dxref[j]);
                bad++;
            }
        }
    }
    th_record(bad == 0, __FILE__, __LINE__, "%lld sampled values out of tolerance", (long long)bad);

    /* dweight over all rows, in double on the host (threads over row blocks,
     * fixed-order sum of their partials). */
    {
        const int nt = omp_get_max_threads();
        double *part = calloc((size_t)nt * 2 * N, sizeof(double));
#pragma omp parallel num_threads(nt)
        {
            double *p = part + (size_t)omp_get_thread_num() * 2 * N; /* [sum dy*xhat | sum (dy*xhat)^2] */
#pragma omp for schedule(static)
            for (int64_t r = 0; r < R; r++) {
                double rs = hrstd[r];
                for (int64_t j = 0; j < N; j++) {
                    double t = fn_bf16_to_f32(hdy[r * N + j]) * fn_bf16_to_f32(hx[r * N + j]) * rs;
                    p[j] += t;
                    p[N + j] += t * t;
                }
            }
        }
        CUDA_OK(cudaMemcpy(row, ddw, N * 2, cudaMemcpyDeviceToHost));
        int64_t dw_bad = 0;
        for (int64_t j = 0; j < N; j++) {
            double want = 0.0, l2 = 0.0;
            for (int t = 0; t < nt; t++) {
                want += part[(size_t)t * 2 * N + j];
                l2 += part[(size_t)t * 2 * N + N + j];
            }
            double tol = 2 * ubf * fabs(want) + 8.0 * u32 * (sqrt((double)R) + sqrt((double)N) + 1.0) * sqrt(l2);
            double got = fn_bf16_to_f32(row[j]);
            if (!(fabs(got - want) <= tol)) {
                if (dw_bad < 5) fprintf(stderr, "  dweight[%lld]: got %g want %g tol %g\n", (long long)j, got, want, tol);
                dw_bad++;
            }
        }
        th_record(dw_bad == 0, __FILE__, __LINE__, "dweight: %lld of %lld out of tolerance", (long long)dw_bad,
                  (long long)N);
        free(part);
    }
out:
    cudaFree(dxp);
    cudaFree(dyp);
    cudaFree(ddx);
    cudaFree(dy_);
    cudaFree(drstd);
    cudaFree(dwp);
    cudaFree(ddw);
    free(hx);
    free(hdy);
    free(hw);
    free(row);
    free(hrstd);
}
#endif

#if FUSEDNORM_WITH_CUDA
/* The lab knob FUSEDNORM_PLAN_FWD / _BWD (read on every call) on rows off a
 * 16-byte boundary. Session 13: the planner's held ODD plan carries 16-byte
 * vectors, and the knob turned it into a register tile of 16-byte loads on
 * those rows (misaligned address); the override now takes the problem's
 * vector width (the scalar tile here). Aligned rows too, so that the knob
 * still reaches the vector tile. */
static void test_plan_knob(void)
{
    static const fusednorm_dtype dts[] = {FUSEDNORM_F32, FUSEDNORM_BF16};
    setenv("FUSEDNORM_PLAN_FWD", "16,16,1", 1);
    setenv("FUSEDNORM_PLAN_BWD", "16,16,1", 1);
    for (int n = 0; n < 2; n++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int misalign = 0; misalign <= 2; misalign++) {
                th_case c = th_case_default(n ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM, 37, 256, dts[d]);
                c.bias_on = c.dbias_on = 1;
                c.misalign = misalign;
                th_run_case(&c, FUSEDNORM_CUDA, NULL);
            }
    unsetenv("FUSEDNORM_PLAN_FWD");
    /* A backward plan of several rows a CTA over a cluster (4 rows of 64
     * threads a CTA, clusters of 2): the cluster exchange takes one row a
     * CTA (step 89), so the backend runs such a plan two-pass; the results
     * must not change. */
    setenv("FUSEDNORM_PLAN_BWD", "16,64,2", 1);
    for (int n = 0; n < 2; n++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            th_case c = th_case_default(n ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM, 37, 2048, dts[d]);
            c.bias_on = c.dbias_on = 1;
            th_run_case(&c, FUSEDNORM_CUDA, NULL);
        }
    unsetenv("FUSEDNORM_PLAN_BWD");
}
#endif

#if FUSEDNORM_WITH_CUDA
static void suite_all(void) { th_suite_all(FUSEDNORM_CUDA); }

/* Whether name is one of the comma-separated names of list. */
static int name_listed(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}
#endif

int main(void)
{
    if (!fusednorm_cuda_available()) {
        printf("SKIP: no CUDA device available (fusednorm_cuda_available() == 0); GPU tests not run\n");
        return 77;
    }
#if FUSEDNORM_WITH_CUDA
    /* TEST_ONLY=name[,name...]: only those groups (the names below), to
     * spend less device time on a change that touches one path. */
    static const struct { const char *name; void (*run)(void); } groups[] = {
        {"suite", suite_all},
        {"gpu_vs_cpu", test_gpu_vs_cpu},
        {"odd_calls", test_odd_calls},
        {"odd_grid", test_odd_grid},
        {"fwd_rows_cluster", test_fwd_rows_cluster},
        {"fwd_ln_cluster", test_fwd_ln_cluster},
        {"fwd_ln_res_cluster", test_fwd_ln_res_cluster},
        {"fwd_lag", test_fwd_lag},
        {"fwd_plain_res", test_fwd_plain_res},
        {"fwd_ln_one_cta", test_fwd_ln_one_cta},
        {"fwd_held_lean", test_fwd_held_lean},
        {"fwd_odd_tile", test_fwd_odd_tile},
        {"bwd_f32_wide", test_bwd_f32_wide},
        {"bwd_res_droll", test_bwd_res_droll},
        {"bwd_res_droll_wide", test_bwd_res_droll_wide},
        {"bwd_f32_res_wide", test_bwd_f32_res_wide},
        {"determinism", test_determinism},
        {"unsupported_mix", test_unsupported_mix},
        {"graph_capture", test_graph_capture},
        {"over_2g_elements", test_over_2g_elements},
        {"plan_knob", test_plan_knob},
    };
    /* TEST_LIST=1: the group names, one a line (bench/device.sh runs each
     * group as its own process: the CPU reference is the slow part). */
    if (getenv("TEST_LIST")) {
        for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) printf("%s\n", groups[i].name);
        return 0;
    }
    th_init("test_cuda_ops");
    const char *only = getenv("TEST_ONLY");
    int ran = 0;
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        if (!only || name_listed(only, groups[i].name)) {
            /* One flushed line per group, so a run cut short by a timeout
             * still says which groups finished, how they did and how long
             * each took. */
            const long p0 = th_passed, f0 = th_failed;
            const double t0 = omp_get_wtime();
            groups[i].run();
            printf("group %s: %ld passed, %ld failed, %.1f s\n", groups[i].name, th_passed - p0, th_failed - f0,
                   omp_get_wtime() - t0);
            fflush(stdout);
            ran++;
        }
    if (only) printf("TEST_ONLY=%s: %d of %zu groups run\n", only, ran, sizeof groups / sizeof groups[0]);
    if (only && ran == 0) {
        printf("FAIL: TEST_ONLY names no group\n");
        return 1;
    }
    return th_finish();
#else
    printf("SKIP: fusednorm_cuda_available() is 1 but the tests were built without CUDA\n");
    return 77;
#endif
}
