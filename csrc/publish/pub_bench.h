/* pub_bench.h: the raw device-to-host read the publisher benchmark measures itself against (pure C;
 * defined in test-hooks builds only). */
#ifndef TL_PUB_BENCH_H
#define TL_PUB_BENCH_H
#include "errors.h"
#include <stddef.h>

/* Seconds per read of nbytes; mode 0-3 as pub_bench.c says. Blocks (GIL released). */
tl_status tl_pub_bench_pinned_read(size_t nbytes, int iters, int mode, double *seconds, tl_err *err);
#endif
