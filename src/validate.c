/*
 * Backend-neutral argument checks. Every invalid case of the design returns
 * FUSEDNORM_ERROR_INVALID_ARGUMENT with a message naming the argument and its
 * value; nothing has been launched or written when these run.
 */
#include "internal.h"

#include <math.h>

const char *fn_dtype_name(fusednorm_dtype t)
{
    switch (t) {
    case FUSEDNORM_F32: return "f32";
    case FUSEDNORM_F16: return "f16";
    case FUSEDNORM_BF16: return "bf16";
    }
    return "?";
}

const char *fn_norm_name(fusednorm_norm n)
{
    return n == FUSEDNORM_RMSNORM ? "rmsnorm" : n == FUSEDNORM_LAYERNORM ? "layernorm" : "?";
}

size_t fn_dtype_size(fusednorm_dtype t)
{
    switch (t) {
    case FUSEDNORM_F32: return 4;
    case FUSEDNORM_F16:
    case FUSEDNORM_BF16: return 2;
    }
    return 0;
}

static void resolve(fusednorm_tensor *t, int64_t cols)
{
    if (t->row_stride == 0) t->row_stride = cols;
}

fusednorm_fwd_args fn_resolve_fwd(const fusednorm_fwd_args *in)
{
    fusednorm_fwd_args a = *in;
    resolve(&a.x, a.cols);
    resolve(&a.residual, a.cols);
    resolve(&a.y, a.cols);
    resolve(&a.residual_out, a.cols);
    return a;
}

fusednorm_bwd_args fn_resolve_bwd(const fusednorm_bwd_args *in)
{
    fusednorm_bwd_args a = *in;
    resolve(&a.dy, a.cols);
    resolve(&a.x, a.cols);
    resolve(&a.dresidual_out, a.cols);
    resolve(&a.dx, a.cols);
    resolve(&a.dresidual, a.cols);
    return a;
}

#define INVALID(...) fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, __VA_ARGS__)

static fusednorm_status check_common(const char *fn, fusednorm_norm norm, int64_t rows, int64_t cols,
                                     float eps, float weight_offset, fusednorm_backend backend)
{
    if ((unsigned)norm > FUSEDNORM_LAYERNORM) return INVALID("%s: norm (%d) is not a fusednorm_norm", fn, (int)norm);
    if ((unsigned)backend > FUSEDNORM_CUDA)
        return INVALID("%s: backend (%d) is not a fusednorm_backend", fn, (int)backend);
    if (rows < 0) return INVALID("%s: rows (%lld) is negative", fn, (long long)rows);
    if (cols <= 0) return INVALID("%s: cols (%lld) must be positive", fn, (long long)cols);
    if (rows > 0 && cols > INT64_MAX / rows)
        return INVALID("%s: rows*cols (%lld*%lld) overflows int64", fn, (long long)rows, (long long)cols);
    if (!isfinite(eps) || eps < 0.0f) return INVALID("%s: eps (%g) must be finite and >= 0", fn, (double)eps);
    if (!isfinite(weight_offset))
        return INVALID("%s: weight_offset (%g) must be finite", fn, (double)weight_offset);
    return FUSEDNORM_OK;
}

/* A present tensor: dtype in range; for 2-D ones, a stride that fits. */
static fusednorm_status check_tensor(const char *fn, const char *name, const fusednorm_tensor *t, int two_d,
                                     int64_t rows, int64_t cols, int required)
{
    if (t->data == NULL) return required ? INVALID("%s: %s.data is NULL", fn, name) : FUSEDNORM_OK;
    if ((unsigned)t->dtype > FUSEDNORM_BF16)
        return INVALID("%s: %s.dtype (%d) is not a fusednorm_dtype", fn, name, (int)t->dtype);
    if (!two_d) return FUSEDNORM_OK;
    if (t->row_stride < 0) return INVALID("%s: %s.row_stride (%lld) is negative", fn, name, (long long)t->row_stride);
    if (t->row_stride < cols)
        return INVALID("%s: %s.row_stride (%lld) is less than cols (%lld)", fn, name, (long long)t->row_stride,
                       (long long)cols);
    if (rows > 1 && t->row_stride > (INT64_MAX - cols) / (rows - 1))
        return INVALID("%s: %s.row_stride (%lld) times rows (%lld) overflows int64", fn, name,
                       (long long)t->row_stride, (long long)rows);
    return FUSEDNORM_OK;
}

/* Two tensors on the same address must be the same tensor (same dtype and
 * stride): exact aliasing is supported, partial aliasing is not. */
