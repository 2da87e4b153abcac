/* matmul_sg.cl: float32 GEMM for NVIDIA GPUs in the style of the hand-written CUDA SGEMMs (the "128x128x8,
 * 256 threads, 8x8 a thread" design of CUTLASS's SIMT sgemm and the SGEMM write-ups), C[b] = A[b] @ B[b]
 * with the operands and arguments of matmul.cl's tl_gemm_f32 (strided, batched), 1-D launch over dim 0
 * (work-groups x SG_BM * SG_BN / 64 work-items), batch index in dim 2. Plain OpenCL C 1.2, no asm: PoCL
 * builds it too (the tests force it there through csrc/gemm/gemm_sg.c's hooks). Per work-group:
 *  - a BM x BN tile of C (work-groups walk the tiles in groups of SG_GROUP tile rows, column by column
 *    inside a group, so the A rows and B columns in flight stay in L2);
 *  - each work-item an 8x8 register tile as four 4x4 quadrants BM/2 rows and BN/2 columns apart, so it
 *    reads its operands from local memory as four float4 a k step (two of A, two of B);
 *  - a warp is 4 work-items along m by 8 along n (lane / 8, lane % 8), warps BN / 64 along n: each
 *    quarter-warp (8 lanes, one phase of a 16-byte local load) reads one A address (a broadcast) and 8
 *    consecutive float4 of B (128 bytes, all 32 banks once): no bank conflict on the reads (SG_LN=4: 8
 *    along m by 4 along n, a phase reads 2 float4 of A and 4 of B, conflict-free too);
 *  - local tiles As[k][m] (A transposed) and Bs[k][n], rows padded by SG_PAD floats (4: the transposing
 *    stores of a k-contiguous operand, two lanes a row, land on distinct banks at BK 8), two of each
 *    (double buffering): the next k-tile is loaded from global memory into registers before the current
 *    one's FMAs and stored to the other buffer after them, one barrier a k-tile;
 *  - global loads are float4 along the operand's unit stride: A along k (sAk == 1, nn/nt) or along m
 *    (sAm == 1, tn/tt), B along n (sBn == 1, nn/tn) or along k (sBk == 1, nt/tt: x @ w.T).
 * Fast path contract, checked by the host (gemm_sg.c): every float4 load is 16-byte aligned (offsets,
 * the other stride and the batch strides multiples of 4 floats) and the vector runs stay inside the
 * matrix: K % 4 == 0 where a float4 runs along k, M % 4 == 0 along m, N % 4 == 0 along n. Edges then
 * cost no branches in the loop: rows (columns) past M (N) are clamped to the last one, so the tile reads
 * valid memory and its extra results are not stored; k past K (the last k-tile when K % BK != 0) reads
 * zeros (a select a float4). C is stored as float4 where the tile is whole and its rows aligned, else
 * element by element with bounds checks. The operands are restrict (C is always a fresh tensor; A and B,
 * which may be one buffer, are only read), so NVIDIA may read them through the non-coherent cache.
 * Knobs (build options, e.g. TLGPU_BUILD_OPTIONS): SG_PAD, SG_GROUP, SG_LN, SG_SWEEP (the sweep-only tags);
 * csrc/gemm/gemm_sg.c holds the same tag table. On a generalised body (sg_gemm_x; the 8x8 production rows keep
 * sg_gemm, whose code they were timed with): tags ending t16x8 / t8x16 (16x8 or 8x16 outputs a work-item,
 * quadrants a quarter tile apart; 128x128x16t16x8 is the first production row, the others sweep-only), and
 * the sweep knobs SG_RDB=1 (register double-buffered fragments), SG_T4=1 (float4 local stores of
 * k-contiguous tiles after a 4x4 transpose), SG_GEN=1 (the 8x8 tags on it too): on the H200 none gained
 * more than 2 % on 128x128x16t16x8 in both layouts (SG_T4: +2 % nn, -7 % nt; benchmarks/NOTES.md).
 * SG_ASYNC=1, which csrc/core/programs.c sets on NVIDIA devices of compute capability 8.0 and up (its asm is
 * PTX no other compiler takes): in sg_gemm_x, an operand not along k whose partner is (nn: B; tt: A)
 * goes from global to local memory by 16-byte cp.async, without registers on the way. Those two layouts
 * had hit the 255-register cap (ptxas), and ran 43-44 TFLOP/s on the H200 where nt and tn ran 45-47;
 * with it, 45-46 (SG_ASYNC=2, both operands of tn too, lost 2 % there).
 * Multistage rows (tags ending s<ST>, SG_ST 3 to 5 stages of BK 8; the pipeline of CUTLASS's sm80 SIMT
 * sgemm, which cuBLAS runs for float32 on the H200): both operands by cp.async only (sg_async; an operand
 * along k by 4-byte copies that transpose it), ST - 1 k-tiles in flight, one barrier a k-tile. On PoCL the
 * copies are plain stores, so the stage logic runs in the tests. 128x128x8t16x8s4 is tn's production row
 * (47.0 / 47.8 TFLOP/s at 2048 / 4096 against 46.0 / 46.7); in nn, nt and tt the 4-byte copies lose. */

