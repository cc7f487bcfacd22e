/* cat and stack (stack is a cat of the inputs seen with a new size-1 dim)
 * and index_select, as raw element copies so every dtype works. A join is
 * core's copy of each input into its slice of the output, which converts
 * dtypes and runs wherever the memory is; its backward hands out views of
 * the gradient. index_select and its scatter-add in index order run through
 * the kernel table of x's memory. */
#include <stdio.h>
#include <string.h>
#include "device_kernels.h"

/* The view of whole (the joined tensor, or its gradient) that input `part`
 * fills: from `at` along dim d, that dim dropped for stack. */
static zl_tensor *part_of(zl_tensor *whole, const zl_tensor *part, int d, bool stack, int64_t at)
{
    int64_t stride[ZL_MAX_DIMS];
    for (int k = 0, j = 0; k < whole->ndim; k++)
        if (!stack || k != d) stride[j++] = whole->stride[k];
    return zli_view_of(whole, part->ndim, part->shape, stride, whole->offset + at * whole->stride[d]);
}

static zl_status join_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    int d = (int)n->i[0];
    bool stack = n->i[1] != 0;
    int64_t at = 0;
    for (int i = 0; i < n->ninputs; i++) {
        zl_tensor *t = n->inputs[i];
        if (zli_requires_grad(t) && !(gin[i] = part_of(g, t, d, stack, at))) return ZL_ENOMEM;
        at += stack ? 1 : t->shape[d];
    }
    return ZL_OK;
}

/* Each input copied into its part of out by core's copy, host or device. */
static zl_status join_parts(zl_tensor *const *ts, int n, int d, bool stack, zl_tensor *out)
{
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        zl_tensor *part = part_of(out, ts[i], d, stack, at);
        zl_status st = part ? zli_copy(part, ts[i]) : ZL_ENOMEM;
        zl_tensor_release(part);
        if (st) return st;
        at += stack ? 1 : ts[i]->shape[d];
    }
    return ZL_OK;
}

static zl_status join_check(const char *op, zl_tensor *const *ts, int n, bool stack, int d, zl_dtype *rdt)
{
    const zl_tensor *t0 = ts[0];
    *rdt = t0->dtype;
    for (int i = 1; i < n; i++) {
        const zl_tensor *t = ts[i];
        bool same = t->ndim == t0->ndim;
        for (int k = 0; same && k < t0->ndim; k++) same = t->shape[k] == t0->shape[k] || (!stack && k == d);
        if (!same) {
            char what[128];
            if (stack) snprintf(what, sizeof what, "tensor %d has a different shape from tensor 0", i);
            else snprintf(what, sizeof what, "tensor %d differs from tensor 0 outside dimension %d", i, d);
            return zli_shape_error(op, what, t, t0);
        }
        *rdt = zli_promote(*rdt, t->dtype);
    }
    return ZL_OK;
}

static zl_tensor *join(const char *op, zl_tensor *const *ts, int n, int dim, bool stack)
{
    if (!ts || n < 1) {
        zl_error(ZL_EINVAL, "%s: needs at least one tensor, got %d", op, ts ? n : 0);
        return NULL;
    }
    if (zli_op_begin(op, n, ts)) return NULL;
    /* Every input in one memory: a host scalar is no shortcut here. */
    for (int i = 1; i < n; i++)
        if (zli_same_device(op, ts[0], ts[i])) return zli_op_end(op, n, ts, NULL);
    const zl_tensor *t0 = ts[0];
    int nd = t0->ndim + (stack ? 1 : 0), d;
    zl_dtype rdt;
    if (nd > ZL_MAX_DIMS) {
        zl_error(ZL_EINVAL, "%s: the result would have more than %d dimensions", op, ZL_MAX_DIMS);
        return zli_op_end(op, n, ts, NULL);
    }
    zl_status bad = stack ? zli_norm_dim_insert(op, dim, t0->ndim, &d) : zli_norm_dim(op, dim, nd, &d);
    if (bad || join_check(op, ts, n, stack, d, &rdt)) return zli_op_end(op, n, ts, NULL);
    int64_t shape[ZL_MAX_DIMS], total = 0;
    for (int i = 0; i < n; i++) total += stack ? 1 : ts[i]->shape[d];
    for (int k = 0; k < nd; k++) shape[k] = k == d ? total : t0->shape[stack && k > d ? k - 1 : k];
    zl_tensor *out = zli_new_like(t0, rdt, nd, shape, ZL_MEM_ACTIVATIONS);
    if (out && join_parts(ts, n, d, stack, out)) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_node *node = NULL;
    if (out && zl_dtype_traits_of(rdt)->is_float && zli_record(out, op, join_backward, n, ts, &node)) {
        zl_tensor_release(out);
        out = NULL;
    }
    if (node) {
        node->i[0] = d;
        node->i[1] = stack;
    }
    return zli_op_end(op, n, ts, out);
}

