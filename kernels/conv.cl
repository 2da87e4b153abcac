/* conv.cl: the kernels behind conv2d and 2-D pooling (csrc/ops/ops_conv.c). conv2d is a GEMM over columns:
 * tl_im2col_f32 writes cols [C*KH*KW, N*OH*OW] (row (c, ki, kj), column (n, oh, ow); zero where the window
 * reads padding) and the weight [O, C*KH*KW] multiplies it with the project's GEMM. tl_col2im_f32 is
 * im2col's backward: each input element's sum over the columns that read it is computed by one work-item
 * in a fixed order, so the gradient is deterministic without atomics. Both come in a GPU variant (one
 * work-item per window / input element: neighbours touch neighbouring addresses) and a CPU variant
 * ("rows": one work-item per output row segment / input row: contiguous runs, index arithmetic amortised).
 * Pooling: tl_max_pool2d_f32 also stores the argmax (flat h * W + w in its plane, first maximum wins, NaN
 * propagates, as torch), and the pooling backward runs one work-item per input element over the windows
 * that contain it.
 * Inputs are read through their strides (any view); outputs and gradients are contiguous. */

/* Keep in step with conv_geom in csrc/ops/ops_conv.c: ints only, so host and device layouts agree. */
typedef struct {
    int N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
    int sn, sc, sh, sw, off;                  /* the input's strides and offset, in elements */
} conv_geom;

/* One work-item per (c, n, oh, ow), looping over the KH x KW window (Caffe's im2col_gpu): the index
 * arithmetic is paid once per window, not per element, and for each (ki, kj) neighbouring work-items
 * write neighbouring columns (coalesced on GPUs, vector stores on PoCL). */
kernel void
tl_im2col_f32(conv_geom g, int total, global const float *x, global float *cols)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int L = g.OH * g.OW, NL = g.N * L;
    int c = gid / NL, j = gid - c * NL;
    int n = j / L, l = j - n * L, oh = l / g.OW, ow = l - oh * g.OW;
    int h0 = oh * g.SH - g.PH, w0 = ow * g.SW - g.PW;
    global const float *xp = x + g.off + n * g.sn + c * g.sc;
    global float *out = cols + (long)c * g.KH * g.KW * NL + j;
    for (int ki = 0; ki < g.KH; ki++) {
        int ih = h0 + ki * g.DH;
        int rowok = ih >= 0 && ih < g.H;
        for (int kj = 0; kj < g.KW; kj++) {
            int iw = w0 + kj * g.DW;
            *out = rowok && iw >= 0 && iw < g.W ? xp[ih * g.sh + iw * g.sw] : 0.0f;
            out += NL;
        }
    }
}

/* The same columns for CPUs: one work-item per column-row segment (c, ki, kj, n, oh), which writes its OW
 * outputs contiguously and reads one input row; the per-window kernel's stores jump between rows of cols. */
kernel void
tl_im2col_rows_f32(conv_geom g, int total, global const float *x, global float *cols)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int L = g.OH * g.OW, NL = g.N * L, NOH = g.N * g.OH;
    int r = gid / NOH, t = gid - r * NOH, n = t / g.OH, oh = t - n * g.OH;
    int c = r / (g.KH * g.KW), kk = r - c * (g.KH * g.KW), ki = kk / g.KW, kj = kk - ki * g.KW;
    int ih = oh * g.SH - g.PH + ki * g.DH;
    global float *out = cols + (long)r * NL + n * L + oh * g.OW;
    if (ih < 0 || ih >= g.H) {
        for (int ow = 0; ow < g.OW; ow++) out[ow] = 0.0f;
        return;
    }
    global const float *xr = x + g.off + n * g.sn + c * g.sc + ih * g.sh;
    int iw = kj * g.DW - g.PW;
    for (int ow = 0; ow < g.OW; ow++, iw += g.SW) out[ow] = iw >= 0 && iw < g.W ? xr[iw * g.sw] : 0.0f;
}

/* dx[n, c, h, w] = sum of dcols over the windows that read (h, w), one work-item per input element (Caffe's
 * col2im_gpu): only the output positions whose window covers (h, w) are visited, so the loop is about
 * (KH / SH) * (KW / SW) long, in a fixed order (deterministic, no atomics). */
