/* C-callable launchers of the CUDA kernels in the .cu files beside this. Every
 * pointer is device memory unless said otherwise; sizes are elements; dtypes
 * are zl_dtype values (f32, f16, bf16: the ZLM_* codes of math/hd.h);
 * the stream is a cudaStream_t passed as void * (NULL: the default stream);
 * each returns the launch's cudaError_t as an int (0 is cudaSuccess). */
#ifndef ZL_CUDA_KERNELS_H
#define ZL_CUDA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include "../../math/cross_entropy.h"
#include "../../math/grad.h"
#include "../../math/index_fault.h"
#include "../../math/optim.h"
#include "../../math/select.h"
#include "../../math/strided.h"
#include "../../math/window.h"

#ifdef __cplusplus
extern "C" {
#endif

/* zl_dtype's bool, the output dtype of comparisons (one byte, 0 or 1). */
#define ZLK_BOOL 6

/* ---- elementwise: kind is a ZLM_U_* / ZLM_B_* code (math/unary.h, binary.h) ---- */
/* y [n] (ydt) = f(x [n] (xdt)); p0, p1 as zlm_unary_forward takes them. */
int zlk_cuda_unary_forward(int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0, float p1,
                           void *stream);
/* gx [n] f32 = g * f'(x); y [n] (ydt) is the stored output, NULL unless
 * zlm_unary_needs_output(kind); p0, p1 the forward's. */
int zlk_cuda_unary_backward(int kind, int64_t n, const void *x, int xdt, const void *y, int ydt, const void *g,
                            int gdt, float *gx, float p0, float p1, void *stream);

/* The output's shape and each operand's strides read as if broadcast to it
 * (0 on stretched dims), outermost first. */
typedef struct zlk_bcast {
    int ndim;              /* 0..8 */
    int64_t shape[8];
    int64_t sa[8], sb[8];
} zlk_bcast;

/* out [shape] (odt; ZLK_BOOL for comparisons) = a (op) b. */
int zlk_cuda_binary_forward(int kind, const zlk_bcast *bc, const void *a, int adt, const void *b, int bdt, void *out,
                            int odt, void *stream);
/* out [shape] (odt, any zl_dtype) = a (op) b in double, a (adt) and b (bdt)
 * any integer or bool dtype: binary ops on integer operands. */
int zlk_cuda_binary_int_forward(int kind, const zlk_bcast *bc, const void *a, int adt, const void *b, int bdt,
                                void *out, int odt, void *stream);
/* ga, gb [n] f32 (either may be NULL): the per-element gradients of a and b of
 * the same shape as the output. A broadcast operand's gradient is summed down
 * to its shape afterwards by a reduction (not here). */
int zlk_cuda_binary_backward(int kind, int64_t n, const void *a, int adt, const void *b, int bdt, const void *g,
                             int gdt, float *ga, float *gb, void *stream);

/* ---- rows: one thread block per row of d contiguous elements ---- */
/* x, y [outer, d, inner], over the middle dim. */
int zlk_cuda_softmax_forward(bool is_log, int64_t outer, int64_t d, int64_t inner, const void *x, int xdt, void *y,
                             int ydt, void *stream);
/* y [outer, d, inner] the stored output, g its gradient; gx [outer, d, inner] f32. */
int zlk_cuda_softmax_backward(bool is_log, int64_t outer, int64_t d, int64_t inner, const void *y, int ydt,
                              const void *g, int gdt, float *gx, void *stream);

/* x, y [rows, m]; w, b [m] or NULL; mean, rstd [rows] f32 [out]. */
int zlk_cuda_layer_norm_forward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                const void *b, int bdt, double eps, void *y, int ydt, float *mean, float *rstd,
                                void *stream);
/* gx [rows, m] f32 from x, g [rows, m], w [m] or NULL, mean and rstd. */
int zlk_cuda_layer_norm_backward_x(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                                   const float *mean, const float *rstd, const void *g, int gdt, float *gx,
                                   void *stream);
