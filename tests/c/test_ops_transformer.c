/* The ops of a LLaMA block: rms_norm, rotary and attention's grouped-query
 * heads, boolean mask and causal cut with fewer queries than keys. Forward
 * against plain double references written here, gradients against finite
 * differences, bf16, thread-count determinism and every bad input. */
#include <stdlib.h>
#include "gradcheck.h"

#define GC_H 1e-3
#define GC_TOL 1e-2

static zl_tensor *leaf(zl_dtype dt, int ndim, const int64_t *shape)
{
    zl_tensor *r = zt_randn(ndim, shape);
    zl_tensor *t = dt == ZL_DTYPE_F32 ? zl_tensor_retain(r) : zl_tensor_to(r, dt);
    zl_tensor_release(r);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

static double *values(const zl_tensor *t)
{
    int64_t n = zl_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    zl_tensor_to_f64(t, v);
    return v;
}

static double round_bf16(double v) { return zl_bf16_to_f32(zl_f32_to_bf16((float)v)); }

/* ---- rms_norm ---- */

/* y = round(x / sqrt(mean(x²) + eps)) * w, rows of m; round: to bf16 or not. */
static void ref_rms_norm(const double *x, int64_t rows, int64_t m, const double *w, double eps, bool bf16,
                         double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t j = 0; j < m; j++) ss += x[r * m + j] * x[r * m + j];
        double rs = 1.0 / sqrt(ss / (double)m + eps);
        for (int64_t j = 0; j < m; j++) {
            double n = x[r * m + j] * rs;
            y[r * m + j] = (bf16 ? round_bf16(n) : n) * (w ? w[j] : 1.0);
        }
    }
}

typedef struct { int ndim; int64_t shape[4]; int nnorm; bool w; } rms_case;

static const rms_case rms_cases[] = {
    {2, {4, 6}, 1, true}, {3, {2, 3, 4}, 2, true}, {3, {2, 3, 4}, 1, false}, {1, {8}, 1, true},
    {2, {40, 3}, 1, true},   /* more rows than a backward chunk */
};

typedef struct { int nnorm; bool w; double eps; } rms_ctx;

static zl_tensor *rms_fn(zl_tensor **in, void *ctx)
{
    rms_ctx *c = ctx;
    return zl_rms_norm(in[0], c->nnorm, c->w ? in[1] : NULL, c->eps);
}

TEST(rms_norm_forward_and_gradients)
{
    for (size_t c = 0; c < sizeof rms_cases / sizeof rms_cases[0]; c++) {
        rms_case k = rms_cases[c];
        const int64_t *tail = k.shape + k.ndim - k.nnorm;
        zl_tensor *in[2] = {leaf(ZL_DTYPE_F32, k.ndim, k.shape), k.w ? leaf(ZL_DTYPE_F32, k.nnorm, tail) : NULL};
        int nin = k.w ? 2 : 1;
        int64_t m = 1;
        for (int i = 0; i < k.nnorm; i++) m *= tail[i];
        rms_ctx ctx = {k.nnorm, k.w, 1e-6};
        double *x = values(in[0]), *w = k.w ? values(in[1]) : NULL;
        double *ref = malloc((size_t)zl_tensor_numel(in[0]) * sizeof *ref);
        ref_rms_norm(x, zl_tensor_numel(in[0]) / m, m, w, 1e-6, false, ref);
        zl_tensor *y = rms_fn(in, &ctx);
        CHECK(y && zl_tensor_ndim(y) == k.ndim && zl_tensor_dtype(y) == ZL_DTYPE_F32);
        if (y) zt_check_values("rms_norm", y, ref, 1e-5);
        zl_tensor_release(y);
        zt_gradcheck("rms_norm", rms_fn, &ctx, nin, in, GC_H, GC_TOL);
        free(x); free(w); free(ref);
        for (int i = 0; i < nin; i++) zl_tensor_release(in[i]);
    }
}

