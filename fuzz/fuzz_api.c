/*
 * libFuzzer target over the public C API on the CPU backend.
 *
 * Each input decodes into one call of fusednorm_fwd, or of
 * fusednorm_bwd_workspace_size then fusednorm_bwd: norm, rows, cols (small
 * shapes that get real buffers, and huge, negative and overflowing ones that
 * must be refused), strides, dtypes (out-of-range ones too), eps and
 * weight_offset (NaN, Inf, negative), flags, which optional tensors are
 * present, exact and inexact aliasing, and the workspace given.
 *
 * Every buffer is allocated to its exact extent so that ASan reports any
 * access outside it; outputs are poisoned with 0xFF. The fuzzer decides on
 * its own, from the invalid list of design.md and the aliasing rules of
 * docs/errors.md (never by calling the library's validator), whether the call
 * is valid, and asserts:
 *   - an invalid call returns FUSEDNORM_ERROR_INVALID_ARGUMENT with a message
 *     naming the function, and no byte of any buffer (nor *bytes) changes;
 *   - a valid call returns OK (WORKSPACE when the workspace given is short,
 *     UNSUPPORTED for the CUDA backend of this CPU-only build, both writing
 *     nothing), never writes an input, never writes the padding between rows
 *     of a strided output, and with rows == 0 writes nothing but the zeroed
 *     dweight/dbias (left alone with FUSEDNORM_ACCUMULATE).
 * A crash, a sanitizer report or a failed assertion is a finding.
 */
#include "fusednorm.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensors that get buffers are capped so that one input runs in microseconds;
 * a valid call over more elements than this is skipped, not made. */
enum { MAX_ELEMS = 1 << 15, SMALL_ELEMS = 4096 };

