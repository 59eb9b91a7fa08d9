/* local.c — the drop-in's private heap (libtcm-malloc.so only; docs/DESIGN.md,
 * "The drop-in"). What a program allocates with malloc no other process
 * can reach, so it lives in the process's own memory: tcm's page heap and
 * central lists (daemon/) laid out in private anonymous mappings, served in
 * the process itself. A thread that posts a request on the channel takes
 * serve_lock and runs the heap thread's code on it before tcm__post
 * returns; the background thread, once the heap has grown, runs the decay.
 * Everything above (thread caches, transfer tier) is libtcm's, unchanged;
 * it has no page-run cache (configure).
 * Exit gives it all back with the process's memory, and fork is the
 * kernel's copy-on-write: the child's copy is its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "background.h"
#include "client.h"
#include "decay.h"
#include "diag.h"
#include "heap.h"
#include "holders.h"
#include "lifecycle.h"
#include "local.h"
#include "log.h"
#include "prim.h"
#include "requests.h"
#include "ring.h"
#include "segments.h"
#include "server.h"
#include "util.h"

/* Address space a private heap reserves (TCM_MALLOC_HEAP_SIZE overrides):
 * backed only as used; past it, allocations come from the system malloc. */
#define LOCAL_HEAP_DEFAULT (64ull << 30)
#define LOCAL_ROOTS 256u             /* the process's own roots (its tcm_root_* through the drop-in's copies) */
#define LOCAL_ALIGN (2ull << 20)    /* where the heap starts: a huge page may back its first span */
/* A class's batch here, in bytes of objects (tcmd's: TCM_BATCH_BYTES). A
 * refill is a call under serve_lock, not a wake of tcmd, so a batch need
 * not amortise one; what a thread's bins hold beyond what its program
 * uses is up to the last batch of each class. Smaller batches cost
 * threads that come and go their refills (docs/BENCHMARKS.md, "Real
 * programs under the drop-in"). */
#define LOCAL_BATCH_BYTES (64u << 10)

/* The background thread (background.c: the decay's ticks, the transfer
 * tier's trim) starts once the page heap's top passes this: a program
 * whose heap stays smaller (most programs a script runs) pays for no
 * thread, whose start and exit were half of what the drop-in added to
 * such a program (docs/BENCHMARKS.md, "Real programs under the drop-in"),
 * and keeps at most this much that a thread would have given back. A fork
 * child's starts at its first request if the parent's heap had passed it. */
#define BG_AFTER_BYTES (4u << 20)

static tcm_server_t *srv;           /* the heap thread's view, in the process's memory */
static tcm_client_t client;         /* the one client: this process */
static pthread_mutex_t serve_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool bg_tried;       /* this process started its background thread once (or failed to) */
static uint32_t local_threads;      /* thread caches: tcmd's default max_threads */

static void serve(void)
{
    pthread_mutex_lock(&serve_lock);
    tcm__serve_client_ht(srv, &client, false);
    tcm__decay_window_ht(srv, tcm__now_ns());
    bool big = (uint64_t)srv->h.top << TCM_PAGE_SHIFT >= BG_AFTER_BYTES;
    pthread_mutex_unlock(&serve_lock);
    /* once: a process that cannot make a thread would otherwise try at
     * every request */
    if (tcm_unlikely(big && !atomic_load_explicit(&bg_tried, memory_order_relaxed)) &&
        pthread_mutex_trylock(&tcm__proc.attach_lock) == 0) {
        if (!atomic_exchange(&bg_tried, true) && !tcm__proc.bg_running)
            tcm__bg_start();
        pthread_mutex_unlock(&tcm__proc.attach_lock);
    }
}

static void tick(uint64_t now)
{
    pthread_mutex_lock(&serve_lock);
    tcm__decay_ht(srv, now);
    tcm__decay_window_ht(srv, now);
    pthread_mutex_unlock(&serve_lock);
}

/* Nothing is half-served at the fork (fork.c takes the caches' locks
 * first: a thread may post while it holds one). */
static void fork_prepare(void)
{
    pthread_mutex_lock(&serve_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&serve_lock);
}

static void fork_child(void)
{
    pthread_mutex_unlock(&serve_lock);
    atomic_store(&bg_tried, false); /* the parent's thread is not the child's */
}

static uint64_t setting(const char *text)
{
    uint64_t v = 0;
    tcm__parse_size(text, &v);
    return v;
}

/* tcmd's defaults, as a tcmd would publish them */
static void configure(tcm_meta_hdr_t *m, uint64_t heap_size)
{
    atomic_store(&m->config.heap_limit, heap_size);
    atomic_store(&m->config.tcache_budget, setting(TCM_DEFAULT_TCACHE_BUDGET));
    atomic_store(&m->config.xfer_budget, setting(TCM_DEFAULT_XFER_BUDGET));
    /* no page-run cache: the page heap is in the process, and what it
     * reuses it keeps (decay.c, reuse_reserve); a cache beside it held a
     * second copy (malloc_large: 680-770 MB against 530-560 with 0, 8M or
     * 32M between; bench/preload/large.c: 0.13 s against 0.25 s, in 142
     * MB against 80: bench/results/LOG.md) */
    atomic_store(&m->config.run_cache, 0);
    atomic_store(&m->config.page_cache_cap, setting(TCM_DEFAULT_PAGE_CACHE_CAP));
    atomic_store(&m->config.decay_ms, setting(TCM_DEFAULT_DECAY_MS));
    atomic_store(&m->config.gen, 1);
}