/* gw, gb [m] f32 (either may be NULL): each column in lanes of double sums. */
int zlk_cuda_layer_norm_backward_wb(int64_t rows, int64_t m, const void *x, int xdt, const float *mean,
                                    const float *rstd, const void *g, int gdt, float *gw, float *gb, void *stream);

/* rms_norm (math/rms_norm.h): x, y [rows, m]; w [m] or NULL; rstd [rows] f32 [out]. */
int zlk_cuda_rms_norm_forward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt, int rdt,
                              double eps, void *y, int ydt, float *rstd, void *stream);
/* gx [rows, m] and gw [m] f32 (either NULL); part [ceil(rows / ZLM_RMS_CHUNK_ROWS), m] the weight's partial sums. */
int zlk_cuda_rms_norm_backward(int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt, int rdt,
                               const float *rstd, const void *g, int gdt, float *gx, float *gw, double *part,
                               void *stream);

/* x [rows, ncls], target [rows]; o host memory, o->w [ncls] device memory
 * or NULL; lse, loss [rows] f32 [out] (0 on ignored rows). */
int zlk_cuda_cross_entropy_forward(int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                                   int64_t ignore, const zlm_ce_opts *o, float *lse, float *loss, void *stream);
/* gx [rows, ncls] f32, rounded to gdt's precision; row r's factor is
 * g[r * g_stride] * k (g_stride 1 for reduction none, 0 otherwise; k the
 * mean's 1 / divisor, else 1; 1 / *count, on the device, when count is not
 * NULL). */
int zlk_cuda_cross_entropy_backward(int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                                    int64_t ignore, const zlm_ce_opts *o, const float *lse, const float *g,
                                    int64_t g_stride, float k, const float *count, int gdt, float *gx, void *stream);
/* target [rows] [in/out] checked (math/cross_entropy.h's
 * zlm_ce_check_target): a bad one noted in fault and made ignore; counted
 * [rows] [out] 1 where a mean counts the row. */
int zlk_cuda_cross_entropy_targets(int64_t rows, int64_t ncls, int64_t *target, int64_t ignore,
                                   zlm_index_fault *fault, float *counted, void *stream);

/* sq [n] f32 [out] = (x - t)^2; x, t [n] f32. */
int zlk_cuda_mse_forward(int64_t n, const float *x, const float *t, float *sq, void *stream);
/* gx, gt [n] f32 [out] (either NULL) = +-k * g[i * g_stride] * (x - t) (g_stride
 * 1 for reduction none, 0 otherwise; k = 2 / n for mean, else 2). */
int zlk_cuda_mse_backward(int64_t n, const float *x, const float *t, const float *g, int64_t g_stride, float k,
                          float *gx, float *gt, void *stream);

/* s [rows, tk] f32 [in/out], scores already scaled, to probabilities; row r is
 * query r % tq; mask (bool, or NULL) read through mv over the [rows * tk]
 * scores hides keys. dp [rows, tk] [in/out] to dS from p [rows, tk]. */
int zlk_cuda_attention_softmax(int64_t rows, int64_t tq, int64_t tk, bool causal, const uint8_t *mask,
                               const zlm_view *mv, float *s, void *stream);
int zlk_cuda_attention_softmax_backward(int64_t rows, int64_t tk, float *dp, const float *p, void *stream);

/* Flash attention (flash.cu; ops/device_kernels.h's flash_forward and
 * flash_backward, dims in its ZLI_ATT_* order): whether the kernels take
 * these sizes, the nbufs buffers' alignment and the current device; the
 * forward, out [B, tq, d] (dt) and lse [B, tq]; the backward, dq (or NULL),
 * dk and dv (or both NULL) f32, delta [B, tq] scratch. */
bool zlk_cuda_flash_takes(int dt, int64_t d, int64_t dv, int64_t tq, int64_t tk, const void *const *bufs, int nbufs);
int zlk_cuda_flash_forward(int dt, const int64_t *dims, bool causal, float scale, const void *q, const void *k,
                           const void *v, void *out, float *lse, void *stream);
int zlk_cuda_flash_backward(int dt, const int64_t *dims, bool causal, float scale, const void *q, const void *k,
                            const void *v, const void *out, const void *dout, const float *lse, float *delta,
                            float *dq, float *dk, float *dv, void *stream);

