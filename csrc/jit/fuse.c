/* fuse.c: elementwise chains of a recorded trace into generated kernels (fuse.h).
 *
 * Only commands that carry a tl_ew_note (attached by the op family right after its launch) take part: every
 * other command ends a run. A command joins the run before it when it has the same element count and its
 * output is contiguous, and when its buffer accesses agree with the run's: an operand read at element i
 * (the output's own walk) or an output may share a buffer with the run's only at the same byte offset and
 * dtype (the same elements) or without overlapping at all; an operand read through its own strides
 * (broadcast, transposed) must be of a buffer no command of the run writes, and no command of the run may
 * write a buffer read that way. Then every element is independent of the others and the chain can run per
 * element: each buffer region is loaded once, on its first read, every command's result stays in a
 * register, later reads of a region take the register, and every region the run wrote is stored once, at
 * the end, with its last value (so in-place ops and two ops writing one buffer keep their meaning).
 *
 * The generated kernels call the same ew_apply / ew_apply4 / ew_apply_i32 as the eager kernels (kernels/
 * ew_apply.h; the program is kernels/ew_fused.cl followed by the generated text), with the op codes as
 * constants. A work-item takes 4 consecutive elements, and each op computes each of them as float4 or one
 * at a time as its eager kernel did (the note's vec flags), so a fused chain gives the eager bits: the same
 * operations in the same order, with the same builtins. Stores to float16, bfloat16, uint8 and int32 are
 * rounded in registers as the eager store-then-load would. Element count, offsets and scalar values are kernel
 * arguments, so the text depends only on the chain's structure: one program per distinct text, built once
 * per process (programs.c keeps it) and cached on disk. */
#include "fuse.h"
#include "trace.h"
#include "programs.h"
#include "tensor.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CMDS 64                                   /* commands per generated kernel */
#define MAX_REGS 24                                   /* buffer regions (two kernel arguments each) */
#define MAX_SCALARS 48

static const char *const OP_CODE[TL_EW_COUNT] = {
#define X(name, arity) "TL_EW_" #name,
    TL_EW_OPS(X)
#undef X
};
static const unsigned char ARITY[TL_EW_COUNT] = {
#define X(name, arity) arity,
    TL_EW_OPS(X)
#undef X
};

/* One buffer access of a command: at element i (bcast 0: offset off + i) or through the operand's own
 * strides (bcast 1: off + the index expression idx, of the element index '@'). */
typedef struct {
    cl_mem mem;
    int dtype, off, bcast, write;
    char idx[400];
} acc_t;

typedef struct {
    acc_t a;
    int written;                                      /* a command of the run writes it */
    int loaded;                                       /* its first access in the run reads memory */
    int last;                                         /* the last command touching it */
    int gone;                                         /* dead, overwritten by another region: never stored */
    int var;                                          /* the register holding its value, -1: none yet */
} region;

typedef struct {
    int first, count, n;
    region reg[MAX_REGS];
    int nreg, nscal;
    uint32_t scal[MAX_SCALARS];
} run;

typedef struct { char *p; size_t n, cap; int oom; } sbuf;

static void
sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        int k = b->oom ? 0 : vsnprintf(b->p != NULL ? b->p + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (b->oom || k < 0) { b->oom = 1; return; }
        if ((size_t)k < room) { b->n += (size_t)k; return; }
        size_t cap = b->cap ? 2 * b->cap : 4096;
        while (cap - b->n <= (size_t)k) cap *= 2;
        char *grown = realloc(b->p, cap);
        if (grown == NULL) { b->oom = 1; return; }
        b->p = grown;
        b->cap = cap;
    }
}

static int
esize(int dt)
{
    return dt == TL_F16 || dt == TL_BF16 ? 2 : dt == TL_U8 ? 1 : 4;
}

/* The index expression of operand k of L, past its offset, for the output's row-major walk: the sum over
 * dims of ((@ / inner) % shape) * stride, '@' the element index. -1 if it does not fit out. */
