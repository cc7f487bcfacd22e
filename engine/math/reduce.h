/* Reductions' math (engine/ops/cpu/reduce.c) in the CPU's order: over one
 * dim, each output sums its d inputs in f32 from first to last (mean divides
 * after) and max and min scan them first to last; over all elements, fixed 4096-
 * element chunks summed in double, then the chunk sums in order. The host
 * build gives the CPU's bits; so does a kernel that keeps these orders. */
#ifndef ZL_MATH_REDUCE_H
#define ZL_MATH_REDUCE_H

#include "hd.h"

/* reduce.c's kinds. */
enum { ZLM_R_SUM, ZLM_R_MEAN, ZLM_R_MAX, ZLM_R_ARGMAX, ZLM_R_MIN, ZLM_R_ARGMIN };

/* Whether kind picks the lowest element rather than the highest. */
static inline ZL_HD bool zlm_reduce_lowest(int kind) { return kind == ZLM_R_MIN || kind == ZLM_R_ARGMIN; }

/* ops/util.c's chunk of zli_sum_fixed. */
#define ZLM_SUM_CHUNK 4096

/* Output (o, i) of x [outer, d, inner] summed over d (divided by d for mean). */
static inline ZL_HD float zlm_reduce_sum(const float *x, int64_t d, int64_t inner, int64_t o, int64_t i, bool mean)
{
    const float *p = x + o * d * inner + i;
    float s = 0.0f;
    for (int64_t k = 0; k < d; k++) s += p[k * inner];
    return mean ? s / (float)d : s;
}

/* Whether v, seen after best, takes its place: a larger value (a smaller
 * one when lowest), or the first NaN. */
static inline ZL_HD bool zlm_pick_replaces(float v, float best, bool lowest)
{
    return (lowest ? v < best : v > best) || (isnan(v) && !isnan(best));
}

/* Output (o, i) of x [outer, d, inner] (d >= 1) maxed (minned when lowest)
 * over d; *at [out] its position: the first NaN, else the first extreme. */
static inline ZL_HD float zlm_reduce_pick(const float *x, int64_t d, int64_t inner, int64_t o, int64_t i, bool lowest,
                                          int64_t *at)
{
    const float *p = x + o * d * inner + i;
    float best = p[0];
    int64_t bi = 0;
    for (int64_t k = 1; k < d; k++)
        if (zlm_pick_replaces(p[k * inner], best, lowest)) { best = p[k * inner]; bi = k; }
    *at = bi;
    return best;
}

/* Whether candidate (va at ia) wins over (vb at ib) by the scan's rule: a
 * NaN over a number, a larger number (a smaller one when lowest), on a tie
 * the earlier position. The rule is associative and commutative, so a tree
 * of these in any shape picks the scan's element, and a kernel may split
 * the scan. */
static inline ZL_HD bool zlm_pick_prefer(float va, int64_t ia, float vb, int64_t ib, bool lowest)
{
    bool na = isnan(va), nb = isnan(vb);
    if (na != nb) return na;
    if (!na && va != vb) return lowest ? va < vb : va > vb;
    return ia < ib;
}

/* Chunk c of x [n] summed in double, in order (util.c's chunk_sum). */
static inline ZL_HD double zlm_chunk_sum(const float *x, int64_t n, int64_t c)
{
    int64_t lo = c * ZLM_SUM_CHUNK, hi = lo + ZLM_SUM_CHUNK < n ? lo + ZLM_SUM_CHUNK : n;
    double s = 0;
    for (int64_t i = lo; i < hi; i++) s += x[i];
    return s;
}

static inline ZL_HD int64_t zlm_sum_chunks(int64_t n) { return (n + ZLM_SUM_CHUNK - 1) / ZLM_SUM_CHUNK; }

/* The sum of the chunk sums part [nchunks], divided by div in double (a
 * mean's count, a loss's weight total, 1 for the sum itself). */
static inline ZL_HD float zlm_sum_finish(const double *part, int64_t nchunks, double div)
{
    double s = 0;
    for (int64_t c = 0; c < nchunks; c++) s += part[c];
    return (float)(s / div);
}

/* Element j of the gradient of x [outer, len, inner] from g [outer, inner]:
 * sum copies it, mean divides it by len, max and min send it to the
 * position idx [outer, inner] names. A reduction over all elements is outer = inner = 1. */
static inline ZL_HD float zlm_reduce_backward(int kind, const float *g, const int64_t *idx, int64_t len, int64_t inner,
                                              int64_t j)
{
    int64_t i = j % inner, k = j / inner % len, o = j / inner / len;
    float gv = g[o * inner + i];
    if (kind == ZLM_R_SUM) return gv;
    if (kind == ZLM_R_MEAN) return gv / (float)len;
    return idx[o * inner + i] == k ? gv : 0.0f;
}

#endif
