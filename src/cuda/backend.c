/*
 * The CUDA backend's host side (C): checks the dtype mix and the device,
 * switches to args->device (and back), fills the kernel parameters, asks the
 * planner for a launch shape, sizes the persistent grid with an occupancy
 * query (cached per device and kernel shape), and launches on args->stream.
 * It never synchronizes the host and never allocates, so a forward/backward
 * pair can be captured in a CUDA graph; the backward's workspace is the
 * caller's.
 */
#include "internal.h"
#include "plan.h"
#include "kernel_params.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#define WS_ALIGN 256
#define TWO_PASS_SMEM_ACC_BYTES (96 * 1024)

/* ---- per-device facts and occupancy, cached (never shared across devices) -- */

typedef struct device_facts {
    int ready, cc_major, sm_count;
    int smem_optin; /* shared memory per block with the opt-in (227 KiB on sm_90, 163 KiB on sm_80) */
} device_facts;

/* Kept for the rows kernels' static shared memory (the reduction scratch,
 * 1 KiB) out of the opt-in limit when sizing their dynamic part. */
#define ROWS_STATIC_SMEM_BYTES 2048

enum { MAX_DEVICES = 64, OCC_CACHE = 512 };
static device_facts g_devices[MAX_DEVICES];

typedef struct occ_entry {
    int used, device, is_bwd, dt_x, dt2, vec, ept, tpr, threads, cluster, smem_rows, two_pass; /* dt2: sizes smem */
    int variant; /* occ_variant: the features that pick the kernel variant and size its weight cache */
    int64_t smem_acc_cols; /* two-pass backward: columns of shared-memory partial sums (0: none) */
    int active;
} occ_entry;
static occ_entry g_occ[OCC_CACHE];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static fusednorm_status cuda_fail(const char *fn, const char *what, cudaError_t e)
{
    cudaGetLastError(); /* a non-sticky error must not be reported again by a later call */
    if (e == cudaErrorMemoryAllocation)
        return fn_error(FUSEDNORM_ERROR_OUT_OF_MEMORY, "%s: %s: %s", fn, what, cudaGetErrorString(e));
    return fn_error(FUSEDNORM_ERROR_DEVICE, "%s: %s: %s (%s)", fn, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static fusednorm_status device_facts_get(int dev, device_facts *out, const char *fn)
{
    pthread_mutex_lock(&g_lock);
    device_facts f = g_devices[dev];
    pthread_mutex_unlock(&g_lock);
    if (!f.ready) {
        cudaError_t e = cudaDeviceGetAttribute(&f.cc_major, cudaDevAttrComputeCapabilityMajor, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&f.sm_count, cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (e != cudaSuccess) return cuda_fail(fn, "reading device attributes", e);
        f.ready = 1;
        pthread_mutex_lock(&g_lock);
        g_devices[dev] = f;
        pthread_mutex_unlock(&g_lock);
    }
    *out = f;
    return FUSEDNORM_OK;
}

/* Switches to `device` for the duration of a call and back afterwards. */
typedef struct device_guard {
    int prev, switched;
} device_guard;

/* The device count cannot change within a process (CUDA_VISIBLE_DEVICES is
 * read once, at initialization), so it is asked for once. */
static pthread_once_t g_count_once = PTHREAD_ONCE_INIT;
static int g_device_count;
static cudaError_t g_device_count_error;
static void read_device_count(void)
{
    g_device_count_error = cudaGetDeviceCount(&g_device_count);
    if (g_device_count_error != cudaSuccess) cudaGetLastError();
}

static fusednorm_status guard_enter(device_guard *g, int device, const char *fn)
{
    g->switched = 0;
    pthread_once(&g_count_once, read_device_count);
    const int count = g_device_count;
    cudaError_t e = g_device_count_error;
    if (e != cudaSuccess || count == 0)
        return fn_error(FUSEDNORM_ERROR_UNSUPPORTED, "%s: no usable CUDA device (%s)", fn,
                        e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    if (device < 0 || device >= count || device >= MAX_DEVICES)
        return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "%s: device (%d) is not a CUDA device ordinal (count %d)", fn,
                        device, count);
    e = cudaGetDevice(&g->prev);
    if (e != cudaSuccess) return cuda_fail(fn, "cudaGetDevice", e);
    if (g->prev != device) {
        e = cudaSetDevice(device);
        if (e != cudaSuccess) return cuda_fail(fn, "cudaSetDevice", e);
        g->switched = 1;
    }
    return FUSEDNORM_OK;
}

static void guard_exit(const device_guard *g)
{
    if (g->switched) cudaSetDevice(g->prev);
}

/* ---- dtype mixes the kernels are built for ------------------------------- */

/* A tensor of a group is either the activation dtype or fp32, and every present
 * tensor of a group shares one dtype. */
static int group_dtype(fusednorm_dtype act, const fusednorm_tensor *const *ts, int n, int *dt)
{
    *dt = -1;
    for (int i = 0; i < n; i++) {
        if (!ts[i]->data) continue;
        if (ts[i]->dtype != act && ts[i]->dtype != FUSEDNORM_F32) return 0;
        if (*dt >= 0 && *dt != (int)ts[i]->dtype) return 0;
        *dt = (int)ts[i]->dtype;
    }
    if (*dt < 0) *dt = (int)act;
    return 1;
}

static fusednorm_status unsupported_mix(const char *fn, const char *what, const fusednorm_tensor *const *ts,
                                        const char *const *names, int n, fusednorm_dtype act)
{
    char buf[256];
    int len = 0;
    for (int i = 0; i < n && len < (int)sizeof buf; i++)
        if (ts[i]->data)
            len += snprintf(buf + len, sizeof buf - len, "%s%s=%s", len ? ", " : "", names[i],
                            fn_dtype_name(ts[i]->dtype));
    if (len == 0) buf[0] = 0;
    return fn_error(FUSEDNORM_ERROR_UNSUPPORTED,
                    "%s: dtype mix not supported on CUDA: %s (%s) with activations %s; each must be the activation dtype or f32, "
                    "and one dtype for the group",
                    fn, what, buf, fn_dtype_name(act));
}

/* ---- alignment ------------------------------------------------------------ */

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* A vector access covers VEC activation elements: 16 bytes of an activation
 * tensor, 32 bytes of an fp32 tensor beside 16-bit activations; both are
 * aligned whenever the base and the row pitch are multiples of 16 bytes. */
static int tensor_vec_ok(const fusednorm_tensor *t)
{
    return !t->data || (aligned16(t->data) && ((size_t)t->row_stride * fn_dtype_size(t->dtype)) % 16 == 0);
}

static int vector_vec_ok(const void *p) { return !p || aligned16(p); }

/* The held kernel's ODD rows (off a 16-byte boundary): an activation tensor
 * absent, or of x's dtype with each row at the same offset within 16 bytes
 * as x's (the same base offset, row pitches equal modulo 16 bytes). */
static int same_phase(const fusednorm_tensor *t, const fusednorm_tensor *x)
{
    const uint64_t e = fn_dtype_size(x->dtype);
    return !t->data || (t->dtype == x->dtype && ((uintptr_t)t->data & 15u) == ((uintptr_t)x->data & 15u) &&
                        ((uint64_t)t->row_stride * e) % 16 == ((uint64_t)x->row_stride * e) % 16);
}

/* The ODD kernels' condition on a call whose rows are off a 16-byte
 * boundary: x element-aligned, and each of the other n activations (absent
 * ones pass) at x's offset within 16 bytes in every row (same_phase). */
static int odd_phase(const fusednorm_tensor *x, int x_bytes, const fusednorm_tensor *const *others, int n)
{
    if ((uintptr_t)x->data & (uintptr_t)(x_bytes - 1)) return 0;
    for (int i = 0; i < n; i++)
        if (!same_phase(others[i], x)) return 0;
    return 1;
}

/* The SHIFT kernels' condition on an activation tensor: absent, or of the
 * 16-bit activation dtype at an element-aligned address (any row pitch). */
static int tensor_shift_ok(const fusednorm_tensor *t, fusednorm_dtype act)
{
    return !t->data || (t->dtype == act && ((uintptr_t)t->data & 1u) == 0);
}

/* ---- occupancy (cached) ---------------------------------------------------- */

/* The features besides the plan and dtypes that change which kernel a rows
 * launch runs (the PLAIN variants of norm_fwd.cu / norm_bwd.cu) or the size of
 * its weight cache, so that each variant gets its own occupancy. */
static int occ_variant(int is_bwd, const void *params, const fn_plan *pl)
{
    const int exact = pl->path == FN_PATH_ROWS_IN_REGISTERS &&
                      (is_bwd ? ((const fn_bwd_params *)params)->cols : ((const fn_fwd_params *)params)->cols) ==
                          (int64_t)pl->cluster * pl->tpr * pl->ept;
    if (is_bwd) {
        const fn_bwd_params *b = (const fn_bwd_params *)params;
        /* dresidual_out and dresidual of the activation dtype: the residual
         * variant that stages dresidual_out (bwd_is_plain_residual) */
        const int res_same = b->dt_dres_out == b->dt_dx && (!b->dres || b->dt_dres == b->dt_dx);
        return (b->w != NULL) | (b->db != NULL) << 1 | (b->dres_out != NULL) << 2 | (b->dres != NULL) << 3 | exact << 4 |
               res_same << 5 | (b->shift != 0) << 6 | (b->odd != 0) << 7 | (b->droll != 0) << 8;
    }
    const fn_fwd_params *f = (const fn_fwd_params *)params;
    return (f->w != NULL) | (f->b != NULL) << 1 | (f->res_out != NULL) << 2 | (f->dt_y == f->dt_x) << 3 | exact << 4 |
           (f->shift != 0) << 5 | f->deep << 6 | f->lag << 8 | f->plain_res << 10 |
           (f->res_out != NULL && f->dt_res_out == f->dt_x) << 11 | (pl->path == FN_PATH_ROWS_IN_REGISTERS ? f->odd : 0) << 12;
}

static fusednorm_status max_active(int device, int is_bwd, const void *params, const fn_plan *pl, const char *fn,
                                   int *active)
{
    const fn_bwd_params *bp = (const fn_bwd_params *)params;
    const fn_fwd_params *fp = (const fn_fwd_params *)params;
    const int dt_x = is_bwd ? bp->dt_dx : fp->dt_x;
    /* The pipeline stages' shared memory depends on these dtypes. */
    const int dt2 = is_bwd ? bp->dt_x * 4 + bp->dt_dy : (fp->res ? 1 + fp->dt_res : 0);
    const int two_pass = pl->path == FN_PATH_TWO_PASS;
    const int64_t smem_acc_cols =
        is_bwd && two_pass && bp->smem_acc ? bp->cols * ((bp->dw != NULL) + (bp->db != NULL)) : 0;
    /* tpr as well as threads: the weight cache takes tpr * ept columns, so two
     * plans of one CTA size (N = 2048 and 4096 in 256-thread CTAs) differ in
     * shared memory and may differ in CTAs per SM. */
    occ_entry key = {1, device, is_bwd, dt_x, dt2, pl->vec, pl->ept, pl->tpr, pl->threads, pl->cluster,
                     pl->rows_per_block > 1, two_pass, occ_variant(is_bwd, params, pl), smem_acc_cols, 0};
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < OCC_CACHE && g_occ[i].used; i++) {
        occ_entry *o = &g_occ[i];
        if (o->device == key.device && o->is_bwd == key.is_bwd && o->dt_x == key.dt_x && o->dt2 == key.dt2 &&
            o->vec == key.vec &&
            o->ept == key.ept && o->tpr == key.tpr && o->threads == key.threads && o->cluster == key.cluster &&
            o->smem_rows == key.smem_rows && o->two_pass == key.two_pass && o->variant == key.variant &&
            o->smem_acc_cols == key.smem_acc_cols) {
            *active = o->active;
            pthread_mutex_unlock(&g_lock);
            return FUSEDNORM_OK;
        }
    }
    pthread_mutex_unlock(&g_lock);
    int n = 0, err;
    if (!is_bwd) err = fn_max_active_fwd_rows((const fn_fwd_params *)params, pl->vec, pl->ept, pl->threads, &n);
    else if (two_pass) err = fn_max_active_bwd_two_pass((const fn_bwd_params *)params, pl->threads, &n);
    else err = fn_max_active_bwd_rows((const fn_bwd_params *)params, pl->vec, pl->ept, pl->threads, &n);
    if (err) return cuda_fail(fn, "occupancy query", (cudaError_t)err);
    key.active = n;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < OCC_CACHE; i++)
        if (!g_occ[i].used) {
            g_occ[i] = key;
            break;
        }
    pthread_mutex_unlock(&g_lock);
    *active = n;
    return FUSEDNORM_OK;
}

/* The host pointers of a CPU caller would fault inside a kernel and poison the
 * context; catch them before any launch. */
static fusednorm_status check_device_pointer(const void *p, const char *name, int device, const char *fn)
{
    if (!p) return FUSEDNORM_OK;
    struct cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "%s: %s (%p) is not a CUDA pointer", fn, name, p);
    }
    if (at.type == cudaMemoryTypeUnregistered || (at.type == cudaMemoryTypeHost && at.devicePointer == NULL))
        return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "%s: %s (%p) is host memory, not device memory", fn, name, p);
    if (at.type == cudaMemoryTypeDevice && at.device != device)
        return fn_error(FUSEDNORM_ERROR_INVALID_ARGUMENT, "%s: %s (%p) lives on device %d, not on device (%d)", fn,
                        name, p, at.device, device);
    return FUSEDNORM_OK;
}

