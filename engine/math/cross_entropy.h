/* cross_entropy fused over the vocabulary (the CPU's kernel in
 * engine/ops/cpu/loss.c runs these rows, its max vectorized), one row of logits at a time: lse = max +
 * log(sum exp(x - max)), loss = lse - x[target], and backward scale *
 * (softmax - onehot) rebuilt from lse. A row whose target is
 * ignore_index has loss 0 and gradient 0. torch's options (class weights
 * and label smoothing) change a row's loss and gradient as zlm_ce_opts says. */
#ifndef ZL_MATH_CROSS_ENTROPY_H
#define ZL_MATH_CROSS_ENTROPY_H

#include "softmax.h"
#include "expf.h"
#include "index_fault.h"

static inline ZL_HD float zlm_ce_lse(float m, double sum) { return m + (float)log(sum); }
/* x - max and x - lse are never above 0 (lse >= max; NaN stays NaN). */
static inline ZL_HD float zlm_ce_exp(float x, float m) { return zlm_expf_nonpos(x - m); }

/* Gradient of class c: scale * exp(x - lse), less scale at the target (the
 * CPU writes the first and then subtracts, two roundings). */
static inline ZL_HD float zlm_ce_grad(float x, float lse, float scale, bool is_target)
{
    float v = scale * zlm_expf_nonpos(x - lse);
    return is_target ? v - scale : v;
}

/* The factor of a row's gradient: the loss's gradient g_r (reduction none) or
 * g * k, with k = 1 / count of rows not ignored (mean) or 1 (sum). */
static inline ZL_HD float zlm_ce_scale(float g, float k) { return g * k; }
static inline ZL_HD float zlm_ce_mean_factor(int64_t count) { return (float)(1.0 / (double)count); }

/* Row r's target checked where the kernels run, before them: one outside
 * [0, ncls) other than ignore is noted in f and made ignore (its row then
 * has loss and gradient 0); counted[r] [out] is 1 for a row a mean counts,
 * else 0. */
static inline ZL_HD void zlm_ce_check_target(zlm_index_fault *f, int64_t r, int64_t *target, int64_t ignore,
                                             int64_t ncls, float *counted)
{
    int64_t t = target[r];
    bool ok = t == ignore || zlm_index_in(f, ZLM_FAULT_TARGET, r, t, ncls, ignore);
    if (!ok) target[r] = ignore;
    counted[r] = ok && t != ignore ? 1.0f : 0.0f;
}

/* A row's exponentials are summed in ZLM_CE_LANES interleaved lanes, each
 * in double, combined in lane order at the end: the loops vectorize at any
 * width up to 16 floats and the bits do not depend on it. Element c goes to
 * lane c % ZLM_CE_LANES. */
#define ZLM_CE_LANES 16

/* The row's sum, lse and loss from its max m: x [ncls] f32; *lse, *loss [out]. */
static inline ZL_HD void zlm_ce_row_from_max(int64_t ncls, const float *ZLM_RESTRICT x, float m, int64_t target,
                                             float *lse, float *loss)
{
    enum { L = ZLM_CE_LANES };
    int64_t full = ncls - ncls % L;
    double acc[L];
    for (int l = 0; l < L; l++) acc[l] = 0.0;
    for (int64_t c = 0; c < full; c += L)
        for (int l = 0; l < L; l++) acc[l] += (double)zlm_ce_exp(x[c + l], m);
    for (int64_t c = full; c < ncls; c++) acc[c - full] += (double)zlm_ce_exp(x[c], m);
    double s = 0.0;
    for (int l = 0; l < L; l++) s += acc[l];
    float v = zlm_ce_lse(m, s);
    *lse = v;
    *loss = v - x[target];
}

/* x [ncls] f32; *lse, *loss [out]. The max is exact in any order (a NaN it
 * skips still reaches the sum through exp), so the CPU op reduces it at its
 * vector's width and keeps these bits. */
static inline ZL_HD void zlm_ce_row(int64_t ncls, const float *ZLM_RESTRICT x, int64_t target, int64_t ignore,
                                    float *lse, float *loss)
{
    if (target == ignore) {
        *lse = 0.0f;
        *loss = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int64_t c = 0; c < ncls; c++) m = x[c] > m ? x[c] : m;
    zlm_ce_row_from_max(ncls, x, m, target, lse, loss);
}

