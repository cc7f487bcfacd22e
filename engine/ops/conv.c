/* conv2d with stride, padding, dilation and groups, forward and backward. A
 * table's fused conv2d runs it where it has one (the CPU's,
 * ops/cpu/conv.c); a table without (a GPU's) gets the same steps composed
 * of its im2col, col2im and GEMM (conv_composed.c). */
#include <stdio.h>
#include <string.h>
#include "conv.h"

/* The geometry node n recorded: i[0..5] stride, padding and dilation; the
 * weight's second dim is a group's channels. */
static conv_geom geom_of(const zl_node *n)
{
    const zl_tensor *x = n->inputs[0], *w = n->inputs[1];
    return (conv_geom){.c = w->shape[1], .h = x->shape[2], .w = x->shape[3], .kh = w->shape[2], .kw = w->shape[3],
                       .oh = n->out_shape[2], .ow = n->out_shape[3], .sh = n->i[0], .sw = n->i[1], .ph = n->i[2],
                       .pw = n->i[3], .dh = n->i[4], .dw = n->i[5]};
}

/* A table's fused backward where it has one, else the composed one. */
static zl_status conv_backward(zl_node *n, zl_tensor *g, zl_tensor **gin)
{
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_device("conv2d backward", 1, n->inputs, &k, &index) < 0) return zli_last_code();
    conv_geom geo = geom_of(n);
    int64_t groups = n->i[6];
    if (k->conv2d_backward) return k->conv2d_backward(index, n, &geo, groups, g, gin);
    return zli_conv2d_backward_composed(k, index, n, &geo, groups, g, gin);
}

