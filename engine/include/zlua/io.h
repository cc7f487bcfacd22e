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

/* ---- dataset readers ----
 * Each reads a whole file, plain or gzip (told apart by the gzip magic, so the
 * name does not matter), into new tensors charged to ZL_MEM_OTHER. A missing
 * file is "cannot open '<path>': <strerror>", an empty one "<path>: the file is
 * empty". Bad contents name the file and the byte offset, counted in the
 * uncompressed content: "<path>: truncated at offset N (expected M bytes of data)",
 * "<path>: corrupt gzip stream near uncompressed offset N: <zlib's reason>". */

/* An idx file (the MNIST format): two zero bytes, a dtype code, the number of
 * dims (1 to 8), each dim as a big-endian u32, then the elements row-major and
 * big-endian. The tensor has the file's shape and dtype u8 (code 0x08), i32
 * (0x09 signed byte, 0x0B i16, 0x0C i32) or f32 (0x0D f32, 0x0E f64 rounded to
 * f32). The data must be exactly as long as the dims say: a shorter file is
 * "truncated at offset N (expected M bytes of data)", a longer one "trailing data
 * at offset N". Returns a new reference, or NULL with zl_last_error(). */
ZL_API zl_tensor *zl_read_idx(const char *path);

/* A CIFAR-10 binary batch (data_batch_1.bin, test_batch.bin): records of one
 * label byte (0..9) and 3072 pixel bytes (the 32x32 red plane, then green, then
 * blue, each row-major). On success *images is a new u8 [N, 3, 32, 32] and
 * *labels a new i64 [N]; on failure both are NULL. A length that is not a whole
 * number of 3073-byte records names the offset where the partial record starts;
 * a label above 9 names its record (0-based) and offset. */
ZL_API zl_status zl_read_cifar10(const char *path, zl_tensor **images, zl_tensor **labels);

/* Tokens stored as little-endian unsigned integers of bytes_per_token bytes (2:
 * uint16, as GPT-2 token files are; 4: uint32) into an i64 tensor [N], ready to
 * index an embedding. A partial last token names the offset where it starts.
 * Returns a new reference, or NULL with zl_last_error(). */
ZL_API zl_tensor *zl_read_tokens(const char *path, int bytes_per_token);

/* Character-level text, where a character is a byte: exact for any file, and a
 * UTF-8 letter beyond ASCII becomes several ids.
 *   zl_read_text:   the file's bytes as a new u8 tensor [n].
 *   zl_text_vocab:  the distinct bytes of a u8 tensor in increasing order into
 *                   vocab[0 .. *vocab_size), at most 256; id i stands for byte vocab[i].
 *   zl_text_encode: a new i64 tensor of text's shape holding the id of each byte
 *                   in vocab (vocab_size entries, no byte twice). A byte that is
 *                   not in vocab, as when one text is encoded with another's
 *                   vocabulary, is an error naming its value and offset.
 * Decoding an id is vocab[id]. Text tensors are CPU u8 of any shape and layout. */
ZL_API zl_tensor *zl_read_text(const char *path);
ZL_API zl_status zl_text_vocab(zl_tensor *text, uint8_t vocab[256], int *vocab_size);
ZL_API zl_tensor *zl_text_encode(zl_tensor *text, const uint8_t *vocab, int vocab_size);

/* ---- files and folders for checkpoints ---- */

/* Create `path` and any missing parents (mode 0777 less the umask); an existing
 * folder is fine, an existing file of that name is an error naming it. */
ZL_API zl_status zl_fs_mkdirs(const char *path);
/* Remove a file or a folder with everything in it (symlinks removed, not
 * followed). A missing path is fine. */
ZL_API zl_status zl_fs_remove_tree(const char *path);
/* rename(2) from -> to, then fsync the folder holding `to`, so the new name
 * survives a crash. Errors name both paths. */
ZL_API zl_status zl_fs_rename(const char *from, const char *to);
/* Swap the names a and b atomically (Linux renameat2 RENAME_EXCHANGE), then
 * fsync their folder: replacing a checkpoint folder leaves no moment at which
 * neither exists. Both must exist. */
ZL_API zl_status zl_fs_exchange(const char *a, const char *b);
/* Whether path exists (any kind of file). */
ZL_API bool zl_fs_exists(const char *path);
/* Temporary folders of checkpoint saves, named ".<tag>.tmp-<digits>", each
 * with a marker "<folder>.owner" beside it naming the host and process that
 * made it. zl_fs_temp_mark writes the marker (before the folder is made);
 * zl_fs_temp_unmark removes it (after the folder is renamed into place or
 * removed). zl_fs_temp_sweep removes, in `dir`, every such folder (if still
 * there) and marker whose marker names this host and a process that no longer
 * runs: a save killed midway. A folder without a marker, or of another host,
 * or of a live process, is left alone. *removed (when not NULL) counts the
 * folders removed. */
ZL_API zl_status zl_fs_temp_mark(const char *folder);
ZL_API zl_status zl_fs_temp_unmark(const char *folder);
ZL_API zl_status zl_fs_temp_sweep(const char *dir, int *removed);
/* Every reader here opens only regular files: a FIFO, a device file or a
 * folder where a file is expected is "cannot read '<path>': it is a FIFO
 * (named pipe), not a regular file" (the kind named), at once, never a read
 * that blocks or never ends. With nofollow a symbolic link is refused too
 * (a checkpoint reads only the files inside its folder). */
/* A small file whole: at most `max` bytes into a new buffer (*out, *len bytes
 * followed by a NUL; free() it). A larger file is "'<path>' is N bytes, more
 * than the M such a file may have", before anything is read. */
ZL_API zl_status zl_fs_read_file(const char *path, size_t max, bool nofollow, char **out, size_t *len);
/* zlib's CRC-32 of a file's bytes, and how many there are. */
ZL_API zl_status zl_fs_file_crc32(const char *path, bool nofollow, uint32_t *crc, int64_t *bytes);

/* Testing a crash at every step of a checkpoint's save: the file-system
 * calls above, zl_file_write_atomic and the safetensors writer's open,
 * append and commit are counted (zl_fs_calls: since the process started);
 * zl_fs_kill_after(n) kills the process (SIGKILL) just before the n-th of
 * them from now (1 = the next one); 0 disables. */
ZL_API void zl_fs_kill_after(int64_t n);
ZL_API int64_t zl_fs_calls(void);

#ifdef __cplusplus
}
#endif
#endif