/* ---- reading the input ---------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t rd_u8(reader *r)
{
    if (r->n == 0) return 0;
    r->n--;
    return *r->p++;
}
static uint64_t rd_bytes(reader *r, int count)
{
    uint64_t v = 0;
    for (int i = 0; i < count; i++) v |= (uint64_t)rd_u8(r) << (8 * i);
    return v;
}

static const int64_t edge_ints[] = {0, 1, -1, 2, 7, 4097, 65537, INT64_MAX, INT64_MIN, INT64_MAX / 2, INT64_MAX / 2 + 1,
                                    (int64_t)1 << 31, ((int64_t)1 << 31) - 1, (int64_t)1 << 32, 3037000499LL,
                                    3037000500LL, (int64_t)1 << 62, -((int64_t)1 << 40)};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int64_t rd_edge_or_raw(reader *r)
{
    uint8_t m = rd_u8(r);
    if (m & 0x80) return (int64_t)rd_bytes(r, 8);
    return edge_ints[m % COUNT(edge_ints)];
}

static float rd_scalar(reader *r, float usual)
{
    static const float special[] = {0.0f, -0.0f, 1e-5f, 1e-6f, 1.0f, -1e-6f, -1.0f, FLT_MAX, -FLT_MAX, FLT_MIN,
                                    1e-45f /* denormal */};
    uint8_t m = rd_u8(r);
    switch (m % 8) {
    case 0: return NAN;
    case 1: return (m & 8) ? INFINITY : -INFINITY;
    case 2: return special[(m >> 3) % COUNT(special)];
    case 3: {
        uint32_t u = (uint32_t)rd_bytes(r, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: return usual;
    }
}

static int rd_enum(reader *r, int in_range_count)
{
    static const int strange[] = {-1, 3, 255, 0x7fffffff, (int)0x80000000u};
    uint8_t m = rd_u8(r);
    if (m < 224) return m % in_range_count;
    return strange[m % COUNT(strange)];
}

/* ---- the call being built ------------------------------------------------- */

enum { FWD_X, FWD_RES, FWD_W, FWD_B, FWD_Y, FWD_ROUT, FWD_RSTD, FWD_MEAN, FWD_COUNT };
enum { BWD_DY, BWD_X, BWD_W, BWD_DROUT, BWD_DX, BWD_DRES, BWD_DW, BWD_DB, BWD_RSTD, BWD_MEAN, BWD_COUNT };
enum { MAX_SLOTS = 10 };

typedef struct {
    const char *name;
    int present, two_d, is_output, required, is_fp32_vector_of_rows; /* rstd/mean: float[rows] */
    int dtype;
    int64_t stride;      /* as given (0 = cols) */
    int alias_of;        /* -1, or the slot whose buffer this one shares */
    int buffer;          /* index into the buffer table */
} slot;

typedef struct {
    uint8_t *data;       /* exactly `bytes` long (at least 1, so that data is never NULL) */
    size_t bytes;
    uint8_t *before;     /* copy taken just before the call */
    int written;         /* some output slot maps here */
} buffer;

typedef struct {
    int backward;
    int norm, backend;
    int64_t rows, cols;
    float eps, weight_offset;
    unsigned flags;
    int nslots;
    slot s[MAX_SLOTS];
    int nbuf;
    buffer b[MAX_SLOTS + 1];
} fuzz_case;

static int64_t resolved_stride(const fuzz_case *c, const slot *t) { return t->stride == 0 ? c->cols : t->stride; }

static size_t dtype_bytes(int dtype) { return dtype == FUSEDNORM_F16 || dtype == FUSEDNORM_BF16 ? 2 : 4; }

/* Elements a slot spans: __int128 so that overflowing shapes are measured,
 * not wrapped. */
static __int128 slot_extent(const fuzz_case *c, const slot *t)
{
    if (t->is_fp32_vector_of_rows) return c->rows > 0 ? c->rows : 0;
    if (!t->two_d) return c->cols > 0 ? c->cols : 0;
    if (c->rows <= 0 || c->cols <= 0) return 0;
    __int128 stride = resolved_stride(c, t);
    if (stride < 0) return 0;
    return (__int128)(c->rows - 1) * stride + c->cols;
}

/* ---- the independent validity predicate ------------------------------------ */

static int same_layout(const fuzz_case *c, const slot *a, const slot *b)
{
    return a->dtype == b->dtype && resolved_stride(c, a) == resolved_stride(c, b);
}

/* Buffers are not allocated yet: two slots share one when they alias the
 * same owner (a slot owns its own buffer unless it aliases another). */
static int shares(const fuzz_case *c, int i, int j)
{
    const slot *a = &c->s[i], *b = &c->s[j];
    int owner_a = a->alias_of >= 0 ? a->alias_of : i, owner_b = b->alias_of >= 0 ? b->alias_of : j;
    return a->present && b->present && owner_a == owner_b;
}

/* design.md: invalid are rows < 0; cols <= 0; rows*cols overflowing int64;
 * eps < 0 or not finite; weight_offset not finite; a required tensor NULL;
 * row_stride < 0 or 0 < row_stride < cols; a dtype, norm, backend or flag
 * bit out of range; mean given for RMSNorm; dweight given without weight;
 * LayerNorm rstd given without mean. docs/errors.md adds: a 2-D tensor whose
 * last element lies beyond int64; tensors allowed to alias that share a
 * buffer with a different dtype or stride; and y/residual_out, dx/dresidual,
 * dx/x, dweight/dbias sharing a buffer. Absent tensors' fields are ignored. */
static int call_is_valid(const fuzz_case *c)
{
    if (c->norm != FUSEDNORM_RMSNORM && c->norm != FUSEDNORM_LAYERNORM) return 0;
    if (c->backend != FUSEDNORM_CPU && c->backend != FUSEDNORM_CUDA) return 0;
    if (c->rows < 0 || c->cols <= 0) return 0;
    if ((__int128)c->rows * c->cols > INT64_MAX) return 0;
    if (!(c->eps >= 0.0f) || isinf(c->eps)) return 0;
    if (isnan(c->weight_offset) || isinf(c->weight_offset)) return 0;
    if (c->backward && (c->flags & ~(unsigned)(FUSEDNORM_ACCUMULATE | FUSEDNORM_ATOMIC_DWEIGHT))) return 0;
    for (int i = 0; i < c->nslots; i++) {
        const slot *t = &c->s[i];
        if (!t->present) {
            if (t->required) return 0;
            continue;
        }
        if (t->is_fp32_vector_of_rows) continue;
        if (t->dtype < 0 || t->dtype > FUSEDNORM_BF16) return 0;
        if (!t->two_d) continue;
        int64_t stride = resolved_stride(c, t);
        if (stride < c->cols) return 0;
        if (slot_extent(c, t) > INT64_MAX) return 0;
    }
    if (!c->backward) {
        if (c->s[FWD_MEAN].present && c->norm == FUSEDNORM_RMSNORM) return 0;
        static const int exact_ok[][2] = {{FWD_Y, FWD_X}, {FWD_Y, FWD_RES}, {FWD_ROUT, FWD_X}, {FWD_ROUT, FWD_RES}};
        for (int k = 0; k < COUNT(exact_ok); k++) {
            int i = exact_ok[k][0], j = exact_ok[k][1];
            if (shares(c, i, j) && !same_layout(c, &c->s[i], &c->s[j])) return 0;
        }
        if (shares(c, FWD_Y, FWD_ROUT)) return 0;
    } else {
        if (c->s[BWD_MEAN].present && c->norm == FUSEDNORM_RMSNORM) return 0;
        if (c->s[BWD_RSTD].present && !c->s[BWD_MEAN].present && c->norm == FUSEDNORM_LAYERNORM) return 0;
        if (c->s[BWD_DW].present && !c->s[BWD_W].present) return 0;
        static const int exact_ok[][2] = {
            {BWD_DX, BWD_DY}, {BWD_DX, BWD_DROUT}, {BWD_DRES, BWD_DROUT}, {BWD_DRES, BWD_DY}};
        for (int k = 0; k < COUNT(exact_ok); k++) {
            int i = exact_ok[k][0], j = exact_ok[k][1];
            if (shares(c, i, j) && !same_layout(c, &c->s[i], &c->s[j])) return 0;
        }
        if (shares(c, BWD_DX, BWD_DRES) || shares(c, BWD_DX, BWD_X) || shares(c, BWD_DW, BWD_DB)) return 0;
    }
    return 1;
}

/* ---- decoding ------------------------------------------------------------ */

static void add_slot(fuzz_case *c, const char *name, int two_d, int is_output, int required, int rows_vector)
{
    slot *t = &c->s[c->nslots++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->two_d = two_d;
    t->is_output = is_output;
    t->required = required;
    t->is_fp32_vector_of_rows = rows_vector;
    t->alias_of = -1;
}

static void decode_shape(fuzz_case *c, reader *r)
{
    uint8_t mode = rd_u8(r);
    if (mode % 8 < 6) {  /* small: the shapes that get exercised for real */
        c->rows = rd_u8(r) % 17;
        c->cols = 1 + (int64_t)(rd_bytes(r, 2) % 1100);
        if (c->rows * c->cols > SMALL_ELEMS) c->cols = SMALL_ELEMS / c->rows;
        if (mode & 0x40) c->rows = 0;
    } else {
        c->rows = (mode & 0x10) ? rd_edge_or_raw(r) : rd_u8(r) % 17;
        c->cols = (mode & 0x20) ? rd_edge_or_raw(r) : 1 + rd_u8(r);
    }
}

static void decode_tensor(fuzz_case *c, slot *t, reader *r, int presence_odds)
{
    uint8_t m = rd_u8(r);
    t->present = t->required ? (m % 32 != 0) : (m % 4 < presence_odds);
    t->dtype = rd_enum(r, 3);
    if (!t->two_d) return;
    uint8_t sm = rd_u8(r);
    switch (sm % 16) {
    /* Wrapping arithmetic: cols may be INT64_MAX or INT64_MIN here. */
    case 8: case 9: case 10: t->stride = (int64_t)((uint64_t)c->cols + (sm >> 4)); break;
    case 11: t->stride = (int64_t)((uint64_t)c->cols - 1); break;
    case 12: t->stride = -(int64_t)(1 + (sm >> 4)); break;
    case 13: t->stride = rd_edge_or_raw(r); break;
    case 14: t->stride = c->cols; break;
    case 15: t->stride = (int64_t)rd_bytes(r, 8); break;
    default: t->stride = 0; break;
    }
}

/* Makes slot `a` share slot `b`'s buffer; `exact` copies b's dtype and stride
 * (the aliasing the contract allows), otherwise a keeps its own. */
static void alias(fuzz_case *c, int a, int b, int exact)
{
    if (!c->s[b].present || c->s[b].alias_of >= 0 || c->s[a].alias_of >= 0) return;
    c->s[a].present = 1;
    c->s[a].alias_of = b;
    if (exact) {
        c->s[a].dtype = c->s[b].dtype;
        c->s[a].stride = c->s[b].stride;
    }
}

static void decode(fuzz_case *c, reader *r)
{
    memset(c, 0, sizeof *c);
    uint8_t head = rd_u8(r);
    c->backward = head & 1;
    c->norm = rd_enum(r, 2);
    c->backend = (head & 0x06) == 0x06 ? rd_enum(r, 2) : FUSEDNORM_CPU;
    decode_shape(c, r);
    c->eps = rd_scalar(r, 1e-5f);
    c->weight_offset = rd_scalar(r, (head & 8) ? 1.0f : 0.0f);
    uint8_t fl = rd_u8(r);
    c->flags = fl < 240 ? (unsigned)(fl & 3) : (unsigned)rd_bytes(r, 4);
    if (!c->backward) {
        add_slot(c, "x", 1, 0, 1, 0);
        add_slot(c, "residual", 1, 0, 0, 0);
        add_slot(c, "weight", 0, 0, 0, 0);
        add_slot(c, "bias", 0, 0, 0, 0);
        add_slot(c, "y", 1, 1, 1, 0);
        add_slot(c, "residual_out", 1, 1, 0, 0);
        add_slot(c, "rstd", 0, 1, 0, 1);
        add_slot(c, "mean", 0, 1, 0, 1);
    } else {
        add_slot(c, "dy", 1, 0, 1, 0);
        add_slot(c, "x", 1, 0, 1, 0);
        add_slot(c, "weight", 0, 0, 0, 0);
        add_slot(c, "dresidual_out", 1, 0, 0, 0);
        add_slot(c, "dx", 1, 1, 1, 0);
        add_slot(c, "dresidual", 1, 1, 0, 0);
        add_slot(c, "dweight", 0, 1, 0, 0);
        add_slot(c, "dbias", 0, 1, 0, 0);
        add_slot(c, "rstd", 0, 0, 0, 1);
        add_slot(c, "mean", 0, 0, 0, 1);
    }
    for (int i = 0; i < c->nslots; i++) decode_tensor(c, &c->s[i], r, 2);
    /* Make the statistics usually consistent with the norm, so that valid
     * calls are common. */
    uint8_t stats = rd_u8(r);
    int rstd_slot = c->backward ? BWD_RSTD : FWD_RSTD, mean_slot = c->backward ? BWD_MEAN : FWD_MEAN;
    if (stats < 192) {
        c->s[mean_slot].present = c->norm == FUSEDNORM_LAYERNORM && c->s[rstd_slot].present;
        if (c->backward && c->s[BWD_DW].present && !(stats & 1)) c->s[BWD_W].present = 1;
    }
    uint8_t al = rd_u8(r);
    int exact = !(al & 0x80) || (rd_u8(r) & 1);
    if (!c->backward) {
        if (al & 1) alias(c, FWD_Y, FWD_X, exact);
        if (al & 2) alias(c, FWD_ROUT, FWD_RES, exact);
        if (al & 4) alias(c, FWD_ROUT, FWD_X, exact);
        if ((al & 0x18) == 0x18) alias(c, FWD_Y, FWD_ROUT, exact);
    } else {
        if (al & 1) alias(c, BWD_DX, BWD_DY, exact);
        if (al & 2) alias(c, BWD_DRES, BWD_DROUT, exact);
        if ((al & 0x0c) == 0x0c) alias(c, BWD_DX, BWD_X, exact);
        if ((al & 0x14) == 0x14) alias(c, BWD_DX, BWD_DRES, exact);
        if ((al & 0x24) == 0x24) alias(c, BWD_DW, BWD_DB, exact);
    }
}

/* ---- buffers ------------------------------------------------------------- */

static uint64_t lcg(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return *state >> 11;
}

/* Finite values of moderate size in the dtype, or the raw fuzz bytes
 * (NaN, Inf, subnormals, anything). */
static void fill_input(uint8_t *p, size_t bytes, int dtype, reader *r, uint64_t *state, int raw)
{
    if (raw) {
        for (size_t i = 0; i < bytes; i++) p[i] = r->n ? rd_u8(r) : (uint8_t)lcg(state);
        return;
    }
    if (dtype_bytes(dtype) == 4) {
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            float f = (float)((double)(lcg(state) % 20001) / 5000.0 - 2.0);
            memcpy(p + i, &f, 4);
        }
    } else {
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            uint64_t v = lcg(state);
            uint16_t h = dtype == FUSEDNORM_F16 ? (uint16_t)(((v & 1) << 15) | ((10 + (v >> 1) % 6) << 10) | ((v >> 8) & 0x3ff))
                                                : (uint16_t)(((v & 1) << 15) | ((122 + (v >> 1) % 6) << 7) | ((v >> 8) & 0x7f));
            memcpy(p + i, &h, 2);
        }
    }
}

