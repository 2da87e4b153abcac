/* gemm_splitk.c: split-K for the float32 tiled GEMM (see gemm_splitk.h). The weight gradients of a
 * convolution (g [O, B*OH*OW] @ cols.T: a few dozen rows, K = 10^4..10^5) make a handful of tiles, so on a
 * 132-unit GPU the tiled kernel ran 8 work-groups, each walking all of K (conv4->32 at batch 256: 6.2 ms,
 * 270 GFLOP/s on an H100). Splitting K gives every unit work.
 * The rule (tl_gemm_splitk_rule), with tiles = batch * ceil(M/MWG) * ceil(N/NWG) of the tier pick_tier chose:
 *  - split only when tiles < compute units (the grid does not fill one wave), K >= 2048 and K >= 4 * max(M, N)
 *    (K dominates: the partials, S*M*N floats written and read once, stay small against the product);
 *  - aim at S = ceil(4 * units / tiles) (four work-groups per unit), capped so that a slice keeps >= 256
 *    elements of K, S <= 64 and the partials <= 64 MiB;
 *  - prefer an S from that aim down to half of it (two work-groups per unit) that divides K into equal
 *    slices of a whole number of KWG-deep tiles: one launch, every tile on the unchecked interior path;
 *  - else slices of ceil(K/S) rounded up to KWG and a shorter last slice (a second, small launch).
 * The partials live in a pooled temporary [S, batch, M, N] released after the enqueues (q0 is in order);
 * tl_gemm_splitk_reduce_f32 adds them in slice order, so results are bit-identical run to run. */
#include "gemm_splitk.h"
#include "gemm_params.h"
#include "settings.h"
#include <stdlib.h>
#include <string.h>

enum { SPLITK_MIN_K = 2048, SPLITK_K_OVER_MN = 4, SPLITK_MIN_SLICE = 256, SPLITK_MAX_S = 64, SPLITK_WAVES = 4 };
#define SPLITK_MAX_BYTES ((size_t)64 << 20)

static int mode = -1;                     /* -1: TLGPU_GEMM_SPLITK not read yet; else tl_gemm_splitk_mode's */
static long n_products, n_launches;       /* split products and their partial launches, for tests */

int
tl_gemm_splitk_rule(int M, int N, int K, int batch, int mwg, int nwg, int kwg, int cus, int *ks)
{
    const size_t tiles = (size_t)batch * (size_t)((M + mwg - 1) / mwg) * (size_t)((N + nwg - 1) / nwg);
    const long mn = M > N ? M : N;
    *ks = K;
    if (tiles == 0 || tiles >= (size_t)cus || K < SPLITK_MIN_K || (long)K < SPLITK_K_OVER_MN * mn) return 1;
    size_t want = ((size_t)SPLITK_WAVES * (size_t)cus + tiles - 1) / tiles;
    size_t cap = (size_t)(K / SPLITK_MIN_SLICE), per = (size_t)batch * (size_t)M * (size_t)N * sizeof(float);
    if (cap > SPLITK_MAX_S) cap = SPLITK_MAX_S;
    if (cap > SPLITK_MAX_BYTES / per) cap = SPLITK_MAX_BYTES / per;
    const int s0 = (int)(want < cap ? want : cap);
    if (s0 < 2) return 1;
    for (int s = s0; s >= 2 && 2 * s >= s0; s--) {       /* equal slices of whole tiles: one launch */
        if (K % s == 0 && (K / s) % kwg == 0) {
            *ks = K / s;
            return s;
        }
    }
    int k1 = (K + s0 - 1) / s0;                          /* else whole tiles and a shorter last slice */
    k1 = (k1 + kwg - 1) / kwg * kwg;
    const int s = (K + k1 - 1) / k1;
    if (s < 2) return 1;
    *ks = k1;
    return s;
}

int
tl_gemm_splitk_mode(void)
{
    if (mode >= 0) return mode;
    const char *env = tl_setting_str(TL_SET_GEMM_SPLITK);
    char *end = NULL;
    long v = env != NULL ? strtol(env, &end, 10) : 0;
    if (env == NULL || *env == '\0' || strcmp(env, "auto") == 0) {
        mode = 0;
    } else if (strcmp(env, "off") == 0 || (*end == '\0' && (v == 0 || v == 1))) {
        mode = 1;
    } else if (*end == '\0' && v >= 2 && v <= 1024) {
        mode = (int)v;
    } else {
        PyErr_Format(PyExc_ValueError, "matmul: TLGPU_GEMM_SPLITK='%s': expected auto, off or a slice count "
                     "from 2 to 1024", env);
        return -1;
    }
    return mode;
}

int
tl_gemm_splitk_reduce(tl_tensor *part, int S, int n, tl_tensor *out, int offC)
{
    static tl_kernel reduce = TL_KERNEL("matmul", "tl_gemm_splitk_reduce_f32");
    const size_t I = sizeof(int), Mm = sizeof(cl_mem);
    if (tl_kernel_py(&reduce) == NULL ||
        tl_set_args(reduce.k, 0, 5, (size_t[]){I, I, Mm, Mm, I},
                    (const void *[]){&n, &S, &part->storage->mem, &out->storage->mem, &offC}) < 0)
        return -1;
    tl_storage *rst[2] = {out->storage, part->storage};
    return tl_launch_1d(&reduce, (size_t)n, rst, 2, 1u);
}

