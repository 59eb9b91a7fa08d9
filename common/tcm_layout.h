/*
 * tcm_layout.h — the byte layout of every shared-memory segment.
 *
 * Three kinds of segment, all POSIX shm objects named after the daemon's
 * --name:
 *
 *   /tcm.NAME.heap   the heap. Mapped read-write at the same address in the
 *                    daemon and every client. Page 0 is the doorbell page
 *                    (tcm_bell_t); pages 1.. are handed out.
 *   /tcm.NAME.meta   allocator metadata. The daemon maps it read-write and is
 *                    the only writer (its heap thread, unless a field says
 *                    otherwise); clients map it read-only.
 *   /tcm.NAME.ch.ID  one per client: its request ring, response slots, thread
 *                    caches and transfer tier. Only that client and the daemon
 *                    map it. The daemon never trusts anything it reads here:
 *                    it keeps its own copy of the layout and checks every
 *                    index, count and offset.
 *
 * Structures use offsets and indices, never pointers, except where a field
 * says it is meaningful only to the client that wrote it.
 */
#ifndef TCM_LAYOUT_H
#define TCM_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TCM_LAYOUT_VERSION 1u
#define TCM_META_MAGIC 0x4154454d4d4354ull /* "TCMMETA" */
#define TCM_CHAN_MAGIC 0x4e4148434d4354ull /* "TCMCHAN" */

#define TCM_PAGE_SHIFT 13u
#define TCM_PAGE_SIZE (1u << TCM_PAGE_SHIFT)
#define TCM_ALIGN 16u
#define TCM_GRANULE_SHIFT 4u
#define TCM_MAX_SMALL (256u * 1024u)
#define TCM_NCLASSES 97u          /* class 0 is "none"; 1..96 are real */
#define TCM_NBINS 256u            /* bins indexed by any page-class byte */
#define TCM_PAGE_CLASS_FREE 0u    /* page not in an allocated span */
#define TCM_PAGE_CLASS_LARGE 255u /* page of a large (page-run) allocation */
#define TCM_MAX_BATCH 512u        /* objects per ring request */
#define TCM_ROOTS 256u
#define TCM_ROOT_NAME_MAX 48u     /* including the NUL */
#define TCM_OBJMAP_WORDS_PER_PAGE (TCM_PAGE_SIZE / TCM_ALIGN / 64u)
#define TCM_CACHELINE 64

/* ---- size classes (shared, computed by tcm__class_table_init) ---- */

typedef struct tcm_class_info {
    uint32_t size;       /* object size in bytes, multiple of 16 */
    uint32_t span_pages; /* pages in one span of this class */
    uint32_t span_objs;  /* objects in one span */
    uint32_t batch;      /* most objects moved between tiers at once */
    uint32_t tcache_cap; /* most objects in one thread-cache bin */
    uint32_t xfer_cap;   /* most objects in a process's transfer tier */
    uint32_t recip;      /* ceil(2^32 / size): division by multiplication */
    uint32_t reserved;
} tcm_class_info_t;
_Static_assert(sizeof(tcm_class_info_t) == 32, "class info is shared");

/* ---- heap segment, page 0 ---- */

/* Written by clients and the daemon's control thread (increment + wake),
 * waited on by the heap thread. Client-writable, so only a wakeup hint. */
typedef struct tcm_bell {
    alignas(TCM_CACHELINE) _Atomic uint32_t seq;
} tcm_bell_t;

/* ---- metadata segment ---- */

enum tcm_span_state {
    TCM_SPAN_UNUSED = 0, /* record not in use */
    TCM_SPAN_FREE = 1,   /* in the page heap */
    TCM_SPAN_SMALL = 2,  /* carved into objects of one class */
    TCM_SPAN_LARGE = 3,  /* one page run handed to a client */
};

/* A run of pages. Index 0 is the null span. Heap thread writes; clients
 * read npages/first of LARGE spans for tcm_usable_size. */
typedef struct tcm_span {
    uint32_t first;     /* first page */
    uint32_t npages;
    uint32_t prev, next;/* links of the list the span is on (0 = none) */
    uint32_t nfree;     /* SMALL: objects not handed out */
    uint32_t owner;     /* LARGE: owner tag of the client that allocated it */
    uint8_t state;      /* enum tcm_span_state */
    uint8_t cls;        /* SMALL: size class */
    uint8_t committed;  /* FREE: every page is backed by tmpfs blocks */
    uint8_t on_list;    /* 1 while linked into a list */
    uint32_t scan;      /* SMALL: first objmap word that may have a free bit */
} tcm_span_t;
_Static_assert(sizeof(tcm_span_t) == 32, "span record is shared");

/* Runtime settings. The control thread writes, then bumps gen; clients read
 * on their slow paths and act when gen changes. */
