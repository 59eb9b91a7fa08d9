/* commands.c — the Redis commands tcm-kv serves, on the shared table: each
 * reads or changes the keys it names under their stripes' locks, and builds
 * a new entry (a tcm_malloc in table.c) before it takes a lock, so no
 * worker waits on another's allocation. */
#define _GNU_SOURCE
#include "worker.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <tcm.h>

#ifndef KV_VERSION
#error "KV_VERSION: the version INFO reports, a string (examples/CMakeLists.txt passes tcm's project version)"
#endif

#define EVICT_MAX 1000 /* entries one write may evict to fit */

typedef void (*cmd_fn)(cmd_ctx_t *x);

bool arg_is(const kv_arg_t *a, const char *s)
{
    return a->n == strlen(s) && strncasecmp(a->p, s, a->n) == 0;
}

bool to_ll(const char *p, size_t n, long long *v)
{
    if (n == 0 || n > 20)
        return false;
    char buf[24];
    memcpy(buf, p, n);
    buf[n] = 0;
    if (buf[0] != '-' && !isdigit((unsigned char)buf[0]))
        return false;
    if ((buf[0] == '0' && n > 1) || (buf[0] == '-' && (n == 1 || buf[1] == '0')))
        return false; /* the canonical form only, as Redis stores integers */
    char *end;
    errno = 0;
    *v = strtoll(buf, &end, 10);
    return errno == 0 && *end == 0;
}

static bool arg_ll(cmd_ctx_t *x, unsigned i, long long *v)
{
    if (to_ll(x->a[i].p, x->a[i].n, v))
        return true;
    out_err(x->c, "%s", ERR_INT);
    return false;
}

/* Make room under --maxmemory before a write: evict least recently used
 * entries. False (and an OOM reply) if it cannot. */
static bool fit(cmd_ctx_t *x)
{
    uint64_t max = x->w->o->maxmemory;
    if (!max)
        return true;
    for (unsigned k = 0; kv_table_bytes(x->w->t) > max; k++)
        if (k == EVICT_MAX || !kv_evict_one(x->w->t, &x->w->seed)) {
            out_oom(x->c);
            return false;
        }
    return true;
}

/* A new entry; when the heap is full, least recently used entries make
 * room. NULL (and an OOM reply) if nothing can. */
static kv_entry_t *new_entry(cmd_ctx_t *x, uint64_t h, const kv_arg_t *k, const char *v, size_t vlen)
{
    for (unsigned tries = 0;; tries++) {
        kv_entry_t *e = kv_entry_new(h, k->p, k->n, v, vlen);
        if (e)
            return e;
        if (tries == EVICT_MAX || !kv_evict_one(x->w->t, &x->w->seed)) {
            out_oom(x->c);
            return NULL;
        }
    }
}

static void cmd_ping(cmd_ctx_t *x)
{
    if (x->n > 2) {
        out_err(x->c, "ERR wrong number of arguments for 'ping' command");
        return;
    }
    if (x->n == 2)
        out_bulk(x->c, x->a[1].p, x->a[1].n);
    else
        out_str(x->c, "+PONG\r\n");
}

static void cmd_echo(cmd_ctx_t *x)
{
    out_bulk(x->c, x->a[1].p, x->a[1].n);
}

