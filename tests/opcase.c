/*
 * Runs one th_case forward and backward on a backend and checks it against
 * the fp64 reference.
 *
 * Tolerances. u_out is the unit roundoff of the output's dtype (f32 2^-24,
 * f16 2^-11, bf16 2^-8) and u = 2^-24 that of the fp32 arithmetic the design
 * prescribes; N = cols, M = rows. Every output is compared as
 *     |out - ref| <= 2*u_out*|ref| + abs + tiny(dtype)
 * where 2*u_out covers the final rounding (and a double rounding through fp32),
 * tiny is the dtype's smallest subnormal, and abs bounds the fp32 error of the
 * computation on the scale of the row (not of the element: outputs near zero
 * come from differences of larger terms):
 *   y:            abs_r = u*(4 + 4*sqrt(N)) * ((max|x_hat| + rstd*max|h|)*max|w'| + max|b|)
 *                 (a few elementwise roundings, rstd's reduction error ~u*sqrt(N)
 *                 relative, h-mean losing u*|h|; w' = weight + weight_offset)
 *   residual_out: rel 2*(u_out + u), abs 0 (one fp32 add, then the store)
 *   rstd:         rel u*(4 + 4*sqrt(N))          mean: abs_r = u*(4 + 4*sqrt(N))*max|h|
 *   dx/dresidual: abs_r = u*rstd*(1 + max|x_hat| + e)*(8*max|g| + 4*sqrt(N)*rms(g))
 *                         + 2*u*max|dresidual_out|
 *                 (g = dy*w'; the two row reductions mean(g), mean(x_hat*g) err by
 *                 ~u*sqrt(N) of their terms' rms, and the output is a difference of
 *                 terms of size rstd*|g|*(1+|x_hat|), so its own size is not the scale)
 *   dweight:      abs_j = 8*u*(sqrt(M) + sqrt(N) + 1)*L2_j + 2*u*|initial_j|
 *   dbias:        abs_j = 8*u*(sqrt(M) + 1)*L2_j + 2*u*|initial_j|
 *                 (L2_j = sqrt(sum_r (dy*(|x_hat| + e))^2) resp. sqrt(sum_r dy^2): a sum
 *                 of M terms of random sign errs by ~u*sqrt(M)*L2 in any order; each
 *                 term carries x_hat's ~u*sqrt(N) relative error)
 *                 e = rstd*max|h| for LayerNorm, 0 for RMSNorm: h - mean loses u*|h|,
 *                 an absolute error of x_hat that is not relative to it (as in y)
 * Inputs are uniform random, fresh per case, so no reduction is dominated by
 * one sign. The reference reads the same input bits, so input rounding is
 * not an error.
 */
#include "opcase.h"

#include "internal.h"
#include "ref/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 0x1p-24

th_case th_case_default(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype dt)
{
    th_case c;
    memset(&c, 0, sizeof c);
    c.norm = norm;
    c.rows = rows;
    c.cols = cols;
    c.eps = norm == FUSEDNORM_RMSNORM ? 1e-6f : 1e-5f;
    c.x = c.residual = c.residual_out = c.y = c.weight = c.bias = dt;
    c.dy = c.dx = c.dresidual_out = c.dresidual = c.dweight = c.dbias = dt;
    c.weight_on = 1;
    return c;
}

void th_case_describe(const th_case *c, fusednorm_backend be, char *buf, size_t n)
{
    snprintf(buf, n,
             "%s %s rows %lld cols %lld x %s res %s%s resout %s%s y %s w %s%s off %g b %s%s | dy %s dx %s dro %s%s "
             "dres %s%s dw %s%s db %s%s flags %u rstd%s mean%s given%s pad %lld mis %d alias %d%d%d%d%d",
             th_backend_name(be), fn_norm_name(c->norm), (long long)c->rows, (long long)c->cols,
             fn_dtype_name(c->x), fn_dtype_name(c->residual), c->residual_on ? "" : "(off)",
             fn_dtype_name(c->residual_out), c->residual_out_on ? "" : "(off)", fn_dtype_name(c->y),
             fn_dtype_name(c->weight), c->weight_on ? "" : "(off)", (double)c->weight_offset, fn_dtype_name(c->bias),
             c->bias_on ? "" : "(off)", fn_dtype_name(c->dy), fn_dtype_name(c->dx), fn_dtype_name(c->dresidual_out),
             c->dresidual_out_on ? "" : "(off)", fn_dtype_name(c->dresidual), c->dresidual_on ? "" : "(off)",
             fn_dtype_name(c->dweight), c->dweight_on ? "" : "(off)", fn_dtype_name(c->dbias),
             c->dbias_on ? "" : "(off)", c->flags, c->store_rstd ? "+" : "-", c->store_mean ? "+" : "-",
             c->bwd_stats_given ? "+" : "-", (long long)c->pad, c->misalign, c->alias_y_x, c->alias_resout_res,
             c->alias_resout_x, c->alias_dx_dy, c->alias_dres_dresout);
}

