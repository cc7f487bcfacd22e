/* zlua/optim.h — the fused optimizer kernels (Adam/AdamW, Lamb, SGD): on the
 * CPU one pass per tensor over flat contiguous buffers, on a device one pass
 * over a list of tensors, updating the f32 master parameters and the
 * optimizer state in place. These are the arithmetic; optimizer objects
 * (param groups, state, step counts) over them are zlua/optimizer.h's, and
 * DeepSpeed's LR schedules zlua/schedule.h's. Also mixed precision's pieces:
 * the overflow check, the global gradient norm and clipping, and the fp16
 * loss scaler. */
#ifndef ZLUA_OPTIM_H
#define ZLUA_OPTIM_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The buffers of one step, all contiguous with n elements and not overlapping.
 * Borrowed: nothing is kept after the call. A zero-initialised struct plus the
 * pointers and n is a valid f32 step without a half copy. */
typedef struct zl_optim_buf {
    float *p;              /* [n] f32 master parameters, updated in place */
    const void *g;         /* [n] gradient in g_dtype; read, never written */
    zl_dtype g_dtype;      /* ZL_DTYPE_F32, ZL_DTYPE_BF16 or ZL_DTYPE_F16 */
    float *m;              /* [n] Adam/Lamb first moment; SGD momentum buffer */
    float *v;              /* [n] Adam/Lamb second moment; unused by SGD (may be NULL) */
    void *p_half;          /* [n] [out] p after the step rounded to half_dtype, or NULL */
    zl_dtype half_dtype;   /* ZL_DTYPE_BF16 or ZL_DTYPE_F16 when p_half is set */
    int64_t n;             /* elements; 0 is a no-op */
} zl_optim_buf;

/* Fill *out from tensors: p f32; g f32, bf16 or f16; m, v f32; p_half bf16 or
 * f16. All CPU, contiguous, with as many elements as p (shapes may differ, as
 * with a flat shard against a view). m, v and p_half may be NULL. On error *out
 * is untouched and the message names the role and both shapes. */
ZL_API zl_status zl_optim_buf_from_tensors(zl_optim_buf *out, zl_tensor *p, zl_tensor *g,
                                           zl_tensor *m, zl_tensor *v, zl_tensor *p_half);

/* ---- Adam / AdamW: DeepSpeedCPUAdam's and torch.optim.Adam(W)'s update ----
 * With t = step, s = grad_scale, bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (both 1
 * when bias_correction is off), per element in f32:
 *     g = s * g;  if (!adamw_mode) g += weight_decay * p       (L2, Adam)
 *     m = beta1 * m + (1 - beta1) * g
 *     v = beta2 * v + (1 - beta2) * g * g
 *     denom = sqrt(v) / sqrt(bc2) + eps                         (eps after the sqrt)
 *     if (adamw_mode) p -= lr * weight_decay * p                (decoupled, AdamW)
 *     p -= (lr / bc1) * m / denom
 * Scalars derived from the hyperparameters are computed in double, then rounded. */
typedef struct zl_optim_adam {
    double lr;             /* >= 0 */
    double beta1, beta2;   /* each in [0, 1) */
    double eps;            /* >= 0 */
    double weight_decay;   /* >= 0 */
    bool adamw_mode;       /* true: decoupled decay (DeepSpeed's default, even for "Adam") */
    bool bias_correction;
    int64_t step;          /* t >= 1: this step's number, counted per tensor */
    double grad_scale;     /* finite, >= 0: 1 / (loss scale * clip factor), 1 for none */
} zl_optim_adam;

/* DeepSpeed's defaults: lr 1e-3, betas 0.9 and 0.999, eps 1e-8, weight_decay 0,
 * adamw_mode and bias_correction true, step 1, grad_scale 1. */
ZL_API zl_optim_adam zl_optim_adam_defaults(void);
/* One fused pass: reads p, g, m, v once, writes p, m, v (and p_half) once.
 * Errors: ZL_EINVAL naming the bad hyperparameter or buffer; nothing is written. */
ZL_API zl_status zl_optim_adam_step(const zl_optim_adam *hp, const zl_optim_buf *b);

