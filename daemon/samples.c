/* samples.c — the heap profile's samples and the processes they name
 * (docs/DESIGN.md, "Heap profiles"). A client samples an allocation by
 * giving it a page run of its own and telling tcmd the run, the size asked
 * for and its stack (TCM_OP_SAMPLE); tcmd stamps who sent it, keeps it in
 * the state segment, so it outlives the process and tcmd, and lets it go
 * when the run is freed, by whoever frees it. A client can lie about its
 * own stacks and mappings only: the run must be one it holds, and the
 * process a sample names is the one its ring belongs to. */
#define _GNU_SOURCE
#include "samples.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "central.h"
#include "heap.h"
#include "log.h"
#include "prim.h"
#include "server.h"

static bool bit(const uint64_t *bits, uint64_t i)
{
    return bits[i / 64] >> (i % 64) & 1;
}

static void bit_set(uint64_t *bits, uint64_t i, bool on)
{
    if (on)
        bits[i / 64] |= 1ull << (i % 64);
    else
        bits[i / 64] &= ~(1ull << (i % 64));
}

int tcm__samples_attach(tcm_samples_t *s, uint8_t *state_base, const tcm_state_layout_t *sl)
{
    memset(s, 0, sizeof *s);
    s->hdr = (tcm_profile_hdr_t *)(state_base + sl->off_profile);
    s->samples = (tcm_sample_t *)(state_base + sl->off_samples);
    s->procs = (tcm_sample_proc_t *)(state_base + sl->off_sample_procs);
    s->gen = 1;
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

/* Pages [from, from + len) of a table, backed before they are written (a
 * write to a hole of a full /dev/shm would be a SIGBUS). */
static bool back(tcm_heap_t *h, uint64_t *bits, uint64_t table_off, uint64_t from, uint64_t len)
{
    for (uint64_t page = from / 4096; page <= (from + len - 1) / 4096; page++) {
        if (bit(bits, page))
            continue;
        int err = h->state_fd >= 0 ? tcm__commit(h->state_fd, table_off + page * 4096, 4096) : 0;
        if (err) {
            tcm__log_limited(TCM_LOG_WARN, "heap profile: backing its tables failed: %s", strerror(-err));
            return false;
        }
        bit_set(bits, page, true);
    }
    return true;
}

static uint32_t unix_now(void)
{
    return (uint32_t)time(NULL);
}

/* ---- process records ---- */

static void proc_free(tcm_samples_t *s, uint32_t i)
{
    tcm_sample_proc_t *p = &s->procs[i];
    tcm__shares_drop(&s->procs_by_uid, p->uid);
    atomic_store_explicit(&p->state, TCM_SPROC_FREE, memory_order_release);
}

/* c's record: the one it has, one a previous tcmd made for it, or a new
 * one (UINT32_MAX: the table or the user's share is full). */
static uint32_t proc_for(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_samples_t *s = &srv->h.samples;
    const tcm_client_rec_t *rec = c->rec;
    uint32_t hw = atomic_load_explicit(&s->hdr->procs_hw, memory_order_relaxed), free_one = UINT32_MAX;
    if (c->sample_proc && c->sample_proc <= hw)
        return c->sample_proc - 1;
    for (uint32_t i = 0; i < hw; i++) {
        tcm_sample_proc_t *p = &s->procs[i];
        uint32_t st = atomic_load_explicit(&p->state, memory_order_relaxed);
        if (st == TCM_SPROC_LIVE && p->client_id == rec->id && p->pid == rec->pid &&
            p->proc_start == rec->proc_start) {
            c->sample_proc = i + 1;
            return i;
        }
        if (st == TCM_SPROC_FREE && free_one == UINT32_MAX)
            free_one = i;
    }
    if (tcm__shares_of(&s->procs_by_uid, rec->uid) >= TCM_SAMPLE_PROCS_PER_UID)
        return UINT32_MAX;
    uint32_t i = free_one != UINT32_MAX ? free_one : hw;
    if (i >= TCM_SAMPLE_PROCS ||
        !back(&srv->h, s->procs_backed, srv->h.sl.off_sample_procs, (uint64_t)i * sizeof(tcm_sample_proc_t),
              sizeof(tcm_sample_proc_t)))
        return UINT32_MAX;
    if (i == hw)
        atomic_store_explicit(&s->hdr->procs_hw, hw + 1, memory_order_release);
    tcm_sample_proc_t *p = &s->procs[i];
    p->client_id = rec->id;
    p->pid = rec->pid;
    p->uid = rec->uid;
    p->proc_start = rec->proc_start;
    p->attached_unix = rec->attached_unix;
    p->departed_unix = 0;
    p->maps_len[0] = p->maps_len[1] = p->maps_fill = 0;
    atomic_store_explicit(&p->maps_cur, 0, memory_order_relaxed);
    memcpy(p->comm, c->comm, sizeof p->comm);
    memcpy(p->exe, c->exe, sizeof p->exe);
    atomic_store_explicit(&p->state, TCM_SPROC_LIVE, memory_order_release);
    s->refs[i] = 0;
    tcm__shares_add(&s->procs_by_uid, rec->uid);
    c->sample_proc = i + 1;
    return i;
}

void tcm__sample_client_gone_ht(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_samples_t *s = &srv->h.samples;
    if (!c->sample_proc)
        return;
    uint32_t i = c->sample_proc - 1;
    c->sample_proc = 0;
    tcm_sample_proc_t *p = &s->procs[i];
    if (atomic_load_explicit(&p->state, memory_order_relaxed) != TCM_SPROC_LIVE)
        return;
    p->departed_unix = unix_now();
    if (s->refs[i])
        atomic_store_explicit(&p->state, TCM_SPROC_DEPARTED, memory_order_release);
    else
        proc_free(s, i);
}

/* What a process says of its mappings: printable text and newlines. */
static bool text_ok(const char *text, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        if ((text[i] < ' ' || text[i] > '~') && text[i] != '\n')
            return false;
    return true;
}

int tcm__sample_maps_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t pos, uint64_t total, const char *text,
                        uint32_t len)
{
    if (!atomic_load_explicit(&srv->meta->profile_sample, memory_order_relaxed))
        return TCM_ST_OK; /* sampling was turned off: nothing is kept */
    if (total > TCM_SAMPLE_MAPS_BYTES || pos > total || len > total - pos || !text_ok(text, len))
        return TCM_ST_BAD_COUNT;
    uint32_t i = proc_for(srv, c);
    if (i == UINT32_MAX)
        return TCM_ST_OK;
    tcm_sample_proc_t *p = &srv->h.samples.procs[i];
    uint32_t other = 1 - atomic_load_explicit(&p->maps_cur, memory_order_relaxed);
    if (pos == 0)
        p->maps_fill = 0;
    if (pos != p->maps_fill)
        return TCM_ST_BAD_COUNT; /* in order, from the start */
    memcpy(p->maps[other] + pos, text, len);
    p->maps_fill = (uint32_t)(pos + len);
    if (p->maps_fill == total) {
        p->maps_len[other] = (uint32_t)total;
        atomic_store_explicit(&p->maps_cur, other, memory_order_release);
        p->maps_fill = 0;
        atomic_fetch_add_explicit(&srv->h.samples.maps_texts, 1, memory_order_relaxed);
    }
    return TCM_ST_OK;
}

