/* Tensor lifetime, inspection, element access, and the plain fill/copy/add
 * under the public in-place ops. Release is iterative: data a layer above hangs
 * on a tensor may hold other tensors, and a long chain must not recurse. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include "tensor_impl.h"
#include "memory_impl.h"
#include "view.h"

int64_t zli_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

bool zli_shape_fits(int ndim, const int64_t *shape)
{
    int64_t s = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s)) return false;
    return true;
}

void zli_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

zl_status zli_norm_dim(const char *op, int dim, int ndim, int *out)
{
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim || ndim == 0) {
        if (ndim == 0)
            return zl_error(ZL_EINVAL, "%s: dimension %d is out of range for a 0-d tensor", op, dim);
        return zl_error(ZL_EINVAL, "%s: dimension %d is out of range for a %d-d tensor "
                        "(expected %d..%d)", op, dim, ndim, -ndim, ndim - 1);
    }
    *out = d;
    return ZL_OK;
}

zl_status zli_norm_dim_insert(const char *op, int dim, int ndim, int *out)
{
    int d = dim < 0 ? dim + ndim + 1 : dim;
    if (d < 0 || d > ndim)
        return zl_error(ZL_EINVAL, "%s: dimension %d is out of range for a new dimension of a %d-d tensor "
                        "(expected %d..%d)", op, dim, ndim, -ndim - 1, ndim);
    *out = d;
    return ZL_OK;
}

zl_status zli_check_arg(const char *op, const char *role, const zl_tensor *t)
{
    if (!t) return zl_error(ZL_EINVAL, "%s: %s is NULL", op, role);
    if (t->refcount <= 0) return zl_error(ZL_ESTATE, "%s: %s was released", op, role);
    return ZL_OK;
}

char *zl_shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t at = 0;
    if (n == 0) return buf;
    at += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

static zl_tensor *header_new(void)
{
    zl_tensor *t = calloc(1, sizeof *t);
    if (!t) zl_error(ZL_ENOMEM, "out of memory allocating a tensor header");
    else t->refcount = 1;
    return t;
}

static zl_status check_shape(const char *op, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > ZL_MAX_DIMS)
        return zl_error(ZL_EINVAL, "%s: %d dimensions requested, at most %d are supported", op,
                        ndim, ZL_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return zl_error(ZL_EINVAL, "%s: size %lld at dimension %d is negative", op,
                            (long long)shape[i], i);
    /* A zero-sized dimension beside huge ones holds nothing, but its strides
     * would still overflow. */
    if (!zli_shape_fits(ndim, shape)) {
        bool empty = false;
        for (int i = 0; i < ndim; i++) empty = empty || shape[i] == 0;
        char b[256];
        return zl_error(ZL_EINVAL, empty ? "%s: shape %s has strides beyond a 64-bit count"
                                         : "%s: shape %s has more elements than a 64-bit count holds",
                        op, zl_shape_str(ndim, shape, b, sizeof b));
    }
    return ZL_OK;
}

/* t becomes a contiguous view of all of s. */
static zl_tensor *contiguous_over(zl_tensor *t, zl_storage *s, zl_dtype dt, int ndim, const int64_t *shape)
{
    t->storage = s;
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    zli_contiguous_strides(ndim, shape, t->stride);
    return t;
}

/* align 0: the host hook's memory; otherwise the system's, rounded up to
 * whole `align` blocks with the tail zeroed. Charged to the current context. */
static zl_tensor *tensor_alloc(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, size_t align)
{
    if (!zl_dtype_traits_of(dt)) { zl_error(ZL_EDTYPE, "tensor: invalid dtype %d", (int)dt); return NULL; }
    if (check_shape("tensor", ndim, shape)) return NULL;
    int64_t n = zli_numel(ndim, shape);
    if (n > (int64_t)(SIZE_MAX / 2 / zl_dtype_size(dt))) {
        zl_error(ZL_ENOMEM, "tensor: %lld elements is too many", (long long)n);
        return NULL;
    }
    zl_tensor *t = header_new();
    zl_storage *s = calloc(1, sizeof *s);
    if (!t || !s) { free(t); free(s); zl_error(ZL_ENOMEM, "out of memory allocating a tensor"); return NULL; }
    s->refcount = 1;
    s->nbytes = (size_t)n * zl_dtype_size(dt);
    s->cat = cat;
    s->ctx = zl_context_current();
    if (align) {
        size_t used = s->nbytes;
        s->nbytes = (used + align - 1) / align * align;
        if (!s->nbytes) s->nbytes = align;
        s->data = zli_mem_alloc(s->ctx, s->nbytes, align, cat);
        s->sys_aligned = true;
        if (s->data) memset((char *)s->data + used, 0, s->nbytes - used);
    } else {
        s->data = zli_mem_alloc(s->ctx, s->nbytes, 0, cat);
    }
    if (!s->data) { free(t); free(s); return NULL; }
    return contiguous_over(t, s, dt, ndim, shape);
}

