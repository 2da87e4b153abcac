/* cpu_quant.c: the q4_0 / q8_0 matrix-vector product on CPU devices as one native command (cpu_quant.h,
 * docs/cpu.md). PoCL's row kernel (kernels/quant.cl tl_mul_mv_*_rows_f32) read the weights at ~4.7 GB/s:
 * q4_0 decoded no faster than float32 through the BLAS, though it reads 7x fewer bytes.
 * The command, on a PoCL worker in queue order: the prologue (glu, rms_norm) and the quantization of the
 * R <= 8 activation rows into a scratch buffer (int8 blocks of 32, dx = amax / 127, q = round-to-even of
 * v * (1 / dx) clamped to +-127, as kernels/quant_mvq.h stages x, so the tests' emulation of the GPU path
 * holds here), once; then the weight rows in chunks of CHUNK taken from an atomic counter by the parts
 * (cpu_native.h's threads), each row's blocks read once for all R activation rows.
 * The dot of a block: AVX-512 VNNI (vpdpbusd on 256 bits), AVX2 (vpmaddubsw + vpmaddwd: llama.cpp's
 * ggml_vec_dot_q4_0_q8_0), or portable C; per-function target attributes with a run-time choice, so the
 * module runs on any x86-64 and builds elsewhere. q4_0's nibbles go in unsigned (0..15) and the offset 8
 * comes in as the integer sums' starting value (-8 sum q, per group of 4, made with x's quantization), so
 * the block sums are exact; q8_0 takes llama.cpp's sign trick (|w| unsigned, q with w's sign). Several
 * weight rows at a time for few activation rows: independent accumulators, x's loads shared.
 * Invariants: the callback touches no Python object; one job runs at a time (the compute queue is in order),
 * so all share one scratch (scratch_for); the job's counter lives in the runtime's copy of the job, which
 * every part reads. */
#include "cpu_quant.h"
#include "cpu_native.h"
#include "cpu_half.h"
#include "state.h"
#include "settings.h"
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TL_QUANT_PORTABLE)   /* TL_QUANT_PORTABLE: check the other build */
#include <immintrin.h>
#define TL_QX86 1
#else
#define TL_QX86 0
#endif

enum { ISA_SCALAR, ISA_AVX2, ISA_VNNI, NISA };
static const char *const isa_names[NISA] = {"scalar", "avx2", "vnni"};
enum { CHUNK = 16, MIN_SPLIT = 1 << 18 };   /* rows a part takes at once; weights below which one part runs */

typedef struct {
    tl_native_cell *y, *x, *qs, *d, *r, *nw;   /* r, nw only when given */
    uint8_t *s;                       /* the scratch (host memory of this module, see scratch_for) */
    cl_mem mem[TL_NATIVE_MAX];        /* the runtime's copies: never read (cpu_native.h) */
    int q8, N, K, R, sx, ox, orr, onw, glu, parts, isa;
    float eps;
    atomic_int next;                  /* the next weight row a part takes */
} qjob;

#define FP(c) ((float *)(c)->p)

/* The scratch: qx (R, K) int8, then dx (R, K / 32) floats, then off (R, K / 32) vectors of 8 int32 (lane l:
 * -8 times the sum of q[4l .. 4l + 3], q4_0's offset in the integer sums), then a row of K floats for the
 * prologue. */
static size_t
qx_bytes(int R, int K)
{
    return ((size_t)R * (size_t)K + 63) / 64 * 64;
}

static size_t
off_at(int R, int K)
{
    return qx_bytes(R, K) + ((size_t)R * (size_t)(K / 32) * sizeof(float) + 63) / 64 * 64;
}

static size_t
scratch_bytes(int R, int K, int prologue)
{
    return off_at(R, K) + (size_t)R * (size_t)(K / 32) * 32 + (prologue ? sizeof(float) * (size_t)K : 0);
}

static float
round_even(float v)                   /* |v| < 2^22: round to nearest, ties to even (the FPU's mode) */
{
    const float big = 12582912.0f;    /* 1.5 * 2^23 */
    return v >= 0.0f ? (v + big) - big : -((-v + big) - big);
}