static zl_status conv_check(const zl_tensor *x, const zl_tensor *w, const zl_tensor *b, int sh, int sw, int ph,
                            int pw, int dh, int dw, int groups, conv_geom *geo)
{
    const char *op = "conv2d";
    char s1[128], s2[128];
    if (zli_need_float(op, "input", x) || zli_need_float(op, "weight", w) || (b && zli_need_float(op, "bias", b)))
        return ZL_EDTYPE;
    if (x->ndim != 4)
        return zl_error(ZL_ESHAPE, "conv2d: input must be 4-d [N, C, H, W], got shape %s",
                        zl_shape_str(x->ndim, x->shape, s1, sizeof s1));
    if (w->ndim != 4)
        return zl_error(ZL_ESHAPE, "conv2d: weight must be 4-d [O, C, kh, kw], got shape %s",
                        zl_shape_str(w->ndim, w->shape, s1, sizeof s1));
    if (groups <= 0) return zl_error(ZL_EINVAL, "conv2d: groups must be positive, got %d", groups);
    if (x->shape[1] % groups != 0 || w->shape[0] % groups != 0)
        return zli_shape_error(op, x->shape[1] % groups ? "the input's channels are not a multiple of groups"
                                                         : "the weight's output channels are not a multiple of groups",
                               x, w);
    if (x->shape[1] != w->shape[1] * groups) {
        char what[160];
        if (groups == 1)
            snprintf(what, sizeof what, "input has %lld channels but the weight expects %lld",
                     (long long)x->shape[1], (long long)w->shape[1]);
        else
            snprintf(what, sizeof what, "input has %lld channels but the weight expects %lld (%lld a group, %d groups)",
                     (long long)x->shape[1], (long long)(w->shape[1] * groups), (long long)w->shape[1], groups);
        return zli_shape_error(op, what, x, w);
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return zli_shape_error(op, "bias must be [O] for a weight [O, C, kh, kw]", b, w);
    if (sh <= 0 || sw <= 0) return zl_error(ZL_EINVAL, "conv2d: stride must be positive, got (%d, %d)", sh, sw);
    if (ph < 0 || pw < 0) return zl_error(ZL_EINVAL, "conv2d: padding must be non-negative, got (%d, %d)", ph, pw);
    if (dh <= 0 || dw <= 0) return zl_error(ZL_EINVAL, "conv2d: dilation must be positive, got (%d, %d)", dh, dw);
    int64_t h = x->shape[2], wd = x->shape[3], kh = w->shape[2], kw = w->shape[3];
    /* The span a dilated kernel covers. */
    int64_t eh = (int64_t)dh * (kh - 1) + 1, ew = (int64_t)dw * (kw - 1) + 1;
    if (h + 2 * ph < eh || wd + 2 * pw < ew) {
        char span[64] = "";
        if (dh != 1 || dw != 1) snprintf(span, sizeof span, " dilated to %lldx%lld", (long long)eh, (long long)ew);
        return zl_error(ZL_ESHAPE, "conv2d: output would be empty: input %lldx%lld with padding (%d, %d) is "
                        "smaller than the kernel %lldx%lld%s (stride (%d, %d); input %s, weight %s)",
                        (long long)h, (long long)wd, ph, pw, (long long)kh, (long long)kw, span, sh, sw,
                        zl_shape_str(x->ndim, x->shape, s1, sizeof s1), zl_shape_str(w->ndim, w->shape, s2, sizeof s2));
    }
    *geo = (conv_geom){.c = w->shape[1], .h = h, .w = wd, .kh = kh, .kw = kw,
                       .oh = (h + 2 * ph - eh) / sh + 1, .ow = (wd + 2 * pw - ew) / sw + 1,
                       .sh = sh, .sw = sw, .ph = ph, .pw = pw, .dh = dh, .dw = dw};
    return ZL_OK;
}

zl_tensor *zl_conv2d(zl_tensor *x, zl_tensor *w, zl_tensor *b, int stride_h, int stride_w, int pad_h, int pad_w)
{
    return zl_conv2d_ex(x, w, b, stride_h, stride_w, pad_h, pad_w, 1, 1, 1);
}

zl_tensor *zl_conv2d_ex(zl_tensor *x, zl_tensor *w, zl_tensor *b, int stride_h, int stride_w, int pad_h, int pad_w,
                        int dilation_h, int dilation_w, int groups)
{
    zl_tensor *in[3] = {x, w, b};
    int nin = b ? 3 : 2;
    const zli_dev_kernels *k = NULL;
    int index = 0;
    if (zli_op_begin("conv2d", nin, in)) return NULL;
    if (zli_op_device("conv2d", nin, in, &k, &index) < 0) return zli_op_end("conv2d", nin, in, NULL);
    /* The input and the weight in the one memory; a one-element bias may come from the host. */
    const zl_tensor *home = zli_op_home(nin, in);
    if (zli_same_device("conv2d", home, x) || zli_same_device("conv2d", home, w))
        return zli_op_end("conv2d", nin, in, NULL);
    conv_geom geo;
    if (conv_check(x, w, b, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, &geo))
        return zli_op_end("conv2d", nin, in, NULL);
    zl_tensor *xf = zli_f32c(x), *wf = zli_f32c(w), *bf = b ? zli_f32c_like(b, x) : NULL, *y = NULL;
    if (xf && wf && (!b || bf))
        y = k->conv2d ? k->conv2d(index, &geo, groups, xf, wf, bf)
                      : zli_conv2d_composed(k, index, &geo, groups, xf, wf, bf);
    zl_tensor_release(xf);
    zl_tensor_release(wf);
    zl_tensor_release(bf);
    y = zli_cast_result(y, zli_promote(x->dtype, w->dtype));
    zl_node *n;
    if (y && zli_record(y, "conv2d", conv_backward, nin, in, &n)) { zl_tensor_release(y); y = NULL; }
    else if (y && n) {
        n->i[0] = stride_h; n->i[1] = stride_w;
        n->i[2] = pad_h; n->i[3] = pad_w;
        n->i[4] = dilation_h; n->i[5] = dilation_w;
        n->i[6] = groups;
    }
    return zli_op_end("conv2d", nin, in, y);
}
