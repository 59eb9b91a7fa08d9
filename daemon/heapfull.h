/* heapfull.h — what tcmd does when the heap is full (heapfull.c). Heap
 * thread. */
#ifndef TCM_HEAPFULL_H
#define TCM_HEAPFULL_H

#include <stdint.h>

#include "server.h"

/* The heap is full: every other process is asked to give back what it
 * caches (its background thread empties its transfer tier at once, its
 * threads their caches on their next slow path). Returns how many were
 * asked, which the answer carries so that the client waits a little before
 * it gives up. At most once per TCM_FLUSH_ASK_NS. */
#define TCM_FLUSH_ASK_NS 5000000ull
uint64_t tcm__heap_full_ht(tcm_server_t *srv, const tcm_client_t *except);

#endif
