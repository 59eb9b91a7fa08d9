/*
 * tcm_layout.h — the shared-memory contract: the byte layout of every
 * segment, who writes and who reads each field, and with what ordering.
 *
 * Four kinds of segment, all POSIX shm objects named after tcmd's --name:
 *
 *   /tcm.NAME.heap   the heap. Mapped read-write at the same address in
 *                    tcmd and every client. Page 0 is the doorbell page
 *                    (tcm_bell_t); pages 1.. are handed out.
 *   /tcm.NAME.meta   allocator metadata clients need on their fast and slow
 *                    paths (page map, span records, class table, config,
 *                    stats, roots). tcmd maps it read-write and is the only
 *                    writer; clients map it read-only.
 *   /tcm.NAME.state  the rest of the heap's state: object records (which
 *                    objects are handed out, and to whom), client records,
 *                    the intents of the operation in flight.
 *                    Mapped by tcmd only, never named to a client. It is what
 *                    lets the next tcmd adopt the heap after a crash.
 *   /tcm.NAME.ch.ID  one per client: its request ring, response slots,
 *                    thread caches and transfer tier. Only that client and
 *                    tcmd map it. tcmd never trusts anything it reads here:
 *                    it keeps its own copy of the layout and checks every
 *                    index, count and offset.
 *
 * Offset tables. meta: tcm_meta_hdr_t at 0, then (tcm__meta_layout)
 * classes, roots, page_class[npages], page_span[npages], spans[npages + 1],
 * each part 4 KiB aligned. state: tcm_state_hdr_t at 0, then
 * (tcm__state_layout) clients[TCM_CLIENTS_MAX], then one arena per size
 * class c of max_recs[c] object records (rec_bytes[c] each): the
 * record of one small span, its object bits (1 = handed out) then one owner
 * word per 64 objects (TCM_OWNER_BLOCK); then the arena of tag blocks
 * (64 16-bit owner tags each) for the words whose objects more than one
 * client holds; then the huge-range hint, a bit per 2 MiB range (16). A
 * small span's record names its object record (tcm_span_t.rec); an
 * arena's pages are backed only while a record or block in them is used, so
 * the state grows with the spans that exist, not with the heap's size (the
 * arenas' virtual size is about 0.18 x the heap's). channel:
 * tcm_chan_hdr_t at 0, then
 * (tcm__chan_layout) ring, slots[max_threads + 1 + max_threads *
 * TCM_ASYNC_SLOTS] (each thread's own, the shared spare at max_threads, then
 * each thread's async slots: tcm__async_slot), thread caches (each a
 * tcm_tcache_t, then its bins' object arrays and its drain arrays),
 * the transfer tier's object arrays. Nothing holds a pointer except where a field says it is
 * meaningful only to the client that wrote it; list links are span indices.
 *
 * Field annotations: "W:" who writes, "R:" who reads, and how. "heap
 * thread" is tcmd's heap thread, "main" tcmd's libuv thread.
 *
 * Crash rule: tcmd may die between any two stores. Every field below is
 * either authoritative (recovery keeps it) or derived (recovery rebuilds
 * it); docs/DESIGN.md, "Restarts", lists which is which.
 *
 * Version rule: two numbers. TCM_ABI_VERSION covers what libtcm and tcmd
 * share (the heap and metadata segments, a channel, the ring's operations
 * and statuses); it is the metadata header's version, which every client
 * checks. TCM_STATE_VERSION covers the state segment, which only tcmd maps.
 * Either changes whenever a shared struct, a segment's offset table or the
 * meaning of a field of its part changes, in the same commit as the change.
 * A tcmd adopts the state layouts from TCM_STATE_VERSION_OLDEST on,
 * migrating them (daemon/migrate.c), and serves the ABI versions from
 * TCM_ABI_VERSION_OLDEST on: one release back, so a package upgrade keeps
 * the heap (docs/DESIGN.md, "Upgrades"); anything else it refuses, with
 * the reason. Every struct that
 * lives in a segment has its size and the offset of every field asserted
 * below it (TCM_SHARED_SIZE/TCM_SHARED_OFFSET; the values of the 64-bit
 * targets tcm builds for, Windows included: no field is a long): a field
 * moved, resized or inserted breaks the build until the version is bumped
 * and the values are fixed with it.
 */
#ifndef TCM_LAYOUT_H
#define TCM_LAYOUT_H

