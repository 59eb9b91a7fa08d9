/* tcache.c — the slow paths behind the thread cache: registering a thread,
 * refilling a bin (transfer tier first, then the daemon, with batches asked
 * for ahead on async slots), growing bins with use inside the thread's byte
 * budget, releasing whole batches when a bin is full, and flushing on thread
 * exit and shutdown (a fork child drops its inherited cache in fork.c). The
 * transfer tier is xfer.c; posting requests and waiting for answers,
 * channel.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "client.h"
#include "diag.h"
#include "given.h"
#include "large.h"
#include "lifecycle.h"
#include "prim.h"
#include "profile.h"
#include "tcache.h"
#include "tcache_inl.h" /* tcm__page_class_of */
#include "xfer.h"

/* A class's first refill asks for this many (refill_first); each refill
 * doubles it (slow start), so a bin still at it has never been refilled. */
enum { REFILL_FIRST = 2 };

#define NOMEM_WAIT_NS 64000000ull /* a full heap: wait up to ~128 ms for other processes' caches */
#define MIN_THREAD_BUDGET (256u << 10)
#define MAX_THREAD_BUDGET (16u << 20)

static tcm_tcache_t *thread_tcache(uint32_t idx)
{
    return (tcm_tcache_t *)(tcm__proc.chan + tcm__tcache_off(&tcm__proc.lay, idx));
}

/* Class cls's own array in thread cache tc, where the layout puts it (and
 * where tcmd reads a shared channel's bins). */
static void **own_array(tcm_tcache_t *tc, unsigned cls)
{
    return (void **)((uint8_t *)tc + tcm__proc.lay.bin_objs_off[cls]);
}

/* Where a new thread's bin of class cls starts: a private heap's in its
 * entries of the first arrays (lay.first_off), else its own array. */
static void **start_array(tcm_tcache_t *tc, unsigned cls)
{
    uint32_t first = tcm__proc.lay.first_off;
    return first ? (void **)((uint8_t *)tc + first) + (size_t)cls * TCM_FIRST_BIN : own_array(tc, cls);
}

static uint64_t thread_budget(void)
{
    uint64_t total = atomic_load_explicit(&tcm__proc.meta->config.tcache_budget, memory_order_relaxed);
    uint32_t n = atomic_load_explicit(&tcm__proc.nthreads, memory_order_relaxed);
    uint64_t b = total / (n ? n : 1);
    return b < MIN_THREAD_BUDGET ? MIN_THREAD_BUDGET : b > MAX_THREAD_BUDGET ? MAX_THREAD_BUDGET : b;
}

static tcm_slot_t *async_take(tcm_thread_t *thr, uint32_t *idx);
static uint32_t async_ready(const tcm_thread_t *thr);
static uint32_t async_index(const tcm_thread_t *thr, uint32_t j);
static bool post_quietly(tcm_thread_t *thr, tcm_slot_t *slot, uint32_t idx);
static void maps_post_if_due(tcm_thread_t *thr);

/* Give the top n objects of a thread's bin to tcmd without waiting for the
 * answer (settled when the slot is next needed). The bin drops them only
 * once they are posted: a death before that leaves them in the bin and in a
 * posted RETURN, which reclaim serves first and then skips. */
static void return_async(tcm_thread_t *thr, unsigned cls, tcm_bin_t *b, uint32_t n)
{
    uint32_t idx;
    tcm_slot_t *slot = async_take(thr, &idx);
    if (!slot) { /* every async slot waits for a batch asked for ahead */
        tcm__return_objects(cls, b->objs, n, &b->count);
        return;
    }
    uintptr_t base = (uintptr_t)tcm__proc.heap;
    uint32_t top = b->count, bit = 1u << (idx - async_index(thr, 0));
    atomic_fetch_and_explicit(&thr->tc->dropped, ~bit, memory_order_relaxed);
    slot->op = TCM_OP_RETURN;
    slot->cls = cls;
    slot->count = n;
    for (uint32_t i = 0; i < n; i++)
        slot->offs[i] = (uintptr_t)b->objs[top - n + i] - base;
    /* quietly: taken at tcmd's next turn, whoever causes it (within its
     * one-second timeout); a ring each cost threads that come and go a
     * futex wake of the heap thread for every batch they overflowed */
    if (post_quietly(thr, slot, idx)) {
        b->count = top - n;
        /* from now on a reclaim must not skip them: the bin no longer
         * lists them, and a later refill may bring them back into it */
        atomic_fetch_or_explicit(&thr->tc->dropped, bit, memory_order_release);
    } else { /* tcmd is lost: the call that waits says so */
        tcm__return_objects(cls, b->objs, n, &b->count);
    }
}

/* A page run the cache does not keep, back to tcmd without waiting for the
 * answer (settled when the slot is next needed; a refusal is fatal then).
 * Once posted it is tcmd's: a death after that leaves it in a posted
 * FREE_PAGES, which reclaim serves. quiet: tcmd need not take it soon (a
 * sampled run: the page it holds is little, and the heap thread woken for
 * each would cost more than the sample). */
#define SAMPLE_QUIET_PAGES (TCM_MAX_SMALL >> TCM_PAGE_SHIFT) /* a small allocation's sampled run */

static void free_pages_async(uint64_t off, bool quiet)
{
    tcm_thread_t *thr = tcm__tls_thread;
    uint32_t idx;
    tcm_slot_t *slot = thr && thr->epoch == tcm__proc.epoch ? async_take(thr, &idx) : NULL;
    if (!slot) {
        tcm__free_pages(off);
        return;
    }
    slot->op = TCM_OP_FREE_PAGES;
    slot->arg = off;
    bool posted = quiet ? post_quietly(thr, slot, idx) : tcm__post(slot, idx);
    if (!posted) /* tcmd is lost: the call that waits says so */
        tcm__free_pages(off);
}

/* Move the objects of a thread's bin above keep out of it: the top ones
 * into the process's transfer tier as far as it has room (unless
 * to_daemon), the rest to the daemon. Leaves b->count = keep. async: the
 * calling thread, whose bin it is, does not wait for tcmd to take a single
 * batch (NULL: it waits). */
TCM_NOINLINE static void release_objects(unsigned cls, tcm_bin_t *b, uint32_t keep, bool to_daemon, tcm_thread_t *async)
{
    uint32_t n = b->count - keep;
    /* the tier trades between the process's threads: with one thread it
     * would only pin memory */
    if (!to_daemon && atomic_load_explicit(&tcm__proc.nthreads, memory_order_relaxed) > 1)
        n -= tcm__xfer_put(cls, b, n);
    if (n && async && n <= TCM_MAX_BATCH)
        return_async(async, cls, b, n);
    else if (n)
        tcm__return_objects(cls, b->objs, n, &b->count);
    b->count = keep;
}

/* What the thread gathered from draining spans, back to tcmd (async: the
 * thread whose arrays they are, NULL: it waits). */
static void flush_drains(tcm_thread_t *thr, tcm_thread_t *async)
{
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        tcm_bin_t *d = &thr->tc->bins[TCM_PAGE_CLASS_DRAIN + cls];
        if (d->count)
            release_objects(cls, d, 0, true, async);
    }
}

/* Whether handing back drain array d now empties the span p is in: its
 * free objects (tcmd's count, read as it stands) and those of it in d are
 * all of it. A span's last objects otherwise waited in the array for other
 * spans' frees to fill it (up to tcm__drain_cap) or for the scavenge:
 * buffers grown by realloc through every class left each class's last few
 * draining spans held that way (realloc_grow: 19 blocks of 832 B kept 8
 * spans of 64 KiB). */
static bool drain_empties_span(unsigned cls, const tcm_bin_t *d, const void *p)
{
    tcm_proc_t *pr = &tcm__proc;
    uintptr_t base = (uintptr_t)pr->heap;
    const tcm_span_t *sp = &pr->spans[pr->page_span[((uintptr_t)p - base) >> TCM_PAGE_SHIFT]];
    uint32_t nfree = atomic_load_explicit((const _Atomic uint32_t *)&sp->nfree, memory_order_relaxed),
             objs = pr->classes[cls].span_objs;
    if (nfree + d->count < objs)
        return false;
    uintptr_t lo = base + ((uintptr_t)sp->first << TCM_PAGE_SHIFT), hi = lo + ((uintptr_t)sp->npages << TCM_PAGE_SHIFT);
    uint32_t mine = 0;
    for (uint32_t i = 0; i < d->count; i++)
        mine += (uintptr_t)d->objs[i] >= lo && (uintptr_t)d->objs[i] < hi;
    return nfree + mine >= objs;
}

/* A free of an object whose span tcmd is draining (its page class says
 * so): gathered in the thread's drain array of its class, where no malloc
 * finds it, and handed back a batch at a time, so that the span empties and
 * its pages go to whichever class needs them. Listed in the channel as a
 * bin's objects are: a death leaves them to reclaim. */
TCM_NOINLINE static void drain_free(tcm_thread_t *thr, unsigned cls, void *p)
{
    tcm_proc_t *pr = &tcm__proc;
    tcm_bin_t *d = &thr->tc->bins[TCM_PAGE_CLASS_DRAIN + cls];
    tcm_cache_rec_t *rec = &pr->caches[thr->index];
    uint32_t cap = tcm__drain_cap(&pr->classes[cls]);
    if (!rec->drain_backed && cap &&
        tcm__back((uint8_t *)thr->tc + pr->lay.drain_off, pr->lay.drain_bytes) == 0)
        rec->drain_backed = true;
    if (!rec->drain_backed || !cap) { /* /dev/shm is full: one at a time */
        tcm__return_objects(cls, &p, 1, NULL);
        return;
    }
    d->objs[d->count++] = p;
    if (d->count >= cap || drain_empties_span(cls, d, p))
        release_objects(cls, d, 0, true, thr);
}

/* The first n offsets of an answered REFILL, for which there was no room,
 * back to tcmd on the same slot. */
static int return_on_slot(tcm_slot_t *slot, uint32_t idx, uint32_t n)
{
    slot->op = TCM_OP_RETURN;
    slot->count = n;
    return tcm__call(slot, idx);
}

