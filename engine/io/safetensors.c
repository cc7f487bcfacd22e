/* .safetensors files: the header's strict JSON parser and the checks that run
 * before any data is read, reading tensors whole or by element range, and the
 * streaming writer over an atomically replaced file (atomic.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "atomic.h"
#include "json.h"
#include "regular.h"
#include "zlua/safetensors.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and is read and written here without conversion"
#endif

/* The header length field. */
#define LEN_BYTES 8
/* The largest header accepted, as the reference implementation bounds it:
 * a header is read whole, so this bounds what a hostile file can make us allocate. */
#define HEADER_MAX 100000000
/* The most one read(2) is given; Ctrl-C is polled between reads. */
#define READ_CHUNK ((size_t)1 << 26)
#define META_KEY "__metadata__"

/* ---- dtypes ---- */

typedef struct st_dtype {
    const char *name;      /* the file's spelling */
    size_t size;
    zl_dtype dt;           /* ZL_DTYPE_COUNT: another tool's dtype, listed but not readable */
} st_dtype;

/* zlua's seven first, in the order of zl_dtype. */
static const st_dtype st_dtypes[] = {
    {"F32", 4, ZL_DTYPE_F32},        {"F16", 2, ZL_DTYPE_F16},        {"BF16", 2, ZL_DTYPE_BF16},
    {"I32", 4, ZL_DTYPE_I32},        {"I64", 8, ZL_DTYPE_I64},        {"U8", 1, ZL_DTYPE_U8},
    {"BOOL", 1, ZL_DTYPE_BOOL},      {"F64", 8, ZL_DTYPE_COUNT},      {"I8", 1, ZL_DTYPE_COUNT},
    {"I16", 2, ZL_DTYPE_COUNT},      {"U16", 2, ZL_DTYPE_COUNT},      {"U32", 4, ZL_DTYPE_COUNT},
    {"U64", 8, ZL_DTYPE_COUNT},      {"F8_E4M3", 1, ZL_DTYPE_COUNT},  {"F8_E5M2", 1, ZL_DTYPE_COUNT},
    {"F8_E8M0", 1, ZL_DTYPE_COUNT},  {"C64", 8, ZL_DTYPE_COUNT},
};
#define N_DTYPES (int)(sizeof st_dtypes / sizeof st_dtypes[0])

static const st_dtype *dtype_by_name(const char *s)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(st_dtypes[i].name, s) == 0) return &st_dtypes[i];
    return NULL;
}

static bool mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* numel and bytes of a shape, false on overflow of int64, of the bytes or of
 * the strides (where a size of 0 counts as 1, as core's do: [0, 2^40, 2^40]
 * holds nothing, yet no tensor can be made of it). */
static bool shape_bytes(int ndim, const int64_t *shape, size_t esize, int64_t *numel, int64_t *nbytes)
{
    if (!zli_shape_fits(ndim, shape)) return false;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    *numel = n;
    return mul_ok(n, (int64_t)esize, nbytes);
}

/* ---- the open file ---- */

typedef struct st_item {
    zl_safetensors_entry e;
    int64_t begin, end;    /* data_offsets as written, relative to the data */
    int64_t key_at;        /* file offset of the name, for duplicate messages */
    int order;             /* position in the header */
} st_item;

struct zl_safetensors {
    char *path;
    int fd;
    int64_t size;
    char *header;          /* the JSON; names and values are decoded in place and point into it */
    int n, nmeta;
    st_item *items;        /* in data order once checked */
    st_item **by_name;     /* sorted by name, for find */
    zl_safetensors_meta *meta;
};

/* ---- the JSON of the header ----
 * A parser of exactly the grammar safetensors headers use: one object of
 * tensor entries and an optional "__metadata__" object of strings. Nothing
 * nests deeper than three levels, so nothing recurses. Strings are decoded in
 * place (an escape never grows when decoded), NUL-terminated where their
 * closing quote was. */

typedef struct json {
    char *s;
    size_t n, i;
    const char *path;
} json;