#ifndef SG_PAD
#define SG_PAD 4
#endif
#if SG_PAD % 4 != 0
#error "matmul_sg.cl: SG_PAD must keep the local rows 16-byte aligned (a multiple of 4)"
#endif
#ifndef SG_LN
#define SG_LN 8                                   /* work-items of a warp along n: 8 (4 x 8) or 4 (8 x 4) */
#endif
#if SG_LN != 8 && SG_LN != 4
#error "matmul_sg.cl: SG_LN is 8 or 4"
#endif
#ifndef SG_GROUP
#define SG_GROUP 8
#endif
#ifndef SG_RDB
#define SG_RDB 0                                  /* 1: fragments of k + 1 loaded before k's FMAs (two sets) */
#endif
#ifndef SG_T4
#define SG_T4 0                                   /* 1: k-contiguous tiles stored as float4 after a 4x4 transpose */
#endif
#ifndef SG_ASYNC
#define SG_ASYNC 0                                /* sm_80+ asm: operands not along k copied by cp.async, */
#endif                                            /* 1: where the other one is along k (nn, tt), 2: always */
#if SG_ASYNC != 0 && SG_ASYNC != 1 && SG_ASYNC != 2
#error "matmul_sg.cl: SG_ASYNC is 0, 1 or 2"
#endif
#ifndef SG_GEN
#define SG_GEN 0                                  /* 1: the 8x8 tags on sg_gemm_x too (its code, no knob) */
#endif
#define SG_CAT_(a, b) a##b
#define SG_CAT(a, b) SG_CAT_(a, b)
#define SG_STR_(a) #a
#define SG_STR(a) SG_STR_(a)
/* SG_MAXNREG=n (sweeps, compute capability 9.0 only): ".maxnreg n" on every kernel, e.g. 128 for two
 * 256-item work-groups an SM (-cl-nv-maxrregcount changed nothing on the H200); the directive reaches the
 * PTX through the patch of ptx_patch.h (//TLPTX_ENTRY). */
#ifndef SG_ASM
#define SG_ASM asm                                /* NVIDIA's keyword; clang (a local PTX check) takes __asm__ */
#endif
#if defined(SG_MAXNREG) && SG_MAXNREG > 0
#define SG_ENTRY() SG_ASM volatile("//TLPTX_ENTRY .maxnreg " SG_STR(SG_MAXNREG) "\n")
#else
#define SG_ENTRY() ((void)0)
#endif

#define MM_ARGS int M, int N, int K, int nb2,                                                       \
    global const float *restrict A, int offA, int sAb1, int sAb2, int sAm, int sAk,                 \
    global const float *restrict B, int offB, int sBb1, int sBb2, int sBk, int sBn,                 \
    global float *restrict C, int offC
