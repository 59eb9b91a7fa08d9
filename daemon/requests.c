/* requests.c — the heap thread: drains every client's ring, validates and
 * answers each request, reclaims the caches of clients that went away, and
 * sleeps on the doorbell when there is nothing to do. The only writer of the
 * page heap, the central lists and the page map. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "prim.h"
#include "ring.h"
#include "server.h"

#define STAT_ADD(srv, f, v) atomic_fetch_add_explicit(&(srv)->meta->stats.f, (v), memory_order_relaxed)
#define PER_CLIENT_BURST 64u /* requests served from one ring before the next ring */

static void refuse(tcm_server_t *srv, tcm_client_t *c, const char *what, unsigned cls, uint64_t off,
                   int status)
{
    atomic_fetch_add_explicit(&c->errors, 1, memory_order_relaxed);
    STAT_ADD(srv, refused, 1);
    if (status >= 0 && status < TCM_ST__COUNT)
        TCM_HT_ADD(srv->dstats.refused[status], 1);
    tcm__log_limited(TCM_LOG_WARN, "client %u (pid %d): refused %s class %u offset 0x%llx: %s", c->id,
                     (int)c->pid, what, cls, (unsigned long long)off, tcm__status_msg(status));
}

static int op_refill(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, unsigned cls, uint32_t count)
{
    uint64_t offs[TCM_MAX_BATCH];
    if (cls == 0 || cls >= TCM_NCLASSES)
        return TCM_ST_BAD_CLASS;
    if (count == 0 || count > TCM_MAX_BATCH)
        return TCM_ST_BAD_COUNT;
    int status;
    uint32_t n = tcm__central_refill_ht(&srv->h, cls, count, offs, c->tag, &status);
    TCM_HT_ADD(srv->h.cstats[cls].refills, 1);
    memcpy(slot->offs, offs, n * sizeof offs[0]);
    slot->nresult = n;
    atomic_fetch_add_explicit(&c->bytes_out, (uint64_t)n * srv->h.classes[cls].size, memory_order_relaxed);
    STAT_ADD(srv, bytes_clients, (uint64_t)n * srv->h.classes[cls].size);
    return n ? TCM_ST_OK : status;
}

/* Bytes of the client with this owner tag came back to the heap. If that
 * client has gone, they were counted as orphaned when it left. */
static void credit(tcm_server_t *srv, uint16_t tag, uint64_t bytes)
{
    tcm_client_t *c = atomic_load_explicit(&srv->clients[tag & (TCM_MAX_CLIENTS - 1)], memory_order_acquire);
    if (c && c->tag == tag) {
        atomic_fetch_add_explicit(&c->bytes_back, bytes, memory_order_relaxed);
        return;
    }
    uint64_t orphaned = atomic_load_explicit(&srv->meta->stats.bytes_orphaned, memory_order_relaxed);
    atomic_store_explicit(&srv->meta->stats.bytes_orphaned, orphaned > bytes ? orphaned - bytes : 0,
                          memory_order_relaxed);
}

/* Free objects of one class; returns the first refusal, and how many were
 * refused in *refused. Good objects are never lost to a bad neighbour. */
static int free_objects(tcm_server_t *srv, tcm_client_t *c, unsigned cls, const uint64_t *offs,
                        uint32_t n, uint32_t *refused, bool reclaiming)
{
    int first = TCM_ST_OK;
    uint32_t size = srv->h.classes[cls].size, bad = 0, good = 0;
    uint16_t owner = 0, run_owner = 0;
    uint64_t run = 0;
    for (uint32_t i = 0; i < n; i++) {
        int st = tcm__central_return_ht(&srv->h, cls, offs[i], &owner);
        if (st == TCM_ST_OK) {
            good++;
            if (owner != run_owner && run) { /* batches are mostly one owner's */
                credit(srv, run_owner, run);
                run = 0;
            }
            run_owner = owner;
            run += size;
            continue;
        }
        bad++;
        if (first == TCM_ST_OK)
            first = st;
        if (!reclaiming)
            refuse(srv, c, "free", cls, offs[i], st);
    }
    if (run)
        credit(srv, run_owner, run);
    STAT_ADD(srv, bytes_clients, -(uint64_t)good * size);
    *refused = bad;
    return first;
}

static int op_return(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, unsigned cls, uint32_t count)
{
    uint64_t offs[TCM_MAX_BATCH];
    if (cls == 0 || cls >= TCM_NCLASSES)
        return TCM_ST_BAD_CLASS;
    if (count > TCM_MAX_BATCH)
        return TCM_ST_BAD_COUNT;
    /* copy first: the client may change the slot while we check it */
    memcpy(offs, slot->offs, count * sizeof offs[0]);
    TCM_HT_ADD(srv->h.cstats[cls].returns, 1);
    uint32_t refused;
    int st = free_objects(srv, c, cls, offs, count, &refused, false);
    slot->result = refused;
    return st;
}

