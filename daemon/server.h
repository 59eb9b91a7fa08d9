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
#include "quota.h"
#include "shares.h"
#include "tcm_layout.h"
#include "tcm_version.h"

/* Owner tags (holders.c): each live client has one, each departed holder
 * and each executable's group of them one; tag 0 is nobody. A tag is
 * given out again only once it owns nothing. */
#define TCM_TAGS (1u << 16)
_Static_assert(TCM_CLIENTS_MAX + TCM_HOLDERS + 2 * TCM_HOLDER_GROUPS < TCM_TAGS, "tags never run out");
/* Shares of what tcmd has (the settings' help states them; DESIGN, "Fair
 * shares"). Control connections at once: every attached client holds one,
 * tcmctl and attaching processes need some more; past it a connection is
 * refused at once, except root's and tcmd's user's, which have a reserve
 * beyond the total and beyond their per-user share. */
#define TCM_CONNS_PER_CLIENT 4u /* control connections at once: this many per client record */
#define TCM_CONTROL_OPERATOR_RESERVE 32
#define TCM_DEFAULT_MAX_CLIENTS 1024
#define TCM_DEFAULT_CONNS_PER_UID 2048
#define TCM_DEFAULT_CLIENTS_PER_UID 768
#define TCM_DEFAULT_CONN_IDLE_S 60
#define TCM_DEFAULT_ROOTS 1024
#define TCM_DEFAULT_ROOTS_PER_UID 256
_Static_assert(TCM_DEFAULT_CONNS_PER_UID < TCM_CONNS_PER_CLIENT * TCM_DEFAULT_MAX_CLIENTS &&
                   TCM_DEFAULT_CLIENTS_PER_UID < TCM_DEFAULT_MAX_CLIENTS,
               "one user's default share leaves room for the others");
enum tcm_view_kind { TCM_VIEW_STATS, TCM_VIEW_CLIENTS, TCM_VIEW_METRICS, TCM_VIEW_KINDS };
#define TCM_DEFAULT_BASE 0x7e8000000000ull
#define TCM_DEFAULT_HEAP (1ull << 30)

typedef struct tcm_conn tcm_conn_t;

/* An attached client: its persistent record (state segment) plus what this
 * tcmd needs to serve it. Created by the main thread (attach, adoption),
 * served and finally reaped by the heap thread, freed by the main thread. */
typedef struct tcm_server tcm_server_t;

/* An ALLOC_PAGES being committed a step per turn (continuation.c): the
 * run it took, in transit, and the request it is for. Heap thread only;
 * tcmd's own memory, lost with it: a recovery finds the run's pages free
 * and serves the request, still posted, again. */
enum { TCM_CONT_NONE, TCM_CONT_READY, TCM_CONT_NOMEM };
typedef struct tcm_pages_cont {
    uint32_t run;             /* its span record; 0: none */
    uint32_t committed;       /* pages of it backed so far, from its first */
    uint64_t pos;             /* the request: its ring position, slot and number */
    uint32_t slot, req_seq;
    uint64_t npages, align_pages; /* what it asked for, as read at its first step */
    int outcome;              /* TCM_CONT_*: what the last step left op_alloc_pages, within one serve */
} tcm_pages_cont_t;

/* Free pages being given back a bounded step per turn (decay.c): one job
 * at a time, which a later ask joins. Heap thread only; lost with tcmd
 * (the punched pages are what it did). */
typedef struct tcm_release_job {
    bool active;
    bool all;                 /* every free page, released runs too */
    bool answer;              /* a `release` command waits for its end (heapthread.c answers it) */
    bool counted;             /* a decay even if nothing goes back */
    uint64_t keep_bytes;      /* backed free pages it leaves (0: none) */
    uint64_t released;        /* what the segment's blocks dropped by, measured per step */
    const char *why;          /* what started it, for its log line (NULL: an operator's command) */
    bool split;               /* pressure: huge ranges punched into too */
} tcm_release_job_t;

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
    /* who it is, from /proc at attach or adoption, for what it leaves
     * behind (holders.c); "" for a process that ended before a tcmd read it */
    char comm[16];
    char exe[TCM_EXE_MAX];
    uint32_t sample_proc;     /* heap thread: 1 + its heap-profile process record, 0 none yet (samples.c) */
    /* Set by tcmd's SIGBUS handler when the channel was shrunk or punched
     * under it: the mapping now reads zeros, and the client is cut off. */
    _Atomic uint32_t chan_broken;
    tcm_pages_cont_t pages_cont; /* heap thread */
    struct tcm_client *next_reaped;
    uint64_t reaped_after;    /* main thread: views begun when it left the table (clientwatch.c) */
    struct tcm_server *srv;
    /* heap thread: slots known to be backed by tmpfs blocks. A client backs
     * its thread's slot when the thread registers; tcmd touches a slot only
     * once it is backed (committing it itself if need be), so a slot index
     * from the ring can never make it fault on a full /dev/shm. */
    uint64_t slots_backed[(TCM_MAX_THREADS * (1 + TCM_ASYNC_SLOTS) + 1 + 63) / 64];
} tcm_client_t;

