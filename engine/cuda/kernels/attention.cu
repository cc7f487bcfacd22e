/* The softmax between attention's two GEMMs (cuBLASLt runs those): a thread
 * block per row of scores (rows in a grid-stride loop), causal rows cut at
 * their query's position, keys a bool mask hides left out (a row that sees
 * none is all 0, as on the CPU), and its backward from dP to dS. f32 sums,
 * as the CPU's attention takes them. */
#include "common.cuh"
#include "../../math/attention.h"

struct zlk_att_max {
    __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

__device__ void attention_softmax_row(int64_t r, int64_t tq, int64_t tk, bool causal, const uint8_t *mask,
                                      const zlm_view &mv, float *s)
{
    int64_t lim = zlm_attention_limit(r, tq, tk, causal);
    float *row = s + r * tk;
    float m = -INFINITY;
    int any = 0;
    for (int64_t j = threadIdx.x; j < lim; j += blockDim.x)
        if (zlm_attention_allowed(mask, &mv, r, tk, j)) {
            any = 1;
            m = row[j] > m ? row[j] : m;
        }
    m = zlk_block_reduce(m, zlk_att_max(), -INFINITY);
    any = zlk_block_reduce(any, zlk_sum(), 0);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < lim; j += blockDim.x) {
        row[j] = any && zlm_attention_allowed(mask, &mv, r, tk, j) ? zlm_attention_exp(row[j], m) : 0.0f;
        sum += row[j];
    }
    sum = zlk_block_reduce(sum, zlk_sum(), 0.0f);
    float inv = any ? 1.0f / sum : 0.0f;
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) row[j] = j < lim ? row[j] * inv : 0.0f;
}

__global__ void attention_softmax(int64_t rows, int64_t tq, int64_t tk, bool causal, const uint8_t *mask,
                                  zlm_view mv, float *s)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) attention_softmax_row(r, tq, tk, causal, mask, mv, s);
}

__device__ void attention_softmax_backward_row(int64_t r, int64_t tk, float *dp, const float *p)
{
    int64_t base = r * tk;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) dot += dp[base + j] * p[base + j];
    dot = zlk_block_reduce(dot, zlk_sum(), 0.0f);
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x)
        dp[base + j] = zlm_attention_grad(p[base + j], dp[base + j], dot);
}

__global__ void attention_softmax_backward(int64_t rows, int64_t tk, float *dp, const float *p)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) attention_softmax_backward_row(r, tk, dp, p);
}

extern "C" int zlk_cuda_attention_softmax(int64_t rows, int64_t tq, int64_t tk, bool causal, const uint8_t *mask,
                                          const zlm_view *mv, float *s, void *stream)
{
    if (rows <= 0 || tk <= 0) return 0;
    zlm_view v = mask ? *mv : zlm_view{};
    attention_softmax<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, tq, tk, causal, mask, v,
                                                                                   s);
    return zlk_launched();
}

extern "C" int zlk_cuda_attention_softmax_backward(int64_t rows, int64_t tk, float *dp, const float *p, void *stream)
{
    if (rows <= 0 || tk <= 0) return 0;
    attention_softmax_backward<<<zlk_row_blocks(rows), ZLK_THREADS, 0, zlk_stream(stream)>>>(rows, tk, dp, p);
    return zlk_launched();
}
