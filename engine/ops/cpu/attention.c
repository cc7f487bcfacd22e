/* attention: softmax(q kᵀ · scale, causal mask) v, forward and backward. Forward
 * keeps the probabilities P [B, Tq, Tk] and backward rebuilds dS from P. On the
 * host the batches (heads) run in parallel, each one's GEMMs single-threaded,
 * reading q, k and v where they lie (a head sliced out of a fused qkv is a
 * strided view, not a copy). On a device the same steps run as
 * strided-batched GEMMs, all batches at once. */
#include <math.h>
#include <string.h>
#include "gemm.h"
#include "../device_kernels.h"

/* s [rows, tk] [in/out]: scores to probabilities, row by row. Row r is query
 * r % tq; with `causal` it sees keys 0..r % tq and the rest get 0. Called
 * for one batch at a time, from a thread of the batches' loop. */
static void softmax_rows(float *restrict s, int64_t rows, int64_t tq, int64_t tk, bool causal)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = s + r * tk;
        int64_t lim = causal ? r % tq + 1 : tk;
        float m = -INFINITY;
        for (int64_t j = 0; j < lim; j++) m = row[j] > m ? row[j] : m;
        float sum = 0.0f;
        for (int64_t j = 0; j < lim; j++) {
            row[j] = expf(row[j] - m);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < lim; j++) row[j] *= inv;
        for (int64_t j = lim; j < tk; j++) row[j] = 0.0f;
    }
}

/* dp [rows, tk] [in/out]: dP to dS = P * (dP - Σ_j dP·P), p [rows, tk]. */
static void softmax_rows_backward(float *restrict dp, const float *restrict p, int64_t rows, int64_t tk)
{
    for (int64_t r = 0; r < rows; r++) {
        float *d = dp + r * tk;
        const float *pr = p + r * tk;
        float dot = 0.0f;
        for (int64_t j = 0; j < tk; j++) dot += d[j] * pr[j];
        for (int64_t j = 0; j < tk; j++) d[j] = pr[j] * (d[j] - dot);
    }
}

enum { A_B, A_TQ, A_TK, A_D, A_DV };

/* An operand [..., T, D] as B matrices [T, D] for BLAS: f32 in host memory
 * with unit column stride; matrix b starts at base + off(b), rows ld apart. */
typedef struct {
    zl_tensor *owner;      /* the tensor read, or its f32 copy (released by bmat_done) */
    const float *base;
    int nb;
    int64_t shape[ZL_MAX_DIMS], stride[ZL_MAX_DIMS];
    int64_t ld;
} bmat;

static bool bmat_fits(const zl_tensor *t)
{
    int nb = t->ndim - 2;
    int64_t rows = t->shape[nb], cols = t->shape[nb + 1];
    return t->dtype == ZL_DTYPE_F32 && !t->storage->dev && (t->stride[nb + 1] == 1 || cols == 1) &&
           (t->stride[nb] >= cols || rows == 1) && t->stride[nb] > 0;
}

/* t as it lies when BLAS can read it so, else its contiguous f32 copy. */
static bool bmat_of(zl_tensor *t, bmat *m)
{
    m->owner = bmat_fits(t) ? zl_tensor_retain(t) : zli_f32c(t);
    if (!m->owner) return false;
    const zl_tensor *o = m->owner;
    m->nb = o->ndim - 2;
    m->base = zl_tensor_data(m->owner);
    memcpy(m->shape, o->shape, sizeof m->shape);
    memcpy(m->stride, o->stride, sizeof m->stride);
    m->ld = o->stride[m->nb] > 0 ? o->stride[m->nb] : 1;
    return true;
}

static const float *bmat_at(const bmat *m, int64_t b)
{
    int64_t off = 0;
    for (int i = m->nb - 1; i >= 0; i--) {
        off += b % m->shape[i] * m->stride[i];
        b /= m->shape[i];
    }
    return m->base + off;
}

static void bmat_done(bmat *m) { zl_tensor_release(m->owner); }

/* Batches in parallel when there is more than one and enough work. */
#define BATCH_PARALLEL(B, work) if ((B) > 1 && (B) * (work) > ZLI_PAR_MIN)

/* The backward's GEMMs over all batches at once, dS [B, tq, tk] in one
 * scratch; P and g are on the device. With q, k and v all bf16 (or all f16)
 * the GEMMs read their operands in that dtype, P, g and dS rounded to it
 * once each, as the forward's values' GEMM reads P; the softmax's backward
 * stays in f32. */
