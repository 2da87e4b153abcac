/* epilogue.c: bias adds and activations of a recorded trace moved into the matrix products before them
 * (epilogue.h).
 *
 * A product's command carries a tl_store_note when its kernel has a store epilogue (kernels/mm_epi.h; the
 * convolution's output pass: an activation only). The commands right after it may be, in this order, each
 * reading the previous one's result element for element:
 *   - a multiply by a float32 scalar (attention's `q @ k.T * scale`);
 *   - an add of a float32 vector of N values read as a bias, once per row, from element 0 (a linear layer's
 *     `x @ w.T + b`);
 *   - an add of a float32 tensor walked as the result (a residual: `h + x @ w`, `h += x @ w`);
 *   - a ReLU (or clamp(min=0), F.relu(inplace=True)), or a Tanh.
 * They become arguments of the product: its epilogue code, the scale, the bias buffer, the residual's buffer
 * and offset, and the buffer and offset of the last command's output, which the product then stores
 * instead. The values are the eager ones bit for bit: mm_epi rounds once per step, in the eager order, its
 * ReLU is ew_apply's, and Tanh is taken only where the eager kernel computed it one value at a time or on a
 * device whose float4 builtins round as its scalar ones (not a CPU device: PoCL's vector tanh differs).
 *
 * Every value the product no longer stores must be dead: an intermediate's storage was released during the
 * trace with no command touching its buffer before that (the arena's log, tl_trace_dead_after). The output
 * now written by the product must not be a buffer the product reads (its operands, the bias, the residual
 * other than element for element where the kernel allows it), and the bias and residual must not be values
 * of the chain (the product reads them before it stores). */
#include "epilogue.h"
#include "cl_runtime.h"
#include "tensor.h"
#include "trace.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { cl_mem mem; int off; } where_t;      /* n float32 elements from element off of mem */

/* Whether operand k of the note's layout walks as its output does (element for element). */
static int
walks_as_output(const tl_layout *L, int k)
{
    for (int d = 0; d < L->ndim; d++)
        if (L->st[k][d] != L->st[0][d]) return 0;
    return 1;
}

/* The command's output when it is an elementwise op of float32 `op` over n elements with a contiguous
 * output; NULL otherwise. */
static const tl_ew_note *
ew_of(const tl_cmd *m, int op, long n, where_t *out)
{
    const tl_ew_note *nt = m->ew;
    if (m->kind != TL_CMD_KERNEL || nt == NULL || m->arms_check || m->rng_block >= 0 || nt->op != op ||
        nt->math != TL_EWM_F32 || nt->L.n != n || nt->L.ndim < 1 || nt->L.ndim > TL_MAX_DIMS)
        return NULL;
    long expect = 1;
    for (int d = nt->L.ndim - 1; d >= 0; d--) {
        if (nt->L.st[0][d] != expect) return NULL;
        expect *= nt->L.shape[d];
    }
    for (int k = 0; k <= 2; k++)
        if (nt->dtype[k] != TL_F32) return NULL;
    if ((out->mem = tl_cmd_arg_mem(m, nt->arg[0])) == NULL) return NULL;
    out->off = nt->L.off[0];
    return nt;
}

/* Whether operand k of command m reads `cur` element for element. */
static int
reads(const tl_cmd *m, const tl_ew_note *nt, int k, where_t cur)
{
    return tl_cmd_arg_mem(m, nt->arg[k]) == cur.mem && nt->L.off[k] == cur.off && walks_as_output(&nt->L, k);
}

/* m: cur + bias (either order), bias an [N] float32 vector from element 0 read once per row. */
static int
bias_add(const tl_cmd *m, const tl_store_note *sn, where_t cur, cl_mem *bias, where_t *out)
{
    const tl_ew_note *nt = ew_of(m, TL_EW_ADD, sn->n, out);
    if (nt == NULL) return 0;
    const tl_layout *L = &nt->L;
    for (int k = 1; k <= 2; k++) {
        const int o = 3 - k, last = L->ndim - 1;
        cl_mem b = tl_cmd_arg_mem(m, nt->arg[o]);
        if (!reads(m, nt, k, cur) || b == NULL || b == cur.mem || L->off[o] != 0 || L->shape[last] != sn->N ||
            L->st[o][last] != 1)
            continue;
        int row = 1;
        for (int d = 0; d < last; d++) row &= L->st[o][d] == 0;
        if (!row) continue;
        *bias = b;
        return 1;
    }
    return 0;
}