zl_tensor *zl_cat(zl_tensor *const *ts, int n, int dim) { return join("cat", ts, n, dim, false); }
zl_tensor *zl_stack(zl_tensor *const *ts, int n, int dim) { return join("stack", ts, n, dim, true); }

/* saved[0]: the checked indices, in x's memory. */
static zl_status index_select_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    const zli_dev_kernels *k = NULL;
    int where = 0;
    if (zli_op_device("index_select backward", 1, &x, &k, &where) < 0) return zli_last_code();
    int d = (int)n->i[0];
    int64_t outer = zli_numel(d, x->shape), inner = zli_numel(x->ndim - d - 1, x->shape + d + 1);
    zl_tensor *gc = zli_f32c(g), *gx = gc ? zli_new_f32_like(x, x->ndim, x->shape) : NULL;
    zl_status st = gx ? k->index_select_backward(where, outer, x->shape[d], n->i[1], inner,
                                                 zl_tensor_data(n->saved[0]), zl_tensor_data(gc), zl_tensor_data(gx))
                      : ZL_ENOMEM;
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    return ZL_OK;
}

zl_tensor *zl_index_select(zl_tensor *x, int dim, zl_tensor *index)
{
    const char *op = "index_select";
    zl_tensor *in[2] = {x, index};
    const zli_dev_kernels *k = NULL;
    int where = 0;
    if (zli_op_begin(op, 2, in)) return NULL;
    if (zli_op_device(op, 2, in, &k, &where) < 0) return zli_op_end(op, 2, in, NULL);
    /* A one-element index may come from the host; the input may not. */
    if (zli_same_device(op, x, zli_op_home(2, in))) return zli_op_end(op, 2, in, NULL);
    int d;
    if (zli_norm_dim(op, dim, x->ndim, &d)) return zli_op_end(op, 2, in, NULL);
    if (index->ndim != 1) {
        char s[128];
        zl_error(ZL_ESHAPE, "index_select: index must be 1-D, got shape %s",
                 zl_shape_str(index->ndim, index->shape, s, sizeof s));
        return zli_op_end(op, 2, in, NULL);
    }
    int64_t m = index->shape[0], len = x->shape[d];
    /* A device with a fault note checks the indices in its kernel (an index
     * on the device moves there as it is); otherwise they are checked here,
     * and go where x is. Either way they stay there for backward. */
    zlm_index_fault *fault = k->index_faults ? k->index_faults(where) : NULL;
    int64_t bad, value;
    zl_tensor *didx = zli_indices_like(op, "index", index, len, x, fault != NULL, &bad, &value);
    if (!didx) {
        char s[128];
        if (bad >= 0)
            zl_error(ZL_EINVAL, "index_select: index %lld is out of range for dimension %d of size %lld (input %s)",
                     (long long)value, d, (long long)len, zl_shape_str(x->ndim, x->shape, s, sizeof s));
        return zli_op_end(op, 2, in, NULL);
    }
    int64_t shape[ZL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = m;
    int64_t outer = zli_numel(d, x->shape), inner = zli_numel(x->ndim - d - 1, x->shape + d + 1);
    zl_tensor *xc = zl_tensor_is_contiguous(x) ? zl_tensor_retain(x) : zli_copy_as(x, x->dtype, ZL_MEM_ACTIVATIONS);
    zl_tensor *out = xc ? zli_new_like(x, x->dtype, x->ndim, shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out && k->index_select(where, outer, len, m, inner, (int)zl_dtype_size(x->dtype), zl_tensor_data(didx),
                               zl_tensor_data(xc), zl_tensor_data(out), fault, d)) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(xc);
    zl_node *node = NULL;
    if (out && zl_dtype_traits_of(x->dtype)->is_float && zli_record(out, op, index_select_backward, 1, &x, &node)) {
        zl_tensor_release(out);
        out = NULL;
    }
    if (node) {
        node->i[0] = d;
        node->i[1] = m;
        if (zli_node_save(node, 0, didx, false)) {
            zl_tensor_release(out);   /* frees the node */
            out = NULL;
        }
    }
    zl_tensor_release(didx);
    return zli_op_end(op, 2, in, out);
}
