/* heap.h — the daemon's heap state: page heap, central lists, page map,
 * object records (object bits and owner tags), and the intents that make each change safe to
 * interrupt. Everything here is owned by the heap thread; functions ending
 * in _ht must only be called from it (or before it starts, or by the
 * recovery pass). */
#ifndef TCM_DAEMON_HEAP_H
#define TCM_DAEMON_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prim.h"
#include "tcm_layout.h"

#define TCM_PH_NLISTS 128u /* exact free lists for 1..128 pages; list 0: longer runs */

/* Counters with one writer (the heap thread) and readers elsewhere: a plain
 * load and store, no locked instruction on the heap thread's path. */
#define TCM_HT_ADD(counter, v)                                                                   \
    atomic_store_explicit(&(counter), atomic_load_explicit(&(counter), memory_order_relaxed) + (v), \
                          memory_order_relaxed)

/* The metadata stats (TCM_HEAP_STATS) the same way, each from its one
 * writer: the heap thread's with TCM_STAT_ADD/SET, the main thread's with
 * TCM_STAT_ADD_MAIN/SET_MAIN; the other thread's figure does not compile. */
enum {
    TCM_WRITER_H = 1,
    TCM_WRITER_M = 2,
#define TCM_STAT_WRITER(name, kind, writer, doc) TCM_STAT_WRITER_##name = TCM_WRITER_##writer,
    TCM_HEAP_STATS(TCM_STAT_WRITER)
#undef TCM_STAT_WRITER
};
#define TCM_STAT_WRITE_(meta, f, v, who, add)                                                   \
    do {                                                                                         \
        _Static_assert(TCM_STAT_WRITER_##f == who, #f " has another writer (TCM_HEAP_STATS)");   \
        if (add)                                                                                 \
            TCM_HT_ADD((meta)->stats.f, (v));                                                    \
        else                                                                                     \
            atomic_store_explicit(&(meta)->stats.f, (v), memory_order_relaxed);                  \
    } while (0)
#define TCM_STAT_ADD(meta, f, v) TCM_STAT_WRITE_(meta, f, v, TCM_WRITER_H, 1)
#define TCM_STAT_SET(meta, f, v) TCM_STAT_WRITE_(meta, f, v, TCM_WRITER_H, 0)
#define TCM_STAT_ADD_MAIN(meta, f, v) TCM_STAT_WRITE_(meta, f, v, TCM_WRITER_M, 1)
#define TCM_STAT_SET_MAIN(meta, f, v) TCM_STAT_WRITE_(meta, f, v, TCM_WRITER_M, 0)

/* Orders the stores of a crash-consistent sequence: tcmd may be killed
 * between any two of them, and the next tcmd reads them back from shared
 * memory, so the compiler must not move one past another. (A killed
 * process's executed stores all reach memory; only compiler reordering
 * can break the order.) */
#define TCM_PERSIST_BARRIER() atomic_signal_fence(memory_order_seq_cst)
/* The same order for a few stores on a hot loop, without making the
 * compiler forget everything else: volatile accesses stay in program order
 * among themselves. */
#define TCM_PERSIST_STORE(lvalue, value) (*(volatile __typeof__(lvalue) *)&(lvalue) = (value))

/* One arena of the state segment cut into equal slots: a class's object
 * records, or the tag blocks. Which slots are in use, and which of the
 * arena's 4 KiB pages this tcmd knows to be backed. Private to the heap
 * thread; rebuilt by the recovery pass from the span records and their
 * owner words (tcm__slot_claim_ht). */
typedef struct tcm_slot_set {
    uint64_t *used;       /* bit per slot */
    uint64_t *backed;     /* bit per arena page: fallocated by this tcmd, not punched since */
    uint64_t off;         /* the arena's offset in the state segment */
    uint32_t slot_bytes, max;
    uint32_t lowest;      /* no free slot below this one */
    uint32_t nused;
    uint32_t trim_lo, trim_hi; /* slots [trim_lo, trim_hi) were freed since the last trim */
} tcm_slot_set_t;

typedef struct tcm_heap {
    tcm_meta_hdr_t *meta;          /* read-write mapping */
    tcm_state_hdr_t *state;        /* read-write mapping, tcmd only */
    tcm_class_info_t *classes;     /* in meta */
    uint8_t *page_class;           /* in meta */
    uint32_t *page_span;           /* in meta */
    tcm_span_t *spans;             /* in meta, [npages + 1] */
    tcm_root_t *roots;             /* in meta */
    uint8_t *arena[TCM_NCLASSES];  /* in state: class c's object records (slots), sl.slot_bytes[c] each */
    tcm_class_stats_t *cstats;     /* in state */
    tcm_handle_t heap_fd;
    tcm_handle_t meta_fd;                   /* -1: not shm objects (unit tests); nothing to commit */
    tcm_handle_t state_fd;
    tcm_meta_layout_t ml;
    tcm_state_layout_t sl;
    uint64_t heap_size;
    uint32_t npages;
    /* derived, rebuilt by tcm__ph_rebuild_ht */
    uint32_t top;                  /* mirror of state->top: pages [top, limit) were never handed out */
    uint32_t unused_spans;         /* chain of free span records through .next */
    uint32_t next_span_record;     /* records [next_span_record, npages] never used */
    uint32_t free_lists[TCM_PH_NLISTS + 1];
    uint64_t nonempty[(TCM_PH_NLISTS + 64) / 64 + 1]; /* bit i: free_lists[i] non-empty */
    uint64_t free_pages;           /* pages in FREE spans */
    uint64_t free_committed_pages; /* of those, known to be backed */
    uint64_t last_change_ns;       /* when pages were last cut or freed (decay starts from it) */
    uint64_t cache_low_pages;      /* fewest free committed pages since window_ns: what nobody needed */
    uint64_t window_ns;            /* when the decay window began */
    tcm_slot_set_t slots[TCM_NCLASSES]; /* derived, private: which object records are in use */
    tcm_slot_set_t tag_blocks;     /* derived, private: which tag blocks are in use */
    uint8_t *tag_block_base;       /* in state: the tag blocks */
    uint64_t *slots_bits;          /* private: the reservation the slot sets' bitmaps live in */
    uint64_t slots_words;          /* its size in words */
    uint64_t step_ns;              /* when the last step (decay_ms / TCM_DECAY_STEPS) began: decay by amount */
    uint32_t empty_spans[TCM_NCLASSES]; /* derived, private: small spans of each class with no object handed out */
} tcm_heap_t;

/* Point h at a metadata and a state segment of a heap of heap_size bytes
 * (segments.c). fresh: lay them out; else they hold an adopted heap whose
 * derived parts the caller rebuilds. */
int tcm__heap_attach(tcm_heap_t *h, void *meta, void *state, tcm_handle_t heap_fd, tcm_handle_t meta_fd,
                     tcm_handle_t state_fd, uint64_t heap_size, uint64_t base, uint32_t max_threads, bool fresh);

/* spans */
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

/* page heap (pageheap.c) */
void tcm__ph_init(tcm_heap_t *h);
/* A free run of npages (aligned), committed; its record is in transit
 * (state UNUSED) until the caller maps it. */
int tcm__ph_alloc_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *out);
/* Span s (already unmapped) back on the free lists, merged with its free
 * neighbours; punches free runs beyond the page cache cap. */
