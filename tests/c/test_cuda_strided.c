/* The device's copy, fill, add and sum-to-shape math (engine/math/
 * strided.h, sum_to.h) built for the host: offsets of permuted, narrowed and
 * broadcast views, and every dtype conversion, against core's own copy and
 * element access, bit for bit. */
#include "harness.h"
#include "math/strided.h"
#include "math/sum_to.h"

static zlm_view view_of(const zl_tensor *t)
{
    zlm_view v = {.ndim = zl_tensor_ndim(t), .offset = zl_tensor_offset(t)};
    for (int i = 0; i < v.ndim; i++) {
        v.shape[i] = zl_tensor_shape(t)[i];
        v.stride[i] = zl_tensor_strides(t)[i];
    }
    return v;
}

/* The storage's first element, whatever the view's offset. */
static const void *base_of(const zl_tensor *t)
{
    return (const char *)zl_tensor_data(t) - zl_tensor_offset(t) * (int64_t)zl_dtype_size(zl_tensor_dtype(t));
}

/* Copy the view t to dtype dt with the kernel's element function, and with
 * core (zl_tensor_to on a contiguous clone): the same bytes. The kernel's
 * launcher coalesces the view first: the same offsets from fewer dims. */
static void check_copy(zl_tensor *t, zl_dtype dt, const char *what)
{
    int64_t n = zl_tensor_numel(t);
    zl_tensor *out = zl_tensor_new(dt, zl_tensor_ndim(t), zl_tensor_shape(t), ZL_MEM_OTHER);
    zlm_view v = view_of(t), c1 = v;
    zlm_view_coalesce(&c1);
    CHECK(c1.ndim <= v.ndim);
    if (zl_tensor_is_contiguous(t)) CHECK(c1.ndim <= 1 && (c1.ndim == 0 || c1.stride[0] == 1));
    for (int64_t i = 0; i < n; i++)
        if (zlm_view_offset(&c1, i) != zlm_view_offset(&v, i)) {
            zt_fail(__FILE__, __LINE__, "%s: coalesced into %d dims, element %lld moves", what, c1.ndim, (long long)i);
            break;
        }
    for (int64_t i = 0; i < n; i++)
        zlm_copy_elem(&v, base_of(t), (int)zl_tensor_dtype(t), zl_tensor_data(out), (int)dt, i);
    zl_tensor *c = zl_tensor_contiguous(t);
    zl_tensor *ref = zl_tensor_to(c, dt);
    if (memcmp(zl_tensor_data(out), zl_tensor_data(ref), (size_t)n * zl_dtype_size(dt)))
        zt_fail(__FILE__, __LINE__, "%s: %s -> %s differs from core", what, zl_dtype_name(zl_tensor_dtype(t)),
                zl_dtype_name(dt));
    zl_tensor_release(ref);
    zl_tensor_release(c);
    zl_tensor_release(out);
}

TEST(copy_views_every_dtype_pair)
{
    const double edge[] = {0.0, -0.0, 1.5, -2.5, 255.7, 300.0, -1.0, 65504.0, 1e30, -1e30, 3.0e9, -3.0e9,
                           9.1e18, 1e-40, NAN, INFINITY, -INFINITY};
    int64_t n = 4 * 6 * 5;
    zl_tensor *f = zt_randn(SHAPE(4, 6, 5));
    for (int64_t i = 0; i < n; i++)
        zl_tensor_set(f, i, i < (int64_t)(sizeof edge / sizeof *edge) ? edge[i] : zl_tensor_get(f, i) * 100.0);
    for (int s = 0; s < ZL_DTYPE_COUNT; s++) {
        zl_tensor *src = zl_tensor_to(f, (zl_dtype)s);
        zl_tensor *perm = zl_tensor_permute(src, (int[]){2, 0, 1});
        zl_tensor *nar = zl_tensor_narrow(src, 1, 2, 3);
        zl_tensor *row = zl_tensor_narrow(src, 0, 1, 1);
        zl_tensor *exp = zl_tensor_expand(row, 3, (int64_t[]){3, 6, 5});
        for (int d = 0; d < ZL_DTYPE_COUNT; d++) {
            check_copy(src, (zl_dtype)d, "contiguous");
            check_copy(perm, (zl_dtype)d, "permuted");
            check_copy(nar, (zl_dtype)d, "narrowed");
            check_copy(exp, (zl_dtype)d, "broadcast");
        }
        zl_tensor *objs[] = {exp, row, nar, perm, src};
        for (int i = 0; i < 5; i++) zl_tensor_release(objs[i]);
    }
    zl_tensor_release(f);
}

