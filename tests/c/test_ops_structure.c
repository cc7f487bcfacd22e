/* cat, stack, index_select, where and masked_fill: forward against references
 * built element by element here, dtype promotion, gradients against finite
 * differences (broadcast inputs included), and every bad input. */
#include <stdlib.h>
#include "gradcheck.h"

static zl_tensor *leaf(int ndim, const int64_t *shape)
{
    zl_tensor *t = zt_randn(ndim, shape);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

/* Element of t at a full index, in double. */
static double at(const zl_tensor *t, const int64_t *idx)
{
    double v = NAN;
    zl_tensor_get_at(t, idx, &v);
    return v;
}

/* Advance a row-major index over shape; false after the last one. */
static bool next_index(int nd, const int64_t *shape, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

static bool shape_is(const zl_tensor *t, int nd, const int64_t *shape)
{
    return t && zl_tensor_ndim(t) == nd && memcmp(zl_tensor_shape(t), shape, (size_t)nd * sizeof *shape) == 0;
}

/* ---- cat and stack ---- */

/* Reference cat: walk the output's indices and find the input that holds each. */
static double *cat_reference(zl_tensor *const *ts, int n, int d, int nd, const int64_t *oshape)
{
    int64_t total = 1;
    for (int k = 0; k < nd; k++) total *= oshape[k];
    double *ref = malloc((size_t)total * sizeof *ref);
    int64_t idx[ZL_MAX_DIMS] = {0}, e = 0;
    if (total)
        do {
            int64_t src[ZL_MAX_DIMS], pos = idx[d];
            int i = 0;
            while (pos >= zl_tensor_size(ts[i], d)) pos -= zl_tensor_size(ts[i++], d);
            memcpy(src, idx, sizeof src);
            src[d] = pos;
            ref[e++] = at(ts[i], src);
        } while (next_index(nd, oshape, idx));
    return ref;
}

TEST(cat_forward)
{
    zl_tensor *a = zt_randn(SHAPE(2, 3, 4)), *b = zt_randn(SHAPE(2, 1, 4)), *c = zt_randn(SHAPE(2, 2, 4));
    zl_tensor *ts[3] = {a, b, c};
    for (int dim = -2; dim <= 1; dim += 3) {   /* dim 1, written as -2 and as 1 */
        zl_tensor *y = zl_cat(ts, 3, dim);
        CHECK(shape_is(y, SHAPE(2, 6, 4)));
        double *ref = cat_reference(ts, 3, 1, SHAPE(2, 6, 4));
        if (y) zt_check_values("cat dim 1", y, ref, 0);
        free(ref);
        zl_tensor_release(y);
    }
    /* dim 0 and the last dim, with a transposed (non-contiguous) input */
    zl_tensor *p = zt_randn(SHAPE(4, 3, 2)), *pt = zl_tensor_transpose(p, 0, 2);   /* [2, 3, 4] */
    zl_tensor *t0[2] = {a, pt};
    zl_tensor *y0 = zl_cat(t0, 2, 0);
    CHECK(shape_is(y0, SHAPE(4, 3, 4)));
    double *r0 = cat_reference(t0, 2, 0, SHAPE(4, 3, 4));
    if (y0) zt_check_values("cat dim 0", y0, r0, 0);
    zl_tensor *y2 = zl_cat(t0, 2, -1);
    CHECK(shape_is(y2, SHAPE(2, 3, 8)));
    double *r2 = cat_reference(t0, 2, 2, SHAPE(2, 3, 8));
    if (y2) zt_check_values("cat dim 2", y2, r2, 0);
    free(r0); free(r2);
    zl_tensor *all[] = {a, b, c, p, pt, y0, y2};
    for (int i = 0; i < 7; i++) zl_tensor_release(all[i]);
}

TEST(cat_dtypes)
{
    /* integers stay integers; an integer and a float give the float; two floats give f32 */
    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 3), *j = zl_tensor_arange(ZL_DTYPE_I64, 2);
    zl_tensor *ij[2] = {i, j};
    zl_tensor *y = zl_cat(ij, 2, 0);
    CHECK(y && zl_tensor_dtype(y) == ZL_DTYPE_I64);
    double want[5] = {0, 1, 2, 0, 1};
    if (y) zt_check_values("cat i64", y, want, 0);
    zl_tensor *h = zl_tensor_full(ZL_DTYPE_BF16, SHAPE(2), 1.5), *f = zl_tensor_full(ZL_DTYPE_F16, SHAPE(1), -2.0);
    zl_tensor *ih[2] = {i, h}, *hf[2] = {h, f};
    zl_tensor *y1 = zl_cat(ih, 2, 0), *y2 = zl_cat(hf, 2, 0);
    CHECK(y1 && zl_tensor_dtype(y1) == ZL_DTYPE_BF16);
    CHECK(y2 && zl_tensor_dtype(y2) == ZL_DTYPE_F32);
    double w1[5] = {0, 1, 2, 1.5, 1.5}, w2[3] = {1.5, 1.5, -2};
    if (y1) zt_check_values("cat i64+bf16", y1, w1, 0);
    if (y2) zt_check_values("cat bf16+f16", y2, w2, 0);
    zl_tensor *u = zl_tensor_full(ZL_DTYPE_BOOL, SHAPE(2), 1), *u1[1] = {u};
    zl_tensor *y3 = zl_cat(u1, 1, 0);
    CHECK(y3 && zl_tensor_dtype(y3) == ZL_DTYPE_BOOL && zl_tensor_get(y3, 1) == 1);
    zl_tensor *all[] = {i, j, y, h, f, y1, y2, u, y3};
    for (int k = 0; k < 9; k++) zl_tensor_release(all[k]);
}

typedef struct { int n, dim; bool stack; } join_ctx;

static zl_tensor *join_fn(zl_tensor **in, void *ctx)
{
    const join_ctx *jc = ctx;
    return jc->stack ? zl_stack(in, jc->n, jc->dim) : zl_cat(in, jc->n, jc->dim);
}

TEST(cat_gradients)
{
    for (int dim = 0; dim < 3; dim++) {
        int64_t sa[3] = {2, 3, 2}, sb[3] = {2, 3, 2}, sc[3] = {2, 3, 2};
        sa[dim] = 1; sc[dim] = 3;
        zl_tensor *in[3] = {leaf(3, sa), zt_randn(3, sb), leaf(3, sc)};   /* the middle one needs no gradient */
        join_ctx jc = {3, dim, false};
        zt_gradcheck("cat", join_fn, &jc, 3, in, 1e-2, 1e-2);
        CHECK(zl_tensor_grad(in[1]) == NULL);
        for (int i = 0; i < 3; i++) zl_tensor_release(in[i]);
    }
    /* more inputs than a node's inline gradient slots */
    zl_tensor *many[10];
    for (int i = 0; i < 10; i++) many[i] = leaf(SHAPE(2, i % 3 + 1));
    join_ctx jm = {10, -1, false};
    zt_gradcheck("cat 10", join_fn, &jm, 10, many, 1e-2, 1e-2);
    for (int i = 0; i < 10; i++) zl_tensor_release(many[i]);
    /* the same tensor twice: both halves of the gradient add up */
    zl_tensor *x = leaf(SHAPE(2, 3)), *xx[2] = {x, x};
    join_ctx jc = {2, 1, false};
    zt_gradcheck("cat self", join_fn, &jc, 1, xx, 1e-2, 1e-2);
    zl_tensor_release(x);
}

TEST(stack_forward_and_gradients)
{
    zl_tensor *a = zt_randn(SHAPE(2, 3)), *b = zt_randn(SHAPE(2, 3)), *c = zt_randn(SHAPE(2, 3));
    zl_tensor *ts[3] = {a, b, c};
    for (int dim = -3; dim < 3; dim++) {
        int d = dim < 0 ? dim + 3 : dim;
        zl_tensor *y = zl_stack(ts, 3, dim);
        int64_t shape[3], k = 0;
        for (int i = 0; i < 3; i++) shape[i] = i == d ? 3 : (k++ == 0 ? 2 : 3);
        CHECK(shape_is(y, 3, shape));
        if (!y) continue;
        int64_t idx[3] = {0}, e = 0;
        double *ref = malloc(18 * sizeof *ref);
        do {
            int64_t src[2];
            for (int i = 0, j = 0; i < 3; i++)
                if (i != d) src[j++] = idx[i];
            ref[e++] = at(ts[idx[d]], src);
        } while (next_index(3, shape, idx));
        zt_check_values("stack", y, ref, 0);
        free(ref);
        zl_tensor_release(y);
    }
    for (int dim = 0; dim < 3; dim++) {
        zl_tensor *in[3] = {leaf(SHAPE(2, 3)), leaf(SHAPE(2, 3)), zt_randn(SHAPE(2, 3))};
        join_ctx jc = {3, dim, true};
        zt_gradcheck("stack", join_fn, &jc, 3, in, 1e-2, 1e-2);
        for (int i = 0; i < 3; i++) zl_tensor_release(in[i]);
    }
    zl_tensor_release(a); zl_tensor_release(b); zl_tensor_release(c);
}

TEST(cat_stack_errors)
{
    zl_tensor *a = zt_randn(SHAPE(2, 3, 4)), *b = zt_randn(SHAPE(2, 5, 4)), *c = zt_randn(SHAPE(2, 3, 5));
    zl_tensor *d = zt_randn(SHAPE(2, 3));
    zl_tensor *abc[3] = {a, b, c}, *ad[2] = {a, d}, *ab[2] = {a, b}, *an[2] = {a, NULL};
    CHECK_ERR(zl_cat(abc, 0, 0), "cat: needs at least one tensor, got 0");
    CHECK_ERR(zl_cat(NULL, 2, 0), "cat: needs at least one tensor");
    CHECK_ERR(zl_cat(abc, 3, 1),
              "cat: tensor 2 differs from tensor 0 outside dimension 1 (shapes [2, 3, 5] and [2, 3, 4])");
    CHECK_ERR(zl_cat(ad, 2, 0),
              "cat: tensor 1 differs from tensor 0 outside dimension 0 (shapes [2, 3] and [2, 3, 4])");
    CHECK_ERR(zl_cat(abc, 2, 3), "cat: dimension 3 is out of range for a 3-d tensor");
    CHECK_ERR(zl_cat(an, 2, 0), "cat: argument 2 is NULL");
    CHECK_ERR(zl_stack(ab, 2, 0),
              "stack: tensor 1 has a different shape from tensor 0 (shapes [2, 5, 4] and [2, 3, 4])");
    CHECK_ERR(zl_stack(ab, 0, 0), "stack: needs at least one tensor, got 0");
    CHECK_ERR(zl_stack(ad, 1, 4), "stack: dimension 4 is out of range for a new dimension of a 3-d tensor (expected -4..3)");
    zl_tensor_release(a); zl_tensor_release(b); zl_tensor_release(c); zl_tensor_release(d);
}

/* ---- index_select ---- */

TEST(index_select_forward)
{
    zl_tensor *x = zt_randn(SHAPE(4, 5, 3));
    int64_t iv[4] = {4, 0, 4, 2};
    int32_t iv32[4] = {4, 0, 4, 2};
    zl_tensor *i64 = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(4), iv);
    zl_tensor *i32 = zl_tensor_from_data(ZL_DTYPE_I32, SHAPE(4), iv32);
    zl_tensor *idx[2] = {i64, i32};
    for (int k = 0; k < 2; k++) {
        zl_tensor *y = zl_index_select(x, 1, idx[k]);
        CHECK(shape_is(y, SHAPE(4, 4, 3)));
        if (!y) continue;
        double ref[48];
        int64_t e = 0;
        for (int64_t a = 0; a < 4; a++)
            for (int64_t m = 0; m < 4; m++)
                for (int64_t c = 0; c < 3; c++) ref[e++] = at(x, (int64_t[]){a, iv[m], c});
        zt_check_values("index_select dim 1", y, ref, 0);
        zl_tensor_release(y);
    }
    /* dim -1 of a transposed view; dim 0 of an integer tensor */
    zl_tensor *xt = zl_tensor_transpose(x, 0, 2);   /* [3, 5, 4] */
    int64_t jv[2] = {3, 1};
    zl_tensor *j = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(2), jv);
    zl_tensor *y = zl_index_select(xt, -1, j);
    CHECK(shape_is(y, SHAPE(3, 5, 2)));
    if (y) {
        double ref[30];
        int64_t e = 0;
        for (int64_t a = 0; a < 3; a++)
            for (int64_t b = 0; b < 5; b++)
                for (int64_t m = 0; m < 2; m++) ref[e++] = at(xt, (int64_t[]){a, b, jv[m]});
        zt_check_values("index_select view", y, ref, 0);
    }
    zl_tensor *r = zl_tensor_arange(ZL_DTYPE_I64, 5), *yi = zl_index_select(r, 0, j);
    CHECK(yi && zl_tensor_dtype(yi) == ZL_DTYPE_I64 && zl_tensor_get(yi, 0) == 3 && zl_tensor_get(yi, 1) == 1);
    zl_tensor *empty = zl_tensor_new(ZL_DTYPE_I64, SHAPE(0), ZL_MEM_OTHER), *ye = zl_index_select(x, 0, empty);
    CHECK(shape_is(ye, SHAPE(0, 5, 3)));
    zl_tensor *all[] = {x, i64, i32, xt, j, y, r, yi, empty, ye};
    for (int k = 0; k < 10; k++) zl_tensor_release(all[k]);
}

