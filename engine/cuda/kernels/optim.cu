/* The fused multi-tensor optimizers: up to ZLK_PACK tensors per launch passed
 * by value, blockIdx.y picking the tensor and a grid-stride loop over it, each
 * element stepped by math/optim.h. Lamb's sums go through fixed per-block
 * partials added in order, so the trust ratio has the same bits every run. */
#include "common.cuh"
#include "../../math/convert.h"
#include "../../math/optim.h"

#define ZLK_PACK 16
#define ZLK_OPTIM_BLOCKS 256

struct zlk_pack {
    zlk_optim_tensor t[ZLK_PACK];
    int first;   /* index in the caller's list of t[0] */
};

__global__ void adam_kernel(zlk_pack pk, int gdt, int hdt, zlm_adam_consts c)
{
    zlk_optim_tensor t = pk.t[blockIdx.y];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        float p = t.p[i], m = t.m[i], v = t.v[i];
        zlm_adam_update(&c, &p, &m, &v, zlm_load(t.g, gdt, i));
        t.p[i] = p;
        t.m[i] = m;
        t.v[i] = v;
        if (t.p_half) zlm_store(t.p_half, hdt, i, p);
    }
}

__global__ void sgd_kernel(zlk_pack pk, int gdt, int hdt, zlm_sgd_consts c)
{
    zlk_optim_tensor t = pk.t[blockIdx.y];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        float p = t.p[i], buf = c.use_momentum ? t.m[i] : 0.0f;
        zlm_sgd_update(&c, &p, &buf, zlm_load(t.g, gdt, i));
        t.p[i] = p;
        if (c.use_momentum) t.m[i] = buf;
        if (t.p_half) zlm_store(t.p_half, hdt, i, p);
    }
}

/* work [(first + y) * ZLK_LAMB_BLOCKS + x] * 2: this block's p^2 and u^2. */
__global__ void lamb_moments_kernel(zlk_pack pk, int gdt, zlm_lamb_consts c, double *work)
{
    zlk_optim_tensor t = pk.t[blockIdx.y];
    double sq[2] = {0, 0};
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        float m = t.m[i], v = t.v[i];
        zlm_lamb_moments(&c, t.p[i], &m, &v, zlm_load(t.g, gdt, i), sq);
        t.m[i] = m;
        t.v[i] = v;
    }
    double sp = zlk_block_reduce(sq[0], zlk_sum(), 0.0), su = zlk_block_reduce(sq[1], zlk_sum(), 0.0);
    if (threadIdx.x == 0) {
        double *w = work + ((int64_t)(pk.first + blockIdx.y) * ZLK_LAMB_BLOCKS + blockIdx.x) * 2;
        w[0] = sp;
        w[1] = su;
    }
}

/* One thread per tensor adds its partials in block order. */
__global__ void lamb_sum_kernel(int nt, const double *work, double *sq)
{
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= nt) return;
    double sp = 0, su = 0;
    for (int b = 0; b < ZLK_LAMB_BLOCKS; b++) {
        sp += work[((int64_t)k * ZLK_LAMB_BLOCKS + b) * 2];
        su += work[((int64_t)k * ZLK_LAMB_BLOCKS + b) * 2 + 1];
    }
    sq[2 * k] = sp;
    sq[2 * k + 1] = su;
}

__global__ void lamb_apply_kernel(zlk_pack pk, int hdt, zlm_lamb_consts c, const float *neg_rate)
{
    zlk_optim_tensor t = pk.t[blockIdx.y];
    float nr = neg_rate[pk.first + blockIdx.y];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t.n; i += (int64_t)gridDim.x * blockDim.x) {
        float p = t.p[i];
        zlm_lamb_apply(&c, nr, &p, t.m[i], t.v[i]);
        t.p[i] = p;
        if (t.p_half) zlm_store(t.p_half, hdt, i, p);
    }
}

/* Packs of the list, each with the grid its largest tensor needs. */
static zlk_pack pack_at(const zlk_optim_tensor *t, int nt, int first, int *count, unsigned *blocks)
{
    zlk_pack pk;
    memset(&pk, 0, sizeof pk);
    pk.first = first;
    *count = nt - first < ZLK_PACK ? nt - first : ZLK_PACK;
    int64_t most = 0;
    for (int k = 0; k < *count; k++) {
        pk.t[k] = t[first + k];
        most = pk.t[k].n > most ? pk.t[k].n : most;
    }
    *blocks = zlk_blocks(most);
    if (*blocks > ZLK_OPTIM_BLOCKS) *blocks = ZLK_OPTIM_BLOCKS;
    return pk;
}

extern "C" int zlk_cuda_adam(const zlk_optim_tensor *t, int nt, int gdt, int hdt, const zlm_adam_consts *c,
                             void *stream)
{
    for (int first = 0; first < nt; first += ZLK_PACK) {
        int count;
        unsigned blocks;
        zlk_pack pk = pack_at(t, nt, first, &count, &blocks);
        adam_kernel<<<dim3(blocks, count), ZLK_THREADS, 0, zlk_stream(stream)>>>(pk, gdt, hdt, *c);
        int err = zlk_launched();
        if (err) return err;
    }
    return 0;
}

extern "C" int zlk_cuda_sgd(const zlk_optim_tensor *t, int nt, int gdt, int hdt, const zlm_sgd_consts *c,
                            void *stream)
{
    for (int first = 0; first < nt; first += ZLK_PACK) {
        int count;
        unsigned blocks;
        zlk_pack pk = pack_at(t, nt, first, &count, &blocks);
        sgd_kernel<<<dim3(blocks, count), ZLK_THREADS, 0, zlk_stream(stream)>>>(pk, gdt, hdt, *c);
        int err = zlk_launched();
        if (err) return err;
    }
    return 0;
}

extern "C" int zlk_cuda_lamb_moments(const zlk_optim_tensor *t, int nt, int gdt, const zlm_lamb_consts *c,
                                     double *work, double *sq, void *stream)
{
    if (nt <= 0) return 0;
    for (int first = 0; first < nt; first += ZLK_PACK) {
        int count;
        unsigned blocks;
        zlk_pack pk = pack_at(t, nt, first, &count, &blocks);
        /* Always ZLK_LAMB_BLOCKS blocks: each writes its partials, even when empty. */
        lamb_moments_kernel<<<dim3(ZLK_LAMB_BLOCKS, count), ZLK_THREADS, 0, zlk_stream(stream)>>>(pk, gdt, *c, work);
        int err = zlk_launched();
        if (err) return err;
    }
    lamb_sum_kernel<<<(unsigned)((nt + 127) / 128), 128, 0, zlk_stream(stream)>>>(nt, work, sq);
    return zlk_launched();
}

extern "C" int zlk_cuda_lamb_apply(const zlk_optim_tensor *t, int nt, int hdt, const zlm_lamb_consts *c,
                                   const float *neg_rate, void *stream)
{
    for (int first = 0; first < nt; first += ZLK_PACK) {
        int count;
        unsigned blocks;
        zlk_pack pk = pack_at(t, nt, first, &count, &blocks);
        lamb_apply_kernel<<<dim3(blocks, count), ZLK_THREADS, 0, zlk_stream(stream)>>>(pk, hdt, *c, neg_rate);
        int err = zlk_launched();
        if (err) return err;
    }
    return 0;
}
