/* central.c — central free lists: spans of each size class with free
 * objects, the object records (one slot per small span in its class's
 * arena of the state segment) that say which objects are handed out and to
 * whom, and page runs. Every offset from a client is checked here before it
 * changes anything. The object records, the page map of allocated spans
 * and their records (slot included) are authoritative; a span's free count and list links are
 * derived (tcm__central_rebuild_ht). Heap thread only. */
#include <stdio.h>
#include <string.h>

#include "crash.h"
#include "heap.h"
#include "log.h"
#include "prim.h"
#include "tcm_assert.h"


static uint64_t *span_map(tcm_heap_t *h, const tcm_span_t *sp)
{
    return tcm__span_bits(h, sp);
}

/* ---- object records: one slot per small span, in its class's arena ---- */

#define ARENA_PAGE 4096u

static bool bit_get(const uint64_t *bits, uint64_t i)
{
    return bits[i / 64] >> (i % 64) & 1;
}

/* Back the arena pages of a slot of ss. Spans are cut and freed over and
 * over: the pages already backed cost one look at a bitmap. */
static int slot_commit(tcm_heap_t *h, tcm_slot_set_t *ss, uint32_t slot)
{
    uint64_t lo = (uint64_t)slot * ss->slot_bytes, hi = lo + ss->slot_bytes;
    uint64_t plo = lo / ARENA_PAGE, phi = (hi - 1) / ARENA_PAGE, p = plo;
    while (p <= phi && bit_get(ss->backed, p))
        p++;
    if (p > phi)
        return 0;
    if (h->state_fd >= 0) {
        int err = tcm__commit(h->state_fd, ss->off + p * ARENA_PAGE, (phi + 1 - p) * ARENA_PAGE);
        if (err) {
            tcm__log(TCM_LOG_WARN, "fallocate(state, object records at %llu, %llu bytes) failed: %s",
                     (unsigned long long)(ss->off + p * ARENA_PAGE), (unsigned long long)((phi + 1 - p) * ARENA_PAGE),
                     strerror(-err));
            return err;
        }
    }
    for (; p <= phi; p++)
        ss->backed[p / 64] |= 1ull << (p % 64);
    return 0;
}

int tcm__slot_take_ht(tcm_heap_t *h, tcm_slot_set_t *ss, uint32_t *slot)
{
    uint32_t words = (ss->max + 63) / 64, w = ss->lowest / 64;
    while (w < words && ss->used[w] == ~0ull)
        w++;
    uint32_t i = w < words ? w * 64 + (uint32_t)__builtin_ctzll(~ss->used[w]) : ss->max;
    if (i >= ss->max) /* an arena has a slot for everything the heap can hold */
        return TCM_ST_NOMEM;
    if (slot_commit(h, ss, i) != 0)
        return TCM_ST_NOMEM;
    ss->used[i / 64] |= 1ull << (i % 64);
    ss->lowest = i + 1;
    ss->nused++;
    *slot = i;
    return TCM_ST_OK;
}

void tcm__slot_put_ht(tcm_slot_set_t *ss, uint32_t slot)
{
    TCM_ASSERT(slot < ss->max && bit_get(ss->used, slot));
    ss->used[slot / 64] &= ~(1ull << (slot % 64));
    ss->nused--;
    if (slot < ss->lowest)
        ss->lowest = slot;
    if (ss->trim_lo >= ss->trim_hi)
        ss->trim_lo = ss->trim_hi = slot;
    if (slot < ss->trim_lo)
        ss->trim_lo = slot;
    if (slot + 1 > ss->trim_hi)
        ss->trim_hi = slot + 1;
}

static tcm_slot_set_t *slot_set(tcm_heap_t *h, unsigned i) /* 1..TCM_NCLASSES: the classes, then the tag blocks */
{
    return i < TCM_NCLASSES ? &h->slots[i] : &h->tag_blocks;
}

