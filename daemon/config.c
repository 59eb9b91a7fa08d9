/* config.c — the settings table and its parsers. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mailbox.h"
#include "prim.h"
#include "util.h"

enum setting_type { T_SIZE, T_UINT, T_ADDR, T_LEVEL, T_GROUP, T_NICE };

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* One change being made: at start (the command line, the file) or at
 * runtime (tcmctl, SIGHUP); done hears of one the heap thread applies. */
typedef struct change {
    bool at_runtime;
    const char *value;
    tcm_config_done_t done;
    void *arg;
    char *err;
    size_t errlen;
} change_t;

/* The largest heap the layout can index. Page numbers, run lengths and
 * span record indices are uint32_t (tcm_span_t.first and .npages, page_span[],
 * the ring's page-run requests), and the end of a run (first + npages) must
 * fit one too: UINT32_MAX pages of 8 KiB, 32 TiB less one page. The
 * metadata that grows with it is sparse (37 bytes a page in meta, backed
 * below the top of the heap; the state's object records, per span that
 * exists). */
#define HEAP_SIZE_MAX ((uint64_t)UINT32_MAX << TCM_PAGE_SHIFT)
/* The end of a process's address space as the base setting assumes it
 * (x86-64 with 4-level paging and 64-bit Windows: 128 TiB): the heap,
 * mapped at the same address everywhere, must end below it. */
#define ADDR_SPACE_END (1ull << 47)

/* Settings that are more than a uint64_t field of tcm_server_t. */
static int set_max_threads(tcm_server_t *srv, uint64_t v, const change_t *ch);
static int set_allow_group(tcm_server_t *srv, uint64_t v, const change_t *ch);
static int set_spin(tcm_server_t *srv, uint64_t v, const change_t *ch);
static int set_heap_nice(tcm_server_t *srv, uint64_t v, const change_t *ch);
static int set_level(tcm_server_t *srv, uint64_t v, const change_t *ch);
static int set_heap_limit(tcm_server_t *srv, uint64_t v, const change_t *ch);
static int set_uid_quota(tcm_server_t *srv, uint64_t v, const change_t *ch);
static void show_uid_quota(const tcm_server_t *srv, char *out, size_t len);
static void show_max_threads(const tcm_server_t *srv, char *out, size_t len);
static void show_allow_group(const tcm_server_t *srv, char *out, size_t len);
static void show_spin(const tcm_server_t *srv, char *out, size_t len);
static int set_huge_collapse(tcm_server_t *srv, uint64_t v, const change_t *ch);
static void show_huge_collapse(const tcm_server_t *srv, char *out, size_t len);
static void show_heap_nice(const tcm_server_t *srv, char *out, size_t len);
static void show_level(const tcm_server_t *srv, char *out, size_t len);
static void show_heap_limit(const tcm_server_t *srv, char *out, size_t len);

#define NO_FIELD SIZE_MAX
#define FIELD(f) offsetof(tcm_server_t, f), NULL, NULL
#define HOOKS(set, show) NO_FIELD, set, show
/* Published to the metadata segment's config (clients read it there; an
 * adopted heap keeps it), scaled from the setting's unit. */
#define META(f, scale) offsetof(tcm_config_t, f), scale

/* The one table: the command line (--name-with-dashes), the config file,
 * SIGHUP, `tcmctl config get|set`, `tcmd --help` and `tcmd --list-settings`
 * (which the README's table is checked against) all read it. */
typedef struct setting {
    tcm_setting_info_t info;
    enum setting_type type;
    uint64_t min, max;
    const char *def; /* as --help shows it; "" : none */
    const char *arg; /* --help's name for the value */
    size_t field;    /* offset of its uint64_t in tcm_server_t, or NO_FIELD: */
    int (*set)(tcm_server_t *srv, uint64_t v, const change_t *ch);
    void (*show)(const tcm_server_t *srv, char *out, size_t len);
    size_t meta;     /* offset of its value in tcm_config_t; 0: not there */
    uint64_t meta_scale;
} setting_t;

