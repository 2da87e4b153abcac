/* cpu_blas.c: the BLAS path of matmul on CPU OpenCL devices (see cpu_blas.h, docs/cpu.md).
 * PoCL's GEMM kernels reach 25-70 GFLOP/s on the 2-core AVX-512 development machine where OpenBLAS reaches
 * 190 on one core and 300-370 on two; PoCL's buffers are host memory and it runs native kernels, so a
 * product becomes one clEnqueueNativeKernel whose callback calls sgemm (sgemv for one row or column) on the
 * buffers' host pointers: in queue order with the kernels around it, no host wait, the stream's per-buffer
 * events and counts as for any kernel. Decode-shaped products (ops_matmul.c's mul_mv case) keep their
 * OpenCL kernel, which reads the weights at copy bandwidth and adds the residual as it stores.
 * Invariants: the library is loaded once (first product on a CPU device that runs native kernels and has
 * unified memory) and its function pointers are then read-only, so the callback reads them without a lock;
 * the callback touches no Python object; an operand whose strides no BLAS layout fits goes to the OpenCL
 * kernels. Both CBLAS interfaces load: LP64 `cblas_sgemm` (Debian's libopenblas) and ILP64
 * `scipy_cblas_sgemm64_` / `cblas_sgemm64_` (numpy's bundled OpenBLAS).
 * Threads: the BLAS runs on one thread per part; a product of 4 MFLOP or more is split into
 * TLGPU_BLAS_THREADS parts (default: the device's compute units), run by the PoCL worker and helper threads
 * that sleep on a condition variable between products. OpenBLAS's own workers spin after each call and took
 * the second core from PoCL's workers: the MLP step ran 7-15 x slower with BLAS threads = 2
 * (TLGPU_BLAS_SPLIT=0 restores that mode, for measurements). The thread count is set and put back around
 * each product, since numpy's library has one count for all its callers.
 * The cells of host pointers, the submit and the part threads are cpu_native.c's (shared with cpu_quant.c).
 * Convolutions without autograd (tl_cpu_blas_conv) run the same way: one native command that, per image or
 * group of images, writes im2col columns into a buffer that stays in cache and multiplies them by sgemm. */
#include "cpu_blas.h"
#include "cpu_native.h"
#include "cpu_half.h"
#include "state.h"
#include "settings.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, MAX_PATHS = 8 };
typedef void (*sgemm32)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                        int);
typedef void (*sgemv32)(int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef void (*sgemv64)(int, int, long long, long long, float, const float *, long long, const float *, long long,
                        float, float *, long long);
typedef void (*sgemm64)(int, int, int, long long, long long, long long, float, const float *, long long,
                        const float *, long long, float, float *, long long);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int state;                        /* 0 not tried, 1 active, -1 unavailable (reason says why) */
    int enabled;                      /* _cpu_blas(enable=False): the OpenCL kernels, for tests */
    int threads, split;
    void *handle;
    sgemm32 g32;
    sgemm64 g64;
    sgemv32 v32;
    sgemv64 v64;
    int (*set_local)(int);
    char *paths[MAX_PATHS];
    int npaths;
    char path[512], reason[256];
} lib = {.enabled = 1};
static atomic_long n_launches, n_convs;
#define FP(c) ((float *)(c)->p)   /* a cell's host pointer as the floats it holds */
/* Operand i's floats (0 C, 1 A, 2 B, 3 the residual, 4 the row sums): a half operand's float32 copy in the
 * job's scratch while the job runs (run_job), else the buffer itself. */
#define OPND(j, i, cell) ((j)->xp[i] != NULL ? (j)->xp[i] : FP((j)->cell))
#define PC(j) OPND(j, 0, c)
#define PA(j) OPND(j, 1, a)
#define PB(j) OPND(j, 2, b)
#define PR(j) OPND(j, 3, r)
#define PS(j) OPND(j, 4, s)

enum { RES_NONE, RES_FULL, RES_ROWS };   /* no residual; one of C's shape; a row [N] added to every row of C */

/* The args block of one product: the cells of C, A, B (and the residual), read when the job runs. */
typedef struct {
    tl_native_cell *c, *a, *b, *r, *s, *x;   /* r only with a residual, s only with row sums, x: half's scratch */
    cl_mem mem[TL_NATIVE_MAX];        /* the runtime's copies of these are not read (cpu_native.h) */
    int M, N, K, ta, tb, lda, ldb, res_mode, threads, split;   /* res_mode: RES_* */
    int relu;                         /* ReLU applied to each band after its product */
    int nbd, bshape[TL_MAX_DIMS], bst[3][TL_MAX_DIMS], off[3], roff, soff;
    int conv, bands, group, g[TL_CONV_GEOM];   /* conv: a convolution (conv_part), g its geometry */
    int dt[5], half;                  /* C, A, B, residual, sums dtypes (TL_F32 or half); half: any is */
    long lo[5], hi[5];                /* the elements of each operand the product touches (offsets included) */
    float *xp[5];                     /* set in run_job's copy: half operands' floats in x (OPND) */
} job;

