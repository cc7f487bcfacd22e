/* The CPU's fused linear: when x and w are both bf16 the GEMMs run in bf16
 * (gemm_bf16.c), otherwise in f32 (a bf16 w with an f32 x widened a panel
 * at a time). */
#include <string.h>
#include "gemm.h"
#include "gemm_bf16.h"
#include "kernels.h"
#include "../../math/convert.h"

/* t as a contiguous tensor of dtype dt: t itself when it is one, else a copy. */
static zl_tensor *operand(zl_tensor *t, zl_dtype dt)
{
    if (t->dtype == dt && zl_tensor_is_contiguous(t)) return zl_tensor_retain(t);
    return zli_copy_as(t, dt, ZL_MEM_ACTIVATIONS);
}

/* C[M,N] (leading dim ldc) = op(A)[M,K] · op(B)[K,N] + bias[N] (NULL: none):
 * sgemm on f32 operands, the bf16 GEMM on bf16 ones (C in cdt; f32 for sgemm). */
static zl_status gemm(bool half, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, const float *bias, void *C, zl_dtype cdt, int64_t ldc)
{
    if (half) return zli_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, bias, C, cdt, ldc);
    float *c = C;
    if (bias)
        for (int64_t r = 0; r < M; r++) memcpy(c + r * ldc, bias, (size_t)N * sizeof *bias);
    zli_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, bias ? 1.0f : 0.0f, c, ldc);
    return ZL_OK;
}

/* An f32 x with a bf16 w (a bf16 model's weight on a CPU without bf16 dot
 * products, zlua.engine.precision): w is widened a panel of rows at a time
 * just before the GEMM that reads it, so the f32 panel (4 MiB) is read from
 * the last-level cache rather than a whole f32 copy (an LM head's [50257, C])
 * going out to memory and back. */
static int64_t panel_rows(int64_t in, int64_t outf)
{
    int64_t r = ((int64_t)1 << 20) / (in > 0 ? in : 1) / 16 * 16;
    r = r < 16 ? 16 : r;
    return r < outf ? r : outf;
}

/* y[rows, outf] = x[rows, in] · wᵀ (+ bias), w [outf, in] bf16. */
static zl_status forward_wide(const float *x, const uint16_t *w, const float *bias, float *y, int64_t rows,
                              int64_t in, int64_t outf)
{
    int64_t pr = panel_rows(in, outf);
    size_t nb = (size_t)(pr * in) * sizeof(float);
    float *wp = zl_mem_alloc(nb, ZL_MEM_ACTIVATIONS);
    if (!wp) return ZL_ENOMEM;
    /* y starts as the bias or zero, in one pass: a beta of 0 would have
     * OpenBLAS clear each panel's strided block of y, a slow loop. */
    #pragma omp parallel for schedule(static) if (rows * outf > ZLI_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        if (bias) memcpy(y + r * outf, bias, (size_t)outf * sizeof *bias);
        else memset(y + r * outf, 0, (size_t)outf * sizeof *y);
    }
    for (int64_t j0 = 0; j0 < outf; j0 += pr) {
        int64_t n = outf - j0 < pr ? outf - j0 : pr;
        zl_convert(w + j0 * in, ZL_DTYPE_BF16, wp, ZL_DTYPE_F32, (size_t)(n * in));
        zli_sgemm(false, true, rows, n, in, 1.0f, x, in, wp, in, 1.0f, y + j0, outf);
    }
    zl_mem_free(wp, nb, ZL_MEM_ACTIVATIONS);
    return ZL_OK;
}

/* gx[rows, in] = g[rows, outf] · w, w [outf, in] bf16: the panels' products summed in order. */
static zl_status backward_x_wide(const float *g, const uint16_t *w, float *gx, int64_t rows, int64_t in,
                                 int64_t outf)
{
    int64_t pr = panel_rows(in, outf);
    size_t nb = (size_t)(pr * in) * sizeof(float);
    float *wp = zl_mem_alloc(nb, ZL_MEM_ACTIVATIONS);
    if (!wp) return ZL_ENOMEM;
    for (int64_t j0 = 0; j0 < outf; j0 += pr) {
        int64_t n = outf - j0 < pr ? outf - j0 : pr;
        zl_convert(w + j0 * in, ZL_DTYPE_BF16, wp, ZL_DTYPE_F32, (size_t)(n * in));
        zli_sgemm(false, false, rows, in, n, 1.0f, g + j0, outf, wp, in, j0 ? 1.0f : 0.0f, gx, in);
    }
    zl_mem_free(wp, nb, ZL_MEM_ACTIVATIONS);
    return ZL_OK;
}

/* Whether the linear of x and w takes the panel path above. */
static bool wide_panels(const zl_tensor *x, const zl_tensor *w)
{
    return x->dtype == ZL_DTYPE_F32 && w->dtype == ZL_DTYPE_BF16 && zl_tensor_is_contiguous(w);
}

/* Whether g [n] holds bf16 values only (no NaN), as the gradient a bf16
 * cross-entropy hands the LM head does: then it is its own rounded copy.
 * Checked a block at a time, so that a gradient that is not stops early. */
static bool bf16_valued(const float *g, int64_t n)
{
    const uint32_t *u = (const void *)g;
    for (int64_t i0 = 0; i0 < n; i0 += 4096) {
        int64_t end = n - i0 < 4096 ? n : i0 + 4096;
        uint32_t low = 0, nan = 0;
        for (int64_t i = i0; i < end; i++) {
            low |= u[i] & 0xffffu;
            nan |= (u[i] & 0x7fffffffu) > 0x7f800000u;
        }
        if (low || nan) return false;
    }
    return true;
}

