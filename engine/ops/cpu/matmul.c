/* matmul (numpy semantics, batch dims broadcast) and linear, both on OpenBLAS
 * sgemm. An operand whose last two dims are row- or column-major is passed to
 * BLAS as it lies, with the transpose flag, so w:transpose() costs no copy. */
#include <cblas.h>
#include <string.h>
#include "gemm.h"

void zli_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
               const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)M,
                (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

/* How BLAS can read the last two dims of an f32 operand [.., r, c]: as stored
 * (lead = row stride) or transposed (lead = column stride); false if neither. */
static bool blas_layout(const zl_tensor *t, bool *trans, int64_t *lead)
{
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1], sr = t->stride[nd - 2], sc = t->stride[nd - 1];
    if ((sc == 1 || c == 1) && sr >= (c > 1 ? c : 1)) { *trans = false; *lead = sr > 0 ? sr : 1; return true; }
    if ((sr == 1 || r == 1) && sc >= (r > 1 ? r : 1)) { *trans = true; *lead = sc > 0 ? sc : 1; return true; }
    return false;
}

/* An f32 operand BLAS can read (the tensor itself when it can be, else a copy). */
static zl_tensor *blas_operand(zl_tensor *t, bool *trans, int64_t *lead)
{
    if (t->dtype == ZL_DTYPE_F32 && blas_layout(t, trans, lead)) return zl_tensor_retain(t);
    zl_tensor *c = zli_copy_as(t, ZL_DTYPE_F32, ZL_MEM_ACTIVATIONS);
    if (c) blas_layout(c, trans, lead);
    return c;
}

static zl_status matmul_backward(zl_node *n, zl_tensor *g, zl_tensor **gin);

/* Both operands have >= 2 dims. */
static zl_tensor *matmul_nd(zl_tensor *a, zl_tensor *b)
{
    zl_tensor *in[2] = {a, b};
    int na = a->ndim, nb = b->ndim;
    int64_t m = a->shape[na - 2], k = a->shape[na - 1], k2 = b->shape[nb - 2], nn = b->shape[nb - 1];
    if (k != k2) {
        zli_shape_error("matmul", "inner dimensions differ", a, b);
        return NULL;
    }
    int nbat;
    int64_t bshape[ZL_MAX_DIMS];
    if (zl_broadcast_shapes(na - 2, a->shape, nb - 2, b->shape, &nbat, bshape)) {
        zli_shape_error("matmul", "batch dimensions cannot be broadcast", a, b);
        return NULL;
    }
    if (nbat + 2 > ZL_MAX_DIMS) { zl_error(ZL_EINVAL, "matmul: too many dimensions"); return NULL; }
    int64_t oshape[ZL_MAX_DIMS];
    memcpy(oshape, bshape, (size_t)nbat * sizeof *bshape);
    oshape[nbat] = m;
    oshape[nbat + 1] = nn;
    bool ta, tb;
    int64_t la, lb;
    zl_tensor *fa = blas_operand(a, &ta, &la), *fb = fa ? blas_operand(b, &tb, &lb) : NULL;
    zl_tensor *out = fb ? zli_new_f32(nbat + 2, oshape) : NULL;
    if (out) {
        int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
        zl_tensor ha = *fa, hb = *fb;     /* batch-only views for the broadcast strides */
        ha.ndim = na - 2;
        hb.ndim = nb - 2;
        zli_bcast_strides(&ha, nbat, bshape, sa);
        zli_bcast_strides(&hb, nbat, bshape, sb);
        int64_t batches = zli_numel(nbat, bshape);
        const float *pa = zl_tensor_data(fa), *pb = zl_tensor_data(fb);
        float *po = zl_tensor_data(out);
        bool fold = nbat > 0 && nb == 2 && !ta && zl_tensor_is_contiguous(fa);
        if (fold) {   /* [..., m, k] x [k, n]: one GEMM over all rows */
            zli_sgemm(false, tb, batches * m, nn, k, 1.0f, pa, k, pb, lb, 0.0f, po, nn);
        } else {
            for (int64_t bi = 0; bi < batches; bi++) {
                int64_t oa = 0, ob = 0, rem = bi;
                for (int d = nbat - 1; d >= 0; d--) {
                    int64_t i = rem % bshape[d];
                    rem /= bshape[d];
                    oa += i * sa[d];
                    ob += i * sb[d];
                }
                zli_sgemm(ta, tb, m, nn, k, 1.0f, pa + oa, la, pb + ob, lb, 0.0f, po + bi * m * nn, nn);
            }
        }
    }
    zl_tensor_release(fa);
    zl_tensor_release(fb);
    out = zli_cast_result(out, zli_promote(a->dtype, b->dtype));
    zl_node *node;
    if (out && zli_record(out, "matmul", matmul_backward, 2, in, &node)) { zl_tensor_release(out); out = NULL; }
    return out;
}

