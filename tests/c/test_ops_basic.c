/* Elementwise (binary with broadcasting, unary), reductions, matmul and linear:
 * forward against plain double references, gradients against finite
 * differences, and the bad-input messages. */
#include <stdlib.h>
#include "gradcheck.h"

static zl_tensor *leaf(int ndim, const int64_t *shape)
{
    zl_tensor *t = zl_tensor_randn(ZL_DTYPE_F32, ndim, shape, NULL);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

/* A leaf with values in [lo, hi] (for log, sqrt, pow and division). */
static zl_tensor *leaf_range(int ndim, const int64_t *shape, double lo, double hi)
{
    zl_tensor *t = zl_tensor_rand(ZL_DTYPE_F32, ndim, shape, NULL);
    for (int64_t i = 0; i < zl_tensor_numel(t); i++) zl_tensor_set(t, i, lo + (hi - lo) * zl_tensor_get(t, i));
    zl_tensor_set_requires_grad(t, true);
    return t;
}

typedef zl_tensor *(*binop)(zl_tensor *, zl_tensor *);
static zl_tensor *call_binary(zl_tensor **in, void *ctx) { return ((binop)ctx)(in[0], in[1]); }

static double ref_binary(int k, double a, double b)
{
    switch (k) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    default: return pow(a, b);
    }
}

TEST(binary_broadcasting)
{
    static const binop ops[] = {zl_add, zl_sub, zl_mul, zl_div, zl_pow};
    static const char *names[] = {"add", "sub", "mul", "div", "pow"};
    /* shape pairs: equal, row vector, column vector, scalar, leading dims */
    int64_t sa[][3] = {{2, 3, 4}, {2, 3, 4}, {3, 1, 5}, {2, 3, 4}, {4, 1, 1}};
    int64_t sb[][3] = {{2, 3, 4}, {1, 1, 4}, {1, 4, 1}, {1, 1, 1}, {1, 3, 2}};
    int nda[] = {3, 3, 3, 3, 1}, ndb[] = {3, 1, 3, 0, 2};
    for (int k = 0; k < 5; k++) {
        for (int s = 0; s < 5; s++) {
            const int64_t *pa = nda[s] == 1 ? &sa[s][2] : sa[s];
            const int64_t *pb = ndb[s] == 1 ? &sb[s][2] : ndb[s] == 2 ? &sb[s][1] : sb[s];
            zl_tensor *in[2];
            bool positive = k >= 3;
            in[0] = positive ? leaf_range(nda[s], pa, 0.5, 2.0) : leaf(nda[s], pa);
            in[1] = positive ? leaf_range(ndb[s], pb, 0.5, 2.0) : leaf(ndb[s], pb);
            zl_tensor *out = ops[k](in[0], in[1]);
            CHECK(out);
            if (out) {
                int64_t n = zl_tensor_numel(out);
                double *ref = malloc((size_t)n * sizeof *ref);
                /* Reference by explicit broadcast indexing. */
                int nd = zl_tensor_ndim(out);
                const int64_t *os = zl_tensor_shape(out);
                for (int64_t i = 0; i < n; i++) {
                    int64_t idx[8], rem = i;
                    for (int d = nd - 1; d >= 0; d--) { idx[d] = rem % os[d]; rem /= os[d]; }
                    int64_t ia[8], ib[8];
                    for (int d = 0; d < nda[s]; d++) ia[d] = pa[d] == 1 ? 0 : idx[nd - nda[s] + d];
                    for (int d = 0; d < ndb[s]; d++) ib[d] = pb[d] == 1 ? 0 : idx[nd - ndb[s] + d];
                    double va, vb;
                    zl_tensor_get_at(in[0], ia, &va);
                    zl_tensor_get_at(in[1], ib, &vb);
                    ref[i] = ref_binary(k, va, vb);
                }
                zt_check_values(names[k], out, ref, 1e-5);
                free(ref);
                zl_tensor_release(out);
            }
            zt_gradcheck(names[k], call_binary, (void *)ops[k], 2, in, 1e-3, 2e-2);
            zl_tensor_release(in[0]);
            zl_tensor_release(in[1]);
        }
    }
}

