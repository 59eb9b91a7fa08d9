/* pageheap.c — the page heap: free runs of pages, backed or released
 * (punched out of tmpfs), split on allocation, coalesced with free
 * neighbours in the same state on release, cut from backed runs first,
 * committed (fallocate) before they are handed out and punched when the
 * decay says so. Heap thread only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objrec.h"
#include "crash.h"
#include "heap.h"
#include "pageheap.h"
#include "tcm_assert.h"
#include "log.h"
#include "prim.h"


uint32_t tcm__span_new_ht(tcm_heap_t *h)
{
    uint32_t s = h->unused_spans;
    if (s) {
        h->unused_spans = h->spans[s].next;
    } else {
        /* a heap of n pages never has more than n spans */
        s = h->next_span_record++;
    }
    memset(&h->spans[s], 0, sizeof h->spans[s]);
    return s;
}

void tcm__span_delete_ht(tcm_heap_t *h, uint32_t s)
{
    memset(&h->spans[s], 0, sizeof h->spans[s]);
    h->spans[s].next = h->unused_spans;
    h->unused_spans = s;
}

void tcm__span_list_push(tcm_heap_t *h, uint32_t *head, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    sp->prev = 0;
    sp->next = *head;
    if (*head)
        h->spans[*head].prev = s;
    *head = s;
    sp->on_list = 1;
}

void tcm__span_list_remove(tcm_heap_t *h, uint32_t *head, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    if (sp->prev)
        h->spans[sp->prev].next = sp->next;
    else
        *head = sp->next;
    if (sp->next)
        h->spans[sp->next].prev = sp->prev;
    sp->prev = sp->next = 0;
    sp->on_list = 0;
}

static unsigned list_index(uint32_t npages)
{
    return npages <= TCM_PH_NLISTS ? npages : 0;
}

/* The sets of free lists. A backed run inside a huge range that is not the
 * whole range is on the huge lists: cuts take from them first (small
 * spans packed into the large pages there are), and only pressure punches
 * them (a 4 KiB hole splits the large page). A run never crosses the edge
 * of a huge range (huge_edge), so one inside is within one range. */
enum { TCM_SET_RELEASED = 0, TCM_SET_BACKED = 1, TCM_SET_HUGE = 2 };

static unsigned set_of(const tcm_heap_t *h, const tcm_span_t *sp)
{
    if (!sp->committed)
        return TCM_SET_RELEASED;
    return tcm__huge_at(h, sp->first) && sp->npages < TCM_HUGE_PAGES ? TCM_SET_HUGE : TCM_SET_BACKED;
}

/* Page p starts a huge range, and it or the range before is kept whole:
 * free runs do not merge across it. */
static bool huge_edge(const tcm_heap_t *h, uint32_t p)
{
    return p % TCM_HUGE_PAGES == 0 && p && (tcm__huge_at(h, p) || tcm__huge_at(h, p - 1));
}

/* Backed free pages a release may punch: not those on the huge lists, but
 * under pressure. */
static uint64_t punchable_pages(const tcm_heap_t *h)
{
    return h->free_committed_pages - (h->punch_split ? 0 : h->huge_free_pages);
}

static void free_insert(tcm_heap_t *h, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    TCM_ASSERT(sp->npages >= 1 && (uint64_t)sp->first + sp->npages <= h->top);
    TCM_ASSERT_INTERNAL(h->page_class[sp->first] == TCM_PAGE_CLASS_FREE &&
                        h->page_class[sp->first + sp->npages - 1] == TCM_PAGE_CLASS_FREE);
    unsigned li = list_index(sp->npages), c = set_of(h, sp);
    sp->state = TCM_SPAN_FREE;
    sp->cls = 0;
    h->page_span[sp->first] = s;
    h->page_span[sp->first + sp->npages - 1] = s;
    tcm__span_list_push(h, &h->free_lists[c][li], s);
    h->nonempty[c][li / 64] |= 1ull << (li % 64);
    h->free_pages += sp->npages;
    if (c)
        h->free_committed_pages += sp->npages;
    if (c == TCM_SET_HUGE) {
        h->huge_free_pages += sp->npages;
        h->huge_free[sp->first / TCM_HUGE_PAGES] += (uint16_t)sp->npages;
    }
}

static void free_remove(tcm_heap_t *h, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    unsigned li = list_index(sp->npages), c = set_of(h, sp);
    tcm__span_list_remove(h, &h->free_lists[c][li], s);
    if (!h->free_lists[c][li])
        h->nonempty[c][li / 64] &= ~(1ull << (li % 64));
    h->free_pages -= sp->npages;
    if (c)
        h->free_committed_pages -= sp->npages;
    if (c == TCM_SET_HUGE) {
        uint32_t r = sp->first / TCM_HUGE_PAGES;
        h->huge_free_pages -= sp->npages;
        h->huge_free[r] -= (uint16_t)sp->npages;
        if (h->huge_free[r] < h->huge_low[r])
            h->huge_low[r] = h->huge_free[r];
    }
}

/* At the end of each page-heap operation (not inside one: a split takes a
 * whole run off its list before putting the rest back) the page cache's
 * low-water mark for the decay window. */
static void note_cache_low(tcm_heap_t *h)
{
    uint64_t cache = h->free_committed_pages - h->huge_free_pages;
    if (cache < h->cache_low_pages)
        h->cache_low_pages = cache;
}

static void publish_free_stats(tcm_heap_t *h)
{
    note_cache_low(h);
    TCM_STAT_SET(h->meta, bytes_pageheap_free, h->free_pages * TCM_PAGE_SIZE);
}

/* The huge ranges with a page below top: the counts of the ranges above
 * are 0 (no free run was ever there) and stay untouched in the private
 * map: two 16-bit counts a 2 MiB range, so two pages for every 4 GiB the
 * heap reaches, where clearing them all wrote 32 pages of a drop-in
 * process's memory (its default reservation) before its first malloc
 * returned. */
static uint32_t ranges_below_top(const tcm_heap_t *h)
{
    uint64_t r = ((uint64_t)h->top + TCM_HUGE_PAGES - 1) / TCM_HUGE_PAGES;
    return r < h->nranges ? (uint32_t)r : h->nranges;
}

void tcm__ph_init(tcm_heap_t *h)
{
    memset(h->free_lists, 0, sizeof h->free_lists);
    memset(h->nonempty, 0, sizeof h->nonempty);
    memset(h->huge_free, 0, ranges_below_top(h) * sizeof h->huge_free[0]); /* (top: the last heap's, if any) */
    memset(h->huge_low, 0, ranges_below_top(h) * sizeof h->huge_low[0]);
    h->top = 1; /* page 0 is the doorbell page */
    h->unused_spans = 0;
    h->next_span_record = 1;
    h->free_pages = h->free_committed_pages = h->huge_free_pages = 0;
    h->transit_pages = 0;
    h->punch_first = h->punch_done = 0;
}

