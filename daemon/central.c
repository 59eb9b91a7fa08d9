/* central.c — central free lists: spans of each size class with free
 * objects, what their object records (objrec.c: one per small span)
 * say about which objects are handed out and to whom, and page runs. Every
 * offset from a client is checked here before it changes anything. The
 * object records, the page map of allocated spans and their records (object record
 * included) are authoritative; a span's free count and list links are
 * derived (tcm__central_rebuild_ht). Heap thread only. */
#include <stdio.h>
#include <string.h>

#include "central.h"
#include "crash.h"
#include "heap.h"
#include "log.h"
#include "objrec.h"
#include "pageheap.h"
#include "prim.h"
#include "tcm_assert.h"


static uint64_t *span_map(tcm_heap_t *h, const tcm_span_t *sp)
{
    return tcm__span_bits(h, sp);
}

int tcm__pages_alloc_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *s)
{
    int st = tcm__ph_alloc_ht(h, npages, align_pages, s);
    if (st == TCM_ST_NOMEM && tcm__central_drop_empty_ht(h))
        st = tcm__ph_alloc_ht(h, npages, align_pages, s);
    return st;
}

/* A page run leaves the allocator's hands: mapped under the page intent so
 * that a crash leaves it either free or whole. owner: a large run's owner
 * tag, or a small span's object record, taken and backed before. */
static void map_logged(tcm_heap_t *h, uint32_t s, uint8_t state, uint8_t cls, uint32_t owner)
{
    tcm_page_intent_t *pi = &h->state->page;
    tcm_span_t *sp = &h->spans[s];
    pi->span = s;
    pi->first = sp->first;
    pi->npages = sp->npages;
    pi->state = state;
    pi->cls = cls;
    pi->owner = owner;
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&pi->kind, TCM_PAGES_MAP, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
    TCM_CRASH_POINT(span_map);
    tcm__span_map_ht(h, s, pi->first, pi->npages, state, cls, owner);
    if (state == TCM_SPAN_SMALL) {
        /* its object record: no object handed out yet (the tags are read
         * only where a bit is set) */
        TCM_CRASH_POINT(span_rec);
        memset(span_map(h, sp), 0, h->sl.rec_bytes[cls]);
    }
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&pi->kind, TCM_PAGES_NONE, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
}

/* An allocated span leaves the allocator's hands, under the page intent:
 * its pages free in the page map. The caller puts its record on the page
 * heap's lists after (tcm__ph_insert_free_ht or, for several spans at
 * once, tcm__ph_insert_free_runs_ht): those are derived, and nothing cuts
 * pages in between. */
static void unmap_logged(tcm_heap_t *h, uint32_t s)
{
    tcm_page_intent_t *pi = &h->state->page;
    tcm_span_t *sp = &h->spans[s];
    bool small = sp->state == TCM_SPAN_SMALL;
    unsigned cls = sp->cls;
    uint32_t rec = sp->rec;
    pi->span = s;
    pi->first = sp->first;
    pi->npages = sp->npages;
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&pi->kind, TCM_PAGES_UNMAP, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
    tcm__span_unmap_ht(h, sp->first, sp->npages);
    TCM_CRASH_POINT(span_unmap);
    /* its object record and tag blocks are free once the span is not (a
     * recovery frees every record no allocated span names); their pages go
     * at the next trim */
    if (small) {
        const uint32_t *owners = (const uint32_t *)(h->arena[cls] + (uint64_t)rec * h->sl.rec_bytes[cls] +
                                                    h->sl.owners_off[cls]);
        const uint32_t words = (h->classes[cls].span_objs + 63) / 64; /* read once: record puts store */
        for (uint32_t w = 0; w < words; w++)
            if (owners[w] & TCM_OWNER_BLOCK)
                tcm__rec_put_ht(&h->tag_blocks, owners[w] & ~TCM_OWNER_BLOCK);
        tcm__rec_put_ht(&h->recs[cls], rec);
    }
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&pi->kind, TCM_PAGES_NONE, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
}

static void central_add(tcm_heap_t *h, unsigned cls, uint32_t s, unsigned li)
{
    tcm__span_list_push(h, &h->central[cls][li], s);
    h->central_nonempty[cls] |= (uint16_t)(1u << li);
}

static void central_remove(tcm_heap_t *h, unsigned cls, uint32_t s, unsigned li)
{
    uint32_t *head = &h->central[cls][li];
    tcm__span_list_remove(h, head, s);
    if (!*head)
        h->central_nonempty[cls] &= (uint16_t)~(1u << li);
}

/* Frees of span s's objects go to the slow path, which hands them back
 * (pc = DRAIN + class), or into bins again (pc = class): the pages' class
 * byte is all that clients read. Advisory: a recovery sets every page back
 * to its class (tcm__ph_recover_ht), and a client takes either byte for
 * the class. */
