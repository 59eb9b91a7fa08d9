/* samples.c — the heap profile's tables in the state segment (docs/DESIGN.md,
 * "Heap profiles"): samples and the processes they name, a sample let go
 * when its run is freed (by whoever frees it), the tables recovered from
 * what the page heap holds, and read for a profile. What clients ask of
 * them is profile.c's. */
#define _GNU_SOURCE
#include "samples.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "log.h"

int tcm__samples_attach(tcm_samples_t *s, uint8_t *state_base, const tcm_state_layout_t *sl)
{
    memset(s, 0, sizeof *s);
    s->hdr = (tcm_profile_hdr_t *)(state_base + sl->off_profile);
    s->samples = (tcm_sample_t *)(state_base + sl->off_samples);
    s->procs = (tcm_sample_proc_t *)(state_base + sl->off_sample_procs);
    s->gen = 1;
    s->ahead_procs = s->ahead_samples = UINT32_MAX;
    if (tcm__shares_init(&s->by_uid, tcm__pow2_at_least(2ull * TCM_SAMPLES)) != 0 ||
        tcm__shares_init(&s->procs_by_uid, tcm__pow2_at_least(2ull * TCM_SAMPLE_PROCS)) != 0) {
        tcm__samples_detach(s);
        return -ENOMEM;
    }
    return 0;
}

void tcm__samples_detach(tcm_samples_t *s)
{
    tcm__shares_free(&s->by_uid);
    tcm__shares_free(&s->procs_by_uid);
}

/* ---- process records ---- */

void tcm__sample_proc_free(tcm_samples_t *s, uint32_t i)
{
    tcm_sample_proc_t *p = &s->procs[i];
    tcm__shares_drop(&s->procs_by_uid, p->uid);
    atomic_store_explicit(&p->state, TCM_SPROC_FREE, memory_order_release);
}

/* ---- samples ---- */

uint32_t tcm__sample_slot(tcm_samples_t *s)
{
    for (uint32_t w = s->lowest / 64; w < TCM_SAMPLES / 64; w++)
        if (~s->used[w]) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(~s->used[w]);
            s->lowest = i;
            return i;
        }
    return UINT32_MAX;
}

void tcm__sample_count(tcm_samples_t *s, uint32_t i)
{
    const tcm_sample_t *e = &s->samples[i];
    tcm__bit_set(s->used, i, true);
    s->refs[e->proc]++;
    tcm__shares_add(&s->by_uid, s->procs[e->proc].uid);
    atomic_fetch_add_explicit(&s->live, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->live_bytes, e->size, memory_order_relaxed);
}

/* Sample i goes; its span was cleared first (a kill in between leaves a
 * live sample whose run the recovery checks). */
static void sample_free(tcm_samples_t *s, uint32_t i)
{
    tcm_sample_t *e = &s->samples[i];
    uint32_t proc = e->proc;
    atomic_fetch_sub_explicit(&s->live_bytes, e->size, memory_order_relaxed);
    atomic_store_explicit(&e->state, 0, memory_order_release);
    tcm__bit_set(s->used, i, false);
    if (i < s->lowest)
        s->lowest = i;
    atomic_fetch_sub_explicit(&s->live, 1, memory_order_relaxed);
    if (proc >= TCM_SAMPLE_PROCS)
        return;
    tcm_sample_proc_t *p = &s->procs[proc];
    tcm__shares_drop(&s->by_uid, p->uid);
    if (s->refs[proc] && !--s->refs[proc] &&
        atomic_load_explicit(&p->state, memory_order_relaxed) == TCM_SPROC_DEPARTED)
        tcm__sample_proc_free(s, proc);
}

void tcm__sample_drop_ht(tcm_heap_t *h, uint32_t sp)
{
    uint32_t i = h->spans[sp].sample;
    if (!i)
        return;
    TCM_PERSIST_STORE(h->spans[sp].sample, 0);
    tcm_samples_t *s = &h->samples;
    if (i - 1 < TCM_SAMPLES && tcm__bit(s->used, i - 1))
        sample_free(s, i - 1);
}

/* ---- recovery ---- */

/* Whether sample e's run is still a page run: the first page of a LARGE span. */
static uint32_t run_span(const tcm_heap_t *h, const tcm_sample_t *e)
{
    if (e->run >= h->heap_size || e->run < TCM_PAGE_SIZE || (e->run & (TCM_PAGE_SIZE - 1)))
        return 0;
    uint32_t page = (uint32_t)(e->run >> TCM_PAGE_SHIFT);
    if (page >= h->top || h->page_class[page] != TCM_PAGE_CLASS_LARGE)
        return 0;
    uint32_t sp = h->page_span[page];
    return sp && h->spans[sp].first == page && h->spans[sp].state == TCM_SPAN_LARGE ? sp : 0;
}