/* C[m, n] = A[m, K] @ B[K, n] (+ C with beta 1), ldc between C's rows. A single row or column is a
 * matrix-vector product: sgemm would pack all of the matrix first (1 x 4096 @ 4096 x 4096: 3.5 GFLOP/s
 * against sgemv's 14 here). */
static void
gemm(const job *j, int m, int n, const float *A, const float *B, float beta, float *C, int ldc)
{
    const int ta = j->ta, tb = j->tb, K = j->K;
    if (m == 1 || n == 1) {           /* y = op(matrix) x in row-major terms */
        const int row = m == 1;       /* C row = A row @ B: the matrix is B; else C column = A @ B column */
        const float *mat = row ? B : A, *x = row ? A : B;
        int t = row ? tb : ta, ld = row ? j->ldb : j->lda;
        int rows = row ? (t == TRANS ? n : K) : (t == TRANS ? K : m);
        int cols = row ? (t == TRANS ? K : n) : (t == TRANS ? m : K);
        int op = row ? (t == TRANS ? NO_TRANS : TRANS) : t;   /* row: y = B^T x */
        int incx = row ? (ta == NO_TRANS ? 1 : j->lda) : (tb == NO_TRANS ? j->ldb : 1);   /* along K */
        int incy = row ? 1 : ldc;
        if (lib.v64 != NULL) lib.v64(ROW_MAJOR, op, rows, cols, 1.0f, mat, ld, x, incx, beta, C, incy);
        else lib.v32(ROW_MAJOR, op, rows, cols, 1.0f, mat, ld, x, incx, beta, C, incy);
        return;
    }
    if (lib.g64 != NULL) lib.g64(ROW_MAJOR, ta, tb, m, n, K, 1.0f, A, j->lda, B, j->ldb, beta, C, ldc);
    else lib.g32(ROW_MAJOR, ta, tb, m, n, K, 1.0f, A, j->lda, B, j->ldb, beta, C, ldc);
}

/* Writes the residual into rows r0..r1, columns c0..c1 of the C matrix at element offset oc (from C's
 * start; the residual of C's shape is at the same offset from its own), so that sgemm with beta = 1 adds
 * the product to it: each part preloads its own band, on its own thread, just before its product. */
static void
preload(const job *j, ptrdiff_t oc, int r0, int r1, int c0, int c1)
{
    const int full = j->res_mode == RES_FULL;
    const float *src = PR(j) + j->roff + (full ? oc - j->off[0] : 0);
    const size_t n = (size_t)(c1 - c0) * sizeof(float);
    for (int r = r0; r < r1; r++)
        memcpy(PC(j) + oc + (ptrdiff_t)r * j->N + c0, src + (full ? (ptrdiff_t)r * j->N : 0) + c0, n);
}

/* S[m] = sum over k of op(A)[m, k] for rows m0..m1 (no batch dims): a linear layer's bias gradient, the
 * sums of the upstream gradient's columns, read while its product for the weight gradient is in cache. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-loop-vectorize")))    /* -O2's cost model leaves the row loop scalar */
#endif
static void
row_sums(const job *j, int m0, int m1)
{
    const float *restrict A = PA(j) + j->off[1];
    float *restrict S = PS(j) + j->soff;
    if (j->ta == TRANS) {             /* op(A)[m, k] = A[k * lda + m]: add rows of A, a loop the compiler vectorises */
        for (int m = m0; m < m1; m++) S[m] = 0.0f;
        for (int k = 0; k < j->K; k++) {
            const float *restrict row = A + (ptrdiff_t)k * j->lda;
            for (int m = m0; m < m1; m++) S[m] += row[m];
        }
        return;
    }
    for (int m = m0; m < m1; m++) {
        float acc = 0.0f;
        for (int k = 0; k < j->K; k++) acc += A[(ptrdiff_t)m * j->lda + k];
        S[m] = acc;
    }
}

/* max(C, 0) over rows x cols of C (ld between rows), NaN kept: ew_apply's ReLU (kernels/ew_apply.h). */
static void
relu_band(float *restrict C, int rows, int cols, int ld)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const float v = C[(ptrdiff_t)r * ld + c];
            C[(ptrdiff_t)r * ld + c] = v <= 0.0f ? 0.0f : v;
        }
}

/* Part `part` of `parts` of the job: whole batches when there are enough, else a band of C's rows (or
 * columns, when C is wide and short) of each batch. */
static void conv_part(const job *j, int part, int parts);