static int
bcast_index(const tl_layout *L, int k, char *out, size_t cap)
{
    size_t at = 0;
    long inner = 1;
    out[0] = '\0';
    for (int d = L->ndim - 1; d >= 0; d--) {
        const int st = L->st[k][d];
        char q[64], r[96];
        if (st != 0) {
            if (inner == 1) snprintf(q, sizeof q, "@");
            else snprintf(q, sizeof q, "@ / %ld", inner);
            if (d > 0) snprintf(r, sizeof r, "(%s %% %d)", q, L->shape[d]);
            else snprintf(r, sizeof r, "(%s)", q);
            int w = snprintf(out + at, cap - at, "%s%s * %d", at ? " + " : "", r, st);
            if (w < 0 || (size_t)w >= cap - at) return -1;
            at += (size_t)w;
        }
        inner *= L->shape[d];
    }
    if (at == 0) snprintf(out, cap, "0");
    return 0;
}

/* The command's buffer accesses (the output first, then its tensor operands; opnd[j]: which operand), or
 * -1 when the command cannot be fused: no metadata, an output that is not contiguous, dtypes its math
 * does not take. */
static int
describe(const tl_cmd *m, acc_t *acc, int *opnd)
{
    const tl_ew_note *nt = m->ew;
    if (m->kind != TL_CMD_KERNEL || nt == NULL || m->arms_check || m->rng_block >= 0) return -1;
    const tl_layout *L = &nt->L;
    if (L->n <= 0 || L->ndim < 0 || L->ndim > TL_MAX_DIMS || nt->op < 0 || nt->op >= TL_EW_COUNT) return -1;
    int na = 0;
    for (int k = 0; k < 4; k++) {
        cl_mem mem = tl_cmd_arg_mem(m, nt->arg[k]);
        const int dt = nt->dtype[k];
        if (mem == NULL) {
            if (k == 0) return -1;
            continue;
        }
        if (dt < 0 || dt >= TL_NDTYPES) return -1;
        if (nt->math == TL_EWM_F32 && dt != TL_F32) return -1;
        if (nt->math == TL_EWM_I32 && dt != TL_I32 && !(k == 0 && dt == TL_F32)) return -1;
        acc_t *a = &acc[na];
        memset(a, 0, sizeof *a);
        a->mem = mem;
        a->dtype = dt;
        a->off = L->off[k];
        a->write = k == 0;
        long expect = 1;
        int same = 1;
        for (int d = L->ndim - 1; d >= 0; d--) {
            if (k == 0 && L->st[0][d] != expect) return -1;   /* the output walks its elements in order */
            expect *= L->shape[d];
            same &= L->st[k][d] == L->st[0][d];
        }
        if (!same) {
            a->bcast = 1;
            if (bcast_index(L, k, a->idx, sizeof a->idx) < 0) return -1;
        }
        opnd[na++] = k;
    }
    return na;
}

/* Whether access x may not run in one kernel with region r (of the same or an earlier command). */
static int
conflict(const acc_t *x, const acc_t *r, int r_written, long n)
{
    if (x->mem != r->mem) return 0;
    if (x->bcast || r->bcast) return (x->bcast && r_written) || (r->bcast && x->write);
    if (!x->write && !r_written) return 0;            /* two reads: any overlap will do */
    const long xb = (long)x->off * esize(x->dtype), rb = (long)r->off * esize(r->dtype);
    if (xb == rb && x->dtype == r->dtype) return 0;   /* the same elements */
    return xb < rb + n * esize(r->dtype) && rb < xb + n * esize(x->dtype);
}

static int
same_region(const acc_t *x, const acc_t *r)
{
    return x->mem == r->mem && x->bcast == r->bcast && x->off == r->off && x->dtype == r->dtype &&
           (!x->bcast || strcmp(x->idx, r->idx) == 0);
}

static region *
find_region(run *R, const acc_t *x)
{
    for (int i = 0; i < R->nreg; i++)
        if (!R->reg[i].gone && same_region(x, &R->reg[i].a)) return &R->reg[i];
    return NULL;
}

