/* The Lua side of the fuzz targets (fuzz_lua.h): one zlua state per process,
 * the harness function kept in the registry, and Lua line coverage given to
 * libFuzzer through its extra-counters section. */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz.h"
#include "fuzz_lua.h"
#include "zlua/embed.h"

/* libFuzzer reads every counter in this section after each input as it reads
 * its own edge counters (Linux). A pair of lines run one after the other is
 * one counter, so that a new path through known lines counts too. */
#define LINE_COUNTERS (1 << 16)
__attribute__((section("__libfuzzer_extra_counters"), used)) static uint8_t line_counters[LINE_COUNTERS];

static zlua_state *state;
static lua_State *L;
static int harness_ref = LUA_NOREF;
static uintptr_t prev_line;

/* "S" gives the chunk's source string, which stays put while its functions
 * live: with the line number it names a line of Lua source. */
static void line_hook(lua_State *l, lua_Debug *ar)
{
    if (!lua_getinfo(l, "S", ar)) return;
    uintptr_t here = (uintptr_t)ar->source * 0x9E3779B1u ^ (uintptr_t)ar->currentline * 0x85EBCA6Bu;
    line_counters[(here ^ prev_line) % LINE_COUNTERS]++;
    prev_line = here >> 1;
}

static int traceback(lua_State *l)
{
    luaL_traceback(l, l, lua_tostring(l, 1), 1);
    return 1;
}

static void close_state(void) { zlua_close(state); }

void fuzz_lua_open(const char *name, const char *chunk, const char *arg)
{
    state = zlua_open();
    if (!state) fuzz_die("zlua_open: %s", zl_last_error());
    atexit(close_state);
    L = zlua_lua(state);
    lua_pushcfunction(L, traceback);
    if (luaL_loadbuffer(L, chunk, strlen(chunk), name) != LUA_OK) fuzz_die("%s", lua_tostring(L, -1));
    int nargs = arg ? 1 : 0;
    if (arg) lua_pushstring(L, arg);
    if (lua_pcall(L, nargs, 1, -2 - nargs) != LUA_OK) fuzz_die("%s", lua_tostring(L, -1));
    if (!lua_isfunction(L, -1)) fuzz_die("the harness chunk %s did not return a function", name);
    harness_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 1);
}

void fuzz_lua_run(const uint8_t *data, size_t size)
{
    lua_pushcfunction(L, traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, harness_ref);
    lua_pushlstring(L, (const char *)data, size);
    prev_line = 0;
    lua_sethook(L, line_hook, LUA_MASKLINE, 0);
    int rc = lua_pcall(L, 1, 0, -3);
    lua_sethook(L, NULL, 0, 0);
    if (rc != LUA_OK) fuzz_die("%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    /* What the input made is garbage now: collected here, so that libFuzzer's
     * per-input leak check sees as many frees as allocations. */
    lua_gc(L, LUA_GCCOLLECT);
}