/* The lab knobs' register plan: rpb rows of tpr threads a CTA, in clusters
 * of `cluster` CTAs. */
static void set_rows_plan(fn_plan *pl, int vec, int ept, int tpr, int cluster, int rpb)
{
    pl->path = FN_PATH_ROWS_IN_REGISTERS;
    pl->vec = vec;
    pl->ept = ept;
    pl->tpr = tpr;
    pl->cluster = cluster;
    pl->rows_per_block = rpb;
    pl->threads = rpb * tpr;
}

/* Tuning knob for the kernel lab (bench/device.sh lab): FUSEDNORM_PLAN_FWD or
 * FUSEDNORM_PLAN_BWD = "ept,tpr,cluster" replaces the planner's register plan
 * when that shape is instantiated and covers the row ("0,0,0": two-pass).
 * The vector width is the problem's (pb->vec_ok): a held plan of rows off a
 * 16-byte boundary (the ODD form) carries 16-byte vectors, which the register
 * tile must not take for those rows (a misaligned 16-byte load, found under
 * the knob in session 13). Not for production. */
static void plan_override(const char *var, const fn_plan_problem *pb, fn_plan *pl)
{
    const int is_bwd = pb->is_bwd, x_bytes = pb->x_bytes;
    const int64_t cols = pb->cols;
    const char *v = getenv(var);
    int ept, tpr, cluster, used = 0;
    /* Malformed (trailing characters too, as FUSEDNORM_PLAN_BWD_ODD): the planner's plan. */
    if (!v || sscanf(v, "%d,%d,%d%n", &ept, &tpr, &cluster, &used) != 3 || v[used] != '\0') return;
    if (ept == 0) { /* "0,0,0": the two-pass path */
        fn_plan_use_two_pass(pl, cols, x_bytes);
        return;
    }
    const int vec = pb->vec_ok ? 16 / x_bytes : 1;
    if (!fn_plan_ept_allowed(is_bwd, vec, ept) || tpr < 1 || tpr > 512 || (tpr > 32 && tpr % 32) ||
        (tpr < 32 && (tpr & (tpr - 1))) || cluster < 1 || cluster > 16 || (int64_t)ept * tpr * cluster < cols ||
        (is_bwd && ept == 32 && !pb->wide_bwd) || /* the backward's 32-element tile where it is launchable */
        (is_bwd && ept == 32 && x_bytes == 4 && (tpr != 512 || (int64_t)ept * tpr * cluster != cols)))
        return;
    set_rows_plan(pl, vec, ept, tpr, cluster, tpr >= 256 ? 1 : 256 / tpr);
}

