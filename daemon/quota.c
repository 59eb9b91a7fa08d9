/* quota.c — memory quotas (docs/DESIGN.md, "Memory quotas").
 *
 * What counts against a peer is what its owner tags hold: every byte the
 * heap handed to one of its processes and that has not come back to the
 * heap, whoever holds it now (in use, in a cache of its own, or freed by
 * another process into that process's cache and not yet returned), and
 * what its departed processes left allocated. The heap thread knows it
 * exactly: it adds what it hands out and subtracts what comes back, per
 * tag, and each tag is one user's (a live client's, a departed holder's, a
 * group of that user's departed processes of one executable); the first
 * group, every executable the table has no room for, is nobody's.
 *
 * Each user has an entry while any tag is charged to it; a rule set with
 * tcmctl quota limits one user, or the processes of one user with one
 * short name; uid_quota limits every other user but the operator. All of
 * it but the rules is derived: tcm__quota_start rebuilds it from the
 * counts recovery made, so a crash loses nothing. */
#define _GNU_SOURCE
#include "quota.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "heapfull.h"
#include "log.h"
#include "prim.h"
#include "server.h"
#include "shares.h"

_Static_assert(TCM_QUOTA_TAGS == TCM_TAGS, "one charge per tag");
_Static_assert(TCM_QUOTA_RULES < 255, "tag_rule holds a rule index + 1");


/* A refused peer whose last ask for flushes brought nothing back is
 * answered at once for this long (ENOMEM without a wait), instead of
 * asking every process again. */
#define ASK_AGAIN_NS 1000000000ull
/* How long after its ask the refused client is told to wait: its retries
 * (client/tcache.c NOMEM_WAIT_NS, doubling from 1 ms) span about this. */
#define ASK_WAIT_NS 130000000ull

static bool charged(const tcm_quota_t *q, uint16_t tag)
{
    return q->tag_charged[tag / 64] >> (tag % 64) & 1;
}

static int rule_of(const tcm_quota_t *q, uint32_t uid, const char *name)
{
    for (int r = 0; r < (int)TCM_QUOTA_RULES; r++)
        if (q->rules[r].limit && q->rules[r].uid == uid && !strncmp(q->rules[r].name, name, 16))
            return r;
    return -1;
}

static tcm_quota_acct_t *acct_find(tcm_quota_t *q, uint32_t uid)
{
    for (uint32_t i = tcm__uid_hash(uid, q->mask);; i = (i + 1) & q->mask) {
        if (!q->accts[i].tags)
            return NULL;
        if (q->accts[i].uid == uid)
            return &q->accts[i];
    }
}

static tcm_quota_acct_t *acct_take(tcm_quota_t *q, uint32_t uid)
{
    tcm_quota_acct_t *a = acct_find(q, uid);
    pthread_mutex_lock(&q->lock);
    if (a) {
        a->tags++;
    } else {
        uint32_t i = tcm__uid_hash(uid, q->mask);
        while (q->accts[i].tags)
            i = (i + 1) & q->mask;
        a = &q->accts[i];
        *a = (tcm_quota_acct_t){.uid = uid, .tags = 1, .rule = (uint32_t)(rule_of(q, uid, "") + 1)};
    }
    pthread_mutex_unlock(&q->lock);
    return a;
}

/* The last tag of its user went: the entry leaves, the ones after it in
 * its probe run moving back (no tombstones to accumulate). */
static void acct_put(tcm_quota_t *q, tcm_quota_acct_t *a)
{
    pthread_mutex_lock(&q->lock);
    if (--a->tags) {
        pthread_mutex_unlock(&q->lock);
        return;
    }
    uint32_t hole = (uint32_t)(a - q->accts);
    for (uint32_t i = (hole + 1) & q->mask; q->accts[i].tags; i = (i + 1) & q->mask) {
        uint32_t home = tcm__uid_hash(q->accts[i].uid, q->mask);
        if (((i - home) & q->mask) >= ((i - hole) & q->mask)) { /* its home is at or before the hole */
            q->accts[hole] = q->accts[i];
            hole = i;
        }
    }
    memset(&q->accts[hole], 0, sizeof q->accts[hole]);
    pthread_mutex_unlock(&q->lock);
}

