/* The CPU as a backend: one device (cpu, index 0) whose memory is the host
 * allocator's and whose figures are the host's accounting (zlua/memory.h). */
#include <string.h>
#include "backend.h"

static int cpu_count(void) { return 1; }

static zl_status cpu_use(int index)
{
    return index == 0 ? ZL_OK : zl_error(ZL_EINVAL, "cpu:%d: no such device (the CPU is device 0)", index);
}

static zl_tensor *cpu_alloc(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index)
{
    (void)index;
    return zl_tensor_new(dt, ndim, shape, cat);
}

static zl_status cpu_zero(zl_tensor *t)
{
    memset(zl_tensor_data(t), 0, (size_t)zl_tensor_numel(t) * zl_dtype_size(t->dtype));
    return ZL_OK;
}

static int64_t all_current(void)
{
    int64_t sum = 0;
    for (int c = 0; c < ZL_MEM_COUNT; c++) sum += zl_mem_stats_of((zl_mem_category)c).current;
    return sum;
}

static zl_mem_stats cpu_stats(int index, zl_mem_category cat)
{
    (void)index;
    if (cat != ZL_MEM_COUNT) return zl_mem_stats_of(cat);
    int64_t now = all_current();
    return (zl_mem_stats){now, now};   /* the host keeps no peak of the sum */
}

static int64_t cpu_in_use(void) { return all_current(); }

static int64_t cpu_reserved(int index)
{
    (void)index;
    return all_current();
}

static zl_status cpu_nothing(int index)
{
    (void)index;
    return ZL_OK;
}

const zli_backend zli_cpu_backend = {
    .abi = ZLI_BACKEND_ABI, .kind = ZL_DEVICE_CPU, .name = "cpu", .max_devices = 1, .count = cpu_count,
    .use = cpu_use, .alloc = cpu_alloc, .zero = cpu_zero, .stats = cpu_stats, .in_use = cpu_in_use,
    .reserved = cpu_reserved, .empty_cache = cpu_nothing, .synchronize = cpu_nothing,
};
