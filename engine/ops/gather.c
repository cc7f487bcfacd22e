/* gather, scatter and scatter_add along one dim, with torch's semantics and
 * backward. Where the table has their kernels (a device's: math/gather.h)
 * they run there, the index checked in the kernel; otherwise on the host,
 * where a device's tensors would come over and their results (gradients
 * too) go back. */
#include <stdlib.h>
#include <string.h>
#include "device_kernels.h"

/* Where each element of index [m] (row-major) reads or writes: xoff into x
 * and soff into src (or into gather's output), both contiguous. One block,
 * kept by a node for backward. */
typedef struct offsets {
    int64_t m;
    int64_t *xoff, *soff;
} offsets;

static void offsets_free(void *p) { free(p); }

static offsets *offsets_new(int64_t m)
{
    offsets *o = malloc(sizeof *o + (size_t)(2 * m + 1) * sizeof(int64_t));
    if (!o) return NULL;
    o->m = m;
    o->xoff = (int64_t *)(o + 1);
    o->soff = o->xoff + m;
    return o;
}

/* index's shape against x's (and src's, for scatter): the same number of
 * dims, and no larger than x outside dim d nor than src anywhere. */
static zl_status check_shapes(const char *op, const zl_tensor *x, int d, const zl_tensor *index, const zl_tensor *src)
{
    char sx[128], si[128], ss[128];
    zl_shape_str(x->ndim, x->shape, sx, sizeof sx);
    zl_shape_str(index->ndim, index->shape, si, sizeof si);
    if (index->ndim != x->ndim)
        return zl_error(ZL_ESHAPE, "%s: index must have as many dims as the input (index %s, input %s)", op, si, sx);
    if (src && src->ndim != x->ndim)
        return zl_error(ZL_ESHAPE, "%s: src must have as many dims as the input (src %s, input %s)", op,
                        zl_shape_str(src->ndim, src->shape, ss, sizeof ss), sx);
    for (int e = 0; e < x->ndim; e++) {
        if (e != d && index->shape[e] > x->shape[e])
            return zl_error(ZL_ESHAPE, "%s: index is larger than the input in dimension %d (index %s, input %s)", op,
                            e, si, sx);
        if (src && index->shape[e] > src->shape[e])
            return zl_error(ZL_ESHAPE, "%s: index is larger than src in dimension %d (index %s, src %s)", op, e, si,
                            zl_shape_str(src->ndim, src->shape, ss, sizeof ss));
    }
    return ZL_OK;
}

/* The offsets of every index element into contiguous x and src (src's shape
 * given by sshape: gather's output is index-shaped), each value checked to be
 * in [0, x.size(d)). NULL with the error set. */
static offsets *index_offsets(const char *op, const zl_tensor *x, int d, const zl_tensor *index, const int64_t *sshape)
{
    int64_t *idx;
    if (zli_index_array(op, "index", index, &idx)) return NULL;
    int nd = x->ndim;
    int64_t m = zl_tensor_numel(index), xs[ZL_MAX_DIMS], ss[ZL_MAX_DIMS], c[ZL_MAX_DIMS] = {0};
    int64_t px = 1, ps = 1;
    for (int e = nd - 1; e >= 0; e--) {
        xs[e] = px;
        ss[e] = ps;
        px *= x->shape[e];
        ps *= sshape[e];
    }
    offsets *o = offsets_new(m);
    if (!o) {
        free(idx);
        zl_error(ZL_ENOMEM, "%s: out of memory", op);
        return NULL;
    }
    for (int64_t p = 0; p < m; p++) {
        int64_t v = idx[p];
        if (v < 0 || v >= x->shape[d]) {
            char sx[128];
            zl_error(ZL_EINVAL, "%s: index %lld is out of range for dimension %d of size %lld (input %s)", op,
                     (long long)v, d, (long long)x->shape[d], zl_shape_str(x->ndim, x->shape, sx, sizeof sx));
            free(idx);
            free(o);
            return NULL;
        }
        int64_t ox = 0, os = 0;
        for (int e = 0; e < nd; e++) {
            ox += (e == d ? v : c[e]) * xs[e];
            os += c[e] * ss[e];
        }
        o->xoff[p] = ox;
        o->soff[p] = os;
        for (int e = nd - 1; e >= 0 && ++c[e] == index->shape[e]; e--) c[e] = 0;
    }
    free(idx);
    return o;
}

