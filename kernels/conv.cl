/* conv.cl: the kernels behind conv2d and 2-D pooling (csrc/ops_conv.c). conv2d is a GEMM over columns:
 * tl_im2col_f32 writes cols [C*KH*KW, N*OH*OW] (row (c, ki, kj), column (n, oh, ow); zero where the window
 * reads padding) and the weight [O, C*KH*KW] multiplies it with the project's GEMM. tl_col2im_f32 is
 * im2col's backward: one work-item per input element sums the columns that read it, in a fixed order, so
 * the gradient is deterministic without atomics. Pooling: tl_max_pool2d_f32 also stores the argmax (flat
 * h * W + w in its plane, first maximum wins, NaN propagates, as torch), and both pooling backwards again
 * run one work-item per input element over the windows that contain it.
 * Inputs are read through their strides (any view); outputs and gradients are contiguous. */

/* Keep in step with conv_geom in csrc/ops_conv.c: ints only, so host and device layouts agree. */
typedef struct {
    int N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
    int sn, sc, sh, sw, off;                  /* the input's strides and offset, in elements */
} conv_geom;

kernel void
tl_im2col_f32(conv_geom g, int total, global const float *x, global float *cols)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int L = g.OH * g.OW, NL = g.N * L;
    int r = gid / NL, j = gid - r * NL;
    int c = r / (g.KH * g.KW), kk = r - c * (g.KH * g.KW), ki = kk / g.KW, kj = kk - ki * g.KW;
    int n = j / L, l = j - n * L, oh = l / g.OW, ow = l - oh * g.OW;
    int ih = oh * g.SH - g.PH + ki * g.DH, iw = ow * g.SW - g.PW + kj * g.DW;
    float v = 0.0f;
    if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) v = x[g.off + n * g.sn + c * g.sc + ih * g.sh + iw * g.sw];
    cols[gid] = v;
}

/* dx[n, c, h, w] = sum of dcols over the (ki, kj) whose window position lands on (h, w). */
kernel void
tl_col2im_f32(conv_geom g, int total, global const float *dcols, global float *dx)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int w = gid % g.W, t = gid / g.W, h = t % g.H;
    t /= g.H;
    int c = t % g.C, n = t / g.C;
    int L = g.OH * g.OW, NL = g.N * L;
    float acc = 0.0f;
    for (int ki = 0; ki < g.KH; ki++) {
        int th = h + g.PH - ki * g.DH;
        if (th < 0) break;                    /* th only falls as ki grows */
        if (th % g.SH != 0) continue;
        int oh = th / g.SH;
        if (oh >= g.OH) continue;
        for (int kj = 0; kj < g.KW; kj++) {
            int tw = w + g.PW - kj * g.DW;
            if (tw < 0) break;
            if (tw % g.SW != 0) continue;
            int ow = tw / g.SW;
            if (ow >= g.OW) continue;
            acc += dcols[(long)((c * g.KH + ki) * g.KW + kj) * NL + n * L + oh * g.OW + ow];
        }
    }
    dx[gid] = acc;
}

kernel void
tl_max_pool2d_f32(conv_geom g, int total, global const float *x, global float *out, global int *idx)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int ow = gid % g.OW, t = gid / g.OW, oh = t % g.OH;
    t /= g.OH;
    int c = t % g.C, n = t / g.C;
    int h0 = oh * g.SH - g.PH, w0 = ow * g.SW - g.PW;
    int h1 = min(h0 + g.KH, g.H), w1 = min(w0 + g.KW, g.W);
    h0 = max(h0, 0);
    w0 = max(w0, 0);
    int base = g.off + n * g.sn + c * g.sc, best = h0 * g.W + w0;
    float m = -INFINITY;
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
            float v = x[base + h * g.sh + w * g.sw];
            if (v > m || isnan(v)) { m = v; best = h * g.W + w; }
        }
    out[gid] = m;
    idx[gid] = best;
}

/* Mean over the window: padding counts in the divisor with cip (count_include_pad=True: always KH * KW),
 * else only the elements inside the input do. */
kernel void
tl_avg_pool2d_f32(conv_geom g, int total, global const float *x, global float *out, int cip)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int ow = gid % g.OW, t = gid / g.OW, oh = t % g.OH;
    t /= g.OH;
    int c = t % g.C, n = t / g.C;
    int h0 = oh * g.SH - g.PH, w0 = ow * g.SW - g.PW;
    int h1 = min(h0 + g.KH, g.H), w1 = min(w0 + g.KW, g.W);
    h0 = max(h0, 0);
    w0 = max(w0, 0);
    int base = g.off + n * g.sn + c * g.sc;
    float acc = 0.0f;
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) acc += x[base + h * g.sh + w * g.sw];
    out[gid] = acc / (float)(cip ? g.KH * g.KW : (h1 - h0) * (w1 - w0));
}

/* Pooling backward, one work-item per input element: the windows (oh, ow) holding (h, w) are
 * oh in [ceil((h + PH - KH + 1) / SH), floor((h + PH) / SH)] clipped to [0, OH), and likewise ow.
 * mode 0: max pooling (only the window's argmax, idx, receives its gradient); 1: average with padding
 * counted (1 / (KH * KW) of each window's gradient to every element); 2: average over the elements inside
 * the input (idx is read only in mode 0). dy and idx are contiguous [N, C, OH, OW]. */
kernel void
tl_pool2d_backward_f32(conv_geom g, int total, global const float *dy, global const int *idx, int mode,
                       global float *dx)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int w = gid % g.W, t = gid / g.W, h = t % g.H;
    int nc = t / g.H;
    int lo_h = h + g.PH - g.KH + 1, lo_w = w + g.PW - g.KW + 1;
    int oh0 = lo_h <= 0 ? 0 : (lo_h + g.SH - 1) / g.SH, oh1 = min(g.OH - 1, (h + g.PH) / g.SH);
    int ow0 = lo_w <= 0 ? 0 : (lo_w + g.SW - 1) / g.SW, ow1 = min(g.OW - 1, (w + g.PW) / g.SW);
    int plane = nc * g.OH * g.OW, me = h * g.W + w;
    float acc = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++) {
        int hs = oh * g.SH - g.PH, nh = min(hs + g.KH, g.H) - max(hs, 0);
        for (int ow = ow0; ow <= ow1; ow++) {
            int o = plane + oh * g.OW + ow;
            if (mode == 0) {
                if (idx[o] == me) acc += dy[o];
            } else if (mode == 1) {
                acc += dy[o];
            } else {
                int ws = ow * g.SW - g.PW, nw = min(ws + g.KW, g.W) - max(ws, 0);
                acc += dy[o] / (float)(nh * nw);
            }
        }
    }
    dx[gid] = mode == 1 ? acc / (float)(g.KH * g.KW) : acc;
}