/* Lab knob FUSEDNORM_FWD_HELD=U: the forward's common call on any row of at
 * least 32 vectors that U (2, 4, 8) vectors per thread cover in 512 threads
 * takes FN_PATH_HELD with U, and so does the residual call (x and the
 * residual stream of one dtype) with U = 2 or 4 on rows short of
 * streaming; rows off a 16-byte boundary (odd_held) with U = 4 or 8 (4 with
 * the residual); 0 keeps every call off it (the register tiles, the SHIFT
 * tile or two-pass where it would be held). FUSEDNORM_PLAN_FWD, applied
 * after it, still wins. Read on every call. Not for production. */
static void held_override(const fn_plan_problem *pb, fn_plan *pl)
{
    /* FUSEDNORM_FWD_ROWS_CLUSTER=0: the rows of the register tile over a
     * cluster held (or streamed) instead (the plan before steps 90 and 96,
     * for A/B). */
    const char *r = getenv("FUSEDNORM_FWD_ROWS_CLUSTER");
    if (r && strcmp(r, "0") == 0 && fn_plan_fwd_rows_cluster_call(pb)) {
        fn_plan_problem held = *pb;
        held.no_tile = 1;
        if (held.is_ln && held.max_cluster > FN_FWD_LN_MAX_CLUSTER) held.max_cluster = FN_FWD_LN_MAX_CLUSTER;
        *pl = fn_plan_make(&held);
    }
    /* FUSEDNORM_FWD_HELD_CTA=T: the clustered held plan with CTAs of at most
     * T threads (0: those rows stream, as without clusters). */
    const char *t = getenv("FUSEDNORM_FWD_HELD_CTA");
    if (t && !pb->is_bwd && pl->path == FN_PATH_HELD && pl->cluster > 1) {
        const int threads = atoi(t);
        if (threads == 0) {
            fn_plan_problem off = *pb;
            off.max_cluster = 1;
            *pl = fn_plan_make(&off);
        } else {
            fn_plan c = *pl;
            if (fn_plan_use_held_cluster(&c, pb->cols, pb->x_bytes, pl->ept / pl->vec, threads, FN_PLAN_HELD_MAX_CLUSTER))
                *pl = c;
        }
    }
    const char *v = getenv("FUSEDNORM_FWD_HELD");
    if (!v || pb->is_bwd || (pb->stream == FN_STREAM_NONE && pb->odd_held == FN_STREAM_NONE)) return;
    const int u = atoi(v);
    if (u == 0 && pl->path == FN_PATH_HELD) {
        fn_plan_problem off = *pb;
        off.stream = FN_STREAM_NONE; /* the planner's plan without the held path */
        off.odd_held = FN_STREAM_NONE;
        *pl = fn_plan_make(&off);
    } else if (u > 0 && pb->odd_held != FN_STREAM_NONE) { /* rows off 16 bytes: U = 4 or 8 (4 with the residual) */
        if ((u == 4 || (u == 8 && pb->odd_held == FN_STREAM_COMMON)) && pb->cols / (16 / pb->x_bytes) >= 32)
            fn_plan_use_held_odd(pl, pb->cols, pb->x_bytes, u);
    } else if (u > 0 && pb->cols / (16 / pb->x_bytes) >= 32 && !fn_plan_streams(pb) &&
               (pb->stream == FN_STREAM_COMMON || u <= 4)) { /* the residual call: U = 2 or 4 */
        fn_plan held = *pl;
        if (fn_plan_use_held(&held, pb->cols, pb->x_bytes, u)) *pl = held;
    }
}

/* The planner's plan for pb, with the lab override of var applied; its shape
 * (tpr, rows per CTA, cluster) also goes into the launch parameters. */
static fn_plan plan_for(const fn_plan_problem *pb, const char *var, int *tpr, int *rows_per_block, int *cluster)
{
    fn_plan pl = fn_plan_make(pb);
    held_override(pb, &pl);
    plan_override(var, pb, &pl);
    *tpr = pl.tpr;
    *rows_per_block = pl.rows_per_block;
    *cluster = pl.cluster;
    return pl;
}

/* The SHIFT kernels' limit per direction (FN_PLAN_SHIFT_MAX_COLS, _BWD).
 * Lab knob: FUSEDNORM_SHIFT_MAX_COLS=K moves both to K columns, to measure
 * them past it. Not for production. */
static int64_t shift_max_cols(int is_bwd)
{
    const char *v = getenv("FUSEDNORM_SHIFT_MAX_COLS");
    return v ? strtoll(v, NULL, 10) : (is_bwd ? FN_PLAN_SHIFT_MAX_COLS_BWD : FN_PLAN_SHIFT_MAX_COLS);
}

/* Lab knob FUSEDNORM_BWD_ODD=0: the backward's rows off a 16-byte boundary
 * take the SHIFT tile or two-pass as before the ODD tile (to measure it
 * against them). Read on every call. Not for production. */
static int bwd_odd_enabled(void)
{
    const char *v = getenv("FUSEDNORM_BWD_ODD");
    return !v || strcmp(v, "0") != 0;
}

/* Lab knob FUSEDNORM_PLAN_BWD_ODD = "ept,tpr,cluster": the ODD tile's plan
 * for the backward's rows off a 16-byte boundary, in place of
 * fn_plan_bwd_odd's (to compare its plans, e.g. 65537 in 8 x 256 x 32
 * against 4 x 512 x 32): 16-byte vectors, one row per CTA of tpr threads
 * (32..512, a multiple of 32), the body's whole vectors covered, clusters
 * only on sm_90. 1: applied; 0: not set; -1: set but not such a plan, and
 * then the call takes the SHIFT tile or two-pass, never the planner's ODD
 * plan under the knob's name (so does a plan the kernel has no instance
 * for: fn_bwd_odd_fits). Read on every call. Not for production. */
