/* linear: y = x · wᵀ + b, one op (not a matmul of a transposed view) so that
 * the weight's use hooks fire around the GEMMs that actually read it, in
 * forward and in backward. x [..., in], w [out, in], b [out] or NULL. */
#include <string.h>
#include "gemm.h"

static zl_status linear_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    int64_t in = w->shape[1], outf = w->shape[0], rows = zl_tensor_numel(x) / (in ? in : 1);
    const float *pg = zl_tensor_data(g);
    zl_tensor *xf = zli_f32c(x), *wf = zli_f32c(w);
    zl_status st = xf && wf ? ZL_OK : ZL_ENOMEM;
    if (!st && x->requires_grad) {
        gin[0] = zli_new_f32(x->ndim, x->shape);   /* gx[rows, in] = g[rows, out] · w[out, in] */
        if (gin[0]) zli_sgemm(false, false, rows, in, outf, 1.0f, pg, outf, zl_tensor_data(wf), in, 0.0f,
                              zl_tensor_data(gin[0]), in);
        else st = ZL_ENOMEM;
    }
    if (!st && w->requires_grad) {
        gin[1] = zl_tensor_new(ZL_DTYPE_F32, 2, w->shape, ZL_MEM_GRADS);   /* gw = gᵀ · x */
        if (gin[1]) zli_sgemm(true, false, outf, in, rows, 1.0f, pg, outf, zl_tensor_data(xf), in, 0.0f,
                              zl_tensor_data(gin[1]), in);
        else st = ZL_ENOMEM;
    }
    if (!st && b && b->requires_grad) {
        gin[2] = zl_tensor_new(ZL_DTYPE_F32, 1, b->shape, ZL_MEM_GRADS);
        if (gin[2]) {
            float *pb = zl_tensor_data(gin[2]);
            memset(pb, 0, (size_t)outf * sizeof *pb);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < outf; j++) pb[j] += pg[r * outf + j];
        } else {
            st = ZL_ENOMEM;
        }
    }
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    return st;
}

zl_tensor *zl_linear(zl_tensor *x, zl_tensor *w, zl_tensor *b)
{
    zl_tensor *in[3] = {x, w, b};
    int nin = b ? 3 : 2;
    if (zli_op_begin("linear", nin, in)) return NULL;
    if (zli_need_float("linear", "input", x) || zli_need_float("linear", "weight", w) ||
        (b && zli_need_float("linear", "bias", b)))
        return zli_op_end("linear", nin, in, NULL);
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
        zli_shape_error("linear", "input's last dimension must equal weight's second (weight is [out, in])", x, w);
        return zli_op_end("linear", nin, in, NULL);
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        zli_shape_error("linear", "bias must be [out]", b, w);
        return zli_op_end("linear", nin, in, NULL);
    }
    int64_t inf = w->shape[1], outf = w->shape[0], rows = zl_tensor_numel(x) / (inf ? inf : 1);
    int64_t shape[ZL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = outf;
    zl_tensor *xf = zli_f32c(x), *wf = zli_f32c(w), *bf = b ? zli_f32c(b) : NULL;
    zl_tensor *y = xf && wf && (!b || bf) ? zli_new_f32(x->ndim, shape) : NULL;
    if (y) {
        float *py = zl_tensor_data(y);
        if (bf) {
            const float *pb = zl_tensor_data(bf);
            for (int64_t r = 0; r < rows; r++) memcpy(py + r * outf, pb, (size_t)outf * sizeof *pb);
        }
        zli_sgemm(false, true, rows, outf, inf, 1.0f, zl_tensor_data(xf), inf, zl_tensor_data(wf), inf,
                  bf ? 1.0f : 0.0f, py, outf);
    }
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(bf);
    y = zli_cast_result(y, zli_promote(x->dtype, w->dtype));
    zl_node *n;
    if (y && zli_record(y, "linear", linear_backward, nin, in, &n)) { zl_tensor_release(y); y = NULL; }
    return zli_op_end("linear", nin, in, y);
}
