/* server.h — the daemon: one struct with every piece of state, in sections
 * by owner. The heap thread owns the heap; the main thread runs the libuv
 * loop (control socket, signals) and owns the client table's allocation. */
#ifndef TCM_SERVER_H
#define TCM_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "heap.h"
#include "tcm_layout.h"
#include "tcm_version.h"

/* An owner tag is a client's record index plus a generation of that index,
 * so objects of a departed client are not credited to the next one there:
 * a record is never given a generation whose tag still owns something
 * (tag_orphaned below), so generations may wrap. */
#define TCM_TAG_INDEX_BITS 10u
#define TCM_TAG_GENS 63u /* generations 1..63; tag 0 is nobody */
#define TCM_TAGS (1u << 16)
_Static_assert((TCM_TAG_GENS << TCM_TAG_INDEX_BITS | (TCM_MAX_CLIENTS - 1)) < TCM_TAGS, "a tag fits 16 bits");
_Static_assert(TCM_MAX_CLIENTS == 1u << TCM_TAG_INDEX_BITS, "tags index the client records");
#define TCM_DEFAULT_BASE 0x7e8000000000ull
#define TCM_DEFAULT_HEAP (1ull << 30)

typedef struct tcm_conn tcm_conn_t;

/* An attached client: its persistent record (state segment) plus what this
 * tcmd needs to serve it. Created by the main thread (attach, adoption),
 * served and finally reaped by the heap thread, freed by the main thread. */
typedef struct tcm_server tcm_server_t;
typedef struct tcm_client {
    tcm_client_rec_t *rec;    /* in the state segment */
    uint32_t index;           /* of rec, and in server.clients */
    tcm_handle_t chan_fd;
    uint8_t *chan;            /* the daemon's mapping of the channel */
    tcm_chan_layout_t lay;    /* private copy: the channel header is untrusted */
    tcm_ring_t *ring;
    tcm_slot_t *slots;
    tcm_conn_t *conn;         /* main thread: its control connection; NULL between adoption and resume,
                                 and while a living process has lost its connection */
    tcm_handle_t proc;        /* a watch on its process (pidfd): its liveness; -1 when it has gone */
    uv_poll_t proc_poll;      /* main thread: proc becomes readable when the process ends */
    bool proc_polled;         /* proc_poll is initialised: close it before freeing */
    bool cut_off;             /* main thread: logged and disconnected for a broken channel */
    bool adopted;             /* main thread: taken over from a previous tcmd, not yet resumed */
    int zone;                 /* fault zone of the channel mapping (tcm__fault_zone_add) */
    /* Set by tcmd's SIGBUS handler when the channel was shrunk or punched
     * under it: the mapping now reads zeros, and the client is cut off. */
    _Atomic uint32_t chan_broken;
    struct tcm_client *next_reaped;
    struct tcm_server *srv;
    /* heap thread: slots known to be backed by tmpfs blocks. A client backs
     * its thread's slot when the thread registers; tcmd touches a slot only
     * once it is backed (committing it itself if need be), so a slot index
     * from the ring can never make it fault on a full /dev/shm. */
    uint64_t slots_backed[(TCM_MAX_THREADS * (1 + TCM_ASYNC_SLOTS) + 1 + 63) / 64];
} tcm_client_t;

/* The slot, or NULL when it cannot be backed (index out of range, /dev/shm
 * full). Heap thread (and recovery). */
tcm_slot_t *tcm__client_slot(tcm_client_t *c, uint32_t index);
/* Ask the client's process to give back what it caches (its background
 * thread empties the transfer tier and page-run cache, then stores the
 * returned generation in flush_ack; its threads empty their bins at their
 * next slow path). Any thread of tcmd. */
uint32_t tcm__client_ask_flush(tcm_client_t *c);
/* Is the slot backed? (for loops that only read slots tcmd ever used) */
static inline bool tcm__slot_backed(const tcm_client_t *c, uint32_t index)
{
    return index < c->lay.nslots && (c->slots_backed[index / 64] >> (index % 64) & 1);
}

