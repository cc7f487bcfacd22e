/* matmul (numpy semantics, batch dims broadcast) on the f32 GEMM (sgemm.c), or
 * on the bf16 GEMM when both operands are bf16; on a device, its f32 GEMM or,
 * for two bf16 or two f16 operands, its half-precision one (f32 accumulation),
 * the batch in one call when each operand's batches lie a fixed stride apart.
 * An operand whose last two dims are row- or column-major is passed to the
 * GEMM as it lies, with the transpose flag, so w:transpose() costs no copy. */
#include <stdlib.h>
#include <string.h>
#include "gemm.h"
#include "../device_kernels.h"
#include "gemm_bf16.h"

/* How BLAS can read the last two dims of an operand [.., r, c]: as stored
 * (lead = row stride) or transposed (lead = column stride); false if neither. */
static bool blas_layout(const zl_tensor *t, bool *trans, int64_t *lead)
{
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1], sr = t->stride[nd - 2], sc = t->stride[nd - 1];
    if ((sc == 1 || c == 1) && sr >= (c > 1 ? c : 1)) { *trans = false; *lead = sr > 0 ? sr : 1; return true; }
    if ((sr == 1 || r == 1) && sc >= (r > 1 ? r : 1)) { *trans = true; *lead = sc > 0 ? sc : 1; return true; }
    return false;
}

/* An operand of dtype dt (f32 or bf16) the GEMM can read: the tensor itself
 * when it can be, else a copy. */
static zl_tensor *blas_operand(zl_tensor *t, zl_dtype dt, bool *trans, int64_t *lead)
{
    if (t->dtype == dt && blas_layout(t, trans, lead)) return zl_tensor_retain(t);
    zl_tensor *c = zli_copy_as(t, dt, ZL_MEM_ACTIVATIONS);
    if (c) blas_layout(c, trans, lead);
    return c;
}

/* One GEMM into C [M, N] (dense rows): sgemm on f32 operands, or the bf16 GEMM
 * on bf16 ones writing C in cdt. */
static zl_status gemm(bool half, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, void *C, zl_dtype cdt)
{
    if (half) return zli_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, NULL, C, cdt, N);
    zli_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
    return ZL_OK;
}

static zl_status matmul_backward(zl_node *n, zl_tensor *g, zl_tensor **gin);

/* Whether a matmul of a and b runs on a device (its kernels set), on the host
 * (0), or not at all (-1, the error set). */
static int on_device(zl_tensor *a, zl_tensor *b, const zli_dev_kernels **k, int *index)
{
    zl_tensor *in[2] = {a, b};
    return zli_op_device("matmul", 2, in, k, index);
}

/* An operand of a device GEMM: dtype dt, in the device's memory, a layout it can read. */
static zl_tensor *device_operand(zl_tensor *t, const zl_tensor *home, zl_dtype dt, bool *trans, int64_t *lead)
{
    if (t->storage->dev) return blas_operand(t, dt, trans, lead);
    zl_tensor *c = dt == ZL_DTYPE_F32 ? zli_f32c_like(t, home) : zli_copy_as_like(t, dt, home);
    if (c) blas_layout(c, trans, lead);
    return c;
}

/* `batch` device GEMMs into C [M, N] f32 (dense rows), operands sa and sb
 * elements apart and results M * N apart, A and B in dt. */
static zl_status device_gemm(const zli_dev_kernels *k, int index, zl_dtype dt, bool ta, bool tb, int64_t M,
                             int64_t N, int64_t K, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                             int64_t sb, float *C, int64_t batch)
{
    return zli_dev_gemm(k, index, dt, ta, tb, M, N, K, 1.0f, A, lda, sa, B, ldb, sb, 0.0f, C, N, M * N, batch);
}

/* Whether batch i's offset is i * *step for every i of the broadcast batch
 * shape (strides s, 0 on stretched dims): then the batches go in one call. */
static bool even_batches(int nbat, const int64_t *bshape, const int64_t *s, int64_t *step)
{
    int64_t inner = 1;
    *step = 0;
    for (int d = nbat - 1; d >= 0; d--) {
        if (bshape[d] == 1) continue;
        if (inner == 1) *step = s[d];
        else if (s[d] != *step * inner) return false;
        inner *= bshape[d];
    }
    return true;
}

/* Both operands have >= 2 dims; the result has dtype odt. Two bf16 operands
 * take the bf16 GEMM (written straight in odt), anything else sgemm in f32;
 * on a device, the device's GEMM in zli_dev_gemm_dtype's dtype, written in f32. */
