/* quant_mvm.h (included by quant.cl): the two-launch integer product of 2-8 activation rows on tensor cores,
 * llama.cpp's mmq idea at mmvq's sizes. x is quantized once into the scratch of quant_mvx.h
 * (tl_mvq_quantize_x_f32); then one mma.sync.m16n8k32.s8 takes a block of 32 for 16 weight rows and all
 * 8 activation rows at once, where quant_mvx.h's 8-row kernel spends 64 dp4a a weight row. Its int32 sums
 * are exact, so each (weight row, activation row, block) term is quant_mvq_lib.h's, and the terms are added in
 * its order: lane l of 32 takes blocks l, l + 32, ... (here "virtual lane" l, kept by warp l % 8 of the
 * group), then the 32 partial sums meet as warp_sum's butterfly (NVIDIA) or in lane order (elsewhere)
 * meets them. So the results are the one-row kernels' bits, and a prompt's rows agree with its decode steps.
 *  - A group is 8 warps and MVM_ROWS = 16 MVM_MT weight rows; warp w takes blocks 32 c + w + 8 i (i < 4,
 *    virtual lanes w + 8 i) of all of them. Lane (g = lane / 4, t = lane % 4) holds, per m16 tile, weight
 *    rows g and g + 8 of the tile and activation row g (the PTX ISA's m16n8k32 fragments): from a block,
 *    word t of a q4_0 row (its low nibbles are elements 4t..4t+3, the high ones 16+4t..: A's registers 0
 *    and 2) or words t and 4 + t of a q8_0 row, and word t of each of x's two planes (B's registers 0, 1).
 *    q4_0's nibbles go in as 0..15 with C = -8 sum q (the one-row kernels' integer offset).
 *  - The end: each lane's 4 partials of an output (virtual lanes w, w+8, w+16, w+24) added as the
 *    butterfly's first two levels, the 8 warps' sums through local memory for the last three (NVIDIA);
 *    elsewhere all 32 partials through local memory, added in order.
 *  - Without MVQ_MMA (PoCL; NVIDIA before compute capability 8.0) the mma is emulated through local memory,
 *    fragment by fragment as the PTX ISA lays them out, with two barriers a call (every loop here runs the
 *    same trips in every warp), so the tests check the mapping on any device. */
#ifndef MVQ_MMA
#define MVQ_MMA 0                                    /* 1 (ops_quant.c: NVIDIA, compute capability 8.0+) */
#endif
#define MVM_MT 2                                     /* m16 tiles a warp: ops_quant.c knows MVM_ROWS */
#define MVM_ROWS (16 * MVM_MT)
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