#define SG_BATCH()                                                                                  \
    const int b = get_global_id(2), b1 = b / nb2, b2 = b - b1 * nb2;                                \
    const int calign = ((offC + b * M * N) & 3) == 0 && (N & 3) == 0;                               \
    A += offA + b1 * sAb1 + b2 * sAb2;                                                              \
    B += offB + b1 * sBb1 + b2 * sBb2;                                                              \
    C += offC + b * M * N

/* Work-group pid's tile (row *pm, column *pn) of a tm x tn grid: SG_GROUP rows at a time, by columns. */
static inline void
sg_tile_order(int pid, int tm, int tn, int *pm, int *pn)
{
    const int per = SG_GROUP * tn, first = (pid / per) * SG_GROUP, rows = min(tm - first, SG_GROUP);
    const int in = pid % per;
    *pm = first + in % rows;
    *pn = in / rows;
}

/* Where the SG_T4 knob (4x4 blocks) loads operand X: alongk, one of its BR x BK / 16 blocks of 4 rows by
 * 4 k; a phase of 8 work-items (one 16-byte local store) takes 4 row quads by 2 k quads, so the stores of
 * sg_store land on 8 distinct 16-byte bank groups (SG_PAD 4) and each row's loads are 32-byte sectors. */
static inline void
sg_block(int q, int BK, int *rq, int *kq)
{
    const int kh = BK / 8, rest = q / 8;         /* k quads / 2 */
    *kq = (q / 4) % 2 + 2 * (rest % kh);
    *rq = q % 4 + 4 * (rest / kh);
}

/* The k-tile at k0 of one operand (BR of its rows or columns from r0, `rows` in all, stride s along the
 * other index) into r[]: alongk, X[row * s + k] read as float4 of 4 k; else X[k * s + row], float4 of 4
 * rows. Rows clamped into the matrix, k past K read as zeros. With SG_T4 an alongk operand is read as
 * 4x4 blocks (sg_block), 4 float4 each, by the first BR BK / 16 work-items when there are fewer. */
