/* Folder operations checkpoints need: make a path, remove a tree, rename or
 * swap two names with the parent folder fsynced, and mark and sweep the
 * temporary folders of saves. Linux (renameat2 for the swap); every error
 * names the path. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/fs.h>
#include "regular.h"
#include "zlua/io.h"
#include "zlua/safetensors.h"

static zl_status sync_parent(const char *path, const char *what);

/* Testing a crash at each step of a checkpoint's save: the calls counted,
 * and the kill where one is set. */
static _Atomic int64_t g_calls, g_kill_at;

void zli_fs_step(void)
{
    int64_t n = atomic_fetch_add(&g_calls, 1) + 1, at = atomic_load(&g_kill_at);
    if (at > 0 && n >= at) raise(SIGKILL);
}

void zl_fs_kill_after(int64_t n) { atomic_store(&g_kill_at, n > 0 ? atomic_load(&g_calls) + n : 0); }

int64_t zl_fs_calls(void) { return atomic_load(&g_calls); }

zl_status zl_fs_mkdirs(const char *path)
{
    zli_fs_step();
    if (!path || !*path) return zl_error(ZL_EINVAL, "mkdirs: empty path");
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof buf) return zl_error(ZL_EINVAL, "mkdirs: path too long: '%s'", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return zl_error(ZL_EIO, "cannot create folder '%s': %s", buf, strerror(errno));
            *p = c;
        }
        if (end) break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return zl_error(ZL_EIO, "cannot create folder '%s': a file of that name exists", path);
    return ZL_OK;
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(p) != 0 && errno != ENOENT ? -1 : 0;
}

zl_status zl_fs_remove_tree(const char *path)
{
    zli_fs_step();
    if (!path || !*path) return zl_error(ZL_EINVAL, "remove_tree: empty path");
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? ZL_OK : zl_error(ZL_EIO, "cannot remove '%s': %s", path, strerror(errno));
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return zl_error(ZL_EIO, "cannot remove '%s': %s", path, strerror(errno));
    return ZL_OK;
}

zl_status zl_fs_rename(const char *from, const char *to)
{
    zli_fs_step();
    if (!from || !to) return zl_error(ZL_EINVAL, "rename: NULL path");
    if (rename(from, to) != 0)
        return zl_error(ZL_EIO, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
    return sync_parent(to, "a rename");
}

static zl_status sync_parent(const char *path, const char *what)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == path) strcpy(dir, "/");
    else if (slash && (size_t)(slash - path) < sizeof dir) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    } else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        zl_status e = zl_error(ZL_EIO, "cannot sync folder '%s' after %s: %s", dir, what, strerror(errno));
        if (fd >= 0) close(fd);
        return e;
    }
    close(fd);
    return ZL_OK;
}

zl_status zl_fs_exchange(const char *a, const char *b)
{
    zli_fs_step();
    if (!a || !b) return zl_error(ZL_EINVAL, "exchange: NULL path");
    if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0)
        return zl_error(ZL_EIO, "cannot exchange '%s' and '%s': %s", a, b, strerror(errno));
    return sync_parent(b, "an exchange");
}

bool zl_fs_exists(const char *path)
{
    struct stat st;
    return path && lstat(path, &st) == 0;
}

/* A temporary folder's marker: "<folder>.owner" beside it, holding who made
 * the folder, so that a later sweep can tell a save still running (here or on
 * another host) from one that was killed. It is written before the folder is
 * made and removed after the folder is gone (renamed into place or removed),
 * so a save killed at any moment leaves a marker whenever it leaves a folder. */
#define MARK_SUFFIX ".owner"
#define MARK_MAX 512

static zl_status host_name(char *buf, size_t n)
{
    if (gethostname(buf, n) != 0) return zl_error(ZL_EIO, "cannot read this host's name: %s", strerror(errno));
    buf[n - 1] = '\0';
    return ZL_OK;
}

