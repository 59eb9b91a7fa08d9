/* given.c — what tcmd hands out, checked before it is used and mapped in
 * one call per span: tcmd is trusted to run the heap, not to be right, so
 * an offset that is not an object of the class asked for stops the
 * process before the application gets memory that may be another's.
 * Slow paths only (refills, page runs). */
#include "client.h"
#include "diag.h"
#include "given.h"
#include "prim.h"

#define TCM_MAP_SPAN_PAGES ((4u << 20) >> TCM_PAGE_SHIFT) /* class spans are smaller; a span record past that is not one */
#define TCM_MAP_RUN_PAGES ((8u << 20) >> TCM_PAGE_SHIFT)

TCM_COLD void tcm__fatal_page_class(const char *caller, const void *p, unsigned cls)
{
    tcm__fatal("%s: the page map gives %p the class byte %u, which is neither a size class (1-%u, or %u-%u while "
               "its span drains) nor a page run (%u): the heap's metadata is damaged",
               caller, p, cls, TCM_NCLASSES - 1, TCM_PAGE_CLASS_DRAIN + 1, TCM_PAGE_CLASS_DRAIN + TCM_NCLASSES - 1,
               TCM_PAGE_CLASS_LARGE);
}

/* An offset tcmd handed out for class cls that is not one of its objects:
 * the process stops here rather than hand memory that may be another's,
 * or tcmd's doorbell page, to the application. */
TCM_COLD static void __attribute__((noreturn)) bad_given(unsigned cls, uint64_t off)
{
    const uint8_t *pc = atomic_load_explicit(&tcm__page_class, memory_order_relaxed);
#define BAD_GIVEN "tcmd handed out offset 0x%llx for class %u: not an object of that class "
    unsigned long long o = off;
    if (off >= tcm__proc.heap_size)
        tcm__fatal(BAD_GIVEN "(past the end of the %llu-byte heap)", o, cls, (unsigned long long)tcm__proc.heap_size);
    if (off < TCM_PAGE_SIZE)
        tcm__fatal(BAD_GIVEN "(in page 0, the doorbell page)", o, cls);
    if (off % TCM_ALIGN)
        tcm__fatal(BAD_GIVEN "(not %u-byte aligned)", o, cls, TCM_ALIGN);
    tcm__fatal(BAD_GIVEN "(its page has class %u)", o, cls, pc[off >> TCM_PAGE_SHIFT]);
#undef BAD_GIVEN
}

void tcm__check_given(unsigned cls, const uint64_t *offs, uint32_t n)
{
    const uint8_t *pc = atomic_load_explicit(&tcm__page_class, memory_order_relaxed);
    uint64_t size = tcm__proc.heap_size;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off = offs[i];
        /* off < size first: the page-map load is then inside the map */
        if (tcm_unlikely(off >= size || off < TCM_PAGE_SIZE || (off & (TCM_ALIGN - 1)) ||
                         tcm__page_small_class(pc[off >> TCM_PAGE_SHIFT]) != cls))
            bad_given(cls, off);
    }
}

void tcm__check_given_run(uint64_t off, uint64_t npages)
{
    const tcm_proc_t *pr = &tcm__proc;
    const uint8_t *pc = atomic_load_explicit(&tcm__page_class, memory_order_relaxed);
    uint64_t page = off >> TCM_PAGE_SHIFT;
    unsigned long long o = off, n = npages;
#define BAD_RUN "tcmd handed out offset 0x%llx for a run of %llu pages: not a page run "
    if (off >= pr->heap_size || npages > (pr->heap_size - off) >> TCM_PAGE_SHIFT)
        tcm__fatal(BAD_RUN "(past the end of the %llu-byte heap)", o, n, (unsigned long long)pr->heap_size);
    if (off < TCM_PAGE_SIZE)
        tcm__fatal(BAD_RUN "(in page 0, the doorbell page)", o, n);
    if (off & (TCM_PAGE_SIZE - 1))
        tcm__fatal(BAD_RUN "(not on a page boundary)", o, n);
    if (pc[page] != TCM_PAGE_CLASS_LARGE)
        tcm__fatal(BAD_RUN "(its page has class %u, not the page-run marker %u)", o, n, pc[page],
                   TCM_PAGE_CLASS_LARGE);
    uint32_t s = pr->page_span[page];
    if (s == 0 || s > pr->meta->npages || pr->spans[s].first != page || pr->spans[s].npages < npages)
        tcm__fatal(BAD_RUN "(not the first page of such a run)", o, n);
#undef BAD_RUN
}

static bool page_mapped(uint64_t page)
{
    const _Atomic uint64_t *m = tcm__proc.mapped;
    return !m || (atomic_load_explicit(&m[page / 64], memory_order_relaxed) >> (page % 64) & 1);
}

static void map_pages(uint64_t first, uint64_t npages)
{
    _Atomic uint64_t *m = tcm__proc.mapped;
    if (tcm__populate(tcm__proc.heap + (first << TCM_PAGE_SHIFT), npages << TCM_PAGE_SHIFT) != 0)
        return; /* it faults in instead */
    for (uint64_t p = first; p < first + npages; p++)
        atomic_fetch_or_explicit(&m[p / 64], 1ull << (p % 64), memory_order_relaxed);
}

void tcm__map_given(const uint64_t *offs, uint32_t n)
{
    const tcm_proc_t *pr = &tcm__proc;
    if (!pr->mapped) /* a private heap's (given.h), or none was made */
        return;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t page = offs[i] >> TCM_PAGE_SHIFT;
        if (page_mapped(page))
            continue;
        /* the object's span is the class's while the object is out: its
         * record does not change under us */
        const tcm_span_t *sp = &pr->spans[pr->page_span[page]];
        uint64_t first = sp->first, np = sp->npages;
        if (first > page || page - first >= np || np > TCM_MAP_SPAN_PAGES)
            first = page, np = 1;
        map_pages(first, np);
    }
}

void tcm__map_given_run(uint64_t off, uint64_t npages)
{
    uint64_t first = off >> TCM_PAGE_SHIFT;
    /* one larger than this may be touched here and there only: mapping
     * all of it could cost more than the faults it saves */
    if (npages <= TCM_MAP_RUN_PAGES && !page_mapped(first))
        map_pages(first, npages);
}