enum tcm_mbox_cmd {
    TCM_MBOX_NONE = 0, TCM_MBOX_RELEASE = 1, TCM_MBOX_RESIZE = 2, TCM_MBOX_NOP = 3, TCM_MBOX_CHECK = 4,
};

#define TCM_OP_NAMES(X)                                                                       \
    X(NOP, "nop") X(REFILL, "refill") X(RETURN, "return") X(ALLOC_PAGES, "alloc_pages")        \
    X(FREE_PAGES, "free_pages") X(ROOT_SET, "root_set")

struct tcm_server {
    /* settings, fixed after start */
    char socket_path[108];
    char name[64];
    char log_path[256];
    uint64_t heap_size;
    uint64_t base;
    uint32_t max_threads;
    bool foreground;
    char config_path[256];

    /* runtime settings (config.c); published to the metadata segment */
    uint64_t heap_limit;
    uint64_t tcache_budget;
    uint64_t xfer_budget;
    uint64_t run_cache;
    uint64_t page_cache_cap;
    uint64_t reconnect_timeout; /* seconds */
    uint64_t decay_ms;

    bool discard_heap;        /* --discard-heap: replace segments left by a previous tcmd */
    bool allow_group_set;     /* --allow-group: its members may attach too */
    tcm_gid_t allow_group;
    uint32_t explicit_settings; /* bit per config.c setting given on the command line or file */

    /* segments */
    char heap_name[96], meta_name[96], state_name[96], lock_name[96];
    tcm_handle_t heap_fd, meta_fd, state_fd, lock_fd;
    uint8_t *heap;
    tcm_meta_hdr_t *meta;
    uint64_t meta_size;
    tcm_state_hdr_t *state;
    uint64_t state_size;
    bool adopted;             /* this tcmd took over segments of a previous one */
    bool keep_segments;       /* at exit: clients are attached, leave the heap to the next tcmd */
    tcm_bell_t *bell;
    tcm_chan_layout_t chan_layout;
    _Atomic uint32_t heap_truncated; /* SIGBUS handler: a client truncated the heap segment */
    bool heap_truncated_told;        /* main thread: logged */

    /* heap thread */
    tcm_heap_t h;
    pthread_t heap_thread;
    bool heap_thread_started;
    _Atomic bool stop;
    _Atomic uint64_t spin_ns; /* how long the heap thread polls before sleeping */
    _Atomic int heap_nice;    /* its scheduling priority (config heap_nice) */
    _Atomic uint64_t heap_tid; /* 0 until it runs */
    tcm_daemon_stats_t *dstats; /* in the state segment */
    uint64_t decayed_at;      /* heap thread: the quiet spell the last decay was for */
    uint64_t flush_asked_ns, flush_asked; /* heap thread: the last time the heap was full */
    /* Bytes still allocated under each tag whose client has left (objects
     * and page runs nobody has freed yet; their sum is bytes_orphaned).
     * Written by the heap thread (a reclaim adds what its client still
     * held, a free of such an object subtracts) and by recovery, which
     * rebuilds it from the owner tags; the validator compares it. Read by
     * the main thread when it picks a record's next generation: a departed
     * tag's count only falls, so a zero it reads stays zero. */
    _Atomic uint64_t tag_orphaned[TCM_TAGS];

    /* clients: slots written by the main thread (attach) and the heap thread
     * (reap), read by both */
    tcm_client_t *_Atomic clients[TCM_MAX_CLIENTS];
    _Atomic uint32_t clients_hw; /* indices below this may be in use */
    pthread_mutex_t reaped_lock;
    tcm_client_t *reaped;        /* reclaimed, waiting for the main thread */
    uv_async_t reaped_async;

