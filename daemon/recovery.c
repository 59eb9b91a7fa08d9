/* recovery.c — making an adopted heap consistent (docs/DESIGN.md, "Recovery
 * pass"): clients' records and channels, the page intent, the request
 * intent, the rings, every derived structure rebuilt from the authoritative
 * ones, the caches of clients that died, then the validator. Runs in the
 * main thread before the heap thread and the control socket start. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "central.h"
#include "holders.h"
#include "log.h"
#include "pageheap.h"
#include "prim.h"
#include "reclaim.h"
#include "recovery.h"
#include "samples.h"
#include "requests.h"
#include "ring.h"
#include "segments.h"
#include "server.h"
#include "stats.h"
#include "util.h"
#include "validate.h"
#include "validate_heap.h"



typedef struct report {
    uint32_t adopted, dead, dropped;
    uint64_t redone, rolled_back, repairs, reclaimed_bytes;
} report_t;

static tcm_client_rec_t *record(tcm_server_t *srv, uint32_t i)
{
    return (tcm_client_rec_t *)((uint8_t *)srv->state + srv->h.sl.off_clients) + i;
}

/* Map the channel of every client that was attached; drop records of
 * clients that never finished attaching or were already reclaimed. */
static void adopt_clients(tcm_server_t *srv, report_t *r)
{
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_rec_t *rec = record(srv, i);
        uint32_t state = atomic_load(&rec->state);
        if (state == TCM_REC_FREE)
            continue;
        rec->chan_name[sizeof rec->chan_name - 1] = 0;
        tcm_client_t *c;
        if ((state == TCM_REC_ACTIVE || state == TCM_REC_EVICTED || state == TCM_REC_DEAD) &&
            tcm__client_map(srv, i, &c) == 0) {
            c->conn = NULL;
            r->adopted++;
            continue;
        }
        /* CREATING: it never got its Welcome; REAPED: nothing left in it;
         * a channel that is gone: nothing to reclaim from */
        tcm__log(state == TCM_REC_ACTIVE ? TCM_LOG_WARN : TCM_LOG_INFO, "recovery: client %u (pid %u) %s: record dropped",
                 rec->id, rec->pid,
                 state == TCM_REC_CREATING ? "was still attaching"
                 : state == TCM_REC_REAPED ? "was already reclaimed"
                                           : "has no channel any more");
        tcm__shm_unlink(rec->chan_name);
        atomic_store(&rec->state, TCM_REC_FREE);
        r->dropped++;
    }
}

static bool page_intent_sane(const tcm_heap_t *h, const tcm_page_intent_t *pi)
{
    return pi->span >= 1 && pi->span <= h->npages && pi->first >= 1 && pi->npages >= 1 &&
           (uint64_t)pi->first + pi->npages <= h->npages &&
           (pi->kind == TCM_PAGES_UNMAP || pi->state == TCM_SPAN_LARGE ||
            (pi->state == TCM_SPAN_SMALL && pi->cls >= 1 && pi->cls < TCM_NCLASSES &&
             h->classes[pi->cls].span_pages == pi->npages && pi->rec < h->sl.max_recs[pi->cls]));
}

/* A span being made or unmade: both are redone (no object of a span being
 * made has been handed out yet; a span being unmade is empty). */
static void resolve_page_intent(tcm_server_t *srv, report_t *r)
{
    tcm_heap_t *h = &srv->h;
    tcm_page_intent_t *pi = &srv->state->page;
    uint32_t kind = atomic_load(&pi->kind);
    if (kind == TCM_PAGES_NONE)
        return;
    if (!page_intent_sane(h, pi)) {
        tcm__log(TCM_LOG_ERROR, "recovery: the interrupted span change (span %u, pages %u+%u) is not sane; dropped",
                 pi->span, pi->first, pi->npages);
    } else if (kind == TCM_PAGES_MAP) {
        /* a small span's object record was backed before the intent named it */
        tcm__span_map_ht(h, pi->span, pi->first, pi->npages, pi->state, pi->cls, pi->owner);
        if (pi->state == TCM_SPAN_SMALL)
            memset(tcm__span_bits(h, &h->spans[pi->span]), 0, h->sl.rec_bytes[pi->cls]);
        if ((uint64_t)pi->first + pi->npages > atomic_load(&srv->state->top))
            atomic_store(&srv->state->top, pi->first + pi->npages);
        tcm__log(TCM_LOG_INFO, "recovery: span %u (pages %u+%u) was being made: completed", pi->span, pi->first,
                 pi->npages);
        r->redone++;
    } else {
        tcm__span_unmap_ht(h, pi->first, pi->npages);
        tcm__log(TCM_LOG_INFO, "recovery: span %u (pages %u+%u) was being freed: completed", pi->span, pi->first,
                 pi->npages);
        r->redone++;
    }
    atomic_signal_fence(memory_order_seq_cst);
    atomic_store(&pi->kind, TCM_PAGES_NONE);
}

