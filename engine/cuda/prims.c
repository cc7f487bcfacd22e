/* Core's primitives on a CUDA device (zli_device_ops: copy, fill, add, rand),
 * each one kernel of kernels/copy.cu over the tensors' views (rand: of
 * kernels/rng.cu, the generator's counters); the allocator's
 * table (alloc.c) points here. Launches go to the default stream and are
 * waited for, as core's host primitives are done when they return. */
#include "cuda_impl.h"
#include "kernels/kernels.h"


zl_status zli_cuda_copy_into(zl_tensor *dst, const zl_tensor *src)
{
    int index = dst->storage->dev_index;
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_view s = zli_strided_view(src), d = zli_strided_view(dst);
    bool contiguous = zl_tensor_is_contiguous(dst);
    int launched = zlk_cuda_copy_view(zl_tensor_numel(dst), &s, src->storage->data, (int)src->dtype,
                                      contiguous ? NULL : &d, contiguous ? zl_tensor_data(dst) : dst->storage->data,
                                      (int)dst->dtype, NULL);
    return zli_cuda_done(index, "copy", launched);
}

zl_status zli_cuda_from_host(zl_tensor *dst, const zl_tensor *src)
{
    size_t n = (size_t)zl_tensor_numel(src) * zl_dtype_size(src->dtype);
    return zli_cuda_copy(zl_tensor_data(dst), zl_tensor_data(src), n, ZLI_H2D, dst->storage->dev_index);
}

zl_status zli_cuda_to_host(void *dst, const zl_tensor *src)
{
    size_t n = (size_t)zl_tensor_numel(src) * zl_dtype_size(src->dtype);
    return zli_cuda_copy(dst, zl_tensor_data(src), n, ZLI_D2H, src->storage->dev_index);
}

zl_status zli_cuda_fill(zl_tensor *t, double v)
{
    int index = t->storage->dev_index;
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_view d = zli_strided_view(t);
    return zli_cuda_done(index, "fill", zlk_cuda_fill_view(zl_tensor_numel(t), &d, t->storage->data, (int)t->dtype, v,
                                                           NULL));
}

zl_status zli_cuda_add(zl_tensor *dst, const zl_tensor *src, double alpha)
{
    if (!zl_dtype_traits_of(dst->dtype)->is_float)
        return zl_error(ZL_EDTYPE, "add_: the destination must be a float tensor, got %s", zl_dtype_name(dst->dtype));
    int index = dst->storage->dev_index;
    if (zli_cuda_use(index)) return zli_last_code();
    zlm_view d = zli_strided_view(dst), s = zli_strided_view(src);
    return zli_cuda_done(index, "add", zlk_cuda_add_view(zl_tensor_numel(dst), &d, dst->storage->data, (int)dst->dtype,
                                                         &s, src->storage->data, (int)src->dtype, (float)alpha, NULL));
}

zl_status zli_cuda_rand(zl_tensor *t, bool normal, double a, double b, uint64_t seed, uint64_t offset)
{
    int index = t->storage->dev_index;
    if (zli_cuda_use(index)) return zli_last_code();
    return zli_cuda_done(index, normal ? "normal_" : "uniform_",
                         zlk_cuda_rand(zl_tensor_numel(t), normal, a, b, seed, offset, zl_tensor_data(t),
                                       (int)t->dtype, NULL));
}
