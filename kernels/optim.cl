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
    /* Without amsgrad, vm is v itself (written twice with the same value): every access is unconditional, which
     * PoCL vectorises (a load under `if (amsgrad)` kept the whole kernel scalar: 4.5x slower). */
    global float *vm = amsgrad ? vmax : v;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi, vh = amsgrad ? fmax(vm[i], vi) : vi;
    m[i] = mi;
    v[i] = vi;
    vm[i] = vh;
    p[i] = pi - lr * (mi / bc1) / (sqrt(vh / bc2) + eps);
}
