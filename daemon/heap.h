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
#include "samples.h"
#include "shares.h"
#include "tcm_layout.h"

/* Central lists per class: spans with free objects by the share of their
 * objects that is free, in eighths (list 0: the fullest), and the empty
 * spans on a list of their own. */
#define TCM_CENTRAL_LISTS 9u
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

/* One arena of the state segment cut into equal records: a class's object
 * records, or the tag blocks. Which records are in use, and which of the
 * arena's 4 KiB pages this tcmd knows to be backed. Private to the heap
 * thread; rebuilt by the recovery pass from the span records and their
 * owner words (tcm__rec_claim_ht). The classes' maps are interleaved a
 * word at a time (word w of a class's map is stride words after word
 * w - 1), so that the first records of every class share a page: each
 * map of its own cost every class two pages of the drop-in's private heap
 * at its first span. */
typedef struct tcm_rec_set {
    uint64_t *used;       /* bit per record (tcm__rec_word) */
    uint64_t *backed;     /* bit per arena page: fallocated by this tcmd, not punched since */
    uint32_t stride;      /* words from one word of a map to the next */
    uint64_t off;         /* the arena's offset in the state segment */
    uint32_t rec_bytes, max;
    uint32_t lowest;      /* no free record below this one */
    uint32_t nused;
    uint32_t trim_lo, trim_hi; /* records [trim_lo, trim_hi) were freed since the last trim */
} tcm_rec_set_t;

typedef struct tcm_heap {
    tcm_meta_hdr_t *meta;          /* read-write mapping */
    tcm_state_hdr_t *state;        /* read-write mapping, tcmd only */
    tcm_class_info_t *classes;     /* in meta */
    uint8_t *page_class;           /* in meta */
    uint32_t *page_span;           /* in meta */
    tcm_span_t *spans;             /* in meta, [npages + 1] */
    tcm_root_t *roots;             /* in meta */
    uint32_t nroots;               /* entries of roots (meta->nroots) */
    tcm_shares_t root_shares;      /* live roots per holder (uid + 1), from the table at start */
    uint8_t *arena[TCM_NCLASSES];  /* in state: class c's object records, sl.rec_bytes[c] each */
    tcm_class_stats_t *cstats;     /* in state */
    tcm_handle_t heap_fd;
    uint8_t *anon;                 /* a private heap (the drop-in's, client/local.c): its mapping, which
                                      commits pages as they are touched and discards them; NULL: heap_fd */
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
    /* free runs by length, [1] backed (committed), [0] released, [2]
     * backed inside a huge range and not all of it (pageheap.c, TCM_SET_*);
     * two free neighbours are never in the same state (merged, or not at
     * all) but across the edge of a huge range, which no run crosses */
    uint32_t free_lists[3][TCM_PH_NLISTS + 1];
    uint64_t nonempty[3][(TCM_PH_NLISTS + 64) / 64 + 1]; /* bit i: free_lists[.][i] non-empty */
    uint64_t free_pages;           /* pages in FREE spans */
    uint64_t free_committed_pages; /* of those, known to be backed */
    uint64_t huge_free_pages;      /* of those, in runs on the huge lists, which only pressure punches */
    /* Huge ranges (huge.c; docs/DESIGN.md, "Huge pages"). huge_hint: in
     * the state segment, a bit per range collapsed (tcm_state_layout_t.off_huge).
     * huge: private, rebuilt from the hint: the ranges the page heap keeps
     * whole, collapsed or handed to the collapser and not answered yet.
     * huge_since: private, per range, the look (huge.c) since which every
     * look found it in use (range_in_use), plus one (0: the last did not). */
    _Atomic uint64_t *huge_hint;
    uint64_t *huge;
    uint32_t *huge_since;
    /* private, per range: free pages on the huge lists now, and the fewest
     * since the decay step began (tcm__ph_huge_sparse_ht) */
    uint16_t *huge_free, *huge_low;
    uint32_t nranges;
    /* W: heap thread, R: main (stats); since this tcmd started, but
     * huge_ranges (the hint's bits) */
    _Atomic uint64_t huge_ranges, huge_collapses, huge_failures, huge_splits, huge_dissolved;
    _Atomic int huge_errno;        /* the last collapse's error (0: it worked) */
    bool punch_split;              /* the punching in progress may split huge ranges (pressure) */
    bool cut_zeroed;               /* the last page run made reads zero (its span's zeroed) */
    uint64_t last_change_ns;       /* when pages were last cut or freed (decay starts from it) */
    uint64_t cache_low_pages;      /* fewest free committed pages since window_ns: what nobody needed */
    uint64_t window_ns;            /* when the decay window began */
    tcm_rec_set_t recs[TCM_NCLASSES]; /* derived, private: which object records are in use */
    tcm_rec_set_t tag_blocks;     /* derived, private: which tag blocks are in use */
    uint8_t *tag_block_base;       /* in state: the tag blocks */
    uint64_t *recs_bits;          /* private: the reservation the record sets' bitmaps and the huge maps live in */
    uint64_t recs_words;          /* its size in words */
    uint64_t step_ns;              /* when the last step (decay_ms / DECAY_AMOUNT_STEPS) began: decay by amount */
    /* private, lost with tcmd (the next one starts from none): how much
     * of the page cache the program would reuse (decay.c, reuse_reserve) */
    uint64_t long_cut_pages;       /* pages of long runs cuts have taken, ever */
    uint64_t cut_at_step;          /* long_cut_pages when the last step began */
    uint64_t reuse_peak[2];        /* the most one step took: this decay window, the one before */
    /* private, lost with tcmd (a recovery finds these pages free): pages
     * in runs an allocation holds in transit across turns while it
     * commits them (continuation.c); and the release pass's place, the
     * start of a run and how much of it is punched (0: no pass) */
    uint64_t transit_pages;
    uint32_t punch_first, punch_done;
    /* derived, private: the spans of each class with free objects, on
     * lists by how full they are (tcm__central_list), those being drained
     * on one more (TCM_DRAIN_LIST); bit i of central_nonempty: list i is
     * not empty */
    uint32_t central[TCM_NCLASSES][TCM_CENTRAL_LISTS + 1];
    uint16_t central_nonempty[TCM_NCLASSES];
    tcm_samples_t samples;         /* the heap profile's (samples.c) */
} tcm_heap_t;

