/* Page heap and central lists, driven directly: split/coalesce and page map
 * invariants after every step of a random workload, validation of every kind
 * of bad offset, and release really freeing tmpfs blocks. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "central.h"
#include "check.h"
#include "cases.h"
#include "heap.h"
#include "pageheap.h"
#include "prim.h"
#include "validate_heap.h"

#define HEAP (64ull << 20)

static tcm_heap_t h;
static uint16_t owner_tag;
static int heap_fd;

static void validate(void)
{
    char why[256];
    if (!tcm__heap_validate_ht(&h, why, sizeof why)) {
        fprintf(stderr, "heap invalid: %s\n", why);
        abort();
    }
}

/* A RETURN of one object, as the heap thread serves it: the batch free,
 * then the spans it left empty released (or kept). */
static int give_back(unsigned cls, uint64_t off, uint16_t *owner)
{
    uint8_t st = TCM_ST_PENDING;
    tcm_owner_run_t run;
    uint32_t nruns, emptied[1], nemptied = 0;
    tcm__central_return_ht(&h, cls, &off, 1, &st, &run, &nruns, emptied, &nemptied);
    CHECK_EQ(nruns, st == TCM_ST_OK);
    if (nruns) {
        CHECK_EQ(run.objects, 1);
        *owner = run.owner;
    }
    for (uint32_t i = 0; i < nemptied; i++)
        tcm__central_release_span_ht(&h, emptied[i]);
    return st;
}

/* ALLOC_PAGES's run: its offset, logged before the run is mapped. */
static int large_alloc(uint64_t npages, uint64_t align, uint32_t owner, uint64_t *off)
{
    uint32_t first = 0;
    int st = tcm__large_alloc_ht(&h, npages, align, owner, &first);
    CHECK_EQ(first != 0, st == TCM_ST_OK);
    *off = tcm__page_off(first);
    return st;
}

static uint32_t refill(unsigned cls, uint32_t want, uint64_t *offs, uint16_t owner, int *st)
{
    uint32_t logged = 0;
    uint32_t n = tcm__central_refill_ht(&h, cls, want, owner, offs, &logged, st);
    CHECK_EQ(logged, n);
    return n;
}

/* The recovery pass throws every derived structure away and rebuilds it
 * from the page map and the object map: same heap afterwards. */
static void rebuild_and_compare(void)
{
    uint64_t free_pages = h.free_pages, central = atomic_load(&h.meta->stats.bytes_central_free);
    CHECK_EQ(tcm__ph_rebuild_ht(&h), 0);
    CHECK_EQ(tcm__central_rebuild_ht(&h), 0);
    validate();
    CHECK_EQ(h.free_pages, free_pages);
    CHECK_EQ(atomic_load(&h.meta->stats.bytes_central_free), central);
}

static void setup(void)
{
    char name[64];
    snprintf(name, sizeof name, "/tcmtest-ph-%d", (int)tcm__pid());
    heap_fd = tcm__shm_create(name, HEAP, 0600);
    CHECK_GE(heap_fd, 0);
    tcm__shm_unlink(name);
    tcm_meta_layout_t ml;
    tcm_state_layout_t sl;
    tcm__meta_layout(&ml, (uint32_t)(HEAP >> TCM_PAGE_SHIFT), 64);
    tcm__state_layout(&sl, (uint32_t)(HEAP >> TCM_PAGE_SHIFT));
    void *meta = tcm__reserve(ml.size), *state = tcm__reserve(sl.size);
    CHECK(meta != NULL && state != NULL);
    CHECK_EQ(tcm__heap_attach(&h, meta, state, 64, heap_fd, -1, -1, HEAP, 0x7e0000000000ull, 16, true), 0);
    atomic_store(&h.meta->config.page_cache_cap, UINT64_MAX); /* release only when asked */
}

static void test_runs(void)
{
    enum { N = 400 };
    uint32_t spans[N] = {0};
    srand(1);
    for (int step = 0; step < 5000; step++) {
        int i = rand() % N;
        if (spans[i]) {
            tcm_span_t *sp = &h.spans[spans[i]];
            CHECK_EQ(sp->state, TCM_SPAN_LARGE);
            uint64_t bytes;
            uint32_t owner;
            CHECK_EQ(tcm__large_free_ht(&h, tcm__page_off(sp->first), &bytes, &owner), TCM_ST_OK);
            CHECK_EQ(owner, (uint32_t)i);
            spans[i] = 0;
        } else {
            uint64_t npages = 1 + (uint64_t)(rand() % 4 ? rand() % 8 : rand() % 200);
            uint64_t align = rand() % 8 == 0 ? 1u << (rand() % 6) : 1;
            uint64_t off;
            int st = large_alloc(npages, align, (uint32_t)i, &off);
            if (st == TCM_ST_NOMEM)
                continue;
            CHECK_EQ(st, TCM_ST_OK);
            CHECK_EQ(((0x7e0000000000ull + off) / TCM_PAGE_SIZE) % align, 0);
            spans[i] = h.page_span[off >> TCM_PAGE_SHIFT];
            CHECK_EQ(h.spans[spans[i]].npages, npages);
            /* no two live runs overlap: every page maps back to its own span */
            for (uint64_t p = 0; p < npages; p++)
                CHECK_EQ(h.page_span[(off >> TCM_PAGE_SHIFT) + p], spans[i]);
        }
        if (step % 100 == 37) /* some free runs punched: released ones merge, backed ones wait */
            tcm__ph_release_ht(&h, (uint64_t)(rand() % 4) * 64 * TCM_PAGE_SIZE);
        if (step % 50 == 0)
            validate();
        if (step % 1000 == 999)
            rebuild_and_compare();
    }
    for (int i = 0; i < N; i++)
        if (spans[i]) {
            uint64_t bytes;
            uint32_t owner;
            CHECK_EQ(tcm__large_free_ht(&h, tcm__page_off(h.spans[spans[i]].first), &bytes, &owner), TCM_ST_OK);
        }
    validate();
    /* everything coalesced back into one run, once punched: backed and
     * released runs are not merged */
    tcm__ph_release_ht(&h, 0);
    validate();
    CHECK_EQ(h.free_pages, h.top - 1);
    uint32_t s = h.page_span[1];
    CHECK_EQ(h.spans[s].state, TCM_SPAN_FREE);
    CHECK_EQ(h.spans[s].npages, h.top - 1);
}

