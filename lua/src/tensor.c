/* The tensor userdata and the core's tensor functions: creation (from nested
 * tables, zeros, random, ...), inspection, element access, views, in-place
 * fills, release, and how engine memory presses on Lua's collector.
 * Dims and indices are 0-based here; lua/zlua/init.lua converts. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <stdio.h>
#include "binding.h"

/* ---- the userdata ---- */

zl_tensor **zlb_new_tensor(lua_State *L)
{
    zlb_tensor *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->t = NULL;
    luaL_setmetatable(L, ZLB_TENSOR_MT);
    return &u->t;
}

static int box(lua_State *L)
{
    zlb_new_tensor(L);
    return 1;
}

void zlb_push_tensor(lua_State *L, zl_tensor *t)
{
    if (!t) { lua_pushnil(L); return; }
    if (!lua_checkstack(L, 2)) {
        zl_tensor_release(t);
        zlb_error(L, "stack overflow boxing a tensor");
    }
    lua_pushcfunction(L, box);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        zl_tensor_release(t);
        lua_error(L);
    }
    ((zlb_tensor *)lua_touserdata(L, -1))->t = t;
}

zl_tensor *zlb_check_tensor(lua_State *L, int idx)
{
    zl_tensor *t = zlb_check_tensor_any(L, idx);
    if (zl_tensor_device(t) != ZL_DEVICE_CPU) {
        char where[32];
        zl_device_str(zl_tensor_device(t), zl_tensor_device_index(t), where, sizeof where);
        zlb_error(L, "argument #%d is a tensor on %s, and this runs on the CPU only: move it with t:cpu() first",
                  idx, where);
    }
    return t;
}

zl_tensor *zlb_check_tensor_any(lua_State *L, int idx)
{
    zlb_tensor *u = luaL_testudata(L, idx, ZLB_TENSOR_MT);
    if (!u) {
        lua_Debug ar;
        const char *fname = "?", *got;
        if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.name) fname = ar.name;
        if (luaL_getmetafield(L, idx, "__name") == LUA_TSTRING) got = lua_tostring(L, -1);
        else got = luaL_typename(L, idx);
        zlb_error(L, "bad argument #%d to '%s' (zlua.Tensor expected, got %s)", idx, fname, got);
    }
    if (!u->t) zlb_error(L, "tensor was released");
    return u->t;
}

zl_tensor *zlb_opt_tensor(lua_State *L, int idx)
{
    return lua_isnoneornil(L, idx) ? NULL : zlb_check_tensor(L, idx);
}

zl_tensor *zlb_opt_tensor_any(lua_State *L, int idx)
{
    return lua_isnoneornil(L, idx) ? NULL : zlb_check_tensor_any(L, idx);
}

int zlb_error(lua_State *L, const char *fmt, ...)
{
    lua_Debug ar;
    int level = 1;
    while (lua_getstack(L, level, &ar)) {
        lua_getinfo(L, "Sl", &ar);
        if (ar.currentline > 0 && strncmp(ar.source, "@zlua/", 6) != 0) break;
        level++;
    }
    if (lua_getstack(L, level, &ar)) lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
    else lua_pushliteral(L, "");
    va_list ap;
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

int zlb_raise(lua_State *L)
{
    /* Copy the message first: a finalizer run by the collector while the error
     * is built could overwrite the thread's error buffer. */
    const char *msg = zl_last_error();
    lua_pushstring(L, msg[0] ? msg : "zlua: operation failed");
    return zlb_error(L, "%s", lua_tostring(L, -1));
}

zl_dtype zlb_opt_dtype(lua_State *L, int idx, zl_dtype def)
{
    if (lua_isnoneornil(L, idx)) return def;
    zl_dtype dt;
    if (zl_dtype_from_name(luaL_checkstring(L, idx), &dt)) zlb_raise(L);
    return dt;
}

int zlb_check_shape(lua_State *L, int idx, int64_t *shape)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    size_t n = lua_rawlen(L, idx);
    if (n > ZL_MAX_DIMS)
        zlb_error(L, "%d dimensions requested, at most %d are supported", (int)n, ZL_MAX_DIMS);
    for (size_t i = 0; i < n; i++) {
        int ok;
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        shape[i] = (int64_t)lua_tointegerx(L, -1, &ok);
        lua_pop(L, 1);
        if (!ok) zlb_error(L, "size %d of the shape is not an integer", (int)i + 1);
    }
    return (int)n;
}

