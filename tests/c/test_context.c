/* Contexts (zlua/context.h): each has its own generator, thread count,
 * accounting, hooks and fault injection; a block goes back to the context that
 * allocated it; a context freed with blocks alive lingers until the last one. */
#include <stdlib.h>
#include "harness.h"

static int64_t total_bytes(void)
{
    int64_t n = 0;
    for (int c = 0; c < ZL_MEM_COUNT; c++) n += zl_mem_stats_of((zl_mem_category)c).current;
    return n;
}

TEST(default_context_is_current_until_set)
{
    zl_context *def = zl_context_default();
    CHECK(def != NULL && zl_context_current() == def);
    zl_context *ctx = zl_context_new();
    CHECK(ctx != NULL && ctx != def);
    CHECK(zl_context_set_current(ctx) == def);
    CHECK(zl_context_current() == ctx);
    CHECK(zl_context_set_current(NULL) == ctx);
    CHECK(zl_context_current() == def);
    /* Freeing the current context makes the default current again. */
    zl_context_set_current(ctx);
    zl_context_free(ctx);
    CHECK(zl_context_current() == def);
    zl_context_free(NULL);
    zl_context_free(def);
    CHECK(zl_context_current() == def);
}

TEST(user_pointer)
{
    zl_context *ctx = zl_context_new();
    int x;
    CHECK(zl_context_user(ctx) == NULL);
    zl_context_set_user(ctx, &x);
    CHECK(zl_context_user(ctx) == &x);
    CHECK(zl_context_user(NULL) == NULL);
    zl_context_free(ctx);
}

/* The same seed gives the same draws in every context, and drawing in one
 * leaves another's generator where it was. */
TEST(generators_are_per_context)
{
    zl_context *a = zl_context_new(), *b = zl_context_new();
    zl_context *prev = zl_context_set_current(a);
    zl_manual_seed(42);
    zl_tensor *a1 = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(64), NULL);
    zl_context_set_current(b);
    CHECK(zl_generator_get_seed(NULL) == 0x5eed && zl_generator_get_offset(NULL) == 0);
    zl_manual_seed(42);
    zl_tensor *b1 = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(64), NULL);
    zl_tensor *b2 = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(64), NULL);
    zl_context_set_current(a);
    CHECK(zl_generator_get_offset(NULL) == 64);
    zl_tensor *a2 = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(64), NULL);
    CHECK(memcmp(zl_tensor_data(a1), zl_tensor_data(b1), 64 * sizeof(float)) == 0);
    CHECK(memcmp(zl_tensor_data(a2), zl_tensor_data(b2), 64 * sizeof(float)) == 0);
    zl_tensor_release(a1);
    zl_tensor_release(a2);
    zl_tensor_release(b1);
    zl_tensor_release(b2);
    zl_context_set_current(prev);
    zl_context_free(a);
    zl_context_free(b);
}

TEST(thread_counts_are_per_context)
{
    int start = zl_get_num_threads();
    zl_context *a = zl_context_new(), *b = zl_context_new();
    zl_context *prev = zl_context_set_current(a);
    CHECK(zl_get_num_threads() == start);
    zl_set_num_threads(3);
    CHECK(zl_get_num_threads() == 3);
    zl_context_set_current(b);
    CHECK(zl_get_num_threads() == start);
    zl_set_num_threads(1);
    zl_context_set_current(a);
    CHECK(zl_get_num_threads() == 3);
    zl_context_set_current(prev);
    CHECK(zl_get_num_threads() == start);
    zl_context_free(a);
    zl_context_free(b);
}

/* A tensor made in one context and freed while another is current is charged
 * back to the first; neither the other nor the default sees it. */
