/* linear: y = x · wᵀ + b, one op (not a matmul of a transposed view) so that
 * the weight's use hooks fire around the GEMMs that actually read it, in
 * forward and in backward. x [..., in], w [out, in], b [out] or NULL. When x
 * and w are both bf16 the GEMMs run in bf16 (gemm_bf16.c), otherwise in f32
 * (a bf16 w with an f32 x widened a panel at a time): the CPU's fused
 * kernels. A table without them (a GPU's) runs the same steps in its
 * half-precision GEMM (f32 accumulation) when x and w are both bf16 or both
 * f16, else its f32 GEMM. */
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

/* C[M,N] f32 = op(A) op(B) + beta C on the device, A and B in dt. */
static zl_status device_gemm(const zli_dev_kernels *k, int index, zl_dtype dt, bool ta, bool tb, int64_t M,
                             int64_t N, int64_t K, const zl_tensor *A, int64_t lda, const zl_tensor *B, int64_t ldb,
                             float beta, zl_tensor *C, int64_t ldc)
{
    return zli_dev_gemm(k, index, dt, ta, tb, M, N, K, 1.0f, zl_tensor_data(A), lda, 0, zl_tensor_data(B), ldb, 0,
                        beta, zl_tensor_data(C), ldc, 0, 1);
}

/* The three gradients by a table's GEMMs, in the host's steps: gx and gw by
 * the GEMMs, gb by the rows of g added in order from zero (sum_to over dim 0).
 * With half-precision x and w, g is rounded to their dtype once for the two
 * GEMMs, as on the host; gb sums the f32 g. */
static zl_status linear_backward_composed(const zli_dev_kernels *k, int index, zl_node *n, zl_tensor *g,
                                          zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    int64_t in = w->shape[1], outf = w->shape[0], rows = zli_numel(x->ndim - 1, x->shape);
    zl_dtype dt = zli_gemm_dtype(k, 2, n->inputs);
    /* g in f32 for the bias, and in the GEMMs' dtype (the same tensor in f32) */
    zl_tensor *gc = zli_f32c(g), *gh = dt == ZL_DTYPE_F32 ? zl_tensor_retain(gc) : zli_contiguous_as_like(g, dt, g);
    zl_tensor *xc = zli_contiguous_as_like(x, dt, g), *wc = zli_contiguous_as_like(w, dt, g);
    zl_status st = xc && wc && gh && gc ? ZL_OK : ZL_ENOMEM;
    if (!st && zli_requires_grad(x)) {
        gin[0] = zli_new_f32_like(g, x->ndim, x->shape);
        st = gin[0] ? device_gemm(k, index, dt, false, false, rows, in, outf, gh, outf, wc, in, 0.0f, gin[0], in)
                    : ZL_ENOMEM;
    }
    if (!st && zli_requires_grad(w)) {
        gin[1] = zli_new_f32_like(g, 2, w->shape);
        if (gin[1]) zl_tensor_set_category(gin[1], ZL_MEM_GRADS);
        st = gin[1] ? device_gemm(k, index, dt, true, false, outf, in, rows, gh, outf, xc, in, 0.0f, gin[1], in)
                    : ZL_ENOMEM;
    }
    if (!st && b && zli_requires_grad(b)) {
        gin[2] = zli_new_f32_like(g, 1, b->shape);
        if (gin[2]) zl_tensor_set_category(gin[2], ZL_MEM_GRADS);
        st = gin[2] ? k->sum_to(index, 2, (int64_t[]){rows, outf}, (int[]){1, 0}, zl_tensor_data(gc),
                                zl_tensor_data(gin[2]), outf)
                    : ZL_ENOMEM;
    }
    zl_tensor_release(xc);
    zl_tensor_release(wc);
    zl_tensor_release(gh);
    zl_tensor_release(gc);
    return st;
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

/* A table's fused backward where it has one, else the composed one. */
static zl_status linear_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("linear backward", 1, &g, &k, &index) < 0) return zli_last_code();
    if (k->linear_backward) return k->linear_backward(index, n, g, gin);
    return linear_backward_composed(k, index, n, g, gin);
}

/* y [rows, outf] by a table's GEMMs. Half-precision x and w: y in their
 * dtype from one GEMM with the bias in its epilogue where the table has one
 * (linear_half). Otherwise y in f32: the bias copied into each row and the
 * GEMM added to it (beta 1), the host's sgemm steps, half-precision x and w
 * going in as they are. */
static zl_tensor *linear_composed(const zli_dev_kernels *k, int index, zl_tensor *const *in, int nin, int64_t rows,
                                  int64_t inf, int64_t outf, int ndim, const int64_t *shape)
{
    const zl_tensor *home = zli_op_home(nin, in);
    zl_dtype dt = zli_gemm_dtype(k, 2, in);
    zl_tensor *xc = zli_contiguous_as_like(in[0], dt, home), *wc = zli_contiguous_as_like(in[1], dt, home);
    zl_tensor *bc = nin > 2 ? zli_f32c_like(in[2], home) : NULL;
    zl_tensor *y = NULL;
    bool done = false;
    zl_status st = xc && wc && (nin < 3 || bc) ? ZL_OK : ZL_ENOMEM;
    if (!st && dt != ZL_DTYPE_F32 && k->linear_half) {
        y = zli_kernel_output(home, true, dt, ndim, shape);
        st = y ? k->linear_half(index, (int)dt, rows, outf, inf, zl_tensor_data(xc), inf, zl_tensor_data(wc), inf,
                                bc ? zl_tensor_data(bc) : NULL, zl_tensor_data(y), outf, &done)
               : ZL_ENOMEM;
        if (!st && !done) {
            zl_tensor_release(y);
            y = NULL;
        }
    }
    if (!st && !done) {
        y = zli_new_f32_like(home, ndim, shape);
        st = y ? ZL_OK : ZL_ENOMEM;
        if (!st && bc) st = zli_copy(y, bc);
        if (!st) st = device_gemm(k, index, dt, false, true, rows, outf, inf, xc, inf, wc, inf, bc ? 1.0f : 0.0f, y,
                                  outf);
    }
    zl_tensor_release(xc);
    zl_tensor_release(wc);
    zl_tensor_release(bc);
    if (st) {
        zl_tensor_release(y);
        return NULL;
    }
    return y;
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

zl_tensor *zl_linear(zl_tensor *x, zl_tensor *w, zl_tensor *b)
{
    zl_tensor *in[3] = {x, w, b};
    int nin = b ? 3 : 2;
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin("linear", nin, in)) return NULL;
    if (zli_op_device("linear", nin, in, &k, &index) < 0) return zli_op_end("linear", nin, in, NULL);
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
    int64_t inf = w->shape[1], outf = w->shape[0], rows = zli_numel(x->ndim - 1, x->shape);
    int64_t shape[ZL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = outf;
    zl_tensor *y = k->linear ? k->linear(index, in, nin, rows, inf, outf, x->ndim, shape)
                             : linear_composed(k, index, in, nin, rows, inf, outf, x->ndim, shape);
    y = zli_cast_result(y, zli_promote(x->dtype, w->dtype));
    zl_node *n;
    if (y && zli_record(y, "linear", linear_backward, nin, in, &n)) { zl_tensor_release(y); y = NULL; }
    return zli_op_end("linear", nin, in, y);
}
