/* matmul_tc.cl: float32 GEMM on NVIDIA tensor cores in TF32 (tlgpu.set_matmul_precision("high")), C[b] =
 * A[b] @ B[b] with the operands and arguments of matmul.cl's tl_gemm_f32 (strided, batched). Inline PTX:
 * NVIDIA's OpenCL compiler accepts asm (PoCL does not), so csrc/gemm_tc.c builds this family only on an
 * NVIDIA platform whose device reports compute capability 8.0 or more; nothing else ever compiles it.
 *  - mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: lane (g = lane/4, t = lane%4) holds A[g][t],
 *    A[g+8][t], A[g][t+4], A[g+8][t+4]; B[t][g], B[t+4][g]; C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
 *    Operands are rounded to TF32 (cvt.rna: to nearest, ties away) as they leave local memory (TC_RNA=0:
 *    the tensor cores' own truncation).
 *  - Tiles go from global to local memory with cp.async (16-byte copies, zero-filled past the matrices'
 *    edges through src-size), TC_STAGES deep, one barrier per k-step; TC_ASYNC=0 uses plain loads and
 *    stores instead.
 *  - Work-groups walk the tiles in groups of TC_GROUP tile rows (column by column inside a group), so
 *    the A rows and B columns in flight at once stay in L2.
 * The configurations below (tile, warps, stages) come from H100 sweeps (bench_gemm.py --tc-sweep,
 * benchmarks/NOTES.md); TC_SWEEP adds the others measured there. csrc/gemm_tc.c holds the same table.
 * Knobs for such sweeps (build options, e.g. through TLGPU_BUILD_OPTIONS): TC_RNA, TC_ASYNC, TC_LDSM,
 * TC_GROUP. */

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
    global float *C, int offC
#define MM_BATCH()                                                                                  \
    const int b = get_global_id(2), b1 = b / nb2, b2 = b - b1 * nb2;                                \
    A += offA + b1 * sAb1 + b2 * sAb2;                                                              \
    B += offB + b1 * sBb1 + b2 * sBb2;                                                              \
    C += offC + b * M * N

static inline uint
tc_tf32(float x)
{
#if TC_EMULATE && TC_RNA
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
/* mma.sync's result from the 32 lanes' fragments, exchanged through local memory x (192 words per warp):
 * every work-item calls it the same number of times, so the barriers are uniform. */
static inline void
tc_mma_emu(float *d, const uint *a, const uint *b, local uint *x, int lane)
{
    for (int i = 0; i < 4; i++) x[lane * 4 + i] = a[i];
    x[128 + lane * 2] = b[0];
    x[128 + lane * 2 + 1] = b[1];
    barrier(CLK_LOCAL_MEM_FENCE);
    const int g = lane >> 2, t = lane & 3;
    for (int o = 0; o < 4; o++) {
        const int r = g + 8 * (o >> 1), n = 2 * t + (o & 1);
        float s = d[o];
        for (int k = 0; k < 8; k++)
            s += as_float(x[((r % 8) * 4 + k % 4) * 4 + (r >= 8) + 2 * (k >= 4)] & 0xffffe000u) *
                 as_float(x[128 + (n * 4 + k % 4) * 2 + (k >= 4)] & 0xffffe000u);
        d[o] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

static inline void
tc_mma(float *d, const uint *a, const uint *b)
{
#if !TC_EMULATE
    float d0, d1, d2, d3;
    TC_ASM("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
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

/* Waits until at most n (a compile-time 0-2) of this thread's commit groups are still in flight. */
static inline void
tc_wait(const int n)
{
#if TC_ASYNC
    if (n <= 0) TC_ASM volatile("cp.async.wait_group 0;" ::: "memory");
    else if (n == 1) TC_ASM volatile("cp.async.wait_group 1;" ::: "memory");
    else TC_ASM volatile("cp.async.wait_group 2;" ::: "memory");
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

/* tag: m x n tile of C, k-step, warps along m and n, pipeline stages. Production rows first (the emulation
 * builds only the 64x64 one: PoCL takes minutes over the big unrolled ones). */
#if !TC_EMULATE
#define TC_TAG 128x128x16w2x2s2
#define TC_BM 128
#define TC_BN 128
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"
#endif

#define TC_TAG 64x64x32w2x2s2
#define TC_BM 64
#define TC_BN 64
#define TC_BK 32
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"

#ifdef TC_SWEEP
#define TC_TAG 128x128x16w2x4s2
#define TC_BM 128
#define TC_BN 128
#define TC_BK 16
#define TC_WM 2
#define TC_WN 4
#define TC_STAGES 2
#include "matmul_tc4.h"

#define TC_TAG 64x64x16w2x2s3
#define TC_BM 64
#define TC_BN 64
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 128x64x16w2x2s3
#define TC_BM 128
#define TC_BN 64
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 128x128x8w2x4s3
#define TC_BM 128
#define TC_BN 128
#define TC_BK 8
#define TC_WM 2
#define TC_WN 4
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 128x128x16w4x2s2
#define TC_BM 128
#define TC_BN 128
#define TC_BK 16
#define TC_WM 4
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"

#define TC_TAG 64x128x16w2x2s3
#define TC_BM 64
#define TC_BN 128
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 256x128x8w4x2s2
#define TC_BM 256
#define TC_BN 128
#define TC_BK 8
#define TC_WM 4
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"

#define TC_TAG 128x256x8w2x4s2
#define TC_BM 128
#define TC_BN 256
#define TC_BK 8
#define TC_WM 2
#define TC_WN 4
#define TC_STAGES 2
#include "matmul_tc4.h"
#endif
