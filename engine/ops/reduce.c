/* Reductions over one dimension or all of them (sum, mean, max, argmax, min,
 * argmin), over several (sum, mean, var, std), the running sum, and
 * sum_to_shape, the reverse of broadcasting that every binary backward uses,
 * through the kernel table of x's memory. */
#include <math.h>
#include <string.h>
#include "device_kernels.h"
#include "../math/reduce.h"

/* The kinds a device's kernels take. */
enum { R_SUM = ZLM_R_SUM, R_MEAN = ZLM_R_MEAN, R_MAX = ZLM_R_MAX, R_ARGMAX = ZLM_R_ARGMAX, R_MIN = ZLM_R_MIN,
       R_ARGMIN = ZLM_R_ARGMIN };
static const char *const names[] = {"sum", "mean", "max", "argmax", "min", "argmin"};

/* Whether the reduction picks an element (its gradient goes to that one). */
static bool picks(int kind) { return kind >= R_MAX; }

static zl_status reduce_backward(zl_node *n, zl_tensor *g, zl_tensor **gin);

/* out [out] (f32) and, for max, min and their positions, idx [out] (i64,
 * the same shape) in x's memory, by its kernels: d < 0 reduces everything. */
static zl_status reduce_kernel(const zli_dev_kernels *k, int index, int kind, zl_tensor *x, int d, int64_t outer,
                               int64_t len, int64_t inner, zl_tensor *out, zl_tensor *idx)
{
    zl_tensor *xf = zli_f32c(x);
    if (!xf) return ZL_ENOMEM;
    zl_status st;
    if (d < 0 && (kind == R_SUM || kind == R_MEAN)) {
        st = zli_kernel_sum(k, index, x, zl_tensor_data(xf), zl_tensor_numel(x),
                            kind == R_MEAN ? (double)zl_tensor_numel(x) : 1.0, NULL, zl_tensor_data(out));
    } else {
        st = k->reduce_dim(index, kind, outer, len, inner, zl_tensor_data(xf), zl_tensor_data(out),
                           idx ? zl_tensor_data(idx) : NULL);
    }
    zl_tensor_release(xf);
    return st;
}

/* The result's dtype: a float input's own; the mean of integers in f32 (the
 * host reduces integers' sum and max exactly, reduce_int). */
static zl_dtype result_dtype(int kind, zl_dtype xdt)
{
    return zl_dtype_traits_of(xdt)->is_float ? xdt : (kind == R_MAX || kind == R_MIN ? xdt : ZL_DTYPE_F32);
}

/* out (f32) in the result's dtype, recorded for backward with the kind, the
 * dim and the [outer, len, inner] view in i[]; *node [out] the node, or NULL. */
static zl_tensor *record(zl_tensor *out, int kind, zl_tensor *x, int d, int64_t outer, int64_t len, int64_t inner,
                         zl_node **node)
{
    *node = NULL;
    out = zli_cast_result(out, result_dtype(kind, x->dtype));
    if (out && zli_record(out, names[kind], reduce_backward, 1, &x, node)) {
        zl_tensor_release(out);
        *node = NULL;
        return NULL;
    }
    if (*node) {
        (*node)->i[0] = kind;
        (*node)->i[1] = d;
        (*node)->i[2] = outer; (*node)->i[3] = len; (*node)->i[4] = inner;
    }
    return out;
}

/* The reduction of x in its memory, recorded for backward with the max's or
 * min's positions saved there (saved[0]); argmax and argmin give the
 * positions themselves. */
