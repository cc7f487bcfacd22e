/* The mixed-precision passes over gradient lists (engine/optim/grad.c): the
 * inf/NaN check, the global sum of squares against a double reference and
 * across thread counts, in-place scaling, the clip coefficient, bad inputs. */
#include <float.h>
#include <stdlib.h>
#include "harness.h"

static const zl_dtype dtypes[3] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};

static zl_tensor *randn_as(zl_dtype dt, int ndim, const int64_t *shape)
{
    zl_tensor *f = zt_randn(ndim, shape);
    zl_tensor *t = zl_tensor_to(f, dt);
    zl_tensor_release(f);
    return t;
}

/* A list that crosses chunk boundaries: empty, tiny, odd-sized and large. */
static int make_list(zl_dtype dt, zl_tensor **ts)
{
    int n = 0;
    ts[n++] = randn_as(dt, SHAPE(0));
    ts[n++] = randn_as(dt, SHAPE(1));
    ts[n++] = randn_as(dt, SHAPE(7, 13));
    ts[n++] = randn_as(dt, SHAPE(3, 50001));
    ts[n++] = randn_as(dt, SHAPE(32768));
    ts[n++] = randn_as(dt, SHAPE(5));
    return n;
}

static void release_all(zl_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) zl_tensor_release(ts[i]);
}

static bool nonfinite(zl_tensor **ts, int n)
{
    bool found = false;
    CHECK(zl_grad_nonfinite(ts, n, &found) == ZL_OK);
    return found;
}

TEST(nonfinite_finds_inf_and_nan)
{
    /* values that must count as finite: the largest of each dtype, subnormals, zeros */
    const double big[3] = {FLT_MAX, 3.3895313892515355e38, 65504.0};
    const double tiny[3] = {1e-45, 1e-40, 6e-8};
    for (int d = 0; d < 3; d++) {
        zl_tensor *ts[8];
        int n = make_list(dtypes[d], ts);
        CHECK(!nonfinite(ts, n));
        zl_tensor_set(ts[3], 17, big[d]);
        zl_tensor_set(ts[3], 18, -big[d]);
        zl_tensor_set(ts[4], 0, tiny[d]);
        zl_tensor_set(ts[4], 1, -0.0);
        CHECK(!nonfinite(ts, n));
        const double bad[3] = {INFINITY, -INFINITY, NAN};
        /* first element, a chunk's last and next, the list's last tensor */
        const int which[4] = {1, 3, 3, 5};
        const int64_t at[4] = {0, 32767, 32768, 4};
        for (int b = 0; b < 3; b++)
            for (int w = 0; w < 4; w++) {
                double old = zl_tensor_get(ts[which[w]], at[w]);
                zl_tensor_set(ts[which[w]], at[w], bad[b]);
                if (!nonfinite(ts, n))
                    zt_fail(__FILE__, __LINE__, "%s: %g at tensor %d element %lld not found",
                            zl_dtype_name(dtypes[d]), bad[b], which[w], (long long)at[w]);
                zl_tensor_set(ts[which[w]], at[w], old);
            }
        CHECK(!nonfinite(ts, n));
        /* a rounding overflow: a finite f32 too large for the half dtype becomes inf there */
        if (dtypes[d] != ZL_DTYPE_F32) {
            zl_tensor_set(ts[2], 5, 1e39);
            CHECK(nonfinite(ts, n));
        }
        release_all(ts, n);
    }
    bool found = true;
    CHECK(zl_grad_nonfinite(NULL, 0, &found) == ZL_OK && !found);
}

TEST(nonfinite_strided)
{
    zl_tensor *t = randn_as(ZL_DTYPE_BF16, SHAPE(300, 200));
    zl_tensor *v = zl_tensor_transpose(t, 0, 1);
    CHECK(!nonfinite(&v, 1));
    zl_tensor_set(t, 299 * 200 + 3, NAN);
    CHECK(nonfinite(&v, 1));
    zl_tensor *n = zl_tensor_narrow(t, 0, 0, 10);   /* the NaN lies outside this view */
    CHECK(!nonfinite(&n, 1));
    zl_tensor_release(n);
    zl_tensor_release(v);
    zl_tensor_release(t);
}

/* In long double: a double sum taken naively drifts by more than the 1e-12
 * asked of the pass once one large square leads the sum. */
static double ref_norm_sq(zl_tensor **ts, int n)
{
    long double s = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = zl_tensor_numel(ts[i]);
        double *v = malloc((size_t)(k ? k : 1) * sizeof *v);
        zl_tensor_to_f64(ts[i], v);
        for (int64_t j = 0; j < k; j++) s += (long double)v[j] * v[j];
        free(v);
    }
    return (double)s;
}

TEST(norm_sq_against_double)
{
    for (int d = 0; d < 3; d++) {
        zl_tensor *ts[8];
        int n = make_list(dtypes[d], ts);
        double got = -1, ref = ref_norm_sq(ts, n);
        CHECK(zl_grad_norm_sq(ts, n, &got) == ZL_OK);
        CHECK_CLOSE(got, ref, 1e-12);
        /* one tensor alone, a view of it, and the empty list */
        CHECK(zl_grad_norm_sq(&ts[2], 1, &got) == ZL_OK);
        CHECK_CLOSE(got, ref_norm_sq(&ts[2], 1), 1e-13);
        zl_tensor *v = zl_tensor_transpose(ts[3], 0, 1);
        CHECK(zl_grad_norm_sq(&v, 1, &got) == ZL_OK);
        CHECK_CLOSE(got, ref_norm_sq(&ts[3], 1), 1e-12);
        zl_tensor_release(v);
        CHECK(zl_grad_norm_sq(ts, 0, &got) == ZL_OK && got == 0);
        /* squares beyond f32's range stay exact in double */
        zl_tensor_set(ts[1], 0, dtypes[d] == ZL_DTYPE_F16 ? 60000.0 : 1e30);
        CHECK(zl_grad_norm_sq(ts, n, &got) == ZL_OK);
        CHECK_CLOSE(got, ref_norm_sq(ts, n), 1e-12);
        zl_tensor_set(ts[4], 9, INFINITY);
        CHECK(zl_grad_norm_sq(ts, n, &got) == ZL_OK && isinf(got));
        zl_tensor_set(ts[4], 9, NAN);
        CHECK(zl_grad_norm_sq(ts, n, &got) == ZL_OK && isnan(got));
        release_all(ts, n);
    }
}

