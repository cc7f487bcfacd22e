/* Private layout of zl_tensor and its storage, and core's internal helpers,
 * for core/ and the layers above it. Never installed: hosts see only the
 * opaque type. Nothing here depends on a layer above core. */
#ifndef ZL_TENSOR_IMPL_H
#define ZL_TENSOR_IMPL_H

#include "zlua/zlua.h"
#include "../math/strided.h"

#define ZLI_HIDDEN __attribute__((visibility("hidden")))

typedef struct zl_storage zl_storage;

/* A device's copy stream: copies between host and device memory that run
 * beside the compute instead of behind it. An event marks the
 * work queued on one stream up to its making. CUDA's caching allocator does
 * not hand a freed device buffer out again before the copies queued on it
 * are done; still, neither buffer of a copy may be written, and the host
 * buffer not freed, until its event was waited for. */
typedef struct zli_copy_stream {
    /* *ev = an event marking the compute work queued so far. */
    zl_status (*mark)(int index, void **ev);
    /* The copy stream waits for `after` (an event from mark; NULL: the
     * compute work queued so far), then copies n bytes dst = src between
     * host memory (page-locked for it to overlap) and device `index`;
     * *done = an event marking the copy. */
    zl_status (*start)(int index, void *after, void *dst, const void *src, size_t n, bool to_host,
                       void **done);
    /* host: the host waits for ev; otherwise the compute work queued from now
     * on waits for it, and the host goes on. */
    zl_status (*wait)(int index, void *ev, bool host);
    void (*drop)(void *ev);
} zli_copy_stream;

/* A device's own table, handed to core with each storage the device layer
 * (engine/cuda) makes: core gives the block back through it and never reads
 * or writes the bytes of a storage that has one. A pointer per storage rather
 * than a registry keeps core free of any call upward. */
typedef struct zli_device_ops {
    zl_device kind;
    void (*free)(zl_storage *s);   /* gives s->data back; core frees s itself */
    void (*recharge)(const zl_storage *s, zl_mem_category to);   /* before s->cat becomes `to` */
    /* Core's primitives on the device, all tensors on device `index`:
     * a new contiguous tensor; dst (any view whose elements do not share
     * memory) = src (any view, any dtype, strides 0 where broadcast); every element of t = v; dst (any view, a
     * float dtype) += alpha * src (broadcast to dst's shape). */
    zl_tensor *(*alloc)(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index);
    zl_status (*copy)(zl_tensor *dst, const zl_tensor *src);
    zl_status (*fill)(zl_tensor *t, double v);
    zl_status (*add)(zl_tensor *dst, const zl_tensor *src, double alpha);
    /* dst (contiguous, on the device) = src (contiguous, host memory, same bytes). */
    zl_status (*from_host)(zl_tensor *dst, const zl_tensor *src);
    /* dst (host memory, numel * dtype size bytes) = src (contiguous, on the device). */
    zl_status (*to_host)(void *dst, const zl_tensor *src);
    /* t (contiguous, a float dtype) = the generator's draws at counters
     * offset + i under key seed (math/rng.h's zlm_rand_value: uniform
     * in [a, b), or normal with mean a, std b). NULL: the device draws none. */
    zl_status (*rand)(zl_tensor *t, bool normal, double a, double b, uint64_t seed, uint64_t offset);
    /* The ops layer's kernels on this device (ops/device_kernels.h); core
     * never looks inside. NULL: the device runs no op. */
    const void *kernels;
    /* The optimizers and mixed precision's passes on this device
     * (optim/device_optim.h); core never looks inside. NULL: none run there. */
    const void *optim;
    /* Host memory page-locked for this device's copies (cudaHostAlloc): a
     * host tensor, read and written by core as any other and charged to the
     * current context, over memory from alloc_pinned that its storage gives
     * back through free_pinned. Both NULL: the device pins nothing. */
    zl_tensor *(*alloc_pinned)(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index);
    void (*free_pinned)(zl_storage *s);
    /* NULL: every copy is done when from_host or to_host returns. */
    const zli_copy_stream *streams;
} zli_device_ops;

