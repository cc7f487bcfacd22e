/* silu, sin, cos, log1p, softplus, leaky_relu, clamp; ne, le, ge; min,
 * argmin, sum and mean over several dims, var, std, cumsum; gather, scatter
 * and scatter_add: values against double references (NaN, ties, integers,
 * bf16), gradients against finite differences, the bad-input messages
 * (the op case list, op_cases.c, runs them on the stand-in device). */
#include <stdlib.h>
#include "gradcheck.h"
#include "stand_in_kernels.h"

static zl_tensor *leaf_of(int nd, const int64_t *shape, const float *v)
{
    zl_tensor *t = zt_from(nd, shape, v);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

static zl_tensor *randn_leaf(int nd, const int64_t *shape)
{
    zl_tensor *t = zl_tensor_randn(ZL_DTYPE_F32, nd, shape, NULL);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

static void release_all(zl_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) zl_tensor_release(ts[i]);
}

/* Every element of t against want[] exactly (NaN matching NaN). */
static void check_exact(const char *what, const zl_tensor *t, const double *want, int64_t n)
{
    if (!t) {
        zt_fail(__FILE__, __LINE__, "%s: no result: %s", what, zl_last_error());
        return;
    }
    if (zl_tensor_numel(t) != n) {
        zt_fail(__FILE__, __LINE__, "%s: %lld elements, expected %lld", what, (long long)zl_tensor_numel(t),
                (long long)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = zl_tensor_get(t, i);
        if (!(v == want[i] || (isnan(v) && isnan(want[i]))))
            zt_fail(__FILE__, __LINE__, "%s[%lld] = %.9g, expected %.9g", what, (long long)i, v, want[i]);
    }
}

static bool same_shape(const zl_tensor *t, int nd, const int64_t *shape)
{
    return t && zl_tensor_ndim(t) == nd && memcmp(zl_tensor_shape(t), shape, (size_t)nd * sizeof *shape) == 0;
}

/* ---- unary ---- */

enum { SILU, SIN, COS, LOG1P, SOFTPLUS, SOFTPLUS_BETA, LEAKY, CLAMP, CLAMP_MIN, CLAMP_MAX, NUNARY };
static const char *const unary_names[] = {"silu", "sin", "cos", "log1p", "softplus", "softplus(beta 2, threshold 3)",
                                          "leaky_relu", "clamp", "clamp(min)", "clamp(max)"};

static zl_tensor *call_unary(zl_tensor **in, void *ctx)
{
    switch (*(int *)ctx) {
    case SILU: return zl_silu(in[0]);
    case SIN: return zl_sin(in[0]);
    case COS: return zl_cos(in[0]);
    case LOG1P: return zl_log1p(in[0]);
    case SOFTPLUS: return zl_softplus(in[0], 1, 20);
    case SOFTPLUS_BETA: return zl_softplus(in[0], 2, 3);
    case LEAKY: return zl_leaky_relu(in[0], 0.1);
    case CLAMP: return zl_clamp(in[0], -0.5, 0.75);
    case CLAMP_MIN: return zl_clamp(in[0], -0.5, INFINITY);
    default: return zl_clamp(in[0], -INFINITY, 0.75);
    }
}

static double ref_unary(int k, double x)
{
    switch (k) {
    case SILU: return x / (1 + exp(-x));
    case SIN: return sin(x);
    case COS: return cos(x);
    case LOG1P: return log1p(x);
    case SOFTPLUS: return x > 20 ? x : log1p(exp(x));
    case SOFTPLUS_BETA: return 2 * x > 3 ? x : log1p(exp(2 * x)) / 2;
    case LEAKY: return x > 0 ? x : 0.1 * x;
    case CLAMP: return fmin(fmax(x, -0.5), 0.75);
    case CLAMP_MIN: return fmax(x, -0.5);
    default: return fmin(x, 0.75);
    }
}

/* 24 values over [-4, 4], none within 0.01 of a kink (0, -0.5, 0.75, 1.5)
 * so that finite differences see one piece; log1p's over (-1, 3]. */
static void unary_inputs(int k, float *v)
{
    for (int i = 0; i < 24; i++) {
        v[i] = -4.0f + 8.0f * (float)i / 23.0f + 0.013f;
        if (k == LOG1P) v[i] = -0.95f + 3.9f * (float)i / 23.0f;
    }
}

TEST(unary_values_and_gradients)
{
    for (int k = 0; k < NUNARY; k++) {
        float v[24];
        unary_inputs(k, v);
        zl_tensor *x = leaf_of(SHAPE(4, 6), v), *y = call_unary(&x, &k);
        double ref[24];
        for (int i = 0; i < 24; i++) ref[i] = ref_unary(k, v[i]);
        CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_F32 && same_shape(y, SHAPE(4, 6)));
        if (y) zt_check_values(unary_names[k], y, ref, 2e-6);
        zt_gradcheck(unary_names[k], call_unary, &k, 1, &x, 1e-3, 1e-2);
        /* bf16 in, bf16 out: the f32 result of the bf16 value, rounded. */
        zl_tensor *xb = zl_tensor_to(x, ZL_DTYPE_BF16), *yb = call_unary(&xb, &k);
        CHECK(yb && zl_tensor_dtype(yb) == ZL_DTYPE_BF16);
        for (int i = 0; yb && i < 24; i++) ref[i] = ref_unary(k, zl_tensor_get(xb, i));
        if (yb) zt_check_values(unary_names[k], yb, ref, 1e-2);
        zl_tensor *all[] = {x, y, xb, yb};
        release_all(all, 4);
    }
}

TEST(unary_edges_nan_and_large)
{
    const double nan = NAN;
    float v[] = {NAN, -INFINITY, INFINITY, -100, 100, 0};
    zl_tensor *x = leaf_of(SHAPE(6), v);
    zl_tensor *s = zl_silu(x), *sp = zl_softplus(x, 1, 20), *sp_open = zl_softplus(x, 1, 1e9);
    zl_tensor *lr = zl_leaky_relu(x, 0.5);
    zl_tensor *c = zl_clamp(x, -1, 1), *l1 = zl_log1p(x), *sn = zl_sin(x);
    /* silu(-inf) is -inf / inf, NaN, as torch's; exp(100) overflows to inf in f32 but softplus does not. */
    check_exact("silu", s, (double[]){nan, nan, INFINITY, -0.0, 100, 0}, 6);
    check_exact("softplus", sp, (double[]){nan, 0, INFINITY, log1pf(expf(-100)), 100, (float)log(2.0)}, 6);
    CHECK(sp_open && zl_tensor_get(sp_open, 4) == 100.0f && zl_tensor_get(sp_open, 3) > 0);
    check_exact("leaky_relu", lr, (double[]){nan, -INFINITY, INFINITY, -50, 100, 0}, 6);
    check_exact("clamp", c, (double[]){nan, -1, 1, -1, 1, 0}, 6);
    check_exact("log1p", l1, (double[]){nan, nan, INFINITY, nan, log1pf(100), 0}, 6);
    CHECK(sn && isnan(zl_tensor_get(sn, 0)) && isnan(zl_tensor_get(sn, 2)));
    /* log1p is exact near 0, where log(1 + x) in f32 is 0. */
    zl_tensor *tiny = zt_from(SHAPE(1), (float[]){1e-10f}), *lt = zl_log1p(tiny);
    CHECK(lt && zl_tensor_get(lt, 0) == (double)1e-10f);
    zl_tensor *all[] = {x, s, sp, sp_open, lr, c, l1, sn, tiny, lt};
    release_all(all, 10);
}

/* torch's with number bounds: the gradient passes strictly inside them; a
 * bound at infinity is open, NaN gets none, and lo > hi gives hi everywhere
 * with no gradient. relu passes NaN's gradient, as torch's threshold does. */
TEST(clamp_gradient_at_the_bounds_and_nan)
{
    float v[] = {-0.5f, 0.75f, 0.25f, -2.0f, 3.0f, NAN, INFINITY, -INFINITY};
    double g1[8];
    zl_tensor *x = leaf_of(SHAPE(8), v), *ones = zl_tensor_full(ZL_DTYPE_F32, SHAPE(8), 1.0);
    struct { double lo, hi; double grad[8]; } cases[] = {
        {-0.5, 0.75, {0, 0, 1, 0, 0, 0, 0, 0}},
        {-0.5, INFINITY, {0, 1, 1, 0, 1, 0, 1, 0}},
        {-INFINITY, 0.75, {1, 0, 1, 1, 0, 0, 0, 1}},
        {-INFINITY, INFINITY, {1, 1, 1, 1, 1, 0, 1, 1}},
        {1.0, -1.0, {0, 0, 0, 0, 0, 0, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        zl_tensor_set_grad(x, NULL);
        zl_tensor *y = zl_clamp(x, cases[c].lo, cases[c].hi);
        CHECK(y && zl_backward(y, ones, false) == ZL_OK);
        char what[64];
        snprintf(what, sizeof what, "clamp(%g, %g)'s gradient", cases[c].lo, cases[c].hi);
        check_exact(what, zl_tensor_grad(x), cases[c].grad, 8);
        if (c == 4) check_exact("clamp(1, -1)", y, (double[]){-1, -1, -1, -1, -1, NAN, -1, -1}, 8);
        zl_tensor_release(y);
    }
    zl_tensor_set_grad(x, NULL);
    zl_tensor *r = zl_relu(x);
    CHECK(r && zl_backward(r, ones, false) == ZL_OK);
    for (int i = 0; i < 8; i++) g1[i] = v[i] > 0 || isnan(v[i]) ? 1 : 0;
    check_exact("relu's gradient", zl_tensor_grad(x), g1, 8);
    CHECK_ERR(zl_clamp(x, NAN, 1), "clamp: the bounds must not be NaN");
    zl_tensor *all[] = {x, ones, r};
    release_all(all, 3);
}

TEST(unary_integer_inputs)
{
    int64_t iv[] = {-5, -1, 0, 3, 9};
    zl_tensor *i64 = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(5), iv), *i32 = zl_tensor_to(i64, ZL_DTYPE_I32);
    zl_tensor *u8 = zl_tensor_from_data(ZL_DTYPE_U8, SHAPE(3), (uint8_t[]){0, 7, 200});
    zl_tensor *b = zl_tensor_from_data(ZL_DTYPE_BOOL, SHAPE(2), (uint8_t[]){1, 0});
    /* Whole bounds keep the dtype (bool becomes i64), exact past 2^24. */
    zl_tensor *c64 = zl_clamp(i64, -1, 3), *c32 = zl_clamp(i32, 0, INFINITY), *cu = zl_clamp(u8, 5, 100);
    zl_tensor *cb = zl_clamp(b, 0, 0), *cf = zl_clamp(i64, -1.5, 2.5);
    CHECK(c64 && zl_tensor_dtype(c64) == ZL_DTYPE_I64 && c32 && zl_tensor_dtype(c32) == ZL_DTYPE_I32);
    CHECK(cu && zl_tensor_dtype(cu) == ZL_DTYPE_U8 && cb && zl_tensor_dtype(cb) == ZL_DTYPE_I64);
    CHECK(cf && zl_tensor_dtype(cf) == ZL_DTYPE_F32);
    check_exact("clamp(i64)", c64, (double[]){-1, -1, 0, 3, 3}, 5);
    check_exact("clamp(i32, 0)", c32, (double[]){0, 0, 0, 3, 9}, 5);
    check_exact("clamp(u8)", cu, (double[]){5, 7, 100}, 3);
    check_exact("clamp(bool)", cb, (double[]){0, 0}, 2);
    check_exact("clamp(i64, -1.5, 2.5)", cf, (double[]){-1.5, -1, 0, 2.5, 2.5}, 5);
    int64_t big[] = {(1ll << 40) + 1, -(1ll << 40) - 1};
    zl_tensor *tb = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(2), big), *cbig = zl_clamp(tb, -(double)(1ll << 40), 1e15);
    CHECK(cbig && ((int64_t *)zl_tensor_data(cbig))[0] == (1ll << 40) + 1 &&
          ((int64_t *)zl_tensor_data(cbig))[1] == -(1ll << 40));
    /* sin of an integer is a float; silu, softplus and leaky_relu have no integer form in torch. */
    zl_tensor *s = zl_sin(i64);
    CHECK(s && zl_tensor_dtype(s) == ZL_DTYPE_F32 && zl_tensor_get(s, 3) == sinf(3.0f));
    CHECK_ERR(zl_silu(i64), "silu: x must be a float tensor (f32, f16 or bf16), got i64");
    CHECK_ERR(zl_softplus(i32, 1, 20), "softplus: x must be a float tensor (f32, f16 or bf16), got i32");
    CHECK_ERR(zl_leaky_relu(b, 0.01), "leaky_relu: x must be a float tensor (f32, f16 or bf16), got bool");
    CHECK_ERR(zl_cos(NULL), "cos: argument 1 is NULL");
    zl_tensor *all[] = {i64, i32, u8, b, c64, c32, cu, cb, cf, tb, cbig, s};
    release_all(all, 12);
}

/* ---- comparisons ---- */

TEST(ne_le_ge)
{
    float av[] = {1, 2, NAN, 4, -1, 0, 3, NAN}, bv[] = {1, 3, NAN, 2};
    zl_tensor *a = zt_from(SHAPE(2, 4), av), *b = zt_from(SHAPE(4), bv);
    zl_tensor *ne = zl_ne(a, b), *le = zl_le(a, b), *ge = zl_ge(a, b);
    CHECK(ne && zl_tensor_dtype(ne) == ZL_DTYPE_BOOL && same_shape(ne, SHAPE(2, 4)));
    /* NaN is unequal to everything, itself included, and neither <= nor >= anything. */
    check_exact("ne", ne, (double[]){0, 1, 1, 1, 1, 1, 1, 1}, 8);
    check_exact("le", le, (double[]){1, 1, 0, 0, 1, 1, 0, 0}, 8);
    check_exact("ge", ge, (double[]){1, 0, 0, 1, 0, 0, 0, 0}, 8);
    int64_t iv[] = {(1ll << 40) + 1, 5, -3}, jv[] = {1ll << 40, 5, -2};
    zl_tensor *i = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(3), iv);
    zl_tensor *j = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(3), jv);
    zl_tensor *ine = zl_ne(i, j), *ile = zl_le(i, j), *ige = zl_ge(i, j);
    check_exact("ne(i64)", ine, (double[]){1, 0, 1}, 3);
    check_exact("le(i64)", ile, (double[]){0, 1, 1}, 3);
    check_exact("ge(i64)", ige, (double[]){1, 1, 0}, 3);
    zl_tensor *c = zt_from(SHAPE(3), (float[]){1, 2, 3});
    CHECK_ERR(zl_le(a, c), "le: shapes cannot be broadcast together (shapes [2, 4] and [3])");
    zl_tensor *all[] = {a, b, ne, le, ge, i, j, ine, ile, ige, c};
    release_all(all, 11);
}

