/* conv2d, max_pool2d and attention: forward against plain double references
 * written here (direct convolution, naive pooling and attention), gradients
 * against finite differences, determinism of backward, and every bad input. */
#include <stdlib.h>
#include "gradcheck.h"

static zl_tensor *leaf(int ndim, const int64_t *shape)
{
    zl_tensor *t = zt_randn(ndim, shape);
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

/* ---- conv2d ---- */

typedef struct {
    int64_t n, c, h, w, o, kh, kw;
    int sh, sw, ph, pw;
    bool bias;
} conv_case;

static int64_t out_len(int64_t in, int64_t k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* y [N, O, oh, ow] by the definition: seven loops, zero padding, in double. */
static double *conv_reference(const conv_case *cc, const double *x, const double *w, const double *b)
{
    int64_t oh = out_len(cc->h, cc->kh, cc->sh, cc->ph), ow = out_len(cc->w, cc->kw, cc->sw, cc->pw);
    double *y = malloc((size_t)(cc->n * cc->o * oh * ow) * sizeof *y);
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t o = 0; o < cc->o; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double s = b ? b[o] : 0.0;
                    for (int64_t c = 0; c < cc->c; c++)
                        for (int64_t ki = 0; ki < cc->kh; ki++)
                            for (int64_t kj = 0; kj < cc->kw; kj++) {
                                int64_t ih = i * cc->sh - cc->ph + ki, iw = j * cc->sw - cc->pw + kj;
                                if (ih < 0 || ih >= cc->h || iw < 0 || iw >= cc->w) continue;
                                s += x[((n * cc->c + c) * cc->h + ih) * cc->w + iw] *
                                     w[((o * cc->c + c) * cc->kh + ki) * cc->kw + kj];
                            }
                    y[((n * cc->o + o) * oh + i) * ow + j] = s;
                }
    return y;
}

static const conv_case conv_cases[] = {
    {2, 3, 5, 6, 4, 3, 2, 1, 1, 0, 0, true},
    {2, 3, 7, 5, 4, 3, 3, 2, 2, 1, 1, true},
    {1, 2, 4, 4, 3, 1, 1, 1, 1, 0, 0, false},   /* 1x1: the image is its own column matrix */
    {2, 1, 6, 6, 2, 2, 3, 2, 1, 1, 0, true},
    {1, 3, 5, 5, 2, 5, 5, 1, 1, 2, 2, false},
    {3, 2, 4, 5, 3, 2, 2, 3, 2, 1, 1, true},
};

TEST(conv2d_forward_matches_reference)
{
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        const conv_case *cc = &conv_cases[k];
        zl_tensor *x = zt_randn(SHAPE(cc->n, cc->c, cc->h, cc->w));
        zl_tensor *w = zt_randn(SHAPE(cc->o, cc->c, cc->kh, cc->kw));
        zl_tensor *b = cc->bias ? zt_randn(SHAPE(cc->o)) : NULL;
        zl_tensor *y = zl_conv2d(x, w, b, cc->sh, cc->sw, cc->ph, cc->pw);
        CHECK(y);
        if (!y) continue;
        int64_t oh = out_len(cc->h, cc->kh, cc->sh, cc->ph), ow = out_len(cc->w, cc->kw, cc->sw, cc->pw);
        const int64_t *s = zl_tensor_shape(y);
        CHECK(zl_tensor_ndim(y) == 4 && s[0] == cc->n && s[1] == cc->o && s[2] == oh && s[3] == ow);
        double *xv = values(x), *wv = values(w), *bv = b ? values(b) : NULL;
        double *ref = conv_reference(cc, xv, wv, bv);
        zt_check_values("conv2d", y, ref, 1e-5);
        free(xv); free(wv); free(bv); free(ref);
        zl_tensor_release(x); zl_tensor_release(w); zl_tensor_release(b); zl_tensor_release(y);
    }
}

