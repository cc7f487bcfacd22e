/* The CPU's fused matmul: the f32 GEMM (sgemm.c), or the bf16 GEMM when both
 * operands are bf16 writing the op's dtype. */
#include <stdlib.h>
#include <string.h>
#include "gemm.h"
#include "kernels.h"
#include "gemm_bf16.h"

/* One GEMM into C [M, N] (dense rows): sgemm on f32 operands, or the bf16 GEMM
 * on bf16 ones writing C in cdt. */
static zl_status gemm(bool half, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, void *C, zl_dtype cdt)
{
    if (half) return zli_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, NULL, C, cdt, N);
    zli_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
    return ZL_OK;
}

/* The CPU's fused matmul (ops/cpu/kernels.h): out in odt from the bf16 GEMM
 * when a and b are both bf16, else in f32 from sgemm; [..., m, k] x [k, n]
 * as one GEMM over all rows, other batches one at a time. */
zl_tensor *zli_cpu_matmul(int index, zl_tensor *a, zl_tensor *b, const zli_matmul_dims *md, zl_dtype odt)
{
    (void)index;
    int64_t m = md->m, k = md->k, nn = md->n, oshape[ZL_MAX_DIMS];
    bool ta, tb, half = a->dtype == ZL_DTYPE_BF16 && b->dtype == ZL_DTYPE_BF16;
    zl_dtype wdt = half ? ZL_DTYPE_BF16 : ZL_DTYPE_F32, cdt = half ? odt : ZL_DTYPE_F32;
    int64_t la, lb, es = (int64_t)zl_dtype_size(wdt), ces = (int64_t)zl_dtype_size(cdt);
    zl_tensor *fa = zli_gemm_operand(a, wdt, &ta, &la), *fb = fa ? zli_gemm_operand(b, wdt, &tb, &lb) : NULL;
    zl_tensor *out = fb ? zl_tensor_new(cdt, zli_matmul_out_shape(md, oshape), oshape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out) {
        int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS], batches = zli_numel(md->nbat, md->bshape);
        zli_matmul_batch_strides(fa, fb, md, sa, sb);
        const char *pa = zl_tensor_data(fa), *pb = zl_tensor_data(fb);
        char *po = zl_tensor_data(out);
        zl_status st = ZL_OK;
        if (md->nbat > 0 && fb->ndim == 2 && !ta && zl_tensor_is_contiguous(fa)) {
            st = gemm(half, false, tb, batches * m, nn, k, pa, k, pb, lb, po, cdt);
        } else {
            for (int64_t bi = 0; bi < batches && !st; bi++) {
                int64_t oa, ob;
                zli_matmul_batch_at(md, sa, sb, bi, &oa, &ob);
                st = gemm(half, ta, tb, m, nn, k, pa + oa * es, la, pb + ob * es, lb, po + bi * m * nn * ces, cdt);
            }
        }
        if (st) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor_release(fa);
    zl_tensor_release(fb);
    return out;
}