/* ---- min, argmin ---- */

typedef struct { int dim; bool keep; } rctx;
static zl_tensor *call_min(zl_tensor **in, void *c) { return zl_min(in[0], ((rctx *)c)->dim, ((rctx *)c)->keep); }

TEST(min_and_argmin)
{
    /* Ties give the first position; a NaN wins, the first of them. */
    float v[] = {3, 1, 1, 2, 0, 5, 0, -1, 2, NAN, 2, NAN};
    zl_tensor *x = zt_from(SHAPE(3, 4), v);
    zl_tensor *m = zl_min(x, 1, false), *am = zl_argmin(x, 1, false), *mk = zl_min(x, -1, true);
    zl_tensor *m0 = zl_min(x, 0, false), *am0 = zl_argmin(x, 0, false), *all_min = zl_min(x, ZL_ALL_DIMS, false);
    check_exact("min over dim 1", m, (double[]){1, -1, NAN}, 3);
    check_exact("argmin over dim 1", am, (double[]){1, 3, 1}, 3);
    CHECK(am && zl_tensor_dtype(am) == ZL_DTYPE_I64 && same_shape(mk, SHAPE(3, 1)));
    check_exact("min over dim 0", m0, (double[]){0, NAN, 0, NAN}, 4);
    check_exact("argmin over dim 0", am0, (double[]){1, 2, 1, 2}, 4);
    check_exact("min of all", all_min, (double[]){NAN}, 1);
    zl_tensor *xn = zt_from(SHAPE(2, 3), (float[]){2, -1, -1, 4, 4, 7}), *amall = zl_argmin(xn, ZL_ALL_DIMS, false);
    check_exact("argmin of all", amall, (double[]){1}, 1);
    /* The gradient goes to the first minimum only. */
    zl_tensor *l = leaf_of(SHAPE(2, 3), (float[]){2, -1, -1, 4, 4, 7}), *lm = zl_min(l, 1, false);
    zl_tensor *g = zt_from(SHAPE(2), (float[]){10, 20});
    CHECK(lm && zl_backward(lm, g, false) == ZL_OK);
    check_exact("min's gradient", zl_tensor_grad(l), (double[]){0, 10, 0, 20, 0, 0}, 6);
    zl_tensor *r = randn_leaf(SHAPE(3, 4, 5));
    rctx cases[] = {{0, false}, {1, true}, {-1, false}, {ZL_ALL_DIMS, false}, {ZL_ALL_DIMS, true}};
    for (int c = 0; c < 5; c++) zt_gradcheck("min", call_min, &cases[c], 1, &r, 1e-3, 1e-2);
    /* Integers exactly, in their own dtype (min) and i64 (argmin). */
    int64_t iv[] = {(1ll << 40) + 1, (1ll << 40), -7, -7};
    zl_tensor *ix = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(2, 2), iv);
    zl_tensor *im = zl_min(ix, 1, false), *iam = zl_argmin(ix, 1, false);
    CHECK(im && zl_tensor_dtype(im) == ZL_DTYPE_I64 && ((int64_t *)zl_tensor_data(im))[0] == 1ll << 40);
    check_exact("argmin of integers", iam, (double[]){1, 0}, 2);
    zl_tensor *u8 = zl_tensor_from_data(ZL_DTYPE_U8, SHAPE(3), (uint8_t[]){9, 200, 3});
    zl_tensor *um = zl_min(u8, ZL_ALL_DIMS, false);
    CHECK(um && zl_tensor_dtype(um) == ZL_DTYPE_U8 && zl_tensor_get(um, 0) == 3);
    zl_tensor *bx = zl_tensor_to(x, ZL_DTYPE_BF16), *bm = zl_min(bx, 1, false);
    CHECK(bm && zl_tensor_dtype(bm) == ZL_DTYPE_BF16);
    check_exact("min of bf16", bm, (double[]){1, -1, NAN}, 3);
    zl_tensor *empty = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(2, 0));
    CHECK_ERR(zl_min(empty, 1, false), "min: cannot reduce over an empty dimension");
    CHECK_ERR(zl_argmin(x, 2, false), "argmin: dimension 2 is out of range");
    zl_tensor *objs[] = {x, m, am, mk, m0, am0, all_min, xn, amall, l, lm, g, r, ix, im, iam, u8, um, bx, bm, empty};
    release_all(objs, 21);
}