TEST(conv2d_reads_views_and_half_precision)
{
    /* x is a transposed view (not contiguous); w is bf16, so the result is f32 (float promotion). */
    const conv_case cc = {2, 3, 5, 4, 2, 3, 3, 1, 1, 1, 1, true};
    zl_tensor *xt = zt_randn(SHAPE(2, 3, 4, 5)), *x = zl_tensor_transpose(xt, 2, 3);
    zl_tensor *w32 = zt_randn(SHAPE(2, 3, 3, 3)), *w = zl_tensor_to(w32, ZL_DTYPE_BF16), *b = zt_randn(SHAPE(2));
    zl_tensor *y = zl_conv2d(x, w, b, 1, 1, 1, 1);
    CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_F32);
    double *xv = values(x), *wv = values(w), *bv = values(b);
    double *ref = conv_reference(&cc, xv, wv, bv);
    if (y) zt_check_values("conv2d view", y, ref, 1e-5);
    zl_tensor *xh = zl_tensor_to(x, ZL_DTYPE_BF16), *yh = zl_conv2d(xh, w, NULL, 1, 1, 1, 1);
    CHECK(yh && zl_tensor_dtype(yh) == ZL_DTYPE_BF16);
    free(xv); free(wv); free(bv); free(ref);
    zl_tensor *all[] = {xt, x, w32, w, b, y, xh, yh};
    for (int i = 0; i < 8; i++) zl_tensor_release(all[i]);
}

static zl_tensor *conv_fn(zl_tensor **in, void *ctx)
{
    const conv_case *cc = ctx;
    return zl_conv2d(in[0], in[1], cc->bias ? in[2] : NULL, cc->sh, cc->sw, cc->ph, cc->pw);
}

TEST(conv2d_gradients)
{
    const conv_case cases[] = {
        {2, 2, 5, 5, 3, 3, 3, 2, 2, 1, 1, true},
        {2, 3, 4, 5, 2, 2, 3, 1, 1, 0, 0, false},
        {2, 2, 6, 5, 2, 3, 2, 2, 1, 1, 0, true},
        {2, 3, 3, 3, 2, 1, 1, 1, 1, 0, 0, true},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const conv_case *cc = &cases[k];
        zl_tensor *in[3] = {leaf(SHAPE(cc->n, cc->c, cc->h, cc->w)), leaf(SHAPE(cc->o, cc->c, cc->kh, cc->kw)),
                            cc->bias ? leaf(SHAPE(cc->o)) : NULL};
        zt_gradcheck("conv2d", conv_fn, (void *)cc, cc->bias ? 3 : 2, in, 1e-2, 1e-2);
        for (int i = 0; i < 3; i++) zl_tensor_release(in[i]);
    }
    /* Only the weight requires grad: the input's gradient is skipped. */
    const conv_case cc = {2, 2, 5, 5, 3, 3, 3, 2, 2, 1, 1, false};
    zl_tensor *in[2] = {zt_randn(SHAPE(2, 2, 5, 5)), leaf(SHAPE(3, 2, 3, 3))};
    zt_gradcheck("conv2d weight only", conv_fn, (void *)&cc, 2, in, 1e-2, 1e-2);
    CHECK(zl_tensor_grad(in[0]) == NULL);
    zl_tensor_release(in[0]);
    zl_tensor_release(in[1]);
}

/* Gradients of a convolution big enough to thread, twice. */
static void conv_grads(zl_tensor *x, zl_tensor *w, zl_tensor *b, double *out)
{
    zl_tensor_set_grad(x, NULL);
    zl_tensor_set_grad(w, NULL);
    zl_tensor_set_grad(b, NULL);
    zl_tensor *y = zl_conv2d(x, w, b, 1, 1, 1, 1), *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    int64_t nx = zl_tensor_numel(x), nw = zl_tensor_numel(w);
    zl_tensor_to_f64(zl_tensor_grad(x), out);
    zl_tensor_to_f64(zl_tensor_grad(w), out + nx);
    zl_tensor_to_f64(zl_tensor_grad(b), out + nx + nw);
    zl_tensor_release(y);
    zl_tensor_release(s);
}