/* The limit on a user's whole: its own rule, else uid_quota (not the
 * operator's). */
static uint64_t uid_limit(tcm_server_t *srv, const tcm_quota_acct_t *a)
{
    if (a->rule)
        return srv->quota.rules[a->rule - 1].limit;
    return tcm__is_operator(a->uid) ? 0 : atomic_load_explicit(&srv->uid_quota, memory_order_relaxed);
}

static void link_tag(tcm_quota_t *q, uint16_t tag, uint32_t uid, const char *name, uint64_t bytes)
{
    tcm_quota_acct_t *a = acct_take(q, uid);
    q->tag_uid[tag] = uid;
    q->tag_charged[tag / 64] |= 1ull << (tag % 64);
    int r = name && name[0] ? rule_of(q, uid, name) : -1;
    q->tag_rule[tag] = (uint8_t)(r + 1);
    atomic_fetch_add_explicit(&a->held, bytes, memory_order_relaxed);
    if (r >= 0)
        atomic_fetch_add_explicit(&q->rule_held[r], bytes, memory_order_relaxed);
}

static void sub_clamped(_Atomic uint64_t *v, uint64_t bytes)
{
    uint64_t old = atomic_load_explicit(v, memory_order_relaxed);
    atomic_store_explicit(v, old > bytes ? old - bytes : 0, memory_order_relaxed);
}

/* ---- the rules ---- */

/* A copy of the state segment's rules, under q->lock (the main thread
 * writes them under it). */
static void copy_rules_locked(tcm_server_t *srv, tcm_quota_limit_t *out)
{
    tcm_state_hdr_t *st = srv->state;
    for (uint32_t r = 0; r < TCM_QUOTA_RULES; r++) {
        out[r].limit = atomic_load_explicit(&st->quotas[r].limit, memory_order_relaxed);
        out[r].uid = st->quotas[r].uid;
        memcpy(out[r].name, st->quotas[r].name, sizeof out[r].name);
        out[r].name[sizeof out[r].name - 1] = 0;
    }
}

/* What a tag is, for a rule: its user's process name, "" for a group. */
static const char *tag_name(tcm_server_t *srv, uint16_t tag)
{
    uint16_t ci = atomic_load_explicit(&srv->tag_client[tag], memory_order_relaxed);
    if (ci) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[ci - 1], memory_order_acquire);
        return c ? c->comm : "";
    }
    uint16_t hi = srv->tag_holder[tag];
    if (hi > TCM_HOLDER_GROUPS) /* a holder, not a group */
        return srv->holders[hi - 1].comm;
    return "";
}

/* Bytes a charged tag holds (what the holders and client records say). */
static uint64_t tag_bytes(tcm_server_t *srv, uint16_t tag)
{
    uint16_t ci = atomic_load_explicit(&srv->tag_client[tag], memory_order_relaxed);
    tcm_client_t *c = ci ? atomic_load_explicit(&srv->clients[ci - 1], memory_order_acquire) : NULL;
    if (c) {
        uint64_t out = atomic_load(&c->rec->bytes_out), back = atomic_load(&c->rec->bytes_back);
        return out > back ? out - back : 0;
    }
    return atomic_load_explicit(&srv->tag_orphaned[tag], memory_order_relaxed);
}

/* Each charged tag to the (user, name) rule it falls under now, and each
 * rule's bytes counted again. */
