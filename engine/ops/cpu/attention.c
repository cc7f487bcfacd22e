/* attention: softmax(q kᵀ · scale, causal and boolean masks) v, forward and
 * backward, k and v perhaps with fewer heads than q (grouped-query
 * attention). Forward keeps the probabilities P [B, Tq, Tk] and backward
 * rebuilds dS from P. On the host the query heads run in parallel, each one's
 * GEMMs single-threaded, reading q, k and v where they lie (a head sliced out
 * of a fused qkv is a strided view, not a copy) and a head's keys and values
 * where its group's are; causal products go in blocks of rows, each block's
 * GEMMs stopping at the last key its rows see: the CPU's fused kernels. A
 * table without them (a GPU's) runs the same steps as strided-batched GEMMs,
 * all batches at once, a group's query heads one matrix of rows against
 * their shared keys. */
#include <math.h>
#include <string.h>
#include "gemm.h"
#include "kernels.h"
#include "../../math/attention.h"

/* Rows per block of a causal product on the host: a square causal attention
 * then skips (1 - 1/blocks) / 2 of the work above the diagonal. */
#define CAUSAL_ROWS 64

/* Offset of matrix b of a batch of shape [nb] laid out with strides [nb]. */
static int64_t batch_offset(int nb, const int64_t *shape, const int64_t *stride, int64_t b)
{
    int64_t off = 0;
    for (int i = nb - 1; i >= 0; i--) {
        off += b % shape[i] * stride[i];
        b /= shape[i];
    }
    return off;
}

/* A bool mask broadcast to [batch..., tq, tk]: batch b's query i may see key
 * j where base[batch_offset(b) + i * sq + j * sk] is non-zero; base NULL
 * when there is no mask. */
typedef struct {
    const uint8_t *base;
    int nb;
    int64_t shape[ZL_MAX_DIMS], stride[ZL_MAX_DIMS];
    int64_t sq, sk;
} amask;

/* The largest of s[0..n), as zlm_attention_max finds it but vectorised: a
 * NaN, which that one never takes, makes its row NaN either way. */
