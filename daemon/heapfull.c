/* heapfull.c — the heap-full policy: a REFILL or ALLOC_PAGES that finds no
 * memory (after the central lists gave back their kept empty spans, in
 * tcm__pages_alloc_ht) asks the other clients to flush their caches, and
 * the answer tells the client how many were asked. Heap thread only. */
#include "heapfull.h"
#include "prim.h"
#include "segments.h"
#include "server.h"

uint64_t tcm__heap_full_ht(tcm_server_t *srv, const tcm_client_t *except)
{
    uint64_t now = tcm__now_ns();
    if (now - srv->flush_asked_ns < TCM_FLUSH_ASK_NS)
        return srv->flush_asked;
    uint64_t asked = 0;
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *o = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (!o || o == except || atomic_load(&o->rec->state) != TCM_REC_ACTIVE)
            continue;
        tcm__client_ask_flush(o);
        asked++;
    }
    srv->flush_asked_ns = now;
    srv->flush_asked = asked;
    if (asked)
        TCM_STAT_ADD(srv->meta, flush_requests, 1);
    return asked;
}