TEST(conv2d_backward_is_deterministic)
{
    zl_tensor *x = leaf(SHAPE(4, 16, 16, 16)), *w = leaf(SHAPE(8, 16, 3, 3)), *b = leaf(SHAPE(8));
    size_t n = (size_t)(zl_tensor_numel(x) + zl_tensor_numel(w) + 8);
    double *g1 = malloc(n * sizeof *g1), *g2 = malloc(n * sizeof *g2);
    conv_grads(x, w, b, g1);
    conv_grads(x, w, b, g2);
    CHECK(memcmp(g1, g2, n * sizeof *g1) == 0);
    free(g1);
    free(g2);
    zl_tensor_release(x); zl_tensor_release(w); zl_tensor_release(b);
}

TEST(conv2d_errors)
{
    zl_tensor *x = zt_randn(SHAPE(2, 3, 5, 5)), *w = zt_randn(SHAPE(4, 2, 3, 3)), *w3 = zt_randn(SHAPE(4, 3, 3, 3));
    zl_tensor *b = zt_randn(SHAPE(5)), *x3 = zt_randn(SHAPE(3, 5, 5));
    zl_tensor *xi = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(2, 3, 5, 5));
    CHECK_ERR(zl_conv2d(x, w, NULL, 1, 1, 0, 0),
              "conv2d: input has 3 channels but the weight expects 2 (shapes [2, 3, 5, 5] and [4, 2, 3, 3])");
    CHECK_ERR(zl_conv2d(x, w3, NULL, 0, 1, 0, 0), "conv2d: stride must be positive, got (0, 1)");
    CHECK_ERR(zl_conv2d(x, w3, NULL, 1, -2, 0, 0), "conv2d: stride must be positive, got (1, -2)");
    CHECK_ERR(zl_conv2d(x, w3, NULL, 1, 1, 0, -1), "conv2d: padding must be non-negative, got (0, -1)");
    CHECK_ERR(zl_conv2d(x, w3, b, 1, 1, 0, 0),
              "conv2d: bias must be [O] for a weight [O, C, kh, kw] (shapes [5] and [4, 3, 3, 3])");
    CHECK_ERR(zl_conv2d(x3, w3, NULL, 1, 1, 0, 0), "conv2d: input must be 4-d [N, C, H, W], got shape [3, 5, 5]");
    CHECK_ERR(zl_conv2d(x, x3, NULL, 1, 1, 0, 0), "conv2d: weight must be 4-d [O, C, kh, kw], got shape [3, 5, 5]");
    CHECK_ERR(zl_conv2d(xi, w3, NULL, 1, 1, 0, 0), "conv2d: input must be a float tensor (f32, f16 or bf16), got i64");
    zl_tensor *small = zt_randn(SHAPE(1, 3, 2, 4));
    CHECK_ERR(zl_conv2d(small, w3, NULL, 2, 1, 0, 0),
              "conv2d: output would be empty: input 2x4 with padding (0, 0) is smaller than the kernel 3x3 "
              "(stride (2, 1); input [1, 3, 2, 4], weight [4, 3, 3, 3])");
    CHECK(zl_conv2d(NULL, w3, NULL, 1, 1, 0, 0) == NULL);
    zl_tensor *all[] = {x, w, w3, b, x3, xi, small};
    for (int i = 0; i < 7; i++) zl_tensor_release(all[i]);
}

/* ---- max_pool2d ---- */

typedef struct {
    int64_t n, c, h, w;
    int kh, kw, sh, sw, ph, pw;
} pool_case;

static double *pool_reference(const pool_case *pc, const double *x)
{
    int64_t oh = out_len(pc->h, pc->kh, pc->sh, pc->ph), ow = out_len(pc->w, pc->kw, pc->sw, pc->pw);
    double *y = malloc((size_t)(pc->n * pc->c * oh * ow) * sizeof *y);
    for (int64_t p = 0; p < pc->n * pc->c; p++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                double m = -INFINITY;
                for (int ki = 0; ki < pc->kh; ki++)
                    for (int kj = 0; kj < pc->kw; kj++) {
                        int64_t ih = i * pc->sh - pc->ph + ki, iw = j * pc->sw - pc->pw + kj;
                        double v = ih < 0 || ih >= pc->h || iw < 0 || iw >= pc->w ? -INFINITY
                                                                                  : x[(p * pc->h + ih) * pc->w + iw];
                        if (v > m) m = v;
                    }
                y[(p * oh + i) * ow + j] = m;
            }
    return y;
}

