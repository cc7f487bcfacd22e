/* Reductions over one dimension or all of them (sum, mean, max, argmax) and
 * sum_to_shape, the reverse of broadcasting that every binary backward uses.
 * Order of summation is fixed: a full reduction adds fixed ZLI_SUM_CHUNK chunks
 * in double and then the chunk sums in order, so the result does not depend on
 * the thread count at all. A device keeps every one of these orders
 * (cuda/math/reduce.h), so its results are the host's bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../device_kernels.h"

enum { R_SUM, R_MEAN, R_MAX, R_ARGMAX };
static const char *const names[] = {"sum", "mean", "max", "argmax"};

/* x viewed as [outer, d, inner] (contiguous f32); out [outer, inner]. */
static void reduce_dim(int kind, const float *restrict x, int64_t outer, int64_t d, int64_t inner,
                       float *restrict out, int64_t *restrict idx)
{
    #pragma omp parallel for schedule(static) if (outer * d * inner > ZLI_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * d * inner;
        float *yo = out + o * inner;
        int64_t *io = idx ? idx + o * inner : NULL;
        if (kind == R_SUM || kind == R_MEAN) {
            for (int64_t i = 0; i < inner; i++) yo[i] = 0.0f;
            for (int64_t k = 0; k < d; k++)
                for (int64_t i = 0; i < inner; i++) yo[i] += xo[k * inner + i];
            if (kind == R_MEAN)
                for (int64_t i = 0; i < inner; i++) yo[i] /= (float)d;
        } else {
            for (int64_t i = 0; i < inner; i++) {
                float best = xo[i];
                int64_t bi = 0;
                for (int64_t k = 1; k < d; k++) {
                    float v = xo[k * inner + i];
                    if (v > best || (isnan(v) && !isnan(best))) { best = v; bi = k; }
                }
                yo[i] = best;
                if (io) io[i] = bi;
            }
        }
    }
}

static zl_status reduce_backward(zl_node *n, zl_tensor *g, zl_tensor **gin);

/* out [out] (f32) and, for max and argmax, idx [out] (i64, the same shape) on
 * x's device: d < 0 reduces everything. */