static zl_status jerr(json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static zl_status jerr(json *j, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return zl_error(ZL_EFORMAT, "%s: bad header at offset %lld: %s", j->path, (long long)(j->i + LEN_BYTES), what);
}

/* What stands at the cursor, for "expected X, found Y". */
static const char *found(json *j, char *buf, size_t n)
{
    if (j->i >= j->n) return "the end of the header";
    unsigned char c = (unsigned char)j->s[j->i];
    if (c >= 0x20 && c < 0x7F) snprintf(buf, n, "'%c'", c);
    else snprintf(buf, n, "byte 0x%02x", c);
    return buf;
}

static void skip_ws(json *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r'))
        j->i++;
}

/* Skip whitespace; true (consuming it) when the next character is c. */
static bool accept(json *j, char c)
{
    skip_ws(j);
    if (j->i < j->n && j->s[j->i] == c) {
        j->i++;
        return true;
    }
    return false;
}

static zl_status expect(json *j, char c, const char *what)
{
    if (accept(j, c)) return ZL_OK;
    char buf[16];
    return jerr(j, "expected %s, found %s", what, found(j, buf, sizeof buf));
}

/* After a member: ',' and more follow (*more true) or `close` ends the object or array. */
static zl_status separator(json *j, char close, bool *more)
{
    if (accept(j, ',')) { *more = true; return ZL_OK; }
    if (accept(j, close)) { *more = false; return ZL_OK; }
    char buf[16];
    return jerr(j, "expected ',' or '%c', found %s", close, found(j, buf, sizeof buf));
}

/* One \uXXXX escape (or a surrogate pair) at s[i] == 'u', written at w. */
static zl_status unicode_escape(json *j, size_t *w)
{
    if (j->n - j->i < 5) return jerr(j, "truncated \\u escape");
    int cp = zli_hex4(j->s + j->i + 1);
    if (cp < 0) return jerr(j, "\\u must be followed by 4 hex digits");
    if (cp == 0) return jerr(j, "\\u0000 (a NUL character) is not allowed in a name or value");
    if (cp >= 0xDC00 && cp <= 0xDFFF) return jerr(j, "lone low surrogate \\u%04x", (unsigned)cp);
    j->i += 5;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        int lo = j->n - j->i >= 6 && j->s[j->i] == '\\' && j->s[j->i + 1] == 'u' ? zli_hex4(j->s + j->i + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF) return jerr(j, "high surrogate \\u%04x is not followed by a low one", (unsigned)cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        j->i += 6;
    }
    *w += zli_utf8_put(j->s + *w, (unsigned)cp);
    return ZL_OK;
}

/* A string at the cursor, decoded in place; *out points at it. */
static zl_status parse_string(json *j, const char *what, char **out)
{
    skip_ws(j);
    if (j->i >= j->n || j->s[j->i] != '"') {
        char buf[16];
        return jerr(j, "expected %s (a string), found %s", what, found(j, buf, sizeof buf));
    }
    size_t w = ++j->i;
    char *start = j->s + w;
    for (;;) {
        if (j->i >= j->n) return jerr(j, "unterminated string");
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') {
            j->s[w] = '\0';
            j->i++;
            *out = start;
            return ZL_OK;
        }
        if (c < 0x20) return jerr(j, "control character 0x%02x inside a string (it must be escaped)", c);
        if (c == '\\') {
            if (++j->i >= j->n) return jerr(j, "unterminated string");
            char e = j->s[j->i];
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *k = e ? strchr(from, e) : NULL;
            if (k) {
                j->s[w++] = to[k - from];
                j->i++;
            } else if (e == 'u') {
                zl_status st = unicode_escape(j, &w);
                if (st) return st;
            } else {
                char buf[16];
                return jerr(j, "invalid escape: a backslash followed by %s", found(j, buf, sizeof buf));
            }
            continue;
        }
        size_t k = zli_utf8_len((const unsigned char *)j->s + j->i, j->n - j->i);
        if (!k) return jerr(j, "invalid UTF-8 byte 0x%02x inside a string", c);
        memmove(j->s + w, j->s + j->i, k);
        w += k;
        j->i += k;
    }
}

/* A non-negative integer that fits int64. The whole JSON number is scanned so
 * that "1.5", "-1" and "1e3" are named as what they are. */