/* Distinct values 0.1 apart in random order: no ties, even after a step of 1e-2. */
static zl_tensor *no_ties(int ndim, const int64_t *shape, bool requires_grad)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    zl_tensor *perm = zl_randperm(n, NULL);
    float *data = malloc((size_t)n * sizeof *data);
    for (int64_t i = 0; i < n; i++) data[i] = 0.1f * (float)zl_tensor_get(perm, i) - 0.05f * (float)n;
    zl_tensor *t = zt_from(ndim, shape, data);
    zl_tensor_set_requires_grad(t, requires_grad);
    free(data);
    zl_tensor_release(perm);
    return t;
}

static const pool_case pool_cases[] = {
    {2, 3, 6, 6, 2, 2, 2, 2, 0, 0},
    {2, 2, 7, 5, 3, 3, 2, 2, 1, 1},
    {1, 2, 5, 5, 3, 3, 1, 1, 1, 1},
    {2, 1, 5, 7, 2, 3, 1, 2, 1, 1},
    {1, 1, 4, 4, 4, 4, 1, 1, 0, 0},
};

TEST(max_pool2d_forward_matches_reference)
{
    for (size_t k = 0; k < sizeof pool_cases / sizeof pool_cases[0]; k++) {
        const pool_case *pc = &pool_cases[k];
        zl_tensor *x = zt_randn(SHAPE(pc->n, pc->c, pc->h, pc->w));
        zl_tensor *y = zl_max_pool2d(x, pc->kh, pc->kw, pc->sh, pc->sw, pc->ph, pc->pw);
        CHECK(y);
        if (!y) continue;
        const int64_t *s = zl_tensor_shape(y);
        CHECK(s[0] == pc->n && s[1] == pc->c && s[2] == out_len(pc->h, pc->kh, pc->sh, pc->ph) &&
              s[3] == out_len(pc->w, pc->kw, pc->sw, pc->pw));
        double *xv = values(x), *ref = pool_reference(pc, xv);
        zt_check_values("max_pool2d", y, ref, 0);
        free(xv); free(ref);
        zl_tensor_release(x); zl_tensor_release(y);
    }
}

static zl_tensor *pool_fn(zl_tensor **in, void *ctx)
{
    const pool_case *pc = ctx;
    return zl_max_pool2d(in[0], pc->kh, pc->kw, pc->sh, pc->sw, pc->ph, pc->pw);
}

TEST(max_pool2d_gradients)
{
    for (size_t k = 0; k < sizeof pool_cases / sizeof pool_cases[0]; k++) {
        const pool_case *pc = &pool_cases[k];
        zl_tensor *x = no_ties(SHAPE(pc->n, pc->c, pc->h, pc->w), true);
        zt_gradcheck("max_pool2d", pool_fn, (void *)pc, 1, &x, 1e-2, 1e-2);
        zl_tensor_release(x);
    }
}

TEST(max_pool2d_ties_go_to_the_first)
{
    zl_tensor *x = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1, 1, 2, 2), 3.0);
    zl_tensor_set_requires_grad(x, true);
    zl_tensor *y = zl_max_pool2d(x, 2, 2, 2, 2, 0, 0), *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    double want[4] = {1, 0, 0, 0};
    zt_check_values("max_pool2d tie", zl_tensor_grad(x), want, 0);
    zl_tensor_release(x); zl_tensor_release(y); zl_tensor_release(s);
}

