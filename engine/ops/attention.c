/* attention: softmax(q kᵀ · scale, causal and boolean masks) v, forward and
 * backward, k and v perhaps with fewer heads than q (grouped-query
 * attention). Forward keeps the probabilities P [B, Tq, Tk] and backward
 * rebuilds dS from P. A table's fused attention runs it where it has one
 * (the CPU's, ops/cpu/attention.c); a table without (a GPU's) gets it
 * composed of strided-batched GEMMs, all batches at once, a group's query
 * heads one matrix of rows against their shared keys, unless its flash
 * kernels take the sizes: then P is never written, and forward keeps each
 * row's log-sum-exp and its output instead. */
#include <math.h>
#include <string.h>
#include "device_kernels.h"

/* The backward's GEMMs over all batches at once, dS [B, tq, tk] in one
 * scratch; P and g are on the device. A key/value head's g query heads are
 * one matrix of g * tq rows (q, g and P are contiguous, a group's heads
 * adjacent), so dK and dV sum their heads inside the GEMM. With q, k and v
 * all bf16 (or all f16) the GEMMs read their operands in that dtype, P, g and
 * dS rounded to it once each, as the forward's values' GEMM reads P; the
 * softmax's backward stays in f32. */
static zl_status attention_backward_composed(const zli_dev_kernels *kern, int index, zl_node *n, zl_tensor *g,
                                             zl_tensor **gin)
{
    zl_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    int64_t B = n->i[ZLI_ATT_B], tq = n->i[ZLI_ATT_TQ], tk = n->i[ZLI_ATT_TK], d = n->i[ZLI_ATT_D];
    int64_t dv = n->i[ZLI_ATT_DV], grp = n->i[ZLI_ATT_G];
    int64_t bk = B / grp, mq = grp * tq;
    float scale = (float)n->f[0];
    zl_dtype dt = zli_gemm_dtype(kern, 3, n->inputs);
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
        st = zli_dev_gemm(kern, index, dt, true, false, tk, dv, mq, 1.0f, zl_tensor_data(pc), tk, mq * tk, pg, dv,
                          mq * dv, 0.0f, zl_tensor_data(gin[2]), dv, tk * dv, bk);
    if (!st && need_ds)   /* dP [tq, tk] = dO · Vᵀ, then dS in place */
        st = zli_dev_gemm(kern, index, dt, false, true, mq, tk, dv, 1.0f, pg, dv, mq * dv, zl_tensor_data(vc), dv,
                          tk * dv, 0.0f, pds, tk, mq * tk, bk);
    if (!st && need_ds) st = kern->att_softmax_backward(index, B * tq, tk, pds, pp);
    if (!st && need_ds && !(dsc = zli_contiguous_as_like(ds, dt, g))) st = ZL_ENOMEM;
    const void *pdsc = dsc ? zl_tensor_data(dsc) : NULL;
    if (!st && gin[0])   /* dQ [tq, d] = dS · K · scale */
        st = zli_dev_gemm(kern, index, dt, false, false, mq, d, tk, scale, pdsc, tk, mq * tk, zl_tensor_data(kc), d,
                          tk * d, 0.0f, zl_tensor_data(gin[0]), d, mq * d, bk);
    if (!st && gin[1])   /* dK [tk, d] = dSᵀ · Q · scale */
        st = zli_dev_gemm(kern, index, dt, true, false, tk, d, mq, scale, pdsc, tk, mq * tk, zl_tensor_data(qc), d,
                          mq * d, 0.0f, zl_tensor_data(gin[1]), d, tk * d, bk);
    zl_tensor *objs[] = {qc, kc, vc, gc, pc, ds, dsc};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return st;
}

/* The flash kernels' backward: dO and the inputs in the forward's dtype, the
 * lse and output it saved; k's and v's gradients come from one kernel, so
 * both are made when either is wanted. */