/* A new host f32 tensor of the shape, zeroed. */
static zl_tensor *zeros_f32(int nd, const int64_t *shape)
{
    zl_tensor *t = zli_new_f32(nd, shape);
    if (t) memset(zl_tensor_data(t), 0, (size_t)zl_tensor_numel(t) * sizeof(float));
    return t;
}

/* A gradient computed on the host (t, f32; released) into *gin, moved to
 * where its input `like` lives. */
static zl_status finish_grad(zl_tensor *t, const zl_tensor *like, zl_tensor **gin)
{
    *gin = t ? zli_host_result(t, ZL_DTYPE_F32, like) : NULL;
    return *gin ? ZL_OK : (zli_last_code() ? zli_last_code() : ZL_ENOMEM);
}

/* gather's gradient: g [index] added into zeros [x] where each element came from. */
static zl_status gather_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    const offsets *o = n->ctx;
    zl_tensor *gc = zli_host_copy(g, ZL_DTYPE_F32), *gx = gc ? zeros_f32(x->ndim, x->shape) : NULL;
    if (gx) {
        const float *pg = zl_tensor_data(gc);
        float *px = zl_tensor_data(gx);
        for (int64_t p = 0; p < o->m; p++) px[o->xoff[p]] += pg[o->soff[p]];
    }
    zl_tensor_release(gc);
    return finish_grad(gx, x, &gin[0]);
}

/* The view over index's shape with contiguous t's strides, 0 on dim d
 * unless d is -1, and dim d's stride *sd (0 for -1): where each index
 * element reads or writes in t (in x but for dim d's share; in src). */
static zlm_view index_view(const zl_tensor *t, int d, const zl_tensor *index, int64_t *sd)
{
    int64_t ts[ZL_MAX_DIMS], pt = 1;
    for (int e = t->ndim - 1; e >= 0; e--) {
        ts[e] = pt;
        pt *= t->shape[e];
    }
    *sd = d >= 0 ? ts[d] : 0;
    if (d >= 0) ts[d] = 0;
    return zlm_view_over(index->ndim, index->shape, ts);
}

/* The fibres of index along dim d: *md positions each, *inner apart. */
static int64_t index_fibres(const zl_tensor *index, int d, int64_t *md, int64_t *inner)
{
    *md = index->shape[d];
    *inner = zli_numel(index->ndim - d - 1, index->shape + d + 1);
    return *md ? zl_tensor_numel(index) / *md : 0;
}

/* gather's gradient where the kernels run: g added into zeros of x's shape,
 * a fibre along dim d at a time; saved[0] the index as the forward read it. */
static zl_status gather_backward_kernels(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *idx = n->saved[0];
    int d = (int)n->i[0];
    const zli_dev_kernels *k = NULL;
    int where = 0;
    if (zli_op_device("gather backward", 1, &x, &k, &where) < 0) return zli_last_code();
    int64_t sd, md, inner, nfib = index_fibres(idx, d, &md, &inner);
    zlm_view v = index_view(x, d, idx, &sd);
    zl_tensor *gx = zli_new_f32_like(x, x->ndim, x->shape);
    zl_status st = gx ? zli_fill(gx, 0.0) : ZL_ENOMEM;
    if (!st && nfib > 0)
        st = k->gather_backward(where, &v, sd, x->shape[d], nfib, md, inner, zl_tensor_data(idx), zl_tensor_data(g),
                                zl_tensor_data(gx));
    if (st) {
        zl_tensor_release(gx);
        return st;
    }
    gin[0] = gx;
    return ZL_OK;
}

/* gather where the table has kernels and a fault note for the index: the
 * index moved where x is (its own copy, kept for backward) and checked in
 * the kernel, nothing read back. NULL with the error set. */
