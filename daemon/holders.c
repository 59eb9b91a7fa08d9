/* holders.c — owner tags, and what departed clients leave allocated
 * (docs/DESIGN.md, "Departed holders").
 *
 * Every object and page run carries the 16-bit tag of the client it was
 * handed to. A live client's tag is in its record; when the client goes
 * and still holds something (objects it shared, or leaked), its tag moves
 * to an entry of the holders table with its pid, names and time, so that
 * what it left is attributed exactly. The table has TCM_HOLDERS entries;
 * when it is full the next departure first merges an older holder into
 * the group of its user's processes of its executable (TCM_HOLDER_GROUPS
 * of them, the first one for every pair the others leave out: a user's
 * quota counts its groups, not that one): the merged tag is noted in
 * remap[], the accounting moves at once, and a sweep of bounded steps
 * rewrites the owner words that still name it. Two full passes after the
 * merge no object names the old tag, and it is free again. A tag that
 * owns nothing is free at once. So tags never run out whatever departed
 * processes left, and nothing here grows with the number of lifetimes.
 *
 * Crash: the table and remap[] are authoritative (state segment; an entry
 * is written fields first, state last; a merge stores remap[] before it
 * frees the entry), everything else (tag_used, tag_client, tag_holder,
 * tag_orphaned, the sweep's position) is rebuilt by recovery, which
 * finishes every merge before serving. */
#define _GNU_SOURCE
#include "holders.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heap.h"
#include "log.h"
#include "quota.h"

#define NENTRIES (TCM_HOLDER_GROUPS + TCM_HOLDERS)
#define FIRST_HOLDER TCM_HOLDER_GROUPS /* entries [0, groups) are groups; [0] every other executable */
#define MERGE_SPANS_PER_STEP 256       /* spans the sweep looks at per heap-thread turn */

static bool tag_used(const tcm_server_t *srv, uint32_t t)
{
    return tcm__bit(srv->tag_used, t);
}

static void tag_mark(tcm_server_t *srv, uint32_t t, bool used)
{
    tcm__bit_set(srv->tag_used, t, used);
}

/* under holders_lock */
static int tag_new_locked(tcm_server_t *srv, uint16_t *out)
{
    for (uint32_t k = 0; k < TCM_TAGS; k++) {
        uint32_t t = (srv->tag_next + k) % TCM_TAGS;
        if (t && !tag_used(srv, t)) {
            tag_mark(srv, t, true);
            srv->tag_next = t + 1;
            *out = (uint16_t)t;
            return 0;
        }
    }
    return -EMFILE;
}

int tcm__tag_take(tcm_server_t *srv, uint32_t rec_index, uint16_t *tag)
{
    pthread_mutex_lock(&srv->holders_lock);
    int err = tag_new_locked(srv, tag);
    if (!err)
        atomic_store_explicit(&srv->tag_client[*tag], (uint16_t)(rec_index + 1), memory_order_relaxed);
    pthread_mutex_unlock(&srv->holders_lock);
    return err;
}

void tcm__tag_give_back(tcm_server_t *srv, uint16_t tag)
{
    pthread_mutex_lock(&srv->holders_lock);
    atomic_store_explicit(&srv->tag_client[tag], 0, memory_order_relaxed);
    tag_mark(srv, tag, false);
    pthread_mutex_unlock(&srv->holders_lock);
}

tcm_client_t *tcm__tag_client_ht(tcm_server_t *srv, uint16_t tag)
{
    uint32_t i = atomic_load_explicit(&srv->tag_client[tag], memory_order_relaxed);
    if (!i)
        return NULL;
    tcm_client_t *c = atomic_load_explicit(&srv->clients[i - 1], memory_order_acquire);
    return c && c->rec->tag == tag ? c : NULL;
}

/* ---- the persistent parts, backed before they are written ---- */

static bool back_entry(tcm_server_t *srv, uint32_t i)
{
    return tcm__state_back(&srv->h, srv->entries_backed, srv->h.sl.off_holders, (uint64_t)i * sizeof(tcm_holder_t),
                           sizeof(tcm_holder_t), "departed holders");
}

/* Entry i lies on backed pages: it may be read (an entry on a page never
 * backed was never written: it is free). */