static void insert_coalesced(tcm_heap_t *h, uint32_t s);
static uint64_t release_backed(tcm_heap_t *h, uint64_t keep_bytes);

/* Free runs merged into one at first, npages long: the released pass's
 * cursor (tcm__ph_release_step_ht) always names the start of a run, so a
 * start merged away moves it back to the merged run's, which it punches
 * from its beginning again (a punch of a hole costs little). */
static void cursor_merged(tcm_heap_t *h, uint32_t first, uint32_t npages)
{
    if (h->punch_first > first && h->punch_first < first + npages) {
        h->punch_first = first;
        h->punch_done = 0;
    }
}

/* Back the metadata that describes heap pages [from, to) -- page class,
 * page span and the span records, of which there are never more than
 * pages below top -- before those pages are used. */
static int commit_meta(tcm_heap_t *h, uint32_t from, uint32_t to)
{
    if (h->meta_fd < 0)
        return 0;
    const tcm_meta_layout_t *l = &h->ml;
    struct { uint64_t off, elem; } parts[] = {
        {l->off_page_class, 1}, {l->off_page_span, sizeof(uint32_t)}, {l->off_spans, sizeof(tcm_span_t)}};
    for (unsigned i = 0; i < 3; i++) {
        uint64_t lo = parts[i].off + from * parts[i].elem, hi = parts[i].off + ((uint64_t)to + 1) * parts[i].elem;
        lo &= ~(uint64_t)4095;
        int err = tcm__commit(h->meta_fd, lo, hi - lo);
        if (err) {
            tcm__log(TCM_LOG_WARN, "fallocate(metadata, %llu bytes) failed: %s", (unsigned long long)(hi - lo),
                     strerror(-err));
            return err;
        }
    }
    return 0;
}

/* In one set of lists (backed or released): first fit over the exact
 * lists, then best fit over the long runs; only runs that end below the
 * heap limit. */
static uint32_t find_free_in(tcm_heap_t *h, unsigned c, uint32_t npages, uint64_t limit_pages)
{
    if (npages <= TCM_PH_NLISTS) {
        for (unsigned w = npages / 64; w <= TCM_PH_NLISTS / 64; w++) {
            uint64_t bits = h->nonempty[c][w];
            if (w == npages / 64)
                bits &= ~0ull << (npages % 64);
            while (bits) {
                unsigned li = w * 64 + (unsigned)__builtin_ctzll(bits);
                bits &= bits - 1;
                for (uint32_t s = h->free_lists[c][li]; s; s = h->spans[s].next)
                    if ((uint64_t)h->spans[s].first + npages <= limit_pages)
                        return s;
            }
        }
    }
    uint32_t best = 0;
    for (uint32_t s = h->free_lists[c][0]; s; s = h->spans[s].next) {
        tcm_span_t *sp = &h->spans[s];
        if (sp->npages >= npages && (uint64_t)sp->first + npages <= limit_pages &&
            (!best || sp->npages < h->spans[best].npages ||
             (sp->npages == h->spans[best].npages && sp->first < h->spans[best].first)))
            best = s;
    }
    return best;
}

/* Backed pages first: a cut from them needs no new memory, and what the
 * heap keeps backed is what it reuses (larson between two processes: the
 * runs it emptied were merged into released neighbours and lost their
 * flag, so cuts took released pages while freed ones waited for the
 * decay step, which punched them; ~25% less punched and faulted in again).
 * Of those, the ones in huge ranges first: what is cut there lies in a
 * large page already, and the ranges that are not huge empty out. */
static uint32_t find_free(tcm_heap_t *h, uint32_t npages, uint64_t limit_pages)
{
    uint32_t s = npages < TCM_HUGE_PAGES ? find_free_in(h, TCM_SET_HUGE, npages, limit_pages) : 0;
    if (!s)
        s = find_free_in(h, TCM_SET_BACKED, npages, limit_pages);
    return s ? s : find_free_in(h, TCM_SET_RELEASED, npages, limit_pages);
}

/* Cut [first, first + n) off span s (not on any list); the rest goes back
 * to the free lists. */
static void split_front(tcm_heap_t *h, uint32_t s, uint32_t n)
{
    tcm_span_t *sp = &h->spans[s];
    if (sp->npages == n)
        return;
    uint32_t r = tcm__span_new_ht(h);
    sp = &h->spans[s];
    tcm_span_t *rp = &h->spans[r];
    rp->first = sp->first + n;
    rp->npages = sp->npages - n;
    rp->committed = sp->committed;
    rp->zeroed = sp->zeroed;
    sp->npages = n;
    TCM_CRASH_POINT(split);
    insert_coalesced(h, r);
}

static uint64_t limit_pages_of(const tcm_heap_t *h)
{
    uint64_t limit_pages = atomic_load_explicit(&h->meta->config.heap_limit, memory_order_relaxed) >> TCM_PAGE_SHIFT;
    return limit_pages > h->npages ? h->npages : limit_pages;
}

/* Up to max_units runs of unit pages as one run in transit (state UNUSED,
 * on no list, *units of them): from the free run a single one would be
 * cut from (first fit), as many as it holds below the heap limit, or else
 * above top. 0 when there is no room. */
static uint32_t take_run(tcm_heap_t *h, uint32_t unit, uint32_t max_units, uint64_t limit_pages, uint32_t *units)
{
    uint64_t room = limit_pages > h->top ? limit_pages - h->top : 0; /* above top */
    uint32_t s = find_free(h, unit, limit_pages);
    if (!s && room < unit && h->free_committed_pages) {
        /* at the limit: backed runs punched join their released
         * neighbours, which may make the run that fits (pressure: huge
         * ranges too) */
        h->punch_split = true;
        TCM_STAT_ADD(h->meta, bytes_released, release_backed(h, 0));
        h->punch_split = false;
        s = find_free(h, unit, limit_pages);
    }
    if (s) {
        free_remove(h, s);
        h->spans[s].state = TCM_SPAN_UNUSED; /* in transit: never merged into */
        room = limit_pages - h->spans[s].first;
        if (room > h->spans[s].npages)
            room = h->spans[s].npages;
    } else if (room < unit) {
        return 0;
    }
    uint32_t k = (uint32_t)(room / unit) < max_units ? (uint32_t)(room / unit) : max_units;
    if (!s) {
        uint32_t want = k * unit;
        if (commit_meta(h, h->top, h->top + want) != 0)
            return 0;
        s = tcm__span_new_ht(h);
        h->spans[s].first = h->top;
        h->spans[s].npages = want;
        h->spans[s].committed = 0;
        h->spans[s].zeroed = 1; /* never handed out */
        h->top += want;
        /* after commit_meta: pages below top have backed metadata */
        atomic_store_explicit(&h->state->top, h->top, memory_order_relaxed);
        TCM_STAT_SET(h->meta, bytes_top, (uint64_t)h->top * TCM_PAGE_SIZE);
    }
    *units = k;
    return s;
}

