/* Unary elementwise ops and their fused backward (each backward one pass
 * over (x, y, g) rather than a chain of elementwise ops), through the
 * kernel table of x's memory. */
#include <math.h>
#include <string.h>
#include "device_kernels.h"
#include "../math/unary.h"

/* The per-element math is the CUDA kernels' (math/unary.h), whose
 * enum is this file's kinds. The exact GELU gets a loop of its own: with the
 * kind a constant the switch folds away and the loop vectorizes (its erf and
 * exp are branch-free arithmetic); the other kinds share one loop. */
enum {
    U_NEG = ZLM_U_NEG, U_EXP = ZLM_U_EXP, U_LOG = ZLM_U_LOG, U_SQRT = ZLM_U_SQRT, U_TANH = ZLM_U_TANH,
    U_SIGMOID = ZLM_U_SIGMOID, U_RELU = ZLM_U_RELU, U_ABS = ZLM_U_ABS, U_POW = ZLM_U_POW, U_AFFINE = ZLM_U_AFFINE,
    U_GELU = ZLM_U_GELU, U_GELU_TANH = ZLM_U_GELU_TANH, U_SILU = ZLM_U_SILU, U_SIN = ZLM_U_SIN, U_COS = ZLM_U_COS,
    U_LOG1P = ZLM_U_LOG1P, U_SOFTPLUS = ZLM_U_SOFTPLUS, U_LEAKY_RELU = ZLM_U_LEAKY_RELU, U_CLAMP = ZLM_U_CLAMP
};

static const char *const names[] = {"neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs",
                                    "pow", "affine", "gelu", "gelu", "silu", "sin", "cos", "log1p",
                                    "softplus", "leaky_relu", "clamp"};
static zl_status unary_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    int kind = (int)n->i[0];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    zl_tensor *in[2] = {n->inputs[0], g};
    if (zli_op_device(names[kind], 2, in, &k, &index) < 0) return zli_last_code();
    zl_tensor *x = zli_kernel_input(n->inputs[0], k->halves);
    zl_tensor *y = n->saved[0] ? zli_kernel_input(n->saved[0], k->halves) : NULL;
    zl_tensor *gc = zli_kernel_input(g, k->halves);
    zl_tensor *gx = x && gc && (y || !n->saved[0]) ? zli_new_f32_like(g, g->ndim, g->shape) : NULL;
    zl_status st = gx ? ZL_OK : ZL_ENOMEM;
    if (gx)
        st = k->unary_backward(index, kind, zl_tensor_numel(g), zl_tensor_data(x), (int)x->dtype,
                               y ? zl_tensor_data(y) : NULL, y ? (int)y->dtype : ZL_DTYPE_F32, zl_tensor_data(gc),
                               (int)gc->dtype, zl_tensor_data(gx), (float)n->f[0], (float)n->f[1]);
    zl_tensor_release(x);
    zl_tensor_release(y);
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    return ZL_OK;
}

/* An integer tensor to a whole power e >= 0, in its dtype, exact (wrapping
 * as torch's does on overflow); on the host (zli_host_copy). */