/* ---- sum and mean over several dims ---- */

typedef struct { bool mean; int n; int dims[3]; bool keep; } dctx;
static zl_tensor *call_dims(zl_tensor **in, void *c)
{
    dctx *d = c;
    return (d->mean ? zl_mean_dims : zl_sum_dims)(in[0], d->n, d->dims, d->keep);
}

TEST(sum_and_mean_over_dims)
{
    float v[24];
    for (int i = 0; i < 24; i++) v[i] = (float)(i * i % 7) - 2.5f;
    zl_tensor *x = leaf_of(SHAPE(2, 3, 4), v);
    /* Over dims 0 and 2: [3]; keepdim [1, 3, 1]. */
    double want[3] = {0}, wmean[3];
    for (int i = 0; i < 24; i++) want[i / 4 % 3] += v[i];
    for (int j = 0; j < 3; j++) wmean[j] = want[j] / 8;
    dctx c02 = {false, 2, {2, 0}, false}, c02k = {false, 2, {0, -1}, true}, m02 = {true, 2, {0, 2}, false};
    zl_tensor *s = call_dims(&x, &c02), *sk = call_dims(&x, &c02k), *mm = call_dims(&x, &m02);
    CHECK(same_shape(s, SHAPE(3)) && same_shape(sk, SHAPE(1, 3, 1)) && same_shape(mm, SHAPE(3)));
    if (s) zt_check_values("sum over dims 0 and 2", s, want, 1e-6);
    if (sk) zt_check_values("sum over dims 0 and 2, keepdim", sk, want, 1e-6);
    if (mm) zt_check_values("mean over dims 0 and 2", mm, wmean, 1e-6);
    dctx all = {true, 0, {0}, true}, three = {false, 3, {1, 0, 2}, false};
    zl_tensor *ma = call_dims(&x, &all), *s3 = call_dims(&x, &three);
    double total = 0;
    for (int i = 0; i < 24; i++) total += v[i];
    CHECK(same_shape(ma, SHAPE(1, 1, 1)) && s3 && zl_tensor_ndim(s3) == 0);
    if (ma) CHECK_CLOSE(zl_tensor_get(ma, 0), total / 24, 1e-6);
    if (s3) CHECK_CLOSE(zl_tensor_get(s3, 0), total, 1e-6);
    dctx grads[] = {c02, c02k, m02, all, three, {true, 1, {1}, false}};
    for (int c = 0; c < 6; c++)
        zt_gradcheck(grads[c].mean ? "mean_dims" : "sum_dims", call_dims, &grads[c], 1, &x, 1e-3, 1e-2);
    /* Integers sum exactly in i64. */
    int32_t iv[] = {1 << 30, 1 << 30, 1 << 30, 1 << 30};
    zl_tensor *ix = zl_tensor_from_data(ZL_DTYPE_I32, SHAPE(2, 2), iv);
    zl_tensor *is = zl_sum_dims(ix, 2, (int[]){0, 1}, false);
    CHECK(is && zl_tensor_dtype(is) == ZL_DTYPE_I64 && ((int64_t *)zl_tensor_data(is))[0] == 1ll << 32);
    CHECK_ERR(zl_sum_dims(x, 2, (int[]){1, -2}, false), "sum: dim 1 appears more than once in the list of dims");
    CHECK_ERR(zl_mean_dims(x, 2, (int[]){0, 3}, false), "mean: dimension 3 is out of range");
    CHECK_ERR(zl_sum_dims(x, -1, NULL, false), "sum: the number of dims must not be negative, got -1");
    zl_tensor *objs[] = {x, s, sk, mm, ma, s3, ix, is};
    release_all(objs, 8);
}