void tcm__slots_reset_ht(tcm_heap_t *h)
{
    for (unsigned c = 1; c <= TCM_NCLASSES; c++) {
        tcm_slot_set_t *ss = slot_set(h, c);
        uint64_t pages = (uint64_t)ss->max * ss->slot_bytes / ARENA_PAGE + 1;
        memset(ss->used, 0, (ss->max + 63) / 64 * sizeof(uint64_t));
        memset(ss->backed, 0, (pages + 63) / 64 * sizeof(uint64_t));
        ss->lowest = ss->nused = 0;
        /* what the previous tcmd backed is unknown: the next trim looks at
         * the whole arena */
        ss->trim_lo = 0;
        ss->trim_hi = ss->max;
    }
}

bool tcm__slot_claim_ht(tcm_slot_set_t *ss, uint32_t slot)
{
    if (slot >= ss->max || bit_get(ss->used, slot))
        return false;
    ss->used[slot / 64] |= 1ull << (slot % 64);
    ss->nused++;
    return true;
}

uint64_t tcm__span_claim_blocks_ht(tcm_heap_t *h, tcm_span_t *sp)
{
    uint32_t *owners = tcm__span_owners(h, sp), words = (h->classes[sp->cls].span_objs + 63) / 64;
    uint64_t repairs = 0;
    for (uint32_t w = 0; w < words; w++) {
        if (!(owners[w] & TCM_OWNER_BLOCK) || tcm__slot_claim_ht(&h->tag_blocks, owners[w] & ~TCM_OWNER_BLOCK))
            continue;
        tcm__log(TCM_LOG_ERROR, "recovery: span at page %u (class %u) names tag block %u, out of range or another's; "
                 "its objects %u..%u are now owned by nobody", sp->first, sp->cls, owners[w] & ~TCM_OWNER_BLOCK,
                 w * 64, w * 64 + 63);
        owners[w] = 0;
        repairs++;
    }
    return repairs;
}

/* Whether any used slot of ss overlaps arena page p. */
static bool page_in_use(const tcm_slot_set_t *ss, uint64_t p)
{
    uint64_t sb = ss->slot_bytes;
    uint64_t first = p * ARENA_PAGE / sb, last = ((p + 1) * ARENA_PAGE - 1) / sb;
    if (last >= ss->max)
        last = ss->max - 1;
    for (uint64_t i = first; i <= last; i++) {
        if (i % 64 == 0 && i + 63 <= last) { /* a whole word at once */
            if (ss->used[i / 64])
                return true;
            i += 63;
        } else if (bit_get(ss->used, i)) {
            return true;
        }
    }
    return false;
}

static uint64_t punch(tcm_heap_t *h, tcm_slot_set_t *ss, uint64_t plo, uint64_t phi)
{
    uint64_t backed = 0;
    for (uint64_t p = plo; p < phi; p++) {
        backed += bit_get(ss->backed, p);
        ss->backed[p / 64] &= ~(1ull << (p % 64));
    }
    if (h->state_fd >= 0) {
        int err = tcm__release(h->state_fd, ss->off + plo * ARENA_PAGE, (phi - plo) * ARENA_PAGE);
        if (err) {
            tcm__log(TCM_LOG_WARN, "fallocate(PUNCH_HOLE, state, object records at %llu, %llu bytes) failed: %s",
                     (unsigned long long)(ss->off + plo * ARENA_PAGE), (unsigned long long)((phi - plo) * ARENA_PAGE),
                     strerror(-err));
            return 0;
        }
    }
    return backed * ARENA_PAGE;
}

