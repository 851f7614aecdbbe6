/*
 * Helpers shared by the subcommands: strict option parsing (every bad option
 * or value is one line on stderr naming the option and the value, exit 2),
 * random host data in every dtype, medians, and status checking of library
 * calls (which prints fusednorm_last_error()).
 */
#include "cli.h"

#include "internal.h" /* fn_f32_to_f16 / fn_f32_to_bf16 / fn_load: the library's own conversions */

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

void cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fusednorm%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'fusednorm %s%s--help')\n", cmd ? cmd : "", cmd ? " " : "");
    exit(CLI_EXIT_USAGE);
}

void cli_args_init(cli_args *it, const char *cmd, int argc, char **argv)
{
    memset(it, 0, sizeof *it);
    it->cmd = cmd;
    it->argc = argc;
    it->argv = argv;
}

int cli_next_option(cli_args *it, const char **name)
{
    if (it->inline_value)
        cli_usage_error(it->cmd, "option '%s' does not take a value (got '%s')", it->inline_name, it->inline_value);
    if (it->i >= it->argc) return 0;
    const char *arg = it->argv[it->i++];
    if (arg[0] != '-' || arg[1] == '\0') cli_usage_error(it->cmd, "unexpected argument '%s'", arg);
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    if (eq) {
        size_t len = (size_t)(eq - arg);
        if (len >= sizeof it->inline_name) cli_usage_error(it->cmd, "unknown option '%s'", arg);
        memcpy(it->inline_name, arg, len);
        it->inline_name[len] = '\0';
        it->inline_value = eq + 1;
        *name = it->inline_name;
    } else {
        *name = arg;
    }
    return 1;
}

const char *cli_option_value(cli_args *it, const char *name)
{
    if (it->inline_value) {
        const char *v = it->inline_value;
        it->inline_value = NULL;
        return v;
    }
    if (it->i >= it->argc) cli_usage_error(it->cmd, "option '%s' needs a value", name);
    return it->argv[it->i++];
}

void cli_option_flag(cli_args *it, const char *name)
{
    if (it->inline_value)
        cli_usage_error(it->cmd, "option '%s' does not take a value (got '%s')", name, it->inline_value);
}

static int parse_int64(const char *s, int64_t *out)
{
    if (!s || !*s) return 0;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9') return 0; /* no sign, no spaces, no hex: a plain count */
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return 0;
    *out = (int64_t)v;
    return 1;
}

int64_t cli_parse_positive(const char *cmd, const char *opt, const char *value, int64_t max)
{
    int64_t v = 0;
    if (!parse_int64(value, &v) || v <= 0)
        cli_usage_error(cmd, "%s: '%s' is not a positive integer", opt, value);
    if (v > max) cli_usage_error(cmd, "%s: '%s' is larger than %lld", opt, value, (long long)max);
    return v;
}

int64_t cli_parse_count(const char *cmd, const char *opt, const char *value, int64_t max)
{
    int64_t v = 0;
    if (!parse_int64(value, &v) || v < 0)
        cli_usage_error(cmd, "%s: '%s' is not an integer >= 0", opt, value);
    if (v > max) cli_usage_error(cmd, "%s: '%s' is larger than %lld", opt, value, (long long)max);
    return v;
}