/* ---- samples ---- */

static uint32_t sample_slot(tcm_samples_t *s)
{
    for (uint32_t w = s->lowest / 64; w < TCM_SAMPLES / 64; w++)
        if (~s->used[w]) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(~s->used[w]);
            s->lowest = i;
            return i;
        }
    return UINT32_MAX;
}

int tcm__sample_take_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t run, uint64_t size, uint64_t interval,
                        const uint64_t *frames, uint32_t nframes, bool *recorded)
{
    tcm_heap_t *h = &srv->h;
    tcm_samples_t *s = &h->samples;
    *recorded = false;
    uint32_t sp;
    int st = tcm__large_check_ht(h, run, &sp);
    if (st != TCM_ST_OK)
        return st;
    if (h->spans[sp].owner != c->rec->tag)
        return TCM_ST_NOT_OBJECT; /* only a run the client itself allocated */
    if (nframes > TCM_SAMPLE_FRAMES || size == 0 || size > tcm__page_off(h->spans[sp].npages) || interval == 0)
        return TCM_ST_BAD_COUNT;
    if (h->spans[sp].sample || !atomic_load_explicit(&srv->meta->profile_sample, memory_order_relaxed))
        return TCM_ST_OK; /* sampled already; or sampling was turned off since */
    uint32_t uid = c->rec->uid;
    if (tcm__shares_of(&s->by_uid, uid) >= TCM_SAMPLES_PER_UID) {
        atomic_fetch_add_explicit(&s->refused_share, 1, memory_order_relaxed);
        return TCM_ST_OK;
    }
    uint32_t proc = proc_for(srv, c), i = sample_slot(s);
    if (proc == UINT32_MAX || i == UINT32_MAX ||
        !back(h, s->samples_backed, h->sl.off_samples, (uint64_t)i * sizeof(tcm_sample_t), sizeof(tcm_sample_t))) {
        atomic_fetch_add_explicit(&s->refused_full, 1, memory_order_relaxed);
        return TCM_ST_OK;
    }
    uint32_t hw = atomic_load_explicit(&s->hdr->samples_hw, memory_order_relaxed);
    if (i >= hw) /* before the entry: a reader and a recovery look below it only */
        atomic_store_explicit(&s->hdr->samples_hw, i + 1, memory_order_release);
    tcm_sample_t *e = &s->samples[i];
    e->proc = proc;
    e->run = run;
    e->size = size;
    e->interval = interval;
    e->born_unix = unix_now();
    e->nframes = (uint16_t)nframes;
    e->reserved = 0;
    memcpy(e->frames, frames, nframes * sizeof frames[0]);
    atomic_store_explicit(&e->state, s->gen, memory_order_release);
    s->gen += 2;
    TCM_PERSIST_STORE(h->spans[sp].sample, i + 1);
    bit_set(s->used, i, true);
    s->refs[proc]++;
    tcm__shares_add(&s->by_uid, uid);
    atomic_fetch_add_explicit(&s->live, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->live_bytes, size, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->taken, 1, memory_order_relaxed);
    *recorded = true;
    return TCM_ST_OK;
}