static int op_alloc_pages(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, uint64_t npages,
                          uint64_t align_pages)
{
    uint64_t off;
    int st = tcm__large_alloc_ht(&srv->h, npages, align_pages ? align_pages : 1, c->tag, &off);
    if (st == TCM_ST_OK) {
        slot->result = off;
        atomic_fetch_add_explicit(&c->bytes_out, npages << TCM_PAGE_SHIFT, memory_order_relaxed);
        STAT_ADD(srv, bytes_clients, npages << TCM_PAGE_SHIFT);
    }
    return st;
}

static int op_free_pages(tcm_server_t *srv, tcm_client_t *c, uint64_t off)
{
    uint64_t bytes;
    uint32_t owner;
    int st = tcm__large_free_ht(&srv->h, off, &bytes, &owner);
    if (st == TCM_ST_OK) {
        credit(srv, (uint16_t)owner, bytes);
        STAT_ADD(srv, bytes_clients, -bytes);
    } else {
        refuse(srv, c, "free of page run", 0, off, st);
    }
    return st;
}

static int op_root_set(tcm_server_t *srv, tcm_slot_t *slot, uint64_t off)
{
    char name[TCM_ROOT_NAME_MAX];
    memcpy(name, slot->offs, sizeof name);
    size_t len = strnlen(name, sizeof name);
    if (len == 0 || len == sizeof name)
        return TCM_ST_BAD_NAME;
    if (off != UINT64_MAX && (off >= srv->heap_size || off < TCM_PAGE_SIZE))
        return TCM_ST_BAD_OFFSET;
    tcm_root_t *roots = srv->h.roots, *r = NULL, *empty = NULL;
    for (unsigned i = 0; i < TCM_ROOTS; i++) {
        if (roots[i].used && strcmp(roots[i].name, name) == 0) {
            r = &roots[i];
            break;
        }
        if (!roots[i].used && !empty)
            empty = &roots[i];
    }
    if (!r && off == UINT64_MAX)
        return TCM_ST_OK;
    if (!r && !(r = empty))
        return TCM_ST_NO_ROOM;
    /* seqlock: readers retry while seq is odd or changed */
    uint32_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed);
    atomic_store_explicit(&r->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    if (off == UINT64_MAX) {
        r->used = 0;
        memset(r->name, 0, sizeof r->name);
        r->off = 0;
    } else {
        memcpy(r->name, name, len + 1);
        r->off = off;
        r->used = 1;
    }
    atomic_store_explicit(&r->seq, seq + 2, memory_order_release);
    return TCM_ST_OK;
}

static void answer(tcm_slot_t *slot, int status)
{
    slot->status = status;
    atomic_store_explicit(&slot->state, TCM_SLOT_DONE, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&slot->waiting, memory_order_relaxed))
        tcm__wake(&slot->state, 1);
}

static void serve_one(tcm_server_t *srv, tcm_client_t *c, uint32_t slot_index, bool dead)
{
    if (slot_index >= c->lay.nslots) {
        refuse(srv, c, "ring entry", 0, slot_index, TCM_ST_BAD_SLOT);
        return;
    }
    tcm_slot_t *slot = &c->slots[slot_index];
    if (atomic_load_explicit(&slot->state, memory_order_acquire) != TCM_SLOT_POSTED) {
        refuse(srv, c, "ring entry", 0, slot_index, TCM_ST_BAD_SLOT);
        return;
    }
    uint32_t op = slot->op, cls = slot->cls, count = slot->count;
    uint64_t arg = slot->arg, arg2 = slot->arg2;
    atomic_fetch_add_explicit(&c->requests, 1, memory_order_relaxed);
    STAT_ADD(srv, requests, 1);
    if (op < TCM_NOPS)
        TCM_HT_ADD(srv->dstats.ops[op], 1);
    uint64_t t0 = tcm__now_ns();
    slot->nresult = 0;
    slot->result = 0;
    int st;
    switch (op) {
    case TCM_OP_NOP:
        st = TCM_ST_OK;
        break;
    case TCM_OP_REFILL:
        /* nobody would take the objects of a client that is gone */
        st = dead ? TCM_ST_NOMEM : op_refill(srv, c, slot, cls, count);
        break;
    case TCM_OP_RETURN:
        st = op_return(srv, c, slot, cls, count);
        break;
    case TCM_OP_ALLOC_PAGES:
        st = dead ? TCM_ST_NOMEM : op_alloc_pages(srv, c, slot, arg, arg2);
        break;
    case TCM_OP_FREE_PAGES:
        st = op_free_pages(srv, c, arg);
        break;
    case TCM_OP_ROOT_SET:
        st = op_root_set(srv, slot, arg);
        break;
    default:
        st = TCM_ST_BAD_OP;
        break;
    }
    if (st != TCM_ST_OK && st != TCM_ST_NOMEM && st != TCM_ST_NO_ROOM && op != TCM_OP_RETURN &&
        op != TCM_OP_FREE_PAGES)
        refuse(srv, c, "request", cls, arg, st);
    answer(slot, st);
    uint64_t dt = tcm__now_ns() - t0;
    unsigned bucket = 0;
    while (bucket + 1 < TCM_LAT_BUCKETS && dt >= (uint64_t)TCM_LAT_BASE_NS << bucket)
        bucket++;
    TCM_HT_ADD(srv->dstats.latency[bucket], 1);
    TCM_HT_ADD(srv->dstats.latency_sum_ns, dt);
}

