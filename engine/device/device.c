/* The public device calls (zlua/device.h): each goes to the host allocator
 * for the CPU or to the CUDA backend (engine/cuda), and moves tensors between
 * them. Stands on core; the CUDA backend behind it is real or absent.c. */
#include <string.h>
#include "../cuda/cuda_impl.h"

static zl_status need_kind(const char *op, zl_device kind)
{
    if (kind == ZL_DEVICE_CPU || kind == ZL_DEVICE_CUDA) return ZL_OK;
    return zl_error(ZL_EINVAL, "%s: unknown device kind %d", op, (int)kind);
}

int zl_device_count(zl_device kind)
{
    if (need_kind("device_count", kind)) return 0;
    return kind == ZL_DEVICE_CPU ? 1 : zli_cuda_count();
}

zl_status zl_device_check(zl_device kind, int index)
{
    if (need_kind("device", kind)) return ZL_EINVAL;
    if (kind == ZL_DEVICE_CUDA) return zli_cuda_use(index);
    return index == 0 ? ZL_OK : zl_error(ZL_EINVAL, "cpu:%d: no such device (the CPU is device 0)", index);
}

zl_tensor *zl_tensor_new_on(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, zl_device kind,
                            int index)
{
    if (zl_device_check(kind, index)) return NULL;
    return kind == ZL_DEVICE_CPU ? zl_tensor_new(dt, ndim, shape, cat) : zli_cuda_new(dt, ndim, shape, cat, index);
}

zl_tensor *zl_tensor_zeros_on(zl_dtype dt, int ndim, const int64_t *shape, zl_device kind, int index)
{
    if (kind == ZL_DEVICE_CPU) return zl_device_check(kind, index) ? NULL : zl_tensor_zeros(dt, ndim, shape);
    zl_tensor *t = zl_tensor_new_on(dt, ndim, shape, ZL_MEM_OTHER, kind, index);
    if (t && zli_cuda_memset0(t->storage->data, t->storage->nbytes, index)) {
        zl_tensor_release(t);
        return NULL;
    }
    return t;
}

static size_t view_bytes(const zl_tensor *t) { return (size_t)zl_tensor_numel(t) * zl_dtype_size(t->dtype); }

/* A host tensor holding what the device view t reads, contiguous. A strided
 * view comes over as its whole storage and is made contiguous on the host,
 * since the device has no strided copy kernel of its own yet. */
static zl_tensor *to_host(const zl_tensor *t)
{
    const zl_storage *s = t->storage;
    if (zl_tensor_is_contiguous(t)) {
        zl_tensor *out = zl_tensor_new(t->dtype, t->ndim, t->shape, s->cat);
        if (out && zli_cuda_copy(zl_tensor_data(out), zl_tensor_data(t), view_bytes(t), ZLI_D2H, s->dev_index)) {
            zl_tensor_release(out);
            return NULL;
        }
        return out;
    }
    int64_t whole = (int64_t)(s->nbytes / zl_dtype_size(t->dtype));
    zl_tensor *raw = zl_tensor_new(t->dtype, 1, &whole, ZL_MEM_OTHER);
    if (!raw) return NULL;
    zl_tensor *out = NULL;
    if (!zli_cuda_copy(zl_tensor_data(raw), s->data, (size_t)whole * zl_dtype_size(t->dtype), ZLI_D2H,
                       s->dev_index)) {
        zl_tensor *v = zli_view_of(raw, t->ndim, t->shape, t->stride, t->offset);
        if (v) out = zli_copy_as(v, t->dtype, s->cat);
        zl_tensor_release(v);
    }
    zl_tensor_release(raw);
    return out;
}

static zl_tensor *host_to_cuda(zl_tensor *t, int index)
{
    zl_tensor *h = zl_tensor_is_contiguous(t) ? zl_tensor_retain(t) : zli_copy_as(t, t->dtype, t->storage->cat);
    if (!h) return NULL;
    zl_tensor *out = zli_cuda_new(t->dtype, t->ndim, t->shape, t->storage->cat, index);
    if (out && zli_cuda_copy(zl_tensor_data(out), zl_tensor_data(h), view_bytes(h), ZLI_H2D, index)) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(h);
    return out;
}

zl_tensor *zl_tensor_to_device(zl_tensor *t, zl_device kind, int index)
{
    if (zli_check_arg("to_device", "tensor", t) || zl_device_check(kind, index)) return NULL;
    zl_device from = zl_tensor_device(t);
    int from_index = zl_tensor_device_index(t);
    if (from == kind && from_index == index) return zl_tensor_retain(t);
    if (from == ZL_DEVICE_CPU) return host_to_cuda(t, index);
    if (kind == ZL_DEVICE_CPU) return to_host(t);
    if (zl_tensor_is_contiguous(t)) {
        zl_tensor *out = zli_cuda_new(t->dtype, t->ndim, t->shape, t->storage->cat, index);
        if (out && zli_cuda_copy_peer(zl_tensor_data(out), index, zl_tensor_data(t), from_index, view_bytes(t))) {
            zl_tensor_release(out);
            return NULL;
        }
        return out;
    }
    zl_tensor *h = to_host(t);
    zl_tensor *out = h ? host_to_cuda(h, index) : NULL;
    zl_tensor_release(h);
    return out;
}

zl_mem_stats zl_device_mem_stats(zl_device kind, int index, zl_mem_category cat)
{
    if (kind == ZL_DEVICE_CUDA) return zli_cuda_stats(index, cat);
    if (cat != ZL_MEM_COUNT) return zl_mem_stats_of(cat);
    zl_mem_stats all = {0, 0};
    for (int c = 0; c < ZL_MEM_COUNT; c++) all.current += zl_mem_stats_of((zl_mem_category)c).current;
    all.peak = all.current;   /* the host keeps no peak of the sum */
    return all;
}

int64_t zl_device_mem_reserved(zl_device kind, int index)
{
    if (kind == ZL_DEVICE_CUDA) return zli_cuda_reserved(index);
    int64_t sum = 0;
    for (int c = 0; c < ZL_MEM_COUNT; c++) sum += zl_mem_stats_of((zl_mem_category)c).current;
    return sum;
}

zl_status zl_device_empty_cache(zl_device kind, int index)
{
    if (need_kind("empty_cache", kind)) return ZL_EINVAL;
    return kind == ZL_DEVICE_CUDA ? zli_cuda_empty_cache(index) : ZL_OK;
}

zl_status zl_device_synchronize(zl_device kind, int index)
{
    if (need_kind("synchronize", kind)) return ZL_EINVAL;
    return kind == ZL_DEVICE_CUDA ? zli_cuda_synchronize(index) : ZL_OK;
}
