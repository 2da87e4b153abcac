/* llm.cl: the row-wise and decode-step kernels of LLM inference (no autograd; ops_llm.c checks shapes).
 * Invariants: every row kernel runs one work-group per row with a local size L that is a power of two
 * (the host picks it from the kernel's limits), so the tree reductions in wg_sum/wg_max are exact, and
 * every work-item reaches every barrier. Operands are contiguous (the host copies views first) and
 * offsets are in elements. Nothing relies on infinities (TLGPU_FAST_MATH=1 assumes there are none):
 * masked scores are skipped, and maxima start at -FLT_MAX.
 *  - rms_norm: y = x * rsqrt(mean(x^2) + eps) * w, one pass for the sum of squares, one for the output.
 *  - rope: NeoX pairing (i, i + D/2) by default, GPT-J pairing (2i, 2i + 1) when interleaved; may run in
 *    place (each work-item reads its pair before writing it).
 *  - softmax_rows: max, sum of exp, normalise (three passes over a row held in cache), optional causal
 *    mask aligned to the end of the row (query i of Tq sees keys j <= i + Tk - Tq) and a scale.
 *  - attention: one work-group per query head over a KV cache: scores into a global scratch row, the
 *    max-subtracted softmax, then P @ V with the work-items split over (dim, slice of positions). */

/* Work-group reductions of one float per work-item (L a power of two); every work-item gets the result.
 * red is reused by the caller's next reduction, hence the trailing barrier. */
#define WG_REDUCE(name, combine)                                                                    \
    inline float name(float v, local float *red)                                                    \
    {                                                                                               \
        const int lid = get_local_id(0), L = get_local_size(0);                                     \
        red[lid] = v;                                                                               \
        barrier(CLK_LOCAL_MEM_FENCE);                                                               \
        for (int s = L / 2; s > 0; s >>= 1) {                                                       \
            if (lid < s) red[lid] = combine(red[lid], red[lid + s]);                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        }                                                                                           \
        float r = red[0];                                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                               \
        return r;                                                                                   \
    }
#define WG_ADD(a, b) ((a) + (b))
WG_REDUCE(wg_sum, WG_ADD)
WG_REDUCE(wg_max, fmax)

/* One row of D per work-group; w may be absent (has_w == 0: the host passes x's buffer, never read). */
kernel void
tl_rms_norm_f32(int D, float eps, global const float *x, int offx, global const float *w, int offw, int has_w,
                global float *y, int offy, local float *red)
{
    const int row = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
    x += offx + row * D;
    y += offy + row * D;
    w += offw;
    float ss = 0.0f;
    for (int i = lid; i < D; i += L) ss = mad(x[i], x[i], ss);
    const float r = rsqrt(wg_sum(ss, red) / (float)D + eps);
    for (int i = lid; i < D; i += L) y[i] = has_w ? x[i] * r * w[i] : x[i] * r;
}

/* x and y: (T, H, D); pos[t] from the int32 buffer (offset offp), or pos0 when has_pos is 0 (T == 1: a
 * position given as an int, no upload). One work-item per rotated pair.
 * The angle of pair i is pos * theta^(-2i/D), computed as exp2(-(2i/D) * log2(theta)) in float32. */
kernel void
tl_rope_f32(int T, int H, int D, float log2_theta, int interleaved, global const float *x, int offx,
            global const int *pos, int offp, int has_pos, int pos0, global float *y, int offy)
{
    const int g = get_global_id(0), half_d = D / 2;
    if (g >= T * H * half_d) return;
    const int i = g % half_d, row = g / half_d, t = row / H;
    const float ang = (float)(has_pos ? pos[offp + t] : pos0) * exp2(-(float)(2 * i) / (float)D * log2_theta);
    float c, s = sincos(ang, &c);
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half_d;
    x += offx + row * D;
    y += offy + row * D;
    const float a = x[i0], b = x[i1];
    y[i0] = a * c - b * s;
    y[i1] = a * s + b * c;
}

/* One decode step's rope and cache write in one launch: qkv (nq + 2 * nkv, D) holds the q, k and v heads of
 * one token; the q and k heads are rotated in place (as tl_rope_f32 at position p) and the k and v heads are
 * written to cache (2 * nkv, max_len, D) at row p (keys, then values: kv_write's layout). p = pbuf[offp] +
 * pos0 with pbuf, else pos0; rows outside the cache are not written. One work-item per pair of a head. */
kernel void
tl_rope_kv_f32(int nq, int nkv, int D, float log2_theta, int interleaved, global float *qkv, int offx,
               global float *cache, int offc, int max_len, global const int *pbuf, int offp, int pos0)
{
    const int g = get_global_id(0), half_d = D / 2;
    if (g >= (nq + 2 * nkv) * half_d) return;
    const int i = g % half_d, r = g / half_d, p = (pbuf != 0 ? pbuf[offp] : 0) + pos0;
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half_d;
    global float *x = qkv + offx + r * D;
    float a = x[i0], b = x[i1];
    if (r < nq + nkv) {
        const float ang = (float)p * exp2(-(float)(2 * i) / (float)D * log2_theta);
        float c, s = sincos(ang, &c);
        const float a2 = a * c - b * s, b2 = a * s + b * c;
        x[i0] = a = a2;
        x[i1] = b = b2;
    }
    if (r >= nq && p >= 0 && p < max_len) {
        global float *row = cache + offc + ((r - nq) * max_len + p) * D;
        row[i0] = a;
        row[i1] = b;
    }
}

