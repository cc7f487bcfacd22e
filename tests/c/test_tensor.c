/* Tensors: creation, views, contiguity, dtype conversion, memory accounting,
 * the RNG's independence from thread count, and bad-input messages. */
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

/* Getters that cannot say "bad index" in their value set the error. */
TEST(counters_refuse_a_bad_index_by_name)
{
    zl_mem_stats st = zl_mem_stats_of(ZL_MEM_COUNT);
    CHECK(st.current == 0 && strstr(zl_last_error(), "zl_mem_stats_of: unknown memory category"));
    zl_clear_error();
    st = zl_device_mem_stats(ZL_DEVICE_CPU, 1, ZL_MEM_COUNT);
    CHECK(st.current == 0 && strstr(zl_last_error(), "zl_device_mem_stats: cpu:1: no such device (index 0..0)"));
    CHECK_ERR(zl_device_mem_stats(ZL_DEVICE_CUDA, -1, ZL_MEM_PARAMS), "zl_device_mem_stats: cuda:-1: ");
    CHECK_ERR(zl_device_mem_stats(ZL_DEVICE_CPU, 0, (zl_mem_category)99), "unknown memory category 99");
    zl_clear_error();
    /* Out of range, or no CUDA backend here: either way zero, and the reason. */
    CHECK(zl_device_mem_reserved(ZL_DEVICE_CUDA, 64) == 0 &&
          strstr(zl_last_error(), "zl_device_mem_reserved: cuda:64: "));
    zl_clear_error();
    CHECK(zl_generator_randint(NULL, 0) == -1 &&
          strstr(zl_last_error(), "zl_generator_randint: n must be > 0, got 0"));
    zl_clear_error();
    CHECK(zl_device_mem_stats(ZL_DEVICE_CPU, 0, ZL_MEM_COUNT).current >= 0 && zl_last_error()[0] == '\0');
}

TEST(create_and_inspect)
{
    zl_tensor *t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(2, 3));
    CHECK(t);
    CHECK(zl_tensor_ndim(t) == 2 && zl_tensor_numel(t) == 6);
    CHECK(zl_tensor_size(t, -1) == 3 && zl_tensor_size(t, 5) == -1);
    CHECK(strstr(zl_last_error(), "size: dimension 5 is out of range for a 2-d tensor"));
    CHECK(zl_tensor_is_contiguous(t));
    CHECK(((uintptr_t)zl_tensor_data(t) % ZL_ALIGNMENT) == 0);
    CHECK(zl_tensor_set(t, 4, 2.5) == ZL_OK);
    CHECK(zl_tensor_get(t, 4) == 2.5);
    CHECK_ERR(zl_tensor_set(t, 6, 1.0), "out of range");
    zl_clear_error();
    CHECK(isnan(zl_tensor_get(t, 6)) && strstr(zl_last_error(), "get: index 6 is out of range for 6 elements"));
    zl_clear_error();
    CHECK(isnan(zl_tensor_get(t, -1)) && strstr(zl_last_error(), "get: index -1 is out of range"));
    zl_tensor_release(t);
    zl_tensor_release(NULL);
}

