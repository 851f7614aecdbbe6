/*
 * fusednorm: fused RMSNorm / LayerNorm, forward and backward, on CPU and CUDA.
 *
 * The stable public contract. Valid C99 and C++; no CUDA types. Every call
 * returns a status; a failed call writes nothing to any output and leaves a
 * message for this thread in fusednorm_last_error().
 *
 * Math (all arithmetic in fp32; inputs converted on load, outputs rounded to
 * nearest even on store), per row of N = cols elements:
 *   h     = x + residual                (x when residual is absent)
 *   mean  = sum(h)/N (LayerNorm) or 0 (RMSNorm)
 *   rstd  = 1/sqrt(sum((h-mean)^2)/N + eps)
 *   y     = (h-mean)*rstd * (weight + weight_offset) + bias
 * Backward (x_hat = (h-mean)*rstd, g = dy*(weight + weight_offset)):
 *   RMSNorm   dh = rstd*(g - x_hat*mean(x_hat*g))
 *   LayerNorm dh = rstd*(g - mean(g) - x_hat*mean(x_hat*g))
 *   dh += dresidual_out; dx = dh; dresidual = dh (residual's dtype)
 *   dweight = sum_rows dy*x_hat, dbias = sum_rows dy   ('=' by default,
 *   '+=' with FUSEDNORM_ACCUMULATE; deterministic unless ATOMIC_DWEIGHT).
 */
#ifndef FUSEDNORM_H
#define FUSEDNORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FUSEDNORM_VERSION_MAJOR 0
#define FUSEDNORM_VERSION_MINOR 1
#define FUSEDNORM_VERSION_PATCH 0

typedef enum fusednorm_status {
    FUSEDNORM_OK = 0,
    FUSEDNORM_ERROR_INVALID_ARGUMENT = 1, /* bad shape, NULL, stride, eps, flags, enum ... */
    FUSEDNORM_ERROR_UNSUPPORTED = 2,      /* valid, but this build or device cannot do it  */
    FUSEDNORM_ERROR_WORKSPACE = 3,        /* workspace missing or smaller than required   */
    FUSEDNORM_ERROR_DEVICE = 4,           /* CUDA runtime error                           */
    FUSEDNORM_ERROR_OUT_OF_MEMORY = 5
} fusednorm_status;

typedef enum fusednorm_dtype { FUSEDNORM_F32 = 0, FUSEDNORM_F16 = 1, FUSEDNORM_BF16 = 2 } fusednorm_dtype;
typedef enum fusednorm_norm { FUSEDNORM_RMSNORM = 0, FUSEDNORM_LAYERNORM = 1 } fusednorm_norm;
typedef enum fusednorm_backend { FUSEDNORM_CPU = 0, FUSEDNORM_CUDA = 1 } fusednorm_backend;

enum { FUSEDNORM_ACCUMULATE = 1u << 0,      /* dweight/dbias += instead of =            */
       FUSEDNORM_ATOMIC_DWEIGHT = 1u << 1 }; /* allow atomics: faster, not bitwise stable */

typedef struct fusednorm_tensor {
    void *data;            /* NULL: absent (optional tensors)                              */
    fusednorm_dtype dtype;
    int64_t row_stride;    /* elements between rows; 0 means cols; ignored for vectors     */
} fusednorm_tensor;

typedef struct fusednorm_fwd_args {
    fusednorm_norm norm;
    int64_t rows, cols;
    float eps;
    float weight_offset;
    fusednorm_tensor x, residual, weight, bias;   /* inputs; x [rows,cols], weight/bias [cols] */
    fusednorm_tensor y, residual_out;             /* outputs [rows,cols]                       */
    float *rstd, *mean;                           /* optional outputs [rows] (mean: LayerNorm) */
    fusednorm_backend backend;
    int device;                                   /* CUDA device ordinal                       */
    void *stream;                                 /* cudaStream_t; NULL: default stream        */
} fusednorm_fwd_args;

typedef struct fusednorm_bwd_args {
    fusednorm_norm norm;
    int64_t rows, cols;
    float eps;                                    /* used only when rstd is not given          */
    float weight_offset;
    unsigned flags;
    fusednorm_tensor dy, x, weight, dresidual_out;/* inputs; x = what was normalized           */
    const float *rstd, *mean;                     /* from the forward, or NULL to recompute    */
    fusednorm_tensor dx, dresidual, dweight, dbias; /* outputs                                 */
    void *workspace;
    size_t workspace_bytes;
    fusednorm_backend backend;
    int device;
    void *stream;
} fusednorm_bwd_args;

fusednorm_status fusednorm_fwd(const fusednorm_fwd_args *args);
fusednorm_status fusednorm_bwd_workspace_size(const fusednorm_bwd_args *args, size_t *bytes);
fusednorm_status fusednorm_bwd(const fusednorm_bwd_args *args);
const char *fusednorm_status_string(fusednorm_status status);
const char *fusednorm_last_error(void);  /* this thread's message for its last failed call */
int fusednorm_version(void);             /* MAJOR*10000 + MINOR*100 + PATCH                 */
int fusednorm_cuda_available(void);      /* 1 when built with CUDA and a device is usable   */

#ifdef __cplusplus
}
#endif

#endif /* FUSEDNORM_H */
