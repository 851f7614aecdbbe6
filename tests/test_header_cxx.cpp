// The public header compiles as C++ (extern "C" linkage: these calls link
// against the C library) and its enums and structs are usable from C++.
#include "fusednorm.h"

#include <cstdio>
#include <cstring>

int main()
{
    int failed = 0;
    fusednorm_fwd_args fwd = fusednorm_fwd_args();
    fusednorm_bwd_args bwd = fusednorm_bwd_args();
    fwd.norm = FUSEDNORM_LAYERNORM;
    bwd.flags = FUSEDNORM_ACCUMULATE | FUSEDNORM_ATOMIC_DWEIGHT;
    failed += fwd.backend != FUSEDNORM_CPU;
    failed += fusednorm_version() != 100;
    failed += fusednorm_fwd(nullptr) != FUSEDNORM_ERROR_INVALID_ARGUMENT;
    failed += std::strlen(fusednorm_status_string(FUSEDNORM_OK)) == 0;
    failed += bwd.flags != 3u;
    std::printf("%d passed, %d failed\n", 5 - failed, failed);
    return failed ? 1 : 0;
}