TEST(views_share_storage)
{
    zl_tensor *a = zl_tensor_arange(ZL_DTYPE_F32, 24);
    zl_tensor *b = zl_tensor_reshape(a, SHAPE(2, 3, 4));
    CHECK(zl_tensor_shares_storage(a, b));
    zl_tensor *t = zl_tensor_transpose(b, 0, 2);   /* [4, 3, 2] */
    CHECK(zl_tensor_size(t, 0) == 4 && !zl_tensor_is_contiguous(t));
    int64_t idx[3] = {3, 2, 1};
    double v;
    CHECK(zl_tensor_get_at(t, idx, &v) == ZL_OK && v == 1 * 12 + 2 * 4 + 3);
    zl_tensor *c = zl_tensor_contiguous(t);
    CHECK(zl_tensor_is_contiguous(c) && !zl_tensor_shares_storage(c, t));
    CHECK(zl_tensor_get(c, 23) == 23 && zl_tensor_get(c, 1) == 12);
    zl_tensor *n = zl_tensor_narrow(b, 2, 1, 2);    /* [2, 3, 2] starting at column 1 */
    CHECK(zl_tensor_get(n, 0) == 1 && zl_tensor_get(n, 1) == 2 && zl_tensor_get(n, 2) == 5);
    zl_tensor *s = zl_tensor_select(b, 1, -1);     /* [2, 4]: row 2 of each */
    CHECK(zl_tensor_ndim(s) == 2 && zl_tensor_get(s, 0) == 8 && zl_tensor_get(s, 4) == 20);
    zl_tensor *r = zl_tensor_reshape(t, SHAPE(-1));  /* non-contiguous: copies */
    CHECK(r && zl_tensor_numel(r) == 24 && zl_tensor_get(r, 1) == 12);
    CHECK_ERR(zl_tensor_view(t, SHAPE(24)), "cannot be viewed");
    CHECK_ERR(zl_tensor_reshape(a, SHAPE(5, 5)), "cannot reshape a tensor of shape [24]");
    CHECK_ERR(zl_tensor_transpose(b, 0, 3), "dimension 3 is out of range for a 3-d tensor");
    CHECK_ERR(zl_tensor_narrow(b, 2, 3, 2), "out of bounds");
    zl_tensor *p = zl_tensor_permute(b, (int[]){2, 0, 1});
    CHECK(zl_tensor_size(p, 0) == 4 && zl_tensor_size(p, 1) == 2);
    zl_tensor *u = zl_tensor_unsqueeze(a, 0), *q = zl_tensor_squeeze(u, 0);
    CHECK(zl_tensor_ndim(u) == 2 && zl_tensor_ndim(q) == 1);
    zl_tensor *tensors[] = {a, b, t, c, n, s, r, p, u, q};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) zl_tensor_release(tensors[i]);
}

TEST(expand_broadcasts)
{
    zl_tensor *a = zl_tensor_arange(ZL_DTYPE_F32, 3);
    zl_tensor *e = zl_tensor_expand(a, SHAPE(2, 3));
    CHECK(e && zl_tensor_get(e, 4) == 1 && zl_tensor_strides(e)[0] == 0);
    CHECK_ERR(zl_tensor_expand(a, SHAPE(2, 4)), "cannot expand shape [3] to [2, 4]");
    int nd;
    int64_t out[ZL_MAX_DIMS];
    CHECK(zl_broadcast_shapes(2, (int64_t[]){4, 1}, 1, (int64_t[]){3}, &nd, out) == ZL_OK);
    CHECK(nd == 2 && out[0] == 4 && out[1] == 3);
    CHECK_ERR(zl_broadcast_shapes(1, (int64_t[]){2}, 1, (int64_t[]){3}, &nd, out), "cannot be broadcast");
    zl_tensor_release(e);
    zl_tensor_release(a);
}

