/*
 * `fusednorm bench`: median time of fusednorm_fwd / fusednorm_bwd per shape,
 * the GB/s of the bytes each pass must move (docs/perf-targets.md), and the
 * percentage of the backend's copy bandwidth measured at the start of the
 * same run.
 *
 * Bytes counted (M rows, N cols, a = activation size, p = parameter size):
 *   fwd: read x (+ residual), write y (+ residual_out): M N a each;
 *        read weight (unless --no-weight) (+ bias for LayerNorm): N p each;
 *        write rstd (+ mean): 4 M each
 *   bwd: read x, dy (+ dresidual_out), write dx (+ dresidual unless
 *        --no-dresidual): M N a each;
 *        read weight, write dweight (unless --no-weight): N p each;
 *        read rstd (+ mean): 4 M each; write dbias (LayerNorm): N p
 * Workspace traffic and re-reads are the kernel's cost, not counted.
 * LayerNorm runs with a bias (as torch.nn.LayerNorm does), RMSNorm without.
 * The backward gets rstd/mean from one untimed forward, and computes the
 * deterministic dweight; --atomic adds the FUSEDNORM_ATOMIC_DWEIGHT variant.
 * --same-size-copy also times, after each case, a copy of as many bytes
 * (half read, half written), the same way: a short problem cannot reach the
 * large copy's rate, and this says how far a copy of its size gets.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const NORM_CHOICES[] = {"rms", "ln", NULL};
/* fusednorm_dtype order, then 16-bit activations with fp32 weight and bias
 * (and dweight, dbias): the mixed-precision call */
static const char *const DTYPE_CHOICES[] = {"f32", "f16", "bf16", "f16/w32", "bf16/w32", NULL};
enum { DTYPE_F16_W32 = 3, DTYPE_BF16_W32 = 4 };
static const char *const PASS_CHOICES[] = {"fwd", "bwd", "both", NULL};

void bench_default_options(bench_options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = dev_best_backend();
    o->norms[0] = FUSEDNORM_RMSNORM;
    o->nnorms = 1;
    o->dtypes[0] = FUSEDNORM_BF16;
    o->ndtypes = 1;
    o->run_fwd = o->run_bwd = 1;
    o->warmup = -1;
}

void bench_help(FILE *out)
{
    fprintf(out,
            "usage: fusednorm bench [--backend cpu|cuda] [--norm rms|ln] [--dtype f32|f16|bf16|...]\n"
            "                       [--rows M] [--cols N,...] [--residual [--no-dresidual]]\n"
            "                       [--no-weight] [--pass fwd|bwd|both] [--atomic] [--same-size-copy]\n"
            "                       [--iters K] [--warmup K] [--csv FILE]\n"
            "\n"
            "Times fusednorm_fwd / fusednorm_bwd and reports, per case, the median time, the\n"
            "GB/s of the bytes the pass must move and the %% of the copy bandwidth measured\n"
            "in the same run. Progress goes to stderr, the table to stdout.\n"
            "\n"
            "options:\n"
            "  --backend cpu|cuda    default: cuda when a device is usable, else cpu\n"
            "  --norm rms|ln         comma list allowed (rms,ln); default rms\n"
            "  --dtype f32|f16|bf16  one dtype for activations and weights, or f16/w32,\n"
            "                        bf16/w32: fp32 weight, bias, dweight and dbias with\n"
            "                        16-bit activations; comma list allowed; default bf16\n"
            "  --rows M              default: cuda 32768 (2^30/N for N >= 65536);\n"
            "                        cpu 8192 (2^25/N for N > 4096)\n"
            "  --cols N,...          default: cuda 256,1024,2048,4096,8192,16384; cpu 1024,4096\n"
            "  --residual            fuse the residual add (reads residual, writes residual_out;\n"
            "                        the backward reads dresidual_out and writes dresidual)\n"
            "  --no-dresidual        with --residual: the backward writes no dresidual (the\n"
            "                        caller uses dx for it, as the PyTorch package does when\n"
            "                        the residual's dtype is x's); shown as res 'nodr', CSV 2\n"
            "  --no-weight           no weight (and so no dweight): y = x_hat (+ bias for ln);\n"
            "                        said in the table's first line, CSV column weight 0\n"
            "  --pass fwd|bwd|both   default both\n"
            "  --atomic              also time the backward with FUSEDNORM_ATOMIC_DWEIGHT\n"
            "  --same-size-copy      after each case, time a copy of the same bytes (half read,\n"
            "                        half written) the same way, and add its GB/s and the\n"
            "                        case's %% of it (column %%same): short problems cannot\n"
            "                        reach the copy bandwidth of the large copy\n"
            "  --iters K             timed launches per case (default: cuda 100, cpu 7)\n"
            "  --warmup K            untimed launches before them (default: cuda 10, cpu 1;\n"
            "                        0 under compute-sanitizer, where each launch is slow)\n"
            "  --csv FILE            also write every column to FILE as CSV\n"
            "  -h, --help            this help\n"
            "\n"
            "CUDA timing: events around each launch after warm-up, a buffer of twice the\n"
            "L2 size written before each launch (outside the events), median.\n"
            "CPU timing: OpenMP wall clock around each call, median.\n"
            "\n"
            "examples:\n"
            "  fusednorm bench\n"
            "  fusednorm bench --norm rms,ln --dtype bf16,f32 --cols 1024,4096 --pass bwd --atomic\n"
            "  fusednorm bench --backend cpu --rows 4096 --cols 4096 --residual --csv cpu.csv\n");
}

