/* Neural-network ops: softmax and log_softmax, cross_entropy, mse_loss,
 * layer_norm, embedding and dropout. Forward against plain double references,
 * gradients against finite differences, reductions and ignore_index, dropout
 * statistics and reproducibility, bf16 inputs, and every bad-input message. */
#include <stdlib.h>
#include <string.h>
#include "gradcheck.h"

#define GC_H 1e-3
#define GC_TOL 1e-2

static zl_tensor *leaf(zl_dtype dt, int ndim, const int64_t *shape)
{
    zl_tensor *t = zl_tensor_randn(dt, ndim, shape, NULL);
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

static bool same_shape(const zl_tensor *t, int ndim, const int64_t *shape)
{
    if (zl_tensor_ndim(t) != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (zl_tensor_shape(t)[i] != shape[i]) return false;
    return true;
}

static zl_tensor *indices_of(zl_dtype dt, int ndim, const int64_t *shape, const int64_t *v)
{
    zl_tensor *t = zl_tensor_new(dt, ndim, shape, ZL_MEM_OTHER);
    for (int64_t i = 0; i < zl_tensor_numel(t); i++) zl_tensor_set(t, i, (double)v[i]);
    return t;
}

/* ---- softmax / log_softmax ---- */

static void ref_softmax(bool is_log, const double *x, int ndim, const int64_t *shape, int dim, double *y)
{
    int64_t outer = 1, d = ndim ? shape[dim] : 1, inner = 1;
    for (int i = 0; i < dim; i++) outer *= shape[i];
    for (int i = dim + 1; i < ndim; i++) inner *= shape[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *xr = x + o * d * inner + i;
            double *yr = y + o * d * inner + i;
            double m = -INFINITY, s = 0;
            for (int64_t k = 0; k < d; k++) m = fmax(m, xr[k * inner]);
            for (int64_t k = 0; k < d; k++) s += exp(xr[k * inner] - m);
            for (int64_t k = 0; k < d; k++)
                yr[k * inner] = is_log ? xr[k * inner] - m - log(s) : exp(xr[k * inner] - m) / s;
        }
}

typedef struct { int ndim; int64_t shape[4]; int dim; double scale; } sm_case;

TEST(softmax_forward_matches_reference)
{
    sm_case cases[] = {
        {1, {7}, 0, 1},        {2, {3, 5}, 1, 1},     {2, {3, 5}, 0, 1},     {2, {3, 5}, -1, 1},
        {3, {2, 3, 4}, 1, 1},  {3, {2, 3, 4}, -3, 1}, {3, {2, 1, 5}, 1, 1},  {4, {2, 3, 2, 3}, 2, 2},
        {2, {4, 6}, 1, 500},   {0, {0}, 0, 1},        {2, {300, 200}, 0, 1}, {2, {200, 300}, 1, 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sm_case k = cases[c];
        /* A large scale makes exp overflow unless the max is subtracted. */
        zl_tensor *r = zl_tensor_randn(ZL_DTYPE_F32, k.ndim, k.shape, NULL), *x = zl_affine(r, k.scale, 0);
        double *xv = values(x), *ref = malloc((size_t)zl_tensor_numel(x) * sizeof *ref);
        int dim = k.dim < 0 ? k.dim + k.ndim : k.dim;
        for (int is_log = 0; is_log < 2; is_log++) {
            zl_tensor *y = is_log ? zl_log_softmax(x, k.dim) : zl_softmax(x, k.dim);
            CHECK(y && same_shape(y, k.ndim, k.shape) && zl_tensor_dtype(y) == ZL_DTYPE_F32);
            ref_softmax(is_log, xv, k.ndim, k.shape, dim, ref);
            if (y) zt_check_values(is_log ? "log_softmax" : "softmax", y, ref, 1e-5);
            zl_tensor_release(y);
        }
        free(xv);
        free(ref);
        zl_tensor_release(r);
        zl_tensor_release(x);
    }
}

TEST(softmax_non_contiguous_and_bf16)
{
    zl_tensor *a = zt_randn(SHAPE(4, 3)), *t = zl_tensor_transpose(a, 0, 1);   /* [3, 4], strided */
    double *xv = values(t), ref[12];
    zl_tensor *y = zl_softmax(t, 1);
    ref_softmax(false, xv, 2, (int64_t[]){3, 4}, 1, ref);
    CHECK(y && zt_check_values("softmax(transposed)", y, ref, 1e-5) == 0);
    zl_tensor_release(y);
    free(xv);

    /* bf16 in, bf16 out, computed in f32: compare with the reference on the
     * bf16-rounded inputs, to bf16's precision. */
    zl_tensor *xb = leaf(ZL_DTYPE_BF16, SHAPE(3, 4));
    xv = values(xb);
    for (int is_log = 0; is_log < 2; is_log++) {
        zl_tensor *yb = is_log ? zl_log_softmax(xb, -1) : zl_softmax(xb, -1);
        CHECK(yb && zl_tensor_dtype(yb) == ZL_DTYPE_BF16);
        ref_softmax(is_log, xv, 2, (int64_t[]){3, 4}, 1, ref);
        if (yb) zt_check_values("softmax bf16", yb, ref, 1e-2);
        zl_tensor *s = zl_sum(yb, ZL_ALL_DIMS, false);
        CHECK(zl_backward(s, NULL, false) == ZL_OK);
        CHECK(zl_tensor_grad(xb) && zl_tensor_dtype(zl_tensor_grad(xb)) == ZL_DTYPE_BF16);
        zl_tensor_set_grad(xb, NULL);
        zl_tensor_release(s);
        zl_tensor_release(yb);
    }
    free(xv);
    zl_tensor_release(xb);
    zl_tensor_release(t);
    zl_tensor_release(a);
}

typedef struct { int dim; bool is_log; } sm_ctx;

static zl_tensor *softmax_fn(zl_tensor **in, void *ctx)
{
    sm_ctx *c = ctx;
    return c->is_log ? zl_log_softmax(in[0], c->dim) : zl_softmax(in[0], c->dim);
}

TEST(softmax_gradients)
{
    sm_case cases[] = {
        {1, {6}, 0, 1}, {2, {3, 4}, 1, 1}, {2, {3, 4}, 0, 1}, {3, {2, 3, 4}, 1, 1}, {3, {2, 3, 2}, -3, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int is_log = 0; is_log < 2; is_log++) {
            zl_tensor *x = leaf(ZL_DTYPE_F32, cases[c].ndim, cases[c].shape);
            sm_ctx ctx = {cases[c].dim, is_log};
            zt_gradcheck(is_log ? "log_softmax" : "softmax", softmax_fn, &ctx, 1, &x, GC_H, GC_TOL);
            zl_tensor_release(x);
        }
}

TEST(softmax_errors)
{
    zl_tensor *x = zt_randn(SHAPE(2, 3)), *i = zl_tensor_arange(ZL_DTYPE_I64, 3);
    CHECK_ERR(zl_softmax(x, 2), "softmax: dimension 2 is out of range for a 2-d tensor");
    CHECK_ERR(zl_log_softmax(x, -3), "log_softmax: dimension -3 is out of range for a 2-d tensor");
    zl_tensor *s = zl_tensor_scalar(ZL_DTYPE_F32, 3.0);
    CHECK_ERR(zl_softmax(s, 1), "softmax: dimension 1 is out of range for a 0-d tensor");
    zl_tensor_release(s);
    CHECK_ERR(zl_softmax(i, 0), "softmax: input must be a float tensor (f32, f16 or bf16), got i64");
    CHECK_ERR(zl_softmax(NULL, 0), "softmax: argument 1 is NULL");
    zl_tensor_release(x);
    zl_tensor_release(i);
}

/* ---- cross_entropy ---- */

/* Per-row losses (0 on ignored rows) and the count of rows not ignored. */
static int64_t ref_ce_rows(const double *x, int64_t n, int64_t c, const int64_t *t, int64_t ignore, double *loss)
{
    int64_t count = 0;
    for (int64_t r = 0; r < n; r++) {
        if (t[r] == ignore) { loss[r] = 0; continue; }
        double m = -INFINITY, s = 0;
        for (int64_t k = 0; k < c; k++) m = fmax(m, x[r * c + k]);
        for (int64_t k = 0; k < c; k++) s += exp(x[r * c + k] - m);
        loss[r] = m + log(s) - x[r * c + t[r]];
        count++;
    }
    return count;
}

TEST(cross_entropy_forward_reductions_and_ignore)
{
    int64_t n = 6, c = 5;
    int64_t tv[6] = {0, 4, -100, 2, 2, 3};
    zl_tensor *logits = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(6, 5), NULL);
    double *x = values(logits), rows[6];
    for (int dt = 0; dt < 2; dt++) {
        zl_tensor *t = indices_of(dt ? ZL_DTYPE_I32 : ZL_DTYPE_I64, SHAPE(6), tv);
        int64_t count = ref_ce_rows(x, n, c, tv, -100, rows);
        double sum = 0;
        for (int64_t r = 0; r < n; r++) sum += rows[r];
        zl_tensor *lm = zl_cross_entropy(logits, t, -100, ZL_REDUCE_MEAN);
        zl_tensor *ls = zl_cross_entropy(logits, t, -100, ZL_REDUCE_SUM);
        zl_tensor *ln = zl_cross_entropy(logits, t, -100, ZL_REDUCE_NONE);
        CHECK(lm && zl_tensor_ndim(lm) == 0 && ls && zl_tensor_ndim(ls) == 0 && ln && same_shape(ln, SHAPE(6)));
        CHECK(count == 5);
        if (lm) CHECK_CLOSE(zl_tensor_get(lm, 0), sum / (double)count, 1e-6);
        if (ls) CHECK_CLOSE(zl_tensor_get(ls, 0), sum, 1e-6);
        if (ln) zt_check_values("cross_entropy none", ln, rows, 1e-6);
        if (ln) CHECK(zl_tensor_get(ln, 2) == 0.0);
        zl_tensor_release(lm); zl_tensor_release(ls); zl_tensor_release(ln); zl_tensor_release(t);
    }
    /* ignore_index may be a real class: every row of class 2 drops out. */
    {
        zl_tensor *t = indices_of(ZL_DTYPE_I64, SHAPE(6), (int64_t[]){0, 4, 1, 2, 2, 3});
        int64_t count = ref_ce_rows(x, n, c, (int64_t[]){0, 4, 1, 2, 2, 3}, 2, rows);
        double sum = 0;
        for (int64_t r = 0; r < n; r++) sum += rows[r];
        zl_tensor *lm = zl_cross_entropy(logits, t, 2, ZL_REDUCE_MEAN);
        CHECK(count == 4 && lm);
        if (lm) CHECK_CLOSE(zl_tensor_get(lm, 0), sum / 4.0, 1e-6);
        zl_tensor_release(lm);
        zl_tensor_release(t);
    }
    /* Every target ignored: mean is NaN (0/0) as in PyTorch, sum is 0, none all
     * zeros, and the gradient is zero everywhere. */
    {
        zl_tensor *t = indices_of(ZL_DTYPE_I64, SHAPE(6), (int64_t[]){-1, -1, -1, -1, -1, -1});
        zl_tensor *lg = zl_tensor_clone(logits);
        zl_tensor_set_requires_grad(lg, true);
        zl_tensor *lm = zl_cross_entropy(lg, t, -1, ZL_REDUCE_MEAN);
        zl_tensor *ls = zl_cross_entropy(lg, t, -1, ZL_REDUCE_SUM);
        zl_tensor *ln = zl_cross_entropy(lg, t, -1, ZL_REDUCE_NONE);
        CHECK(lm && isnan(zl_tensor_get(lm, 0)));
        CHECK(ls && zl_tensor_get(ls, 0) == 0.0);
        for (int64_t r = 0; r < n; r++) CHECK(ln && zl_tensor_get(ln, r) == 0.0);
        CHECK(zl_backward(lm, NULL, false) == ZL_OK);
        zl_tensor *g = zl_tensor_grad(lg);
        for (int64_t i = 0; g && i < n * c; i++) CHECK(zl_tensor_get(g, i) == 0.0);
        zl_tensor_release(lm); zl_tensor_release(ls); zl_tensor_release(ln);
        zl_tensor_release(lg); zl_tensor_release(t);
    }
    /* 1-D logits with a 0-d target. */
    {
        zl_tensor *l1 = zl_tensor_select(logits, 0, 3), *t0 = zl_tensor_scalar(ZL_DTYPE_I64, 2);
        double r1;
        ref_ce_rows(x + 3 * c, 1, c, (int64_t[]){2}, -100, &r1);
        zl_tensor *lm = zl_cross_entropy(l1, t0, -100, ZL_REDUCE_MEAN);
        zl_tensor *ln = zl_cross_entropy(l1, t0, -100, ZL_REDUCE_NONE);
        CHECK(lm && zl_tensor_ndim(lm) == 0 && ln && zl_tensor_ndim(ln) == 0);
        if (lm) CHECK_CLOSE(zl_tensor_get(lm, 0), r1, 1e-6);
        if (ln) CHECK_CLOSE(zl_tensor_get(ln, 0), r1, 1e-6);
        zl_tensor_release(lm); zl_tensor_release(ln); zl_tensor_release(l1); zl_tensor_release(t0);
    }
    free(x);
    zl_tensor_release(logits);
}

/* bf16 and f16 logits are read a row at a time (no f32 copy of the whole
 * [N, C]) and their gradient rounded from the row's f32 values: the loss in
 * f32 and the gradient must be exactly those of the f32 copy's path, at every
 * reduction, with ignored rows, on one thread and on several. */
TEST(cross_entropy_half_rows_match_the_f32_copy)
{
    zl_dtype dts[2] = {ZL_DTYPE_BF16, ZL_DTYPE_F16};
    zl_reduction reds[3] = {ZL_REDUCE_MEAN, ZL_REDUCE_SUM, ZL_REDUCE_NONE};
    int64_t tv[6] = {3, -100, 40, 0, 99, 3};
    zl_tensor *t = indices_of(ZL_DTYPE_I64, SHAPE(6), tv);
    for (int d = 0; d < 2; d++)
        for (int r = 0; r < 3; r++) {
            zl_tensor *x = leaf(dts[d], SHAPE(6, 100));
            CHECK(zl_tensor_set_grad_dtype(x, ZL_DTYPE_F32) == ZL_OK);   /* the rounding shows */
            zl_tensor *xt = zl_tensor_to(x, ZL_DTYPE_F32), *xc = zl_tensor_detach(xt);
            zl_tensor_release(xt);
            zl_tensor_set_requires_grad(xc, true);
            zl_tensor *fused = zl_cross_entropy_as(x, t, -100, reds[r], ZL_DTYPE_F32);
            zl_tensor *ref = zl_cross_entropy(xc, t, -100, reds[r]);
            CHECK(fused && ref && zl_tensor_dtype(fused) == ZL_DTYPE_F32);
            int64_t n = fused ? zl_tensor_numel(fused) : 0;
            for (int64_t i = 0; fused && ref && i < n; i++)
                CHECK(zl_tensor_get(fused, i) == zl_tensor_get(ref, i));
            zl_tensor *s1 = fused ? zl_sum(fused, ZL_ALL_DIMS, false) : NULL, *s2 = ref ? zl_sum(ref, ZL_ALL_DIMS, false) : NULL;
            CHECK(s1 && s2 && zl_backward(s1, NULL, false) == ZL_OK && zl_backward(s2, NULL, false) == ZL_OK);
            zl_tensor *g = zl_tensor_grad(x), *gref = zl_tensor_grad(xc);
            zl_tensor *gr = gref ? zl_tensor_to(gref, dts[d]) : NULL;
            CHECK(g && gr && zl_tensor_dtype(g) == ZL_DTYPE_F32);
            for (int64_t i = 0; g && gr && i < zl_tensor_numel(g); i++)
                CHECK(zl_tensor_get(g, i) == zl_tensor_get(gr, i));
            zl_tensor_release(gr); zl_tensor_release(s1); zl_tensor_release(s2);
            zl_tensor_release(fused); zl_tensor_release(ref); zl_tensor_release(xc); zl_tensor_release(x);
        }
    zl_tensor *x = leaf(ZL_DTYPE_BF16, SHAPE(6, 100));
    /* A strided view takes the copy's path, and rounds the same way. */
    zl_tensor *wide = leaf(ZL_DTYPE_BF16, SHAPE(6, 120)), *view = zl_tensor_narrow(wide, 1, 10, 100);
    zl_tensor *vc = zl_tensor_contiguous(view), *dense = zl_tensor_detach(vc);
    zl_tensor_set_requires_grad(dense, true);
    /* f32 gradients on the leaves, so that the rounding shows. */
    CHECK(zl_tensor_set_grad_dtype(wide, ZL_DTYPE_F32) == ZL_OK && zl_tensor_set_grad_dtype(dense, ZL_DTYPE_F32) == ZL_OK);
    CHECK(!zl_tensor_is_contiguous(view));
    zl_tensor *a = zl_cross_entropy_as(view, t, -100, ZL_REDUCE_SUM, ZL_DTYPE_F32);
    zl_tensor *b = zl_cross_entropy_as(dense, t, -100, ZL_REDUCE_SUM, ZL_DTYPE_F32);
    CHECK(a && b && zl_tensor_get(a, 0) == zl_tensor_get(b, 0));
    CHECK(a && b && zl_backward(a, NULL, false) == ZL_OK && zl_backward(b, NULL, false) == ZL_OK);
    zl_tensor *gw = zl_tensor_grad(wide), *gd = zl_tensor_grad(dense);
    for (int64_t r = 0; gw && gd && r < 6; r++)
        for (int64_t c = 0; c < 100; c++) CHECK(zl_tensor_get(gw, r * 120 + 10 + c) == zl_tensor_get(gd, r * 100 + c));
    zl_tensor_release(a); zl_tensor_release(b); zl_tensor_release(dense); zl_tensor_release(vc);
    zl_tensor_release(view); zl_tensor_release(wide);
    CHECK(zl_cross_entropy_as(x, t, -100, ZL_REDUCE_MEAN, ZL_DTYPE_I64) == NULL);
    CHECK(strstr(zl_last_error(), "the loss's dtype must be f32, bf16 or f16, got i64") != NULL);
    zl_tensor_release(x);
    zl_tensor_release(t);
}

TEST(cross_entropy_large_logits_and_bf16)
{
    /* Logits around 1e4: a naive exp overflows, the max-shifted one does not. */
    zl_tensor *r = zt_randn(SHAPE(4, 7)), *logits = zl_affine(r, 50.0, 1e4);
    int64_t tv[4] = {6, 0, 3, 3};
    zl_tensor *t = indices_of(ZL_DTYPE_I64, SHAPE(4), tv);
    double *x = values(logits), rows[4];
    ref_ce_rows(x, 4, 7, tv, -100, rows);
    zl_tensor *ln = zl_cross_entropy(logits, t, -100, ZL_REDUCE_NONE);
    CHECK(ln && zt_check_values("cross_entropy large", ln, rows, 1e-3) == 0);
    zl_tensor_release(ln);
    free(x);

    zl_tensor *lb = leaf(ZL_DTYPE_BF16, SHAPE(4, 7));
    x = values(lb);
    ref_ce_rows(x, 4, 7, tv, -100, rows);
    zl_tensor *lm = zl_cross_entropy(lb, t, -100, ZL_REDUCE_MEAN);
    CHECK(lm && zl_tensor_dtype(lm) == ZL_DTYPE_BF16);
    if (lm) CHECK_CLOSE(zl_tensor_get(lm, 0), (rows[0] + rows[1] + rows[2] + rows[3]) / 4, 1e-2);
    CHECK(lm && zl_backward(lm, NULL, false) == ZL_OK);
    zl_tensor *g = zl_tensor_grad(lb);
    CHECK(g && zl_tensor_dtype(g) == ZL_DTYPE_BF16);
    /* Each row's gradient is (softmax - onehot) / 4: it sums to zero. */
    for (int64_t i = 0; g && i < 4; i++) {
        double s = 0;
        for (int64_t k = 0; k < 7; k++) s += zl_tensor_get(g, i * 7 + k);
        CHECK_CLOSE(s, 0.0, 1e-2);
    }
    free(x);
    zl_tensor_release(lm); zl_tensor_release(lb); zl_tensor_release(t);
    zl_tensor_release(logits); zl_tensor_release(r);
}

typedef struct { zl_tensor *target; int64_t ignore; zl_reduction red; } ce_ctx;

static zl_tensor *ce_fn(zl_tensor **in, void *ctx)
{
    ce_ctx *c = ctx;
    return zl_cross_entropy(in[0], c->target, c->ignore, c->red);
}

TEST(cross_entropy_gradients)
{
    zl_tensor *t = indices_of(ZL_DTYPE_I64, SHAPE(5), (int64_t[]){1, -100, 3, 0, 3});
    zl_tensor *t0 = indices_of(ZL_DTYPE_I32, 0, NULL, (int64_t[]){2});
    for (int red = 0; red < 3; red++) {
        zl_tensor *x = leaf(ZL_DTYPE_F32, SHAPE(5, 4));
        ce_ctx c = {t, -100, (zl_reduction)red};
        zt_gradcheck("cross_entropy", ce_fn, &c, 1, &x, GC_H, GC_TOL);
        /* The ignored row gets exactly zero. */
        for (int k = 0; k < 4 && zl_tensor_grad(x); k++) CHECK(zl_tensor_get(zl_tensor_grad(x), 4 + k) == 0.0);
        zl_tensor_release(x);
        zl_tensor *x1 = leaf(ZL_DTYPE_F32, SHAPE(6));
        ce_ctx c1 = {t0, -100, (zl_reduction)red};
        zt_gradcheck("cross_entropy 1-d", ce_fn, &c1, 1, &x1, GC_H, GC_TOL);
        zl_tensor_release(x1);
    }
    zl_tensor_release(t);
    zl_tensor_release(t0);
}

TEST(cross_entropy_errors)
{
    zl_tensor *x = zt_randn(SHAPE(3, 5)), *x3 = zt_randn(SHAPE(2, 3, 5)), *xi = zl_tensor_arange(ZL_DTYPE_I64, 5);
    zl_tensor *t = indices_of(ZL_DTYPE_I64, SHAPE(3), (int64_t[]){0, 4, 5});
    zl_tensor *tn = indices_of(ZL_DTYPE_I64, SHAPE(3), (int64_t[]){-1, 0, 0});
    zl_tensor *t2 = indices_of(ZL_DTYPE_I64, SHAPE(2), (int64_t[]){0, 0});
    zl_tensor *tf = zt_randn(SHAPE(3));
    CHECK_ERR(zl_cross_entropy(x, t, -100, ZL_REDUCE_MEAN),
              "cross_entropy: target 5 at position 2 is out of range for 5 classes "
              "(expected 0..4, or ignore_index -100)");
    CHECK_ERR(zl_cross_entropy(x, tn, -100, ZL_REDUCE_SUM), "target -1 at position 0 is out of range for 5 classes");
    CHECK_ERR(zl_cross_entropy(x, t2, -100, ZL_REDUCE_MEAN), "(shapes [3, 5] and [2])");
    CHECK_ERR(zl_cross_entropy(x3, t2, -100, ZL_REDUCE_MEAN),
              "cross_entropy: expected logits [N, C] with target [N], or logits [C] with target [] "
              "(shapes [2, 3, 5] and [2])");
    CHECK_ERR(zl_cross_entropy(x, tf, -100, ZL_REDUCE_MEAN),
              "cross_entropy: target must be an integer tensor (i64 or i32), got f32");
    CHECK_ERR(zl_cross_entropy(xi, t, -100, ZL_REDUCE_MEAN), "cross_entropy: logits must be a float tensor");
    CHECK_ERR(zl_cross_entropy(x, t2, -100, (zl_reduction)7), "cross_entropy: unknown reduction 7");
    zl_tensor *all[] = {x, x3, xi, t, tn, t2, tf};
    for (int k = 0; k < 7; k++) zl_tensor_release(all[k]);
}

/* ---- mse_loss ---- */

static zl_tensor *mse_fn(zl_tensor **in, void *ctx)
{
    return zl_mse_loss(in[0], in[1], *(zl_reduction *)ctx);
}

TEST(mse_forward_and_gradients)
{
    struct { int ndim; int64_t shape[3]; } cases[] = {{2, {3, 4}}, {3, {2, 3, 2}}, {0, {0}}, {1, {1}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        zl_tensor *in[2] = {leaf(ZL_DTYPE_F32, cases[c].ndim, cases[c].shape),
                            leaf(ZL_DTYPE_F32, cases[c].ndim, cases[c].shape)};
        int64_t n = zl_tensor_numel(in[0]);
        double *a = values(in[0]), *b = values(in[1]), *sq = malloc((size_t)n * sizeof *sq), s = 0;
        for (int64_t i = 0; i < n; i++) { sq[i] = (a[i] - b[i]) * (a[i] - b[i]); s += sq[i]; }
        zl_tensor *lm = zl_mse_loss(in[0], in[1], ZL_REDUCE_MEAN), *ls = zl_mse_loss(in[0], in[1], ZL_REDUCE_SUM);
        zl_tensor *ln = zl_mse_loss(in[0], in[1], ZL_REDUCE_NONE);
        CHECK(lm && zl_tensor_ndim(lm) == 0 && ls && zl_tensor_ndim(ls) == 0);
        CHECK(ln && same_shape(ln, cases[c].ndim, cases[c].shape));
        if (lm) CHECK_CLOSE(zl_tensor_get(lm, 0), s / (double)n, 1e-6);
        if (ls) CHECK_CLOSE(zl_tensor_get(ls, 0), s, 1e-6);
        if (ln) zt_check_values("mse none", ln, sq, 1e-6);
        zl_tensor_release(lm); zl_tensor_release(ls); zl_tensor_release(ln);
        free(a); free(b); free(sq);
        for (int red = 0; red < 3; red++) {
            zl_reduction r = (zl_reduction)red;
            zt_gradcheck("mse_loss", mse_fn, &r, 2, in, GC_H, GC_TOL);
        }
        /* Only the target requiring grad: the input gets nothing, the target its gradient. */
        zl_tensor_set_requires_grad(in[0], false);
        zl_reduction r = ZL_REDUCE_SUM;
        zt_gradcheck("mse_loss target only", mse_fn, &r, 2, in, GC_H, GC_TOL);
        zl_tensor_release(in[0]);
        zl_tensor_release(in[1]);
    }
}

TEST(mse_bf16_and_errors)
{
    zl_tensor *a = leaf(ZL_DTYPE_BF16, SHAPE(3, 4)), *b = zl_tensor_randn(ZL_DTYPE_BF16, SHAPE(3, 4), NULL);
    double *av = values(a), *bv = values(b), s = 0;
    for (int i = 0; i < 12; i++) s += (av[i] - bv[i]) * (av[i] - bv[i]);
    zl_tensor *l = zl_mse_loss(a, b, ZL_REDUCE_MEAN);
    CHECK(l && zl_tensor_dtype(l) == ZL_DTYPE_BF16);
    if (l) CHECK_CLOSE(zl_tensor_get(l, 0), s / 12, 1e-2);
    CHECK(l && zl_backward(l, NULL, false) == ZL_OK);
    CHECK(zl_tensor_grad(a) && zl_tensor_dtype(zl_tensor_grad(a)) == ZL_DTYPE_BF16);
    for (int i = 0; i < 12 && zl_tensor_grad(a); i++)
        CHECK_CLOSE(zl_tensor_get(zl_tensor_grad(a), i), (av[i] - bv[i]) / 6, 1e-2);
    free(av); free(bv);
    zl_tensor *x = zt_randn(SHAPE(3, 4)), *y = zt_randn(SHAPE(4, 3)), *z = zt_randn(SHAPE(4));
    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 4);
    CHECK_ERR(zl_mse_loss(x, y, ZL_REDUCE_MEAN),
              "mse_loss: input and target must have the same shape (shapes [3, 4] and [4, 3])");
    CHECK_ERR(zl_mse_loss(x, z, ZL_REDUCE_MEAN), "(shapes [3, 4] and [4])");
    CHECK_ERR(zl_mse_loss(z, i, ZL_REDUCE_MEAN), "mse_loss: target must be a float tensor (f32, f16 or bf16), got i64");
    CHECK_ERR(zl_mse_loss(i, z, ZL_REDUCE_MEAN), "mse_loss: input must be a float tensor");
    CHECK_ERR(zl_mse_loss(x, x, (zl_reduction)-1), "mse_loss: unknown reduction -1");
    zl_tensor *all[] = {a, b, l, x, y, z, i};
    for (int k = 0; k < 7; k++) zl_tensor_release(all[k]);
}

/* ---- layer_norm ---- */

static void ref_layer_norm(const double *x, int64_t rows, int64_t m, const double *w, const double *b, double eps,
                           double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * m;
        double mu = 0, var = 0;
        for (int64_t j = 0; j < m; j++) mu += xr[j];
        mu /= (double)m;
        for (int64_t j = 0; j < m; j++) var += (xr[j] - mu) * (xr[j] - mu);
        var /= (double)m;   /* biased, as PyTorch */
        for (int64_t j = 0; j < m; j++)
            y[r * m + j] = (xr[j] - mu) / sqrt(var + eps) * (w ? w[j] : 1) + (b ? b[j] : 0);
    }
}

typedef struct { int ndim; int64_t shape[4]; int nnorm; bool w, b; } ln_case;

static const ln_case ln_cases[] = {
    {2, {4, 6}, 1, true, true},     {3, {2, 3, 4}, 2, true, false}, {3, {2, 3, 4}, 3, false, false},
    {2, {3, 5}, 1, false, true},    {1, {8}, 1, true, true},        {4, {2, 2, 3, 4}, 1, true, true},
};

typedef struct { int nnorm; bool w, b; double eps; } ln_ctx;

static zl_tensor *ln_fn(zl_tensor **in, void *ctx)
{
    ln_ctx *c = ctx;
    return zl_layer_norm(in[0], c->nnorm, c->w ? in[1] : NULL, c->b ? in[c->w ? 2 : 1] : NULL, c->eps);
}

TEST(layer_norm_forward_and_gradients)
{
    for (size_t c = 0; c < sizeof ln_cases / sizeof ln_cases[0]; c++) {
        ln_case k = ln_cases[c];
        const int64_t *tail = k.shape + k.ndim - k.nnorm;
        zl_tensor *in[3] = {leaf(ZL_DTYPE_F32, k.ndim, k.shape), NULL, NULL};
        int nin = 1;
        if (k.w) in[nin++] = leaf(ZL_DTYPE_F32, k.nnorm, tail);
        if (k.b) in[nin++] = leaf(ZL_DTYPE_F32, k.nnorm, tail);
        int64_t m = 1;
        for (int i = 0; i < k.nnorm; i++) m *= tail[i];
        ln_ctx ctx = {k.nnorm, k.w, k.b, 1e-5};
        double *x = values(in[0]), *w = k.w ? values(in[1]) : NULL, *b = k.b ? values(in[nin - 1]) : NULL;
        double *ref = malloc((size_t)zl_tensor_numel(in[0]) * sizeof *ref);
        ref_layer_norm(x, zl_tensor_numel(in[0]) / m, m, w, b, 1e-5, ref);
        zl_tensor *y = ln_fn(in, &ctx);
        CHECK(y && same_shape(y, k.ndim, k.shape));
        if (y) zt_check_values("layer_norm", y, ref, 1e-5);
        zl_tensor_release(y);
        zt_gradcheck("layer_norm", ln_fn, &ctx, nin, in, GC_H, GC_TOL);
        free(x); free(w); free(b); free(ref);
        for (int i = 0; i < nin; i++) zl_tensor_release(in[i]);
    }
}

TEST(layer_norm_bf16_determinism_and_errors)
{
    /* bf16 activations with f32 weight: output in the input's dtype. */
    zl_tensor *xb = leaf(ZL_DTYPE_BF16, SHAPE(3, 8));
    zl_tensor *w = leaf(ZL_DTYPE_F32, SHAPE(8)), *b = leaf(ZL_DTYPE_F32, SHAPE(8));
    double *x = values(xb), *wv = values(w), *bv = values(b), ref[24];
    ref_layer_norm(x, 3, 8, wv, bv, 1e-5, ref);
    zl_tensor *y = zl_layer_norm(xb, 1, w, b, 1e-5);
    CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_BF16);
    if (y) zt_check_values("layer_norm bf16", y, ref, 2e-2);
    zl_tensor *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(s && zl_backward(s, NULL, false) == ZL_OK);
    CHECK(zl_tensor_grad(xb) && zl_tensor_dtype(zl_tensor_grad(xb)) == ZL_DTYPE_BF16);
    CHECK(zl_tensor_grad(w) && zl_tensor_dtype(zl_tensor_grad(w)) == ZL_DTYPE_F32);
    for (int j = 0; j < 8 && zl_tensor_grad(b); j++) CHECK_CLOSE(zl_tensor_get(zl_tensor_grad(b), j), 3.0, 1e-6);
    free(x); free(wv); free(bv);
    zl_tensor_release(s); zl_tensor_release(y);

    /* The weight and bias gradients are split by column across threads: the
     * same bits with one thread and with two, on a size that goes parallel. */
    zl_tensor *xl = leaf(ZL_DTYPE_F32, SHAPE(96, 700)), *wl = leaf(ZL_DTYPE_F32, SHAPE(700));
    zl_tensor *bl = leaf(ZL_DTYPE_F32, SHAPE(700)), *gout = zt_randn(SHAPE(96, 700));
    double *grads[2][3];
    int saved = zl_get_num_threads();
    for (int run = 0; run < 2; run++) {
        zl_set_num_threads(run + 1);
        zl_tensor *yl = zl_layer_norm(xl, 1, wl, bl, 1e-5);
        CHECK(yl && zl_backward(yl, gout, false) == ZL_OK);
        zl_tensor *ps[3] = {xl, wl, bl};
        for (int k = 0; k < 3; k++) {
            grads[run][k] = values(zl_tensor_grad(ps[k]));
            zl_tensor_set_grad(ps[k], NULL);
        }
        zl_tensor_release(yl);
    }
    zl_set_num_threads(saved);
    CHECK(memcmp(grads[0][0], grads[1][0], 96 * 700 * sizeof(double)) == 0);
    CHECK(memcmp(grads[0][1], grads[1][1], 700 * sizeof(double)) == 0);
    CHECK(memcmp(grads[0][2], grads[1][2], 700 * sizeof(double)) == 0);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 3; k++) free(grads[run][k]);

    zl_tensor *x2 = zt_randn(SHAPE(3, 4)), *w5 = zt_randn(SHAPE(5)), *w34 = zt_randn(SHAPE(3, 4));
    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 4);
    CHECK_ERR(zl_layer_norm(x2, 3, NULL, NULL, 1e-5),
              "layer_norm: cannot normalise over the last 3 dims of an input of shape [3, 4] (expected 1..2)");
    CHECK_ERR(zl_layer_norm(x2, 0, NULL, NULL, 1e-5), "cannot normalise over the last 0 dims");
    CHECK_ERR(zl_layer_norm(x2, 1, w5, NULL, 1e-5),
              "layer_norm: weight must have shape [4], the last 1 dims of the input [3, 4]; got [5]");
    CHECK_ERR(zl_layer_norm(x2, 1, NULL, w34, 1e-5),
              "layer_norm: bias must have shape [4], the last 1 dims of the input [3, 4]; got [3, 4]");
    CHECK_ERR(zl_layer_norm(x2, 2, w34, w5, 1e-5),
              "layer_norm: bias must have shape [3, 4], the last 2 dims of the input [3, 4]; got [5]");
    CHECK_ERR(zl_layer_norm(x2, 1, NULL, NULL, -1.0), "layer_norm: eps must be >= 0, got -1");
    CHECK_ERR(zl_layer_norm(i, 1, NULL, NULL, 1e-5), "layer_norm: input must be a float tensor");
    CHECK_ERR(zl_layer_norm(x2, 1, i, NULL, 1e-5), "layer_norm: weight must be a float tensor");
    zl_tensor *all[] = {xb, w, b, xl, wl, bl, gout, x2, w5, w34, i};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) zl_tensor_release(all[k]);
}