#include <stdalign.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TCM_SHARED_SIZE(type, bytes)                                                               \
    _Static_assert(sizeof(type) == (bytes), #type " is in a segment: bump its part's version (TCM_ABI_VERSION, TCM_STATE_VERSION) and fix its size")
#define TCM_SHARED_OFFSET(type, field, off)                                                        \
    _Static_assert(offsetof(type, field) == (off),                                                 \
                   #type "." #field " is in a segment: bump its part's version (TCM_ABI_VERSION, TCM_STATE_VERSION) and fix its offset")

/* Up to 14 one number covered both parts (14: memory quotas, holder
 * groups per user); the state version went on from there. */
#define TCM_ABI_VERSION 14u
#define TCM_ABI_VERSION_OLDEST 14u
#define TCM_STATE_VERSION 17u /* 15: the heap's history in the state header (born_version, served_by); 16: the huge-range hint;
                                 17: the heap profile's samples and their processes */
#define TCM_STATE_VERSION_OLDEST 14u
#define TCM_META_MAGIC 0x4154454d4d4354ull /* "TCMMETA" */
#define TCM_CHAN_MAGIC 0x4e4148434d4354ull /* "TCMCHAN" */
#define TCM_STATE_MAGIC 0x4554415453434d54ull /* "TCMSTATE" */

#define TCM_PAGE_SHIFT 13u
#define TCM_PAGE_SIZE (1u << TCM_PAGE_SHIFT)
/* A huge range: 2 MiB of the heap, aligned, which the kernel can back
 * with one large page (docs/DESIGN.md, "Huge pages"). */
#define TCM_HUGE_SHIFT 21u
#define TCM_HUGE_PAGES (1u << (TCM_HUGE_SHIFT - TCM_PAGE_SHIFT))
#define TCM_ALIGN 16u
#define TCM_CACHELINE 64u
#define TCM_GRANULE_SHIFT 4u
#define TCM_MAX_SMALL (256u * 1024u)
#define TCM_NCLASSES 97u          /* class 0 is "none"; 1..96 are real */
#define TCM_NBINS 256u            /* bins indexed by any page-class byte */
#define TCM_PAGE_CLASS_FREE 0u    /* page not in an allocated span */
#define TCM_PAGE_CLASS_LARGE 255u /* page of a large (page-run) allocation */
/* TCM_PAGE_CLASS_DRAIN + c: a page of a span of class c that tcmd is
 * draining (docs/DESIGN.md, "Draining sparse spans"). bins[DRAIN + c] never
 * has room, so the free hit path sends its objects to the slow path, which
 * hands them back to tcmd instead of caching them. */
#define TCM_PAGE_CLASS_DRAIN 128u
_Static_assert(TCM_NCLASSES <= TCM_PAGE_CLASS_DRAIN && TCM_PAGE_CLASS_DRAIN + TCM_NCLASSES <= TCM_PAGE_CLASS_LARGE,
               "a page-class byte must say which of class, draining class and page run it is");
#define TCM_MAX_BATCH 512u        /* objects per ring request */
#define TCM_BATCH_BYTES (2u << 20) /* a class's batch (objects moved by one request), in bytes of objects */
#define TCM_DECAY_STEPS 40u       /* decay_ms / this: how often thread caches give back what sat unused,
                                     and the shortest time a page heap window can be cut to */
#define TCM_ASYNC_SLOTS 4u        /* per thread cache, besides its own slot: requests it does not wait for */
#define TCM_ROOTS_MAX (1u << 16) /* the roots setting's bounds: a table of 4 MiB at most */
#define TCM_ROOTS_MIN 16u
#define TCM_ROOT_NAME_MAX 48      /* including the NUL; the same as tcm.h's, which states it */
#define TCM_CLIENTS_MAX 16384u    /* the most client records (max_clients) a heap can have: the state
                                     segment has room for them all, backed as records are used */
#define TCM_MAX_CLIENTS_MIN 16u
#define TCM_HOLDERS 4096u         /* departed clients still holding objects, each under its own tag */
#define TCM_HOLDER_GROUPS 256u    /* and the rest, one tag per user and executable (the first: every other one) */
#define TCM_QUOTA_RULES 64u       /* memory quotas an operator may set (tcmctl quota) */
#define TCM_EXE_MAX 64u           /* an executable's path as kept (the end of a longer one) */
#define TCM_SAMPLES 32768u        /* live heap-profile samples a heap can keep (docs/DESIGN.md, "Heap profiles") */
#define TCM_SAMPLE_PROCS 4096u    /* processes those samples name (records kept while their samples live): a
                                     user's share, a quarter, is more than clients_per_uid's default */
#define TCM_SAMPLE_FRAMES 27u     /* return addresses a sample keeps, innermost first */
#define TCM_MAX_THREADS 4096u     /* the most --max-threads can be */
#define TCM_RECONNECT_DEFAULT_S 30 /* reconnect_timeout's default, and a client's wait before it reads tcmd's */
/* Defaults of tcmd's settings, as its settings table (daemon/config.c)
 * shows them, that a drop-in's private heap (client/local.c), which no
 * tcmd configures, uses too. */
#define TCM_DEFAULT_MAX_THREADS "1024"
#define TCM_DEFAULT_TCACHE_BUDGET "32M"
#define TCM_DEFAULT_XFER_BUDGET "64M"
#define TCM_DEFAULT_RUN_CACHE "128M"
#define TCM_DEFAULT_PAGE_CACHE_CAP "64M"
#define TCM_DEFAULT_DECAY_MS "10000"
/* How long a process that was never attached waits for a tcmd that took its
 * connection to answer the Hello; an attached one waits reconnect_timeout
 * for a restart. */
#define TCM_FRESH_ATTACH_MS 2000

/* ---- size classes (shared, computed by tcm__class_table_init) ---- */

/* W: tcmd once, when the metadata is created. R: everyone, plain loads. */
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
TCM_SHARED_SIZE(tcm_class_info_t, 32);
TCM_SHARED_OFFSET(tcm_class_info_t, size, 0); TCM_SHARED_OFFSET(tcm_class_info_t, span_pages, 4);
TCM_SHARED_OFFSET(tcm_class_info_t, span_objs, 8); TCM_SHARED_OFFSET(tcm_class_info_t, batch, 12);
TCM_SHARED_OFFSET(tcm_class_info_t, tcache_cap, 16); TCM_SHARED_OFFSET(tcm_class_info_t, xfer_cap, 20);
TCM_SHARED_OFFSET(tcm_class_info_t, recip, 24); TCM_SHARED_OFFSET(tcm_class_info_t, reserved, 28);

/* ---- heap segment, page 0 ---- */

/* W: clients and tcmd's main thread (increment + futex wake). R: the heap
 * thread waits on it. Client-writable, so only ever a wakeup hint. */
typedef struct tcm_bell {
    alignas(TCM_CACHELINE) _Atomic uint32_t seq;
} tcm_bell_t;
TCM_SHARED_SIZE(tcm_bell_t, 64);
TCM_SHARED_OFFSET(tcm_bell_t, seq, 0);

/* ---- metadata segment ---- */

enum tcm_span_state {
    TCM_SPAN_UNUSED = 0, /* record not in use */
    TCM_SPAN_FREE = 1,   /* in the page heap */
    TCM_SPAN_SMALL = 2,  /* carved into objects of one class */
    TCM_SPAN_LARGE = 3,  /* one page run handed to a client */
};

/* A run of pages. Index 0 is the null span. W: heap thread. R: clients
 * read first and npages, plain loads, never state (the page map's class
 * byte tells them what a page is): of a small span to validate a free and
 * to map the span's pages at once (tcm__map_given), of a page run to
 * validate a free or a run handed to them and for its size (free,
 * tcm_usable_size). Those are spans they hold objects of, or a run just
 * handed to them: the record cannot change while they do. Authoritative
 * for allocated spans (first, npages, state, cls, owner or rec);
 * everything else, and the records of free runs, is derived. */
typedef struct tcm_span {
    uint32_t first;     /* first page */
    uint32_t npages;
    uint32_t prev, next;/* links of the list the span is on (0 = none) */
    uint32_t nfree;     /* SMALL: objects not handed out */
    union {
        uint32_t owner; /* LARGE: owner tag of the client that allocated it */
        uint32_t rec;   /* SMALL: its object record in its class's arena (state segment) */
    };
    uint8_t state;      /* enum tcm_span_state */
    uint8_t cls;        /* SMALL: size class */
    uint8_t committed;  /* FREE: every page is backed by tmpfs blocks */
    uint8_t on_list;    /* 1 while linked into a list */
    union {
        uint32_t scan;  /* SMALL: first word of its object bits that may have a free bit */
        uint32_t sample;/* LARGE: 1 + its heap-profile sample's index, TCM_SAMPLE_AWAITED, 0 none (a
                           client frees such a run to tcmd, never to its run cache) */
        uint32_t zeroed;/* FREE, or cut and not yet mapped: 1 when every page reads zero (above the old
                           top, or punched whole since it was last handed out); 0: not known */
    };
} tcm_span_t;
TCM_SHARED_SIZE(tcm_span_t, 32);
TCM_SHARED_OFFSET(tcm_span_t, first, 0); TCM_SHARED_OFFSET(tcm_span_t, npages, 4);
TCM_SHARED_OFFSET(tcm_span_t, prev, 8); TCM_SHARED_OFFSET(tcm_span_t, next, 12);
TCM_SHARED_OFFSET(tcm_span_t, nfree, 16); TCM_SHARED_OFFSET(tcm_span_t, owner, 20);
TCM_SHARED_OFFSET(tcm_span_t, rec, 20); TCM_SHARED_OFFSET(tcm_span_t, state, 24);
TCM_SHARED_OFFSET(tcm_span_t, cls, 25); TCM_SHARED_OFFSET(tcm_span_t, committed, 26);
TCM_SHARED_OFFSET(tcm_span_t, on_list, 27); TCM_SHARED_OFFSET(tcm_span_t, scan, 28);
TCM_SHARED_OFFSET(tcm_span_t, sample, 28); TCM_SHARED_OFFSET(tcm_span_t, zeroed, 28);

/* Runtime settings. W: the main thread, at start and on config set and
 * SIGHUP (tcm__config_publish: every value, then gen bumped; seq_cst);
 * heap_limit, once the heap thread runs, is stored by the heap thread
 * (resize runs there, so the check against what is in use and the new
 * limit are one step) and the main thread bumps gen after it. R: clients:
 * gen on their slow paths (acquire: a thread recomputes its budget from
 * tcache_budget when it changes) and in the background thread (which then
 * trims the transfer tier); xfer_budget, run_cache, decay_ms and
 * reconnect_ms (relaxed) each time they use them; never heap_limit or
 * page_cache_cap. The heap thread: heap_limit, page_cache_cap, decay_ms
 * (relaxed). The main thread: heap_limit, and every value when it adopts a
 * heap. Authoritative: kept across restarts unless given again at start. */
typedef struct tcm_config {
    _Atomic uint64_t gen;
    _Atomic uint64_t heap_limit;     /* bytes the page heap may hand out */
    _Atomic uint64_t tcache_budget;  /* bytes per process, all thread caches */
    _Atomic uint64_t xfer_budget;    /* bytes per process, transfer tier */
    _Atomic uint64_t page_cache_cap; /* free committed bytes kept before release */
    _Atomic uint64_t reconnect_ms;   /* how long a client waits for tcmd to come back */
    _Atomic uint64_t decay_ms;       /* unused this long, a cache gives back what it keeps: the page heap's
                                        free pages to the OS, a process's transfer tier and page runs and
                                        (a step, decay_ms / TCM_DECAY_STEPS) its thread caches' to tcmd */
    _Atomic uint64_t run_cache;      /* bytes per process, freed page runs kept for reuse */
} tcm_config_t;
TCM_SHARED_SIZE(tcm_config_t, 64);
TCM_SHARED_OFFSET(tcm_config_t, gen, 0); TCM_SHARED_OFFSET(tcm_config_t, heap_limit, 8);
TCM_SHARED_OFFSET(tcm_config_t, tcache_budget, 16); TCM_SHARED_OFFSET(tcm_config_t, xfer_budget, 24);
TCM_SHARED_OFFSET(tcm_config_t, page_cache_cap, 32); TCM_SHARED_OFFSET(tcm_config_t, reconnect_ms, 40);
TCM_SHARED_OFFSET(tcm_config_t, decay_ms, 48); TCM_SHARED_OFFSET(tcm_config_t, run_cache, 56);

/* X-macro of the heap statistics: one list for the struct, the protobuf
 * message, tcmctl's table and its JSON and /metrics. X(name, kind, writer,
 * doc): kind G is a gauge, C a counter (monotonic). W: each has one writer,
 * H the heap thread (or tcmd before that thread starts: the segment's
 * creation, the recovery pass), M tcmd's main thread; single-writer relaxed
 * stores (TCM_STAT_ADD and friends in daemon/heap.h check the writer at
 * compile time). R: the main thread, clients (tcm_stat), the heap thread a
 * few of its own. Gauges are derived (recovery recomputes them);
 * counters survive restarts. */
#define TCM_HEAP_STATS(X)                                                                      \
    X(bytes_reserved, G, H, "heap segment size")                                                  \
    X(bytes_limit, G, M, "current heap limit")                                                    \
    X(bytes_spans, G, H, "bytes in spans handed to classes or large runs")                        \
    X(bytes_clients, G, H, "bytes held by clients, in use + caches (bytes_orphaned included)")    \
    X(bytes_central_free, G, H, "free objects in central lists")                                  \
    X(bytes_pageheap_free, G, H, "free bytes in the page heap")                                   \
    X(bytes_committed, G, M, "bytes of the heap backed by memory (st_blocks)")                    \
    X(bytes_released, C, H, "bytes given back to the OS so far")                                  \
    X(bytes_top, G, H, "high-water mark of pages ever used")                                      \
    X(requests, C, H, "ring requests served")                                                     \
    X(refused, C, H, "ring requests or objects refused as invalid")                               \
    X(wakeups, C, H, "times the heap thread was woken from sleep")                                \
    X(clients_attached, G, M, "clients attached now")                                             \
    X(clients_total, C, M, "clients attached since the heap was created")                         \
    X(clients_died, C, H, "clients that went away without detaching")                             \
    X(reclaimed_objects, C, H, "cached objects taken back from departed clients")                 \
    X(bytes_orphaned, G, H, "bytes still in use that departed clients had allocated")             \
    X(restarts, C, H, "times a tcmd adopted this heap from a previous one")                       \
    X(clients_resumed, C, M, "clients that reconnected to a new tcmd as the same client")         \
    X(clients_disconnected, C, M, "running clients whose connection closed: kept, asked to reconnect") \
    X(clients_reconnected, C, M, "running clients that lost their connection and resumed on a new one") \
    X(clients_cut_off, C, M, "clients cut off because their channel was shrunk or punched under tcmd") \
    X(recovery_redone, C, H, "interrupted operations completed by a recovery")                    \
    X(recovery_rolled_back, C, H, "interrupted requests a recovery served again from the start")  \
    X(recovery_repairs, C, H, "inconsistencies a recovery found and repaired")                    \
    X(last_recovery_us, G, H, "duration of the last recovery pass")                               \
    X(validations, C, H, "whole-heap validations run")                                            \
    X(validation_failures, C, H, "whole-heap validations that found an inconsistency")                 \
    X(decays, C, H, "times an idle page heap gave its cached pages back by itself")                  \
    X(flush_requests, C, H, "times a full heap asked every process to give back what it caches") \
    X(departed_holders, G, H, "departed clients with objects still allocated, each under its own tag") \
    X(departed_groups, G, H, "executables whose older departed holders share one tag")            \
    X(holder_merges, C, H, "departed holders merged into their executable's group")                \
    X(quota_refusals, C, H, "requests refused because their user (or user and name) held its quota")

typedef struct tcm_heap_stats {
#define TCM_STAT_FIELD(name, kind, writer, doc) _Atomic uint64_t name;
    TCM_HEAP_STATS(TCM_STAT_FIELD)
#undef TCM_STAT_FIELD
} tcm_heap_stats_t;
TCM_SHARED_SIZE(tcm_heap_stats_t, 272);
TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_reserved, 0); TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_limit, 8);
TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_spans, 16); TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_clients, 24);
TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_central_free, 32);
TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_pageheap_free, 40);
TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_committed, 48);
TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_released, 56); TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_top, 64);
TCM_SHARED_OFFSET(tcm_heap_stats_t, requests, 72); TCM_SHARED_OFFSET(tcm_heap_stats_t, refused, 80);
TCM_SHARED_OFFSET(tcm_heap_stats_t, wakeups, 88); TCM_SHARED_OFFSET(tcm_heap_stats_t, clients_attached, 96);
TCM_SHARED_OFFSET(tcm_heap_stats_t, clients_total, 104);
TCM_SHARED_OFFSET(tcm_heap_stats_t, clients_died, 112);
TCM_SHARED_OFFSET(tcm_heap_stats_t, reclaimed_objects, 120);
TCM_SHARED_OFFSET(tcm_heap_stats_t, bytes_orphaned, 128); TCM_SHARED_OFFSET(tcm_heap_stats_t, restarts, 136);
TCM_SHARED_OFFSET(tcm_heap_stats_t, clients_resumed, 144);
TCM_SHARED_OFFSET(tcm_heap_stats_t, clients_disconnected, 152);
TCM_SHARED_OFFSET(tcm_heap_stats_t, clients_reconnected, 160);
TCM_SHARED_OFFSET(tcm_heap_stats_t, clients_cut_off, 168);
TCM_SHARED_OFFSET(tcm_heap_stats_t, recovery_redone, 176);
TCM_SHARED_OFFSET(tcm_heap_stats_t, recovery_rolled_back, 184);
TCM_SHARED_OFFSET(tcm_heap_stats_t, recovery_repairs, 192);
TCM_SHARED_OFFSET(tcm_heap_stats_t, last_recovery_us, 200);
TCM_SHARED_OFFSET(tcm_heap_stats_t, validations, 208);
TCM_SHARED_OFFSET(tcm_heap_stats_t, validation_failures, 216);
TCM_SHARED_OFFSET(tcm_heap_stats_t, decays, 224); TCM_SHARED_OFFSET(tcm_heap_stats_t, flush_requests, 232);
TCM_SHARED_OFFSET(tcm_heap_stats_t, departed_holders, 240); TCM_SHARED_OFFSET(tcm_heap_stats_t, departed_groups, 248);
TCM_SHARED_OFFSET(tcm_heap_stats_t, holder_merges, 256);
TCM_SHARED_OFFSET(tcm_heap_stats_t, quota_refusals, 264);

