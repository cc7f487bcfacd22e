/* The binding of engine/io: the file readers (CSV, idx, CIFAR-10, token files,
 * text) and the byte-level text vocabulary. A missing or corrupt file raises the
 * engine's message, which names the file and the line or byte offset. */
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

/* Adds the io functions to the core table on top of the stack. */
void zlb_open_io(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"read_csv", l_read_csv},       {"read_idx", l_read_idx},       {"read_cifar10", l_read_cifar10},
        {"read_tokens", l_read_tokens}, {"read_text", l_read_text},     {"text_vocab", l_text_vocab},
        {"text_encode", l_text_encode}, {NULL, NULL},
    };
    luaL_setfuncs(L, fns, 0);
}
