/* quant_mvm.cl: the two-launch integer product of 2-8 activation rows on tensor cores,
 * llama.cpp's mmq idea at mmvq's sizes. x is quantized once into the scratch of quant_mvx.h
 * (tl_mvq_quantize_x_f32); then one mma.sync.m16n8k32.s8 takes a block of 32 for 16 weight rows and all 8
 * activation rows at once, where quant_mvx.h's 8-row kernel spends 64 dp4a and 8 int-to-float conversions a
 * weight row. Its int32 sums are exact, so each (weight row, activation row, block) term is quant_mvq_lib.h's,
 * and the terms are added in its order: lane l of 32 takes blocks l, l + 32, ... (here "virtual lane" l, kept
 * by warp l / 4 of the group), then the 32 partial sums meet as warp_sum's butterfly (NVIDIA) or in lane order
 * (elsewhere). So the results are the one-row kernels' bits, and a prompt's rows agree with its decode steps.
 *  - A group is 8 warps and 16 MVM_MT_<fmt> weight rows (32 for q4_0, 16 for q8_0: 16 KB of weights a chunk either
 *    way); the row's blocks go by chunks of 32, warp w taking blocks 4w..4w+3 of a chunk for all the rows.
 *  - Each chunk is first staged in local memory by the whole group with 16-byte loads (a warp reads 512
 *    contiguous bytes: the fragments' own pattern, 8 rows x 16 bytes a load, touched 8 cache lines for 128
 *    bytes and ran at a third of the bandwidth): the weights' words, x's two planes, the weight scales (as
 *    float) and x's (dx, sum q), each word stored at [row][word j][block] with a pitch of MVM_P words, so
 *    one 16-byte local read gives a lane word j of its warp's 4 blocks, and the reads of a quarter warp meet
 *    no bank twice.
 *  - Lane (g = lane / 4, t = lane % 4) holds, per m16 tile, weight rows g and g + 8 and activation row g (the
 *    PTX ISA's m16n8k32 fragments): word t of a block for q4_0 (its low nibbles are elements 4t..4t+3, the
 *    high ones 16+4t..: A's registers 0 and 2) and words t, 4 + t for q8_0, against word t of each of x's
 *    planes (B's registers 0, 1); q4_0's nibbles go in as 0..15 with C = -8 sum q (the one-row kernels'
 *    integer offset).
 *  - The end: the 32 virtual lanes' partial sums of each output through local memory, then added as
 *    warp_sum's butterfly (TL_NV_PTX) or in order (elsewhere).
 *  - Without MVQ_MMA (PoCL; NVIDIA before compute capability 8.0) the mma is emulated through local memory,
 *    fragment by fragment as the PTX ISA lays them out, with two barriers a call (every loop here runs the
 *    same trips in every warp), so the tests check the mapping on any device. */
#include "quant_mvq_lib.h"

#ifndef MVQ_MMA
#define MVQ_MMA 0                                    /* 1 (ops_quant.c: NVIDIA, compute capability 8.0+) */
#endif
#ifndef MVM_MT_q4_0                                  /* m16 tiles a warp, 1 or 2 (ops_quant.c: mvm_rows) */
#define MVM_MT_q4_0 2
#endif
#ifndef MVM_MT_q8_0
#define MVM_MT_q8_0 1
#endif
#ifndef MVM_PIPE_q4_0                                /* 1: the next chunk's global reads in flight meanwhile */
#define MVM_PIPE_q4_0 0                              /* (H200: q4_0's 2 tiles then took 164 registers, 1 group */
#endif                                               /* an SM: 187 us against 131 without; q8_0 188 against 200) */
#ifndef MVM_PIPE_q8_0
#define MVM_PIPE_q8_0 1
#endif
#ifndef MVM_ASYNC                                    /* 1: the weights by 16-byte cp.async copies (with MVQ_MMA; */
#define MVM_ASYNC 0                                  /* plain copies elsewhere), two chunks in local memory */
#endif
#define MVM_CB 32                                    /* blocks a chunk */
#define MVM_P 36                                     /* local pitch of a word's 32 blocks (banks: 4 apart) */
#define MVM_RP(W) ((W) * MVM_P + ((W) == 8 ? 16 : 0))   /* a weight row's pitch: rows g, g + 1 16 banks apart */
#define MVM_EMU_WORDS 192                            /* a warp's emulation scratch: A 16 x 8, B 8 x 8 words */

