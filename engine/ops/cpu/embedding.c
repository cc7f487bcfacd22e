/* embedding: rows of weight [V, D] gathered by an index tensor of any shape,
 * and the backward that scatter-adds into a [V, D] gradient, a padding row
 * left out. Forward copies rows in weight's own dtype (no f32 round trip);
 * backward splits D across threads, so each element's sum is taken in index
 * order whatever the threads. */
#include <stdlib.h>
#include <string.h>
#include "../device_kernels.h"

/* Columns of the gradient one thread owns at a time. */
#define COLS 64

/* gw [v, d] [out] = sum over positions p of g[p, :] into row idx[p]; g [n, d].
 * Positions whose index is pad (-1: none) add nothing. accumulate: add to gw
 * as it is instead of starting from zero. */
static void scatter_add_kernel(int64_t n, int64_t v, int64_t d, const int64_t *restrict idx, int64_t pad,
                               const float *restrict g, float *restrict gw, bool accumulate)
{
    int64_t nblocks = (d + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) if (n * d > ZLI_PAR_MIN && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t lo = blk * COLS, w = lo + COLS < d ? COLS : d - lo;
        if (!accumulate)
            for (int64_t r = 0; r < v; r++) memset(gw + r * d + lo, 0, (size_t)w * sizeof *gw);
        for (int64_t p = 0; p < n; p++) {
            if (idx[p] == pad) continue;
            const float *src = g + p * d + lo;
            float *dst = gw + idx[p] * d + lo;
            for (int64_t j = 0; j < w; j++) dst[j] += src[j];
        }
    }
}

/* ctx: the validated indices, i64 [n]; on a device also saved[0], the same
 * indices there. A weight whose gradient is already pending (a tied LM head's,
 * computed first) takes the rows in place: no [V, D] zeros, no second pass to
 * add them. The device's kernel has no padding row: it sums that row too, and
 * the row is zeroed after (i[1], -1 when there is none). */
static zl_status embedding_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *w = n->inputs[0];
    int64_t pad = n->i[1];
    const zli_dev_kernels *k = w->storage->dev ? w->storage->dev->kernels : NULL;
    zl_tensor *pending = k ? NULL : zli_pending_grad(w);
    zl_tensor *gc = zli_f32c(g);
    gin[1] = NULL;
    if (!gc) return ZL_ENOMEM;
    if (pending) {
        scatter_add_kernel(n->i[0], w->shape[0], w->shape[1], n->ctx, pad, zl_tensor_data(gc),
                           zl_tensor_data(pending), true);
        zl_tensor_release(gc);
        gin[0] = NULL;
        return ZL_OK;
    }
    zl_tensor *gw = zli_new_f32_like(w, 2, w->shape);
    zl_status st = gw ? ZL_OK : ZL_ENOMEM;
    if (gw) zl_tensor_set_category(gw, ZL_MEM_GRADS);
    if (gw && k)
        st = k->emb_backward(w->storage->dev_index, n->i[0], w->shape[0], w->shape[1], zl_tensor_data(n->saved[0]),
                             zl_tensor_data(gc), zl_tensor_data(gw));
    else if (gw)
        scatter_add_kernel(n->i[0], w->shape[0], w->shape[1], n->ctx, pad, zl_tensor_data(gc), zl_tensor_data(gw),
                           false);
    if (!st && gw && k && pad >= 0) {
        zl_tensor *row = zli_view_of(gw, 1, &w->shape[1], (int64_t[]){1}, gw->offset + pad * w->shape[1]);
        st = row ? gw->storage->dev->fill(row, 0.0) : ZL_ENOMEM;
        zl_tensor_release(row);
    }
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gw); return st; }
    gin[0] = gw;
    return ZL_OK;
}

/* The checked indices on weight's device, then the rows gathered there. */
static zl_tensor *gather_on_device(const zli_dev_kernels *k, int index, zl_tensor *wc, const int64_t *idx, int64_t n,
                                   int ndim, const int64_t *shape, zl_tensor **didx)
{
    *didx = zli_i64_like(idx, n, wc);
    zl_tensor *out = *didx ? wc->storage->dev->alloc(wc->dtype, ndim, shape, ZL_MEM_ACTIVATIONS, index) : NULL;
    if (out && k->emb_forward(index, n, wc->shape[1], (int)zl_dtype_size(wc->dtype), zl_tensor_data(*didx),
                              zl_tensor_data(wc), zl_tensor_data(out))) {
        zl_tensor_release(out);
        out = NULL;
    }
    return out;
}

