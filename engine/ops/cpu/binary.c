/* Broadcasting binary elementwise ops (add, sub, mul, div, pow, comparisons)
 * with their backward. Inputs are read in f32 through broadcast strides; the
 * innermost dimension is a plain loop the compiler vectorises when its strides
 * are 0 or 1. Rows are split across threads statically, so results never
 * depend on timing. */
#include <math.h>
#include <string.h>
#include "../device_kernels.h"

/* binary.h's kinds (ZLM_B_*), in its order. */
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_EQ, B_LT, B_GT, B_NE, B_LE, B_GE };

static inline void row(int kind, int64_t n, const float *restrict a, int64_t sa, const float *restrict b,
                       int64_t sb, float *restrict o)
{
    switch (kind) {
    case B_ADD: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] + b[j * sb]; break;
    case B_SUB: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] - b[j * sb]; break;
    case B_MUL: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] * b[j * sb]; break;
    case B_DIV: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] / b[j * sb]; break;
    case B_POW: for (int64_t j = 0; j < n; j++) o[j] = powf(a[j * sa], b[j * sb]); break;
    case B_EQ: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] == b[j * sb]; break;
    case B_LT: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] < b[j * sb]; break;
    case B_GT: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] > b[j * sb]; break;
    case B_NE: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] != b[j * sb]; break;
    case B_LE: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] <= b[j * sb]; break;
    case B_GE: for (int64_t j = 0; j < n; j++) o[j] = a[j * sa] >= b[j * sb]; break;
    }
}

/* out[shape] = a (op) b, a and b f32 (any strides) read through broadcast strides. */
static void binary_f32(int kind, const zl_tensor *a, const zl_tensor *b, zl_tensor *out)
{
    int nd = out->ndim;
    int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
    zli_bcast_strides(a, nd, out->shape, sa);
    zli_bcast_strides(b, nd, out->shape, sb);
    const float *pa = zl_tensor_data(a), *pb = zl_tensor_data(b);
    float *po = zl_tensor_data(out);
    int64_t inner = nd ? out->shape[nd - 1] : 1;
    int64_t isa = nd ? sa[nd - 1] : 0, isb = nd ? sb[nd - 1] : 0;
    int64_t rows = inner ? zl_tensor_numel(out) / inner : 0;
    /* Work items are (row, block of the row): a long flat vector still spreads
     * over every thread, and each item writes its own disjoint slice. */
    const int64_t BLOCK = 8192;
    int64_t nblk = (inner + BLOCK - 1) / BLOCK, items = rows * nblk;
    #pragma omp parallel for schedule(static) if (rows * inner > ZLI_PAR_MIN && items > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t r = it / nblk, j0 = (it % nblk) * BLOCK, len = inner - j0 < BLOCK ? inner - j0 : BLOCK;
        int64_t oa = 0, ob = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % out->shape[d];
            rem /= out->shape[d];
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
}

/* Integer operands are computed in double, exact for values up to 2^53 (f32
 * would be exact only to 2^24), one element at a time through broadcast
 * offsets: integer tensors are indices and counts, never the hot path. */
static zl_tensor *binary_int(int kind, const zl_tensor *a, const zl_tensor *b, int nd, const int64_t *shape,
                             zl_dtype rdt)
{
    zl_tensor *out = zl_tensor_new(rdt, nd, shape, ZL_MEM_ACTIVATIONS);
    if (!out) return NULL;
    int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
    zli_bcast_strides(a, nd, shape, sa);
    zli_bcast_strides(b, nd, shape, sb);
    const zl_dtype_traits *ta = zl_dtype_traits_of(a->dtype), *tb = zl_dtype_traits_of(b->dtype);
    const zl_dtype_traits *to = zl_dtype_traits_of(rdt);
    const char *pa = zl_tensor_data(a), *pb = zl_tensor_data(b);
    char *po = zl_tensor_data(out);
    int64_t n = zl_tensor_numel(out);
    for (int64_t i = 0; i < n; i++) {
        int64_t oa = 0, ob = 0, rem = i;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t k = rem % shape[d];
            rem /= shape[d];
            oa += k * sa[d];
            ob += k * sb[d];
        }
        double x = ta->to_f64(pa + oa * (int64_t)ta->size), y = tb->to_f64(pb + ob * (int64_t)tb->size), r;
        switch (kind) {
        case B_ADD: r = x + y; break;
        case B_SUB: r = x - y; break;
        case B_MUL: r = x * y; break;
        case B_DIV: r = x / y; break;
        case B_POW: r = pow(x, y); break;
        case B_EQ: r = x == y; break;
        case B_LT: r = x < y; break;
        case B_GT: r = x > y; break;
        case B_NE: r = x != y; break;
        case B_LE: r = x <= y; break;
        default: r = x >= y; break;
        }
        to->from_f64(po + i * (int64_t)to->size, r);
    }
    return out;
}

