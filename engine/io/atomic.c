/* Atomic replacement of a file (temporary beside it, fsync, rename, fsync of
 * the directory) and zl_file_write_atomic, its one-call form for small files
 * such as a checkpoint's `latest` or its JSON state. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "atomic.h"
#include "regular.h"
#include "zlua/safetensors.h"

/* The most one write(2) is given: Linux moves at most about 2 GiB per call,
 * and Ctrl-C is polled between calls. */
#define WRITE_MAX ((size_t)1 << 26)
/* Names tried before giving up when temporaries of that name already exist. */
#define TMP_TRIES 100

/* Distinguishes the temporaries of one process (threads, or a writer per rank file). */
static _Atomic unsigned tmp_serial;

zl_status zli_atomic_open(zli_atomic *a, const char *path)
{
    *a = (zli_atomic){.fd = -1};
    if (!path || !*path) return zl_error(ZL_EINVAL, "cannot write a file: the path is %s", path ? "empty" : "NULL");
    size_t n = strlen(path) + 64;
    a->path = strdup(path);
    a->tmp = malloc(n);
    if (!a->path || !a->tmp) {
        free(a->path);
        free(a->tmp);
        *a = (zli_atomic){.fd = -1};
        return zl_error(ZL_ENOMEM, "cannot write '%s': out of memory", path);
    }
    for (int i = 0; i < TMP_TRIES; i++) {
        snprintf(a->tmp, n, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&tmp_serial, 1));
        a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (a->fd >= 0 || errno != EEXIST) break;
    }
    if (a->fd < 0) {
        zl_status e = zl_error(ZL_EIO, "cannot write '%s': cannot create the temporary file '%s': %s", path,
                               a->tmp, strerror(errno));
        free(a->path);
        free(a->tmp);
        *a = (zli_atomic){.fd = -1};
        return e;
    }
    return ZL_OK;
}

static void atomic_free(zli_atomic *a)
{
    free(a->path);
    free(a->tmp);
    *a = (zli_atomic){.fd = -1};
}

void zli_atomic_abort(zli_atomic *a)
{
    if (a->fd < 0) return;
    close(a->fd);
    unlink(a->tmp);
    atomic_free(a);
}

/* Abort with the message of a failed step; errno is read before the cleanup. */
static zl_status fail(zli_atomic *a, const char *what)
{
    int err = errno;
    zl_status code = err == EINTR && zl_interrupt_pending() ? ZL_EINTERRUPT : ZL_EIO;
    const char *reason = code == ZL_EINTERRUPT ? "interrupted" : strerror(err);
    zl_error(code, "cannot write '%s': %s %s byte %lld of the temporary '%s' (removed; '%s' is unchanged)",
             a->path, reason, what, (long long)a->written, a->tmp, a->path);
    zli_atomic_abort(a);
    return code;
}

zl_status zli_atomic_write(zli_atomic *a, const void *p, size_t n)
{
    if (a->fd < 0) return zl_error(ZL_ESTATE, "cannot write: the file was already committed or aborted");
    const char *c = p;
    while (n > 0) {
        if (zl_interrupt_pending()) {
            errno = EINTR;
            return fail(a, "at");
        }
        ssize_t w = write(a->fd, c, n < WRITE_MAX ? n : WRITE_MAX);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return fail(a, "at");
        }
        c += w;
        n -= (size_t)w;
        a->written += w;
    }
    return ZL_OK;
}

/* The directory holding `path`, so the rename itself is made durable. A
 * failure here comes after the rename: the new file is in place, but a crash
 * could still bring back the old one, which the caller is told. */
static zl_status sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return zl_error(ZL_ENOMEM, "'%s' was written, but out of memory syncing its directory", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    zl_status st = ZL_OK;
    if (fd < 0 || fsync(fd) != 0)
        st = zl_error(ZL_EIO, "'%s' was written, but syncing its directory '%s' failed: %s", path, dir,
                      strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return st;
}

zl_status zli_atomic_commit(zli_atomic *a)
{
    if (a->fd < 0) return zl_error(ZL_ESTATE, "cannot commit: the file was already committed or aborted");
    if (fsync(a->fd) != 0) return fail(a, "syncing, after");
    int fd = a->fd;
    a->fd = -1;
    if (close(fd) != 0) {
        int err = errno;
        unlink(a->tmp);
        zl_error(ZL_EIO, "cannot write '%s': %s closing the temporary '%s' (removed; '%s' is unchanged)", a->path,
                 strerror(err), a->tmp, a->path);
        atomic_free(a);
        return ZL_EIO;
    }
    if (rename(a->tmp, a->path) != 0) {
        int err = errno;
        unlink(a->tmp);
        zl_error(ZL_EIO, "cannot write '%s': renaming the temporary '%s' over it failed: %s ('%s' is unchanged)",
                 a->path, a->tmp, strerror(err), a->path);
        atomic_free(a);
        return ZL_EIO;
    }
    zl_status st = sync_dir(a->path);
    atomic_free(a);
    return st;
}

zl_status zl_file_write_atomic(const char *path, const void *bytes, size_t n)
{
    zli_fs_step();
    if (n && !bytes) return zl_error(ZL_EINVAL, "cannot write '%s': %zu bytes from NULL", path ? path : "(null)", n);
    zli_atomic a;
    zl_status st = zli_atomic_open(&a, path);
    if (!st) st = zli_atomic_write(&a, bytes, n);
    if (!st) st = zli_atomic_commit(&a);
    return st;
}
