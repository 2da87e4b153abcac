/* capture.h: recording the compute-queue commands of a function call into a trace, for tlgpu.jit.
 * While this thread captures, stream.c runs every q0 command as usual and also records it here: a kernel
 * as a private cl_kernel with the argument values the op set (tl_capture_arg, from tl_set_args), a copy
 * or a native kernel as its parameters. Storages the commands touch that the trace's arena did not give
 * are held (retained) by the trace so their blocks stay; the arena's blocks stay with the arena. After the
 * call, trace.h binds the slots and frees traces; stream.c's tl_stream_replay enqueues one. */
#ifndef TL_CAPTURE_H
#define TL_CAPTURE_H
#include "storage.h"
#include "arena.h"
#include "../kernels/ew_ops.h"

enum { TL_CMD_KERNEL, TL_CMD_COPY, TL_CMD_NATIVE, TL_CMD_GONE };   /* GONE: removed by a pass, until dropped */
typedef struct { cl_uint idx; cl_mem mem; int slot; } tl_cmd_mem;   /* a cl_mem argument; slot -1: fixed */

/* What an elementwise launch computes, attached by its op family right after the launch (tl_capture_note_ew):
 * the fusion pass (csrc/jit/fuse.c) reads only this, never kernel names. math: how the kernel computes,
 * TL_EWM_F32 (float32 operands, ew_apply), TL_EWM_I32 (int32 operands, ew_apply_i32; a comparison stores
 * a float32 mask) or TL_EWM_ANY (every operand loaded as float32 through its dtype, the result stored
 * through the output's: tl_ew_any, tl_convert). Operand 0 is the output, 1..3 the inputs a, b, c: a buffer
 * (the kernel argument arg[k] holds it) or, when that argument is absent or NULL, the 32-bit scalar bits[k-1]. */
enum { TL_EWM_F32, TL_EWM_I32, TL_EWM_ANY };
/* Flags or'ed into math where the kernel computed elements as float4 (ew_apply4) rather than one float at a
 * time (a device's float4 builtins need not round like its scalar ones): VEC4 the elements below n & ~3
 * (tl_ew_contig_f32, tl_ew_hot_f32), ROWS4 the columns below N & ~3 of each row of the last dim's N
 * (tl_ew_rows_f32). note.vec keeps them (shifted down). */
enum { TL_EWM_VEC4 = 4, TL_EWM_ROWS4 = 8 };
typedef struct {
    int op, math, vec;                                 /* a kernels/ew_ops.h op code; TL_EWM_*; flags >> 2 */
    tl_layout L;                                       /* the launch's layout (offsets, strides in elements) */
    int dtype[4], arg[4];                              /* storage dtype codes (tensor.h); buffer arguments */
    uint32_t bits[3];                                  /* scalar operands' values as the kernel got them */
} tl_ew_note;

/* Where a matrix product stores, attached by its op family right after the launch (tl_capture_note_store):
 * matmul.cl's kernels add a bias and apply ReLU/Tanh as they store (mm_epi), so tlgpu.jit's epilogue pass
 * (csrc/jit/epilogue.c) may move the bias add and activation that follow the product into it. The kernel's
 * argument indices of the output buffer, its offset, the bias buffer and the epilogue code (-1 for the offset:
 * the kernel has none, the output stays where it is; -1 for the bias: none is taken from the trace); epi as
 * launched (bit 0 bias, act << 1); the output: n contiguous float32 elements from element out_off, rows of N. */
typedef struct {
    int out_arg, off_arg, bias_arg, epi_arg;
    int alpha_arg, res_arg, res_off_arg;               /* -1: the kernel has no scale / residual */
    int res_alias;                                     /* whether the residual may be the output itself */
    int epi, N, out_off;
    long n;
} tl_store_note;

typedef struct {
    int kind, arms_check;                              /* arms_check: a device-side check (stream.h) */
    const char *what;
    cl_kernel k;                                       /* TL_CMD_KERNEL: the trace's own kernel object */
    cl_uint dim;
    size_t gws[3], lws[3];
    int has_lws;
    tl_cmd_mem *mems;                                  /* its cl_mem arguments (copies: src 0, dst 1) */
    int nmem;
    size_t soff, doff, n;                              /* TL_CMD_COPY */
    void (CL_CALLBACK *fn)(void *);                    /* TL_CMD_NATIVE */
    void *args;
    size_t cb, *loc;                                   /* loc[i]: offset of mems[i]'s pointer in args */
    int rng_seed, rng_block;                           /* argument indices refreshed per replay; -1: none */
    int refreshed;                                     /* Trace.set_arg changes its scalars between replays */
    uint64_t null_args;                                /* bit i: argument i set with a NULL value of a cl_mem's
                                                        * size (no buffer); bit 63 also: an index >= 63 */
    uint64_t rng_used;
    cl_kernel from;                                    /* the op's kernel object it was recorded from */
    tl_ew_note *ew;                                    /* elementwise metadata, NULL: none (never fused) */
    tl_store_note *store;                              /* a product's store, NULL: none */
    char *name;                                        /* owned text `what` points to (fused commands) */
} tl_cmd;