/* A page run an allocation took: the decay keeps count of the long ones
 * (decay.c, reuse_reserve). Not a REFILL's spans, which are cut as one run
 * too (tcm__ph_alloc_runs_ht) and would count as long. */
static void note_cut(tcm_heap_t *h, uint32_t npages)
{
    if (npages > TCM_PH_NLISTS)
        h->long_cut_pages += npages;
}

/* Back the pages of run s (in transit) unless they are already. */
static int commit_run(tcm_heap_t *h, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    if (sp->committed)
        return 0;
    int err = h->anon ? 0 : tcm__commit(h->heap_fd, tcm__page_off(sp->first), tcm__page_off(sp->npages));
    if (err) {
        tcm__log(TCM_LOG_WARN, "fallocate(heap, %u pages at page %u) failed: %s", sp->npages, sp->first,
                 strerror(-err));
        return err;
    }
    sp->committed = 1;
    return 0;
}

/* The run of npages (aligned) an allocation takes, in transit, not
 * committed unless it came from a backed run. */
static int take_aligned(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *out)
{
    if (npages == 0 || align_pages == 0)
        return TCM_ST_BAD_COUNT;
    uint64_t limit_pages = limit_pages_of(h);
    uint64_t want = (uint64_t)npages + align_pages - 1;
    if (want > h->npages)
        return TCM_ST_NOMEM;
    h->last_change_ns = tcm__now_ns();

    uint32_t units;
    uint32_t s = take_run(h, (uint32_t)want, 1, limit_pages, &units);
    if (!s)
        return TCM_ST_NOMEM;

    if (align_pages > 1) {
        uint64_t addr = h->meta->base + tcm__page_off(h->spans[s].first);
        uint64_t align = (uint64_t)align_pages << TCM_PAGE_SHIFT;
        uint32_t lead = (uint32_t)(((align - addr % align) % align) >> TCM_PAGE_SHIFT);
        if (lead) {
            /* give the leading pages back as their own free run */
            uint32_t l = s;
            split_front(h, l, lead); /* l keeps the lead, the rest goes on a list */
            s = h->page_span[h->spans[l].first + lead];
            free_remove(h, s);
            h->spans[s].state = TCM_SPAN_UNUSED;
            insert_coalesced(h, l);
        }
    }
    split_front(h, s, npages);
    *out = s;
    return TCM_ST_OK;
}

int tcm__ph_alloc_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *out)
{
    uint32_t s;
    int st = take_aligned(h, npages, align_pages, &s);
    if (st != TCM_ST_OK)
        return st;
    if (commit_run(h, s) != 0) {
        insert_coalesced(h, s);
        publish_free_stats(h);
        return TCM_ST_NOMEM;
    }
    publish_free_stats(h);
    TCM_STAT_ADD(h->meta, bytes_spans, tcm__page_off(h->spans[s].npages));
    note_cut(h, h->spans[s].npages);
    *out = s;
    return TCM_ST_OK;
}

int tcm__ph_take_ht(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *out)
{
    uint32_t s;
    int st = take_aligned(h, npages, align_pages, &s);
    if (st != TCM_ST_OK)
        return st;
    tcm_span_t *sp = &h->spans[s];
    /* both ends name it, so that whatever looks a page's run up (the
     * in-use end, the release cursor, a neighbour's merge) finds a run
     * that is neither free nor lost (a run cut above top has no entry yet) */
    h->page_span[sp->first] = s;
    h->page_span[sp->first + sp->npages - 1] = s;
    h->transit_pages += sp->npages;
    publish_free_stats(h);
    *out = s;
    return TCM_ST_OK;
}

int tcm__ph_commit_step_ht(tcm_heap_t *h, uint32_t s, uint32_t *done, uint32_t max_pages)
{
    tcm_span_t *sp = &h->spans[s];
    TCM_ASSERT(sp->state == TCM_SPAN_UNUSED && *done <= sp->npages);
    if (*done == 0)
        note_cut(h, sp->npages);
    if (sp->committed) {
        *done = sp->npages;
        return 0;
    }
    uint32_t n = sp->npages - *done < max_pages ? sp->npages - *done : max_pages;
    int err = h->anon ? 0 : tcm__commit(h->heap_fd, tcm__page_off(sp->first + *done), tcm__page_off(n));
    if (err) {
        tcm__log(TCM_LOG_WARN, "fallocate(heap, %u pages at page %u) failed: %s", n, sp->first + *done,
                 strerror(-err));
        return err;
    }
    *done += n;
    if (*done == sp->npages)
        sp->committed = 1;
    return 0;
}

void tcm__ph_put_back_ht(tcm_heap_t *h, uint32_t s, uint32_t done)
{
    tcm_span_t *sp = &h->spans[s];
    TCM_ASSERT(sp->state == TCM_SPAN_UNUSED && h->transit_pages >= sp->npages);
    h->transit_pages -= sp->npages;
    if (sp->committed || done == 0 || done >= sp->npages) {
        sp->committed = sp->committed || done >= sp->npages;
    } else {
        /* the pages backed so far go back as a backed run, the rest as a
         * released one: what is free and backed stays known exactly */
        sp->committed = 0;
        split_front(h, s, done);
        sp = &h->spans[s];
        sp->committed = 1;
    }
    insert_coalesced(h, s);
    publish_free_stats(h);
}

void tcm__ph_transit_end_ht(tcm_heap_t *h, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    TCM_ASSERT(sp->state == TCM_SPAN_UNUSED && sp->committed && h->transit_pages >= sp->npages);
    h->transit_pages -= sp->npages;
    TCM_STAT_ADD(h->meta, bytes_spans, tcm__page_off(sp->npages));
}

