/* The allocator every tensor goes through: aligned memory (large blocks
 * through the context's cache, cache.c), per-category accounting (how ZeRO's
 * memory formulas are checked), a host hook, a pressure callback before
 * failing, and fault injection for the error-path tests; all of it held by a
 * context (context_impl.h), the current one for the public calls. */
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <pthread.h>
#include <search.h>
#include <stdint.h>
#include <sys/mman.h>
#include "memory_impl.h"

static const char *const cat_names[ZL_MEM_COUNT] = {
    "params", "grads", "optimizer", "activations", "comm", "other",
};

const char *zl_mem_category_name(zl_mem_category c)
{
    return (unsigned)c < ZL_MEM_COUNT ? cat_names[c] : "invalid";
}

zl_status zl_mem_category_from_name(const char *name, zl_mem_category *out)
{
    for (int i = 0; name && i < ZL_MEM_COUNT; i++)
        if (strcmp(name, cat_names[i]) == 0) { *out = (zl_mem_category)i; return ZL_OK; }
    return zl_error(ZL_EINVAL, "unknown memory category '%s' (expected params, grads, optimizer, "
                    "activations, comm or other)", name ? name : "(null)");
}

static void charge(zl_context *ctx, zl_mem_category cat, int64_t delta)
{
    int64_t now = atomic_fetch_add(&ctx->current[cat], delta) + delta;
    int64_t p = atomic_load(&ctx->peak[cat]);
    while (now > p && !atomic_compare_exchange_weak(&ctx->peak[cat], &p, now)) {}
}

/* With a release threshold set, blocks that large are mapped from the
 * kernel and unmapped when freed. malloc keeps freed blocks below its
 * self-raising mmap threshold, so a step that frees gigabytes keeps them
 * resident: fast (no page faults the next step) but hiding the real need
 * from a memory limit (ZeRO-Infinity). Mapped blocks are remembered by
 * address, so the threshold may change while blocks of either kind live. The
 * threshold is the context's; the set of mapped blocks is the process's, as
 * the address space is. */
static void *mapped;                     /* tsearch tree of mapped block addresses */
static _Atomic int64_t nmapped;          /* its size, read without the lock */
static pthread_mutex_t mapped_lock = PTHREAD_MUTEX_INITIALIZER;

static int cmp_addr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y ? -1 : x > y;
}

static void *map_block(size_t nbytes)
{
    void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    pthread_mutex_lock(&mapped_lock);
    bool ok = tsearch(p, &mapped, cmp_addr) != NULL;
    if (ok) atomic_fetch_add(&nmapped, 1);
    pthread_mutex_unlock(&mapped_lock);
    if (!ok) {
        munmap(p, nbytes);
        return NULL;
    }
    return p;
}

/* True (and forgotten) when p was mapped by map_block: unmap it. */
static bool unmap_block(void *p, size_t nbytes)
{
    if (atomic_load(&nmapped) == 0) return false;
    pthread_mutex_lock(&mapped_lock);
    bool was = tfind(p, &mapped, cmp_addr) != NULL;
    if (was) {
        tdelete(p, &mapped, cmp_addr);
        atomic_fetch_sub(&nmapped, 1);
    }
    pthread_mutex_unlock(&mapped_lock);
    if (was) munmap(p, nbytes);
    return was;
}

/* Unless a context chose, blocks of 1 MiB and more go back to the system
 * when the process runs under a limit lower than the machine's memory (a
 * memory cgroup, an rlimit): kept in malloc's heap they would count against
 * it as long as the process lives. */
static size_t g_release_default;
static pthread_once_t g_release_once = PTHREAD_ONCE_INIT;

static void find_release_default(void) { g_release_default = zl_mem_limit(NULL) < zl_mem_ram() ? (size_t)1 << 20 : 0; }

static bool release_on_free(zl_context *ctx, size_t nbytes)
{
    size_t t = atomic_load(&ctx->release_threshold);
    if (!atomic_load(&ctx->release_set)) {
        pthread_once(&g_release_once, find_release_default);
        t = g_release_default;
    }
    return t && nbytes >= t;
}

