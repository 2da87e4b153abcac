/* optim.cl: one fused kernel per optimizer step and parameter: read p, g and the state once, write p and
 * the state once. Hyperparameters arrive as kernel arguments, so changing the learning rate costs nothing.
 * Every parameter, gradient and state buffer is contiguous (the optimizer allocates state contiguous and
 * refuses non-contiguous parameters). */

/* SGD with momentum (PyTorch's formulation: buf = momentum * buf + (1 - dampening) * g, first step buf = g). */
kernel void
tl_sgd_f32(int n, global float *p, global const float *g, global float *buf, float lr, float momentum,
           float dampening, float weight_decay, int nesterov, int first)
{
    int i = get_global_id(0);
    if (i >= n) return;
    float d = g[i] + weight_decay * p[i];
    if (momentum != 0.0f) {
        float b = first ? d : momentum * buf[i] + (1.0f - dampening) * d;
        buf[i] = b;
        d = nesterov ? d + momentum * b : b;
    }
    p[i] -= lr * d;
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
    float pi = p[i], gi = g[i];
    if (decoupled) pi -= lr * weight_decay * pi;
    else gi += weight_decay * pi;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
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

/* RAdam (torch.optim.RAdam): Adam's moments, then either the rectified adaptive step (rho_t > 5) or the
 * un-adapted bias-corrected momentum. The host computes the step's scalars in double: step_size =
 * lr * r_t * sqrt(1 - beta2^t) / (1 - beta1^t) with `adaptive`, else lr / (1 - beta1^t). decoupled: the
 * weight decay multiplies p by (1 - lr * weight_decay) first (decoupled_weight_decay=True), else it is
 * added to the gradient. */
kernel void
tl_radam_f32(int n, global float *p, global const float *g, global float *m, global float *v, float lr,
             float beta1, float beta2, float eps, float weight_decay, int decoupled, float step_size, int adaptive)
{
    int i = get_global_id(0);
    if (i >= n) return;
    float pi = p[i], gi = g[i];
    if (decoupled) pi -= lr * weight_decay * pi;
    else gi += weight_decay * pi;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = adaptive ? pi - step_size * mi / (sqrt(vi) + eps) : pi - step_size * mi;
}

/* Adam / AdamW over up to 8 parameters in one launch (no amsgrad; every parameter at the same step t, so
 * the bias corrections are shared). ends holds the running totals of their sizes: element i belongs to the
 * first parameter k with i < ends[k] (unused slots repeat the last total and alias parameter 0's buffers).
 * A launch costs ~9 us in NVIDIA's driver whatever its size: a small network's step pays one, not one per
 * parameter. */
#define TL_ADAM_ONE(P, G, M, V, j)                                                                            \
    {                                                                                                         \
        float pi = P[j], gi = G[j];                                                                           \
        if (decoupled) pi -= lr * weight_decay * pi;                                                          \
        else gi += weight_decay * pi;                                                                         \
        float mi = beta1 * M[j] + (1.0f - beta1) * gi;                                                        \
        float vi = beta2 * V[j] + (1.0f - beta2) * gi * gi;                                                   \
        M[j] = mi;                                                                                            \
        V[j] = vi;                                                                                            \
        P[j] = pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps);                                                 \
    }
#define TL_ADAM_ARGS(k) global float *p##k, global const float *g##k, global float *m##k, global float *v##k

kernel void
tl_adam8_f32(int8 ends, TL_ADAM_ARGS(0), TL_ADAM_ARGS(1), TL_ADAM_ARGS(2), TL_ADAM_ARGS(3), TL_ADAM_ARGS(4),
             TL_ADAM_ARGS(5), TL_ADAM_ARGS(6), TL_ADAM_ARGS(7), float lr, float beta1, float beta2, float eps,
             float weight_decay, int decoupled, float bc1, float bc2)
{
    int i = get_global_id(0);
    if (i >= ends.s7) return;
    if (i < ends.s0) TL_ADAM_ONE(p0, g0, m0, v0, i)
    else if (i < ends.s1) TL_ADAM_ONE(p1, g1, m1, v1, i - ends.s0)
    else if (i < ends.s2) TL_ADAM_ONE(p2, g2, m2, v2, i - ends.s1)
    else if (i < ends.s3) TL_ADAM_ONE(p3, g3, m3, v3, i - ends.s2)
    else if (i < ends.s4) TL_ADAM_ONE(p4, g4, m4, v4, i - ends.s3)
    else if (i < ends.s5) TL_ADAM_ONE(p5, g5, m5, v5, i - ends.s4)
    else if (i < ends.s6) TL_ADAM_ONE(p6, g6, m6, v6, i - ends.s5)
    else TL_ADAM_ONE(p7, g7, m7, v7, i - ends.s6)
}