int tcm__ph_alloc_runs_ht(tcm_heap_t *h, uint32_t npages, uint32_t max, uint32_t *out, uint32_t *got)
{
    if (npages == 0 || max == 0 || npages > h->npages)
        return npages && max ? TCM_ST_NOMEM : TCM_ST_BAD_COUNT;
    h->last_change_ns = tcm__now_ns();
    uint32_t k;
    uint32_t s = take_run(h, npages, max, limit_pages_of(h), &k);
    if (!s)
        return TCM_ST_NOMEM;
    split_front(h, s, k * npages);
    int err = commit_run(h, s);
    if (err && k > 1) { /* a nearly full /dev/shm may still back one */
        split_front(h, s, npages);
        k = 1;
        err = commit_run(h, s);
    }
    if (err) {
        insert_coalesced(h, s);
        publish_free_stats(h);
        return TCM_ST_NOMEM;
    }
    /* carved into k records of npages, in address order (free runs'
     * records are derived: a crash before their pages are mapped leaves
     * those pages free) */
    uint32_t first = h->spans[s].first;
    h->spans[s].npages = npages;
    out[0] = s;
    for (uint32_t i = 1; i < k; i++) {
        uint32_t r = tcm__span_new_ht(h);
        h->spans[r].first = first + i * npages;
        h->spans[r].npages = npages;
        h->spans[r].committed = 1;
        out[i] = r;
    }
    publish_free_stats(h);
    TCM_STAT_ADD(h->meta, bytes_spans, tcm__page_off(k * npages));
    *got = k;
    return TCM_ST_OK;
}

void tcm__span_map_ht(tcm_heap_t *h, uint32_t s, uint32_t first, uint32_t npages, uint8_t state,
                      uint8_t cls, uint32_t owner)
{
    tcm_span_t *sp = &h->spans[s];
    sp->first = first;
    sp->npages = npages;
    sp->state = state;
    sp->cls = cls;
    sp->owner = owner;
    uint8_t page_class = state == TCM_SPAN_LARGE ? TCM_PAGE_CLASS_LARGE : cls;
    /* a loop per array, through locals: a store to the byte array may
     * alias h itself, and in one loop the compiler reloaded both pointers
     * per page (7 instructions a page where these fill vectors) */
    uint32_t *span_of = h->page_span + first;
    for (uint32_t i = 0; i < npages; i++)
        span_of[i] = s;
    memset(h->page_class + first, page_class, npages);
}

void tcm__span_unmap_ht(tcm_heap_t *h, uint32_t first, uint32_t npages)
{
    memset(h->page_class + first, TCM_PAGE_CLASS_FREE, npages);
    memset(h->page_span + first, 0, (size_t)npages * sizeof h->page_span[0]);
}

/* Put free span s on the free lists, merged with its free neighbours in
 * the same state (backed or released); cut at the edges of huge ranges
 * first (a page run freed across one: no free run crosses it). */
static void insert_merged(tcm_heap_t *h, uint32_t s);

static void insert_coalesced(tcm_heap_t *h, uint32_t s)
{
    for (uint32_t e = (h->spans[s].first / TCM_HUGE_PAGES + 1) * TCM_HUGE_PAGES;
         e < h->spans[s].first + h->spans[s].npages; e += TCM_HUGE_PAGES)
        if (huge_edge(h, e)) {
            uint32_t r = tcm__span_new_ht(h);
            tcm_span_t *sp = &h->spans[s];
            h->spans[r].first = e;
            h->spans[r].npages = sp->first + sp->npages - e;
            h->spans[r].committed = sp->committed;
            h->spans[r].zeroed = sp->zeroed;
            sp->npages = e - sp->first;
            insert_merged(h, s);
            s = r;
        }
    insert_merged(h, s);
}

/* The same, for a run that crosses no edge. */
static void insert_merged(tcm_heap_t *h, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    if (sp->first > 1 && !huge_edge(h, sp->first)) {
        uint32_t l = h->page_span[sp->first - 1];
        if (l && h->spans[l].state == TCM_SPAN_FREE && h->spans[l].committed == sp->committed &&
            h->spans[l].first + h->spans[l].npages == sp->first) {
            free_remove(h, l);
            h->page_span[h->spans[l].first + h->spans[l].npages - 1] = 0;
            sp->first = h->spans[l].first;
            sp->npages += h->spans[l].npages;
            sp->zeroed = sp->zeroed && h->spans[l].zeroed;
            tcm__span_delete_ht(h, l);
            cursor_merged(h, sp->first, sp->npages);
            TCM_CRASH_POINT(coalesce);
        }
    }
    uint32_t end = sp->first + sp->npages;
    if (end < h->top && !huge_edge(h, end)) {
        uint32_t r = h->page_span[end];
        if (r && h->spans[r].state == TCM_SPAN_FREE && h->spans[r].committed == sp->committed &&
            h->spans[r].first == end) {
            free_remove(h, r);
            h->page_span[end] = 0;
            sp->npages += h->spans[r].npages;
            sp->zeroed = sp->zeroed && h->spans[r].zeroed;
            tcm__span_delete_ht(h, r);
            cursor_merged(h, sp->first, sp->npages);
        }
    }
    free_insert(h, s);
}

void tcm__ph_insert_free_ht(tcm_heap_t *h, uint32_t s)
{
    tcm__ph_insert_free_runs_ht(h, &s, 1);
}

void tcm__ph_insert_free_runs_ht(tcm_heap_t *h, const uint32_t *runs, uint32_t n)
{
    if (!n)
        return;
    h->last_change_ns = tcm__now_ns();
    /* Neighbours among them are merged here, so that each merged run looks
     * up its free neighbours and goes on a list once: a RETURN that empties
     * a batch's spans, cut together, frees them as one run. Up or down in
     * address order; any other order merges less, never wrongly. */
    uint64_t pages = 0;
    uint32_t cur = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t s = runs[i];
        tcm_span_t *sp = &h->spans[s];
        TCM_ASSERT(!sp->on_list);
        pages += sp->npages;
        if (cur) {
            tcm_span_t *cp = &h->spans[cur];
            if ((sp->first == cp->first + cp->npages && !huge_edge(h, sp->first)) ||
                (sp->first + sp->npages == cp->first && !huge_edge(h, cp->first))) {
                if (sp->first < cp->first)
                    cp->first = sp->first;
                cp->npages += sp->npages;
                tcm__span_delete_ht(h, s);
                cursor_merged(h, cp->first, cp->npages);
                continue;
            }
            insert_coalesced(h, cur);
        }
        cur = s;
        sp->committed = 1;
        sp->zeroed = 0; /* (its union held a scan hint or a sample) */
    }
    insert_coalesced(h, cur);
    TCM_STAT_ADD(h->meta, bytes_spans, -tcm__page_off((uint32_t)pages));

    /* Beyond page_cache_cap, free pages that are not cut again within a
     * decay window go back at its end (decay_window, heapthread.c): a
     * process that frees and reallocates more than the cap does not commit
     * it all anew each time. Without decay, the cap holds at once. */
    uint64_t cap = atomic_load_explicit(&h->meta->config.page_cache_cap, memory_order_relaxed);
    if (!atomic_load_explicit(&h->meta->config.decay_ms, memory_order_relaxed) &&
        h->free_committed_pages * TCM_PAGE_SIZE > cap)
        TCM_STAT_ADD(h->meta, bytes_released, tcm__ph_release_ht(h, cap));
    publish_free_stats(h);
}