/* bf16 x: the normalised x is rounded to bf16 before the weight multiplies
 * it; the result's dtype is x's and the weight's promoted (f32 for an f32
 * weight, bf16 for a bf16 one), and the gradients come in their inputs' dtypes. */
TEST(rms_norm_bf16)
{
    zl_tensor *xb = leaf(ZL_DTYPE_BF16, SHAPE(3, 8)), *w = leaf(ZL_DTYPE_F32, SHAPE(8));
    zl_tensor *wb = zl_tensor_to(w, ZL_DTYPE_BF16);
    double *x = values(xb), *wv = values(w), *wbv = values(wb), ref[24];
    ref_rms_norm(x, 3, 8, wv, 1e-6, true, ref);
    zl_tensor *y = zl_rms_norm(xb, 1, w, 1e-6);
    CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_F32);
    if (y) zt_check_values("rms_norm bf16 x, f32 weight", y, ref, 1e-6);
    ref_rms_norm(x, 3, 8, wbv, 1e-6, true, ref);
    zl_tensor *yb = zl_rms_norm(xb, 1, wb, 1e-6);
    CHECK(yb && zl_tensor_dtype(yb) == ZL_DTYPE_BF16);
    if (yb) zt_check_values("rms_norm bf16", yb, ref, 1e-2);
    zl_tensor *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(s && zl_backward(s, NULL, false) == ZL_OK);
    CHECK(zl_tensor_grad(xb) && zl_tensor_dtype(zl_tensor_grad(xb)) == ZL_DTYPE_BF16);
    CHECK(zl_tensor_grad(w) && zl_tensor_dtype(zl_tensor_grad(w)) == ZL_DTYPE_F32);
    /* The weight's gradient sums the rounded normalised x, as HF's autograd does. */
    for (int64_t j = 0; j < 8 && zl_tensor_grad(w); j++) {
        double want = 0;
        for (int64_t r = 0; r < 3; r++) want += ref[r * 8 + j] / wbv[j];
        CHECK_CLOSE(zl_tensor_get(zl_tensor_grad(w), j), want, 1e-2);
    }
    free(x); free(wv); free(wbv);
    zl_tensor *all[] = {s, y, yb, wb, w, xb};
    for (int i = 0; i < 6; i++) zl_tensor_release(all[i]);
}

/* The weight gradient's partial sums go in fixed chunks of rows: the same
 * bits with one thread and with two, on a size that goes parallel. */
TEST(rms_norm_threads_and_errors)
{
    zl_tensor *xl = leaf(ZL_DTYPE_F32, SHAPE(300, 512)), *wl = leaf(ZL_DTYPE_F32, SHAPE(512));
    zl_tensor *gout = zt_randn(SHAPE(300, 512));
    double *grads[2][2];
    int saved = zl_get_num_threads();
    for (int run = 0; run < 2; run++) {
        zl_set_num_threads(run + 1);
        zl_tensor *yl = zl_rms_norm(xl, 1, wl, 1e-6);
        CHECK(yl && zl_backward(yl, gout, false) == ZL_OK);
        zl_tensor *ps[2] = {xl, wl};
        for (int k = 0; k < 2; k++) {
            grads[run][k] = values(zl_tensor_grad(ps[k]));
            zl_tensor_set_grad(ps[k], NULL);
        }
        zl_tensor_release(yl);
    }
    zl_set_num_threads(saved);
    CHECK(memcmp(grads[0][0], grads[1][0], 300 * 512 * sizeof(double)) == 0);
    CHECK(memcmp(grads[0][1], grads[1][1], 512 * sizeof(double)) == 0);
    for (int run = 0; run < 2; run++) free(grads[run][0]), free(grads[run][1]);

    zl_tensor *x2 = zt_randn(SHAPE(3, 4)), *w5 = zt_randn(SHAPE(5));
    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 4);
    CHECK_ERR(zl_rms_norm(x2, 3, NULL, 1e-6),
              "rms_norm: cannot normalise over the last 3 dims of an input of shape [3, 4] (expected 1..2)");
    CHECK_ERR(zl_rms_norm(x2, 0, NULL, 1e-6), "rms_norm: cannot normalise over the last 0 dims");
    CHECK_ERR(zl_rms_norm(x2, 1, w5, 1e-6),
              "rms_norm: weight must have shape [4], the last 1 dims of the input [3, 4]; got [5]");
    CHECK_ERR(zl_rms_norm(x2, 1, NULL, -1.0), "rms_norm: eps must be finite and >= 0, got -1");
    CHECK_ERR(zl_rms_norm(x2, 1, NULL, NAN), "rms_norm: eps must be finite and >= 0, got nan");
    CHECK_ERR(zl_rms_norm(i, 1, NULL, 1e-6), "rms_norm: input must be a float tensor");
    CHECK_ERR(zl_rms_norm(x2, 1, i, 1e-6), "rms_norm: weight must be a float tensor");
    zl_tensor *all[] = {xl, wl, gout, x2, w5, i};
    for (int k = 0; k < 6; k++) zl_tensor_release(all[k]);
}