/* zl_embedding, and zl_embedding_padded when padded. */
static zl_tensor *embedding(zl_tensor *weight, zl_tensor *indices, bool padded, int64_t pad)
{
    const char *op = "embedding";
    zl_tensor *in[2] = {weight, indices};
    const zli_dev_kernels *k = NULL;
    int index = 0, on;
    if (zli_op_begin(op, 2, in)) return NULL;
    if ((on = zli_op_device(op, 2, in, &k, &index)) < 0) return zli_op_end(op, 2, in, NULL);
    /* The rows are gathered where the weight is: a [1, 1] host weight cannot
     * go along with device indices. */
    if (on && zli_same_device(op, indices, weight)) return zli_op_end(op, 2, in, NULL);
    if (weight->ndim != 2) {
        char s[128];
        zl_error(ZL_ESHAPE, "%s: weight must be 2-d [V, D], got shape %s", op,
                 zl_shape_str(weight->ndim, weight->shape, s, sizeof s));
        return zli_op_end(op, 2, in, NULL);
    }
    if (indices->ndim >= ZL_MAX_DIMS) {
        char s[128];
        zl_error(ZL_ESHAPE, "%s: indices of shape %s would give a %d-d output, at most %d dims are supported",
                 op, zl_shape_str(indices->ndim, indices->shape, s, sizeof s), indices->ndim + 1, ZL_MAX_DIMS);
        return zli_op_end(op, 2, in, NULL);
    }
    int64_t n = zl_tensor_numel(indices), v = weight->shape[0], d = weight->shape[1];
    if (padded && (pad < 0 || pad >= v)) {
        zl_error(ZL_EINVAL, "%s: padding_idx %lld is out of range for a weight of %lld rows (expected 0..%lld)", op,
                 (long long)pad, (long long)v, (long long)(v - 1));
        return zli_op_end(op, 2, in, NULL);
    }
    int64_t *idx = NULL;
    if (zli_index_array(op, "indices", indices, &idx)) return zli_op_end(op, 2, in, NULL);
    for (int64_t p = 0; p < n; p++) {
        if (idx[p] < 0 || idx[p] >= v) {
            zl_error(ZL_EINVAL, "%s: index %lld at position %lld is out of range for a weight of %lld rows "
                     "(expected 0..%lld)", op, (long long)idx[p], (long long)p, (long long)v, (long long)(v - 1));
            free(idx);
            return zli_op_end(op, 2, in, NULL);
        }
    }
    int64_t shape[ZL_MAX_DIMS];
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof shape[0]);
    shape[indices->ndim] = d;
    zl_tensor *wc = zl_tensor_is_contiguous(weight) ? zl_tensor_retain(weight)
                                                     : zli_copy_as(weight, weight->dtype, ZL_MEM_ACTIVATIONS);
    zl_tensor *didx = NULL, *out = NULL;
    if (wc && on) {
        out = gather_on_device(k, index, wc, idx, n, indices->ndim + 1, shape, &didx);
    } else if (wc && (out = zl_tensor_new(weight->dtype, indices->ndim + 1, shape, ZL_MEM_ACTIVATIONS))) {
        size_t row = (size_t)d * zl_dtype_size(weight->dtype);
        const char *src = zl_tensor_data(wc);
        char *dst = zl_tensor_data(out);
        #pragma omp parallel for schedule(static) if (n * d > ZLI_PAR_MIN)
        for (int64_t p = 0; p < n; p++) memcpy(dst + (size_t)p * row, src + (size_t)idx[p] * row, row);
    }
    zl_tensor_release(wc);
    zl_node *node = NULL;
    if (out && zli_record(out, op, embedding_backward, 2, in, &node)) { zl_tensor_release(out); out = NULL; }
    if (node) {
        node->i[0] = n;
        node->i[1] = padded ? pad : -1;
        node->ctx = idx;
        node->ctx_free = free;
        idx = NULL;
        if (on && zli_node_save(node, 0, didx, false)) {
            zl_tensor_release(out);   /* frees the node, idx with it */
            out = NULL;
        }
    }
    zl_tensor_release(didx);
    free(idx);
    return zli_op_end(op, 2, in, out);
}

zl_tensor *zl_embedding(zl_tensor *weight, zl_tensor *indices) { return embedding(weight, indices, false, 0); }

zl_tensor *zl_embedding_padded(zl_tensor *weight, zl_tensor *indices, int64_t padding_idx)
{
    return embedding(weight, indices, true, padding_idx);
}