/* ---- var and std ---- */

typedef struct { bool std; int n; int dims[3]; double correction; bool keep; } vctx;
static zl_tensor *call_var(zl_tensor **in, void *c)
{
    vctx *v = c;
    return (v->std ? zl_std : zl_var)(in[0], v->n, v->dims, v->correction, v->keep);
}

/* The variance of x [2, 3, 4] over dim 1 in double, per output (o, i). */
static void ref_var_dim1(const float *x, double correction, double *out)
{
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 4; i++) {
            double mean = 0, m2 = 0;
            for (int k = 0; k < 3; k++) mean += x[(o * 3 + k) * 4 + i] / 3.0;
            for (int k = 0; k < 3; k++) m2 += pow(x[(o * 3 + k) * 4 + i] - mean, 2);
            out[o * 4 + i] = m2 / (3 - correction);
        }
}

TEST(var_and_std)
{
    zl_tensor *x = randn_leaf(SHAPE(2, 3, 4));
    float xv[24];
    for (int i = 0; i < 24; i++) xv[i] = (float)zl_tensor_get(x, i);
    for (int corr = 0; corr < 2; corr++) {
        vctx vc = {false, 1, {1}, corr, false}, sc = {true, 1, {-2}, corr, true};
        zl_tensor *v = call_var(&x, &vc), *s = call_var(&x, &sc);
        double want[8], wstd[8];
        ref_var_dim1(xv, corr, want);
        for (int i = 0; i < 8; i++) wstd[i] = sqrt(want[i]);
        CHECK(same_shape(v, SHAPE(2, 4)) && same_shape(s, SHAPE(2, 1, 4)));
        if (v) zt_check_values(corr ? "var (correction 1)" : "var (correction 0)", v, want, 1e-6);
        if (s) zt_check_values(corr ? "std (correction 1)" : "std (correction 0)", s, wstd, 1e-6);
        zl_tensor_release(v);
        zl_tensor_release(s);
    }
    vctx cases[] = {{false, 0, {0}, 1, false}, {true, 0, {0}, 0, true}, {false, 2, {0, 2}, 1, true},
                    {true, 2, {2, 1}, 1, false}, {true, 1, {0}, 0.5, false}};
    for (int c = 0; c < 5; c++) zt_gradcheck(cases[c].std ? "std" : "var", call_var, &cases[c], 1, &x, 1e-3, 1e-2);
    /* Equal values give exactly 0 (0.1 is not a sum of powers of two: the
     * mean must be exact), and std's gradient there is 0, as torch's. */
    zl_tensor *flat = leaf_of(SHAPE(2, 3), (float[]){0.1f, 0.1f, 0.1f, 1, 2, 4});
    zl_tensor *sf = zl_std(flat, 1, (int[]){1}, 1, false), *g = zt_from(SHAPE(2), (float[]){1, 1});
    CHECK(sf && zl_tensor_get(sf, 0) == 0 && zl_backward(sf, g, false) == ZL_OK);
    CHECK(zl_tensor_grad(flat) && zl_tensor_get(zl_tensor_grad(flat), 0) == 0 &&
          zl_tensor_get(zl_tensor_grad(flat), 1) == 0 && zl_tensor_get(zl_tensor_grad(flat), 3) != 0);
    /* count - correction <= 0: inf over a spread, NaN over none (one element). */
    zl_tensor *two = zt_from(SHAPE(2), (float[]){1, 2}), *one = zt_from(SHAPE(1), (float[]){5});
    zl_tensor *over = zl_var(two, 0, NULL, 3, false), *at = zl_var(two, 0, NULL, 2, false);
    zl_tensor *single = zl_var(one, 0, NULL, 1, false), *single0 = zl_std(one, 0, NULL, 0, false);
    check_exact("var with correction 3 of 2", over, (double[]){INFINITY}, 1);
    check_exact("var with correction 2 of 2", at, (double[]){INFINITY}, 1);
    check_exact("var of one element", single, (double[]){NAN}, 1);
    check_exact("std of one element, correction 0", single0, (double[]){0}, 1);
    zl_tensor *bx = zl_tensor_to(x, ZL_DTYPE_BF16), *bv = zl_var(bx, 1, (int[]){2}, 1, false);
    CHECK(bv && zl_tensor_dtype(bv) == ZL_DTYPE_BF16 && same_shape(bv, SHAPE(2, 3)));
    zl_tensor *ix = zl_tensor_arange(ZL_DTYPE_I64, 4);
    CHECK_ERR(zl_var(ix, 0, NULL, 1, false), "var: x must be a float tensor (f32, f16 or bf16), got i64");
    CHECK_ERR(zl_std(x, 2, (int[]){0, 0}, 1, false), "std: dim 0 appears more than once in the list of dims");
    CHECK_ERR(zl_var(x, 1, (int[]){0}, NAN, false), "var: correction must be a number, got NaN");
    zl_tensor *objs[] = {x, flat, sf, g, two, one, over, at, single, single0, bx, bv, ix};
    release_all(objs, 13);
}

