/* Private to engine/ops: the CPU's entries in the ops' kernel table
 * (ops/device_kernels.h), each defined beside its op and gathered into
 * zli_cpu_kernels by kernels.c. They take f32 buffers in host memory; the
 * table's halves is false, so every dtype argument is ZLM_F32. */
#ifndef ZL_OPS_CPU_KERNELS_H
#define ZL_OPS_CPU_KERNELS_H

#include "../device_kernels.h"

ZLI_HIDDEN zl_status zli_cpu_unary(int index, int kind, int64_t n, const void *x, int xdt, void *y, int ydt, float p0,
                                   float p1);
ZLI_HIDDEN zl_status zli_cpu_unary_backward(int index, int kind, int64_t n, const void *x, int xdt, const void *y,
                                            int ydt, const void *g, int gdt, float *gx, float p0, float p1);
ZLI_HIDDEN zl_status zli_cpu_softmax(int index, bool is_log, int64_t outer, int64_t d, int64_t inner, const void *x,
                                     int xdt, void *y, int ydt);
ZLI_HIDDEN zl_status zli_cpu_softmax_backward(int index, bool is_log, int64_t outer, int64_t d, int64_t inner,
                                              const void *y, int ydt, const void *g, int gdt, float *gx);
ZLI_HIDDEN zl_status zli_cpu_dropout(int index, int64_t n, uint64_t seed, uint64_t offset, float p, float scale,
                                     const float *x, uint8_t *keep, float *y);
ZLI_HIDDEN zl_status zli_cpu_dropout_backward(int index, int64_t n, const uint8_t *keep, const float *g, float scale,
                                              float *gx);
ZLI_HIDDEN zl_status zli_cpu_select(int index, int nd, const int64_t *shape, const uint8_t *cond, const int64_t *sc,
                                    const void *a, const int64_t *sa, const void *b, const int64_t *sb, int es,
                                    void *out);
ZLI_HIDDEN zl_status zli_cpu_binary(int index, int kind, int nd, const int64_t *shape, const int64_t *sa,
                                    const int64_t *sb, const void *a, int adt, const void *b, int bdt, void *out, int odt);
ZLI_HIDDEN zl_status zli_cpu_binary_int(int index, int kind, int nd, const int64_t *shape, const int64_t *sa,
                                        const int64_t *sb, const void *a, int adt, const void *b, int bdt, void *out,
                                        int odt);
ZLI_HIDDEN zl_status zli_cpu_reduce_dim(int index, int kind, int64_t outer, int64_t d, int64_t inner, const float *x,
                                        float *out, int64_t *idx);
ZLI_HIDDEN zl_status zli_cpu_var(int index, int64_t nout, int64_t count, const zlm_view *kept, const zlm_view *red,
                                 const float *x, double correction, bool is_std, double *mean, double *m2, float *out);
ZLI_HIDDEN zl_status zli_cpu_var_backward(int index, int64_t n, const zlm_view *ov, int64_t count, const float *x,
                                          const float *g, const double *mean, const double *m2, double correction,
                                          bool is_std, float *gx);
ZLI_HIDDEN zl_status zli_cpu_cumsum(int index, int64_t outer, int64_t len, int64_t inner, bool reverse, const float *x,
                                    float *out);
ZLI_HIDDEN zl_status zli_cpu_reduce_all(int index, double div, const float *count, int64_t n, const float *x,
                                        double *work, float *out);
ZLI_HIDDEN zl_status zli_cpu_reduce_backward(int index, int kind, int64_t outer, int64_t len, int64_t inner,
                                             const float *g, const int64_t *idx, float *gx);
ZLI_HIDDEN zl_status zli_cpu_sum_to(int index, int nd, const int64_t *shape, const int *red, const float *g,
                                    float *out, int64_t nout);
ZLI_HIDDEN zl_status zli_cpu_ln_forward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w,
                                        int wdt, const void *b, int bdt, double eps, void *y, int ydt, float *mean,
                                        float *rstd);
ZLI_HIDDEN zl_status zli_cpu_ln_backward_x(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w,
                                           int wdt, const float *mean, const float *rstd, const void *g, int gdt,
                                           float *gx);
ZLI_HIDDEN zl_status zli_cpu_ln_backward_wb(int index, int64_t rows, int64_t m, const void *x, int xdt,
                                            const float *mean, const float *rstd, const void *g, int gdt, float *gw,
                                            float *gb);
