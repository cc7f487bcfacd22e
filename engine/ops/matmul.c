/* matmul (numpy semantics, batch dims broadcast), through the kernel table of
 * its operands' memory: a table's fused matmul where it has one (the CPU's,
 * ops/cpu/matmul.c), else composed of its f32 GEMM or, for two bf16 or two
 * f16 operands, its half-precision one (f32 accumulation), the batch in one
 * call when each operand's batches lie a fixed stride apart. An operand
 * whose last two dims are row- or column-major is passed to the GEMM as it
 * lies, with the transpose flag, so w:transpose() costs no copy. */
#include <stdlib.h>
#include <string.h>
#include "device_kernels.h"

bool zli_gemm_layout(const zl_tensor *t, bool *trans, int64_t *lead)
{
    int nd = t->ndim;
    int64_t r = t->shape[nd - 2], c = t->shape[nd - 1], sr = t->stride[nd - 2], sc = t->stride[nd - 1];
    if ((sc == 1 || c == 1) && sr >= (c > 1 ? c : 1)) { *trans = false; *lead = sr > 0 ? sr : 1; return true; }
    if ((sr == 1 || r == 1) && sc >= (r > 1 ? r : 1)) { *trans = true; *lead = sc > 0 ? sc : 1; return true; }
    return false;
}

zl_tensor *zli_gemm_operand(zl_tensor *t, zl_dtype dt, bool *trans, int64_t *lead)
{
    if (t->dtype == dt && zli_gemm_layout(t, trans, lead)) return zl_tensor_retain(t);
    zl_tensor *c = zli_copy_as(t, dt, ZL_MEM_ACTIVATIONS);
    if (c) zli_gemm_layout(c, trans, lead);
    return c;
}

static zl_status matmul_backward(zl_node *n, zl_tensor *g, zl_tensor **gin);