/* ---- cumsum ---- */

static zl_tensor *call_cumsum(zl_tensor **in, void *c) { return zl_cumsum(in[0], *(int *)c); }

TEST(cumsum)
{
    float v[] = {1, 2, 3, 4, 5, 6};
    zl_tensor *x = leaf_of(SHAPE(2, 3), v);
    int d1 = 1, d0 = 0, dl = -1;
    zl_tensor *c1 = call_cumsum(&x, &d1), *c0 = call_cumsum(&x, &d0);
    check_exact("cumsum over dim 1", c1, (double[]){1, 3, 6, 4, 9, 15}, 6);
    check_exact("cumsum over dim 0", c0, (double[]){1, 2, 3, 5, 7, 9}, 6);
    /* The gradient is the running sum of g from the end. */
    zl_tensor *g = zt_from(SHAPE(2, 3), (float[]){1, 10, 100, 1, 2, 3});
    CHECK(c1 && zl_backward(c1, g, false) == ZL_OK);
    check_exact("cumsum's gradient", zl_tensor_grad(x), (double[]){111, 110, 100, 6, 5, 3}, 6);
    zl_tensor *r = randn_leaf(SHAPE(3, 4, 2));
    int dims[] = {0, 1, 2};
    for (int i = 0; i < 3; i++) zt_gradcheck("cumsum", call_cumsum, &dims[i], 1, &r, 1e-3, 1e-2);
    zt_gradcheck("cumsum", call_cumsum, &dl, 1, &r, 1e-3, 1e-2);
    /* Added in double: 1 + 1e8 - 1e8 keeps the 1 that f32 would lose. */
    zl_tensor *big = zt_from(SHAPE(3), (float[]){1, 1e8f, -1e8f}), *cb = zl_cumsum(big, 0);
    check_exact("cumsum in double", cb, (double[]){1, (float)(1 + 1e8), 1}, 3);
    /* Integers and bool give i64, exactly. */
    zl_tensor *i32 = zl_tensor_from_data(ZL_DTYPE_I32, SHAPE(3), (int32_t[]){1 << 30, 1 << 30, 1 << 30});
    zl_tensor *bl = zl_tensor_from_data(ZL_DTYPE_BOOL, SHAPE(4), (uint8_t[]){1, 0, 1, 1});
    zl_tensor *ci = zl_cumsum(i32, 0), *cbl = zl_cumsum(bl, 0);
    CHECK(ci && zl_tensor_dtype(ci) == ZL_DTYPE_I64 && ((int64_t *)zl_tensor_data(ci))[2] == 3ll << 30);
    CHECK(cbl && zl_tensor_dtype(cbl) == ZL_DTYPE_I64);
    check_exact("cumsum of bool", cbl, (double[]){1, 1, 2, 3}, 4);
    zl_tensor *bx = zl_tensor_to(x, ZL_DTYPE_BF16), *cbx = zl_cumsum(bx, 1);
    CHECK(cbx && zl_tensor_dtype(cbx) == ZL_DTYPE_BF16);
    check_exact("cumsum of bf16", cbx, (double[]){1, 3, 6, 4, 9, 15}, 6);
    CHECK_ERR(zl_cumsum(x, 2), "cumsum: dimension 2 is out of range");
    zl_tensor *objs[] = {x, c1, c0, g, r, big, cb, i32, bl, ci, cbl, bx, cbx};
    release_all(objs, 13);
}

