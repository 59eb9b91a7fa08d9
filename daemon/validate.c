/* validate.c — the whole-heap validator. It recomputes every derived
 * structure from the authoritative ones and compares: page map against
 * span records, page-heap free lists, central lists and free counts against
 * the object map, the gauges, every client's held bytes against the owner
 * map, the roots, and the objects sitting in clients' caches. Run by the heap
 * thread (tcmctl check, after every recovery, periodically at assert level
 * 3) or before it starts; names the first inconsistency it finds. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prim.h"
#include "server.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                                        \
        goto fail;                                                                                 \
    } while (0)

static bool check_ownership(tcm_server_t *srv, char *why, size_t whylen)
{
    uint64_t *held = calloc(65536, sizeof *held);
    if (!held)
        FAIL("out of memory");
    uint64_t total = tcm__census_ht(&srv->h, held), live = 0;
    if (atomic_load(&srv->meta->stats.bytes_clients) != total)
        FAIL("bytes_clients is %llu, handed-out objects and page runs add up to %llu",
             (unsigned long long)atomic_load(&srv->meta->stats.bytes_clients), (unsigned long long)total);
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (!c)
            continue;
        uint64_t out = atomic_load(&c->rec->bytes_out), back = atomic_load(&c->rec->bytes_back);
        if (out - back != held[c->rec->tag])
            FAIL("client %u (pid %u): allocated %llu, %llu came back, but it owns %llu", c->rec->id, c->rec->pid,
                 (unsigned long long)out, (unsigned long long)back, (unsigned long long)held[c->rec->tag]);
        live += held[c->rec->tag];
        held[c->rec->tag] = 0;
    }
    if (atomic_load(&srv->meta->stats.bytes_orphaned) != total - live)
        FAIL("bytes_orphaned is %llu, departed clients own %llu",
             (unsigned long long)atomic_load(&srv->meta->stats.bytes_orphaned), (unsigned long long)(total - live));
    for (uint32_t t = 0; t < TCM_TAGS; t++)
        if (held[t] != atomic_load(&srv->tag_orphaned[t]))
            FAIL("departed owner tag %u (record %u, generation %u) owns %llu bytes, counted %llu", t,
                 t & (TCM_MAX_CLIENTS - 1), t >> TCM_TAG_INDEX_BITS, (unsigned long long)held[t],
                 (unsigned long long)atomic_load(&srv->tag_orphaned[t]));
    free(held);
    return true;
fail:
    free(held);
    return false;
}

static bool check_roots(tcm_server_t *srv, char *why, size_t whylen)
{
    for (unsigned i = 0; i < TCM_ROOTS; i++) {
        const tcm_root_t *r = &srv->h.roots[i];
        if (atomic_load(&r->seq) & 1)
            FAIL("root %u is half-written (odd sequence %u)", i, atomic_load(&r->seq));
        bool used;
        uint64_t off;
        char name[TCM_ROOT_NAME_MAX];
        tcm__root_read(r, &used, &off, name);
        if (used && (!name[0] || off >= srv->heap_size || off < TCM_PAGE_SIZE))
            FAIL("root %u: bad name or offset 0x%llx", i, (unsigned long long)off);
    }
    return true;
fail:
    return false;
}

/* Was off just given back by this client (a RETURN it has not yet taken off
 * its bin counts)? */
static bool in_return_slot(const tcm_client_t *c, unsigned cls, uint64_t off)
{
    for (uint32_t i = 0; i < c->lay.nslots; i++) {
        if (!tcm__slot_backed(c, i))
            continue;
        const tcm_slot_t *slot = &c->slots[i];
        uint32_t op = slot->op, scls = slot->cls, count = slot->count; /* client memory: read once */
        if (op != TCM_OP_RETURN || scls != cls)
            continue;
        uint32_t n = count < TCM_MAX_BATCH ? count : TCM_MAX_BATCH;
        for (uint32_t k = 0; k < n; k++)
            if (slot->offs[k] == off)
                return true;
    }
    return false;
}

/* A running client changes its caches while we read them, and a read of
 * an entry being written can mix old and new: what looks wrong is read
 * again after a pause, and is wrong only if it reads the same. */
static bool still_there(const volatile void *p, const void *seen, size_t len)
{
    tcm__sleep_ns(1000000);
    return memcmp((const void *)p, seen, len) == 0;
}

