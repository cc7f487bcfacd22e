/* The public in-place writes (fill, copy_, add_): autograd's rule that a leaf
 * requiring grad is not written in grad mode, and the source's use hooks,
 * around core's plain fill/copy/add. */
#include "op_util.h"

zl_status zl_tensor_fill(zl_tensor *t, double v)
{
    if (zli_check_arg("fill", "tensor", t) || zli_check_inplace("fill", t)) return zli_last_code();
    return zli_fill(t, v);
}

/* The source is broadcast through zl_tensor_expand, so its use hooks fire as
 * for any op that reads it. */
static zl_tensor *expanded_src(const char *op, const zl_tensor *src, const zl_tensor *dst)
{
    zl_tensor *e = zl_tensor_expand((zl_tensor *)src, dst->ndim, dst->shape);
    if (!e) zli_broadcast_error(op, src, dst);
    return e;
}

zl_status zl_tensor_copy_(zl_tensor *dst, const zl_tensor *src)
{
    if (zli_check_arg("copy_", "dst", dst) || zli_check_arg("copy_", "src", src)) return zli_last_code();
    if (zli_check_inplace("copy_", dst)) return ZL_ESTATE;
    zl_tensor *e = expanded_src("copy_", src, dst);
    if (!e) return ZL_ESHAPE;
    zl_status st = zli_copy(dst, e);
    zl_tensor_release(e);
    return st;
}

zl_status zl_tensor_add_(zl_tensor *dst, const zl_tensor *src, double alpha)
{
    if (zli_check_arg("add_", "dst", dst) || zli_check_arg("add_", "src", src)) return zli_last_code();
    if (zli_check_inplace("add_", dst)) return ZL_ESTATE;
    if (!zl_dtype_traits_of(dst->dtype)->is_float)
        return zl_error(ZL_EDTYPE, "add_: the destination must be a float tensor, got %s", zl_dtype_name(dst->dtype));
    zl_tensor *e = expanded_src("add_", src, dst);
    if (!e) return ZL_ESHAPE;
    zl_status st = zli_add(dst, e, alpha);
    zl_tensor_release(e);
    return st;
}
