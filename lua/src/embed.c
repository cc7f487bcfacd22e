/* The embedding API of zlua/embed.h: a Lua state with the standard libraries
 * and the engine's modules, and scripts run in it with their errors (and a
 * traceback) reported through zl_error rather than printed or exited on. */
#include <stdlib.h>
#include <string.h>
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include "zlua/context.h"
#include "zlua/embed.h"
#include "repl.h"

struct zlua_state {
    lua_State *L;
    zl_context *ctx;           /* the state's own (see init.c) */
};

/* Whether the error was raised by zl.raise (the function that called
 * error, level 2 from this message handler): zlua's own refusal of the
 * user's input (a config key, a shape, an argument), whose message already
 * names the script's line. */
static bool raised_by_zlua(lua_State *L)
{
    lua_Debug ar;
    if (!lua_getstack(L, 2, &ar) || !lua_getinfo(L, "f", &ar)) return false;
    bool is = false;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) == LUA_TTABLE) {
        if (lua_getfield(L, -1, "zlua") == LUA_TTABLE) {
            lua_getfield(L, -1, "raise");
            is = lua_rawequal(L, -1, -4);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return is;
}

/* msg, with zlua.util.suggest's "did you mean" for a mistyped zlua name;
 * msg itself when the module cannot run. */
static const char *suggested(lua_State *L, const char *msg)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "zlua.util.suggest");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return msg;
    }
    lua_pushstring(L, msg);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
        lua_pop(L, 1);
        return msg;
    }
    return lua_tostring(L, -1);
}

int zlb_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg) msg = suggested(L, msg);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    /* The user's mistake is said in its one line; ZLUA_TRACEBACK=1 shows
     * where inside zlua it was found. */
    const char *want = getenv("ZLUA_TRACEBACK");
    if (raised_by_zlua(L) && !(want && *want && strcmp(want, "0") != 0)) {
        lua_pushstring(L, msg);
        return 1;
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Copies the message of a failed protected call into zl_error and restores
 * the stack, so the state stays usable after an error. */
/* The code for how the chunk failed: loading (a syntax error, a file that
 * cannot be read, no memory), or the chunk raising as it ran. */
static zl_status fail(lua_State *L, int top, const char *what, int lua_status)
{
    const char *msg = lua_tostring(L, -1);
    zl_status code = lua_status == LUA_ERRSYNTAX ? ZL_EFORMAT
                   : lua_status == LUA_ERRFILE  ? ZL_EIO
                   : lua_status == LUA_ERRMEM   ? ZL_ENOMEM
                                                : ZL_ESCRIPT;
    zl_status st = zl_error(code, "%s: %s", what, msg ? msg : "(error object is not a string)");
    lua_settop(L, top);
    return st;
}

static int open_libs(lua_State *L)
{
    luaL_openlibs(L);
    luaL_requiref(L, "zlua", luaopen_zlua, 0);
    lua_setglobal(L, "zl");
    lua_pushlightuserdata(L, zl_context_current());
    return 1;
}

zlua_state *zlua_open(void)
{
    zlua_state *s = malloc(sizeof *s);
    if (s == NULL) {
        zl_error(ZL_ENOMEM, "zlua_open: out of memory");
        return NULL;
    }
    s->L = luaL_newstate();
    if (s->L == NULL) {
        free(s);
        zl_error(ZL_ENOMEM, "zlua_open: cannot create a Lua state (out of memory)");
        return NULL;
    }
    zl_context *prev = zl_context_current();
    lua_pushcfunction(s->L, open_libs);
    int status = lua_pcall(s->L, 0, 1, 0);
    if (status != LUA_OK) {
        fail(s->L, 0, "zlua_open", status);
        lua_close(s->L);
        free(s);
        zl_context_set_current(prev);
        return NULL;
    }
    s->ctx = lua_touserdata(s->L, -1);
    lua_pop(s->L, 1);
    zl_context_set_current(prev);
    return s;
}

void zlua_close(zlua_state *s)
{
    if (s == NULL) return;
    zl_context *prev = zl_context_current();
    lua_close(s->L);
    zl_context_set_current(prev == s->ctx ? NULL : prev);
    free(s);
}

lua_State *zlua_lua(zlua_state *s) { return s ? s->L : NULL; }

/* Everything that may raise (building `arg`, pushing the arguments) runs
 * inside one protected call; the chunk itself runs in a nested one whose
 * handler adds the traceback, so load errors come back without one. */
typedef struct run_args {
    const char *path;          /* dofile: the script */
    const char *source;        /* dostring: the chunk */
    const char *name;
    int argc;
    const char *const *argv;
    int status;                /* [out] the load's or the run's Lua status */
} run_args;

static int run_protected(lua_State *L)
{
    run_args *a = lua_touserdata(L, 1);
    lua_pushcfunction(L, zlb_traceback);
    int handler = lua_gettop(L);
    int status;
    if (a->path) {
        lua_createtable(L, a->argc, 1);
        lua_pushstring(L, a->path);
        lua_rawseti(L, -2, 0);
        for (int i = 0; i < a->argc; i++) {
            lua_pushstring(L, a->argv[i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setglobal(L, "arg");
        status = luaL_loadfile(L, a->path);
    } else {
        const char *chunkname = lua_pushfstring(L, "=%s", a->name ? a->name : "(string)");
        status = luaL_loadbuffer(L, a->source, strlen(a->source), chunkname);
        lua_remove(L, -2);   /* the name; the chunk or the message stays */
    }
    a->status = status;
    if (status != LUA_OK) return lua_error(L);
    luaL_checkstack(L, a->argc, "too many script arguments");
    for (int i = 0; i < a->argc; i++) lua_pushstring(L, a->argv[i]);
    if ((a->status = lua_pcall(L, a->argc, 0, handler)) != LUA_OK) return lua_error(L);
    return 0;
}

static zl_status run(zlua_state *s, run_args *a, const char *what)
{
    lua_State *L = s->L;
    int top = lua_gettop(L);
    zl_context *prev = zl_context_current();
    lua_pushcfunction(L, run_protected);
    lua_pushlightuserdata(L, a);
    a->status = LUA_ERRRUN;
    int status = lua_pcall(L, 1, 0, 0);
    zl_status st = status == LUA_OK ? ZL_OK : fail(L, top, what, status == LUA_ERRMEM ? status : a->status);
    zl_context_set_current(prev);
    lua_settop(L, top);
    return st;
}

zl_status zlua_dofile(zlua_state *s, const char *path, int argc, const char *const *argv)
{
    if (s == NULL || path == NULL)
        return zl_error(ZL_EINVAL, "zlua_dofile: %s is NULL", s ? "path" : "state");
    if (argc < 0 || (argc > 0 && argv == NULL))
        return zl_error(ZL_EINVAL, "zlua_dofile: argc is %d with argv %s", argc, argv ? "set" : "NULL");
    run_args a = {.path = path, .argc = argc, .argv = argv};
    return run(s, &a, "zlua_dofile");
}

zl_status zlua_dostring(zlua_state *s, const char *source, const char *name)
{
    if (s == NULL || source == NULL)
        return zl_error(ZL_EINVAL, "zlua_dostring: %s is NULL", s ? "source" : "state");
    run_args a = {.source = source, .name = name};
    return run(s, &a, "zlua_dostring");
}