static zl_status attention_backward_device(const zli_dev_kernels *kern, int index, zl_node *n, zl_tensor *g,
                                           zl_tensor **gin)
{
    zl_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    int64_t B = n->i[A_B], tq = n->i[A_TQ], tk = n->i[A_TK], d = n->i[A_D], dv = n->i[A_DV];
    float scale = (float)n->f[0];
    zl_dtype dt = zli_dev_gemm_dtype(3, n->inputs);
    const float *pp = zl_tensor_data(n->saved[0]);
    zl_tensor *qc = zli_contiguous_as_like(q, dt, g), *kc = zli_contiguous_as_like(k, dt, g);
    zl_tensor *vc = zli_contiguous_as_like(v, dt, g), *gc = zli_contiguous_as_like(g, dt, g);
    zl_tensor *pc = zli_contiguous_as_like(n->saved[0], dt, g), *dsc = NULL;
    bool need_ds = zli_requires_grad(q) || zli_requires_grad(k);
    zl_tensor *ds = need_ds ? zli_new_f32_like(g, 3, (int64_t[]){B, tq, tk}) : NULL;
    if (zli_requires_grad(q)) gin[0] = zli_new_f32_like(g, q->ndim, q->shape);
    if (zli_requires_grad(k)) gin[1] = zli_new_f32_like(g, k->ndim, k->shape);
    if (zli_requires_grad(v)) gin[2] = zli_new_f32_like(g, v->ndim, v->shape);
    zl_status st = ZL_OK;
    if (!qc || !kc || !vc || !gc || !pc || (need_ds && !ds) || (zli_requires_grad(q) && !gin[0]) ||
        (zli_requires_grad(k) && !gin[1]) || (zli_requires_grad(v) && !gin[2]))
        st = ZL_ENOMEM;
    const void *pg = gc ? zl_tensor_data(gc) : NULL;
    float *pds = ds ? zl_tensor_data(ds) : NULL;
    if (!st && gin[2])   /* dV [tk, dv] = Pᵀ · dO */
        st = zli_dev_gemm(kern, index, dt, true, false, tk, dv, tq, 1.0f, zl_tensor_data(pc), tk, tq * tk, pg, dv,
                          tq * dv, 0.0f, zl_tensor_data(gin[2]), dv, tk * dv, B);
    if (!st && need_ds)   /* dP [tq, tk] = dO · Vᵀ, then dS in place */
        st = zli_dev_gemm(kern, index, dt, false, true, tq, tk, dv, 1.0f, pg, dv, tq * dv, zl_tensor_data(vc), dv,
                          tk * dv, 0.0f, pds, tk, tq * tk, B);
    if (!st && need_ds) st = kern->att_softmax_backward(index, B * tq, tk, pds, pp);
    if (!st && need_ds && !(dsc = zli_contiguous_as_like(ds, dt, g))) st = ZL_ENOMEM;
    const void *pdsc = dsc ? zl_tensor_data(dsc) : NULL;
    if (!st && gin[0])   /* dQ [tq, d] = dS · K · scale */
        st = zli_dev_gemm(kern, index, dt, false, false, tq, d, tk, scale, pdsc, tk, tq * tk, zl_tensor_data(kc), d,
                          tk * d, 0.0f, zl_tensor_data(gin[0]), d, tq * d, B);
    if (!st && gin[1])   /* dK [tk, d] = dSᵀ · Q · scale */
        st = zli_dev_gemm(kern, index, dt, true, false, tk, d, tq, scale, pdsc, tk, tq * tk, zl_tensor_data(qc), d,
                          tq * d, 0.0f, zl_tensor_data(gin[1]), d, tk * d, B);
    zl_tensor *objs[] = {qc, kc, vc, gc, pc, ds, dsc};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return st;
}

