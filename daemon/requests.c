/* requests.c — one ring request: validated, recorded in the request intent,
 * applied, answered and committed (docs/DESIGN.md, "One request, step by
 * step"). The redo of a request a crash interrupted is recovery.c's; what a
 * full heap asks of the other clients, heapfull.c's. Heap thread only (and
 * the recovery pass's reclaim of dead clients, before it starts). */
#define _GNU_SOURCE
#include <string.h>

#include "central.h"
#include "continuation.h"
#include "crash.h"
#include "heapfull.h"
#include "holders.h"
#include "log.h"
#include "prim.h"
#include "quota.h"
#include "requests.h"
#include "samples.h"
#include "roots.h"
#include "ring.h"
#include "segments.h"
#include "server.h"
#include "stats.h"
#include "tcm_assert.h"


static void refuse(tcm_server_t *srv, tcm_client_t *c, const char *what, unsigned cls, uint64_t off,
                   int status)
{
    TCM_HT_ADD(c->rec->errors, 1);
    TCM_STAT_ADD(srv->meta, refused, 1);
    if (status >= 0 && status < TCM_ST__COUNT)
        TCM_HT_ADD(srv->dstats->refused[status], 1);
    tcm__log_peer(TCM_LOG_WARN, c->rec->pid, "client %u (pid %u): refused %s class %u offset 0x%llx: %s", c->rec->id,
                     c->rec->pid, what, cls, (unsigned long long)off, tcm__status_msg(status));
}

/* Bytes of the client with this owner tag came back to the heap. If that
 * client has gone, they were counted as orphaned when it left. */
void tcm__credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes)
{
    tcm_client_t *c = tcm__tag_client_ht(srv, tag);
    if (c) {
        TCM_HT_ADD(c->rec->bytes_back, bytes);
        tcm__quota_credit_ht(srv, tag, bytes);
        return;
    }
    uint64_t orphaned = atomic_load_explicit(&srv->meta->stats.bytes_orphaned, memory_order_relaxed);
    TCM_STAT_SET(srv->meta, bytes_orphaned, orphaned > bytes ? orphaned - bytes : 0);
    tcm__holder_credit_ht(srv, tag, bytes);
}

/* Free objects of one class, logged in st (the request intent's, for a
 * RETURN), and credit them to their owners. Returns the first refusal;
 * *refused counts them; spans left empty are added to emptied[]. */
static int free_objects(tcm_server_t *srv, tcm_client_t *c, unsigned cls, const uint64_t *offs, uint32_t n,
                        uint8_t *st, bool quiet, uint32_t *refused, uint32_t *emptied, uint32_t *nemptied)
{
    tcm_owner_run_t runs[TCM_MAX_BATCH];
    uint32_t nruns;
    *refused = tcm__central_return_ht(&srv->h, cls, offs, n, st, runs, &nruns, emptied, nemptied);
    uint64_t size = srv->h.classes[cls].size;
    for (uint32_t r = 0; r < nruns; r++)
        tcm__credit_ht(srv, runs[r].owner, runs[r].objects * size);
    TCM_STAT_ADD(srv->meta, bytes_clients, -(uint64_t)(n - *refused) * size);
    if (!*refused)
        return TCM_ST_OK;
    int first = TCM_ST_OK;
    for (uint32_t i = 0; i < n; i++) {
        if (st[i] == TCM_ST_OK)
            continue;
        if (first == TCM_ST_OK)
            first = st[i];
        if (!quiet)
            refuse(srv, c, "free", cls, offs[i], st[i]);
    }
    return first;
}

uint32_t tcm__free_objects_ht(tcm_server_t *srv, tcm_client_t *c, unsigned cls, const uint64_t *offs,
                              uint32_t n)
{
    uint32_t refused, emptied[TCM_MAX_BATCH], nemptied = 0;
    uint8_t st[TCM_MAX_BATCH];
    free_objects(srv, c, cls, offs, n, st, true, &refused, emptied, &nemptied);
    tcm__central_release_spans_ht(&srv->h, emptied, nemptied);
    return n - refused;
}

