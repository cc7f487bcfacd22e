/* Private: the graph node every differentiable op records, the autograd data a
 * tensor carries, and the helpers ops use to record themselves and fire use
 * hooks. See backward.c for the walk. */
#ifndef ZL_NODE_H
#define ZL_NODE_H

#include "../core/tensor_impl.h"

#define ZLI_MAX_SAVED 4

typedef struct zl_node zl_node;

/* gout: the gradient of the node's output, always contiguous f32 of the output's
 * shape. gin[i] [out]: a new reference with inputs[i]'s shape (any float dtype,
 * any layout), or NULL when inputs[i] does not require grad. */
typedef zl_status (*zli_backward_fn)(zl_node *n, zl_tensor *gout, zl_tensor **gin);

struct zl_node {
    const char *name;
    zli_backward_fn backward;
    int ninputs;
    zl_tensor **inputs;                 /* retained until the graph is freed */
    zl_tensor *saved[ZLI_MAX_SAVED];    /* retained extras (masks, outputs as aliases) */
    double f[4];                        /* op parameters */
    int64_t i[ZL_MAX_DIMS + 4];
    void *ctx;
    void (*ctx_free)(void *);
    int out_ndim;
    int64_t out_shape[ZL_MAX_DIMS];
    bool freed;                         /* saved state dropped by a backward */
};

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

/* A tensor's autograd data, hung on its ext slot (core/tensor_impl.h) the
 * first time it is needed, so core stays ignorant of it and a tensor nobody
 * differentiates costs one NULL pointer. Autograd is the slot's only user. */
typedef struct zli_grad_meta {
    bool requires_grad;
    bool grad_f32;           /* a leaf's gradient kept in f32 whatever its dtype (zl_tensor_set_grad_dtype) */
    zl_tensor *grad;
    zl_node *grad_fn;
    zli_hook *hooks;
    int hooks_firing;        /* > 0 while this tensor's hooks run (see hooks.c) */
    /* scratch of the backward in progress (see backward.c) */
    zl_tensor *bw_grad;
    int bw_pending;
    unsigned bw_epoch;
} zli_grad_meta;

/* t's autograd data, or NULL when it has none. */
static inline zli_grad_meta *zli_meta(const zl_tensor *t) { return t->ext; }
/* t's autograd data, attached when missing; NULL (ZL_ENOMEM) when out of memory. */
ZLI_HIDDEN zli_grad_meta *zli_meta_get(zl_tensor *t);
static inline bool zli_requires_grad(const zl_tensor *t) { return t->ext && zli_meta(t)->requires_grad; }
static inline zl_node *zli_grad_fn(const zl_tensor *t) { return t->ext ? zli_meta(t)->grad_fn : NULL; }
static inline zli_hook *zli_hooks(const zl_tensor *t) { return t->ext ? zli_meta(t)->hooks : NULL; }
/* Free a hook list, calling each hook's user_free. */
ZLI_HIDDEN void zli_hooks_free(zli_hook *h);

/* Attach a node to `out` when grad mode is on and an input requires grad;
 * *node is NULL otherwise. Non-zero only when out of memory. */
ZLI_HIDDEN zl_status zli_record(zl_tensor *out, const char *name, zli_backward_fn bw, int n,
                                zl_tensor *const *inputs, zl_node **node);
/* in's gradient pending in the backward under way, when an op's backward may
 * add into it in place instead of returning a new one (gin NULL): host
 * memory, held by nothing else; always contiguous f32. NULL otherwise. */
ZLI_HIDDEN zl_tensor *zli_pending_grad(zl_tensor *in);
/* Keep t in slot (retained). alias: keep a history-free view instead, to save an
 * op's own output without a reference cycle. */
ZLI_HIDDEN zl_status zli_node_save(zl_node *n, int slot, zl_tensor *t, bool alias);
/* Drop the node's saved state and inputs (after backward); keeps the node. */
ZLI_HIDDEN void zli_node_clear(zl_node *n, zl_tensor **worklist);
ZLI_HIDDEN void zli_node_free(zl_node *n, zl_tensor **worklist);

/* Check the inputs (none NULL or released) and fire BEFORE_FORWARD use hooks. */
ZLI_HIDDEN zl_status zli_op_begin(const char *op, int n, zl_tensor *const *in);
/* Fire AFTER_FORWARD use hooks; returns out, or NULL (out released) if a hook fails
 * or out is NULL. */
ZLI_HIDDEN zl_tensor *zli_op_end(const char *op, int n, zl_tensor *const *in, zl_tensor *out);
ZLI_HIDDEN zl_status zli_fire_use(int n, zl_tensor *const *ts, zl_use_event ev, const char *op);
ZLI_HIDDEN zl_status zli_fire_grad_ready(zl_tensor *leaf);
/* ZL_ESTATE when op must not write t in place: a leaf that requires grad, in grad mode. */
ZLI_HIDDEN zl_status zli_check_inplace(const char *op, const zl_tensor *t);

#endif
