/* An index a device's kernel finds out of range, noted for the host to
 * report later instead of read back before the kernel runs: the kernel
 * notes the first (an atomic compare-and-swap; the host's loops a plain
 * store), leaves the bad index's element alone, and the device's next copy
 * to the host, or its synchronisation, turns the note into the op's error.
 * The note is the op's, its position, the index and the rows it indexes. */
#ifndef ZL_MATH_INDEX_FAULT_H
#define ZL_MATH_INDEX_FAULT_H

#include <stdio.h>
#include "hd.h"

enum {
    ZLM_FAULT_EMBEDDING = 1, ZLM_FAULT_TARGET, ZLM_FAULT_INDEX_SELECT, ZLM_FAULT_GATHER, ZLM_FAULT_SCATTER,
    ZLM_FAULT_SCATTER_ADD
};

typedef struct zlm_index_fault {
    int32_t set;   /* 0 until an op notes one; then one of ZLM_FAULT_* */
    int32_t unused;
    int64_t pos, value, limit;
    int64_t aux;   /* cross_entropy's ignore_index; the dim index_select, gather and scatter index */
} zlm_index_fault;

/* Whether v indexes limit rows; when not, noted in f as op's at pos (with
 * aux), unless a fault was noted before. */
static inline ZL_HD bool zlm_index_in(zlm_index_fault *f, int op, int64_t pos, int64_t v, int64_t limit, int64_t aux)
{
    if (v >= 0 && v < limit) return true;
#ifdef __CUDA_ARCH__
    if (atomicCAS((int *)&f->set, 0, op) == 0) {
#else
    if (!f->set) {
        f->set = op;
#endif
        f->pos = pos;
        f->value = v;
        f->limit = limit;
        f->aux = aux;
    }
    return false;
}

/* The error a note stands for, as the op says it when it checks on the
 * host, and where it was found. */
static inline void zlm_index_fault_message(const zlm_index_fault *f, const char *where, char *buf, size_t size)
{
    static const char *const along[] = {"index_select", "gather", "scatter", "scatter_add"};
    if (f->set >= ZLM_FAULT_INDEX_SELECT && f->set <= ZLM_FAULT_SCATTER_ADD)
        snprintf(buf, size, "%s: index %lld at position %lld is out of range for dimension %lld of size %lld (found "
                 "on %s after the op was queued)", along[f->set - ZLM_FAULT_INDEX_SELECT], (long long)f->value,
                 (long long)f->pos, (long long)f->aux, (long long)f->limit, where);
    else if (f->set == ZLM_FAULT_TARGET)
        snprintf(buf, size, "cross_entropy: target %lld at position %lld is out of range for %lld classes "
                 "(expected 0..%lld, or ignore_index %lld; found on %s after the op was queued)", (long long)f->value,
                 (long long)f->pos, (long long)f->limit, (long long)(f->limit - 1), (long long)f->aux, where);
    else
        snprintf(buf, size, "embedding: index %lld at position %lld is out of range for a weight of %lld rows "
                 "(expected 0..%lld; found on %s after the op was queued)", (long long)f->value, (long long)f->pos,
                 (long long)f->limit, (long long)(f->limit - 1), where);
}

#endif
