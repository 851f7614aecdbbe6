/*
 * Test harness shared by the C tests: ASSERT-style macros that print both
 * values and count passes/failures (each executable ends with the line
 * "N passed, N failed" and exits non-zero on any failure), a seeded RNG
 * (seed printed; FUSEDNORM_TEST_SEED overrides it), and tensors that live on
 * a backend (host malloc for CPU, cudaMalloc for CUDA) with a host shadow,
 * row-stride padding filled with a sentinel, misaligned base pointers,
 * poisoning (0xFF bytes: NaN in every dtype) and comparison against the fp64
 * reference.
 */
#ifndef FUSEDNORM_TEST_HARNESS_H
#define FUSEDNORM_TEST_HARNESS_H

#include "fusednorm.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- pass/fail counting --------------------------------------------------- */

extern long th_passed, th_failed;
/* Printed with every failure: the case being run (e.g. "cpu rms bf16 rows 37 cols 7"). */
extern char th_context[512];

/* Records one check; prints the failure with its location. Returns ok. */
int th_record(int ok, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Prints "N passed, N failed" and returns the process exit code. */
int th_finish(void);

#define ASSERT_TRUE(cond) th_record(!!(cond), __FILE__, __LINE__, "expected true: %s", #cond)
#define ASSERT_EQ_INT(a, b)                                                                                          \
    do {                                                                                                             \
        long long a_ = (long long)(a), b_ = (long long)(b);                                                          \
        th_record(a_ == b_, __FILE__, __LINE__, "%s == %s: %lld vs %lld", #a, #b, a_, b_);                           \
    } while (0)
#define ASSERT_STATUS(got, want)                                                                                     \
    do {                                                                                                             \
        fusednorm_status g_ = (got), w_ = (want);                                                                    \
        th_record(g_ == w_, __FILE__, __LINE__, "%s: got %d (%s), want %d (%s); last error: %s", #got, (int)g_,      \
                  fusednorm_status_string(g_), (int)w_, fusednorm_status_string(w_), fusednorm_last_error());        \
    } while (0)
#define ASSERT_CONTAINS(haystack, needle)                                                                            \
    do {                                                                                                             \
        const char *h_ = (haystack), *n_ = (needle);                                                                 \
        th_record(h_ && strstr(h_, n_) != NULL, __FILE__, __LINE__, "\"%s\" should contain \"%s\"",                 \
                  h_ ? h_ : "(null)", n_);                                                                           \
    } while (0)

/* ---- RNG -------------------------------------------------------------------- */

/* Seeds from FUSEDNORM_TEST_SEED or the clock, prints the seed. */
void th_init(const char *test_name);
uint64_t th_rand_u64(void);
/* Save/restore the RNG so that two backends can be fed identical inputs. */
uint64_t th_rng_get(void);
void th_rng_set(uint64_t state);
double th_uniform(double lo, double hi);

/* ---- tensors on a backend --------------------------------------------------- */

typedef struct th_tensor {
    fusednorm_backend backend;
    fusednorm_dtype dtype;
    int64_t rows, cols, stride; /* stride: elements between rows actually used */
    int64_t arg_stride;         /* what the args carry (0 when dense and asked so) */
    int64_t offset;             /* elements the base pointer is shifted (misalignment) */
    size_t esize, bytes;        /* bytes: whole allocation */
    unsigned char *shadow;      /* host copy of the whole allocation */
    unsigned char *mem;         /* backend allocation */
} th_tensor;

/* stride 0 => dense (and args carry 0); misalign shifts the base by one element. */
int th_alloc(th_tensor *t, fusednorm_backend be, fusednorm_dtype dt, int64_t rows, int64_t cols, int64_t stride,
             int misalign);
void th_free(th_tensor *t);
/* Fill the logical elements with uniform [lo, hi) (rounded to the dtype) and
 * the padding with the sentinel, then upload. */
void th_fill(th_tensor *t, double lo, double hi);
/* Logical elements 0xFF (NaN), padding sentinel, then upload. */
void th_poison(th_tensor *t);
void th_upload(th_tensor *t);
void th_download(th_tensor *t);
/* Pointer the library sees / the host shadow at the same element. */
void *th_data(const th_tensor *t);
void *th_host(const th_tensor *t);
fusednorm_tensor th_arg(const th_tensor *t);      /* backend pointer */
fusednorm_tensor th_host_arg(const th_tensor *t); /* shadow pointer (for the reference) */
double th_get(const th_tensor *t, int64_t r, int64_t c); /* from the shadow */
/* Download, then count padding bytes that lost the sentinel (reports them). */
int th_check_padding(th_tensor *t, const char *name);
/* Download and compare with the shadow taken before (inputs must be untouched). */
int th_check_unchanged(th_tensor *t, const char *name);
/* Download; every logical element still the 0xFF poison. */
int th_check_poisoned(th_tensor *t, const char *name);

/* Unit roundoff of a dtype: 2^-24, 2^-11, 2^-8. */
double th_unit_roundoff(fusednorm_dtype dt);
/* Smallest positive (subnormal) value of a dtype: an absolute floor. */
double th_tiny(fusednorm_dtype dt);

/* Download t and compare element (r,c) with ref[r*cols+c] within
 * tol(r,c) = rel*|ref| + abs_row[r] (abs_row may be NULL: 0) + tiny(dtype).
 * NaN in the output when ref is finite is a failure. Prints the worst
 * elements; returns the number of failures (and records one check). */
int th_compare(th_tensor *t, const double *ref, double rel, const double *abs_row, const char *what);
/* As th_compare, with one absolute tolerance per element (dweight, dbias: one per column). */
int th_compare_each(th_tensor *t, const double *ref, double rel, const double *abs_each, const char *what);
/* Same for a host float array (rstd/mean after download) of n values. */
int th_compare_f32(const float *got, const double *ref, int64_t n, double rel, const double *abs_each,
                   const char *what);

/* CUDA: available at all (build has it and a device is usable). */
int th_backend_available(fusednorm_backend be);
const char *th_backend_name(fusednorm_backend be);
/* Backend memory for plain float vectors (rstd/mean) and workspaces. */
void *th_backend_malloc(fusednorm_backend be, size_t bytes);
void th_backend_free(fusednorm_backend be, void *p);
void th_backend_memcpy_to(fusednorm_backend be, void *dst, const void *src, size_t bytes);
void th_backend_memcpy_from(fusednorm_backend be, void *dst, const void *src, size_t bytes);
void th_backend_memset(fusednorm_backend be, void *dst, int byte, size_t bytes);
void th_backend_sync(fusednorm_backend be);

#endif
