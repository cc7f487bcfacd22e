/* The binding of zlua/zero.h's checkpoints: zero_save (engine:save_checkpoint
 * composes its arguments) and zero_ckpt_open, whose handle the load checks
 * its own members against before it loads. */
#include <stdlib.h>
#include <string.h>
#include "binding.h"

#define ZLB_CKPT_MT "zlua.ZeroCheckpoint"

typedef struct zlb_ckpt {
    zl_zero_ckpt *c;
} zlb_ckpt;

static const char *opt_string(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    const char *s = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_pop(L, 1);   /* the string stays in the table */
    return s;
}

static int64_t opt_int(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok && !lua_isnil(L, -1)) zlb_error(L, "zero_save: %s must be an integer", key);
    lua_pop(L, 1);
    return ok ? v : 0;
}

static bool opt_bool(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    bool v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* The host's model writer: the Lua function at the registry's `ref`. */
typedef struct writer {
    lua_State *L;
    int ref;
} writer;

static zl_status write_model(void *user, const char *path)
{
    writer *w = user;
    lua_rawgeti(w->L, LUA_REGISTRYINDEX, w->ref);
    lua_pushstring(w->L, path);
    if (lua_pcall(w->L, 1, 0, 0) != LUA_OK) {
        zl_status st = zl_error(ZL_EHOOK, "%s", lua_tostring(w->L, -1) ? lua_tostring(w->L, -1) : "(error object)");
        lua_pop(w->L, 1);
        return st;
    }
    return ZL_OK;
}

/* zero_save(z | nil, dir, {tag=, counts={...}, precision=, optimizer=, param_groups=json,
 * members=json, write_model=function(path), keep_latest=}) -> path */
static int l_zero_save(lua_State *L)
{
    zl_zero *z = zlb_opt_zero(L, 1);
    const char *dir = luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    zl_zero_save_args a = {0};
    a.tag = opt_string(L, 3, "tag");
    a.precision = opt_string(L, 3, "precision");
    a.optimizer = opt_string(L, 3, "optimizer");
    a.param_groups = opt_string(L, 3, "param_groups");
    a.members = opt_string(L, 3, "members");
    a.keep_latest = opt_bool(L, 3, "keep_latest");
    if (lua_getfield(L, 3, "counts") == LUA_TTABLE) {
        int t = lua_gettop(L);
        a.counts = (zl_zero_counts){opt_int(L, t, "global_steps"), opt_int(L, t, "global_samples"),
                                    opt_int(L, t, "skipped_steps"), opt_int(L, t, "micro_steps")};
    }
    lua_pop(L, 1);
    writer w = {.L = L, .ref = LUA_NOREF};
    if (lua_getfield(L, 3, "write_model") == LUA_TFUNCTION) {
        w.ref = luaL_ref(L, LUA_REGISTRYINDEX);
        a.write_model = write_model;
        a.user = &w;
    } else {
        lua_pop(L, 1);
    }
    if (!z) a.comm = zlb_comm_of(L);
    char path[4400];
    zl_status st = zl_zero_save(z, dir, &a, path, sizeof path);
    luaL_unref(L, LUA_REGISTRYINDEX, w.ref);
    if (st) return zlb_raise(L);
    lua_pushstring(L, path);
    return 1;
}

static zl_zero_ckpt *check_ckpt(lua_State *L)
{
    zlb_ckpt *u = luaL_checkudata(L, 1, ZLB_CKPT_MT);
    if (!u->c) zlb_error(L, "the checkpoint was closed");
    return u->c;
}

/* zero_ckpt_open(z | nil, dir, {tag=, optimizer=, skip_optimizer=, masters_from_model=, hparams=,
 * keep_generator=})
 * -> handle, or nil when DIR has no `latest` and no tag is given */
static int l_ckpt_open(lua_State *L)
{
    zl_zero *z = zlb_opt_zero(L, 1);
    const char *dir = luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    zl_zero_load_args a = {.tag = opt_string(L, 3, "tag"), .optimizer = opt_string(L, 3, "optimizer"),
                           .skip_optimizer = opt_bool(L, 3, "skip_optimizer"),
                           .masters_from_model = opt_bool(L, 3, "masters_from_model"), .hparams = opt_bool(L, 3, "hparams"),
                           .keep_generator = opt_bool(L, 3, "keep_generator")};
    zlb_ckpt *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->c = NULL;
    luaL_setmetatable(L, ZLB_CKPT_MT);
    if (zl_zero_ckpt_open(z, z ? NULL : zlb_comm_of(L), dir, &a, &u->c)) return zlb_raise(L);
    if (!u->c) lua_pushnil(L);
    return 1;
}

static int ckpt_path(lua_State *L)
{
    lua_pushstring(L, zl_zero_ckpt_path(check_ckpt(L)));
    return 1;
}

static int ckpt_json(lua_State *L)
{
    size_t n = 0;
    const char *text = zl_zero_ckpt_json(check_ckpt(L), &n);
    lua_pushlstring(L, text, n);
    return 1;
}

static int ckpt_load(lua_State *L)
{
    if (zl_zero_ckpt_load(check_ckpt(L))) return zlb_raise(L);
    return 0;
}

static int ckpt_close(lua_State *L)
{
    zlb_ckpt *u = luaL_checkudata(L, 1, ZLB_CKPT_MT);
    zl_zero_ckpt_close(u->c);
    u->c = NULL;
    return 0;
}

void zlb_open_zero_ckpt(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"path", ckpt_path}, {"json", ckpt_json}, {"load", ckpt_load}, {"close", ckpt_close}, {NULL, NULL},
    };
    luaL_newmetatable(L, ZLB_CKPT_MT);
    zlb_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, ckpt_close);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"zero_save", l_zero_save}, {"zero_ckpt_open", l_ckpt_open}, {NULL, NULL}};
    zlb_setfuncs(L, fns);
}
