/* The bf16 x bf16 GEMM (f32 accumulation) that matmul and linear use when both
 * operands are bf16, and the choice between its two paths at run time: oneDNN's
 * matmul, and a fallback that widens to f32 and calls OpenBLAS's sgemm. */
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "gemm.h"
#include "gemm_bf16.h"
#ifdef ZLUA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* Design note. Debian's OpenBLAS has no bf16 GEMM, so the fast path is
 * oneDNN's matmul, which JITs vdpbf16ps (AVX512-BF16) or AMX tiles from the
 * bf16 operands as they lie in memory. On the development machine (AMD EPYC,
 * Zen 4: AVX512-BF16, no AMX) it runs at about twice sgemm's rate from 64^3
 * up, which is the ratio of the two instructions' peaks there, so a kernel of
 * our own would have nothing to gain. It is taken only where the CPU has bf16
 * dot products (oneDNN would otherwise emulate them, which was not measured);
 * elsewhere the fallback runs. Both paths accumulate the same bf16 inputs in
 * f32 and round once, so they differ only by f32 summation order. */

enum { PATH_F32 = 0, PATH_ONEDNN = 1 };
static const char *const path_names[] = {"f32", "onednn"};

/* The path in use, -1 until the first GEMM chooses it (zli_choice);
 * selection never runs beside a GEMM. */
static int chosen = -1;

static inline float bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, NaN kept quiet: bit for bit zl_f32_to_bf16, inlined
 * so that the conversion loops vectorise. */
static inline uint16_t f32_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* dst[rows, cols] (dense) = src[rows, cols] (leading dim ld) widened to f32. */
static void widen(const uint16_t *restrict src, int64_t ld, int64_t rows, int64_t cols, float *restrict dst)
{
    #pragma omp parallel for schedule(static) if (rows * cols > ZLI_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = bf16_f32(src[r * ld + c]);
}

/* Columns of a bf16 C computed at a time: the f32 panel is rounded into C
 * while it is still in cache, never a whole f32 C (an LM head's logits would
 * be 50257 columns: the write and the read back cost more than the rounding). */
static int64_t panel_cols(int64_t M, int64_t N)
{
    int64_t w = ((int64_t)1 << 20) / (M > 0 ? M : 1) / 16 * 16;
    w = w < 256 ? 256 : w;
    return w < N ? w : N;
}

/* The fallback: widen the parts of A and B the GEMM reads, sgemm (the bias
 * preloaded into C with beta 1), round into C when it is bf16, a panel of
 * columns at a time. */
static zl_status gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                          const uint16_t *B, int64_t ldb, const float *bias, void *C, zl_dtype c_dtype,
                          int64_t ldc)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    bool round = c_dtype == ZL_DTYPE_BF16;
    int64_t pw = round ? panel_cols(M, N) : N;
    size_t na = (size_t)(ar * ac) * sizeof(float), nb = (size_t)(br * bc) * sizeof(float);
    size_t nc = round ? (size_t)(M * pw) * sizeof(float) : 0;
    float *a = zl_mem_alloc(na, ZL_MEM_ACTIVATIONS);
    float *b = a ? zl_mem_alloc(nb, ZL_MEM_ACTIVATIONS) : NULL;
    float *c = round ? (b ? zl_mem_alloc(nc, ZL_MEM_ACTIVATIONS) : NULL) : C;
    zl_status st = ZL_ENOMEM;
    if (a && b && c) {
        widen(A, lda, ar, ac, a);
        widen(B, ldb, br, bc, b);
        for (int64_t j0 = 0; j0 < N; j0 += pw) {
            int64_t w = N - j0 < pw ? N - j0 : pw, ldc32 = round ? w : ldc;
            float *cp = round ? c : c + j0;
            if (bias)
                for (int64_t i = 0; i < M; i++) memcpy(cp + i * ldc32, bias + j0, (size_t)w * sizeof *bias);
            zli_sgemm(ta, tb, M, w, K, 1.0f, a, ac, tb ? b + j0 * bc : b + j0, bc, bias ? 1.0f : 0.0f, cp, ldc32);
            if (round) {
                uint16_t *out = (uint16_t *)C + j0;
                #pragma omp parallel for schedule(static) if (M * w > ZLI_PAR_MIN)
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < w; j++) out[i * ldc + j] = f32_bf16(cp[i * w + j]);
            }
        }
        st = ZL_OK;
    }
    zl_mem_free(a, na, ZL_MEM_ACTIVATIONS);
    zl_mem_free(b, nb, ZL_MEM_ACTIVATIONS);
    if (round) zl_mem_free(c, nc, ZL_MEM_ACTIVATIONS);
    return st;
}

#ifdef ZLUA_HAVE_DNNL
#if DNNL_VERSION_MAJOR != 2
#error "gemm_bf16.c is written against oneDNN 2.x (Debian 12's libdnnl-dev 2.6); configure with -DZLUA_ONEDNN=OFF"
#endif

