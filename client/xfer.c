/* xfer.c — the process's transfer tier: per size class, an array in the
 * channel (so tcmd finds it after a death) where the threads of one
 * process trade batches without tcmd, under one mutex per class and the
 * xfer_budget in bytes. Threads beyond --max-threads, which have no cache,
 * allocate from it and free into it one object at a time. The background
 * thread and budget changes trim it. */
#define _GNU_SOURCE
#include <string.h>

#include "channel.h"
#include "client.h"
#include "given.h"
#include "large.h"
#include "xfer.h"

static void **xfer_objs(unsigned cls)
{
    return (void **)(tcm__proc.chan + tcm__proc.lay.off_xfer + tcm__proc.lay.xfer_objs_off[cls]);
}

uint64_t tcm__xfer_budget_room(unsigned cls)
{
    uint64_t budget = atomic_load_explicit(&tcm__proc.meta->config.xfer_budget, memory_order_relaxed),
             used = atomic_load_explicit(&tcm__proc.xfer_bytes, memory_order_relaxed);
    return used < budget ? (budget - used) / tcm__proc.classes[cls].size : 0;
}

/* How many of n more objects of a class the tier takes now (xfer_cap, the
 * byte budget, backed entries of its array); under its lock. */
static uint32_t room_for(unsigned cls, uint32_t n)
{
    tcm_proc_t *pr = &tcm__proc;
    uint32_t count = pr->chan_hdr->xfer[cls].count, room = pr->classes[cls].xfer_cap - count;
    uint64_t fits = tcm__xfer_budget_room(cls);
    uint32_t take = n < room ? n : room;
    if (take > fits)
        take = (uint32_t)fits;
    return tcm__back_array(xfer_objs(cls), &pr->xfer_backed[cls], count + take) - count;
}

static void added(unsigned cls, uint32_t n)
{
    if (n)
        atomic_store_explicit(&tcm__proc.xfer_used, true, memory_order_relaxed);
    atomic_fetch_add_explicit(&tcm__proc.xfer_bytes, (uint64_t)n * tcm__proc.classes[cls].size, memory_order_relaxed);
}

TCM_NOINLINE uint32_t tcm__xfer_put(unsigned cls, tcm_bin_t *b, uint32_t n)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_lock(&pr->xfer_lock[cls]);
    tcm_xfer_t *x = &pr->chan_hdr->xfer[cls];
    uint32_t take = room_for(cls, n);
    /* the top ones, and the bin drops them before the lock lets another
     * thread take them: once they can travel to another process, a reclaim
     * of this one must not find them in its bin */
    memcpy(xfer_objs(cls) + x->count, b->objs + b->count - take, take * sizeof(void *));
    x->count += take;
    b->count -= take;
    pthread_mutex_unlock(&pr->xfer_lock[cls]);
    added(cls, take);
    return take;
}

TCM_NOINLINE uint32_t tcm__xfer_put_fetched(unsigned cls, tcm_slot_t *slot, uint32_t from, uint32_t n)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_lock(&pr->xfer_lock[cls]);
    tcm_xfer_t *x = &pr->chan_hdr->xfer[cls];
    uint32_t take = room_for(cls, n);
    for (uint32_t i = 0; i < take; i++)
        xfer_objs(cls)[x->count + i] = pr->heap + slot->offs[from + i];
    x->count += take;
    /* a reclaim meanwhile finds them in the slot and the tier and frees them
     * once (the second is refused); none is handed out before the slot has
     * stopped listing them */
    if (take == n)
        atomic_store_explicit(&slot->state, TCM_SLOT_IDLE, memory_order_relaxed);
    else {
        memmove(slot->offs, slot->offs + from + take, (n - take) * sizeof slot->offs[0]);
        slot->nresult = n - take;
    }
    pthread_mutex_unlock(&pr->xfer_lock[cls]);
    added(cls, take);
    return n - take;
}

TCM_NOINLINE uint32_t tcm__xfer_take(unsigned cls, void **dst, uint32_t want)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_lock(&pr->xfer_lock[cls]);
    tcm_xfer_t *x = &pr->chan_hdr->xfer[cls];
    uint32_t k = x->count < want ? x->count : want;
    memcpy(dst, xfer_objs(cls) + (x->count - k), k * sizeof(void *));
    x->count -= k;
    pthread_mutex_unlock(&pr->xfer_lock[cls]);
    if (k)
        atomic_store_explicit(&pr->xfer_used, true, memory_order_relaxed);
    atomic_fetch_sub_explicit(&pr->xfer_bytes, (uint64_t)k * pr->classes[cls].size, memory_order_relaxed);
    return k;
}

bool tcm__xfer_empty(unsigned cls)
{
    pthread_mutex_lock(&tcm__proc.xfer_lock[cls]);
    bool empty = tcm__proc.chan_hdr->xfer[cls].count == 0;
    pthread_mutex_unlock(&tcm__proc.xfer_lock[cls]);
    return empty;
}

/* The top batch of a class to tcmd: posted and dropped from the tier under
 * its lock, answered outside it, so that other threads trade on while tcmd
 * serves it. A death after the post leaves the batch in a posted RETURN,
 * which reclaim serves before it walks the tier; a death before the drop
 * leaves them in both, and the second free is refused. false: nothing left,
 * or tcmd is lost. */
