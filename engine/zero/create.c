/* A ZeRO engine's life: the config's defaults, taking the parameters over
 * (their chunks laid out, masters filled, working copies in place, hooks
 * installed) and freeing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_impl.h"

static const char *const adam_keys[] = {"exp_avg", "exp_avg_sq"};
static const char *const sgd_keys[] = {"momentum_buffer"};

zl_zero_config zl_zero_config_defaults(void)
{
    zl_zero_config c = {
        .stage = 0, .optimizer = ZL_ZERO_ADAM, .dtype = ZL_DTYPE_F32, .grad_accum_dtype = ZL_DTYPE_F32,
        .reduce_bucket_size = 500000000, .allgather_bucket_size = 500000000, .overlap_comm = false,
        .reduce_scatter = true, .ignore_unused_parameters = true, .prefetch_bucket_size = 50000000,
        .max_live_parameters = 1000000000, .max_reuse_distance = 1000000000,
        .param_persistence_threshold = 100000, .model_persistence_threshold = INT64_MAX,
        .sub_group_size = 1000000000, .gradient_predivide_factor = 1.0,
    };
    c.offload_optimizer = (zl_zero_offload){.device = ZL_OFFLOAD_NONE, .buffer_count = 4, .pipeline_read = false};
    c.offload_param = (zl_zero_offload){.device = ZL_OFFLOAD_NONE, .buffer_count = 5, .buffer_size = 100000000,
                                        .max_in_cpu = 1000000000};
    c.aio = zl_aio_defaults();
    return c;
}

zl_zero_hparams zl_zero_hparams_defaults(void)
{
    return (zl_zero_hparams){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0,
                             .adamw_mode = true, .bias_correction = true, .max_coeff = 10, .min_coeff = 0.01};
}

static bool float_dtype(zl_dtype d) { return d == ZL_DTYPE_F32 || d == ZL_DTYPE_BF16 || d == ZL_DTYPE_F16; }

static zl_status check_config(const zl_zero_config *c, int world)
{
    if (c->stage < 0 || c->stage > 3)
        return zl_error(ZL_EINVAL, "config: zero_optimization.stage must be 0..3, got %d", c->stage);
    if (!float_dtype(c->dtype)) return zl_error(ZL_EINVAL, "ZeRO: the working dtype must be f32, bf16 or f16");
    if (!float_dtype(c->grad_accum_dtype))
        return zl_error(ZL_EINVAL, "config: data_types.grad_accum_dtype must be fp32, bf16 or fp16");
    if (c->optimizer == ZL_ZERO_LAMB && c->stage >= 1)
        return zl_error(ZL_EINVAL, "zlua.initialize: Lamb scales each parameter by its own trust ratio, which needs the "
                        "whole parameter; ZeRO stage %d splits parameters over ranks (use stage 0, or Adam/AdamW/SGD)",
                        c->stage);
    if (!(c->gradient_predivide_factor > 0 && c->gradient_predivide_factor < INFINITY))
        return zl_error(ZL_EINVAL, "config: gradient_predivide_factor must be a finite number greater than 0, got %g",
                        c->gradient_predivide_factor);
    if (c->optimizer < ZL_ZERO_ADAM || c->optimizer > ZL_ZERO_SGD) return zl_error(ZL_EINVAL, "ZeRO: unknown optimizer");
    (void)world;
    return ZL_OK;
}

/* e's first master values (its chunk, zero-padded) into mt from element at. */
static zl_status fill_master(zl_zero *z, zz_entry *e, zl_zero_init *const *inits, int ninits, zl_tensor *mt,
                             int64_t at)
{
    zl_status st = zz_zero(mt, at, e->k);
    zl_zero_init *in = zz_init_owner(inits, ninits, e->p);
    if (!st && in) {
        /* zero.Init keeps its chunks in host memory */
        int64_t n;
        int ndim;
        int64_t shape[ZL_MAX_DIMS];
        zl_tensor *tmp = zz_on_device(mt) ? zz_buffer(ZL_DTYPE_F32, e->k, ZL_MEM_OTHER, false) : NULL;
        if (zz_on_device(mt) && !tmp) return ZL_ENOMEM;
        st = zz_init_take(in, e->p, tmp ? zl_tensor_data(tmp) : zz_at(mt, at), e->k, &n, &ndim, shape);
        if (!st && tmp) st = zz_copy(mt, at, tmp, 0, e->k);
        zl_tensor_release(tmp);
        return st;
    }
    if (st || e->own == 0) return st;
    zl_tensor *c = zl_tensor_contiguous(e->p);
    if (!c) return zz_fail("reading", e->name);
    st = zz_copy(mt, at, c, e->lo, e->own);
    zl_tensor_release(c);
    return st;
}