struct zl_storage {
    int refcount;          /* not atomic: tensors are owned by one thread at a time */
    void *data;
    size_t nbytes;
    zl_mem_category cat;
    bool sys_aligned;      /* from zli_mem_alloc with an alignment (memory_impl.h) */
    zl_context *ctx;       /* charged to, and given back to, this context (host memory) */
    const zli_device_ops *dev;   /* NULL: host memory */
    int dev_index;
    const zli_device_ops *pinned;   /* host memory this device page-locked (dev is NULL) */
};

struct zl_tensor {
    int refcount;
    zl_dtype dtype;
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    int64_t stride[ZL_MAX_DIMS];
    int64_t offset;
    zl_storage *storage;
    /* Per-tensor data of a layer above core (autograd keeps requires_grad, the
     * gradient, the graph node and the hooks here). Core never looks inside:
     * whoever attaches `ext` sets `ext_free`, and release calls it with its
     * worklist, so tensors the data holds are dropped without recursion. A
     * function pointer per tensor rather than a call upward keeps core linkable
     * on its own, and needs no registration at start-up that a
     * static link or a second context could miss. */
    void *ext;
    void (*ext_free)(void *ext, zl_tensor **worklist);
    /* link in the release worklist, so freeing a long graph never recurses */
    zl_tensor *free_next;
};

/* zl_tensor_new, but the storage starts on an `align` boundary and is a whole
 * number of `align` blocks long (the tail past the elements zeroed). */
ZLI_HIDDEN zl_tensor *zli_tensor_new_aligned(zl_dtype dt, int ndim, const int64_t *shape,
                                            zl_mem_category cat, size_t align);

/* A tensor over `data`, nbytes of memory on device dev (index `index`) that
 * the device layer allocated; the storage gives it back through dev->free. */
ZLI_HIDDEN zl_tensor *zli_tensor_on_device(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                          const zli_device_ops *dev, int index, void *data, size_t nbytes);
/* A host tensor over `data`, nbytes of page-locked host memory from
 * dev->alloc_pinned, charged to the current context; the storage gives it
 * back through dev->free_pinned. */
ZLI_HIDDEN zl_tensor *zli_tensor_on_pinned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                          const zli_device_ops *dev, void *data, size_t nbytes);
/* ZL_OK when t's bytes are in host memory; otherwise ZL_EDEVICE naming op and
 * the device ("<op>: <role> is on cuda:0, and <op> runs on the CPU: ..."). */
ZLI_HIDDEN zl_status zli_need_host(const char *op, const char *role, const zl_tensor *t);
/* A new contiguous tensor in the same memory as `like` (the host, or like's
 * device), every element v. */
ZLI_HIDDEN zl_tensor *zli_full_like_device(const zl_tensor *like, zl_dtype dt, int ndim, const int64_t *shape,
                                          zl_mem_category cat, double v);
/* ZL_OK when a and b are in the same memory (the host, or one device);
 * otherwise ZL_EDEVICE naming both. */
ZLI_HIDDEN zl_status zli_same_device(const char *op, const zl_tensor *a, const zl_tensor *b);

/* Drop one reference; when it reaches zero, link t into *worklist instead of
 * freeing it (used by ext_free and graph teardown). */
ZLI_HIDDEN void zli_release_deferred(zl_tensor *t, zl_tensor **worklist);

/* The status code of the last zl_error on this thread. */
ZLI_HIDDEN zl_status zli_last_code(void);
/* v [m] (m <= ZLI_RAND_BLOCK) = the generator's draws at counters base + i
 * under key: uniform in [a, b), or normal with mean a and std b, as
 * zlm_rand_value makes them, the Philox words of the block drawn first so
 * the compiler vectorises them (core/rng.c). */