static float row_max(const float *restrict s, int64_t n)
{
    float m = -INFINITY;
    #pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

/* s [r1 - r0, tk] [in/out]: the first n keys of rows r0..r1 of one batch's
 * scores to probabilities, n being what the block's last row sees (the keys
 * past it are never read). Query i sees its first zlm_attention_limit keys
 * where its mask row (m + i * sq, keys sk apart; m NULL: no mask) allows;
 * the rest get 0, and a row that sees no key is all 0. Called from a thread
 * of the batches' loop. */
static void softmax_rows(float *restrict s, int64_t r0, int64_t r1, int64_t tq, int64_t tk, int64_t n, bool causal,
                         const uint8_t *m, int64_t sq, int64_t sk)
{
    for (int64_t i = r0; i < r1; i++) {
        float *row = s + (i - r0) * tk;
        int64_t lim = zlm_attention_limit(i, tq, tk, causal);
        if (!m) {
            zlm_attention_softmax_row_max(row, row_max(row, lim), lim, n);
            continue;
        }
        const uint8_t *mr = m + i * sq;
        float mx = -INFINITY;
        bool any = false;
        for (int64_t j = 0; j < lim; j++)
            if (mr[j * sk]) {
                any = true;
                mx = row[j] > mx ? row[j] : mx;
            }
        if (!any) {
            memset(row, 0, (size_t)n * sizeof *row);
            continue;
        }
        /* A hidden key's score may top mx: its exp is computed and dropped. */
        for (int64_t j = 0; j < lim; j++) row[j] = mr[j * sk] ? zlm_attention_exp(row[j], mx) : 0.0f;
        float inv = 1.0f / zlm_attention_sum(row, NULL, lim);
        for (int64_t j = 0; j < lim; j++) row[j] *= inv;
        for (int64_t j = lim; j < n; j++) row[j] = 0.0f;
    }
}

/* dp [rows, tk] [in/out]: the first lim keys of each row from dP to dS; p
 * [rows, tk] is 0 from lim on, where dp is not read. */
static void softmax_rows_backward(float *restrict dp, const float *restrict p, int64_t rows, int64_t lim,
                                  int64_t tk)
{
    for (int64_t r = 0; r < rows; r++) zlm_attention_softmax_row_backward(dp + r * tk, p + r * tk, lim);
}

/* n->i: batches (query heads) B, positions tq and tk, widths d and dv, query
 * heads per key/value head, causal. */
enum { A_B, A_TQ, A_TK, A_D, A_DV, A_G, A_CAUSAL };

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
    return t->dtype == ZL_DTYPE_F32 && (t->stride[nb + 1] == 1 || cols == 1) &&
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

static const float *bmat_at(const bmat *m, int64_t b) { return m->base + batch_offset(m->nb, m->shape, m->stride, b); }

static void bmat_done(bmat *m) { zl_tensor_release(m->owner); }

/* Batches in parallel when there is more than one and enough work. */
#define BATCH_PARALLEL(B, work) if ((B) > 1 && (B) * (work) > ZLI_PAR_MIN)

/* Rows per block of one batch's products: all of them, or CAUSAL_ROWS. */
static int64_t block_rows(bool causal, int64_t tq) { return causal ? CAUSAL_ROWS : tq > 0 ? tq : 1; }
/* Keys a block of rows ending before row r1 reads: those its last row sees. */
static int64_t block_keys(int64_t r1, int64_t tq, int64_t tk, bool causal)
{
    return zlm_attention_limit(r1 - 1, tq, tk, causal);
}

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
    int64_t B = n->i[A_B], tq = n->i[A_TQ], tk = n->i[A_TK], d = n->i[A_D], dv = n->i[A_DV], grp = n->i[A_G];
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

/* The CPU's fused backward (ops/cpu/kernels.h), in two parallel passes: per
 * query head dS and dQ, then per key/value head dK and dV, each the sum over
 * its query heads and row blocks in a fixed order (the GEMMs accumulating
 * into it), so no sum depends on timing. The first block summed is the
 * last, which sees every key. */
zl_status zli_cpu_attention_backward(int index, zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    (void)index;
    zl_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    int64_t B = n->i[A_B], tq = n->i[A_TQ], tk = n->i[A_TK], d = n->i[A_D], dv = n->i[A_DV], grp = n->i[A_G];
    bool causal = n->i[A_CAUSAL];
    float scale = (float)n->f[0];
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
    int64_t rb = block_rows(causal, tq), last = tq > 0 ? (tq - 1) / rb * rb : 0, bk = B / grp;
    if (!st && need_ds) {
        #pragma omp parallel for schedule(static) BATCH_PARALLEL(B, tq * tk * (d + dv))
        for (int64_t b = 0; b < B; b++) {
            const float *pb = pp + b * tq * tk, *gb = pg + b * tq * dv;
            const float *kb = bmat_at(&mk, b / grp), *vb = bmat_at(&mv, b / grp);
            float *db = pds + b * tq * tk;
            for (int64_t r0 = 0; r0 < tq; r0 += rb) {
                int64_t r1 = r0 + rb < tq ? r0 + rb : tq, lim = block_keys(r1, tq, tk, causal);
                /* dP [rows, lim] = dO · Vᵀ, then dS in place */
                zli_sgemm(false, true, r1 - r0, lim, dv, 1.0f, gb + r0 * dv, dv, vb, mv.ld, 0.0f, db + r0 * tk, tk);
                softmax_rows_backward(db + r0 * tk, pb + r0 * tk, r1 - r0, lim, tk);
                if (gq)   /* dQ [rows, d] = dS · K · scale */
                    zli_sgemm(false, false, r1 - r0, d, lim, scale, db + r0 * tk, tk, kb, mk.ld, 0.0f,
                              gq + (b * tq + r0) * d, d);
            }
        }
    }
    if (!st && (gk || gv)) {
        #pragma omp parallel for schedule(static) BATCH_PARALLEL(2 * bk, grp * tq * tk * (d + dv) / 2)
        for (int64_t t = 0; t < 2 * bk; t++) {
            bool is_v = t % 2 == 0;
            int64_t c = t / 2, w = is_v ? dv : d;
            float *out = is_v ? gv : gk;
            if (!out) continue;
            out += c * tk * w;
            if (tq == 0) memset(out, 0, (size_t)(tk * w) * sizeof *out);
            float beta = 0.0f;
            for (int64_t b = c * grp; b < (c + 1) * grp; b++)
                for (int64_t r0 = last; r0 >= 0 && tq > 0; r0 -= rb) {
                    int64_t r1 = r0 + rb < tq ? r0 + rb : tq, lim = block_keys(r1, tq, tk, causal);
                    if (is_v)   /* dV [lim, dv] += Pᵀ · dO */
                        zli_sgemm(true, false, lim, dv, r1 - r0, 1.0f, pp + (b * tq + r0) * tk, tk,
                                  pg + (b * tq + r0) * dv, dv, beta, out, dv);
                    else   /* dK [lim, d] += dSᵀ · Q · scale */
                        zli_sgemm(true, false, lim, d, r1 - r0, scale, pds + (b * tq + r0) * tk, tk,
                                  bmat_at(&mq, b) + r0 * mq.ld, mq.ld, beta, out, d);
                    beta = 1.0f;
                }
        }
    }
    bmat_done(&mq);
    bmat_done(&mk);
    bmat_done(&mv);
    zl_tensor_release(ds);
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

/* The CPU's fused forward (ops/cpu/kernels.h): P [B, tq, tk] [out] and out
 * [B, tq, dv] [out], the batches in parallel, query head b reading
 * key/value head b / grp, in row blocks of the GEMMs with the mask read
 * where it lies. A causal block's rows of P are written only as far as the
 * block's keys, all the backward reads. */
zl_status zli_cpu_attention(int index, zl_tensor *const *in, const zl_tensor *mask, bool causal, float scale,
                            const int64_t *dims, zl_tensor *p, zl_tensor *out)
{
    (void)index;
    int64_t B = dims[A_B], grp = dims[A_G], tq = dims[A_TQ], tk = dims[A_TK], d = dims[A_D], dv = dims[A_DV];
    zl_tensor *q = in[0];
    int nb = q->ndim - 2;
    amask am = {0};
    if (mask) {
        int64_t full[ZL_MAX_DIMS], mstr[ZL_MAX_DIMS];
        memcpy(full, q->shape, sizeof full);
        full[nb + 1] = tk;
        zli_bcast_strides(mask, q->ndim, full, mstr);
        am.base = zl_tensor_data(mask);
        am.nb = nb;
        memcpy(am.shape, q->shape, sizeof am.shape);
        memcpy(am.stride, mstr, sizeof am.stride);
        am.sq = mstr[nb];
        am.sk = mstr[nb + 1];
    }
    bmat mq = {0}, mk = {0}, mv = {0};
    zl_status st = bmat_of(in[0], &mq) && bmat_of(in[1], &mk) && bmat_of(in[2], &mv) ? ZL_OK : ZL_ENOMEM;
    int64_t rb = block_rows(causal, tq);
    if (!st) {
        float *pp = zl_tensor_data(p), *po = zl_tensor_data(out);
        #pragma omp parallel for schedule(static) BATCH_PARALLEL(B, tq * tk * (d + dv))
        for (int64_t b = 0; b < B; b++) {
            const float *qb = bmat_at(&mq, b), *kb = bmat_at(&mk, b / grp), *vb = bmat_at(&mv, b / grp);
            const uint8_t *mb = am.base ? am.base + batch_offset(am.nb, am.shape, am.stride, b) : NULL;
            float *pb = pp + b * tq * tk, *ob = po + b * tq * dv;
            for (int64_t r0 = 0; r0 < tq; r0 += rb) {
                int64_t r1 = r0 + rb < tq ? r0 + rb : tq, lim = block_keys(r1, tq, tk, causal);
                float *s = pb + r0 * tk;
                zli_sgemm(false, true, r1 - r0, lim, d, scale, qb + r0 * mq.ld, mq.ld, kb, mk.ld, 0.0f, s, tk);
                softmax_rows(s, r0, r1, tq, tk, lim, causal, mb, am.sq, am.sk);
                zli_sgemm(false, false, r1 - r0, dv, lim, 1.0f, s, tk, vb, mv.ld, 0.0f, ob + r0 * dv, dv);
            }
        }
    }
    bmat_done(&mq);
    bmat_done(&mk);
    bmat_done(&mv);
    return st;
}

/* The same composed of a table's GEMMs and att_softmax, each step one call
 * for all batches: the scores' GEMM (scale as its alpha), the rows' softmax,
 * the values' GEMM, a key/value head's grp query heads as one matrix of grp
 * * tq rows. With q, k and v all bf16 (or all f16) the GEMMs read them as
 * they are, and P, kept in f32 for the backward, is rounded to their dtype
 * for the values' GEMM. */
static zl_status attention_composed(const zli_dev_kernels *kern, int index, zl_tensor *const *in, bool causal,
                                    float scale, const int64_t *dims, zl_tensor *p, zl_tensor *out)
{
    int64_t B = dims[A_B], grp = dims[A_G], tq = dims[A_TQ], tk = dims[A_TK], d = dims[A_D], dv = dims[A_DV];
    zl_dtype dt = zli_gemm_dtype(kern, 3, in);
    int64_t bk = B / grp, mq = grp * tq;
    zl_tensor *qc = zli_contiguous_as_like(in[0], dt, p), *kc = zli_contiguous_as_like(in[1], dt, p);
    zl_tensor *vc = zli_contiguous_as_like(in[2], dt, p), *pc = NULL;
    zl_status st = qc && kc && vc ? ZL_OK : ZL_ENOMEM;
    float *pp = zl_tensor_data(p);
    if (!st)
        st = zli_dev_gemm(kern, index, dt, false, true, mq, tk, d, scale, zl_tensor_data(qc), d, mq * d,
                          zl_tensor_data(kc), d, tk * d, 0.0f, pp, tk, mq * tk, bk);
    if (!st) st = kern->att_softmax(index, B * tq, tq, tk, causal, pp);
    if (!st && !(pc = zli_contiguous_as_like(p, dt, p))) st = ZL_ENOMEM;
    if (!st)
        st = zli_dev_gemm(kern, index, dt, false, false, mq, dv, tk, 1.0f, zl_tensor_data(pc), tk, mq * tk,
                          zl_tensor_data(vc), dv, tk * dv, 0.0f, zl_tensor_data(out), dv, mq * dv, bk);
    zl_tensor *objs[] = {qc, kc, vc, pc};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return st;
}

zl_tensor *zl_attention(zl_tensor *q, zl_tensor *k, zl_tensor *v, bool causal, double scale)
{
    return zl_attention_masked(q, k, v, NULL, causal, scale);
}

/* A table without a fused attention (a GPU's) composes it of kernels that
 * know no mask: a masked attention needs the fused one. */
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
    if (mask && !kern->attention) {
        char where[32];
        const zl_tensor *home = zli_op_home(3, in);
        zl_device_str(zl_tensor_device(home), zl_tensor_device_index(home), where, sizeof where);
        zl_error(ZL_EDEVICE, "attention: a mask is not supported for tensors on %s yet (compute it on the CPU)", where);
        return zli_op_end(op, nin, in, NULL);
    }
    if ((mask && zli_need_host(op, "mask", mask)) || attention_check(q, k, v, mask, causal, &grp))
        return zli_op_end(op, nin, in, NULL);
    if (!(scale >= 0) || isinf(scale)) {
        zl_error(ZL_EINVAL, "attention: scale must be finite and positive (0 for 1/sqrt(D)), got %g", scale);
        return zli_op_end(op, nin, in, NULL);
    }
    int nb = q->ndim - 2;
    int64_t tq = q->shape[nb], tk = k->shape[nb], d = q->shape[nb + 1], dv = v->shape[nb + 1];
    int64_t B = zli_numel(nb, q->shape);
    if (scale == 0) scale = 1.0 / sqrt((double)d);
    int64_t dims[A_CAUSAL];
    dims[A_B] = B; dims[A_TQ] = tq; dims[A_TK] = tk; dims[A_D] = d; dims[A_DV] = dv; dims[A_G] = grp;
    int64_t oshape[ZL_MAX_DIMS];
    memcpy(oshape, q->shape, sizeof oshape);
    oshape[nb + 1] = dv;
    const zl_tensor *home = zli_op_home(3, in);
    zl_tensor *p = zli_new_f32_like(home, 3, (int64_t[]){B, tq, tk});
    zl_tensor *out = p ? zli_new_f32_like(home, q->ndim, oshape) : NULL;
    zl_status st = !out            ? ZL_ENOMEM
                   : kern->attention ? kern->attention(index, in, mask, causal, (float)scale, dims, p, out)
                                     : attention_composed(kern, index, in, causal, (float)scale, dims, p, out);
    if (st) {
        zl_tensor_release(out);
        out = NULL;
    }
    out = zli_cast_result(out, zli_promote(zli_promote(q->dtype, k->dtype), v->dtype));
    zl_node *n = NULL;
    if (out && zli_record(out, op, attention_backward, 3, in, &n)) { zl_tensor_release(out); out = NULL; }
    if (n) {
        n->f[0] = scale;
        n->i[A_B] = B; n->i[A_TQ] = tq; n->i[A_TK] = tk; n->i[A_D] = d; n->i[A_DV] = dv;
        n->i[A_G] = grp; n->i[A_CAUSAL] = causal;
        if (zli_node_save(n, 0, p, false)) { zl_tensor_release(out); out = NULL; }
    }
    zl_tensor_release(p);
    return zli_op_end(op, nin, in, out);
}
