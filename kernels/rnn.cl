/* rnn.cl: the fused gate math of one GRU or LSTM step, forward and backward, one work-item per (row b,
 * hidden unit k). Every operand is read through its own offset, row stride and column stride (M_ARGS), so a
 * step's slice of a sequence projection, a transposed view or a bias (row stride 0) costs no copy; outputs are
 * new contiguous tensors. Gate blocks follow torch: GRU (r, z, n), LSTM (i, f, g, o), block j of hidden unit k
 * at column j * H + k. Optional operands are flagged in `mask` and never read when absent. The backward
 * kernels recompute the gates from the saved inputs instead of saving them forward.
 * Families rnn_bf16 / rnn_f16 (-DRNN_HALF=1 / 2) build the step kernels over bfloat16 / float16 operands and
 * outputs: loaded to float32, the math in float32, each output rounded once as stored. */
#ifndef RNN_HALF
#define RNN_HALF 0
#endif
#if RNN_HALF
#include "dtype.h"
#define RNN_T ushort
/* 16-bit operands are gathered as the 32-bit words holding them (within the buffer: pool.c rounds every
 * buffer to 256 bytes or a multiple of 16): PoCL vectorises those gathers, and not 16-bit ones (6x slower). */
inline uint
rnn_bits(global const ushort *p, int i)
{
    const uint w = ((global const uint *)p)[i >> 1];
    return (i & 1) ? w >> 16 : w & 0xffffu;
}

inline float                                         /* float16 bits to float32 without a branch */
rnn_f16(uint h)
{
    const uint s = (h & 0x8000u) << 16, em = h & 0x7fffu;
    const float norm = as_float(s | ((em << 13) + 0x38000000u)), sub = as_float(s | as_uint((float)em * 0x1p-24f));
    return em >= 0x7c00u ? as_float(s | 0x7f800000u | ((h & 0x3ffu) << 13)) : em < 0x400u ? sub : norm;
}
#endif
#if RNN_HALF == 1
#define LD(p, i) as_float(rnn_bits(p, i) << 16)
#define ST(p, i, v) ((p)[i] = tl_bf16_bits(v))
#elif RNN_HALF == 2
#define LD(p, i) rnn_f16(rnn_bits(p, i))
#define ST(p, i, v) vstore_half_rte(v, i, (global half *)(p))
#else
#define RNN_T float
#define LD(p, i) (p)[i]
#define ST(p, i, v) ((p)[i] = (v))
#endif
#define M_ARGS(x) global const RNN_T *x, int x##_o, int x##_rs, int x##_cs
#define AT(x, b, j) LD(x, x##_o + (b) * x##_rs + (j) * x##_cs)
#define OPT(x, bit, b, j) ((mask & (bit)) ? AT(x, b, j) : 0.0f)
#define NOH(x, b, j) ((mask & 8) ? 0.0f : AT(x, b, j))          /* the sequence kernels' gh: none at h = 0 */

static float
sig(float x)
{
    return 1.0f / (1.0f + exp(-x));
}

#if !RNN_HALF
/* Four values of unit k into the four H-wide blocks of a row (a step's kept activations). */
static void
store4(global float *row, int H, int k, float a, float b, float c, float d)
{
    row[k] = a;
    row[H + k] = b;
    row[2 * H + k] = c;
    row[3 * H + k] = d;
}
#endif

/* GRU: the gradients of the pre-activations (a_r, a_z, a_n) from dh' and the gates; d gh_n = d a_n r. */
static float3
gru_dpre(float dh, float r, float z, float n, float ghn, float hp)
{
    float dan = dh * (1.0f - z) * (1.0f - n * n);
    return (float3)(dan * ghn * r * (1.0f - r), dh * (hp - n) * z * (1.0f - z), dan);
}

/* LSTM: the gradients of the four gate pre-activations into d[0 .. 4H) at unit k, from dc, dh' and the gates;
 * cp = c_{t-1}, tc = tanh(c_t). */
static void
lstm_store_dpre(global RNN_T *d, int H, int k, float dc, float dh, float i, float f, float gg, float o, float cp,
                float tc)
{
    ST(d, k, dc * gg * i * (1.0f - i));
    ST(d, H + k, dc * cp * f * (1.0f - f));
    ST(d, 2 * H + k, dc * i * (1.0f - gg * gg));
    ST(d, 3 * H + k, dh * tc * o * (1.0f - o));
}

/* GRU: r = sig(gi_r + gh_r), z = sig(gi_z + gh_z), n = tanh(gi_n + r * gh_n), h' = n + z * (h - n), where
 * gi and gh each get their bias (mask bit 0: b_ih, bit 1: b_hh) added first. GRU_GATES declares r, z, n and
 * gh_n (with its bias) of unit (b, k); the backward recomputes them the same way. */
