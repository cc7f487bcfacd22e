/* The launcher: `zlua --nprocs N script` and `zlua --hostfile FILE script`
 * become one mpirun command that starts this executable once per rank. It
 * owns DeepSpeed's launcher options (hostfile, --include/--exclude,
 * --num_gpus, --num_nodes, --master_addr/--master_port), their conversion
 * into an Open MPI hostfile, and the rank variables each rank sets at start. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "zlua/comm.h"
#include "zlua/device.h"
#include "launch.h"

static const char *const progname = "zlua";

#define MAX_SLOTS 65536

typedef struct host {
    char *name;
    int slots;        /* slots as the hostfile gives them */
    char *chosen;     /* [slots]: 1 where the slot survives --include/--exclude */
} host;

typedef struct pool {
    host *hosts;
    int n;
} pool;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", progname);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* A count from 1 to MAX_SLOTS, the whole string; -1 otherwise. */
static int parse_count(const char *s, int min)
{
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (errno || *end || end == s || n < min || n > MAX_SLOTS) return -1;
    return (int)n;
}

/* DeepSpeed's launcher options that take a count; where each one goes. */
static int *count_option(const char *a, zlx_launch *l)
{
    if (strcmp(a, "--nprocs") == 0) return &l->nprocs;
    if (strcmp(a, "--num_gpus") == 0 || strcmp(a, "--num_accelerators") == 0) return &l->num_gpus;
    if (strcmp(a, "--num_nodes") == 0) return &l->num_nodes;
    return NULL;
}

int zlx_launch_option(int argc, char **argv, int *i, zlx_launch *l)
{
    const char *a = argv[*i];
    /* DeepSpeed's argparse also takes "--num_gpus=2". */
    char name[32];
    const char *inline_value = NULL, *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    if (eq && (size_t)(eq - a) < sizeof name) {
        memcpy(name, a, (size_t)(eq - a));
        name[eq - a] = '\0';
        a = name;
        inline_value = eq + 1;
    }
    if (strcmp(a, "--bind_cores_to_rank") == 0) {
        if (inline_value) {
            fail("'%s' takes no value, got '%s'", a, argv[*i]);
            return -1;
        }
        l->bind_cores = true;
        return 1;
    }
    const char **value = strcmp(a, "--hostfile") == 0 ? &l->hostfile
                       : strcmp(a, "--include") == 0 ? &l->include
                       : strcmp(a, "--exclude") == 0 ? &l->exclude
                       : strcmp(a, "--master_addr") == 0 ? &l->master_addr
                       : strcmp(a, "--master_port") == 0 ? &l->master_port : NULL;
    int *count = count_option(a, l);
    if (value == NULL && count == NULL) return 0;
    if (!inline_value && *i + 1 >= argc) {
        fail("'%s' needs a value", a);
        return -1;
    }
    const char *v = inline_value ? inline_value : argv[++*i];
    if (value) {
        int port = value == &l->master_port ? parse_count(v, 1) : 1;
        if (port < 0 || port > 65535) {
            fail("--master_port needs a port from 1 to 65535, got '%s'", v);
            return -1;
        }
        *value = v;
        return 1;
    }
    *count = parse_count(v, 1);
    if (*count < 0) {
        fail("%s needs a number of %s from 1 to %d, got '%s'", a,
             count == &l->num_nodes ? "hosts" : "processes", MAX_SLOTS, v);
        return -1;
    }
    return 1;
}

bool zlx_launch_wanted(const zlx_launch *l)
{
    return l->nprocs > 0 || l->hostfile || l->include || l->exclude || l->bind_cores || l->num_gpus > 0
        || l->num_nodes > 0 || l->master_addr || l->master_port;
}

