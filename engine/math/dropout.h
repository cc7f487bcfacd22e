/* dropout's per-element math (engine/ops/cpu/dropout.c): an element is kept
 * when the generator's uniform draw at its counter is at least p, and a kept
 * one is scaled by 1/(1-p); backward routes the gradient through the same
 * mask. Draw and comparison are exact, so every device keeps the host's mask. */
#ifndef ZL_MATH_DROPOUT_H
#define ZL_MATH_DROPOUT_H

#include "rng.h"

/* 1 when the element at `counter` survives a dropout of probability p. */
static inline ZL_HD uint8_t zlm_dropout_keep(uint64_t seed, uint64_t counter, float p)
{
    return zlm_rand_u01(seed, counter) >= p;
}

/* y from x (forward) or gx from g (backward). */
static inline ZL_HD float zlm_dropout_apply(uint8_t keep, float x, float scale) { return keep ? x * scale : 0.0f; }

#endif
