/* table.c — the shared hash table (see table.h for the crash rules). */
#define _GNU_SOURCE
#include "table.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "debug.h"
#include <tcm.h>

#define RELAXED memory_order_relaxed
#define MIGRATE_PER_OP 2 /* old buckets moved per operation on a rehashing stripe */
#define EVICT_SAMPLES 5

static void add(_Atomic uint64_t *v, int64_t d)
{
    atomic_store_explicit(v, atomic_load_explicit(v, RELAXED) + (uint64_t)d, RELAXED);
}

uint64_t kv_hash(const char *key, size_t len)
{
    /* FNV-1a over 8-byte words, then a murmur finaliser */
    uint64_t h = 0xcbf29ce484222325ull ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, key + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

int64_t kv_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint32_t kv_lru_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint32_t)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000); /* ms, wrapping: ages are differences */
}

static kv_stripe_t *stripe_of(kv_table_t *t, uint64_t hash)
{
    return &t->stripes[hash & (KV_STRIPES - 1)];
}

static uint32_t bucket_of(const kv_buckets_t *b, uint64_t hash)
{
    return (uint32_t)(hash >> 10) & (b->n - 1);
}

static kv_buckets_t *buckets_new(uint32_t n)
{
    kv_buckets_t *b = tcm_malloc(sizeof *b + (size_t)n * sizeof b->b[0]);
    if (b) {
        b->n = n;
        memset(b->b, 0, (size_t)n * sizeof b->b[0]);
    }
    return b;
}

kv_table_t *kv_table_create(void)
{
    kv_table_t *t = tcm_malloc(sizeof *t);
    if (!t)
        return NULL;
    memset(t, 0, sizeof *t);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    for (unsigned i = 0; i < KV_STRIPES; i++) {
        kv_stripe_t *s = &t->stripes[i];
        pthread_mutex_init(&s->lock, &a);
        if (!(s->cur = buckets_new(4))) {
            while (i--)
                tcm_free(t->stripes[i].cur);
            tcm_free(t);
            return NULL;
        }
        atomic_store(&s->bytes, tcm_usable_size(s->cur));
    }
    pthread_mutexattr_destroy(&a);
    t->nstripes = KV_STRIPES;
    t->magic = KV_MAGIC;
    return t;
}

uint64_t kv_table_bytes(const kv_table_t *t)
{
    uint64_t sum = tcm_usable_size(t);
    for (unsigned i = 0; i < KV_STRIPES; i++)
        sum += atomic_load_explicit(&t->stripes[i].bytes, RELAXED);
    return sum;
}

uint64_t kv_table_keys(const kv_table_t *t, uint64_t *volatile_keys)
{
    uint64_t keys = 0, vol = 0;
    for (unsigned i = 0; i < KV_STRIPES; i++) {
        keys += atomic_load_explicit(&t->stripes[i].keys, RELAXED);
        vol += atomic_load_explicit(&t->stripes[i].volatile_keys, RELAXED);
    }
    if (volatile_keys)
        *volatile_keys = vol;
    return keys;
}

/* The owner died holding the lock, somewhere between two of its stores.
 * Every chain is whole (each change is one store), except an entry that was
 * being moved by a rehash: finish the move. Then recount everything. */
static void repair(kv_stripe_t *s)
{
    if (s->old == s->cur) /* died starting a rehash */
        s->old = NULL;
    kv_entry_t *m = s->moving;
    if (m) {
        bool in_old = s->old && s->old->b[bucket_of(s->old, m->hash)] == m;
        if (!in_old && s->cur->b[s->moving_to] != m) { /* out of old, not yet in cur */
            m->next = s->cur->b[s->moving_to];
            s->cur->b[s->moving_to] = m;
        }
        s->moving = NULL;
    }
    uint64_t keys = 0, vol = 0, bytes = tcm_usable_size(s->cur) + (s->old ? tcm_usable_size(s->old) : 0);
    for (kv_buckets_t *b = s->cur; b; b = b == s->cur ? s->old : NULL)
        for (uint32_t i = 0; i < b->n; i++)
            for (kv_entry_t *e = b->b[i]; e; e = e->next) {
                keys++;
                vol += e->expire_ms != 0;
                bytes += tcm_usable_size(e);
            }
    atomic_store_explicit(&s->keys, keys, RELAXED);
    atomic_store_explicit(&s->volatile_keys, vol, RELAXED);
    atomic_store_explicit(&s->bytes, bytes, RELAXED);
}