void zl_mem_set_release_threshold(size_t nbytes)
{
    zl_context *ctx = zl_context_current();
    atomic_store(&ctx->release_threshold, nbytes);
    atomic_store(&ctx->release_set, true);
}

/* Under a memory cgroup the kernel kills the process instead of failing an
 * allocation, so the retry below would never run: fresh memory of the
 * cache's sizes asked for within a sixteenth of the limit first has the
 * cache give its blocks back and then, if that was not enough, the host
 * collect. A block the cache reuses is already counted against the limit. */
static void ease(zl_context *ctx, size_t nbytes)
{
    if (!zli_cache_serves(nbytes)) return;
    int64_t limit, left = zli_mem_headroom(&limit);
    int64_t margin = limit / 16 + (int64_t)nbytes;
    if (left == INT64_MAX || left >= margin) return;
    zli_cache_drain(&ctx->cache);
    if (ctx->pressure_fn && zli_mem_headroom(&limit) < margin) ctx->pressure_fn(nbytes, ctx->pressure_user);
}

/* align 0: the host hook's memory (or aligned_alloc), ZL_ALIGNMENT-aligned.
 * Otherwise posix_memalign whatever the hook. Every path but a cached
 * block's takes fresh memory, eased first. */
static void *raw_alloc(zl_context *ctx, size_t nbytes, size_t align, zl_mem_category cat)
{
    bool cached = !align && !ctx->host_alloc && !release_on_free(ctx, nbytes) && zli_cache_serves(nbytes);
    void *p = cached ? zli_cache_reuse(&ctx->cache, nbytes) : NULL;
    if (p) return p;
    ease(ctx, nbytes);
    if (cached) return zli_cache_new(nbytes);
    if (align) {
        if (release_on_free(ctx, nbytes)) return map_block(nbytes);
        return posix_memalign(&p, align, nbytes ? nbytes : align) == 0 ? p : NULL;
    }
    if (ctx->host_alloc) return ctx->host_alloc(nbytes, cat, ctx->host_user);
    if (release_on_free(ctx, nbytes)) return map_block(nbytes);
    size_t rounded = (nbytes + ZL_ALIGNMENT - 1) / ZL_ALIGNMENT * ZL_ALIGNMENT;
    return aligned_alloc(ZL_ALIGNMENT, rounded ? rounded : ZL_ALIGNMENT);
}

void *zli_mem_alloc(zl_context *ctx, size_t nbytes, size_t align, zl_mem_category cat)
{
    if ((unsigned)cat >= ZL_MEM_COUNT) cat = ZL_MEM_OTHER;
    /* Page alignment at most: mapped blocks have no more. */
    if (align > 4096) {
        zl_error(ZL_EINVAL, "memory: alignment %zu is above the page size", align);
        return NULL;
    }
    if (align && align < ZL_ALIGNMENT) align = ZL_ALIGNMENT;
    /* An injected failure stands for the system's refusal, but stays a
     * failure unless a host's pressure handler asks for the retry: the error
     * paths it tests are then reached whatever the cache holds. */
    int64_t c = atomic_load(&ctx->fail_countdown);
    bool injected = c > 0 && atomic_fetch_sub(&ctx->fail_countdown, 1) == 1;
    void *p = injected ? NULL : raw_alloc(ctx, nbytes, align, cat);
    /* The host frees what it can (its collector), which lands in the cache;
     * then every cached block goes back to the system before the one retry. */
    if (!p) {
        if (ctx->pressure_fn) ctx->pressure_fn(nbytes, ctx->pressure_user);
        bool freed = zli_cache_drain(&ctx->cache) > 0;
        if (ctx->pressure_fn || (freed && !injected)) p = raw_alloc(ctx, nbytes, align, cat);
    }
    if (!p) {
        zl_error(ZL_ENOMEM, "out of memory allocating %zu bytes for %s", nbytes, cat_names[cat]);
        return NULL;
    }
    charge(ctx, cat, (int64_t)nbytes);
    zli_context_retain(ctx);
    return p;
}

