/* decay.h — the page heap giving memory back to the OS (decay.c). Heap
 * thread (or whoever serves a private heap, under its lock). */
#ifndef TCM_DECAY_H
#define TCM_DECAY_H

#include <stdint.h>

#include "server.h"

/* Free runs punched until at most keep_bytes of free committed pages are
 * left (0: every free page); returns what the heap's backing dropped by. */
uint64_t tcm__release_measured_ht(tcm_server_t *srv, uint64_t keep_bytes);
/* Every free page, and the empty spans a recovery found. */
uint64_t tcm__release_all_ht(tcm_server_t *srv);
/* An idle page heap, quiet for decay_ms: everything free goes back, once
 * per quiet spell. */
void tcm__decay_ht(tcm_server_t *srv, uint64_t now);
/* Busy or not, every step and window of decay_ms. */
void tcm__decay_window_ht(tcm_server_t *srv, uint64_t now);

#endif