static zl_tensor *reduce_float(const zli_dev_kernels *k, int index, int kind, zl_tensor *x, int d, int64_t outer,
                               int64_t len, int64_t inner, int nd, const int64_t *shape)
{
    bool want_idx = picks(kind);
    zl_tensor *out = zli_new_f32_like(x, nd, shape);
    zl_tensor *idx = out && want_idx ? zli_new_like(x, ZL_DTYPE_I64, nd, shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (!out || (want_idx && !idx) || reduce_kernel(k, index, kind, x, d, outer, len, inner, out, idx)) {
        zl_tensor_release(out);
        zl_tensor_release(idx);
        return NULL;
    }
    if (kind == R_ARGMAX || kind == R_ARGMIN) {
        zl_tensor_release(out);
        return idx;
    }
    zl_node *node;
    out = record(out, kind, x, d, outer, len, inner, &node);
    if (node && idx && zli_node_save(node, 0, idx, false)) { zl_tensor_release(out); out = NULL; }
    zl_tensor_release(idx);
    return out;
}

/* Integers reduced exactly in 64 bits as torch does: sum in i64 (wrapping
 * on overflow, as torch's), max and min in the input's dtype, the positions
 * of argmax and argmin (the first extreme); on the host (zli_host_copy). No
 * gradient: integers have none. */
static zl_tensor *reduce_int(int kind, zl_tensor *x, int64_t outer, int64_t len, int64_t inner, int nd,
                             const int64_t *shape)
{
    zl_tensor *xc = zli_host_copy(x, ZL_DTYPE_I64);
    zl_tensor *out = xc ? zl_tensor_new(ZL_DTYPE_I64, nd, shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out) {
        const int64_t *v = zl_tensor_data(xc);
        int64_t *o = zl_tensor_data(out);
        for (int64_t a = 0; a < outer; a++)
            for (int64_t i = 0; i < inner; i++) {
                const int64_t *col = v + a * len * inner + i;
                uint64_t sum = 0;
                int64_t best = len ? col[0] : 0, at = 0;
                for (int64_t k = 0; k < len; k++) {
                    int64_t e = col[k * inner];
                    sum += (uint64_t)e;
                    if (zlm_reduce_lowest(kind) ? e < best : e > best) best = e, at = k;
                }
                o[a * inner + i] = kind == R_SUM ? (int64_t)sum : kind == R_MAX || kind == R_MIN ? best : at;
            }
    }
    zl_tensor_release(xc);
    return zli_host_result(out, kind == R_MAX || kind == R_MIN ? x->dtype : ZL_DTYPE_I64, x);
}

static zl_tensor *reduce(int kind, zl_tensor *x, int dim, bool keepdim)
{
    const char *op = names[kind];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 1, &x)) return NULL;
    if (zli_op_device(op, 1, &x, &k, &index) < 0) return zli_op_end(op, 1, &x, NULL);
    int d = -1;
    if (dim != ZL_ALL_DIMS && zli_norm_dim(op, dim, x->ndim, &d)) return zli_op_end(op, 1, &x, NULL);
    int64_t n = zl_tensor_numel(x);
    if (picks(kind) && (d < 0 ? n == 0 : x->shape[d] == 0)) {
        zl_error(ZL_EINVAL, "%s: cannot reduce over an empty dimension", op);
        return zli_op_end(op, 1, &x, NULL);
    }
    int64_t outer = 1, len = n, inner = 1, shape[ZL_MAX_DIMS];
    int nd = 0;
    if (d >= 0) {
        len = x->shape[d];
        for (int i = 0; i < d; i++) outer *= x->shape[i];
        for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
        for (int i = 0; i < x->ndim; i++) {
            if (i != d) shape[nd++] = x->shape[i];
            else if (keepdim) shape[nd++] = 1;
        }
    } else if (keepdim) {
        for (int i = 0; i < x->ndim; i++) shape[nd++] = 1;
    }
    /* A device has no 64-bit integer reduction: the host's, through host memory (a count, as an
     * accuracy's, is small), so both give the same bits. */
    if (!zl_dtype_traits_of(x->dtype)->is_float && kind != R_MEAN)
        return zli_op_end(op, 1, &x, reduce_int(kind, x, outer, len, inner, nd, shape));
    return zli_op_end(op, 1, &x, reduce_float(k, index, kind, x, d, outer, len, inner, nd, shape));
}

static zl_status reduce_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("reduction backward", 1, &g, &k, &index) < 0) return zli_last_code();
    zl_tensor *gx = zli_new_f32_like(g, x->ndim, x->shape);
    if (!gx) return ZL_ENOMEM;
    zl_status st = k->reduce_backward(index, (int)n->i[0], n->i[2], n->i[3], n->i[4], zl_tensor_data(g),
                                      n->saved[0] ? zl_tensor_data(n->saved[0]) : NULL, zl_tensor_data(gx));
    if (st) zl_tensor_release(gx);
    else gin[0] = gx;
    return st;
}

zl_tensor *zl_sum(zl_tensor *x, int dim, bool keepdim) { return reduce(R_SUM, x, dim, keepdim); }
zl_tensor *zl_mean(zl_tensor *x, int dim, bool keepdim) { return reduce(R_MEAN, x, dim, keepdim); }
zl_tensor *zl_max(zl_tensor *x, int dim, bool keepdim) { return reduce(R_MAX, x, dim, keepdim); }
zl_tensor *zl_argmax(zl_tensor *x, int dim, bool keepdim) { return reduce(R_ARGMAX, x, dim, keepdim); }
zl_tensor *zl_min(zl_tensor *x, int dim, bool keepdim) { return reduce(R_MIN, x, dim, keepdim); }
zl_tensor *zl_argmin(zl_tensor *x, int dim, bool keepdim) { return reduce(R_ARGMIN, x, dim, keepdim); }

