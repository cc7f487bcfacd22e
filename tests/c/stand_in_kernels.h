/* The stand-in device's op kernels (stand_in_kernels.c): the CUDA kernels'
 * element functions in loops, handed to the stand-in with fake_use_kernels,
 * and the calls the tests count to see that an op took the path it should. */
#ifndef ZL_TEST_STAND_IN_KERNELS_H
#define ZL_TEST_STAND_IN_KERNELS_H

#include "stand_in.h"
#include "core/tensor_impl.h"
#include "ops/device_kernels.h"

typedef struct stand_in_counts {
    int half_operands;          /* kernel calls with an operand in bf16 or f16, handed over as it is */
    int batched_gemms;          /* calls of more than one f32 GEMM at once */
    int half_gemms[3];          /* half-precision GEMM calls, by ZLM_* dtype */
    int linear_halfs;           /* linear's one-pass half-precision forward, run */
    bool linear_half_declines;  /* set: that kernel says it has none, as a GPU's may for some shapes */
    int flash[2];               /* flash attention's forward and backward, run */
} stand_in_counts;

extern stand_in_counts stand_in_calls;
extern const zli_dev_kernels stand_in_kernels;

#endif
