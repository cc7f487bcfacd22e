/* The CPU's select kernel: raw elements through broadcast strides. */
#include <string.h>
#include "kernels.h"

/* The CPU's kernel (ops/cpu/kernels.h): out [shape] (contiguous, es-byte
 * elements) [out] = cond ? a : b, each operand read through its element
 * strides (0 on broadcast dims). */
zl_status zli_cpu_select(int index, int nd, const int64_t *shape, const uint8_t *cond, const int64_t *sc,
                         const void *av, const int64_t *sa, const void *bv, const int64_t *sb, int es, void *outv)
{
    (void)index;
    const char *a = av, *b = bv;
    char *out = outv;
    int64_t inner = nd ? shape[nd - 1] : 1, n = zli_numel(nd, shape);
    int64_t rows = inner ? n / inner : 0;
    int64_t ic = nd ? sc[nd - 1] : 0, ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;
    #pragma omp parallel for schedule(static) if (n > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t oc = 0, oa = 0, ob = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % shape[d];
            rem /= shape[d];
            oc += i * sc[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        const uint8_t *rc = cond + oc;
        char *ro = out + r * inner * (int64_t)es;
/* A constant element size lets memcpy become one load and store. */
#define SELECT_ROW(S)                                                                                    \
        for (int64_t j = 0; j < inner; j++)                                                              \
            memcpy(ro + j * (S), rc[j * ic] ? a + (oa + j * ia) * (S) : b + (ob + j * ib) * (S), (S))
        switch (es) {
        case 1: SELECT_ROW(1); break;
        case 2: SELECT_ROW(2); break;
        case 4: SELECT_ROW(4); break;
        default: SELECT_ROW(8); break;
        }
#undef SELECT_ROW
    }
    return ZL_OK;
}
