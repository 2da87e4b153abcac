/* pub_sink_py.h: a Python object as a publisher sink: obj.deliver(version, step, {name: ndarray}) called
 * on the publisher thread with the GIL taken (the door for sinks written in Python, e.g. a Ray sink). */
#ifndef TL_PUB_SINK_PY_H
#define TL_PUB_SINK_PY_H
#include "state.h"
#include "pub_sink.h"

tl_status tl_pub_sink_py_new(PyObject *obj, PyObject *names, tl_pub_sink *out, tl_err *err);   /* GIL held */
/* GIL held, sink still open: 1 with the exception its deliver() raised set (once), else 0. */
int       tl_pub_sink_py_take_error(const tl_pub_sink *s);
#endif