/* Named shared pointers: an open-addressing table of meta->nroots entries
 * (a power of two), probed linearly from tcm__root_hash(name); a probe
 * stops at an entry never used, so a deleted one stays as a tombstone
 * (TCM_ROOT_DELETED) that a later name may take. W: the heap thread, under
 * a seqlock (seq odd while being written; release fence after making it
 * odd, release store of the even value). R: clients, the main thread and
 * the heap thread (a ROOT_SET looks for the name) retry while seq is odd
 * or changed. Every field is read and written with relaxed atomic accesses
 * (the name a word at a time) through tcm__root_read/tcm__root_write only.
 * Authoritative. */
#define TCM_ROOT_DELETED UINT32_MAX
typedef struct tcm_root {
    _Atomic uint32_t seq;
    _Atomic uint32_t holder; /* 0: never used; TCM_ROOT_DELETED; else tcm__root_holder(uid), whose share it is */
    _Atomic uint64_t off;
    _Atomic uint64_t name[TCM_ROOT_NAME_MAX / 8]; /* the bytes of a NUL-padded name */
} tcm_root_t;
TCM_SHARED_SIZE(tcm_root_t, 64);
TCM_SHARED_OFFSET(tcm_root_t, seq, 0); TCM_SHARED_OFFSET(tcm_root_t, holder, 4);
TCM_SHARED_OFFSET(tcm_root_t, off, 8); TCM_SHARED_OFFSET(tcm_root_t, name, 16);

/* The holder value of a root that uid sets (uids past UINT32_MAX - 2 share one). */
static inline uint32_t tcm__root_holder(uint32_t uid)
{
    return uid < TCM_ROOT_DELETED - 2 ? uid + 1 : TCM_ROOT_DELETED - 1;
}
static inline bool tcm__root_live(uint32_t holder)
{
    return holder != 0 && holder != TCM_ROOT_DELETED;
}
/* Where a name's probe starts (FNV-1a), in a table of mask + 1 entries. */
uint32_t tcm__root_hash(const char *name, uint32_t mask);
/* A consistent copy of a root (name NUL-terminated); retries while it is
 * being written. Returns its holder. */
uint32_t tcm__root_read(const tcm_root_t *r, uint64_t *off, char name[TCM_ROOT_NAME_MAX]);
/* The entry of name in a table of nroots, or -1 (a probe reads at most
 * nroots entries). */
int tcm__root_find(const tcm_root_t *roots, uint32_t nroots, const char *name, uint64_t *off);
/* The seqlock write (heap thread); completes one a crash left with an odd
 * sequence. off == UINT64_MAX deletes the root (a tombstone). */
void tcm__root_write(tcm_root_t *r, const char *name, uint64_t off, uint32_t holder);
/* The same write in its three steps, so that tcmd can place its test crash
 * points between them: begin makes the sequence odd (or finds it odd) and
 * returns it, data stores name, offset and used, end makes it even. */
uint32_t tcm__root_write_begin(tcm_root_t *r);
void tcm__root_write_data(tcm_root_t *r, const char *name, uint64_t off, uint32_t holder);
void tcm__root_write_end(tcm_root_t *r, uint32_t seq);
/* A root left with an odd sequence by a write nobody will redo (recovery,
 * after the request intent): made even, kept when what it holds is whole
 * (*kept: it names something), else cleared. Returns whether it was odd. */
bool tcm__root_repair(tcm_root_t *r, uint64_t heap_size, bool *kept);

/* W: tcmd when it creates the segment (geometry and heap_id, fixed
 * afterwards); the heap thread (heap_sleeping); see
 * tcm_config_t and TCM_HEAP_STATS. R: clients check magic, version, base,
 * heap_size, page_shift and heap_id at attach, take the offsets of the
 * parts they map, and read heap_sleeping after every post (seq_cst fence
 * before the load, see shm/ring.h); the main thread sends heap_id in each
 * Welcome. */
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
    uint64_t off_roots;      /* tcm_root_t[nroots] */
    uint64_t heap_id;        /* random, fixed at creation: tells a heap from a replaced one of the same name */
    uint32_t nroots;         /* entries of the roots table, a power of two (the roots setting at creation) */
    uint32_t unused_central_head[TCM_NCLASSES - 1]; /* was each class's one central list; tcmd's own now
                                                        (tcm_heap_t.central), rebuilt at every start */
    alignas(TCM_CACHELINE) _Atomic uint32_t heap_sleeping; /* heap thread asleep */
    /* Bytes a thread allocates, on average, per sampled allocation (the
     * profile_sample setting; 0: none), and 1 in profile_set once a tcmd
     * published it (an adopted heap keeps it then, as the settings of
     * tcm_config_t). W: the main thread, at start and on config set. R:
     * clients' slow paths (relaxed); the main thread when it adopts a heap.
     * In room layout 14 had as padding: a tcmd that does not write them
     * leaves 0, and its clients never sample (docs/DESIGN.md, "Heap
     * profiles"). */
    uint32_t profile_set;
    _Atomic uint64_t profile_sample;
    _Atomic uint32_t profile_rate; /* samples a thread takes a second before its intervals grow (0: no limit) */
    alignas(TCM_CACHELINE) tcm_config_t config;
    alignas(TCM_CACHELINE) tcm_heap_stats_t stats;
} tcm_meta_hdr_t;
TCM_SHARED_SIZE(tcm_meta_hdr_t, 960);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, magic, 0); TCM_SHARED_OFFSET(tcm_meta_hdr_t, version, 8);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, page_shift, 12); TCM_SHARED_OFFSET(tcm_meta_hdr_t, base, 16);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, heap_size, 24); TCM_SHARED_OFFSET(tcm_meta_hdr_t, npages, 32);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, nclasses, 36); TCM_SHARED_OFFSET(tcm_meta_hdr_t, size, 40);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, off_classes, 48); TCM_SHARED_OFFSET(tcm_meta_hdr_t, off_page_class, 56);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, off_page_span, 64); TCM_SHARED_OFFSET(tcm_meta_hdr_t, off_spans, 72);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, off_roots, 80); TCM_SHARED_OFFSET(tcm_meta_hdr_t, heap_id, 88);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, nroots, 96); TCM_SHARED_OFFSET(tcm_meta_hdr_t, unused_central_head, 100); TCM_SHARED_OFFSET(tcm_meta_hdr_t, heap_sleeping, 512);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, profile_set, 516); TCM_SHARED_OFFSET(tcm_meta_hdr_t, profile_sample, 520);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, profile_rate, 528);
TCM_SHARED_OFFSET(tcm_meta_hdr_t, config, 576); TCM_SHARED_OFFSET(tcm_meta_hdr_t, stats, 640);

