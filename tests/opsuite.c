/*
 * The op suite run on every backend: every norm x feature set x dtype mix on
 * a small shape, then awkward shapes (sampled, not the cartesian product: the
 * CPU suite must stay fast on two cores), strides, misalignment, aliasing and
 * rows == 0. On CUDA the dtype mixes are the ones design.md requires; on the
 * CPU every mix is required, so a random sample of them runs.
 */
#include "opsuite.h"

#include <string.h>

static const fusednorm_dtype all_dtypes[3] = {FUSEDNORM_F32, FUSEDNORM_F16, FUSEDNORM_BF16};

/* Feature sets, applied on top of th_case_default. */
enum { FEATURE_SETS = 12 };

static void apply_features(th_case *c, int set)
{
    const int ln = c->norm == FUSEDNORM_LAYERNORM;
    switch (set) {
    case 0: /* plain: weight only, dx only */
        break;
    case 1: /* everything: residual stream, stored statistics handed to bwd */
        c->residual_on = c->residual_out_on = c->bias_on = 1;
        c->store_rstd = 1;
        c->store_mean = ln;
        c->bwd_stats_given = 1;
        c->dresidual_out_on = c->dresidual_on = c->dweight_on = c->dbias_on = 1;
        break;
    case 2: /* residual without residual_out; no weight, bias only; statistics recomputed */
        c->residual_on = 1;
        c->weight_on = 0;
        c->bias_on = 1;
        c->store_rstd = 1;
        c->dbias_on = 1;
        break;
    case 3: /* Gemma-style (1 + w) weights, accumulate into dweight/dbias */
        c->weight_offset = 1.0f;
        c->bias_on = 1;
        c->dweight_on = c->dbias_on = 1;
        c->flags = FUSEDNORM_ACCUMULATE;
        break;
    case 4: /* atomics allowed */
        c->dweight_on = c->dbias_on = 1;
        c->flags = FUSEDNORM_ATOMIC_DWEIGHT;
        c->store_rstd = 1;
        c->bwd_stats_given = 1;
        break;
    case 5: /* atomics and accumulate, stats given, dresidual_out only */
        c->dweight_on = 1;
        c->flags = FUSEDNORM_ACCUMULATE | FUSEDNORM_ATOMIC_DWEIGHT;
        c->bwd_stats_given = 1;
        c->dresidual_out_on = 1;
        break;
    case 6: /* no weight, no bias; dresidual without dresidual_out */
        c->weight_on = 0;
        c->dresidual_on = 1;
        c->store_mean = ln;
        break;
    case 7: /* everything, with padded strides and misaligned pointers */
        apply_features(c, 1);
        c->pad = 5;
        c->misalign = 1;
        break;
    case 8: /* in-place: y == x; residual_out == residual; dx == dy; dresidual == dresidual_out */
        c->residual_on = c->residual_out_on = 1;
        c->alias_y_x = c->alias_resout_res = 1;
        c->dresidual_out_on = c->dresidual_on = 1;
        c->alias_dx_dy = c->alias_dres_dresout = 1;
        c->dweight_on = 1;
        break;
    case 9: /* residual_out == x, with padding */
        c->residual_on = c->residual_out_on = 1;
        c->alias_resout_x = 1;
        c->pad = 3;
        c->store_rstd = 1;
        c->dweight_on = 1;
        break;
    case 10: /* weight_offset with stats given and ACCUMULATE only on dbias path */
        c->weight_offset = 1.0f;
        c->store_rstd = 1;
        c->store_mean = ln;
        c->bwd_stats_given = 1;
        c->dbias_on = 1;
        c->flags = FUSEDNORM_ACCUMULATE;
        break;
    case 11: /* aliases with misalignment */
        apply_features(c, 8);
        c->misalign = 1;
        c->pad = 2;
        break;
    }
}

/* Aliased pairs must share a dtype. */
static void fix_alias_dtypes(th_case *c)
{
    if (c->alias_y_x) c->y = c->x;
    if (c->alias_resout_res) c->residual_out = c->residual;
    if (c->alias_resout_x) c->residual_out = c->x;
    if (c->alias_dx_dy) c->dx = c->dy;
    if (c->alias_dres_dresout) c->dresidual = c->dresidual_out;
}

