/* The caching device allocator: cudaMalloc is slow and synchronising, so a
 * freed block goes to a per-device cache and the next request of about its
 * size takes it back. Charged by category, with peaks, as the host allocator
 * charges host memory (zlua/memory.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include "cuda_impl.h"
#include "../core/memory_impl.h"

/* Small requests round to 512 bytes, large ones to 2 MiB, so that the sizes a
 * training step asks for again and again map onto the same cached blocks. */
#define SMALL_ROUND ((size_t)512)
#define LARGE_ROUND ((size_t)2 << 20)
#define LARGE_MIN ((size_t)1 << 20)

typedef struct block {
    void *ptr;
    size_t size;
    struct block *next;
} block;

typedef struct dev_cache {
    pthread_mutex_t mu;
    block *free_blocks;          /* cached, unused */
    int64_t reserved;            /* bytes held from the driver, in use or cached */
    _Atomic int64_t current[ZL_MEM_COUNT + 1];   /* [ZL_MEM_COUNT]: all categories */
    _Atomic int64_t peak[ZL_MEM_COUNT + 1];
} dev_cache;

static dev_cache g_dev[ZLI_CUDA_MAX_DEVICES];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_caches(void)
{
    for (int i = 0; i < ZLI_CUDA_MAX_DEVICES; i++) pthread_mutex_init(&g_dev[i].mu, NULL);
}

static size_t round_size(size_t n)
{
    if (n == 0) n = 1;
    size_t r = n < LARGE_MIN ? SMALL_ROUND : LARGE_ROUND;
    return (n + r - 1) / r * r;
}

static void charge_one(dev_cache *d, int slot, int64_t delta)
{
    int64_t now = atomic_fetch_add(&d->current[slot], delta) + delta;
    int64_t p = atomic_load(&d->peak[slot]);
    while (now > p && !atomic_compare_exchange_weak(&d->peak[slot], &p, now)) {}
}

static void charge(dev_cache *d, zl_mem_category cat, int64_t delta)
{
    charge_one(d, (int)cat, delta);
    charge_one(d, ZL_MEM_COUNT, delta);
}

/* The best cached fit: at least n bytes and at most a quarter more, so a
 * small tensor never pins a large block. Called with d->mu held. */
static void *take_cached(dev_cache *d, size_t n)
{
    block **best = NULL;
    for (block **b = &d->free_blocks; *b; b = &(*b)->next)
        if ((*b)->size == n) { best = b; break; }
        else if ((*b)->size > n && (*b)->size - n <= n / 4 && (!best || (*b)->size < (*best)->size)) best = b;
    if (!best) return NULL;
    block *hit = *best;
    *best = hit->next;
    void *p = hit->ptr;
    free(hit);
    return p;
}

/* Called with d->mu held and the device current. */
static void release_cached(dev_cache *d)
{
    while (d->free_blocks) {
        block *b = d->free_blocks;
        d->free_blocks = b->next;
        cudaFree(b->ptr);
        d->reserved -= (int64_t)b->size;
        free(b);
    }
}

/* Keep a block for reuse (or, with no memory to note it in, give it back). */
static void cache_block(dev_cache *d, void *p, size_t n, int index)
{
    block *b = malloc(sizeof *b);
    pthread_mutex_lock(&d->mu);
    if (b) {
        b->ptr = p;
        b->size = n;
        b->next = d->free_blocks;
        d->free_blocks = b;
    } else {
        cudaSetDevice(index);
        cudaFree(p);
        d->reserved -= (int64_t)n;
    }
    pthread_mutex_unlock(&d->mu);
}

static void storage_free(zl_storage *s)
{
    dev_cache *d = &g_dev[s->dev_index];
    charge(d, s->cat, -(int64_t)s->nbytes);
    cache_block(d, s->data, s->nbytes, s->dev_index);
}

static void storage_recharge(const zl_storage *s, zl_mem_category to)
{
    dev_cache *d = &g_dev[s->dev_index];
    charge(d, s->cat, -(int64_t)s->nbytes);
    charge(d, to, (int64_t)s->nbytes);
}