TEST(binary_errors_and_dtypes)
{
    zl_tensor *a = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(2, 3)), *b = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(4));
    CHECK_ERR(zl_add(a, b), "add: shapes cannot be broadcast together (shapes [2, 3] and [4])");
    CHECK_ERR(zl_mul(a, NULL), "mul: argument 2 is NULL");
    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 3), *j = zl_add(i, i);
    CHECK(zl_tensor_dtype(j) == ZL_DTYPE_I64 && zl_tensor_get(j, 2) == 4);
    zl_tensor *h = zl_tensor_to(a, ZL_DTYPE_BF16), *k = zl_add(h, h), *m = zl_add(h, a);
    CHECK(zl_tensor_dtype(k) == ZL_DTYPE_BF16 && zl_tensor_dtype(m) == ZL_DTYPE_F32);
    zl_tensor *e = zl_eq(i, j);
    CHECK(zl_tensor_dtype(e) == ZL_DTYPE_BOOL && zl_tensor_get(e, 0) == 1 && zl_tensor_get(e, 1) == 0);
    zl_tensor *all[] = {a, b, i, j, h, k, m, e};
    for (int q = 0; q < 8; q++) zl_tensor_release(all[q]);
}

typedef struct { int kind; double p; } uctx;
static zl_tensor *call_unary(zl_tensor **in, void *c)
{
    uctx *u = c;
    switch (u->kind) {
    case 0: return zl_neg(in[0]);
    case 1: return zl_exp(in[0]);
    case 2: return zl_log(in[0]);
    case 3: return zl_sqrt(in[0]);
    case 4: return zl_tanh(in[0]);
    case 5: return zl_sigmoid(in[0]);
    case 6: return zl_relu(in[0]);
    case 7: return zl_abs(in[0]);
    case 8: return zl_pow_scalar(in[0], u->p);
    case 9: return zl_affine(in[0], u->p, 0.25);
    case 10: return zl_gelu(in[0], false);
    default: return zl_gelu(in[0], true);
    }
}

static double ref_unary(int k, double x, double p)
{
    switch (k) {
    case 0: return -x;
    case 1: return exp(x);
    case 2: return log(x);
    case 3: return sqrt(x);
    case 4: return tanh(x);
    case 5: return 1 / (1 + exp(-x));
    case 6: return x > 0 ? x : 0;
    case 7: return fabs(x);
    case 8: return pow(x, p);
    case 9: return x * p + 0.25;
    case 10: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    }
}

TEST(unary)
{
    static const char *names[] = {"neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs", "pow", "affine", "gelu", "gelu_tanh"};
    for (int k = 0; k < 12; k++) {
        uctx u = {k, k == 8 ? 2.5 : -1.5};
        bool positive = k == 2 || k == 3 || k == 8;
        zl_tensor *x = positive ? leaf_range(SHAPE(3, 5), 0.3, 2.0) : leaf(SHAPE(3, 5));
        if (k == 6 || k == 7) {   /* keep away from the kink at 0 for finite differences */
            for (int64_t i = 0; i < 15; i++) {
                double v = zl_tensor_get(x, i);
                zl_tensor_set(x, i, v + (v >= 0 ? 0.1 : -0.1));
            }
        }
        zl_tensor *y = call_unary(&x, &u);
        double ref[15];
        for (int i = 0; i < 15; i++) ref[i] = ref_unary(k, zl_tensor_get(x, i), u.p);
        zt_check_values(names[k], y, ref, 1e-5);
        zt_gradcheck(names[k], call_unary, &u, 1, &x, 1e-3, 1e-2);
        /* A non-contiguous input reads the same values. */
        zl_tensor *t = zl_tensor_transpose(x, 0, 1), *yt = call_unary(&t, &u), *ytt = zl_tensor_transpose(yt, 0, 1);
        for (int i = 0; i < 15; i++) CHECK(zl_tensor_get(ytt, i) == zl_tensor_get(y, i));
        zl_tensor *all[] = {x, y, t, yt, ytt};
        for (int q = 0; q < 5; q++) zl_tensor_release(all[q]);
    }
    /* NaN goes through every one, as in torch (relu made it 0). */
    for (int k = 0; k < 12; k++) {
        uctx u = {k, k == 8 ? 2.5 : -1.5};
        zl_tensor *x = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1), NAN), *y = call_unary(&x, &u);
        if (!(y && isnan(zl_tensor_get(y, 0)))) zt_fail(__FILE__, __LINE__, "%s(NaN) is not NaN", names[k]);
        zl_tensor_release(x);
        zl_tensor_release(y);
    }
}

