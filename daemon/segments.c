/* segments.c — creating and destroying the daemon's shared-memory segments:
 * the heap, the metadata, the name lock and each client's channel. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "prim.h"
#include "ring.h"
#include "server.h"

int tcm__meta_init(tcm_heap_t *h, void *meta, const tcm_meta_layout_t *ml, int meta_fd,
                   int heap_fd, uint64_t heap_size, uint64_t base)
{
    tcm_meta_hdr_t *m = meta;
    uint8_t *b = meta;
    m->magic = TCM_META_MAGIC;
    m->version = TCM_LAYOUT_VERSION;
    m->page_shift = TCM_PAGE_SHIFT;
    m->base = base;
    m->heap_size = heap_size;
    m->npages = (uint32_t)(heap_size >> TCM_PAGE_SHIFT);
    m->nclasses = TCM_NCLASSES;
    m->size = ml->size;
    m->off_classes = ml->off_classes;
    m->off_page_class = ml->off_page_class;
    m->off_page_span = ml->off_page_span;
    m->off_spans = ml->off_spans;
    m->off_roots = ml->off_roots;
    tcm__class_table_init((tcm_class_info_t *)(b + ml->off_classes));
    atomic_store(&m->config.heap_limit, heap_size);
    atomic_store(&m->config.tcache_budget, 32ull << 20); /* tcm__config_publish overrides */
    atomic_store(&m->config.xfer_budget, 16ull << 20);
    atomic_store(&m->config.page_cache_cap, 64ull << 20);
    atomic_store(&m->config.gen, 1);
    atomic_store(&m->stats.bytes_reserved, heap_size);
    atomic_store(&m->stats.bytes_limit, heap_size);

    h->meta = m;
    h->classes = (tcm_class_info_t *)(b + ml->off_classes);
    h->page_class = b + ml->off_page_class;
    h->page_span = (uint32_t *)(b + ml->off_page_span);
    h->spans = (tcm_span_t *)(b + ml->off_spans);
    h->roots = (tcm_root_t *)(b + ml->off_roots);
    /* daemon-private and sparse: only pages of small spans are ever touched */
    h->objmap = tcm__reserve((uint64_t)m->npages * TCM_OBJMAP_WORDS_PER_PAGE * sizeof(uint64_t));
    h->owners = tcm__reserve((uint64_t)m->npages * TCM_OBJMAP_WORDS_PER_PAGE * 64 * sizeof(uint16_t));
    if (!h->objmap || !h->owners)
        return -ENOMEM;
    h->meta_fd = meta_fd;
    h->ml = *ml;
    h->heap_fd = heap_fd;
    h->heap_size = heap_size;
    h->npages = m->npages;
    tcm__ph_init(h);
    return 0;
}

