/* zl_read_csv: numeric CSV files, plain or gzip, into an f32 tensor [rows, cols].
 * The bytes come through the io stream (stream.h: zlib, gzip told apart by its
 * magic); this file splits them into lines and fields and parses each with strtod. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "stream.h"

#define CHUNK (1 << 16)
/* How much of a bad field an error message quotes. */
#define QUOTE_MAX 40

/* The parse in progress: the current line being assembled and the values so far. */
typedef struct csv_reader {
    const char *path;
    bool skip_header;
    int64_t lineno;        /* 1-based number of the line in `line` */
    char *line;
    size_t line_len, line_cap;
    float *values;
    size_t nvalues, values_cap;
    int64_t rows, cols;
    int64_t cols_line;     /* the line that fixed the field count */
} csv_reader;

static zl_status grow(const csv_reader *r, void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return ZL_OK;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < need) ncap *= 2;
    void *q = realloc(*p, ncap * elem);
    if (!q) return zl_error(ZL_ENOMEM, "read_csv: out of memory reading '%s'", r->path);
    *p = q;
    *cap = ncap;
    return ZL_OK;
}

static bool is_blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return false;
    return true;
}

/* Parse one field (NUL-terminated, surrounding blanks allowed) into *out. */
static zl_status parse_field(csv_reader *r, char *field, int64_t index, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(field, &end);
    bool ok = end != field;
    while (*end == ' ' || *end == '\t' || *end == '\r') end++;
    ok = ok && *end == '\0';
    if (!ok) {
        while (*field == ' ' || *field == '\t') field++;
        size_t n = strlen(field);
        while (n > 0 && (field[n - 1] == ' ' || field[n - 1] == '\t' || field[n - 1] == '\r')) n--;
        return zl_error(ZL_EFORMAT, "%s:%lld: field %lld is not a number: '%.*s'%s", r->path,
                        (long long)r->lineno, (long long)index, (int)(n < QUOTE_MAX ? n : QUOTE_MAX),
                        field, n > QUOTE_MAX ? "..." : "");
    }
    /* Overflow of double, or a finite double beyond f32; "inf" written out is kept. */
    if ((errno == ERANGE && fabs(v) == HUGE_VAL) || (isfinite(v) && fabs(v) > FLT_MAX))
        return zl_error(ZL_EFORMAT, "%s:%lld: field %lld is out of range for f32: '%.*s'", r->path,
                        (long long)r->lineno, (long long)index, QUOTE_MAX, field);
    *out = (float)v;
    return ZL_OK;
}

/* Split the assembled line on commas and append its values. */
static zl_status parse_line(csv_reader *r)
{
    r->line[r->line_len] = '\0';
    if (is_blank(r->line)) return ZL_OK;
    if (r->skip_header) {
        r->skip_header = false;
        return ZL_OK;
    }
    int64_t nfields = 1;
    for (const char *c = r->line; *c; c++) nfields += *c == ',';
    if (r->rows == 0) {
        r->cols = nfields;
        r->cols_line = r->lineno;
    } else if (nfields != r->cols) {
        return zl_error(ZL_EFORMAT, "%s:%lld: row has %lld fields, expected %lld (as on line %lld)",
                        r->path, (long long)r->lineno, (long long)nfields, (long long)r->cols,
                        (long long)r->cols_line);
    }
    zl_status st = grow(r, (void **)&r->values, &r->values_cap, r->nvalues + (size_t)nfields, sizeof(float));
    if (st) return st;
    char *field = r->line;
    for (int64_t f = 0; f < nfields; f++) {
        char *comma = strchr(field, ',');
        if (comma) *comma = '\0';
        st = parse_field(r, field, f + 1, &r->values[r->nvalues + (size_t)f]);
        if (st) return st;
        field = comma ? comma + 1 : field + strlen(field);
    }
    r->nvalues += (size_t)nfields;
    r->rows++;
    return ZL_OK;
}

/* Feed n bytes of the file; complete lines are parsed as they end. */
static zl_status feed(csv_reader *r, const char *buf, size_t n)
{
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(buf + i, '\n', n - i);
        size_t take = nl ? (size_t)(nl - (buf + i)) : n - i;
        zl_status st = grow(r, (void **)&r->line, &r->line_cap, r->line_len + take + 1, 1);
        if (st) return st;
        if (memchr(buf + i, '\0', take))
            return zl_error(ZL_EFORMAT, "%s:%lld: contains a NUL byte: not a text file", r->path,
                            (long long)r->lineno);
        memcpy(r->line + r->line_len, buf + i, take);
        r->line_len += take;
        i += take;
        if (nl) {
            st = parse_line(r);
            if (st) return st;
            r->line_len = 0;
            r->lineno++;
            i++;
        }
    }
    return ZL_OK;
}

/* Stream the whole file through the reader; a last line without a newline counts. */
static zl_status read_all(csv_reader *r, zli_stream *s)
{
    char *buf = malloc(CHUNK);
    if (!buf) return zl_error(ZL_ENOMEM, "read_csv: out of memory reading '%s'", r->path);
    zl_status st;
    for (;;) {
        size_t got;
        st = zli_stream_read(s, buf, CHUNK, &got);
        if (!st && got) st = feed(r, buf, got);
        if (st || got < CHUNK) break;
    }
    free(buf);
    if (!st && r->line_len > 0) st = parse_line(r);
    return st;
}

zl_tensor *zl_read_csv(const char *path, bool skip_header)
{
    zli_stream stream;
    if (zli_stream_open(&stream, path, "read_csv")) return NULL;
    csv_reader r = {.path = path, .skip_header = skip_header, .lineno = 1};
    zl_status st = read_all(&r, &stream);
    zli_stream_close(&stream);

    zl_tensor *t = NULL;
    if (!st && r.rows == 0) {
        zl_error(ZL_EFORMAT, "%s: no data rows (the file is empty%s)", path,
                 skip_header ? " or holds only a header" : "");
    } else if (!st) {
        t = zl_tensor_new(ZL_DTYPE_F32, 2, (int64_t[]){r.rows, r.cols}, ZL_MEM_OTHER);
        if (t) memcpy(zl_tensor_data(t), r.values, r.nvalues * sizeof(float));
    }
    free(r.line);
    free(r.values);
    return t;
}