static const char *op_name(uint32_t op)
{
    return op < TCM_NOPS ? tcm__op_names[op] : "unknown operation";
}

/* Set or clear the bit of the object at off (and its owner tag), touching
 * nothing derived: the recovery pass rebuilds free counts and lists after. */
static bool object_bit(tcm_heap_t *h, unsigned cls, uint64_t off, bool set, uint16_t owner)
{
    if (off >= h->heap_size || off < TCM_PAGE_SIZE)
        return false;
    uint32_t s = h->page_span[off >> TCM_PAGE_SHIFT];
    if (!s || s > h->npages || h->spans[s].state != TCM_SPAN_SMALL || h->spans[s].cls != cls)
        return false;
    const tcm_span_t *sp = &h->spans[s];
    const tcm_class_info_t *ci = &h->classes[cls];
    uint64_t rel = off - tcm__page_off(sp->first);
    uint32_t i = (uint32_t)((rel * ci->recip) >> 32);
    if ((uint64_t)i * ci->size != rel || i >= ci->span_objs)
        return false;
    uint64_t *word = &tcm__span_bits(h, sp)[i / 64];
    if (set) {
        /* the refill made the word's owner word ready before it logged the
         * object: owner's, or naming a tag block */
        uint32_t *ow = &tcm__span_owners(h, sp)[i / 64];
        if ((*ow & TCM_OWNER_BLOCK) && (*ow & ~TCM_OWNER_BLOCK) < h->sl.max_tag_blocks)
            tcm__tag_block(h, *ow)[i % 64] = owner;
        else if (!(*word & ~(1ull << (i % 64))))
            *ow = owner; /* nobody else holds one of the word */
        *word |= 1ull << (i % 64);
    } else {
        *word &= ~(1ull << (i % 64));
    }
    return true;
}

/* Whether the ALLOC_PAGES in the intent made its run: the first page it
 * logged before mapping the run starts a page run of the client's (the
 * pages were free when it picked them, so no other run can be there). */
static bool pages_made(const tcm_heap_t *h, const tcm_req_intent_t *ri)
{
    uint32_t s;
    return ri->first && ri->first < h->npages && tcm__large_check_ht(h, tcm__page_off(ri->first), &s) == TCM_ST_OK &&
           h->spans[s].owner == ri->owner;
}

/* A stock of sample runs (TCM_ALLOC_SAMPLE_RUNS, requests.c): the runs
 * it logged, and the one being cut when the crash came if it was made,
 * each marked a sample's as the request marks it (a crash may have come
 * before the mark); a logged entry that names no run of the client's is
 * dropped. Returns how many are left in ri->offs. */
static uint32_t sample_runs_made(tcm_heap_t *h, tcm_req_intent_t *ri)
{
    uint32_t n = 0, s;
    uint64_t cut = tcm__page_off(ri->first);
    bool cut_logged = false;
    for (uint32_t i = 0; i < ri->n && i < TCM_SAMPLE_RUNS_MAX; i++) {
        if (tcm__large_check_ht(h, ri->offs[i], &s) != TCM_ST_OK || h->spans[s].owner != ri->owner)
            continue;
        cut_logged |= ri->offs[i] == cut;
        h->spans[s].sample = h->spans[s].sample ? h->spans[s].sample : TCM_SAMPLE_AWAITED;
        ri->offs[n++] = ri->offs[i];
    }
    if (n < TCM_SAMPLE_RUNS_MAX && !cut_logged && pages_made(h, ri)) {
        h->spans[h->page_span[ri->first]].sample = TCM_SAMPLE_AWAITED; /* made, not logged: marked or not */
        ri->offs[n++] = cut;
    }
    ri->n = n;
    return n;
}