static void test_objects(void)
{
    static uint64_t offs[4096];
    int st;
    unsigned cls = tcm__size_class(48);
    uint32_t n = refill(cls, 512, offs, 7, &st);
    CHECK_EQ(st, TCM_ST_OK);
    CHECK_EQ(n, 512);
    for (uint32_t i = 0; i < n; i++) {
        CHECK_EQ(tcm__central_check_ht(&h, cls, offs[i], NULL), TCM_ST_OK);
        CHECK_EQ(tcm__central_check_ht(&h, 0, offs[i], NULL), TCM_ST_OK);
        for (uint32_t j = 0; j < i; j++)
            CHECK_NE(offs[i], offs[j]);
    }
    validate();
    rebuild_and_compare();
    /* each kind of bad free is refused and changes nothing */
    CHECK_EQ(give_back(cls, offs[0] + 16, &owner_tag), TCM_ST_NOT_OBJECT);
    CHECK_EQ(give_back(cls + 1, offs[0], &owner_tag), TCM_ST_NOT_OBJECT);
    CHECK_EQ(give_back(cls, HEAP + 4096, &owner_tag), TCM_ST_BAD_OFFSET);
    CHECK_EQ(give_back(cls, 0, &owner_tag), TCM_ST_BAD_OFFSET);
    CHECK_EQ(give_back(cls, (uint64_t)(h.top + 10) << TCM_PAGE_SHIFT, &owner_tag), TCM_ST_NOT_OBJECT);
    owner_tag = 0;
    CHECK_EQ(give_back(cls, offs[1], &owner_tag), TCM_ST_OK);
    CHECK_EQ(owner_tag, 7); /* credited to whoever it was handed to */
    CHECK_EQ(give_back(cls, offs[1], &owner_tag), TCM_ST_DOUBLE_FREE);
    uint64_t bytes;
    uint32_t owner;
    CHECK_EQ(tcm__large_free_ht(&h, offs[2] & ~(uint64_t)(TCM_PAGE_SIZE - 1), &bytes, &owner), TCM_ST_NOT_OBJECT);
    for (uint32_t i = 0; i < n; i++)
        if (i != 1)
            CHECK_EQ(give_back(cls, offs[i], &owner_tag), TCM_ST_OK);
    validate();
    rebuild_and_compare();
    /* the span went back with its last object: nothing empty is kept */
    CHECK_EQ(tcm__central_drop_empty_ht(&h), 0);
    validate();
    CHECK_EQ(h.free_pages, h.top - 1);

    /* many classes at once, then everything back */
    for (unsigned c = 1; c < TCM_NCLASSES; c += 7) {
        n = refill(c, h.classes[c].batch, offs, 7, &st);
        CHECK_EQ(n, h.classes[c].batch);
        for (uint32_t i = 0; i < n; i++)
            CHECK_EQ(give_back(c, offs[i], &owner_tag), TCM_ST_OK);
    }
    tcm__central_drop_empty_ht(&h);
    validate();
    CHECK_EQ(h.free_pages, h.top - 1);
}

static void test_release(void)
{
    uint64_t off;
    CHECK_EQ(large_alloc(2048, 1, 1, &off), TCM_ST_OK); /* 16 MiB, committed */
    int64_t before = tcm__backed_bytes(heap_fd);
    CHECK_GE(before, 16 << 20);
    uint64_t bytes;
    uint32_t owner;
#ifdef _WIN32
    /* a section keeps its commit charge (prim_win.c): what goes back is
     * the physical memory, seen in a view's working set */
    char err[200];
    char *view = tcm__map(heap_fd, HEAP, NULL, true, err, sizeof err);
    CHECK(view != NULL);
    memset(view + off, 1, 16 << 20);
    CHECK_EQ(tcm__resident_bytes(view + off, 16 << 20), 16 << 20);
#endif
    CHECK_EQ(tcm__large_free_ht(&h, off, &bytes, &owner), TCM_ST_OK);
    tcm__ph_release_ht(&h, 0);
    int64_t after = tcm__backed_bytes(heap_fd);
#ifdef _WIN32
    CHECK_EQ(after, before);
    CHECK_EQ(tcm__resident_bytes(view + off, 16 << 20), 0);
    tcm__unmap(view, HEAP);
#else
    CHECK_GE(before - after, 16 << 20);
    CHECK_LT(after, before / 20); /* tmpfs blocks really went back */
#endif
    validate();
}

/* A run taken in transit and committed in steps (continuation.c): the
 * heap stays valid between steps; given back half committed, its backed
 * and released halves are two free runs; taken again and finished, it maps
 * like any page run. Then a release in steps punches it all again. */