int
tl_gemm_splitk_launch(const tl_splitk_problem *p, int S, int ks, tl_kernel *kh, const size_t *gws,
                      const size_t *lws, tl_tensor *a, tl_tensor *b, tl_tensor *out)
{
    const int last = p->K - (S - 1) * ks, n = p->batch * p->M * p->N;
    tl_err err = {0};
    tl_tensor *part = NULL;
    int rc = -1;
    if (tl_kernel_py(kh) == NULL) return -1;
    if ((part = tl_tensor_empty(TL_F32, 1, (Py_ssize_t[]){(Py_ssize_t)S * n})) == NULL) return -1;
    tl_storage *st[3] = {part->storage, a->storage, b->storage};
    const int epi_args = tl_mm_has_epi(kh->k);        /* a store epilogue (mm_epi.h): off */
    for (int l = 0; l < 2; l++) {                        /* the slices of length ks, then a last one of `last` */
        const int first = l == 0 ? 0 : S - 1, count = l == 0 ? S - (last != ks) : last != ks;
        if (count == 0) continue;
        int kk = l == 0 ? ks : last, offA = p->offA + first * ks * p->sAk, offB = p->offB + first * ks * p->sBk;
        int sAs = ks * p->sAk, sBs = ks * p->sBk, offC = first * n;
        const size_t I = sizeof(int), Mm = sizeof(cl_mem);  /* slice = the kernel's outer batch index b1 */
        const size_t sz[18] = {I, I, I, I, Mm, I, I, I, I, I, Mm, I, I, I, I, I, Mm, I};
        const void *val[18] = {&p->M, &p->N, &kk, &p->batch, &a->storage->mem, &offA, &sAs, &p->sAb, &p->sAm,
                               &p->sAk, &b->storage->mem, &offB, &sBs, &p->sBb, &p->sBk, &p->sBn,
                               &part->storage->mem, &offC};
        size_t g[3] = {gws[0], gws[1], (size_t)count * (size_t)p->batch}, lw[3] = {lws[0], lws[1], 1};
        if (tl_set_args(kh->k, 0, 18, sz, val) < 0 ||
            (epi_args && tl_mm_epi_set(kh->k, part->storage->mem, NULL, 0, 1.0f, NULL, 0) < 0))
            goto done;
        if (tl_stream_launch(kh->k, 3, g, lw, st, 3, 1u, kh->name, &err) != TL_OK) { tl_raise(&err); goto done; }
        n_launches++;
    }
    if (tl_gemm_splitk_reduce(part, S, n, out, p->offC) < 0) goto done;
    n_products++;
    rc = 0;
done:
    Py_DECREF(part);                                     /* back to the pool: later q0 work is ordered after */
    return rc;
}

#ifdef TL_TEST_HOOKS
/* _gemm_splitk([S]): {"forced": None (the rule), 1 (never) or S, "products": split products so far,
 * "launches": their partial launches}; with S (None, or 1..1024) sets the switch first. */
PyObject *
tl_gemm_splitk_py(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *s = NULL;
    if (!PyArg_ParseTuple(args, "|O:_gemm_splitk", &s)) return NULL;
    if (tl_gemm_splitk_mode() < 0) return NULL;
    if (s == Py_None) {
        mode = 0;
    } else if (s != NULL) {
        long v = PyLong_AsLong(s);
        if (v == -1 && PyErr_Occurred()) return NULL;
        if (v < 1 || v > 1024) return PyErr_Format(PyExc_ValueError, "_gemm_splitk: S must be None or 1..1024");
        mode = (int)v;
    }
    PyObject *f = mode == 0 ? Py_NewRef(Py_None) : PyLong_FromLong(mode);
    return f == NULL ? NULL : Py_BuildValue("{s:N,s:l,s:l}", "forced", f, "products", n_products, "launches",
                                            n_launches);
}
#endif

/* _gemm_splitk_rule(M, K, N, mwg, nwg, kwg, cus, batch=1): (S, ks) of the rule for that tile and device. */
PyObject *
tl_gemm_splitk_rule_py(PyObject *Py_UNUSED(m), PyObject *args)
{
    int M, K, N, mwg, nwg, kwg, cus, batch = 1, ks;
    if (!PyArg_ParseTuple(args, "iiiiiii|i:_gemm_splitk_rule", &M, &K, &N, &mwg, &nwg, &kwg, &cus, &batch))
        return NULL;
    if (M < 1 || K < 1 || N < 1 || mwg < 1 || nwg < 1 || kwg < 1 || cus < 1 || batch < 1)
        return PyErr_Format(PyExc_ValueError, "_gemm_splitk_rule: every argument must be >= 1");
    int S = tl_gemm_splitk_rule(M, N, K, batch, mwg, nwg, kwg, cus, &ks);
    return Py_BuildValue("(ii)", S, ks);
}
