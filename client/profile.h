/* profile.h — the heap profile's sampling in a client (profile.c;
 * docs/DESIGN.md, "Heap profiles"). */
#ifndef TCM_PROFILE_H
#define TCM_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* Arms thr's countdown: a new interval drawn around profile_sample (or
 * none when it is 0), or around a larger mean while the thread samples
 * faster than SAMPLE_GAP_NS allows; sampled: a sample was just taken. */
TCM_HIDDEN void tcm__sample_arm(tcm_thread_t *thr, bool sampled);
/* Fills slot with the TCM_OP_SAMPLE of the sampled allocation at heap
 * offset run (size bytes asked for, drawn at mean interval), with the
 * calling thread's stack above the frame whose CFA is above; sends the
 * process's code mappings first (on a slot of its own) when tcmd has none
 * of this process or they changed. */
TCM_HIDDEN void tcm__sample_fill(tcm_slot_t *slot, uint64_t run, size_t size, uint64_t interval, uintptr_t above);

/* In a fork child: the lock another thread of the parent may have held. */
TCM_HIDDEN void tcm__profile_fork_child(void);

#endif
