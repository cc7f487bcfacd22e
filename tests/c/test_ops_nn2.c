/* torch's options of the nn ops: cross_entropy with class weights and label
 * smoothing, embedding with a padding row, avg_pool2d, and conv2d with
 * dilation and groups. Forward against double references written here (and a
 * few values worked by hand), gradients against finite differences, the
 * plain forms unchanged bit for bit, and every bad-input message. */
#include <stdlib.h>
#include <string.h>
#include "gradcheck.h"

#define GC_H 1e-3
#define GC_TOL 1e-2

static zl_tensor *leaf(int ndim, const int64_t *shape)
{
    zl_tensor *t = zt_randn(ndim, shape);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

/* Every element of t in logical order, as doubles (caller frees). */
static double *values(const zl_tensor *t)
{
    int64_t n = zl_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    zl_tensor_to_f64(t, v);
    return v;
}

static zl_tensor *i64_of(int ndim, const int64_t *shape, const int64_t *v)
{
    return zl_tensor_from_data(ZL_DTYPE_I64, ndim, shape, v);
}

static zl_tensor *f32_of(int ndim, const int64_t *shape, const float *v)
{
    return zl_tensor_from_data(ZL_DTYPE_F32, ndim, shape, v);
}

/* Whether a and b hold the same bits (both f32, same element count). */
static bool same_bits(const zl_tensor *a, const zl_tensor *b)
{
    return a && b && zl_tensor_numel(a) == zl_tensor_numel(b) && zl_tensor_dtype(a) == ZL_DTYPE_F32 &&
           zl_tensor_dtype(b) == ZL_DTYPE_F32 &&
           memcmp(zl_tensor_data(a), zl_tensor_data(b), (size_t)zl_tensor_numel(a) * 4) == 0;
}

/* ---- cross_entropy with weight and label_smoothing ---- */

/* torch's definition: row r's loss (1 - eps) * w[t] * nll + eps / C *
 * sum_c w[c] * -logp[c], 0 on ignored rows; the mean divides by the kept
 * rows' w[t] summed. Fills rows [n] and returns the reduced value. */
static double ref_ce(const double *x, int64_t n, int64_t c, const int64_t *t, const double *w, int64_t ignore,
                     double eps, zl_reduction red, double *rows)
{
    double total = 0, denom = 0;
    for (int64_t r = 0; r < n; r++) {
        rows[r] = 0;
        if (t[r] == ignore) continue;
        double m = -INFINITY, s = 0, smooth = 0;
        for (int64_t k = 0; k < c; k++) m = fmax(m, x[r * c + k]);
        for (int64_t k = 0; k < c; k++) s += exp(x[r * c + k] - m);
        double lse = m + log(s);
        for (int64_t k = 0; k < c; k++) smooth += (w ? w[k] : 1.0) * (lse - x[r * c + k]);
        double wt = w ? w[t[r]] : 1.0;
        rows[r] = (1 - eps) * wt * (lse - x[r * c + t[r]]) + eps / (double)c * smooth;
        total += rows[r];
        denom += wt;
    }
    return red == ZL_REDUCE_SUM ? total : total / denom;
}

typedef struct {
    zl_tensor *t, *w;
    int64_t ignore;
    double eps;
    zl_reduction red;
} ce_case;

static zl_tensor *ce_fn(zl_tensor **in, void *p)
{
    const ce_case *c = p;
    return zl_cross_entropy_ex(in[0], c->t, c->w, c->ignore, c->eps, c->red, ZL_DTYPE_F32);
}

TEST(cross_entropy_weight_and_smoothing_values)
{
    const int64_t n = 6, c = 5;
    int64_t tv[6] = {0, 4, -100, 2, 2, 3};
    float wv[5] = {0.5f, 2.0f, 1.0f, 3.0f, 0.25f};
    zl_tensor *x = zt_randn(SHAPE(6, 5)), *t = i64_of(SHAPE(6), tv), *w = f32_of(SHAPE(5), wv);
    double *xv = values(x), wd[5], rows[6];
    for (int k = 0; k < 5; k++) wd[k] = wv[k];
    const double eps[] = {0.0, 0.1, 1.0};
    for (int e = 0; e < 3; e++)
        for (int weighted = 0; weighted < 2; weighted++)
            for (int red = 0; red < 3; red++) {
                zl_tensor *l = zl_cross_entropy_ex(x, t, weighted ? w : NULL, -100, eps[e], (zl_reduction)red,
                                                   ZL_DTYPE_F32);
                double v = ref_ce(xv, n, c, tv, weighted ? wd : NULL, -100, eps[e], (zl_reduction)red, rows);
                CHECK(l != NULL);
                if (!l) continue;
                if (red == ZL_REDUCE_NONE) {
                    CHECK(zl_tensor_ndim(l) == 1 && zl_tensor_shape(l)[0] == n);
                    zt_check_values("cross_entropy_ex none", l, rows, 1e-6);
                    CHECK(zl_tensor_get(l, 2) == 0.0);
                } else {
                    CHECK(zl_tensor_ndim(l) == 0);
                    CHECK_CLOSE(zl_tensor_get(l, 0), v, 1e-6);
                }
                zl_tensor_release(l);
            }
    /* By hand: logits (0, 0), target 0, weights (2, 1), eps 0.5: log p = -ln 2
     * for both classes, so the row is 0.5 * 2 ln 2 + 0.25 * (2 + 1) ln 2 =
     * 1.75 ln 2, and the mean divides it by w[0] = 2. */
    zl_tensor *x2 = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1, 2)), *t2 = i64_of(SHAPE(1), (int64_t[]){0});
    zl_tensor *w2 = f32_of(SHAPE(2), (float[]){2.0f, 1.0f});
    zl_tensor *ln = zl_cross_entropy_ex(x2, t2, w2, -100, 0.5, ZL_REDUCE_NONE, ZL_DTYPE_F32);
    zl_tensor *lm = zl_cross_entropy_ex(x2, t2, w2, -100, 0.5, ZL_REDUCE_MEAN, ZL_DTYPE_F32);
    CHECK(ln && lm);
    if (ln) CHECK_CLOSE(zl_tensor_get(ln, 0), 1.75 * log(2.0), 1e-6);
    if (lm) CHECK_CLOSE(zl_tensor_get(lm, 0), 0.875 * log(2.0), 1e-6);
    /* 1-d logits with a 0-d target, and a bf16 loss. */
    zl_tensor *x1 = zl_tensor_select(x, 0, 3), *t0 = zl_tensor_scalar(ZL_DTYPE_I64, 2);
    zl_tensor *l1 = zl_cross_entropy_ex(x1, t0, w, -100, 0.2, ZL_REDUCE_MEAN, ZL_DTYPE_BF16);
    double r1;
    ref_ce(xv + 3 * c, 1, c, (int64_t[]){2}, wd, -100, 0.2, ZL_REDUCE_MEAN, &r1);
    CHECK(l1 && zl_tensor_ndim(l1) == 0 && zl_tensor_dtype(l1) == ZL_DTYPE_BF16);
    if (l1) CHECK_CLOSE(zl_tensor_get(l1, 0), r1, 1e-2);
    zl_tensor *objs[] = {l1, t0, x1, lm, ln, w2, t2, x2, w, t, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    free(xv);
}

