/* nn.cl: the loss kernels. cross_entropy = log_softmax (reduce.cl's row kernel) + these two:
 * tl_nll_f32 picks -logp[i, t_i] per row (weight 0 for ignore_index rows), and tl_ce_grad_f32 is the whole
 * backward in one pass: (softmax - onehot) * upstream / denominator, zero on ignored rows.
 * Targets live on the device and checking them on the host would be a sync point, so a target outside
 * [0, C) that is not ignore_index makes that row's loss and weight NaN instead of reading out of bounds. */

kernel void
tl_nll_f32(int n, int c, global const float *logp, global const int *t, int toff, int ignore, global float *loss,
           global float *w)
{
    int i = get_global_id(0);
    if (i >= n) return;
    int ti = t[toff + i];
    if (ti == ignore) { loss[i] = 0.0f; w[i] = 0.0f; return; }
    if (ti < 0 || ti >= c) { loss[i] = NAN; w[i] = NAN; return; }
    loss[i] = -logp[(long)i * c + ti];
    w[i] = 1.0f;
}

/* mode 0: mean (g[0] / denom[0]); 1: sum (g[0]); 2: none (g[i]) */
kernel void
tl_ce_grad_f32(int n, int c, global const float *logp, global const int *t, int toff, int ignore,
               global const float *g, int goff, global const float *denom, int doff, int mode, global float *out)
{
    int gid = get_global_id(0);
    if (gid >= n * c) return;
    int i = gid / c, j = gid - i * c, ti = t[toff + i];
    float scale = mode == 2 ? g[goff + i] : (mode == 1 ? g[goff] : g[goff] / denom[doff]);
    float v = exp(logp[gid]) - (j == ti ? 1.0f : 0.0f);
    out[gid] = ti == ignore ? 0.0f : v * scale;
}
