/* validate_heap.c — the heap's own part of the validator (validate.c):
 * the page heap and the central lists against the page map and the object
 * records, and the census of who holds what. Needs no server, so the unit tests
 * and the Windows build run it too. */
#include <stdio.h>
#include <string.h>

#include "central.h"
#include "heap.h"
#include "pageheap.h"
#include "validate_heap.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, whylen, __VA_ARGS__);                                                        \
        goto fail;                                                                                 \
    } while (0)

/* Spans of each class with free objects are exactly the spans on its
 * lists, each on the list of its free count. */
static bool check_central(tcm_heap_t *h, char *why, size_t whylen)
{
    uint64_t central_free = 0;
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++) {
        uint64_t listed = 0;
        for (unsigned li = 0; li <= TCM_DRAIN_LIST; li++) {
            if (!h->central[cls][li] != !(h->central_nonempty[cls] >> li & 1))
                FAIL("central list %u.%u: its bit says %s", cls, li, h->central[cls][li] ? "empty" : "not empty");
            for (uint32_t s = h->central[cls][li], prev = 0; s; prev = s, s = h->spans[s].next) {
                const tcm_span_t *sp = &h->spans[s];
                if (s > h->npages || sp->state != TCM_SPAN_SMALL || sp->cls != cls || sp->prev != prev ||
                    !sp->on_list || !sp->nfree)
                    FAIL("central list %u.%u: span %u (state %u class %u) does not belong there", cls, li, s,
                         sp->state, sp->cls);
                uint32_t objs = h->classes[cls].span_objs;
                bool draining = tcm__span_draining(h, sp);
                if (draining != (li == TCM_DRAIN_LIST) || (draining && sp->nfree == objs))
                    FAIL("central list %u.%u: span %u, %s drained, with %u free objects belongs on another", cls,
                         li, s, draining ? "being" : "not", sp->nfree);
                if (!draining && tcm__central_list(sp->nfree, objs) != li)
                    FAIL("central list %u.%u: span %u with %u free objects belongs on another", cls, li, s,
                         sp->nfree);
                if (++listed > h->npages)
                    FAIL("central list %u has a cycle", cls);
            }
        }
    }
    uint64_t spans[TCM_NCLASSES] = {0}, free_objs[TCM_NCLASSES] = {0}, tag_blocks = 0;
    for (uint32_t p = 1; p < h->top;) {
        if (h->page_class[p] == TCM_PAGE_CLASS_FREE) {
            p++;
            continue;
        }
        uint32_t s = h->page_span[p];
        const tcm_span_t *sp = &h->spans[s];
        p += sp->npages;
        if (sp->state != TCM_SPAN_SMALL)
            continue;
        const tcm_class_info_t *ci = &h->classes[sp->cls];
        const tcm_rec_set_t *ss = &h->recs[sp->cls];
        if (sp->rec >= ss->max || !tcm__rec_bit(ss, ss->used, sp->rec))
            FAIL("span %u (class %u): its object record %u is out of range or not marked in use", s, sp->cls,
                 sp->rec);
        const uint64_t *map = tcm__span_bits(h, sp);
        uint32_t words = (ci->span_objs + 63) / 64, used = 0;
        const uint32_t *owners = tcm__span_owners(h, sp);
        for (uint32_t w = 0; w < words; w++) {
            uint32_t b = owners[w] & ~TCM_OWNER_BLOCK;
            if (!(owners[w] & TCM_OWNER_BLOCK))
                continue;
            if (b >= h->tag_blocks.max || !tcm__rec_bit(&h->tag_blocks, h->tag_blocks.used, b))
                FAIL("span %u (class %u): word %u names tag block %u, out of range or not marked in use", s, sp->cls,
                     w, b);
            tag_blocks++;
        }
        for (uint32_t w = 0; w < words; w++) {
            uint64_t valid = (w == words - 1 && ci->span_objs % 64) ? (1ull << (ci->span_objs % 64)) - 1 : ~0ull;
            if (map[w] & ~valid)
                FAIL("span %u (class %u): object map has bits past its last object", s, sp->cls);
            used += (uint32_t)__builtin_popcountll(map[w]);
        }
        if (sp->nfree != ci->span_objs - used)
            FAIL("span %u (class %u): free count %u but the object map says %u", s, sp->cls, sp->nfree,
                 ci->span_objs - used);
        if ((sp->nfree != 0) != (sp->on_list != 0))
            FAIL("span %u (class %u): %u free objects but %s its central list", s, sp->cls, sp->nfree,
                 sp->on_list ? "on" : "not on");
        if (sp->scan > 0 && sp->nfree) {
            for (uint32_t w = 0; w < sp->scan && w < words; w++)
                if (~map[w] & ((w == words - 1 && ci->span_objs % 64) ? (1ull << (ci->span_objs % 64)) - 1 : ~0ull))
                    FAIL("span %u (class %u): a free object lies before its scan hint %u", s, sp->cls, sp->scan);
        }
        spans[sp->cls]++;
        free_objs[sp->cls] += sp->nfree;
        central_free += (uint64_t)sp->nfree * ci->size;
    }
    if (h->tag_blocks.nused != tag_blocks) /* with the check above: one block per word naming it, no stray */
        FAIL("%u tag blocks in use for %llu owner words naming one", h->tag_blocks.nused,
             (unsigned long long)tag_blocks);
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++)
        if (h->recs[cls].nused != spans[cls]) /* with the check above: one record per span, no stray */
            FAIL("class %u: %u object records in use for %llu spans", cls, h->recs[cls].nused,
                 (unsigned long long)spans[cls]);
    for (unsigned cls = 1; cls < TCM_NCLASSES; cls++)
        if (atomic_load(&h->cstats[cls].spans) != spans[cls] || atomic_load(&h->cstats[cls].free_objs) != free_objs[cls])
            FAIL("class %u: counts say %llu spans and %llu free objects, the heap has %llu and %llu", cls,
                 (unsigned long long)atomic_load(&h->cstats[cls].spans),
                 (unsigned long long)atomic_load(&h->cstats[cls].free_objs), (unsigned long long)spans[cls],
                 (unsigned long long)free_objs[cls]);
    if (atomic_load(&h->meta->stats.bytes_central_free) != central_free)
        FAIL("bytes_central_free is %llu, the central lists hold %llu",
             (unsigned long long)atomic_load(&h->meta->stats.bytes_central_free), (unsigned long long)central_free);
    return true;