/* The same on a device: each operand read in place (a host scalar copied
 * over), in double, by the device's kernel. */
static zl_tensor *binary_int_device(const zli_dev_kernels *k, int index, int kind, zl_tensor *a, zl_tensor *b, int nd,
                                    const int64_t *shape, zl_dtype rdt)
{
    const zl_tensor *home = a->storage->dev ? a : b;
    zl_tensor *da = zli_copy_as_like(a, a->dtype, home), *db = da ? zli_copy_as_like(b, b->dtype, home) : NULL;
    zl_tensor *out = db ? home->storage->dev->alloc(rdt, nd, shape, ZL_MEM_ACTIVATIONS, index) : NULL;
    if (out) {
        int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
        zli_bcast_strides(da, nd, shape, sa);
        zli_bcast_strides(db, nd, shape, sb);
        if (k->binary_int(index, kind, nd, shape, sa, sb, zl_tensor_data(da), (int)da->dtype, zl_tensor_data(db),
                          (int)db->dtype, zl_tensor_data(out), (int)rdt)) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor_release(da);
    zl_tensor_release(db);
    return out;
}

static zl_status binary_backward(zl_node *n, zl_tensor *g, zl_tensor **gin);

static const char *const names[] = {"add", "sub", "mul", "div", "pow", "eq", "lt", "gt", "ne", "le", "ge"};

static zl_tensor *binary(int kind, zl_tensor *a, zl_tensor *b)
{
    const char *op = names[kind];
    zl_tensor *in[2] = {a, b};
    const zli_dev_kernels *k = NULL;
    int index = 0, on;
    if (zli_op_begin(op, 2, in)) return NULL;
    if ((on = zli_op_device(op, 2, in, &k, &index)) < 0) return zli_op_end(op, 2, in, NULL);
    int nd;
    int64_t shape[ZL_MAX_DIMS];
    if (zl_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) {
        zli_shape_error(op, "shapes cannot be broadcast together", a, b);
        return zli_op_end(op, 2, in, NULL);
    }
    bool cmp = kind >= B_EQ;
    zl_dtype rdt = cmp ? ZL_DTYPE_BOOL : zli_promote(a->dtype, b->dtype);
    bool ints = !zl_dtype_traits_of(a->dtype)->is_float && !zl_dtype_traits_of(b->dtype)->is_float;
    if (ints) {
        /* True division of integers gives a float, as in PyTorch and Lua. */
        if (kind == B_DIV) rdt = ZL_DTYPE_F32;
        zl_tensor *r = on ? binary_int_device(k, index, kind, a, b, nd, shape, rdt)
                          : binary_int(kind, a, b, nd, shape, rdt);
        return zli_op_end(op, 2, in, r);
    }
    zl_tensor *fa, *fb, *out;
    if (on) {
        /* On a device the operands are read where they lie, through their
         * strides, in f32, bf16 or f16 (a host scalar comes over, any other
         * dtype as f32); the result is written in its dtype. */
        const zl_tensor *home = a->storage->dev ? a : b;
        fa = zli_copy_as_like(a, zli_kernel_dtype(a->dtype), home);
        fb = fa ? zli_copy_as_like(b, zli_kernel_dtype(b->dtype), home) : NULL;
        out = fb ? zli_kernel_output(home, true, rdt, nd, shape) : NULL;
        if (out) {
            int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
            zli_bcast_strides(fa, nd, shape, sa);
            zli_bcast_strides(fb, nd, shape, sb);
            if (k->binary(index, kind, nd, shape, sa, sb, zl_tensor_data(fa), (int)fa->dtype, zl_tensor_data(fb),
                          (int)fb->dtype, zl_tensor_data(out), (int)out->dtype)) {
                zl_tensor_release(out);
                out = NULL;
            }
        }
    } else {
        fa = a->dtype == ZL_DTYPE_F32 ? zl_tensor_retain(a) : zli_copy_as(a, ZL_DTYPE_F32, ZL_MEM_ACTIVATIONS);
        fb = b->dtype == ZL_DTYPE_F32 ? zl_tensor_retain(b) : zli_copy_as(b, ZL_DTYPE_F32, ZL_MEM_ACTIVATIONS);
        out = fa && fb ? zli_new_f32(nd, shape) : NULL;
        if (out) binary_f32(kind, fa, fb, out);
    }
    zl_tensor_release(fa);
    zl_tensor_release(fb);
    out = out && out->dtype != rdt ? zli_cast_result(out, rdt) : out;
    zl_node *node;
    if (out && !cmp && zl_dtype_traits_of(rdt)->is_float) {
        if (zli_record(out, op, binary_backward, 2, in, &node)) { zl_tensor_release(out); out = NULL; }
        else if (node) node->i[0] = kind;
    }
    return zli_op_end(op, 2, in, out);
}

zl_tensor *zl_add(zl_tensor *a, zl_tensor *b) { return binary(B_ADD, a, b); }
zl_tensor *zl_sub(zl_tensor *a, zl_tensor *b) { return binary(B_SUB, a, b); }
zl_tensor *zl_mul(zl_tensor *a, zl_tensor *b) { return binary(B_MUL, a, b); }
zl_tensor *zl_div(zl_tensor *a, zl_tensor *b) { return binary(B_DIV, a, b); }
zl_tensor *zl_pow(zl_tensor *a, zl_tensor *b) { return binary(B_POW, a, b); }
zl_tensor *zl_eq(zl_tensor *a, zl_tensor *b) { return binary(B_EQ, a, b); }
zl_tensor *zl_lt(zl_tensor *a, zl_tensor *b) { return binary(B_LT, a, b); }
zl_tensor *zl_gt(zl_tensor *a, zl_tensor *b) { return binary(B_GT, a, b); }
zl_tensor *zl_ne(zl_tensor *a, zl_tensor *b) { return binary(B_NE, a, b); }
zl_tensor *zl_le(zl_tensor *a, zl_tensor *b) { return binary(B_LE, a, b); }
zl_tensor *zl_ge(zl_tensor *a, zl_tensor *b) { return binary(B_GE, a, b); }

/* g * f(a, b) reduced to `like`'s shape; f chosen per input below. */
static zl_tensor *reduce_to(zl_tensor *full, const zl_tensor *like)
{
    if (!full) return NULL;
    zl_tensor *r = zli_sum_to_shape(full, like->ndim, like->shape);
    zl_tensor_release(full);
    return r;
}

static zl_status binary_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *a = n->inputs[0], *b = n->inputs[1];
    zl_tensor *ga = NULL, *gb = NULL;
    switch ((int)n->i[0]) {
    case B_ADD:
        if (zli_requires_grad(a)) ga = reduce_to(zl_tensor_retain(g), a);
        if (zli_requires_grad(b)) gb = reduce_to(zl_tensor_retain(g), b);
        break;
    case B_SUB:
        if (zli_requires_grad(a)) ga = reduce_to(zl_tensor_retain(g), a);
        if (zli_requires_grad(b)) gb = reduce_to(zl_neg(g), b);
        break;
    case B_MUL:
        if (zli_requires_grad(a)) ga = reduce_to(zl_mul(g, b), a);
        if (zli_requires_grad(b)) gb = reduce_to(zl_mul(g, a), b);
        break;
    case B_DIV:
        if (zli_requires_grad(a)) ga = reduce_to(zl_div(g, b), a);
        if (zli_requires_grad(b)) {
            /* d(a/b)/db = -a / b^2 = -(a/b) / b */
            zl_tensor *q = zl_div(a, b), *q2 = q ? zl_div(q, b) : NULL, *m = q2 ? zl_mul(g, q2) : NULL;
            gb = reduce_to(m ? zl_neg(m) : NULL, b);
            zl_tensor_release(q); zl_tensor_release(q2); zl_tensor_release(m);
        }
        break;
    case B_POW: {
        zl_tensor *y = zl_pow(a, b);
        if (zli_requires_grad(a) && y) {
            /* d(a^b)/da = b * a^(b-1) = b * y / a, written without dividing by a = 0 */
            zl_tensor *one = zl_tensor_scalar(ZL_DTYPE_F32, 1.0), *bm1 = one ? zl_sub(b, one) : NULL;
            zl_tensor *p = bm1 ? zl_pow(a, bm1) : NULL, *q = p ? zl_mul(p, b) : NULL;
            ga = reduce_to(q ? zl_mul(g, q) : NULL, a);
            zl_tensor_release(one); zl_tensor_release(bm1); zl_tensor_release(p); zl_tensor_release(q);
        }
        if (zli_requires_grad(b) && y) {
            zl_tensor *la = zl_log(a), *q = la ? zl_mul(y, la) : NULL;
            gb = reduce_to(q ? zl_mul(g, q) : NULL, b);
            zl_tensor_release(la); zl_tensor_release(q);
        }
        zl_tensor_release(y);
        break;
    }
    }
    gin[0] = ga;
    gin[1] = gb;
    if ((zli_requires_grad(a) && !ga) || (zli_requires_grad(b) && !gb)) return ZL_ENOMEM;
    return ZL_OK;
}
