/* The mpi backend's knowledge of the other ranks on this machine: which of
 * them has ended or is stopped, what a failed one said about its failure
 * (zl_comm_note_failure), and what SIGTERM from mpirun then prints. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mpi_peers.h"
#include "mpi_shm.h"

/* ---- ended peers ----
 * When a rank's process dies, Open MPI's shared-memory transport reports
 * nothing: the others wait for it until the timeout, unless mpirun first stops
 * them with SIGTERM (it does a second after it notices), which says nothing
 * on their side. So at open the ranks exchange where they run (the kernel's
 * boot id and the pid namespace) and their pid with its start time; a rank can
 * then tell that a peer on the same machine has ended, both while it waits
 * (`lost`, polled by comm.c) and when SIGTERM comes. Peers elsewhere are found
 * out only by the timeout. */

typedef struct peer_card {
    char place[120];             /* boot id and pid namespace; "" when unknown */
    int64_t pid;
    uint64_t start;              /* clock ticks after boot (/proc/<pid>/stat field 22) */
} peer_card;

/* The other ranks on this machine, built by the first open and dropped with the
 * last close. The SIGTERM handler reads them, so they are set before it is
 * installed and cleared after it is removed. */
static int g_self_rank = -1;    /* in the first communicator; -1 before one opens */
static volatile int g_nlocal;
static int *g_local_rank;
static pid_t *g_local_pid;
static uint64_t *g_local_start;
static bool g_on_sigterm;        /* our handler is installed */

/* Reads /proc/<pid>/stat (pid 0: this process): its state letter and start
 * time. System calls only, no stdio: the SIGTERM handler calls it. Returns 0,
 * or -1 with errno. */
static int read_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[40] = "/proc/self/stat", buf[1024];
    if (pid > 0) {
        char digits[24];
        int n = 0;
        for (uint64_t v = (uint64_t)pid; v; v /= 10) digits[n++] = (char)('0' + v % 10);
        char *p = path + 6;
        while (n) *p++ = digits[--n];
        memcpy(p, "/stat", 6);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    int err = errno;
    close(fd);
    if (len <= 0) {
        errno = len < 0 ? err : EIO;
        return -1;
    }
    buf[len] = '\0';
    /* The name (field 2) may hold anything, so fields count from its last ')'. */
    char *p = NULL;
    for (char *q = buf; *q; q++)
        if (*q == ')') p = q;
    if (!p || p[1] != ' ') return errno = EIO, -1;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        while (*p && *p != ' ') p++;
        if (*p) p++;
    }
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) v = v * 10 + (uint64_t)(*p - '0');
    *start = v;
    return 0;
}

/* Whether the process `pid` that started at `start` has ended: it is gone, a
 * zombie, or its pid now belongs to a newer process. */
static bool process_ended(pid_t pid, uint64_t start)
{
    if (kill(pid, 0) < 0 && errno == ESRCH) return true;
    char state;
    uint64_t now_start;
    if (read_stat(pid, &state, &now_start) < 0) return errno == ENOENT || errno == ESRCH;
    return state == 'Z' || state == 'X' || now_start != start;
}

static char *put_str(char *p, const char *end, const char *s)
{
    while (*s && p < end) *p++ = *s++;
    return p;
}

static char *put_int(char *p, const char *end, long long v)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do digits[n++] = (char)('0' + u % 10); while (u /= 10);
    if (v < 0 && p < end) *p++ = '-';
    while (n && p < end) *p++ = digits[--n];
    return p;
}

/* ---- failure notes ----
 * A rank that gives up on an error leaves its reason in Open MPI's session
 * folder for the job (the parent of $OMPI_FILE_LOCATION, which mpirun removes
 * when the job ends), as zlua-note.<pid>, so that the peers that find it ended
 * can say why instead of only that it is gone. The note holds the whole phrase
 * they print after "rank N: ": "rank 1 failed: <its message>". A rank that
 * fails because it found a peer lost passes that loss on as its own note, so
 * every rank names the rank the failure began with. */

static char g_note_dir[PATH_MAX];   /* "" without a session folder; set before the SIGTERM handler */
static char g_cause[512];           /* the loss this rank found, passed on by its note */
static volatile sig_atomic_t g_failed; /* this process has noted its failure */