/* Range r is kept whole no more: its hint goes first (tcmd killed after it
 * leaves a large page the next tcmd does not know of, which its decay may
 * split: the safe side), then the free runs inside it leave the huge
 * lists, merged with their neighbours now that no edge keeps them apart. */
void tcm__ph_huge_forget_ht(tcm_heap_t *h, uint32_t r)
{
    uint64_t bit = 1ull << (r % 64);
    if (!(h->huge[r / 64] & bit))
        return;
    if (atomic_fetch_and_explicit(&h->huge_hint[r / 64], ~bit, memory_order_relaxed) & bit)
        atomic_fetch_sub_explicit(&h->huge_ranges, 1, memory_order_relaxed);
    uint32_t runs[TCM_HUGE_PAGES], n = 0, lo = r * TCM_HUGE_PAGES, hi = lo + TCM_HUGE_PAGES;
    for (uint32_t p = lo; p < hi && p < h->top;) {
        uint32_t s = h->page_span[p];
        if (!s) { /* inside a run in transit or not yet mapped: none crosses the range's start */
            p++;
            continue;
        }
        tcm_span_t *sp = &h->spans[s];
        if (sp->state == TCM_SPAN_FREE && sp->first == p && sp->on_list) {
            free_remove(h, s);
            sp->state = TCM_SPAN_UNUSED; /* off the lists: not merged into until it is back */
            runs[n++] = s;
        }
        p = sp->first + sp->npages > p ? sp->first + sp->npages : p + 1;
    }
    h->huge[r / 64] &= ~bit;
    h->huge_since[r] = 0; /* in use again for a while before it is handed over again (a collapse that failed) */
    for (uint32_t i = 0; i < n; i++) {
        h->spans[runs[i]].state = TCM_SPAN_FREE;
        insert_coalesced(h, runs[i]);
    }
}

/* A kept range a quarter of which stayed free through a whole decay step
 * while the heap holds too many free pages is not in use any more,
 * whatever it was when it was collapsed: it is forgotten (and counted in
 * huge_dissolved), and the decay gives its free pages back as it would
 * any. */
#define HUGE_SPARSE_PAGES (TCM_HUGE_PAGES / 4)

void tcm__ph_huge_sparse_ht(tcm_heap_t *h)
{
    for (uint32_t r = 0, n = ranges_below_top(h); r < n; r++)
        if (h->huge_low[r] >= HUGE_SPARSE_PAGES && (h->huge[r / 64] >> (r % 64) & 1)) {
            tcm__ph_huge_forget_ht(h, r);
            atomic_fetch_add_explicit(&h->huge_dissolved, 1, memory_order_relaxed);
        }
}

void tcm__ph_huge_step_ht(tcm_heap_t *h)
{
    memcpy(h->huge_low, h->huge_free, ranges_below_top(h) * sizeof h->huge_low[0]);
}

/* Range r (no free run crosses its edges: huge.c, range_in_use) is kept
 * whole from now on: its free runs go to the huge lists. */
void tcm__ph_huge_keep_ht(tcm_heap_t *h, uint32_t r)
{
    uint32_t runs[TCM_HUGE_PAGES], n = 0, lo = r * TCM_HUGE_PAGES, hi = lo + TCM_HUGE_PAGES;
    for (uint32_t p = lo; p < hi;) {
        uint32_t s = h->page_span[p];
        tcm_span_t *sp = &h->spans[s];
        if (s && sp->first == p && sp->state == TCM_SPAN_FREE && sp->on_list) {
            free_remove(h, s);
            runs[n++] = s;
        }
        p = s && sp->first + sp->npages > p ? sp->first + sp->npages : p + 1;
    }
    h->huge[r / 64] |= 1ull << (r % 64);
    for (uint32_t i = 0; i < n; i++)
        free_insert(h, runs[i]);
    note_cache_low(h);
}

/* Before run s is punched: a huge range it lies in is forgotten, and a
 * split counted when s is not all of it (only pressure punches those).
 * True when it was: s may have merged, the caller looks again. */
static bool forget_before_punch(tcm_heap_t *h, uint32_t s)
{
    const tcm_span_t *sp = &h->spans[s];
    if (!tcm__huge_at(h, sp->first))
        return false;
    if (sp->npages < TCM_HUGE_PAGES)
        atomic_fetch_add_explicit(&h->huge_splits, 1, memory_order_relaxed);
    tcm__ph_huge_forget_ht(h, sp->first / TCM_HUGE_PAGES);
    return true;
}

/* Punch free run s out of tmpfs. A backed one becomes released and joins
 * its released neighbours; returns the bytes it knew to be backed. A
 * released one (whose backing a recovery could not tell) stays as it is. */
static uint64_t release_span(tcm_heap_t *h, uint32_t s)
{
    tcm_span_t *sp = &h->spans[s];
    int err = h->anon ? tcm__discard(h->anon + tcm__page_off(sp->first), tcm__page_off(sp->npages))
                      : tcm__release(h->heap_fd, tcm__page_off(sp->first), tcm__page_off(sp->npages));
    if (err) {
        tcm__log(TCM_LOG_WARN, "fallocate(PUNCH_HOLE, page %u, %u pages) failed: %s", sp->first,
                 sp->npages, strerror(-err));
        return 0;
    }
    TCM_CRASH_POINT(release);
    sp->zeroed = tcm__released_reads_zero(); /* punched whole */
    if (!sp->committed)
        return 0;
    uint64_t bytes = tcm__page_off(sp->npages);
    free_remove(h, s);
    sp->committed = 0;
    insert_coalesced(h, s);
    return bytes;
}

/* The i-th list a release punches from. Everything to go: longest lists
 * first (0, 128, 127, ... 1: the most bytes a punch). Some to keep:
 * shortest first (1, 2, ... 128, 0), so that what stays is the long runs,
 * which serve the sizes the program reuses (decay.c, reuse_reserve); the
 * short ends cuts leave are what nothing asks for. */
static unsigned release_list(unsigned i, uint64_t keep_bytes)
{
    if (keep_bytes)
        return i == TCM_PH_NLISTS ? 0 : i + 1;
    return i == 0 ? 0 : TCM_PH_NLISTS + 1 - i;
}

/* Punch backed free runs (release_list's order) until at most keep_bytes
 * of them remain (0: none); returns the bytes punched. */
