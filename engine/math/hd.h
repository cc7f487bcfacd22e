/* The ground of engine/math, the per-element math the host and the CUDA
 * kernels share: ZL_HD (host and device under nvcc, nothing in C), bit
 * casts, the storage dtype codes, and f32/f16/bf16 element loads and stores.
 * Plain C11 that also compiles as CUDA C++. */
#ifndef ZL_MATH_HD_H
#define ZL_MATH_HD_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ZL_HD __host__ __device__
#define ZLM_RESTRICT __restrict__
#else
#define ZL_HD
#define ZLM_RESTRICT restrict
#endif

/* Storage dtypes, numbered as zl_dtype's F32, F16 and BF16 (test_cuda_math
 * checks), so a launcher takes a zl_dtype without including the engine. */
enum { ZLM_F32 = 0, ZLM_F16 = 1, ZLM_BF16 = 2 };

/* memcpy is the one bit cast both C and CUDA device code define. */
static inline ZL_HD uint32_t zlm_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline ZL_HD float zlm_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
