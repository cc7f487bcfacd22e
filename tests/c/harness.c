/* Implementation of the test harness declared in harness.h. */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "harness.h"

#define MAX_TESTS 512
static struct { const char *name; zt_fn fn; } tests[MAX_TESTS];
static int ntests, current_failures;
static const char *current_skip;   /* why the running test skipped, or NULL */

void zt_register(const char *name, zt_fn fn)
{
    if (ntests < MAX_TESTS) { tests[ntests].name = name; tests[ntests].fn = fn; ntests++; }
}

void zt_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    current_failures++;
}

int zt_failures_in_current(void) { return current_failures; }

void zt_skip(const char *fmt, ...)
{
    static char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    current_skip = why;
}

static char tmpdir[256];

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void remove_tmpdir(void)
{
    if (tmpdir[0]) nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *zt_tmp_path(char *buf, size_t n, const char *name)
{
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/zlua_test_XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            zt_fail(__FILE__, __LINE__, "cannot create %s", tmpdir);
            tmpdir[0] = '\0';
            return strcpy(buf, "");
        }
        static bool registered;
        if (!registered) atexit(remove_tmpdir);
        registered = true;
    }
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

void zt_tmp_reset(void)
{
    remove_tmpdir();
    tmpdir[0] = '\0';
}

const char *zt_tmp_dir(void)
{
    char unused[8];
    zt_tmp_path(unused, sizeof unused, "");
    return tmpdir;
}

void zt_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) zt_fail(__FILE__, __LINE__, "cannot write %s", path);
    if (f) fclose(f);
}

zl_tensor *zt_randn(int ndim, const int64_t *shape) { return zl_tensor_randn(ZL_DTYPE_F32, ndim, shape, NULL); }

zl_tensor *zt_from(int ndim, const int64_t *shape, const float *data)
{
    return zl_tensor_from_data(ZL_DTYPE_F32, ndim, shape, data);
}

/* Whether the test `name` runs under the arguments: each names tests by a
 * substring; "!x" leaves out those containing x; with no plain argument,
 * every test not left out runs. */
static bool selected(const char *name, int argc, char **argv)
{
    bool any = false, hit = false;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '!') {
            if (strstr(name, argv[i] + 1)) return false;
        } else {
            any = true;
            hit = hit || strstr(name, argv[i]);
        }
    }
    return !any || hit;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0;
    zl_manual_seed(1234);
    for (int i = 0; i < ntests; i++) {
        if (!selected(tests[i].name, argc, argv)) continue;
        current_failures = 0;
        current_skip = NULL;
        tests[i].fn();
        if (current_failures) { printf("FAIL %s\n", tests[i].name); failed++; }
        else if (current_skip) { printf("skip %s: %s\n", tests[i].name, current_skip); skipped++; }
        else { printf("ok   %s\n", tests[i].name); passed++; }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    /* Only skips: CTest's skip (SKIP_RETURN_CODE 77), never a pass. */
    if (failed) return 1;
    if (passed == 0) return skipped ? 77 : 1;
    return 0;
}
