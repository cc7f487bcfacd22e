/* The core's autograd bindings: backward, .grad, requires_grad, grad mode, and
 * hooks that call Lua functions from inside engine frames.
 *
 * Design of a Lua hook: the function is kept in the registry and released by
 * the hook's user_free. When the engine fires it, we call it on the runtime's
 * own thread through lua_pcall, so a Lua error never unwinds through engine
 * frames: it becomes the hook's zl_error, the engine aborts the op or the
 * backward with ZL_EHOOK, and the binding that called the engine raises that
 * message in the caller's thread. */
#include <stdlib.h>
#include "binding.h"

typedef struct lua_hook {
    zlb_runtime *rt;
    int ref;
} lua_hook;

static void hook_free(void *user)
{
    lua_hook *h = user;
    if (h->rt->alive) luaL_unref(h->rt->cb, LUA_REGISTRYINDEX, h->ref);
    zlb_runtime_release(h->rt);
    free(h);
}

/* Runs protected: fn(tensor [, event, op]). Arguments arrive as light
 * userdata, so nothing that can fail happens before lua_pcall. */
static int hook_call(lua_State *L)
{
    lua_hook *h = lua_touserdata(L, 1);
    zl_tensor *t = lua_touserdata(L, 2);
    const char *event = lua_touserdata(L, 3), *op = lua_touserdata(L, 4);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref);
    zl_tensor **box = zlb_new_tensor(L);
    *box = zl_tensor_retain(t);
    if (!event) {
        lua_call(L, 1, 0);
        return 0;
    }
    lua_pushstring(L, event);
    lua_pushstring(L, op);
    lua_call(L, 3, 0);
    return 0;
}

static zl_status run_hook(lua_hook *h, zl_tensor *t, const char *event, const char *op)
{
    const char *what = event ? event : "grad-ready";
    if (!h->rt->alive)
        return zl_error(ZL_EHOOK, "%s: %s hook: its Lua state was closed", op, what);
    lua_State *L = h->rt->cb;
    if (!lua_checkstack(L, 8)) return zl_error(ZL_EHOOK, "%s: %s hook: Lua stack overflow", op, what);
    int top = lua_gettop(L);
    lua_pushcfunction(L, hook_call);
    lua_pushlightuserdata(L, h);
    lua_pushlightuserdata(L, t);
    lua_pushlightuserdata(L, (void *)event);
    lua_pushlightuserdata(L, (void *)op);
    zl_status st = ZL_OK;
    if (lua_pcall(L, 4, 0, 0) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        st = zl_error(ZL_EHOOK, "%s: %s hook failed: %s", op, what,
                      msg ? msg : "(error object is not a string)");
    }
    lua_settop(L, top);
    return st;
}

static zl_status on_grad_ready(zl_tensor *leaf, void *user)
{
    return run_hook(user, leaf, NULL, "backward");
}

static const char *const event_names[] = {"before_forward", "after_forward", "before_backward",
                                          "after_backward"};

static zl_status on_use(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    const char *name = (unsigned)ev < 4 ? event_names[ev] : "unknown";
    return run_hook(user, t, name, op ? op : "?");
}

/* add_*_hook(t, fn) -> handle */
static int add_hook(lua_State *L, int use)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    zlb_runtime *rt = zlb_runtime_of(L);
    if (!rt) return zlb_error(L, "zlua: the runtime is not initialised");
    lua_pushvalue(L, 2);
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_hook *h = malloc(sizeof *h);
    if (!h) {
        luaL_unref(L, LUA_REGISTRYINDEX, ref);
        return zlb_error(L, "add_hook: out of memory");
    }
    h->ref = ref;
    h->rt = rt;
    zlb_runtime_retain(rt);
    int handle = use ? zl_tensor_add_use_hook(t, on_use, h, hook_free)
                     : zl_tensor_add_grad_ready_hook(t, on_grad_ready, h, hook_free);
    if (!handle) {
        hook_free(h);
        return zlb_raise(L);
    }
    lua_pushinteger(L, handle);
    return 1;
}

static int add_grad_ready_hook(lua_State *L) { return add_hook(L, 0); }
static int add_use_hook(lua_State *L) { return add_hook(L, 1); }

static int remove_hook(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    zl_tensor_remove_hook(t, (int)luaL_checkinteger(L, 2));
    return 0;
}

/* A function's backward in Lua (zl_function_record): fn(gout, inputs...)
 * returns one gradient per input, nil for none; the inputs come from the
 * node, so the function need not keep them alive itself. Run as a hook is,
 * protected on the runtime's thread; the gradients it returns are retained
 * into gin (the engine releases them, on error too). */
static int function_call(lua_State *L)
{
    lua_hook *h = lua_touserdata(L, 1);
    zl_tensor *gout = lua_touserdata(L, 2);
    zl_tensor *const *inputs = lua_touserdata(L, 3);
    zl_tensor **gin = lua_touserdata(L, 4);
    int n = (int)lua_tointeger(L, 5);
    luaL_checkstack(L, n + 8, "function backward");
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref);
    zl_tensor **box = zlb_new_tensor(L);
    *box = zl_tensor_retain(gout);
    for (int i = 0; i < n; i++) {
        box = zlb_new_tensor(L);
        *box = zl_tensor_retain(inputs[i]);
    }
    lua_call(L, 1 + n, n);
    int base = lua_gettop(L) - n + 1;
    for (int i = 0; i < n; i++) {
        if (lua_isnil(L, base + i)) continue;
        zlb_tensor *u = luaL_testudata(L, base + i, ZLB_TENSOR_MT);
        if (!u || !u->t) return luaL_error(L, "gradient %d is a %s, expected a tensor or nil", i + 1, luaL_typename(L, base + i));
        gin[i] = zl_tensor_retain(u->t);
    }
    return 0;
}

