/* rotary: Hugging Face's rotary position embedding, x * cos + rotate_half(x) *
 * sin, and its backward to x, through the kernel table of x's memory. An f32
 * x is read where it lies (a head sliced out of a fused projection and
 * transposed is a strided view), cos and sin through their broadcast
 * strides. */
#include <string.h>
#include "device_kernels.h"

/* inputs: x; saved: cos and sin as contiguous f32, in x's memory. */
static zl_status rotary_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *c = n->saved[0], *s = n->saved[1];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("rotary backward", 1, &g, &k, &index) < 0) return zli_last_code();
    int nd = g->ndim;
    int64_t gs[ZL_MAX_DIMS], cs[ZL_MAX_DIMS], ss[ZL_MAX_DIMS];
    zli_contiguous_strides(nd, g->shape, gs);
    zli_bcast_strides(c, nd, g->shape, cs);
    zli_bcast_strides(s, nd, g->shape, ss);
    zl_tensor *gc = zli_f32c(g), *gx = gc ? zli_new_f32_like(g, nd, g->shape) : NULL;
    zl_status st = gx ? k->rotary(index, nd, g->shape, zl_tensor_data(gc), gs, zl_tensor_data(c), cs,
                                  zl_tensor_data(s), ss, true, zl_tensor_data(gx))
                      : ZL_ENOMEM;
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    return ZL_OK;
}

/* cos or sin must broadcast to x's shape without growing it. */
static zl_status check_table(const char *role, const zl_tensor *t, const zl_tensor *x)
{
    bool ok = t->ndim <= x->ndim;
    for (int i = 1; ok && i <= t->ndim; i++) {
        int64_t a = t->shape[t->ndim - i], b = x->shape[x->ndim - i];
        ok = a == b || a == 1;
    }
    if (ok) return ZL_OK;
    char st[128], sx[128];
    return zl_error(ZL_ESHAPE, "rotary: %s of shape %s does not broadcast to x's shape %s", role,
                    zl_shape_str(t->ndim, t->shape, st, sizeof st), zl_shape_str(x->ndim, x->shape, sx, sizeof sx));
}

/* Computed in f32 and rounded once to torch's promotion of the three dtypes. */
zl_tensor *zl_rotary(zl_tensor *x, zl_tensor *cos, zl_tensor *sin)
{
    const char *op = "rotary";
    zl_tensor *in[3] = {x, cos, sin};
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 3, in)) return NULL;
    if (zli_op_device(op, 3, in, &k, &index) < 0) return zli_op_end(op, 3, in, NULL);
    if (zli_need_float(op, "x", x) || zli_need_float(op, "cos", cos) || zli_need_float(op, "sin", sin))
        return zli_op_end(op, 3, in, NULL);
    int nd = x->ndim;
    if (nd < 1 || x->shape[nd - 1] % 2 != 0) {
        char s[128];
        zl_error(ZL_ESHAPE, "rotary: x's last dimension must be even (rotate_half splits it in halves), got shape %s",
                 zl_shape_str(nd, x->shape, s, sizeof s));
        return zli_op_end(op, 3, in, NULL);
    }
    if (check_table("cos", cos, x) || check_table("sin", sin, x)) return zli_op_end(op, 3, in, NULL);
    /* The tables are read where x is: a one-element host cos or sin would
     * reach a device's kernel as a host pointer. */
    if (zli_same_device(op, x, cos) || zli_same_device(op, x, sin)) return zli_op_end(op, 3, in, NULL);
    /* An f32 x is read where it lies; a half one is widened once. */
    zl_tensor *xf = x->dtype == ZL_DTYPE_F32 ? zl_tensor_retain(x) : zli_f32c(x);
    zl_tensor *cf = zli_f32c(cos), *sf = zli_f32c(sin);
    zl_tensor *y = xf && cf && sf ? zli_new_f32_like(x, nd, x->shape) : NULL;
    if (y) {
        int64_t cs[ZL_MAX_DIMS], ss[ZL_MAX_DIMS];
        zli_bcast_strides(cf, nd, x->shape, cs);
        zli_bcast_strides(sf, nd, x->shape, ss);
        if (k->rotary(index, nd, x->shape, zl_tensor_data(xf), xf->stride, zl_tensor_data(cf), cs, zl_tensor_data(sf),
                      ss, false, zl_tensor_data(y))) {
            zl_tensor_release(y);
            y = NULL;
        }
    }
    zl_tensor_release(xf);
    y = zli_cast_result(y, zli_promote(x->dtype, zli_promote(cos->dtype, sin->dtype)));
    zl_node *n = NULL;
    if (y && zli_record(y, op, rotary_backward, 1, in, &n)) { zl_tensor_release(y); y = NULL; }
    if (n && (zli_node_save(n, 0, cf, false) || zli_node_save(n, 1, sf, false))) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(cf);
    zl_tensor_release(sf);
    return zli_op_end(op, 3, in, y);
}