static void
run_part(const job *j, int part, int parts)
{
    if (j->conv) { conv_part(j, part, parts); return; }
    size_t total = 1;
    for (int d = 0; d < j->nbd; d++) total *= (size_t)j->bshape[d];
    const float beta = j->res_mode != RES_NONE ? 1.0f : 0.0f;
    const int by_batch = total >= (size_t)parts, by_rows = j->M >= j->N;
    size_t t0 = by_batch ? total * (size_t)part / (size_t)parts : 0;
    size_t t1 = by_batch ? total * (size_t)(part + 1) / (size_t)parts : total;
    if (j->s != NULL)
        row_sums(j, (int)((long long)j->M * part / parts), (int)((long long)j->M * (part + 1) / parts));
    int ext = by_rows ? j->M : j->N;
    int lo = by_batch ? 0 : (int)((long long)ext * part / parts);
    int hi = by_batch ? ext : (int)((long long)ext * (part + 1) / parts);
    if (hi <= lo) return;
    for (size_t t = t0; t < t1; t++) {
        ptrdiff_t o[3] = {j->off[0], j->off[1], j->off[2]};
        size_t rest = t;
        for (int d = j->nbd - 1; d >= 0; d--) {
            ptrdiff_t i = (ptrdiff_t)(rest % (size_t)j->bshape[d]);
            rest /= (size_t)j->bshape[d];
            for (int r = 0; r < 3; r++) o[r] += i * j->bst[r][d];
        }
        if (j->res_mode != RES_NONE)
            preload(j, o[0], by_rows ? lo : 0, by_rows ? hi : j->M, by_rows ? 0 : lo, by_rows ? j->N : hi);
        if (by_rows) {                /* rows lo..hi of A and C */
            o[1] += (ptrdiff_t)lo * (j->ta == NO_TRANS ? j->lda : 1);
            o[0] += (ptrdiff_t)lo * j->N;
            gemm(j, hi - lo, j->N, PA(j) + o[1], PB(j) + o[2], beta, PC(j) + o[0], j->N);
            if (j->relu) relu_band(PC(j) + o[0], hi - lo, j->N, j->N);
        } else {                      /* columns lo..hi of B and C */
            o[2] += (ptrdiff_t)lo * (j->tb == NO_TRANS ? 1 : j->ldb);
            o[0] += lo;
            gemm(j, j->M, hi - lo, PA(j) + o[1], PB(j) + o[2], beta, PC(j) + o[0], j->N);
            if (j->relu) relu_band(PC(j) + o[0], j->M, hi - lo, j->N);
        }
    }
}

/* ---- convolution: per image (or band of its output rows), im2col into a small buffer of columns that
 * stays in cache, then one sgemm W [O, CKK] @ cols [CKK, band] into the NCHW output's rows, bias preloaded.
 * j: c = out, a = weight, b = input, r = bias (or NULL), s = the columns (K * band floats a part);
 * M = O, K = CKK, N = L (OH * OW), bands per image. */
enum { G_N, G_C, G_H, G_W, G_OH, G_OW, G_KH, G_KW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_SN, G_SC, G_SHS, G_SWS,
       G_OFF };
enum { CONV_SCRATCH = 1 << 17 };      /* floats of columns a band aims at: 512 KiB, within a core's L2 */

/* How a convolution is cut (conv_part): *group images a product when an image's columns fit CONV_SCRATCH
 * (no more than each part's share of the batch), else *bands bands of output rows per image, enough to
 * keep a band's columns near CONV_SCRATCH floats and to give every part some work. Returns the floats of
 * buffer a part needs. */
static size_t
conv_cut(int K, int O, int OH, int OW, int N, int parts, int *group, int *bands)
{
    const long long per = (long long)K * OH * OW, share = (N + parts - 1) / parts;
    long long gs = per > 0 ? CONV_SCRATCH / per : 1, nb = (per + CONV_SCRATCH - 1) / CONV_SCRATCH;
    gs = gs > share ? share : gs;
    *group = gs > 1 ? (int)gs : 1;
    if (nb * N < parts) nb = (parts + N - 1) / N;
    *bands = *group > 1 ? 1 : (int)(nb < 1 ? 1 : nb > OH ? OH : nb);
    if (*group > 1) return (size_t)(K + O) * (size_t)*group * (size_t)OH * (size_t)OW;
    return (size_t)K * (size_t)((OH + *bands - 1) / *bands) * (size_t)OW;
}

#if defined(__GNUC__) && !defined(__clang__)
#define VECTORISE __attribute__((optimize("tree-loop-vectorize")))   /* -O2 leaves these loops scalar */
#else
#define VECTORISE
#endif

/* One row of cols over output rows whose input rows exist: per output row, zeros for ow < lo, the gather
 * x[i * STEP] for lo..hi (the compiler vectorises a constant step: a copy, or loads and shuffles), zeros
 * for ow >= hi. A macro, so that each step gets its own loop nest with the step known. */
