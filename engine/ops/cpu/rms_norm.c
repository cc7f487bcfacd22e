/* rms_norm over the last nnorm dims, as Hugging Face's LlamaRMSNorm computes
 * it, with its fused backward (gx and the weight's gradient in one pass over
 * x and g). On a device it is composed of the device's own ops, which
 * differentiate themselves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../device_kernels.h"

/* Rows per chunk of the backward: each chunk's weight gradient is a partial
 * sum of its own, and the partials are added in chunk order, so the bits do
 * not depend on the thread count. */
#define CHUNK_ROWS 32

/* Σ x² over m floats in double, in eight lanes the compiler can vectorise. */
static double sum_squares(const float *restrict x, int64_t m)
{
    double acc[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= m; j += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)x[j + l] * x[j + l];
    double s = 0;
    for (; j < m; j++) s += (double)x[j] * x[j];
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

/* v rounded to bf16 (nearest even), kept in f32: HF rounds the normalised x
 * to the input's dtype before the weight multiplies it. NaN stays NaN. */
static inline float round_bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return v;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* y [m] [in/out] rounded to dt (f32: unchanged). */
static void round_row(float *restrict y, int64_t m, zl_dtype dt)
{
    if (dt == ZL_DTYPE_BF16)
        for (int64_t j = 0; j < m; j++) y[j] = round_bf16(y[j]);
    else if (dt == ZL_DTYPE_F16)
        for (int64_t j = 0; j < m; j++) y[j] = zl_f16_to_f32(zl_f32_to_f16(y[j]));
}

/* x, y [rows, m] contiguous f32; w [m] or NULL; rstd [rows] [out].
 * y = round_xdt(x * rstd) * w with rstd = 1 / sqrt(mean(x²) + eps). */
static void rms_forward_kernel(int64_t rows, int64_t m, const float *restrict x, const float *restrict w,
                               zl_dtype xdt, double eps, float *restrict y, float *restrict rstd)
{
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * m;
        float *yr = y + r * m;
        float rs = (float)(1.0 / sqrt(sum_squares(xr, m) / (double)m + eps));
        rstd[r] = rs;
        for (int64_t j = 0; j < m; j++) yr[j] = xr[j] * rs;
        round_row(yr, m, xdt);
        if (w)
            for (int64_t j = 0; j < m; j++) yr[j] *= w[j];
    }
}

/* One pass over x and g [rows, m]: with gn = g * w,
 * gx = rstd * gn - x * rstd³ * mean(gn * x) (gx NULL: not wanted), and
 * part [nchunks, m] (NULL: no weight gradient) the chunks' sums of
 * g * round_xdt(x * rstd). */
static void rms_backward_kernel(int64_t rows, int64_t m, const float *restrict x, const float *restrict w,
                                zl_dtype xdt, const float *restrict rstd, const float *restrict g,
                                float *restrict gx, double *restrict part)
{
    int64_t nchunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
    #pragma omp parallel for schedule(static) if (rows * m > ZLI_PAR_MIN && nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t r1 = (c + 1) * CHUNK_ROWS < rows ? (c + 1) * CHUNK_ROWS : rows;
        double *pc = part ? part + c * m : NULL;
        if (pc) memset(pc, 0, (size_t)m * sizeof *pc);
        for (int64_t r = c * CHUNK_ROWS; r < r1; r++) {
            const float *xr = x + r * m, *gr = g + r * m;
            float rs = rstd[r];
            if (gx) {
                double acc[8] = {0}, dot = 0;
                int64_t j = 0;
                for (; j + 8 <= m; j += 8)
                    for (int l = 0; l < 8; l++)
                        acc[l] += (double)(w ? gr[j + l] * w[j + l] : gr[j + l]) * xr[j + l];
                for (; j < m; j++) dot += (double)(w ? gr[j] * w[j] : gr[j]) * xr[j];
                for (int l = 0; l < 8; l++) dot += acc[l];
                float k = (float)(dot / (double)m) * rs * rs * rs;
                float *out = gx + r * m;
                for (j = 0; j < m; j++) out[j] = rs * (w ? gr[j] * w[j] : gr[j]) - xr[j] * k;
            }
            if (pc && xdt == ZL_DTYPE_F32)
                for (int64_t j = 0; j < m; j++) pc[j] += (double)gr[j] * (xr[j] * rs);
            else if (pc)
                for (int64_t j = 0; j < m; j++) {
                    float n = xr[j] * rs;
                    n = xdt == ZL_DTYPE_BF16 ? round_bf16(n) : zl_f16_to_f32(zl_f32_to_f16(n));
                    pc[j] += (double)gr[j] * n;
                }
        }
    }
}

/* gw [m] [out] = the partials [nchunks, m] added in chunk order, columns split across threads. */
static void sum_partials(int64_t nchunks, int64_t m, const double *restrict part, float *restrict gw)
{
    #pragma omp parallel for schedule(static) if (nchunks * m > ZLI_PAR_MIN)
    for (int64_t j = 0; j < m; j++) {
        double s = 0;
        for (int64_t c = 0; c < nchunks; c++) s += part[c * m + j];
        gw[j] = (float)s;
    }
}