/* ---- Lamb: DeepSpeed's FusedLamb (eps outside the sqrt) ----
 * With s, bc1, bc2 as for Adam and rate = lr * sqrt(bc2) / bc1 (lr when
 * bias_correction is off):
 *     g = s * g;  m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
 *     u = m / (sqrt(v) + eps) + weight_decay * p
 *     ratio = |p| / |u| clamped to [min_coeff, max_coeff]; 1 when either norm is 0
 *     p -= rate * ratio * u
 * Norms are over the whole tensor. Without bias correction this is the Lamb
 * paper's update; with it, as in DeepSpeed, the correction is folded into the
 * rate, so eps, the decay term and the trust ratio see the uncorrected m and v.
 *
 * Two passes, because no element of p may change before |u| over the whole
 * tensor is known: the first updates m and v and sums p^2 and u^2; the second
 * recomputes u from p, m, v (cheaper than storing it) and applies it. Sums are
 * taken in double per fixed chunk and then added in order, so they do not
 * depend on the thread count. A tensor split across ranks (ZeRO) calls the
 * passes itself and adds the sums over ranks between them. */
typedef struct zl_optim_lamb {
    double lr;             /* >= 0 */
    double beta1, beta2;   /* each in [0, 1) */
    double eps;            /* >= 0 */
    double weight_decay;   /* >= 0 */
    double max_coeff;      /* >= min_coeff */
    double min_coeff;      /* >= 0 */
    bool bias_correction;
    int64_t step;          /* t >= 1 */
    double grad_scale;     /* finite, >= 0 */
} zl_optim_lamb;

/* DeepSpeed's defaults: lr 1e-3, betas 0.9 and 0.999, eps 1e-8, weight_decay 0,
 * max_coeff 10, min_coeff 0.01, bias_correction true, step 1, grad_scale 1. */
ZL_API zl_optim_lamb zl_optim_lamb_defaults(void);
/* Both passes over one whole tensor. ratio, when not NULL, receives the trust
 * ratio used. A NaN in the gradient makes the ratio NaN: the call then fails
 * (ZL_EINVAL) with m and v already updated, so skip overflowed steps before
 * stepping, as the loss scaler does. */
ZL_API zl_status zl_optim_lamb_step(const zl_optim_lamb *hp, const zl_optim_buf *b, double *ratio);
/* Pass one: update m and v; sq[0] = sum of p^2, sq[1] = sum of u^2 over this slice. */
ZL_API zl_status zl_optim_lamb_moments(const zl_optim_lamb *hp, const zl_optim_buf *b, double sq[2]);
/* The clamped trust ratio from the total sums of squares of p and u. */
ZL_API double zl_optim_lamb_trust_ratio(const zl_optim_lamb *hp, double p_sq, double u_sq);
/* Pass two: p -= rate * ratio * u, and the half copy. Reads p, m, v; g is not used. */
ZL_API zl_status zl_optim_lamb_apply(const zl_optim_lamb *hp, const zl_optim_buf *b, double ratio);

/* ---- SGD: torch.optim.SGD ----
 *     g = s * g + weight_decay * p
 *     if (momentum != 0) {
 *         buf = step == 1 ? g : momentum * buf + (1 - dampening) * g      (buf is b->m)
 *         g = nesterov ? g + momentum * buf : buf
 *     }
 *     p -= lr * g
 * b->m may be NULL when momentum is 0; b->v is never used. */
typedef struct zl_optim_sgd {
    double lr;             /* >= 0 */
    double momentum;       /* >= 0 */
    double dampening;      /* finite */
    double weight_decay;   /* >= 0 */
    bool nesterov;         /* needs momentum > 0 and dampening 0, as in torch */
    int64_t step;          /* t >= 1; step 1 starts the momentum buffer from g */
    double grad_scale;     /* finite, >= 0 */
} zl_optim_sgd;

/* torch's defaults: lr 1e-3, momentum, dampening and weight_decay 0, no nesterov,
 * step 1, grad_scale 1. */
ZL_API zl_optim_sgd zl_optim_sgd_defaults(void);
ZL_API zl_status zl_optim_sgd_step(const zl_optim_sgd *hp, const zl_optim_buf *b);

/* ---- steps over tensors, in host memory or on a device ----
 * One step of a list of n tensor sets sharing the hyperparameters (and so the
 * step number): in each set p f32; g f32, bf16 or f16; m, v f32 where the
 * optimizer keeps them (SGD's m only with momentum; v unused); p_half bf16 or
 * f16, or NULL; each contiguous, with as many elements as its p. Every tensor
 * of the list lives in one place. In host memory each set is stepped by
 * zl_optim_*_step, so the results are those bits. On a device the device's
 * fused multi-tensor kernels step the whole list (CUDA: kernels/optim.cu,
 * whose per-element math, math/optim.h, is the host's AVX2/AVX-512
 * kernels' bit for bit). Errors name the set, the role and the device;
 * a device without optimizer kernels is ZL_EDEVICE. Argument errors write
 * nothing. */
