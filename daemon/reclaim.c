/* reclaim.c — the caches of a client whose process is gone: everything in
 * its thread caches, its transfer tier, answered-but-unread refills and
 * page runs comes back to the heap, each offset validated as for a RETURN
 * (the channel is client memory). Safe to run again on the same client:
 * what it already freed is refused as a double free, silently; and nothing
 * the client had already given back is freed again (see collect_answered).
 * Heap thread only. */
#include <stdlib.h>
#include <string.h>

#include "central.h"
#include "continuation.h"
#include "crash.h"
#include "holders.h"
#include "log.h"
#include "reclaim.h"
#include "samples.h"
#include "requests.h"
#include "server.h"


/* What the client had already given back when it died but still listed in
 * a cache: the client drops a batch from its cache only once tcmd answered
 * it (a RETURN it did not wait for: once posted) and before it releases the
 * slot, so those are among the objects and runs of its answered RETURN and
 * FREE_PAGES slots; an async RETURN whose batch the bin has dropped since
 * is marked (dropped_already) and not skipped. tcmd may have handed the
 * skipped ones to someone else: they must not be freed. The channel is
 * client memory either way: a corrupt one can make tcmd skip (leak) its own
 * objects, or free objects its caches list, which tcmd checks as it does
 * any RETURN (allocated, right class, object start), no more. */
typedef struct skip_set {
    uint64_t *offs;
    size_t n;
} skip_set_t;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* An async slot's RETURN whose objects the client's bin has already
 * dropped (tcache.dropped): a later refill may have brought them back into
 * a cache, so they must not be skipped. */
static bool dropped_already(const tcm_client_t *c, uint32_t i)
{
    const tcm_chan_layout_t *l = &c->lay;
    uint32_t t, j;
    if (!tcm__async_slot_of(l, i, &t, &j)) /* a thread's own slot or the spare: calls it waited on */
        return false;
    uint32_t hw = tcm__chan_u32(c, offsetof(tcm_chan_hdr_t, tcache_hw));
    if (t >= hw || t >= l->max_threads)
        return false;
    return tcm__chan_u32(c, tcm__tcache_off(l, t) + offsetof(tcm_tcache_t, dropped)) >> j & 1;
}

static void collect_answered(const tcm_client_t *c, skip_set_t *skip)
{
    size_t cap = 0;
    skip->offs = NULL;
    skip->n = 0;
    for (uint32_t i = 0; i < c->lay.nslots; i++) {
        if (!tcm__slot_backed(c, i)) /* never used: nothing was answered there */
            continue;
        const tcm_slot_t *slot = &c->slots[i];
        uint32_t op = slot->op, count = slot->count;
        if (atomic_load(&slot->state) != TCM_SLOT_DONE || (op != TCM_OP_RETURN && op != TCM_OP_FREE_PAGES))
            continue;
        if (op == TCM_OP_RETURN && dropped_already(c, i))
            continue;
        size_t k = op == TCM_OP_FREE_PAGES ? 1 : count < TCM_MAX_BATCH ? count : TCM_MAX_BATCH;
        if (skip->n + k > cap) {
            cap = (skip->n + k) * 2;
            uint64_t *grown = realloc(skip->offs, cap * sizeof *grown);
            if (!grown)
                break; /* without the list nothing is skipped: as before */
            skip->offs = grown;
        }
        for (size_t j = 0; j < k; j++)
            skip->offs[skip->n++] = op == TCM_OP_FREE_PAGES ? slot->arg : slot->offs[j];
    }
    if (skip->n)
        qsort(skip->offs, skip->n, sizeof *skip->offs, cmp_u64);
}

static bool skipped(const skip_set_t *skip, uint64_t off)
{
    return skip->n && bsearch(&off, skip->offs, skip->n, sizeof off, cmp_u64);
}

void tcm__chan_read(const tcm_client_t *c, uint64_t off, void *buf, uint64_t len)
{
    if (off > c->lay.size || len > c->lay.size - off || tcm__read_at(c->chan_fd, c->chan, off, buf, len) != 0)
        memset(buf, 0, len);
}

