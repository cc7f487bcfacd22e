/* gather along dim d (engine/ops/gather.c): out [index's shape] holds, at
 * each position p, the element of contiguous x whose coordinates are p's
 * but for dim d, which is index[p]. A view v over index's shape with x's
 * strides, 0 on dim d, gives p's offset in x but for dim d's share, r * sd.
 * The backward adds g [index's shape] into gx [x's shape] where each
 * element came from: positions that differ only along dim d (a fibre) may
 * add into one element, so one thread takes a fibre in order, p ascending,
 * as the host adds, and fibres write apart. scatter and scatter_add write
 * the other way, a fibre at a time for the same reason. */
#ifndef ZL_MATH_GATHER_H
#define ZL_MATH_GATHER_H

#include "index_fault.h"
#include "strided.h"

/* Element p of out (es bytes an element) from x; with a fault note, an index
 * outside [0, len) is noted (with dim) and its element is zeros. */
static inline ZL_HD void zlm_gather_elem(int64_t p, const zlm_view *v, int64_t sd, int64_t len, const int64_t *idx,
                                         const void *x, int es, void *out, zlm_index_fault *fault, int dim)
{
    int64_t r = idx[p];
    if (fault && !(r >= 0 && r < len)) {
        zlm_index_in(fault, ZLM_FAULT_GATHER, p, r, len, dim);
        memset((char *)out + p * es, 0, (size_t)es);
        return;
    }
    memcpy((char *)out + p * es, (const char *)x + (zlm_view_offset(v, p) + r * sd) * es, (size_t)es);
}

/* Fibre f of the positions (md of them along dim d, inner positions apart)
 * added into gx, p ascending; an index out of range (noted by the forward)
 * adds nothing. */
static inline ZL_HD void zlm_gather_backward_fibre(int64_t f, const zlm_view *v, int64_t sd, int64_t len, int64_t md,
                                                   int64_t inner, const int64_t *idx, const float *g, float *gx)
{
    int64_t p = f / inner * md * inner + f % inner;
    for (int64_t t = 0; t < md; t++, p += inner) {
        int64_t r = idx[p];
        if (r >= 0 && r < len) gx[zlm_view_offset(v, p) + r * sd] += g[p];
    }
}

/* Fibre f of scatter (add false: es bytes copied, the last position
 * writing an element wins) or scatter_add (in f32, or in i64 wrapping as the
 * host does: wdt) into out (x's shape, contiguous, wdt) from src (wdt,
 * contiguous, read through sv: index's shape with src's strides); an index
 * out of range is noted (with dim) and writes nothing. */
static inline ZL_HD void zlm_scatter_fibre(int64_t f, bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd,
                                           int64_t len, int64_t md, int64_t inner, const int64_t *idx,
                                           const void *src, int wdt, void *out, zlm_index_fault *fault, int dim)
{
    int64_t p = f / inner * md * inner + f % inner;
    int es = zlm_dtype_size(wdt);
    for (int64_t t = 0; t < md; t++, p += inner) {
        int64_t r = idx[p];
        if (!(r >= 0 && r < len)) {
            if (fault) zlm_index_in(fault, add ? ZLM_FAULT_SCATTER_ADD : ZLM_FAULT_SCATTER, p, r, len, dim);
            continue;
        }
        int64_t xo = zlm_view_offset(xv, p) + r * sd, so = zlm_view_offset(sv, p);
        if (!add) memcpy((char *)out + xo * es, (const char *)src + so * es, (size_t)es);
        else if (wdt == ZLM_F32) ((float *)out)[xo] += ((const float *)src)[so];
        else ((int64_t *)out)[xo] = (int64_t)((uint64_t)((int64_t *)out)[xo] + (uint64_t)((const int64_t *)src)[so]);
    }
}

/* Fibre f of their backward: gx (g's copy, or NULL) zeroed where a plain
 * scatter wrote; gs (src's shape, zeroed, or NULL) = g where each of src's
 * elements went. */
static inline ZL_HD void zlm_scatter_backward_fibre(int64_t f, bool add, const zlm_view *xv, const zlm_view *sv,
                                                    int64_t sd, int64_t len, int64_t md, int64_t inner,
                                                    const int64_t *idx, const float *g, float *gx, float *gs)
{
    int64_t p = f / inner * md * inner + f % inner;
    for (int64_t t = 0; t < md; t++, p += inner) {
        int64_t r = idx[p];
        if (!(r >= 0 && r < len)) continue;
        int64_t xo = zlm_view_offset(xv, p) + r * sd;
        if (gs) gs[zlm_view_offset(sv, p)] = g[xo];
        if (gx && !add) gx[xo] = 0.0f;
    }
}

#endif
