/* The most memory this process may use, read anew at each call: the machine's RAM, the
 * memory cgroup's limits at the process's group and every group above it
 * (cgroup v2's memory.max, v1's memory.limit_in_bytes), RLIMIT_AS and
 * RLIMIT_DATA; the smallest wins, and says where it came from. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "memory_impl.h"

/* The answer being built, and the answer given (guarded: calls may come from
 * several threads); with it, when a cgroup's limit is the answer, the file
 * that says how much of it is in use, for zli_mem_headroom. */
static int64_t g_limit;
static char g_source[1024], g_usage[1200];
static int64_t g_found_limit;
static char g_found_usage[1200];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void take(int64_t bytes, const char *what, const char *where, const char *usage)
{
    if (bytes <= 0 || bytes >= g_limit) return;
    g_limit = bytes;
    snprintf(g_source, sizeof g_source, "%s%s%s", what, where[0] ? " of " : "", where);
    snprintf(g_usage, sizeof g_usage, "%s", usage);
}

/* A limit file's value; 0 for "max", an unlimited v1 value or none. */
static int64_t read_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || strncmp(buf, "max", 3) == 0) return 0;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    /* cgroup v1 says "no limit" with the largest page multiple below 2^63. */
    return end == buf || v >= (1ULL << 62) ? 0 : (int64_t)v;
}

/* Where the controller's hierarchy is mounted: v2's unified tree, or v1's memory tree. */
static bool mount_of(bool v2, char *out, size_t n)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        /* "... <mount point> <options> - <fs type> <source> <super options>" */
        char *dash = strstr(line, " - ");
        char point[512], fstype[32], super[256] = "";
        if (!dash || sscanf(line, "%*s %*s %*s %*s %511s", point) != 1 ||
            sscanf(dash + 3, "%31s %*s %255s", fstype, super) < 1)
            continue;
        if (v2 ? strcmp(fstype, "cgroup2") == 0
               : strcmp(fstype, "cgroup") == 0 && strstr(super, "memory") != NULL) {
            snprintf(out, n, "%s", point);
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* The limits of the process's group and of every group above it. */
static void cgroup_limits(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        bool v2 = c1[1] == '\0';
        if (!v2 && !strstr(c1 + 1, "memory")) continue;
        char root[512], group[512];
        if (!mount_of(v2, root, sizeof root)) continue;
        snprintf(group, sizeof group, "%s", c2 + 1);
        const char *file = v2 ? "memory.max" : "memory.limit_in_bytes";
        for (;;) {
            char path[1200], usage[1200];
            const char *dir = strcmp(group, "/") == 0 ? "" : group;
            snprintf(path, sizeof path, "%s%s/%s", root, dir, file);
            snprintf(usage, sizeof usage, "%s%s/%s", root, dir, v2 ? "memory.current" : "memory.usage_in_bytes");
            char where[600];
            snprintf(where, sizeof where, "the memory cgroup %s", group);
            take(read_limit(path), v2 ? "memory.max" : "memory.limit_in_bytes", where, usage);
            char *slash = strrchr(group, '/');
            if (!slash || slash == group) {
                if (strcmp(group, "/") == 0) break;
                snprintf(group, sizeof group, "/");
            } else {
                *slash = '\0';
            }
        }
    }
    fclose(f);
}

static void find(void)
{
    g_limit = zl_mem_ram();
    snprintf(g_source, sizeof g_source, "%s", "the machine's memory");
    g_usage[0] = '\0';
    cgroup_limits();
    static const struct { int res; const char *name; } rl[] = {{RLIMIT_AS, "RLIMIT_AS"}, {RLIMIT_DATA, "RLIMIT_DATA"}};
    for (size_t i = 0; i < sizeof rl / sizeof rl[0]; i++) {
        struct rlimit r;
        if (getrlimit(rl[i].res, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < (rlim_t)INT64_MAX)
            take((int64_t)r.rlim_cur, rl[i].name, "", "");
    }
}

int64_t zl_mem_limit(const char **source)
{
    static char answer[sizeof g_source];
    pthread_mutex_lock(&g_mu);
    find();
    int64_t lim = g_limit;
    memcpy(answer, g_source, sizeof answer);
    g_found_limit = lim;
    memcpy(g_found_usage, g_usage, sizeof g_found_usage);
    pthread_mutex_unlock(&g_mu);
    if (source) *source = answer;
    return lim;
}

int64_t zli_mem_headroom(int64_t *limit)
{
    pthread_mutex_lock(&g_mu);
    int64_t lim = g_found_limit, used = g_found_usage[0] ? read_limit(g_found_usage) : -1;
    pthread_mutex_unlock(&g_mu);
    *limit = lim;
    return used < 0 ? INT64_MAX : lim - used;
}

int64_t zl_mem_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (int64_t)pages * page : INT64_MAX;
}
