/* decay.c — memory comes back by itself: what the heap thread (and a
 * drop-in's private heap, client/local.c) gives back to the OS when the
 * page heap is quiet, when its free pages outgrow the spans, and what a
 * decay window did not reuse. */
#define _GNU_SOURCE
#include "decay.h"

#include "central.h"
#include "log.h"
#include "pageheap.h"
#include "prim.h"

#define DECAY_AMOUNT_MIN (1u << 20)   /* free backed pages below this wait for the decay window */
#define DECAY_AMOUNT_SHARE 32u        /* ... and so do free backed pages up to this share of the spans */
#define DECAY_AMOUNT_STEPS 160u       /* decay_ms / this: how often the amount is checked (62 ms by default) */

/* Bytes of the heap backed by memory: the tmpfs object's blocks; a private
 * heap's resident pages are not known here, so its spans and the free
 * pages the page heap knows committed stand for them. */
static int64_t backed_bytes(tcm_server_t *srv)
{
    if (!srv->h.anon)
        return tcm__backed_bytes(srv->heap_fd);
    return (int64_t)(atomic_load_explicit(&srv->meta->stats.bytes_spans, memory_order_relaxed) +
                     srv->h.free_committed_pages * TCM_PAGE_SIZE);
}

/* Punch free runs until at most keep_bytes of free committed pages are
 * left (0: every free page); returns what the segment's blocks dropped by,
 * measured, not estimated. */
uint64_t tcm__release_measured_ht(tcm_server_t *srv, uint64_t keep_bytes)
{
    int64_t before = backed_bytes(srv);
    tcm__ph_release_ht(&srv->h, keep_bytes);
    int64_t after = backed_bytes(srv);
    uint64_t released = before > after ? (uint64_t)(before - after) : 0;
    TCM_STAT_ADD(srv->meta, bytes_released, released);
    return released;
}

/* Every free page, the empty spans a recovery found among them. */
uint64_t tcm__release_all_ht(tcm_server_t *srv)
{
    tcm__central_drop_empty_ht(&srv->h); /* spans to the page heap, still committed */
    return tcm__release_measured_ht(srv, 0);
}

/* Memory comes back by itself: a page heap nobody has cut from or freed to
 * for decay_ms gives back the free pages it keeps committed (up to
 * page_cache_cap) and any empty span, once per quiet
 * spell. */
void tcm__decay_ht(tcm_server_t *srv, uint64_t now)
{
    uint64_t decay_ns = atomic_load_explicit(&srv->meta->config.decay_ms, memory_order_relaxed) * 1000000ull;
    tcm_heap_t *h = &srv->h;
    if (!decay_ns || now - h->last_change_ns < decay_ns || srv->decayed_at == h->last_change_ns)
        return;
    srv->decayed_at = h->last_change_ns;
    uint64_t released = tcm__release_all_ht(srv);
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
    int64_t backed = backed_bytes(srv);
    uint64_t spans = atomic_load_explicit(&srv->meta->stats.bytes_spans, memory_order_relaxed);
    uint64_t free_backed = backed > 0 && (uint64_t)backed > spans ? (uint64_t)backed - spans : 0;
    if (free_backed <= spans / DECAY_AMOUNT_SHARE || free_backed < DECAY_AMOUNT_MIN)
        return;
    uint64_t released = tcm__release_measured_ht(srv, 0);
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
void tcm__decay_window_ht(tcm_server_t *srv, uint64_t now)
{
    uint64_t decay_ns = atomic_load_explicit(&srv->meta->config.decay_ms, memory_order_relaxed) * 1000000ull;
    tcm_heap_t *h = &srv->h;
    if (!decay_ns)
        return;
    decay_step(srv, now, decay_ns);
    if (now - h->window_ns < decay_ns)
        return;
    uint64_t unused = h->cache_low_pages < h->free_committed_pages ? h->cache_low_pages : h->free_committed_pages;
    uint64_t released = unused ? tcm__release_measured_ht(srv, (h->free_committed_pages - unused) * TCM_PAGE_SIZE) : 0;
    if (released) {
        TCM_STAT_ADD(srv->meta, decays, 1);
        tcm__log(TCM_LOG_DEBUG, "decay: %llu bytes of the page cache unused for %llu ms given back",
                 (unsigned long long)released, (unsigned long long)(decay_ns / 1000000));
    }
    h->cache_low_pages = h->free_committed_pages;
    h->window_ns = now;
}