TEST(bf16_f16_round_to_nearest_even)
{
    /* 1 + 2^-8 is exactly between two bf16 values: ties go to the even one (1.0). */
    CHECK(zl_bf16_to_f32(zl_f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f);
    /* 1 + 3*2^-8 is between 1+2^-7 and 1+2^-6: ties to even -> 1 + 2^-6. */
    CHECK(zl_bf16_to_f32(zl_f32_to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    CHECK(zl_bf16_to_f32(zl_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
    CHECK(isnan(zl_bf16_to_f32(zl_f32_to_bf16(NAN))));
    CHECK(zl_f16_to_f32(zl_f32_to_f16(1.0f + 0x1p-11f)) == 1.0f);
    CHECK(zl_f16_to_f32(zl_f32_to_f16(1.0f + 3 * 0x1p-11f)) == 1.0f + 0x1p-9f);
    CHECK(isinf(zl_f16_to_f32(zl_f32_to_f16(70000.0f))));
    CHECK(zl_f16_to_f32(zl_f32_to_f16(65504.0f)) == 65504.0f);
    CHECK(zl_f16_to_f32(zl_f32_to_f16(0x1p-24f)) == 0x1p-24f);   /* smallest subnormal */
    CHECK(zl_f16_to_f32(zl_f32_to_f16(-2.0f)) == -2.0f);
    /* Every f16 value round-trips through f32. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = zl_f16_to_f32((uint16_t)h);
        if (!isnan(f) && zl_f32_to_f16(f) != h) bad++;
    }
    CHECK(bad == 0);
    zl_tensor *a = zl_tensor_arange(ZL_DTYPE_F32, 5);
    zl_tensor *b = zl_tensor_to(a, ZL_DTYPE_BF16);
    CHECK(zl_tensor_dtype(b) == ZL_DTYPE_BF16 && zl_tensor_get(b, 4) == 4.0);
    zl_dtype dt;
    CHECK(zl_dtype_from_name("bfloat16", &dt) == ZL_OK && dt == ZL_DTYPE_BF16);
    CHECK_ERR(zl_dtype_from_name("f8", &dt), "unknown dtype 'f8'");
    zl_tensor_release(a);
    zl_tensor_release(b);
}

TEST(memory_accounting)
{
    zl_mem_stats before = zl_mem_stats_of(ZL_MEM_OTHER);
    zl_tensor *t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1000));
    CHECK(zl_mem_stats_of(ZL_MEM_OTHER).current == before.current + 4000);
    zl_tensor_set_category(t, ZL_MEM_PARAMS);
    CHECK(zl_mem_stats_of(ZL_MEM_OTHER).current == before.current);
    int64_t p = zl_mem_stats_of(ZL_MEM_PARAMS).current;
    zl_tensor_release(t);
    CHECK(zl_mem_stats_of(ZL_MEM_PARAMS).current == p - 4000);
    CHECK(zl_mem_stats_of(ZL_MEM_PARAMS).peak >= 4000);
    zl_mem_fail_after(1);
    CHECK_ERR(zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(10)), "out of memory");
    t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(10));
    CHECK(t);
    zl_tensor_release(t);
}

TEST(memory_release_threshold)
{
    /* Blocks mapped with the threshold on and blocks from malloc with it off
     * are each freed their own way, whatever the threshold is at free time. */
    zl_mem_set_release_threshold((size_t)1 << 20);
    zl_tensor *mapped = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1 << 19), 2.0);
    zl_tensor *small = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1000), 3.0);
    zl_mem_set_release_threshold(0);
    zl_tensor *kept = zl_tensor_full(ZL_DTYPE_F32, SHAPE(1 << 19), 4.0);
    CHECK(zl_tensor_get(mapped, (1 << 19) - 1) == 2.0 && zl_tensor_get(kept, 7) == 4.0);
    zl_tensor_release(mapped);
    zl_mem_set_release_threshold((size_t)1 << 20);
    zl_tensor_release(kept);
    zl_tensor_release(small);
    zl_tensor *again = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1 << 20));
    CHECK(zl_tensor_get(again, 12345) == 0.0);
    zl_tensor_release(again);
    zl_mem_set_release_threshold(0);
}