/* ---- embedding ---- */

TEST(embedding_forward)
{
    zl_tensor *w = zt_randn(SHAPE(7, 3));
    double *wv = values(w);
    struct { int ndim; int64_t shape[3]; int64_t idx[6]; zl_dtype dt; } cases[] = {
        {1, {5}, {0, 6, 2, 2, 1}, ZL_DTYPE_I64},
        {2, {2, 3}, {3, 3, 3, 0, 6, 5}, ZL_DTYPE_I32},
        {0, {0}, {4}, ZL_DTYPE_I64},
        {2, {0, 3}, {0}, ZL_DTYPE_I64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        zl_tensor *ix = indices_of(cases[c].dt, cases[c].ndim, cases[c].shape, cases[c].idx);
        zl_tensor *y = zl_embedding(w, ix);
        int64_t oshape[4];
        memcpy(oshape, cases[c].shape, sizeof cases[c].shape);
        oshape[cases[c].ndim] = 3;
        CHECK(y && same_shape(y, cases[c].ndim + 1, oshape) && zl_tensor_dtype(y) == ZL_DTYPE_F32);
        int64_t n = zl_tensor_numel(ix);
        for (int64_t p = 0; y && p < n; p++)
            for (int j = 0; j < 3; j++) CHECK(zl_tensor_get(y, p * 3 + j) == wv[cases[c].idx[p] * 3 + j]);
        zl_tensor_release(y);
        zl_tensor_release(ix);
    }
    /* A transposed (strided) weight and a bf16 weight: rows copied exactly. */
    zl_tensor *wt0 = zt_randn(SHAPE(3, 7)), *wt = zl_tensor_transpose(wt0, 0, 1);
    zl_tensor *wb = zl_tensor_randn(ZL_DTYPE_BF16, SHAPE(7, 3), NULL);
    zl_tensor *ix = indices_of(ZL_DTYPE_I64, SHAPE(3), (int64_t[]){6, 0, 4});
    zl_tensor *yt = zl_embedding(wt, ix), *yb = zl_embedding(wb, ix);
    CHECK(yt && yb && zl_tensor_dtype(yb) == ZL_DTYPE_BF16);
    for (int p = 0; yt && yb && p < 3; p++)
        for (int j = 0; j < 3; j++) {
            int64_t at[2] = {(int64_t[]){6, 0, 4}[p], j};
            double vt, vb;
            zl_tensor_get_at(wt, at, &vt);
            zl_tensor_get_at(wb, at, &vb);
            CHECK(zl_tensor_get(yt, p * 3 + j) == vt && zl_tensor_get(yb, p * 3 + j) == vb);
        }
    free(wv);
    zl_tensor *all[] = {w, wt0, wt, wb, ix, yt, yb};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) zl_tensor_release(all[k]);
}