/* ---- channel segment ---- */

enum tcm_op {
    TCM_OP_NOP = 0,         /* round trip only */
    TCM_OP_REFILL = 1,      /* cls, count -> offs[nresult] */
    TCM_OP_RETURN = 2,      /* cls, count, offs[count] -> result = refused */
    TCM_OP_ALLOC_PAGES = 3, /* arg = npages, arg2 = alignment pages, cls = TCM_ALLOC_SAMPLED or 0 -> result =
                               offset, nresult = TCM_RUN_ZEROED or 0; cls = TCM_ALLOC_SAMPLE_RUNS: below */
    TCM_OP_FREE_PAGES = 4,  /* arg = offset */
    TCM_OP_ROOT_SET = 5,    /* name in offs bytes, arg = offset or UINT64_MAX to delete, cls = enum
                               tcm_root_mode, arg2 = (REPLACE) the offset expected, UINT64_MAX: none */
    /* The heap profile's (docs/DESIGN.md, "Heap profiles"); a client sends
     * them only while meta.profile_sample is set, which a tcmd without them
     * never does. */
    TCM_OP_SAMPLE = 6,      /* arg = offset of a page run the client holds, arg2 = bytes asked for, count =
                               return addresses in offs, cls = the mean interval it was sampled at
                               (tcm__sample_interval) */
    TCM_OP_MAPS = 7,        /* the client's code mappings as text, count bytes in offs; arg = where in the
                               text this part goes, arg2 = the whole text's length (the last part completes it) */
};
/* A SAMPLE's mean interval in its 32 bits: bytes below 2^31, else MiB
 * with the top bit set (a thread allocating terabytes a second). */
#define TCM_SAMPLE_INTERVAL_MIB 0x80000000u
static inline uint32_t tcm__sample_interval_pack(uint64_t bytes)
{
    if (bytes < TCM_SAMPLE_INTERVAL_MIB)
        return (uint32_t)bytes;
    uint64_t mib = bytes >> 20;
    return TCM_SAMPLE_INTERVAL_MIB | (uint32_t)(mib < TCM_SAMPLE_INTERVAL_MIB ? mib : TCM_SAMPLE_INTERVAL_MIB - 1);
}
static inline uint64_t tcm__sample_interval(uint32_t packed)
{
    return packed & TCM_SAMPLE_INTERVAL_MIB ? (uint64_t)(packed & ~TCM_SAMPLE_INTERVAL_MIB) << 20 : packed;
}

/* ALLOC_PAGES' cls for the run of a sampled allocation: its span is marked
 * TCM_SAMPLE_AWAITED before the client has it, so that a free before tcmd
 * takes the SAMPLE (posted without waking it) reaches tcmd, not the run
 * cache; the SAMPLE replaces the mark. */
#define TCM_ALLOC_SAMPLED 1u
/* ALLOC_PAGES' cls for a stock of sample runs: count (1 to
 * TCM_SAMPLE_RUNS_MAX) one-page runs, arg = 1, arg2 = 1, each marked as
 * TCM_ALLOC_SAMPLED marks its run -> offs[nresult] (fewer than count only
 * where the heap or the client's quota has no more), result = offs[0]. An
 * addition a client sends only while meta.profile_sample is set, as the
 * profile's ops: every tcmd that sets it serves it. */
#define TCM_ALLOC_SAMPLE_RUNS 2u
#define TCM_SAMPLE_RUNS_MAX 8u
/* ALLOC_PAGES' nresult for a run of cls 0 or TCM_ALLOC_SAMPLED whose
 * pages all read zero (tcm_span_t.zeroed), so that a calloc leaves them
 * untouched; 0: not known (a tcmd of 0.2.0 answers every request with
 * nresult 0, and a recovery answers so). */
#define TCM_RUN_ZEROED 1u
#define TCM_SAMPLE_AWAITED UINT32_MAX
_Static_assert(TCM_SAMPLES < TCM_SAMPLE_AWAITED, "the awaited mark is no sample's 1 + index");
#define TCM_NOPS 8u
#define TCM_OPS_COUNTED 6u /* the ops tcm_daemon_stats_t.ops counts (layout 14's); the profile's have stats of their own */

enum tcm_root_mode {
    TCM_ROOT_SET = 0,     /* whatever it held */
    TCM_ROOT_CREATE = 1,  /* only a name not in the table */
    TCM_ROOT_REPLACE = 2, /* only if it holds arg2 */
};

enum tcm_slot_state {
    TCM_SLOT_IDLE = 0,
    TCM_SLOT_POSTED = 1, /* request written, on the ring */
    TCM_SLOT_DONE = 2,   /* daemon wrote the response */
};

/* A thread's request and response. The client writes op, cls, count, arg,
 * arg2 and (RETURN, ROOT_SET) offs, bumps req_seq, stores state = POSTED
 * (release) and pushes the slot index on the ring; it does not touch the
 * slot again until state is DONE (acquire), then reads the answer and
 * stores state = IDLE. The heap thread copies the request fields once,
 * writes result, nresult and (REFILL) offs, then status, stores state =
 * DONE (release), fences and wakes the client if waiting. req_seq numbers
 * the slot's requests, so a recovering tcmd can tell whether the request it
 * was serving has been answered; a reclaim reads the answered RETURN,
 * FREE_PAGES and ALLOC_PAGES slots of a dead client. */
typedef struct tcm_slot {
    _Atomic uint32_t state;   /* futex word: enum tcm_slot_state */
    _Atomic uint32_t waiting; /* client is (about to be) in futex_wait */
    uint32_t op, cls;
    uint32_t count;           /* request: objects in offs, or wanted */
    int32_t status;           /* response: enum tcm_status */
    uint64_t arg, arg2;
    uint64_t result;
    uint32_t nresult;         /* response: objects in offs */
    uint32_t req_seq;         /* request number, client-written */
    uint64_t offs[TCM_MAX_BATCH]; /* heap offsets */
} tcm_slot_t;
TCM_SHARED_SIZE(tcm_slot_t, 4152);
TCM_SHARED_OFFSET(tcm_slot_t, state, 0); TCM_SHARED_OFFSET(tcm_slot_t, waiting, 4);
TCM_SHARED_OFFSET(tcm_slot_t, op, 8); TCM_SHARED_OFFSET(tcm_slot_t, cls, 12);
TCM_SHARED_OFFSET(tcm_slot_t, count, 16); TCM_SHARED_OFFSET(tcm_slot_t, status, 20);
TCM_SHARED_OFFSET(tcm_slot_t, arg, 24); TCM_SHARED_OFFSET(tcm_slot_t, arg2, 32);
TCM_SHARED_OFFSET(tcm_slot_t, result, 40); TCM_SHARED_OFFSET(tcm_slot_t, nresult, 48);
TCM_SHARED_OFFSET(tcm_slot_t, req_seq, 52); TCM_SHARED_OFFSET(tcm_slot_t, offs, 56);

/* W: tcmd's main thread initialises the ring when it makes the channel;
 * then producers (the client's threads) claim a cell with a CAS on head,
 * store slot and publish it with a release store of seq; the consumer (the
 * heap thread) reads slot after an acquire load of seq and frees the cell
 * with a release store of seq once the request is committed. */
typedef struct tcm_ring_cell {
    _Atomic uint64_t seq; /* Vyukov sequence: pos + 1 when full */
    uint32_t slot;
    uint32_t reserved;
} tcm_ring_cell_t;
TCM_SHARED_SIZE(tcm_ring_cell_t, 16);
TCM_SHARED_OFFSET(tcm_ring_cell_t, seq, 0); TCM_SHARED_OFFSET(tcm_ring_cell_t, slot, 8);
TCM_SHARED_OFFSET(tcm_ring_cell_t, reserved, 12);

typedef struct tcm_ring {
    alignas(TCM_CACHELINE) _Atomic uint64_t head; /* producers' claim */
    alignas(TCM_CACHELINE) tcm_ring_cell_t cells[];
} tcm_ring_t;
TCM_SHARED_SIZE(tcm_ring_t, 64);
TCM_SHARED_OFFSET(tcm_ring_t, head, 0); TCM_SHARED_OFFSET(tcm_ring_t, cells, 64);

/* One thread-cache bin. W: its thread only, plain stores. R: tcmd reads
 * count (clamped) and the array, copied out of the channel
 * (tcm__each_cache), to reclaim a dead client, for stats and to validate.
 * objs is the client's own pointer to its object array (tcmd recomputes
 * the array's position from its private layout). */
typedef struct tcm_bin {
    void **objs;
    uint32_t count;
    uint32_t max;
} tcm_bin_t;
TCM_SHARED_SIZE(tcm_bin_t, 16);
TCM_SHARED_OFFSET(tcm_bin_t, objs, 0); TCM_SHARED_OFFSET(tcm_bin_t, count, 8);
TCM_SHARED_OFFSET(tcm_bin_t, max, 12);