/* The prologue and the quantization of the R rows into scratch s (run once, before the parts). */
static void
quantize_x(const qjob *j, uint8_t *s)
{
    const int K = j->K, nb = K / 32, R = j->R;
    int8_t *qx = (int8_t *)s;
    float *dx = (float *)(s + qx_bytes(R, K)), *row = (float *)(s + off_at(R, K) + (size_t)R * nb * 32);
    int32_t *off = (int32_t *)(s + off_at(R, K));
    const float *x = FP(j->x) + j->ox, *nw = j->nw != NULL ? FP(j->nw) + j->onw : NULL;
    for (int r = 0; r < R; r++) {
        const float *xr = x + (ptrdiff_t)r * j->sx, *v = xr;
        if (j->glu || nw != NULL) {
            for (int k = 0; k < K; k++)
                row[k] = j->glu ? xr[k] / (1.0f + expf(-xr[k])) * xr[K + k] : xr[k];
            if (nw != NULL) {
                float ss = 0.0f;
                for (int k = 0; k < K; k++) ss += row[k] * row[k];
                const float sc = 1.0f / sqrtf(ss / (float)K + j->eps);
                for (int k = 0; k < K; k++) row[k] *= sc * nw[k];
            }
            v = row;
        }
        for (int b = 0; b < nb; b++) {
            const float *vb = v + b * 32;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) amax = fabsf(vb[i]) > amax ? fabsf(vb[i]) : amax;
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            int32_t *o = off + ((size_t)r * nb + b) * 8;
            for (int i = 0; i < 32; i++) {
                float q = round_even(vb[i] * id);
                q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
                qx[(size_t)r * K + b * 32 + i] = (int8_t)q;
                o[i / 4] = (i % 4 ? o[i / 4] : 0) - 8 * (int)q;
            }
            dx[r * nb + b] = d;
        }
    }
}

/* Stores row n of y for the R activation rows: t[r] (+ the residual). */
static void
store(const qjob *j, int n, const float *t)
{
    float *y = FP(j->y);
    const float *res = j->r != NULL ? FP(j->r) + j->orr : NULL;
    for (int r = 0; r < j->R; r++)
        y[(size_t)r * j->N + n] = res != NULL ? t[r] + res[(size_t)r * j->N + n] : t[r];
}

/* Portable C: the GPU kernel's arithmetic, acc += dw * dx * sumi per block. */
static void
rows_scalar(const qjob *j, const uint8_t *s, int n0, int n1)
{
    const int K = j->K, nb = K / 32, R = j->R, bw = j->q8 ? 32 : 16;
    const int8_t *qx = (const int8_t *)s;
    const float *dx = (const float *)(s + qx_bytes(R, K));
    const uint8_t *qs = j->qs->p;
    const uint16_t *dh = j->d->p;
    for (int n = n0; n < n1; n++) {
        float acc[8] = {0};
        for (int b = 0; b < nb; b++) {
            const size_t blk = (size_t)n * nb + b;
            const float dw = tl_half_to_float(dh[blk]);
            const uint8_t *w = qs + blk * bw;
            for (int r = 0; r < R; r++) {
                const int8_t *q = qx + (size_t)r * K + b * 32;
                int sumi = 0;
                if (j->q8)
                    for (int i = 0; i < 32; i++) sumi += (int8_t)w[i] * q[i];
                else
                    for (int i = 0; i < 16; i++) sumi += ((w[i] & 15) - 8) * q[i] + ((w[i] >> 4) - 8) * q[i + 16];
                acc[r] += dw * dx[r * nb + b] * (float)sumi;
            }
        }
        store(j, n, acc);
    }
}

#if TL_QX86
#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