uint64_t tcm__slots_trim_ht(tcm_heap_t *h)
{
    uint64_t bytes = 0;
    for (unsigned c = 1; c <= TCM_NCLASSES; c++) {
        tcm_slot_set_t *ss = slot_set(h, c);
        if (ss->trim_lo >= ss->trim_hi || ss->max == 0)
            continue;
        uint64_t sb = ss->slot_bytes;
        uint64_t plo = ss->trim_lo * sb / ARENA_PAGE, phi = (ss->trim_hi * sb - 1) / ARENA_PAGE + 1;
        ss->trim_lo = ss->trim_hi = 0;
        /* runs of pages no used slot lies in, one punch each */
        for (uint64_t p = plo; p < phi;) {
            if (page_in_use(ss, p)) {
                p++;
                continue;
            }
            uint64_t q = p + 1;
            while (q < phi && !page_in_use(ss, q))
                q++;
            bytes += punch(h, ss, p, q);
            p = q;
        }
    }
    return bytes;
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
 * tag, or a small span's object record (slot), taken and backed before. */
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
    TCM_CRASH_POINT("span_map");
    tcm__span_map_ht(h, s, pi->first, pi->npages, state, cls, owner);
    if (state == TCM_SPAN_SMALL) {
        /* its object record: no object handed out yet (the tags are read
         * only where a bit is set) */
        TCM_CRASH_POINT("span_slot");
        memset(span_map(h, sp), 0, h->sl.slot_bytes[cls]);
    }
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&pi->kind, TCM_PAGES_NONE, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
}

/* An allocated span goes back to the page heap, under the page intent. */
static void unmap_logged(tcm_heap_t *h, uint32_t s)
{
    tcm_page_intent_t *pi = &h->state->page;
    tcm_span_t *sp = &h->spans[s];
    bool small = sp->state == TCM_SPAN_SMALL;
    unsigned cls = sp->cls;
    uint32_t slot = sp->slot;
    pi->span = s;
    pi->first = sp->first;
    pi->npages = sp->npages;
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&pi->kind, TCM_PAGES_UNMAP, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
    tcm__span_unmap_ht(h, sp->first, sp->npages);
    TCM_CRASH_POINT("span_unmap");
    /* its object record and tag blocks are free once the span is not (a
     * recovery frees every slot no allocated span names); their pages go
     * at the next trim */
    if (small) {
        const uint32_t *owners = (const uint32_t *)(h->arena[cls] + (uint64_t)slot * h->sl.slot_bytes[cls] +
                                                    h->sl.owners_off[cls]);
        for (uint32_t w = 0; w < (h->classes[cls].span_objs + 63) / 64; w++)
            if (owners[w] & TCM_OWNER_BLOCK)
                tcm__slot_put_ht(&h->tag_blocks, owners[w] & ~TCM_OWNER_BLOCK);
        tcm__slot_put_ht(&h->slots[cls], slot);
    }
    tcm__ph_insert_free_ht(h, s);
    TCM_PERSIST_BARRIER();
    atomic_store_explicit(&pi->kind, TCM_PAGES_NONE, memory_order_relaxed);
    TCM_PERSIST_BARRIER();
}

static uint32_t new_small_span(tcm_heap_t *h, unsigned cls, int *status)
{
    const tcm_class_info_t *ci = &h->classes[cls];
    uint32_t s;
    *status = tcm__pages_alloc_ht(h, ci->span_pages, 1, &s);
    if (*status != TCM_ST_OK)
        return 0;
    uint32_t slot;
    if ((*status = tcm__slot_take_ht(h, &h->slots[cls], &slot)) != TCM_ST_OK) {
        tcm__ph_insert_free_ht(h, s);
        return 0;
    }
    map_logged(h, s, TCM_SPAN_SMALL, (uint8_t)cls, slot);
    tcm_span_t *sp = &h->spans[s];
    sp->nfree = ci->span_objs;
    sp->scan = 0;
    tcm__span_list_push(h, &h->meta->central_head[cls], s);
    TCM_STAT_ADD(h->meta, bytes_central_free, (uint64_t)ci->span_objs * ci->size);
    TCM_HT_ADD(h->cstats[cls].spans, 1);
    TCM_HT_ADD(h->cstats[cls].free_objs, ci->span_objs);
    return s;
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
            tcm__slot_put_ht(&h->tag_blocks, cur & ~TCM_OWNER_BLOCK);
        return scratch;
    }
    if (cur & TCM_OWNER_BLOCK)
        return tcm__tag_block(h, cur);
    /* held by another client: the tags of what it holds into a block,
     * then the word names the block */
    uint32_t b;
    if (tcm__slot_take_ht(h, &h->tag_blocks, &b) != TCM_ST_OK)
        return NULL;
    uint16_t *tags = tcm__tag_block(h, b);
    for (unsigned i = 0; i < 64; i++)
        tags[i] = (uint16_t)cur;
    TCM_PERSIST_BARRIER();
    TCM_CRASH_POINT("tag_block");
    TCM_PERSIST_STORE(*ow, b | TCM_OWNER_BLOCK);
    return tags;
}

