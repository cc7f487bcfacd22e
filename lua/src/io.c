/* The binding of engine/io: the file readers (CSV, idx, CIFAR-10, token files,
 * text), the byte-level text vocabulary, and the folder operations and file
 * checksums checkpoints use. A missing or corrupt file raises the engine's
 * message, which names the file and the line or byte offset. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include "binding.h"

/* zl.read_csv(path [, skip_header]): a numeric CSV as f32 [rows, cols]. */
static int l_read_csv(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    bool skip_header = lua_toboolean(L, 2);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_read_csv(path, skip_header);
    return zlb_result(L, *slot);
}

/* read_idx(path): an idx file with its own shape, as u8, i32 or f32. */
static int l_read_idx(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_read_idx(path);
    return zlb_result(L, *slot);
}

/* read_cifar10(path) -> images u8 [N, 3, 32, 32], labels i64 [N]. */
static int l_read_cifar10(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    zl_tensor **images = zlb_new_tensor(L);
    zl_tensor **labels = zlb_new_tensor(L);
    if (zl_read_cifar10(path, images, labels)) return zlb_raise(L);
    zlb_result(L, *images);
    return 2;
}

/* read_tokens(path, bytes_per_token): little-endian ids (2 or 4 bytes) as i64 [N]. */
static int l_read_tokens(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
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
    const char *path = luaL_checkstring(L, 1);
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

static int l_mkdirs(lua_State *L) { return fs_status(L, zl_fs_mkdirs(luaL_checkstring(L, 1))); }
static int l_remove_tree(lua_State *L) { return fs_status(L, zl_fs_remove_tree(luaL_checkstring(L, 1))); }
static int l_rename(lua_State *L) { return fs_status(L, zl_fs_rename(luaL_checkstring(L, 1), luaL_checkstring(L, 2))); }
static int l_exchange(lua_State *L) { return fs_status(L, zl_fs_exchange(luaL_checkstring(L, 1), luaL_checkstring(L, 2))); }

/* file_crc32(path) -> crc, bytes: zlib's CRC-32 of the file's bytes, for the
 * checkpoint manifest that catches a file damaged after it was written. */
static int l_file_crc32(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    FILE *f = fopen(path, "rb");
    if (!f) return zlb_error(L, "cannot open '%s': %s", path, strerror(errno));
    unsigned char buf[1 << 16];
    uLong crc = crc32(0L, Z_NULL, 0);
    lua_Integer total = 0;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        crc = crc32(crc, buf, (uInt)n);
        total += (lua_Integer)n;
    }
    int err = ferror(f);
    fclose(f);
    if (err) return zlb_error(L, "cannot read '%s'", path);
    lua_pushinteger(L, (lua_Integer)crc);
    lua_pushinteger(L, total);
    return 2;
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
    lua_pushboolean(L, zl_fs_exists(luaL_checkstring(L, 1)));
    return 1;
}

/* Adds the io functions to the core table on top of the stack. */
void zlb_open_io(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"read_csv", l_read_csv},       {"read_idx", l_read_idx},         {"read_cifar10", l_read_cifar10},
        {"read_tokens", l_read_tokens}, {"read_text", l_read_text},       {"text_vocab", l_text_vocab},
        {"text_encode", l_text_encode}, {"mkdirs", l_mkdirs},             {"remove_tree", l_remove_tree},
        {"rename", l_rename},           {"exchange", l_exchange},         {"exists", l_exists},
        {"file_crc32", l_file_crc32},   {"crc32", l_crc32},               {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