TEST(max_pool2d_errors)
{
    zl_tensor *x = zt_randn(SHAPE(2, 3, 5, 5)), *x3 = zt_randn(SHAPE(3, 5, 5));
    zl_tensor *xi = zl_tensor_zeros(ZL_DTYPE_I32, SHAPE(1, 1, 4, 4));
    CHECK_ERR(zl_max_pool2d(x, 0, 2, 1, 1, 0, 0), "max_pool2d: kernel size must be positive, got (0, 2)");
    CHECK_ERR(zl_max_pool2d(x, 2, 2, 1, 0, 0, 0), "max_pool2d: stride must be positive, got (1, 0)");
    CHECK_ERR(zl_max_pool2d(x, 2, 2, 1, 1, -1, 0), "max_pool2d: padding must be non-negative, got (-1, 0)");
    CHECK_ERR(zl_max_pool2d(x, 3, 2, 1, 1, 1, 2),
              "max_pool2d: padding (1, 2) must be at most half the kernel size (3, 2)");
    CHECK_ERR(zl_max_pool2d(x, 7, 2, 1, 1, 0, 0),
              "max_pool2d: output would be empty: input 5x5 with padding (0, 0) is smaller than the kernel 7x2 "
              "(stride (1, 1); input [2, 3, 5, 5])");
    CHECK_ERR(zl_max_pool2d(x3, 2, 2, 2, 2, 0, 0), "max_pool2d: input must be 4-d [N, C, H, W], got shape [3, 5, 5]");
    CHECK_ERR(zl_max_pool2d(xi, 2, 2, 2, 2, 0, 0),
              "max_pool2d: input must be a float tensor (f32, f16 or bf16), got i32");
    zl_tensor_release(x); zl_tensor_release(x3); zl_tensor_release(xi);
}

/* ---- attention ---- */

/* out [B, tq, dv] = softmax(q kᵀ · scale, causal) v, per batch, in double. */
static double *attention_reference(int64_t B, int64_t tq, int64_t tk, int64_t d, int64_t dv, const double *q,
                                   const double *k, const double *v, bool causal, double scale)
{
    double *out = calloc((size_t)(B * tq * dv), sizeof *out), *p = malloc((size_t)tk * sizeof *p);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < tq; i++) {
            double m = -INFINITY, z = 0;
            for (int64_t j = 0; j < tk; j++) {
                double s = 0;
                for (int64_t e = 0; e < d; e++) s += q[(b * tq + i) * d + e] * k[(b * tk + j) * d + e];
                p[j] = causal && j > i ? -INFINITY : s * scale;
                if (p[j] > m) m = p[j];
            }
            for (int64_t j = 0; j < tk; j++) z += p[j] = exp(p[j] - m);
            for (int64_t j = 0; j < tk; j++)
                for (int64_t e = 0; e < dv; e++) out[(b * tq + i) * dv + e] += p[j] / z * v[(b * tk + j) * dv + e];
        }
    free(p);
    return out;
}

typedef struct {
    int nb;
    int64_t batch[2], tq, tk, d, dv;
    bool causal;
    double scale;
} attn_case;

static void attn_shapes(const attn_case *ac, int64_t *qs, int64_t *ks, int64_t *vs)
{
    for (int i = 0; i < ac->nb; i++) qs[i] = ks[i] = vs[i] = ac->batch[i];
    qs[ac->nb] = ac->tq; qs[ac->nb + 1] = ac->d;
    ks[ac->nb] = ac->tk; ks[ac->nb + 1] = ac->d;
    vs[ac->nb] = ac->tk; vs[ac->nb + 1] = ac->dv;
}

static const attn_case attn_cases[] = {
    {2, {2, 3}, 4, 5, 3, 2, false, 0.0},
    {1, {2}, 5, 5, 4, 3, true, 0.7},
    {0, {0}, 4, 3, 3, 5, false, 0.5},
    {1, {3}, 6, 6, 2, 2, true, 0.0},
    {1, {1}, 1, 4, 3, 2, false, 0.0},
};

