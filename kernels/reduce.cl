/* reduce.cl: reductions (sum mean max min argmax argmin logsumexp prod) and row softmax / log_softmax.
 * The host turns every reduction into [rows, cols] with a row stride pattern: element j of row r sits at
 * base(r) + j*inner, base(r) = (r / inner) * cols * inner + r % inner (inner = 1 when the reduced axes
 * are last). A work-group of L threads (L a power of two) holds L/G "units" of G lanes each (G a power
 * of two, glog = log2 G); a unit reduces one segment of one row: each lane first accumulates serially
 * (vector loads where rows are contiguous), then the G lanes combine in a local-memory tree. Lanes
 * interleave (lane, lane+G, ...: adjacent work-items on adjacent addresses, what GPUs coalesce) or,
 * with `blocked` (CPU devices, where a work-group's items run as a loop on one core), each lane takes
 * one contiguous stretch (a multiple of 32) read with float16 vectors. With nseg > 1 segments per row
 * the kernel writes partials (value, aux, index) that a second launch of it finishes (fin = 1):
 * deterministic, no atomics.
 * Invariants: every work-item reaches every barrier (G and the op are uniform per launch); the
 * combine order depends only on (L, G, nseg), so the same input gives bit-identical results.
 * NaN: sum/max/min propagate NaN and argmax/argmin return the first NaN, as numpy does. */

/* Must match ops_reduce.c's enum. */
#define R_SUM 0
#define R_MEAN 1
#define R_MAX 2
#define R_MIN 3
#define R_ARGMAX 4
#define R_ARGMIN 5
#define R_LSE 6
#define R_PROD 7
#include "arg_better.h"

/* logsumexp state (m, s): the set's max m and s = sum exp(x - m). s == 0 means empty; m == ±inf is
 * kept exact (x == m counts 1) so rows of -inf give -inf and +inf gives +inf, as numpy's formula does. */
inline float2
lse_merge(float m1, float s1, float m2, float s2)
{
    float m = fmax(m1, m2);
    float a = (s1 == 0.0f || m1 == m) ? s1 : s1 * exp(m1 - m);
    float b = (s2 == 0.0f || m2 == m) ? s2 : s2 * exp(m2 - m);
    return (float2)(m, a + b);
}

inline void
merge(int op, float *v, float *w, int *i, float v2, float w2, int i2)
{
    switch (op) {
    case R_SUM: case R_MEAN: *v += v2; break;
    case R_PROD: *v *= v2; break;
    case R_MAX: *v = (*v >= v2 || isnan(*v)) ? *v : v2; break;
    case R_MIN: *v = (*v <= v2 || isnan(*v)) ? *v : v2; break;
    case R_ARGMAX: case R_ARGMIN:
        arg_keep(op == R_ARGMAX, v, i, v2, i2);
        break;
    default: {
        float2 r = lse_merge(*v, *w, v2, w2);
        *v = r.x;
        *w = r.y;
    }
    }
}

/* x: raw input (pass 1: xw = xi = NULL) or partials [rows, cols] with aux sums (xw, logsumexp) and
 * indices (xi, argmax/argmin). Out slot r*nseg + s. count: the full reduction size, for mean. */
/* NaN-propagating max/min of vectors, numpy's rule: a NaN on either side wins. */
inline float16
vmax16(float16 a, float16 x)
{
    return select(x, a, isgreaterequal(a, x) | isnan(a));
}

inline float16
vmin16(float16 a, float16 x)
{
    return select(x, a, islessequal(a, x) | isnan(a));
}

inline float
smerge(int op, float a, float b)
{
    return op == R_MAX ? ((a >= b || isnan(a)) ? a : b) : op == R_MIN ? ((a <= b || isnan(a)) ? a : b) : a + b;
}

/* Sum, max or min of p[j0, j1) (contiguous) over this lane's share; the combine order is fixed by
 * (G, blocked). `ident`: 0, -inf or +inf. */