static int odd_plan_override(int64_t cols, int x_bytes, int cc_major, fn_plan *pl)
{
    const char *v = getenv("FUSEDNORM_PLAN_BWD_ODD");
    int ept, tpr, cluster, used = 0;
    if (!v || !*v) return 0;
    if (sscanf(v, "%d,%d,%d%n", &ept, &tpr, &cluster, &used) != 3 || v[used] != '\0') return -1;
    const int vec = 16 / x_bytes;
    if (!fn_plan_ept_allowed(1, vec, ept) || tpr < FN_PLAN_BWD_ODD_MIN_TPR || tpr > 512 || tpr % 32 || cluster < 1 ||
        cluster > 16 || (cluster > 1 && cc_major < 9) || (int64_t)ept * tpr * cluster < cols / vec * vec)
        return -1;
    set_rows_plan(pl, vec, ept, tpr, cluster, 1);
    return 1;
}

/* Lab knob FUSEDNORM_BWD_ODD_GRID: the ODD backward's clusters in place of
 * fn_plan_odd_clusters': "G" (G clusters), "xK" (K times the resident
 * clusters, as session 17's FUSEDNORM_BWD_ODD_OVER=K, which it replaces),
 * each rounded up to the rows' period, or "down" (the resident clusters
 * rounded down to it: the grid before step 88). No more clusters than row groups; yields to
 * FUSEDNORM_GRID_CAP. Read on every call; unset, empty or malformed: the
 * planner's grid. Not for production. */
static int64_t bwd_odd_grid(int64_t active, int m, int64_t groups, int64_t planned)
{
    const char *v = getenv("FUSEDNORM_BWD_ODD_GRID");
    if (!v || !*v) return planned;
    if (strcmp(v, "down") == 0) return fn_plan_odd_one_wave(active, m, groups);
    const char *digits = v + (*v == 'x');
    if (*digits < '0' || *digits > '9') return planned; /* strtol would take " 8", "+8" */
    char *end;
    const long k = strtol(digits, &end, 10);
    if (*end || k < 1 || k > 1 << 20) return planned;
    int64_t g = *v == 'x' ? active * k : k;
    g = (g + m - 1) / m * m;
    return g > groups ? groups : g;
}

/* Lab knob FUSEDNORM_PDL=0: the dweight finalize launched after the backward
 * as a plain kernel, not as its programmatic dependent (to measure the one
 * against the other). Read on every call. Not for production. */
static int pdl_enabled(void)
{
    const char *v = getenv("FUSEDNORM_PDL");
    return !v || strcmp(v, "0") != 0;
}

/* Lab knob FUSEDNORM_FWD_DEEP=0 or 2: the forward's PLAIN tiles over a
 * cluster keep FN_STAGES stages (0) or take FN_DEEP_STAGES on every cluster
 * (2), where the rule (1, the default) takes them on the tiles that measured
 * faster (norm_fwd.cu, launch_rows). Read on every call. Not for production. */
static int fwd_deep(void)
{
    const char *v = getenv("FUSEDNORM_FWD_DEEP");
    if (v && strcmp(v, "0") == 0) return 0;
    if (v && strcmp(v, "2") == 0) return 2;
    return 1;
}

/* Lab knob FUSEDNORM_FWD_LAG=0 or 2: the forward's PLAIN exact 16-bit tiles
 * of 512 threads over a cluster meet by the one-call exchange (0) instead of
 * the exchange in two halves (LAG, norm_fwd.cu; 1, the default), or the
 * 256-thread tiles take it too (2). Read on every call. Not for production. */
static int fwd_lag(void)
{
    const char *v = getenv("FUSEDNORM_FWD_LAG");
    if (v && strcmp(v, "0") == 0) return 0;
    if (v && strcmp(v, "2") == 0) return 2;
    return 1;
}

/* Lab knob FUSEDNORM_FWD_LEAN=0 or 1: the held forward's LEAN form
 * (norm_fwd.cu FN_FWD_HELD_LEAN: 16-bit rows of 1024 and 2048 columns
 * without the residual, no bounds checks, y as one fma, the trees
 * unrolled) off or on. FN_FWD_LEAN_DEFAULT without the knob: 0 until an
 * H200 A/B decides (session 42, H100: 15-16% fewer instructions, the time
 * unchanged within 0.6%). Read on every call. Not for production. */
#ifndef FN_FWD_LEAN_DEFAULT
#define FN_FWD_LEAN_DEFAULT 0
#endif
static int fwd_lean(void)
{
    const char *v = getenv("FUSEDNORM_FWD_LEAN");
    if (v && strcmp(v, "0") == 0) return 0;
    if (v && strcmp(v, "1") == 0) return 1;
    return FN_FWD_LEAN_DEFAULT;
}

/* Lab knob FUSEDNORM_FWD_ODD=0: the forward's rows off a 16-byte boundary
 * past 64 KiB stay on the held kernel's ODD form over a cluster, as before
 * the register tile's ODD form (fn_plan_fwd_odd; to measure one against the
 * other); 2: the ODD tile with LAG where the aligned tile takes it
 * (launch_odd, unmeasured). Read on every call. Not for production.
 * Returns the mode: 0 off, 1 the ODD tile (the default), 2 with LAG. */
static int fwd_odd_tile_mode(void)
{
    const char *v = getenv("FUSEDNORM_FWD_ODD");
    if (v && strcmp(v, "0") == 0) return 0;
    return v && strcmp(v, "2") == 0 ? 2 : 1;
}

/* Whether the environment variable is set to something. */
static int knob_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

/* The rows' period: rows m apart sit at one offset within 16 bytes (a
 * pitch of `pitch` bytes). */
static int odd_period(uint64_t pitch)
{
    int m = 1;
    while (m < 16 && (pitch * (uint64_t)m) % 16) m *= 2;
    return m;
}

/* Lab knob FUSEDNORM_FWD_PLAIN_RES=0: the forward's residual call of 16-bit
 * rows over a cluster runs the general kernel instead of the PLAIN tiles
 * (PLAIN_RES, norm_fwd.cu). Read on every call. Not for production. */
static int fwd_plain_res(void)
{
    const char *v = getenv("FUSEDNORM_FWD_PLAIN_RES");
    return !(v && strcmp(v, "0") == 0);
}

/* Lab knob FUSEDNORM_BWD_DROLL=0: the backward's residual call runs the
 * general kernel (dresidual_out read unstaged) where it would take the
 * one-stage tile (DROLL, norm_bwd.cu). Read on every call. Not for production. */
static int bwd_droll(void)
{
    const char *v = getenv("FUSEDNORM_BWD_DROLL");
    return !(v && strcmp(v, "0") == 0);
}

/* Sanitizer knob (bench/device.sh sanitize): FUSEDNORM_GRID_CAP=K keeps the
 * persistent grids to at most K CTAs (clusters), so that a small problem still
 * walks several rows per CTA and exercises the pipeline's stage reuse, the
 * per-CTA partial rows and the two-pass accumulators. Read once. */
static pthread_once_t g_cap_once = PTHREAD_ONCE_INIT;
static int64_t g_grid_cap;
static void read_grid_cap(void)
{
    const char *v = getenv("FUSEDNORM_GRID_CAP");
    g_grid_cap = v ? strtoll(v, NULL, 10) : 0;
}
static int64_t grid_cap(int64_t grid)
{
    pthread_once(&g_cap_once, read_grid_cap);
    return g_grid_cap > 0 && grid > g_grid_cap ? g_grid_cap : grid;
}

/* ---- forward --------------------------------------------------------------- */

