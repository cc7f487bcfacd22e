/* where and masked_fill's element (engine/ops/cpu/select.c): one of two
 * sources picked by a bool/u8 condition, each read through its strides (0 on
 * broadcast dims), copied as raw bytes, so every dtype keeps its bits. */
#ifndef ZL_MATH_SELECT_H
#define ZL_MATH_SELECT_H

#include "hd.h"

/* Shape and the strides (elements) the condition and both sources are read
 * through, outermost first. */
typedef struct zlm_select {
    int ndim;              /* 0..8 */
    int64_t shape[8];
    int64_t sc[8], sa[8], sb[8];
} zlm_select;

/* out [shape] (contiguous, es bytes an element: 1, 2, 4 or 8), element i =
 * cond ? a : b. */
static inline ZL_HD void zlm_select_elem(const zlm_select *s, const uint8_t *cond, const void *a, const void *b,
                                         int es, void *out, int64_t i)
{
    int64_t oc = 0, oa = 0, ob = 0, rem = i;
    for (int d = s->ndim - 1; d >= 0; d--) {
        int64_t k = rem % s->shape[d];
        rem /= s->shape[d];
        oc += k * s->sc[d];
        oa += k * s->sa[d];
        ob += k * s->sb[d];
    }
    const char *src = cond[oc] ? (const char *)a + oa * es : (const char *)b + ob * es;
    char *dst = (char *)out + i * es;
    /* A constant size lets memcpy become one load and store. */
    switch (es) {
    case 1: memcpy(dst, src, 1); break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

#endif
