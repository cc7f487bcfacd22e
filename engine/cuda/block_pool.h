/* The caching allocator's bookkeeping, apart from CUDA so that the CPU tests
 * drive it: segments from a backend, split into blocks and merged back,
 * blocks cached by size for the stream that allocated them, and a block
 * used on another stream reused only after an event says that stream passed
 * the point where it was freed (PyTorch's CUDACachingAllocator's rules).
 * Not thread-safe: the caller holds a lock per pool. */
#ifndef ZL_CUDA_BLOCK_POOL_H
#define ZL_CUDA_BLOCK_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zli_pool_backend {
    /* A segment of n bytes, NULL when there is no memory for it. */
    void *(*alloc)(size_t n, void *user);
    void (*free)(void *p, size_t n, void *user);
    /* An event after the work queued on stream so far, or NULL when the
     * backend waited for that work instead (no event could be made); whether
     * an event has passed; its end. */
    void *(*record)(void *stream, void *user);
    bool (*done)(void *event, void *user);
    void (*drop)(void *event, void *user);
    void *user;
} zli_pool_backend;

typedef struct zli_pool zli_pool;

typedef struct zli_pool_stats {
    int64_t reserved;    /* bytes of segments held from the backend */
    int64_t in_use;      /* bytes of blocks handed out (rounded sizes) */
    int64_t pending;     /* bytes freed but waiting for another stream's event */
    int64_t segments;
} zli_pool_stats;

/* Requests round up to 512 bytes; up to 1 MiB they come from 2 MiB segments
 * shared by many, larger ones from a segment of their own (20 MiB below
 * 10 MiB, else the size rounded to 2 MiB), split when a cached block is
 * larger by more than 1 MiB. */
#define ZLI_POOL_ROUND ((size_t)512)
#define ZLI_POOL_SMALL ((size_t)1 << 20)
#define ZLI_POOL_SMALL_SEGMENT ((size_t)2 << 20)
#define ZLI_POOL_MID ((size_t)10 << 20)
#define ZLI_POOL_MID_SEGMENT ((size_t)20 << 20)

/* NULL when out of host memory. */
zli_pool *zli_pool_new(const zli_pool_backend *backend);
/* Gives every segment back, blocks in use or not. */
void zli_pool_delete(zli_pool *p);
/* A block of at least n bytes for work on `stream`, *size its rounded size:
 * a cached one of that stream, or a new segment's, or after every cached
 * whole segment went back, a new segment's again. NULL when the backend has
 * no memory left for it. */
void *zli_pool_take(zli_pool *p, size_t n, void *stream, size_t *size);
/* The block holding address `at` is used on `stream` too: when it is given
 * back, it waits for that stream's work queued until then. False when no
 * block in use holds `at`. */
bool zli_pool_record_stream(zli_pool *p, const void *at, void *stream);
/* Back to the cache (ptr as zli_pool_take gave it); false for a pointer the
 * pool did not give out. */
bool zli_pool_give(zli_pool *p, void *ptr);
/* Every cached segment none of whose blocks is in use or pending goes back
 * to the backend; returns the bytes. */
int64_t zli_pool_release(zli_pool *p);
zli_pool_stats zli_pool_stats_of(const zli_pool *p);

#endif