#define IM2COL_ROWS(STEP)                                                                                     \
    if (m == OW) {                    /* no padding in the row: a plain loop nest, 1.5-2x faster */          \
        for (int oh = 0; oh < nrows; oh++, d += OW, xr += rs)                                                 \
            for (int i = 0; i < OW; i++) d[i] = xr[(ptrdiff_t)i * (STEP)];                                    \
    } else {                                                                                                  \
        for (int oh = 0; oh < nrows; oh++, d += OW, xr += rs) {                                               \
            for (int ow = 0; ow < lo; ow++) d[ow] = 0.0f;                                                     \
            for (int i = 0; i < m; i++) d[lo + i] = xr[(ptrdiff_t)i * (STEP)];                                \
            for (int ow = hi; ow < OW; ow++) d[ow] = 0.0f;                                                    \
        }                                                                                                     \
    }

/* cols [K, (oh1 - oh0) * OW] (rows ld apart) of image n for output rows oh0..oh1: row r = (c, ki, kj) of
 * cols holds, for each output position, the input element its window reads at (ki, kj), zero where that is
 * padding. Per row of cols, the output rows whose input row is padding are zeros, and the ow range inside
 * the input (lo..hi) is the same for every other output row. Without dilation, the row of kj >= SW is the
 * row of kj - SW one column on (iw = kj - PW + ow * SW), except each output row's last column: half the
 * Nature CNN's rows become a contiguous copy instead of a gather at step 4 or 2. */
VECTORISE static void
im2col_rows(const job *j, int n, int oh0, int oh1, float *restrict cols, ptrdiff_t ld)
{
    const int *g = j->g, OW = g[G_OW], SH = g[G_SH], SW = g[G_SW], step = SW * g[G_SWS];
    const ptrdiff_t rs = (ptrdiff_t)SH * g[G_SHS];
    const float *x = FP(j->b) + g[G_OFF] + (ptrdiff_t)n * g[G_SN];
    for (int c = 0; c < g[G_C]; c++)
        for (int ki = 0; ki < g[G_KH]; ki++) {
            /* output rows oh0..oh1 split into va (input row above the input), va..vb (inside), vb.. (below) */
            const int ih0 = oh0 * SH - g[G_PH] + ki * g[G_DH];
            int va = ih0 >= 0 ? oh0 : oh0 + (-ih0 + SH - 1) / SH, vb = g[G_H] - 1 - ih0 < 0 ? oh0 :
                     oh0 + (g[G_H] - 1 - ih0) / SH + 1;
            va = va > oh1 ? oh1 : va;
            vb = vb > oh1 ? oh1 : vb < va ? va : vb;
            for (int kj = 0; kj < g[G_KW]; kj++, cols += ld) {
                const int iw0 = kj * g[G_DW] - g[G_PW];        /* iw = iw0 + ow * SW lies in [0, W) for lo..hi */
                if (g[G_DW] == 1 && kj >= SW && OW > 1) {
                    /* the row of kj - SW, one column on: a contiguous copy, then each output row's last column */
                    const int n1 = (oh1 - oh0) * OW - 1, iw = iw0 + (OW - 1) * SW, inside = iw >= 0 && iw < g[G_W];
                    const float *xl = x + (ptrdiff_t)c * g[G_SC] + (ptrdiff_t)(inside ? iw : 0) * g[G_SWS];
                    memcpy(cols, cols - SW * ld + 1, sizeof(float) * (size_t)n1);
                    for (int oh = oh0, ih = ih0; oh < oh1; oh++, ih += SH)
                        cols[(oh - oh0) * OW + OW - 1] = !inside || ih < 0 || ih >= g[G_H] ? 0.0f :
                                                         xl[(ptrdiff_t)ih * g[G_SHS]];
                    continue;
                }
                const int lo = iw0 >= 0 ? 0 : (-iw0 + SW - 1) / SW < OW ? (-iw0 + SW - 1) / SW : OW;
                int hi = g[G_W] - 1 - iw0 < 0 ? 0 : (g[G_W] - 1 - iw0) / SW + 1;
                hi = hi > OW ? OW : hi < lo ? lo : hi;
                const int m = hi - lo, nrows = vb - va;
                float *restrict d = cols;
                for (int i = 0; i < (va - oh0) * OW; i++) d[i] = 0.0f;
                d += (ptrdiff_t)(va - oh0) * OW;
                const float *restrict xr = x + (ptrdiff_t)c * g[G_SC] + (ptrdiff_t)(ih0 + (va - oh0) * SH) * g[G_SHS] +
                                           (ptrdiff_t)(iw0 + lo * SW) * g[G_SWS];
                switch (step) {
                case 1: IM2COL_ROWS(1) break;
                case 2: IM2COL_ROWS(2) break;
                case 4: IM2COL_ROWS(4) break;
                default: IM2COL_ROWS(step)
                }
                for (int i = 0; i < (oh1 - vb) * OW; i++) d[i] = 0.0f;
            }
        }
}

