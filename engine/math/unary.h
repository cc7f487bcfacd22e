/* The unary elementwise ops of engine/ops/cpu/unary.c, one element at a time:
 * forward y = f(x) and backward gx = g * f'(x), with the CPU's formulas (the
 * derivative from the saved output y where the CPU uses it). */
#ifndef ZL_MATH_UNARY_H
#define ZL_MATH_UNARY_H

#include "erf.h"
#include "expf.h"

/* The CPU's order: ZLM_U_GELU is the erf form, ZLM_U_GELU_TANH the tanh one. */
enum {
    ZLM_U_NEG, ZLM_U_EXP, ZLM_U_LOG, ZLM_U_SQRT, ZLM_U_TANH, ZLM_U_SIGMOID, ZLM_U_RELU, ZLM_U_ABS,
    ZLM_U_POW, ZLM_U_AFFINE, ZLM_U_GELU, ZLM_U_GELU_TANH, ZLM_U_SILU, ZLM_U_SIN, ZLM_U_COS, ZLM_U_LOG1P,
    ZLM_U_SOFTPLUS, ZLM_U_LEAKY_RELU, ZLM_U_CLAMP
};

#define ZLM_SQRT_2_OVER_PI 0.7978845608028654f
#define ZLM_INV_SQRT_2 0.7071067811865476f
#define ZLM_INV_SQRT_2PI 0.3989422804014327f
#define ZLM_GELU_C 0.044715f

/* log(1 + exp(z)) without overflow for large z. */
static inline ZL_HD float zlm_log1p_exp(float z) { return fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z))); }

/* 1 / (1 + exp(-v)) through zlm_expf, so that a loop of it vectorizes (SiLU
 * runs over every LLaMA MLP activation); exp(-v) overflowing to inf gives 0. */
static inline ZL_HD float zlm_sigmoid(float v) { return 1.0f / (1.0f + zlm_expf(-v)); }

/* Where clamp's gradient passes: strictly inside the bounds (a bound at
 * infinity is open), as torch's clamp with number bounds; NaN gets none. */
static inline ZL_HD bool zlm_clamp_inside(float v, float lo, float hi)
{
    return (lo == -INFINITY ? v == v : v > lo) && (hi == INFINITY ? v == v : v < hi);
}

/* p0 is the exponent (pow), the scale (affine), beta (softplus), the
 * negative slope (leaky_relu) or the lower bound (clamp); p1 the affine
 * shift, softplus's threshold or clamp's upper bound. */
static inline ZL_HD float zlm_unary_forward(int kind, float v, float p0, float p1)
{
    switch (kind) {
    case ZLM_U_NEG: return -v;
    case ZLM_U_EXP: return expf(v);
    case ZLM_U_LOG: return logf(v);
    case ZLM_U_SQRT: return sqrtf(v);
    case ZLM_U_TANH: return tanhf(v);
    case ZLM_U_SIGMOID: return zlm_sigmoid(v);
    case ZLM_U_RELU: return v > 0.0f || v != v ? v : 0.0f;   /* NaN passes, as in torch */
    case ZLM_U_ABS: return fabsf(v);
    case ZLM_U_POW: return powf(v, p0);
    case ZLM_U_AFFINE: return v * p0 + p1;
    case ZLM_U_GELU: return v * zlm_normal_cdf(v);
    case ZLM_U_GELU_TANH: return 0.5f * v * (1.0f + tanhf(ZLM_SQRT_2_OVER_PI * (v + ZLM_GELU_C * v * v * v)));
    case ZLM_U_SILU: return v / (1.0f + zlm_expf(-v));
    case ZLM_U_SIN: return sinf(v);
    case ZLM_U_COS: return cosf(v);
    case ZLM_U_LOG1P: return log1pf(v);
    case ZLM_U_SOFTPLUS: return v * p0 > p1 ? v : zlm_log1p_exp(v * p0) / p0;
    case ZLM_U_LEAKY_RELU: return v > 0.0f ? v : v * p0;
    default: return v != v ? v : fminf(fmaxf(v, p0), p1);   /* clamp; NaN stays NaN */
    }
}

/* x the input, y the forward's output as stored (exp, sqrt, tanh and sigmoid
 * differentiate through it; the others ignore it), g the output's gradient. */
static inline ZL_HD float zlm_unary_backward(int kind, float v, float y, float g, float p0, float p1)
{
    float d;
    switch (kind) {
    case ZLM_U_NEG: d = -1.0f; break;
    case ZLM_U_EXP: d = y; break;
    case ZLM_U_LOG: d = 1.0f / v; break;
    case ZLM_U_SQRT: d = 0.5f / y; break;
    case ZLM_U_TANH: d = 1.0f - y * y; break;
    case ZLM_U_SIGMOID: d = y * (1.0f - y); break;
    case ZLM_U_RELU: d = v <= 0.0f ? 0.0f : 1.0f; break;   /* NaN's gradient passes, as torch's */
    case ZLM_U_ABS: d = v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f); break;
    case ZLM_U_POW: d = p0 == 0.0f ? 0.0f : p0 * powf(v, p0 - 1.0f); break;
    case ZLM_U_AFFINE: d = p0; break;
    case ZLM_U_GELU: {
        float cdf = zlm_normal_cdf(v);
        float pdf = zlm_expf_nonpos(-0.5f * v * v) * ZLM_INV_SQRT_2PI;
        d = cdf + v * pdf;
        break;
    }
    case ZLM_U_GELU_TANH: {
        float u = ZLM_SQRT_2_OVER_PI * (v + ZLM_GELU_C * v * v * v);
        float t = tanhf(u);
        float du = ZLM_SQRT_2_OVER_PI * (1.0f + 3.0f * ZLM_GELU_C * v * v);
        d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
        break;
    }
    case ZLM_U_SILU: {
        float s = zlm_sigmoid(v);
        d = s * (1.0f + v * (1.0f - s));
        break;
    }
    case ZLM_U_SIN: d = cosf(v); break;
    case ZLM_U_COS: d = -sinf(v); break;
    case ZLM_U_LOG1P: d = 1.0f / (1.0f + v); break;
    /* The sigmoid of beta x: exp(beta x) / (exp(beta x) + 1) without its overflow. */
    case ZLM_U_SOFTPLUS: d = v * p0 > p1 ? 1.0f : 1.0f / (1.0f + expf(-v * p0)); break;
    case ZLM_U_LEAKY_RELU: d = v > 0.0f ? 1.0f : p0; break;
    /* A select, not a product: the gradient outside the bounds is 0 even where g is inf or NaN. */
    default: return zlm_clamp_inside(v, p0, p1) ? g : 0.0f;
    }
    return g * d;
}

/* Whether backward reads the saved output rather than the input. */
static inline ZL_HD bool zlm_unary_needs_output(int kind)
{
    return kind == ZLM_U_EXP || kind == ZLM_U_SQRT || kind == ZLM_U_TANH || kind == ZLM_U_SIGMOID;
}

#endif