/* ---- rotary ---- */

/* x [B, H, T, D] (values in logical order), cos and sin [cb, T, D] with cb 1
 * or B (broadcast over heads): y = x cos + rotate_half(x) sin. */
static void ref_rotary(int64_t B, int64_t H, int64_t T, int64_t D, const double *x, int64_t cb, const double *c,
                       const double *s, double *y)
{
    int64_t h = D / 2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++) {
                const double *xr = x + ((b * H + hh) * T + t) * D;
                int64_t co = ((cb > 1 ? b : 0) * T + t) * D;
                for (int64_t j = 0; j < D; j++) {
                    double rot = j < h ? -xr[j + h] : xr[j - h];
                    y[((b * H + hh) * T + t) * D + j] = xr[j] * c[co + j] + rot * s[co + j];
                }
            }
}

/* in[0]: x, or with `strided` x [B, T, H, D] read as [B, H, T, D] through a
 * transposed view, as a query sliced out of a projection is. */
typedef struct { bool strided; zl_tensor *cos, *sin; } rot_ctx;

static zl_tensor *rot_fn(zl_tensor **in, void *ctx)
{
    rot_ctx *c = ctx;
    if (!c->strided) return zl_rotary(in[0], c->cos, c->sin);
    zl_tensor *xt = zl_tensor_transpose(in[0], 1, 2);
    zl_tensor *y = zl_rotary(xt, c->cos, c->sin);
    zl_tensor_release(xt);
    return y;
}

TEST(rotary_forward_and_gradients)
{
    const int64_t B = 2, H = 3, T = 4, D = 6;
    for (int k = 0; k < 3; k++) {
        /* k 0: cos [T, D]; 1: cos [B, 1, T, D]; 2: that with a strided x */
        int64_t cb = k == 0 ? 1 : B;
        zl_tensor *cos = k == 0 ? zt_randn(SHAPE(T, D)) : zt_randn(SHAPE(B, 1, T, D));
        zl_tensor *sin = k == 0 ? zt_randn(SHAPE(T, D)) : zt_randn(SHAPE(B, 1, T, D));
        rot_ctx ctx = {k == 2, cos, sin};
        zl_tensor *x = k == 2 ? leaf(ZL_DTYPE_F32, SHAPE(B, T, H, D)) : leaf(ZL_DTYPE_F32, SHAPE(B, H, T, D));
        zl_tensor *y = rot_fn(&x, &ctx);
        CHECK(y && zl_tensor_ndim(y) == 4 && zl_tensor_shape(y)[1] == H && zl_tensor_shape(y)[2] == T);
        zl_tensor *xv = k == 2 ? zl_tensor_transpose(x, 1, 2) : zl_tensor_retain(x);
        CHECK(k != 2 || !zl_tensor_is_contiguous(xv));
        double *xd = values(xv), *cd = values(cos), *sd = values(sin);
        double *ref = malloc((size_t)(B * H * T * D) * sizeof *ref);
        ref_rotary(B, H, T, D, xd, cb, cd, sd, ref);
        if (y) zt_check_values("rotary", y, ref, 1e-6);
        zt_gradcheck("rotary", rot_fn, &ctx, 1, &x, GC_H, GC_TOL);
        free(xd); free(cd); free(sd); free(ref);
        zl_tensor *all[] = {y, xv, x, cos, sin};
        for (int i = 0; i < 5; i++) zl_tensor_release(all[i]);
    }
}