static int tensor_gc(lua_State *L)
{
    zlb_tensor *u = luaL_testudata(L, 1, ZLB_TENSOR_MT);
    if (!u) return 0;   /* the metamethod called by hand on something else */
    zl_tensor *t = u->t;
    u->t = NULL;
    zl_tensor_release(t);
    return 0;
}

static int tensor_release(lua_State *L)
{
    zlb_tensor *u = luaL_checkudata(L, 1, ZLB_TENSOR_MT);
    zl_tensor *t = u->t;
    u->t = NULL;
    zl_tensor_release(t);
    return 0;
}

static int is_released(lua_State *L)
{
    zlb_tensor *u = luaL_checkudata(L, 1, ZLB_TENSOR_MT);
    lua_pushboolean(L, u->t == NULL);
    return 1;
}

/* ---- memory pressure ----
 * Lua's collector sees a tensor as a few bytes of userdata, so garbage tensors
 * holding megabytes would pile up between its cycles. Two mechanisms: a soft
 * limit (the context's byte count grown since its low point after the last
 * collection by gc_step, or by half that low point when more, runs a full
 * collection: a GPU step's gigabytes of activations cost a few collections,
 * not one per 64 MB; under a memory limit, never more than a sixteenth of
 * it, since a cgroup kills instead of failing), and the context's pressure
 * handler (an allocation about to fail runs one full collection first). Both
 * count only this state's bytes: its context is current in every binding call;
 * device memory, which the process's devices count, is added in. */

static int64_t context_bytes(void)
{
    int64_t n = zl_device_mem_in_use(ZL_DEVICE_CUDA);
    for (int c = 0; c < ZL_MEM_COUNT; c++) n += zl_mem_stats_of((zl_mem_category)c).current;
    return n;
}

int zlb_result(lua_State *L, zl_tensor *t)
{
    if (!t) return zlb_raise(L);
    zlb_runtime *rt = zl_context_user(zl_context_current());
    if (!rt) return 1;
    int64_t now = context_bytes();
    if (now < rt->gc_base) {
        rt->gc_base = now;
    } else {
        int64_t grown = rt->gc_step > rt->gc_base / 2 ? rt->gc_step : rt->gc_base / 2;
        if (now - rt->gc_base <= (grown < rt->gc_most ? grown : rt->gc_most)) return 1;
        lua_gc(L, LUA_GCCOLLECT);
        rt->gc_base = context_bytes();
    }
    return 1;
}

/* Runs inside an engine allocation. The collection runs on the runtime's own
 * Lua thread, so the finalizers it triggers never touch the stack of the Lua
 * thread calling the engine, and only on the OS thread that owns the state (a
 * kernel's or the offload engine's worker thread must not enter Lua). */
static void on_pressure(size_t nbytes, void *user)
{
    zlb_runtime *rt = user;
    (void)nbytes;
    if (rt->alive && pthread_equal(pthread_self(), rt->owner)) lua_gc(rt->cb, LUA_GCCOLLECT);
}

/* The handler is the context's, set while it is current (runtime_open, the
 * sentinel), so no other state's handler is touched. */
void zlb_memory_attach(zlb_runtime *rt)
{
    zl_context *prev = zl_context_set_current(rt->ctx);
    zl_mem_set_pressure_handler(on_pressure, rt);
    zl_context_set_current(prev);
}

void zlb_memory_detach(zlb_runtime *rt)
{
    zl_context *prev = zl_context_set_current(rt->ctx);
    zl_mem_set_pressure_handler(NULL, NULL);
    zl_context_set_current(prev);
}