static int64_t stride_for(const th_case *c, int k) { return c->pad > 0 ? c->cols + c->pad * k : 0; }

/* NaN in row 1, +Inf in row 2, -Inf in row 3 (where the shape has them). */
static void plant_nonfinite(th_tensor *t, int which)
{
    const int64_t col = t->cols > 7 ? 7 : t->cols - 1;
    if (which == 0 && t->rows > 1) fn_store(th_host(t), t->dtype, 1 * t->stride + col / 2, NAN);
    if (which == 0 && t->rows > 2) fn_store(th_host(t), t->dtype, 2 * t->stride + col, INFINITY);
    if (which == 0 && t->rows > 3) fn_store(th_host(t), t->dtype, 3 * t->stride, -INFINITY);
    if (which == 1 && t->rows > 1) fn_store(th_host(t), t->dtype, 1 * t->stride + col, NAN);
    th_upload(t);
}

/* +2^17 in column 0 and -2^16 in column 8 of every row (exact in fp32 and
 * bf16; past fp16's range): values far from the rest (uniform in [-2, 2]) at
 * the first element of a CUDA thread's share of the row. The streaming
 * forward's first form shifted each thread's sums by that element, and an
 * fp32 emulation of it put rstd 2204 ulp off at N = 262144 bf16 (tolerance
 * 2052) and 1853 at 131072 fp32 (1452) with these values. */
static void plant_outliers(th_tensor *t)
{
    for (int64_t i = 0; i < t->rows; i++) {
        fn_store(th_host(t), t->dtype, i * t->stride, 131072.0f);
        if (t->cols > 8) fn_store(th_host(t), t->dtype, i * t->stride + 8, -65536.0f);
    }
    th_upload(t);
}

/* x_offset added to the odd rows' values, rounded to the dtype again (the
 * shadow is what the reference and the other backend read). */
static void offset_odd_rows(th_tensor *t, float off)
{
    for (int64_t i = 1; i < t->rows; i += 2)
        for (int64_t j = 0; j < t->cols; j++)
            fn_store(th_host(t), t->dtype, i * t->stride + j, (float)th_get(t, i, j) + off);
    th_upload(t);
}

static double *dmalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

static double wprime(const th_tensor *w, int on, float off, int64_t j)
{
    return on ? th_get(w, 0, j) + (double)off : 1.0;
}

/* ---- forward ------------------------------------------------------------------ */

