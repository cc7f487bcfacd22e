/* Unary elementwise ops and their fused backward kernels: each backward is one
 * pass over (x, y, g) rather than a chain of elementwise ops. */
#include <math.h>
#include <string.h>
#include "../device_kernels.h"

enum { U_NEG, U_EXP, U_LOG, U_SQRT, U_TANH, U_SIGMOID, U_RELU, U_ABS, U_POW, U_AFFINE, U_GELU, U_GELU_TANH };

static const char *const names[] = {"neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs",
                                    "pow", "affine", "gelu", "gelu"};

#define SQRT_2_OVER_PI 0.7978845608028654f
#define INV_SQRT_2 0.7071067811865476f

static void forward_kernel(int kind, int64_t n, const float *restrict x, float *restrict y, float p0, float p1)
{
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], r;
        switch (kind) {
        case U_NEG: r = -v; break;
        case U_EXP: r = expf(v); break;
        case U_LOG: r = logf(v); break;
        case U_SQRT: r = sqrtf(v); break;
        case U_TANH: r = tanhf(v); break;
        case U_SIGMOID: r = 1.0f / (1.0f + expf(-v)); break;
        case U_RELU: r = v > 0.0f ? v : 0.0f; break;
        case U_ABS: r = fabsf(v); break;
        case U_POW: r = powf(v, p0); break;
        case U_AFFINE: r = v * p0 + p1; break;
        case U_GELU: r = 0.5f * v * (1.0f + erff(v * INV_SQRT_2)); break;
        default: r = 0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + 0.044715f * v * v * v))); break;
        }
        y[i] = r;
    }
}

/* gx = g * dy/dx, from x (input), y (output) and the op's parameters. */
static void backward_kernel(int kind, int64_t n, const float *restrict x, const float *restrict y,
                            const float *restrict g, float *restrict gx, float p0)
{
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], d;
        switch (kind) {
        case U_NEG: d = -1.0f; break;
        case U_EXP: d = y[i]; break;
        case U_LOG: d = 1.0f / v; break;
        case U_SQRT: d = 0.5f / y[i]; break;
        case U_TANH: d = 1.0f - y[i] * y[i]; break;
        case U_SIGMOID: d = y[i] * (1.0f - y[i]); break;
        case U_RELU: d = v > 0.0f ? 1.0f : 0.0f; break;
        case U_ABS: d = v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f); break;
        case U_POW: d = p0 == 0.0f ? 0.0f : p0 * powf(v, p0 - 1.0f); break;
        case U_AFFINE: d = p0; break;
        case U_GELU: {
            float cdf = 0.5f * (1.0f + erff(v * INV_SQRT_2));
            float pdf = expf(-0.5f * v * v) * 0.3989422804014327f;
            d = cdf + v * pdf;
            break;
        }
        default: {
            float u = SQRT_2_OVER_PI * (v + 0.044715f * v * v * v);
            float t = tanhf(u);
            float du = SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v);
            d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
            break;
        }
        }
        gx[i] = g[i] * d;
    }
}

static zl_status unary_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    int kind = (int)n->i[0];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    zl_tensor *in[2] = {n->inputs[0], g};
    int on = zli_op_device(names[kind], 2, in, &k, &index);
    if (on < 0) return zli_last_code();
    zl_tensor *x = zli_f32c(n->inputs[0]);
    zl_tensor *y = n->saved[0] ? zli_f32c(n->saved[0]) : NULL;
    zl_tensor *gc = zli_f32c(g);
    zl_tensor *gx = x && gc && (y || !n->saved[0]) ? zli_new_f32_like(g, g->ndim, g->shape) : NULL;
    zl_status st = gx ? ZL_OK : ZL_ENOMEM;
    if (gx && on)
        st = k->unary_backward(index, kind, zl_tensor_numel(g), zl_tensor_data(x), y ? zl_tensor_data(y) : NULL,
                               zl_tensor_data(gc), zl_tensor_data(gx), (float)n->f[0]);
    else if (gx)
        backward_kernel(kind, zl_tensor_numel(g), zl_tensor_data(x), y ? zl_tensor_data(y) : NULL,
                        zl_tensor_data(gc), zl_tensor_data(gx), (float)n->f[0]);
    zl_tensor_release(x);
    zl_tensor_release(y);
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    return ZL_OK;
}

static zl_tensor *unary(int kind, zl_tensor *x, double p0, double p1)
{
    const char *op = names[kind];
    const zli_dev_kernels *k = NULL;
    int index = 0, on;
    if (zli_op_begin(op, 1, &x)) return NULL;
    if ((on = zli_op_device(op, 1, &x, &k, &index)) < 0) return zli_op_end(op, 1, &x, NULL);
    zl_tensor *xf = zli_f32c(x);
    zl_tensor *y = xf ? zli_new_f32_like(x, x->ndim, x->shape) : NULL;
    if (y && on && k->unary(index, kind, zl_tensor_numel(x), zl_tensor_data(xf), zl_tensor_data(y), (float)p0,
                            (float)p1)) {
        zl_tensor_release(y);
        y = NULL;
    } else if (y && !on) {
        forward_kernel(kind, zl_tensor_numel(x), zl_tensor_data(xf), zl_tensor_data(y), (float)p0, (float)p1);
    }
    zl_tensor_release(xf);
    zl_dtype rdt = zl_dtype_traits_of(x->dtype)->is_float ? x->dtype : ZL_DTYPE_F32;
    if (kind == U_NEG || kind == U_ABS || kind == U_RELU) rdt = x->dtype == ZL_DTYPE_BOOL ? ZL_DTYPE_F32 : x->dtype;
    y = zli_cast_result(y, rdt);
    zl_node *n;
    if (y && zl_dtype_traits_of(rdt)->is_float) {
        if (zli_record(y, op, unary_backward, 1, &x, &n)) { zl_tensor_release(y); y = NULL; }
        else if (n) {
            n->i[0] = kind;
            n->f[0] = p0;
            bool needs_y = kind == U_EXP || kind == U_SQRT || kind == U_TANH || kind == U_SIGMOID;
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
