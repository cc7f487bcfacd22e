/* zlua/autograd.h — define-by-run autograd: requires_grad, .grad, backward,
 * no-grad mode, and the two hooks ZeRO is built on: gradient-ready per leaf and
 * use hooks per parameter (before/after an op reads it, forward and backward). */
#ifndef ZLUA_AUTOGRAD_H
#define ZLUA_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

ZL_API zl_status zl_tensor_set_requires_grad(zl_tensor *t, bool on);
ZL_API bool zl_tensor_requires_grad(const zl_tensor *t);
/* True when t has no recorded history (created by the user, not by an op). */
ZL_API bool zl_tensor_is_leaf(const zl_tensor *t);
/* The dtype a leaf's gradient is kept in: its own (the default) or f32, so
 * that a bf16/f16 parameter's gradient reaches its hooks unrounded (ZeRO
 * reduces it in f32 and rounds once, after the sum over ranks). */
ZL_API zl_status zl_tensor_set_grad_dtype(zl_tensor *t, zl_dtype dt);
/* The accumulated gradient of a leaf: a borrowed reference, or NULL. */
ZL_API zl_tensor *zl_tensor_grad(const zl_tensor *t);
/* Replace the gradient (retains g; NULL clears it). Shape must match. */
ZL_API zl_status zl_tensor_set_grad(zl_tensor *t, zl_tensor *g);
/* Name of the op that produced t ("mul", "matmul"), or NULL for a leaf. */
ZL_API const char *zl_tensor_grad_fn_name(const zl_tensor *t);

/* Back-propagate from `root`. `grad` seeds it (NULL: root must have one element,
 * seeded with 1). The graph's saved tensors are freed afterwards unless
 * retain_graph; a second backward through a freed graph is ZL_ESTATE. */
ZL_API zl_status zl_backward(zl_tensor *root, zl_tensor *grad, bool retain_graph);

/* Grad mode (thread-local, on by default). Returns the previous value. */
ZL_API bool zl_grad_set_enabled(bool on);
ZL_API bool zl_grad_is_enabled(void);

/* ---- hooks ----
 * `user_free` (may be NULL) is called with `user` when the hook is removed or
 * the tensor is freed. A hook returning non-zero aborts the op or the backward
 * with ZL_EHOOK (its zl_error message kept). Hooks fire in registration order. */

/* Fires once per backward, when `leaf`'s gradient for it is complete
 * (zl_tensor_grad(leaf) holds the accumulated value). */
typedef zl_status (*zl_grad_ready_fn)(zl_tensor *leaf, void *user);
/* Returns a handle (> 0) for removal, or 0 with an error. */
ZL_API int zl_tensor_add_grad_ready_hook(zl_tensor *leaf, zl_grad_ready_fn fn, void *user,
                                         void (*user_free)(void *));

typedef enum zl_use_event {
    ZL_USE_BEFORE_FORWARD = 0,   /* an op is about to read t in forward */
    ZL_USE_AFTER_FORWARD = 1,    /* that op has finished */
    ZL_USE_BEFORE_BACKWARD = 2,  /* a backward function is about to read t */
    ZL_USE_AFTER_BACKWARD = 3,
} zl_use_event;
/* The pre-use hook: fires before an op reads t (and after, with the AFTER events,
 * so that a gathered parameter can be released). */
typedef zl_status (*zl_use_fn)(zl_tensor *t, zl_use_event ev, const char *op, void *user);
ZL_API int zl_tensor_add_use_hook(zl_tensor *t, zl_use_fn fn, void *user, void (*user_free)(void *));

/* ---- functions with a backward of the caller's ----
 * `out`, computed with grad mode off (no graph), gets a node over `inputs`
 * (retained until the graph is freed) whose backward is bw: gout is the
 * gradient of out (contiguous f32); gin[i] [out] a new reference of
 * inputs[i]'s shape, or NULL (no gradient for it). Unlike an op's node it
 * is recorded whenever grad mode is on, even when no input requires grad:
 * bw may reach leaves of its own (activation checkpointing's recompute
 * back-propagates into the parameters it reads). out then requires grad.
 * `name` must outlive the graph (a literal). `user_free` (may be NULL)
 * gets `user` when the node is freed, or at once when nothing is recorded. */
typedef zl_status (*zl_function_backward_fn)(zl_tensor *gout, int n, zl_tensor *const *inputs, zl_tensor **gin,
                                             void *user);
ZL_API zl_status zl_function_record(zl_tensor *out, const char *name, int n, zl_tensor *const *inputs,
                                    zl_function_backward_fn bw, void *user, void (*user_free)(void *));

/* t takes src's storage in place of its own: src must be a copy of t's
 * values (same dtype and shape) kept elsewhere, in host memory or charged to
 * another category. Unlike zl_tensor_set_data it works on a tensor an op
 * produced, since what t holds does not change: activation checkpointing
 * moves a saved input off the working memory with it. */
ZL_API zl_status zl_tensor_move_data(zl_tensor *t, zl_tensor *src);

/* Remove a hook by handle from whichever list holds it; unknown handles are ignored. */
ZL_API void zl_tensor_remove_hook(zl_tensor *t, int handle);

#ifdef __cplusplus
}
#endif
#endif