    /* main thread -> heap thread commands (mailbox.c): the main loop queues
     * them and posts one at a time; the heap thread runs it and answers
     * through mbox_async, so the loop never waits on the heap thread */
    pthread_mutex_t mbox_lock;
    _Atomic int mbox_cmd;
    uint64_t mbox_arg;
    uint64_t mbox_result;
    char mbox_text[256];      /* CHECK: the first inconsistency found */
    bool mbox_done;
    struct tcm_mbox_job *mbox_head, *mbox_tail; /* main thread; the head is posted */
    uv_async_t mbox_async;
    uv_timer_t mbox_timer;    /* deadlines of queued jobs */
    bool mbox_closed;         /* shutting down: commands are refused */

    /* libuv */
    uv_loop_t *loop;
    uv_pipe_t listener;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t liveness;      /* adopted clients not yet resumed: are they alive? */
    uv_timer_t conn_sweep;    /* control peers stuck on unread replies; log windows */
    uint32_t control_conns;   /* open control connections (main thread) */
    uint32_t control_max_conns; /* past it a new one is refused (control.c, after the descriptor limit) */
    uint32_t metrics_conns;   /* open /metrics connections (metrics.c) */
    uv_timer_t metrics_sweep; /* /metrics connections past their time */
    struct tcm_http_conn *metrics_head; /* the open /metrics connections */
    char *metrics_page;       /* the last page rendered, served again for a second */
    size_t metrics_page_len;
    uint64_t metrics_page_ns;
    uv_tcp_t metrics;
    char metrics_addr[64];
    int metrics_port; /* 0: no /metrics endpoint */
    uint64_t start_ns;
};

/* segments.c */
int tcm__segments_open(tcm_server_t *srv);     /* create, or adopt what a previous tcmd left */
void tcm__segments_close(tcm_server_t *srv);   /* unlinks them unless keep_segments */
/* A new client for process pid (the kernel's, from SO_PEERCRED): -ESRCH
 * when that process has already gone, -EMFILE when the table is full. */
int tcm__client_create(tcm_server_t *srv, tcm_pid_t pid, tcm_uid_t uid, tcm_client_t **out);
int tcm__client_map(tcm_server_t *srv, uint32_t index, tcm_client_t **out); /* an adopted record */
void tcm__client_destroy(tcm_server_t *srv, tcm_client_t *c);              /* unlinks, frees the record */
void tcm__client_unmap(tcm_server_t *srv, tcm_client_t *c);                /* keeps both */
bool tcm__client_alive(tcm_client_t *c); /* its process is still running (any thread) */

/* recovery.c: make an adopted heap consistent before any thread runs */
int tcm__recover(tcm_server_t *srv);

/* requests.c: one ring request, served or redone. A turn serves at most
 * TCM_PER_CLIENT_BURST requests of one ring before the next ring. */
#define TCM_PER_CLIENT_BURST 64u
bool tcm__serve_client_ht(tcm_server_t *srv, tcm_client_t *c, bool frees_only);
void tcm__resolve_intent_ht(tcm_server_t *srv, uint64_t *redone, uint64_t *rolled_back);
void tcm__credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes);
/* Free objects a dead client cached (quietly: refusals are expected);
 * returns how many were freed. */
uint32_t tcm__free_objects_ht(tcm_server_t *srv, tcm_client_t *c, unsigned cls, const uint64_t *offs, uint32_t n);

/* reclaim.c: the caches of a client that went away */
void tcm__reclaim_ht(tcm_server_t *srv, tcm_client_t *c);

/* One cache a client's channel lists: reclaim, the validator and the stats
 * all walk a channel with tcm__each_cache. The channel is client memory,
 * read here without touching tcmd's mapping of it (tcm__read_at): a client
 * that claims a thousand threads or full bins costs tcmd reads of holes,
 * which allocate nothing and never fault. Counts are clamped to their
 * arrays' capacity; entries are unchecked. tc, objs and runs point to
 * private copies, valid during the visit; count_off and objs_off say where
 * the client keeps them (the validator reads a suspect entry again). */
