/* optim.cl: one fused kernel per optimizer step and parameter: read p, g and the state once, write p and
 * the state once. Hyperparameters arrive as kernel arguments, so changing the learning rate costs nothing.
 * Every parameter, gradient and state buffer is contiguous (the optimizer allocates state contiguous and
 * refuses non-contiguous parameters).
 * float16/bfloat16 parameters, as PyTorch's fused optimizers: the gradient and the state have the parameter's
 * dtype; each value is widened to float32 on load (exact), the update runs in float32 and every result is
 * rounded to nearest even once, on store (kernels/dtype.h's rules). Each kernel comes in _f32, _f16 and
 * _bf16 (one macro each, over the loads and stores below; the dtype fixed at build time keeps PoCL's
 * vectoriser working: a runtime dtype switch made the float16 steps 2-3x slower there) with the same arguments,
 * so tlgpu.jit's replays (tlgpu/optim) set a step's scalars at the same indices whatever the dtype. The
 * update math is shared (the *_el helpers). */
#include "dtype.h"

/* Element i of buffer x widened to float32 / v rounded into it: dtype.h's tl_ld/tl_st cases, one per dtype. */
#define LD_f32(x, i) (x)[i]
#define ST_f32(x, i, v) ((x)[i] = (v))
#define LD_f16(x, i) vload_half((i), (global const half *)(x))
#define ST_f16(x, i, v) vstore_half_rte((v), (i), (global half *)(x))
#define LD_bf16(x, i) as_float((uint)(x)[i] << 16)
#define ST_bf16(x, i, v) ((x)[i] = tl_bf16_bits(v))

/* One element of SGD with momentum (PyTorch's formulation: buf = momentum * buf + (1 - dampening) * d, the
 * first step buf = d): *b is the buffer's value (read unless first, written when momentum != 0); returns p. */
static float
sgd_el(float p, float g, float *b, float lr, float momentum, float dampening, float weight_decay, int nesterov,
       int first)
{
    float d = g + weight_decay * p;
    if (momentum != 0.0f) {
        *b = first ? d : momentum * *b + (1.0f - dampening) * d;
        d = nesterov ? d + momentum * *b : *b;
    }
    return p - lr * d;
}

#define TL_SGD(D, T)                                                                                          \
    kernel void tl_sgd_##D(int n, global T *p, global const T *g, global T *buf, float lr, float momentum,    \
                           float dampening, float weight_decay, int nesterov, int first)                      \
    {                                                                                                         \
        int i = get_global_id(0);                                                                             \
        if (i >= n) return;                                                                                   \
        float b = momentum != 0.0f && !first ? LD_##D(buf, i) : 0.0f;                                         \
        ST_##D(p, i, sgd_el(LD_##D(p, i), LD_##D(g, i), &b, lr, momentum, dampening, weight_decay, nesterov,  \
                            first));                                                                          \
        if (momentum != 0.0f) ST_##D(buf, i, b);                                                              \
    }
TL_SGD(f32, float)
TL_SGD(f16, ushort)
TL_SGD(bf16, ushort)

/* One element of RMSprop (torch.optim.RMSprop's formulation): g += weight_decay * p; sq = alpha sq + (1 - alpha)
 * g^2; centered: ga += (1 - alpha) (g - ga) (torch's lerp) and the denominator sqrt(sq - ga^2) + eps, else
 * sqrt(sq) + eps; with momentum b = momentum b + g / den and p -= lr b, else p -= lr g / den. *sq, *ga, *b: the
 * state's values (ga and b read and written only when centered / momentum); returns p. */
static float
rmsprop_el(float p, float g, float *sq, float *ga, float *b, float lr, float alpha, float eps, float weight_decay,
           float momentum, int centered, int with_momentum)
{
    g += weight_decay * p;
    *sq = alpha * *sq + (1.0f - alpha) * (g * g);
    float den = *sq;
    if (centered) {
        *ga += (1.0f - alpha) * (g - *ga);
        den -= *ga * *ga;
    }
    den = sqrt(den) + eps;
    if (with_momentum) {
        *b = momentum * *b + g / den;
        return p - lr * *b;
    }
    return p - lr * (g / den);
}

/* A parameter a launch (GPUs; CPU devices take tl_rmspropc below): the optional state read and written under its
 * flag. */