static zl_tensor *reduce_to(zl_tensor *full, const zl_tensor *like)
{
    if (!full) return NULL;
    zl_tensor *r = zli_sum_to_shape(full, like->ndim, like->shape);
    zl_tensor_release(full);
    return r;
}

static zl_status matmul_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *a = n->inputs[0], *b = n->inputs[1];
    if (a->requires_grad) {
        zl_tensor *bt = zl_tensor_transpose(b, -1, -2);
        gin[0] = bt ? reduce_to(matmul_nd(g, bt), a) : NULL;
        zl_tensor_release(bt);
        if (!gin[0]) return ZL_ENOMEM;
    }
    if (b->requires_grad) {
        if (b->ndim == 2 && a->ndim > 2) {   /* fold batch rows: one GEMM */
            int64_t sa[2] = {-1, a->shape[a->ndim - 1]}, sg[2] = {-1, g->shape[g->ndim - 1]};
            zl_tensor *a2 = zl_tensor_reshape(a, 2, sa), *g2 = zl_tensor_reshape(g, 2, sg);
            zl_tensor *a2t = a2 ? zl_tensor_transpose(a2, 0, 1) : NULL;
            gin[1] = a2t && g2 ? matmul_nd(a2t, g2) : NULL;
            zl_tensor_release(a2); zl_tensor_release(g2); zl_tensor_release(a2t);
        } else {
            zl_tensor *at = zl_tensor_transpose(a, -1, -2);
            gin[1] = at ? reduce_to(matmul_nd(at, g), b) : NULL;
            zl_tensor_release(at);
        }
        if (!gin[1]) return ZL_ENOMEM;
    }
    return ZL_OK;
}

zl_tensor *zl_matmul(zl_tensor *a, zl_tensor *b)
{
    zl_tensor *in[2] = {a, b};
    if (zli_op_begin("matmul", 2, in)) return NULL;
    if (zli_need_float("matmul", "first operand", a) || zli_need_float("matmul", "second operand", b))
        return zli_op_end("matmul", 2, in, NULL);
    if (a->ndim == 0 || b->ndim == 0) {
        zli_shape_error("matmul", "both operands need at least one dimension", a, b);
        return zli_op_end("matmul", 2, in, NULL);
    }
    /* 1-D operands are promoted (a row or a column vector) and the added dim removed after. */
    zl_tensor *a2 = a->ndim == 1 ? zl_tensor_unsqueeze(a, 0) : zl_tensor_retain(a);
    zl_tensor *b2 = b->ndim == 1 ? zl_tensor_unsqueeze(b, 1) : zl_tensor_retain(b);
    zl_tensor *out = a2 && b2 ? matmul_nd(a2, b2) : NULL;
    if (out && a->ndim == 1) {
        zl_tensor *s = zl_tensor_squeeze(out, -2);
        zl_tensor_release(out);
        out = s;
    }
    if (out && b->ndim == 1) {
        zl_tensor *s = zl_tensor_squeeze(out, -1);
        zl_tensor_release(out);
        out = s;
    }
    zl_tensor_release(a2);
    zl_tensor_release(b2);
    return zli_op_end("matmul", 2, in, out);
}