/* Is the slot backed? (for loops that only read slots tcmd ever used) */
static inline bool tcm__slot_backed(const tcm_client_t *c, uint32_t index)
{
    return index < c->lay.nslots && (c->slots_backed[index / 64] >> (index % 64) & 1);
}

#define TCM_OP_NAMES(X)                                                                       \
    X(NOP, "nop") X(REFILL, "refill") X(RETURN, "return") X(ALLOC_PAGES, "alloc_pages")        \
    X(FREE_PAGES, "free_pages") X(ROOT_SET, "root_set") X(SAMPLE, "sample") X(MAPS, "maps")

/* The collapser (huge.c): the ranges the heap thread hands it and its
 * answers, under lock; lost with tcmd (a range handed and not answered is
 * in no hint: the next tcmd looks at it again). */
#define TCM_HUGE_QUEUE 64u
typedef struct tcm_huge {
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;                                /* lock */
    uint32_t todo[TCM_HUGE_QUEUE], ntodo;     /* lock: ranges to collapse, oldest first */
    uint32_t done[TCM_HUGE_QUEUE], ndone;     /* lock: ranges answered */
    int done_err[TCM_HUGE_QUEUE];             /* lock: 0 or -errno of each */
    uint32_t in_flight;                       /* heap thread: handed, not answered */
    uint32_t cursor, remap_cursor;            /* heap thread: the next range to look at; to map again */
    uint64_t scan_ns;                         /* heap thread: the last look */
    bool found;                               /* heap thread: it found ranges in use (more looks soon) */
    uint32_t looks;                           /* heap thread: looks at the heap so far (huge_since) */
    _Atomic int off_err;                      /* W: heap thread: errno of why this kernel cannot (0: it can) */
    _Atomic uint64_t busy_ns;                 /* collapser: CPU time spent collapsing, since tcmd started */
} tcm_huge_t;

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
    uint64_t clients_per_uid;   /* live client records one uid may hold */
    uint64_t conns_per_uid;     /* control connections one uid may hold open */
    uint64_t conn_idle_s;       /* a connection that is no client's is closed after this long silent */
    uint64_t max_clients;       /* client records of a new heap (an adopted one keeps its own) */
    uint64_t roots;             /* entries of a new heap's roots table */
    uint64_t roots_per_uid;     /* live roots one uid may hold */
    _Atomic uint64_t uid_quota; /* heap bytes each user may hold but the operator (0: no limit) */
    _Atomic uint64_t huge_collapse_ms; /* collapsing each second may take this long (0: no huge pages) */
    uint64_t profile_sample;  /* bytes per sampled allocation, published in meta (0: none) */
    uint64_t profile_rate;    /* samples a thread takes a second before its intervals grow (0: no limit) */
    uint32_t nroots;            /* entries of this heap's (an adopted one keeps its own) */

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
    bool untimed;             /* the drop-in's private heap: one client serving itself, no turns to share
                                 and no request latency to report, so no clock read a request (each
                                 counts as instant: requests.c, request_clock) */
    pthread_t heap_thread;
    bool heap_thread_started;
    _Atomic bool stop;
    _Atomic uint64_t spin_ns; /* how long the heap thread polls before sleeping */
    _Atomic int heap_nice;    /* its scheduling priority (config heap_nice) */
    _Atomic uint64_t heap_tid; /* 0 until it runs */
    tcm_daemon_stats_t *dstats; /* in the state segment */
    uint64_t decayed_at;      /* heap thread: the quiet spell the last decay was for */
    tcm_release_job_t release_job; /* heap thread */
    tcm_huge_t huge;          /* huge.c */
    uint64_t flush_asked_ns, flush_asked; /* heap thread: the last time the heap was full */
    tcm_quota_t quota;        /* what each user holds, against its quota (quota.c) */
    /* Bytes still allocated under each tag whose client has left (objects
     * and page runs nobody has freed yet; their sum is bytes_orphaned).
     * Written by the heap thread (a reclaim adds what its client still
     * held, a free of such an object subtracts) and by recovery, which
     * rebuilds it from the owner tags; the validator compares it. Read by
     * the main thread when it picks a record's next generation: a departed
     * tag's count only falls, so a zero it reads stays zero. */
    _Atomic uint64_t tag_orphaned[TCM_TAGS];
    /* Who each tag is (holders.c; derived, rebuilt by recovery): tags in
     * use, the client record (index + 1) of a live client's, the holders
     * entry (index + 1) of a departed one's; what a merge rewrites a tag
     * to. holders_lock guards tag_used and the holders table's writes;
     * tag_client is written under it and read by the heap thread without
     * (a tag is set before its client is published). */
    pthread_mutex_t holders_lock;
    uint64_t tag_used[TCM_TAGS / 64];
    uint32_t tag_next;                  /* where the search for a free tag starts */
    _Atomic uint16_t tag_client[TCM_TAGS];
    uint16_t tag_holder[TCM_TAGS];      /* heap thread */
    /* In the state segment; a page of either is read only once it is known
     * backed (a read of a hole in a shared tmpfs mapping allocates it). */
    uint16_t *remap;                    /* a merging tag's group tag (heap thread) */
    tcm_holder_t *holders;              /* TCM_HOLDER_GROUPS groups, then holders */
    uint64_t remap_backed;              /* pages of remap[] backed, bit per 4 KiB */
    uint64_t entries_backed[2];         /* pages of holders[] backed */
    uint64_t tag_merging[TCM_TAGS / 64]; /* heap thread: remap[t] names t's group */
    uint32_t merging;                   /* heap thread: tags being merged */
    uint32_t merge_cursor;              /* heap thread: the page the merge sweep goes on from */
    uint32_t merge_pass;                /* heap thread: sweeps completed */
    uint32_t merge_done_at[TCM_TAGS];   /* heap thread: a merging tag is done when merge_pass gets here */
    uint32_t evict_cursor;              /* heap thread: where the next full-table eviction looks */

    /* clients: entries written by the main thread (attach) and the heap thread
     * (reap), read by both */
    tcm_client_t *_Atomic clients[TCM_CLIENTS_MAX]; /* the first max_clients are used */
    _Atomic uint32_t clients_hw; /* indices below this may be in use */
    pthread_mutex_t reaped_lock;
    tcm_client_t *reaped;        /* reclaimed, waiting for the main thread */
    tcm_client_t *reaped_held;   /* main thread: reaped, kept while a view that may read them runs */
    /* Views made on the thread pool read the clients (stats, clients, the
     * /metrics page): at most one of each kind at a time, numbered as they
     * begin (main thread; clientwatch.c) */
    uint64_t views_begun;
    uint64_t view_running[TCM_VIEW_KINDS]; /* the number of the one of that kind in flight; 0: none */
    struct tcm_conn *view_waiting[TCM_VIEW_KINDS]; /* connections that asked for the next one (handlers.c) */
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
    void (*mbox_wake)(tcm_server_t *srv); /* tells the heap thread a command is posted (tcm__mailbox_start) */

    /* libuv */
    uv_loop_t *loop;
    uv_pipe_t listener;
    const struct tcm_transport_cbs *control_cbs; /* what answers the control connections (transport.c) */
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t liveness;      /* adopted clients not yet resumed: are they alive? */
    uv_timer_t conn_sweep;    /* control peers stuck on unread replies; log windows */
    uint32_t control_conns;   /* open control connections (main thread) */
    uint32_t control_max_conns; /* past it a new one is refused (control.c, after the descriptor limit) */
    tcm_shares_t conn_shares; /* open control connections per uid (main thread) */
    struct tcm_conn *conns;   /* the open control connections, a list (transport.c) */
    uint32_t metrics_conns;   /* open /metrics connections (metrics.c) */
    uv_timer_t metrics_sweep; /* /metrics connections past their time */
    struct tcm_http_conn *metrics_head; /* the open /metrics connections */
    char *metrics_page;       /* the last page rendered, served again for a second */
    size_t metrics_page_len;
    uint64_t metrics_page_ns;
    char *metrics_page_full;  /* the same page with the clients' pids: the operator's (--metrics-socket) */
    size_t metrics_page_full_len;
    char metrics_socket[108]; /* --metrics-socket: "" none */
    uv_pipe_t metrics_pipe;
    uint32_t metrics_socket_conns;
    tcm_shares_t metrics_shares; /* its connections per uid */
    uv_tcp_t metrics;
    char metrics_addr[64];
    int metrics_port; /* 0: no /metrics endpoint */
    uint64_t start_ns;
};

/* The client in srv->clients[i] if it is attached (active, or evicted and
 * still running), else NULL: what the loops over the clients act on. */
static inline tcm_client_t *tcm__client_attached(tcm_server_t *srv, uint32_t i)
{
    tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
    uint32_t state = c ? atomic_load(&c->rec->state) : TCM_REC_FREE;
    return state == TCM_REC_ACTIVE || state == TCM_REC_EVICTED ? c : NULL;
}

#endif
