/* continuation.c — an ALLOC_PAGES whose run needs more committing than a
 * step (TCM_COMMIT_STEP_PAGES) is done in steps across the heap thread's
 * turns, each charged to its user's share like a request, so that nobody
 * else's request waits for a 512 MiB fallocate (docs/DESIGN.md,
 * "Continuations"). The run is in transit meanwhile: state UNUSED, on no
 * list, free in the page map, so a tcmd killed between any two steps
 * leaves its pages free for the recovery; what is remembered of it lives
 * here, in the client's tcmd-private record. The request stays posted
 * until the last step, which serves it the ordinary way, under its
 * intents. Heap thread only. */
#include <string.h>

#include "central.h"
#include "continuation.h"
#include "crash.h"
#include "log.h"
#include "pageheap.h"
#include "quota.h"
#include "tcm_assert.h"

void tcm__pages_drop_ht(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_pages_cont_t *k = &c->pages_cont;
    if (k->run) {
        tcm__log_peer(TCM_LOG_INFO, c->rec->pid,
                      "client %u (pid %u): its page run in transit (%llu pages, %u committed) goes back free",
                      c->rec->id, c->rec->pid, (unsigned long long)k->npages, k->committed);
        tcm__ph_put_back_ht(&srv->h, k->run, k->committed);
    }
    memset(k, 0, sizeof *k);
}

bool tcm__pages_step_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t pos, uint32_t slot_index, uint32_t req_seq,
                        uint32_t op, uint64_t npages, uint64_t align_pages, bool frees_only)
{
    tcm_heap_t *h = &srv->h;
    tcm_pages_cont_t *k = &c->pages_cont;
    if (!align_pages)
        align_pages = 1;
    /* the slot is client memory: a request rewritten meanwhile is another
     * request, served as it now stands */
    if (k->run && (frees_only || op != TCM_OP_ALLOC_PAGES || k->pos != pos || k->slot != slot_index ||
                   k->req_seq != req_seq || k->npages != npages || k->align_pages != align_pages))
        tcm__pages_drop_ht(srv, c);
    k->outcome = TCM_CONT_NONE;
    /* a private heap's pages are committed as they are touched: nothing to wait for */
    if (frees_only || op != TCM_OP_ALLOC_PAGES || h->anon)
        return false;
    if (!k->run) {
        /* small enough to commit in one go, or refused by the ordinary path
         * (its quota's included: nothing is committed for a refusal) */
        if (npages <= TCM_COMMIT_STEP_PAGES || npages > h->npages || align_pages > h->npages ||
            (align_pages & (align_pages - 1)) || npages > tcm__quota_room_ht(srv, c) >> TCM_PAGE_SHIFT)
            return false;
        uint32_t s;
        int st = tcm__ph_take_ht(h, (uint32_t)npages, (uint32_t)align_pages, &s);
        if (st == TCM_ST_NOMEM && tcm__central_drop_empty_ht(h))
            st = tcm__ph_take_ht(h, (uint32_t)npages, (uint32_t)align_pages, &s);
        if (st != TCM_ST_OK) {
            k->outcome = TCM_CONT_NOMEM;
            return false;
        }
        *k = (tcm_pages_cont_t){.run = s, .pos = pos, .slot = slot_index, .req_seq = req_seq,
                                .npages = npages, .align_pages = align_pages};
    }
    int err = tcm__ph_commit_step_ht(h, k->run, &k->committed, TCM_COMMIT_STEP_PAGES);
    TCM_CRASH_POINT(pages_step);
    if (err) {
        tcm__pages_drop_ht(srv, c);
        k->outcome = TCM_CONT_NOMEM;
        return false;
    }
    if (k->committed < k->npages)
        return true;
    k->outcome = TCM_CONT_READY;
    return false;
}

int tcm__alloc_pages_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t npages, uint64_t align_pages,
                        uint32_t *first)
{
    tcm_pages_cont_t *k = &c->pages_cont;
    int outcome = k->outcome;
    k->outcome = TCM_CONT_NONE;
    if (outcome == TCM_CONT_NOMEM)
        return TCM_ST_NOMEM;
    if (outcome == TCM_CONT_READY) {
        TCM_ASSERT(k->run && k->npages == npages);
        uint32_t s = k->run;
        memset(k, 0, sizeof *k);
        return tcm__large_map_taken_ht(&srv->h, s, c->rec->tag, first);
    }
    return tcm__large_alloc_ht(&srv->h, npages, align_pages, c->rec->tag, first);
}