static zl_tensor *embedding_fn(zl_tensor **in, void *ctx) { return zl_embedding(in[0], ctx); }

TEST(embedding_gradients_and_determinism)
{
    /* Repeated indices: their rows of the gradient must add up. */
    zl_tensor *w = leaf(ZL_DTYPE_F32, SHAPE(6, 3));
    zl_tensor *ix = indices_of(ZL_DTYPE_I64, SHAPE(2, 4), (int64_t[]){1, 5, 1, 0, 5, 5, 2, 1});
    zt_gradcheck("embedding", embedding_fn, ix, 1, &w, GC_H, GC_TOL);
    /* Row 3 and 4 are never used: exactly zero. */
    for (int j = 0; j < 3 && zl_tensor_grad(w); j++)
        CHECK(zl_tensor_get(zl_tensor_grad(w), 9 + j) == 0.0 && zl_tensor_get(zl_tensor_grad(w), 12 + j) == 0.0);
    zl_tensor_release(ix);
    zl_tensor_release(w);

    /* bf16 weight: the gradient lands in bf16. */
    zl_tensor *wb = leaf(ZL_DTYPE_BF16, SHAPE(4, 2));
    zl_tensor *ib = indices_of(ZL_DTYPE_I32, SHAPE(3), (int64_t[]){2, 2, 0});
    zl_tensor *yb = zl_embedding(wb, ib), *sb = zl_sum(yb, ZL_ALL_DIMS, false);
    CHECK(sb && zl_backward(sb, NULL, false) == ZL_OK);
    zl_tensor *gb = zl_tensor_grad(wb);
    CHECK(gb && zl_tensor_dtype(gb) == ZL_DTYPE_BF16);
    double want[8] = {1, 1, 0, 0, 2, 2, 0, 0};
    for (int k = 0; gb && k < 8; k++) CHECK(zl_tensor_get(gb, k) == want[k]);
    zl_tensor *rel[] = {wb, ib, yb, sb};
    for (int k = 0; k < 4; k++) zl_tensor_release(rel[k]);

    /* Scatter-add with many repeats, large enough to run on several threads:
     * identical bits with one thread and two. */
    int64_t n = 2048, v = 50, d = 200;
    int64_t *iv = malloc((size_t)n * sizeof *iv);
    for (int64_t p = 0; p < n; p++) iv[p] = (p * 7919) % v;
    zl_tensor *wl = leaf(ZL_DTYPE_F32, SHAPE(50, 200)), *il = indices_of(ZL_DTYPE_I64, SHAPE(2048), iv);
    zl_tensor *gout = zt_randn(SHAPE(2048, 200));
    double *g[2];
    int saved = zl_get_num_threads();
    for (int run = 0; run < 2; run++) {
        zl_set_num_threads(run + 1);
        zl_tensor *y = zl_embedding(wl, il);
        CHECK(y && zl_backward(y, gout, false) == ZL_OK);
        g[run] = values(zl_tensor_grad(wl));
        zl_tensor_set_grad(wl, NULL);
        zl_tensor_release(y);
    }
    zl_set_num_threads(saved);
    CHECK(memcmp(g[0], g[1], (size_t)(v * d) * sizeof(double)) == 0);
    /* And against a serial double reference. */
    double *gv = values(gout), *ref = calloc((size_t)(v * d), sizeof *ref);
    for (int64_t p = 0; p < n; p++)
        for (int64_t j = 0; j < d; j++) ref[iv[p] * d + j] += gv[p * d + j];
    for (int64_t k = 0; k < v * d; k++) CHECK_CLOSE(g[0][k], ref[k], 1e-4);
    free(g[0]); free(g[1]); free(gv); free(ref); free(iv);
    zl_tensor_release(wl); zl_tensor_release(il); zl_tensor_release(gout);
}