/* With other threads in the process, a refill from tcmd also brings what
 * they are likely to ask for next, into the transfer tier: threads that
 * start together would otherwise each climb the same slow start, a round
 * trip a step. As much again per other thread, within the class's batch
 * and what the tier has room for. */
static uint32_t for_siblings(unsigned cls, uint32_t want)
{
    uint32_t n = atomic_load_explicit(&tcm__proc.nthreads, memory_order_relaxed), batch = tcm__proc.classes[cls].batch;
    if (n < 2 || want >= batch)
        return 0;
    uint64_t share = (uint64_t)want * (n - 1), fits = tcm__xfer_budget_room(cls);
    share = share < fits ? share : fits;
    return share < batch - want ? (uint32_t)share : batch - want;
}

/* *asked: on NOMEM, how many other processes tcmd asked to give back what
 * they cache (then a retry soon may succeed). share: how many more to ask
 * for, for the transfer tier. */
static uint32_t take_from_daemon(tcm_thread_t *thr, unsigned cls, void **dst, uint32_t want, uint32_t share,
                                 uint64_t *asked)
{
    tcm_slot_t *slot = &tcm__proc.slots[thr->index];
    slot->op = TCM_OP_REFILL;
    slot->cls = cls;
    slot->count = want + share;
    *asked = 0;
    if (tcm__call(slot, thr->index) != TCM_ST_OK) {
        *asked = slot->status == TCM_ST_NOMEM ? slot->result : 0;
        atomic_store_explicit(&slot->state, TCM_SLOT_IDLE, memory_order_relaxed);
        return 0;
    }
    uint32_t got = slot->nresult < want + share ? slot->nresult : want + share;
    tcm__check_given(cls, slot->offs, got);
    tcm__map_given(slot->offs, got);
    uint32_t n = got < want ? got : want;
    for (uint32_t i = 0; i < n; i++)
        dst[i] = tcm__proc.heap + slot->offs[i];
    uint32_t left = got > n ? tcm__xfer_put_fetched(cls, slot, n, got - n) : 0;
    if (left) { /* the tier filled up meanwhile */
        int st = return_on_slot(slot, thr->index, left);
        if (st != TCM_ST_OK && st != TCM_ST_NOMEM)
            tcm__fatal_refused(st, cls);
    }
    atomic_store_explicit(&slot->state, TCM_SLOT_IDLE, memory_order_relaxed);
    return n;
}

static void grow(tcm_thread_t *thr, unsigned cls, uint32_t more);

/* Objects of a REFILL answered while the thread went on: into its bin of
 * that class as far as it may grow; returns how many went in. */
static uint32_t stash_fetched(tcm_thread_t *thr, unsigned cls, const tcm_slot_t *slot, uint32_t n)
{
    tcm_bin_t *b = &thr->tc->bins[cls];
    grow(thr, cls, n);
    uint32_t room = b->max > b->count ? b->max - b->count : 0, k = n < room ? n : room;
    for (uint32_t i = 0; i < k; i++)
        b->objs[b->count + i] = tcm__proc.heap + slot->offs[i];
    b->count += k; /* listed in the bin and in the answered slot until it goes IDLE: a reclaim frees
                      the first and silently refuses the second */
    return k;
}

/* The runs an ALLOC_PAGES asked for ahead of small samples brought, from
 * the first'th on, into the process's page-run cache, where the next
 * sample of any thread takes one (tcm__large_marked), or back to tcmd when
 * it is full; a run marked a sample's goes back to tcmd from whoever frees
 * it. Done before the slot goes IDLE: a death in between leaves a run in
 * both, and reclaim frees it from the first and skips it in the second. */
static void stock_runs(const tcm_slot_t *slot, uint32_t first)
{
    bool stock = slot->cls == TCM_ALLOC_SAMPLE_RUNS;
    const uint64_t *runs = stock ? slot->offs : &slot->result;
    uint32_t n = !stock ? 1 : slot->nresult < TCM_SAMPLE_RUNS_MAX ? slot->nresult : TCM_SAMPLE_RUNS_MAX;
    for (uint32_t i = first; i < n; i++) {
        tcm__check_given_run(runs[i], 1);
        if (!tcm__large_keep(runs[i], 1))
            tcm__free_pages(runs[i]);
    }
}

/* Wait for a request posted on an async slot of thread owner (NULL: not
 * known), take its answer in and leave the slot IDLE. into: the thread
 * whose bin may take a batch fetched ahead (NULL: it goes back to tcmd, on
 * the same slot). */
static void settle_slot(tcm_slot_t *slot, uint32_t idx, tcm_thread_t *owner, tcm_thread_t *into)
{
    uint8_t bit = owner ? (uint8_t)(1u << (idx - async_index(owner, 0))) : 0;
    int st = owner && !(owner->quiet_posted & bit) ? tcm__await_rung(slot) : tcm__await(slot);
    if (owner)
        owner->quiet_posted &= (uint8_t)~bit;
    unsigned cls = slot->cls;
    uint32_t t, j;
    if (slot->op == TCM_OP_REFILL && cls > 0 && cls < TCM_NCLASSES && tcm__async_slot_of(&tcm__proc.lay, idx, &t, &j)) {
        tcm_tcache_t *tc = thread_tcache(t);
        uint64_t asked = (uint64_t)slot->count * tcm__proc.classes[cls].size;
        tc->ahead_bytes = tc->ahead_bytes > asked ? tc->ahead_bytes - asked : 0;
        if (st == TCM_ST_OK) {
            uint32_t n = slot->nresult < slot->count ? slot->nresult : slot->count;
            n = n < TCM_MAX_BATCH ? n : TCM_MAX_BATCH;
            tcm__check_given(cls, slot->offs, n);
            if (into)
                tcm__map_given(slot->offs, n);
            uint32_t k = into ? stash_fetched(into, cls, slot, n) : 0;
            if (k < n) { /* no room: back to tcmd */
                memmove(slot->offs, slot->offs + k, (n - k) * sizeof slot->offs[0]);
                st = return_on_slot(slot, idx, n - k);
            }
        }
    }
    atomic_store_explicit(&slot->state, TCM_SLOT_IDLE, memory_order_relaxed);
    if (slot->op == TCM_OP_RETURN && st != TCM_ST_OK && st != TCM_ST_NOMEM)
        tcm__fatal_refused(st, cls);
    if (slot->op == TCM_OP_FREE_PAGES)
        tcm__free_pages_answered((uint64_t)slot->arg, st);
    if (slot->op == TCM_OP_ALLOC_PAGES && st == TCM_ST_OK)
        stock_runs(slot, 0); /* runs asked for ahead of samples that did not come */
}

static uint32_t async_index(const tcm_thread_t *thr, uint32_t j)
{
    return tcm__async_slot(&tcm__proc.lay, thr->index, j);
}

/* After a request posted quietly: when it took the thread's last async
 * slot that was free or answered, tcmd is woken now, so that the thread's
 * next request finds a slot without waiting for a round trip. */
_Static_assert(TCM_ASYNC_SLOTS <= 8, "tcm_thread_t.quiet_posted has a bit per async slot");

static bool post_quietly(tcm_thread_t *thr, tcm_slot_t *slot, uint32_t idx)
{
    if (!tcm__post_quiet(slot, idx))
        return false;
    thr->quiet_posted |= (uint8_t)(1u << (idx - async_index(thr, 0)));
    for (uint32_t j = 0; j < TCM_ASYNC_SLOTS; j++) {
        uint32_t state = atomic_load_explicit(&tcm__proc.slots[async_index(thr, j)].state, memory_order_relaxed);
        if (state == TCM_SLOT_IDLE || state == TCM_SLOT_DONE)
            return true;
    }
    tcm__ring_bell();
    return true;
}

/* tcmd is told of the thread's quiet posts, if any, so that it takes them
 * (and frees their slots) now, not at its next turn. */
static void ring_quiet(tcm_thread_t *thr)
{
    if (!thr->quiet_posted)
        return;
    thr->quiet_posted = 0;
    tcm__ring_bell();
}

/* ---- the run of the next small sample, asked for ahead ----
 *
 * A sample's run is a round trip to tcmd, and one that waits for its heap
 * thread to be woken and scheduled (100 us and more on a busy 2-CPU guest,
 * against ~1 us of unwinding). So a thread asks for its next small
 * sample's run ahead: one at its first malloc, just before its first
 * refill, which tcmd serves with it; and after a sample that left the
 * process one or none, a stock (two runs, then twice the process's last
 * stock, up to TCM_SAMPLE_RUNS_MAX and the run cache's room: a process
 * that samples once holds a page more, not eight): a wake of tcmd for up
 * to that many samples, not one each (a process that keeps sampling wakes
 * tcmd less than half as often: docs/BENCHMARKS.md, "The heap profile").
 * Under a rate both go without waking tcmd, which serves them at its next
 * turn, whoever causes it: a ring costs the sampling thread 15-70 us on
 * this 2-CPU guest (the heap thread, woken, takes its CPU), most of what
 * a short process's first sample cost; a sample that finds its run not
 * answered yet is owed (below) and rings (ring_ahead). With no rate a
 * sample waits for its run if need be, so the stock rings. The answer
 * waits on one of the thread's async slots (a process that dies first
 * leaves runs answered and never taken, which reclaim frees); the first
 * run goes to the sample, the rest to the process's page-run cache
 * (stock_runs), where the next sample of any thread takes one, as it
 * does a run asked for by a thread that left (threads that come and go
 * ask for none while one is there). */