TEST(rotary_bf16_and_errors)
{
    zl_tensor *x = leaf(ZL_DTYPE_BF16, SHAPE(2, 3, 4, 8));
    zl_tensor *c32 = zt_randn(SHAPE(4, 8)), *s32 = zt_randn(SHAPE(4, 8));
    zl_tensor *cos = zl_tensor_to(c32, ZL_DTYPE_BF16), *sin = zl_tensor_to(s32, ZL_DTYPE_BF16);
    zl_tensor *y = zl_rotary(x, cos, sin);
    CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_BF16);
    double *xd = values(x), *cd = values(cos), *sd = values(sin), ref[192];
    ref_rotary(2, 3, 4, 8, xd, 1, cd, sd, ref);
    /* one rounding of the f32 result */
    for (int i = 0; i < 192; i++) ref[i] = round_bf16(ref[i]);
    if (y) zt_check_values("rotary bf16", y, ref, 1e-2);
    zl_tensor *s = y ? zl_sum(y, ZL_ALL_DIMS, false) : NULL;
    CHECK(s && zl_backward(s, NULL, false) == ZL_OK);
    CHECK(zl_tensor_grad(x) && zl_tensor_dtype(zl_tensor_grad(x)) == ZL_DTYPE_BF16);
    free(xd); free(cd); free(sd);

    zl_tensor *odd = zt_randn(SHAPE(2, 4, 5)), *c5 = zt_randn(SHAPE(4, 5)), *c3 = zt_randn(SHAPE(3, 8));
    zl_tensor *big = zt_randn(SHAPE(5, 2, 3, 4, 8)), *ci = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(4, 8));
    CHECK_ERR(zl_rotary(odd, c5, c5),
              "rotary: x's last dimension must be even (rotate_half splits it in halves), got shape [2, 4, 5]");
    CHECK_ERR(zl_rotary(x, c3, sin), "rotary: cos of shape [3, 8] does not broadcast to x's shape [2, 3, 4, 8]");
    CHECK_ERR(zl_rotary(x, cos, big),
              "rotary: sin of shape [5, 2, 3, 4, 8] does not broadcast to x's shape [2, 3, 4, 8]");
    CHECK_ERR(zl_rotary(x, ci, sin), "rotary: cos must be a float tensor");
    zl_tensor *all[] = {x, c32, s32, cos, sin, y, s, odd, c5, c3, big, ci};
    for (int i = 0; i < 12; i++) zl_tensor_release(all[i]);
}

/* ---- attention: grouped-query heads, masks, causal with fewer queries ---- */

/* out [B0, H, tq, dv] for q [B0, H, tq, d], k [B0, H / grp, tk, d], v
 * likewise with dv: head h reads key/value head h / grp; allow [B0 * H, tq,
 * tk] (NULL: all) and causal (query i sees keys up to i + tk - tq); a row
 * that sees no key is 0. In double. */