static zl_status mark_path(char *out, const char *folder)
{
    int n = snprintf(out, PATH_MAX, "%s" MARK_SUFFIX, folder);
    if (n < 0 || n >= PATH_MAX) return zl_error(ZL_EINVAL, "temporary folder path too long: '%s'", folder);
    return ZL_OK;
}

zl_status zl_fs_temp_mark(const char *folder)
{
    zli_fs_step();
    if (!folder || !*folder) return zl_error(ZL_EINVAL, "temp_mark: empty path");
    char host[256], path[PATH_MAX], text[MARK_MAX];
    zl_status st = host_name(host, sizeof host);
    if (!st) st = mark_path(path, folder);
    if (st) return st;
    int n = snprintf(text, sizeof text, "zlua-temp %s %ld\n", host, (long)getpid());
    /* One write of a few bytes: a kill leaves the whole marker or none. */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return zl_error(ZL_EIO, "cannot write the marker '%s': %s", path, strerror(errno));
    bool ok = write(fd, text, (size_t)n) == n;
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) return zl_error(ZL_EIO, "cannot write the marker '%s': %s", path, strerror(err));
    return ZL_OK;
}

zl_status zl_fs_temp_unmark(const char *folder)
{
    zli_fs_step();
    if (!folder || !*folder) return zl_error(ZL_EINVAL, "temp_unmark: empty path");
    char path[PATH_MAX];
    zl_status st = mark_path(path, folder);
    if (st) return st;
    if (unlink(path) != 0 && errno != ENOENT)
        return zl_error(ZL_EIO, "cannot remove the marker '%s': %s", path, strerror(errno));
    return ZL_OK;
}

/* Whether the marker at `path` names this host and a pid that no longer runs.
 * Anything else (another host, a live pid, a marker that does not parse, a
 * link or a FIFO in its place) is left alone. */
static bool stale(const char *path, const char *host)
{
    char *text;
    size_t len;
    if (zl_fs_read_file(path, MARK_MAX, true, &text, &len)) return false;
    char who[256];
    long pid;
    int end = 0;
    bool parsed = sscanf(text, "zlua-temp %255s %ld%n", who, &pid, &end) == 2 && pid > 0 &&
                  (size_t)end + 1 == len && text[end] == '\n';
    free(text);
    return parsed && strcmp(who, host) == 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* ".<name>.tmp-<digits>.owner": the marker of a checkpoint save's temporary. */
static bool marker_name(const char *name)
{
    size_t n = strlen(name), s = strlen(MARK_SUFFIX);
    if (name[0] != '.' || n <= s || strcmp(name + n - s, MARK_SUFFIX) != 0) return false;
    size_t d = n - s;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') d--;
    return d < n - s && d > 6 && strncmp(name + d - 5, ".tmp-", 5) == 0;
}

zl_status zl_fs_temp_sweep(const char *dir, int *removed)
{
    zli_fs_step();
    if (!dir || !*dir) return zl_error(ZL_EINVAL, "temp_sweep: empty path");
    if (removed) *removed = 0;
    char host[256];
    zl_status st = host_name(host, sizeof host);
    if (st) return st;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? ZL_OK : zl_error(ZL_EIO, "cannot list folder '%s': %s", dir, strerror(errno));
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (!marker_name(e->d_name)) continue;
        char mark[PATH_MAX], folder[PATH_MAX];
        int n = snprintf(mark, sizeof mark, "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof mark || !stale(mark, host)) continue;
        memcpy(folder, mark, (size_t)n - strlen(MARK_SUFFIX));
        folder[(size_t)n - strlen(MARK_SUFFIX)] = '\0';
        struct stat sb;
        bool there = lstat(folder, &sb) == 0;
        st = zl_fs_remove_tree(folder);
        if (!st) st = zl_fs_temp_unmark(folder);
        if (!st && there && removed) (*removed)++;
    }
    closedir(d);
    return st;
}
