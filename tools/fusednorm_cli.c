/*
 * `fusednorm`: the command-line tool of the library.
 *   info   version, backends, devices, OpenMP threads, copy bandwidth
 *   check  every norm/feature/dtype, fwd and bwd, against the fp64 reference
 *   bench  time, GB/s and % of copy bandwidth per shape
 *   run    (also: no arguments; what `make run` calls) check on the best
 *          backend and on the CPU, then a default benchmark on the best one
 * Exit codes: 0 ok, 1 a check or a call failed, 2 bad usage.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#include <omp.h>

static void print_version(FILE *out)
{
    int v = fusednorm_version();
    fprintf(out, "fusednorm %d.%d.%d (library %d.%d.%d), backends: cpu%s\n", FUSEDNORM_VERSION_MAJOR,
            FUSEDNORM_VERSION_MINOR, FUSEDNORM_VERSION_PATCH, v / 10000, v / 100 % 100, v % 100,
#if FUSEDNORM_WITH_CUDA
            ", cuda"
#else
            ""
#endif
    );
}

static void main_help(FILE *out)
{
    fprintf(out,
            "usage: fusednorm [--version] [-h|--help] <command> [options]\n"
            "\n"
            "Fused RMSNorm / LayerNorm kernels, forward and backward, on CPU and CUDA.\n"
            "\n"
            "commands:\n"
            "  info    version, backends built, CUDA devices, OpenMP threads, copy bandwidth\n"
            "  check   fwd and bwd of every norm, feature and dtype against the fp64 reference\n"
            "  bench   median time, GB/s and %% of copy bandwidth per shape\n"
            "  run     check (best backend and CPU), then a default bench on the best backend;\n"
            "          also what 'fusednorm' with no arguments and 'make run' do\n"
            "\n"
            "'fusednorm <command> --help' describes each command's options.\n"
            "exit code: 0 ok, 1 a check or a library/CUDA call failed, 2 bad usage.\n"
            "\n"
            "examples:\n"
            "  fusednorm info\n"
            "  fusednorm check --backend cpu --cols 7,4096\n"
            "  fusednorm bench --norm ln --dtype f16 --cols 4096 --pass bwd --atomic\n");
}

static void info_help(FILE *out)
{
    fprintf(out, "usage: fusednorm info\n"
                 "\n"
                 "Prints the version, the backends built, each CUDA device (name, SMs, compute\n"
                 "capability, memory), the OpenMP thread count and the measured copy bandwidth of\n"
                 "each usable backend (CPU: multithreaded memcpy of 256 MiB; CUDA: device-to-device\n"
                 "cudaMemcpyAsync of 1 GiB timed with events; bytes read + written, median).\n"
                 "\n"
                 "example:\n"
                 "  fusednorm info\n");
}

static void run_help(FILE *out)
{
    fprintf(out, "usage: fusednorm run\n"
                 "\n"
                 "The default job (also 'fusednorm' with no arguments, and 'make run'):\n"
                 "  1. fusednorm check --quiet on the best backend (cuda when usable, else cpu)\n"
                 "  2. fusednorm check --quiet --backend cpu, when the best backend is cuda\n"
                 "  3. fusednorm bench --norm rms,ln --dtype bf16,f32 --pass both on the best backend\n"
                 "Exit code 1 when any check fails or any benchmark call fails.\n"
                 "\n"
                 "example:\n"
                 "  fusednorm run\n");
}

/* Commands without options still reject stray arguments. */
static int parse_no_options(const char *cmd, int argc, char **argv, void (*help)(FILE *))
{
    cli_args it;
    const char *opt;
    cli_args_init(&it, cmd, argc, argv);
    while (cli_next_option(&it, &opt)) {
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            help(stdout);
            return 1;
        }
        cli_usage_error(cmd, "unknown option '%s'", opt);
    }
    return 0;
}

