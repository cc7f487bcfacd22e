/* zlua: the executable. Shaped like Lua's own interpreter: main runs a
 * protected main and turns its result into the exit status; the options are
 * lua's (-e -l -i -v - --) plus the launcher's (launch.c); the global `zl` is set. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lua.h>
#include <lauxlib.h>
#include "zlua/comm.h"
#include "zlua/embed.h"
#include "launch.h"
#include "repl.h"

/* OpenBLAS's own report ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...") and the kernel
 * set it chose for this CPU ("Cooperlake"); declared here because the engine
 * keeps cblas.h off the executable's include path. */
char *openblas_get_config(void);
char *openblas_get_corename(void);

static const char *const progname = "zlua";

typedef struct options {
    int script;          /* argv index of the script; 0 when there is none */
    bool script_stdin;   /* the script is "-": read it from stdin */
    bool interactive;    /* -i */
    bool version;        /* -v, or implied by -i as lua does */
    bool has_exec;       /* at least one -e */
    bool help;           /* -h or --help: the usage on stdout, nothing run */
    zlx_launch launch;   /* --nprocs, --hostfile, ... */
} options;

static void print_usage(FILE *to)
{
    fprintf(to,
        "usage: %s [options] [script [args]]\n"
        "options:\n"
        "  -e chunk     run the Lua chunk\n"
        "  -l mod       require 'mod' and set the global 'mod' to it\n"
        "  -l g=mod     require 'mod' and set the global 'g' to it\n"
        "  -i           enter the interactive prompt after the script\n"
        "  -v           print the version\n"
        "  -h, --help   print this and exit\n"
        "  --nprocs N   run the script as N ranks through mpirun\n"
        "  --num_gpus N, --num_accelerators N  N ranks on each host (DeepSpeed's names; on one host --nprocs N)\n"
        "  --num_nodes N  the first N hosts of the hostfile\n"
        "  --master_addr A, --master_port P  MASTER_ADDR and MASTER_PORT of the ranks\n"
        "  --hostfile F run it on the hosts of F (lines 'host slots=N')\n"
        "  --include S  only these hosts and slots of F (host[:slot,slot]@host...), or\n"
        "               without --hostfile of this host, localhost (a slot per GPU, else per core)\n"
        "  --exclude S  all but these hosts and slots\n"
        "  --bind_cores_to_rank  bind each rank to its share of the cores\n"
        "  --           stop reading options\n"
        "  -            stop reading options and run stdin\n",
        progname);
}

static void print_version(void)
{
    /* The first two words of OpenBLAS's report are its name and version;
     * the kernel set follows them, since a speed figure depends on it. */
    const char *cfg = openblas_get_config();
    int n = 0, words = 0;
    while (cfg[n] && !(cfg[n] == ' ' && ++words == 2)) n++;
    /* ZLUA_PARTS: the optional parts built with and without (the top CMakeLists.txt) */
    printf("%s %s (%s, %.*s %s) %s\n", progname, zl_version(), LUA_RELEASE, n, cfg, openblas_get_corename(),
           ZLUA_PARTS);
    fflush(stdout);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: ", progname);
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    print_usage(stderr);
    return -1;
}

/* First pass over argv, before any Lua runs: validates every option so a bad
 * command line fails before the script starts, and finds the script. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            o->script = i;
            o->script_stdin = a[0] == '-';
            return 0;
        }
        if (strcmp(a, "--") == 0) {
            o->script = i + 1 < argc ? i + 1 : 0;
            return 0;
        }
        int launch = zlx_launch_option(argc, argv, &i, &o->launch);
        if (launch < 0) {
            print_usage(stderr);
            return -1;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            o->help = true;
            return 0;
        }
        if (launch > 0) continue;
        switch (a[1]) {
        case 'i':
        case 'v':
            if (a[2] != '\0') return usage_error("unrecognized option '%s'", a);
            o->version = true;
            o->interactive |= a[1] == 'i';
            break;
        case 'e':
        case 'l':
            o->has_exec |= a[1] == 'e';
            if (a[2] == '\0' && ++i >= argc) return usage_error("'%s' needs an argument", a);
            break;
        default:
            return usage_error("unrecognized option '%s'", a);
        }
    }
    return 0;
}

/* Ctrl-C while Lua runs: the engine's loops poll zl_interrupt_pending, and
 * Lua code is stopped by a hook at its next instruction. A handler may only
 * set flags; lua_sethook is one of the few Lua calls that is safe there. The
 * handler may run on any thread (OpenBLAS and OpenMP keep workers), which is
 * why it only sets state that the running thread reads. */