static int run_fwd(const th_case *c, fusednorm_backend be, const th_tensor *w, const th_tensor *b,
                   th_case_result *res)
{
    const int64_t R = c->rows, N = c->cols;
    const long failed_before = th_failed;
    const int ln = c->norm == FUSEDNORM_LAYERNORM;
    th_tensor x, r, y, ro, rstd, mean;
    memset(&r, 0, sizeof r);
    memset(&ro, 0, sizeof ro);
    memset(&rstd, 0, sizeof rstd);
    memset(&mean, 0, sizeof mean);
    th_alloc(&x, be, c->x, R, N, stride_for(c, 1), c->misalign);
    th_fill(&x, -2.0, 2.0);
    if (c->x_offset != 0.0f) offset_odd_rows(&x, c->x_offset);
    if (c->nonfinite) plant_nonfinite(&x, 0);
    if (c->outliers) plant_outliers(&x);
    if (c->residual_on) {
        th_alloc(&r, be, c->residual, R, N, stride_for(c, 2), c->misalign);
        th_fill(&r, -1.0, 1.0);
    }
    th_tensor *yp = &y, *rop = &ro;
    if (c->alias_y_x) yp = &x;
    else {
        th_alloc(&y, be, c->y, R, N, stride_for(c, 3), c->misalign);
        th_poison(&y);
    }
    if (c->residual_out_on) {
        if (c->alias_resout_res) rop = &r;
        else if (c->alias_resout_x) rop = &x;
        else {
            th_alloc(&ro, be, c->residual_out, R, N, stride_for(c, 4), c->misalign);
            th_poison(&ro);
        }
    }
    if (c->store_rstd) {
        th_alloc(&rstd, be, FUSEDNORM_F32, R, 1, 0, c->misalign == 1);
        th_poison(&rstd);
    }
    if (c->store_mean) {
        th_alloc(&mean, be, FUSEDNORM_F32, R, 1, 0, c->misalign == 1);
        th_poison(&mean);
    }

    /* Reference first: aliased outputs overwrite the inputs. */
    fusednorm_fwd_args h;
    memset(&h, 0, sizeof h);
    h.norm = c->norm;
    h.rows = R;
    h.cols = N;
    h.eps = c->eps;
    h.weight_offset = c->weight_offset;
    h.x = th_host_arg(&x);
    if (c->residual_on) h.residual = th_host_arg(&r);
    if (c->weight_on) h.weight = th_host_arg(w);
    if (c->bias_on) h.bias = th_host_arg(b);
    double *ref_y = dmalloc(R * N), *ref_h = dmalloc(R * N), *ref_rstd = dmalloc(R), *ref_mean = dmalloc(R);
    fn_ref_fwd(&h, ref_y, ref_h, ref_rstd, ref_mean);

    double *y_abs = dmalloc(R), *mean_abs = dmalloc(R);
    double maxw = 0.0, maxb = 0.0;
    for (int64_t j = 0; j < N; j++) {
        maxw = fmax(maxw, fabs(wprime(w, c->weight_on, c->weight_offset, j)));
        if (c->bias_on) maxb = fmax(maxb, fabs(th_get(b, 0, j)));
    }
    const double red = U32 * (4.0 + 4.0 * sqrt((double)N));
    for (int64_t i = 0; i < R; i++) {
        double maxh = 0.0, maxxhat = 0.0;
        for (int64_t j = 0; j < N; j++) {
            double hv = ref_h[i * N + j];
            maxh = fmax(maxh, fabs(hv));
            maxxhat = fmax(maxxhat, fabs((hv - ref_mean[i]) * ref_rstd[i]));
        }
        y_abs[i] = red * ((maxxhat + ref_rstd[i] * maxh) * maxw + maxb);
        mean_abs[i] = red * maxh;
    }

    fusednorm_fwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = c->norm;
    a.rows = R;
    a.cols = N;
    a.eps = c->eps;
    a.weight_offset = c->weight_offset;
    a.x = th_arg(&x);
    if (c->residual_on) a.residual = th_arg(&r);
    if (c->weight_on) a.weight = th_arg(w);
    if (c->bias_on) a.bias = th_arg(b);
    a.y = th_arg(yp);
    if (c->residual_out_on) a.residual_out = th_arg(rop);
    if (c->store_rstd) a.rstd = th_data(&rstd);
    if (c->store_mean) a.mean = th_data(&mean);
    a.backend = be;
    fusednorm_status s = fusednorm_fwd(&a);
    th_backend_sync(be);
    ASSERT_STATUS(s, FUSEDNORM_OK);
    if (s == FUSEDNORM_OK) {
        th_compare(yp, ref_y, 2.0 * th_unit_roundoff(yp->dtype), y_abs, "fwd y");
        if (c->residual_out_on)
            th_compare(rop, ref_h, 2.0 * (th_unit_roundoff(rop->dtype) + U32), NULL, "fwd residual_out");
        if (c->store_rstd) {
            th_download(&rstd);
            th_compare_f32(th_host(&rstd), ref_rstd, R, red, NULL, "fwd rstd");
        }
        if (c->store_mean) {
            th_download(&mean);
            th_compare_f32(th_host(&mean), ref_mean, R, 2.0 * U32, mean_abs, "fwd mean");
        }
        if (!c->alias_y_x && !(c->residual_out_on && c->alias_resout_x)) th_check_unchanged(&x, "fwd x");
        if (c->residual_on && !(c->residual_out_on && c->alias_resout_res)) th_check_unchanged(&r, "fwd residual");
        th_check_padding(&x, "fwd x");
        if (c->residual_on) th_check_padding(&r, "fwd residual");
        if (yp == &y) th_check_padding(&y, "fwd y");
        if (rop == &ro && c->residual_out_on) th_check_padding(&ro, "fwd residual_out");
        if (c->store_rstd) th_check_padding(&rstd, "fwd rstd");
        if (c->store_mean) th_check_padding(&mean, "fwd mean");
    }
    (void)ln;
    if (res) {
        res->y = dmalloc(R * N);
        for (int64_t i = 0; i < R * N; i++) res->y[i] = th_get(yp, i / N, i % N);
        res->y_abs = y_abs;
        res->y_rel = 2.0 * th_unit_roundoff(yp->dtype);
        y_abs = NULL;
        if (c->residual_out_on) {
            res->residual_out = dmalloc(R * N);
            for (int64_t i = 0; i < R * N; i++) res->residual_out[i] = th_get(rop, i / N, i % N);
        }
        if (c->store_rstd) {
            res->rstd = dmalloc(R);
            for (int64_t i = 0; i < R; i++) res->rstd[i] = th_get(&rstd, i, 0);
        }
    }
    free(ref_y);
    free(ref_h);
    free(ref_rstd);
    free(ref_mean);
    free(y_abs);
    free(mean_abs);
    th_free(&x);
    if (c->residual_on) th_free(&r);
    if (yp == &y) th_free(&y);
    if (rop == &ro && c->residual_out_on) th_free(&ro);
    if (c->store_rstd) th_free(&rstd);
    if (c->store_mean) th_free(&mean);
    return th_failed == failed_before;
}