static bool readable(const tcm_server_t *srv, uint32_t i)
{
    uint64_t from = (uint64_t)i * sizeof(tcm_holder_t), to = from + sizeof(tcm_holder_t) - 1;
    return tcm__bit(srv->entries_backed, from / 4096) && tcm__bit(srv->entries_backed, to / 4096);
}

static uint32_t state_of(const tcm_server_t *srv, uint32_t i)
{
    return readable(srv, i) ? atomic_load_explicit(&srv->holders[i].state, memory_order_acquire) : TCM_HOLDER_FREE;
}

/* The group tag t is being merged into, or 0. */
static uint16_t remap_of(const tcm_server_t *srv, uint32_t t)
{
    return tcm__bit(srv->tag_merging, t) ? srv->remap[t] : 0;
}

static bool set_remap(tcm_server_t *srv, uint16_t t, uint16_t to)
{
    if (to && !tcm__state_back(&srv->h, &srv->remap_backed, srv->h.sl.off_remap, (uint64_t)t * 2, 2, "departed holders"))
        return false;
    TCM_PERSIST_STORE(srv->remap[t], to);
    tcm__bit_set(srv->tag_merging, t, to != 0);
    return true;
}

/* A free entry in [from, to): one already backed, else the first that can
 * be; UINT32_MAX when none. Under holders_lock. */
static uint32_t free_entry_locked(tcm_server_t *srv, uint32_t from, uint32_t to)
{
    uint32_t unbacked = UINT32_MAX;
    for (uint32_t i = from; i < to; i++) {
        if (!readable(srv, i)) {
            if (unbacked == UINT32_MAX)
                unbacked = i;
        } else if (atomic_load_explicit(&srv->holders[i].state, memory_order_relaxed) == TCM_HOLDER_FREE) {
            return i;
        }
    }
    return unbacked != UINT32_MAX && back_entry(srv, unbacked) ? unbacked : UINT32_MAX;
}

/* ---- merging: a tag's objects go to another tag ---- */

/* Rewrite the owner tags of one span (the one page p is in) by remap[];
 * the page after it. */
static uint32_t remap_span(tcm_server_t *srv, uint32_t p)
{
    tcm_heap_t *h = &srv->h;
    if (h->page_class[p] == TCM_PAGE_CLASS_FREE)
        return p + 1;
    tcm_span_t *sp = &h->spans[h->page_span[p]];
    if (sp->first > p || sp->first + sp->npages <= p) /* a record that does not cover its page: not ours to fix */
        return p + 1;
    uint16_t to;
    if (sp->state == TCM_SPAN_LARGE) {
        if ((to = remap_of(srv, (uint16_t)sp->owner)) != 0)
            TCM_PERSIST_STORE(sp->owner, to);
    } else if (sp->state == TCM_SPAN_SMALL && sp->cls > 0 && sp->cls < TCM_NCLASSES) {
        uint32_t *owners = tcm__span_owners(h, sp);
        for (uint32_t w = 0; w < (h->classes[sp->cls].span_objs + 63) / 64; w++) {
            uint32_t ow = owners[w];
            if (!(ow & TCM_OWNER_BLOCK)) {
                if ((to = remap_of(srv, (uint16_t)ow)) != 0)
                    TCM_PERSIST_STORE(owners[w], to);
                continue;
            }
            uint16_t *tags = tcm__tag_block(h, ow);
            for (unsigned i = 0; i < 64; i++)
                if ((to = remap_of(srv, tags[i])) != 0)
                    TCM_PERSIST_STORE(tags[i], to);
        }
    }
    return sp->first + sp->npages;
}

/* The merges that two passes have seen through: their tags are free. */
static void finish_merges(tcm_server_t *srv, bool all)
{
    pthread_mutex_lock(&srv->holders_lock);
    for (uint32_t w = 0; w < TCM_TAGS / 64 && srv->merging; w++)
        for (uint64_t bits = srv->tag_merging[w]; bits; bits &= bits - 1) {
            uint32_t t = w * 64 + (uint32_t)__builtin_ctzll(bits);
            if (all || (int32_t)(srv->merge_pass - srv->merge_done_at[t]) >= 0) {
                set_remap(srv, (uint16_t)t, 0);
                tag_mark(srv, t, false);
                srv->merging--;
            }
        }
    pthread_mutex_unlock(&srv->holders_lock);
}

