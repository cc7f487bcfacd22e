/* Binary elementwise kernels: forward with numpy broadcasting through
 * per-operand strides (float operands in f32, integer ones in double), and
 * the per-element gradients of math/binary.h. */
#include "common.cuh"
#include "../../math/binary.h"
#include "../../math/binary_int.h"
#include "../../math/convert.h"

__global__ void binary_forward(int kind, zlk_bcast bc, int64_t n, const void *a, int adt, const void *b, int bdt,
                               void *out, int odt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t oa = 0, ob = 0, rem = i;
        for (int d = bc.ndim - 1; d >= 0; d--) {
            int64_t k = rem % bc.shape[d];
            rem /= bc.shape[d];
            oa += k * bc.sa[d];
            ob += k * bc.sb[d];
        }
        float r = zlm_binary_forward(kind, zlm_load(a, adt, oa), zlm_load(b, bdt, ob));
        if (odt == ZLK_BOOL) ((uint8_t *)out)[i] = r != 0.0f;
        else zlm_store(out, odt, i, r);
    }
}

__global__ void binary_backward(int kind, int64_t n, const void *a, int adt, const void *b, int bdt, const void *g,
                                int gdt, float *ga, float *gb)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float ai = zlm_load(a, adt, i), bi = zlm_load(b, bdt, i), gi = zlm_load(g, gdt, i);
        if (ga) ga[i] = zlm_binary_grad_a(kind, ai, bi, gi);
        if (gb) gb[i] = zlm_binary_grad_b(kind, ai, bi, gi);
    }
}

extern "C" int zlk_cuda_binary_forward(int kind, const zlk_bcast *bc, const void *a, int adt, const void *b, int bdt,
                                       void *out, int odt, void *stream)
{
    int64_t n = 1;
    for (int d = 0; d < bc->ndim; d++) n *= bc->shape[d];
    if (n <= 0) return 0;
    binary_forward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, *bc, n, a, adt, b, bdt, out, odt);
    return zlk_launched();
}

__global__ void binary_int_forward(int kind, zlm_view va, zlm_view vb, int64_t n, const void *a, int adt,
                                   const void *b, int bdt, void *out, int odt)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        zlm_binary_int_elem(kind, &va, a, adt, &vb, b, bdt, out, odt, i);
}

extern "C" int zlk_cuda_binary_int_forward(int kind, const zlk_bcast *bc, const void *a, int adt, const void *b,
                                           int bdt, void *out, int odt, void *stream)
{
    zlm_view va = {bc->ndim, {0}, {0}, 0}, vb = va;
    int64_t n = 1;
    for (int d = 0; d < bc->ndim; d++) {
        n *= bc->shape[d];
        va.shape[d] = vb.shape[d] = bc->shape[d];
        va.stride[d] = bc->sa[d];
        vb.stride[d] = bc->sb[d];
    }
    if (n <= 0) return 0;
    binary_int_forward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, va, vb, n, a, adt, b, bdt, out,
                                                                               odt);
    return zlk_launched();
}

extern "C" int zlk_cuda_binary_backward(int kind, int64_t n, const void *a, int adt, const void *b, int bdt,
                                        const void *g, int gdt, float *ga, float *gb, void *stream)
{
    if (n <= 0) return 0;
    binary_backward<<<zlk_blocks(n), ZLK_THREADS, 0, zlk_stream(stream)>>>(kind, n, a, adt, b, bdt, g, gdt, ga, gb);
    return zlk_launched();
}
