/* layer_norm over the last nnorm dims, with optional weight and bias, and its
 * fused backward (gx, gweight, gbias in two passes over the saved mean and rstd).
 * Row statistics are taken in double, one row per thread; the weight and bias
 * gradients are split across threads by column, so no sum depends on timing. */
#include <math.h>
#include <string.h>
#include "kernels.h"

/* Columns per block of the weight/bias gradient: the accumulators live on the stack. */
#define COLS 256

/* The CPU's kernels (ops/cpu/kernels.h), f32: x, y [rows, m] contiguous; w,
 * b [m] or NULL; mean, rstd [rows] [out]. Biased variance. */
zl_status zli_cpu_ln_forward(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                             const void *bv, int bdt, double eps, void *yv, int ydt, float *restrict mean,
                             float *restrict rstd)
{
    (void)index, (void)xdt, (void)wdt, (void)bdt, (void)ydt;
    const float *restrict x = xv, *restrict w = wv, *restrict b = bv;
    float *restrict y = yv;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * m;
        float *yr = y + r * m;
        double s = 0;
        for (int64_t j = 0; j < m; j++) s += xr[j];
        double mu = s / (double)m, v = 0;
        for (int64_t j = 0; j < m; j++) {
            double d = xr[j] - mu;
            v += d * d;
        }
        float fm = (float)mu, rs = (float)(1.0 / sqrt(v / (double)m + eps));
        mean[r] = fm;
        rstd[r] = rs;
        for (int64_t j = 0; j < m; j++) yr[j] = (xr[j] - fm) * rs;
        if (w) for (int64_t j = 0; j < m; j++) yr[j] *= w[j];
        if (b) for (int64_t j = 0; j < m; j++) yr[j] += b[j];
    }
    return ZL_OK;
}

/* With xh = (x - mean) * rstd and gh = g * w:
 * gx = rstd * (gh - mean(gh) - xh * mean(gh * xh)), row by row. */
zl_status zli_cpu_ln_backward_x(int index, int64_t rows, int64_t m, const void *xv, int xdt, const void *wv, int wdt,
                                const float *restrict mean, const float *restrict rstd, const void *gv, int gdt,
                                float *restrict gx)
{
    (void)index, (void)xdt, (void)wdt, (void)gdt;
    const float *restrict x = xv, *restrict w = wv, *restrict g = gv;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * m, *gr = g + r * m;
        float *out = gx + r * m, mu = mean[r], rs = rstd[r];
        double a = 0, c = 0;
        for (int64_t j = 0; j < m; j++) {
            float gh = w ? gr[j] * w[j] : gr[j];
            a += gh;
            c += (double)gh * ((xr[j] - mu) * rs);
        }
        float ma = (float)(a / (double)m), mc = (float)(c / (double)m);
        for (int64_t j = 0; j < m; j++) {
            float gh = w ? gr[j] * w[j] : gr[j];
            out[j] = rs * (gh - ma - (xr[j] - mu) * rs * mc);
        }
    }
    return ZL_OK;
}

/* gw[j] = sum_r g[r, j] * xh[r, j], gb[j] = sum_r g[r, j]; either may be NULL.
 * Each block of columns belongs to one thread and adds rows in order. */
zl_status zli_cpu_ln_backward_wb(int index, int64_t rows, int64_t m, const void *xv, int xdt,
                                 const float *restrict mean, const float *restrict rstd, const void *gv, int gdt,
                                 float *restrict gw, float *restrict gb)
{
    (void)index, (void)xdt, (void)gdt;
    const float *restrict x = xv, *restrict g = gv;
    int64_t nblocks = (m + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t lo = blk * COLS, n = lo + COLS < m ? COLS : m - lo;
        double aw[COLS] = {0}, ab[COLS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * m + lo, *gr = g + r * m + lo;
            float mu = mean[r], rs = rstd[r];
            for (int64_t j = 0; j < n; j++) {
                aw[j] += (double)gr[j] * ((xr[j] - mu) * rs);
                ab[j] += gr[j];
            }
        }
        for (int64_t j = 0; j < n; j++) {
            if (gw) gw[lo + j] = (float)aw[j];
            if (gb) gb[lo + j] = (float)ab[j];
        }
    }
    return ZL_OK;
}

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

/* weight and bias must have exactly the shape of x's last nnorm dims. */
static zl_status check_tail(const char *role, const zl_tensor *p, const zl_tensor *x, int nnorm)
{
    const int64_t *tail = x->shape + x->ndim - nnorm;
    if (p->ndim == nnorm && memcmp(p->shape, tail, (size_t)nnorm * sizeof p->shape[0]) == 0) return ZL_OK;
    char sp[128], st[128], sx[128];
    return zl_error(ZL_ESHAPE, "layer_norm: %s must have shape %s, the last %d dims of the input %s; got %s", role,
                    zl_shape_str(nnorm, tail, st, sizeof st), nnorm, zl_shape_str(x->ndim, x->shape, sx, sizeof sx),
                    zl_shape_str(p->ndim, p->shape, sp, sizeof sp));
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
    if (nnorm < 1 || nnorm > x->ndim) {
        char s[128];
        zl_error(ZL_EINVAL, "%s: cannot normalise over the last %d dims of an input of shape %s (expected 1..%d)",
                 op, nnorm, zl_shape_str(x->ndim, x->shape, s, sizeof s), x->ndim);
        return zli_op_end(op, nin, in, NULL);
    }
    if ((weight && check_tail("weight", weight, x, nnorm)) || (bias && check_tail("bias", bias, x, nnorm)))
        return zli_op_end(op, nin, in, NULL);
    if (!(eps >= 0)) {
        zl_error(ZL_EINVAL, "%s: eps must be >= 0, got %g", op, eps);
        return zli_op_end(op, nin, in, NULL);
    }
    int64_t rows = 1, m = 1;
    for (int i = 0; i < x->ndim - nnorm; i++) rows *= x->shape[i];
    for (int i = x->ndim - nnorm; i < x->ndim; i++) m *= x->shape[i];
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