static void lock_stripe(kv_table_t *t, kv_stripe_t *s)
{
    int r = pthread_mutex_lock(&s->lock);
    if (r == EOWNERDEAD) {
        repair(s);
        pthread_mutex_consistent(&s->lock);
        atomic_fetch_add(&t->repairs, 1);
    } else if (r != 0) {
        fprintf(stderr, "tcm-kv: stripe lock: %s\n", strerror(r));
        abort();
    }
}

kv_stripe_t *kv_lock(kv_table_t *t, uint64_t hash)
{
    kv_stripe_t *s = stripe_of(t, hash);
    lock_stripe(t, s);
    return s;
}

void kv_unlock(kv_stripe_t *s)
{
    pthread_mutex_unlock(&s->lock);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

unsigned kv_lock_many(kv_table_t *t, const uint64_t *hashes, unsigned n, kv_stripe_t **out)
{
    for (unsigned i = 0; i < n; i++)
        out[i] = stripe_of(t, hashes[i]);
    qsort(out, n, sizeof *out, cmp_ptr);
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++)
        if (k == 0 || out[k - 1] != out[i])
            out[k++] = out[i];
    for (unsigned i = 0; i < k; i++)
        lock_stripe(t, out[i]);
    return k;
}

void kv_unlock_many(kv_stripe_t **s, unsigned n)
{
    while (n--)
        pthread_mutex_unlock(&s[n]->lock);
}

/* Move the next few old buckets into cur; the array goes once empty. */
static void migrate(kv_stripe_t *s)
{
    kv_buckets_t *old = s->old;
    for (unsigned k = 0; k < MIGRATE_PER_OP && s->migrated < old->n; k++) {
        kv_entry_t **head = &old->b[s->migrated];
        while (*head) {
            kv_entry_t *e = *head;
            uint32_t j = bucket_of(s->cur, e->hash);
            s->moving_to = j;
            s->moving = e; /* announced before it leaves old */
            *head = e->next;
            KV_CRASH_POINT("migrate");
            e->next = s->cur->b[j];
            s->cur->b[j] = e;
            s->moving = NULL;
        }
        s->migrated++;
    }
    if (s->migrated == old->n) {
        s->old = NULL;
        add(&s->bytes, -(int64_t)tcm_usable_size(old));
        tcm_free(old);
    }
}

static void maybe_grow(kv_stripe_t *s)
{
    if (s->old || atomic_load_explicit(&s->keys, RELAXED) <= s->cur->n || s->cur->n >= (1u << 30))
        return;
    kv_buckets_t *grown = buckets_new(s->cur->n * 2);
    if (!grown) /* no memory: stay at this size (longer chains) */
        return;
    add(&s->bytes, (int64_t)tcm_usable_size(grown));
    s->migrated = 0;
    s->old = s->cur;
    KV_CRASH_POINT("rehash");
    s->cur = grown;
}

/* The link that points at the entry for key (in cur or old), or NULL. */
static kv_entry_t **find_link(kv_stripe_t *s, uint64_t hash, const char *key, size_t klen)
{
    if (s->old)
        migrate(s);
    for (kv_buckets_t *b = s->cur; b; b = b == s->cur ? s->old : NULL)
        for (kv_entry_t **l = &b->b[bucket_of(b, hash)]; *l; l = &(*l)->next) {
            kv_entry_t *e = *l;
            if (e->hash == hash && e->klen == klen && memcmp(e->data, key, klen) == 0)
                return l;
        }
    return NULL;
}