bool tcm__holders_pending(const tcm_server_t *srv)
{
    return srv->merging != 0;
}

bool tcm__holders_step_ht(tcm_server_t *srv)
{
    if (!srv->merging)
        return false;
    uint32_t p = srv->merge_cursor ? srv->merge_cursor : 1;
    for (unsigned n = 0; n < MERGE_SPANS_PER_STEP && p < srv->h.top; n++)
        p = remap_span(srv, p);
    if (p >= srv->h.top) {
        p = 1;
        srv->merge_pass++;
        finish_merges(srv, false);
    }
    srv->merge_cursor = p;
    return true;
}

/* Every merge noted in remap[] carried out now (recovery: nothing is
 * served meanwhile). */
static void sweep_all(tcm_server_t *srv)
{
    for (uint32_t p = 1; p < srv->h.top;)
        p = remap_span(srv, p);
    finish_merges(srv, true);
    srv->merge_cursor = 1;
}

/* ---- the table ---- */

static uint64_t bytes_of(const tcm_server_t *srv, uint16_t tag)
{
    return atomic_load_explicit(&srv->tag_orphaned[tag], memory_order_relaxed);
}

static void entry_free_locked(tcm_server_t *srv, uint32_t i)
{
    tcm_holder_t *e = &srv->holders[i];
    srv->tag_holder[e->tag] = 0;
    atomic_store_explicit(&e->state, TCM_HOLDER_FREE, memory_order_release);
}

/* The group of uid's processes of executable exe: its entry, a new one,
 * or the first. Under holders_lock; UINT32_MAX when not even the first can
 * be backed. */
static uint32_t group_for_locked(tcm_server_t *srv, uint32_t uid, const char *exe)
{
    for (uint32_t g = 1; g < TCM_HOLDER_GROUPS && exe[0]; g++)
        if (state_of(srv, g) == TCM_HOLDER_GROUP && srv->holders[g].uid == uid &&
            !strncmp(srv->holders[g].exe, exe, TCM_EXE_MAX))
            return g;
    uint32_t g = exe[0] ? free_entry_locked(srv, 1, TCM_HOLDER_GROUPS) : UINT32_MAX;
    if (g == UINT32_MAX) { /* every other executable's */
        if (state_of(srv, 0) == TCM_HOLDER_GROUP)
            return 0;
        if (!back_entry(srv, 0))
            return UINT32_MAX;
        g = 0;
    }
    tcm_holder_t *e = &srv->holders[g];
    uint16_t tag;
    if (tag_new_locked(srv, &tag) != 0)
        return UINT32_MAX;
    memset(e, 0, sizeof *e);
    e->tag = tag;
    e->uid = uid;
    snprintf(e->exe, sizeof e->exe, "%s", g ? exe : "(other executables)");
    atomic_store_explicit(&e->state, TCM_HOLDER_GROUP, memory_order_release);
    srv->tag_holder[tag] = (uint16_t)(g + 1);
    if (g)
        tcm__quota_group_ht(srv, tag, uid);
    TCM_STAT_ADD(srv->meta, departed_groups, 1);
    return g;
}

/* Holder i's objects become its executable's group's: the accounting at
 * once, the owner words by the sweep. Under holders_lock; false if the
 * group could not be made. */
static bool merge_locked(tcm_server_t *srv, uint32_t i)
{
    tcm_holder_t *e = &srv->holders[i];
    uint32_t g = group_for_locked(srv, e->uid, e->exe);
    if (g == UINT32_MAX)
        return false;
    tcm_holder_t *ge = &srv->holders[g];
    if (!set_remap(srv, e->tag, ge->tag))
        return false;
    srv->merge_done_at[e->tag] = srv->merge_pass + 2; /* the pass under way may have passed some of its spans */
    srv->merging++;
    tcm__quota_merge_ht(srv, e->tag, ge->tag, bytes_of(srv, e->tag));
    atomic_fetch_add_explicit(&srv->tag_orphaned[ge->tag], bytes_of(srv, e->tag), memory_order_relaxed);
    atomic_store_explicit(&srv->tag_orphaned[e->tag], 0, memory_order_relaxed);
    ge->processes += e->processes;
    ge->id = e->id, ge->pid = e->pid;
    if (!g)
        ge->uid = e->uid;
    ge->departed_unix = e->departed_unix;
    memcpy(ge->comm, e->comm, sizeof ge->comm);
    entry_free_locked(srv, i); /* its tag stays in use until the sweep is through */
    TCM_STAT_ADD(srv->meta, holder_merges, 1);
    TCM_STAT_ADD(srv->meta, departed_holders, -1);
    return true;
}

