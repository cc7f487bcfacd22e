/* The zlua REPL driven through a pseudo-terminal as a person would drive it:
 * printing, multi-line input, errors, Ctrl-C at the prompt and during a loop,
 * completion, Ctrl-D, and history carried to a second session.
 * Usage: repl_pty <path to zlua>. Every read has a deadline. */
#define _GNU_SOURCE   /* memmem */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A check waits only until what it expects shows, so these bound a failure's
 * wait, not a passing run. Under the sanitizers beside the whole suite on two
 * cores, a Ctrl-C reached the REPL more than 5 s after it was typed, together
 * with the next line. */
#define TIMEOUT_MS 30000
#define START_TIMEOUT_MS 60000

typedef struct session {
    pid_t pid;
    int fd;
    bool closed;       /* the child closed the terminal */
    char out[1 << 16]; /* what the terminal showed, oldest dropped first */
    size_t len;
    size_t seen;       /* expect() looks after this offset */
} session;

static const char *zlua_path;
static char home[64];
static int passed, failed;

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits up to `ms` for output and appends it; false once the terminal has
 * closed or nothing came in time. */
static bool read_more(session *s, long ms)
{
    if (s->closed) return false;
    struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
    int n = poll(&pfd, 1, (int)(ms < 0 ? 0 : ms));
    if (n <= 0) return false;
    if (s->len + 4096 > sizeof s->out) {
        size_t drop = sizeof s->out / 2;
        memmove(s->out, s->out + drop, s->len - drop);
        s->len -= drop;
        s->seen = s->seen > drop ? s->seen - drop : 0;
    }
    ssize_t got = read(s->fd, s->out + s->len, 4096);
    if (got <= 0) {   /* EIO: the child side is gone */
        s->closed = true;
        return false;
    }
    s->len += (size_t)got;
    return true;
}

/* The terminal's text since `from`, control characters escaped. */
static void dump(const session *s, size_t from)
{
    if (s->len > from + 3000) from = s->len - 3000;
    fprintf(stderr, "---- terminal showed:\n");
    for (size_t i = from; i < s->len; i++) {
        unsigned char c = (unsigned char)s->out[i];
        if (c == '\n') fputs("\\n\n", stderr);
        else if (c == '\r') fputs("\\r", stderr);
        else if (c < 32 || c == 127) fprintf(stderr, "\\x%02x", c);
        else fputc(c, stderr);
    }
    fprintf(stderr, "\n----\n");
}

static void check(session *s, bool ok, const char *what, size_t from)
{
    if (ok) {
        passed++;
        return;
    }
    failed++;
    fprintf(stderr, "FAIL: %s\n", what);
    if (s) dump(s, from);
}

/* Finds `needle` after s->seen within the deadline and moves past it. */
static bool expect(session *s, const char *needle, long timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    size_t n = strlen(needle);
    for (;;) {
        char *hit = memmem(s->out + s->seen, s->len - s->seen, needle, n);
        if (hit) {
            s->seen = (size_t)(hit - s->out) + n;
            return true;
        }
        if (!read_more(s, deadline - now_ms()) && (s->closed || now_ms() >= deadline)) return false;
    }
}

/* The primary prompt "> ", told apart from the continuation ">> ". */
static bool expect_prompt(session *s, long timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    for (;;) {
        for (size_t i = s->seen; i + 1 < s->len; i++) {
            if (s->out[i] == '>' && s->out[i + 1] == ' ' && (i == 0 || s->out[i - 1] != '>')) {
                s->seen = i + 2;
                return true;
            }
        }
        if (!read_more(s, deadline - now_ms()) && (s->closed || now_ms() >= deadline)) return false;
    }
}