static int make_buffers(fuzz_case *c, int valid, reader *r)
{
    uint64_t state = 0x9e3779b97f4a7c15ULL ^ (uint64_t)r->n;
    int raw = rd_u8(r) < 64;
    for (int i = 0; i < c->nslots; i++) {
        slot *t = &c->s[i];
        if (!t->present || t->alias_of >= 0) continue;
        __int128 elems = slot_extent(c, t);
        if (elems > MAX_ELEMS) {
            if (valid) return 0;   /* real work too big for a fuzz input: skip */
            elems = 16;            /* refused before any access, so any size does */
        }
        size_t bytes = (size_t)elems * (t->is_fp32_vector_of_rows ? 4 : dtype_bytes(t->dtype));
        /* A slot aliased by another output spans the larger extent of the two. */
        for (int j = 0; j < c->nslots; j++) {
            if (c->s[j].alias_of != i) continue;
            __int128 e2 = slot_extent(c, &c->s[j]);
            if (e2 > MAX_ELEMS) {
                if (valid) return 0;
                e2 = 16;
            }
            size_t b2 = (size_t)e2 * dtype_bytes(c->s[j].dtype);
            if (b2 > bytes) bytes = b2;
        }
        buffer *b = &c->b[c->nbuf];
        t->buffer = c->nbuf++;
        b->bytes = bytes;
        b->data = malloc(bytes ? bytes : 1);
        b->before = malloc(bytes ? bytes : 1);
        b->written = 0;
    }
    for (int i = 0; i < c->nslots; i++) {
        slot *t = &c->s[i];
        if (t->present && t->alias_of >= 0) t->buffer = c->s[t->alias_of].buffer;
        if (t->present && t->is_output) c->b[t->buffer].written = 1;
    }
    for (int i = 0; i < c->nslots; i++) {
        slot *t = &c->s[i];
        if (!t->present || t->alias_of >= 0) continue;
        buffer *b = &c->b[t->buffer];
        int dtype = t->is_fp32_vector_of_rows ? FUSEDNORM_F32 : t->dtype;
        if (b->written && t->is_output)
            memset(b->data, 0xFF, b->bytes);
        else /* an input, possibly one that an output aliases */
            fill_input(b->data, b->bytes, dtype, r, &state, raw);
    }
    return 1;
}

