/* Where the engine's flat buffers live (host memory, or the device the
 * parameters are on) and the element moves between them: copies with dtype
 * conversion, zeroing and the scaled add that accumulates gradients, in any
 * pair of places. Host to host is memcpy, zl_convert and zz_axpy as ever;
 * a device's side goes through its table (core/tensor_impl.h), on views
 * that record nothing. */
#include <string.h>
#include "zero_impl.h"

bool zz_on_device(const zl_tensor *t) { return t->storage->dev != NULL; }

zl_tensor *zz_new(const zl_zero *z, bool on_dev, zl_dtype dt, int64_t n, zl_mem_category cat, bool zero)
{
    if (!on_dev || !z->dev) return zz_buffer(dt, n, cat, zero);
    zl_tensor *t = z->dev->alloc(dt, 1, &n, cat, z->dev_index);
    if (t && zero && n > 0 && z->dev->fill(t, 0)) {
        zl_tensor_release(t);
        return NULL;
    }
    return t;
}

zl_tensor *zz_new_host(const zl_zero *z, bool pin, zl_dtype dt, int64_t n, zl_mem_category cat, bool zero)
{
    if (!pin || !z->dev || !z->dev->alloc_pinned) return zz_buffer(dt, n, cat, zero);
    zl_tensor *t = z->dev->alloc_pinned(dt, 1, &n, cat, z->dev_index);
    if (t && zero) memset(zl_tensor_data(t), 0, (size_t)n * zl_dtype_size(dt));
    return t;
}

/* Elements [off, off + n) of flat t as a view of their own. */
static zl_tensor *part(const zl_tensor *t, int64_t off, int64_t n)
{
    int64_t one = 1;
    zl_tensor *v = zli_view_of(t, 1, &n, &one, t->offset + off);
    if (!v) zl_error(ZL_ENOMEM, "ZeRO: out of memory viewing a buffer");
    return v;
}

/* A host buffer of n elements of dt for a move through the host. */
static zl_tensor *host_tmp(zl_dtype dt, int64_t n) { return zz_buffer(dt, n, ZL_MEM_COMM, false); }

zl_status zz_copy(zl_tensor *dst, int64_t doff, const zl_tensor *src, int64_t soff, int64_t n)
{
    if (n <= 0) return ZL_OK;
    zl_dtype dd = zl_tensor_dtype(dst), sd = zl_tensor_dtype(src);
    bool ddev = zz_on_device(dst), sdev = zz_on_device(src);
    if (!ddev && !sdev) {
        const void *s = zz_at((zl_tensor *)src, soff);
        if (dd == sd) memcpy(zz_at(dst, doff), s, (size_t)n * zl_dtype_size(dd));
        else zl_convert(s, sd, zz_at(dst, doff), dd, (size_t)n);
        return ZL_OK;
    }
    zl_tensor *dv = part(dst, doff, n), *sv = dv ? part(src, soff, n) : NULL, *tmp = NULL;
    zl_status st = sv ? ZL_OK : ZL_ENOMEM;
    if (!st && ddev && sdev) {
        st = zli_same_device("ZeRO", dst, src);
        if (!st) st = dst->storage->dev->copy(dv, sv);
    } else if (!st && ddev) {
        /* host -> device: converted on the host first, the device's bytes sent */
        if (dd != sd && !(tmp = host_tmp(dd, n))) st = ZL_ENOMEM;
        if (tmp) zl_convert(zl_tensor_data(sv), sd, zl_tensor_data(tmp), dd, (size_t)n);
        if (!st) st = dst->storage->dev->from_host(dv, tmp ? tmp : sv);
    } else if (!st) {
        /* device -> host: the device's bytes fetched, converted on the host */
        if (dd != sd && !(tmp = host_tmp(sd, n))) st = ZL_ENOMEM;
        if (!st) st = src->storage->dev->to_host(tmp ? zl_tensor_data(tmp) : zl_tensor_data(dv), sv);
        if (!st && tmp) zl_convert(zl_tensor_data(tmp), sd, zl_tensor_data(dv), dd, (size_t)n);
    }
    zl_tensor_release(tmp);
    zl_tensor_release(sv);
    zl_tensor_release(dv);
    return st;
}

static const zli_copy_stream *streams(const zl_zero *z) { return z->dev ? z->dev->streams : NULL; }

zl_status zz_mark(const zl_zero *z, void **ev)
{
    *ev = NULL;
    return streams(z) ? streams(z)->mark(z->dev_index, ev) : ZL_OK;
}

zl_status zz_copy_start(const zl_zero *z, void *after, zl_tensor *dst, int64_t doff, const zl_tensor *src,
                        int64_t soff, int64_t n, void **done)
{
    *done = NULL;
    bool ddev = zz_on_device(dst), sdev = zz_on_device(src);
    const zl_storage *d = (ddev ? dst : src)->storage;
    /* the stream copies bytes between host memory and the engine's device only */
    if (!streams(z) || ddev == sdev || d->dev != z->dev || d->dev_index != z->dev_index ||
        zl_tensor_dtype(dst) != zl_tensor_dtype(src) || n <= 0)
        return zz_copy(dst, doff, src, soff, n);
    return streams(z)->start(z->dev_index, after, zz_at(dst, doff), zz_at((zl_tensor *)src, soff),
                             (size_t)n * zl_dtype_size(zl_tensor_dtype(dst)), sdev, done);
}

zl_status zz_event_wait(const zl_zero *z, void **ev, bool host)
{
    if (!*ev) return ZL_OK;
    zl_status st = streams(z)->wait(z->dev_index, *ev, host);
    if (host) zz_event_drop(z, ev);
    return st;
}

void zz_event_drop(const zl_zero *z, void **ev)
{
    if (*ev) streams(z)->drop(*ev);
    *ev = NULL;
}

zl_status zz_zero(zl_tensor *t, int64_t off, int64_t n)
{
    if (n <= 0) return ZL_OK;
    if (!zz_on_device(t)) {
        memset(zz_at(t, off), 0, (size_t)n * zl_dtype_size(zl_tensor_dtype(t)));
        return ZL_OK;
    }
    zl_tensor *v = part(t, off, n);
    zl_status st = v ? t->storage->dev->fill(v, 0) : ZL_ENOMEM;
    zl_tensor_release(v);
    return st;
}

zl_status zz_add(zl_tensor *dst, int64_t doff, const zl_tensor *src, int64_t soff, int64_t n, float alpha)
{
    if (n <= 0) return ZL_OK;
    if (!zz_on_device(dst) && !zz_on_device(src)) {
        zz_axpy(zz_at(dst, doff), zl_tensor_dtype(dst), (const float *)zz_at((zl_tensor *)src, soff), n, alpha, false);
        return ZL_OK;
    }
    zl_status st = zli_same_device("ZeRO", dst, src);
    if (st) return st;
    zl_tensor *dv = part(dst, doff, n), *sv = dv ? part(src, soff, n) : NULL;
    st = sv ? dst->storage->dev->add(dv, sv, alpha) : ZL_ENOMEM;
    zl_tensor_release(sv);
    zl_tensor_release(dv);
    return st;
}

void zz_put(zl_tensor *dst, int64_t doff, const zl_tensor *src, int64_t soff, int64_t n, float alpha)
{
    if (n > 0)
        zz_axpy(zz_at(dst, doff), zl_tensor_dtype(dst), (const float *)zz_at((zl_tensor *)src, soff), n, alpha, true);
}
