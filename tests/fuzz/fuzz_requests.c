/* libFuzzer target: arbitrary requests on a client's ring, served by tcmd's
 * own request handler (tcm__serve_client_ht) against a real page heap and
 * central lists, with the whole-heap validator after every batch. Each
 * input is a list of 16-byte records: an operation (refill, return, page
 * run alloc and free, root set, a garbage op, a rebuild of the derived
 * state as a recovery does it), the slot it is posted on (sometimes out of
 * range), the slot state (sometimes not POSTED), class, count, and offsets
 * that are handed-out objects, objects nudged off their start, freed ones
 * or random. The client's process "dies" at the end and is reclaimed.
 * Built with clang -fsanitize=fuzzer,address,undefined. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "central.h"
#include "holders.h"
#include "pageheap.h"
#include "prim.h"
#include "reclaim.h"
#include "samples.h"
#include "requests.h"
#include "samples.h"
#include "ring.h"
#include "server.h"
#include "validate.h"

#define HEAP (16ull << 20)
#define BASE 0x7e8000000000ull
#define THREADS 2
#define POOL 4096

static tcm_server_t srv;
static tcm_client_t client;
static int heap_fd = -1;
static uint64_t pool[POOL]; /* offsets handed out to the client, for the next RETURNs */
static uint32_t npool;

static void *anon(uint64_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        abort();
    return p;
}

static void reset(void)
{
    static tcm_meta_layout_t ml;
    static tcm_state_layout_t sl;
    if (heap_fd < 0) {
        char name[64];
        snprintf(name, sizeof name, "/tcmfuzz-%d", (int)getpid());
        heap_fd = tcm__shm_create(name, HEAP, 0600);
        tcm__shm_unlink(name);
        tcm__meta_layout(&ml, HEAP >> TCM_PAGE_SHIFT, 256);
        tcm__state_layout(&sl, HEAP >> TCM_PAGE_SHIFT);
    } else {
        munmap(srv.meta, ml.size);
        munmap(srv.state, sl.size);
        munmap(client.chan, client.lay.size);
        munmap(srv.h.recs_bits, srv.h.recs_words * sizeof(uint64_t));
        tcm__release(heap_fd, 0, HEAP);
    }
    tcm__shares_free(&srv.h.root_shares);
    tcm__samples_detach(&srv.h.samples);
    memset(&srv, 0, sizeof srv);
    srv.heap_size = HEAP;
    srv.base = BASE;
    srv.max_threads = THREADS;
    srv.nroots = 256;
    srv.roots_per_uid = 200; /* of 300 names: a share runs out too */
    srv.heap_fd = heap_fd;
    srv.meta = anon(ml.size);
    srv.state = anon(sl.size);
    tcm__heap_attach(&srv.h, srv.meta, srv.state, 256, heap_fd, -1, -1, HEAP, BASE, THREADS, true);
    srv.dstats = &srv.state->dstats;
    atomic_store(&srv.meta->config.page_cache_cap, 1u << 20); /* punches happen too */
    atomic_store(&srv.meta->config.heap_limit, HEAP);
    atomic_store(&srv.meta->profile_sample, 4096); /* SAMPLE and MAPS keep what passes their checks */
    tcm__chan_layout(&srv.chan_layout, srv.h.classes, THREADS, false);

    memset(&client, 0, sizeof client);
    client.rec = (tcm_client_rec_t *)((uint8_t *)srv.state + sl.off_clients);
    client.rec->id = 1;
    srv.state_fd = -1; /* anonymous memory: nothing to commit */
    tcm__holders_init(&srv, true);
    tcm__tag_take(&srv, 0, &client.rec->tag);
    atomic_store(&client.rec->state, TCM_REC_ACTIVE);
    client.lay = srv.chan_layout;
    client.chan = anon(client.lay.size);
    client.ring = (tcm_ring_t *)(client.chan + client.lay.off_ring);
    client.slots = (tcm_slot_t *)(client.chan + client.lay.off_slots);
    tcm__ring_init(client.ring, client.lay.ring_cap);
    memset(client.slots_backed, 0xff, sizeof client.slots_backed); /* anonymous memory: all backed */
    atomic_store(&srv.clients[0], &client);
    atomic_store(&srv.clients_hw, 1);
    npool = 0;
}

static void validate(void)
{
    char why[256];
    if (tcm__validate_ht(&srv, why, sizeof why) != TCM_VALID) {
        fprintf(stderr, "heap inconsistent after a batch: %s\n", why);
        abort();
    }
}

