/* profile.h — the heap profile's sampling in a client (profile.c;
 * docs/DESIGN.md, "Heap profiles"). */
#ifndef TCM_PROFILE_H
#define TCM_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* Arms thr's countdown: a new interval drawn around profile_sample (or
 * none when it is 0), or around a larger mean while the thread samples
 * faster than profile_rate allows; sampled: a sample was just taken. */
TCM_HIDDEN void tcm__sample_arm(tcm_thread_t *thr, bool sampled);
/* An interval drawn around mean (exponential, at least 1 byte). */
TCM_HIDDEN uint64_t tcm__sample_draw(tcm_thread_t *thr, uint64_t mean);
/* The mean to tell tcmd for a sample of size bytes that stands for weight
 * bytes (tcmd weighs a sample s / (1 - e^(-s/mean))). */
TCM_HIDDEN uint64_t tcm__sample_mean_for(uint64_t weight, uint64_t size);
/* A sample was taken and told: the next gap counts from now. */
TCM_HIDDEN void tcm__sample_done(tcm_thread_t *thr);
/* Fills slot with the TCM_OP_SAMPLE of the sampled allocation at heap
 * offset run (size bytes asked for, drawn at mean interval), with the
 * calling thread's stack above the frame whose CFA is above. */
TCM_HIDDEN void tcm__sample_fill(tcm_slot_t *slot, uint64_t run, size_t size, uint64_t interval, uintptr_t above);
/* Whether tcmd is to be sent the process's code mappings before a sample:
 * it has none of this process, or objects were loaded or unloaded since
 * (true once: the caller sends them). */
TCM_HIDDEN bool tcm__maps_due(void);
/* Fills slot with the TCM_OP_MAPS of the process's code mappings. */
TCM_HIDDEN void tcm__maps_fill(tcm_slot_t *slot);

/* The background thread, as the process attaches: what a first sample
 * would pay the first time (profile.c). */
TCM_HIDDEN void tcm__profile_warm(void);

/* In a fork child: the lock another thread of the parent may have held. */
TCM_HIDDEN void tcm__profile_fork_child(void);

#endif
