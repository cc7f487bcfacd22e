/* Page-locked host memory for the device's copies (zli_device_ops'
 * alloc_pinned and free_pinned): cudaHostAlloc'd, portable to every device,
 * a host tensor to core. Slow to make, so for buffers kept and copied often
 * (ZeRO-Offload's gradient and parameter buffers), not per copy. */
#include <cuda_runtime_api.h>
#include "cuda_impl.h"

zl_tensor *zli_cuda_alloc_pinned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index)
{
    if (zli_cuda_use(index)) return NULL;
    if (!zl_dtype_traits_of(dt)) {
        zl_error(ZL_EDTYPE, "pinned tensor: invalid dtype %d", (int)dt);
        return NULL;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && numel > INT64_MAX / 8 / shape[i])) {
            zl_error(ZL_EINVAL, "pinned tensor: invalid shape");
            return NULL;
        }
        numel *= shape[i];
    }
    size_t n = (size_t)numel * zl_dtype_size(dt);
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, n ? n : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        zl_error(e == cudaErrorMemoryAllocation ? ZL_ENOMEM : ZL_EDEVICE,
                 "cuda:%d: cannot page-lock %zu bytes of host memory for %s: %s", index, n,
                 zl_mem_category_name(cat), cudaGetErrorString(e));
        return NULL;
    }
    zl_tensor *t = zli_tensor_on_pinned(dt, ndim, shape, cat, zli_cuda_ops(), p, n);
    if (!t) cudaFreeHost(p);
    return t;
}

void zli_cuda_free_pinned(zl_storage *s) { zli_cuda_released("cudaFreeHost", (int)cudaFreeHost(s->data)); }
