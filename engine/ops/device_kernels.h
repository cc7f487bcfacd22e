/* The ops' kernel tables: the one a device hands the ops layer (through its
 * storage's zli_device_ops.kernels), the CPU's (zli_cpu_kernels), and the
 * helpers an op uses to find where its inputs live, take that memory's
 * table and put its work buffers there. The kernels take contiguous buffers
 * in their memory: f32, or where a dtype (a zl_dtype code) goes with a
 * buffer and the table reads halves, f32, bf16 or f16, read into f32 and
 * rounded to it on store (the host's bits: it converts to f32, computes,
 * and rounds the result). An op that has moved to the tables calls its
 * kernel through whichever table its inputs' memory gives, with no branch
 * on where that is. */
#ifndef ZL_OPS_DEVICE_KERNELS_H
#define ZL_OPS_DEVICE_KERNELS_H

#include "op_util.h"
#include "../math/cross_entropy.h"
#include "../math/index_fault.h"

/* A 2-d window sliding over planes of [h, w] (c planes an image, for conv):
 * kernel kh x kw, stride sh, sw, padding ph, pw, output oh x ow, dilation
 * dh, dw (the spacing of conv's taps, at least 1; pooling leaves it 1). */
typedef struct zli_dev_window {
    int64_t c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
} zli_dev_window;

/* A matmul's sizes: a [.., m, k] times b [.., k, n], the batch dims
 * broadcast to bshape [nbat]. */
typedef struct zli_matmul_dims {
    int64_t m, k, n;
    int nbat;
    int64_t bshape[ZL_MAX_DIMS];
} zli_matmul_dims;

/* Attention's sizes, the order of the table's dims argument and of its
 * node's i[]: batches (query heads) B, positions tq and tk, widths d and dv,
 * query heads per key/value head, and (in the node) causal. */
enum { ZLI_ATT_B, ZLI_ATT_TQ, ZLI_ATT_TK, ZLI_ATT_D, ZLI_ATT_DV, ZLI_ATT_G, ZLI_ATT_CAUSAL };