/* A holder entry for a departure: a free one, else the one the eviction
 * clock reaches (an older holder, merged into its group). */
static uint32_t entry_for_locked(tcm_server_t *srv)
{
    /* a full table (every departure of a churn once it is) evicts at once */
    uint32_t i = atomic_load_explicit(&srv->meta->stats.departed_holders, memory_order_relaxed) < TCM_HOLDERS
                     ? free_entry_locked(srv, FIRST_HOLDER, NENTRIES)
                     : UINT32_MAX;
    if (i != UINT32_MAX)
        return i;
    for (uint32_t k = 0; k < TCM_HOLDERS; k++) {
        i = FIRST_HOLDER + srv->evict_cursor++ % TCM_HOLDERS;
        if (state_of(srv, i) == TCM_HOLDER_HELD && merge_locked(srv, i))
            return i;
    }
    return UINT32_MAX;
}

void tcm__holder_depart_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t held)
{
    tcm_client_rec_t *rec = c->rec;
    uint16_t t = rec->tag;
    atomic_store_explicit(&srv->tag_client[t], 0, memory_order_relaxed);
    if (!held) {
        tcm__quota_drop_tag_ht(srv, t);
        tcm__tag_give_back(srv, t);
        return;
    }
    pthread_mutex_lock(&srv->holders_lock);
    if (srv->tag_holder[t]) { /* a reclaim redone after a crash */
        pthread_mutex_unlock(&srv->holders_lock);
        return;
    }
    uint32_t i = entry_for_locked(srv);
    if (i == UINT32_MAX) { /* nothing can be backed: the tag stays in use, counted, unnamed until a restart */
        pthread_mutex_unlock(&srv->holders_lock);
        tcm__log_limited(TCM_LOG_ERROR, "client %u (pid %u): no room to record what it left (%llu bytes)",
                         rec->id, rec->pid, (unsigned long long)held);
        return;
    }
    tcm_holder_t *e = &srv->holders[i];
    memset(e, 0, sizeof *e);
    e->tag = t;
    e->id = rec->id, e->pid = rec->pid, e->uid = rec->uid;
    e->processes = 1;
    e->departed_unix = (uint64_t)time(NULL);
    memcpy(e->comm, c->comm, sizeof e->comm);
    memcpy(e->exe, c->exe, sizeof e->exe);
    e->comm[sizeof e->comm - 1] = e->exe[sizeof e->exe - 1] = 0;
    atomic_store_explicit(&e->state, TCM_HOLDER_HELD, memory_order_release);
    srv->tag_holder[t] = (uint16_t)(i + 1);
    TCM_STAT_ADD(srv->meta, departed_holders, 1);
    pthread_mutex_unlock(&srv->holders_lock);
}

void tcm__holder_credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes)
{
    uint16_t to = remap_of(srv, tag), t = to ? to : tag;
    tcm__quota_credit_ht(srv, t, bytes);
    uint64_t left = bytes_of(srv, t);
    left = left > bytes ? left - bytes : 0;
    atomic_store_explicit(&srv->tag_orphaned[t], left, memory_order_relaxed);
    uint32_t i = srv->tag_holder[t];
    if (left || !i)
        return;
    pthread_mutex_lock(&srv->holders_lock);
    uint32_t st = atomic_load_explicit(&srv->holders[i - 1].state, memory_order_relaxed);
    entry_free_locked(srv, i - 1);
    tag_mark(srv, t, false); /* owns nothing (a merged tag's objects counted here are gone too) */
    pthread_mutex_unlock(&srv->holders_lock);
    tcm__quota_drop_tag_ht(srv, t);
    if (st == TCM_HOLDER_GROUP)
        TCM_STAT_ADD(srv->meta, departed_groups, -1);
    else
        TCM_STAT_ADD(srv->meta, departed_holders, -1);
}