static void mark_pages(tcm_heap_t *h, const tcm_span_t *sp, unsigned pc)
{
    memset(h->page_class + sp->first, (int)pc, sp->npages);
}

/* Span s's free count goes from was to now (0: on no list). A span being
 * drained stays on the drain list until it is empty, and is then one like
 * any other. */
static void central_move(tcm_heap_t *h, unsigned cls, uint32_t s, uint32_t was, uint32_t now)
{
    enum { NO_LIST = TCM_CENTRAL_LISTS + 1 };
    tcm_span_t *sp = &h->spans[s];
    uint32_t objs = h->classes[cls].span_objs;
    bool draining = tcm__span_draining(h, sp);
    if (draining && now == objs)
        mark_pages(h, sp, cls);
    unsigned from = !was ? NO_LIST : draining ? TCM_DRAIN_LIST : tcm__central_list(was, objs);
    unsigned to = !now ? NO_LIST : draining && now < objs ? TCM_DRAIN_LIST : tcm__central_list(now, objs);
    if (from == to)
        return;
    if (was)
        central_remove(h, cls, s, from);
    if (now)
        central_add(h, cls, s, to);
}

/* A RETURN left span s more than a quarter free: while the class has at
 * least a span's worth of free objects elsewhere, its frees go back to tcmd
 * from now on, and refills pass it by, so it empties (the objects live
 * ones no longer keep coming back to it through thread caches) and its
 * pages go to whichever class needs them. larson between two processes:
 * central free 14-16 -> 5-6 MB (bench/results/LOG.md). */
static void maybe_drain(tcm_heap_t *h, unsigned cls, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    uint32_t objs = h->classes[cls].span_objs;
    if (objs < 2 || sp->nfree == objs || (uint64_t)sp->nfree * 4 <= objs || tcm__span_draining(h, sp))
        return;
    uint64_t free_objs = atomic_load_explicit(&h->cstats[cls].free_objs, memory_order_relaxed);
    if (free_objs < (uint64_t)sp->nfree + objs) /* stale by this RETURN's objects: a hint */
        return;
    central_remove(h, cls, s, tcm__central_list(sp->nfree, objs));
    mark_pages(h, sp, TCM_PAGE_CLASS_DRAIN + cls);
    central_add(h, cls, s, TCM_DRAIN_LIST);
}

/* No span of the class has a free object but those being drained: the
 * fullest of the first few takes objects into bins again. */
static void undrain_one(tcm_heap_t *h, unsigned cls)
{
    uint32_t best = 0, n = 0;
    for (uint32_t s = h->central[cls][TCM_DRAIN_LIST]; s && n < 8; s = h->spans[s].next, n++)
        if (!best || h->spans[s].nfree < h->spans[best].nfree)
            best = s;
    tcm_span_t *sp = &h->spans[best];
    central_remove(h, cls, best, TCM_DRAIN_LIST);
    mark_pages(h, sp, cls);
    central_add(h, cls, best, tcm__central_list(sp->nfree, h->classes[cls].span_objs));
}

/* Up to nspans new spans of class cls, cut from the page heap at once
 * (one find, split and fallocate for a REFILL's spans), each made under
 * the page intent as before, so a crash leaves some of them made, empty,
 * and the rest free. Their records in out[], in address order, on no list
 * yet: the caller fills them first. Returns how many; 0 and *status when
 * none could be made. */
static uint32_t new_small_spans(tcm_heap_t *h, unsigned cls, uint32_t nspans, uint32_t *out, int *status)
{
    const tcm_class_info_t *ci = &h->classes[cls];
    uint32_t got;
    if (nspans > TCM_MAX_BATCH)
        nspans = TCM_MAX_BATCH;
    *status = tcm__ph_alloc_runs_ht(h, ci->span_pages, nspans, out, &got);
    if (*status == TCM_ST_NOMEM && tcm__central_drop_empty_ht(h))
        *status = tcm__ph_alloc_runs_ht(h, ci->span_pages, nspans, out, &got);
    if (*status != TCM_ST_OK)
        return 0;
    uint32_t recs[TCM_MAX_BATCH], made = tcm__recs_take_ht(h, &h->recs[cls], got, recs);
    if (made < got) /* no object record for the rest */
        tcm__ph_insert_free_runs_ht(h, out + made, got - made);
    if (!made) {
        *status = TCM_ST_NOMEM;
        return 0;
    }
    for (uint32_t i = 0; i < made; i++) {
        map_logged(h, out[i], TCM_SPAN_SMALL, (uint8_t)cls, recs[i]);
        tcm_span_t *sp = &h->spans[out[i]];
        sp->nfree = ci->span_objs;
        sp->scan = 0;
    }
    *status = TCM_ST_OK;
    TCM_STAT_ADD(h->meta, bytes_central_free, (uint64_t)made * ci->span_objs * ci->size);
    TCM_HT_ADD(h->cstats[cls].spans, made);
    TCM_HT_ADD(h->cstats[cls].free_objs, (uint64_t)made * ci->span_objs);
    return made;
}