uint32_t tcm__chan_u32(const tcm_client_t *c, uint64_t off)
{
    uint32_t v;
    tcm__chan_read(c, off, &v, sizeof v);
    return v;
}

static uint32_t largest_array(const tcm_class_info_t *ci)
{
    uint32_t most = TCM_LARGE_CACHE;
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        most = ci[cls].tcache_cap > most ? ci[cls].tcache_cap : most;
        most = ci[cls].xfer_cap > most ? ci[cls].xfer_cap : most;
    }
    return most;
}

bool tcm__each_cache(const tcm_server_t *srv, const tcm_client_t *c,
                     bool (*visit)(void *arg, const tcm_cache_view_t *v), void *arg, bool objects)
{
    const tcm_chan_layout_t *l = &c->lay;
    const tcm_class_info_t *ci = srv->h.classes;
    tcm_tcache_t *tc = malloc(sizeof *tc);
    tcm_chan_hdr_t *hdr = malloc(sizeof *hdr);
    void **objs = malloc(largest_array(ci) * sizeof *objs);
    bool ok = false;
    if (!tc || !hdr || !objs)
        goto out;
    tcm__chan_read(c, 0, hdr, sizeof *hdr);
    tcm_cache_view_t v;
    uint32_t hw = hdr->tcache_hw;
    for (uint32_t t = 0; t < l->max_threads && t < hw; t++) {
        uint64_t at = tcm__tcache_off(l, t);
        tcm__chan_read(c, at, tc, sizeof *tc);
        v = (tcm_cache_view_t){.kind = TCM_CACHE_THREAD, .thread = t, .tc = tc};
        if (!visit(arg, &v))
            goto out;
        /* each class's bin, and what the thread gathered from draining
         * spans (bins[DRAIN + class]), read as a bin of the class */
        for (unsigned b = 1; b < TCM_PAGE_CLASS_DRAIN + TCM_NCLASSES; b++) {
            unsigned cls = tcm__page_small_class(b);
            if (!cls)
                continue;
            bool drain = b != cls;
            uint32_t n = tc->bins[b].count, cap = drain ? tcm__drain_cap(&ci[cls]) : ci[cls].tcache_cap;
            n = n < cap ? n : cap;
            if (!n)
                continue;
            v = (tcm_cache_view_t){.kind = TCM_CACHE_BIN, .thread = t, .tc = tc, .cls = cls, .objs = objs,
                                   .count_off = at + offsetof(tcm_tcache_t, bins) + b * sizeof(tcm_bin_t) +
                                                offsetof(tcm_bin_t, count),
                                   .objs_off = at + (drain ? l->drain_objs_off[cls] : l->bin_objs_off[cls]), .n = n};
            if (objects)
                tcm__chan_read(c, v.objs_off, objs, (uint64_t)n * sizeof *objs);
            else
                v.objs = NULL;
            if (!visit(arg, &v))
                goto out;
        }
    }
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        uint32_t n = hdr->xfer[cls].count;
        n = n < ci[cls].xfer_cap ? n : ci[cls].xfer_cap;
        if (!n)
            continue;
        v = (tcm_cache_view_t){.kind = TCM_CACHE_XFER, .cls = cls, .objs = objs,
                               .count_off = offsetof(tcm_chan_hdr_t, xfer) + cls * sizeof(tcm_xfer_t),
                               .objs_off = l->off_xfer + l->xfer_objs_off[cls], .n = n};
        if (objects)
            tcm__chan_read(c, v.objs_off, objs, (uint64_t)n * sizeof *objs);
        else
            v.objs = NULL;
        if (!visit(arg, &v))
            goto out;
    }
    uint32_t runs = hdr->large_count;
    v = (tcm_cache_view_t){.kind = TCM_CACHE_RUNS, .runs = hdr->large,
                           .count_off = offsetof(tcm_chan_hdr_t, large_count),
                           .objs_off = offsetof(tcm_chan_hdr_t, large),
                           .n = runs < TCM_LARGE_CACHE ? runs : TCM_LARGE_CACHE};
    ok = !v.n || visit(arg, &v);
