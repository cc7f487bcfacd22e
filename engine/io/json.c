/* JSON read into a tree and written out (json.h): a recursive-descent reader
 * that checks everything the text could get wrong before anything is used,
 * and the small writer engine.json needs. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

typedef struct reader {
    const char *p, *end, *start, *what;
    int depth, max_depth;
    zl_status st;
} reader;

static zl_status fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static zl_status fail(reader *r, const char *fmt, ...)
{
    if (r->st) return r->st;
    int line = 1;
    for (const char *q = r->start; q < r->p && q < r->end; q++) line += *q == '\n';
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return r->st = zl_error(ZL_EFORMAT, "%s: %s at line %d", r->what, msg, line);
}

static void skip_ws(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

/* The length of the valid UTF-8 sequence at p, or 0: no overlong forms, no
 * surrogates, nothing above U+10FFFF. */
size_t zli_utf8_len(const unsigned char *p, size_t avail)
{
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (avail < k || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return k;
}

bool zli_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = zli_utf8_len((const unsigned char *)s + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

int zli_hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

size_t zli_utf8_put(char *w, unsigned cp)
{
    if (cp < 0x80) { w[0] = (char)cp; return 1; }
    if (cp < 0x800) { w[0] = (char)(0xC0 | cp >> 6); w[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        w[0] = (char)(0xE0 | cp >> 12); w[1] = (char)(0x80 | (cp >> 6 & 0x3F)); w[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    w[0] = (char)(0xF0 | cp >> 18); w[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    w[2] = (char)(0x80 | (cp >> 6 & 0x3F)); w[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at r->p (on its opening quote), decoded into a new buffer. */
static char *read_string(reader *r)
{
    const char *q = ++r->p;
    while (q < r->end && *q != '"') q += *q == '\\' && q + 1 < r->end ? 2 : 1;
    if (q >= r->end) return fail(r, "a string is not closed"), NULL;
    char *out = malloc((size_t)(q - r->p) + 1), *w = out;
    if (!out) return r->st = zl_error(ZL_ENOMEM, "%s: out of memory", r->what), NULL;
    while (r->p < q) {
        unsigned char c = (unsigned char)*r->p;
        if (c < 0x20) {
            fail(r, "a string holds the control byte 0x%02X", c);
            break;
        }
        if (c != '\\') {
            size_t k = zli_utf8_len((const unsigned char *)r->p, (size_t)(q - r->p));
            if (!k) {
                fail(r, "a string is not valid UTF-8");
                break;
            }
            memcpy(w, r->p, k);
            w += k;
            r->p += k;
            continue;
        }
        char e = r->p[1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            *w++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            r->p += 2;
            continue;
        }
        int cp = e == 'u' && q - r->p >= 6 ? zli_hex4(r->p + 2) : -1;
        r->p += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF && q - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
            int lo = zli_hex4(r->p + 2);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                r->p += 6;
            }
        }
        if (cp <= 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
            r->p -= 6;
            fail(r, cp == 0 ? "a string holds \\u0000" : "a string holds a bad escape");
            break;
        }
        w += zli_utf8_put(w, (unsigned)cp);
    }
    if (r->st) {
        free(out);
        return NULL;
    }
    *w = '\0';
    r->p = q + 1;
    return out;
}

static void read_number(reader *r, zli_json *v)
{
    const char *s = r->p;
    if (r->p < r->end && *r->p == '-') r->p++;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') {
        fail(r, "a number has no digits");
        return;
    }
    if (*r->p == '0' && r->p + 1 < r->end && r->p[1] >= '0' && r->p[1] <= '9') {
        fail(r, "a number has a leading zero");
        return;
    }
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    bool integral = true;
    if (r->p < r->end && *r->p == '.') {
        integral = false;
        if (++r->p >= r->end || *r->p < '0' || *r->p > '9') {
            fail(r, "a number has no digits after its point");
            return;
        }
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        integral = false;
        if (++r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
        if (r->p >= r->end || *r->p < '0' || *r->p > '9') {
            fail(r, "a number has no digits in its exponent");
            return;
        }
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
    }
    char buf[64];
    size_t n = (size_t)(r->p - s);
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    v->type = ZLI_JNUM;
    v->d = strtod(buf, NULL);
    if (integral && (size_t)(r->p - s) < sizeof buf) {
        errno = 0;
        long long i = strtoll(buf, NULL, 10);
        if (errno == 0) {
            v->type = ZLI_JINT;
            v->i = i;
        }
    }
}

static void read_value(reader *r, zli_json *v);

/* The entries of an array or object, after its opening bracket. */
static void read_entries(reader *r, zli_json *v, bool object)
{
    size_t cap = 0;
    char close = object ? '}' : ']';
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? 2 * cap : 4;
            zli_json *nv = realloc(v->v, cap * sizeof *nv);
            char **nk = object ? realloc(v->k, cap * sizeof *nk) : NULL;
            if (nv) v->v = nv;
            if (nk) v->k = nk;
            if (!nv || (object && !nk)) {
                r->st = zl_error(ZL_ENOMEM, "%s: out of memory", r->what);
                return;
            }
        }
        skip_ws(r);
        if (object) {
            if (r->p >= r->end || *r->p != '"') {
                fail(r, "an object's key is not a string");
                return;
            }
            const char *at = r->p;
            char *key = read_string(r);
            if (!key) return;
            for (size_t j = 0; j < v->n; j++)
                if (strcmp(v->k[j], key) == 0) {
                    r->p = at;
                    fail(r, "the key \"%.60s\" appears twice in one object", key);
                    free(key);
                    return;
                }
            v->k[v->n] = key;
            skip_ws(r);
            if (r->p >= r->end || *r->p != ':') {
                v->v[v->n++] = (zli_json){.type = ZLI_JNULL};
                fail(r, "a ':' is missing after a key");
                return;
            }
            r->p++;
        }
        zli_json *e = &v->v[v->n++];
        *e = (zli_json){.type = ZLI_JNULL};
        read_value(r, e);
        if (r->st) return;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == close) {
            r->p++;
            return;
        }
        fail(r, "a ',' or '%c' is missing", close);
        return;
    }
}

static void read_value(reader *r, zli_json *v)
{
    skip_ws(r);
    v->at = r->p;
    if (r->p >= r->end) {
        fail(r, "the text ends where a value should be");
        return;
    }
    char c = *r->p;
    if (c == '{' || c == '[') {
        if (++r->depth > r->max_depth) {
            fail(r, "nesting deeper than %d levels", r->max_depth);
            return;
        }
        v->type = c == '{' ? ZLI_JOBJ : ZLI_JARR;
        read_entries(r, v, c == '{');
        r->depth--;
    } else if (c == '"') {
        v->type = ZLI_JSTR;
        v->s = read_string(r);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        read_number(r, v);
    } else {
        static const char *const words[] = {"null", "true", "false"};
        int w = 0;
        while (w < 3 && !((size_t)(r->end - r->p) >= strlen(words[w]) && !memcmp(r->p, words[w], strlen(words[w])))) w++;
        if (w == 3) {
            fail(r, "a value was expected");
            return;
        }
        v->type = w == 0 ? ZLI_JNULL : ZLI_JBOOL;
        v->b = w == 1;
        r->p += strlen(words[w]);
    }
    v->len = (size_t)(r->p - v->at);
}

static void free_tree(zli_json *v)
{
    free(v->s);
    for (size_t j = 0; j < v->n; j++) {
        free_tree(&v->v[j]);
        if (v->k) free(v->k[j]);
    }
    free(v->v);
    free(v->k);
}

void zli_json_free(zli_json *v)
{
    if (!v) return;
    free_tree(v);
    free(v);
}

zl_status zli_json_parse(const char *text, size_t len, const char *what, int max_depth, zli_json **out)
{
    *out = NULL;
    zli_json *root = calloc(1, sizeof *root);
    if (!root) return zl_error(ZL_ENOMEM, "%s: out of memory", what);
    reader r = {.p = text, .end = text + len, .start = text, .what = what, .max_depth = max_depth};
    read_value(&r, root);
    skip_ws(&r);
    if (!r.st && r.p < r.end) fail(&r, "text follows the value");
    if (r.st) {
        zli_json_free(root);
        return r.st;
    }
    *out = root;
    return ZL_OK;
}

const zli_json *zli_json_get(const zli_json *v, const char *key)
{
    if (!v || v->type != ZLI_JOBJ) return NULL;
    for (size_t j = 0; j < v->n; j++)
        if (strcmp(v->k[j], key) == 0) return &v->v[j];
    return NULL;
}

const char *zli_json_kind(const zli_json *v)
{
    switch (v->type) {
    case ZLI_JNULL: return "null";
    case ZLI_JBOOL: return "boolean";
    case ZLI_JSTR: return "string";
    case ZLI_JARR:
    case ZLI_JOBJ: return "table";
    default: return "number";
    }
}

/* ---- writing ---- */

void zli_jb_raw(zli_jbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void zli_jb_str(zli_jbuf *b, const char *s)
{
    zli_jb_raw(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            zli_jb_raw(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            zli_jb_raw(b, esc, 6);
        } else {
            zli_jb_raw(b, (const char *)p, 1);
        }
    }
    zli_jb_raw(b, "\"", 1);
}

void zli_jb_int(zli_jbuf *b, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%lld", (long long)v);
    zli_jb_raw(b, t, (size_t)n);
}

void zli_jb_num(zli_jbuf *b, double v)
{
    char t[32];
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(t, sizeof t, "%.*g", prec, v);
        if (strtod(t, NULL) == v) break;
    }
    /* Written with a point, so that it reads back as a float and not an integer. */
    if (!strpbrk(t, ".eEn")) t[n++] = '.', t[n++] = '0', t[n] = '\0';
    zli_jb_raw(b, t, (size_t)n);
}

void zli_jb_key(zli_jbuf *b, bool first, const char *key)
{
    if (!first) zli_jb_raw(b, ", ", 2);
    zli_jb_str(b, key);
    zli_jb_raw(b, ": ", 2);
}

void zli_jb_line_key(zli_jbuf *b, bool first, const char *key)
{
    zli_jb_raw(b, first ? "\n  " : ",\n  ", first ? 3 : 4);
    zli_jb_str(b, key);
    zli_jb_raw(b, ": ", 2);
}
