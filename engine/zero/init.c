/* zero.Init: models built already partitioned. Each parameter given to the
 * store keeps only this rank's f32 chunk (in memory, or with offload_param
 * on NVMe in a slot of the store's swap file, written as it is made) and its
 * data is emptied, so no rank ever holds the whole model; an engine created
 * later takes the chunks over as its masters, and a frozen parameter's chunk
 * stays here for good, gathered for each op that reads it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_impl.h"

typedef struct zz_record {
    zl_tensor *p;              /* retained */
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    int64_t n, k;
    zl_tensor *chunk;          /* [k] f32, or NULL when it lives in the swap */
    int slot;
    int hook;                  /* zl_zero_init_gather_on_use's use hook on p, 0 when none */
} zz_record;

struct zl_zero_init {
    zl_comm *comm;
    int P, q;
    zz_record *recs;
    int nrec, cap;
    zl_aio *aio;
    zli_swap *swap;
};

zl_status zl_zero_init_new(zl_comm *comm, const zl_zero_config *cfg, zl_zero_init **out)
{
    if (!comm || !cfg || !out) return zl_error(ZL_EINVAL, "zero.Init: missing communicator or config");
    zl_zero_init *in = calloc(1, sizeof *in);
    if (!in) return zl_error(ZL_ENOMEM, "zero.Init: out of memory");
    in->comm = comm;
    in->P = zl_comm_size(comm);
    in->q = zl_comm_rank(comm);
    zl_status st = ZL_OK;
    if (cfg->offload_param.device == ZL_OFFLOAD_NVME) {
        char dir[4096], path[4200], sub[64];
        snprintf(sub, sizeof sub, "init/rank%d", in->q);
        if (zl_aio_unavailable())
            st = zl_error(ZL_EINVAL, "zero.Init: config: zero_optimization.offload_param.device = \"nvme\": %s; "
                          "use \"cpu\" or \"none\"", zl_aio_unavailable());
        else if (!cfg->offload_param.nvme_path)
            st = zl_error(ZL_EINVAL, "zero.Init (offload_param): nvme_path is needed with device \"nvme\"");
        if (!st) st = zli_swap_folder(cfg->offload_param.nvme_path, sub, "zero.Init (offload_param)", dir, sizeof dir);
        if (!st) st = zl_aio_open(&cfg->aio, &in->aio);
        snprintf(path, sizeof path, "%s/chunks.swp", dir);
        /* Chunks go straight from and to their own tensors (zli_swap_read/write):
         * the swapper's buffer, sized for any chunk, is never allocated. */
        zli_swap_config sc = {.path = path, .dtype = ZL_DTYPE_F32, .buffer_elems = (int64_t)1 << 47, .buffer_count = 1,
                             .cat = ZL_MEM_OPTIMIZER, .what = "zero.Init (offload_param)"};
        if (!st) st = zli_swap_open(in->aio, &sc, &in->swap);
    }
    if (st) {
        zl_zero_init_free(in);
        return st;
    }
    *out = in;
    return ZL_OK;
}

static void drop_record(zl_zero_init *in, int i)
{
    if (in->recs[i].hook) zl_tensor_remove_hook(in->recs[i].p, in->recs[i].hook);
    zl_tensor_release(in->recs[i].p);
    zl_tensor_release(in->recs[i].chunk);
    in->recs[i] = in->recs[--in->nrec];
}

void zl_zero_init_free(zl_zero_init *in)
{
    if (!in) return;
    while (in->nrec > 0) drop_record(in, in->nrec - 1);
    free(in->recs);
    if (in->swap) zli_swap_close(in->swap);
    zl_aio_close(in->aio);
    free(in);
}

static int find(const zl_zero_init *in, const zl_tensor *p)
{
    for (int i = 0; in && i < in->nrec; i++)
        if (in->recs[i].p == p) return i;
    return -1;
}

