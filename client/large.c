/* large.c — the process's cache of page runs: a large allocation that finds
 * a cached run of its size (up to 1/2 larger) takes it without a daemon
 * round trip, and a freed run stays cached while run_cache allows. The
 * table lives in the channel (tcmd reclaims it if the process dies,
 * checking every entry) under a process-local lock. Runs freed here are
 * handed out again only here: another process gets a run only from tcmd,
 * after tcmd's own checks. */
#define _GNU_SOURCE
#include <errno.h>

#include "channel.h"
#include "client.h"
#include "diag.h"
#include "large.h"

static uint64_t run_bytes(uint32_t npages)
{
    return (uint64_t)npages << TCM_PAGE_SHIFT;
}

/* A cached run of have pages serves npages: it is at most half as large
 * again (one unsigned compare: a smaller run wraps round to a huge
 * difference). Looser than size classes (1/4), because the alternative is
 * not a tighter run but a new one from tcmd, committed whole, while the
 * cached one stays: 64 KiB-4 MiB with 16 live (bench/preload/large.c) made
 * 1 329 requests to tcmd at 1/4, 101 at 1/2, and committed 208 MB against
 * 155 MB. */
static bool run_fits(uint32_t have, uint32_t npages)
{
    return have - npages <= npages / 2;
}

/* The table in the channel is what tcmd reads (a dead process's runs, the
 * validator); large_np and large_off mirror it entry for entry in private,
 * dense arrays, so that a search reads 64 sizes or 64 offsets in a row
 * rather than 64 entries of the shared table. Both change together, under
 * large_lock, always by appending or by moving the last entry into a hole. */
static void put_entry(uint32_t i, uint64_t off, uint32_t npages)
{
    tcm_proc_t *pr = &tcm__proc;
    pr->chan_hdr->large[i] = (tcm_large_entry_t){.off = off, .npages = npages};
    pr->large_np[i] = npages;
    pr->large_off[i] = off;
}

/* Entry i out of the cache, under large_lock: the last one fills its hole.
 * Its offset. */
static uint64_t take_entry(uint32_t i)
{
    tcm_proc_t *pr = &tcm__proc;
    uint32_t n = pr->chan_hdr->large_count;
    uint64_t off = pr->large_off[i];
    atomic_fetch_sub_explicit(&pr->large_bytes, run_bytes(pr->large_np[i]), memory_order_relaxed);
    put_entry(i, pr->large_off[n - 1], pr->large_np[n - 1]);
    pr->chan_hdr->large_count = n - 1;
    atomic_store_explicit(&pr->xfer_used, true, memory_order_relaxed);
    return off;
}

TCM_NOINLINE uint64_t tcm__large_take(uint32_t npages)
{
    tcm_proc_t *pr = &tcm__proc;
    tcm_chan_hdr_t *hdr = pr->chan_hdr;
    pthread_mutex_lock(&pr->large_lock);
    uint32_t best = TCM_LARGE_CACHE, best_np = UINT32_MAX, n = hdr->large_count;
    /* no branch on the sizes: random ones mispredict every other entry */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t have = pr->large_np[i];
        uint32_t take = -(uint32_t)(run_fits(have, npages) & (have < best_np)); /* all ones or 0 */
        best = (i & take) | (best & ~take);
        best_np = (have & take) | (best_np & ~take);
    }
    uint64_t off = best != TCM_LARGE_CACHE ? take_entry(best) : 0;
    pthread_mutex_unlock(&pr->large_lock);
    return off;
}

/* Entry i is a run tcmd marked for a sample (under large_lock). */
static bool marked(const tcm_proc_t *pr, uint32_t i)
{
    const tcm_span_t *sp = &pr->spans[pr->page_span[pr->large_off[i] >> TCM_PAGE_SHIFT]];
    return pr->large_np[i] == 1 &&
           atomic_load_explicit((const _Atomic uint32_t *)&sp->sample, memory_order_relaxed) == TCM_SAMPLE_AWAITED;
}

TCM_NOINLINE uint64_t tcm__large_marked(void)
{
    tcm_proc_t *pr = &tcm__proc;
    uint64_t off = 0;
    pthread_mutex_lock(&pr->large_lock);
    for (uint32_t i = 0, n = pr->chan_hdr->large_count; i < n && !off; i++)
        if (marked(pr, i))
            off = take_entry(i);
    pthread_mutex_unlock(&pr->large_lock);
    return off;
}

