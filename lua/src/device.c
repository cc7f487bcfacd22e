/* The devices from Lua: how many there are, memory figures of a device's
 * caching allocator, synchronising; zlua.cuda (lua/zlua/init.lua) is built on
 * these. Moving a tensor is to_device in tensor.c. */
#include "binding.h"

static void check_device(lua_State *L, int idx, zl_device *kind, int *index)
{
    if (zl_device_parse(luaL_checkstring(L, idx), kind, index)) zlb_raise(L);
}

/* device_count("cuda"): 0 and the reason when there is none. */
static int device_count(lua_State *L)
{
    zl_device kind;
    int index;
    check_device(L, 1, &kind, &index);
    zl_clear_error();
    int n = zl_device_count(kind);
    lua_pushinteger(L, n);
    if (n) return 1;
    lua_pushstring(L, zl_last_error());
    return 2;
}

/* device_check("cuda:1"): raises the reason a device cannot be used. */
static int device_check(lua_State *L)
{
    zl_device kind;
    int index;
    check_device(L, 1, &kind, &index);
    if (zl_device_check(kind, index)) return zlb_raise(L);
    return 0;
}

/* device_memory("cuda:0" [, "params"]) -> current, peak (bytes charged to
 * tensors; without a category, all of them together). */
static int device_memory(lua_State *L)
{
    zl_device kind;
    int index;
    zl_mem_category cat = ZL_MEM_COUNT;
    check_device(L, 1, &kind, &index);
    if (!lua_isnoneornil(L, 2) && zl_mem_category_from_name(luaL_checkstring(L, 2), &cat)) return zlb_raise(L);
    zl_mem_stats st = zl_device_mem_stats(kind, index, cat);
    lua_pushinteger(L, st.current);
    lua_pushinteger(L, st.peak);
    return 2;
}

static int device_reserved(lua_State *L)
{
    zl_device kind;
    int index;
    check_device(L, 1, &kind, &index);
    lua_pushinteger(L, zl_device_mem_reserved(kind, index));
    return 1;
}

static int device_empty_cache(lua_State *L)
{
    zl_device kind;
    int index;
    check_device(L, 1, &kind, &index);
    if (zl_device_empty_cache(kind, index)) return zlb_raise(L);
    return 0;
}

static int device_synchronize(lua_State *L)
{
    zl_device kind;
    int index;
    check_device(L, 1, &kind, &index);
    if (zl_device_synchronize(kind, index)) return zlb_raise(L);
    return 0;
}

void zlb_open_device(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"device_count", device_count}, {"device_check", device_check}, {"device_memory", device_memory},
        {"device_reserved", device_reserved}, {"device_empty_cache", device_empty_cache},
        {"device_synchronize", device_synchronize}, {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
