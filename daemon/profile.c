/* profile.c — what clients ask of the heap profile's tables (samples.c;
 * docs/DESIGN.md, "Heap profiles"): a client samples an allocation by
 * giving it a page run of its own and telling tcmd the run, the size asked
 * for and its stack (TCM_OP_SAMPLE), and sends its code mappings
 * (TCM_OP_MAPS); tcmd stamps who sent them and keeps them in the state
 * segment, so that they outlive the process and tcmd. A client can lie
 * about its own stacks and mappings only: the run must be one it
 * allocated, and the process a sample names is the one its ring belongs
 * to. And the processes' records after a restart. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "central.h"
#include "heap.h"
#include "log.h"
#include "prim.h"
#include "samples.h"
#include "server.h"

_Static_assert(TCM_SAMPLE_PROCS_PER_UID >= TCM_DEFAULT_CLIENTS_PER_UID,
               "a user's share of the process records covers the processes it may attach by default");

/* c's record: the one it has, one a previous tcmd made for it, or a new
 * one (UINT32_MAX: the table or the user's share is full). */
static uint32_t proc_for(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_samples_t *s = &srv->h.samples;
    const tcm_client_rec_t *rec = c->rec;
    uint32_t hw = atomic_load_explicit(&s->hdr->procs_hw, memory_order_relaxed), free_one = UINT32_MAX;
    if (c->sample_proc && c->sample_proc <= hw)
        return c->sample_proc - 1;
    for (uint32_t i = 0; i < hw; i++) {
        tcm_sample_proc_t *p = &s->procs[i];
        uint32_t st = atomic_load_explicit(&p->state, memory_order_relaxed);
        if (st == TCM_SPROC_LIVE && p->client_id == rec->id && p->pid == rec->pid &&
            p->proc_start == rec->proc_start) {
            c->sample_proc = i + 1;
            return i;
        }
        if (st == TCM_SPROC_FREE && free_one == UINT32_MAX)
            free_one = i;
    }
    if (tcm__shares_of(&s->procs_by_uid, rec->uid) >= TCM_SAMPLE_PROCS_PER_UID)
        return UINT32_MAX;
    uint32_t i = free_one != UINT32_MAX ? free_one : hw;
    if (i >= TCM_SAMPLE_PROCS ||
        !tcm__state_back(&srv->h, s->procs_backed, srv->h.sl.off_sample_procs, (uint64_t)i * sizeof(tcm_sample_proc_t),
                         sizeof(tcm_sample_proc_t), "heap profile"))
        return UINT32_MAX;
    if (i == hw)
        atomic_store_explicit(&s->hdr->procs_hw, hw + 1, memory_order_release);
    tcm_sample_proc_t *p = &s->procs[i];
    p->client_id = rec->id;
    p->pid = rec->pid;
    p->uid = rec->uid;
    p->proc_start = rec->proc_start;
    p->attached_unix = rec->attached_unix;
    p->departed_unix = 0;
    p->maps_len[0] = p->maps_len[1] = p->maps_fill = 0;
    atomic_store_explicit(&p->maps_cur, 0, memory_order_relaxed);
    memcpy(p->comm, c->comm, sizeof p->comm);
    memcpy(p->exe, c->exe, sizeof p->exe);
    atomic_store_explicit(&p->state, TCM_SPROC_LIVE, memory_order_release);
    s->refs[i] = 0;
    tcm__shares_add(&s->procs_by_uid, rec->uid);
    c->sample_proc = i + 1;
    return i;
}

/* An entry of a table in the state segment, backed and mapped (a hint:
 * a failure to map only faults it later); one backed already was mapped
 * then or written since (a samples page holds 16 entries: an madvise a
 * sample would cost the heap thread a system call each). */
static void back_and_map(tcm_heap_t *h, uint64_t *bits, uint64_t part_off, uint64_t at, uint64_t len)
{
    bool backed = true;
    for (uint64_t page = at / 4096; page <= (at + len - 1) / 4096; page++)
        backed = backed && tcm__bit(bits, page);
    if (!backed && tcm__state_back(h, bits, part_off, at, len, "heap profile"))
        tcm__populate((uint8_t *)h->state + part_off + at, len);
}

