/*
 * The public header compiles as pedantic C99 (this file is built with
 * -std=c99 -pedantic -Werror) and its contract values hold.
 */
#include "fusednorm.h"

#include <stdio.h>
#include <string.h>

int main(void)
{
    int failed = 0;
    fusednorm_fwd_args fwd;
    fusednorm_bwd_args bwd;
    memset(&fwd, 0, sizeof fwd);
    memset(&bwd, 0, sizeof bwd);
    /* Zero-initialized fields are the defaults. */
    failed += fwd.norm != FUSEDNORM_RMSNORM || fwd.backend != FUSEDNORM_CPU || fwd.x.dtype != FUSEDNORM_F32;
    failed += bwd.flags != 0;
    failed += fusednorm_version() != FUSEDNORM_VERSION_MAJOR * 10000 + FUSEDNORM_VERSION_MINOR * 100 +
                                         FUSEDNORM_VERSION_PATCH;
    failed += fusednorm_fwd(NULL) != FUSEDNORM_ERROR_INVALID_ARGUMENT;
    failed += (FUSEDNORM_ACCUMULATE | FUSEDNORM_ATOMIC_DWEIGHT) != 3u;
    printf("%d passed, %d failed\n", 5 - failed, failed);
    return failed ? 1 : 0;
}
