/* segments.c — the daemon's shared-memory segments: the heap, the metadata,
 * the state segment and the name lock, created fresh or adopted from a
 * previous tcmd (after checking they are this heap's and this layout's),
 * and each client's channel. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crash.h"
#include "holders.h"
#include "log.h"
#include "prim.h"
#include "ring.h"
#include "segments.h"
#include "server.h"
#include "util.h"

static void unlink_all(tcm_server_t *srv)
{
    char prefix[100];
    snprintf(prefix, sizeof prefix, "/tcm.%s.ch.", srv->name);
    int n = tcm__shm_unlink_prefix(prefix);
    n += tcm__shm_unlink(srv->heap_name) == 0;
    n += tcm__shm_unlink(srv->meta_name) == 0;
    n += tcm__shm_unlink(srv->state_name) == 0;
    if (n)
        tcm__log(TCM_LOG_WARN, "removed %d segments of a previous heap named '%s'", n, srv->name);
}

/* What differs between a segment and this tcmd; NULL if it can be adopted.
 * may_cut: one larger than want_size is cut back to it (the heap: a
 * client holds its descriptor and may have extended it; the metadata and
 * state, which no client can write, are another heap's if larger). */
static const char *adoption_problem(tcm_server_t *srv, const char *seg, tcm_handle_t fd, uint64_t want_size,
                                    bool may_cut, char *why, size_t len)
{
    uint64_t size;
    tcm_uid_t uid;
    unsigned mode;
    int err = tcm__shm_stat(fd, &size, &uid, &mode);
    if (err)
        snprintf(why, len, "%s: fstat failed: %s", seg, strerror(-err));
    else if (uid != tcm__uid())
        snprintf(why, len, "%s is owned by uid %u, this tcmd runs as uid %u", seg, (unsigned)uid,
                 tcm__uid());
    else if (may_cut && size > want_size && (err = tcm__shm_cut(fd, want_size)) == 0) {
        /* grown by someone who kept its descriptor (a client may ftruncate
         * what it was handed): nothing of the heap lies beyond want_size */
        tcm__log(TCM_LOG_WARN, "%s had grown to %llu bytes (a client extended it): cut back to its %llu bytes",
                 seg, (unsigned long long)size, (unsigned long long)want_size);
        return NULL;
    } else if (size != want_size) {
        char a[32], b[32];
        snprintf(why, len, "%s is %s (%llu bytes), a heap of --heap-size %s needs %llu bytes%s%s", seg,
                 tcm__format_size(size, a, sizeof a), (unsigned long long)size,
                 tcm__format_size(srv->heap_size, b, sizeof b), (unsigned long long)want_size,
                 err ? ": cutting it back failed: " : "", err ? strerror(-err) : "");
    } else
        return NULL;
    return why;
}

/* The shared parts' versions this tcmd serves: its own and the previous
 * release's (tcm_layout.h, "Version rule"). */
static bool abi_served(uint32_t version)
{
    return version >= TCM_ABI_VERSION_OLDEST && version <= TCM_ABI_VERSION;
}

/* Check the headers of segments left by a previous tcmd; fills why. */
static bool can_adopt(tcm_server_t *srv, const tcm_meta_hdr_t *m, const tcm_state_hdr_t *st, char *why, size_t len)
{
    if (m->magic != TCM_META_MAGIC)
        snprintf(why, len, "%s is not a tcm metadata segment (bad magic)", srv->meta_name);
    else if (!abi_served(m->version))
        snprintf(why, len, "%s has layout version %u, this tcmd serves %u to %u", srv->meta_name, m->version,
                 TCM_ABI_VERSION_OLDEST, TCM_ABI_VERSION);
    else if (st->version < TCM_STATE_VERSION_OLDEST || st->version > TCM_STATE_VERSION)
        snprintf(why, len, "%s has layout version %u, this tcmd adopts %u to %u", srv->state_name, st->version,
                 TCM_STATE_VERSION_OLDEST, TCM_STATE_VERSION);
    else if (st->base != srv->base || m->base != srv->base)
        snprintf(why, len, "%s is mapped at --base 0x%llx, this tcmd was given 0x%llx", srv->state_name,
                 (unsigned long long)st->base, (unsigned long long)srv->base);
    else if (st->heap_size != srv->heap_size || m->heap_size != srv->heap_size)
        snprintf(why, len, "%s describes a heap of %llu bytes, --heap-size is %llu", srv->state_name,
                 (unsigned long long)st->heap_size, (unsigned long long)srv->heap_size);
    else if (st->max_threads != srv->max_threads)
        snprintf(why, len, "%s was created with --max-threads %u, this tcmd was given %u", srv->state_name,
                 st->max_threads, srv->max_threads);
    else if (st->uid != tcm__uid())
        snprintf(why, len, "%s belongs to uid %u, this tcmd runs as uid %u", srv->state_name, st->uid,
                 tcm__uid());
    else if (st->page_shift != TCM_PAGE_SHIFT || m->page_shift != TCM_PAGE_SHIFT || m->nclasses != TCM_NCLASSES)
        snprintf(why, len, "%s has another page size or class table", srv->meta_name);
    else
        return true;
    return false;
}