static void sample_ask_ahead(tcm_thread_t *thr, bool stock, bool ring)
{
    uint32_t idx;
    tcm_slot_t *slot;
    /* (an ask waits for no slot, and leaves one for the free of the run a
     * sample just took: async_ready) */
    if (thr->sample_ahead || tcm__large_marked_count() > (stock ? 1u : 0u) || async_ready(thr) < 2 ||
        !(slot = async_take(thr, &idx)))
        return;
    uint32_t count = 1;
    if (stock) {
        /* 2, then twice the last, up to the most, and no more than the run
         * cache keeps beside the one the sample takes */
        count = 2 * atomic_load_explicit(&tcm__proc.sample_stock, memory_order_relaxed);
        count = count < 2 ? 2 : count < TCM_SAMPLE_RUNS_MAX ? count : TCM_SAMPLE_RUNS_MAX;
        atomic_store_explicit(&tcm__proc.sample_stock, count, memory_order_relaxed);
        uint32_t room = tcm__large_room(1);
        count = room + 1 < count ? room + 1 : count;
    }
    slot->op = TCM_OP_ALLOC_PAGES;
    slot->arg = 1;
    slot->arg2 = 1;
    slot->cls = count > 1 ? TCM_ALLOC_SAMPLE_RUNS : TCM_ALLOC_SAMPLED;
    slot->count = count;
    if (ring ? tcm__post(slot, idx) : post_quietly(thr, slot, idx))
        thr->sample_ahead = idx;
}

/* A sample is owed for want of the run asked for ahead: tcmd is told of
 * the ask, once, if it went quietly (under a rate every ask does; asked
 * for again if it could not be asked for at all). */
static void ring_ahead(tcm_thread_t *thr)
{
    if (!thr->sample_ahead) {
        sample_ask_ahead(thr, true, true);
        return;
    }
    uint8_t bit = (uint8_t)(1u << (thr->sample_ahead - async_index(thr, 0)));
    if (thr->quiet_posted & bit) {
        thr->quiet_posted &= (uint8_t)~bit;
        tcm__ring_bell();
    }
}

/* The run asked for ahead, once tcmd answered; 0 when it has not, or
 * refused. (settle_slot gives back one nobody took.) */
static uint64_t sample_take_ahead(tcm_thread_t *thr)
{
    uint32_t idx = thr->sample_ahead;
    tcm_slot_t *slot = &tcm__proc.slots[idx];
    if (!idx || atomic_load_explicit(&slot->state, memory_order_relaxed) != TCM_SLOT_DONE)
        return 0;
    thr->sample_ahead = 0;
    thr->quiet_posted &= (uint8_t)~(1u << (idx - async_index(thr, 0)));
    int st = tcm__await(slot); /* (answered: it rings nothing) */
    uint64_t off = 0;
    if (st == TCM_ST_OK) { /* (a stock's runs in offs, the first also in result) */
        off = slot->result;
        tcm__check_given_run(off, 1);
        stock_runs(slot, 1);
    }
    atomic_store_explicit(&slot->state, TCM_SLOT_IDLE, memory_order_relaxed);
    return off;
}

/* A request whose settling touches no bin: one that gives memory back (a
 * RETURN or a FREE_PAGES) or the heap profile's SAMPLE or MAPS. */
static bool touches_no_bin(const tcm_slot_t *slot)
{
    return slot->op == TCM_OP_RETURN || slot->op == TCM_OP_FREE_PAGES || slot->op == TCM_OP_SAMPLE ||
           slot->op == TCM_OP_MAPS;
}

/* Every async slot of the thread settled. stash: fetched objects go into
 * its bins (only where no bin is being worked on); otherwise back to tcmd.
 * leave: those whose settling touches no bin stay posted (an exiting
 * thread's: the next thread on its cache settles them when it needs the
 * slot, tcm__flush_all at a shutdown), tcmd told of any posted quietly. */
static void settle_all(tcm_thread_t *thr, bool stash, bool leave)
{
    bool untold = false;
    thr->sample_ahead = 0; /* its run goes back with its slot */
    for (uint32_t j = 0; j < TCM_ASYNC_SLOTS; j++) {
        uint32_t idx = async_index(thr, j);
        tcm_slot_t *slot = &tcm__proc.slots[idx];
        if (atomic_load_explicit(&slot->state, memory_order_relaxed) == TCM_SLOT_IDLE)
            continue;
        if (leave && touches_no_bin(slot))
            untold |= (thr->quiet_posted >> j) & 1;
        else
            settle_slot(slot, idx, thr, stash ? thr : NULL);
    }
    if (untold)
        tcm__ring_bell();
}

/* An async slot for a new request: an IDLE one, else one whose settling
 * touches no bin (settled here, waiting if need be). NULL when every one
 * holds a batch asked for ahead. */
static tcm_slot_t *async_take(tcm_thread_t *thr, uint32_t *idx)
{
    uint32_t ret = UINT32_MAX;
    for (uint32_t j = 0; j < TCM_ASYNC_SLOTS; j++) {
        uint32_t i = async_index(thr, (thr->async_next + j) % TCM_ASYNC_SLOTS);
        tcm_slot_t *slot = &tcm__proc.slots[i];
        uint32_t state = atomic_load_explicit(&slot->state, memory_order_relaxed);
        if (state == TCM_SLOT_IDLE) {
            ret = i;
            break;
        }
        if (touches_no_bin(slot) && (ret == UINT32_MAX || state == TCM_SLOT_DONE))
            ret = i; /* the oldest pending one, unless another is answered already */
    }
    if (ret == UINT32_MAX)
        return NULL;
    tcm_slot_t *slot = &tcm__proc.slots[ret];
    if (atomic_load_explicit(&slot->state, memory_order_relaxed) != TCM_SLOT_IDLE)
        settle_slot(slot, ret, thr, NULL);
    thr->async_next = (ret - async_index(thr, 0) + 1) % TCM_ASYNC_SLOTS;
    *idx = ret;
    return slot;
}

/* How many of the thread's async slots a request that touches no bin can
 * take without waiting: idle, or answered (a run asked for ahead of a
 * sample included, which the sample takes). A stock lets a thread take
 * samples while tcmd does not run, each posting its SAMPLE and the FREE_PAGES
 * of its run quietly: a sample taken without two of them would wait for
 * tcmd (DESIGN, "a sample waits for nobody"). */
static uint32_t async_ready(const tcm_thread_t *thr)
{
    uint32_t k = 0;
    for (uint32_t j = 0; j < TCM_ASYNC_SLOTS; j++) {
        const tcm_slot_t *slot = &tcm__proc.slots[async_index(thr, j)];
        uint32_t state = atomic_load_explicit(&slot->state, memory_order_relaxed);
        k += state == TCM_SLOT_IDLE ||
             (state == TCM_SLOT_DONE && (touches_no_bin(slot) || slot->op == TCM_OP_ALLOC_PAGES));
    }
    return k;
}

/* The async slot holding a batch of class cls asked for ahead, or NULL. */
static tcm_slot_t *fetched_ahead(tcm_thread_t *thr, unsigned cls, uint32_t *idx)
{
    for (uint32_t j = 0; j < TCM_ASYNC_SLOTS; j++) {
        uint32_t i = async_index(thr, j);
        tcm_slot_t *slot = &tcm__proc.slots[i];
        if (atomic_load_explicit(&slot->state, memory_order_relaxed) != TCM_SLOT_IDLE &&
            slot->op == TCM_OP_REFILL && slot->cls == cls) {
            *idx = i;
            return slot;
        }
    }
    return NULL;
}

/* A thread that keeps refilling a class from tcmd asks for its next batch
 * now, so that tcmd works while the thread uses this one. What waits in its
 * slots stays within half of what its budget leaves beside its bins, so
 * bins and fetched batches together stay within the budget. */
static void fetch_ahead(tcm_thread_t *thr, unsigned cls)
{
    if (tcm__proc.serve) /* a private heap: answered as it is posted, the batch would only wait in its slot */
        return;
    const tcm_class_info_t *ci = &tcm__proc.classes[cls];
    uint64_t quota = (thr->budget > thr->capacity ? thr->budget - thr->capacity : 0) / 2,
             ahead = thr->tc->ahead_bytes;
    uint64_t fits = ahead < quota ? (quota - ahead) / ci->size : 0;
    uint32_t want = thr->refill[cls] < fits ? thr->refill[cls] : (uint32_t)fits, idx;
    tcm_slot_t *slot;
    /* A thread whose bins' room has reached its budget would otherwise ask
     * ahead for one object at a time, and wait for each at its next miss
     * (larson's fill: up to 50 000 REFILLs of 1-3 objects of 32 B): its
     * refill then asks tcmd for a whole one itself. */
    if (want == 0 || want < thr->refill[cls] / 2 || !(slot = async_take(thr, &idx)))
        return;
    slot->op = TCM_OP_REFILL;
    slot->cls = cls;
    slot->count = want;
    thr->tc->ahead_bytes += (uint64_t)want * ci->size; /* counted as cached from now on */
    if (!tcm__post(slot, idx))
        thr->tc->ahead_bytes -= (uint64_t)want * ci->size;
}

/* What a class's first refill asks for: REFILL_FIRST, or two cache lines'
 * worth of a class smaller than a line, so that the bin holds a whole line
 * of its own (line_on_top). */
static uint32_t refill_first(unsigned cls)
{
    uint32_t size = tcm__proc.classes[cls].size, lines = 2 * TCM_CACHELINE / size;
    return size < TCM_CACHELINE && lines > REFILL_FIRST ? lines : REFILL_FIRST;
}

/* After a refill of a class smaller than a cache line: the object the next
 * malloc takes is one whose whole line the bin holds, if it holds one. A
 * thread that reuses one object over and over (Hoard's cache-thrash) then
 * writes a line no other thread has objects on: two threads' batches may
 * share the lines at their ends, and with the bin's last object on such a
 * line four threads wrote one line 1.5x slower than mimalloc's. */
static void line_on_top(tcm_bin_t *b, uint32_t size)
{
    const uintptr_t line_mask = ~(uintptr_t)(TCM_CACHELINE - 1);
    uint32_t n = b->count < 16 ? b->count : 16, per_line = TCM_CACHELINE / size;
    void **top = b->objs + b->count - n;
    for (uint32_t i = n; i-- > 0;) {
        uintptr_t line = (uintptr_t)top[i] & line_mask;
        uint32_t mates = 0;
        for (uint32_t j = 0; j < n; j++)
            mates += ((uintptr_t)top[j] & line_mask) == line;
        if (mates >= per_line) {
            void *o = top[i];
            top[i] = top[n - 1];
            top[n - 1] = o;
            return;
        }
    }
}

