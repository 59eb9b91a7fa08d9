/* central.h — the central lists: objects of each class handed out and
 * freed, page runs, and the object records (central.c). Heap thread. */
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
/* Give span s back to the page heap if it is still empty and, with
 * keep, its class keeps more empty spans than one batch of the class
 * fills (at most TCM_KEEP_EMPTY_BYTES, one span at least): a class that
 * moves whole batches back and forth reuses its spans instead of cutting
 * and freeing them per batch. The kept ones go back with the decay,
 * release and at the heap limit (tcm__central_drop_empty_ht).
 * One span, measured: up to a batch (2 MiB) held larson between two
 * processes 4-5 MB higher (central free 18-20 -> 22-24 MB) and saved
 * run_daemon_cost nothing (its heap grows and shrinks by whole batches). */
#define TCM_KEEP_EMPTY_BYTES 0u
bool tcm__central_release_span_ht(tcm_heap_t *h, uint32_t s, bool keep);
/* The same for the spans[n] a RETURN emptied (n at most TCM_MAX_BATCH), in
 * that order; those that go back meet the page heap at once, neighbours
 * merged first. Returns how many went back. */
uint32_t tcm__central_release_spans_ht(tcm_heap_t *h, const uint32_t *spans, uint32_t n, bool keep);
uint64_t tcm__central_drop_empty_ht(tcm_heap_t *h);
/* Free pages for a new span, giving kept empty spans back first when the
 * heap is at its limit. */
int tcm__pages_alloc_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *s);
/* A page run of npages (aligned to align_pages, 0: 1) owned by owner,
 * made under the page intent, as every span is; its first page is stored
 * in *first (the caller's log: the request intent) before it is mapped.
 * The one way a page run is made: ALLOC_PAGES and the unit tests. */
int tcm__large_alloc_ht(tcm_heap_t *h, uint64_t npages, uint64_t align_pages, uint32_t owner, uint32_t *first);
/* The page run at off back to the page heap, under the page intent; its
 * bytes and owner tag. The one way a page run is freed: FREE_PAGES, the
 * reclaim of a client's runs, the unit tests. */
int tcm__large_free_ht(tcm_heap_t *h, uint64_t off, uint64_t *bytes, uint32_t *owner);
/* Validate a page-run free: the span record of the run at off. */
int tcm__large_check_ht(const tcm_heap_t *h, uint64_t off, uint32_t *span);
/* Recovery: free counts from the object map, central lists, class stats. */
uint64_t tcm__central_rebuild_ht(tcm_heap_t *h);


/* Object records: one slot per small span in its class's
 * arena, one tag block per word of objects that more than one client holds */
/* The lowest free slot of ss, its arena pages backed first (a full
 * /dev/shm is NOMEM, never a SIGBUS); marked in use. */
int tcm__slot_take_ht(tcm_heap_t *h, tcm_slot_set_t *ss, uint32_t *slot);
/* A slot that nothing names any more; its pages go at the next trim. */
void tcm__slot_put_ht(tcm_slot_set_t *ss, uint32_t slot);
/* Recovery: forget every slot (and what is backed), so the spans claim
 * theirs again and the next trim looks at every arena page. */
void tcm__slots_reset_ht(tcm_heap_t *h);
/* Recovery: a slot named by an allocated span (or one of its owner words);
 * false if out of range or already claimed. */
bool tcm__slot_claim_ht(tcm_slot_set_t *ss, uint32_t slot);
/* Recovery: claim the tag blocks the owner words of small span s name; a
 * word naming a block out of range or another's is repaired (its objects'
 * owner becomes tag 0, nobody's). Returns the repairs. */
uint64_t tcm__span_claim_blocks_ht(tcm_heap_t *h, tcm_span_t *sp);
/* Punch the arena pages no used slot lies in (among those freed since the
 * last trim); returns the bytes punched. Runs with the page heap's release
 * (tcmctl release, decay, the page cache cap), never per span. */
uint64_t tcm__slots_trim_ht(tcm_heap_t *h);

#endif