static lua_State *running;

static void stop_hook(lua_State *L, lua_Debug *ar)
{
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

static void on_interrupt(int sig)
{
    zl_interrupt_set(1);
    lua_sethook(running, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

int zlx_docall(lua_State *L, int narg, int nres)
{
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, zlb_traceback);
    lua_insert(L, base);
    /* SA_RESETHAND: a second Ctrl-C ends a process stuck in C code that
     * polls nothing, as with lua. */
    struct sigaction act = {.sa_handler = on_interrupt, .sa_flags = SA_RESETHAND}, old;
    sigemptyset(&act.sa_mask);
    running = L;
    sigaction(SIGINT, &act, &old);
    int status = lua_pcall(L, narg, nres, base);
    sigaction(SIGINT, &old, NULL);
    lua_sethook(L, NULL, 0, 0);
    zl_interrupt_set(0);
    lua_remove(L, base);
    return status;
}

/* The first error reported, for the note a failing rank leaves its peers. */
static char first_error[1024];

/* Prints the error message on the stack top, if any, and pops it. */
static bool report(lua_State *L, int status)
{
    if (status == LUA_OK) return true;
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = "(error object is not a string)";
    if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", msg);
    fprintf(stderr, "%s: %s\n", progname, msg);
    fflush(stderr);
    lua_pop(L, 1);
    return false;
}

/* `arg` as lua sets it: the script at 0, its arguments at 1.., the
 * interpreter and the options before it at negative indices. */
static void set_arg_table(lua_State *L, int argc, char **argv, int script)
{
    lua_createtable(L, argc - script, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

static bool run_chunk(lua_State *L, const char *chunk)
{
    int status = luaL_loadbuffer(L, chunk, strlen(chunk), "=(command line)");
    if (status == LUA_OK) status = zlx_docall(L, 0, 0);
    return report(L, status);
}

/* -l mod or -l g=mod: the global g (or mod) = require(mod). */
static bool run_require(lua_State *L, const char *spec)
{
    const char *eq = strchr(spec, '=');
    const char *mod = eq ? eq + 1 : spec;
    lua_getglobal(L, "require");
    lua_pushstring(L, mod);
    int status = zlx_docall(L, 1, 1);
    if (status == LUA_OK) {
        const char *global = lua_pushlstring(L, spec, eq ? (size_t)(eq - spec) : strlen(spec));
        lua_insert(L, -2);
        lua_setglobal(L, global);
        lua_pop(L, 1);
    }
    return report(L, status);
}

/* Second pass: -e and -l in command-line order, before the script. */
static bool run_options(lua_State *L, char **argv, int end)
{
    for (int i = 1; i < end; i++) {
        const char *a = argv[i];
        if (a[1] != 'e' && a[1] != 'l') continue;
        const char *value = a[2] ? a + 2 : argv[++i];
        if (!(a[1] == 'e' ? run_chunk(L, value) : run_require(L, value))) return false;
    }
    return true;
}

/* Runs the script (NULL: stdin) with the arguments after it as `...`. */
static bool run_script(lua_State *L, const char *path, int nargs, char **args)
{
    int status = luaL_loadfile(L, path);
    if (status == LUA_OK) {
        luaL_checkstack(L, nargs, "too many script arguments");
        for (int i = 0; i < nargs; i++) lua_pushstring(L, args[i]);
        status = zlx_docall(L, nargs, 0);
    }
    return report(L, status);
}

static int pmain(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    const options *o = lua_touserdata(L, 3);
    luaL_checkversion(L);
    set_arg_table(L, argc, argv, o->script);
    if (o->version) print_version();
    if (!run_options(L, argv, o->script ? o->script : argc)) return 0;
    if (o->script) {
        const char *path = o->script_stdin ? NULL : argv[o->script];
        if (!run_script(L, path, argc - o->script - 1, argv + o->script + 1)) return 0;
    }
    if (o->interactive) {
        zlx_repl(L);
    } else if (o->script == 0 && !o->has_exec && !o->version) {
        if (isatty(STDIN_FILENO)) {
            print_version();
            zlx_repl(L);
        } else if (!run_script(L, NULL, 0, NULL)) {
            return 0;
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* With stdin closed, the first file opened (the script) would take
 * descriptor 0 and the REPL would read it after the script ran. */
static void keep_std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        int got = open("/dev/null", O_RDWR);
        if (got >= 0 && got != fd) close(got);
    }
}

/* OpenMP's worker threads spin while they wait for work (the default wait
 * policy), and libgomp reads the policy once, when it is loaded, before main.
 * On a machine with as many busy threads as cores the spinning starves the
 * threads that have work: a 2-thread training step ran 3x slower than a
 * 1-thread one under load. So unless the user chose a policy, the process
 * restarts itself once with OMP_WAIT_POLICY=passive. */
static void choose_wait_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    /* Restarting failed (no /proc): run on with the spinning default. */
}

/* oneDNN's sgemm takes its packing buffers (a few MiB) from malloc and frees
 * them every call. Under glibc's sliding thresholds those come and go as
 * fresh mmaps or trimmed heap tops: hundreds of page faults a training step,
 * for good. Fixed thresholds keep them in the heap; blocks from 32 MiB up
 * are still mapped and unmapped on their own (the engine's cache holds
 * those), and a heap top over 64 MiB free is still given back. Not so under
 * a memory limit lower than the machine's (a memory cgroup, an rlimit),
 * where what the heap keeps counts against the limit: glibc's own choice
 * stands. A host program embedding the engine makes this choice for its own
 * process. */
static void tune_malloc(void)
{
    if (getenv("MALLOC_MMAP_THRESHOLD_") || getenv("MALLOC_TRIM_THRESHOLD_")) return;
    if (zl_mem_limit(NULL) < zl_mem_ram()) return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    /* Where glibc places those buffers still shifts with the garbage Lua
     * leaves between them, and the heap then grows by a few of them over
     * the first tens of steps, at steps that differ from launch to launch.
     * Its first 16 MiB faulted in now (and, below the trim threshold, kept)
     * make that growth land on pages already mapped: about 3 ms at start. */
    enum { PIECE = 4 << 20, PIECES = 4 };
    void *p[PIECES];
    int k = 0;
    for (; k < PIECES && (p[k] = malloc(PIECE)); k++) explicit_bzero(p[k], PIECE);
    while (k--) free(p[k]);
}

int main(int argc, char **argv)
{
    zlx_launch_rank_env();
    choose_wait_policy(argv);
    tune_malloc();
    keep_std_fds_open();
    options o;
    if (parse_options(argc, argv, &o) != 0) return EXIT_FAILURE;
    if (o.help) {
        print_usage(stdout);
        return EXIT_SUCCESS;
    }
    if (zlx_launch_wanted(&o.launch))
        return zlx_launch_ranks(&o.launch, argc, argv, o.script ? o.script : argc);

    zlua_state *s = zlua_open();
    if (s == NULL) {
        fprintf(stderr, "%s: %s\n", progname, zl_last_error());
        return EXIT_FAILURE;
    }
    lua_State *L = zlua_lua(s);
    lua_pushcfunction(L, pmain);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    lua_pushlightuserdata(L, &o);
    int status = lua_pcall(L, 3, 1, 0);
    bool ok = status == LUA_OK && lua_toboolean(L, -1);
    report(L, status);
    /* A rank whose script failed must not close its communicators: closing is
     * collective, and the other ranks are waiting in some other collective,
     * so the job would hang until the comm timeout. Its process ending is
     * what the others notice within seconds; its note tells them why. */
    const char *world = getenv("WORLD_SIZE");
    if (!ok && world && atoi(world) > 1) {
        zl_comm_note_failure(first_error[0] ? first_error : "the script failed");
        fflush(stdout);
        exit(EXIT_FAILURE);
    }
    zlua_close(s);
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