static int set_gc_step(lua_State *L)
{
    lua_Number mb = luaL_checknumber(L, 1);
    luaL_argcheck(L, mb >= 0, 1, "must be >= 0 (megabytes)");
    zlb_runtime *rt = zlb_runtime_of(L);
    lua_pushnumber(L, (lua_Number)rt->gc_step / (1 << 20));
    rt->gc_step = (int64_t)(mb * (1 << 20));
    return 1;
}

/* ---- element access (public API only: data pointer plus strides) ---- */

static char *elem_ptr(const zl_tensor *t, int64_t linear)
{
    const int64_t *sh = zl_tensor_shape(t), *st = zl_tensor_strides(t);
    int64_t off = 0;
    for (int i = zl_tensor_ndim(t) - 1; i >= 0; i--) {
        off += (linear % sh[i]) * st[i];
        linear /= sh[i];
    }
    return (char *)zl_tensor_data(t) + off * (int64_t)zl_dtype_size(zl_tensor_dtype(t));
}

static void push_elem(lua_State *L, zl_dtype dt, const char *p)
{
    switch (dt) {
    case ZL_DTYPE_I64: lua_pushinteger(L, *(const int64_t *)p); break;
    case ZL_DTYPE_I32: lua_pushinteger(L, *(const int32_t *)p); break;
    case ZL_DTYPE_U8: lua_pushinteger(L, *(const uint8_t *)p); break;
    case ZL_DTYPE_BOOL: lua_pushboolean(L, *(const uint8_t *)p != 0); break;
    default: lua_pushnumber(L, zl_dtype_traits_of(dt)->to_f64(p)); break;
    }
}

/* Store the Lua value at idx (number or boolean) into p; integers stay exact. */
static void write_elem(lua_State *L, int idx, zl_dtype dt, char *p, const char *op)
{
    const zl_dtype_traits *tr = zl_dtype_traits_of(dt);
    int isint = 0;
    lua_Integer iv = 0;
    double dv;
    if (lua_isboolean(L, idx)) {
        isint = 1;
        iv = lua_toboolean(L, idx);
    } else if (lua_isinteger(L, idx)) {
        isint = 1;
        iv = lua_tointeger(L, idx);
    } else if (lua_type(L, idx) != LUA_TNUMBER) {
        zlb_error(L, "%s: expected a number, got a %s", op, luaL_typename(L, idx));
    }
    dv = isint ? (double)iv : lua_tonumber(L, idx);
    if (tr->is_float || dt == ZL_DTYPE_BOOL) { tr->from_f64(p, dv); return; }
    if (!isint) {
        if (!isfinite(dv) || fabs(dv) >= 9.2e18)
            zlb_error(L, "%s: cannot store %s in %s %s tensor", op, lua_tostring(L, idx),
                      dt == ZL_DTYPE_I64 || dt == ZL_DTYPE_I32 ? "an" : "a", tr->name);
        iv = (lua_Integer)dv;
    }
    switch (dt) {
    case ZL_DTYPE_I64: *(int64_t *)p = iv; break;
    case ZL_DTYPE_I32: *(int32_t *)p = (int32_t)iv; break;
    default: *(uint8_t *)p = (uint8_t)iv; break;
    }
}

static int64_t check_linear(lua_State *L, const zl_tensor *t, int idx)
{
    lua_Integer i = luaL_checkinteger(L, idx);
    int64_t n = zl_tensor_numel(t);
    if (i < 0 || i >= n)
        zlb_error(L, "index %I is out of range for a tensor of %I elements", (lua_Integer)i, (lua_Integer)n);
    return i;
}

static int get(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor(L, 1);
    push_elem(L, zl_tensor_dtype(t), elem_ptr(t, check_linear(L, t, 2)));
    return 1;
}

static int set(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor(L, 1);
    int64_t i = check_linear(L, t, 2);
    luaL_checkany(L, 3);
    write_elem(L, 3, zl_tensor_dtype(t), elem_ptr(t, i), "set");
    return 0;
}

/* A device tensor's one element is copied over first (waiting for the
 * device), as PyTorch's item() does: a loss is read this way every step. */
