/* The binding of engine/io: zl.read_csv(path [, skip_header]) reads a numeric
 * CSV file, plain or gzip, into an f32 tensor [rows, cols]; a missing or
 * corrupt file raises the engine's message (file, line, field). */
#include "binding.h"

static int l_read_csv(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    bool skip_header = lua_toboolean(L, 2);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_read_csv(path, skip_header);
    return zlb_result(L, *slot);
}

/* Adds the io functions to the core table on top of the stack. */
void zlb_open_io(lua_State *L)
{
    lua_pushcfunction(L, l_read_csv);
    lua_setfield(L, -2, "read_csv");
}