/* Part `part` of `parts`: its share of the units, in order. A unit is a group of whole images (cols
 * [K, group * L], the product into a buffer [O, group * L] whose rows go to the images' outputs with the
 * bias: OpenBLAS ran the Nature CNN's 2nd and 3rd layers 13-23 % faster on 3-4 images a product than on
 * one), or, when an image's columns do not fit, a band of one image's output rows (the product straight
 * into the output, the bias preloaded). */
static void
conv_part(const job *j, int part, int parts)
{
    const int L = j->N, O = j->M, K = j->K, N = j->g[G_N], OH = j->g[G_OH], OW = j->g[G_OW], nb = j->bands;
    const int gs = j->group, br = (OH + nb - 1) / nb;  /* images a group; output rows a band */
    const long long units = gs > 1 ? (N + gs - 1) / gs : (long long)N * nb;
    const long long u0 = units * part / parts, u1 = units * (part + 1) / parts;
    const size_t room = gs > 1 ? (size_t)(K + O) * gs * L : (size_t)K * br * OW;
    float *cols = FP(j->s) + (ptrdiff_t)part * room;   /* this part's buffers */
    const float *W = FP(j->a) + j->off[1], *bias = j->r != NULL ? FP(j->r) + j->roff : NULL;
    for (long long u = u0; u < u1; u++) {
        if (gs > 1) {
            const int n0 = (int)(u * gs), m = n0 + gs < N ? gs : N - n0;
            float *y = cols + (size_t)K * m * L;
            for (int i = 0; i < m; i++) im2col_rows(j, n0 + i, 0, OH, cols + (ptrdiff_t)i * L, (ptrdiff_t)m * L);
            if (lib.g64 != NULL) lib.g64(ROW_MAJOR, NO_TRANS, NO_TRANS, O, (long long)m * L, K, 1.0f, W, K, cols,
                                         (long long)m * L, 0.0f, y, (long long)m * L);
            else lib.g32(ROW_MAJOR, NO_TRANS, NO_TRANS, O, m * L, K, 1.0f, W, K, cols, m * L, 0.0f, y, m * L);
            for (int i = 0; i < m; i++)
                for (int o = 0; o < O; o++) {
                    float *restrict dst = FP(j->c) + j->off[0] + ((ptrdiff_t)(n0 + i) * O + o) * L;
                    const float *restrict src = y + ((ptrdiff_t)o * m + i) * L, b = bias != NULL ? bias[o] : 0.0f;
                    for (int l = 0; l < L; l++) dst[l] = src[l] + b;
                }
            continue;
        }
        const int n = (int)(u / nb), b = (int)(u % nb), oh0 = b * br, oh1 = oh0 + br < OH ? oh0 + br : OH;
        const int w = (oh1 - oh0) * OW;
        if (w <= 0) continue;
        float *out = FP(j->c) + j->off[0] + (ptrdiff_t)n * O * L + (ptrdiff_t)oh0 * OW;
        im2col_rows(j, n, oh0, oh1, cols, w);
        if (bias != NULL)
            for (int o = 0; o < O; o++)
                for (int l = 0; l < w; l++) out[(ptrdiff_t)o * L + l] = bias[o];
        const float beta = bias != NULL ? 1.0f : 0.0f;
        if (lib.g64 != NULL) lib.g64(ROW_MAJOR, NO_TRANS, NO_TRANS, O, w, K, 1.0f, W, K, cols, w, beta, out, L);
        else lib.g32(ROW_MAJOR, NO_TRANS, NO_TRANS, O, w, K, 1.0f, W, K, cols, w, beta, out, L);
    }
}

/* Runs on a PoCL worker thread in queue order: no Python, no locks but the helpers' and the BLAS's own.
 * Products under 2M multiply-adds (4 MFLOP), or with split off, run on this thread alone. */
static void
part_fn(const void *j, int part, int parts)
{
    run_part(j, part, parts);
}

/* A job with half operands: each one's touched elements get a float32 copy in the scratch (x), in operand order,
 * and its offsets move to index that copy (scratch_plan); the parts widen their shares of the inputs (widen_part)
 * before any product, and the copies of C and the sums take the results, narrowed after them (run_job). */
static int *
offset_of(job *j, int i)                              /* operand i's element offset (OPND's numbering) */
{
    return i == 3 ? &j->roff : i == 4 ? &j->soff : &j->off[i];
}

static int
present(const job *h, int i)
{
    tl_native_cell *const cell[5] = {h->c, h->a, h->b, h->r, h->s};
    return cell[i] != NULL && h->dt[i] != TL_F32;
}

static void
scratch_plan(job *h)
{
    float *s = FP(h->x);
    for (int i = 0; i < 5; i++) {
        if (!present(h, i)) continue;
        h->xp[i] = s;
        s += h->hi[i] - h->lo[i];
        *offset_of(h, i) -= (int)h->lo[i];
    }
}