/* Set a bin's room (its max), with the thread's capacity, the sum of its
 * bins' room in bytes, in step. */
static void set_room(tcm_thread_t *thr, unsigned cls, uint32_t max)
{
    tcm_bin_t *b = &thr->tc->bins[cls];
    uint64_t size = tcm__proc.classes[cls].size;
    thr->capacity = thr->capacity - b->max * size + max * size;
    b->max = max;
}

/* ---- a bin's room on a private heap ----
 *
 * Where a program's threads free each other's objects of many classes
 * (xmalloc's ring of four), what a bin gives out and gets back differs by
 * a random walk. A room that grows at each quick miss and overflow stays
 * ahead of the walk, whose count wanders up by a refill each time it meets
 * zero: xmalloc's threads' bins held 17 MB for 0.6 MB in use. On a
 * private heap, where a refill or an overflow is a call rather than a wake
 * of tcmd, a class's room stops at PRIVATE_ROOM_BYTES (at least
 * ROOM_MIN_OBJECTS: a walk meets a room of fewer objects every few dozen
 * steps); a refill then fills half of it and an overflow leaves half, so
 * the walk pays a call each time it drifts half a room.
 * A loop that allocates more of a class than that and then frees it all
 * (the seed's 64 B x 2048) is no walk: it sweeps the bin from full to
 * empty and back, each end met soon after the other, with little allocated
 * in between (under SWEEP_SPAN times the room's bytes: a walk across half
 * a room takes about the square of half a room in steps, and other
 * classes' allocations in between; a one-way flow, a producer's or a
 * consumer's, meets one end again and again). SWEEPS_LIFT such turns in a
 * row lift the class's cap and its room grows as a tcmd client's does,
 * until a turn is a walk's (a lifted room that is not swept: the 512-byte
 * class of xmalloc's batch arrays, whose bursts passed for sweeps now and
 * then) or a scavenge finds that the bin never emptied through an
 * interval. */
#define PRIVATE_ROOM_BYTES (64u << 10)
#define ROOM_MIN_OBJECTS 64u
#define SWEEP_SPAN 8u
#define SWEEPS_LIFT 4u

static uint64_t byte_clock(const tcm_thread_t *thr)
{
    return thr->clock_base + (uint64_t)thr->clock_from - (uint64_t)tcm__hot.sample_left;
}

/* A class's cap on a private heap, lifted or not; 0: none. */
static uint32_t class_cap(unsigned cls)
{
    const tcm_class_info_t *ci = &tcm__proc.classes[cls];
    if (!tcm__proc.serve)
        return 0;
    uint32_t n = PRIVATE_ROOM_BYTES / ci->size;
    n = n > ROOM_MIN_OBJECTS ? n : ROOM_MIN_OBJECTS;
    return n < ci->tcache_cap ? n : 0;
}

/* The most a bin of the class may hold now: 0 for no cap beyond the class's. */
static uint32_t room_cap(const tcm_thread_t *thr, unsigned cls)
{
    return thr->sweeps[cls] >= SWEEPS_LIFT ? 0 : class_cap(cls);
}

/* A bin met an end of its room: it missed (empty) or overflowed (full). A
 * sweep's half when it met the other end last and the thread allocated
 * little since; a walk's or a one-way flow's otherwise (a producer's bins
 * miss again and again, a consumer's overflow), and a lifted class that
 * walks is capped again. Before the bin's room or count moves. */
static void note_turn(tcm_thread_t *thr, unsigned cls, bool missed)
{
    uint32_t cap = class_cap(cls);
    if (!cap)
        return;
    uint64_t last = thr->turn_clock[cls], now = byte_clock(thr), room = thr->tc->bins[cls].max;
    thr->turn_clock[cls] = now << 1 | missed;
    if (room < cap || !last || (last & 1) == missed) /* (a small room's walk is as quick as a sweep) */
        return;
    if ((now - (last >> 1)) < SWEEP_SPAN * room * tcm__proc.classes[cls].size) {
        if (thr->sweeps[cls] < SWEEPS_LIFT)
            thr->sweeps[cls]++;
    } else {
        if (thr->sweeps[cls] >= SWEEPS_LIFT && room > cap)
            set_room(thr, cls, cap); /* (a full bin's overflow then leaves half of it) */
        thr->sweeps[cls] = 0;
    }
}

/* The first `want` entries of a bin's array made writable; returns how
 * many are (fewer only when /dev/shm is full). A private heap's bin starts
 * in the first arrays (start_array) and moves to its own once it needs
 * more than they hold: a class a thread uses now and then shares a page
 * with other classes rather than taking one of its own. */
static uint32_t bin_backed(tcm_thread_t *thr, unsigned cls, uint32_t want)
{
    tcm_bin_t *b = &thr->tc->bins[cls];
    void **own = own_array(thr->tc, cls);
    uint32_t *backed = &tcm__proc.caches[thr->index].backed[cls];
    if (b->objs == own)
        return tcm__back_array(own, backed, want);
    if (want <= TCM_FIRST_BIN)
        return want;
    uint32_t n = tcm__back_array(own, backed, want);
    if (n <= TCM_FIRST_BIN) /* backing failed: moving would gain no room */
        return TCM_FIRST_BIN;
    memcpy(own, b->objs, b->count * sizeof *own);
    b->objs = own;
    return n;
}

/* Let a bin hold `more` more objects if the thread's budget allows. */
static void grow(tcm_thread_t *thr, unsigned cls, uint32_t more)
{
    const tcm_class_info_t *ci = &tcm__proc.classes[cls];
    tcm_bin_t *b = &thr->tc->bins[cls];
    uint32_t cap = room_cap(thr, cls);
    cap = cap ? cap : ci->tcache_cap;
    uint32_t room = cap > b->max ? cap - b->max : 0;
    if (more > room)
        more = room;
    uint64_t left = thr->budget > thr->capacity ? thr->budget - thr->capacity : 0;
    if ((uint64_t)more * ci->size > left)
        more = (uint32_t)(left / ci->size);
    if (b->max == 0 && more == 0)
        more = 1; /* every class may hold at least one object */
    set_room(thr, cls, bin_backed(thr, cls, b->max + more));
}

/* Halve bins until the thread fits its (new) budget. */
TCM_COLD static void shrink_to_budget(tcm_thread_t *thr)
{
    while (thr->capacity > thr->budget) {
        bool changed = false;
        for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
            tcm_bin_t *b = &thr->tc->bins[cls];
            if (b->max <= 1)
                continue;
            uint32_t keep = b->max / 2;
            if (b->count > keep) /* a smaller budget: memory back to the heap, not the transfer tier */
                release_objects(cls, b, keep, true, NULL);
            set_room(thr, cls, keep);
            changed = true;
        }
        if (!changed)
            break;
    }
}

static void thread_flush(tcm_thread_t *thr, bool to_daemon, bool exiting);

/* Each refill of a class asks for twice the last, up to its batch. */
static void slow_start(tcm_thread_t *thr, unsigned cls)
{
    uint32_t batch = tcm__proc.classes[cls].batch;
    if (thr->refill[cls] < batch)
        thr->refill[cls] = thr->refill[cls] * 2 < batch ? thr->refill[cls] * 2 : batch;
}

/* The n objects at the bottom of a bin -- those it held through a whole
 * interval, under everything pushed and popped since -- back to tcmd. A
 * batch is answered before the bin drops it; the rest then moves down in
 * address order, so every object stays listed at least once (a death in
 * between lists some twice: reclaim frees the first and refuses the
 * second, silently). */
static void release_idle(unsigned cls, tcm_bin_t *b, uint32_t n)
{
    while (n) {
        uint32_t k = n < TCM_MAX_BATCH ? n : TCM_MAX_BATCH;
        int st;
        tcm_slot_t *slot = tcm__return_post(cls, b->objs, k, &st);
        for (uint32_t i = k; i < b->count; i++)
            b->objs[i - k] = b->objs[i];
        b->count -= k;
        tcm__return_done(slot, st, cls);
        n -= k;
    }
}

/* How often a thread scavenges its bins: TCM_DECAY_STEPS times per
 * decay_ms, so that what a class leaves unused is back with tcmd within
 * about decay_ms. UINT64_MAX (never) without decay. */
static uint64_t scavenge_interval_ns(void)
{
    uint64_t ms = atomic_load_explicit(&tcm__proc.meta->config.decay_ms, memory_order_relaxed);
    return ms ? ms * 1000000u / TCM_DECAY_STEPS : UINT64_MAX;
}

/* What a bin held through a whole interval (its low-water mark) was not
 * needed in it: three quarters of that goes back to tcmd, from the bottom
 * of the bin (the objects that sat there all along), and the bin's room
 * shrinks with it (tcmalloc's per-class low-water scavenging, jemalloc's
 * tcache GC). The hit path keeps no low-water mark, so the slow paths'
 * view stands in for it: a bin that missed kept nothing idle; otherwise it
 * held at least what it held at the last scavenge and holds now. A bin in
 * steady use (the seed's alloc-64-free-64 loops) misses every cycle or
 * never reaches a slow path, and keeps everything. */
TCM_COLD static void scavenge(tcm_thread_t *thr)
{
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        tcm_bin_t *b = &thr->tc->bins[cls];
        uint32_t low = thr->low[cls] < b->count ? thr->low[cls] : b->count;
        if (low) {
            /* a bin may hold one more than its max (a free into a bin of max 0) */
            uint32_t drop = low - low / 4, max = b->max > drop ? b->max - drop : 0;
            release_idle(cls, b, drop);
            if (max < b->count)
                max = b->count;
            if (max < 1)
                max = 1; /* as grow() leaves it (a quiet class of one-object spans goes to 0 on its own) */
            set_room(thr, cls, max);
            thr->sweeps[cls] = 0; /* it never emptied: no sweep */
        }
        thr->low[cls] = b->count;
    }
    memset(thr->borrowed, 0, sizeof thr->borrowed);
    flush_drains(thr, thr);
}

