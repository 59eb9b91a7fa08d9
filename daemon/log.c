/* log.c — timestamped log lines to stderr or a file; rate limits for the
 * lines a peer can trigger (per source) and for tcmd's own repeated ones. */
#include "log.h"
#include "prim.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static FILE *log_file;
static _Atomic int log_level = TCM_LOG_INFO;
static _Atomic long limited_second;
static _Atomic int limited_count;

void tcm__log_open(FILE *f, int level)
{
    log_file = f;
    log_level = level;
}

int tcm__log_level(void)
{
    return log_level;
}

void tcm__log_set_level(int level)
{
    log_level = level;
}

static void vlog(int level, const char *fmt, va_list ap)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    FILE *f = log_file ? log_file : stderr;
    char when[48];
    tcm__wall_clock(when, sizeof when);
    char line[1024];
    int n = snprintf(line, sizeof line, "%s tcmd[%u] %s: ", when, tcm__pid(), names[level]);
    if (n < 0 || n >= (int)sizeof line)
        return;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    fprintf(f, "%s\n", line); /* one call: lines from two threads do not interleave */
    fflush(f);
}

void tcm__log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void tcm__log_limited(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    long now = (long)time(NULL);
    if (atomic_exchange(&limited_second, now) != now)
        atomic_store(&limited_count, 0);
    int n = atomic_fetch_add(&limited_count, 1);
    if (n > 10)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (n == 10)
        tcm__log(level, "(more lines like the next suppressed this second)");
    vlog(level, fmt, ap);
    va_end(ap);
}

/* ---- lines a peer can trigger ----
 * Each source (a pid; 0 for a peer not yet known) has its own window of
 * PEER_WINDOW_NS with at most PEER_LINES lines, in a small table of recent
 * sources; all sources together have PEER_ALL_LINES per window on top, so
 * that many pids (a fork loop) cannot flood either. tcmd's own lines never
 * pass through here, so no peer can hide them. When a source's window ends
 * with lines suppressed, one line says how many. Any thread: a mutex, as
 * the heap thread logs refusals and the main loop everything else. */
#define PEER_ENTRIES 32
#define PEER_WINDOW_NS 10000000000ull /* 10 s */
#define PEER_LINES 5                  /* per source per window: the first ones say what it does */
#define PEER_ALL_LINES 50             /* all sources together per window */

typedef struct peer_entry {
    long long source;
    char who[48];       /* for the line that says what its window hid */
    uint64_t window_ns; /* start of its window; 0: free */
    uint64_t last_ns;   /* for eviction: least recently heard */
    uint32_t lines, suppressed;
    int level;
} peer_entry_t;

static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;
static peer_entry_t peers[PEER_ENTRIES];
static uint64_t all_window_ns;
static uint32_t all_lines, all_suppressed;

static void logf_locked(int level, const char *fmt, ...) TCM_PRINTF(2, 3);
static void logf_locked(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

#define SOURCE_UID_BASE (-2ll)              /* down to -2 - UINT32_MAX */
#define SOURCE_TEXT_BASE (-(1ll << 33))      /* and below: a hash of the text */

long long tcm__log_source_uid(uint32_t uid)
{
    return SOURCE_UID_BASE - (long long)uid;
}

static long long source_text(const char *text)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *s = (const unsigned char *)text; *s; s++)
        h = (h ^ *s) * 1099511628211ull;
    return SOURCE_TEXT_BASE - (long long)(h >> 32);
}

/* What a window's summary line calls its source: text for a text source. */
static void label(peer_entry_t *p, const char *text)
{
    if (p->source > 0)
        snprintf(p->who, sizeof p->who, "pid %lld", p->source);
    else if (text)
        snprintf(p->who, sizeof p->who, "%s", text);
    else if (p->source <= SOURCE_UID_BASE)
        snprintf(p->who, sizeof p->who, "uid %lld", SOURCE_UID_BASE - p->source);
    else
        snprintf(p->who, sizeof p->who, "%s",
                 p->source == TCM_LOG_PEER_METRICS ? "/metrics peers" : "peers not identified");
}

/* The entry's window is over (or it is being reused): say what it hid. */
static void peer_close_window_locked(peer_entry_t *p)
{
    if (p->suppressed)
        logf_locked(p->level, "(%s: %u more lines suppressed in the last %llu s)", p->who, p->suppressed,
                    (unsigned long long)(PEER_WINDOW_NS / 1000000000ull));
    p->window_ns = 0;
    p->lines = p->suppressed = 0;
}

static void peer_expire_locked(uint64_t now)
{
    for (int i = 0; i < PEER_ENTRIES; i++)
        if (peers[i].window_ns && now - peers[i].window_ns >= PEER_WINDOW_NS)
            peer_close_window_locked(&peers[i]);
    if (all_window_ns && now - all_window_ns >= PEER_WINDOW_NS) {
        if (all_suppressed)
            logf_locked(TCM_LOG_WARN,
                        "(%u more lines from peers suppressed in the last %llu s: too many peers logging)",
                        all_suppressed, (unsigned long long)(PEER_WINDOW_NS / 1000000000ull));
        all_window_ns = 0;
        all_lines = all_suppressed = 0;
    }
}

static void vlog_peer(int level, long long source, const char *text, const char *fmt, va_list ap)
{
    uint64_t now = tcm__now_ns() | 1; /* never 0, which marks a free entry */
    pthread_mutex_lock(&peer_lock);
    peer_expire_locked(now);
    peer_entry_t *p = NULL, *lru = &peers[0];
    for (int i = 0; i < PEER_ENTRIES && !p; i++) {
        if (peers[i].window_ns && peers[i].source == source)
            p = &peers[i];
        else if (!peers[i].window_ns || (lru->window_ns && peers[i].last_ns < lru->last_ns))
            lru = &peers[i];
    }
    if (!p) {
        p = lru;
        if (p->window_ns)
            peer_close_window_locked(p); /* a full table forgets the source heard least recently */
        p->source = source;
        p->window_ns = now;
        label(p, text);
    }
    p->last_ns = now;
    if (!all_window_ns)
        all_window_ns = now;
    if (p->lines >= PEER_LINES) {
        p->suppressed++;
        p->level = level < p->level ? level : p->level;
    } else if (all_lines >= PEER_ALL_LINES) {
        all_suppressed++;
    } else {
        p->lines++;
        all_lines++;
        if (p->lines == 1)
            p->level = level;
        vlog(level, fmt, ap);
    }
    pthread_mutex_unlock(&peer_lock);
}

void tcm__log_peer(int level, long long source, const char *fmt, ...)
{
    if (level > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog_peer(level, source, NULL, fmt, ap);
    va_end(ap);
}

void tcm__log_peer_text(int level, const char *text, const char *fmt, ...)
{
    if (level > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog_peer(level, source_text(text), text, fmt, ap);
    va_end(ap);
}

void tcm__log_peer_tick(void)
{
    pthread_mutex_lock(&peer_lock);
    peer_expire_locked(tcm__now_ns() | 1);
    pthread_mutex_unlock(&peer_lock);
}
