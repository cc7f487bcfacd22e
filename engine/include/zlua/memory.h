/* zlua/memory.h — the one allocator behind every tensor: 64-byte alignment,
 * current and peak bytes per category, a host hook, and fault injection for tests. */
#ifndef ZLUA_MEMORY_H
#define ZLUA_MEMORY_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Categories are reported by name and kept in checkpoints' metadata: append only. */
typedef enum zl_mem_category {
    ZL_MEM_PARAMS = 0,
    ZL_MEM_GRADS = 1,
    ZL_MEM_OPTIMIZER = 2,
    ZL_MEM_ACTIVATIONS = 3,
    ZL_MEM_COMM = 4,
    ZL_MEM_OTHER = 5,
    ZL_MEM_COUNT
} zl_mem_category;

#define ZL_ALIGNMENT 64

typedef struct zl_mem_stats {
    int64_t current;   /* bytes now allocated */
    int64_t peak;      /* high-water mark since start or the last reset */
} zl_mem_stats;

ZL_API const char *zl_mem_category_name(zl_mem_category c);
ZL_API zl_status zl_mem_category_from_name(const char *name, zl_mem_category *out);

/* 64-byte aligned allocation charged to `cat`. NULL with ZL_ENOMEM set on failure.
 * The size must be passed back to zl_mem_free. */
ZL_API void *zl_mem_alloc(size_t nbytes, zl_mem_category cat);
ZL_API void zl_mem_free(void *p, size_t nbytes, zl_mem_category cat);
/* Move `nbytes` of accounting from one category to another (a buffer changing role). */
ZL_API void zl_mem_recharge(size_t nbytes, zl_mem_category from, zl_mem_category to);

/* One category's bytes now and at peak; zeros and an error for an unknown one. */
ZL_API zl_mem_stats zl_mem_stats_of(zl_mem_category cat);
ZL_API void zl_mem_reset_peak(void);

/* The most memory this process may use: the smallest of the machine's RAM,
 * the memory cgroup limits (v2 memory.max, v1 memory.limit_in_bytes) of its
 * group and of every group above it, RLIMIT_AS and RLIMIT_DATA, read anew at
 * each call (some files under /proc and /sys). *source (may be NULL) receives
 * where it came from ("the machine's memory", "memory.max of the memory
 * cgroup /jobs/a", "RLIMIT_AS"); static, valid until the next call. */
ZL_API int64_t zl_mem_limit(const char **source);
/* The machine's physical memory in bytes. */
ZL_API int64_t zl_mem_ram(void);

/* Host allocator hook. `alloc` must return memory aligned to ZL_ALIGNMENT
 * (or NULL); `free` receives what alloc returned. NULL restores the default. */
typedef void *(*zl_alloc_fn)(size_t nbytes, zl_mem_category cat, void *user);
typedef void (*zl_free_fn)(void *p, size_t nbytes, zl_mem_category cat, void *user);
ZL_API void zl_mem_set_allocator(zl_alloc_fn alloc, zl_free_fn free_fn, void *user);

/* Called once before an allocation fails, so a host (the Lua binding) can free
 * memory it holds (run its garbage collector); the allocation is retried once. */
typedef void (*zl_pressure_fn)(size_t nbytes, void *user);
ZL_API void zl_mem_set_pressure_handler(zl_pressure_fn fn, void *user);

/* Blocks of at least nbytes go back to the kernel as soon as they are freed
 * (0: malloc keeps them for reuse, which is faster but keeps the process's
 * resident memory at its high-water mark). For runs under a memory limit;
 * costs page faults each time such a block is used anew. Until it is set, a
 * context uses 0, or 1 MiB where zl_mem_limit is below the machine's memory. */
ZL_API void zl_mem_set_release_threshold(size_t nbytes);
/* The cache of freed blocks (64 KiB and more) each context keeps, so that a
 * training step that repeats its shapes takes no fresh pages from the system
 * (page faults, kernel zero fills) after its first run. Cached bytes are not
 * counted in any category: they belong to no tensor. The limit caps what the
 * cache holds (default half the machine's memory, or an eighth of a lower
 * limit the process runs under, zl_mem_limit; 0 turns it off, SIZE_MAX
 * restores the default); an allocation that fails empties it and tries again. */
typedef struct zl_mem_cache_stats {
    int64_t cached;    /* bytes held for reuse now */
    int64_t hits;      /* allocations served from the cache */
    int64_t misses;    /* allocations of cacheable size it could not serve */
    int64_t limit;     /* the most it holds; 0 while off */
} zl_mem_cache_stats;
ZL_API void zl_mem_set_cache_limit(size_t nbytes);
/* Give every cached block back to the system; the bytes given back. */
ZL_API size_t zl_mem_empty_cache(void);
ZL_API zl_mem_cache_stats zl_mem_cache_info(void);

/* Testing: make the n-th allocation from now fail (1 = the next one); 0 disables.
 * The failure stands even when the cache could be emptied; a pressure handler
 * still gets its one retry. */
ZL_API void zl_mem_fail_after(int64_t n);

#ifdef __cplusplus
}
#endif
#endif