static zl_status attention_backward_flash(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    if (zli_op_device("attention backward", 1, &g, &kern, &index) < 0) return zli_last_code();
    zl_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2], *lse = n->saved[0], *out = n->saved[1];
    zl_dtype dt = out->dtype;
    bool want_q = zli_requires_grad(q), want_kv = zli_requires_grad(k) || zli_requires_grad(v);
    zl_tensor *qc = zli_contiguous_as_like(q, dt, g), *kc = zli_contiguous_as_like(k, dt, g);
    zl_tensor *vc = zli_contiguous_as_like(v, dt, g), *oc = zli_contiguous_as_like(out, dt, g);
    zl_tensor *gc = zli_contiguous_as_like(g, dt, g);
    zl_tensor *delta = zli_new_f32_like(g, 1, (int64_t[]){n->i[ZLI_ATT_B] * n->i[ZLI_ATT_TQ]});
    zl_tensor *dq = want_q ? zli_new_f32_like(g, q->ndim, q->shape) : NULL;
    zl_tensor *dk = want_kv ? zli_new_f32_like(g, k->ndim, k->shape) : NULL;
    zl_tensor *dv = want_kv ? zli_new_f32_like(g, v->ndim, v->shape) : NULL;
    zl_status st = qc && kc && vc && oc && gc && delta && (dq || !want_q) && ((dk && dv) || !want_kv) ? ZL_OK
                                                                                                 : ZL_ENOMEM;
    if (!st)
        st = kern->flash_backward(index, (int)dt, n->i, n->i[ZLI_ATT_CAUSAL] != 0, (float)n->f[0], zl_tensor_data(qc),
                                  zl_tensor_data(kc), zl_tensor_data(vc), zl_tensor_data(oc), zl_tensor_data(gc),
                                  zl_tensor_data(lse), zl_tensor_data(delta), dq ? zl_tensor_data(dq) : NULL,
                                  dk ? zl_tensor_data(dk) : NULL, dv ? zl_tensor_data(dv) : NULL);
    if (!st) {
        gin[0] = dq;
        dq = NULL;
        if (zli_requires_grad(k)) { gin[1] = dk; dk = NULL; }
        if (zli_requires_grad(v)) { gin[2] = dv; dv = NULL; }
    }
    zl_tensor *objs[] = {qc, kc, vc, oc, gc, delta, dq, dk, dv};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return st;
}

/* A table's fused backward where it has one, else the composed one. */
static zl_status attention_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("attention backward", 1, &g, &k, &index) < 0) return zli_last_code();
    if (k->attention_backward) return k->attention_backward(index, n, g, gin);
    return attention_backward_composed(k, index, n, g, gin);
}

/* Shapes, dtypes and the mask; *grp [out]: query heads per key/value head. */
static zl_status attention_check(const zl_tensor *q, const zl_tensor *k, const zl_tensor *v, const zl_tensor *mask,
                                 bool causal, int64_t *grp)
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
    /* Dimension -3, the heads, may be smaller in k and v: heads is nb - 1, or -1 without one. */
    int nb = q->ndim - 2, heads = nb - 1;
    for (int i = 0; i < 2; i++) {
        const zl_tensor *t = ts[i + 1];
        bool same = t->ndim == q->ndim;
        for (int j = 0; same && j < nb; j++) same = j == heads || t->shape[j] == q->shape[j];
        if (!same) return zli_shape_error(op, i ? "query and value batch dimensions differ"
                                                : "query and key batch dimensions differ", q, t);
    }
    *grp = 1;
    if (heads >= 0 && k->shape[heads] != q->shape[heads]) {
        int64_t h = q->shape[heads], hkv = k->shape[heads];
        if (h == 0 || hkv == 0 || h % hkv != 0) {
            char sq[128], sk[128];
            return zl_error(ZL_ESHAPE,
                            "attention: the query's %lld heads (dimension -3) must be a positive multiple of the "
                            "key's %lld (shapes %s and %s)", (long long)h, (long long)hkv,
                            zl_shape_str(q->ndim, q->shape, sq, sizeof sq), zl_shape_str(k->ndim, k->shape, sk, sizeof sk));
        }
        *grp = h / hkv;
    }
    if (heads >= 0 && v->shape[heads] != k->shape[heads])
        return zli_shape_error(op, "key and value must have the same number of heads (dimension -3)", k, v);
    if (q->shape[nb + 1] != k->shape[nb + 1])
        return zli_shape_error(op, "query and key must have the same last dimension", q, k);
    if (k->shape[nb] != v->shape[nb])
        return zli_shape_error(op, "key and value must have the same number of positions (dimension -2)", k, v);
    if (causal && q->shape[nb] > k->shape[nb])
        return zli_shape_error(op, "causal attention needs at most as many queries as keys", q, k);
    if (!mask) return ZL_OK;
    if (mask->dtype != ZL_DTYPE_BOOL)
        return zl_error(ZL_EDTYPE, "attention: mask must be bool (true where a query may see a key), got %s",
                        zl_dtype_name(mask->dtype));
    bool fits = mask->ndim <= q->ndim;
    for (int i = 1; fits && i <= mask->ndim; i++) {
        int64_t want = i == 1 ? k->shape[nb] : i == 2 ? q->shape[nb] : q->shape[q->ndim - i];
        fits = mask->shape[mask->ndim - i] == want || mask->shape[mask->ndim - i] == 1;
    }
    if (fits) return ZL_OK;
    int64_t full[ZL_MAX_DIMS];
    memcpy(full, q->shape, sizeof full);
    full[nb + 1] = k->shape[nb];
    char sm[128], sf[128];
    return zl_error(ZL_ESHAPE, "attention: mask of shape %s does not broadcast to the scores' shape %s "
                    "[..., heads, queries, keys]", zl_shape_str(mask->ndim, mask->shape, sm, sizeof sm),
                    zl_shape_str(q->ndim, full, sf, sizeof sf));
}