fusednorm_status fn_cuda_fwd(const fusednorm_fwd_args *a)
{
    static const char *fn = "fusednorm_fwd";
    const fusednorm_dtype act = a->x.dtype;
    int dt_w, dt_r, dt_y;
    const fusednorm_tensor *wg[] = {&a->weight, &a->bias};
    const char *wn[] = {"weight", "bias"};
    /* residual and residual_out each on their own: an fp32 residual stream
     * may start from a 16-bit residual (the first layer's input). */
    const fusednorm_tensor *rg[] = {&a->residual}, *rog[] = {&a->residual_out};
    const char *rn[] = {"residual"}, *ron[] = {"residual_out"};
    const fusednorm_tensor *yg[] = {&a->y};
    const char *yn[] = {"y"};
    int dt_ro;
    if (!group_dtype(act, wg, 2, &dt_w)) return unsupported_mix(fn, "weight/bias", wg, wn, 2, act);
    if (!group_dtype(act, rg, 1, &dt_r)) return unsupported_mix(fn, "residual", rg, rn, 1, act);
    if (!group_dtype(act, rog, 1, &dt_ro)) return unsupported_mix(fn, "residual_out", rog, ron, 1, act);
    if (!group_dtype(act, yg, 1, &dt_y)) return unsupported_mix(fn, "y", yg, yn, 1, act);

    device_guard g;
    fusednorm_status s = guard_enter(&g, a->device, fn);
    if (s != FUSEDNORM_OK || a->rows == 0) {
        if (s == FUSEDNORM_OK) guard_exit(&g);
        return s;
    }
    device_facts df;
    s = device_facts_get(a->device, &df, fn);
    if (s == FUSEDNORM_OK) s = check_device_pointer(a->x.data, "x.data", a->device, fn);
    if (s == FUSEDNORM_OK) s = check_device_pointer(a->y.data, "y.data", a->device, fn);
    if (s != FUSEDNORM_OK) {
        guard_exit(&g);
        return s;
    }

    fn_fwd_params p = {0};
    p.x = a->x.data;
    p.res = a->residual.data;
    p.w = a->weight.data;
    p.b = a->bias.data;
    p.y = a->y.data;
    p.res_out = a->residual_out.data;
    p.rstd = a->rstd;
    p.mean = a->norm == FUSEDNORM_LAYERNORM ? a->mean : NULL;
    p.rows = a->rows;
    p.cols = a->cols;
    p.sx = a->x.row_stride;
    p.sres = a->residual.row_stride;
    p.sy = a->y.row_stride;
    p.sres_out = a->residual_out.row_stride;
    p.eps = a->eps;
    p.w_off = a->weight_offset;
    p.is_ln = a->norm == FUSEDNORM_LAYERNORM;
    p.dt_x = act;
    p.dt_res = dt_r;
    p.dt_res_out = dt_ro;
    p.dt_w = dt_w;
    p.dt_y = dt_y;
    p.smem_max = df.smem_optin - ROWS_STATIC_SMEM_BYTES;
    p.deep = fwd_deep();
    p.lag = fwd_lag();
    p.plain_res = fwd_plain_res();
    p.lean = fwd_lean();

    const int x_bytes = (int)fn_dtype_size(act), vec = 16 / x_bytes;
    const int vec_ok = a->cols % vec == 0 && tensor_vec_ok(&a->x) && tensor_vec_ok(&a->residual) &&
                       tensor_vec_ok(&a->y) && tensor_vec_ok(&a->residual_out) && vector_vec_ok(a->weight.data) &&
                       vector_vec_ok(a->bias.data);
    /* Rows off a 16-byte boundary (odd N, odd pitches, offset pointers) keep
     * the vector tile when every activation is of the 16-bit dtype and the
     * weight and bias are aligned: the SHIFT kernel realigns them in shared
     * memory. Otherwise they take the scalar register tile or two-pass. */
    const int shift_ok = !vec_ok && x_bytes == 2 && a->cols <= shift_max_cols(0) && tensor_shift_ok(&a->x, act) &&
                         tensor_shift_ok(&a->residual, act) &&
                         tensor_shift_ok(&a->y, act) && tensor_shift_ok(&a->residual_out, act) &&
                         vector_vec_ok(a->weight.data) && vector_vec_ok(a->bias.data);
    /* The streaming kernel's call: x, y, weight, bias, residual and
     * residual_out of one dtype, and a row's vector count well inside its
     * 32-bit indexing. The held kernel also takes fp32 weight and bias with
     * 16-bit x (w32: never streamed). */
    const int w32 = x_bytes == 2 && dt_w == FN_DT_F32;
    const int stream_call = vec_ok && dt_r == (int)act && dt_ro == (int)act && dt_y == (int)act &&
                            (dt_w == (int)act || w32) && a->cols <= ((int64_t)1 << 30);
    const int has_res = a->residual.data || a->residual_out.data;
    const int streamable = !stream_call ? FN_STREAM_NONE : has_res ? FN_STREAM_RESIDUAL : FN_STREAM_COMMON;
    /* LayerNorm's clusters (held, or the register tile) stop at 8 CTAs
     * (FN_FWD_LN_MAX_CLUSTER): past it its rows stream. */
    const int max_cluster = a->norm == FUSEDNORM_LAYERNORM ? FN_FWD_LN_MAX_CLUSTER : 16;
    /* Rows off a 16-byte boundary of that call (one dtype) with every
     * activation at x's offset within 16 bytes in each row, and the weight
     * and bias aligned: the held kernel's ODD form (the planner's odd_held). */
    const fusednorm_tensor *const fwd_acts[] = {&a->y, &a->residual, &a->residual_out};
    const int odd_call = !vec_ok && odd_phase(&a->x, x_bytes, fwd_acts, 3) && dt_w == (int)act &&
                         vector_vec_ok(a->weight.data) && vector_vec_ok(a->bias.data) && a->cols <= ((int64_t)1 << 30);
    fn_plan_problem pb = {0, a->cols, x_bytes, vec_ok || shift_ok, df.cc_major, max_cluster, 0, shift_ok ? 256 : 0,
                          streamable, w32, !odd_call ? FN_STREAM_NONE : has_res ? FN_STREAM_RESIDUAL : FN_STREAM_COMMON,
                          a->norm == FUSEDNORM_LAYERNORM, 0, 0};
    /* ... but for the rows of its register-tile call that measured faster
     * over 16 CTAs (fn_plan_fwd_ln_max_cluster) */
    if (pb.is_ln && fn_plan_fwd_rows_cluster_call(&pb)) pb.max_cluster = fn_plan_fwd_ln_max_cluster(a->cols);
    fn_plan pl = plan_for(&pb, "FUSEDNORM_PLAN_FWD", &p.tpr, &p.rows_per_block, &p.cluster);
    p.odd = pl.path == FN_PATH_HELD && !vec_ok;
    /* Rows off a 16-byte boundary of the common call whose aligned body the
     * register tile over a cluster takes: that tile's ODD form
     * (fn_plan_fwd_odd; the planner held them over a cluster, at 0.73x of
     * the aligned rows for LayerNorm bf16 65537: docs/perf.md session 42). */
    if (odd_call && !has_res && fwd_odd_tile_mode() && !knob_set("FUSEDNORM_PLAN_FWD") &&
        !knob_set("FUSEDNORM_FWD_HELD") && !knob_set("FUSEDNORM_FWD_HELD_CTA") &&
        !knob_set("FUSEDNORM_FWD_ROWS_CLUSTER")) { /* the lab's plan knobs name their plan */
        fn_plan op = {0};
        fn_fwd_params t = p;
        if (fn_plan_fwd_odd(&op, &pb)) {
            t.tpr = op.tpr;
            t.rows_per_block = op.rows_per_block;
            t.cluster = op.cluster;
            if (fn_fwd_odd_fits(&t, op.vec, op.ept, op.threads)) {
                p = t;
                p.odd = fwd_odd_tile_mode();
                pl = op;
            }
        }
    }
    if (shift_ok && !p.odd) {
        p.shift = pl.path == FN_PATH_ROWS_IN_REGISTERS && fn_fwd_shift_fits(&p, pl.ept);
        if (!p.shift) { /* does not fit: as without the SHIFT kernel */
            pb.vec_ok = 0;
            pb.max_tpr = 0;
            pl = plan_for(&pb, "FUSEDNORM_PLAN_FWD", &p.tpr, &p.rows_per_block, &p.cluster);
        }
    }

    /* A row of the register tile over a cluster meets through the exchange
     * (common.cuh): every plan of the planner's is one it takes, not every
     * one of the lab knob's. */
    if (pl.path == FN_PATH_ROWS_IN_REGISTERS && !fn_plan_cluster_xchg_ok(pl.cluster, pl.rows_per_block, pl.tpr, pl.threads)) {
        fn_plan_use_two_pass(&pl, a->cols, x_bytes);
        p.shift = p.odd = 0;
    }
    int err = 0;
    if (pl.path == FN_PATH_HELD) {
        /* One CTA per row group; past the grid's limit the kernel walks on. */
        int64_t groups = (a->rows + pl.rows_per_block - 1) / pl.rows_per_block;
        if (groups > 0x7fffffff / pl.cluster) groups = 0x7fffffff / pl.cluster;
        err = fn_launch_fwd_held(&p, pl.ept / pl.vec, (int)(grid_cap(groups) * pl.cluster), pl.threads, a->stream);
    }
    if (pl.path == FN_PATH_ROWS_IN_REGISTERS) {
        /* Persistent grid: every resident CTA (cluster), none beyond the row groups. */
        int active = 0;
        s = max_active(a->device, 0, &p, &pl, fn, &active);
        if (s == FUSEDNORM_OK && active == 0) { /* cannot be co-scheduled */
            fn_plan_use_two_pass(&pl, a->cols, x_bytes);
            p.odd = 0;
        }
        if (s == FUSEDNORM_OK && pl.path == FN_PATH_ROWS_IN_REGISTERS) {
            const int64_t all = (a->rows + pl.rows_per_block - 1) / pl.rows_per_block;
            int64_t groups = all < active ? all : active;
            groups = grid_cap(groups);
            if (p.odd && all > groups) {
                /* ODD: each cluster's rows (cid, cid + G, ...) at one offset
                 * within 16 bytes: G a multiple of the rows' period (x's pitch
                 * serves every activation: odd_phase), over as many waves as
                 * fill the SMs, as the ODD backward's grid (fn_plan_odd_clusters). */
                const int m = odd_period((uint64_t)a->x.row_stride * (uint64_t)x_bytes);
                int64_t c = fn_plan_odd_clusters(active, m, all);
                if (grid_cap(c) < c) c = fn_plan_odd_one_wave(grid_cap(c), m, all); /* the sanitizer's capped grids */
                groups = c;
            }
            err = fn_launch_fwd_rows(&p, pl.vec, pl.ept, (int)(groups * pl.cluster), pl.threads, a->stream);
        }
    }
    if (s == FUSEDNORM_OK && pl.path == FN_PATH_TWO_PASS) {
        /* Any row of the streaming kernel's call that goes two-pass streams
         * (also those past the register tiles' coverage, and those the lab
         * knob FUSEDNORM_PLAN_FWD=0,0,0 sends there). */
        if (streamable != FN_STREAM_NONE && !w32)
            p.stream = fn_plan_stream_keeps_weight(&pb) ? FN_STREAM_WEIGHT_L1_KEEP : FN_STREAM_WEIGHT_L1_NONE;
        /* A grid-stride loop over rows: a full SM's worth of CTAs per SM. */
        const int64_t most = (int64_t)df.sm_count * (2048 / pl.threads);
        const int64_t grid = grid_cap(a->rows < most ? a->rows : most);
        p.tpr = pl.tpr;
        p.rows_per_block = 1;
        p.cluster = 1;
        err = fn_launch_fwd_two_pass(&p, (int)grid, pl.threads, a->stream);
    }
    guard_exit(&g);
    if (s != FUSEDNORM_OK) return s;
    if (err) return cuda_fail(fn, "kernel launch", (cudaError_t)err);
    return FUSEDNORM_OK;
}