#define TL_RMSPROP(D, T)                                                                                      \
    kernel void tl_rmsprop_##D(int n, global T *p, global const T *g, global T *sq, global T *ga, global T *buf,\
                               float lr, float alpha, float eps, float weight_decay, float momentum,          \
                               int centered)                                                                  \
    {                                                                                                         \
        int i = get_global_id(0);                                                                             \
        if (i >= n) return;                                                                                   \
        float s = LD_##D(sq, i), a = centered ? LD_##D(ga, i) : 0.0f, b = momentum > 0.0f ? LD_##D(buf, i) : 0.0f; \
        ST_##D(p, i, rmsprop_el(LD_##D(p, i), LD_##D(g, i), &s, &a, &b, lr, alpha, eps, weight_decay, momentum, \
                                centered, momentum > 0.0f));                                                  \
        ST_##D(sq, i, s);                                                                                     \
        if (centered) ST_##D(ga, i, a);                                                                       \
        if (momentum > 0.0f) ST_##D(buf, i, b);                                                               \
    }
TL_RMSPROP(f32, float)
TL_RMSPROP(f16, ushort)
TL_RMSPROP(bf16, ushort)

/* Adam's weight decay and moments for one element: decoupled (AdamW) shrinks *p by lr * weight_decay * p,
 * else weight_decay * p joins the gradient; then m and v. */
static void
adam_moments(float *p, float g, float *m, float *v, float lr, float beta1, float beta2, float weight_decay,
             int decoupled)
{
    if (decoupled) *p -= lr * weight_decay * *p;
    else g += weight_decay * *p;
    *m = beta1 * *m + (1.0f - beta1) * g;
    *v = beta2 * *v + (1.0f - beta2) * g * g;
}

/* Adam / AdamW (decoupled != 0) with bias correction; amsgrad keeps the running max of v in vmax.
 * bc1 = 1 - beta1^t and bc2 = 1 - beta2^t come from the host, which counts steps. */
kernel void
tl_adam_f32(int n, global float *p, global const float *g, global float *m, global float *v,
            global float *vmax, float lr, float beta1, float beta2, float eps, float weight_decay,
            int decoupled, float bc1, float bc2, int amsgrad)
{
    int i = get_global_id(0);
    if (i >= n) return;
    float pi = p[i], mi = m[i], vi = v[i];
    adam_moments(&pi, g[i], &mi, &vi, lr, beta1, beta2, weight_decay, decoupled);
    m[i] = mi;
    v[i] = vi;
#ifdef POCL_DEVICE_ADDRESS_BITS
    /* PoCL (which defines that macro): without amsgrad vm is v itself, rewritten with the same value, so every
     * access is unconditional and the kernel vectorises; the load under `if (amsgrad)` kept it scalar, 4.5x
     * slower (200k parameters: 665 -> 147 us). Other devices keep the branch. */
    global float *vm = amsgrad ? vmax : v;
    vi = amsgrad ? fmax(vm[i], vi) : vi;
    vm[i] = vi;
#else
    if (amsgrad) { vi = fmax(vmax[i], vi); vmax[i] = vi; }
#endif
    p[i] = pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps);
}

/* The half kernels: the running max compares the new float32 v with the stored (rounded) max, as torch's fused
 * kernel, and the step uses that maximum before its rounding. */