TEST(attention_forward_matches_reference)
{
    for (size_t c = 0; c < sizeof attn_cases / sizeof attn_cases[0]; c++) {
        const attn_case *ac = &attn_cases[c];
        int64_t qs[4], ks[4], vs[4];
        attn_shapes(ac, qs, ks, vs);
        int nd = ac->nb + 2;
        zl_tensor *q = zt_randn(nd, qs), *k = zt_randn(nd, ks), *v = zt_randn(nd, vs);
        zl_tensor *o = zl_attention(q, k, v, ac->causal, ac->scale);
        CHECK(o);
        if (!o) continue;
        const int64_t *os = zl_tensor_shape(o);
        CHECK(zl_tensor_ndim(o) == nd && os[nd - 2] == ac->tq && os[nd - 1] == ac->dv);
        int64_t B = 1;
        for (int i = 0; i < ac->nb; i++) B *= ac->batch[i];
        double *qv = values(q), *kv = values(k), *vv = values(v);
        double scale = ac->scale > 0 ? ac->scale : 1.0 / sqrt((double)ac->d);
        double *ref = attention_reference(B, ac->tq, ac->tk, ac->d, ac->dv, qv, kv, vv, ac->causal, scale);
        zt_check_values(ac->causal ? "attention causal" : "attention", o, ref, 1e-5);
        free(qv); free(kv); free(vv); free(ref);
        zl_tensor_release(q); zl_tensor_release(k); zl_tensor_release(v); zl_tensor_release(o);
    }
}

static zl_tensor *attn_fn(zl_tensor **in, void *ctx)
{
    const attn_case *ac = ctx;
    return zl_attention(in[0], in[1], in[2], ac->causal, ac->scale);
}

TEST(attention_gradients)
{
    for (size_t c = 0; c < sizeof attn_cases / sizeof attn_cases[0]; c++) {
        const attn_case *ac = &attn_cases[c];
        int64_t qs[4], ks[4], vs[4];
        attn_shapes(ac, qs, ks, vs);
        int nd = ac->nb + 2;
        zl_tensor *in[3] = {leaf(nd, qs), leaf(nd, ks), leaf(nd, vs)};
        zt_gradcheck(ac->causal ? "attention causal" : "attention", attn_fn, (void *)ac, 3, in, 1e-2, 1e-2);
        for (int i = 0; i < 3; i++) zl_tensor_release(in[i]);
    }
    /* Only v requires grad: dP and dS are never needed. */
    const attn_case *ac = &attn_cases[1];
    int64_t qs[4], ks[4], vs[4];
    attn_shapes(ac, qs, ks, vs);
    zl_tensor *in[3] = {zt_randn(3, qs), zt_randn(3, ks), leaf(3, vs)};
    zt_gradcheck("attention v only", attn_fn, (void *)ac, 3, in, 1e-2, 1e-2);
    CHECK(zl_tensor_grad(in[0]) == NULL && zl_tensor_grad(in[1]) == NULL);
    for (int i = 0; i < 3; i++) zl_tensor_release(in[i]);
}

TEST(attention_errors)
{
    zl_tensor *q = zt_randn(SHAPE(2, 4, 3)), *k = zt_randn(SHAPE(2, 5, 3)), *v = zt_randn(SHAPE(2, 5, 2));
    zl_tensor *kb = zt_randn(SHAPE(3, 5, 3)), *k4 = zt_randn(SHAPE(2, 5, 4)), *v6 = zt_randn(SHAPE(2, 6, 2));
    zl_tensor *q1 = zt_randn(SHAPE(3)), *vb = zt_randn(SHAPE(1, 5, 2));
    zl_tensor *qi = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(2, 4, 3));
    CHECK_ERR(zl_attention(q, kb, v, false, 0),
              "attention: the query's 2 heads (dimension -3) must be a positive multiple of the key's 3 "
              "(shapes [2, 4, 3] and [3, 5, 3])");
    CHECK_ERR(zl_attention(q, k, vb, false, 0),
              "attention: key and value must have the same number of heads (dimension -3) "
              "(shapes [2, 5, 3] and [1, 5, 2])");
    CHECK_ERR(zl_attention(q, k4, v, false, 0),
              "attention: query and key must have the same last dimension (shapes [2, 4, 3] and [2, 5, 4])");
    CHECK_ERR(zl_attention(q, k, v6, false, 0),
              "attention: key and value must have the same number of positions (dimension -2) "
              "(shapes [2, 5, 3] and [2, 6, 2])");
    CHECK_ERR(zl_attention(k, q, q, true, 0),
              "attention: causal attention needs at most as many queries as keys (shapes [2, 5, 3] and [2, 4, 3])");
    CHECK_ERR(zl_attention(q1, k, v, false, 0),
              "attention: query must have at least 2 dims [..., T, D], got shape [3]");
    CHECK_ERR(zl_attention(qi, k, v, false, 0), "attention: query must be a float tensor (f32, f16 or bf16), got i64");
    zl_tensor *all[] = {q, k, v, kb, k4, v6, q1, vb, qi};
    for (int i = 0; i < 9; i++) zl_tensor_release(all[i]);
}

