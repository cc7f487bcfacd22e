/* The stand-in device (stand_in.h): a backend (core/backend.h) whose
 * primitives (zli_device_ops) and optimizer table (optim/device_optim.h)
 * run over host memory, each one the element function its CUDA kernel runs,
 * in a loop in the kernel's order. */
#include <stdlib.h>
#include "stand_in.h"
#include "core/backend.h"
#include "core/tensor_impl.h"
#include "math/grad.h"
#include "math/index_fault.h"
#include "math/optim.h"
#include "math/rng.h"
#include "optim/device_optim.h"

static int64_t charged[ZL_MEM_COUNT];

/* ---- the copy stream: a queued copy is done only when an event after it
 * is waited for, the latest a GPU may do it, so a read before the wait sees
 * the old bytes and a write to its source before the wait is copied. The
 * compute runs as it is called: its events are always complete. ---- */
typedef struct fake_job {
    void *dst;
    const void *src;
    size_t n;
} fake_job;

static fake_job *jobs;
static int64_t njobs, jobs_cap, jobs_done;

typedef struct fake_event {
    int64_t upto;   /* the copies queued when it was made; 0 for the compute */
} fake_event;

static bool overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return x < y + nb && y < x + na;
}

/* Whether a queued copy not yet done reads or writes [p, p + n). */
static bool pending_on(const void *p, size_t n)
{
    for (int64_t i = jobs_done; i < njobs; i++)
        if (overlaps(jobs[i].dst, jobs[i].n, p, n) || overlaps(jobs[i].src, jobs[i].n, p, n)) return true;
    return false;
}

static zl_status new_event(int64_t upto, void **ev)
{
    fake_event *e = malloc(sizeof *e);
    CHECK(e != NULL);
    e->upto = upto;
    *ev = e;
    return ZL_OK;
}

static zl_status fake_mark(int index, void **ev)
{
    CHECK(index == FAKE_INDEX);
    return new_event(0, ev);
}

static zl_status fake_start(int index, void *after, void *dst, const void *src, size_t n, bool to_host, void **done)
{
    (void)after;
    (void)to_host;
    CHECK(index == FAKE_INDEX);
    if (njobs == jobs_cap) {
        jobs_cap = jobs_cap ? 2 * jobs_cap : 16;
        jobs = realloc(jobs, (size_t)jobs_cap * sizeof *jobs);
        CHECK(jobs != NULL);
    }
    jobs[njobs++] = (fake_job){dst, src, n};
    return new_event(njobs, done);
}

static zl_status fake_wait(int index, void *ev, bool host)
{
    (void)host;
    CHECK(index == FAKE_INDEX);
    for (fake_event *e = ev; e && jobs_done < e->upto; jobs_done++)
        memcpy(jobs[jobs_done].dst, jobs[jobs_done].src, jobs[jobs_done].n);
    return ZL_OK;
}

static void fake_drop(void *ev) { free(ev); }

static const zli_copy_stream fake_streams = {.mark = fake_mark, .start = fake_start, .wait = fake_wait,
                                             .drop = fake_drop};

int64_t fake_copies_pending(void) { return njobs - jobs_done; }
int64_t fake_copies_queued(void) { return njobs; }

static void fake_free(zl_storage *s)
{
    if (pending_on(s->data, s->nbytes))
        zt_fail(__FILE__, __LINE__, "device memory freed while a copy on the copy stream still uses it");
    charged[s->cat] -= (int64_t)s->nbytes;
    free(s->data);
}

static void fake_recharge(const zl_storage *s, zl_mem_category to)
{
    charged[s->cat] -= (int64_t)s->nbytes;
    charged[to] += (int64_t)s->nbytes;
}

static zl_tensor *fake_alloc(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index);

static zl_status fake_copy(zl_tensor *dst, const zl_tensor *src)
{
    zlm_view s = zli_strided_view(src), d = zli_strided_view(dst);
    for (int64_t i = 0; i < zl_tensor_numel(dst); i++)
        zlm_copy_view_elem(&d, dst->storage->data, (int)dst->dtype, &s, src->storage->data, (int)src->dtype, i);
    return ZL_OK;
}

static zl_status fake_fill(zl_tensor *t, double v)
{
    zlm_view d = zli_strided_view(t);
    for (int64_t i = 0; i < zl_tensor_numel(t); i++)
        zlm_set64(t->storage->data, (int)t->dtype, zlm_view_offset(&d, i), v);
    return ZL_OK;
}

