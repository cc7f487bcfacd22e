/* The optimizers and mixed precision's passes on a device, through the
 * stand-in device (stand_in.c: host memory, the CUDA kernels' element
 * functions in loops): the checks of device_optim_cases.h, which
 * tests/gpu/test_cuda_optim.c repeats on a GPU. */
#include "stand_in.h"

#define DEV_NAME "cuda:7"
static zl_tensor *to_dev(zl_tensor *h) { return to_fake(h); }
static void check_dev_bits(const zl_tensor *h, const zl_tensor *d, const char *what) { check_bits(h, d, what); }

#include "device_optim_cases.h"