/* Under RLIMIT_AS (set in a child) the limit is the rlimit's, named so. */
TEST(memory_limit_from_rlimit)
{
    const char *source = NULL;
    int64_t ram = zl_mem_ram(), lim = zl_mem_limit(&source);
    CHECK(ram > 0 && lim > 0 && lim <= ram && source && source[0]);
    int64_t cap = (int64_t)1 << 34;   /* 16 GiB: room for the allocator's reservations */
#if defined(__SANITIZE_ADDRESS__)
    zt_skip("memory_limit_from_rlimit: AddressSanitizer's shadow memory does not fit under an RLIMIT_AS");
    return;
#endif
    if (ram <= cap) {
        zt_skip("memory_limit_from_rlimit: the machine has %lld bytes, not more than the 16 GiB rlimit it sets",
                (long long)ram);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit r = {(rlim_t)cap, (rlim_t)cap};
        int ok = setrlimit(RLIMIT_AS, &r) == 0 && zl_mem_limit(&source) == cap && strcmp(source, "RLIMIT_AS") == 0;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(memory_cache)
{
    const size_t mib = (size_t)1 << 20;
    zl_mem_empty_cache();
    zl_mem_cache_stats s0 = zl_mem_cache_info();
    CHECK(s0.cached == 0 && s0.limit > 0);
    int64_t acts = zl_mem_stats_of(ZL_MEM_ACTIVATIONS).current;
    zl_tensor *a = zl_tensor_full(ZL_DTYPE_F32, SHAPE(mib / 4 + 100), 5.0);
    void *block = zl_tensor_data(a);
    zl_tensor_release(a);
    /* Held for reuse, but charged to no category. */
    zl_mem_cache_stats s1 = zl_mem_cache_info();
    CHECK(s1.cached >= (int64_t)mib && s1.cached <= (int64_t)(mib + mib / 8));
    CHECK(zl_mem_stats_of(ZL_MEM_ACTIVATIONS).current == acts);
    /* A size of the same class (an eighth of a MiB wide) takes the same block,
     * and zeros() still zeroes it. */
    zl_tensor *b = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(mib / 4 + 1000));
    zl_mem_cache_stats s2 = zl_mem_cache_info();
    CHECK(zl_tensor_data(b) == block && s2.hits == s1.hits + 1 && s2.cached == 0);
    CHECK(zl_tensor_get(b, 0) == 0.0 && zl_tensor_get(b, mib / 4 + 999) == 0.0);
    zl_tensor_release(b);
    /* An allocation the system refuses empties the cache (an injected
     * failure is not retried: the error path is what it tests). */
    CHECK(zl_mem_cache_info().cached > 0);
    zl_mem_fail_after(1);
    CHECK(zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(mib)) == NULL);
    CHECK(strstr(zl_last_error(), "out of memory") != NULL);
    CHECK(zl_mem_cache_info().cached == 0);
    /* A lower limit empties the cache and keeps nothing above it. */
    zl_mem_set_cache_limit(mib / 2);
    CHECK(zl_mem_cache_info().cached == 0 && zl_mem_cache_info().limit == (int64_t)(mib / 2));
    zl_tensor_release(zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(mib / 4)));
    CHECK(zl_mem_cache_info().cached == 0);
    zl_tensor_release(zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(mib / 16)));
    CHECK(zl_mem_cache_info().cached >= (int64_t)(mib / 4));
    /* Off: nothing is kept, nothing counted; blocks made while it was on go
     * back to the system. */
    zl_tensor *kept = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(mib / 4));
    zl_mem_set_cache_limit(0);
    zl_mem_cache_stats off = zl_mem_cache_info();
    CHECK(off.limit == 0 && off.cached == 0);
    zl_tensor_release(kept);
    zl_tensor_release(zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(mib / 4)));
    CHECK(zl_mem_cache_info().cached == 0 && zl_mem_cache_info().misses == off.misses);
    /* Back to the default; a context's cache goes with it. */
    zl_mem_set_cache_limit(SIZE_MAX);
    CHECK(zl_mem_cache_info().limit == s0.limit);
    zl_context *ctx = zl_context_new();
    zl_context *prev = zl_context_set_current(ctx);
    zl_tensor_release(zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(mib)));
    CHECK(zl_mem_cache_info().cached >= (int64_t)(4 * mib));
    zl_context_set_current(prev);
    zl_context_free(ctx);
    CHECK(zl_mem_cache_info().cached == 0);
}

TEST(rng_independent_of_threads)
{
    zl_set_num_threads(1);
    zl_manual_seed(42);
    zl_tensor *a = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(100000), NULL);
    zl_set_num_threads(2);
    zl_manual_seed(42);
    zl_tensor *b = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(100000), NULL);
    CHECK(memcmp(zl_tensor_data(a), zl_tensor_data(b), 400000) == 0);
    /* Moments of the normal draw and of a uniform one. */
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < 100000; i++) { double v = zl_tensor_get(a, i); s += v; s2 += v * v; }
    CHECK(fabs(s / 1e5) < 0.02 && fabs(s2 / 1e5 - 1) < 0.02);
    zl_tensor *u = zl_tensor_rand(ZL_DTYPE_F32, SHAPE(100000), NULL);
    double mn = 1, mx = 0;
    for (int64_t i = 0; i < 100000; i++) { double v = zl_tensor_get(u, i); mn = fmin(mn, v); mx = fmax(mx, v); }
    CHECK(mn >= 0 && mx < 1 && mn < 0.001 && mx > 0.999);
    /* Successive draws differ; reseeding repeats them. */
    zl_manual_seed(7);
    zl_tensor *c1 = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(4), NULL), *c2 = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(4), NULL);
    CHECK(zl_tensor_get(c1, 0) != zl_tensor_get(c2, 0));
    zl_manual_seed(7);
    zl_tensor *c3 = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(4), NULL);
    CHECK(zl_tensor_get(c1, 3) == zl_tensor_get(c3, 3));
    zl_tensor *perm = zl_randperm(10, NULL);
    int seen[10] = {0};
    for (int i = 0; i < 10; i++) seen[(int)zl_tensor_get(perm, i)]++;
    for (int i = 0; i < 10; i++) CHECK(seen[i] == 1);
    zl_tensor *all[] = {a, b, u, c1, c2, c3, perm};
    for (int i = 0; i < 7; i++) zl_tensor_release(all[i]);
}