#define SCAVENGE_CHECK_EVERY 16u /* slow-path entries between reads of the clock */

static void scavenge_if_due(tcm_thread_t *thr)
{
    if (tcm_likely(++thr->slow_calls < SCAVENGE_CHECK_EVERY))
        return;
    thr->slow_calls = 0;
    uint64_t now = tcm__now_ns(), interval = scavenge_interval_ns();
    if (interval == UINT64_MAX) {
        thr->scavenge_ns = 0;
        return;
    }
    if (!thr->scavenge_ns) {
        thr->scavenge_ns = now + interval;
        return;
    }
    if (now < thr->scavenge_ns)
        return;
    thr->scavenge_ns = now + interval;
    scavenge(thr);
}

static void check_config(tcm_thread_t *thr)
{
    scavenge_if_due(thr);
    /* the heap is full and tcmd asked every process for what it caches */
    uint32_t flush = atomic_load_explicit(&tcm__proc.chan_hdr->flush_gen, memory_order_relaxed);
    if (tcm_unlikely(flush != thr->flush_seen)) {
        thr->flush_seen = flush;
        thread_flush(thr, true, false);
    }
    uint64_t gen = atomic_load_explicit(&tcm__proc.meta->config.gen, memory_order_acquire);
    if (tcm_likely(gen == thr->config_gen))
        return;
    thr->config_gen = gen;
    thr->budget = thread_budget();
    if (thr->sample_base != atomic_load_explicit(&tcm__proc.meta->profile_sample, memory_order_relaxed)) {
        thr->sample_armed = false; /* profile_sample changed: the next malloc draws from the new mean */
        thr->sample_owed = 0;
        tcm__countdown_set(thr, 0);
    }
    settle_all(thr, false, false); /* what it asked for ahead goes back: the budget may be smaller */
    shrink_to_budget(thr);
    tcm__xfer_trim(false);
}

/* What tcmd takes goes on the thread's async slots, a batch each (an
 * exiting thread of a process with many classes in use waited for a round
 * trip a class), and is waited for at the end, all in one wake or few;
 * unless exiting: then nobody waits for it (settle_all's leave), and a
 * thread that ends waits for tcmd only for what it asked for ahead. */
TCM_COLD static void thread_flush(tcm_thread_t *thr, bool to_daemon, bool exiting)
{
    settle_all(thr, true, exiting);
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        tcm_bin_t *b = &thr->tc->bins[cls];
        if (b->count)
            release_objects(cls, b, 0, to_daemon, thr);
        b->max = 0;
        thr->low[cls] = 0;
    }
    thr->capacity = 0;
    flush_drains(thr, thr);
    settle_all(thr, false, exiting);
}

/* The heap is at its limit: give back everything this thread and the
 * process's transfer tier hold, so the retry can use it. */
TCM_COLD static void flush_for_nomem(void)
{
    if (tcm__tls_thread)
        thread_flush(tcm__tls_thread, true, false);
    tcm__xfer_trim(true);
}

/* Cache idx is free for the next thread that registers. */
static void cache_release(uint32_t idx)
{
    pthread_mutex_lock(&tcm__proc.tcache_lock);
    tcm__proc.caches[idx].used = false;
    pthread_mutex_unlock(&tcm__proc.tcache_lock);
}

/* pthread key destructor: the thread is exiting. */
TCM_COLD static void thread_exit(void *arg)
{
    tcm_thread_t *thr = arg;
    tcm_proc_t *pr = &tcm__proc;
    tcm__library_enter();
    if (thr->epoch == pr->epoch && atomic_load(&pr->attached)) {
        /* into the transfer tier, where the next thread finds it without a
         * round trip (threads that come and go); the background thread
         * gives the tier back once nobody has used it for decay_ms. Without
         * that thread, a process whose workers have gone must not keep
         * their memory pinned: to the daemon, and the tier too once at
         * most one thread is left. Trimmed through this thread's slot, so
         * before its index is given to a new thread. */
        /* (a private heap's starts only once its heap passes BG_AFTER_BYTES,
         * local.c: until then the tier pins at most that much) */
        bool bg = atomic_load_explicit(&pr->bg_running, memory_order_relaxed) || pr->serve;
        thread_flush(thr, !bg, true);
        if (atomic_fetch_sub(&pr->nthreads, 1) <= 2 && !bg)
            tcm__xfer_trim(true);
        thr->tc->in_use = 0;
        cache_release(thr->index);
    }
    if (tcm__tls_thread == thr)
        tcm__thread_forget();
    free(thr);
    tcm__library_leave();
}

/* The key whose destructor flushes an exiting thread's cache, made when
 * the first thread registers. */
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;
static void thread_key_create(void)
{
    pthread_key_create(&tcm__proc.thread_key, thread_exit);
}

TCM_COLD static tcm_thread_t *thread_register(void)
{
    static _Atomic bool warned;
    tcm_proc_t *pr = &tcm__proc;
    if (tcm__ensure_attached() != 0)
        return NULL;
    free(atomic_exchange(&pr->forked_thread, NULL)); /* see fork.c's forget_thread */
    pthread_mutex_lock(&pr->tcache_lock);
    uint32_t idx = pr->lay.max_threads;
    for (uint32_t i = 0; i < pr->lay.max_threads; i++)
        if (!pr->caches[i].used) {
            idx = i;
            pr->caches[i].used = true;
            if (i + 1 > atomic_load_explicit(&pr->chan_hdr->tcache_hw, memory_order_relaxed))
                atomic_store_explicit(&pr->chan_hdr->tcache_hw, i + 1, memory_order_release);
            break;
        }
    pthread_mutex_unlock(&pr->tcache_lock);
    if (idx == pr->lay.max_threads) {
        if (!atomic_exchange_explicit(&warned, true, memory_order_relaxed)) {
            tcm__warn_once("more threads than tcmd --max-threads: the extra ones share the process's transfer tier");
        }
        return NULL;
    }
    tcm_thread_t *thr = calloc(1, sizeof *thr);
    if (!thr) {
        cache_release(idx);
        return NULL;
    }
    tcm_tcache_t *tc = thread_tcache(idx);
    /* its slot and its cache header are backed at the cache's first use,
     * not when the channel was made (most of --max-threads is never used) */
    tcm_slot_t *async = &pr->slots[tcm__async_slot(&pr->lay, idx, 0)];
    if (!pr->caches[idx].header_backed &&
        (tcm__back(&pr->slots[idx], sizeof pr->slots[idx]) != 0 ||
         tcm__back(async, TCM_ASYNC_SLOTS * sizeof *async) != 0 || tcm__back(tc, sizeof *tc) != 0)) {
        free(thr);
        cache_release(idx);
        return NULL; /* /dev/shm is full: run without a cache */
    }
    pr->caches[idx].header_backed = true;
    memset(tc->bins, 0, sizeof tc->bins);
    tc->ahead_bytes = 0;
    /* what the last thread on this cache gave back and left posted (settle_all's
     * leave) stays as it was: dropped from its bins, and settled by this thread
     * when it needs the slot, waking tcmd if it was posted quietly */
    uint8_t left_posted = 0;
    for (uint32_t j = 0; j < TCM_ASYNC_SLOTS; j++)
        if (atomic_load_explicit(&async[j].state, memory_order_relaxed) != TCM_SLOT_IDLE)
            left_posted |= (uint8_t)(1u << j);
    atomic_fetch_and(&tc->dropped, left_posted);
    thr->quiet_posted = left_posted;
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        tc->bins[cls].objs = start_array(tc, cls);
        tc->bins[TCM_PAGE_CLASS_DRAIN + cls].objs = (void **)((uint8_t *)tc + pr->lay.drain_objs_off[cls]);
    }
    tc->index = idx;
    tc->in_use = 1;
    atomic_fetch_add(&pr->nthreads, 1);
    thr->tc = tc;
    thr->index = idx;
    thr->epoch = pr->epoch;
    thr->config_gen = atomic_load(&pr->meta->config.gen);
    thr->flush_seen = atomic_load(&pr->chan_hdr->flush_gen);
    thr->budget = thread_budget();
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        thr->refill[cls] = refill_first(cls);
        thr->low[cls] = UINT32_MAX;
    }
    pthread_once(&thread_key_once, thread_key_create);
    pthread_setspecific(pr->thread_key, thr);
    tcm__tls_thread = thr;
    tcm__hot_cache_set();
    tcm__countdown_set(thr, 0); /* its first malloc arms the countdown (tcm__sample_arm) */
    return thr;
}

/* The calling thread's cache, registering it if needed; NULL if it must run
 * without one. */
static tcm_thread_t *current_thread(void)
{
    tcm_thread_t *thr = tcm__tls_thread;
    if (thr && thr->epoch != tcm__proc.epoch) { /* from before a shutdown */
        pthread_setspecific(tcm__proc.thread_key, NULL);
        free(thr);
        tcm__thread_forget();
        thr = NULL;
    }
    if (!thr)
        thr = thread_register();
    else
        check_config(thr);
    return thr;
}

/* The bytes below which a class's cache does not grow unless it is busy. */
#define QUIET_BYTES 65536u

/* Whether a class's bin is busy: its last miss or overflow was dealt with
 * a short while ago (a 32nd of the scavenge interval, 8 ms by default),
 * for objects above 4 KiB in proportion to their size (one 256 KiB object
 * every 8 ms is not busy, a 64 B one is). Measured from the end of the
 * last one (note_event), so that a slow round trip to tcmd does not make a
 * tight loop look quiet. A 16th held larson between two processes ~1 MB
 * higher for ~1 100 fewer REFILLs a run. */
static bool busy_class(const tcm_thread_t *thr, unsigned cls, uint64_t now)
{
    uint64_t since = now - thr->event_ns[cls], size = tcm__proc.classes[cls].size;
    return (since >> 12) * (size > 4096 ? size : 4096) < scavenge_interval_ns() / 32;
}