static zl_tensor *matmul_nd(zl_tensor *a, zl_tensor *b, zl_dtype odt)
{
    zl_tensor *in[2] = {a, b};
    const zli_dev_kernels *kern = NULL;
    int index = 0, on = on_device(a, b, &kern, &index);
    if (on < 0) return NULL;
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
    bool ta, tb, half = !on && a->dtype == ZL_DTYPE_BF16 && b->dtype == ZL_DTYPE_BF16;
    zl_dtype wdt = on ? zli_dev_gemm_dtype(2, in) : half ? ZL_DTYPE_BF16 : ZL_DTYPE_F32;
    zl_dtype cdt = half ? odt : ZL_DTYPE_F32;
    int64_t la, lb, es = (int64_t)zl_dtype_size(wdt), ces = (int64_t)zl_dtype_size(cdt);
    const zl_tensor *home = a->storage->dev ? a : b;
    zl_tensor *fa = on ? device_operand(a, home, wdt, &ta, &la) : blas_operand(a, wdt, &ta, &la);
    zl_tensor *fb = !fa ? NULL : on ? device_operand(b, home, wdt, &tb, &lb) : blas_operand(b, wdt, &tb, &lb);
    zl_tensor *out = !fb ? NULL : on ? zli_new_f32_like(home, nbat + 2, oshape)
                                     : zl_tensor_new(cdt, nbat + 2, oshape, ZL_MEM_ACTIVATIONS);
    if (out) {
        int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
        zl_tensor ha = *fa, hb = *fb;     /* batch-only views for the broadcast strides */
        ha.ndim = na - 2;
        hb.ndim = nb - 2;
        zli_bcast_strides(&ha, nbat, bshape, sa);
        zli_bcast_strides(&hb, nbat, bshape, sb);
        int64_t batches = zli_numel(nbat, bshape);
        const char *pa = zl_tensor_data(fa), *pb = zl_tensor_data(fb);
        char *po = zl_tensor_data(out);
        bool fold = nbat > 0 && nb == 2 && !ta && zl_tensor_is_contiguous(fa);
        int64_t step_a, step_b;
        zl_status st = ZL_OK;
        if (fold && on) {
            st = device_gemm(kern, index, wdt, false, tb, batches * m, nn, k, pa, k, 0, pb, lb, 0, (float *)po, 1);
        } else if (on && even_batches(nbat, bshape, sa, &step_a) && even_batches(nbat, bshape, sb, &step_b)) {
            st = device_gemm(kern, index, wdt, ta, tb, m, nn, k, pa, la, step_a, pb, lb, step_b, (float *)po, batches);
        } else if (fold) {   /* [..., m, k] x [k, n]: one GEMM over all rows */
            st = gemm(half, false, tb, batches * m, nn, k, pa, k, pb, lb, po, cdt);
        } else {
            for (int64_t bi = 0; bi < batches && !st; bi++) {
                int64_t oa = 0, ob = 0, rem = bi;
                for (int d = nbat - 1; d >= 0; d--) {
                    int64_t i = rem % bshape[d];
                    rem /= bshape[d];
                    oa += i * sa[d];
                    ob += i * sb[d];
                }
                if (on)
                    st = device_gemm(kern, index, wdt, ta, tb, m, nn, k, pa + oa * es, la, 0, pb + ob * es, lb, 0,
                                     (float *)(po + bi * m * nn * ces), 1);
                else
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
    if (!half) out = zli_cast_result(out, odt);
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

static zl_status matmul_grads(zl_tensor *a, zl_tensor *b, zl_tensor *g, zl_tensor **gin)
{
    if (zli_requires_grad(a)) {
        zl_tensor *bt = zl_tensor_transpose(b, -1, -2);
        gin[0] = bt ? reduce_to(matmul_nd(g, bt, ZL_DTYPE_F32), a) : NULL;
        zl_tensor_release(bt);
        if (!gin[0]) return ZL_ENOMEM;
    }
    if (zli_requires_grad(b)) {
        if (b->ndim == 2 && a->ndim > 2) {   /* fold batch rows: one GEMM */
            int64_t sa[2] = {-1, a->shape[a->ndim - 1]}, sg[2] = {-1, g->shape[g->ndim - 1]};
            zl_tensor *a2 = zl_tensor_reshape(a, 2, sa), *g2 = zl_tensor_reshape(g, 2, sg);
            zl_tensor *a2t = a2 ? zl_tensor_transpose(a2, 0, 1) : NULL;
            gin[1] = a2t && g2 ? matmul_nd(a2t, g2, ZL_DTYPE_F32) : NULL;
            zl_tensor_release(a2); zl_tensor_release(g2); zl_tensor_release(a2t);
        } else {
            zl_tensor *at = zl_tensor_transpose(a, -1, -2);
            gin[1] = at ? reduce_to(matmul_nd(at, g, ZL_DTYPE_F32), b) : NULL;
            zl_tensor_release(at);
        }
        if (!gin[1]) return ZL_ENOMEM;
    }
    return ZL_OK;
}

/* With two bf16 inputs (on a device, two bf16 or two f16) the gradient GEMMs
 * run in that dtype too: g is rounded to it once, and they write f32, the
 * dtype the autograd engine sums gradients in (a leaf's .grad is then stored
 * in the leaf's dtype). */
static zl_status matmul_backward(zl_node *n, zl_tensor *gout, zl_tensor **gin)
{
    zl_tensor *a = n->inputs[0], *b = n->inputs[1];
    bool dev = a->storage->dev || b->storage->dev;
    bool bf16 = a->dtype == ZL_DTYPE_BF16 && b->dtype == ZL_DTYPE_BF16;
    zl_dtype dt = dev ? zli_dev_gemm_dtype(2, n->inputs) : bf16 ? ZL_DTYPE_BF16 : ZL_DTYPE_F32;
    zl_tensor *g = dt != ZL_DTYPE_F32 ? zli_copy_as(gout, dt, ZL_MEM_ACTIVATIONS) : zl_tensor_retain(gout);
    zl_status st = g ? matmul_grads(a, b, g, gin) : ZL_ENOMEM;
    zl_tensor_release(g);
    return st;
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
    zl_tensor *out = a2 && b2 ? matmul_nd(a2, b2, zli_promote(a->dtype, b->dtype)) : NULL;
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