int cli_parse_int_list(const char *cmd, const char *opt, const char *value, int64_t *out, int64_t max)
{
    int n = 0;
    const char *p = value;
    if (!*p) cli_usage_error(cmd, "%s: '' is not a list of positive integers", opt);
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        int64_t v = 0;
        if (len == 0 || len >= sizeof item) cli_usage_error(cmd, "%s: '%s' is not a list of positive integers", opt, value);
        memcpy(item, p, len);
        item[len] = '\0';
        if ((!parse_int64(item, &v) || v <= 0) && !strcmp(item, value))
            cli_usage_error(cmd, "%s: '%s' is not a positive integer", opt, value);
        if (!parse_int64(item, &v) || v <= 0)
            cli_usage_error(cmd, "%s: '%s' in '%s' is not a positive integer", opt, item, value);
        if (v > max) cli_usage_error(cmd, "%s: '%s' is larger than %lld", opt, item, (long long)max);
        if (n == CLI_MAX_LIST) cli_usage_error(cmd, "%s: more than %d values in '%s'", opt, CLI_MAX_LIST, value);
        out[n++] = v;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

int cli_parse_choice_list(const char *cmd, const char *opt, const char *value, const char *const *choices, int *out)
{
    int n = 0;
    const char *p = value;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int found = -1;
        for (int c = 0; choices[c]; c++)
            if (strlen(choices[c]) == len && strncmp(choices[c], p, len) == 0) found = c;
        if (found < 0) {
            char allowed[128] = "";
            for (int c = 0; choices[c]; c++) {
                strncat(allowed, c ? "|" : "", sizeof allowed - strlen(allowed) - 1);
                strncat(allowed, choices[c], sizeof allowed - strlen(allowed) - 1);
            }
            cli_usage_error(cmd, "%s: '%.*s' is not one of %s", opt, (int)len, p, allowed);
        }
        for (int k = 0; k < n; k++)
            if (out[k] == found) cli_usage_error(cmd, "%s: '%s' names '%s' twice", opt, value, choices[found]);
        out[n++] = found;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

fusednorm_backend cli_parse_backend(const char *cmd, const char *value)
{
    if (strcmp(value, "cpu") == 0) return FUSEDNORM_CPU;
    if (strcmp(value, "cuda") == 0) return FUSEDNORM_CUDA;
    cli_usage_error(cmd, "--backend: '%s' is not one of cpu|cuda", value);
}

/* ---- host data ---------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void cli_fill_random(void *dst, fusednorm_dtype t, int64_t n, double lo, double hi, uint64_t seed)
{
    /* Fixed-size blocks, each seeded from (seed, block index): the data does
     * not depend on the thread count. */
    const int64_t block = 1 << 16;
    const int64_t nblocks = (n + block - 1) / block;
    const float scale = (float)((hi - lo) / 16777216.0), offset = (float)lo;
#pragma omp parallel for schedule(static) if (nblocks > 1)
    for (int64_t b = 0; b < nblocks; b++) {
        uint64_t state = seed * 0x2545f4914f6cdd1dull + (uint64_t)b;
        splitmix64(&state);
        int64_t end = (b + 1) * block < n ? (b + 1) * block : n;
        for (int64_t i = b * block; i < end; i++) {
            float v = offset + scale * (float)(splitmix64(&state) >> 40); /* 24 random bits */
            if (v == 0.0f) v = (float)hi * 0.5f; /* never exactly zero */
            switch (t) {
            case FUSEDNORM_F16: ((uint16_t *)dst)[i] = fn_f32_to_f16(v); break;
            case FUSEDNORM_BF16: ((uint16_t *)dst)[i] = fn_f32_to_bf16(v); break;
            default: ((float *)dst)[i] = v; break;
            }
        }
    }
}

double cli_load(const void *p, fusednorm_dtype t, int64_t i) { return (double)fn_load(p, t, i); }

size_t cli_dtype_size(fusednorm_dtype t) { return t == FUSEDNORM_F32 ? 4 : 2; }

const char *cli_dtype_name(fusednorm_dtype t)
{
    return t == FUSEDNORM_F32 ? "f32" : t == FUSEDNORM_F16 ? "f16" : t == FUSEDNORM_BF16 ? "bf16" : "?";
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n)
{
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int cli_check_status(fusednorm_status s, const char *what)
{
    if (s == FUSEDNORM_OK) return 0;
    fprintf(stderr, "fusednorm: %s failed: %s: %s\n", what, fusednorm_status_string(s), fusednorm_last_error());
    return -1;
}
