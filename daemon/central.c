/* central.c — central free lists: spans of each size class with free
 * objects, the object bitmap that says which objects are handed out, and
 * large page runs. Every offset from a client is checked here before it
 * changes anything. Heap thread only. */
#include <string.h>

#include "heap.h"

#define STAT_ADD(h, f, v) atomic_fetch_add_explicit(&(h)->meta->stats.f, (v), memory_order_relaxed)

static uint64_t *span_map(tcm_heap_t *h, const tcm_span_t *sp)
{
    return &h->objmap[(uint64_t)sp->first * TCM_OBJMAP_WORDS_PER_PAGE];
}

/* Page runs for a span or a large allocation; when the heap is at its limit,
 * the empty spans kept per class go back to the page heap first. */
static int alloc_pages(tcm_heap_t *h, uint32_t npages, uint32_t align_pages, uint32_t *s)
{
    int st = tcm__ph_alloc_ht(h, npages, align_pages, s);
    if (st == TCM_ST_NOMEM && tcm__central_drop_empty_ht(h))
        st = tcm__ph_alloc_ht(h, npages, align_pages, s);
    return st;
}

static uint32_t new_small_span(tcm_heap_t *h, unsigned cls, int *status)
{
    const tcm_class_info_t *ci = &h->classes[cls];
    uint32_t s;
    *status = alloc_pages(h, ci->span_pages, 1, &s);
    if (*status != TCM_ST_OK)
        return 0;
    tcm_span_t *sp = &h->spans[s];
    sp->state = TCM_SPAN_SMALL;
    sp->cls = (uint8_t)cls;
    sp->nfree = ci->span_objs;
    sp->scan = 0;
    memset(span_map(h, sp), 0, (ci->span_objs + 63) / 64 * 8);
    tcm__ph_map_ht(h, s, (uint8_t)cls);
    tcm__span_list_push(h, &h->meta->central_head[cls], s);
    STAT_ADD(h, bytes_central_free, (uint64_t)ci->span_objs * ci->size);
    TCM_HT_ADD(h->cstats[cls].spans, 1);
    TCM_HT_ADD(h->cstats[cls].free_objs, ci->span_objs);
    return s;
}

uint32_t tcm__central_refill_ht(tcm_heap_t *h, unsigned cls, uint32_t want, uint64_t *out,
                                uint16_t owner, int *status)
{
    const tcm_class_info_t *ci = &h->classes[cls];
    uint32_t n = 0;
    *status = TCM_ST_OK;
    while (n < want) {
        uint32_t s = h->meta->central_head[cls];
        if (!s && !(s = new_small_span(h, cls, status)))
            break;
        tcm_span_t *sp = &h->spans[s];
        uint64_t *map = span_map(h, sp);
        uint32_t words = (ci->span_objs + 63) / 64;
        uint64_t base_off = tcm__page_off(sp->first);
        uint16_t *owners = &h->owners[(uint64_t)sp->first * TCM_OBJMAP_WORDS_PER_PAGE * 64];
        for (uint32_t w = sp->scan; w < words && n < want && sp->nfree; w++) {
            uint64_t valid = (w == words - 1 && ci->span_objs % 64) ? (1ull << (ci->span_objs % 64)) - 1 : ~0ull;
            uint64_t free_bits = ~map[w] & valid;
            while (free_bits && n < want) {
                unsigned b = (unsigned)__builtin_ctzll(free_bits);
                free_bits &= free_bits - 1;
                map[w] |= 1ull << b;
                owners[w * 64 + b] = owner;
                out[n++] = base_off + (uint64_t)(w * 64 + b) * ci->size;
                sp->nfree--;
            }
            sp->scan = w;
        }
        if (sp->nfree == 0)
            tcm__span_list_remove(h, &h->meta->central_head[cls], s);
    }
    if (n)
        *status = TCM_ST_OK;
    STAT_ADD(h, bytes_central_free, -(uint64_t)n * ci->size);
    TCM_HT_ADD(h->cstats[cls].free_objs, -(uint64_t)n);
    return n;
}

/* Which class the object at off belongs to; TCM_ST_OK only for the exact
 * start of a handed-out object. */
static int check_object(const tcm_heap_t *h, uint64_t off, uint32_t *span, uint32_t *idx)
{
    if (off >= h->heap_size || off < TCM_PAGE_SIZE)
        return TCM_ST_BAD_OFFSET;
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    uint32_t s = h->page_span[page];
    if (!s || h->spans[s].state != TCM_SPAN_SMALL)
        return TCM_ST_NOT_OBJECT;
    const tcm_span_t *sp = &h->spans[s];
    const tcm_class_info_t *ci = &h->classes[sp->cls];
    uint64_t rel = off - tcm__page_off(sp->first);
    uint32_t i = (uint32_t)((rel * ci->recip) >> 32);
    if ((uint64_t)i * ci->size != rel || i >= ci->span_objs)
        return TCM_ST_NOT_OBJECT;
    if (!(h->objmap[(uint64_t)sp->first * TCM_OBJMAP_WORDS_PER_PAGE + i / 64] & (1ull << (i % 64))))
        return TCM_ST_DOUBLE_FREE;
    *span = s;
    *idx = i;
    return TCM_ST_OK;
}

