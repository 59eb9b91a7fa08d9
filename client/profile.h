/* profile.h — the heap profile's sampling in a client (profile.c;
 * docs/DESIGN.md, "Heap profiles"). */
#ifndef TCM_PROFILE_H
#define TCM_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* Arms thr's countdown: a new interval drawn around profile_sample (or
 * none when it is 0). */
TCM_HIDDEN void tcm__sample_arm(tcm_thread_t *thr);
/* Tells tcmd of the sampled allocation at heap offset run (size bytes
 * asked for), with the calling thread's stack above the frame whose CFA is
 * above; sends the process's code mappings first when tcmd has none of
 * this process or they changed. */
TCM_HIDDEN void tcm__sample_post(uint64_t run, size_t size, uint64_t interval, uintptr_t above);

#endif