static zl_status fake_add(zl_tensor *dst, const zl_tensor *src, double alpha)
{
    zlm_view d = zli_strided_view(dst), s = zli_strided_view(src);
    for (int64_t i = 0; i < zl_tensor_numel(dst); i++)
        zlm_add_elem(&d, dst->storage->data, (int)dst->dtype, &s, src->storage->data, (int)src->dtype, (float)alpha, i);
    return ZL_OK;
}

static zl_status fake_from_host(zl_tensor *dst, const zl_tensor *src)
{
    memcpy(zl_tensor_data(dst), zl_tensor_data(src), (size_t)zl_tensor_numel(src) * zl_dtype_size(src->dtype));
    return ZL_OK;
}

/* The device's index-fault note: armed by the op that takes it, read by
 * the next copy to the host, as CUDA's (cuda/faults.c). */
static zlm_index_fault fault_note;
static bool fault_armed;
int fake_to_hosts;

zlm_index_fault *fake_index_faults(int index)
{
    CHECK(index == FAKE_INDEX);
    fault_armed = true;
    return &fault_note;
}

static zl_status fake_to_host(void *dst, const zl_tensor *src)
{
    memcpy(dst, zl_tensor_data(src), (size_t)zl_tensor_numel(src) * zl_dtype_size(src->dtype));
    fake_to_hosts++;
    if (!fault_armed) return ZL_OK;
    fault_armed = false;
    if (!fault_note.set) return ZL_OK;
    char msg[512];
    zlm_index_fault_message(&fault_note, "cuda:7", msg, sizeof msg);
    fault_note = (zlm_index_fault){0};
    return zl_error(ZL_EINVAL, "%s", msg);
}

/* The generator's draw at each element's counter (kernels/rng.cu). */
static zl_status fake_rand(zl_tensor *t, bool normal, double a, double b, uint64_t seed, uint64_t offset)
{
    for (int64_t i = 0; i < zl_tensor_numel(t); i++)
        zlm_store(zl_tensor_data(t), (int)t->dtype, i, zlm_rand_value(normal, a, b, seed, offset + (uint64_t)i));
    return ZL_OK;
}

/* ---- the optimizer table: kernels/optim.cu and grad.cu, element by element ---- */

static zl_status fake_adam(int index, const zl_optim_adam *hp, const zl_optim_buf *b, int n)
{
    CHECK(index == FAKE_INDEX);
    zlm_adam_consts c = zlm_adam_make(hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, hp->adamw_mode,
                                      hp->bias_correction, hp->step, hp->grad_scale);
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < b[k].n; i++) {
            zlm_adam_update(&c, &b[k].p[i], &b[k].m[i], &b[k].v[i], zlm_load(b[k].g, (int)b[k].g_dtype, i));
            if (b[k].p_half) zlm_store(b[k].p_half, (int)b[k].half_dtype, i, b[k].p[i]);
        }
    return ZL_OK;
}

static zl_status fake_sgd(int index, const zl_optim_sgd *hp, const zl_optim_buf *b, int n)
{
    CHECK(index == FAKE_INDEX);
    zlm_sgd_consts c = zlm_sgd_make(hp->lr, hp->momentum, hp->dampening, hp->weight_decay, hp->nesterov, hp->step,
                                    hp->grad_scale);
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < b[k].n; i++) {
            float buf = c.use_momentum ? b[k].m[i] : 0.0f;
            zlm_sgd_update(&c, &b[k].p[i], &buf, zlm_load(b[k].g, (int)b[k].g_dtype, i));
            if (c.use_momentum) b[k].m[i] = buf;
            if (b[k].p_half) zlm_store(b[k].p_half, (int)b[k].half_dtype, i, b[k].p[i]);
        }
    return ZL_OK;
}

/* The sums in element order (a GPU's blocks add them in another order). */
static zl_status fake_lamb_moments(int index, const zl_optim_lamb *hp, const zl_optim_buf *b, int n, double *sq)
{
    CHECK(index == FAKE_INDEX);
    zlm_lamb_consts c = zlm_lamb_make(hp->beta1, hp->beta2, hp->eps, hp->weight_decay, hp->grad_scale);
    for (int k = 0; k < n; k++) {
        sq[2 * k] = sq[2 * k + 1] = 0;
        for (int64_t i = 0; i < b[k].n; i++)
            zlm_lamb_moments(&c, b[k].p[i], &b[k].m[i], &b[k].v[i], zlm_load(b[k].g, (int)b[k].g_dtype, i), sq + 2 * k);
    }
    return ZL_OK;
}