static zl_status function_backward(zl_tensor *gout, int n, zl_tensor *const *inputs, zl_tensor **gin, void *user)
{
    lua_hook *h = user;
    if (!h->rt->alive) return zl_error(ZL_EHOOK, "checkpoint: backward: its Lua state was closed");
    lua_State *L = h->rt->cb;
    if (!lua_checkstack(L, 8)) return zl_error(ZL_EHOOK, "checkpoint: backward: Lua stack overflow");
    int top = lua_gettop(L);
    lua_pushcfunction(L, function_call);
    lua_pushlightuserdata(L, h);
    lua_pushlightuserdata(L, gout);
    lua_pushlightuserdata(L, (void *)inputs);
    lua_pushlightuserdata(L, gin);
    lua_pushinteger(L, n);
    zl_status st = ZL_OK;
    if (lua_pcall(L, 5, 0, 0) != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        st = zl_error(ZL_EHOOK, "checkpoint: backward: %s", msg ? msg : "(error object is not a string)");
    }
    lua_settop(L, top);
    return st;
}

/* function_record(out, {inputs...}, backward_fn): see zl_function_record;
 * the node is named "checkpoint", its only user. */
static int function_record(lua_State *L)
{
    zl_tensor *out = zlb_check_tensor_any(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    int n = (int)luaL_len(L, 2);
    zl_tensor *small[8], **in = n <= 8 ? small : lua_newuserdatauv(L, sizeof *in * (size_t)n, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        in[i] = zlb_check_tensor_any(L, -1);
        lua_pop(L, 1);
    }
    zlb_runtime *rt = zlb_runtime_of(L);
    if (!rt) return zlb_error(L, "zlua: the runtime is not initialised");
    lua_hook *h = malloc(sizeof *h);
    if (!h) return zlb_error(L, "checkpoint: out of memory");
    lua_pushvalue(L, 3);
    h->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    h->rt = rt;
    zlb_runtime_retain(rt);
    if (zl_function_record(out, "checkpoint", n, in, function_backward, h, hook_free)) return zlb_raise(L);
    return 0;
}

static int move_data(lua_State *L)
{
    if (zl_tensor_move_data(zlb_check_tensor_any(L, 1), zlb_check_tensor_any(L, 2))) return zlb_raise(L);
    return 0;
}

/* backward(t [, grad [, retain_graph]]) */
static int backward(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1), *g = zlb_opt_tensor_any(L, 2);
    if (zl_backward(t, g, lua_toboolean(L, 3))) return zlb_raise(L);
    return 0;
}

static int grad(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    if (!zl_tensor_grad(t)) { lua_pushnil(L); return 1; }
    zl_tensor **box = zlb_new_tensor(L);
    *box = zl_tensor_retain(zl_tensor_grad(t));
    return 1;
}

static int set_grad(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1), *g = zlb_opt_tensor_any(L, 2);
    if (zl_tensor_set_grad(t, g)) return zlb_raise(L);
    return 0;
}

static int requires_grad(lua_State *L)
{
    lua_pushboolean(L, zl_tensor_requires_grad(zlb_check_tensor_any(L, 1)));
    return 1;
}

static int set_requires_grad(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    luaL_checkany(L, 2);
    if (zl_tensor_set_requires_grad(t, lua_toboolean(L, 2))) return zlb_raise(L);
    return 0;
}

static int set_grad_dtype(lua_State *L)
{
    zl_tensor *t = zlb_check_tensor_any(L, 1);
    if (zl_tensor_set_grad_dtype(t, zlb_opt_dtype(L, 2, zl_tensor_dtype(t)))) return zlb_raise(L);
    return 0;
}

static int is_leaf(lua_State *L)
{
    lua_pushboolean(L, zl_tensor_is_leaf(zlb_check_tensor_any(L, 1)));
    return 1;
}

static int grad_fn(lua_State *L)
{
    const char *name = zl_tensor_grad_fn_name(zlb_check_tensor_any(L, 1));
    if (name) lua_pushstring(L, name);
    else lua_pushnil(L);
    return 1;
}

/* set_grad_enabled(on) -> previous */
static int set_grad_enabled(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_pushboolean(L, zl_grad_set_enabled(lua_toboolean(L, 1)));
    return 1;
}

static int is_grad_enabled(lua_State *L)
{
    lua_pushboolean(L, zl_grad_is_enabled());
    return 1;
}

void zlb_open_autograd(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"backward", backward}, {"grad", grad}, {"set_grad", set_grad},
        {"requires_grad", requires_grad}, {"set_requires_grad", set_requires_grad},
        {"set_grad_dtype", set_grad_dtype},
        {"is_leaf", is_leaf}, {"grad_fn", grad_fn}, {"set_grad_enabled", set_grad_enabled},
        {"is_grad_enabled", is_grad_enabled}, {"add_grad_ready_hook", add_grad_ready_hook},
        {"add_use_hook", add_use_hook}, {"remove_hook", remove_hook}, {"function_record", function_record},
        {"move_data", move_data},
        {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