static const setting_t settings[] = {
    {{"heap_size", false, "bytes reserved for the heap (sparse)"}, T_SIZE, 4u << 20, HEAP_SIZE_MAX, "1G", "SIZE",
     FIELD(heap_size)},
    {{"base", false, "address of the heap in every process"}, T_ADDR, 1u << 21, 0x7ff000000000ull,
     "0x7e8000000000", "ADDR", FIELD(base)},
    {{"max_threads", false, "thread caches per client process (more threads share its transfer tier)"}, T_UINT, 1,
     TCM_MAX_THREADS, TCM_DEFAULT_MAX_THREADS, "N", HOOKS(set_max_threads, show_max_threads)},
    {{"heap_limit", true, "bytes the heap may hand out (tcmctl resize; default: the heap size)"}, T_SIZE, 1u << 20,
     HEAP_SIZE_MAX, "", "SIZE", HOOKS(set_heap_limit, show_heap_limit), META(heap_limit, 1)},
    {{"tcache_budget", true, "bytes all thread caches of one process may hold"}, T_SIZE, 256u << 10, 1ull << 40,
     TCM_DEFAULT_TCACHE_BUDGET, "SIZE", FIELD(tcache_budget), META(tcache_budget, 1)},
    {{"xfer_budget", true, "bytes the transfer tier of one process may hold"}, T_SIZE, 0, 1ull << 40,
     TCM_DEFAULT_XFER_BUDGET, "SIZE", FIELD(xfer_budget), META(xfer_budget, 1)},
    {{"run_cache", true, "bytes of freed page runs (objects above 256K) one process keeps for reuse"}, T_SIZE, 0,
     1ull << 40, TCM_DEFAULT_RUN_CACHE, "SIZE", FIELD(run_cache), META(run_cache, 1)},
    {{"page_cache_cap", true, "free committed bytes kept at once when decay_ms is 0 (with decay, what a window does not reuse goes back)"}, T_SIZE, 0, 64ull << 40,
     TCM_DEFAULT_PAGE_CACHE_CAP, "SIZE", FIELD(page_cache_cap), META(page_cache_cap, 1)},
    {{"spin_us", true, "microseconds the heap thread polls before sleeping"}, T_UINT, 0, 1000000, "10", "N",
     HOOKS(set_spin, show_spin)},
    {{"heap_nice", true, "nice value of the heap thread, which every round trip waits on (-20 to 19)"},
     T_NICE, (uint64_t)-20, 19, "-10", "N", HOOKS(set_heap_nice, show_heap_nice)},
    {{"reconnect_timeout", true, "seconds a client waits for tcmd to come back before failing"}, T_UINT, 0, 86400,
     TCM_STRINGIFY(TCM_RECONNECT_DEFAULT_S), "N", FIELD(reconnect_timeout), META(reconnect_ms, 1000)},
    {{"decay_ms", true, "free pages unused this long go back to the OS, caches unused this long to tcmd (0: never)"},
     T_UINT, 0, 86400000, TCM_DEFAULT_DECAY_MS, "N", FIELD(decay_ms), META(decay_ms, 1)},
    {{"huge_collapse_ms", true, "milliseconds of CPU time a second tcmd may spend having the kernel put 2 MiB "
      "pages behind ranges of the heap that stay in use (0: 4 KiB pages only)"}, T_UINT, 0, 1000, "100", "N",
     HOOKS(set_huge_collapse, show_huge_collapse)},
    {{"profile_sample", true, "bytes a thread allocates, on average, per allocation sampled for the heap "
      "profile (tcmctl heap-profile; 0: no sampling)"}, T_SIZE, 0, 1u << 30, "2M", "SIZE", FIELD(profile_sample)},
    {{"profile_rate", true, "samples a thread may take a second: past it its intervals grow, the profile stays "
      "unbiased (0: no limit, and a sample waits for tcmd if need be)"}, T_UINT, 0, 1000000, "100", "N", FIELD(profile_rate)},
    {{"clients_per_uid", true, "client records (attached processes) one user may hold at once"}, T_UINT, 1,
     TCM_CLIENTS_MAX, TCM_STRINGIFY(TCM_DEFAULT_CLIENTS_PER_UID), "N", FIELD(clients_per_uid)},
    {{"conns_per_uid", true, "control connections one user may hold open (root and tcmd's user get "
      TCM_STRINGIFY(TCM_CONTROL_OPERATOR_RESERVE) " more)"}, T_UINT, 1, TCM_CONNS_PER_CLIENT * TCM_CLIENTS_MAX,
     TCM_STRINGIFY(TCM_DEFAULT_CONNS_PER_UID), "N", FIELD(conns_per_uid)},
    {{"conn_idle_s", true, "seconds a control connection that is not an attached client's may stay silent (0: no limit)"},
     T_UINT, 0, 86400, TCM_STRINGIFY(TCM_DEFAULT_CONN_IDLE_S), "N", FIELD(conn_idle_s)},
    {{"max_clients", false, "client records of a new heap: processes attached at once (an adopted heap keeps its own)"},
     T_UINT, TCM_MAX_CLIENTS_MIN, TCM_CLIENTS_MAX, TCM_STRINGIFY(TCM_DEFAULT_MAX_CLIENTS), "N", FIELD(max_clients)},
    {{"roots", false, "entries of a new heap's table of named roots (a power of two)"}, T_UINT, TCM_ROOTS_MIN,
     TCM_ROOTS_MAX, TCM_STRINGIFY(TCM_DEFAULT_ROOTS), "N", FIELD(roots)},
    {{"roots_per_uid", true, "roots one user may hold at once"}, T_UINT, 1, TCM_ROOTS_MAX,
     TCM_STRINGIFY(TCM_DEFAULT_ROOTS_PER_UID), "N", FIELD(roots_per_uid)},
    {{"uid_quota", true, "heap bytes each user but root and tcmd's may hold, caches and what its departed processes "
      "left included (0: no limit; tcmctl quota sets one per user or per user and name)"}, T_SIZE, 0, HEAP_SIZE_MAX,
     "0", "SIZE", HOOKS(set_uid_quota, show_uid_quota)},
    {{"log_level", true, "error, warn, info or debug"}, T_LEVEL, 0, 3, "info", "LEVEL", HOOKS(set_level, show_level)},
    {{"allow_group", false, "group (name or id) whose members may attach besides tcmd's own user"}, T_GROUP, 0,
     UINT32_MAX, "", "GROUP", HOOKS(set_allow_group, show_allow_group)},
};
#define NSETTINGS (sizeof settings / sizeof settings[0])

