/* shm_copy.h: shm_copy.c, the publisher's large host copies split over threads (pure C). */
#ifndef TL_SHM_COPY_H
#define TL_SHM_COPY_H
#include <stddef.h>

typedef struct { char *dst; const char *src; size_t n; } tl_shm_run;

/* Copies the runs: one contiguous share of their bytes per thread, the caller taking the first (and any
 * share whose thread could not start); one thread below 16 MiB, else half the CPUs (at most 8; one on
 * machines of under 4). TLGPU_SHM_COPY_THREADS=N sets the count for copies of any size (tests, tuning). */
void tl_shm_copy_runs(const tl_shm_run *runs, int nruns);
#endif