static double *attention_reference(int64_t B, int64_t grp, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                                   const double *q, const double *k, const double *v, const uint8_t *allow,
                                   bool causal, double scale)
{
    double *out = calloc((size_t)(B * tq * dv), sizeof *out), *p = malloc((size_t)(tk ? tk : 1) * sizeof *p);
    for (int64_t b = 0; b < B; b++) {
        const double *kb = k + b / grp * tk * d, *vb = v + b / grp * tk * dv;
        for (int64_t i = 0; i < tq; i++) {
            double m = -INFINITY, z = 0;
            for (int64_t j = 0; j < tk; j++) {
                bool ok = (!causal || j <= i + tk - tq) && (!allow || allow[(b * tq + i) * tk + j]);
                double s = 0;
                for (int64_t e = 0; e < d; e++) s += q[(b * tq + i) * d + e] * kb[j * d + e];
                p[j] = ok ? s * scale : -INFINITY;
                if (p[j] > m) m = p[j];
            }
            if (m == -INFINITY) continue;
            for (int64_t j = 0; j < tk; j++) z += p[j] = exp(p[j] - m);
            for (int64_t j = 0; j < tk; j++)
                for (int64_t e = 0; e < dv; e++) out[(b * tq + i) * dv + e] += p[j] / z * vb[j * dv + e];
        }
    }
    free(p);
    return out;
}

typedef struct {
    int64_t b0, h, hkv, tq, tk, d, dv;
    bool causal;
    int mask;   /* 0 none; 1 padding [B0, 1, 1, tk]; 2 per query [B0, 1, tq, tk] with fully masked rows */
} gqa_case;

static const gqa_case gqa_cases[] = {
    {2, 4, 2, 3, 3, 4, 3, false, 0}, {1, 4, 1, 4, 4, 3, 2, true, 0},  {2, 4, 2, 2, 5, 3, 3, true, 0},
    {2, 4, 2, 3, 4, 3, 2, false, 1}, {1, 4, 1, 3, 5, 2, 3, true, 2},  {2, 2, 2, 3, 5, 3, 3, false, 2},
    {1, 3, 3, 1, 6, 4, 4, true, 1},
};

/* The case's bool mask (NULL without one) and allow [B0 * H, tq, tk] as the
 * reference reads it. Padding hides the first sequence's last two keys;
 * the per-query mask hides everything from one query of each batch and a
 * pseudo-random scatter elsewhere. */
static zl_tensor *make_mask(const gqa_case *c, uint8_t **allow)
{
    *allow = NULL;
    if (!c->mask) return NULL;
    int64_t tq = c->tq, tk = c->tk, per = c->mask == 2 ? tq : 1;
    zl_tensor *m = zl_tensor_zeros(ZL_DTYPE_BOOL, SHAPE(c->b0, 1, per, tk));
    for (int64_t b = 0; b < c->b0; b++)
        for (int64_t i = 0; i < per; i++)
            for (int64_t j = 0; j < tk; j++) {
                bool on = c->mask == 1 ? !(b == 0 && j >= tk - 2) : i != (b + 1) % tq && (b * 7 + i * 5 + j * 3) % 4 != 0;
                zl_tensor_set(m, (b * per + i) * tk + j, on);
            }
    uint8_t *a = malloc((size_t)(c->b0 * c->h * tq * tk));
    for (int64_t b = 0; b < c->b0; b++)
        for (int64_t h = 0; h < c->h; h++)
            for (int64_t i = 0; i < tq; i++)
                for (int64_t j = 0; j < tk; j++)
                    a[((b * c->h + h) * tq + i) * tk + j] =
                        zl_tensor_get(m, (b * per + (c->mask == 2 ? i : 0)) * tk + j) != 0;
    *allow = a;
    return m;
}

typedef struct { const gqa_case *c; zl_tensor *mask; } gqa_ctx;

static zl_tensor *gqa_fn(zl_tensor **in, void *ctx)
{
    gqa_ctx *g = ctx;
    return zl_attention_masked(in[0], in[1], in[2], g->mask, g->c->causal, 0);
}