static void test_steps(void)
{
    const uint32_t npages = 2048, step = 256; /* 16 MiB in 2 MiB steps */
    uint32_t s, done = 0;
    CHECK_EQ(tcm__ph_take_ht(&h, npages, 1, &s), TCM_ST_OK);
    CHECK_EQ(h.transit_pages, npages);
    CHECK_EQ(tcm__ph_in_use_end_ht(&h), tcm__page_off(h.spans[s].first + npages)); /* counted as in use */
    validate();
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(tcm__ph_commit_step_ht(&h, s, &done, step), 0);
        validate();
    }
    CHECK_EQ(done, 3 * step);
    uint64_t committed_before = h.free_committed_pages;
    tcm__ph_put_back_ht(&h, s, done);
    CHECK_EQ(h.transit_pages, 0);
    CHECK_EQ(h.free_committed_pages, committed_before + 3 * step); /* exactly what was backed */
    validate();

    CHECK_EQ(tcm__ph_take_ht(&h, npages, 1, &s), TCM_ST_OK);
    for (done = 0; !h.spans[s].committed;)
        CHECK_EQ(tcm__ph_commit_step_ht(&h, s, &done, step), 0);
    CHECK_EQ(done, npages);
    uint32_t first = 0;
    CHECK_EQ(tcm__large_map_taken_ht(&h, s, 7, &first), TCM_ST_OK);
    validate();
    CHECK_GE(tcm__backed_bytes(heap_fd), (int64_t)npages * TCM_PAGE_SIZE);
    uint64_t bytes;
    uint32_t owner;
    CHECK_EQ(tcm__large_free_ht(&h, tcm__page_off(first), &bytes, &owner), TCM_ST_OK);
    CHECK_EQ(owner, 7);

    int steps = 0;
    tcm__ph_release_begin_ht(&h, true);
    while (tcm__ph_release_step_ht(&h, 0, false, 1)) { /* a piece a step */
        validate();
        steps++;
    }
    CHECK_GE(steps, (int)(npages / TCM_RELEASE_PIECE_PAGES)); /* 16 MiB is 4 pieces at least */
    CHECK_EQ(h.free_committed_pages, 0);
#ifndef _WIN32 /* (a section keeps its commit charge: test_release) */
    CHECK_LT(tcm__backed_bytes(heap_fd), (int64_t)(npages * TCM_PAGE_SIZE / 20));
#endif
    validate();
    rebuild_and_compare();
}

static void test_limit(void)
{
    atomic_store(&h.meta->config.heap_limit, 8ull << 20);
    uint64_t off, offs[64];
    CHECK_EQ(large_alloc(2048, 1, 1, &off), TCM_ST_NOMEM);
    CHECK_EQ(large_alloc(512, 1, 1, &off), TCM_ST_OK);
    int st;
    uint32_t got = 0;
    for (int i = 0; i < 1000; i++) {
        uint32_t n = refill(TCM_NCLASSES - 1, 64, offs, 7, &st);
        if (!n) {
            CHECK_EQ(st, TCM_ST_NOMEM);
            break;
        }
        got += n;
    }
    CHECK_GT(got, 0);
    CHECK_LE((uint64_t)got * TCM_MAX_SMALL, 8ull << 20);
    validate();
    atomic_store(&h.meta->config.heap_limit, HEAP);
}

/* The root seqlock: a write completes one a crash left half-done (odd
 * sequence), and a read sees whole values only; a deleted root is a
 * tombstone a lookup goes on past. */
static void test_roots(void)
{
    tcm_root_t *r = &h.roots[3];
    uint64_t off;
    char name[TCM_ROOT_NAME_MAX];
    tcm__root_write(r, "table", 0x4000, 7);
    CHECK_EQ(tcm__root_read(r, &off, name), 7);
    CHECK(off == 0x4000 && strcmp(name, "table") == 0);
    atomic_store(&r->seq, atomic_load(&r->seq) + 1); /* killed half-way through a write */
    atomic_store(&r->name[0], 0x6161616161616161ull);
    tcm__root_write(r, "other", 0x8000, 7); /* the redo */
    CHECK_EQ(atomic_load(&r->seq) % 2, 0);
    CHECK_EQ(tcm__root_read(r, &off, name), 7);
    CHECK(off == 0x8000 && strcmp(name, "other") == 0);
    tcm__root_write(r, "", UINT64_MAX, 0);
    CHECK_EQ(tcm__root_read(r, &off, name), TCM_ROOT_DELETED);
    CHECK(off == 0 && name[0] == 0);

    /* an odd sequence nobody will redo: whole values are kept, a root half
     * deleted is deleted, an unused one stays unused; an even one is left */
    bool kept;
    tcm__root_write(r, "table", 0x4000, 7);
    CHECK(!tcm__root_repair(r, HEAP, &kept));
    uint32_t seq = tcm__root_write_begin(r);
    tcm__root_write_data(r, "table", 0x6000, 7); /* killed before the even store */
    CHECK(tcm__root_repair(r, HEAP, &kept));
    CHECK(kept);
    CHECK_EQ(atomic_load(&r->seq), seq + 1);
    CHECK_EQ(tcm__root_read(r, &off, name), 7);
    CHECK(off == 0x6000 && strcmp(name, "table") == 0);
    tcm__root_write_begin(r);
    atomic_store(&r->name[0], 0); /* killed while deleting it: name gone, still held */
    CHECK(tcm__root_repair(r, HEAP, &kept));
    CHECK(!kept);
    CHECK_EQ(tcm__root_read(r, &off, name), TCM_ROOT_DELETED);
    CHECK(off == 0 && name[0] == 0);
    tcm_root_t *fresh = &h.roots[5];
    tcm__root_write_begin(fresh); /* killed before a new root's first store */
    CHECK(tcm__root_repair(fresh, HEAP, &kept));
    CHECK(!kept);
    CHECK_EQ(atomic_load(&fresh->seq) % 2, 0);
    CHECK_EQ(tcm__root_read(fresh, &off, name), 0);

    /* the hash table: names that start their probe at one entry each find
     * their own, past a tombstone between them */
    for (unsigned i = 0; i < h.nroots; i++)
        tcm__root_write(&h.roots[i], "", UINT64_MAX, 0);
    memset(h.roots, 0, h.nroots * sizeof *h.roots);
    char a[16], b[16];
    uint32_t mask = h.nroots - 1, want = 0, n = 0;
    for (unsigned i = 0; n < 2; i++) { /* two names with one home */
        char cand[16];
        snprintf(cand, sizeof cand, "n%u", i);
        if (n == 0) {
            want = tcm__root_hash(cand, mask);
            snprintf(a, sizeof a, "%s", cand);
            n++;
        } else if (tcm__root_hash(cand, mask) == want) {
            snprintf(b, sizeof b, "%s", cand);
            n++;
        }
    }
    tcm__root_write(&h.roots[want], a, 0x4000, 1);
    tcm__root_write(&h.roots[(want + 1) & mask], b, 0x8000, 1);
    CHECK_EQ(tcm__root_find(h.roots, h.nroots, b, &off), (int)((want + 1) & mask));
    tcm__root_write(&h.roots[want], "", UINT64_MAX, 0); /* a deleted, b still found past it */
    CHECK_EQ(tcm__root_find(h.roots, h.nroots, a, &off), -1);
    CHECK_EQ(tcm__root_find(h.roots, h.nroots, b, &off), (int)((want + 1) & mask));
    CHECK_EQ(off, 0x8000);
    memset(h.roots, 0, h.nroots * sizeof *h.roots);
}

