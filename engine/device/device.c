/* The public device calls (zlua/device.h): each goes to the host allocator
 * for the CPU or to the CUDA backend (engine/cuda), and moves tensors between
 * them. Stands on core; the CUDA backend behind it is real or absent.c. */
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

/* t itself when contiguous, else a contiguous copy in the same memory (core
 * copies strided views on a device too). */
static zl_tensor *contiguous_in_place(zl_tensor *t)
{
    return zl_tensor_is_contiguous(t) ? zl_tensor_retain(t) : zli_copy_as(t, t->dtype, t->storage->cat);
}

/* A contiguous copy of t, from a device to the host, to device `index`, or
 * between devices. */
static zl_tensor *moved(zl_tensor *t, zl_device kind, int index)
{
    zl_tensor *c = contiguous_in_place(t);
    if (!c) return NULL;
    const zl_storage *s = c->storage;
    zl_tensor *out = kind == ZL_DEVICE_CPU ? zl_tensor_new(c->dtype, c->ndim, c->shape, s->cat)
                                           : zli_cuda_new(c->dtype, c->ndim, c->shape, s->cat, index);
    zl_status st = out ? ZL_OK : zli_last_code();
    if (out && kind == ZL_DEVICE_CPU)
        st = zli_cuda_copy(zl_tensor_data(out), zl_tensor_data(c), view_bytes(c), ZLI_D2H, s->dev_index);
    else if (out && !s->dev)
        st = zli_cuda_copy(zl_tensor_data(out), zl_tensor_data(c), view_bytes(c), ZLI_H2D, index);
    else if (out)
        st = zli_cuda_copy_peer(zl_tensor_data(out), index, zl_tensor_data(c), s->dev_index, view_bytes(c));
    zl_tensor_release(c);
    if (st) {
        zl_tensor_release(out);
        return NULL;
    }
    return out;
}

zl_tensor *zl_tensor_to_device(zl_tensor *t, zl_device kind, int index)
{
    if (zli_check_arg("to_device", "tensor", t) || zl_device_check(kind, index)) return NULL;
    if (zl_tensor_device(t) == kind && zl_tensor_device_index(t) == index) return zl_tensor_retain(t);
    return moved(t, kind, index);
}

/* The counters' arguments, checked without starting a device runtime (as
 * zl_device_check would): ZL_EINVAL naming the bad one. */
static zl_status counter_args(const char *fn, zl_device kind, int index, zl_mem_category cat)
{
    if (kind != ZL_DEVICE_CPU && kind != ZL_DEVICE_CUDA)
        return zl_error(ZL_EINVAL, "%s: unknown device kind %d", fn, (int)kind);
    int limit = kind == ZL_DEVICE_CUDA ? ZLI_CUDA_MAX_DEVICES : 1;
    if (index < 0 || index >= limit)
        return zl_error(ZL_EINVAL, "%s: %s:%d: no such device (index 0..%d)", fn,
                        kind == ZL_DEVICE_CUDA ? "cuda" : "cpu", index, limit - 1);
    if ((unsigned)cat > ZL_MEM_COUNT)
        return zl_error(ZL_EINVAL, "%s: unknown memory category %d", fn, (int)cat);
    return ZL_OK;
}

zl_mem_stats zl_device_mem_stats(zl_device kind, int index, zl_mem_category cat)
{
    if (counter_args("zl_device_mem_stats", kind, index, cat)) return (zl_mem_stats){0, 0};
    if (kind == ZL_DEVICE_CUDA) return zli_cuda_stats(index, cat);
    if (cat != ZL_MEM_COUNT) return zl_mem_stats_of(cat);
    zl_mem_stats all = {0, 0};
    for (int c = 0; c < ZL_MEM_COUNT; c++) all.current += zl_mem_stats_of((zl_mem_category)c).current;
    all.peak = all.current;   /* the host keeps no peak of the sum */
    return all;
}

int64_t zl_device_mem_in_use(zl_device kind)
{
    if (kind != ZL_DEVICE_CUDA) return zl_device_mem_stats(kind, 0, ZL_MEM_COUNT).current;
    return zli_cuda_in_use();
}

int64_t zl_device_mem_reserved(zl_device kind, int index)
{
    if (counter_args("zl_device_mem_reserved", kind, index, ZL_MEM_COUNT)) return 0;
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