int tcm__object_class(const tcm_heap_t *h, uint64_t off, unsigned *cls)
{
    uint32_t s, i;
    int st = check_object(h, off, &s, &i);
    if (st == TCM_ST_OK)
        *cls = h->spans[s].cls;
    return st;
}

int tcm__central_return_ht(tcm_heap_t *h, unsigned cls, uint64_t off, uint16_t *owner)
{
    uint32_t s, i;
    int st = check_object(h, off, &s, &i);
    if (st != TCM_ST_OK)
        return st;
    tcm_span_t *sp = &h->spans[s];
    if (sp->cls != cls)
        return TCM_ST_NOT_OBJECT;
    *owner = h->owners[(uint64_t)sp->first * TCM_OBJMAP_WORDS_PER_PAGE * 64 + i];
    const tcm_class_info_t *ci = &h->classes[cls];
    span_map(h, sp)[i / 64] &= ~(1ull << (i % 64));
    if (i / 64 < sp->scan)
        sp->scan = i / 64;
    STAT_ADD(h, bytes_central_free, ci->size);
    TCM_HT_ADD(h->cstats[cls].free_objs, 1);
    if (sp->nfree++ == 0)
        tcm__span_list_push(h, &h->meta->central_head[cls], s);
    if (sp->nfree == ci->span_objs) {
        /* Keep one empty span per class so a class that churns around a
         * span boundary does not cut and free a span on every batch. */
        uint32_t head = h->meta->central_head[cls];
        bool alone = head == s && sp->next == 0;
        if (!alone) {
            tcm__span_list_remove(h, &h->meta->central_head[cls], s);
            STAT_ADD(h, bytes_central_free, -(uint64_t)ci->span_objs * ci->size);
            TCM_HT_ADD(h->cstats[cls].spans, -1);
            TCM_HT_ADD(h->cstats[cls].free_objs, -(uint64_t)ci->span_objs);
            tcm__ph_free_ht(h, s);
        }
    }
    return TCM_ST_OK;
}

/* Give every completely free small span back to the page heap. */
uint64_t tcm__central_drop_empty_ht(tcm_heap_t *h)
{
    uint64_t bytes = 0;
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        const tcm_class_info_t *ci = &h->classes[cls];
        uint32_t s = h->meta->central_head[cls];
        while (s) {
            uint32_t next = h->spans[s].next;
            if (h->spans[s].nfree == ci->span_objs) {
                tcm__span_list_remove(h, &h->meta->central_head[cls], s);
                STAT_ADD(h, bytes_central_free, -(uint64_t)ci->span_objs * ci->size);
                TCM_HT_ADD(h->cstats[cls].spans, -1);
                TCM_HT_ADD(h->cstats[cls].free_objs, -(uint64_t)ci->span_objs);
                bytes += tcm__page_off(h->spans[s].npages);
                tcm__ph_free_ht(h, s);
            }
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
    int st = alloc_pages(h, (uint32_t)npages, (uint32_t)align_pages, &s);
    if (st != TCM_ST_OK)
        return st;
    h->spans[s].state = TCM_SPAN_LARGE;
    h->spans[s].owner = owner;
    tcm__ph_map_ht(h, s, TCM_PAGE_CLASS_LARGE);
    *off = tcm__page_off(h->spans[s].first);
    return TCM_ST_OK;
}

int tcm__large_free_ht(tcm_heap_t *h, uint64_t off, uint64_t *bytes, uint32_t *owner)
{
    if (off >= h->heap_size || off < TCM_PAGE_SIZE)
        return TCM_ST_BAD_OFFSET;
    if (off & (TCM_PAGE_SIZE - 1))
        return TCM_ST_NOT_OBJECT;
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    uint32_t s = h->page_span[page];
    if (!s || h->spans[s].first != page)
        return page < h->top ? TCM_ST_NOT_OBJECT : TCM_ST_BAD_OFFSET;
    if (h->spans[s].state == TCM_SPAN_FREE)
        return TCM_ST_DOUBLE_FREE;
    if (h->spans[s].state != TCM_SPAN_LARGE)
        return TCM_ST_NOT_OBJECT;
    *bytes = tcm__page_off(h->spans[s].npages);
    *owner = h->spans[s].owner;
    tcm__ph_free_ht(h, s);
    return TCM_ST_OK;
}