/* ---- backward -------------------------------------------------------------- */

typedef struct bwd_setup {
    fn_bwd_params p;
    fn_plan plan;
    int grid;            /* CTAs (column split: of the statistics pass) */
    int col_chunks, row_groups; /* column split: the second pass's grid */
    size_t ws_bytes;     /* workspace the launch needs (0: none) */
    int direct_atomic_w; /* ATOMIC into an fp32 dweight itself, no workspace */
    int direct_atomic_b;
    int dependent_finalize; /* the finalize as a programmatic dependent launch (sm_90) */
} bwd_setup;

/* Everything short of launching: shared by the workspace query and the
 * backward itself, so that both agree on the size. Runs inside the guard. */
static fusednorm_status bwd_prepare(const fusednorm_bwd_args *a, const char *fn, bwd_setup *st)
{
    /* The activation dtype is dx's: x is the residual stream when a residual
     * was fused, and may be fp32 beside 16-bit activations. */
    const fusednorm_dtype act = a->dx.dtype;
    int dt_w, dt_r, dt_dy, dt_x;
    const fusednorm_tensor *wg[] = {&a->weight, &a->dweight, &a->dbias};
    const char *wn[] = {"weight", "dweight", "dbias"};
    const fusednorm_tensor *rg[] = {&a->dresidual_out}, *drg[] = {&a->dresidual};
    const char *rn[] = {"dresidual_out"}, *drn[] = {"dresidual"};
    int dt_dr;
    const fusednorm_tensor *yg[] = {&a->dy};
    const char *yn[] = {"dy"};
    const fusednorm_tensor *xg[] = {&a->x};
    const char *xn[] = {"x"};
    if (!group_dtype(act, xg, 1, &dt_x)) return unsupported_mix(fn, "x", xg, xn, 1, act);
    if (!group_dtype(act, wg, 3, &dt_w)) return unsupported_mix(fn, "weight/dweight/dbias", wg, wn, 3, act);
    if (!group_dtype(act, rg, 1, &dt_r)) return unsupported_mix(fn, "dresidual_out", rg, rn, 1, act);
    if (!group_dtype(act, drg, 1, &dt_dr)) return unsupported_mix(fn, "dresidual", drg, drn, 1, act);
    if (!group_dtype(act, yg, 1, &dt_dy)) return unsupported_mix(fn, "dy", yg, yn, 1, act);

    device_facts df;
    fusednorm_status s = device_facts_get(a->device, &df, fn);
    if (s != FUSEDNORM_OK) return s;

    fn_bwd_params *p = &st->p;
    memset(st, 0, sizeof *st);
    p->dy = a->dy.data;
    p->x = a->x.data;
    p->w = a->weight.data;
    p->dres_out = a->dresidual_out.data;
    p->droll = bwd_droll();
    if (a->norm == FUSEDNORM_RMSNORM) {
        p->rstd = a->rstd;
    } else if (a->rstd && a->mean) { /* LayerNorm recomputes both when either is missing */
        p->rstd = a->rstd;
        p->mean = a->mean;
    }
    p->dx = a->dx.data;
    p->dres = a->dresidual.data;
    p->dw = a->dweight.data;
    p->db = a->dbias.data;
    p->rows = a->rows;
    p->cols = a->cols;
    p->sdy = a->dy.row_stride;
    p->sx = a->x.row_stride;
    p->sdres_out = a->dresidual_out.row_stride;
    p->sdx = a->dx.row_stride;
    p->sdres = a->dresidual.row_stride;
    p->eps = a->eps;
    p->w_off = a->weight_offset;
    p->is_ln = a->norm == FUSEDNORM_LAYERNORM;
    p->atomic = (a->flags & FUSEDNORM_ATOMIC_DWEIGHT) != 0;
    p->accumulate = (a->flags & FUSEDNORM_ACCUMULATE) != 0;
    p->dt_dx = act;
    p->dt_x = dt_x;
    p->dt_dy = dt_dy;
    p->dt_w = dt_w;
    p->dt_dres_out = dt_r;
    p->dt_dres = dt_dr;
    p->dt_dw = a->dweight.dtype;
    p->dt_db = a->dbias.dtype;
    p->smem_max = df.smem_optin - ROWS_STATIC_SMEM_BYTES;

    const int x_bytes = (int)fn_dtype_size(act), vec = 16 / x_bytes;
    const int vec_ok = a->cols % vec == 0 && tensor_vec_ok(&a->dy) && tensor_vec_ok(&a->x) &&
                       tensor_vec_ok(&a->dresidual_out) && tensor_vec_ok(&a->dx) && tensor_vec_ok(&a->dresidual) &&
                       vector_vec_ok(a->weight.data);
    /* Rows off a 16-byte boundary: the SHIFT kernel, as in the forward. */
    const int shift_ok = !vec_ok && x_bytes == 2 && a->cols <= shift_max_cols(1) && tensor_shift_ok(&a->dy, act) &&
                         tensor_shift_ok(&a->x, act) &&
                         tensor_shift_ok(&a->dresidual_out, act) && tensor_shift_ok(&a->dx, act) &&
                         tensor_shift_ok(&a->dresidual, act) && vector_vec_ok(a->weight.data);
    /* SHIFT: no 32-element tile (fn_bwd_shift_fits), CTAs of at most 256 threads (plan.h).
     * stream: the residual call (its fp32 rows keep clusters of 8, plan.c). */
    st->dependent_finalize = df.cc_major >= 9 && pdl_enabled();
    fn_plan_problem pb = {1, a->cols, x_bytes, vec_ok || shift_ok, df.cc_major, 16,
                          shift_ok ? 0 : fn_bwd_wide_fits(p), shift_ok ? 256 : 0,
                          a->dresidual_out.data ? FN_STREAM_RESIDUAL : FN_STREAM_NONE, 0, 0, p->is_ln, a->rows, 0};
    fn_plan *pl = &st->plan;
    /* Rows off a 16-byte boundary whose activations all sit at x's offset
     * within 16 bytes in each row (odd N of contiguous tensors, odd pitches,
     * offset pointers alike): the register tile's ODD form (fn_plan_bwd_odd,
     * fn_bwd_odd_fits; its grid below), before the SHIFT tile and two-pass. */
    const fusednorm_tensor *const bwd_acts[] = {&a->dy, &a->dx, &a->dresidual_out, &a->dresidual};
    const int odd_call = !vec_ok && bwd_odd_enabled() && a->x.dtype == act && odd_phase(&a->x, x_bytes, bwd_acts, 4);
    fn_plan odd_plan;
    const int odd_knob = odd_call ? odd_plan_override(a->cols, x_bytes, df.cc_major, &odd_plan) : 0;
    if (odd_call && odd_knob >= 0 &&
        (odd_knob == 1 || fn_plan_bwd_odd(&odd_plan, a->cols, x_bytes, df.cc_major, 16, x_bytes == 2, p->is_ln))) {
        p->tpr = odd_plan.tpr;
        p->rows_per_block = 1;
        p->cluster = odd_plan.cluster;
        p->odd = fn_bwd_odd_fits(p, odd_plan.vec, odd_plan.ept, odd_plan.threads);
    }
    if (p->odd)
        *pl = odd_plan;
    else
        *pl = plan_for(&pb, "FUSEDNORM_PLAN_BWD", &p->tpr, &p->rows_per_block, &p->cluster);
    if (shift_ok && !p->odd) {
        p->shift = pl->path == FN_PATH_ROWS_IN_REGISTERS && fn_bwd_shift_fits(p, pl->ept, pl->threads);
        if (!p->shift) { /* does not fit: as without the SHIFT kernel */
            pb.vec_ok = 0;
            pb.max_tpr = 0;
            pb.wide_bwd = fn_bwd_wide_fits(p);
            *pl = plan_for(&pb, "FUSEDNORM_PLAN_BWD", &p->tpr, &p->rows_per_block, &p->cluster);
        }
    }

    /* A row over a cluster meets through the exchange (common.cuh): every
     * plan of the planner's is one it takes, not every one of the lab knob's. */
    if (pl->path == FN_PATH_ROWS_IN_REGISTERS &&
        !fn_plan_cluster_xchg_ok(pl->cluster, pl->rows_per_block, pl->tpr, pl->threads)) {
        fn_plan_use_two_pass(pl, a->cols, x_bytes);
        p->odd = p->shift = 0;
    }
    const int64_t groups = (a->rows + pl->rows_per_block - 1) / pl->rows_per_block;
    int active = 0;
    if (a->rows > 0 && pl->path == FN_PATH_ROWS_IN_REGISTERS) {
        s = max_active(a->device, 1, p, pl, fn, &active);
        if (s != FUSEDNORM_OK) return s;
        if (active == 0) {
            fn_plan_use_two_pass(pl, a->cols, x_bytes);
            p->odd = p->shift = 0;
        }
    }
    if (pl->path == FN_PATH_TWO_PASS) {
        p->tpr = pl->tpr;
        p->rows_per_block = 1;
        p->cluster = 1;
        /* dweight/dbias partials in shared memory when they fit beside two
         * resident CTAs (the kernel pads each array by under 2 * VEC floats,
         * two_pass_acc_stride); else the column split below. */
        const size_t acc_bytes = (size_t)((p->dw != NULL) + (p->db != NULL)) * (size_t)a->cols * sizeof(float);
        p->smem_acc = acc_bytes > 0 && acc_bytes <= TWO_PASS_SMEM_ACC_BYTES;
        if (a->rows > 0) {
            s = max_active(a->device, 1, p, pl, fn, &active);
            if (s != FUSEDNORM_OK) return s;
        }
        if (active < 1) active = 1;
        st->grid = (int)grid_cap(a->rows < active ? a->rows : active);
        if (acc_bytes > 0 && !p->smem_acc && a->rows > 0) {
            /* The partials would be read-modify-written in global memory for
             * every row (measured 11-13% of copy): split by columns instead
             * (the second pass's launch bounds keep 3 CTAs per SM for 16-bit
             * rows, 4 for fp32). */
            const fn_column_split cs = fn_plan_column_split(a->rows, a->cols, x_bytes, FN_COLUMNS_THREADS,
                                                            df.sm_count, x_bytes == 2 ? 3 : 4);
            pl->path = FN_PATH_COLUMN_SPLIT;
            p->rows_per_group = cs.per_group;
            st->row_groups = (int)cs.groups;
            st->col_chunks = (int)cs.chunks;
        }
    } else {
        /* Persistent grid: as many clusters as are resident at once, but not
         * more than there are row groups, nor so many that the partial rows
         * outweigh the rows they summarize (>= 4 row groups per cluster). */
        int64_t clusters = active;
        if (clusters > groups) clusters = groups;
        if (groups >= 8 && clusters > groups / 4 && groups / 4 >= df.sm_count / pl->cluster)
            clusters = groups / 4;
        if (clusters < 1) clusters = 1;
        st->grid = (int)(grid_cap(clusters) * pl->cluster);
        if (p->odd && groups > st->grid / pl->cluster) {
            /* ODD: each cluster's rows (cid, cid + G, ...) at one offset
             * within 16 bytes: G a multiple of the rows' period m (rows m
             * apart sit at one offset; by same_phase x's pitch serves all),
             * over as many waves as fill the SMs (fn_plan_odd_clusters). */
            const int m = odd_period((uint64_t)a->x.row_stride * (uint64_t)x_bytes);
            int64_t g = bwd_odd_grid(clusters, m, groups, fn_plan_odd_clusters(clusters, m, groups));
            if (grid_cap(g) < g) g = fn_plan_odd_one_wave(grid_cap(g), m, groups); /* the sanitizer's capped grids */
            st->grid = (int)(g * pl->cluster);
        }
    }
    if (a->rows == 0) st->grid = 0;

    const int partials = pl->path == FN_PATH_COLUMN_SPLIT ? st->row_groups
                         : pl->path == FN_PATH_TWO_PASS      ? st->grid
                                                             : st->grid / pl->cluster;
    const size_t row_bytes = (size_t)a->cols * sizeof(float);
    size_t ws = 0;
    int nsums = 0;
    if (p->atomic) {
        st->direct_atomic_w = p->dw && p->dt_dw == FN_DT_F32;
        st->direct_atomic_b = p->db && p->dt_db == FN_DT_F32;
        nsums = (p->dw && !st->direct_atomic_w) + (p->db && !st->direct_atomic_b);
        p->partials = 1;
        ws = nsums * row_bytes;
    } else {
        nsums = (p->dw != NULL) + (p->db != NULL);
        p->partials = partials;
        ws = (size_t)nsums * (size_t)partials * row_bytes;
    }
    if (pl->path == FN_PATH_COLUMN_SPLIT) ws += (size_t)a->rows * 4 * sizeof(float) + WS_ALIGN; /* row statistics */
    st->ws_bytes = ws ? ws + 2 * WS_ALIGN : 0;
    return FUSEDNORM_OK;
}

