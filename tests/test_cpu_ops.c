/*
 * The CPU backend against the fp64 reference: every norm, feature set and a
 * sample of dtype mixes, awkward shapes, padded strides, misaligned pointers,
 * in-place aliasing and rows == 0.
 */
#include "opsuite.h"

int main(void)
{
    th_init("test_cpu_ops");
    th_suite_all(FUSEDNORM_CPU);
    return th_finish();
}
