/* engine/core as the ground floor: this program links zlua_core and
 * nothing else, and exercises tensors, views, copies, fills, rng and memory
 * accounting through core's own functions. Its own CHECK: the harness links
 * the whole engine. */
#include <stdio.h>
#include <string.h>
#include "zlua/zlua.h"
#include "tensor_impl.h"
#include "view.h"

static int failures;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            failures++;                                                                 \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, \
                    #cond, zl_last_error());                                            \
        }                                                                               \
    } while (0)

static void test_create_and_account(void)
{
    zl_mem_reset_peak();
    int64_t before = zl_mem_stats_of(ZL_MEM_PARAMS).current;
    int64_t shape[2] = {3, 4};
    zl_tensor *t = zl_tensor_new(ZL_DTYPE_F32, 2, shape, ZL_MEM_PARAMS);
    CHECK(t != NULL);
    CHECK(zl_mem_stats_of(ZL_MEM_PARAMS).current - before >= 12 * 4);
    CHECK(zl_tensor_numel(t) == 12 && zl_tensor_is_contiguous(t));
    zl_tensor_set_category(t, ZL_MEM_GRADS);
    CHECK(zl_mem_stats_of(ZL_MEM_PARAMS).current == before);
    zl_tensor_release(t);
    CHECK(zl_mem_stats_of(ZL_MEM_PARAMS).peak - before >= 12 * 4);

    zl_tensor *a = zl_tensor_arange(ZL_DTYPE_BF16, 5);
    CHECK(a && zl_tensor_get(a, 4) == 4.0);
    zl_tensor_release(a);

    zl_mem_fail_after(1);
    CHECK(zl_tensor_zeros(ZL_DTYPE_F32, 2, shape) == NULL);
    zl_mem_fail_after(0);
}

static void test_views(void)
{
    zl_tensor *t = zl_tensor_arange(ZL_DTYPE_F32, 24);
    int64_t s234[3] = {2, 3, 4};
    zl_tensor *r = zli_reshape("reshape", t, 3, s234, false);
    CHECK(r && zl_tensor_shares_storage(r, t) && zl_tensor_size(r, 2) == 4);

    int perm[3] = {2, 0, -2}, norm[3];
    zl_tensor *p = zli_permute(r, perm, norm);
    CHECK(p && norm[2] == 1 && zl_tensor_size(p, 0) == 4 && !zl_tensor_is_contiguous(p));
    double v;
    CHECK(zl_tensor_get_at(p, (int64_t[]){3, 1, 2}, &v) == ZL_OK && v == 1 * 12 + 2 * 4 + 3);

    int64_t flat[1] = {-1};
    CHECK(zli_reshape("view", p, 1, flat, false) == NULL && strstr(zl_last_error(), "use reshape"));
    zl_tensor *c = zli_reshape("reshape", p, 1, flat, true);
    CHECK(c && !zl_tensor_shares_storage(c, t) && zl_tensor_get(c, 1) == 4.0);

    int dim = 1;
    int64_t start = -2;
    zl_tensor *n = zli_narrow("narrow", r, &dim, &start, 2, false);
    CHECK(n && start == 1 && zl_tensor_size(n, 1) == 2 && zl_tensor_get(n, 0) == 4.0);
    dim = 0;
    start = 1;
    zl_tensor *s = zli_narrow("select", r, &dim, &start, 1, true);
    CHECK(s && zl_tensor_ndim(s) == 2 && zl_tensor_get(s, 0) == 12.0);

    int64_t big[3] = {5, 2, 4};
    zl_tensor *row = zli_narrow("narrow", s, &(int){0}, &(int64_t){0}, 1, false);
    zl_tensor *e = zli_expand(row, 3, big);
    CHECK(e && zl_tensor_numel(e) == 40 && zl_tensor_strides(e)[0] == 0);
    CHECK(zli_expand(t, 1, (int64_t[]){7}) == NULL && strstr(zl_last_error(), "cannot expand"));

    zl_tensor *views[] = {r, p, c, n, s, row, e, t};
    for (size_t i = 0; i < sizeof views / sizeof *views; i++) zl_tensor_release(views[i]);
}

static void test_fill_copy_add(void)
{
    int64_t shape[2] = {2, 3};
    zl_tensor *d = zl_tensor_full(ZL_DTYPE_F16, 2, shape, 1.5);
    CHECK(d && zl_tensor_get(d, 5) == 1.5);
    zli_fill(d, -2.0);
    CHECK(zl_tensor_get(d, 0) == -2.0);

    zl_tensor *src = zl_tensor_from_data(ZL_DTYPE_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3});
    CHECK(zli_copy(d, src) == ZL_OK && zl_tensor_get(d, 4) == 2.0);
    CHECK(zli_add(d, src, 0.5) == ZL_OK && zl_tensor_get(d, 5) == 4.5);
    zl_tensor *bad = zl_tensor_zeros(ZL_DTYPE_F32, 1, (int64_t[]){4});
    CHECK(zli_copy(d, bad) == ZL_ESHAPE && strstr(zl_last_error(), "cannot be broadcast"));

    zl_tensor *k = zli_copy_as(d, ZL_DTYPE_F32, ZL_MEM_OTHER);
    CHECK(k && zl_tensor_get(k, 3) == 1.5);
    zli_share_storage(bad, k);
    CHECK(zl_tensor_shares_storage(bad, k) && zl_tensor_ndim(bad) == 2);

    zl_tensor *u = zl_tensor_rand(ZL_DTYPE_F32, 2, shape, NULL);
    CHECK(u && zl_tensor_get(u, 0) >= 0.0 && zl_tensor_get(u, 0) < 1.0);

    zl_tensor *all[] = {d, src, bad, k, u};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) zl_tensor_release(all[i]);
}

int main(void)
{
    test_create_and_account();
    test_views();
    test_fill_copy_add();
    for (int c = 0; c < ZL_MEM_COUNT; c++)
        CHECK(zl_mem_stats_of((zl_mem_category)c).current == 0);
    printf("core floor: %d failures\n", failures);
    return failures != 0;
}