static void relink_rules(tcm_server_t *srv)
{
    tcm_quota_t *q = &srv->quota;
    for (uint32_t r = 0; r < TCM_QUOTA_RULES; r++)
        atomic_store_explicit(&q->rule_held[r], 0, memory_order_relaxed);
    pthread_mutex_lock(&q->lock);
    for (uint32_t i = 0; i <= q->mask; i++)
        if (q->accts[i].tags)
            q->accts[i].rule = (uint32_t)(rule_of(q, q->accts[i].uid, "") + 1);
    pthread_mutex_unlock(&q->lock);
    for (uint32_t w = 0; w < TCM_TAGS / 64; w++) {
        for (uint64_t bits = q->tag_charged[w]; bits; bits &= bits - 1) {
            uint16_t tag = (uint16_t)(w * 64 + (uint32_t)__builtin_ctzll(bits));
            const char *name = tag_name(srv, tag);
            int r = name[0] ? rule_of(q, q->tag_uid[tag], name) : -1;
            q->tag_rule[tag] = (uint8_t)(r + 1);
            if (r >= 0)
                atomic_fetch_add_explicit(&q->rule_held[r], tag_bytes(srv, tag), memory_order_relaxed);
        }
    }
}

void tcm__quota_sync_ht(tcm_server_t *srv)
{
    tcm_quota_t *q = &srv->quota;
    if (!q->accts || atomic_load_explicit(&srv->state->quota_seq, memory_order_relaxed) == q->seq)
        return;
    tcm_quota_limit_t rules[TCM_QUOTA_RULES];
    pthread_mutex_lock(&q->lock);
    q->seq = atomic_load_explicit(&srv->state->quota_seq, memory_order_relaxed);
    copy_rules_locked(srv, rules);
    for (uint32_t r = 0; r < TCM_QUOTA_RULES; r++) /* a rule replaced: its counts start again */
        if (rules[r].uid != q->rules[r].uid || strcmp(rules[r].name, q->rules[r].name) || !rules[r].limit)
            atomic_store_explicit(&q->rule_refused[r], 0, memory_order_relaxed);
    memcpy(q->rules, rules, sizeof rules);
    pthread_mutex_unlock(&q->lock);
    relink_rules(srv);
}

/* ---- the heap thread's accounting ---- */

static void link_client(tcm_server_t *srv, tcm_client_t *c)
{
    if (!charged(&srv->quota, c->rec->tag))
        link_tag(&srv->quota, c->rec->tag, c->rec->uid, c->comm, 0);
}

uint64_t tcm__quota_room_ht(tcm_server_t *srv, tcm_client_t *c)
{
    tcm_quota_t *q = &srv->quota;
    if (!q->accts) /* a drop-in's private heap */
        return UINT64_MAX;
    link_client(srv, c);
    uint16_t tag = c->rec->tag;
    const tcm_quota_acct_t *a = acct_find(q, q->tag_uid[tag]);
    uint64_t room = UINT64_MAX, limit = uid_limit(srv, a);
    if (limit) {
        uint64_t held = atomic_load_explicit(&a->held, memory_order_relaxed);
        room = held < limit ? limit - held : 0;
    }
    int r = q->tag_rule[tag] - 1;
    if (r >= 0) {
        uint64_t held = atomic_load_explicit(&q->rule_held[r], memory_order_relaxed);
        uint64_t left = held < q->rules[r].limit ? q->rules[r].limit - held : 0;
        if (left < room)
            room = left;
    }
    return room;
}

void tcm__quota_charge_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t bytes)
{
    tcm_quota_t *q = &srv->quota;
    uint16_t tag = c->rec->tag;
    if (!q->accts)
        return;
    link_client(srv, c);
    atomic_fetch_add_explicit(&acct_find(q, q->tag_uid[tag])->held, bytes, memory_order_relaxed);
    if (q->tag_rule[tag])
        atomic_fetch_add_explicit(&q->rule_held[q->tag_rule[tag] - 1], bytes, memory_order_relaxed);
}

