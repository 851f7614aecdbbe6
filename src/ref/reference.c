/*
 * The fp64 reference of design.md: RMSNorm / LayerNorm forward and backward,
 * with the residual add, bias, weight_offset and an absent weight, all in
 * double. Inputs are read through fn_load with their own dtype and row stride
 * (0 meaning cols), exactly the bits the library reads; nothing is rounded on
 * the way out, so a test compares the library's rounded result with the
 * exact one and derives its tolerance from the output dtype.
 *
 * Outputs (each optional, dense, row-major):
 *   fwd: y[rows*cols] (unrounded), residual_out[rows*cols] = h, rstd[rows],
 *        mean[rows] (0 for RMSNorm)
 *   bwd: dx[rows*cols] (dh including dresidual_out; dresidual is the same
 *        value), dweight[cols] and dbias[cols] ('=' or '+=' the initial
 *        contents of a->dweight / a->dbias with FUSEDNORM_ACCUMULATE).
 */
#include "ref/reference.h"

#include "internal.h"

#include <math.h>
#include <stdlib.h>

static int64_t stride_of(const fusednorm_tensor *t, int64_t cols) { return t->row_stride ? t->row_stride : cols; }

/* The weight as the math uses it: w + weight_offset, or 1 when absent. */
static double weight_at(const fusednorm_tensor *w, float weight_offset, int64_t j)
{
    if (!w->data) return 1.0;
    return (double)fn_load(w->data, w->dtype, j) + (double)weight_offset;
}

/* Mean and rstd of one row h[0..n) in double (two passes: no cancellation). */
static void row_stats(fusednorm_norm norm, const double *h, int64_t n, double eps, double *mean_out,
                      double *rstd_out)
{
    double mean = 0.0;
    if (norm == FUSEDNORM_LAYERNORM) {
        for (int64_t j = 0; j < n; j++) mean += h[j];
        mean /= (double)n;
    }
    double ss = 0.0;
    for (int64_t j = 0; j < n; j++) ss += (h[j] - mean) * (h[j] - mean);
    *mean_out = mean;
    *rstd_out = 1.0 / sqrt(ss / (double)n + eps);
}

void fn_ref_fwd(const fusednorm_fwd_args *a, double *y, double *residual_out, double *rstd, double *mean)
{
    const int64_t R = a->rows, C = a->cols;
    const int64_t xs = stride_of(&a->x, C), rs = stride_of(&a->residual, C);
    double *h = malloc(sizeof(double) * (size_t)C);
    if (!h) return;
    for (int64_t r = 0; r < R; r++) {
        for (int64_t j = 0; j < C; j++) {
            double v = fn_load(a->x.data, a->x.dtype, r * xs + j);
            if (a->residual.data) v += fn_load(a->residual.data, a->residual.dtype, r * rs + j);
            h[j] = v;
        }
        double mu, rs_row;
        row_stats(a->norm, h, C, (double)a->eps, &mu, &rs_row);
        if (rstd) rstd[r] = rs_row;
        if (mean) mean[r] = mu;
        for (int64_t j = 0; j < C; j++) {
            if (residual_out) residual_out[r * C + j] = h[j];
            if (y) {
                double v = (h[j] - mu) * rs_row * weight_at(&a->weight, a->weight_offset, j);
                if (a->bias.data) v += fn_load(a->bias.data, a->bias.dtype, j);
                y[r * C + j] = v;
            }
        }
    }
    free(h);
}

void fn_ref_bwd(const fusednorm_bwd_args *a, double *dx, double *dweight, double *dbias)
{
    const int64_t R = a->rows, C = a->cols;
    const int64_t xs = stride_of(&a->x, C), dys = stride_of(&a->dy, C), dros = stride_of(&a->dresidual_out, C);
    const int accumulate = (a->flags & FUSEDNORM_ACCUMULATE) != 0;
    double *h = malloc(sizeof(double) * (size_t)C);
    double *dw = calloc((size_t)C, sizeof(double));
    double *db = calloc((size_t)C, sizeof(double));
    if (!h || !dw || !db) goto done;
    for (int64_t r = 0; r < R; r++) {
        for (int64_t j = 0; j < C; j++) h[j] = fn_load(a->x.data, a->x.dtype, r * xs + j);
        double mu, rs_row;
        if (a->rstd) {
            /* The library uses the forward's fp32 statistics as given. */
            rs_row = a->rstd[r];
            mu = (a->norm == FUSEDNORM_LAYERNORM && a->mean) ? a->mean[r] : 0.0;
        } else {
            row_stats(a->norm, h, C, (double)a->eps, &mu, &rs_row);
        }
        double mean_g = 0.0, mean_xg = 0.0;
        for (int64_t j = 0; j < C; j++) {
            double dy = fn_load(a->dy.data, a->dy.dtype, r * dys + j);
            double g = dy * weight_at(&a->weight, a->weight_offset, j);
            double xhat = (h[j] - mu) * rs_row;
            mean_g += g;
            mean_xg += xhat * g;
            dw[j] += dy * xhat;
            db[j] += dy;
        }
        mean_g /= (double)C;
        mean_xg /= (double)C;
        if (a->norm == FUSEDNORM_RMSNORM) mean_g = 0.0;
        if (!dx) continue;
        for (int64_t j = 0; j < C; j++) {
            double dy = fn_load(a->dy.data, a->dy.dtype, r * dys + j);
            double g = dy * weight_at(&a->weight, a->weight_offset, j);
            double xhat = (h[j] - mu) * rs_row;
            double dh = rs_row * (g - mean_g - xhat * mean_xg);
            if (a->dresidual_out.data) dh += fn_load(a->dresidual_out.data, a->dresidual_out.dtype, r * dros + j);
            dx[r * C + j] = dh;
        }
    }
    for (int64_t j = 0; j < C; j++) {
        if (dweight) {
            double init = (accumulate && a->dweight.data) ? fn_load(a->dweight.data, a->dweight.dtype, j) : 0.0;
            dweight[j] = init + dw[j];
        }
        if (dbias) {
            double init = (accumulate && a->dbias.data) ? fn_load(a->dbias.data, a->dbias.dtype, j) : 0.0;
            dbias[j] = init + db[j];
        }
    }
done:
    free(h);
    free(dw);
    free(db);
}
