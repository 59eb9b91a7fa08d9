/* client.h — libtcm's private state: the process's attachment to the daemon
 * and each thread's cache. The hot path reads only the three hot globals and
 * the thread's tcache pointer. */
#ifndef TCM_CLIENT_H
#define TCM_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "prim.h"
#include "tcm_compiler.h"
#include "tcm_layout.h"

#ifdef _WIN32 /* PE has no symbol visibility or TLS models */
#define TCM_HIDDEN
#define TCM_TLS __thread
#else
#define TCM_HIDDEN __attribute__((visibility("hidden")))
#define TCM_TLS __thread __attribute__((tls_model("initial-exec")))
#endif
#define tcm_likely(x) __builtin_expect(!!(x), 1)
#define tcm_unlikely(x) __builtin_expect(!!(x), 0)

/* Hot globals: written under the attach lock, read racily by the hot path
 * (relaxed loads are plain moves). heap_bytes/granules are 0 until
 * attached, which sends every free to the slow path. */
extern TCM_HIDDEN _Atomic uintptr_t tcm__heap_base;
extern TCM_HIDDEN _Atomic uint64_t tcm__heap_bytes;
extern TCM_HIDDEN _Atomic uint64_t tcm__heap_granules; /* heap_bytes >> 4 */
extern TCM_HIDDEN const uint8_t *_Atomic tcm__page_class;

/* The calling thread's cache; &tcm__empty_tcache (every bin count 0 and
 * max 0) until the thread registers, so the hot path needs no NULL test
 * (and in the drop-in while the thread runs the library's own code:
 * tcm__hot_cache_set). */
/* With the heap profile's countdown beside it (one TLS block: the hit path
 * reaches both from one address): the bytes this thread may still allocate
 * before the one it samples (profile.c; the hit path subtracts each
 * malloc's size, a slow path samples once it is below 0). */
typedef struct tcm_tls_hot {
    tcm_tcache_t *tc;
    int64_t sample_left;
} tcm_tls_hot_t;
extern TCM_HIDDEN TCM_TLS tcm_tls_hot_t tcm__hot;
/* Non-zero while this thread runs the library's own code that may call
 * malloc (its background thread, a thread's exit, the exit handler, the
 * drop-in's slow paths): libtcm-malloc.so serves those from the system
 * malloc, so the library never re-enters itself. Entered and left through
 * tcm__library_enter/leave (below). */
extern TCM_HIDDEN TCM_TLS unsigned tcm__in_library;
extern TCM_HIDDEN tcm_tcache_t tcm__empty_tcache;

typedef struct tcm_thread {
    tcm_tcache_t *tc;            /* in the channel */
    uint32_t index;              /* tcache index == slot index */
    uint64_t capacity;           /* sum over bins of max * size */
    uint64_t budget;             /* bytes this thread may cache */
    uint64_t config_gen;
    uint32_t flush_seen;         /* chan_hdr.flush_gen last acted on */
    uint32_t epoch;              /* tcm__proc.epoch when registered */
    uint32_t refill[TCM_NCLASSES]; /* slow start: objects fetched per miss */
    uint8_t daemon_streak[TCM_NCLASSES]; /* refills in a row from tcmd (to 2): then it fetches ahead */
    uint8_t borrowed[TCM_NCLASSES]; /* misses served from a larger class's bin since the last scavenge */
    uint32_t async_next;         /* the async slot to try first */
    /* scavenging (tcache.c): what a bin kept unused through an interval goes back */
    uint32_t slow_calls;         /* slow-path entries since the clock was last read */
    uint64_t scavenge_ns;        /* when the next scavenge is due (0: not yet set) */
    uint64_t event_ns[TCM_NCLASSES]; /* when each bin last missed or overflowed */
    uint32_t low[TCM_NCLASSES];  /* fewest objects each bin is known to have held since the last
                                    scavenge (0 once it missed; UINT32_MAX: never missed) */
    /* a private heap's rooms (tcache.c, "a bin's room on a private heap"): the byte clock (what the
     * thread allocated: clock_base before the countdown was last set to clock_from, and what it
     * counted down since), its reading at each bin's last miss or overflow (shifted up one, the
     * low bit set for a miss; 0: none) and the half sweeps in a row each class made (at
     * SWEEPS_LIFT its room is not capped) */
    uint64_t clock_base;
    int64_t clock_from;
    uint64_t turn_clock[TCM_NCLASSES];
    uint8_t sweeps[TCM_NCLASSES];
    /* the heap profile (profile.c): tcm__hot.sample_left counts down from an
     * interval drawn around sample_mean once armed; sample_base is the
     * profile_sample it follows (sample_mean rises above it while samples
     * come too fast); sample_ns, when the last sample was taken;
     * sample_drawn, the interval counted down since; sample_ahead, the
     * async slot of the run or runs asked for ahead of its next small
     * samples (0: none); sample_owed, the bytes allocated since the last sample by a
     * thread whose small sample's run was not there yet, which the
     * allocation at the end of a shorter countdown (sample_retry, its
     * interval, drawn around sample_retry_mean) samples instead (0: none
     * owed; tcache.c, "a sample waits for nobody") */
    bool sample_armed;
    uint32_t sample_ahead;
    uint64_t sample_owed, sample_retry, sample_retry_mean;
    uint8_t quiet_posted; /* bit j: its async slot j holds a request posted without ringing (tcmd is
                             rung before that one is waited for) */
    uint64_t sample_base, sample_mean, sample_ns, sample_drawn;
    uint64_t sample_rng;
} tcm_thread_t;