typedef struct { int dim; zl_tensor *index; } isel_ctx;

static zl_tensor *isel_fn(zl_tensor **in, void *ctx)
{
    const isel_ctx *ic = ctx;
    return zl_index_select(in[0], ic->dim, ic->index);
}

TEST(index_select_gradients)
{
    /* repeated indices scatter-add; index 1 of dim 1 is never picked (gradient 0) */
    int64_t iv[5] = {2, 0, 2, 3, 2};
    zl_tensor *index = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(5), iv);
    for (int dim = 0; dim < 3; dim++) {
        zl_tensor *x = leaf(SHAPE(4, 4, 4));
        isel_ctx ic = {dim, index};
        zt_gradcheck("index_select", isel_fn, &ic, 1, &x, 1e-2, 1e-2);
        zl_tensor_release(x);
    }
    /* wide rows: more than one block of columns per slice */
    zl_tensor *x = leaf(SHAPE(4, 300));
    isel_ctx ic = {0, index};
    zt_gradcheck("index_select wide", isel_fn, &ic, 1, &x, 1e-2, 1e-2);
    zl_tensor_release(x);
    zl_tensor_release(index);
}

TEST(index_select_errors)
{
    zl_tensor *x = zt_randn(SHAPE(4, 5));
    int64_t bad[3] = {1, 5, 0}, neg[1] = {-1};
    zl_tensor *ib = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(3), bad);
    zl_tensor *in = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(1), neg);
    zl_tensor *i2 = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(2, 2)), *fi = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(2));
    CHECK_ERR(zl_index_select(x, 1, ib),
              "index_select: index 5 is out of range for dimension 1 of size 5 (input [4, 5])");
    CHECK_ERR(zl_index_select(x, 0, in), "index_select: index -1 is out of range for dimension 0 of size 4");
    CHECK_ERR(zl_index_select(x, 0, i2), "index_select: index must be 1-D, got shape [2, 2]");
    CHECK_ERR(zl_index_select(x, 0, fi), "index_select: index must be an integer tensor (i64 or i32), got f32");
    CHECK_ERR(zl_index_select(x, 2, in), "index_select: dimension 2 is out of range for a 2-d tensor");
    zl_tensor *all[] = {x, ib, in, i2, fi};
    for (int k = 0; k < 5; k++) zl_tensor_release(all[k]);
}