/* zlm_view_runs_of: the views it takes (heads narrowed from a fused qkv and
 * transposed, a permutation keeping the last dim) hold every element of a
 * run of 8 at the run's first offset plus its place, from a multiple of 8;
 * the views it refuses (a last dim not contiguous or not a multiple of 8,
 * an offset or another stride off the multiple) would not. */
TEST(runs_of_eight_lie_side_by_side)
{
    zl_tensor *qkv = zt_randn(SHAPE(2, 5, 3 * 32));
    zl_tensor *q = zl_tensor_narrow(qkv, 2, 32, 32), *q4 = zl_tensor_view(q, 4, (int64_t[]){2, 5, 2, 16});
    zl_tensor *heads = q4 ? zl_tensor_transpose(q4, 1, 2) : NULL;
    zl_tensor *odd = zl_tensor_narrow(qkv, 2, 4, 32), *tr = zl_tensor_transpose(qkv, 1, 2);
    zl_tensor *short_row = zl_tensor_narrow(qkv, 2, 0, 12), *second = zl_tensor_narrow(qkv, 0, 1, 1);
    CHECK(heads != NULL);
    zlm_view good[2] = {heads ? view_of(heads) : view_of(qkv), view_of(second)};
    for (int g = 0; g < 2; g++) {
        zlm_view v = good[g];
        zlm_view_coalesce(&v);
        CHECK(zlm_view_runs_of(&v, 8));
        int64_t n = 1;
        for (int k = 0; k < v.ndim; k++) n *= v.shape[k];
        for (int64_t i = 0; i < n; i += 8) {
            int64_t at = zlm_view_offset(&v, i);
            CHECK(at % 8 == 0);
            for (int64_t k = 1; k < 8; k++) CHECK(zlm_view_offset(&v, i + k) == at + k);
        }
    }
    const zl_tensor *bad[3] = {odd, tr, short_row};
    for (int b = 0; b < 3; b++) {
        zlm_view v = view_of(bad[b]);
        zlm_view_coalesce(&v);
        CHECK(!zlm_view_runs_of(&v, 8));
    }
    zl_tensor *objs[] = {second, short_row, tr, odd, heads, q4, q, qkv};
    for (int i = 0; i < 8; i++) zl_tensor_release(objs[i]);
}

/* A copy into a strided destination (a transposed view, a slice of a wider
 * tensor), converting dtypes on the way: the bytes core's copy_ writes. */
TEST(copy_into_views_matches_core)
{
    zl_tensor *r = zt_randn(SHAPE(5, 7));
    for (int s = 0; s < ZL_DTYPE_COUNT; s++)
        for (int d = 0; d < ZL_DTYPE_COUNT; d++) {
            zl_tensor *src = zl_tensor_to(r, (zl_dtype)s);
            zl_tensor *mine = zl_tensor_zeros((zl_dtype)d, 2, (int64_t[]){7, 9}), *ref = zl_tensor_clone(mine);
            zl_tensor *mt = zl_tensor_transpose(mine, 0, 1), *rt = zl_tensor_transpose(ref, 0, 1);
            zl_tensor *mv = zl_tensor_narrow(mt, 0, 3, 5), *rv = zl_tensor_narrow(rt, 0, 3, 5);   /* [5, 7] */
            zlm_view dview = view_of(mv), sview = view_of(src);
            for (int64_t i = 0; i < 35; i++)
                zlm_copy_view_elem(&dview, (void *)base_of(mv), d, &sview, base_of(src), s, i);
            CHECK(zl_tensor_copy_(rv, src) == ZL_OK);
            if (memcmp(zl_tensor_data(mine), zl_tensor_data(ref), 63 * zl_dtype_size((zl_dtype)d)))
                zt_fail(__FILE__, __LINE__, "%s -> %s into a strided view differs from core",
                        zl_dtype_name((zl_dtype)s), zl_dtype_name((zl_dtype)d));
            zl_tensor *objs[] = {rv, mv, rt, mt, ref, mine, src};
            for (int i = 0; i < 7; i++) zl_tensor_release(objs[i]);
        }
    zl_tensor_release(r);
}

