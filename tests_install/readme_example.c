/* RMSNorm forward and backward on the CPU, as a user of the library writes it.
 * This file is the example shown in README.md (kept identical by the
 * install test, which builds it against an installed fusednorm). */
#include <fusednorm.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { ROWS = 4, COLS = 1000 };
    float *x = malloc(sizeof(float) * ROWS * COLS), *y = malloc(sizeof(float) * ROWS * COLS);
    float *w = malloc(sizeof(float) * COLS), *rstd = malloc(sizeof(float) * ROWS);
    float *dy = malloc(sizeof(float) * ROWS * COLS), *dx = malloc(sizeof(float) * ROWS * COLS);
    float *dw = malloc(sizeof(float) * COLS);
    for (int i = 0; i < ROWS * COLS; i++) {
        x[i] = (float)rand() / RAND_MAX - 0.5f;
        dy[i] = (float)rand() / RAND_MAX - 0.5f;
    }
    for (int j = 0; j < COLS; j++) w[j] = 1.0f + 0.01f * (float)(j % 7);

    /* Zero-initialized fields mean the defaults: no residual, no bias,
     * dense rows (row_stride 0), the CPU backend. */
    fusednorm_fwd_args f = {0};
    f.norm = FUSEDNORM_RMSNORM;
    f.rows = ROWS;
    f.cols = COLS;
    f.eps = 1e-6f;
    f.x = (fusednorm_tensor){x, FUSEDNORM_F32, 0};
    f.weight = (fusednorm_tensor){w, FUSEDNORM_F32, 0};
    f.y = (fusednorm_tensor){y, FUSEDNORM_F32, 0};
    f.rstd = rstd;                                   /* saved for the backward */
    if (fusednorm_fwd(&f) != FUSEDNORM_OK) {
        fprintf(stderr, "fwd: %s\n", fusednorm_last_error());
        return 1;
    }

    fusednorm_bwd_args b = {0};
    b.norm = FUSEDNORM_RMSNORM;
    b.rows = ROWS;
    b.cols = COLS;
    b.eps = 1e-6f;
    b.dy = (fusednorm_tensor){dy, FUSEDNORM_F32, 0};
    b.x = f.x;                                       /* what was normalized */
    b.weight = f.weight;
    b.rstd = rstd;
    b.dx = (fusednorm_tensor){dx, FUSEDNORM_F32, 0};
    b.dweight = (fusednorm_tensor){dw, FUSEDNORM_F32, 0};
    size_t bytes = 0;                                /* the caller owns the workspace */
    if (fusednorm_bwd_workspace_size(&b, &bytes) != FUSEDNORM_OK) {
        fprintf(stderr, "workspace: %s\n", fusednorm_last_error());
        return 1;
    }
    b.workspace = bytes ? malloc(bytes) : NULL;
    b.workspace_bytes = bytes;
    fusednorm_status s = fusednorm_bwd(&b);
    if (s != FUSEDNORM_OK) {
        fprintf(stderr, "bwd: %s: %s\n", fusednorm_status_string(s), fusednorm_last_error());
        return 1;
    }
    printf("fusednorm %d: y[0] = %g, dx[0] = %g, dweight[0] = %g\n", fusednorm_version(), y[0], dx[0], dw[0]);
    free(b.workspace);
    free(x); free(y); free(w); free(rstd); free(dy); free(dx); free(dw);
    return 0;
}
