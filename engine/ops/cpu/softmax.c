/* softmax and log_softmax over any dimension, with fused backward kernels.
 * x is read as [outer, d, inner]: each of the outer*inner rows of length d is
 * handled by one thread from start to end, so results never depend on thread count. */
#include <math.h>
#include "kernels.h"
#include "../../math/softmax.h"

/* One row of d elements, s apart, in math/softmax.h's formulas, each
 * exponential computed once. A row holding NaN, or only -inf, gives NaN, as
 * in PyTorch. */
static inline void row_forward(bool is_log, int64_t d, int64_t s, const float *restrict x, float *restrict y)
{
    float m = -INFINITY;
    for (int64_t k = 0; k < d; k++) m = zlm_softmax_max(m, x[k * s]);
    double sum = 0;
    for (int64_t k = 0; k < d; k++) {
        float e = zlm_softmax_exp(x[k * s], m);
        if (!is_log) y[k * s] = e;
        sum += e;
    }
    if (is_log) {
        float shift = zlm_log_softmax_shift(sum);
        for (int64_t k = 0; k < d; k++) y[k * s] = zlm_log_softmax_out(x[k * s], m, shift);
    } else {
        float inv = zlm_softmax_inv(sum);
        for (int64_t k = 0; k < d; k++) y[k * s] = zlm_softmax_scale(y[k * s], inv);
    }
}

static inline void row_backward(bool is_log, int64_t d, int64_t s, const float *restrict y, const float *restrict g,
                                float *restrict gx)
{
    double acc = 0;
    if (is_log) {
        for (int64_t k = 0; k < d; k++) acc += g[k * s];
        float gsum = (float)acc;
        for (int64_t k = 0; k < d; k++) gx[k * s] = zlm_log_softmax_grad(y[k * s], g[k * s], gsum);
    } else {
        for (int64_t k = 0; k < d; k++) acc += zlm_softmax_dot_term(y[k * s], g[k * s]);
        float dot = (float)acc;
        for (int64_t k = 0; k < d; k++) gx[k * s] = zlm_softmax_grad(y[k * s], g[k * s], dot);
    }
}

/* The CPU's kernels (ops/cpu/kernels.h): x, y [outer, d, inner] contiguous
 * f32; y [out]. A literal stride of 1 for the common last-dim case lets the
 * compiler specialise the inlined row loops. */
zl_status zli_cpu_softmax(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *xv, int xdt,
                          void *yv, int ydt)
{
    (void)index, (void)xdt, (void)ydt;
    const float *restrict x = xv;
    float *restrict y = yv;
    int64_t rows = outer * inner;
    #pragma omp parallel for schedule(static) if (rows * d > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = zlm_softmax_row_base(r, d, inner);
        if (inner == 1) row_forward(is_log, d, 1, x + base, y + base);
        else row_forward(is_log, d, inner, x + base, y + base);
    }
    return ZL_OK;
}

zl_status zli_cpu_softmax_backward(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *yv,
                                   int ydt, const void *gv, int gdt, float *gx)
{
    (void)index, (void)ydt, (void)gdt;
    const float *restrict y = yv, *restrict g = gv;
    int64_t rows = outer * inner;
    #pragma omp parallel for schedule(static) if (rows * d > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t base = zlm_softmax_row_base(r, d, inner);
        if (inner == 1) row_backward(is_log, d, 1, y + base, g + base, gx + base);
        else row_backward(is_log, d, inner, y + base, g + base, gx + base);
    }
    return ZL_OK;
}

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