static void free_buffers(fuzz_case *c)
{
    for (int i = 0; i < c->nbuf; i++) {
        free(c->b[i].data);
        free(c->b[i].before);
    }
    c->nbuf = 0;
}

static void snapshot(fuzz_case *c)
{
    for (int i = 0; i < c->nbuf; i++) memcpy(c->b[i].before, c->b[i].data, c->b[i].bytes);
}

/* ---- checks ---------------------------------------------------------------- */

static void describe(const fuzz_case *c)
{
    fprintf(stderr, "  %s norm=%d backend=%d rows=%lld cols=%lld eps=%g weight_offset=%g flags=0x%x\n",
            c->backward ? "bwd" : "fwd", c->norm, c->backend, (long long)c->rows, (long long)c->cols,
            (double)c->eps, (double)c->weight_offset, c->flags);
    for (int i = 0; i < c->nslots; i++) {
        const slot *t = &c->s[i];
        if (!t->present) continue;
        fprintf(stderr, "  %-13s dtype=%d stride=%lld buffer=%d%s%s\n", t->name, t->dtype, (long long)t->stride,
                t->buffer, t->alias_of >= 0 ? " (alias of " : "", t->alias_of >= 0 ? c->s[t->alias_of].name : "");
    }
}

#define FAIL(c, ...)                                                                                                  \
    do {                                                                                                              \
        fprintf(stderr, "fuzz_api: ");                                                                                \
        fprintf(stderr, __VA_ARGS__);                                                                                 \
        fprintf(stderr, "\n  last error: %s\n", fusednorm_last_error());                                             \
        describe(c);                                                                                                  \
        abort();                                                                                                      \
    } while (0)