/* ---- where and masked_fill ---- */

TEST(where_forward)
{
    /* cond [3, 1], a [1, 4], b [2, 1, 1] -> [2, 3, 4] */
    uint8_t cv[3] = {1, 0, 7};
    zl_tensor *cond = zl_tensor_from_data(ZL_DTYPE_U8, SHAPE(3, 1), cv);
    zl_tensor *a = zt_randn(SHAPE(1, 4)), *b = zt_randn(SHAPE(2, 1, 1));
    zl_tensor *y = zl_where(cond, a, b);
    CHECK(shape_is(y, SHAPE(2, 3, 4)) && zl_tensor_dtype(y) == ZL_DTYPE_F32);
    double ref[24];
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++)
            for (int64_t k = 0; k < 4; k++)
                ref[(i * 3 + j) * 4 + k] = cv[j] ? zl_tensor_get(a, k) : zl_tensor_get(b, i);
    if (y) zt_check_values("where", y, ref, 0);
    /* bool condition, integer and float branches promote to the float */
    bool bv[4] = {true, false, false, true};
    zl_tensor *bc = zl_tensor_from_data(ZL_DTYPE_BOOL, SHAPE(4), bv);
    zl_tensor *ia = zl_tensor_arange(ZL_DTYPE_I64, 4), *fb = zl_tensor_full(ZL_DTYPE_BF16, SHAPE(1), -0.5);
    zl_tensor *y2 = zl_where(bc, ia, fb), *y3 = zl_where(bc, ia, ia);
    CHECK(y2 && zl_tensor_dtype(y2) == ZL_DTYPE_BF16);
    CHECK(y3 && zl_tensor_dtype(y3) == ZL_DTYPE_I64);
    double w2[4] = {0, -0.5, -0.5, 3};
    if (y2) zt_check_values("where promote", y2, w2, 0);
    zl_tensor *all[] = {cond, a, b, y, bc, ia, fb, y2, y3};
    for (int k = 0; k < 9; k++) zl_tensor_release(all[k]);
}