/* Every target ignored: the mean is 0/0 = NaN, as torch's; sum and none are
 * zeros, smoothing or not, even for a row of -inf logits. */
TEST(cross_entropy_options_with_every_row_ignored)
{
    zl_tensor *x = zt_randn(SHAPE(3, 4)), *t = i64_of(SHAPE(3), (int64_t[]){-1, -1, -1});
    zl_tensor *w = zt_randn(SHAPE(4));
    for (int k = 0; k < 4; k++) zl_tensor_set(x, k, -INFINITY);
    zl_tensor *lm = zl_cross_entropy_ex(x, t, w, -1, 0.3, ZL_REDUCE_MEAN, ZL_DTYPE_F32);
    zl_tensor *ls = zl_cross_entropy_ex(x, t, w, -1, 0.3, ZL_REDUCE_SUM, ZL_DTYPE_F32);
    zl_tensor *ln = zl_cross_entropy_ex(x, t, NULL, -1, 0.3, ZL_REDUCE_NONE, ZL_DTYPE_F32);
    CHECK(lm && isnan(zl_tensor_get(lm, 0)));
    CHECK(ls && zl_tensor_get(ls, 0) == 0.0);
    for (int r = 0; ln && r < 3; r++) CHECK(zl_tensor_get(ln, r) == 0.0);
    zl_tensor *objs[] = {ln, ls, lm, w, t, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(cross_entropy_weight_and_smoothing_gradients)
{
    zl_tensor *t = i64_of(SHAPE(5), (int64_t[]){1, -100, 3, 0, 3});
    zl_tensor *w = f32_of(SHAPE(4), (float[]){0.5f, 2.0f, 1.5f, 0.75f});
    const struct { bool weighted; double eps; } opts[] = {{true, 0.0}, {false, 0.2}, {true, 0.3}, {true, 1.0}};
    for (size_t o = 0; o < sizeof opts / sizeof *opts; o++)
        for (int red = 0; red < 3; red++) {
            zl_tensor *x = leaf(SHAPE(5, 4));
            ce_case c = {t, opts[o].weighted ? w : NULL, -100, opts[o].eps, (zl_reduction)red};
            zt_gradcheck("cross_entropy_ex", ce_fn, &c, 1, &x, GC_H, GC_TOL);
            /* The ignored row gets exactly zero. */
            for (int k = 0; k < 4 && zl_tensor_grad(x); k++) CHECK(zl_tensor_get(zl_tensor_grad(x), 4 + k) == 0.0);
            zl_tensor_release(x);
        }
    /* A real class as ignore_index, and 1-d logits. */
    zl_tensor *x = leaf(SHAPE(5, 4)), *x1 = leaf(SHAPE(4)), *t0 = zl_tensor_scalar(ZL_DTYPE_I64, 2);
    zl_tensor *t3 = i64_of(SHAPE(5), (int64_t[]){1, 3, 3, 0, 2});
    ce_case c3 = {t3, w, 3, 0.25, ZL_REDUCE_MEAN}, c1 = {t0, w, -100, 0.25, ZL_REDUCE_NONE};
    zt_gradcheck("cross_entropy_ex ignore_index 3", ce_fn, &c3, 1, &x, GC_H, GC_TOL);
    zt_gradcheck("cross_entropy_ex 1-d", ce_fn, &c1, 1, &x1, GC_H, GC_TOL);
    /* The weights are constants: a weight that requires grad gets none. */
    zl_tensor *wg = leaf(SHAPE(4));
    zl_tensor *l = zl_cross_entropy_ex(x, t, wg, -100, 0.1, ZL_REDUCE_MEAN, ZL_DTYPE_F32);
    CHECK(l && zl_backward(l, NULL, false) == ZL_OK && zl_tensor_grad(wg) == NULL);
    zl_tensor *objs[] = {l, wg, t3, t0, x1, x, w, t};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

/* Without weight and smoothing, the new entry point is the old op, bit for
 * bit, forward and backward; bf16 logits read a row at a time with the
 * options give the bits of their f32 copy. */
TEST(cross_entropy_ex_plain_is_cross_entropy)
{
    zl_tensor *t = i64_of(SHAPE(6), (int64_t[]){3, -100, 40, 0, 99, 3});
    for (int red = 0; red < 3; red++) {
        zl_tensor *a = leaf(SHAPE(6, 100)), *b = zl_tensor_detach(a);
        zl_tensor_set_requires_grad(b, true);
        zl_tensor *la = zl_cross_entropy(a, t, -100, (zl_reduction)red);
        zl_tensor *lb = zl_cross_entropy_ex(b, t, NULL, -100, 0.0, (zl_reduction)red, ZL_DTYPE_F32);
        CHECK(same_bits(la, lb));
        zl_tensor *sa = la ? zl_sum(la, ZL_ALL_DIMS, false) : NULL, *sb = lb ? zl_sum(lb, ZL_ALL_DIMS, false) : NULL;
        CHECK(sa && sb && zl_backward(sa, NULL, false) == ZL_OK && zl_backward(sb, NULL, false) == ZL_OK);
        CHECK(same_bits(zl_tensor_grad(a), zl_tensor_grad(b)));
        zl_tensor *objs[] = {sb, sa, lb, la, b, a};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
    zl_tensor *w = zt_randn(SHAPE(100)), *x = zt_randn(SHAPE(6, 100));
    zl_tensor *xb = zl_tensor_to(x, ZL_DTYPE_BF16), *xc = zl_tensor_to(xb, ZL_DTYPE_F32);
    zl_tensor *lb = zl_cross_entropy_ex(xb, t, w, -100, 0.1, ZL_REDUCE_NONE, ZL_DTYPE_F32);
    zl_tensor *lc = zl_cross_entropy_ex(xc, t, w, -100, 0.1, ZL_REDUCE_NONE, ZL_DTYPE_F32);
    CHECK(same_bits(lb, lc));
    zl_tensor *objs[] = {lc, lb, xc, xb, x, w, t};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(cross_entropy_options_errors)
{
    zl_tensor *x = zt_randn(SHAPE(3, 4)), *t = i64_of(SHAPE(3), (int64_t[]){0, 1, 2});
    zl_tensor *w5 = zt_randn(SHAPE(5)), *w2d = zt_randn(SHAPE(1, 4));
    zl_tensor *wi = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(4));
    CHECK_ERR(zl_cross_entropy_ex(x, t, NULL, -100, -0.1, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: label_smoothing must be in [0, 1], got -0.1");
    CHECK_ERR(zl_cross_entropy_ex(x, t, NULL, -100, 1.5, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: label_smoothing must be in [0, 1], got 1.5");
    CHECK_ERR(zl_cross_entropy_ex(x, t, NULL, -100, NAN, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: label_smoothing must be in [0, 1], got nan");
    CHECK_ERR(zl_cross_entropy_ex(x, t, w5, -100, 0.0, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: weight must be 1-d with one entry per class, [4], got shape [5]");
    CHECK_ERR(zl_cross_entropy_ex(x, t, w2d, -100, 0.0, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: weight must be 1-d with one entry per class, [4], got shape [1, 4]");
    CHECK_ERR(zl_cross_entropy_ex(x, t, wi, -100, 0.0, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: weight must be a float tensor (f32, f16 or bf16), got i64");
    zl_tensor *bad = i64_of(SHAPE(3), (int64_t[]){0, 4, 1});
    CHECK_ERR(zl_cross_entropy_ex(x, bad, NULL, -100, 0.1, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: target 4 at position 1 is out of range for 4 classes");
    zl_tensor *objs[] = {bad, wi, w2d, w5, t, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

/* ---- embedding with padding_idx ---- */

/* The forward is embedding's; the gradient is embedding's with the padding
 * row zeroed, as torch's padding_idx. Finite differences do not apply to that
 * row (the forward reads it), so it is checked against the plain gradient. */
TEST(embedding_padding_row_gets_no_gradient)
{
    zl_tensor *w = leaf(SHAPE(6, 4)), *wp = zl_tensor_detach(w);
    zl_tensor_set_requires_grad(wp, true);
    zl_tensor *ix = i64_of(SHAPE(2, 4), (int64_t[]){2, 0, 2, 5, 1, 2, 3, 0});
    zl_tensor *g = zt_randn(SHAPE(2, 4, 4));
    zl_tensor *y = zl_embedding(w, ix), *yp = zl_embedding_padded(wp, ix, 2);
    CHECK(y && yp && zl_tensor_ndim(yp) == 3);
    if (y && yp) CHECK(memcmp(zl_tensor_data(y), zl_tensor_data(yp), 2 * 4 * 4 * sizeof(float)) == 0);
    CHECK(y && yp && zl_backward(y, g, false) == ZL_OK && zl_backward(yp, g, false) == ZL_OK);
    zl_tensor *gw = zl_tensor_grad(w), *gp = zl_tensor_grad(wp);
    CHECK(gw && gp);
    for (int64_t i = 0; gw && gp && i < 24; i++)
        CHECK(zl_tensor_get(gp, i) == (i / 4 == 2 ? 0.0 : zl_tensor_get(gw, i)));
    /* An index that never occurs as padding_idx changes nothing. */
    zl_tensor_set_grad(wp, NULL);
    zl_tensor *y4 = zl_embedding_padded(wp, ix, 4);
    CHECK(y4 && zl_backward(y4, g, false) == ZL_OK);
    CHECK(gw && same_bits(gw, zl_tensor_grad(wp)));
    zl_tensor *objs[] = {y4, yp, y, g, ix, wp, w};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *tied_padded_fn(zl_tensor **in, void *ix)
{
    zl_tensor *e = zl_embedding_padded(in[0], ix, 0);
    zl_tensor *y = e ? zl_linear(e, in[0], NULL) : NULL;
    zl_tensor_release(e);
    return y;
}

/* A weight tied to a linear (its gradient pending when the embedding's
 * arrives) still leaves the padding row to the linear alone. */
TEST(embedding_padded_tied_to_a_linear)
{
    zl_tensor *w = leaf(SHAPE(5, 3)), *ix = i64_of(SHAPE(2, 3), (int64_t[]){4, 0, 4, 2, 0, 4});
    zl_tensor *wd = zl_tensor_detach(w);
    zl_tensor *e = zl_embedding_padded(w, ix, 0), *ed = e ? zl_tensor_detach(e) : NULL;
    double *g[3];
    for (int part = 0; part < 3; part++) {
        zl_tensor_set_grad(w, NULL);
        zl_tensor *y = part == 0 ? tied_padded_fn(&w, ix) : part == 1 ? zl_linear(ed, w, NULL) : zl_linear(e, wd, NULL);
        zl_tensor *s = y ? zl_sum(y, ZL_ALL_DIMS, false) : NULL;
        CHECK(s && zl_backward(s, NULL, part == 2 ? false : true) == ZL_OK);
        g[part] = values(zl_tensor_grad(w));
        zl_tensor_release(y);
        zl_tensor_release(s);
    }
    for (int k = 0; k < 15; k++) CHECK_CLOSE(g[0][k], g[1][k] + g[2][k], 1e-6);
    for (int k = 0; k < 3; k++) CHECK(g[2][k] == 0.0);
    for (int part = 0; part < 3; part++) free(g[part]);
    zl_tensor *objs[] = {ed, e, wd, ix, w};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(embedding_padding_idx_errors)
{
    zl_tensor *w = zt_randn(SHAPE(6, 3)), *ix = i64_of(SHAPE(2), (int64_t[]){0, 1});
    CHECK_ERR(zl_embedding_padded(w, ix, 6),
              "embedding: padding_idx 6 is out of range for a weight of 6 rows (expected 0..5)");
    CHECK_ERR(zl_embedding_padded(w, ix, -1),
              "embedding: padding_idx -1 is out of range for a weight of 6 rows (expected 0..5)");
    CHECK_ERR(zl_embedding_padded(NULL, ix, 0), "embedding: argument 1 is NULL");
    zl_tensor_release(ix);
    zl_tensor_release(w);
}

/* ---- avg_pool2d ---- */

typedef struct {
    int64_t n, c, h, w;
    int kh, kw, sh, sw, ph, pw;
    bool count_pad;
} avg_case;

static int64_t out_len(int64_t in, int64_t k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

/* The definition: each window's in-image elements summed, over kh * kw or
 * over their count. */
static double *avg_reference(const avg_case *a, const double *x)
{
    int64_t oh = out_len(a->h, a->kh, a->sh, a->ph, 1), ow = out_len(a->w, a->kw, a->sw, a->pw, 1);
    double *y = malloc((size_t)(a->n * a->c * oh * ow) * sizeof *y);
    for (int64_t p = 0; p < a->n * a->c; p++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                double s = 0;
                int64_t cnt = 0;
                for (int ki = 0; ki < a->kh; ki++)
                    for (int kj = 0; kj < a->kw; kj++) {
                        int64_t ih = i * a->sh - a->ph + ki, iw = j * a->sw - a->pw + kj;
                        if (ih < 0 || ih >= a->h || iw < 0 || iw >= a->w) continue;
                        s += x[(p * a->h + ih) * a->w + iw];
                        cnt++;
                    }
                y[(p * oh + i) * ow + j] = s / (double)(a->count_pad ? a->kh * a->kw : cnt);
            }
    return y;
}

static const avg_case avg_cases[] = {
    {2, 3, 6, 5, 2, 2, 2, 2, 0, 0, true},
    {2, 2, 7, 6, 3, 3, 2, 2, 1, 1, true},
    {2, 2, 7, 6, 3, 3, 2, 2, 1, 1, false},
    {1, 3, 5, 8, 3, 2, 1, 3, 1, 1, false},
    {1, 2, 4, 4, 4, 4, 1, 1, 2, 2, true},
    {1, 2, 4, 4, 4, 4, 1, 1, 2, 2, false},
};

static zl_tensor *avg_fn(zl_tensor **in, void *p)
{
    const avg_case *a = p;
    return zl_avg_pool2d(in[0], a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->count_pad);
}

TEST(avg_pool2d_forward_and_gradients)
{
    for (size_t k = 0; k < sizeof avg_cases / sizeof *avg_cases; k++) {
        const avg_case *a = &avg_cases[k];
        zl_tensor *x = leaf(SHAPE(a->n, a->c, a->h, a->w));
        zl_tensor *y = avg_fn(&x, (void *)a);
        int64_t oh = out_len(a->h, a->kh, a->sh, a->ph, 1), ow = out_len(a->w, a->kw, a->sw, a->pw, 1);
        CHECK(y && zl_tensor_ndim(y) == 4 && zl_tensor_shape(y)[2] == oh && zl_tensor_shape(y)[3] == ow);
        double *xv = values(x), *ref = avg_reference(a, xv);
        if (y) zt_check_values("avg_pool2d", y, ref, 1e-6);
        zt_gradcheck("avg_pool2d", avg_fn, (void *)a, 1, &x, GC_H, GC_TOL);
        free(ref);
        free(xv);
        zl_tensor_release(y);
        zl_tensor_release(x);
    }
}

/* By hand: 1..16 in a 4x4 plane, 2x2 windows at stride 2, are the means of
 * four neighbours; a 2x2 plane of ones under a 3x3 window at stride 2 with
 * padding 1 has one output per corner, 4/9 counting the padding and 1 not. */
TEST(avg_pool2d_by_hand_and_bf16)
{
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = (float)(i + 1);
    zl_tensor *x = f32_of(SHAPE(1, 1, 4, 4), v), *y = zl_avg_pool2d(x, 2, 2, 2, 2, 0, 0, true);
    CHECK(y);
    if (y) zt_check_values("avg_pool2d 4x4", y, (double[]){3.5, 5.5, 11.5, 13.5}, 0);
    zl_tensor *ones = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1, 1, 2, 2), 1.0);
    zl_tensor *yi = zl_avg_pool2d(ones, 3, 3, 2, 2, 1, 1, true), *ye = zl_avg_pool2d(ones, 3, 3, 2, 2, 1, 1, false);
    CHECK(yi && ye && zl_tensor_numel(yi) == 1 && zl_tensor_numel(ye) == 1);
    if (yi) CHECK_CLOSE(zl_tensor_get(yi, 0), 4.0 / 9.0, 1e-7);
    if (ye) CHECK(zl_tensor_get(ye, 0) == 1.0);
    zl_tensor *xb = zl_tensor_to(x, ZL_DTYPE_BF16), *yb = zl_avg_pool2d(xb, 2, 2, 2, 2, 0, 0, true);
    CHECK(yb && zl_tensor_dtype(yb) == ZL_DTYPE_BF16);
    if (yb) zt_check_values("avg_pool2d bf16", yb, (double[]){3.5, 5.5, 11.5, 13.5}, 0);
    zl_tensor *objs[] = {yb, xb, ye, yi, ones, y, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(avg_pool2d_errors)
{
    zl_tensor *x = zt_randn(SHAPE(1, 2, 5, 5)), *x3 = zt_randn(SHAPE(2, 5, 5));
    zl_tensor *xi = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(1, 2, 5, 5));
    CHECK_ERR(zl_avg_pool2d(x, 3, 3, 1, 1, 2, 2, true),
              "avg_pool2d: padding (2, 2) must be at most half the kernel size (3, 3)");
    CHECK_ERR(zl_avg_pool2d(x, 0, 3, 1, 1, 0, 0, true), "avg_pool2d: kernel size must be positive, got (0, 3)");
    CHECK_ERR(zl_avg_pool2d(x, 2, 2, 0, 1, 0, 0, true), "avg_pool2d: stride must be positive, got (0, 1)");
    CHECK_ERR(zl_avg_pool2d(x, 2, 2, 1, 1, -1, 0, true), "avg_pool2d: padding must be non-negative, got (-1, 0)");
    CHECK_ERR(zl_avg_pool2d(x3, 2, 2, 1, 1, 0, 0, true),
              "avg_pool2d: input must be 4-d [N, C, H, W], got shape [2, 5, 5]");
    CHECK_ERR(zl_avg_pool2d(xi, 2, 2, 1, 1, 0, 0, true),
              "avg_pool2d: input must be a float tensor (f32, f16 or bf16), got i64");
    CHECK_ERR(zl_avg_pool2d(x, 6, 6, 1, 1, 0, 0, false),
              "avg_pool2d: output would be empty: input 5x5 with padding (0, 0) is smaller than the kernel 6x6");
    zl_tensor *objs[] = {xi, x3, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

/* ---- conv2d with dilation and groups ---- */

typedef struct {
    int64_t n, c, h, w, o, kh, kw;
    int sh, sw, ph, pw, dh, dw, groups;
    bool bias;
} conv_case;

/* y [N, O, oh, ow] by the definition: output channel o sees the input
 * channels of its group, tap (ki, kj) at ki * dh, kj * dw past the corner. */
static double *conv_reference(const conv_case *cc, const double *x, const double *w, const double *b)
{
    int64_t oh = out_len(cc->h, cc->kh, cc->sh, cc->ph, cc->dh), ow = out_len(cc->w, cc->kw, cc->sw, cc->pw, cc->dw);
    int64_t cg = cc->c / cc->groups, og = cc->o / cc->groups;
    double *y = malloc((size_t)(cc->n * cc->o * oh * ow) * sizeof *y);
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t o = 0; o < cc->o; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double s = b ? b[o] : 0.0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t ki = 0; ki < cc->kh; ki++)
                            for (int64_t kj = 0; kj < cc->kw; kj++) {
                                int64_t ih = i * cc->sh - cc->ph + ki * cc->dh, iw = j * cc->sw - cc->pw + kj * cc->dw;
                                if (ih < 0 || ih >= cc->h || iw < 0 || iw >= cc->w) continue;
                                int64_t ci = o / og * cg + c;
                                s += x[((n * cc->c + ci) * cc->h + ih) * cc->w + iw] *
                                     w[((o * cg + c) * cc->kh + ki) * cc->kw + kj];
                            }
                    y[((n * cc->o + o) * oh + i) * ow + j] = s;
                }
    return y;
}

static const conv_case conv_cases[] = {
    {2, 4, 6, 5, 6, 3, 2, 1, 1, 1, 0, 1, 1, 2, true},    /* two groups */
    {2, 3, 6, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3, false},   /* depthwise */
    {1, 2, 7, 6, 4, 3, 3, 2, 1, 1, 2, 1, 1, 2, true},    /* depthwise, two filters a channel, stride */
    {2, 2, 8, 7, 3, 3, 2, 1, 1, 0, 0, 2, 2, 1, true},    /* dilation 2 */
    {1, 3, 9, 8, 2, 3, 3, 2, 2, 2, 1, 2, 3, 1, false},   /* dilation (2, 3), stride and padding */
    {2, 4, 7, 7, 4, 2, 2, 2, 1, 1, 1, 3, 2, 2, true},    /* everything at once */
    {2, 4, 3, 3, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2, true},    /* 1x1, grouped: the direct path */
};

static zl_tensor *conv_fn(zl_tensor **in, void *p)
{
    const conv_case *cc = p;
    return zl_conv2d_ex(in[0], in[1], cc->bias ? in[2] : NULL, cc->sh, cc->sw, cc->ph, cc->pw, cc->dh, cc->dw,
                        cc->groups);
}

TEST(conv2d_ex_forward_and_gradients)
{
    for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
        const conv_case *cc = &conv_cases[k];
        zl_tensor *x = leaf(SHAPE(cc->n, cc->c, cc->h, cc->w));
        zl_tensor *w = leaf(SHAPE(cc->o, cc->c / cc->groups, cc->kh, cc->kw));
        zl_tensor *in[3] = {x, w, cc->bias ? leaf(SHAPE(cc->o)) : NULL};
        zl_tensor *y = conv_fn(in, (void *)cc);
        int64_t oh = out_len(cc->h, cc->kh, cc->sh, cc->ph, cc->dh);
        int64_t ow = out_len(cc->w, cc->kw, cc->sw, cc->pw, cc->dw);
        CHECK(y && zl_tensor_shape(y)[1] == cc->o && zl_tensor_shape(y)[2] == oh && zl_tensor_shape(y)[3] == ow);
        double *xv = values(in[0]), *wv = values(in[1]), *bv = cc->bias ? values(in[2]) : NULL;
        double *ref = conv_reference(cc, xv, wv, bv);
        if (y) zt_check_values("conv2d_ex", y, ref, 1e-5);
        zt_gradcheck("conv2d_ex", conv_fn, (void *)cc, cc->bias ? 3 : 2, in, GC_H, GC_TOL);
        free(xv); free(wv); free(bv); free(ref);
        zl_tensor_release(y);
        for (int i = 0; i < 3; i++) zl_tensor_release(in[i]);
    }
}

/* By hand: a 3x3 plane 1..9 under a 2x2 kernel of ones at dilation 2 reads
 * the four corners, 1 + 3 + 7 + 9 = 20. */
TEST(conv2d_ex_by_hand)
{
    float v[9];
    for (int i = 0; i < 9; i++) v[i] = (float)(i + 1);
    zl_tensor *x = f32_of(SHAPE(1, 1, 3, 3), v), *w = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1, 1, 2, 2), 1.0);
    zl_tensor *y = zl_conv2d_ex(x, w, NULL, 1, 1, 0, 0, 2, 2, 1);
    CHECK(y && zl_tensor_numel(y) == 1);
    if (y) CHECK(zl_tensor_get(y, 0) == 20.0);
    zl_tensor *objs[] = {y, w, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

/* conv2d is conv2d_ex at dilation 1 and one group, bit for bit. */
TEST(conv2d_is_conv2d_ex_plain)
{
    zl_tensor *x = leaf(SHAPE(2, 3, 7, 6)), *w = leaf(SHAPE(4, 3, 3, 2)), *b = leaf(SHAPE(4));
    zl_tensor *x2 = zl_tensor_detach(x), *w2 = zl_tensor_detach(w), *b2 = zl_tensor_detach(b);
    zl_tensor_set_requires_grad(x2, true);
    zl_tensor_set_requires_grad(w2, true);
    zl_tensor_set_requires_grad(b2, true);
    zl_tensor *y = zl_conv2d(x, w, b, 2, 1, 1, 1), *y2 = zl_conv2d_ex(x2, w2, b2, 2, 1, 1, 1, 1, 1, 1);
    CHECK(same_bits(y, y2));
    zl_tensor *g = y ? zt_randn(zl_tensor_ndim(y), zl_tensor_shape(y)) : NULL;
    CHECK(g && zl_backward(y, g, false) == ZL_OK && zl_backward(y2, g, false) == ZL_OK);
    CHECK(same_bits(zl_tensor_grad(x), zl_tensor_grad(x2)));
    CHECK(same_bits(zl_tensor_grad(w), zl_tensor_grad(w2)));
    CHECK(same_bits(zl_tensor_grad(b), zl_tensor_grad(b2)));
    zl_tensor *objs[] = {g, y2, y, b2, w2, x2, b, w, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(conv2d_ex_errors)
{
    zl_tensor *x = zt_randn(SHAPE(1, 4, 5, 5)), *w = zt_randn(SHAPE(6, 2, 3, 3)), *w3 = zt_randn(SHAPE(6, 3, 3, 3));
    zl_tensor *w5 = zt_randn(SHAPE(5, 2, 3, 3));
    CHECK_ERR(zl_conv2d_ex(x, w, NULL, 1, 1, 0, 0, 1, 1, 0), "conv2d: groups must be positive, got 0");
    CHECK_ERR(zl_conv2d_ex(x, w, NULL, 1, 1, 0, 0, 1, 1, 3),
              "conv2d: the input's channels are not a multiple of groups (shapes [1, 4, 5, 5] and [6, 2, 3, 3])");
    CHECK_ERR(zl_conv2d_ex(x, w5, NULL, 1, 1, 0, 0, 1, 1, 2),
              "conv2d: the weight's output channels are not a multiple of groups");
    CHECK_ERR(zl_conv2d_ex(x, w3, NULL, 1, 1, 0, 0, 1, 1, 2),
              "conv2d: input has 4 channels but the weight expects 6 (3 a group, 2 groups)");
    CHECK_ERR(zl_conv2d_ex(x, w, NULL, 1, 1, 0, 0, 0, 1, 2), "conv2d: dilation must be positive, got (0, 1)");
    CHECK_ERR(zl_conv2d_ex(x, w, NULL, 1, 1, 0, 0, 3, 1, 2),
              "conv2d: output would be empty: input 5x5 with padding (0, 0) is smaller than the kernel 3x3 "
              "dilated to 7x3 (stride (1, 1); input [1, 4, 5, 5], weight [6, 2, 3, 3])");
    zl_tensor *objs[] = {w5, w3, w, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}