void tcm__ph_insert_free_ht(tcm_heap_t *h, uint32_t s);
uint64_t tcm__ph_release_ht(tcm_heap_t *h, uint64_t keep_bytes);
uint64_t tcm__ph_in_use_end_ht(tcm_heap_t *h); /* heap offset after the last page in use */
/* Recovery: rebuild the free runs, their lists and the record allocator
 * from the page map of the allocated spans. Returns repairs made. */
uint64_t tcm__ph_rebuild_ht(tcm_heap_t *h);

/* central lists (central.c) */
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
 * release and at the heap limit (tcm__central_drop_empty_ht). */
#define TCM_KEEP_EMPTY_BYTES (2u << 20)
bool tcm__central_release_span_ht(tcm_heap_t *h, uint32_t s, bool keep);
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

/* validate_heap.c: page heap and central lists against the page map and the
 * object map; false and the first inconsistency in why. */
bool tcm__heap_validate_ht(tcm_heap_t *h, char *why, size_t whylen);
/* held[tag] += bytes of the objects and runs each client tag owns; the total. */
uint64_t tcm__census_ht(const tcm_heap_t *h, uint64_t *held);

/* object records (central.c): one slot per small span in its class's
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

/* A small span's object record: its object bits (1 = handed out) ... */
static inline uint64_t *tcm__span_bits(const tcm_heap_t *h, const tcm_span_t *sp)
{
    return (uint64_t *)(h->arena[sp->cls] + (uint64_t)sp->slot * h->sl.slot_bytes[sp->cls]);
}

/* ... and an owner word per word of bits (TCM_OWNER_BLOCK). */
static inline uint32_t *tcm__span_owners(const tcm_heap_t *h, const tcm_span_t *sp)
{
    return (uint32_t *)(h->arena[sp->cls] + (uint64_t)sp->slot * h->sl.slot_bytes[sp->cls] +
                        h->sl.owners_off[sp->cls]);
}

/* The 64 owner tags of a tag block. */
static inline uint16_t *tcm__tag_block(const tcm_heap_t *h, uint32_t owner_word)
{
    return (uint16_t *)(h->tag_block_base + (uint64_t)(owner_word & ~TCM_OWNER_BLOCK) * TCM_TAG_BLOCK);
}

/* The owner tag of object i of a span, from its owner words. */
static inline uint16_t tcm__owner_of(const tcm_heap_t *h, const uint32_t *owners, uint32_t i)
{
    uint32_t w = owners[i / 64];
    return w & TCM_OWNER_BLOCK ? tcm__tag_block(h, w)[i % 64] : (uint16_t)w;
}

static inline uint64_t tcm__page_off(uint32_t page)
{
    return (uint64_t)page << TCM_PAGE_SHIFT;
}

#endif
