/* huge.c — the heap on 2 MiB pages (docs/DESIGN.md, "Huge pages").
 *
 * Every process maps the heap with 4 KiB pages unless the kernel puts a
 * large page behind a 2 MiB range of the segment; once it has
 * (MADV_COLLAPSE, Linux 6.1+, whatever shmem_enabled says), every process
 * that maps the range gets the large page: one page-table entry where
 * there were 512, and a TLB entry that covers all of it. The heap thread
 * picks the ranges that stay in use (at most an eighth free, at every look
 * for HUGE_SETTLE_LOOKS); the collapser, a thread of its own, asks the kernel for them
 * within huge_collapse_ms a second; the page heap keeps collapsed ranges
 * whole (pageheap.c: cuts there first, punched only whole but under
 * pressure); the hint in the state segment says which they are across a
 * restart. */
#define _GNU_SOURCE
#include "huge.h"

#include <errno.h>
#include <string.h>

#include "log.h"
#include "pageheap.h"
#include "prim.h"
#include "server.h"

#define HUGE_SCAN_RANGES 64u               /* ranges one look covers: 128 MiB of heap */
/* Looks (TCM_HUGE_SCAN_NS each) a range must be in use through before it is
 * collapsed: 250 ms. A range collapsed at its second look was kept whole
 * through the churn of a program's first second (larson's 1 s steady
 * memory ~9% higher). */
#define HUGE_SETTLE_LOOKS 5u

static void *collapser_main(void *arg)
{
    tcm_server_t *srv = arg;
    tcm_huge_t *hg = &srv->huge;
    uint64_t window = tcm__now_ns(), used = 0;
    pthread_mutex_lock(&hg->lock);
    while (!hg->stop) {
        if (!hg->ntodo) {
            pthread_cond_wait(&hg->cond, &hg->lock);
            continue;
        }
        /* the budget: so much CPU time a second, going by what collapses
         * took (most of a collapse's wall time on a busy box is waiting) */
        uint64_t now = tcm__now_ns(), budget = atomic_load(&srv->huge_collapse_ms) * 1000000u;
        if (now - window >= 1000000000u) {
            window = now;
            used = 0;
        }
        if (budget && used >= budget) { /* the rest of the second, a tenth at a time (a stop may come) */
            uint64_t left = window + 1000000000u - now;
            pthread_mutex_unlock(&hg->lock);
            tcm__sleep_ns(left < 100000000u ? left : 100000000u);
            pthread_mutex_lock(&hg->lock);
            continue;
        }
        uint32_t r = hg->todo[0];
        memmove(hg->todo, hg->todo + 1, --hg->ntodo * sizeof hg->todo[0]);
        pthread_mutex_unlock(&hg->lock);
        int err = -ECANCELED; /* turned off meanwhile */
        if (budget) {
            uint64_t cpu = tcm__thread_cpu_ns();
            err = tcm__collapse(srv->heap + ((uint64_t)r << TCM_HUGE_SHIFT), 1ull << TCM_HUGE_SHIFT);
            uint64_t took = tcm__thread_cpu_ns() - cpu;
            used += took;
            atomic_fetch_add_explicit(&hg->busy_ns, took, memory_order_relaxed);
        }
        pthread_mutex_lock(&hg->lock);
        hg->done[hg->ndone] = r;
        hg->done_err[hg->ndone++] = err;
    }
    pthread_mutex_unlock(&hg->lock);
    return NULL;
}

int tcm__huge_start(tcm_server_t *srv)
{
    tcm_huge_t *hg = &srv->huge;
    pthread_mutex_init(&hg->lock, NULL);
    pthread_cond_init(&hg->cond, NULL);
    int err = pthread_create(&hg->thread, NULL, collapser_main, srv);
    if (err) {
        tcm__log(TCM_LOG_ERROR, "pthread_create(collapser) failed: %s", strerror(err));
        return -err;
    }
    tcm__thread_name(hg->thread, "tcm-huge");
    hg->started = true;
    return 0;
}

void tcm__huge_stop(tcm_server_t *srv)
{
    tcm_huge_t *hg = &srv->huge;
    if (!hg->started)
        return;
    pthread_mutex_lock(&hg->lock);
    hg->stop = true;
    pthread_cond_signal(&hg->cond);
    pthread_mutex_unlock(&hg->lock);
    pthread_join(hg->thread, NULL);
    hg->started = false;
}

/* What the kernel said about range r, which the page heap has kept whole
 * since it was handed over (unless pressure punched into it meanwhile). */
