/* The fused optimizers' per-element updates (engine/optim/adam.c, lamb.c,
 * sgd.c) and the constants each step derives from its hyperparameters in
 * double and rounds to f32 once. The multiply-adds are explicit fmaf, in the
 * shape of the CPU's AVX2/AVX-512 kernels, so host, those kernels and a GPU
 * (where fmaf is one instruction) give the same bits; the CPU's scalar kernel
 * rounds some products separately and agrees to float rounding. */
#ifndef ZL_MATH_OPTIM_H
#define ZL_MATH_OPTIM_H

#include "hd.h"

/* ---- Adam / AdamW (zlua/optim.h has the update in full) ---- */
typedef struct zlm_adam_consts {
    float scale;       /* grad_scale */
    float l2;          /* weight_decay for Adam's L2 term, 0 for AdamW */
    float omb1, omb2;  /* 1 - beta1, 1 - beta2 */
    float bc2_rsqrt;   /* 1 / sqrt(1 - beta2^t), 1 without bias correction */
    float eps;
    float decay;       /* -lr * weight_decay for AdamW's decoupled decay, 0 for Adam */
    float neg_step;    /* -lr / (1 - beta1^t) */
} zlm_adam_consts;

static inline ZL_HD zlm_adam_consts zlm_adam_make(double lr, double beta1, double beta2, double eps, double wd,
                                                  bool adamw_mode, bool bias_correction, int64_t step,
                                                  double grad_scale)
{
    double bc1 = 1, bc2 = 1;
    if (bias_correction) {
        bc1 = 1 - pow(beta1, (double)step);
        bc2 = 1 - pow(beta2, (double)step);
    }
    zlm_adam_consts c;
    c.scale = (float)grad_scale;
    c.l2 = (float)(adamw_mode ? 0 : wd);
    c.omb1 = (float)(1 - beta1);
    c.omb2 = (float)(1 - beta2);
    c.bc2_rsqrt = (float)(1 / sqrt(bc2));
    c.eps = (float)eps;
    c.decay = (float)(adamw_mode ? -lr * wd : 0);
    c.neg_step = (float)(-lr / bc1);
    return c;
}

/* One element: p, m, v [in/out], g the gradient as read (before grad_scale).
 * The moments move as m += (1 - beta1) * (g - m), adam.c says why. */
static inline ZL_HD void zlm_adam_update(const zlm_adam_consts *c, float *p, float *m, float *v, float g_in)
{
    float pi = *p;
    float g = fmaf(c->l2, pi, g_in * c->scale);
    float mi = fmaf(c->omb1, g - *m, *m);
    float vi = fmaf(c->omb2, fmaf(g, g, -*v), *v);
    float denom = fmaf(sqrtf(vi), c->bc2_rsqrt, c->eps);
    *p = pi + fmaf(c->neg_step, mi / denom, c->decay * pi);
    *m = mi;
    *v = vi;
}

/* ---- SGD: torch.optim.SGD with momentum, dampening, nesterov, weight decay ---- */
typedef struct zlm_sgd_consts {
    float scale, wd, momentum, damp1, neg_lr;   /* damp1 = 1 - dampening */
    bool use_momentum, first, nesterov;         /* first: step 1 starts the buffer from g */
} zlm_sgd_consts;

static inline ZL_HD zlm_sgd_consts zlm_sgd_make(double lr, double momentum, double dampening, double wd,
                                                bool nesterov, int64_t step, double grad_scale)
{
    zlm_sgd_consts c;
    c.scale = (float)grad_scale;
    c.wd = (float)wd;
    c.momentum = (float)momentum;
    c.damp1 = (float)(1 - dampening);
    c.neg_lr = (float)-lr;
    c.use_momentum = momentum != 0;
    c.first = step == 1;
    c.nesterov = nesterov;
    return c;
}

/* p [in/out]; buf [in/out] the momentum buffer, untouched without momentum. */
static inline ZL_HD void zlm_sgd_update(const zlm_sgd_consts *c, float *p, float *buf, float g_in)
{
    float pi = *p;
    float g = fmaf(c->wd, pi, g_in * c->scale);
    if (c->use_momentum) {
        float b = c->first ? g : fmaf(c->momentum, *buf, c->damp1 * g);
        *buf = b;
        g = c->nesterov ? fmaf(c->momentum, b, g) : b;
    }
    *p = fmaf(c->neg_lr, g, pi);
}

/* ---- Lamb: DeepSpeed's FusedLamb, in two passes around the trust ratio ---- */
typedef struct zlm_lamb_consts {
    float scale, omb1, omb2, eps, wd;
} zlm_lamb_consts;

static inline ZL_HD zlm_lamb_consts zlm_lamb_make(double beta1, double beta2, double eps, double wd, double grad_scale)
{
    zlm_lamb_consts c;
    c.scale = (float)grad_scale;
    c.omb1 = (float)(1 - beta1);
    c.omb2 = (float)(1 - beta2);
    c.eps = (float)eps;
    c.wd = (float)wd;
    return c;
}

/* u = m / (sqrt(v) + eps) + wd * p: both passes compute it with this one
 * expression, so pass two applies the u whose norm pass one measured. */
static inline ZL_HD float zlm_lamb_u(const zlm_lamb_consts *c, float p, float m, float v)
{
    return fmaf(c->wd, p, m / (sqrtf(v) + c->eps));
}

/* Pass one, one element: m, v [in/out]; sq[0] += p^2, sq[1] += u^2 in double. */
static inline ZL_HD void zlm_lamb_moments(const zlm_lamb_consts *c, float p, float *m, float *v, float g_in,
                                          double sq[2])
{
    float g = g_in * c->scale;
    float mi = fmaf(c->omb1, g - *m, *m);
    float vi = fmaf(c->omb2, fmaf(g, g, -*v), *v);
    float u = zlm_lamb_u(c, p, mi, vi);
    *m = mi;
    *v = vi;
    sq[0] += (double)p * p;
    sq[1] += (double)u * u;
}

/* The trust ratio from a whole tensor's sums (zl_optim_lamb_trust_ratio):
 * |p| / |u| clamped to [min_coeff, max_coeff], 1 when either norm is 0. */
static inline ZL_HD double zlm_lamb_trust_ratio(double p_sq, double u_sq, double min_coeff, double max_coeff)
{
    double pn = sqrt(p_sq), un = sqrt(u_sq);
    if (pn == 0 || un == 0) return 1;
    double r = pn / un;
    if (r > max_coeff) r = max_coeff;
    if (r < min_coeff) r = min_coeff;
    return r;
}

/* -(rate * ratio), rate = lr * sqrt(1 - beta2^t) / (1 - beta1^t) (lr without
 * bias correction): the one factor pass two multiplies u by. */
static inline ZL_HD float zlm_lamb_neg_rate(double lr, double beta1, double beta2, bool bias_correction,
                                            int64_t step, double ratio)
{
    double rate = lr;
    if (bias_correction) rate *= sqrt(1 - pow(beta2, (double)step)) / (1 - pow(beta1, (double)step));
    return (float)(-rate * ratio);
}

/* Pass two, one element: p [in/out] from p, m, v. */
static inline ZL_HD void zlm_lamb_apply(const zlm_lamb_consts *c, float neg_rate, float *p, float m, float v)
{
    *p = fmaf(neg_rate, zlm_lamb_u(c, *p, m, v), *p);
}

#endif