typedef struct zl_optim_tensors {
    zl_tensor *p, *g, *m, *v, *p_half;
} zl_optim_tensors;

ZL_API zl_status zl_optim_adam_tensors(const zl_optim_adam *hp, const zl_optim_tensors *t, int n);
ZL_API zl_status zl_optim_sgd_tensors(const zl_optim_sgd *hp, const zl_optim_tensors *t, int n);
/* Each set's trust ratio from its own norms; ratio [n], when not NULL,
 * receives them. A NaN ratio fails as zl_optim_lamb_step does, before any p
 * of the list changes (m and v are updated by then). */
ZL_API zl_status zl_optim_lamb_tensors(const zl_optim_lamb *hp, const zl_optim_tensors *t, int n, double *ratio);

/* ---- kernel selection ----
 * Each optimizer has an AVX-512, an AVX2 (with FMA and F16C) and a scalar
 * kernel; the best the CPU supports runs. The environment variable ZLUA_SIMD,
 * read at the first step, caps the choice: "avx512" or "auto" (the default),
 * "avx2", "scalar" or "off"; another value is ignored. The kernels agree to
 * float rounding (they may contract multiply-adds differently), and a half copy
 * of p is the same bits whichever kernel made it (bar NaN payloads). */

/* "avx512", "avx2" or "scalar": the kernel the next step will use. */
ZL_API const char *zl_optim_kernel_name(void);
/* Force a kernel: "auto", "avx512", "avx2", "scalar" or "off"; NULL re-applies
 * ZLUA_SIMD. ZL_EINVAL for an unknown name or one this CPU cannot run.
 * Not to be called while a step runs on another thread. */
ZL_API zl_status zl_optim_set_kernel(const char *name);

/* ---- mixed precision: overflow, global gradient norm, clipping ----
 * Passes over a list of gradient tensors: f32, bf16 or f16, any layout (a
 * strided one is read through a contiguous copy), borrowed, all in host memory
 * or all on one device (which then runs the pass: CUDA's kernels/grad.cu).
 * The work is cut into fixed chunks, run in parallel on the host, so results
 * do not depend on the thread count; a device sums the same chunks in the
 * same order, so its norm has the host's bits. Errors name the list position,
 * the shape and the dtype (or the device) of the culprit; nothing is written
 * on error. */

/* *found = true when any element of any tensor is inf or NaN (an fp16 step's
 * overflow; false for an empty list). Reads every element (no early exit). */
ZL_API zl_status zl_grad_nonfinite(zl_tensor *const *tensors, int n, bool *found);
/* *out = the sum of the squares of all elements, accumulated in double: the
 * global L2 norm is its square root. inf or NaN in a gradient propagate. */
ZL_API zl_status zl_grad_norm_sq(zl_tensor *const *tensors, int n, double *out);
/* As zl_grad_norm_sq, the chunk sums added onto *acc: a list taken in parts,
 * one call each in order, has the bits of one call over the whole list (a
 * device's sum of its part is added whole). */
ZL_API zl_status zl_grad_norm_sq_add(zl_tensor *const *tensors, int n, double *acc);
/* Multiply every element by s (finite) in place, in f32 and rounded back to
 * each tensor's dtype (NaN payloads aside, as zl_f32_to_bf16/_f16 round).
 * Tensors sharing storage are an error (ZL_EINVAL): each would be scaled twice;
 * so is a strided view on a device (scale what it views). */
ZL_API zl_status zl_grad_scale(zl_tensor *const *tensors, int n, double s);
/* The clipping coefficient for a global norm (torch's clip_grad_norm_ and
 * DeepSpeed's gradient_clipping): max_norm / (norm + 1e-6) when that is below
 * 1, else 1. Also 1 when max_norm <= 0 (clipping off) or norm is not finite
 * (an overflowed step, skipped anyway). With fp16, norm is that of the scaled
 * gradients divided by the loss scale, and the optimizer's grad_scale is
 * coef / loss_scale: unscaling and clipping in one multiply. */
