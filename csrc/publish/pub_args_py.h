/* pub_args_py.h: pub_args_py.c, the Publisher's arguments (parameters, sinks) as the core's records. GIL held. */
#ifndef TL_PUB_ARGS_PY_H
#define TL_PUB_ARGS_PY_H
#include "state.h"
#include "publisher.h"

PyObject *tl_pub_param_pairs(PyObject *params, int *is_dict);   /* [(name, tensor)] from a dict or a Module */
int       tl_pub_record_param(PyObject *name, PyObject *value, tl_pub_param *rec);
int       tl_pub_same_param(const tl_pub_param *rec, PyObject *value);
/* dtype=: the published dtype code (None: the parameters' one, float32 where they mix), or -1 (TypeError). */
int       tl_pub_parse_dtype(PyObject *obj, const tl_pub_param *rec, int n);
/* name= and sinks=[...] as sinks (at most cap): the count, or -1 with an exception set (none left open). */
int       tl_pub_make_sinks(const char *shm_name, PyObject *sinks, PyObject *names, tl_pub_sink *out, int cap);
#endif
