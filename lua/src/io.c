/* The binding of engine/io: the file readers (CSV, idx, CIFAR-10, token files,
 * text), the byte-level text vocabulary, and the folder operations and file
 * checksums checkpoints use. A missing or corrupt file raises the engine's
 * message, which names the file and the line or byte offset. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include "binding.h"

/* zl.read_csv(path [, skip_header]): a numeric CSV as f32 [rows, cols]. */
static int l_read_csv(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "read_csv", "path");
    bool skip_header = lua_toboolean(L, 2);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_read_csv(path, skip_header);
    return zlb_result(L, *slot);
}

/* read_idx(path): an idx file with its own shape, as u8, i32 or f32. */
static int l_read_idx(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "read_idx", "path");
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_read_idx(path);
    return zlb_result(L, *slot);
}

/* read_cifar10(path) -> images u8 [N, 3, 32, 32], labels i64 [N]. */
static int l_read_cifar10(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "read_cifar10", "path");
    zl_tensor **images = zlb_new_tensor(L);
    zl_tensor **labels = zlb_new_tensor(L);
    if (zl_read_cifar10(path, images, labels)) return zlb_raise(L);
    zlb_result(L, *images);
    return 2;
}

/* read_tokens(path, bytes_per_token): little-endian ids (2 or 4 bytes) as i64 [N]. */
static int l_read_tokens(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "read_tokens", "path");
    lua_Integer bpt = luaL_checkinteger(L, 2);
    if (bpt != 2 && bpt != 4)
        return zlb_error(L, "read_tokens: bytes_per_token must be 2 (uint16) or 4 (uint32), got %d", (int)bpt);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_read_tokens(path, (int)bpt);
    return zlb_result(L, *slot);
}

/* read_text(path): the file's bytes as u8 [n]. */
static int l_read_text(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "read_text", "path");
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_read_text(path);
    return zlb_result(L, *slot);
}

/* The text argument at idx: a u8 tensor, or a Lua string copied into a new u8
 * tensor whose box is left on the stack (the collector frees it, even when a
 * later check raises). */
static zl_tensor *check_text(lua_State *L, int idx, const char *op)
{
    if (lua_type(L, idx) != LUA_TSTRING) {
        if (!luaL_testudata(L, idx, ZLB_TENSOR_MT))
            zlb_error(L, "%s: text must be a u8 tensor or a string, got %s", op, luaL_typename(L, idx));
        return zlb_check_tensor(L, idx);
    }
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_tensor_from_data(ZL_DTYPE_U8, 1, (int64_t[]){(int64_t)len}, s);
    if (!*slot) zlb_raise(L);
    return *slot;
}

/* text_vocab(text) -> vocab, size: the distinct bytes of text in increasing
 * order as a string, so that id i (0-based) stands for vocab:byte(i + 1). */
static int l_text_vocab(lua_State *L)
{
    zl_tensor *text = check_text(L, 1, "text_vocab");
    uint8_t vocab[256];
    int n;
    if (zl_text_vocab(text, vocab, &n)) return zlb_raise(L);
    lua_pushlstring(L, (const char *)vocab, (size_t)n);
    lua_pushinteger(L, n);
    return 2;
}

/* text_encode(text, vocab): i64 ids of text's shape in a vocab string. */
static int l_text_encode(lua_State *L)
{
    zl_tensor *text = check_text(L, 1, "text_encode");
    if (lua_type(L, 2) != LUA_TSTRING)
        return zlb_error(L, "text_encode: vocab must be a string of distinct bytes (as text_vocab returns), got %s",
                         luaL_typename(L, 2));
    size_t n;
    const char *vocab = lua_tolstring(L, 2, &n);
    if (n > 256) return zlb_error(L, "text_encode: vocab has %d bytes, at most 256 are possible", (int)n);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_text_encode(text, (const uint8_t *)vocab, (int)n);
    return zlb_result(L, *slot);
}

static int fs_status(lua_State *L, zl_status st)
{
    if (st) return zlb_raise(L);
    return 0;
}

static int l_mkdirs(lua_State *L) { return fs_status(L, zl_fs_mkdirs(zlb_check_cstring(L, 1, "mkdirs", "path"))); }

static int l_remove_tree(lua_State *L)
{
    return fs_status(L, zl_fs_remove_tree(zlb_check_cstring(L, 1, "remove_tree", "path")));
}

static int l_rename(lua_State *L)
{
    const char *from = zlb_check_cstring(L, 1, "rename", "path");
    return fs_status(L, zl_fs_rename(from, zlb_check_cstring(L, 2, "rename", "path")));
}