uint32_t tcm__central_refill_ht(tcm_heap_t *h, unsigned cls, uint32_t want, uint16_t owner, uint64_t *log,
                                uint32_t *logged, int *status)
{
    const tcm_class_info_t *ci = &h->classes[cls];
    uint32_t n = 0;
    uint16_t scratch[64]; /* the tags of a word that is all owner's: not kept */
    *status = TCM_ST_OK;
    while (n < want) {
        uint32_t s = h->meta->central_head[cls];
        if (!s && !(s = new_small_span(h, cls, status)))
            break;
        tcm_span_t *sp = &h->spans[s];
        uint64_t *map = span_map(h, sp);
        uint32_t words = (ci->span_objs + 63) / 64;
        uint64_t base_off = tcm__page_off(sp->first);
        uint32_t *owners = tcm__span_owners(h, sp);
        for (uint32_t w = sp->scan; w < words && n < want && sp->nfree; w++) {
            uint64_t valid = (w == words - 1 && ci->span_objs % 64) ? (1ull << (ci->span_objs % 64)) - 1 : ~0ull;
            uint64_t free_bits = ~map[w] & valid, taken = 0;
            if (!free_bits) {
                sp->scan = w;
                continue;
            }
            uint16_t *tags = ready_owner_word(h, &owners[w], map[w], owner, scratch);
            if (!tags) {
                *status = TCM_ST_NOMEM;
                want = n; /* what is logged is handed out; the rest waits */
                break;
            }
            uint64_t word_off = base_off + (uint64_t)w * 64 * ci->size;
            while (free_bits && n < want) {
                unsigned b = (unsigned)__builtin_ctzll(free_bits);
                free_bits &= free_bits - 1;
                taken |= 1ull << b;
                tags[b] = owner;
                /* logged first: a recovery finishes what is logged */
                TCM_PERSIST_STORE(log[n], word_off + (uint64_t)b * ci->size);
                TCM_PERSIST_STORE(*logged, ++n);
            }
            /* the word's bits once its objects are logged (the same order
             * as one by one: a bit is never set for an object not logged) */
            TCM_PERSIST_STORE(map[w], map[w] | taken);
            uint32_t k = (uint32_t)__builtin_popcountll(taken);
            TCM_ASSERT_INTERNAL(sp->nfree >= k);
            sp->nfree -= k;
            sp->scan = w;
        }
        if (sp->nfree == 0)
            tcm__span_list_remove(h, &h->meta->central_head[cls], s);
        TCM_CRASH_POINT("refill_span");
    }
    if (n)
        *status = TCM_ST_OK;
    TCM_STAT_ADD(h->meta, bytes_central_free, -(uint64_t)n * ci->size);
    TCM_HT_ADD(h->cstats[cls].free_objs, -(uint64_t)n);
    return n;
}

/* The span and object index of the handed-out object that starts at off. */
static int locate(const tcm_heap_t *h, uint64_t off, uint32_t *span, uint32_t *idx)
{
    if (off >= h->heap_size || off < TCM_PAGE_SIZE)
        return TCM_ST_BAD_OFFSET;
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    uint32_t s = h->page_span[page];
    if (!s || s > h->npages || h->spans[s].state != TCM_SPAN_SMALL || h->page_class[page] != h->spans[s].cls)
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
    int st = locate(h, off, &s, &i);
    if (st == TCM_ST_OK && cls && h->spans[s].cls != cls)
        return TCM_ST_NOT_OBJECT;
    if (st == TCM_ST_OK && loc)
        *loc = (tcm_obj_loc_t){s, i};
    return st;
}