static uint64_t release_backed(tcm_heap_t *h, uint64_t keep_bytes)
{
    uint64_t released = 0;
    for (unsigned i = 0; i <= TCM_PH_NLISTS; i++) {
        unsigned li = release_list(i, keep_bytes);
        for (unsigned c = TCM_SET_BACKED; c <= (h->punch_split ? TCM_SET_HUGE : TCM_SET_BACKED); c++)
            /* the next one is backed too, so no merge below deletes it */
            for (uint32_t s = h->free_lists[c][li], next; s; s = next) {
                if (keep_bytes && punchable_pages(h) * TCM_PAGE_SIZE <= keep_bytes)
                    return released;
                if (forget_before_punch(h, s)) { /* its range's runs moved: this list again */
                    next = h->free_lists[c][li];
                    continue;
                }
                next = h->spans[s].next;
                released += release_span(h, s);
            }
    }
    return released;
}

/* release_backed, and with keep_bytes == 0 the released runs too, which
 * may hold backed pages a recovery could not tell apart. */
uint64_t tcm__ph_release_ht(tcm_heap_t *h, uint64_t keep_bytes)
{
    uint64_t released = release_backed(h, keep_bytes);
    if (keep_bytes == 0)
        for (unsigned li = 0; li <= TCM_PH_NLISTS; li++)
            for (uint32_t s = h->free_lists[TCM_SET_RELEASED][li]; s; s = h->spans[s].next)
                if (!tcm__huge_at(h, h->spans[s].first))
                    release_span(h, s);
    note_cache_low(h);
    /* the object records of spans that went back with these pages */
    tcm__recs_trim_ht(h);
    return released;
}

/* The next backed run release_backed would punch, while more than
 * keep_bytes of them are left (0: any). */
static uint32_t pick_backed(const tcm_heap_t *h, uint64_t keep_bytes)
{
    if (keep_bytes && punchable_pages(h) * TCM_PAGE_SIZE <= keep_bytes)
        return 0;
    for (unsigned i = 0; i <= TCM_PH_NLISTS; i++) {
        unsigned li = release_list(i, keep_bytes);
        for (unsigned c = TCM_SET_BACKED; c <= (h->punch_split ? TCM_SET_HUGE : TCM_SET_BACKED); c++) {
            uint32_t s = h->free_lists[c][li];
            if (s && li == 0 && keep_bytes) /* the long runs are not by length: the shortest */
                for (uint32_t t = h->spans[s].next; t; t = h->spans[t].next)
                    if (h->spans[t].npages < h->spans[s].npages)
                        s = t;
            if (s)
                return s;
        }
    }
    return 0;
}

static uint32_t next_backed(tcm_heap_t *h, uint64_t keep_bytes)
{
    uint32_t s;
    while ((s = pick_backed(h, keep_bytes)) && forget_before_punch(h, s))
        ;
    return s;
}

static int punch(tcm_heap_t *h, uint32_t first, uint32_t npages)
{
    int err = h->anon ? tcm__discard(h->anon + tcm__page_off(first), tcm__page_off(npages))
                      : tcm__release(h->heap_fd, tcm__page_off(first), tcm__page_off(npages));
    if (err)
        tcm__log(TCM_LOG_WARN, "fallocate(PUNCH_HOLE, page %u, %u pages) failed: %s", first, npages,
                 strerror(-err));
    return err;
}

/* At most max_pages of backed run s punched: a longer run gives its last
 * max_pages, which become a released run of their own (joining a released
 * neighbour after it), and keeps the rest backed. */
static int punch_backed_piece(tcm_heap_t *h, uint32_t s, uint32_t max_pages)
{
    tcm_span_t *sp = &h->spans[s];
    if (sp->npages <= max_pages)
        return release_span(h, s) || !h->spans[s].committed ? 0 : -EIO;
    uint32_t first = sp->first + sp->npages - max_pages;
    int err = punch(h, first, max_pages);
    if (err)
        return err;
    TCM_CRASH_POINT(release);
    free_remove(h, s);
    sp->npages -= max_pages;
    free_insert(h, s);
    uint32_t r = tcm__span_new_ht(h);
    h->spans[r].first = first;
    h->spans[r].npages = max_pages;
    h->spans[r].committed = 0;
    h->spans[r].zeroed = tcm__released_reads_zero();
    insert_coalesced(h, r);
    return 0;
}

/* The released pass: the next piece of a released run from the cursor up
 * (a recovery's estimate may hide backed pages in one). False when it is
 * past top or lost its place. */
static bool punch_released_piece(tcm_heap_t *h, uint32_t max_pages)
{
    for (unsigned looked = 0; h->punch_first && h->punch_first < h->top; looked++) {
        uint32_t p = h->punch_first, s = h->page_span[p];
        if (!s || s > h->npages || h->spans[s].first != p) {
            TCM_ASSERT_INTERNAL(!"the release cursor names no run");
            break;
        }
        tcm_span_t *sp = &h->spans[s];
        if (sp->state == TCM_SPAN_FREE && !sp->committed && tcm__huge_at(h, p) &&
            (sp->npages == TCM_HUGE_PAGES || h->punch_split)) {
            forget_before_punch(h, s); /* s may have merged: its start is the cursor's again */
            continue;
        }
        if (sp->state != TCM_SPAN_FREE || sp->committed || h->punch_done >= sp->npages || tcm__huge_at(h, p)) {
            h->punch_first = p + sp->npages;
            h->punch_done = 0;
            if (looked >= 4096) /* a long stretch of spans in use: the rest next step */
                return true;
            continue;
        }
        uint32_t n = sp->npages - h->punch_done < max_pages ? sp->npages - h->punch_done : max_pages;
        if (punch(h, p + h->punch_done, n) != 0)
            break;
        TCM_CRASH_POINT(release);
        h->punch_done += n;
        return true;
    }
    h->punch_first = h->punch_done = 0;
    return false;
}

void tcm__ph_release_begin_ht(tcm_heap_t *h, bool released_too)
{
    if (released_too) {
        h->punch_first = 1;
        h->punch_done = 0;
    }
}

bool tcm__ph_release_step_ht(tcm_heap_t *h, uint64_t keep_bytes, bool split, uint64_t budget_ns)
{
    uint64_t t0 = tcm__now_ns(), now = t0, piece;
    bool more;
    h->punch_split = split;
    do { /* (at least one piece; no more than the budget holds, going by the last one) */
        uint32_t s = next_backed(h, keep_bytes);
        if (s)
            more = punch_backed_piece(h, s, TCM_RELEASE_PIECE_PAGES) == 0;
        else
            more = punch_released_piece(h, TCM_RELEASE_PIECE_PAGES);
        piece = tcm__now_ns() - now;
        now += piece;
    } while (more && now - t0 + piece <= budget_ns);
    h->punch_split = false;
    note_cache_low(h);
    if (!more) {
        h->punch_first = h->punch_done = 0;
        tcm__recs_trim_ht(h); /* the object records of spans that went back with these pages */
    }
    return more;
}