zl_tensor *zl_tensor_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat)
{
    return tensor_alloc(dt, ndim, shape, cat, 0);
}

zl_tensor *zli_tensor_new_aligned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, size_t align)
{
    return tensor_alloc(dt, ndim, shape, cat, align);
}

zl_tensor *zli_view_of(const zl_tensor *src, int ndim, const int64_t *shape, const int64_t *stride,
                       int64_t offset)
{
    zl_tensor *t = header_new();
    if (!t) return NULL;
    t->storage = src->storage;
    t->storage->refcount++;
    t->dtype = src->dtype;
    t->ndim = ndim;
    if (ndim) {
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->stride, stride, (size_t)ndim * sizeof *stride);
    }
    t->offset = offset;
    return t;
}

zl_tensor *zl_tensor_zeros(zl_dtype dt, int ndim, const int64_t *shape)
{
    zl_tensor *t = zl_tensor_new(dt, ndim, shape, ZL_MEM_OTHER);
    if (t) memset(t->storage->data, 0, t->storage->nbytes);
    return t;
}

zl_tensor *zl_tensor_full(zl_dtype dt, int ndim, const int64_t *shape, double value)
{
    zl_tensor *t = zl_tensor_new(dt, ndim, shape, ZL_MEM_OTHER);
    if (t) zli_fill(t, value);
    return t;
}

zl_tensor *zl_tensor_scalar(zl_dtype dt, double value) { return zl_tensor_full(dt, 0, NULL, value); }

zl_tensor *zl_tensor_from_data(zl_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    zl_tensor *t = zl_tensor_new(dt, ndim, shape, ZL_MEM_OTHER);
    if (t && t->storage->nbytes) memcpy(t->storage->data, data, t->storage->nbytes);
    return t;
}

zl_tensor *zl_tensor_arange(zl_dtype dt, int64_t n)
{
    if (n < 0) { zl_error(ZL_EINVAL, "arange: n must be >= 0, got %lld", (long long)n); return NULL; }
    zl_tensor *t = zl_tensor_new(dt, 1, &n, ZL_MEM_OTHER);
    if (!t) return NULL;
    const zl_dtype_traits *tr = zl_dtype_traits_of(dt);
    char *p = t->storage->data;
    for (int64_t i = 0; i < n; i++) tr->from_f64(p + i * tr->size, (double)i);
    return t;
}

zl_tensor *zl_tensor_retain(zl_tensor *t)
{
    if (t) t->refcount++;
    return t;
}

void zli_release_deferred(zl_tensor *t, zl_tensor **worklist)
{
    if (!t || --t->refcount > 0) return;
    t->free_next = *worklist;
    *worklist = t;
}

static void storage_release(zl_storage *s)
{
    if (!s || --s->refcount > 0) return;
    if (s->dev) {
        s->dev->free(s);
    } else if (s->pinned) {
        zli_mem_disown(s->ctx, s->nbytes, s->cat);
        s->pinned->free_pinned(s);
    } else {
        zli_mem_free(s->ctx, s->data, s->nbytes, s->sys_aligned, s->cat);
    }
    free(s);
}

/* A tensor header and a storage of one over memory a device table gave. */
static zl_tensor *header_over(void *data, size_t nbytes, zl_mem_category cat, zl_storage **out)
{
    zl_tensor *t = header_new();
    zl_storage *s = calloc(1, sizeof *s);
    if (!t || !s) { free(t); free(s); zl_error(ZL_ENOMEM, "out of memory allocating a tensor"); return NULL; }
    s->refcount = 1;
    s->data = data;
    s->nbytes = nbytes;
    s->cat = cat;
    *out = s;
    return t;
}

