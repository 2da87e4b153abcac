/* jit_py.c: the Python face of capture and replay (tlgpu.jit builds on it; tlgpu/jit.py). _jit_begin()
 * starts capturing this thread's commands; the traced call runs for real; _jit_end(inputs, outputs) turns
 * the recording into a Trace whose slots are the inputs' buffers and the outputs' (those the trace's arena
 * gave). Trace.replay(inputs) enqueues every command again with the new inputs bound and returns the
 * outputs as new tensors (fresh blocks for the arena's, views of the new inputs, the same fixed tensors).
 * The layer above ops/: it uses tensor/ and core/ only. */
#include "ops_common.h"
#include "capture.h"
#include "cmdbuf.h"
#include "epilogue.h"
#include "fuse.h"
#include "settings.h"
#include "trace.h"

enum { OUT_EMPTY, OUT_SLOT, OUT_INPUT, OUT_FIXED };
typedef struct {
    int kind, index, dtype, ndim;                      /* index: the slot (OUT_SLOT) or the input */
    Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS], offset;
    PyObject *fixed;                                   /* OUT_FIXED: the tensor itself */
} out_spec;

typedef struct {
    PyObject_HEAD
    tl_trace *tr;
    int ninputs, nslots, nouts;
    size_t *slot_bytes;                                /* the outputs' blocks, by slot */
    out_spec *outs;
    long replays;
} trace_obj;

static PyTypeObject *trace_type;

static int
tensor_list(PyObject *seq, const char *what, PyObject **fast)
{
    *fast = PySequence_Fast(seq, what);
    if (*fast == NULL) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(*fast); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(*fast, i);
        if (!tl_tensor_check(o)) {
            PyErr_Format(PyExc_TypeError, "%s: item %zd is %s, not a Tensor", what, i, Py_TYPE(o)->tp_name);
            Py_CLEAR(*fast);
            return -1;
        }
    }
    return 0;
}

static PyObject *
fn_jit_begin(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_err err = {0};
    if (tl_capture_begin(&err) != TL_OK) return tl_raise(&err), NULL;
    Py_RETURN_NONE;
}

static PyObject *
fn_jit_abort(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_trace_free(tl_capture_end());
    Py_RETURN_NONE;
}

static PyObject *
fn_jit_capturing(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(tl_capture_current() != NULL);
}

