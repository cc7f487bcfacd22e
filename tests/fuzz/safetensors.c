/* libFuzzer target for the safetensors reader (engine/io/safetensors.c): any
 * bytes either open, with entries that tile the data exactly and read back as
 * the file's bytes, or fail naming the file. A file that opens and holds only
 * zlua's dtypes is written again by the writer and must open with the same
 * entries, metadata and bytes: what the reader takes, the writer can give. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz.h"
#include "zlua/zlua.h"

#define MAX_TENSORS 64

/* Every entry against the file: sizes, offsets tiling the data, the name index. */
static void check_layout(zl_safetensors *f, const uint8_t *data, size_t size)
{
    int n = zl_safetensors_count(f);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | data[k];
    int64_t at = 8 + (int64_t)hlen;
    for (int i = 0; i < n; i++) {
        const zl_safetensors_entry *e = zl_safetensors_entry_at(f, i);
        if (e->offset != at) fuzz_die("safetensors: tensor '%s' starts at %lld, expected %lld", e->name,
                                      (long long)e->offset, (long long)at);
        int64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= e->shape[d];
        if (numel != e->numel) fuzz_die("safetensors: tensor '%s' numel %lld, its shape gives %lld", e->name,
                                        (long long)e->numel, (long long)numel);
        if (e->dtype != ZL_DTYPE_COUNT && e->nbytes != numel * (int64_t)zl_dtype_size(e->dtype))
            fuzz_die("safetensors: tensor '%s' has %lld bytes for %lld elements", e->name, (long long)e->nbytes,
                     (long long)numel);
        if (zl_safetensors_find(f, e->name) != e) fuzz_die("safetensors: find('%s') gives another entry", e->name);
        at += e->nbytes;
    }
    if (at != (int64_t)size) fuzz_die("safetensors: the tensors end at %lld, the file at %zu", (long long)at, size);
    for (int i = 0; i < zl_safetensors_metadata_count(f); i++) {
        const zl_safetensors_meta *m = zl_safetensors_metadata_at(f, i);
        const char *v = zl_safetensors_metadata_get(f, m->key);
        if (!v || strcmp(v, m->value) != 0) fuzz_die("safetensors: metadata_get('%s') disagrees", m->key);
    }
}

/* Entry e read whole and, when it has elements, its last few through
 * read_into: the file's bytes, or an error naming the file (a BOOL byte
 * above 1). Returns the tensor read, or NULL. */
static zl_tensor *check_read(zl_safetensors *f, const zl_safetensors_entry *e, const uint8_t *data)
{
    const char *path = zl_safetensors_path(f);
    zl_tensor *t = zl_safetensors_read(f, e->name, ZL_MEM_OTHER);
    if (!t) {
        fuzz_expect_error("safetensors_read", path);
        return NULL;
    }
    if (zl_tensor_ndim(t) != e->ndim || zl_tensor_numel(t) != e->numel ||
        memcmp(zl_tensor_data(t), data + e->offset, (size_t)e->nbytes) != 0)
        fuzz_die("safetensors_read('%s') differs from the file", e->name);
    int64_t k = e->numel < 3 ? e->numel : 3;
    if (k > 0) {
        zl_tensor *dst = zl_tensor_new(e->dtype, 1, &k, ZL_MEM_OTHER);
        if (!dst) fuzz_die("out of memory");
        size_t esize = zl_dtype_size(e->dtype);
        if (zl_safetensors_read_into(f, e->name, e->numel - k, dst) != ZL_OK ||
            memcmp(zl_tensor_data(dst), data + e->offset + (e->numel - k) * (int64_t)esize, (size_t)k * esize) != 0)
            fuzz_die("safetensors_read_into('%s') differs from the file: %s", e->name, zl_last_error());
        zl_tensor_release(dst);
    }
    return t;
}

/* The n tensors written back with the file's names and metadata, then read
 * again: the same entries in the same order, the same metadata, the same bytes. */
static void check_rewrite(zl_safetensors *f, int n, zl_tensor *const *tensors)
{
    const char *names[MAX_TENSORS];
    for (int i = 0; i < n; i++) names[i] = zl_safetensors_entry_at(f, i)->name;
    int nmeta = zl_safetensors_metadata_count(f);
    zl_safetensors_meta *meta = malloc(sizeof *meta * (size_t)(nmeta ? nmeta : 1));
    if (!meta) fuzz_die("out of memory");
    for (int i = 0; i < nmeta; i++) meta[i] = *zl_safetensors_metadata_at(f, i);
    char path[4400];
    snprintf(path, sizeof path, "%s/rewrite.safetensors", fuzz_dir());
    if (zl_safetensors_save(path, n, names, tensors, nmeta, meta) != ZL_OK)
        fuzz_die("safetensors_save refused what the reader took: %s", zl_last_error());
    zl_safetensors *g = zl_safetensors_open(path);
    if (!g) fuzz_die("the writer's file does not open: %s", zl_last_error());
    if (zl_safetensors_count(g) != n || zl_safetensors_metadata_count(g) != nmeta)
        fuzz_die("the rewritten file has %d tensors and %d metadata pairs, expected %d and %d",
                 zl_safetensors_count(g), zl_safetensors_metadata_count(g), n, nmeta);
    for (int i = 0; i < nmeta; i++) {
        const char *v = zl_safetensors_metadata_get(g, meta[i].key);
        if (!v || strcmp(v, meta[i].value) != 0) fuzz_die("metadata '%s' changed in the rewrite", meta[i].key);
    }
    for (int i = 0; i < n; i++) {
        const zl_safetensors_entry *a = zl_safetensors_entry_at(f, i), *b = zl_safetensors_entry_at(g, i);
        if (strcmp(a->name, b->name) != 0 || a->dtype != b->dtype || a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim) != 0)
            fuzz_die("tensor %d ('%s') changed in the rewrite", i, a->name);
        zl_tensor *t = zl_safetensors_read(g, b->name, ZL_MEM_OTHER);
        if (!t || memcmp(zl_tensor_data(t), zl_tensor_data(tensors[i]), (size_t)a->nbytes) != 0)
            fuzz_die("tensor '%s' reads back differently after the rewrite", a->name);
        zl_tensor_release(t);
    }
    zl_safetensors_close(g);
    free(meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    zl_safetensors *f = zl_safetensors_open(path);
    if (!f) {
        fuzz_expect_error("safetensors_open", path);
        fuzz_expect_no_tensors();
        return 0;
    }
    check_layout(f, data, size);
    int n = zl_safetensors_count(f);
    zl_tensor *tensors[MAX_TENSORS];
    bool all = n <= MAX_TENSORS;
    for (int i = 0; i < n; i++) {
        const zl_safetensors_entry *e = zl_safetensors_entry_at(f, i);
        zl_tensor *t = NULL;
        if (e->dtype != ZL_DTYPE_COUNT) {
            t = check_read(f, e, data);
        } else if (zl_safetensors_read(f, e->name, ZL_MEM_OTHER)) {
            fuzz_die("safetensors_read took tensor '%s' of dtype %s, which zlua lacks", e->name, e->dtype_name);
        } else {
            fuzz_expect_error("safetensors_read", path);
        }
        if (!t) all = false;
        if (i < MAX_TENSORS) tensors[i] = t;
        else zl_tensor_release(t);
    }
    if (all) check_rewrite(f, n, tensors);
    for (int i = 0; i < n && i < MAX_TENSORS; i++) zl_tensor_release(tensors[i]);
    zl_safetensors_close(f);
    fuzz_expect_no_tensors();
    return 0;
}
