/* settings.c: the one table of environment variables and the one file that calls getenv (settings.h).
 * ONCE rows are latched under a mutex at their first read (a copy, so a later setenv cannot move them);
 * the others are read from the environment at each call, as their callers did before the table. */
#include "settings.h"
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define ONCE TL_SETF_ONCE
#define EACH 0u
#define PY TL_SETF_PYTHON
#define FOREIGN TL_SETF_FOREIGN

#ifdef TL_SANITIZE
#define POOL_DEFAULT 0                             /* let ASan see every use-after-free */
#define POOL_SHOWN "0 (sanitizer build)"
#else
#define POOL_DEFAULT 1
#define POOL_SHOWN "1"
#endif

#define STR(id, name, flags, shown, doc) [id] = {name, TL_SK_STR, flags, 0, 0, 0, shown, doc}
#define INT(id, name, flags, d, lo, hi, shown, doc) [id] = {name, TL_SK_INT, flags, d, lo, hi, shown, doc}
#define FLAG(id, name, flags, d, shown, doc) [id] = {name, TL_SK_FLAG, flags, d, 0, 1, shown, doc}

static const tl_setting table[TL_SET_COUNT] = {
    STR(TL_SET_DEVICE, "TLGPU_DEVICE", EACH, "first GPU, else first device",
        "device by type (cpu, gpu) or a substring of platform/device name, vendor or version, optional :index; "
        "read when the runtime starts (again after a failed start)"),
    INT(TL_SET_COMPUTE_PER_BUFFER, "TLGPU_COMPUTE_PER_BUFFER", ONCE, 50, 1, 1L << 20, "50",
        "flush the compute queue every N enqueues"),
    FLAG(TL_SET_SYNC, "TLGPU_SYNC", ONCE, 0, "0", "1: finish after every command (errors surface at their op)"),
    FLAG(TL_SET_DEBUG_BATCHING, "TLGPU_DEBUG_BATCHING", ONCE, 0, "0", "1: log flushes and waits to stderr"),
    INT(TL_SET_MAX_INFLIGHT, "TLGPU_MAX_INFLIGHT", ONCE, 16, 0, 255, "16",
        "flushed compute batches in flight before the host waits for the oldest (0: no bound)"),
    INT(TL_SET_MAX_STAGING_MB, "TLGPU_MAX_STAGING_MB", ONCE, 64, 0, 1L << 30, "64",
        "MiB of upload host copies in flight before the host waits for the oldest (0: no bound)"),
    FLAG(TL_SET_POOL, "TLGPU_POOL", ONCE, POOL_DEFAULT, POOL_SHOWN, "0: bypass the buffer pool (every release frees)"),
    INT(TL_SET_POOL_LIMIT_MB, "TLGPU_POOL_LIMIT_MB", ONCE, 0, 0, 1L << 30, "0 (no cap)",
        "cap on the pool's cached MiB (blocks beyond it are freed at release)"),
    STR(TL_SET_CACHE_DIR, "TLGPU_CACHE_DIR", EACH | PY, "$XDG_CACHE_HOME/tlgpu, else ~/.cache/tlgpu",
        "compiled-kernel cache folder (empty: no disk cache); read at each build"),
    STR(TL_SET_KERNEL_DIR, "TLGPU_KERNEL_DIR", EACH, "unset (the embedded sources)",
        "read kernels/*.cl from this folder instead of the embedded copies; read at each build"),
    FLAG(TL_SET_FAST_MATH, "TLGPU_FAST_MATH", EACH, 0, "0",
         "1: build kernels with -cl-mad-enable -cl-fast-relaxed-math; read at each build"),
    STR(TL_SET_BUILD_OPTIONS, "TLGPU_BUILD_OPTIONS", EACH, "unset",
        "extra OpenCL build options for every kernel program; read at each build (sweeps set it in-process)"),
    STR(TL_SET_PTX_DUMP, "TLGPU_PTX_DUMP", EACH, "unset",
        "NVIDIA: a folder for the PTX before and after the sm_90a rewrite of csrc/ptx_patch.c"),
    STR(TL_SET_GEMM_PARAMS, "TLGPU_GEMM_PARAMS", ONCE, "the device's table row",
        "GEMM tile parameters of the big-tile tier, e.g. MWG=128,NWG=64,KWG=16"),
    STR(TL_SET_GEMM_PARAMS_MID, "TLGPU_GEMM_PARAMS_MID", ONCE, "the device's table row",
        "GEMM tile parameters of the mid-tile tier"),
    STR(TL_SET_GEMM_PARAMS_SMALL, "TLGPU_GEMM_PARAMS_SMALL", ONCE, "the device's table row",
        "GEMM tile parameters of the small-tile tier"),
    STR(TL_SET_GEMM_SPLITK, "TLGPU_GEMM_SPLITK", EACH, "auto",
        "split-K of the float32 tiled tiers: auto, off, or a slice count 2..1024; read until one is valid"),
    STR(TL_SET_MATMUL_KERNEL, "TLGPU_MATMUL_KERNEL", ONCE, "unset (the device decides)",
        "small or naive: force that fallback kernel; gemm: tier 0 at every size (tests)"),
    FLAG(TL_SET_TC_WGMMA, "TLGPU_TC_WGMMA", EACH, 1, "1",
         "0: Hopper under set_matmul_precision('tf32') keeps every product on the mma.sync rows"),
    STR(TL_SET_SG, "TLGPU_SG", EACH, "on", "off: NVIDIA float32 GEMMs stay on the GEMM tiers, not matmul_sg.cl"),
    STR(TL_SET_SG_COPY, "TLGPU_SG_COPY", EACH, "on", "off: NVIDIA a @ b runs on its own rows, no copy of A transposed"),
    STR(TL_SET_CONV_KERNELS, "TLGPU_CONV_KERNELS", ONCE, "the device type decides",
        "rows or elements: force the CPU or the GPU im2col/col2im kernels (tests)"),
    FLAG(TL_SET_REDUCE_BLOCKED, "TLGPU_REDUCE_BLOCKED", EACH, -1, "the device type decides",
         "1 or 0: force the CPU (blocked) or the GPU reduction layout (tests); read at each reduction"),
    FLAG(TL_SET_JIT_FUSE, "TLGPU_JIT_FUSE", EACH, 1, "1",
         "0: tlgpu.jit keeps every recorded command (no fused elementwise kernels, no epilogues moved into "
         "products); read at each trace"),
    STR(TL_SET_JIT_CMDBUF, "TLGPU_JIT_CMDBUF", EACH, "auto",
        "tlgpu.jit replays through cl_khr_command_buffer: 1 where the device has it, 0 never, auto as measured "
        "(docs/jit.md); read at each trace"),
    STR(TL_SET_BLAS, "TLGPU_BLAS", PY | TL_SETF_PY_ONLY, "numpy's OpenBLAS, then Debian's",
        "CPU devices: the BLAS library for products (a path; 0 or empty keeps the OpenCL kernels); read at import"),
    INT(TL_SET_BLAS_THREADS, "TLGPU_BLAS_THREADS", ONCE, 0, 1, 4096, "the device's compute units",
        "CPU BLAS path: parts per product"),
    INT(TL_SET_BLAS_SPIN_US, "TLGPU_BLAS_SPIN_US", ONCE, 500, 0, LONG_MAX, "500",
        "CPU BLAS path: microseconds a helper polls for the next product before it sleeps"),
    FLAG(TL_SET_BLAS_SPLIT, "TLGPU_BLAS_SPLIT", ONCE, 1, "1", "0: CPU BLAS products run on the BLAS's own threads"),
    FLAG(TL_SET_SHM_DIRECT, "TLGPU_SHM_DIRECT", EACH, 1, "1",
         "0: the publisher copies into its shared-memory slots instead of reading the device into them"),
    INT(TL_SET_SHM_COPY_THREADS, "TLGPU_SHM_COPY_THREADS", EACH, 0, 1, INT_MAX,
        "half the CPUs, at most 8, for copies of 16 MiB or more",
        "threads for copies into and out of the publisher's shared memory, at any size (at most 8)"),
    STR(TL_SET_XDG_CACHE_HOME, "XDG_CACHE_HOME", FOREIGN, "unset",
        "the kernel cache's base when TLGPU_CACHE_DIR is unset"),
    STR(TL_SET_HOME, "HOME", FOREIGN, "unset", "the kernel cache's base when XDG_CACHE_HOME is unset too"),
    STR(TL_SET_OCL_ICD_FILENAMES, "OCL_ICD_FILENAMES", FOREIGN, "unset", "the ICD loader's; put back after it runs"),
    STR(TL_SET_OCL_ICD_VENDORS, "OCL_ICD_VENDORS", FOREIGN, "unset", "the ICD loader's; put back after it runs"),
#ifdef TL_TEST_HOOKS
    FLAG(TL_SET_TC_EMULATE, "TLGPU_TC_EMULATE", ONCE | TL_SETF_TEST, 0, "0",
         "1: the TF32 rows run anywhere, built with -DTC_EMULATE=1 (give it in TLGPU_BUILD_OPTIONS too)"),
    FLAG(TL_SET_TC_PACK4, "TLGPU_TC_PACK4", EACH | TL_SETF_TEST, 1, "1",
         "0: the packed rows' local-transpose pack always"),
    INT(TL_SET_SG_SPLIT, "TLGPU_SG_SPLIT", EACH | TL_SETF_TEST, 0, 1, INT_MAX, "the row's rule",
        "matmul_sg.cl: force this many K slices"),
    INT(TL_SET_PUB_TEST_HOLD_US, "TLGPU_PUB_TEST_HOLD_US", EACH | TL_SETF_TEST, 0, 0, UINT_MAX, "0",
        "the publisher thread holds each job this long (tests of dropping and closing)"),
#endif
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *latched[TL_SET_COUNT];
static unsigned char is_latched[TL_SET_COUNT];

const tl_setting *
tl_setting_info(tl_setting_id id)
{
    return (unsigned)id < TL_SET_COUNT ? &table[id] : NULL;
}

const char *
tl_setting_str(tl_setting_id id)
{
    const tl_setting *s = &table[id];
    if (!(s->flags & TL_SETF_ONCE)) return getenv(s->name);
    pthread_mutex_lock(&lock);
    if (!is_latched[id]) {
        const char *v = getenv(s->name);
        latched[id] = v != NULL ? strdup(v) : NULL;    /* lives with the process; no memory: as if unset */
        is_latched[id] = 1;
    }
    const char *v = latched[id];
    pthread_mutex_unlock(&lock);
    return v;
}

const char *
tl_setting_peek(tl_setting_id id, int *was_latched)
{
    const char *v = NULL;
    pthread_mutex_lock(&lock);
    *was_latched = is_latched[id];
    if (is_latched[id]) v = latched[id];
    pthread_mutex_unlock(&lock);
    return *was_latched ? v : getenv(table[id].name);
}

long
tl_setting_int(tl_setting_id id)
{
    const tl_setting *s = &table[id];
    const char *v = tl_setting_str(id);
    char *end;
    if (v == NULL || *v == '\0') return s->dflt;
    long x = strtol(v, &end, 10);
    if (*end != '\0' || x < s->lo) return s->dflt;
    return x < s->hi ? x : s->hi;
}

int
tl_setting_flag(tl_setting_id id)
{
    const char *v = tl_setting_str(id);
    if (v != NULL && (v[0] == '0' || v[0] == '1') && v[1] == '\0') return v[0] - '0';
    return (int)table[id].dflt;
}