out:
    free(objs);
    free(hdr);
    free(tc);
    return ok;
}

/* Free an array of client pointers that sat in a dead client's cache. */
static uint64_t reclaim_array(tcm_server_t *srv, tcm_client_t *c, const skip_set_t *skip, unsigned cls,
                              void *const *arr, uint32_t n)
{
    uint64_t offs[TCM_MAX_BATCH], got = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t k = 0;
        for (; k < TCM_MAX_BATCH && i < n; i++) {
            uint64_t off = (uint64_t)(uintptr_t)arr[i] - srv->base;
            if (!skipped(skip, off))
                offs[k++] = off;
        }
        got += tcm__free_objects_ht(srv, c, cls, offs, k);
        TCM_CRASH_POINT(reclaim);
    }
    return got;
}

/* The page runs it kept for its next large allocations. */
static uint64_t reclaim_runs(tcm_server_t *srv, const skip_set_t *skip, const tcm_large_entry_t *runs, uint32_t n)
{
    uint64_t got = 0;
    for (uint32_t i = 0; i < n; i++) {
        tcm_large_entry_t e = runs[i];
        uint32_t s;
        if (skipped(skip, e.off) || tcm__large_check_ht(&srv->h, e.off, &s) != TCM_ST_OK ||
            srv->h.spans[s].npages != e.npages)
            continue;
        uint64_t bytes;
        uint32_t owner;
        if (tcm__large_free_ht(&srv->h, e.off, &bytes, &owner) == TCM_ST_OK) {
            tcm__credit_ht(srv, (uint16_t)owner, bytes);
            TCM_STAT_ADD(srv->meta, bytes_clients, -bytes);
            got++;
        }
    }
    return got;
}

/* A run of the dead client's that no cache of its lists: freed only when
 * it is still an allocated run of this client's starting there; anything
 * else -- a corrupt slot, a run that a reclaim interrupted by a crash
 * already freed, one the client also listed in its run cache -- is skipped
 * quietly. Returns 1 if freed. */
static uint64_t reclaim_unread_run(tcm_server_t *srv, tcm_client_t *c, uint64_t off)
{
    uint32_t s, owner;
    uint64_t bytes;
    if (tcm__large_check_ht(&srv->h, off, &s) != TCM_ST_OK || srv->h.spans[s].owner != c->rec->tag ||
        tcm__large_free_ht(&srv->h, off, &bytes, &owner) != TCM_ST_OK)
        return 0;
    TCM_CRASH_POINT(reclaim_run);
    tcm__credit_ht(srv, (uint16_t)owner, bytes);
    TCM_STAT_ADD(srv->meta, bytes_clients, -bytes);
    return 1;
}

/* Page runs answered to an ALLOC_PAGES the client never took: the client
 * reads the answer and makes the slot IDLE before the allocation returns
 * (a stock of sample runs: once they are in its run cache), so a slot
 * still DONE holds runs nobody has seen (the rule of a REFILL answer). */
static uint64_t reclaim_unread_runs(tcm_server_t *srv, tcm_client_t *c)
{
    uint64_t got = 0;
    for (uint32_t i = 0; i < c->lay.nslots; i++) {
        if (!tcm__slot_backed(c, i))
            continue;
        const tcm_slot_t *slot = &c->slots[i];
        /* read each field once: the channel is client memory */
        uint32_t op = slot->op, cls = slot->cls, n = slot->nresult;
        int status = slot->status;
        if (atomic_load(&slot->state) != TCM_SLOT_DONE || op != TCM_OP_ALLOC_PAGES || status != TCM_ST_OK)
            continue;
        if (cls != TCM_ALLOC_SAMPLE_RUNS || n == 0) {
            got += reclaim_unread_run(srv, c, slot->result);
            continue;
        }
        for (uint32_t j = 0; j < n && j < TCM_SAMPLE_RUNS_MAX; j++)
            got += reclaim_unread_run(srv, c, slot->offs[j]);
    }
    return got;
}