static zl_status fill_all(zl_zero *z, zl_zero_init *const *inits, int ninits)
{
    zl_status st = ZL_OK;
    for (int s = 0; s < z->nsub && !st; s++) {
        zz_view v;
        if ((st = zz_sub_acquire(z, s, true, &v))) break;
        if (v.buf) st = zz_zero(v.t[0], v.at[0], v.len);
        for (int j = 1; j <= z->nstates && !st; j++) st = zz_zero(v.t[j], v.at[j], v.len);
        zz_sub *sg = &z->subs[s];
        for (int i = sg->first; i < sg->first + sg->count && !st; i++) {
            zz_entry *e = &z->ents[i];
            int64_t m = v.at[0] + (e->off - v.off);
            st = fill_master(z, e, inits, ninits, v.t[0], m);
            if (!st) st = zz_store_working(z, e, v.t[0], m);
        }
        zl_status s2 = zz_sub_release(z, s, st == ZL_OK);
        if (!st) st = s2;
    }
    if (!st) st = zz_masters_flush(z);
    return st;
}

/* offload_param nvme: the chunks past max_in_cpu elements live in the parameter swap. */
static zl_status setup_param_swap(zl_zero *z, int64_t *resident)
{
    const zl_zero_offload *oc = &z->cfg.offload_param;
    *resident = 0;
    int64_t largest = 0;
    bool swapping = false;
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        if (!swapping && e->off + e->k <= oc->max_in_cpu) {
            *resident = e->off + e->k;
            continue;
        }
        swapping = true;
        if (e->k > oc->buffer_size)
            return zl_error(ZL_EINVAL, "offload_param: %s has a chunk of %lld elements and offload_param.buffer_size is "
                            "%lld: raise buffer_size to at least %lld", e->name, (long long)e->k,
                            (long long)oc->buffer_size, (long long)e->k);
        if (e->k > largest) largest = e->k;
    }
    char dir[4096], path[4200], sub[64];
    snprintf(sub, sizeof sub, "params/rank%d", z->rank);
    zl_status st = zli_swap_folder(oc->nvme_path, sub, "offload_param", dir, sizeof dir);
    if (st || !swapping) return st;
    snprintf(path, sizeof path, "%s/params.swp", dir);
    int asked = oc->buffer_count > 0 ? oc->buffer_count : 1;
    int count = (int)zz_fit(z, "offload_param.buffer_count", asked, asked, 2,
                            largest * (int64_t)zl_dtype_size(z->wdtype));
    zli_swap_config sc = {.path = path, .dtype = z->wdtype, .buffer_elems = largest, .buffer_count = count,
                         .cat = ZL_MEM_PARAMS, .what = "offload_param"};
    if ((st = zli_swap_open(z->aio, &sc, &z->pswap))) return st;
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        if (e->off + e->k <= *resident) continue;
        if ((e->pslot = zli_swap_add_slot(z->pswap, e->k)) < 0) return ZL_EINVAL;
    }
    return ZL_OK;
}

static zl_status grad_ready(zl_tensor *leaf, void *user)
{
    (void)leaf;
    zz_entry *e = user;
    return zz_reduce_add(e->z, e);
}

/* Stages 0-2: the parameters become views of the whole working buffer. */
static zl_status bind_full(zl_zero *z)
{
    bool was = zl_grad_set_enabled(false);
    zl_status st = ZL_OK;
    for (int i = 0; i < z->nent && !st; i++) {
        zz_entry *e = &z->ents[i];
        int64_t base = (int64_t)z->P * e->off;
        if (z->full != z->master) {
            zl_tensor *c = zl_tensor_contiguous(e->p);
            if (!c) { st = zz_fail("reading", e->name); break; }
            st = zz_copy(z->full, base, c, 0, e->n);
            zl_tensor_release(c);
            if (st) break;
        }
        zl_tensor *region = zz_slice(z->full, base, e->n);
        zl_tensor *data = region ? zl_tensor_view(region, e->ndim, e->shape) : NULL;
        st = data ? zl_tensor_set_data(e->p, data) : zz_fail("placing", e->name);
        zl_tensor_release(region);
        zl_tensor_release(data);
    }
    zl_grad_set_enabled(was);
    return st;
}