void tl_cmd_clear(tl_cmd *m);     /* releases what one command holds (kernel, arrays) and zeroes it */
cl_mem tl_cmd_arg_mem(const tl_cmd *m, int arg);      /* the buffer of kernel argument `arg`, NULL: none */

/* A slot copied in (an input, before the commands) or out (an output, after them; `back`: an input the call
 * wrote in place, copied out too, or the caller's buffer would not see the write). */
typedef struct { int slot, back; tl_storage *traced; } tl_slot_copy;
/* A storage the call wrote in place (autograd's tl_mark_write): a replay bumps its version as the call did, so a
 * graph that saved its old values refuses to backward through it as after an eager write. s: the storage
 * (retained while owned: until tl_trace_bind, which keeps held ones by the trace's hold), or NULL and slot: an
 * input or output slot (the caller's buffer of each replay). */
typedef struct { tl_storage *s; int slot, owned; const char *op; } tl_trace_write;

typedef struct tl_trace {
    tl_cmd *cmds;
    int ncmds, room;
    tl_storage **held;                                 /* retained: touched storages not of the arena */
    int nheld, held_room;
    tl_arena *arena;
    int nslots, ninputs;
    tl_slot_copy *copies;                              /* slots touched by native kernels */
    int ncopies;
    int *remap, nrecorded;                             /* after fusion: recorded index -> command, -1: fused */
    tl_trace_write *writes;                            /* storages the call wrote in place (bump_writes) */
    int nwrites, wroom;
    int fused_away, dead_stores;                       /* the fusion pass's counts (csrc/jit/fuse.h) */
    struct tl_cmdbuf *cmdbuf;                          /* replay's command buffers (cmdbuf.h), NULL: the loop */
    char error[512];                                   /* the first recording failure; "" if none */
} tl_trace;

/* The replay's source of random-stream positions (ops_random.c installs it): advances the stream by
 * `used` 32-bit values and returns the first Philox block and the seed. Called with the GIL held. */
typedef uint64_t (*tl_rng_take_fn)(uint64_t used, uint64_t *seed);
void tl_capture_set_rng(tl_rng_take_fn take);
tl_rng_take_fn tl_capture_rng_source(void);

tl_status tl_capture_begin(tl_err *err);               /* this thread; TL_E_STATE if it captures already */
tl_trace *tl_capture_end(void);                        /* stops; the trace (check ->error), NULL if none */
tl_trace *tl_capture_current(void);                    /* this thread's, NULL when not capturing */

/* Called by the layers above while capturing (cheap no-ops otherwise). */
void tl_capture_arg(cl_kernel k, cl_uint idx, size_t size, const void *value);
void tl_capture_rng(int seed_arg, int block_arg, uint64_t used);   /* tags the last command as a draw */
int  tl_capture_last(void);                            /* index of the last recorded command, -1: none */
void tl_capture_drop_last(void);       /* the last command needs no replay (a one-time setup of a buffer) */
void tl_capture_note_write(tl_storage *s, const char *op);   /* s written in place by op (a static string) */
/* Attaches elementwise metadata to the last command when it launched k (else nothing): buffers in
 * arguments out_arg .. out_arg + 3 (output, a, b, c), scalars in scalar_arg .. + 2 (-1: none), dtypes
 * packed 4 bits each (output in bits 0..3, a, b, c above: tl_ew_any's dts). */
void tl_capture_note_ew(cl_kernel k, int op, int math, const tl_layout *L, int dts, int out_arg, int scalar_arg);
void tl_capture_note_store(cl_kernel k, const tl_store_note *note);   /* on k's command just recorded */

/* Whether the value a command `last` of tr left in mem is never read again: its storage was released after
 * `last` (the arena's log) and no command from `end` until that release touches mem. */
int tl_trace_dead_after(const tl_trace *tr, cl_mem mem, int last, int end);

/* Called by stream.c after each q0 command it enqueued while capturing. */
void tl_capture_kernel(cl_kernel k, cl_uint dim, const size_t *gws, const size_t *lws, tl_storage *const *st,
                       int n, const char *what);
void tl_capture_copy(tl_storage *dst, size_t doff, tl_storage *src, size_t soff, size_t n);
void tl_capture_native(void (CL_CALLBACK *fn)(void *), const void *args, size_t cb, const void **mem_loc,
                       tl_storage *const *st, int n, const char *what);
void tl_capture_fail(const char *fmt, const char *what);   /* records the first failure (fmt has one %s) */
#endif