/* out [n, d] = the rows of w [v, d] that idx [n] names; es bytes an element,
 * any dtype. fault NULL: the caller checked 0 <= idx < v; else a bad index
 * is noted there (math/index_fault.h) and its row is zeros. */
int zlk_cuda_embedding_forward(int64_t n, int64_t v, int64_t d, int es, const int64_t *idx, const void *w, void *out,
                               zlm_index_fault *fault, void *stream);
/* gw [v, d] f32 [out] = the rows of g [n, d] summed into the rows idx [n]
 * names, in position order, but for positions whose index is pad (-1:
 * none) or outside [0, v) (noted by the forward); added to gw as it is when
 * accumulating, else into zeros. */
int zlk_cuda_embedding_backward(int64_t n, int64_t v, int64_t d, const int64_t *idx, int64_t pad, const void *g,
                                int gdt, float *gw, bool accumulate, void *stream);

/* y [shape] (contiguous) from a, c and s read through their element strides
 * over shape (0 where broadcast), nd dims, the last even: rotary's forward,
 * or its backward with g in a (math/rotary.h). */
int zlk_cuda_rotary(int nd, const int64_t *shape, const float *a, const int64_t *as, const float *c,
                    const int64_t *cs, const float *s, const int64_t *ss, bool backward, float *y, void *stream);

/* ---- the generator and dropout: element i takes counter offset + i under
 * key seed (math/rng.h), as core's host fill does ---- */
/* out [n] (dt, a float dtype) = uniform in [a, b), or normal (mean a, std b). */
int zlk_cuda_rand(int64_t n, bool normal, double a, double b, uint64_t seed, uint64_t offset, void *out, int dt,
                  void *stream);
/* keep [n] (u8) [out]: the draw >= p; y [n] [out] = keep ? x * scale : 0. */
int zlk_cuda_dropout_forward(int64_t n, uint64_t seed, uint64_t offset, float p, float scale, const float *x,
                             uint8_t *keep, float *y, void *stream);
/* gx [n] = keep ? g * scale : 0. */
int zlk_cuda_dropout_backward(int64_t n, const uint8_t *keep, const float *g, float scale, float *gx, void *stream);

/* ---- reductions in the CPU's order (math/reduce.h); kind is ZLM_R_* ---- */
/* out [outer, inner] = x [outer, d, inner] reduced over d; idx [outer, inner]
 * (max, min and their positions; NULL: not wanted) the pick's position.
 * d >= 1 for max and min. */
int zlk_cuda_reduce_dim(int kind, int64_t outer, int64_t d, int64_t inner, const float *x, float *out, int64_t *idx,
                        void *stream);
/* out [1] = the sum (or mean) of x [n], divided by div or, when count is not
 * NULL, by *count (on the device); work holds zlm_sum_chunks(n) doubles. */
int zlk_cuda_reduce_all(double div, const float *count, int64_t n, const float *x, double *work, float *out,
                        void *stream);
/* var or std (math/var.h), a thread per output, and its backward a thread
 * per element. */
int zlk_cuda_var(int64_t nout, int64_t count, const zlm_view *kept, const zlm_view *red, const float *x,
                 double correction, bool is_std, double *mean, double *m2, float *out, void *stream);
int zlk_cuda_var_backward(int64_t n, const zlm_view *ov, int64_t count, const float *x, const float *g,
                          const double *mean, const double *m2, double correction, bool is_std, float *gx,
                          void *stream);
/* out [outer, len, inner] = x's running sums along len (reverse: from the
 * end), a thread per fibre (math/cumsum.h). */
int zlk_cuda_cumsum(int64_t outer, int64_t len, int64_t inner, bool reverse, const float *x, float *out, void *stream);
/* gx [outer, len, inner] from g [outer, inner] (and idx for max and min). */
int zlk_cuda_reduce_backward(int kind, int64_t outer, int64_t len, int64_t inner, const float *g, const int64_t *idx,
                             float *gx, void *stream);