/* The engine's buffers go where its parameters are: every parameter (bar
 * zero.Init's, whose chunks are in host memory) in one place. The first one,
 * *first, decides; e's must agree. */
static zl_status place_of(zl_zero *z, const zz_entry *e, const zz_entry **first)
{
    const zl_storage *s = e->p->storage;
    if (!*first) {
        *first = e;
        z->dev = s->dev;
        z->dev_index = s->dev_index;
        return ZL_OK;
    }
    if (s->dev == z->dev && s->dev_index == z->dev_index) return ZL_OK;
    char here[32], there[32];
    zl_device_str(zl_tensor_device(e->p), zl_tensor_device_index(e->p), here, sizeof here);
    zl_device_str(zl_tensor_device((*first)->p), zl_tensor_device_index((*first)->p), there, sizeof there);
    return zl_error(ZL_EDEVICE, "zlua.initialize: parameter %s is on %s and %s on %s: a model's parameters live in "
                    "one place", e->name, here, (*first)->name, there);
}

static zl_status add_entries(zl_zero *z, const zl_zero_param *params, int nparams, zl_zero_init *const *inits,
                             int ninits)
{
    z->ents = calloc((size_t)(nparams > 0 ? nparams : 1), sizeof *z->ents);
    if (!z->ents) return zl_error(ZL_ENOMEM, "ZeRO: out of memory for %d parameters", nparams);
    int64_t off = 0;
    const zz_entry *first = NULL;
    for (int i = 0; i < nparams; i++) {
        const zl_zero_param *pp = &params[i];
        const char *name = pp->name ? pp->name : "(unnamed)";
        if (!pp->tensor) return zl_error(ZL_EINVAL, "zlua.initialize: parameter %d is NULL", i + 1);
        if (pp->group < 0 || pp->group >= z->ngroups)
            return zl_error(ZL_EINVAL, "zlua.initialize: parameter %s is in group %d of %d", name, pp->group + 1,
                            z->ngroups);
        for (int j = 0; j < i; j++)
            if (params[j].tensor == pp->tensor)
                return zl_error(ZL_EINVAL, "zlua.initialize: parameter %s appears in more than one place of the "
                                "optimizer's param groups (groups %d and %d)", name, params[j].group + 1, pp->group + 1);
        zz_entry *e = &z->ents[z->nent];
        *e = (zz_entry){.z = z, .index = i, .group = pp->group, .pslot = -1};
        e->name = strdup(name);
        if (!e->name) return ZL_ENOMEM;
        e->p = zl_tensor_retain(pp->tensor);
        z->nent++;
        zl_zero_init *in = zz_init_owner(inits, ninits, pp->tensor);
        if (!in && place_of(z, e, &first)) return zli_last_code();
        if (in) {
            if (z->stage < 3)
                return zl_error(ZL_EINVAL, "zlua.initialize: %s was built by zlua.zero.Init (partitioned for stage 3) "
                                "and the config asks for stage %d", name, z->stage);
            zl_status st = zz_init_shape(in, pp->tensor, &e->n, &e->ndim, e->shape);
            if (st) return st;
        } else {
            if (zl_tensor_dtype(pp->tensor) != ZL_DTYPE_F32)
                return zl_error(ZL_EINVAL, "zlua.initialize: parameter %s is %s; the engine makes its working copies "
                                "from f32 parameters", name, zl_dtype_name(zl_tensor_dtype(pp->tensor)));
            e->n = zl_tensor_numel(pp->tensor);
            e->ndim = zl_tensor_ndim(pp->tensor);
            memcpy(e->shape, zl_tensor_shape(pp->tensor), (size_t)e->ndim * sizeof(int64_t));
        }
        e->k = zz_chunk(e->n, z->P);
        e->off = off;
        zz_owned(e->n, e->k, z->q, &e->lo, &e->own);
        off += e->k;
    }
    z->S = off;
    return ZL_OK;
}

