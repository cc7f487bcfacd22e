/* softmax and log_softmax over any dimension, with their fused backward, through
 * the kernel table of x's memory (the CPU's kernels: ops/cpu/softmax.c). */
#include <math.h>
#include "device_kernels.h"

static zl_status softmax_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    zl_tensor *in[2] = {n->saved[0], g};
    if (zli_op_device("softmax backward", 2, in, &k, &index) < 0) return zli_last_code();
    zl_tensor *y = zli_kernel_input(n->saved[0], k->halves), *gc = y ? zli_kernel_input(g, k->halves) : NULL;
    zl_tensor *gx = gc ? zli_new_f32_like(g, g->ndim, g->shape) : NULL;
    zl_status st = gx ? ZL_OK : ZL_ENOMEM;
    if (gx)
        st = k->softmax_backward(index, n->i[0] != 0, n->i[1], n->i[2], n->i[3], zl_tensor_data(y), (int)y->dtype,
                                 zl_tensor_data(gc), (int)gc->dtype, zl_tensor_data(gx));
    zl_tensor_release(y);
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    return ZL_OK;
}

/* A 0-d x is treated as one row of one element (dim 0 or -1), as PyTorch does. */
static zl_tensor *softmax_impl(bool is_log, zl_tensor *x, int dim)
{
    const char *op = is_log ? "log_softmax" : "softmax";
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 1, &x)) return NULL;
    if (zli_op_device(op, 1, &x, &k, &index) < 0) return zli_op_end(op, 1, &x, NULL);
    int d = 0;
    bool scalar = x->ndim == 0 && (dim == 0 || dim == -1);
    if (zli_need_float(op, "input", x) || (!scalar && zli_norm_dim(op, dim, x->ndim, &d)))
        return zli_op_end(op, 1, &x, NULL);
    int64_t outer = 1, len = x->ndim ? x->shape[d] : 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
    zl_tensor *xf = zli_kernel_input(x, k->halves);
    zl_tensor *y = xf ? zli_kernel_output(x, k->halves, x->dtype, x->ndim, x->shape) : NULL;
    if (y && outer * len * inner > 0 &&
        k->softmax(index, is_log, outer, len, inner, zl_tensor_data(xf), (int)xf->dtype, zl_tensor_data(y),
                   (int)y->dtype)) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(xf);
    y = y && y->dtype != x->dtype ? zli_cast_result(y, x->dtype) : y;
    zl_node *n = NULL;
    if (y && zli_record(y, op, softmax_backward, 1, &x, &n)) { zl_tensor_release(y); y = NULL; }
    else if (y && n) {
        n->i[0] = is_log;
        n->i[1] = outer; n->i[2] = len; n->i[3] = inner;
        if (zli_node_save(n, 0, y, true)) { zl_tensor_release(y); y = NULL; }
    }
    return zli_op_end(op, 1, &x, y);
}

zl_tensor *zl_softmax(zl_tensor *x, int dim) { return softmax_impl(false, x, dim); }
zl_tensor *zl_log_softmax(zl_tensor *x, int dim) { return softmax_impl(true, x, dim); }
