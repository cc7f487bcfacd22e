/* max_pool2d and avg_pool2d over x [N, C, H, W], per element in
 * math/pool.h's formulas, through the kernel table of x's memory. max:
 * padding counts as -inf, so a window is the max of its part inside the
 * image; forward keeps the position of each window's first maximum and
 * backward gathers at each input the gradients of the windows whose maximum
 * it was. avg: the mean of each window, padding counted as zeros or left
 * out. */
#include <math.h>
#include "device_kernels.h"

typedef zli_dev_window pool_geom;
/* The geometry a pooling node recorded (i[0..3]: stride and padding). */
static pool_geom geom_of(const zl_node *n)
{
    const zl_tensor *x = n->inputs[0];
    int64_t kh = n->i[4], kw = n->i[5];
    return (pool_geom){.c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .kh = kh, .kw = kw,
                       .oh = n->out_shape[2], .ow = n->out_shape[3], .sh = n->i[0], .sw = n->i[1],
                       .ph = n->i[2], .pw = n->i[3], .dh = 1, .dw = 1};
}

/* max_pool2d's backward (saved[0]: the argmax positions, in x's memory) and
 * avg_pool2d's (no saved tensor; i[6]: count_include_pad). */
static zl_status pool_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    zl_tensor *x = n->inputs[0];
    const zli_dev_kernels *k = NULL;
    int index = 0;
    bool avg = n->saved[0] == NULL;
    if (zli_op_device(avg ? "avg_pool2d backward" : "max_pool2d backward", 1, &x, &k, &index) < 0)
        return zli_last_code();
    pool_geom geo = geom_of(n);
    int64_t planes = x->shape[0] * x->shape[1];
    zl_tensor *gc = zli_f32c(g), *gx = gc ? zli_new_f32_like(x, 4, x->shape) : NULL;
    zl_status st = !gx ? ZL_ENOMEM
                   : avg ? k->avg_pool_backward(index, &geo, planes, n->i[6] != 0, zl_tensor_data(gc),
                                                zl_tensor_data(gx))
                         : k->pool_backward(index, &geo, planes, zl_tensor_data(n->saved[0]), zl_tensor_data(gc),
                                            zl_tensor_data(gx));
    zl_tensor_release(gc);
    if (st) { zl_tensor_release(gx); return st; }
    gin[0] = gx;
    return ZL_OK;
}

static zl_status pool_check(const char *op, const zl_tensor *x, int kh, int kw, int sh, int sw, int ph, int pw,
                            pool_geom *geo)
{
    char s[128];
    if (zli_need_float(op, "input", x)) return ZL_EDTYPE;
    if (x->ndim != 4)
        return zl_error(ZL_ESHAPE, "%s: input must be 4-d [N, C, H, W], got shape %s", op,
                        zl_shape_str(x->ndim, x->shape, s, sizeof s));
    if (kh <= 0 || kw <= 0) return zl_error(ZL_EINVAL, "%s: kernel size must be positive, got (%d, %d)", op, kh, kw);
    if (x->shape[2] == 0 || x->shape[3] == 0)
        return zl_error(ZL_ESHAPE, "%s: the input's height and width must be positive, got %lldx%lld", op,
                        (long long)x->shape[2], (long long)x->shape[3]);
    if (sh <= 0 || sw <= 0) return zl_error(ZL_EINVAL, "%s: stride must be positive, got (%d, %d)", op, sh, sw);
    if (ph < 0 || pw < 0) return zl_error(ZL_EINVAL, "%s: padding must be non-negative, got (%d, %d)", op, ph, pw);
    /* Wider padding could leave a window with no element of the image in it
     * (torch refuses it too). */
    if (2 * ph > kh || 2 * pw > kw)
        return zl_error(ZL_EINVAL, "%s: padding (%d, %d) must be at most half the kernel size (%d, %d)", op, ph,
                        pw, kh, kw);
    int64_t h = x->shape[2], w = x->shape[3];
    if (h + 2 * ph < kh || w + 2 * pw < kw)
        return zl_error(ZL_ESHAPE, "%s: output would be empty: input %lldx%lld with padding (%d, %d) is "
                        "smaller than the kernel %dx%d (stride (%d, %d); input %s)", op,
                        (long long)h, (long long)w, ph, pw, kh, kw, sh, sw,
                        zl_shape_str(x->ndim, x->shape, s, sizeof s));
    *geo = (pool_geom){.c = x->shape[1], .h = h, .w = w, .kh = kh, .kw = kw, .oh = (h + 2 * ph - kh) / sh + 1,
                       .ow = (w + 2 * pw - kw) / sw + 1, .sh = sh, .sw = sw, .ph = ph, .pw = pw, .dh = 1, .dw = 1};
    return ZL_OK;
}