static void find_note_dir(void)
{
    const char *loc = getenv("OMPI_FILE_LOCATION");
    const char *slash = loc ? strrchr(loc, '/') : NULL;
    g_note_dir[0] = '\0';
    if (slash && slash > loc && (size_t)(slash - loc) < sizeof g_note_dir) {
        memcpy(g_note_dir, loc, (size_t)(slash - loc));
        g_note_dir[slash - loc] = '\0';
    }
}

/* <dir>/zlua-note.<pid>[.tmp]. Async-signal-safe. */
static void note_path(char *out, size_t size, pid_t pid, bool tmp)
{
    char *p = out, *end = out + size - 1;
    p = put_str(p, end, g_note_dir);
    p = put_str(p, end, "/zlua-note.");
    p = put_int(p, end, pid);
    if (tmp) p = put_str(p, end, ".tmp");
    *p = '\0';
}

/* The note peer k left, into buf; false when it left none. Async-signal-safe. */
static bool read_note(int k, char *buf, size_t size)
{
    if (!g_note_dir[0] || size < 2) return false;
    char path[PATH_MAX + 48];
    note_path(path, sizeof path, g_local_pid[k], false);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    return true;
}

/* The first ended peer that left a note (the failure's own words), else the
 * first ended peer; -1 when none has ended. note is filled in the first case
 * and emptied in the second. Async-signal-safe. */
static int pick_ended(char *note, size_t size)
{
    int n = g_nlocal, first = -1;
    for (int k = 0; k < n; k++) {
        if (!process_ended(g_local_pid[k], g_local_start[k])) continue;
        if (read_note(k, note, size)) return k;
        if (first < 0) first = k;
    }
    note[0] = '\0';
    return first;
}

int zli_peers_lost(char *why, size_t size)
{
    char note[sizeof g_cause];
    int k = pick_ended(note, sizeof note);
    if (k < 0) return -1;
    if (note[0])
        snprintf(why, size, "%s", note);
    else
        snprintf(why, size, "lost rank %d (process %lld ended)", g_local_rank[k], (long long)g_local_pid[k]);
    snprintf(g_cause, sizeof g_cause, "%s", why);
    return g_local_rank[k];
}

void zli_peers_stopped(char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int k = 0; k < g_nlocal && used < size; k++) {
        char state;
        uint64_t start;
        if (read_stat(g_local_pid[k], &state, &start) < 0 || start != g_local_start[k]) continue;
        if (state != 'T' && state != 't') continue;
        int n = snprintf(out + used, size - used, "%srank %d (process %lld) is stopped", used ? ", " : "",
                         g_local_rank[k], (long long)g_local_pid[k]);
        if (n < 0) break;
        used += (size_t)n;
    }
}

bool zli_peers_failed(void) { return g_failed != 0; }

int zli_peers_self(void) { return g_self_rank; }