TEST(copy_and_fill)
{
    zl_tensor *a = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(2, 3));
    zl_tensor *row = zl_tensor_arange(ZL_DTYPE_I64, 3);
    CHECK(zl_tensor_copy_(a, row) == ZL_OK);
    CHECK(zl_tensor_get(a, 5) == 2);
    CHECK_ERR(zl_tensor_copy_(row, a), "cannot be broadcast");
    zl_tensor *t = zl_tensor_transpose(a, 0, 1);
    CHECK(zl_tensor_fill(t, 3) == ZL_OK && zl_tensor_get(a, 0) == 3);
    zl_tensor_set_requires_grad(a, true);
    CHECK_ERR(zl_tensor_fill(a, 1), "leaf tensor that requires grad");
    zl_tensor_release(t);
    zl_tensor_release(a);
    zl_tensor_release(row);
}

TEST(reshape_of_strided_views_matches_copy)
{
    /* Reshape of permuted/narrowed views must read the same values as reshaping
     * a contiguous copy, whether it could make a view or had to copy. */
    zl_tensor *base = zl_tensor_arange(ZL_DTYPE_F32, 2 * 3 * 4 * 2);
    zl_tensor *b4 = zl_tensor_reshape(base, SHAPE(2, 3, 4, 2));
    int perms[][4] = {{0, 1, 2, 3}, {1, 0, 2, 3}, {0, 2, 1, 3}, {3, 2, 1, 0}, {0, 1, 3, 2}};
    int64_t targets[][4] = {{-1, 0, 0, 0}, {6, 8, 0, 0}, {2, 12, 2, 0}, {3, 2, 8, 0}, {2, 3, 2, 4}};
    int tnd[] = {1, 2, 3, 3, 4};
    for (int p = 0; p < 5; p++) {
        zl_tensor *v = zl_tensor_permute(b4, perms[p]);
        for (int t = 0; t < 5; t++) {
            int64_t want = 1;
            for (int d = 0; d < tnd[t]; d++) want *= targets[t][d] == -1 ? 1 : targets[t][d];
            if (targets[t][0] != -1 && want != 48) continue;
            zl_tensor *r = zl_tensor_reshape(v, tnd[t], targets[t]);
            zl_tensor *c = zl_tensor_contiguous(v);
            CHECK(r != NULL);
            for (int64_t i = 0; r && i < 48; i++)
                if (zl_tensor_get(r, i) != zl_tensor_get(c, i)) { CHECK(!"reshape read a wrong value"); break; }
            zl_tensor_release(r);
            zl_tensor_release(c);
        }
        zl_tensor *n = zl_tensor_narrow(v, 1, 0, 1);
        int64_t shp[1] = {-1};
        zl_tensor *r = zl_tensor_reshape(n, 1, shp), *c = zl_tensor_contiguous(n);
        for (int64_t i = 0; i < zl_tensor_numel(c); i++) CHECK(zl_tensor_get(r, i) == zl_tensor_get(c, i));
        zl_tensor_release(r);
        zl_tensor_release(c);
        zl_tensor_release(n);
        zl_tensor_release(v);
    }
    zl_tensor_release(b4);
    zl_tensor_release(base);
}