static zl_status attention_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    int64_t B = n->i[A_B], tq = n->i[A_TQ], tk = n->i[A_TK], d = n->i[A_D], dv = n->i[A_DV];
    float scale = (float)n->f[0];
    if (g->storage->dev)
        return attention_backward_device(g->storage->dev->kernels, g->storage->dev_index, n, g, gin);
    const float *pp = zl_tensor_data(n->saved[0]), *pg = zl_tensor_data(g);
    bmat mq = {0}, mk = {0}, mv = {0};
    bool ok = bmat_of(q, &mq) && bmat_of(k, &mk) && bmat_of(v, &mv);
    bool need_ds = zli_requires_grad(q) || zli_requires_grad(k);
    zl_tensor *ds = ok && need_ds ? zli_new_f32(3, (int64_t[]){B, tq, tk}) : NULL;
    if (zli_requires_grad(q)) gin[0] = zli_new_f32(q->ndim, q->shape);
    if (zli_requires_grad(k)) gin[1] = zli_new_f32(k->ndim, k->shape);
    if (zli_requires_grad(v)) gin[2] = zli_new_f32(v->ndim, v->shape);
    zl_status st = ZL_OK;
    if (!ok || (need_ds && !ds) || (zli_requires_grad(q) && !gin[0]) || (zli_requires_grad(k) && !gin[1]) ||
        (zli_requires_grad(v) && !gin[2]))
        st = ZL_ENOMEM;
    float *pds = ds ? zl_tensor_data(ds) : NULL;
    float *gq = gin[0] ? zl_tensor_data(gin[0]) : NULL, *gk = gin[1] ? zl_tensor_data(gin[1]) : NULL;
    float *gv = gin[2] ? zl_tensor_data(gin[2]) : NULL;
    if (!st) {
        #pragma omp parallel for schedule(static) BATCH_PARALLEL(B, tq * tk * (d + dv))
        for (int64_t b = 0; b < B; b++) {
            const float *pb = pp + b * tq * tk, *gb = pg + b * tq * dv;
            if (gv)   /* dV [tk, dv] = Pᵀ · dO */
                zli_sgemm(true, false, tk, dv, tq, 1.0f, pb, tk, gb, dv, 0.0f, gv + b * tk * dv, dv);
            if (!need_ds) continue;
            /* dP [tq, tk] = dO · Vᵀ, then dS in place */
            float *db = pds + b * tq * tk;
            zli_sgemm(false, true, tq, tk, dv, 1.0f, gb, dv, bmat_at(&mv, b), mv.ld, 0.0f, db, tk);
            softmax_rows_backward(db, pb, tq, tk);
            if (gq)   /* dQ [tq, d] = dS · K · scale */
                zli_sgemm(false, false, tq, d, tk, scale, db, tk, bmat_at(&mk, b), mk.ld, 0.0f, gq + b * tq * d, d);
            if (gk)   /* dK [tk, d] = dSᵀ · Q · scale */
                zli_sgemm(true, false, tk, d, tq, scale, db, tk, bmat_at(&mq, b), mq.ld, 0.0f, gk + b * tk * d, d);
        }
    }
    bmat_done(&mq);
    bmat_done(&mk);
    bmat_done(&mv);
    zl_tensor_release(ds);
    return st;
}

static zl_status attention_check(const zl_tensor *q, const zl_tensor *k, const zl_tensor *v, bool causal)
{
    const char *op = "attention";
    if (zli_need_float(op, "query", q) || zli_need_float(op, "key", k) || zli_need_float(op, "value", v))
        return ZL_EDTYPE;
    const zl_tensor *ts[3] = {q, k, v};
    const char *roles[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; i++)
        if (ts[i]->ndim < 2) {
            char s[128];
            return zl_error(ZL_ESHAPE, "attention: %s must have at least 2 dims [..., T, D], got shape %s", roles[i],
                            zl_shape_str(ts[i]->ndim, ts[i]->shape, s, sizeof s));
        }
    int nb = q->ndim - 2;
    if (k->ndim != q->ndim || memcmp(k->shape, q->shape, (size_t)nb * sizeof *q->shape) != 0)
        return zli_shape_error(op, "query and key batch dimensions differ", q, k);
    if (v->ndim != q->ndim || memcmp(v->shape, q->shape, (size_t)nb * sizeof *q->shape) != 0)
        return zli_shape_error(op, "query and value batch dimensions differ", q, v);
    if (q->shape[nb + 1] != k->shape[nb + 1])
        return zli_shape_error(op, "query and key must have the same last dimension", q, k);
    if (k->shape[nb] != v->shape[nb])
        return zli_shape_error(op, "key and value must have the same number of positions (dimension -2)", k, v);
    if (causal && q->shape[nb] != k->shape[nb])
        return zli_shape_error(op, "causal attention needs as many queries as keys", q, k);
    return ZL_OK;
}

/* P [B, tq, tk] [out] and out [B, tq, dv] [out] on the host, the batches in
 * parallel. */
static zl_status attention_host(zl_tensor *const *in, bool causal, float scale, int64_t B, int64_t tq, int64_t tk,
                                int64_t d, int64_t dv, zl_tensor *p, zl_tensor *out)
{
    bmat mq = {0}, mk = {0}, mv = {0};
    zl_status st = bmat_of(in[0], &mq) && bmat_of(in[1], &mk) && bmat_of(in[2], &mv) ? ZL_OK : ZL_ENOMEM;
    if (!st) {
        float *pp = zl_tensor_data(p), *po = zl_tensor_data(out);
        #pragma omp parallel for schedule(static) BATCH_PARALLEL(B, tq * tk * (d + dv))
        for (int64_t b = 0; b < B; b++) {
            float *pb = pp + b * tq * tk;
            zli_sgemm(false, true, tq, tk, d, scale, bmat_at(&mq, b), mq.ld, bmat_at(&mk, b), mk.ld, 0.0f, pb, tk);
            softmax_rows(pb, tq, tq, tk, causal);
            zli_sgemm(false, false, tq, dv, tk, 1.0f, pb, tk, bmat_at(&mv, b), mv.ld, 0.0f, po + b * tq * dv, dv);
        }
    }
    bmat_done(&mq);
    bmat_done(&mk);
    bmat_done(&mv);
    return st;
}