/* Word w's owner word, made ready for objects of it about to be handed to
 * owner, before any of them is logged (so a recovery that redoes their
 * bits finds the word owner's or naming a tag block, and needs no new
 * block). Returns where their tags go: scratch when the word is owner's
 * alone, its tag block when other clients hold some of it too; NULL when
 * no tag block can be backed. */
static uint16_t *ready_owner_word(tcm_heap_t *h, uint32_t *ow, uint64_t held, uint16_t owner, uint16_t *scratch)
{
    uint32_t cur = *ow;
    if (cur == owner)
        return scratch;
    if (held == 0) { /* nobody holds any of the word: it is owner's */
        TCM_PERSIST_STORE(*ow, (uint32_t)owner);
        if (cur & TCM_OWNER_BLOCK)
            tcm__rec_put_ht(&h->tag_blocks, cur & ~TCM_OWNER_BLOCK);
        return scratch;
    }
    if (cur & TCM_OWNER_BLOCK)
        return tcm__tag_block(h, cur);
    /* held by another client: the tags of what it holds into a block,
     * then the word names the block */
    uint32_t b;
    if (tcm__rec_take_ht(h, &h->tag_blocks, &b) != TCM_ST_OK)
        return NULL;
    uint16_t *tags = tcm__tag_block(h, b);
    for (unsigned i = 0; i < 64; i++)
        tags[i] = (uint16_t)cur;
    TCM_PERSIST_BARRIER();
    TCM_CRASH_POINT(tag_block);
    TCM_PERSIST_STORE(*ow, b | TCM_OWNER_BLOCK);
    return tags;
}

/* The lowest k set bits of bits (k at most their number). */
static inline uint64_t lowest_bits(uint64_t bits, uint32_t k)
{
    uint64_t rest = bits;
    while (k--)
        rest &= rest - 1;
    return bits ^ rest;
}

