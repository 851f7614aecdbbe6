/*
 * The error model of design.md: every invalid argument returns the right
 * status, fusednorm_last_error() names the argument, and nothing is written
 * (outputs poisoned before the call are still poisoned after it). Also the
 * status strings, the version, and the CUDA backend on a build or machine
 * without it. Runs on the CPU backend, and on CUDA too when a device is usable.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 4, COLS = 8 };

/* A valid call's buffers: inputs filled, outputs poisoned before each call. */
typedef struct setup {
    fusednorm_backend be;
    th_tensor x, res, w, b, y, ro, rstd, mean;              /* forward */
    th_tensor dy, bx, dro, dx, dres, dw, db, grstd, gmean; /* backward */
    void *ws;
    size_t ws_bytes;
} setup;

static void setup_init(setup *s, fusednorm_backend be)
{
    s->be = be;
    fusednorm_dtype f = FUSEDNORM_F32;
    th_alloc(&s->x, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->res, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->w, be, f, 1, COLS, 0, 0);
    th_alloc(&s->b, be, f, 1, COLS, 0, 0);
    th_alloc(&s->y, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->ro, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->rstd, be, f, ROWS, 1, 0, 0);
    th_alloc(&s->mean, be, f, ROWS, 1, 0, 0);
    th_alloc(&s->dy, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->bx, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->dro, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->dx, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->dres, be, f, ROWS, COLS, 0, 0);
    th_alloc(&s->dw, be, f, 1, COLS, 0, 0);
    th_alloc(&s->db, be, f, 1, COLS, 0, 0);
    th_alloc(&s->grstd, be, f, ROWS, 1, 0, 0);
    th_alloc(&s->gmean, be, f, ROWS, 1, 0, 0);
    th_fill(&s->x, -1, 1);
    th_fill(&s->res, -1, 1);
    th_fill(&s->w, 0.5, 1.5);
    th_fill(&s->b, -1, 1);
    th_fill(&s->dy, -1, 1);
    th_fill(&s->bx, -1, 1);
    th_fill(&s->dro, -1, 1);
    th_fill(&s->grstd, 0.5, 1.5);
    th_fill(&s->gmean, -0.1, 0.1);
    s->ws_bytes = 1 << 20; /* generous: the valid baseline must not fail on the workspace */
    s->ws = th_backend_malloc(be, s->ws_bytes);
}

static void setup_free(setup *s)
{
    th_tensor *all[] = {&s->x,  &s->res, &s->w,  &s->b,  &s->y,  &s->ro, &s->rstd, &s->mean,  &s->dy,
                        &s->bx, &s->dro, &s->dx, &s->dres, &s->dw, &s->db, &s->grstd, &s->gmean};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) th_free(all[i]);
    th_backend_free(s->be, s->ws);
}

static fusednorm_fwd_args valid_fwd(setup *s, fusednorm_norm norm)
{
    fusednorm_fwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = norm;
    a.rows = ROWS;
    a.cols = COLS;
    a.eps = 1e-5f;
    a.x = th_arg(&s->x);
    a.residual = th_arg(&s->res);
    a.weight = th_arg(&s->w);
    a.bias = th_arg(&s->b);
    a.y = th_arg(&s->y);
    a.residual_out = th_arg(&s->ro);
    a.rstd = th_data(&s->rstd);
    a.mean = norm == FUSEDNORM_LAYERNORM ? th_data(&s->mean) : NULL;
    a.backend = s->be;
    return a;
}

static fusednorm_bwd_args valid_bwd(setup *s, fusednorm_norm norm)
{
    fusednorm_bwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = norm;
    a.rows = ROWS;
    a.cols = COLS;
    a.eps = 1e-5f;
    a.dy = th_arg(&s->dy);
    a.x = th_arg(&s->bx);
    a.weight = th_arg(&s->w);
    a.dresidual_out = th_arg(&s->dro);
    a.rstd = th_data(&s->grstd);
    a.mean = norm == FUSEDNORM_LAYERNORM ? th_data(&s->gmean) : NULL;
    a.dx = th_arg(&s->dx);
    a.dresidual = th_arg(&s->dres);
    a.dweight = th_arg(&s->dw);
    a.dbias = th_arg(&s->db);
    a.workspace = s->ws;
    a.workspace_bytes = s->ws_bytes;
    a.backend = s->be;
    return a;
}

