/* pool.h: size-classed reuse of cl_mem buffers with statistics. Sizes round up to a class with at most
 * 1/16 waste (4 mantissa bits, pyopencl-style bins; 256 bytes minimum). Thread-safe (own mutex). */
#ifndef TL_POOL_H
#define TL_POOL_H
#include "errors.h"
#include <stdint.h>

typedef struct {
    size_t live, cached, peak, limit;            /* bytes; limit 0 = unlimited cache */
    long allocations, hits, misses, frees, oom_retries;
    int enabled;
} tl_pool_stats;

/* A block of at least nbytes. *use_seq: the compute-queue sequence number of the block's last use, carried
 * across reuse so another queue writing into a recycled block can wait for that use to finish. */
tl_status tl_pool_alloc(size_t nbytes, cl_mem *out, size_t *cap, uint64_t *use_seq, tl_err *err);
void      tl_pool_release(cl_mem mem, size_t cap, uint64_t use_seq);
size_t    tl_pool_round(size_t nbytes);
void      tl_pool_get_stats(tl_pool_stats *out);
void      tl_pool_reset_peak(void);
void      tl_pool_empty_cache(void);
#endif