/* A weight read by a linear and then by the embedding (a tied LM head): the
 * embedding's rows are added into the weight's pending gradient in place. */
static zl_tensor *tied_fn(zl_tensor **in, void *ctx)
{
    zl_tensor *x = zl_embedding(in[0], ctx);
    zl_tensor *y = x ? zl_linear(x, in[0], NULL) : NULL;
    zl_tensor_release(x);
    return y;
}

TEST(embedding_tied_to_a_linear)
{
    zl_tensor *w = leaf(ZL_DTYPE_F32, SHAPE(5, 3));
    zl_tensor *ix = indices_of(ZL_DTYPE_I64, SHAPE(2, 3), (int64_t[]){4, 0, 4, 2, 2, 4});
    zt_gradcheck("embedding tied to a linear", tied_fn, ix, 1, &w, GC_H, GC_TOL);
    /* The same as the two uses' gradients taken apart and added: through
     * the linear alone (the embedding's output detached), then through the
     * embedding alone (the linear's weight detached). */
    zl_tensor *wd = zl_tensor_detach(w);
    zl_tensor *e = zl_embedding(w, ix), *ed = e ? zl_tensor_detach(e) : NULL;
    double *g[3];
    for (int part = 0; part < 3; part++) {
        zl_tensor_set_grad(w, NULL);
        zl_tensor *y = part == 0 ? tied_fn(&w, ix) : part == 1 ? zl_linear(ed, w, NULL) : zl_linear(e, wd, NULL);
        zl_tensor *s = y ? zl_sum(y, ZL_ALL_DIMS, false) : NULL;
        CHECK(s && zl_backward(s, NULL, part == 2 ? false : true) == ZL_OK);
        g[part] = values(zl_tensor_grad(w));
        zl_tensor_release(y);
        zl_tensor_release(s);
    }
    for (int k = 0; k < 15; k++) CHECK_CLOSE(g[0][k], g[1][k] + g[2][k], 1e-6);
    for (int part = 0; part < 3; part++) free(g[part]);
    zl_tensor *rel[] = {w, ix, wd, e, ed};
    for (size_t k = 0; k < sizeof rel / sizeof rel[0]; k++) zl_tensor_release(rel[k]);
}

