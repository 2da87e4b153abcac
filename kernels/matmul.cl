/* matmul.cl: batched float32 GEMM over strided operands, C[b] = A[b] @ B[b] (C contiguous), and the
 * matrix-vector kernels of the decode case. Every operand is addressed as off + b1*sb1 + b2*sb2 +
 * row*s_row + col*s_col, so transposed views (x @ w.T), 1-D operands and broadcast batches need no copy;
 * the batch index is global id 2, split as b = b1*nb2 + b2, and the host loops over further batch dims.
 * Tile parameters come from -D options chosen per device by the host (ops_matmul.c's table, or
 * TLGPU_GEMM_PARAMS); the defaults below only make the file compile on its own.
 *  - tl_gemm_f32: CLBlast-style. MDIMC x NDIMC work-items stage an MWG x KWG tile of A and a KWG x NWG
 *    tile of B in local memory, each keeps an MWI x NWI block of C in registers as float VW vectors.
 *  - tl_gemm_direct_{nn,nt}_f32: CLBlast's SA=SB=0 idea taken to CPUs: no local memory and no barriers
 *    (PoCL keeps variables live across barriers in memory), each work-item a register block read from
 *    the caches; nn vectorises along n (B rows contiguous), nt along k (both operands' k contiguous).
 *  - tl_mul_mv_f32 (GPU: one work-group per MV_NR weight rows, local-memory tree) and
 *    tl_mul_mv_rows_f32 (CPU: one work-item per MV_NR rows): y[r, n] = x[r, :] . W[n, :] (+ res[r, n] when
 *    has_res: addmm's fused residual, laid out like y), r < R <= 8; their _norm_ and _glu_ variants compute
 *    x as they read it: rms_norm(x) (tlgpu.rms_norm_linear) or silu(a) * b of x = a|b (silu_mul_linear).
 *  - tl_gemm_splitk_reduce_f32: sums split-K partials (tl_gemm_f32 over slices of K as its batch).
 *  - tl_matmul_small_f32 / tl_matmul_naive_f32: fallbacks for devices with small work-group limits.
 * Sizes need not be multiples of a tile: edge loads read 0 (or a clamped row) and edge stores are skipped. */
#include "mv_reduce.h"
#include "mm_epi.h"

#ifndef MWG
#define MWG 64
#endif
#ifndef NWG
#define NWG 64
#endif
#ifndef KWG
#define KWG 16
#endif
#ifndef MDIMC
#define MDIMC 16
#endif
#ifndef NDIMC
#define NDIMC 16
#endif
#ifndef VW
#define VW 4
#endif
#ifndef CMR
#define CMR 4                         /* direct kernels: rows of C per work-item */
#endif
#ifndef CVW
#define CVW 16                        /* direct kernels: vector width */
#endif
#ifndef CNV
#define CNV 2                         /* direct nn: vectors of C columns per work-item */
#endif
#ifndef CNR
#define CNR 4                         /* direct nt: columns of C per work-item */
#endif
#ifndef DSW
#define DSW 16                        /* direct kernels: row blocks swept together (cache blocking) */
#endif
#define MV_NR 4                       /* mul_mv: weight rows per work-group (GPU) or work-item (CPU) */
#define MV_MAXR 8                     /* mul_mv: at most this many activation rows */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define MWI (MWG / MDIMC)
#define NWI (NWG / NDIMC)
#define NVW (NWI / VW)
#if VW == 1
typedef float realV;
#define LOADV(p) (*(p))
#else
typedef CAT(float, VW) realV;
#define LOADV(p) CAT(vload, VW)(0, p)
#endif
typedef CAT(float, CVW) realC;
#define LOADC(p) CAT(vload, CVW)(0, p)

#define MM_ARGS int M, int N, int K, int nb2,                                                       \
    global const float *A, int offA, int sAb1, int sAb2, int sAm, int sAk,                          \
    global const float *B, int offB, int sBb1, int sBb2, int sBk, int sBn,                          \
    global float *C, int offC, MM_EPI_ARGS