static zl_tensor *where_fn(zl_tensor **in, void *ctx) { return zl_where(ctx, in[0], in[1]); }

TEST(where_gradients)
{
    uint8_t cv[3] = {1, 0, 1};
    zl_tensor *cond = zl_tensor_from_data(ZL_DTYPE_U8, SHAPE(3, 1), cv);
    zl_tensor *in[2] = {leaf(SHAPE(1, 4)), leaf(SHAPE(2, 1, 1))};
    zt_gradcheck("where broadcast", where_fn, cond, 2, in, 1e-2, 1e-2);
    zl_tensor_release(in[0]); zl_tensor_release(in[1]);
    /* same shapes, b a constant */
    zl_tensor *x = zt_randn(SHAPE(3, 4)), *zero = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(3, 4)), *c2 = zl_gt(x, zero);
    zl_tensor *in2[2] = {leaf(SHAPE(3, 4)), zt_randn(SHAPE(3, 4))};
    zt_gradcheck("where", where_fn, c2, 2, in2, 1e-2, 1e-2);
    zl_tensor *all[] = {cond, x, zero, c2, in2[0], in2[1]};
    for (int k = 0; k < 6; k++) zl_tensor_release(all[k]);
}

static zl_tensor *masked_fill_fn(zl_tensor **in, void *ctx) { return zl_masked_fill(in[0], ctx, -5.0); }

