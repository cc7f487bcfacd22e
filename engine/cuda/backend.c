/* The CUDA module's entry (core/backend.h): the backend table libzlua finds
 * by name when it opens libzlua_cuda.so, over the runtime, the caching
 * allocator and, where the toolkit has it, the nccl communicator. */
#include "cuda_impl.h"

static zl_status zero(zl_tensor *t)
{
    return zli_cuda_memset0(zl_tensor_data(t), (size_t)zl_tensor_numel(t) * zl_dtype_size(t->dtype),
                            t->storage->dev_index);
}

static zl_status copy_peer(zl_tensor *dst, const zl_tensor *src)
{
    return zli_cuda_copy_peer(zl_tensor_data(dst), dst->storage->dev_index, zl_tensor_data(src),
                              src->storage->dev_index, (size_t)zl_tensor_numel(src) * zl_dtype_size(src->dtype));
}

static const zli_backend cuda_backend = {
    .abi = ZLI_BACKEND_ABI, .kind = ZL_DEVICE_CUDA, .name = "cuda", .max_devices = ZLI_CUDA_MAX_DEVICES,
    .count = zli_cuda_count, .use = zli_cuda_use, .alloc = zli_cuda_new, .zero = zero, .copy_peer = copy_peer,
    .stats = zli_cuda_stats, .in_use = zli_cuda_in_use, .reserved = zli_cuda_reserved,
    .empty_cache = zli_cuda_empty_cache, .synchronize = zli_cuda_synchronize,
#ifdef ZLUA_HAVE_NCCL
    .comm = zli_cuda_comm,
#endif
    .blas_refuse_plans = zli_cuda_blas_refuse_plans, .blas_fallbacks = zli_cuda_blas_fallbacks,
};

__attribute__((visibility("default"))) const zli_backend *zlua_cuda_backend(const zli_core_api *core, char *why,
                                                                             size_t size)
{
    if (!core || core->abi != ZLI_BACKEND_ABI) {
        snprintf(why, size, "it was built from another zlua (interface %d, this one's %d); rebuild and reinstall "
                 "both", ZLI_BACKEND_ABI, core ? core->abi : -1);
        return NULL;
    }
    zli_cuda_link_core(core);
    return &cuda_backend;
}