static void cmd_get(cmd_ctx_t *x)
{
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *e = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    out_value(x->c, e); /* copied out under the lock: another worker may free it next */
    kv_unlock(s);
    kv_worker_stats_t *ws = x->w->stats; /* per worker: no line shared with the others */
    atomic_store_explicit(e ? &ws->hits : &ws->misses,
                          atomic_load_explicit(e ? &ws->hits : &ws->misses, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static void cmd_set(cmd_ctx_t *x)
{
    bool nx = false, xx = false, keepttl = false, get = false;
    int64_t expire = 0;
    for (unsigned i = 3; i < x->n; i++) {
        kv_arg_t *a = &x->a[i];
        if (arg_is(a, "NX") && !xx)
            nx = true;
        else if (arg_is(a, "XX") && !nx)
            xx = true;
        else if (arg_is(a, "KEEPTTL") && !expire)
            keepttl = true;
        else if (arg_is(a, "GET"))
            get = true;
        else if ((arg_is(a, "EX") || arg_is(a, "PX")) && i + 1 < x->n && !expire && !keepttl) {
            long long v;
            if (!arg_ll(x, i + 1, &v))
                return;
            bool ex = arg_is(a, "EX");
            if (v <= 0 || (ex && v > LLONG_MAX / 1000) || kv_now_ms() > LLONG_MAX - (ex ? v * 1000 : v)) {
                out_err(x->c, "ERR invalid expire time in 'set' command");
                return;
            }
            expire = kv_now_ms() + (ex ? v * 1000 : v);
            i++;
        } else {
            out_err(x->c, "%s", ERR_SYNTAX);
            return;
        }
    }
    if (!fit(x))
        return;
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_entry_t *e = new_entry(x, h, &x->a[1], x->a[2].p, x->a[2].n); /* allocated outside the lock */
    if (!e)
        return;
    e->expire_ms = expire;
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *old = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    if (get)
        out_value(x->c, old);
    if ((nx && old) || (xx && !old)) {
        kv_unlock(s);
        kv_entry_free(e);
        if (!get)
            out_null(x->c);
        return;
    }
    if (keepttl && old)
        e->expire_ms = old->expire_ms;
    kv_put(s, e);
    kv_unlock(s);
    if (!get)
        out_ok(x->c);
}

static void cmd_getset(cmd_ctx_t *x)
{
    if (!fit(x))
        return;
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_entry_t *e = new_entry(x, h, &x->a[1], x->a[2].p, x->a[2].n);
    if (!e)
        return;
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *old = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    out_value(x->c, old);
    kv_put(s, e);
    kv_unlock(s);
}

static void cmd_del(cmd_ctx_t *x)
{
    long long n = 0;
    for (unsigned i = 1; i < x->n; i++) {
        uint64_t h = kv_hash(x->a[i].p, x->a[i].n);
        kv_stripe_t *s = kv_lock(x->w->t, h);
        if (kv_find(x->w->t, s, h, x->a[i].p, x->a[i].n)) /* an expired one does not count */
            n += kv_delete(s, h, x->a[i].p, x->a[i].n);
        kv_unlock(s);
    }
    out_int(x->c, n);
}

static void cmd_exists(cmd_ctx_t *x)
{
    long long n = 0;
    for (unsigned i = 1; i < x->n; i++) {
        uint64_t h = kv_hash(x->a[i].p, x->a[i].n);
        kv_stripe_t *s = kv_lock(x->w->t, h);
        n += kv_find(x->w->t, s, h, x->a[i].p, x->a[i].n) != NULL;
        kv_unlock(s);
    }
    out_int(x->c, n);
}

/* The entry's new value: a new entry with the old one's expiry, in its place. */
static bool replace_value(cmd_ctx_t *x, kv_stripe_t *s, uint64_t h, kv_entry_t *old, const char *v1, size_t n1,
                          const char *v2, size_t n2)
{
    kv_entry_t *e = kv_entry_new(h, x->a[1].p, x->a[1].n, NULL, n1 + n2);
    if (!e) {
        out_oom(x->c);
        return false;
    }
    memcpy(kv_val(e), v1, n1);
    memcpy(kv_val(e) + n1, v2, n2);
    e->expire_ms = old ? old->expire_ms : 0;
    kv_put(s, e);
    return true;
}

static void incr_by(cmd_ctx_t *x, long long by)
{
    if (!fit(x))
        return;
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    /* the new entry is made before the lock, with room for any number:
     * no allocation (maybe a round trip to tcmd) while others wait */
    kv_entry_t *e = new_entry(x, h, &x->a[1], NULL, 20);
    if (!e)
        return;
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *old = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    long long v = 0;
    const char *why = NULL;
    if (old && !to_ll(kv_val(old), old->vlen, &v))
        why = ERR_INT;
    else if ((by > 0 && v > LLONG_MAX - by) || (by < 0 && v < LLONG_MIN - by))
        why = "ERR increment or decrement would overflow";
    if (why) {
        kv_unlock(s);
        kv_entry_free(e);
        out_err(x->c, "%s", why);
        return;
    }
    v += by;
    char digits[24];
    e->vlen = (uint32_t)snprintf(digits, sizeof digits, "%lld", v);
    memcpy(kv_val(e), digits, e->vlen);
    e->expire_ms = old ? old->expire_ms : 0;
    kv_put(s, e);
    kv_unlock(s);
    out_int(x->c, v);
}

static void cmd_incr(cmd_ctx_t *x)
{
    incr_by(x, 1);
}

static void cmd_decr(cmd_ctx_t *x)
{
    incr_by(x, -1);
}

static void cmd_incrby(cmd_ctx_t *x)
{
    long long by;
    if (arg_ll(x, 2, &by))
        incr_by(x, by);
}

static void cmd_decrby(cmd_ctx_t *x)
{
    long long by;
    if (!arg_ll(x, 2, &by))
        return;
    if (by == LLONG_MIN) {
        out_err(x->c, "ERR decrement would overflow");
        return;
    }
    incr_by(x, -by);
}

static void cmd_append(cmd_ctx_t *x)
{
    if (!fit(x))
        return;
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *old = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    size_t have = old ? old->vlen : 0;
    if (have + x->a[2].n > KV_MAX_BULK) {
        kv_unlock(s);
        out_err(x->c, "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
        return;
    }
    if (replace_value(x, s, h, old, old ? kv_val(old) : "", have, x->a[2].p, x->a[2].n))
        out_int(x->c, (long long)(have + x->a[2].n));
    kv_unlock(s);
}

static void cmd_strlen(cmd_ctx_t *x)
{
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *e = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    out_int(x->c, e ? e->vlen : 0);
    kv_unlock(s);
}

/* Commands on several keys see and change them all at once: every stripe
 * they touch is locked for the whole command. */
static unsigned lock_keys(cmd_ctx_t *x, unsigned first, unsigned step, uint64_t *hashes, kv_stripe_t **locked)
{
    unsigned k = 0;
    for (unsigned i = first; i < x->n; i += step)
        hashes[k++] = kv_hash(x->a[i].p, x->a[i].n);
    return kv_lock_many(x->w->t, hashes, k, locked);
}

static void cmd_mget(cmd_ctx_t *x)
{
    unsigned keys = x->n - 1;
    uint64_t *hashes = malloc(keys * sizeof *hashes);
    kv_stripe_t **locked = malloc(keys * sizeof *locked);
    if (!hashes || !locked) {
        free(hashes);
        free(locked);
        out_oom(x->c);
        return;
    }
    unsigned nl = lock_keys(x, 1, 1, hashes, locked);
    out_array(x->c, keys);
    for (unsigned i = 0; i < keys; i++) {
        kv_arg_t *k = &x->a[1 + i];
        kv_stripe_t *s = &x->w->t->stripes[hashes[i] & (KV_STRIPES - 1)];
        kv_entry_t *e = kv_find(x->w->t, s, hashes[i], k->p, k->n);
        out_value(x->c, e);
    }
    kv_unlock_many(locked, nl);
    free(hashes);
    free(locked);
}

static void cmd_mset(cmd_ctx_t *x)
{
    if (x->n % 2 == 0) {
        out_err(x->c, "ERR wrong number of arguments for 'mset' command");
        return;
    }
    if (!fit(x))
        return;
    unsigned pairs = (x->n - 1) / 2;
    uint64_t *hashes = malloc(pairs * sizeof *hashes);
    kv_stripe_t **locked = malloc(pairs * sizeof *locked);
    kv_entry_t **es = calloc(pairs, sizeof *es);
    bool ok = hashes && locked && es;
    for (unsigned i = 0; ok && i < pairs; i++) { /* every entry made before any is visible */
        kv_arg_t *k = &x->a[1 + 2 * i], *v = &x->a[2 + 2 * i];
        hashes[i] = kv_hash(k->p, k->n);
        ok = (es[i] = new_entry(x, hashes[i], k, v->p, v->n)) != NULL;
    }
    if (ok) {
        unsigned nl = kv_lock_many(x->w->t, hashes, pairs, locked);
        for (unsigned i = 0; i < pairs; i++)
            kv_put(&x->w->t->stripes[hashes[i] & (KV_STRIPES - 1)], es[i]);
        kv_unlock_many(locked, nl);
        out_ok(x->c);
    } else {
        for (unsigned i = 0; es && i < pairs; i++)
            if (es[i])
                kv_entry_free(es[i]);
        if (!hashes || !locked || !es)
            out_oom(x->c);
    }
    free(hashes);
    free(locked);
    free(es);
}

static void expire_in(cmd_ctx_t *x, long long scale)
{
    long long v;
    if (!arg_ll(x, 2, &v))
        return;
    if (x->n > 3) {
        out_err(x->c, "ERR Unsupported option %.*s", (int)(x->a[3].n > 32 ? 32 : x->a[3].n), x->a[3].p);
        return;
    }
    int64_t now = kv_now_ms();
    if ((v > 0 && v > (LLONG_MAX - now) / scale) || (v < 0 && v < LLONG_MIN / scale)) {
        out_err(x->c, "ERR invalid expire time in '%s' command", scale == 1000 ? "expire" : "pexpire");
        return;
    }
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *e = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    if (e && v <= 0) /* in the past: the key goes now */
        kv_delete(s, h, x->a[1].p, x->a[1].n);
    else if (e)
        kv_set_expire(s, e, now + v * scale);
    kv_unlock(s);
    out_int(x->c, e != NULL);
}

static void cmd_expire(cmd_ctx_t *x)
{
    expire_in(x, 1000);
}

static void cmd_pexpire(cmd_ctx_t *x)
{
    expire_in(x, 1);
}

static void ttl(cmd_ctx_t *x, bool ms)
{
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *e = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    long long r = !e ? -2 : !e->expire_ms ? -1 : e->expire_ms - kv_now_ms();
    if (e && e->expire_ms && r < 0)
        r = 0; /* expires this millisecond */
    kv_unlock(s); /* e is not looked at again: another worker may free it now */
    if (r > 0 && !ms)
        r = (r + 500) / 1000;
    out_int(x->c, r);
}

static void cmd_ttl(cmd_ctx_t *x)
{
    ttl(x, false);
}

static void cmd_pttl(cmd_ctx_t *x)
{
    ttl(x, true);
}

static void cmd_persist(cmd_ctx_t *x)
{
    uint64_t h = kv_hash(x->a[1].p, x->a[1].n);
    kv_stripe_t *s = kv_lock(x->w->t, h);
    kv_entry_t *e = kv_find(x->w->t, s, h, x->a[1].p, x->a[1].n);
    bool had = e && e->expire_ms;
    if (had)
        kv_set_expire(s, e, 0);
    kv_unlock(s);
    out_int(x->c, had);
}

static void cmd_dbsize(cmd_ctx_t *x)
{
    out_int(x->c, (long long)kv_table_keys(x->w->t, NULL));
}

static void cmd_flushall(cmd_ctx_t *x)
{
    if (x->n > 2 || (x->n == 2 && !arg_is(&x->a[1], "ASYNC") && !arg_is(&x->a[1], "SYNC"))) {
        out_err(x->c, "%s", ERR_SYNTAX);
        return;
    }
    kv_flush(x->w->t);
    out_ok(x->c);
}

static void cmd_select(cmd_ctx_t *x)
{
    long long db;
    if (!arg_ll(x, 1, &db))
        return;
    if (db != 0)
        out_err(x->c, "ERR DB index is out of range");
    else
        out_ok(x->c);
}

static void cmd_quit(cmd_ctx_t *x)
{
    out_ok(x->c);
    x->c->quit = true;
}

static uint64_t tcm_figure(const char *name)
{
    uint64_t v = 0;
    return tcm_stat(name, &v) == 0 ? v : 0;
}

static void cmd_info(cmd_ctx_t *x)
{
    const char *want = x->n > 1 ? x->a[1].p : "default";
    size_t wn = x->n > 1 ? x->a[1].n : 7;
    bool all = (wn == 3 && !strncasecmp(want, "all", 3)) || (wn == 7 && !strncasecmp(want, "default", 7)) ||
               (wn == 10 && !strncasecmp(want, "everything", 10));
#define SECTION(s) (all || (wn == strlen(s) && !strncasecmp(want, s, wn)))
    worker_t *w = x->w;
    kv_shared_t *sh = w->sh;
    uint64_t committed;
    bool on_tcm = tcm_stat("bytes_committed", &committed) == 0; /* else tcm-kv-peers: another heap */
    uint64_t connected = 0, connections = 0, commands = 0, rejected = 0, workers = 0, hits = 0, misses = 0;
    for (int i = 0; i < KV_MAX_WORKERS; i++) {
        kv_worker_stats_t *ws = &sh->workers[i];
        if (atomic_load(&ws->pid))
            workers++;
        connected += atomic_load(&ws->connected);
        connections += atomic_load(&ws->connections);
        commands += atomic_load(&ws->commands);
        rejected += atomic_load(&ws->rejected);
        hits += atomic_load(&ws->hits);
        misses += atomic_load(&ws->misses);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        out_oom(x->c);
        return;
    }
    if (SECTION("server"))
        fprintf(f,
                "# Server\r\nredis_version:7.0.0\r\ntcm_kv_version:" KV_VERSION "\r\nredis_mode:standalone\r\n"
                "process_id:%d\r\nworker_index:%d\r\nworkers:%" PRIu64 "\r\nworker_restarts:%" PRIu64 "\r\n"
                "tcp_port:%d\r\nuptime_in_seconds:%" PRId64 "\r\nallocator:%s\r\n\r\n",
                (int)getpid(), w->index, workers, atomic_load(&sh->worker_restarts), w->o->port,
                (kv_now_ms() - sh->started_ms) / 1000, on_tcm ? "tcm" : "peer");
    if (SECTION("clients"))
        fprintf(f, "# Clients\r\nconnected_clients:%" PRIu64 "\r\n\r\n", connected);
    if (SECTION("memory")) {
        fprintf(f, "# Memory\r\nused_memory:%" PRIu64 "\r\nmaxmemory:%" PRIu64 "\r\nmaxmemory_policy:allkeys-lru\r\n",
                kv_table_bytes(w->t), w->o->maxmemory);
        if (on_tcm) {
            static const char *const figures[] = {"bytes_reserved", "bytes_limit", "bytes_committed",
                                                  "bytes_clients", "bytes_central_free", "bytes_orphaned",
                                                  "clients_attached", "clients_died", "reclaimed_objects"};
            for (size_t i = 0; i < sizeof figures / sizeof *figures; i++)
                fprintf(f, "tcm_%s:%" PRIu64 "\r\n", figures[i], tcm_figure(figures[i]));
        }
        fprintf(f, "\r\n");
    }
    if (SECTION("stats"))
        fprintf(f,
                "# Stats\r\ntotal_connections_received:%" PRIu64 "\r\ntotal_commands_processed:%" PRIu64
                "\r\nrejected_connections:%" PRIu64 "\r\nexpired_keys:%" PRIu64 "\r\nevicted_keys:%" PRIu64
                "\r\nkeyspace_hits:%" PRIu64 "\r\nkeyspace_misses:%" PRIu64 "\r\nstripe_repairs:%" PRIu64
                "\r\n\r\n",
                connections, commands, rejected, atomic_load(&w->t->expired), atomic_load(&w->t->evicted),
                hits, misses, atomic_load(&w->t->repairs));
    if (SECTION("keyspace")) {
        uint64_t vol, keys = kv_table_keys(w->t, &vol);
        fprintf(f, "# Keyspace\r\n");
        if (keys)
            fprintf(f, "db0:keys=%" PRIu64 ",expires=%" PRIu64 ",avg_ttl=0\r\n", keys, vol);
    }
#undef SECTION
    fclose(f);
    out_bulk(x->c, buf, len);
    free(buf);
}

static void cmd_config(cmd_ctx_t *x)
{
    if (!arg_is(&x->a[1], "GET")) {
        if (arg_is(&x->a[1], "SET") || arg_is(&x->a[1], "RESETSTAT") || arg_is(&x->a[1], "REWRITE"))
            out_err(x->c, "ERR CONFIG %.*s is not supported by tcm-kv", (int)x->a[1].n, x->a[1].p);
        else
            out_err(x->c, "ERR unknown subcommand '%.*s'. Try CONFIG HELP.", (int)(x->a[1].n > 32 ? 32 : x->a[1].n),
                    x->a[1].p);
        return;
    }
    if (x->n != 3) {
        out_err(x->c, "ERR wrong number of arguments for 'config|get' command");
        return;
    }
    char port[16], maxmem[24], pattern[128];
    snprintf(port, sizeof port, "%d", x->w->o->port);
    snprintf(maxmem, sizeof maxmem, "%" PRIu64, x->w->o->maxmemory);
    snprintf(pattern, sizeof pattern, "%.*s", (int)(x->a[2].n < 127 ? x->a[2].n : 127), x->a[2].p);
    const char *params[][2] = {{"port", port},       {"bind", x->w->o->bind},  {"maxmemory", maxmem},
                               {"maxmemory-policy", "allkeys-lru"},        {"save", ""},
                               {"appendonly", "no"}, {"databases", "1"},      {"proto-max-bulk-len", "536870912"}};
    unsigned n = sizeof params / sizeof *params, hits = 0;
    for (unsigned i = 0; i < n; i++)
        hits += fnmatch(pattern, params[i][0], FNM_CASEFOLD) == 0;
    out_array(x->c, 2 * hits);
    for (unsigned i = 0; i < n; i++)
        if (fnmatch(pattern, params[i][0], FNM_CASEFOLD) == 0) {
            out_bulk(x->c, params[i][0], strlen(params[i][0]));
            out_bulk(x->c, params[i][1], strlen(params[i][1]));
        }
}

typedef struct command {
    const char *name; /* lower case */
    int arity; /* as Redis counts: the name included; -n means at least n */
    cmd_fn fn;
} command_t;

static void cmd_command(cmd_ctx_t *x);

static const command_t commands[] = {
    {"get", 2, cmd_get},         {"set", -3, cmd_set},         {"ping", -1, cmd_ping},
    {"echo", 2, cmd_echo},       {"getset", 3, cmd_getset},    {"del", -2, cmd_del},
    {"exists", -2, cmd_exists},  {"incr", 2, cmd_incr},        {"incrby", 3, cmd_incrby},
    {"decr", 2, cmd_decr},       {"decrby", 3, cmd_decrby},    {"append", 3, cmd_append},
    {"strlen", 2, cmd_strlen},   {"mget", -2, cmd_mget},       {"mset", -3, cmd_mset},
    {"expire", -3, cmd_expire},  {"pexpire", -3, cmd_pexpire}, {"ttl", 2, cmd_ttl},
    {"pttl", 2, cmd_pttl},       {"persist", 2, cmd_persist},  {"dbsize", 1, cmd_dbsize},
    {"flushall", -1, cmd_flushall}, {"info", -1, cmd_info},    {"config", -2, cmd_config},
    {"command", -1, cmd_command}, {"quit", -1, cmd_quit},      {"select", 2, cmd_select},
#ifdef KV_TEST_HOOKS
    {"debug", -2, cmd_debug}, /* tcm-kv-test only (debug.c) */
#endif
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void cmd_command(cmd_ctx_t *x)
{
    if (x->n >= 2 && arg_is(&x->a[1], "COUNT"))
        out_int(x->c, (long long)NCOMMANDS);
    else
        out_array(x->c, 0); /* no command table: clients fall back to plain use */
}

static const command_t *lookup(const kv_arg_t *a)
{
    char name[16];
    if (a->n >= sizeof name)
        return NULL;
    for (size_t i = 0; i < a->n; i++)
        name[i] = (char)tolower((unsigned char)a->p[i]);
    name[a->n] = 0;
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (name[0] == commands[i].name[0] && !strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

void kv_execute(worker_t *w, conn_t *c)
{
    unsigned n = c->nargs;
    if (n == 0)
        return;
    if (n > w->argv_cap) {
        kv_arg_t *grown = realloc(w->argv, n * sizeof *grown);
        if (!grown) {
            out_oom(c);
            return;
        }
        w->argv = grown;
        w->argv_cap = n;
    }
    for (unsigned i = 0; i < n; i++)
        w->argv[i] = (kv_arg_t){c->in + c->args[i].off, c->args[i].n};
    cmd_ctx_t x = {w, c, w->argv, n};
    atomic_store_explicit(&w->stats->commands, atomic_load_explicit(&w->stats->commands, memory_order_relaxed) + 1,
                          memory_order_relaxed); /* only this worker writes its figures */
    const command_t *cmd = lookup(&x.a[0]);
    if (!cmd) {
        char args[200] = "";
        size_t len = 0;
        for (unsigned i = 1; i < n && len < sizeof args - 40; i++)
            len += (size_t)snprintf(args + len, sizeof args - len, "'%.*s' ", (int)(x.a[i].n > 32 ? 32 : x.a[i].n),
                                    x.a[i].p);
        out_err(c, "ERR unknown command '%.*s', with args beginning with: %s", (int)(x.a[0].n > 64 ? 64 : x.a[0].n),
                x.a[0].p, args);
        return;
    }
    if ((cmd->arity > 0 && (int)n != cmd->arity) || (cmd->arity < 0 && (int)n < -cmd->arity)) {
        out_err(c, "ERR wrong number of arguments for '%s' command", cmd->name);
        return;
    }
    cmd->fn(&x);
}