static void expect_unchanged(fuzz_case *c, const char *why)
{
    for (int i = 0; i < c->nbuf; i++)
        if (memcmp(c->b[i].before, c->b[i].data, c->b[i].bytes) != 0)
            FAIL(c, "%s, yet buffer %d (%zu bytes) changed", why, i, c->b[i].bytes);
}

/* After a valid call: inputs are untouched, and so is the padding between the
 * rows of every strided output. */
static void expect_only_outputs_written(fuzz_case *c)
{
    for (int i = 0; i < c->nbuf; i++)
        if (!c->b[i].written && memcmp(c->b[i].before, c->b[i].data, c->b[i].bytes) != 0)
            FAIL(c, "the call wrote to input buffer %d", i);
    for (int i = 0; i < c->nslots; i++) {
        const slot *t = &c->s[i];
        if (!t->present || !t->is_output || !t->two_d) continue;
        int64_t stride = resolved_stride(c, t);
        size_t es = dtype_bytes(t->dtype);
        const buffer *b = &c->b[t->buffer];
        for (int64_t row = 0; row + 1 < c->rows && stride > c->cols; row++) {
            size_t from = (size_t)(row * stride + c->cols) * es, to = (size_t)((row + 1) * stride) * es;
            if (memcmp(b->before + from, b->data + from, to - from) != 0)
                FAIL(c, "%s: padding after row %lld was written", t->name, (long long)row);
        }
    }
}