/* The end of a miss or overflow that started at `start`: the clock read
 * again where it may have waited for tcmd; a private heap's never waits (a
 * refill there is a call), and its start stands for its end (a clock read
 * is ~25 ns on a guest, and xmalloc's threads overflow hundreds of
 * thousands of times a run). */
static void note_event(tcm_thread_t *thr, unsigned cls, uint64_t start)
{
    thr->event_ns[cls] = tcm__proc.serve ? start : tcm__now_ns();
}

/* A class of one-object spans (56 KiB and up) that is not busy keeps
 * nothing in a thread's bin: a free hands its span straight back (without
 * waiting) and a malloc takes one from tcmd. Each of these objects is a
 * span, which tcmd's page heap cuts again for whichever class needs the
 * pages; in a bin, only its own class (or the two below it) could use it,
 * and a program that allocates many large sizes now and then kept one of
 * each per thread (larson between two processes: ~3.5 MB, the largest
 * part of its bins). A class used in a tight loop (the seed's 256 KiB x 64)
 * is busy and caches as any other. */
static bool quiet_span_class(const tcm_thread_t *thr, unsigned cls, uint64_t now)
{
    return tcm__proc.classes[cls].span_objs == 1 && !busy_class(thr, cls, now);
}

/* now: when the miss began */
TCM_NOINLINE static bool refill(tcm_thread_t *thr, unsigned cls, uint64_t now)
{
    tcm_bin_t *b = &thr->tc->bins[cls];
    thr->low[cls] = 0; /* it missed: nothing it held was idle */
    note_turn(thr, cls, true);
    /* What a refill brings waits in the bin until it is used: a class whose
     * last refill lasted a whole scavenge interval asks for half as many,
     * and only one that used its last up quickly doubles (and fetches its
     * next batch ahead). */
    bool quick = busy_class(thr, cls, now);
    uint32_t want = thr->refill[cls];
    if (!quick) {
        uint32_t size = tcm__proc.classes[cls].size, quiet = QUIET_BYTES / size ? QUIET_BYTES / size : 1;
        thr->refill[cls] = want / 2 > refill_first(cls) ? want / 2 : refill_first(cls);
        want = thr->refill[cls] < quiet ? thr->refill[cls] : quiet;
    }
    uint32_t cap = room_cap(thr, cls);
    if (cap && want > cap / 2)
        want = cap / 2;
    grow(thr, cls, quick ? want : want > b->max ? want - b->max : 0);
    if (want > b->max)
        want = b->max;
    /* a batch of this class asked for ahead */
    uint32_t idx;
    tcm_slot_t *ahead = fetched_ahead(thr, cls, &idx);
    if (ahead) {
        settle_slot(ahead, idx, thr, thr);
        if (b->count) {
            if (quick)
                slow_start(thr, cls);
            if (quick && tcm__xfer_empty(cls)) /* still nothing from this process's other threads */
                fetch_ahead(thr, cls);
            note_event(thr, cls, now);
            return true;
        }
    }
    uint64_t asked = 0;
    uint32_t got = tcm__xfer_take(cls, b->objs, want);
    bool from_daemon = !got;
    if (!got)
        got = take_from_daemon(thr, cls, b->objs, want, for_siblings(cls, want), &asked);
    if (!got && !tcm__proc.daemon_lost) {
        flush_for_nomem();
        grow(thr, cls, want);
        got = take_from_daemon(thr, cls, b->objs, want < b->max ? want : b->max, 0, &asked);
        /* other processes are giving back what they cache: wait for it a little */
        for (uint64_t ns = 1000000; !got && asked && ns <= NOMEM_WAIT_NS; ns *= 2) {
            tcm__sleep_ns(ns);
            got = take_from_daemon(thr, cls, b->objs, want < b->max ? want : b->max, 0, &asked);
        }
    }
    b->count = got;
    if (quick)
        slow_start(thr, cls);
    if (!from_daemon)
        thr->daemon_streak[cls] = 0;
    else if (got && ++thr->daemon_streak[cls] >= 2) {
        thr->daemon_streak[cls] = 2;
        if (quick)
            fetch_ahead(thr, cls);
    }
    note_event(thr, cls, now);
    return got != 0;
}

/* A run of its own from tcmd; *zeroed (where not NULL): tcmd says its
 * pages read zero (TCM_RUN_ZEROED). */
static int alloc_pages(size_t size, size_t align, bool sampled, uint64_t *off, uint64_t *asked, bool *zeroed)
{
    uint32_t idx;
    uint64_t npages = (size + TCM_PAGE_SIZE - 1) >> TCM_PAGE_SHIFT;
    tcm_slot_t *slot = tcm__slot_acquire(&idx);
    slot->op = TCM_OP_ALLOC_PAGES;
    slot->arg = npages;
    slot->arg2 = align > TCM_PAGE_SIZE ? align >> TCM_PAGE_SHIFT : 1;
    slot->cls = sampled ? TCM_ALLOC_SAMPLED : 0;
    slot->nresult = 0; /* (what an answer that does not say leaves) */
    int st = tcm__call(slot, idx);
    *off = slot->result;
    *asked = st == TCM_ST_NOMEM ? slot->result : 0;
    if (zeroed)
        *zeroed = st == TCM_ST_OK && slot->nresult == TCM_RUN_ZEROED;
    tcm__slot_release(slot);
    if (st == TCM_ST_OK) {
        tcm__check_given_run(*off, npages);
        tcm__map_given_run(*off, npages);
    }
    return st;
}

/* A page run from the run cache (*cached set) or tcmd (*zeroed: its pages
 * read zero); sampled: one from tcmd is marked as a sample's
 * (TCM_ALLOC_SAMPLED), one from the cache is not (the caller's SAMPLE,
 * waited for, marks it). */
static void *large_alloc(size_t size, size_t align, bool sampled, bool *cached, bool *zeroed)
{
    uint64_t off;
    *cached = *zeroed = false;
    if (tcm__ensure_attached() != 0 || size > tcm__proc.heap_size) {
        errno = ENOMEM;
        return NULL;
    }
    if (align <= TCM_PAGE_SIZE && (off = tcm__large_take((uint32_t)((size + TCM_PAGE_SIZE - 1) >> TCM_PAGE_SHIFT)))) {
        *cached = true;
        return tcm__proc.heap + off;
    }
    uint64_t asked;
    int st = alloc_pages(size, align, sampled, &off, &asked, zeroed);
    if (st == TCM_ST_NOMEM && !tcm__proc.daemon_lost) {
        flush_for_nomem();
        st = alloc_pages(size, align, sampled, &off, &asked, zeroed);
        for (uint64_t ns = 1000000; st == TCM_ST_NOMEM && asked && ns <= NOMEM_WAIT_NS; ns *= 2) {
            tcm__sleep_ns(ns);
            st = alloc_pages(size, align, sampled, &off, &asked, zeroed);
        }
    }
    if (st != TCM_ST_OK) {
        errno = ENOMEM;
        return NULL;
    }
    return tcm__proc.heap + off;
}

TCM_NOINLINE void *tcm__large_alloc(size_t size, size_t align)
{
    bool cached, zeroed;
    return large_alloc(size, align, false, &cached, &zeroed);
}

/* How far every object of a class is aligned: objects sit at multiples of
 * their size from the start of a span, which starts on a page. */
static uint32_t class_align(const tcm_class_info_t *ci)
{
    uint32_t low = ci->size & -ci->size;
    return ci->span_objs == 1 || low > TCM_PAGE_SIZE ? TCM_PAGE_SIZE : low;
}

/* A miss first takes an object of a class up to a quarter larger from the
 * thread's own bins, before it asks the transfer tier or tcmd: spans and
 * bins are per class, so each class would otherwise keep its own spare
 * objects, and a program that allocates many sizes keeps a little of each
 * (larson between two processes: the bins fell from ~13 to ~7 MB, with
 * fewer round trips). The free goes by the page's class, so the object
 * comes back to the bin it was taken from. Only classes whose objects are
 * at least as aligned: tcm_aligned_alloc picks a class by its alignment.
 * Only a few times a scavenge interval (BORROW_MAX): a borrowed object goes
 * back to the larger bin, so a class that always borrowed would never get
 * objects of its own and every malloc of it would miss (mleak's churn over
 * 64 sizes: 29% of its mallocs). */
#define BORROW_MAX 8u
static void *take_larger(tcm_thread_t *thr, unsigned cls)
{
    const tcm_class_info_t *classes = tcm__proc.classes;
    uint64_t most = (uint64_t)classes[cls].size * 5 / 4;
    uint32_t align = class_align(&classes[cls]);
    for (unsigned c = cls + 1; c < TCM_NCLASSES && classes[c].size <= most; c++) {
        tcm_bin_t *b = &thr->tc->bins[c];
        if (b->count && class_align(&classes[c]) >= align) {
            if (thr->low[c] >= b->count)
                thr->low[c] = b->count - 1; /* used: not idle */
            return b->objs[--b->count];
        }
    }
    return NULL;
}

/* Whether this allocation is the heap profile's sample: the hit path
 * subtracted its size from the countdown and found it below zero, or (a
 * miss, a page run) this subtracts it. The first one of a thread, with the
 * count at 0, arms it instead. */
static bool sample_due(tcm_thread_t *thr, size_t size)
{
    if (tcm__hot.sample_left >= 0 &&
        (tcm__hot.sample_left -= (int64_t)(size < INT64_MAX ? size : INT64_MAX)) >= 0)
        return false;
    if (tcm_likely(thr->sample_armed))
        return true;
    tcm__sample_arm(thr, false);
    if (tcm__hot.sample_left != INT64_MAX) { /* sampling: a thread's first malloc */
        maps_post_if_due(thr);
        sample_ask_ahead(thr, false, false);
    }
    return false;
}

