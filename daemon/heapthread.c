/* heapthread.c — the heap thread's loop: serve every client's ring, reclaim
 * the caches of clients that went away, run the main thread's commands
 * (release, resize, check) and sleep on the doorbell when there is nothing
 * to do. The only writer of the page heap, the central lists, the page map
 * and the object map. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <time.h>

#include "central.h"
#include "heapthread.h"
#include "holders.h"
#include "log.h"
#include "mailbox.h"
#include "pageheap.h"
#include "prim.h"
#include "reclaim.h"
#include "requests.h"
#include "ring.h"
#include "server.h"
#include "tcm_assert.h"
#include "validate.h"

#define EXPENSIVE_CHECK_EVERY 4096u /* requests between whole-heap validations (assert level 3) */
#define DECAY_AMOUNT_MIN (1u << 20)   /* free backed pages below this wait for the decay window */
#define DECAY_AMOUNT_SHARE 32u        /* ... and so do free backed pages up to this share of the spans */
#define DECAY_AMOUNT_STEPS 160u       /* decay_ms / this: how often the amount is checked (62 ms by default) */

/* Punch free runs until at most keep_bytes of free committed pages are
 * left (0: every free page); returns what the segment's blocks dropped by,
 * measured, not estimated. */
static uint64_t release_measured(tcm_server_t *srv, uint64_t keep_bytes)
{
    int64_t before = tcm__backed_bytes(srv->heap_fd);
    tcm__ph_release_ht(&srv->h, keep_bytes);
    int64_t after = tcm__backed_bytes(srv->heap_fd);
    uint64_t released = before > after ? (uint64_t)(before - after) : 0;
    TCM_STAT_ADD(srv->meta, bytes_released, released);
    return released;
}

/* Every free page, the empty spans a recovery found among them. */
static uint64_t release_all(tcm_server_t *srv)
{
    tcm__central_drop_empty_ht(&srv->h); /* spans to the page heap, still committed */
    return release_measured(srv, 0);
}

/* Memory comes back by itself: a page heap nobody has cut from or freed to
 * for decay_ms gives back the free pages it keeps committed (up to
 * page_cache_cap) and any empty span, once per quiet
 * spell. */
static void decay(tcm_server_t *srv, uint64_t now)
{
    uint64_t decay_ns = atomic_load_explicit(&srv->meta->config.decay_ms, memory_order_relaxed) * 1000000ull;
    tcm_heap_t *h = &srv->h;
    if (!decay_ns || now - h->last_change_ns < decay_ns || srv->decayed_at == h->last_change_ns)
        return;
    srv->decayed_at = h->last_change_ns;
    uint64_t released = release_all(srv);
    h->last_change_ns = srv->decayed_at; /* what the release itself freed is not activity */
    TCM_STAT_ADD(srv->meta, decays, 1);
    if (released)
        tcm__log(TCM_LOG_DEBUG, "decay: the page heap was quiet for %llu ms: %llu bytes given back",
                 (unsigned long long)(decay_ns / 1000000), (unsigned long long)released);
}

/* Decay by amount, not only by time: at the end of each step (decay_ms /
 * DECAY_AMOUNT_STEPS), when the free pages the heap segment still backs are
 * more than a 32nd of the bytes in spans, they all go back (an eighth held
 * larson between two processes ~4 MB higher: free pages its caches and
 * emptied spans gave back waited for the window; a step of 250 ms instead
 * of 62, ~1 MB higher on average: what a step gathers is there at a random
 * moment half the time). A heap that
 * shrank (a process freed half of what it held, or its caches gave back
 * spans' worth) does not keep that committed for decay_ms; one that keeps
 * little beside what it uses is left to the window. Measured from the
 * segment's blocks, not summed from the runs' states: after a recovery a
 * released run may hold backed pages. */
static void decay_step(tcm_server_t *srv, uint64_t now, uint64_t decay_ns)
{
    tcm_heap_t *h = &srv->h;
    if (now - h->step_ns < decay_ns / DECAY_AMOUNT_STEPS)
        return;
    h->step_ns = now;
    int64_t backed = tcm__backed_bytes(srv->heap_fd);
    uint64_t spans = atomic_load_explicit(&srv->meta->stats.bytes_spans, memory_order_relaxed);
    uint64_t free_backed = backed > 0 && (uint64_t)backed > spans ? (uint64_t)backed - spans : 0;
    if (free_backed <= spans / DECAY_AMOUNT_SHARE || free_backed < DECAY_AMOUNT_MIN)
        return;
    uint64_t released = release_measured(srv, 0);
    if (released) {
        TCM_STAT_ADD(srv->meta, decays, 1);
        tcm__log(TCM_LOG_DEBUG, "decay: %llu bytes of free pages given back (more than a 32nd of the %llu "
                 "bytes in spans)", (unsigned long long)released, (unsigned long long)spans);
    }
}

