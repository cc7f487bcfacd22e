/* A stand-in device for the CPU test suite: its memory is the
 * host's, and its tables run the CUDA kernels' element functions
 * (engine/math) in plain loops, so every path that sends a tensor to a
 * device runs without a GPU and is compared with the host. Core's primitives
 * and the optimizer table are here; a test hands in the ops' kernels it has. */
#ifndef ZL_TEST_STAND_IN_H
#define ZL_TEST_STAND_IN_H

#include "harness.h"

struct zli_dev_kernels;
struct zlm_index_fault;

/* The stand-in's device index: tensors on it are cuda:7. */
#define FAKE_INDEX 7

/* The ops' kernel table the stand-in hands out (NULL: it runs no op). */
void fake_use_kernels(const struct zli_dev_kernels *k);
/* Whether the stand-in draws random numbers (false: it has no rand primitive). */
void fake_use_rand(bool on);
/* Whether the stand-in has a copy stream (true at first; false: ZeRO copies
 * through from_host and to_host, done when they return). */
void fake_use_streams(bool on);
/* Copies queued on the stand-in's copy stream that no wait has done yet, and all ever queued. */
int64_t fake_copies_pending(void);
int64_t fake_copies_queued(void);
/* Whether the stand-in serves CUDA's kind as a registered backend (the
 * public device calls reach it: zl_tensor_to_device(t, CUDA, FAKE_INDEX)),
 * or the kind goes back to its own. */
void fake_register(bool on);
/* An uninitialised contiguous tensor on the stand-in, charged to cat. */
zl_tensor *fake_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat);
/* Bytes of the stand-in's memory charged to cat now. */
int64_t fake_bytes(zl_mem_category cat);
/* Bytes of pinned host memory the stand-in gave out and has not had back. */
int64_t fake_pinned_bytes(void);
/* The stand-in's index-fault note (its kernel table's index_faults), which
 * its next copy to the host reads; and the copies to the host so far. */
struct zlm_index_fault *fake_index_faults(int index);
extern int fake_to_hosts;
/* A contiguous copy of host tensor h on the stand-in, and one of d back in host memory. */
zl_tensor *to_fake(zl_tensor *h);
zl_tensor *from_fake(const zl_tensor *d);
/* A failure unless the stand-in's dev holds a's bits (a: host, contiguous). */
void check_bits(const zl_tensor *a, const zl_tensor *dev, const char *what);

#endif