/* out [s->shape] (contiguous, es bytes an element) = cond ? a : b, each read
 * through its strides in s (math/select.h). */
int zlk_cuda_select(const zlm_select *s, const uint8_t *cond, const void *a, const void *b, int es, void *out,
                    void *stream);

/* gather (math/gather.h): out [n] from x through the view v and dim dim's
 * stride sd, each index checked against len (a bad one noted in fault, its
 * element zeros); the backward adds g [n] into gx (zeroed) a fibre of md
 * positions, inner apart, at a time. */
int zlk_cuda_gather(const zlm_view *v, int64_t sd, int64_t len, int dim, int64_t n, const int64_t *idx, const void *x,
                    int es, void *out, zlm_index_fault *fault, void *stream);
int zlk_cuda_gather_backward(const zlm_view *v, int64_t sd, int64_t len, int64_t nfib, int64_t md, int64_t inner,
                             const int64_t *idx, const float *g, float *gx, void *stream);
/* scatter (add false) or scatter_add into out (wdt) from src, a fibre a
 * thread (math/gather.h), and their backward. */
int zlk_cuda_scatter(bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd, int64_t len, int dim, int64_t nfib,
                     int64_t md, int64_t inner, const int64_t *idx, const void *src, int wdt, void *out,
                     zlm_index_fault *fault, void *stream);
int zlk_cuda_scatter_backward(bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd, int64_t len, int64_t nfib,
                              int64_t md, int64_t inner, const int64_t *idx, const float *g, float *gx, float *gs,
                              void *stream);

/* out [outer, m, inner] = the rows of x [outer, len, inner] along its middle
 * dim (dim of the input) that idx [m] names; es bytes an element, any dtype.
 * fault NULL: the caller checked 0 <= idx < len; else a bad index is noted
 * there and its rows are zeros. */
int zlk_cuda_index_select_forward(int64_t outer, int64_t len, int64_t m, int64_t inner, int es, const int64_t *idx,
                                  const void *x, void *out, zlm_index_fault *fault, int dim, void *stream);
/* gx [outer, len, inner] f32 [out] = the rows of g [outer, m, inner] f32 summed
 * into the rows idx names, in index order. */
int zlk_cuda_index_select_backward(int64_t outer, int64_t len, int64_t m, int64_t inner, const int64_t *idx,
                                   const float *g, float *gx, void *stream);

/* ---- 2-d windows over planes (math/window.h), f32 ---- */
/* y, arg [planes, oh, ow] [out]: each window's max over x [planes, h, w] and
 * the flat position in its plane of its first maximum. */
int zlk_cuda_max_pool_forward(const zlm_window *g, int64_t planes, const float *x, float *y, int64_t *arg,
                              void *stream);
/* gx [planes, h, w] [out] = gy [planes, oh, ow] added at each window's arg. */
int zlk_cuda_max_pool_backward(const zlm_window *g, int64_t planes, const int64_t *arg, const float *gy, float *gx,
                               void *stream);
/* y [planes, oh, ow] [out] = each window's average over x [planes, h, w]
 * (math/pool.h), and gx [planes, h, w] [out] its backward from gy. */
int zlk_cuda_avg_pool_forward(const zlm_window *g, int64_t planes, bool count_pad, const float *x, float *y,
                              void *stream);
int zlk_cuda_avg_pool_backward(const zlm_window *g, int64_t planes, bool count_pad, const float *gy, float *gx,
                               void *stream);
/* col [c*kh*kw, oh*ow] [out] from one image x [c, h, w], zero padded. */
int zlk_cuda_im2col(const zlm_window *g, const float *x, float *col, void *stream);
/* gx [c, h, w] [out] = col's entries added onto the pixels im2col read them from. */
int zlk_cuda_col2im(const zlm_window *g, const float *col, float *gx, void *stream);
/* gb [nout] [out] = g [n, nout, len] summed over images and positions, in double. */
int zlk_cuda_conv_bias_grad(int64_t n, int64_t nout, int64_t len, const float *g, float *gb, void *stream);