uint32_t tcm__central_refill_ht(tcm_heap_t *h, unsigned cls, uint32_t want, uint16_t owner, uint64_t *log,
                                uint32_t *logged, int *status)
{
    const tcm_class_info_t *ci = &h->classes[cls];
    const uint64_t size = ci->size;
    const uint32_t span_objs = ci->span_objs, words = (span_objs + 63) / 64;
    const uint64_t last_valid = span_objs % 64 ? (1ull << (span_objs % 64)) - 1 : ~0ull; /* the last word's objects */
    uint32_t n = 0, fresh[TCM_MAX_BATCH], made = 0, next = 0;
    uint16_t scratch[64]; /* the tags of a word that is all owner's: not kept */
    *status = TCM_ST_OK;
    while (n < want) {
        /* new spans are filled as they are cut (fresh[next..made)), off
         * the lists: only those left with free objects go on one, after */
        uint16_t lists = h->central_nonempty[cls] & (uint16_t)~(1u << TCM_DRAIN_LIST);
        if (next >= made && !(lists & ~(1u << (TCM_CENTRAL_LISTS - 1))) &&
            h->central_nonempty[cls] >> TCM_DRAIN_LIST & 1) { /* holes in draining spans before empty spans */
            undrain_one(h, cls);
            lists = h->central_nonempty[cls] & (uint16_t)~(1u << TCM_DRAIN_LIST);
        }
        uint32_t s = next < made ? fresh[next++] : lists ? h->central[cls][__builtin_ctz(lists)] : 0;
        if (!s) {
            if (!(made = new_small_spans(h, cls, (want - n + span_objs - 1) / span_objs, fresh, status)))
                break;
            s = fresh[0];
            next = 1;
        }
        tcm_span_t *sp = &h->spans[s];
        uint64_t *map = span_map(h, sp);
        uint64_t base_off = tcm__page_off(sp->first);
        uint32_t *owners = tcm__span_owners(h, sp);
        uint32_t nfree = sp->nfree, w = sp->scan;
        for (; w < words && n < want && nfree; w++) {
            uint64_t valid = w == words - 1 ? last_valid : ~0ull;
            uint64_t free_bits = ~map[w] & valid;
            if (!free_bits)
                continue;
            /* a word all free is counted without popcount (libgcc's, a
             * call, where the build does not assume the instruction) */
            uint32_t k = free_bits == valid ? (valid == ~0ull ? 64 : span_objs % 64)
                                            : (uint32_t)__builtin_popcountll(free_bits);
            uint64_t taken = k <= want - n ? free_bits : lowest_bits(free_bits, k = want - n);
            uint16_t *tags = ready_owner_word(h, &owners[w], map[w], owner, scratch);
            if (!tags) {
                *status = TCM_ST_NOMEM;
                want = n; /* what is logged is handed out; the rest waits */
                break;
            }
            /* The word's objects are logged with plain stores, then the
             * count once for the word, then the word's bits: a bit is never
             * set for an object not logged, so a recovery finishes exactly
             * what is logged (the order per object, paid per word). */
            uint64_t word_off = base_off + (uint64_t)w * 64 * size;
            uint64_t *out = log + n;
            unsigned b0 = (unsigned)__builtin_ctzll(taken);
            uint64_t run = taken >> b0;
            if ((run & (run + 1)) == 0) { /* one run of free objects (a whole free word): straight lines */
                uint64_t run_off = word_off + b0 * size;
                uint16_t *run_tags = tags + b0;
                for (uint32_t j = 0; j < k; j++) {
                    out[j] = run_off + j * size;
                    run_tags[j] = owner;
                }
            } else {
                for (uint64_t bits = taken; bits; bits &= bits - 1) {
                    unsigned b = (unsigned)__builtin_ctzll(bits);
                    *out++ = word_off + b * size;
                    tags[b] = owner;
                }
            }
            n += k;
            TCM_PERSIST_BARRIER();
            TCM_PERSIST_STORE(*logged, n);
            TCM_PERSIST_STORE(map[w], map[w] | taken);
            TCM_ASSERT_INTERNAL(nfree >= k);
            nfree -= k;
            if (n == want || !nfree)
                break;
        }
        if (sp->on_list)
            central_move(h, cls, s, sp->nfree, nfree);
        sp->nfree = nfree;
        sp->scan = w < words ? w : words - 1; /* no free object below it */
        TCM_CRASH_POINT(refill_span);
    }
    for (uint32_t i = made; i-- > 0;) /* the lowest first */
        if (h->spans[fresh[i]].nfree)
            central_add(h, cls, fresh[i], tcm__central_list(h->spans[fresh[i]].nfree, span_objs));
    if (n)
        *status = TCM_ST_OK;
    TCM_STAT_ADD(h->meta, bytes_central_free, -(uint64_t)n * size);
    TCM_HT_ADD(h->cstats[cls].free_objs, -(uint64_t)n);
    return n;
}

/* The span and object index of the handed-out object of class cls (0:
 * any) that starts at off; the refusal a RETURN would give it. */
static int locate(const tcm_heap_t *h, unsigned cls, uint64_t off, uint32_t *span, uint32_t *idx)
{
    if (off >= h->heap_size || off < TCM_PAGE_SIZE)
        return TCM_ST_BAD_OFFSET;
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    uint32_t s = h->page_span[page];
    if (!s || s > h->npages || h->spans[s].state != TCM_SPAN_SMALL ||
        tcm__page_small_class(h->page_class[page]) != h->spans[s].cls ||
        (cls && h->spans[s].cls != cls))
        return TCM_ST_NOT_OBJECT;
    const tcm_span_t *sp = &h->spans[s];
    const tcm_class_info_t *ci = &h->classes[sp->cls];
    uint64_t rel = off - tcm__page_off(sp->first);
    uint32_t i = (uint32_t)((rel * ci->recip) >> 32);
    if ((uint64_t)i * ci->size != rel || i >= ci->span_objs)
        return TCM_ST_NOT_OBJECT;
    if (!(tcm__span_bits(h, sp)[i / 64] & (1ull << (i % 64))))
        return TCM_ST_DOUBLE_FREE;
    *span = s;
    *idx = i;
    return TCM_ST_OK;
}

int tcm__central_check_ht(const tcm_heap_t *h, unsigned cls, uint64_t off, tcm_obj_loc_t *loc)
{
    uint32_t s, i;
    int st = locate(h, cls, off, &s, &i);
    if (st == TCM_ST_OK && loc)
        *loc = (tcm_obj_loc_t){s, i};
    return st;
}

/* The SMALL span of class cls that holds heap offset off, or 0 (*why: the
 * refusal): a RETURN's span lookup, out of its loop. The object start and
 * its bit are checked by the caller, as for the objects that follow in the
 * same span. */