/* Sample i goes; its span was cleared first (a kill in between leaves a
 * live sample whose run the recovery checks). */
static void sample_free(tcm_samples_t *s, uint32_t i)
{
    tcm_sample_t *e = &s->samples[i];
    uint32_t proc = e->proc;
    atomic_fetch_sub_explicit(&s->live_bytes, e->size, memory_order_relaxed);
    atomic_store_explicit(&e->state, 0, memory_order_release);
    bit_set(s->used, i, false);
    if (i < s->lowest)
        s->lowest = i;
    atomic_fetch_sub_explicit(&s->live, 1, memory_order_relaxed);
    if (proc >= TCM_SAMPLE_PROCS)
        return;
    tcm_sample_proc_t *p = &s->procs[proc];
    tcm__shares_drop(&s->by_uid, p->uid);
    if (s->refs[proc] && !--s->refs[proc] &&
        atomic_load_explicit(&p->state, memory_order_relaxed) == TCM_SPROC_DEPARTED)
        proc_free(s, proc);
}

void tcm__sample_drop_ht(tcm_heap_t *h, uint32_t sp)
{
    uint32_t i = h->spans[sp].sample;
    if (!i)
        return;
    TCM_PERSIST_STORE(h->spans[sp].sample, 0);
    tcm_samples_t *s = &h->samples;
    if (i - 1 < TCM_SAMPLES && bit(s->used, i - 1)) {
        sample_free(s, i - 1);
        atomic_fetch_add_explicit(&s->dropped, 1, memory_order_relaxed);
    }
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

/* A live process record whose client is no longer attached departs. */
static bool client_attached(const tcm_server_t *srv, const tcm_sample_proc_t *p)
{
    const tcm_client_rec_t *recs = (const tcm_client_rec_t *)((const uint8_t *)srv->state + srv->h.sl.off_clients);
    uint32_t n = srv->state->max_clients < TCM_CLIENTS_MAX ? srv->state->max_clients : TCM_CLIENTS_MAX;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t st = atomic_load_explicit(&recs[i].state, memory_order_relaxed);
        if ((st == TCM_REC_ACTIVE || st == TCM_REC_EVICTED) && recs[i].id == p->client_id && recs[i].pid == p->pid)
            return true;
    }
    return false;
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
        bit_set(s->samples_backed, b / 4096, true);
    for (uint64_t b = 0; b < (uint64_t)phw * sizeof(tcm_sample_proc_t); b += 4096)
        bit_set(s->procs_backed, b / 4096, true);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_sample_t *e = &s->samples[i];
        uint32_t st = atomic_load_explicit(&e->state, memory_order_relaxed);
        if (!st)
            continue;
        uint32_t sp = run_span(h, e);
        bool proc_ok = e->proc < phw && atomic_load_explicit(&s->procs[e->proc].state, memory_order_relaxed) !=
                                            TCM_SPROC_FREE;
        if (!sp || !(st & 1) || !proc_ok || e->nframes > TCM_SAMPLE_FRAMES ||
            (h->spans[sp].sample && h->spans[sp].sample != i + 1)) {
            atomic_store_explicit(&e->state, 0, memory_order_relaxed); /* its run was freed, or torn */
            repairs += sp != 0;
            continue;
        }
        if (h->spans[sp].sample != i + 1) {
            h->spans[sp].sample = i + 1; /* killed between the sample and its span */
            repairs++;
        }
        bit_set(s->used, i, true);
        s->refs[e->proc]++;
        tcm__shares_add(&s->by_uid, s->procs[e->proc].uid);
        atomic_fetch_add_explicit(&s->live, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->live_bytes, e->size, memory_order_relaxed);
        if (st >= s->gen)
            s->gen = st + 2;
    }
    return repairs;
}