static void take_answer(tcm_server_t *srv, uint32_t r, int err)
{
    tcm_huge_t *hg = &srv->huge;
    tcm_heap_t *h = &srv->h;
    uint64_t bit = 1ull << (r % 64);
    hg->in_flight--;
    if (!(h->huge[r / 64] & bit))
        return;
    if (!err) {
        if (!(atomic_fetch_or_explicit(&h->huge_hint[r / 64], bit, memory_order_relaxed) & bit)) {
            atomic_fetch_add_explicit(&h->huge_ranges, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&h->huge_collapses, 1, memory_order_relaxed);
        }
        atomic_store_explicit(&h->huge_errno, 0, memory_order_relaxed);
        return;
    }
    tcm__ph_huge_forget_ht(h, r);
    if (err == -ECANCELED)
        return;
    atomic_fetch_add_explicit(&h->huge_failures, 1, memory_order_relaxed);
    atomic_store_explicit(&h->huge_errno, -err, memory_order_relaxed);
    if ((err == -EINVAL || err == -ENOSYS || err == -EPERM) && !atomic_load(&h->huge_ranges) &&
        !atomic_load(&h->huge_collapses)) {
        /* not this range's doing, as none ever worked: the kernel has no
         * MADV_COLLAPSE (before 6.1), or shmem_enabled says deny */
        atomic_store(&hg->off_err, -err);
        tcm__log(TCM_LOG_WARN,
                 "huge pages: the kernel cannot collapse the heap (MADV_COLLAPSE: %s; Linux 6.1 or later is "
                 "needed, and /sys/kernel/mm/transparent_hugepage/shmem_enabled must not be 'deny'): the heap "
                 "stays on 4 KiB pages",
                 strerror(-err));
    } else {
        tcm__log_limited(TCM_LOG_DEBUG, "huge pages: range %u not collapsed: %s", r, strerror(-err));
    }
}

/* Hand range r to the collapser; false when its queue is full. */
static bool hand_over(tcm_huge_t *hg, uint32_t r)
{
    if (hg->in_flight >= TCM_HUGE_QUEUE)
        return false;
    pthread_mutex_lock(&hg->lock);
    hg->todo[hg->ntodo++] = r;
    pthread_cond_signal(&hg->cond);
    pthread_mutex_unlock(&hg->lock);
    hg->in_flight++;
    return true;
}

/* Whether range r is in use: at most HUGE_FREE_MAX of its pages free, in
 * free runs inside it, none in transit. A collapse backs the free pages
 * that were punched (the decay punches between the spans of a heap whose
 * objects come and go: requiring none, almost no range of larson's heap
 * ever qualified after its first seconds), at most an eighth of the range
 * (larson after 30 s: 86% of its heap on large pages; a 16th: 78%). */
#define HUGE_FREE_MAX (TCM_HUGE_PAGES / 8)
static bool range_in_use(const tcm_heap_t *h, uint32_t r)
{
    uint32_t lo = r * TCM_HUGE_PAGES, hi = lo + TCM_HUGE_PAGES, free = 0;
    if (h->page_class[lo] == TCM_PAGE_CLASS_FREE || h->page_class[hi - 1] == TCM_PAGE_CLASS_FREE)
        return false; /* a free run may cross its edge */
    for (uint32_t p = lo; p < hi;) {
        const uint8_t *f = memchr(h->page_class + p, TCM_PAGE_CLASS_FREE, hi - p);
        if (!f)
            return true;
        p = (uint32_t)(f - h->page_class);
        uint32_t s = h->page_span[p];
        const tcm_span_t *sp = &h->spans[s];
        if (!s || sp->first != p || sp->state != TCM_SPAN_FREE || !sp->on_list ||
            (free += sp->npages) > HUGE_FREE_MAX)
            return false;
        p += sp->npages;
    }
    return true;
}

void tcm__huge_tick_ht(tcm_server_t *srv, uint64_t now)
{
    tcm_huge_t *hg = &srv->huge;
    tcm_heap_t *h = &srv->h;
    if (!hg->started || now - hg->scan_ns < TCM_HUGE_SCAN_NS)
        return;
    hg->scan_ns = now;
    uint32_t done[TCM_HUGE_QUEUE], n;
    int errs[TCM_HUGE_QUEUE];
    pthread_mutex_lock(&hg->lock);
    n = hg->ndone;
    memcpy(done, hg->done, n * sizeof done[0]);
    memcpy(errs, hg->done_err, n * sizeof errs[0]);
    hg->ndone = 0;
    pthread_mutex_unlock(&hg->lock);
    for (uint32_t i = 0; i < n; i++)
        take_answer(srv, done[i], errs[i]);

    hg->found = false;
    if (!atomic_load_explicit(&srv->huge_collapse_ms, memory_order_relaxed) || atomic_load_explicit(&hg->off_err, memory_order_relaxed))
        return;
    /* the ranges the hint names, once after a start: this tcmd maps their
     * large pages (a collapse of a range that is one already only maps it) */
    while (hg->remap_cursor < h->nranges) {
        uint32_t r = hg->remap_cursor;
        if ((h->huge[r / 64] >> (r % 64) & 1) && !hand_over(hg, r))
            return;
        hg->remap_cursor++;
    }
    uint32_t ranges = h->top / TCM_HUGE_PAGES; /* whole ranges below top */
    hg->looks++;
    for (uint32_t k = 0; k < HUGE_SCAN_RANGES && ranges; k++) {
        uint32_t r = hg->cursor < ranges ? hg->cursor : 0;
        hg->cursor = r + 1;
        uint64_t bit = 1ull << (r % 64);
        if (h->huge[r / 64] & bit)
            continue;
        if (!range_in_use(h, r)) {
            h->huge_since[r] = 0;
            continue;
        }
        hg->found = true;
        if (!h->huge_since[r])
            h->huge_since[r] = hg->looks + 1;
        if (hg->looks + 1 - h->huge_since[r] < HUGE_SETTLE_LOOKS) /* in use at every look for the settling looks: it stays */
            continue;
        if (hg->in_flight >= TCM_HUGE_QUEUE)
            break;
        tcm__ph_huge_keep_ht(h, r); /* kept whole from now on */
        hand_over(hg, r);
    }
}

bool tcm__huge_busy(const tcm_server_t *srv)
{
    return srv->huge.in_flight || srv->huge.found;
}
