/* quant_mvx.h (included by quant.cl): the two-launch integer-dot matrix-vector product, llama.cpp's
 * quantize_q8_1 + mul_mat_vec_q: for big products, where quant_mvq.h's staging of all of x in every
 * work-group (rows x K values re-read and re-quantized per 32 weight rows) costs more than a launch.
 *  - tl_mvq_quantize_x_f32: x (R rows, after the prologue) once per launch into a global scratch (it then
 *    sits in L2): two planes of R * nb 16-byte words (a block's elements 0-15, then 16-31; word (r * nb + b))
 *    and after them R * nb int2 (dx bits, sum q). Global (ceil(8 nb / L) L, R): 8 lanes a block, a float4
 *    each, the values and rounding of quant_mvq.h's staging (quant_mvq_lib.h), the norm's sum in the
 *    same order.
 *  - tl_mvqx_<fmt>_r<RR>_n<NRW>_f32: no local staging and no barrier before the end; warp w of a group owns
 *    the NRW weight rows nw0 + j; lane l takes blocks l, l + 32, ... (the one-launch kernel's map, so the
 *    sums agree bit for bit): NRW 16-byte weight loads (32 bytes for q8_0) and, per activation row, two
 *    16-byte loads of x's planes and one 8-byte load of its scales, from L1/L2; each x block serves NRW
 *    weight rows (NRW 8: half the x traffic of 4, more loads in flight, twice the registers). */

kernel void
tl_mvq_quantize_x_f32(int K, int R, global const float *x, int offx, int sx, global const float *nw, int has_norm,
                      float eps, int glu, global uint *xq, local float *red)
{
    const int L = get_local_size(0), lid = get_local_id(0), r = get_group_id(1), nb = K / 32;
    const global float *xr = x + offx + r * sx;
    if (lid < 32) red[lid] = has_norm ? mvq_ss_part(xr, K, glu, lid) : 0.0f;   /* no barrier in a branch */
    barrier(CLK_LOCAL_MEM_FENCE);
    float tot = 0.0f;
    for (int i = 0; i < 32; i++) tot += red[i];
    const float sc = rsqrt(tot / (float)K + eps);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int u = get_group_id(0) * L + lid, b = u >> 3, p = u & 7, k = b * 32 + 4 * p;
    float4 v = (float4)0.0f;
    if (b < nb) {
        v = mvq_load4(xr, k, K, glu);
        if (has_norm) v *= sc * vload4(0, nw + k);
    }
    const float amax = lanes8_max(max4(v), red);
    int qs;
    const uint word = mvq_quant4(v, amax, &qs);
    qs = lanes8_sum(qs, red);
    if (b < nb) {
        const int t = r * nb + b;
        xq[(p >> 2) * R * nb * 4 + t * 4 + (p & 3)] = word;
        if (p == 0) ((global int2 *)(xq + 8 * R * nb))[t] = (int2)(as_int(amax / 127.0f), qs);
    }
}

/* red: (NRW * RR + 1) * L floats without TL_NV_PTX (MVQ_FINISH), else unused. */
#define MVQX_KERNEL(FMT, RR, NRW)                                                                             \
kernel void                                                                                               \
tl_mvqx_##FMT##_r##RR##_n##NRW##_f32(int N, int K, int R, global const uint4 *xq, global const uint4 *qs4,     \
                                    global const half *d, global float *y, global const float *res,       \
                                    int offr, int has_res, local float *red)                              \
{                                                                                                         \
    const int L = get_local_size(0), lid = get_local_id(0), lane = lid & 31, nb = K / 32;                 \
    const int nw0 = get_group_id(0) * (L / 32) * NRW + (lid >> 5) * NRW;                                  \
    const global int2 *xs = (const global int2 *)(xq + 2 * R * nb);                                       \
    float acc[NRW][RR];                                                                                   \
    MVQ_UNROLL                                                                                            \
    for (int j = 0; j < NRW; j++)                                                                         \
        MVQ_UNROLL                                                                                        \
        for (int r = 0; r < RR; r++) acc[j][r] = 0.0f;                                                    \
    for (int b = lane; b < nb; b += 32)                                                                   \
        MVQ_ROWS(FMT, NRW, RR, b, xq, xs, MVQX_XT, R * nb);                                               \
    MVQ_FINISH(NRW, RR);                                                                                  \
}
#define MVQX_XT(r) (min((r), R - 1) * nb + b)

#define MVQX_KERNELS(FMT, NRW)                                                                                \
    MVQX_KERNEL(FMT, 1, NRW)                                                                                  \
    MVQX_KERNEL(FMT, 2, NRW)                                                                                  \
    MVQX_KERNEL(FMT, 4, NRW)                                                                                  \
    MVQX_KERNEL(FMT, 8, NRW)
MVQX_KERNELS(q4_0, 4)
MVQX_KERNELS(q4_0, 8)
MVQX_KERNELS(q8_0, 4)
MVQX_KERNELS(q8_0, 8)