/* ---- optimizers over a list of tensors (host array, device buffers) ---- */
typedef struct zlk_optim_tensor {
    float *p;              /* [n] f32 master, in place */
    const void *g;         /* [n] in the call's gdt */
    float *m, *v;          /* [n] moments (SGD: m is the momentum buffer, v unused) */
    void *p_half;          /* [n] [out] in the call's hdt, or NULL */
    int64_t n;
} zlk_optim_tensor;

/* Constants from zlm_adam_make / zlm_sgd_make on the host. */
int zlk_cuda_adam(const zlk_optim_tensor *t, int nt, int gdt, int hdt, const zlm_adam_consts *c, void *stream);
int zlk_cuda_sgd(const zlk_optim_tensor *t, int nt, int gdt, int hdt, const zlm_sgd_consts *c, void *stream);

/* Lamb, as its CPU passes: moments writes sq [2 * nt] (p^2, u^2 per tensor;
 * across ranks, all-reduce it before the ratio), work holds
 * ZLK_LAMB_WORK(nt) doubles; the caller turns the sums into trust ratios and
 * those into neg_rate [nt] (zlm_lamb_neg_rate); apply steps p. */
#define ZLK_LAMB_BLOCKS 64
#define ZLK_LAMB_WORK(nt) ((int64_t)(nt) * ZLK_LAMB_BLOCKS * 2)
int zlk_cuda_lamb_moments(const zlk_optim_tensor *t, int nt, int gdt, const zlm_lamb_consts *c, double *work,
                          double *sq, void *stream);
int zlk_cuda_lamb_apply(const zlk_optim_tensor *t, int nt, int hdt, const zlm_lamb_consts *c, const float *neg_rate,
                        void *stream);

/* ---- core's primitives on a device: views of any layout and dtype (the
 * zl_dtype codes, integers and bool too); n is the view's element count ---- */
/* The view d over dst (ddt) = the view s over src (sdt), converted; d NULL:
 * dst [n] contiguous. Elements of d must not share memory. */
int zlk_cuda_copy_view(int64_t n, const zlm_view *s, const void *src, int sdt, const zlm_view *d, void *dst, int ddt,
                       void *stream);
/* Every element of the view d over dst = v. */
int zlk_cuda_fill_view(int64_t n, const zlm_view *d, void *dst, int ddt, double v, void *stream);
/* The view d over dst (a float dtype) += alpha * the view s over src (s read
 * as broadcast to d's shape: 0 strides on stretched dims), in f32. */
int zlk_cuda_add_view(int64_t n, const zlm_view *d, void *dst, int ddt, const zlm_view *s, const void *src, int sdt,
                      float alpha, void *stream);

/* out [nout] f32 = g [shape] (f32, contiguous, nd dims) summed over the dims
 * where red[d] is nonzero (math/sum_to.h): leading dims away, trailing
 * kept, in lanes of double sums; any other shape in the CPU's order. */
int zlk_cuda_sum_to(int nd, const int64_t *shape, const int *red, const float *g, float *out, int64_t nout,
                    void *stream);

/* ---- mixed precision ---- */
/* *flag = 1 when any of x [n] is inf or NaN; never cleared here, so one flag
 * gathers a list of tensors (zero it first). */
int zlk_cuda_nonfinite(const void *x, int dt, int64_t n, int *flag, void *stream);
/* part [ZLK_SUMSQ_CHUNKS(n)] = the sums of squares of x [n] in double per
 * chunk of ZLM_SUMSQ_CHUNK, each in the host's order (math/grad.h), for
 * the caller to add in order; lanes holds ZLM_SUMSQ_LANES doubles a chunk. */
#define ZLK_SUMSQ_CHUNKS(n) (((int64_t)(n) + ZLM_SUMSQ_CHUNK - 1) / ZLM_SUMSQ_CHUNK)
int zlk_cuda_sumsq(const void *x, int dt, int64_t n, double *lanes, double *part, void *stream);
/* Every element of x [n] times f, in f32, rounded back to dt. */
int zlk_cuda_scale(void *x, int dt, int64_t n, float f, void *stream);

#ifdef __cplusplus
}
#endif
#endif