static void poison_outputs(setup *s)
{
    th_tensor *out[] = {&s->y, &s->ro, &s->rstd, &s->mean, &s->dx, &s->dres, &s->dw, &s->db};
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) th_poison(out[i]);
}

static void expect_nothing_written(setup *s)
{
    th_backend_sync(s->be);
    th_check_poisoned(&s->y, "y");
    th_check_poisoned(&s->ro, "residual_out");
    th_check_poisoned(&s->rstd, "rstd");
    th_check_poisoned(&s->mean, "mean");
    th_check_poisoned(&s->dx, "dx");
    th_check_poisoned(&s->dres, "dresidual");
    th_check_poisoned(&s->dw, "dweight");
    th_check_poisoned(&s->db, "dbias");
}

static void expect_fwd(setup *s, const char *label, const fusednorm_fwd_args *a, fusednorm_status want,
                       const char *names)
{
    snprintf(th_context, sizeof th_context, "%s fwd: %s", th_backend_name(s->be), label);
    poison_outputs(s);
    ASSERT_STATUS(fusednorm_fwd(a), want);
    if (names) ASSERT_CONTAINS(fusednorm_last_error(), names);
    expect_nothing_written(s);
}

static void expect_bwd(setup *s, const char *label, const fusednorm_bwd_args *a, fusednorm_status want,
                       const char *names)
{
    snprintf(th_context, sizeof th_context, "%s bwd: %s", th_backend_name(s->be), label);
    poison_outputs(s);
    ASSERT_STATUS(fusednorm_bwd(a), want);
    if (names) ASSERT_CONTAINS(fusednorm_last_error(), names);
    expect_nothing_written(s);
    /* The size query validates the same way (workspace errors aside). */
    if (want == FUSEDNORM_ERROR_INVALID_ARGUMENT) {
        size_t bytes = 12345;
        ASSERT_STATUS(fusednorm_bwd_workspace_size(a, &bytes), want);
        if (names) ASSERT_CONTAINS(fusednorm_last_error(), names);
        ASSERT_EQ_INT(bytes, 12345);
    }
}

#define FWD_CASE(label, stmt, want, names)                                                                           \
    do {                                                                                                             \
        fusednorm_fwd_args a = valid_fwd(s, norm);                                                                   \
        stmt;                                                                                                        \
        expect_fwd(s, label, &a, want, names);                                                                       \
    } while (0)
#define BWD_CASE(label, stmt, want, names)                                                                           \
    do {                                                                                                             \
        fusednorm_bwd_args a = valid_bwd(s, norm);                                                                   \
        stmt;                                                                                                        \
        expect_bwd(s, label, &a, want, names);                                                                       \
    } while (0)

