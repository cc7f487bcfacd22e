/* The CPU's fused attention: the query heads run in parallel, each one's
 * GEMMs single-threaded, reading q, k and v where they lie (a head sliced
 * out of a fused qkv is a strided view, not a copy) and a head's keys and
 * values where its group's are; causal products go in blocks of rows, each
 * block's GEMMs stopping at the last key its rows see. */
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

/* The CPU's fused backward (ops/cpu/kernels.h), in two parallel passes: per
 * query head dS and dQ, then per key/value head dK and dV, each the sum over
 * its query heads and row blocks in a fixed order (the GEMMs accumulating
 * into it), so no sum depends on timing. The first block summed is the
 * last, which sees every key. */
zl_status zli_cpu_attention_backward(int index, zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    (void)index;
    zl_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    int64_t B = n->i[ZLI_ATT_B], tq = n->i[ZLI_ATT_TQ], tk = n->i[ZLI_ATT_TK], d = n->i[ZLI_ATT_D];
    int64_t dv = n->i[ZLI_ATT_DV], grp = n->i[ZLI_ATT_G];
    bool causal = n->i[ZLI_ATT_CAUSAL];
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

/* The CPU's fused forward (ops/cpu/kernels.h): P [B, tq, tk] [out] and out
 * [B, tq, dv] [out], the batches in parallel, query head b reading
 * key/value head b / grp, in row blocks of the GEMMs with the mask read
 * where it lies. A causal block's rows of P are written only as far as the
 * block's keys, all the backward reads. */
zl_status zli_cpu_attention(int index, zl_tensor *const *in, const zl_tensor *mask, bool causal, float scale,
                            const int64_t *dims, zl_tensor *p, zl_tensor *out)
{
    (void)index;
    int64_t B = dims[ZLI_ATT_B], grp = dims[ZLI_ATT_G], tq = dims[ZLI_ATT_TQ], tk = dims[ZLI_ATT_TK];
    int64_t d = dims[ZLI_ATT_D], dv = dims[ZLI_ATT_DV];
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