void tcm__profile_ahead_ht(tcm_server_t *srv)
{
    tcm_heap_t *h = &srv->h;
    tcm_samples_t *s = &h->samples;
    if (!atomic_load_explicit(&srv->meta->profile_sample, memory_order_relaxed))
        return;
    uint32_t procs = atomic_load_explicit(&s->hdr->procs_hw, memory_order_relaxed),
             samples = atomic_load_explicit(&s->hdr->samples_hw, memory_order_relaxed);
    if (procs == s->ahead_procs && samples == s->ahead_samples)
        return; /* done at these marks (or failed: a full /dev/shm is not tried at every idle turn) */
    s->ahead_procs = procs;
    s->ahead_samples = samples;
    if (procs < TCM_SAMPLE_PROCS)
        back_and_map(h, s->procs_backed, h->sl.off_sample_procs, (uint64_t)procs * sizeof(tcm_sample_proc_t),
                     sizeof(tcm_sample_proc_t));
    if (samples < TCM_SAMPLES)
        back_and_map(h, s->samples_backed, h->sl.off_samples, (uint64_t)samples * sizeof(tcm_sample_t),
                     sizeof(tcm_sample_t));
}

void tcm__sample_client_gone_ht(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_samples_t *s = &srv->h.samples;
    if (!c->sample_proc)
        return;
    uint32_t i = c->sample_proc - 1;
    c->sample_proc = 0;
    tcm_sample_proc_t *p = &s->procs[i];
    if (atomic_load_explicit(&p->state, memory_order_relaxed) != TCM_SPROC_LIVE)
        return;
    p->departed_unix = (uint32_t)time(NULL);
    if (s->refs[i])
        atomic_store_explicit(&p->state, TCM_SPROC_DEPARTED, memory_order_release);
    else
        tcm__sample_proc_free(s, i);
}

/* What a process says of its mappings: printable text and newlines. */
static bool text_ok(const char *text, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        if ((text[i] < ' ' || text[i] > '~') && text[i] != '\n')
            return false;
    return true;
}

int tcm__sample_maps_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t pos, uint64_t total, const char *text,
                        uint32_t len)
{
    if (!atomic_load_explicit(&srv->meta->profile_sample, memory_order_relaxed))
        return TCM_ST_OK; /* sampling was turned off: nothing is kept */
    if (total > TCM_SAMPLE_MAPS_BYTES || pos > total || len > total - pos || !text_ok(text, len))
        return TCM_ST_BAD_COUNT;
    uint32_t i = proc_for(srv, c);
    if (i == UINT32_MAX)
        return TCM_ST_OK;
    tcm_sample_proc_t *p = &srv->h.samples.procs[i];
    uint32_t other = 1 - atomic_load_explicit(&p->maps_cur, memory_order_relaxed);
    if (pos == 0)
        p->maps_fill = 0;
    if (pos != p->maps_fill)
        return TCM_ST_BAD_COUNT; /* in order, from the start */
    memcpy(p->maps[other] + pos, text, len);
    p->maps_fill = (uint32_t)(pos + len);
    if (p->maps_fill == total) {
        p->maps_len[other] = (uint32_t)total;
        atomic_store_explicit(&p->maps_cur, other, memory_order_release);
        p->maps_fill = 0;
    }
    return TCM_ST_OK;
}

int tcm__sample_take_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t run, uint64_t size, uint64_t interval,
                        const uint64_t *frames, uint32_t nframes, bool *recorded)
{
    tcm_heap_t *h = &srv->h;
    tcm_samples_t *s = &h->samples;
    *recorded = false;
    uint32_t sp;
    int st = tcm__large_check_ht(h, run, &sp);
    if (st == TCM_ST_DOUBLE_FREE || (st == TCM_ST_NOT_OBJECT && !(run & (TCM_PAGE_SIZE - 1)))) {
        /* a page no run starts at now, free or in another span: freed
         * already, as when another process took the object and its free
         * came through its own ring first (the SAMPLE is posted without
         * waking tcmd). Nothing of it is live, so nothing is kept. */
        atomic_fetch_add_explicit(&s->refused, 1, memory_order_relaxed);
        return TCM_ST_OK;
    }
    if (st != TCM_ST_OK)
        return st;
    if (h->spans[sp].owner != c->rec->tag) { /* only a run the client itself allocated (one in its run
                                                  cache may be another's): not kept */
        atomic_fetch_add_explicit(&s->refused, 1, memory_order_relaxed);
        return TCM_ST_OK;
    }
    if (nframes > TCM_SAMPLE_FRAMES || size == 0 || size > tcm__page_off(h->spans[sp].npages) || interval == 0)
        return TCM_ST_BAD_COUNT;
    uint32_t mark = h->spans[sp].sample;
    if ((mark && mark != TCM_SAMPLE_AWAITED) || !atomic_load_explicit(&srv->meta->profile_sample, memory_order_relaxed))
        return TCM_ST_OK; /* sampled already; or sampling was turned off since (an awaited mark stays: the run
                             still goes back to tcmd) */
    uint32_t uid = c->rec->uid;
    if (tcm__shares_of(&s->by_uid, uid) >= TCM_SAMPLES_PER_UID) {
        atomic_fetch_add_explicit(&s->refused, 1, memory_order_relaxed);
        return TCM_ST_OK;
    }
    uint32_t proc = proc_for(srv, c), i = tcm__sample_slot(s);
    if (proc == UINT32_MAX || i == UINT32_MAX ||
        !tcm__state_back(h, s->samples_backed, h->sl.off_samples, (uint64_t)i * sizeof(tcm_sample_t),
                         sizeof(tcm_sample_t), "heap profile")) {
        atomic_fetch_add_explicit(&s->refused, 1, memory_order_relaxed);
        return TCM_ST_OK;
    }
    uint32_t hw = atomic_load_explicit(&s->hdr->samples_hw, memory_order_relaxed);
    if (i >= hw) /* before the entry: a reader and a recovery look below it only */
        atomic_store_explicit(&s->hdr->samples_hw, i + 1, memory_order_release);
    tcm_sample_t *e = &s->samples[i];
    e->proc = proc;
    e->run = run;
    e->size = size;
    e->interval = interval;
    e->born_unix = (uint32_t)time(NULL);
    e->nframes = (uint16_t)nframes;
    e->reserved = 0;
    memcpy(e->frames, frames, nframes * sizeof frames[0]);
    atomic_store_explicit(&e->state, s->gen, memory_order_release);
    s->gen += 2;
    TCM_PERSIST_STORE(h->spans[sp].sample, i + 1);
    tcm__sample_count(s, i);
    atomic_fetch_add_explicit(&s->taken, 1, memory_order_relaxed);
    *recorded = true;
    return TCM_ST_OK;
}