/* The object-map and list part of a free; the caller counts the bytes. */
static inline uint16_t free_one(tcm_heap_t *h, uint32_t s, uint32_t i, uint32_t *emptied)
{
    tcm_span_t *sp = &h->spans[s];
    const tcm_class_info_t *ci = &h->classes[sp->cls];
    TCM_ASSERT(sp->nfree < ci->span_objs);
    uint64_t *word = &span_map(h, sp)[i / 64];
    TCM_PERSIST_STORE(*word, *word & ~(1ull << (i % 64)));
    if (i / 64 < sp->scan)
        sp->scan = i / 64;
    if (sp->nfree++ == 0)
        tcm__span_list_push(h, &h->meta->central_head[sp->cls], s);
    *emptied = sp->nfree == ci->span_objs ? s : 0;
    return tcm__owner_of(h, tcm__span_owners(h, sp), i);
}

uint16_t tcm__central_free_ht(tcm_heap_t *h, tcm_obj_loc_t loc, uint32_t *emptied)
{
    unsigned cls = h->spans[loc.span].cls;
    TCM_STAT_ADD(h->meta, bytes_central_free, h->classes[cls].size);
    TCM_HT_ADD(h->cstats[cls].free_objs, 1);
    return free_one(h, loc.span, loc.idx, emptied);
}

/* The span a batch's objects mostly share: looked up (and checked) once for
 * a run of objects in it. Nothing in a RETURN changes a span's range,
 * state or class (spans it empties are released by the caller, after). */
typedef struct span_cache {
    uint64_t lo, hi; /* heap offsets of the span's pages; lo == hi: none */
    uint32_t s;
    tcm_span_t *sp;
    uint64_t *map;     /* its object map */
    uint32_t *owners;  /* its owner words */
} span_cache_t;

/* Like locate() for an object of class ci, with the span of the previous
 * object reused when off is in it. */
static int locate_cached(tcm_heap_t *h, span_cache_t *sc, unsigned cls, const tcm_class_info_t *ci, uint64_t off,
                         uint32_t *idx)
{
    if (off < sc->lo || off >= sc->hi) {
        uint32_t s, i;
        int st = locate(h, off, &s, &i);
        if (st == TCM_ST_OK && h->spans[s].cls != cls)
            return TCM_ST_NOT_OBJECT;
        if (st != TCM_ST_OK)
            return st;
        tcm_span_t *sp = &h->spans[s];
        *sc = (span_cache_t){tcm__page_off(sp->first), tcm__page_off(sp->first + sp->npages), s, sp,
                             span_map(h, sp), tcm__span_owners(h, sp)};
        *idx = i;
        return TCM_ST_OK;
    }
    uint64_t rel = off - sc->lo;
    uint32_t i = (uint32_t)((rel * ci->recip) >> 32);
    if ((uint64_t)i * ci->size != rel || i >= ci->span_objs)
        return TCM_ST_NOT_OBJECT;
    if (!(sc->map[i / 64] & (1ull << (i % 64))))
        return TCM_ST_DOUBLE_FREE;
    *idx = i;
    return TCM_ST_OK;
}

uint32_t tcm__central_return_ht(tcm_heap_t *h, unsigned cls, const uint64_t *offs, uint32_t n, uint8_t *st,
                               uint32_t *applied, uint16_t *owners, uint32_t *emptied, uint32_t *nemptied)
{
    if (cls == 0 || cls >= TCM_NCLASSES) { /* no object is of that class */
        for (uint32_t i = 0; i < n; i++) {
            TCM_PERSIST_STORE(st[i], (uint8_t)TCM_ST_NOT_OBJECT);
            TCM_PERSIST_STORE(*applied, i + 1);
        }
        return n;
    }
    const tcm_class_info_t *ci = &h->classes[cls];
    uint32_t refused = 0;
    span_cache_t sc = {0};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t idx;
        int r = locate_cached(h, &sc, cls, ci, offs[i], &idx);
        /* logged before the object is freed: a recovery neither misses this
         * free nor mistakes it for a double free */
        TCM_PERSIST_STORE(st[i], (uint8_t)r);
        TCM_PERSIST_STORE(*applied, i + 1);
        if (r != TCM_ST_OK) {
            refused++;
            continue;
        }
        /* free_one, with the span's parts at hand */
        tcm_span_t *sp = sc.sp;
        TCM_ASSERT(sp->nfree < ci->span_objs);
        uint64_t *word = &sc.map[idx / 64];
        TCM_PERSIST_STORE(*word, *word & ~(1ull << (idx % 64)));
        if (idx / 64 < sp->scan)
            sp->scan = idx / 64;
        if (sp->nfree++ == 0)
            tcm__span_list_push(h, &h->meta->central_head[cls], sc.s);
        if (sp->nfree == ci->span_objs)
            emptied[(*nemptied)++] = sc.s;
        owners[i] = tcm__owner_of(h, sc.owners, idx);
        if (i == n / 2)
            TCM_CRASH_POINT("return_half");
    }
    uint32_t freed = n - refused;
    if (freed) {
        TCM_STAT_ADD(h->meta, bytes_central_free, (uint64_t)freed * ci->size);
        TCM_HT_ADD(h->cstats[cls].free_objs, freed);
    }
    return refused;
}