typedef struct tcm_tcache {
    uint32_t in_use;   /* W: client (register, exit). R: tcmd, stats (threads in use) */
    uint32_t index;    /* W: client (register). R: nobody: a reader of a dump knows which cache it sees */
    uint64_t ahead_bytes; /* W: client (fetch ahead, settle). R: tcmd, stats only: a REFILL's bytes asked
                             for ahead of need and not yet taken in (0 from clients that never do) */
    _Atomic uint32_t dropped; /* W: client: bit j cleared (relaxed) before the RETURN on async slot j is
                                 posted, set (release) after the bin's count dropped. R: tcmd, reclaim: bit j set:
                                 the RETURN on async slot j has left the bin, so its objects need not be
                                 skipped (they may be back in a bin from a later refill) */
    uint32_t reserved32;
    uint64_t reserved[5];
    tcm_bin_t bins[TCM_NBINS]; /* 1..TCM_NCLASSES-1 the classes; DRAIN + c the drain arrays (room: never) */
    /* then the bins' object arrays, at chan_hdr.bin_objs_off[c] from the tcache */
} tcm_tcache_t;
TCM_SHARED_SIZE(tcm_tcache_t, 4160);
TCM_SHARED_OFFSET(tcm_tcache_t, in_use, 0); TCM_SHARED_OFFSET(tcm_tcache_t, index, 4);
TCM_SHARED_OFFSET(tcm_tcache_t, ahead_bytes, 8); TCM_SHARED_OFFSET(tcm_tcache_t, dropped, 16);
TCM_SHARED_OFFSET(tcm_tcache_t, reserved32, 20); TCM_SHARED_OFFSET(tcm_tcache_t, reserved, 24);
TCM_SHARED_OFFSET(tcm_tcache_t, bins, 64);

/* A page run a process keeps for its next large allocation. */
#define TCM_LARGE_CACHE 64u
typedef struct tcm_large_entry {
    uint64_t off;    /* heap offset of the run's first page */
    uint32_t npages;
    uint32_t reserved;
} tcm_large_entry_t;
TCM_SHARED_SIZE(tcm_large_entry_t, 16);
TCM_SHARED_OFFSET(tcm_large_entry_t, off, 0); TCM_SHARED_OFFSET(tcm_large_entry_t, npages, 8);
TCM_SHARED_OFFSET(tcm_large_entry_t, reserved, 12);

/* Per-class transfer tier of one process: a stack of object pointers. */
typedef struct tcm_xfer {
    uint32_t count;
    uint32_t reserved;
} tcm_xfer_t;
TCM_SHARED_SIZE(tcm_xfer_t, 8);
TCM_SHARED_OFFSET(tcm_xfer_t, count, 0); TCM_SHARED_OFFSET(tcm_xfer_t, reserved, 4);

/* W: tcmd's main thread when it creates the channel (geometry); then the
 * client and tcmd, each the fields noted. R: the client checks magic,
 * client_id, size and off_tcaches at attach (it computes the geometry
 * itself); tcmd copies the header out of the channel object with a file
 * read (tcm__chan_read: never a fault on a shrunk or punched channel, racy
 * while the client runs) for tcache_hw, the xfer counts and the page-run
 * cache, clamps every count and never reads an offset from here. */
typedef struct tcm_chan_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t client_id;
    uint64_t size;
    uint32_t nslots, ring_cap, max_threads, nclasses;
    uint64_t off_ring, off_slots, off_tcaches, tcache_stride, off_xfer;
    uint32_t bin_objs_off[TCM_NCLASSES];  /* from a tcache's start */
    uint32_t xfer_objs_off[TCM_NCLASSES]; /* from off_xfer */
    tcm_xfer_t xfer[TCM_NCLASSES]; /* client-written under its per-class locks (read outside them as a hint) */
    /* client-written under its large-cache lock: page runs it keeps (tcmd
     * reclaims them if it dies, checking each) */
    uint32_t large_count;
    uint32_t large_reserved;
    tcm_large_entry_t large[TCM_LARGE_CACHE];
    _Atomic uint32_t tcache_hw;    /* client-written: thread caches [0, hw) were ever used;
                                      the daemon reads no further (untouched pages stay holes) */
    _Atomic uint32_t resume_wanted; /* tcmd-written (main thread, recovery): set when a tcmd adopted
                                       this client or its control connection closed while it runs,
                                       cleared when it resumes; the client reconnects when it sees
                                       it (relaxed) after the next answer it waited for */
    /* The client's background thread sleeps on bg_wake (futex; tcmd
     * increments it and wakes, and so does the client to stop the thread).
     * flush_gen: tcmd-written (the heap thread when the heap is full, the
     * main thread for tcmctl release), bumped to ask for what the process
     * caches; read by the background thread and by every thread's slow
     * path. flush_ack: written by the background thread, the flush_gen last
     * acted on; tcmd's main thread loads it to know a release may go on. */
    alignas(TCM_CACHELINE) _Atomic uint32_t bg_wake;
    _Atomic uint32_t flush_gen;
    _Atomic uint32_t flush_ack;
} tcm_chan_hdr_t;
TCM_SHARED_SIZE(tcm_chan_hdr_t, 2752);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, magic, 0); TCM_SHARED_OFFSET(tcm_chan_hdr_t, version, 8);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, client_id, 12); TCM_SHARED_OFFSET(tcm_chan_hdr_t, size, 16);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, nslots, 24); TCM_SHARED_OFFSET(tcm_chan_hdr_t, ring_cap, 28);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, max_threads, 32); TCM_SHARED_OFFSET(tcm_chan_hdr_t, nclasses, 36);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, off_ring, 40); TCM_SHARED_OFFSET(tcm_chan_hdr_t, off_slots, 48);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, off_tcaches, 56); TCM_SHARED_OFFSET(tcm_chan_hdr_t, tcache_stride, 64);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, off_xfer, 72); TCM_SHARED_OFFSET(tcm_chan_hdr_t, bin_objs_off, 80);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, xfer_objs_off, 468); TCM_SHARED_OFFSET(tcm_chan_hdr_t, xfer, 856);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, large_count, 1632); TCM_SHARED_OFFSET(tcm_chan_hdr_t, large_reserved, 1636);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, large, 1640); TCM_SHARED_OFFSET(tcm_chan_hdr_t, tcache_hw, 2664);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, resume_wanted, 2668); TCM_SHARED_OFFSET(tcm_chan_hdr_t, bg_wake, 2688);
TCM_SHARED_OFFSET(tcm_chan_hdr_t, flush_gen, 2692); TCM_SHARED_OFFSET(tcm_chan_hdr_t, flush_ack, 2696);

/* ---- state segment (tcmd only) ---- */

/* Counters of one size class. W: heap thread (single writer, relaxed
 * load + store). R: main thread. spans and free_objs are derived. */
typedef struct tcm_class_stats {
    _Atomic uint64_t spans;     /* spans cut for this class */
    _Atomic uint64_t free_objs; /* objects in those spans not handed out */
    _Atomic uint64_t refills;   /* batches handed to clients */
    _Atomic uint64_t returns;   /* batches given back by clients */
} tcm_class_stats_t;
TCM_SHARED_SIZE(tcm_class_stats_t, 32);
TCM_SHARED_OFFSET(tcm_class_stats_t, spans, 0); TCM_SHARED_OFFSET(tcm_class_stats_t, free_objs, 8);
TCM_SHARED_OFFSET(tcm_class_stats_t, refills, 16); TCM_SHARED_OFFSET(tcm_class_stats_t, returns, 24);

/* Request service time: bucket i counts requests under 250 ns << i; the
 * last bucket is everything slower. */
#define TCM_LAT_BUCKETS 16u
#define TCM_LAT_BASE_NS 250u

/* tcmd's own counters. W: heap thread (single writer). R: main thread. */
typedef struct tcm_daemon_stats {
    _Atomic uint64_t ops[TCM_OPS_COUNTED];
    _Atomic uint64_t refused[16];
    _Atomic uint64_t latency[TCM_LAT_BUCKETS];
    _Atomic uint64_t latency_sum_ns;
} tcm_daemon_stats_t;
TCM_SHARED_SIZE(tcm_daemon_stats_t, 312);
TCM_SHARED_OFFSET(tcm_daemon_stats_t, ops, 0); TCM_SHARED_OFFSET(tcm_daemon_stats_t, refused, 48);
TCM_SHARED_OFFSET(tcm_daemon_stats_t, latency, 176);
TCM_SHARED_OFFSET(tcm_daemon_stats_t, latency_sum_ns, 304);

enum tcm_rec_state {
    TCM_REC_FREE = 0,     /* record unused */
    TCM_REC_CREATING = 1, /* main thread is making its channel: no Welcome sent yet */
    TCM_REC_ACTIVE = 2,   /* attached; the heap thread serves its ring */
    TCM_REC_EVICTED = 3,  /* detached by an operator: frees only, until it exits */
    TCM_REC_DEAD = 4,     /* gone: its caches must be reclaimed */
    TCM_REC_REAPED = 5,   /* reclaimed: the main thread unlinks its channel */
};

/* A client, as the next tcmd needs it to take the client back. W: the main
 * thread creates it (CREATING, fields, then ACTIVE with a release store),
 * stores said_bye, marks it DEAD or EVICTED, and frees it after REAPED; the
 * heap thread writes tail, the counters and REAPED; a recovering tcmd marks
 * the dead DEAD, frees the records it drops and recomputes bytes_out and
 * bytes_back. R: both; the main thread loads the counters atomically. */