TEST(attention_large_rows_split_across_threads)
{
    int64_t B = 4, t = 128, d = 16;
    zl_tensor *q = zt_randn(SHAPE(4, 128, 16)), *k = zt_randn(SHAPE(4, 128, 16)), *v = zt_randn(SHAPE(4, 128, 16));
    double *qv = values(q), *kv = values(k), *vv = values(v);
    for (int causal = 0; causal < 2; causal++) {
        zl_tensor *o = zl_attention(q, k, v, causal, 0);
        double *ref = attention_reference(B, t, t, d, d, qv, kv, vv, causal, 0.25);
        CHECK(o);
        if (o) zt_check_values("attention large", o, ref, 1e-5);
        free(ref);
        zl_tensor_release(o);
    }
    free(qv); free(kv); free(vv);
    zl_tensor_release(q); zl_tensor_release(k); zl_tensor_release(v);
}

/* Heads sliced out of a fused qkv [B, T, 3C] (strided views, as the GPT's
 * attention passes them) give the bits of their contiguous copies, forward
 * and backward. */
static zl_tensor *heads(zl_tensor *qkv, int i, bool copy)
{
    zl_tensor *part = zl_tensor_narrow(qkv, 2, i * 8, 8);
    zl_tensor *split = zl_tensor_reshape(part, SHAPE(2, 5, 2, 4));
    zl_tensor *h = zl_tensor_transpose(split, 1, 2);
    zl_tensor *out = copy ? zl_tensor_contiguous(h) : zl_tensor_retain(h);
    zl_tensor_release(part);
    zl_tensor_release(split);
    zl_tensor_release(h);
    return out;
}

TEST(attention_reads_strided_heads)
{
    zl_tensor *qkv = leaf(SHAPE(2, 5, 24)), *w = zt_randn(SHAPE(2, 2, 5, 4));
    float *out[2], *grad[2];
    for (int copy = 0; copy < 2; copy++) {
        zl_tensor *q = heads(qkv, 0, copy), *k = heads(qkv, 1, copy), *v = heads(qkv, 2, copy);
        CHECK(copy || !zl_tensor_is_contiguous(q));
        zl_tensor *o = zl_attention(q, k, v, true, 0);
        zl_tensor *ow = zl_mul(o, w), *loss = zl_sum(ow, ZL_ALL_DIMS, false);
        CHECK(o && loss && zl_backward(loss, NULL, false) == ZL_OK);
        out[copy] = malloc(80 * sizeof(float));
        grad[copy] = malloc(240 * sizeof(float));
        memcpy(out[copy], zl_tensor_data(o), 80 * sizeof(float));
        memcpy(grad[copy], zl_tensor_data(zl_tensor_grad(qkv)), 240 * sizeof(float));
        zl_tensor_set_grad(qkv, NULL);
        zl_tensor *all[] = {q, k, v, o, ow, loss};
        for (int i = 0; i < 6; i++) zl_tensor_release(all[i]);
    }
    CHECK(memcmp(out[0], out[1], 80 * sizeof(float)) == 0);
    CHECK(memcmp(grad[0], grad[1], 240 * sizeof(float)) == 0);
    for (int i = 0; i < 2; i++) free(out[i]), free(grad[i]);
    zl_tensor_release(qkv);
    zl_tensor_release(w);
}