/* y in x's memory, and the argmax positions there (an i64 tensor) for backward. */
static zl_tensor *run_pool(const zli_dev_kernels *k, int index, zl_tensor *x, const pool_geom *geo, zl_tensor **arg)
{
    int64_t planes = x->shape[0] * x->shape[1], nout = planes * geo->oh * geo->ow;
    zl_tensor *xf = zli_f32c(x);
    *arg = xf ? zli_new_like(x, ZL_DTYPE_I64, 1, &nout, ZL_MEM_ACTIVATIONS) : NULL;
    zl_tensor *y = *arg ? zli_new_f32_like(x, 4, (int64_t[]){x->shape[0], x->shape[1], geo->oh, geo->ow}) : NULL;
    if (y && k->pool_forward(index, geo, planes, zl_tensor_data(xf), zl_tensor_data(y), zl_tensor_data(*arg))) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(xf);
    return y;
}

zl_tensor *zl_max_pool2d(zl_tensor *x, int kh, int kw, int stride_h, int stride_w, int pad_h, int pad_w)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin("max_pool2d", 1, &x)) return NULL;
    if (zli_op_device("max_pool2d", 1, &x, &k, &index) < 0) return zli_op_end("max_pool2d", 1, &x, NULL);
    pool_geom geo;
    if (pool_check("max_pool2d", x, kh, kw, stride_h, stride_w, pad_h, pad_w, &geo))
        return zli_op_end("max_pool2d", 1, &x, NULL);
    zl_tensor *arg = NULL;
    zl_tensor *y = zli_cast_result(run_pool(k, index, x, &geo, &arg), x->dtype);
    zl_node *n = NULL;
    if (y && zli_record(y, "max_pool2d", pool_backward, 1, &x, &n)) { zl_tensor_release(y); y = NULL; }
    if (n) {
        n->i[0] = stride_h; n->i[1] = stride_w;
        n->i[2] = pad_h; n->i[3] = pad_w;
        n->i[4] = kh; n->i[5] = kw;
        if (zli_node_save(n, 0, arg, false)) {
            zl_tensor_release(y);   /* frees the node */
            y = NULL;
        }
    }
    zl_tensor_release(arg);
    return zli_op_end("max_pool2d", 1, &x, y);
}

zl_tensor *zl_avg_pool2d(zl_tensor *x, int kh, int kw, int stride_h, int stride_w, int pad_h, int pad_w,
                         bool count_include_pad)
{
    const char *op = "avg_pool2d";
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin(op, 1, &x)) return NULL;
    if (zli_op_device(op, 1, &x, &k, &index) < 0) return zli_op_end(op, 1, &x, NULL);
    pool_geom geo;
    if (pool_check(op, x, kh, kw, stride_h, stride_w, pad_h, pad_w, &geo)) return zli_op_end(op, 1, &x, NULL);
    zl_tensor *xf = zli_f32c(x);
    zl_tensor *y = xf ? zli_new_f32_like(x, 4, (int64_t[]){x->shape[0], x->shape[1], geo.oh, geo.ow}) : NULL;
    if (y && k->avg_pool_forward(index, &geo, x->shape[0] * x->shape[1], count_include_pad, zl_tensor_data(xf),
                                 zl_tensor_data(y))) {
        zl_tensor_release(y);
        y = NULL;
    }
    zl_tensor_release(xf);
    y = zli_cast_result(y, x->dtype);
    zl_node *n = NULL;
    if (y && zli_record(y, op, pool_backward, 1, &x, &n)) { zl_tensor_release(y); y = NULL; }
    if (n) {
        n->i[0] = stride_h; n->i[1] = stride_w;
        n->i[2] = pad_h; n->i[3] = pad_w;
        n->i[4] = kh; n->i[5] = kw;
        n->i[6] = count_include_pad;
    }
    return zli_op_end(op, 1, &x, y);
}
