/* Private to the engine: a device kind's backend, the table the public device
 * calls (engine/device) and the communicator reach it through, and the one
 * place that finds it: the CPU's is core's own (cpu_backend.c), CUDA's lives
 * in a module opened on first use (module.c, the module under engine/cuda). */
#ifndef ZL_CORE_BACKEND_H
#define ZL_CORE_BACKEND_H

#include "tensor_impl.h"

/* Bumped whenever zli_backend or zli_core_api changes: a module built from
 * another zlua is refused by name instead of called through a wrong table. */
#define ZLI_BACKEND_ABI 1

typedef struct zli_backend {
    int abi;
    zl_device kind;
    const char *name;   /* "cpu", "cuda": a device's name without its index */
    int max_devices;    /* indices the memory counters accept: 0 .. max_devices - 1 */
    /* Visible devices; 0 with the reason in zl_last_error() when there are none. */
    int (*count)(void);
    /* ZL_OK when device `index` can be used (made the thread's current one);
     * ZL_EDEVICE or ZL_EINVAL with the reason otherwise. */
    zl_status (*use)(int index);
    /* An uninitialised contiguous tensor on device `index` (its storage
     * carries the kind's zli_device_ops; NULL ones for the CPU). */
    zl_tensor *(*alloc)(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index);
    /* Every byte of t (contiguous, on a device of this kind) set to zero. */
    zl_status (*zero)(zl_tensor *t);
    /* dst = src, both contiguous with the same bytes, on two devices of this
     * kind (or one); NULL where a kind has one device. */
    zl_status (*copy_peer)(zl_tensor *dst, const zl_tensor *src);
    /* The memory figures of zlua/device.h: by category (ZL_MEM_COUNT: all)
     * and its peak; bytes charged on every device; the allocator's holding. */
    zl_mem_stats (*stats)(int index, zl_mem_category cat);
    int64_t (*in_use)(void);
    int64_t (*reserved)(int index);
    zl_status (*empty_cache)(int index);
    zl_status (*synchronize)(int index);
    /* The communicator backend on this kind's tensors (comm/backend.h's
     * zli_comm_backend), given the communicator's functions it calls
     * (comm/backend.h's zli_comm_api); NULL with the reason in
     * zl_last_error() when the backend has none. The pointer itself is NULL
     * for a kind without one. */
    const void *(*comm)(const void *comm_api);
    /* For the GPU tests: every cuBLASLt plan answered NOT_SUPPORTED while on,
     * so the fallback GEMM runs, and the GEMMs that ran on it. NULL: no such
     * library. */
    void (*blas_refuse_plans)(bool on);
    int64_t (*blas_fallbacks)(void);
} zli_backend;

/* What a module backend calls of core: its entry gets this table, and the
 * module's own definitions of these names forward to it, so a module
 * needs nothing exported from a static zlua. */
typedef struct zli_core_api {
    int abi;
    zl_status (*error)(zl_status code, const char *fmt, ...);
    const char *(*last_error)(void);
    zl_status (*last_code)(void);
    int (*interrupt_pending)(void);
    const char *(*dtype_name)(zl_dtype dt);
    size_t (*dtype_size)(zl_dtype dt);
    const zl_dtype_traits *(*dtype_traits_of)(zl_dtype dt);
    const char *(*mem_category_name)(zl_mem_category cat);
    bool (*mem_pressure)(size_t nbytes);
    void *(*tensor_data)(const zl_tensor *t);
    bool (*tensor_is_contiguous)(const zl_tensor *t);
    int64_t (*tensor_numel)(const zl_tensor *t);
    zl_tensor *(*tensor_new)(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat);
    void (*tensor_release)(zl_tensor *t);
    zl_tensor *(*tensor_on_device)(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                   const zli_device_ops *dev, int index, void *data, size_t nbytes);
    zl_tensor *(*tensor_on_pinned)(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat,
                                   const zli_device_ops *dev, void *data, size_t nbytes);
} zli_core_api;

/* A module's entry point, `zlua_<kind>_backend`: its table, or NULL with the
 * reason in why when it cannot serve this core. */
typedef const zli_backend *(*zli_backend_entry)(const zli_core_api *core, char *why, size_t size);

/* The backend of kind, opening its module on first use: NULL with "no CUDA
 * device: ..." (what was looked for and where) in zl_last_error() when
 * there is none, or "<op>: unknown device kind N". */
ZLI_HIDDEN const zli_backend *zli_backend_of(const char *op, zl_device kind);
/* The backend of kind when it is already open; NULL, and no error, when not
 * (counters read it without opening anything). */
ZLI_HIDDEN const zli_backend *zli_backend_opened(zl_device kind);
/* Whether kind names a device kind zlua knows (served or not). */
ZLI_HIDDEN bool zli_backend_known(zl_device kind);
/* b serves its kind in the current context from now on, in place of the
 * kind's own (a program's or a test's device over its own memory); NULL
 * gives the kind back to its own. ZL_EINVAL for the CPU or a kind zlua does
 * not know. */
ZLI_HIDDEN zl_status zli_backend_register(zl_device kind, const zli_backend *b);
/* The CPU's (cpu_backend.c). */
ZLI_HIDDEN extern const zli_backend zli_cpu_backend;

#endif
