/* dropout: zero each element with probability p and scale the survivors by
 * 1/(1-p). The mask comes from the counter-based generator (one uniform draw per
 * element), so it depends on the seed and offset only, never on thread count
 * or device: every table draws the same counters (math/dropout.h) and the op
 * advances the generator once. It is kept as one byte per element for the
 * backward. */
#include <math.h>
#include "device_kernels.h"

/* saved[0]: the keep mask (u8, x's shape); f[0]: the scale. */
static zl_status dropout_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("dropout backward", 1, &g, &k, &index) < 0) return zli_last_code();
    zl_tensor *gx = zli_new_f32_like(g, g->ndim, g->shape);
    zl_status st = gx ? k->dropout_backward(index, zl_tensor_numel(g), zl_tensor_data(n->saved[0]), zl_tensor_data(g),
                                            (float)n->f[0], zl_tensor_data(gx))
                      : ZL_ENOMEM;
    if (st) {
        zl_tensor_release(gx);
        gx = NULL;
    }
    gin[0] = gx;
    return st;
}

/* keep [out] and y [out] in x's memory, from the generator's next n counters. */
static zl_status run_dropout(const zli_dev_kernels *k, int index, zl_tensor *x, double p, float scale,
                             zl_generator *g, zl_tensor *keep, zl_tensor *y)
{
    zl_tensor *xf = zli_f32c(x);
    if (!xf) return ZL_ENOMEM;
    int64_t n = zl_tensor_numel(x);
    uint64_t seed = zl_generator_get_seed(g), offset = zl_generator_get_offset(g);
    zl_status st = k->dropout(index, n, seed, offset, (float)p, scale, zl_tensor_data(xf), zl_tensor_data(keep),
                              zl_tensor_data(y));
    if (!st) zl_generator_set_offset(g, offset + (uint64_t)n);
    zl_tensor_release(xf);
    return st;
}

/* p == 1 is accepted and drops everything (output and gradient all zeros), as
 * in PyTorch. When !training or p == 0 the result is x itself, retained: no
 * copy, no graph node, no random numbers drawn. */
zl_tensor *zl_dropout(zl_tensor *x, double p, bool training, zl_generator *g)
{
    const char *op = "dropout";
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 1, &x)) return NULL;
    if (zli_op_device(op, 1, &x, &k, &index) < 0) return zli_op_end(op, 1, &x, NULL);
    if (zli_need_float(op, "input", x)) return zli_op_end(op, 1, &x, NULL);
    if (!(p >= 0.0 && p <= 1.0)) {
        zl_error(ZL_EINVAL, "%s: probability p must be in [0, 1], got %g", op, p);
        return zli_op_end(op, 1, &x, NULL);
    }
    if (!training || p == 0.0) return zli_op_end(op, 1, &x, zl_tensor_retain(x));
    float scale = p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    zl_tensor *keep = zli_new_like(x, ZL_DTYPE_U8, x->ndim, x->shape, ZL_MEM_ACTIVATIONS);
    zl_tensor *y = keep ? zli_new_f32_like(x, x->ndim, x->shape) : NULL;
    if (y && run_dropout(k, index, x, p, scale, g, keep, y)) {
        zl_tensor_release(y);
        y = NULL;
    }
    y = zli_cast_result(y, x->dtype);
    zl_node *node = NULL;
    if (y && zli_record(y, op, dropout_backward, 1, &x, &node)) { zl_tensor_release(y); y = NULL; }
    if (node) {
        node->f[0] = scale;
        if (zli_node_save(node, 0, keep, false)) { zl_tensor_release(y); y = NULL; }
    }
    zl_tensor_release(keep);
    return zli_op_end(op, 1, &x, y);
}