static PyObject *
fn_jit_cmdbuf_device(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_err err = {0};
    const char *why;
    if (tl_cmdbuf_device(&why, &err) != TL_OK) return tl_raise(&err), NULL;
    if (why == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(why);
}

static PyObject *
fn_jit_last_command(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLong(tl_capture_last());
}

/* The tensors' part of a trace's signature: for each, (dtype, requires_grad, offset, the first tensor sharing its
 * storage, shape..., strides...); a trace binds one buffer per slot and bakes layouts into its kernels. */
static PyObject *
fn_jit_key(PyObject *Py_UNUSED(m), PyObject *seq)
{
    PyObject *fast, *key;
    if (tensor_list(seq, "_jit_key", &fast) < 0) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if ((key = PyTuple_New(n)) == NULL) { Py_DECREF(fast); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        const tl_tensor *t = tl_tensor_CAST(PySequence_Fast_GET_ITEM(fast, i));
        Py_ssize_t first = i;
        for (Py_ssize_t j = 0; j < i && t->storage != NULL; j++)
            if (tl_tensor_CAST(PySequence_Fast_GET_ITEM(fast, j))->storage == t->storage) { first = j; break; }
        PyObject *k = PyTuple_New(4 + 2 * t->ndim);
        if (k == NULL) { Py_DECREF(key); Py_DECREF(fast); return NULL; }
        PyTuple_SET_ITEM(k, 0, PyLong_FromLong(t->dtype));
        PyTuple_SET_ITEM(k, 1, PyLong_FromLong(t->requires_grad));
        PyTuple_SET_ITEM(k, 2, PyLong_FromSsize_t(t->offset));
        PyTuple_SET_ITEM(k, 3, PyLong_FromSsize_t(first));
        for (int d = 0; d < t->ndim; d++) {
            PyTuple_SET_ITEM(k, 4 + d, PyLong_FromSsize_t(t->shape[d]));
            PyTuple_SET_ITEM(k, 4 + t->ndim + d, PyLong_FromSsize_t(t->strides[d]));
        }
        PyTuple_SET_ITEM(key, i, k);
    }
    Py_DECREF(fast);
    return key;
}

static void
trace_dealloc(PyObject *self)
{
    trace_obj *t = (trace_obj *)self;
    PyTypeObject *tp = Py_TYPE(self);
    tl_trace_free(t->tr);
    for (int i = 0; t->outs != NULL && i < t->nouts; i++) Py_XDECREF(t->outs[i].fixed);
    free(t->outs);
    free(t->slot_bytes);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* The outputs' specs and slots; slots[] gets the inputs' storages, then each distinct arena storage. */
static int
describe_outputs(trace_obj *t, PyObject *ins, PyObject *outs, tl_storage **slots)
{
    for (int i = 0; i < t->nouts; i++) {
        tl_tensor *o = tl_tensor_CAST(PySequence_Fast_GET_ITEM(outs, i));
        out_spec *sp = &t->outs[i];
        sp->dtype = o->dtype;
        sp->ndim = o->ndim;
        sp->offset = o->offset;
        memcpy(sp->shape, o->shape, sizeof sp->shape);
        memcpy(sp->strides, o->strides, sizeof sp->strides);
        sp->kind = OUT_EMPTY;
        if (o->storage == NULL) continue;
        for (int j = 0; j < t->ninputs && sp->kind == OUT_EMPTY; j++)
            if (tl_tensor_CAST(PySequence_Fast_GET_ITEM(ins, j))->storage == o->storage) {
                sp->kind = OUT_INPUT;
                sp->index = j;
            }
        if (sp->kind != OUT_EMPTY) continue;
        if (o->storage->arena == NULL || o->storage->arena != t->tr->arena) {
            sp->kind = OUT_FIXED;                       /* a parameter or buffer the function returned */
            Py_INCREF(o);
            sp->fixed = (PyObject *)o;
            continue;
        }
        sp->kind = OUT_SLOT;
        for (sp->index = t->ninputs; sp->index < t->nslots && slots[sp->index] != o->storage; sp->index++) {}
        if (sp->index == t->nslots) {
            slots[t->nslots] = o->storage;
            t->slot_bytes[t->nslots++] = o->storage->nbytes;
        }
    }
    return 0;
}

static PyObject *
fn_jit_end(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *ins_arg, *outs_arg, *ins = NULL, *outs = NULL;
    tl_storage **slots = NULL;
    tl_err err = {0};
    tl_trace *tr = tl_capture_end();
    trace_obj *t = NULL;
    int fuse = 1, want_cb = -1, use_cb = 0;
    tl_status st = TL_OK;
    if (tr == NULL) return PyErr_Format(PyExc_RuntimeError, "tlgpu.jit: no trace is being captured");
    if (!PyArg_ParseTuple(args, "OO|pi:_jit_end", &ins_arg, &outs_arg, &fuse, &want_cb)) goto fail;
    if (tr->error[0]) { PyErr_Format(PyExc_RuntimeError, "%s", tr->error); goto fail; }
    if (tl_cmdbuf_choose(want_cb < 0 ? -1 : want_cb != 0, &use_cb, &err) != TL_OK ||
        (use_cb && tl_cmdbuf_attach(tr, &err) != TL_OK)) { tl_raise(&err); goto fail; }
    if (fuse && tl_setting_flag(TL_SET_JIT_FUSE)) {   /* may build a program: without the GIL */
        Py_BEGIN_ALLOW_THREADS
        st = tl_epilogue_trace(tr, &err);
        if (st == TL_OK) st = tl_fuse_trace(tr, &err);
        if (st == TL_OK) st = tl_trace_drop_gone(tr, &err);
        Py_END_ALLOW_THREADS
        if (st != TL_OK) { tl_raise(&err); goto fail; }
    }
    if (tensor_list(ins_arg, "tlgpu.jit inputs", &ins) < 0 || tensor_list(outs_arg, "tlgpu.jit outputs", &outs) < 0)
        goto fail;
    if ((t = PyObject_New(trace_obj, trace_type)) == NULL) goto fail;
    t->tr = NULL;
    t->ninputs = (int)PySequence_Fast_GET_SIZE(ins);
    t->nouts = (int)PySequence_Fast_GET_SIZE(outs);
    t->nslots = t->ninputs;
    t->replays = 0;
    t->outs = calloc((size_t)t->nouts + 1, sizeof *t->outs);
    t->slot_bytes = calloc((size_t)(t->ninputs + t->nouts) + 1, sizeof *t->slot_bytes);
    slots = calloc((size_t)(t->ninputs + t->nouts) + 1, sizeof *slots);
    if (t->outs == NULL || t->slot_bytes == NULL || slots == NULL) { PyErr_NoMemory(); goto fail; }
    t->tr = tr;
    tr = NULL;
    for (int i = 0; i < t->ninputs; i++) slots[i] = tl_tensor_CAST(PySequence_Fast_GET_ITEM(ins, i))->storage;
    if (describe_outputs(t, ins, outs, slots) < 0) goto fail;
    if (tl_trace_bind(t->tr, slots, t->nslots, t->ninputs, &err) != TL_OK) { tl_raise(&err); goto fail; }
    free(slots);
    Py_DECREF(ins);
    Py_DECREF(outs);
    return (PyObject *)t;
fail:
    tl_trace_free(tr);
    free(slots);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(t);
    return NULL;
}

static PyObject *
trace_replay(PyObject *self, PyObject *seq)
{
    trace_obj *t = (trace_obj *)self;
    PyObject *ins, *res = NULL;
    tl_err err = {0};
    tl_storage *stack[16], **slots = t->nslots <= 16 ? stack : calloc((size_t)t->nslots, sizeof *slots);
    int made = t->ninputs;
    if (slots == NULL) return PyErr_NoMemory();
    if (tensor_list(seq, "Trace.replay", &ins) < 0) goto done;
    if (PySequence_Fast_GET_SIZE(ins) != t->ninputs) {
        PyErr_Format(PyExc_ValueError, "Trace.replay: %d inputs expected, got %zd", t->ninputs,
                     PySequence_Fast_GET_SIZE(ins));
        goto done;
    }
    for (int i = 0; i < t->ninputs; i++) slots[i] = tl_tensor_CAST(PySequence_Fast_GET_ITEM(ins, i))->storage;
    for (; made < t->nslots; made++)
        if (tl_storage_new(t->slot_bytes[made], &slots[made], &err) != TL_OK) { tl_raise(&err); goto done; }
    const tl_status st = tl_stream_replay(t->tr, slots, &err);
    tl_trace_bump_writes(t->tr, slots);                 /* even a failed replay may have written some */
    if (st != TL_OK) { tl_raise(&err); goto done; }
    t->replays++;
    if ((res = PyList_New(t->nouts)) == NULL) goto done;
    for (int i = 0; i < t->nouts; i++) {
        const out_spec *sp = &t->outs[i];
        PyObject *o;
        if (sp->kind == OUT_FIXED) {
            Py_INCREF(sp->fixed);
            o = sp->fixed;
        } else {
            tl_storage *s = sp->kind == OUT_EMPTY ? NULL : slots[sp->index];
            o = (PyObject *)tl_tensor_from_storage(s, sp->dtype, sp->ndim, sp->shape, sp->strides, sp->offset);
        }
        if (o == NULL) { Py_CLEAR(res); goto done; }
        PyList_SET_ITEM(res, i, o);
    }
done:
    for (int i = t->ninputs; i < made; i++) tl_storage_release(slots[i]);
    if (slots != stack) free(slots);
    Py_XDECREF(ins);
    return res;
}

/* None where the trace replays one command at a time, else its segments (planned at the first replay) and counts. */
static PyObject *
command_buffer_stats(const tl_trace *tr)
{
    tl_cmdbuf_stats c;
    if (tr->cmdbuf == NULL) Py_RETURN_NONE;
    tl_cmdbuf_get_stats(tr->cmdbuf, &c);
    return Py_BuildValue("{s:i,s:i,s:l,s:l,s:l,s:l,s:i,s:d}", "segments", c.segments, "commands", c.commands,
                         "enqueues", c.enqueues, "records", c.records, "hits", c.hits, "loop_runs", c.loop_runs,
                         "variants", c.variants, "record_s", c.record_s);
}

static PyObject *
trace_memory_plan(PyObject *self, PyObject *Py_UNUSED(a))
{
    trace_obj *t = (trace_obj *)self;
    tl_arena_stats a;
    size_t held = 0, outs = 0;
    int kinds[3] = {0, 0, 0};
    tl_arena_get_stats(t->tr->arena, &a);
    for (int i = 0; i < t->tr->nheld; i++) held += t->tr->held[i]->cap;
    for (int i = t->ninputs; i < t->nslots; i++) outs += t->slot_bytes[i];
    for (int i = 0; i < t->tr->ncmds; i++) kinds[t->tr->cmds[i].kind]++;
    int slot_copies = t->tr->ncopies;                  /* a replay's: an input written in place also goes back */
    for (int i = 0; i < t->tr->ncopies; i++) slot_copies += t->tr->copies[i].back;
    PyObject *d = Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:i,s:i,s:i,s:i,s:i,s:i,s:l,s:i,s:i}", "arena_bytes", (Py_ssize_t)a.bytes,
                         "arena_blocks", (Py_ssize_t)a.blocks, "reused_blocks", (Py_ssize_t)a.reused,
                         "held_bytes", (Py_ssize_t)held, "output_bytes", (Py_ssize_t)outs, "commands", t->tr->ncmds,
                         "kernels", kinds[TL_CMD_KERNEL], "copies", kinds[TL_CMD_COPY], "slot_copies", slot_copies,
                         "native", kinds[TL_CMD_NATIVE], "inputs", t->ninputs, "replays", t->replays,
                         "fused_away", t->tr->fused_away, "dead_stores", t->tr->dead_stores);
    PyObject *cb = command_buffer_stats(t->tr);
    if (d == NULL || cb == NULL || PyDict_SetItemString(d, "command_buffer", cb) < 0) Py_CLEAR(d);
    Py_XDECREF(cb);
    return d;
}