ZLI_HIDDEN zl_status zli_cpu_rms_forward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w,
                                         int wdt, int rdt, double eps, void *y, int ydt, float *rstd);
ZLI_HIDDEN zl_status zli_cpu_rms_backward(int index, int64_t rows, int64_t m, const void *x, int xdt, const void *w,
                                          int wdt, int rdt, const float *rstd, const void *g, int gdt, float *gx,
                                          float *gw, double *part);
ZLI_HIDDEN zl_status zli_cpu_pool_forward(int index, const zli_dev_window *w, int64_t planes, const float *x, float *y,
                                          int64_t *arg);
ZLI_HIDDEN zl_status zli_cpu_pool_backward(int index, const zli_dev_window *w, int64_t planes, const int64_t *arg,
                                           const float *g, float *gx);
ZLI_HIDDEN zl_status zli_cpu_ce_forward(int index, int64_t rows, int64_t ncls, const void *x, int xdt,
                                        const int64_t *target, int64_t ignore, const zlm_ce_opts *o, float *lse,
                                        float *loss);
ZLI_HIDDEN zl_status zli_cpu_ce_backward(int index, int64_t rows, int64_t ncls, const void *x, int xdt,
                                         const int64_t *target, int64_t ignore, const zlm_ce_opts *o, const float *lse,
                                         const float *g, int64_t g_stride, float k, const float *count, int gdt,
                                         float *gx);
ZLI_HIDDEN zl_tensor *zli_cpu_matmul(int index, zl_tensor *a, zl_tensor *b, const zli_matmul_dims *md, zl_dtype odt);
ZLI_HIDDEN zl_tensor *zli_cpu_linear(int index, zl_tensor *const *in, int nin, int64_t rows, int64_t inf, int64_t outf,
                                     int ndim, const int64_t *shape);
ZLI_HIDDEN zl_status zli_cpu_linear_backward(int index, zl_node *n, zl_tensor *g, zl_tensor **gin);
ZLI_HIDDEN zl_tensor *zli_cpu_conv2d(int index, const zli_dev_window *g, int64_t groups, const zl_tensor *xf,
                                     const zl_tensor *wf, const zl_tensor *bf);
ZLI_HIDDEN zl_status zli_cpu_conv2d_backward(int index, zl_node *n, const zli_dev_window *g, int64_t groups,
                                             zl_tensor *grad, zl_tensor **gin);
ZLI_HIDDEN zl_status zli_cpu_attention(int index, zl_tensor *const *in, const zl_tensor *mask, bool causal,
                                       float scale, const int64_t *dims, zl_tensor *p, zl_tensor *out);
ZLI_HIDDEN zl_status zli_cpu_attention_backward(int index, zl_node *n, zl_tensor *g, zl_tensor **gin);
ZLI_HIDDEN zl_status zli_cpu_avg_pool_forward(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                              const float *x, float *y);
ZLI_HIDDEN zl_status zli_cpu_avg_pool_backward(int index, const zli_dev_window *w, int64_t planes, bool count_pad,
                                               const float *g, float *gx);
ZLI_HIDDEN zl_status zli_cpu_mse_forward(int index, int64_t n, const float *x, const float *t, float *sq);
ZLI_HIDDEN zl_status zli_cpu_mse_backward(int index, int64_t n, const float *x, const float *t, const float *g,
                                          int64_t g_stride, float k, float *gx, float *gt);
ZLI_HIDDEN zl_status zli_cpu_index_select(int index, int64_t outer, int64_t len, int64_t m, int64_t inner, int es,
                                          const int64_t *idx, const void *x, void *out, zlm_index_fault *fault,
                                          int dim);
ZLI_HIDDEN zl_status zli_cpu_index_select_backward(int index, int64_t outer, int64_t len, int64_t m, int64_t inner,
                                                   const int64_t *idx, const float *g, float *gx);
ZLI_HIDDEN zl_status zli_cpu_emb_forward(int index, int64_t n, int64_t v, int64_t d, int es, const int64_t *idx,
                                         const void *w, void *out, zlm_index_fault *fault);
ZLI_HIDDEN zl_status zli_cpu_emb_backward(int index, int64_t n, int64_t v, int64_t d, const int64_t *idx, int64_t pad,
                                          const float *g, float *gw, bool accumulate);
ZLI_HIDDEN zl_status zli_cpu_rotary(int index, int nd, const int64_t *shape, const float *a, const int64_t *as,
                                    const float *c, const int64_t *cs, const float *s, const int64_t *ss, bool backward,
                                    float *y);

#endif