void tcm__quota_credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes)
{
    tcm_quota_t *q = &srv->quota;
    if (!q->accts || !charged(q, tag))
        return;
    tcm_quota_acct_t *a = acct_find(q, q->tag_uid[tag]);
    sub_clamped(&a->held, bytes);
    a->back += bytes;
    if (q->tag_rule[tag])
        sub_clamped(&q->rule_held[q->tag_rule[tag] - 1], bytes);
}

void tcm__quota_drop_tag_ht(tcm_server_t *srv, uint16_t tag)
{
    tcm_quota_t *q = &srv->quota;
    if (!q->accts || !charged(q, tag))
        return;
    q->tag_charged[tag / 64] &= ~(1ull << (tag % 64));
    q->tag_rule[tag] = 0;
    acct_put(q, acct_find(q, q->tag_uid[tag]));
}

void tcm__quota_group_ht(tcm_server_t *srv, uint16_t tag, uint32_t uid)
{
    if (srv->quota.accts)
        link_tag(&srv->quota, tag, uid, NULL, 0);
}

void tcm__quota_merge_ht(tcm_server_t *srv, uint16_t from, uint16_t to, uint64_t bytes)
{
    tcm_quota_t *q = &srv->quota;
    if (!q->accts || !charged(q, from))
        return;
    if (q->tag_rule[from]) /* a group is no name's */
        sub_clamped(&q->rule_held[q->tag_rule[from] - 1], bytes);
    if (!charged(q, to) || q->tag_uid[to] != q->tag_uid[from]) /* into nobody's group */
        sub_clamped(&acct_find(q, q->tag_uid[from])->held, bytes);
    tcm__quota_drop_tag_ht(srv, from);
}

uint64_t tcm__quota_refuse_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t wanted)
{
    tcm_quota_t *q = &srv->quota;
    uint16_t tag = c->rec->tag;
    tcm_quota_acct_t *a = acct_find(q, q->tag_uid[tag]);
    atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
    if (q->tag_rule[tag])
        atomic_fetch_add_explicit(&q->rule_refused[q->tag_rule[tag] - 1], 1, memory_order_relaxed);
    TCM_STAT_ADD(srv->meta, quota_refusals, 1);
    /* the quota that said no: the (user, name) one if it leaves less */
    uint64_t held = atomic_load_explicit(&a->held, memory_order_relaxed), limit = uid_limit(srv, a);
    const char *of = "";
    int r = q->tag_rule[tag] - 1;
    if (r >= 0) {
        uint64_t rheld = atomic_load_explicit(&q->rule_held[r], memory_order_relaxed);
        if (!limit || (rheld >= q->rules[r].limit ? 0 : q->rules[r].limit - rheld) <= (held >= limit ? 0 : limit - held))
            held = rheld, limit = q->rules[r].limit, of = q->rules[r].name;
    }
    tcm__log_peer(TCM_LOG_WARN, c->rec->pid,
                  "client %u (pid %u, uid %u, %s): %llu bytes refused: uid %u%s%s holds %llu of its quota of %llu "
                  "bytes",
                  c->rec->id, c->rec->pid, c->rec->uid, c->comm[0] ? c->comm : "?", (unsigned long long)wanted, a->uid,
                  of[0] ? " named " : "", of, (unsigned long long)held, (unsigned long long)limit);
    /* What it is charged for may sit in other processes' caches (objects
     * they freed and keep): ask them, once more each time an ask brought
     * something back, else once a second. tcm__heap_full_ht bounds the
     * asks of everyone together. */
    uint64_t now = tcm__now_ns();
    if (!a->asked_ns || now - a->asked_ns >= ASK_AGAIN_NS || (a->back && now - a->asked_ns >= TCM_FLUSH_ASK_NS)) {
        a->asked = (uint32_t)tcm__heap_full_ht(srv, c);
        a->asked_ns = now;
        a->back = 0;
        return a->asked;
    }
    return now - a->asked_ns < ASK_WAIT_NS ? a->asked : 0;
}

