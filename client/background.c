/* background.c — one thread per attached process, for what the process's
 * own threads cannot do while they are busy elsewhere or idle: give the
 * transfer tier back when no thread has used it for decay_ms, trim it when
 * tcmd lowers the budget, and empty it at once when tcmd asks (the heap is
 * full and another process is waiting for memory); and, as it starts, pay
 * what a first heap-profile sample would (profile.c). Thread caches stay with
 * their threads: a thread empties its own when it next reaches a slow path
 * after such a request, or when it exits. The thread sleeps on the channel's
 * bg_wake word, which tcmd increments and wakes. */
#define _GNU_SOURCE
#include <pthread.h>

#include "background.h"
#include "client.h"
#include "prim.h"
#include "profile.h"
#include "xfer.h"

#define TICK_NS 1000000000ull /* at least once a second */

static void *bg_main(void *arg)
{
    tcm_proc_t *pr = &tcm__proc;
    (void)arg;
    tcm__library_enter(); /* for the thread's whole life */
    tcm__profile_warm();
    uint64_t last_used = tcm__now_ns(), seen_gen = atomic_load(&pr->meta->config.gen);
    uint32_t seen_flush = atomic_load(&pr->chan_hdr->flush_gen);
    while (!atomic_load(&pr->bg_stop)) {
        uint64_t decay_ns = atomic_load_explicit(&pr->meta->config.decay_ms, memory_order_relaxed) * 1000000ull;
        uint64_t tick = decay_ns && decay_ns / 4 < TICK_NS ? decay_ns / 4 : TICK_NS;
        uint32_t wake = atomic_load(&pr->chan_hdr->bg_wake);
        if (atomic_load(&pr->chan_hdr->flush_gen) == seen_flush && !atomic_load(&pr->bg_stop))
            tcm__wait(&pr->chan_hdr->bg_wake, wake, (int64_t)(tick ? tick : TICK_NS));
        if (atomic_load(&pr->bg_stop))
            break;
        uint32_t flush = atomic_load(&pr->chan_hdr->flush_gen);
        uint64_t now = tcm__now_ns(), gen = atomic_load(&pr->meta->config.gen);
        if (pr->tick)
            pr->tick(now);
        if (flush != seen_flush) {
            seen_flush = flush;
            tcm__xfer_trim(true);
            atomic_store(&pr->chan_hdr->flush_ack, flush);
        } else if (gen != seen_gen) {
            seen_gen = gen;
            tcm__xfer_trim(false);
        }
        if (atomic_exchange_explicit(&pr->xfer_used, false, memory_order_relaxed))
            last_used = now;
        else if (decay_ns && now - last_used >= decay_ns &&
                 (atomic_load(&pr->xfer_bytes) || atomic_load(&pr->large_bytes)))
            tcm__xfer_trim(true); /* nobody traded through it for a while: it only pins memory */
    }
    return NULL;
}

void tcm__bg_start(void)
{
    tcm_proc_t *pr = &tcm__proc;
    atomic_store(&pr->bg_stop, false);
    pr->bg_running = tcm__thread_start_quiet(&pr->bg_thread, bg_main, NULL, "tcm-bg") == 0;
}

void tcm__bg_stop(void)
{
    tcm_proc_t *pr = &tcm__proc;
    if (!pr->bg_running)
        return;
    atomic_store(&pr->bg_stop, true);
    atomic_fetch_add(&pr->chan_hdr->bg_wake, 1);
    tcm__wake(&pr->chan_hdr->bg_wake, 1);
    pthread_join(pr->bg_thread, NULL);
    pr->bg_running = false;
}