static int map_or_log(tcm_server_t *srv, tcm_handle_t fd, uint64_t size, void *at, void **out, const char *what)
{
    char err[256];
    *out = tcm__map(fd, size, at, true, err, sizeof err);
    if (!*out) {
        tcm__log(TCM_LOG_ERROR, "cannot map %s: %s", what, err);
        return -1;
    }
    (void)srv;
    return 0;
}

/* Take the heap's name: one tcmd per name. 0 or -errno, logged. */
static int name_lock(tcm_server_t *srv)
{
    snprintf(srv->lock_name, sizeof srv->lock_name, "/tcm.%s.lock", srv->name);
    snprintf(srv->heap_name, sizeof srv->heap_name, "/tcm.%s.heap", srv->name);
    snprintf(srv->meta_name, sizeof srv->meta_name, "/tcm.%s.meta", srv->name);
    snprintf(srv->state_name, sizeof srv->state_name, "/tcm.%s.state", srv->name);
    srv->heap_fd = srv->meta_fd = srv->state_fd = -1;

    srv->lock_fd = tcm__lock_name(srv->lock_name);
    if (srv->lock_fd < 0) {
        if (srv->lock_fd == -EBUSY)
            tcm__log(TCM_LOG_ERROR, "another tcmd is already running with name '%s'", srv->name);
        else
            tcm__log(TCM_LOG_ERROR, "shm_open(%s) failed: %s", srv->lock_name, strerror(-srv->lock_fd));
        return srv->lock_fd;
    }
    return 0;
}

/* The roots table's size: the roots setting for a new heap; an adopted
 * one keeps the size it was made with. */
static uint32_t left_nroots(tcm_server_t *srv)
{
    uint32_t n = (uint32_t)srv->roots;
    char why[160];
    const tcm_meta_hdr_t *m = srv->meta_fd >= 0 ? tcm__map(srv->meta_fd, sizeof *m, NULL, false, why, sizeof why)
                                                : NULL;
    if (m && m->magic == TCM_META_MAGIC && abi_served(m->version) && m->nroots >= TCM_ROOTS_MIN &&
        m->nroots <= TCM_ROOTS_MAX && !(m->nroots & (m->nroots - 1))) {
        if (m->nroots != n)
            tcm__log(TCM_LOG_INFO, "the heap left under the name '%s' has a table of %u roots: kept (roots %u "
                     "applies to a new heap)", srv->name, m->nroots, n);
        n = m->nroots;
    }
    if (m)
        tcm__unmap((void *)m, sizeof *m);
    return n;
}

/* A state segment of an older layout ends where the first part it lacks
 * begins: 14 and 15 where the huge-range hint does
 * (tcm_state_layout_t.off_huge), 16 where the heap profile does
 * (off_profile). It grows to this layout's size, zeros (no range known to
 * be huge, no sample) before the size check, and the migration
 * (migrate.c) then moves its version on. Killed in between, the next tcmd
 * finds the old version at the new size, which it takes as is. */
#define STATE_VERSION_HUGE_HINT 16u
#define STATE_VERSION_PROFILE 17u
static void grow_older_state(tcm_server_t *srv, const tcm_state_hdr_t *st, const tcm_state_layout_t *sl)
{
    uint64_t size;
    tcm_uid_t uid;
    unsigned mode;
    uint64_t old_end = st->version < STATE_VERSION_HUGE_HINT ? sl->off_huge : sl->off_profile;
    if (st->version >= STATE_VERSION_PROFILE || st->version < TCM_STATE_VERSION_OLDEST ||
        tcm__shm_stat(srv->state_fd, &size, &uid, &mode) != 0 || size != old_end || uid != tcm__uid())
        return;
    int err = tcm__shm_cut(srv->state_fd, sl->size);
    if (err)
        tcm__log(TCM_LOG_WARN, "%s: growing it to layout %u's %llu bytes failed: %s", srv->state_name,
                 TCM_STATE_VERSION, (unsigned long long)sl->size, strerror(-err));
}

