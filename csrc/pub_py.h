/* pub_py.h: what the weight publisher's Python-facing files (pub_py.c: Publisher; pub_sub_py.c:
 * Subscriber and PublisherClosed) share. GIL held for all of them. */
#ifndef TL_PUB_PY_H
#define TL_PUB_PY_H
#include "module.h"

extern PyType_Spec tl_sub_spec;
PyObject *tl_pub_closed_error(void);                  /* borrowed: tlgpu.publish.PublisherClosed, made once */
int       tl_pub_parse_timeout(PyObject *obj, double *out);                 /* None -> -1 (for ever) */
/* A str name as UTF-8, refusing embedded NULs (they would silently cut a C string). */
const char *tl_pub_utf8_name(PyObject *name, const char *who);
#endif