static inline void
sg_load(float4 *r, global const float *X, int s, int rows, int r0, int K, int k0, int BR, int BK, int NT,
        int alongk, int tid)
{
    if (SG_T4 && alongk) {
#pragma unroll
        for (int i = 0; i < 2; i++) {                /* max(1, BR BK / 16 / NT) blocks */
            if (i >= max(1, BR * BK / 16 / NT)) break;
            const int q = tid + i * NT;
            int rq, kq;
            sg_block(q, BK, &rq, &kq);
            const int k = k0 + kq * 4;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int row = min(r0 + rq * 4 + j, rows - 1);
                r[4 * i + j] = k < K && q < BR * BK / 16 ? *(global const float4 *)(X + row * s + k)
                                                         : (float4)(0.0f);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {                     /* BR BK / 4 / NT of them: constant once inlined */
        if (i >= BR * BK / 4 / NT) break;
        const int q = tid + i * NT;
        if (alongk) {
            const int row = min(r0 + q / (BK / 4), rows - 1), k = k0 + (q % (BK / 4)) * 4;
            r[i] = k < K ? *(global const float4 *)(X + row * s + k) : (float4)(0.0f);
        } else {
            const int row = min(r0 + (q % (BR / 4)) * 4, rows - 4), k = k0 + q / (BR / 4);
            r[i] = k < K ? *(global const float4 *)(X + k * s + row) : (float4)(0.0f);
        }
    }
}

/* r[] (as sg_load left it) into the local tile L[k][row] (row stride BR + SG_PAD): an alongk operand by 4
 * scalar stores a float4 (a transpose), or with SG_T4 a 4x4 block transposed in registers, 4 float4 stores. */
static inline void
sg_store(local float *L, const float4 *r, int BR, int BK, int NT, int alongk, int tid)
{
    const int ld = BR + SG_PAD;
    if (SG_T4 && alongk) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if (i >= max(1, BR * BK / 16 / NT)) break;
            const int q = tid + i * NT;
            int rq, kq;
            sg_block(q, BK, &rq, &kq);
            if (q >= BR * BK / 16) break;            /* whole warps: BR BK / 16 is a multiple of 32 */
            local float *p = L + kq * 4 * ld + rq * 4;
            const float4 r0 = r[4 * i], r1 = r[4 * i + 1], r2 = r[4 * i + 2], r3 = r[4 * i + 3];
            *(local float4 *)p = (float4)(r0.x, r1.x, r2.x, r3.x);
            *(local float4 *)(p + ld) = (float4)(r0.y, r1.y, r2.y, r3.y);
            *(local float4 *)(p + 2 * ld) = (float4)(r0.z, r1.z, r2.z, r3.z);
            *(local float4 *)(p + 3 * ld) = (float4)(r0.w, r1.w, r2.w, r3.w);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {                     /* BR BK / 4 / NT of them: constant once inlined */
        if (i >= BR * BK / 4 / NT) break;
        const int q = tid + i * NT;
        if (alongk) {
            local float *p = L + (q % (BK / 4)) * 4 * ld + q / (BK / 4);
            p[0] = r[i].x;
            p[ld] = r[i].y;
            p[2 * ld] = r[i].z;
            p[3 * ld] = r[i].w;
        } else {
            *(local float4 *)(L + (q / (BR / 4)) * ld + (q % (BR / 4)) * 4) = r[i];
        }
    }
}

/* One work-item's 4 outputs of C's row `row` from column `col` (the tile whole and aligned: a float4). */
static inline void
sg_put(global float *C, int M, int N, int row, int col, float4 v, int whole)
{
    if (whole) {
        *(global float4 *)(C + row * N + col) = v;
        return;
    }
    if (row >= M) return;
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (col + j < N) C[row * N + col + j] = e[j];
}

/* A work-item's fragments of local k row k: TM / 4 float4 of A (BM / TM float4 apart) into a[], TN / 4 of
 * B (BN / TN apart) into c[]. */
static inline void
sg_frag(float *a, float *c, local const float *as, local const float *bs, int k, int lda, int ldb, int BM,
        int BN, int TM, int TN)
{
    local const float4 *pa = (local const float4 *)(as + k * lda), *pb = (local const float4 *)(bs + k * ldb);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        if (q < TM / 4) {
            const float4 v = pa[q * (BM / TM)];
            a[4 * q] = v.x, a[4 * q + 1] = v.y, a[4 * q + 2] = v.z, a[4 * q + 3] = v.w;
        }
        if (q < TN / 4) {
            const float4 v = pb[q * (BN / TN)];
            c[4 * q] = v.x, c[4 * q + 1] = v.y, c[4 * q + 2] = v.z, c[4 * q + 3] = v.w;
        }
    }
}

/* One copy of 16 (4) bytes from x to d, or zeros where !ok (sg_async). */
static inline void
sg_cp16(local float *d, global const float *x, int ok)
{
#if SG_ASYNC
    SG_ASM volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((uint)(uintptr_t)d),   /* .shared */
                    "l"((ulong)(uintptr_t)x), "r"(ok ? 16 : 0) : "memory");
#else
    *(local float4 *)d = ok ? *(global const float4 *)x : (float4)(0.0f);
#endif
}

static inline void
sg_cp4(local float *d, global const float *x, int ok)
{
#if SG_ASYNC
    SG_ASM volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"((uint)(uintptr_t)d),
                    "l"((ulong)(uintptr_t)x), "r"(ok ? 4 : 0) : "memory");
#else
    *d = ok ? *x : 0.0f;
#endif
}

/* An operand's k-tile at k0 copied into its local tile without registers on the way (SG_ASYNC: cp.async,
 * else plain copies, e.g. on PoCL): alongk 0, not along k (X[k * s + row]), by 16-byte copies to L[k][row];
 * alongk 1 (X[row * s + k], the multistage rows only) by 4-byte ones to L[k][row], 8 lanes along k and 4
 * rows a warp (32-byte sectors read whole; the stores k * ld + row fall on distinct banks for BK 8 and
 * ld % 32 == 4). Rows clamped into the matrix, k past K zero-filled (a source size of 0). */