static PyObject *
trace_commands(PyObject *self, PyObject *Py_UNUSED(a))
{
    const tl_trace *tr = ((trace_obj *)self)->tr;
    PyObject *l = PyList_New(tr->ncmds);
    for (int i = 0; l != NULL && i < tr->ncmds; i++) {
        PyObject *s = PyUnicode_FromString(tr->cmds[i].what != NULL ? tr->cmds[i].what : "?");
        if (s == NULL) { Py_CLEAR(l); break; }
        PyList_SET_ITEM(l, i, s);
    }
    return l;
}

/* set_arg(command, index, value, kind): a scalar argument of a recorded kernel ('f' float32, 'i' int32), for
 * the Python state a replay must refresh (an optimizer's step count and learning rate). */
static PyObject *
trace_set_arg(PyObject *self, PyObject *args)
{
    trace_obj *t = (trace_obj *)self;
    int cmd, kind;
    unsigned idx;
    double v;
    tl_err err = {0};
    if (!PyArg_ParseTuple(args, "iIdC:set_arg", &cmd, &idx, &v, &kind)) return NULL;
    float f = (float)v;
    int i = (int)v;
    if (kind != 'f' && kind != 'i') return PyErr_Format(PyExc_ValueError, "set_arg: kind is 'f' or 'i'");
    if (tl_trace_set_arg(t->tr, cmd, idx, 4, kind == 'f' ? (const void *)&f : (const void *)&i, &err) != TL_OK)
        return tl_raise(&err), NULL;
    Py_RETURN_NONE;
}