static zl_status reduce_device(const zli_dev_kernels *k, int index, int kind, zl_tensor *x, int d, int64_t outer,
                               int64_t len, int64_t inner, zl_tensor *out, zl_tensor *idx)
{
    zl_tensor *xf = zli_f32c(x);
    if (!xf) return ZL_ENOMEM;
    zl_status st;
    if (d < 0 && (kind == R_SUM || kind == R_MEAN)) {
        /* One double per chunk: 8-byte slots of an i64 scratch. */
        int64_t nchunks = (zl_tensor_numel(x) + ZLI_SUM_CHUNK - 1) / ZLI_SUM_CHUNK;
        if (nchunks < 1) nchunks = 1;
        zl_tensor *work = x->storage->dev->alloc(ZL_DTYPE_I64, 1, &nchunks, ZL_MEM_ACTIVATIONS, index);
        st = work ? k->reduce_all(index, kind == R_MEAN, zl_tensor_numel(x), zl_tensor_data(xf), zl_tensor_data(work),
                                  zl_tensor_data(out))
                  : ZL_ENOMEM;
        zl_tensor_release(work);
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
    return zl_dtype_traits_of(xdt)->is_float ? xdt : (kind == R_MAX ? xdt : ZL_DTYPE_F32);
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

/* The reduction of x on its device, recorded for backward with the max's
 * positions saved there (saved[0]); argmax gives the positions themselves. */
static zl_tensor *reduce_on_device(const zli_dev_kernels *k, int index, int kind, zl_tensor *x, int d,
                                   int64_t outer, int64_t len, int64_t inner, int nd, const int64_t *shape)
{
    bool want_idx = kind == R_MAX || kind == R_ARGMAX;
    zl_tensor *out = zli_new_f32_like(x, nd, shape);
    zl_tensor *idx = out && want_idx ? x->storage->dev->alloc(ZL_DTYPE_I64, nd, shape, ZL_MEM_ACTIVATIONS, index)
                                     : NULL;
    if (!out || (want_idx && !idx) || reduce_device(k, index, kind, x, d, outer, len, inner, out, idx)) {
        zl_tensor_release(out);
        zl_tensor_release(idx);
        return NULL;
    }
    if (kind == R_ARGMAX) {
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
 * on overflow, as torch's), max in the input's dtype, argmax's positions;
 * on the host (zli_host_i64). No gradient: integers have none. */
static zl_tensor *reduce_int(int kind, zl_tensor *x, int64_t outer, int64_t len, int64_t inner, int nd,
                             const int64_t *shape)
{
    zl_tensor *xc = zli_host_i64(x);
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
                    if (e > best) best = e, at = k;
                }
                o[a * inner + i] = kind == R_SUM ? (int64_t)sum : kind == R_MAX ? best : at;
            }
    }
    zl_tensor_release(xc);
    return zli_int_result(out, kind == R_MAX ? x->dtype : ZL_DTYPE_I64, x);
}

static zl_tensor *reduce(int kind, zl_tensor *x, int dim, bool keepdim)
{
    const char *op = names[kind];
    const zli_dev_kernels *k = NULL;
    int index = 0, on;
    if (zli_op_begin(op, 1, &x)) return NULL;
    if ((on = zli_op_device(op, 1, &x, &k, &index)) < 0) return zli_op_end(op, 1, &x, NULL);
    int d = -1;
    if (dim != ZL_ALL_DIMS && zli_norm_dim(op, dim, x->ndim, &d)) return zli_op_end(op, 1, &x, NULL);
    int64_t n = zl_tensor_numel(x);
    if ((kind == R_MAX || kind == R_ARGMAX) && (d < 0 ? n == 0 : x->shape[d] == 0)) {
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
    if (on) return zli_op_end(op, 1, &x, reduce_on_device(k, index, kind, x, d, outer, len, inner, nd, shape));
    zl_tensor *xf = zli_f32c(x);
    zl_tensor *out = xf ? zli_new_f32(nd, shape) : NULL;
    int64_t *idx = NULL;
    if (out && (kind == R_MAX || kind == R_ARGMAX)) {
        idx = malloc((size_t)(outer * inner) * sizeof *idx);
        if (!idx) { zl_tensor_release(out); out = NULL; zl_error(ZL_ENOMEM, "%s: out of memory", op); }
    }
    if (out) {
        if (d < 0 && (kind == R_SUM || kind == R_MEAN)) {
            double s = zli_sum_fixed(zl_tensor_data(xf), n);
            *(float *)zl_tensor_data(out) = (float)(kind == R_MEAN ? s / (double)n : s);
        } else {
            reduce_dim(kind, zl_tensor_data(xf), outer, len, inner, zl_tensor_data(out), idx);
        }
    }
    zl_tensor_release(xf);
    if (out && kind == R_ARGMAX) {
        zl_tensor *ai = zl_tensor_new(ZL_DTYPE_I64, nd, shape, ZL_MEM_ACTIVATIONS);
        if (ai) memcpy(zl_tensor_data(ai), idx, (size_t)(outer * inner) * sizeof *idx);
        zl_tensor_release(out);
        free(idx);
        return zli_op_end(op, 1, &x, ai);
    }
    zl_node *node;
    out = record(out, kind, x, d, outer, len, inner, &node);
    if (node) {
        node->ctx = idx;
        node->ctx_free = free;
        idx = NULL;
    }
    free(idx);
    return zli_op_end(op, 1, &x, out);
}

static zl_status reduce_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    int kind = (int)n->i[0];
    int64_t outer = n->i[2], len = n->i[3], inner = n->i[4];
    zl_tensor *gx = zli_new_f32_like(g, x->ndim, x->shape);
    if (!gx) return ZL_ENOMEM;
    if (g->storage->dev) {
        const zli_dev_kernels *k = g->storage->dev->kernels;
        zl_status st = k->reduce_backward(g->storage->dev_index, kind, outer, len, inner, zl_tensor_data(g),
                                          n->saved[0] ? zl_tensor_data(n->saved[0]) : NULL, zl_tensor_data(gx));
        if (st) zl_tensor_release(gx);
        else gin[0] = gx;
        return st;
    }
    float *px = zl_tensor_data(gx);
    const float *pg = zl_tensor_data(g);
    if (n->i[1] < 0) {
        int64_t total = zl_tensor_numel(x);
        float v = kind == R_MEAN ? pg[0] / (float)total : pg[0];
        if (kind == R_MAX) {
            memset(px, 0, (size_t)total * sizeof *px);
            px[((int64_t *)n->ctx)[0]] = pg[0];
        } else {
            for (int64_t i = 0; i < total; i++) px[i] = v;
        }
    } else {
        const int64_t *idx = n->ctx;
        #pragma omp parallel for schedule(static) if (outer * len * inner > ZLI_PAR_MIN && outer > 1)
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < len; k++)
                for (int64_t i = 0; i < inner; i++) {
                    float gv = pg[o * inner + i];
                    float *dst = &px[(o * len + k) * inner + i];
                    if (kind == R_SUM) *dst = gv;
                    else if (kind == R_MEAN) *dst = gv / (float)len;
                    else *dst = idx[o * inner + i] == k ? gv : 0.0f;
                }
    }
    gin[0] = gx;
    return ZL_OK;
}

