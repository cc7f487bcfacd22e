/* The optimizers and mixed precision's passes on a device: the table a
 * device hands the optim layer through its storages (zli_device_ops.optim,
 * CUDA's in cuda/optim.c) and the lookup the entry points use. Buffers are
 * in the device's memory; what the host reads back (sums, flags) and what it
 * hands in (trust ratios) is host memory. An entry returns when what it
 * writes to the host is there; the device's own writes may still be queued. */
#ifndef ZL_OPTIM_DEVICE_OPTIM_H
#define ZL_OPTIM_DEVICE_OPTIM_H

#include "../core/tensor_impl.h"

/* n elements of dtype dt (f32, bf16 or f16) at x, contiguous. */
typedef struct zli_dev_span {
    void *x;
    zl_dtype dt;
    int64_t n;
} zli_dev_span;

/* The chunk of the gradient norm's partial sums, the host's and every
 * device's (math/grad.h's ZLM_SUMSQ_CHUNK; test_cuda_math checks). */
#define ZLI_GRAD_CHUNK 32768

typedef struct zli_dev_optim {
    /* One step of each b[0..n) (zl_optim_buf as zlua/optim.h has it, the
     * pointers the device's) with hp's update, its constants rounded as the
     * host's kernels round them. Buffers are checked already. */
    zl_status (*adam)(int index, const zl_optim_adam *hp, const zl_optim_buf *b, int n);
    zl_status (*sgd)(int index, const zl_optim_sgd *hp, const zl_optim_buf *b, int n);
    /* Lamb's pass one on each b[k]: m and v updated; sq[2k], sq[2k + 1] (host)
     * its sums of p^2 and u^2. */
    zl_status (*lamb_moments)(int index, const zl_optim_lamb *hp, const zl_optim_buf *b, int n, double *sq);
    /* Lamb's pass two: p of each b[k] stepped with trust ratio ratio[k] (host). */
    zl_status (*lamb_apply)(int index, const zl_optim_lamb *hp, const zl_optim_buf *b, int n, const double *ratio);
    /* *found (host) = some element of some span is inf or NaN. */
    zl_status (*nonfinite)(int index, const zli_dev_span *s, int n, bool *found);
    /* part (host) = each span's sums of squares in double, one per
     * ZLI_GRAD_CHUNK elements in the host's order within the chunk: spans in
     * turn, ceil(n / ZLI_GRAD_CHUNK) sums each. */
    zl_status (*sumsq)(int index, const zli_dev_span *s, int n, double *part);
    /* Every element of every span times f, in f32, rounded back to its dtype. */
    zl_status (*scale)(int index, const zli_dev_span *s, int n, float f);
} zli_dev_optim;

/* The table of the device t lives on, or NULL with ZL_EDEVICE naming op and
 * the device when it runs no optimizer. t must be on a device. */
ZLI_HIDDEN const zli_dev_optim *zli_dev_optim_of(const char *op, const zl_tensor *t);

/* grad.c's passes over a list that lives on a device (grad_device.c), the
 * list checked already: zl_grad_nonfinite, zl_grad_norm_sq, zl_grad_scale. */
ZLI_HIDDEN zl_status zli_grad_nonfinite_device(zl_tensor *const *ts, int n, bool *found);
ZLI_HIDDEN zl_status zli_grad_norm_sq_device(zl_tensor *const *ts, int n, double *out);
ZLI_HIDDEN zl_status zli_grad_scale_device(zl_tensor *const *ts, int n, float s);

#endif