#define TL_ADAM_HALF(D)                                                                                       \
    kernel void tl_adam_##D(int n, global ushort *p, global const ushort *g, global ushort *m,                \
                            global ushort *v, global ushort *vmax, float lr, float beta1, float beta2,        \
                            float eps, float weight_decay, int decoupled, float bc1, float bc2, int amsgrad)  \
    {                                                                                                         \
        int i = get_global_id(0);                                                                             \
        if (i >= n) return;                                                                                   \
        float pi = LD_##D(p, i), mi = LD_##D(m, i), vi = LD_##D(v, i);                                       \
        adam_moments(&pi, LD_##D(g, i), &mi, &vi, lr, beta1, beta2, weight_decay, decoupled);                \
        ST_##D(m, i, mi);                                                                                     \
        ST_##D(v, i, vi);                                                                                     \
        if (amsgrad) {                                                                                        \
            vi = fmax(LD_##D(vmax, i), vi);                                                                   \
            ST_##D(vmax, i, vi);                                                                              \
        }                                                                                                     \
        ST_##D(p, i, pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps));                                         \
    }
TL_ADAM_HALF(f16)
TL_ADAM_HALF(bf16)

/* RAdam (torch.optim.RAdam): Adam's moments, then either the rectified adaptive step (rho_t > 5) or the
 * un-adapted bias-corrected momentum. The host computes the step's scalars in double: step_size =
 * lr * r_t * sqrt(1 - beta2^t) / (1 - beta1^t) with `adaptive`, else lr / (1 - beta1^t). decoupled: the
 * weight decay multiplies p by (1 - lr * weight_decay) first (decoupled_weight_decay=True), else it is
 * added to the gradient. */
static float
radam_el(float p, float g, float *m, float *v, float lr, float beta1, float beta2, float eps, float weight_decay,
         int decoupled, float step_size, int adaptive)
{
    adam_moments(&p, g, m, v, lr, beta1, beta2, weight_decay, decoupled);
    return adaptive ? p - step_size * *m / (sqrt(*v) + eps) : p - step_size * *m;
}

#define TL_RADAM(D, T)                                                                                        \
    kernel void tl_radam_##D(int n, global T *p, global const T *g, global T *m, global T *v, float lr,       \
                             float beta1, float beta2, float eps, float weight_decay, int decoupled,          \
                             float step_size, int adaptive)                                                   \
    {                                                                                                         \
        int i = get_global_id(0);                                                                             \
        if (i >= n) return;                                                                                   \
        float mi = LD_##D(m, i), vi = LD_##D(v, i);                                                           \
        ST_##D(p, i, radam_el(LD_##D(p, i), LD_##D(g, i), &mi, &vi, lr, beta1, beta2, eps, weight_decay,      \
                              decoupled, step_size, adaptive));                                               \
        ST_##D(m, i, mi);                                                                                     \
        ST_##D(v, i, vi);                                                                                     \
    }
TL_RADAM(f32, float)
TL_RADAM(f16, ushort)
TL_RADAM(bf16, ushort)

/* Adam / AdamW over up to 8 parameters in one launch (no amsgrad; every parameter at the same step t, so
 * the bias corrections are shared). ends holds the running totals of their sizes: element i belongs to the
 * first parameter k with i < ends[k] (unused slots repeat the last total and alias parameter 0's buffers).
 * A launch costs ~9 us in NVIDIA's driver whatever its size: a small network's step pays one, not one per
 * parameter. One launch holds one dtype. */
#define TL_ADAM_ONE(LD, ST, P, G, M, V, j)                                                                    \
    {                                                                                                         \
        float pi = LD(P, j), mi = LD(M, j), vi = LD(V, j);                                                    \
        adam_moments(&pi, LD(G, j), &mi, &vi, lr, beta1, beta2, weight_decay, decoupled);                    \
        ST(M, j, mi);                                                                                         \
        ST(V, j, vi);                                                                                         \
        ST(P, j, pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps));                                              \
    }
#define TL_ADAM8_BODY(LD, ST)                                                                                 \
    int i = get_global_id(0);                                                                                 \
    if (i >= ends.s7) return;                                                                                 \
    if (i < ends.s0) TL_ADAM_ONE(LD, ST, p0, g0, m0, v0, i)                                                   \
    else if (i < ends.s1) TL_ADAM_ONE(LD, ST, p1, g1, m1, v1, i - ends.s0)                                    \
    else if (i < ends.s2) TL_ADAM_ONE(LD, ST, p2, g2, m2, v2, i - ends.s1)                                    \
    else if (i < ends.s3) TL_ADAM_ONE(LD, ST, p3, g3, m3, v3, i - ends.s2)                                    \
    else if (i < ends.s4) TL_ADAM_ONE(LD, ST, p4, g4, m4, v4, i - ends.s3)                                    \
    else if (i < ends.s5) TL_ADAM_ONE(LD, ST, p5, g5, m5, v5, i - ends.s4)                                    \
    else if (i < ends.s6) TL_ADAM_ONE(LD, ST, p6, g6, m6, v6, i - ends.s5)                                    \
    else TL_ADAM_ONE(LD, ST, p7, g7, m7, v7, i - ends.s6)