/* Segments a previous tcmd left under the name (some of heap_fd, meta_fd,
 * state_fd open): checked for adoption. 0 with *fresh set when they were
 * never completely created (replaced: nothing attached to them), 0 to
 * adopt them, -1 (logged) when they belong to another configuration. */
static int check_left_segments(tcm_server_t *srv, const tcm_meta_layout_t *ml, const tcm_state_layout_t *sl,
                               bool *fresh)
{
    char why[320];
    const tcm_state_hdr_t *st = NULL;
    const tcm_meta_hdr_t *m = NULL;
    if (srv->meta_fd >= 0)
        m = tcm__map(srv->meta_fd, sizeof *m, NULL, false, why, sizeof why);
    if (srv->state_fd >= 0)
        st = tcm__map(srv->state_fd, sizeof *st, NULL, false, why, sizeof why);
    bool incomplete = !st || st->magic != TCM_STATE_MAGIC || srv->heap_fd < 0 || srv->meta_fd < 0;
    bool other_version = m && m->magic == TCM_META_MAGIC && !abi_served(m->version);
    const char *problem = NULL;
    if (other_version) {
        snprintf(why, sizeof why, "%s has layout version %u, this tcmd serves %u to %u", srv->meta_name,
                 m->version, TCM_ABI_VERSION_OLDEST, TCM_ABI_VERSION);
        problem = why;
    } else if (!incomplete) {
        grow_older_state(srv, st, sl);
        if (!(problem = adoption_problem(srv, srv->heap_name, srv->heap_fd, srv->heap_size, true, why, sizeof why)) &&
            !(problem = adoption_problem(srv, srv->meta_name, srv->meta_fd, ml->size, false, why, sizeof why)) &&
            !(problem = adoption_problem(srv, srv->state_name, srv->state_fd, sl->size, false, why, sizeof why)) &&
            !can_adopt(srv, m, st, why, sizeof why))
            problem = why;
    }
    if (m)
        tcm__unmap((void *)m, sizeof *m);
    if (st)
        tcm__unmap((void *)st, sizeof *st);
    if (problem) {
        tcm__log(TCM_LOG_ERROR, "cannot adopt the heap left under the name '%s': %s", srv->name, problem);
        tcm__log(TCM_LOG_ERROR, "start tcmd with the options that heap was created with, or with "
                 "--discard-heap to replace it (its contents are lost)");
        return -1;
    }
    if (incomplete) {
        /* no client can attach before creation completes */
        tcm__log(TCM_LOG_WARN, "the heap under the name '%s' was never completely created: replacing it",
                 srv->name);
        tcm__close(srv->heap_fd);
        tcm__close(srv->meta_fd);
        tcm__close(srv->state_fd);
        srv->heap_fd = srv->meta_fd = srv->state_fd = -1;
        unlink_all(srv);
        *fresh = true;
    }
    return 0;
}

/* A new heap's three segments, after the channels of a heap that is gone.
 * 0 or -1, logged. */
static int create_segments(tcm_server_t *srv, const tcm_meta_layout_t *ml, const tcm_state_layout_t *sl)
{
    char prefix[100];
    snprintf(prefix, sizeof prefix, "/tcm.%s.ch.", srv->name);
    tcm__shm_unlink_prefix(prefix); /* channels of a heap that is gone */
    struct { const char *name; uint64_t size; int *fd; } segs[] = {
        {srv->heap_name, srv->heap_size, &srv->heap_fd},
        {srv->meta_name, ml->size, &srv->meta_fd},
        {srv->state_name, sl->size, &srv->state_fd}};
    for (unsigned i = 0; i < 3; i++) {
        *segs[i].fd = tcm__shm_create(segs[i].name, segs[i].size, 0600);
        if (*segs[i].fd < 0) {
            tcm__log(TCM_LOG_ERROR, "shm_open(%s) failed: %s", segs[i].name, strerror(-*segs[i].fd));
            return -1;
        }
    }
    return 0;
}