/* Point h at a metadata and a state segment of a heap of heap_size bytes
 * (heap.c, called by segments.c). fresh: lay them out; else they hold an adopted heap whose
 * derived parts the caller rebuilds. */
/* Each root holder's live roots, counted from the table (at attach, and
 * after recovery). 0 or -ENOMEM. */
int tcm__roots_count_ht(tcm_heap_t *h);
/* Pages [from, from + len) of a part of the state segment at part_off,
 * backed before they are written (a write to a hole of a full /dev/shm
 * would be a SIGBUS); bits: the part's pages this tcmd backed. false (and
 * a log line naming what): /dev/shm is full. */
bool tcm__state_back(tcm_heap_t *h, uint64_t *bits, uint64_t part_off, uint64_t from, uint64_t len, const char *what);
int tcm__heap_attach(tcm_heap_t *h, void *meta, void *state, uint32_t nroots, tcm_handle_t heap_fd, tcm_handle_t meta_fd,
                     tcm_handle_t state_fd, uint64_t heap_size, uint64_t base, uint32_t max_threads, bool fresh);

/* A small span's object record: its object bits (1 = handed out) ... */
static inline uint64_t *tcm__span_bits(const tcm_heap_t *h, const tcm_span_t *sp)
{
    return (uint64_t *)(h->arena[sp->cls] + (uint64_t)sp->rec * h->sl.rec_bytes[sp->cls]);
}

/* ... and an owner word per word of bits (TCM_OWNER_BLOCK). */
static inline uint32_t *tcm__span_owners(const tcm_heap_t *h, const tcm_span_t *sp)
{
    return (uint32_t *)(h->arena[sp->cls] + (uint64_t)sp->rec * h->sl.rec_bytes[sp->cls] +
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

/* Bit i of a bitmap of words, and setting it (the daemon's private maps). */
static inline bool tcm__bit(const uint64_t *bits, uint64_t i)
{
    return bits[i / 64] >> (i % 64) & 1;
}

static inline void tcm__bit_set(uint64_t *bits, uint64_t i, bool on)
{
    if (on)
        bits[i / 64] |= 1ull << (i % 64);
    else
        bits[i / 64] &= ~(1ull << (i % 64));
}

/* Word w of a record set's map (its used or its backed bits). */
static inline uint64_t *tcm__rec_word(const tcm_rec_set_t *ss, uint64_t *map, uint64_t w)
{
    return map + w * ss->stride;
}

static inline bool tcm__rec_bit(const tcm_rec_set_t *ss, const uint64_t *map, uint64_t i)
{
    return map[i / 64 * ss->stride] >> (i % 64) & 1;
}

/* Whether page p is in a range the page heap keeps whole. */
static inline bool tcm__huge_at(const tcm_heap_t *h, uint32_t p)
{
    uint32_t r = p / TCM_HUGE_PAGES;
    return h->huge[r / 64] >> (r % 64) & 1;
}

static inline uint64_t tcm__page_off(uint32_t page)
{
    return (uint64_t)page << TCM_PAGE_SHIFT;
}

#endif