int bench_parse(int argc, char **argv, bench_options *o)
{
    cli_args it;
    const char *opt;
    cli_args_init(&it, "bench", argc, argv);
    while (cli_next_option(&it, &opt)) {
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            bench_help(stdout);
            return 1;
        } else if (!strcmp(opt, "--backend")) {
            o->backend = cli_parse_backend("bench", cli_option_value(&it, opt));
        } else if (!strcmp(opt, "--norm")) {
            o->nnorms = cli_parse_choice_list("bench", opt, cli_option_value(&it, opt), NORM_CHOICES, o->norms);
        } else if (!strcmp(opt, "--dtype")) {
            o->ndtypes = cli_parse_choice_list("bench", opt, cli_option_value(&it, opt), DTYPE_CHOICES, o->dtypes);
        } else if (!strcmp(opt, "--rows")) {
            o->rows = cli_parse_positive("bench", opt, cli_option_value(&it, opt), (int64_t)1 << 40);
        } else if (!strcmp(opt, "--cols")) {
            o->ncols = cli_parse_int_list("bench", opt, cli_option_value(&it, opt), o->cols, (int64_t)1 << 40);
        } else if (!strcmp(opt, "--residual")) {
            cli_option_flag(&it, opt);
            o->residual |= 1;
        } else if (!strcmp(opt, "--no-dresidual")) {
            cli_option_flag(&it, opt);
            o->residual |= 2;
        } else if (!strcmp(opt, "--no-weight")) {
            cli_option_flag(&it, opt);
            o->no_weight = 1;
        } else if (!strcmp(opt, "--pass")) {
            const char *v = cli_option_value(&it, opt);
            int p[3], n = cli_parse_choice_list("bench", opt, v, PASS_CHOICES, p);
            if (n != 1) cli_usage_error("bench", "--pass: '%s' is not one of fwd|bwd|both", v);
            o->run_fwd = p[0] != 1;
            o->run_bwd = p[0] != 0;
        } else if (!strcmp(opt, "--atomic")) {
            cli_option_flag(&it, opt);
            o->atomic = 1;
        } else if (!strcmp(opt, "--same-size-copy")) {
            cli_option_flag(&it, opt);
            o->same_copy = 1;
        } else if (!strcmp(opt, "--iters")) {
            o->iters = (int)cli_parse_positive("bench", opt, cli_option_value(&it, opt), 1000000);
        } else if (!strcmp(opt, "--warmup")) {
            o->warmup = (int)cli_parse_count("bench", opt, cli_option_value(&it, opt), 1000000);
        } else if (!strcmp(opt, "--csv")) {
            o->csv_path = cli_option_value(&it, opt);
            if (!*o->csv_path) cli_usage_error("bench", "--csv: '' is not a file name");
        } else {
            cli_usage_error("bench", "unknown option '%s'", opt);
        }
    }
    /* residual: 0 none, 1 with dresidual, 2 without (the flags were bits 1 and 2) */
    if (o->residual == 2) cli_usage_error("bench", "--no-dresidual needs --residual");
    if (o->residual == 3) o->residual = 2;
    return 0;
}