/* Each case on a heap of its own, set up in its own process. */
/* A RETURN batch as the heap thread frees it: objects of several spans
 * interleaved, bad entries among good ones, an object twice (the second is
 * the double free), a span left empty; every entry gets its status; owner
 * runs add up to what was freed. */
static void test_batch(void)
{
    static uint64_t offs[256], batch[TCM_MAX_BATCH];
    int st;
    unsigned cls = tcm__size_class(1024); /* 64 objects per span */
    uint32_t per_span = h.classes[cls].span_objs, n = refill(cls, 4 * per_span, offs, 9, &st);
    CHECK_EQ(n, 4 * per_span);
    uint32_t k = 0;
    for (uint32_t i = 0; i < per_span; i++) { /* span 0 whole, spans 1 and 2 interleaved with it */
        batch[k++] = offs[i];
        if (i % 4 == 0)
            batch[k++] = offs[per_span + i];
        if (i % 8 == 0)
            batch[k++] = offs[2 * per_span + i];
    }
    uint32_t good = k;
    batch[k++] = offs[per_span] + 16;     /* not an object start */
    batch[k++] = offs[0];                 /* twice in the batch */
    batch[k++] = offs[3 * per_span] + 8;  /* not an object start, another span */
    batch[k++] = offs[3 * per_span + 1];  /* good, after the bad ones */
    good++;
    uint8_t sts[TCM_MAX_BATCH];
    uint32_t nruns, emptied[TCM_MAX_BATCH], nemptied = 0;
    memset(sts, TCM_ST_PENDING, sizeof sts);
    tcm_owner_run_t runs[TCM_MAX_BATCH];
    uint32_t refused = tcm__central_return_ht(&h, cls, batch, k, sts, runs, &nruns, emptied, &nemptied);
    CHECK_EQ(refused, 3);
    for (uint32_t i = 0; i < k; i++)
        CHECK_NE(sts[i], TCM_ST_PENDING);
    CHECK_EQ(sts[good - 1], TCM_ST_NOT_OBJECT);
    CHECK_EQ(sts[good], TCM_ST_DOUBLE_FREE);
    CHECK_EQ(sts[good + 1], TCM_ST_NOT_OBJECT);
    CHECK_EQ(sts[k - 1], TCM_ST_OK);
    uint64_t credited = 0;
    for (uint32_t r = 0; r < nruns; r++) {
        CHECK_EQ(runs[r].owner, 9);
        credited += runs[r].objects;
    }
    CHECK_EQ(credited, good);
    CHECK_EQ(nruns, 1);
    CHECK_EQ(nemptied, 1); /* span 0 */
    CHECK_EQ(emptied[0], h.page_span[offs[0] >> TCM_PAGE_SHIFT]);
    for (uint32_t i = 0; i < k; i++)
        if (sts[i] == TCM_ST_OK)
            CHECK_EQ(tcm__central_check_ht(&h, cls, batch[i], NULL), TCM_ST_DOUBLE_FREE);
    validate();
    rebuild_and_compare();
    /* the same batch again: every entry refused, nothing changes */
    CHECK_EQ(tcm__central_return_ht(&h, cls, batch, k, sts, runs, &nruns, emptied, &nemptied), k);
    CHECK_EQ(nruns, 0);
    validate();
    /* what was not returned is still handed out; the rest comes back */
    k = 0;
    for (uint32_t i = per_span; i < n; i++)
        if (tcm__central_check_ht(&h, cls, offs[i], NULL) == TCM_ST_OK)
            batch[k++] = offs[i];
    CHECK_EQ(k, n - good);
    nemptied = 0;
    CHECK_EQ(tcm__central_return_ht(&h, cls, batch, k, sts, runs, &nruns, emptied, &nemptied), 0);
    CHECK_EQ(nemptied, 3);
    validate();
    rebuild_and_compare();
}

/* Random batches against a model: runs in address order (the RETURN's
 * path without a lookup), shuffled entries, objects twice, offsets inside
 * objects, past a span's last object, in other spans and classes; each
 * entry's status is what a check of it alone says before the batch, except
 * an object's second time (a double free); the heap stays consistent. */
