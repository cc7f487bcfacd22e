/* The host block cache: freed blocks of 64 KiB and more wait, per context, in
 * bins of one size class each for the next allocation of that class, so a
 * training step that repeats its shapes takes no fresh pages (page faults and
 * kernel zero fills) from the system after its first run. */
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include "cache_impl.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Smaller blocks are malloc's: its own bins serve them without the kernel. */
#define MIN_BYTES ((size_t)64 << 10)

/* Classes step by an eighth of the power of two below the size, so a block
 * is at most 12.5% larger than asked for. */
static int class_of(size_t nbytes, size_t *class_bytes)
{
    int lg = 63 - __builtin_clzll((unsigned long long)nbytes);
    size_t step = (size_t)1 << (lg - ZLI_CACHE_SUBS_LG);
    size_t rounded = (nbytes + step - 1) & ~(step - 1);
    int rlg = 63 - __builtin_clzll((unsigned long long)rounded);
    *class_bytes = rounded;
    return rlg * ZLI_CACHE_SUBS + (int)((rounded >> (rlg - ZLI_CACHE_SUBS_LG)) & (ZLI_CACHE_SUBS - 1));
}

static size_t bytes_of(int k)
{
    int lg = k / ZLI_CACHE_SUBS;
    return ((size_t)1 << lg) + (size_t)(k % ZLI_CACHE_SUBS) * ((size_t)1 << (lg - ZLI_CACHE_SUBS_LG));
}

static void lock(zli_cache *c)
{
    int expected = 0;
    while (!atomic_compare_exchange_weak_explicit(&c->lock, &expected, 1, memory_order_acquire,
                                                  memory_order_relaxed))
        expected = 0;
}

static void unlock(zli_cache *c) { atomic_store_explicit(&c->lock, 0, memory_order_release); }

/* Unless told otherwise, the cache never holds more than half the machine's
 * memory in blocks nobody uses, or under a lower limit (a memory cgroup, an
 * rlimit) an eighth of it: there the kernel kills the process before an
 * allocation fails and the cache could be emptied. */
static size_t g_default_limit;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void find_default_limit(void)
{
    int64_t ram = zl_mem_ram(), lim = zl_mem_limit(NULL);
    g_default_limit = (size_t)(lim < ram ? lim / 8 : ram / 2);
}

static size_t limit_of(const zli_cache *c)
{
    if (c->limit) return c->limit;
    pthread_once(&g_default_once, find_default_limit);
    return g_default_limit;
}

bool zli_cache_serves(size_t nbytes) { return nbytes >= MIN_BYTES; }

void *zli_cache_reuse(zli_cache *c, size_t nbytes)
{
    size_t bytes;
    int k = class_of(nbytes, &bytes);
    void *p = NULL;
    if (!atomic_load_explicit(&c->disabled, memory_order_relaxed)) {
        lock(c);
        zli_cache_bin *b = &c->bins[k];
        if (b->n > 0) {
            p = b->blocks[--b->n];
            c->cached -= bytes;
            c->hits++;
        } else {
            c->misses++;
        }
        unlock(c);
    }
    if (p) UNPOISON(p, bytes);
    return p;
}

void *zli_cache_new(size_t nbytes)
{
    size_t bytes;
    class_of(nbytes, &bytes);
    return aligned_alloc(ZL_ALIGNMENT, bytes);
}

void zli_cache_give(zli_cache *c, void *p, size_t nbytes)
{
    size_t bytes;
    int k = class_of(nbytes, &bytes);
    size_t limit = limit_of(c);
    lock(c);
    zli_cache_bin *b = &c->bins[k];
    bool keep = !atomic_load_explicit(&c->disabled, memory_order_relaxed) && c->cached + bytes <= limit;
    if (keep && b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 4;
        void **grown = realloc(b->blocks, (size_t)cap * sizeof *grown);
        if (grown) {
            b->blocks = grown;
            b->cap = cap;
        } else {
            keep = false;
        }
    }
    if (keep) {
        b->blocks[b->n++] = p;
        c->cached += bytes;
        POISON(p, bytes);
    }
    unlock(c);
    if (!keep) free(p);
}

size_t zli_cache_drain(zli_cache *c)
{
    size_t freed = 0;
    lock(c);
    for (int k = 0; k < ZLI_CACHE_BINS; k++) {
        zli_cache_bin *b = &c->bins[k];
        for (int i = 0; i < b->n; i++) {
            UNPOISON(b->blocks[i], bytes_of(k));
            free(b->blocks[i]);
        }
        b->n = 0;
        free(b->blocks);
        b->blocks = NULL;
        b->cap = 0;
    }
    freed = c->cached;
    c->cached = 0;
    unlock(c);
    return freed;
}

zl_mem_cache_stats zli_cache_stats(zli_cache *c)
{
    size_t limit = limit_of(c);
    lock(c);
    zl_mem_cache_stats s = {(int64_t)c->cached, c->hits, c->misses,
                            atomic_load_explicit(&c->disabled, memory_order_relaxed) ? 0 : (int64_t)limit};
    unlock(c);
    return s;
}

void zli_cache_set_limit(zli_cache *c, size_t nbytes)
{
    atomic_store(&c->disabled, nbytes == 0);
    lock(c);
    c->limit = nbytes == SIZE_MAX ? 0 : nbytes;
    bool over = nbytes == 0 || c->cached > limit_of(c);
    unlock(c);
    if (over) zli_cache_drain(c);
}