static void *slot_data(fuzz_case *c, int i) { return c->s[i].present ? c->b[c->s[i].buffer].data : NULL; }

static fusednorm_tensor as_tensor(fuzz_case *c, int i)
{
    fusednorm_tensor t = {slot_data(c, i), (fusednorm_dtype)c->s[i].dtype, c->s[i].stride};
    return t;
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static void expect_invalid(fuzz_case *c, fusednorm_status s, const char *fn)
{
    if (s != FUSEDNORM_ERROR_INVALID_ARGUMENT) FAIL(c, "%s accepted an invalid call (status %d)", fn, (int)s);
    if (!starts_with(fusednorm_last_error(), fn)) FAIL(c, "%s: the message does not name the function", fn);
    expect_unchanged(c, "the call was invalid");
}

static void run_fwd(fuzz_case *c, int valid)
{
    fusednorm_fwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = (fusednorm_norm)c->norm;
    a.rows = c->rows;
    a.cols = c->cols;
    a.eps = c->eps;
    a.weight_offset = c->weight_offset;
    a.x = as_tensor(c, FWD_X);
    a.residual = as_tensor(c, FWD_RES);
    a.weight = as_tensor(c, FWD_W);
    a.bias = as_tensor(c, FWD_B);
    a.y = as_tensor(c, FWD_Y);
    a.residual_out = as_tensor(c, FWD_ROUT);
    a.rstd = slot_data(c, FWD_RSTD);
    a.mean = slot_data(c, FWD_MEAN);
    a.backend = (fusednorm_backend)c->backend;
    snapshot(c);
    fusednorm_status s = fusednorm_fwd(&a);
    if (!valid) {
        expect_invalid(c, s, "fusednorm_fwd");
        return;
    }
    if (c->backend == FUSEDNORM_CUDA) {
        /* fusednorm_fwd answers rows == 0 before it picks a backend. */
        if (s != FUSEDNORM_ERROR_UNSUPPORTED && !(s == FUSEDNORM_OK && c->rows == 0))
            FAIL(c, "CUDA call in a CPU-only build gave status %d", (int)s);
        expect_unchanged(c, "the CUDA backend is not built");
        return;
    }
    if (s != FUSEDNORM_OK) FAIL(c, "fusednorm_fwd refused a valid call (status %d)", (int)s);
    if (c->rows == 0)
        expect_unchanged(c, "rows == 0");
    else
        expect_only_outputs_written(c);
}

static void run_bwd(fuzz_case *c, int valid, reader *r)
{
    fusednorm_bwd_args a;
    memset(&a, 0, sizeof a);
    a.norm = (fusednorm_norm)c->norm;
    a.rows = c->rows;
    a.cols = c->cols;
    a.eps = c->eps;
    a.weight_offset = c->weight_offset;
    a.flags = c->flags;
    a.dy = as_tensor(c, BWD_DY);
    a.x = as_tensor(c, BWD_X);
    a.weight = as_tensor(c, BWD_W);
    a.dresidual_out = as_tensor(c, BWD_DROUT);
    a.dx = as_tensor(c, BWD_DX);
    a.dresidual = as_tensor(c, BWD_DRES);
    a.dweight = as_tensor(c, BWD_DW);
    a.dbias = as_tensor(c, BWD_DB);
    a.rstd = slot_data(c, BWD_RSTD);
    a.mean = slot_data(c, BWD_MEAN);
    a.backend = (fusednorm_backend)c->backend;

    const size_t sentinel = (size_t)0x5a5a5a5a5a5a5a5aULL;
    size_t need = sentinel;
    snapshot(c);
    fusednorm_status s = fusednorm_bwd_workspace_size(&a, &need);
    if (!valid) {
        expect_invalid(c, s, "fusednorm_bwd_workspace_size");
        if (need != sentinel) FAIL(c, "an invalid workspace query wrote *bytes");
    } else if (c->backend == FUSEDNORM_CUDA) {
        if (s != FUSEDNORM_ERROR_UNSUPPORTED) FAIL(c, "CUDA workspace query in a CPU-only build gave %d", (int)s);
        expect_unchanged(c, "the CUDA backend is not built");
    } else {
        if (s != FUSEDNORM_OK) FAIL(c, "fusednorm_bwd_workspace_size refused a valid call (status %d)", (int)s);
        expect_unchanged(c, "a workspace query writes nothing");
        if (need > (size_t)64 << 20) FAIL(c, "workspace of %zu bytes for a small problem", need);
    }

    /* The workspace: what was asked for, more, one byte short, or none. */
    uint8_t wm = rd_u8(r);
    size_t given = 0;
    int usable_need = valid && c->backend == FUSEDNORM_CPU;
    if (usable_need) {
        switch (wm % 8) {
        case 0: given = need > 0 ? need - 1 : 0; break;
        case 1: given = 0; break;
        case 2: given = need + 64; break;
        default: given = need; break;
        }
    } else {
        given = wm % 64;
    }
    uint8_t *ws = given ? malloc(given) : NULL;
    if (ws) memset(ws, 0xFF, given);
    a.workspace = (wm % 8 == 1 && usable_need) ? NULL : ws;
    a.workspace_bytes = (wm % 8 == 1 && usable_need && (wm & 0x80)) ? need : given;
    int short_workspace = usable_need && need > 0 && (a.workspace == NULL || a.workspace_bytes < need);

    snapshot(c);
    s = fusednorm_bwd(&a);
    if (!valid) {
        expect_invalid(c, s, "fusednorm_bwd");
    } else if (c->backend == FUSEDNORM_CUDA) {
        if (s != FUSEDNORM_ERROR_UNSUPPORTED) FAIL(c, "CUDA call in a CPU-only build gave status %d", (int)s);
        expect_unchanged(c, "the CUDA backend is not built");
    } else if (short_workspace) {
        if (s != FUSEDNORM_ERROR_WORKSPACE) FAIL(c, "a short workspace gave status %d", (int)s);
        expect_unchanged(c, "the workspace was short");
    } else {
        if (s != FUSEDNORM_OK) FAIL(c, "fusednorm_bwd refused a valid call (status %d)", (int)s);
        expect_only_outputs_written(c);
        if (c->rows == 0) {
            /* design.md: rows == 0 zeroes dweight/dbias unless ACCUMULATE. */
            for (int i = 0; i < c->nslots; i++) {
                slot *t = &c->s[i];
                if (!t->present || !t->is_output) continue;
                buffer *b = &c->b[t->buffer];
                int reduced = i == BWD_DW || i == BWD_DB;
                if (reduced && !(c->flags & FUSEDNORM_ACCUMULATE)) {
                    for (size_t k = 0; k < b->bytes; k++)
                        if (b->data[k] != 0) FAIL(c, "rows == 0: %s was not zeroed", t->name);
                } else if (memcmp(b->before, b->data, b->bytes) != 0) {
                    FAIL(c, "rows == 0: %s was written", t->name);
                }
            }
        }
    }
    free(ws);
}

/* With FUZZ_API_STATS set, how the inputs split, printed at exit: a fuzzer
 * that only ever builds invalid calls would test little. */
static long count_valid, count_invalid, count_skipped;
static void print_stats(void)
{
    fprintf(stderr, "fuzz_api: %ld valid calls, %ld invalid calls, %ld skipped (too large)\n", count_valid,
            count_invalid, count_skipped);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (getenv("FUZZ_API_STATS")) atexit(print_stats);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    if (size > 0 && data[0] == 0xFE) {  /* the NULL pointers the API must refuse */
        size_t bytes = 7;
        fusednorm_bwd_args b;
        memset(&b, 0, sizeof b);
        if (fusednorm_fwd(NULL) != FUSEDNORM_ERROR_INVALID_ARGUMENT || fusednorm_bwd(NULL) != FUSEDNORM_ERROR_INVALID_ARGUMENT ||
            fusednorm_bwd_workspace_size(NULL, &bytes) != FUSEDNORM_ERROR_INVALID_ARGUMENT ||
            fusednorm_bwd_workspace_size(&b, NULL) != FUSEDNORM_ERROR_INVALID_ARGUMENT || bytes != 7) {
            fprintf(stderr, "fuzz_api: a NULL args or bytes pointer was not refused\n");
            abort();
        }
        return 0;
    }
    fuzz_case *c = calloc(1, sizeof *c);
    decode(c, &r);
    int valid = call_is_valid(c);
    if (!make_buffers(c, valid, &r)) {
        count_skipped++;
    } else {
        *(valid ? &count_valid : &count_invalid) += 1;
        if (c->backward)
            run_bwd(c, valid, &r);
        else
            run_fwd(c, valid);
    }
    free_buffers(c);
    free(c);
    return 0;
}
