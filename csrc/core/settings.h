/* settings.h: every environment variable tlgpu reads, in one table (settings.c): name, kind, default, when
 * it is read, one doc line. Core layer, pure C: no Python.h, no other tlgpu header. No other C file calls
 * getenv (tests/test_settings.py checks it, and that README's Environment table lists exactly the settings
 * that are not test-only).
 *
 * When a value is read is the row's choice: TL_SETF_ONCE rows are latched at their first read (the process
 * keeps that value, whatever the environment says later: the stream's batching, the pool, the device);
 * the others are read at each use, on purpose (tests and sweeps change them in-process between calls). */
#ifndef TL_SETTINGS_H
#define TL_SETTINGS_H

typedef enum {
    /* runtime, stream, pool */
    TL_SET_DEVICE, TL_SET_COMPUTE_PER_BUFFER, TL_SET_SYNC, TL_SET_DEBUG_BATCHING, TL_SET_MAX_INFLIGHT,
    TL_SET_MAX_STAGING_MB, TL_SET_POOL, TL_SET_POOL_LIMIT_MB,
    /* programs */
    TL_SET_CACHE_DIR, TL_SET_KERNEL_DIR, TL_SET_FAST_MATH, TL_SET_BUILD_OPTIONS, TL_SET_PTX_DUMP,
    /* GEMM and the op families' kernel choices (the three GEMM_PARAMS rows stay in tier order) */
    TL_SET_GEMM_PARAMS, TL_SET_GEMM_PARAMS_MID, TL_SET_GEMM_PARAMS_SMALL, TL_SET_GEMM_SPLITK, TL_SET_MATMUL_KERNEL,
    TL_SET_TC_WGMMA, TL_SET_SG, TL_SET_SG_COPY, TL_SET_CONV_KERNELS, TL_SET_REDUCE_BLOCKED, TL_SET_JIT_FUSE,
    TL_SET_JIT_CMDBUF,
    /* CPU BLAS path (TLGPU_BLAS is read by tlgpu/__init__.py) */
    TL_SET_BLAS, TL_SET_BLAS_THREADS, TL_SET_BLAS_SPIN_US, TL_SET_BLAS_SPLIT,
    /* publisher */
    TL_SET_SHM_DIRECT, TL_SET_SHM_COPY_THREADS,
    /* other programs' variables that tlgpu reads (not tlgpu settings: tlgpu.settings() leaves them out) */
    TL_SET_XDG_CACHE_HOME, TL_SET_HOME, TL_SET_OCL_ICD_FILENAMES, TL_SET_OCL_ICD_VENDORS,
#ifdef TL_TEST_HOOKS
    /* test builds only: release binaries carry neither the rows nor the names */
    TL_SET_TC_EMULATE, TL_SET_TC_PACK4, TL_SET_SG_SPLIT, TL_SET_PUB_TEST_HOLD_US,
#endif
    TL_SET_COUNT
} tl_setting_id;

typedef enum { TL_SK_STR, TL_SK_INT, TL_SK_FLAG } tl_setting_kind;

enum {
    TL_SETF_ONCE = 1,        /* latched at the first read */
    TL_SETF_TEST = 2,        /* exists in test builds only */
    TL_SETF_PYTHON = 4,      /* read by the Python package (too) */
    TL_SETF_FOREIGN = 8,     /* another program's variable (HOME, the ICD loader's) */
    TL_SETF_PY_ONLY = 16,    /* read by the Python package only: the row documents it */
};

typedef struct {
    const char *name;
    tl_setting_kind kind;
    unsigned flags;
    long dflt, lo, hi;       /* INT: the value when unset or malformed, and the range (below lo: dflt; above hi:
                              * hi). FLAG: dflt is 0, 1 or -1 (the device decides) */
    const char *shown;       /* the default in words, for tlgpu.settings() */
    const char *doc;         /* one line */
} tl_setting;

const tl_setting *tl_setting_info(tl_setting_id id);

/* The raw value, NULL when unset. ONCE rows: the value of their first read, for the life of the process. */
const char *tl_setting_str(tl_setting_id id);

/* INT rows: a whole decimal number in [lo, hi] (clamped to hi), else dflt (unset, empty, malformed, < lo). */
long tl_setting_int(tl_setting_id id);

/* FLAG rows: "1" -> 1, "0" -> 0, anything else (unset included) -> dflt. */
int tl_setting_flag(tl_setting_id id);

/* What tlgpu.settings() shows, without latching a ONCE row that was never read: its latched value if it was
 * read, else the environment's now. *latched says which. */
const char *tl_setting_peek(tl_setting_id id, int *latched);

#endif
