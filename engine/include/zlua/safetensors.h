/* zlua/safetensors.h — named tensors in .safetensors files (the format other
 * tools read), written streaming and atomically, read whole, by name or by
 * element range; and atomic replacement of small files. */
#ifndef ZLUA_SAFETENSORS_H
#define ZLUA_SAFETENSORS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the format ----
 * An 8-byte little-endian header length N, N bytes of JSON, then the data:
 *   {"__metadata__": {"key": "value", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * Offsets count bytes from the end of the header. The writer pads the header
 * with spaces so the data starts at a multiple of 8, and lays the tensors out
 * in the order given. dtypes are F32 F16 BF16 I32 I64 U8 BOOL (zlua's seven);
 * a file from another tool may hold others (F64, U16, ...), which are listed
 * but cannot be read. Data is little-endian, row-major, contiguous.
 *
 * Reading never runs anything from the file, and checks before any data is
 * read: the header length against the file's size (and 100 MB), the JSON
 * strictly (UTF-8, escapes, integers, no unknown keys, no duplicate names),
 * each tensor's byte count against its dtype and shape, and that the tensors
 * tile the data exactly: no overlap, no gap, nothing after the last one.
 * Every message starts with the path and names the tensor and the offset. */

/* One tensor of a file. Filled by the reader; the writer reads only name,
 * dtype, ndim and shape. Strings are borrowed from the open file. */
typedef struct zl_safetensors_entry {
    const char *name;
    zl_dtype dtype;            /* ZL_DTYPE_COUNT when zlua has no such dtype */
    const char *dtype_name;    /* as in the file: "F32", "BF16", "F64", ... */
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    int64_t numel;
    int64_t offset;            /* of its first byte, from the start of the file */
    int64_t nbytes;
} zl_safetensors_entry;

/* One __metadata__ pair (string to string). */
typedef struct zl_safetensors_meta {
    const char *key;
    const char *value;
} zl_safetensors_meta;

/* ---- reading ---- */

typedef struct zl_safetensors zl_safetensors;   /* an open file whose header passed every check */

/* Open and check `path`; the file stays open until zl_safetensors_close.
 * NULL with zl_last_error() ("cannot open '<path>': ...", or "<path>: ..." for
 * a bad file). */
ZL_API zl_safetensors *zl_safetensors_open(const char *path);
ZL_API void zl_safetensors_close(zl_safetensors *f);   /* NULL is a no-op */
/* Borrowed; valid until close. */
ZL_API const char *zl_safetensors_path(const zl_safetensors *f);
/* Tensors in the order of their data in the file; i in 0 .. count-1 (NULL and
 * an error otherwise, as for metadata_at). */
ZL_API int zl_safetensors_count(const zl_safetensors *f);
ZL_API const zl_safetensors_entry *zl_safetensors_entry_at(const zl_safetensors *f, int i);
/* The entry named `name`, or NULL (no error set). */
ZL_API const zl_safetensors_entry *zl_safetensors_find(const zl_safetensors *f, const char *name);
/* Metadata pairs in the file's order; zl_safetensors_metadata_get is NULL for
 * a key that is absent. */
ZL_API int zl_safetensors_metadata_count(const zl_safetensors *f);
ZL_API const zl_safetensors_meta *zl_safetensors_metadata_at(const zl_safetensors *f, int i);
ZL_API const char *zl_safetensors_metadata_get(const zl_safetensors *f, const char *key);

/* The tensor `name` as a new contiguous tensor of its dtype and shape charged
 * to `cat`. Errors: "<path>: no tensor named 'x'", a dtype zlua lacks, a BOOL
 * byte other than 0 or 1, a read error or a file cut short since it was opened. */
ZL_API zl_tensor *zl_safetensors_read(zl_safetensors *f, const char *name, zl_mem_category cat);
/* Elements [start, start + numel(dst)) of `name`, counted in row-major order,
 * into dst: a contiguous CPU tensor of the same dtype, any shape. This is how a
 * rank reads its slice of another world size's shard without the rest. */
ZL_API zl_status zl_safetensors_read_into(zl_safetensors *f, const char *name, int64_t start, zl_tensor *dst);

/* ---- writing ----
 * The header is written first, from the entries declared; then the data is
 * appended in that order, as whole tensors or in pieces, so a file larger than
 * memory is written with only the piece at hand in memory. Nothing replaces
 * `path` until commit: the bytes go to "<path>.tmp.<pid>.<n>", which commit
 * fsyncs and renames over `path` before fsyncing the directory. A failed
 * write (disk full, I/O error, Ctrl-C) removes the temporary and leaves the old
 * file as it was, and the message names both. A process killed mid-write
 * leaves the old file and a stale temporary. */

typedef struct zl_safetensors_writer zl_safetensors_writer;

/* Start writing n tensors (names unique, valid UTF-8, not "__metadata__";
 * dtypes zlua's; at most ZL_MAX_DIMS sizes >= 0) and nmeta metadata pairs
 * (UTF-8, keys unique), in that order. NULL with zl_last_error() on a bad
 * entry (named by index and name) or when the temporary cannot be created. */
ZL_API zl_safetensors_writer *zl_safetensors_writer_open(const char *path, int n, const zl_safetensors_entry *entries,
                                                         int nmeta, const zl_safetensors_meta *meta);
/* Append t's elements (any layout, CPU, row-major order) to the data: they
 * fill the current tensor and go on into the next ones, which must all have
 * t's dtype. Appending past the last tensor, or into one of another dtype, is
 * an error that writes nothing. After an I/O error the writer is dead: later
 * calls repeat that error. */
ZL_API zl_status zl_safetensors_writer_append(zl_safetensors_writer *w, const zl_tensor *t);
/* Finish: every tensor must be complete (else an error naming the first one
 * that is not). Frees w whatever the outcome. */
ZL_API zl_status zl_safetensors_writer_commit(zl_safetensors_writer *w);
/* Give up: remove the temporary and free w. NULL is a no-op. */
ZL_API void zl_safetensors_writer_abort(zl_safetensors_writer *w);

/* All in one call: n tensors under n names, in that order, and nmeta pairs. */
ZL_API zl_status zl_safetensors_save(const char *path, int n, const char *const *names, zl_tensor *const *tensors,
                                     int nmeta, const zl_safetensors_meta *meta);

/* Replace `path` with n bytes, atomically and durably, as above (for small
 * files: a checkpoint's `latest`, its JSON state). */
ZL_API zl_status zl_file_write_atomic(const char *path, const void *bytes, size_t n);

#ifdef __cplusplus
}
#endif
#endif
