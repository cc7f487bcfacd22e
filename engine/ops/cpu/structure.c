/* cat and stack (one join kernel: stack is a cat of the inputs seen with a new
 * size-1 dim) and index_select, as raw element copies so every dtype works.
 * Backward hands out views of the gradient or scatter-adds it in index order.
 * On a device, a join is core's copy into slices of the output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../device_kernels.h"

/* dst [outer, total] [out] and src [outer, len] rows of bytes: src lands at
 * column `at` of each dst row. */
static void copy_rows(char *restrict dst, int64_t total, int64_t at, const char *restrict src, int64_t len,
                      int64_t outer)
{
    #pragma omp parallel for schedule(static) if (outer * len > 4 * ZLI_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) memcpy(dst + o * total + at, src + o * len, (size_t)len);
}

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

/* On a device each input is copied into its part of out by core's copy,
 * which converts dtypes and writes strided views. */
static zl_status join_on_device(zl_tensor *const *ts, int n, int d, bool stack, zl_tensor *out)
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
    const zli_dev_kernels *kern = NULL;
    int index = 0, on;
    if (zli_op_begin(op, n, ts)) return NULL;
    if ((on = zli_op_device(op, n, ts, &kern, &index)) < 0) return zli_op_end(op, n, ts, NULL);
    /* Every input on the one device: a host scalar is no shortcut here. */
    for (int i = 1; on && i < n; i++)
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
    int64_t outer = zli_numel(d, shape), inner = zli_numel(nd - d - 1, shape + d + 1);
    size_t es = zl_dtype_size(rdt);
    const zli_device_ops *dev = t0->storage->dev;
    zl_tensor *out = on ? dev->alloc(rdt, nd, shape, ZL_MEM_ACTIVATIONS, index)
                        : zl_tensor_new(rdt, nd, shape, ZL_MEM_ACTIVATIONS);
    if (out && on && join_on_device(ts, n, d, stack, out)) {
        zl_tensor_release(out);
        out = NULL;
    }
    int64_t at = 0;
    for (int i = 0; out && !on && i < n; i++) {
        zl_tensor *t = ts[i];
        int64_t len = stack ? 1 : t->shape[d];
        zl_tensor *c = t->dtype == rdt && zl_tensor_is_contiguous(t) ? zl_tensor_retain(t)
                                                                       : zli_copy_as(t, rdt, ZL_MEM_ACTIVATIONS);
        if (!c) { zl_tensor_release(out); out = NULL; break; }
        copy_rows(zl_tensor_data(out), total * inner * (int64_t)es, at * inner * (int64_t)es, zl_tensor_data(c),
                  len * inner * (int64_t)es, outer);
        zl_tensor_release(c);
        at += len;
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

/* Columns of the scatter per task: enough to vectorise, small enough to spread. */
#define SCATTER_COLS 256

/* On a device the same sums, the indices there in saved[0]. */
static zl_status index_select_backward_device(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    const zli_dev_kernels *k = x->storage->dev->kernels;
    int d = (int)n->i[0];
    int64_t outer = zli_numel(d, x->shape), inner = zli_numel(x->ndim - d - 1, x->shape + d + 1);
    zl_tensor *gc = zli_f32c(g), *gx = gc ? zli_new_f32_like(x, x->ndim, x->shape) : NULL;
    zl_status st = gx ? k->index_select_backward(x->storage->dev_index, outer, x->shape[d], n->i[1], inner,
                                                 zl_tensor_data(n->saved[0]), zl_tensor_data(gc), zl_tensor_data(gx))
                      : ZL_ENOMEM;
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    return ZL_OK;
}

static zl_status index_select_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    if (x->storage->dev) return index_select_backward_device(n, g, gin);
    const int64_t *idx = n->ctx;
    int d = (int)n->i[0];
    int64_t m = n->i[1], len = x->shape[d];
    int64_t outer = zli_numel(d, x->shape), inner = zli_numel(x->ndim - d - 1, x->shape + d + 1);
    zl_tensor *gx = zli_new_f32(x->ndim, x->shape);
    if (!gx) return ZL_ENOMEM;
    float *px = zl_tensor_data(gx);
    const float *pg = zl_tensor_data(g);
    memset(px, 0, (size_t)zl_tensor_numel(x) * sizeof *px);
    /* Each task owns a block of columns of one outer slice and adds the rows
     * of g in index order, so repeated indices sum the same way every run. */
    int64_t nblk = (inner + SCATTER_COLS - 1) / SCATTER_COLS;
    #pragma omp parallel for schedule(static) if (outer * m * inner > ZLI_PAR_MIN && outer * nblk > 1)
    for (int64_t t = 0; t < outer * nblk; t++) {
        int64_t o = t / nblk, c0 = t % nblk * SCATTER_COLS;
        int64_t c1 = c0 + SCATTER_COLS < inner ? c0 + SCATTER_COLS : inner;
        for (int64_t r = 0; r < m; r++) {
            float *dst = px + (o * len + idx[r]) * inner;
            const float *src = pg + (o * m + r) * inner;
            for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
    gin[0] = gx;
    return ZL_OK;
}

zl_tensor *zl_index_select(zl_tensor *x, int dim, zl_tensor *index)
{
    const char *op = "index_select";
    zl_tensor *in[2] = {x, index};
    const zli_dev_kernels *k = NULL;
    int where = 0, on;
    if (zli_op_begin(op, 2, in)) return NULL;
    if ((on = zli_op_device(op, 2, in, &k, &where)) < 0) return zli_op_end(op, 2, in, NULL);
    /* A one-element index may come from the host; the input may not. */
    if (on && !x->storage->dev && zli_same_device(op, x, index)) return zli_op_end(op, 2, in, NULL);
    int d;
    if (zli_norm_dim(op, dim, x->ndim, &d)) return zli_op_end(op, 2, in, NULL);
    if (index->ndim != 1) {
        char s[128];
        zl_error(ZL_ESHAPE, "index_select: index must be 1-D, got shape %s",
                 zl_shape_str(index->ndim, index->shape, s, sizeof s));
        return zli_op_end(op, 2, in, NULL);
    }
    int64_t *idx;
    if (zli_index_array(op, "index", index, &idx)) return zli_op_end(op, 2, in, NULL);
    int64_t m = index->shape[0], len = x->shape[d];
    for (int64_t r = 0; r < m; r++)
        if (idx[r] < 0 || idx[r] >= len) {
            char s[128];
            zl_error(ZL_EINVAL, "index_select: index %lld is out of range for dimension %d of size %lld (input %s)",
                     (long long)idx[r], d, (long long)len, zl_shape_str(x->ndim, x->shape, s, sizeof s));
            free(idx);
            return zli_op_end(op, 2, in, NULL);
        }
    int64_t shape[ZL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = m;
    int64_t outer = zli_numel(d, x->shape);
    int es = (int)zl_dtype_size(x->dtype);
    int64_t inner = zli_numel(x->ndim - d - 1, x->shape + d + 1), row = inner * es;   /* bytes */
    zl_tensor *xc = zl_tensor_is_contiguous(x) ? zl_tensor_retain(x) : zli_copy_as(x, x->dtype, ZL_MEM_ACTIVATIONS);
    zl_tensor *didx = NULL, *out = NULL;
    if (xc && on) {
        /* The checked indices go to the device, and stay there for backward. */
        didx = zli_i64_like(idx, m, x);
        out = didx ? x->storage->dev->alloc(x->dtype, x->ndim, shape, ZL_MEM_ACTIVATIONS, where) : NULL;
        if (out && k->index_select(where, outer, len, m, inner, es, zl_tensor_data(didx), zl_tensor_data(xc),
                                   zl_tensor_data(out))) {
            zl_tensor_release(out);
            out = NULL;
        }
    } else if (xc && (out = zl_tensor_new(x->dtype, x->ndim, shape, ZL_MEM_ACTIVATIONS))) {
        const char *src = zl_tensor_data(xc);
        char *dst = zl_tensor_data(out);
        #pragma omp parallel for schedule(static) if (outer * m * row > 4 * ZLI_PAR_MIN && outer * m > 1)
        for (int64_t t = 0; t < outer * m; t++)
            memcpy(dst + t * row, src + (t / m * len + idx[t % m]) * row, (size_t)row);
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