static zl_status fake_lamb_apply(int index, const zl_optim_lamb *hp, const zl_optim_buf *b, int n,
                                 const double *ratio)
{
    CHECK(index == FAKE_INDEX);
    zlm_lamb_consts c = zlm_lamb_make(hp->beta1, hp->beta2, hp->eps, hp->weight_decay, hp->grad_scale);
    for (int k = 0; k < n; k++) {
        float nr = zlm_lamb_neg_rate(hp->lr, hp->beta1, hp->beta2, hp->bias_correction, hp->step, ratio[k]);
        for (int64_t i = 0; i < b[k].n; i++) {
            zlm_lamb_apply(&c, nr, &b[k].p[i], b[k].m[i], b[k].v[i]);
            if (b[k].p_half) zlm_store(b[k].p_half, (int)b[k].half_dtype, i, b[k].p[i]);
        }
    }
    return ZL_OK;
}

static zl_status fake_nonfinite(int index, const zli_dev_span *s, int n, bool *found)
{
    CHECK(index == FAKE_INDEX);
    bool any = false;
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < s[k].n; i++) any |= zlm_nonfinite(s[k].x, (int)s[k].dt, i);
    *found = any;
    return ZL_OK;
}

static zl_status fake_sumsq(int index, const zli_dev_span *s, int n, double *part)
{
    CHECK(index == FAKE_INDEX);
    for (int k = 0; k < n; k++)
        for (int64_t lo = 0; lo < s[k].n; lo += ZLM_SUMSQ_CHUNK) {
            int64_t len = s[k].n - lo < ZLM_SUMSQ_CHUNK ? s[k].n - lo : ZLM_SUMSQ_CHUNK;
            double lanes[ZLM_SUMSQ_LANES];
            for (int l = 0; l < ZLM_SUMSQ_LANES; l++) lanes[l] = zlm_sumsq_lane(s[k].x, (int)s[k].dt, lo, len, l);
            *part++ = zlm_sumsq_chunk(s[k].x, (int)s[k].dt, lo, len, lanes);
        }
    return ZL_OK;
}

static zl_status fake_scale(int index, const zli_dev_span *s, int n, float f)
{
    CHECK(index == FAKE_INDEX);
    for (int k = 0; k < n; k++)
        for (int64_t i = 0; i < s[k].n; i++) zlm_scale(s[k].x, (int)s[k].dt, i, f);
    return ZL_OK;
}

static const zli_dev_optim fake_optim = {
    .adam = fake_adam, .sgd = fake_sgd, .lamb_moments = fake_lamb_moments, .lamb_apply = fake_lamb_apply,
    .nonfinite = fake_nonfinite, .sumsq = fake_sumsq, .scale = fake_scale,
};

/* Pinned memory is host memory from malloc, counted apart. */
static int64_t pinned_bytes;

static zl_tensor *fake_alloc_pinned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index);

static void fake_free_pinned(zl_storage *s)
{
    if (pending_on(s->data, s->nbytes))
        zt_fail(__FILE__, __LINE__, "pinned memory freed while a copy on the copy stream still uses it");
    pinned_bytes -= (int64_t)s->nbytes;
    free(s->data);
}

static zli_device_ops fake = {
    .kind = ZL_DEVICE_CUDA, .free = fake_free, .recharge = fake_recharge, .alloc = fake_alloc,
    .copy = fake_copy, .fill = fake_fill, .add = fake_add, .from_host = fake_from_host, .to_host = fake_to_host,
    .rand = fake_rand, .optim = &fake_optim, .alloc_pinned = fake_alloc_pinned, .free_pinned = fake_free_pinned,
    .streams = &fake_streams,
};

static zl_tensor *fake_alloc_pinned(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index)
{
    CHECK(index == FAKE_INDEX);
    size_t n = (size_t)zli_numel(ndim, shape) * zl_dtype_size(dt);
    void *p = malloc(n ? n : 1);
    zl_tensor *t = p ? zli_tensor_on_pinned(dt, ndim, shape, cat, &fake, p, n) : NULL;
    if (!t) free(p);
    else pinned_bytes += (int64_t)n;
    return t;
}

int64_t fake_pinned_bytes(void) { return pinned_bytes; }

