/* Private: conv2d's geometry, shared by the CPU's fused kernels (cpu/conv.c) and
 * the composed path (conv_composed.c), and the composed path's two entry points. */
#ifndef ZL_CONV_H
#define ZL_CONV_H

#include "device_kernels.h"

typedef zli_dev_window conv_geom;

/* A 1x1 kernel at stride 1 without padding reads the image (a group's
 * channels of it) as its own column matrix; dilation moves no tap of it. */
static inline bool zli_conv_is_direct(const conv_geom *g)
{
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* y [N, O, oh, ow] f32 in the memory of xf [N, C, H, W] = xf conv wf [O,
 * C / groups, kh, kw] + bf [O] (or none), in `groups` groups (g->c is a
 * group's channels), all f32 contiguous there: composed of k's im2col and
 * GEMM, for a table without a fused conv2d. */
ZLI_HIDDEN zl_tensor *zli_conv2d_composed(const zli_dev_kernels *k, int index, const conv_geom *g, int64_t groups,
                                          const zl_tensor *xf, const zl_tensor *wf, const zl_tensor *bf);
/* conv2d's backward for node n, likewise: gin[0..2] for x, w and b where
 * they require a gradient. */
ZLI_HIDDEN zl_status zli_conv2d_backward_composed(const zli_dev_kernels *k, int index, zl_node *n, const conv_geom *g,
                                                  int64_t groups, zl_tensor *grad, zl_tensor **gin);

#endif