/* The same composed of a table's GEMMs and att_softmax, each step one call
 * for all batches: the scores' GEMM (scale as its alpha), the rows' softmax
 * (the mask, in[3] or NULL, read where it lies once in the kernels' memory),
 * the values' GEMM, a key/value head's grp query heads as one matrix of grp
 * * tq rows. With q, k and v all bf16 (or all f16) the GEMMs read them as
 * they are, and P, kept in f32 for the backward, is rounded to their dtype
 * for the values' GEMM. The backward needs no mask: P is 0 where it hides. */
static zl_status attention_composed(const zli_dev_kernels *kern, int index, zl_tensor *const *in, bool causal,
                                    float scale, const int64_t *dims, zl_tensor *p, zl_tensor *out)
{
    zl_tensor *q = in[0], *mk = in[3] ? zli_copy_as_like(in[3], ZL_DTYPE_BOOL, p) : NULL;
    zlm_view mv = {0};
    if (mk) {
        int64_t full[ZL_MAX_DIMS], mstr[ZL_MAX_DIMS];
        memcpy(full, q->shape, sizeof full);
        full[q->ndim - 1] = dims[ZLI_ATT_TK];
        zli_bcast_strides(mk, q->ndim, full, mstr);
        mv = zlm_view_over(q->ndim, full, mstr);
    }
    int64_t B = dims[ZLI_ATT_B], grp = dims[ZLI_ATT_G], tq = dims[ZLI_ATT_TQ], tk = dims[ZLI_ATT_TK];
    int64_t d = dims[ZLI_ATT_D], dv = dims[ZLI_ATT_DV];
    zl_dtype dt = zli_gemm_dtype(kern, 3, in);
    int64_t bk = B / grp, mq = grp * tq;
    zl_tensor *qc = zli_contiguous_as_like(in[0], dt, p), *kc = zli_contiguous_as_like(in[1], dt, p);
    zl_tensor *vc = zli_contiguous_as_like(in[2], dt, p), *pc = NULL;
    zl_status st = qc && kc && vc ? ZL_OK : ZL_ENOMEM;
    float *pp = zl_tensor_data(p);
    if (!st)
        st = zli_dev_gemm(kern, index, dt, false, true, mq, tk, d, scale, zl_tensor_data(qc), d, mq * d,
                          zl_tensor_data(kc), d, tk * d, 0.0f, pp, tk, mq * tk, bk);
    if (!st && in[3] && !mk) st = ZL_ENOMEM;
    if (!st) st = kern->att_softmax(index, B * tq, tq, tk, causal, mk ? zl_tensor_data(mk) : NULL, &mv, pp);
    if (!st && !(pc = zli_contiguous_as_like(p, dt, p))) st = ZL_ENOMEM;
    if (!st)
        st = zli_dev_gemm(kern, index, dt, false, false, mq, dv, tk, 1.0f, zl_tensor_data(pc), tk, mq * tk,
                          zl_tensor_data(vc), dv, tk * dv, 0.0f, zl_tensor_data(out), dv, mq * dv, bk);
    zl_tensor *objs[] = {qc, kc, vc, pc, mk};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return st;
}

/* The table's flash kernels, for q, k and v all in dt (bf16 or f16): *out
 * [oshape] in dt and *lse [B, tq] f32, or both NULL when the kernels decline
 * these sizes. */
static zl_status attention_flash(const zli_dev_kernels *kern, int index, zl_tensor *const *in, bool causal,
                                 float scale, const int64_t *dims, zl_dtype dt, int ndim, const int64_t *oshape,
                                 zl_tensor **out, zl_tensor **lse)
{
    const zl_tensor *home = zli_op_home(3, in);
    zl_tensor *qc = zli_contiguous_as_like(in[0], dt, home), *kc = zli_contiguous_as_like(in[1], dt, home);
    zl_tensor *vc = zli_contiguous_as_like(in[2], dt, home);
    *out = zli_new_like(home, dt, ndim, oshape, ZL_MEM_ACTIVATIONS);
    *lse = zli_new_f32_like(home, 2, (int64_t[]){dims[ZLI_ATT_B], dims[ZLI_ATT_TQ]});
    bool done = false;
    zl_status st = qc && kc && vc && *out && *lse ? ZL_OK : ZL_ENOMEM;
    if (!st)
        st = kern->flash_forward(index, (int)dt, dims, causal, scale, zl_tensor_data(qc), zl_tensor_data(kc),
                                 zl_tensor_data(vc), zl_tensor_data(*out), zl_tensor_data(*lse), &done);
    if (st || !done) {
        zl_tensor_release(*out);
        zl_tensor_release(*lse);
        *out = *lse = NULL;
    }
    zl_tensor *objs[] = {qc, kc, vc};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return st;
}

