/* pub_sub_py.h: pub_sub_py.c's Subscriber and PublisherClosed, and the argument helpers the publisher's
 * Python-facing files share (pub_py.c: Publisher; pub_args_py.c: its arguments). GIL held. */
#ifndef TL_PUB_SUB_PY_H
#define TL_PUB_SUB_PY_H
#include "state.h"
#include "publisher.h"

extern PyType_Spec tl_sub_spec;
PyObject *tl_pub_closed_error(void);                  /* borrowed: the module state's PublisherClosed */
int       tl_pub_parse_timeout(PyObject *obj, double *out);                 /* None -> -1 (for ever) */
/* A str name as UTF-8, refusing embedded NULs (they would silently cut a C string). */
const char *tl_pub_utf8_name(PyObject *name, const char *who);
/* A new C-contiguous numpy array of a publisher dtype (TL_SHM_*: float32, float16, ml_dtypes' bfloat16). */
PyObject *tl_pub_new_array(int dtype, int ndim, const int64_t *shape);
#endif