static bool return_top_batch(unsigned cls)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_lock(&pr->xfer_lock[cls]);
    tcm_xfer_t *x = &pr->chan_hdr->xfer[cls];
    uint32_t k = x->count < TCM_MAX_BATCH ? x->count : TCM_MAX_BATCH, idx;
    if (!k) {
        pthread_mutex_unlock(&pr->xfer_lock[cls]);
        return false;
    }
    tcm_slot_t *slot = tcm__return_fill(cls, xfer_objs(cls) + x->count - k, k, &idx);
    bool posted = tcm__post(slot, idx);
    if (posted) {
        x->count -= k;
        atomic_fetch_sub_explicit(&pr->xfer_bytes, (uint64_t)k * pr->classes[cls].size, memory_order_relaxed);
    }
    pthread_mutex_unlock(&pr->xfer_lock[cls]);
    int st = posted ? tcm__await_rung(slot) : TCM_ST_NOMEM;
    tcm__slot_release(slot);
    if (st != TCM_ST_OK && st != TCM_ST_NOMEM)
        tcm__fatal_refused(st, cls);
    return posted;
}

TCM_COLD void tcm__xfer_trim(bool all)
{
    tcm_proc_t *pr = &tcm__proc;
    const tcm_config_t *cf = &pr->meta->config;
    /* whole runs first: one request each frees the most */
    tcm__large_trim(all ? 0 : atomic_load_explicit(&cf->run_cache, memory_order_relaxed));
    uint64_t keep_bytes = all ? 0 : atomic_load_explicit(&cf->xfer_budget, memory_order_relaxed);
    for (unsigned cls = TCM_NCLASSES - 1; cls >= 1; cls--)
        while ((!keep_bytes || atomic_load(&pr->xfer_bytes) > keep_bytes) && return_top_batch(cls))
            ;
}

TCM_NOINLINE void *tcm__xfer_alloc(unsigned cls)
{
    tcm_proc_t *pr = &tcm__proc;
    const tcm_class_info_t *ci = &pr->classes[cls];
    void *p = NULL;
    pthread_mutex_lock(&pr->xfer_lock[cls]);
    tcm_xfer_t *x = &pr->chan_hdr->xfer[cls];
    if (!x->count) { /* one batch into the tier, through the spare slot */
        uint32_t want = tcm__back_array(xfer_objs(cls), &pr->xfer_backed[cls], ci->batch), idx;
        tcm_slot_t *slot = tcm__slot_acquire(&idx);
        slot->op = TCM_OP_REFILL;
        slot->cls = cls;
        slot->count = want ? want : 1;
        if (want && tcm__call(slot, idx) == TCM_ST_OK) {
            uint32_t n = slot->nresult < want ? slot->nresult : want;
            tcm__check_given(cls, slot->offs, n);
            tcm__map_given(slot->offs, n);
            for (uint32_t i = 0; i < n; i++)
                xfer_objs(cls)[i] = pr->heap + slot->offs[i];
            x->count = n; /* before the slot is released: a reclaim finds them in one place or both */
            atomic_fetch_add_explicit(&pr->xfer_bytes, (uint64_t)n * ci->size, memory_order_relaxed);
        }
        tcm__slot_release(slot);
    }
    if (x->count) {
        p = xfer_objs(cls)[--x->count];
        atomic_fetch_sub_explicit(&pr->xfer_bytes, ci->size, memory_order_relaxed);
    }
    pthread_mutex_unlock(&pr->xfer_lock[cls]);
    return p;
}

TCM_NOINLINE void tcm__xfer_free(unsigned cls, void *p)
{
    tcm_proc_t *pr = &tcm__proc;
    const tcm_class_info_t *ci = &pr->classes[cls];
    pthread_mutex_lock(&pr->xfer_lock[cls]);
    tcm_xfer_t *x = &pr->chan_hdr->xfer[cls];
    uint64_t budget = atomic_load_explicit(&pr->meta->config.xfer_budget, memory_order_relaxed);
    bool full = x->count >= ci->xfer_cap ||
                atomic_load_explicit(&pr->xfer_bytes, memory_order_relaxed) + ci->size > budget;
    if (full && x->count) { /* make room a batch at a time */
        uint32_t k = x->count < ci->batch ? x->count : ci->batch;
        atomic_fetch_sub_explicit(&pr->xfer_bytes, (uint64_t)k * ci->size, memory_order_relaxed);
        tcm__return_objects(cls, xfer_objs(cls), k, &x->count);
        full = false;
    }
    if (!full && tcm__back_array(xfer_objs(cls), &pr->xfer_backed[cls], x->count + 1) > x->count) {
        xfer_objs(cls)[x->count++] = p;
        atomic_fetch_add_explicit(&pr->xfer_bytes, ci->size, memory_order_relaxed);
        p = NULL;
    }
    pthread_mutex_unlock(&pr->xfer_lock[cls]);
    if (p) /* no room at all (a zero budget, a full /dev/shm) */
        tcm__return_objects(cls, &p, 1, NULL);
}