/* dims [n] checked (each a dim of x, none twice) into red [x->ndim]: true
 * where reduced; n == 0 reduces every dim. */
static zl_status dims_mask(const char *op, const zl_tensor *x, int n, const int *dims, bool *red)
{
    for (int i = 0; i < x->ndim; i++) red[i] = n == 0;
    if (n < 0) return zl_error(ZL_EINVAL, "%s: the number of dims must not be negative, got %d", op, n);
    if (n > 0 && !dims) return zl_error(ZL_EINVAL, "%s: dims is NULL for %d dims", op, n);
    for (int i = 0; i < n; i++) {
        int d;
        if (zli_norm_dim(op, dims[i], x->ndim, &d)) return zli_last_code();
        if (red[d]) return zl_error(ZL_EINVAL, "%s: dim %d appears more than once in the list of dims", op, d);
        red[d] = true;
    }
    return ZL_OK;
}

/* The shape x reduces to over red (1 in place of a reduced dim when keepdim)
 * and the number of elements each output reduces. */
static int reduced_shape(const zl_tensor *x, const bool *red, bool keepdim, int64_t *shape, int64_t *count)
{
    int nd = 0;
    *count = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (!red[d]) {
            shape[nd++] = x->shape[d];
        } else {
            *count *= x->shape[d];
            if (keepdim) shape[nd++] = 1;
        }
    }
    return nd;
}

/* sum and mean over several dims: one dim at a time from the last, each kept
 * as size 1 so the others keep their places, then those dims dropped. Each
 * step is the one-dim op (on any device, with its backward). */
static zl_tensor *reduce_dims(int kind, zl_tensor *x, int n, const int *dims, bool keepdim)
{
    const char *op = names[kind];
    if (zli_op_begin(op, 1, &x)) return NULL;
    bool red[ZL_MAX_DIMS];
    if (dims_mask(op, x, n, dims, red)) return zli_op_end(op, 1, &x, NULL);
    if (n == 0) return zli_op_end(op, 1, &x, reduce(kind, x, ZL_ALL_DIMS, keepdim));
    zl_tensor *r = zl_tensor_retain(x);
    for (int d = x->ndim - 1; d >= 0 && r; d--) {
        if (!red[d]) continue;
        zl_tensor *next = reduce(kind, r, d, true);
        zl_tensor_release(r);
        r = next;
    }
    if (r && !keepdim) {
        int64_t shape[ZL_MAX_DIMS], count;
        int nd = reduced_shape(x, red, false, shape, &count);
        zl_tensor *v = zl_tensor_reshape(r, nd, shape);
        zl_tensor_release(r);
        r = v;
    }
    return zli_op_end(op, 1, &x, r);
}

zl_tensor *zl_sum_dims(zl_tensor *x, int n, const int *dims, bool keepdim)
{
    return reduce_dims(R_SUM, x, n, dims, keepdim);
}

zl_tensor *zl_mean_dims(zl_tensor *x, int n, const int *dims, bool keepdim)
{
    return reduce_dims(R_MEAN, x, n, dims, keepdim);
}

/* ---- var and std: through the kernel table of x's memory, in double, two
 * passes (math/var.h). ---- */

/* Views over contiguous x: its kept dims and its reduced dims (x's strides),
 * and over x's shape each element's output (0 on reduced dims). */
static void var_views(const zl_tensor *x, const bool *red, zlm_view *kept, zlm_view *rv, zlm_view *ov)
{
    int64_t xs[ZL_MAX_DIMS], os[ZL_MAX_DIMS], ks[ZL_MAX_DIMS], kshape[ZL_MAX_DIMS], rs[ZL_MAX_DIMS];
    int64_t rshape[ZL_MAX_DIMS], px = 1, po = 1;
    int nk = 0, nr = 0;
    for (int d = x->ndim - 1; d >= 0; d--) {
        xs[d] = px;
        px *= x->shape[d];
        os[d] = red[d] ? 0 : po;
        if (!red[d]) po *= x->shape[d];
    }
    for (int d = 0; d < x->ndim; d++) {
        if (red[d]) rshape[nr] = x->shape[d], rs[nr++] = xs[d];
        else kshape[nk] = x->shape[d], ks[nk++] = xs[d];
    }
    *kept = zlm_view_over(nk, kshape, ks);
    *rv = zlm_view_over(nr, rshape, rs);
    *ov = zlm_view_over(x->ndim, x->shape, os);
}

