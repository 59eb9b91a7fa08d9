/* channel.c — the client side of the ring: post a request on a slot, ring
 * the doorbell (or not, for a request tcmd need not serve soon), and (now
 * or at the thread's next slow path) spin briefly, then sleep on the
 * slot's futex until the daemon answers. A daemon that disappeared is
 * noticed by its socket; the call then waits (bounded) for the next tcmd
 * and resumes with it. */
#define _GNU_SOURCE
#include <errno.h>

#include "channel.h"
#include "client.h"
#include "ctlsock.h"
#include "diag.h"
#include "prim.h"
#include "reconnect.h"
#include "ring.h"

/* Objects freed by one thread can come back to another through the daemon,
 * a synchronisation ThreadSanitizer cannot see (it is in another process):
 * tell it that every request orders after every earlier one. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char tsan_daemon;
#define DAEMON_RELEASE() __tsan_release(&tsan_daemon)
#define DAEMON_ACQUIRE() __tsan_acquire(&tsan_daemon)
/* An offset that came from another process may name an object a thread of
 * this one freed before it went through tcmd to that process. */
void tcm__tsan_from_elsewhere(void)
{
    DAEMON_ACQUIRE();
}
#else
#define DAEMON_RELEASE() ((void)0)
#define DAEMON_ACQUIRE() ((void)0)
#endif

#define SPIN_NS 5000ll          /* a served request takes about a microsecond; past that the heap thread is
                                   asleep or busy, and spinning would take the CPU it needs */
#define WAIT_SLICE_NS 100000000ll /* between checks that the daemon is alive */

#define AWAY_SLICE_NS 20000000ll   /* while tcmd is away: how often to look for the next one */
#define LOST_RETRY_NS 1000000000ull /* after giving up: how often a call tries once more */

/* After a resume: tcmd adopted us and wants to hear from us. */
static void resume_if_asked(void)
{
    if (atomic_load_explicit(&tcm__proc.chan_hdr->resume_wanted, memory_order_relaxed))
        tcm__await_daemon();
}

void tcm__ring_bell(void)
{
    tcm_proc_t *pr = &tcm__proc;
    if (!pr->serve)
        tcm__bell_ring((_Atomic uint32_t *)&pr->meta->heap_sleeping, pr->bell);
}

/* Post the request on a slot without waiting for it, ringing tcmd's bell
 * or not; false (and nothing posted) when tcmd is lost and not back yet. */
static bool post(tcm_slot_t *slot, uint32_t slot_index, bool ring)
{
    tcm_proc_t *pr = &tcm__proc;
    if (pr->daemon_lost) {
        uint64_t now = tcm__now_ns();
        if (now < pr->lost_retry_ns)
            return false;
        pr->lost_retry_ns = now + LOST_RETRY_NS;
        pr->outage_deadline_ns = now; /* one try */
        if (tcm__await_daemon() != 0)
            return false;
    }
    DAEMON_RELEASE();
    atomic_store_explicit(&slot->waiting, 0, memory_order_relaxed);
    slot->req_seq++;
    /* release: a recovering tcmd may read the slot without the ring */
    atomic_store_explicit(&slot->state, TCM_SLOT_POSTED, memory_order_release);
    /* full: cannot happen in a channel of tcmd's (a cell for every slot);
     * a private heap's ring has fewer (tcm__chan_layout), and what waits in
     * it is served here */
    while (!tcm__ring_push(pr->ring, pr->lay.ring_cap, slot_index))
        pr->serve ? pr->serve() : tcm__yield();
    if (pr->serve) {
        pr->serve();
        return true;
    }
    if (ring)
        tcm__ring_bell();
    return true;
}

bool tcm__post(tcm_slot_t *slot, uint32_t slot_index)
{
    return post(slot, slot_index, true);
}

bool tcm__post_quiet(tcm_slot_t *slot, uint32_t slot_index)
{
    return post(slot, slot_index, false);
}

/* Wait for the answer to a posted request (rung: its post rang the bell;
 * otherwise it is rung now, unless the answer is there): spin briefly,
 * then sleep on the slot. Returns the slot's status, or TCM_ST_NOMEM when
 * tcmd is gone for good (the request may then never be served). */
static int await_answer(tcm_slot_t *slot, bool rung)
{
    tcm_proc_t *pr = &tcm__proc;
    if (!rung && atomic_load_explicit(&slot->state, memory_order_relaxed) != TCM_SLOT_DONE)
        tcm__ring_bell(); /* a request posted quietly is waited for only once tcmd was told of it */
    uint64_t start = 0; /* the clock is read once the answer was not there at once (a private heap's always is) */
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(&slot->state, memory_order_acquire) == TCM_SLOT_DONE) {
            DAEMON_ACQUIRE();
            resume_if_asked();
            return slot->status;
        }
        if (i == 0)
            start = tcm__now_ns();
        tcm__cpu_relax();
        if (i % 64 == 63 && tcm__now_ns() - start > SPIN_NS)
            break;
    }
    atomic_store_explicit(&slot->waiting, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    /* While tcmd is away the request stays posted: the next tcmd serves the
     * rings of the clients it adopts, so the answer may come before we have
     * even reconnected. */
    bool away = false;
    while (atomic_load_explicit(&slot->state, memory_order_acquire) != TCM_SLOT_DONE) {
        int r = tcm__wait(&slot->state, TCM_SLOT_POSTED, away ? AWAY_SLICE_NS : WAIT_SLICE_NS);
        if (r != -ETIMEDOUT || (!away && !tcm__daemon_gone()))
            continue;
        away = true;
        int a = tcm__await_daemon();
        if (a == 0)
            away = false;
        else if (a != -EAGAIN) {
            pr->daemon_lost = true;
            pr->lost_retry_ns = tcm__now_ns() + LOST_RETRY_NS;
            tcm__warn_once(a == -ETIMEDOUT ? "tcmd did not come back in time: allocations fail with ENOMEM "
                                             "until it does"
                                           : "tcmd does not know this process any more: allocations fail with ENOMEM");
            return TCM_ST_NOMEM;
        }
    }
    atomic_store_explicit(&slot->waiting, 0, memory_order_relaxed);
    DAEMON_ACQUIRE();
    resume_if_asked();
    return slot->status;
}