typedef struct { int kind, dim; bool keep; } rctx;
static zl_tensor *call_reduce(zl_tensor **in, void *c)
{
    rctx *r = c;
    switch (r->kind) {
    case 0: return zl_sum(in[0], r->dim, r->keep);
    case 1: return zl_mean(in[0], r->dim, r->keep);
    default: return zl_max(in[0], r->dim, r->keep);
    }
}

TEST(reductions)
{
    zl_tensor *x = leaf(SHAPE(3, 4, 5));
    int dims[] = {0, 1, 2, -1, ZL_ALL_DIMS};
    for (int kind = 0; kind < 3; kind++)
        for (int di = 0; di < 5; di++)
            for (int keep = 0; keep < 2; keep++) {
                rctx r = {kind, dims[di], keep};
                zl_tensor *y = call_reduce(&x, &r);
                CHECK(y);
                if (!y) continue;
                int d = dims[di] == -1 ? 2 : dims[di];
                int64_t sh[3] = {3, 4, 5};
                int64_t n = zl_tensor_numel(y);
                double *ref = calloc((size_t)n, sizeof *ref);
                for (int64_t o = 0; o < n; o++) {
                    /* index of the output element in x's coordinates (reduced dim varies) */
                    int64_t oi[3] = {0, 0, 0}, rem = o;
                    if (d != ZL_ALL_DIMS)
                        for (int q = 2; q >= 0; q--) if (q != d) { oi[q] = rem % sh[q]; rem /= sh[q]; }
                    double acc = kind == 2 ? -INFINITY : 0;
                    int64_t cnt = 0;
                    for (int64_t i = 0; i < 60; i++) {
                        int64_t xi[3] = {i / 20, (i / 5) % 4, i % 5};
                        if (d != ZL_ALL_DIMS) {
                            bool match = true;
                            for (int q = 0; q < 3; q++) if (q != d && xi[q] != oi[q]) match = false;
                            if (!match) continue;
                        }
                        double v = zl_tensor_get(x, i);
                        acc = kind == 2 ? fmax(acc, v) : acc + v;
                        cnt++;
                    }
                    ref[o] = kind == 1 ? acc / (double)cnt : acc;
                }
                zt_check_values("reduce", y, ref, 1e-5);
                CHECK(zl_tensor_ndim(y) == (d == ZL_ALL_DIMS ? (keep ? 3 : 0) : (keep ? 3 : 2)));
                free(ref);
                zl_tensor_release(y);
                zt_gradcheck("reduce", call_reduce, &r, 1, &x, 1e-3, 1e-2);
            }
    zl_tensor *am = zl_argmax(x, 1, false);
    CHECK(zl_tensor_dtype(am) == ZL_DTYPE_I64 && zl_tensor_ndim(am) == 2);
    for (int64_t o = 0; o < 15; o++) {
        int64_t i0 = o / 5, i2 = o % 5, best = 0;
        for (int64_t k = 1; k < 4; k++)
            if (zl_tensor_get(x, i0 * 20 + k * 5 + i2) > zl_tensor_get(x, i0 * 20 + best * 5 + i2)) best = k;
        CHECK(zl_tensor_get(am, o) == best);
    }
    CHECK_ERR(zl_sum(x, 3, false), "sum: dimension 3 is out of range for a 3-d tensor");
    zl_tensor *empty = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(0, 3));
    CHECK_ERR(zl_max(empty, 0, false), "empty dimension");
    zl_tensor_release(empty);
    zl_tensor_release(am);
    zl_tensor_release(x);
}