inline float
contig_run(int op, float ident, global const float *p, int j0, int j1, int lane, int G, int blocked)
{
    float t = ident;
    if (blocked) {
        /* two float16 accumulators: SIMD width plus two dependency chains in flight */
        int nv = (j1 - j0) >> 5, per = (nv + G - 1) / G, q0 = min(nv, lane * per), q1 = min(nv, q0 + per);
        float16 a = (float16)(ident), b = (float16)(ident);
        global const float *p0 = p + j0;
        if (op == R_MAX) {
            for (int q = q0; q < q1; q++) {
                a = vmax16(a, vload16(0, p0 + 32 * q));
                b = vmax16(b, vload16(0, p0 + 32 * q + 16));
            }
            a = vmax16(a, b);
        } else if (op == R_MIN) {
            for (int q = q0; q < q1; q++) {
                a = vmin16(a, vload16(0, p0 + 32 * q));
                b = vmin16(b, vload16(0, p0 + 32 * q + 16));
            }
            a = vmin16(a, b);
        } else {
            for (int q = q0; q < q1; q++) {
                a += vload16(0, p0 + 32 * q);
                b += vload16(0, p0 + 32 * q + 16);
            }
            a += b;
        }
        for (int j = j0 + 32 * nv + lane; j < j1; j += G) t = smerge(op, t, p[j]);
        float r[16];
        vstore16(a, 0, r);
        for (int h = 8; h > 0; h >>= 1)
            for (int k = 0; k < h; k++) r[k] = smerge(op, r[k], r[k + h]);
        return smerge(op, r[0], t);
    }
    if (op != R_SUM) {
        for (int j = j0 + lane; j < j1; j += G) t = smerge(op, t, p[j]);
        return t;
    }
    int nv = (j1 - j0) >> 2;
    float4 a4 = (float4)(0.0f);
    for (int q = lane; q < nv; q += G) a4 += vload4(0, p + j0 + 4 * q);
    for (int j = j0 + 4 * nv + lane; j < j1; j += G) t += p[j];
    return ((a4.x + a4.y) + (a4.z + a4.w)) + t;
}

/* argmax/argmin of a contiguous stretch p[jb, je) (CPU layout): the extreme with float16 vectors, then
 * the first index holding it (the first NaN when it is NaN), found a vector at a time. */
inline void
arg_stretch(int op, global const float *p, int jb, int je, float *v, int *i)
{
    if (jb >= je) return;
    int jv = jb + ((je - jb) & ~15), j, sop = op == R_ARGMAX ? R_MAX : R_MIN;
    float16 a = (float16)(p[jb]);
    for (j = jb; j < jv; j += 16) a = op == R_ARGMAX ? vmax16(a, vload16(0, p + j)) : vmin16(a, vload16(0, p + j));
    float r[16];
    vstore16(a, 0, r);
    float m = r[0];
    for (int k = 1; k < 16; k++) m = smerge(sop, m, r[k]);
    for (j = jv; j < je; j++) m = smerge(sop, m, p[j]);
    int nan_m = isnan(m);
    for (j = jb; j < jv; j += 16) {
        float16 x = vload16(0, p + j);
        if (nan_m ? any(isnan(x)) : any(x == m)) break;
    }
    for (; j < je; j++)
        if (nan_m ? isnan(p[j]) : p[j] == m) break;
    *v = m;
    *i = j;
}

/* The lane's walk over [j0, j1): *jb, *je, *js (start, end, step). */
inline void
lane_walk(int j0, int j1, int lane, int G, int blocked, int *jb, int *je, int *js)
{
    if (blocked) {
        int per = (((j1 - j0) + G - 1) / G + 31) & ~31;
        *jb = min(j1, j0 + lane * per);
        *je = min(j1, *jb + per);
        *js = 1;
    } else {
        *jb = j0 + lane;
        *je = j1;
        *js = G;
    }
}