/* ---- gather, scatter, scatter_add ---- */

typedef struct { int op, dim; zl_tensor *index; } gctx;
static zl_tensor *call_gather(zl_tensor **in, void *c)
{
    gctx *g = c;
    switch (g->op) {
    case 0: return zl_gather(in[0], g->dim, g->index);
    case 1: return zl_scatter(in[0], g->dim, g->index, in[1]);
    default: return zl_scatter_add(in[0], g->dim, g->index, in[1]);
    }
}

static zl_tensor *index_of(int nd, const int64_t *shape, const int64_t *v)
{
    return zl_tensor_from_data(ZL_DTYPE_I64, nd, shape, v);
}

TEST(gather_values_and_gradients)
{
    float xv[] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};
    zl_tensor *x = leaf_of(SHAPE(3, 4), xv);
    zl_tensor *i1 = index_of(SHAPE(2, 3), (int64_t[]){2, 0, 1, 0, 2, 2}), *g0 = zl_gather(x, 0, i1);
    zl_tensor *i2 = index_of(SHAPE(2, 3), (int64_t[]){3, 0, 3, 1, 1, 2}), *g2 = zl_gather(x, -1, i2);
    CHECK(same_shape(g2, SHAPE(2, 3)));
    check_exact("gather along dim 1", g2, (double[]){3, 0, 3, 11, 11, 12}, 6);
    check_exact("gather along dim 0", g0, (double[]){20, 1, 12, 0, 21, 22}, 6);
    /* Backward adds g into zeros where each element came from (twice for index 3). */
    zl_tensor *up = zl_tensor_full(ZL_DTYPE_F32, SHAPE(2, 3), 1.0);
    CHECK(g2 && zl_backward(g2, up, false) == ZL_OK);
    check_exact("gather's gradient", zl_tensor_grad(x), (double[]){1, 0, 0, 2, 0, 2, 1, 0, 0, 0, 0, 0}, 12);
    zl_tensor *r = randn_leaf(SHAPE(3, 4));
    gctx c1 = {0, 1, i2}, c0 = {0, 0, i1};
    zt_gradcheck("gather", call_gather, &c1, 1, &r, 1e-3, 1e-2);
    zt_gradcheck("gather", call_gather, &c0, 1, &r, 1e-3, 1e-2);
    /* Any dtype, bytes copied; bf16 stays bf16. */
    int64_t lv[] = {1ll << 50, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    zl_tensor *ix = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(3, 4), lv), *gi = zl_gather(ix, 1, i2);
    CHECK(gi && zl_tensor_dtype(gi) == ZL_DTYPE_I64 && ((int64_t *)zl_tensor_data(gi))[1] == 1ll << 50);
    zl_tensor *bx = zl_tensor_to(x, ZL_DTYPE_BF16), *gb = zl_gather(bx, 1, i2);
    CHECK(gb && zl_tensor_dtype(gb) == ZL_DTYPE_BF16);
    check_exact("gather of bf16", gb, (double[]){3, 0, 3, 11, 11, 12}, 6);
    zl_tensor *objs[] = {x, i1, g0, i2, g2, up, r, ix, gi, bx, gb};
    release_all(objs, 11);
}