/* Making a oneDNN matmul costs several microseconds (descriptor checks and a
 * lookup in oneDNN's own kernel cache), as much as a 64x64x64 product, so each
 * thread keeps its last few primitives by shape and layout. Per thread: no
 * lock, and no primitive is ever freed while another thread runs it. The
 * scratchpad is ours (user mode), which also makes one primitive safe to run
 * on several threads at once, and charges oneDNN's working memory like ours. */
#define CACHE_SLOTS 32

typedef struct gemm_key {   /* all int64_t: no padding, so memcmp compares it */
    int64_t M, N, K, lda, ldb, ldc;
    int64_t flags;          /* ta | tb << 1 | bf16 C << 2 | bias << 3 */
} gemm_key;

typedef struct cached_gemm {
    bool used;
    gemm_key key;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;      /* NULL in a used slot: oneDNN declined this GEMM */
    dnnl_memory_desc_t scratch_md;
    size_t nscratch;
    uint64_t last_use;
} cached_gemm;

typedef struct thread_cache {
    cached_gemm slot[CACHE_SLOTS];
    uint64_t clock;
    dnnl_stream_t stream;
} thread_cache;

static dnnl_engine_t cpu_engine;   /* NULL when oneDNN cannot make one */
static pthread_key_t cache_key;
static bool cache_key_ok;
static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;

static void drop_slot(cached_gemm *c)
{
    if (c->prim) dnnl_primitive_destroy(c->prim);
    if (c->pd) dnnl_primitive_desc_destroy(c->pd);
    memset(c, 0, sizeof *c);
}

static void cache_free(void *p)
{
    thread_cache *tc = p;
    for (int i = 0; i < CACHE_SLOTS; i++) drop_slot(&tc->slot[i]);
    if (tc->stream) dnnl_stream_destroy(tc->stream);
    free(tc);
}

static void dnnl_open(void)
{
    if (dnnl_engine_create(&cpu_engine, dnnl_cpu, 0) != dnnl_success) cpu_engine = NULL;
    cache_key_ok = pthread_key_create(&cache_key, cache_free) == 0;
}

static bool onednn_runs(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) return false;
    pthread_once(&dnnl_once, dnnl_open);
    return cpu_engine && cache_key_ok;
#else
    return false;
#endif
}

static thread_cache *my_cache(void)
{
    thread_cache *tc = pthread_getspecific(cache_key);
    if (tc) return tc;
    tc = calloc(1, sizeof *tc);
    if (!tc) return NULL;
    if (dnnl_stream_create(&tc->stream, cpu_engine, dnnl_stream_default_flags) ||
        pthread_setspecific(cache_key, tc)) {
        cache_free(tc);
        return NULL;
    }
    return tc;
}

/* A [rows, cols] matrix with leading dim ld, read transposed when trans. */
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, bool trans, int64_t ld,
                               dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* md: src, weights, dst, bias. Sets c->prim unless oneDNN has no
 * implementation for this layout, or only its slow reference one; a declined
 * GEMM stays cached as such, so it is not asked for again. */
static void make_gemm(cached_gemm *c, const dnnl_memory_desc_t md[4], bool bias)
{
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    const char *impl = NULL;
    if (!dnnl_matmul_desc_init(&desc, &md[0], &md[1], bias ? &md[3] : NULL, &md[2]) &&
        !dnnl_primitive_attr_create(&attr) &&
        !dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) &&
        !dnnl_primitive_desc_create(&c->pd, &desc, attr, cpu_engine, NULL) &&
        !dnnl_primitive_desc_query(c->pd, dnnl_query_impl_info_str, 0, &impl) && impl && strncmp(impl, "ref", 3)) {
        const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(c->pd, dnnl_query_scratchpad_md, 0);
        c->nscratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
        if (smd) c->scratch_md = *smd;
        if (dnnl_primitive_create(&c->prim, c->pd)) c->prim = NULL;
    }
    if (attr) dnnl_primitive_attr_destroy(attr);
}

/* The slot for key: a hit, or the least recently used slot remade for key. */
static cached_gemm *lookup(thread_cache *tc, const gemm_key *key, const dnnl_memory_desc_t md[4])
{
    cached_gemm *lru = &tc->slot[0];
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cached_gemm *c = &tc->slot[i];
        if (c->used && !memcmp(&c->key, key, sizeof *key)) {
            c->last_use = ++tc->clock;
            return c;
        }
        if (lru->used && (!c->used || c->last_use < lru->last_use)) lru = c;
    }
    drop_slot(lru);
    make_gemm(lru, md, key->flags & 8);
    lru->used = true;
    lru->key = *key;
    lru->last_use = ++tc->clock;
    return lru;
}

