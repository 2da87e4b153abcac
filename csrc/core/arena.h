/* arena.h: the device memory of one captured trace (tlgpu.jit). While an arena is this thread's current
 * one, every new storage takes its block from it: a block that a storage of the same trace released is
 * handed out again (same size class), so intermediates share blocks by liveness; otherwise the pool gives
 * one. A block released by a storage goes back to the arena, never to the pool, so the trace's recorded
 * commands can keep writing it. The arena is refcounted: its trace holds one reference and every live
 * storage of it one more; the last release returns every block to the pool. Thread-safe (the pool's
 * blocks move under the arena's own mutex). */
#ifndef TL_ARENA_H
#define TL_ARENA_H
#include "errors.h"
#include <stdint.h>

typedef struct tl_arena tl_arena;
typedef struct { size_t bytes, blocks, reused; } tl_arena_stats;   /* held bytes/blocks; allocations reused */

tl_arena *tl_arena_new(void);                          /* NULL: host out of memory */
void      tl_arena_retain(tl_arena *a);
void      tl_arena_release(tl_arena *a);               /* NULL is a no-op */
void      tl_arena_set_current(tl_arena *a);           /* this thread's; NULL: the pool again */
tl_arena *tl_arena_current(void);
tl_status tl_arena_alloc(tl_arena *a, size_t nbytes, cl_mem *out, size_t *cap, uint64_t *use_seq, tl_err *err);
void      tl_arena_put(tl_arena *a, cl_mem mem, size_t cap, uint64_t use_seq);   /* a storage's block back */
void      tl_arena_touch(tl_arena *a, uint64_t use_seq);   /* every block used up to use_seq (a replay) */
void      tl_arena_get_stats(tl_arena *a, tl_arena_stats *out);
/* While a trace is captured (capture.c): each block a storage gives back is logged with *clock, the number of
 * commands recorded by then (NULL: stop logging). tl_arena_put_after: the first logged stamp >= from for
 * mem, -1 if none (tlgpu.jit's fusion: a value in a block released before a later command is dead). */
void      tl_arena_log_puts(tl_arena *a, const int *clock);
int       tl_arena_put_after(tl_arena *a, cl_mem mem, int from);
#endif
