/* The softmax inside attention (engine/ops/cpu/attention.c): the scores come
 * from a GEMM already multiplied by scale; a row r of [B*Tq, Tk] is query
 * r % Tq, which with the causal mask sees keys up to r % Tq + Tk - Tq (the
 * queries being the sequence's last Tq positions; the rest get probability
 * 0), and backward turns dP into dS = P * (dP - <dP, P>). The CPU sums a row
 * in f32 in ZLM_ATT_LANES lanes, each taking every ZLM_ATT_LANES-th element,
 * the lanes then added in order: a loop it vectorises at any width with the
 * same bits. The host loops here do the same, so the host build matches it
 * bit for bit, while a kernel's tree reduction changes only the f32 rounding
 * of the sum (a few ulp for rows of a few thousand keys). exp is zlm_expf's,
 * on the host and in a kernel. */
#ifndef ZL_MATH_ATTENTION_H
#define ZL_MATH_ATTENTION_H

#include "hd.h"
#include "expf.h"
#include "strided.h"

#define ZLM_ATT_LANES 16

/* Scale of 0 means 1 / sqrt(head dim), as zl_attention takes it. */
static inline ZL_HD double zlm_attention_scale(double scale, int64_t d) { return scale > 0 ? scale : 1.0 / sqrt((double)d); }

/* Keys row r may see. */
static inline ZL_HD int64_t zlm_attention_limit(int64_t r, int64_t tq, int64_t tk, bool causal)
{
    return causal ? r % tq + 1 + tk - tq : tk;
}

/* s - m for s no greater than the row's maximum m: never positive. */
static inline ZL_HD float zlm_attention_exp(float s, float m) { return zlm_expf_nonpos(s - m); }
static inline ZL_HD float zlm_attention_grad(float p, float dp, float dot) { return p * (dp - dot); }

/* Σ a[j] * b[j] (b NULL: Σ a[j]) over n, in the lanes' order. */
static inline ZL_HD float zlm_attention_sum(const float *a, const float *b, int64_t n)
{
    float acc[ZLM_ATT_LANES] = {0};
    int64_t j = 0;
    if (b)
        for (; j + ZLM_ATT_LANES <= n; j += ZLM_ATT_LANES)
            for (int l = 0; l < ZLM_ATT_LANES; l++) acc[l] += a[j + l] * b[j + l];
    else
        for (; j + ZLM_ATT_LANES <= n; j += ZLM_ATT_LANES)
            for (int l = 0; l < ZLM_ATT_LANES; l++) acc[l] += a[j + l];
    for (int l = 0; j + l < n; l++) acc[l] += b ? a[j + l] * b[j + l] : a[j + l];
    float s = 0.0f;
    for (int l = 0; l < ZLM_ATT_LANES; l++) s += acc[l];
    return s;
}

/* The largest of s[0..n), -inf for none; NaN is never taken. The order does
 * not matter: the host's vectorised max finds the same value. */
static inline ZL_HD float zlm_attention_max(const float *s, int64_t n)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

/* s [n] [in/out]: one row of scores to probabilities, the first lim seen,
 * m their maximum; zeros up to n. */
static inline ZL_HD void zlm_attention_softmax_row_max(float *s, float m, int64_t lim, int64_t n)
{
    for (int64_t j = 0; j < lim; j++) s[j] = zlm_attention_exp(s[j], m);
    float inv = 1.0f / zlm_attention_sum(s, NULL, lim);
    for (int64_t j = 0; j < lim; j++) s[j] *= inv;
    for (int64_t j = lim; j < n; j++) s[j] = 0.0f;
}

/* s [tk] [in/out]: one row of scores to probabilities, the first lim seen. */
static inline ZL_HD void zlm_attention_softmax_row(float *s, int64_t lim, int64_t tk)
{
    zlm_attention_softmax_row_max(s, zlm_attention_max(s, lim), lim, tk);
}

/* Whether key j of score row r may be seen under a bool mask read through
 * the view mv over the scores' [rows * tk] elements (mask NULL: all). */
static inline ZL_HD bool zlm_attention_allowed(const uint8_t *mask, const zlm_view *mv, int64_t r, int64_t tk,
                                               int64_t j)
{
    return !mask || mask[zlm_view_offset(mv, r * tk + j)];
}

/* s [tk] [in/out]: score row r to probabilities, the first lim seen where
 * the mask allows (cpu/attention.c's softmax_rows: a hidden key gets 0, a
 * row that sees no key is all 0). */
static inline ZL_HD void zlm_attention_softmax_row_masked(float *s, int64_t r, int64_t lim, int64_t tk,
                                                          const uint8_t *mask, const zlm_view *mv)
{
    float m = -INFINITY;
    bool any = false;
    for (int64_t j = 0; j < lim; j++)
        if (zlm_attention_allowed(mask, mv, r, tk, j)) {
            any = true;
            m = s[j] > m ? s[j] : m;
        }
    for (int64_t j = 0; j < tk; j++)
        s[j] = any && j < lim && zlm_attention_allowed(mask, mv, r, tk, j) ? zlm_attention_exp(s[j], m) : 0.0f;
    if (!any) return;
    float inv = 1.0f / zlm_attention_sum(s, NULL, lim);
    for (int64_t j = 0; j < lim; j++) s[j] *= inv;
}

/* dp [n] [in/out] to dS, p [n] the row's probabilities. */
static inline ZL_HD void zlm_attention_softmax_row_backward(float *dp, const float *p, int64_t n)
{
    float dot = zlm_attention_sum(dp, p, n);
    for (int64_t j = 0; j < n; j++) dp[j] = zlm_attention_grad(p[j], dp[j], dot);
}

#endif
