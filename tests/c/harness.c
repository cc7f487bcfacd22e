/* Implementation of the test harness declared in harness.h. */
#include <stdarg.h>
#include <stdlib.h>
#include "harness.h"

#define MAX_TESTS 512
static struct { const char *name; zt_fn fn; } tests[MAX_TESTS];
static int ntests, current_failures;

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

zl_tensor *zt_randn(int ndim, const int64_t *shape) { return zl_tensor_randn(ZL_DTYPE_F32, ndim, shape, NULL); }

zl_tensor *zt_from(int ndim, const int64_t *shape, const float *data)
{
    return zl_tensor_from_data(ZL_DTYPE_F32, ndim, shape, data);
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    zl_manual_seed(1234);
    for (int i = 0; i < ntests; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        current_failures = 0;
        tests[i].fn();
        if (current_failures) { printf("FAIL %s\n", tests[i].name); failed++; }
        else { printf("ok   %s\n", tests[i].name); passed++; }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0 ? 1 : 0;
}
