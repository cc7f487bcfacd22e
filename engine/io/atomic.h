/* Private to engine/io: a file replaced atomically. Bytes go to a temporary
 * file beside the target; commit fsyncs it, renames it over the target and
 * fsyncs the directory, so a reader (or a crash) sees the old file or the new
 * one, never a mixture. Any failure removes the temporary and leaves the old file. */
#ifndef ZL_IO_ATOMIC_H
#define ZL_IO_ATOMIC_H

#include "../core/tensor_impl.h"

typedef struct zli_atomic {
    char *path;            /* the target */
    char *tmp;             /* the temporary: "<path>.tmp.<pid>.<n>" */
    int fd;                /* -1 once committed or aborted */
    int64_t written;       /* bytes written so far, for messages */
} zli_atomic;

/* Create the temporary for `path` (mode 0666 less the umask, as a plain
 * creat would give). Errors: "cannot write '<path>': cannot create the
 * temporary file '<tmp>': <strerror>". On failure *a needs no abort. */
ZLI_HIDDEN zl_status zli_atomic_open(zli_atomic *a, const char *path);
/* Append n bytes. A failure (ENOSPC, EIO, EFBIG, Ctrl-C) aborts the file and
 * says so: "cannot write '<path>': <strerror> at byte N of the temporary
 * '<tmp>' (removed; '<path>' is unchanged)". */
ZLI_HIDDEN zl_status zli_atomic_write(zli_atomic *a, const void *p, size_t n);
/* fsync, close, rename over the target, fsync the directory. Ends the file
 * whatever the outcome; on failure before the rename the old file stays. */
ZLI_HIDDEN zl_status zli_atomic_commit(zli_atomic *a);
/* Close and remove the temporary; a no-op once committed or aborted. */
ZLI_HIDDEN void zli_atomic_abort(zli_atomic *a);

#endif