static zl_tensor *int_pow(zl_tensor *x, int e)
{
    zl_tensor *xc = zli_host_copy(x, ZL_DTYPE_I64);
    zl_tensor *r = xc ? zl_tensor_new(ZL_DTYPE_I64, x->ndim, x->shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (r) {
        const int64_t *v = zl_tensor_data(xc);
        int64_t *o = zl_tensor_data(r);
        for (int64_t i = 0; i < zl_tensor_numel(x); i++) {
            uint64_t acc = 1;
            for (int j = 0; j < e; j++) acc *= (uint64_t)v[i];
            o[i] = (int64_t)acc;
        }
    }
    zl_tensor_release(xc);
    return zli_host_result(r, x->dtype, x);
}

/* An integer (or bool) tensor clamped to whole bounds (an infinite one
 * open), exact in 64 bits: x's dtype, i64 for bool, as torch's. */
static zl_tensor *int_clamp(zl_tensor *x, double lo, double hi)
{
    zl_tensor *xc = zli_host_copy(x, ZL_DTYPE_I64);
    zl_tensor *r = xc ? zl_tensor_new(ZL_DTYPE_I64, x->ndim, x->shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (r) {
        const int64_t *v = zl_tensor_data(xc);
        int64_t *o = zl_tensor_data(r);
        for (int64_t i = 0; i < zl_tensor_numel(x); i++) {
            double e = (double)v[i];
            o[i] = e < lo ? (int64_t)lo : v[i];
            if ((double)o[i] > hi) o[i] = (int64_t)hi;
        }
    }
    zl_tensor_release(xc);
    return zli_host_result(r, x->dtype == ZL_DTYPE_BOOL ? ZL_DTYPE_I64 : x->dtype, x);
}

static bool whole_or_open(double b) { return isinf(b) || (b == floor(b) && fabs(b) < 0x1p63); }

static zl_tensor *unary(int kind, zl_tensor *x, double p0, double p1)
{
    const char *op = names[kind];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 1, &x)) return NULL;
    if (zli_op_device(op, 1, &x, &k, &index) < 0) return zli_op_end(op, 1, &x, NULL);
    /* An integer to a whole power stays an integer, as in torch. */
    bool is_float = zl_dtype_traits_of(x->dtype)->is_float;
    if (kind == U_POW && !is_float && x->dtype != ZL_DTYPE_BOOL && p0 >= 0 && p0 <= 64 && p0 == floor(p0))
        return zli_op_end(op, 1, &x, int_pow(x, (int)p0));
    /* Whole bounds keep an integer an integer; a fractional one makes it a float, as in torch. */
    if (kind == U_CLAMP && !is_float && whole_or_open(p0) && whole_or_open(p1))
        return zli_op_end(op, 1, &x, int_clamp(x, p0, p1));
    /* torch has no integer kernels for these: an integer input is an error, not a float result. */
    if ((kind == U_SILU || kind == U_SOFTPLUS || kind == U_LEAKY_RELU) && zli_need_float(op, "x", x))
        return zli_op_end(op, 1, &x, NULL);
    zl_dtype rdt = is_float ? x->dtype : ZL_DTYPE_F32;
    if (kind == U_NEG || kind == U_ABS || kind == U_RELU) rdt = x->dtype == ZL_DTYPE_BOOL ? ZL_DTYPE_F32 : x->dtype;
    zl_tensor *xf = zli_kernel_input(x, k->halves);
    zl_tensor *y = xf ? zli_kernel_output(x, k->halves, rdt, x->ndim, x->shape) : NULL;
    if (y && k->unary(index, kind, zl_tensor_numel(x), zl_tensor_data(xf), (int)xf->dtype, zl_tensor_data(y),
                      (int)y->dtype, (float)p0, (float)p1)) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(xf);
    y = y && y->dtype != rdt ? zli_cast_result(y, rdt) : y;
    zl_node *n;
    if (y && zl_dtype_traits_of(rdt)->is_float) {
        if (zli_record(y, op, unary_backward, 1, &x, &n)) { zl_tensor_release(y); y = NULL; }
        else if (n) {
            n->i[0] = kind;
            n->f[0] = p0;
            n->f[1] = p1;
            bool needs_y = zlm_unary_needs_output(kind);
            if (needs_y && zli_node_save(n, 0, y, true)) { zl_tensor_release(y); y = NULL; }
        }
    }
    return zli_op_end(op, 1, &x, y);
}

zl_tensor *zl_neg(zl_tensor *x) { return unary(U_NEG, x, 0, 0); }
zl_tensor *zl_exp(zl_tensor *x) { return unary(U_EXP, x, 0, 0); }
zl_tensor *zl_log(zl_tensor *x) { return unary(U_LOG, x, 0, 0); }
zl_tensor *zl_sqrt(zl_tensor *x) { return unary(U_SQRT, x, 0, 0); }
zl_tensor *zl_tanh(zl_tensor *x) { return unary(U_TANH, x, 0, 0); }
zl_tensor *zl_sigmoid(zl_tensor *x) { return unary(U_SIGMOID, x, 0, 0); }
zl_tensor *zl_relu(zl_tensor *x) { return unary(U_RELU, x, 0, 0); }
zl_tensor *zl_abs(zl_tensor *x) { return unary(U_ABS, x, 0, 0); }
zl_tensor *zl_pow_scalar(zl_tensor *x, double e) { return unary(U_POW, x, e, 0); }
zl_tensor *zl_affine(zl_tensor *x, double s, double a) { return unary(U_AFFINE, x, s, a); }
zl_tensor *zl_gelu(zl_tensor *x, bool approximate) { return unary(approximate ? U_GELU_TANH : U_GELU, x, 0, 0); }
zl_tensor *zl_silu(zl_tensor *x) { return unary(U_SILU, x, 0, 0); }
zl_tensor *zl_sin(zl_tensor *x) { return unary(U_SIN, x, 0, 0); }
zl_tensor *zl_cos(zl_tensor *x) { return unary(U_COS, x, 0, 0); }
zl_tensor *zl_log1p(zl_tensor *x) { return unary(U_LOG1P, x, 0, 0); }
zl_tensor *zl_softplus(zl_tensor *x, double beta, double threshold) { return unary(U_SOFTPLUS, x, beta, threshold); }
zl_tensor *zl_leaky_relu(zl_tensor *x, double slope) { return unary(U_LEAKY_RELU, x, slope, 0); }

zl_tensor *zl_clamp(zl_tensor *x, double lo, double hi)
{
    if (isnan(lo) || isnan(hi)) {
        zl_error(ZL_EINVAL, "clamp: the bounds must not be NaN (got %g and %g)", lo, hi);
        return NULL;
    }
    return unary(U_CLAMP, x, lo, hi);
}