typedef struct reclaiming {
    tcm_server_t *srv;
    tcm_client_t *c;
    const skip_set_t *skip;
    uint64_t objects;
} reclaiming_t;

static bool reclaim_cache(void *arg, const tcm_cache_view_t *v)
{
    reclaiming_t *r = arg;
    if (v->kind == TCM_CACHE_BIN || v->kind == TCM_CACHE_XFER)
        r->objects += reclaim_array(r->srv, r->c, r->skip, v->cls, v->objs, v->n);
    else if (v->kind == TCM_CACHE_RUNS)
        r->objects += reclaim_runs(r->srv, r->skip, v->runs, v->n);
    return true;
}

void tcm__reclaim_ht(tcm_server_t *srv, tcm_client_t *c)
{
    tcm__pages_drop_ht(srv, c); /* a run it was waiting for goes back free */
    /* the frees it posted before dying: at most a ring's worth, so that
     * whoever still maps the channel cannot keep the heap thread here */
    for (uint32_t turns = 0; turns <= c->lay.ring_cap / TCM_PER_CLIENT_BURST; turns++)
        if (!tcm__serve_client_ht(srv, c, true))
            break;
    const tcm_chan_layout_t *l = &c->lay;
    uint64_t objects = 0;
    skip_set_t skip;
    collect_answered(c, &skip);

    for (uint32_t i = 0; i < l->nslots; i++) {
        if (!tcm__slot_backed(c, i))
            continue;
        tcm_slot_t *slot = &c->slots[i];
        /* read each field once: the channel is client memory */
        uint32_t op = slot->op, cls = slot->cls, nresult = slot->nresult;
        if (atomic_load(&slot->state) == TCM_SLOT_DONE && op == TCM_OP_REFILL && slot->status == TCM_ST_OK &&
            cls > 0 && cls < TCM_NCLASSES) {
            uint64_t offs[TCM_MAX_BATCH];
            uint32_t n = nresult < TCM_MAX_BATCH ? nresult : TCM_MAX_BATCH;
            memcpy(offs, slot->offs, n * sizeof offs[0]);
            objects += tcm__free_objects_ht(srv, c, cls, offs, n);
        }
    }
    objects += reclaim_unread_runs(srv, c);
    reclaiming_t r = {srv, c, &skip, 0};
    tcm__each_cache(srv, c, reclaim_cache, &r, true);
    objects += r.objects;
    free(skip.offs);
    tcm_client_rec_t *rec = c->rec;
    uint64_t out = atomic_load(&rec->bytes_out), back = atomic_load(&rec->bytes_back);
    uint64_t held = out > back ? out - back : 0;
    /* what it allocated and is still in use -- by itself until now, or by
     * processes it handed objects to -- is orphaned until someone frees it */
    bool bye = atomic_load(&rec->said_bye);
    TCM_STAT_ADD(srv->meta, reclaimed_objects, objects);
    TCM_STAT_ADD(srv->meta, bytes_orphaned, held);
    atomic_fetch_add_explicit(&srv->tag_orphaned[rec->tag], held, memory_order_relaxed); /* before REAPED */
    tcm__holder_depart_ht(srv, c, held);
    tcm__sample_client_gone_ht(srv, c);
    if (!bye)
        TCM_STAT_ADD(srv->meta, clients_died, 1);
    /* Whether what it allocated is leaked is not known yet (other
     * processes may hold it, or still have its objects in their caches):
     * tcm__holders_warn says so later if it is still held. */
    tcm__log_peer(bye ? TCM_LOG_INFO : TCM_LOG_WARN, tcm__log_source_uid(rec->uid),
                  "client %u (pid %u, %.16s) %s: %llu cached objects reclaimed, %llu bytes it allocated still in use",
                  rec->id, rec->pid, c->comm, bye ? "detached" : "died without detaching",
                  (unsigned long long)objects, (unsigned long long)held);
}
