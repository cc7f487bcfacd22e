/* rms_norm over the last nnorm dims, as Hugging Face's LlamaRMSNorm computes
 * it (math/rms_norm.h), with its fused backward (gx and the weight's gradient
 * in one pass over x and g), through the kernel table of x's memory. */
#include <math.h>
#include <string.h>
#include "device_kernels.h"
#include "../math/rms_norm.h"

/* inputs: x, then weight if i[0]; rstd [rows] saved; i[1] rows, i[2] m. */
static zl_status rms_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *w = n->i[0] ? n->inputs[1] : NULL;
    int64_t rows = n->i[1], m = n->i[2];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("rms_norm backward", 1, &x, &k, &index) < 0) return zli_last_code();
    bool want_x = zli_requires_grad(x), want_w = w && zli_requires_grad(w);
    zl_tensor *xf = zli_kernel_input(x, k->halves), *wf = w ? zli_kernel_input(w, k->halves) : NULL;
    zl_tensor *gc = zli_kernel_input(g, k->halves), *part = NULL, *gx = NULL, *gw = NULL;
    zl_status st = xf && gc && (!w || wf) ? ZL_OK : ZL_ENOMEM;
    int64_t nparts = (rows + ZLM_RMS_CHUNK_ROWS - 1) / ZLM_RMS_CHUNK_ROWS * m;
    if (nparts < 1) nparts = 1;
    if (!st && want_x && !(gx = zli_new_f32_like(x, x->ndim, x->shape))) st = ZL_ENOMEM;
    if (!st && want_w && !(gw = zli_new_f32_like(x, w->ndim, w->shape))) st = ZL_ENOMEM;
    /* The partial sums are doubles: the 8-byte slots of an i64 scratch. */
    if (!st && want_w && !(part = zli_new_like(x, ZL_DTYPE_I64, 1, &nparts, ZL_MEM_ACTIVATIONS))) st = ZL_ENOMEM;
    if (gw) zl_tensor_set_category(gw, ZL_MEM_GRADS);
    if (!st && m > 0 && rows > 0)
        st = k->rms_backward(index, rows, m, zl_tensor_data(xf), (int)xf->dtype, wf ? zl_tensor_data(wf) : NULL,
                             wf ? (int)wf->dtype : ZL_DTYPE_F32, (int)zli_kernel_dtype(x->dtype),
                             zl_tensor_data(n->saved[0]), zl_tensor_data(gc), (int)gc->dtype,
                             gx ? zl_tensor_data(gx) : NULL, gw ? zl_tensor_data(gw) : NULL,
                             part ? zl_tensor_data(part) : NULL);
    else if (!st && gw)
        st = zl_tensor_fill(gw, 0.0);
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(gc);
    zl_tensor_release(part);
    gin[0] = gx;
    if (w) gin[1] = gw;
    return st;
}

/* The result's dtype is torch's promotion of x's and the weight's, as HF's
 * `weight * hidden.to(input_dtype)` gives. */
zl_tensor *zl_rms_norm(zl_tensor *x, int nnorm, zl_tensor *weight, double eps)
{
    const char *op = "rms_norm";
    zl_tensor *in[2] = {x, weight};
    int nin = weight ? 2 : 1;
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, nin, in)) return NULL;
    if (zli_op_device(op, nin, in, &k, &index) < 0) return zli_op_end(op, nin, in, NULL);
    /* A one-element weight from the host would reach a device's kernels as a
     * host pointer: it must be where x is. */
    if (weight && zli_same_device(op, x, weight)) return zli_op_end(op, nin, in, NULL);
    if (zli_need_float(op, "input", x) || (weight && zli_need_float(op, "weight", weight)))
        return zli_op_end(op, nin, in, NULL);
    int64_t rows, m;
    if (zli_norm_dims(op, x, nnorm, 1, (const zl_tensor *[]){weight}, (const char *[]){"weight"}, &rows, &m))
        return zli_op_end(op, nin, in, NULL);
    if (!(eps >= 0) || isinf(eps)) {
        zl_error(ZL_EINVAL, "%s: eps must be finite and >= 0, got %g", op, eps);
        return zli_op_end(op, nin, in, NULL);
    }
    zl_dtype ydt = weight ? zli_promote(x->dtype, weight->dtype) : x->dtype;
    int64_t nstats = rows > 0 ? rows : 1;
    zl_tensor *rstd = zli_new_f32_like(x, 1, &nstats);
    zl_tensor *xf = rstd ? zli_kernel_input(x, k->halves) : NULL;
    zl_tensor *wf = xf && weight ? zli_kernel_input(weight, k->halves) : NULL;
    zl_tensor *y = xf && (!weight || wf) ? zli_kernel_output(x, k->halves, ydt, x->ndim, x->shape) : NULL;
    if (y && m > 0 && rows > 0 &&
        k->rms_forward(index, rows, m, zl_tensor_data(xf), (int)xf->dtype, wf ? zl_tensor_data(wf) : NULL,
                       wf ? (int)wf->dtype : ZL_DTYPE_F32, (int)zli_kernel_dtype(x->dtype), eps, zl_tensor_data(y),
                       (int)y->dtype, zl_tensor_data(rstd))) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    y = y && y->dtype != ydt ? zli_cast_result(y, ydt) : y;
    zl_node *n = NULL;
    if (y && zli_record(y, op, rms_backward, nin, in, &n)) { zl_tensor_release(y); y = NULL; }
    if (n) {
        n->i[0] = weight != NULL;
        n->i[1] = rows;
        n->i[2] = m;
        if (zli_node_save(n, 0, rstd, false)) {
            zl_tensor_release(y);
            y = NULL;
        }
    }
    zl_tensor_release(rstd);
    return zli_op_end(op, nin, in, y);
}