/* m: cur * s or s * cur for a float32 scalar s (*alpha). */
static int
scale(const tl_cmd *m, const tl_store_note *sn, where_t cur, float *alpha, where_t *out)
{
    const tl_ew_note *nt = ew_of(m, TL_EW_MUL, sn->n, out);
    if (nt == NULL) return 0;
    for (int k = 1; k <= 2; k++) {
        const int o = 3 - k;
        if (!reads(m, nt, k, cur) || tl_cmd_arg_mem(m, nt->arg[o]) != NULL) continue;
        memcpy(alpha, &nt->bits[o - 1], sizeof *alpha);
        return 1;
    }
    return 0;
}

/* m: cur + r (either order), r a float32 tensor of the output's shape and walk (a residual). */
static int
residual(const tl_cmd *m, const tl_store_note *sn, where_t cur, where_t *res, where_t *out)
{
    const tl_ew_note *nt = ew_of(m, TL_EW_ADD, sn->n, out);
    if (nt == NULL) return 0;
    for (int k = 1; k <= 2; k++) {
        const int o = 3 - k;
        cl_mem r = tl_cmd_arg_mem(m, nt->arg[o]);
        if (!reads(m, nt, k, cur) || r == NULL || r == cur.mem || !walks_as_output(&nt->L, o)) continue;
        *res = (where_t){r, nt->L.off[o]};
        return 1;
    }
    return 0;
}

/* m: relu(cur) or tanh(cur); the activation code of mm_epi (1 relu, 2 tanh), 0 if neither. */
static int
activation(const tl_cmd *m, const tl_store_note *sn, where_t cur, int cpu, where_t *out)
{
    const tl_ew_note *nt = ew_of(m, TL_EW_RELU, sn->n, out);
    if (nt != NULL) return reads(m, nt, 1, cur) ? 1 : 0;
    nt = ew_of(m, TL_EW_CLAMP, sn->n, out);           /* clamp(min=0): F.relu(inplace=True), the same bits */
    if (nt != NULL)
        return reads(m, nt, 1, cur) && tl_cmd_arg_mem(m, nt->arg[2]) == NULL && tl_cmd_arg_mem(m, nt->arg[3]) == NULL &&
               nt->bits[1] == 0u && nt->bits[2] == 0x7f800000u ? 1 : 0;
    nt = ew_of(m, TL_EW_TANH, sn->n, out);
    return nt != NULL && reads(m, nt, 1, cur) && (nt->vec == 0 || !cpu) ? 2 : 0;
}

/* Whether command m (the product) reads `mem` through an argument other than its store's. */
static int
product_reads(const tl_cmd *m, const tl_store_note *sn, cl_mem mem)
{
    for (int j = 0; j < m->nmem; j++) {
        const int idx = (int)m->mems[j].idx;
        if (idx != sn->out_arg && idx != sn->bias_arg && idx != sn->res_arg && m->mems[j].mem == mem) return 1;
    }
    return 0;
}

static cl_int
set_mem(tl_cmd *m, int arg, cl_mem mem)
{
    for (int j = 0; j < m->nmem; j++)
        if ((int)m->mems[j].idx == arg) m->mems[j].mem = mem;
    return clSetKernelArg(m->k, (cl_uint)arg, sizeof mem, &mem);
}

/* The chain after a product: the buffers its values went through (none of them may be read as a bias or
 * a residual, whose values the product reads before anything of the chain is stored), where it stands. */
typedef struct {
    tl_trace *tr;
    where_t cur;
    cl_mem through[4];
    int n, j;
} chain_t;

static int
in_chain(const chain_t *c, cl_mem mem)
{
    for (int i = 0; i < c->n; i++)
        if (c->through[i] == mem) return 1;
    return 0;
}

/* Takes command c->j's output `out` as the chain's value when the value it replaces is dead and it lands in
 * no buffer read as an operand of the epilogue (bias; the residual unless `alias_ok` and out is it exactly). */
static int
step(chain_t *c, where_t out, cl_mem bias, where_t res, int alias_ok)
{
    if ((out.mem != c->cur.mem || out.off != c->cur.off) && !tl_trace_dead_after(c->tr, c->cur.mem, c->j, c->j + 1))
        return 0;
    if (out.mem == bias || (res.mem != NULL && out.mem == res.mem && !(alias_ok && out.off == res.off))) return 0;
    c->cur = out;
    if (c->n < 4) c->through[c->n++] = out.mem;
    c->j++;
    return 1;
}

/* Moves into product i what follows it, in mm_epi's order: a scale, a bias add, a residual add, an
 * activation (each optional). The number of commands moved (0: none), -1 on an OpenCL error. */