/* Whether the storage region g belongs to was released after g's last access and before command `at` was
 * recorded (the arena's log): its value is then never read again, and `at` writes a new storage. */
static int
released_before(const tl_trace *tr, const region *g, int at)
{
    const int s = tl_arena_put_after(tr->arena, g->a.mem, g->last + 1);
    return s >= 0 && s <= at;
}

/* Whether region g's last value may be left unstored: its storage was released (the arena's log) and no
 * command from `end` on touches the buffer before that. */
static int
dead_after(const tl_trace *tr, const region *g, int end)
{
    return tl_trace_dead_after(tr, g->a.mem, g->last, end);
}

static int
scalars_of(const tl_cmd *m, const int *opnd, int na)
{
    int ns = 0;
    for (int k = 1; k <= ARITY[m->ew->op]; k++) {
        int tensor = 0;
        for (int j = 0; j < na; j++) tensor |= opnd[j] == k;
        ns += !tensor;
    }
    return ns;
}

/* Adds command ci of tr to run R: 1 added, 0 it cannot join R (R unchanged), -1 it cannot be fused at all.
 * A write may overlap a region of the run other than element for element only where that region is an
 * intermediate the run wrote (never loaded, never read through strides) whose storage was released
 * before the write: the region is then gone (never stored) and no later read may touch it. */
static int
join(run *R, const tl_trace *tr, int ci)
{
    const tl_cmd *m = &tr->cmds[ci];
    acc_t acc[4];
    int opnd[4], na = describe(m, acc, opnd);
    unsigned char gone[MAX_REGS] = {0};
    if (na < 0) return -1;
    const long n = m->ew->L.n;
    for (int j = 1; j < na; j++)                      /* the command's own accesses (eager: unaliased) */
        for (int i = 0; i < j; i++)
            if (conflict(&acc[j], &acc[i], acc[i].write, n)) return -1;
    if (R->count > 0 && n != R->n) return 0;
    if (R->count == MAX_CMDS) return 0;
    int fresh = 0;
    for (int j = 0; j < na; j++) {
        int found = 0;
        if (!acc[j].write && find_region(R, &acc[j]) != NULL) continue;   /* a register: no memory access */
        for (int i = 0; i < R->nreg; i++) {
            const region *g = &R->reg[i];
            const int hit = conflict(&acc[j], &g->a, g->written, n) || same_region(&acc[j], &g->a);
            if (g->gone) {
                if (hit && !acc[j].write) return 0;
                continue;
            }
            if (conflict(&acc[j], &g->a, g->written, n)) {
                if (!acc[j].write || g->loaded || g->a.bcast || !released_before(tr, g, ci)) return 0;
                for (int k = 1; k < na; k++)          /* not a region this command reads */
                    if (same_region(&acc[k], &g->a) || conflict(&acc[k], &g->a, 1, n)) return 0;
                gone[i] = 1;
            }
            found |= same_region(&acc[j], &g->a) && !gone[i];
        }
        for (int i = 0; i < j && !found; i++) found = same_region(&acc[j], &acc[i]);
        fresh += !found;
    }
    const int ns = scalars_of(m, opnd, na);
    if (R->nreg + fresh > MAX_REGS || R->nscal + ns > MAX_SCALARS) return 0;
    for (int i = 0; i < R->nreg; i++) R->reg[i].gone |= gone[i];
    for (int k = 1; k <= na; k++) {                   /* the inputs first (read before the write), then */
        const acc_t *x = &acc[k % na];                /* the output, acc[0] */
        region *g = find_region(R, x);
        if (g == NULL) {
            g = &R->reg[R->nreg++];
            *g = (region){.a = *x, .loaded = !x->write, .var = -1};
            g->a.write = 0;
        }
        g->written |= x->write;
        g->last = ci;
    }
    R->nscal += ns;
    R->n = (int)n;
    R->count++;
    return 1;
}