TEST(scatter_values_and_gradients)
{
    zl_tensor *x = leaf_of(SHAPE(2, 4), (float[]){0, 1, 2, 3, 4, 5, 6, 7});
    zl_tensor *src = leaf_of(SHAPE(2, 3), (float[]){10, 20, 30, 40, 50, 60});
    /* Row 0 writes position 3 twice: the later write (30) wins. */
    zl_tensor *idx = index_of(SHAPE(2, 3), (int64_t[]){3, 0, 3, 1, 2, 0});
    zl_tensor *s = zl_scatter(x, 1, idx, src), *sa = zl_scatter_add(x, 1, idx, src);
    check_exact("scatter", s, (double[]){20, 1, 2, 30, 60, 40, 50, 7}, 8);
    check_exact("scatter_add", sa, (double[]){20, 1, 2, 43, 64, 45, 56, 7}, 8);
    zl_tensor *g = zt_from(SHAPE(2, 4), (float[]){1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(s && zl_backward(s, g, false) == ZL_OK);
    check_exact("scatter's gradient of x", zl_tensor_grad(x), (double[]){0, 2, 3, 0, 0, 0, 0, 8}, 8);
    check_exact("scatter's gradient of src", zl_tensor_grad(src), (double[]){4, 1, 4, 6, 7, 5}, 6);
    zl_tensor_set_grad(x, NULL);
    zl_tensor_set_grad(src, NULL);
    CHECK(sa && zl_backward(sa, g, false) == ZL_OK);
    check_exact("scatter_add's gradient of x", zl_tensor_grad(x), (double[]){1, 2, 3, 4, 5, 6, 7, 8}, 8);
    check_exact("scatter_add's gradient of src", zl_tensor_grad(src), (double[]){4, 1, 4, 6, 7, 5}, 6);
    /* A smaller index leaves the rest of src without gradient. */
    zl_tensor *small = index_of(SHAPE(1, 2), (int64_t[]){1, 2});
    zl_tensor *ss = zl_scatter(x, 1, small, src);
    zl_tensor_set_grad(src, NULL);
    CHECK(ss && zl_backward(ss, g, false) == ZL_OK);
    check_exact("a smaller index's gradient of src", zl_tensor_grad(src), (double[]){2, 3, 0, 0, 0, 0}, 6);
    /* Distinct indices for scatter's finite differences (a repeated one
     * makes the losing write's derivative 0 on one side only). */
    zl_tensor *perm = index_of(SHAPE(2, 3), (int64_t[]){3, 0, 1, 1, 2, 0});
    zl_tensor *rx = randn_leaf(SHAPE(2, 4)), *rs = randn_leaf(SHAPE(2, 3)), *rx0 = randn_leaf(SHAPE(3, 3));
    zl_tensor *in[2] = {rx, rs}, *in0[2] = {rx0, rs};
    zl_tensor *perm0 = index_of(SHAPE(2, 3), (int64_t[]){2, 0, 1, 0, 2, 2});
    gctx cs = {1, 1, perm}, ca = {2, 1, idx}, ca0 = {2, 0, perm0};
    gctx cs0 = {1, 0, index_of(SHAPE(1, 3), (int64_t[]){2, 0, 1})};
    zt_gradcheck("scatter", call_gather, &cs, 2, in, 1e-3, 1e-2);
    zt_gradcheck("scatter_add", call_gather, &ca, 2, in, 1e-3, 1e-2);
    zt_gradcheck("scatter_add", call_gather, &ca0, 2, in0, 1e-3, 1e-2);
    zt_gradcheck("scatter", call_gather, &cs0, 2, in0, 1e-3, 1e-2);
    /* Integers add exactly in i64 and keep their dtype. */
    zl_tensor *iz = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(1, 2), (int64_t[]){1ll << 40, 0});
    zl_tensor *isrc = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(1, 3), (int64_t[]){1, 2, 3});
    zl_tensor *ii = index_of(SHAPE(1, 3), (int64_t[]){0, 1, 0}), *ia = zl_scatter_add(iz, 1, ii, isrc);
    CHECK(ia && zl_tensor_dtype(ia) == ZL_DTYPE_I64 && ((int64_t *)zl_tensor_data(ia))[0] == (1ll << 40) + 4);
    zl_tensor *objs[] = {x, src, idx, s, sa, g, small, ss, perm, rx, rs, rx0, perm0, cs0.index, iz, isrc, ii, ia};
    release_all(objs, 18);
}