static zl_tensor *gather_kernels(const zli_dev_kernels *k, int where, zlm_index_fault *fault, zl_tensor *x, int d,
                                 zl_tensor *index)
{
    const char *op = "gather";
    int64_t bad, value;
    zl_tensor *idx = zli_indices_like(op, "index", index, x->shape[d], x, true, &bad, &value);
    if (!idx) return NULL;
    zl_tensor *xc = zli_contiguous_as_like(x, x->dtype, x);
    zl_tensor *out = xc ? zli_new_like(x, x->dtype, index->ndim, index->shape, ZL_MEM_ACTIVATIONS) : NULL;
    int64_t sd, n = zl_tensor_numel(index);
    zlm_view v = index_view(x, d, index, &sd);
    zl_status st = out ? ZL_OK : ZL_ENOMEM;
    if (!st && n > 0)
        st = k->gather(where, &v, sd, x->shape[d], d, n, zl_tensor_data(idx), zl_tensor_data(xc),
                       (int)zl_dtype_size(x->dtype), zl_tensor_data(out), fault);
    zl_node *node = NULL;
    if (!st && zl_dtype_traits_of(x->dtype)->is_float)
        st = zli_record(out, op, gather_backward_kernels, 1, &x, &node);
    if (!st && node) {
        node->i[0] = d;
        st = zli_node_save(node, 0, idx, false);
    }
    zl_tensor_release(idx);
    zl_tensor_release(xc);
    if (st) {
        zl_tensor_release(out);
        return NULL;
    }
    return out;
}

zl_tensor *zl_gather(zl_tensor *x, int dim, zl_tensor *index)
{
    const char *op = "gather";
    zl_tensor *in[2] = {x, index};
    const zli_dev_kernels *k = NULL;
    int where = 0, d;
    if (zli_op_begin(op, 2, in)) return NULL;
    if (zli_op_device(op, 2, in, &k, &where) < 0 || zli_norm_dim(op, dim, x->ndim, &d) ||
        check_shapes(op, x, d, index, NULL))
        return zli_op_end(op, 2, in, NULL);
    /* the kernels' path needs x where they run (a one-element host x beside a device index: the host's) */
    zlm_index_fault *fault = k->gather && k->index_faults && x->storage->dev ? k->index_faults(where) : NULL;
    if (fault) return zli_op_end(op, 2, in, gather_kernels(k, where, fault, x, d, index));
    offsets *o = index_offsets(op, x, d, index, index->shape);
    zl_tensor *xc = o ? zli_host_copy(x, x->dtype) : NULL;
    zl_tensor *out = xc ? zl_tensor_new(x->dtype, index->ndim, index->shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out) {
        size_t es = zl_dtype_size(x->dtype);
        const char *px = zl_tensor_data(xc);
        char *po = zl_tensor_data(out);
        for (int64_t p = 0; p < o->m; p++) memcpy(po + o->soff[p] * es, px + o->xoff[p] * es, es);
    }
    zl_tensor_release(xc);
    out = out ? zli_host_result(out, x->dtype, x) : NULL;
    zl_node *node = NULL;
    if (out && zl_dtype_traits_of(x->dtype)->is_float && zli_record(out, op, gather_backward, 1, &x, &node)) {
        zl_tensor_release(out);
        out = NULL;
    }
    if (node) {
        node->ctx = o;
        node->ctx_free = offsets_free;
        o = NULL;
    }
    free(o);
    return zli_op_end(op, 2, in, out);
}

/* g [x] passes to x, zeroed where scatter overwrote x (scatter_add keeps it
 * whole); src's gradient is g read where each of its elements went, 0 for
 * elements index does not cover. */