const tcm_setting_info_t *tcm__config_setting(size_t i)
{
    return i < NSETTINGS ? &settings[i].info : NULL;
}

static const setting_t *find(const char *key)
{
    char norm[64];
    snprintf(norm, sizeof norm, "%s", key);
    for (char *p = norm; *p; p++)
        if (*p == '-')
            *p = '_'; /* --heap-size and heap_size are the same key */
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strcmp(settings[i].info.name, norm) == 0)
            return &settings[i];
    return NULL;
}

const char *tcm__config_key(const char *key)
{
    const setting_t *s = find(key);
    return s ? s->info.name : NULL;
}

/* T_NICE's values and bounds are signed, stored as two's complement. */
static bool out_of_range(const setting_t *s, uint64_t v)
{
    if (s->type == T_NICE)
        return (int64_t)v < (int64_t)s->min || (int64_t)v > (int64_t)s->max;
    return v < s->min || v > s->max;
}

static int parse(const setting_t *s, const char *text, uint64_t *v)
{
    char *end;
    *v = 0;
    switch (s->type) {
    case T_SIZE:
        if (tcm__parse_size(text, v))
            return -EINVAL;
        break;
    case T_UINT:
    case T_ADDR:
        errno = 0;
        *v = strtoull(text, &end, s->type == T_ADDR ? 0 : 10);
        if (errno || end == text || *end || text[0] == '-')
            return -EINVAL;
        if (s->type == T_ADDR && (*v & ((1u << 21) - 1)))
            return -EINVAL; /* 2 MiB aligned */
        break;
    case T_GROUP: {
        tcm_gid_t gid;
        if (tcm__group_id(text, &gid) != 0)
            return -EINVAL;
        *v = gid;
        break;
    }
    case T_NICE: {
        errno = 0;
        long long n = strtoll(text, &end, 10);
        if (errno || end == text || *end)
            return -EINVAL;
        *v = (uint64_t)n;
        break;
    }
    case T_LEVEL:
        for (uint64_t i = 0; i < 4; i++)
            if (strcmp(text, level_names[i]) == 0) {
                *v = i;
                return 0;
            }
        return -EINVAL;
    }
    return out_of_range(s, *v) ? -EINVAL : 0;
}

