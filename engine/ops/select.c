/* where and masked_fill: one kernel picks each element from one of two sources
 * by a bool/u8 condition, reading raw elements through broadcast strides (every
 * dtype); backward routes the gradient with it and sums it to each input's shape.
 * The select runs through the kernel table of the operands' memory. */
#include <string.h>
#include "device_kernels.h"

static zl_status need_mask(const char *op, const char *role, const zl_tensor *t)
{
    if (t->dtype == ZL_DTYPE_BOOL || t->dtype == ZL_DTYPE_U8) return ZL_OK;
    return zl_error(ZL_EDTYPE, "%s: %s must be bool or u8, got %s", op, role, zl_dtype_name(t->dtype));
}

static const int64_t zero_strides[ZL_MAX_DIMS];
/* out [shape] (contiguous, es bytes an element) = cond ? a : b through the
 * given strides, all in out's memory, by that memory's kernel. */
static zl_status select_into(int nd, const int64_t *shape, const zl_tensor *cond, const int64_t *sc, const void *a,
                             const int64_t *sa, const void *b, const int64_t *sb, size_t es, zl_tensor *out)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("select", 1, &out, &k, &index) < 0) return zli_last_code();
    return k->select(index, nd, shape, zl_tensor_data(cond), sc, a, sa, b, sb, (int)es, zl_tensor_data(out));
}

/* full [g's shape] (f32, where g lives) = g where cond (read through its
 * broadcast strides) equals `keep_true`, 0 elsewhere. */
static zl_tensor *route_grad(zl_tensor *cond, const zl_tensor *g, bool keep_true)
{
    zl_tensor *c = zli_copy_as_like(cond, cond->dtype, g);
    zl_tensor *zero = c ? zli_full_like_device(g, ZL_DTYPE_F32, 0, NULL, ZL_MEM_ACTIVATIONS, 0.0) : NULL;
    zl_tensor *full = zero ? zli_new_f32_like(g, g->ndim, g->shape) : NULL;
    if (full) {
        int64_t sc[ZL_MAX_DIMS], sg[ZL_MAX_DIMS];
        zli_bcast_strides(c, g->ndim, g->shape, sc);
        zli_contiguous_strides(g->ndim, g->shape, sg);
        const char *pg = zl_tensor_data(g), *pz = zl_tensor_data(zero);
        if (select_into(g->ndim, g->shape, c, sc, keep_true ? pg : pz, keep_true ? sg : zero_strides,
                        keep_true ? pz : pg, keep_true ? zero_strides : sg, sizeof(float), full)) {
            zl_tensor_release(full);
            full = NULL;
        }
    }
    zl_tensor_release(zero);
    zl_tensor_release(c);
    return full;
}

static zl_status where_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    for (int side = 1; side <= 2; side++) {
        zl_tensor *t = n->inputs[side];
        if (!zli_requires_grad(t)) continue;
        zl_tensor *full = route_grad(n->inputs[0], g, side == 1);
        gin[side] = full ? zli_sum_to_shape(full, t->ndim, t->shape) : NULL;
        zl_tensor_release(full);
        if (!gin[side]) return ZL_ENOMEM;
    }
    return ZL_OK;
}

