/* central.h — the central lists: objects of each class handed out and
 * freed, and page runs (central.c). Heap thread. */
#ifndef TCM_CENTRAL_H
#define TCM_CENTRAL_H

#include <stdbool.h>
#include <stdint.h>

#include "heap.h"

/* Hand out up to want objects of cls tagged owner. Each offset is logged in
 * log[*logged] (and *logged bumped) before its bit is set, so a recovery
 * can finish the handout; log may be the answer array itself. */
uint32_t tcm__central_refill_ht(tcm_heap_t *h, unsigned cls, uint32_t want, uint16_t owner, uint64_t *log,
                                uint32_t *logged, int *status);
/* Where a handed-out object is: its span and its index in the span. */
typedef struct tcm_obj_loc {
    uint32_t span, idx;
} tcm_obj_loc_t;
/* Validate without changing anything: TCM_ST_OK for the exact start of a
 * handed-out object of class cls (cls 0: any class), and where it is (loc
 * may be NULL). */
int tcm__central_check_ht(const tcm_heap_t *h, unsigned cls, uint64_t off, tcm_obj_loc_t *loc);
/* Consecutive freed objects of one owner. */
typedef struct tcm_owner_run {
    uint16_t owner;
    uint32_t objects;
} tcm_owner_run_t;
/* A RETURN entry's status before the heap thread reached it (in the
 * request intent's st[]; not a ring status, never answered). */
#define TCM_ST_PENDING 0xffu
/* Free n objects of class cls. Each entry gets its status in st[] before
 * its object is freed; with st[] all TCM_ST_PENDING before the call (the
 * caller's log of the batch), a recovery can finish it: free again what is
 * logged OK, check what is pending. runs[] (room for n) gets the owner tags of the freed
 * objects, consecutive equal ones as one run; spans left empty are added
 * to emptied[]. Returns how many were refused. Good objects are never lost
 * to a bad neighbour. */
uint32_t tcm__central_return_ht(tcm_heap_t *h, unsigned cls, const uint64_t *offs, uint32_t n, uint8_t *st,
                               tcm_owner_run_t *runs, uint32_t *nruns, uint32_t *emptied, uint32_t *nemptied);
/* The central list (tcm_heap_t.central) of a span with nfree
 * (1..span_objs) free objects. Refills take from the fullest spans first,
 * so that what a RETURN brings to a sparse span stays there until the span
 * is empty and goes back to the page heap, instead of being handed out
 * again and keeping the span alive; empty spans are taken last. */
static inline unsigned tcm__central_list(uint32_t nfree, uint32_t span_objs)
{
    return nfree == span_objs ? TCM_CENTRAL_LISTS - 1 : (nfree - 1) * (TCM_CENTRAL_LISTS - 1) / span_objs;
}

/* The list of a class's spans being drained (docs/DESIGN.md, "Draining
 * sparse spans"): partly free, their pages marked TCM_PAGE_CLASS_DRAIN +
 * class, refilled from only when no other span has a free object. */
#define TCM_DRAIN_LIST TCM_CENTRAL_LISTS

static inline bool tcm__span_draining(const tcm_heap_t *h, const tcm_span_t *sp)
{
    return h->page_class[sp->first] == TCM_PAGE_CLASS_DRAIN + sp->cls;
}

/* Give span s back to the page heap if it is still empty: a RETURN's
 * emptied spans, at once. A class keeps no empty span: one per class
 * (~90 of 64 KiB and up) held larson between two processes 3-6 MB higher
 * (central free 16-20 -> 10-13 MB) and a batch's worth 4-5 MB more, and
 * saved run_daemon_cost nothing (its heap grows and shrinks by whole
 * batches); a span holds many batches of a small class, and a large
 * class's span is cut and freed with its objects' pages anyway. Empty
 * spans a recovery finds wait for the decay, release or the heap limit
 * (tcm__central_drop_empty_ht). */
bool tcm__central_release_span_ht(tcm_heap_t *h, uint32_t s);
/* The same for the spans[n] a RETURN emptied (n at most TCM_MAX_BATCH), in
 * that order; they meet the page heap at once, neighbours merged first.
 * Returns how many went back. */
uint32_t tcm__central_release_spans_ht(tcm_heap_t *h, const uint32_t *spans, uint32_t n);
uint64_t tcm__central_drop_empty_ht(tcm_heap_t *h);
/* Free pages for a new span, giving empty spans back first when the
 * heap is at its limit. */
int tcm__pages_alloc_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *s);
/* A page run of npages (aligned to align_pages, 0: 1) owned by owner,
 * made under the page intent, as every span is; its first page is stored
 * in *first (the caller's log: the request intent) before it is mapped.
 * The one way a page run is made: ALLOC_PAGES and the unit tests. */
int tcm__large_alloc_ht(tcm_heap_t *h, uint64_t npages, uint64_t align_pages, uint32_t owner, uint32_t *first);
/* The same for run s, taken and committed in steps (tcm__ph_take_ht). */
int tcm__large_map_taken_ht(tcm_heap_t *h, uint32_t s, uint32_t owner, uint32_t *first);
/* The page run at off back to the page heap, under the page intent; its
 * bytes and owner tag. The one way a page run is freed: FREE_PAGES, the
 * reclaim of a client's runs, the unit tests. */
int tcm__large_free_ht(tcm_heap_t *h, uint64_t off, uint64_t *bytes, uint32_t *owner);
/* Validate a page-run free: the span record of the run at off. */
int tcm__large_check_ht(const tcm_heap_t *h, uint64_t off, uint32_t *span);
/* Recovery: free counts from the object map, central lists, class stats. */
uint64_t tcm__central_rebuild_ht(tcm_heap_t *h);

#endif