/* The CPU's fused backward (ops/cpu/kernels.h). With bf16 x and w, g is
 * rounded to bf16 once for the two gradient GEMMs, which write f32: the
 * autograd engine sums gradients in f32 and stores a leaf's .grad in the
 * leaf's dtype. The bias gradient sums the f32 g. */
zl_status zli_cpu_linear_backward(int index, zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    (void)index;
    zl_tensor *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    int64_t in = w->shape[1], outf = w->shape[0], rows = zli_numel(x->ndim - 1, x->shape);
    bool half = x->dtype == ZL_DTYPE_BF16 && w->dtype == ZL_DTYPE_BF16;
    const float *pg = zl_tensor_data(g);
    zl_tensor *xc, *wc, *gc;
    if (half && !zl_bf16_dot_products()) {
        /* Without bf16 dot products the bf16 GEMM widens its operands to f32:
         * widen x and w once and round g to bf16's precision in f32 once,
         * rather than rounding g to bf16 and widening it again in each of
         * the two GEMMs. The same products, the same bits. */
        half = false;
        int64_t ng = zl_tensor_numel(g);
        bool rounded = bf16_valued(pg, ng);
        xc = operand(x, ZL_DTYPE_F32);
        wc = xc ? operand(w, ZL_DTYPE_F32) : NULL;
        gc = !wc ? NULL : rounded ? zl_tensor_retain(g) : zli_new_f32(g->ndim, g->shape);
        if (gc && !rounded) {
            float *d = zl_tensor_data(gc);
            #pragma omp parallel for schedule(static) if (ng > ZLI_PAR_MIN)
            for (int64_t i = 0; i < ng; i++) d[i] = zlm_bf16_to_f32(zlm_f32_to_bf16(pg[i]));
        }
    } else {
        zl_dtype wdt = half ? ZL_DTYPE_BF16 : ZL_DTYPE_F32;
        xc = operand(x, wdt);
        wc = !half && wide_panels(x, w) ? zl_tensor_retain(w) : operand(w, wdt);
        gc = operand(g, wdt);
    }
    zl_status st = xc && wc && gc ? ZL_OK : ZL_ENOMEM;
    if (!st && zli_requires_grad(x)) {
        gin[0] = zli_new_f32(x->ndim, x->shape);   /* gx[rows, in] = g[rows, out] · w[out, in] */
        if (!gin[0])
            st = ZL_ENOMEM;
        else if (wc->dtype != xc->dtype)
            st = backward_x_wide(zl_tensor_data(gc), zl_tensor_data(wc), zl_tensor_data(gin[0]), rows, in, outf);
        else
            st = gemm(half, false, false, rows, in, outf, zl_tensor_data(gc), outf, zl_tensor_data(wc), in, NULL,
                      zl_tensor_data(gin[0]), ZL_DTYPE_F32, in);
    }
    if (!st && zli_requires_grad(w)) {
        gin[1] = zl_tensor_new(ZL_DTYPE_F32, 2, w->shape, ZL_MEM_GRADS);   /* gw = gᵀ · x */
        st = gin[1] ? gemm(half, true, false, outf, in, rows, zl_tensor_data(gc), outf, zl_tensor_data(xc), in,
                           NULL, zl_tensor_data(gin[1]), ZL_DTYPE_F32, in)
                    : ZL_ENOMEM;
    }
    if (!st && b && zli_requires_grad(b)) {
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
    zl_tensor_release(xc);
    zl_tensor_release(wc);
    zl_tensor_release(gc);
    return st;
}

/* The CPU's fused forward (ops/cpu/kernels.h): y in bf16 when x and w are
 * both bf16 (the bf16 GEMM, the bias in its epilogue), else in f32 (sgemm,
 * or a bf16 w widened a panel at a time). */
zl_tensor *zli_cpu_linear(int index, zl_tensor *const *in, int nin, int64_t rows, int64_t inf, int64_t outf, int ndim,
                          const int64_t *shape)
{
    (void)index, (void)nin;
    zl_tensor *x = in[0], *w = in[1], *b = nin > 2 ? in[2] : NULL;
    bool half = x->dtype == ZL_DTYPE_BF16 && w->dtype == ZL_DTYPE_BF16;
    zl_dtype wdt = half ? ZL_DTYPE_BF16 : ZL_DTYPE_F32;
    bool wide = !half && wide_panels(x, w);
    zl_tensor *xc = operand(x, wdt), *wc = wide ? zl_tensor_retain(w) : operand(w, wdt);
    zl_tensor *bf = b ? zli_f32c(b) : NULL;
    zl_tensor *y = xc && wc && (!b || bf) ? zl_tensor_new(wdt, ndim, shape, ZL_MEM_ACTIVATIONS) : NULL;
    const float *pb = bf ? zl_tensor_data(bf) : NULL;
    if (y && (wide ? forward_wide(zl_tensor_data(xc), zl_tensor_data(wc), pb, zl_tensor_data(y), rows, inf, outf)
                   : gemm(half, false, true, rows, outf, inf, zl_tensor_data(xc), inf, zl_tensor_data(wc), inf, pb,
                          zl_tensor_data(y), wdt, outf))) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(xc);
    zl_tensor_release(wc);
    zl_tensor_release(bf);
    return y;
}
