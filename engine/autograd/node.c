/* Recording ops into the graph, and node teardown. */
#include <stdlib.h>
#include <string.h>
#include "node.h"

/* Per thread, as PyTorch's: a mode set and restored around a block, so
 * contexts used alternately on one thread between calls never see another's. */
static _Thread_local bool grad_disabled;

bool zl_grad_set_enabled(bool on)
{
    bool prev = !grad_disabled;
    grad_disabled = !on;
    return prev;
}

bool zl_grad_is_enabled(void) { return !grad_disabled; }

zl_status zli_record(zl_tensor *out, const char *name, zli_backward_fn bw, int n,
                     zl_tensor *const *inputs, zl_node **node)
{
    *node = NULL;
    if (grad_disabled) return ZL_OK;
    bool need = false;
    for (int i = 0; i < n; i++) need |= inputs[i] && zli_requires_grad(inputs[i]);
    if (!need) return ZL_OK;
    zli_grad_meta *m = zli_meta_get(out);
    if (!m) return ZL_ENOMEM;
    zl_node *nd = calloc(1, sizeof *nd);
    zl_tensor **in = calloc((size_t)n, sizeof *in);
    if (!nd || !in) { free(nd); free(in); return zl_error(ZL_ENOMEM, "%s: out of memory recording the graph", name); }
    nd->name = name;
    nd->backward = bw;
    nd->ninputs = n;
    nd->inputs = in;
    for (int i = 0; i < n; i++) in[i] = zl_tensor_retain(inputs[i]);
    nd->out_ndim = out->ndim;
    memcpy(nd->out_shape, out->shape, sizeof out->shape);
    m->grad_fn = nd;
    m->requires_grad = true;
    *node = nd;
    return ZL_OK;
}

zl_status zli_node_save(zl_node *n, int slot, zl_tensor *t, bool alias)
{
    if (alias) {
        t = zli_view_of(t, t->ndim, t->shape, t->stride, t->offset);
        if (!t) return ZL_ENOMEM;
    } else {
        zl_tensor_retain(t);
    }
    zl_tensor_release(n->saved[slot]);
    n->saved[slot] = t;
    return ZL_OK;
}

void zli_node_clear(zl_node *n, zl_tensor **worklist)
{
    for (int i = 0; i < ZLI_MAX_SAVED; i++) {
        zli_release_deferred(n->saved[i], worklist);
        n->saved[i] = NULL;
    }
    for (int i = 0; i < n->ninputs; i++) zli_release_deferred(n->inputs[i], worklist);
    free(n->inputs);
    n->inputs = NULL;
    n->ninputs = 0;
    if (n->ctx_free) n->ctx_free(n->ctx);
    n->ctx = NULL;
    n->ctx_free = NULL;
    n->freed = true;
}

void zli_node_free(zl_node *n, zl_tensor **worklist)
{
    zli_node_clear(n, worklist);
    free(n);
}

/* Every op takes tensors on any device: one with device kernels finds its
 * inputs' device itself (ops/device_kernels.h), the others are made of core's
 * primitives, which run through the storage's device table. */
zl_status zli_op_begin(const char *op, int n, zl_tensor *const *in)
{
    for (int i = 0; i < n; i++) {
        if (!in[i]) return zl_error(ZL_EINVAL, "%s: argument %d is NULL", op, i + 1);
        if (in[i]->refcount <= 0) return zl_error(ZL_ESTATE, "%s: argument %d was released", op, i + 1);
    }
    return zli_fire_use(n, in, ZL_USE_BEFORE_FORWARD, op);
}

zl_tensor *zli_op_end(const char *op, int n, zl_tensor *const *in, zl_tensor *out)
{
    if (!out) {
        /* Keep the kernel's error message: the after-hooks still fire so a
         * gathered parameter is released, but they must not overwrite it. */
        char msg[1024];
        zl_status code = zli_last_code();
        strncpy(msg, zl_last_error(), sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        zli_fire_use(n, in, ZL_USE_AFTER_FORWARD, op);
        zl_error(code ? code : ZL_EINVAL, "%s", msg);
        return NULL;
    }
    if (zli_fire_use(n, in, ZL_USE_AFTER_FORWARD, op)) {
        zl_tensor_release(out);
        return NULL;
    }
    return out;
}