static int l_exchange(lua_State *L)
{
    const char *a = zlb_check_cstring(L, 1, "exchange", "path");
    return fs_status(L, zl_fs_exchange(a, zlb_check_cstring(L, 2, "exchange", "path")));
}

/* file_crc32(path [, nofollow]) -> crc, bytes: zlib's CRC-32 of a regular
 * file's bytes, for the checkpoint manifest that catches a file damaged after
 * it was written. */
static int l_file_crc32(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "file_crc32", "path");
    uint32_t crc;
    int64_t bytes;
    if (zl_fs_file_crc32(path, lua_toboolean(L, 2), &crc, &bytes)) return zlb_raise(L);
    lua_pushinteger(L, (lua_Integer)crc);
    lua_pushinteger(L, (lua_Integer)bytes);
    return 2;
}

/* read_file(path, max [, nofollow]) -> string: a small regular file whole,
 * refused when larger than max bytes (zl_fs_read_file). */
static int l_read_file(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "read_file", "path");
    lua_Integer max = luaL_checkinteger(L, 2);
    if (max < 0) return zlb_error(L, "read_file: max must be >= 0, got %I", max);
    char *text;
    size_t len;
    if (zl_fs_read_file(path, (size_t)max, lua_toboolean(L, 3), &text, &len)) return zlb_raise(L);
    lua_pushlstring(L, text, len);
    free(text);
    return 1;
}

/* crc32(string) -> zlib's CRC-32 of the bytes of a Lua string. */
static int l_crc32(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_pushinteger(L, (lua_Integer)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)s, (uInt)n));
    return 1;
}

static int l_exists(lua_State *L)
{
    lua_pushboolean(L, zl_fs_exists(zlb_check_cstring(L, 1, "exists", "path")));
    return 1;
}

/* temp_mark(folder), temp_unmark(folder) */
static int l_temp_mark(lua_State *L) { return fs_status(L, zl_fs_temp_mark(zlb_check_cstring(L, 1, "temp_mark", "path"))); }

static int l_temp_unmark(lua_State *L)
{
    return fs_status(L, zl_fs_temp_unmark(zlb_check_cstring(L, 1, "temp_unmark", "path")));
}

/* fs_kill_after(n): testing, the process killed before the n-th file-system call from now (0: never). */
static int l_fs_kill_after(lua_State *L)
{
    zl_fs_kill_after((int64_t)luaL_checkinteger(L, 1));
    return 0;
}

static int l_fs_calls(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)zl_fs_calls());
    return 1;
}

/* temp_sweep(dir) -> the number of stale temporary folders removed */
static int l_temp_sweep(lua_State *L)
{
    int removed;
    if (zl_fs_temp_sweep(zlb_check_cstring(L, 1, "temp_sweep", "path"), &removed)) return zlb_raise(L);
    lua_pushinteger(L, removed);
    return 1;
}

/* path_kind(path) -> 'file', 'folder', 'link', 'fifo', 'device', 'socket', or
 * nil when nothing is there; a link is not followed. */
static int l_path_kind(lua_State *L)
{
    struct stat st;
    if (lstat(zlb_check_cstring(L, 1, "path_kind", "path"), &st) != 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "folder" : S_ISLNK(st.st_mode) ? "link"
                      : S_ISFIFO(st.st_mode) ? "fifo" : S_ISSOCK(st.st_mode) ? "socket" : "device");
    return 1;
}

const char *zlb_check_cstring(lua_State *L, int idx, const char *op, const char *what)
{
    size_t n;
    const char *s = luaL_checklstring(L, idx, &n);
    size_t at = strlen(s);
    if (at < n)
        zlb_error(L, "%s: the %s '%s' is followed by a NUL byte (byte %d of %d), which C would cut it at: "
                     "a %s cannot hold one", op, what, s, (int)at + 1, (int)n, what);
    return s;
}

/* Adds the io functions to the core table on top of the stack. */
void zlb_open_io(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"read_csv", l_read_csv},       {"read_idx", l_read_idx},         {"read_cifar10", l_read_cifar10},
        {"read_tokens", l_read_tokens}, {"read_text", l_read_text},       {"text_vocab", l_text_vocab},
        {"text_encode", l_text_encode}, {"mkdirs", l_mkdirs},             {"remove_tree", l_remove_tree},
        {"rename", l_rename},           {"exchange", l_exchange},         {"exists", l_exists},
        {"file_crc32", l_file_crc32},   {"crc32", l_crc32},               {"read_file", l_read_file},
        {"temp_mark", l_temp_mark},     {"temp_unmark", l_temp_unmark},   {"temp_sweep", l_temp_sweep},
        {"fs_kill_after", l_fs_kill_after}, {"fs_calls", l_fs_calls},
        {"path_kind", l_path_kind},
        {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