TEST(embedding_errors)
{
    zl_tensor *w = zt_randn(SHAPE(6, 3)), *w1 = zt_randn(SHAPE(6)), *f = zt_randn(SHAPE(2));
    zl_tensor *big = indices_of(ZL_DTYPE_I64, SHAPE(4), (int64_t[]){0, 1, 2, 6});
    zl_tensor *neg = indices_of(ZL_DTYPE_I32, SHAPE(2), (int64_t[]){-1, 0});
    zl_tensor *ok = indices_of(ZL_DTYPE_I64, SHAPE(1), (int64_t[]){0});
    zl_tensor *deep = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(1, 1, 1, 1, 1, 1, 1, 1));
    CHECK_ERR(zl_embedding(w, big),
              "embedding: index 6 at position 3 is out of range for a weight of 6 rows (expected 0..5)");
    CHECK_ERR(zl_embedding(w, neg), "embedding: index -1 at position 0 is out of range for a weight of 6 rows");
    CHECK_ERR(zl_embedding(w1, ok), "embedding: weight must be 2-d [V, D], got shape [6]");
    CHECK_ERR(zl_embedding(w, f), "embedding: indices must be an integer tensor (i64 or i32), got f32");
    CHECK_ERR(zl_embedding(w, deep),
              "embedding: indices of shape [1, 1, 1, 1, 1, 1, 1, 1] would give a 9-d output, at most 8 dims");
    zl_tensor *all[] = {w, w1, f, big, neg, ok, deep};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) zl_tensor_release(all[k]);
}

