/* rotary's per-element math (engine/ops/cpu/rotary.c): element j of a row of
 * D = 2h, first when j < h, from a and c at j, a at its partner (j + h or
 * j - h) and s: forward (sign -1) y = a c + rotate_half(a) s with s read at
 * j; backward (sign +1, g in a) s is read at the partner, which is
 * rotate_half's transpose applied to g s. */
#ifndef ZL_MATH_ROTARY_H
#define ZL_MATH_ROTARY_H

#include "hd.h"

static inline ZL_HD float zlm_rotary(bool first, float a, float c, float ap, float sv, float sign)
{
    return first ? a * c + sign * ap * sv : a * c - sign * ap * sv;
}

#endif