/* The outputs (their indices) whose block every replay writes again: an output slot a native kernel touched
 * is copied out of the block it had when traced (trace.h), so the traced call's own result must not stay there. */
static PyObject *
trace_rewritten_outputs(PyObject *self, PyObject *Py_UNUSED(a))
{
    const trace_obj *t = (const trace_obj *)self;
    PyObject *l = PyList_New(0);
    for (int i = 0; l != NULL && i < t->nouts; i++) {
        int hit = 0;
        for (int c = 0; c < t->tr->ncopies && t->outs[i].kind == OUT_SLOT; c++)
            hit |= t->tr->copies[c].slot == t->outs[i].index;
        PyObject *n = hit ? PyLong_FromLong(i) : NULL;
        if (hit && (n == NULL || PyList_Append(l, n) < 0)) Py_CLEAR(l);
        Py_XDECREF(n);
    }
    return l;
}

static PyObject *
trace_stale(PyObject *self, PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(tl_trace_stale(((const trace_obj *)self)->tr));
}

static PyMethodDef trace_methods[] = {
    {"replay", trace_replay, METH_O, "replay(inputs) -> list of output tensors: the recorded commands again."},
    {"memory_plan", trace_memory_plan, METH_NOARGS, "The trace's device memory and command counts."},
    {"commands", trace_commands, METH_NOARGS, "The recorded commands' names (kernel names, copy), in order."},
    {"set_arg", trace_set_arg, METH_VARARGS, "set_arg(command, index, value, kind): refresh a scalar argument."},
    {"rewritten_outputs", trace_rewritten_outputs, METH_NOARGS,
     "Indices of the outputs whose traced block every replay writes again (the traced call must copy them)."},
    {"stale", trace_stale, METH_NOARGS,
     "Whether a buffer the trace reads from outside is referenced by nothing else (the call would read another)."},
    {NULL},
};