static bool serve_client(tcm_server_t *srv, tcm_client_t *c, bool dead)
{
    uint32_t slot_index, n = 0;
    while (n < PER_CLIENT_BURST && tcm__ring_pop(c->ring, c->lay.ring_cap, &c->tail, &slot_index)) {
        serve_one(srv, c, slot_index, dead);
        n++;
    }
    return n != 0;
}

/* Free an array of client pointers that sat in a dead client's cache. */
static uint64_t reclaim_array(tcm_server_t *srv, tcm_client_t *c, unsigned cls, void *const *arr,
                              uint32_t n)
{
    uint64_t offs[TCM_MAX_BATCH], got = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t k = 0;
        for (; k < TCM_MAX_BATCH && i < n; i++)
            offs[k++] = (uint64_t)(uintptr_t)arr[i] - srv->base;
        uint32_t refused;
        free_objects(srv, c, cls, offs, k, &refused, true);
        got += k - refused;
    }
    return got;
}

/* The client's process is gone: everything in its thread caches, its
 * transfer tier and answered-but-unread refills comes back to the heap. */
static void reclaim(tcm_server_t *srv, tcm_client_t *c)
{
    while (serve_client(srv, c, true)) /* frees it posted before dying */
        ;
    const tcm_chan_layout_t *l = &c->lay;
    const tcm_class_info_t *ci = srv->h.classes;
    tcm_chan_hdr_t *hdr = (tcm_chan_hdr_t *)c->chan;
    uint64_t objects = 0;

    for (uint32_t i = 0; i < l->nslots; i++) {
        tcm_slot_t *slot = &c->slots[i];
        /* read each field once: the channel is client memory */
        uint32_t op = slot->op, cls = slot->cls, nresult = slot->nresult;
        if (atomic_load(&slot->state) == TCM_SLOT_DONE && op == TCM_OP_REFILL && slot->status == TCM_ST_OK &&
            cls > 0 && cls < TCM_NCLASSES) {
            uint32_t n = nresult < TCM_MAX_BATCH ? nresult : TCM_MAX_BATCH;
            uint64_t offs[TCM_MAX_BATCH];
            memcpy(offs, slot->offs, n * sizeof offs[0]);
            uint32_t refused;
            free_objects(srv, c, cls, offs, n, &refused, true);
            objects += n - refused;
        }
    }
    uint32_t hw = atomic_load_explicit(&hdr->tcache_hw, memory_order_acquire);
    for (uint32_t t = 0; t < l->max_threads && t < hw; t++) {
        uint8_t *tc = c->chan + l->off_tcaches + (uint64_t)t * l->tcache_stride;
        tcm_bin_t *bins = ((tcm_tcache_t *)tc)->bins;
        for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
            uint32_t n = bins[cls].count;
            if (n > ci[cls].tcache_cap)
                n = ci[cls].tcache_cap;
            if (n)
                objects += reclaim_array(srv, c, cls, (void *const *)(tc + l->bin_slot_off[cls]), n);
        }
    }
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        uint32_t n = hdr->xfer[cls].count;
        if (n > ci[cls].xfer_cap)
            n = ci[cls].xfer_cap;
        if (n)
            objects += reclaim_array(srv, c, cls,
                                     (void *const *)(c->chan + l->off_xfer + l->xfer_slot_off[cls]), n);
    }
    uint64_t out = atomic_load(&c->bytes_out), back = atomic_load(&c->bytes_back);
    uint64_t held = out > back ? out - back : 0;
    /* what it allocated and is still in use -- by itself until now, or by
     * processes it handed objects to -- is orphaned until someone frees it */
    bool bye = atomic_load(&c->said_bye);
    STAT_ADD(srv, reclaimed_objects, objects);
    STAT_ADD(srv, bytes_orphaned, held);
    if (!bye)
        STAT_ADD(srv, clients_died, 1);
    tcm__log(bye && !held ? TCM_LOG_INFO : TCM_LOG_WARN,
             "client %u (pid %d) %s: %llu cached objects reclaimed; %llu bytes it allocated are "
             "still in use (by other processes, or leaked)",
             c->id, (int)c->pid, bye ? "detached" : "died without detaching",
             (unsigned long long)objects, (unsigned long long)held);
}

