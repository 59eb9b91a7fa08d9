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

/* What the heap thread gives back in one go: a step of punching is about
 * one user's share of a turn (TCM_UID_TURN_NS), so that a decay or a
 * release of gigabytes is spread over turns and every client is served
 * between two steps (the release of a freed 512 MiB run took ~30 ms in one
 * go). */
#define RELEASE_STEP_NS (250u * 1000u)

void tcm__release_start_ht(tcm_server_t *srv, uint64_t keep_bytes, const char *why, unsigned flags)
{
    tcm_release_job_t *j = &srv->release_job;
    bool all = keep_bytes == 0;
    if (!j->active) {
        *j = (tcm_release_job_t){.active = true, .all = all, .keep_bytes = keep_bytes, .why = why,
                                 .split = (flags & TCM_RELEASE_SPLIT) != 0};
        tcm__ph_release_begin_ht(&srv->h, all);
    } else { /* one job: the more it asks for, the more it does */
        if (all && !j->all)
            tcm__ph_release_begin_ht(&srv->h, true);
        j->all |= all;
        j->keep_bytes = all || keep_bytes < j->keep_bytes ? keep_bytes : j->keep_bytes;
        if (why && !j->why)
            j->why = why;
    }
    j->counted |= (flags & TCM_RELEASE_COUNTED) != 0;
    j->split |= (flags & TCM_RELEASE_SPLIT) != 0;
    if (flags & TCM_RELEASE_ANSWER) { /* what it answers is what went back from now on */
        j->answer = true;
        j->released = 0;
    }
    /* a private heap has no other client to wait for it */
    while (srv->h.anon && tcm__release_step_ht(srv))
        ;
}

bool tcm__release_step_ht(tcm_server_t *srv)
{
    tcm_release_job_t *j = &srv->release_job;
    if (!j->active)
        return false;
    /* measured, not estimated: what the segment's blocks dropped by over
     * the step, in which nothing else backs or punches anything */
    int64_t before = backed_bytes(srv);
    bool more = tcm__ph_release_step_ht(&srv->h, j->keep_bytes, j->split, RELEASE_STEP_NS);
    int64_t after = backed_bytes(srv);
    uint64_t released = before > after ? (uint64_t)(before - after) : 0;
    TCM_STAT_ADD(srv->meta, bytes_released, released);
    j->released += released;
    if (more)
        return true;
    j->active = false;
    if (j->why && (j->released || j->counted))
        TCM_STAT_ADD(srv->meta, decays, 1);
    if (j->why && j->released)
        tcm__log(TCM_LOG_DEBUG, "decay: %llu bytes given back (%s)", (unsigned long long)j->released, j->why);
    return true;
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
    tcm__central_drop_empty_ht(h); /* spans to the page heap, still committed */
    h->last_change_ns = srv->decayed_at; /* what the release itself freed is not activity */
    tcm__release_start_ht(srv, 0, "the page heap was quiet for decay_ms", TCM_RELEASE_COUNTED);
}

/* What the program would reuse of the page cache: the most pages of long
 * runs (large allocations: a class's spans are short, and counting them
 * held larson's steady memory ~10% higher) one step's cuts took, backed
 * or not, over this decay window and the one before. The decay by amount
 * keeps that much: a run size the program allocates within the window
 * stays (given back, its pages would be faulted in again at once: a
 * program that replaces blocks of several MiB in a loop ran 6-9x slower;
 * counting only the cuts that found backed pages never learned, since a
 * punch at every step left none), and what the program stops allocating
 * leaves within two windows, by the low-water mark if not by amount, or
 * at once when the heap goes quiet. */
static uint64_t reuse_reserve(const tcm_heap_t *h)
{
    uint64_t peak = h->reuse_peak[0] > h->reuse_peak[1] ? h->reuse_peak[0] : h->reuse_peak[1];
    return peak * TCM_PAGE_SIZE;
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
    uint64_t cut = h->long_cut_pages - h->cut_at_step;
    h->cut_at_step = h->long_cut_pages;
    if (cut > h->reuse_peak[0])
        h->reuse_peak[0] = cut;
    uint64_t reserve = reuse_reserve(h);
    int64_t backed = backed_bytes(srv);
    uint64_t spans = atomic_load_explicit(&srv->meta->stats.bytes_spans, memory_order_relaxed);
    uint64_t free_backed = backed > 0 && (uint64_t)backed > spans ? (uint64_t)backed - spans : 0;
    bool many = free_backed > spans / DECAY_AMOUNT_SHARE && free_backed >= DECAY_AMOUNT_MIN && free_backed > reserve;
    /* Too many free pages, counting those in huge ranges: the ranges a
     * quarter free all through the step are not in use any more (kept
     * whole, larson between two processes held ~22% more committed, the
     * free pages of ranges that never empty); the free pages still in
     * huge ranges stay */
    if (many)
        tcm__ph_huge_sparse_ht(h);
    tcm__ph_huge_step_ht(h);
    uint64_t kept = h->huge_free_pages * TCM_PAGE_SIZE;
    free_backed = free_backed > kept ? free_backed - kept : 0;
    if (!many || free_backed <= spans / DECAY_AMOUNT_SHARE || free_backed < DECAY_AMOUNT_MIN || free_backed <= reserve)
        return;
    tcm__release_start_ht(srv, reserve, "free pages were more than a 32nd of the bytes in spans", 0);
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
    uint64_t cache = h->free_committed_pages - h->huge_free_pages; /* what the decay may punch */
    uint64_t unused = h->cache_low_pages < cache ? h->cache_low_pages : cache;
    if (unused)
        tcm__release_start_ht(srv, (cache - unused) * TCM_PAGE_SIZE,
                              "the page cache's low-water mark over a decay window", 0);
    h->cache_low_pages = cache;
    h->window_ns = now;
    h->reuse_peak[1] = h->reuse_peak[0];
    h->reuse_peak[0] = 0;
}