zl_tensor *zli_tensor_on_pinned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                const zli_device_ops *dev, void *data, size_t nbytes)
{
    zl_storage *s = NULL;
    zl_tensor *t = header_over(data, nbytes, cat, &s);
    if (!t) return NULL;
    s->ctx = zl_context_current();
    s->pinned = dev;
    zli_mem_adopt(s->ctx, nbytes, cat);
    return contiguous_over(t, s, dt, ndim, shape);
}

zl_tensor *zli_tensor_on_device(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                const zli_device_ops *dev, int index, void *data, size_t nbytes)
{
    zl_storage *s = NULL;
    zl_tensor *t = header_over(data, nbytes, cat, &s);
    if (!t) return NULL;
    s->dev = dev;
    s->dev_index = index;
    return contiguous_over(t, s, dt, ndim, shape);
}

zl_tensor *zli_full_like_device(const zl_tensor *like, zl_dtype dt, int ndim, const int64_t *shape,
                                zl_mem_category cat, double v)
{
    const zl_storage *ls = like->storage;
    if (!ls->dev) {
        zl_tensor *t = zl_tensor_new(dt, ndim, shape, cat);
        if (t) zli_fill(t, v);
        return t;
    }
    zl_tensor *t = ls->dev->alloc(dt, ndim, shape, cat, ls->dev_index);
    if (t && ls->dev->fill(t, v)) {
        zl_tensor_release(t);
        return NULL;
    }
    return t;
}

zl_status zli_same_device(const char *op, const zl_tensor *a, const zl_tensor *b)
{
    if (a->storage->dev == b->storage->dev && a->storage->dev_index == b->storage->dev_index) return ZL_OK;
    char wa[32], wb[32];
    zl_device_str(zl_tensor_device(a), zl_tensor_device_index(a), wa, sizeof wa);
    zl_device_str(zl_tensor_device(b), zl_tensor_device_index(b), wb, sizeof wb);
    return zl_error(ZL_EDEVICE, "%s: one tensor is on %s and the other on %s: move one first (t:to('%s'))", op, wa,
                    wb, wa);
}

zl_status zli_need_host(const char *op, const char *role, const zl_tensor *t)
{
    if (!t->storage->dev) return ZL_OK;
    char where[32];
    zl_device_str(t->storage->dev->kind, t->storage->dev_index, where, sizeof where);
    return zl_error(ZL_EDEVICE, "%s: %s is on %s, and %s runs on the CPU here: move it with :cpu() "
                    "(or zl_tensor_to_device) first", op, role, where, op);
}

void zl_tensor_release(zl_tensor *t)
{
    zl_tensor *work = NULL;
    zli_release_deferred(t, &work);
    while (work) {
        zl_tensor *x = work;
        work = x->free_next;
        x->refcount = 0;
        storage_release(x->storage);
        if (x->ext_free) x->ext_free(x->ext, &work);
        free(x);
    }
}

void zli_share_storage(zl_tensor *t, const zl_tensor *src)
{
    src->storage->refcount++;
    storage_release(t->storage);
    t->storage = src->storage;
    t->dtype = src->dtype;
    t->ndim = src->ndim;
    memcpy(t->shape, src->shape, sizeof t->shape);
    memcpy(t->stride, src->stride, sizeof t->stride);
    t->offset = src->offset;
}

int zl_tensor_ndim(const zl_tensor *t) { return t->ndim; }
const int64_t *zl_tensor_shape(const zl_tensor *t) { return t->shape; }
const int64_t *zl_tensor_strides(const zl_tensor *t) { return t->stride; }
int64_t zl_tensor_offset(const zl_tensor *t) { return t->offset; }
int64_t zl_tensor_numel(const zl_tensor *t) { return zli_numel(t->ndim, t->shape); }
zl_dtype zl_tensor_dtype(const zl_tensor *t) { return t->dtype; }
zl_device zl_tensor_device(const zl_tensor *t) { return t->storage->dev ? t->storage->dev->kind : ZL_DEVICE_CPU; }
int zl_tensor_device_index(const zl_tensor *t) { return t->storage->dev ? t->storage->dev_index : 0; }
zl_mem_category zl_tensor_category(const zl_tensor *t) { return t->storage->cat; }