static void test_random(void)
{
    static uint64_t offs[8 * TCM_MAX_BATCH], batch[TCM_MAX_BATCH];
    static uint8_t expect[TCM_MAX_BATCH], sts[TCM_MAX_BATCH];
    static tcm_owner_run_t runs[TCM_MAX_BATCH];
    static uint32_t emptied[TCM_MAX_BATCH];
    srand(7);
    const unsigned sizes[] = {16, 48, 1024, 4096, 32768};
    for (unsigned c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        unsigned cls = tcm__size_class(sizes[c]);
        int st;
        uint32_t n = 0, per = h.classes[cls].batch, got;
        while (n + per <= 4 * TCM_MAX_BATCH && (got = refill(cls, per, offs + n, (uint16_t)(1 + n % 3), &st)))
            n += got; /* owners 1..3: owner runs, tag blocks */
        CHECK_GT(n, 0);
        for (int round = 0; round < 200; round++) {
            uint32_t k = (uint32_t)(1 + rand() % TCM_MAX_BATCH);
            uint32_t at = (uint32_t)(rand() % n);
            for (uint32_t i = 0; i < k; i++) {
                int kind = rand() % 16;
                uint64_t off = offs[(at + i) % n]; /* mostly a run in address order */
                if (kind == 0)
                    off = offs[rand() % n];
                else if (kind == 1 && i)
                    off = batch[rand() % i]; /* twice */
                else if (kind == 2)
                    off += 16 * (1 + rand() % 3);
                else if (kind == 3)
                    off += h.classes[cls].size; /* the next object, maybe past the span */
                else if (kind == 4)
                    off = (uint64_t)(rand() % (h.top + 4)) << TCM_PAGE_SHIFT;
                batch[i] = off;
            }
            if (round % 2) /* a bin's top given back going down */
                for (uint32_t i = 0; i < k / 2; i++) {
                    uint64_t t = batch[i];
                    batch[i] = batch[k - 1 - i];
                    batch[k - 1 - i] = t;
                }
            for (uint32_t i = 0; i < k; i++) {
                expect[i] = (uint8_t)tcm__central_check_ht(&h, cls, batch[i], NULL);
                for (uint32_t j = 0; j < i && expect[i] == TCM_ST_OK; j++)
                    if (batch[j] == batch[i])
                        expect[i] = TCM_ST_DOUBLE_FREE;
            }
            uint32_t nruns, nemptied = 0, refused = 0;
            memset(sts, TCM_ST_PENDING, k);
            uint32_t nrefused = tcm__central_return_ht(&h, cls, batch, k, sts, runs, &nruns, emptied, &nemptied);
            uint64_t credited = 0;
            for (uint32_t i = 0; i < k; i++) {
                CHECK_EQ(sts[i], expect[i]);
                refused += sts[i] != TCM_ST_OK;
                if (sts[i] == TCM_ST_OK)
                    CHECK_EQ(tcm__central_check_ht(&h, cls, batch[i], NULL), TCM_ST_DOUBLE_FREE);
            }
            for (uint32_t r = 0; r < nruns; r++)
                credited += runs[r].objects;
            CHECK_EQ(nrefused, refused);
            CHECK_EQ(credited, k - refused);
            for (uint32_t e = 0; e < nemptied; e++)
                tcm__central_release_span_ht(&h, emptied[e]);
            validate();
            /* what went back is handed out again, to keep the runs dense */
            for (uint32_t i = 0; i < n; i++)
                if (tcm__central_check_ht(&h, cls, offs[i], NULL) != TCM_ST_OK) {
                    uint64_t one;
                    if (refill(cls, 1, &one, 3, &st) == 1)
                        offs[i] = one;
                }
        }
        rebuild_and_compare();
    }
}

/* The empty spans of class cls: its last central list. */
static uint32_t empty_spans(unsigned cls)
{
    uint32_t n = 0;
    for (uint32_t s = h.central[cls][TCM_CENTRAL_LISTS - 1]; s; s = h.spans[s].next)
        n++;
    return n;
}

/* Spans a RETURN empties go back to the page heap at once: the next refill
 * cuts new ones; spans left empty otherwise (a recovery finds them) go back
 * with drop_empty. */
static void test_kept(void)
{
    static uint64_t offs[4 * TCM_MAX_BATCH];
    int st;
    unsigned cls = tcm__size_class(32768);
    const tcm_class_info_t *ci = &h.classes[cls];
    uint32_t batch = ci->batch, n = 0;
    for (int b = 0; b < 3; b++)
        n += refill(cls, batch, offs + n, 5, &st);
    CHECK_EQ(n, 3 * batch);
    uint64_t span_bytes = tcm__page_off(ci->span_pages);
    uint8_t sts[TCM_MAX_BATCH];
    tcm_owner_run_t runs[TCM_MAX_BATCH];
    uint32_t nruns, emptied[TCM_MAX_BATCH];
    for (uint32_t i = 0; i < n; i += batch) {
        uint32_t nemptied = 0;
        memset(sts, TCM_ST_PENDING, batch);
        CHECK_EQ(tcm__central_return_ht(&h, cls, offs + i, batch, sts, runs, &nruns, emptied, &nemptied), 0);
        CHECK_EQ(nemptied, batch / ci->span_objs);
        for (uint32_t e = 0; e < nemptied; e++)
            CHECK(tcm__central_release_span_ht(&h, emptied[e]));
        validate();
    }
    CHECK_EQ(atomic_load(&h.cstats[cls].spans), 0);
    CHECK_EQ(empty_spans(cls), 0);
    CHECK_EQ(h.free_pages, h.top - 1);
    uint64_t free_pages = h.free_pages;
    CHECK_EQ(refill(cls, batch, offs, 5, &st), batch);
    uint32_t needed = (batch + ci->span_objs - 1) / ci->span_objs;
    CHECK_EQ(free_pages - h.free_pages, (uint64_t)needed * ci->span_pages);
    /* emptied but not released (as a recovery leaves them): drop_empty */
    uint32_t nemptied = 0;
    memset(sts, TCM_ST_PENDING, batch);
    CHECK_EQ(tcm__central_return_ht(&h, cls, offs, batch, sts, runs, &nruns, emptied, &nemptied), 0);
    CHECK_EQ(empty_spans(cls), needed);
    rebuild_and_compare();
    CHECK_EQ(tcm__central_drop_empty_ht(&h), (uint64_t)needed * span_bytes);
    CHECK_EQ(empty_spans(cls), 0);
    validate();
    CHECK_EQ(h.free_pages, h.top - 1);
}

/* A REFILL's new spans are cut from the page heap at once, from the free
 * run a single span would come from (a hole first), and a RETURN's
 * emptied spans go back to it at once, neighbours merged: the heap ends as
 * one free run, whatever the order they come back in. */