typedef struct tcm_client_rec {
    _Atomic uint32_t state;     /* enum tcm_rec_state */
    uint32_t id;
    uint32_t pid;               /* from SO_PEERCRED */
    uint32_t uid;
    uint16_t tag;               /* owner tag of what it allocates (holders.c: any free one) */
    uint8_t reserved1;
    _Atomic uint8_t said_bye;   /* detached on purpose, not killed */
    uint32_t reserved0;
    uint64_t token;             /* resume secret, sent only in its Welcome */
    uint64_t attached_unix;
    uint64_t tail;              /* heap thread: ring consumer position (committed) */
    /* W: heap thread. bytes_back counts this client's allocations that came
     * back to the heap, whoever freed them (derived: out minus what the
     * owner tags say it holds) */
    _Atomic uint64_t bytes_out, bytes_back, requests, errors;
    /* W: main thread at attach. The process's start time (clock ticks since
     * boot; Windows: creation time): with pid, who the client is, which a
     * later process reusing the pid is not. Its liveness, for this tcmd and
     * the next one, is that process, not any descriptor it holds. */
    uint64_t proc_start;
    char chan_name[72];
} tcm_client_rec_t;
TCM_SHARED_SIZE(tcm_client_rec_t, 160);
TCM_SHARED_OFFSET(tcm_client_rec_t, state, 0); TCM_SHARED_OFFSET(tcm_client_rec_t, id, 4);
TCM_SHARED_OFFSET(tcm_client_rec_t, pid, 8); TCM_SHARED_OFFSET(tcm_client_rec_t, uid, 12);
TCM_SHARED_OFFSET(tcm_client_rec_t, tag, 16); TCM_SHARED_OFFSET(tcm_client_rec_t, reserved1, 18);
TCM_SHARED_OFFSET(tcm_client_rec_t, said_bye, 19); TCM_SHARED_OFFSET(tcm_client_rec_t, reserved0, 20);
TCM_SHARED_OFFSET(tcm_client_rec_t, token, 24); TCM_SHARED_OFFSET(tcm_client_rec_t, attached_unix, 32);
TCM_SHARED_OFFSET(tcm_client_rec_t, tail, 40); TCM_SHARED_OFFSET(tcm_client_rec_t, bytes_out, 48);
TCM_SHARED_OFFSET(tcm_client_rec_t, bytes_back, 56); TCM_SHARED_OFFSET(tcm_client_rec_t, requests, 64);
TCM_SHARED_OFFSET(tcm_client_rec_t, errors, 72); TCM_SHARED_OFFSET(tcm_client_rec_t, proc_start, 80);
TCM_SHARED_OFFSET(tcm_client_rec_t, chan_name, 88);

enum tcm_holder_state {
    TCM_HOLDER_FREE = 0,
    TCM_HOLDER_HELD = 1,    /* a departed process whose objects are still allocated, under its own tag */
    TCM_HOLDER_MERGING = 2, /* such a process's tag being rewritten to its group's (into) */
    TCM_HOLDER_GROUP = 3,   /* the departed processes of one user and executable, under one tag */
};
#define TCM_HOLDER_WARNED 1u /* flags: its still-held bytes were logged */

/* What a departed client still holds, under which tag (docs/DESIGN.md,
 * "Departed holders"). W: the heap thread (a client's departure, merges,
 * an entry whose bytes are all freed) under server.holders_lock, fields
 * first and state last; the main thread (flags, under the lock); a
 * recovering tcmd. R: the same; the control views. Its bytes are derived
 * (the owner tags say them), not stored. */
typedef struct tcm_holder {
    _Atomic uint32_t state;  /* enum tcm_holder_state */
    uint16_t tag;
    uint16_t into;           /* MERGING: index of the GROUP entry it is merged into */
    uint32_t id, pid, uid;   /* HELD, MERGING: the client's; GROUP: the last one merged's (a group's uid is
                                its key, but the first group's) */
    uint32_t processes;      /* departed processes it stands for: 1, or a group's count */
    uint64_t departed_unix;  /* when it left; a group's: the last merge */
    uint32_t flags;
    uint32_t reserved;
    char comm[16];
    char exe[TCM_EXE_MAX];   /* a GROUP's key */
} tcm_holder_t;
TCM_SHARED_SIZE(tcm_holder_t, 120);
TCM_SHARED_OFFSET(tcm_holder_t, state, 0); TCM_SHARED_OFFSET(tcm_holder_t, tag, 4);
TCM_SHARED_OFFSET(tcm_holder_t, into, 6); TCM_SHARED_OFFSET(tcm_holder_t, id, 8);
TCM_SHARED_OFFSET(tcm_holder_t, pid, 12); TCM_SHARED_OFFSET(tcm_holder_t, uid, 16);
TCM_SHARED_OFFSET(tcm_holder_t, processes, 20); TCM_SHARED_OFFSET(tcm_holder_t, departed_unix, 24);
TCM_SHARED_OFFSET(tcm_holder_t, flags, 32); TCM_SHARED_OFFSET(tcm_holder_t, reserved, 36);
TCM_SHARED_OFFSET(tcm_holder_t, comm, 40); TCM_SHARED_OFFSET(tcm_holder_t, exe, 56);

enum tcm_intent_phase {
    TCM_INTENT_NONE = 0,
    TCM_INTENT_PICKED = 1,   /* request taken off the ring; nothing changed yet */
    TCM_INTENT_APPLYING = 2, /* its effect is logged below and being applied */
};

/* The ring request the heap thread is serving (docs/DESIGN.md, "One
 * request, step by step"). W and R: heap thread, and a recovering tcmd.
 * Each phase is stored between two compiler barriers: the request's fields
 * before PICKED, its operation's fields before APPLYING; what an operation
 * logs while it is applied (REFILL: offs and n, RETURN: st) after. */
typedef struct tcm_req_intent {
    _Atomic uint32_t phase;     /* enum tcm_intent_phase */
    uint32_t client;            /* client record index */
    uint32_t slot;              /* slot index in the client's channel */
    uint32_t req_seq;           /* the slot's req_seq when it was picked */
    uint64_t pos;               /* ring position of the request */
    uint32_t op, cls;
    uint32_t count;             /* REFILL: wanted; RETURN: entries in offs */
    uint32_t n;                 /* REFILL: objects logged in offs; RETURN: count (every entry is
                                   logged in st; an older tcmd counted the entries it had reached) */
    uint32_t owner;             /* REFILL: owner tag the objects get; ALLOC/FREE_PAGES: the run's */
    uint32_t span;              /* ALLOC/FREE_PAGES: span record */
    uint32_t first, npages;     /* ALLOC/FREE_PAGES: the run */
    uint32_t root;              /* ROOT_SET: root index */
    uint32_t holder;            /* ROOT_SET: the holder it writes */
    uint64_t arg;               /* ROOT_SET: offset, UINT64_MAX to delete */
    char name[TCM_ROOT_NAME_MAX]; /* ROOT_SET */
    uint64_t offs[TCM_MAX_BATCH];
    uint8_t st[TCM_MAX_BATCH];  /* RETURN: each entry's status, TCM_ST_PENDING until it is reached */
} tcm_req_intent_t;
TCM_SHARED_SIZE(tcm_req_intent_t, 4728);
TCM_SHARED_OFFSET(tcm_req_intent_t, phase, 0); TCM_SHARED_OFFSET(tcm_req_intent_t, client, 4);
TCM_SHARED_OFFSET(tcm_req_intent_t, slot, 8); TCM_SHARED_OFFSET(tcm_req_intent_t, req_seq, 12);
TCM_SHARED_OFFSET(tcm_req_intent_t, pos, 16); TCM_SHARED_OFFSET(tcm_req_intent_t, op, 24);
TCM_SHARED_OFFSET(tcm_req_intent_t, cls, 28); TCM_SHARED_OFFSET(tcm_req_intent_t, count, 32);
TCM_SHARED_OFFSET(tcm_req_intent_t, n, 36); TCM_SHARED_OFFSET(tcm_req_intent_t, owner, 40);
TCM_SHARED_OFFSET(tcm_req_intent_t, span, 44); TCM_SHARED_OFFSET(tcm_req_intent_t, first, 48);
TCM_SHARED_OFFSET(tcm_req_intent_t, npages, 52); TCM_SHARED_OFFSET(tcm_req_intent_t, root, 56);
TCM_SHARED_OFFSET(tcm_req_intent_t, holder, 60); TCM_SHARED_OFFSET(tcm_req_intent_t, arg, 64);
TCM_SHARED_OFFSET(tcm_req_intent_t, name, 72); TCM_SHARED_OFFSET(tcm_req_intent_t, offs, 120);
TCM_SHARED_OFFSET(tcm_req_intent_t, st, 4216);

enum tcm_page_intent_kind {
    TCM_PAGES_NONE = 0,
    TCM_PAGES_MAP = 1,   /* free pages become an allocated span */
    TCM_PAGES_UNMAP = 2, /* an allocated span goes back to the page heap */
};

/* The span the heap thread is making or unmaking. W and R as above. */
typedef struct tcm_page_intent {
    _Atomic uint32_t kind; /* enum tcm_page_intent_kind */
    uint32_t span, first, npages;
    union {
        uint32_t owner;    /* LARGE: owner tag */
        uint32_t rec;      /* SMALL: its object record (chosen and backed before the intent) */
    };
    uint8_t state, cls;    /* MAP: span state and class */
    uint16_t reserved;
} tcm_page_intent_t;
TCM_SHARED_SIZE(tcm_page_intent_t, 24);
TCM_SHARED_OFFSET(tcm_page_intent_t, kind, 0); TCM_SHARED_OFFSET(tcm_page_intent_t, span, 4);
TCM_SHARED_OFFSET(tcm_page_intent_t, first, 8); TCM_SHARED_OFFSET(tcm_page_intent_t, npages, 12);
TCM_SHARED_OFFSET(tcm_page_intent_t, owner, 16); TCM_SHARED_OFFSET(tcm_page_intent_t, rec, 16);
TCM_SHARED_OFFSET(tcm_page_intent_t, state, 20); TCM_SHARED_OFFSET(tcm_page_intent_t, cls, 21);
TCM_SHARED_OFFSET(tcm_page_intent_t, reserved, 22);

