/* table.h — tcm-kv's one hash table, shared by every worker process.
 *
 * The table, its bucket arrays and every entry (key and value in one
 * object) live in the tcm heap the workers share (tcm_malloc), so a SET in
 * one worker allocates and an overwrite, DEL, expiry or eviction in any
 * other frees. The keys are split by hash into
 * KV_STRIPES stripes, each a small hash table of its own under a
 * process-shared robust mutex, rehashed incrementally (a few buckets per
 * operation) when it grows.
 *
 * A worker may be SIGKILLed between any two of its stores. Every change to
 * a chain is one pointer store of a fully built entry, and the one change
 * that needs two (moving an entry to the new bucket array while rehashing)
 * is announced in the stripe first; the next locker gets EOWNERDEAD,
 * finishes that move, recounts the stripe and marks the mutex consistent.
 * What a death can lose is the one entry it was replacing or deleting (it
 * is unreachable, not yet freed: a leak, never a dangling pointer). */
#ifndef KV_TABLE_H
#define KV_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_STRIPES 1024
#define KV_MAGIC 0x74636d2d6b763032ull /* "tcm-kv02": the layout of kv_table_t and kv_shared_t */

typedef struct kv_entry {
    struct kv_entry *next;
    uint64_t hash;
    int64_t expire_ms; /* 0: none */
    uint32_t lru;      /* kv_lru_clock() at the last access */
    uint32_t klen, vlen;
    char data[]; /* key, then value */
} kv_entry_t;

typedef struct kv_buckets {
    uint32_t n; /* a power of two */
    kv_entry_t *b[];
} kv_buckets_t;

typedef struct kv_stripe {
    pthread_mutex_t lock;
    kv_buckets_t *cur;
    kv_buckets_t *old;  /* while rehashing: old->b[i] for i >= migrated still to move */
    uint32_t migrated;
    kv_entry_t *moving; /* an entry between old and cur (rehash), set before it leaves old */
    uint32_t moving_to;
    /* written under the lock, read without it (INFO, maxmemory) */
    _Atomic uint64_t keys, volatile_keys;
    _Atomic uint64_t bytes; /* entries and bucket arrays, usable sizes */
} __attribute__((aligned(64))) kv_stripe_t;

typedef struct kv_table {
    uint64_t magic;
    uint32_t nstripes;
    _Atomic uint64_t expired, evicted, repairs;
    _Atomic uint32_t sweep_next;
    kv_stripe_t stripes[KV_STRIPES];
} kv_table_t;

/* Create a table (NULL: out of memory). */
kv_table_t *kv_table_create(void);
/* The table's memory: every entry and bucket array. */
uint64_t kv_table_bytes(const kv_table_t *t);
uint64_t kv_table_keys(const kv_table_t *t, uint64_t *volatile_keys);

uint64_t kv_hash(const char *key, size_t len);
int64_t kv_now_ms(void);
uint32_t kv_lru_clock(void);

/* One stripe, locked (a dead owner's half-done change repaired first). */
kv_stripe_t *kv_lock(kv_table_t *t, uint64_t hash);
void kv_unlock(kv_stripe_t *s);
/* The stripes of n hashes locked in address order, each once (commands on
 * several keys); returns how many it locked into out. */
unsigned kv_lock_many(kv_table_t *t, const uint64_t *hashes, unsigned n, kv_stripe_t **out);
void kv_unlock_many(kv_stripe_t **s, unsigned n);

/* With the stripe locked: the live entry for key (an expired one is
 * deleted on the way), or NULL. */
kv_entry_t *kv_find(kv_table_t *t, kv_stripe_t *s, uint64_t hash, const char *key, size_t klen);
/* A new entry, not yet in the table (NULL: no memory). */
kv_entry_t *kv_entry_new(uint64_t hash, const char *key, size_t klen, const char *val, size_t vlen);
/* An entry that never went into the table. */
void kv_entry_free(kv_entry_t *e);
/* With the stripe locked: e in place of the entry with its key (which is
 * freed), or added. */
void kv_put(kv_stripe_t *s, kv_entry_t *e);
/* With the stripe locked: the entry with this key removed and freed; false
 * if there was none. */
bool kv_delete(kv_stripe_t *s, uint64_t hash, const char *key, size_t klen);
/* With the stripe locked: an entry's expiry (0: none). */
void kv_set_expire(kv_stripe_t *s, kv_entry_t *e, int64_t expire_ms);

/* Every entry freed; returns how many. */
uint64_t kv_flush(kv_table_t *t);
/* Expired entries of the next few stripes deleted (the periodic sweep). */
uint64_t kv_sweep(kv_table_t *t, unsigned stripes);
/* One entry evicted, the least recently used of a few sampled; false if
 * none was found. */
bool kv_evict_one(kv_table_t *t, uint64_t *seed);

static inline const char *kv_key(const kv_entry_t *e)
{
    return e->data;
}
static inline char *kv_val(kv_entry_t *e)
{
    return e->data + e->klen;
}
static inline const char *kv_cval(const kv_entry_t *e)
{
    return e->data + e->klen;
}

#endif