fusednorm_status fn_cuda_bwd_workspace_size(const fusednorm_bwd_args *a, size_t *bytes)
{
    static const char *fn = "fusednorm_bwd_workspace_size";
    device_guard g;
    fusednorm_status s = guard_enter(&g, a->device, fn);
    if (s != FUSEDNORM_OK) return s;
    bwd_setup st;
    s = bwd_prepare(a, fn, &st);
    guard_exit(&g);
    if (s == FUSEDNORM_OK) *bytes = st.ws_bytes;
    return s;
}

static float *align_ws(char **cursor, size_t bytes)
{
    uintptr_t v = ((uintptr_t)*cursor + WS_ALIGN - 1) & ~(uintptr_t)(WS_ALIGN - 1);
    *cursor = (char *)(v + bytes);
    return (float *)v;
}

fusednorm_status fn_cuda_bwd(const fusednorm_bwd_args *a)
{
    static const char *fn = "fusednorm_bwd";
    device_guard g;
    fusednorm_status s = guard_enter(&g, a->device, fn);
    if (s != FUSEDNORM_OK) return s;
    bwd_setup st;
    s = bwd_prepare(a, fn, &st);
    if (s == FUSEDNORM_OK) s = check_device_pointer(a->x.data, "x.data", a->device, fn);
    if (s == FUSEDNORM_OK) s = check_device_pointer(a->dx.data, "dx.data", a->device, fn);
    if (s == FUSEDNORM_OK && st.ws_bytes) s = check_device_pointer(a->workspace, "workspace", a->device, fn);
    if (s != FUSEDNORM_OK) {
        guard_exit(&g);
        return s;
    }
    fn_bwd_params *p = &st.p;
    cudaStream_t stream = (cudaStream_t)a->stream;
    const size_t row_bytes = (size_t)a->cols * sizeof(float);
    char *cursor = (char *)a->workspace;
    cudaError_t e = cudaSuccess;
    int err = 0;

    if (st.plan.path == FN_PATH_COLUMN_SPLIT) p->row_stats = align_ws(&cursor, (size_t)a->rows * 4 * sizeof(float));
    if (p->atomic) {
        /* fp32 accumulators: dweight/dbias themselves when fp32, else one
         * workspace row each, zeroed here, converted by the finalize. */
        if (p->dw) p->ws_dw = st.direct_atomic_w ? (float *)p->dw : align_ws(&cursor, row_bytes);
        if (p->db) p->ws_db = st.direct_atomic_b ? (float *)p->db : align_ws(&cursor, row_bytes);
        if (p->dw && !(st.direct_atomic_w && p->accumulate)) e = cudaMemsetAsync(p->ws_dw, 0, row_bytes, stream);
        if (e == cudaSuccess && p->db && !(st.direct_atomic_b && p->accumulate))
            e = cudaMemsetAsync(p->ws_db, 0, row_bytes, stream);
    } else {
        const size_t part_bytes = (size_t)p->partials * row_bytes;
        if (p->dw) p->ws_dw = align_ws(&cursor, part_bytes);
        if (p->db) p->ws_db = align_ws(&cursor, part_bytes);
    }
    if (e != cudaSuccess) {
        guard_exit(&g);
        return cuda_fail(fn, "cudaMemsetAsync", e);
    }

    if (a->rows > 0) {
        if (st.plan.path == FN_PATH_ROWS_IN_REGISTERS) {
            err = fn_launch_bwd_rows(p, st.plan.vec, st.plan.ept, st.grid, st.plan.threads, a->stream);
        } else if (st.plan.path == FN_PATH_COLUMN_SPLIT) {
            /* Pass 1: the two-pass kernel writes each row's statistics, no dx. */
            err = fn_launch_bwd_two_pass(p, st.grid, st.plan.threads, a->stream);
            if (!err) err = fn_launch_bwd_columns(p, st.col_chunks, st.row_groups, a->stream);
        } else {
            err = fn_launch_bwd_two_pass(p, st.grid, st.plan.threads, a->stream);
        }
    }
    const int need_finalize = (p->dw && !(p->atomic && st.direct_atomic_w)) || (p->db && !(p->atomic && st.direct_atomic_b));
    if (!err && need_finalize) {
        fn_bwd_params fp = *p;
        if (p->atomic) { /* only the outputs that went through a workspace row */
            if (st.direct_atomic_w) fp.dw = NULL;
            if (st.direct_atomic_b) fp.db = NULL;
        }
        if (a->rows == 0) fp.partials = 0;
        err = fn_launch_dweight_finalize(&fp, st.dependent_finalize, a->stream);
    }
    guard_exit(&g);
    if (err) return cuda_fail(fn, "kernel launch", (cudaError_t)err);
    return FUSEDNORM_OK;
}

int fn_cuda_available(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count > 0;
}