TEST(attention_gqa_masks_forward_and_gradients)
{
    for (size_t n = 0; n < sizeof gqa_cases / sizeof gqa_cases[0]; n++) {
        const gqa_case *c = &gqa_cases[n];
        uint8_t *allow;
        zl_tensor *mask = make_mask(c, &allow);
        zl_tensor *in[3] = {leaf(ZL_DTYPE_F32, SHAPE(c->b0, c->h, c->tq, c->d)),
                            leaf(ZL_DTYPE_F32, SHAPE(c->b0, c->hkv, c->tk, c->d)),
                            leaf(ZL_DTYPE_F32, SHAPE(c->b0, c->hkv, c->tk, c->dv))};
        gqa_ctx ctx = {c, mask};
        zl_tensor *o = gqa_fn(in, &ctx);
        CHECK(o && zl_tensor_ndim(o) == 4 && zl_tensor_shape(o)[1] == c->h && zl_tensor_shape(o)[3] == c->dv);
        double *qv = values(in[0]), *kv = values(in[1]), *vv = values(in[2]);
        double *ref = attention_reference(c->b0 * c->h, c->h / c->hkv, c->tq, c->tk, c->d, c->dv, qv, kv, vv, allow,
                                          c->causal, 1.0 / sqrt((double)c->d));
        if (o) zt_check_values("attention gqa", o, ref, 1e-5);
        zt_gradcheck("attention gqa", gqa_fn, &ctx, 3, in, 1e-2, 1e-2);
        free(qv); free(kv); free(vv); free(ref); free(allow);
        zl_tensor *all[] = {o, in[0], in[1], in[2], mask};
        for (int i = 0; i < 5; i++) zl_tensor_release(all[i]);
    }
}

/* A query that sees no key outputs zeros and passes no gradient to q; the
 * keys it would have seen get none from it either. */
TEST(attention_fully_masked_rows_are_zero)
{
    zl_tensor *q = leaf(ZL_DTYPE_F32, SHAPE(1, 2, 3, 4)), *k = leaf(ZL_DTYPE_F32, SHAPE(1, 2, 5, 4));
    zl_tensor *v = leaf(ZL_DTYPE_F32, SHAPE(1, 2, 5, 4));
    zl_tensor *mask = zl_tensor_full(ZL_DTYPE_BOOL, SHAPE(3, 5), 1.0);
    for (int64_t j = 0; j < 5; j++) zl_tensor_set(mask, 5 + j, 0);   /* query 1 sees nothing */
    zl_tensor *o = zl_attention_masked(q, k, v, mask, false, 0);
    zl_tensor *s = o ? zl_sum(o, ZL_ALL_DIMS, false) : NULL;
    CHECK(s && zl_backward(s, NULL, false) == ZL_OK);
    for (int64_t h = 0; h < 2 && o; h++)
        for (int64_t e = 0; e < 4; e++) {
            CHECK(zl_tensor_get(o, (h * 3 + 1) * 4 + e) == 0.0);
            CHECK(zl_tensor_grad(q) && zl_tensor_get(zl_tensor_grad(q), (h * 3 + 1) * 4 + e) == 0.0);
        }
    zl_tensor *all[] = {q, k, v, mask, o, s};
    for (int i = 0; i < 6; i++) zl_tensor_release(all[i]);
}

/* Grouped-query attention against the same attention over key/value heads
 * repeated with index_select (whose backward sums the repeated heads'
 * gradients): outputs and all three gradients agree, on a size that runs
 * the heads in parallel, causal in several row blocks, with a strided q. */