static __attribute__((noinline)) uint32_t span_of_class(const tcm_heap_t *h, unsigned cls, uint64_t off, int *why)
{
    if (off >= h->heap_size || off < TCM_PAGE_SIZE) {
        *why = TCM_ST_BAD_OFFSET;
        return 0;
    }
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    uint32_t s = h->page_span[page];
    if (!s || s > h->npages || h->spans[s].state != TCM_SPAN_SMALL || h->spans[s].cls != cls ||
        tcm__page_small_class(h->page_class[page]) != cls) {
        *why = TCM_ST_NOT_OBJECT;
        return 0;
    }
    return s;
}

/* A span's share of a RETURN, applied once for the run of its objects:
 * free count, scan hint (the lowest word freed from), list, and whether
 * the span is left empty. */
static void span_gets_back(tcm_heap_t *h, unsigned cls, uint32_t s, uint32_t k, uint32_t low_word, uint32_t *emptied,
                           uint32_t *nemptied)
{
    tcm_span_t *sp = &h->spans[s];
    uint32_t span_objs = h->classes[cls].span_objs;
    TCM_ASSERT(sp->nfree + k <= span_objs);
    if (low_word < sp->scan)
        sp->scan = low_word;
    central_move(h, cls, s, sp->nfree, sp->nfree + k);
    sp->nfree += k;
    if (sp->nfree == span_objs) /* reached once: a RETURN only adds */
        emptied[(*nemptied)++] = s;
    else
        maybe_drain(h, cls, s);
}

/* A RETURN's owner credits: consecutive objects of one owner as one run. */
typedef struct owner_runs {
    tcm_owner_run_t *runs;
    uint32_t n;
    uint32_t owner; /* the open run's, UINT32_MAX: none */
    uint32_t objects;
} owner_runs_t;

static inline void owner_runs_add(owner_runs_t *or, uint32_t owner, uint32_t objects)
{
    if (owner != or->owner) {
        if (or->owner != UINT32_MAX)
            or->runs[or->n++] = (tcm_owner_run_t){(uint16_t)or->owner, or->objects};
        or->owner = owner;
        or->objects = 0;
    }
    or->objects += objects;
}

/* The objects a RETURN freed from word w of a span (was: its bits as
 * read; left: without them), all logged OK before: their bits cleared in
 * one store, their owners credited from the word's owner word (the word's
 * owner, or a tag each from its tag block). */
static inline void word_gets_back(const tcm_heap_t *h, uint64_t *words, const uint32_t *owners, uint32_t w,
                                  uint64_t was, uint64_t left, uint32_t objects, owner_runs_t *or)
{
    uint64_t freed = was ^ left;
    if (!freed)
        return;
    TCM_PERSIST_STORE(words[w], left);
    uint32_t ow = owners[w];
    if (__builtin_expect(!(ow & TCM_OWNER_BLOCK), 1)) {
        owner_runs_add(or, (uint16_t)ow, objects);
        return;
    }
    const uint16_t *tags = tcm__tag_block(h, ow);
    for (uint64_t bits = freed; bits; bits &= bits - 1)
        owner_runs_add(or, tags[__builtin_ctzll(bits)], 1);
}

/* Where a RETURN's walk through its batch is. The span of the previous
 * object is looked up (and checked) once for the run of objects in it:
 * nothing in a RETURN changes a span's range, state or class (spans it
 * empties are released by the caller, after). The walk is a local that
 * never escapes and every step of it is inlined, so it lives in registers
 * and the status stores (char, which may alias anything) do not make the
 * compiler reload it. Objects freed so far are i - refused (freed below):
 * a span's and a word's count are differences of it, not counted per
 * object. */
typedef struct return_walk {
    tcm_heap_t *h;
    unsigned cls;
    uint64_t size, recip, span_len; /* span_len: a span's objects, in bytes */
    /* The span: [lo, lo + len) its objects (len: past the last object, not
     * one; 0 before the first span), its object bits and owner words; s_run
     * the span (0: none yet), span_from the objects freed before it, low the
     * lowest word freed from. */
    uint64_t lo, len;
    uint64_t *words;
    const uint32_t *owners;
    uint32_t s_run, span_from, low;
    /* The word of the previous object: its index (UINT32_MAX: none), its
     * bits as read, and those still handed out (not freed by this batch);
     * word_from the objects freed before it. */
    uint32_t cur, word_from;
    uint64_t was, left;
    owner_runs_t or;
    uint32_t *emptied, *nemptied;
} return_walk_t;

/* The objects freed from the walk's word go back (its bits cleared, its
 * owners credited); no word after. */
static inline __attribute__((always_inline)) void walk_word_done(return_walk_t *w, uint32_t freed)
{
    if (w->cur != UINT32_MAX)
        word_gets_back(w->h, w->words, w->owners, w->cur, w->was, w->left, freed - w->word_from, &w->or);
    w->cur = UINT32_MAX;
}