/* ---- backward ----------------------------------------------------------------- */

static int run_bwd(const th_case *c, fusednorm_backend be, const th_tensor *w, th_case_result *res)
{
    const int64_t R = c->rows, N = c->cols;
    const long failed_before = th_failed;
    const int ln = c->norm == FUSEDNORM_LAYERNORM;
    const fusednorm_dtype xdt = c->residual_on ? c->residual_out : c->x;
    th_tensor x, dy, dro, dx, dres, dw, db, rstd, mean;
    memset(&dro, 0, sizeof dro);
    memset(&dres, 0, sizeof dres);
    memset(&dw, 0, sizeof dw);
    memset(&db, 0, sizeof db);
    memset(&rstd, 0, sizeof rstd);
    memset(&mean, 0, sizeof mean);
    th_alloc(&x, be, xdt, R, N, stride_for(c, 1), c->misalign);
    th_fill(&x, -2.0, 2.0);
    if (c->x_offset != 0.0f) offset_odd_rows(&x, c->x_offset);
    th_alloc(&dy, be, c->dy, R, N, stride_for(c, 2), c->misalign);
    th_fill(&dy, -1.0, 1.0);
    if (c->nonfinite) {
        plant_nonfinite(&x, 0);
        plant_nonfinite(&dy, 1);
    }
    if (c->outliers) plant_outliers(&x);
    if (c->dresidual_out_on) {
        th_alloc(&dro, be, c->dresidual_out, R, N, stride_for(c, 3), c->misalign);
        th_fill(&dro, -1.0, 1.0);
    }
    th_tensor *dxp = &dx, *dresp = &dres;
    if (c->alias_dx_dy) dxp = &dy;
    else {
        th_alloc(&dx, be, c->dx, R, N, stride_for(c, 4), c->misalign);
        th_poison(&dx);
    }
    if (c->dresidual_on) {
        if (c->alias_dres_dresout) dresp = &dro;
        else {
            th_alloc(&dres, be, c->dresidual, R, N, stride_for(c, 5), c->misalign);
            th_poison(&dres);
        }
    }
    const int accumulate = (c->flags & FUSEDNORM_ACCUMULATE) != 0;
    if (c->dweight_on) {
        th_alloc(&dw, be, c->dweight, 1, N, 0, c->misalign == 1);
        if (accumulate) th_fill(&dw, -1.0, 1.0);
        else th_poison(&dw);
    }
    if (c->dbias_on) {
        th_alloc(&db, be, c->dbias, 1, N, 0, c->misalign == 1);
        if (accumulate) th_fill(&db, -1.0, 1.0);
        else th_poison(&db);
    }

    /* The statistics of x in double: the scales of the tolerances, and (rounded
     * to fp32) the forward's rstd/mean when the case passes them. */
    double *st_rstd = dmalloc(R), *st_mean = dmalloc(R);
    {
        fusednorm_fwd_args f;
        memset(&f, 0, sizeof f);
        f.norm = c->norm;
        f.rows = R;
        f.cols = N;
        f.eps = c->eps;
        f.x = th_host_arg(&x);
        fn_ref_fwd(&f, NULL, NULL, st_rstd, st_mean);
    }
    if (c->bwd_stats_given) {
        th_alloc(&rstd, be, FUSEDNORM_F32, R, 1, 0, c->misalign == 1);
        for (int64_t i = 0; i < R; i++) ((float *)th_host(&rstd))[i] = (float)st_rstd[i];
        th_upload(&rstd);
        if (ln) {
            th_alloc(&mean, be, FUSEDNORM_F32, R, 1, 0, c->misalign == 1);
            for (int64_t i = 0; i < R; i++) ((float *)th_host(&mean))[i] = (float)st_mean[i];
            th_upload(&mean);
        }
    }

    fusednorm_bwd_args h;
    memset(&h, 0, sizeof h);
    h.norm = c->norm;
    h.rows = R;
    h.cols = N;
    h.eps = c->eps;
    h.weight_offset = c->weight_offset;
    h.flags = c->flags;
    h.dy = th_host_arg(&dy);
    h.x = th_host_arg(&x);
    if (c->weight_on) h.weight = th_host_arg(w);
    if (c->dresidual_out_on) h.dresidual_out = th_host_arg(&dro);
    if (c->bwd_stats_given) {
        h.rstd = th_host(&rstd);
        if (ln) h.mean = th_host(&mean);
    }
    if (c->dweight_on) h.dweight = th_host_arg(&dw);
    if (c->dbias_on) h.dbias = th_host_arg(&db);
    double *ref_dx = dmalloc(R * N), *ref_dw = dmalloc(N), *ref_db = dmalloc(N);
    fn_ref_bwd(&h, ref_dx, ref_dw, ref_db);

    /* Tolerance scales (see the file comment). */
    double *dx_abs = dmalloc(R), *dw_abs = dmalloc(N), *db_abs = dmalloc(N), *l2w = dmalloc(N), *l2b = dmalloc(N);
    for (int64_t i = 0; i < R; i++) {
        double rs = c->bwd_stats_given ? (double)((float *)th_host(&rstd))[i] : st_rstd[i];
        double mu = (c->bwd_stats_given && ln) ? (double)((float *)th_host(&mean))[i] : (ln ? st_mean[i] : 0.0);
        double maxg = 0.0, ssg = 0.0, maxxhat = 0.0, maxdro = 0.0, maxh = 0.0;
        /* LayerNorm: h - mean loses u*|h|, so x_hat errs by u*rstd*max|h| absolutely
         * (as in y's tolerance), which for rows with |mean| >> std dwarfs u*|x_hat|. */
        if (ln)
            for (int64_t j = 0; j < N; j++) maxh = fmax(maxh, fabs(th_get(&x, i, j)));
        const double xhat_abs = ln ? rs * maxh : 0.0;
        for (int64_t j = 0; j < N; j++) {
            double dyv = th_get(&dy, i, j);
            double g = dyv * wprime(w, c->weight_on, c->weight_offset, j);
            double xhat = (th_get(&x, i, j) - mu) * rs;
            maxg = fmax(maxg, fabs(g));
            ssg += g * g;
            maxxhat = fmax(maxxhat, fabs(xhat));
            if (c->dresidual_out_on) maxdro = fmax(maxdro, fabs(th_get(&dro, i, j)));
            const double t = dyv * (fabs(xhat) + xhat_abs);
            l2w[j] += t * t;
            l2b[j] += dyv * dyv;
        }
        dx_abs[i] = U32 * rs * (1.0 + maxxhat + xhat_abs) * (8.0 * maxg + 4.0 * sqrt((double)N) * sqrt(ssg / (double)N)) +
                    2.0 * U32 * maxdro;
    }
    for (int64_t j = 0; j < N; j++) {
        double iw = (accumulate && c->dweight_on) ? fabs(th_get(&dw, 0, j)) : 0.0;
        double ib = (accumulate && c->dbias_on) ? fabs(th_get(&db, 0, j)) : 0.0;
        dw_abs[j] = 8.0 * U32 * (sqrt((double)R) + sqrt((double)N) + 1.0) * sqrt(l2w[j]) + 2.0 * U32 * iw;
        db_abs[j] = 8.0 * U32 * (sqrt((double)R) + 1.0) * sqrt(l2b[j]) + 2.0 * U32 * ib;
    }

    fusednorm_bwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = c->norm;
    a.rows = R;
    a.cols = N;
    a.eps = c->eps;
    a.weight_offset = c->weight_offset;
    a.flags = c->flags;
    a.dy = th_arg(&dy);
    a.x = th_arg(&x);
    if (c->weight_on) a.weight = th_arg(w);
    if (c->dresidual_out_on) a.dresidual_out = th_arg(&dro);
    if (c->bwd_stats_given) {
        a.rstd = th_data(&rstd);
        if (ln) a.mean = th_data(&mean);
    }
    a.dx = th_arg(dxp);
    if (c->dresidual_on) a.dresidual = th_arg(dresp);
    if (c->dweight_on) a.dweight = th_arg(&dw);
    if (c->dbias_on) a.dbias = th_arg(&db);
    a.backend = be;
    size_t ws_bytes = 0;
    fusednorm_status s = fusednorm_bwd_workspace_size(&a, &ws_bytes);
    ASSERT_STATUS(s, FUSEDNORM_OK);
    void *ws = ws_bytes ? th_backend_malloc(be, ws_bytes) : NULL;
    if (ws) th_backend_memset(be, ws, 0xFF, ws_bytes); /* the library must not rely on a zeroed workspace */
    a.workspace = ws;
    a.workspace_bytes = ws_bytes;
    s = fusednorm_bwd(&a);
    th_backend_sync(be);
    ASSERT_STATUS(s, FUSEDNORM_OK);
    if (s == FUSEDNORM_OK) {
        th_compare(dxp, ref_dx, 2.0 * th_unit_roundoff(dxp->dtype), dx_abs, "bwd dx");
        if (c->dresidual_on) th_compare(dresp, ref_dx, 2.0 * th_unit_roundoff(dresp->dtype), dx_abs, "bwd dresidual");
        if (c->dweight_on) th_compare_each(&dw, ref_dw, 2.0 * th_unit_roundoff(dw.dtype), dw_abs, "bwd dweight");
        if (c->dbias_on) th_compare_each(&db, ref_db, 2.0 * th_unit_roundoff(db.dtype), db_abs, "bwd dbias");
        th_check_unchanged(&x, "bwd x");
        if (!c->alias_dx_dy) th_check_unchanged(&dy, "bwd dy");
        if (c->dresidual_out_on && !(c->dresidual_on && c->alias_dres_dresout))
            th_check_unchanged(&dro, "bwd dresidual_out");
        if (c->bwd_stats_given) {
            th_check_unchanged(&rstd, "bwd rstd");
            if (ln) th_check_unchanged(&mean, "bwd mean");
        }
        th_check_padding(&x, "bwd x");
        th_check_padding(&dy, "bwd dy");
        if (c->dresidual_out_on) th_check_padding(&dro, "bwd dresidual_out");
        if (dxp == &dx) th_check_padding(&dx, "bwd dx");
        if (c->dresidual_on && dresp == &dres) th_check_padding(&dres, "bwd dresidual");
        if (c->dweight_on) th_check_padding(&dw, "bwd dweight");
        if (c->dbias_on) th_check_padding(&db, "bwd dbias");
    }
    if (res) {
        res->dx = dmalloc(R * N);
        for (int64_t i = 0; i < R * N; i++) res->dx[i] = th_get(dxp, i / N, i % N);
        res->dx_abs = dx_abs;
        res->dx_rel = 2.0 * th_unit_roundoff(dxp->dtype);
        dx_abs = NULL;
        if (c->dweight_on) {
            res->dweight = dmalloc(N);
            for (int64_t j = 0; j < N; j++) res->dweight[j] = th_get(&dw, 0, j);
            res->dweight_abs = dw_abs;
            res->dweight_rel = 2.0 * th_unit_roundoff(dw.dtype);
            dw_abs = NULL;
            res->dweight_bytes = (size_t)N * dw.esize;
            res->dweight_bits = malloc(res->dweight_bytes);
            memcpy(res->dweight_bits, th_host(&dw), res->dweight_bytes);
        }
        if (c->dbias_on) {
            res->dbias_bytes = (size_t)N * db.esize;
            res->dbias_bits = malloc(res->dbias_bytes);
            memcpy(res->dbias_bits, th_host(&db), res->dbias_bytes);
        }
    }
    if (ws) th_backend_free(be, ws);
    free(ref_dx);
    free(ref_dw);
    free(ref_db);
    free(dx_abs);
    free(dw_abs);
    free(db_abs);
    free(l2w);
    free(l2b);
    free(st_rstd);
    free(st_mean);
    th_free(&x);
    th_free(&dy);
    if (c->dresidual_out_on) th_free(&dro);
    if (dxp == &dx) th_free(&dx);
    if (c->dresidual_on && dresp == &dres) th_free(&dres);
    if (c->dweight_on) th_free(&dw);
    if (c->dbias_on) th_free(&db);
    if (c->bwd_stats_given) {
        th_free(&rstd);
        if (ln) th_free(&mean);
    }
    return th_failed == failed_before;
}

