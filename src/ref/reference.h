/*
 * The fp64 reference: the specification every backend is tested against.
 * Used only by the tests and `fusednorm check`; never linked into the library.
 *
 * Inputs are read exactly as the library reads them (dtype, row strides,
 * absent optional tensors); all arithmetic is in double. Outputs are dense
 * double arrays ([rows*cols] for per-element outputs, [rows] for rstd/mean,
 * [cols] for dweight/dbias); pass NULL for any output you do not want.
 * Args are the public structs (row_stride 0 means cols). The reference does
 * not validate: pass valid args.
 */
#ifndef FUSEDNORM_REFERENCE_H
#define FUSEDNORM_REFERENCE_H

#include "fusednorm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = normalized output before rounding to y's dtype; residual_out = h. */
void fn_ref_fwd(const fusednorm_fwd_args *a, double *y, double *residual_out, double *rstd, double *mean);

/* Uses a->rstd / a->mean when given (as the library does), else recomputes
 * them in double from x and eps. dweight/dbias include the initial contents
 * of a->dweight / a->dbias when a->flags has FUSEDNORM_ACCUMULATE.
 * dresidual equals dx (before rounding) and is provided for symmetry. */
void fn_ref_bwd(const fusednorm_bwd_args *a, double *dx, double *dweight, double *dbias);

#ifdef __cplusplus
}
#endif

#endif
