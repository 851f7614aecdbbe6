/*
 * `fusednorm check`: forward and backward of every norm (RMSNorm, LayerNorm),
 * feature (plain, residual add with residual_out, bias, weight_offset, no
 * weight) and dtype (f32, f16, bf16, and fp32 weight/bias with 16-bit
 * activations) on one backend, against the fp64 reference (src/ref). Inputs
 * are fresh random values; every output is poisoned with 0xFF bytes (a NaN in
 * every dtype) before the call, so an unwritten element fails; the "bias"
 * feature also uses padded row strides and checks the padding stays poisoned.
 * One line per case (norm, feature, dtype, shape, pass) with the worst
 * error/tolerance ratio; exit code 1 when any case fails.
 *
 * Tolerance of one output element (ref = the exact double result):
 *
 *   tol = 2 u_out |ref|                  rounding the fp32 result to the
 *                                        output dtype (half an ulp), doubled
 *                                        because an fp32 error of a fraction
 *                                        of an ulp can move the rounding to
 *                                        the neighbouring value
 *       + u32 (lambda sqrt(L) + K) S     the fp32 arithmetic before it
 *       + tiny_out                       the spacing of subnormals (f16: 2^-24)
 *
 * u_out is the unit roundoff of the output dtype (2^-24 f32, 2^-11 f16,
 * 2^-8 bf16), u32 = 2^-24. The fp32 term is the probabilistic error bound of
 * a sum of L terms (Higham & Mary 2019: |error| <= lambda sqrt(L) u sum|terms|
 * with probability >= 1 - 2 exp(-lambda^2/2); lambda = 8 makes a false alarm
 * about 1e-14 per sum), plus K = 16 unit roundoffs for the fixed chain of
 * scalar operations around it (subtract, multiply, sqrt, divide, round).
 * S is the magnitude of the terms that produce the output, computed from the
 * inputs (not from the result, which can cancel to ~0):
 *   y:            L = N, S = max_j |x_hat_j (w_j + offset)| + max_j |b_j|
 *   residual_out: L = 0, S = max_j |h_j|
 *   rstd:         L = N, S = rstd;          mean: L = N, S = max_j |h_j|
 *   dx/dresidual: L = N, S = rstd max_j |g_j| (2 + max_j |x_hat_j|)
 *                 + max_j |dresidual_out_j|  (the terms of dh, g = dy w')
 *   dweight_j:    L = sqrt(M) + sqrt(N) in place of sqrt(L) (the sum over
 *                 rows, and the x_hat it multiplies), S = sum_r |dy x_hat|
 *   dbias_j:      L = M, S = sum_r |dy|
 * These follow from the dtype and the shape alone; they are never tuned to
 * make a backend pass.
 */
#include "cli.h"

#include "ref/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1p-24
#define LAMBDA 8.0
#define SCALAR_OPS 16.0

static double unit_roundoff(fusednorm_dtype t) { return t == FUSEDNORM_F32 ? 0x1p-24 : t == FUSEDNORM_F16 ? 0x1p-11 : 0x1p-8; }
static double subnormal_spacing(fusednorm_dtype t) { return t == FUSEDNORM_F32 ? 0x1p-149 : t == FUSEDNORM_F16 ? 0x1p-24 : 0x1p-133; }

/* The fp32 arithmetic error bound of the comment above. */
static double fp32_bound(double sqrt_len, double scale) { return U32 * (LAMBDA * sqrt_len + SCALAR_OPS) * scale; }

typedef struct dtype_config {
    const char *name;
    fusednorm_dtype act;   /* x, residual, y, residual_out, dy, dx, ... */
    fusednorm_dtype param; /* weight, bias, dweight, dbias */
} dtype_config;

static const dtype_config DTYPE_CONFIGS[] = {
    {"f32", FUSEDNORM_F32, FUSEDNORM_F32},     {"f16", FUSEDNORM_F16, FUSEDNORM_F16},
    {"bf16", FUSEDNORM_BF16, FUSEDNORM_BF16},  {"f16/w32", FUSEDNORM_F16, FUSEDNORM_F32},
    {"bf16/w32", FUSEDNORM_BF16, FUSEDNORM_F32},
};
enum { NUM_DTYPE_CONFIGS = sizeof DTYPE_CONFIGS / sizeof DTYPE_CONFIGS[0] };