void zl_tensor_set_category(zl_tensor *t, zl_mem_category cat)
{
    if ((unsigned)cat >= ZL_MEM_COUNT) return;
    if (t->storage->dev) t->storage->dev->recharge(t->storage, cat);
    else zli_mem_recharge(t->storage->ctx, t->storage->nbytes, t->storage->cat, cat);
    t->storage->cat = cat;
}

int64_t zl_tensor_size(const zl_tensor *t, int dim)
{
    int d = dim < 0 ? dim + t->ndim : dim;
    if (d >= 0 && d < t->ndim) return t->shape[d];
    zl_error(ZL_EINVAL, "size: dimension %d is out of range for a %d-d tensor", dim, t->ndim);
    return -1;
}

bool zl_tensor_is_contiguous(const zl_tensor *t)
{
    if (zl_tensor_numel(t) == 0) return true;   /* no element to be out of place */
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

void *zl_tensor_data(const zl_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)zl_dtype_size(t->dtype);
}

bool zl_tensor_shares_storage(const zl_tensor *a, const zl_tensor *b)
{
    return a && b && a->storage == b->storage;
}

int64_t zli_linear_offset(const zl_tensor *t, int64_t linear)
{
    int64_t off = 0;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t sz = t->shape[i];
        off += (linear % sz) * t->stride[i];
        linear /= sz;
    }
    return off;
}

double zl_tensor_get(const zl_tensor *t, int64_t i)
{
    int64_t n = zl_tensor_numel(t);
    if (i < 0 || i >= n) {
        zl_error(ZL_EINVAL, "get: index %lld is out of range for %lld elements", (long long)i, (long long)n);
        return NAN;
    }
    if (zli_need_host("get", "the tensor", t)) return NAN;
    const zl_dtype_traits *tr = zl_dtype_traits_of(t->dtype);
    return tr->to_f64((const char *)zl_tensor_data(t) + zli_linear_offset(t, i) * (int64_t)tr->size);
}

zl_status zl_tensor_set(zl_tensor *t, int64_t i, double v)
{
    int64_t n = zl_tensor_numel(t);
    if (i < 0 || i >= n)
        return zl_error(ZL_EINVAL, "set: index %lld is out of range for %lld elements",
                        (long long)i, (long long)n);
    if (zli_need_host("set", "the tensor", t)) return ZL_EDEVICE;
    const zl_dtype_traits *tr = zl_dtype_traits_of(t->dtype);
    tr->from_f64((char *)zl_tensor_data(t) + zli_linear_offset(t, i) * (int64_t)tr->size, v);
    return ZL_OK;
}

zl_status zl_tensor_get_at(const zl_tensor *t, const int64_t *index, double *out)
{
    if (zli_need_host("get", "the tensor", t)) return ZL_EDEVICE;
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i])
            return zl_error(ZL_EINVAL, "index %lld is out of range for dimension %d of size %lld",
                            (long long)index[i], i, (long long)t->shape[i]);
        off += index[i] * t->stride[i];
    }
    const zl_dtype_traits *tr = zl_dtype_traits_of(t->dtype);
    *out = tr->to_f64((const char *)zl_tensor_data(t) + off * (int64_t)tr->size);
    return ZL_OK;
}

zl_status zl_tensor_to_f64(const zl_tensor *t, double *out)
{
    if (zli_need_host("to_f64", "the tensor", t)) return ZL_EDEVICE;
    int64_t n = zl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) out[i] = zl_tensor_get(t, i);
    return ZL_OK;
}

zl_status zli_fill(zl_tensor *t, double v)
{
    if (t->storage->dev) return t->storage->dev->fill(t, v);
    const zl_dtype_traits *tr = zl_dtype_traits_of(t->dtype);
    int64_t n = zl_tensor_numel(t);
    char *base = zl_tensor_data(t);
    if (t->dtype == ZL_DTYPE_F32 && zl_tensor_is_contiguous(t)) {
        float *p = (float *)base, fv = (float)v;
        for (int64_t i = 0; i < n; i++) p[i] = fv;
        return ZL_OK;
    }
    for (int64_t i = 0; i < n; i++) tr->from_f64(base + zli_linear_offset(t, i) * (int64_t)tr->size, v);
    return ZL_OK;
}

