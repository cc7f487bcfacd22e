/* embedding: forward gathers rows, one thread per element, noting an index
 * out of range in the device's fault note when given one; backward zeroes
 * the [V, D] gradient (unless it accumulates into one), then a block per
 * position, when it is the first of its index and that is neither the
 * padding row nor out of range, adds the rows of every position with that index in position order
 * (math/embedding.h), the block's threads over the columns: repeated
 * indices sum the way the CPU sums them and no atomics decide the bits. */
#include "common.cuh"
#include "../../math/embedding.h"

__global__ void embedding_backward(int64_t n, int64_t v, int64_t d, const int64_t *idx, int64_t pad, const void *g,
                                   int gdt, float *gw)
{
    __shared__ unsigned hits[ZLK_THREADS / 32];
    size_t es = gdt == ZLM_F32 ? 4 : 2;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
        int64_t ip = idx[p];
        if (ip == pad || ip < 0 || ip >= v) continue;   /* the same for the whole block; a bad index was noted */
        int seen = 0;
        for (int64_t q = threadIdx.x; q < p && !seen; q += blockDim.x) seen = idx[q] == ip;
        if (__syncthreads_or(seen)) continue;
        float *row = gw + ip * d;
        /* The positions from p on, a block's width at a time: which hold ip
         * (a bit per thread), then their rows added in position order. */
        for (int64_t base = p; base < n; base += blockDim.x) {
            int64_t q = base + threadIdx.x;
            unsigned m = __ballot_sync(0xffffffffu, q < n && idx[q] == ip);
            if (lane == 0) hits[warp] = m;
            __syncthreads();
            for (int w = 0; w < (int)(blockDim.x >> 5); w++)
                for (unsigned bits = hits[w]; bits; bits &= bits - 1) {
                    int64_t at = base + w * 32 + __ffs(bits) - 1;
                    const char *grow = (const char *)g + at * d * es;
                    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) row[j] += zlm_load(grow, gdt, j);
                }
            __syncthreads();
        }
    }
}

__global__ void embedding_forward(int64_t total, int64_t v, int64_t d, int es, const int64_t *idx, const void *w,
                                  void *out, zlm_index_fault *fault)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        zlm_embedding_gather(i, v, d, es, idx, w, out, fault);
}

extern "C" int zlk_cuda_embedding_forward(int64_t n, int64_t v, int64_t d, int es, const int64_t *idx, const void *w,
                                          void *out, zlm_index_fault *fault, void *stream)
{
    int64_t total = n * d;
    if (total <= 0) return 0;
    embedding_forward<<<zlk_blocks(total), ZLK_THREADS, 0, zlk_stream(stream)>>>(total, v, d, es, idx, w, out,
                                                                                  fault);
    return zlk_launched();
}

extern "C" int zlk_cuda_embedding_backward(int64_t n, int64_t v, int64_t d, const int64_t *idx, int64_t pad,
                                           const void *g, int gdt, float *gw, bool accumulate, void *stream)
{
    if (v <= 0 || d <= 0) return 0;
    cudaError_t e = accumulate ? cudaSuccess
                               : cudaMemsetAsync(gw, 0, (size_t)(v * d) * sizeof(float), zlk_stream(stream));
    if (e != cudaSuccess || n <= 0) return (int)e;
    unsigned blocks = (unsigned)(n < (1 << 20) ? n : (1 << 20));
    embedding_backward<<<blocks, ZLK_THREADS, 0, zlk_stream(stream)>>>(n, v, d, idx, pad, g, gdt, gw);
    return zlk_launched();
}