uint64_t tcm__ph_in_use_end_ht(tcm_heap_t *h)
{
    uint32_t p = h->top - 1;
    while (p >= 1) {
        uint32_t s = h->page_span[p];
        if (!s || h->spans[s].state != TCM_SPAN_FREE || h->spans[s].first + h->spans[s].npages - 1 != p)
            break;
        p = h->spans[s].first - 1; /* skip a free run that ends here */
    }
    return tcm__page_off(p + 1);
}

/* Recovery: every page below top is either in an allocated span (page
 * class not 0; its record is authoritative) or free. Free runs get fresh
 * records, merged to maximal runs, committed when the heap segment has no
 * hole in them; records no allocated span uses go back to the allocator. */
uint64_t tcm__ph_rebuild_ht(tcm_heap_t *h)
{
    uint64_t repairs = 0;
    tcm__ph_init(h);
    tcm__recs_reset_ht(h);
    /* top is stored only after the metadata below it is backed; above it
     * nothing was ever handed out, and nothing is read there (a read of a
     * hole in a shared tmpfs mapping would allocate it) */
    uint32_t top = atomic_load_explicit(&h->state->top, memory_order_relaxed);
    if (top < 1 || top > h->npages) {
        /* never seen; scanning every page is slow but hands out nothing in use */
        tcm__log(TCM_LOG_ERROR, "recovery: top %u is out of range; scanning the whole heap", top);
        top = h->npages;
        repairs++;
    }
    h->top = top;
    atomic_store_explicit(&h->state->top, top, memory_order_relaxed);

    /* pass 1: records of allocated spans, checked against the page map */
    uint8_t *used = calloc((size_t)h->npages + 2, 1);
    uint32_t *bad = calloc((size_t)h->npages + 1, sizeof *bad), nbad = 0, max_used = 0;
    if (!used || !bad) {
        tcm__log(TCM_LOG_ERROR, "recovery: out of memory for %u pages", h->npages);
        abort();
    }
    /* a span being drained is one like any other after a restart (a crash
     * may have marked only some of its pages) */
    for (uint32_t p = 1; p < top; p++) {
        unsigned cls = tcm__page_small_class(h->page_class[p]);
        if (cls && cls != h->page_class[p])
            h->page_class[p] = (uint8_t)cls;
    }
    for (uint32_t p = 1; p < top;) {
        uint8_t pc = h->page_class[p];
        if (pc == TCM_PAGE_CLASS_FREE) {
            p++;
            continue;
        }
        uint32_t s = h->page_span[p];
        tcm_span_t *sp = s && s <= h->npages ? &h->spans[s] : NULL;
        bool ok = sp && !used[s] && sp->first == p && sp->npages >= 1 && (uint64_t)p + sp->npages <= top &&
                  (pc == TCM_PAGE_CLASS_LARGE ? sp->state == TCM_SPAN_LARGE
                                              : sp->state == TCM_SPAN_SMALL && sp->cls == pc && pc < TCM_NCLASSES &&
                                                    sp->npages == h->classes[pc].span_pages);
        for (uint32_t q = p; ok && q < p + sp->npages; q++)
            ok = h->page_span[q] == s && h->page_class[q] == pc;
        /* a small span's object record is its own (claimed last: a span
         * that fails here claims nothing) */
        if (ok && sp->state == TCM_SPAN_SMALL && (ok = tcm__rec_claim_ht(&h->recs[pc], sp->rec)))
            repairs += tcm__span_claim_blocks_ht(h, sp);
        if (!ok) {
            bad[nbad++] = p++;
            continue;
        }
        used[s] = 1;
        if (s > max_used)
            max_used = s;
        sp->prev = sp->next = 0;
        sp->on_list = 0;
        sp->committed = 0;
        p += sp->npages;
    }
    h->next_span_record = max_used + 1;
    for (uint32_t r = max_used; r >= 1; r--)
        if (!used[r])
            tcm__span_delete_ht(h, r);
    /* should never happen: keep such a page out of circulation rather than
     * risk handing out something that is in use */
    for (uint32_t i = 0; i < nbad; i++) {
        tcm__log(TCM_LOG_ERROR, "recovery: page %u (class %u, span %u) does not match its span record; "
                 "kept as an unowned page run", bad[i], h->page_class[bad[i]], h->page_span[bad[i]]);
        tcm__span_map_ht(h, tcm__span_new_ht(h), bad[i], 1, TCM_SPAN_LARGE, 0, 0);
        repairs++;
    }
    free(used);
    free(bad);

    /* pass 2: maximal free runs */
    uint64_t spans_bytes = 0;
    for (uint32_t p = 1; p < top;) {
        if (h->page_class[p] != TCM_PAGE_CLASS_FREE) {
            spans_bytes += tcm__page_off(h->spans[h->page_span[p]].npages);
            p += h->spans[h->page_span[p]].npages;
            continue;
        }
        uint32_t q = p;
        while (q < top && h->page_class[q] == TCM_PAGE_CLASS_FREE && (q == p || !huge_edge(h, q)))
            h->page_span[q++] = 0;
        uint32_t s = tcm__span_new_ht(h);
        h->spans[s].first = p;
        h->spans[s].npages = q - p;
        h->spans[s].committed = tcm__backed_range(h->heap_fd, tcm__page_off(p), tcm__page_off(q - p)) == 1;
        free_insert(h, s);
        p = q;
    }
    TCM_STAT_SET(h->meta, bytes_spans, spans_bytes);
    TCM_STAT_SET(h->meta, bytes_top, (uint64_t)top * TCM_PAGE_SIZE);
    publish_free_stats(h);
    return repairs;
}

/* Page-heap part of the whole-heap check: lists agree with states, free
 * neighbours are never both backed or both released, the page map points
 * at the right spans. */
/* The free lists: each run on the list of its length and backing, linked
 * both ways, named by the page map at its ends; their counts. */