static int op_refill(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, unsigned cls, uint32_t count)
{
    if (cls == 0 || cls >= TCM_NCLASSES)
        return TCM_ST_BAD_CLASS;
    if (count == 0 || count > TCM_MAX_BATCH)
        return TCM_ST_BAD_COUNT;
    uint64_t size = srv->h.classes[cls].size, room = tcm__quota_room_ht(srv, c);
    if (room / size < count) { /* what its quota leaves, if that is an object */
        count = (uint32_t)(room / size);
        if (!count) {
            slot->result = tcm__quota_refuse_ht(srv, c, size);
            return TCM_ST_NOMEM;
        }
    }
    tcm_req_intent_t *ri = &srv->state->req;
    ri->count = count;
    ri->owner = c->rec->tag;
    ri->n = 0;
    tcm__req_set_phase(ri, TCM_INTENT_APPLYING);
    int status;
    uint32_t n = tcm__central_refill_ht(&srv->h, cls, count, c->rec->tag, ri->offs, &ri->n, &status);
    TCM_CRASH_POINT(refill);
    TCM_HT_ADD(srv->h.cstats[cls].refills, 1);
    memcpy(slot->offs, ri->offs, n * sizeof ri->offs[0]);
    slot->nresult = n;
    TCM_HT_ADD(c->rec->bytes_out, n * size);
    tcm__quota_charge_ht(srv, c, n * size);
    TCM_STAT_ADD(srv->meta, bytes_clients, n * size);
    if (!n && status == TCM_ST_NOMEM)
        slot->result = tcm__heap_full_ht(srv, c);
    return n ? TCM_ST_OK : status;
}

static int op_return(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, unsigned cls, uint32_t count,
                     uint32_t *emptied, uint32_t *nemptied)
{
    if (cls == 0 || cls >= TCM_NCLASSES)
        return TCM_ST_BAD_CLASS;
    if (count > TCM_MAX_BATCH)
        return TCM_ST_BAD_COUNT;
    tcm_req_intent_t *ri = &srv->state->req;
    /* copy first: the client may change the slot while we check it */
    memcpy(ri->offs, slot->offs, count * sizeof ri->offs[0]);
    ri->count = count;
    /* logged once for the batch: every entry pending until it gets its
     * status, which is stored before its object is freed */
    memset(ri->st, TCM_ST_PENDING, count);
    ri->n = count;
    tcm__req_set_phase(ri, TCM_INTENT_APPLYING);
    TCM_HT_ADD(srv->h.cstats[cls].returns, 1);
    uint32_t refused;
    int st = free_objects(srv, c, cls, ri->offs, count, ri->st, false, &refused, emptied, nemptied);
    slot->result = refused;
    return st;
}

/* The run starting at page first is a sample's: marked before the client
 * has it (TCM_ALLOC_SAMPLED; a crash before the store: the recovery marks
 * it as it answers). */
static void mark_awaited(tcm_heap_t *h, uint32_t first)
{
    TCM_PERSIST_STORE(h->spans[h->page_span[first]].sample, TCM_SAMPLE_AWAITED);
}

/* npages handed out to client c: its count, its quota, the stats. */
static void hand_out_pages(tcm_server_t *srv, tcm_client_t *c, uint64_t npages)
{
    TCM_HT_ADD(c->rec->bytes_out, npages << TCM_PAGE_SHIFT);
    tcm__quota_charge_ht(srv, c, npages << TCM_PAGE_SHIFT);
    TCM_STAT_ADD(srv->meta, bytes_clients, npages << TCM_PAGE_SHIFT);
}

/* A page run is made and freed the one way every span is, under the page
 * intent (tcm__large_alloc_ht, tcm__large_free_ht); the request intent
 * says which run the answer names, for a recovery to answer it. */