/* The objects freed from the walk's span go back to it. */
static inline __attribute__((always_inline)) void walk_span_done(return_walk_t *w, uint32_t freed)
{
    if (freed > w->span_from)
        span_gets_back(w->h, w->cls, w->s_run, freed - w->span_from, w->low, w->emptied, w->nemptied);
}

/* The walk leaves its word and span for the span that holds off, which it
 * looks up: the refusal if off is in none of the class (*rel: off's place
 * in the span otherwise). */
static inline __attribute__((always_inline)) int walk_to_span(return_walk_t *w, uint64_t off, uint32_t freed,
                                                               uint64_t *rel, uint64_t *nbit)
{
    if (w->cur != UINT32_MAX) {
        walk_word_done(w, freed);
        w->left = *nbit = 0; /* the fast path needs a word */
    }
    int why;
    uint32_t s = span_of_class(w->h, w->cls, off, &why);
    if (!s)
        return why;
    walk_span_done(w, freed);
    const tcm_span_t *sp = &w->h->spans[s];
    w->s_run = s;
    w->span_from = freed;
    w->low = UINT32_MAX;
    w->lo = tcm__page_off(sp->first);
    w->len = w->span_len;
    w->words = span_map(w->h, sp);
    w->owners = tcm__span_owners(w->h, sp);
    *rel = off - w->lo;
    return *rel < w->len ? TCM_ST_OK : TCM_ST_NOT_OBJECT;
}

/* An entry that is not the next object of the walk's word (*nbit, 0 once
 * the walk leaves the word): found (another span, another word), checked,
 * its bit in *b; or its refusal. */
static inline __attribute__((always_inline)) int walk_find(return_walk_t *w, uint64_t off, uint32_t freed,
                                                            uint64_t *b, uint64_t *nbit)
{
    uint64_t rel = off - w->lo;
    if (__builtin_expect(rel >= w->len, 0)) { /* another span: look it up */
        int why = walk_to_span(w, off, freed, &rel, nbit);
        if (why != TCM_ST_OK)
            return why;
    }
    uint32_t idx = (uint32_t)((rel * w->recip) >> 32);
    if (__builtin_expect((uint64_t)idx * w->size != rel, 0))
        return TCM_ST_NOT_OBJECT;
    uint32_t wi = idx / 64;
    *b = 1ull << (idx % 64);
    if (wi != w->cur) { /* another word of the span */
        walk_word_done(w, freed);
        w->cur = wi;
        w->was = w->left = *(volatile uint64_t *)&w->words[wi];
        *nbit = 0; /* the previous object's was of another word */
        w->word_from = freed;
        w->low = wi < w->low ? wi : w->low;
    }
    if (__builtin_expect(!(w->left & *b), 0)) /* also the second of an object twice in the batch */
        return TCM_ST_DOUBLE_FREE;
    return TCM_ST_OK;
}

uint32_t tcm__central_return_ht(tcm_heap_t *h, unsigned cls, const uint64_t *offs, uint32_t n, uint8_t *st,
                               tcm_owner_run_t *runs, uint32_t *nruns, uint32_t *emptied, uint32_t *nemptied)
{
    /* Each entry's status is stored before its object's bit is cleared
     * (both volatile: the compiler keeps their order), over the pending
     * marks the caller logged for the batch, so a recovery frees the
     * entries logged OK again (clearing a clear bit is a no-op) and checks
     * the pending ones, which nothing was done for: it neither misses a
     * free nor mistakes one for a double free. The bits are cleared per
     * word of the object map, once for the run of entries in that word
     * (after all their statuses): a batch frees in address order mostly. */
    *nruns = 0;
    if (cls == 0 || cls >= TCM_NCLASSES) { /* no object is of that class */
        for (uint32_t i = 0; i < n; i++)
            TCM_PERSIST_STORE(st[i], (uint8_t)TCM_ST_NOT_OBJECT);
        return n;
    }
    const tcm_class_info_t *ci = &h->classes[cls];
    const uint64_t size = ci->size;
    return_walk_t w = {.h = h, .cls = cls, .size = size, .recip = ci->recip, .span_len = (uint64_t)ci->span_objs * size,
                       .low = UINT32_MAX, .cur = UINT32_MAX, .or = {runs, 0, UINT32_MAX, 0}, .emptied = emptied,
                       .nemptied = nemptied};
    /* The previous object freed: its bit, and where the next object
     * starts. A batch frees in address order mostly: an entry that is that
     * next object, in the same word and still handed out, is freed without
     * being looked up (nothing else about it can be wrong: bits past a
     * span's last object are never set). Up or down: a thread's bin gives
     * back its top, which may be either. nbit is 0 whenever the previous
     * object freed is not of word cur (or was its first or last). */
    uint64_t nbit = 0, next = 0, prev = 0; /* the next object's bit, where it starts; the previous object */
    bool down = false;                     /* the batch goes down in address order */
    uint32_t refused = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off = offs[i], b = nbit;
        if (__builtin_expect(off != next || !(w.left & b), 0)) {
            int why = walk_find(&w, off, i - refused, &b, &nbit);
            if (why != TCM_ST_OK) {
                TCM_PERSIST_STORE(st[i], (uint8_t)why);
                refused++;
                continue;
            }
            down = off + size == prev;
        }
        TCM_PERSIST_STORE(st[i], (uint8_t)TCM_ST_OK);
        w.left ^= b;
        prev = off;
        next = down ? off - size : off + size;
        nbit = down ? b >> 1 : b << 1;
        if (i == n / 2)
            TCM_CRASH_POINT(return_half);
    }
    walk_word_done(&w, n - refused);
    walk_span_done(&w, n - refused);
    if (w.or.owner != UINT32_MAX)
        runs[w.or.n++] = (tcm_owner_run_t){(uint16_t)w.or.owner, w.or.objects};
    *nruns = w.or.n;
    uint32_t freed_objs = n - refused;
    if (freed_objs) {
        TCM_STAT_ADD(h->meta, bytes_central_free, (uint64_t)freed_objs * size);
        TCM_HT_ADD(h->cstats[cls].free_objs, freed_objs);
    }
    return refused;
}