/* Direct kernels run a 1-D grid over row blocks x column blocks in swizzled order: DSW row blocks
 * (a slice of A that stays in L2) are swept against one column block (its B panel stays in L1) before
 * moving on, so consecutive work-items share operands. */
#define DIRECT_BLOCK(rows, cols)                                                                    \
    const int MB = (M + (rows) - 1) / (rows), NB = (N + (cols) - 1) / (cols);                       \
    const int g = get_global_id(0), chunk = g / (DSW * NB);                                         \
    if (g >= MB * NB) return;                                                                       \
    const int hgt = min(DSW, MB - chunk * DSW), rr = g - chunk * DSW * NB;                          \
    const int m0 = (chunk * DSW + rr % hgt) * (rows), n0 = (rr / hgt) * (cols)
#define MM_BATCH()                                                                                  \
    const int b = get_global_id(2), b1 = b / nb2, b2 = b - b1 * nb2;                                \
    A += offA + b1 * sAb1 + b2 * sAb2;                                                              \
    B += offB + b1 * sBb1 + b2 * sBb2;                                                              \
    C += offC + b * M * N;                                                                          \
    MM_EPI_BATCH(b)

/* Local tiles: As[k][m] (padded by 1: the k-fastest fill of a row-major A would hit one bank),
 * Bs[k][n] (padded by VW, which keeps its rows vector-aligned and spreads a k-fastest fill). */
#ifndef MVEC
#define MVEC 0
#endif
#if MVEC && MWG / MDIMC % 4 == 0    /* each work-item's MWI rows adjacent: float4 reads of As (rows padded to 4) */
#define AVEC 1
#define AS_LD (MWG + 4)
#define AROW(i) (tm * MWI + (i))
#else                               /* rows MDIMC apart: scalar reads, rows padded by 1 */
#define AVEC 0
#define AS_LD (MWG + 1)
#define AROW(i) (tm + (i) * MDIMC)
#endif
#define BS_LD (NWG + VW)

/* Tile fill: element e of the A tile is (row A_R, column A_C) and of the B tile (row B_R, column B_C), in
 * the order that makes neighbouring work-items read neighbouring words (whichever stride is 1). */
#define NT (MDIMC * NDIMC)
#define A_R(e) (a_kfast ? (e) / KWG : (e) % MWG)
#define A_C(e) (a_kfast ? (e) % KWG : (e) / MWG)
#define B_R(e) (b_kfast ? (e) % KWG : (e) / NWG)
#define B_C(e) (b_kfast ? (e) / KWG : (e) % NWG)
#define A_AT(e, k0) (m0 + A_R(e) < M && (k0) + A_C(e) < K ? A[(m0 + A_R(e)) * sAm + ((k0) + A_C(e)) * sAk] : 0.0f)
#define B_AT(e, k0) ((k0) + B_R(e) < K && n0 + B_C(e) < N ? B[((k0) + B_R(e)) * sBk + (n0 + B_C(e)) * sBn] : 0.0f)
#ifndef PREFETCH
#define PREFETCH 0
#endif
#ifndef DBUF
#define DBUF 0
#endif
#ifndef INTERIOR
#define INTERIOR 0
#endif
#if PREFETCH && (MWG * KWG) % NT == 0 && (KWG * NWG) % NT == 0
#define PF 1
#define PF_A (MWG * KWG / NT)
#define PF_B (KWG * NWG / NT)
#else
#define PF 0
#endif
#if PF && DBUF                      /* two local tiles: the prefetched tile is stored while this one is read */
#define NBUF 2
#else
#define NBUF 1
#endif
#if INTERIOR                        /* work-groups wholly inside the matrices load without bounds checks */
#define A_GET(e, k0) (inside ? A[(m0 + A_R(e)) * sAm + ((k0) + A_C(e)) * sAk] : A_AT(e, k0))
#define B_GET(e, k0) (inside ? B[((k0) + B_R(e)) * sBk + (n0 + B_C(e)) * sBn] : B_AT(e, k0))
#else
#define A_GET(e, k0) A_AT(e, k0)
#define B_GET(e, k0) B_AT(e, k0)
#endif
#define PF_LOAD(k0)                                                                                 \
    for (int i = 0; i < PF_A; i++) pa[i] = A_GET(lid + i * NT, k0);                                 \
    for (int i = 0; i < PF_B; i++) pb[i] = B_GET(lid + i * NT, k0)