static uint64_t recover_samples(tcm_heap_t *h)
{
    tcm_samples_t *s = &h->samples;
    uint64_t repairs = 0;
    uint32_t hw = atomic_load_explicit(&s->hdr->samples_hw, memory_order_relaxed);
    uint32_t phw = atomic_load_explicit(&s->hdr->procs_hw, memory_order_relaxed);
    if (hw > TCM_SAMPLES || phw > TCM_SAMPLE_PROCS) {
        tcm__log(TCM_LOG_ERROR, "recovery: heap profile tables marked used past their end (%u, %u): emptied", hw, phw);
        hw = phw = 0;
        atomic_store(&s->hdr->samples_hw, 0);
        atomic_store(&s->hdr->procs_hw, 0);
        repairs++;
    }
    for (uint64_t b = 0; b < (uint64_t)hw * sizeof(tcm_sample_t); b += 4096)
        tcm__bit_set(s->samples_backed, b / 4096, true);
    for (uint64_t b = 0; b < (uint64_t)phw * sizeof(tcm_sample_proc_t); b += 4096)
        tcm__bit_set(s->procs_backed, b / 4096, true);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_sample_t *e = &s->samples[i];
        uint32_t st = atomic_load_explicit(&e->state, memory_order_relaxed);
        if (!st)
            continue;
        uint32_t sp = run_span(h, e);
        bool proc_ok = e->proc < phw && atomic_load_explicit(&s->procs[e->proc].state, memory_order_relaxed) !=
                                            TCM_SPROC_FREE;
        if (!sp || !(st & 1) || !proc_ok || e->nframes > TCM_SAMPLE_FRAMES ||
            (h->spans[sp].sample && h->spans[sp].sample != TCM_SAMPLE_AWAITED && h->spans[sp].sample != i + 1)) {
            atomic_store_explicit(&e->state, 0, memory_order_relaxed); /* its run was freed, or torn */
            repairs++;
            continue;
        }
        if (h->spans[sp].sample != i + 1) {
            h->spans[sp].sample = i + 1; /* killed between the sample and its span */
            repairs++;
        }
        tcm__sample_count(s, i);
        if (st >= s->gen)
            s->gen = st + 2;
    }
    return repairs;
}

/* Every page run's span names its own live sample, a sample awaited or
 * none. */
static uint64_t recover_spans(tcm_heap_t *h)
{
    tcm_samples_t *s = &h->samples;
    uint64_t repairs = 0;
    for (uint32_t p = 1; p < h->top;) {
        uint32_t sp = h->page_class[p] == TCM_PAGE_CLASS_LARGE ? h->page_span[p] : 0;
        if (!sp || h->spans[sp].first != p || h->spans[sp].state != TCM_SPAN_LARGE) {
            p++;
            continue;
        }
        uint32_t i = h->spans[sp].sample;
        if (i && i != TCM_SAMPLE_AWAITED && (i - 1 >= TCM_SAMPLES || !tcm__bit(s->used, i - 1) || s->samples[i - 1].run != tcm__page_off(p))) {
            h->spans[sp].sample = 0;
            repairs++;
        }
        p += h->spans[sp].npages ? h->spans[sp].npages : 1;
    }
    return repairs;
}

uint64_t tcm__samples_recover_table_ht(tcm_heap_t *h)
{
    tcm_samples_t *s = &h->samples;
    memset(s->used, 0, sizeof s->used);
    memset(s->refs, 0, sizeof s->refs);
    s->lowest = 0;
    return recover_samples(h) + recover_spans(h);
}

/* ---- readers (the main thread) ---- */

bool tcm__sample_read(const tcm_samples_t *s, uint32_t i, tcm_sample_t *out)
{
    const tcm_sample_t *e = &s->samples[i];
    uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);
    if (!st)
        return false;
    memcpy((char *)out + sizeof out->state, (const char *)e + sizeof e->state, sizeof *e - sizeof e->state);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&e->state, memory_order_relaxed) != st)
        return false;
    out->nframes = out->nframes < TCM_SAMPLE_FRAMES ? out->nframes : TCM_SAMPLE_FRAMES;
    return true;
}

bool tcm__sample_proc_read(const tcm_samples_t *s, uint32_t i, tcm_sample_proc_t *out, char *maps, uint32_t *maps_len)
{
    const tcm_sample_proc_t *p = &s->procs[i];
    uint32_t st = atomic_load_explicit(&p->state, memory_order_acquire);
    if (st == TCM_SPROC_FREE)
        return false;
    memcpy((char *)out + sizeof out->state, (const char *)p + sizeof p->state,
           offsetof(tcm_sample_proc_t, maps) - sizeof p->state);
    uint32_t cur = atomic_load_explicit(&p->maps_cur, memory_order_acquire) & 1;
    uint32_t len = out->maps_len[cur] <= TCM_SAMPLE_MAPS_BYTES ? out->maps_len[cur] : 0;
    memcpy(maps, p->maps[cur], len);
    *maps_len = len;
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&p->state, memory_order_relaxed) != st)
        return false;
    out->state = st;
    return true;
}
