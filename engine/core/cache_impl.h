/* Private layout of the host block cache each context embeds (cache.c), and
 * the calls memory.c makes on it. Never installed. */
#ifndef ZL_CACHE_IMPL_H
#define ZL_CACHE_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include "zlua/memory.h"

#ifndef ZLI_HIDDEN
#define ZLI_HIDDEN __attribute__((visibility("hidden")))
#endif

#define ZLI_CACHE_SUBS_LG 3
#define ZLI_CACHE_SUBS (1 << ZLI_CACHE_SUBS_LG)
#define ZLI_CACHE_BINS (64 * ZLI_CACHE_SUBS)

typedef struct zli_cache_bin {
    void **blocks;
    int n, cap;
} zli_cache_bin;

/* All zero is an empty cache at the default limit. The spin lock guards the
 * bins and counters: it is held for a few stores, never across malloc/free of
 * a block. */
typedef struct zli_cache {
    _Atomic int lock;
    _Atomic bool disabled;
    size_t limit;            /* 0: half the machine's memory */
    size_t cached;           /* bytes waiting in the bins */
    int64_t hits, misses;
    zli_cache_bin bins[ZLI_CACHE_BINS];
} zli_cache;

/* Whether blocks of nbytes go through the cache: then they are taken and
 * given back through it even while it is off, so that every block of a size
 * class has the class's size. */
ZLI_HIDDEN bool zli_cache_serves(size_t nbytes);
/* A ZL_ALIGNMENT-aligned block of at least nbytes: a cached one of its class
 * (NULL when there is none), or a new one from the system of the class's
 * size (NULL when the system has none). */
ZLI_HIDDEN void *zli_cache_reuse(zli_cache *c, size_t nbytes);
ZLI_HIDDEN void *zli_cache_new(size_t nbytes);
/* Return a block of zli_cache_reuse or zli_cache_new (the same nbytes): kept
 * while the cache is under its limit, freed otherwise. */
ZLI_HIDDEN void zli_cache_give(zli_cache *c, void *p, size_t nbytes);
/* Free every cached block; the bytes freed. */
ZLI_HIDDEN size_t zli_cache_drain(zli_cache *c);
ZLI_HIDDEN zl_mem_cache_stats zli_cache_stats(zli_cache *c);
/* 0 turns the cache off and empties it, SIZE_MAX restores the default;
 * the cache is emptied when it holds more than the new limit. */
ZLI_HIDDEN void zli_cache_set_limit(zli_cache *c, size_t nbytes);

#endif