ZL_API double zl_grad_clip_coef(double norm, double max_norm);

/* ---- the fp16 loss scaler: DeepSpeed's static LossScaler and DynamicLossScaler ----
 * The loss is multiplied by zl_loss_scaler_scale() before backward; at each
 * optimizer boundary, after checking the gradients of every rank, call
 * zl_loss_scaler_update(overflow). An overflowed step is skipped (no optimizer
 * or scheduler step) whatever the scaler does. A dynamic scaler (loss_scale 0)
 * starts at 2^initial_scale_power and follows DeepSpeed 0.16.5's update_scale:
 *     overflow:  if hysteresis == 1 or cur_hysteresis == 1:
 *                    at min_loss_scale with raise_error_at_min_scale: error
 *                    else cur_scale = max(cur_scale / 2, min_loss_scale)
 *                else cur_hysteresis -= 1
 *                last_overflow_iter = cur_iter
 *     clean:     if consecutive_hysteresis: cur_hysteresis = hysteresis
 *                if (cur_iter - last_overflow_iter) % loss_scale_window == 0:
 *                    if not consecutive_hysteresis: cur_hysteresis = hysteresis
 *                    cur_scale *= 2
 *     then       cur_iter += 1
 * So the scale doubles after every loss_scale_window clean steps counted from
 * the last overflow (or the start), and halves on the hysteresis-th overflow
 * since the hysteresis was last refilled. A static scaler never changes. */
typedef struct zl_loss_scaler zl_loss_scaler;

typedef struct zl_loss_scaler_config {
    double loss_scale;             /* fp16.loss_scale: 0 = dynamic, > 0 = this static scale */
    int initial_scale_power;       /* 0..127: the first dynamic scale is 2^power */
    int64_t loss_scale_window;     /* >= 1 */
    int hysteresis;                /* >= 1: DeepSpeed's delayed_shift */
    bool consecutive_hysteresis;   /* refill the hysteresis on every clean step */
    double min_loss_scale;         /* > 0: the floor */
    bool raise_error_at_min_scale; /* an overflow at the floor stops the run; false: stay at the floor */
} zl_loss_scaler_config;

/* The scaler's state, all a checkpoint needs besides the config. */
typedef struct zl_loss_scaler_state {
    double cur_scale;              /* > 0 */
    int64_t cur_iter;              /* updates so far, >= 0 */
    int64_t last_overflow_iter;    /* -1 (none yet) .. cur_iter - 1 */
    int cur_hysteresis;            /* >= 1 */
} zl_loss_scaler_state;

/* DeepSpeed's fp16 defaults: loss_scale 0, initial_scale_power 16,
 * loss_scale_window 1000, hysteresis 2, consecutive_hysteresis false,
 * min_loss_scale 1, raise_error_at_min_scale true. (DeepSpeed's ZeRO passes
 * none of them when the fp16 block sets none of the five dynamic keys, and its
 * scaler then starts at 2^32 with hysteresis 1: the config reader decides.) */
ZL_API zl_loss_scaler_config zl_loss_scaler_defaults(void);
/* A new scaler, or NULL with an error naming the fp16.<key> and its value.
 * The dynamic keys are checked only when loss_scale is 0. */
ZL_API zl_loss_scaler *zl_loss_scaler_new(const zl_loss_scaler_config *cfg);
ZL_API void zl_loss_scaler_free(zl_loss_scaler *ls);
/* One optimizer boundary. ZL_ESTATE ("fp16: gradient overflow at the minimum
 * loss scale ...") when an overflow comes at the floor with
 * raise_error_at_min_scale; the state is then unchanged. */
ZL_API zl_status zl_loss_scaler_update(zl_loss_scaler *ls, bool overflow);
/* The scale for the next backward. */
ZL_API double zl_loss_scaler_scale(const zl_loss_scaler *ls);
ZL_API bool zl_loss_scaler_is_dynamic(const zl_loss_scaler *ls);
ZL_API zl_loss_scaler_state zl_loss_scaler_get_state(const zl_loss_scaler *ls);
/* Restore a saved state (ZL_EINVAL naming the field when out of range; the
 * scaler is then unchanged). */
ZL_API zl_status zl_loss_scaler_set_state(zl_loss_scaler *ls, const zl_loss_scaler_state *st);

#ifdef __cplusplus
}
#endif
#endif