TEST(full_sum_is_thread_independent)
{
    zl_manual_seed(3);
    zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(1000003), NULL);
    zl_set_num_threads(1);
    zl_tensor *a = zl_sum(x, ZL_ALL_DIMS, false);
    zl_set_num_threads(2);
    zl_tensor *b = zl_sum(x, ZL_ALL_DIMS, false);
    CHECK(zl_tensor_get(a, 0) == zl_tensor_get(b, 0));
    double ref = 0;
    for (int64_t i = 0; i < 1000003; i++) ref += zl_tensor_get(x, i);
    CHECK_CLOSE(zl_tensor_get(a, 0), ref, 1e-6);
    zl_tensor_release(a);
    zl_tensor_release(b);
    zl_tensor_release(x);
}

static zl_tensor *call_matmul(zl_tensor **in, void *c) { return zl_matmul(in[0], in[1]); }

static void ref_matmul_check(zl_tensor *a, zl_tensor *b, zl_tensor *out)
{
    /* Reference for [.., m, k] x [.., k, n] with 2-D/3-D operands (batch broadcast). */
    int na = zl_tensor_ndim(a), nb = zl_tensor_ndim(b), no = zl_tensor_ndim(out);
    int64_t m = zl_tensor_size(a, -2), k = zl_tensor_size(a, -1), n = zl_tensor_size(b, -1);
    int64_t batches = zl_tensor_numel(out) / (m * n);
    for (int64_t bi = 0; bi < batches; bi++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t q = 0; q < k; q++) {
                    int64_t ai = (na == 3 && zl_tensor_size(a, 0) > 1 ? bi : 0) * m * k + i * k + q;
                    int64_t bj = (nb == 3 && zl_tensor_size(b, 0) > 1 ? bi : 0) * k * n + q * n + j;
                    s += zl_tensor_get(a, ai) * zl_tensor_get(b, bj);
                }
                CHECK_CLOSE(zl_tensor_get(out, bi * m * n + i * n + j), s, 1e-5);
            }
    (void)no;
}

TEST(matmul)
{
    int64_t shapes[][2][3] = {
        {{0, 3, 4}, {0, 4, 5}},   /* 2-D x 2-D (leading 0 = not present) */
        {{2, 3, 4}, {0, 4, 5}},   /* batch x 2-D */
        {{2, 3, 4}, {2, 4, 5}},   /* batch x batch */
        {{1, 3, 4}, {2, 4, 5}},   /* broadcast batch */
    };
    for (int s = 0; s < 4; s++) {
        int na = shapes[s][0][0] ? 3 : 2, nb = shapes[s][1][0] ? 3 : 2;
        zl_tensor *in[2] = {leaf(na, shapes[s][0] + (3 - na)), leaf(nb, shapes[s][1] + (3 - nb))};
        zl_tensor *out = zl_matmul(in[0], in[1]);
        CHECK(out);
        if (out) ref_matmul_check(in[0], in[1], out);
        zl_tensor_release(out);
        zt_gradcheck("matmul", call_matmul, NULL, 2, in, 1e-2, 1e-2);
        zl_tensor_release(in[0]);
        zl_tensor_release(in[1]);
    }
    /* Transposed operand read in place; 1-D operands. */
    zl_tensor *a = leaf(SHAPE(4, 3)), *b = leaf(SHAPE(4, 5));
    zl_tensor *at = zl_tensor_transpose(a, 0, 1), *atc = zl_tensor_contiguous(at);
    zl_tensor *o1 = zl_matmul(at, b), *o2 = zl_matmul(atc, b);
    for (int i = 0; i < 15; i++) CHECK_CLOSE(zl_tensor_get(o1, i), zl_tensor_get(o2, i), 1e-6);
    zl_tensor *v = leaf(SHAPE(4)), *w = leaf(SHAPE(4));
    zl_tensor *dot = zl_matmul(v, w), *vb = zl_matmul(v, b);
    CHECK(zl_tensor_ndim(dot) == 0 && zl_tensor_ndim(vb) == 1 && zl_tensor_size(vb, 0) == 5);
    double s = 0;
    for (int i = 0; i < 4; i++) s += zl_tensor_get(v, i) * zl_tensor_get(w, i);
    CHECK_CLOSE(zl_tensor_get(dot, 0), s, 1e-5);
    zl_tensor *vin[2] = {v, b};
    zt_gradcheck("matmul 1-D", call_matmul, NULL, 2, vin, 1e-2, 1e-2);
    CHECK_ERR(zl_matmul(a, a), "matmul: inner dimensions differ (shapes [4, 3] and [4, 3])");
    zl_tensor *i64 = zl_tensor_arange(ZL_DTYPE_I64, 4);
    CHECK_ERR(zl_matmul(i64, v), "must be a float tensor");
    zl_tensor *all[] = {a, b, at, atc, o1, o2, v, w, dot, vb, i64};
    for (int q = 0; q < 11; q++) zl_tensor_release(all[q]);
}