int tcm__segments_create(tcm_server_t *srv)
{
    char err[256];
    snprintf(srv->lock_name, sizeof srv->lock_name, "/tcm.%s.lock", srv->name);
    snprintf(srv->heap_name, sizeof srv->heap_name, "/tcm.%s.heap", srv->name);
    snprintf(srv->meta_name, sizeof srv->meta_name, "/tcm.%s.meta", srv->name);
    srv->heap_fd = srv->meta_fd = -1;

    srv->lock_fd = tcm__lock_name(srv->lock_name);
    if (srv->lock_fd < 0) {
        if (srv->lock_fd == -EBUSY)
            tcm__log(TCM_LOG_ERROR, "another tcmd is already running with name '%s'", srv->name);
        else
            tcm__log(TCM_LOG_ERROR, "shm_open(%s) failed: %s", srv->lock_name, strerror(-srv->lock_fd));
        return srv->lock_fd;
    }
    /* we hold the name: anything left under it belongs to a dead daemon */
    char prefix[96];
    snprintf(prefix, sizeof prefix, "/tcm.%s.", srv->name);
    char ch_prefix[100];
    snprintf(ch_prefix, sizeof ch_prefix, "%sch.", prefix);
    int stale = tcm__shm_unlink_prefix(ch_prefix);
    if (tcm__shm_unlink(srv->heap_name) == 0)
        stale++;
    if (tcm__shm_unlink(srv->meta_name) == 0)
        stale++;
    if (stale)
        tcm__log(TCM_LOG_WARN, "removed %d stale segments of a previous tcmd named '%s'", stale, srv->name);

    srv->heap_fd = tcm__shm_create(srv->heap_name, srv->heap_size, 0600);
    if (srv->heap_fd < 0) {
        tcm__log(TCM_LOG_ERROR, "shm_open(%s) failed: %s", srv->heap_name, strerror(-srv->heap_fd));
        goto fail;
    }
    srv->heap = tcm__map(srv->heap_fd, srv->heap_size, (void *)(uintptr_t)srv->base, true, err, sizeof err);
    if (!srv->heap) {
        tcm__log(TCM_LOG_ERROR, "cannot map the heap at 0x%llx: %s", (unsigned long long)srv->base, err);
        goto fail;
    }
    int cerr = tcm__commit(srv->heap_fd, 0, TCM_PAGE_SIZE);
    if (cerr) {
        tcm__log(TCM_LOG_ERROR, "fallocate(%s, doorbell page) failed: %s", srv->heap_name, strerror(-cerr));
        goto fail;
    }
    srv->bell = (tcm_bell_t *)srv->heap;

    tcm_meta_layout_t ml;
    tcm__meta_layout(&ml, (uint32_t)(srv->heap_size >> TCM_PAGE_SHIFT));
    srv->meta_size = ml.size;
    srv->meta_fd = tcm__shm_create(srv->meta_name, ml.size, 0600);
    if (srv->meta_fd < 0) {
        tcm__log(TCM_LOG_ERROR, "shm_open(%s) failed: %s", srv->meta_name, strerror(-srv->meta_fd));
        goto fail;
    }
    srv->meta = tcm__map(srv->meta_fd, ml.size, NULL, true, err, sizeof err);
    if (!srv->meta) {
        tcm__log(TCM_LOG_ERROR, "cannot map the metadata: %s", err);
        goto fail;
    }
    /* the header, class table and roots now; the per-page parts grow with the heap */
    int merr = tcm__commit(srv->meta_fd, 0, ml.off_page_class);
    if (merr) {
        tcm__log(TCM_LOG_ERROR, "fallocate(%s) failed: %s", srv->meta_name, strerror(-merr));
        goto fail;
    }
    if (tcm__meta_init(&srv->h, srv->meta, &ml, srv->meta_fd, srv->heap_fd, srv->heap_size, srv->base) != 0) {
        tcm__log(TCM_LOG_ERROR, "cannot reserve the owner map for %llu pages", (unsigned long long)(srv->heap_size >> TCM_PAGE_SHIFT));
        goto fail;
    }
    tcm__chan_layout(&srv->chan_layout, srv->h.classes, srv->max_threads);
    return 0;

fail:
    tcm__segments_destroy(srv);
    return -1;
}

void tcm__segments_destroy(tcm_server_t *srv)
{
    if (srv->meta)
        tcm__unmap(srv->meta, srv->meta_size);
    if (srv->heap)
        tcm__unmap(srv->heap, srv->heap_size);
    srv->meta = NULL;
    srv->heap = NULL;
    if (srv->heap_fd >= 0) {
        tcm__close(srv->heap_fd);
        tcm__shm_unlink(srv->heap_name);
    }
    if (srv->meta_fd >= 0) {
        tcm__close(srv->meta_fd);
        tcm__shm_unlink(srv->meta_name);
    }
    srv->heap_fd = srv->meta_fd = -1;
    if (srv->lock_fd >= 0) {
        tcm__shm_unlink(srv->lock_name);
        tcm__close(srv->lock_fd);
        srv->lock_fd = -1;
    }
}