static inline void
sg_async(local float *L, global const float *X, int s, int rows, int r0, int K, int k0, int BR, int BK, int NT,
         int alongk, int tid)
{
    const int ld = BR + SG_PAD;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (alongk) {
            if (i >= BR * BK / NT) break;
            const int q = tid + i * NT, row = min(r0 + q / BK, rows - 1), k = k0 + q % BK;
            sg_cp4(L + (q % BK) * ld + q / BK, X + (k < K ? row * s + k : 0), k < K);
        } else {
            if (i >= BR * BK / 4 / NT) break;
            const int q = tid + i * NT, row = min(r0 + (q % (BR / 4)) * 4, rows - 4), k = k0 + q / (BR / 4);
            sg_cp16(L + (q / (BR / 4)) * ld + (q % (BR / 4)) * 4, X + (k < K ? k * s + row : 0), k < K);
        }
    }
}

static inline void
sg_async_wait(void)
{
#if SG_ASYNC
    SG_ASM volatile("cp.async.wait_all;" ::: "memory");
#endif
}

/* The multistage rows' copy groups: one committed a k-tile; wait until at most `pending` (a constant, 1
 * to 3: stages - 2) are in flight. */
static inline void
sg_commit(void)
{
#if SG_ASYNC
    SG_ASM volatile("cp.async.commit_group;" ::: "memory");
#endif
}

static inline void
sg_wait(int pending)
{
#if SG_ASYNC
    if (pending == 1) SG_ASM volatile("cp.async.wait_group 1;" ::: "memory");
    else if (pending == 2) SG_ASM volatile("cp.async.wait_group 2;" ::: "memory");
    else SG_ASM volatile("cp.async.wait_group 3;" ::: "memory");
#endif
}

/* For sg_gemm and sg_gemm_x (their locals; da, db: A, B copied by sg_async): both operands' k-tile at k0
 * into registers ra, rb, or straight into the local tiles la, lb; then from the registers into them. */
#define SG_FETCH(k0, la, lb)                                                                        \
    do {                                                                                            \
        if (da) sg_async((la), A, sa, M, m0, K, (k0), BM, BK, NT, 0, tid);                         \
        else sg_load(ra, A, sa, M, m0, K, (k0), BM, BK, NT, ak, tid);                               \
        if (db) sg_async((lb), B, sb, N, n0, K, (k0), BN, BK, NT, 0, tid);                         \
        else sg_load(rb, B, sb, N, n0, K, (k0), BN, BK, NT, !bn, tid);                              \
    } while (0)
#define SG_STAGE(la, lb)                                                                            \
    do {                                                                                            \
        if (!da) sg_store((la), ra, BM, BK, NT, ak, tid);                                           \
        if (!db) sg_store((lb), rb, BN, BK, NT, !bn, tid);                                          \
        if (da || db) sg_async_wait();                                                              \
    } while (0)

/* The multistage rows (ST > 2): k-tile t's copies of both operands into stage t % ST, one commit group. */
#define SG_MS_FETCH(t)                                                                              \
    do {                                                                                            \
        sg_async(As + ((t) % ST) * BK * lda, A, sa, M, m0, K, (t) * BK, BM, BK, NT, ak, tid);       \
        sg_async(Bs + ((t) % ST) * BK * ldb, B, sb, N, n0, K, (t) * BK, BN, BK, NT, !bn, tid);      \
    } while (0)

/* For sg_gemm and sg_gemm_x (their locals): the pipeline over the nk k-tiles, around the FMAs of one
 * local k-tile (whose fragments start at `as`, `bs`) written between SG_LOOP_BEGIN and SG_LOOP_END. ST 2,
 * double buffering: the first k-tile staged; per k-tile the next one fetched (in flight during the FMAs),
 * the FMAs, the next one staged into the other buffers, one barrier. ST 3 to 5, multistage (both operands
 * by cp.async, in the way of CUTLASS's sm80 SIMT sgemm that cuBLAS runs): ST - 1 k-tiles in flight; per
 * k-tile a wait for the oldest, one barrier (its stage complete for all, the stage read last free), the
 * copies of k-tile kt + ST - 1 into that free stage, the FMAs. (OpenCL C has no variadic macros, so the
 * loop is opened and closed by two.) */
