/* The CPU's binary kernels: inputs read in f32 through broadcast strides;
 * the innermost dimension is a plain loop the compiler vectorises when its
 * strides are 0 or 1. Rows are split across threads statically, so results
 * never depend on timing. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "../../math/binary_int.h"

static inline void row(int kind, int64_t n, const float *restrict a, int64_t sa, const float *restrict b,
                       int64_t sb, float *restrict o)
{
    switch (kind) {
    case ZLM_B_ADD: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] + b[j * sb]; break;
    case ZLM_B_SUB: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] - b[j * sb]; break;
    case ZLM_B_MUL: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] * b[j * sb]; break;
    case ZLM_B_DIV: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] / b[j * sb]; break;
    case ZLM_B_POW: for (int64_t j = 0; j < n; j++) o[j] = powf(a[j * sa], b[j * sb]); break;
    case ZLM_B_EQ: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] == b[j * sb]; break;
    case ZLM_B_LT: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] < b[j * sb]; break;
    case ZLM_B_GT: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] > b[j * sb]; break;
    case ZLM_B_NE: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] != b[j * sb]; break;
    case ZLM_B_LE: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] <= b[j * sb]; break;
    case ZLM_B_GE: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] >= b[j * sb]; break;
    }
}

/* The CPU's kernels (ops/cpu/kernels.h): out [shape] (contiguous) = a (op) b,
 * each read through its strides broadcast to shape; f32 here. */
zl_status zli_cpu_binary(int index, int kind, int nd, const int64_t *shape, const int64_t *sa, const int64_t *sb,
                         const void *av, int adt, const void *bv, int bdt, void *outv, int odt)
{
    (void)index, (void)adt, (void)bdt, (void)odt;
    const float *pa = av, *pb = bv;
    float *po = outv;
    int64_t inner = nd ? shape[nd - 1] : 1;
    int64_t isa = nd ? sa[nd - 1] : 0, isb = nd ? sb[nd - 1] : 0;
    int64_t rows = inner ? zli_numel(nd, shape) / inner : 0;
    /* Work items are (row, block of the row): a long flat vector still spreads
     * over every thread, and each item writes its own disjoint slice. */
    const int64_t BLOCK = 8192;
    int64_t nblk = (inner + BLOCK - 1) / BLOCK, items = rows * nblk;
    #pragma omp parallel for schedule(static) if (rows * inner > ZLI_PAR_MIN && items > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t r = it / nblk, j0 = (it % nblk) * BLOCK, len = inner - j0 < BLOCK ? inner - j0 : BLOCK;
        int64_t oa = 0, ob = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % shape[d];
            rem /= shape[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        const float *ra = pa + oa + j0 * isa, *rb = pb + ob + j0 * isb;
        float *ro = po + r * inner + j0;
        /* Constant strides let the inlined row loop vectorise. */
        if (isa == 1 && isb == 1) row(kind, len, ra, 1, rb, 1, ro);
        else if (isa == 1 && isb == 0) row(kind, len, ra, 1, rb, 0, ro);
        else if (isa == 0 && isb == 1) row(kind, len, ra, 0, rb, 1, ro);
        else row(kind, len, ra, isa, rb, isb, ro);
    }
    return ZL_OK;
}

/* Integer operands are computed in double, exact for values up to 2^53 (f32
 * would be exact only to 2^24), one element at a time through broadcast
 * offsets (math/binary_int.h): integer tensors are indices and counts, never
 * the hot path. */
zl_status zli_cpu_binary_int(int index, int kind, int nd, const int64_t *shape, const int64_t *sa,
                             const int64_t *sb, const void *a, int adt, const void *b, int bdt, void *out, int odt)
{
    (void)index;
    zlm_view va = zlm_view_over(nd, shape, sa), vb = zlm_view_over(nd, shape, sb);
    int64_t n = zli_numel(nd, shape);
    for (int64_t i = 0; i < n; i++) zlm_binary_int_elem(kind, &va, a, adt, &vb, b, bdt, out, odt, i);
    return ZL_OK;
}
