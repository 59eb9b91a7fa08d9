/* reclaim.c — the caches of a client whose process is gone: everything in
 * its thread caches, its transfer tier and answered-but-unread refills comes
 * back to the heap, each offset validated as for a RETURN (the channel is
 * client memory). Safe to run again on the same client: what it already
 * freed is refused as a double free, silently. Heap thread only. */
#include <string.h>

#include "crash.h"
#include "log.h"
#include "server.h"

#define STAT_ADD(srv, f, v) atomic_fetch_add_explicit(&(srv)->meta->stats.f, (v), memory_order_relaxed)

/* Free an array of client pointers that sat in a dead client's cache. */
static uint64_t reclaim_array(tcm_server_t *srv, tcm_client_t *c, unsigned cls, void *const *arr, uint32_t n)
{
    uint64_t offs[TCM_MAX_BATCH], got = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t k = 0;
        for (; k < TCM_MAX_BATCH && i < n; i++)
            offs[k++] = (uint64_t)(uintptr_t)arr[i] - srv->base;
        got += tcm__free_objects_ht(srv, c, cls, offs, k);
        TCM_CRASH_POINT("reclaim");
    }
    return got;
}

void tcm__reclaim_ht(tcm_server_t *srv, tcm_client_t *c)
{
    while (tcm__serve_client_ht(srv, c, true)) /* frees it posted before dying */
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
            uint64_t offs[TCM_MAX_BATCH];
            uint32_t n = nresult < TCM_MAX_BATCH ? nresult : TCM_MAX_BATCH;
            memcpy(offs, slot->offs, n * sizeof offs[0]);
            objects += tcm__free_objects_ht(srv, c, cls, offs, n);
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
    tcm_client_rec_t *rec = c->rec;
    uint64_t out = atomic_load(&rec->bytes_out), back = atomic_load(&rec->bytes_back);
    uint64_t held = out > back ? out - back : 0;
    /* what it allocated and is still in use -- by itself until now, or by
     * processes it handed objects to -- is orphaned until someone frees it */
    bool bye = atomic_load(&rec->said_bye);
    STAT_ADD(srv, reclaimed_objects, objects);
    STAT_ADD(srv, bytes_orphaned, held);
    if (!bye)
        STAT_ADD(srv, clients_died, 1);
    tcm__log(bye && !held ? TCM_LOG_INFO : TCM_LOG_WARN,
             "client %u (pid %u) %s: %llu cached objects reclaimed; %llu bytes it allocated are "
             "still in use (by other processes, or leaked)",
             rec->id, rec->pid, bye ? "detached" : "died without detaching", (unsigned long long)objects,
             (unsigned long long)held);
}