static bool intent_sane(tcm_server_t *srv, const tcm_req_intent_t *ri, tcm_client_t **c)
{
    const tcm_heap_t *h = &srv->h;
    *c = ri->client < srv->max_clients ? atomic_load(&srv->clients[ri->client]) : NULL;
    /* cls is a class for REFILL and RETURN only (SAMPLE's is its interval) */
    bool class_op = ri->op == TCM_OP_REFILL || ri->op == TCM_OP_RETURN;
    if (!*c || ri->slot >= (*c)->lay.nslots || (class_op && ri->cls >= TCM_NCLASSES) || ri->count > TCM_MAX_BATCH ||
        ri->n > TCM_MAX_BATCH || ri->root >= h->nroots)
        return false;
    if (ri->op == TCM_OP_FREE_PAGES &&
        (ri->span == 0 || ri->span > h->npages || ri->first == 0 || ri->npages == 0 ||
         (uint64_t)ri->first + ri->npages > h->top))
        return false;
    return true;
}

/* Finish (or roll back) the request the request intent names (after the
 * page intent, whose span change it may have begun): every client is
 * mapped, no thread runs. */
static void resolve_request_intent(tcm_server_t *srv, report_t *r)
{
    tcm_heap_t *h = &srv->h;
    tcm_req_intent_t *ri = &srv->state->req;
    uint32_t phase = atomic_load(&ri->phase);
    if (phase == TCM_INTENT_NONE)
        return;
    tcm_client_t *c;
    if (!intent_sane(srv, ri, &c)) {
        tcm__log(TCM_LOG_ERROR, "recovery: the interrupted request (client %u, op %u) cannot be resolved; dropped",
                 ri->client, ri->op);
        tcm__req_set_phase(ri, TCM_INTENT_NONE);
        return;
    }
    tcm_slot_t *slot = tcm__client_slot(c, ri->slot);
    if (!slot) {
        tcm__req_set_phase(ri, TCM_INTENT_NONE);
        return;
    }
    bool answered = !(atomic_load(&slot->state) == TCM_SLOT_POSTED && slot->req_seq == ri->req_seq);
    bool stock = ri->op == TCM_OP_ALLOC_PAGES && ri->cls == TCM_ALLOC_SAMPLE_RUNS;
    if (phase == TCM_INTENT_PICKED || (ri->op == TCM_OP_REFILL && ri->n == 0) ||
        (ri->op == TCM_OP_ALLOC_PAGES && (stock ? sample_runs_made(h, ri) == 0 : !pages_made(h, ri)))) {
        if (answered) {
            tcm__req_commit_ht(srv, c, ri->pos);
        } else {
            tcm__req_set_phase(ri, TCM_INTENT_NONE); /* the cell is still full: served again */
            r->rolled_back++;
        }
        tcm__log(TCM_LOG_INFO, "recovery: interrupted %s of client %u (slot %u) %s", op_name(ri->op), c->rec->id,
                 ri->slot, answered ? "was answered: committed" : "had not started: served again");
        return;
    }
    int st = TCM_ST_OK;
    switch (ri->op) {
    case TCM_OP_REFILL:
        for (uint32_t i = 0; i < ri->n; i++)
            object_bit(h, ri->cls, ri->offs[i], true, (uint16_t)ri->owner);
        if (!answered) {
            memcpy(slot->offs, ri->offs, ri->n * sizeof ri->offs[0]);
            slot->nresult = ri->n;
        }
        break;
    case TCM_OP_RETURN: {
        uint32_t refused = 0, count = ri->count;
        for (uint32_t i = 0; i < count; i++) {
            /* pending: not reached before the crash, nothing of it done
             * (an older tcmd counted the entries it reached in n instead:
             * those past n are pending too) */
            if (i >= ri->n || ri->st[i] == TCM_ST_PENDING) {
                ri->st[i] = (uint8_t)tcm__central_check_ht(h, ri->cls, ri->offs[i], NULL);
                ri->n = i + 1 > ri->n ? i + 1 : ri->n;
            }
            if (ri->st[i] == TCM_ST_OK)
                object_bit(h, ri->cls, ri->offs[i], false, 0);
            else if (refused++ == 0)
                st = ri->st[i];
        }
        if (!answered)
            slot->result = refused;
        break;
    }
    case TCM_OP_ALLOC_PAGES: /* made: the page intent (resolved before) finished its mapping */
        if (stock && !answered) {
            memcpy(slot->offs, ri->offs, ri->n * sizeof ri->offs[0]);
            slot->nresult = ri->n;
            slot->result = ri->offs[0];
        } else if (!answered) {
            slot->result = tcm__page_off(ri->first);
            slot->nresult = 0; /* whether it reads zero is not known now */
            if (ri->cls == TCM_ALLOC_SAMPLED && !h->spans[h->page_span[ri->first]].sample)
                h->spans[h->page_span[ri->first]].sample = TCM_SAMPLE_AWAITED; /* killed before its mark */
        }
        break;
    case TCM_OP_FREE_PAGES:
        /* the page intent finished an unmap it had begun; this one it
         * had not: the same stores */
        tcm__span_unmap_ht(h, ri->first, ri->npages);
        break;
    case TCM_OP_ROOT_SET:
        ri->name[TCM_ROOT_NAME_MAX - 1] = 0;
        if (atomic_load(&h->roots[ri->root].seq) & 1)
            tcm__log(TCM_LOG_WARN, "recovery: root %u was half-written (odd sequence): written again from the "
                     "request", ri->root);
        tcm__root_write(&h->roots[ri->root], ri->name, ri->arg, ri->holder); /* completes the odd sequence */
        break;
    default:
        break;
    }
    if (!answered)
        tcm__req_answer(slot, st);
    tcm__req_commit_ht(srv, c, ri->pos);
    r->redone++;
    tcm__log(TCM_LOG_INFO, "recovery: interrupted %s of client %u (slot %u) redone%s", op_name(ri->op),
             c->rec->id, ri->slot, answered ? "" : " and answered");
}