#define PF_STORE(as, bs)                                                                            \
    for (int i = 0; i < PF_A; i++) { int e = lid + i * NT; (as)[A_C(e) * AS_LD + A_R(e)] = pa[i]; } \
    for (int i = 0; i < PF_B; i++) { int e = lid + i * NT; (bs)[B_R(e) * BS_LD + B_C(e)] = pb[i]; }

kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, 1))) void
tl_gemm_f32(MM_ARGS)
{
    local float As[NBUF * KWG * AS_LD];
    local float Bs[NBUF * KWG * BS_LD];
    const int tn = get_local_id(0), tm = get_local_id(1), lid = tm * NDIMC + tn;
    const int n0 = get_group_id(0) * NWG, m0 = get_group_id(1) * MWG;
    MM_BATCH();
    realV acc[MWI][NVW];
    for (int i = 0; i < MWI; i++)
        for (int j = 0; j < NVW; j++) acc[i][j] = (realV)0.0f;
    /* the fill order follows whichever stride is 1, so neighbouring work-items read neighbouring words */
    const int a_kfast = sAk == 1, b_kfast = sBn != 1 && sBk == 1;
#if INTERIOR
    const int inside = m0 + MWG <= M && n0 + NWG <= N && K % KWG == 0;
#endif
#if PF
    /* prefetch: the next tile's elements travel from global memory into registers while this tile is
     * multiplied, and go to local memory after it (DBUF: into the other local tile, one barrier a step) */
    float pa[PF_A], pb[PF_B];
    PF_LOAD(0);
#if NBUF == 2
    PF_STORE(As, Bs);
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
#endif
    for (int k0 = 0, t = 0; k0 < K; k0 += KWG, t ^= NBUF - 1) {
        local const float *as = As + t * (KWG * AS_LD), *bs = Bs + t * (KWG * BS_LD);
#if PF
        const int more = k0 + KWG < K;
#if NBUF == 1
        PF_STORE(As, Bs);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (more) { PF_LOAD(k0 + KWG); }
#else                                   /* written out: the macro form of this loop ran 40 % slower on NVIDIA */
        for (int e = lid; e < MWG * KWG; e += NT) {
            int r = a_kfast ? e / KWG : e % MWG, c = a_kfast ? e % KWG : e / MWG;
            int m = m0 + r, k = k0 + c;
            As[c * AS_LD + r] = (m < M && k < K) ? A[m * sAm + k * sAk] : 0.0f;
        }
        for (int e = lid; e < KWG * NWG; e += NT) {
            int r = b_kfast ? e % KWG : e / NWG, c = b_kfast ? e / KWG : e % NWG;
            int k = k0 + r, n = n0 + c;
            Bs[r * BS_LD + c] = (k < K && n < N) ? B[k * sBk + n * sBn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
#pragma unroll
        for (int k = 0; k < KWG; k++) {
            realV bv[NVW];
            for (int j = 0; j < NVW; j++) bv[j] = LOADV(&bs[k * BS_LD + (tn + j * NDIMC) * VW]);
            float ar[MWI];
#if AVEC
            for (int q = 0; q < MWI / 4; q++) {
                float4 v = vload4(0, &as[k * AS_LD + tm * MWI + 4 * q]);
                ar[4 * q] = v.x; ar[4 * q + 1] = v.y; ar[4 * q + 2] = v.z; ar[4 * q + 3] = v.w;
            }
#else
            for (int i = 0; i < MWI; i++) ar[i] = as[k * AS_LD + AROW(i)];
#endif
            for (int i = 0; i < MWI; i++)
                for (int j = 0; j < NVW; j++) acc[i][j] = mad((realV)ar[i], bv[j], acc[i][j]);
        }
#if NBUF == 2
        if (more) { PF_STORE(As + (t ^ 1) * (KWG * AS_LD), Bs + (t ^ 1) * (KWG * BS_LD)); }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);       /* the next fill must not overwrite a tile still being read */
    }
    for (int i = 0; i < MWI; i++) {
        int m = m0 + AROW(i);
        if (m >= M) break;
        for (int j = 0; j < NVW; j++) {
            int n = n0 + (tn + j * NDIMC) * VW;
            global float *c = C + m * N + n;
#if VW == 1
            if (n < N) c[0] = epi ? MM_EPI(acc[i][j], n, m * N + n) : acc[i][j];
#else
            if (epi) {
                float t[VW];
                CAT(vstore, VW)(acc[i][j], 0, t);
                for (int v = 0; v < VW && n + v < N; v++) c[v] = MM_EPI(t[v], n + v, m * N + n + v);
            } else if (n + VW <= N) {
                CAT(vstore, VW)(acc[i][j], 0, c);
            } else {
                float t[VW];
                CAT(vstore, VW)(acc[i][j], 0, t);
                for (int v = 0; v < VW && n + v < N; v++) c[v] = t[v];
            }
#endif
        }
    }
}

/* CPU nn: CMR rows x CNV*CVW columns per work-item; B rows contiguous (sBn == 1). Edge rows are clamped
 * (computed twice, stored once); an edge column block takes the scalar path. */
kernel void
tl_gemm_direct_nn_f32(MM_ARGS)
{
    DIRECT_BLOCK(CMR, CNV * CVW);
    MM_BATCH();
    int mr[CMR];
    for (int i = 0; i < CMR; i++) mr[i] = min(m0 + i, M - 1) * sAm;
    if (n0 + CNV * CVW <= N) {
        realC acc[CMR][CNV];
        for (int i = 0; i < CMR; i++)
            for (int j = 0; j < CNV; j++) acc[i][j] = (realC)0.0f;
        for (int k = 0; k < K; k++) {
            const global float *bk = B + k * sBk + n0;
            realC bv[CNV];
            for (int j = 0; j < CNV; j++) bv[j] = LOADC(bk + j * CVW);
            for (int i = 0; i < CMR; i++) {
                realC a = (realC)A[mr[i] + k * sAk];
                for (int j = 0; j < CNV; j++) acc[i][j] = mad(a, bv[j], acc[i][j]);
            }
        }
        for (int i = 0; i < CMR && m0 + i < M; i++)
            for (int j = 0; j < CNV; j++) {
                if (epi) {
                    float t[CVW];
                    CAT(vstore, CVW)(acc[i][j], 0, t);
                    for (int v = 0; v < CVW; v++) t[v] = MM_EPI(t[v], n0 + j * CVW + v, (m0 + i) * N + n0 + j * CVW + v);
                    acc[i][j] = CAT(vload, CVW)(0, t);
                }
                CAT(vstore, CVW)(acc[i][j], 0, C + (m0 + i) * N + n0 + j * CVW);
            }
        return;
    }
    for (int i = 0; i < CMR && m0 + i < M; i++)
        for (int n = n0; n < N; n++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s = mad(A[mr[i] + k * sAk], B[k * sBk + n], s);
            C[(m0 + i) * N + n] = epi ? MM_EPI(s, n, (m0 + i) * N + n) : s;
        }
}

inline float
hsum(realC v)
{
#if CVW == 16
    float8 h8 = v.lo + v.hi;
    float4 h = h8.lo + h8.hi;
#elif CVW == 8
    float4 h = v.lo + v.hi;
#else
    float4 h = v;
#endif
    return (h.x + h.y) + (h.z + h.w);
}

/* CPU nt (x @ w.T): CMR rows of A x CNR columns of C per work-item, as dot products along k (both k
 * strides 1), vectors of CVW; edge rows and columns are clamped and their stores skipped. */
kernel void
tl_gemm_direct_nt_f32(MM_ARGS)
{
    DIRECT_BLOCK(CMR, CNR);
    MM_BATCH();
    const global float *ar[CMR], *br[CNR];
    for (int i = 0; i < CMR; i++) ar[i] = A + min(m0 + i, M - 1) * sAm;
    for (int j = 0; j < CNR; j++) br[j] = B + min(n0 + j, N - 1) * sBn;
    realC acc[CMR][CNR];
    for (int i = 0; i < CMR; i++)
        for (int j = 0; j < CNR; j++) acc[i][j] = (realC)0.0f;
    const int kv = K - K % CVW;
    for (int k = 0; k < kv; k += CVW) {
        realC av[CMR], bv[CNR];
        for (int i = 0; i < CMR; i++) av[i] = LOADC(ar[i] + k);
        for (int j = 0; j < CNR; j++) bv[j] = LOADC(br[j] + k);
        for (int i = 0; i < CMR; i++)
            for (int j = 0; j < CNR; j++) acc[i][j] = mad(av[i], bv[j], acc[i][j]);
    }
    for (int i = 0; i < CMR && m0 + i < M; i++)
        for (int j = 0; j < CNR && n0 + j < N; j++) {
            float s = hsum(acc[i][j]);
            for (int k = kv; k < K; k++) s = mad(ar[i][k], br[j][k], s);
            C[(m0 + i) * N + n0 + j] = epi ? MM_EPI(s, n0 + j, (m0 + i) * N + n0 + j) : s;
        }
}

/* The activations of the matrix-vector kernels, by MODE (the token in their macros): 0 x as it is; 1 (norm)
 * rms_norm's x * g (has_g; else x) with each row's sum of squares kept for its scale rsqrt(mean(x^2) + eps),
 * which multiplies the row's dot products at the store (mv_reduce.h's MV_ROW_SCALE); 2 (glu) silu(x[k]) *
 * x[K + k], the two halves of a gate|up row of 2K (silu as llm.cl's silu_mul: v / (1 + exp(-v))). Each
 * work-group (or work-item) computes them as it reads x, so the op before the product costs no launch. */
#define MV_GLU(a, b) ((a) / (1.0f + exp(-(a))) * (b))
#define MV_ARGS_0
#define MV_ARGS_1 , global const float *g, int offg, int has_g, float eps
#define MV_ARGS_2
#define MV_LD_0(LD, p, k) LD(p, k)
#define MV_LD_1(LD, p, k) LD(p, k)
#define MV_LD_2(LD, p, k) MV_GLU(LD(p, k), LD(p, K + (k)))
#define MV_SQ_0(s, v) ((void)0)
#define MV_SQ_1(s, v) ((s) += (v))
#define MV_SQ_2(s, v) ((void)0)
#define MV_G_0(LD, v, k) (v)
#define MV_G_1(LD, v, k) (has_g ? (v) * LD(g + offg, k) : (v))
#define MV_G_2(LD, v, k) (v)
#define MV_LD4(p, k) vload4(0, (p) + (k))
#define MV_LD1(p, k) ((p)[k])
#define MV_LDC(p, k) LOADC((p) + (k))

/* GPU matrix-vector, one kernel per padded row count RR in {1, 2, 4, 8} (the host picks the smallest >= R):
 * with RR a compile-time constant the NR x RR accumulators stay in registers (a runtime bound made
 * NVIDIA's compiler spill them). Rows >= R re-read row R-1 and are not stored. One work-group per NR
 * weight rows (4, or 8 from 4 activation rows up: every work-group re-reads all of x from cache, so more
 * weight rows per group keep that traffic below the weights'); float4 loads along k; mv_reduce finishes.
 * tl_mul_mv_r<RR>_f32 (MODE 0), tl_mul_mv_norm_r<RR>_f32 (1, its scales in sc) and tl_mul_mv_glu_r<RR>_f32 (2). */
#define MV_KERNEL(NAME, MODE, RR, NR)                                                                         \
kernel void                                                                                               \
NAME(int N, int K, int R, global const float *x, int offx, int sx, global const float *w, int offw, int sw,  \
     global float *y, int offy, int sy, global const float *res, int offr, int has_res, local float *red    \
     MV_ARGS_##MODE)                                                                                      \
{                                                                                                         \
    MV_LOCALS_##MODE(RR)                                                                                  \
    const int L = get_local_size(0), lid = get_local_id(0), n0 = get_group_id(0) * NR;                 \
    const global float *xr[RR], *wr[NR];                                                               \
    float acc[NR][RR], sq[RR];                                                                         \
    for (int r = 0; r < RR; r++) {                                                                        \
        xr[r] = x + offx + min(r, R - 1) * sx;                                                            \
        sq[r] = 0.0f;                                                                                     \
    }                                                                                                     \
    for (int j = 0; j < NR; j++) {                                                                     \
        wr[j] = w + offw + min(n0 + j, N - 1) * sw;                                                       \
        for (int r = 0; r < RR; r++) acc[j][r] = 0.0f;                                                    \
    }                                                                                                     \
    const int kv = K - K % 4;                                                                             \
    for (int k = lid * 4; k < kv; k += L * 4) {                                                           \
        float4 xv[RR];                                                                                    \
        for (int r = 0; r < RR; r++) {                                                                    \
            const float4 v = MV_LD_##MODE(MV_LD4, xr[r], k);                                              \
            MV_SQ_##MODE(sq[r], dot(v, v));                                                               \
            xv[r] = MV_G_##MODE(MV_LD4, v, k);                                                            \
        }                                                                                                 \
        for (int j = 0; j < NR; j++) {                                                                 \
            float4 wv = vload4(0, wr[j] + k);                                                             \
            for (int r = 0; r < RR; r++) acc[j][r] += dot(wv, xv[r]);                                     \
        }                                                                                                 \
    }                                                                                                     \
    for (int k = kv + lid; k < K; k += L) {                                                               \
        float xs[RR];                                                                                     \
        for (int r = 0; r < RR; r++) {                                                                    \
            const float v = MV_LD_##MODE(MV_LD1, xr[r], k);                                               \
            MV_SQ_##MODE(sq[r], v * v);                                                                   \
            xs[r] = MV_G_##MODE(MV_LD1, v, k);                                                            \
        }                                                                                                 \
        for (int j = 0; j < NR; j++)                                                                   \
            for (int r = 0; r < RR; r++) acc[j][r] = mad(wr[j][k], xs[r], acc[j][r]);                     \
    }                                                                                                     \
    MV_PRE_##MODE(RR);                                                                                    \
    MV_FINISH(acc, NR, RR, MV_STORE_##MODE);                                                              \
}
#define MV_STORE(j, r, t) (y[offy + (r) * sy + n0 + (j)] = has_res ? (t) + res[offr + (r) * sy + n0 + (j)] : (t))
#define MV_STORE_0(j, r, t) MV_STORE(j, r, t)
#define MV_STORE_1(j, r, t) MV_STORE(j, r, (t) * sc[r])
#define MV_STORE_2(j, r, t) MV_STORE(j, r, t)
#define MV_LOCALS_0(RR)
#define MV_LOCALS_1(RR) local float sc[RR];               /* the rows' rms_norm scales */
#define MV_LOCALS_2(RR)
#define MV_PRE_0(RR) ((void)0)
#define MV_PRE_1(RR) MV_ROW_SCALE(sq, RR, K, eps, sc)
#define MV_PRE_2(RR) ((void)0)
#define MV_KERNELS(PRE, MODE)                                                                                 \
    MV_KERNEL(PRE##r1_f32, MODE, 1, 4)                                                                    \
    MV_KERNEL(PRE##r2_f32, MODE, 2, 4)                                                                    \
    MV_KERNEL(PRE##r4_f32, MODE, 4, 8)                                                                    \
    MV_KERNEL(PRE##r8_f32, MODE, 8, 8)
MV_KERNELS(tl_mul_mv_, 0)
MV_KERNELS(tl_mul_mv_norm_, 1)
MV_KERNELS(tl_mul_mv_glu_, 2)

/* CPU matrix-vector: one work-item per MV_NR rows of W, CVW-wide dot products, no barriers; MODE as above
 * (norm: each work-item sums its two rows' squares itself). */
#define MV_ROWS_KERNEL(NAME, MODE)                                                                            \
kernel void                                                                                               \
NAME(int N, int K, int R, global const float *x, int offx, int sx, global const float *w, int offw, int sw,  \
     global float *y, int offy, int sy, global const float *res, int offr, int has_res MV_ARGS_##MODE)     \
{                                                                                                         \
    const int n0 = get_global_id(0) * MV_NR;                                                              \
    if (n0 >= N) return;                                                                                  \
    x += offx;                                                                                            \
    w += offw;                                                                                            \
    const global float *wr[MV_NR];                                                                        \
    for (int j = 0; j < MV_NR; j++) wr[j] = w + min(n0 + j, N - 1) * sw;                                  \
    const int kv = K - K % CVW;                                                                           \
    for (int r0 = 0; r0 < R; r0 += 2) {          /* two x rows at a time: W stays in L1 between them */  \
        const int r1 = min(r0 + 1, R - 1);                                                                \
        const global float *xa = x + r0 * sx, *xb = x + r1 * sx;                                          \
        realC a0[MV_NR], a1[MV_NR], q0 = (realC)0.0f, q1 = (realC)0.0f;                                   \
        for (int j = 0; j < MV_NR; j++) a0[j] = a1[j] = (realC)0.0f;                                      \
        for (int k = 0; k < kv; k += CVW) {                                                               \
            realC x0 = MV_LD_##MODE(MV_LDC, xa, k), x1 = MV_LD_##MODE(MV_LDC, xb, k);                     \
            MV_SQ_##MODE(q0, x0 * x0);                                                                    \
            MV_SQ_##MODE(q1, x1 * x1);                                                                    \
            x0 = MV_G_##MODE(MV_LDC, x0, k);                                                              \
            x1 = MV_G_##MODE(MV_LDC, x1, k);                                                              \
            for (int j = 0; j < MV_NR; j++) {                                                             \
                realC wv = LOADC(wr[j] + k);                                                              \
                a0[j] = mad(wv, x0, a0[j]);                                                               \
                a1[j] = mad(wv, x1, a1[j]);                                                               \
            }                                                                                             \
        }                                                                                                 \
        float c0 = hsum(q0), c1 = hsum(q1);                                                               \
        for (int k = kv; k < K; k++) {                                                                    \
            const float u0 = MV_LD_##MODE(MV_LD1, xa, k), u1 = MV_LD_##MODE(MV_LD1, xb, k);               \
            MV_SQ_##MODE(c0, u0 * u0);                                                                    \
            MV_SQ_##MODE(c1, u1 * u1);                                                                    \
        }                                                                                                 \
        c0 = rsqrt(c0 / (float)K + MV_EPS_##MODE);   /* MODE 1's scales (unused otherwise) */             \
        c1 = rsqrt(c1 / (float)K + MV_EPS_##MODE);                                                        \
        for (int j = 0; j < MV_NR && n0 + j < N; j++) {                                                   \
            float s0 = hsum(a0[j]), s1 = hsum(a1[j]);                                                     \
            for (int k = kv; k < K; k++) {                                                                \
                const float u0 = MV_LD_##MODE(MV_LD1, xa, k), u1 = MV_LD_##MODE(MV_LD1, xb, k);           \
                s0 = mad(wr[j][k], MV_G_##MODE(MV_LD1, u0, k), s0);                                       \
                s1 = mad(wr[j][k], MV_G_##MODE(MV_LD1, u1, k), s1);                                       \
            }                                                                                             \
            s0 = MV_SCALE_##MODE(s0, c0);                                                                 \
            s1 = MV_SCALE_##MODE(s1, c1);                                                                 \
            if (has_res) { s0 += res[offr + r0 * sy + n0 + j]; s1 += res[offr + r1 * sy + n0 + j]; }      \
            y[offy + r0 * sy + n0 + j] = s0;                                                              \
            if (r1 != r0) y[offy + r1 * sy + n0 + j] = s1;                                                \
        }                                                                                                 \
    }                                                                                                     \
}
#define MV_EPS_0 1.0f
#define MV_EPS_1 eps
#define MV_EPS_2 1.0f
#define MV_SCALE_0(s, c) (s)
#define MV_SCALE_1(s, c) ((s) * (c))
#define MV_SCALE_2(s, c) (s)
MV_ROWS_KERNEL(tl_mul_mv_rows_f32, 0)
MV_ROWS_KERNEL(tl_mul_mv_norm_rows_f32, 1)
MV_ROWS_KERNEL(tl_mul_mv_glu_rows_f32, 2)

/* Split-K (csrc/gemm/gemm_splitk.c): C[offC + i] = P[i] + P[n + i] + ... + P[(S-1)*n + i], the S partial products
 * of the slices of K added in slice order (bit-identical run to run: no atomics, a fixed order). */
kernel void
tl_gemm_splitk_reduce_f32(int n, int S, global const float *P, global float *C, int offC)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    float s = P[i];
    for (int j = 1; j < S; j++) s += P[(size_t)j * (size_t)n + (size_t)i];
    C[offC + i] = s;
}

#define MM_WPT 4                      /* fallbacks: outputs per work-item along each of m and n */
#define MM_TK 16                      /* fallbacks: k-depth of one local tile */

/* Fallback: 8x8 work-items on a 32x32 output tile, 4x4 outputs each (devices under 64 work-items use naive). */
kernel void
tl_matmul_small_f32(MM_ARGS)
{
    local float As[32 * MM_TK], Bs[MM_TK * 32];
    const int TS = 32, R = TS / MM_WPT, nthreads = R * R;
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * R + tx;
    const int n0 = get_group_id(0) * TS, m0 = get_group_id(1) * TS;
    MM_BATCH();
    float acc[MM_WPT][MM_WPT];
    for (int i = 0; i < MM_WPT; i++)
        for (int j = 0; j < MM_WPT; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += MM_TK) {
        for (int e = lid; e < TS * MM_TK; e += nthreads) {
            int r = e / MM_TK, c = e - r * MM_TK, m = m0 + r, k = k0 + c;
            As[e] = (m < M && k < K) ? A[m * sAm + k * sAk] : 0.0f;
            int kr = e / TS, nc = e - kr * TS, kb = k0 + kr, n = n0 + nc;
            Bs[e] = (kb < K && n < N) ? B[kb * sBk + n * sBn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < MM_TK; k++) {
            float a[MM_WPT], bv[MM_WPT];
            for (int i = 0; i < MM_WPT; i++) a[i] = As[(ty + i * R) * MM_TK + k];
            for (int j = 0; j < MM_WPT; j++) bv[j] = Bs[k * TS + tx + j * R];
            for (int i = 0; i < MM_WPT; i++)
                for (int j = 0; j < MM_WPT; j++) acc[i][j] = mad(a[i], bv[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < MM_WPT; i++) {
        int m = m0 + ty + i * R;
        for (int j = 0; j < MM_WPT; j++) {
            int n = n0 + tx + j * R;
            if (m < M && n < N) C[m * N + n] = epi ? MM_EPI(acc[i][j], n, m * N + n) : acc[i][j];
        }
    }
}

/* One output per work-item over the flattened M x N (a vector product keeps every lane busy and the
 * launch keeps one local size, which PoCL compiles once); global size (>= M*N, 1, batch). */
kernel void
tl_matmul_naive_f32(MM_ARGS)
{
    const size_t idx = get_global_id(0);
    if (idx >= (size_t)M * (size_t)N) return;
    const int m = (int)(idx / (size_t)N), n = (int)(idx - (size_t)m * (size_t)N);
    const int b = get_global_id(2), b1 = b / nb2, b2 = b - b1 * nb2;
    A += offA + b1 * sAb1 + b2 * sAb2 + m * sAm;
    B += offB + b1 * sBb1 + b2 * sBb2 + n * sBn;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc = mad(A[k * sAk], B[k * sBk], acc);
    resid += offR + b * M * N;
    C[offC + b * M * N + m * N + n] = epi ? MM_EPI(acc, n, m * N + n) : acc;
}