static void test_cut(void)
{
    static uint64_t offs[TCM_MAX_BATCH], back[TCM_MAX_BATCH];
    unsigned cls = tcm__size_class(32768);
    const tcm_class_info_t *ci = &h.classes[cls];
    uint32_t sp_pages = ci->span_pages, batch = ci->batch, nspans = batch / ci->span_objs;
    /* a hole of three spans' pages low in the heap, between two runs */
    uint64_t a, hole, b;
    CHECK_EQ(large_alloc(1, 1, 1, &a), TCM_ST_OK);
    CHECK_EQ(large_alloc(3 * sp_pages, 1, 1, &hole), TCM_ST_OK);
    CHECK_EQ(large_alloc(1, 1, 1, &b), TCM_ST_OK);
    uint64_t bytes;
    uint32_t owner;
    CHECK_EQ(tcm__large_free_ht(&h, hole, &bytes, &owner), TCM_ST_OK);
    int st;
    CHECK_EQ(refill(cls, batch, offs, 4, &st), batch);
    validate();
    CHECK_EQ(offs[0], hole); /* the hole first, as one span at a time would */
    for (uint32_t i = 1; i < batch; i++)
        CHECK_EQ(offs[i], offs[i - 1] + ci->size + (i == 6 ? b + TCM_PAGE_SIZE - hole - 3 * tcm__page_off(sp_pages) : 0));
    CHECK_EQ(atomic_load(&h.cstats[cls].spans), nspans);
    CHECK_EQ(empty_spans(cls), 0);
    rebuild_and_compare();
    /* back in reverse order, a span's objects down too */
    for (uint32_t i = 0; i < batch; i++)
        back[i] = offs[batch - 1 - i];
    uint8_t sts[TCM_MAX_BATCH];
    tcm_owner_run_t runs[TCM_MAX_BATCH];
    uint32_t nruns, emptied[TCM_MAX_BATCH], nemptied = 0;
    memset(sts, TCM_ST_PENDING, batch);
    CHECK_EQ(tcm__central_return_ht(&h, cls, back, batch, sts, runs, &nruns, emptied, &nemptied), 0);
    CHECK_EQ(nemptied, nspans);
    CHECK_EQ(tcm__central_release_spans_ht(&h, emptied, nemptied), nspans); /* none kept */
    validate();
    CHECK_EQ(tcm__central_drop_empty_ht(&h), 0);
    CHECK_EQ(tcm__large_free_ht(&h, a, &bytes, &owner), TCM_ST_OK);
    CHECK_EQ(tcm__large_free_ht(&h, b, &bytes, &owner), TCM_ST_OK);
    validate();
    CHECK_EQ(h.free_pages, h.top - 1);
    CHECK_EQ(h.spans[h.page_span[1]].npages, h.top - 1);
    /* and in a shuffled order: less merged before, the same heap after */
    CHECK_EQ(refill(cls, batch, offs, 4, &st), batch);
    srand(7);
    for (uint32_t i = batch - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rand() % (i + 1);
        uint64_t t = offs[i];
        offs[i] = offs[j];
        offs[j] = t;
    }
    nemptied = 0;
    memset(sts, TCM_ST_PENDING, batch);
    CHECK_EQ(tcm__central_return_ht(&h, cls, offs, batch, sts, runs, &nruns, emptied, &nemptied), 0);
    CHECK_EQ(tcm__central_release_spans_ht(&h, emptied, nemptied), nspans);
    validate();
    CHECK_EQ(h.free_pages, h.top - 1);
    rebuild_and_compare();
}

/* A cut takes backed free pages before released ones, so that a run a
 * process freed is used again rather than a punched one backed anew; a
 * backed run and a released neighbour stay apart until it is punched too. */
static void test_backed_first(void)
{
    uint64_t a, b, c, d, e, bytes;
    uint32_t owner;
    CHECK_EQ(large_alloc(8, 1, 1, &a), TCM_ST_OK);
    CHECK_EQ(large_alloc(8, 1, 1, &b), TCM_ST_OK);
    CHECK_EQ(large_alloc(16, 1, 1, &c), TCM_ST_OK);
    CHECK_EQ(large_alloc(8, 1, 1, &d), TCM_ST_OK); /* keeps c off the top */
    CHECK_EQ(tcm__large_free_ht(&h, a, &bytes, &owner), TCM_ST_OK);
    tcm__ph_release_ht(&h, 0); /* a: 8 pages, released */
    CHECK_EQ(tcm__large_free_ht(&h, c, &bytes, &owner), TCM_ST_OK); /* c: 16 pages, backed */
    validate();
    CHECK_EQ(h.free_committed_pages, 16);
#ifndef _WIN32
    int64_t before = tcm__backed_bytes(heap_fd);
#endif
    CHECK_EQ(large_alloc(8, 1, 1, &e), TCM_ST_OK);
    CHECK_EQ(e, c); /* not a, though a is the exact fit */
    CHECK_EQ(h.free_committed_pages, 8);
#ifndef _WIN32
    CHECK_EQ(tcm__backed_bytes(heap_fd), before); /* nothing backed anew */
#endif
    /* b, backed, next to a, released: two runs until b is punched */
    CHECK_EQ(tcm__large_free_ht(&h, b, &bytes, &owner), TCM_ST_OK);
    validate();
    uint32_t ra = h.page_span[a >> TCM_PAGE_SHIFT], rb = h.page_span[b >> TCM_PAGE_SHIFT];
    CHECK(ra != rb);
    CHECK_EQ(h.spans[ra].npages, 8);
    CHECK_EQ(h.spans[rb].committed, 1);
    tcm__ph_release_ht(&h, 0);
    validate();
    ra = h.page_span[a >> TCM_PAGE_SHIFT];
    CHECK_EQ(h.spans[ra].npages, 16);
    CHECK_EQ(h.spans[ra].committed, 0);
    CHECK_EQ(h.free_committed_pages, 0);
    (void)d;
}