typedef struct tcm_cache_view {
    enum { TCM_CACHE_THREAD, TCM_CACHE_BIN, TCM_CACHE_XFER, TCM_CACHE_RUNS } kind;
    uint32_t thread;               /* THREAD and BIN: the thread cache's index */
    const tcm_tcache_t *tc;        /* THREAD and BIN: the thread's cache header and bins */
    unsigned cls;                  /* BIN and XFER */
    void *const *objs;             /* BIN and XFER: n objects */
    const tcm_large_entry_t *runs; /* RUNS: n page runs */
    uint64_t count_off, objs_off;  /* channel offsets of n and of the array */
    uint32_t n;
} tcm_cache_view_t;

/* Calls visit for each thread (THREAD), then its non-empty bins, then the
 * non-empty arrays of the transfer tier, then the page-run cache; stops and
 * returns false when visit does (or it cannot allocate its buffers). */
bool tcm__each_cache(const tcm_server_t *srv, const tcm_client_t *c,
                     bool (*visit)(void *arg, const tcm_cache_view_t *v), void *arg);
/* Read client memory of the channel at off, without faulting (holes and a
 * shrunk channel read as zeros). */
void tcm__chan_read(const tcm_client_t *c, uint64_t off, void *buf, uint64_t len);
uint32_t tcm__chan_u32(const tcm_client_t *c, uint64_t off);

/* validate.c: the whole-heap validator. TCM_VALID, or the first
 * inconsistency in why: of tcmd's own structures (TCM_INVALID_HEAP, a bug
 * or a corrupt segment), or of a client's caches listing something it may
 * not hold (TCM_INVALID_CLIENT: a tcmd bug, or a client that wrote garbage
 * there, which costs only that client). Bounded in time whatever clients
 * write (validate.c). */
enum { TCM_VALID = 0, TCM_INVALID_HEAP = 1, TCM_INVALID_CLIENT = 2 };
int tcm__validate_ht(tcm_server_t *srv, char *why, size_t whylen);

/* heapthread.c: the heap thread */
int tcm__heap_thread_start(tcm_server_t *srv);
void tcm__heap_thread_stop(tcm_server_t *srv);
void tcm__heap_kick(tcm_server_t *srv);
void tcm__heap_run_command_ht(tcm_server_t *srv); /* the posted mailbox command, if any */

/* mailbox.c: commands for the heap thread, from the main loop. done runs on
 * the main loop once the heap thread has run cmd (rc 0, its result and, for
 * CHECK, its text), or when timeout_ms (< 0: none) passed first
 * (-ETIMEDOUT), or at shutdown (-ECANCELED); exactly once. */
typedef void (*tcm_mbox_done_t)(tcm_server_t *srv, void *arg, int rc, uint64_t result, const char *text);
void tcm__mailbox_post(tcm_server_t *srv, int cmd, uint64_t arg, int timeout_ms, tcm_mbox_done_t done, void *ctx);
/* The same, posted once ready(srv, ctx) holds or after wait_ms (release
 * waits for the processes' flushes this way). */
void tcm__mailbox_post_when(tcm_server_t *srv, int cmd, uint64_t arg, int timeout_ms,
                            bool (*ready)(tcm_server_t *srv, void *ctx), int wait_ms, tcm_mbox_done_t done, void *ctx);
void tcm__mailbox_start(tcm_server_t *srv);
void tcm__mailbox_cancel(tcm_server_t *srv); /* after the heap thread stopped */

/* control.c: the libuv side */
int tcm__control_start(tcm_server_t *srv);
/* Main thread: watch the process of a new or adopted client (its end marks
 * it DEAD); mark a client whose process ended or that detached DEAD. */
void tcm__client_watch(tcm_server_t *srv, tcm_client_t *c);
void tcm__client_gone(tcm_server_t *srv, tcm_client_t *c);
void tcm__control_close(tcm_server_t *srv);

#endif