/* The CUDA mixes design.md requires, for a 16-bit activation dtype a. */
enum { CUDA_MIXES = 5 };
static void apply_cuda_mix(th_case *c, int mix, fusednorm_dtype a)
{
    const fusednorm_dtype f = FUSEDNORM_F32;
    *c = th_case_default(c->norm, c->rows, c->cols, a);
    switch (mix) {
    case 0: /* all one dtype */
        break;
    case 1: /* fp32 parameters and their gradients */
        c->weight = c->bias = c->dweight = c->dbias = f;
        break;
    case 2: /* fp32 residual stream: residual, residual_out, dresidual_out, dresidual */
        c->residual = c->residual_out = c->dresidual_out = c->dresidual = f;
        break;
    case 3: /* fp32 y (and so dy) with 16-bit x (and dx) */
        c->y = c->dy = f;
        break;
    case 4: /* an fp32 residual stream begun from a 16-bit residual: residual_out
             * and dresidual_out fp32, residual and dresidual 16-bit */
        c->residual_out = c->dresidual_out = f;
        break;
    }
}

static void run_on(th_case c, fusednorm_backend be)
{
    fix_alias_dtypes(&c);
    th_run_case(&c, be, NULL);
}

void th_suite_features(fusednorm_backend be)
{
    for (int n = 0; n < 2; n++)
        for (int d = 0; d < 3; d++)
            for (int set = 0; set < FEATURE_SETS; set++) {
                th_case c = th_case_default((fusednorm_norm)n, 37, 127, all_dtypes[d]);
                apply_features(&c, set);
                run_on(c, be);
            }
}

void th_suite_mixes(fusednorm_backend be)
{
    if (be == FUSEDNORM_CUDA) {
        for (int n = 0; n < 2; n++)
            for (int a = 1; a < 3; a++)
                for (int mix = 1; mix < CUDA_MIXES; mix++)
                    for (int set = 0; set < FEATURE_SETS; set += 1) {
                        th_case c = th_case_default((fusednorm_norm)n, 37, 1000, all_dtypes[a]);
                        apply_cuda_mix(&c, mix, all_dtypes[a]);
                        apply_features(&c, set);
                        /* An alias needs equal dtypes, which these mixes break on purpose. */
                        if (set == 8 || set == 9 || set == 11) continue;
                        run_on(c, be);
                    }
        return;
    }
    /* CPU: every mix is required; a random sample of the 3^12 of them. */
    for (int k = 0; k < 40; k++) {
        th_case c = th_case_default((fusednorm_norm)(k & 1), 37, 1000, FUSEDNORM_F32);
        apply_features(&c, 1 + (k % 3 == 0 ? 6 : (k % 3 == 1 ? 0 : 2)));
        fusednorm_dtype *f[] = {&c.x, &c.residual, &c.residual_out, &c.y, &c.weight, &c.bias,
                                &c.dy, &c.dx, &c.dresidual_out, &c.dresidual, &c.dweight, &c.dbias};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = all_dtypes[th_rand_u64() % 3];
        run_on(c, be);
    }
}

void th_suite_shapes(fusednorm_backend be)
{
    /* (rows, cols): each awkward cols with a few rows; the large ones sampled. */
    static const int64_t shapes[][2] = {
        {0, 1},     {1, 1},     {37, 1},    {199, 1},  {4096, 1},  {1, 3},    {37, 3},    {4096, 3},
        {1, 7},     {199, 7},   {4096, 7},  {0, 127},  {199, 127}, {4096, 127}, {1, 1000}, {199, 1000},
        {37, 2000}, {199, 2000}, {1, 4097}, {37, 4097}, {1, 65537}, {37, 65537}, {0, 65537},
    };
    const size_t n_shapes = sizeof shapes / sizeof shapes[0];
    for (size_t i = 0; i < n_shapes; i++) {
        for (int n = 0; n < 2; n++) {
            fusednorm_dtype dt = all_dtypes[(i + (size_t)n) % 3];
            th_case c = th_case_default((fusednorm_norm)n, shapes[i][0], shapes[i][1], dt);
            /* Rotate through the richer feature sets so each meets odd shapes. */
            static const int sets[] = {1, 7, 3, 8, 9, 4, 11, 2};
            apply_features(&c, sets[(i * 2 + (size_t)n) % (sizeof sets / sizeof sets[0])]);
            run_on(c, be);
        }
    }
    /* rows == 0: succeeds and writes nothing, except dweight/dbias zeroed
     * (or left as they were with ACCUMULATE). */
    for (int acc = 0; acc < 2; acc++)
        for (int n = 0; n < 2; n++) {
            th_case c = th_case_default((fusednorm_norm)n, 0, 1000, FUSEDNORM_BF16);
            apply_features(&c, 1);
            if (acc) c.flags = FUSEDNORM_ACCUMULATE;
            c.pad = 4;
            run_on(c, be);
        }
    /* Large padding and a base offset together on a big row. */
    th_case c = th_case_default(FUSEDNORM_LAYERNORM, 5, 2000, FUSEDNORM_F16);
    apply_features(&c, 7);
    c.pad = 1001;
    run_on(c, be);
}