/* At the heap limit a run that fits only across a backed run and its
 * released neighbour is still found: the cut punches the backed runs, which
 * then merge with their neighbours. */
static void test_limit_across_states(void)
{
    uint64_t a, b, c, got, bytes;
    uint32_t owner;
    CHECK_EQ(large_alloc(8, 1, 1, &a), TCM_ST_OK);
    CHECK_EQ(large_alloc(8, 1, 1, &b), TCM_ST_OK);
    CHECK_EQ(large_alloc(8, 1, 1, &c), TCM_ST_OK); /* keeps b off the top */
    CHECK_EQ(tcm__large_free_ht(&h, a, &bytes, &owner), TCM_ST_OK);
    tcm__ph_release_ht(&h, 0); /* a: released */
    CHECK_EQ(tcm__large_free_ht(&h, b, &bytes, &owner), TCM_ST_OK); /* b: backed, a run of its own */
    validate();
    atomic_store(&h.meta->config.heap_limit, (uint64_t)h.top * TCM_PAGE_SIZE); /* nothing above top */
    CHECK_EQ(large_alloc(16, 1, 1, &got), TCM_ST_OK);
    CHECK_EQ(got, a);
    CHECK_EQ(h.free_committed_pages, 0);
    validate();
    atomic_store(&h.meta->config.heap_limit, HEAP);
    (void)c;
}

static void release_all(bool split)
{
    tcm__ph_release_begin_ht(&h, true);
    while (tcm__ph_release_step_ht(&h, 0, split, UINT64_MAX))
        ;
}

/* Ranges kept whole (huge.c marks one once every page of it is in a
 * span): what is freed inside stays backed on the huge lists, which cuts
 * take from first; no free run crosses their edges; the decay's punching
 * passes them by, pressure's splits the range (counted) and forgets it; a
 * range freed whole goes whole, no split. Runs of 64 pages from page 1:
 * run i is pages 64i+1 to 64i+64. */
static void test_huge(void)
{
    uint64_t run[12], x, bytes;
    uint32_t owner;
    for (int i = 0; i < 12; i++)
        CHECK_EQ(large_alloc(64, 1, 1, &run[i]), TCM_ST_OK);
    h.huge[0] |= 1u << 1 | 1u << 2; /* ranges 1 (pages 256-511) and 2 (512-767): every page in a span */
    CHECK_EQ(tcm__large_free_ht(&h, run[3], &bytes, &owner), TCM_ST_OK); /* 193-256: across the edge */
    CHECK_EQ(tcm__large_free_ht(&h, run[4], &bytes, &owner), TCM_ST_OK); /* 257-320 */
    validate();
    CHECK_EQ(h.huge_free_pages, 65); /* 256-320; 193-255 outside, on the backed lists */
    CHECK_EQ(h.spans[h.page_span[256]].first, 256);
    CHECK_EQ(large_alloc(8, 1, 1, &x), TCM_ST_OK);
    CHECK(x >> TCM_PAGE_SHIFT >= 256 && x >> TCM_PAGE_SHIFT < 321); /* from the huge lists first */
    CHECK_EQ(h.huge_free_pages, 57);
    release_all(false);
    validate();
    CHECK_EQ(h.huge_free_pages, 57);
    CHECK_EQ(h.free_committed_pages, 57); /* 193-255 punched, range 1's kept */
    CHECK(h.huge[0] >> 1 & 1);

    /* range 2 freed whole: punched whole, forgotten, not a split */
    for (int i = 7; i < 12; i++)
        CHECK_EQ(tcm__large_free_ht(&h, run[i], &bytes, &owner), TCM_ST_OK);
    validate();
    CHECK_EQ(h.spans[h.page_span[512]].npages, TCM_HUGE_PAGES);
    release_all(false);
    validate();
    CHECK(!(h.huge[0] >> 2 & 1));
    CHECK_EQ(atomic_load(&h.huge_splits), 0);
    CHECK_EQ(h.free_committed_pages, 57 + 63); /* and run 7's pages 449-511, in range 1 */

    /* pressure: range 1 split, counted, its free pages punched */
    release_all(true);
    validate();
    CHECK(!(h.huge[0] >> 1 & 1));
    CHECK_EQ(atomic_load(&h.huge_splits), 1);
    CHECK_EQ(h.free_committed_pages, 0);
    CHECK_EQ(h.huge_free_pages, 0);
    /* a recovery cuts its free stretches at the edges of kept ranges too */
    h.huge[0] |= 1u << 1;
    rebuild_and_compare();
}

/* A kept range a quarter of which stays free through a whole decay step
 * is forgotten (huge_dissolved); one whose free pages were cut into below a
 * quarter during the step is not. */
static void test_sparse(void)
{
    uint64_t run[12], x, bytes;
    uint32_t owner;
    for (int i = 0; i < 12; i++)
        CHECK_EQ(large_alloc(64, 1, 1, &run[i]), TCM_ST_OK);
    h.huge[0] |= 1u << 1; /* range 1: pages 256-511 */
    CHECK_EQ(tcm__large_free_ht(&h, run[4], &bytes, &owner), TCM_ST_OK); /* 257-320: a quarter */
    tcm__ph_huge_step_ht(&h);
    CHECK_EQ(large_alloc(8, 1, 1, &x), TCM_ST_OK); /* from it: 56 free at the step's low */
    CHECK_EQ(tcm__large_free_ht(&h, x, &bytes, &owner), TCM_ST_OK);
    tcm__ph_huge_sparse_ht(&h);
    CHECK(h.huge[0] >> 1 & 1);
    tcm__ph_huge_step_ht(&h);
    tcm__ph_huge_sparse_ht(&h); /* a quarter free all through this step */
    CHECK(!(h.huge[0] >> 1 & 1));
    CHECK_EQ(atomic_load(&h.huge_dissolved), 1);
    CHECK_EQ(h.huge_free_pages, 0);
    validate();
}

