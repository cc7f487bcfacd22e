/* Broadcasting binary elementwise ops (add, sub, mul, div, pow, comparisons)
 * with their backward, through the kernel table of the operands' memory. */
#include <math.h>
#include <string.h>
#include "device_kernels.h"
#include "../math/binary_int.h"

/* The kinds a device's kernels take (math/binary.h). */
enum {
    B_ADD = ZLM_B_ADD, B_SUB = ZLM_B_SUB, B_MUL = ZLM_B_MUL, B_DIV = ZLM_B_DIV, B_POW = ZLM_B_POW, B_EQ = ZLM_B_EQ,
    B_LT = ZLM_B_LT, B_GT = ZLM_B_GT, B_NE = ZLM_B_NE, B_LE = ZLM_B_LE, B_GE = ZLM_B_GE
};

/* out [shape] (contiguous, in home's memory) = a (op) b through their
 * broadcast strides, by k's integer kernel (operands in their dtypes, out in
 * rdt) or its float one (operands in the dtypes k reads, out in the one it
 * writes for rdt); a host scalar is copied over to home's memory. */
static zl_tensor *run_binary(const zli_dev_kernels *k, int index, int kind, bool ints, zl_tensor *a, zl_tensor *b,
                             const zl_tensor *home, int nd, const int64_t *shape, zl_dtype rdt)
{
    zl_dtype at = ints ? a->dtype : k->halves ? zli_kernel_dtype(a->dtype) : ZL_DTYPE_F32;
    zl_dtype bt = ints ? b->dtype : k->halves ? zli_kernel_dtype(b->dtype) : ZL_DTYPE_F32;
    zl_tensor *fa = zli_copy_as_like(a, at, home), *fb = fa ? zli_copy_as_like(b, bt, home) : NULL;
    zl_tensor *out = !fb ? NULL
                     : ints ? zli_new_like(home, rdt, nd, shape, ZL_MEM_ACTIVATIONS)
                            : zli_kernel_output(home, k->halves, rdt, nd, shape);
    if (out) {
        int64_t sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
        zli_bcast_strides(fa, nd, shape, sa);
        zli_bcast_strides(fb, nd, shape, sb);
        zl_status st = (ints ? k->binary_int : k->binary)(index, kind, nd, shape, sa, sb, zl_tensor_data(fa),
                                                           (int)fa->dtype, zl_tensor_data(fb), (int)fb->dtype,
                                                           zl_tensor_data(out), (int)out->dtype);
        if (st) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor_release(fa);
    zl_tensor_release(fb);
    return out;
}

static zl_status binary_backward(zl_node *n, zl_tensor *g, zl_tensor **gin);
static const char *const names[] = {"add", "sub", "mul", "div", "pow", "eq", "lt", "gt", "ne", "le", "ge"};

static zl_tensor *binary(int kind, zl_tensor *a, zl_tensor *b)
{
    const char *op = names[kind];
    zl_tensor *in[2] = {a, b};
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 2, in)) return NULL;
    if (zli_op_device(op, 2, in, &k, &index) < 0) return zli_op_end(op, 2, in, NULL);
    int nd;
    int64_t shape[ZL_MAX_DIMS];
    if (zl_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) {
        zli_shape_error(op, "shapes cannot be broadcast together", a, b);
        return zli_op_end(op, 2, in, NULL);
    }
    bool cmp = kind >= B_EQ;
    zl_dtype rdt = cmp ? ZL_DTYPE_BOOL : zli_promote(a->dtype, b->dtype);
    bool ints = !zl_dtype_traits_of(a->dtype)->is_float && !zl_dtype_traits_of(b->dtype)->is_float;
    /* True division of integers gives a float, as in PyTorch and Lua. */
    if (ints && kind == B_DIV) rdt = ZL_DTYPE_F32;
    /* Integers are read as they are; floats where they lie, through their
     * strides, in f32 (or, on a table that reads halves, bf16 or f16 as they
     * are, any other dtype as f32). */
    zl_tensor *out = run_binary(k, index, kind, ints, a, b, zli_op_home(2, in), nd, shape, rdt);
    if (ints) return zli_op_end(op, 2, in, out);
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