void zli_mem_free(zl_context *ctx, void *p, size_t nbytes, bool aligned, zl_mem_category cat)
{
    if (!p) return;
    if ((unsigned)cat >= ZL_MEM_COUNT) cat = ZL_MEM_OTHER;
    charge(ctx, cat, -(int64_t)nbytes);
    if (!unmap_block(p, nbytes)) {
        if (!aligned && ctx->host_free) ctx->host_free(p, nbytes, cat, ctx->host_user);
        else if (!aligned && zli_cache_serves(nbytes)) zli_cache_give(&ctx->cache, p, nbytes);
        else free(p);
    }
    zli_context_release(ctx);
}

void zli_mem_adopt(zl_context *ctx, size_t nbytes, zl_mem_category cat)
{
    charge(ctx, (unsigned)cat < ZL_MEM_COUNT ? cat : ZL_MEM_OTHER, (int64_t)nbytes);
    zli_context_retain(ctx);
}

void zli_mem_disown(zl_context *ctx, size_t nbytes, zl_mem_category cat)
{
    charge(ctx, (unsigned)cat < ZL_MEM_COUNT ? cat : ZL_MEM_OTHER, -(int64_t)nbytes);
    zli_context_release(ctx);
}

void zli_mem_recharge(zl_context *ctx, size_t nbytes, zl_mem_category from, zl_mem_category to)
{
    if (from == to || (unsigned)from >= ZL_MEM_COUNT || (unsigned)to >= ZL_MEM_COUNT) return;
    charge(ctx, from, -(int64_t)nbytes);
    charge(ctx, to, (int64_t)nbytes);
}

/* The public calls act on the current context: a block from zl_mem_alloc is
 * freed by zl_mem_free under the same one (the engine's own blocks name theirs). */
void *zl_mem_alloc(size_t nbytes, zl_mem_category cat) { return zli_mem_alloc(zl_context_current(), nbytes, 0, cat); }

void zl_mem_free(void *p, size_t nbytes, zl_mem_category cat)
{
    zli_mem_free(zl_context_current(), p, nbytes, false, cat);
}

void zl_mem_recharge(size_t nbytes, zl_mem_category from, zl_mem_category to)
{
    zli_mem_recharge(zl_context_current(), nbytes, from, to);
}

zl_mem_stats zl_mem_stats_of(zl_mem_category cat)
{
    zl_context *ctx = zl_context_current();
    zl_mem_stats s = {0, 0};
    if ((unsigned)cat >= ZL_MEM_COUNT) {
        zl_error(ZL_EINVAL, "zl_mem_stats_of: unknown memory category %d", (int)cat);
        return s;
    }
    s.current = atomic_load(&ctx->current[cat]);
    s.peak = atomic_load(&ctx->peak[cat]);
    return s;
}

void zl_mem_reset_peak(void)
{
    zl_context *ctx = zl_context_current();
    for (int i = 0; i < ZL_MEM_COUNT; i++) atomic_store(&ctx->peak[i], atomic_load(&ctx->current[i]));
}

void zl_mem_set_allocator(zl_alloc_fn alloc, zl_free_fn free_fn, void *user)
{
    zl_context *ctx = zl_context_current();
    ctx->host_alloc = alloc && free_fn ? alloc : NULL;
    ctx->host_free = alloc && free_fn ? free_fn : NULL;
    ctx->host_user = user;
}

bool zli_mem_pressure(size_t nbytes)
{
    zl_context *ctx = zl_context_current();
    if (!ctx->pressure_fn) return false;
    ctx->pressure_fn(nbytes, ctx->pressure_user);
    return true;
}

void zl_mem_set_pressure_handler(zl_pressure_fn fn, void *user)
{
    zl_context *ctx = zl_context_current();
    ctx->pressure_fn = fn;
    ctx->pressure_user = user;
}

void zl_mem_set_cache_limit(size_t nbytes) { zli_cache_set_limit(&zl_context_current()->cache, nbytes); }

size_t zl_mem_empty_cache(void) { return zli_cache_drain(&zl_context_current()->cache); }

zl_mem_cache_stats zl_mem_cache_info(void) { return zli_cache_stats(&zl_context_current()->cache); }

void zl_mem_fail_after(int64_t n) { atomic_store(&zl_context_current()->fail_countdown, n > 0 ? n : 0); }
