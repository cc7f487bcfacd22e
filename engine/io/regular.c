/* Opening only regular files (regular.h), and the two whole-file reads built on
 * it: a small file read with a bound on its size (a checkpoint's `latest` and
 * engine.json, a config) and a file's CRC-32 (a checkpoint's manifest). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "regular.h"
#include "zlua/io.h"

/* The most one read(2) is given, so Ctrl-C is polled between calls. */
#define READ_CHUNK ((size_t)1 << 20)

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a plain file";
}

static zl_status not_regular(const char *path, mode_t m)
{
    return zl_error(ZL_EIO, "cannot read '%s': it is %s, not a regular file", path, kind_of(m));
}

zl_status zli_open_regular(const char *path, unsigned flags, int *fd, int64_t *size)
{
    *fd = -1;
    if (!path || !*path) return zl_error(ZL_EINVAL, "cannot open a file: the path is %s", path ? "empty" : "NULL");
    bool nofollow = flags & ZLI_OPEN_NOFOLLOW;
    /* The kind first: opening a FIFO blocks, and a device's open can act. */
    struct stat st;
    if ((nofollow ? lstat(path, &st) : stat(path, &st)) != 0)
        return zl_error(ZL_EIO, "cannot open '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode);
    /* O_NONBLOCK: should the name be swapped for a FIFO in between, the open
     * still returns, and the check on the descriptor refuses it. */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
    if (f < 0) {
        if (nofollow && errno == ELOOP) return not_regular(path, S_IFLNK);
        return zl_error(ZL_EIO, "cannot open '%s': %s", path, strerror(errno));
    }
    if (fstat(f, &st) != 0) {
        zl_status e = zl_error(ZL_EIO, "cannot read '%s': %s", path, strerror(errno));
        close(f);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return not_regular(path, st.st_mode);
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        zl_status e = zl_error(ZL_EIO, "cannot read '%s': %s", path, strerror(errno));
        close(f);
        return e;
    }
    *fd = f;
    if (size) *size = (int64_t)st.st_size;
    return ZL_OK;
}

/* Up to n bytes at the file position; *got < n only at the end. */
static zl_status read_some(int fd, const char *path, unsigned char *buf, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        if (zl_interrupt_pending()) return zl_error(ZL_EINTERRUPT, "interrupted reading '%s'", path);
        size_t want = n - *got < READ_CHUNK ? n - *got : READ_CHUNK;
        ssize_t r = read(fd, buf + *got, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return zl_error(ZL_EIO, "cannot read '%s': %s at offset %zu", path, strerror(errno), *got);
        if (r == 0) break;
        *got += (size_t)r;
    }
    return ZL_OK;
}

zl_status zl_fs_read_file(const char *path, size_t max, bool nofollow, char **out, size_t *len)
{
    zli_fs_step();
    if (!out || !len) return zl_error(ZL_EINVAL, "read_file: out and len must not be NULL");
    *out = NULL;
    *len = 0;
    int fd;
    int64_t size;
    zl_status st = zli_open_regular(path, nofollow ? ZLI_OPEN_NOFOLLOW : 0, &fd, &size);
    if (st) return st;
    if ((uint64_t)size > max) {
        close(fd);
        return zl_error(ZL_EFORMAT, "'%s' is %lld bytes, more than the %zu such a file may have", path,
                        (long long)size, max);
    }
    /* One byte beyond the size seen tells a file that grew since the stat. */
    unsigned char *buf = malloc((size_t)size + 2);
    if (!buf) {
        close(fd);
        return zl_error(ZL_ENOMEM, "out of memory reading '%s' (%lld bytes)", path, (long long)size);
    }
    size_t got;
    st = read_some(fd, path, buf, (size_t)size + 1, &got);
    close(fd);
    if (!st && got > max)
        st = zl_error(ZL_EFORMAT, "'%s' grew past %zu bytes while it was read", path, max);
    if (st) {
        free(buf);
        return st;
    }
    buf[got] = '\0';
    *out = (char *)buf;
    *len = got;
    return ZL_OK;
}

zl_status zl_fs_file_crc32(const char *path, bool nofollow, uint32_t *crc, int64_t *bytes)
{
    zli_fs_step();
    if (!crc || !bytes) return zl_error(ZL_EINVAL, "file_crc32: crc and bytes must not be NULL");
    int fd;
    zl_status st = zli_open_regular(path, nofollow ? ZLI_OPEN_NOFOLLOW : 0, &fd, NULL);
    if (st) return st;
    unsigned char *buf = malloc(READ_CHUNK);
    if (!buf) {
        close(fd);
        return zl_error(ZL_ENOMEM, "out of memory reading '%s'", path);
    }
    uLong c = crc32(0L, Z_NULL, 0);
    int64_t total = 0;
    for (;;) {
        size_t got;
        st = read_some(fd, path, buf, READ_CHUNK, &got);
        if (st || got == 0) break;
        c = crc32(c, buf, (uInt)got);
        total += (int64_t)got;
        if (got < READ_CHUNK) break;
    }
    free(buf);
    close(fd);
    if (st) return st;
    *crc = (uint32_t)c;
    *bytes = total;
    return ZL_OK;
}
