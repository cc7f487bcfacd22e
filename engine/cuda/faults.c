/* Each device's index-fault note (math/index_fault.h): device memory an op's
 * kernel notes its first out-of-range index in, read back by the device's
 * next copy to the host or synchronisation, either of which waits for the
 * kernels queued before it, while an op may have written it since the last
 * read. */
#include <stdio.h>
#include <cuda_runtime_api.h>
#include "cuda_impl.h"

static zlm_index_fault *g_note[ZLI_CUDA_MAX_DEVICES];
static bool g_armed[ZLI_CUDA_MAX_DEVICES];

zlm_index_fault *zli_cuda_index_faults(int index)
{
    if (index < 0 || index >= ZLI_CUDA_MAX_DEVICES || zli_cuda_use(index)) return NULL;
    if (!g_note[index]) {
        void *p = NULL;
        if (cudaMalloc(&p, sizeof(zlm_index_fault)) != cudaSuccess) return NULL;
        if (cudaMemset(p, 0, sizeof(zlm_index_fault)) != cudaSuccess) {
            cudaFree(p);
            return NULL;
        }
        g_note[index] = p;
    }
    g_armed[index] = true;
    return g_note[index];
}

zl_status zli_cuda_check_faults(int index)
{
    if (index < 0 || index >= ZLI_CUDA_MAX_DEVICES || !g_armed[index]) return ZL_OK;
    zlm_index_fault f;
    cudaError_t e = cudaMemcpy(&f, g_note[index], sizeof f, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && f.set) e = cudaMemset(g_note[index], 0, sizeof f);
    if (e != cudaSuccess) return zli_cuda_fail("reading the index-fault note", index, e);
    g_armed[index] = false;
    if (!f.set) return ZL_OK;
    char where[32], msg[512];
    snprintf(where, sizeof where, "cuda:%d", index);
    zlm_index_fault_message(&f, where, msg, sizeof msg);
    return zl_error(ZL_EINVAL, "%s", msg);
}
