/* rms_norm over the last nnorm dims, as Hugging Face's LlamaRMSNorm computes
 * it (math/rms_norm.h), with its fused backward (gx and the weight's gradient
 * in one pass over x and g), through the kernel table of x's memory; the
 * CPU's kernels are here. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "../../math/rms_norm.h"

/* x, y [rows, m] contiguous f32; w [m] or NULL; rstd [rows] [out]. */
zl_status zli_cpu_rms_forward(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                              int rdt, double eps, void *yv, int ydt, float *rstd)
{
    (void)index, (void)xdt, (void)wdt, (void)ydt;
    const float *restrict x = xv, *restrict w = wv;
    float *restrict y = yv;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * m;
        float *yr = y + r * m;
        float rs = zlm_rms_rstd(zlm_rms_row_sum(m, xr, ZLM_F32, NULL, ZLM_F32, NULL, ZLM_F32), m, eps);
        rstd[r] = rs;
        if (w)
            for (int64_t j = 0; j < m; j++) yr[j] = zlm_rms_out(xr[j], rs, rdt, true, w[j]);
        else
            for (int64_t j = 0; j < m; j++) yr[j] = zlm_rms_out(xr[j], rs, rdt, false, 0.0f);
    }
    return ZL_OK;
}

/* One pass over x and g [rows, m] a chunk of rows at a time: gx (NULL: not
 * wanted) row by row, and the chunk's partial sums of the weight's gradient
 * (gw NULL: none), which are then added in chunk order, columns split
 * across threads, so the bits do not depend on the thread count. */
zl_status zli_cpu_rms_backward(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                               int rdt, const float *rstd, const void *gv, int gdt, float *gx, float *gw,
                               double *part)
{
    (void)index, (void)xdt, (void)wdt, (void)gdt;
    const float *restrict x = xv, *restrict w = wv, *restrict g = gv;
    int64_t nchunks = (rows + ZLM_RMS_CHUNK_ROWS - 1) / ZLM_RMS_CHUNK_ROWS;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t r1 = (c + 1) * ZLM_RMS_CHUNK_ROWS < rows ? (c + 1) * ZLM_RMS_CHUNK_ROWS : rows;
        double *pc = gw ? part + c * m : NULL;
        if (pc) memset(pc, 0, (size_t)m * sizeof *pc);
        for (int64_t r = c * ZLM_RMS_CHUNK_ROWS; r < r1; r++) {
            const float *xr = x + r * m, *gr = g + r * m;
            float rs = rstd[r];
            if (gx) {
                float k = zlm_rms_k(zlm_rms_row_sum(m, xr, ZLM_F32, gr, ZLM_F32, w, ZLM_F32), m, rs);
                float *out = gx + r * m;
                if (w)
                    for (int64_t j = 0; j < m; j++) out[j] = zlm_rms_grad_x(xr[j], zlm_rms_gn(gr[j], true, w[j]), rs, k);
                else
                    for (int64_t j = 0; j < m; j++) out[j] = zlm_rms_grad_x(xr[j], gr[j], rs, k);
            }
            if (pc)
                for (int64_t j = 0; j < m; j++) pc[j] += zlm_rms_grad_w_term(gr[j], xr[j], rs, rdt);
        }
    }
    if (gw) {
        #pragma omp parallel for schedule(static) if (nchunks * m > ZLI_PAR_MIN)
        for (int64_t j = 0; j < m; j++) {
            double s = 0;
            for (int64_t c = 0; c < nchunks; c++) s += part[c * m + j];
            gw[j] = (float)s;
        }
    }
    return ZL_OK;
}

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
    if (nnorm < 1 || nnorm > x->ndim) {
        char s[128];
        zl_error(ZL_EINVAL, "%s: cannot normalise over the last %d dims of an input of shape %s (expected 1..%d)",
                 op, nnorm, zl_shape_str(x->ndim, x->shape, s, sizeof s), x->ndim);
        return zli_op_end(op, nin, in, NULL);
    }
    const int64_t *tail = x->shape + x->ndim - nnorm;
    if (weight && (weight->ndim != nnorm || memcmp(weight->shape, tail, (size_t)nnorm * sizeof *tail) != 0)) {
        char sw[128], st[128], sx[128];
        zl_error(ZL_ESHAPE, "%s: weight must have shape %s, the last %d dims of the input %s; got %s", op,
                 zl_shape_str(nnorm, tail, st, sizeof st), nnorm, zl_shape_str(x->ndim, x->shape, sx, sizeof sx),
                 zl_shape_str(weight->ndim, weight->shape, sw, sizeof sw));
        return zli_op_end(op, nin, in, NULL);
    }
    if (!(eps >= 0) || isinf(eps)) {
        zl_error(ZL_EINVAL, "%s: eps must be finite and >= 0, got %g", op, eps);
        return zli_op_end(op, nin, in, NULL);
    }
    int64_t rows = 1, m = 1;
    for (int i = 0; i < x->ndim - nnorm; i++) rows *= x->shape[i];
    for (int i = x->ndim - nnorm; i < x->ndim; i++) m *= x->shape[i];
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
