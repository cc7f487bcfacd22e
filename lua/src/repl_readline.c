/* The REPL's line editor on a terminal: readline editing, history kept in
 * ~/.zlua_history, tab completion that walks the Lua tables, and Ctrl-C that
 * clears the line. CMake builds it where readline is; repl_plain.c otherwise. */
#define _GNU_SOURCE   /* pipe2 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <readline/readline.h>
#include <readline/history.h>
#include <lua.h>
#include <lauxlib.h>
#include "repl_line.h"

#define HISTORY_LINES 1000
#define HISTORY_FILE "/.zlua_history"
/* How many __index tables completion follows (an instance, its class, the
 * class's base, ...); it bounds the walk should the chain loop. */
#define INDEX_DEPTH 8

/* Readline's hooks take no context pointer, so what they need is here: the
 * state completion walks, the history file, and the signals the prompt loop
 * waits for. Those may be handled on any thread (OpenBLAS and OpenMP keep
 * workers), so a handler also writes to a pipe that the prompt loop polls:
 * interrupting one thread's system call would not wake the loop. */
static lua_State *repl_L;
static char *history_path;
static volatile sig_atomic_t got_sigint, got_sigwinch;
static int wake_pipe[2] = {-1, -1};

static void wake_prompt(void)
{
    int saved = errno;
    ssize_t w = write(wake_pipe[1], "", 1);   /* full or absent: a wake is pending anyway */
    (void)w;
    errno = saved;
}

static void on_prompt_sigint(int sig)
{
    got_sigint = 1;
    wake_prompt();
}

static void on_sigwinch(int sig)
{
    got_sigwinch = 1;
    wake_prompt();
}

/* ---- history ---- */

static bool is_blank(const char *s)
{
    while (isspace((unsigned char)*s)) s++;
    return *s == '\0';
}

static void history_load(void)
{
    stifle_history(HISTORY_LINES);
    const char *home = getenv("HOME");
    if (home == NULL || home[0] == '\0') return;
    size_t size = strlen(home) + sizeof HISTORY_FILE;
    history_path = malloc(size);
    if (history_path == NULL) return;
    snprintf(history_path, size, "%s%s", home, HISTORY_FILE);
    read_history(history_path);
}

/* Each line goes to the file as it is typed, so a session that is killed
 * keeps its history and two sessions interleave rather than overwrite. A
 * file that cannot be written only means the history is not kept. */
static void history_remember(const char *line)
{
    if (is_blank(line)) return;
    HIST_ENTRY *last = history_get(history_base + history_length - 1);
    if (last != NULL && strcmp(last->line, line) == 0) return;
    add_history(line);
    if (history_path == NULL) return;
    int fd = open(history_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    close(fd);   /* append_history needs the file to exist */
    if (append_history(1, history_path) == 0) history_truncate_file(history_path, HISTORY_LINES);
}

/* ---- completion ---- */

typedef struct candidates {
    char **v;
    size_t n, cap;
} candidates;

static candidates found;     /* handed to readline by next_candidate */
static size_t found_next;

static const char *const keywords[] = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
    "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
};

static void add_candidate(candidates *c, const char *head, size_t head_len, const char *name, size_t len)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        char **v = realloc(c->v, cap * sizeof *v);
        if (v == NULL) return;
        c->v = v;
        c->cap = cap;
    }
    char *s = malloc(head_len + len + 1);
    if (s == NULL) return;
    memcpy(s, head, head_len);
    memcpy(s + head_len, name, len);
    s[head_len + len] = '\0';
    c->v[c->n++] = s;
}

static bool is_identifier(const char *s, size_t len)
{
    if (len == 0 || isdigit((unsigned char)s[0])) return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_') return false;
    return true;
}

/* Replaces the value on the top with the table its metatable's __index
 * holds, where a method lookup goes next; pops it and returns false when
 * there is none. Metatables are read raw: completing runs no Lua code. A
 * class whose __index is a function (tensors: methods, getters and numeric
 * indexing in one) can name its fields for completion in a __fields table. */
