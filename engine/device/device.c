/* The public device calls (zlua/device.h): each goes to its kind's backend
 * (core/backend.h: the CPU's, or the module that serves CUDA), and moves
 * tensors between two backends through their storages' tables. */
#include <stdio.h>
#include <string.h>
#include "../core/backend.h"

int zl_device_count(zl_device kind)
{
    const zli_backend *b = zli_backend_of("device_count", kind);
    return b ? b->count() : 0;
}

zl_status zl_device_check(zl_device kind, int index)
{
    const zli_backend *b = zli_backend_of("device", kind);
    return b ? b->use(index) : zli_last_code();
}

zl_tensor *zl_tensor_new_on(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, zl_device kind,
                            int index)
{
    const zli_backend *b = zli_backend_of("tensor_new_on", kind);
    if (!b || b->use(index)) return NULL;
    return b->alloc(dt, ndim, shape, cat, index);
}

zl_tensor *zl_tensor_zeros_on(zl_dtype dt, int ndim, const int64_t *shape, zl_device kind, int index)
{
    zl_tensor *t = zl_tensor_new_on(dt, ndim, shape, ZL_MEM_OTHER, kind, index);
    if (t && zli_backend_of("tensor_zeros_on", kind)->zero(t)) {
        zl_tensor_release(t);
        return NULL;
    }
    return t;
}

/* t itself when contiguous, else a contiguous copy in the same memory (core
 * copies strided views on a device too). */
static zl_tensor *contiguous_in_place(zl_tensor *t)
{
    return zl_tensor_is_contiguous(t) ? zl_tensor_retain(t) : zli_copy_as(t, t->dtype, t->storage->cat);
}

/* A contiguous copy of t on device `index` of backend b: from host memory
 * through the new storage's table, to host memory through t's, between two
 * devices (of the one device kind there is besides the CPU) through the
 * backend's peer copy. */
static zl_tensor *moved(zl_tensor *t, const zli_backend *b, int index)
{
    zl_tensor *c = contiguous_in_place(t);
    if (!c) return NULL;
    zl_tensor *out = b->alloc(c->dtype, c->ndim, c->shape, c->storage->cat, index);
    const zli_device_ops *from = c->storage->dev, *to = out ? out->storage->dev : NULL;
    zl_status st = out ? ZL_OK : zli_last_code();
    if (out && !from) st = to->from_host(out, c);
    else if (out && !to) st = from->to_host(zl_tensor_data(out), c);
    else if (out) st = b->copy_peer(out, c);
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
    return moved(t, zli_backend_of("to_device", kind), index);
}

/* The counters' arguments and backend: ZL_EINVAL naming the bad argument,
 * ZL_EDEVICE saying why the kind has no backend here; *b [out] the backend. */
static zl_status counter_args(const char *fn, zl_device kind, int index, zl_mem_category cat, const zli_backend **b)
{
    if (!(*b = zli_backend_of(fn, kind)) && !zli_backend_known(kind)) return ZL_EINVAL;
    char name[32], why[1024];
    zl_device_str(kind, index, name, sizeof name);
    if (!strchr(name, ':')) snprintf(name + strlen(name), sizeof name - strlen(name), ":%d", index);
    if (!*b) {
        snprintf(why, sizeof why, "%s", zl_last_error());
        return zl_error(ZL_EDEVICE, "%s: %s: %s", fn, name, why);
    }
    if (index < 0 || index >= (*b)->max_devices)
        return zl_error(ZL_EINVAL, "%s: %s: no such device (index 0..%d)", fn, name, (*b)->max_devices - 1);
    if ((unsigned)cat > ZL_MEM_COUNT) return zl_error(ZL_EINVAL, "%s: unknown memory category %d", fn, (int)cat);
    return ZL_OK;
}

zl_mem_stats zl_device_mem_stats(zl_device kind, int index, zl_mem_category cat)
{
    const zli_backend *b;
    if (counter_args("zl_device_mem_stats", kind, index, cat, &b)) return (zl_mem_stats){0, 0};
    return b->stats(index, cat);
}

int64_t zl_device_mem_in_use(zl_device kind)
{
    const zli_backend *b = zli_backend_opened(kind);
    return b ? b->in_use() : 0;
}

int64_t zl_device_mem_reserved(zl_device kind, int index)
{
    const zli_backend *b;
    if (counter_args("zl_device_mem_reserved", kind, index, ZL_MEM_COUNT, &b)) return 0;
    return b->reserved(index);
}

zl_status zl_device_empty_cache(zl_device kind, int index)
{
    const zli_backend *b = zli_backend_of("empty_cache", kind);
    return b ? b->empty_cache(index) : zli_last_code();
}

zl_status zl_device_synchronize(zl_device kind, int index)
{
    const zli_backend *b = zli_backend_of("synchronize", kind);
    return b ? b->synchronize(index) : zli_last_code();
}
