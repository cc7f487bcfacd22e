/* zlua/context.h — the context: what would otherwise be process-global (the
 * default random generator, the kernels' thread count, memory accounting and
 * the allocator hooks), so that two hosts, or two Lua states, in one process
 * never see each other's. */
#ifndef ZLUA_CONTEXT_H
#define ZLUA_CONTEXT_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every call acts on the calling thread's current context: the process's
 * default one until the thread sets another, so a host that never creates a
 * context sees one process-wide engine. What stays process-wide on purpose:
 * the interrupt flag (a signal handler sets it), MPI (initialised once per
 * process), the kernel variants chosen for the CPU and their overrides for
 * tests and benchmarks (zl_optim_set_kernel), and the error message and
 * autograd mode, which are per thread as before. */
typedef struct zl_context zl_context;

/* A new context: default generator seeded as the process's starts (seed
 * 0x5eed, offset 0), the thread count the process started with, accounting at
 * zero, no allocator hook, no pressure handler, release threshold 0.
 * NULL with ZL_ENOMEM. */
ZL_API zl_context *zl_context_new(void);
/* Close a context. Memory allocated under it and still live stays charged to
 * it and goes back through its allocator hook when freed, whatever context is
 * current then; the context's own memory is reclaimed after the last such
 * block. Where it is current on the calling thread, the default context
 * becomes current. NULL and the default context are no-ops. */
ZL_API void zl_context_free(zl_context *ctx);

/* The calling thread's current context, never NULL. Borrowed. */
ZL_API zl_context *zl_context_current(void);
/* Make ctx current on the calling thread (NULL: the default context) and apply
 * its thread count to the thread's kernels; returns the previous one, for the
 * caller to restore. Other threads are not affected: the engine's own worker
 * threads take the context of whoever started them. */
ZL_API zl_context *zl_context_set_current(zl_context *ctx);
/* The default context (current on threads that never set one). Borrowed. */
ZL_API zl_context *zl_context_default(void);

/* A pointer the host keeps with a context, NULL until set (the Lua binding:
 * its per-state runtime). Nothing is done with it when the context is freed. */
ZL_API void zl_context_set_user(zl_context *ctx, void *user);
ZL_API void *zl_context_user(const zl_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