/* ---- a sample waits for nobody ----
 *
 * A small sample's run is the one its thread asked for ahead (or one a
 * departed thread left in the run cache). tcmd was woken for it after the
 * thread's last sample, but on busy CPUs the scheduler may run it a slice
 * later (a millisecond and more), and a malloc must not wait that long for
 * the profile. So a sample whose run is not there yet is owed: the thread
 * counts down a shorter interval and the allocation at its end takes the
 * sample once the run is there, standing
 * for every byte the thread allocated since its last sample, this one's
 * included. The profile stays unbiased where the mix of allocations does
 * not change within that time; where it does (a burst's end), an owed
 * sample's bytes go to the next site, or nowhere if the thread allocates
 * no more: one sample's worth, as tcmd answers within an interval at the
 * default rates. With profile_rate 0, no bound on the profile's cost, a
 * sample is taken where it falls and waits for a run if need be (the
 * accuracy test's: at its 4 KiB interval, with a limit, a sample is owed
 * more often than not). The retries' interval starts around
 * SAMPLE_RETRY_MEAN and doubles with each, up to the sample's own mean: a
 * thread that allocates gigabytes a second had retried every few
 * microseconds until the run came, each retry a slow-path malloc that takes
 * the process's run-cache lock (counted in docs/BENCHMARKS.md, "The heap
 * profile"). */
#define SAMPLE_RETRY_MEAN (64u << 10)

/* The countdown ran out at this allocation: the mean its sample is told
 * with (its weight's), and a small one's run (off); or 0: not sampled, the
 * sample is owed (sample_owed: the bytes since the last sample). */
static uint64_t sample_point(tcm_thread_t *thr, size_t size, uint64_t *off)
{
    uint64_t mean = thr->sample_mean;
    if (thr->sample_owed) { /* a retry: what it counted down (this allocation too) joins the weight */
        uint64_t counted = (uint64_t)((int64_t)thr->sample_retry - tcm__hot.sample_left);
        thr->sample_owed += counted;
        thr->sample_drawn += counted; /* (the pace's interval) */
        mean = tcm__sample_mean_for(thr->sample_owed, size);
    }
    if (size <= TCM_PAGE_SIZE) {
        /* under a rate a sample waits for nothing: its SAMPLE, and the
         * FREE_PAGES of its run, must have async slots ready */
        bool rate = atomic_load_explicit(&tcm__proc.meta->profile_rate, memory_order_relaxed) != 0;
        bool ready = !rate || async_ready(thr) >= 2;
        *off = 0;
        if (ready) {
            *off = sample_take_ahead(thr);
            if (!*off)
                *off = tcm__large_marked();
        } else {
            ring_quiet(thr); /* owed to quiet posts */
        }
        if (!*off && rate) {
            if (!thr->sample_owed) {
                thr->sample_owed = (uint64_t)((int64_t)thr->sample_drawn - tcm__hot.sample_left);
                thr->sample_retry_mean = SAMPLE_RETRY_MEAN;
            } else {
                thr->sample_retry_mean *= 2;
            }
            if (thr->sample_retry_mean > thr->sample_mean)
                thr->sample_retry_mean = thr->sample_mean;
            ring_ahead(thr);
            tcm__countdown_set(thr, (int64_t)(thr->sample_retry = tcm__sample_draw(thr, thr->sample_retry_mean)));
            return 0;
        }
    }
    thr->sample_owed = 0;
    tcm__sample_arm(thr, true);
    return mean;
}

/* A request of the heap profile's, which nobody waits for: on an async
 * slot, posted without waking tcmd (served at its next turn); on the
 * thread's own slot, answered, when every async one holds a batch asked for
 * ahead, or when the sample marks its run (wait: a run tcmd did not mark,
 * whose free must not go anywhere but to tcmd once the application has
 * it). sample NULL: the process's code mappings. */
typedef struct sample_req {
    uint64_t off, mean;
    size_t size;
    uintptr_t cfa;
    bool wait;
} sample_req_t;

static void profile_post(tcm_thread_t *thr, const sample_req_t *sample)
{
    uint32_t idx;
    tcm_slot_t *slot = sample && sample->wait ? NULL : async_take(thr, &idx);
    bool own = !slot;
    if (own)
        slot = tcm__slot_acquire(&idx);
    if (sample)
        tcm__sample_fill(slot, sample->off, sample->size ? sample->size : 1, sample->mean, sample->cfa);
    else
        tcm__maps_fill(slot);
    if (!own) {
        post_quietly(thr, slot, idx);
        if (sample && async_ready(thr) < 2)
            ring_quiet(thr); /* the next sample's slots */
        return;
    }
    tcm__call(slot, idx);
    tcm__slot_release(slot);
}

/* The process's code mappings, when it has sent none as this client or
 * its objects changed: at a thread's first malloc while sampling is on
 * (posted quietly, served with that thread's first refill, so that tcmd
 * makes the process's record then, not at its first SAMPLE on a heap
 * thread just woken onto a CPU the sampling threads want), and before
 * each sample. */
static void maps_post_if_due(tcm_thread_t *thr)
{
    if (tcm__maps_due())
        profile_post(thr, NULL);
}

/* tcmd is told of a sampled allocation (a page run of its own, so that its
 * free reaches tcmd whoever frees it) with the stack above
 * tcm__malloc_slow's frame (cfa), and first of the process's code mappings
 * when it has none or they changed. A sample tcmd does not keep is only a
 * sample less. */
TCM_NOINLINE static void sample_post(tcm_thread_t *thr, const sample_req_t *sample)
{
    maps_post_if_due(thr);
    profile_post(thr, sample);
    tcm__sample_done(thr);
}

/* A run for an allocation above TCM_MAX_SMALL (an attached process's
 * thread counts it down for the heap profile: the allocation of a process
 * not yet attached tries attaching itself, not twice). A sampled one gets
 * a run of its own as any, from the run cache (marked by a SAMPLE waited
 * for: a round trip, where a fresh run of megabytes would cost its commit
 * and faults too, milliseconds) or a fresh one, and its stack is told from
 * the frame whose CFA is cfa up. *zeroed: its pages read zero. */
static void *large_for(size_t size, uintptr_t cfa, bool *zeroed)
{
    tcm_thread_t *thr = atomic_load_explicit(&tcm__proc.attached, memory_order_acquire) ? current_thread() : NULL;
    uint64_t mean = 0, off;
    if (thr && tcm_unlikely(sample_due(thr, size)))
        mean = sample_point(thr, size, &off);
    bool cached;
    void *p = large_alloc(size, 0, mean != 0, &cached, zeroed);
    if (p && mean)
        sample_post(thr, &(sample_req_t){(uint64_t)((uint8_t *)p - tcm__proc.heap), mean, size, cfa, cached});
    return p;
}

/* A run whose pages may not read zero, cleared. On a private heap, whose
 * pages are the process's own, a run of CLEAR_DISCARD_BYTES or more that
 * is mostly not resident (its last user touched it sparsely, or it was
 * swapped out) is given back to the kernel instead, whose zeroes come as
 * the program touches them: a table used sparsely maps what it uses, as
 * the system malloc's fresh mapping or jemalloc's purge does; one mostly
 * resident is cleared, as a memset costs a fifth of the fault a page
 * that a program using it densely again would take (docs/BENCHMARKS.md,
 * "calloc of page runs"). (A page only read maps the zero page, which
 * counts as resident: a run read all over is cleared.) A shared heap's
 * pages hold their data wherever they are mapped: cleared. */
#define CLEAR_DISCARD_BYTES (1u << 20)
static void clear_run(void *p, size_t size)
{
    size_t run = (size + TCM_PAGE_SIZE - 1) & ~(size_t)(TCM_PAGE_SIZE - 1);
    if (tcm__proc.serve && size >= CLEAR_DISCARD_BYTES && tcm__released_reads_zero()) {
        int64_t resident = tcm__resident_bytes(p, run);
        if (resident >= 0 && (uint64_t)resident < run / 2 && tcm__discard(p, run) == 0)
            return;
    }
    memset(p, 0, size);
}

/* calloc of a page run: cleared only where its pages may not read zero
 * (one from the run cache, or one tcmd does not say is zero), so that a
 * calloc of megabytes touches no page the program does not, as with the
 * system's fresh mappings. */
TCM_NOINLINE void *tcm__calloc_large(size_t size)
{
    bool zeroed;
    void *p = large_for(size, (uintptr_t)__builtin_dwarf_cfa(), &zeroed);
    if (p && !zeroed)
        clear_run(p, size);
    return p;
}

TCM_NOINLINE void *tcm__malloc_slow(size_t size)
{
    if (size > TCM_MAX_SMALL) {
        bool zeroed;
        return large_for(size, (uintptr_t)__builtin_dwarf_cfa(), &zeroed);
    }
    /* the thread's record, once: a small allocation registers it (which
     * attaches) */
    tcm_thread_t *thr = current_thread();
    uint64_t mean = 0, off = 0, asked; /* mean: the sample's weight (what its interval was drawn around) */
    if (thr && tcm_unlikely(sample_due(thr, size)))
        mean = sample_point(thr, size, &off);
    /* a sampled allocation gets a run of its own, marked by tcmd as a
     * sample's: the run asked for ahead, or a fresh one (TCM_ALLOC_SAMPLED);
     * its page faults in where it is touched (mapping it ahead, a system
     * call, and then its first write cost more; docs/BENCHMARKS.md, "The
     * heap profile") */
    if (off || (mean && alloc_pages(size ? size : 1, 0, true, &off, &asked, NULL) == TCM_ST_OK)) {
        sample_post(thr, &(sample_req_t){off, mean, size, (uintptr_t)__builtin_dwarf_cfa(), false});
        sample_ask_ahead(thr, true, !atomic_load_explicit(&tcm__proc.meta->profile_rate, memory_order_relaxed));
        return tcm__proc.heap + off;
    }
    unsigned cls = tcm__size_class(size);
    if (!thr) {
        if (!atomic_load(&tcm__proc.attached)) {
            errno = ENOMEM;
            return NULL;
        }
        void *p = tcm__xfer_alloc(cls);
        if (!p)
            errno = ENOMEM;
        return p;
    }
    tcm_bin_t *b = &thr->tc->bins[cls];
    if (!b->count) {
        void *p = thr->borrowed[cls] < BORROW_MAX ? take_larger(thr, cls) : NULL;
        if (p) {
            thr->borrowed[cls]++;
            return p;
        }
        uint64_t now = tcm__now_ns();
        bool quiet = quiet_span_class(thr, cls, now);
        if (!refill(thr, cls, now)) {
            errno = ENOMEM;
            return NULL;
        }
        if (tcm__proc.classes[cls].size < TCM_CACHELINE)
            line_on_top(b, tcm__proc.classes[cls].size);
        if (quiet && b->count == 1)
            set_room(thr, cls, 0); /* nothing stays for a free to fill */
    }
    return b->objs[--b->count];
}