static bool next_index_table(lua_State *L)
{
    if (lua_getmetatable(L, -1)) {
        lua_pushliteral(L, "__index");
        if (lua_rawget(L, -2) != LUA_TTABLE) {
            lua_pop(L, 1);
            lua_pushliteral(L, "__fields");
            lua_rawget(L, -2);
        }
        lua_remove(L, -2);
        if (lua_istable(L, -1)) {
            lua_remove(L, -2);
            return true;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return false;
}

/* Pushes the k-th (from 1) table an instance keeps its fields in, as its
 * metatable's __fields_of names them (nn modules: {"_modules",
 * "_parameters", "_buffers"}, which their __index function reads), and
 * returns true; pushes nothing and returns false past the last. Raw reads. */
static bool push_field_store(lua_State *L, int k)
{
    int top = lua_gettop(L);   /* the instance */
    if (!lua_istable(L, top) || !lua_getmetatable(L, top)) return false;
    lua_pushliteral(L, "__fields_of");
    if (lua_rawget(L, -2) == LUA_TTABLE && lua_rawgeti(L, -1, k) == LUA_TSTRING && lua_rawget(L, top) == LUA_TTABLE) {
        lua_replace(L, top + 1);   /* the store where the metatable was */
        lua_settop(L, top + 1);
        return true;
    }
    lua_settop(L, top);
    return false;
}

/* Replaces the value on the top with its field `key` as indexing would find
 * it through __index tables; pops it and returns false when there is none. */
static bool walk_field(lua_State *L, const char *key, size_t len)
{
    for (int depth = 0; depth < INDEX_DEPTH; depth++) {
        if (lua_istable(L, -1)) {
            lua_pushlstring(L, key, len);
            if (lua_rawget(L, -2) != LUA_TNIL) {
                lua_remove(L, -2);
                return true;
            }
            lua_pop(L, 1);
        }
        for (int k = 1; push_field_store(L, k); k++) {
            lua_pushlstring(L, key, len);
            if (lua_rawget(L, -2) != LUA_TNIL) {
                lua_remove(L, -2);
                lua_remove(L, -2);
                return true;
            }
            lua_pop(L, 2);
        }
        if (!next_index_table(L)) return false;
    }
    lua_pop(L, 1);
    return false;
}

/* Adds head..key for every identifier key starting with prefix in the table
 * on the top (left there). */
static void collect_keys(lua_State *L, candidates *c, const char *head, size_t head_len, const char *prefix,
                         size_t prefix_len)
{
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) continue;
        size_t len;
        const char *key = lua_tolstring(L, -1, &len);
        if (len >= prefix_len && memcmp(key, prefix, prefix_len) == 0 && is_identifier(key, len))
            add_candidate(c, head, head_len, key, len);
    }
}

/* Adds head..key for every identifier key starting with prefix in the value
 * on the top, the tables its metatable's __fields_of names, and its __index
 * tables; pops the value. */
static void collect_fields(lua_State *L, candidates *c, const char *head, size_t head_len,
                           const char *prefix, size_t prefix_len)
{
    for (int depth = 0; depth < INDEX_DEPTH; depth++) {
        if (lua_istable(L, -1)) collect_keys(L, c, head, head_len, prefix, prefix_len);
        for (int k = 1; push_field_store(L, k); k++) {
            collect_keys(L, c, head, head_len, prefix, prefix_len);
            lua_pop(L, 1);
        }
        if (!next_index_table(L)) return;
    }
    lua_pop(L, 1);
}

/* "zl.ra" walks _G.zl and offers its fields starting with "ra"; a word
 * without '.' or ':' offers globals and keywords. */
static int complete_protected(lua_State *L)
{
    const char *text = lua_touserdata(L, 1);
    candidates *c = lua_touserdata(L, 2);
    const char *sep = NULL;
    for (const char *p = text; *p; p++)
        if (*p == '.' || *p == ':') sep = p;
    const char *prefix = sep ? sep + 1 : text;
    size_t prefix_len = strlen(prefix);
    lua_pushglobaltable(L);
    for (const char *p = text; sep != NULL && p <= sep; p++) {
        size_t len = strcspn(p, ".:");
        if (!walk_field(L, p, len)) return 0;
        p += len;
    }
    collect_fields(L, c, text, (size_t)(prefix - text), prefix, prefix_len);
    if (sep == NULL) {
        for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
            if (strncmp(keywords[i], prefix, prefix_len) == 0)
                add_candidate(c, "", 0, keywords[i], strlen(keywords[i]));
    }
    return 0;
}

static char *next_candidate(const char *text, int state)
{
    if (state == 0) found_next = 0;
    return found_next < found.n ? found.v[found_next++] : NULL;   /* readline frees it */
}

