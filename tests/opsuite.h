/*
 * The op suite shared by test_cpu_ops and test_cuda_ops: feature sets, dtype
 * mixes and shapes, each a th_case run forward and backward on the backend.
 */
#ifndef FUSEDNORM_TEST_OPSUITE_H
#define FUSEDNORM_TEST_OPSUITE_H

#include "opcase.h"

void th_suite_features(fusednorm_backend be); /* norms x feature sets x single dtypes */
void th_suite_mixes(fusednorm_backend be);    /* dtype mixes (CUDA: design's required list) */
void th_suite_shapes(fusednorm_backend be);   /* awkward shapes, rows == 0, big padding */
void th_suite_nonfinite(fusednorm_backend be); /* NaN/Inf inputs propagate, other rows unaffected */
void th_suite_training(fusednorm_backend be);  /* the usual training calls at row lengths that fill a tile */
void th_suite_shifted(fusednorm_backend be);  /* rows off a 16-byte boundary, weights aligned */
void th_suite_outliers(fusednorm_backend be); /* a few large values per row: statistics stay accurate */
void th_suite_all(fusednorm_backend be);

#endif