static void test_fwd_errors(setup *s, fusednorm_norm norm)
{
    const fusednorm_status INV = FUSEDNORM_ERROR_INVALID_ARGUMENT;
    /* The baseline is valid: each case below breaks exactly one thing. */
    {
        fusednorm_fwd_args a = valid_fwd(s, norm);
        snprintf(th_context, sizeof th_context, "%s fwd baseline", th_backend_name(s->be));
        ASSERT_STATUS(fusednorm_fwd(&a), FUSEDNORM_OK);
    }
    snprintf(th_context, sizeof th_context, "fwd NULL");
    poison_outputs(s);
    ASSERT_STATUS(fusednorm_fwd(NULL), INV);
    ASSERT_CONTAINS(fusednorm_last_error(), "args");
    expect_nothing_written(s);

    FWD_CASE("rows < 0", a.rows = -1, INV, "rows");
    FWD_CASE("rows very negative", a.rows = INT64_MIN, INV, "rows");
    FWD_CASE("cols == 0", a.cols = 0, INV, "cols");
    FWD_CASE("cols < 0", a.cols = -8, INV, "cols");
    FWD_CASE("rows*cols overflows", (a.rows = INT64_MAX / 4, a.cols = 8), INV, "rows");
    FWD_CASE("eps < 0", a.eps = -1e-5f, INV, "eps");
    FWD_CASE("eps NaN", a.eps = NAN, INV, "eps");
    FWD_CASE("eps Inf", a.eps = INFINITY, INV, "eps");
    FWD_CASE("weight_offset NaN", a.weight_offset = NAN, INV, "weight_offset");
    FWD_CASE("weight_offset -Inf", a.weight_offset = -INFINITY, INV, "weight_offset");
    FWD_CASE("x NULL", a.x.data = NULL, INV, "x");
    FWD_CASE("y NULL", a.y.data = NULL, INV, "y");
    FWD_CASE("x.row_stride < 0", a.x.row_stride = -1, INV, "x.row_stride");
    FWD_CASE("x.row_stride < cols", a.x.row_stride = COLS - 1, INV, "x.row_stride");
    FWD_CASE("residual.row_stride < cols", a.residual.row_stride = 1, INV, "residual.row_stride");
    FWD_CASE("y.row_stride < cols", a.y.row_stride = COLS - 1, INV, "y.row_stride");
    FWD_CASE("residual_out.row_stride < 0", a.residual_out.row_stride = -COLS, INV, "residual_out.row_stride");
    FWD_CASE("x.row_stride*rows overflows", a.x.row_stride = INT64_MAX / 2, INV, "x.row_stride");
    FWD_CASE("x.dtype out of range", a.x.dtype = (fusednorm_dtype)3, INV, "x.dtype");
    FWD_CASE("x.dtype negative", a.x.dtype = (fusednorm_dtype)-1, INV, "x.dtype");
    FWD_CASE("residual.dtype", a.residual.dtype = (fusednorm_dtype)9, INV, "residual.dtype");
    FWD_CASE("weight.dtype", a.weight.dtype = (fusednorm_dtype)3, INV, "weight.dtype");
    FWD_CASE("bias.dtype", a.bias.dtype = (fusednorm_dtype)3, INV, "bias.dtype");
    FWD_CASE("y.dtype", a.y.dtype = (fusednorm_dtype)4, INV, "y.dtype");
    FWD_CASE("residual_out.dtype", a.residual_out.dtype = (fusednorm_dtype)3, INV, "residual_out.dtype");
    FWD_CASE("norm out of range", a.norm = (fusednorm_norm)2, INV, "norm");
    FWD_CASE("norm negative", a.norm = (fusednorm_norm)-1, INV, "norm");
    FWD_CASE("backend out of range", a.backend = (fusednorm_backend)2, INV, "backend");
    if (norm == FUSEDNORM_RMSNORM) FWD_CASE("mean for rmsnorm", a.mean = th_data(&s->mean), INV, "mean");
    /* Partial aliasing: same buffer, different stride / dtype. */
    FWD_CASE("y aliases x with another dtype", (a.y = a.x, a.y.dtype = FUSEDNORM_BF16), INV, "y");
}