static uint64_t *field(tcm_server_t *srv, const setting_t *s)
{
    return (uint64_t *)((char *)srv + s->field);
}

static int set_max_threads(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    (void)ch;
    srv->max_threads = (uint32_t)v;
    return 0;
}

static void show_max_threads(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, "%u", srv->max_threads);
}

static int set_allow_group(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    (void)ch;
    srv->allow_group = (tcm_gid_t)v;
    srv->allow_group_set = true;
    return 0;
}

static void show_allow_group(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, srv->allow_group_set ? "%u" : "", (unsigned)srv->allow_group);
}

static int set_spin(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    (void)ch;
    atomic_store(&srv->spin_ns, v * 1000);
    return 0;
}

static void show_spin(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, "%llu", (unsigned long long)(atomic_load(&srv->spin_ns) / 1000));
}

static int set_huge_collapse(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    (void)ch;
    atomic_store(&srv->huge_collapse_ms, v);
    return 0;
}

static void show_huge_collapse(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, "%llu", (unsigned long long)atomic_load(&srv->huge_collapse_ms));
}

static int set_uid_quota(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    (void)ch;
    atomic_store(&srv->uid_quota, v);
    return 0;
}

static void show_uid_quota(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, "%llu", (unsigned long long)atomic_load(&srv->uid_quota));
}

/* At runtime applied here (a refusal is the command's error); at start by
 * the heap thread, which warns and goes on at tcmd's own priority. */
static int set_heap_nice(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    int nice = (int)(int64_t)v;
    /* stored before the heap thread's id is read, which it publishes
     * before it reads this: one of the two applies the new value */
    int old = atomic_exchange(&srv->heap_nice, nice);
    uint64_t tid = atomic_load(&srv->heap_tid);
    int rc = ch->at_runtime && tid ? tcm__thread_set_nice(tid, nice) : 0;
    if (rc) {
        atomic_store(&srv->heap_nice, old);
        snprintf(ch->err, ch->errlen, "cannot give the heap thread nice %d: %s%s", nice, strerror(-rc),
                 rc == -EPERM || rc == -EACCES ? " (below 0 needs CAP_SYS_NICE or RLIMIT_NICE)" : "");
    }
    return rc;
}

static void show_heap_nice(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, "%d", atomic_load(&srv->heap_nice));
}

static int set_level(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    (void)srv, (void)ch;
    tcm__log_set_level((int)v);
    return 0;
}

static void show_level(const tcm_server_t *srv, char *out, size_t len)
{
    (void)srv;
    snprintf(out, len, "%s", level_names[tcm__log_level()]);
}