typedef struct zli_dev_kernels {
    /* Whether the kernels take bf16 and f16 buffers as they are (a GPU's);
     * false: every buffer is f32 and every dtype argument ZLM_F32 (the
     * CPU's vector loops, whose ops widen halves first). */
    bool halves;
    /* Whether its GEMMs read f16 operands as they are (a GPU's); bf16 ones
     * every table's GEMMs read (the CPU's by its bf16 GEMM). */
    bool gemm_f16;
    /* y[n] = f(x[n]); kind is unary.c's (and math/unary.h's) code. */
    zl_status (*unary)(int index, int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0, float p1);
    /* gx[n] = g * f'(x); y is the op's output, or NULL where f' does not need it;
     * p0, p1 the forward's. */
    zl_status (*unary_backward)(int index, int kind, int64_t n, const void *x, int xdt, const void *y, int ydt,
                                const void *g, int gdt, float *gx, float p0, float p1);
    /* out[shape] (contiguous) = a (op) b, each read through its strides
     * broadcast to shape (0 on stretched dims); kind is binary.c's code. */
    zl_status (*binary)(int index, int kind, int ndim, const int64_t *shape, const int64_t *sa, const int64_t *sb,
                        const void *a, int adt, const void *b, int bdt, void *out, int odt);
    /* y[outer, d, inner] = softmax (or log_softmax) of x[outer, d, inner] over its middle dim. */
    zl_status (*softmax)(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *x, int xdt,
                         void *y, int ydt);
    /* gx[outer, d, inner] from the output y and its gradient g. */
    zl_status (*softmax_backward)(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *y,
                                  int ydt, const void *g, int gdt, float *gx);
    /* binary's integer path: out[shape] (contiguous, odt: any zl_dtype) = a (op)
     * b in double, a (adt) and b (bdt) read through strides broadcast to shape. */
    zl_status (*binary_int)(int index, int kind, int ndim, const int64_t *shape, const int64_t *sa,
                            const int64_t *sb, const void *a, int adt, const void *b, int bdt, void *out, int odt);
    /* Cross-entropy per row of x[rows, ncls] against target[rows] (i64, in
     * the kernels' memory), with the options o (math/cross_entropy.h; o->w
     * in the kernels' memory too): lse and loss [rows] (0 on rows whose
     * target is `ignore`). x is in its own dtype, f32, bf16 or f16, on every
     * table, halves or not. */
    zl_status (*ce_forward)(int index, int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                            int64_t ignore, const zlm_ce_opts *o, float *lse, float *loss);
    /* gx[rows, ncls]: row r scaled by g[r * g_stride] * k, zero on ignored
     * rows, rounded to gdt's precision (ZLM_F32: not); with count (in the
     * kernels' memory) not NULL, k is 1 / *count instead, a mean's. */
    zl_status (*ce_backward)(int index, int64_t rows, int64_t ncls, const void *x, int xdt, const int64_t *target,
                             int64_t ignore, const zlm_ce_opts *o, const float *lse, const float *g,
                             int64_t g_stride, float k, const float *count, int gdt, float *gx);
    /* target [rows] (i64, the op's own copy) checked before ce_forward where
     * the table has index_faults (math/cross_entropy.h's
     * zlm_ce_check_target): a bad one noted in fault and made ignore;
     * counted [rows] 1 where a mean counts the row, else 0. */
    zl_status (*ce_targets)(int index, int64_t rows, int64_t ncls, int64_t *target, int64_t ignore,
                            zlm_index_fault *fault, float *counted);
    /* sq[n] = (x - t)^2, elementwise. */
    zl_status (*mse_forward)(int index, int64_t n, const float *x, const float *t, float *sq);
    /* gx[n] and gt[n] (either NULL) = +-k * g[i * g_stride] * (x - t). */
    zl_status (*mse_backward)(int index, int64_t n, const float *x, const float *t, const float *g, int64_t g_stride,
                              float k, float *gx, float *gt);
    /* Layer norm over rows of m: y[rows, m], mean and rstd [rows]; w, b [m] or NULL. */
    zl_status (*ln_forward)(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                            const void *b, int bdt, double eps, void *y, int ydt, float *mean, float *rstd);
    /* gx[rows, m] from x, w (or NULL), the saved statistics and g. */
    zl_status (*ln_backward_x)(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                               const float *mean, const float *rstd, const void *g, int gdt, float *gx);
    /* gw, gb [m] (either NULL): the weight's and bias's gradients, rows in order. */
    zl_status (*ln_backward_wb)(int index, int64_t rows, int64_t m, const void *x, int xdt, const float *mean,
                                const float *rstd, const void *g, int gdt, float *gw, float *gb);
    /* rms_norm over rows of m (math/rms_norm.h): y [rows, m] and rstd
     * [rows]; w [m] or NULL; rdt the dtype (ZLM_*) the normalised x is
     * rounded to before the weight multiplies it. */
    zl_status (*rms_forward)(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                             int rdt, double eps, void *y, int ydt, float *rstd);
    /* gx [rows, m] and gw [m] (either NULL) from x, w, the saved rstd and g;
     * part holds ceil(rows / ZLM_RMS_CHUNK_ROWS) * m doubles, gw's partial sums. */
    zl_status (*rms_backward)(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w, int wdt,
                              int rdt, const float *rstd, const void *g, int gdt, float *gx, float *gw, double *part);
    /* out[n, d] = rows idx[n] (i64, on the device) of w[v, d]; es bytes an
     * element. fault NULL: the indices were checked; else each is checked
     * here, a bad one noted in fault (math/index_fault.h) and its row zeros. */
    zl_status (*emb_forward)(int index, int64_t n, int64_t v, int64_t d, int es, const int64_t *idx, const void *w,
                             void *out, zlm_index_fault *fault);
    /* The device's fault note (in its memory), which its next copy to the
     * host reads, so an op may check indices in its kernel instead of
     * reading them back first. NULL: the ops check indices on the host. */
    zlm_index_fault *(*index_faults)(int index);
    /* gw[v, d] = g's rows summed into the rows idx names, in position order,
     * but for positions whose index is pad (-1: none) or out of range (a
     * fault the forward noted); added to gw as it is
     * when accumulating (a tied weight's pending gradient), else into zeros. */
    zl_status (*emb_backward)(int index, int64_t n, int64_t v, int64_t d, const int64_t *idx, int64_t pad,
                              const float *g, float *gw, bool accumulate);
    /* out[outer, m, inner] = the rows idx[m] (i64, on the device) of x[outer,
     * len, inner] along its middle dim (dim of the input); es bytes an
     * element. fault as emb_forward's: NULL, the indices were checked. */
    zl_status (*index_select)(int index, int64_t outer, int64_t len, int64_t m, int64_t inner, int es,
                              const int64_t *idx, const void *x, void *out, zlm_index_fault *fault, int dim);
    /* gather (math/gather.h): out [n, the index's elements] from x through
     * the view v and dim d's stride sd, idx [n] (i64) each in [0, len) (a bad
     * one noted in fault, which gather is not without); es bytes an element.
     * Its backward adds g [n] into gx (zeroed, x's shape) a fibre at a time:
     * nfib fibres of md positions, inner apart. Both NULL: the op gathers on
     * the host (the CPU's). */
    zl_status (*gather)(int index, const zlm_view *v, int64_t sd, int64_t len, int dim, int64_t n, const int64_t *idx,
                        const void *x, int es, void *out, zlm_index_fault *fault);
    zl_status (*gather_backward)(int index, const zlm_view *v, int64_t sd, int64_t len, int64_t nfib, int64_t md,
                                 int64_t inner, const int64_t *idx, const float *g, float *gx);
    /* scatter (add false) or scatter_add into out (x's copy in wdt, f32 or
     * i64 for add) from src (wdt, contiguous) a fibre at a time
     * (math/gather.h's zlm_scatter_fibre: xv as gather's v, sv over index's
     * shape with src's strides); a bad index noted in fault. Its backward:
     * gx (g's copy, or NULL) zeroed where a plain scatter wrote, gs (zeroed,
     * or NULL) = g where src's elements went. Both NULL: on the host. */
    zl_status (*scatter)(int index, bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd, int64_t len, int dim,
                         int64_t nfib, int64_t md, int64_t inner, const int64_t *idx, const void *src, int wdt,
                         void *out, zlm_index_fault *fault);
    zl_status (*scatter_backward)(int index, bool add, const zlm_view *xv, const zlm_view *sv, int64_t sd,
                                  int64_t len, int64_t nfib, int64_t md, int64_t inner, const int64_t *idx,
                                  const float *g, float *gx, float *gs);
    /* gx[outer, len, inner] = g[outer, m, inner]'s rows summed into the rows
     * idx names, in index order, but for those out of range (noted). */
    zl_status (*index_select_backward)(int index, int64_t outer, int64_t len, int64_t m, int64_t inner,
                                       const int64_t *idx, const float *g, float *gx);
    /* Max pooling over planes of x[planes, h, w] (padding is -inf): y and
     * arg[planes, oh, ow] (i64, the flat position in its plane of each
     * window's first maximum, kept on the device for backward). */
    zl_status (*pool_forward)(int index, const zli_dev_window *w, int64_t planes, const float *x, float *y,
                              int64_t *arg);
    /* gx[planes, h, w] = g[planes, oh, ow] added at each window's arg, windows in order. */
    zl_status (*pool_backward)(int index, const zli_dev_window *w, int64_t planes, const int64_t *arg,
                               const float *g, float *gx);
    /* Average pooling (math/pool.h): y [planes, oh, ow] from x [planes, h,
     * w], and its backward gx [planes, h, w] from g [planes, oh, ow];
     * count_pad divides by the whole window, padding included. */
    zl_status (*avg_pool_forward)(int index, const zli_dev_window *w, int64_t planes, bool count_pad, const float *x,
                                  float *y);
    zl_status (*avg_pool_backward)(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                   const float *g, float *gx);
    /* col[c*kh*kw, oh*ow] from one image x[c, h, w], zero padded, and col2im
     * its reverse: gx[c, h, w] = col's entries added where im2col read them. */
    zl_status (*im2col)(int index, const zli_dev_window *w, const float *x, float *col);
    zl_status (*col2im)(int index, const zli_dev_window *w, const float *col, float *gx);
    /* gb[nout] = g[n, nout, len] summed over n and len in double. */
    zl_status (*conv_bias_backward)(int index, int64_t n, int64_t nout, int64_t len, const float *g, float *gb);
    /* out[nout] = g[shape] (nd dims, contiguous) summed over the dims where
     * red[d] is nonzero, as zli_sum_to_shape sums. */
    zl_status (*sum_to)(int index, int nd, const int64_t *shape, const int *red, const float *g, float *out,
                        int64_t nout);
    /* C[M,N] = op(A)[M,K] op(B)[K,N], row-major with leading dims, as zli_sgemm. */
    zl_status (*gemm)(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float *C, int64_t ldc);
    /* C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for b < batch, X[b] being X +
     * b * sX elements on; beta 0 leaves C unread. */
    zl_status (*gemm_batched)(int index, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                              const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb, int64_t sb,
                              float beta, float *C, int64_t ldc, int64_t sc, int64_t batch);
    /* gemm_batched with A and B in dt (bf16 or f16, a zl_dtype code) and C in
     * f32, the products accumulated in f32 (a GPU's tensor cores). */
    zl_status (*gemm_half)(int index, int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                           const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                           float beta, float *C, int64_t ldc, int64_t sc, int64_t batch);
    /* linear's forward in one pass over its output: D[M,N] in dt (bf16 or
     * f16) = A[M,K] B[N,K]^T + bias[N] (f32, or NULL), the products and the
     * bias added in f32 and D rounded once, as the host's half-precision
     * linear. *done false (and ZL_OK) when the device has no kernel for the
     * shapes or alignment: the caller takes gemm_half. May be NULL. */
    zl_status (*linear_half)(int index, int dt, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                             const void *B, int64_t ldb, const float *bias, void *D, int64_t ldd, bool *done);
    /* matmul fused (the CPU's: sgemm, or its bf16 GEMM for two bf16
     * operands, writing odt): a and b as they are; the result returned in
     * f32 or odt. NULL (a GPU's): the op composes matmul of the GEMMs below. */
    zl_tensor *(*matmul)(int index, zl_tensor *a, zl_tensor *b, const zli_matmul_dims *md, zl_dtype odt);
    /* linear fused (the CPU's: OpenBLAS's and oneDNN's bf16 GEMMs, the bias
     * in their epilogue, a bf16 weight widened a panel at a time beside an
     * f32 input): in x, w and b (or nin 2) as they are, y [rows, outf] of
     * shape [ndim] returned in f32 or the op's dtype; the backward from the
     * op's node. NULL (a GPU's): the op composes linear of the GEMMs below. */
    zl_tensor *(*linear)(int index, zl_tensor *const *in, int nin, int64_t rows, int64_t inf, int64_t outf, int ndim,
                         const int64_t *shape);
    zl_status (*linear_backward)(int index, zl_node *n, zl_tensor *g, zl_tensor **gin);
    /* conv2d fused (the CPU's: im2col and sgemm per image and group, the
     * bias the rows' start and the weight's gradient accumulated in the
     * GEMM): xf, wf and bf (or NULL) f32 contiguous, y [N, O, oh, ow] f32
     * returned; the backward from the op's node. NULL (a GPU's): the op
     * composes conv2d of im2col, col2im, the GEMM and conv_bias_backward. */
    zl_tensor *(*conv2d)(int index, const zli_dev_window *g, int64_t groups, const zl_tensor *xf, const zl_tensor *wf,
                         const zl_tensor *bf);
    zl_status (*conv2d_backward)(int index, zl_node *n, const zli_dev_window *g, int64_t groups, zl_tensor *grad,
                                 zl_tensor **gin);
    /* Attention fused (the CPU's: row blocks of its GEMMs per batch, a bool
     * mask read where it lies): in q, k, v as they are, mask or NULL; dims
     * in ZLI_ATT_* order; P [B, tq, tk] and out [B, tq, dv] f32 [out]; the backward
     * from the op's node. NULL (a GPU's): the op composes attention of the
     * GEMMs and att_softmax below. */
    zl_status (*attention)(int index, zl_tensor *const *in, const zl_tensor *mask, bool causal, float scale,
                           const int64_t *dims, zl_tensor *p, zl_tensor *out);
    zl_status (*attention_backward)(int index, zl_node *n, zl_tensor *g, zl_tensor **gin);
    /* Attention that never writes its scores (math/flash.h; a GPU's flash
     * kernels): q [B, tq, d], k and v [B / g, tk, d], contiguous in dt (bf16
     * or f16), dims in ZLI_ATT_* order; out [B, tq, d] in dt and lse [B, tq]
     * f32, each row's log-sum-exp of its scaled scores. *done false (and
     * ZL_OK) when the kernels do not take these sizes, this alignment or this
     * device: the op composes attention instead. May be NULL. */
    zl_status (*flash_forward)(int index, int dt, const int64_t *dims, bool causal, float scale, const void *q,
                               const void *k, const void *v, void *out, float *lse, bool *done);
    /* Its backward, for sizes the forward took: dq [B, tq, d] (or NULL), dk
     * and dv [B / g, tk, d] (both or neither) f32 from the forward's inputs,
     * out and lse, and dout [B, tq, d] in dt; delta [B, tq] f32 scratch.
     * Deterministic: a key's gradients sum its query heads and rows in order. */
    zl_status (*flash_backward)(int index, int dt, const int64_t *dims, bool causal, float scale, const void *q,
                                const void *k, const void *v, const void *out, const void *dout, const float *lse,
                                float *delta, float *dq, float *dk, float *dv);
    /* s [rows, tk] [in/out]: attention's scaled scores to probabilities, row r
     * being query r % tq, causal rows cut there, and where mask (bool, in the
     * kernels' memory, or NULL) read through the view mv over the scores'
     * [rows * tk] elements is 0 (math/attention.h's
     * zlm_attention_softmax_row_masked; cpu/attention.c's softmax_rows). */
    zl_status (*att_softmax)(int index, int64_t rows, int64_t tq, int64_t tk, bool causal, const uint8_t *mask,
                             const zlm_view *mv, float *s);
    /* dp [rows, tk] [in/out]: dP to dS = P * (dP - <dP, P>), p [rows, tk]. */
    zl_status (*att_softmax_backward)(int index, int64_t rows, int64_t tk, float *dp, const float *p);
    /* keep [n] (u8) = the generator's uniform draw at counter offset + i
     * (key seed) >= p; y [n] = keep ? x * scale : 0. */
    zl_status (*dropout)(int index, int64_t n, uint64_t seed, uint64_t offset, float p, float scale, const float *x,
                         uint8_t *keep, float *y);
    /* gx [n] = keep ? g * scale : 0. */
    zl_status (*dropout_backward)(int index, int64_t n, const uint8_t *keep, const float *g, float scale, float *gx);
    /* out [outer, inner] = x [outer, d, inner] reduced over d in reduce.c's
     * order (kind: reduce.c's); idx [outer, inner] (i64) the max's or min's
     * position, NULL for sum and mean. */
    zl_status (*reduce_dim)(int index, int kind, int64_t outer, int64_t d, int64_t inner, const float *x, float *out,
                            int64_t *idx);
    /* out [1] = the sum of x [n] as zli_sum_fixed adds it, divided by div in
     * double (n for a mean, 1 for the sum), or by *count (in the kernels'
     * memory) when count is not NULL; work holds one double per 4096-element
     * chunk. */
    zl_status (*reduce_all)(int index, double div, const float *count, int64_t n, const float *x, double *work,
                            float *out);
    /* var or std (math/var.h) of nout outputs, count elements each of x
     * (contiguous, f32) through the views kept and red: mean and m2 [nout]
     * [out] in double, out [nout] the value. Its backward: gx [n] (x's
     * elements, their output ov's offset of each) from g, mean and m2. */
    zl_status (*var)(int index, int64_t nout, int64_t count, const zlm_view *kept, const zlm_view *red,
                     const float *x, double correction, bool is_std, double *mean, double *m2, float *out);
    zl_status (*var_backward)(int index, int64_t n, const zlm_view *ov, int64_t count, const float *x,
                              const float *g, const double *mean, const double *m2, double correction, bool is_std,
                              float *gx);
    /* out [outer, len, inner] = x's running sums along len (reverse: from
     * the end), a fibre at a time (math/cumsum.h). */
    zl_status (*cumsum)(int index, int64_t outer, int64_t len, int64_t inner, bool reverse, const float *x,
                        float *out);
    /* gx [outer, len, inner] from g [outer, inner] (and idx for max and min). */
    zl_status (*reduce_backward)(int index, int kind, int64_t outer, int64_t len, int64_t inner, const float *g,
                                 const int64_t *idx, float *gx);
    /* y [shape] (contiguous, f32) from a, c and s (f32) read through their
     * element strides over shape (0 where broadcast), nd dims, the last
     * even: rotary's forward (a = x), or its backward (a = g), as
     * math/rotary.h computes each element. */
    zl_status (*rotary)(int index, int nd, const int64_t *shape, const float *a, const int64_t *as, const float *c,
                        const int64_t *cs, const float *s, const int64_t *ss, bool backward, float *y);
    /* out [shape] (contiguous, es bytes an element) = cond ? a : b, each read
     * through its strides (elements; 0 on broadcast dims). */
    zl_status (*select)(int index, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *sc,
                        const void *a, const int64_t *sa, const void *b, const int64_t *sb, int es, void *out);
} zli_dev_kernels;