/* ---- one measured row of the table -------------------------------------- */

typedef struct bench_row {
    fusednorm_norm norm;
    fusednorm_dtype dtype;
    int w32; /* fp32 weight and bias (and their gradients) */
    int64_t rows, cols;
    int residual, bias;
    const char *pass; /* "fwd", "bwd", "bwd-atomic" */
    double bytes, seconds;
    int ok;
    double copy_seconds; /* --same-size-copy: a copy of the same bytes; 0: not measured */
    int no_weight;       /* --no-weight */
} bench_row;

static double fwd_bytes(int64_t M, int64_t N, size_t a, size_t p, int residual, int ln, int weight)
{
    double mn = (double)M * (double)N * (double)a;
    return mn * (residual ? 4 : 2) + (double)N * (double)p * ((weight ? 1 : 0) + (ln ? 1 : 0)) +
           4.0 * (double)M * (ln ? 2 : 1);
}

static double bwd_bytes(int64_t M, int64_t N, size_t a, size_t p, int residual, int ln, int weight)
{
    double mn = (double)M * (double)N * (double)a;
    return mn * (residual ? (residual == 2 ? 4 : 5) : 3) + (double)N * (double)p * ((weight ? 2 : 0) + (ln ? 1 : 0)) +
           4.0 * (double)M * (ln ? 2 : 1);
}

static int launch_fwd(void *ctx) { return cli_check_status(fusednorm_fwd(ctx), "fusednorm_fwd"); }
static int launch_bwd(void *ctx) { return cli_check_status(fusednorm_bwd(ctx), "fusednorm_bwd"); }

/* --same-size-copy: one copy of bytes from src to dst. */
typedef struct copy_ctx {
    fusednorm_backend backend;
    void *dst;
    const void *src;
    size_t bytes;
} copy_ctx;

static int launch_copy(void *ctx)
{
    const copy_ctx *c = ctx;
    return dev_copy(c->backend, c->dst, c->src, c->bytes);
}

static int64_t default_rows(fusednorm_backend b, int64_t cols)
{
    if (b == FUSEDNORM_CUDA) return cols >= 65536 ? (((int64_t)1 << 30) / cols > 0 ? ((int64_t)1 << 30) / cols : 1) : 32768;
    if (cols > 4096) return ((int64_t)1 << 25) / cols > 0 ? ((int64_t)1 << 25) / cols : 1;
    return 8192;
}

/* Uploads random values in [lo, hi) through the host staging buffer. */
static int upload_random(fusednorm_backend b, void *dst, void *staging, fusednorm_dtype t, int64_t n, double lo,
                         double hi, uint64_t seed)
{
    cli_fill_random(staging, t, n, lo, hi, seed);
    return dev_upload(b, dst, staging, (size_t)n * cli_dtype_size(t));
}

typedef struct run_state {
    fusednorm_backend backend;
    int iters, warmup, done, total;
} run_state;

static const char *norm_short(fusednorm_norm n) { return n == FUSEDNORM_RMSNORM ? "rms" : "ln"; }

static const char *res_label(int residual) { return residual ? (residual == 2 ? "nodr" : "yes") : "no"; }

static const char *dtype_label(const bench_row *r)
{
    return r->w32 ? (r->dtype == FUSEDNORM_F16 ? "f16/w32" : "bf16/w32") : cli_dtype_name(r->dtype);
}

