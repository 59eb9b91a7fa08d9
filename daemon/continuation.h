/* continuation.h — an ALLOC_PAGES committed in bounded steps across the
 * heap thread's turns (continuation.c). Heap thread only. */
#ifndef TCM_CONTINUATION_H
#define TCM_CONTINUATION_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* The most a request commits in one go: 2 MiB, 0.22-0.24 ms of fallocate
 * on tmpfs here, about one user's share of a turn (TCM_UID_TURN_NS). */
#define TCM_COMMIT_STEP_PAGES ((2u << 20) >> TCM_PAGE_SHIFT)

/* Before the request at ring position pos (slot slot_index, its fields
 * read once by the caller) is served: a continuation for another request,
 * or for this one with frees_only, gives its run back; an ALLOC_PAGES
 * whose run needs more than a step of committing takes its run and
 * commits a step. True: the request stays posted (not answered, tail not
 * advanced, no request intent), to be continued next time. False: serve it
 * as usual; its op_alloc_pages then calls tcm__alloc_pages_ht. */
bool tcm__pages_step_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t pos, uint32_t slot_index, uint32_t req_seq,
                        uint32_t op, uint64_t npages, uint64_t align_pages, bool frees_only);
/* op_alloc_pages' allocation: the run the steps prepared (mapped as
 * owner's), their failure (TCM_ST_NOMEM), or else the ordinary cut
 * (tcm__large_alloc_ht). */
int tcm__alloc_pages_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t npages, uint64_t align_pages,
                        uint32_t *first);
/* The client's run in transit, if any, back to the free lists (the
 * client is reaped, or its request is gone). */
void tcm__pages_drop_ht(tcm_server_t *srv, tcm_client_t *c);

#endif