static void
convert_part(const job *h, int part, int parts, int narrow)
{
    tl_native_cell *const cell[5] = {h->c, h->a, h->b, h->r, h->s};
    for (int i = 0; i < 5; i++) {
        if (h->xp[i] == NULL || narrow != (i == 0 || i == 4)) continue;   /* C and the sums out, the rest in */
        const long n = h->hi[i] - h->lo[i], a = n * part / parts, b = n * (part + 1) / parts;
        uint16_t *p = (uint16_t *)cell[i]->p + h->lo[i] + a;
        if (narrow) tl_cpu_narrow(h->dt[i], h->xp[i] + a, p, (size_t)(b - a));
        else tl_cpu_widen(h->dt[i], p, h->xp[i] + a, (size_t)(b - a));
    }
}

static void widen_part(const void *h, int part, int parts) { convert_part(h, part, parts, 0); }
static void narrow_part(const void *h, int part, int parts) { convert_part(h, part, parts, 1); }

static void run_parts(const job *j);

static void CL_CALLBACK
run_job(void *args)
{
    const job *j = args;
    if (!j->half) {
        run_parts(j);
        return;
    }
    job h = *j;
    long n = 0;                                        /* the elements converted: both cores from 64K */
    for (int i = 0; i < 5; i++) n += present(&h, i) ? h.hi[i] - h.lo[i] : 0;
    const int parts = h.split && n >= (1 << 16) ? h.threads : 1;
    scratch_plan(&h);
    tl_cpu_native_parts(widen_part, &h, parts);
    run_parts(&h);
    tl_cpu_native_parts(narrow_part, &h, parts);
}

static void
run_parts(const job *j)
{
    size_t total = j->conv ? (size_t)j->g[G_N] : 1;   /* products: batch dims; a convolution: its images */
    for (int d = 0; d < j->nbd; d++) total *= (size_t)j->bshape[d];
    int parts = j->split ? j->threads : 1;
    if ((double)total * j->M * j->N * j->K < (1 << 21)) parts = 1;
    /* openblas_set_num_threads_local sets the library's one count and returns the old one (measured: numpy's
     * own calls ran on 1 thread after a product set 1), so the old count is put back after the product. */
    const int prev = lib.set_local != NULL ? lib.set_local(j->split ? 1 : j->threads) : 0;
    tl_cpu_native_parts(part_fn, j, parts);
    if (lib.set_local != NULL && prev > 0) lib.set_local(prev);
}

static int
load_one(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) return 0;
    lib.g32 = (sgemm32)dlsym(h, "cblas_sgemm");
    lib.v32 = (sgemv32)dlsym(h, "cblas_sgemv");
    if (lib.g32 == NULL || lib.v32 == NULL) {
        lib.g32 = NULL;
        lib.v32 = NULL;
        lib.g64 = (sgemm64)dlsym(h, "scipy_cblas_sgemm64_");
        lib.v64 = (sgemv64)dlsym(h, "scipy_cblas_sgemv64_");
        if (lib.g64 == NULL || lib.v64 == NULL) {
            lib.g64 = (sgemm64)dlsym(h, "cblas_sgemm64_");
            lib.v64 = (sgemv64)dlsym(h, "cblas_sgemv64_");
        }
        if (lib.g64 == NULL || lib.v64 == NULL) lib.g64 = NULL, lib.v64 = NULL;
    }
    if (lib.g32 == NULL && lib.g64 == NULL) { dlclose(h); return 0; }
    lib.handle = h;
    lib.set_local = (int (*)(int))dlsym(h, "openblas_set_num_threads_local");
    void (*set_global)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    if (lib.set_local == NULL && set_global != NULL && strstr(path, "scipy_openblas") == NULL)
        set_global(lib.split ? 1 : lib.threads);   /* a library of its own (not numpy's): its count is ours */
    snprintf(lib.path, sizeof lib.path, "%s", path);
    return 1;
}

/* First use: the device must be a CPU with unified memory that runs native kernels, and a path must load. */
static void
init_locked(void)
{
    int units = 1;
    lib.state = -1;
    if (!tl_cpu_native_device(&units, lib.reason, sizeof lib.reason)) return;
    const long t = tl_setting_int(TL_SET_BLAS_THREADS);   /* 0: unset */
    lib.threads = t > 0 ? (int)t : units;
    lib.split = tl_setting_flag(TL_SET_BLAS_SPLIT);
    for (int i = 0; i < lib.npaths; i++)
        if (load_one(lib.paths[i])) { lib.state = 1; return; }
    snprintf(lib.reason, sizeof lib.reason, lib.npaths ? "no path loaded a CBLAS sgemm" : "no BLAS path given");
}

/* Whether products take the BLAS path now; with it, the mode the next product runs in. */
static int
active(int *threads, int *split)
{
    pthread_mutex_lock(&lock);
    if (lib.state == 0) init_locked();
    int on = lib.state == 1 && lib.enabled;
    if (threads != NULL) *threads = lib.threads;
    if (split != NULL) *split = lib.split;
    pthread_mutex_unlock(&lock);
    return on;
}

