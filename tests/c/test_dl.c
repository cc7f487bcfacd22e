/* core/dl.c, which opens cuBLASLt and NCCL at run time, on a library every
 * machine has (zlib): the first path that opens wins, each failure is named,
 * and a missing function is named with its library. */
#include "harness.h"
#include "../../engine/core/dl.h"

TEST(first_path_that_opens)
{
    char why[512];
    const char *paths[3] = {"/nonexistent/libzlua_nothing.so", NULL, "libz.so.1"};
    void *lib = zli_dl_open_first(paths, 3, why, sizeof why);
    CHECK(lib != NULL);
    void *fn = NULL;
    CHECK(zli_dl_sym(lib, "libz.so.1", "zlibVersion", &fn, why, sizeof why) && fn != NULL);
    CHECK(!zli_dl_sym(lib, "libz.so.1", "zl_no_such_function", &fn, why, sizeof why) && fn == NULL);
    CHECK(strstr(why, "libz.so.1 has no zl_no_such_function: ") == why);
}

TEST(every_failure_named)
{
    char why[512];
    const char *paths[2] = {"/nonexistent/a.so", "/nonexistent/b.so"};
    CHECK(zli_dl_open_first(paths, 2, why, sizeof why) == NULL);
    char *a = strstr(why, "/nonexistent/a.so"), *sep = strstr(why, "; "), *b = strstr(why, "/nonexistent/b.so");
    CHECK(a && sep && b && a < sep && sep < b);
    char tiny[8];
    CHECK(zli_dl_open_first(paths, 2, tiny, sizeof tiny) == NULL && strlen(tiny) < sizeof tiny);
}