static zl_status parse_uint(json *j, const char *what, int64_t *out)
{
    skip_ws(j);
    size_t start = j->i, i = j->i;
    const char *s = j->s;
    bool neg = i < j->n && s[i] == '-', real = false;
    if (neg) i++;
    size_t digits = i;
    while (i < j->n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == digits) {
        char buf[16];
        return jerr(j, "expected %s (a non-negative integer), found %s", what, found(j, buf, sizeof buf));
    }
    if (s[digits] == '0' && i - digits > 1) return jerr(j, "%s has a leading zero: '%.*s'", what, (int)(i - start), s + start);
    size_t int_end = i;
    if (i < j->n && s[i] == '.') {
        real = true;
        while (++i < j->n && s[i] >= '0' && s[i] <= '9') {}
    }
    if (i < j->n && (s[i] == 'e' || s[i] == 'E')) {
        real = true;
        if (++i < j->n && (s[i] == '+' || s[i] == '-')) i++;
        while (i < j->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (neg || real) return jerr(j, "%s must be a non-negative integer, got '%.*s'", what, (int)(i - start), s + start);
    int64_t v = 0;
    for (size_t k = digits; k < int_end; k++)
        if (!mul_ok(v, 10, &v) || __builtin_add_overflow(v, s[k] - '0', &v))
            return jerr(j, "%s is too large: '%.*s'", what, (int)(int_end - start), s + start);
    j->i = i;
    *out = v;
    return ZL_OK;
}

/* One tensor's {"dtype": ..., "shape": [...], "data_offsets": [b, e]}. */
static zl_status parse_tensor(json *j, st_item *it)
{
    const char *name = it->e.name;
    zl_status st = expect(j, '{', "'{' opening the tensor's entry");
    bool has_dtype = false, has_shape = false, has_offsets = false, more = !accept(j, '}');
    while (!st && more) {
        char *key, what[64];
        if ((st = parse_string(j, "a key of the tensor's entry", &key)) || (st = expect(j, ':', "':'"))) break;
        if (strcmp(key, "dtype") == 0) {
            if (has_dtype) return jerr(j, "tensor '%s' has 'dtype' twice", name);
            char *v;
            if ((st = parse_string(j, "the dtype", &v))) break;
            const st_dtype *d = dtype_by_name(v);
            if (!d) return jerr(j, "tensor '%s' has an unknown dtype '%s'", name, v);
            it->e.dtype = d->dt;
            it->e.dtype_name = d->name;
            has_dtype = true;
        } else if (strcmp(key, "shape") == 0) {
            if (has_shape) return jerr(j, "tensor '%s' has 'shape' twice", name);
            if ((st = expect(j, '[', "'[' opening the shape"))) break;
            bool dims = !accept(j, ']');
            while (dims) {
                if (it->e.ndim == ZL_MAX_DIMS)
                    return jerr(j, "tensor '%s' has more than %d dimensions", name, ZL_MAX_DIMS);
                snprintf(what, sizeof what, "size %d of the shape", it->e.ndim + 1);
                if ((st = parse_uint(j, what, &it->e.shape[it->e.ndim])) || (st = separator(j, ']', &dims))) break;
                it->e.ndim++;
            }
            has_shape = true;
        } else if (strcmp(key, "data_offsets") == 0) {
            if (has_offsets) return jerr(j, "tensor '%s' has 'data_offsets' twice", name);
            if ((st = expect(j, '[', "'[' opening data_offsets")) ||
                (st = parse_uint(j, "the begin of data_offsets", &it->begin)) ||
                (st = expect(j, ',', "',' (data_offsets is [begin, end])")) ||
                (st = parse_uint(j, "the end of data_offsets", &it->end)) ||
                (st = expect(j, ']', "']' (data_offsets is [begin, end])")))
                break;
            has_offsets = true;
        } else {
            return jerr(j, "tensor '%s' has an unknown key '%s' (expected dtype, shape, data_offsets)", name, key);
        }
        if (!st) st = separator(j, '}', &more);
    }
    if (st) return st;
    if (!has_dtype || !has_shape || !has_offsets)
        return jerr(j, "tensor '%s' has no '%s'", name, !has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets");
    return ZL_OK;
}

static zl_status parse_metadata(json *j, zl_safetensors *f)
{
    zl_status st = expect(j, '{', "'{' opening __metadata__");
    bool more = !accept(j, '}');
    int cap = 0;
    while (!st && more) {
        char *key, *value;
        if ((st = parse_string(j, "a metadata key", &key)) || (st = expect(j, ':', "':'"))) break;
        skip_ws(j);
        if (j->i < j->n && j->s[j->i] != '"') return jerr(j, "__metadata__ value of '%s' must be a string", key);
        if ((st = parse_string(j, "a metadata value", &value))) break;
        if (f->nmeta == cap) {
            cap = cap ? 2 * cap : 8;
            zl_safetensors_meta *m = realloc(f->meta, (size_t)cap * sizeof *m);
            if (!m) return zl_error(ZL_ENOMEM, "%s: out of memory reading the header", f->path);
            f->meta = m;
        }
        f->meta[f->nmeta++] = (zl_safetensors_meta){key, value};
        st = separator(j, '}', &more);
    }
    return st;
}

static zl_status parse_header(json *j, zl_safetensors *f)
{
    if (j->n == 0 || j->s[0] != '{')
        return jerr(j, "the header must start with '{' (is this a safetensors file?)");
    j->i = 1;
    bool more = !accept(j, '}'), has_meta = false;
    int cap = 0;
    zl_status st = ZL_OK;
    while (!st && more) {
        skip_ws(j);
        int64_t key_at = (int64_t)j->i + LEN_BYTES;
        char *key;
        if ((st = parse_string(j, "a tensor name", &key)) || (st = expect(j, ':', "':'"))) break;
        if (strcmp(key, META_KEY) == 0) {
            if (has_meta) return jerr(j, "'" META_KEY "' appears twice");
            has_meta = true;
            st = parse_metadata(j, f);
        } else {
            if (f->n == cap) {
                cap = cap ? 2 * cap : 16;
                st_item *it = realloc(f->items, (size_t)cap * sizeof *it);
                if (!it) return zl_error(ZL_ENOMEM, "%s: out of memory reading the header", f->path);
                f->items = it;
            }
            st_item *it = &f->items[f->n];
            *it = (st_item){.e.name = key, .key_at = key_at, .order = f->n};
            f->n++;
            st = parse_tensor(j, it);
        }
        if (!st) st = separator(j, '}', &more);
    }
    if (st) return st;
    skip_ws(j);
    if (j->i < j->n) {
        char buf[16];
        return jerr(j, "%s after the header's closing '}'", found(j, buf, sizeof buf));
    }
    return ZL_OK;
}

/* ---- checks on the parsed header ---- */

static int by_name_cmp(const void *a, const void *b)
{
    const st_item *x = *(st_item *const *)a, *y = *(st_item *const *)b;
    int c = strcmp(x->e.name, y->e.name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int by_offset_cmp(const void *a, const void *b)
{
    const st_item *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

static int meta_cmp(const void *a, const void *b)
{
    return strcmp((*(zl_safetensors_meta *const *)a)->key, (*(zl_safetensors_meta *const *)b)->key);
}

/* Each tensor's bytes match its dtype and shape and lie inside the data; then,
 * in data order, the tensors tile the data exactly. */
static zl_status check_layout(zl_safetensors *f, int64_t data_start)
{
    int64_t data_size = f->size - data_start;
    char sh[128];
    for (int i = 0; i < f->n; i++) {
        st_item *it = &f->items[i];
        const st_dtype *d = dtype_by_name(it->e.dtype_name);
        zl_shape_str(it->e.ndim, it->e.shape, sh, sizeof sh);
        int64_t need;
        if (!shape_bytes(it->e.ndim, it->e.shape, d->size, &it->e.numel, &need))
            return zl_error(ZL_EFORMAT, "%s: tensor '%s' has shape %s, too large to address", f->path, it->e.name, sh);
        if (it->end < it->begin)
            return zl_error(ZL_EFORMAT, "%s: tensor '%s' has data_offsets [%lld, %lld], which end before they begin",
                            f->path, it->e.name, (long long)it->begin, (long long)it->end);
        if (it->end - it->begin != need)
            return zl_error(ZL_EFORMAT, "%s: tensor '%s' has data_offsets [%lld, %lld] (%lld bytes), but %s %s needs %lld bytes",
                            f->path, it->e.name, (long long)it->begin, (long long)it->end,
                            (long long)(it->end - it->begin), it->e.dtype_name, sh, (long long)need);
        if (it->end > data_size)
            return zl_error(ZL_EFORMAT, "%s: tensor '%s' has data_offsets [%lld, %lld], out of range: the data holds %lld bytes "
                            "(file offsets %lld to %lld)", f->path, it->e.name, (long long)it->begin, (long long)it->end,
                            (long long)data_size, (long long)data_start, (long long)f->size);
        it->e.nbytes = need;
        it->e.offset = data_start + it->begin;
    }
    if (f->n > 1) qsort(f->items, (size_t)f->n, sizeof *f->items, by_offset_cmp);
    int64_t at = 0;
    const st_item *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const st_item *it = &f->items[i];
        if (it->begin < at)
            return zl_error(ZL_EFORMAT, "%s: tensor '%s' (data_offsets [%lld, %lld]) overlaps tensor '%s' (data_offsets [%lld, %lld])",
                            f->path, it->e.name, (long long)it->begin, (long long)it->end, prev->e.name,
                            (long long)prev->begin, (long long)prev->end);
        if (it->begin > at)
            return zl_error(ZL_EFORMAT, "%s: %lld bytes at file offset %lld belong to no tensor (a gap before tensor '%s')",
                            f->path, (long long)(it->begin - at), (long long)(data_start + at), it->e.name);
        if (it->end > it->begin) prev = it;
        at = it->end;
    }
    if (at < data_size)
        return zl_error(ZL_EFORMAT, "%s: %lld bytes at file offset %lld, after the last tensor, belong to no tensor",
                        f->path, (long long)(data_size - at), (long long)(data_start + at));
    return ZL_OK;
}

/* Names and metadata keys are unique. */
static zl_status check_unique(zl_safetensors *f)
{
    f->by_name = malloc((size_t)(f->n ? f->n : 1) * sizeof *f->by_name);
    if (!f->by_name) return zl_error(ZL_ENOMEM, "%s: out of memory reading the header", f->path);
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->items[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, by_name_cmp);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i - 1]->e.name, f->by_name[i]->e.name) == 0)
            return zl_error(ZL_EFORMAT, "%s: tensor '%s' appears twice in the header (at offsets %lld and %lld)", f->path,
                            f->by_name[i]->e.name, (long long)f->by_name[i - 1]->key_at, (long long)f->by_name[i]->key_at);
    if (f->nmeta < 2) return ZL_OK;
    const zl_safetensors_meta **m = malloc((size_t)f->nmeta * sizeof *m);
    if (!m) return zl_error(ZL_ENOMEM, "%s: out of memory reading the header", f->path);
    for (int i = 0; i < f->nmeta; i++) m[i] = &f->meta[i];
    qsort(m, (size_t)f->nmeta, sizeof *m, meta_cmp);
    zl_status st = ZL_OK;
    for (int i = 1; i < f->nmeta && !st; i++)
        if (strcmp(m[i - 1]->key, m[i]->key) == 0)
            st = zl_error(ZL_EFORMAT, "%s: __metadata__ key '%s' appears twice", f->path, m[i]->key);
    free(m);
    return st;
}

/* ---- reading ---- */

/* Exactly n bytes at `off`, of tensor `tensor` (NULL: of the header). */
static zl_status read_at(zl_safetensors *f, void *buf, size_t n, int64_t off, const char *tensor)
{
    char what[256];
    if (tensor) snprintf(what, sizeof what, "tensor '%s'", tensor);
    else snprintf(what, sizeof what, "the header");
    char *p = buf;
    while (n > 0) {
        if (zl_interrupt_pending()) return zl_error(ZL_EINTERRUPT, "%s: interrupted reading %s", f->path, what);
        ssize_t got = pread(f->fd, p, n < READ_CHUNK ? n : READ_CHUNK, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return zl_error(ZL_EIO, "cannot read '%s': %s at offset %lld (%s)", f->path, strerror(errno), (long long)off, what);
        if (got == 0)
            return zl_error(ZL_EFORMAT, "%s: the file ends at offset %lld, inside %s (was it cut short after it was opened?)",
                            f->path, (long long)off, what);
        p += got;
        n -= (size_t)got;
        off += got;
    }
    return ZL_OK;
}

zl_safetensors *zl_safetensors_open(const char *path)
{
    if (!path) { zl_error(ZL_EINVAL, "safetensors: path is NULL"); return NULL; }
    zl_safetensors *f = calloc(1, sizeof *f);
    if (f) f->path = strdup(path);
    if (!f || !f->path) {
        free(f);
        zl_error(ZL_ENOMEM, "%s: out of memory opening it", path);
        return NULL;
    }
    zl_status st = zli_open_regular(path, 0, &f->fd, &f->size);
    if (st) {
        zl_safetensors_close(f);
        return NULL;
    }
    unsigned char len[LEN_BYTES];
    if (!st && f->size < LEN_BYTES)
        st = zl_error(ZL_EFORMAT, "%s: %lld bytes is too short for a safetensors file (the header length alone is 8)",
                      path, (long long)f->size);
    if (!st) st = read_at(f, len, LEN_BYTES, 0, NULL);
    uint64_t hlen = 0;
    for (int k = LEN_BYTES - 1; k >= 0; k--) hlen = hlen << 8 | len[k];
    if (!st && hlen > (uint64_t)(f->size - LEN_BYTES))
        st = zl_error(ZL_EFORMAT, "%s: the header length at offset 0 is %llu, larger than the rest of the file (%lld bytes)",
                      path, (unsigned long long)hlen, (long long)(f->size - LEN_BYTES));
    if (!st && hlen > HEADER_MAX)
        st = zl_error(ZL_EFORMAT, "%s: the header length at offset 0 is %llu, above the limit of %d bytes", path,
                      (unsigned long long)hlen, HEADER_MAX);
    if (!st && !(f->header = malloc((size_t)hlen + 1)))
        st = zl_error(ZL_ENOMEM, "%s: out of memory for a header of %llu bytes", path, (unsigned long long)hlen);
    if (!st) st = read_at(f, f->header, (size_t)hlen, LEN_BYTES, NULL);
    if (!st) {
        f->header[hlen] = '\0';
        json j = {.s = f->header, .n = (size_t)hlen, .path = f->path};
        st = parse_header(&j, f);
    }
    if (!st) st = check_unique(f);
    if (!st) st = check_layout(f, LEN_BYTES + (int64_t)hlen);
    if (st) {
        zl_safetensors_close(f);
        return NULL;
    }
    /* Sorting by offset moved the items: point the name index at them again. */
    for (int i = 0; i < f->n; i++) f->by_name[i] = &f->items[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, by_name_cmp);
    return f;
}

void zl_safetensors_close(zl_safetensors *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f->header);
    free(f->items);
    free(f->by_name);
    free(f->meta);
    free(f);
}

const char *zl_safetensors_path(const zl_safetensors *f) { return f ? f->path : NULL; }
int zl_safetensors_count(const zl_safetensors *f) { return f ? f->n : 0; }

const zl_safetensors_entry *zl_safetensors_entry_at(const zl_safetensors *f, int i)
{
    if (f && i >= 0 && i < f->n) return &f->items[i].e;
    zl_error(ZL_EINVAL, "zl_safetensors_entry_at: index %d is out of range (%d tensors)", i, f ? f->n : 0);
    return NULL;
}

const zl_safetensors_entry *zl_safetensors_find(const zl_safetensors *f, const char *name)
{
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->e.name, name);
        if (c == 0) return &f->by_name[mid]->e;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int zl_safetensors_metadata_count(const zl_safetensors *f) { return f ? f->nmeta : 0; }

const zl_safetensors_meta *zl_safetensors_metadata_at(const zl_safetensors *f, int i)
{
    if (f && i >= 0 && i < f->nmeta) return &f->meta[i];
    zl_error(ZL_EINVAL, "zl_safetensors_metadata_at: index %d is out of range (%d metadata pairs)", i,
             f ? f->nmeta : 0);
    return NULL;
}

const char *zl_safetensors_metadata_get(const zl_safetensors *f, const char *key)
{
    for (int i = 0; f && key && i < f->nmeta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* The readable entry `name`, or NULL with an error naming the file. */
static const zl_safetensors_entry *readable(zl_safetensors *f, const char *name, const char *op)
{
    if (!f) { zl_error(ZL_EINVAL, "%s: the file is NULL", op); return NULL; }
    const zl_safetensors_entry *e = zl_safetensors_find(f, name);
    if (!e) {
        zl_error(ZL_EINVAL, "%s: no tensor named '%s'", f->path, name ? name : "(null)");
        return NULL;
    }
    if (e->dtype == ZL_DTYPE_COUNT) {
        zl_error(ZL_EDTYPE, "%s: tensor '%s' has dtype %s, which zlua does not have (it reads F32, F16, BF16, I32, I64, U8, BOOL)",
                 f->path, e->name, e->dtype_name);
        return NULL;
    }
    return e;
}

/* BOOL bytes are 0 or 1, so that every later op sees a proper bool. */
static zl_status check_bool(zl_safetensors *f, const zl_safetensors_entry *e, const uint8_t *p, int64_t n,
                            int64_t byte0)
{
    for (int64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return zl_error(ZL_EFORMAT, "%s: tensor '%s' holds %u at file offset %lld, which is not a BOOL (0 or 1)",
                            f->path, e->name, p[i], (long long)(e->offset + byte0 + i));
    return ZL_OK;
}

zl_tensor *zl_safetensors_read(zl_safetensors *f, const char *name, zl_mem_category cat)
{
    const zl_safetensors_entry *e = readable(f, name, "safetensors_read");
    if (!e) return NULL;
    zl_tensor *t = zl_tensor_new(e->dtype, e->ndim, e->shape, cat);
    if (!t) return NULL;
    zl_status st = read_at(f, zl_tensor_data(t), (size_t)e->nbytes, e->offset, e->name);
    if (!st && e->dtype == ZL_DTYPE_BOOL) st = check_bool(f, e, zl_tensor_data(t), e->numel, 0);
    if (st) {
        zl_tensor_release(t);
        return NULL;
    }
    return t;
}

zl_status zl_safetensors_read_into(zl_safetensors *f, const char *name, int64_t start, zl_tensor *dst)
{
    const zl_safetensors_entry *e = readable(f, name, "safetensors_read_into");
    if (!e) return zli_last_code();
    if (!dst) return zl_error(ZL_EINVAL, "%s: reading tensor '%s' into a NULL tensor", f->path, e->name);
    if (zl_tensor_device(dst) != ZL_DEVICE_CPU || !zl_tensor_is_contiguous(dst))
        return zl_error(ZL_EINVAL, "%s: reading tensor '%s' needs a contiguous CPU destination", f->path, e->name);
    if (zl_tensor_dtype(dst) != e->dtype)
        return zl_error(ZL_EDTYPE, "%s: tensor '%s' is %s, the destination is %s", f->path, e->name, e->dtype_name,
                        zl_dtype_name(zl_tensor_dtype(dst)));
    int64_t n = zl_tensor_numel(dst);
    if (start < 0 || start > e->numel || n > e->numel - start)
        return zl_error(ZL_EINVAL, "%s: elements [%lld, %lld) are out of range for tensor '%s' of %lld elements", f->path,
                        (long long)start, (long long)start + (long long)n, e->name, (long long)e->numel);
    size_t esize = zl_dtype_size(e->dtype);
    int64_t byte0 = start * (int64_t)esize;
    zl_status st = read_at(f, zl_tensor_data(dst), (size_t)n * esize, e->offset + byte0, e->name);
    if (!st && e->dtype == ZL_DTYPE_BOOL) st = check_bool(f, e, zl_tensor_data(dst), n, byte0);
    return st;
}

/* ---- writing ---- */

typedef struct w_entry {
    char *name;
    zl_dtype dt;
    int64_t numel;
} w_entry;

struct zl_safetensors_writer {
    zli_atomic out;
    int n;
    w_entry *e;
    int cur;               /* the tensor being filled */
    int64_t filled;        /* its elements written so far */
    zl_status code;        /* non-zero once an I/O error killed the writer */
    char *error;           /* that error's message, repeated by later calls */
};

/* A growing string for the header. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void put_i64(sbuf *b, int64_t v)
{
    char t[24];
    put(b, t, (size_t)snprintf(t, sizeof t, "%lld", (long long)v));
}

/* A JSON string: quotes and backslashes escaped, control characters as \u00XX,
 * UTF-8 (already checked) as is. */
static void put_json_string(sbuf *b, const char *s)
{
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            put(b, e, (size_t)snprintf(e, sizeof e, "\\u%04x", c));
        } else {
            put(b, s, 1);
        }
    }
    put(b, "\"", 1);
}

static int str_ptr_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Entries and metadata are well formed; names and keys unique. */
static zl_status check_entries(const char *path, int n, const zl_safetensors_entry *entries, int nmeta,
                               const zl_safetensors_meta *meta)
{
    if (n < 0 || nmeta < 0 || (n && !entries) || (nmeta && !meta))
        return zl_error(ZL_EINVAL, "cannot write '%s': %d tensors and %d metadata pairs, from %s and %s", path, n, nmeta,
                        entries ? "entries" : "NULL", meta ? "pairs" : "NULL");
    for (int i = 0; i < n; i++) {
        const zl_safetensors_entry *e = &entries[i];
        if (!e->name) return zl_error(ZL_EINVAL, "cannot write '%s': tensor %d has no name", path, i);
        if (!zli_utf8_valid(e->name, strlen(e->name))) return zl_error(ZL_EINVAL, "cannot write '%s': the name of tensor %d is not valid UTF-8", path, i);
        if (strcmp(e->name, META_KEY) == 0)
            return zl_error(ZL_EINVAL, "cannot write '%s': tensor %d: the name '" META_KEY "' is reserved for metadata", path, i);
        if ((unsigned)e->dtype >= ZL_DTYPE_COUNT)
            return zl_error(ZL_EDTYPE, "cannot write '%s': tensor '%s' has an invalid dtype %d", path, e->name, (int)e->dtype);
        if (e->ndim < 0 || e->ndim > ZL_MAX_DIMS)
            return zl_error(ZL_EINVAL, "cannot write '%s': tensor '%s' has %d dimensions (0 to %d are possible)", path,
                            e->name, e->ndim, ZL_MAX_DIMS);
        int64_t numel = 0, nbytes = 0;
        if (!shape_bytes(e->ndim, e->shape, zl_dtype_size(e->dtype), &numel, &nbytes)) {
            char sh[128];
            return zl_error(ZL_EINVAL, "cannot write '%s': tensor '%s' has shape %s (sizes must be >= 0 and the bytes fit int64)",
                            path, e->name, zl_shape_str(e->ndim, e->shape, sh, sizeof sh));
        }
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value)
            return zl_error(ZL_EINVAL, "cannot write '%s': metadata pair %d has a NULL %s", path, i, meta[i].key ? "value" : "key");
        if (!zli_utf8_valid(meta[i].key, strlen(meta[i].key)) || !zli_utf8_valid(meta[i].value, strlen(meta[i].value)))
            return zl_error(ZL_EINVAL, "cannot write '%s': metadata pair %d ('%s') is not valid UTF-8", path, i, meta[i].key);
    }
    int most = n > nmeta ? n : nmeta;
    const char **s = malloc((size_t)(most ? most : 1) * sizeof *s);
    if (!s) return zl_error(ZL_ENOMEM, "cannot write '%s': out of memory", path);
    zl_status st = ZL_OK;
    for (int pass = 0; pass < 2 && !st; pass++) {
        int k = pass ? nmeta : n;
        for (int i = 0; i < k; i++) s[i] = pass ? meta[i].key : entries[i].name;
        qsort(s, (size_t)k, sizeof *s, str_ptr_cmp);
        for (int i = 1; i < k && !st; i++)
            if (strcmp(s[i - 1], s[i]) == 0)
                st = zl_error(ZL_EINVAL, "cannot write '%s': %s '%s' is given twice", path,
                              pass ? "metadata key" : "tensor name", s[i]);
    }
    free(s);
    return st;
}

/* The header's JSON for the entries in order, padded with spaces to a multiple of 8. */
static zl_status build_header(const char *path, int n, const zl_safetensors_entry *entries, int nmeta,
                              const zl_safetensors_meta *meta, sbuf *b)
{
    puts_(b, "{");
    if (nmeta) {
        puts_(b, "\"" META_KEY "\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) puts_(b, ",");
            put_json_string(b, meta[i].key);
            puts_(b, ":");
            put_json_string(b, meta[i].value);
        }
        puts_(b, "}");
    }
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const zl_safetensors_entry *e = &entries[i];
        int64_t numel = 0, nbytes = 0;
        shape_bytes(e->ndim, e->shape, zl_dtype_size(e->dtype), &numel, &nbytes);
        if (i || nmeta) puts_(b, ",");
        put_json_string(b, e->name);
        puts_(b, ":{\"dtype\":\"");
        puts_(b, st_dtypes[e->dtype].name);
        puts_(b, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) puts_(b, ",");
            put_i64(b, e->shape[d]);
        }
        puts_(b, "],\"data_offsets\":[");
        put_i64(b, at);
        puts_(b, ",");
        if (__builtin_add_overflow(at, nbytes, &at))
            return zl_error(ZL_EINVAL, "cannot write '%s': the tensors add up to more than 2^63 bytes", path);
        put_i64(b, at);
        puts_(b, "]}");
    }
    puts_(b, "}");
    while (!b->oom && b->n % 8) puts_(b, " ");
    if (b->oom) return zl_error(ZL_ENOMEM, "cannot write '%s': out of memory building the header", path);
    return ZL_OK;
}

