/* The op case list (tests/c/op_cases.c) on a real GPU against the host,
 * within each dtype's tolerance: CUDA's libm and cuBLASLt round their own
 * way. Exits 77 (CTest's skip) with the reason when the machine has no
 * CUDA device. ZLUA_OP_CASE narrows the run to the cases naming it. */
#include <stdlib.h>
#include "op_cases.h"

__attribute__((constructor(200))) static void skip_without_gpu(void)
{
    if (zl_device_count(ZL_DEVICE_CUDA) > 0) return;
    printf("skipped: %s\n", zl_last_error());
    exit(77);
}

static zl_tensor *to_gpu(zl_tensor *h) { return zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0); }
static zl_tensor *to_cpu(const zl_tensor *d) { return zl_tensor_to_device((zl_tensor *)d, ZL_DEVICE_CPU, 0); }

TEST(the_cases_on_cuda)
{
    const op_target gpu = {"cuda:0", to_gpu, to_cpu, false, false};
    CHECK(op_cases_run(&gpu, getenv("ZLUA_OP_CASE")) > 0);
}
