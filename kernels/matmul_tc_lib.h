/* matmul_tc_lib.h: what every tensor-core TF32 GEMM family shares (matmul_tc.cl, mma.sync; matmul_wg.cl,
 * wgmma): knobs, TF32 conversion, mma.sync and its emulation,
 * cp.async copies and waits, the tile order, the kernels' arguments (matmul.cl's, store epilogue included:
 * mm_epi.h). matmul_tc.cl's banner describes them. */
#include "mm_epi.h"

#ifndef TC_HALF
#define TC_HALF 0                   /* matmul_tc.cl's 16-bit builds: 1 bfloat16, 2 float16 (see tc_mma) */
#endif
#if TC_HALF                         /* C in the operands' dtype, rounded to nearest even as it is stored */
#include "dtype.h"
#define TC_CT ushort
static inline void
tc_st1(global ushort *p, float v)
{
    if (TC_HALF == 2) vstore_half_rte(v, 0, (global half *)p);
    else *p = tl_bf16_bits(v);
}
#else
#define TC_CT float
#endif

#ifndef TC_ASM
#define TC_ASM asm                  /* NVIDIA's keyword; clang (a local PTX check) takes __asm__ */
#endif
#ifndef TC_EMULATE
#define TC_EMULATE 0
#endif
#if TC_EMULATE                      /* tests only: no PTX, so PoCL runs the same tiling (see tc_mma_emu) */
#undef TC_ASYNC
#define TC_ASYNC 0
#endif
#ifndef TC_RNA
#define TC_RNA 1
#endif
#ifndef TC_ASYNC
#define TC_ASYNC 1
#endif
#ifndef TC_LDSM
#define TC_LDSM 0                   /* 1: fragments of operands read along k with ldmatrix.x4 */
#endif
#if TC_EMULATE
#undef TC_LDSM
#define TC_LDSM 0
#endif
#ifndef TC_GROUP
#define TC_GROUP 8
#endif

#define MM_ARGS int M, int N, int K, int nb2,                                                       \
    global const float *A, int offA, int sAb1, int sAb2, int sAm, int sAk,                          \
    global const float *B, int offB, int sBb1, int sBb2, int sBk, int sBn,                          \
    global TC_CT *C, int offC, MM_EPI_ARGS
#define MM_BATCH()                                                                                  \
    const int b = get_global_id(2), b1 = b / nb2, b2 = b - b1 * nb2;                                \
    A += offA + b1 * sAb1 + b2 * sAb2;                                                              \
    B += offB + b1 * sBb1 + b2 * sBb2;                                                              \
    C += offC + b * M * N;                                                                          \
    MM_EPI_BATCH(b)