#define ZLI_RAND_BLOCK 256
ZLI_HIDDEN void zli_rand_block(bool normal, double a, double b, uint64_t key, uint64_t base, int m, float *v);
/* Normalise a possibly negative dim against ndim (for insertion, pass ndim+1).
 * Returns ZL_EINVAL with a message naming the op when out of range. */
ZLI_HIDDEN zl_status zli_norm_dim(const char *op, int dim, int ndim, int *out);
/* The same for the position of a new dimension inserted into an ndim-d tensor
 * (0..ndim, or -ndim-1..-1). */
ZLI_HIDDEN zl_status zli_norm_dim_insert(const char *op, int dim, int ndim, int *out);
/* A new tensor header over t's storage (retained) with the given view. */
ZLI_HIDDEN zl_tensor *zli_view_of(const zl_tensor *t, int ndim, const int64_t *shape,
                                  const int64_t *stride, int64_t offset);
/* Contiguous row-major strides for shape. */
ZLI_HIDDEN void zli_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
ZLI_HIDDEN int64_t zli_numel(int ndim, const int64_t *shape);
/* Whether every size is >= 0 and the product of the sizes, a size of 0
 * counted as 1, fits int64: then numel, every contiguous stride and every
 * in-bounds offset do. Shapes from files or callers pass here before a
 * header is made of them. */
ZLI_HIDDEN bool zli_shape_fits(int ndim, const int64_t *shape);
/* Contiguous f32 version of t: t retained when it already is one, else a copy
 * (used by kernels that compute in f32). */
ZLI_HIDDEN zl_tensor *zli_f32c(const zl_tensor *t);
/* Contiguous copy of t in dtype dt, charged to cat. */
ZLI_HIDDEN zl_tensor *zli_copy_as(const zl_tensor *t, zl_dtype dt, zl_mem_category cat);
/* Offset (in elements, from the view's first element) of logical index `linear`. */
ZLI_HIDDEN int64_t zli_linear_offset(const zl_tensor *t, int64_t linear);
/* Check a non-NULL tensor argument; sets an error naming op and role. */
ZLI_HIDDEN zl_status zli_check_arg(const char *op, const char *role, const zl_tensor *t);
/* t takes src's storage (retained) and view; its own storage is released. */
ZLI_HIDDEN void zli_share_storage(zl_tensor *t, const zl_tensor *src);
/* Set every element of t to v (any layout), in host or device memory. No
 * check for who else reads t. */
ZLI_HIDDEN zl_status zli_fill(zl_tensor *t, double v);
/* dst = src, src broadcast to dst's shape and converted to dst's dtype; a src
 * sharing dst's storage is read through a copy. */
ZLI_HIDDEN zl_status zli_copy(zl_tensor *dst, const zl_tensor *src);
/* ZL_ESHAPE, "<op>: source of shape [..] cannot be broadcast to [..]". */
ZLI_HIDDEN zl_status zli_broadcast_error(const char *op, const zl_tensor *src, const zl_tensor *dst);
/* dst += alpha * src in f32; dst must be a float tensor, src is broadcast to its shape. */
ZLI_HIDDEN zl_status zli_add(zl_tensor *dst, const zl_tensor *src, double alpha);

/* A choice made once, on first use (a kernel or library picked from the CPU
 * and the environment): *slot, set from decide() while it is still -1. Two
 * first calls both decide, and decide the same, so relaxed atomics are all
 * the ordering a slot needs. */
static inline int zli_choice(int *slot, int (*decide)(void))
{
    int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (v < 0) {
        v = decide();
        __atomic_store_n(slot, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* t's view as a device's kernels take it (math/strided.h). */
static inline zlm_view zli_strided_view(const zl_tensor *t)
{
    zlm_view v = {.ndim = t->ndim, .offset = t->offset};
    for (int i = 0; i < t->ndim; i++) {
        v.shape[i] = t->shape[i];
        v.stride[i] = t->stride[i];
    }
    return v;
}

#endif