/* Set the heap profile's countdown, the byte clock kept in step: every
 * store to sample_left but the countdown's own subtracts (the hit path's,
 * sample_due's) and a forgotten thread's (whose record goes) is this one. */
static inline void tcm__countdown_set(tcm_thread_t *thr, int64_t left)
{
    thr->clock_base += (uint64_t)thr->clock_from - (uint64_t)tcm__hot.sample_left; /* (past 0: wraps, in unsigned) */
    thr->clock_from = left;
    tcm__hot.sample_left = left;
}

/* The calling thread's record, for the slow paths: NULL until tcache.c
 * registers the thread, and again once it has no cache (a shutdown, a fork
 * child, thread exit). */
extern TCM_HIDDEN TCM_TLS tcm_thread_t *tcm__tls_thread;

/* The calling thread has no cache any more: its hot path sees the empty one
 * (tcache.c, and fork.c in a child). Its record is the caller's to free. */
static inline void tcm__thread_forget(void)
{
    tcm__hot.tc = &tcm__empty_tcache;
    tcm__hot.sample_left = 0;
    tcm__tls_thread = NULL;
}

/* The cache the calling thread's hot path uses: its own, or in the
 * drop-in, while it runs the library's code, the empty one. So the
 * drop-in's malloc needs no test of its own for the library's allocations:
 * they miss, and its slow path sends them to the system malloc (and frees
 * of heap blocks there take the slow path's). libtcm's hot path serves the
 * application alone, whatever tcm__in_library says. */
static inline void tcm__hot_cache_set(void)
{
#ifdef TCM_DROPIN
    if (tcm__in_library) {
        tcm__hot.tc = &tcm__empty_tcache;
        return;
    }
#endif
    tcm__hot.tc = tcm__tls_thread ? tcm__tls_thread->tc : &tcm__empty_tcache;
}

static inline void tcm__library_enter(void)
{
    if (tcm__in_library++ == 0)
        tcm__hot_cache_set();
}

static inline void tcm__library_leave(void)
{
    if (--tcm__in_library == 0)
        tcm__hot_cache_set();
}

/* What this process keeps of each thread cache in its channel, whichever
 * thread holds it: its pages stay backed for the channel's life, so a
 * thread that takes over an exited one's cache backs nothing again. */
typedef struct tcm_cache_rec {
    bool used;                     /* a thread holds it (under tcache_lock) */
    bool header_backed;            /* its header, slot and async slots */
    bool drain_backed;             /* its drain arrays (lay.drain_off) */
    uint32_t backed[TCM_NCLASSES]; /* entries of each bin's object array known to be backed by tmpfs */
} tcm_cache_rec_t;