kernel void
tl_col2im_f32(conv_geom g, int total, global const float *dcols, global float *dx)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int w = gid % g.W, t = gid / g.W, h = t % g.H;
    t /= g.H;
    int c = t % g.C, n = t / g.C;
    int L = g.OH * g.OW, NL = g.N * L;
    int hp = h + g.PH, wp = w + g.PW;                   /* position in the padded input */
    int eh = g.DH * (g.KH - 1) + 1, ew = g.DW * (g.KW - 1) + 1;
    int oh0 = hp < eh ? 0 : (hp - eh) / g.SH + 1, oh1 = min(hp / g.SH + 1, g.OH);
    int ow0 = wp < ew ? 0 : (wp - ew) / g.SW + 1, ow1 = min(wp / g.SW + 1, g.OW);
    global const float *col = dcols + (long)c * g.KH * g.KW * NL + n * L;
    float acc = 0.0f;
    for (int oh = oh0; oh < oh1; oh++) {
        int dh = hp - oh * g.SH;                        /* ki * DH: skip rows the dilated window steps over */
        if (g.DH != 1 && dh % g.DH != 0) continue;
        int ki = g.DH == 1 ? dh : dh / g.DH;
        for (int ow = ow0; ow < ow1; ow++) {
            int dw = wp - ow * g.SW;
            if (g.DW != 1 && dw % g.DW != 0) continue;
            int kj = g.DW == 1 ? dw : dw / g.DW;
            acc += col[(long)(ki * g.KW + kj) * NL + oh * g.OW + ow];
        }
    }
    dx[gid] = acc;
}

/* The same sums for CPUs, one work-item per input row (n, c, h), which owns dx's row and accumulates into it
 * in place: the index arithmetic is paid once per row, and for each (oh, kj) the loop over ow reads a
 * contiguous run of dcols, where the per-element kernel's reads jump between rows of dcols (cache misses
 * on a CPU, coalesced loads on a GPU). The order of the sums is fixed, so it is deterministic too. */
kernel void
tl_col2im_rows_f32(conv_geom g, int total, global const float *dcols, global float *dx)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    int h = gid % g.H, t = gid / g.H;
    int c = t % g.C, n = t / g.C;
    int L = g.OH * g.OW, NL = g.N * L;
    int hp = h + g.PH, eh = g.DH * (g.KH - 1) + 1;
    int oh0 = hp < eh ? 0 : (hp - eh) / g.SH + 1, oh1 = min(hp / g.SH + 1, g.OH);
    global float *row = dx + (long)gid * g.W;
    for (int w = 0; w < g.W; w++) row[w] = 0.0f;
    for (int oh = oh0; oh < oh1; oh++) {
        int dh = hp - oh * g.SH;
        if (dh % g.DH != 0) continue;
        int ki = dh / g.DH;
        for (int kj = 0; kj < g.KW; kj++) {
            global const float *col = dcols + (long)((c * g.KH + ki) * g.KW + kj) * NL + n * L + oh * g.OW;
            int iw = kj * g.DW - g.PW;
            for (int ow = 0; ow < g.OW; ow++, iw += g.SW)
                if (iw >= 0 && iw < g.W) row[iw] += col[ow];
        }
    }
}

/* The forward store's epilogue: + bias[o] (bit 0 of epi), then act = epi >> 1 (1 relu, 2 tanh; relu as
 * ew_apply's: NaN kept), the codes of matmul.cl's mm_epi (tlgpu.jit's epilogue pass sets act). */
inline float
conv_epi(float v, int o, global const float *bias, int epi)
{
    v += (epi & 1) ? bias[o] : 0.0f;
    const int act = epi >> 1;
    return act == 1 ? ((v > 0.0f) | isnan(v) ? v : 0.0f) : act == 2 ? tanh(v) : v;
}

/* conv2d's output layout: out [N, O, L] = y [O, N*L] (+ bias[o]) with L = OH*OW (the GEMM gives [O, N*L]).
 * to_y != 0 runs it backwards for the gradient: y [O, N*L] = out [N, O, L]. With rows, one work-item per
 * (n, o) copies a run of L (CPUs); otherwise one work-item per element (GPUs: coalesced writes). */
kernel void
tl_conv_layout_f32(int O, int N, int L, int rows, int to_y, int total, global const float *src,
                   global const float *bias, int epi, global float *dst)
{
    int gid = get_global_id(0);
    if (gid >= total) return;
    if (rows) {
        int n = gid / O, o = gid - n * O;
        long a = (long)gid * L, y = (long)o * N * L + (long)n * L;     /* row (n, o) of out; its run in y */
        if (to_y) {
            for (int l = 0; l < L; l++) dst[y + l] = src[a + l];
        } else {
            for (int l = 0; l < L; l++) dst[a + l] = conv_epi(src[y + l], o, bias, epi);
        }
        return;
    }
    if (to_y) {                                  /* gid indexes y: (o, n, l) */
        int l = gid % L, t = gid / L, n = t % N, o = t / N;
        dst[gid] = src[((long)n * O + o) * L + l];
    } else {                                     /* gid indexes out: (n, o, l) */
        int l = gid % L, t = gid / L, o = t % O, n = t / O;
        dst[gid] = conv_epi(src[((long)o * N + n) * L + l], o, bias, epi);
    }
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
