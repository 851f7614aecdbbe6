/*
 * One test case of the ops: a norm, shape, feature set and dtype mix, run
 * forward and backward on one backend with fresh random inputs and poisoned
 * outputs, then checked against the fp64 reference with tolerances derived
 * from the output dtype and the computation (see opcase.c for the formulas),
 * with row-stride padding and untouched inputs verified.
 */
#ifndef FUSEDNORM_TEST_OPCASE_H
#define FUSEDNORM_TEST_OPCASE_H

#include "harness.h"

typedef struct th_case {
    fusednorm_norm norm;
    int64_t rows, cols;
    float eps, weight_offset;
    /* forward dtypes */
    fusednorm_dtype x, residual, residual_out, y, weight, bias;
    /* backward dtypes (its x is residual_out's dtype when a residual is fused) */
    fusednorm_dtype dy, dx, dresidual_out, dresidual, dweight, dbias;
    int residual_on, residual_out_on, weight_on, bias_on;
    int store_rstd, store_mean;     /* forward writes rstd / mean (mean: LayerNorm) */
    int bwd_stats_given;            /* backward gets rstd (and mean) instead of recomputing */
    int dresidual_out_on, dresidual_on, dweight_on, dbias_on;
    unsigned flags;
    int64_t pad;  /* > 0: 2-D tensors get row strides cols + k*pad (k differs per tensor) */
    int misalign; /* 1: every base pointer shifted by one element; 2: the activations
                   * only (x, residual, y, dy, dx, ...), weights and statistics aligned */
    int alias_y_x, alias_resout_res, alias_resout_x, alias_dx_dy, alias_dres_dresout;
    int skip_fwd, skip_bwd;
    int nonfinite; /* NaN/Inf planted in x (fwd, bwd) and dy: they must propagate as IEEE does */
    int outliers;  /* x = +2^17 in column 0, -2^16 in column 8 of every row (fp32, bf16 only): a
                    * few large activations (as LLMs have in a few channels) must not cost the
                    * statistics their accuracy */
    float x_offset; /* added to the odd rows of x (uniform in [-2, 2]): rows whose mean is far
                     * from zero against their spread, between rows about zero */
} th_case;

/* Outputs kept for cross-backend comparison (dense doubles, with the
 * per-row/per-column absolute tolerances used against the reference). */
typedef struct th_case_result {
    int64_t rows, cols;
    double *y, *y_abs, *dx, *dx_abs, *dweight, *dweight_abs;
    double *residual_out, *rstd;  /* the forward's, where the case asks for them (else NULL) */
    double y_rel, dx_rel, dweight_rel;
    unsigned char *dweight_bits, *dbias_bits; /* raw bytes, for bitwise determinism */
    size_t dweight_bytes, dbias_bytes;
} th_case_result;

/* A case with every feature off, all dtypes dt. */
th_case th_case_default(fusednorm_norm norm, int64_t rows, int64_t cols, fusednorm_dtype dt);
/* Short description for failure messages. */
void th_case_describe(const th_case *c, fusednorm_backend be, char *buf, size_t n);
/* Runs and checks the case; res may be NULL. Returns 1 when every check passed. */
int th_run_case(const th_case *c, fusednorm_backend be, th_case_result *res);
void th_case_result_free(th_case_result *r);
/* Compares two results of the same case on different backends. */
void th_compare_results(const th_case_result *a, const th_case_result *b, const char *what);

#endif
