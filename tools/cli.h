/*
 * Shared pieces of the `fusednorm` command-line tool: option parsing helpers
 * (errors exit with status 2 and a one-line message naming the option and the
 * value), random host data, the backend-neutral device layer (memory, copies,
 * timing, copy bandwidth) and the subcommands.
 *
 * Exit codes of the tool: 0 success, 1 a check failed or a library/CUDA call
 * failed at run time, 2 a usage error (bad option or value, backend absent).
 */
#ifndef FUSEDNORM_CLI_H
#define FUSEDNORM_CLI_H

#include "fusednorm.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAILURE 1
#define CLI_EXIT_USAGE 2

#define CLI_MAX_LIST 64

/* ---- option parsing (cli_common.c) -------------------------------------- */

/* Prints "fusednorm <cmd>: <message>" and a hint to stderr, exits 2. */
void cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3), noreturn))
#endif
    ;

/* Walks argv: returns 1 and sets *name (and *value when the option takes one,
 * from "--opt value" or "--opt=value") for each option, 0 at the end. */
typedef struct cli_args {
    const char *cmd;
    int argc, i;
    char **argv;
    char inline_name[64];
    const char *inline_value; /* the part after '=' of "--opt=value", else NULL */
} cli_args;
void cli_args_init(cli_args *it, const char *cmd, int argc, char **argv);
int cli_next_option(cli_args *it, const char **name);
const char *cli_option_value(cli_args *it, const char *name);
void cli_option_flag(cli_args *it, const char *name); /* rejects "--flag=value" */

int64_t cli_parse_positive(const char *cmd, const char *opt, const char *value, int64_t max);
/* An integer 0..max (a count that may be zero). */
int64_t cli_parse_count(const char *cmd, const char *opt, const char *value, int64_t max);
/* Comma-separated positive integers; returns the count. */
int cli_parse_int_list(const char *cmd, const char *opt, const char *value, int64_t *out, int64_t max);
/* Comma-separated names out of `choices` (NULL-terminated); writes indices. */
int cli_parse_choice_list(const char *cmd, const char *opt, const char *value, const char *const *choices,
                          int *out);
fusednorm_backend cli_parse_backend(const char *cmd, const char *value);

/* ---- host data ---------------------------------------------------------- */

/* Fills n elements of dtype t with uniform values in [lo, hi), rounded to
 * the dtype; the stream is a pure function of seed (splitmix64 per block),
 * generated in parallel. */
void cli_fill_random(void *dst, fusednorm_dtype t, int64_t n, double lo, double hi, uint64_t seed);
double cli_load(const void *p, fusednorm_dtype t, int64_t i);
size_t cli_dtype_size(fusednorm_dtype t);
const char *cli_dtype_name(fusednorm_dtype t);
double cli_median(double *v, int n); /* sorts v */

/* ---- device layer (device.c; CUDA parts in device_cuda.c) --------------- */

/* Returns 1 when `b` can run here; otherwise 0 and a reason in why. */
int dev_backend_usable(fusednorm_backend b, char *why, size_t why_len);
fusednorm_backend dev_best_backend(void);
const char *dev_backend_name(fusednorm_backend b);

/* Each returns 0 on success; on failure prints the reason to stderr. */
int dev_alloc(fusednorm_backend b, void **p, size_t bytes);
void dev_free(fusednorm_backend b, void *p);
int dev_upload(fusednorm_backend b, void *dst, const void *src, size_t bytes);
int dev_download(fusednorm_backend b, void *dst, const void *src, size_t bytes);
int dev_fill_bytes(fusednorm_backend b, void *p, int byte, size_t bytes);
int dev_synchronize(fusednorm_backend b);

/* One launch of the thing being timed; returns 0 on success. */
typedef int (*dev_launch_fn)(void *ctx);
/* Runs `warmup` untimed launches then `iters` timed ones and stores the
 * median seconds. CUDA: events around each launch, L2 flushed before each
 * (outside the timed region). CPU: omp wall clock around each launch. */
int dev_time_median(fusednorm_backend b, dev_launch_fn launch, void *ctx, int warmup, int iters,
                    double *median_seconds);
/* Copy bandwidth (bytes read + written per second, median). */
int dev_copy_bandwidth(fusednorm_backend b, double *bytes_per_second, size_t *copy_bytes);
/* One copy of bytes from src to dst on the backend (CUDA: device to device on
 * the stream dev_time_median times; CPU: the threaded memcpy), for timing. */
int dev_copy(fusednorm_backend b, void *dst, const void *src, size_t bytes);

void dev_print_info(FILE *out);
/* One line naming the hardware: "NVIDIA H200, 132 SMs" / "CPU, 2 OpenMP threads". */
void dev_describe(fusednorm_backend b, char *buf, size_t len);

#if FUSEDNORM_WITH_CUDA
/* device_cuda.c: the only code that calls the CUDA runtime. */
int cuda_usable(char *why, size_t why_len);
void cuda_print_devices(FILE *out);
int cuda_alloc(void **p, size_t bytes);
void cuda_free(void *p);
int cuda_upload(void *dst, const void *src, size_t bytes);
int cuda_download(void *dst, const void *src, size_t bytes);
int cuda_fill_bytes(void *p, int byte, size_t bytes);
int cuda_synchronize(void);
int cuda_time_median(dev_launch_fn launch, void *ctx, int warmup, int iters, double *median_seconds);
int cuda_copy_bandwidth(double *bytes_per_second, size_t *copy_bytes);
int cuda_copy(void *dst, const void *src, size_t bytes);
void cuda_describe(char *buf, size_t len);
#endif

/* ---- library call checking ---------------------------------------------- */

/* Prints "fusednorm: <what> failed: <status>: <last_error>" when s != OK. */
int cli_check_status(fusednorm_status s, const char *what);

/* ---- subcommands -------------------------------------------------------- */

typedef struct check_options {
    fusednorm_backend backend;
    int64_t rows;        /* 0: the backend's default */
    int64_t cols[CLI_MAX_LIST];
    int ncols;           /* 0: the backend's default */
    int quiet;           /* print only failures and the summary */
} check_options;

typedef struct bench_options {
    fusednorm_backend backend;
    int norms[2], nnorms;         /* fusednorm_norm values */
    int dtypes[5], ndtypes;       /* fusednorm_dtype values, then 3 f16/w32, 4 bf16/w32 (bench) */
    int64_t rows;                 /* 0: the backend's default (per cols) */
    int64_t cols[CLI_MAX_LIST];
    int ncols;
    int residual;
    int no_weight;                /* --no-weight: neither weight nor dweight */
    int run_fwd, run_bwd, atomic;
    int same_copy;                /* also time a copy of each case's bytes (--same-size-copy) */
    int iters;                    /* 0: the backend's default */
    int warmup;                   /* -1: the backend's default */
    const char *csv_path;
} bench_options;

void check_default_options(check_options *o);
int check_parse(int argc, char **argv, check_options *o); /* returns 1 if help was printed */
int check_run(const check_options *o);                     /* exit code */
void check_help(FILE *out);

void bench_default_options(bench_options *o);
int bench_parse(int argc, char **argv, bench_options *o);
int bench_run(const bench_options *o);
void bench_help(FILE *out);

#endif