void th_suite_nonfinite(fusednorm_backend be)
{
    for (int n = 0; n < 2; n++)
        for (int d = 0; d < 3; d++)
            for (int set = 0; set < 2; set++) {
                th_case c = th_case_default((fusednorm_norm)n, 6, 200, all_dtypes[d]);
                apply_features(&c, set ? 1 : 4);
                c.nonfinite = 1;
                run_on(c, be);
            }
}

/* The backward of a training step as both suites below make it: the forward
 * stores rstd (and mean for LayerNorm), the backward is handed them and
 * computes dweight; 9 rows past 32768 columns keep the CPU reference quick,
 * 33 otherwise. */
static th_case training_case(fusednorm_norm norm, int64_t cols, fusednorm_dtype dt)
{
    th_case c = th_case_default(norm, cols > 32768 ? 9 : 33, cols, dt);
    c.store_rstd = 1;
    c.store_mean = norm == FUSEDNORM_LAYERNORM;
    c.bwd_stats_given = 1;
    c.dweight_on = 1;
    return c;
}

/* The calls training makes, at the row lengths that fill a CUDA tile exactly
 * (powers of two, 256..32768): the fast variants of the CUDA kernels (PLAIN,
 * rows held in registers, several rows per CTA with their own barriers,
 * clusters from 32768) run only for such calls, which the awkward shapes
 * above never make. 33 rows: the last group of rows of a CTA is partly past
 * the end. */
void th_suite_training(fusednorm_backend be)
{
    /* Up to 262144: the backward's wide tile in clusters of 2 to 16 (fp32 from 8192: CTAs of
     * 256 threads in clusters of 2 to 16, 512 in 16 at 131072 with 128 KiB of stages; the residual
     * call in CTAs of up to 256 threads over up to 16, 49152 in 16 x 192; 10240 in 4 x 160,
     * 12000 in a cluster of 3). The forward's residual call holds rows past 32 KiB over a
     * cluster (24576 bf16 in 4 CTAs of 192 threads, 32768 in 4 of 256). The forward holds
     * fp32 rows from 128 (8 threads a row) and 192 (16, a quarter idle). 2000, 2304, 2600, 3000,
     * 3200, 3600 and 12000 fill their tiles only in part (the PLAIN variants with column
     * checks; 2600 and 3000 the backward's 16-bit kernel compiled for 192 threads a row,
     * three CTAs per SM; 2304 at 160 threads a row). The 16-bit backward's wide tile in one CTA
     * (step 98): LayerNorm from 3072 (3200, 3600 and 4096 two rows a CTA of 256 threads), RMSNorm
     * 3200, 5000 (inexact) and 6144 (192 threads). */
    static const int64_t cols[] = {128,  192,  256,   1024,  2000,  2048,  2304,  2600,  3000,  3200,  3600, 4096,
                                   5000, 6144, 8192,  10240, 12000, 16384, 24576, 32768, 49152, 65536, 131072,
                                   262144};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int kind = 0; kind < 6; kind++) {
                /* 0: RMSNorm; 1: LayerNorm with bias; 2: LayerNorm without
                 * bias; 3: RMSNorm with the pre-norm residual stream; 4: the
                 * same without dresidual (the Python package's call when
                 * dresidual would be dx itself); 5: the residual call in
                 * place (y == x, residual_out == residual, dx == dy, ...) */
                const fusednorm_norm norm = kind == 1 || kind == 2 ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM;
                th_case c = training_case(norm, cols[i], all_dtypes[d]);
                if (kind == 1) c.bias_on = c.dbias_on = 1;
                if (kind >= 3) c.residual_on = c.residual_out_on = c.dresidual_out_on = 1;
                if (kind == 3) c.dresidual_on = 1;
                if (kind == 5) {
                    apply_features(&c, 8);
                    fix_alias_dtypes(&c);
                }
                run_on(c, be);
            }
}