/* v of lane t ^ 2 of the quad (shfl.sync on NVIDIA; elsewhere through the warp's emulation words). */
inline uint
mvm_xchg2(uint v, local uint *emu)
{
#if TL_NV_PTX
    (void)emu;
    uint r;
    MVQ_ASM volatile("shfl.sync.bfly.b32 %0, %1, 2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
#else
    const int lane = get_local_id(0) & 31;
    emu[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    v = emu[lane ^ 2];
    barrier(CLK_LOCAL_MEM_FENCE);
    return v;
#endif
}

/* Per format, a pair of blocks b0, b0 + 1 of weight rows ra (g) and rb (g + 8): A's registers of each (a[0],
 * a[1]) from 8-byte loads (a warp's load is 8 rows x 32 bytes, whole sectors), and the x words that meet
 * them in B (bx[h]: the word pair of activation row xr, block b0 + h). q8_0: lane t takes words 2t, 2t + 1
 * of a block (elements 8t..8t+7: A's registers 0 and 2; in x, plane t / 2, words 2 (t % 2) and the next).
 * q4_0: lane t loads words 2 (t % 2), 2 (t % 2) + 1 of block b0 + t / 2, then swaps one word with lane
 * t ^ 2, so it holds word j = 2 (t % 2) + t / 2 of both blocks: low nibbles elements 4j..4j+3 (register 0,
 * x's plane 0 word j), high ones 16+4j.. (register 2, plane 1 word j). A second block past the row's end
 * (odd nb) repeats the first (its load stays inside the array; the kernel ignores its result). */
inline void
mvm_pair_q4_0(const global uint4 *qs4, const global uint *xw, int R, int xr, int ra, int rb, int nb, int b0,
              int t, uint4 *a, uint2 *bx, local uint *emu)
{
    const global uint2 *q = (const global uint2 *)qs4;   /* a block is two of these */
    const int bl = min(b0 + (t >> 1), nb - 1), j = 2 * (t & 1) + (t >> 1), hi = t >> 1;
    const uint2 ua = q[(ra * nb + bl) * 2 + (t & 1)], ub = q[(rb * nb + bl) * 2 + (t & 1)];
    const uint ra_ = mvm_xchg2(hi ? ua.x : ua.y, emu), rb_ = mvm_xchg2(hi ? ub.x : ub.y, emu);
    const uint m = 0x0F0F0F0Fu;
    const uint wa0 = hi ? ra_ : ua.x, wa1 = hi ? ua.y : ra_, wb0 = hi ? rb_ : ub.x, wb1 = hi ? ub.y : rb_;
    a[0] = (uint4)(wa0 & m, wb0 & m, (wa0 >> 4) & m, (wb0 >> 4) & m);
    a[1] = (uint4)(wa1 & m, wb1 & m, (wa1 >> 4) & m, (wb1 >> 4) & m);
    for (int h = 0; h < 2; h++) {
        const int x = (xr + min(b0 + h, nb - 1)) * 4 + j;
        bx[h] = (uint2)(xw[x], xw[R * nb * 4 + x]);
    }
}
#define MVM_C_q4_0(s0, s1) ((int4)(-8 * (s0), -8 * (s1), -8 * (s0), -8 * (s1)))

inline void
mvm_pair_q8_0(const global uint4 *qs4, const global uint *xw, int R, int xr, int ra, int rb, int nb, int b0,
              int t, uint4 *a, uint2 *bx, local uint *emu)
{
    (void)emu;
    const global uint2 *q = (const global uint2 *)qs4;   /* a block is four of these */
    const global uint2 *x2 = (const global uint2 *)(xw + (t >> 1) * R * nb * 4);
    for (int h = 0; h < 2; h++) {
        const int b = min(b0 + h, nb - 1);
        const uint2 ua = q[(ra * nb + b) * 4 + t], ub = q[(rb * nb + b) * 4 + t];
        a[h] = (uint4)(ua.x, ub.x, ua.y, ub.y);
        bx[h] = x2[(xr + b) * 2 + (t & 1)];
    }
}
#define MVM_C_q8_0(s0, s1) ((int4)0)

/* red: the partial sums (16 x MVM_ROWS x 8 floats with TL_NV_PTX, else 32 x MVM_ROWS x 8), then, without
 * MVQ_MMA, 8 x MVM_EMU_WORDS words of emulation scratch. The group has 256 work-items. Warp w takes block
 * pairs 32 c + 2 w and 32 c + 16 + 2 w: block i < 4 of a chunk is virtual lane 2 w + i % 2 + 16 (i / 2). */
#define MVM_KERNEL(FMT)                                                                                       \
kernel void                                                                                               \
tl_mvqm_##FMT##_f32(int N, int K, int R, global const uint4 *xq, global const uint4 *qs4,                     \
                    global const half *d, global float *y, global const float *res, int offr, int has_res,  \
                    local float *red)                                                                       \
{                                                                                                         \
    const int lid = get_local_id(0), w = lid >> 5, g = (lid & 31) >> 2, t = lid & 3, nb = K / 32;         \
    const int n0 = get_group_id(0) * MVM_ROWS, nparts = TL_NV_PTX ? 16 : 32;                              \
    const global uint *xw = (const global uint *)xq;                                                      \
    const global int2 *xs = (const global int2 *)(xq + 2 * R * nb);                                       \
    const int xr = min(g, R - 1) * nb, c0 = min(2 * t, R - 1) * nb, c1 = min(2 * t + 1, R - 1) * nb;     \
    local uint *emu = (local uint *)red + nparts * MVM_ROWS * 8 + w * MVM_EMU_WORDS;                      \
    int rw[MVM_MT][2];                                                                                    \
    float acc[MVM_MT][4][4];                                                                              \
    MVQ_UNROLL                                                                                            \
    for (int m = 0; m < MVM_MT; m++) {                                                                    \
        rw[m][0] = min(n0 + 16 * m + g, N - 1);                                                           \
        rw[m][1] = min(n0 + 16 * m + g + 8, N - 1);                                                       \
        MVQ_UNROLL                                                                                        \
        for (int e = 0; e < 4; e++)                                                                       \
            MVQ_UNROLL                                                                                    \
            for (int i = 0; i < 4; i++) acc[m][e][i] = 0.0f;                                              \
    }                                                                                                     \
    for (int cb = 2 * w; cb < nb + 2 * w; cb += 32) {    /* the same trips in every warp */               \
        MVQ_UNROLL                                                                                        \
        for (int p = 0; p < 2; p++) {                                                                     \
            const int b0 = cb + 16 * p;                                                                   \
            uint4 a[MVM_MT][2];                                                                           \
            uint2 bx[2];                                                                                  \
            MVQ_UNROLL                                                                                    \
            for (int m = 0; m < MVM_MT; m++)                                                              \
                mvm_pair_##FMT(qs4, xw, R, xr, rw[m][0], rw[m][1], nb, b0, t, a[m], bx, emu);             \
            MVQ_UNROLL                                                                                    \
            for (int h = 0; h < 2; h++) {                                                                 \
                const int bb = b0 + h, b = min(bb, nb - 1), i = 2 * p + h;                                \
                const int2 s0 = xs[c0 + b], s1 = xs[c1 + b];                                              \
                const float dx0 = as_float(s0.x), dx1 = as_float(s1.x);                                   \
                MVQ_UNROLL                                                                                \
                for (int m = 0; m < MVM_MT; m++) {                                                        \
                    const float da = vload_half(rw[m][0] * nb + b, d), db = vload_half(rw[m][1] * nb + b, d); \
                    const int4 r = mvm_mma(a[m][h], bx[h], MVM_C_##FMT(s0.y, s1.y), emu);                 \
                    if (bb < nb) {                                                                        \
                        acc[m][0][i] = mad(da * dx0, (float)r.x, acc[m][0][i]);                           \
                        acc[m][1][i] = mad(da * dx1, (float)r.y, acc[m][1][i]);                           \
                        acc[m][2][i] = mad(db * dx0, (float)r.z, acc[m][2][i]);                           \
                        acc[m][3][i] = mad(db * dx1, (float)r.w, acc[m][3][i]);                           \
                    }                                                                                     \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    MVM_FINISH();                                                                                         \
}

/* Output (row q, column e) of the tile's lane: local row 16 m + g (+ 8 for e >= 2), activation row 2t + e % 2. */
#define MVM_AT(p, m, e) red[((p) * MVM_ROWS + 16 * (m) + g + 8 * ((e) >> 1)) * 8 + 2 * t + ((e) & 1)]
#define MVM_OUT(s)                                                                                            \
    if (n < N && col < R) y[col * N + n] = has_res ? (s) + res[offr + col * N + n] : (s)
#if TL_NV_PTX
/* warp_sum's butterfly: level 1 (virtual lanes v, v + 16) in the lane, levels 2-5 over red's 16 sums. */
#define MVM_FINISH()                                                                                          \
    MVQ_UNROLL                                                                                                \
    for (int m = 0; m < MVM_MT; m++)                                                                          \
        MVQ_UNROLL                                                                                            \
        for (int e = 0; e < 4; e++) {                                                                         \
            MVM_AT(2 * w, m, e) = acc[m][e][0] + acc[m][e][2];                                                \
            MVM_AT(2 * w + 1, m, e) = acc[m][e][1] + acc[m][e][3];                                            \
        }                                                                                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                             \
    {                                                                                                         \
        const int q = lid >> 3, col = lid & 7, n = n0 + q;                                                    \
        float s[16];                                                                                          \
        MVQ_UNROLL                                                                                            \
        for (int v = 0; v < 16; v++) s[v] = red[(v * MVM_ROWS + q) * 8 + col];                               \
        MVQ_UNROLL                                                                                            \
        for (int v = 0; v < 8; v++) s[v] = s[v] + s[v + 8];                                                   \
        MVQ_UNROLL                                                                                            \
        for (int v = 0; v < 4; v++) s[v] = s[v] + s[v + 4];                                                   \
        MVM_OUT((s[0] + s[2]) + (s[1] + s[3]));                                                               \
    }
#else
#define MVM_FINISH()                                                                                          \
    MVQ_UNROLL                                                                                                \
    for (int m = 0; m < MVM_MT; m++)                                                                          \
        MVQ_UNROLL                                                                                            \
        for (int e = 0; e < 4; e++)                                                                           \
            MVQ_UNROLL                                                                                        \
            for (int i = 0; i < 4; i++) MVM_AT(2 * w + (i & 1) + 16 * (i >> 1), m, e) = acc[m][e][i];         \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                             \
    {                                                                                                         \
        const int q = lid >> 3, col = lid & 7, n = n0 + q;                                                    \
        float s = 0.0f;                                                                                       \
        for (int v = 0; v < 32; v++) s += red[(v * MVM_ROWS + q) * 8 + col];                                  \
        MVM_OUT(s);                                                                                           \
    }
#endif

MVM_KERNEL(q4_0)
MVM_KERNEL(q8_0)