static int cmd_info(void)
{
    char why[256];
    print_version(stdout);
    printf("OpenMP threads:   %d (of %d processors)\n", omp_get_max_threads(), omp_get_num_procs());
    dev_print_info(stdout);
    printf("fusednorm_cuda_available(): %d\n", fusednorm_cuda_available());
    fflush(stdout);
    int rc = CLI_EXIT_OK;
    for (int b = FUSEDNORM_CPU; b <= FUSEDNORM_CUDA; b++) {
        double bps = 0;
        size_t bytes = 0;
        if (!dev_backend_usable((fusednorm_backend)b, why, sizeof why)) {
            printf("copy bandwidth %-4s: not measured: %s\n", dev_backend_name((fusednorm_backend)b), why);
            continue;
        }
        if (dev_copy_bandwidth((fusednorm_backend)b, &bps, &bytes)) {
            rc = CLI_EXIT_FAILURE;
            continue;
        }
        printf("copy bandwidth %-4s: %.1f GB/s (%s of %.0f MiB, bytes read + written, median)\n",
               dev_backend_name((fusednorm_backend)b), bps * 1e-9,
               b == FUSEDNORM_CUDA ? "device-to-device cudaMemcpyAsync" : "multithreaded memcpy",
               (double)bytes / (1 << 20));
        fflush(stdout);
    }
    return rc;
}

static int cmd_run(void)
{
    char why[256];
    fusednorm_backend best = dev_best_backend();
    int rc = CLI_EXIT_OK;
    print_version(stdout);
    if (best == FUSEDNORM_CPU && dev_backend_usable(FUSEDNORM_CUDA, why, sizeof why) == 0)
        printf("CUDA: %s; running on the CPU\n", why);
    fflush(stdout);

    check_options c;
    check_default_options(&c);
    c.backend = best;
    c.quiet = 1;
    printf("\n== check on %s (failures and summary only; 'fusednorm check' prints every case)\n",
           dev_backend_name(best));
    fflush(stdout);
    if (check_run(&c) != CLI_EXIT_OK) rc = CLI_EXIT_FAILURE;
    if (best != FUSEDNORM_CPU) {
        c.backend = FUSEDNORM_CPU;
        printf("\n== check on cpu\n");
        fflush(stdout);
        if (check_run(&c) != CLI_EXIT_OK) rc = CLI_EXIT_FAILURE;
    }

    bench_options b;
    bench_default_options(&b);
    b.backend = best;
    b.norms[0] = FUSEDNORM_RMSNORM;
    b.norms[1] = FUSEDNORM_LAYERNORM;
    b.nnorms = 2;
    b.dtypes[0] = FUSEDNORM_BF16;
    b.dtypes[1] = FUSEDNORM_F32;
    b.ndtypes = 2;
    printf("\n== bench on %s\n", dev_backend_name(best));
    fflush(stdout);
    if (bench_run(&b) != CLI_EXIT_OK) rc = CLI_EXIT_FAILURE;
    printf("\n%s\n", rc == CLI_EXIT_OK ? "fusednorm run: all checks passed" : "fusednorm run: FAILED (see above)");
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) return cmd_run();
    const char *cmd = argv[1];
    int sub_argc = argc - 2;
    char **sub_argv = argv + 2;
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        main_help(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        print_version(stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(cmd, "info")) {
        if (parse_no_options("info", sub_argc, sub_argv, info_help)) return CLI_EXIT_OK;
        return cmd_info();
    }
    if (!strcmp(cmd, "run")) {
        if (parse_no_options("run", sub_argc, sub_argv, run_help)) return CLI_EXIT_OK;
        return cmd_run();
    }
    if (!strcmp(cmd, "check")) {
        check_options o;
        check_default_options(&o);
        if (check_parse(sub_argc, sub_argv, &o)) return CLI_EXIT_OK;
        return check_run(&o);
    }
    if (!strcmp(cmd, "bench")) {
        bench_options o;
        bench_default_options(&o);
        if (bench_parse(sub_argc, sub_argv, &o)) return CLI_EXIT_OK;
        return bench_run(&o);
    }
    if (cmd[0] == '-') cli_usage_error(NULL, "unknown option '%s'", cmd);
    cli_usage_error(NULL, "unknown command '%s' (commands: info, check, bench, run)", cmd);
}
