/* The differentiable views (reshape, view, permute, transpose, narrow, select,
 * expand, squeeze, unsqueeze) and the copies that stand in for them (clone,
 * contiguous, to, detach): core's view primitives, recorded by autograd. */
#include <stdlib.h>
#include <string.h>
#include "op_util.h"
#include "../core/view.h"

static zl_status reshape_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *in = n->inputs[0];
    gin[0] = zli_view_of(g, in->ndim, in->shape, in->stride, g->offset);
    if (!gin[0]) return ZL_ENOMEM;
    zli_contiguous_strides(in->ndim, in->shape, gin[0]->stride);
    return ZL_OK;
}

static zl_tensor *finish_view(const char *op, zl_tensor *t, zl_tensor *out, zli_backward_fn bw)
{
    zl_node *n;
    if (!out) return NULL;
    if (zli_record(out, op, bw, 1, &t, &n)) { zl_tensor_release(out); return NULL; }
    return out;
}

static zl_tensor *reshape_impl(const char *op, zl_tensor *t, int ndim, const int64_t *shape, bool allow_copy)
{
    if (zli_op_begin(op, 1, &t)) return NULL;
    zl_tensor *out = zli_reshape(op, t, ndim, shape, allow_copy);
    return zli_op_end(op, 1, &t, finish_view(op, t, out, reshape_backward));
}

zl_tensor *zl_tensor_reshape(zl_tensor *t, int ndim, const int64_t *shape)
{
    return reshape_impl("reshape", t, ndim, shape, true);
}

zl_tensor *zl_tensor_view(zl_tensor *t, int ndim, const int64_t *shape)
{
    return reshape_impl("view", t, ndim, shape, false);
}

static zl_status permute_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    int inv[ZL_MAX_DIMS];
    for (int i = 0; i < g->ndim; i++) inv[n->i[i]] = i;
    gin[0] = zl_tensor_permute(g, inv);
    return gin[0] ? ZL_OK : ZL_ENOMEM;
}

zl_tensor *zl_tensor_permute(zl_tensor *t, const int *perm)
{
    if (zli_op_begin("permute", 1, &t)) return NULL;
    int p[ZL_MAX_DIMS];
    zl_tensor *out = zli_permute(t, perm, p);
    zl_node *n;
    if (out && zli_record(out, "permute", permute_backward, 1, &t, &n)) { zl_tensor_release(out); out = NULL; }
    else if (out && n) for (int i = 0; i < t->ndim; i++) n->i[i] = p[i];
    return zli_op_end("permute", 1, &t, out);
}

zl_tensor *zl_tensor_transpose(zl_tensor *t, int d0, int d1)
{
    if (zli_check_arg("transpose", "tensor", t)) return NULL;
    int a, b, perm[ZL_MAX_DIMS];
    if (zli_norm_dim("transpose", d0, t->ndim, &a) || zli_norm_dim("transpose", d1, t->ndim, &b)) return NULL;
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return zl_tensor_permute(t, perm);
}

/* Backward of narrow: scatter the slice's gradient into zeros of the input's shape. */
static zl_status narrow_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *in = n->inputs[0];
    zl_tensor *z = zli_full_like_device(g, ZL_DTYPE_F32, in->ndim, in->shape, ZL_MEM_GRADS, 0.0);
    if (!z) return ZL_ENOMEM;
    int dim = (int)n->i[0];
    zl_tensor *slice = zli_view_of(z, in->ndim, in->shape, z->stride, n->i[1] * z->stride[dim]);
    if (!slice) { zl_tensor_release(z); return ZL_ENOMEM; }
    slice->shape[dim] = n->i[2];
    zl_tensor *gv = g;
    if (n->i[3]) {   /* select dropped the dim: view g with it restored */
        gv = zli_view_of(g, slice->ndim, slice->shape, slice->stride, g->offset);
        if (gv) zli_contiguous_strides(gv->ndim, gv->shape, gv->stride);
    }
    zl_status st = gv ? zl_tensor_copy_(slice, gv) : ZL_ENOMEM;
    if (gv != g) zl_tensor_release(gv);
    zl_tensor_release(slice);
    if (st) { zl_tensor_release(z); return st; }
    gin[0] = z;
    return ZL_OK;
}

static zl_tensor *narrow_impl(const char *op, zl_tensor *t, int dim, int64_t start, int64_t length, bool drop)
{
    if (zli_op_begin(op, 1, &t)) return NULL;
    zl_tensor *out = zli_narrow(op, t, &dim, &start, length, drop);
    zl_node *n;
    if (out && zli_record(out, op, narrow_backward, 1, &t, &n)) { zl_tensor_release(out); out = NULL; }
    else if (out && n) { n->i[0] = dim; n->i[1] = start; n->i[2] = length; n->i[3] = drop; }
    return zli_op_end(op, 1, &t, out);
}