typedef enum feature { PLAIN, RESIDUAL, BIAS, WEIGHT_OFFSET, NO_WEIGHT, NUM_FEATURES } feature;
static const char *const FEATURE_NAMES[] = {"plain", "residual", "bias", "w_offset", "no_weight"};

/* ---- allocations of one case, freed together ---------------------------- */

typedef struct arena {
    fusednorm_backend backend;
    void *dev[32], *host[48];
    int ndev, nhost, failed;
} arena;

static void *arena_dev(arena *a, size_t bytes)
{
    void *p = NULL;
    if (a->failed || a->ndev == 32 || dev_alloc(a->backend, &p, bytes)) {
        a->failed = 1;
        return NULL;
    }
    return a->dev[a->ndev++] = p;
}

static void *arena_host(arena *a, size_t bytes)
{
    void *p = NULL;
    if (a->failed || a->nhost == 48 || !(p = calloc(bytes ? bytes : 1, 1))) {
        if (!a->failed) fprintf(stderr, "fusednorm: out of host memory (%zu bytes)\n", bytes);
        a->failed = 1;
        return NULL;
    }
    return a->host[a->nhost++] = p;
}

static void arena_free(arena *a)
{
    for (int i = 0; i < a->ndev; i++) dev_free(a->backend, a->dev[i]);
    for (int i = 0; i < a->nhost; i++) free(a->host[i]);
    a->ndev = a->nhost = 0;
}

/* ---- comparison ---------------------------------------------------------- */

typedef struct verdict {
    double ratio;          /* worst err/tol, INFINITY for NaN or padding written */
    const char *output;    /* the output holding it */
    double err, tol;
    int64_t row, col;
    int vector;            /* the worst output is a vector: print one index */
    const char *problem;   /* non-NULL: why it failed beyond the numbers */
} verdict;

/* got: [rows, stride] of dtype t (vectors: rows = 1); ref: dense [rows, cols]. */
static void compare(verdict *v, const char *output, const void *got, fusednorm_dtype t, int64_t rows, int64_t cols,
                    int64_t stride, const double *ref, const double *row_err, const double *col_err)
{
    const double u = unit_roundoff(t), tiny = subnormal_spacing(t);
    const size_t esize = cli_dtype_size(t);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            double g = cli_load(got, t, r * stride + c), want = ref[r * cols + c];
            double tol = 2.0 * u * fabs(want) + (row_err ? row_err[r] : 0.0) + (col_err ? col_err[c] : 0.0) + tiny;
            double err = fabs(g - want);
            double ratio = err / tol;
            if (isnan(g) != isnan(want) || (isinf(want) && g != want)) ratio = INFINITY;
            else if (isnan(want)) ratio = 0.0; /* both NaN: agree */
            if (ratio > v->ratio || (!v->output && ratio >= v->ratio)) {
                v->ratio = ratio;
                v->output = output;
                v->err = err;
                v->tol = tol;
                v->row = r;
                v->col = c;
                v->vector = rows == 1 && stride == cols && cols != 1;
            }
        }
        /* Elements between cols and the row stride belong to the caller. */
        const unsigned char *pad = (const unsigned char *)got + (size_t)(r * stride + cols) * esize;
        for (size_t b = 0; b < (size_t)(stride - cols) * esize; b++)
            if (pad[b] != 0xFF) {
                v->ratio = INFINITY;
                v->output = output;
                v->row = r;
                v->problem = "wrote into the row padding past cols";
                return;
            }
    }
}

/* ---- one case: forward then backward ------------------------------------ */

typedef struct case_desc {
    fusednorm_backend backend;
    fusednorm_norm norm;
    feature feat;
    const dtype_config *dt;
    int64_t rows, cols;
    uint64_t seed;
} case_desc;

typedef struct tally {
    int cases, failed, quiet;
    double worst_ratio;
    char worst_case[160];
} tally;

