/* The zlua REPL: expression values printed, chunks continued over lines as
 * lua does, and Ctrl-C that stops the running chunk without leaving the
 * prompt. Lines come from the terminal's editor (repl_line.h) or a pipe. */
#define _GNU_SOURCE   /* getline */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lua.h>
#include <lauxlib.h>
#include "repl.h"
#include "repl_line.h"

#define PROMPT "> "
#define PROMPT_MORE ">> "
enum { CHUNK_EOF = -1, CHUNK_INTERRUPTED = -2 };

zlx_line_status zlx_line_plain(char **out)
{
    size_t cap = 0;
    *out = NULL;
    ssize_t n = getline(out, &cap, stdin);
    if (n < 0) {
        free(*out);
        *out = NULL;
        return ZLX_LINE_EOF;
    }
    if (n > 0 && (*out)[n - 1] == '\n') (*out)[n - 1] = '\0';
    return ZLX_LINE_OK;
}

static zlx_line_status read_line(bool tty, const char *prompt, char **out)
{
    return tty ? zlx_line_read(prompt, out) : zlx_line_plain(out);
}

/* ---- evaluating ---- */

/* A syntax error at the very end of the input means the chunk is not
 * finished yet rather than wrong. */
static bool incomplete(lua_State *L, int status)
{
    static const char mark[] = "<eof>";
    const size_t mark_len = sizeof mark - 1;
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    return status == LUA_ERRSYNTAX && msg != NULL && len >= mark_len &&
           memcmp(msg + len - mark_len, mark, mark_len) == 0;
}

/* Pushes the next chunk compiled (LUA_OK) or its error message (the load
 * status), or returns CHUNK_EOF / CHUNK_INTERRUPTED with nothing pushed. A
 * line is tried first as `return <line>;` so that an expression prints its
 * value; otherwise lines are joined while the parser asks for more. */
static int read_chunk(lua_State *L, bool tty)
{
    char *line;
    zlx_line_status got = read_line(tty, PROMPT, &line);
    if (got != ZLX_LINE_OK) return got == ZLX_LINE_EOF ? CHUNK_EOF : CHUNK_INTERRUPTED;

    const char *expr = lua_pushfstring(L, "return %s;", line);
    int status = luaL_loadbuffer(L, expr, strlen(expr), "=stdin");
    if (status == LUA_OK) {
        lua_remove(L, -2);
        free(line);
        return LUA_OK;
    }
    lua_pop(L, 2);
    lua_pushstring(L, line);
    free(line);
    for (;;) {
        size_t len;
        const char *source = lua_tolstring(L, -1, &len);
        status = luaL_loadbuffer(L, source, len, "=stdin");
        if (status == LUA_OK || !incomplete(L, status)) break;
        got = read_line(tty, PROMPT_MORE, &line);
        if (got == ZLX_LINE_INTERRUPTED) {
            lua_pop(L, 2);
            return CHUNK_INTERRUPTED;
        }
        if (got == ZLX_LINE_EOF) break;   /* the unfinished chunk's error is shown */
        lua_pop(L, 1);
        lua_pushfstring(L, "%s\n%s", lua_tostring(L, -1), line);
        lua_remove(L, -2);
        free(line);
    }
    lua_remove(L, -2);   /* the source; the function or the message stays */
    return status;
}

/* Every value returned, as tostring shows it (tensors through the
 * binding's __tostring), tab-separated like print. */
static int print_values(lua_State *L)
{
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_tolstring(L, i, &len);
        if (i > 1) fputc('\t', stdout);
        fwrite(s, 1, len, stdout);
        lua_pop(L, 1);
    }
    fputc('\n', stdout);
    fflush(stdout);
    return 0;
}

static void print_error(lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    fflush(stdout);
    fprintf(stderr, "%s\n", msg ? msg : "(error object is not a string)");
    fflush(stderr);
}

void zlx_repl(lua_State *L)
{
    bool tty = isatty(STDIN_FILENO);
    if (tty) zlx_line_begin(L);
    int base = lua_gettop(L);
    for (;;) {
        int status = read_chunk(L, tty);
        if (status == CHUNK_EOF) break;
        if (status == CHUNK_INTERRUPTED) continue;
        if (status == LUA_OK && zlx_line_interrupted()) {
            /* Ctrl-C right after Enter, before the chunk ran: drop it */
            fputc('\n', stdout);
            lua_settop(L, base);
            continue;
        }
        if (status == LUA_OK) status = zlx_docall(L, 0, LUA_MULTRET);
        int nres = lua_gettop(L) - base;
        if (status == LUA_OK && nres > 0) {
            lua_pushcfunction(L, print_values);
            lua_insert(L, base + 1);
            status = zlx_docall(L, nres, 0);
        }
        if (status != LUA_OK) print_error(L);
        lua_settop(L, base);
    }
    if (tty) zlx_line_end();
}