fail:
    return false;
}

/* held[tag]: bytes of live objects and page runs owned by each tag. */
static uint64_t census(const tcm_heap_t *h, uint64_t *held)
{
    uint64_t total = 0;
    for (uint32_t p = 1; p < h->top;) {
        if (h->page_class[p] == TCM_PAGE_CLASS_FREE) {
            p++;
            continue;
        }
        const tcm_span_t *sp = &h->spans[h->page_span[p]];
        p += sp->npages;
        if (sp->state == TCM_SPAN_LARGE) {
            held[sp->owner & 0xffff] += tcm__page_off(sp->npages);
            total += tcm__page_off(sp->npages);
            continue;
        }
        const tcm_class_info_t *ci = &h->classes[sp->cls];
        const uint64_t *map = tcm__span_bits(h, sp);
        const uint32_t *owners = tcm__span_owners(h, sp);
        for (uint32_t w = 0; w < (ci->span_objs + 63) / 64; w++)
            for (uint64_t bits = map[w]; bits; bits &= bits - 1) {
                held[tcm__owner_of(h, owners, w * 64 + (unsigned)__builtin_ctzll(bits))] += ci->size;
                total += ci->size;
            }
    }
    return total;
}

uint64_t tcm__census_ht(const tcm_heap_t *h, uint64_t *held)
{
    return census(h, held);
}

bool tcm__heap_validate_ht(tcm_heap_t *h, char *why, size_t whylen)
{
    return tcm__ph_validate(h, why, whylen) && check_central(h, why, whylen);
}
