/* Shared helpers of the ops and their CPU kernels (see op_util.h). */
#include <stdlib.h>
#include <string.h>
#include "device_kernels.h"

static double chunk_sum(const float *x, int64_t n, int64_t c)
{
    int64_t lo = c * ZLI_SUM_CHUNK, hi = lo + ZLI_SUM_CHUNK < n ? lo + ZLI_SUM_CHUNK : n;
    double s = 0;
    for (int64_t i = lo; i < hi; i++) s += x[i];
    return s;
}

double zli_sum_fixed(const float *x, int64_t n)
{
    int64_t nchunks = (n + ZLI_SUM_CHUNK - 1) / ZLI_SUM_CHUNK;
    double *part = nchunks > 1 ? malloc((size_t)nchunks * sizeof *part) : NULL;
    double s = 0;
    if (!part) {
        for (int64_t c = 0; c < nchunks; c++) s += chunk_sum(x, n, c);
        return s;
    }
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t c = 0; c < nchunks; c++) part[c] = chunk_sum(x, n, c);
    for (int64_t c = 0; c < nchunks; c++) s += part[c];
    free(part);
    return s;
}

zl_dtype zli_promote(zl_dtype a, zl_dtype b)
{
    if (a == b) return a;
    bool fa = zl_dtype_traits_of(a)->is_float, fb = zl_dtype_traits_of(b)->is_float;
    if (fa && !fb) return a;
    if (fb && !fa) return b;
    return fa ? ZL_DTYPE_F32 : ZL_DTYPE_I64;
}

void zli_bcast_strides(const zl_tensor *t, int ndim, const int64_t *out_shape, int64_t *stride)
{
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        if (i < lead) stride[i] = 0;
        else stride[i] = t->shape[i - lead] == 1 && out_shape[i] != 1 ? 0 : t->stride[i - lead];
    }
}

zl_tensor *zli_new_f32(int ndim, const int64_t *shape)
{
    return zl_tensor_new(ZL_DTYPE_F32, ndim, shape, ZL_MEM_ACTIVATIONS);
}

zl_tensor *zli_cast_result(zl_tensor *f32, zl_dtype dt)
{
    if (!f32 || f32->dtype == dt) return f32;
    zl_tensor *out = zli_copy_as(f32, dt, ZL_MEM_ACTIVATIONS);
    zl_tensor_release(f32);
    return out;
}

zl_status zli_shape_error(const char *op, const char *what, const zl_tensor *a, const zl_tensor *b)
{
    char sa[128], sb[128];
    return zl_error(ZL_ESHAPE, "%s: %s (shapes %s and %s)", op, what, zl_shape_str(a->ndim, a->shape, sa, sizeof sa),
                    zl_shape_str(b->ndim, b->shape, sb, sizeof sb));
}

zl_status zli_need_float(const char *op, const char *role, const zl_tensor *t)
{
    if (zl_dtype_traits_of(t->dtype)->is_float) return ZL_OK;
    return zl_error(ZL_EDTYPE, "%s: %s must be a float tensor (f32, f16 or bf16), got %s", op, role,
                    zl_dtype_name(t->dtype));
}

zl_tensor *zli_host_copy(zl_tensor *t, zl_dtype dt)
{
    bool ready = t->dtype == dt && zl_tensor_is_contiguous(t);
    zl_tensor *c = ready ? zl_tensor_retain(t) : zli_copy_as(t, dt, ZL_MEM_ACTIVATIONS);
    if (!c || !t->storage->dev) return c;
    /* The device converted and packed in its own memory: one copy comes over. */
    zl_tensor *h = zl_tensor_new(dt, t->ndim, t->shape, ZL_MEM_ACTIVATIONS);
    if (h && t->storage->dev->to_host(zl_tensor_data(h), c)) {
        zl_tensor_release(h);
        h = NULL;
    }
    zl_tensor_release(c);
    return h;
}

zl_tensor *zli_host_result(zl_tensor *r, zl_dtype dt, const zl_tensor *like)
{
    zl_tensor *out = r ? zli_copy_as_like(r, dt, like) : NULL;
    zl_tensor_release(r);
    return out;
}

zl_status zli_norm_dims(const char *op, const zl_tensor *x, int nnorm, int np, const zl_tensor *const *params,
                        const char *const *roles, int64_t *rows, int64_t *m)
{
    char sx[128], st[128], sp[128];
    if (nnorm < 1 || nnorm > x->ndim)
        return zl_error(ZL_EINVAL, "%s: cannot normalise over the last %d dims of an input of shape %s (expected "
                        "1..%d)", op, nnorm, zl_shape_str(x->ndim, x->shape, sx, sizeof sx), x->ndim);
    const int64_t *tail = x->shape + x->ndim - nnorm;
    for (int i = 0; i < np; i++) {
        const zl_tensor *p = params[i];
        if (!p || (p->ndim == nnorm && memcmp(p->shape, tail, (size_t)nnorm * sizeof *tail) == 0)) continue;
        return zl_error(ZL_ESHAPE, "%s: %s must have shape %s, the last %d dims of the input %s; got %s", op,
                        roles[i], zl_shape_str(nnorm, tail, st, sizeof st), nnorm,
                        zl_shape_str(x->ndim, x->shape, sx, sizeof sx), zl_shape_str(p->ndim, p->shape, sp, sizeof sp));
    }
    *rows = zli_numel(x->ndim - nnorm, x->shape);
    *m = zli_numel(nnorm, tail);
    return ZL_OK;
}

zl_status zli_need_index(const char *op, const char *role, const zl_tensor *t)
{
    if (t->dtype == ZL_DTYPE_I64 || t->dtype == ZL_DTYPE_I32) return ZL_OK;
    return zl_error(ZL_EDTYPE, "%s: %s must be an integer tensor (i64 or i32), got %s", op, role,
                    zl_dtype_name(t->dtype));
}

zl_status zli_index_array(const char *op, const char *role, const zl_tensor *t, int64_t **out)
{
    if (zli_need_index(op, role, t)) return zli_last_code();
    int64_t n = zl_tensor_numel(t);
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return zl_error(ZL_ENOMEM, "%s: out of memory", op);
    if (t->storage->dev) {
        /* Indices on a device come over as one contiguous i64 block. */
        zl_tensor *c = zli_copy_as(t, ZL_DTYPE_I64, ZL_MEM_OTHER);
        zl_status st = c ? t->storage->dev->to_host(v, c) : ZL_ENOMEM;
        zl_tensor_release(c);
        if (st) { free(v); return st; }
        *out = v;
        return ZL_OK;
    }
    const char *base = zl_tensor_data(t);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = zli_linear_offset(t, i);
        v[i] = t->dtype == ZL_DTYPE_I64 ? ((const int64_t *)base)[off] : ((const int32_t *)base)[off];
    }
    *out = v;
    return ZL_OK;
}
