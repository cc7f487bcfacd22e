/* What the fuzz targets share (tests/fuzz): the input as a file, since the
 * readers take a path, and a folder of the process's own for a target that
 * reads several files. A fault of the harness itself aborts with a message,
 * so that it is never mistaken for a finding quietly passed over. */
#ifndef ZLUA_FUZZ_H
#define ZLUA_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* The path of an in-memory file (a memfd, read back through /proc/self/fd/N)
 * now holding exactly data[0 .. size). One file per process, rewritten by each
 * call; it vanishes when the process ends. */
const char *fuzz_file(const uint8_t *data, size_t size);

/* A folder made once per process under $TMPDIR (or /tmp), removed with what
 * it holds when the process exits. */
const char *fuzz_dir(void);

/* Write data[0 .. size) to dir/name, replacing it. */
void fuzz_write(const char *dir, const char *name, const void *data, size_t size);

/* After a reader failed on the input at `path`: zl_last_error() must name
 * the file (every reader's message does), else abort naming the op. */
void fuzz_expect_error(const char *op, const char *path);

/* After every tensor was released: the engine's memory accounting must be
 * back at zero in every category, else abort naming the category (a tensor
 * leaked on some path, which LeakSanitizer would see only at exit). */
void fuzz_expect_no_tensors(void);

/* Print "fuzz harness: <what>" and abort. */
_Noreturn void fuzz_die(const char *what, ...) __attribute__((format(printf, 1, 2)));

#endif