/* ---- dropout ---- */

TEST(dropout_statistics_and_reproducibility)
{
    int64_t n = 200000;
    double p = 0.3;
    zl_tensor *x = zl_tensor_full(ZL_DTYPE_F32, SHAPE(400, 500), 2.0);
    zl_generator *g = zl_generator_new(42);
    zl_tensor *y = zl_dropout(x, p, true, g);
    CHECK(y && y != x && same_shape(y, SHAPE(400, 500)));
    int64_t zeros = 0, bad = 0;
    for (int64_t i = 0; y && i < n; i++) {
        double v = zl_tensor_get(y, i);
        if (v == 0.0) zeros++;
        else if (fabs(v - 2.0 / (1 - p)) > 1e-6) bad++;
    }
    /* Binomial(n, p): the standard deviation of the fraction is about 0.001. */
    CHECK(fabs((double)zeros / (double)n - p) < 0.006);
    CHECK(bad == 0);

    /* The same seed gives the same mask, with any number of threads. */
    int saved = zl_get_num_threads();
    zl_set_num_threads(1);
    zl_generator_seed(g, 42);
    zl_tensor *y1 = zl_dropout(x, p, true, g);
    zl_set_num_threads(saved);
    zl_tensor *y2 = zl_dropout(x, p, true, g);   /* the generator moved on: another mask */
    double *a = values(y), *b = values(y1), *c = values(y2);
    CHECK(memcmp(a, b, (size_t)n * sizeof *a) == 0);
    CHECK(memcmp(a, c, (size_t)n * sizeof *a) != 0);
    free(a); free(b); free(c);

    /* Identity when not training or p == 0: the input itself, retained. */
    zl_tensor *e = zl_dropout(x, p, false, g), *z = zl_dropout(x, 0.0, true, g);
    CHECK(e == x && z == x);
    zl_tensor_release(e);
    zl_tensor_release(z);
    zl_tensor *all[] = {x, y, y1, y2};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) zl_tensor_release(all[k]);
    zl_generator_free(g);
}