/* BLAS layout of an operand [rows, cols] with strides (sr, sc): *trans and *ld, or 0 if none fits. A dim of
 * size 1 has no stride of its own, so it takes whichever value makes a layout fit. */
static int
layout(int rows, int cols, int sr, int sc, int *trans, int *ld)
{
    int r1 = rows == 1, c1 = cols == 1, need_n = cols > 1 ? cols : 1, need_t = rows > 1 ? rows : 1;
    int ldn = r1 ? need_n : sr, ldt = c1 ? need_t : sc;
    if ((c1 || sc == 1) && ldn >= need_n) { *trans = NO_TRANS; *ld = ldn; return 1; }
    if ((r1 || sr == 1) && ldt >= need_t) { *trans = TRANS; *ld = ldt; return 1; }
    return 0;
}

int
tl_cpu_blas_usable(void)
{
    return active(NULL, NULL);
}

/* Enqueues job j over storages st (C, A, B, residual or bias, sums or columns; NULL: absent), whose
 * written ones the mask names (by index in st), as one native command. 0, or -1 with an exception set. */
static int
submit(job *j, tl_storage *const *st, unsigned wmask, const char *what)
{
    tl_native_cell **const slot[6] = {&j->c, &j->a, &j->b, &j->r, &j->s, &j->x};
    return tl_cpu_native_submit(run_job, j, sizeof *j, slot, j->mem, st, 6, wmask, what);
}

/* The element range [lo, hi) of each operand the product reads or writes (C at off[0], contiguous; A and B
 * through their strides and batch strides; the residual a row of N or C's numel; the sums M), and the floats a
 * job with half operands needs for their copies. */
static Py_ssize_t
touched(job *j, const int *dims, tl_tensor *const *op)
{
    Py_ssize_t n = 0;
    for (int i = 0; i < 5; i++) {
        long lo = *offset_of(j, i), hi = lo + 1;
        if (i == 0) hi = lo + (long)tl_tensor_numel(op[0]);
        else if (i == 3) hi = lo + (j->res_mode == RES_FULL ? (long)tl_tensor_numel(op[0]) : j->N);
        else if (i == 4) hi = lo + j->M;
        else {
            const int r = i == 1 ? j->M : j->K, c = i == 1 ? j->K : j->N;
            hi += (long)(r - 1) * dims[i == 1 ? 3 : 5] + (long)(c - 1) * dims[i == 1 ? 4 : 6];
            for (int d = 0; d < j->nbd; d++) hi += (long)(j->bshape[d] - 1) * j->bst[i][d];
        }
        j->lo[i] = lo;
        j->hi[i] = hi;
        if (op[i] != NULL && j->dt[i] != TL_F32) n += hi - lo;
    }
    return n;
}

int
tl_cpu_blas_mm(const int *dims, int nbd, const int *bshape, const int (*bst)[TL_MAX_DIMS], const int *off,
               tl_tensor *out, tl_tensor *a, tl_tensor *b, tl_tensor *res, tl_tensor *sums, int relu)
{
    job j = {.relu = relu};
    j.M = dims[0];
    j.N = dims[1];
    j.K = dims[2];
    if (j.K == 0 || a->storage == NULL || b->storage == NULL || !active(&j.threads, &j.split)) return 0;
    if (!layout(j.M, j.K, dims[3], dims[4], &j.ta, &j.lda) || !layout(j.K, j.N, dims[5], dims[6], &j.tb, &j.ldb))
        return 0;
    j.nbd = nbd;
    memcpy(j.bshape, bshape, sizeof(int) * (size_t)nbd);
    for (int r = 0; r < 3; r++) memcpy(j.bst[r], bst[r], sizeof(int) * (size_t)nbd);
    memcpy(j.off, off, sizeof j.off);
    if (sums != NULL && nbd != 0) return 0;
    tl_tensor *const op[5] = {out, a, b, res, sums}, *scratch = NULL;
    for (int i = 0; i < 5; i++) {
        j.dt[i] = op[i] != NULL ? op[i]->dtype : TL_F32;
        if (!TL_IS_FLOAT(j.dt[i])) return 0;
        j.half |= j.dt[i] != TL_F32;
    }
    tl_storage *st[6] = {out->storage, a->storage, b->storage, res != NULL ? res->storage : NULL,
                         sums != NULL ? sums->storage : NULL, NULL};
    j.res_mode = res == NULL ? RES_NONE : tl_tensor_numel(res) == tl_tensor_numel(out) ? RES_FULL : RES_ROWS;
    j.roff = res != NULL ? (int)res->offset : 0;
    j.soff = sums != NULL ? (int)sums->offset : 0;
    if (j.half) {                                      /* the floats of the half operands, in one scratch */
        Py_ssize_t n = touched(&j, dims, op);
        if ((scratch = tl_tensor_empty(TL_F32, 1, &n)) == NULL) return -1;
        st[5] = scratch->storage;
    }
    const int rc = submit(&j, st, 1u | 1u << 4 | 1u << 5, j.half ? "cpu_blas_sgemm_half" : "cpu_blas_sgemm");
    Py_XDECREF(scratch);                               /* the queue is in order: a later user runs after */
    if (rc < 0) return -1;
    atomic_fetch_add(&n_launches, 1);
    return 1;
}