static void progress(run_state *st, const bench_row *r)
{
    st->done++;
    fprintf(stderr, "[%d/%d] %s %s %lldx%lld%s%s %s ... ", st->done, st->total, norm_short(r->norm),
            dtype_label(r), (long long)r->rows, (long long)r->cols,
            r->residual ? (r->residual == 2 ? " residual (no dresidual)" : " residual") : "",
            r->no_weight ? " no weight" : "", r->pass);
    fflush(stderr);
}

static void progress_done(const bench_row *r)
{
    if (r->ok)
        fprintf(stderr, "%.2f us, %.1f GB/s\n", r->seconds * 1e6, r->bytes / r->seconds * 1e-9);
    else
        fprintf(stderr, "FAILED\n");
}

/* --same-size-copy: times a copy of r->bytes (half read, half written) as
 * the case was timed, into r->copy_seconds; a failed allocation or copy
 * leaves it 0 (the case's own numbers stand) and says so. */
static void time_same_copy(const run_state *st, bench_row *r)
{
    const fusednorm_backend b = st->backend;
    const size_t bytes = (size_t)(r->bytes / 2);
    void *src = NULL, *dst = NULL;
    r->copy_seconds = 0;
    /* both written first: on the CPU the pages then belong to the threads that copy */
    if (bytes > 0 && !dev_alloc(b, &src, bytes) && !dev_alloc(b, &dst, bytes) && !dev_fill_bytes(b, src, 0x5a, bytes) &&
        !dev_fill_bytes(b, dst, 0, bytes)) {
        copy_ctx c = {b, dst, src, bytes};
        if (dev_time_median(b, launch_copy, &c, st->warmup, st->iters, &r->copy_seconds)) r->copy_seconds = 0;
    }
    if (r->copy_seconds > 0)
        fprintf(stderr, "    copy of the same bytes: %.2f us, %.1f GB/s\n", r->copy_seconds * 1e6,
                r->bytes / r->copy_seconds * 1e-9);
    else
        fprintf(stderr, "    copy of the same bytes: not measured (allocation or copy failed)\n");
    dev_free(b, dst);
    dev_free(b, src);
}