TEST(add_into_views_matches_core)
{
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (int k = 0; k < 3; k++) {
        zl_tensor *r = zt_randn(SHAPE(5, 7));
        zl_tensor *d0 = zl_tensor_to(r, dts[k]);
        zl_tensor_release(r);
        zl_tensor *mine = zl_tensor_clone(d0), *ref = zl_tensor_clone(d0);
        zl_tensor *src = zt_randn(SHAPE(7));   /* broadcast over rows */
        zl_tensor *dv = zl_tensor_transpose(mine, 0, 1), *rv = zl_tensor_transpose(ref, 0, 1);
        zl_tensor *col = zl_tensor_view(src, 2, (int64_t[]){7, 1});
        zl_tensor *se = zl_tensor_expand(col, 2, (int64_t[]){7, 5});
        zlm_view dview = view_of(dv), sview = view_of(se);
        for (int64_t i = 0; i < 35; i++)
            zlm_add_elem(&dview, (void *)base_of(dv), (int)dts[k], &sview, base_of(se), ZLM_F32, -0.75f, i);
        CHECK(zl_tensor_add_(rv, col, -0.75) == ZL_OK);
        CHECK(!memcmp(zl_tensor_data(mine), zl_tensor_data(ref), 35 * zl_dtype_size(dts[k])));
        zl_tensor *objs[] = {se, col, rv, dv, src, ref, mine, d0};
        for (int i = 0; i < 8; i++) zl_tensor_release(objs[i]);
    }
}

TEST(fill_every_dtype)
{
    const double vals[] = {0.0, 1.0, -3.7, 300.0, 1e10, NAN};
    for (int d = 0; d < ZL_DTYPE_COUNT; d++)
        for (int k = 0; k < 6; k++) {
            zl_tensor *ref = zl_tensor_full((zl_dtype)d, 1, (int64_t[]){3}, vals[k]);
            unsigned char mine[24];
            for (int i = 0; i < 3; i++) zlm_set64(mine, d, i, vals[k]);
            CHECK(!memcmp(mine, zl_tensor_data(ref), 3 * zl_dtype_size((zl_dtype)d)));
            zl_tensor_release(ref);
        }
}

/* Sums down to every shape a broadcast operand can have, against the CPU's
 * reduction through the ops (x * 1 broadcast, then backward): bit for bit. */
TEST(sum_to_shape_matches_the_cpu)
{
    const int64_t g_shape[3] = {3, 4, 5};
    const int64_t targets[][3] = {{1, 4, 5}, {3, 1, 5}, {3, 4, 1}, {1, 1, 5}, {1, 4, 1}, {3, 1, 1}, {1, 1, 1}};
    zl_tensor *g = zl_tensor_new(ZL_DTYPE_F32, 3, g_shape, ZL_MEM_OTHER);
    zl_tensor_normal_(g, 0, 1, NULL);
    for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
        zl_tensor *x = zl_tensor_zeros(ZL_DTYPE_F32, 3, targets[t]);
        zl_tensor *big = zl_tensor_zeros(ZL_DTYPE_F32, 3, g_shape);
        zl_tensor_set_requires_grad(x, true);
        zl_tensor *y = zl_add(big, x);
        CHECK(zl_backward(y, g, false) == ZL_OK);
        const zl_tensor *ref = zl_tensor_grad(x);
        int red[3];
        int64_t n = 1;
        for (int d = 0; d < 3; d++) {
            red[d] = targets[t][d] == 1 && g_shape[d] != 1;
            n *= targets[t][d];
        }
        for (int64_t j = 0; j < n; j++) {
            float mine = zlm_sum_to_elem(zl_tensor_data(g), 3, g_shape, red, j);
            float want = (float)zl_tensor_get(ref, j);
            if (memcmp(&mine, &want, sizeof mine))
                zt_fail(__FILE__, __LINE__, "target %zu, element %lld: %.9g, the CPU %.9g", t, (long long)j, mine,
                        want);
        }
        /* Leading dims away, the rest kept: the GPU's column sum in lanes of
         * double sums, within an f32 rounding of the CPU's in-order sum. */
        if (red[0] && !red[2] && (red[1] || targets[t][1] == 4)) {
            int64_t rows = red[1] ? 12 : 3;
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int l = 0; l < 32; l++) s += zlm_colsum_lane(zl_tensor_data(g), rows, n, j, l, 32);
                double want = zl_tensor_get(ref, j);
                if (fabs(s - want) > 4e-7 * (1 + fabs(want)))
                    zt_fail(__FILE__, __LINE__, "target %zu, column %lld in lanes: %.9g, the CPU %.9g", t, (long long)j,
                            s, want);
            }
        }
        zl_tensor_release(y);
        zl_tensor_release(big);
        zl_tensor_release(x);
    }
    zl_tensor_release(g);
}