void zlx_launch_rank_env(void)
{
    static const char *const names[][2] = {
        {"RANK", "OMPI_COMM_WORLD_RANK"},
        {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"},
        {"LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const char *ompi = getenv(names[k][1]);
        if (ompi && !getenv(names[k][0])) setenv(names[k][0], ompi, 0);
    }
}

static void pool_free(pool *p)
{
    for (int k = 0; k < p->n; k++) {
        free(p->hosts[k].name);
        free(p->hosts[k].chosen);
    }
    free(p->hosts);
}

static host *pool_find(const pool *p, const char *name, size_t len)
{
    for (int k = 0; k < p->n; k++)
        if (strlen(p->hosts[k].name) == len && strncmp(p->hosts[k].name, name, len) == 0)
            return &p->hosts[k];
    return NULL;
}

/* One hostfile line, comment already cut: "" (nothing), or `host slots=N`.
 * Returns 0, or -1 when the line is malformed. */
static int parse_host_line(char *line, pool *p)
{
    const char *sep = " \t\r\n";
    char *save;
    char *name = strtok_r(line, sep, &save);
    if (name == NULL) return 0;
    char *slots = strtok_r(NULL, sep, &save);
    if (slots == NULL || strtok_r(NULL, sep, &save) != NULL) return -1;
    if (strncmp(slots, "slots=", 6) != 0) return -1;
    int n = parse_count(slots + 6, 1);
    if (n < 0 || pool_find(p, name, strlen(name))) return -1;
    host *grown = realloc(p->hosts, (size_t)(p->n + 1) * sizeof *grown);
    if (grown == NULL) return -1;
    p->hosts = grown;
    host *h = &p->hosts[p->n];
    h->name = strdup(name);
    h->chosen = malloc((size_t)n);
    if (h->name == NULL || h->chosen == NULL) {
        free(h->name);
        free(h->chosen);
        return -1;
    }
    h->slots = n;
    memset(h->chosen, 1, (size_t)n);
    p->n++;
    return 0;
}

/* DeepSpeed's hostfile: `host slots=N` per line, '#' starts a comment, blank
 * lines skipped, each host once. Returns 0, or -1 with a message naming the
 * file and the line. */
static int read_hostfile(const char *path, pool *p)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fail("cannot open hostfile '%s': %s", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int lineno = 0, status = 0;
    while (status == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        if (parse_host_line(line, p) != 0) {
            fprintf(stderr, "%s: %s:%d: expected 'host slots=N' (N from 1 to %d, each host once)\n",
                    progname, path, lineno, MAX_SLOTS);
            status = -1;
        }
    }
    fclose(f);
    if (status == 0 && p->n == 0) {
        fail("hostfile '%s' names no hosts", path);
        status = -1;
    }
    return status;
}

/* --include/--exclude as DeepSpeed reads them: `NODE[:slot,slot]@NODE...`.
 * A node alone takes (or drops) all its slots; a node with slots those only.
 * Returns 0, or -1 with a message naming the option and the culprit. */
static int apply_filter(pool *p, const char *opt, const char *spec, bool include, const char *hostfile)
{
    if (include)
        for (int k = 0; k < p->n; k++) memset(p->hosts[k].chosen, 0, (size_t)p->hosts[k].slots);
    const char *s = spec;
    for (;;) {
        size_t len = strcspn(s, "@");
        size_t name_len = strcspn(s, ":@");
        host *h = pool_find(p, s, name_len);
        if (h == NULL) {
            if (hostfile)
                fprintf(stderr, "%s: %s '%s': host '%.*s' is not in the hostfile\n", progname, opt, spec,
                        (int)name_len, s);
            else
                fprintf(stderr, "%s: %s '%s': host '%.*s' needs --hostfile (without one, the only host is "
                        "localhost)\n", progname, opt, spec, (int)name_len, s);
            return -1;
        }
        if (name_len == len) {
            memset(h->chosen, include, (size_t)h->slots);
        } else {
            const char *t = s + name_len + 1;
            while (t <= s + len) {
                size_t slot_len = strcspn(t, ",@");
                char num[16] = "";
                if (slot_len < sizeof num) memcpy(num, t, slot_len), num[slot_len] = '\0';
                int slot = parse_count(num, 0);
                if (slot < 0 || slot >= h->slots) {
                    fprintf(stderr, "%s: %s '%s': host '%s' has slots 0 to %d, not '%.*s'\n",
                            progname, opt, spec, h->name, h->slots - 1, (int)slot_len, t);
                    return -1;
                }
                h->chosen[slot] = include;
                t += slot_len + 1;
            }
        }
        if (s[len] == '\0') return 0;
        s += len + 1;
    }
}

static int chosen_slots(const host *h)
{
    int n = 0;
    for (int k = 0; k < h->slots; k++) n += h->chosen[k];
    return n;
}

/* --num_nodes and --num_gpus as DeepSpeed's runner applies them after
 * --include/--exclude: the first num_nodes hosts that still have slots, and
 * on each the first num_gpus of its chosen slots. 0 leaves a limit off.
 * Returns 0, or -1 with a message when the hostfile has too few. */
static int limit_pool(pool *p, const char *path, int num_nodes, int num_gpus)
{
    int nodes = 0;
    for (int k = 0; k < p->n; k++) {
        host *h = &p->hosts[k];
        if (chosen_slots(h) == 0) continue;
        if (num_nodes > 0 && nodes == num_nodes) {
            memset(h->chosen, 0, (size_t)h->slots);
            continue;
        }
        nodes++;
        if (num_gpus == 0) continue;
        if (chosen_slots(h) < num_gpus) {
            fprintf(stderr, "%s: --num_gpus %d: host '%s' has %d slot%s left in '%s'\n", progname, num_gpus,
                    h->name, chosen_slots(h), chosen_slots(h) == 1 ? "" : "s", path);
            return -1;
        }
        for (int slot = 0, kept = 0; slot < h->slots; slot++)
            if (h->chosen[slot] && ++kept > num_gpus) h->chosen[slot] = 0;
    }
    if (num_nodes > nodes) {
        fprintf(stderr, "%s: --num_nodes %d: '%s' has %d host%s with slots left\n", progname, num_nodes, path,
                nodes, nodes == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* The first host that keeps a slot: the rendezvous DeepSpeed names
 * MASTER_ADDR when --master_addr is not given. */
static const char *first_host(const pool *p)
{
    for (int k = 0; k < p->n; k++)
        if (chosen_slots(&p->hosts[k]) > 0) return p->hosts[k].name;
    return NULL;
}

/* Writes the chosen hosts as an Open MPI hostfile into a new temporary file
 * whose name goes into path. Returns the total of the slots, or -1. */
static int write_mpi_hostfile(const pool *p, char *path, size_t size)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, size, "%s/zlua-hosts-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        fail("cannot create a hostfile for mpirun in '%s': %s", path, strerror(errno));
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    int total = 0;
    for (int k = 0; f && k < p->n; k++) {
        int n = chosen_slots(&p->hosts[k]);
        if (n > 0) fprintf(f, "%s slots=%d\n", p->hosts[k].name, n);
        total += n;
    }
    bool written = f && !ferror(f);
    if (f ? fclose(f) != 0 : close(fd) != 0) written = false;
    if (!written) {
        fail("cannot write the hostfile for mpirun '%s'", path);
        unlink(path);
        return -1;
    }
    if (total == 0) {
        fail("no slots are left after --include/--exclude");
        unlink(path);
        return -1;
    }
    return total;
}

/* mpirun's full path from PATH, or NULL. */
static char *find_mpirun(void)
{
    const char *path = getenv("PATH");
    if (path == NULL) return NULL;
    static char full[PATH_MAX];
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len > 0 && len + sizeof "/mpirun" <= sizeof full) {
            memcpy(full, path, len);
            strcpy(full + len, "/mpirun");
            if (access(full, X_OK) == 0) return full;
        }
        path += len + (path[len] == ':');
    }
    return NULL;
}

/* The environment variables sent to every rank, remote ones included (local
 * ranks inherit the whole environment anyway). */
static bool forwarded(const char *var)
{
    static const char *const prefixes[] = {"ZLUA_", "OMP_", "LUA_PATH", "LUA_CPATH", "OPENBLAS_",
                                           "MASTER_ADDR=", "MASTER_PORT="};
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++)
        if (strncmp(var, prefixes[k], strlen(prefixes[k])) == 0) return true;
    return false;
}

static pid_t child;
static volatile sig_atomic_t stopped_by;

static void forward_signal(int sig)
{
    stopped_by = sig;
    kill(child, sig);
}

/* Runs mpirun and waits: the temporary hostfile is removed afterwards, which
 * an exec in place could not do. SIGINT, SIGTERM or SIGHUP, to the launcher
 * alone or to its process group as a terminal's Ctrl-C, is passed on to
 * mpirun, which stops the ranks; the launcher then says it was interrupted
 * and exits 128 + the signal, whatever mpirun's own status. */
static int run_mpirun(char **cmd)
{
    fflush(NULL);
    child = fork();
    if (child < 0) {
        fail("cannot start mpirun: %s", strerror(errno));
        return EXIT_FAILURE;
    }
    if (child == 0) {
        execv(cmd[0], cmd);
        fprintf(stderr, "%s: cannot run '%s': %s\n", progname, cmd[0], strerror(errno));
        _exit(127);
    }
    struct sigaction ign = {.sa_handler = SIG_IGN}, fwd = {.sa_handler = forward_signal};
    sigemptyset(&ign.sa_mask);
    sigemptyset(&fwd.sa_mask);
    sigaction(SIGQUIT, &ign, NULL);
    sigaction(SIGINT, &fwd, NULL);
    sigaction(SIGTERM, &fwd, NULL);
    sigaction(SIGHUP, &fwd, NULL);
    int wstatus;
    while (waitpid(child, &wstatus, 0) < 0)
        if (errno != EINTR) return EXIT_FAILURE;
    if (stopped_by) {
        fprintf(stderr, "%s: interrupted (%s): the ranks were stopped\n", progname,
                stopped_by == SIGINT ? "SIGINT" : stopped_by == SIGTERM ? "SIGTERM" : "SIGHUP");
        return 128 + stopped_by;
    }
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    return 128 + WTERMSIG(wstatus);
}

/* Each rank of a run on this host leaves a receipt in a folder of ours as it
 * exits, once it has finalised MPI (engine/comm/mpi_receipt.c): its exit
 * status. Open MPI 4's mpirun sometimes fails a job whose ranks all did that,
 * saying one "exited improperly" (with PID 0: its runtime lost the rank's
 * finalisation); the receipts tell that from a real failure. */
#define RECEIPTS_ENV "ZLUA_RANK_RECEIPTS"

/* The folder into dir ("" when none could be made: then no receipts). */
static void make_receipts(char *dir, size_t size)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/zlua-ranks-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) *dir = '\0';
    else setenv(RECEIPTS_ENV, dir, 1);
}