/* Every pointer in a running client's caches is an object handed out, of
 * the class its bin says. An object it has just returned stays below a
 * bin's count until it has seen the answer, and by then its span may even
 * have gone back to the page heap: an object a RETURN slot lists is allowed
 * whatever its state. */
static bool check_array(tcm_server_t *srv, const tcm_client_t *c, unsigned cls, void *const *arr,
                        const uint32_t *count, uint32_t n, const char *where, char *why, size_t whylen)
{
    for (uint32_t i = 0; i < n; i++) {
        void *p = arr[i];
        uint64_t off = (uint64_t)(uintptr_t)p - srv->base;
        int st = tcm__central_check_ht(&srv->h, cls, off, NULL);
        if (st == TCM_ST_OK || in_return_slot(c, cls, off))
            continue;
        if (!still_there(&arr[i], &p, sizeof p) || *(const volatile uint32_t *)count <= i)
            continue;
        FAIL("client %u (pid %u): %s of class %u holds offset 0x%llx at %u of %u: %s", c->rec->id, c->rec->pid,
             where, cls, (unsigned long long)off, i, n, tcm__status_msg(st));
    }
    return true;
fail:
    return false;
}

/* Cached page runs: runs handed out, of the size the entry says (or one the
 * client is giving back right now). */
static bool check_runs(const tcm_server_t *srv, const tcm_client_t *c, const tcm_cache_view_t *v, char *why,
                       size_t whylen)
{
    for (uint32_t r = 0; r < v->n; r++) {
        tcm_large_entry_t e = v->runs[r];
        uint32_t s;
        int st = tcm__large_check_ht(&srv->h, e.off, &s);
        if (st == TCM_ST_OK && srv->h.spans[s].npages != e.npages)
            st = TCM_ST_BAD_COUNT;
        bool giving_back = false;
        for (uint32_t k = 0; k < c->lay.nslots && st != TCM_ST_OK && !giving_back; k++)
            giving_back = tcm__slot_backed(c, k) && c->slots[k].op == TCM_OP_FREE_PAGES && c->slots[k].arg == e.off;
        if (st != TCM_ST_OK && !giving_back && still_there(&v->runs[r], &e, sizeof e) &&
            *(const volatile uint32_t *)v->count > r)
            FAIL("client %u (pid %u): its page-run cache holds offset 0x%llx (%u pages): %s", c->rec->id,
                 c->rec->pid, (unsigned long long)e.off, e.npages, tcm__status_msg(st));
    }
    return true;
fail:
    return false;
}

typedef struct checking {
    tcm_server_t *srv;
    const tcm_client_t *c;
    char *why;
    size_t whylen;
} checking_t;

static bool check_cache(void *arg, const tcm_cache_view_t *v)
{
    checking_t *k = arg;
    if (v->kind == TCM_CACHE_BIN || v->kind == TCM_CACHE_XFER)
        return check_array(k->srv, k->c, v->cls, v->objs, v->count, v->n,
                           v->kind == TCM_CACHE_BIN ? "a thread cache" : "the transfer tier", k->why, k->whylen);
    if (v->kind == TCM_CACHE_RUNS)
        return check_runs(k->srv, k->c, v, k->why, k->whylen);
    return true;
}

static bool check_caches(tcm_server_t *srv, char *why, size_t whylen)
{
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        uint32_t state = c ? atomic_load(&c->rec->state) : TCM_REC_FREE;
        if (state != TCM_REC_ACTIVE && state != TCM_REC_EVICTED)
            continue;
        checking_t k = {srv, c, why, whylen};
        if (!tcm__each_cache(srv, c, check_cache, &k))
            return false;
    }
    return true;
}

bool tcm__validate_ht(tcm_server_t *srv, char *why, size_t whylen)
{
    tcm_heap_t *h = &srv->h;
    TCM_STAT_ADD(srv->meta, validations, 1);
    bool ok = tcm__heap_validate_ht(h, why, whylen) && check_ownership(srv, why, whylen) && check_roots(srv, why, whylen) && check_caches(srv, why, whylen);
    if (atomic_load(&srv->state->req.phase) != TCM_INTENT_NONE || atomic_load(&srv->state->page.kind) != TCM_PAGES_NONE) {
        snprintf(why, whylen, "an intent is still open between two operations");
        ok = false;
    }
    if (!ok)
        TCM_STAT_ADD(srv->meta, validation_failures, 1);
    else
        snprintf(why, whylen, "%u pages below top, %llu bytes handed out", h->top,
                 (unsigned long long)atomic_load(&srv->meta->stats.bytes_clients));
    return ok;
}