TEST(set_data_keeps_identity)
{
    zl_tensor *p = zl_tensor_arange(ZL_DTYPE_F32, 4);
    zl_tensor_set_requires_grad(p, true);
    zl_tensor *g = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(4));
    zl_tensor_set_grad(p, g);
    zl_tensor *h = zl_tensor_to(p, ZL_DTYPE_BF16);
    CHECK(zl_tensor_set_data(p, h) == ZL_OK);
    CHECK(zl_tensor_dtype(p) == ZL_DTYPE_BF16 && zl_tensor_get(p, 3) == 3 && zl_tensor_shares_storage(p, h));
    CHECK(zl_tensor_grad(p) == NULL);   /* an f32 gradient no longer matches */
    CHECK(zl_tensor_requires_grad(p));
    zl_tensor *y = zl_exp(p);
    CHECK_ERR(zl_tensor_set_data(y, h), "only a leaf's data can be replaced");
    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 4);
    CHECK_ERR(zl_tensor_set_data(p, i), "cannot take i64 data");
    zl_tensor *all[] = {p, g, h, y, i};
    for (int k = 0; k < 5; k++) zl_tensor_release(all[k]);
}

TEST(add_in_place)
{
    zl_tensor *acc = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(2, 3));
    zl_tensor *g = zl_tensor_arange(ZL_DTYPE_F32, 6), *gb = zl_tensor_to(g, ZL_DTYPE_BF16);
    zl_tensor *g6 = zl_tensor_reshape(gb, SHAPE(2, 3)), *row = zl_tensor_arange(ZL_DTYPE_F32, 3);
    CHECK(zl_tensor_add_(acc, g6, 1.0) == ZL_OK && zl_tensor_add_(acc, g6, 0.5) == ZL_OK);
    CHECK(zl_tensor_add_(acc, row, -1.0) == ZL_OK);   /* broadcast over rows */
    for (int i = 0; i < 6; i++) CHECK(zl_tensor_get(acc, i) == 1.5 * i - i % 3);
    zl_tensor *t = zl_tensor_transpose(acc, 0, 1);
    CHECK(zl_tensor_add_(acc, t, 1.0) != ZL_OK);       /* [3, 2] does not broadcast to [2, 3] */
    zl_tensor *four = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(4));
    CHECK_ERR(zl_tensor_add_(acc, four, 1.0), "cannot be broadcast");
    zl_tensor_release(four);
    zl_tensor *self = zl_tensor_narrow(acc, 0, 0, 1);
    CHECK(zl_tensor_add_(acc, self, 1.0) == ZL_OK);    /* aliasing source read before the update */
    CHECK(zl_tensor_get(acc, 3) == 1.5 * 3 - 0 + (1.5 * 0 - 0));
    zl_tensor *all[] = {acc, g, gb, g6, row, t, self};
    for (int k = 0; k < 7; k++) zl_tensor_release(all[k]);
}

TEST(huge_shapes_and_ranges_are_refused)
{
    zl_tensor *t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(4));
    CHECK_ERR(zl_tensor_narrow(t, 0, 1, INT64_MAX), "out of bounds for dimension 0 of size 4");
    CHECK_ERR(zl_tensor_new(ZL_DTYPE_F32, 2, (int64_t[]){(INT64_C(1) << 62) + 1, 4}, ZL_MEM_OTHER),
              "more elements than a 64-bit count holds");
    CHECK_ERR(zl_tensor_reshape(t, 2, (int64_t[]){(INT64_C(1) << 62) + 1, 4}), "cannot reshape");
    int nd;
    int64_t out[ZL_MAX_DIMS], nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_ERR(zl_broadcast_shapes(9, nine, 1, nine, &nd, out), "at most 8 are supported");
    zl_tensor_set_requires_grad(t, true);
    CHECK(zl_tensor_fill(t, 1.0) == ZL_ESTATE);   /* the code matches the message */
    zl_tensor *u = zl_tensor_unsqueeze(t, 5);
    CHECK(u == NULL && strstr(zl_last_error(), "new dimension of a 1-d tensor (expected -2..1)"));
    zl_tensor_release(t);
}