static PyType_Slot trace_slots[] = {
    {Py_tp_dealloc, trace_dealloc},
    {Py_tp_methods, trace_methods},
    {Py_tp_doc, "A captured trace (tlgpu.jit): made by _jit_end, run by replay()."},
    {0, NULL},
};

static PyType_Spec trace_spec = {"tlgpu._C.Trace", sizeof(trace_obj), 0, Py_TPFLAGS_DEFAULT, trace_slots};

static const PyMethodDef functions[] = {
    {"_jit_begin", fn_jit_begin, METH_NOARGS, "Start capturing this thread's device commands into a trace."},
    {"_jit_end", fn_jit_end, METH_VARARGS,
     "_jit_end(inputs, outputs, fuse=True, command_buffer=-1) -> Trace: stop capturing, fuse elementwise runs, bind "
     "the slots; command_buffer 1/0 forces replay through cl_khr_command_buffer or not, -1 follows TLGPU_JIT_CMDBUF."},
    {"_jit_abort", fn_jit_abort, METH_NOARGS, "Stop capturing and drop the trace."},
    {"_jit_capturing", fn_jit_capturing, METH_NOARGS, "True while this thread captures a trace."},
    {"_jit_cmdbuf_device", fn_jit_cmdbuf_device, METH_NOARGS,
     "None where the device can replay traces through cl_khr_command_buffer, else why it cannot."},
    {"_jit_last_command", fn_jit_last_command, METH_NOARGS, "Index of the last command captured, -1: none."},
    {"_jit_key", fn_jit_key, METH_O, "The tensors' part of a trace's signature (layouts, dtypes, sharing)."},
    {NULL},
};

static int
jit_init(PyObject *m, tl_state *Py_UNUSED(S))
{
    trace_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &trace_spec, NULL);
    return trace_type == NULL ? -1 : PyModule_AddObjectRef(m, "Trace", (PyObject *)trace_type);
}

const tl_family tl_family_jit = {.functions = functions, .init = jit_init};
