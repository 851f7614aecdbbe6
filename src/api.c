/*
 * Public entry points: copy and resolve the caller's args, validate them in
 * one backend-neutral place, then hand them to the backend they name.
 * Also the status strings (generated from one list), the thread's last error
 * message, and the version.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

/* The library is built with hidden visibility (internal fn_* symbols stay
 * private); the public API is exported explicitly. */
#if defined(__GNUC__)
#define FN_EXPORT __attribute__((visibility("default")))
#else
#define FN_EXPORT
#endif

/* One list: code, string. Adding a status means adding one line here. */
#define FN_STATUS_LIST(X)                                                        \
    X(FUSEDNORM_OK, "ok")                                                        \
    X(FUSEDNORM_ERROR_INVALID_ARGUMENT, "invalid argument")                      \
    X(FUSEDNORM_ERROR_UNSUPPORTED, "unsupported by this build or device")        \
    X(FUSEDNORM_ERROR_WORKSPACE, "workspace missing or too small")               \
    X(FUSEDNORM_ERROR_DEVICE, "CUDA runtime error")                              \
    X(FUSEDNORM_ERROR_OUT_OF_MEMORY, "out of memory")

FN_EXPORT const char *fusednorm_status_string(fusednorm_status status)
{
    switch (status) {
#define FN_STATUS_CASE(code, text) case code: return text;
        FN_STATUS_LIST(FN_STATUS_CASE)
#undef FN_STATUS_CASE
    }
    return "unknown status";
}

static _Thread_local char fn_last_error[512];

FN_EXPORT const char *fusednorm_last_error(void) { return fn_last_error; }

fusednorm_status fn_error(fusednorm_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fn_last_error, sizeof fn_last_error, fmt, ap);
    va_end(ap);
    return status;
}

FN_EXPORT int fusednorm_version(void)
{
    return FUSEDNORM_VERSION_MAJOR * 10000 + FUSEDNORM_VERSION_MINOR * 100 + FUSEDNORM_VERSION_PATCH;
}

FN_EXPORT int fusednorm_cuda_available(void) { return fn_cuda_available(); }

FN_EXPORT fusednorm_status fusednorm_fwd(const fusednorm_fwd_args *args)
{
    if (!args) return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "fusednorm_fwd: args is NULL");
    fusednorm_fwd_args a = fn_resolve_fwd(args);
    fusednorm_status s = fn_validate_fwd(&a, "fusednorm_fwd");
    if (s != FUSEDNORM_OK) return s;
    if (a.backend == FUSEDNORM_CUDA) return fn_cuda_fwd(&a); /* rows == 0: still says whether CUDA is there */
    return a.rows == 0 ? FUSEDNORM_OK : fn_cpu_fwd(&a);
}

FN_EXPORT fusednorm_status fusednorm_bwd_workspace_size(const fusednorm_bwd_args *args, size_t *bytes)
{
    if (!args) return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "fusednorm_bwd_workspace_size: args is NULL");
    if (!bytes) return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "fusednorm_bwd_workspace_size: bytes is NULL");
    fusednorm_bwd_args a = fn_resolve_bwd(args);
    fusednorm_status s = fn_validate_bwd(&a, "fusednorm_bwd_workspace_size");
    if (s != FUSEDNORM_OK) return s;
    return a.backend == FUSEDNORM_CUDA ? fn_cuda_bwd_workspace_size(&a, bytes)
                                       : fn_cpu_bwd_workspace_size(&a, bytes);
}

FN_EXPORT fusednorm_status fusednorm_bwd(const fusednorm_bwd_args *args)
{
    if (!args) return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "fusednorm_bwd: args is NULL");
    fusednorm_bwd_args a = fn_resolve_bwd(args);
    fusednorm_status s = fn_validate_bwd(&a, "fusednorm_bwd");
    if (s != FUSEDNORM_OK) return s;
    size_t need = 0;
    s = a.backend == FUSEDNORM_CUDA ? fn_cuda_bwd_workspace_size(&a, &need)
                                    : fn_cpu_bwd_workspace_size(&a, &need);
    if (s != FUSEDNORM_OK) return s;
    if (need > 0 && (a.workspace == NULL || a.workspace_bytes < need))
        return fn_error(FUSEDNORM_ERROR_WORKSPACE,
                        "fusednorm_bwd: workspace (%p, %zu bytes) is smaller than the %zu bytes required",
                        a.workspace, a.workspace_bytes, need);
    return a.backend == FUSEDNORM_CUDA ? fn_cuda_bwd(&a) : fn_cpu_bwd(&a);
}