/* Map the three segments (the heap at --base, its doorbell page committed)
 * and point the heap at them; a fresh heap's fixed parts are committed
 * first. 0 or -1, logged. */
static int map_segments(tcm_server_t *srv, const tcm_meta_layout_t *ml, const tcm_state_layout_t *sl, bool fresh)
{
    if (map_or_log(srv, srv->heap_fd, srv->heap_size, (void *)(uintptr_t)srv->base, (void **)&srv->heap, "the heap"))
        return -1;
    int err = tcm__commit(srv->heap_fd, 0, TCM_PAGE_SIZE);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "fallocate(%s, doorbell page) failed: %s", srv->heap_name, strerror(-err));
        return -1;
    }
    srv->bell = (tcm_bell_t *)srv->heap;
    if (map_or_log(srv, srv->meta_fd, ml->size, NULL, (void **)&srv->meta, "the metadata") ||
        map_or_log(srv, srv->state_fd, sl->size, NULL, (void **)&srv->state, "the state segment"))
        return -1;
    if (fresh) {
        /* the headers, class table, roots and the client records of
         * max_clients now (the room for more stays a hole); the per-page
         * parts grow with the heap, the departed holders' with use */
        uint64_t records_end = sl->off_clients + srv->max_clients * sizeof(tcm_client_rec_t);
        if ((err = tcm__commit(srv->meta_fd, 0, ml->off_page_class)) != 0 ||
            (err = tcm__commit(srv->state_fd, 0, (records_end + 4095) & ~4095ull)) != 0 ||
            (err = tcm__commit(srv->state_fd, sl->off_holders, 4096)) != 0) { /* the first group's entry */
            tcm__log(TCM_LOG_ERROR, "fallocate(metadata) failed: %s", strerror(-err));
            return -1;
        }
    }
    if (tcm__heap_attach(&srv->h, srv->meta, srv->state, srv->nroots, srv->heap_fd, srv->meta_fd, srv->state_fd,
                         srv->heap_size, srv->base, srv->max_threads, fresh) != 0) {
        tcm__log(TCM_LOG_ERROR, "cannot reserve memory for a heap of %llu pages",
                 (unsigned long long)(srv->heap_size >> TCM_PAGE_SHIFT));
        return -1;
    }
    return 0;
}

int tcm__segments_open(tcm_server_t *srv)
{
    int err = name_lock(srv);
    if (err)
        return err;
    uint32_t npages = (uint32_t)(srv->heap_size >> TCM_PAGE_SHIFT);
    tcm_meta_layout_t ml;
    tcm_state_layout_t sl;

    /* We hold the name. Segments under it are a previous tcmd's heap. */
    if (srv->discard_heap) {
        tcm__log(TCM_LOG_WARN, "--discard-heap: replacing any heap left under the name '%s'", srv->name);
        unlink_all(srv);
    }
    srv->heap_fd = tcm__shm_open(srv->heap_name, true);
    srv->meta_fd = tcm__shm_open(srv->meta_name, true);
    srv->state_fd = tcm__shm_open(srv->state_name, true);
    srv->nroots = left_nroots(srv);
    tcm__meta_layout(&ml, npages, srv->nroots);
    tcm__state_layout(&sl, npages);
    srv->meta_size = ml.size;
    srv->state_size = sl.size;
    bool fresh = srv->heap_fd < 0 && srv->meta_fd < 0 && srv->state_fd < 0;
    if (!fresh && check_left_segments(srv, &ml, &sl, &fresh) != 0)
        goto fail;
    if (fresh && create_segments(srv, &ml, &sl) != 0)
        goto fail;
    if (map_segments(srv, &ml, &sl, fresh) != 0)
        goto fail;
    if (fresh) {
        srv->state->max_clients = (uint32_t)srv->max_clients;
    } else if (srv->state->max_clients < TCM_MAX_CLIENTS_MIN || srv->state->max_clients > TCM_CLIENTS_MAX) {
        tcm__log(TCM_LOG_ERROR, "cannot adopt the heap left under the name '%s': its state says %u client records "
                 "(%u to %u); start tcmd with --discard-heap to replace it", srv->name, srv->state->max_clients,
                 TCM_MAX_CLIENTS_MIN, TCM_CLIENTS_MAX);
        goto fail;
    } else {
        if (srv->state->max_clients != srv->max_clients)
            tcm__log(TCM_LOG_INFO, "the heap left under the name '%s' has %u client records: kept (max_clients %llu "
                     "applies to a new heap)", srv->name, srv->state->max_clients,
                     (unsigned long long)srv->max_clients);
        srv->max_clients = srv->state->max_clients;
    }
    srv->dstats = &srv->state->dstats;
    tcm__chan_layout(&srv->chan_layout, srv->h.classes, srv->max_threads, false);
    srv->adopted = !fresh;
    if (fresh) {
        atomic_signal_fence(memory_order_seq_cst);
        srv->state->magic = TCM_STATE_MAGIC;
    }
    return 0;

fail:
    srv->keep_segments = true; /* never delete what we could not adopt */
    tcm__segments_close(srv);
    return -1;
}