static inline uint
tc_tf32(float x)
{
#if TC_HALF
    return as_uint(x);                             /* a word of two packed 16-bit values, as it is */
#elif TC_EMULATE && TC_RNA
    return (as_uint(x) + 0x1000u) & 0xffffe000u;    /* cvt.rna for finite x: round half away, 10 bits */
#elif TC_EMULATE
    return as_uint(x) & 0xffffe000u;               /* what the tensor cores read of an unrounded float */
#elif TC_RNA
    uint r;
    TC_ASM("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
#else
    return as_uint(x);
#endif
}

#if TC_EMULATE
#if TC_HALF
/* The 16-bit value of word w at half hi (0: the low 16 bits, the lower k), as a float. */
static inline float
tc_h16f(uint w, int hi)
{
    const uint b = hi ? w >> 16 : w & 0xffffu;
    if (TC_HALF == 1) return as_float(b << 16);
    const ushort h = (ushort)b;
    return vload_half(0, (const private half *)&h);
}
#endif
/* The warp's mi x ni mma.sync results of one k8 step (acc[mi][ni][4], a[mi][4], b[ni][2] as the kernel
 * holds them) from the 32 lanes' fragments, exchanged through local memory x (32 * (4 mi + 2 ni) words a
 * warp): lane (g, t) holds A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4] and B[t][g], B[t+4][g] of each
 * block. Every work-item calls it the same number of times, so the barriers are uniform; two a step, not
 * two an MMA, since PoCL compiles long unrolled runs of barriers slowly. */
static inline void
tc_mma_step_emu(float *acc, const uint *a, const uint *b, const int mi, const int ni, local uint *x, int lane)
{
    const int w = 4 * mi + 2 * ni;
    for (int q = 0; q < 4 * mi; q++) x[lane * w + q] = a[q];
    for (int q = 0; q < 2 * ni; q++) x[lane * w + 4 * mi + q] = b[q];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < mi; i++) {
        for (int j = 0; j < ni; j++) {
            for (int o = 0; o < 4; o++) {
                const int r = g + 8 * (o >> 1), n = 2 * t + (o & 1);
                float s = acc[(i * ni + j) * 4 + o];
#if TC_HALF                                          /* m16n8k16: word k of the fragments holds k-pair k */
                for (int k = 0; k < 16; k++) {
                    const int kw = k / 2;
                    s += tc_h16f(x[((r % 8) * 4 + kw % 4) * w + 4 * i + (r >= 8) + 2 * (kw >= 4)], k & 1) *
                         tc_h16f(x[(n * 4 + kw % 4) * w + 4 * mi + 2 * j + (kw >= 4)], k & 1);
                }
#else
                for (int k = 0; k < 8; k++)
                    s += as_float(x[((r % 8) * 4 + k % 4) * w + 4 * i + (r >= 8) + 2 * (k >= 4)] & 0xffffe000u) *
                         as_float(x[(n * 4 + k % 4) * w + 4 * mi + 2 * j + (k >= 4)] & 0xffffe000u);
#endif
                acc[(i * ni + j) * 4 + o] = s;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

static inline void
tc_mma(float *d, const uint *a, const uint *b)
{
#if !TC_EMULATE
    float d0, d1, d2, d3;
#if TC_HALF == 1                    /* m16n8k16: the k8 fragments' words hold pairs along k (a0 the lower) */
    TC_ASM("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
#elif TC_HALF == 2
    TC_ASM("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
#else
    TC_ASM("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
#endif
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(d[0]), "f"(d[1]), "f"(d[2]),
          "f"(d[3]));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
#endif
}

/* The shared-window offset of a local pointer, which cp.async and ldmatrix take: NVIDIA's compiler keeps
 * local pointers as .shared addresses (mov.u64 of the array's symbol), so the integer value is that offset. */
static inline uint
tc_saddr(local const float *p)
{
    return (uint)(uintptr_t)p;
}

#if TC_LDSM
/* ldmatrix.x4 of 32-bit elements: lane l names row l%8 of 8x4 matrix l/8; register q gets matrix q's
 * element (lane/4, lane%4), which is an m16n8k8 fragment when the rows are chosen as the body does. */
static inline void
tc_ldsm4(uint *r, local const float *p)
{
    TC_ASM volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_saddr(p)) : "memory");
#if TC_RNA
    for (int q = 0; q < 4; q++) r[q] = tc_tf32(as_float(r[q]));
#endif
}
#endif

/* Copies n_valid (0-4) floats from src to dst and zeros the rest of the 4; vec: both 16-byte aligned.
 */
static inline void
tc_copy4(local float *dst, global const float *src, int nv, int vec)
{
#if TC_ASYNC
    const uint d = tc_saddr(dst);
    if (vec) {
        TC_ASM volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"((ulong)(uintptr_t)src),
                     "r"(nv * 4) : "memory");
    } else {
        for (int j = 0; j < 4; j++)
            TC_ASM volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d + 4 * j),
                         "l"((ulong)(uintptr_t)(src + (j < nv ? j : 0))), "r"(j < nv ? 4 : 0) : "memory");
    }
#else
    if (vec && nv == 4) {
        vstore4(vload4(0, src), 0, dst);
    } else {
        for (int j = 0; j < 4; j++) dst[j] = j < nv ? src[j] : 0.0f;
    }
#endif
}

static inline void
tc_commit(void)
{
#if TC_ASYNC
    TC_ASM volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* Waits until at most n (a compile-time 0-6) of this thread's commit groups are still in flight. */
static inline void
tc_wait(const int n)
{
#if TC_ASYNC
    if (n <= 0) TC_ASM volatile("cp.async.wait_group 0;" ::: "memory");
    else if (n == 1) TC_ASM volatile("cp.async.wait_group 1;" ::: "memory");
    else if (n == 2) TC_ASM volatile("cp.async.wait_group 2;" ::: "memory");
    else if (n == 3) TC_ASM volatile("cp.async.wait_group 3;" ::: "memory");
    else if (n == 4) TC_ASM volatile("cp.async.wait_group 4;" ::: "memory");
    else if (n == 5) TC_ASM volatile("cp.async.wait_group 5;" ::: "memory");
    else TC_ASM volatile("cp.async.wait_group 6;" ::: "memory");
#endif
}

static inline void
tc_wait_all(void)
{
#if TC_ASYNC
    TC_ASM volatile("cp.async.wait_all;" ::: "memory");
#endif
}

/* Work-group pid's tile (pm, pn) of a tm x tn grid: TC_GROUP tile rows at a time, down each column. */
static inline void
tc_tile_order(int pid, int tm, int tn, int *pm, int *pn)
{
    const int per = TC_GROUP * tn, first = (pid / per) * TC_GROUP, rows = min(tm - first, TC_GROUP);
    const int in = pid % per;
    *pm = first + in % rows;
    *pn = in / rows;
}