bool zl_zero_init_holds(const zl_zero_init *in, const zl_tensor *p) { return find(in, p) >= 0; }

static zl_status set_empty(zl_tensor *p)
{
    int64_t zero = 0;
    zl_tensor *e = zl_tensor_new(ZL_DTYPE_F32, 1, &zero, ZL_MEM_PARAMS);
    if (!e) return ZL_ENOMEM;
    bool was = zl_grad_set_enabled(false);
    zl_status st = zl_tensor_set_data(p, e);
    zl_grad_set_enabled(was);
    zl_tensor_release(e);
    return st;
}

/* The record's chunk in memory (read back from the swap: a new reference). */
static zl_status chunk_of(zl_zero_init *in, zz_record *r, zl_tensor **out)
{
    if (r->chunk) {
        *out = zl_tensor_retain(r->chunk);
        return ZL_OK;
    }
    if (!(*out = zz_buffer(ZL_DTYPE_F32, r->k, ZL_MEM_OPTIMIZER, false))) return ZL_ENOMEM;
    zl_status st = zli_swap_read(in->swap, r->slot, *out);
    if (st) {
        zl_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

static zl_status put_chunk(zl_zero_init *in, zz_record *r, zl_tensor *c)
{
    if (r->chunk) {
        memcpy(zl_tensor_data(r->chunk), zl_tensor_data(c), (size_t)r->k * 4);
        return ZL_OK;
    }
    return zli_swap_write(in->swap, r->slot, c);
}

zl_status zl_zero_init_partition(zl_zero_init *in, zl_tensor *p)
{
    if (!in || !p) return zl_error(ZL_EINVAL, "zero.Init: no store or tensor");
    if (find(in, p) >= 0) return ZL_OK;
    /* The store keeps its chunks in host memory: zero.Init does not build on a device. */
    if (zli_need_host("zero.Init", "the parameter", p)) return ZL_EDEVICE;
    if (zl_tensor_dtype(p) != ZL_DTYPE_F32)
        return zl_error(ZL_EINVAL, "zero.Init: parameters must be built in f32, got %s",
                        zl_dtype_name(zl_tensor_dtype(p)));
    if (in->nrec == in->cap) {
        int nc = in->cap ? 2 * in->cap : 32;
        zz_record *nr = realloc(in->recs, (size_t)nc * sizeof *nr);
        if (!nr) return zl_error(ZL_ENOMEM, "zero.Init: out of memory");
        in->recs = nr;
        in->cap = nc;
    }
    zz_record r = {.ndim = zl_tensor_ndim(p), .n = zl_tensor_numel(p), .slot = -1};
    memcpy(r.shape, zl_tensor_shape(p), (size_t)r.ndim * sizeof(int64_t));
    r.k = zz_chunk(r.n, in->P);
    int64_t lo, own;
    zz_owned(r.n, r.k, in->q, &lo, &own);
    /* The chunk becomes the rank's f32 master when an engine takes the model over. */
    zl_tensor *chunk = zz_buffer(ZL_DTYPE_F32, r.k, ZL_MEM_OPTIMIZER, true);
    zl_tensor *c = chunk ? zl_tensor_contiguous(p) : NULL;
    if (!c) {
        zl_tensor_release(chunk);
        return zl_error(ZL_ENOMEM, "zero.Init: out of memory partitioning a parameter of %lld elements", (long long)r.n);
    }
    if (own > 0) memcpy(zl_tensor_data(chunk), (const float *)zl_tensor_data(c) + lo, (size_t)own * 4);
    zl_tensor_release(c);
    zl_status st = ZL_OK;
    if (in->swap) {
        r.slot = zli_swap_add_slot(in->swap, r.k);
        st = r.slot < 0 ? ZL_EINVAL : zli_swap_write(in->swap, r.slot, chunk);
        zl_tensor_release(chunk);
    } else {
        r.chunk = chunk;
    }
    if (!st) st = set_empty(p);
    if (st) {
        zl_tensor_release(r.chunk);
        return st;
    }
    r.p = zl_tensor_retain(p);
    in->recs[in->nrec++] = r;
    return ZL_OK;
}

zl_status zl_zero_init_gather(zl_zero_init *in, zl_tensor *p)
{
    int i = find(in, p);
    if (i < 0) return zl_error(ZL_EINVAL, "zero.GatheredParameters: the tensor is not partitioned by zero.Init");
    zz_record *r = &in->recs[i];
    zl_tensor *c, *full = zz_buffer(ZL_DTYPE_F32, in->P * r->k, ZL_MEM_PARAMS, false);
    if (!full) return ZL_ENOMEM;
    zl_status st = chunk_of(in, r, &c);
    if (!st) {
        st = zl_comm_allgather(in->comm, c, full);
        zl_tensor_release(c);
    }
    zl_tensor *part = st ? NULL : zz_slice(full, 0, r->n);
    zl_tensor *data = part ? zl_tensor_view(part, r->ndim, r->shape) : NULL;
    if (!st && !data) st = ZL_ENOMEM;
    if (!st) {
        bool was = zl_grad_set_enabled(false);
        st = zl_tensor_set_data(p, data);
        zl_grad_set_enabled(was);
    }
    zl_tensor_release(data);
    zl_tensor_release(part);
    zl_tensor_release(full);
    return st;
}

zl_status zl_zero_init_scatter(zl_zero_init *in, zl_tensor *p, int root)
{
    int i = find(in, p);
    if (i < 0) return zl_error(ZL_EINVAL, "zero.GatheredParameters: the tensor is not partitioned by zero.Init");
    zz_record *r = &in->recs[i];
    zl_status st = ZL_OK;
    if (root >= 0) {
        int64_t n = r->n;
        zl_tensor *flat = zl_tensor_numel(p) == n ? zl_tensor_reshape(p, 1, &n) : NULL;
        if (!flat) return zl_error(ZL_ESTATE, "zero.GatheredParameters: the parameter is not gathered");
        zl_tensor *c = zz_buffer(ZL_DTYPE_F32, r->k, ZL_MEM_OTHER, true);
        bool was = zl_grad_set_enabled(false);
        st = c ? zl_comm_broadcast(in->comm, flat, root) : ZL_ENOMEM;
        zl_grad_set_enabled(was);
        int64_t lo, own;
        zz_owned(r->n, r->k, in->q, &lo, &own);
        if (!st && own > 0) zl_convert(zz_at(flat, lo), zl_tensor_dtype(flat), zl_tensor_data(c), ZL_DTYPE_F32, (size_t)own);
        if (!st) st = put_chunk(in, r, c);
        zl_tensor_release(c);
        zl_tensor_release(flat);
    }
    zl_status s2 = set_empty(p);
    return st ? st : s2;
}

zl_status zl_zero_init_unpartition(zl_zero_init *in, zl_tensor *p)
{
    zl_status st = zl_zero_init_gather(in, p);
    if (!st) drop_record(in, find(in, p));
    return st;
}

zl_zero_init *zz_init_owner(zl_zero_init *const *inits, int n, const zl_tensor *p)
{
    for (int i = 0; i < n; i++)
        if (find(inits[i], p) >= 0) return inits[i];
    return NULL;
}

zl_status zz_init_shape(const zl_zero_init *in, const zl_tensor *p, int64_t *numel, int *ndim, int64_t *shape)
{
    int i = find(in, p);
    if (i < 0) return zl_error(ZL_EINVAL, "ZeRO: the tensor is not partitioned by zero.Init");
    const zz_record *r = &in->recs[i];
    *numel = r->n;
    *ndim = r->ndim;
    memcpy(shape, r->shape, (size_t)r->ndim * sizeof(int64_t));
    return ZL_OK;
}

zl_status zz_init_take(zl_zero_init *in, const zl_tensor *p, float *dst, int64_t k, int64_t *numel, int *ndim,
                       int64_t *shape)
{
    zl_status st = zz_init_shape(in, p, numel, ndim, shape);
    if (st) return st;
    int i = find(in, p);
    zz_record *r = &in->recs[i];
    if (r->k != k)
        return zl_error(ZL_EINVAL, "ZeRO: a parameter built by zero.Init over %d ranks has chunks of %lld elements, "
                        "the engine expects %lld", in->P, (long long)r->k, (long long)k);
    zl_tensor *c;
    if ((st = chunk_of(in, r, &c))) return st;
    memcpy(dst, zl_tensor_data(c), (size_t)k * 4);
    zl_tensor_release(c);
    drop_record(in, i);
    return ZL_OK;
}

/* A frozen parameter at stage 3: no engine takes its chunk over (it has no
 * master, gradient or optimizer state), so the store keeps it for good and
 * gathers it only while an op reads it, as the engine does for trained ones.
 * Every rank runs the same ops in the same order, so the gathers, being
 * collectives, line up. `active` counts the uses in flight: an op may read
 * the same tensor twice. */
typedef struct zz_on_use {
    zl_zero_init *in;
    zl_dtype dtype;
    int active;
    bool borrowed;             /* whole already (zero.GatheredParameters): left whole after */
} zz_on_use;

static zl_status gather_as(zz_on_use *u, zl_tensor *p)
{
    zl_status st = zl_zero_init_gather(u->in, p);
    if (st || u->dtype == ZL_DTYPE_F32) return st;
    zl_tensor *half = zl_tensor_to(p, u->dtype);
    if (!half) return zli_last_code();
    zl_tensor_set_category(half, ZL_MEM_PARAMS);
    bool was = zl_grad_set_enabled(false);
    st = zl_tensor_set_data(p, half);
    zl_grad_set_enabled(was);
    zl_tensor_release(half);
    return st;
}

static zl_status frozen_use(zl_tensor *p, zl_use_event ev, const char *op, void *user)
{
    (void)op;
    zz_on_use *u = user;
    if (ev == ZL_USE_BEFORE_FORWARD || ev == ZL_USE_BEFORE_BACKWARD) {
        if (u->active++ > 0) return ZL_OK;
        u->borrowed = zl_tensor_numel(p) > 0;
        zl_status st = u->borrowed ? ZL_OK : gather_as(u, p);
        if (st) u->active--;
        return st;
    }
    if (u->active == 0 || --u->active > 0) return ZL_OK;
    return u->borrowed ? ZL_OK : zl_zero_init_scatter(u->in, p, -1);
}

zl_status zl_zero_init_gather_on_use(zl_zero_init *in, zl_tensor *p, zl_dtype dtype)
{
    int i = find(in, p);
    if (i < 0) return zl_error(ZL_EINVAL, "zero.Init: the tensor is not partitioned by zero.Init");
    if (dtype != ZL_DTYPE_F32 && dtype != ZL_DTYPE_BF16 && dtype != ZL_DTYPE_F16)
        return zl_error(ZL_EINVAL, "zero.Init: a gathered parameter's dtype must be f32, bf16 or f16, got %s",
                        zl_dtype_name(dtype));
    zz_record *r = &in->recs[i];
    if (r->hook) return ZL_OK;
    zz_on_use *u = calloc(1, sizeof *u);
    if (!u) return zl_error(ZL_ENOMEM, "zero.Init: out of memory");
    *u = (zz_on_use){.in = in, .dtype = dtype};
    r->hook = zl_tensor_add_use_hook(p, frozen_use, u, free);
    if (!r->hook) {
        free(u);
        return zli_last_code();
    }
    /* The chunk is this parameter's only copy now, not a master in waiting. */
    if (r->chunk) zl_tensor_set_category(r->chunk, ZL_MEM_PARAMS);
    return ZL_OK;
}