/* x [ncls] f32; gx [out] [ncls] f32. */
static inline ZL_HD void zlm_ce_row_backward(int64_t ncls, const float *ZLM_RESTRICT x, int64_t target,
                                             int64_t ignore, float lse, float scale, float *ZLM_RESTRICT gx)
{
    if (target == ignore) {
        for (int64_t c = 0; c < ncls; c++) gx[c] = 0.0f;
        return;
    }
    for (int64_t c = 0; c < ncls; c++) gx[c] = scale * zlm_ce_exp(x[c], lse);
    gx[target] -= scale;
}

/* torch's options: with keep = 1 - label_smoothing and spread =
 * label_smoothing / C, a row's loss is keep * w[t] * (lse - x[t]) + spread *
 * sum_c w[c] * (lse - x[c]), and its gradient scale * ((keep * w[t] + spread *
 * wsum) * softmax - keep * w[t] * onehot(t) - spread * w). w [C] (f32, where
 * the kernel runs) or NULL for all ones; wsum the weights summed (C without). */
typedef struct zlm_ce_opts {
    const float *w;
    float keep, spread, wsum;
} zlm_ce_opts;

/* No weights, no smoothing: the plain loss and gradient above. */
static inline ZL_HD bool zlm_ce_plain(const zlm_ce_opts *o) { return !o->w && o->spread == 0.0f && o->keep == 1.0f; }
static inline ZL_HD float zlm_ce_weight(const zlm_ce_opts *o, int64_t c) { return o->w ? o->w[c] : 1.0f; }

/* One class's part of the smoothing sum, around the row's lse. */
static inline ZL_HD double zlm_ce_smooth_term(const zlm_ce_opts *o, int64_t c, double lse, float x)
{
    return (o->w ? (double)o->w[c] : 1.0) * (lse - x);
}

/* A row's loss from its plain loss and (when spread is not 0) its smoothing sum. */
static inline ZL_HD float zlm_ce_opts_loss(const zlm_ce_opts *o, int64_t target, float plain, double smooth)
{
    double v = (double)o->keep * zlm_ce_weight(o, target) * plain;
    if (o->spread != 0.0f) v += (double)o->spread * smooth;
    return (float)v;
}

/* Class c's gradient with the options (the target's written, then less scale * a). */
static inline ZL_HD float zlm_ce_opts_grad(const zlm_ce_opts *o, float x, float lse, float scale, int64_t c,
                                           int64_t target)
{
    float a = o->keep * zlm_ce_weight(o, target), p = a + o->spread * o->wsum;
    float v = scale * (p * zlm_ce_exp(x, lse) - o->spread * zlm_ce_weight(o, c));
    return c == target ? v - scale * a : v;
}

/* *loss [in/out]: a row's plain loss (from zlm_ce_row, with its *lse) made
 * the options' loss; x [ncls] f32. */
static inline ZL_HD void zlm_ce_opts_finish(const zlm_ce_opts *o, int64_t ncls, const float *ZLM_RESTRICT x,
                                            int64_t target, int64_t ignore, float lse, float *loss)
{
    if (zlm_ce_plain(o) || target == ignore) return;
    double s = 0.0;
    for (int64_t c = 0; o->spread != 0.0f && c < ncls; c++) s += zlm_ce_smooth_term(o, c, lse, x[c]);
    *loss = zlm_ce_opts_loss(o, target, *loss, s);
}

/* zlm_ce_row_backward with the options, gx rounded to gdt's precision
 * (ZLM_F32: not): the gradient of a loss asked for in f32 from half logits. */
static inline ZL_HD void zlm_ce_opts_row_backward(const zlm_ce_opts *o, int64_t ncls, const float *ZLM_RESTRICT x,
                                                  int64_t target, int64_t ignore, float lse, float scale, int gdt,
                                                  float *ZLM_RESTRICT gx)
{
    if (zlm_ce_plain(o) || target == ignore) zlm_ce_row_backward(ncls, x, target, ignore, lse, scale, gx);
    else
        for (int64_t c = 0; c < ncls; c++) gx[c] = zlm_ce_opts_grad(o, x[c], lse, scale, c, target);
    /* A loop per dtype, so that each vectorises on the host. */
    if (gdt == ZLM_BF16)
        for (int64_t c = 0; c < ncls; c++) gx[c] = zlm_round_to(gx[c], ZLM_BF16);
    else if (gdt == ZLM_F16)
        for (int64_t c = 0; c < ncls; c++) gx[c] = zlm_round_to(gx[c], ZLM_F16);
}

#endif