static void report(tally *t, const case_desc *c, const char *pass, const verdict *v, const char *call_error)
{
    int ok = !call_error && !v->problem && v->ratio <= 1.0;
    char name[128];
    snprintf(name, sizeof name, "%-4s %-3s %-8s %-9s %6lldx%-6lld %s", dev_backend_name(c->backend),
             c->norm == FUSEDNORM_RMSNORM ? "rms" : "ln", c->dt->name, FEATURE_NAMES[c->feat], (long long)c->rows,
             (long long)c->cols, pass);
    t->cases++;
    if (!ok) t->failed++;
    if (!call_error && v->ratio > t->worst_ratio) {
        t->worst_ratio = v->ratio;
        snprintf(t->worst_case, sizeof t->worst_case, "%s %s", name, v->output ? v->output : "");
    }
    if (t->quiet && ok) return;
    if (call_error)
        printf("FAIL  %s  %s\n", name, call_error);
    else if (v->problem)
        printf("FAIL  %s  %s: %s (row %lld)\n", name, v->output, v->problem, (long long)v->row);
    else {
        char at[48];
        if (v->vector) snprintf(at, sizeof at, "[%lld]", (long long)v->col);
        else snprintf(at, sizeof at, "[%lld,%lld]", (long long)v->row, (long long)v->col);
        printf("%s  %s  max err/tol %.3f  (%s%s: err %.3e, tol %.3e)\n", ok ? "PASS" : "FAIL", name, v->ratio,
               v->output ? v->output : "-", at, v->err, v->tol);
    }
    fflush(stdout);
}

/* Copies a host buffer to a fresh device buffer. */
static void *upload_new(arena *a, const void *host, size_t bytes)
{
    void *d = arena_dev(a, bytes);
    if (d && dev_upload(a->backend, d, host, bytes)) {
        a->failed = 1;
        return NULL;
    }
    return d;
}

static char call_error_text[768];

static const char *call_error(fusednorm_status s, const char *fn)
{
    snprintf(call_error_text, sizeof call_error_text, "%s: %s: %s", fn, fusednorm_status_string(s),
             fusednorm_last_error());
    return call_error_text;
}