static void *reserve_aligned(uint64_t size, uint64_t align)
{
    uint8_t *p = tcm__reserve(size + align);
    if (!p)
        return NULL;
    uint8_t *start = (uint8_t *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (start > p)
        tcm__unmap(p, (uint64_t)(start - p));
    if (start + size < p + size + align)
        tcm__unmap(start + size, (uint64_t)(p + size + align - (start + size)));
    return start;
}

/* The process's client record and channel, as tcmd makes them at attach. */
static int make_client(void)
{
    tcm_client_t *c = &client;
    tcm_client_rec_t *rec = (tcm_client_rec_t *)((uint8_t *)srv->state + srv->h.sl.off_clients);
    rec->id = 1;
    rec->pid = tcm__pid();
    if (tcm__tag_take(srv, 0, &rec->tag) != 0)
        return -ENOMEM;
    c->rec = rec;
    c->index = 0;
    c->chan_fd = c->proc = -1;
    c->lay = srv->chan_layout;
    c->chan = tcm__reserve(c->lay.size);
    if (!c->chan)
        return -ENOMEM;
    c->ring = (tcm_ring_t *)(c->chan + c->lay.off_ring);
    c->slots = (tcm_slot_t *)(c->chan + c->lay.off_slots);
    memset(c->slots_backed, 0xff, sizeof c->slots_backed); /* private memory: backed when touched */
    tcm__channel_init(c);
    atomic_store(&rec->state, TCM_REC_ACTIVE);
    atomic_store(&srv->clients[0], c);
    atomic_store(&srv->clients_hw, 1);
    return 0;
}

/* Lay the heap out and attach this process to it; under attach_lock. */
static int attach_local(void)
{
    uint64_t size = LOCAL_HEAP_DEFAULT;
    const char *env = tcm__env("TCM_MALLOC_HEAP_SIZE");
    /* within what the layout indexes: page numbers are 32-bit */
    if (env && *env &&
        (tcm__parse_size(env, &size) != 0 || size < (4u << 20) || size > (uint64_t)UINT32_MAX << TCM_PAGE_SHIFT))
        size = LOCAL_HEAP_DEFAULT;
    local_threads = (uint32_t)setting(TCM_DEFAULT_MAX_THREADS);
    size &= ~(uint64_t)(TCM_PAGE_SIZE - 1);
    uint32_t npages = (uint32_t)(size >> TCM_PAGE_SHIFT);
    tcm_meta_layout_t ml;
    tcm_state_layout_t sl;
    tcm__meta_layout(&ml, npages, LOCAL_ROOTS);
    tcm__state_layout(&sl, npages);
    uint8_t *heap = reserve_aligned(size, LOCAL_ALIGN);
    srv = tcm__reserve(sizeof *srv);
    tcm_meta_hdr_t *meta = tcm__reserve(ml.size);
    tcm_state_hdr_t *state = tcm__reserve(sl.size);
    if (!heap || !srv || !meta || !state) {
        fprintf(stderr, "tcm-malloc: cannot reserve a private heap of %llu MiB%s\n", (unsigned long long)(size >> 20),
                tcm__attach_failed_note ? tcm__attach_failed_note : "");
        return -ENOMEM;
    }
    tcm__log_set_level(TCM_LOG_ERROR); /* a refusal is the client's fatal error, said once, there */
    srv->heap_size = size;
    srv->base = (uintptr_t)heap;
    srv->max_threads = local_threads;
    srv->nroots = LOCAL_ROOTS;
    srv->roots_per_uid = LOCAL_ROOTS;
    srv->heap = heap;
    srv->meta = meta;
    srv->state = state;
    srv->heap_fd = srv->meta_fd = srv->state_fd = -1;
    if (tcm__heap_attach(&srv->h, meta, state, LOCAL_ROOTS, -1, -1, -1, size, (uintptr_t)heap, local_threads, true) != 0)
        return -ENOMEM;
    srv->h.anon = heap;
    tcm__class_batches(srv->h.classes, LOCAL_BATCH_BYTES);
    srv->dstats = &state->dstats;
    srv->untimed = true;
    meta->magic = TCM_META_MAGIC;
    state->magic = TCM_STATE_MAGIC;
    configure(meta, size);
    tcm__chan_layout(&srv->chan_layout, srv->h.classes, local_threads, true);
    tcm__holders_init(srv, true);
    int err = make_client();
    if (err)
        return err;
    tcm__at_fork(fork_prepare, fork_parent, fork_child); /* before libtcm's: see fork_prepare */
    tcm__note("private heap at %p (%llu MiB of address space)", (void *)heap, (unsigned long long)(size >> 20));
    return tcm__attach_private(heap, size, meta, ml.size, client.chan, local_threads, serve, tick);
}

void tcm__local_use(void)
{
    tcm__attach_first = attach_local;
}