/* D = A B + C for one m16n8k32 tile of int8: a holds A's registers 0-3 (rows g, g + 8, g, g + 8; k words t,
 * t, 4 + t, 4 + t), b B's (column g; k words t, 4 + t), c and the result C / D's (rows g, g, g + 8, g + 8;
 * columns 2t, 2t + 1, 2t, 2t + 1). emu: the warp's MVM_EMU_WORDS words of local memory (emulation only). */
inline int4
mvm_mma(uint4 a, uint2 b, int4 c, local uint *emu)
{
#if TL_NV_PTX && MVQ_MMA
    (void)emu;
    int4 r;
    MVQ_ASM("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%10, %11, %12, %13};"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
            : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y), "r"(c.x), "r"(c.y), "r"(c.z), "r"(c.w));
    return r;
#else
    const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
    local uint *sa = emu, *sb = emu + 128;          /* sa[row * 8 + k word], sb[column * 8 + k word] */
    sa[g * 8 + t] = a.x;
    sa[(g + 8) * 8 + t] = a.y;
    sa[g * 8 + 4 + t] = a.z;
    sa[(g + 8) * 8 + 4 + t] = a.w;
    sb[g * 8 + t] = b.x;
    sb[g * 8 + 4 + t] = b.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < 8; k++) {
        c.x = dot4(sa[g * 8 + k], sb[2 * t * 8 + k], c.x);
        c.y = dot4(sa[g * 8 + k], sb[(2 * t + 1) * 8 + k], c.y);
        c.z = dot4(sa[(g + 8) * 8 + k], sb[2 * t * 8 + k], c.z);
        c.w = dot4(sa[(g + 8) * 8 + k], sb[(2 * t + 1) * 8 + k], c.w);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return c;
#endif
}

/* 16 bytes from global p to local d: cp.async (compute capability 8.0+: no registers on the way, complete at
 * mvm_cp_wait) or a plain copy. mvm_cp_commit closes a group of copies; mvm_cp_wait(1) waits for all but the
 * newest group, mvm_cp_wait(0) for all. */
inline void
mvm_cp16(local uint4 *d, const global uint4 *p)
{
#if TL_NV_PTX && MVQ_MMA
    MVQ_ASM volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint)(uintptr_t)d), "l"((ulong)(uintptr_t)p)
                     : "memory");
#else
    *d = *p;
#endif
}

inline void
mvm_cp_commit(void)
{
#if TL_NV_PTX && MVQ_MMA
    MVQ_ASM volatile("cp.async.commit_group;" ::: "memory");
#endif
}

inline void
mvm_cp_wait(int newest_pending)
{
#if TL_NV_PTX && MVQ_MMA
    if (newest_pending) MVQ_ASM volatile("cp.async.wait_group 1;" ::: "memory");
    else MVQ_ASM volatile("cp.async.wait_group 0;" ::: "memory");
#else
    (void)newest_pending;
#endif
}

/* Four values at local p (16-byte aligned; T4 their vector type) into a[0..3]. */
#ifndef MVM_SCALAR
#define MVM_SCALAR 0                                 /* 1: four scalar local reads (a diagnostic) */
#endif
#if MVM_SCALAR
#define MVM_LD4(T4, a, p)                                                                                     \
    do {                                                                                                      \
        a[0] = (p)[0]; a[1] = (p)[1]; a[2] = (p)[2]; a[3] = (p)[3];                                           \
    } while (0)
