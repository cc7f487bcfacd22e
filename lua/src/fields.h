/* Private to the binding: a Lua value read as a C number, integer or boolean,
 * for option tables that fill engine structs (lr.c, optimizer.c). A value of
 * another type raises an error naming `where` (the object) and the key. */
#ifndef ZLB_FIELDS_H
#define ZLB_FIELDS_H

#include "binding.h"

static inline double zlb_number_at(lua_State *L, int idx, const char *where, const char *key)
{
    if (lua_type(L, idx) != LUA_TNUMBER)
        zlb_error(L, "%s: %s must be a number, got a %s", where, key, luaL_typename(L, idx));
    return lua_tonumber(L, idx);
}

/* An integral float (2e3, as JSON gives it) counts. */
static inline int64_t zlb_integer_at(lua_State *L, int idx, const char *where, const char *key)
{
    int ok = 0;
    int64_t v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &ok) : 0;
    if (!ok) zlb_error(L, "%s: %s must be an integer, got a %s", where, key, luaL_typename(L, idx));
    return v;
}

static inline bool zlb_boolean_at(lua_State *L, int idx, const char *where, const char *key)
{
    if (!lua_isboolean(L, idx)) zlb_error(L, "%s: %s must be true or false, got a %s", where, key, luaL_typename(L, idx));
    return lua_toboolean(L, idx);
}

#endif