static int op_alloc_pages(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, uint64_t npages,
                          uint64_t align_pages, bool sampled)
{
    if (npages <= srv->h.npages && npages > tcm__quota_room_ht(srv, c) >> TCM_PAGE_SHIFT) {
        slot->result = tcm__quota_refuse_ht(srv, c, npages << TCM_PAGE_SHIFT);
        return TCM_ST_NOMEM;
    }
    tcm_req_intent_t *ri = &srv->state->req;
    ri->first = 0; /* no run yet: the allocation logs its first page here before mapping it */
    ri->owner = c->rec->tag;
    tcm__req_set_phase(ri, TCM_INTENT_APPLYING);
    TCM_CRASH_POINT(alloc_pages);
    int st = tcm__alloc_pages_ht(srv, c, npages, align_pages, &ri->first);
    if (st == TCM_ST_NOMEM)
        slot->result = tcm__heap_full_ht(srv, c);
    if (st != TCM_ST_OK)
        return st;
    slot->result = tcm__page_off(ri->first);
    slot->nresult = srv->h.cut_zeroed ? TCM_RUN_ZEROED : 0;
    if (sampled)
        mark_awaited(&srv->h, ri->first);
    hand_out_pages(srv, c, npages);
    return TCM_ST_OK;
}

/* A stock of one-page runs for the client's next small samples
 * (TCM_ALLOC_SAMPLE_RUNS), so that one wake serves several samples. Each
 * run is made as op_alloc_pages makes one, and logged in ri->offs before
 * the next is cut, so that a recovery answers with the runs made. */
static int op_sample_runs(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, uint64_t npages,
                          uint64_t align_pages, uint32_t count)
{
    if (npages != 1 || align_pages != 1 || count == 0 || count > TCM_SAMPLE_RUNS_MAX)
        return TCM_ST_BAD_COUNT;
    uint64_t room = tcm__quota_room_ht(srv, c) >> TCM_PAGE_SHIFT;
    if (!room) {
        slot->result = tcm__quota_refuse_ht(srv, c, TCM_PAGE_SIZE);
        return TCM_ST_NOMEM;
    }
    count = count < room ? count : (uint32_t)room;
    tcm_req_intent_t *ri = &srv->state->req;
    ri->first = 0;
    ri->n = 0;
    ri->owner = c->rec->tag;
    tcm__req_set_phase(ri, TCM_INTENT_APPLYING);
    int st = TCM_ST_OK;
    uint32_t n = 0;
    while (n < count && (st = tcm__large_alloc_ht(&srv->h, 1, 1, c->rec->tag, &ri->first)) == TCM_ST_OK) {
        mark_awaited(&srv->h, ri->first);
        TCM_PERSIST_STORE(ri->offs[n], tcm__page_off(ri->first));
        TCM_PERSIST_STORE(ri->n, n + 1); /* logged: ri->first may be cut again */
        TCM_CRASH_POINT(sample_run);
        slot->offs[n] = ri->offs[n];
        n++;
        TCM_PERSIST_STORE(ri->first, 0);
    }
    if (!n) {
        if (st == TCM_ST_NOMEM)
            slot->result = tcm__heap_full_ht(srv, c);
        return st;
    }
    slot->nresult = n;
    slot->result = slot->offs[0];
    hand_out_pages(srv, c, n);
    return TCM_ST_OK;
}

static int op_free_pages(tcm_server_t *srv, tcm_client_t *c, uint64_t off)
{
    tcm_heap_t *h = &srv->h;
    uint32_t s;
    int st = tcm__large_check_ht(h, off, &s);
    if (st != TCM_ST_OK) {
        refuse(srv, c, "free of page run", 0, off, st);
        return st;
    }
    tcm_req_intent_t *ri = &srv->state->req;
    ri->span = s;
    ri->first = h->spans[s].first;
    ri->npages = h->spans[s].npages;
    ri->owner = h->spans[s].owner;
    tcm__req_set_phase(ri, TCM_INTENT_APPLYING);
    TCM_CRASH_POINT(free_pages);
    uint64_t bytes;
    uint32_t owner;
    tcm__large_free_ht(h, off, &bytes, &owner); /* checked above, nothing changed since */
    tcm__credit_ht(srv, (uint16_t)owner, bytes);
    TCM_STAT_ADD(srv->meta, bytes_clients, -bytes);
    return TCM_ST_OK;
}