static void init_channel(tcm_server_t *srv, tcm_client_t *c)
{
    const tcm_chan_layout_t *l = &c->lay;
    tcm_chan_hdr_t *hdr = (tcm_chan_hdr_t *)c->chan;
    hdr->magic = TCM_CHAN_MAGIC;
    hdr->version = TCM_LAYOUT_VERSION;
    hdr->client_id = c->id;
    hdr->size = l->size;
    hdr->nslots = l->nslots;
    hdr->ring_cap = l->ring_cap;
    hdr->max_threads = l->max_threads;
    hdr->nclasses = TCM_NCLASSES;
    hdr->off_ring = l->off_ring;
    hdr->off_slots = l->off_slots;
    hdr->off_tcaches = l->off_tcaches;
    hdr->tcache_stride = l->tcache_stride;
    hdr->off_xfer = l->off_xfer;
    memcpy(hdr->bin_slot_off, l->bin_slot_off, sizeof hdr->bin_slot_off);
    memcpy(hdr->xfer_slot_off, l->xfer_slot_off, sizeof hdr->xfer_slot_off);
    c->ring = (tcm_ring_t *)(c->chan + l->off_ring);
    c->slots = (tcm_slot_t *)(c->chan + l->off_slots);
    tcm__ring_init(c->ring, l->ring_cap);
    (void)srv;
}

int tcm__client_create(tcm_server_t *srv, pid_t pid, uid_t uid, tcm_client_t **out)
{
    uint32_t idx = TCM_MAX_CLIENTS;
    for (uint32_t i = 0; i < TCM_MAX_CLIENTS; i++)
        if (!atomic_load_explicit(&srv->clients[i], memory_order_acquire)) {
            idx = i;
            break;
        }
    if (idx == TCM_MAX_CLIENTS)
        return -EMFILE;

    tcm_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->index = idx;
    c->id = ++srv->next_client_id;
    srv->slot_gen[idx] = (uint8_t)(srv->slot_gen[idx] % TCM_TAG_GENS + 1);
    c->tag = (uint16_t)(srv->slot_gen[idx] << TCM_TAG_INDEX_BITS | idx);
    c->pid = pid;
    c->uid = uid;
    c->attached_unix = (uint64_t)time(NULL);
    c->lay = srv->chan_layout;
    snprintf(c->chan_name, sizeof c->chan_name, "/tcm.%s.ch.%u", srv->name, c->id);
    c->chan_fd = tcm__shm_create(c->chan_name, c->lay.size, 0600);
    int err = c->chan_fd;
    if (err < 0) {
        tcm__log(TCM_LOG_ERROR, "shm_open(%s) failed: %s", c->chan_name, strerror(-err));
        goto out_free;
    }
    if (uid != geteuid() && geteuid() == 0)
        tcm__shm_chown(c->chan_fd, uid);
    /* header, ring and slots are written at once; thread caches and the
     * transfer tier are backed by the client as they grow */
    if ((err = tcm__commit(c->chan_fd, 0, c->lay.off_tcaches)) != 0) {
        tcm__log(TCM_LOG_ERROR, "fallocate(%s) failed: %s", c->chan_name, strerror(-err));
        goto out_unlink;
    }
    char why[256];
    c->chan = tcm__map(c->chan_fd, c->lay.size, NULL, true, why, sizeof why);
    if (!c->chan) {
        tcm__log(TCM_LOG_ERROR, "cannot map channel %s: %s", c->chan_name, why);
        err = -ENOMEM;
        goto out_unlink;
    }
    init_channel(srv, c);
    atomic_store_explicit(&c->state, TCM_CL_ACTIVE, memory_order_relaxed);
    atomic_store_explicit(&srv->clients[idx], c, memory_order_release);
    if (idx + 1 > atomic_load(&srv->clients_hw))
        atomic_store(&srv->clients_hw, idx + 1);
    atomic_fetch_add(&srv->meta->stats.clients_attached, 1);
    atomic_fetch_add(&srv->meta->stats.clients_total, 1);
    *out = c;
    return 0;

out_unlink:
    tcm__close(c->chan_fd);
    tcm__shm_unlink(c->chan_name);
out_free:
    free(c);
    return err;
}

void tcm__client_destroy(tcm_server_t *srv, tcm_client_t *c)
{
    tcm__unmap(c->chan, c->lay.size);
    tcm__close(c->chan_fd);
    tcm__shm_unlink(c->chan_name);
    atomic_fetch_sub(&srv->meta->stats.clients_attached, 1);
    free(c);
}