/* After the request intent: a root still left odd is a write nobody will
 * redo (its intent was dropped). Without this every reader of it -- clients'
 * tcm_root_get, the next ROOT_SET's scan, the validator -- would spin. */
static void repair_roots(tcm_server_t *srv, report_t *r)
{
    for (unsigned i = 0; i < srv->h.nroots; i++) {
        tcm_root_t *root = &srv->h.roots[i];
        bool kept;
        if (!tcm__root_repair(root, srv->heap_size, &kept))
            continue;
        uint64_t off;
        char name[TCM_ROOT_NAME_MAX];
        tcm__root_read(root, &off, name);
        if (kept)
            tcm__log(TCM_LOG_WARN, "recovery: root %u was half-written (odd sequence) with no request to redo: "
                     "kept as \"%s\" -> 0x%llx", i, name, (unsigned long long)off);
        else
            tcm__log(TCM_LOG_WARN, "recovery: root %u was half-written (odd sequence) with no request to redo: "
                     "cleared", i);
        r->repairs++;
    }
}

/* Gauges, each client's bytes back and each departed tag's bytes, from the
 * owner tags of the object records. */
static void recount(tcm_server_t *srv)
{
    uint64_t *held = calloc(65536, sizeof *held);
    if (!held) {
        tcm__log(TCM_LOG_ERROR, "recovery: out of memory");
        abort();
    }
    uint64_t total = tcm__census_ht(&srv->h, held), live = 0, attached = 0;
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (!c)
            continue;
        tcm_client_rec_t *rec = c->rec;
        uint64_t h = held[rec->tag], out = atomic_load(&rec->bytes_out);
        if (h > out)
            atomic_store(&rec->bytes_out, out = h);
        atomic_store(&rec->bytes_back, out - h);
        live += h;
        held[rec->tag] = 0;
        attached++;
    }
    for (uint32_t t = 0; t < TCM_TAGS; t++)
        atomic_store(&srv->tag_orphaned[t], 0);
    uint64_t departed = tcm__holders_recover(srv, held); /* what is left: departed clients' */
    TCM_STAT_SET(srv->meta, bytes_clients, total);
    TCM_STAT_SET(srv->meta, bytes_orphaned, departed);
    TCM_STAT_SET_MAIN(srv->meta, clients_attached, attached); /* (recovery runs on the main thread) */
    free(held);
}