/* W: tcmd when it creates the segment (geometry, created_unix, uid; magic
 * last, so a segment without it is one whose creation never finished), a
 * recovering tcmd (adoptions), the heap thread (top, intents, stats), the
 * main thread (next_client_id). */
/* A memory quota (docs/DESIGN.md, "Memory quotas"): what the processes of
 * uid (of uid named name, when name is not empty) may hold of the heap.
 * Authoritative: an adopted heap keeps its quotas. W: tcmd's main thread,
 * under state.quota_seq, fields first and limit last (0: a free entry). R:
 * the heap thread, which takes a copy when quota_seq moves. */
typedef struct tcm_quota_rule {
    _Atomic uint64_t limit;
    uint32_t uid;
    uint32_t reserved;
    char name[16]; /* a process's short name (comm), NUL-terminated */
} tcm_quota_rule_t;
TCM_SHARED_SIZE(tcm_quota_rule_t, 32);
TCM_SHARED_OFFSET(tcm_quota_rule_t, limit, 0); TCM_SHARED_OFFSET(tcm_quota_rule_t, uid, 8);
TCM_SHARED_OFFSET(tcm_quota_rule_t, reserved, 12); TCM_SHARED_OFFSET(tcm_quota_rule_t, name, 16);

typedef struct tcm_state_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t page_shift;
    uint64_t base;
    uint64_t heap_size;
    uint32_t npages;
    uint32_t max_threads;    /* channel geometry depends on it */
    uint32_t uid;            /* owner of every segment of this heap */
    uint32_t next_client_id; /* main thread */
    uint64_t size;
    uint64_t off_clients;    /* tcm_client_rec_t[TCM_CLIENTS_MAX], the first max_clients in use */
    uint64_t off_arenas;     /* the object-record arenas, one per class (tcm__state_layout) */
    uint64_t off_holders;    /* tcm_holder_t[TCM_HOLDER_GROUPS + TCM_HOLDERS], backed a page at a time,
                                after uint16_t remap[TCM_TAGS] (a merging tag's group tag, 0 none) */
    uint64_t created_unix;   /* birth of the heap */
    uint64_t adoptions;      /* times a tcmd adopted it */
    _Atomic uint32_t top;    /* heap thread: pages [top, npages) were never handed out */
    uint32_t max_clients;    /* records it may use (the setting of the tcmd that made it) */
    /* The heap's history, for the operator (tcmctl stats, the adoption
     * log line). W: tcmd's main thread, at creation and adoption. */
    uint32_t born_version;   /* state version it was created with (14: 14 or an older one) */
    uint32_t reserved3;      /* zero (the migrations are version - born_version) */
    char served_by[16];      /* version of the last tcmd that created or adopted it; empty: 0.2.0 or older */
    alignas(TCM_CACHELINE) tcm_page_intent_t page;
    alignas(TCM_CACHELINE) tcm_req_intent_t req;
    alignas(TCM_CACHELINE) tcm_class_stats_t cstats[TCM_NCLASSES];
    tcm_daemon_stats_t dstats;
    /* W: main thread (tcmctl quota): odd while a rule is being written */
    _Atomic uint32_t quota_seq;
    uint32_t reserved2;
    tcm_quota_rule_t quotas[TCM_QUOTA_RULES];
} tcm_state_hdr_t;
TCM_SHARED_SIZE(tcm_state_hdr_t, 10432);
TCM_SHARED_OFFSET(tcm_state_hdr_t, magic, 0); TCM_SHARED_OFFSET(tcm_state_hdr_t, version, 8);
TCM_SHARED_OFFSET(tcm_state_hdr_t, page_shift, 12); TCM_SHARED_OFFSET(tcm_state_hdr_t, base, 16);
TCM_SHARED_OFFSET(tcm_state_hdr_t, heap_size, 24); TCM_SHARED_OFFSET(tcm_state_hdr_t, npages, 32);
TCM_SHARED_OFFSET(tcm_state_hdr_t, max_threads, 36); TCM_SHARED_OFFSET(tcm_state_hdr_t, uid, 40);
TCM_SHARED_OFFSET(tcm_state_hdr_t, next_client_id, 44); TCM_SHARED_OFFSET(tcm_state_hdr_t, size, 48);
TCM_SHARED_OFFSET(tcm_state_hdr_t, off_clients, 56); TCM_SHARED_OFFSET(tcm_state_hdr_t, off_arenas, 64);
TCM_SHARED_OFFSET(tcm_state_hdr_t, off_holders, 72); TCM_SHARED_OFFSET(tcm_state_hdr_t, created_unix, 80);
TCM_SHARED_OFFSET(tcm_state_hdr_t, adoptions, 88); TCM_SHARED_OFFSET(tcm_state_hdr_t, top, 96);
TCM_SHARED_OFFSET(tcm_state_hdr_t, max_clients, 100); TCM_SHARED_OFFSET(tcm_state_hdr_t, born_version, 104);
TCM_SHARED_OFFSET(tcm_state_hdr_t, reserved3, 108); TCM_SHARED_OFFSET(tcm_state_hdr_t, served_by, 112);
TCM_SHARED_OFFSET(tcm_state_hdr_t, page, 128);
TCM_SHARED_OFFSET(tcm_state_hdr_t, req, 192); TCM_SHARED_OFFSET(tcm_state_hdr_t, cstats, 4928);
TCM_SHARED_OFFSET(tcm_state_hdr_t, dstats, 8032);
TCM_SHARED_OFFSET(tcm_state_hdr_t, quota_seq, 8344); TCM_SHARED_OFFSET(tcm_state_hdr_t, quotas, 8352);

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
    X(NO_ROOM, "root table full")                                             \
    X(EXISTS, "root exists")                                                  \
    X(CHANGED, "root does not hold the pointer expected")                     \
    X(ROOT_SHARE, "the user holds its share of roots (roots_per_uid)")        \
    X(NOT_HOLDER, "root is another user's")

enum tcm_status {
#define TCM_STATUS_ENUM(name, msg) TCM_ST_##name,
    TCM_STATUS_MAP(TCM_STATUS_ENUM)
#undef TCM_STATUS_ENUM
    TCM_ST__COUNT
};
_Static_assert(TCM_ST__COUNT <= 16, "tcm_daemon_stats_t.refused has 16 entries");

/* An answer to a well-formed request, not a refusal of a bad one (not
 * counted, not logged): the heap is full, or a root's table, name,
 * expected pointer, share or holder says no. */
static inline bool tcm__status_is_answer(int st)
{
    return st == TCM_ST_NOMEM || st == TCM_ST_NO_ROOM || st == TCM_ST_EXISTS || st == TCM_ST_CHANGED ||
           st == TCM_ST_ROOT_SHARE || st == TCM_ST_NOT_HOLDER;
}

const char *tcm__status_name(int status);
const char *tcm__status_msg(int status);

/* ---- size classes ---- */

extern const uint8_t tcm__class_lut[65]; /* (size + 15) >> 4 for size <= 1024 */
/* (size + 127) >> 7 for 1024 < size <= TCM_MAX_SMALL: every class boundary
 * above 1 KiB is a multiple of 128, so one load replaces the clz formula
 * (the malloc hit path at 4 KiB: 60 -> 55 instructions per pair). */
extern const uint8_t tcm__class_lut_big[(TCM_MAX_SMALL >> 7) + 1];

static inline unsigned tcm__size_class(size_t size) /* size <= TCM_MAX_SMALL */
{
    if (size <= 1024)
        return tcm__class_lut[(size + 15) >> 4];
    return tcm__class_lut_big[(size + 127) >> 7];
}

uint32_t tcm__class_size(unsigned cls);
void tcm__class_table_init(tcm_class_info_t tab[TCM_NCLASSES]);
/* Each class's batch at most `bytes` of objects (4 to TCM_MAX_BATCH), below
 * the default's TCM_BATCH_BYTES: the drop-in's private heap, where a
 * refill is a call, not a round trip to tcmd. */
void tcm__class_batches(tcm_class_info_t tab[TCM_NCLASSES], uint32_t bytes);

/* The size class of a page-class byte, draining or not; 0 for a free page
 * or a page run. */
static inline unsigned tcm__page_small_class(unsigned pc)
{
    if (pc > TCM_PAGE_CLASS_DRAIN && pc < TCM_PAGE_CLASS_DRAIN + TCM_NCLASSES)
        return pc - TCM_PAGE_CLASS_DRAIN;
    return pc < TCM_NCLASSES ? pc : 0;
}

/* Objects of a class a thread gathers from draining spans before it hands
 * them back in one RETURN: 16 KiB, at most 64; 0 for a class whose span is
 * one object (never drained: it is full or free). */