void fake_use_kernels(const struct zli_dev_kernels *k) { fake.kernels = k; }

void fake_use_rand(bool on) { fake.rand = on ? fake_rand : NULL; }

void fake_use_streams(bool on) { fake.streams = on ? &fake_streams : NULL; }

static zl_tensor *fake_alloc(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index)
{
    size_t n = (size_t)zli_numel(ndim, shape) * zl_dtype_size(dt);
    void *p = malloc(n ? n : 1);
    zl_tensor *t = p ? zli_tensor_on_device(dt, ndim, shape, cat, &fake, index, p, n) : NULL;
    if (!t) free(p);
    else charged[cat] += (int64_t)n;
    return t;
}

/* ---- the stand-in as CUDA's backend: one device, cuda:FAKE_INDEX ---- */

static int fake_count(void) { return FAKE_INDEX + 1; }

static zl_status fake_use(int index)
{
    if (index == FAKE_INDEX) return ZL_OK;
    return zl_error(ZL_EDEVICE, "cuda:%d: the stand-in device is cuda:%d", index, FAKE_INDEX);
}

static zl_status fake_zero(zl_tensor *t)
{
    memset(zl_tensor_data(t), 0, (size_t)zl_tensor_numel(t) * zl_dtype_size(t->dtype));
    return ZL_OK;
}

static int64_t fake_in_use(void)
{
    int64_t sum = 0;
    for (int c = 0; c < ZL_MEM_COUNT; c++) sum += charged[c];
    return sum;
}

static zl_mem_stats fake_stats(int index, zl_mem_category cat)
{
    (void)index;
    int64_t now = cat == ZL_MEM_COUNT ? fake_in_use() : charged[cat];
    return (zl_mem_stats){now, now};
}

static int64_t fake_reserved(int index)
{
    (void)index;
    return fake_in_use();
}

static zl_status fake_nothing(int index) { return fake_use(index); }

static const zli_backend stand_in_backend = {
    .abi = ZLI_BACKEND_ABI, .kind = ZL_DEVICE_CUDA, .name = "cuda", .max_devices = FAKE_INDEX + 1,
    .count = fake_count, .use = fake_use, .alloc = fake_alloc, .zero = fake_zero, .stats = fake_stats,
    .in_use = fake_in_use, .reserved = fake_reserved, .empty_cache = fake_nothing, .synchronize = fake_nothing,
};

void fake_register(bool on) { CHECK(zli_backend_register(ZL_DEVICE_CUDA, on ? &stand_in_backend : NULL) == ZL_OK); }

zl_tensor *fake_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat)
{
    return fake_alloc(dt, ndim, shape, cat, FAKE_INDEX);
}

int64_t fake_bytes(zl_mem_category cat) { return charged[cat]; }

zl_tensor *to_fake(zl_tensor *h)
{
    zl_tensor *c = zl_tensor_contiguous(h);
    zl_tensor *d = fake_new(c->dtype, c->ndim, c->shape, ZL_MEM_OTHER);
    memcpy(zl_tensor_data(d), zl_tensor_data(c), (size_t)zl_tensor_numel(c) * zl_dtype_size(c->dtype));
    zl_tensor_release(c);
    return d;
}

zl_tensor *from_fake(const zl_tensor *d)
{
    zl_tensor *h = zl_tensor_new(d->dtype, d->ndim, d->shape, ZL_MEM_OTHER);
    zlm_view v = zli_strided_view(d);
    for (int64_t i = 0; i < zl_tensor_numel(d); i++)
        zlm_copy_elem(&v, d->storage->data, (int)d->dtype, zl_tensor_data(h), (int)d->dtype, i);
    return h;
}

void check_bits(const zl_tensor *a, const zl_tensor *dev, const char *what)
{
    zl_tensor *b = from_fake(dev);
    if (a->dtype != b->dtype || zl_tensor_numel(a) != zl_tensor_numel(b) || !zl_tensor_is_contiguous(a) ||
        memcmp(zl_tensor_data(a), zl_tensor_data(b), (size_t)zl_tensor_numel(a) * zl_dtype_size(a->dtype)))
        zt_fail(__FILE__, __LINE__, "%s (%s): the device's result differs from the host's: %.9g vs %.9g", what,
                zl_dtype_name(a->dtype), zl_tensor_get(a, 0), zl_tensor_get(b, 0));
    zl_tensor_release(b);
}
