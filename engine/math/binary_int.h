/* The binary ops on integer operands (engine/ops/cpu/binary.c's binary_int):
 * computed in double, exact for values up to 2^53, and stored in the result's
 * dtype as core converts (saturating; bool is nonzero; a true division gives
 * f32). Each operand is read through its own broadcast view. */
#ifndef ZL_MATH_BINARY_INT_H
#define ZL_MATH_BINARY_INT_H

#include "binary.h"
#include "strided.h"

static inline ZL_HD double zlm_binary_int(int kind, double x, double y)
{
    switch (kind) {
    case ZLM_B_ADD: return x + y;
    case ZLM_B_SUB: return x - y;
    case ZLM_B_MUL: return x * y;
    case ZLM_B_DIV: return x / y;
    case ZLM_B_POW: return pow(x, y);
    case ZLM_B_EQ: return x == y;
    case ZLM_B_LT: return x < y;
    case ZLM_B_GT: return x > y;
    case ZLM_B_NE: return x != y;
    case ZLM_B_LE: return x <= y;
    default: return x >= y;
    }
}

/* Element i of out (contiguous, odt) = element i of the view va over a (adt)
 * (op) element i of the view vb over b (bdt). */
static inline ZL_HD void zlm_binary_int_elem(int kind, const zlm_view *va, const void *a, int adt, const zlm_view *vb,
                                             const void *b, int bdt, void *out, int odt, int64_t i)
{
    double x = zlm_get64(a, adt, zlm_view_offset(va, i)), y = zlm_get64(b, bdt, zlm_view_offset(vb, i));
    zlm_set64(out, odt, i, zlm_binary_int(kind, x, y));
}

#endif