static const char *
ctype(int dt)
{
    static const char *const T[TL_NDTYPES] = {"float", "int", "half", "ushort", "uchar"};
    return T[dt];
}

/* idx with each '@' (the element index) replaced by `with`. */
static void
subst(const char *idx, const char *with, char *out, size_t cap)
{
    size_t k = 0, w = strlen(with);
    for (const char *p = idx; *p && k + w + 1 < cap; p++) {
        if (*p == '@') { memcpy(out + k, with, w); k += w; }
        else out[k++] = *p;
    }
    out[k] = '\0';
}

/* v<var> = region g's four lanes (lanes past n read the last element: li is clamped). */
static void
emit_load(sbuf *b, region *g, int r, int var)
{
    static const char *const vt[TL_NDTYPES] = {"float4", "int4", "float4", "float4", "float4"};
    const int dt = g->a.dtype;
    sb_printf(b, "    %s v%d = ", vt[dt], var);
    if (!g->a.bcast && (dt == TL_F32 || dt == TL_I32)) sb_printf(b, "full ? vload4(0, r%d + o%d + i0) : ", r, r);
    sb_printf(b, "(%s)(", vt[dt]);
    for (int j = 0; j < 4; j++) {
        char lane[16], at[600];
        snprintf(lane, sizeof lane, "li.s%d", j);
        if (g->a.bcast) subst(g->a.idx, lane, at, sizeof at);
        else snprintf(at, sizeof at, "%s", lane);
        const char *sep = j < 3 ? ", " : ");\n";
        switch (dt) {
        case TL_F16: sb_printf(b, "vload_half(o%d + %s, r%d)%s", r, at, r, sep); break;
        case TL_BF16: sb_printf(b, "as_float((uint)r%d[o%d + %s] << 16)%s", r, r, at, sep); break;
        case TL_U8: sb_printf(b, "(float)r%d[o%d + %s]%s", r, r, at, sep); break;
        default: sb_printf(b, "r%d[o%d + %s]%s", r, r, at, sep); break;
        }
    }
    g->var = var;
}

/* v<var> = the command's result for the four lanes, in its output dtype's register form (what a store and a
 * load back give), each lane computed as float4 or one at a time as the eager kernel did. */
static void
emit_op(sbuf *b, const tl_ew_note *nt, const char x[3][48], int var)
{
    const char *op = OP_CODE[nt->op];
    const int dt = nt->dtype[0];
    char args[200];
    snprintf(args, sizeof args, "%s, %s, %s, %s", op, x[0], x[1], x[2]);
    if (nt->math == TL_EWM_F32) {
        const int N = nt->L.ndim > 0 ? nt->L.shape[nt->L.ndim - 1] : 1;
        if (nt->vec & (TL_EWM_VEC4 >> 2))             /* float4 below n & ~3: the full blocks */
            sb_printf(b, "    float4 v%d = full ? ew_apply4(%s) : TL_FS(%s);\n", var, args, args);
        else if ((nt->vec & (TL_EWM_ROWS4 >> 2)) && N % 4 == 0)
            sb_printf(b, "    float4 v%d = ew_apply4(%s);\n", var, args);
        else if ((nt->vec & (TL_EWM_ROWS4 >> 2)) && N >= 4)   /* float4 below N & ~3 in each row */
            sb_printf(b, "    float4 v%d = select(TL_FS(%s), ew_apply4(%s), lane %% %d < %d);\n", var, args, args, N,
                      N & ~3);
        else
            sb_printf(b, "    float4 v%d = TL_FS(%s);\n", var, args);
        return;
    }
    if (nt->math == TL_EWM_I32) {
        if (dt == TL_I32) sb_printf(b, "    int4 v%d = TL_IS(%s);\n", var, args);
        else sb_printf(b, "    float4 v%d = as_float4(TL_IS(%s));\n", var, args);   /* a comparison's mask */
        return;
    }
    if (nt->vec & (TL_EWM_VEC4 >> 2))                 /* tl_ew_contig_any: float4 below n & ~3 */
        sb_printf(b, "    float4 t%d = full ? ew_apply4(%s) : TL_FS(%s);\n", var, args, args);
    else
        sb_printf(b, "    float4 t%d = TL_FS(%s);\n", var, args);
    switch (dt) {
    case TL_F32: sb_printf(b, "    float4 v%d = t%d;\n", var, var); break;
    case TL_I32: sb_printf(b, "    int4 v%d = TL_TO_I32(t%d);\n", var, var); break;
    case TL_F16: sb_printf(b, "    float4 v%d = tl_round_f16(t%d);\n", var, var); break;
    case TL_BF16: sb_printf(b, "    float4 v%d = TL_ROUND_BF16(t%d);\n", var, var); break;
    default: sb_printf(b, "    float4 v%d = TL_ROUND_U8(t%d);\n", var, var); break;
    }
}