zl_tensor *zl_tensor_narrow(zl_tensor *t, int dim, int64_t start, int64_t length)
{
    return narrow_impl("narrow", t, dim, start, length, false);
}

zl_tensor *zl_tensor_select(zl_tensor *t, int dim, int64_t index)
{
    if (zli_check_arg("select", "tensor", t)) return NULL;
    int d;
    if (zli_norm_dim("select", dim, t->ndim, &d)) return NULL;
    if (index < -t->shape[d] || index >= t->shape[d]) {
        zl_error(ZL_EINVAL, "select: index %lld is out of range for dimension %d of size %lld",
                 (long long)index, dim, (long long)t->shape[d]);
        return NULL;
    }
    return narrow_impl("select", t, d, index < 0 ? index + t->shape[d] : index, 1, true);
}

static zl_status expand_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *in = n->inputs[0];
    gin[0] = zli_sum_to_shape(g, in->ndim, in->shape);
    return gin[0] ? ZL_OK : ZL_ENOMEM;
}

zl_tensor *zl_tensor_expand(zl_tensor *t, int ndim, const int64_t *shape)
{
    if (zli_op_begin("expand", 1, &t)) return NULL;
    zl_tensor *out = zli_expand(t, ndim, shape);
    return zli_op_end("expand", 1, &t, finish_view("expand", t, out, expand_backward));
}

zl_tensor *zl_tensor_squeeze(zl_tensor *t, int dim)
{
    if (zli_check_arg("squeeze", "tensor", t)) return NULL;
    int64_t sh[ZL_MAX_DIMS];
    int nd = 0, d = -1;
    if (dim != ZL_ALL_DIMS && zli_norm_dim("squeeze", dim, t->ndim, &d)) return NULL;
    for (int i = 0; i < t->ndim; i++)
        if (!(t->shape[i] == 1 && (d < 0 || d == i))) sh[nd++] = t->shape[i];
    return reshape_impl("squeeze", t, nd, sh, false);
}

zl_tensor *zl_tensor_unsqueeze(zl_tensor *t, int dim)
{
    if (zli_check_arg("unsqueeze", "tensor", t)) return NULL;
    int d;
    if (t->ndim >= ZL_MAX_DIMS) {
        zl_error(ZL_EINVAL, "unsqueeze: a tensor already has the maximum of %d dimensions", ZL_MAX_DIMS);
        return NULL;
    }
    if (zli_norm_dim_insert("unsqueeze", dim, t->ndim, &d)) return NULL;
    int64_t sh[ZL_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) sh[i] = i == d ? 1 : t->shape[j++];
    return reshape_impl("unsqueeze", t, t->ndim + 1, sh, false);
}

static zl_status identity_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    (void)n;
    gin[0] = zl_tensor_retain(g);
    return ZL_OK;
}

zl_tensor *zl_tensor_clone(zl_tensor *t)
{
    if (zli_op_begin("clone", 1, &t)) return NULL;
    zl_tensor *out = zli_copy_as(t, t->dtype, ZL_MEM_ACTIVATIONS);
    return zli_op_end("clone", 1, &t, finish_view("clone", t, out, identity_backward));
}

zl_tensor *zl_tensor_contiguous(zl_tensor *t)
{
    if (zli_check_arg("contiguous", "tensor", t)) return NULL;
    if (zl_tensor_is_contiguous(t)) return zl_tensor_retain(t);
    return zl_tensor_clone(t);
}

zl_tensor *zl_tensor_to(zl_tensor *t, zl_dtype dt)
{
    if (zli_op_begin("to", 1, &t)) return NULL;
    if (!zl_dtype_traits_of(dt)) {
        zl_error(ZL_EDTYPE, "to: invalid dtype %d", (int)dt);
        return zli_op_end("to", 1, &t, NULL);
    }
    zl_tensor *out = zli_copy_as(t, dt, ZL_MEM_ACTIVATIONS);
    /* Gradients flow only between float dtypes; to an integer type history stops. */
    if (out && !zl_dtype_traits_of(dt)->is_float) return zli_op_end("to", 1, &t, out);
    return zli_op_end("to", 1, &t, finish_view("to", t, out, identity_backward));
}

zl_tensor *zl_tensor_detach(zl_tensor *t)
{
    if (zli_check_arg("detach", "tensor", t)) return NULL;
    return zli_view_of(t, t->ndim, t->shape, t->stride, t->offset);
}
