/* gemm_tc.c: matmul precision ("highest" float32, "high" TF32 on tensor cores) and the choice of the
 * tensor-core kernel (see gemm_tc.h, kernels/matmul_tc.cl). The family "matmul_tc" is built only on a
 * device that passes tc_capable(): the NVIDIA platform and CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV >= 8
 * (cl_nv_device_attribute_query), since its kernels are inline PTX (mma.sync m16n8k8 TF32, cp.async)
 * that no other compiler takes. Elsewhere the setting is stored and ignored. The configuration table
 * mirrors matmul_tc.cl's: production rows first, biggest tiles first; rows marked sweep exist only in a
 * build with -DTC_SWEEP (TLGPU_BUILD_OPTIONS), for benchmarks/bench_gemm.py --tc-sweep. The "z" rows
 * (swizzled unpadded tiles, sweep only) are kernels/matmul_tcz.cl, a family of its own, built only when one
 * of them is forced: a failure there leaves the other rows alone. A product takes the first production
 * row whose grid fills the device (work-groups >= compute units), else the last, unless even that gives
 * fewer work-groups than half the compute units: then the float32 tiers run it (smaller tiles; the MLP
 * step's 256-row products were slower in TF32); _gemm_tc("tag") forces a row, for tuning. */
#include "gemm_tc.h"
#include "cl_runtime.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001

enum { TC_NN, TC_NT, TC_TN, TC_TT, TC_LAYOUTS };
typedef struct {
    const char *tag;
    int bm, bn, warps, sweep;
    tl_kernel k[TC_LAYOUTS];
} tc_config;

#define TC_ROWF(fam, tag, bm, bn, warps, sweep)                                                             \
    {tag, bm, bn, warps, sweep,                                                                             \
     {TL_KERNEL(fam, "tl_gemm_tc_nn_" tag "_f32"), TL_KERNEL(fam, "tl_gemm_tc_nt_" tag "_f32"),                  \
      TL_KERNEL(fam, "tl_gemm_tc_tn_" tag "_f32"), TL_KERNEL(fam, "tl_gemm_tc_tt_" tag "_f32")}}
#define TC_ROW(tag, bm, bn, warps, sweep) TC_ROWF("matmul_tc", tag, bm, bn, warps, sweep)
#define TC_ROWZ(tag, bm, bn, warps) TC_ROWF("matmul_tcz", tag, bm, bn, warps, 1)   /* always sweep rows */
static tc_config configs[] = {
    TC_ROW("128x128x16w2x2s2", 128, 128, 4, 0),
    TC_ROW("64x64x32w2x2s2", 64, 64, 4, 0),
    TC_ROW("128x128x16w2x4s2", 128, 128, 8, 1),
    TC_ROW("64x64x16w2x2s3", 64, 64, 4, 1),
    TC_ROW("128x64x16w2x2s3", 128, 64, 4, 1),
    TC_ROW("128x128x8w2x4s3", 128, 128, 8, 1),
    TC_ROW("128x128x16w4x2s2", 128, 128, 8, 1),
    TC_ROW("64x128x16w2x2s3", 64, 128, 4, 1),
    TC_ROW("256x128x8w4x2s2", 256, 128, 8, 1),
    TC_ROW("128x256x8w2x4s2", 128, 256, 8, 1),
    TC_ROWZ("128x128x16w2x2s2z", 128, 128, 4),
    TC_ROWZ("128x128x16w2x2s3z", 128, 128, 4),
    TC_ROWZ("128x128x16w2x2s2zd", 128, 128, 4),
    TC_ROWZ("128x128x16w2x2s3zd", 128, 128, 4),
    TC_ROWZ("128x128x16w2x4s3z", 128, 128, 8),
    TC_ROWZ("256x128x16w4x2s2z", 256, 128, 8),
    TC_ROWZ("128x256x16w2x4s2z", 128, 256, 8),
    TC_ROWZ("128x64x32w2x2s2zd", 128, 64, 4),
    TC_ROWZ("128x128x8w2x2s4z", 128, 128, 4),
};
enum { TC_NCONFIGS = sizeof configs / sizeof configs[0] };