/* Where each buffer goes (zero_impl.h has the picture), and whether the
 * communicator takes them: nccl only where the parameters are. */
static zl_status placement(zl_zero *z)
{
    const zl_zero_config *c = &z->cfg;
    z->opt_on_dev = z->dev && (z->stage == 0 || c->offload_optimizer.device == ZL_OFFLOAD_NONE);
    z->work_on_dev = z->dev && !(z->stage == 3 && c->offload_param.device != ZL_OFFLOAD_NONE);
    int ci;
    zl_device ck = zl_comm_device(z->comm, &ci);
    z->comm_dev = ck != ZL_DEVICE_CPU;
    if (z->comm_dev && (!z->dev || z->dev->kind != ck || z->dev_index != ci)) {
        char want[32], have[32];
        zl_device_str(ck, ci, want, sizeof want);
        zl_device_str(z->dev ? z->dev->kind : ZL_DEVICE_CPU, z->dev_index, have, sizeof have);
        return zl_error(ZL_EDEVICE, "zlua.initialize: the %s communicator takes tensors on %s and the parameters are "
                        "on %s: move the model to %s first", zl_comm_backend(z->comm), want, have, want);
    }
    if (z->opt_on_dev && !z->dev->optim) {
        char have[32];
        zl_device_str(z->dev->kind, z->dev_index, have, sizeof have);
        return zl_error(ZL_EDEVICE, "zlua.initialize: the parameters are on %s, which runs no optimizer kernels: "
                        "offload the optimizer (zero_optimization.offload_optimizer.device \"cpu\") or keep the "
                        "model in host memory", have);
    }
    return ZL_OK;
}