/* 1: done; 0: declined (the caller takes the f32 path); -1: out of memory. */
static int gemm_onednn(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                       const uint16_t *B, int64_t ldb, const float *bias, void *C, zl_dtype c_dtype, int64_t ldc)
{
    bool round = c_dtype == ZL_DTYPE_BF16;
    gemm_key key = {M, N, K, lda, ldb, ldc, (int64_t)ta | (int64_t)tb << 1 | (int64_t)round << 2 | (int64_t)(bias != NULL) << 3};
    dnnl_memory_desc_t md[4];
    thread_cache *tc = my_cache();
    if (!tc || matrix_md(&md[0], M, K, ta, lda, dnnl_bf16) || matrix_md(&md[1], K, N, tb, ldb, dnnl_bf16) ||
        matrix_md(&md[2], M, N, false, ldc, round ? dnnl_bf16 : dnnl_f32) ||
        (bias && matrix_md(&md[3], 1, N, false, N, dnnl_f32)))
        return 0;
    cached_gemm *c = lookup(tc, &key, md);
    if (!c->prim) return 0;
    void *scratch = NULL;
    if (c->nscratch && !(scratch = zl_mem_alloc(c->nscratch, ZL_MEM_ACTIVATIONS))) return -1;
    dnnl_memory_t mem[5] = {NULL};
    int done = 0;
    if (!dnnl_memory_create(&mem[0], &md[0], cpu_engine, (void *)A) &&
        !dnnl_memory_create(&mem[1], &md[1], cpu_engine, (void *)B) &&
        !dnnl_memory_create(&mem[2], &md[2], cpu_engine, C) &&
        !(bias && dnnl_memory_create(&mem[3], &md[3], cpu_engine, (void *)bias)) &&
        !(scratch && dnnl_memory_create(&mem[4], &c->scratch_md, cpu_engine, scratch))) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
        int nargs = 3;
        if (bias) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem[3]};
        if (scratch) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[4]};
        done = !dnnl_primitive_execute(c->prim, tc->stream, nargs, args) && !dnnl_stream_wait(tc->stream);
    }
    for (int i = 0; i < 5; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    zl_mem_free(scratch, c->nscratch, ZL_MEM_ACTIVATIONS);
    return done;
}
#else
static bool onednn_runs(void) { return false; }
#endif

static int path_of_name(const char *name)
{
    if (!strcmp(name, "auto") || !strcmp(name, "on") || !strcmp(name, "onednn")) return PATH_ONEDNN;
    if (!strcmp(name, "off") || !strcmp(name, "f32")) return PATH_F32;
    return -1;
}

static int from_environment(void)
{
    const char *env = getenv("ZLUA_BF16_GEMM");
    return env && path_of_name(env) == PATH_F32 ? PATH_F32 : onednn_runs() ? PATH_ONEDNN : PATH_F32;
}

static int current_path(void) { return zli_choice(&chosen, from_environment); }

const char *zli_gemm_bf16_path(void) { return path_names[current_path()]; }

bool zl_bf16_dot_products(void) { return current_path() == PATH_ONEDNN; }

zl_status zli_gemm_bf16_select(const char *name)
{
    if (!name) {
        __atomic_store_n(&chosen, from_environment(), __ATOMIC_RELAXED);
        return ZL_OK;
    }
    int want = path_of_name(name);
    if (want < 0)
        return zl_error(ZL_EINVAL, "bf16 gemm: unknown path '%s' (expected auto, onednn, f32 or off)", name);
    bool fast = onednn_runs();
    if (want == PATH_ONEDNN && !fast && strcmp(name, "auto"))
        return zl_error(ZL_EINVAL, "bf16 gemm: the onednn path needs oneDNN and a CPU with AVX512-BF16");
    __atomic_store_n(&chosen, want == PATH_ONEDNN && fast ? PATH_ONEDNN : PATH_F32, __ATOMIC_RELAXED);
    return ZL_OK;
}

zl_status zli_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                        const uint16_t *B, int64_t ldb, const float *bias, void *C, zl_dtype c_dtype, int64_t ldc)
{
    if (M == 0 || N == 0) return ZL_OK;
    if (K == 0) {   /* an empty sum: C is the bias, or zero */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float v = bias ? bias[j] : 0.0f;
                if (c_dtype == ZL_DTYPE_BF16) ((uint16_t *)C)[i * ldc + j] = f32_bf16(v);
                else ((float *)C)[i * ldc + j] = v;
            }
        return ZL_OK;
    }
#ifdef ZLUA_HAVE_DNNL
    if (current_path() == PATH_ONEDNN) {
        int r = gemm_onednn(ta, tb, M, N, K, A, lda, B, ldb, bias, C, c_dtype, ldc);
        if (r) return r > 0 ? ZL_OK : ZL_ENOMEM;
    }
#endif
    return gemm_f32(ta, tb, M, N, K, A, lda, B, ldb, bias, C, c_dtype, ldc);
}
