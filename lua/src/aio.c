/* The binding of engine/offload's aio engine: core.aio_open{...} gives an
 * engine userdata whose write/read start a request userdata to wait on, and
 * core.aio_buffer the aligned tensors that go to disk without a bounce. */
#include <string.h>
#include "binding.h"

#define ZLB_AIO_MT "zlua.Aio"
#define ZLB_AIO_REQUEST_MT "zlua.AioRequest"

/* The engine is freed by zl_aio_close only once every request started on it
 * has been waited on, so engine and requests may be collected in any order. */
typedef struct zlb_aio {
    zl_aio *a;              /* NULL once closed */
} zlb_aio;

typedef struct zlb_aio_request {
    zl_aio_request *r;      /* NULL once waited on (or before the engine call) */
    bool write;
} zlb_aio_request;

static zlb_aio *check_aio(lua_State *L)
{
    zlb_aio *u = luaL_checkudata(L, 1, ZLB_AIO_MT);
    if (!u->a) zlb_error(L, "aio engine was closed");
    return u;
}

/* An integer key of the options table at idx (absent: keep *out). */
static void int_key(lua_State *L, int idx, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    int type = lua_getfield(L, idx, key);
    if (type != LUA_TNIL) {
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok) zlb_error(L, "aio_open: %s must be an integer, got %s", key, luaL_tolstring(L, -1, NULL));
        if (v < lo || v > hi) zlb_error(L, "aio_open: %s must be between %I and %I, got %I", key,
                                        (lua_Integer)lo, (lua_Integer)hi, v);
        *out = v;
    }
    lua_pop(L, 1);
}

static void bool_key(lua_State *L, int idx, const char *key, bool *out)
{
    int type = lua_getfield(L, idx, key);
    if (type != LUA_TNIL) {
        if (type != LUA_TBOOLEAN) zlb_error(L, "aio_open: %s must be a boolean, got %s", key, luaL_typename(L, -1));
        *out = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
}

static int aio_gc(lua_State *L)
{
    zlb_aio *u = luaL_testudata(L, 1, ZLB_AIO_MT);
    if (u && u->a) {
        zl_aio *a = u->a;
        u->a = NULL;
        zl_aio_close(a);
    }
    return 0;
}

void zlb_aio_config(lua_State *L, int idx, zl_aio_config *c)
{
    static const char *const keys[] = {"block_size", "queue_depth", "intra_op_parallelism", "thread_count",
                                       "single_submit", "overlap_events", NULL};
    *c = zl_aio_defaults();
    if (lua_isnoneornil(L, idx)) return;
    idx = lua_absindex(L, idx);
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        bool known = false;
        for (int i = 0; keys[i] && !known; i++)
            known = lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), keys[i]);
        if (!known) zlb_error(L, "aio_open: unknown key '%s'", luaL_tolstring(L, -1, NULL));
    }
    lua_getfield(L, idx, "intra_op_parallelism");
    lua_getfield(L, idx, "thread_count");
    if (!lua_isnil(L, -1) && !lua_isnil(L, -2))
        zlb_error(L, "aio_open: intra_op_parallelism and its old name thread_count are both given: give one");
    lua_pop(L, 2);
    int64_t bs = c->block_size, qd = c->queue_depth, par = c->intra_op_parallelism;
    int_key(L, idx, "block_size", 1, INT64_MAX, &bs);
    int_key(L, idx, "queue_depth", 1, INT32_MAX, &qd);
    int_key(L, idx, "intra_op_parallelism", 1, INT32_MAX, &par);
    int_key(L, idx, "thread_count", 1, INT32_MAX, &par);
    bool_key(L, idx, "single_submit", &c->single_submit);
    bool_key(L, idx, "overlap_events", &c->overlap_events);
    c->block_size = bs;
    c->queue_depth = (int)qd;
    c->intra_op_parallelism = (int)par;
}

/* core.aio_open{block_size=, queue_depth=, intra_op_parallelism= (or its old
 * name thread_count), single_submit=, overlap_events=}: DeepSpeed's defaults
 * for what is left out; an unknown key is an error. */
static int l_aio_open(lua_State *L)
{
    zl_aio_config c;
    zlb_aio_config(L, 1, &c);
    zlb_aio *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->a = NULL;
    luaL_setmetatable(L, ZLB_AIO_MT);
    if (zl_aio_open(&c, &u->a)) return zlb_raise(L);
    return 1;
}