static void writer_free(zl_safetensors_writer *w)
{
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    free(w->error);
    free(w);
}

zl_safetensors_writer *zl_safetensors_writer_open(const char *path, int n, const zl_safetensors_entry *entries,
                                                  int nmeta, const zl_safetensors_meta *meta)
{
    zli_fs_step();
    if (!path) { zl_error(ZL_EINVAL, "cannot write a safetensors file: the path is NULL"); return NULL; }
    if (check_entries(path, n, entries, nmeta, meta)) return NULL;
    zl_safetensors_writer *w = calloc(1, sizeof *w);
    if (w) w->e = calloc((size_t)(n ? n : 1), sizeof *w->e);
    if (!w || !w->e) {
        free(w);
        zl_error(ZL_ENOMEM, "cannot write '%s': out of memory", path);
        return NULL;
    }
    w->out.fd = -1;
    for (int i = 0; i < n; i++, w->n++) {
        int64_t nbytes = 0;
        shape_bytes(entries[i].ndim, entries[i].shape, zl_dtype_size(entries[i].dtype), &w->e[i].numel, &nbytes);
        w->e[i].dt = entries[i].dtype;
        if (!(w->e[i].name = strdup(entries[i].name))) {
            writer_free(w);
            zl_error(ZL_ENOMEM, "cannot write '%s': out of memory", path);
            return NULL;
        }
    }
    sbuf b = {0};
    zl_status st = build_header(path, n, entries, nmeta, meta, &b);
    unsigned char len[LEN_BYTES];
    for (int k = 0; k < LEN_BYTES; k++) len[k] = (unsigned char)((uint64_t)b.n >> (8 * k));
    if (!st) st = zli_atomic_open(&w->out, path);
    if (!st) st = zli_atomic_write(&w->out, len, LEN_BYTES);
    if (!st) st = zli_atomic_write(&w->out, b.p, b.n);
    free(b.p);
    if (st) {
        writer_free(w);
        return NULL;
    }
    return w;
}