/* Every page run's span names its own live sample or none. */
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
        if (i && (i - 1 >= TCM_SAMPLES || !bit(s->used, i - 1) || s->samples[i - 1].run != tcm__page_off(p))) {
            h->spans[sp].sample = 0;
            repairs++;
        }
        p += h->spans[sp].npages ? h->spans[sp].npages : 1;
    }
    return repairs;
}

uint64_t tcm__samples_recover_ht(tcm_server_t *srv)
{
    tcm_heap_t *h = &srv->h;
    tcm_samples_t *s = &h->samples;
    memset(s->used, 0, sizeof s->used);
    memset(s->refs, 0, sizeof s->refs);
    s->lowest = 0;
    uint64_t repairs = recover_samples(h) + recover_spans(h);
    uint32_t phw = atomic_load_explicit(&s->hdr->procs_hw, memory_order_relaxed);
    for (uint32_t i = 0; i < phw; i++) {
        tcm_sample_proc_t *p = &s->procs[i];
        uint32_t st = atomic_load_explicit(&p->state, memory_order_relaxed);
        if (st == TCM_SPROC_FREE)
            continue;
        if (st > TCM_SPROC_DEPARTED || atomic_load_explicit(&p->maps_cur, memory_order_relaxed) > 1) {
            atomic_store_explicit(&p->state, TCM_SPROC_FREE, memory_order_relaxed); /* torn */
            repairs++;
            continue;
        }
        p->maps_fill = 0;
        for (unsigned k = 0; k < 2; k++)
            if (p->maps_len[k] > TCM_SAMPLE_MAPS_BYTES)
                p->maps_len[k] = 0;
        if (st == TCM_SPROC_LIVE && !client_attached(srv, p)) {
            p->departed_unix = unix_now();
            atomic_store_explicit(&p->state, st = TCM_SPROC_DEPARTED, memory_order_relaxed);
        }
        if (st == TCM_SPROC_DEPARTED && !s->refs[i]) {
            atomic_store_explicit(&p->state, TCM_SPROC_FREE, memory_order_relaxed);
            continue;
        }
        tcm__shares_add(&s->procs_by_uid, p->uid);
    }
    return repairs;
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
