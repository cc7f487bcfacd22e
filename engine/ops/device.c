/* How an op finds the device its inputs live on and places its work buffers
 * there (ops/device_kernels.h). */
#include <stdio.h>
#include <stdlib.h>
#include "device_kernels.h"

int zli_op_device(const char *op, int n, zl_tensor *const *in, const zli_dev_kernels **kernels, int *index)
{
    const zl_tensor *dev = NULL;
    for (int i = 0; i < n; i++)
        if (in[i]->storage->dev) { dev = in[i]; break; }
    if (!dev) {
        *kernels = &zli_cpu_kernels;
        *index = 0;
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const zl_tensor *t = in[i];
        if (!t->storage->dev && zl_tensor_numel(t) == 1) continue;
        if (zli_same_device(op, dev, t)) return -1;
    }
    *kernels = dev->storage->dev->kernels;
    *index = dev->storage->dev_index;
    if (*kernels) return 1;
    char where[32];
    zl_device_str(zl_tensor_device(dev), zl_tensor_device_index(dev), where, sizeof where);
    zl_error(ZL_EDEVICE, "%s: %s runs no ops", op, where);
    return -1;
}

const zl_tensor *zli_op_home(int n, zl_tensor *const *in)
{
    for (int i = 0; i < n; i++)
        if (in[i]->storage->dev) return in[i];
    return in[0];
}

zl_tensor *zli_new_like(const zl_tensor *like, zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat)
{
    const zl_storage *s = like->storage;
    if (!s->dev) return zl_tensor_new(dt, ndim, shape, cat);
    return s->dev->alloc(dt, ndim, shape, cat, s->dev_index);
}

zl_tensor *zli_new_f32_like(const zl_tensor *like, int ndim, const int64_t *shape)
{
    if (!like->storage->dev) return zli_new_f32(ndim, shape);
    return zli_new_like(like, ZL_DTYPE_F32, ndim, shape, ZL_MEM_ACTIVATIONS);
}

/* h (host, contiguous; released) copied into like's device memory, charged to cat. */
static zl_tensor *upload(zl_tensor *h, const zl_tensor *like, zl_mem_category cat)
{
    const zl_storage *ls = like->storage;
    zl_tensor *d = h ? ls->dev->alloc(h->dtype, h->ndim, h->shape, cat, ls->dev_index) : NULL;
    if (d && ls->dev->from_host(d, h)) {
        zl_tensor_release(d);
        d = NULL;
    }
    zl_tensor_release(h);
    return d;
}

zl_tensor *zli_copy_as_like(zl_tensor *t, zl_dtype dt, const zl_tensor *like)
{
    bool moves = !t->storage->dev && like->storage->dev;
    if (!moves && t->dtype == dt) return zl_tensor_retain(t);
    zl_tensor *h = zli_copy_as(t, dt, ZL_MEM_ACTIVATIONS);
    return moves ? upload(h, like, ZL_MEM_ACTIVATIONS) : h;
}

zl_dtype zli_kernel_dtype(zl_dtype dt)
{
    return dt == ZL_DTYPE_BF16 || dt == ZL_DTYPE_F16 ? dt : ZL_DTYPE_F32;
}

zl_tensor *zli_kernel_input(zl_tensor *t, bool on)
{
    return on && zli_kernel_dtype(t->dtype) == t->dtype ? zl_tensor_contiguous(t) : zli_f32c(t);
}

zl_tensor *zli_kernel_output(const zl_tensor *like, bool on, zl_dtype dt, int ndim, const int64_t *shape)
{
    const zl_storage *s = like->storage;
    dt = zli_kernel_dtype(dt);
    if (!on || !s->dev || dt == ZL_DTYPE_F32) return zli_new_f32_like(like, ndim, shape);
    return s->dev->alloc(dt, ndim, shape, ZL_MEM_ACTIVATIONS, s->dev_index);
}

zl_tensor *zli_contiguous_as_like(zl_tensor *t, zl_dtype dt, const zl_tensor *like)
{
    zl_tensor *c = zli_copy_as_like(t, dt, like);
    if (!c || zl_tensor_is_contiguous(c)) return c;
    zl_tensor *cc = zl_tensor_contiguous(c);
    zl_tensor_release(c);
    return cc;
}

zl_tensor *zli_indices_like(const char *op, const char *role, zl_tensor *t, int64_t limit, const zl_tensor *like,
                            bool kernels_check, int64_t *bad, int64_t *value)
{
    *bad = -1;
    if (kernels_check)
        return zli_need_index(op, role, t) ? NULL : zli_own_copy_like(t, ZL_DTYPE_I64, like);
    int64_t *idx = NULL, n = zl_tensor_numel(t);
    if (zli_index_array(op, role, t, &idx)) return NULL;
    for (int64_t p = 0; p < n && *bad < 0; p++)
        if (idx[p] < 0 || idx[p] >= limit) {
            *bad = p;
            *value = idx[p];
        }
    zl_tensor *c = *bad < 0 ? zli_i64_like(idx, n, like) : NULL;
    free(idx);
    return c;
}

zl_tensor *zli_own_copy_like(zl_tensor *t, zl_dtype dt, const zl_tensor *like)
{
    zl_tensor *c = zli_contiguous_as_like(t, dt, like);
    if (c != t) return c;
    zl_tensor *own = zli_copy_as(t, dt, ZL_MEM_ACTIVATIONS);
    zl_tensor_release(c);
    return own;
}

zl_dtype zli_gemm_dtype(const zli_dev_kernels *k, int n, zl_tensor *const *ts)
{
    zl_dtype dt = ts[0]->dtype;
    if (dt != ZL_DTYPE_BF16 && !(dt == ZL_DTYPE_F16 && k->gemm_f16)) return ZL_DTYPE_F32;
    for (int i = 1; i < n; i++)
        if (ts[i]->dtype != dt) return ZL_DTYPE_F32;
    return dt;
}

zl_status zli_dev_gemm(const zli_dev_kernels *k, int index, zl_dtype dt, bool ta, bool tb, int64_t M, int64_t N,
                       int64_t K, float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                       int64_t sb, float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
    if (dt == ZL_DTYPE_F32)
        return k->gemm_batched(index, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
    return k->gemm_half(index, (int)dt, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

zl_tensor *zli_f32c_like(const zl_tensor *t, const zl_tensor *like)
{
    if (t->storage->dev || !like->storage->dev) return zli_f32c(t);
    return upload(zli_f32c(t), like, ZL_MEM_ACTIVATIONS);
}

zl_tensor *zli_i64_like(const int64_t *idx, int64_t n, const zl_tensor *like)
{
    zl_tensor *h = zl_tensor_from_data(ZL_DTYPE_I64, 1, &n, idx);
    if (!like->storage->dev) return h;
    return upload(h, like, ZL_MEM_OTHER);
}

zl_status zli_kernel_sum(const zli_dev_kernels *k, int index, const zl_tensor *like, const float *x, int64_t n,
                         double div, const float *count, float *out)
{
    /* One double per chunk: 8-byte slots of an i64 scratch. */
    int64_t nchunks = (n + ZLI_SUM_CHUNK - 1) / ZLI_SUM_CHUNK;
    if (nchunks < 1) nchunks = 1;
    zl_tensor *work = zli_new_like(like, ZL_DTYPE_I64, 1, &nchunks, ZL_MEM_ACTIVATIONS);
    zl_status st = work ? k->reduce_all(index, div, count, n, x, zl_tensor_data(work), out) : ZL_ENOMEM;
    zl_tensor_release(work);
    return st;
}