static void test_bwd_errors(setup *s, fusednorm_norm norm)
{
    const fusednorm_status INV = FUSEDNORM_ERROR_INVALID_ARGUMENT;
    {
        fusednorm_bwd_args a = valid_bwd(s, norm);
        snprintf(th_context, sizeof th_context, "%s bwd baseline", th_backend_name(s->be));
        ASSERT_STATUS(fusednorm_bwd(&a), FUSEDNORM_OK);
    }
    snprintf(th_context, sizeof th_context, "bwd NULL");
    poison_outputs(s);
    ASSERT_STATUS(fusednorm_bwd(NULL), INV);
    ASSERT_CONTAINS(fusednorm_last_error(), "args");
    size_t bytes = 0;
    ASSERT_STATUS(fusednorm_bwd_workspace_size(NULL, &bytes), INV);
    ASSERT_CONTAINS(fusednorm_last_error(), "args");
    {
        fusednorm_bwd_args a = valid_bwd(s, norm);
        ASSERT_STATUS(fusednorm_bwd_workspace_size(&a, NULL), INV);
        ASSERT_CONTAINS(fusednorm_last_error(), "bytes");
    }
    expect_nothing_written(s);

    BWD_CASE("rows < 0", a.rows = -5, INV, "rows");
    BWD_CASE("cols == 0", a.cols = 0, INV, "cols");
    BWD_CASE("cols < 0", a.cols = -1, INV, "cols");
    BWD_CASE("rows*cols overflows", (a.rows = 3, a.cols = INT64_MAX / 2), INV, "rows");
    BWD_CASE("eps < 0", a.eps = -1.0f, INV, "eps");
    BWD_CASE("eps NaN", a.eps = NAN, INV, "eps");
    BWD_CASE("eps Inf", a.eps = INFINITY, INV, "eps");
    BWD_CASE("weight_offset Inf", a.weight_offset = INFINITY, INV, "weight_offset");
    BWD_CASE("weight_offset NaN", a.weight_offset = NAN, INV, "weight_offset");
    BWD_CASE("flags unknown bit", a.flags = 1u << 2, INV, "flags");
    BWD_CASE("flags high bit", a.flags = 0x80000000u | FUSEDNORM_ACCUMULATE, INV, "flags");
    BWD_CASE("dy NULL", a.dy.data = NULL, INV, "dy");
    BWD_CASE("x NULL", a.x.data = NULL, INV, "x");
    BWD_CASE("dx NULL", a.dx.data = NULL, INV, "dx");
    BWD_CASE("dy.row_stride < cols", a.dy.row_stride = COLS - 1, INV, "dy.row_stride");
    BWD_CASE("x.row_stride < 0", a.x.row_stride = -1, INV, "x.row_stride");
    BWD_CASE("dresidual_out.row_stride < cols", a.dresidual_out.row_stride = 2, INV, "dresidual_out.row_stride");
    BWD_CASE("dx.row_stride < cols", a.dx.row_stride = 1, INV, "dx.row_stride");
    BWD_CASE("dresidual.row_stride < 0", a.dresidual.row_stride = -2, INV, "dresidual.row_stride");
    BWD_CASE("dy.dtype", a.dy.dtype = (fusednorm_dtype)3, INV, "dy.dtype");
    BWD_CASE("x.dtype", a.x.dtype = (fusednorm_dtype)-2, INV, "x.dtype");
    BWD_CASE("weight.dtype", a.weight.dtype = (fusednorm_dtype)5, INV, "weight.dtype");
    BWD_CASE("dresidual_out.dtype", a.dresidual_out.dtype = (fusednorm_dtype)3, INV, "dresidual_out.dtype");
    BWD_CASE("dx.dtype", a.dx.dtype = (fusednorm_dtype)3, INV, "dx.dtype");
    BWD_CASE("dresidual.dtype", a.dresidual.dtype = (fusednorm_dtype)3, INV, "dresidual.dtype");
    BWD_CASE("dweight.dtype", a.dweight.dtype = (fusednorm_dtype)3, INV, "dweight.dtype");
    BWD_CASE("dbias.dtype", a.dbias.dtype = (fusednorm_dtype)3, INV, "dbias.dtype");
    BWD_CASE("norm", a.norm = (fusednorm_norm)7, INV, "norm");
    BWD_CASE("backend", a.backend = (fusednorm_backend)-1, INV, "backend");
    BWD_CASE("dweight without weight", a.weight.data = NULL, INV, "dweight");
    if (norm == FUSEDNORM_RMSNORM) BWD_CASE("mean for rmsnorm", a.mean = th_data(&s->gmean), INV, "mean");
    else BWD_CASE("layernorm rstd without mean", a.mean = NULL, INV, "rstd");
    BWD_CASE("dx aliases dy with another stride", (a.dx = a.dy, a.dx.row_stride = COLS + 1), INV, "dx");

    /* Workspace: only testable when the backend needs one. */
    fusednorm_bwd_args q = valid_bwd(s, norm);
    size_t need = 0;
    snprintf(th_context, sizeof th_context, "%s bwd workspace size", th_backend_name(s->be));
    ASSERT_STATUS(fusednorm_bwd_workspace_size(&q, &need), FUSEDNORM_OK);
    if (need > 0) {
        BWD_CASE("workspace NULL", (a.workspace = NULL, a.workspace_bytes = need), FUSEDNORM_ERROR_WORKSPACE,
                 "workspace");
        BWD_CASE("workspace 0 bytes", a.workspace_bytes = 0, FUSEDNORM_ERROR_WORKSPACE, "workspace");
        BWD_CASE("workspace one byte short", a.workspace_bytes = need - 1, FUSEDNORM_ERROR_WORKSPACE, "workspace");
        if (need <= s->ws_bytes) {
            fusednorm_bwd_args a = valid_bwd(s, norm);
            a.workspace_bytes = need;
            snprintf(th_context, sizeof th_context, "%s bwd exact workspace", th_backend_name(s->be));
            ASSERT_STATUS(fusednorm_bwd(&a), FUSEDNORM_OK);
        }
    } else {
        printf("note: %s backward needs no workspace for rows %d cols %d; workspace errors not exercised\n",
               th_backend_name(s->be), ROWS, COLS);
    }
}