static void run_mailbox(tcm_server_t *srv)
{
    pthread_mutex_lock(&srv->mbox_lock);
    int cmd = atomic_exchange(&srv->mbox_cmd, TCM_MBOX_NONE);
    uint64_t result = 0;
    if (cmd == TCM_MBOX_RELEASE) {
        /* measured, not estimated: what the tmpfs object stopped using */
        int64_t before = tcm__backed_bytes(srv->heap_fd);
        tcm__central_drop_empty_ht(&srv->h);
        tcm__ph_release_ht(&srv->h, 0);
        int64_t after = tcm__backed_bytes(srv->heap_fd);
        result = before > after ? (uint64_t)(before - after) : 0;
        STAT_ADD(srv, bytes_released, result);
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
                STAT_ADD(srv, bytes_released, tcm__ph_release_ht(&srv->h, 0));
            }
        }
    }
    srv->mbox_result = result;
    srv->mbox_done = true;
    pthread_cond_broadcast(&srv->mbox_cond);
    pthread_mutex_unlock(&srv->mbox_lock);
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
        int state = atomic_load_explicit(&c->state, memory_order_acquire);
        if (state == TCM_CL_ACTIVE || state == TCM_CL_EVICTED) {
            work |= serve_client(srv, c, state == TCM_CL_EVICTED);
        } else if (state == TCM_CL_DEAD) {
            reclaim(srv, c);
            atomic_store_explicit(&srv->clients[i], NULL, memory_order_release);
            pthread_mutex_lock(&srv->reaped_lock);
            c->next_reaped = srv->reaped;
            srv->reaped = c;
            pthread_mutex_unlock(&srv->reaped_lock);
            uv_async_send(&srv->reaped_async);
            work = true;
        }
    }
    if (atomic_load_explicit(&srv->mbox_cmd, memory_order_acquire) != TCM_MBOX_NONE) {
        run_mailbox(srv);
        work = true;
    }
    return work;
}

static bool anything_pending(tcm_server_t *srv)
{
    if (atomic_load(&srv->stop) || atomic_load(&srv->mbox_cmd) != TCM_MBOX_NONE)
        return true;
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (c && (atomic_load(&c->state) == TCM_CL_DEAD ||
                  tcm__ring_ready(c->ring, c->lay.ring_cap, c->tail)))
            return true;
    }
    return false;
}

static void *heap_thread_main(void *arg)
{
    tcm_server_t *srv = arg;
    uint64_t idle_since = 0;
    while (!atomic_load_explicit(&srv->stop, memory_order_acquire)) {
        if (serve_all(srv)) {
            idle_since = 0;
            continue;
        }
        uint64_t now = tcm__now_ns();
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
            STAT_ADD(srv, wakeups, 1);
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

/* Main thread: run a command on the heap thread and wait for its result. */
uint64_t tcm__heap_command(tcm_server_t *srv, int cmd)
{
    pthread_mutex_lock(&srv->mbox_lock);
    srv->mbox_done = false;
    atomic_store_explicit(&srv->mbox_cmd, cmd, memory_order_release);
    tcm__heap_kick(srv);
    while (!srv->mbox_done)
        pthread_cond_wait(&srv->mbox_cond, &srv->mbox_lock);
    uint64_t r = srv->mbox_result;
    pthread_mutex_unlock(&srv->mbox_lock);
    return r;
}

/* Like tcm__heap_command, but gives up after timeout_ms (-ETIMEDOUT): for
 * health checks, which must answer even if the heap thread is stuck. */
int tcm__heap_command_timed(tcm_server_t *srv, int cmd, int timeout_ms, uint64_t *result)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&srv->mbox_lock);
    srv->mbox_done = false;
    atomic_store_explicit(&srv->mbox_cmd, cmd, memory_order_release);
    tcm__heap_kick(srv);
    int rc = 0;
    while (!srv->mbox_done && rc == 0)
        rc = pthread_cond_timedwait(&srv->mbox_cond, &srv->mbox_lock, &deadline);
    *result = srv->mbox_result;
    bool done = srv->mbox_done;
    pthread_mutex_unlock(&srv->mbox_lock);
    return done ? 0 : -ETIMEDOUT;
}

int tcm__heap_thread_start(tcm_server_t *srv)
{
    pthread_mutex_init(&srv->mbox_lock, NULL);
    pthread_cond_init(&srv->mbox_cond, NULL);
    pthread_mutex_init(&srv->reaped_lock, NULL);
    int err = pthread_create(&srv->heap_thread, NULL, heap_thread_main, srv);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "pthread_create(heap thread) failed: %s", strerror(err));
        return -err;
    }
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