/* Answers of refills and page runs join the pool. */
static void harvest(void)
{
    for (uint32_t i = 0; i < client.lay.nslots; i++) {
        tcm_slot_t *s = &client.slots[i];
        if (atomic_load(&s->state) != TCM_SLOT_DONE)
            continue;
        if (s->status == TCM_ST_OK && s->op == TCM_OP_REFILL)
            for (uint32_t k = 0; k < s->nresult && k < TCM_MAX_BATCH && npool < POOL; k++)
                pool[npool++] = s->offs[k];
        bool stock = s->cls == TCM_ALLOC_SAMPLE_RUNS && s->nresult; /* its runs in offs */
        if (s->status == TCM_ST_OK && s->op == TCM_OP_ALLOC_PAGES)
            for (uint32_t k = 0; k < (stock ? s->nresult : 1) && k < TCM_SAMPLE_RUNS_MAX && npool < POOL; k++)
                pool[npool++] = stock ? s->offs[k] : s->result;
        atomic_store(&s->state, TCM_SLOT_IDLE);
    }
}

static void serve(void)
{
    while (tcm__serve_client_ht(&srv, &client, false))
        ;
    harvest();
    validate();
}

/* An offset for a RETURN or FREE_PAGES: mostly one the client holds (taken
 * out of the pool), else a corrupted one. */
static uint64_t pick_offset(uint8_t mode, uint64_t raw)
{
    uint64_t off = npool ? pool[raw % npool] : raw % HEAP;
    switch (mode % 8) {
    case 0: case 1: case 2: case 3: case 4:
        if (npool) {
            uint32_t i = (uint32_t)(raw % npool);
            off = pool[i];
            pool[i] = pool[--npool];
        }
        return off;
    case 5: return off + 16 * (1 + raw % 4);   /* inside an object */
    case 6: return off;                         /* still in the pool: a double free later */
    default: return raw % (HEAP + 65536);       /* anywhere, outside too */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reset();
    for (size_t at = 0; at + 16 <= size; at += 16) {
        const uint8_t *r = data + at;
        uint32_t slot_index = r[1] % (client.lay.nslots + 2);
        uint32_t cls = r[2] % 8 ? 1 + r[2] % (TCM_NCLASSES - 1) : r[2];
        uint32_t count = (uint32_t)(r[4] | r[5] << 8) % (TCM_MAX_BATCH + 8);
        uint64_t raw;
        memcpy(&raw, r + 6, 8);
        if (r[0] % 8 == 7) { /* what a recovery does: rebuild every derived structure */
            serve();
            tcm__ph_rebuild_ht(&srv.h);
            tcm__central_rebuild_ht(&srv.h);
            validate();
            continue;
        }
        if (slot_index < client.lay.nslots) {
            tcm_slot_t *s = &client.slots[slot_index];
            s->op = r[0] % 8 == 6 ? r[2] : r[0] % 8;
            s->cls = cls;
            s->count = count;
            s->arg = raw;
            s->arg2 = r[3] >> 4;
            s->req_seq++;
            if (s->op == TCM_OP_RETURN)
                for (uint32_t k = 0; k < count && k < TCM_MAX_BATCH; k++)
                    s->offs[k] = pick_offset(r[14] + (uint8_t)k, raw * (k + 1) + k);
            if (s->op == TCM_OP_ALLOC_PAGES)
                s->arg = 1 + raw % 300;
            if (s->op == TCM_OP_ALLOC_PAGES && cls == TCM_ALLOC_SAMPLE_RUNS) { /* mostly well formed */
                s->arg = raw % 4 ? 1 : 2;
                s->arg2 = r[3] % 4 ? 1 : r[3] >> 4;
                s->count = count % (TCM_SAMPLE_RUNS_MAX + 2);
            }
            if (s->op == TCM_OP_FREE_PAGES)
                s->arg = pick_offset(r[14], raw);
            if (s->op == TCM_OP_ROOT_SET) {
                memset(s->offs, 0, TCM_ROOT_NAME_MAX);
                snprintf((char *)s->offs, TCM_ROOT_NAME_MAX, "r%u", r[14] % 300);
                s->arg = r[15] & 1 ? UINT64_MAX : raw % HEAP;
            }
            atomic_store(&s->state, r[3] % 8 ? TCM_SLOT_POSTED : r[3] % 3);
        }
        if (!tcm__ring_push(client.ring, client.lay.ring_cap, slot_index)) {
            serve();
            tcm__ring_push(client.ring, client.lay.ring_cap, slot_index);
        }
        if (r[15] & 2)
            serve();
    }
    serve();
    /* the process dies: what it still has in flight or answered comes back */
    atomic_store(&client.rec->state, TCM_REC_DEAD);
    tcm__reclaim_ht(&srv, &client);
    atomic_store(&srv.clients[0], NULL); /* reaped */
    validate();
    return 0;
}
