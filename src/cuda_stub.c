/* The CUDA backend of a build made without nvcc: every call says so. */
#include "internal.h"

fusednorm_status fn_cuda_fwd(const fusednorm_fwd_args *a)
{
    (void)a;
    return fn_error(FUSEDNORM_ERROR_UNSUPPORTED, "fusednorm_fwd: this build has no CUDA backend");
}

fusednorm_status fn_cuda_bwd_workspace_size(const fusednorm_bwd_args *a, size_t *bytes)
{
    (void)a;
    (void)bytes;
    return fn_error(FUSEDNORM_ERROR_UNSUPPORTED, "fusednorm_bwd_workspace_size: this build has no CUDA backend");
}

fusednorm_status fn_cuda_bwd(const fusednorm_bwd_args *a)
{
    (void)a;
    return fn_error(FUSEDNORM_ERROR_UNSUPPORTED, "fusednorm_bwd: this build has no CUDA backend");
}

int fn_cuda_available(void) { return 0; }