/* Whether every rank left a receipt of exit status 0; the folder is removed. */
static bool receipts_clean(const char *dir, int np)
{
    bool clean = true;
    for (int r = 0; r < np; r++) {
        char path[PATH_MAX + 32], text[32] = "";
        snprintf(path, sizeof path, "%s/rank.%d", dir, r);
        FILE *f = fopen(path, "r");
        clean = clean && f && fgets(text, sizeof text, f) && strcmp(text, "0\n") == 0;
        if (f) fclose(f);
        unlink(path);
    }
    rmdir(dir);
    return clean;
}

/* "-x NAME" forwards a variable; each NAME is a copy of its own, freed by
 * free_command, which tells the flag from any other "-x" by its address. */
static char export_flag[] = "-x";

/* Builds the mpirun command into cmd (room for argc + environ + 32 words).
 * exe is this executable, hostfile NULL for a run on this host alone. */
static void build_command(char **cmd, const zlx_launch *l, int np, bool oversubscribe,
                          const char *hostfile, char *exe, int argc, char **argv, int end)
{
    extern char **environ;
    static char np_text[16], pe_text[32];
    /* Rank 0's output reaches this terminal through mpirun's pipes: it shows
     * the progress line as a run on this host alone would. */
    bool terminal = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) && !getenv("ZLUA_TERMINAL");
    int n = 0;
    cmd[n++] = find_mpirun();
    snprintf(np_text, sizeof np_text, "%d", np);
    cmd[n++] = "-np";
    cmd[n++] = np_text;
    if (getuid() == 0) cmd[n++] = "--allow-run-as-root";
    if (oversubscribe) cmd[n++] = "--oversubscribe";
    if (hostfile) {
        cmd[n++] = "--hostfile";
        cmd[n++] = (char *)hostfile;
    }
    if (l->bind_cores) {
        /* Each rank gets OMP_NUM_THREADS cores of its own. */
        const char *threads = getenv("OMP_NUM_THREADS");
        int pe = threads ? atoi(threads) : 1;
        cmd[n++] = "--bind-to";
        cmd[n++] = oversubscribe ? "core:overload-allowed" : "core";
        cmd[n++] = "--map-by";
        snprintf(pe_text, sizeof pe_text, "slot:PE=%d", pe);
        cmd[n++] = pe > 1 ? pe_text : "core";
    }
    for (char **e = environ; *e; e++) {
        if (!forwarded(*e)) continue;
        char *name = strndup(*e, strcspn(*e, "="));
        if (name == NULL) continue;
        cmd[n++] = export_flag;
        cmd[n++] = name;
    }
    if (terminal) {
        cmd[n++] = "-x";
        cmd[n++] = "ZLUA_TERMINAL=1";
    }
    cmd[n++] = exe;
    for (int i = 1; i < end; i++) {
        zlx_launch skip = {0};
        int at = i;
        if (zlx_launch_option(end, argv, &at, &skip) == 1) {
            i = at;
            continue;
        }
        /* The value of -e or -l goes through even when it looks like an option. */
        if ((strcmp(argv[i], "-e") == 0 || strcmp(argv[i], "-l") == 0) && i + 1 < end)
            cmd[n++] = argv[i++];
        cmd[n++] = argv[i];
    }
    for (int i = end; i < argc; i++) cmd[n++] = argv[i];
    cmd[n] = NULL;
}