static int tf32;                                  /* 0: "highest" (float32), 1: "high" (TF32) */
static int forced = -1;                           /* _gemm_tc(tag): this row at every size */
static int capable = -1;                          /* -1 unknown, 0 no, else compute capability * 10 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 when the device runs matmul_tc.cl, 0 when not, -1 with an exception set. */
static int
tc_capable(void)
{
    const tl_runtime *rt;
    tl_err err = {0};
    if (capable >= 0) return capable > 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    cl_uint major = 0, minor = 0;
    int cc = 0;
    if (strstr(rt->info.platform, "NVIDIA") != NULL && (rt->info.type & CL_DEVICE_TYPE_GPU) &&
        clGetDeviceInfo(rt->device, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(rt->device, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) == CL_SUCCESS &&
        major >= 8)
        cc = (int)(major * 10 + minor);
#ifdef TL_TEST_HOOKS
    const char *emu = getenv("TLGPU_TC_EMULATE");        /* tests: the kernels built with -DTC_EMULATE=1 */
    if (cc == 0 && emu != NULL && strcmp(emu, "1") == 0) cc = 1;
#endif
    pthread_mutex_lock(&lock);
    capable = cc;
    pthread_mutex_unlock(&lock);
    return cc > 0;
}

int
tl_gemm_tc_choose(int M, int N, int K, int batch, int sAm, int sAk, int sBk, int sBn, tl_kernel **kh,
                  size_t *gws0, size_t *lws0)
{
    const tl_runtime *rt;
    tl_err err = {0};
    int ok;
    if (!tf32 || K < 1) return 0;
    if ((ok = tc_capable()) <= 0) return ok;
    int a = sAk == 1 ? 0 : sAm == 1 ? 2 : -1, b = sBn == 1 ? 0 : sBk == 1 ? 1 : -1;
    if (a < 0 || b < 0) return 0;                 /* neither stride 1: the float32 kernel reads it */
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    tc_config *c = forced >= 0 ? &configs[forced] : NULL;
    for (int i = 0; c == NULL && i < TC_NCONFIGS; i++) {
        if (configs[i].sweep) continue;
        size_t groups = (size_t)batch * (size_t)((M + configs[i].bm - 1) / configs[i].bm) *
                        (size_t)((N + configs[i].bn - 1) / configs[i].bn);
        int last = 1;
        for (int j = i + 1; j < TC_NCONFIGS; j++) last &= configs[j].sweep;
        if (groups >= rt->info.compute_units || last) c = &configs[i];
        if (c != NULL && forced < 0 && groups < rt->info.compute_units / 2)
            return 0;                                  /* too few tiles to fill the device: the float32 tiers
                                                          (smaller tiles) were faster (bench_train's MLP) */
    }
    *kh = &c->k[a + b];
    if (tl_kernel_py(*kh) == NULL) return -1;
    *lws0 = (size_t)c->warps * 32;
    *gws0 = (size_t)((M + c->bm - 1) / c->bm) * (size_t)((N + c->bn - 1) / c->bn) * *lws0;
    return 1;
}

PyObject *
tl_gemm_tc_set_precision(PyObject *Py_UNUSED(m), PyObject *arg)
{
    static const char *const names[] = {"highest", "high", "tf32"};
    static const int values[] = {0, 1, 1};
    if (!PyUnicode_Check(arg))
        return PyErr_Format(PyExc_TypeError, "set_matmul_precision: expected a str, got %s", Py_TYPE(arg)->tp_name);
    const char *s = PyUnicode_AsUTF8(arg);
    if (s == NULL) return NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i]) == 0) {
            tf32 = values[i];
            Py_RETURN_NONE;
        }
    }
    return PyErr_Format(PyExc_ValueError, "set_matmul_precision: '%s' is not one of 'highest' (float32), 'high' "
                        "or 'tf32' (TF32 tensor cores where the device has them)", s);
}

PyObject *
tl_gemm_tc_get_precision(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
    return PyUnicode_FromString(tf32 ? "high" : "highest");
}

/* _gemm_tc(): {"capability": cc * 10 (0: no tensor-core path here), "active": TF32 products would run on
 * tensor cores, "configs": [tags], "forced": tag or None}; _gemm_tc(tag) forces that row (None: the
 * size rule again). */
PyObject *
tl_gemm_tc_info(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *tag = NULL, *tags = NULL, *r = NULL;
    if (!PyArg_ParseTuple(args, "|O:_gemm_tc", &tag)) return NULL;
    if (tag == Py_None) {
        forced = -1;
    } else if (tag != NULL) {
        const char *s = PyUnicode_Check(tag) ? PyUnicode_AsUTF8(tag) : NULL;
        int i = 0;
        while (s != NULL && i < TC_NCONFIGS && strcmp(configs[i].tag, s) != 0) i++;
        if (s == NULL || i == TC_NCONFIGS) return PyErr_Format(PyExc_ValueError, "_gemm_tc: unknown configuration");
        forced = i;
    }
    int ok = tc_capable();
    if (ok < 0 || (tags = PyList_New(0)) == NULL) return NULL;
    for (int i = 0; i < TC_NCONFIGS; i++) {
        PyObject *s = PyUnicode_FromString(configs[i].tag);
        if (s == NULL || PyList_Append(tags, s) < 0) { Py_XDECREF(s); Py_DECREF(tags); return NULL; }
        Py_DECREF(s);
    }
    r = Py_BuildValue("{s:i,s:O,s:N,s:s}", "capability", capable, "active", ok && tf32 ? Py_True : Py_False,
                      "configs", tags, "forced", forced >= 0 ? configs[forced].tag : NULL);
    return r;
}