#else
#define MVM_LD4(T4, a, p)                                                                                     \
    do {                                                                                                      \
        const T4 v_ = *(local const T4 *)(p);                                                                 \
        a[0] = v_.x; a[1] = v_.y; a[2] = v_.z; a[3] = v_.w;                                                   \
    } while (0)
#endif

/* Per format: A's registers of block i from the words a lane read (wa: row g, wb: row g + 8; word t, and
 * for q8_0 wa2 / wb2 word 4 + t), and the C that folds in the offset (q4_0: -8 sum q of the column's block). */
#define MVM_A_q4_0(i) ((uint4)(wa[i] & 0x0F0F0F0Fu, wb[i] & 0x0F0F0F0Fu, (wa[i] >> 4) & 0x0F0F0F0Fu,          \
                               (wb[i] >> 4) & 0x0F0F0F0Fu))
#define MVM_A_q8_0(i) ((uint4)(wa[i], wb[i], wa2[i], wb2[i]))
#define MVM_C_q4_0(s0, s1) ((int4)(-8 * (s0), -8 * (s1), -8 * (s0), -8 * (s1)))
#define MVM_C_q8_0(s0, s1) ((int4)0)
#define MVM_W_q4_0 4
#define MVM_W_q8_0 8

/* The global reads of the chunk from block c into the kernel's gw, gx, gd, gs (indices clamped inside the
 * arrays; rows of x past R repeat row R - 1): 16-byte words of the weights and of x's planes, the weight
 * scales, x's (dx, sum q). */
#define MVM_FETCH(c)                                                                                          \
    do {                                                                                                      \
        MVQ_UNROLL                                                                                            \
        for (int u_ = 0; u_ < (ASY ? 0 : ROWS * MVM_CB * W4 / 256); u_++) {                                   \
            const int k = lid + 256 * u_, row = k / (MVM_CB * W4), blk = (k / W4) % MVM_CB, h = k % W4;       \
            gw[u_] = qs4[(min(n0 + row, N - 1) * nb + min((c) + blk, nb - 1)) * W4 + h];                      \
        }                                                                                                     \
        MVQ_UNROLL                                                                                            \
        for (int u_ = 0; u_ < 2; u_++) {                                                                      \
            const int k = lid + 256 * u_, pl = k / (8 * MVM_CB), r = (k / MVM_CB) % 8, blk = k % MVM_CB;      \
            gx[u_] = xq[pl * R * nb + min(r, R - 1) * nb + min((c) + blk, nb - 1)];                           \
        }                                                                                                     \
        MVQ_UNROLL                                                                                            \
        for (int u_ = 0; u_ < ROWS * MVM_CB / 256; u_++) {                                                    \
            const int k = lid + 256 * u_;                                                                     \
            gd[u_] = vload_half(min(n0 + k / MVM_CB, N - 1) * nb + min((c) + k % MVM_CB, nb - 1), d);         \
        }                                                                                                     \
        gs = xs[min(lid / MVM_CB, R - 1) * nb + min((c) + lid % MVM_CB, nb - 1)];                             \
    } while (0)

/* MVM_ASYNC: the chunk from block c copied into weight buffer buf (ROWS rows of CBW words: its 16-byte units
 * in their global order, unit u of a row at u ^ (row & 7), so the 4-byte reads of a lane's word t of a block
 * by rows g = 0..7 fall on 32 distinct banks). */
#define MVM_COPY(c, buf)                                                                                      \
    do {                                                                                                      \
        MVQ_UNROLL                                                                                            \
        for (int u_ = 0; u_ < ROWS * MVM_CB * W4 / 256; u_++) {                                               \
            const int k = lid + 256 * u_, row = k / (MVM_CB * W4), un = k % (MVM_CB * W4);                    \
            mvm_cp16((local uint4 *)(sw + ((buf) * ROWS + row) * CBW) + (un ^ (row & 7)),                     \
                     qs4 + (min(n0 + row, N - 1) * nb + min((c) + un / W4, nb - 1)) * W4 + un % W4);          \
        }                                                                                                     \
        mvm_cp_commit();                                                                                      \
    } while (0)

