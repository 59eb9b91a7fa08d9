/* stats.c — the daemon's figures, computed once for every consumer. */
#define _GNU_SOURCE
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "prim.h"
#include "reclaim.h"
#include "samples.h"

const char *const tcm__op_names[TCM_NOPS] = {
#define TCM_OP_NAME(op, name) name,
    TCM_OP_NAMES(TCM_OP_NAME)
#undef TCM_OP_NAME
};

static const struct {
    const char *name, *doc;
    bool counter;
} heap_stats[] = {
#define TCM_STAT_ROW(name, kind, writer, doc) {#name, doc, #kind[0] == 'C'},
    TCM_HEAP_STATS(TCM_STAT_ROW)
#undef TCM_STAT_ROW
};

typedef struct usage {
    const tcm_server_t *srv;
    uint32_t threads;
    uint64_t cached;
} usage_t;

static bool add_usage(void *arg, const tcm_cache_view_t *v)
{
    usage_t *u = arg;
    if (v->kind == TCM_CACHE_THREAD) {
        u->threads += v->tc->in_use != 0;
        uint64_t ahead = v->tc->ahead_bytes; /* a batch asked for ahead of need, not yet taken in */
        u->cached += ahead <= (uint64_t)TCM_MAX_BATCH << 21 ? ahead : 0;
    } else if (v->kind == TCM_CACHE_RUNS) {
        for (uint32_t i = 0; i < v->n; i++) {
            uint32_t np = v->runs[i].npages;
            u->cached += (uint64_t)(np < u->srv->h.npages ? np : 0) << TCM_PAGE_SHIFT;
        }
    } else {
        u->cached += (uint64_t)v->n * u->srv->h.classes[v->cls].size;
    }
    return true;
}

void tcm__client_usage(const tcm_server_t *srv, const tcm_client_t *c, uint32_t *threads, uint64_t *cached)
{
    usage_t u = {srv, 0, 0};
    tcm__each_cache(srv, c, add_usage, &u, false);
    *threads = u.threads;
    *cached = u.cached;
}

double tcm__latency_upper_us(unsigned i)
{
    return i + 1 >= TCM_LAT_BUCKETS ? INFINITY : (double)((uint64_t)TCM_LAT_BASE_NS << i) / 1000.0;
}