TEST(masked_fill_forward_and_gradients)
{
    bool mv[3] = {false, true, false};
    zl_tensor *mask = zl_tensor_from_data(ZL_DTYPE_BOOL, SHAPE(3, 1), mv);
    zl_tensor *x = leaf(SHAPE(2, 3, 4)), *y = zl_masked_fill(x, mask, -5.0);
    CHECK(shape_is(y, SHAPE(2, 3, 4)));
    double ref[24];
    for (int64_t e = 0; e < 24; e++) ref[e] = mv[e / 4 % 3] ? -5.0 : zl_tensor_get(x, e);
    if (y) zt_check_values("masked_fill", y, ref, 0);
    zt_gradcheck("masked_fill", masked_fill_fn, mask, 1, &x, 1e-2, 1e-2);
    /* a transposed input [4, 3] and a u8 mask over its last dim; an integer input */
    zl_tensor *p = zt_randn(SHAPE(3, 4)), *pt = zl_tensor_transpose(p, 0, 1);
    uint8_t uv[3] = {0, 0, 2};
    zl_tensor *um = zl_tensor_from_data(ZL_DTYPE_U8, SHAPE(3), uv), *yt = zl_masked_fill(pt, um, 9.0);
    double rt[12];
    for (int64_t i = 0; i < 4; i++)
        for (int64_t j = 0; j < 3; j++) rt[i * 3 + j] = uv[j] ? 9.0 : at(pt, (int64_t[]){i, j});
    CHECK(shape_is(yt, SHAPE(4, 3)));
    if (yt) zt_check_values("masked_fill view", yt, rt, 0);
    zl_tensor *r = zl_tensor_arange(ZL_DTYPE_I32, 3), *yi = zl_masked_fill(r, um, -7);
    CHECK(yi && zl_tensor_dtype(yi) == ZL_DTYPE_I32);
    double ri[3] = {0, 1, -7};
    if (yi) zt_check_values("masked_fill i32", yi, ri, 0);
    zl_tensor *all[] = {mask, x, y, p, pt, um, yt, r, yi};
    for (int k = 0; k < 9; k++) zl_tensor_release(all[k]);
}