/* Where an op's inputs live, all in one place: 0 for host memory (*kernels
 * the CPU's, *index 0), 1 for a device (*kernels and *index its), or -1
 * with an error naming the op when they are spread over devices or the
 * device has no kernels. Host tensors of one element go along with device
 * ones, as PyTorch lets CPU scalars do. */
ZLI_HIDDEN int zli_op_device(const char *op, int n, zl_tensor *const *in, const zli_dev_kernels **kernels,
                             int *index);
/* matmul's geometry (ops/matmul.c), for the op and a table's fused matmul:
 * how a GEMM reads t's last two dims (as stored, lead its row stride, or
 * transposed, lead its column stride; false if neither), t as an operand of
 * dtype dt it can read (t itself when it can be, else a copy), the
 * operands' batch strides over md's broadcast batch shape and batch bi's
 * offsets in them, and the result's shape (its dims returned). */
ZLI_HIDDEN bool zli_gemm_layout(const zl_tensor *t, bool *trans, int64_t *lead);
ZLI_HIDDEN zl_tensor *zli_gemm_operand(zl_tensor *t, zl_dtype dt, bool *trans, int64_t *lead);
ZLI_HIDDEN void zli_matmul_batch_strides(const zl_tensor *fa, const zl_tensor *fb, const zli_matmul_dims *md,
                                         int64_t *sa, int64_t *sb);
