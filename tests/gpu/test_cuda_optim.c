/* The optimizers and mixed precision's passes on a GPU (cuda:0) against the
 * host: the checks of tests/c/device_optim_cases.h, which the CPU suite runs
 * through the stand-in device. Exits 77 (CTest's skip) with the reason when
 * the machine has no CUDA device. */
#include <stdlib.h>
#include "harness.h"

__attribute__((constructor(200))) static void skip_without_gpu(void)
{
    if (zl_device_count(ZL_DEVICE_CUDA) > 0) return;
    printf("skipped: %s\n", zl_last_error());
    exit(77);
}

#define DEV_NAME "cuda:0"

static zl_tensor *to_dev(zl_tensor *h) { return zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0); }

static void check_dev_bits(const zl_tensor *h, const zl_tensor *d, const char *what)
{
    zl_tensor *b = zl_tensor_to_device((zl_tensor *)d, ZL_DEVICE_CPU, 0);
    zl_tensor *c = zl_tensor_contiguous((zl_tensor *)h);
    int64_t n = zl_tensor_numel(c);
    if (!b || zl_tensor_dtype(b) != zl_tensor_dtype(c) || zl_tensor_numel(b) != n ||
        memcmp(zl_tensor_data(b), zl_tensor_data(c), (size_t)n * zl_dtype_size(zl_tensor_dtype(c))))
        zt_fail(__FILE__, __LINE__, "%s (%s): the GPU's result differs from the host's: %.9g vs %.9g", what,
                zl_dtype_name(zl_tensor_dtype(c)), b ? zl_tensor_get(b, 0) : NAN, zl_tensor_get(c, 0));
    zl_tensor_release(c);
    zl_tensor_release(b);
}

#include "device_optim_cases.h"