typedef struct tcm_config {
    _Atomic uint64_t gen;
    _Atomic uint64_t heap_limit;     /* bytes the page heap may hand out */
    _Atomic uint64_t tcache_budget;  /* bytes per process, all thread caches */
    _Atomic uint64_t xfer_budget;    /* bytes per process, transfer tier */
    _Atomic uint64_t page_cache_cap; /* free committed bytes kept before release */
    uint64_t reserved[3];
} tcm_config_t;

/* X-macro of the daemon's heap statistics: one list for the struct, the
 * protobuf message, tcmctl's table and its JSON. */
#define TCM_HEAP_STATS(X)                                                     \
    X(bytes_reserved, "heap segment size")                                    \
    X(bytes_limit, "current heap limit")                                      \
    X(bytes_spans, "bytes in spans handed to classes or large runs")          \
    X(bytes_clients, "bytes held by clients (in use + their caches)")         \
    X(bytes_central_free, "free objects in central lists")                    \
    X(bytes_pageheap_free, "free bytes in the page heap")                     \
    X(bytes_committed, "bytes of the heap backed by memory (st_blocks)")      \
    X(bytes_released, "bytes given back to the OS so far")                    \
    X(bytes_top, "high-water mark of pages ever used")                        \
    X(requests, "ring requests served")                                       \
    X(refused, "ring requests or objects refused as invalid")                 \
    X(wakeups, "times the heap thread was woken from sleep")                  \
    X(clients_attached, "clients attached now")                               \
    X(clients_total, "clients attached since start")                          \
    X(clients_died, "clients that went away without detaching")              \
    X(reclaimed_objects, "cached objects taken back from departed clients")   \
    X(bytes_orphaned, "bytes still in use that departed clients had allocated")

typedef struct tcm_heap_stats {
#define TCM_STAT_FIELD(name, doc) _Atomic uint64_t name;
    TCM_HEAP_STATS(TCM_STAT_FIELD)
#undef TCM_STAT_FIELD
} tcm_heap_stats_t;

/* Named shared pointers. seq is a seqlock (odd while being written). */
typedef struct tcm_root {
    _Atomic uint32_t seq;
    uint32_t used;
    uint64_t off;
    char name[TCM_ROOT_NAME_MAX];
} tcm_root_t;
_Static_assert(sizeof(tcm_root_t) == 64, "root is shared");

typedef struct tcm_meta_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t page_shift;
    uint64_t base;        /* heap address in every process */
    uint64_t heap_size;   /* reserved bytes */
    uint32_t npages;      /* heap_size >> page_shift */
    uint32_t nclasses;
    uint64_t size;        /* bytes of this segment */
    uint64_t off_classes; /* tcm_class_info_t[nclasses] */
    uint64_t off_page_class; /* uint8_t[npages]: class of an allocated page */
    uint64_t off_page_span;  /* uint32_t[npages]: span index of a page */
    uint64_t off_spans;      /* tcm_span_t[npages + 1] */
    uint64_t off_roots;      /* tcm_root_t[TCM_ROOTS] */
    uint32_t central_head[TCM_NCLASSES]; /* spans of a class with free objects */
    alignas(TCM_CACHELINE) _Atomic uint32_t heap_sleeping; /* heap thread asleep */
    alignas(TCM_CACHELINE) tcm_config_t config;
    alignas(TCM_CACHELINE) tcm_heap_stats_t stats;
} tcm_meta_hdr_t;

/* ---- channel segment ---- */

enum tcm_op {
    TCM_OP_NOP = 0,         /* round trip only */
    TCM_OP_REFILL = 1,      /* cls, count -> offs[nresult] */
    TCM_OP_RETURN = 2,      /* cls, count, offs[count] -> result = refused */
    TCM_OP_ALLOC_PAGES = 3, /* arg = npages, arg2 = alignment pages -> result = offset */
    TCM_OP_FREE_PAGES = 4,  /* arg = offset */
    TCM_OP_ROOT_SET = 5,    /* name in offs bytes, arg = offset or UINT64_MAX to delete */
};

enum tcm_slot_state {
    TCM_SLOT_IDLE = 0,
    TCM_SLOT_POSTED = 1, /* request written, on the ring */
    TCM_SLOT_DONE = 2,   /* daemon wrote the response */
};

/* A thread's request and response. The client writes the request fields
 * then posts the slot index on the ring; the daemon copies them, answers,
 * stores state = DONE and wakes the client if waiting. */
typedef struct tcm_slot {
    _Atomic uint32_t state;   /* futex word: enum tcm_slot_state */
    _Atomic uint32_t waiting; /* client is (about to be) in futex_wait */
    uint32_t op, cls;
    uint32_t count;           /* request: objects in offs, or wanted */
    int32_t status;           /* response: enum tcm_status */
    uint64_t arg, arg2;
    uint64_t result;
    uint32_t nresult;         /* response: objects in offs */
    uint32_t reserved;
    uint64_t offs[TCM_MAX_BATCH]; /* heap offsets */
} tcm_slot_t;
_Static_assert(offsetof(tcm_slot_t, offs) == 56, "slot is shared");