ZLI_HIDDEN void zli_matmul_batch_at(const zli_matmul_dims *md, const int64_t *sa, const int64_t *sb, int64_t bi,
                                    int64_t *oa, int64_t *ob);
ZLI_HIDDEN int zli_matmul_out_shape(const zli_matmul_dims *md, int64_t *oshape);

/* The first of in[n] in device memory, else in[0]: where an op's results go. */
ZLI_HIDDEN const zl_tensor *zli_op_home(int n, zl_tensor *const *in);
/* A new uninitialised contiguous tensor of dtype dt in the memory `like` lives in. */
ZLI_HIDDEN zl_tensor *zli_new_like(const zl_tensor *like, zl_dtype dt, int ndim, const int64_t *shape,
                                   zl_mem_category cat);
/* A new f32 tensor charged to activations, in the memory `like` lives in. */
ZLI_HIDDEN zl_tensor *zli_new_f32_like(const zl_tensor *like, int ndim, const int64_t *shape);
/* zli_f32c(t), in the memory `like` lives in (a host scalar is copied over). */
ZLI_HIDDEN zl_tensor *zli_f32c_like(const zl_tensor *t, const zl_tensor *like);
/* t in the memory `like` lives in with dtype dt: t itself (retained, any
 * layout) when it is already, else a contiguous copy converted as
 * zli_copy_as converts (a host scalar is copied over to like's device). */