typedef struct limit_change {
    uint64_t limit;
    char value[32];
    tcm_config_done_t done;
    void *arg;
} limit_change_t;

static void heap_limit_applied(tcm_server_t *srv, void *arg, int rc, uint64_t in_use_end, const char *text)
{
    limit_change_t *lc = arg;
    char err[160] = "";
    (void)text;
    if (rc) {
        snprintf(err, sizeof err, "heap_limit not changed: %s", strerror(-rc));
    } else if (in_use_end) {
        char a[32], b[32];
        snprintf(err, sizeof err, "cannot lower the heap limit to %s: memory up to %s into the heap is in use",
                 tcm__format_size(lc->limit, b, sizeof b), tcm__format_size(in_use_end, a, sizeof a));
        rc = -EBUSY;
    } else {
        srv->heap_limit = lc->limit;
        tcm__config_publish(srv);
        tcm__log(TCM_LOG_INFO, "config: heap_limit = %s", lc->value);
    }
    if (lc->done)
        lc->done(srv, lc->arg, rc, err);
    else if (rc)
        tcm__log(TCM_LOG_ERROR, "%s", err);
    free(lc);
}

static int set_heap_limit(tcm_server_t *srv, uint64_t v, const change_t *ch)
{
    if (!ch->at_runtime) {
        srv->heap_limit = v;
        return 0;
    }
    if (v > srv->heap_size) {
        snprintf(ch->err, ch->errlen,
                 "heap_limit %llu is above the reserved size %llu (restart with a larger --heap-size)",
                 (unsigned long long)v, (unsigned long long)srv->heap_size);
        return -EINVAL;
    }
    /* the heap thread knows what is in use: it checks and applies */
    limit_change_t *lc = calloc(1, sizeof *lc);
    if (!lc) {
        snprintf(ch->err, ch->errlen, "out of memory");
        return -ENOMEM;
    }
    lc->limit = v & ~(uint64_t)(TCM_PAGE_SIZE - 1);
    snprintf(lc->value, sizeof lc->value, "%s", ch->value);
    lc->done = ch->done;
    lc->arg = ch->arg;
    tcm__mailbox_post(srv, TCM_MBOX_RESIZE, lc->limit, -1, heap_limit_applied, lc);
    return TCM_CONFIG_PENDING;
}

static void show_heap_limit(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, "%llu",
             (unsigned long long)(srv->meta ? atomic_load(&srv->meta->config.heap_limit) : srv->heap_limit));
}

static int apply(tcm_server_t *srv, const setting_t *s, uint64_t v, const change_t *ch)
{
    if (s->set)
        return s->set(srv, v, ch);
    *field(srv, s) = v;
    return 0;
}

void tcm__config_defaults(tcm_server_t *srv)
{
    char err[128];
    for (size_t i = 0; i < NSETTINGS; i++) {
        uint64_t v;
        if (settings[i].def[0] && parse(&settings[i], settings[i].def, &v) == 0)
            apply(srv, &settings[i], v, &(change_t){.value = settings[i].def, .err = err, .errlen = sizeof err});
    }
}

void tcm__config_usage(FILE *f)
{
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting_t *s = &settings[i];
        char opt[64];
        snprintf(opt, sizeof opt, "--%s %s", s->info.name, s->arg);
        for (char *p = opt; *p; p++)
            *p = *p == '_' ? '-' : *p;
        fprintf(f, "  %-25s %s%s%s%s%s\n", opt, s->info.help, s->def[0] ? " (default " : "", s->def,
                s->def[0] ? ")" : "", s->info.runtime ? "; runtime" : "");
    }
}

void tcm__config_list(FILE *f)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        fprintf(f, "%s\t%s\t%s\t%s\t%s\n", settings[i].info.name, settings[i].info.runtime ? "yes" : "no",
                settings[i].def, settings[i].arg, settings[i].info.help);
}