/* The command and the variable names build_command copied. */
static void free_command(char **cmd)
{
    for (int i = 0; cmd[i]; i++)
        if (cmd[i] == export_flag) free(cmd[++i]);
    free(cmd);
}

static int online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Without a hostfile DeepSpeed's pool is this host alone, "localhost", with a
 * slot per GPU; here a slot per core where there is no GPU. */
static int local_pool(pool *p, int gpus)
{
    char line[64];
    snprintf(line, sizeof line, "localhost slots=%d", gpus > 0 ? gpus : online_cores());
    if (parse_host_line(line, p) != 0) {
        fail("out of memory describing this host's slots");
        return -1;
    }
    return 0;
}

/* The GPUs of the slots --include/--exclude kept on this host, as DeepSpeed
 * gives each node's ranks: CUDA_VISIBLE_DEVICES lists them, so local rank k
 * takes the k-th kept one. */
static void keep_gpus(const host *h)
{
    char list[4096] = "";
    size_t len = 0;
    for (int k = 0; k < h->slots && len + 16 < sizeof list; k++)
        if (h->chosen[k]) len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", len ? "," : "", k);
    setenv("CUDA_VISIBLE_DEVICES", list, 1);
}

/* Whether the script cannot be read, said as Lua would say it. */
static bool unreadable(const char *path)
{
    FILE *f = fopen(path, "r");
    int err = f ? 0 : errno;
    if (f) {
        if (fgetc(f) == EOF && ferror(f)) err = errno;
        fclose(f);
    }
    if (err) fail("cannot open %s: %s", path, strerror(err));
    return err != 0;
}