TEST(attention_gqa_matches_repeated_heads)
{
    const int64_t B0 = 2, H = 8, HKV = 2, T = 150, D = 16;
    zl_tensor *qf = leaf(ZL_DTYPE_F32, SHAPE(B0, T, H, D)), *k = leaf(ZL_DTYPE_F32, SHAPE(B0, HKV, T, D));
    zl_tensor *v = leaf(ZL_DTYPE_F32, SHAPE(B0, HKV, T, D)), *gout = zt_randn(SHAPE(B0, H, T, D));
    zl_tensor *idx = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(H));
    for (int64_t h = 0; h < H; h++) zl_tensor_set(idx, h, (double)(h / (H / HKV)));
    for (int causal = 0; causal < 2; causal++) {
        double *res[2][4];
        for (int rep = 0; rep < 2; rep++) {
            zl_tensor *q = zl_tensor_transpose(qf, 1, 2);
            zl_tensor *kk = rep ? zl_index_select(k, 1, idx) : zl_tensor_retain(k);
            zl_tensor *vv = rep ? zl_index_select(v, 1, idx) : zl_tensor_retain(v);
            zl_tensor *o = zl_attention(q, kk, vv, causal, 0);
            CHECK(o && zl_backward(o, gout, false) == ZL_OK);
            res[rep][0] = values(o);
            zl_tensor *ps[3] = {qf, k, v};
            for (int i = 0; i < 3; i++) {
                res[rep][i + 1] = values(zl_tensor_grad(ps[i]));
                zl_tensor_set_grad(ps[i], NULL);
            }
            zl_tensor *all[] = {q, kk, vv, o};
            for (int i = 0; i < 4; i++) zl_tensor_release(all[i]);
        }
        int64_t sizes[4] = {B0 * H * T * D, B0 * H * T * D, B0 * HKV * T * D, B0 * HKV * T * D};
        const char *what[4] = {"output", "gradient of q", "gradient of k", "gradient of v"};
        for (int i = 0; i < 4; i++) {
            double worst = 0;
            for (int64_t e = 0; e < sizes[i]; e++) {
                double dd = fabs(res[0][i][e] - res[1][i][e]) / (1.0 + fabs(res[1][i][e]));
                worst = dd > worst ? dd : worst;
            }
            if (worst > 1e-5) zt_fail(__FILE__, __LINE__, "gqa %s (causal %d) differs by %g", what[i], causal, worst);
            free(res[0][i]);
            free(res[1][i]);
        }
    }
    zl_tensor *all[] = {qf, k, v, gout, idx};
    for (int i = 0; i < 5; i++) zl_tensor_release(all[i]);
}

/* The same bits with one thread and with two: the key/value heads' sums go in
 * a fixed order. */
TEST(attention_gqa_backward_is_deterministic)
{
    zl_tensor *q = leaf(ZL_DTYPE_F32, SHAPE(2, 8, 70, 16)), *k = leaf(ZL_DTYPE_F32, SHAPE(2, 2, 90, 16));
    zl_tensor *v = leaf(ZL_DTYPE_F32, SHAPE(2, 2, 90, 16)), *gout = zt_randn(SHAPE(2, 8, 70, 16));
    double *res[2][3];
    int saved = zl_get_num_threads();
    for (int run = 0; run < 2; run++) {
        zl_set_num_threads(run + 1);
        zl_tensor *o = zl_attention(q, k, v, true, 0);
        CHECK(o && zl_backward(o, gout, false) == ZL_OK);
        zl_tensor *ps[3] = {q, k, v};
        for (int i = 0; i < 3; i++) {
            res[run][i] = values(zl_tensor_grad(ps[i]));
            zl_tensor_set_grad(ps[i], NULL);
        }
        zl_tensor_release(o);
    }
    zl_set_num_threads(saved);
    int64_t sizes[3] = {2 * 8 * 70 * 16, 2 * 2 * 90 * 16, 2 * 2 * 90 * 16};
    for (int i = 0; i < 3; i++) {
        CHECK(memcmp(res[0][i], res[1][i], (size_t)sizes[i] * sizeof(double)) == 0);
        free(res[0][i]);
        free(res[1][i]);
    }
    zl_tensor *all[] = {q, k, v, gout};
    for (int i = 0; i < 4; i++) zl_tensor_release(all[i]);
}