/* Which runs read zero (tcm_span_t.zeroed, answered as TCM_RUN_ZEROED):
 * one cut above top, or from pages punched whole since they were last
 * handed out; not one freed and cut again backed, nor any a recovery
 * rebuilt, nor a merge of a zeroed run with such a one. The pages are read
 * to agree. */
static bool pages_zero(const uint8_t *p, uint64_t npages)
{
    for (uint64_t i = 0; i < npages * TCM_PAGE_SIZE; i++)
        if (p[i])
            return false;
    return true;
}

static void test_zeroed(void)
{
    uint64_t a, b, c, d, bytes;
    uint32_t owner;
    bool zero = tcm__released_reads_zero();
    char err[200];
    uint8_t *view = tcm__map(heap_fd, HEAP, NULL, true, err, sizeof err);
    CHECK(view != NULL);
    CHECK_EQ(large_alloc(8, 1, 1, &a), TCM_ST_OK);
    CHECK(h.cut_zeroed); /* above top */
    CHECK(pages_zero(view + a, 8));
    CHECK_EQ(large_alloc(8, 1, 1, &b), TCM_ST_OK);
    CHECK_EQ(large_alloc(8, 1, 1, &d), TCM_ST_OK); /* keeps a and b off the top */
    memset(view + a, 0xa5, 8 * TCM_PAGE_SIZE);
    memset(view + b, 0xa5, 8 * TCM_PAGE_SIZE);
    CHECK_EQ(tcm__large_free_ht(&h, a, &bytes, &owner), TCM_ST_OK);
    CHECK_EQ(large_alloc(8, 1, 1, &c), TCM_ST_OK);
    CHECK_EQ(c, a);
    CHECK(!h.cut_zeroed); /* freed, still backed: what it held is there */
    CHECK_EQ(view[c + 8 * TCM_PAGE_SIZE - 1], 0xa5);
    CHECK_EQ(tcm__large_free_ht(&h, c, &bytes, &owner), TCM_ST_OK);
    tcm__ph_release_ht(&h, 0); /* a punched whole */
    validate();
    CHECK_EQ(large_alloc(4, 1, 1, &c), TCM_ST_OK);
    CHECK_EQ(c, a);
    CHECK_EQ(h.cut_zeroed, zero); /* a cut of it too */
    if (zero)
        CHECK(pages_zero(view + c, 4));
    /* a recovery knows only what is backed */
    CHECK_EQ(tcm__ph_rebuild_ht(&h), 0);
    CHECK_EQ(tcm__central_rebuild_ht(&h), 0);
    validate();
    uint32_t rest = h.page_span[(a >> TCM_PAGE_SHIFT) + 4];
    CHECK_EQ(h.spans[rest].npages, 4);
    CHECK(!h.spans[rest].zeroed);
    /* b punched whole (the backed runs only) joins it: nor is the merge */
    CHECK_EQ(tcm__large_free_ht(&h, b, &bytes, &owner), TCM_ST_OK);
    tcm__ph_release_ht(&h, 1);
    validate();
    rest = h.page_span[(a >> TCM_PAGE_SHIFT) + 4];
    CHECK_EQ(h.spans[rest].npages, 12);
    CHECK(!h.spans[rest].zeroed);
    CHECK_EQ(large_alloc(12, 1, 1, &c), TCM_ST_OK);
    CHECK_EQ(c, a + 4 * TCM_PAGE_SIZE);
    CHECK(!h.cut_zeroed);
    /* a whole release (tcmctl release) punches the released runs too */
    memset(view + c, 0xa5, 12 * TCM_PAGE_SIZE);
    CHECK_EQ(tcm__large_free_ht(&h, c, &bytes, &owner), TCM_ST_OK);
    CHECK_EQ(tcm__ph_rebuild_ht(&h), 0);
    CHECK_EQ(tcm__central_rebuild_ht(&h), 0);
    CHECK(!h.spans[h.page_span[c >> TCM_PAGE_SHIFT]].zeroed);
    tcm__ph_release_ht(&h, 0);
    validate();
    CHECK_EQ(large_alloc(12, 1, 1, &c), TCM_ST_OK);
    CHECK_EQ(c, a + 4 * TCM_PAGE_SIZE);
    CHECK_EQ(h.cut_zeroed, zero);
    if (zero)
        CHECK(pages_zero(view + c, 12));
    (void)d;
    tcm__unmap(view, HEAP);
}

#define ON_A_NEW_HEAP(name) \
    static void case_##name(void) \
    { \
        setup(); \
        test_##name(); \
    }
ON_A_NEW_HEAP(runs)
ON_A_NEW_HEAP(objects)
ON_A_NEW_HEAP(batch)
ON_A_NEW_HEAP(kept)
ON_A_NEW_HEAP(cut)
ON_A_NEW_HEAP(random)
ON_A_NEW_HEAP(release)
ON_A_NEW_HEAP(backed_first)
ON_A_NEW_HEAP(limit_across_states)
ON_A_NEW_HEAP(limit)
ON_A_NEW_HEAP(roots)
ON_A_NEW_HEAP(steps)
ON_A_NEW_HEAP(huge)
ON_A_NEW_HEAP(sparse)
ON_A_NEW_HEAP(zeroed)

int main(void)
{
    static const tt_case_t cases[] = {
        {"runs", case_runs}, {"objects", case_objects}, {"batch", case_batch}, {"kept", case_kept}, {"cut", case_cut}, {"random", case_random}, {"release", case_release},
        {"backed first", case_backed_first}, {"limit across states", case_limit_across_states},
        {"limit", case_limit}, {"roots", case_roots}, {"steps", case_steps}, {"huge ranges", case_huge}, {"sparse ranges", case_sparse},
        {"zeroed runs", case_zeroed},
    };
    return tt_run_cases("pageheap", cases, sizeof cases / sizeof cases[0], 60000) != 0;
}