/* ---- start, recovery, validation ---- */

void tcm__holders_init(tcm_server_t *srv, bool fresh)
{
    uint8_t *sb = (uint8_t *)srv->state;
    pthread_mutex_init(&srv->holders_lock, NULL);
    srv->remap = (uint16_t *)(sb + srv->h.sl.off_remap);
    srv->holders = (tcm_holder_t *)(sb + srv->h.sl.off_holders);
    srv->tag_used[0] = 1; /* tag 0 is nobody */
    srv->tag_next = 1;
    srv->entries_backed[0] = fresh; /* the first group's page, backed with the segment */
}

/* Which pages of [off, off + pages * 4096) of the state segment hold
 * anything: written ones (a page only fallocated, or a hole, reads as
 * zeros: nothing in it to read). */
static void find_backed(const tcm_server_t *srv, uint64_t off, uint64_t pages, uint64_t *bits)
{
    for (uint64_t p = 0; p < pages; p++)
        tcm__bit_set(bits, p, srv->state_fd < 0 || tcm__backed_range(srv->state_fd, off + p * 4096, 4096) == 1);
}

uint64_t tcm__holders_recover(tcm_server_t *srv, uint64_t *held)
{
    memset(srv->tag_used, 0, sizeof srv->tag_used);
    memset(srv->tag_holder, 0, sizeof srv->tag_holder);
    memset(srv->tag_merging, 0, sizeof srv->tag_merging);
    memset(srv->merge_done_at, 0, sizeof srv->merge_done_at);
    srv->merging = 0;
    for (uint32_t t = 0; t < TCM_TAGS; t++)
        atomic_store(&srv->tag_client[t], 0);
    /* the pages written before; the rest is backed again before a write */
    memset(srv->entries_backed, 0, sizeof srv->entries_backed);
    srv->remap_backed = 0;
    find_backed(srv, srv->h.sl.off_remap, TCM_TAGS * sizeof(uint16_t) / 4096, &srv->remap_backed);
    find_backed(srv, srv->h.sl.off_holders, (NENTRIES * sizeof(tcm_holder_t) + 4095) / 4096, srv->entries_backed);
    /* interrupted merges: their bytes are their groups' */
    for (uint32_t t = 1; t < TCM_TAGS; t++) {
        if (!tcm__bit(&srv->remap_backed, (uint64_t)t * 2 / 4096) || !srv->remap[t])
            continue;
        uint16_t to = srv->remap[t];
        tcm__bit_set(srv->tag_merging, t, true);
        held[to] += held[t];
        held[t] = 0;
        tag_mark(srv, t, true);
        srv->merging++;
    }
    srv->tag_used[0] |= 1; /* tag 0 is nobody */
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (c) {
            tag_mark(srv, c->rec->tag, true);
            atomic_store(&srv->tag_client[c->rec->tag], (uint16_t)(i + 1));
        }
    }
    uint64_t departed = 0, holders = 0, groups = 0;
    for (uint32_t i = 0; i < NENTRIES; i++) {
        tcm_holder_t *e = &srv->holders[i];
        uint32_t st = state_of(srv, i);
        if (st == TCM_HOLDER_FREE)
            continue;
        bool is_group = i < FIRST_HOLDER;
        if (st != (is_group ? TCM_HOLDER_GROUP : TCM_HOLDER_HELD) || !e->tag || tag_used(srv, e->tag) ||
            !held[e->tag]) { /* garbage, a second entry for a tag, or nothing left: free */
            atomic_store(&e->state, TCM_HOLDER_FREE);
            continue;
        }
        tag_mark(srv, e->tag, true);
        srv->tag_holder[e->tag] = (uint16_t)(i + 1);
        atomic_store(&srv->tag_orphaned[e->tag], held[e->tag]);
        departed += held[e->tag];
        held[e->tag] = 0;
        *(is_group ? &groups : &holders) += 1;
    }
    TCM_STAT_SET(srv->meta, departed_holders, holders);
    TCM_STAT_SET(srv->meta, departed_groups, groups);
    /* what no entry names (a departure a crash cut short): every other executable's */
    uint64_t unknown = 0;
    for (uint32_t t = 1; t < TCM_TAGS; t++)
        if (held[t] && !tag_used(srv, t))
            unknown += held[t];
    if (unknown) {
        pthread_mutex_lock(&srv->holders_lock);
        uint32_t g = group_for_locked(srv, 0, "");
        pthread_mutex_unlock(&srv->holders_lock);
        uint16_t to = g == UINT32_MAX ? 0 : srv->holders[g].tag;
        for (uint32_t t = 1; t < TCM_TAGS && to; t++)
            if (held[t] && !tag_used(srv, t) && set_remap(srv, (uint16_t)t, to)) {
                tag_mark(srv, t, true);
                srv->merging++;
                atomic_fetch_add(&srv->tag_orphaned[to], held[t]);
                departed += held[t];
                held[t] = 0;
            }
        tcm__log(TCM_LOG_INFO, "recovery: %llu bytes under tags no departed holder named, given to \"%s\"",
                 (unsigned long long)unknown, to ? srv->holders[g].exe : "nobody");
    }
    sweep_all(srv); /* twice: a tag merged into one that was itself merged above */
    sweep_all(srv);
    srv->tag_next = 1;
    return departed;
}