/* Rows that start off a 16-byte boundary while the weight stays aligned:
 * odd N (each row at another byte offset), odd row pitches (pad) and
 * activations at an odd element offset (misalign 2). On CUDA the forward
 * holds them (the held kernel's ODD form, from 32 whole vectors); the
 * backward runs the register tile's ODD form where every activation shares
 * x's offset within 16 bytes in each row (most cases here; x of another
 * dtype than dx, e.g. an fp32 residual stream, does not), else 16-bit rows
 * up to FN_PLAN_SHIFT_MAX_COLS_BWD (8192) the SHIFT tile (realigned in
 * shared memory) and longer ones two-pass; the awkward shapes above reach
 * them only now and then. */
void th_suite_shifted(fusednorm_backend be)
{
    static const int64_t cols[] = {1, 7, 9, 127, 1001, 2047, 2305, 3001, 3333, 4097, 8191, 12289, 65537};
    static const fusednorm_dtype dts[3] = {FUSEDNORM_BF16, FUSEDNORM_F16, FUSEDNORM_F32};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int kind = 0; kind < 6; kind++) {
                /* 0: RMSNorm; 1: LayerNorm with bias; 2: RMSNorm with the
                 * residual stream; 3: in place (y == x, dx == dy, ...);
                 * 4: activations one element off, padded pitches;
                 * 5: LayerNorm with every feature, odd pitches */
                const fusednorm_norm norm = kind == 1 || kind == 5 ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM;
                th_case c = training_case(norm, cols[i], dts[d]);
                if (kind == 1) c.bias_on = c.dbias_on = 1;
                if (kind == 2) c.residual_on = c.residual_out_on = c.dresidual_out_on = c.dresidual_on = 1;
                if (kind == 3) apply_features(&c, 8);
                if (kind == 4) {
                    c.misalign = 2;
                    c.pad = 8;
                    c.bwd_stats_given = 0;
                }
                if (kind == 5) {
                    apply_features(&c, 1);
                    c.pad = 3;
                }
                fix_alias_dtypes(&c);
                run_on(c, be);
            }
    /* Rows that outnumber the CUDA backward's persistent grid, each CTA
     * walking several: its ODD tile keeps a thread's columns for all of a
     * CTA's rows, which the grid makes meet one offset within 16 bytes (odd
     * N: rows 8 apart for 16-bit, 4 for fp32); a wrong grid or edge column
     * shows in dweight and dbias. fp32 too (odd fp32 rows take the ODD tile). */
    static const int64_t many[] = {2047, 3001, 4097, 8191};
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int kind = 0; kind < 4; kind++) {
                /* 0: RMSNorm; 1: LayerNorm with bias, statistics recomputed;
                 * 2: RMSNorm with the residual stream; 3: activations one
                 * element off, padded pitches */
                const fusednorm_norm norm = kind == 1 ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM;
                th_case c = training_case(norm, many[i], all_dtypes[(i + (size_t)d) % 3]);
                c.rows = 600;
                if (kind == 1) {
                    c.bias_on = c.dbias_on = 1;
                    c.bwd_stats_given = 0;
                }
                if (kind == 2) c.residual_on = c.residual_out_on = c.dresidual_out_on = c.dresidual_on = 1;
                if (kind == 3) {
                    c.misalign = 2;
                    c.pad = 8;
                }
                fix_alias_dtypes(&c);
                run_on(c, be);
            }
}

/* LayerNorm (and RMSNorm) rows with two large values among uniform ones, at
 * the row lengths the CUDA forward streams (one read for the mean and the
 * squared deviations together) and one it holds in registers: rstd must keep
 * its u*sqrt(N) accuracy. */
void th_suite_outliers(fusednorm_backend be)
{
    static const int64_t cols[] = {4096, 32768, 65536, 131072, 262144};
    static const fusednorm_dtype dts[2] = {FUSEDNORM_F32, FUSEDNORM_BF16};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        for (int d = 0; d < 2; d++)
            for (int kind = 0; kind < 3; kind++) {
                /* 0: LayerNorm with bias; 1: LayerNorm with the residual
                 * stream; 2: RMSNorm */
                th_case c = training_case(kind == 2 ? FUSEDNORM_RMSNORM : FUSEDNORM_LAYERNORM, cols[i], dts[d]);
                if (kind == 0) c.bias_on = c.dbias_on = 1;
                if (kind == 1) c.residual_on = c.residual_out_on = c.dresidual_out_on = 1;
                c.outliers = 1;
                run_on(c, be);
            }
}

void th_suite_all(fusednorm_backend be)
{
    th_suite_nonfinite(be);
    th_suite_training(be);
    th_suite_features(be);
    th_suite_mixes(be);
    th_suite_shapes(be);
    th_suite_shifted(be);
    th_suite_outliers(be);
}
