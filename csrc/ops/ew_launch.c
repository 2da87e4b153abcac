/* ew_launch.c: the launch of one elementwise op: the kernel of kernels/elementwise.cl for the operands'
 * layout, dtypes and device (int32 math: tl_ew_i32; float32: the strided tl_ew_f32 or, contiguous, its float4
 * twin; on CPU devices also the hot ops' own loops and the row kernel; any other dtype mix: tl_ew_any, or
 * tl_ew_contig_any for contiguous floating or uint8 operands), its arguments, and the note
 * tlgpu.jit's fusion reads (capture.h: the math, and which elements the kernel computed as float4). */
#include "ew_launch.h"
#include "capture.h"

/* Ops tl_ew_hot_f32 takes (contiguous, two operands). It and tl_ew_rows_f32 run on CPU devices only (PoCL's
 * vectoriser is what they are for): other devices keep the kernels they had. */
static const unsigned char EW_HOT[TL_EW_COUNT] = {
    [TL_EW_ADD] = 1, [TL_EW_SUB] = 1, [TL_EW_MUL] = 1, [TL_EW_DIV] = 1, [TL_EW_RELU] = 1, [TL_EW_RELU_GRAD] = 1,
};

/* tl_ew_rows_f32 over L's (up to) three dims: 16 columns per work-item along dim 0, rows along 1, the outer
 * dim along 2. Work-groups of 16 x 8 work-items (4 x 16 for rows of at most 64): on PoCL about 20 % faster
 * than one row per group, and few local sizes, since PoCL compiles a kernel per local size. */
static int
launch_rows(tl_kernel *kh, const tl_layout *L, tl_storage *const *st)
{
    tl_err err = {0};
    const int last = L->ndim - 1;
    size_t l0 = L->shape[last] <= 64 ? 4 : 16, l1 = 128 / l0;
    if (l0 * l1 > kh->wg) l0 = kh->wg < l0 ? kh->wg : l0, l1 = kh->wg / l0;
    size_t lws[3] = {l0, last >= 1 ? l1 : 1, 1};
    size_t gws[3] = {tl_round_up(((size_t)L->shape[last] + 15) / 16, lws[0]),
                     last >= 1 ? tl_round_up((size_t)L->shape[last - 1], lws[1]) : 1,
                     last == 2 ? (size_t)L->shape[0] : 1};
    if (tl_stream_launch(kh->k, (cl_uint)L->ndim, gws, lws, st, 4, 1u, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

int
tl_ew_launch(int op, tl_tensor *out, const tl_ew_operand *o, int ndim, const Py_ssize_t *shape, int as_int)
{
    static tl_kernel ks = TL_KERNEL("elementwise", "tl_ew_f32"), kc = TL_KERNEL("elementwise", "tl_ew_contig_f32"),
                     ki = TL_KERNEL("elementwise", "tl_ew_i32"), kr = TL_KERNEL("elementwise", "tl_ew_rows_f32"),
                     kh_hot = TL_KERNEL("elementwise", "tl_ew_hot_f32"), ka = TL_KERNEL("elementwise", "tl_ew_any"),
                     kca = TL_KERNEL("elementwise", "tl_ew_contig_any");
    tl_tensor *ops[4] = {out, o[0].t, o[1].t, o[2].t};
    tl_layout L;
    tl_layout_make(&L, ndim, shape, ops, 4);
    int any = !as_int && out->dtype != TL_F32, dts = out->dtype;
    for (int i = 0; i < 3; i++)
        if (o[i].t != NULL) any |= !as_int && o[i].t->dtype != TL_F32, dts |= o[i].t->dtype << (4 + 4 * i);
    int contig = !as_int && L.ndim <= 1, floating = TL_IS_FLOAT(out->dtype);   /* floating out, uint8 in too */
    for (int i = 0; contig && i < 4; i++) contig = ops[i] == NULL || L.ndim == 0 || L.st[i][0] == 1;
    for (int i = 0; i < 3; i++) floating &= o[i].t == NULL || TL_IS_FLOAT(o[i].t->dtype) || o[i].t->dtype == TL_U8;
    const int cpu = as_int || any ? 0 : tl_device_is_cpu();      /* the rows and hot kernels: CPU devices only */
    if (cpu < 0) return -1;
    const int contig_any = any && contig && floating;                                  /* tl_ew_contig_any */
    contig &= !any;
    int rows = cpu && !any && !contig && L.ndim <= 3 && L.st[0][L.ndim - 1] == 1;      /* tl_ew_rows_f32's */
    for (int i = 1; rows && i < 4; i++) rows = ops[i] == NULL || (unsigned)L.st[i][L.ndim - 1] <= 1u;
    int hot = cpu && contig && EW_HOT[op] && o[2].t == NULL;
    tl_kernel *kh = as_int ? &ki : contig_any ? &kca : any ? &ka : hot ? &kh_hot : contig ? &kc : rows ? &kr : &ks;
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return -1;
    const size_t sz[10] = {sizeof op, sizeof dts, sizeof L, sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem),
                           sizeof(cl_mem), 4, 4, 4};
    const void *v[10] = {&op, &dts, &L, TL_MEM(out), TL_MEM(o[0].t), TL_MEM(o[1].t), TL_MEM(o[2].t),
                         &o[0].value, &o[1].value, &o[2].value};
    if (as_int) for (int i = 0; i < 3; i++) v[7 + i] = &o[i].ivalue;
    tl_storage *st[4] = {out->storage, o[0].t ? o[0].t->storage : NULL, o[1].t ? o[1].t->storage : NULL,
                         o[2].t ? o[2].t->storage : NULL};
    size_t items = contig || contig_any ? ((size_t)L.n + 15) / 16 : (size_t)L.n;  /* contiguous: 4 x 4 each */
    if (tl_set_args(k, 0, 1, sz, v) < 0 || tl_set_args(k, 1, 8 + any, sz + 2 - any, v + 2 - any) < 0) return -1;
    int rc = rows ? launch_rows(kh, &L, st) : cpu || contig_any ? tl_launch_flat(kh, items, st, 4)  /* small: */
                                                                : tl_launch_1d(kh, items, st, 4, 1u);   /* groups of 16 */
    if (rc < 0) return -1;
    tl_capture_note_ew(k, op, (as_int ? TL_EWM_I32 : any ? TL_EWM_ANY : TL_EWM_F32) |   /* tlgpu.jit's fusion */
                       (contig || contig_any ? TL_EWM_VEC4 : rows ? TL_EWM_ROWS4 : 0), &L, dts, 2 + any, 6 + any);
    return 0;
}