bool tcm__central_release_span_ht(tcm_heap_t *h, uint32_t s, bool keep_last)
{
    tcm_span_t *sp = &h->spans[s];
    if (sp->state != TCM_SPAN_SMALL)
        return false;
    unsigned cls = sp->cls;
    const tcm_class_info_t *ci = &h->classes[cls];
    if (sp->nfree != ci->span_objs)
        return false;
    /* Keep one empty span per class so a class that churns around a span
     * boundary does not cut and free a span on every batch. */
    if (keep_last && h->meta->central_head[cls] == s && sp->next == 0)
        return false;
    tcm__span_list_remove(h, &h->meta->central_head[cls], s);
    TCM_STAT_ADD(h->meta, bytes_central_free, -(uint64_t)ci->span_objs * ci->size);
    TCM_HT_ADD(h->cstats[cls].spans, -1);
    TCM_HT_ADD(h->cstats[cls].free_objs, -(uint64_t)ci->span_objs);
    unmap_logged(h, s);
    return true;
}

/* Give every completely free small span back to the page heap. */
uint64_t tcm__central_drop_empty_ht(tcm_heap_t *h)
{
    uint64_t bytes = 0;
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        uint32_t s = h->meta->central_head[cls];
        while (s) {
            uint32_t next = h->spans[s].next, npages = h->spans[s].npages;
            if (tcm__central_release_span_ht(h, s, false))
                bytes += tcm__page_off(npages);
            s = next;
        }
    }
    return bytes;
}

int tcm__large_alloc_ht(tcm_heap_t *h, uint64_t npages, uint64_t align_pages, uint32_t owner,
                        uint64_t *off)
{
    if (npages == 0 || npages > h->npages || align_pages == 0 || align_pages > h->npages ||
        (align_pages & (align_pages - 1)))
        return npages > h->npages ? TCM_ST_NOMEM : TCM_ST_BAD_COUNT;
    uint32_t s;
    int st = tcm__pages_alloc_ht(h, (uint32_t)npages, (uint32_t)align_pages, &s);
    if (st != TCM_ST_OK)
        return st;
    map_logged(h, s, TCM_SPAN_LARGE, 0, owner);
    *off = tcm__page_off(h->spans[s].first);
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
    unmap_logged(h, s);
    return TCM_ST_OK;
}

/* Recovery: a small span's free count is what its object map says; spans
 * with free objects go on their class's list (empty ones too, as if each
 * were its class's kept span; the first RETURN or release trims them). */
uint64_t tcm__central_rebuild_ht(tcm_heap_t *h)
{
    uint64_t repairs = 0, central_free = 0;
    for (unsigned cls = 0; cls < TCM_NCLASSES; cls++) {
        h->meta->central_head[cls] = 0;
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
            tcm__span_list_push(h, &h->meta->central_head[sp->cls], s);
        central_free += (uint64_t)sp->nfree * ci->size;
        TCM_HT_ADD(h->cstats[sp->cls].spans, 1);
        TCM_HT_ADD(h->cstats[sp->cls].free_objs, sp->nfree);
    }
    TCM_STAT_SET(h->meta, bytes_central_free, central_free);
    return repairs;
}
