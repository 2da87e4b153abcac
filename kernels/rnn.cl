/* rnn.cl: the fused gate math of one GRU or LSTM step, forward and backward, one work-item per (row b,
 * hidden unit k). Every operand is read through its own offset, row stride and column stride (M_ARGS), so a
 * step's slice of a sequence projection, a transposed view or a bias (row stride 0) costs no copy; outputs are
 * new contiguous tensors. Gate blocks follow torch: GRU (r, z, n), LSTM (i, f, g, o), block j of hidden unit k
 * at column j * H + k. Optional operands are flagged in `mask` and never read when absent. The backward
 * kernels recompute the gates from the saved inputs instead of saving them forward. */
#define M_ARGS(x) global const float *x, int x##_o, int x##_rs, int x##_cs
#define AT(x, b, j) x[x##_o + (b) * x##_rs + (j) * x##_cs]
#define OPT(x, bit, b, j) ((mask & (bit)) ? AT(x, b, j) : 0.0f)

static float
sig(float x)
{
    return 1.0f / (1.0f + exp(-x));
}

/* GRU: r = sig(gi_r + gh_r), z = sig(gi_z + gh_z), n = tanh(gi_n + r * gh_n), h' = n + z * (h - n), where
 * gi and gh each get their bias (mask bit 0: b_ih, bit 1: b_hh) added first. */
kernel void
tl_gru_gates_f32(int B, int H, int mask, global float *out, M_ARGS(gi), M_ARGS(gh), M_ARGS(h), M_ARGS(bi),
                 M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float ar = AT(gi, b, k) + OPT(bi, 1, 0, k) + AT(gh, b, k) + OPT(bh, 2, 0, k);
    float az = AT(gi, b, H + k) + OPT(bi, 1, 0, H + k) + AT(gh, b, H + k) + OPT(bh, 2, 0, H + k);
    float ghn = AT(gh, b, 2 * H + k) + OPT(bh, 2, 0, 2 * H + k);
    float r = sig(ar), z = sig(az);
    float n = tanh(AT(gi, b, 2 * H + k) + OPT(bi, 1, 0, 2 * H + k) + r * ghn);
    out[id] = n + z * (AT(h, b, k) - n);
}

/* dh'/d(inputs) for upstream g: dn = g (1 - z), dz = g (h - n), dh = g z; through n's tanh to its
 * pre-activation a_n: d gi_n = a_n', d gh_n = a_n' r, dr = a_n' gh_n; r and z get the same gradient from gi
 * and gh. dgi and dgh are [B, 3H], dh [B, H], all contiguous. */
kernel void
tl_gru_gates_backward_f32(int B, int H, int mask, global float *dgi, global float *dgh, global float *dh,
                          M_ARGS(g), M_ARGS(gi), M_ARGS(gh), M_ARGS(h), M_ARGS(bi), M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float ar = AT(gi, b, k) + OPT(bi, 1, 0, k) + AT(gh, b, k) + OPT(bh, 2, 0, k);
    float az = AT(gi, b, H + k) + OPT(bi, 1, 0, H + k) + AT(gh, b, H + k) + OPT(bh, 2, 0, H + k);
    float ghn = AT(gh, b, 2 * H + k) + OPT(bh, 2, 0, 2 * H + k);
    float r = sig(ar), z = sig(az);
    float n = tanh(AT(gi, b, 2 * H + k) + OPT(bi, 1, 0, 2 * H + k) + r * ghn);
    float up = AT(g, b, k), hp = AT(h, b, k);
    float dan = up * (1.0f - z) * (1.0f - n * n);
    float dar = dan * ghn * r * (1.0f - r), daz = up * (hp - n) * z * (1.0f - z);
    int row = b * 3 * H;
    dgi[row + k] = dar;
    dgh[row + k] = dar;
    dgi[row + H + k] = daz;
    dgh[row + H + k] = daz;
    dgi[row + 2 * H + k] = dan;
    dgh[row + 2 * H + k] = dan * r;
    dh[id] = up * z;
}

/* LSTM: a = gates (+ gh, mask bit 0) (+ b_ih, bit 1) (+ b_hh, bit 2); i, f, o = sig, g = tanh;
 * c' = f c + i g, h' = o tanh(c'); y is [2, B, H]: h' then c'. */
#define LSTM_PRE(j) (AT(ga, b, (j) * H + k) + OPT(gh, 1, b, (j) * H + k) + OPT(bi, 2, 0, (j) * H + k) + \
                     OPT(bh, 4, 0, (j) * H + k))

kernel void
tl_lstm_gates_f32(int B, int H, int mask, global float *y, M_ARGS(ga), M_ARGS(gh), M_ARGS(c), M_ARGS(bi),
                  M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float i = sig(LSTM_PRE(0)), f = sig(LSTM_PRE(1)), gg = tanh(LSTM_PRE(2)), o = sig(LSTM_PRE(3));
    float c2 = f * AT(c, b, k) + i * gg;
    y[id] = o * tanh(c2);
    y[B * H + id] = c2;
}

/* From upstream dh' (dy_h) and dc' (dy_c): dc = dc' + dh' o (1 - tanh(c')^2), then each gate's gradient
 * through its activation; dga [B, 4H] serves gates, gh and the biases alike; dc_prev = dc f. */
kernel void
tl_lstm_gates_backward_f32(int B, int H, int mask, global float *dga, global float *dcp, M_ARGS(dyh),
                           M_ARGS(dyc), M_ARGS(ga), M_ARGS(gh), M_ARGS(c), M_ARGS(bi), M_ARGS(bh))
{
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, k = id % H;
    float i = sig(LSTM_PRE(0)), f = sig(LSTM_PRE(1)), gg = tanh(LSTM_PRE(2)), o = sig(LSTM_PRE(3));
    float cp = AT(c, b, k), tc = tanh(f * cp + i * gg);
    float up = AT(dyh, b, k), dc = AT(dyc, b, k) + up * o * (1.0f - tc * tc);
    int row = b * 4 * H;
    dga[row + k] = dc * gg * i * (1.0f - i);
    dga[row + H + k] = dc * cp * f * (1.0f - f);
    dga[row + 2 * H + k] = dc * i * (1.0f - gg * gg);
    dga[row + 3 * H + k] = up * tc * o * (1.0f - o);
    dcp[id] = dc * f;
}