typedef struct { zl_generator *g; double p; } dropout_ctx;

/* Reseeds each call, so every evaluation of the finite difference sees one mask. */
static zl_tensor *dropout_fn(zl_tensor **in, void *ctx)
{
    dropout_ctx *c = ctx;
    zl_generator_seed(c->g, 7);
    return zl_dropout(in[0], c->p, true, c->g);
}

TEST(dropout_gradients_bf16_and_errors)
{
    zl_generator *g = zl_generator_new(7);
    zl_tensor *x = leaf(ZL_DTYPE_F32, SHAPE(4, 5));
    dropout_ctx ctx = {g, 0.4};
    zt_gradcheck("dropout", dropout_fn, &ctx, 1, &x, GC_H, GC_TOL);
    /* The gradient of sum(y) is the mask scaled by 1/(1-p): y / x elementwise. */
    zl_tensor_set_grad(x, NULL);
    zl_tensor *y = dropout_fn(&x, &ctx), *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(s && zl_backward(s, NULL, false) == ZL_OK);
    int kept = 0;
    for (int i = 0; i < 20 && zl_tensor_grad(x); i++) {
        CHECK_CLOSE(zl_tensor_get(zl_tensor_grad(x), i), zl_tensor_get(y, i) / zl_tensor_get(x, i), 1e-6);
        kept += zl_tensor_get(y, i) != 0.0;
    }
    CHECK(kept > 0 && kept < 20);
    zl_tensor_release(y);
    zl_tensor_release(s);

    /* p == 1 drops everything: zeros forward and back. */
    zl_tensor_set_grad(x, NULL);
    zl_tensor *y1 = zl_dropout(x, 1.0, true, g), *s1 = zl_sum(y1, ZL_ALL_DIMS, false);
    CHECK(s1 && zl_tensor_get(s1, 0) == 0.0 && zl_backward(s1, NULL, false) == ZL_OK);
    for (int i = 0; i < 20 && zl_tensor_grad(x); i++) {
        CHECK(zl_tensor_get(y1, i) == 0.0);
        CHECK(zl_tensor_get(zl_tensor_grad(x), i) == 0.0);
    }
    zl_tensor_release(y1);
    zl_tensor_release(s1);

    zl_tensor *xb = zl_tensor_full(ZL_DTYPE_BF16, SHAPE(64, 64), 1.5);
    zl_tensor *yb = zl_dropout(xb, 0.5, true, g);
    CHECK(yb && zl_tensor_dtype(yb) == ZL_DTYPE_BF16);
    int64_t zeros = 0;
    for (int64_t i = 0; yb && i < 4096; i++) {
        double v = zl_tensor_get(yb, i);
        zeros += v == 0.0;
        CHECK(v == 0.0 || v == 3.0);
    }
    CHECK(zeros > 1800 && zeros < 2300);
    zl_tensor_release(yb);

    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 4);
    CHECK_ERR(zl_dropout(x, 1.5, true, g), "dropout: probability p must be in [0, 1], got 1.5");
    CHECK_ERR(zl_dropout(x, -0.1, false, g), "dropout: probability p must be in [0, 1], got -0.1");
    CHECK_ERR(zl_dropout(x, NAN, true, g), "dropout: probability p must be in [0, 1], got nan");
    CHECK_ERR(zl_dropout(i, 0.5, true, g), "dropout: input must be a float tensor (f32, f16 or bf16), got i64");
    zl_tensor_release(i);
    zl_tensor_release(xb);
    zl_tensor_release(x);
    zl_generator_free(g);
}
