/* pub_py.h: what the weight publisher's Python-facing files share (pub_py.c: Publisher; pub_args_py.c:
 * its arguments; pub_sub_py.c: Subscriber and PublisherClosed). GIL held for all of them. */
#ifndef TL_PUB_PY_H
#define TL_PUB_PY_H
#include "module.h"
#include "publisher.h"

extern PyType_Spec tl_sub_spec;
PyObject *tl_pub_closed_error(void);                  /* borrowed: the module state's PublisherClosed */
int       tl_pub_parse_timeout(PyObject *obj, double *out);                 /* None -> -1 (for ever) */
/* A str name as UTF-8, refusing embedded NULs (they would silently cut a C string). */
const char *tl_pub_utf8_name(PyObject *name, const char *who);

/* pub_args_py.c */
PyObject *tl_pub_param_pairs(PyObject *params, int *is_dict);   /* [(name, tensor)] from a dict or a Module */
int       tl_pub_record_param(PyObject *name, PyObject *value, tl_pub_param *rec);
int       tl_pub_same_param(const tl_pub_param *rec, PyObject *value);
/* name= and sinks=[...] as sinks (at most cap): the count, or -1 with an exception set (none left open). */
int       tl_pub_make_sinks(const char *shm_name, PyObject *sinks, PyObject *names, tl_pub_sink *out, int cap);
#endif
