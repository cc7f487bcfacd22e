/* Folder operations checkpoints need: make a path, remove a tree, rename or
 * swap two names with the parent folder fsynced. Linux (renameat2 for the
 * swap); every error names the path. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/fs.h>
#include "zlua/io.h"

static zl_status sync_parent(const char *path, const char *what);

zl_status zl_fs_mkdirs(const char *path)
{
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
    if (!path || !*path) return zl_error(ZL_EINVAL, "remove_tree: empty path");
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? ZL_OK : zl_error(ZL_EIO, "cannot remove '%s': %s", path, strerror(errno));
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return zl_error(ZL_EIO, "cannot remove '%s': %s", path, strerror(errno));
    return ZL_OK;
}

zl_status zl_fs_rename(const char *from, const char *to)
{
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