/* An operand of a table's GEMM: dtype dt, in the memory `home` lives in, a layout it can read. */
static zl_tensor *table_operand(zl_tensor *t, const zl_tensor *home, zl_dtype dt, bool *trans, int64_t *lead)
{
    if (t->storage->dev == home->storage->dev) return zli_gemm_operand(t, dt, trans, lead);
    zl_tensor *c = zli_copy_as_like(t, dt, home);
    if (c) zli_gemm_layout(c, trans, lead);
    return c;
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

void zli_matmul_batch_strides(const zl_tensor *fa, const zl_tensor *fb, const zli_matmul_dims *md, int64_t *sa,
                              int64_t *sb)
{
    zl_tensor ha = *fa, hb = *fb;     /* batch-only views for the broadcast strides */
    ha.ndim = fa->ndim - 2;
    hb.ndim = fb->ndim - 2;
    zli_bcast_strides(&ha, md->nbat, md->bshape, sa);
    zli_bcast_strides(&hb, md->nbat, md->bshape, sb);
}

void zli_matmul_batch_at(const zli_matmul_dims *md, const int64_t *sa, const int64_t *sb, int64_t bi, int64_t *oa,
                         int64_t *ob)
{
    int64_t rem = bi;
    *oa = *ob = 0;
    for (int d = md->nbat - 1; d >= 0; d--) {
        int64_t i = rem % md->bshape[d];
        rem /= md->bshape[d];
        *oa += i * sa[d];
        *ob += i * sb[d];
    }
}

int zli_matmul_out_shape(const zli_matmul_dims *md, int64_t *oshape)
{
    memcpy(oshape, md->bshape, (size_t)md->nbat * sizeof *oshape);
    oshape[md->nbat] = md->m;
    oshape[md->nbat + 1] = md->n;
    return md->nbat + 2;
}

/* matmul by a table's GEMMs into f32 (the operands in zli_gemm_dtype's
 * dtype), the batch in one call when each operand's batches lie a fixed
 * stride apart. */
static zl_tensor *matmul_composed(const zli_dev_kernels *kern, int index, zl_tensor *a, zl_tensor *b,
                                  const zli_matmul_dims *md)
{
    zl_tensor *in[2] = {a, b};
    int64_t m = md->m, k = md->k, nn = md->n, oshape[ZL_MAX_DIMS];
    bool ta, tb;
    zl_dtype wdt = zli_gemm_dtype(kern, 2, in);
    int64_t la, lb, es = (int64_t)zl_dtype_size(wdt);
    const zl_tensor *home = zli_op_home(2, in);
    zl_tensor *fa = table_operand(a, home, wdt, &ta, &la), *fb = fa ? table_operand(b, home, wdt, &tb, &lb) : NULL;
    zl_tensor *out = fb ? zli_new_f32_like(home, zli_matmul_out_shape(md, oshape), oshape) : NULL;
    if (out) {
        int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS], batches = zli_numel(md->nbat, md->bshape), step_a, step_b;
        zli_matmul_batch_strides(fa, fb, md, sa, sb);
        const char *pa = zl_tensor_data(fa), *pb = zl_tensor_data(fb);
        float *po = zl_tensor_data(out);
        zl_status st = ZL_OK;
        if (md->nbat > 0 && fb->ndim == 2 && !ta && zl_tensor_is_contiguous(fa)) {   /* one GEMM over all rows */
            st = zli_dev_gemm(kern, index, wdt, false, tb, batches * m, nn, k, 1.0f, pa, k, 0, pb, lb, 0, 0.0f, po,
                              nn, 0, 1);
        } else if (even_batches(md->nbat, md->bshape, sa, &step_a) && even_batches(md->nbat, md->bshape, sb, &step_b)) {
            st = zli_dev_gemm(kern, index, wdt, ta, tb, m, nn, k, 1.0f, pa, la, step_a, pb, lb, step_b, 0.0f, po, nn,
                              m * nn, batches);
        } else {
            for (int64_t bi = 0; bi < batches && !st; bi++) {
                int64_t oa, ob;
                zli_matmul_batch_at(md, sa, sb, bi, &oa, &ob);
                st = zli_dev_gemm(kern, index, wdt, ta, tb, m, nn, k, 1.0f, pa + oa * es, la, 0, pb + ob * es, lb, 0,
                                  0.0f, po + bi * m * nn, nn, 0, 1);
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

/* Both operands have >= 2 dims; the result has dtype odt, from the table's
 * fused matmul where it has one, else composed of its GEMMs. */
static zl_tensor *matmul_nd(zl_tensor *a, zl_tensor *b, zl_dtype odt)
{
    zl_tensor *in[2] = {a, b};
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    if (zli_op_device("matmul", 2, in, &kern, &index) < 0) return NULL;
    int na = a->ndim, nb = b->ndim;
    zli_matmul_dims md = {.m = a->shape[na - 2], .k = a->shape[na - 1], .n = b->shape[nb - 1]};
    if (md.k != b->shape[nb - 2]) {
        zli_shape_error("matmul", "inner dimensions differ", a, b);
        return NULL;
    }
    if (zl_broadcast_shapes(na - 2, a->shape, nb - 2, b->shape, &md.nbat, md.bshape)) {
        zli_shape_error("matmul", "batch dimensions cannot be broadcast", a, b);
        return NULL;
    }
    if (md.nbat + 2 > ZL_MAX_DIMS) { zl_error(ZL_EINVAL, "matmul: too many dimensions"); return NULL; }
    zl_tensor *out = kern->matmul ? kern->matmul(index, a, b, &md, odt) : matmul_composed(kern, index, a, b, &md);
    out = zli_cast_result(out, odt);
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

/* With two bf16 inputs (or two f16 where the table's GEMMs read f16) the
 * gradient GEMMs run in that dtype too: g is rounded to it once, and they write f32, the
 * dtype the autograd engine sums gradients in (a leaf's .grad is then stored
 * in the leaf's dtype). */
static zl_status matmul_backward(zl_node *n, zl_tensor *gout, zl_tensor **gin)
{
    zl_tensor *a = n->inputs[0], *b = n->inputs[1];
    const zli_dev_kernels *kern = NULL;
    int index = 0;
    if (zli_op_device("matmul backward", 2, n->inputs, &kern, &index) < 0) return zli_last_code();
    zl_dtype dt = zli_gemm_dtype(kern, 2, n->inputs);
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
