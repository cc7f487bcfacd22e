/* The allocator's entry points for the engine's own buffers: each names the
 * context the block is charged to, so that freeing it charges that context
 * back whatever context is current by then. Never installed. */
#ifndef ZL_MEMORY_IMPL_H
#define ZL_MEMORY_IMPL_H

#include "context_impl.h"

/* align 0: the context's host hook (or aligned_alloc), ZL_ALIGNMENT-aligned.
 * Otherwise aligned to `align` (a power of two, at most a page) from the
 * system allocator whatever the hook, which promises only ZL_ALIGNMENT.
 * Charged, fault-injected and retried after the pressure handler as
 * zl_mem_alloc; the block holds a reference on ctx until it is freed. */
ZLI_HIDDEN void *zli_mem_alloc(zl_context *ctx, size_t nbytes, size_t align, zl_mem_category cat);
/* Give back a block of zli_mem_alloc: the same ctx, nbytes and cat, and
 * `aligned` true when it was allocated with a non-zero align. NULL is a no-op. */
ZLI_HIDDEN void zli_mem_free(zl_context *ctx, void *p, size_t nbytes, bool aligned, zl_mem_category cat);
/* Host memory another allocator made (a device's pinned memory) counted in
 * ctx under cat, holding a reference on ctx, as zli_mem_alloc's is; and given
 * back. */
ZLI_HIDDEN void zli_mem_adopt(zl_context *ctx, size_t nbytes, zl_mem_category cat);
ZLI_HIDDEN void zli_mem_disown(zl_context *ctx, size_t nbytes, zl_mem_category cat);
/* The current context's pressure handler, when it has one, asked to free
 * nbytes (a device allocator out of memory runs the host's collector too);
 * true when there was one to ask. */
ZLI_HIDDEN bool zli_mem_pressure(size_t nbytes);
/* Bytes left under the memory cgroup limit the last zl_mem_limit found
 * (that limit, *limit, less the group's usage read now); INT64_MAX when no
 * cgroup's limit was the answer. */
ZLI_HIDDEN int64_t zli_mem_headroom(int64_t *limit);
/* zl_mem_recharge on ctx's accounting. */
ZLI_HIDDEN void zli_mem_recharge(zl_context *ctx, size_t nbytes, zl_mem_category from, zl_mem_category to);

#endif