/* red (ops_quant.c's launch_mvm): the chunk's staging (sw: ROWS x MVM_RP(W) weight words, or with MVM_ASYNC
 * two buffers of ROWS x CBW; sx: 2 planes x 8 rows x 4 words x MVM_P; the weight scales: ROWS x MVM_P floats,
 * or halves with MVM_ASYNC (48 KB of local memory would not hold float ones beside two q4_0 buffers); sdx /
 * ssq: 8 x MVM_P) or, after the loop, the partial sums (32 x ROWS x 8); then, without MVQ_MMA, 8 x
 * MVM_EMU_WORDS words of emulation scratch. 256 work-items a group. */
#define MVM_KERNEL(FMT)                                                                                       \
kernel void                                                                                                   \
tl_mvqm_##FMT##_f32(int N, int K, int R, global const uint4 *xq, global const uint4 *qs4,                     \
                    global const half *d, global float *y, global const float *res, int offr, int has_res,    \
                    local uint4 *red4)                                                                        \
{                                                                                                             \
    local float *red = (local float *)red4;              /* a 16-byte element: 16-byte reads within */        \
    enum { MT = MVM_MT_##FMT, ROWS = 16 * MT, W = MVM_W_##FMT, W4 = W / 4, RP = MVM_RP(W) };                  \
    enum { PIPE = MVM_PIPE_##FMT, ASY = MVM_ASYNC, CBW = MVM_CB * W };                                        \
    enum { SW = ASY ? 2 * ROWS * CBW : ROWS * RP, SD = ASY ? ROWS * MVM_P / 2 : ROWS * MVM_P };               \
    const int lid = get_local_id(0), w = lid >> 5, g = (lid & 31) >> 2, t = lid & 3, nb = K / 32;             \
    const int n0 = get_group_id(0) * ROWS;                                                                    \
    local uint *sw = (local uint *)red, *sx = sw + SW;                                                        \
    local float *sdw = (local float *)(sx + 2 * 8 * 4 * MVM_P), *sdx = sdw + SD;                              \
    local half *sdh = (local half *)sdw;                                                                      \
    local int *ssq = (local int *)(sdx + 8 * MVM_P);                                                          \
    local uint *emu = (local uint *)red + max(SW + SD + (2 * 8 * 4 + 16) * MVM_P, 32 * ROWS * 8)              \
                      + w * MVM_EMU_WORDS;                                                                    \
    const global int2 *xs = (const global int2 *)(xq + 2 * R * nb);                                           \
    float acc[MT][4][4];                                                                                      \
    MVQ_UNROLL                                                                                                \
    for (int m = 0; m < MT; m++)                                                                              \
        MVQ_UNROLL                                                                                            \
        for (int e = 0; e < 4; e++)                                                                           \
            MVQ_UNROLL                                                                                        \
            for (int i = 0; i < 4; i++) acc[m][e][i] = 0.0f;                                                  \
    uint4 gw[ROWS * MVM_CB * W4 / 256], gx[2];         /* the next chunk, in flight during this one */        \
    float gd[ROWS * MVM_CB / 256];                                                                            \
    int2 gs;                                                                                                  \
    if (ASY) MVM_COPY(0, 0);                                                                                  \
    if (PIPE) MVM_FETCH(0);                                                                                   \
    for (int c0 = 0, s = 0; c0 < nb; c0 += MVM_CB, s ^= 1) {                                                  \
        if (!PIPE) MVM_FETCH(c0);                                                                             \
        MVQ_UNROLL                                                                                            \
        for (int u_ = 0; u_ < (ASY ? 0 : ROWS * MVM_CB * W4 / 256); u_++) {   /* the weights' 16-byte words */\
            const int k = lid + 256 * u_, row = k / (MVM_CB * W4), blk = (k / W4) % MVM_CB, h = k % W4;       \
            local uint *o = sw + row * RP + 4 * h * MVM_P + blk;                                              \
            o[0] = gw[u_].x; o[MVM_P] = gw[u_].y; o[2 * MVM_P] = gw[u_].z; o[3 * MVM_P] = gw[u_].w;           \
        }                                                                                                     \
        MVQ_UNROLL                                                                                            \
        for (int u_ = 0; u_ < 2; u_++) {                     /* x's planes */                                 \
            const int k = lid + 256 * u_, pl = k / (8 * MVM_CB), r = (k / MVM_CB) % 8, blk = k % MVM_CB;      \
            local uint *o = sx + (pl * 8 + r) * 4 * MVM_P + blk;                                              \
            o[0] = gx[u_].x; o[MVM_P] = gx[u_].y; o[2 * MVM_P] = gx[u_].z; o[3 * MVM_P] = gx[u_].w;           \
        }                                                                                                     \
        MVQ_UNROLL                                                                                            \
        for (int u_ = 0; u_ < ROWS * MVM_CB / 256; u_++) {                                                    \
            const int k = lid + 256 * u_;                                                                     \
            if (ASY) vstore_half(gd[u_], (k / MVM_CB) * MVM_P + k % MVM_CB, sdh);   /* exact: it was a half */  \
            else sdw[(k / MVM_CB) * MVM_P + k % MVM_CB] = gd[u_];                                             \
        }                                                                                                     \
        sdx[(lid / MVM_CB) * MVM_P + lid % MVM_CB] = as_float(gs.x);                                          \
        ssq[(lid / MVM_CB) * MVM_P + lid % MVM_CB] = gs.y;                                                    \
        if (ASY && c0 + MVM_CB < nb) {       /* the next chunk into the other buffer (last read before the */  \
            MVM_COPY(c0 + MVM_CB, s ^ 1);    /* previous iteration's closing barrier), then this one's wait */ \
            mvm_cp_wait(1);                                                                                   \
        } else if (ASY) {                                                                                     \
            mvm_cp_wait(0);                                                                                   \
        }                                                                                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                         \
        if (PIPE && c0 + MVM_CB < nb) MVM_FETCH(c0 + MVM_CB);                                                 \
        {                                                                                                     \
            const int b4 = 4 * w;                                                                             \
            uint p0[4], p1[4];                                                                                \
            float dx0[4], dx1[4];                                                                             \
            int sq0[4], sq1[4];                                                                               \
            MVM_LD4(uint4, p0, sx + (g * 4 + t) * MVM_P + b4);                                                \
            MVM_LD4(uint4, p1, sx + ((8 + g) * 4 + t) * MVM_P + b4);                                          \
            MVM_LD4(float4, dx0, sdx + 2 * t * MVM_P + b4);                                                   \
            MVM_LD4(float4, dx1, sdx + (2 * t + 1) * MVM_P + b4);                                             \
            MVM_LD4(int4, sq0, ssq + 2 * t * MVM_P + b4);                                                     \
            MVM_LD4(int4, sq1, ssq + (2 * t + 1) * MVM_P + b4);                                               \
            MVQ_UNROLL                                                                                        \
            for (int m = 0; m < MT; m++) {                                                                    \
                const int ra = 16 * m + g, rb = ra + 8;                                                       \
                uint wa[4], wb[4], wa2[4], wb2[4];                                                            \
                float da[4], db[4];                                                                           \
                if (ASY) {                   /* buffer s: rows ra and rb, unit u at u ^ g (ra & 7 == g) */     \
                    local const uint *pa = sw + (s * ROWS + ra) * CBW + t, *pb = pa + 8 * CBW;               \
                    MVQ_UNROLL                                                                                \
                    for (int i = 0; i < 4; i++) {                                                             \
                        const int u = (b4 + i) * W4;                                                          \
                        wa[i] = pa[(u ^ g) * 4], wb[i] = pb[(u ^ g) * 4];                                     \
                        if (W == 8) wa2[i] = pa[((u + 1) ^ g) * 4], wb2[i] = pb[((u + 1) ^ g) * 4];           \
                    }                                                                                         \
                    const float4 ha = vload_half4(0, sdh + ra * MVM_P + b4);                                  \
                    const float4 hb = vload_half4(0, sdh + rb * MVM_P + b4);                                  \
                    da[0] = ha.x, da[1] = ha.y, da[2] = ha.z, da[3] = ha.w;                                   \
                    db[0] = hb.x, db[1] = hb.y, db[2] = hb.z, db[3] = hb.w;                                   \
                } else {                                                                                      \
                    MVM_LD4(uint4, wa, sw + ra * RP + t * MVM_P + b4);                                        \
                    MVM_LD4(uint4, wb, sw + rb * RP + t * MVM_P + b4);                                        \
                    if (W == 8) {                                                                             \
                        MVM_LD4(uint4, wa2, sw + ra * RP + (4 + t) * MVM_P + b4);                             \
                        MVM_LD4(uint4, wb2, sw + rb * RP + (4 + t) * MVM_P + b4);                             \
                    }                                                                                         \
                    MVM_LD4(float4, da, sdw + ra * MVM_P + b4);                                               \
                    MVM_LD4(float4, db, sdw + rb * MVM_P + b4);                                               \
                }                                                                                             \
                MVQ_UNROLL                                                                                    \
                for (int i = 0; i < 4; i++) {                                                                 \
                    const int4 r = mvm_mma(MVM_A_##FMT(i), (uint2)(p0[i], p1[i]),                             \
                                           MVM_C_##FMT(sq0[i], sq1[i]), emu);                                 \
                    if (c0 + b4 + i < nb) {                                                                   \
                        acc[m][0][i] = mad(da[i] * dx0[i], (float)r.x, acc[m][0][i]);                         \
                        acc[m][1][i] = mad(da[i] * dx1[i], (float)r.y, acc[m][1][i]);                         \
                        acc[m][2][i] = mad(db[i] * dx0[i], (float)r.z, acc[m][2][i]);                         \
                        acc[m][3][i] = mad(db[i] * dx1[i], (float)r.w, acc[m][3][i]);                         \
                    }                                                                                         \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                         \
    }                                                                                                         \
    MVQ_UNROLL                                                                                                \
    for (int m = 0; m < MT; m++)                                                                              \
        MVQ_UNROLL                                                                                            \
        for (int e = 0; e < 4; e++)                                                                           \
            MVQ_UNROLL                                                                                        \
            for (int i = 0; i < 4; i++)                                                                       \
                red[((4 * w + i) * ROWS + 16 * m + g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)] = acc[m][e][i];   \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                             \
    if (lid < ROWS * 8) {                                                                                     \
        const int q = lid >> 3, col = lid & 7, n = n0 + q;                                                    \
        const float s_ = mvm_sum32(red + q * 8 + col, ROWS * 8);                                              \
        if (n < N && col < R) y[col * N + n] = has_res ? s_ + res[offr + col * N + n] : s_;                   \
    }                                                                                                         \
}

/* The total of p[0], p[st], ..., p[31 st] (virtual lanes 0-31 of one output) in warp_sum's order: the butterfly
 * (lanes l and l ^ 16 first, ..., l ^ 1 last; every lane's total is lane 0's) under TL_NV_PTX, else from lane 0
 * up (MVQ_FINISH's local-memory form). */
inline float
mvm_sum32(local const float *p, int st)
{
#if TL_NV_PTX
    float s[16];
    MVQ_UNROLL
    for (int v = 0; v < 16; v++) s[v] = p[v * st] + p[(v + 16) * st];
    MVQ_UNROLL
    for (int v = 0; v < 8; v++) s[v] = s[v] + s[v + 8];
    MVQ_UNROLL
    for (int v = 0; v < 4; v++) s[v] = s[v] + s[v + 4];
    return (s[0] + s[2]) + (s[1] + s[3]);
#else
    float s = 0.0f;
    for (int v = 0; v < 32; v++) s += p[v * st];
    return s;
#endif
}

MVM_KERNEL(q4_0)
MVM_KERNEL(q8_0)