static zl_tensor *call_linear(zl_tensor **in, void *c) { return zl_linear(in[0], in[1], c ? in[2] : NULL); }

TEST(linear)
{
    zl_tensor *in[3] = {leaf(SHAPE(2, 3, 4)), leaf(SHAPE(5, 4)), leaf(SHAPE(5))};
    zl_tensor *y = zl_linear(in[0], in[1], in[2]);
    CHECK(y && zl_tensor_size(y, -1) == 5 && zl_tensor_ndim(y) == 3);
    for (int64_t r = 0; r < 6; r++)
        for (int64_t o = 0; o < 5; o++) {
            double s = zl_tensor_get(in[2], o);
            for (int64_t i = 0; i < 4; i++) s += zl_tensor_get(in[0], r * 4 + i) * zl_tensor_get(in[1], o * 4 + i);
            CHECK_CLOSE(zl_tensor_get(y, r * 5 + o), s, 1e-5);
        }
    zt_gradcheck("linear", call_linear, (void *)1, 3, in, 1e-2, 1e-2);
    zt_gradcheck("linear no bias", call_linear, NULL, 2, in, 1e-2, 1e-2);
    CHECK_ERR(zl_linear(in[1], in[0], NULL), "linear: input's last dimension must equal weight's second");
    CHECK_ERR(zl_linear(in[0], in[1], in[1]), "bias must be [out]");
    zl_tensor_release(y);
    for (int q = 0; q < 3; q++) zl_tensor_release(in[q]);
}

TEST(same_seed_same_result)
{
    double first = 0;
    for (int run = 0; run < 2; run++) {
        zl_manual_seed(99);
        zl_tensor *x = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(64, 32), NULL), *w = leaf(SHAPE(16, 32));
        zl_tensor *y = zl_linear(x, w, NULL), *t = zl_tanh(y), *s = zl_mean(t, ZL_ALL_DIMS, false);
        zl_backward(s, NULL, false);
        double v = zl_tensor_get(s, 0) + zl_tensor_get(zl_tensor_grad(w), 7);
        if (run == 0) first = v;
        else CHECK(v == first);
        zl_tensor *all[] = {x, w, y, t, s};
        for (int q = 0; q < 5; q++) zl_tensor_release(all[q]);
    }
}

TEST(integers_are_exact_and_linear_with_no_inputs)
{
    int64_t big[2] = {16777217, 7};
    zl_tensor *a = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){2}, big);
    zl_tensor *z = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(2));
    zl_tensor *s = zl_add(a, z), *e = zl_eq(a, s), *q = zl_div(a, z);
    CHECK(zl_tensor_get(s, 0) == 16777217 && zl_tensor_get(e, 0) == 1);
    CHECK(zl_tensor_dtype(q) == ZL_DTYPE_F32 && isinf(zl_tensor_get(q, 0)));   /* true division */
    zl_tensor *x = leaf(SHAPE(3, 0)), *w = leaf(SHAPE(2, 0)), *b = leaf(SHAPE(2));
    bool was = zl_grad_set_enabled(false);
    zl_tensor_fill(b, 7.0);
    zl_grad_set_enabled(was);
    zl_tensor *y = zl_linear(x, w, b), *ys = zl_sum(y, ZL_ALL_DIMS, false);
    for (int i = 0; i < 6; i++) CHECK(zl_tensor_get(y, i) == 7.0);
    CHECK(zl_backward(ys, NULL, false) == ZL_OK && zl_tensor_get(zl_tensor_grad(b), 0) == 3.0);
    zl_tensor *img = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1, 2, 0, 4));
    CHECK_ERR(zl_max_pool2d(img, 2, 2, 2, 2, 1, 1), "height and width must be positive");
    zl_tensor *all[] = {a, z, s, e, q, x, w, b, y, ys, img};
    for (int k = 0; k < 11; k++) zl_tensor_release(all[k]);
}