/* A thread's first touch of a small class is a free: most likely of another
 * thread's object, on a cache line that thread may still write
 * (cache-scratch). The bin gets a batch of its own and the object goes
 * under it, so that this thread's next mallocs land elsewhere. Only a bin
 * never refilled: one emptied by a flush (tcmd asked for memory back) must
 * not fetch a batch on its next free. No waiting for memory here: false
 * when none comes at once (the bin has grown by then, so it is not asked
 * again). */
TCM_COLD static bool free_first(tcm_thread_t *thr, unsigned cls, void *p)
{
    tcm_bin_t *b = &thr->tc->bins[cls];
    uint32_t want = thr->refill[cls];
    grow(thr, cls, want + 1);
    if (b->max < want + 1)
        return false;
    uint64_t asked;
    uint32_t got = tcm__xfer_take(cls, b->objs + 1, want);
    if (!got)
        got = take_from_daemon(thr, cls, b->objs + 1, want, 0, &asked);
    if (!got)
        return false;
    b->objs[0] = p;
    b->count = got + 1;
    slow_start(thr, cls);
    return true;
}

TCM_NOINLINE void tcm__free_slow(void *p)
{
    tcm_proc_t *pr = &tcm__proc;
    if (!p)
        return;
    uint64_t off = (uintptr_t)p - atomic_load(&tcm__heap_base);
    if (off >= atomic_load(&tcm__heap_bytes)) {
        if (tcm__ensure_attached() != 0)
            tcm__fatal("tcm_free(): invalid pointer %p (not attached to a tcm heap)", p);
        off = (uintptr_t)p - atomic_load(&tcm__heap_base);
        if (off >= atomic_load(&tcm__heap_bytes))
            tcm__fatal("tcm_free(): invalid pointer %p (not in the tcm heap)", p);
    }
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    unsigned pc = atomic_load(&tcm__page_class)[page], cls = tcm__page_small_class(pc);
    const tcm_span_t *sp = &pr->spans[pr->page_span[page]];
    if (pc == TCM_PAGE_CLASS_FREE)
        tcm__fatal("tcm_free(): invalid pointer %p (not an allocated block; double free?)", p);
    if (tcm_unlikely(!cls && pc != TCM_PAGE_CLASS_LARGE))
        tcm__fatal_page_class("tcm_free()", p, pc);
    if (pc == TCM_PAGE_CLASS_LARGE) {
        if (off != ((uint64_t)sp->first << TCM_PAGE_SHIFT))
            tcm__fatal("tcm_free(): invalid pointer %p (inside a page run)", p);
        /* a fork child's first call may be this free: the heap is mapped,
         * the channel (the parent's) is not until it attaches */
        if (tcm_unlikely(tcm__ensure_attached() != 0))
            return; /* no tcmd to give it back to: it stays allocated, as any of a lost tcmd */
        /* a sampled run goes back to tcmd, which drops its sample */
        if (atomic_load_explicit((const _Atomic uint32_t *)&sp->sample, memory_order_relaxed))
            free_pages_async(off, sp->npages <= SAMPLE_QUIET_PAGES);
        else if (!tcm__large_keep(off, sp->npages))
            free_pages_async(off, false);
        return;
    }
    uint64_t rel = off - ((uint64_t)sp->first << TCM_PAGE_SHIFT);
    if (rel % pr->classes[cls].size || (off & (TCM_ALIGN - 1)))
        tcm__fatal("tcm_free(): invalid pointer %p (not the start of a block)", p);

    tcm_thread_t *thr = current_thread();
    if (!thr) {
        tcm__xfer_free(cls, p);
        return;
    }
    if (pc != cls) {
        drain_free(thr, cls, p);
        return;
    }
    tcm_bin_t *b = &thr->tc->bins[cls];
    if (b->max == 0 && thr->refill[cls] == refill_first(cls) && pr->classes[cls].size < 2 * TCM_CACHELINE &&
        free_first(thr, cls, p))
        return;
    if (b->count >= b->max) {
        uint64_t now = tcm__now_ns();
        if (quiet_span_class(thr, cls, now) && bin_backed(thr, cls, b->count + 1) > b->count) {
            /* listed in the bin until the RETURN is posted, as any object
             * handed back: a death in between leaves it to reclaim */
            note_event(thr, cls, now);
            b->objs[b->count++] = p;
            return_async(thr, cls, b, 1);
            return;
        }
        note_turn(thr, cls, false);
        /* a bin grows with use, not with time: only one that overflows again soon */
        if (busy_class(thr, cls, now))
            grow(thr, cls, thr->refill[cls]);
        if (b->count >= b->max) {
            /* full and may not grow: hand a whole batch on (a capped room: half of it) */
            uint32_t k = pr->classes[cls].batch < b->count ? pr->classes[cls].batch : b->count;
            if (room_cap(thr, cls))
                k = b->count - b->max / 2;
            release_objects(cls, b, b->count - k, false, thr);
            /* A working set the size of the bin's limit (the seed's 64
             * objects of 256 KiB in a 16 MiB budget) would otherwise cycle
             * for ever: the next miss refills a whole batch where the
             * round needs fewer, the surplus overflows here, a batch goes
             * out, and the leftover is the same every round, so every
             * round pays a miss and an overflow through the transfer tier.
             * Refilling from one object again (doubling per miss) fetches
             * only a little past the need, and the bin ends a round full. */
            thr->refill[cls] = 1;
            if (thr->low[cls] > b->count)
                thr->low[cls] = b->count;
        }
        note_event(thr, cls, now); /* (a batch handed back may wait for a slot of tcmd's) */
    }
    b->objs[b->count++] = p;
}

/* Whether a bin of n blocks keeps no more that realloc moved out of: one
 * more would be TCM_OUTGROWN_BYTES, or past its room. (Not what the
 * class's next refill brings: where each block realloc moves out of a
 * class is followed by a malloc of it, as for strings built one after
 * another, a bin then went back at almost every move, and was refilled at
 * the next malloc.) */
static bool outgrown_full(const tcm_bin_t *b, unsigned cls, uint32_t n)
{
    return n && (n >= b->max || (uint64_t)(n + 1) * tcm__proc.classes[cls].size >= TCM_OUTGROWN_BYTES);
}

/* A block that realloc moved into a larger class: the program is growing
 * its objects out of this class, and a bin that keeps every block they
 * leave keeps the spans those sit in from emptying, and their pages from
 * the larger classes (realloc_grow, 1 000 buffers grown by realloc 3-8
 * bytes at a time, as redis grows its listpacks: every buffer passes
 * through each class, and the thread's bins ended holding 1 024 blocks of
 * each class it passed, 16 MB of a 29 MB peak). So once the bin holds
 * TCM_OUTGROWN_BYTES (outgrown_full), the whole bin goes back to tcmd (not
 * to the transfer tier: the spans are to empty, and any block left in a
 * bin keeps its span). tcm__free_outgrown_fast takes the rest. */
TCM_NOINLINE void tcm__free_outgrown(void *p)
{
    tcm_thread_t *thr = tcm__tls_thread;
    unsigned cls;
    if (!thr || thr->epoch != tcm__proc.epoch || !tcm__page_class_of(p, &cls) || !cls || cls >= TCM_NCLASSES) {
        tcm__free_slow(p); /* a page run, a draining span's block, no cache: as any free */
        return;
    }
    tcm_bin_t *b = &thr->tc->bins[cls]; /* (the drop-in calls this in the library: not tcm__hot's) */
    uint32_t n = b->count;
    if (outgrown_full(b, cls, n)) {
        release_objects(cls, b, 0, true, thr);
        n = 0;
    }
    if (n < b->max) {
        b->objs[n] = p;
        b->count = n + 1;
        return;
    }
    tcm__free_slow(p); /* a bin of no room */
}

/* tcm_shutdown: every cache of the process back to the daemon. The caller
 * guarantees no other thread is using tcm. */
TCM_COLD void tcm__flush_all(void)
{
    tcm_proc_t *pr = &tcm__proc;
    for (uint32_t i = 0; i < pr->lay.max_threads; i++) {
        /* a cache no thread uses may still have what its last one left posted */
        if (!pr->caches[i].header_backed)
            continue;
        for (uint32_t j = 0; j < TCM_ASYNC_SLOTS; j++) {
            uint32_t a = tcm__async_slot(&pr->lay, i, j);
            if (atomic_load_explicit(&pr->slots[a].state, memory_order_relaxed) != TCM_SLOT_IDLE)
                settle_slot(&pr->slots[a], a, NULL, NULL);
        }
        if (!pr->caches[i].used)
            continue;
        tcm_tcache_t *tc = thread_tcache(i);
        for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
            tcm_bin_t *b = &tc->bins[cls], *d = &tc->bins[TCM_PAGE_CLASS_DRAIN + cls];
            if (b->count)
                tcm__return_objects(cls, b->objs, b->count, &b->count);
            if (d->count)
                tcm__return_objects(cls, d->objs, d->count, &d->count);
            b->max = 0;
        }
    }
    tcm__xfer_trim(true);
    atomic_store(&pr->xfer_bytes, 0);
    atomic_store(&pr->large_bytes, 0);
    tcm_thread_t *thr = tcm__tls_thread;
    if (thr) {
        pthread_setspecific(pr->thread_key, NULL);
        free(thr);
    }
    tcm__thread_forget();
}