static _Atomic uint64_t *meta_value(tcm_server_t *srv, const setting_t *s)
{
    return (_Atomic uint64_t *)((char *)&srv->meta->config + s->meta);
}

void tcm__config_publish(tcm_server_t *srv)
{
    /* a setting with hooks (heap_limit) is published by whoever applies it:
     * the heap thread, at runtime */
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].meta && settings[i].field != NO_FIELD)
            atomic_store(meta_value(srv, &settings[i]), *field(srv, &settings[i]) * settings[i].meta_scale);
    TCM_STAT_SET_MAIN(srv->meta, bytes_limit, atomic_load(&srv->meta->config.heap_limit));
    /* not in tcm_config_t, which layout 14 filled: in room before it (tcm_layout.h) */
    atomic_store(&srv->meta->profile_sample, srv->profile_sample);
    atomic_store(&srv->meta->profile_rate, (uint32_t)srv->profile_rate);
    srv->meta->profile_set = 1;
    atomic_fetch_add(&srv->meta->config.gen, 1);
}

int tcm__config_set(tcm_server_t *srv, const char *key, const char *value, bool at_runtime, char *err,
                    size_t errlen, tcm_config_done_t done, void *arg)
{
    const setting_t *s = find(key);
    uint64_t v;
    if (!s) {
        snprintf(err, errlen, "unknown setting '%s' (tcmctl config get lists them)", key);
        return -ENOENT;
    }
    if (parse(s, value, &v)) {
        if (s->type == T_LEVEL)
            snprintf(err, errlen, "bad value '%s' for %s: expected error, warn, info or debug", value,
                     s->info.name);
        else if (s->type == T_GROUP)
            snprintf(err, errlen, "bad value '%s' for %s: no such group", value, s->info.name);
        else if (s->type == T_NICE)
            snprintf(err, errlen, "bad value '%s' for %s: expected a nice value from %lld to %lld", value,
                     s->info.name, (long long)s->min, (long long)s->max);
        else if (s->max == HEAP_SIZE_MAX && s->type == T_SIZE && !tcm__parse_size(value, &v) && v > s->max)
            snprintf(err, errlen,
                     "bad value '%s' for %s: more than a heap can be, %llu bytes (32T less one 8K page: "
                     "page numbers are 32-bit)",
                     value, s->info.name, (unsigned long long)s->max);
        else
            snprintf(err, errlen, "bad value '%s' for %s: expected %s from %llu to %llu", value, s->info.name,
                     s->type == T_SIZE ? "a size (e.g. 64M)" : "a number", (unsigned long long)s->min,
                     (unsigned long long)s->max);
        return -EINVAL;
    }
    if (at_runtime && !s->info.runtime) {
        char opt[64];
        snprintf(opt, sizeof opt, "%s", s->info.name);
        for (char *p = opt; *p; p++)
            *p = *p == '_' ? '-' : *p;
        snprintf(err, errlen, "%s can only be set when tcmd starts (--%s or the config file)", s->info.name, opt);
        return -EPERM;
    }
    const char *n = s->info.name;
    change_t ch = {at_runtime, value, done, arg, err, errlen};
    int rc = apply(srv, s, v, &ch);
    if (rc)
        return rc; /* an error, or TCM_CONFIG_PENDING: done tells */
    if (!at_runtime)
        srv->explicit_settings |= 1u << (s - settings);
    if (at_runtime) {
        tcm__config_publish(srv);
        tcm__log(TCM_LOG_INFO, "config: %s = %s", n, value);
    }
    return 0;
}

