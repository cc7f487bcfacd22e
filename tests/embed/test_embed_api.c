/* The embedding API of zlua/embed.h: a state with `zl` preset, scripts and
 * chunks run with `arg` and `...`, and every failure reported through
 * zl_last_error (with a traceback) with the state left usable. */
#include <stdlib.h>
#include <unistd.h>
#include <lua.h>
#include "harness.h"
#include "zlua/embed.h"

/* Writes `text` to a fresh file under /tmp; the caller unlinks and frees. */
static char *temp_script(const char *text)
{
    char *path = strdup("/tmp/zlua_embed_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return path;
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) zt_fail(__FILE__, __LINE__, "cannot write %s", path);
    close(fd);
    return path;
}

TEST(open_presets_zl)
{
    zlua_state *s = zlua_open();
    CHECK(s != NULL);
    if (!s) return;
    CHECK(zlua_lua(s) != NULL);
    CHECK(zlua_dostring(s, "assert(type(zl) == 'table' and zl == require 'zlua')", "check") == ZL_OK);
    CHECK(zlua_dostring(s, "assert(string and table and io and os and math and utf8)", "libs") == ZL_OK);
    CHECK(zlua_dostring(s, "assert(zl.randn(2, 3):size(1) == 2)", "tensor") == ZL_OK);
    zlua_close(s);
}

TEST(close_and_lua_accept_null)
{
    zlua_close(NULL);
    CHECK(zlua_lua(NULL) == NULL);
}

TEST(dostring_errors_carry_message_and_traceback)
{
    zlua_state *s = zlua_open();
    if (!s) return;
    lua_State *L = zlua_lua(s);
    int top = lua_gettop(L);

    CHECK(zlua_dostring(s, "local function f() error('boom') end\nf()", "mychunk") == ZL_ESCRIPT);
    CHECK(strstr(zl_last_error(), "zlua_dostring: mychunk:1: boom") != NULL);
    CHECK(strstr(zl_last_error(), "stack traceback") != NULL);
    CHECK(strstr(zl_last_error(), "mychunk:2: in main chunk") != NULL);
    CHECK(lua_gettop(L) == top);

    CHECK_ERR(zlua_dostring(s, "x = = 1", "syn"), "syn:1:");
    CHECK(zlua_dostring(s, "x = = 1", "syn") == ZL_EFORMAT);
    CHECK_ERR(zlua_dostring(s, "error('unnamed')", NULL), "(string):1: unnamed");
    CHECK_ERR(zlua_dostring(s, "error({})", "obj"), "(error object is a table value)");
    CHECK_ERR(zlua_dostring(s, "error(setmetatable({}, {__tostring = function() return 'custom' end}))", "obj"),
              "custom");
    CHECK(lua_gettop(L) == top);

    /* the state is still good after all that */
    CHECK(zlua_dostring(s, "ok_after_errors = 42", "after") == ZL_OK);
    lua_getglobal(L, "ok_after_errors");
    CHECK(lua_tointeger(L, -1) == 42);
    lua_pop(L, 1);
    zlua_close(s);
}

TEST(dostring_bad_arguments)
{
    zlua_state *s = zlua_open();
    if (!s) return;
    CHECK_ERR(zlua_dostring(NULL, "x = 1", "n"), "zlua_dostring: state is NULL");
    CHECK(zlua_dostring(NULL, "x = 1", "n") == ZL_EINVAL);
    CHECK_ERR(zlua_dostring(s, NULL, "n"), "zlua_dostring: source is NULL");
    zlua_close(s);
}

TEST(dofile_sets_arg_and_varargs)
{
    zlua_state *s = zlua_open();
    if (!s) return;
    char *path = temp_script(
        "local n = select('#', ...)\n"
        "seen = table.concat({arg[0] == SCRIPT and 'path' or tostring(arg[0]), tostring(arg[1]),\n"
        "                     tostring(arg[2]), #arg, n, ...}, ',')\n");
    lua_State *L = zlua_lua(s);
    lua_pushstring(L, path);
    lua_setglobal(L, "SCRIPT");
    const char *args[] = {"a", "b"};
    CHECK(zlua_dofile(s, path, 2, args) == ZL_OK);
    lua_getglobal(L, "seen");
    const char *seen = lua_tostring(L, -1);
    CHECK(seen != NULL && strcmp(seen, "path,a,b,2,2,a,b") == 0);
    if (seen && strcmp(seen, "path,a,b,2,2,a,b") != 0) fprintf(stderr, "  seen = %s\n", seen);
    lua_pop(L, 1);

    CHECK(zlua_dofile(s, path, 0, NULL) == ZL_OK);
    lua_getglobal(L, "seen");
    CHECK(lua_tostring(L, -1) && strcmp(lua_tostring(L, -1), "path,nil,nil,0,0") == 0);
    lua_pop(L, 1);
    unlink(path);
    free(path);
    zlua_close(s);
}

