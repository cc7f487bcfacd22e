/* rotary: Hugging Face's rotary position embedding, x * cos + rotate_half(x) *
 * sin, and its backward to x. The host reads an f32 x where it lies (a head
 * sliced out of a fused projection and transposed is a strided view) and cos
 * and sin through their broadcast strides; a device composes it of narrow,
 * cat, neg, mul and add. */
#include <string.h>
#include "../device_kernels.h"

/* y [2h] = a ⊙ c + sign · swap(a) ⊙ s, swap exchanging a's halves, the first
 * half of y reading s at lo, the second at hi:
 * forward (sign -1, lo = s, hi = s + h): y = a cos + rotate_half(a) sin;
 * backward (sign +1, lo = s + h, hi = s): y = g cos + rotate_halfᵀ(g sin).
 * a, c and s are read with strides as, cs and ss; y is contiguous. */
static inline void rotate_row(int64_t h, const float *restrict a, int64_t as, const float *restrict c, int64_t cs,
                              const float *restrict lo, const float *restrict hi, int64_t ss, float sign,
                              float *restrict y)
{
    if (as == 1 && cs == 1 && ss == 1) {
        for (int64_t j = 0; j < h; j++) {
            y[j] = a[j] * c[j] + sign * a[j + h] * lo[j];
            y[j + h] = a[j + h] * c[j + h] - sign * a[j] * hi[j];
        }
        return;
    }
    for (int64_t j = 0; j < h; j++) {
        float a0 = a[j * as], a1 = a[(j + h) * as];
        y[j] = a0 * c[j * cs] + sign * a1 * lo[j * ss];
        y[j + h] = a1 * c[(j + h) * cs] - sign * a0 * hi[j * ss];
    }
}

/* y [shape] (contiguous, f32) [out] from a [shape] read through strides as,
 * cos and sin through theirs (broadcast: 0 on stretched dims); rows in
 * parallel. backward: sign and halves of sin as rotate_row says. */
static void rotary_rows(int nd, const int64_t *shape, const float *a, const int64_t *as, const float *c,
                        const int64_t *cs, const float *s, const int64_t *ss, bool backward, float *y)
{
    int64_t D = shape[nd - 1], h = D / 2, rows = zli_numel(nd - 1, shape);
    float sign = backward ? 1.0f : -1.0f;
    #pragma omp parallel for schedule(static) if (rows * D > ZLI_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t oa = 0, oc = 0, os = 0, rem = r;
        for (int i = nd - 2; i >= 0; i--) {
            int64_t k = rem % shape[i];
            rem /= shape[i];
            oa += k * as[i];
            oc += k * cs[i];
            os += k * ss[i];
        }
        const float *sr = s + os;
        const float *lo = backward ? sr + h * ss[nd - 1] : sr, *hi = backward ? sr : sr + h * ss[nd - 1];
        rotate_row(h, a + oa, as[nd - 1], c + oc, cs[nd - 1], lo, hi, ss[nd - 1], sign, y + r * D);
    }
}

/* inputs: x; saved: cos and sin as contiguous f32. */
static zl_status rotary_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *c = n->saved[0], *s = n->saved[1];
    int nd = g->ndim;
    int64_t gs[ZL_MAX_DIMS], cs[ZL_MAX_DIMS], ss[ZL_MAX_DIMS];
    zli_contiguous_strides(nd, g->shape, gs);
    zli_bcast_strides(c, nd, g->shape, cs);
    zli_bcast_strides(s, nd, g->shape, ss);
    if (!(gin[0] = zli_new_f32(nd, g->shape))) return ZL_ENOMEM;
    rotary_rows(nd, g->shape, zl_tensor_data(g), gs, zl_tensor_data(c), cs, zl_tensor_data(s), ss, true,
                zl_tensor_data(gin[0]));
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

/* The device's way, each step an op that differentiates itself (cos and sin
 * get gradients here if they require them). */
static zl_tensor *rotary_composed(zl_tensor *x, zl_tensor *cos, zl_tensor *sin)
{
    int last = x->ndim - 1;
    int64_t h = x->shape[last] / 2;
    zl_tensor *x1 = zl_tensor_narrow(x, last, 0, h), *x2 = x1 ? zl_tensor_narrow(x, last, h, h) : NULL;
    zl_tensor *n2 = x2 ? zl_neg(x2) : NULL;
    zl_tensor *parts[2] = {n2, x1};
    zl_tensor *rh = n2 ? zl_cat(parts, 2, last) : NULL;
    zl_tensor *a = rh ? zl_mul(x, cos) : NULL, *b = a ? zl_mul(rh, sin) : NULL;
    zl_tensor *y = b ? zl_add(a, b) : NULL;
    zl_tensor *objs[] = {x1, x2, n2, rh, a, b};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return y;
}

/* Computed in f32 and rounded once to torch's promotion of the three dtypes. */
zl_tensor *zl_rotary(zl_tensor *x, zl_tensor *cos, zl_tensor *sin)
{
    const char *op = "rotary";
    zl_tensor *in[3] = {x, cos, sin};
    const zli_dev_kernels *k = NULL;
    int index = 0, on;
    if (zli_op_begin(op, 3, in)) return NULL;
    if ((on = zli_op_device(op, 3, in, &k, &index)) < 0) return zli_op_end(op, 3, in, NULL);
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
    if (on) return zli_op_end(op, 3, in, rotary_composed(x, cos, sin));
    /* An f32 x is read where it lies; a half one is widened once. */
    zl_tensor *xf = x->dtype == ZL_DTYPE_F32 ? zl_tensor_retain(x) : zli_f32c(x);
    zl_tensor *cf = zli_f32c(cos), *sf = zli_f32c(sin);
    zl_tensor *y = xf && cf && sf ? zli_new_f32(nd, x->shape) : NULL;
    if (y) {
        int64_t cs[ZL_MAX_DIMS], ss[ZL_MAX_DIMS];
        zli_bcast_strides(cf, nd, x->shape, cs);
        zli_bcast_strides(sf, nd, x->shape, ss);
        rotary_rows(nd, x->shape, zl_tensor_data(xf), xf->stride, zl_tensor_data(cf), cs, zl_tensor_data(sf), ss,
                    false, zl_tensor_data(y));
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