T_AVX2 static inline float
hsum8(__m256 a)
{
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* Rows n0..n1 for R activation rows, NR weight rows at a time (R and NR constants where this is inlined:
 * the NR * R <= 8 accumulators stay in registers and are independent chains). The weight scales of 8 blocks
 * are converted at once (vcvtph2ps) into dwl. DOT(init, u, s): init + the 8 int32 sums of 4 products of
 * unsigned bytes u by signed bytes s; q4_0's init is off, -8 times the sums of x's groups of 4 (exact). */
#define ROWS_SIMD(NAME, TARGET, DOT)                                                                          \
TARGET static inline __attribute__((always_inline)) void                                                  \
NAME##_r(const qjob *j, const uint8_t *s, int n0, int n1, const int R, const int NR)                      \
{                                                                                                         \
    const int K = j->K, nb = K / 32, q8 = j->q8, bw = q8 ? 32 : 16;                                       \
    const int8_t *qx = (const int8_t *)s;                                                                 \
    const float *dx = (const float *)(s + qx_bytes(R, K));                                                \
    const __m256i *off = (const __m256i *)(const void *)(s + off_at(R, K));                               \
    const uint8_t *qs = j->qs->p;                                                                         \
    const uint16_t *dh = j->d->p;                                                                         \
    float *y = FP(j->y);                                                                                  \
    const float *res = j->r != NULL ? FP(j->r) + j->orr : NULL;                                           \
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1), zero = _mm256_setzero_si256(); \
    (void)ones;                                                                                           \
    for (int n = n0; n < n1; n += NR) {                                                                   \
        const uint8_t *wq[4];                                                                             \
        const uint16_t *wd[4];                                                                            \
        __m256 acc[4][8];                                                                                 \
        float dwl[4][8] __attribute__((aligned(32)));                                                     \
        for (int i = 0; i < NR; i++) {                                                                    \
            const size_t row = (size_t)(n + i < n1 ? n + i : n1 - 1);   /* an edge repeats the last row */ \
            wq[i] = qs + row * nb * bw;                                                                   \
            wd[i] = dh + row * nb;                                                                        \
            for (int r = 0; r < R; r++) acc[i][r] = _mm256_setzero_ps();                                  \
        }                                                                                                 \
        for (int b0 = 0; b0 < nb; b0 += 8) {                                                              \
            const int bn = nb - b0 < 8 ? nb - b0 : 8;                                                     \
            for (int i = 0; i < NR; i++)                                                                  \
                if (bn == 8)                                                                              \
                    _mm256_store_ps(dwl[i], _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(wd[i] + b0)))); \
                else                                                                                      \
                    for (int e = 0; e < bn; e++) dwl[i][e] = _cvtsh_ss(wd[i][b0 + e]);                    \
            for (int e = 0; e < bn; e++) {                                                                \
                const int b = b0 + e;                                                                     \
                _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) {                                   \
                    __m256i w, aw;                                                                        \
                    if (!q8) {                                                                            \
                        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(wq[i] + b * 16)); \
                        w = aw = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(h, 4), h), m4);         \
                    } else {                                                                              \
                        w = _mm256_loadu_si256((const __m256i *)(const void *)(wq[i] + b * 32));          \
                        aw = _mm256_abs_epi8(w);                                                          \
                    }                                                                                     \
                    const __m256 dw = _mm256_broadcast_ss(&dwl[i][e]);                                    \
                    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                \
                        const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qx + (size_t)r * K + b * 32)); \
                        const __m256i sum = q8 ? DOT(zero, aw, _mm256_sign_epi8(q, w)) :                  \
                                                 DOT(_mm256_loadu_si256(off + (size_t)r * nb + b), w, q);  \
                        const __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx + (size_t)r * nb + b)); \
                        acc[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), sc, acc[i][r]);              \
                    }                                                                                     \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
        for (int i = 0; i < NR && n + i < n1; i++)                                                        \
            for (int r = 0; r < R; r++) {                                                                 \
                const size_t at = (size_t)r * j->N + (size_t)(n + i);                                     \
                const float t = hsum8(acc[i][r]);                                                         \
                y[at] = res != NULL ? t + res[at] : t;                                                    \
            }                                                                                             \
    }                                                                                                     \
}                                                                                                         \
TARGET static void                                                                                        \
NAME(const qjob *j, const uint8_t *s, int n0, int n1)                                                     \
{                                                                                                         \
    switch (j->R) {                                                                                       \
    case 1: NAME##_r(j, s, n0, n1, 1, 4); break;                                                          \
    case 2: NAME##_r(j, s, n0, n1, 2, 4); break;                                                          \
    case 3: NAME##_r(j, s, n0, n1, 3, 2); break;                                                          \
    case 4: NAME##_r(j, s, n0, n1, 4, 2); break;                                                          \
    case 5: NAME##_r(j, s, n0, n1, 5, 1); break;                                                          \
    case 6: NAME##_r(j, s, n0, n1, 6, 1); break;                                                          \
    case 7: NAME##_r(j, s, n0, n1, 7, 1); break;                                                          \
    default: NAME##_r(j, s, n0, n1, 8, 1); break;                                                         \
    }                                                                                                     \
}

