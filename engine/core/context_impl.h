/* Private layout of zl_context and of the generator it embeds, shared by
 * context.c (lifetime, the current context), memory.c (accounting, hooks)
 * and rng.c (the default generator). Never installed. */
#ifndef ZL_CONTEXT_IMPL_H
#define ZL_CONTEXT_IMPL_H

#include <stdatomic.h>
#include "zlua/context.h"
#include "zlua/memory.h"
#include "zlua/rng.h"
#include "cache_impl.h"

#ifndef ZLI_HIDDEN
#define ZLI_HIDDEN __attribute__((visibility("hidden")))
#endif

#define ZLI_DEFAULT_SEED 0x5eed

struct zl_generator {
    uint64_t seed;
    uint64_t offset;
    bool in_context;       /* a context's default generator: freed with the context */
};

/* Accounting fields are atomics: one context may be current on several
 * threads at once (the default context on every thread that sets none), and
 * the offload engine's threads allocate under the context that opened it. */
struct zl_context {
    _Atomic int64_t refs;  /* 1 while open, plus 1 per live block charged to it */
    _Atomic int64_t current[ZL_MEM_COUNT];
    _Atomic int64_t peak[ZL_MEM_COUNT];
    _Atomic int64_t fail_countdown;
    _Atomic size_t release_threshold;
    _Atomic bool release_set;   /* the threshold was chosen, not the default */
    zl_alloc_fn host_alloc;
    zl_free_fn host_free;
    void *host_user;
    zl_pressure_fn pressure_fn;
    void *pressure_user;
    zl_generator rng;
    int num_threads;       /* 0: the count the process started with */
    zli_cache cache;       /* freed large blocks for reuse (cache.c) */
    /* A backend registered for CUDA's kind in place of its module
     * (zli_backend_register); the module itself is one per process. */
    const struct zli_backend *_Atomic cuda_backend;
    void *user;
};

/* A block charged to ctx keeps it alive (a closed context lingers until its
 * last block is freed); the release that drops the last reference frees it. */
ZLI_HIDDEN void zli_context_retain(zl_context *ctx);
ZLI_HIDDEN void zli_context_release(zl_context *ctx);

#endif