static zl_status scatter_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *src = n->inputs[1];
    bool add = n->i[0];
    const offsets *o = n->ctx;
    zl_tensor *gc = zli_host_copy(g, ZL_DTYPE_F32);
    if (!gc) return zli_last_code();
    const float *pg = zl_tensor_data(gc);
    zl_status st = ZL_OK;
    if (zli_requires_grad(x)) {
        zl_tensor *gx = zli_copy_as(gc, ZL_DTYPE_F32, ZL_MEM_ACTIVATIONS);
        if (gx && !add)
            for (int64_t p = 0; p < o->m; p++) ((float *)zl_tensor_data(gx))[o->xoff[p]] = 0.0f;
        st = finish_grad(gx, x, &gin[0]);
    }
    if (!st && zli_requires_grad(src)) {
        zl_tensor *gs = zeros_f32(src->ndim, src->shape);
        if (gs)
            for (int64_t p = 0; p < o->m; p++) ((float *)zl_tensor_data(gs))[o->soff[p]] = pg[o->xoff[p]];
        st = finish_grad(gs, src, &gin[1]);
    }
    zl_tensor_release(gc);
    return st;
}

/* scatter's and scatter_add's gradients where the kernels run; saved[0] the
 * index as the forward read it, i[0] add, i[1] the dim. */
static zl_status scatter_backward_kernels(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *src = n->inputs[1], *idx = n->saved[0];
    bool add = n->i[0];
    int d = (int)n->i[1];
    const zli_dev_kernels *k = NULL;
    int where = 0;
    if (zli_op_device("scatter backward", 1, &g, &k, &where) < 0) return zli_last_code();
    int64_t sd, unused, md, inner, nfib = index_fibres(idx, d, &md, &inner);
    zlm_view xv = index_view(x, d, idx, &sd), sv = index_view(src, -1, idx, &unused);
    zl_tensor *gx = zli_requires_grad(x) ? zli_own_copy_like(g, ZL_DTYPE_F32, g) : NULL;
    zl_tensor *gs = zli_requires_grad(src) ? zli_new_f32_like(g, src->ndim, src->shape) : NULL;
    zl_status st = (gx || !zli_requires_grad(x)) && (gs || !zli_requires_grad(src)) ? ZL_OK : ZL_ENOMEM;
    if (!st && gs) st = zli_fill(gs, 0.0);
    if (!st && nfib > 0)
        st = k->scatter_backward(where, add, &xv, &sv, sd, x->shape[d], nfib, md, inner, zl_tensor_data(idx),
                                 zl_tensor_data(g), gx ? zl_tensor_data(gx) : NULL, gs ? zl_tensor_data(gs) : NULL);
    if (st) {
        zl_tensor_release(gx);
        zl_tensor_release(gs);
        return st;
    }
    gin[0] = gx;
    gin[1] = gs;
    return ZL_OK;
}

/* scatter or scatter_add where the table has kernels and a fault note: out
 * x's own copy in work (f32 or i64 for add, else x's dtype), src read in
 * work, the index moved where x is (its own copy, kept for backward) and
 * checked in the kernel; the result in x's dtype. NULL with the error set. */
static zl_tensor *scatter_kernels(const zli_dev_kernels *k, int where, zlm_index_fault *fault, bool add, zl_tensor *x,
                                  int d, zl_tensor *index, zl_tensor *src, zl_dtype work)
{
    const char *op = add ? "scatter_add" : "scatter";
    int64_t bad, value;
    zl_tensor *idx = zli_indices_like(op, "index", index, x->shape[d], x, true, &bad, &value);
    if (!idx) return NULL;
    zl_tensor *out = zli_own_copy_like(x, work, x);
    zl_tensor *sc = out ? zli_contiguous_as_like(src, work, x) : NULL;
    int64_t sd, unused, md, inner, nfib = index_fibres(index, d, &md, &inner);
    zlm_view xv = index_view(x, d, index, &sd), sv = index_view(src, -1, index, &unused);
    zl_status st = sc ? ZL_OK : ZL_ENOMEM;
    if (!st && nfib > 0)
        st = k->scatter(where, add, &xv, &sv, sd, x->shape[d], d, nfib, md, inner, zl_tensor_data(idx),
                        zl_tensor_data(sc), (int)work, zl_tensor_data(out), fault);
    zl_tensor_release(sc);
    if (!st && work != x->dtype) {
        zl_tensor *r = zli_copy_as(out, x->dtype, ZL_MEM_ACTIVATIONS);
        zl_tensor_release(out);
        if (!(out = r)) st = ZL_ENOMEM;
    }
    zl_node *node = NULL;
    zl_tensor *rec[2] = {x, src};
    if (!st && zl_dtype_traits_of(x->dtype)->is_float)
        st = zli_record(out, op, scatter_backward_kernels, 2, rec, &node);
    if (!st && node) {
        node->i[0] = add;
        node->i[1] = d;
        st = zli_node_save(node, 0, idx, false);
    }
    zl_tensor_release(idx);
    if (st) {
        zl_tensor_release(out);
        return NULL;
    }
    return out;
}

