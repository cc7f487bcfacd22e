/* The CUDA module's way to core: the names of core the module's code calls,
 * each forwarding to the table libzlua hands the module's entry. Kept local
 * to the module (its version script exports only the entry), so they
 * neither need a static zlua to export anything nor shadow core's own. */
#include <stdarg.h>
#include <stdio.h>
#include "cuda_impl.h"
#include "../core/memory_impl.h"

static const zli_core_api *core;

void zli_cuda_link_core(const zli_core_api *api) { core = api; }

zl_status zl_error(zl_status code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return core->error(code, "%s", msg);
}

const char *zl_last_error(void) { return core->last_error(); }
zl_status zli_last_code(void) { return core->last_code(); }
int zl_interrupt_pending(void) { return core->interrupt_pending(); }
const char *zl_dtype_name(zl_dtype dt) { return core->dtype_name(dt); }
size_t zl_dtype_size(zl_dtype dt) { return core->dtype_size(dt); }
const zl_dtype_traits *zl_dtype_traits_of(zl_dtype dt) { return core->dtype_traits_of(dt); }
const char *zl_mem_category_name(zl_mem_category c) { return core->mem_category_name(c); }
bool zli_mem_pressure(size_t nbytes) { return core->mem_pressure(nbytes); }
void *zl_tensor_data(const zl_tensor *t) { return core->tensor_data(t); }
bool zl_tensor_is_contiguous(const zl_tensor *t) { return core->tensor_is_contiguous(t); }
int64_t zl_tensor_numel(const zl_tensor *t) { return core->tensor_numel(t); }
void zl_tensor_release(zl_tensor *t) { core->tensor_release(t); }

zl_tensor *zl_tensor_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat)
{
    return core->tensor_new(dt, ndim, shape, cat);
}

zl_tensor *zli_tensor_on_device(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                const zli_device_ops *dev, int index, void *data, size_t nbytes)
{
    return core->tensor_on_device(dt, ndim, shape, cat, dev, index, data, nbytes);
}

zl_tensor *zli_tensor_on_pinned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                const zli_device_ops *dev, void *data, size_t nbytes)
{
    return core->tensor_on_pinned(dt, ndim, shape, cat, dev, data, nbytes);
}