#define SG_LOOP_BEGIN                                                                               \
    if (ST > 2) {                                                                                   \
        for (int t = 0; t < ST - 1; t++) {                                                          \
            if (t < nk) SG_MS_FETCH(t);                                                             \
            sg_commit();                                                                            \
        }                                                                                           \
    } else {                                                                                        \
        SG_FETCH(0, As, Bs);                                                                        \
        SG_STAGE(As, Bs);                                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                               \
    }                                                                                               \
    for (int kt = 0; kt < nk; kt++) {                                                               \
        const int cur = ST > 2 ? kt % ST : kt & 1, more = kt + 1 < nk;                              \
        if (ST > 2) {                                                                               \
            sg_wait(ST - 2);                                                                        \
            barrier(CLK_LOCAL_MEM_FENCE);                                                           \
            if (kt + ST - 1 < nk) SG_MS_FETCH(kt + ST - 1);                                         \
            sg_commit();                                                                            \
        } else if (more) {                                                                          \
            SG_FETCH((kt + 1) * BK, As + (cur ^ 1) * BK * lda, Bs + (cur ^ 1) * BK * ldb);          \
        }                                                                                           \
        local const float *as = As + cur * BK * lda + tm * 4, *bs = Bs + cur * BK * ldb + tn * 4;
#define SG_LOOP_END                                                                                 \
        if (ST == 2) {                                                                              \
            if (more) SG_STAGE(As + (cur ^ 1) * BK * lda, Bs + (cur ^ 1) * BK * ldb);               \
            barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        }                                                                                           \
    }

/* The work-group's tile of C = A @ B; sa, sb: A's and B's strides other than the unit one. */
static inline void
sg_gemm(int M, int N, int K, global const float *A, int sa, global const float *B, int sb, global float *C,
        int calign, local float *As, local float *Bs, const int BM, const int BN, const int BK, const int ak,
        const int bn)
{
    const int NT = BM * BN / 64, tid = get_local_id(0), lda = BM + SG_PAD, ldb = BN + SG_PAD, da = 0, db = 0;
    const int ST = 2;
    const int warp = tid / 32, lane = tid % 32, wn = BN / (8 * SG_LN);    /* warps along n */
    const int tm = (warp / wn) * (32 / SG_LN) + lane / SG_LN, tn = (warp % wn) * SG_LN + lane % SG_LN;
    int pm, pn;
    sg_tile_order(get_group_id(0), (M + BM - 1) / BM, (N + BN - 1) / BN, &pm, &pn);
    const int m0 = pm * BM, n0 = pn * BN, nk = (K + BK - 1) / BK;
    float4 ra[4], rb[4];                              /* 16 BK / BN (BM) of them used: <= 4 */
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

    SG_LOOP_BEGIN
        for (int k8 = 0; k8 < BK; k8 += 8) {          /* BK / 8 steps of 8 k, each fully unrolled */
#pragma unroll
            for (int k = k8; k < k8 + 8; k++) {
                local const float4 *pa = (local const float4 *)(as + k * lda);
                local const float4 *pb = (local const float4 *)(bs + k * ldb);
                const float4 a0 = pa[0], a1 = pa[BM / 8], b0 = pb[0], b1 = pb[BN / 8];   /* + BM/2, BN/2 floats */
                const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                const float c[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[i][j] = mad(a[i], c[j], acc[i][j]);
            }
        }
    SG_LOOP_END

    const int whole = calign && m0 + BM <= M && n0 + BN <= N;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int row = m0 + (i / 4) * (BM / 2) + tm * 4 + i % 4;
#pragma unroll
        for (int h = 0; h < 2; h++)
            sg_put(C, M, N, row, n0 + h * (BN / 2) + tn * 4,
                   (float4)(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]), whole);
    }
}