static int run_case(const case_desc *c, tally *t)
{
    const int64_t M = c->rows, N = c->cols;
    const int ln = c->norm == FUSEDNORM_LAYERNORM;
    const int has_res = c->feat == RESIDUAL, has_bias = c->feat == BIAS, has_w = c->feat != NO_WEIGHT;
    const fusednorm_dtype act = c->dt->act, par = c->dt->param;
    const size_t as = cli_dtype_size(act), ps = cli_dtype_size(par);
    const int64_t stride = has_bias ? N + 3 : N; /* padded rows: misaligned, and the padding is checked */
    const size_t mat = (size_t)(M * stride) * as, vec = (size_t)N * ps;
    const float eps = ln ? 1e-5f : 1e-6f, offset = c->feat == WEIGHT_OFFSET ? 1.0f : 0.0f;
    arena a = {.backend = c->backend};
    verdict vf = {0}, vb = {0};

    /* Host inputs: the padding too is random (it must be ignored). */
    void *hx = arena_host(&a, mat), *hres = has_res ? arena_host(&a, mat) : NULL;
    void *hw = has_w ? arena_host(&a, vec) : NULL, *hb = has_bias ? arena_host(&a, vec) : NULL;
    void *hdy = arena_host(&a, mat), *hdres = has_res ? arena_host(&a, mat) : NULL;
    if (a.failed) goto out_of_memory;
    cli_fill_random(hx, act, M * stride, -2.0, 2.0, c->seed);
    if (hres) cli_fill_random(hres, act, M * stride, -1.0, 1.0, c->seed + 1);
    if (hw) cli_fill_random(hw, par, N, offset ? -0.5 : 0.5, offset ? 0.5 : 1.5, c->seed + 2);
    if (hb) cli_fill_random(hb, par, N, -0.5, 0.5, c->seed + 3);
    cli_fill_random(hdy, act, M * stride, -1.0, 1.0, c->seed + 4);
    if (hdres) cli_fill_random(hdres, act, M * stride, -0.5, 0.5, c->seed + 5);

    void *d_x = upload_new(&a, hx, mat), *d_res = hres ? upload_new(&a, hres, mat) : NULL;
    void *d_w = hw ? upload_new(&a, hw, vec) : NULL, *d_b = hb ? upload_new(&a, hb, vec) : NULL;
    void *d_dy = upload_new(&a, hdy, mat), *d_dres = hdres ? upload_new(&a, hdres, mat) : NULL;
    void *d_y = arena_dev(&a, mat), *d_resout = has_res ? arena_dev(&a, mat) : NULL;
    float *d_rstd = arena_dev(&a, (size_t)M * 4), *d_mean = ln ? arena_dev(&a, (size_t)M * 4) : NULL;
    void *h_y = arena_host(&a, mat), *h_resout = has_res ? arena_host(&a, mat) : NULL;
    float *h_rstd = arena_host(&a, (size_t)M * 4), *h_mean = ln ? arena_host(&a, (size_t)M * 4) : NULL;
    double *ref_y = arena_host(&a, sizeof(double) * (size_t)(M * N));
    double *ref_resout = has_res ? arena_host(&a, sizeof(double) * (size_t)(M * N)) : NULL;
    double *ref_rstd = arena_host(&a, sizeof(double) * (size_t)M), *ref_mean = arena_host(&a, sizeof(double) * (size_t)M);
    double *row_err = arena_host(&a, sizeof(double) * (size_t)M), *row_err2 = arena_host(&a, sizeof(double) * (size_t)M);
    double *rstd_err = arena_host(&a, sizeof(double) * (size_t)M), *mean_err = arena_host(&a, sizeof(double) * (size_t)M);
    if (a.failed) goto out_of_memory;

    /* ---- forward ---- */
    fusednorm_fwd_args fa = {0};
    fa.norm = c->norm;
    fa.rows = M;
    fa.cols = N;
    fa.eps = eps;
    fa.weight_offset = offset;
    fa.x = (fusednorm_tensor){d_x, act, stride};
    if (has_res) fa.residual = (fusednorm_tensor){d_res, act, stride};
    if (has_w) fa.weight = (fusednorm_tensor){d_w, par, 0};
    if (has_bias) fa.bias = (fusednorm_tensor){d_b, par, 0};
    fa.y = (fusednorm_tensor){d_y, act, stride};
    if (has_res) fa.residual_out = (fusednorm_tensor){d_resout, act, stride};
    fa.rstd = d_rstd;
    fa.mean = d_mean;
    fa.backend = c->backend;

    if (dev_fill_bytes(c->backend, d_y, 0xFF, mat) || (d_resout && dev_fill_bytes(c->backend, d_resout, 0xFF, mat)) ||
        dev_fill_bytes(c->backend, d_rstd, 0xFF, (size_t)M * 4) ||
        (d_mean && dev_fill_bytes(c->backend, d_mean, 0xFF, (size_t)M * 4)))
        goto device_failure;
    fusednorm_status s = fusednorm_fwd(&fa);
    int fwd_ok = s == FUSEDNORM_OK;
    if (!fwd_ok) {
        report(t, c, "fwd", &vf, call_error(s, "fusednorm_fwd"));
    } else {
        if (dev_synchronize(c->backend) || dev_download(c->backend, h_y, d_y, mat) ||
            (h_resout && dev_download(c->backend, h_resout, d_resout, mat)) ||
            dev_download(c->backend, h_rstd, d_rstd, (size_t)M * 4) ||
            (h_mean && dev_download(c->backend, h_mean, d_mean, (size_t)M * 4)))
            goto device_failure;
        fusednorm_fwd_args ha = fa; /* the same args on the host copies, for the reference */
        ha.x.data = hx;
        ha.residual.data = hres;
        ha.weight.data = hw;
        ha.bias.data = hb;
        fn_ref_fwd(&ha, ref_y, ref_resout, ref_rstd, ref_mean);
        if (!ln) memset(ref_mean, 0, sizeof(double) * (size_t)M);

        double max_b = 0;
        for (int64_t j = 0; hb && j < N; j++) max_b = fmax(max_b, fabs(cli_load(hb, par, j)));
        for (int64_t r = 0; r < M; r++) {
            double max_h = 0, max_xw = 0;
            for (int64_t j = 0; j < N; j++) {
                double h = cli_load(hx, act, r * stride + j) + (hres ? cli_load(hres, act, r * stride + j) : 0.0);
                double w = hw ? cli_load(hw, par, j) + offset : 1.0;
                max_h = fmax(max_h, fabs(h));
                max_xw = fmax(max_xw, fabs((h - ref_mean[r]) * ref_rstd[r] * w));
            }
            row_err[r] = fp32_bound(sqrt((double)N), max_xw + max_b);
            row_err2[r] = fp32_bound(0.0, max_h);
            rstd_err[r] = fp32_bound(sqrt((double)N), ref_rstd[r]);
            mean_err[r] = fp32_bound(sqrt((double)N), max_h);
        }
        vf.ratio = 0;
        compare(&vf, "y", h_y, act, M, N, stride, ref_y, row_err, NULL);
        if (has_res) compare(&vf, "residual_out", h_resout, act, M, N, stride, ref_resout, row_err2, NULL);
        compare(&vf, "rstd", h_rstd, FUSEDNORM_F32, 1, M, M, ref_rstd, NULL, rstd_err);
        if (ln) compare(&vf, "mean", h_mean, FUSEDNORM_F32, 1, M, M, ref_mean, NULL, mean_err);
        report(t, c, "fwd", &vf, NULL);
    }

    /* ---- backward: on what the forward normalized, with its rstd/mean ---- */
    if (!fwd_ok) {
        report(t, c, "bwd", &vb, "not run: the forward failed");
        goto done;
    }
    {
        /* no_weight also exercises recomputing rstd/mean from x and eps. */
        const int give_stats = c->feat != NO_WEIGHT;
        void *d_xb = has_res ? d_resout : d_x, *h_xb = has_res ? h_resout : hx;
        void *d_gx = arena_dev(&a, mat), *d_gres = has_res ? arena_dev(&a, mat) : NULL;
        void *d_gw = has_w ? arena_dev(&a, vec) : NULL, *d_gb = has_bias ? arena_dev(&a, vec) : NULL;
        void *h_gx = arena_host(&a, mat), *h_gres = has_res ? arena_host(&a, mat) : NULL;
        void *h_gw = has_w ? arena_host(&a, vec) : NULL, *h_gb = has_bias ? arena_host(&a, vec) : NULL;
        double *ref_gx = arena_host(&a, sizeof(double) * (size_t)(M * N));
        double *ref_gw = arena_host(&a, sizeof(double) * (size_t)N), *ref_gb = arena_host(&a, sizeof(double) * (size_t)N);
        double *gw_err = arena_host(&a, sizeof(double) * (size_t)N), *gb_err = arena_host(&a, sizeof(double) * (size_t)N);
        if (a.failed) goto out_of_memory;

        fusednorm_bwd_args ba = {0};
        ba.norm = c->norm;
        ba.rows = M;
        ba.cols = N;
        ba.eps = eps;
        ba.weight_offset = offset;
        ba.dy = (fusednorm_tensor){d_dy, act, stride};
        ba.x = (fusednorm_tensor){d_xb, act, stride};
        if (has_w) ba.weight = (fusednorm_tensor){d_w, par, 0};
        if (has_res) ba.dresidual_out = (fusednorm_tensor){d_dres, act, stride};
        ba.rstd = give_stats ? d_rstd : NULL;
        ba.mean = give_stats ? d_mean : NULL;
        ba.dx = (fusednorm_tensor){d_gx, act, stride};
        if (has_res) ba.dresidual = (fusednorm_tensor){d_gres, act, stride};
        if (has_w) ba.dweight = (fusednorm_tensor){d_gw, par, 0};
        if (has_bias) ba.dbias = (fusednorm_tensor){d_gb, par, 0};
        ba.backend = c->backend;

        size_t ws_bytes = 0;
        s = fusednorm_bwd_workspace_size(&ba, &ws_bytes);
        if (s != FUSEDNORM_OK) {
            report(t, c, "bwd", &vb, call_error(s, "fusednorm_bwd_workspace_size"));
            goto done;
        }
        ba.workspace = ws_bytes ? arena_dev(&a, ws_bytes) : NULL;
        ba.workspace_bytes = ws_bytes;
        if (a.failed) goto out_of_memory;
        if (dev_fill_bytes(c->backend, d_gx, 0xFF, mat) || (d_gres && dev_fill_bytes(c->backend, d_gres, 0xFF, mat)) ||
            (d_gw && dev_fill_bytes(c->backend, d_gw, 0xFF, vec)) || (d_gb && dev_fill_bytes(c->backend, d_gb, 0xFF, vec)))
            goto device_failure;
        s = fusednorm_bwd(&ba);
        if (s != FUSEDNORM_OK) {
            report(t, c, "bwd", &vb, call_error(s, "fusednorm_bwd"));
            goto done;
        }
        if (dev_synchronize(c->backend) || dev_download(c->backend, h_gx, d_gx, mat) ||
            (h_gres && dev_download(c->backend, h_gres, d_gres, mat)) ||
            (h_gw && dev_download(c->backend, h_gw, d_gw, vec)) || (h_gb && dev_download(c->backend, h_gb, d_gb, vec)))
            goto device_failure;

        fusednorm_bwd_args hba = ba;
        hba.dy.data = hdy;
        hba.x.data = h_xb;
        hba.weight.data = hw;
        hba.dresidual_out.data = hdres;
        hba.rstd = give_stats ? h_rstd : NULL;
        hba.mean = give_stats ? h_mean : NULL;
        fn_ref_bwd(&hba, ref_gx, has_w ? ref_gw : NULL, has_bias ? ref_gb : NULL);

        memset(gw_err, 0, sizeof(double) * (size_t)N);
        memset(gb_err, 0, sizeof(double) * (size_t)N);
        for (int64_t r = 0; r < M; r++) {
            double rstd = give_stats ? h_rstd[r] : ref_rstd[r], mean = give_stats && ln ? h_mean[r] : ref_mean[r];
            double max_g = 0, max_xhat = 0, max_dres = 0;
            for (int64_t j = 0; j < N; j++) {
                double dy = cli_load(hdy, act, r * stride + j);
                double xhat = (cli_load(h_xb, act, r * stride + j) - mean) * rstd;
                double w = hw ? cli_load(hw, par, j) + offset : 1.0;
                max_g = fmax(max_g, fabs(dy * w));
                max_xhat = fmax(max_xhat, fabs(xhat));
                if (hdres) max_dres = fmax(max_dres, fabs(cli_load(hdres, act, r * stride + j)));
                gw_err[j] += fabs(dy * xhat); /* sums of |terms|, scaled below */
                gb_err[j] += fabs(dy);
            }
            row_err[r] = fp32_bound(sqrt((double)N), rstd * max_g * (2.0 + max_xhat) + max_dres);
        }
        for (int64_t j = 0; j < N; j++) {
            gw_err[j] = fp32_bound(sqrt((double)M) + sqrt((double)N), gw_err[j]);
            gb_err[j] = fp32_bound(sqrt((double)M), gb_err[j]);
        }
        vb.ratio = 0;
        compare(&vb, "dx", h_gx, act, M, N, stride, ref_gx, row_err, NULL);
        if (has_res) compare(&vb, "dresidual", h_gres, act, M, N, stride, ref_gx, row_err, NULL);
        if (has_w) compare(&vb, "dweight", h_gw, par, 1, N, N, ref_gw, NULL, gw_err);
        if (has_bias) compare(&vb, "dbias", h_gb, par, 1, N, N, ref_gb, NULL, gb_err);
        report(t, c, "bwd", &vb, NULL);
    }
done:
    arena_free(&a);
    return 0;
out_of_memory:
device_failure:
    report(t, c, "setup", &vf, "could not allocate, copy or synchronize (see stderr)");
    arena_free(&a);
    return -1;
}