static void test_cuda_missing(void)
{
    if (fusednorm_cuda_available()) return;
    /* Host buffers: an implementation that touches them would show it. */
    setup s;
    setup_init(&s, FUSEDNORM_CPU);
    for (int n = 0; n < 2; n++) {
        fusednorm_norm norm = (fusednorm_norm)n;
        fusednorm_fwd_args f = valid_fwd(&s, norm);
        f.backend = FUSEDNORM_CUDA;
        expect_fwd(&s, "CUDA backend without CUDA", &f, FUSEDNORM_ERROR_UNSUPPORTED, NULL);
        ASSERT_TRUE(strlen(fusednorm_last_error()) > 0);
        fusednorm_bwd_args b = valid_bwd(&s, norm);
        b.backend = FUSEDNORM_CUDA;
        expect_bwd(&s, "CUDA backend without CUDA", &b, FUSEDNORM_ERROR_UNSUPPORTED, NULL);
        ASSERT_TRUE(strlen(fusednorm_last_error()) > 0);
        size_t bytes = 0;
        ASSERT_STATUS(fusednorm_bwd_workspace_size(&b, &bytes), FUSEDNORM_ERROR_UNSUPPORTED);
    }
    setup_free(&s);
}

static void test_strings_and_version(void)
{
    snprintf(th_context, sizeof th_context, "status strings");
    const fusednorm_status codes[] = {FUSEDNORM_OK,
                                      FUSEDNORM_ERROR_INVALID_ARGUMENT,
                                      FUSEDNORM_ERROR_UNSUPPORTED,
                                      FUSEDNORM_ERROR_WORKSPACE,
                                      FUSEDNORM_ERROR_DEVICE,
                                      FUSEDNORM_ERROR_OUT_OF_MEMORY};
    const size_t n = sizeof codes / sizeof codes[0];
    const char *unknown = fusednorm_status_string((fusednorm_status)99);
    ASSERT_TRUE(unknown != NULL && strlen(unknown) > 0);
    ASSERT_TRUE(fusednorm_status_string((fusednorm_status)-1) != NULL);
    for (size_t i = 0; i < n; i++) {
        const char *s = fusednorm_status_string(codes[i]);
        ASSERT_TRUE(s != NULL && strlen(s) > 0);
        ASSERT_TRUE(s != NULL && unknown != NULL && strcmp(s, unknown) != 0);
        for (size_t j = 0; j < i; j++) ASSERT_TRUE(strcmp(s, fusednorm_status_string(codes[j])) != 0);
    }
    ASSERT_CONTAINS(fusednorm_status_string(FUSEDNORM_ERROR_WORKSPACE), "workspace");
    ASSERT_EQ_INT(fusednorm_version(), 100);
    ASSERT_EQ_INT(fusednorm_version(),
                  FUSEDNORM_VERSION_MAJOR * 10000 + FUSEDNORM_VERSION_MINOR * 100 + FUSEDNORM_VERSION_PATCH);
    ASSERT_TRUE(fusednorm_cuda_available() == 0 || fusednorm_cuda_available() == 1);
}

int main(void)
{
    th_init("test_api_errors");
    test_strings_and_version();
    for (int be = 0; be < 2; be++) {
        if (!th_backend_available((fusednorm_backend)be)) continue;
        setup s;
        setup_init(&s, (fusednorm_backend)be);
        for (int n = 0; n < 2; n++) {
            test_fwd_errors(&s, (fusednorm_norm)n);
            test_bwd_errors(&s, (fusednorm_norm)n);
        }
        setup_free(&s);
    }
    test_cuda_missing();
    return th_finish();
}
