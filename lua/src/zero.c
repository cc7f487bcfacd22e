/* The binding of engine/zero (zlua/zero.h) for zlua.zero: core.zero_new
 * builds an engine from a table the Lua layer translated from the DeepSpeed
 * config, core.zero_init_new a zero.Init store; their methods are the C
 * API's, one call each. Nothing here runs per parameter per step. */
#include <stdlib.h>
#include <string.h>
#include "binding.h"

#define ZLB_ZERO_MT "zlua.Zero"
#define ZLB_ZERO_INIT_MT "zlua.ZeroInit"

typedef struct zlb_zero {
    zl_zero *z;
} zlb_zero;

typedef struct zlb_zero_init {
    zl_zero_init *in;
} zlb_zero_init;

/* ---- reading the translated config ---- */

static double num(lua_State *L, int idx, const char *key, double def)
{
    int t = lua_getfield(L, idx, key);
    double v = def;
    if (t != LUA_TNIL) {
        if (t != LUA_TNUMBER) zlb_error(L, "zero: %s must be a number, got %s", key, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

static int64_t integer(lua_State *L, int idx, const char *key, int64_t def)
{
    int t = lua_getfield(L, idx, key);
    int64_t v = def;
    if (t != LUA_TNIL) {
        int ok;
        lua_Integer i = lua_tointegerx(L, -1, &ok);
        if (ok) v = i;
        else if (t == LUA_TNUMBER && lua_tonumber(L, -1) >= 9.2e18) v = INT64_MAX;
        else zlb_error(L, "zero: %s must be an integer, got %s", key, luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    return v;
}

static bool boolean(lua_State *L, int idx, const char *key, bool def)
{
    int t = lua_getfield(L, idx, key);
    bool v = def;
    if (t != LUA_TNIL) {
        if (t != LUA_TBOOLEAN) zlb_error(L, "zero: %s must be a boolean, got %s", key, luaL_typename(L, -1));
        v = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* A string field, kept alive by the config table for the duration of the call;
 * one with a NUL byte is refused (a path cut there names another folder). */
static const char *string(lua_State *L, int idx, const char *key)
{
    const char *s = lua_getfield(L, idx, key) == LUA_TSTRING ? zlb_check_cstring(L, -1, "zero", key) : NULL;
    lua_pop(L, 1);
    return s;
}

static void offload(lua_State *L, int idx, const char *key, zl_zero_offload *o)
{
    if (lua_getfield(L, idx, key) == LUA_TTABLE) {
        int t = lua_gettop(L);
        const char *dev = string(L, t, "device");
        o->device = !dev || !strcmp(dev, "none") ? ZL_OFFLOAD_NONE : !strcmp(dev, "cpu") ? ZL_OFFLOAD_CPU : ZL_OFFLOAD_NVME;
        o->nvme_path = string(L, t, "nvme_path");
        o->buffer_count = (int)integer(L, t, "buffer_count", o->buffer_count);
        o->buffer_size = integer(L, t, "buffer_size", o->buffer_size);
        o->max_in_cpu = integer(L, t, "max_in_cpu", o->max_in_cpu);
        o->pipeline_read = boolean(L, t, "pipeline_read", o->pipeline_read);
        o->pipeline_write = boolean(L, t, "pipeline_write", o->pipeline_write);
        o->pin_memory = boolean(L, t, "pin_memory", o->pin_memory);
    }
    lua_pop(L, 1);
}

static zl_dtype dtype(lua_State *L, int idx, const char *key, zl_dtype def)
{
    lua_getfield(L, idx, key);
    zl_dtype d = zlb_opt_dtype(L, -1, def);
    lua_pop(L, 1);
    return d;
}

void zlb_zero_config(lua_State *L, int idx, zl_zero_config *c)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    *c = zl_zero_config_defaults();
    c->stage = (int)integer(L, idx, "stage", c->stage);
    const char *opt = string(L, idx, "optimizer");
    c->optimizer = !opt || !strcmp(opt, "adam") ? ZL_ZERO_ADAM : !strcmp(opt, "lamb") ? ZL_ZERO_LAMB : ZL_ZERO_SGD;
    c->dtype = dtype(L, idx, "dtype", c->dtype);
    c->grad_accum_dtype = dtype(L, idx, "grad_accum_dtype", c->dtype);
    c->reduce_bucket_size = integer(L, idx, "reduce_bucket_size", c->reduce_bucket_size);
    c->allgather_bucket_size = integer(L, idx, "allgather_bucket_size", c->allgather_bucket_size);
    c->overlap_comm = boolean(L, idx, "overlap_comm", c->overlap_comm);
    c->reduce_scatter = boolean(L, idx, "reduce_scatter", c->reduce_scatter);
    c->ignore_unused_parameters = boolean(L, idx, "ignore_unused_parameters", c->ignore_unused_parameters);
    c->prescale_gradients = boolean(L, idx, "prescale_gradients", c->prescale_gradients);
    c->gradient_predivide_factor = num(L, idx, "gradient_predivide_factor", c->gradient_predivide_factor);
    c->prefetch_bucket_size = integer(L, idx, "prefetch_bucket_size", c->prefetch_bucket_size);
    c->max_live_parameters = integer(L, idx, "max_live_parameters", c->max_live_parameters);
    c->max_reuse_distance = integer(L, idx, "max_reuse_distance", c->max_reuse_distance);
    c->param_persistence_threshold = integer(L, idx, "param_persistence_threshold", c->param_persistence_threshold);
    c->model_persistence_threshold = integer(L, idx, "model_persistence_threshold", c->model_persistence_threshold);
    c->use_all_reduce_for_fetch_params = boolean(L, idx, "use_all_reduce_for_fetch_params",
                                                 c->use_all_reduce_for_fetch_params);
    c->log_trace_cache_warnings = boolean(L, idx, "log_trace_cache_warnings", c->log_trace_cache_warnings);
    c->sub_group_size = integer(L, idx, "sub_group_size", c->sub_group_size);
    offload(L, idx, "offload_optimizer", &c->offload_optimizer);
    offload(L, idx, "offload_param", &c->offload_param);
    lua_getfield(L, idx, "aio");
    zlb_aio_config(L, -1, &c->aio);
    lua_pop(L, 1);
}

void zlb_zero_hparams(lua_State *L, int idx, zl_zero_hparams *h)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    *h = zl_zero_hparams_defaults();
    h->lr = num(L, idx, "lr", h->lr);
    if (lua_getfield(L, idx, "betas") == LUA_TTABLE) {
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        h->beta1 = luaL_optnumber(L, -2, h->beta1);
        h->beta2 = luaL_optnumber(L, -1, h->beta2);
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    h->eps = num(L, idx, "eps", h->eps);
    h->weight_decay = num(L, idx, "weight_decay", h->weight_decay);
    h->adamw_mode = boolean(L, idx, "adam_w_mode", h->adamw_mode);
    h->bias_correction = boolean(L, idx, "bias_correction", h->bias_correction);
    h->max_coeff = num(L, idx, "max_coeff", h->max_coeff);
    h->min_coeff = num(L, idx, "min_coeff", h->min_coeff);
    h->momentum = num(L, idx, "momentum", h->momentum);
    h->dampening = num(L, idx, "dampening", h->dampening);
    h->nesterov = boolean(L, idx, "nesterov", h->nesterov);
}

/* ---- the engine ---- */

static zl_zero *check_zero(lua_State *L, int idx)
{
    zlb_zero *u = luaL_checkudata(L, idx, ZLB_ZERO_MT);
    if (!u->z) zlb_error(L, "the ZeRO engine was freed");
    return u->z;
}

zl_zero *zlb_opt_zero(lua_State *L, int idx) { return lua_isnoneornil(L, idx) ? NULL : check_zero(L, idx); }

static zl_zero_init *check_init(lua_State *L, int idx)
{
    zlb_zero_init *u = luaL_checkudata(L, idx, ZLB_ZERO_INIT_MT);
    if (!u->in) zlb_error(L, "the zero.Init store was freed");
    return u->in;
}

static int zero_gc(lua_State *L)
{
    zlb_zero *u = luaL_testudata(L, 1, ZLB_ZERO_MT);
    if (u && u->z) {
        zl_zero *z = u->z;
        u->z = NULL;
        zl_zero_free(z);
    }
    return 0;
}

/* core.zero_new(config, params, groups, inits): params is a list of
 * {tensor=, group= (1-based), name=}, groups a list of hyperparameter tables,
 * inits a list of zero.Init stores (may be empty). */
static int l_zero_new(lua_State *L)
{
    zl_zero_config c;
    zlb_zero_config(L, 1, &c);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    int np = (int)luaL_len(L, 2), ng = (int)luaL_len(L, 3);
    int ni = lua_istable(L, 4) ? (int)luaL_len(L, 4) : 0;
    zl_zero_param *params = lua_newuserdatauv(L, sizeof *params * (size_t)(np > 0 ? np : 1), 0);
    zl_zero_hparams *hps = lua_newuserdatauv(L, sizeof *hps * (size_t)(ng > 0 ? ng : 1), 0);
    zl_zero_init **inits = lua_newuserdatauv(L, sizeof *inits * (size_t)(ni > 0 ? ni : 1), 0);
    for (int i = 0; i < np; i++) {
        lua_rawgeti(L, 2, i + 1);
        int t = lua_gettop(L);
        lua_getfield(L, t, "tensor");
        params[i].tensor = zlb_check_tensor_any(L, -1);
        lua_pop(L, 1);
        params[i].group = (int)integer(L, t, "group", 1) - 1;
        params[i].name = string(L, t, "name");
        lua_pop(L, 1);   /* the entry stays referenced by the params table */
    }
    for (int g = 0; g < ng; g++) {
        lua_rawgeti(L, 3, g + 1);
        zlb_zero_hparams(L, lua_gettop(L), &hps[g]);
        lua_pop(L, 1);
    }
    for (int i = 0; i < ni; i++) {
        lua_rawgeti(L, 4, i + 1);
        inits[i] = check_init(L, -1);
        lua_pop(L, 1);
    }
    zlb_zero *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->z = NULL;
    luaL_setmetatable(L, ZLB_ZERO_MT);
    if (zl_zero_create(zlb_comm_of(L), &c, params, np, hps, ng, inits, ni, &u->z)) return zlb_raise(L);
    return 1;
}

static int l_free(lua_State *L)
{
    luaL_checkudata(L, 1, ZLB_ZERO_MT);
    return zero_gc(L);
}

static int status(lua_State *L, zl_status st)
{
    if (st) return zlb_raise(L);
    return 0;
}

static int l_begin_forward(lua_State *L) { return status(L, zl_zero_begin_forward(check_zero(L, 1))); }
static int l_end_backward(lua_State *L) { return status(L, zl_zero_end_backward(check_zero(L, 1))); }
static int l_zero_grad(lua_State *L) { return status(L, zl_zero_zero_grad(check_zero(L, 1))); }
static int l_sync_working(lua_State *L) { return status(L, zl_zero_sync_working(check_zero(L, 1))); }
static int l_gather(lua_State *L) { return status(L, zl_zero_gather(check_zero(L, 1), zlb_check_tensor_any(L, 2))); }
static int l_release(lua_State *L) { return status(L, zl_zero_release(check_zero(L, 1), zlb_check_tensor_any(L, 2))); }

static int l_update_param(lua_State *L)
{
    return status(L, zl_zero_update_param(check_zero(L, 1), zlb_check_tensor_any(L, 2), (int)luaL_checkinteger(L, 3)));
}

/* z:step(loss_scale, max_norm, check_overflow) -> overflow, grad_norm, clip_coef */
static int l_step(lua_State *L)
{
    zl_zero *z = check_zero(L, 1);
    zl_zero_step_info info;
    if (zl_zero_step(z, luaL_checknumber(L, 2), luaL_optnumber(L, 3, 0), lua_toboolean(L, 4), &info))
        return zlb_raise(L);
    lua_pushboolean(L, info.overflow);
    lua_pushnumber(L, info.grad_norm);
    lua_pushnumber(L, info.clip_coef);
    return 3;
}

/* z:set_hparams(group (1-based), table) */
static int l_set_hparams(lua_State *L)
{
    zl_zero *z = check_zero(L, 1);
    zl_zero_hparams h;
    zlb_zero_hparams(L, 3, &h);
    return status(L, zl_zero_set_hparams(z, (int)luaL_checkinteger(L, 2) - 1, &h));
}

/* One parameter's state, whole or this rank's part (zl_zero_full_grad and
 * the rest): z:full_grad(p, loss_scale), z:local_grad(p, loss_scale),
 * z:full_fp32(p), z:local_fp32(p), z:full_state(p, key), z:local_state(p, key) -> a tensor;
 * z:set_full_fp32(p, t), z:set_local_fp32(p, t), z:set_full_state(p, key, t),
 * z:set_local_state(p, key, t). */
static int get_grad(lua_State *L, zl_status (*fn)(zl_zero *, zl_tensor *, double, zl_tensor **))
{
    zl_zero *z = check_zero(L, 1);
    zl_tensor *p = zlb_check_tensor_any(L, 2);
    double scale = luaL_optnumber(L, 3, 1.0);
    zl_tensor **slot = zlb_new_tensor(L);
    if (fn(z, p, scale, slot)) return zlb_raise(L);
    return 1;
}

static int l_full_grad(lua_State *L) { return get_grad(L, zl_zero_full_grad); }
static int l_local_grad(lua_State *L) { return get_grad(L, zl_zero_local_grad); }

static int get_fp32(lua_State *L, zl_status (*fn)(zl_zero *, zl_tensor *, zl_tensor **))
{
    zl_zero *z = check_zero(L, 1);
    zl_tensor *p = zlb_check_tensor_any(L, 2);
    zl_tensor **slot = zlb_new_tensor(L);
    if (fn(z, p, slot)) return zlb_raise(L);
    return 1;
}

static int l_full_fp32(lua_State *L) { return get_fp32(L, zl_zero_full_fp32); }
static int l_local_fp32(lua_State *L) { return get_fp32(L, zl_zero_local_fp32); }

static int get_state(lua_State *L, zl_status (*fn)(zl_zero *, zl_tensor *, const char *, zl_tensor **))
{
    zl_zero *z = check_zero(L, 1);
    zl_tensor *p = zlb_check_tensor_any(L, 2);
    const char *key = luaL_checkstring(L, 3);
    zl_tensor **slot = zlb_new_tensor(L);
    if (fn(z, p, key, slot)) return zlb_raise(L);
    return 1;
}

static int l_full_state(lua_State *L) { return get_state(L, zl_zero_full_state); }
static int l_local_state(lua_State *L) { return get_state(L, zl_zero_local_state); }

static int set_fp32(lua_State *L, zl_status (*fn)(zl_zero *, zl_tensor *, const zl_tensor *))
{
    zl_zero *z = check_zero(L, 1);
    return status(L, fn(z, zlb_check_tensor_any(L, 2), zlb_check_tensor_any(L, 3)));
}

static int l_set_full_fp32(lua_State *L) { return set_fp32(L, zl_zero_set_full_fp32); }
static int l_set_local_fp32(lua_State *L) { return set_fp32(L, zl_zero_set_local_fp32); }

static int set_state(lua_State *L, zl_status (*fn)(zl_zero *, zl_tensor *, const char *, const zl_tensor *))
{
    zl_zero *z = check_zero(L, 1);
    zl_tensor *p = zlb_check_tensor_any(L, 2);
    const char *key = luaL_checkstring(L, 3);
    return status(L, fn(z, p, key, zlb_check_tensor_any(L, 4)));
}

static int l_set_full_state(lua_State *L) { return set_state(L, zl_zero_set_full_state); }
static int l_set_local_state(lua_State *L) { return set_state(L, zl_zero_set_local_state); }

/* z:params() -> list of {name=, group= (1-based), shape=, numel=, k=, lo=, own=, persistent=, tensor=} */
static int l_params(lua_State *L)
{
    zl_zero *z = check_zero(L, 1);
    int n = zl_zero_num_params(z);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        zl_zero_param_info pi;
        if (zl_zero_param_of(z, i, &pi)) return zlb_raise(L);
        lua_createtable(L, 0, 10);
        lua_pushstring(L, pi.name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, i + 1);
        lua_setfield(L, -2, "index");
        lua_pushinteger(L, pi.group + 1);
        lua_setfield(L, -2, "group");
        lua_createtable(L, pi.ndim, 0);
        for (int d = 0; d < pi.ndim; d++) {
            lua_pushinteger(L, pi.shape[d]);
            lua_rawseti(L, -2, d + 1);
        }
        lua_setfield(L, -2, "shape");
        lua_pushinteger(L, pi.numel);
        lua_setfield(L, -2, "n");
        lua_pushinteger(L, pi.k);
        lua_setfield(L, -2, "k");
        lua_pushinteger(L, pi.lo);
        lua_setfield(L, -2, "lo");
        lua_pushinteger(L, pi.own);
        lua_setfield(L, -2, "own");
        lua_pushboolean(L, pi.persistent);
        lua_setfield(L, -2, "persistent");
        zlb_push_tensor(L, zl_tensor_retain(pi.tensor));
        lua_setfield(L, -2, "p");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* z:info() -> stage, partitions, working dtype name, state keys (list) */
static int l_info(lua_State *L)
{
    zl_zero *z = check_zero(L, 1);
    lua_pushinteger(L, zl_zero_stage(z));
    lua_pushinteger(L, zl_zero_partitions(z));
    lua_pushstring(L, zl_dtype_name(zl_zero_dtype(z)));
    int n;
    const char *const *keys = zl_zero_state_keys(z, &n);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, keys[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 4;
}

static int l_group_steps(lua_State *L)
{
    int64_t s = zl_zero_group_steps(check_zero(L, 1), (int)luaL_checkinteger(L, 2) - 1);
    if (s < 0) return zlb_raise(L);
    lua_pushinteger(L, s);
    return 1;
}

static int l_set_group_steps(lua_State *L)
{
    return status(L, zl_zero_set_group_steps(check_zero(L, 1), (int)luaL_checkinteger(L, 2) - 1,
                                             luaL_checkinteger(L, 3)));
}

typedef struct each_ctx {
    lua_State *L;
    int fn;
    int nstates;
    bool failed;
} each_ctx;

/* A Lua error in the callback is caught here and raised after the engine
 * call returned, so no engine frame is skipped. */
static zl_status each_cb(int i, zl_tensor *master, zl_tensor *const *states, void *user)
{
    each_ctx *c = user;
    lua_State *L = c->L;
    lua_pushvalue(L, c->fn);
    lua_pushinteger(L, i + 1);
    zlb_push_tensor(L, zl_tensor_retain(master));
    lua_createtable(L, c->nstates, 0);
    for (int j = 0; j < c->nstates; j++) {
        zlb_push_tensor(L, zl_tensor_retain(states[j]));
        lua_rawseti(L, -2, j + 1);
    }
    if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
        c->failed = true;
        return zl_error(ZL_EHOOK, "%s", lua_tostring(L, -1));
    }
    return ZL_OK;
}

/* z:each_chunk(write, only (a set of 1-based indices, or nil), fn(i, master, states)) */
static int l_each_chunk(lua_State *L)
{
    zl_zero *z = check_zero(L, 1);
    bool write = lua_toboolean(L, 2);
    luaL_checktype(L, 4, LUA_TFUNCTION);
    int n = zl_zero_num_params(z);
    bool *only = NULL;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        only = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1), 0);
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, 3, i + 1);
            only[i] = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
    }
    each_ctx c = {.L = L, .fn = 4, .failed = false};
    zl_zero_state_keys(z, &c.nstates);
    zl_status st = zl_zero_each_chunk(z, write, only, each_cb, &c);
    if (c.failed) return lua_error(L);
    return status(L, st);
}

static void set_int(lua_State *L, const char *k, int64_t v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static int l_memory(lua_State *L)
{
    zl_zero_memory m;
    if (zl_zero_memory_of(check_zero(L, 1), &m)) return zlb_raise(L);
    lua_createtable(L, 0, 15);
    set_int(L, "params", m.params);
    set_int(L, "grads", m.grads);
    set_int(L, "master", m.master);
    set_int(L, "moments", m.moments);
    set_int(L, "reduce", m.reduce_buffers);
    set_int(L, "allgather", m.allgather_buffers);
    set_int(L, "swap", m.swap_buffers);
    set_int(L, "collectives", m.collectives);
    set_int(L, "nvme", m.nvme);
    set_int(L, "partition_elements", m.partition_elements);
    set_int(L, "peak_live", m.peak_live);
    set_int(L, "read_bytes", m.read_bytes);
    set_int(L, "write_bytes", m.write_bytes);
    lua_pushnumber(L, m.comm_seconds);
    lua_setfield(L, -2, "comm_seconds");
    lua_pushnumber(L, m.io_seconds);
    lua_setfield(L, -2, "io_seconds");
    lua_pushnumber(L, m.io_busy_seconds);
    lua_setfield(L, -2, "io_busy_seconds");
    return 1;
}

/* ---- zero.Init stores ---- */

static int init_gc(lua_State *L)
{
    zlb_zero_init *u = luaL_testudata(L, 1, ZLB_ZERO_INIT_MT);
    if (u && u->in) {
        zl_zero_init *in = u->in;
        u->in = NULL;
        zl_zero_init_free(in);
    }
    return 0;
}

static int l_init_new(lua_State *L)
{
    zl_zero_config c;
    zlb_zero_config(L, 1, &c);
    zlb_zero_init *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->in = NULL;
    luaL_setmetatable(L, ZLB_ZERO_INIT_MT);
    if (zl_zero_init_new(zlb_comm_of(L), &c, &u->in)) return zlb_raise(L);
    return 1;
}

static int l_init_partition(lua_State *L)
{
    return status(L, zl_zero_init_partition(check_init(L, 1), zlb_check_tensor_any(L, 2)));
}

static int l_init_holds(lua_State *L)
{
    lua_pushboolean(L, zl_zero_init_holds(check_init(L, 1), zlb_check_tensor(L, 2)));
    return 1;
}

static int l_init_gather(lua_State *L) { return status(L, zl_zero_init_gather(check_init(L, 1), zlb_check_tensor(L, 2))); }

static int l_init_scatter(lua_State *L)
{
    return status(L, zl_zero_init_scatter(check_init(L, 1), zlb_check_tensor(L, 2), (int)luaL_optinteger(L, 3, -1)));
}

static int l_init_unpartition(lua_State *L)
{
    return status(L, zl_zero_init_unpartition(check_init(L, 1), zlb_check_tensor(L, 2)));
}

/* store:gather_on_use(p [, dtype = 'f32']) */
static int l_init_gather_on_use(lua_State *L)
{
    zl_tensor *p = zlb_check_tensor(L, 2);
    return status(L, zl_zero_init_gather_on_use(check_init(L, 1), p, zlb_opt_dtype(L, 3, ZL_DTYPE_F32)));
}

/* Adds zero_new and zero_init_new to the core table on top of the stack. */
void zlb_open_zero(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"begin_forward", l_begin_forward}, {"end_backward", l_end_backward}, {"step", l_step},
        {"zero_grad", l_zero_grad}, {"set_hparams", l_set_hparams}, {"gather", l_gather}, {"release", l_release},
        {"update_param", l_update_param}, {"full_fp32", l_full_fp32}, {"params", l_params}, {"info", l_info},
        {"group_steps", l_group_steps}, {"set_group_steps", l_set_group_steps}, {"each_chunk", l_each_chunk},
        {"sync_working", l_sync_working}, {"memory", l_memory}, {"free", l_free}, {"full_grad", l_full_grad},
        {"local_grad", l_local_grad}, {"local_fp32", l_local_fp32}, {"full_state", l_full_state},
        {"local_state", l_local_state}, {"set_full_fp32", l_set_full_fp32}, {"set_local_fp32", l_set_local_fp32},
        {"set_full_state", l_set_full_state}, {"set_local_state", l_set_local_state}, {NULL, NULL},
    };
    static const luaL_Reg init_methods[] = {
        {"partition", l_init_partition}, {"holds", l_init_holds}, {"gather", l_init_gather},
        {"scatter", l_init_scatter}, {"unpartition", l_init_unpartition},
        {"gather_on_use", l_init_gather_on_use}, {"free", init_gc}, {NULL, NULL},
    };
    luaL_newmetatable(L, ZLB_ZERO_MT);
    lua_pushcfunction(L, zero_gc);
    lua_setfield(L, -2, "__gc");
    zlb_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newmetatable(L, ZLB_ZERO_INIT_MT);
    lua_pushcfunction(L, init_gc);
    lua_setfield(L, -2, "__gc");
    zlb_newlib(L, init_methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"zero_new", l_zero_new}, {"zero_init_new", l_init_new}, {NULL, NULL}};
    zlb_setfuncs(L, fns);
}