zl_status zli_broadcast_error(const char *op, const zl_tensor *src, const zl_tensor *dst)
{
    char a[128], b[128];
    return zl_error(ZL_ESHAPE, "%s: source of shape %s cannot be broadcast to %s", op,
                    zl_shape_str(src->ndim, src->shape, a, sizeof a),
                    zl_shape_str(dst->ndim, dst->shape, b, sizeof b));
}

/* A stride of 0 on a dimension longer than 1: two elements at one place. */
static bool has_shared_elements(const zl_tensor *t)
{
    for (int i = 0; i < t->ndim; i++)
        if (t->stride[i] == 0 && t->shape[i] > 1) return true;
    return false;
}

/* dst = src element by element, one shape, any strides and dtypes: a row
 * (the last dim) at a time, a row of unit strides in one memcpy or one
 * zl_convert, so a strided copy pays one index computation a row rather than
 * one an element. The two must not overlap. */
static void copy_rows(zl_tensor *dst, const zl_tensor *src)
{
    int64_t n = zl_tensor_numel(dst);
    if (n == 0) return;
    int nd = dst->ndim;
    int64_t inner = nd ? dst->shape[nd - 1] : 1, rows = n / inner;
    int64_t dstep = nd ? dst->stride[nd - 1] : 1, sstep = nd ? src->stride[nd - 1] : 1;
    const zl_dtype_traits *dt = zl_dtype_traits_of(dst->dtype), *st = zl_dtype_traits_of(src->dtype);
    int64_t des = (int64_t)dt->size, ses = (int64_t)st->size;
    char *db = zl_tensor_data(dst);
    const char *sb = zl_tensor_data(src);
    bool same = dst->dtype == src->dtype, dense = (dstep == 1 && sstep == 1) || inner == 1;
    #pragma omp parallel for schedule(static) if (n > 65536 && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        char *d = db + zli_linear_offset(dst, r * inner) * des;
        const char *s = sb + zli_linear_offset(src, r * inner) * ses;
        if (dense && same) {
            memcpy(d, s, (size_t)(inner * des));
        } else if (dense) {
            zl_convert(s, src->dtype, d, dst->dtype, (size_t)inner);
        } else if (same) {
            for (int64_t j = 0; j < inner; j++) memcpy(d + j * dstep * des, s + j * sstep * ses, (size_t)des);
        } else {
            for (int64_t j = 0; j < inner; j++) dt->from_f64(d + j * dstep * des, st->to_f64(s + j * sstep * ses));
        }
    }
}

zl_status zli_copy(zl_tensor *dst, const zl_tensor *src)
{
    if (zli_same_device("copy_", dst, src)) return ZL_EDEVICE;
    zl_tensor *e = zli_expand((zl_tensor *)src, dst->ndim, dst->shape);
    if (!e) return zli_last_code() == ZL_ENOMEM ? ZL_ENOMEM : zli_broadcast_error("copy_", src, dst);
    if (dst->storage->dev) {
        /* The device writes every element at once: a destination whose
         * elements share memory (an expanded view) has no one result there,
         * and a source overlapping dst goes through a copy. */
        zl_status st;
        if (has_shared_elements(dst)) {
            char s[128];
            st = zl_error(ZL_EINVAL, "copy_: the destination (shape %s) is an expanded view whose elements share "
                          "memory; on a device copy into a tensor of its own (clone it first)",
                          zl_shape_str(dst->ndim, dst->shape, s, sizeof s));
        } else if (e->storage == dst->storage) {
            zl_tensor *tmp = zli_copy_as(e, e->dtype, ZL_MEM_OTHER);
            st = tmp ? dst->storage->dev->copy(dst, tmp) : ZL_ENOMEM;
            zl_tensor_release(tmp);
        } else {
            st = dst->storage->dev->copy(dst, e);
        }
        zl_tensor_release(e);
        return st;
    }
    int64_t n = zl_tensor_numel(dst);
    const char *sb = zl_tensor_data(e);
    char *db = zl_tensor_data(dst);
    if (zl_tensor_is_contiguous(e) && zl_tensor_is_contiguous(dst) && e->storage != dst->storage) {
        zl_convert(sb, e->dtype, db, dst->dtype, (size_t)n);
    } else if (e->storage == dst->storage) {
        /* Overlap possible: go through a temporary. */
        zl_tensor *tmp = zli_copy_as(e, e->dtype, ZL_MEM_OTHER);
        if (!tmp) { zl_tensor_release(e); return ZL_ENOMEM; }
        zl_status st2 = zli_copy(dst, tmp);
        zl_tensor_release(tmp);
        zl_tensor_release(e);
        return st2;
    } else {
        copy_rows(dst, e);
    }
    zl_tensor_release(e);
    return ZL_OK;
}