/* ---- the command --------------------------------------------------------- */

void check_default_options(check_options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = dev_best_backend();
}

void check_help(FILE *out)
{
    fprintf(out,
            "usage: fusednorm check [--backend cpu|cuda] [--rows M] [--cols N,...] [--quiet]\n"
            "\n"
            "Runs forward and backward of every norm (rms, ln), feature (plain, residual\n"
            "with residual_out, bias, w_offset, no_weight) and dtype (f32, f16, bf16, and\n"
            "f16/w32, bf16/w32: fp32 weight/bias with 16-bit activations) against the fp64\n"
            "reference, one line per case: the worst error / tolerance and PASS or FAIL.\n"
            "Tolerances follow from the dtype and the shape (see docs/cli.md).\n"
            "\n"
            "options:\n"
            "  --backend cpu|cuda  backend to check (default: cuda when a device is usable)\n"
            "  --rows M            rows per case (default: cpu 37, cuda 128)\n"
            "  --cols N,...        columns, comma separated (default: cpu 1,7,256,4097;\n"
            "                      cuda 1,7,256,1000,4097,16384,32768,32776,65536,65537,65544)\n"
            "  --quiet             print only failures and the summary\n"
            "  -h, --help          this help\n"
            "\n"
            "exit code: 0 all cases pass, 1 any case fails, 2 bad usage or backend absent.\n"
            "\n"
            "examples:\n"
            "  fusednorm check\n"
            "  fusednorm check --backend cpu --rows 5 --cols 3,4096\n"
            "  fusednorm check --backend cuda --cols 2000,65537 --quiet\n");
}

