/* Private layout of zl_tensor and its storage, shared by core/, autograd/ and ops/.
 * Never installed: hosts see only the opaque type. */
#ifndef ZL_TENSOR_IMPL_H
#define ZL_TENSOR_IMPL_H

#include "zlua/zlua.h"

#define ZLI_HIDDEN __attribute__((visibility("hidden")))

typedef struct zl_storage {
    int refcount;          /* not atomic: tensors are owned by one thread at a time */
    void *data;
    size_t nbytes;
    zl_mem_category cat;
    bool sys_aligned;      /* from zli_mem_alloc with an alignment (memory_impl.h) */
    zl_context *ctx;       /* charged to, and given back to, this context */
} zl_storage;

enum { ZLI_HOOK_GRAD_READY = 0, ZLI_HOOK_USE = 1 };

typedef struct zli_hook {
    int handle;
    int kind;
    zl_grad_ready_fn grad_ready;
    zl_use_fn use;
    void *user;
    void (*user_free)(void *);
    bool removed;            /* removed while hooks were firing: freed after */
    struct zli_hook *next;
} zli_hook;

struct zl_node;

struct zl_tensor {
    int refcount;
    zl_dtype dtype;
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    int64_t stride[ZL_MAX_DIMS];
    int64_t offset;
    zl_storage *storage;
    /* autograd */
    bool requires_grad;
    bool grad_f32;          /* a leaf's gradient kept in f32 whatever its dtype (zl_tensor_set_grad_dtype) */
    zl_tensor *grad;
    struct zl_node *grad_fn;
    zli_hook *hooks;
    int hooks_firing;        /* > 0 while this tensor's hooks run (see hooks.c) */
    /* scratch of the backward in progress (see autograd/backward.c) */
    zl_tensor *bw_grad;
    int bw_pending;
    unsigned bw_epoch;
    /* link in the release worklist, so freeing a long graph never recurses */
    zl_tensor *free_next;
};

/* zl_tensor_new, but the storage starts on an `align` boundary and is a whole
 * number of `align` blocks long (the tail past the elements zeroed). */
ZLI_HIDDEN zl_tensor *zli_tensor_new_aligned(zl_dtype dt, int ndim, const int64_t *shape,
                                            zl_mem_category cat, size_t align);

/* Drop one reference; when it reaches zero, link t into *worklist instead of
 * freeing it (used by node teardown). */
ZLI_HIDDEN void zli_release_deferred(zl_tensor *t, zl_tensor **worklist);

/* The status code of the last zl_error on this thread. */
ZLI_HIDDEN zl_status zli_last_code(void);
/* Normalise a possibly negative dim against ndim (for insertion, pass ndim+1).
 * Returns ZL_EINVAL with a message naming the op when out of range. */
ZLI_HIDDEN zl_status zli_norm_dim(const char *op, int dim, int ndim, int *out);
/* The same for the position of a new dimension inserted into an ndim-d tensor
 * (0..ndim, or -ndim-1..-1). */
ZLI_HIDDEN zl_status zli_norm_dim_insert(const char *op, int dim, int ndim, int *out);
/* A new tensor header over t's storage (retained) with the given view, no autograd. */
ZLI_HIDDEN zl_tensor *zli_view_of(const zl_tensor *t, int ndim, const int64_t *shape,
                                  const int64_t *stride, int64_t offset);
/* Contiguous row-major strides for shape. */
ZLI_HIDDEN void zli_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
ZLI_HIDDEN int64_t zli_numel(int ndim, const int64_t *shape);
/* Contiguous f32 version of t: t retained when it already is one, else a copy
 * (no autograd). Used by kernels that compute in f32. */
ZLI_HIDDEN zl_tensor *zli_f32c(const zl_tensor *t);
/* Contiguous copy of t in dtype dt, charged to cat (no autograd). */
ZLI_HIDDEN zl_tensor *zli_copy_as(const zl_tensor *t, zl_dtype dt, zl_mem_category cat);
/* Offset (in elements, from the view's first element) of logical index `linear`. */
ZLI_HIDDEN int64_t zli_linear_offset(const zl_tensor *t, int64_t linear);
/* Check a non-NULL tensor argument; sets an error naming op and role. */
ZLI_HIDDEN zl_status zli_check_arg(const char *op, const char *role, const zl_tensor *t);
/* Sum g ([gshape]) down to `shape` (the reverse of broadcasting), f32 contiguous. */
ZLI_HIDDEN zl_tensor *zli_sum_to_shape(zl_tensor *g, int ndim, const int64_t *shape);

#endif