int th_run_case(const th_case *c, fusednorm_backend be, th_case_result *res)
{
    const long failed_before = th_failed;
    th_case_describe(c, be, th_context, sizeof th_context);
    if (res) {
        memset(res, 0, sizeof *res);
        res->rows = c->rows;
        res->cols = c->cols;
    }
    th_tensor w, b;
    th_alloc(&w, be, c->weight, 1, c->cols, 0, c->misalign == 1);
    /* Gemma-style weights sit around 0 (the offset adds 1), plain ones around 1. */
    if (c->weight_offset != 0.0f) th_fill(&w, -0.5, 0.5);
    else th_fill(&w, 0.5, 1.5);
    th_alloc(&b, be, c->bias, 1, c->cols, 0, c->misalign == 1);
    th_fill(&b, -0.5, 0.5);
    if (!c->skip_fwd) run_fwd(c, be, &w, &b, res);
    if (!c->skip_bwd) run_bwd(c, be, &w, res);
    th_check_unchanged(&w, "weight");
    th_check_unchanged(&b, "bias");
    th_free(&w);
    th_free(&b);
    return th_failed == failed_before;
}

void th_case_result_free(th_case_result *r)
{
    free(r->y);
    free(r->residual_out);
    free(r->rstd);
    free(r->y_abs);
    free(r->dx);
    free(r->dx_abs);
    free(r->dweight);
    free(r->dweight_abs);
    free(r->dweight_bits);
    free(r->dbias_bits);
    memset(r, 0, sizeof *r);
}