/* The ids of the clients still attached (or evicted, not gone yet), an
 * open-addressing set of a power of two at least twice their number (0:
 * empty; ids start at 1): a live process record whose client is not in it
 * departs. One pass over the client records, not one per process record.
 * NULL: out of memory. */
static uint32_t *attached_ids(const tcm_server_t *srv, uint32_t *mask)
{
    const tcm_client_rec_t *recs = (const tcm_client_rec_t *)((const uint8_t *)srv->state + srv->h.sl.off_clients);
    uint32_t n = srv->state->max_clients < TCM_CLIENTS_MAX ? srv->state->max_clients : TCM_CLIENTS_MAX;
    uint32_t cap = tcm__pow2_at_least(2ull * n + 2);
    uint32_t *set = calloc(cap, sizeof *set);
    if (!set)
        return NULL;
    *mask = cap - 1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t st = atomic_load_explicit(&recs[i].state, memory_order_relaxed), id = recs[i].id;
        if ((st != TCM_REC_ACTIVE && st != TCM_REC_EVICTED) || !id)
            continue;
        uint32_t k = tcm__uid_hash(id, *mask);
        while (set[k] && set[k] != id)
            k = (k + 1) & *mask;
        set[k] = id;
    }
    return set;
}

static bool id_in(const uint32_t *set, uint32_t mask, uint32_t id)
{
    for (uint32_t k = tcm__uid_hash(id, mask); set[k]; k = (k + 1) & mask)
        if (set[k] == id)
            return true;
    return false;
}

uint64_t tcm__samples_recover_ht(tcm_server_t *srv)
{
    tcm_heap_t *h = &srv->h;
    tcm_samples_t *s = &h->samples;
    uint64_t repairs = tcm__samples_recover_table_ht(h);
    uint32_t phw = atomic_load_explicit(&s->hdr->procs_hw, memory_order_relaxed), mask = 0;
    uint32_t *ids = attached_ids(srv, &mask); /* without it (no memory), every process record departs */
    for (uint32_t i = 0; i < phw; i++) {
        tcm_sample_proc_t *p = &s->procs[i];
        uint32_t st = atomic_load_explicit(&p->state, memory_order_relaxed);
        if (st == TCM_SPROC_FREE)
            continue;
        if (st > TCM_SPROC_DEPARTED || atomic_load_explicit(&p->maps_cur, memory_order_relaxed) > 1) {
            atomic_store_explicit(&p->state, TCM_SPROC_FREE, memory_order_relaxed); /* torn */
            repairs++;
            continue;
        }
        p->maps_fill = 0;
        for (unsigned k = 0; k < 2; k++)
            if (p->maps_len[k] > TCM_SAMPLE_MAPS_BYTES)
                p->maps_len[k] = 0;
        if (st == TCM_SPROC_LIVE && !(ids && id_in(ids, mask, p->client_id))) {
            p->departed_unix = (uint32_t)time(NULL);
            atomic_store_explicit(&p->state, st = TCM_SPROC_DEPARTED, memory_order_relaxed);
        }
        if (st == TCM_SPROC_DEPARTED && !s->refs[i]) {
            atomic_store_explicit(&p->state, TCM_SPROC_FREE, memory_order_relaxed);
            continue;
        }
        tcm__shares_add(&s->procs_by_uid, p->uid);
    }
    free(ids);
    return repairs;
}

