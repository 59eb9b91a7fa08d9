/* pageheap.h — span records and the page heap (pageheap.c). Heap thread. */
#ifndef TCM_PAGEHEAP_H
#define TCM_PAGEHEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "heap.h"

/* Span records. */
uint32_t tcm__span_new_ht(tcm_heap_t *h);
void tcm__span_delete_ht(tcm_heap_t *h, uint32_t s);
void tcm__span_list_push(tcm_heap_t *h, uint32_t *head, uint32_t s);
void tcm__span_list_remove(tcm_heap_t *h, uint32_t *head, uint32_t s);
/* The authoritative stores of making and unmaking an allocated span:
 * record, page span and page class of every page. Idempotent, so a
 * recovery can redo them. */
void tcm__span_map_ht(tcm_heap_t *h, uint32_t s, uint32_t first, uint32_t npages, uint8_t state,
                      uint8_t cls, uint32_t owner);
void tcm__span_unmap_ht(tcm_heap_t *h, uint32_t first, uint32_t npages);


/* The page heap. */
void tcm__ph_init(tcm_heap_t *h);
/* A free run of npages (aligned), committed; its record is in transit
 * (state UNUSED) until the caller maps it. */
int tcm__ph_alloc_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *out);
/* The same run, in transit and left to the caller to commit in steps
 * (continuation.c): counted in h->transit_pages, on no list, free in the
 * page map (a crash leaves its pages free), until tcm__ph_transit_end_ht
 * (committed; the caller maps it) or tcm__ph_put_back_ht. */
int tcm__ph_take_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *out);
/* Back up to max_pages more of run s (in transit) from page *done of it
 * on; 0 or -errno. Once all of it is, it is committed. */
int tcm__ph_commit_step_ht(tcm_heap_t *h, uint32_t s, uint32_t *done, uint32_t max_pages);
/* Run s, in transit with its first done pages backed, back on the free lists. */
void tcm__ph_put_back_ht(tcm_heap_t *h, uint32_t s, uint32_t done);
void tcm__ph_transit_end_ht(tcm_heap_t *h, uint32_t s);
/* Up to max runs of npages each, taken at once from the free run one of
 * them would come from (or above top) and committed with one fallocate:
 * *got records in out[], in address order, each in transit like
 * tcm__ph_alloc_ht's. A class's spans for one REFILL, one page-heap cut. */
int tcm__ph_alloc_runs_ht(tcm_heap_t *h, uint32_t npages, uint32_t max, uint32_t *out, uint32_t *got);
/* Span s (already unmapped) back on the free lists, merged with its free
 * neighbours; punches free runs beyond the page cache cap. */
void tcm__ph_insert_free_ht(tcm_heap_t *h, uint32_t s);
/* The same for n spans at once: neighbours among them (in address order,
 * up or down) merged before they meet the free lists. */
void tcm__ph_insert_free_runs_ht(tcm_heap_t *h, const uint32_t *runs, uint32_t n);
uint64_t tcm__ph_release_ht(tcm_heap_t *h, uint64_t keep_bytes);
/* The same in bounded steps (decay.c): tcm__ph_release_begin_ht before
 * the first when released runs are to be punched too (keep_bytes 0), then
 * a step per turn: pieces of at most TCM_RELEASE_PIECE_PAGES (4 MiB, 0.2-0.3
 * ms of punching here) until budget_ns is spent; false when nothing is
 * left to punch. */
#define TCM_RELEASE_PIECE_PAGES ((4u << 20) >> TCM_PAGE_SHIFT)
void tcm__ph_release_begin_ht(tcm_heap_t *h, bool released_too);
bool tcm__ph_release_step_ht(tcm_heap_t *h, uint64_t keep_bytes, bool split, uint64_t budget_ns);
/* split: pressure (an operator's release, a smaller heap limit): the free
 * pages inside huge ranges too, each range punched into counted as a split
 * (huge_splits); otherwise a huge range is punched only whole. */
/* Huge range r is no longer kept whole (huge.c: a collapse that failed; a
 * punch inside it). */
void tcm__ph_huge_forget_ht(tcm_heap_t *h, uint32_t r);
/* ... and range r is kept whole from now on (huge.c hands it to the
 * collapser): its free runs, none across its edges, to the huge lists. */
void tcm__ph_huge_keep_ht(tcm_heap_t *h, uint32_t r);
/* The decay's step (decay.c): kept ranges a quarter free all through the
 * step are forgotten (pageheap.c, HUGE_SPARSE_PAGES); then a new step's
 * low-water marks begin. */
void tcm__ph_huge_sparse_ht(tcm_heap_t *h);
void tcm__ph_huge_step_ht(tcm_heap_t *h);
uint64_t tcm__ph_in_use_end_ht(tcm_heap_t *h); /* heap offset after the last page in use */
/* Recovery: rebuild the free runs, their lists and the record allocator
 * from the page map of the allocated spans. Returns repairs made. */
uint64_t tcm__ph_rebuild_ht(tcm_heap_t *h);

/* Its free lists and runs against the page map; false and the first
 * inconsistency in why (validate_heap.c). */
bool tcm__ph_validate(tcm_heap_t *h, char *why, size_t whylen);

#endif
