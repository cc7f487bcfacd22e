/* luaopen_zlua: registers the compiled-in Lua modules and the C core
 * (zlua.core) as preloads, then requires 'zlua'. Also owns the per-state
 * runtime: the state's engine context, made current by every binding call,
 * and the thread engine callbacks (hooks, memory pressure) reach Lua through. */
#include <stdlib.h>
#include "binding.h"
#include "modules.h"
#include "zlua/embed.h"

static const char runtime_key = 'r';

zlb_runtime *zlb_runtime_of(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &runtime_key);
    zlb_runtime **p = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return p ? *p : NULL;
}

void zlb_runtime_retain(zlb_runtime *rt) { rt->refs++; }

void zlb_runtime_release(zlb_runtime *rt)
{
    if (rt && --rt->refs == 0) free(rt);
}

/* The sentinel is marked for finalization before any tensor of the state, so
 * lua_close finalizes it last: every tensor (and the hooks it owns) has been
 * released through a live state by then. */
static int sentinel_gc(lua_State *L)
{
    zlb_runtime **p = lua_touserdata(L, 1);
    if (*p) {
        (*p)->alive = 0;
        zlb_memory_detach(*p);
        zl_context_free((*p)->ctx);
        zlb_runtime_release(*p);
        *p = NULL;
    }
    return 0;
}

static void runtime_open(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &runtime_key);
    int present = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (present) return;
    zlb_runtime **p = lua_newuserdatauv(L, sizeof *p, 1);
    *p = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, sentinel_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_State *cb = lua_newthread(L);
    lua_setiuservalue(L, -2, 1);          /* the thread lives as long as the sentinel */
    zlb_runtime *rt = calloc(1, sizeof *rt);
    zl_context *ctx = rt ? zl_context_new() : NULL;
    if (!ctx) {
        free(rt);
        luaL_error(L, "zlua: out of memory");
    }
    rt->ctx = ctx;
    rt->cb = cb;
    rt->refs = 1;
    rt->alive = 1;
    rt->owner = pthread_self();
    rt->gc_step = (int64_t)64 << 20;
    int64_t lim = zl_mem_limit(NULL);
    rt->gc_most = lim < zl_mem_ram() ? lim / 16 : INT64_MAX;
    zl_context_set_user(ctx, rt);
    *p = rt;
    lua_rawsetp(L, LUA_REGISTRYINDEX, &runtime_key);
    zl_context_set_current(ctx);
    zlb_memory_attach(rt);
}

/* Design: a state's engine state (RNG, thread count, memory accounting and
 * pressure handler) is its context's, and every C function of the binding
 * makes that context current on entry, so states used alternately from one
 * thread each see only their own. Only entering matters: Lua reaches the
 * engine through these functions alone, and a host switching states passes
 * through them again. Left out are the collector's metamethods (__gc, __close,
 * __tostring), which only release or print: a block goes back to the context
 * that allocated it whatever context is current. */
static int enter(lua_State *L)
{
    zl_context_set_current(lua_touserdata(L, lua_upvalueindex(1)));
    const luaL_Reg *r = lua_touserdata(L, lua_upvalueindex(2));
    return r->func(L);
}

void zlb_setfuncs(lua_State *L, const luaL_Reg *fns)
{
    zl_context *ctx = zlb_runtime_of(L)->ctx;
    for (; fns->name; fns++) {
        lua_pushlightuserdata(L, ctx);
        lua_pushlightuserdata(L, (void *)fns);
        lua_pushcclosure(L, enter, 2);
        lua_setfield(L, -2, fns->name);
    }
}

void zlb_newlib(lua_State *L, const luaL_Reg *fns)
{
    lua_newtable(L);
    zlb_setfuncs(L, fns);
}

static int open_core(lua_State *L)
{
    runtime_open(L);
    lua_newtable(L);
    zlb_open_tensor(L);
    zlb_open_ops(L);
    zlb_open_autograd(L);
    zlb_open_engine(L);
    zlb_open_io(L);
    zlb_open_checkpoint(L);
    zlb_open_optim(L);
    zlb_open_optimizer(L);
    zlb_open_lr(L);
    zlb_open_dist(L);
    zlb_open_amp(L);
    zlb_open_aio(L);
    zlb_open_zero(L);
    zlb_open_zero_ckpt(L);
    zlb_open_device(L);
    return 1;
}

/* Loader of one compiled-in module: compiled on first require, so a state pays
 * only for the modules it uses. Called as require calls loaders: (name, extra). */
static int load_module(lua_State *L)
{
    const zlb_module *m = lua_touserdata(L, lua_upvalueindex(1));
    if (luaL_loadbuffer(L, m->source, m->len, m->chunk) != LUA_OK) return lua_error(L);
    lua_pushstring(L, m->name);
    lua_pushstring(L, m->chunk + 1);
    lua_call(L, 2, 1);
    return 1;
}

ZL_API int luaopen_zlua(lua_State *L)
{
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    for (const zlb_module *m = zlb_modules; m->name; m++) {
        lua_pushlightuserdata(L, (void *)m);
        lua_pushcclosure(L, load_module, 1);
        lua_setfield(L, -2, m->name);
    }
    lua_pushcfunction(L, open_core);
    lua_setfield(L, -2, "zlua.core");
    lua_pop(L, 1);
    /* A stock interpreter may have reached us through preload.zlua: the entry
     * just set replaced it, so this require runs lua/zlua/init.lua. */
    lua_getglobal(L, "require");
    lua_pushstring(L, "zlua");
    lua_call(L, 1, 1);
    return 1;
}
