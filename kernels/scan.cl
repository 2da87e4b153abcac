/* scan.cl: inclusive prefix sums along one axis of a contiguous tensor seen as (outer, len, inner): one
 * work-item per line, adding in order like np.cumsum (so float32 results follow numpy's rounding), from the
 * end when `reverse` is set (the gradient of a cumsum). The int32 variant adds as uint: it wraps like numpy's
 * int32 instead of overflowing, which OpenCL leaves undefined for signed ints. */
#define TL_SCAN(NAME, T)                                                                            \
kernel void                                                                                         \
NAME(int lines, int len, int inner, int reverse, global T *o, global const T *x, int off)            \
{                                                                                                   \
    int l = get_global_id(0);                                                                       \
    if (l >= lines) return;                                                                         \
    int base = (l / inner) * len * inner + l % inner;                                               \
    T acc = 0;                                                                                      \
    for (int k = 0; k < len; k++) {                                                                 \
        int j = base + (reverse ? len - 1 - k : k) * inner;                                         \
        acc += x[off + j];                                                                          \
        o[j] = acc;                                                                                 \
    }                                                                                               \
}
TL_SCAN(tl_cumsum_f32, float)
TL_SCAN(tl_cumsum_i32, uint)