typedef struct tcm_proc {
    pthread_mutex_t attach_lock;
    pthread_mutex_t conn_lock;  /* one thread at a time reconnects; taken inside attach_lock, never around it */
    _Atomic bool attached;
    uint32_t epoch;             /* bumped by tcm_shutdown and in a fork child */
    /* read by every thread's slow path, written by the one that reconnects */
    _Atomic bool daemon_lost;   /* tcmd went away and did not come back in time: allocation fails */
    _Atomic uint64_t lost_retry_ns;      /* when a call may try to resume again after daemon_lost */
    _Atomic uint64_t outage_deadline_ns; /* while tcmd is away: when to give up waiting (0: not away) */
    _Atomic uint32_t conn_gen;  /* bumped by each successful resume */
    uint32_t pid;
    /* The control connection: the only descriptor libtcm keeps (the
     * segments' are closed once mapped). The application may close it, or
     * close it and reuse the number, at any instant: sock_id says which
     * socket it was, and every use checks it first (tcm__own_sock). tcmd
     * judges us alive by our process, not by this socket: a lost one is
     * replaced by a resume as the same client. */
    _Atomic int sock;
    tcm_file_id_t sock_id;
    uint32_t client_id;
    uint64_t token;             /* what a resume presents */
    /* the client this process was until it detached (tcm_shutdown): a new
     * Hello names it, so that tcmd ends it even before the Bye arrives */
    uint32_t left_client_id;
    uint64_t left_token;
    uint32_t left_pid;
    uint64_t heap_id;           /* of the heap mapped now */
    char socket_path[108];

    /* segments */
    uint8_t *heap;
    uint64_t heap_size;
    char heap_name[96];
    const tcm_meta_hdr_t *meta;
    uint64_t meta_size;
    const tcm_class_info_t *classes;
    const uint32_t *page_span;
    const tcm_span_t *spans;
    const tcm_root_t *roots;
    tcm_bell_t *bell;
    uint8_t *chan;
    tcm_chan_hdr_t *chan_hdr;
    tcm_chan_layout_t lay;
    tcm_ring_t *ring;
    tcm_slot_t *slots;

    /* thread caches and the transfer tier */
    pthread_key_t thread_key;
    pthread_mutex_t tcache_lock;
    tcm_cache_rec_t *caches;    /* [lay.max_threads] */
    _Atomic uint32_t nthreads;
    /* In a fork child: the forking thread's record (fork.c), freed at the
     * next registration (tcache.c), not in the fork handler. */
    _Atomic(tcm_thread_t *) forked_thread;
    pthread_mutex_t spare_lock; /* the spare slot, for threads without a cache */
    pthread_mutex_t xfer_lock[TCM_NCLASSES];
    uint32_t xfer_backed[TCM_NCLASSES]; /* under xfer_lock: entries of the tier's arrays backed by tmpfs */
    _Atomic uint64_t xfer_bytes;
    _Atomic bool xfer_used;     /* a thread took from or gave to the transfer tier or the page-run
                                   cache since the background thread last looked */
    pthread_mutex_t large_lock; /* the page-run cache in chan_hdr (large.c), under run_cache */
    _Atomic uint64_t large_bytes;
    _Atomic uint32_t sample_stock; /* how many runs the process's last stock asked for (tcache.c) */
    /* the same table's sizes and offsets, private and dense (the first
     * chan_hdr->large_count are valid): what the searches read */
    uint32_t large_np[TCM_LARGE_CACHE];
    uint64_t large_off[TCM_LARGE_CACHE];
    /* Heap pages (TCM_PAGE_SIZE) this process has mapped in one call
     * (tcm__map_given): a bit per page, set racily by any thread. A bit
     * may outlive its mapping (tcmd punched the page out since): that page
     * then faults in as it would have anyway. NULL: no map (a private heap,
     * which maps nothing ahead, or calloc failed). */
    _Atomic uint64_t *mapped;
    /* the heap profile: the mean a thread's last sample set as it kept to
     * profile_rate (profile.c), where a new thread starts */
    _Atomic uint64_t sample_pace;

    /* A private heap (the drop-in's, client/local.c), laid out and served
     * in this process: serve() answers what was just posted on the ring,
     * before tcm__post returns; tick() is its decay, from the background
     * thread. NULL: tcmd serves the ring. */
    void (*serve)(void);
    void (*tick)(uint64_t now_ns);

    /* the background thread (background.c) */
    pthread_t bg_thread;
    _Atomic bool bg_running;   /* written under attach_lock, read by exiting threads */
    _Atomic bool bg_stop;
} tcm_proc_t;

extern TCM_HIDDEN tcm_proc_t tcm__proc;

/* realloc keeps a block of old usable bytes while size fits and does not
 * leave it mostly empty (tcm_realloc and the drop-in's realloc). */
static inline bool tcm__realloc_keeps(size_t old, size_t size)
{
    return size <= old && (size > old / 2 || old <= 16);
}

#endif
