/* zlua/io.h — readers for data files; gzip is detected by its magic bytes and
 * streamed through zlib, so "x.csv" and "x.csv.gz" read the same way. */
#ifndef ZLUA_IO_H
#define ZLUA_IO_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A CSV of numbers (no header unless skip_header) into an f32 tensor [rows, cols].
 * Every row must have the same number of fields; errors name the file, line and field. */
ZL_API zl_tensor *zl_read_csv(const char *path, bool skip_header);

#ifdef __cplusplus
}
#endif
#endif
