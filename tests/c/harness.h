/* The C test harness: TEST() registers a function, CHECK* record failures with
 * file:line and keep going, main() runs the tests whose names contain an
 * argument (all without one; "!x" leaves out those containing x) and prints
 * "N passed, N failed, N skipped"; the exit status is 1 on any failure, 77
 * (CTest's skip) when every test run skipped. A test that needs what this
 * machine lacks calls zt_skip and returns; it is registered in CTest on its
 * own (tests/CMakeLists.txt), so its skip shows as a skip, never a pass. */
#ifndef ZL_TEST_HARNESS_H
#define ZL_TEST_HARNESS_H

#include <stdio.h>
#include <string.h>
#include <math.h>
#include "zlua/zlua.h"

typedef void (*zt_fn)(void);
void zt_register(const char *name, zt_fn fn);
void zt_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int zt_failures_in_current(void);
/* The running test could not run here, for the reason given: it counts as skipped. */
void zt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TEST(name)                                                            \
    static void test_##name(void);                                            \
    __attribute__((constructor)) static void reg_##name(void) { zt_register(#name, test_##name); } \
    static void test_##name(void)

#define CHECK(cond)                                                           \
    do { if (!(cond)) zt_fail(__FILE__, __LINE__, "CHECK(%s) failed; last error: %s", #cond, zl_last_error()); } while (0)
#define CHECK_CLOSE(a, b, tol)                                                \
    do { double a_ = (a), b_ = (b);                                           \
         if (!(fabs(a_ - b_) <= (tol) * (1.0 + fabs(b_))))                    \
             zt_fail(__FILE__, __LINE__, "%s = %.9g, expected %s = %.9g (tol %g)", #a, a_, #b, b_, (double)(tol)); } while (0)
/* The call must fail with status/NULL and an error message containing `needle`. */
#define CHECK_ERR(expr, needle)                                               \
    do { zl_clear_error(); (void)(expr);                                      \
         if (!strstr(zl_last_error(), (needle)))                              \
             zt_fail(__FILE__, __LINE__, "%s: expected an error containing \"%s\", got \"%s\"", #expr, (needle), zl_last_error()); } while (0)

/* A path for `name` inside this run's own temporary folder (made on first use
 * under $TMPDIR or /tmp, removed with everything in it at exit); buf holds it. */
const char *zt_tmp_path(char *buf, size_t n, const char *name);
/* That folder itself. */
const char *zt_tmp_dir(void);
/* Remove the folder and everything in it; the next zt_tmp_path makes a new one. */
void zt_tmp_reset(void);
/* Write n bytes to path, recording a failure if it cannot. */
void zt_write_file(const char *path, const void *data, size_t n);

/* Handy constructors for tests. */
zl_tensor *zt_randn(int ndim, const int64_t *shape);
zl_tensor *zt_from(int ndim, const int64_t *shape, const float *data);
#define SHAPE(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

#endif
