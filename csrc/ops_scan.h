/* ops_scan.h: prefix sums along one axis (cumsum). */
#ifndef TL_OPS_SCAN_H
#define TL_OPS_SCAN_H
#include "module.h"

extern const tl_family tl_family_scan;

/* New ref: the inclusive prefix sum of tensor x along dim (from the end when reverse), recording the graph
 * when autograd wants it; NULL with an exception set. */
PyObject *tl_cumsum(PyObject *x, int dim, int reverse);
#endif