/* The heap profile's (samples.c): what the client wrote in offs is copied
 * once, then checked and kept by tcmd. result: 1 if the sample was kept. */
static int op_sample(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, uint64_t run, uint64_t size,
                     uint32_t interval, uint32_t nframes)
{
    uint64_t frames[TCM_SAMPLE_FRAMES];
    if (nframes > TCM_SAMPLE_FRAMES)
        return TCM_ST_BAD_COUNT;
    memcpy(frames, slot->offs, nframes * sizeof frames[0]);
    bool kept;
    int st = tcm__sample_take_ht(srv, c, run, size, tcm__sample_interval(interval), frames, nframes, &kept);
    slot->result = kept;
    return st;
}

static int op_maps(tcm_server_t *srv, tcm_client_t *c, tcm_slot_t *slot, uint64_t pos, uint64_t total, uint32_t len)
{
    char text[sizeof slot->offs];
    if (len > sizeof text)
        return TCM_ST_BAD_COUNT;
    memcpy(text, slot->offs, len);
    return tcm__sample_maps_ht(srv, c, pos, total, text, len);
}

static void count_latency(tcm_server_t *srv, uint64_t dt)
{
    unsigned bucket = 0;
    while (bucket + 1 < TCM_LAT_BUCKETS && dt >= (uint64_t)TCM_LAT_BASE_NS << bucket)
        bucket++;
    TCM_HT_ADD(srv->dstats->latency[bucket], 1);
    TCM_HT_ADD(srv->dstats->latency_sum_ns, dt);
}

/* What a request's time is read with: 0 for an untimed server (the
 * drop-in's private heap), whose requests then all count as instant. */
static uint64_t request_clock(const tcm_server_t *srv)
{
    return srv->untimed ? 0 : tcm__now_ns();
}

/* The entry at ring position pos names slot_index. frees_only: the client
 * is gone or evicted, so nothing is handed out to it. */