zl_status zli_add(zl_tensor *dst, const zl_tensor *src, double alpha)
{
    if (zli_same_device("add_", dst, src)) return ZL_EDEVICE;
    zl_tensor *e = zli_expand((zl_tensor *)src, dst->ndim, dst->shape);
    if (!e) return zli_last_code() == ZL_ENOMEM ? ZL_ENOMEM : zli_broadcast_error("add_", src, dst);
    if (dst->storage->dev) {
        zl_tensor *s2 = e->storage == dst->storage ? zli_copy_as(e, ZL_DTYPE_F32, ZL_MEM_OTHER) : zl_tensor_retain(e);
        zl_status st = s2 ? dst->storage->dev->add(dst, s2, alpha) : ZL_ENOMEM;
        zl_tensor_release(s2);
        zl_tensor_release(e);
        return st;
    }
    /* A source sharing dst's storage is read from a copy, so no element is read after it changed. */
    zl_tensor *s = e->storage == dst->storage ? zli_copy_as(e, ZL_DTYPE_F32, ZL_MEM_OTHER) : zli_f32c(e);
    zl_tensor_release(e);
    if (!s) return ZL_ENOMEM;
    int64_t n = zl_tensor_numel(dst);
    const float *ps = zl_tensor_data(s);
    float a = (float)alpha;
    if (dst->dtype == ZL_DTYPE_F32 && zl_tensor_is_contiguous(dst)) {
        float *pd = zl_tensor_data(dst);
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) pd[i] += a * ps[i];
    } else {
        const zl_dtype_traits *tr = zl_dtype_traits_of(dst->dtype);
        char *base = zl_tensor_data(dst);
        for (int64_t i = 0; i < n; i++) {
            char *p = base + zli_linear_offset(dst, i) * (int64_t)tr->size;
            tr->from_f32(p, tr->to_f32(p) + a * ps[i]);
        }
    }
    zl_tensor_release(s);
    return ZL_OK;
}

zl_tensor *zli_copy_as(const zl_tensor *t, zl_dtype dt, zl_mem_category cat)
{
    const zl_storage *ts = t->storage;
    if (ts->dev) {
        zl_tensor *c = ts->dev->alloc(dt, t->ndim, t->shape, cat, ts->dev_index);
        if (c && ts->dev->copy(c, t)) {
            zl_tensor_release(c);
            return NULL;
        }
        return c;
    }
    zl_tensor *out = zl_tensor_new(dt, t->ndim, t->shape, cat);
    if (!out) return NULL;
    int64_t n = zl_tensor_numel(t);
    if (zl_tensor_is_contiguous(t)) {
        zl_convert(zl_tensor_data(t), t->dtype, out->storage->data, dt, (size_t)n);
        return out;
    }
    copy_rows(out, t);
    return out;
}

zl_tensor *zli_f32c(const zl_tensor *t)
{
    if (t->dtype == ZL_DTYPE_F32 && zl_tensor_is_contiguous(t)) return zl_tensor_retain((zl_tensor *)t);
    return zli_copy_as(t, ZL_DTYPE_F32, ZL_MEM_ACTIVATIONS);
}

zl_status zl_broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                              int64_t *out)
{
    if (na < 0 || nb < 0 || na > ZL_MAX_DIMS || nb > ZL_MAX_DIMS)
        return zl_error(ZL_EINVAL, "broadcast: %d and %d dimensions given, at most %d are supported", na, nb, ZL_MAX_DIMS);
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - na ? 1 : a[i - (n - na)];
        int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
        if (x != y && x != 1 && y != 1) {
            char sa[128], sb[128];
            return zl_error(ZL_ESHAPE, "shapes %s and %s cannot be broadcast together (dimension %d: %lld vs %lld)",
                            zl_shape_str(na, a, sa, sizeof sa), zl_shape_str(nb, b, sb, sizeof sb), i,
                            (long long)x, (long long)y);
        }
        out[i] = x == 1 ? y : x;
    }
    *nout = n;
    return ZL_OK;
}
