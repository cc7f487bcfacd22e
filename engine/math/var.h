/* var and std (engine/ops/reduce.c), in double, two passes (the mean, then
 * the squares about it) so that equal values give exactly 0. Output o
 * reduces count elements of contiguous x: its first at kept's offset o (a
 * view over the kept dims with x's strides), the rest red's offsets from it
 * (a view over the reduced dims), in x's row-major order; the square is
 * added by one fused multiply-add, written out so the host and a kernel
 * round it alike. */
#ifndef ZL_MATH_VAR_H
#define ZL_MATH_VAR_H

#include "strided.h"

/* mean[o] and m2[o] (the sum of squared deviations) of output o. */
static inline ZL_HD void zlm_var_moments(int64_t o, int64_t count, const zlm_view *kept, const zlm_view *red,
                                         const float *x, double *mean, double *m2)
{
    int64_t base = zlm_view_offset(kept, o);
    double s = 0, q = 0;
    for (int64_t j = 0; j < count; j++) s += x[base + zlm_view_offset(red, j)];
    double mu = s / (double)count;
    for (int64_t j = 0; j < count; j++) {
        double e = x[base + zlm_view_offset(red, j)] - mu;
        q = fma(e, e, q);
    }
    mean[o] = mu;
    m2[o] = q;
}

/* The squares' divisor, count - correction; 0 when that is not positive, so
 * the variance is inf, or NaN over no spread (torch's). */
static inline ZL_HD double zlm_var_divisor(int64_t count, double correction)
{
    return (double)count > correction ? (double)count - correction : 0.0;
}

static inline ZL_HD float zlm_var_value(double m2, double div, bool is_std)
{
    return (float)(is_std ? sqrt(m2 / div) : m2 / div);
}

/* x's gradient from its output's g, mean and m2, torch's: 2 (x - mean) /
 * (count - correction) for var, unclamped; std's divides by 2 std more, and
 * gives 0 where std is 0. */
static inline ZL_HD float zlm_var_grad(float g, float x, double mean, double m2, int64_t count, double correction,
                                       bool is_std)
{
    double dof = (double)count - correction, f = 2.0 / dof;
    if (is_std) {
        double sd = sqrt(m2 / zlm_var_divisor(count, correction));
        f = sd == 0 ? 0.0 : 1.0 / (dof * sd);
    }
    return (float)(g * f * (x - mean));
}

#endif
