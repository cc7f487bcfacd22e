/* Binary elementwise kernels: forward with numpy broadcasting through
 * per-operand strides (float operands in f32, integer ones in double), and
 * the per-element gradients of math/binary.h. Operands that lie as the
 * output does (no broadcast, contiguous), 16-byte aligned, go ZLK_VEC
 * elements a thread at a time with no index arithmetic. */
#include "common.cuh"
#include "../../math/binary.h"
#include "../../math/binary_int.h"

__device__ inline void binary_store(void *out, int odt, int64_t i, float r)
{
    if (odt == ZLK_BOOL) ((uint8_t *)out)[i] = r != 0.0f;
    else zlm_store(out, odt, i, r);
}

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
        binary_store(out, odt, i, zlm_binary_forward(kind, zlm_load(a, adt, oa), zlm_load(b, bdt, ob)));
    }
}

template <bool VEC>
__global__ void binary_forward_dense(int kind, int64_t n, const void *a, int adt, const void *b, int bdt, void *out,
                                     int odt)
{
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x, rest = 0;
    if (VEC) {
        for (int64_t i = t * ZLK_VEC; i + ZLK_VEC <= n; i += step * ZLK_VEC) {
            float av[ZLK_VEC], bv[ZLK_VEC];
            zlk_load_vec(a, adt, i, av);
            zlk_load_vec(b, bdt, i, bv);
#pragma unroll
            for (int k = 0; k < ZLK_VEC; k++) av[k] = zlm_binary_forward(kind, av[k], bv[k]);
            zlk_store_vec(out, odt, i, av);
        }
        rest = n / ZLK_VEC * ZLK_VEC;
    }
    for (int64_t i = rest + t; i < n; i += step)
        binary_store(out, odt, i, zlm_binary_forward(kind, zlm_load(a, adt, i), zlm_load(b, bdt, i)));
}

template <bool VEC>
__global__ void binary_backward(int kind, int64_t n, const void *a, int adt, const void *b, int bdt, const void *g,
                                int gdt, float *ga, float *gb)
{
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x, rest = 0;
    if (VEC) {
        for (int64_t i = t * ZLK_VEC; i + ZLK_VEC <= n; i += step * ZLK_VEC) {
            float av[ZLK_VEC], bv[ZLK_VEC], gv[ZLK_VEC], r[ZLK_VEC];
            zlk_load_vec(a, adt, i, av);
            zlk_load_vec(b, bdt, i, bv);
            zlk_load_vec(g, gdt, i, gv);
            if (ga) {
#pragma unroll
                for (int k = 0; k < ZLK_VEC; k++) r[k] = zlm_binary_grad_a(kind, av[k], bv[k], gv[k]);
                zlk_store_vec(ga, ZLM_F32, i, r);
            }
            if (gb) {
#pragma unroll
                for (int k = 0; k < ZLK_VEC; k++) r[k] = zlm_binary_grad_b(kind, av[k], bv[k], gv[k]);
                zlk_store_vec(gb, ZLM_F32, i, r);
            }
        }
        rest = n / ZLK_VEC * ZLK_VEC;
    }
    for (int64_t i = rest + t; i < n; i += step) {
        float ai = zlm_load(a, adt, i), bi = zlm_load(b, bdt, i), gi = zlm_load(g, gdt, i);
        if (ga) ga[i] = zlm_binary_grad_a(kind, ai, bi, gi);
        if (gb) gb[i] = zlm_binary_grad_b(kind, ai, bi, gi);
    }
}

/* Whether both operands lie as the contiguous output does. */
static bool dense(const zlk_bcast *bc)
{
    int64_t want = 1;
    for (int d = bc->ndim - 1; d >= 0; d--) {
        if (bc->shape[d] != 1 && (bc->sa[d] != want || bc->sb[d] != want)) return false;
        want *= bc->shape[d];
    }
    return true;
}

extern "C" int zlk_cuda_binary_forward(int kind, const zlk_bcast *bc, const void *a, int adt, const void *b, int bdt,
                                       void *out, int odt, void *stream)
{
    int64_t n = 1;
    for (int d = 0; d < bc->ndim; d++) n *= bc->shape[d];
    if (n <= 0) return 0;
    cudaStream_t s = zlk_stream(stream);
    const void *bufs[] = {a, b, out};
    if (!dense(bc))
        binary_forward<<<zlk_blocks(n), ZLK_THREADS, 0, s>>>(kind, *bc, n, a, adt, b, bdt, out, odt);
    else if (odt != ZLK_BOOL && zlk_aligned16(bufs, 3))
        binary_forward_dense<true><<<zlk_vec_blocks(n), ZLK_THREADS, 0, s>>>(kind, n, a, adt, b, bdt, out, odt);
    else
        binary_forward_dense<false><<<zlk_blocks(n), ZLK_THREADS, 0, s>>>(kind, n, a, adt, b, bdt, out, odt);
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
    cudaStream_t s = zlk_stream(stream);
    const void *bufs[] = {a, b, g, ga, gb};
    if (zlk_aligned16(bufs, 5))
        binary_backward<true><<<zlk_vec_blocks(n), ZLK_THREADS, 0, s>>>(kind, n, a, adt, b, bdt, g, gdt, ga, gb);
    else
        binary_backward<false><<<zlk_blocks(n), ZLK_THREADS, 0, s>>>(kind, n, a, adt, b, bdt, g, gdt, ga, gb);
    return zlk_launched();
}