static int item(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    if (zl_tensor_numel(t) != 1) {
        char s[128];
        return zlb_error(L, "item: the tensor has %I elements (shape %s); item() needs exactly one",
                          (lua_Integer)zl_tensor_numel(t),
                          zl_shape_str(zl_tensor_ndim(t), zl_tensor_shape(t), s, sizeof s));
    }
    zl_tensor *h = zl_tensor_to_device(t, ZL_DEVICE_CPU, 0);
    if (!h) return zlb_raise(L);
    push_elem(L, zl_tensor_dtype(h), elem_ptr(h, 0));
    zl_tensor_release(h);
    return 1;
}

static void totable_dim(lua_State *L, const zl_tensor *t, int d, int64_t *linear)
{
    int64_t n = zl_tensor_shape(t)[d];
    luaL_checkstack(L, 3, "totable");
    lua_createtable(L, n < INT32_MAX ? (int)n : 0, 0);
    for (int64_t i = 0; i < n; i++) {
        if (d + 1 < zl_tensor_ndim(t)) totable_dim(L, t, d + 1, linear);
        else push_elem(L, zl_tensor_dtype(t), elem_ptr(t, (*linear)++));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* A device tensor's elements come through a host copy, as item's do. */
static int totable(lua_State *L)
{
    zl_tensor *h = zl_tensor_to_device(zlb_check_tensor_any(L, 1), ZL_DEVICE_CPU, 0);
    if (!h) return zlb_raise(L);
    int64_t linear = 0;
    if (zl_tensor_ndim(h) == 0) push_elem(L, zl_tensor_dtype(h), elem_ptr(h, 0));
    else totable_dim(L, h, 0, &linear);
    zl_tensor_release(h);
    return 1;
}

/* ---- creation from a nested table ---- */

typedef struct table_scan {
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    int64_t pos[ZL_MAX_DIMS];
    int floats, ints, bools;
} table_scan;

static const char *pos_str(const table_scan *s, int depth, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < depth && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "[%lld]", (long long)s->pos[i] + 1);
    return buf;
}

/* Check the value on top of the stack against the shape taken from the first
 * entries; errors name the position in Lua terms. */
static void scan_value(lua_State *L, table_scan *s, int depth)
{
    char where[96];
    int ty = lua_type(L, -1);
    if (depth < s->ndim) {
        if (ty != LUA_TTABLE)
            zlb_error(L, "tensor: ragged nested table: expected a table of %I entries at %s, got a %s",
                       (lua_Integer)s->shape[depth], pos_str(s, depth, where, sizeof where),
                       lua_typename(L, ty));
        int64_t n = (int64_t)lua_rawlen(L, -1);
        if (n != s->shape[depth])
            zlb_error(L, "tensor: ragged nested table: the table at %s has length %I, expected %I",
                       pos_str(s, depth, where, sizeof where), (lua_Integer)n, (lua_Integer)s->shape[depth]);
        luaL_checkstack(L, 2, "tensor: nested table");
        for (int64_t i = 0; i < n; i++) {
            s->pos[depth] = i;
            lua_rawgeti(L, -1, (lua_Integer)i + 1);
            scan_value(L, s, depth + 1);
            lua_pop(L, 1);
        }
        return;
    }
    if (ty == LUA_TNUMBER) {
        if (lua_isinteger(L, -1)) s->ints++;
        else s->floats++;
    } else if (ty == LUA_TBOOLEAN) {
        s->bools++;
    } else if (ty == LUA_TTABLE) {
        zlb_error(L, "tensor: ragged nested table: expected a number at %s, got a table",
                   pos_str(s, depth, where, sizeof where));
    } else {
        zlb_error(L, "tensor: expected a number or boolean at %s, got a %s",
                   pos_str(s, depth, where, sizeof where), lua_typename(L, ty));
    }
}

static void fill_value(lua_State *L, const table_scan *s, int depth, zl_dtype dt, char **p)
{
    if (depth == s->ndim) {
        write_elem(L, -1, dt, *p, "tensor");
        *p += zl_dtype_size(dt);
        return;
    }
    for (int64_t i = 0; i < s->shape[depth]; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        fill_value(L, s, depth + 1, dt, p);
        lua_pop(L, 1);
    }
}

/* from_table(value [, dtype]): value is a number, a boolean or a nested table.
 * Without dtype: bool when every entry is a boolean, i64 when every entry is an
 * integer, f32 otherwise. */
static int from_table(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_settop(L, 2);
    table_scan s = {0};
    lua_pushvalue(L, 1);
    while (lua_type(L, -1) == LUA_TTABLE) {
        if (s.ndim == ZL_MAX_DIMS)
            return zlb_error(L, "tensor: nested more than %d deep (at most %d dimensions are supported)",
                              ZL_MAX_DIMS, ZL_MAX_DIMS);
        int64_t n = (int64_t)lua_rawlen(L, -1);
        s.shape[s.ndim++] = n;
        if (n == 0) break;
        lua_rawgeti(L, -1, 1);
    }
    lua_settop(L, 2);
    lua_pushvalue(L, 1);
    scan_value(L, &s, 0);
    zl_dtype def = s.floats ? ZL_DTYPE_F32 : s.ints ? ZL_DTYPE_I64 : s.bools ? ZL_DTYPE_BOOL : ZL_DTYPE_F32;
    zl_dtype dt = zlb_opt_dtype(L, 2, def);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_new(dt, s.ndim, s.shape, ZL_MEM_OTHER);
    if (!*out) return zlb_raise(L);
    char *p = zl_tensor_data(*out);
    lua_pushvalue(L, 3);
    fill_value(L, &s, 0, dt, &p);
    lua_pop(L, 1);
    return zlb_result(L, *out);
}

/* ---- creation ---- */

static int zeros(lua_State *L)
{
    int64_t shape[ZL_MAX_DIMS];
    int nd = zlb_check_shape(L, 1, shape);
    zl_dtype dt = zlb_opt_dtype(L, 2, ZL_DTYPE_F32);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_zeros(dt, nd, shape);
    return zlb_result(L, *out);
}

static int full(lua_State *L)
{
    int64_t shape[ZL_MAX_DIMS];
    int nd = zlb_check_shape(L, 1, shape);
    double v = lua_isboolean(L, 2) ? lua_toboolean(L, 2) : luaL_checknumber(L, 2);
    zl_dtype dt = zlb_opt_dtype(L, 3, ZL_DTYPE_F32);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_full(dt, nd, shape, v);
    return zlb_result(L, *out);
}

static int empty(lua_State *L)
{
    int64_t shape[ZL_MAX_DIMS];
    int nd = zlb_check_shape(L, 1, shape);
    zl_dtype dt = zlb_opt_dtype(L, 2, ZL_DTYPE_F32);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_new(dt, nd, shape, ZL_MEM_OTHER);
    return zlb_result(L, *out);
}

static int scalar(lua_State *L)
{
    if (!lua_isboolean(L, 1)) luaL_checknumber(L, 1);
    zl_dtype dt = zlb_opt_dtype(L, 2, ZL_DTYPE_F32);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_new(dt, 0, NULL, ZL_MEM_OTHER);
    if (!*out) return zlb_raise(L);
    write_elem(L, 1, dt, zl_tensor_data(*out), "scalar");
    return zlb_result(L, *out);
}

static int arange(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    zl_dtype dt = zlb_opt_dtype(L, 2, ZL_DTYPE_I64);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_arange(dt, n);
    return zlb_result(L, *out);
}

static int random_tensor(lua_State *L, int normal)
{
    int64_t shape[ZL_MAX_DIMS];
    int nd = zlb_check_shape(L, 1, shape);
    zl_dtype dt = zlb_opt_dtype(L, 2, ZL_DTYPE_F32);
    zl_generator *g = zlb_opt_generator(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = normal ? zl_tensor_randn(dt, nd, shape, g) : zl_tensor_rand(dt, nd, shape, g);
    return zlb_result(L, *out);
}

static int rand_(lua_State *L) { return random_tensor(L, 0); }
static int randn(lua_State *L) { return random_tensor(L, 1); }

static int randperm(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    zl_generator *g = zlb_opt_generator(L, 2);
    luaL_argcheck(L, n >= 0, 1, "must be >= 0");
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_randperm(n, g);
    return zlb_result(L, *out);
}

static int uniform_(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);   /* a device draws the host's numbers (core/rng.c) */
    double lo = luaL_checknumber(L, 2), hi = luaL_checknumber(L, 3);
    if (zl_tensor_uniform_(t, lo, hi, zlb_opt_generator(L, 4))) return zlb_raise(L);
    lua_settop(L, 1);
    return 1;
}

static int normal_(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);   /* a device draws the host's numbers (core/rng.c) */
    double mean = luaL_checknumber(L, 2), std = luaL_checknumber(L, 3);
    if (zl_tensor_normal_(t, mean, std, zlb_opt_generator(L, 4))) return zlb_raise(L);
    lua_settop(L, 1);
    return 1;
}