#define DOT_AVX2(i, u, v) _mm256_add_epi32((i), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (v)), ones))   /* pairs <= 2 * 255 * 127 */
#define DOT_VNNI(i, u, v) _mm256_dpbusd_epi32((i), (u), (v))
ROWS_SIMD(rows_avx2, T_AVX2, DOT_AVX2)
ROWS_SIMD(rows_vnni, T_VNNI, DOT_VNNI)

/* The same on 512 bits, two blocks a step (K / 32 even): one vpdpbusd, convert and multiply-add for two blocks
 * and an activation row; the scales dw * dx of 8 blocks made at once (sc8), a step's pair spread over the two
 * halves by vpermps. q8_0's sign trick by a masked subtract (AVX-512 has no vpsignb). */
T_VNNI static inline __attribute__((always_inline)) void
rows_z_r(const qjob *j, const uint8_t *s, int n0, int n1, const int R, const int NR)
{
    const int K = j->K, nb = K / 32, q8 = j->q8, bw = q8 ? 32 : 16;
    const int8_t *qx = (const int8_t *)s;
    const float *dx = (const float *)(s + qx_bytes(R, K));
    const int32_t *off = (const int32_t *)(s + off_at(R, K));
    const uint8_t *qs = j->qs->p;
    const uint16_t *dh = j->d->p;
    float *y = FP(j->y);
    const float *res = j->r != NULL ? FP(j->r) + j->orr : NULL;
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i upper = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int n = n0; n < n1; n += NR) {
        const uint8_t *wq[4];
        const uint16_t *wd[4];
        __m512 acc[4][8];
        for (int i = 0; i < NR; i++) {
            const size_t row = (size_t)(n + i < n1 ? n + i : n1 - 1);   /* an edge repeats the last row */
            wq[i] = qs + row * nb * bw;
            wd[i] = dh + row * nb;
            for (int r = 0; r < R; r++) acc[i][r] = _mm512_setzero_ps();
        }
        for (int b0 = 0; b0 < nb; b0 += 8) {
            const int bn = nb - b0 < 8 ? nb - b0 : 8;
            const __mmask8 km = (__mmask8)((1u << bn) - 1u);
            __m256 sc8[4][8];
            _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) {
                const __m256 dw8 = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(km, wd[i] + b0));
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
                    sc8[i][r] = _mm256_mul_ps(dw8, _mm256_maskz_loadu_ps(km, dx + (size_t)r * nb + b0));
            }
            for (int e = 0; e < bn; e += 2) {
                const int b = b0 + e;
                const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(e), upper);   /* lanes 0-7: e, 8-15: e + 1 */
                _Pragma("GCC unroll 4") for (int i = 0; i < NR; i++) {
                    __m512i w, aw;
                    __mmask64 neg = 0;
                    if (!q8) {                /* [lo b, hi b, lo b+1, hi b+1] in 128-bit lanes */
                        const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(wq[i] + b * 16));
                        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 4), 1);
                        z = _mm512_and_si512(z, m4);
                        w = aw = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
                    } else {
                        w = _mm512_loadu_si512((const void *)(wq[i] + b * 32));
                        aw = _mm512_abs_epi8(w);
                        neg = _mm512_movepi8_mask(w);
                    }
                    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
                        const __m512i q = _mm512_loadu_si512((const void *)(qx + (size_t)r * K + b * 32));
                        const __m512i sum = q8 ? _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8(q, neg, zero, q)) :
                            _mm512_dpbusd_epi32(_mm512_loadu_si512((const void *)(off + ((size_t)r * nb + b) * 8)), w, q);
                        const __m512 sc = _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(sc8[i][r]));
                        acc[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, acc[i][r]);
                    }
                }
            }
        }
        for (int i = 0; i < NR && n + i < n1; i++)
            for (int r = 0; r < R; r++) {
                const size_t at = (size_t)r * j->N + (size_t)(n + i);
                const float t = _mm512_reduce_add_ps(acc[i][r]);
                y[at] = res != NULL ? t + res[at] : t;
            }
    }
}