/* k empty spans of class cls left it: its gauges, once for them. */
static void spans_left(tcm_heap_t *h, unsigned cls, uint32_t k)
{
    if (!k)
        return;
    const tcm_class_info_t *ci = &h->classes[cls];
    TCM_STAT_ADD(h->meta, bytes_central_free, -(uint64_t)k * ci->span_objs * ci->size);
    TCM_HT_ADD(h->cstats[cls].spans, -(uint64_t)k);
    TCM_HT_ADD(h->cstats[cls].free_objs, -(uint64_t)k * ci->span_objs);
}

uint32_t tcm__central_release_spans_ht(tcm_heap_t *h, const uint32_t *spans, uint32_t n)
{
    uint32_t freed[TCM_MAX_BATCH], nfreed = 0, run_from = 0;
    unsigned run_cls = 0; /* the class of freed[run_from..nfreed): one RETURN's spans are of one */
    TCM_ASSERT(n <= TCM_MAX_BATCH);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = spans[i];
        tcm_span_t *sp = &h->spans[s];
        if (sp->state != TCM_SPAN_SMALL)
            continue;
        unsigned cls = sp->cls;
        const tcm_class_info_t *ci = &h->classes[cls];
        if (sp->nfree != ci->span_objs)
            continue;
        central_remove(h, cls, s, TCM_CENTRAL_LISTS - 1);
        if (cls != run_cls) {
            spans_left(h, run_cls, nfreed - run_from);
            run_cls = cls;
            run_from = nfreed;
        }
        unmap_logged(h, s);
        freed[nfreed++] = s;
    }
    spans_left(h, run_cls, nfreed - run_from);
    /* their pages, unmapped one by one, meet the page heap together */
    tcm__ph_insert_free_runs_ht(h, freed, nfreed);
    return nfreed;
}

bool tcm__central_release_span_ht(tcm_heap_t *h, uint32_t s)
{
    return tcm__central_release_spans_ht(h, &s, 1) != 0;
}

/* Give every completely free small span back to the page heap. */
uint64_t tcm__central_drop_empty_ht(tcm_heap_t *h)
{
    uint64_t bytes = 0;
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        uint32_t s = h->central[cls][TCM_CENTRAL_LISTS - 1];
        while (s) {
            uint32_t next = h->spans[s].next, npages = h->spans[s].npages;
            if (tcm__central_release_span_ht(h, s))
                bytes += tcm__page_off(npages);
            s = next;
        }
    }
    return bytes;
}

int tcm__large_alloc_ht(tcm_heap_t *h, uint64_t npages, uint64_t align_pages, uint32_t owner, uint32_t *first)
{
    if (!align_pages)
        align_pages = 1;
    if (npages > h->npages || align_pages > h->npages)
        return TCM_ST_NOMEM;
    if (npages == 0 || (align_pages & (align_pages - 1)))
        return TCM_ST_BAD_COUNT;
    uint32_t s;
    int st = tcm__pages_alloc_ht(h, (uint32_t)npages, (uint32_t)align_pages, &s);
    if (st != TCM_ST_OK)
        return st;
    /* logged before the run is mapped: a recovery that finds the run
     * there, mapped and owner's, knows it was made */
    TCM_PERSIST_STORE(*first, h->spans[s].first);
    h->cut_zeroed = h->spans[s].zeroed != 0;
    h->spans[s].sample = 0; /* (its free run's zeroed, or a small span's scan hint) */
    map_logged(h, s, TCM_SPAN_LARGE, 0, owner);
    return TCM_ST_OK;
}