/* Step over tensors already complete (and empty ones). */
static void skip_full(const zl_safetensors_writer *w, int *cur, int64_t *filled)
{
    while (*cur < w->n && *filled == w->e[*cur].numel) {
        (*cur)++;
        *filled = 0;
    }
}

zl_status zl_safetensors_writer_append(zl_safetensors_writer *w, const zl_tensor *t)
{
    zli_fs_step();
    if (!w) return zl_error(ZL_EINVAL, "safetensors writer: the writer is NULL");
    if (w->code) return zl_error(w->code, "%s", w->error);
    const char *path = w->out.path;
    if (!t) return zl_error(ZL_EINVAL, "cannot write '%s': the appended tensor is NULL", path);
    if (zl_tensor_device(t) != ZL_DEVICE_CPU)
        return zl_error(ZL_EINVAL, "cannot write '%s': the appended tensor is not on the CPU (copy it to the CPU first)", path);
    zl_dtype dt = zl_tensor_dtype(t);
    int64_t left = zl_tensor_numel(t), total = left;
    int cur = w->cur;
    int64_t filled = w->filled;
    while (left > 0) {
        skip_full(w, &cur, &filled);
        if (cur == w->n)
            return zl_error(ZL_EINVAL, "cannot write '%s': %lld elements appended, %lld more than the tensors declared hold",
                            path, (long long)total, (long long)left);
        if (w->e[cur].dt != dt)
            return zl_error(ZL_EDTYPE, "cannot write '%s': tensor '%s' is %s, the appended elements are %s", path,
                            w->e[cur].name, st_dtypes[w->e[cur].dt].name, st_dtypes[dt].name);
        int64_t take = w->e[cur].numel - filled < left ? w->e[cur].numel - filled : left;
        filled += take;
        left -= take;
    }
    if (total == 0) return ZL_OK;
    zl_tensor *c = zl_tensor_is_contiguous(t) ? zl_tensor_retain((zl_tensor *)t) : zli_copy_as(t, dt, ZL_MEM_OTHER);
    if (!c) return zli_last_code();
    zl_status st = zli_atomic_write(&w->out, zl_tensor_data(c), (size_t)total * zl_dtype_size(dt));
    zl_tensor_release(c);
    if (st) {
        w->code = st;
        w->error = strdup(zl_last_error());
        if (!w->error) w->code = ZL_ENOMEM;
        return st;
    }
    w->cur = cur;
    w->filled = filled;
    return ZL_OK;
}

