/* The caching device allocator: cudaMalloc is slow and synchronising, so
 * device memory comes in segments that block_pool.c splits into blocks and
 * takes back, per device, for the compute stream (the legacy default one,
 * where every kernel runs). A block the copy stream used waits, once freed,
 * for an event on that stream before it is handed out again. Charged by
 * category, with peaks, as the host allocator charges host memory
 * (zlua/memory.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <cuda_runtime_api.h>
#include "cuda_impl.h"
#include "block_pool.h"
#include "../core/memory_impl.h"

typedef struct dev_cache {
    pthread_mutex_t mu;
    zli_pool *pool;              /* made on first use */
    _Atomic int64_t current[ZL_MEM_COUNT + 1];   /* [ZL_MEM_COUNT]: all categories */
    _Atomic int64_t peak[ZL_MEM_COUNT + 1];
} dev_cache;

static dev_cache g_dev[ZLI_CUDA_MAX_DEVICES];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Bytes charged on every device together: read after each op (Lua's
 * collector counts them), so one load rather than a sum over devices. */
static _Atomic int64_t g_in_use;

static void init_caches(void)
{
    for (int i = 0; i < ZLI_CUDA_MAX_DEVICES; i++) pthread_mutex_init(&g_dev[i].mu, NULL);
}

/* The pool's backend: the device is its `user`, made current for each call
 * and the caller's device current again after it, since a block may be
 * freed while another device is current. */
static int enter(void *user)
{
    int dev = (int)(intptr_t)user, prev = dev;
    cudaGetDevice(&prev);
    if (prev != dev) cudaSetDevice(dev);
    return prev;
}

static void leave(void *user, int prev)
{
    if (prev != (int)(intptr_t)user) cudaSetDevice(prev);
}

static void *seg_alloc(size_t n, void *user)
{
    void *p = NULL;
    int prev = enter(user);
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        p = NULL;
    }
    leave(user, prev);
    return p;
}

static void seg_free(void *p, size_t n, void *user)
{
    (void)n;
    int prev = enter(user);
    zli_cuda_released("cudaFree", (int)cudaFree(p));
    leave(user, prev);
}

/* Without an event, the stream's work is waited for at once. */
static void *ev_record(void *stream, void *user)
{
    cudaEvent_t e = NULL;
    int prev = enter(user);
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(e, (cudaStream_t)stream) != cudaSuccess) {
        cudaGetLastError();
        if (e) cudaEventDestroy(e);
        e = NULL;
        cudaStreamSynchronize((cudaStream_t)stream);
    }
    leave(user, prev);
    return e;
}

/* An error other than "not ready" is the context's, reported by the next
 * call that checks: the block is not held for it. */
static bool ev_done(void *event, void *user)
{
    (void)user;
    cudaError_t r = cudaEventQuery((cudaEvent_t)event);
    if (r == cudaErrorNotReady) {
        cudaGetLastError();
        return false;
    }
    return true;
}

static void ev_drop(void *event, void *user)
{
    (void)user;
    zli_cuda_released("cudaEventDestroy", (int)cudaEventDestroy((cudaEvent_t)event));
}

/* Called with d->mu held. */
static zli_pool *pool_of(dev_cache *d, int index)
{
    if (!d->pool) {
        zli_pool_backend b = {seg_alloc, seg_free, ev_record, ev_done, ev_drop, (void *)(intptr_t)index};
        d->pool = zli_pool_new(&b);
    }
    return d->pool;
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
    atomic_fetch_add(&g_in_use, delta);
}

static void give_back(dev_cache *d, void *p)
{
    pthread_mutex_lock(&d->mu);
    if (d->pool) zli_pool_give(d->pool, p);
    pthread_mutex_unlock(&d->mu);
}

bool zli_cuda_record_use(int index, const void *at, void *stream)
{
    if (index < 0 || index >= ZLI_CUDA_MAX_DEVICES) return false;
    pthread_once(&g_once, init_caches);
    dev_cache *d = &g_dev[index];
    pthread_mutex_lock(&d->mu);
    bool ok = d->pool && zli_pool_record_stream(d->pool, at, stream);
    pthread_mutex_unlock(&d->mu);
    return ok;
}

static void storage_free(zl_storage *s)
{
    dev_cache *d = &g_dev[s->dev_index];
    charge(d, s->cat, -(int64_t)s->nbytes);
    give_back(d, s->data);
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
    size_t want = (size_t)numel * zl_dtype_size(dt), n = 0;
    pthread_mutex_lock(&d->mu);
    zli_pool *pool = pool_of(d, index);
    /* The pool gives its cached segments back before it fails; then the
     * host's garbage (Lua's collector), whose frees take the lock and land
     * in the pool, for one more try. */
    void *p = pool ? zli_pool_take(pool, want, NULL, &n) : NULL;
    if (!p && pool) {
        pthread_mutex_unlock(&d->mu);
        bool asked = zli_mem_pressure(want);
        pthread_mutex_lock(&d->mu);
        if (asked) p = zli_pool_take(pool, want, NULL, &n);
    }
    if (!p) {
        int64_t held = pool ? zli_pool_stats_of(pool).reserved : 0;
        pthread_mutex_unlock(&d->mu);
        /* A device that cannot say how much is free is broken, not full. */
        size_t fr = 0, total = 0;
        cudaError_t e = cudaMemGetInfo(&fr, &total);
        cudaGetLastError();
        if (e != cudaSuccess)
            zl_error(ZL_EDEVICE, "cuda:%d: cannot allocate %zu bytes for %s: %s", index, want,
                     zl_mem_category_name(cat), cudaGetErrorString(e));
        else
            zl_error(ZL_ENOMEM, "cuda:%d: cannot allocate %zu bytes for %s: out of memory (zlua holds %lld bytes; "
                     "the device has %zu of %zu free)", index, want, zl_mem_category_name(cat), (long long)held, fr,
                     total);
        return NULL;
    }
    pthread_mutex_unlock(&d->mu);
    zl_tensor *t = zli_tensor_on_device(dt, ndim, shape, cat, &cuda_ops, index, p, n);
    if (!t) {
        give_back(d, p);
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

int64_t zli_cuda_in_use(void) { return atomic_load(&g_in_use); }

int64_t zli_cuda_reserved(int index)
{
    if (index < 0 || index >= ZLI_CUDA_MAX_DEVICES) return 0;
    pthread_once(&g_once, init_caches);
    pthread_mutex_lock(&g_dev[index].mu);
    int64_t r = g_dev[index].pool ? zli_pool_stats_of(g_dev[index].pool).reserved : 0;
    pthread_mutex_unlock(&g_dev[index].mu);
    return r;
}

zl_status zli_cuda_empty_cache(int index)
{
    if (zli_cuda_use(index)) return zli_last_code();
    pthread_once(&g_once, init_caches);
    pthread_mutex_lock(&g_dev[index].mu);
    if (g_dev[index].pool) zli_pool_release(g_dev[index].pool);
    pthread_mutex_unlock(&g_dev[index].mu);
    return ZL_OK;
}