static const zli_device_ops cuda_ops = {
    .kind = ZL_DEVICE_CUDA, .free = storage_free, .recharge = storage_recharge, .alloc = zli_cuda_new,
    .copy = zli_cuda_copy_into, .fill = zli_cuda_fill, .add = zli_cuda_add, .from_host = zli_cuda_from_host,
    .to_host = zli_cuda_to_host, .rand = zli_cuda_rand,
    .kernels = &zli_cuda_kernels, .optim = &zli_cuda_optim,
    .alloc_pinned = zli_cuda_alloc_pinned, .free_pinned = zli_cuda_free_pinned, .streams = &zli_cuda_streams,
};

const zli_device_ops *zli_cuda_ops(void) { return &cuda_ops; }

zl_tensor *zli_cuda_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index)
{
    if (zli_cuda_use(index)) return NULL;
    if (!zl_dtype_traits_of(dt)) { zl_error(ZL_EDTYPE, "tensor: invalid dtype %d", (int)dt); return NULL; }
    if ((unsigned)cat >= ZL_MEM_COUNT) {
        zl_error(ZL_EINVAL, "tensor: invalid memory category %d", (int)cat);
        return NULL;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] && numel > INT64_MAX / 8 / shape[i])) {
            zl_error(ZL_EINVAL, "tensor: invalid shape on cuda:%d", index);
            return NULL;
        }
        numel *= shape[i];
    }
    pthread_once(&g_once, init_caches);
    dev_cache *d = &g_dev[index];
    size_t n = round_size((size_t)numel * zl_dtype_size(dt));
    pthread_mutex_lock(&d->mu);
    void *p = take_cached(d, n);
    if (!p) {
        cudaError_t e = cudaMalloc(&p, n);
        if (e == cudaErrorMemoryAllocation) {
            /* What the cache holds may be exactly what is missing. */
            cudaGetLastError();
            release_cached(d);
            e = cudaMalloc(&p, n);
        }
        if (e == cudaErrorMemoryAllocation) {
            /* Then the host's garbage (Lua's collector): its frees take the
             * lock, and land in the cache, given back before the last try. */
            cudaGetLastError();
            pthread_mutex_unlock(&d->mu);
            bool asked = zli_mem_pressure(n);
            pthread_mutex_lock(&d->mu);
            if (asked) {
                release_cached(d);
                e = cudaMalloc(&p, n);
            }
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            int64_t in_use = d->reserved;
            pthread_mutex_unlock(&d->mu);
            size_t fr = 0, total = 0;
            cudaMemGetInfo(&fr, &total);
            zl_error(e == cudaErrorMemoryAllocation ? ZL_ENOMEM : ZL_EDEVICE,
                     "cuda:%d: cannot allocate %zu bytes for %s: %s (zlua holds %lld bytes; the device has "
                     "%zu of %zu free)", index, n, zl_mem_category_name(cat), cudaGetErrorString(e),
                     (long long)in_use, fr, total);
            return NULL;
        }
        d->reserved += (int64_t)n;
    }
    pthread_mutex_unlock(&d->mu);
    zl_tensor *t = zli_tensor_on_device(dt, ndim, shape, cat, &cuda_ops, index, p, n);
    if (!t) {
        cache_block(d, p, n, index);
        return NULL;
    }
    charge(d, cat, (int64_t)n);
    return t;
}

zl_mem_stats zli_cuda_stats(int index, zl_mem_category cat)
{
    zl_mem_stats st = {0, 0};
    if (index < 0 || index >= ZLI_CUDA_MAX_DEVICES || (unsigned)cat > ZL_MEM_COUNT) return st;
    st.current = atomic_load(&g_dev[index].current[cat]);
    st.peak = atomic_load(&g_dev[index].peak[cat]);
    return st;
}

int64_t zli_cuda_reserved(int index)
{
    if (index < 0 || index >= ZLI_CUDA_MAX_DEVICES) return 0;
    pthread_once(&g_once, init_caches);
    pthread_mutex_lock(&g_dev[index].mu);
    int64_t r = g_dev[index].reserved;
    pthread_mutex_unlock(&g_dev[index].mu);
    return r;
}

zl_status zli_cuda_empty_cache(int index)
{
    if (zli_cuda_use(index)) return zli_last_code();
    pthread_once(&g_once, init_caches);
    pthread_mutex_lock(&g_dev[index].mu);
    release_cached(&g_dev[index]);
    pthread_mutex_unlock(&g_dev[index].mu);
    return ZL_OK;
}