void zl_comm_note_failure(const char *message)
{
    g_failed = 1;
    if (!g_note_dir[0]) find_note_dir();
    if (!g_note_dir[0]) return;
    char note[sizeof g_cause + 64];
    if (g_cause[0]) {
        snprintf(note, sizeof note, "%s", g_cause);
    } else {
        const char *env = getenv("OMPI_COMM_WORLD_RANK");
        int rank = g_self_rank >= 0 ? g_self_rank : env ? atoi(env) : 0;
        const char *m = message && *message ? message : "(no message)";
        /* One line: the peers print it inside their own. */
        int len = (int)strcspn(m, "\n");
        snprintf(note, sizeof note, "rank %d failed: %.*s", rank, len, m);
    }
    char tmp[PATH_MAX + 48], path[PATH_MAX + 48];
    note_path(tmp, sizeof tmp, getpid(), true);
    note_path(path, sizeof path, getpid(), false);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    bool ok = fputs(note, f) >= 0;
    ok = fclose(f) == 0 && ok;
    /* Renamed whole, so a peer never reads half a note. */
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* mpirun stops every rank with SIGTERM once one has died. When a peer on this
 * machine has ended, say which: the failure's own note when one left it, else
 * every ended peer by name (a rank that saw the loss first may have stopped
 * already); then exit with status 1. Otherwise SIGTERM does what it would
 * have done (SA_RESETHAND restored the default). Async-signal-safe: system
 * calls and the tables above only. */
static void on_sigterm(int sig)
{
    int saved = errno, n = g_nlocal, lost = 0;
    char msg[1024], note[sizeof g_cause], *p = msg, *end = msg + sizeof msg - 16;
    const char *what = zli_comm_waiting;
    p = put_str(p, end, "zlua: rank ");
    p = put_int(p, end, g_self_rank);
    if (what) p = put_str(put_str(p, end, " in "), end, what);
    p = put_str(p, end, ": ");
    if (pick_ended(note, sizeof note) >= 0 && note[0]) {
        p = put_str(p, end, note);
        lost = 1;
    } else {
        p = put_str(p, end, "lost");
        for (int k = 0; k < n; k++) {
            if (!process_ended(g_local_pid[k], g_local_start[k])) continue;
            p = put_str(p, end, lost++ ? ", rank " : " rank ");
            p = put_int(p, end, g_local_rank[k]);
            p = put_str(p, end, " (process ");
            p = put_int(p, end, g_local_pid[k]);
            p = put_str(p, end, " ended)");
        }
    }
    if (lost) {
        p = put_str(p, msg + sizeof msg, "; stopping\n");
        ssize_t unused = write(STDERR_FILENO, msg, (size_t)(p - msg));
        (void)unused;
        _exit(1);
    }
    errno = saved;
    raise(sig);
}

/* This process's card: "" as its place when /proc cannot tell. */
static void own_card(peer_card *card)
{
    memset(card, 0, sizeof *card);
    card->pid = (int64_t)getpid();
    char state, ns[64];
    uint64_t start;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    char boot[64] = "";
    bool ok = f && fgets(boot, sizeof boot, f);
    if (f) fclose(f);
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (!ok || n <= 0 || read_stat(0, &state, &start) < 0) return;
    ns[n] = '\0';
    boot[strcspn(boot, "\n")] = '\0';
    snprintf(card->place, sizeof card->place, "%s %s", boot, ns);
    card->start = start;
}

void zli_peers_drop(void)
{
    if (g_on_sigterm) {
        struct sigaction cur;
        if (sigaction(SIGTERM, NULL, &cur) == 0 && cur.sa_handler == on_sigterm) signal(SIGTERM, SIG_DFL);
        g_on_sigterm = false;
    }
    g_nlocal = 0;
    free(g_local_rank);
    free(g_local_pid);
    free(g_local_start);
    g_local_rank = NULL;
    g_local_pid = NULL;
    g_local_start = NULL;
}

/* Collective: every open exchanges the cards (so the ranks' calls match), the
 * first one keeps the peers on this machine and takes SIGTERM unless the host
 * handles it itself. */
zl_status zli_peers_meet(MPI_Comm comm, int rank, int size)
{
    peer_card mine, *all = malloc((size_t)size * sizeof *all);
    if (!all) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    own_card(&mine);
    int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return zli_mpi_fail(rc, "comm mpi: MPI_Allgather", rank);
    }
    if (!g_local_rank) {
        g_self_rank = rank;
        find_note_dir();
    }
    if (g_local_rank || !mine.place[0]) {
        free(all);
        return ZL_OK;
    }
    int n = 0;
    for (int r = 0; r < size; r++) n += r != rank && strcmp(all[r].place, mine.place) == 0;
    g_local_rank = malloc((size_t)(n ? n : 1) * sizeof *g_local_rank);
    g_local_pid = malloc((size_t)(n ? n : 1) * sizeof *g_local_pid);
    g_local_start = malloc((size_t)(n ? n : 1) * sizeof *g_local_start);
    if (!g_local_rank || !g_local_pid || !g_local_start) {
        free(all);
        zli_peers_drop();
        return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    }
    int k = 0;
    for (int r = 0; r < size; r++)
        if (r != rank && strcmp(all[r].place, mine.place) == 0) {
            g_local_rank[k] = r;
            g_local_pid[k] = (pid_t)all[r].pid;
            g_local_start[k] = all[r].start;
            k++;
        }
    free(all);
    g_nlocal = n;
    struct sigaction old;
    if (n > 0 && sigaction(SIGTERM, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
        struct sigaction act = {.sa_handler = on_sigterm, .sa_flags = SA_RESETHAND | SA_RESTART};
        sigemptyset(&act.sa_mask);
        g_on_sigterm = sigaction(SIGTERM, &act, NULL) == 0;
    }
    return ZL_OK;
}