/* x's moments by k, the kernels of x's memory, through var_views' kept and
 * rv: *xc (x contiguous f32), *stats (mean then m2, nout doubles each) and
 * the value into out [nout] f32, all where x lives. */
static zl_status var_run(const zli_dev_kernels *k, int where, zl_tensor *x, const zlm_view *kept,
                         const zlm_view *rv, int64_t nout, int64_t count, double correction, bool is_std,
                         zl_tensor **xc, zl_tensor **stats, zl_tensor *out)
{
    int64_t ns = 2 * nout + 1;
    *xc = zli_f32c(x);
    *stats = *xc ? zli_new_like(x, ZL_DTYPE_I64, 1, &ns, ZL_MEM_ACTIVATIONS) : NULL;
    if (!*stats) return ZL_ENOMEM;
    double *mean = zl_tensor_data(*stats);
    return nout > 0 ? k->var(where, nout, count, kept, rv, zl_tensor_data(*xc), correction, is_std, mean,
                             mean + nout, zl_tensor_data(out))
                    : ZL_OK;
}

static zl_status var_backward(zl_node *nd, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = nd->inputs[0];
    bool is_std = nd->i[0], red[ZL_MAX_DIMS];
    const char *op = is_std ? "std backward" : "var backward";
    double correction = nd->f[0];
    int64_t count = 1, nout = zl_tensor_numel(g);
    for (int d = 0; d < x->ndim; d++) {
        red[d] = nd->i[1 + d];
        if (red[d]) count *= x->shape[d];
    }
    const zli_dev_kernels *k = NULL;
    int where = 0;
    if (zli_op_device(op, 1, &x, &k, &where) < 0) return zli_last_code();
    zlm_view kept, rv, ov;
    var_views(x, red, &kept, &rv, &ov);
    zl_tensor *xc = NULL, *stats = NULL, *value = zli_new_f32_like(x, 1, &nout);
    zl_tensor *gc = value ? zli_f32c(g) : NULL, *gx = gc ? zli_new_f32_like(x, x->ndim, x->shape) : NULL;
    zl_status st = gx ? var_run(k, where, x, &kept, &rv, nout, count, correction, is_std, &xc, &stats, value)
                      : ZL_ENOMEM;
    if (!st && zl_tensor_numel(x) > 0) {
        const double *mean = zl_tensor_data(stats);
        st = k->var_backward(where, zl_tensor_numel(x), &ov, count, zl_tensor_data(xc), zl_tensor_data(gc), mean,
                             mean + nout, correction, is_std, zl_tensor_data(gx));
    }
    zl_tensor *objs[] = {xc, stats, value, gc};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    if (st) {
        zl_tensor_release(gx);
        return st;
    }
    gin[0] = gx;
    return ZL_OK;
}

static zl_tensor *var_std(bool is_std, zl_tensor *x, int n, const int *dims, double correction, bool keepdim)
{
    const char *op = is_std ? "std" : "var";
    if (zli_op_begin(op, 1, &x)) return NULL;
    bool red[ZL_MAX_DIMS];
    const zli_dev_kernels *k = NULL;
    int where = 0;
    if (zli_need_float(op, "x", x) || dims_mask(op, x, n, dims, red) || zli_op_device(op, 1, &x, &k, &where) < 0)
        return zli_op_end(op, 1, &x, NULL);
    if (isnan(correction)) {
        zl_error(ZL_EINVAL, "%s: correction must be a number, got NaN", op);
        return zli_op_end(op, 1, &x, NULL);
    }
    int64_t shape[ZL_MAX_DIMS], count;
    int nd = reduced_shape(x, red, keepdim, shape, &count);
    int64_t nout = zli_numel(nd, shape);
    zlm_view kept, rv, ov;
    var_views(x, red, &kept, &rv, &ov);
    zl_tensor *xc = NULL, *stats = NULL, *out = zli_new_f32_like(x, nd, shape);
    if (out && var_run(k, where, x, &kept, &rv, nout, count, correction, is_std, &xc, &stats, out)) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(xc);
    zl_tensor_release(stats);
    out = zli_cast_result(out, x->dtype);
    zl_node *node;
    if (out && zli_record(out, op, var_backward, 1, &x, &node)) {
        zl_tensor_release(out);
        out = NULL;
    } else if (out && node) {
        node->i[0] = is_std;
        node->f[0] = correction;
        for (int d = 0; d < x->ndim; d++) node->i[1 + d] = red[d];
    }
    return zli_op_end(op, 1, &x, out);
}

