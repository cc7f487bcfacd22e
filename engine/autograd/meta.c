/* The autograd data a tensor carries (node.h's zli_grad_meta): attached on
 * first need, freed with the tensor through the ext_free core calls; and the
 * rules autograd puts on writing a tensor (in place, set_data). */
#include <stdlib.h>
#include <string.h>
#include "node.h"

static void meta_free(void *ext, zl_tensor **worklist)
{
    zli_grad_meta *m = ext;
    zli_hooks_free(m->hooks);
    zli_release_deferred(m->grad, worklist);
    zli_release_deferred(m->bw_grad, worklist);
    if (m->grad_fn) zli_node_free(m->grad_fn, worklist);
    free(m);
}

zli_grad_meta *zli_meta_get(zl_tensor *t)
{
    if (t->ext) return t->ext;
    zli_grad_meta *m = calloc(1, sizeof *m);
    if (!m) { zl_error(ZL_ENOMEM, "out of memory attaching autograd data to a tensor"); return NULL; }
    t->ext = m;
    t->ext_free = meta_free;
    return m;
}

zl_status zli_check_inplace(const char *op, const zl_tensor *t)
{
    if (zli_requires_grad(t) && !zli_grad_fn(t) && zl_grad_is_enabled())
        return zl_error(ZL_ESTATE, "%s: cannot modify a leaf tensor that requires grad in place "
                        "(use no_grad)", op);
    return ZL_OK;
}

zl_status zl_tensor_set_data(zl_tensor *t, zl_tensor *src)
{
    if (zli_check_arg("set_data", "tensor", t) || zli_check_arg("set_data", "source", src)) return zli_last_code();
    zli_grad_meta *m = zli_meta(t);
    if (m && m->grad_fn)
        return zl_error(ZL_ESTATE, "set_data: the tensor was produced by %s; only a leaf's data can be replaced",
                        m->grad_fn->name);
    if (m && m->requires_grad && !zl_dtype_traits_of(src->dtype)->is_float)
        return zl_error(ZL_EDTYPE, "set_data: a tensor that requires grad cannot take %s data",
                        zl_dtype_name(src->dtype));
    if (m && m->grad) {
        zl_dtype grad_dt = m->grad_f32 ? ZL_DTYPE_F32 : src->dtype;
        /* A gradient left on another device could never be added to again. */
        if (m->grad->dtype != grad_dt || m->grad->ndim != src->ndim ||
            zl_tensor_device(m->grad) != zl_tensor_device(src) ||
            zl_tensor_device_index(m->grad) != zl_tensor_device_index(src) ||
            memcmp(m->grad->shape, src->shape, (size_t)src->ndim * sizeof src->shape[0]) != 0) {
            zl_tensor_release(m->grad);
            m->grad = NULL;
        }
    }
    zli_share_storage(t, src);
    return ZL_OK;
}