T_VNNI static void
rows_vnni_any(const qjob *j, const uint8_t *s, int n0, int n1)
{
    if ((j->K / 32) % 2 != 0) {
        rows_vnni(j, s, n0, n1);
        return;
    }
    switch (j->R) {
    case 1: rows_z_r(j, s, n0, n1, 1, 4); break;
    case 2: rows_z_r(j, s, n0, n1, 2, 4); break;
    case 3: rows_z_r(j, s, n0, n1, 3, 2); break;
    case 4: rows_z_r(j, s, n0, n1, 4, 2); break;
    case 5: rows_z_r(j, s, n0, n1, 5, 1); break;
    case 6: rows_z_r(j, s, n0, n1, 6, 1); break;
    case 7: rows_z_r(j, s, n0, n1, 7, 1); break;
    default: rows_z_r(j, s, n0, n1, 8, 1); break;
    }
}
#endif

typedef void (*rows_fn)(const qjob *, const uint8_t *, int, int);
#if TL_QX86
static const rows_fn kernels[NISA] = {rows_scalar, rows_avx2, rows_vnni_any};
#else
static const rows_fn kernels[NISA] = {rows_scalar, rows_scalar, rows_scalar};
#endif

/* The best dot product this CPU runs (the OS's state saving included: libgcc checks XCR0). */
static int
detect_isa(void)
{
#if TL_QX86
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"))
        return ISA_VNNI;
    return avx2 ? ISA_AVX2 : ISA_SCALAR;
#else
    return ISA_SCALAR;
#endif
}

static void
part_rows(const void *jv, int part, int parts)
{
    qjob *j = (qjob *)(uintptr_t)jv;  /* the runtime's copy of the job, shared by the parts */
    const rows_fn f = kernels[j->isa];
    const uint8_t *s = j->s;
    (void)part;
    (void)parts;
    for (;;) {
        const int n0 = atomic_fetch_add(&j->next, CHUNK);
        if (n0 >= j->N) break;
        f(j, s, n0, n0 + CHUNK < j->N ? n0 + CHUNK : j->N);
    }
}

static void CL_CALLBACK
run_qjob(void *args)
{
    qjob *j = args;
    quantize_x(j, j->s);
    atomic_store(&j->next, 0);
    tl_cpu_native_parts(part_rows, j, j->parts);
}

/* ---- state and submit (Python thread) ---- */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int state;                        /* 0 not tested, 1 a CPU device that runs native kernels, -1 not */
    int enabled, threads, isa, isa_max;
    char reason[128];
} q = {.enabled = 1};
static atomic_long n_launches;

/* The scratch of a job of `bytes`: one host buffer for all jobs, as they run one at a time (the compute queue
 * is in order). A larger one replaces it for the jobs submitted after; the old one is kept, never freed: jobs
 * in flight and traces (tlgpu.jit replays the recorded job, pointer included) still use it. Grows by
 * doubling, so what is kept is at most the current size. Host memory, not a device buffer: no pointer to
 * learn, no buffer for the stream's events or tlgpu.jit's slot rules. NULL: no memory. */
static uint8_t *
scratch_for(size_t bytes)
{
    static uint8_t *buf;              /* under lock */
    static size_t cap;
    pthread_mutex_lock(&lock);
    if (bytes > cap) {
        size_t want = cap ? cap : 4096;
        while (want < bytes) want *= 2;
        uint8_t *p = aligned_alloc(64, want);
        if (p != NULL) buf = p, cap = want;    /* the old one stays allocated (see above) */
    }
    uint8_t *r = bytes <= cap ? buf : NULL;
    pthread_mutex_unlock(&lock);
    return r;
}

