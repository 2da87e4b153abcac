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

/* The whole cross_entropy forward of a small batch in one work-group (mean or sum): each work-item takes whole
 * rows (log-softmax, written to logp for the backward, and the picked -logp), then the group sums the losses
 * and the counted rows. loss[0] = sum / count (mean) or sum; denom[0] = count. One launch instead of
 * log_softmax + nll + two sums + a divide (7): a small learner's step is launch-bound. x rows contiguous. */
kernel void
tl_ce_small_f32(int n, int c, global const float *x, int xoff, global const int *t, int toff, int ignore, int mode,
                global float *logp, global float *loss, global float *denom, local float *red)
{
    const int lid = get_local_id(0), L = get_local_size(0);
    float s = 0.0f, w = 0.0f;
    for (int i = lid; i < n; i += L) {
        const global float *row = x + xoff + (long)i * c;
        float m = -INFINITY, e = 0.0f;
        for (int j = 0; j < c; j++) m = fmax(m, row[j]);
        for (int j = 0; j < c; j++) e += exp(row[j] - m);
        const float lse = m + log(e);
        for (int j = 0; j < c; j++) logp[(long)i * c + j] = row[j] - lse;
        const int ti = t[toff + i];
        if (ti == ignore) continue;
        if (ti < 0 || ti >= c) { s = NAN; w = NAN; continue; }
        s += lse - row[ti];
        w += 1.0f;
    }
    red[lid] = s;
    red[L + lid] = w;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h /= 2) {
        if (lid < h) { red[lid] += red[lid + h]; red[L + lid] += red[L + lid + h]; }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        loss[0] = mode == 0 ? red[0] / red[L] : red[0];
        denom[0] = red[L];
    }
}