static void
emit_store(sbuf *b, const region *g, int r)
{
    const int dt = g->a.dtype;
    if (dt == TL_F32 || dt == TL_I32) sb_printf(b, "    if (full) vstore4(v%d, 0, r%d + o%d + i0);\n    else {\n", g->var, r, r);
    else sb_printf(b, "    {\n");
    for (int j = 0; j < 4; j++) {
        sb_printf(b, "        %sif (i0 + %d < n) ", j ? "" : "", j);
        switch (dt) {
        case TL_F16: sb_printf(b, "vstore_half_rte(v%d.s%d, o%d + i0 + %d, r%d);\n", g->var, j, r, j, r); break;
        case TL_BF16: sb_printf(b, "r%d[o%d + i0 + %d] = tl_bf16_bits(v%d.s%d);\n", r, r, j, g->var, j); break;
        case TL_U8:
            sb_printf(b, "r%d[o%d + i0 + %d] = (uchar)(convert_long_sat_rtz(v%d.s%d) & 0xff);\n", r, r, j, g->var, j);
            break;
        default: sb_printf(b, "r%d[o%d + i0 + %d] = v%d.s%d;\n", r, r, j, g->var, j); break;
        }
    }
    sb_printf(b, "    }\n");
}

/* Kernel tl_fused_<id> for R's commands, appended to src. R is joined again command by command (the same
 * decisions as find_runs), which fills its regions and scalars in the order of the kernel's arguments: n,
 * then (buffer, offset) per region, then the scalars. name: the op names. */