TEST(norm_sq_same_for_any_thread_count)
{
    zl_tensor *ts[8];
    int n = make_list(ZL_DTYPE_F32, ts);
    int saved = zl_get_num_threads();
    double r[3];
    for (int k = 0; k < 3; k++) {
        zl_set_num_threads(k + 1);
        CHECK(zl_grad_norm_sq(ts, n, &r[k]) == ZL_OK);
    }
    zl_set_num_threads(saved);
    CHECK(memcmp(&r[0], &r[1], sizeof r[0]) == 0 && memcmp(&r[0], &r[2], sizeof r[0]) == 0);
    release_all(ts, n);
}

TEST(scale_in_place)
{
    const double s = 0.3;
    for (int d = 0; d < 3; d++) {
        zl_tensor *ts[8];
        int n = make_list(dtypes[d], ts);
        zl_tensor *base = randn_as(dtypes[d], SHAPE(40, 30));
        ts[n++] = zl_tensor_transpose(base, 0, 1);   /* strided: scaled where it lies */
        const zl_dtype_traits *tr = zl_dtype_traits_of(dtypes[d]);
        double *before[8];
        for (int i = 0; i < n; i++) {
            before[i] = malloc((size_t)(zl_tensor_numel(ts[i]) + 1) * sizeof(double));
            zl_tensor_to_f64(ts[i], before[i]);
        }
        CHECK(zl_grad_scale(ts, n, s) == ZL_OK);
        for (int i = 0; i < n; i++) {
            double *after = malloc((size_t)(zl_tensor_numel(ts[i]) + 1) * sizeof(double));
            zl_tensor_to_f64(ts[i], after);
            for (int64_t j = 0; j < zl_tensor_numel(ts[i]); j++) {
                unsigned char cell[4];   /* f32 product, rounded to the dtype as the pass must round it */
                tr->from_f32(cell, (float)before[i][j] * (float)s);
                double want = tr->to_f64(cell);
                if (after[j] != want) {
                    zt_fail(__FILE__, __LINE__, "%s tensor %d element %lld: %.9g, expected %.9g",
                            zl_dtype_name(dtypes[d]), i, (long long)j, after[j], want);
                    break;
                }
            }
            free(after);
            free(before[i]);
        }
        release_all(ts, n);
        zl_tensor_release(base);
    }
}

TEST(clip_coef)
{
    CHECK_CLOSE(zl_grad_clip_coef(10.0, 1.0), 1.0 / (10.0 + 1e-6), 1e-15);
    CHECK(zl_grad_clip_coef(0.5, 1.0) == 1.0);
    CHECK(zl_grad_clip_coef(1.0, 1.0) < 1.0);   /* the 1e-6 makes a norm equal to max_norm clip, barely */
    CHECK(zl_grad_clip_coef(0.0, 1.0) == 1.0);
    CHECK(zl_grad_clip_coef(10.0, 0.0) == 1.0);   /* gradient_clipping 0: off */
    CHECK(zl_grad_clip_coef(10.0, -1.0) == 1.0);
    CHECK(zl_grad_clip_coef(INFINITY, 1.0) == 1.0);
    CHECK(zl_grad_clip_coef(NAN, 1.0) == 1.0);
}

TEST(bad_inputs)
{
    zl_tensor *a = zt_randn(SHAPE(3));
    zl_tensor *i64 = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(2, 5));
    zl_tensor *ts[3] = {a, i64, NULL};
    double a0 = zl_tensor_get(a, 0);
    bool found;
    double sq;
    CHECK_ERR(zl_grad_nonfinite(ts, 2, &found), "grad_nonfinite: tensor 1 of the list (shape [2, 5]) is i64; "
              "gradients must be f32, bf16 or f16");
    CHECK_ERR(zl_grad_norm_sq(ts, 2, &sq), "grad_norm_sq: tensor 1 of the list (shape [2, 5]) is i64");
    CHECK_ERR(zl_grad_scale(ts, 2, 2.0), "grad_scale: tensor 1 of the list (shape [2, 5]) is i64");
    ts[1] = NULL;
    CHECK_ERR(zl_grad_norm_sq(ts, 2, &sq), "grad_norm_sq: tensor 1 of the list is NULL");
    CHECK_ERR(zl_grad_nonfinite(NULL, 2, &found), "grad_nonfinite: the tensor list is NULL");
    CHECK_ERR(zl_grad_nonfinite(ts, -1, &found), "grad_nonfinite: the tensor count must be >= 0, got -1");
    CHECK_ERR(zl_grad_nonfinite(ts, 1, NULL), "grad_nonfinite: the result pointer is NULL");
    CHECK_ERR(zl_grad_norm_sq(ts, 1, NULL), "grad_norm_sq: the result pointer is NULL");
    CHECK_ERR(zl_grad_scale(ts, 1, INFINITY), "grad_scale: the factor must be finite, got inf");
    CHECK(zl_tensor_get(a, 0) == a0);   /* nothing scaled by the failed calls */
    zl_tensor_release(a);
    zl_tensor_release(i64);
}