int
tl_cpu_blas_conv(const int *g, tl_tensor *x, tl_tensor *w, tl_tensor *bias, tl_tensor **out)
{
    job j = {.conv = 1, .ta = NO_TRANS, .tb = NO_TRANS};
    tl_tensor *y = NULL, *cols = NULL;
    enum { GN = 0, GOH = 4, GOW = 5 };
    if (x->storage == NULL || w->storage == NULL || !active(&j.threads, &j.split)) return 0;
    if (!tl_tensor_is_contig(w) || (bias != NULL && bias->ndim == 1 && bias->strides[0] != 1)) return 0;
    memcpy(j.g, g, sizeof j.g);
    j.M = (int)w->shape[0];
    j.K = (int)(w->shape[1] * w->shape[2] * w->shape[3]);
    j.N = g[GOH] * g[GOW];
    if (j.K == 0 || j.M == 0 || j.N == 0 || g[GN] == 0) return 0;
    j.lda = j.K;
    j.off[1] = (int)w->offset;
    j.roff = bias != NULL ? (int)bias->offset : 0;
    const int parts = j.split ? j.threads : 1;
    const Py_ssize_t n = (Py_ssize_t)parts * (Py_ssize_t)conv_cut(j.K, j.M, g[GOH], g[GOW], g[GN], parts, &j.group,
                                                               &j.bands);
    const Py_ssize_t shape[4] = {g[GN], j.M, g[GOH], g[GOW]};
    if ((y = tl_tensor_empty(TL_F32, 4, shape)) == NULL || (cols = tl_tensor_empty(TL_F32, 1, &n)) == NULL) goto fail;
    tl_storage *st[6] = {y->storage, w->storage, x->storage, bias != NULL ? bias->storage : NULL, cols->storage, NULL};
    if (submit(&j, st, 1u | 1u << 4, "cpu_blas_conv") < 0) goto fail;
    Py_DECREF(cols);                  /* the queue is in order: a later command that reuses it runs after */
    atomic_fetch_add(&n_convs, 1);
    *out = y;
    return 1;
fail:
    Py_XDECREF(y); Py_XDECREF(cols);
    return -1;
}

PyObject *
tl_cpu_blas_py(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *names[] = {"paths", "enable", "threads", "split", NULL};
    PyObject *paths = NULL, *fast = NULL;
    int enable = -1, threads = 0, split = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Opip:_cpu_blas", names, &paths, &enable, &threads, &split))
        return NULL;
    if (paths != NULL && paths != Py_None) {
        if ((fast = PySequence_Fast(paths, "_cpu_blas: paths must be a sequence of str")) == NULL) return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
        const char *s[MAX_PATHS];
        for (Py_ssize_t i = 0; i < n && i < MAX_PATHS; i++)
            if ((s[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i))) == NULL) { Py_DECREF(fast); return NULL; }
        pthread_mutex_lock(&lock);
        if (lib.state == 0) {         /* once loaded, a library stays (its pointers may be in flight) */
            for (int i = 0; i < lib.npaths; i++) free(lib.paths[i]);
            lib.npaths = 0;
            for (Py_ssize_t i = 0; i < n && i < MAX_PATHS; i++)
                if ((lib.paths[lib.npaths] = strdup(s[i])) != NULL) lib.npaths++;
        }
        pthread_mutex_unlock(&lock);
        Py_DECREF(fast);
    }
    if (paths == NULL) active(NULL, NULL);   /* a query: load now (initialises the runtime) */
    pthread_mutex_lock(&lock);
    if (enable >= 0) lib.enabled = enable;
    if (threads > 0) lib.threads = threads;       /* for measurements: the next products use these */
    if (split >= 0) lib.split = split;
    int state = lib.state, on = lib.enabled, ilp64 = lib.g64 != NULL;
    threads = lib.threads;
    PyObject *r = Py_BuildValue("{s:O,s:O,s:s,s:s,s:i,s:O,s:l,s:l,s:l,s:l,s:z}",
                                "loaded", state == 1 ? Py_True : Py_False, "enabled", on ? Py_True : Py_False,
                                "path", lib.path,
                                "interface", state != 1 ? "" : ilp64 ? "ilp64" : "lp64", "threads", threads,
                                "split", lib.split ? Py_True : Py_False, "spin_us", tl_cpu_native_spin_us(),
                                "launches", atomic_load(&n_launches), "convs", atomic_load(&n_convs),
                                "pointers", tl_cpu_native_pointers(), "reason", state == -1 ? lib.reason : NULL);
    pthread_mutex_unlock(&lock);
    return r;
}
