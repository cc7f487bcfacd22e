/* What the fuzz targets share (fuzz.h): a memfd rewritten for each input, a
 * temporary folder removed at exit, and the checks every reader must pass. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fuzz.h"
#include "zlua/zlua.h"

_Noreturn void fuzz_die(const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    fputs("fuzz harness: ", stderr);
    vfprintf(stderr, what, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static void write_all(int fd, const void *data, size_t size, const char *name)
{
    const char *p = data;
    while (size > 0) {
        ssize_t w = write(fd, p, size);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fuzz_die("cannot write %s: %s", name, strerror(errno));
        p += w;
        size -= (size_t)w;
    }
}

const char *fuzz_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("zlua-fuzz-input", MFD_CLOEXEC);
        if (fd < 0) fuzz_die("memfd_create: %s", strerror(errno));
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) fuzz_die("cannot empty the memfd: %s", strerror(errno));
    write_all(fd, data, size, "the memfd");
    return path;
}

static char dir_path[4096];

/* The folder holds only files fuzz_write put there: one level to remove. */
static void remove_dir(void)
{
    DIR *d = opendir(dir_path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    rmdir(dir_path);
}

const char *fuzz_dir(void)
{
    if (dir_path[0]) return dir_path;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    snprintf(dir_path, sizeof dir_path, "%s/zlua-fuzz.XXXXXX", tmp);
    if (!mkdtemp(dir_path)) fuzz_die("mkdtemp %s: %s", dir_path, strerror(errno));
    atexit(remove_dir);
    return dir_path;
}

void fuzz_write(const char *dir, const char *name, const void *data, size_t size)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) fuzz_die("cannot create %s: %s", path, strerror(errno));
    write_all(fd, data, size, path);
    close(fd);
}

void fuzz_expect_error(const char *op, const char *path)
{
    const char *msg = zl_last_error();
    if (!msg || !strstr(msg, path)) fuzz_die("%s failed with a message that does not name the file %s: %s", op, path,
                                             msg ? msg : "(none)");
}

void fuzz_expect_no_tensors(void)
{
    for (int c = 0; c < ZL_MEM_COUNT; c++) {
        zl_mem_stats s = zl_mem_stats_of((zl_mem_category)c);
        if (s.current != 0)
            fuzz_die("%lld bytes of %s memory are still allocated after every tensor was released",
                     (long long)s.current, zl_mem_category_name((zl_mem_category)c));
    }
}