/* Sets up one (norm, dtype, shape) and times the requested passes into rows[]. */
static int bench_group(run_state *st, const bench_options *o, fusednorm_norm norm, int dtype_choice, int64_t M,
                       int64_t N, bench_row *out, int *nout)
{
    const fusednorm_backend b = st->backend;
    const int ln = norm == FUSEDNORM_LAYERNORM, res = o->residual;
    const int w32 = dtype_choice == DTYPE_F16_W32 || dtype_choice == DTYPE_BF16_W32;
    const fusednorm_dtype dt = dtype_choice == DTYPE_F16_W32    ? FUSEDNORM_F16
                               : dtype_choice == DTYPE_BF16_W32 ? FUSEDNORM_BF16
                                                                : (fusednorm_dtype)dtype_choice;
    const fusednorm_dtype wt = w32 ? FUSEDNORM_F32 : dt; /* weight, bias, dweight, dbias */
    const size_t a = cli_dtype_size(dt), p = cli_dtype_size(wt), mat = (size_t)(M * N) * a, vec = (size_t)N * p;
    void *x = NULL, *r = NULL, *w = NULL, *bias = NULL, *y = NULL, *rout = NULL, *rstd = NULL, *mean = NULL;
    void *dy = NULL, *dres = NULL, *gx = NULL, *gres = NULL, *gw = NULL, *gb = NULL, *ws = NULL;
    void *staging = malloc(mat ? mat : 1);
    int rc = -1;
    bench_row base = {norm, dt, w32, M, N, res, ln, NULL, 0, 0, 0, 0, o->no_weight};
    const int weight = !o->no_weight;
    int want = (o->run_fwd ? 1 : 0) + (o->run_bwd ? 1 + (o->atomic ? 1 : 0) : 0);

    if (!staging) {
        fprintf(stderr, "fusednorm bench: out of host memory (%zu bytes)\n", mat);
        goto fail;
    }
    if (dev_alloc(b, &x, mat) || dev_alloc(b, &y, mat) || (weight && dev_alloc(b, &w, vec)) || dev_alloc(b, &rstd, (size_t)M * 4) ||
        (ln && (dev_alloc(b, &bias, vec) || dev_alloc(b, &mean, (size_t)M * 4))) ||
        (res && (dev_alloc(b, &r, mat) || dev_alloc(b, &rout, mat))))
        goto fail;
    uint64_t seed = (uint64_t)(M * 131 + N) * 8 + (uint64_t)dtype_choice;
    if (upload_random(b, x, staging, dt, M * N, -2.0, 2.0, seed) ||
        (weight && upload_random(b, w, staging, wt, N, 0.5, 1.5, seed + 1)) ||
        (ln && upload_random(b, bias, staging, wt, N, -0.5, 0.5, seed + 2)) ||
        (res && upload_random(b, r, staging, dt, M * N, -1.0, 1.0, seed + 3)))
        goto fail;

    fusednorm_fwd_args fa = {0};
    fa.norm = norm;
    fa.rows = M;
    fa.cols = N;
    fa.eps = ln ? 1e-5f : 1e-6f;
    fa.x = (fusednorm_tensor){x, dt, 0};
    if (weight) fa.weight = (fusednorm_tensor){w, wt, 0};
    if (ln) fa.bias = (fusednorm_tensor){bias, wt, 0};
    if (res) fa.residual = (fusednorm_tensor){r, dt, 0};
    fa.y = (fusednorm_tensor){y, dt, 0};
    if (res) fa.residual_out = (fusednorm_tensor){rout, dt, 0};
    fa.rstd = rstd;
    fa.mean = mean;
    fa.backend = b;

    if (o->run_fwd) {
        bench_row row = base;
        row.pass = "fwd";
        row.bytes = fwd_bytes(M, N, a, p, res, ln, weight);
        progress(st, &row);
        row.ok = dev_time_median(b, launch_fwd, &fa, st->warmup, st->iters, &row.seconds) == 0;
        progress_done(&row);
        if (row.ok && o->same_copy) time_same_copy(st, &row);
        out[(*nout)++] = row;
        want--;
        if (!row.ok) goto fail;
    } else if (launch_fwd(&fa) || dev_synchronize(b)) {
        goto fail;
    }
    if (!o->run_bwd) {
        rc = 0;
        goto fail;
    }

    /* The backward: its rstd/mean come from the forward just run. */
    if (dev_alloc(b, &dy, mat) || dev_alloc(b, &gx, mat) || (weight && dev_alloc(b, &gw, vec)) ||
        (ln && dev_alloc(b, &gb, vec)) || (res && (dev_alloc(b, &dres, mat) || dev_alloc(b, &gres, mat))))
        goto fail;
    if (upload_random(b, dy, staging, dt, M * N, -1.0, 1.0, seed + 4) ||
        (res && upload_random(b, dres, staging, dt, M * N, -0.5, 0.5, seed + 5)))
        goto fail;
    fusednorm_bwd_args ba = {0};
    ba.norm = norm;
    ba.rows = M;
    ba.cols = N;
    ba.eps = fa.eps;
    ba.dy = (fusednorm_tensor){dy, dt, 0};
    ba.x = (fusednorm_tensor){res ? rout : x, dt, 0};
    if (weight) ba.weight = (fusednorm_tensor){w, wt, 0};
    if (res) ba.dresidual_out = (fusednorm_tensor){dres, dt, 0};
    ba.rstd = rstd;
    ba.mean = mean;
    ba.dx = (fusednorm_tensor){gx, dt, 0};
    if (res == 1) ba.dresidual = (fusednorm_tensor){gres, dt, 0};
    if (weight) ba.dweight = (fusednorm_tensor){gw, wt, 0};
    if (ln) ba.dbias = (fusednorm_tensor){gb, wt, 0};
    ba.backend = b;

    size_t ws_det = 0, ws_atomic = 0;
    if (cli_check_status(fusednorm_bwd_workspace_size(&ba, &ws_det), "fusednorm_bwd_workspace_size")) goto fail;
    if (o->atomic) {
        fusednorm_bwd_args tmp = ba;
        tmp.flags = FUSEDNORM_ATOMIC_DWEIGHT;
        if (cli_check_status(fusednorm_bwd_workspace_size(&tmp, &ws_atomic), "fusednorm_bwd_workspace_size")) goto fail;
    }
    ba.workspace_bytes = ws_det > ws_atomic ? ws_det : ws_atomic;
    if (ba.workspace_bytes && dev_alloc(b, &ws, ba.workspace_bytes)) goto fail;
    ba.workspace = ws;

    for (int variant = 0; variant < (o->atomic ? 2 : 1); variant++) {
        bench_row row = base;
        row.pass = variant ? "bwd-atomic" : "bwd";
        ba.flags = variant ? FUSEDNORM_ATOMIC_DWEIGHT : 0;
        row.bytes = bwd_bytes(M, N, a, p, res, ln, weight);
        progress(st, &row);
        row.ok = dev_time_median(b, launch_bwd, &ba, st->warmup, st->iters, &row.seconds) == 0;
        progress_done(&row);
        if (row.ok && o->same_copy) time_same_copy(st, &row);
        out[(*nout)++] = row;
        want--;
        if (!row.ok) goto fail;
    }
    rc = 0;
fail:
    /* Cases never reached still count, as failures, so the totals add up. */
    for (; rc != 0 && want > 0; want--) {
        bench_row row = base;
        row.pass = "(not run)";
        out[(*nout)++] = row;
        st->done++;
    }
    void *all[] = {x, r, w, bias, y, rout, rstd, mean, dy, dres, gx, gres, gw, gb, ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dev_free(b, all[i]);
    free(staging);
    return rc;
}

int bench_run(const bench_options *opts)
{
    bench_options o = *opts;
    char why[256], device[160];
    if (!dev_backend_usable(o.backend, why, sizeof why)) {
        fprintf(stderr, "fusednorm bench: --backend %s: %s\n", dev_backend_name(o.backend), why);
        return CLI_EXIT_USAGE;
    }
    const int cuda = o.backend == FUSEDNORM_CUDA;
    if (!o.ncols) {
        static const int64_t cpu_cols[] = {1024, 4096}, cuda_cols[] = {256, 1024, 2048, 4096, 8192, 16384};
        o.ncols = cuda ? 6 : 2;
        memcpy(o.cols, cuda ? cuda_cols : cpu_cols, sizeof(int64_t) * (size_t)o.ncols);
    }
    for (int c = 0; c < o.ncols; c++) {
        int64_t M = o.rows ? o.rows : default_rows(o.backend, o.cols[c]);
        if (M > ((int64_t)1 << 40) / o.cols[c])
            cli_usage_error("bench", "--rows %lld with --cols %lld: more than 2^40 elements", (long long)M,
                            (long long)o.cols[c]);
    }
    FILE *csv = NULL;
    if (o.csv_path && !(csv = fopen(o.csv_path, "w"))) {
        fprintf(stderr, "fusednorm bench: --csv: cannot open '%s' for writing: %s\n", o.csv_path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    run_state st = {o.backend, o.iters ? o.iters : (cuda ? 100 : 7), o.warmup >= 0 ? o.warmup : (cuda ? 10 : 1), 0, 0};
    const int per_group = (o.run_fwd ? 1 : 0) + (o.run_bwd ? (o.atomic ? 2 : 1) : 0);
    st.total = o.nnorms * o.ndtypes * o.ncols * per_group;

    dev_describe(o.backend, device, sizeof device);
    double copy_bps = 0;
    size_t copy_size = 0;
    fprintf(stderr, "measuring %s copy bandwidth ...\n", dev_backend_name(o.backend));
    if (dev_copy_bandwidth(o.backend, &copy_bps, &copy_size)) {
        if (csv) fclose(csv);
        return CLI_EXIT_FAILURE;
    }
    bench_row *rows = calloc((size_t)st.total, sizeof *rows);
    if (!rows) {
        if (csv) fclose(csv);
        return CLI_EXIT_FAILURE;
    }
    int nrows = 0, failed = 0;
    for (int n = 0; n < o.nnorms; n++)
        for (int d = 0; d < o.ndtypes; d++)
            for (int c = 0; c < o.ncols; c++) {
                int64_t M = o.rows ? o.rows : default_rows(o.backend, o.cols[c]);
                if (bench_group(&st, &o, (fusednorm_norm)o.norms[n], o.dtypes[d], M, o.cols[c], rows,
                                &nrows))
                    failed = 1;
            }

    printf("# fusednorm bench on %s (%s); copy bandwidth %.1f GB/s (%.0f MiB copy, read + written); "
           "median of %d launches%s\n",
           dev_backend_name(o.backend), device, copy_bps * 1e-9, (double)copy_size / (1 << 20), st.iters,
           o.no_weight ? "; no weight (--no-weight)" : "");
    printf("%-4s %-8s %8s %8s %-5s %-10s %12s %10s %7s%s\n", "norm", "dtype", "rows", "cols", "res", "pass", "time_us",
           "GB/s", "%copy", o.same_copy ? "   %same" : "");
    if (csv)
        fprintf(csv, "backend,device,norm,dtype,rows,cols,residual,bias,pass,iters,bytes,median_us,gbps,"
                     "copy_gbps,pct_copy,ok,same_copy_gbps,pct_same_copy,weight\n");
    for (int i = 0; i < nrows; i++) {
        const bench_row *r = &rows[i];
        double gbps = r->ok ? r->bytes / r->seconds * 1e-9 : 0.0, pct = r->ok ? 100.0 * gbps / (copy_bps * 1e-9) : 0.0;
        /* --same-size-copy: the copy of the same bytes, and this case's % of it */
        const int same = r->ok && r->copy_seconds > 0;
        const double same_gbps = same ? r->bytes / r->copy_seconds * 1e-9 : 0.0;
        char same_cell[16] = "", same_csv[48] = ","; /* CSV: two empty fields when not measured */
        if (o.same_copy && same) snprintf(same_cell, sizeof same_cell, " %7.1f", 100.0 * gbps / same_gbps);
        else if (o.same_copy) snprintf(same_cell, sizeof same_cell, " %7s", "-");
        if (same) snprintf(same_csv, sizeof same_csv, "%.2f,%.2f", same_gbps, 100.0 * gbps / same_gbps);
        if (r->ok)
            printf("%-4s %-8s %8lld %8lld %-5s %-10s %12.2f %10.1f %7.1f%s\n", norm_short(r->norm),
                   dtype_label(r), (long long)r->rows, (long long)r->cols, res_label(r->residual), r->pass,
                   r->seconds * 1e6, gbps, pct, same_cell);
        else
            printf("%-4s %-8s %8lld %8lld %-5s %-10s %12s %10s %7s%s\n", norm_short(r->norm), dtype_label(r),
                   (long long)r->rows, (long long)r->cols, res_label(r->residual), r->pass, "FAILED", "-", "-",
                   same_cell);
        if (csv)
            fprintf(csv, "%s,\"%s\",%s,%s,%lld,%lld,%d,%d,%s,%d,%.0f,%.3f,%.2f,%.2f,%.2f,%d,%s,%d\n",
                    dev_backend_name(o.backend), device, norm_short(r->norm), dtype_label(r),
                    (long long)r->rows, (long long)r->cols, r->residual, r->bias, r->pass, st.iters, r->bytes,
                    r->seconds * 1e6, gbps, copy_bps * 1e-9, pct, r->ok, same_csv, !r->no_weight);
    }
    free(rows);
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "fusednorm bench: --csv: writing '%s' failed: %s\n", o.csv_path, strerror(errno));
        failed = 1;
    }
    return failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