zl_status zl_safetensors_writer_commit(zl_safetensors_writer *w)
{
    zli_fs_step();
    if (!w) return zl_error(ZL_EINVAL, "safetensors writer: the writer is NULL");
    zl_status st;
    if (w->code) {
        st = zl_error(w->code, "%s", w->error ? w->error : "an earlier write failed");
    } else {
        skip_full(w, &w->cur, &w->filled);
        if (w->cur < w->n) {
            const w_entry *e = &w->e[w->cur];
            st = zl_error(ZL_ESTATE, "cannot write '%s': tensor '%s' has %lld of its %lld elements (the file was not written; '%s' is unchanged)",
                          w->out.path, e->name, (long long)w->filled, (long long)e->numel, w->out.path);
            zli_atomic_abort(&w->out);
        } else {
            st = zli_atomic_commit(&w->out);
        }
    }
    writer_free(w);
    return st;
}

void zl_safetensors_writer_abort(zl_safetensors_writer *w)
{
    if (!w) return;
    zli_atomic_abort(&w->out);
    writer_free(w);
}

zl_status zl_safetensors_save(const char *path, int n, const char *const *names, zl_tensor *const *tensors, int nmeta,
                              const zl_safetensors_meta *meta)
{
    if (n < 0 || (n && (!names || !tensors)))
        return zl_error(ZL_EINVAL, "cannot write '%s': %d tensors from NULL arrays", path ? path : "(null)", n);
    zl_safetensors_entry *e = calloc((size_t)(n ? n : 1), sizeof *e);
    if (!e) return zl_error(ZL_ENOMEM, "cannot write '%s': out of memory", path ? path : "(null)");
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) {
            free(e);
            return zl_error(ZL_EINVAL, "cannot write '%s': tensor %d ('%s') is NULL", path ? path : "(null)", i,
                            names[i] ? names[i] : "(null)");
        }
        e[i].name = names[i];
        e[i].dtype = zl_tensor_dtype(tensors[i]);
        e[i].ndim = zl_tensor_ndim(tensors[i]);
        memcpy(e[i].shape, zl_tensor_shape(tensors[i]), (size_t)e[i].ndim * sizeof(int64_t));
    }
    zl_safetensors_writer *w = zl_safetensors_writer_open(path, n, e, nmeta, meta);
    free(e);
    if (!w) return zli_last_code();
    for (int i = 0; i < n; i++) {
        zl_status st = zl_safetensors_writer_append(w, tensors[i]);
        if (st) {
            zl_safetensors_writer_abort(w);
            return st;
        }
    }
    return zl_safetensors_writer_commit(w);
}