/* ---- inspection ---- */

static void push_dims(lua_State *L, int n, const int64_t *v)
{
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, v[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static int shape(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    push_dims(L, zl_tensor_ndim(t), zl_tensor_shape(t));
    return 1;
}

static int strides(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    push_dims(L, zl_tensor_ndim(t), zl_tensor_strides(t));
    return 1;
}

static int size(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    lua_Integer d = luaL_checkinteger(L, 2);
    luaL_argcheck(L, d >= 0 && d < zl_tensor_ndim(t), 2, "dimension out of range");
    lua_pushinteger(L, zl_tensor_shape(t)[d]);
    return 1;
}

static int numel(lua_State *L)
{
    lua_pushinteger(L, zl_tensor_numel(zlb_check_tensor_any(L, 1)));
    return 1;
}

static int dim(lua_State *L)
{
    lua_pushinteger(L, zl_tensor_ndim(zlb_check_tensor_any(L, 1)));
    return 1;
}

static int dtype(lua_State *L)
{
    lua_pushstring(L, zl_dtype_name(zl_tensor_dtype(zlb_check_tensor_any(L, 1))));
    return 1;
}

static int is_float(lua_State *L)
{
    lua_pushboolean(L, zl_dtype_traits_of(zl_tensor_dtype(zlb_check_tensor_any(L, 1)))->is_float);
    return 1;
}

static int is_contiguous(lua_State *L)
{
    lua_pushboolean(L, zl_tensor_is_contiguous(zlb_check_tensor_any(L, 1)));
    return 1;
}

static int storage_offset(lua_State *L)
{
    lua_pushinteger(L, zl_tensor_offset(zlb_check_tensor_any(L, 1)));
    return 1;
}

static int device(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    char where[32];
    lua_pushstring(L, zl_device_str(zl_tensor_device(t), zl_tensor_device_index(t), where, sizeof where));
    return 1;
}

/* to_device(t, "cuda:0" | "cpu"): a copy on that device (t itself when it is there). */
static int to_device(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    zl_device kind;
    int index;
    if (zl_device_parse(luaL_checkstring(L, 2), &kind, &index)) return zlb_raise(L);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_to_device(t, kind, index);
    return zlb_result(L, *out);
}

static int category(lua_State *L)
{
    lua_pushstring(L, zl_mem_category_name(zl_tensor_category(zlb_check_tensor_any(L, 1))));
    return 1;
}

/* t:set_data(src): t takes src's data, shape and dtype, staying the same object. */
static int set_data(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1), *src = zlb_check_tensor_any(L, 2);
    if (zl_tensor_set_data(t, src)) return zlb_raise(L);
    lua_settop(L, 1);
    return 1;
}

static int set_category(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    zl_mem_category c;
    if (zl_mem_category_from_name(luaL_checkstring(L, 2), &c)) return zlb_raise(L);
    zl_tensor_set_category(t, c);
    lua_settop(L, 1);
    return 1;
}

static int shares_storage(lua_State *L)
{
    lua_pushboolean(L, zl_tensor_shares_storage(zlb_check_tensor_any(L, 1), zlb_check_tensor_any(L, 2)));
    return 1;
}

/* Identity of the engine tensor behind a box: several boxes (t.grad read twice)
 * may hold the same tensor. */
static int same(lua_State *L)
{
    zlb_tensor *a = luaL_testudata(L, 1, ZLB_TENSOR_MT), *b = luaL_testudata(L, 2, ZLB_TENSOR_MT);
    lua_pushboolean(L, a && b && a->t && a->t == b->t);
    return 1;
}

static int id(lua_State *L)
{
    lua_pushlightuserdata(L, zlb_check_tensor_any(L, 1));
    return 1;
}

static int is_tensor(lua_State *L)
{
    lua_pushboolean(L, luaL_testudata(L, 1, ZLB_TENSOR_MT) != NULL);
    return 1;
}

/* ---- views and copies ---- */

static int reshape_like(lua_State *L, int view)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int64_t sh[ZL_MAX_DIMS];
    int nd = zlb_check_shape(L, 2, sh);
    zl_tensor **out = zlb_new_tensor(L);
    *out = view ? zl_tensor_view(t, nd, sh) : zl_tensor_reshape(t, nd, sh);
    return zlb_result(L, *out);
}

