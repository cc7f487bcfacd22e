/* mse_loss (engine/ops/cpu/loss.c) per element: the squared difference, and
 * the gradient k * g * (x - t) (the target's is its negation), written as
 * the CPU writes them, so both round the same way. The sum over elements for
 * mean and sum is taken on the host, in the CPU's order. */
#ifndef ZL_MATH_MSE_H
#define ZL_MATH_MSE_H

#include "hd.h"

static inline ZL_HD float zlm_mse_sq(float x, float t)
{
    float d = x - t;
    return d * d;
}

/* k: 2 / count for mean, 2 otherwise; g the loss's gradient at this element
 * (reduction none) or its one value. */
static inline ZL_HD float zlm_mse_grad(float x, float t, float g, float k) { return k * g * (x - t); }

#endif