TEST(dofile_errors)
{
    zlua_state *s = zlua_open();
    if (!s) return;
    lua_State *L = zlua_lua(s);
    int top = lua_gettop(L);

    CHECK_ERR(zlua_dofile(s, "/nonexistent/zlua/script.lua", 0, NULL), "cannot open /nonexistent/zlua/script.lua");
    CHECK(zlua_dofile(s, "/nonexistent/zlua/script.lua", 0, NULL) == ZL_EIO);

    char *path = temp_script("local t = nil\n\nreturn t.field\n");
    CHECK_ERR(zlua_dofile(s, path, 0, NULL), ":3: attempt to index a nil value");
    CHECK(zlua_dofile(s, path, 0, NULL) == ZL_ESCRIPT);
    CHECK(strstr(zl_last_error(), path) != NULL);
    CHECK(strstr(zl_last_error(), "stack traceback") != NULL);
    unlink(path);
    free(path);

    path = temp_script("x = \n");
    CHECK_ERR(zlua_dofile(s, path, 0, NULL), ":2: unexpected symbol near <eof>");
    CHECK(zlua_dofile(s, path, 0, NULL) == ZL_EFORMAT);
    unlink(path);
    free(path);

    CHECK_ERR(zlua_dofile(NULL, "x.lua", 0, NULL), "zlua_dofile: state is NULL");
    CHECK_ERR(zlua_dofile(s, NULL, 0, NULL), "zlua_dofile: path is NULL");
    CHECK_ERR(zlua_dofile(s, "x.lua", -1, NULL), "zlua_dofile: argc is -1");
    CHECK_ERR(zlua_dofile(s, "x.lua", 2, NULL), "zlua_dofile: argc is 2 with argv NULL");
    CHECK(lua_gettop(L) == top);
    zlua_close(s);
}

/* Lua's allocator, refusing to grow past `left` bytes more once armed. */
typedef struct capped {
    lua_Alloc f;
    void *ud;
    long long left;
} capped;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    capped *c = ud;
    size_t old = ptr ? osize : 0;
    if (nsize > old && (long long)(nsize - old) > c->left) return NULL;
    void *p = c->f(c->ud, ptr, osize, nsize);
    if (p || nsize == 0) c->left -= (long long)nsize - (long long)old;
    return p;
}

/* A chunk that runs out of memory is ZL_ENOMEM, and the state stays usable. */
TEST(out_of_memory_is_enomem)
{
    zlua_state *s = zlua_open();
    if (!s) return;
    lua_State *L = zlua_lua(s);
    capped c = {.left = 64 << 20};
    c.f = lua_getallocf(L, &c.ud);
    lua_setallocf(L, capped_alloc, &c);
    zl_clear_error();
    CHECK(zlua_dostring(s, "local t = {} for i = 1, 1e9 do t[i] = i end", "grow") == ZL_ENOMEM);
    CHECK(strstr(zl_last_error(), "not enough memory") != NULL);
    lua_gc(L, LUA_GCCOLLECT);
    CHECK(zlua_dostring(s, "assert(1 + 1 == 2)", "after") == ZL_OK);
    lua_setallocf(L, c.f, c.ud);
    zlua_close(s);
}

TEST(states_are_independent)
{
    zlua_state *a = zlua_open(), *b = zlua_open();
    if (!a || !b) {
        CHECK(a && b);
        zlua_close(a);
        zlua_close(b);
        return;
    }
    CHECK(zlua_dostring(a, "only_in_a = true", "a") == ZL_OK);
    CHECK(zlua_dostring(b, "assert(only_in_a == nil)", "b") == ZL_OK);
    zlua_close(a);
    CHECK(zlua_dostring(b, "assert(zl.zeros(3):sum():item() == 0)", "b") == ZL_OK);
    zlua_close(b);
}