int check_parse(int argc, char **argv, check_options *o)
{
    cli_args it;
    const char *opt;
    cli_args_init(&it, "check", argc, argv);
    while (cli_next_option(&it, &opt)) {
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            check_help(stdout);
            return 1;
        } else if (!strcmp(opt, "--backend")) {
            o->backend = cli_parse_backend("check", cli_option_value(&it, opt));
        } else if (!strcmp(opt, "--rows")) {
            o->rows = cli_parse_positive("check", opt, cli_option_value(&it, opt), (int64_t)1 << 24);
        } else if (!strcmp(opt, "--cols")) {
            o->ncols = cli_parse_int_list("check", opt, cli_option_value(&it, opt), o->cols, (int64_t)1 << 24);
        } else if (!strcmp(opt, "--quiet")) {
            cli_option_flag(&it, opt);
            o->quiet = 1;
        } else {
            cli_usage_error("check", "unknown option '%s'", opt);
        }
    }
    return 0;
}

int check_run(const check_options *opts)
{
    check_options o = *opts;
    char why[256];
    if (!dev_backend_usable(o.backend, why, sizeof why)) {
        fprintf(stderr, "fusednorm check: --backend %s: %s\n", dev_backend_name(o.backend), why);
        return CLI_EXIT_USAGE;
    }
    if (!o.rows) o.rows = o.backend == FUSEDNORM_CUDA ? 128 : 37;
    if (!o.ncols) {
        static const int64_t cpu_cols[] = {1, 7, 256, 4097},
                             cuda_cols[] = {1, 7, 256, 1000, 4097, 16384, 32768, 32776, 65536, 65537, 65544};
        const int64_t *d = o.backend == FUSEDNORM_CUDA ? cuda_cols : cpu_cols;
        o.ncols = o.backend == FUSEDNORM_CUDA ? (int)(sizeof cuda_cols / sizeof cuda_cols[0])
                                              : (int)(sizeof cpu_cols / sizeof cpu_cols[0]);
        memcpy(o.cols, d, sizeof(int64_t) * (size_t)o.ncols);
    }
    if (!o.quiet)
        printf("# fusednorm check on %s: rows %lld; result, backend, norm, dtype, feature, shape, pass, "
               "worst error/tolerance\n",
               dev_backend_name(o.backend), (long long)o.rows);
    tally t = {.quiet = o.quiet};
    uint64_t seed = 1;
    for (int ci = 0; ci < o.ncols; ci++)
        for (int n = 0; n < 2; n++)
            for (int f = 0; f < NUM_FEATURES; f++)
                for (int d = 0; d < NUM_DTYPE_CONFIGS; d++) {
                    /* Without weight and bias the parameter dtype plays no part. */
                    if (f == NO_WEIGHT && DTYPE_CONFIGS[d].act != DTYPE_CONFIGS[d].param) continue;
                    case_desc c = {o.backend, (fusednorm_norm)n, (feature)f, &DTYPE_CONFIGS[d], o.rows, o.cols[ci],
                                   seed};
                    seed += 16;
                    run_case(&c, &t);
                }
    printf("check %s: %d cases, %d passed, %d failed; worst error/tolerance %.3f (%s)\n", dev_backend_name(o.backend),
           t.cases, t.cases - t.failed, t.failed, t.worst_ratio, t.worst_case);
    return t.failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