/* sg_gemm generalised (the t16x8 / t8x16 tags, 128x128x16t16x8 among the production rows, and the sweep
 * knobs; the 8x8 production rows keep sg_gemm, which ran them faster on the H200): each work-item
 * owns TM x TN outputs (8 or 16 each) in 4x4 quadrants 4 BM / TM rows and 4 BN / TN columns apart; SG_RDB
 * loads k + 1's fragments before k's FMAs, SG_T4 stores k-contiguous tiles as float4. LLVM optimises this
 * body before inlining it (TM, TN unknown) and fully unrolls a loop of unknown count only up to 8, so the
 * loops over TM and TN run to constant counts (8, or 16 as 2 x 8) and break at TM, TN. */
static inline __attribute__((always_inline)) void    /* constant tiles in each kernel: never a call */
sg_gemm_x(int M, int N, int K, global const float *A, int sa, global const float *B, int sb,
          global float *C, int calign, local float *As, local float *Bs, const int BM, const int BN,
          const int BK, const int TM, const int TN, const int ST, const int ak, const int bn)
{
    const int NT = BM * BN / (TM * TN), tid = get_local_id(0), lda = BM + SG_PAD, ldb = BN + SG_PAD;
    const int asy = SG_ASYNC, da = !ak && (asy == 2 || (asy == 1 && !bn)), db = bn && (asy == 2 || (asy == 1 && ak));
    const int warp = tid / 32, lane = tid % 32, wn = BN / (TN * SG_LN);    /* warps along n */
    const int tm = (warp / wn) * (32 / SG_LN) + lane / SG_LN, tn = (warp % wn) * SG_LN + lane % SG_LN;
    int pm, pn;
    sg_tile_order(get_group_id(0), (M + BM - 1) / BM, (N + BN - 1) / BN, &pm, &pn);
    const int m0 = pm * BM, n0 = pn * BN, nk = (K + BK - 1) / BK;
    float4 ra[8], rb[8];                              /* BK BM / 4 / NT (BK BN / 4 / NT) of them used */
    float acc[16][16];                                /* TM x TN of them used */
#pragma unroll
    for (int i = 0; i < 16; i++)                      /* constant counts: unrolled before inlining */
#pragma unroll
        for (int j = 0; j < 16; j++) acc[i][j] = 0.0f;

    SG_LOOP_BEGIN
        float a[2][16], c[2][16];                     /* SG_RDB: k + 1's fragments loaded before k's FMAs */
        if (SG_RDB) sg_frag(a[0], c[0], as, bs, 0, lda, ldb, BM, BN, TM, TN);
        for (int k8 = 0; k8 < BK; k8 += 8) {          /* BK / 8 steps of 8 k, each fully unrolled */
#pragma unroll
            for (int k = k8; k < k8 + 8; k++) {
                const int f = SG_RDB ? k & 1 : 0;
                if (SG_RDB) sg_frag(a[f ^ 1], c[f ^ 1], as, bs, k + 1 < BK ? k + 1 : 0, lda, ldb, BM, BN, TM, TN);
                else sg_frag(a[0], c[0], as, bs, k, lda, ldb, BM, BN, TM, TN);
#pragma unroll
                for (int i = 0; i < 16; i++) {        /* loops of 8 (and a 2-count break): LLVM unrolls */
                    if (i >= TM) break;               /* counts up to 8 only, before inlining sets TM, TN */
#pragma unroll
                    for (int j0 = 0; j0 < 16; j0 += 8) {
                        if (j0 >= TN) break;
#pragma unroll
                        for (int j = j0; j < j0 + 8; j++) acc[i][j] = mad(a[f][i], c[f][j], acc[i][j]);
                    }
                }
            }
        }
    SG_LOOP_END

    const int whole = calign && m0 + BM <= M && n0 + BN <= N;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        if (i >= TM) break;
        const int row = m0 + (i / 4) * (4 * BM / TM) + tm * 4 + i % 4;
#pragma unroll
        for (int h = 0; h < 4; h++) {
            if (h >= TN / 4) break;
            sg_put(C, M, N, row, n0 + h * (4 * BN / TN) + tn * 4,
                   (float4)(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2],
                             acc[i][4 * h + 3]), whole);
        }
    }
}