void tcm__segments_close(tcm_server_t *srv)
{
    if (srv->meta)
        tcm__unmap(srv->meta, srv->meta_size);
    if (srv->state)
        tcm__unmap(srv->state, srv->state_size);
    if (srv->heap)
        tcm__unmap(srv->heap, srv->heap_size);
    srv->meta = NULL;
    srv->state = NULL;
    srv->heap = NULL;
    tcm__close(srv->heap_fd);
    tcm__close(srv->meta_fd);
    tcm__close(srv->state_fd);
    srv->heap_fd = srv->meta_fd = srv->state_fd = -1;
    if (!srv->keep_segments) {
        tcm__shm_unlink(srv->heap_name);
        tcm__shm_unlink(srv->meta_name);
        tcm__shm_unlink(srv->state_name);
    }
    if (srv->lock_fd >= 0) {
        if (!srv->keep_segments)
            tcm__shm_unlink(srv->lock_name);
        tcm__close(srv->lock_fd);
        srv->lock_fd = -1;
    }
}

static tcm_client_rec_t *records(tcm_server_t *srv)
{
    return (tcm_client_rec_t *)((uint8_t *)srv->state + srv->h.sl.off_clients);
}

static int map_channel(tcm_server_t *srv, tcm_client_t *c)
{
    char why[256];
    c->lay = srv->chan_layout;
    c->chan = tcm__map(c->chan_fd, c->lay.size, NULL, true, why, sizeof why);
    if (!c->chan) {
        tcm__log(TCM_LOG_ERROR, "cannot map channel %s: %s", c->rec->chan_name, why);
        return -ENOMEM;
    }
    c->ring = (tcm_ring_t *)(c->chan + c->lay.off_ring);
    c->slots = (tcm_slot_t *)(c->chan + c->lay.off_slots);
    /* the client can shrink or punch its channel at any instant: a SIGBUS
     * there turns the mapping into zeros and marks the client, never
     * kills tcmd */
    c->zone = tcm__fault_zone_add(c->chan, c->lay.size, &c->chan_broken);
    if (c->zone < 0) {
        tcm__log(TCM_LOG_ERROR, "channel %s: no fault zone left", c->rec->chan_name);
        tcm__unmap(c->chan, c->lay.size);
        c->chan = NULL;
        return -ENOSPC;
    }
    return 0;
}

static void unmap_channel(tcm_client_t *c)
{
    tcm__fault_zone_remove(c->zone);
    tcm__unmap(c->chan, c->lay.size);
    tcm__close(c->chan_fd);
    tcm__close(c->proc);
}

void tcm__channel_init(tcm_client_t *c)
{
    const tcm_chan_layout_t *l = &c->lay;
    tcm_chan_hdr_t *hdr = (tcm_chan_hdr_t *)c->chan;
    hdr->magic = TCM_CHAN_MAGIC;
    hdr->version = TCM_ABI_VERSION;
    hdr->client_id = c->rec->id;
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
    memcpy(hdr->bin_objs_off, l->bin_objs_off, sizeof hdr->bin_objs_off);
    memcpy(hdr->xfer_objs_off, l->xfer_objs_off, sizeof hdr->xfer_objs_off);
    tcm__ring_init(c->ring, l->ring_cap);
}

static void publish(tcm_server_t *srv, tcm_client_t *c)
{
    atomic_store_explicit(&srv->clients[c->index], c, memory_order_release);
    if (c->index + 1 > atomic_load(&srv->clients_hw))
        atomic_store(&srv->clients_hw, c->index + 1);
}