static char **complete(const char *text, int start, int end)
{
    rl_attempted_completion_over = 1;    /* never fall back to file names */
    rl_completion_suppress_append = 1;   /* a field or "(" follows, not a space */
    lua_State *L = repl_L;
    int top = lua_gettop(L);
    found = (candidates){0};
    lua_pushcfunction(L, complete_protected);
    lua_pushlightuserdata(L, (void *)text);
    lua_pushlightuserdata(L, &found);
    lua_pcall(L, 2, 0, 0);   /* only a memory error can fail it: fewer candidates */
    lua_settop(L, top);
    char **matches = rl_completion_matches(text, next_candidate);
    while (found_next < found.n) free(found.v[found_next++]);
    free(found.v);
    found = (candidates){0};
    return matches;
}

/* ---- reading lines ---- */

static char *accepted;
static bool accept_done;

static void on_line(char *line)
{
    accepted = line;
    accept_done = true;
    rl_callback_handler_remove();   /* or readline shows the prompt again at once */
}

static void abandon_line(void)
{
    rl_free_line_state();
    rl_callback_sigcleanup();
    rl_echo_signal_char(SIGINT);
    rl_replace_line("", 0);
    rl_crlf();
    rl_callback_handler_remove();
    fflush(rl_outstream);
}

/* Readline's callback interface rather than readline(): this loop owns the
 * wait, so Ctrl-C at the prompt can drop the line (and an unfinished chunk)
 * instead of killing the process. */
static zlx_line_status read_tty(const char *prompt, char **out)
{
    accepted = NULL;
    accept_done = false;
    rl_callback_handler_install(prompt, on_line);
    zlx_line_status status = ZLX_LINE_OK;
    while (!accept_done) {
        if (got_sigint) {
            got_sigint = 0;
            abandon_line();
            status = ZLX_LINE_INTERRUPTED;
            break;
        }
        if (got_sigwinch) {
            got_sigwinch = 0;
            rl_resize_terminal();
        }
        struct pollfd pfd[2] = {
            {.fd = fileno(rl_instream), .events = POLLIN},
            {.fd = wake_pipe[0], .events = POLLIN},
        };
        int n = poll(pfd, 2, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 || (pfd[0].revents & (POLLERR | POLLNVAL))) {
            rl_callback_handler_remove();
            break;
        }
        if (pfd[1].revents & POLLIN) {
            char drain[64];
            while (read(wake_pipe[0], drain, sizeof drain) > 0) {}
        }
        if (pfd[0].revents & (POLLIN | POLLHUP)) rl_callback_read_char();
    }
    if (status == ZLX_LINE_OK && accepted == NULL) status = ZLX_LINE_EOF;
    *out = accepted;
    return status;
}

zlx_line_status zlx_line_read(const char *prompt, char **out)
{
    zlx_line_status status = read_tty(prompt, out);
    if (status == ZLX_LINE_OK) history_remember(*out);
    return status;
}

bool zlx_line_interrupted(void)
{
    bool was = got_sigint;
    got_sigint = 0;
    return was;
}

/* ---- the terminal ---- */

/* The handlers in place before zlx_line_begin, put back by zlx_line_end. */
static struct sigaction old_sigint, old_sigwinch;

void zlx_line_begin(lua_State *L)
{
    repl_L = L;
    rl_readline_name = "zlua";   /* for $if zlua in ~/.inputrc */
    rl_instream = stdin;
    rl_outstream = stdout;
    rl_catch_signals = 0;        /* read_tty handles Ctrl-C and resizes itself */
    rl_catch_sigwinch = 0;
    rl_attempted_completion_function = complete;
    rl_basic_word_break_characters = " \t\n\"\\'><=;+-*/%^~#&|,(){}[]";
    rl_completer_word_break_characters = rl_basic_word_break_characters;
    history_load();
    if (pipe2(wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0) wake_pipe[0] = wake_pipe[1] = -1;
    struct sigaction act = {.sa_handler = on_prompt_sigint};
    sigemptyset(&act.sa_mask);
    sigaction(SIGINT, &act, &old_sigint);
    act.sa_handler = on_sigwinch;
    sigaction(SIGWINCH, &act, &old_sigwinch);
}

void zlx_line_end(void)
{
    sigaction(SIGINT, &old_sigint, NULL);
    sigaction(SIGWINCH, &old_sigwinch, NULL);
    got_sigint = got_sigwinch = 0;
    if (wake_pipe[0] >= 0) {
        close(wake_pipe[0]);
        close(wake_pipe[1]);
        wake_pipe[0] = wake_pipe[1] = -1;
    }
    free(history_path);
    history_path = NULL;
    repl_L = NULL;
}
