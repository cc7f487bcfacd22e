/* Contexts: their lifetime, the thread-local current one with the process's
 * default behind it, and the kernels' thread count each one carries. */
#include <stdlib.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "context_impl.h"

/* Statically initialised, so a host that never makes a context pays nothing
 * to start and the default is never freed (its reference is never dropped). */
static zl_context default_ctx = {.refs = 1, .rng = {.seed = ZLI_DEFAULT_SEED, .in_context = true}};
static _Thread_local zl_context *current;

zl_context *zl_context_default(void) { return &default_ctx; }

zl_context *zl_context_current(void) { return current ? current : &default_ctx; }

/* The count OpenMP gave the process (OMP_NUM_THREADS or the cores), read
 * before any context changes it: what a context that never set one runs with. */
#ifdef _OPENMP
static int start_threads;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;

static void read_start_threads(void) { start_threads = omp_get_max_threads(); }
#endif

static int threads_of(const zl_context *ctx)
{
#ifdef _OPENMP
    pthread_once(&start_once, read_start_threads);
    return ctx->num_threads ? ctx->num_threads : start_threads;
#else
    (void)ctx;
    return 1;
#endif
}

/* OpenMP keeps the thread count per OS thread, so the context's count is
 * applied to the calling thread whenever the context becomes current there. */
static void apply_threads(const zl_context *ctx)
{
#ifdef _OPENMP
    int n = threads_of(ctx);
    if (omp_get_max_threads() != n) omp_set_num_threads(n);
#else
    (void)ctx;
#endif
}

zl_context *zl_context_set_current(zl_context *ctx)
{
    zl_context *prev = zl_context_current();
    if (!ctx) ctx = &default_ctx;
    if (ctx == prev) return prev;
    current = ctx == &default_ctx ? NULL : ctx;
    apply_threads(ctx);
    return prev;
}

zl_context *zl_context_new(void)
{
    zl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        zl_error(ZL_ENOMEM, "context: out of memory");
        return NULL;
    }
    atomic_init(&ctx->refs, 1);
    ctx->rng = (zl_generator){.seed = ZLI_DEFAULT_SEED, .in_context = true};
    return ctx;
}

void zli_context_retain(zl_context *ctx) { atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed); }

void zli_context_release(zl_context *ctx)
{
    if (atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) == 1) {
        zli_cache_drain(&ctx->cache);
        free(ctx);
    }
}

void zl_context_free(zl_context *ctx)
{
    if (!ctx || ctx == &default_ctx) return;
    if (current == ctx) zl_context_set_current(NULL);
    /* A closed context lingering for its live blocks keeps no spare ones. */
    zli_cache_drain(&ctx->cache);
    zli_context_release(ctx);
}

void zl_context_set_user(zl_context *ctx, void *user)
{
    if (ctx) ctx->user = user;
}

void *zl_context_user(const zl_context *ctx) { return ctx ? ctx->user : NULL; }

void zl_set_num_threads(int n)
{
    if (n <= 0) return;
    zl_context *ctx = zl_context_current();
    (void)threads_of(ctx);   /* the start count is read before this thread's changes */
    ctx->num_threads = n;
    apply_threads(ctx);
}

int zl_get_num_threads(void) { return threads_of(zl_context_current()); }