int tcm__config_check(const tcm_server_t *srv, char *err, size_t errlen)
{
    if (srv->heap_size % TCM_PAGE_SIZE) {
        snprintf(err, errlen, "heap size must be a multiple of %u", TCM_PAGE_SIZE);
        return -EINVAL;
    }
    if (srv->heap_size > ADDR_SPACE_END - srv->base) {
        char a[32];
        snprintf(err, errlen,
                 "a heap of %llu bytes at base 0x%llx would end at 0x%llx, past the end of the address space "
                 "(0x%llx): at most %s at this base (lower --heap-size, or --base)",
                 (unsigned long long)srv->heap_size, (unsigned long long)srv->base,
                 (unsigned long long)(srv->base + srv->heap_size), ADDR_SPACE_END,
                 tcm__format_size(ADDR_SPACE_END - srv->base, a, sizeof a));
        return -EINVAL;
    }
    if (srv->roots & (srv->roots - 1)) {
        snprintf(err, errlen, "roots must be a power of two (%llu is not)", (unsigned long long)srv->roots);
        return -EINVAL;
    }
    return 0;
}

void tcm__config_adopt(tcm_server_t *srv)
{
    char err[128];
    for (size_t i = 0; i < NSETTINGS; i++) {
        const setting_t *s = &settings[i];
        if (!s->meta || (srv->explicit_settings & 1u << i))
            continue;
        uint64_t v = atomic_load(meta_value(srv, s)) / s->meta_scale;
        if (!out_of_range(s, v))
            apply(srv, s, v, &(change_t){.value = "", .err = err, .errlen = sizeof err});
    }
    /* a heap from before these settings keeps their defaults */
    const setting_t *ps = find("profile_sample"), *pr = find("profile_rate");
    uint64_t v = atomic_load(&srv->meta->profile_sample), r = atomic_load(&srv->meta->profile_rate);
    if (srv->meta->profile_set && !(srv->explicit_settings & 1u << (ps - settings)) && !out_of_range(ps, v))
        srv->profile_sample = v;
    if (srv->meta->profile_set && !(srv->explicit_settings & 1u << (pr - settings)) && !out_of_range(pr, r))
        srv->profile_rate = r;
}

int tcm__config_get(tcm_server_t *srv, const char *key, char *value, size_t len)
{
    const setting_t *s = find(key);
    if (!s)
        return -ENOENT;
    if (s->show)
        s->show(srv, value, len);
    else if (s->type == T_ADDR)
        snprintf(value, len, "0x%llx", (unsigned long long)*field(srv, s));
    else
        snprintf(value, len, "%llu", (unsigned long long)*field(srv, s));
    return 0;
}

int tcm__config_load(tcm_server_t *srv, const char *path, bool at_runtime)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        tcm__log(TCM_LOG_ERROR, "cannot open config %s: %s", path, strerror(errno));
        return -1;
    }
    char line[512], err[256];
    int lineno = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line + strspn(line, " \t");
        if (*p == '#' || *p == '\n' || *p == '\r' || !*p)
            continue;
        char *eq = strchr(p, '=');
        if (!eq) {
            tcm__log(TCM_LOG_ERROR, "%s:%d: expected key = value", path, lineno);
            bad = 1;
            continue;
        }
        char *k_end = eq;
        while (k_end > p && (k_end[-1] == ' ' || k_end[-1] == '\t'))
            k_end--;
        *k_end = 0;
        char *val = eq + 1 + strspn(eq + 1, " \t");
        val[strcspn(val, " \t\r\n#")] = 0;
        char cur[64];
        const setting_t *s = find(p);
        if (at_runtime && s && !s->info.runtime) {
            /* unchanged startup settings are fine in a reloaded file */
            uint64_t v;
            if (tcm__config_get(srv, p, cur, sizeof cur) == 0 && !parse(s, val, &v) &&
                (s->type == T_ADDR ? v == srv->base : strtoull(cur, NULL, 0) == v))
                continue;
        }
        if (tcm__config_set(srv, p, val, at_runtime, err, sizeof err, NULL, NULL) < 0) {
            tcm__log(TCM_LOG_ERROR, "%s:%d: %s", path, lineno, err);
            bad = 1;
        }
    }
    fclose(f);
    return bad ? -1 : 0;
}