static int
active(int *threads, int *isa)
{
    pthread_mutex_lock(&lock);
    if (q.state == 0) {
        int units = 1;
        q.state = tl_cpu_native_device(&units, q.reason, sizeof q.reason) ? 1 : -1;
        const long t = tl_setting_int(TL_SET_BLAS_THREADS);   /* the BLAS path's parts: the same threads */
        q.threads = t > 0 ? (int)t : units;
        q.isa = q.isa_max = detect_isa();
    }
    const int on = q.state == 1 && q.enabled;
    if (threads != NULL) *threads = q.threads;
    if (isa != NULL) *isa = q.isa;
    pthread_mutex_unlock(&lock);
    return on;
}

int
tl_cpu_quant_mv(int q8, int N, int K, int R, tl_tensor *x, int sx, tl_tensor *qs, tl_tensor *d, tl_tensor *y,
                tl_tensor *res, tl_tensor *nw, float eps, int glu)
{
    qjob j = {.q8 = q8, .N = N, .K = K, .R = R, .sx = sx, .glu = glu, .eps = eps};
    if (R < 1 || R > 8 || N < 1 || K < 32 || K % 32 != 0 || x->storage == NULL || !active(&j.parts, &j.isa))
        return 0;
    if ((double)N * K < MIN_SPLIT) j.parts = 1;
    j.ox = (int)x->offset;
    j.orr = res != NULL ? (int)res->offset : 0;
    j.onw = nw != NULL ? (int)nw->offset : 0;
    if ((j.s = scratch_for(scratch_bytes(R, K, glu || nw != NULL))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    tl_storage *st[6] = {y->storage, x->storage, qs->storage, d->storage, res != NULL ? res->storage : NULL,
                         nw != NULL ? nw->storage : NULL};
    tl_native_cell **const slot[6] = {&j.y, &j.x, &j.qs, &j.d, &j.r, &j.nw};
    const int rc = tl_cpu_native_submit(run_qjob, &j, sizeof j, slot, j.mem, st, 6, 1u,
                                        q8 ? "cpu_quant_q8_0" : "cpu_quant_q4_0");
    if (rc < 0) return -1;
    atomic_fetch_add(&n_launches, 1);
    return 1;
}

PyObject *
tl_cpu_quant_py(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *names[] = {"enable", "threads", "isa", NULL};
    PyObject *en = Py_None;
    int threads = 0, want = -1;
    const char *isa = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Oiz:_cpu_quant", names, &en, &threads, &isa)) return NULL;
    int enable = -1;
    if (en != Py_None && (enable = PyObject_IsTrue(en)) < 0) return NULL;
    active(NULL, NULL);               /* tests the device now (initialises the runtime) */
    for (int i = 0; isa != NULL && i < NISA; i++)
        if (strcmp(isa, isa_names[i]) == 0) want = i;
    if (isa != NULL && want < 0)
        return PyErr_Format(PyExc_ValueError, "_cpu_quant: isa must be vnni, avx2 or scalar, got %s", isa);
    pthread_mutex_lock(&lock);
    if (want > q.isa_max) {
        pthread_mutex_unlock(&lock);
        return PyErr_Format(PyExc_ValueError, "_cpu_quant: this CPU runs %s at most, not %s", isa_names[q.isa_max],
                            isa);
    }
    if (want >= 0) q.isa = want;
    if (enable >= 0) q.enabled = enable;
    if (threads > 0) q.threads = threads;
    PyObject *r = Py_BuildValue("{s:O,s:O,s:s,s:s,s:i,s:l,s:z}", "active", q.state == 1 && q.enabled ? Py_True : Py_False,
                                "enabled", q.enabled ? Py_True : Py_False, "isa", isa_names[q.isa], "isa_max",
                                isa_names[q.isa_max], "threads", q.threads, "launches", atomic_load(&n_launches),
                                "reason", q.state == -1 ? q.reason : NULL);
    pthread_mutex_unlock(&lock);
    return r;
}