int tcm__client_create(tcm_server_t *srv, tcm_handle_t sock, tcm_pid_t pid, tcm_uid_t uid, tcm_client_t **out)
{
    tcm_client_rec_t *recs = records(srv);
    uint32_t idx = UINT32_MAX;
    for (uint32_t i = 0; i < srv->max_clients && idx == UINT32_MAX; i++)
        if (!atomic_load_explicit(&srv->clients[i], memory_order_acquire) &&
            atomic_load(&recs[i].state) == TCM_REC_FREE)
            idx = i;
    if (idx == UINT32_MAX)
        return -EMFILE;
    uint64_t start;
    tcm_handle_t proc = tcm__peer_proc_watch(sock, pid, &start);
    if (proc < 0)
        return proc;
    tcm_client_t *c = calloc(1, sizeof *c);
    uint16_t tag;
    int err = c ? tcm__tag_take(srv, idx, &tag) : -ENOMEM;
    if (err) {
        free(c);
        tcm__close(proc);
        return err;
    }
    tcm_client_rec_t *rec = &recs[idx];
    c->rec = rec;
    c->index = idx;
    c->proc = proc;
    /* a FREE record is nobody's: fill it, then claim it */
    rec->id = ++srv->state->next_client_id;
    rec->tag = tag;
    rec->pid = (uint32_t)pid;
    rec->proc_start = start;
    rec->uid = (uint32_t)uid;
    rec->token = tcm__random64();
    rec->attached_unix = (uint64_t)time(NULL);
    rec->tail = 0;
    atomic_store(&rec->said_bye, 0);
    atomic_store(&rec->bytes_out, 0);
    atomic_store(&rec->bytes_back, 0);
    atomic_store(&rec->requests, 0);
    atomic_store(&rec->errors, 0);
    snprintf(rec->chan_name, sizeof rec->chan_name, "/tcm.%.47s.ch.%u", srv->name, rec->id);
    tcm__proc_names(pid, c->comm, sizeof c->comm, c->exe, sizeof c->exe);
    atomic_signal_fence(memory_order_seq_cst);
    atomic_store(&rec->state, TCM_REC_CREATING); /* a crash from here: recovery unlinks the channel */
    TCM_CRASH_POINT(client_create);

    err = c->chan_fd = tcm__shm_create(rec->chan_name, srv->chan_layout.size, 0600);
    if (err < 0) {
        tcm__log(TCM_LOG_ERROR, "shm_open(%s) failed: %s", rec->chan_name, strerror(-err));
        goto out_free;
    }
    /* 0600 and never chowned: the client gets it as a descriptor */
    /* header and ring are written at once; each thread's slot when the
     * thread registers (the spare one now), thread caches and the transfer
     * tier as they grow */
    if ((err = tcm__commit(c->chan_fd, 0, srv->chan_layout.off_slots)) != 0) {
        tcm__log(TCM_LOG_ERROR, "fallocate(%s) failed: %s", rec->chan_name, strerror(-err));
        goto out_unlink;
    }
    if ((err = map_channel(srv, c)) != 0)
        goto out_unlink;
    if (!tcm__client_slot(c, srv->chan_layout.max_threads)) { /* the spare */
        err = -ENOMEM;
        goto out_unmap;
    }
    tcm__channel_init(c);
    atomic_store_explicit(&rec->state, TCM_REC_ACTIVE, memory_order_release);
    publish(srv, c);
    TCM_STAT_ADD_MAIN(srv->meta, clients_attached, 1);
    TCM_STAT_ADD_MAIN(srv->meta, clients_total, 1);
    *out = c;
    return 0;

out_unmap:
    tcm__fault_zone_remove(c->zone);
    tcm__unmap(c->chan, c->lay.size);
out_unlink:
    tcm__close(c->chan_fd);
    tcm__shm_unlink(rec->chan_name);
out_free:
    atomic_store(&rec->state, TCM_REC_FREE);
    tcm__tag_give_back(srv, tag);
    tcm__close(c->proc);
    free(c);
    return err;
}