/* tags: BM x BN x BK. Production rows first (csrc/gemm/gemm_sg.c picks the first whose grid fills the device);
 * SG_SWEEP adds the ones only benchmarks/sweep_sgemm.py times. */
#define SG_TAG 128x128x16t16x8
#define SG_BM 128
#define SG_BN 128
#define SG_BK 16
#define SG_TM 16
#include "matmul_sg.h"

#define SG_TAG 128x64x16
#define SG_BM 128
#define SG_BN 64
#define SG_BK 16
#include "matmul_sg.h"

#define SG_TAG 128x128x8
#define SG_BM 128
#define SG_BN 128
#define SG_BK 8
#include "matmul_sg.h"

#define SG_TAG 128x64x8
#define SG_BM 128
#define SG_BN 64
#define SG_BK 8
#include "matmul_sg.h"

#define SG_TAG 64x64x8
#define SG_BM 64
#define SG_BN 64
#define SG_BK 8
#include "matmul_sg.h"

/* Multistage (cp.async, 4 stages of BK 8): the production row of tn, where both operands go by 16-byte
 * copies (the other layouts need 4-byte ones for an operand along k, and lose; benchmarks/NOTES.md). */
#define SG_TAG 128x128x8t16x8s4
#define SG_BM 128
#define SG_BN 128
#define SG_BK 8
#define SG_TM 16
#define SG_ST 4
#include "matmul_sg.h"

#ifdef SG_SWEEP
#define SG_TAG 128x128x16
#define SG_BM 128
#define SG_BN 128
#define SG_BK 16
#include "matmul_sg.h"

#define SG_TAG 64x128x8
#define SG_BM 64
#define SG_BN 128
#define SG_BK 8
#include "matmul_sg.h"

#define SG_TAG 64x64x16
#define SG_BM 64
#define SG_BN 64
#define SG_BK 16
#include "matmul_sg.h"

/* Bigger work-item tiles (t<TM>x<TN>: 128 outputs, 6 float4 local reads a k step instead of 4 for 64). */
#define SG_TAG 128x128x8t16x8
#define SG_BM 128
#define SG_BN 128
#define SG_BK 8
#define SG_TM 16
#include "matmul_sg.h"

#define SG_TAG 128x128x8t8x16
#define SG_BM 128
#define SG_BN 128
#define SG_BK 8
#define SG_TN 16
#include "matmul_sg.h"

#define SG_TAG 256x128x8t16x8
#define SG_BM 256
#define SG_BN 128
#define SG_BK 8
#define SG_TM 16
#include "matmul_sg.h"

#define SG_TAG 128x256x8t8x16
#define SG_BM 128
#define SG_BN 256
#define SG_BK 8
#define SG_TN 16
#include "matmul_sg.h"
/* More multistage rows (ST stages of BK 8, both operands without registers), after cuBLAS's own picks on
 * the H200: 256x128x8 and 128x256x8 (3 stages for 256 work-items: 37.6 KB of local memory of 48) and
 * 128x128x8 (128 work-items, two an SM), 3 and 5 stages. */
#define SG_TAG 256x128x8t16x8s3
#define SG_BM 256
#define SG_BN 128
#define SG_BK 8
#define SG_TM 16
#define SG_ST 3
#include "matmul_sg.h"

#define SG_TAG 128x256x8t8x16s3
#define SG_BM 128
#define SG_BN 256
#define SG_BK 8
#define SG_TN 16
#define SG_ST 3
#include "matmul_sg.h"

#define SG_TAG 128x128x8t16x8s3
#define SG_BM 128
#define SG_BN 128
#define SG_BK 8
#define SG_TM 16
#define SG_ST 3
#include "matmul_sg.h"

#define SG_TAG 128x128x8t16x8s5
#define SG_BM 128
#define SG_BN 128
#define SG_BK 8
#define SG_TM 16
#define SG_ST 5
#include "matmul_sg.h"
#endif