int zlx_launch_ranks(const zlx_launch *l, int argc, char **argv, int end)
{
    if (l->include && l->exclude) {
        fail("--include and --exclude cannot be used together");
        return EXIT_FAILURE;
    }
    /* --include/--exclude without a hostfile choose among this host's slots. */
    bool pooled = l->hostfile || l->include || l->exclude;
    if (l->nprocs > 0 && l->num_gpus > 0 && (l->hostfile || l->nprocs != l->num_gpus)) {
        fail(l->hostfile ? "--nprocs and --num_gpus cannot be used together with --hostfile"
                         : "--nprocs %d and --num_gpus %d disagree: give one of them",
             l->nprocs, l->num_gpus);
        return EXIT_FAILURE;
    }
    if (!l->hostfile && l->num_nodes > 1) {
        fail("--num_nodes %d needs --hostfile naming the hosts", l->num_nodes);
        return EXIT_FAILURE;
    }
    int nprocs = l->nprocs > 0 ? l->nprocs : pooled ? 0 : l->num_gpus;
    if (!pooled && nprocs == 0) {
        fail("the launcher needs --nprocs N (or --num_gpus N) or --hostfile");
        return EXIT_FAILURE;
    }
    /* The ranks would each open the mpi communicator, so a build without it stops here. */
    const char *why = zl_comm_unavailable("mpi");
    if (why) {
        fail("%s: %s needs it", why, l->nprocs > 0 ? "--nprocs" : l->num_gpus > 0 ? "--num_gpus" : "--hostfile");
        return EXIT_FAILURE;
    }
    if (find_mpirun() == NULL) {
        fail("--nprocs needs mpirun (Debian package openmpi-bin)");
        return EXIT_FAILURE;
    }
    /* On this host alone every rank would say the same once each: say it here. */
    if (!l->hostfile && end < argc && strcmp(argv[end], "-") != 0 && unreadable(argv[end]))
        return EXIT_FAILURE;
    static char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len < 0) {
        fail("cannot find the zlua executable (/proc/self/exe): %s", strerror(errno));
        return EXIT_FAILURE;
    }
    exe[len] = '\0';

    pool p = {0};
    char hostfile[PATH_MAX] = "";
    int slots = online_cores(), per_host = slots;
    char master[256] = "127.0.0.1";
    if (pooled) {
        int gpus = l->hostfile ? 0 : zl_device_count(ZL_DEVICE_CUDA);
        int ok = (l->hostfile ? read_hostfile(l->hostfile, &p) : local_pool(&p, gpus)) == 0
              && (!l->include || apply_filter(&p, "--include", l->include, true, l->hostfile) == 0)
              && (!l->exclude || apply_filter(&p, "--exclude", l->exclude, false, l->hostfile) == 0)
              && limit_pool(&p, l->hostfile ? l->hostfile : "this host", l->num_nodes, l->num_gpus) == 0;
        if (ok && l->hostfile && first_host(&p)) snprintf(master, sizeof master, "%s", first_host(&p));
        if (ok && gpus > 0) keep_gpus(&p.hosts[0]);
        slots = ok ? write_mpi_hostfile(&p, hostfile, sizeof hostfile) : -1;
        per_host = 1;
        for (int k = 0; k < p.n; k++)
            if (chosen_slots(&p.hosts[k]) > per_host) per_host = chosen_slots(&p.hosts[k]);
        pool_free(&p);
        if (slots < 0) return EXIT_FAILURE;
    }
    int np = nprocs > 0 ? nprocs : slots;
    int ranks_here = l->hostfile ? (np < per_host ? np : per_host) : np;
    if (l->bind_cores) {
        char threads[16];
        int share = online_cores() / ranks_here;
        snprintf(threads, sizeof threads, "%d", share > 0 ? share : 1);
        setenv("OMP_NUM_THREADS", threads, 1);
    }
    /* Each rank takes its own values from Open MPI; stale ones inherited
     * from this process would hide them. */
    unsetenv("RANK");
    unsetenv("LOCAL_RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_SIZE");
    /* DeepSpeed's rendezvous variables: MPI needs none, but scripts and
     * libraries written for torch.distributed read them. */
    setenv("MASTER_ADDR", l->master_addr ? l->master_addr : master, 1);
    setenv("MASTER_PORT", l->master_port ? l->master_port : "29500", 1);

    extern char **environ;
    size_t nenv = 0;
    while (environ[nenv]) nenv++;
    char **cmd = calloc((size_t)argc + 2 * nenv + 32, sizeof *cmd);
    if (cmd == NULL) {
        fail("out of memory building the mpirun command");
        if (*hostfile) unlink(hostfile);
        return EXIT_FAILURE;
    }
    char receipts[PATH_MAX] = "";
    unsetenv(RECEIPTS_ENV);   /* a stale one: the ranks of a run elsewhere write none */
    if (!l->hostfile) make_receipts(receipts, sizeof receipts);
    build_command(cmd, l, np, np > slots, *hostfile ? hostfile : NULL, exe, argc, argv, end);
    int status = run_mpirun(cmd);
    free_command(cmd);
    if (*hostfile) unlink(hostfile);
    if (*receipts && receipts_clean(receipts, np) && status != 0) {
        fprintf(stderr, "%s: every rank finalised MPI and exited with status 0; mpirun's report above is Open MPI's "
                "runtime losing track of it, not a failure of the job\n", progname);
        status = 0;
    }
    return status;
}
