/* The binary elementwise ops of engine/ops/cpu/binary.c on float operands,
 * forward and the per-element factors of backward. The CPU builds backward out
 * of whole-tensor ops (each result rounded to f32), so each factor here rounds
 * at the same steps; summing a broadcast operand's gradient down to its shape
 * is a reduction, not part of this math. */
#ifndef ZL_MATH_BINARY_H
#define ZL_MATH_BINARY_H

#include "hd.h"

enum { ZLM_B_ADD, ZLM_B_SUB, ZLM_B_MUL, ZLM_B_DIV, ZLM_B_POW, ZLM_B_EQ, ZLM_B_LT, ZLM_B_GT, ZLM_B_NE, ZLM_B_LE, ZLM_B_GE };

/* Comparisons give 1 or 0 (stored as bool by the caller). */
static inline ZL_HD float zlm_binary_forward(int kind, float a, float b)
{
    switch (kind) {
    case ZLM_B_ADD: return a + b;
    case ZLM_B_SUB: return a - b;
    case ZLM_B_MUL: return a * b;
    case ZLM_B_DIV: return a / b;
    case ZLM_B_POW: return powf(a, b);
    case ZLM_B_EQ: return a == b ? 1.0f : 0.0f;
    case ZLM_B_LT: return a < b ? 1.0f : 0.0f;
    case ZLM_B_GT: return a > b ? 1.0f : 0.0f;
    case ZLM_B_NE: return a != b ? 1.0f : 0.0f;   /* true where either is NaN */
    case ZLM_B_LE: return a <= b ? 1.0f : 0.0f;
    default: return a >= b ? 1.0f : 0.0f;
    }
}

/* d(out)/da times g, before the reduction to a's shape. */
static inline ZL_HD float zlm_binary_grad_a(int kind, float a, float b, float g)
{
    switch (kind) {
    case ZLM_B_ADD: case ZLM_B_SUB: return g;
    case ZLM_B_MUL: return g * b;
    case ZLM_B_DIV: return g / b;
    case ZLM_B_POW: {
        /* b * a^(b-1), not b * y / a, so a = 0 gives no 0/0. */
        float p = powf(a, b - 1.0f);
        return g * (p * b);
    }
    default: return 0.0f;
    }
}

/* d(out)/db times g, before the reduction to b's shape. */
static inline ZL_HD float zlm_binary_grad_b(int kind, float a, float b, float g)
{
    switch (kind) {
    case ZLM_B_ADD: return g;
    case ZLM_B_SUB: return -g;
    case ZLM_B_MUL: return g * a;
    case ZLM_B_DIV: {
        /* -a / b^2 as -(a / b) / b, the CPU's order of roundings */
        float q = a / b, q2 = q / b;
        return -(g * q2);
    }
    case ZLM_B_POW: {
        float y = powf(a, b), la = logf(a);
        return g * (y * la);
    }
    default: return 0.0f;
    }
}

#endif