static fusednorm_status check_alias(const char *fn, const char *an, const fusednorm_tensor *a, const char *bn,
                                    const fusednorm_tensor *b)
{
    if (a->data == NULL || a->data != b->data) return FUSEDNORM_OK;
    if (a->dtype != b->dtype || a->row_stride != b->row_stride)
        return INVALID("%s: %s aliases %s but differs in dtype (%s vs %s) or row_stride (%lld vs %lld)", fn, an, bn,
                       fn_dtype_name(a->dtype), fn_dtype_name(b->dtype), (long long)a->row_stride,
                       (long long)b->row_stride);
    return FUSEDNORM_OK;
}

#define TRY(expr)                                                                                                     \
    do {                                                                                                              \
        fusednorm_status s_ = (expr);                                                                                 \
        if (s_ != FUSEDNORM_OK) return s_;                                                                            \
    } while (0)

fusednorm_status fn_validate_fwd(const fusednorm_fwd_args *a, const char *fn)
{
    TRY(check_common(fn, a->norm, a->rows, a->cols, a->eps, a->weight_offset, a->backend));
    int64_t R = a->rows, C = a->cols;
    TRY(check_tensor(fn, "x", &a->x, 1, R, C, 1));
    TRY(check_tensor(fn, "residual", &a->residual, 1, R, C, 0));
    TRY(check_tensor(fn, "weight", &a->weight, 0, R, C, 0));
    TRY(check_tensor(fn, "bias", &a->bias, 0, R, C, 0));
    TRY(check_tensor(fn, "y", &a->y, 1, R, C, 1));
    TRY(check_tensor(fn, "residual_out", &a->residual_out, 1, R, C, 0));
    if (a->mean && a->norm == FUSEDNORM_RMSNORM) return INVALID("%s: mean is given for rmsnorm (it has no mean)", fn);
    TRY(check_alias(fn, "y", &a->y, "x", &a->x));
    TRY(check_alias(fn, "y", &a->y, "residual", &a->residual));
    TRY(check_alias(fn, "residual_out", &a->residual_out, "x", &a->x));
    TRY(check_alias(fn, "residual_out", &a->residual_out, "residual", &a->residual));
    if (a->y.data && a->y.data == a->residual_out.data)
        return INVALID("%s: y and residual_out are the same buffer", fn);
    return FUSEDNORM_OK;
}

fusednorm_status fn_validate_bwd(const fusednorm_bwd_args *a, const char *fn)
{
    TRY(check_common(fn, a->norm, a->rows, a->cols, a->eps, a->weight_offset, a->backend));
    int64_t R = a->rows, C = a->cols;
    if (a->flags & ~(unsigned)(FUSEDNORM_ACCUMULATE | FUSEDNORM_ATOMIC_DWEIGHT))
        return INVALID("%s: flags (0x%x) has unknown bits", fn, a->flags);
    TRY(check_tensor(fn, "dy", &a->dy, 1, R, C, 1));
    TRY(check_tensor(fn, "x", &a->x, 1, R, C, 1));
    TRY(check_tensor(fn, "weight", &a->weight, 0, R, C, 0));
    TRY(check_tensor(fn, "dresidual_out", &a->dresidual_out, 1, R, C, 0));
    TRY(check_tensor(fn, "dx", &a->dx, 1, R, C, 1));
    TRY(check_tensor(fn, "dresidual", &a->dresidual, 1, R, C, 0));
    TRY(check_tensor(fn, "dweight", &a->dweight, 0, R, C, 0));
    TRY(check_tensor(fn, "dbias", &a->dbias, 0, R, C, 0));
    if (a->mean && a->norm == FUSEDNORM_RMSNORM) return INVALID("%s: mean is given for rmsnorm (it has no mean)", fn);
    if (a->rstd && !a->mean && a->norm == FUSEDNORM_LAYERNORM)
        return INVALID("%s: rstd is given without mean for layernorm", fn);
    if (a->dweight.data && !a->weight.data) return INVALID("%s: dweight is given without weight", fn);
    TRY(check_alias(fn, "dx", &a->dx, "dy", &a->dy));
    TRY(check_alias(fn, "dx", &a->dx, "dresidual_out", &a->dresidual_out));
    TRY(check_alias(fn, "dresidual", &a->dresidual, "dresidual_out", &a->dresidual_out));
    TRY(check_alias(fn, "dresidual", &a->dresidual, "dy", &a->dy));
    if (a->dx.data && a->dx.data == a->dresidual.data) return INVALID("%s: dx and dresidual are the same buffer", fn);
    if (a->dx.data == a->x.data) return INVALID("%s: dx aliases x (x is read after dx is written)", fn);
    if (a->dweight.data && a->dweight.data == a->dbias.data)
        return INVALID("%s: dweight and dbias are the same buffer", fn);
    return FUSEDNORM_OK;
}
