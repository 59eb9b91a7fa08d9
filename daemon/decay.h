/* decay.h — the page heap giving memory back to the OS (decay.c). Heap
 * thread (or whoever serves a private heap, under its lock). */
#ifndef TCM_DECAY_H
#define TCM_DECAY_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* Free runs punched until at most keep_bytes of free committed pages are
 * left (0: every free page, released runs too), a bounded step per turn
 * (tcm__release_step_ht); joins the job in progress, if any. why: for the
 * log line and the decays count at its end (NULL: an operator's). */
#define TCM_RELEASE_ANSWER 1u  /* a mailbox command waits for its end (srv->release_job.answer) */
#define TCM_RELEASE_COUNTED 2u /* a decay whether or not anything goes back (a quiet spell's) */
#define TCM_RELEASE_SPLIT 4u   /* pressure: huge ranges punched into too (tcm__ph_release_step_ht) */
void tcm__release_start_ht(tcm_server_t *srv, uint64_t keep_bytes, const char *why, unsigned flags);
/* A step of it; false when there was none to do. */
bool tcm__release_step_ht(tcm_server_t *srv);
/* An idle page heap, quiet for decay_ms: everything free goes back, once
 * per quiet spell. */
void tcm__decay_ht(tcm_server_t *srv, uint64_t now);
/* Busy or not, every step and window of decay_ms. */
void tcm__decay_window_ht(tcm_server_t *srv, uint64_t now);

#endif
