/*
 * Launch plumbing shared by the forward and backward launchers: one function
 * that either launches a kernel (cluster dimension and dynamic shared memory
 * set as needed) or, with `active` non-NULL, asks how many CTAs (cluster ==
 * 1) or clusters (cluster > 1) of it the current device keeps resident at
 * once, the persistent grid's size. Both go through the same configuration,
 * so the occupancy answer is for exactly the launch that follows.
 */
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

namespace fn {

/* Options of a launch (launch_or_query's last argument, or-ed):
 * LAUNCH_BALANCE asks the cluster scheduler for load balancing rather than its
 * default (spread), for one-shot grids of many clusters: the held forward over
 * clusters gained 1-12% with it (docs/perf.md, session 10, step 56).
 * LAUNCH_DEPENDENT launches the kernel as a programmatic dependent of the one
 * before it on the stream (sm_90): it may start once every CTA of that kernel
 * has called launch_dependents() or exited, and must call grid_dependency_wait()
 * (common.cuh) before it reads what that kernel wrote. */
enum : unsigned { LAUNCH_BALANCE = 1u, LAUNCH_DEPENDENT = 2u };

template <typename Params>
static cudaError_t launch_or_query(void (*kernel)(Params), const Params &params, int grid, int threads, size_t smem,
                                   int cluster, cudaStream_t stream, int *active, unsigned options = 0)
{
    /* Static plus dynamic shared memory over 48 KiB needs the opt-in, or the
     * launch fails and the occupancy query answers 0 (which once sent every
     * 16-bit 3-stage plan, 48 KiB + the 1 KiB reduction scratch, to the
     * two-pass fallback). The static part of these kernels is under 16 KiB. */
    if (smem > 32 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[3];
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 0;
    if (cluster > 1) {
        if (cluster > 8) { /* 16 is "non-portable": allowed on sm_90 when asked for */
            cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            if (e != cudaSuccess) return e;
        }
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = cluster;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.numAttrs = 1;
        if (options & LAUNCH_BALANCE) {
            attr[cfg.numAttrs].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
            attr[cfg.numAttrs].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicyLoadBalancing;
            cfg.numAttrs++;
        }
    }
    if (options & LAUNCH_DEPENDENT) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs++;
    }
    if (!active) return cudaLaunchKernelEx(&cfg, kernel, params);
    /* The cluster query wants a grid that is a whole number of clusters. */
    cfg.gridDim = dim3(cluster);
    if (cluster > 1) return cudaOccupancyMaxActiveClusters(active, kernel, &cfg);
    int per_sm = 0, dev = 0, sms = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
    if (e == cudaSuccess) e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    *active = per_sm * sms;
    return e;
}

/* The kernels compiled for a threads-per-row value (the PLAIN variants' TPR):
 * calls launch(std::integral_constant<int, T>{}) for the T of TS equal to tpr
 * and returns what it returns, or returns fallback() (the kernel with a
 * run-time tpr) when tpr is none of them. */
template <int... TS, typename L, typename F>
static cudaError_t with_static_tpr(int tpr, L &&launch, F &&fallback)
{
    cudaError_t r = cudaSuccess;
    const bool found = ((tpr == TS ? (r = launch(std::integral_constant<int, TS>{}), true) : false) || ...);
    return found ? r : fallback();
}

} // namespace fn
