/* Private to the engine: JSON text read into a tree and written out, for a
 * checkpoint's engine.json. Reading is strict (RFC 8259, UTF-8 checked,
 * duplicate keys and nesting past a limit refused, integers kept exact in
 * 64 bits) and never runs anything; each value keeps where it stood in the
 * text, so a writer can copy a member through byte for byte. */
#ifndef ZL_IO_JSON_H
#define ZL_IO_JSON_H

#include "../core/tensor_impl.h"

typedef enum zli_jtype {
    ZLI_JNULL, ZLI_JBOOL, ZLI_JINT, ZLI_JNUM, ZLI_JSTR, ZLI_JARR, ZLI_JOBJ,
} zli_jtype;

typedef struct zli_json zli_json;
struct zli_json {
    zli_jtype type;
    bool b;                    /* JBOOL */
    int64_t i;                 /* JINT: a number written without fraction or exponent that fits */
    double d;                  /* JINT and JNUM */
    char *s;                   /* JSTR, decoded (a \u0000 in it is refused) */
    size_t n;                  /* JARR, JOBJ: entries */
    zli_json *v;               /* JARR, JOBJ: [n] values */
    char **k;                  /* JOBJ: [n] keys, decoded */
    const char *at;            /* the value's text in the source, `len` bytes */
    size_t len;
};

/* Parse len bytes of text; `what` names it in messages ("<what>: ... at line
 * L"). ZL_EFORMAT with the reason and line on bad JSON. *out: a tree to free
 * with zli_json_free, pointing into text (which must outlive it). */
ZLI_HIDDEN zl_status zli_json_parse(const char *text, size_t len, const char *what, int max_depth, zli_json **out);
ZLI_HIDDEN void zli_json_free(zli_json *v);
/* The member `key` of an object; NULL when absent or v is no object. */
ZLI_HIDDEN const zli_json *zli_json_get(const zli_json *v, const char *key);
/* What v is, as Lua names its types: "null", "boolean", "number", "string", "table". */
ZLI_HIDDEN const char *zli_json_kind(const zli_json *v);
/* Whether n bytes are valid UTF-8 (no overlong forms, no surrogates). */
ZLI_HIDDEN bool zli_utf8_valid(const char *s, size_t n);
/* The length of the valid UTF-8 sequence at p (at most `avail` bytes), or 0. */
ZLI_HIDDEN size_t zli_utf8_len(const unsigned char *p, size_t avail);
/* The value of 4 hex digits at p, or -1; a code point written as UTF-8 at w (its length). */
ZLI_HIDDEN int zli_hex4(const char *p);
ZLI_HIDDEN size_t zli_utf8_put(char *w, unsigned cp);

/* A growing text; every append after a failed allocation is dropped and
 * `failed` is set, so a writer checks once at the end. */
typedef struct zli_jbuf {
    char *p;
    size_t n, cap;
    bool failed;
} zli_jbuf;

ZLI_HIDDEN void zli_jb_raw(zli_jbuf *b, const char *s, size_t n);
ZLI_HIDDEN void zli_jb_str(zli_jbuf *b, const char *s);        /* a JSON string, escaped */
ZLI_HIDDEN void zli_jb_int(zli_jbuf *b, int64_t v);
ZLI_HIDDEN void zli_jb_num(zli_jbuf *b, double v);             /* shortest text that reads back the same */
ZLI_HIDDEN void zli_jb_key(zli_jbuf *b, bool first, const char *key);        /* [, ]"key": */
ZLI_HIDDEN void zli_jb_line_key(zli_jbuf *b, bool first, const char *key);   /* the same on a line of its own */

#endif
