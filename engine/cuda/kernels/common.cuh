/* What the kernels share: the block size, grid sizing for grid-stride loops,
 * the stream cast, and deterministic block reductions (a fixed tree of warp
 * shuffles, so a row's sum has the same bits on every run). */
#ifndef ZL_CUDA_KERNELS_COMMON_CUH
#define ZL_CUDA_KERNELS_COMMON_CUH

#include <cuda_runtime.h>
#include "kernels.h"
#include "../../math/convert.h"

#define ZLK_THREADS 256

static inline cudaStream_t zlk_stream(void *s) { return (cudaStream_t)s; }

/* Blocks for a grid-stride loop over n elements: enough to fill the device,
 * few enough that each thread does several. */
static inline unsigned zlk_blocks(int64_t n)
{
    int64_t b = (n + ZLK_THREADS - 1) / ZLK_THREADS;
    return (unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

/* Blocks for a kernel that gives each block whole rows in a grid-stride loop
 * over them: one a row up to 65536 rows, so any count launches. */
static inline unsigned zlk_row_blocks(int64_t rows) { return (unsigned)(rows < 65536 ? (rows > 0 ? rows : 1) : 65536); }

static inline int zlk_launched(void) { return (int)cudaGetLastError(); }

/* The contiguous fast paths: a thread takes ZLK_VEC consecutive elements in
 * 16-byte loads and stores (one for bf16 and f16, two for f32), so enough
 * bytes are in flight to reach the memory's bandwidth, which a load of one
 * 2-byte element per thread leaves at a fraction of it. Each element is
 * converted and rounded by math/convert.h, as the one-element path does. */
#define ZLK_VEC 8

/* Whether the n buffers (NULL ones left out) all start on 16 bytes. */
static inline bool zlk_aligned16(const void *const *p, int n)
{
    for (int i = 0; i < n; i++)
        if ((uintptr_t)p[i] % 16) return false;
    return true;
}

/* Blocks for a grid-stride loop over n elements taken ZLK_VEC at a time. */
static inline unsigned zlk_vec_blocks(int64_t n) { return zlk_blocks(n / ZLK_VEC + 1); }

/* v[ZLK_VEC] = elements i .. i + ZLK_VEC - 1 of p (dt, a float dtype) in f32;
 * i a multiple of ZLK_VEC and p 16-byte aligned. */
__device__ inline void zlk_load_vec(const void *p, int dt, int64_t i, float *v)
{
    if (dt == ZLM_F32) {
        float4 a = *(const float4 *)((const float *)p + i), b = *(const float4 *)((const float *)p + i + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    uint4 u = *(const uint4 *)((const uint16_t *)p + i);
    zlm_unpack_pair(u.x, dt, v);
    zlm_unpack_pair(u.y, dt, v + 2);
    zlm_unpack_pair(u.z, dt, v + 4);
    zlm_unpack_pair(u.w, dt, v + 6);
}

/* Elements i .. i + ZLK_VEC - 1 of p (dt, a float dtype) = v, rounded to dt. */
__device__ inline void zlk_store_vec(void *p, int dt, int64_t i, const float *v)
{
    if (dt == ZLM_F32) {
        *(float4 *)((float *)p + i) = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)((float *)p + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
        return;
    }
    *(uint4 *)((uint16_t *)p + i) =
        make_uint4(zlm_pack_pair(v, dt), zlm_pack_pair(v + 2, dt), zlm_pack_pair(v + 4, dt), zlm_pack_pair(v + 6, dt));
}

struct zlk_sum {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

/* The block's combination of every thread's v under op, returned to all
 * threads. blockDim.x must be a multiple of 32, at most 1024. */
template <typename T, typename Op> __device__ T zlk_block_reduce(T v, Op op, T identity)
{
    __shared__ T part[32];
    __shared__ T result;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? part[lane] : identity;
        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) result = v;
    }
    __syncthreads();
    T r = result;
    __syncthreads();   /* part and result are free for the next reduction */
    return r;
}

#endif