TCM_NOINLINE uint32_t tcm__large_marked_count(void)
{
    tcm_proc_t *pr = &tcm__proc;
    uint32_t k = 0;
    pthread_mutex_lock(&pr->large_lock);
    for (uint32_t i = 0, n = pr->chan_hdr->large_count; i < n; i++)
        k += marked(pr, i);
    pthread_mutex_unlock(&pr->large_lock);
    return k;
}

/* How many more runs of npages the cache keeps: its entries and
 * run_cache (under large_lock). */
static uint32_t room(const tcm_proc_t *pr, uint32_t npages)
{
    uint64_t budget = atomic_load_explicit(&pr->meta->config.run_cache, memory_order_relaxed),
             used = atomic_load_explicit(&pr->large_bytes, memory_order_relaxed),
             runs = budget > used ? (budget - used) / run_bytes(npages) : 0,
             entries = TCM_LARGE_CACHE - pr->chan_hdr->large_count;
    return (uint32_t)(runs < entries ? runs : entries);
}

TCM_NOINLINE uint32_t tcm__large_room(uint32_t npages)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_lock(&pr->large_lock);
    uint32_t k = room(pr, npages);
    pthread_mutex_unlock(&pr->large_lock);
    return k;
}

TCM_NOINLINE bool tcm__large_keep(uint64_t off, uint32_t npages)
{
    tcm_proc_t *pr = &tcm__proc;
    tcm_chan_hdr_t *hdr = pr->chan_hdr;
    pthread_mutex_lock(&pr->large_lock);
    uint32_t n = hdr->large_count;
    bool twice = false;
    for (uint32_t i = 0; i < n; i++)
        twice |= pr->large_off[i] == off;
    if (twice) {
        pthread_mutex_unlock(&pr->large_lock);
        tcm__fatal("tcm_free(): double free of page run %p", (void *)(pr->heap + off));
    }
    bool kept = room(pr, npages) > 0;
    if (kept) {
        put_entry(n, off, npages);
        hdr->large_count = n + 1; /* after the entry: tcmd reads count, then entries */
        atomic_fetch_add_explicit(&pr->large_bytes, run_bytes(npages), memory_order_relaxed);
        atomic_store_explicit(&pr->xfer_used, true, memory_order_relaxed);
    }
    pthread_mutex_unlock(&pr->large_lock);
    return kept;
}

/* One page run back to tcmd (FREE_PAGES); fatal on a refusal. count: the
 * cache's count to drop once it is answered, before the slot is released
 * (as tcm__return_objects does, for the same reason). */
static void free_pages(uint64_t off, uint32_t *count)
{
    uint32_t idx;
    tcm_slot_t *slot = tcm__slot_acquire(&idx);
    slot->op = TCM_OP_FREE_PAGES;
    slot->arg = off;
    int st = tcm__call(slot, idx);
    if (count)
        (*count)--;
    tcm__slot_release(slot);
    tcm__free_pages_answered(off, st);
}

TCM_NOINLINE void tcm__free_pages_answered(uint64_t off, int st)
{
    if (st == TCM_ST_DOUBLE_FREE)
        tcm__fatal("tcm_free(): double free of page run %p", (void *)(tcm__proc.heap + off));
    if (st != TCM_ST_OK && st != TCM_ST_NOMEM)
        tcm__fatal("tcm_free(): invalid pointer %p (%s)", (void *)(tcm__proc.heap + off), tcm__status_msg(st));
}

TCM_NOINLINE void tcm__free_pages(uint64_t off)
{
    free_pages(off, NULL);
}

TCM_COLD void tcm__large_trim(uint64_t keep_bytes)
{
    tcm_proc_t *pr = &tcm__proc;
    tcm_chan_hdr_t *hdr = pr->chan_hdr;
    pthread_mutex_lock(&pr->large_lock);
    /* from the top, so that what is left is always a valid prefix */
    while (hdr->large_count && atomic_load_explicit(&pr->large_bytes, memory_order_relaxed) > keep_bytes) {
        tcm_large_entry_t e = hdr->large[hdr->large_count - 1];
        free_pages(e.off, &hdr->large_count);
        atomic_fetch_sub_explicit(&pr->large_bytes, run_bytes(e.npages), memory_order_relaxed);
    }
    pthread_mutex_unlock(&pr->large_lock);
}