static void send(session *s, const char *keys)
{
    size_t n = strlen(keys);
    while (n > 0) {
        ssize_t w = write(s->fd, keys, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        keys += w;
        n -= (size_t)w;
    }
}

/* Types a line and waits for it to be echoed and entered. */
static bool type_line(session *s, const char *line)
{
    char buf[512];
    send(s, line);
    send(s, "\r");
    snprintf(buf, sizeof buf, "%s\r\n", line);
    return expect(s, buf, TIMEOUT_MS);
}

/* Ctrl-C at the prompt: waits for its echo, then for the fresh prompt (a
 * prompt redrawn after a completion listing must not be taken for it). */
static bool interrupt_prompt(session *s)
{
    send(s, "\x03");
    return expect(s, "^C", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
}

static bool start(session *s, const char *home_dir)
{
    memset(s, 0, sizeof *s);
    struct winsize ws = {.ws_row = 40, .ws_col = 200};
    s->pid = forkpty(&s->fd, NULL, NULL, &ws);
    if (s->pid < 0) {
        perror("forkpty");
        return false;
    }
    if (s->pid == 0) {
        setenv("HOME", home_dir, 1);
        setenv("TERM", "xterm", 1);
        setenv("INPUTRC", "/dev/null", 1);   /* no site key bindings */
        execl(zlua_path, "zlua", (char *)NULL);
        perror("exec zlua");
        _exit(127);
    }
    return true;
}

/* Reads to the end of output and reaps the child; -1 if it outlives the
 * deadline (it is killed then). */
static int finish(session *s, long timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    int status;
    for (;;) {
        pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid) break;
        if (now_ms() >= deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            close(s->fd);
            return -1;
        }
        if (!read_more(s, 50)) sleep_ms(10);
    }
    while (read_more(s, 0)) {}
    close(s->fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    if (buf) fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    return buf;
}

static int count_lines_equal(const char *text, const char *line)
{
    int n = 0;
    size_t len = strlen(line);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        if (l == len && memcmp(p, line, len) == 0) n++;
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

static void first_session(void)
{
    session *s = calloc(1, sizeof *s);
    if (!s || !start(s, home)) {
        check(NULL, false, "start the first session", 0);
        free(s);
        return;
    }
    size_t mark = 0;
    check(s, expect(s, "zlua ", START_TIMEOUT_MS) && expect_prompt(s, START_TIMEOUT_MS),
          "banner and first prompt", mark);

    /* a tensor, printed through its __tostring */
    mark = s->seen;
    bool ok = type_line(s, "x = zl.randn(2, 3)") && expect_prompt(s, TIMEOUT_MS) &&
              type_line(s, "x") && expect(s, "2x3", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "x = zl.randn(2, 3) then x prints a tensor whose footer says 2x3", mark);

    /* several values, tab-separated */
    mark = s->seen;
    ok = type_line(s, "1 + 1, 'two'") && expect(s, "2\ttwo", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "an expression list prints every value", mark);

    /* a function typed over three lines */
    mark = s->seen;
    ok = type_line(s, "function times7(a)") && expect(s, ">> ", TIMEOUT_MS) &&
         type_line(s, "  return a * 7") && expect(s, ">> ", TIMEOUT_MS) &&
         type_line(s, "end") && expect_prompt(s, TIMEOUT_MS) &&
         type_line(s, "times7(6)") && expect(s, "42", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "a function defined over 3 lines, then called", mark);

    /* an error: the message, then the prompt again */
    mark = s->seen;
    ok = type_line(s, "error('bo' .. 'om')") && expect(s, "stdin:1: boom", TIMEOUT_MS) &&
         expect_prompt(s, TIMEOUT_MS) && type_line(s, "print('still ' .. 'here')") &&
         expect(s, "still here", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "an error prints its message and the REPL goes on", mark);

    /* Ctrl-C at the prompt drops the half-typed line */
    mark = s->seen;
    send(s, "abc");
    ok = expect(s, "abc", TIMEOUT_MS);
    ok = interrupt_prompt(s) && ok && type_line(s, "print('after' .. 'C')") &&
         expect(s, "afterC", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "Ctrl-C at the prompt gives a fresh prompt and an empty line", mark);

    /* Ctrl-C in a continuation drops the unfinished chunk */
    mark = s->seen;
    ok = type_line(s, "for i = 1, 3 do") && expect(s, ">> ", TIMEOUT_MS);
    ok = interrupt_prompt(s) && ok && type_line(s, "print('fresh' .. 'chunk')") &&
         expect(s, "freshchunk", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "Ctrl-C at the continuation prompt drops the chunk", mark);

    /* Ctrl-C during a loop that never ends */
    mark = s->seen;
    ok = type_line(s, "while true do end");
    sleep_ms(300);
    send(s, "\x03");
    ok = ok && expect(s, "interrupted!", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS) &&
         type_line(s, "print('alive' .. 'again')") && expect(s, "aliveagain", TIMEOUT_MS) &&
         expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "Ctrl-C stops a running loop and the prompt comes back", mark);

    /* the same, a second time: the handler is in place again */
    mark = s->seen;
    ok = type_line(s, "local n = 0; while true do n = n + 1 end");
    sleep_ms(300);
    send(s, "\x03");
    ok = ok && expect(s, "interrupted!", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "a second Ctrl-C during a second loop interrupts it too", mark);

    /* completion: a global, a library field, a field of zl */
    mark = s->seen;
    send(s, "prin\t");
    ok = expect(s, "print", TIMEOUT_MS);
    ok = ok && type_line(s, "('tab' .. 'ok')") && expect(s, "tabok", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "prin<TAB> completes to print", mark);
    mark = s->seen;
    send(s, "string.up\t");
    ok = expect(s, "string.upper", TIMEOUT_MS);
    ok = ok && type_line(s, "('ab')") && expect(s, "AB", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "string.up<TAB> completes to string.upper", mark);
    mark = s->seen;
    send(s, "zl.ran\t\t\t");
    ok = expect(s, "zl.randn", TIMEOUT_MS);
    ok = interrupt_prompt(s) && ok;
    check(s, ok, "zl.ran<TAB><TAB><TAB> lists zl.randn", mark);
    mark = s->seen;
    ok = type_line(s, "obj = setmetatable({}, {__index = {gamma = 1, gammon = 2}})") && expect_prompt(s, TIMEOUT_MS);
    send(s, "obj:gam\t\t\t");
    ok = ok && expect(s, "obj:gammon", TIMEOUT_MS);
    ok = interrupt_prompt(s) && ok;
    check(s, ok, "completion after ':' follows the metatable's __index table", mark);
    mark = s->seen;
    ok = type_line(s, "fobj = setmetatable({}, {__index = rawget, __fields = {delta = 1, deltoid = 2}})") &&
         expect_prompt(s, TIMEOUT_MS);
    send(s, "fobj.del\t\t\t");
    ok = ok && expect(s, "fobj.deltoid", TIMEOUT_MS);
    ok = interrupt_prompt(s) && ok;
    check(s, ok, "completion uses __fields when __index is a function", mark);
    mark = s->seen;
    ok = type_line(s, "tx = zl.ones(2, 3)") && expect_prompt(s, TIMEOUT_MS);
    send(s, "tx:resha\t");
    ok = ok && expect(s, "tx:reshape", TIMEOUT_MS);
    ok = ok && type_line(s, "(3, 2):size()") && expect(s, "[3, 2]", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "tx:resha<TAB> completes a tensor's method", mark);
    mark = s->seen;
    send(s, "tx.is_le\t");
    ok = expect(s, "tx.is_leaf", TIMEOUT_MS);
    ok = ok && type_line(s, "") && expect(s, "true", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "tx.is_le<TAB> completes a tensor's read-only field", mark);
    mark = s->seen;
    ok = type_line(s, "nn = require 'zlua.nn'; net = nn.Sequential(nn.Linear(2, 4)); net['head'] = nn.Linear(4, 1)") &&
         expect_prompt(s, TIMEOUT_MS);
    send(s, "net.he\t");
    ok = ok && expect(s, "net.head", TIMEOUT_MS);
    send(s, ".wei\t");
    ok = ok && expect(s, ".weight", TIMEOUT_MS);   /* readline echoes what it adds after net.head */
    ok = ok && type_line(s, ":size()") && expect(s, "[1, 4]", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "net.he<TAB>.wei<TAB> completes a submodule and its parameter", mark);
    mark = s->seen;
    send(s, "zl.profil\t");
    ok = expect(s, "zl.profiling", TIMEOUT_MS);
    ok = ok && type_line(s, ".FlopsProfiler ~= nil") && expect(s, "true", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "zl.profil<TAB> completes a submodule not loaded yet", mark);
    mark = s->seen;
    send(s, "net:named_para\t");
    ok = expect(s, "net:named_parameters", TIMEOUT_MS);
    ok = interrupt_prompt(s) && ok;
    check(s, ok, "net:named_para<TAB> completes a method of the module's classes", mark);

    /* lines for the history: a blank one and a repeated one are not kept */
    mark = s->seen;
    ok = type_line(s, "") && expect_prompt(s, TIMEOUT_MS) &&
         type_line(s, "print('hist' .. 6*7)") && expect(s, "hist42", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS) &&
         type_line(s, "print('hist' .. 6*7)") && expect(s, "hist42", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "the last commands run", mark);

    mark = s->seen;
    send(s, "\x04");
    int status = finish(s, TIMEOUT_MS);
    check(s, status == 0, "Ctrl-D exits with status 0", mark);
    if (status != 0) fprintf(stderr, "exit status %d\n", status);
    free(s);
}

static void second_session(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/.zlua_history", home);
    char *text = read_text_file(path);
    check(NULL, text != NULL, "~/.zlua_history was written", 0);
    if (text) {
        check(NULL, count_lines_equal(text, "x = zl.randn(2, 3)") == 1, "the history holds x = zl.randn(2, 3)", 0);
        check(NULL, count_lines_equal(text, "function times7(a)") == 1 && count_lines_equal(text, "end") >= 1,
              "the history holds the lines of the multi-line function", 0);
        check(NULL, count_lines_equal(text, "print('hist' .. 6*7)") == 1, "a repeated line is kept once", 0);
        check(NULL, count_lines_equal(text, "") == 0, "blank lines are not kept", 0);
        if (failed) fprintf(stderr, "---- history file:\n%s----\n", text);
        free(text);
    }

    session *s = calloc(1, sizeof *s);
    if (!s || !start(s, home)) {
        check(NULL, false, "start the second session", 0);
        free(s);
        return;
    }
    size_t mark = 0;
    bool ok = expect_prompt(s, START_TIMEOUT_MS);
    send(s, "\x1b[A");
    sleep_ms(100);
    send(s, "\r");
    ok = ok && expect(s, "hist42", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "Up-arrow in a new session recalls the last command of the previous one", mark);
    mark = s->seen;
    send(s, "\x04");
    int status = finish(s, TIMEOUT_MS);
    check(s, status == 0, "the second session exits with status 0 on Ctrl-D", mark);
    free(s);
}

/* A home where the history cannot be written: the REPL works all the same
 * and says nothing about it. */
static void unwritable_home_session(void)
{
    session *s = calloc(1, sizeof *s);
    if (!s || !start(s, "/nonexistent/zlua-home")) {
        check(NULL, false, "start the session with an unwritable home", 0);
        free(s);
        return;
    }
    bool ok = expect_prompt(s, START_TIMEOUT_MS) && type_line(s, "print('no' .. 'home')") &&
              expect(s, "nohome\r\n", TIMEOUT_MS) && expect_prompt(s, TIMEOUT_MS);
    check(s, ok, "the REPL runs with a home it cannot write the history to", 0);
    check(s, memmem(s->out, s->len, "history", 7) == NULL, "nothing is said about the history", 0);
    send(s, "\x04");
    check(s, finish(s, TIMEOUT_MS) == 0, "and exits 0 on Ctrl-D", 0);
    free(s);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <path to zlua>\n", argv[0]);
        return 2;
    }
    zlua_path = argv[1];
    snprintf(home, sizeof home, "/tmp/zlua_pty_XXXXXX");
    if (!mkdtemp(home)) {
        perror("mkdtemp");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    first_session();
    second_session();
    unwritable_home_session();

    char path[128];
    snprintf(path, sizeof path, "%s/.zlua_history", home);
    unlink(path);
    rmdir(home);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
