/* zlua/device.h — where a tensor's memory lives: the CPU, or a CUDA device
 * with its caching allocator. Moving tensors between them, and the device's
 * memory figures by category as zlua/memory.h gives them for the host. */
#ifndef ZLUA_DEVICE_H
#define ZLUA_DEVICE_H

#include "base.h"
#include "memory.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Visible devices of a kind: 1 for the CPU; for CUDA the count the runtime
 * reports, 0 when there is none, and then zl_last_error() says why ("no CUDA
 * device: ..." naming the runtime's answer, CUDA_VISIBLE_DEVICES and the
 * driver looked for, or where the CUDA module libzlua_cuda.so was looked for;
 * "zlua was built without CUDA ..." in such a build). The first CUDA call
 * opens that module. */
ZL_API int zl_device_count(zl_device kind);
/* ZL_OK when device `index` of kind exists and can be used; otherwise the
 * error above (ZL_EDEVICE), or ZL_EINVAL for an index out of range. */
ZL_API zl_status zl_device_check(zl_device kind, int index);
/* "cpu", "cuda:0", ... into buf (always NUL-terminated); returns buf. */
ZL_API char *zl_device_str(zl_device kind, int index, char *buf, size_t n);
/* Parse "cpu", "cuda" (index 0) or "cuda:N". ZL_EINVAL naming the text otherwise. */
ZL_API zl_status zl_device_parse(const char *s, zl_device *kind, int *index);

/* The device index of t's storage (0 on the CPU). */
ZL_API int zl_tensor_device_index(const zl_tensor *t);
/* Uninitialised contiguous tensor on a device, charged to `cat` on it. */
ZL_API zl_tensor *zl_tensor_new_on(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                   zl_device kind, int index);
ZL_API zl_tensor *zl_tensor_zeros_on(zl_dtype dt, int ndim, const int64_t *shape, zl_device kind, int index);
/* A contiguous copy of t on the given device, same dtype and category; t
 * itself (retained) when it is already there. Waits for the copy. */
ZL_API zl_tensor *zl_tensor_to_device(zl_tensor *t, zl_device kind, int index);

/* Device memory charged by category (bytes handed to tensors; the allocator's
 * cache is not counted) and its peak, as zl_mem_stats_of for the host;
 * cat ZL_MEM_COUNT gives all categories together (the peak of the sum). An
 * unknown kind or category, an index out of range, or a kind with no
 * backend here gives zeros and sets the error. */
ZL_API zl_mem_stats zl_device_mem_stats(zl_device kind, int index, zl_mem_category cat);
/* Bytes charged to tensors on every device of a kind this process uses (all
 * categories); reads counters, opens no module and starts no runtime. */
ZL_API int64_t zl_device_mem_in_use(zl_device kind);
/* Bytes the caching allocator holds from the driver (in use plus cached). */
ZL_API int64_t zl_device_mem_reserved(zl_device kind, int index);
/* Give every cached, unused block back to the driver. */
ZL_API zl_status zl_device_empty_cache(zl_device kind, int index);
/* Wait for all work queued on the device. */
ZL_API zl_status zl_device_synchronize(zl_device kind, int index);

#ifdef __cplusplus
}
#endif
#endif
