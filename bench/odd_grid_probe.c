/* Lab probe: the backward's dweight partial rows for the 16-bit odd shapes
 * of the A/B (bf16, RMSNorm and LayerNorm, the bench's rows), read from
 * fusednorm_bwd_workspace_size: the clusters the planner (or the knob
 * FUSEDNORM_BWD_ODD_GRID) gives the ODD tile. Needs a GPU (the grid follows
 * the resident clusters); built with CUDA (build/odd_grid_probe, carried in
 * .devbin by bench/devbin.sh):
 *   FUSEDNORM_BWD_ODD_GRID=x8 .devbin/odd_grid_probe   # 8 x the resident clusters */
#include <stdio.h>
#include <cuda_runtime.h>
#include "fusednorm.h"

int main(void)
{
    static const long long cols[] = {32769, 40001, 49153, 65535, 65537};
    for (int ln = 0; ln < 2; ln++)
        for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
            const long long n = cols[i], m = n >= 65536 ? (1LL << 30) / n : 32768;
            const size_t sz = ((size_t)(m * n * 2) + 255) / 256 * 256;
            char *big = NULL;
            void *w = NULL;
            if (cudaMalloc((void **)&big, 3 * sz) != cudaSuccess || cudaMalloc(&w, (size_t)n * 8 + 512) != cudaSuccess) {
                fprintf(stderr, "odd_grid_probe: cudaMalloc of %zu bytes failed (%s)\n", 3 * sz,
                        cudaGetErrorString(cudaGetLastError()));
                return 1;
            }
            fusednorm_bwd_args a = {0};
            a.norm = ln ? FUSEDNORM_LAYERNORM : FUSEDNORM_RMSNORM;
            a.rows = m, a.cols = n, a.eps = 1e-6f;
            a.x = (fusednorm_tensor){big, FUSEDNORM_BF16, 0};
            a.dy = (fusednorm_tensor){big + sz, FUSEDNORM_BF16, 0};
            a.dx = (fusednorm_tensor){big + 2 * sz, FUSEDNORM_BF16, 0};
            a.weight = (fusednorm_tensor){w, FUSEDNORM_BF16, 0};
            a.dweight = (fusednorm_tensor){(char *)w + 4 * n + 128, FUSEDNORM_BF16, 0};
            if (ln) a.dbias = (fusednorm_tensor){(char *)w + 6 * n + 192, FUSEDNORM_BF16, 0};
            a.backend = FUSEDNORM_CUDA;
            size_t bytes = 0;
            const fusednorm_status s = fusednorm_bwd_workspace_size(&a, &bytes);
            printf("%s bf16 %lldx%lld: workspace %zu bytes, %.1f partial rows%s%s\n", ln ? "ln " : "rms", m, n, bytes,
                   (double)bytes / ((ln ? 2.0 : 1.0) * 4.0 * (double)n), s ? " error: " : "", s ? fusednorm_last_error() : "");
            cudaFree(big);
            cudaFree(w);
        }
    return 0;
}