#define TL_ADAM_ARGS(T, k) global T *p##k, global const T *g##k, global T *m##k, global T *v##k
#define TL_ADAM8_ARGS(T)                                                                                      \
    int8 ends, TL_ADAM_ARGS(T, 0), TL_ADAM_ARGS(T, 1), TL_ADAM_ARGS(T, 2), TL_ADAM_ARGS(T, 3),               \
        TL_ADAM_ARGS(T, 4), TL_ADAM_ARGS(T, 5), TL_ADAM_ARGS(T, 6), TL_ADAM_ARGS(T, 7), float lr,             \
        float beta1, float beta2, float eps, float weight_decay, int decoupled, float bc1, float bc2
#define TL_ADAM8(D, T)                                                                                        \
    kernel void tl_adam8_##D(TL_ADAM8_ARGS(T))                                                                \
    {                                                                                                         \
        TL_ADAM8_BODY(LD_##D, ST_##D)                                                                         \
    }
TL_ADAM8(f32, float)
TL_ADAM8(f16, ushort)
TL_ADAM8(bf16, ushort)

/* ---- Chunked launches for CPU devices: every parameter of a step (up to TL_CK a launch) in one launch. ----
 * Each work-item owns `chunk` consecutive elements (4096) of one parameter and loops over them with that
 * parameter's buffers: the element math is the per-parameter kernels' own (the same helpers and expressions,
 * so the bits are the same), and the loop over one set of pointers is a plain counted loop, which PoCL's
 * compiler vectorises (one parameter of 200704 floats: 174 us against tl_adam_f32's 183). tl_adam8 picks its
 * parameter per element through a chain of 8 branches, which PoCL does not turn into vector code: it runs
 * 5.7x slower than tl_adam_f32 there even when every element takes the first branch (the same parameter:
 * 1099 against 193 us).
 * cend holds the running totals of the parameters' chunk counts (chunk c belongs to the first parameter k with
 * c < cend[k]; unused slots repeat the total), nel their element counts; slots past the last parameter and
 * zero-size parameters alias another parameter's buffers and own no chunks. The launch is one work-item a
 * group: a chunk is work enough, and PoCL spreads the groups over its threads. */
#define TL_CK 8

/* The chunk's parameter k and element range [lo, hi). */
#define TL_CHUNK_RANGE                                                                                        \
    const int c = get_global_id(0);                                                                           \
    int ce[TL_CK], ne[TL_CK], k = 0;                                                                          \
    vstore8(cend, 0, ce);                                                                                     \
    vstore8(nel, 0, ne);                                                                                      \
    if (c >= ce[TL_CK - 1]) return;                                                                           \
    for (int j = 0; j < TL_CK - 1; j++) k += c >= ce[j];                                                      \
    const int lo = (c - (k > 0 ? ce[k - 1] : 0)) * chunk, hi = min(lo + chunk, ne[k]);

/* The chunk's loop: BODY(D, W) updates the W elements from i (1, or 4 for float16) in private float arrays.
 * float16 goes four at a time through vload_half4 / vstore_half4_rte: PoCL's scalar half conversions kept the
 * loop scalar (Adam over the MLP's float16 parameters: 1.45 ms one at a time, 0.33-0.41 ms four at a time).
 * The conversions are exact (loads) or round to nearest even (stores) either way, and each lane runs the
 * scalar math, so the bits are the per-parameter kernels'. float32 and bfloat16 loops vectorise as they are. */
#define TL_W_f32 1
#define TL_W_f16 4
#define TL_W_bf16 1
#define TL_CHUNK_LOOP(D, BODY)                                                                                \
    int i = lo;                                                                                               \
    if (TL_W_##D == 4)                                                                                        \
        for (; i + 4 <= hi; i += 4) { BODY(D, 4) }                                                            \
    for (; i < hi; i++) { BODY(D, 1) }
/* W elements of X from i into the float array a / out of it. */
#define LDW(D, W, a, X)                                                                                       \
    do {                                                                                                      \
        if ((W) == 4) vstore4(vload_half4(i / 4, (global const half *)(X)), 0, (a));                         \
        else (a)[0] = LD_##D(X, i);                                                                           \
    } while (0)
#define STW(D, W, a, X)                                                                                       \
    do {                                                                                                      \
        if ((W) == 4) vstore_half4_rte(vload4(0, (a)), i / 4, (global half *)(X));                            \
        else ST_##D(X, i, (a)[0]);                                                                            \
    } while (0)

/* Adam / AdamW (amsgrad too) in chunks: tl_adam_f32's and the half kernels' element math. x<k>: amsgrad's
 * running max (aliases v<k> without amsgrad, never touched then). */
#define TL_ADAMC_ARGS(T, k) \
    global T *p##k, global const T *g##k, global T *m##k, global T *v##k, global T *x##k
#define TL_ADAMC_CASE(k) \
    case k: P = p##k; G = g##k; M = m##k; V = v##k; X = x##k; break;
#define ADAMC_LOAD(D, W)                                                                                      \
    float pa[4], ga[4], ma[4], va[4];                                                                         \
    LDW(D, W, pa, P);                                                                                         \
    LDW(D, W, ga, G);                                                                                         \
    LDW(D, W, ma, M);                                                                                         \
    LDW(D, W, va, V);
#define ADAMC_BODY(D, W)                                                                                      \
    ADAMC_LOAD(D, W)                                                                                          \
    for (int q = 0; q < (W); q++) {                                                                           \
        adam_moments(&pa[q], ga[q], &ma[q], &va[q], lr, beta1, beta2, weight_decay, decoupled);              \
        pa[q] = pa[q] - lr * (ma[q] / bc1) / (sqrt(va[q] / bc2) + eps);                                      \
    }                                                                                                         \
    STW(D, W, ma, M);                                                                                         \
    STW(D, W, va, V);                                                                                         \
    STW(D, W, pa, P);
#define ADAMC_AMS_BODY(D, W)                                                                                  \
    ADAMC_LOAD(D, W)                                                                                          \
    float xa[4];                                                                                              \
    LDW(D, W, xa, X);                                                                                         \
    for (int q = 0; q < (W); q++) {                                                                           \
        adam_moments(&pa[q], ga[q], &ma[q], &va[q], lr, beta1, beta2, weight_decay, decoupled);              \
        xa[q] = fmax(xa[q], va[q]);                                                                           \
        pa[q] = pa[q] - lr * (ma[q] / bc1) / (sqrt(xa[q] / bc2) + eps);                                      \
    }                                                                                                         \
    STW(D, W, ma, M);                                                                                         \
    STW(D, W, va, V);                                                                                         \
    STW(D, W, xa, X);                                                                                         \
    STW(D, W, pa, P);
#define TL_ADAMC(D, T)                                                                                        \
    kernel void tl_adamc_##D(int8 cend, int8 nel, int chunk, TL_ADAMC_ARGS(T, 0), TL_ADAMC_ARGS(T, 1),      \
                             TL_ADAMC_ARGS(T, 2), TL_ADAMC_ARGS(T, 3), TL_ADAMC_ARGS(T, 4),                   \
                             TL_ADAMC_ARGS(T, 5), TL_ADAMC_ARGS(T, 6), TL_ADAMC_ARGS(T, 7), float lr,         \
                             float beta1, float beta2, float eps, float weight_decay, int decoupled,          \
                             float bc1, float bc2, int amsgrad)                                               \
    {                                                                                                         \
        TL_CHUNK_RANGE                                                                                        \
        global T *P, *M, *V, *X;                                                                              \
        global const T *G;                                                                                    \
        switch (k) {                                                                                          \
        TL_ADAMC_CASE(0) TL_ADAMC_CASE(1) TL_ADAMC_CASE(2) TL_ADAMC_CASE(3)                                   \
        TL_ADAMC_CASE(4) TL_ADAMC_CASE(5) TL_ADAMC_CASE(6) default: TL_ADAMC_CASE(7)                          \
        }                                                                                                     \
        if (amsgrad) {                                                                                        \
            TL_CHUNK_LOOP(D, ADAMC_AMS_BODY)                                                                  \
        } else {                                                                                              \
            TL_CHUNK_LOOP(D, ADAMC_BODY)                                                                      \
        }                                                                                                     \
    }
TL_ADAMC(f32, float)
TL_ADAMC(f16, ushort)
TL_ADAMC(bf16, ushort)

/* SGD in chunks: tl_sgd's element math; b<k> (the momentum buffer) aliases g<k> without momentum, never
 * touched then. */
#define TL_SGDC_ARGS(T, k) global T *p##k, global const T *g##k, global T *b##k
#define TL_SGDC_CASE(k) \
    case k: P = p##k; G = g##k; B = b##k; break;
#define SGDC_BODY(D, W)                                                                                       \
    float pa[4], ga[4], ba[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                     \
    LDW(D, W, pa, P);                                                                                         \
    LDW(D, W, ga, G);                                                                                         \
    if (momentum != 0.0f && !first) LDW(D, W, ba, B);                                                         \
    for (int q = 0; q < (W); q++)                                                                             \
        pa[q] = sgd_el(pa[q], ga[q], &ba[q], lr, momentum, dampening, weight_decay, nesterov, first);        \
    STW(D, W, pa, P);                                                                                         \
    if (momentum != 0.0f) STW(D, W, ba, B);
#define TL_SGDC(D, T)                                                                                         \
    kernel void tl_sgdc_##D(int8 cend, int8 nel, int chunk, TL_SGDC_ARGS(T, 0), TL_SGDC_ARGS(T, 1),          \
                            TL_SGDC_ARGS(T, 2), TL_SGDC_ARGS(T, 3), TL_SGDC_ARGS(T, 4), TL_SGDC_ARGS(T, 5),   \
                            TL_SGDC_ARGS(T, 6), TL_SGDC_ARGS(T, 7), float lr, float momentum,                 \
                            float dampening, float weight_decay, int nesterov, int first)                     \
    {                                                                                                         \
        TL_CHUNK_RANGE                                                                                        \
        global T *P, *B;                                                                                      \
        global const T *G;                                                                                    \
        switch (k) {                                                                                          \
        TL_SGDC_CASE(0) TL_SGDC_CASE(1) TL_SGDC_CASE(2) TL_SGDC_CASE(3)                                       \
        TL_SGDC_CASE(4) TL_SGDC_CASE(5) TL_SGDC_CASE(6) default: TL_SGDC_CASE(7)                              \
        }                                                                                                     \
        TL_CHUNK_LOOP(D, SGDC_BODY)                                                                           \
    }
TL_SGDC(f32, float)
TL_SGDC(f16, ushort)
TL_SGDC(bf16, ushort)

/* RMSprop in chunks: tl_rmsprop's element math, one loop per combination of the flags (constants there, so an
 * absent state, whose slot aliases another buffer, is never touched: accesses through aliasing pointers, even
 * rewriting the same values, kept PoCL's loop scalar, 2-4x slower). */
#define TL_RMSPROPC_ARGS(T, k) global T *p##k, global const T *g##k, global T *s##k, global T *a##k, global T *b##k
#define TL_RMSPROPC_CASE(k) \
    case k: P = p##k; G = g##k; S = s##k; A = a##k; B = b##k; break;
#define RMSPROPC_BODY(D, W, C, M)                                                                             \
    float pa[4], ga[4], sa[4], aa[4], ba[4];                                                                  \
    LDW(D, W, pa, P);                                                                                         \
    LDW(D, W, ga, G);                                                                                         \
    LDW(D, W, sa, S);                                                                                         \
    if (C) LDW(D, W, aa, A);                                                                                  \
    if (M) LDW(D, W, ba, B);                                                                                  \
    for (int q = 0; q < (W); q++)                                                                             \
        pa[q] = rmsprop_el(pa[q], ga[q], &sa[q], &aa[q], &ba[q], lr, alpha, eps, weight_decay, momentum, C, M); \
    STW(D, W, sa, S);                                                                                         \
    if (C) STW(D, W, aa, A);                                                                                  \
    if (M) STW(D, W, ba, B);                                                                                  \
    STW(D, W, pa, P);
#define RMSPROPC_00(D, W) RMSPROPC_BODY(D, W, 0, 0)
#define RMSPROPC_01(D, W) RMSPROPC_BODY(D, W, 0, 1)
#define RMSPROPC_10(D, W) RMSPROPC_BODY(D, W, 1, 0)
#define RMSPROPC_11(D, W) RMSPROPC_BODY(D, W, 1, 1)
#define TL_RMSPROPC(D, T)                                                                                     \
    kernel void tl_rmspropc_##D(int8 cend, int8 nel, int chunk, TL_RMSPROPC_ARGS(T, 0), TL_RMSPROPC_ARGS(T, 1), \
                                TL_RMSPROPC_ARGS(T, 2), TL_RMSPROPC_ARGS(T, 3), TL_RMSPROPC_ARGS(T, 4),       \
                                TL_RMSPROPC_ARGS(T, 5), TL_RMSPROPC_ARGS(T, 6), TL_RMSPROPC_ARGS(T, 7),       \
                                float lr, float alpha, float eps, float weight_decay, float momentum,         \
                                int centered)                                                                 \
    {                                                                                                         \
        TL_CHUNK_RANGE                                                                                        \
        global T *P, *S, *A, *B;                                                                              \
        global const T *G;                                                                                    \
        switch (k) {                                                                                          \
        TL_RMSPROPC_CASE(0) TL_RMSPROPC_CASE(1) TL_RMSPROPC_CASE(2) TL_RMSPROPC_CASE(3)                       \
        TL_RMSPROPC_CASE(4) TL_RMSPROPC_CASE(5) TL_RMSPROPC_CASE(6) default: TL_RMSPROPC_CASE(7)              \
        }                                                                                                     \
        if (centered && momentum > 0.0f) {                                                                    \
            TL_CHUNK_LOOP(D, RMSPROPC_11)                                                                     \
        } else if (centered) {                                                                                \
            TL_CHUNK_LOOP(D, RMSPROPC_10)                                                                     \
        } else if (momentum > 0.0f) {                                                                         \
            TL_CHUNK_LOOP(D, RMSPROPC_01)                                                                     \
        } else {                                                                                              \
            TL_CHUNK_LOOP(D, RMSPROPC_00)                                                                     \
        }                                                                                                     \
    }