ZLI_HIDDEN zl_tensor *zli_copy_as_like(zl_tensor *t, zl_dtype dt, const zl_tensor *like);

/* The dtype a device's kernels read and write dt in: dt itself for bf16 and
 * f16, f32 for anything else. */
ZLI_HIDDEN zl_dtype zli_kernel_dtype(zl_dtype dt);
/* An elementwise kernel's input: on a device (on) t contiguous in its own
 * dtype when that is f32, bf16 or f16, else zli_f32c(t); on the host zli_f32c(t). */
ZLI_HIDDEN zl_tensor *zli_kernel_input(zl_tensor *t, bool on);
/* A new tensor for a kernel's output in the memory `like` lives in: dt on a
 * device, where the kernels round to it as they store; f32 on the host, which
 * computes in f32 (the op rounds its result to dt after). */
ZLI_HIDDEN zl_tensor *zli_kernel_output(const zl_tensor *like, bool on, zl_dtype dt, int ndim, const int64_t *shape);
/* zli_copy_as_like, made contiguous: a GEMM's operand. */
ZLI_HIDDEN zl_tensor *zli_contiguous_as_like(zl_tensor *t, zl_dtype dt, const zl_tensor *like);
/* The same, but always a copy of its own, never t: what a kernel may rewrite
 * or an op keep while t changes. */