zl_tensor *zl_var(zl_tensor *x, int n, const int *dims, double correction, bool keepdim)
{
    return var_std(false, x, n, dims, correction, keepdim);
}

zl_tensor *zl_std(zl_tensor *x, int n, const int *dims, double correction, bool keepdim)
{
    return var_std(true, x, n, dims, correction, keepdim);
}

/* ---- cumsum: running sums along a dim through the table of x's memory,
 * floats in double as torch's CPU adds them (math/cumsum.h); integers on
 * the host. ---- */

/* out (f32, like t's shape and memory) = t's running sums, reverse from the end. */
static zl_tensor *running_sum(zl_tensor *t, int64_t outer, int64_t len, int64_t inner, bool reverse)
{
    const zli_dev_kernels *k = NULL;
    int where = 0;
    if (zli_op_device("cumsum", 1, &t, &k, &where) < 0) return NULL;
    zl_tensor *tc = zli_f32c(t), *out = tc ? zli_new_f32_like(t, t->ndim, t->shape) : NULL;
    if (out && k->cumsum(where, outer, len, inner, reverse, zl_tensor_data(tc), zl_tensor_data(out))) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(tc);
    return out;
}

/* The gradient of a running sum is the running sum of g from the end. */
static zl_status cumsum_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *gx = running_sum(g, n->i[0], n->i[1], n->i[2], true);
    if (!gx) return zli_last_code() ? zli_last_code() : ZL_ENOMEM;
    gin[0] = gx;
    return ZL_OK;
}

/* Integers (bool too) summed exactly in i64, wrapping on overflow as torch's. */
static zl_tensor *int_cumsum(zl_tensor *x, int64_t outer, int64_t len, int64_t inner)
{
    zl_tensor *xc = zli_host_copy(x, ZL_DTYPE_I64);
    zl_tensor *out = xc ? zl_tensor_new(ZL_DTYPE_I64, x->ndim, x->shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out) {
        const int64_t *v = zl_tensor_data(xc);
        int64_t *po = zl_tensor_data(out);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                uint64_t acc = 0;
                for (int64_t k = 0; k < len; k++) {
                    int64_t at = (o * len + k) * inner + i;
                    acc += (uint64_t)v[at];
                    po[at] = (int64_t)acc;
                }
            }
    }
    zl_tensor_release(xc);
    return zli_host_result(out, ZL_DTYPE_I64, x);
}

zl_tensor *zl_cumsum(zl_tensor *x, int dim)
{
    const char *op = "cumsum";
    if (zli_op_begin(op, 1, &x)) return NULL;
    int d;
    if (zli_norm_dim(op, dim, x->ndim, &d)) return zli_op_end(op, 1, &x, NULL);
    int64_t len = x->shape[d], outer = zli_numel(d, x->shape), inner = zli_numel(x->ndim - d - 1, x->shape + d + 1);
    if (!zl_dtype_traits_of(x->dtype)->is_float) return zli_op_end(op, 1, &x, int_cumsum(x, outer, len, inner));
    zl_tensor *out = zli_cast_result(running_sum(x, outer, len, inner, false), x->dtype);
    zl_node *node;
    if (out && zli_record(out, op, cumsum_backward, 1, &x, &node)) {
        zl_tensor_release(out);
        out = NULL;
    } else if (out && node) {
        node->i[0] = outer; node->i[1] = len; node->i[2] = inner;
    }
    return zli_op_end(op, 1, &x, out);
}

/* The dims g's sum to shape reduces are marked for its memory's kernel. */
zl_tensor *zli_sum_to_shape(zl_tensor *g, int ndim, const int64_t *shape)
{
    if (g->ndim == ndim && memcmp(g->shape, shape, (size_t)ndim * sizeof *shape) == 0) return zli_f32c(g);
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("sum to shape", 1, &g, &k, &index) < 0) return NULL;
    if (!k->sum_to) {
        zl_error(ZL_EDEVICE, "sum to shape: the gradient's device runs no reduction");
        return NULL;
    }
    int nd = g->ndim, lead = nd - ndim, red[ZL_MAX_DIMS];
    for (int d = 0; d < nd; d++) red[d] = d < lead || (shape[d - lead] == 1 && g->shape[d] != 1);
    zl_tensor *gc = zli_f32c(g);
    zl_tensor *out = gc ? zli_new_like(g, ZL_DTYPE_F32, ndim, shape, ZL_MEM_GRADS) : NULL;
    if (out && k->sum_to(index, nd, gc->shape, red, zl_tensor_data(gc), zl_tensor_data(out), zl_tensor_numel(out))) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(gc);
    return out;
}
