/* embedding: rows of weight [V, D] gathered by an index tensor of any shape,
 * and the backward that scatter-adds into a [V, D] gradient, a padding row
 * left out, through the kernel table of the weight's memory. */
#include <string.h>
#include "device_kernels.h"

/* saved[0]: the validated indices, i64 [n], in the weight's memory; i[1]:
 * the padding row, -1 when there is none. A weight whose gradient is already
 * pending (a tied LM head's, computed first) takes the rows in place: no
 * [V, D] zeros, no second pass to add them. */
static zl_status embedding_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *w = n->inputs[0];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("embedding backward", 1, &w, &k, &index) < 0) return zli_last_code();
    zl_tensor *pending = zli_pending_grad(w);
    zl_tensor *gc = zli_f32c(g);
    gin[1] = NULL;
    if (!gc) return ZL_ENOMEM;
    zl_tensor *gw = pending ? NULL : zli_new_f32_like(w, 2, w->shape);
    zl_status st = pending || gw ? ZL_OK : ZL_ENOMEM;
    if (gw) zl_tensor_set_category(gw, ZL_MEM_GRADS);
    if (!st)
        st = k->emb_backward(index, n->i[0], w->shape[0], w->shape[1], zl_tensor_data(n->saved[0]), n->i[1],
                             zl_tensor_data(gc), zl_tensor_data(pending ? pending : gw), pending != NULL);
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gw); return st; }
    gin[0] = gw;
    return ZL_OK;
}

/* zl_embedding, and zl_embedding_padded when padded. */
static zl_tensor *embedding(zl_tensor *weight, zl_tensor *indices, bool padded, int64_t pad)
{
    const char *op = "embedding";
    zl_tensor *in[2] = {weight, indices};
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 2, in)) return NULL;
    if (zli_op_device(op, 2, in, &k, &index) < 0) return zli_op_end(op, 2, in, NULL);
    /* The rows are gathered where the weight is: a [1, 1] host weight cannot
     * go along with device indices. */
    if (zli_same_device(op, indices, weight)) return zli_op_end(op, 2, in, NULL);
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
    /* A device with a fault note checks the indices in its kernel; otherwise
     * they are checked here, and go where the weight is. Either way they
     * stay there for backward. */
    zlm_index_fault *fault = k->index_faults ? k->index_faults(index) : NULL;
    int64_t bad, value;
    zl_tensor *didx = zli_indices_like(op, "indices", indices, v, weight, fault != NULL, &bad, &value);
    if (!didx) {
        if (bad >= 0)
            zl_error(ZL_EINVAL, "%s: index %lld at position %lld is out of range for a weight of %lld rows "
                     "(expected 0..%lld)", op, (long long)value, (long long)bad, (long long)v, (long long)(v - 1));
        return zli_op_end(op, 2, in, NULL);
    }
    int64_t shape[ZL_MAX_DIMS];
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof shape[0]);
    shape[indices->ndim] = d;
    zl_tensor *wc = zl_tensor_is_contiguous(weight) ? zl_tensor_retain(weight)
                                                     : zli_copy_as(weight, weight->dtype, ZL_MEM_ACTIVATIONS);
    zl_tensor *out = wc ? zli_new_like(wc, weight->dtype, indices->ndim + 1, shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out && k->emb_forward(index, n, v, d, (int)zl_dtype_size(weight->dtype), zl_tensor_data(didx),
                              zl_tensor_data(wc), zl_tensor_data(out), fault)) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(wc);
    zl_node *node = NULL;
    if (out && zli_record(out, op, embedding_backward, 2, in, &node)) { zl_tensor_release(out); out = NULL; }
    if (node) {
        node->i[0] = n;
        node->i[1] = padded ? pad : -1;
        if (zli_node_save(node, 0, didx, false)) {
            zl_tensor_release(out);   /* frees the node */
            out = NULL;
        }
    }
    zl_tensor_release(didx);
    return zli_op_end(op, 2, in, out);
}

zl_tensor *zl_embedding(zl_tensor *weight, zl_tensor *indices) { return embedding(weight, indices, false, 0); }

zl_tensor *zl_embedding_padded(zl_tensor *weight, zl_tensor *indices, int64_t padding_idx)
{
    return embedding(weight, indices, true, padding_idx);
}
