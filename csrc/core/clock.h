/* clock.h: monotonic seconds, for statistics and benchmarks (header-only). */
#ifndef TL_CLOCK_H
#define TL_CLOCK_H
#include <time.h>

static inline double
tl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif
