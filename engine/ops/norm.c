/* layer_norm over the last nnorm dims, with optional weight and bias, and its
 * fused backward (gx, gweight, gbias over the saved mean and rstd), through
 * the kernel table of x's memory. */
#include <math.h>
#include <string.h>
#include "device_kernels.h"

/* inputs: x, then weight if i[1], then bias if i[2]; saved[0]: mean [rows]
 * then rstd [rows], in x's memory. */
static zl_status ln_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    zl_tensor *w = n->i[1] ? n->inputs[1] : NULL, *b = n->i[2] ? n->inputs[n->ninputs - 1] : NULL;
    int64_t rows = n->i[3], m = n->i[4];
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    if (zli_op_device("layer_norm backward", 1, &x, &kern, &index) < 0) return zli_last_code();
    const float *mean = zl_tensor_data(n->saved[0]), *rstd = mean + rows;
    bool halves = kern->halves;
    zl_tensor *xf = zli_kernel_input(x, halves), *wf = w ? zli_kernel_input(w, halves) : NULL;
    zl_tensor *gc = zli_kernel_input(g, halves);
    zl_status st = xf && gc && (!w || wf) ? ZL_OK : ZL_ENOMEM;
    zl_tensor *gx = NULL, *gw = NULL, *gb = NULL;
    if (!st && zli_requires_grad(x)) {
        if (!(gx = zli_new_f32_like(x, x->ndim, x->shape))) st = ZL_ENOMEM;
        else
            st = kern->ln_backward_x(index, rows, m, zl_tensor_data(xf), (int)xf->dtype, wf ? zl_tensor_data(wf) : NULL,
                                     wf ? (int)wf->dtype : ZL_DTYPE_F32, mean, rstd, zl_tensor_data(gc),
                                     (int)gc->dtype, zl_tensor_data(gx));
    }
    if (!st && w && zli_requires_grad(w) && !(gw = zli_new_f32_like(x, w->ndim, w->shape))) st = ZL_ENOMEM;
    if (!st && b && zli_requires_grad(b) && !(gb = zli_new_f32_like(x, b->ndim, b->shape))) st = ZL_ENOMEM;
    if (gw) zl_tensor_set_category(gw, ZL_MEM_GRADS);
    if (gb) zl_tensor_set_category(gb, ZL_MEM_GRADS);
    if (!st && (gw || gb))
        st = kern->ln_backward_wb(index, rows, m, zl_tensor_data(xf), (int)xf->dtype, mean, rstd, zl_tensor_data(gc),
                                  (int)gc->dtype, gw ? zl_tensor_data(gw) : NULL, gb ? zl_tensor_data(gb) : NULL);
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(gc);
    int k = 0;
    gin[k++] = gx;
    if (w) gin[k++] = gw;
    if (b) gin[k++] = gb;
    return st;
}

/* Output in x's dtype, as activations are; weight and bias may be any float dtype. */
zl_tensor *zl_layer_norm(zl_tensor *x, int nnorm, zl_tensor *weight, zl_tensor *bias, double eps)
{
    const char *op = "layer_norm";
    zl_tensor *in[3] = {x, NULL, NULL};
    int nin = 1;
    if (weight) in[nin++] = weight;
    if (bias) in[nin++] = bias;
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, nin, in)) return NULL;
    if (zli_op_device(op, nin, in, &k, &index) < 0) return zli_op_end(op, nin, in, NULL);
    /* A one-element weight or bias from the host would reach a device's
     * kernels as a host pointer: it must be where x is. */
    if ((weight && zli_same_device(op, x, weight)) || (bias && zli_same_device(op, x, bias)))
        return zli_op_end(op, nin, in, NULL);
    if (zli_need_float(op, "input", x) || (weight && zli_need_float(op, "weight", weight)) ||
        (bias && zli_need_float(op, "bias", bias)))
        return zli_op_end(op, nin, in, NULL);
    int64_t rows, m;
    if (zli_norm_dims(op, x, nnorm, 2, (const zl_tensor *[]){weight, bias}, (const char *[]){"weight", "bias"},
                      &rows, &m))
        return zli_op_end(op, nin, in, NULL);
    if (!(eps >= 0)) {
        zl_error(ZL_EINVAL, "%s: eps must be >= 0, got %g", op, eps);
        return zli_op_end(op, nin, in, NULL);
    }
    /* mean and rstd, kept for backward in x's memory. */
    int64_t nstats = rows ? 2 * rows : 1;
    zl_tensor *dstats = zli_new_f32_like(x, 1, &nstats);
    if (!dstats) return zli_op_end(op, nin, in, NULL);
    float *stats = zl_tensor_data(dstats);
    zl_tensor *xf = zli_kernel_input(x, k->halves), *wf = weight ? zli_kernel_input(weight, k->halves) : NULL;
    zl_tensor *bf = bias ? zli_kernel_input(bias, k->halves) : NULL;
    zl_tensor *y = xf && (!weight || wf) && (!bias || bf)
                       ? zli_kernel_output(x, k->halves, x->dtype, x->ndim, x->shape) : NULL;
    if (y && m > 0 &&
        k->ln_forward(index, rows, m, zl_tensor_data(xf), (int)xf->dtype, wf ? zl_tensor_data(wf) : NULL,
                      wf ? (int)wf->dtype : ZL_DTYPE_F32, bf ? zl_tensor_data(bf) : NULL,
                      bf ? (int)bf->dtype : ZL_DTYPE_F32, eps, zl_tensor_data(y), (int)y->dtype, stats,
                      stats + rows)) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(bf);
    y = y && y->dtype != x->dtype ? zli_cast_result(y, x->dtype) : y;
    zl_node *n = NULL;
    if (y && zli_record(y, op, ln_backward, nin, in, &n)) { zl_tensor_release(y); y = NULL; }
    if (n) {
        n->i[0] = nnorm;
        n->i[1] = weight != NULL;
        n->i[2] = bias != NULL;
        n->i[3] = rows;
        n->i[4] = m;
        if (zli_node_save(n, 0, dstats, false)) {
            zl_tensor_release(y);
            y = NULL;
        }
    }
    zl_tensor_release(dstats);
    return zli_op_end(op, nin, in, y);
}