bool tcm__quota_validate(tcm_server_t *srv, const uint64_t *held, char *why, size_t whylen)
{
    tcm_quota_t *q = &srv->quota;
    if (!q->accts)
        return true;
    uint64_t *want = calloc(q->mask + 1 + TCM_QUOTA_RULES, sizeof *want), *want_rule = want + q->mask + 1;
    if (!want) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    bool ok = true;
    for (uint32_t t = 1; t < TCM_TAGS && ok; t++) {
        bool merging = srv->tag_merging[t / 64] >> (t % 64) & 1;
        uint16_t e = merging ? srv->remap[t] : (uint16_t)t; /* a merging tag's objects are its group's */
        if (!held[t] || !charged(q, e))
            continue;
        tcm_quota_acct_t *a = acct_find(q, q->tag_uid[e]);
        if (!a) {
            snprintf(why, whylen, "quota: tag %u is charged to uid %u, which has no entry", e, q->tag_uid[e]);
            ok = false;
            break;
        }
        want[a - q->accts] += held[t];
        if (!merging && q->tag_rule[t])
            want_rule[q->tag_rule[t] - 1] += held[t];
    }
    for (uint32_t i = 0; i <= q->mask && ok; i++)
        if (q->accts[i].tags && atomic_load(&q->accts[i].held) != want[i]) {
            snprintf(why, whylen, "quota: uid %u is charged %llu bytes, its tags own %llu", q->accts[i].uid,
                     (unsigned long long)atomic_load(&q->accts[i].held), (unsigned long long)want[i]);
            ok = false;
        }
    for (uint32_t r = 0; r < TCM_QUOTA_RULES && ok; r++)
        if (q->rules[r].limit && q->rules[r].name[0] && atomic_load(&q->rule_held[r]) != want_rule[r]) {
            snprintf(why, whylen, "quota: uid %u named %s is charged %llu bytes, its tags own %llu", q->rules[r].uid,
                     q->rules[r].name, (unsigned long long)atomic_load(&q->rule_held[r]),
                     (unsigned long long)want_rule[r]);
            ok = false;
        }
    free(want);
    return ok;
}

/* ---- start, the main thread's rules, views ---- */

int tcm__quota_start(tcm_server_t *srv)
{
    tcm_quota_t *q = &srv->quota;
    /* users charged at once: at most one per tag that holds something (a
     * live client, a departed holder, a group); the table a third full at
     * most */
    q->mask = tcm__pow2_at_least(3 * (srv->max_clients + TCM_HOLDERS + TCM_HOLDER_GROUPS)) - 1;
    q->accts = calloc(q->mask + 1, sizeof *q->accts);
    if (!q->accts)
        return -ENOMEM;
    pthread_mutex_init(&q->lock, NULL);
    tcm_state_hdr_t *st = srv->state;
    uint32_t seq = atomic_load(&st->quota_seq);
    if (seq & 1) { /* a tcmd died writing a rule: the rule is whole or not there (its limit is written last) */
        for (uint32_t r = 0; r < TCM_QUOTA_RULES; r++)
            st->quotas[r].name[sizeof st->quotas[r].name - 1] = 0;
        atomic_store(&st->quota_seq, seq + 1);
    }
    copy_rules_locked(srv, q->rules); /* (no other thread yet) */
    /* every tag in use, charged to its user: live clients, departed
     * holders, groups (recovery counted their bytes) */
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (c)
            link_tag(q, c->rec->tag, c->rec->uid, c->comm, tag_bytes(srv, c->rec->tag));
    }
    for (uint32_t t = 1; t < TCM_TAGS; t++) {
        uint32_t i = srv->tag_holder[t];
        if (i-- > 1) /* (entry 0: every other executable's group, nobody's) */
            link_tag(q, (uint16_t)t, srv->holders[i].uid, i < TCM_HOLDER_GROUPS ? NULL : srv->holders[i].comm,
                     tag_bytes(srv, (uint16_t)t));
    }
    q->seq = atomic_load(&st->quota_seq);
    relink_rules(srv);
    return 0;
}