#define GRU_GATES                                                                                          \
    float ghn = AT(gh, b, 2 * H + k) + OPT(bh, 2, 0, 2 * H + k);                                           \
    float r = sig(AT(gi, b, k) + OPT(bi, 1, 0, k) + AT(gh, b, k) + OPT(bh, 2, 0, k));                       \
    float z = sig(AT(gi, b, H + k) + OPT(bi, 1, 0, H + k) + AT(gh, b, H + k) + OPT(bh, 2, 0, H + k));       \
    float n = tanh(AT(gi, b, 2 * H + k) + OPT(bi, 1, 0, 2 * H + k) + r * ghn)

kernel void
tl_gru_gates_f32(int B, int H, int mask, global RNN_T *out, M_ARGS(gi), M_ARGS(gh), M_ARGS(h), M_ARGS(bi),
                 M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    GRU_GATES;
    ST(out, id, n + z * (AT(h, b, k) - n));
}

/* dh'/d(inputs) for upstream g: dn = g (1 - z), dz = g (h - n), dh = g z; through n's tanh to its
 * pre-activation a_n: d gi_n = a_n', d gh_n = a_n' r, dr = a_n' gh_n; r and z get the same gradient from gi
 * and gh. dgi and dgh are [B, 3H], dh [B, H], all contiguous. */
kernel void
tl_gru_gates_backward_f32(int B, int H, int mask, global RNN_T *dgi, global RNN_T *dgh, global RNN_T *dh,
                          M_ARGS(g), M_ARGS(gi), M_ARGS(gh), M_ARGS(h), M_ARGS(bi), M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    GRU_GATES;
    float up = AT(g, b, k);
    float3 d = gru_dpre(up, r, z, n, ghn, AT(h, b, k));
    int row = b * 3 * H;
    ST(dgi, row + k, d.x);
    ST(dgh, row + k, d.x);
    ST(dgi, row + H + k, d.y);
    ST(dgh, row + H + k, d.y);
    ST(dgi, row + 2 * H + k, d.z);
    ST(dgh, row + 2 * H + k, d.z * r);
    ST(dh, id, up * z);
}

/* LSTM: a = gates (+ gh, mask bit 0) (+ b_ih, bit 1) (+ b_hh, bit 2); i, f, o = sig, g = tanh;
 * c' = f c + i g, h' = o tanh(c'); y is [2, B, H]: h' then c'. */
#define LSTM_PRE(j) (AT(ga, b, (j) * H + k) + OPT(gh, 1, b, (j) * H + k) + OPT(bi, 2, 0, (j) * H + k) + \
                     OPT(bh, 4, 0, (j) * H + k))

kernel void
tl_lstm_gates_f32(int B, int H, int mask, global RNN_T *y, M_ARGS(ga), M_ARGS(gh), M_ARGS(c), M_ARGS(bi),
                  M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float i = sig(LSTM_PRE(0)), f = sig(LSTM_PRE(1)), gg = tanh(LSTM_PRE(2)), o = sig(LSTM_PRE(3));
    float c2 = f * AT(c, b, k) + i * gg;
    ST(y, id, o * tanh(c2));
    ST(y, B * H + id, c2);
}

/* From upstream dh' (dy_h) and dc' (dy_c): dc = dc' + dh' o (1 - tanh(c')^2), then each gate's gradient
 * through its activation; dga [B, 4H] serves gates, gh and the biases alike; dc_prev = dc f. */
kernel void
tl_lstm_gates_backward_f32(int B, int H, int mask, global RNN_T *dga, global RNN_T *dcp, M_ARGS(dyh),
                           M_ARGS(dyc), M_ARGS(ga), M_ARGS(gh), M_ARGS(c), M_ARGS(bi), M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float i = sig(LSTM_PRE(0)), f = sig(LSTM_PRE(1)), gg = tanh(LSTM_PRE(2)), o = sig(LSTM_PRE(3));
    float cp = AT(c, b, k), tc = tanh(f * cp + i * gg);
    float up = AT(dyh, b, k), dc = AT(dyc, b, k) + up * o * (1.0f - tc * tc);
    lstm_store_dpre(dga + b * 4 * H, H, k, dc, up, i, f, gg, o, cp, tc);
    ST(dcp, id, dc * f);
}

#if !RNN_HALF                                        /* the sequence kernels: float32 only */

/* Whole-sequence GRU (gru_sequence): step t reads h_{t-1} from slot t of hs [T+1, B, H] (contiguous; slot 0 is
 * h0) at hp_o and writes h_t into slot t + 1, so the output needs no copy or stack. gh is the step's product
 * h_{t-1} W_hh^T; b_hh is added here (mask bit 0). With mask bit 1 the step keeps r, z, n and gh_n (with its
 * bias) in slot t of act [T, B, 4H] for the backward pass, which then needs no gate math but the derivatives.
 * Mask bit 3: h_{t-1} is zero (step 0 without h0): neither gh nor slot t is read. */