/* An integer to a whole power stays an integer of its dtype, exact (torch's
 * i64 ** 2); a fractional power is a float. */
TEST(integer_powers_stay_integers)
{
    int64_t v[2] = {(int64_t)1 << 31, -3};
    zl_tensor *a = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){2}, v);
    zl_tensor *sq = zl_pow_scalar(a, 2), *cube = zl_pow_scalar(a, 3), *root = zl_pow_scalar(a, 0.5);
    CHECK(sq && zl_tensor_dtype(sq) == ZL_DTYPE_I64 && ((int64_t *)zl_tensor_data(sq))[0] == (int64_t)1 << 62);
    CHECK(cube && ((int64_t *)zl_tensor_data(cube))[1] == -27);
    CHECK(root && zl_tensor_dtype(root) == ZL_DTYPE_F32);
    int32_t w[1] = {7};
    zl_tensor *b = zl_tensor_from_data(ZL_DTYPE_I32, 1, (int64_t[]){1}, w), *b0 = zl_pow_scalar(b, 0);
    CHECK(b0 && zl_tensor_dtype(b0) == ZL_DTYPE_I32 && *(int32_t *)zl_tensor_data(b0) == 1);
    zl_tensor *all[] = {a, sq, cube, root, b, b0};
    for (int k = 0; k < 6; k++) zl_tensor_release(all[k]);
}

/* Integer reductions as torch's: sum in i64, max in the input's dtype,
 * exact beyond f32's 2^24 and double's 2^53 (they went through f32). */
TEST(integer_reductions_are_exact)
{
    int64_t v[4] = {((int64_t)1 << 53) + 1, 2, -5, ((int64_t)1 << 53) + 1};
    zl_tensor *a = zl_tensor_from_data(ZL_DTYPE_I64, 2, (int64_t[]){2, 2}, v);
    zl_tensor *s = zl_sum(a, ZL_ALL_DIMS, false), *s0 = zl_sum(a, 0, false), *m = zl_max(a, 1, false);
    zl_tensor *am = zl_argmax(a, 0, false);
    CHECK(s && zl_tensor_dtype(s) == ZL_DTYPE_I64 && *(int64_t *)zl_tensor_data(s) == ((int64_t)1 << 54) - 1);
    CHECK(s0 && ((int64_t *)zl_tensor_data(s0))[0] == ((int64_t)1 << 53) - 4);
    CHECK(m && zl_tensor_dtype(m) == ZL_DTYPE_I64 && ((int64_t *)zl_tensor_data(m))[0] == ((int64_t)1 << 53) + 1);
    CHECK(am && ((int64_t *)zl_tensor_data(am))[1] == 1);
    int32_t w[3] = {16777217, 1, 3};
    zl_tensor *b = zl_tensor_from_data(ZL_DTYPE_I32, 1, (int64_t[]){3}, w);
    zl_tensor *bs = zl_sum(b, ZL_ALL_DIMS, false), *bm = zl_max(b, 0, false), *mean = zl_mean(b, 0, false);
    CHECK(bs && zl_tensor_dtype(bs) == ZL_DTYPE_I64 && *(int64_t *)zl_tensor_data(bs) == 16777221);
    CHECK(bm && zl_tensor_dtype(bm) == ZL_DTYPE_I32 && *(int32_t *)zl_tensor_data(bm) == 16777217);
    CHECK(mean && zl_tensor_dtype(mean) == ZL_DTYPE_F32);
    zl_tensor *all[] = {a, s, s0, m, am, b, bs, bm, mean};
    for (int k = 0; k < 9; k++) zl_tensor_release(all[k]);
}