zl_tensor *zl_sum(zl_tensor *x, int dim, bool keepdim) { return reduce(R_SUM, x, dim, keepdim); }
zl_tensor *zl_mean(zl_tensor *x, int dim, bool keepdim) { return reduce(R_MEAN, x, dim, keepdim); }
zl_tensor *zl_max(zl_tensor *x, int dim, bool keepdim) { return reduce(R_MAX, x, dim, keepdim); }
zl_tensor *zl_argmax(zl_tensor *x, int dim, bool keepdim) { return reduce(R_ARGMAX, x, dim, keepdim); }

/* zli_sum_to_shape for a gradient on a device: the device's kernel, with
 * the dims it reduces marked, in the same order as below. */
static zl_tensor *sum_to_device(zl_tensor *g, int ndim, const int64_t *shape)
{
    const zli_dev_kernels *k = g->storage->dev->kernels;
    if (!k || !k->sum_to || g->ndim == 0) {
        zl_error(ZL_EDEVICE, "sum to shape: the gradient's device runs no reduction");
        return NULL;
    }
    int nd = g->ndim, lead = nd - ndim, red[ZL_MAX_DIMS];
    for (int d = 0; d < nd; d++) red[d] = d < lead || (shape[d - lead] == 1 && g->shape[d] != 1);
    zl_tensor *gc = zli_f32c(g);
    zl_tensor *out = gc ? zli_new_f32_like(g, ndim, shape) : NULL;
    if (out) zl_tensor_set_category(out, ZL_MEM_GRADS);
    if (out && k->sum_to(g->storage->dev_index, nd, gc->shape, red, zl_tensor_data(gc), zl_tensor_data(out),
                         zl_tensor_numel(out))) {
        zl_tensor_release(out);
        out = NULL;
    }
    zl_tensor_release(gc);
    return out;
}

zl_tensor *zli_sum_to_shape(zl_tensor *g, int ndim, const int64_t *shape)
{
    if (g->ndim == ndim && memcmp(g->shape, shape, (size_t)ndim * sizeof *shape) == 0) return zli_f32c(g);
    if (g->storage->dev) return sum_to_device(g, ndim, shape);
    zl_tensor *gc = zli_f32c(g);
    zl_tensor *out = gc ? zl_tensor_new(ZL_DTYPE_F32, ndim, shape, ZL_MEM_GRADS) : NULL;
    if (!out) { zl_tensor_release(gc); return NULL; }
    float *po = zl_tensor_data(out);
    memset(po, 0, (size_t)zl_tensor_numel(out) * sizeof *po);
    /* Strides into out for each of g's dims, 0 where out is broadcast. */
    int nd = gc->ndim, lead = nd - ndim;
    int64_t so[ZL_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        so[i] = i < lead || shape[i - lead] == 1 ? 0 : out->stride[i - lead];
    const float *pg = zl_tensor_data(gc);
    int64_t inner = nd ? gc->shape[nd - 1] : 1;
    int64_t rows = inner ? zl_tensor_numel(gc) / inner : 0;
    int64_t sin = nd ? so[nd - 1] : 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            off += (rem % gc->shape[d]) * so[d];
            rem /= gc->shape[d];
        }
        const float *row = pg + r * inner;
        if (sin == 1) {
            float *dst = po + off;
            for (int64_t j = 0; j < inner; j++) dst[j] += row[j];
        } else {
            float s = 0.0f;
            for (int64_t j = 0; j < inner; j++) s += row[j];
            po[off] += s;
        }
    }
    zl_tensor_release(gc);
    return out;
}