kernel void
tl_gru_seq_step_f32(int B, int H, int mask, global float *hs, int hp_o, global float *act, int act_o, M_ARGS(gi),
                    M_ARGS(gh), M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float ar = AT(gi, b, k) + NOH(gh, b, k) + OPT(bh, 1, 0, k);
    float az = AT(gi, b, H + k) + NOH(gh, b, H + k) + OPT(bh, 1, 0, H + k);
    float ghn = NOH(gh, b, 2 * H + k) + OPT(bh, 1, 0, 2 * H + k);
    float r = sig(ar), z = sig(az);
    float n = tanh(AT(gi, b, 2 * H + k) + r * ghn);
    float hp = (mask & 8) ? 0.0f : hs[hp_o + id];
    hs[hp_o + B * H + id] = n + z * (hp - n);
    if (mask & 2) store4(act + act_o + b * 4 * H, H, k, r, z, n, ghn);
}

/* Step t of the sequence's backward: dh = d out[t] (g, any strides) + (mask bit 0: from step t + 1) carry + mm,
 * where carry is step t + 1's z dh (read and rewritten in place by the same work-item) and mm its d gh W_hh.
 * Writes d gh into slot t of dgh [T, B, 3H] at d_o, d gi likewise (mask bit 1) and z dh into carry. Mask bit 2:
 * h_{t-1} is zero (not read). */
kernel void
tl_gru_seq_backward_f32(int B, int H, int mask, global float *dgi, global float *dgh, int d_o, global float *carry,
                        global const float *mm, M_ARGS(g), global const float *act, int act_o,
                        global const float *hs, int hp_o)
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float dh = AT(g, b, k) + ((mask & 1) ? carry[id] + mm[id] : 0.0f);
    int row = act_o + b * 4 * H;
    float r = act[row + k], z = act[row + H + k], n = act[row + 2 * H + k], ghn = act[row + 3 * H + k];
    float3 d = gru_dpre(dh, r, z, n, ghn, (mask & 4) ? 0.0f : hs[hp_o + id]);
    int o = d_o + b * 3 * H;
    dgh[o + k] = d.x;
    dgh[o + H + k] = d.y;
    dgh[o + 2 * H + k] = d.z * r;
    if (mask & 2) {
        dgi[o + k] = d.x;
        dgi[o + H + k] = d.y;
        dgi[o + 2 * H + k] = d.z;
    }
    carry[id] = dh * z;
}

/* Whole-sequence LSTM (lstm_sequence): as the GRU's, with the cell states in cs [T + 1, B, H] (slot 0 c0): step
 * t reads c_{t-1} at cp_o and writes c_t one slot on; the last step (mask bit 2) also writes c_T into hs at cl_o
 * (slot T + 1, the op's output y[T]). act keeps i, f, g, o (mask bit 1); b_hh is mask bit 0. Mask bit 3: no gh
 * (h_{t-1} is zero), bit 4: c_{t-1} is zero (not read). */
kernel void
tl_lstm_seq_step_f32(int B, int H, int mask, global float *hs, int hp_o, int cl_o, global float *cs, int cp_o,
                     global float *act, int act_o, M_ARGS(gi), M_ARGS(gh), M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
#define SEQ_PRE(j) (AT(gi, b, (j) * H + k) + NOH(gh, b, (j) * H + k) + OPT(bh, 1, 0, (j) * H + k))
    float i = sig(SEQ_PRE(0)), f = sig(SEQ_PRE(1)), gg = tanh(SEQ_PRE(2)), o = sig(SEQ_PRE(3));
#undef SEQ_PRE
    float c2 = ((mask & 16) ? 0.0f : f * cs[cp_o + id]) + i * gg;
    cs[cp_o + B * H + id] = c2;
    hs[hp_o + B * H + id] = o * tanh(c2);
    if (mask & 4) hs[cl_o + id] = c2;
    if (mask & 2) store4(act + act_o + b * 4 * H, H, k, i, f, gg, o);
}

/* Step t of the LSTM sequence's backward: dh = d out[t] (+ mm, step t + 1's d gates W_hh, mask bit 0) and
 * dc = (mask bit 0: carry, step t + 1's dc f; else gc, the gradient of c_T) + dh o (1 - tanh(c_t)^2). Writes
 * the gate gradients into slot t of dga [T, B, 4H] (gi's, gh's and, summed, b_hh's alike) and dc f into carry.
 * Mask bit 2: c_{t-1} is zero (not read). */
kernel void
tl_lstm_seq_backward_f32(int B, int H, int mask, global float *dga, int d_o, global float *carry,
                         global const float *mm, M_ARGS(g), M_ARGS(gc), global const float *act, int act_o,
                         global const float *cs, int cp_o)
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    int row = act_o + b * 4 * H;
    float i = act[row + k], f = act[row + H + k], gg = act[row + 2 * H + k], o = act[row + 3 * H + k];
    float cp = (mask & 4) ? 0.0f : cs[cp_o + id], tc = tanh(cs[cp_o + B * H + id]);
    float dh = AT(g, b, k) + ((mask & 1) ? mm[id] : 0.0f);
    float dc = ((mask & 1) ? carry[id] : AT(gc, b, k)) + dh * o * (1.0f - tc * tc);
    lstm_store_dpre(dga + d_o + b * 4 * H, H, k, dc, dh, i, f, gg, o, cp, tc);
    carry[id] = dc * f;
}
#endif