TEST(gather_and_scatter_errors)
{
    zl_tensor *x = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(3, 4)), *src = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(3, 4));
    zl_tensor *big = index_of(SHAPE(1, 2), (int64_t[]){0, 4}), *neg = index_of(SHAPE(1, 1), (int64_t[]){-1});
    CHECK_ERR(zl_gather(x, 1, big), "gather: index 4 is out of range for dimension 1 of size 4 (input [3, 4])");
    CHECK_ERR(zl_gather(x, 0, neg), "gather: index -1 is out of range for dimension 0 of size 3 (input [3, 4])");
    CHECK_ERR(zl_scatter(x, 1, big, src), "scatter: index 4 is out of range for dimension 1 of size 4");
    CHECK_ERR(zl_scatter_add(x, 0, neg, src), "scatter_add: index -1 is out of range for dimension 0 of size 3");
    zl_tensor *flat = index_of(SHAPE(2), (int64_t[]){0, 1});
    CHECK_ERR(zl_gather(x, 0, flat), "gather: index must have as many dims as the input (index [2], input [3, 4])");
    zl_tensor *wide = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(2, 5));
    CHECK_ERR(zl_gather(x, 0, wide),
              "gather: index is larger than the input in dimension 1 (index [2, 5], input [3, 4])");
    zl_tensor *tall = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(5, 1)), *g = zl_gather(x, 0, tall);
    CHECK(same_shape(g, SHAPE(5, 1)));
    zl_tensor *small_src = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1, 4));
    zl_tensor *two = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(2, 1));
    CHECK_ERR(zl_scatter(x, 0, two, small_src),
              "scatter: index is larger than src in dimension 0 (index [2, 1], src [1, 4])");
    zl_tensor *isrc = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(3, 4));
    CHECK_ERR(zl_scatter(x, 0, two, isrc), "scatter: src must have the input's dtype (src i64, input f32)");
    zl_tensor *fidx = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1, 1));
    CHECK_ERR(zl_gather(x, 0, fidx), "gather: index must be an integer tensor (i64 or i32), got f32");
    CHECK_ERR(zl_gather(x, 2, two), "gather: dimension 2 is out of range");
    zl_tensor *objs[] = {x, src, big, neg, flat, wide, tall, g, small_src, two, isrc, fidx};
    release_all(objs, 12);
}

/* ---- on the stand-in device (the op case list runs these ops there) ---- */

TEST(a_device_tensor_beside_a_host_one_is_refused)
{
    fake_use_kernels(&stand_in_kernels);
    zl_tensor *xh = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(2, 3, 4), NULL);
    int64_t iv[12];
    for (int i = 0; i < 12; i++) iv[i] = (i * 3 + 1) % 4;
    zl_tensor *ih = index_of(SHAPE(2, 3, 2), iv), *id = to_fake(ih);
    CHECK_ERR(zl_gather(xh, 2, id), "gather: one tensor is on cuda:7 and the other on cpu");
    zl_tensor *objs[] = {xh, ih, id};
    release_all(objs, 3);
    fake_use_kernels(NULL);
}