static bool validate_free_lists(tcm_heap_t *h, char *why, size_t whylen)
{
    uint64_t pages = 0, committed = 0;
    static const char *const set_name[] = {"released", "backed", "huge"};
    uint64_t huge = 0;
    for (unsigned i = 0; i < 3 * (TCM_PH_NLISTS + 1); i++) {
        unsigned c = i / (TCM_PH_NLISTS + 1), li = i % (TCM_PH_NLISTS + 1); /* released, backed, huge */
        bool bit = h->nonempty[c][li / 64] >> (li % 64) & 1;
        if (bit != (h->free_lists[c][li] != 0)) {
            snprintf(why, whylen, "free list %u (%s): non-empty bit %d but head %u", li, set_name[c], bit,
                     h->free_lists[c][li]);
            return false;
        }
        for (uint32_t s = h->free_lists[c][li], prev = 0; s; prev = s, s = h->spans[s].next) {
            tcm_span_t *sp = &h->spans[s];
            if (sp->state != TCM_SPAN_FREE || sp->prev != prev || list_index(sp->npages) != li || !sp->on_list ||
                set_of(h, sp) != c) {
                snprintf(why, whylen, "free list %u (%s): span %u state %u npages %u committed %u", li, set_name[c],
                         s, sp->state, sp->npages, sp->committed);
                return false;
            }
            uint32_t last = sp->first + sp->npages - 1;
            if ((tcm__huge_at(h, sp->first) || tcm__huge_at(h, last)) &&
                sp->first / TCM_HUGE_PAGES != last / TCM_HUGE_PAGES) {
                snprintf(why, whylen, "free span %u (pages %u-%u) crosses the edge of a huge range", s, sp->first,
                         last);
                return false;
            }
            if (c == TCM_SET_HUGE)
                huge += sp->npages;
            if (h->page_span[sp->first] != s || h->page_span[sp->first + sp->npages - 1] != s) {
                snprintf(why, whylen, "span %u: page map does not point at its ends", s);
                return false;
            }
            pages += sp->npages;
            if (sp->committed)
                committed += sp->npages;
            if (pages > h->npages) {
                snprintf(why, whylen, "free list %u has a cycle", li);
                return false;
            }
        }
    }
    if (pages != h->free_pages || committed != h->free_committed_pages || huge != h->huge_free_pages) {
        snprintf(why, whylen, "free pages %llu (committed %llu, huge %llu) but the lists hold %llu (%llu, %llu)",
                 (unsigned long long)h->free_pages, (unsigned long long)h->free_committed_pages,
                 (unsigned long long)h->huge_free_pages, (unsigned long long)pages, (unsigned long long)committed,
                 (unsigned long long)huge);
        return false;
    }
    return true;
}

/* The heap in address order: every page below top is in one span, whose
 * pages the page map gives its class; free runs never touch one of the
 * same backing; the runs in transit and the bytes in spans add up. */
static bool validate_walk(tcm_heap_t *h, char *why, size_t whylen)
{
    uint32_t p = 1, prev_state = TCM_SPAN_UNUSED, prev_committed = 0;
    uint64_t span_bytes = 0, transit = 0;
    while (p < h->top) {
        uint32_t s = h->page_span[p];
        if (!s || s > h->npages || h->spans[s].first != p || h->spans[s].npages == 0 ||
            (uint64_t)p + h->spans[s].npages > h->top) {
            snprintf(why, whylen, "page %u is not the start of a span (span %u)", p, s);
            return false;
        }
        tcm_span_t *sp = &h->spans[s];
        if (sp->state == TCM_SPAN_FREE && prev_state == TCM_SPAN_FREE && sp->committed == prev_committed &&
            !huge_edge(h, p)) {
            snprintf(why, whylen, "free span %u at page %u follows another %s one", s, p,
                     sp->committed ? "backed" : "released");
            return false;
        }
        if (sp->state == TCM_SPAN_FREE) {
            if (!sp->on_list) {
                snprintf(why, whylen, "free span %u at page %u is on no list", s, p);
                return false;
            }
            if (sp->zeroed > 1) { /* what a span's last use left in its union, taken for a zero run */
                snprintf(why, whylen, "free span %u at page %u has zeroed %u", s, p, sp->zeroed);
                return false;
            }
            for (uint32_t q = p; q < p + sp->npages; q++)
                if (h->page_class[q] != TCM_PAGE_CLASS_FREE) {
                    snprintf(why, whylen, "page %u of free span %u has class %u", q, s, h->page_class[q]);
                    return false;
                }
        } else if (sp->state == TCM_SPAN_SMALL || sp->state == TCM_SPAN_LARGE) {
            uint8_t want = sp->state == TCM_SPAN_LARGE ? TCM_PAGE_CLASS_LARGE : sp->cls;
            if (sp->state == TCM_SPAN_SMALL && h->page_class[p] == TCM_PAGE_CLASS_DRAIN + sp->cls)
                want = (uint8_t)(TCM_PAGE_CLASS_DRAIN + sp->cls); /* being drained: every page */
            for (uint32_t q = p; q < p + sp->npages; q++)
                if (h->page_span[q] != s || h->page_class[q] != want) {
                    snprintf(why, whylen, "page %u of span %u maps to %u class %u", q, s,
                             h->page_span[q], h->page_class[q]);
                    return false;
                }
            span_bytes += tcm__page_off(sp->npages);
        } else if (sp->state == TCM_SPAN_UNUSED && !sp->on_list && h->transit_pages) {
            /* a run an allocation holds while it commits it (the server's
             * validator checks each against its client) */
            for (uint32_t q = p; q < p + sp->npages; q++)
                if (h->page_class[q] != TCM_PAGE_CLASS_FREE) {
                    snprintf(why, whylen, "page %u of span %u in transit has class %u", q, s, h->page_class[q]);
                    return false;
                }
            transit += sp->npages;
        } else {
            snprintf(why, whylen, "page %u is in span %u of state %u", p, s, sp->state);
            return false;
        }
        prev_state = sp->state;
        prev_committed = sp->committed;
        p += sp->npages;
    }
    if (transit != h->transit_pages) {
        snprintf(why, whylen, "%llu pages in transit but runs in transit hold %llu",
                 (unsigned long long)h->transit_pages, (unsigned long long)transit);
        return false;
    }
    if (h->punch_first && (h->punch_first > h->top ||
                           (h->punch_first < h->top && (!h->page_span[h->punch_first] ||
                                                        h->spans[h->page_span[h->punch_first]].first != h->punch_first)))) {
        snprintf(why, whylen, "the release cursor (page %u) is not at the start of a run", h->punch_first);
        return false;
    }
    uint64_t stat = atomic_load_explicit(&h->meta->stats.bytes_spans, memory_order_relaxed);
    if (stat != span_bytes) {
        snprintf(why, whylen, "bytes_spans is %llu but allocated spans hold %llu", (unsigned long long)stat,
                 (unsigned long long)span_bytes);
        return false;
    }
    return true;
}

bool tcm__ph_validate(tcm_heap_t *h, char *why, size_t whylen)
{
    if (!validate_free_lists(h, why, whylen))
        return false;
    if (h->top != atomic_load_explicit(&h->state->top, memory_order_relaxed)) {
        snprintf(why, whylen, "top %u but the state segment says %u", h->top, h->state->top);
        return false;
    }
    return validate_walk(h, why, whylen);
}