/* ---- requests ---- */

static int request_gc(lua_State *L)
{
    zlb_aio_request *u = luaL_testudata(L, 1, ZLB_AIO_REQUEST_MT);
    if (u && u->r) {
        zl_aio_request *r = u->r;
        u->r = NULL;
        zl_aio_wait(r);         /* its error has nowhere to go */
    }
    return 0;
}

/* req:wait(): true once the transfer is done; raises its error (naming the file). */
static int request_wait(lua_State *L)
{
    zlb_aio_request *u = luaL_checkudata(L, 1, ZLB_AIO_REQUEST_MT);
    if (!u->r) return zlb_error(L, "aio %s request was already waited on", u->write ? "write" : "read");
    zl_aio_request *r = u->r;
    u->r = NULL;
    if (zl_aio_wait(r)) return zlb_raise(L);
    lua_pushboolean(L, 1);
    return 1;
}

static int request_tostring(lua_State *L)
{
    zlb_aio_request *u = luaL_checkudata(L, 1, ZLB_AIO_REQUEST_MT);
    lua_pushfstring(L, "aio %s request (%s)", u->write ? "write" : "read", u->r ? "not waited on" : "waited on");
    return 1;
}

/* aio:write(path, t [, offset]) and aio:read(...): offset in bytes, a multiple of 4096. */
static int start(lua_State *L, bool write)
{
    zlb_aio *e = check_aio(L);
    const char *path = zlb_check_cstring(L, 2, write ? "aio:write" : "aio:read", "path");
    zl_tensor *t = zlb_check_tensor(L, 3);
    int64_t offset = (int64_t)luaL_optinteger(L, 4, 0);
    zlb_aio_request *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->r = NULL;
    u->write = write;
    luaL_setmetatable(L, ZLB_AIO_REQUEST_MT);
    u->r = write ? zl_aio_write(e->a, path, t, offset) : zl_aio_read(e->a, path, t, offset);
    if (!u->r) return zlb_raise(L);
    return 1;
}

static int aio_write(lua_State *L) { return start(L, true); }
static int aio_read(lua_State *L) { return start(L, false); }

static int aio_is_direct(lua_State *L)
{
    lua_pushboolean(L, zl_aio_is_direct(check_aio(L)->a));
    return 1;
}

/* aio:close(): waits for what is in flight; closing twice is fine. */
static int aio_close(lua_State *L)
{
    luaL_checkudata(L, 1, ZLB_AIO_MT);
    return aio_gc(L);
}

static int aio_tostring(lua_State *L)
{
    zlb_aio *u = luaL_checkudata(L, 1, ZLB_AIO_MT);
    lua_pushstring(L, u->a ? "aio engine" : "aio engine (closed)");
    return 1;
}

/* core.aio_buffer(numel [, dtype [, category]]): a 1-d tensor on a 4096-byte boundary. */
/* core.aio_unavailable(): nil, or why this build has no libaio. */
static int l_aio_unavailable(lua_State *L)
{
    const char *why = zl_aio_unavailable();
    if (why) lua_pushstring(L, why);
    else lua_pushnil(L);
    return 1;
}

static int l_aio_buffer(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    zl_dtype dt = zlb_opt_dtype(L, 2, ZL_DTYPE_F32);
    zl_mem_category cat = ZL_MEM_OTHER;
    if (!lua_isnoneornil(L, 3) && zl_mem_category_from_name(luaL_checkstring(L, 3), &cat)) return zlb_raise(L);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_aio_buffer(dt, (int64_t)n, cat);
    return zlb_result(L, *slot);
}

/* Adds aio_open and aio_buffer to the core table on top of the stack. */
void zlb_open_aio(lua_State *L)
{
    static const luaL_Reg engine_methods[] = {
        {"write", aio_write}, {"read", aio_read}, {"is_direct", aio_is_direct}, {"close", aio_close}, {NULL, NULL},
    };
    static const luaL_Reg request_methods[] = {{"wait", request_wait}, {NULL, NULL}};
    if (luaL_newmetatable(L, ZLB_AIO_MT)) {
        zlb_newlib(L, engine_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, aio_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, aio_gc);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, aio_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, ZLB_AIO_REQUEST_MT)) {
        zlb_newlib(L, request_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, request_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, request_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"aio_open", l_aio_open}, {"aio_buffer", l_aio_buffer}, {"aio_unavailable", l_aio_unavailable}, {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