kernel void
tl_reduce_f32(int op, int blocked, int rows, int cols, int inner, int chunk, int nseg, int glog, int fin, float count,
              int xoff, global const float *x, global const float *xw, global const int *xi,
              global float *ov, global float *ow, global int *oi,
              local float *lv, local float *lw, local int *li)
{
    int lid = (int)get_local_id(0), G = 1 << glog, lane = lid & (G - 1);
    int u = (int)get_group_id(0) * ((int)get_local_size(0) >> glog) + (lid >> glog);
    int live = u < rows * nseg;
    int r = G == 1 ? u % rows : u / nseg, s = G == 1 ? u / rows : u % nseg;  /* G == 1: adjacent threads,
                                                                                 adjacent rows (coalesced) */
    int j0 = s * chunk, j1 = min(cols, j0 + chunk);
    int base = (r / inner) * cols * inner + r % inner;
    global const float *p = x + xoff + base;
    float v = op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : op == R_LSE ? -INFINITY : op == R_PROD ? 1.0f : 0.0f;
    float w = 0.0f;
    int i = -1;
    int jb, je, js;
    lane_walk(j0, j1, lane, G, blocked, &jb, &je, &js);
    if (!live) {
        /* an idle unit still takes part in the barriers below */
    } else if ((op == R_SUM || op == R_MEAN || op == R_MAX || op == R_MIN) && inner == 1) {
        v = contig_run(op == R_MEAN ? R_SUM : op, v, p, j0, j1, lane, G, blocked);
    } else if (op == R_SUM || op == R_MEAN) {
        for (int j = jb; j < je; j += js) v += p[j * inner];
    } else if (op == R_PROD) {                        /* partials too (pass 2 reads them with inner = 1) */
        for (int j = jb; j < je; j += js) v *= p[j * inner];
    } else if (op == R_MAX) {
        for (int j = jb; j < je; j += js) { float t = p[j * inner]; v = (v >= t || isnan(v)) ? v : t; }
    } else if (op == R_MIN) {
        for (int j = jb; j < je; j += js) { float t = p[j * inner]; v = (v <= t || isnan(v)) ? v : t; }
    } else if ((op == R_ARGMAX || op == R_ARGMIN) && blocked && inner == 1 && !xi) {
        arg_stretch(op, p, jb, je, &v, &i);
    } else if (op == R_ARGMAX || op == R_ARGMIN) {
        for (int j = jb; j < je; j += js) {
            float t = p[j * inner];
            int ti = xi ? xi[base + j] : j;
            arg_keep(op == R_ARGMAX, &v, &i, t, ti);
        }
    } else if (xw == 0) {
        /* logsumexp pass 1: the lane's own max, then its sum of exp relative to it (no rescaling) */
        float m = -INFINITY, sum = 0.0f;
        for (int j = jb; j < je; j += js) m = fmax(m, p[j * inner]);
        for (int j = jb; j < je; j += js) { float t = p[j * inner]; sum += t == m ? 1.0f : exp(t - m); }
        v = m;
        w = sum;
    } else {
        for (int j = jb; j < je; j += js) merge(op, &v, &w, &i, p[j], xw[base + j], 0);
    }
    if (G > 1) {
        int use_w = op == R_LSE, use_i = op == R_ARGMAX || op == R_ARGMIN;
        lv[lid] = v;
        if (use_w) lw[lid] = w;
        if (use_i) li[lid] = i;
        for (int h = G >> 1; h > 0; h >>= 1) {
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lane < h) {
                merge(op, &v, &w, &i, lv[lid + h], use_w ? lw[lid + h] : 0.0f, use_i ? li[lid + h] : 0);
                lv[lid] = v;
                if (use_w) lw[lid] = w;
                if (use_i) li[lid] = i;
            }
        }
    }
    if (!live || lane != 0) return;
    int o = r * nseg + s;
    if (!fin) {
        ov[o] = v;
        if (ow) ow[o] = w;
        if (oi) oi[o] = i;
    } else if (op == R_ARGMAX || op == R_ARGMIN) {
        oi[o] = i;
    } else if (op == R_MEAN) {
        ov[o] = v / count;
    } else if (op == R_LSE) {
        ov[o] = isnan(w) ? w : isinf(v) ? v : v + log(w);
    } else {
        ov[o] = v;
    }
}