bool tcm__holders_validate(tcm_server_t *srv, uint64_t *held, char *why, size_t whylen)
{
    for (uint32_t t = 1; t < TCM_TAGS; t++) {
        uint16_t to = remap_of(srv, t);
        if (to) { /* not swept yet: its group's */
            held[to] += held[t];
            held[t] = 0;
        }
    }
    for (uint32_t t = 1; t < TCM_TAGS; t++) {
        uint64_t want = bytes_of(srv, t);
        if (held[t] != want) {
            snprintf(why, whylen, "departed tag %u: the owner tags say it holds %llu bytes, its count %llu", t,
                     (unsigned long long)held[t], (unsigned long long)want);
            return false;
        }
        if (held[t] && !srv->tag_holder[t]) {
            snprintf(why, whylen, "departed tag %u holds %llu bytes and no holder entry names it", t,
                     (unsigned long long)held[t]);
            return false;
        }
    }
    return true;
}

/* ---- views, warnings (main thread) ---- */

static int by_bytes(const void *a, const void *b)
{
    const tcm_holder_row_t *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

size_t tcm__holders_rows(tcm_server_t *srv, tcm_holder_row_t *rows)
{
    size_t n = 0;
    pthread_mutex_lock(&srv->holders_lock);
    for (uint32_t i = 0; i < NENTRIES; i++) {
        const tcm_holder_t *e = &srv->holders[i];
        if (state_of(srv, i) == TCM_HOLDER_FREE)
            continue;
        rows[n].e = *e;
        rows[n].bytes = bytes_of(srv, e->tag);
        n++;
    }
    pthread_mutex_unlock(&srv->holders_lock);
    qsort(rows, n, sizeof *rows, by_bytes);
    return n;
}

void tcm__holders_warn(tcm_server_t *srv, uint64_t warn_after_s)
{
    uint64_t now = (uint64_t)time(NULL);
    pthread_mutex_lock(&srv->holders_lock);
    for (uint32_t i = FIRST_HOLDER; i < NENTRIES; i++) {
        tcm_holder_t *e = &srv->holders[i];
        if (state_of(srv, i) != TCM_HOLDER_HELD || (e->flags & TCM_HOLDER_WARNED) ||
            now < e->departed_unix + warn_after_s)
            continue;
        e->flags |= TCM_HOLDER_WARNED;
        uint64_t bytes = bytes_of(srv, e->tag);
        if (bytes)
            tcm__log_peer_text(TCM_LOG_WARN, e->exe,
                          "client %u (pid %u, %s, %s) ended %llu s ago; %llu bytes it allocated are still in use "
                          "(held by other processes, or leaked: tcmctl clients --dead)",
                          e->id, e->pid, e->comm, e->exe, (unsigned long long)(now - e->departed_unix),
                          (unsigned long long)bytes);
    }
    pthread_mutex_unlock(&srv->holders_lock);
}