/* Both sides are within their tolerance of the reference, so they are within
 * the sum of the two of each other. */
static void compare_arrays(const double *a, const double *b, int64_t n, int64_t per, double rel_a, double rel_b,
                           const double *abs_a, const double *abs_b, const char *what)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double tol = (rel_a + rel_b) * fmax(fabs(a[i]), fabs(b[i])) + abs_a[i / per] + abs_b[i / per] + 0x1p-24;
        if (!(fabs(a[i] - b[i]) <= tol)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%lld]: %.9g vs %.9g (tol %.3g)\n", what, (long long)i, a[i], b[i], tol);
            bad++;
        }
    }
    th_record(bad == 0, __FILE__, __LINE__, "%s: %lld of %lld differ between backends", what, (long long)bad,
              (long long)n);
}

void th_compare_results(const th_case_result *a, const th_case_result *b, const char *what)
{
    char buf[128];
    if (a->y && b->y) {
        snprintf(buf, sizeof buf, "%s y", what);
        compare_arrays(a->y, b->y, a->rows * a->cols, a->cols, a->y_rel, b->y_rel, a->y_abs, b->y_abs, buf);
    }
    if (a->dx && b->dx) {
        snprintf(buf, sizeof buf, "%s dx", what);
        compare_arrays(a->dx, b->dx, a->rows * a->cols, a->cols, a->dx_rel, b->dx_rel, a->dx_abs, b->dx_abs, buf);
    }
    if (a->dweight && b->dweight) {
        snprintf(buf, sizeof buf, "%s dweight", what);
        compare_arrays(a->dweight, b->dweight, a->cols, 1, a->dweight_rel, b->dweight_rel, a->dweight_abs,
                       b->dweight_abs, buf);
    }
}