TEST(accounting_is_per_context)
{
    int64_t def_before = total_bytes();
    zl_context *a = zl_context_new(), *b = zl_context_new();
    zl_context *prev = zl_context_set_current(a);
    CHECK(total_bytes() == 0);
    zl_tensor *t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(1000));
    CHECK(zl_mem_stats_of(ZL_MEM_OTHER).current == 4000 && zl_mem_stats_of(ZL_MEM_OTHER).peak == 4000);
    zl_context_set_current(b);
    CHECK(total_bytes() == 0);
    zl_tensor_set_category(t, ZL_MEM_PARAMS);
    CHECK(total_bytes() == 0);
    zl_tensor_release(t);
    CHECK(total_bytes() == 0 && zl_mem_stats_of(ZL_MEM_PARAMS).peak == 0);
    zl_context_set_current(a);
    CHECK(total_bytes() == 0);
    CHECK(zl_mem_stats_of(ZL_MEM_OTHER).peak == 4000);
    CHECK(zl_mem_stats_of(ZL_MEM_PARAMS).peak == 4000);
    zl_context_set_current(prev);
    CHECK(total_bytes() == def_before);
    zl_context_free(a);
    zl_context_free(b);
}

TEST(fault_injection_is_per_context)
{
    zl_context *a = zl_context_new();
    zl_context *prev = zl_context_set_current(a);
    zl_mem_fail_after(1);
    zl_context_set_current(prev);
    zl_tensor *t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(10));
    CHECK(t != NULL);
    zl_tensor_release(t);
    zl_context_set_current(a);
    CHECK_ERR(zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(10)), "out of memory");
    zl_context_set_current(prev);
    zl_context_free(a);
}

typedef struct hook_count {
    int64_t allocated, freed;
} hook_count;

static void *count_alloc(size_t n, zl_mem_category cat, void *user)
{
    ((hook_count *)user)->allocated += (int64_t)n;
    return aligned_alloc(ZL_ALIGNMENT, (n + ZL_ALIGNMENT - 1) / ZL_ALIGNMENT * ZL_ALIGNMENT + ZL_ALIGNMENT);
}

static void count_free(void *p, size_t n, zl_mem_category cat, void *user)
{
    ((hook_count *)user)->freed += (int64_t)n;
    free(p);
}

/* A context freed with a tensor alive lingers: the tensor goes back through
 * that context's hook, with another context current, and no count is lost. */
TEST(freed_context_lingers_for_its_blocks)
{
    hook_count hc = {0, 0};
    zl_context *a = zl_context_new(), *b = zl_context_new();
    zl_context *prev = zl_context_set_current(a);
    zl_mem_set_allocator(count_alloc, count_free, &hc);
    zl_tensor *t = zl_tensor_full(ZL_DTYPE_F32, SHAPE(256), 1.5);
    CHECK(hc.allocated == 1024);
    zl_context_set_current(b);
    zl_tensor *u = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(8));
    CHECK(hc.allocated == 1024);
    zl_context_free(a);
    CHECK(zl_context_current() == b);
    CHECK(zl_tensor_get(t, 255) == 1.5);
    zl_tensor_release(t);
    CHECK(hc.freed == 1024);
    zl_tensor_release(u);
    CHECK(hc.freed == 1024);
    zl_context_set_current(prev);
    zl_context_free(b);
}

/* Pressure handlers belong to their context: an allocation failing in one
 * calls that context's handler only. */
static void count_pressure(size_t n, void *user) { (*(int *)user)++; }

TEST(pressure_handlers_are_per_context)
{
    int calls_a = 0, calls_b = 0;
    zl_context *a = zl_context_new(), *b = zl_context_new();
    zl_context *prev = zl_context_set_current(a);
    zl_mem_set_pressure_handler(count_pressure, &calls_a);
    zl_context_set_current(b);
    zl_mem_set_pressure_handler(count_pressure, &calls_b);
    zl_context_set_current(a);
    zl_mem_fail_after(1);
    zl_tensor *t = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(4));   /* fails once, retried after the handler */
    CHECK(t != NULL && calls_a == 1 && calls_b == 0);
    zl_tensor_release(t);
    zl_context_set_current(prev);
    zl_context_free(a);
    zl_context_free(b);
}