TEST(where_masked_fill_errors)
{
    zl_tensor *x = zt_randn(SHAPE(2, 3, 4)), *f = zt_randn(SHAPE(3, 1)), *b5 = zt_randn(SHAPE(5));
    zl_tensor *c = zl_tensor_zeros(ZL_DTYPE_BOOL, SHAPE(3, 1)), *c5 = zl_tensor_zeros(ZL_DTYPE_BOOL, SHAPE(5));
    zl_tensor *c23 = zl_tensor_zeros(ZL_DTYPE_U8, SHAPE(1, 2, 3, 4));
    CHECK_ERR(zl_where(f, x, x), "where: condition must be bool or u8, got f32");
    CHECK_ERR(zl_where(c, x, b5), "where: shapes cannot be broadcast together (condition [3, 1], a [2, 3, 4], b [5])");
    CHECK_ERR(zl_where(c, x, NULL), "where: argument 3 is NULL");
    CHECK_ERR(zl_masked_fill(x, f, 0), "masked_fill: mask must be bool or u8, got f32");
    CHECK_ERR(zl_masked_fill(x, c5, 0),
              "masked_fill: mask of shape [5] cannot be broadcast to the input's shape [2, 3, 4]");
    CHECK_ERR(zl_masked_fill(x, c23, 0),
              "masked_fill: mask of shape [1, 2, 3, 4] cannot be broadcast to the input's shape [2, 3, 4]");
    zl_tensor *all[] = {x, f, b5, c, c5, c23};
    for (int k = 0; k < 6; k++) zl_tensor_release(all[k]);
}

TEST(large_inputs_split_across_threads)
{
    /* sizes above the parallel threshold, checked element by element */
    zl_tensor *x = zt_randn(SHAPE(64, 1024)), *zero = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(64, 1));
    zl_tensor *col = zt_randn(SHAPE(64, 1)), *cond = zl_gt(col, zero);
    zl_tensor *y = zl_where(cond, x, zero);
    double *ref = malloc(64 * 1024 * sizeof *ref);
    for (int64_t e = 0; e < 64 * 1024; e++) ref[e] = zl_tensor_get(col, e / 1024) > 0 ? zl_tensor_get(x, e) : 0.0;
    if (y) zt_check_values("where large", y, ref, 0);
    zl_tensor *a = zt_randn(SHAPE(64, 600)), *b = zt_randn(SHAPE(64, 424)), *ab[2] = {a, b};
    zl_tensor *c = zl_cat(ab, 2, 1);
    for (int64_t e = 0; e < 64 * 1024; e++) {
        int64_t r = e / 1024, k = e % 1024;
        ref[e] = k < 600 ? zl_tensor_get(a, r * 600 + k) : zl_tensor_get(b, r * 424 + k - 600);
    }
    if (c) zt_check_values("cat large", c, ref, 0);
    /* index_select backward with ones: each column's gradient counts how often it was picked */
    zl_tensor *w = leaf(SHAPE(256, 300));
    int64_t iv[200];
    for (int k = 0; k < 200; k++) iv[k] = (k * 7) % 150;
    zl_tensor *index = zl_tensor_from_data(ZL_DTYPE_I64, SHAPE(200), iv), *s = zl_index_select(w, 1, index);
    zl_tensor *ones = zl_tensor_full(ZL_DTYPE_F32, SHAPE(256, 200), 1.0);
    CHECK(s && zl_backward(s, ones, false) == ZL_OK);
    int count[300] = {0};
    for (int k = 0; k < 200; k++) count[iv[k]]++;
    double *gref = malloc(256 * 300 * sizeof *gref);
    for (int64_t e = 0; e < 256 * 300; e++) gref[e] = count[e % 300];
    zt_check_values("index_select large backward", zl_tensor_grad(w), gref, 0);
    free(ref);
    free(gref);
    zl_tensor *all[] = {x, zero, col, cond, y, a, b, c, w, index, s, ones};
    for (int k = 0; k < 12; k++) zl_tensor_release(all[k]);
}