/* Rows of n; row r is query r % Tq of its group. Masked entries (causal) become exactly 0. */
kernel void
tl_softmax_rows_f32(int n, int Tq, float scale, int causal, global const float *x, int offx, global float *y,
                    int offy, local float *red)
{
    const int row = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
    const int lim = causal ? min(n, row % Tq + n - Tq + 1) : n;      /* keys [0, lim) are visible */
    x += offx + row * n;
    y += offy + row * n;
    float mx = -FLT_MAX;
    for (int j = lid; j < lim; j += L) mx = fmax(mx, x[j] * scale);
    mx = wg_max(mx, red);
    float sum = 0.0f;
    for (int j = lid; j < lim; j += L) sum += exp(x[j] * scale - mx);
    const float inv = 1.0f / wg_sum(sum, red);
    for (int j = lid; j < n; j += L) y[j] = j < lim ? exp(x[j] * scale - mx) * inv : 0.0f;
}

kernel void
tl_silu_mul_f32(int n, global const float *x, int offx, global const float *g, int offg, global float *y)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    const float v = x[offx + i];
    y[i] = v / (1.0f + exp(-v)) * g[offg + i];
}

/* cache (Hkv, max_len, D) at offc; x (Hkv, T, D) contiguous at offx; rows [pos, pos + T) of every head.
 * With pbuf (not NULL) the position is pbuf[offp] + pos, read on the device (a traced decode step replays
 * with the position a tensor holds); rows outside the cache are not written there. */
kernel void
tl_kv_write_f32(int Hkv, int T, int D, int max_len, int pos, global const float *x, int offx, global float *cache,
                int offc, global const int *pbuf, int offp)
{
    const int g = get_global_id(0);
    if (g >= Hkv * T * D) return;
    const int d = g % D, t = (g / D) % T, h = g / (D * T);
    const int p = (pbuf != 0 ? pbuf[offp] : 0) + pos + t;
    if (p < 0 || p >= max_len) return;
    cache[offc + (h * max_len + p) * D + d] = x[offx + g];
}

/* q (T, H, D): the last T of `length` positions (T = 1: a decode step); caches (Hkv, max_len, D), head h reads
 * kv head h / G; query t sees keys [0, length - T + t] (causal); out (T, H, D); sc: T * H * length floats of
 * scratch; red: L floats (L = local size, a power of two). One work-group per (query, head). */
kernel void
tl_attention_f32(int G, int D, int length, int max_len, float scale, int H, int T, global const float *q, int offq,
                 global const float *kc, int offk, global const float *vc, int offv, global float *out,
                 global float *sc, local float *red, global const int *lbuf, int offl, int stride)
{
    const int g = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
    if (lbuf != 0) length = clamp(lbuf[offl] + length, T, max_len);   /* the length a tensor holds (+ offset) */
    const int t = g / H, h = g - t * H, kvh = h / G, Lk = length - T + 1 + t;
    q += offq + g * D;
    out += g * D;
    kc += offk + kvh * max_len * D;
    vc += offv + kvh * max_len * D;
    sc += g * stride;
    float mx = -FLT_MAX;
    for (int l = lid; l < Lk; l += L) {              /* each work-item scores whole positions */
        const global float *k = kc + l * D;
        float4 acc4 = (float4)0.0f;
        int i = 0;
        for (; i + 4 <= D; i += 4) acc4 = mad(vload4(0, q + i), vload4(0, k + i), acc4);
        float d = (acc4.x + acc4.y) + (acc4.z + acc4.w);
        for (; i < D; i++) d = mad(q[i], k[i], d);
        d *= scale;
        sc[l] = d;
        mx = fmax(mx, d);
    }
    mx = wg_max(mx, red);
    float sum = 0.0f;
    for (int l = lid; l < Lk; l += L) {
        float e = exp(sc[l] - mx);
        sc[l] = e;
        sum += e;
    }
    const float inv = 1.0f / wg_sum(sum, red);
    barrier(CLK_GLOBAL_MEM_FENCE);                   /* the P row in sc is read by every work-item below */
    if (D >= L) {                                    /* a work-item owns dims lid, lid + L, ... */
        for (int d = lid; d < D; d += L) {
            float o = 0.0f;
            for (int l = 0; l < Lk; l++) o = mad(sc[l], vc[l * D + d], o);
            out[d] = o * inv;
        }
        return;
    }
    const int parts = L / D, d = lid % D, part = lid / D;   /* (dim, slice of positions); part == parts idles */
    float o = 0.0f;
    if (part < parts)
        for (int l = part; l < Lk; l += parts) o = mad(sc[l], vc[l * D + d], o);
    red[lid] = o;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < D) {
        float tot = 0.0f;
        for (int p = 0; p < parts; p++) tot += red[p * D + lid];
        out[lid] = tot * inv;
    }
}

/* out[i, :] = table[ids[i], :] (V rows of D, row stride st), or table[id0, :] when has_ids is 0 (n == 1: one
 * id given as an int, no upload); an id outside [0, V) gives a row of NaN. */
kernel void
tl_get_rows_f32(int n, int D, int V, global const int *ids, int offi, int has_ids, int id0, global const float *table,
                int offt, int st, global float *out)
{
    const int g = get_global_id(0);
    if (g >= n * D) return;
    const int i = g / D, d = g - i * D, id = has_ids ? ids[offi + i] : id0;
    out[g] = (id >= 0 && id < V) ? table[offt + id * st + d] : NAN;      /* a bad id must not pass unseen */
}