static void unlink_free(kv_stripe_t *s, kv_entry_t **link)
{
    kv_entry_t *e = *link;
    *link = e->next;
    add(&s->keys, -1);
    if (e->expire_ms)
        add(&s->volatile_keys, -1);
    add(&s->bytes, -(int64_t)tcm_usable_size(e));
    tcm_free(e);
}

kv_entry_t *kv_find(kv_table_t *t, kv_stripe_t *s, uint64_t hash, const char *key, size_t klen)
{
    kv_entry_t **l = find_link(s, hash, key, klen);
    if (!l)
        return NULL;
    kv_entry_t *e = *l;
    if (e->expire_ms && e->expire_ms <= kv_now_ms()) {
        unlink_free(s, l);
        atomic_fetch_add_explicit(&t->expired, 1, RELAXED);
        return NULL;
    }
    e->lru = kv_lru_clock();
    return e;
}

kv_entry_t *kv_entry_new(uint64_t hash, const char *key, size_t klen, const char *val, size_t vlen)
{
    if (klen > UINT32_MAX || vlen > UINT32_MAX)
        return NULL;
    kv_entry_t *e = tcm_malloc(sizeof *e + klen + vlen);
    if (!e)
        return NULL;
    e->next = NULL;
    e->hash = hash;
    e->expire_ms = 0;
    e->lru = kv_lru_clock();
    e->klen = (uint32_t)klen;
    e->vlen = (uint32_t)vlen;
    memcpy(e->data, key, klen);
    if (val)
        memcpy(e->data + klen, val, vlen);
    return e;
}

void kv_entry_free(kv_entry_t *e)
{
    tcm_free(e);
}

void kv_put(kv_stripe_t *s, kv_entry_t *e)
{
    kv_entry_t **l = find_link(s, e->hash, e->data, e->klen);
    add(&s->bytes, (int64_t)tcm_usable_size(e));
    if (e->expire_ms)
        add(&s->volatile_keys, 1);
    if (l) { /* in place of the old one: one store */
        kv_entry_t *was = *l;
        e->next = was->next;
        *l = e;
        if (was->expire_ms)
            add(&s->volatile_keys, -1);
        add(&s->bytes, -(int64_t)tcm_usable_size(was));
        tcm_free(was);
        return;
    }
    uint32_t j = bucket_of(s->cur, e->hash);
    e->next = s->cur->b[j];
    s->cur->b[j] = e; /* published whole: one store */
    KV_CRASH_POINT("put");
    add(&s->keys, 1);
    maybe_grow(s);
}

bool kv_delete(kv_stripe_t *s, uint64_t hash, const char *key, size_t klen)
{
    kv_entry_t **l = find_link(s, hash, key, klen);
    if (!l)
        return false;
    unlink_free(s, l);
    return true;
}

void kv_set_expire(kv_stripe_t *s, kv_entry_t *e, int64_t expire_ms)
{
    add(&s->volatile_keys, (expire_ms != 0) - (e->expire_ms != 0));
    e->expire_ms = expire_ms;
}

/* Apply fn to every link of the stripe; fn returns true if it unlinked the
 * entry (the link then already points at the next one). */
static uint64_t delete_where(kv_stripe_t *s, bool (*doomed)(const kv_entry_t *, int64_t), int64_t now)
{
    uint64_t n = 0;
    for (kv_buckets_t *b = s->cur; b; b = b == s->cur ? s->old : NULL)
        for (uint32_t i = 0; i < b->n; i++)
            for (kv_entry_t **l = &b->b[i]; *l;) {
                if (doomed(*l, now)) {
                    unlink_free(s, l);
                    n++;
                } else {
                    l = &(*l)->next;
                }
            }
    return n;
}

