/* Private: the graph node every differentiable op records, and the helpers ops
 * use to record themselves and fire use hooks. See backward.c for the walk. */
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

/* Attach a node to `out` when grad mode is on and an input requires grad;
 * *node is NULL otherwise. Non-zero only when out of memory. */
ZLI_HIDDEN zl_status zli_record(zl_tensor *out, const char *name, zli_backward_fn bw, int n,
                                zl_tensor *const *inputs, zl_node **node);
/* Keep t in slot (retained). alias: keep a history-free view instead, to save an
 * op's own output without a reference cycle. */
ZLI_HIDDEN zl_status zli_node_save(zl_node *n, int slot, zl_tensor *t, bool alias);
/* Drop the node's saved state and inputs (after backward); keeps the node. */
ZLI_HIDDEN void zli_node_clear(zl_node *n, zl_tensor **worklist);
ZLI_HIDDEN void zli_node_free(zl_node *n, zl_tensor **worklist);

/* Check the inputs and fire BEFORE_FORWARD use hooks. */
ZLI_HIDDEN zl_status zli_op_begin(const char *op, int n, zl_tensor *const *in);
/* Fire AFTER_FORWARD use hooks; returns out, or NULL (out released) if a hook fails
 * or out is NULL. */
ZLI_HIDDEN zl_tensor *zli_op_end(const char *op, int n, zl_tensor *const *in, zl_tensor *out);
ZLI_HIDDEN zl_status zli_fire_use(int n, zl_tensor *const *ts, zl_use_event ev, const char *op);
ZLI_HIDDEN zl_status zli_fire_grad_ready(zl_tensor *leaf);

#endif