/* Returns the nanoseconds it took (what a turn's shares are counted in). */
static uint64_t serve_one(tcm_server_t *srv, tcm_client_t *c, uint64_t pos, uint32_t slot_index, bool frees_only)
{
    tcm_slot_t *slot = tcm__client_slot(c, slot_index);
    if (!slot || atomic_load_explicit(&slot->state, memory_order_acquire) != TCM_SLOT_POSTED) {
        refuse(srv, c, "ring entry", 0, slot_index, TCM_ST_BAD_SLOT);
        tcm__pages_drop_ht(srv, c); /* a run taken for what was posted there */
        c->rec->tail = pos + 1; /* nothing to answer: a crash here only frees the cell later */
        tcm__ring_release(c->ring, c->lay.ring_cap, pos);
        return 0;
    }
    /* read each request field once: the slot is client memory */
    uint32_t op = slot->op, cls = slot->cls, count = slot->count, req_seq = slot->req_seq;
    uint64_t arg = slot->arg, arg2 = slot->arg2;
    uint64_t t0 = request_clock(srv);
    if ((op == TCM_OP_ALLOC_PAGES || c->pages_cont.run) &&
        tcm__pages_step_ht(srv, c, pos, slot_index, req_seq, op, arg, arg2, frees_only))
        return request_clock(srv) - t0; /* a step of its commit: still posted, counted once it is served */
    TCM_HT_ADD(c->rec->requests, 1);
    TCM_STAT_ADD(srv->meta, requests, 1);
    if (op < TCM_OPS_COUNTED)
        TCM_HT_ADD(srv->dstats->ops[op], 1);

    tcm_req_intent_t *ri = &srv->state->req;
    ri->client = c->index;
    ri->slot = slot_index;
    ri->req_seq = req_seq;
    ri->pos = pos;
    ri->op = op;
    ri->cls = cls;
    tcm__req_set_phase(ri, TCM_INTENT_PICKED);
    TCM_CRASH_POINT(picked);

    slot->nresult = 0;
    slot->result = 0;
    uint32_t emptied[TCM_MAX_BATCH], nemptied = 0;
    int st;
    switch (op) {
    case TCM_OP_NOP:
        st = TCM_ST_OK;
        break;
    case TCM_OP_REFILL:
        st = frees_only ? TCM_ST_NOMEM : op_refill(srv, c, slot, cls, count);
        break;
    case TCM_OP_RETURN:
        st = op_return(srv, c, slot, cls, count, emptied, &nemptied);
        break;
    case TCM_OP_ALLOC_PAGES:
        if (frees_only)
            st = TCM_ST_NOMEM;
        else if (cls == TCM_ALLOC_SAMPLE_RUNS)
            st = op_sample_runs(srv, c, slot, arg, arg2, count);
        else
            st = op_alloc_pages(srv, c, slot, arg, arg2, cls == TCM_ALLOC_SAMPLED);
        break;
    case TCM_OP_FREE_PAGES:
        st = op_free_pages(srv, c, arg);
        break;
    case TCM_OP_ROOT_SET:
        st = tcm__root_set_ht(srv, c, slot, arg, cls, arg2);
        break;
    case TCM_OP_SAMPLE: /* a departed client's too: posted without waking tcmd, it may not have been
                           taken before the client died */
        st = op_sample(srv, c, slot, arg, arg2, cls, count);
        break;
    case TCM_OP_MAPS:
        st = op_maps(srv, c, slot, arg, arg2, count);
        break;
    default:
        st = TCM_ST_BAD_OP;
        break;
    }
    if (c->pages_cont.run) /* answered without the run its steps prepared */
        tcm__pages_drop_ht(srv, c);
    if (st != TCM_ST_OK && !tcm__status_is_answer(st) && op != TCM_OP_RETURN && op != TCM_OP_FREE_PAGES)
        refuse(srv, c, "request", cls, arg, st);
    tcm__req_answer(slot, st);
    TCM_CRASH_POINT(answered);
    tcm__req_commit_ht(srv, c, pos);
    /* after the commit: each is a transaction of its own */
    if (nemptied)
        tcm__central_release_spans_ht(&srv->h, emptied, nemptied);
    uint64_t dt = request_clock(srv) - t0;
    count_latency(srv, dt);
    return dt;
}

uint32_t tcm__serve_client_budget_ht(tcm_server_t *srv, tcm_client_t *c, bool frees_only, uint64_t *budget_ns)
{
    uint32_t slot_index, n = 0;
    uint64_t pos = c->rec->tail;
    while (n < TCM_PER_CLIENT_BURST && *budget_ns && tcm__ring_peek(c->ring, c->lay.ring_cap, pos, &slot_index)) {
        uint64_t dt = serve_one(srv, c, pos, slot_index, frees_only) + 1;
        *budget_ns = dt < *budget_ns ? *budget_ns - dt : 0;
        n++;
        if (c->rec->tail == pos) /* a step of a continuation: one a serve, the next one next turn */
            break;
        pos = c->rec->tail;
    }
    /* the ring is client memory: a cell emptied under a continuation */
    if (c->pages_cont.run && !tcm__ring_peek(c->ring, c->lay.ring_cap, c->rec->tail, &slot_index))
        tcm__pages_drop_ht(srv, c);
    return n;
}

bool tcm__serve_client_ht(tcm_server_t *srv, tcm_client_t *c, bool frees_only)
{
    uint64_t unlimited = UINT64_MAX;
    return tcm__serve_client_budget_ht(srv, c, frees_only, &unlimited) != 0;
}