TL_RMSPROPC(f32, float)
TL_RMSPROPC(f16, ushort)
TL_RMSPROPC(bf16, ushort)

/* RAdam in chunks: tl_radam's element math. */
#define TL_RADAMC_ARGS(T, k) global T *p##k, global const T *g##k, global T *m##k, global T *v##k
#define TL_RADAMC_CASE(k) \
    case k: P = p##k; G = g##k; M = m##k; V = v##k; break;
#define RADAMC_BODY(D, W)                                                                                     \
    float pa[4], ga[4], ma[4], va[4];                                                                         \
    LDW(D, W, pa, P);                                                                                         \
    LDW(D, W, ga, G);                                                                                         \
    LDW(D, W, ma, M);                                                                                         \
    LDW(D, W, va, V);                                                                                         \
    for (int q = 0; q < (W); q++)                                                                             \
        pa[q] = radam_el(pa[q], ga[q], &ma[q], &va[q], lr, beta1, beta2, eps, weight_decay, decoupled,       \
                         step_size, adaptive);                                                                \
    STW(D, W, pa, P);                                                                                         \
    STW(D, W, ma, M);                                                                                         \
    STW(D, W, va, V);
#define TL_RADAMC(D, T)                                                                                       \
    kernel void tl_radamc_##D(int8 cend, int8 nel, int chunk, TL_RADAMC_ARGS(T, 0), TL_RADAMC_ARGS(T, 1),   \
                              TL_RADAMC_ARGS(T, 2), TL_RADAMC_ARGS(T, 3), TL_RADAMC_ARGS(T, 4),               \
                              TL_RADAMC_ARGS(T, 5), TL_RADAMC_ARGS(T, 6), TL_RADAMC_ARGS(T, 7), float lr,     \
                              float beta1, float beta2, float eps, float weight_decay, int decoupled,        \
                              float step_size, int adaptive)                                                  \
    {                                                                                                         \
        TL_CHUNK_RANGE                                                                                        \
        global T *P, *M, *V;                                                                                  \
        global const T *G;                                                                                    \
        switch (k) {                                                                                          \
        TL_RADAMC_CASE(0) TL_RADAMC_CASE(1) TL_RADAMC_CASE(2) TL_RADAMC_CASE(3)                               \
        TL_RADAMC_CASE(4) TL_RADAMC_CASE(5) TL_RADAMC_CASE(6) default: TL_RADAMC_CASE(7)                      \
        }                                                                                                     \
        TL_CHUNK_LOOP(D, RADAMC_BODY)                                                                         \
    }
TL_RADAMC(f32, float)
TL_RADAMC(f16, ushort)
TL_RADAMC(bf16, ushort)
