/* Functions whose backward the caller supplies: a node recorded by hand on a
 * tensor computed without recording. Activation checkpointing is built on it:
 * its forward runs without a graph and its backward computes the forward
 * again, with one, and back-propagates through that. */
#include <stdlib.h>
#include <string.h>
#include "node.h"

typedef struct fn_ctx {
    zl_function_backward_fn bw;
    void *user;
    void (*user_free)(void *);
} fn_ctx;

static void ctx_free(void *p)
{
    fn_ctx *c = p;
    if (c->user_free) c->user_free(c->user);
    free(c);
}

static zl_status fn_backward(zl_node *n, zl_tensor *gout, zl_tensor **gin)
{
    fn_ctx *c = n->ctx;
    return c->bw(gout, n->ninputs, n->inputs, gin, c->user);
}

zl_status zl_function_record(zl_tensor *out, const char *name, int n, zl_tensor *const *inputs,
                             zl_function_backward_fn bw, void *user, void (*user_free)(void *))
{
    zl_status st = ZL_OK;
    if (!out || !bw || !name || n < 0 || (n > 0 && !inputs))
        st = zl_error(ZL_EINVAL, "zl_function_record: missing output, backward, name or inputs");
    else if (zli_grad_fn(out))
        st = zl_error(ZL_ESTATE, "%s: the output was made with a graph (by %s); compute it without recording",
                      name, zli_grad_fn(out)->name);
    else if (!zl_dtype_traits_of(out->dtype)->is_float)
        st = zl_error(ZL_EDTYPE, "%s: the output must be a float tensor, got %s", name, zl_dtype_name(out->dtype));
    for (int i = 0; !st && i < n; i++)
        if (!inputs[i]) st = zl_error(ZL_EINVAL, "%s: input %d is NULL", name, i + 1);
    if (st || !zl_grad_is_enabled()) {
        if (user_free) user_free(user);
        return st;
    }
    zli_grad_meta *m = zli_meta_get(out);
    zl_node *nd = m ? calloc(1, sizeof *nd) : NULL;
    zl_tensor **in = nd ? calloc((size_t)(n > 0 ? n : 1), sizeof *in) : NULL;
    fn_ctx *c = in ? malloc(sizeof *c) : NULL;
    if (!c) {
        free(nd);
        free(in);
        if (user_free) user_free(user);
        return zl_error(ZL_ENOMEM, "%s: out of memory recording the graph", name);
    }
    *c = (fn_ctx){.bw = bw, .user = user, .user_free = user_free};
    *nd = (zl_node){.name = name, .backward = fn_backward, .ninputs = n, .inputs = in, .ctx = c,
                    .ctx_free = ctx_free, .out_ndim = out->ndim};
    memcpy(nd->out_shape, out->shape, sizeof out->shape);
    for (int i = 0; i < n; i++) in[i] = zl_tensor_retain(inputs[i]);
    m->grad_fn = nd;
    m->requires_grad = true;
    return ZL_OK;
}

zl_status zl_tensor_move_data(zl_tensor *t, zl_tensor *src)
{
    if (zli_check_arg("move_data", "tensor", t) || zli_check_arg("move_data", "source", src)) return zli_last_code();
    if (t->dtype != src->dtype || t->ndim != src->ndim ||
        memcmp(t->shape, src->shape, (size_t)t->ndim * sizeof t->shape[0]) != 0) {
        char a[128], b[128];
        return zl_error(ZL_ESHAPE, "move_data: the copy (%s %s) must have the tensor's dtype and shape (%s %s)",
                        zl_dtype_name(src->dtype), zl_shape_str(src->ndim, src->shape, a, sizeof a),
                        zl_dtype_name(t->dtype), zl_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    zli_share_storage(t, src);
    return ZL_OK;
}