static inline uint32_t tcm__drain_cap(const tcm_class_info_t *ci)
{
    if (ci->span_objs < 2)
        return 0;
    uint32_t n = (16u << 10) / ci->size;
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

/* Channel geometry, computed the same way by daemon and client. */
typedef struct tcm_chan_layout {
    uint32_t nslots, ring_cap, max_threads;
    uint64_t off_ring, off_slots, off_tcaches, tcache_stride, off_xfer, size;
    uint32_t bin_objs_off[TCM_NCLASSES];
    uint32_t xfer_objs_off[TCM_NCLASSES];
    /* each tcache's drain arrays (tcm__drain_cap objects of class c at
     * drain_objs_off[c]), together in [drain_off, drain_off + drain_bytes) */
    uint32_t drain_objs_off[TCM_NCLASSES];
    uint32_t drain_off, drain_bytes;
    /* a private heap's only (0 in tcmd's channels): each tcache's first
     * arrays, TCM_FIRST_BIN entries a class, where a bin starts before it
     * moves to its own (client/tcache.c, bin_backed) */
    uint32_t first_off;
} tcm_chan_layout_t;

/* Entries of a private heap's bin before it moves to its own array: the
 * first arrays of 16 classes share a page, where each class's own array
 * takes a page of a thread for a bin of a few objects. */
#define TCM_FIRST_BIN 32u

/* served_inline: the channel of the drop-in's private heap, whose every
 * request is served by the thread that posts it before the post returns
 * (client/local.c): about one waits in the ring per thread cache (and the
 * spare), so its ring has a cell for each of those rather than one for
 * every slot (the cells are all written when the ring is made, and are the
 * process's own memory; client/channel.c's post serves a full one). */
void tcm__chan_layout(tcm_chan_layout_t *l, const tcm_class_info_t tab[TCM_NCLASSES],
                      uint32_t max_threads, bool served_inline);
/* Thread cache t's offset in the channel. */
static inline uint64_t tcm__tcache_off(const tcm_chan_layout_t *l, uint32_t t)
{
    return l->off_tcaches + (uint64_t)t * l->tcache_stride;
}

/* Slot j (< TCM_ASYNC_SLOTS) of thread cache t: for the requests that
 * thread posts and does not wait for at once. */
static inline uint32_t tcm__async_slot(const tcm_chan_layout_t *l, uint32_t t, uint32_t j)
{
    return l->max_threads + 1 + t * TCM_ASYNC_SLOTS + j;
}

/* The other way: false for a thread's own slot or the spare. */
static inline bool tcm__async_slot_of(const tcm_chan_layout_t *l, uint32_t i, uint32_t *t, uint32_t *j)
{
    if (i <= l->max_threads)
        return false;
    *t = (i - l->max_threads - 1) / TCM_ASYNC_SLOTS;
    *j = (i - l->max_threads - 1) % TCM_ASYNC_SLOTS;
    return true;
}

/* Metadata geometry for a heap of npages pages. */
typedef struct tcm_meta_layout {
    uint64_t off_classes, off_page_class, off_page_span, off_spans, off_roots, size;
} tcm_meta_layout_t;

void tcm__meta_layout(tcm_meta_layout_t *l, uint32_t npages, uint32_t nroots);

/* State-segment geometry for a heap of npages pages. */
typedef struct tcm_state_layout {
    uint64_t off_clients, off_remap, off_holders, off_arenas, size;
    uint64_t off_arena[TCM_NCLASSES];  /* class c's arena of object records */
    uint32_t rec_bytes[TCM_NCLASSES]; /* one record: a span's object bits, then an owner word per 64 objects */
    uint32_t owners_off[TCM_NCLASSES]; /* where the owner words start in a record */
    uint32_t max_recs[TCM_NCLASSES];  /* spans of class c the heap could hold at once */
    uint64_t off_tag_blocks;           /* the arena of tag blocks (TCM_TAG_BLOCK bytes each) */
    uint32_t max_tag_blocks;
    uint32_t reserved;
    /* The huge-range hint (16), the last part: a bit per huge range, 1
     * when tcmd collapsed it into a large page and has punched nothing
     * inside it since. W: heap thread, set after the collapse, cleared
     * before a punch; so a kill leaves a bit clear where it may be set,
     * never the reverse (a range the next tcmd does not know for huge is
     * at worst split by its decay). Layout 15 ended where it begins. */
    uint64_t off_huge;
    /* The heap profile (17), after the hint: a tcm_profile_hdr_t page,
     * tcm_sample_t[TCM_SAMPLES], then tcm_sample_proc_t[TCM_SAMPLE_PROCS];
     * backed a page at a time as they are used. Layout 16 ended where
     * off_profile begins. */
    uint64_t off_profile, off_samples, off_sample_procs;
} tcm_state_layout_t;

/* How much of the heap profile's tables was ever used: a reader (the
 * recovery, the main thread's profile) goes no further, so it never faults
 * in their holes. W: the heap thread, raised before the entry past it is
 * written. Backed with the hint. */
typedef struct tcm_profile_hdr {
    _Atomic uint32_t samples_hw, procs_hw;
    uint32_t reserved[14];
} tcm_profile_hdr_t;
TCM_SHARED_SIZE(tcm_profile_hdr_t, 64);
TCM_SHARED_OFFSET(tcm_profile_hdr_t, samples_hw, 0); TCM_SHARED_OFFSET(tcm_profile_hdr_t, procs_hw, 4);

/* One sampled allocation of the heap profile (docs/DESIGN.md, "Heap
 * profiles"): a page run of its own, whose span names it (tcm_span_t.sample).
 * W: the heap thread: fields, then state (release); the span after it. A
 * free of the run clears the span, then the state. R: the heap thread; the
 * main thread's profile (state, fields, state again: a sample freed and
 * taken again under it is skipped); a recovering tcmd keeps a live sample
 * only where its run is still a page run, and points the span at it. */
typedef struct tcm_sample {
    _Atomic uint32_t state;  /* 0 free; else live, the sample's generation (odd) */
    uint32_t proc;           /* its process's record (tcm_sample_proc_t) */
    uint64_t run;            /* heap offset of its page run */
    uint64_t size;           /* bytes asked for */
    uint64_t interval;       /* the mean interval it was sampled at, bytes (its weight's) */
    uint32_t born_unix;      /* when (seconds) */
    uint16_t nframes;
    uint16_t reserved;
    uint64_t frames[TCM_SAMPLE_FRAMES]; /* return addresses, innermost first, as the process saw them */
} tcm_sample_t;
TCM_SHARED_SIZE(tcm_sample_t, 256);
TCM_SHARED_OFFSET(tcm_sample_t, state, 0); TCM_SHARED_OFFSET(tcm_sample_t, proc, 4);
TCM_SHARED_OFFSET(tcm_sample_t, run, 8); TCM_SHARED_OFFSET(tcm_sample_t, size, 16);
TCM_SHARED_OFFSET(tcm_sample_t, interval, 24); TCM_SHARED_OFFSET(tcm_sample_t, born_unix, 32);
TCM_SHARED_OFFSET(tcm_sample_t, nframes, 36); TCM_SHARED_OFFSET(tcm_sample_t, frames, 40);

/* The process a heap-profile sample names: who it was, and its code
 * mappings as it sent them (TCM_OP_MAPS: lines of "start limit offset bias
 * build_id path", hex, bounded; path "*": the exe field), so a profile
 * symbolizes each process's addresses in its own files. Two copies of the text: a new one is written
 * into the other, then current flips (release), so a kill leaves one
 * whole. W: the heap thread (made with its first sample or text, departed
 * when the client goes, freed when it is departed and no sample names it:
 * fields first, state last). R: the heap thread; the main thread's profile
 * (state before and after). Recovery frees a record no live sample names
 * unless its client is still attached. */
#define TCM_SAMPLE_MAPS_BYTES 4028u
enum tcm_sample_proc_state {
    TCM_SPROC_FREE = 0,
    TCM_SPROC_LIVE = 1,     /* its client is attached */
    TCM_SPROC_DEPARTED = 2, /* gone; kept while samples name it */
};
typedef struct tcm_sample_proc {
    _Atomic uint32_t state;  /* enum tcm_sample_proc_state */
    uint32_t client_id;      /* the client record's id while LIVE */
    uint32_t pid, uid;
    uint64_t proc_start;     /* with pid, which process (tcm_client_rec_t.proc_start) */
    uint64_t attached_unix, departed_unix;
    _Atomic uint32_t maps_cur; /* which text is whole */
    uint32_t maps_len[2];
    uint32_t maps_fill;      /* bytes of the other text received so far */
    char comm[16];
    char exe[TCM_EXE_MAX];
    char maps[2][TCM_SAMPLE_MAPS_BYTES];
} tcm_sample_proc_t;
TCM_SHARED_SIZE(tcm_sample_proc_t, 8192);
TCM_SHARED_OFFSET(tcm_sample_proc_t, state, 0); TCM_SHARED_OFFSET(tcm_sample_proc_t, client_id, 4);
TCM_SHARED_OFFSET(tcm_sample_proc_t, pid, 8); TCM_SHARED_OFFSET(tcm_sample_proc_t, uid, 12);
TCM_SHARED_OFFSET(tcm_sample_proc_t, proc_start, 16); TCM_SHARED_OFFSET(tcm_sample_proc_t, attached_unix, 24);
TCM_SHARED_OFFSET(tcm_sample_proc_t, departed_unix, 32); TCM_SHARED_OFFSET(tcm_sample_proc_t, maps_cur, 40);
TCM_SHARED_OFFSET(tcm_sample_proc_t, maps_len, 44); TCM_SHARED_OFFSET(tcm_sample_proc_t, maps_fill, 52);
TCM_SHARED_OFFSET(tcm_sample_proc_t, comm, 56); TCM_SHARED_OFFSET(tcm_sample_proc_t, exe, 72);
TCM_SHARED_OFFSET(tcm_sample_proc_t, maps, 136);

/* The owner word of 64 objects of a span (one word of its object bits):
 * either the owner tag of all of them (below TCM_OWNER_BLOCK), or
 * TCM_OWNER_BLOCK | i: their 64 tags are in tag block i, for words whose
 * objects were handed to more than one client. */
#define TCM_OWNER_BLOCK 0x80000000u
#define TCM_TAG_BLOCK (64u * sizeof(uint16_t))
_Static_assert(TCM_TAG_BLOCK == 128, "a tag block is in the state segment: bump TCM_STATE_VERSION");

void tcm__state_layout(tcm_state_layout_t *l, uint32_t npages);

#endif