typedef struct tcm_ring_cell {
    _Atomic uint64_t seq; /* Vyukov sequence: pos + 1 when full */
    uint32_t slot;
    uint32_t reserved;
} tcm_ring_cell_t;

typedef struct tcm_ring {
    alignas(TCM_CACHELINE) _Atomic uint64_t head; /* producers' claim */
    alignas(TCM_CACHELINE) tcm_ring_cell_t cells[];
} tcm_ring_t;

/* One thread-cache bin. count is what the daemon reclaims after a crash;
 * slots is the client's own pointer to its array (the daemon recomputes the
 * array position from its private layout). */
typedef struct tcm_bin {
    void **slots;
    uint32_t count;
    uint32_t max;
} tcm_bin_t;
_Static_assert(sizeof(tcm_bin_t) == 16, "bin is shared");

typedef struct tcm_tcache {
    uint32_t in_use;   /* owned by a live thread */
    uint32_t index;
    uint64_t reserved[7];
    tcm_bin_t bins[TCM_NBINS]; /* only 1..TCM_NCLASSES-1 ever hold objects */
    /* then the slot arrays, at chan_hdr.bin_slot_off[c] from the tcache */
} tcm_tcache_t;

/* Per-class transfer tier of one process: a stack of object pointers. */
typedef struct tcm_xfer {
    uint32_t count;
    uint32_t reserved;
} tcm_xfer_t;

typedef struct tcm_chan_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t client_id;
    uint64_t size;
    uint32_t nslots, ring_cap, max_threads, nclasses;
    uint64_t off_ring, off_slots, off_tcaches, tcache_stride, off_xfer;
    uint32_t bin_slot_off[TCM_NCLASSES];  /* from a tcache's start */
    uint32_t xfer_slot_off[TCM_NCLASSES]; /* from off_xfer */
    tcm_xfer_t xfer[TCM_NCLASSES]; /* client-written; guarded by the client's own locks */
    _Atomic uint32_t tcache_hw;    /* client-written: thread caches [0, hw) were ever used;
                                      the daemon reads no further (untouched pages stay holes) */
} tcm_chan_hdr_t;

/* ---- ring statuses ---- */

#define TCM_STATUS_MAP(X)                                                     \
    X(OK, "ok")                                                               \
    X(NOMEM, "heap limit reached")                                            \
    X(BAD_OP, "unknown operation")                                            \
    X(BAD_SLOT, "slot index out of range or slot not posted")                \
    X(BAD_CLASS, "size class out of range")                                   \
    X(BAD_COUNT, "object count out of range")                                 \
    X(BAD_OFFSET, "offset outside the heap")                                  \
    X(NOT_OBJECT, "not the start of an object of that class")                 \
    X(DOUBLE_FREE, "object is already free")                                  \
    X(BAD_NAME, "root name empty, too long or not terminated")                \
    X(NO_ROOM, "root table full")

enum tcm_status {
#define TCM_STATUS_ENUM(name, msg) TCM_ST_##name,
    TCM_STATUS_MAP(TCM_STATUS_ENUM)
#undef TCM_STATUS_ENUM
    TCM_ST__COUNT
};

const char *tcm__status_name(int status);
const char *tcm__status_msg(int status);

/* ---- size classes ---- */

extern const uint8_t tcm__class_lut[65]; /* (size + 15) >> 4 for size <= 1024 */

static inline unsigned tcm__size_class(size_t size) /* size <= TCM_MAX_SMALL */
{
    if (size <= 1024)
        return tcm__class_lut[(size + 15) >> 4];
    size_t m = size - 1;
    unsigned k = 63u - (unsigned)__builtin_clzll(m); /* >= 10 */
    return 9u + (k - 7u) * 8u + (unsigned)((m >> (k - 3u)) - 8u);
}

uint32_t tcm__class_size(unsigned cls);
void tcm__class_table_init(tcm_class_info_t tab[TCM_NCLASSES]);

/* Channel geometry, computed the same way by daemon and client. */
typedef struct tcm_chan_layout {
    uint32_t nslots, ring_cap, max_threads;
    uint64_t off_ring, off_slots, off_tcaches, tcache_stride, off_xfer, size;
    uint32_t bin_slot_off[TCM_NCLASSES];
    uint32_t xfer_slot_off[TCM_NCLASSES];
} tcm_chan_layout_t;

void tcm__chan_layout(tcm_chan_layout_t *l, const tcm_class_info_t tab[TCM_NCLASSES],
                      uint32_t max_threads);

/* Metadata geometry for a heap of npages pages. */
typedef struct tcm_meta_layout {
    uint64_t off_classes, off_page_class, off_page_span, off_spans, off_roots, size;
} tcm_meta_layout_t;

void tcm__meta_layout(tcm_meta_layout_t *l, uint32_t npages);

#endif