static int reshape(lua_State *L) { return reshape_like(L, 0); }
static int view(lua_State *L) { return reshape_like(L, 1); }

static int expand(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int64_t sh[ZL_MAX_DIMS];
    int nd = zlb_check_shape(L, 2, sh);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_expand(t, nd, sh);
    return zlb_result(L, *out);
}

static int transpose(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int a = (int)luaL_checkinteger(L, 2), b = (int)luaL_checkinteger(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_transpose(t, a, b);
    return zlb_result(L, *out);
}

static int permute(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int64_t p[ZL_MAX_DIMS];
    int n = zlb_check_shape(L, 2, p);
    if (n != zl_tensor_ndim(t))
        return zlb_error(L, "permute: %d dimensions given for a %d-d tensor", n, zl_tensor_ndim(t));
    int perm[ZL_MAX_DIMS];
    for (int i = 0; i < n; i++) perm[i] = (int)p[i];
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_permute(t, perm);
    return zlb_result(L, *out);
}

static int narrow(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    lua_Integer start = luaL_checkinteger(L, 3), len = luaL_checkinteger(L, 4);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_narrow(t, d, start, len);
    return zlb_result(L, *out);
}

static int select_(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    lua_Integer i = luaL_checkinteger(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_select(t, d, i);
    return zlb_result(L, *out);
}

static int squeeze(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_optinteger(L, 2, ZL_ALL_DIMS);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_squeeze(t, d);
    return zlb_result(L, *out);
}

static int unsqueeze(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_unsqueeze(t, d);
    return zlb_result(L, *out);
}

#define ZLB_UNARY_VIEW(name, call)                  \
    static int name(lua_State *L)                   \
    {                                               \
        zl_tensor *t = zlb_check_tensor_any(L, 1);  \
        zl_tensor **out = zlb_new_tensor(L);        \
        *out = call(t);                             \
        return zlb_result(L, *out);                 \
    }
ZLB_UNARY_VIEW(contiguous, zl_tensor_contiguous)
ZLB_UNARY_VIEW(clone, zl_tensor_clone)
ZLB_UNARY_VIEW(detach, zl_tensor_detach)
#undef ZLB_UNARY_VIEW

static int to(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    zl_dtype dt = zlb_opt_dtype(L, 2, ZL_DTYPE_F32);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_tensor_to(t, dt);
    return zlb_result(L, *out);
}

/* dst:add_(src [, alpha]): dst += alpha * src in place; returns dst. */
static int add_(lua_State *L)
{
    zl_tensor *dst = zlb_check_tensor_any(L, 1), *src = zlb_check_tensor_any(L, 2);
    if (zl_tensor_add_(dst, src, luaL_optnumber(L, 3, 1.0))) return zlb_raise(L);
    lua_settop(L, 1);
    return 1;
}

static int copy_(lua_State *L)
{
    zl_tensor *dst = zlb_check_tensor_any(L, 1), *src = zlb_check_tensor_any(L, 2);
    if (zl_tensor_copy_(dst, src)) return zlb_raise(L);
    lua_settop(L, 1);
    return 1;
}

static void check_range(lua_State *L, int idx, zl_tensor *t, lua_Integer off, lua_Integer n)
{
    if (zl_tensor_ndim(t) != 1) luaL_argerror(L, idx, "copy_range needs 1-d tensors");
    if (off < 0 || n < 0 || off + n > zl_tensor_numel(t))
        luaL_error(L, "copy_range: [%I, %I) is outside a tensor of %I elements", off, off + n,
                   (lua_Integer)zl_tensor_numel(t));
}

/* copy_range(dst, dst_off, src, src_off, n [, alpha]): dst[dst_off..+n) =
 * src[src_off..+n) (converted), or += alpha * src when alpha is given; 1-d
 * tensors, 0-based offsets. The views live only in this call, so no Lua
 * garbage keeps a gradient or a gathered parameter alive after its release. */
static int copy_range(lua_State *L)
{
    zl_tensor *dst = zlb_check_tensor_any(L, 1), *src = zlb_check_tensor_any(L, 3);
    lua_Integer doff = luaL_checkinteger(L, 2), soff = luaL_checkinteger(L, 4), n = luaL_checkinteger(L, 5);
    bool add = !lua_isnoneornil(L, 6);
    double alpha = add ? luaL_checknumber(L, 6) : 1.0;
    check_range(L, 1, dst, doff, n);
    check_range(L, 3, src, soff, n);
    zl_tensor *d = zl_tensor_narrow(dst, 0, doff, n);
    zl_tensor *s = d ? zl_tensor_narrow(src, 0, soff, n) : NULL;
    bool ok = d && s && !(add ? zl_tensor_add_(d, s, alpha) : zl_tensor_copy_(d, s));
    zl_tensor_release(d);
    zl_tensor_release(s);
    if (!ok) return zlb_raise(L);
    return 0;
}

static int fill_(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    double v = lua_isboolean(L, 2) ? lua_toboolean(L, 2) : luaL_checknumber(L, 2);
    if (zl_tensor_fill(t, v)) return zlb_raise(L);
    lua_settop(L, 1);
    return 1;
}

void zlb_open_tensor(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"from_table", from_table}, {"zeros", zeros}, {"full", full}, {"empty", empty},
        {"scalar", scalar}, {"arange", arange}, {"rand", rand_}, {"randn", randn},
        {"randperm", randperm}, {"uniform_", uniform_}, {"normal_", normal_},
        {"shape", shape}, {"strides", strides}, {"size", size}, {"numel", numel}, {"dim", dim},
        {"dtype", dtype}, {"is_float", is_float}, {"is_contiguous", is_contiguous},
        {"storage_offset", storage_offset}, {"device", device}, {"to_device", to_device}, {"category", category},
        {"set_category", set_category}, {"set_data", set_data}, {"shares_storage", shares_storage}, {"same", same},
        {"id", id}, {"is_tensor", is_tensor}, {"get", get}, {"set", set}, {"item", item},
        {"totable", totable}, {"reshape", reshape}, {"view", view}, {"expand", expand},
        {"transpose", transpose}, {"permute", permute}, {"narrow", narrow}, {"select", select_},
        {"squeeze", squeeze}, {"unsqueeze", unsqueeze}, {"contiguous", contiguous},
        {"clone", clone}, {"detach", detach}, {"to", to}, {"copy_", copy_}, {"add_", add_},
        {"copy_range", copy_range}, {"fill_", fill_},
        {"release", tensor_release}, {"is_released", is_released}, {"set_gc_step", set_gc_step},
        {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
    luaL_newmetatable(L, ZLB_TENSOR_MT);
    lua_pushcfunction(L, tensor_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tensor_gc);
    lua_setfield(L, -2, "__close");
    lua_setfield(L, -2, "Tensor");
}
