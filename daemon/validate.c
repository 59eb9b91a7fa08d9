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

#include "central.h"
#include "holders.h"
#include "quota.h"
#include "prim.h"
#include "reclaim.h"
#include "server.h"
#include "validate.h"
#include "shares.h"
#include "validate_heap.h"

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
    if (!tcm__quota_validate(srv, held, why, whylen))
        goto fail;
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
    if (!tcm__holders_validate(srv, held, why, whylen))
        goto fail;
    free(held);
    return true;
fail:
    free(held);
    return false;
}

static bool check_roots(tcm_server_t *srv, char *why, size_t whylen)
{
    for (unsigned i = 0; i < srv->h.nroots; i++) {
        const tcm_root_t *r = &srv->h.roots[i];
        if (atomic_load(&r->seq) & 1)
            FAIL("root %u is half-written (odd sequence %u)", i, atomic_load(&r->seq));
        uint64_t off, found;
        char name[TCM_ROOT_NAME_MAX];
        uint32_t holder = tcm__root_read(r, &off, name);
        if (!tcm__root_live(holder))
            continue;
        if (!name[0] || off >= srv->heap_size || off < TCM_PAGE_SIZE)
            FAIL("root %u: bad name or offset 0x%llx", i, (unsigned long long)off);
        if (tcm__root_find(srv->h.roots, srv->h.nroots, name, &found) != (int)i)
            FAIL("root %u (\"%s\") is not where a lookup of its name ends", i, name);
        if (tcm__shares_of(&srv->h.root_shares, holder) == 0)
            FAIL("root %u (\"%s\") is in no user's share", i, name);
    }
    return true;
fail:
    return false;
}

/* The client's caches are its own memory, so what is checked there is
 * bounded by tcmd, not by what the client writes: every entry is looked up
 * once (a bit test), at most SUSPECTS entries of a client that look wrong
 * are read again after one pause (a running client changes its caches
 * while we read them, and a read of an entry being written can mix old and
 * new), and the walk over all clients stops at CACHE_CHECK_NS. */
#define SUSPECTS 16
#define SUSPECT_PAUSE_NS 1000000ull
#define CACHE_CHECK_NS 2000000000ull

typedef struct suspect {
    uint64_t at, count_off; /* channel offsets of the entry and of its array's count */
    uint32_t index;         /* in the array */
    uint32_t len;           /* of the entry: a pointer, or a page-run entry */
    uint8_t seen[16];
    unsigned cls;
    int st;
    const char *where;
} suspect_t;

typedef struct checking {
    tcm_server_t *srv;
    const tcm_client_t *c;
    uint64_t *giving_back; /* sorted: objects and runs its RETURN and FREE_PAGES slots list */
    size_t ngiving;
    suspect_t sus[SUSPECTS];
    uint32_t nsus;
    uint64_t more;         /* suspects past SUSPECTS */
} checking_t;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* An object a client has just returned stays below its bin's count until
 * it has seen the answer, and by then its span may even have gone back to
 * the page heap; a run it gives back likewise: whatever a RETURN or
 * FREE_PAGES slot lists is allowed whatever its state. */
static bool collect_giving_back(checking_t *k)
{
    const tcm_client_t *c = k->c;
    size_t cap = 0;
    for (uint32_t i = 0; i < c->lay.nslots; i++) {
        if (!tcm__slot_backed(c, i))
            continue;
        const tcm_slot_t *slot = &c->slots[i];
        uint32_t op = slot->op, count = slot->count; /* client memory: read once */
        if (op != TCM_OP_RETURN && op != TCM_OP_FREE_PAGES)
            continue;
        size_t n = op == TCM_OP_FREE_PAGES ? 1 : count < TCM_MAX_BATCH ? count : TCM_MAX_BATCH;
        if (k->ngiving + n > cap) {
            cap = (k->ngiving + n) * 2;
            uint64_t *grown = realloc(k->giving_back, cap * sizeof *grown);
            if (!grown)
                return false;
            k->giving_back = grown;
        }
        for (size_t j = 0; j < n; j++)
            k->giving_back[k->ngiving++] = op == TCM_OP_FREE_PAGES ? slot->arg : slot->offs[j];
    }
    if (k->ngiving)
        qsort(k->giving_back, k->ngiving, sizeof *k->giving_back, cmp_u64);
    return true;
}

static bool given_back(const checking_t *k, uint64_t off)
{
    return k->ngiving && bsearch(&off, k->giving_back, k->ngiving, sizeof off, cmp_u64);
}

static void suspect(checking_t *k, const tcm_cache_view_t *v, uint32_t i, const void *entry, uint32_t len, int st,
                    const char *where)
{
    if (k->nsus == SUSPECTS) {
        k->more++;
        return;
    }
    suspect_t *s = &k->sus[k->nsus++];
    *s = (suspect_t){.at = v->objs_off + (uint64_t)i * len, .count_off = v->count_off, .index = i, .len = len,
                     .cls = v->cls, .st = st, .where = where};
    memcpy(s->seen, entry, len);
}

/* Every pointer in a running client's caches is an object handed out, of
 * the class its bin says; every cached run a run handed out, of the size
 * its entry says. */
