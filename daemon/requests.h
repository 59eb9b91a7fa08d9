/* requests.h — serving the ring requests of a client (requests.c). Heap
 * thread. */
#ifndef TCM_REQUESTS_H
#define TCM_REQUESTS_H

#include <stdbool.h>
#include <stdint.h>

#include "crash.h"
#include "prim.h"
#include "ring.h"
#include "server.h"
#include "tcm_assert.h"

/* A ring's requests, served. A turn serves at most TCM_PER_CLIENT_BURST
 * requests of one ring before the next ring, fewer when its user's share
 * of the turn runs out or a step of a continuation ends its serve. */
#define TCM_PER_CLIENT_BURST 64u
bool tcm__serve_client_ht(tcm_server_t *srv, tcm_client_t *c, bool frees_only);
/* The same within a budget of heap-thread time: requests are served while
 * *budget_ns lasts (at least one, when any is posted and the budget is
 * not spent), each's time taken from it. Returns how many were served. */
uint32_t tcm__serve_client_budget_ht(tcm_server_t *srv, tcm_client_t *c, bool frees_only, uint64_t *budget_ns);
void tcm__credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes);
/* Free objects a dead client cached (quietly: refusals are expected);
 * returns how many were freed. */
uint32_t tcm__free_objects_ht(tcm_server_t *srv, tcm_client_t *c, unsigned cls, const uint64_t *offs, uint32_t n);

/* The steps of a request that its redo (recovery.c) takes too: inline, as
 * they are the serving path's. */
static inline void tcm__req_set_phase(tcm_req_intent_t *ri, uint32_t phase)
{
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&ri->phase, phase, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
}

static inline void tcm__req_answer(tcm_slot_t *slot, int status)
{
    slot->status = status;
    atomic_store_explicit(&slot->state, TCM_SLOT_DONE, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&slot->waiting, memory_order_relaxed))
        tcm__wake(&slot->state, 1);
}

/* The request at ring position pos is done with: the tail moves past it
 * (persisted first), then the intent is cleared, then the cell is freed. */
static inline void tcm__req_commit_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t pos)
{
    TCM_ASSERT(pos == c->rec->tail || pos + 1 == c->rec->tail); /* the latter: a recovery finishing it */
    TCM_ASSERT_INTERNAL(atomic_load_explicit(&srv->state->page.kind, memory_order_relaxed) == TCM_PAGES_NONE);
    c->rec->tail = pos + 1;
    TCM_CRASH_POINT(tail);
    tcm__req_set_phase(&srv->state->req, TCM_INTENT_NONE);
    TCM_CRASH_POINT(commit);
    tcm__ring_release(c->ring, c->lay.ring_cap, pos);
}

#endif