static void
emit_run(sbuf *src, const tl_trace *tr, run *R, int id, sbuf *name, int *dead)
{
    sbuf body = {0};
    const int first = R->first, count = R->count;
    int nv = 0, ns = 0, isint[MAX_SCALARS];
    memset(R, 0, sizeof *R);
    R->first = first;
    sb_printf(name, "fused(");
    for (int c = first; c < first + count; c++) {
        const tl_cmd *m = &tr->cmds[c];
        const tl_ew_note *nt = m->ew;
        const int in = nt->math == TL_EWM_I32;
        acc_t acc[4];
        int opnd[4], na = describe(m, acc, opnd);
        char x[3][48];
        if (join(R, tr, c) != 1) { body.oom = 1; break; }   /* cannot happen: find_runs joined it */
        for (int k = 1; k <= 3; k++) {
            int j = 0;
            while (j < na && opnd[j] != k) j++;
            if (j < na) {
                region *g = find_region(R, &acc[j]);
                if (g->var < 0) emit_load(&body, g, (int)(g - R->reg), nv++);
                if (nt->math == TL_EWM_ANY && g->a.dtype == TL_I32) snprintf(x[k - 1], sizeof x[0], "convert_float4(v%d)", g->var);
                else snprintf(x[k - 1], sizeof x[0], "v%d", g->var);
            } else if (k <= ARITY[nt->op]) {
                isint[ns] = in;
                R->scal[ns] = nt->bits[k - 1];
                snprintf(x[k - 1], sizeof x[0], "(%s)(s%d)", in ? "int4" : "float4", ns++);
            } else {
                snprintf(x[k - 1], sizeof x[0], in ? "(int4)(0)" : "(float4)(0.0f)");
            }
        }
        emit_op(&body, nt, (const char (*)[48])x, nv);
        find_region(R, &acc[0])->var = nv++;
        char lower[24];
        size_t k = 0;
        for (const char *p = OP_CODE[nt->op] + 6; *p && k + 1 < sizeof lower; p++)
            lower[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
        lower[k] = '\0';
        sb_printf(name, "%s%s", c > first ? "," : "", lower);
    }
    sb_printf(name, ")");
    for (int r = 0; r < R->nreg; r++) {               /* every region the run wrote, unless it died */
        if (!R->reg[r].written) continue;
        if (R->reg[r].gone || dead_after(tr, &R->reg[r], first + count)) (*dead)++;
        else emit_store(&body, &R->reg[r], r);
    }
    sb_printf(src, "\nkernel void\ntl_fused_%d(int n", id);
    for (int r = 0; r < R->nreg; r++)
        sb_printf(src, ", global %s%s *r%d, int o%d", R->reg[r].written ? "" : "const ", ctype(R->reg[r].a.dtype), r, r);
    for (int i = 0; i < ns; i++) sb_printf(src, ", %s s%d", isint[i] ? "int" : "float", i);
    sb_printf(src, ")\n{\n    const int i0 = get_global_id(0) * 4;\n    if (i0 >= n) return;\n");
    sb_printf(src, "    const int full = i0 + 4 <= n;\n");
    sb_printf(src, "    const int4 lane = (int4)(i0) + (int4)(0, 1, 2, 3), li = min(lane, (int4)(n - 1));\n");
    sb_printf(src, "%s}\n", body.p != NULL ? body.p : "");
    src->oom |= body.oom;
    free(body.p);
}

/* The fused command for R: its kernel from prog with every argument set. */
static tl_status
make_cmd(const tl_runtime *rt, cl_program prog, const run *R, int id, char *name, tl_cmd *m, tl_err *err)
{
    char kname[32];
    cl_int rc;
    size_t kmax = 0, mult = 1;
    memset(m, 0, sizeof *m);
    m->kind = TL_CMD_KERNEL;
    m->rng_seed = m->rng_block = -1;
    m->name = name;
    m->what = name;
    snprintf(kname, sizeof kname, "tl_fused_%d", id);
    if ((m->k = clCreateKernel(prog, kname, &rc)) == NULL) return tl_err_set(err, rc, "clCreateKernel", kname);
    if ((m->mems = calloc((size_t)R->nreg, sizeof *m->mems)) == NULL)
        return tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for a fused command");
    rc = clSetKernelArg(m->k, 0, sizeof(int), &R->n);
    for (int r = 0; r < R->nreg && rc == CL_SUCCESS; r++) {
        m->mems[m->nmem++] = (tl_cmd_mem){(cl_uint)(1 + 2 * r), R->reg[r].a.mem, -1};
        rc = clSetKernelArg(m->k, (cl_uint)(1 + 2 * r), sizeof(cl_mem), &R->reg[r].a.mem);
        if (rc == CL_SUCCESS) rc = clSetKernelArg(m->k, (cl_uint)(2 + 2 * r), sizeof(int), &R->reg[r].a.off);
    }
    for (int s = 0; s < R->nscal && rc == CL_SUCCESS; s++)
        rc = clSetKernelArg(m->k, (cl_uint)(1 + 2 * R->nreg + s), 4, &R->scal[s]);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clSetKernelArg", kname);
    clGetKernelWorkGroupInfo(m->k, rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    clGetKernelWorkGroupInfo(m->k, rt->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof mult, &mult, NULL);
    size_t wg = kmax < 256 ? kmax : 256;              /* one fixed size: PoCL compiles one per size */
    if (mult > 0 && wg >= mult) wg -= wg % mult;
    if (wg == 0) wg = 1;
    m->dim = 1;
    m->lws[0] = wg;
    m->gws[0] = tl_round_up(((size_t)R->n + 3) / 4, wg);   /* 4 elements a work-item */
    m->has_lws = 1;
    return TL_OK;
}

/* The runs of 2 or more commands, greedily from the front. */
static int
find_runs(const tl_trace *tr, run **out)
{
    run *runs = NULL, cur = {0};
    int nruns = 0, room = 0;
    for (int i = 0; i <= tr->ncmds; i++) {
        int r = i < tr->ncmds ? join(&cur, tr, i) : -1;
        if (r == 1) continue;
        if (cur.count >= 2) {
            if (nruns == room) {
                room = room ? 2 * room : 8;
                run *grown = realloc(runs, (size_t)room * sizeof *grown);
                if (grown == NULL) { free(runs); return -1; }
                runs = grown;
            }
            runs[nruns++] = cur;
        }
        memset(&cur, 0, sizeof cur);
        cur.first = i;
        if (r == 0 && join(&cur, tr, i) != 1) cur.first = i + 1;
        if (r == -1) cur.first = i + 1;
    }
    *out = runs;
    return nruns;
}

tl_status
tl_fuse_trace(tl_trace *tr, tl_err *err)
{
    const tl_runtime *rt;
    run *runs = NULL;
    sbuf src = {0};
    char **names = NULL;
    tl_cmd *made = NULL, *cmds = NULL;
    int *remap = NULL, nmade = 0, removed = 0, dead = 0;
    cl_program prog;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    const int nruns = find_runs(tr, &runs);
    if (nruns <= 0) {
        free(runs);
        return nruns < 0 ? tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for the fusion pass") : TL_OK;
    }
    names = calloc((size_t)nruns, sizeof *names);
    made = calloc((size_t)nruns, sizeof *made);
    remap = malloc((size_t)tr->ncmds * sizeof *remap);
    if (names == NULL || made == NULL || remap == NULL) { st = tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "fusion"); goto done; }
    for (int r = 0; r < nruns; r++) {
        sbuf name = {0};
        emit_run(&src, tr, &runs[r], r, &name, &dead);
        names[r] = name.p;
        removed += runs[r].count - 1;
        if (name.oom) src.oom = 1;
    }
    if (src.oom) { st = tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for the fused kernels' source"); goto done; }
    if ((st = tl_program_get_generated("ew_fused", src.p, "tlgpu.jit fused kernels", &prog, err)) != TL_OK) goto done;
    for (; nmade < nruns; nmade++) {
        st = make_cmd(rt, prog, &runs[nmade], nmade, names[nmade], &made[nmade], err);
        names[nmade] = NULL;                          /* the command owns it now */
        if (st != TL_OK) { nmade++; goto done; }
    }
    const int ncmds = tr->ncmds - removed;
    if ((cmds = malloc((size_t)(ncmds > 0 ? ncmds : 1) * sizeof *cmds)) == NULL) {
        st = tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for the fused trace");
        goto done;
    }
    int at = 0, r = 0;
    for (int i = 0; i < tr->ncmds; i++) {
        if (r < nruns && i == runs[r].first) {
            for (int j = i; j < i + runs[r].count; j++) {
                remap[j] = -1;
                tl_cmd_clear(&tr->cmds[j]);
            }
            cmds[at++] = made[r];
            memset(&made[r], 0, sizeof made[r]);
            i += runs[r].count - 1;
            r++;
            continue;
        }
        remap[i] = at;
        cmds[at++] = tr->cmds[i];
    }
    free(tr->cmds);
    const int nold = tr->ncmds;
    tr->cmds = cmds;
    tr->ncmds = tr->room = ncmds;
    tl_trace_compose_remap(tr, remap, nold);
    remap = NULL;
    tr->fused_away += removed;
    tr->dead_stores = dead;
done:
    for (int i = 0; i < nmade; i++) tl_cmd_clear(&made[i]);
    for (int i = 0; names != NULL && i < nruns; i++) free(names[i]);
    free(names);
    free(made);
    free(remap);
    free(runs);
    free(src.p);
    return st;
}