tcm_slot_t *tcm__client_slot(tcm_client_t *c, uint32_t index)
{
    if (index >= c->lay.nslots)
        return NULL;
    if (!tcm__slot_backed(c, index)) {
        uint64_t off = c->lay.off_slots + (uint64_t)index * sizeof(tcm_slot_t);
        uint64_t lo = off & ~(uint64_t)4095, hi = off + sizeof(tcm_slot_t);
        int err = tcm__commit(c->chan_fd, lo, hi - lo);
        if (err) {
            tcm__log_limited(TCM_LOG_WARN, "fallocate(%s, slot %u) failed: %s", c->rec->chan_name, index,
                             strerror(-err));
            return NULL;
        }
        c->slots_backed[index / 64] |= 1ull << (index % 64);
    }
    return &c->slots[index];
}

uint32_t tcm__client_ask_flush(tcm_client_t *c)
{
    tcm_chan_hdr_t *hdr = (tcm_chan_hdr_t *)c->chan;
    uint32_t gen = atomic_fetch_add(&hdr->flush_gen, 1) + 1;
    atomic_fetch_add(&hdr->bg_wake, 1);
    tcm__wake(&hdr->bg_wake, 1);
    return gen;
}

/* An adopted channel: which slots its client (or a previous tcmd) backed. */
static void find_backed_slots(tcm_client_t *c)
{
    for (uint32_t i = 0; i < c->lay.nslots; i++) {
        uint64_t off = c->lay.off_slots + (uint64_t)i * sizeof(tcm_slot_t);
        if (tcm__backed_range(c->chan_fd, off & ~(uint64_t)4095, off + sizeof(tcm_slot_t) - (off & ~(uint64_t)4095)) == 1)
            c->slots_backed[i / 64] |= 1ull << (i % 64);
    }
}

/* The process of an adopted record, if it is still the one that attached:
 * the same pid with the same start time, not yet ended. */
static tcm_handle_t watch_adopted(const tcm_client_rec_t *rec)
{
    uint64_t start;
    tcm_handle_t proc = tcm__proc_watch((tcm_pid_t)rec->pid, &start);
    if (proc >= 0 && start != rec->proc_start) { /* the pid is another process's now */
        tcm__close(proc);
        proc = -1;
    }
    return proc < 0 ? -1 : proc;
}

int tcm__client_map(tcm_server_t *srv, uint32_t index, tcm_client_t **out)
{
    tcm_client_rec_t *rec = &records(srv)[index];
    tcm_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->rec = rec;
    c->index = index;
    c->adopted = true;
    rec->chan_name[sizeof rec->chan_name - 1] = 0;
    c->proc = watch_adopted(rec);
    if (c->proc >= 0) /* still the process that attached */
        tcm__proc_names(rec->pid, c->comm, sizeof c->comm, c->exe, sizeof c->exe);
    c->chan_fd = tcm__shm_open(rec->chan_name, true);
    uint64_t size;
    tcm_uid_t uid;
    unsigned mode;
    int err = c->chan_fd < 0 ? c->chan_fd : tcm__shm_stat(c->chan_fd, &size, &uid, &mode);
    if (!err)
        err = map_channel(srv, c);
    if (!err && size < srv->chan_layout.size) {
        /* its client shrank it: what lies beyond the end reads as zeros
         * (the fault zone), and the client is cut off like any other whose
         * channel broke */
        tcm__log(TCM_LOG_WARN, "client %u (pid %u): channel %s shrank to %llu bytes of %llu: it is cut off", rec->id,
                 rec->pid, rec->chan_name, (unsigned long long)size, (unsigned long long)srv->chan_layout.size);
        atomic_store(&c->chan_broken, 1);
    }
    if (!err)
        find_backed_slots(c);
    if (err) {
        tcm__log(TCM_LOG_WARN, "client %u (pid %u): cannot reopen channel %s: %s", rec->id, rec->pid,
                 rec->chan_name, strerror(-err));
        tcm__close(c->chan_fd);
        tcm__close(c->proc);
        free(c);
        return err;
    }
    publish(srv, c);
    *out = c;
    return 0;
}

bool tcm__client_alive(tcm_client_t *c)
{
    return c->proc >= 0 && !tcm__proc_exited(c->proc);
}

void tcm__client_unmap(tcm_server_t *srv, tcm_client_t *c)
{
    (void)srv;
    unmap_channel(c);
    free(c);
}

void tcm__client_destroy(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_client_rec_t *rec = c->rec;
    unmap_channel(c);
    tcm__shm_unlink(rec->chan_name);
    atomic_store(&rec->state, TCM_REC_FREE);
    TCM_STAT_ADD_MAIN(srv->meta, clients_attached, -1);
    free(c);
}