/* inputs: x, then weight if i[0]; rstd [rows] in ctx; i[1] rows, i[2] m. */
static zl_status rms_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *w = n->i[0] ? n->inputs[1] : NULL;
    int64_t rows = n->i[1], m = n->i[2];
    zl_tensor *xf = zli_f32c(x), *wf = w ? zli_f32c(w) : NULL;
    zl_status st = xf && (!w || wf) ? ZL_OK : ZL_ENOMEM;
    bool want_x = zli_requires_grad(x), want_w = w && zli_requires_grad(w);
    int64_t nchunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
    double *part = NULL;
    if (!st && want_x && !(gin[0] = zli_new_f32(x->ndim, x->shape))) st = ZL_ENOMEM;
    if (!st && want_w && !(gin[1] = zli_new_f32(w->ndim, w->shape))) st = ZL_ENOMEM;
    if (!st && want_w && !(part = malloc((size_t)(nchunks * m > 0 ? nchunks * m : 1) * sizeof *part)))
        st = zl_error(ZL_ENOMEM, "rms_norm backward: out of memory for the weight gradient's partial sums");
    if (!st && want_w) zl_tensor_set_category(gin[1], ZL_MEM_GRADS);
    if (!st && m > 0) {
        rms_backward_kernel(rows, m, zl_tensor_data(xf), wf ? zl_tensor_data(wf) : NULL, x->dtype, n->ctx,
                            zl_tensor_data(g), want_x ? zl_tensor_data(gin[0]) : NULL, part);
        if (want_w) sum_partials(nchunks, m, part, zl_tensor_data(gin[1]));
    } else if (!st && want_w) {
        zli_fill(gin[1], 0);
    }
    free(part);
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    return st;
}

/* The device's way: x in f32, its mean square over the normalised dims,
 * times (that + eps)^-1/2, back to x's dtype, times the weight, each an op of
 * its own that differentiates itself. */
static zl_tensor *rms_norm_composed(zl_tensor *x, int nnorm, zl_tensor *weight, double eps)
{
    int dims[ZL_MAX_DIMS];
    for (int i = 0; i < nnorm; i++) dims[i] = x->ndim - nnorm + i;
    zl_tensor *xf = x->dtype == ZL_DTYPE_F32 ? zl_tensor_retain(x) : zl_tensor_to(x, ZL_DTYPE_F32);
    zl_tensor *sq = xf ? zl_mul(xf, xf) : NULL;
    zl_tensor *ms = sq ? zl_mean_dims(sq, nnorm, dims, true) : NULL;
    zl_tensor *me = ms ? zl_affine(ms, 1.0, eps) : NULL;
    zl_tensor *rs = me ? zl_pow_scalar(me, -0.5) : NULL;
    zl_tensor *nf = rs ? zl_mul(xf, rs) : NULL;
    zl_tensor *nx = !nf || x->dtype == ZL_DTYPE_F32 ? zl_tensor_retain(nf) : zl_tensor_to(nf, x->dtype);
    zl_tensor *y = nx && weight ? zl_mul(weight, nx) : zl_tensor_retain(nx);
    zl_tensor *objs[] = {xf, sq, ms, me, rs, nf, nx};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return y;
}

/* The result's dtype is torch's promotion of x's and the weight's, as HF's
 * `weight * hidden.to(input_dtype)` gives. */
zl_tensor *zl_rms_norm(zl_tensor *x, int nnorm, zl_tensor *weight, double eps)
{
    const char *op = "rms_norm";
    zl_tensor *in[2] = {x, weight};
    int nin = weight ? 2 : 1;
    const zli_dev_kernels *k = NULL;
    int index = 0, on;
    if (zli_op_begin(op, nin, in)) return NULL;
    if ((on = zli_op_device(op, nin, in, &k, &index)) < 0) return zli_op_end(op, nin, in, NULL);
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
    if (on) return zli_op_end(op, nin, in, rms_norm_composed(x, nnorm, weight, eps));
    int64_t rows = 1, m = 1;
    for (int i = 0; i < x->ndim - nnorm; i++) rows *= x->shape[i];
    for (int i = x->ndim - nnorm; i < x->ndim; i++) m *= x->shape[i];
    float *rstd = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *rstd);
    if (!rstd) {
        zl_error(ZL_ENOMEM, "%s: out of memory", op);
        return zli_op_end(op, nin, in, NULL);
    }
    zl_tensor *xf = zli_f32c(x), *wf = weight ? zli_f32c(weight) : NULL;
    zl_tensor *y = xf && (!weight || wf) ? zli_new_f32(x->ndim, x->shape) : NULL;
    if (y && m > 0)
        rms_forward_kernel(rows, m, zl_tensor_data(xf), wf ? zl_tensor_data(wf) : NULL, x->dtype, eps,
                           zl_tensor_data(y), rstd);
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    y = zli_cast_result(y, weight ? zli_promote(x->dtype, weight->dtype) : x->dtype);
    zl_node *n = NULL;
    if (y && zli_record(y, op, rms_backward, nin, in, &n)) { zl_tensor_release(y); y = NULL; }
    if (n) {
        n->i[0] = weight != NULL;
        n->i[1] = rows;
        n->i[2] = m;
        n->ctx = rstd;
        n->ctx_free = free;
        rstd = NULL;
    }
    free(rstd);
    return zli_op_end(op, nin, in, y);
}