void tcm__quota_free(tcm_server_t *srv)
{
    free(srv->quota.accts);
    srv->quota.accts = NULL;
}

int tcm__quota_set(tcm_server_t *srv, uint32_t uid, const char *name, uint64_t limit)
{
    tcm_state_hdr_t *st = srv->state;
    if (strlen(name) >= sizeof st->quotas[0].name)
        return -EINVAL;
    int found = -1, free_r = -1;
    for (int r = 0; r < (int)TCM_QUOTA_RULES; r++) {
        tcm_quota_rule_t *e = &st->quotas[r];
        if (!atomic_load(&e->limit)) {
            if (free_r < 0)
                free_r = r;
        } else if (e->uid == uid && !strncmp(e->name, name, sizeof e->name)) {
            found = r;
        }
    }
    if (found < 0 && !limit)
        return -ENOENT;
    if (found < 0 && free_r < 0)
        return -ENOSPC;
    pthread_mutex_lock(&srv->quota.lock);
    atomic_fetch_add_explicit(&st->quota_seq, 1, memory_order_acq_rel); /* odd: being written */
    if (found >= 0) {
        atomic_store(&st->quotas[found].limit, limit);
    } else {
        tcm_quota_rule_t *e = &st->quotas[free_r];
        e->uid = uid;
        memset(e->name, 0, sizeof e->name);
        memcpy(e->name, name, strlen(name));
        atomic_store_explicit(&e->limit, limit, memory_order_release);
    }
    atomic_fetch_add_explicit(&st->quota_seq, 1, memory_order_acq_rel);
    pthread_mutex_unlock(&srv->quota.lock);
    return 0;
}

static int by_held(const void *a, const void *b)
{
    const tcm_quota_row_t *x = a, *y = b;
    return x->held < y->held ? 1 : x->held > y->held ? -1 : 0;
}

size_t tcm__quota_rows(tcm_server_t *srv, tcm_quota_row_t *rows, size_t max)
{
    tcm_quota_t *q = &srv->quota;
    size_t n = 0;
    uint64_t dflt = atomic_load(&srv->uid_quota);
    pthread_mutex_lock(&q->lock);
    for (uint32_t r = 0; r < TCM_QUOTA_RULES && n < max; r++) {
        const tcm_quota_limit_t *e = &q->rules[r];
        if (!e->limit)
            continue;
        tcm_quota_row_t *row = &rows[n++];
        *row = (tcm_quota_row_t){.uid = e->uid, .limit = e->limit, .rule = true};
        memcpy(row->name, e->name, sizeof row->name);
        if (e->name[0]) {
            row->held = atomic_load_explicit(&q->rule_held[r], memory_order_relaxed);
            row->refused = atomic_load_explicit(&q->rule_refused[r], memory_order_relaxed);
        } else {
            const tcm_quota_acct_t *a = acct_find(q, e->uid);
            row->held = a ? atomic_load_explicit(&a->held, memory_order_relaxed) : 0;
            row->refused = a ? atomic_load_explicit(&a->refused, memory_order_relaxed) : 0;
        }
    }
    size_t ruled = n;
    for (uint32_t i = 0; i <= q->mask && n < max; i++) {
        const tcm_quota_acct_t *a = &q->accts[i];
        if (!a->tags || a->rule)
            continue;
        uint64_t held = atomic_load_explicit(&a->held, memory_order_relaxed);
        if (!held)
            continue;
        rows[n++] = (tcm_quota_row_t){.uid = a->uid,
                                      .limit = tcm__is_operator(a->uid) ? 0 : dflt,
                                      .held = held,
                                      .refused = atomic_load_explicit(&a->refused, memory_order_relaxed)};
    }
    pthread_mutex_unlock(&q->lock);
    qsort(rows + ruled, n - ruled, sizeof *rows, by_held);
    return n;
}