static tcm_stat_row_t *row(tcm_stat_row_t *rows, size_t *n, size_t max, const char *name, const char *help,
                           uint64_t value, bool counter)
{
    if (*n >= max)
        return NULL;
    tcm_stat_row_t *r = &rows[(*n)++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->help = help;
    r->value = value;
    r->counter = counter;
    return r;
}

static uint64_t blocks_of(tcm_handle_t fd)
{
    int64_t b = fd >= 0 ? tcm__backed_bytes(fd) : 0;
    return b > 0 ? (uint64_t)b : 0;
}

/* The heap profile's figures (samples.c). */
static size_t profile_rows(const tcm_server_t *srv, tcm_stat_row_t *rows, size_t n, size_t max)
{
    const tcm_samples_t *sm = &srv->h.samples;
    row(rows, &n, max, "profile_samples", "live heap-profile samples: sampled allocations not freed yet "
        "(profile_sample)", atomic_load(&sm->live), false);
    row(rows, &n, max, "profile_sampled_bytes", "bytes those sampled allocations asked for",
        atomic_load(&sm->live_bytes), false);
    row(rows, &n, max, "profile_table_bytes", "bytes of the state segment the heap profile's tables have used "
        "(samples, and the records of the processes that allocated while sampling was on)",
        (uint64_t)atomic_load(&sm->hdr->samples_hw) * sizeof(tcm_sample_t) +
            (uint64_t)atomic_load(&sm->hdr->procs_hw) * sizeof(tcm_sample_proc_t), false);
    row(rows, &n, max, "profile_samples_taken", "samples this tcmd kept", atomic_load(&sm->taken), true);
    row(rows, &n, max, "profile_samples_refused", "samples not kept: their object freed before tcmd took them, not a "
        "run the client allocated itself, its user held its share of the table (a quarter), or the table was full",
        atomic_load(&sm->refused), true);
    return n;
}

size_t tcm__stats_snapshot(tcm_server_t *srv, tcm_stat_row_t *rows, size_t max)
{
    size_t n = 0;
    int64_t backed = tcm__backed_bytes(srv->heap_fd);
    TCM_STAT_SET_MAIN(srv->meta, bytes_committed, backed > 0 ? (uint64_t)backed : 0);
    TCM_STAT_SET_MAIN(srv->meta, bytes_limit, atomic_load(&srv->meta->config.heap_limit));
    uint64_t cached = 0, channels = 0;
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        uint32_t threads;
        uint64_t ccached;
        if (c && atomic_load(&c->rec->state) == TCM_REC_ACTIVE) {
            tcm__client_usage(srv, c, &threads, &ccached);
            cached += ccached;
        }
        if (c)
            channels += blocks_of(c->chan_fd);
    }
    /* everything tcm keeps on /dev/shm, as df counts it (st_blocks), next
     * to the heap's own committed bytes */
    uint64_t meta = blocks_of(srv->meta_fd), state = blocks_of(srv->state_fd);
    const _Atomic uint64_t *vals = (const _Atomic uint64_t *)&srv->meta->stats;
    for (size_t i = 0; i < sizeof heap_stats / sizeof heap_stats[0]; i++) {
        row(rows, &n, max, heap_stats[i].name, heap_stats[i].doc,
            atomic_load_explicit(&vals[i], memory_order_relaxed), heap_stats[i].counter);
        if (&vals[i] != &srv->meta->stats.bytes_committed)
            continue;
        row(rows, &n, max, "bytes_meta_committed", "bytes of the metadata segment backed by memory", meta, false);
        row(rows, &n, max, "bytes_state_committed",
            "bytes of the recovery state segment backed by memory (object records of the spans that exist, "
            "client records, intents)", state, false);
        row(rows, &n, max, "bytes_channels_committed", "bytes of the clients' channels backed by memory", channels,
            false);
        row(rows, &n, max, "bytes_shm_committed",
            "everything tcm keeps on /dev/shm: heap, metadata, state and channels, backed by memory (what df counts)",
            (backed > 0 ? (uint64_t)backed : 0) + meta + state + channels, false);
    }
    uint64_t clients = atomic_load(&srv->meta->stats.bytes_clients);
    uint64_t in_use = clients > cached ? clients - cached : 0;
    row(rows, &n, max, "bytes_client_caches", "bytes in clients' thread caches and transfer tiers", cached, false);
    row(rows, &n, max, "bytes_in_use", "bytes in use by applications (held by clients minus their caches)", in_use,
        false);
    tcm_stat_row_t *r = row(rows, &n, max, "fragmentation_ratio",
                            "bytes backed by memory per byte in use by applications", 0, false);
    if (r) {
        r->is_float = true;
        r->fvalue = in_use ? (double)(backed > 0 ? backed : 0) / (double)in_use : 0.0;
    }
    row(rows, &n, max, "uptime_seconds", "seconds since this tcmd started", (tcm__now_ns() - srv->start_ns) / 1000000000,
        false);
    uint64_t now = (uint64_t)time(NULL), born = srv->state->created_unix;
    row(rows, &n, max, "heap_age_seconds", "seconds since the heap was created (it outlives tcmd restarts)",
        now > born ? now - born : 0, false);
    row(rows, &n, max, "heap_migrations",
        "state layout migrations the heap went through (tcmd upgrades across a layout change)",
        srv->state->version - srv->state->born_version, false);
    const tcm_heap_t *h = &srv->h;
    int64_t huge = tcm__huge_mapped_bytes(srv->heap);
    row(rows, &n, max, "bytes_huge",
        "bytes of the heap the kernel backs with 2 MiB pages, as tcmd maps it (huge_collapse_ms)",
        huge > 0 ? (uint64_t)huge : 0, false);
    row(rows, &n, max, "huge_ranges", "2 MiB ranges of the heap collapsed and kept whole (they outlive tcmd restarts)",
        atomic_load(&h->huge_ranges), false);
    row(rows, &n, max, "huge_collapses", "ranges this tcmd collapsed into 2 MiB pages", atomic_load(&h->huge_collapses),
        true);
    row(rows, &n, max, "huge_collapse_failures", "collapses the kernel refused (huge_error says why)",
        atomic_load(&h->huge_failures), true);
    row(rows, &n, max, "huge_error",
        "errno of the last collapse that failed, 0 if the last one worked (12 ENOMEM: no free 2 MiB page; "
        "11 EAGAIN: pages busy; 22 EINVAL: this kernel cannot, see huge_off)",
        (uint64_t)atomic_load(&h->huge_errno), false);
    row(rows, &n, max, "huge_off",
        "1 when the kernel cannot collapse the heap (Linux before 6.1, shmem_enabled 'deny'): 4 KiB pages only",
        atomic_load(&srv->huge.off_err) != 0, false);
    row(rows, &n, max, "huge_splits", "huge ranges a release under pressure punched into (tcmctl release, a smaller "
        "heap limit, a full heap)", atomic_load(&h->huge_splits), true);
    row(rows, &n, max, "huge_dissolved", "huge ranges the decay gave back to 4 KiB pages: a quarter of each stayed "
        "free through a decay step", atomic_load(&h->huge_dissolved), true);
    row(rows, &n, max, "huge_collapse_us", "CPU time the collapser spent collapsing",
        atomic_load(&srv->huge.busy_ns) / 1000, true);
    n = profile_rows(srv, rows, n, max);
    char name[48];
    for (unsigned op = 0; op < TCM_OPS_COUNTED; op++) {
        snprintf(name, sizeof name, "requests_%s", tcm__op_names[op]);
        row(rows, &n, max, name, "ring requests served, by operation", atomic_load(&srv->dstats->ops[op]), true);
    }
    for (int st = 1; st < TCM_ST__COUNT; st++) {
        if (tcm__status_is_answer(st))
            continue;
        snprintf(name, sizeof name, "refused_%s", tcm__status_name(st));
        for (char *p = name; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
        row(rows, &n, max, name, "requests or objects refused, by reason", atomic_load(&srv->dstats->refused[st]),
            true);
    }
    return n;
}