static bool check_cache(void *arg, const tcm_cache_view_t *v)
{
    checking_t *k = arg;
    tcm_server_t *srv = k->srv;
    if (v->kind == TCM_CACHE_BIN || v->kind == TCM_CACHE_XFER) {
        const char *where = v->kind == TCM_CACHE_BIN ? "a thread cache" : "the transfer tier";
        for (uint32_t i = 0; i < v->n; i++) {
            uint64_t off = (uint64_t)(uintptr_t)v->objs[i] - srv->base;
            int st = tcm__central_check_ht(&srv->h, v->cls, off, NULL);
            if (st != TCM_ST_OK && !given_back(k, off))
                suspect(k, v, i, &v->objs[i], sizeof v->objs[i], st, where);
        }
    } else if (v->kind == TCM_CACHE_RUNS) {
        for (uint32_t r = 0; r < v->n; r++) {
            tcm_large_entry_t e = v->runs[r];
            uint32_t s;
            int st = tcm__large_check_ht(&srv->h, e.off, &s);
            if (st == TCM_ST_OK && srv->h.spans[s].npages != e.npages)
                st = TCM_ST_BAD_COUNT;
            if (st != TCM_ST_OK && !given_back(k, e.off))
                suspect(k, v, r, &e, sizeof e, st, "its page-run cache");
        }
    }
    return true;
}

/* The suspects of one client, read again after a pause: wrong only if the
 * entry reads the same and is still below its array's count. */
static bool confirm(checking_t *k, char *why, size_t whylen)
{
    if (!k->nsus)
        return true;
    tcm__sleep_ns(SUSPECT_PAUSE_NS);
    for (uint32_t i = 0; i < k->nsus; i++) {
        const suspect_t *s = &k->sus[i];
        uint8_t now[16];
        tcm__chan_read(k->c, s->at, now, s->len);
        if (memcmp(now, s->seen, s->len) != 0 || tcm__chan_u32(k->c, s->count_off) <= s->index)
            continue;
        uint64_t val;
        memcpy(&val, s->seen, sizeof val);
        snprintf(why, whylen, "client %u (pid %u): %s of class %u holds 0x%llx at %u: %s (%u suspects, %llu more)",
                 k->c->rec->id, k->c->rec->pid, s->where, s->cls, (unsigned long long)val, s->index,
                 tcm__status_msg(s->st), k->nsus, (unsigned long long)k->more);
        return false;
    }
    return true;
}

static int check_caches(tcm_server_t *srv, char *why, size_t whylen, uint32_t *unchecked)
{
    uint64_t deadline = tcm__now_ns() + CACHE_CHECK_NS;
    uint32_t hw = atomic_load(&srv->clients_hw);
    *unchecked = 0;
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = tcm__client_attached(srv, i);
        if (!c || atomic_load(&c->chan_broken))
            continue;
        if (tcm__now_ns() > deadline) {
            (*unchecked)++;
            continue;
        }
        checking_t *k = calloc(1, sizeof *k);
        if (!k) {
            (*unchecked)++;
            continue;
        }
        k->srv = srv;
        k->c = c;
        bool ok = !collect_giving_back(k) || !tcm__each_cache(srv, c, check_cache, k, true) || confirm(k, why, whylen);
        free(k->giving_back);
        free(k);
        if (!ok)
            return TCM_INVALID_CLIENT;
    }
    return TCM_VALID;
}

/* Every run in transit is a continuation's (continuation.c), whole and
 * no more committed than it says: the page heap's check counts them, this
 * one names their owners. */
static bool check_continuations(tcm_server_t *srv, char *why, size_t whylen)
{
    tcm_heap_t *h = &srv->h;
    uint64_t pages = 0;
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        const tcm_pages_cont_t *k = c ? &c->pages_cont : NULL;
        if (!k || !k->run)
            continue;
        const tcm_span_t *sp = k->run <= h->npages ? &h->spans[k->run] : NULL;
        if (!sp || sp->state != TCM_SPAN_UNUSED || sp->on_list || sp->npages != k->npages ||
            k->committed > sp->npages || h->page_span[sp->first] != k->run)
            FAIL("client %u (pid %u): its run in transit (span %u, %llu pages) is not one", c->rec->id, c->rec->pid,
                 k->run, (unsigned long long)k->npages);
        pages += sp->npages;
    }
    if (pages != h->transit_pages)
        FAIL("%llu pages in transit, the clients' continuations hold %llu", (unsigned long long)h->transit_pages,
             (unsigned long long)pages);
    return true;
fail:
    return false;
}

int tcm__validate_ht(tcm_server_t *srv, char *why, size_t whylen)
{
    tcm_heap_t *h = &srv->h;
    TCM_STAT_ADD(srv->meta, validations, 1);
    int rc = tcm__heap_validate_ht(h, why, whylen) && check_ownership(srv, why, whylen) &&
                     check_roots(srv, why, whylen) && check_continuations(srv, why, whylen)
                 ? TCM_VALID
                 : TCM_INVALID_HEAP;
    if (rc == TCM_VALID &&
        (atomic_load(&srv->state->req.phase) != TCM_INTENT_NONE ||
         atomic_load(&srv->state->page.kind) != TCM_PAGES_NONE)) {
        snprintf(why, whylen, "an intent is still open between two operations");
        rc = TCM_INVALID_HEAP;
    }
    uint32_t unchecked = 0;
    if (rc == TCM_VALID)
        rc = check_caches(srv, why, whylen, &unchecked);
    if (rc == TCM_INVALID_HEAP) /* a client's garbage is its own, not the heap's */
        TCM_STAT_ADD(srv->meta, validation_failures, 1);
    if (rc == TCM_VALID)
        snprintf(why, whylen, "%u pages below top, %llu bytes handed out%s", h->top,
                 (unsigned long long)atomic_load(&srv->meta->stats.bytes_clients),
                 unchecked ? "; some clients' caches not checked (time budget)" : "");
    return rc;
}