/* Combines v over the G lanes of each unit; every lane gets the unit's result. Call uniformly. */
inline float
unit_combine(local float *lv, int lid, int lane, int G, float v, int is_max)
{
    if (G == 1) return v;
    barrier(CLK_LOCAL_MEM_FENCE);                     /* earlier readers of lv are done */
    lv[lid] = v;
    for (int h = G >> 1; h > 0; h >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane < h) {
            v = is_max ? fmax(v, lv[lid + h]) : v + lv[lid + h];
            lv[lid] = v;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return lv[lid - lane];
}

/* softmax (logmode 0) or log_softmax (1) along rows laid out as in tl_reduce_f32: a max pass, a
 * sum-of-exp pass (softmax stores each exp in the output) and a normalise pass, each spread over the
 * unit's G lanes; a row is re-read from cache, not memory, when it fits. Blocked contiguous rows
 * (CPU) use float16 vectors so that exp is vectorised. A NaN anywhere in a row makes the whole row
 * NaN (through the sum), as numpy's exp(x - max) / sum does. */
kernel void
tl_softmax_f32(int logmode, int blocked, int rows, int cols, int inner, int glog, int xoff, global const float *x,
               global float *o, local float *lv)
{
    int lid = (int)get_local_id(0), G = 1 << glog, lane = lid & (G - 1);
    int r = (int)get_group_id(0) * ((int)get_local_size(0) >> glog) + (lid >> glog);
    int live = r < rows, vec = blocked && inner == 1;
    int base = (r / inner) * cols * inner + r % inner;
    global const float *p = x + xoff + base;
    global float *q = o + base;
    float m = -INFINITY, sum = 0.0f;
    int jb, je, js, jv;
    lane_walk(0, cols, lane, G, blocked, &jb, &je, &js);
    jv = vec ? jb + ((je - jb) & ~15) : jb;           /* [jb, jv): float16 steps; [jv, je): scalar */
    if (live) {
        float16 m16 = (float16)(-INFINITY);
        for (int j = jb; j < jv; j += 16) m16 = fmax(m16, vload16(0, p + j));
        float8 m8 = fmax(m16.lo, m16.hi);
        float4 m4 = fmax(m8.lo, m8.hi);
        m = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
        for (int j = jv; j < je; j += js) m = fmax(m, p[j * inner]);
    }
    m = unit_combine(lv, lid, lane, G, m, 1);
    if (live) {
        /* softmax keeps each exp in the output (re-read by the same lane below: one exp per element) */
        float16 s16 = (float16)(0.0f);
        for (int j = jb; j < jv; j += 16) {
            float16 e = exp(vload16(0, p + j) - m);
            s16 += e;
            if (!logmode) vstore16(e, 0, q + j);
        }
        float8 s8 = s16.lo + s16.hi;
        float4 s4 = s8.lo + s8.hi;
        sum = (s4.x + s4.y) + (s4.z + s4.w);
        for (int j = jv; j < je; j += js) {
            float e = exp(p[j * inner] - m);
            sum += e;
            if (!logmode) q[j * inner] = e;
        }
    }
    sum = unit_combine(lv, lid, lane, G, sum, 0);
    if (!live) return;
    if (logmode) {
        float ls = log(sum);
        for (int j = jb; j < jv; j += 16) vstore16((vload16(0, p + j) - m) - ls, 0, q + j);
        for (int j = jv; j < je; j += js) q[j * inner] = (p[j * inner] - m) - ls;
    } else {
        for (int j = jb; j < jv; j += 16) vstore16(vload16(0, q + j) / sum, 0, q + j);
        for (int j = jv; j < je; j += js) q[j * inner] = q[j * inner] / sum;
    }
}
