/* The softmax inside attention (engine/ops/cpu/attention.c): the scores come
 * from a GEMM already multiplied by scale; a row r of [B*Tq, Tk] sees keys
 * 0..r % Tq with the causal mask (the rest get probability 0), and backward
 * turns dP into dS = P * (dP - <dP, P>). Unlike softmax.h, the CPU sums these
 * rows in f32 from left to right; the host loops here do the same, so the host
 * build matches it bit for bit, while a kernel's tree reduction changes only
 * the f32 rounding of the sum (a few ulp for rows of a few thousand keys). */
#ifndef ZL_CUDA_MATH_ATTENTION_H
#define ZL_CUDA_MATH_ATTENTION_H

#include "hd.h"

/* Scale of 0 or less means 1 / sqrt(head dim), as zl_attention takes it. */
static inline ZL_HD double zlm_attention_scale(double scale, int64_t d) { return scale > 0 ? scale : 1.0 / sqrt((double)d); }

/* Keys row r may see. */
static inline ZL_HD int64_t zlm_attention_limit(int64_t r, int64_t tq, int64_t tk, bool causal)
{
    return causal ? r % tq + 1 : tk;
}

static inline ZL_HD float zlm_attention_exp(float s, float m) { return expf(s - m); }
static inline ZL_HD float zlm_attention_grad(float p, float dp, float dot) { return p * (dp - dot); }

/* s [tk] [in/out]: one row of scores to probabilities. */
static inline ZL_HD void zlm_attention_softmax_row(float *s, int64_t lim, int64_t tk)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < lim; j++) m = s[j] > m ? s[j] : m;
    float sum = 0.0f;
    for (int64_t j = 0; j < lim; j++) {
        s[j] = zlm_attention_exp(s[j], m);
        sum += s[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < lim; j++) s[j] *= inv;
    for (int64_t j = lim; j < tk; j++) s[j] = 0.0f;
}

/* dp [tk] [in/out] to dS, p [tk] the row's probabilities. */
static inline ZL_HD void zlm_attention_softmax_row_backward(float *dp, const float *p, int64_t tk)
{
    float dot = 0.0f;
    for (int64_t j = 0; j < tk; j++) dot += dp[j] * p[j];
    for (int64_t j = 0; j < tk; j++) dp[j] = zlm_attention_grad(p[j], dp[j], dot);
}

#endif