/* bf16 q, k and v with grouped heads: computed in f32, rounded once. */
TEST(attention_gqa_bf16)
{
    zl_tensor *q = leaf(ZL_DTYPE_BF16, SHAPE(2, 4, 5, 8)), *k = leaf(ZL_DTYPE_BF16, SHAPE(2, 2, 6, 8));
    zl_tensor *v = leaf(ZL_DTYPE_BF16, SHAPE(2, 2, 6, 8));
    zl_tensor *o = zl_attention(q, k, v, true, 0.3);
    CHECK(o && zl_tensor_dtype(o) == ZL_DTYPE_BF16);
    double *qv = values(q), *kv = values(k), *vv = values(v);
    double *ref = attention_reference(8, 2, 5, 6, 8, 8, qv, kv, vv, NULL, true, 0.3);
    if (o) zt_check_values("attention gqa bf16", o, ref, 1e-2);
    zl_tensor *s = o ? zl_sum(o, ZL_ALL_DIMS, false) : NULL;
    CHECK(s && zl_backward(s, NULL, false) == ZL_OK);
    CHECK(zl_tensor_grad(k) && zl_tensor_dtype(zl_tensor_grad(k)) == ZL_DTYPE_BF16);
    free(qv); free(kv); free(vv); free(ref);
    zl_tensor *all[] = {q, k, v, o, s};
    for (int i = 0; i < 5; i++) zl_tensor_release(all[i]);
}

TEST(attention_gqa_and_mask_errors)
{
    zl_tensor *q = zt_randn(SHAPE(2, 4, 3, 8)), *k3 = zt_randn(SHAPE(2, 3, 5, 8)), *k = zt_randn(SHAPE(2, 2, 5, 8));
    zl_tensor *v = zt_randn(SHAPE(2, 2, 5, 8)), *v1 = zt_randn(SHAPE(2, 1, 5, 8)), *k0 = zt_randn(SHAPE(2, 0, 5, 8));
    zl_tensor *mf = zt_randn(SHAPE(3, 5)), *m4 = zl_tensor_zeros(ZL_DTYPE_BOOL, SHAPE(3, 4));
    zl_tensor *q6 = zt_randn(SHAPE(2, 4, 6, 8)), *v3 = zt_randn(SHAPE(2, 3, 5, 8)), *q0 = zt_randn(SHAPE(2, 0, 3, 8));
    CHECK_ERR(zl_attention(q, k3, v3, false, 0),
              "attention: the query's 4 heads (dimension -3) must be a positive multiple of the key's 3 "
              "(shapes [2, 4, 3, 8] and [2, 3, 5, 8])");
    CHECK_ERR(zl_attention(q, k0, k0, false, 0), "attention: the query's 4 heads (dimension -3) must be a positive "
                                                 "multiple of the key's 0");
    CHECK_ERR(zl_attention(q0, k, v, false, 0), "attention: the query's 0 heads (dimension -3) must be a positive "
                                                "multiple of the key's 2");
    CHECK_ERR(zl_attention(q, k, v1, false, 0),
              "attention: key and value must have the same number of heads (dimension -3) "
              "(shapes [2, 2, 5, 8] and [2, 1, 5, 8])");
    CHECK_ERR(zl_attention(q, k, v, false, -1),
              "attention: scale must be finite and positive (0 for 1/sqrt(D)), got -1");
    CHECK_ERR(zl_attention(q, k, v, false, NAN), "attention: scale must be finite and positive (0 for 1/sqrt(D)), got nan");
    CHECK_ERR(zl_attention(q, k, v, false, INFINITY),
              "attention: scale must be finite and positive (0 for 1/sqrt(D)), got inf");
    CHECK_ERR(zl_attention(q6, k, v, true, 0),
              "attention: causal attention needs at most as many queries as keys (shapes [2, 4, 6, 8] and [2, 2, 5, 8])");
    CHECK_ERR(zl_attention_masked(q, k, v, mf, false, 0),
              "attention: mask must be bool (true where a query may see a key), got f32");
    CHECK_ERR(zl_attention_masked(q, k, v, m4, false, 0),
              "attention: mask of shape [3, 4] does not broadcast to the scores' shape [2, 4, 3, 5]");
    zl_tensor *all[] = {q, k3, k, v, v1, k0, mf, m4, q6, v3, q0};
    for (int i = 0; i < 11; i++) zl_tensor_release(all[i]);
}