zl_status zl_zero_create(zl_comm *comm, const zl_zero_config *cfg, const zl_zero_param *params, int nparams,
                         const zl_zero_hparams *groups, int ngroups, zl_zero_init *const *inits, int ninits,
                         zl_zero **out)
{
    if (!comm || !cfg || !out || (nparams > 0 && !params) || ngroups < 1 || !groups)
        return zl_error(ZL_EINVAL, "zl_zero_create: missing communicator, config, parameters or groups");
    *out = NULL;
    int world = zl_comm_size(comm);
    zl_status st = check_config(cfg, world);
    if (st) return st;
    zl_zero *z = calloc(1, sizeof *z);
    if (!z) return zl_error(ZL_ENOMEM, "ZeRO: out of memory");
    z->comm = comm;
    z->cfg = *cfg;
    z->rank = zl_comm_rank(comm);
    z->world = world;
    z->stage = cfg->stage;
    z->P = z->stage == 0 ? 1 : world;
    z->q = z->stage == 0 ? 0 : z->rank;
    z->wdtype = cfg->dtype;
    z->gdtype = cfg->grad_accum_dtype;
    z->half = cfg->dtype != ZL_DTYPE_F32;
    z->ngroups = ngroups;
    z->hp = malloc((size_t)ngroups * sizeof *z->hp);
    z->steps = calloc((size_t)ngroups, sizeof *z->steps);
    if (!z->hp || !z->steps) {
        zl_zero_free(z);
        return zl_error(ZL_ENOMEM, "ZeRO: out of memory");
    }
    memcpy(z->hp, groups, (size_t)ngroups * sizeof *z->hp);
    if (cfg->optimizer == ZL_ZERO_SGD) {
        z->keys = sgd_keys;
        z->nstates = 1;
    } else {
        z->keys = adam_keys;
        z->nstates = 2;
    }
    bool onvme = cfg->offload_optimizer.device == ZL_OFFLOAD_NVME && z->stage >= 1;
    bool pnvme = cfg->offload_param.device == ZL_OFFLOAD_NVME && z->stage == 3;
    if ((onvme && !cfg->offload_optimizer.nvme_path) || (pnvme && !cfg->offload_param.nvme_path)) {
        zl_zero_free(z);
        return zl_error(ZL_EINVAL, "config: %s.nvme_path is needed with device \"nvme\"",
                        onvme && !cfg->offload_optimizer.nvme_path ? "zero_optimization.offload_optimizer"
                                                                   : "zero_optimization.offload_param");
    }
    if ((onvme || pnvme) && zl_aio_unavailable()) {
        zl_zero_free(z);
        return zl_error(ZL_EINVAL, "config: zero_optimization.%s.device = \"nvme\": %s; use \"cpu\" or \"none\"",
                        onvme ? "offload_optimizer" : "offload_param", zl_aio_unavailable());
    }
    if (!st) st = add_entries(z, params, nparams, inits, ninits);
    if (!st) st = placement(z);
    if (!st && z->stage == 3)
        z->cfg.max_live_parameters = zz_fit(z, "stage3_max_live_parameters", cfg->max_live_parameters,
                                            cfg->max_live_parameters, 1, (int64_t)zl_dtype_size(z->wdtype));
    if (!st && (onvme || pnvme)) st = zl_aio_open(&cfg->aio, &z->aio);
    if (!st) st = zz_masters_setup(z);
    if (!st && z->stage <= 2) {
        if (z->stage == 0 && !z->half) z->full = zl_tensor_retain(z->master);
        else if (!(z->full = zz_new(z, true, z->wdtype, z->P * z->S, ZL_MEM_PARAMS, true))) st = ZL_ENOMEM;
    } else if (!st && (z->half || onvme || pnvme || (z->work_on_dev && !z->opt_on_dev))) {
        /* working chunks apart from the masters: half ones, swapped ones, or on
         * the device while the masters are in host memory */
        int64_t resident = z->S;
        if (pnvme) st = setup_param_swap(z, &resident);
        if (!st) {
            bool pin = cfg->offload_param.pin_memory;
            z->work = z->work_on_dev ? zz_new(z, true, z->wdtype, resident, ZL_MEM_PARAMS, true)
                                     : zz_new_host(z, pin, z->wdtype, resident, ZL_MEM_PARAMS, true);
            if (!z->work) st = ZL_ENOMEM;
        }
    }
    if (!st) st = fill_all(z, inits, ninits);
    if (!st && z->pswap) st = zli_swap_flush(z->pswap);
    /* The gradient buffer last: with NVMe offload zero.Init's chunks have gone to
     * the files by now, so the two are never in memory together. */
    if (!st) st = zz_grads_setup(z);
    if (!st) st = z->stage <= 2 ? bind_full(z) : zz_params_setup(z);
    if (!st) {
        int64_t cap = cfg->reduce_bucket_size / z->P;
        z->bucket_cap = cap < ZL_ZERO_ALIGN ? ZL_ZERO_ALIGN : cap;
        for (int i = 0; i < z->nent && !st; i++) {
            zz_entry *e = &z->ents[i];
            /* Gradients reach the bucket unrounded; they are rounded once, after the sum over ranks. */
            st = zl_tensor_set_grad_dtype(e->p, ZL_DTYPE_F32);
            if (!st && !(e->grad_hook = zl_tensor_add_grad_ready_hook(e->p, grad_ready, e, NULL)))
                st = zz_fail("the gradient hook of", e->name);
        }
    }
    /* The caller's path strings are not kept. */
    z->cfg.offload_optimizer.nvme_path = z->cfg.offload_param.nvme_path = NULL;
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zl_last_error());
        zl_zero_free(z);
        return zl_error(st, "%s", msg);
    }
    *out = z;
    return ZL_OK;
}

void zl_zero_free(zl_zero *z)
{
    if (!z) return;
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        if (e->grad_hook) zl_tensor_remove_hook(e->p, e->grad_hook);
        if (e->use_hook) zl_tensor_remove_hook(e->p, e->use_hook);
    }
    zz_reduce_free(z);
    if (z->stage == 3 && z->empty) zz_params_free(z);
    if (z->oswap) zli_swap_close(z->oswap);
    if (z->pswap) zli_swap_close(z->pswap);
    if (z->gswap) zli_swap_close(z->gswap);
    zl_aio_close(z->aio);
    zl_tensor_release(z->master);
    for (int j = 0; j < 2; j++) zl_tensor_release(z->states[j]);
    zl_tensor_release(z->grads);
    zl_tensor_release(z->full);
    zl_tensor_release(z->work);
    zl_tensor_release(z->gsend);
    zl_tensor_release(z->grecv);
    for (int i = 0; i < z->nent; i++) {
        zl_tensor_release(z->ents[i].p);
        free(z->ents[i].name);
    }
    free(z->ents);
    free(z->subs);
    free(z->hp);
    free(z->steps);
    free(z);
}

