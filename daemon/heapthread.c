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
#include "decay.h"
#include "heapthread.h"
#include "holders.h"
#include "log.h"
#include "mailbox.h"
#include "pageheap.h"
#include "prim.h"
#include "quota.h"
#include "reclaim.h"
#include "requests.h"
#include "ring.h"
#include "samples.h"
#include "server.h"
#include "tcm_assert.h"
#include "huge.h"
#include "validate.h"

#define EXPENSIVE_CHECK_EVERY 4096u /* requests between whole-heap validations (assert level 3) */

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
        /* answered at the job's end (release_step): it goes on across
         * turns, the clients served between its steps */
        tcm__central_drop_empty_ht(&srv->h); /* spans to the page heap, still committed */
        tcm__release_start_ht(srv, 0, NULL, TCM_RELEASE_ANSWER | TCM_RELEASE_SPLIT);
        pthread_mutex_unlock(&srv->mbox_lock);
        return;
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
                tcm__release_start_ht(srv, 0, NULL, TCM_RELEASE_SPLIT);
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

/* A step of giving free pages back, and the answer to the `release`
 * command that waits for the job's end (measured, not estimated: what the
 * tmpfs object stopped using). */
static bool release_step(tcm_server_t *srv)
{
    tcm_release_job_t *j = &srv->release_job;
    if (!tcm__release_step_ht(srv))
        return false;
    if (!j->active && j->answer) {
        j->answer = false;
        pthread_mutex_lock(&srv->mbox_lock);
        srv->mbox_result = j->released;
        srv->mbox_done = true;
        pthread_mutex_unlock(&srv->mbox_lock);
        uv_async_send(&srv->mbox_async);
    }
    return true;
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

/* Shares of the heap thread's time. Every user (uid) whose clients have
 * requests posted, or have died and wait to be reaped, gets TCM_UID_TURN_NS
 * of that work per turn, however many
 * processes or clients it has; its clients are served in turn order from
 * where the last turn cut its share short, so that within a user each
 * process gets its turn too. A user with nothing posted costs a look at
 * its rings. So another user's request waits at most one turn: the shares
 * of the users with work, plus one request each (a request's cost is
 * bounded by its objects, at most TCM_MAX_BATCH, or by a step: an
 * ALLOC_PAGES commits at most TCM_COMMIT_STEP_PAGES per serve and goes on
 * next time, continuation.c), plus a step of giving free pages back
 * (release_step). */
#define TCM_UID_TURN_NS (250u * 1000u)
#define TURN_UIDS 32768u /* twice the users a turn can see at most: one per client */
_Static_assert(TURN_UIDS >= 2 * TCM_CLIENTS_MAX, "a turn's user table never fills");

static struct uid_turn {
    uint32_t uid, stamp; /* stamp: the turn it belongs to; older ones are free */
    uint64_t left_ns;
} uid_turns[TURN_UIDS];
static uint32_t turn_stamp;
static uint32_t turn_start; /* the client the next turn begins with */

static void new_turn(void)
{
    if (++turn_stamp == 0) { /* every 2^32 turns: no stale entry may look current */
        memset(uid_turns, 0, sizeof uid_turns);
        turn_stamp = 1;
    }
}

static uint64_t *uid_share(uint32_t uid)
{
    uint32_t i = tcm__uid_hash(uid, TURN_UIDS - 1);
    while (uid_turns[i].stamp == turn_stamp && uid_turns[i].uid != uid)
        i = (i + 1) & (TURN_UIDS - 1);
    if (uid_turns[i].stamp != turn_stamp)
        uid_turns[i] = (struct uid_turn){uid, turn_stamp, TCM_UID_TURN_NS};
    return &uid_turns[i].left_ns;
}

/* One turn over every client; true if anything was done. */
static bool serve_all(tcm_server_t *srv)
{
    bool work = false, cut = false;
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    uint32_t start = turn_start < hw ? turn_start : 0, next = start;
    new_turn();
    tcm__quota_sync_ht(srv);
    for (uint32_t k = 0; k < hw; k++) {
        uint32_t i = start + k < hw ? start + k : start + k - hw;
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (!c)
            continue;
        uint32_t state = atomic_load_explicit(&c->rec->state, memory_order_acquire);
        if (state == TCM_REC_ACTIVE || state == TCM_REC_EVICTED) {
            uint64_t *left = uid_share(c->rec->uid);
            if (*left)
                work |= tcm__serve_client_budget_ht(srv, c, state == TCM_REC_EVICTED, left) != 0;
            if (!*left && !cut && tcm__ring_ready(c->ring, c->lay.ring_cap, c->rec->tail)) {
                cut = true; /* its user's share ran out with this one still waiting: it goes first next */
                next = i;
            }
        } else if (state == TCM_REC_DEAD) {
            /* reclaiming its caches is its user's work too (one reap at
             * least: its share was not spent) */
            uint64_t *left = uid_share(c->rec->uid);
            if (*left) {
                uint64_t t0 = tcm__now_ns(), dt;
                reap(srv, i, c);
                dt = tcm__now_ns() - t0 + 1;
                *left = dt < *left ? *left - dt : 0;
                work = true;
            } else if (!cut) {
                cut = true;
                next = i;
            }
        }
    }
    turn_start = next;
    if (atomic_load_explicit(&srv->mbox_cmd, memory_order_acquire) != TCM_MBOX_NONE) {
        tcm__heap_run_command_ht(srv);
        work = true;
    }
    work |= tcm__holders_step_ht(srv); /* departed holders merged into their groups, a bounded step */
    work |= release_step(srv);
    return work;
}

static bool anything_pending(tcm_server_t *srv)
{
    if (atomic_load(&srv->stop) || atomic_load(&srv->mbox_cmd) != TCM_MBOX_NONE || tcm__holders_pending(srv) ||
        atomic_load(&srv->state->quota_seq) != srv->quota.seq || srv->release_job.active)
        return true;
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (c && (atomic_load(&c->rec->state) == TCM_REC_DEAD || c->pages_cont.run ||
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
            uint64_t now = tcm__now_ns();
            tcm__decay_window_ht(srv, now);
            tcm__huge_tick_ht(srv, now);
            if (TCM_EXPENSIVE_CHECKS)
                expensive_check(srv, &next_check);
            continue;
        }
        uint64_t now = tcm__now_ns();
        tcm__decay_ht(srv, now);
        tcm__decay_window_ht(srv, now);
        tcm__huge_tick_ht(srv, now);
        tcm__profile_ahead_ht(srv);
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
            /* a second, or the next look at the heap while the collapser
             * has ranges (its answers, and the ranges after them) */
            tcm__wait(&srv->bell->seq, seq, tcm__huge_busy(srv) ? TCM_HUGE_SCAN_NS : 1000000000ll);
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