int tcm__recover(tcm_server_t *srv)
{
    uint64_t t0 = tcm__now_ns();
    report_t r = {0};
    tcm_heap_t *h = &srv->h;
    srv->state->adoptions++;
    TCM_STAT_ADD(srv->meta, restarts, 1);
    char age[32];
    tcm__log(TCM_LOG_WARN, "adopting the heap left by a previous tcmd (created %s ago, adoption %llu)",
             tcm__format_age((uint64_t)time(NULL) - srv->state->created_unix, age, sizeof age),
             (unsigned long long)srv->state->adoptions);

    adopt_clients(srv, &r);
    resolve_page_intent(srv, &r);
    resolve_request_intent(srv, &r);
    repair_roots(srv, &r);
    if (tcm__roots_count_ht(h) != 0)
        tcm__log(TCM_LOG_WARN, "recovery: no memory to count the roots' holders: shares unchecked");
    uint32_t rings = 0;
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (c && tcm__ring_repair(c->ring, c->lay.ring_cap, c->rec->tail))
            rings++;
    }
    r.repairs += tcm__ph_rebuild_ht(h);
    r.repairs += tcm__central_rebuild_ht(h);
    r.repairs += tcm__samples_recover_ht(srv);
    recount(srv);

    /* who is still there: the process that attached (same pid, same start
     * time) is still running */
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = tcm__client_attached(srv, i);
        if (!c)
            continue;
        if (!tcm__client_alive(c)) {
            tcm__log(TCM_LOG_WARN, "recovery: client %u (pid %u) died while no tcmd was running", c->rec->id,
                     c->rec->pid);
            atomic_store(&c->rec->state, TCM_REC_DEAD);
        } else {
            /* it reconnects on its next slow path */
            atomic_store(&((tcm_chan_hdr_t *)c->chan)->resume_wanted, 1);
        }
    }
    /* reclaim the dead before anyone is served: a reclaim interrupted by the
     * crash is redone, and nothing they cached may be handed out first */
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (!c || atomic_load(&c->rec->state) != TCM_REC_DEAD)
            continue;
        tcm__reclaim_ht(srv, c);
        atomic_store(&srv->clients[i], NULL);
        tcm__client_destroy(srv, c);
        r.dead++;
    }
    TCM_STAT_ADD(srv->meta, recovery_redone, r.redone);
    TCM_STAT_ADD(srv->meta, recovery_rolled_back, r.rolled_back);
    TCM_STAT_ADD(srv->meta, recovery_repairs, r.repairs + rings);

    char why[256];
    int valid = tcm__validate_ht(srv, why, sizeof why);
    bool ok = valid != TCM_INVALID_HEAP; /* a client's garbage in its own caches is that client's */
    uint64_t us = (tcm__now_ns() - t0) / 1000;
    TCM_STAT_SET(srv->meta, last_recovery_us, us);
    tcm__log(ok ? TCM_LOG_WARN : TCM_LOG_ERROR,
             "recovery done in %llu us: %u pages below top, %u clients adopted (%u died in the gap), %u records "
             "dropped, %llu operations redone, %llu requests to serve again, %u rings and %llu structures repaired; "
             "validator: %s%s",
             (unsigned long long)us, h->top, r.adopted - r.dead, r.dead, r.dropped, (unsigned long long)r.redone,
             (unsigned long long)r.rolled_back, rings, (unsigned long long)r.repairs,
             valid == TCM_VALID ? "consistent, " : ok ? "heap consistent, a client's caches are not: " : "FAILED: ",
             why);
    return 0;
}