/* Busy or not: the free pages that stayed in the page cache through a whole
 * decay_ms window (its low-water mark) were not needed, and go back. A heap
 * that keeps cutting and freeing never has a quiet spell, but what it does
 * not reuse still leaves within two windows. */
static void decay_window(tcm_server_t *srv, uint64_t now)
{
    uint64_t decay_ns = atomic_load_explicit(&srv->meta->config.decay_ms, memory_order_relaxed) * 1000000ull;
    tcm_heap_t *h = &srv->h;
    if (!decay_ns)
        return;
    decay_step(srv, now, decay_ns);
    if (now - h->window_ns < decay_ns)
        return;
    uint64_t unused = h->cache_low_pages < h->free_committed_pages ? h->cache_low_pages : h->free_committed_pages;
    uint64_t released = unused ? release_measured(srv, (h->free_committed_pages - unused) * TCM_PAGE_SIZE) : 0;
    if (released) {
        TCM_STAT_ADD(srv->meta, decays, 1);
        tcm__log(TCM_LOG_DEBUG, "decay: %llu bytes of the page cache unused for %llu ms given back",
                 (unsigned long long)released, (unsigned long long)(decay_ns / 1000000));
    }
    h->cache_low_pages = h->free_committed_pages;
    h->window_ns = now;
}

void tcm__heap_run_command_ht(tcm_server_t *srv)
{
    pthread_mutex_lock(&srv->mbox_lock);
    int cmd = atomic_exchange(&srv->mbox_cmd, TCM_MBOX_NONE);
    if (cmd == TCM_MBOX_NONE) {
        pthread_mutex_unlock(&srv->mbox_lock);
        return;
    }
    uint64_t result = 0;
    if (cmd == TCM_MBOX_RELEASE) {
        result = release_all(srv); /* measured, not estimated: what the tmpfs object stopped using */
    } else if (cmd == TCM_MBOX_RESIZE) {
        /* refuse to cut below the end of the highest page run in use */
        uint64_t end = tcm__ph_in_use_end_ht(&srv->h);
        if (srv->mbox_arg < end) {
            result = end;
        } else {
            uint64_t old = atomic_load(&srv->meta->config.heap_limit);
            atomic_store(&srv->meta->config.heap_limit, srv->mbox_arg);
            if (srv->mbox_arg < old) { /* a smaller heap gives its free pages back */
                tcm__central_drop_empty_ht(&srv->h);
                TCM_STAT_ADD(srv->meta, bytes_released, tcm__ph_release_ht(&srv->h, 0));
            }
        }
    } else if (cmd == TCM_MBOX_CHECK) {
        result = (uint64_t)tcm__validate_ht(srv, srv->mbox_text, sizeof srv->mbox_text);
    }
    srv->mbox_result = result;
    srv->mbox_done = true;
    pthread_mutex_unlock(&srv->mbox_lock);
    uv_async_send(&srv->mbox_async);
}

static void reap(tcm_server_t *srv, uint32_t i, tcm_client_t *c)
{
    tcm__reclaim_ht(srv, c);
    atomic_store_explicit(&c->rec->state, TCM_REC_REAPED, memory_order_release);
    atomic_store_explicit(&srv->clients[i], NULL, memory_order_release);
    pthread_mutex_lock(&srv->reaped_lock);
    c->next_reaped = srv->reaped;
    srv->reaped = c;
    pthread_mutex_unlock(&srv->reaped_lock);
    uv_async_send(&srv->reaped_async);
}

/* One pass over every client; true if anything was done. */
static bool serve_all(tcm_server_t *srv)
{
    bool work = false;
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (!c)
            continue;
        uint32_t state = atomic_load_explicit(&c->rec->state, memory_order_acquire);
        if (state == TCM_REC_ACTIVE || state == TCM_REC_EVICTED) {
            work |= tcm__serve_client_ht(srv, c, state == TCM_REC_EVICTED);
        } else if (state == TCM_REC_DEAD) {
            reap(srv, i, c);
            work = true;
        }
    }
    if (atomic_load_explicit(&srv->mbox_cmd, memory_order_acquire) != TCM_MBOX_NONE) {
        tcm__heap_run_command_ht(srv);
        work = true;
    }
    work |= tcm__holders_step_ht(srv); /* departed holders merged into their groups, a bounded step */
    return work;
}