zl_tensor *zl_where(zl_tensor *cond, zl_tensor *a, zl_tensor *b)
{
    zl_tensor *in[3] = {cond, a, b};
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin("where", 3, in)) return NULL;
    if (zli_op_device("where", 3, in, &k, &index) < 0) return zli_op_end("where", 3, in, NULL);
    if (need_mask("where", "condition", cond)) return zli_op_end("where", 3, in, NULL);
    int n1, nd;
    int64_t s1[ZL_MAX_DIMS], shape[ZL_MAX_DIMS];
    if (zl_broadcast_shapes(cond->ndim, cond->shape, a->ndim, a->shape, &n1, s1) ||
        zl_broadcast_shapes(n1, s1, b->ndim, b->shape, &nd, shape)) {
        char sc[128], sa[128], sb[128];
        zl_error(ZL_ESHAPE, "where: shapes cannot be broadcast together (condition %s, a %s, b %s)",
                 zl_shape_str(cond->ndim, cond->shape, sc, sizeof sc), zl_shape_str(a->ndim, a->shape, sa, sizeof sa),
                 zl_shape_str(b->ndim, b->shape, sb, sizeof sb));
        return zli_op_end("where", 3, in, NULL);
    }
    zl_dtype rdt = zli_promote(a->dtype, b->dtype);
    const zl_tensor *home = zli_op_home(3, in);
    zl_tensor *cc = zli_copy_as_like(cond, cond->dtype, home);
    zl_tensor *ac = cc ? zli_copy_as_like(a, rdt, home) : NULL, *bc = ac ? zli_copy_as_like(b, rdt, home) : NULL;
    zl_tensor *out = bc ? zli_new_like(home, rdt, nd, shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out) {
        int64_t sc[ZL_MAX_DIMS], sa[ZL_MAX_DIMS], sb[ZL_MAX_DIMS];
        zli_bcast_strides(cc, nd, shape, sc);
        zli_bcast_strides(ac, nd, shape, sa);
        zli_bcast_strides(bc, nd, shape, sb);
        if (select_into(nd, shape, cc, sc, zl_tensor_data(ac), sa, zl_tensor_data(bc), sb, zl_dtype_size(rdt), out)) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor_release(cc);
    zl_tensor_release(ac);
    zl_tensor_release(bc);
    zl_node *node;
    if (out && zl_dtype_traits_of(rdt)->is_float && zli_record(out, "where", where_backward, 3, in, &node)) {
        zl_tensor_release(out);
        out = NULL;
    }
    return zli_op_end("where", 3, in, out);
}

static zl_status masked_fill_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    gin[0] = route_grad(n->inputs[1], g, false);
    return gin[0] ? ZL_OK : ZL_ENOMEM;
}

zl_tensor *zl_masked_fill(zl_tensor *x, zl_tensor *mask, double value)
{
    zl_tensor *in[2] = {x, mask};
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin("masked_fill", 2, in)) return NULL;
    if (zli_op_device("masked_fill", 2, in, &k, &index) < 0) return zli_op_end("masked_fill", 2, in, NULL);
    if (need_mask("masked_fill", "mask", mask)) return zli_op_end("masked_fill", 2, in, NULL);
    int nd;
    int64_t shape[ZL_MAX_DIMS];
    if (zl_broadcast_shapes(mask->ndim, mask->shape, x->ndim, x->shape, &nd, shape) || nd != x->ndim ||
        memcmp(shape, x->shape, (size_t)nd * sizeof *shape) != 0) {
        char sm[128], sx[128];
        zl_error(ZL_ESHAPE, "masked_fill: mask of shape %s cannot be broadcast to the input's shape %s",
                 zl_shape_str(mask->ndim, mask->shape, sm, sizeof sm), zl_shape_str(x->ndim, x->shape, sx, sizeof sx));
        return zli_op_end("masked_fill", 2, in, NULL);
    }
    /* The fill value as x's dtype holds it, converted on the host (and moved
     * to x's device as those bytes). */
    const zl_tensor *home = zli_op_home(2, in);
    zl_tensor *fh = zl_tensor_new(x->dtype, 0, NULL, ZL_MEM_ACTIVATIONS);
    if (fh) zl_dtype_traits_of(x->dtype)->from_f64(zl_tensor_data(fh), value);
    zl_tensor *fill = fh ? zli_copy_as_like(fh, x->dtype, home) : NULL;
    zl_tensor *m = fill ? zli_copy_as_like(mask, mask->dtype, home) : NULL;
    zl_tensor *xs = m ? zli_copy_as_like(x, x->dtype, home) : NULL;
    zl_tensor *out = xs ? zli_new_like(home, x->dtype, x->ndim, x->shape, ZL_MEM_ACTIVATIONS) : NULL;
    if (out) {
        int64_t sm[ZL_MAX_DIMS];
        zli_bcast_strides(m, nd, x->shape, sm);
        if (select_into(nd, x->shape, m, sm, zl_tensor_data(fill), zero_strides, zl_tensor_data(xs), xs->stride,
                        zl_dtype_size(x->dtype), out)) {
            zl_tensor_release(out);
            out = NULL;
        }
    }
    zl_tensor *objs[] = {xs, m, fill, fh};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    zl_node *node;
    if (out && zl_dtype_traits_of(x->dtype)->is_float &&
        zli_record(out, "masked_fill", masked_fill_backward, 2, in, &node)) {
        zl_tensor_release(out);
        out = NULL;
    }
    return zli_op_end("masked_fill", 2, in, out);
}