zl_tensor *zl_attention(zl_tensor *q, zl_tensor *k, zl_tensor *v, bool causal, double scale)
{
    return zl_attention_masked(q, k, v, NULL, causal, scale);
}

/* The CPU's fused attention reads a mask in host memory; a composed one
 * takes it wherever it is, and moves it where the kernels run. */
zl_tensor *zl_attention_masked(zl_tensor *q, zl_tensor *k, zl_tensor *v, zl_tensor *mask, bool causal,
                               double scale)
{
    const char *op = "attention";
    zl_tensor *in[4] = {q, k, v, mask};
    int nin = mask ? 4 : 3;
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    int64_t grp = 1;
    if (zli_op_begin(op, nin, in)) return NULL;
    if (zli_op_device(op, 3, in, &kern, &index) < 0) return zli_op_end(op, nin, in, NULL);
    if ((mask && kern->attention && zli_need_host(op, "mask", mask)) || attention_check(q, k, v, mask, causal, &grp))
        return zli_op_end(op, nin, in, NULL);
    if (!(scale >= 0) || isinf(scale)) {
        zl_error(ZL_EINVAL, "attention: scale must be finite and positive (0 for 1/sqrt(D)), got %g", scale);
        return zli_op_end(op, nin, in, NULL);
    }
    int nb = q->ndim - 2;
    int64_t tq = q->shape[nb], tk = k->shape[nb], d = q->shape[nb + 1], dv = v->shape[nb + 1];
    int64_t B = zli_numel(nb, q->shape);
    if (scale == 0) scale = 1.0 / sqrt((double)d);
    int64_t dims[ZLI_ATT_CAUSAL];
    dims[ZLI_ATT_B] = B; dims[ZLI_ATT_TQ] = tq; dims[ZLI_ATT_TK] = tk;
    dims[ZLI_ATT_D] = d; dims[ZLI_ATT_DV] = dv; dims[ZLI_ATT_G] = grp;
    int64_t oshape[ZL_MAX_DIMS];
    memcpy(oshape, q->shape, sizeof oshape);
    oshape[nb + 1] = dv;
    /* p: the probabilities [B, tq, tk] f32, or the flash kernels' lse [B, tq] */
    zl_tensor *p = NULL, *out = NULL;
    zl_dtype dt = zli_gemm_dtype(kern, 3, in);
    zl_status st = ZL_OK;
    if (!mask && !kern->attention && kern->flash_forward && dt != ZL_DTYPE_F32)
        st = attention_flash(kern, index, in, causal, (float)scale, dims, dt, q->ndim, oshape, &out, &p);
    bool flash = out != NULL;
    if (!st && !flash) {
        const zl_tensor *home = zli_op_home(3, in);
        p = zli_new_f32_like(home, 3, (int64_t[]){B, tq, tk});
        out = p ? zli_new_f32_like(home, q->ndim, oshape) : NULL;
        st = !out            ? ZL_ENOMEM
             : kern->attention ? kern->attention(index, in, mask, causal, (float)scale, dims, p, out)
                               : attention_composed(kern, index, in, causal, (float)scale, dims, p, out);
    }
    if (st) {
        zl_tensor_release(out);
        out = NULL;
    }
    out = zli_cast_result(out, zli_promote(zli_promote(q->dtype, k->dtype), v->dtype));
    zl_node *n = NULL;
    if (out && zli_record(out, op, flash ? attention_backward_flash : attention_backward, 3, in, &n)) {
        zl_tensor_release(out);
        out = NULL;
    }
    if (n) {
        n->f[0] = scale;
        n->i[ZLI_ATT_B] = B; n->i[ZLI_ATT_TQ] = tq; n->i[ZLI_ATT_TK] = tk; n->i[ZLI_ATT_D] = d; n->i[ZLI_ATT_DV] = dv;
        n->i[ZLI_ATT_G] = grp; n->i[ZLI_ATT_CAUSAL] = causal;
        if (zli_node_save(n, 0, p, false) || (flash && zli_node_save(n, 1, out, true))) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor_release(p);
    return zli_op_end(op, nin, in, out);
}