int tcm__await(tcm_slot_t *slot)
{
    return await_answer(slot, false);
}

int tcm__await_rung(tcm_slot_t *slot)
{
    return await_answer(slot, true);
}

int tcm__call(tcm_slot_t *slot, uint32_t slot_index)
{
    if (!tcm__post(slot, slot_index))
        return TCM_ST_NOMEM;
    return await_answer(slot, true);
}

/* The calling thread's own slot, or the shared spare one (locked). */
tcm_slot_t *tcm__slot_acquire(uint32_t *index)
{
    tcm_thread_t *thr = tcm__tls_thread;
    if (thr) {
        *index = thr->index;
        return &tcm__proc.slots[thr->index];
    }
    pthread_mutex_lock(&tcm__proc.spare_lock);
    *index = tcm__proc.lay.max_threads;
    return &tcm__proc.slots[*index];
}

void tcm__slot_release(tcm_slot_t *slot)
{
    atomic_store_explicit(&slot->state, TCM_SLOT_IDLE, memory_order_relaxed);
    if (slot == &tcm__proc.slots[tcm__proc.lay.max_threads])
        pthread_mutex_unlock(&tcm__proc.spare_lock);
}

int tcm__back(void *addr, uint64_t len)
{
    return tcm__proc.serve ? 0 : tcm__populate(addr, len);
}

/* Back the first `want` entries of an object array in the channel before
 * they are written; returns how many are backed (fewer only when /dev/shm
 * is full). */
uint32_t tcm__back_array(void **objs, uint32_t *backed, uint32_t want)
{
    if (want <= *backed || tcm__proc.serve)
        return want;
    /* to the end of the OS page entry want - 1 is on: the arrays do not
     * start on a page, and a page's worth from the first entry backed two
     * pages for each class a thread used (glibc_thread: 0.5 MB of its 12);
     * the heap's 8 KiB page, two of the OS's, did the same */
    uintptr_t page = tcm__os_page_size(), end = ((uintptr_t)(objs + want) + page - 1) & ~(page - 1);
    uint32_t to = (uint32_t)((end - (uintptr_t)objs) / sizeof(void *));
    if (tcm__populate(objs + *backed, (uint64_t)(to - *backed) * sizeof(void *)) == 0)
        *backed = to;
    return want < *backed ? want : *backed;
}

void tcm__fatal_refused(int st, unsigned cls)
{
    tcm__fatal("tcm_free(): tcmd refused an object of class %u: %s (double free or invalid pointer)",
               cls, tcm__status_msg(st));
}

tcm_slot_t *tcm__return_fill(unsigned cls, void *const *objs, uint32_t k, uint32_t *index)
{
    uintptr_t base = (uintptr_t)tcm__proc.heap;
    tcm_slot_t *slot = tcm__slot_acquire(index);
    slot->op = TCM_OP_RETURN;
    slot->cls = cls;
    slot->count = k;
    for (uint32_t i = 0; i < k; i++)
        slot->offs[i] = (uintptr_t)objs[i] - base;
    return slot;
}

tcm_slot_t *tcm__return_post(unsigned cls, void *const *objs, uint32_t k, int *status)
{
    uint32_t idx;
    tcm_slot_t *slot = tcm__return_fill(cls, objs, k, &idx);
    *status = tcm__call(slot, idx);
    return slot;
}

void tcm__return_done(tcm_slot_t *slot, int status, unsigned cls)
{
    tcm__slot_release(slot);
    if (status != TCM_ST_OK && status != TCM_ST_NOMEM)
        tcm__fatal_refused(status, cls);
}

/* Give the top n objects of a cache array (objs[0..*count)) back to the
 * daemon, MAX_BATCH at a time, from the top. *count drops by each batch
 * once it is answered and before the slot goes back to IDLE, so a tcmd that
 * reclaims this process after a death never frees an object it already
 * took back (and may have handed to another process): it skips those that
 * an answered RETURN still lists. count may be NULL (an array of one's own). */
int tcm__return_objects(unsigned cls, void **objs, uint32_t n, uint32_t *count)
{
    uint32_t top = count ? *count : n;
    while (n) {
        uint32_t k = n < TCM_MAX_BATCH ? n : TCM_MAX_BATCH;
        int st;
        tcm_slot_t *slot = tcm__return_post(cls, objs + top - k, k, &st);
        top -= k;
        if (count)
            *count = top;
        tcm__return_done(slot, st, cls);
        n -= k;
    }
    return 0;
}