int tcm__large_map_taken_ht(tcm_heap_t *h, uint32_t s, uint32_t owner, uint32_t *first)
{
    tcm__ph_transit_end_ht(h, s);
    TCM_PERSIST_STORE(*first, h->spans[s].first); /* logged before the run is mapped, as above */
    h->cut_zeroed = h->spans[s].zeroed != 0;
    h->spans[s].sample = 0;
    map_logged(h, s, TCM_SPAN_LARGE, 0, owner);
    return TCM_ST_OK;
}

int tcm__large_check_ht(const tcm_heap_t *h, uint64_t off, uint32_t *span)
{
    if (off >= h->heap_size || off < TCM_PAGE_SIZE)
        return TCM_ST_BAD_OFFSET;
    if (off & (TCM_PAGE_SIZE - 1))
        return TCM_ST_NOT_OBJECT;
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    if (page >= h->top)
        return TCM_ST_BAD_OFFSET;
    if (h->page_class[page] == TCM_PAGE_CLASS_FREE)
        return TCM_ST_DOUBLE_FREE;
    uint32_t s = h->page_span[page];
    if (!s || h->spans[s].first != page || h->spans[s].state != TCM_SPAN_LARGE ||
        h->page_class[page] != TCM_PAGE_CLASS_LARGE)
        return TCM_ST_NOT_OBJECT;
    *span = s;
    return TCM_ST_OK;
}

int tcm__large_free_ht(tcm_heap_t *h, uint64_t off, uint64_t *bytes, uint32_t *owner)
{
    uint32_t s;
    int st = tcm__large_check_ht(h, off, &s);
    if (st != TCM_ST_OK)
        return st;
    *bytes = tcm__page_off(h->spans[s].npages);
    *owner = h->spans[s].owner;
    tcm__sample_drop_ht(h, s);
    unmap_logged(h, s);
    tcm__ph_insert_free_ht(h, s);
    return TCM_ST_OK;
}

/* Recovery: a small span's free count is what its object map says; spans
 * with free objects go on their class's list (empty ones too, as if each
 * were a span a RETURN just emptied; the decay, release or heap limit gives them back). */
uint64_t tcm__central_rebuild_ht(tcm_heap_t *h)
{
    uint64_t repairs = 0, central_free = 0;
    for (unsigned cls = 0; cls < TCM_NCLASSES; cls++) {
        memset(h->central[cls], 0, sizeof h->central[cls]);
        h->central_nonempty[cls] = 0;
        TCM_STAT_SET(h->meta, bytes_central_free, 0);
        atomic_store_explicit(&h->cstats[cls].spans, 0, memory_order_relaxed);
        atomic_store_explicit(&h->cstats[cls].free_objs, 0, memory_order_relaxed);
    }
    for (uint32_t p = 1; p < h->top;) {
        if (h->page_class[p] == TCM_PAGE_CLASS_FREE) {
            p++;
            continue;
        }
        uint32_t s = h->page_span[p];
        tcm_span_t *sp = &h->spans[s];
        p += sp->npages;
        if (sp->state != TCM_SPAN_SMALL)
            continue;
        const tcm_class_info_t *ci = &h->classes[sp->cls];
        if (tcm__span_draining(h, sp)) /* recovery set the pages back; a rebuild alone does too */
            mark_pages(h, sp, sp->cls);
        uint64_t *map = span_map(h, sp);
        uint32_t words = (ci->span_objs + 63) / 64, used = 0;
        for (uint32_t w = 0; w < words; w++) {
            uint64_t valid = (w == words - 1 && ci->span_objs % 64) ? (1ull << (ci->span_objs % 64)) - 1 : ~0ull;
            if (map[w] & ~valid) {
                map[w] &= valid; /* no object there: a bit set by nobody */
                repairs++;
            }
            used += (uint32_t)__builtin_popcountll(map[w]);
        }
        sp->nfree = ci->span_objs - used;
        sp->scan = 0;
        sp->prev = sp->next = 0;
        sp->on_list = 0;
        if (sp->nfree)
            central_add(h, sp->cls, s, tcm__central_list(sp->nfree, ci->span_objs));
        central_free += (uint64_t)sp->nfree * ci->size;
        TCM_HT_ADD(h->cstats[sp->cls].spans, 1);
        TCM_HT_ADD(h->cstats[sp->cls].free_objs, sp->nfree);
    }
    TCM_STAT_SET(h->meta, bytes_central_free, central_free);
    return repairs;
}