static bool anything_pending(tcm_server_t *srv)
{
    if (atomic_load(&srv->stop) || atomic_load(&srv->mbox_cmd) != TCM_MBOX_NONE || tcm__holders_pending(srv))
        return true;
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (c && (atomic_load(&c->rec->state) == TCM_REC_DEAD ||
                  tcm__ring_ready(c->ring, c->lay.ring_cap, c->rec->tail)))
            return true;
    }
    return false;
}

/* Assert level 3: the whole heap is checked every few thousand requests. */
static void expensive_check(tcm_server_t *srv, uint64_t *next_check)
{
    uint64_t served = atomic_load_explicit(&srv->meta->stats.requests, memory_order_relaxed);
    if (served < *next_check)
        return;
    *next_check = served + EXPENSIVE_CHECK_EVERY;
    char why[256];
    int rc = tcm__validate_ht(srv, why, sizeof why);
    if (rc == TCM_INVALID_CLIENT) /* what a client wrote into its own memory is no reason to stop */
        tcm__log_limited(TCM_LOG_WARN, "validation after %llu requests: %s", (unsigned long long)served, why);
    if (rc == TCM_INVALID_HEAP) {
        tcm__log(TCM_LOG_ERROR, "heap validation failed after %llu requests: %s", (unsigned long long)served, why);
        tcm__assert_fail("tcm__validate_ht(srv)", __FILE__, __LINE__);
    }
}

/* Every client's round trip waits for this thread: the scheduler must not
 * take it for one more of the clients' threads (with 32 busy ones on 2
 * CPUs it would get a 33rd of them). It sleeps when idle, so a high
 * priority costs nobody else anything then. */
static void take_priority(tcm_server_t *srv)
{
    uint64_t tid = tcm__thread_id();
    atomic_store(&srv->heap_tid, tid);
    int nice = atomic_load(&srv->heap_nice), rc = tcm__thread_set_nice(tid, nice);
    if (rc)
        tcm__log(TCM_LOG_WARN,
                 "heap thread: nice %d refused (%s); it runs at tcmd's priority, and clients wait longer for it "
                 "when the CPUs are busy (give tcmd CAP_SYS_NICE, or set heap_nice 0)",
                 nice, strerror(-rc));
}

static void *heap_thread_main(void *arg)
{
    tcm_server_t *srv = arg;
    take_priority(srv);
    uint64_t idle_since = 0, next_check = 0;
    while (!atomic_load_explicit(&srv->stop, memory_order_acquire)) {
        if (serve_all(srv)) {
            idle_since = 0;
            decay_window(srv, tcm__now_ns());
            if (TCM_EXPENSIVE_CHECKS)
                expensive_check(srv, &next_check);
            continue;
        }
        uint64_t now = tcm__now_ns();
        decay(srv, now);
        decay_window(srv, now);
        if (!idle_since)
            idle_since = now;
        if (now - idle_since < atomic_load_explicit(&srv->spin_ns, memory_order_relaxed)) {
            for (int i = 0; i < 64; i++)
                tcm__cpu_relax();
            continue;
        }
        uint32_t seq = atomic_load_explicit(&srv->bell->seq, memory_order_acquire);
        atomic_store_explicit(&srv->meta->heap_sleeping, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (!anything_pending(srv)) {
            tcm__wait(&srv->bell->seq, seq, 1000000000ll);
            TCM_STAT_ADD(srv->meta, wakeups, 1);
        }
        atomic_store_explicit(&srv->meta->heap_sleeping, 0, memory_order_relaxed);
        idle_since = 0;
    }
    return NULL;
}

void tcm__heap_kick(tcm_server_t *srv)
{
    atomic_thread_fence(memory_order_seq_cst);
    atomic_fetch_add_explicit(&srv->bell->seq, 1, memory_order_relaxed);
    tcm__wake(&srv->bell->seq, 1);
}

int tcm__heap_thread_start(tcm_server_t *srv)
{
    pthread_mutex_init(&srv->mbox_lock, NULL);
    pthread_mutex_init(&srv->reaped_lock, NULL);
    srv->h.last_change_ns = srv->decayed_at = srv->h.window_ns = tcm__now_ns(); /* a quiet spell starts now */
    srv->h.step_ns = srv->h.window_ns;
    srv->h.cache_low_pages = srv->h.free_committed_pages;
    int err = pthread_create(&srv->heap_thread, NULL, heap_thread_main, srv);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "pthread_create(heap thread) failed: %s", strerror(err));
        return -err;
    }
    tcm__thread_name(srv->heap_thread, "tcm-heap");
    srv->heap_thread_started = true;
    return 0;
}

void tcm__heap_thread_stop(tcm_server_t *srv)
{
    if (!srv->heap_thread_started)
        return;
    atomic_store(&srv->stop, true);
    tcm__heap_kick(srv);
    pthread_join(srv->heap_thread, NULL);
    srv->heap_thread_started = false;
}
