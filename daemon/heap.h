/* heap.h — the daemon's heap state: page heap, central lists, page map.
 * Everything here is owned by the heap thread; functions ending in _ht must
 * only be called from it (or before it starts). */
#ifndef TCM_DAEMON_HEAP_H
#define TCM_DAEMON_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "tcm_layout.h"

#define TCM_PH_NLISTS 128u /* exact free lists for 1..128 pages; list 0: longer runs */

/* Counters with one writer (the heap thread) and readers elsewhere: a plain
 * load and store, no locked instruction on the heap thread's path. */
#define TCM_HT_ADD(counter, v)                                                                   \
    atomic_store_explicit(&(counter), atomic_load_explicit(&(counter), memory_order_relaxed) + (v), \
                          memory_order_relaxed)

typedef struct tcm_class_stats {
    _Atomic uint64_t spans;     /* spans cut for this class */
    _Atomic uint64_t free_objs; /* objects in those spans not handed out */
    _Atomic uint64_t refills;   /* batches handed to clients */
    _Atomic uint64_t returns;   /* batches given back by clients */
} tcm_class_stats_t;

typedef struct tcm_heap {
    tcm_meta_hdr_t *meta;          /* read-write mapping */
    tcm_class_info_t *classes;     /* in meta */
    uint8_t *page_class;           /* in meta */
    uint32_t *page_span;           /* in meta */
    tcm_span_t *spans;             /* in meta, [npages + 1] */
    uint64_t *objmap;              /* private: 1 bit per 16 bytes, 1 = object handed out */
    uint16_t *owners;              /* private: owner tag of each handed-out object,
                                      indexed like objmap bits */
    tcm_root_t *roots;             /* in meta */
    int heap_fd;
    int meta_fd;                   /* -1: metadata is not a shm object (unit tests) */
    tcm_meta_layout_t ml;
    uint64_t heap_size;
    uint32_t npages;
    uint32_t top;                  /* pages [top, limit) were never handed out */
    uint32_t unused_spans;         /* chain of free span records through .next */
    uint32_t next_span_record;     /* records [next_span_record, npages] never used */
    uint32_t free_lists[TCM_PH_NLISTS + 1];
    uint64_t nonempty[(TCM_PH_NLISTS + 64) / 64 + 1]; /* bit i: free_lists[i] non-empty */
    tcm_class_stats_t cstats[TCM_NCLASSES];
    uint64_t free_pages;           /* pages in FREE spans */
    uint64_t free_committed_pages; /* of those, known to be backed */
} tcm_heap_t;

/* Lay out a fresh metadata segment and point h at it (segments.c). */
int tcm__meta_init(tcm_heap_t *h, void *meta, const tcm_meta_layout_t *ml, int meta_fd,
                   int heap_fd, uint64_t heap_size, uint64_t base);

/* spans */
uint32_t tcm__span_new_ht(tcm_heap_t *h);
void tcm__span_delete_ht(tcm_heap_t *h, uint32_t s);
void tcm__span_list_push(tcm_heap_t *h, uint32_t *head, uint32_t s);
void tcm__span_list_remove(tcm_heap_t *h, uint32_t *head, uint32_t s);

/* page heap (pageheap.c) */
void tcm__ph_init(tcm_heap_t *h);
int tcm__ph_alloc_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *out);
void tcm__ph_map_ht(tcm_heap_t *h, uint32_t s, uint8_t page_class);
void tcm__ph_free_ht(tcm_heap_t *h, uint32_t s);
uint64_t tcm__ph_release_ht(tcm_heap_t *h, uint64_t keep_bytes);
uint64_t tcm__ph_in_use_end_ht(tcm_heap_t *h); /* heap offset after the last page in use */
bool tcm__ph_validate(tcm_heap_t *h, char *why, size_t whylen);

/* central lists (central.c) */
/* Owner tags name the client an object was handed to (see server.h); the
 * daemon credits a returned object to its owner, whoever frees it. */
uint32_t tcm__central_refill_ht(tcm_heap_t *h, unsigned cls, uint32_t want, uint64_t *out,
                                uint16_t owner, int *status);
int tcm__central_return_ht(tcm_heap_t *h, unsigned cls, uint64_t off, uint16_t *owner);
uint64_t tcm__central_drop_empty_ht(tcm_heap_t *h);
int tcm__large_alloc_ht(tcm_heap_t *h, uint64_t npages, uint64_t align_pages, uint32_t owner,
                        uint64_t *off);
int tcm__large_free_ht(tcm_heap_t *h, uint64_t off, uint64_t *bytes, uint32_t *owner);
int tcm__object_class(const tcm_heap_t *h, uint64_t off, unsigned *cls); /* validation only */

static inline uint64_t tcm__page_off(uint32_t page)
{
    return (uint64_t)page << TCM_PAGE_SHIFT;
}

#endif