static int
absorb(tl_trace *tr, int i, int cpu, tl_err *err)
{
    tl_cmd *m = &tr->cmds[i];
    const tl_store_note *sn = m->store;
    chain_t c = {tr, {tl_cmd_arg_mem(m, sn->out_arg), sn->out_off}, {NULL}, 1, i + 1};
    c.through[0] = c.cur.mem;
    where_t out, res = {NULL, 0};
    cl_mem bias = NULL;
    float alpha = 1.0f;
    int act = 0, scaled = 0;
    if (c.cur.mem == NULL || sn->epi >> 1 != 0) return 0;
    if (c.j < tr->ncmds && sn->alpha_arg >= 0 && !(sn->epi & 1) && scale(&tr->cmds[c.j], sn, c.cur, &alpha, &out))
        scaled = step(&c, out, NULL, res, 0);
    if (c.j < tr->ncmds && sn->bias_arg >= 0 && !(sn->epi & 1) && bias_add(&tr->cmds[c.j], sn, c.cur, &bias, &out)) {
        if (in_chain(&c, bias) || !step(&c, out, bias, res, 0)) bias = NULL;
    }
    if (c.j < tr->ncmds && sn->res_arg >= 0 && residual(&tr->cmds[c.j], sn, c.cur, &res, &out)) {
        if (in_chain(&c, res.mem) || !step(&c, out, bias, res, sn->res_alias)) res.mem = NULL;
    }
    if (c.j < tr->ncmds && (act = activation(&tr->cmds[c.j], sn, c.cur, cpu, &out)) != 0 &&
        !step(&c, out, bias, res, 0))
        act = 0;
    const where_t cur = c.cur;
    if (c.j == i + 1 || product_reads(m, sn, cur.mem) || (sn->off_arg < 0 && cur.off != sn->out_off)) return 0;
    const int epi = (sn->epi & 1) | (bias != NULL) | act << 1 | (scaled ? 8 : 0) | (res.mem != NULL ? 16 : 0);
    cl_int rc = set_mem(m, sn->out_arg, cur.mem);
    if (rc == CL_SUCCESS && sn->off_arg >= 0) rc = clSetKernelArg(m->k, (cl_uint)sn->off_arg, sizeof(int), &cur.off);
    if (rc == CL_SUCCESS && bias != NULL) rc = set_mem(m, sn->bias_arg, bias);
    if (rc == CL_SUCCESS && scaled) rc = clSetKernelArg(m->k, (cl_uint)sn->alpha_arg, sizeof alpha, &alpha);
    if (rc == CL_SUCCESS && res.mem != NULL) rc = set_mem(m, sn->res_arg, res.mem);
    if (rc == CL_SUCCESS && res.mem != NULL)
        rc = clSetKernelArg(m->k, (cl_uint)sn->res_off_arg, sizeof(int), &res.off);
    if (rc == CL_SUCCESS) rc = clSetKernelArg(m->k, (cl_uint)sn->epi_arg, sizeof(int), &epi);
    if (rc != CL_SUCCESS) {
        tl_err_set(err, rc, "clSetKernelArg", "tlgpu.jit epilogue");
        return -1;
    }
    char name[160];
    snprintf(name, sizeof name, "%s%s%s%s%s", m->what, scaled ? "*scale" : "", bias != NULL ? "+bias" : "",
             res.mem != NULL ? "+residual" : "", act == 1 ? "+relu" : act == 2 ? "+tanh" : "");
    char *owned = strdup(name);
    if (owned != NULL) {
        free(m->name);
        m->name = owned;
        m->what = owned;
    }
    m->store->epi = epi;
    return c.j - i - 1;
}

tl_status
tl_epilogue_trace(tl_trace *tr, tl_err *err)
{
    const tl_runtime *rt;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    const int cpu = (rt->info.type & CL_DEVICE_TYPE_CPU) != 0;
    int removed = 0;
    for (int i = 0; i < tr->ncmds; i++) {
        if (tr->cmds[i].kind != TL_CMD_KERNEL || tr->cmds[i].store == NULL) continue;
        const int k = absorb(tr, i, cpu, err);
        if (k < 0) return err->code;
        for (int j = i + 1; j <= i + k; j++) {
            tl_cmd_clear(&tr->cmds[j]);
            tr->cmds[j].kind = TL_CMD_GONE;
        }
        removed += k;
        i += k;
    }
    tr->fused_away += removed;
    return TL_OK;
}
