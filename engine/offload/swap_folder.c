/* The swap folder of swap.h: <nvme_path>/zlua_swap/<sub>, emptied at the start
 * of a run, and the marker file that says zlua made it, so that a folder made
 * by someone else is never emptied. */
#define _GNU_SOURCE
#include "swap.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "zlua/io.h"

#define SWAP_MARKER ".zlua_swap"

static const char marker_text[] =
    "zlua made this folder for offload swap files; it empties it at the start of every run.\n";

/* dir/name into path (PATH_MAX bytes); false when too long. */
static bool join(char *path, const char *dir, const char *name)
{
    int len = snprintf(path, PATH_MAX, "%s/%s", dir, name);
    return len >= 0 && len < PATH_MAX;
}

static zl_status write_marker(const char *dir, const char *what)
{
    char path[PATH_MAX];
    if (!join(path, dir, SWAP_MARKER)) return zl_error(ZL_EINVAL, "%s: the swap folder %s: path too long", what, dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write(fd, marker_text, sizeof marker_text - 1) == (ssize_t)(sizeof marker_text - 1);
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) return zl_error(ZL_EIO, "%s: cannot write the swap folder's marker %s: %s", what, path, strerror(err));
    return ZL_OK;
}

/* mkdir one folder; *made says whether this call made it. */
static zl_status make_one(const char *dir, const char *what, bool *made)
{
    *made = mkdir(dir, 0777) == 0;
    if (!*made && errno != EEXIST)
        return zl_error(ZL_EIO, "%s: cannot create the swap folder %s: %s", what, dir, strerror(errno));
    struct stat st;
    if (!*made && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        return zl_error(ZL_EIO, "%s: cannot use the swap folder %s: it exists and is not a folder", what, dir);
    return *made ? write_marker(dir, what) : ZL_OK;
}

/* Remove everything in dir but the marker, after checking that it is there
 * whenever there is anything to remove. */
static zl_status empty_folder(const char *dir, const char *what)
{
    DIR *d = opendir(dir);
    if (!d) return zl_error(ZL_EIO, "%s: cannot open the swap folder %s: %s", what, dir, strerror(errno));
    bool marked = false, others = false;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!strcmp(e->d_name, SWAP_MARKER)) marked = true;
        else others = true;
    }
    zl_status st = ZL_OK;
    if (others && !marked)
        st = zl_error(ZL_EIO, "%s: the swap folder %s is not empty and zlua did not make it (no " SWAP_MARKER
                      " marker), so it is left alone; empty or remove it, or choose another nvme_path", what, dir);
    rewinddir(d);
    char path[PATH_MAX];
    while (!st && others && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, SWAP_MARKER)) continue;
        if (!join(path, dir, e->d_name)) {
            st = zl_error(ZL_EINVAL, "%s: cannot empty the swap folder %s: %s: name too long", what, dir, e->d_name);
        } else if (zl_fs_remove_tree(path)) {
            char msg[768];
            snprintf(msg, sizeof msg, "%s", zl_last_error());
            st = zl_error(ZL_EIO, "%s: cannot empty the swap folder %s: %s", what, dir, msg);
        }
    }
    closedir(d);
    return st;
}

/* No empty name, no leading '/', no ".." component. */
static bool sub_ok(const char *sub)
{
    if (!*sub || *sub == '/') return false;
    for (const char *p = sub; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') return false;
        p += n;
        p += *p == '/';
    }
    return true;
}

zl_status zli_swap_folder(const char *nvme_path, const char *sub, const char *what, char *out, size_t n)
{
    what = what && *what ? what : "swap";
    if (!out || n == 0) return zl_error(ZL_EINVAL, "%s: swap folder: no room for the path", what);
    *out = '\0';
    if (!nvme_path || !*nvme_path) return zl_error(ZL_EINVAL, "%s.nvme_path is empty", what);
    if (!sub || !sub_ok(sub))
        return zl_error(ZL_EINVAL, "%s: swap folder '%s' under %s/zlua_swap: must be a relative path without '..'",
                        what, sub ? sub : "(null)", nvme_path);
    char dir[PATH_MAX];
    int len = snprintf(dir, sizeof dir, "%s/zlua_swap/%s", nvme_path, sub);
    if (len < 0 || (size_t)len >= sizeof dir || (size_t)len >= n)
        return zl_error(ZL_EINVAL, "%s: the swap folder %s/zlua_swap/%s: path too long", what, nvme_path, sub);
    if (zl_fs_mkdirs(nvme_path)) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", zl_last_error());
        return zl_error(ZL_EIO, "%s: cannot prepare the swap folder %s: %s", what, dir, msg);
    }
    /* zlua_swap, then each folder of sub, each marked when made here. */
    bool made = false;
    for (char *p = dir + strlen(nvme_path) + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        zl_status st = make_one(dir, what, &made);
        *p = c;
        if (st) return st;
        if (!c) break;
    }
    zl_status st = made ? ZL_OK : empty_folder(dir, what);
    if (!st) memcpy(out, dir, (size_t)len + 1);
    return st;
}
