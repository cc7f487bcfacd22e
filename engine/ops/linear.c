/* linear: y = x · wᵀ + b, one op (not a matmul of a transposed view) so that
 * the weight's use hooks fire around the GEMMs that actually read it, in
 * forward and in backward. x [..., in], w [out, in], b [out] or NULL. A
 * table's fused linear runs it where it has one (the CPU's,
 * ops/cpu/linear.c); a table without (a GPU's) runs the same steps in its
 * half-precision GEMM (f32 accumulation) when x and w are both bf16 or both
 * f16, else its f32 GEMM. */
#include <string.h>
#include "device_kernels.h"

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