/* The same on the device, each step one call for all batches: the scores'
 * GEMM (scale as its alpha), the rows' softmax, the values' GEMM. With q, k
 * and v all bf16 (or all f16) the GEMMs read them as they are, and P, kept
 * in f32 for the backward, is rounded to their dtype for the values' GEMM. */
static zl_status attention_device(const zli_dev_kernels *kern, int index, zl_tensor *const *in, bool causal,
                                  float scale, int64_t B, int64_t tq, int64_t tk, int64_t d, int64_t dv, zl_tensor *p,
                                  zl_tensor *out)
{
    zl_dtype dt = zli_dev_gemm_dtype(3, in);
    zl_tensor *qc = zli_contiguous_as_like(in[0], dt, p), *kc = zli_contiguous_as_like(in[1], dt, p);
    zl_tensor *vc = zli_contiguous_as_like(in[2], dt, p), *pc = NULL;
    zl_status st = qc && kc && vc ? ZL_OK : ZL_ENOMEM;
    float *pp = zl_tensor_data(p);
    if (!st)
        st = zli_dev_gemm(kern, index, dt, false, true, tq, tk, d, scale, zl_tensor_data(qc), d, tq * d,
                          zl_tensor_data(kc), d, tk * d, 0.0f, pp, tk, tq * tk, B);
    if (!st) st = kern->att_softmax(index, B * tq, tq, tk, causal, pp);
    if (!st && !(pc = zli_contiguous_as_like(p, dt, p))) st = ZL_ENOMEM;
    if (!st)
        st = zli_dev_gemm(kern, index, dt, false, false, tq, dv, tk, 1.0f, zl_tensor_data(pc), tk, tq * tk,
                          zl_tensor_data(vc), dv, tk * dv, 0.0f, zl_tensor_data(out), dv, tq * dv, B);
    zl_tensor *objs[] = {qc, kc, vc, pc};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return st;
}

zl_tensor *zl_attention(zl_tensor *q, zl_tensor *k, zl_tensor *v, bool causal, double scale)
{
    zl_tensor *in[3] = {q, k, v};
    const zli_dev_kernels *kern = NULL;
    int index = 0, on;
    if (zli_op_begin("attention", 3, in)) return NULL;
    if ((on = zli_op_device("attention", 3, in, &kern, &index)) < 0) return zli_op_end("attention", 3, in, NULL);
    if (attention_check(q, k, v, causal)) return zli_op_end("attention", 3, in, NULL);
    int nb = q->ndim - 2;
    int64_t tq = q->shape[nb], tk = k->shape[nb], d = q->shape[nb + 1], dv = v->shape[nb + 1];
    int64_t B = zli_numel(nb, q->shape);
    if (scale <= 0) scale = 1.0 / sqrt((double)d);
    int64_t oshape[ZL_MAX_DIMS];
    memcpy(oshape, v->shape, sizeof oshape);
    oshape[nb] = tq;
    const zl_tensor *home = zli_op_home(3, in);
    zl_tensor *p = zli_new_f32_like(home, 3, (int64_t[]){B, tq, tk});
    zl_tensor *out = p ? zli_new_f32_like(home, q->ndim, oshape) : NULL;
    zl_status st = !out ? ZL_ENOMEM
                   : on ? attention_device(kern, index, in, causal, (float)scale, B, tq, tk, d, dv, p, out)
                        : attention_host(in, causal, (float)scale, B, tq, tk, d, dv, p, out);
    if (st) {
        zl_tensor_release(out);
        out = NULL;
    }
    out = zli_cast_result(out, zli_promote(zli_promote(q->dtype, k->dtype), v->dtype));
    zl_node *n = NULL;
    if (out && zli_record(out, "attention", attention_backward, 3, in, &n)) { zl_tensor_release(out); out = NULL; }
    if (n) {
        n->f[0] = scale;
        n->i[A_B] = B; n->i[A_TQ] = tq; n->i[A_TK] = tk; n->i[A_D] = d; n->i[A_DV] = dv;
        if (zli_node_save(n, 0, p, false)) { zl_tensor_release(out); out = NULL; }
    }
    zl_tensor_release(p);
    return zli_op_end("attention", 3, in, out);
}