ZLI_HIDDEN zl_tensor *zli_own_copy_like(zl_tensor *t, zl_dtype dt, const zl_tensor *like);
/* The dtype k's GEMMs read ts[n] in: bf16 when all n have it, f16 likewise
 * where k reads f16 (tensor cores, f32 accumulation), else f32. */
ZLI_HIDDEN zl_dtype zli_gemm_dtype(const zli_dev_kernels *k, int n, zl_tensor *const *ts);
/* `batch` GEMMs into f32 C on the device, A and B in dt: the kernels'
 * gemm_batched for f32, gemm_half for bf16 and f16 (arguments as theirs). */
ZLI_HIDDEN zl_status zli_dev_gemm(const zli_dev_kernels *k, int index, zl_dtype dt, bool ta, bool tb, int64_t M,
                                  int64_t N, int64_t K, float alpha, const void *A, int64_t lda, int64_t sa,
                                  const void *B, int64_t ldb, int64_t sb, float beta, float *C, int64_t ldc,
                                  int64_t sc, int64_t batch);

/* out [1] (in like's memory) = the sum of x [n] there divided by div, or by
 * *count there (see reduce_all), by k's reduce_all in zli_sum_fixed's
 * chunks and order. */
ZLI_HIDDEN zl_status zli_kernel_sum(const zli_dev_kernels *k, int index, const zl_tensor *like, const float *x,
                                    int64_t n, double div, const float *count, float *out);

/* idx [n], host memory, as an i64 tensor in the memory `like` lives in. */
ZLI_HIDDEN zl_tensor *zli_i64_like(const int64_t *idx, int64_t n, const zl_tensor *like);
/* An op's index tensor t (i64 or i32, else ZL_EDTYPE naming op and role)
 * as its own contiguous i64 copy in like's memory, for the kernels and the
 * backward: unchecked when the kernels check it (kernels_check: a bad index
 * goes to the device's fault note), else read on the host and each index
 * checked to lie in [0, limit). NULL with the error set, or, for an index
 * out of range, with *bad its position (else -1) and *value it, for the op
 * to say in its own words. */
ZLI_HIDDEN zl_tensor *zli_indices_like(const char *op, const char *role, zl_tensor *t, int64_t limit,
                                       const zl_tensor *like, bool kernels_check, int64_t *bad, int64_t *value);

/* The CPU's kernel table (ops/cpu/kernels.c), f32 only. */
ZLI_HIDDEN extern const zli_dev_kernels zli_cpu_kernels;

#endif