static bool always(const kv_entry_t *e, int64_t now)
{
    (void)e;
    (void)now;
    return true;
}

static bool expired(const kv_entry_t *e, int64_t now)
{
    return e->expire_ms && e->expire_ms <= now;
}

uint64_t kv_flush(kv_table_t *t)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < KV_STRIPES; i++) {
        kv_stripe_t *s = &t->stripes[i];
        lock_stripe(t, s);
        n += delete_where(s, always, 0);
        kv_buckets_t *empty = s->old, *small = s->cur->n > 4 ? buckets_new(4) : NULL;
        if (empty) { /* the arrays go back to their first size: one store each, a leak at worst */
            s->old = NULL;
            add(&s->bytes, -(int64_t)tcm_usable_size(empty));
            tcm_free(empty);
        }
        if (small) {
            empty = s->cur;
            s->cur = small;
            add(&s->bytes, (int64_t)tcm_usable_size(small) - (int64_t)tcm_usable_size(empty));
            tcm_free(empty);
        }
        kv_unlock(s);
    }
    return n;
}

uint64_t kv_sweep(kv_table_t *t, unsigned stripes)
{
    uint64_t n = 0;
    int64_t now = kv_now_ms();
    for (unsigned k = 0; k < stripes; k++) {
        kv_stripe_t *s = &t->stripes[atomic_fetch_add_explicit(&t->sweep_next, 1, RELAXED) % KV_STRIPES];
        if (!atomic_load_explicit(&s->volatile_keys, RELAXED))
            continue;
        lock_stripe(t, s);
        n += delete_where(s, expired, now);
        kv_unlock(s);
    }
    atomic_fetch_add_explicit(&t->expired, n, RELAXED);
    return n;
}

static uint64_t next_random(uint64_t *seed)
{
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    return *seed >> 17;
}

/* The least recently used entry of a stripe's chain found from a random
 * bucket on (its link), or NULL if the stripe is empty. */
static kv_entry_t **oldest_near(kv_stripe_t *s, uint64_t *seed, uint32_t now)
{
    kv_entry_t **best = NULL;
    for (kv_buckets_t *b = s->cur; b && !best; b = b == s->cur ? s->old : NULL)
        for (uint32_t i = 0, at = (uint32_t)next_random(seed); i < b->n && !best; i++)
            for (kv_entry_t **l = &b->b[(at + i) & (b->n - 1)]; *l; l = &(*l)->next)
                if (!best || now - (*l)->lru > now - (*best)->lru)
                    best = l;
    return best;
}

bool kv_evict_one(kv_table_t *t, uint64_t *seed)
{
    /* one candidate from each of a few stripes, all locked at once, so the
     * oldest of them can go without being looked up again */
    uint64_t picks[EVICT_SAMPLES];
    unsigned n = 0;
    for (unsigned tries = 0; tries < 64 && n < EVICT_SAMPLES; tries++) {
        uint64_t h = next_random(seed);
        if (atomic_load_explicit(&stripe_of(t, h)->keys, RELAXED))
            picks[n++] = h;
    }
    if (!n)
        return false;
    kv_stripe_t *locked[EVICT_SAMPLES];
    unsigned nl = kv_lock_many(t, picks, n, locked);
    uint32_t now = kv_lru_clock();
    kv_entry_t **victim = NULL;
    kv_stripe_t *from = NULL;
    for (unsigned i = 0; i < nl; i++) {
        kv_entry_t **l = oldest_near(locked[i], seed, now);
        if (l && (!victim || now - (*l)->lru > now - (*victim)->lru)) {
            victim = l;
            from = locked[i];
        }
    }
    if (victim) {
        unlink_free(from, victim);
        atomic_fetch_add_explicit(&t->evicted, 1, RELAXED);
    }
    kv_unlock_many(locked, nl);
    return victim != NULL;
}