/* out = x with src's elements written (or added, for scatter_add) where index
 * points, in index order. Floats add in f32 and integers in i64, then round
 * to x's dtype; a plain write copies the bytes. */
static zl_tensor *scatter(bool add, zl_tensor *x, int dim, zl_tensor *index, zl_tensor *src)
{
    const char *op = add ? "scatter_add" : "scatter";
    zl_tensor *in[3] = {x, index, src};
    const zli_dev_kernels *k = NULL;
    int where = 0, d;
    if (zli_op_begin(op, 3, in)) return NULL;
    if (zli_op_device(op, 3, in, &k, &where) < 0 || zli_norm_dim(op, dim, x->ndim, &d) ||
        check_shapes(op, x, d, index, src))
        return zli_op_end(op, 3, in, NULL);
    if (src->dtype != x->dtype) {
        zl_error(ZL_EDTYPE, "%s: src must have the input's dtype (src %s, input %s)", op, zl_dtype_name(src->dtype),
                 zl_dtype_name(x->dtype));
        return zli_op_end(op, 3, in, NULL);
    }
    bool is_float = zl_dtype_traits_of(x->dtype)->is_float;
    zl_dtype work = !add ? x->dtype : is_float ? ZL_DTYPE_F32 : ZL_DTYPE_I64;
    bool there = x->storage->dev && src->storage->dev;   /* x and src where the kernels run */
    zlm_index_fault *fault = k->scatter && k->index_faults && there ? k->index_faults(where) : NULL;
    if (fault) return zli_op_end(op, 3, in, scatter_kernels(k, where, fault, add, x, d, index, src, work));
    offsets *o = index_offsets(op, x, d, index, src->shape);
    /* The result is a copy of x of its own: zli_host_copy hands x back when
     * it is already a host tensor of that dtype. */
    zl_tensor *out = o ? zli_host_copy(x, work) : NULL;
    if (out == x) {
        zl_tensor_release(out);
        out = zli_copy_as(x, work, ZL_MEM_ACTIVATIONS);
    }
    zl_tensor *sc = out ? zli_host_copy(src, work) : NULL;
    if (sc) {
        size_t es = zl_dtype_size(work);
        const char *ps = zl_tensor_data(sc);
        char *po = zl_tensor_data(out);
        for (int64_t p = 0; p < o->m; p++) {
            if (!add) memcpy(po + o->xoff[p] * es, ps + o->soff[p] * es, es);
            else if (is_float) ((float *)po)[o->xoff[p]] += ((const float *)ps)[o->soff[p]];
            else ((int64_t *)po)[o->xoff[p]] = (int64_t)((uint64_t)((int64_t *)po)[o->xoff[p]] +
                                                         (uint64_t)((const int64_t *)ps)[o->soff[p]]);
        }
    }
    if (!sc) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(sc);
    out = out ? zli_host_result(out, x->dtype, x) : NULL;
    zl_node *node = NULL;
    zl_tensor *rec[2] = {x, src};
    if (out && is_float && zli_record(out, op, scatter_backward, 2, rec, &node)) {
        zl_tensor_release(out);
        out = NULL;
    }
    if (node) {
        node->i[0] = add;
        node->ctx = o;
        node->ctx_free = offsets_free;
        o = NULL;
    }
    free(o);
    return zli_op_end(op, 3, in, out);
}

zl_tensor *zl_scatter(zl_tensor *x, int dim, zl_tensor *index, zl_tensor *src)
{
    return scatter(false, x, dim, index, src);
}

zl_tensor *zl_scatter_add(zl_tensor *x, int dim, zl_tensor *index, zl_tensor *src)
{
    return scatter(true, x, dim, index, src);
}
